//! KT-Store's TrieTables, the `trie` layout (KT-Store, NPC '18, §3).

pub mod table;
pub mod trie;
