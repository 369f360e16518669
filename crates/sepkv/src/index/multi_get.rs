//! Sorted, batched point lookups: many keys looked up at one read view,
//! each index data block loaded once for all the keys that fall in it.
//!
//! Value-store GC judges every record it reads by whether the index still
//! points at it (WiscKey §3.3.2). Looked up one at a time, each key that
//! reaches a table loads one data block there — from the block cache, or
//! read and checksummed in place through the table's mapping, or read from
//! the file — even when the step's keys share blocks. A batch instead
//! visits its keys in key order ([`key_order`]) and keeps, per table, the
//! data block its last lookup loaded ([`BlockReuse`]): a key whose seek in
//! the table's index lands on that same block uses it again. A batch thus
//! loads one block per distinct (table, data block) its keys reach.
//!
//! Nothing else changes: every key still goes through the same memtables,
//! tables, bloom filters and seeks as a one-key lookup, at a read view
//! pinned once for the batch the way a one-key lookup pins its own (the
//! memtables and table version first, then the latest sequence number).
//! The answers are therefore those of one-key lookups made at that view.
//!
//! Thread-safety: a [`BlockReuse`] serves one batch on one thread; the
//! tables it reads are shared and immutable.

use super::sstable::Block;
use crate::error::Result;
use std::collections::HashMap;
use std::sync::Arc;

/// The data block each table's last lookup of a batch loaded, kept so the
/// batch's next key in the same block does not load it again; and how many
/// blocks the batch loaded and reused.
///
/// A table is named by its file number and the size it is read at (a
/// DTable's segments share a file and differ in size); a block by its
/// offset in the file. Keys visited in ascending order meet each table's
/// blocks in ascending order, so one block per table is all a batch needs
/// to keep.
#[derive(Default)]
pub struct BlockReuse {
    last: HashMap<(u64, u64), (u64, Arc<Block>)>,
    loads: u64,
    reused: u64,
}

impl std::fmt::Debug for BlockReuse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockReuse")
            .field("tables", &self.last.len())
            .field("loads", &self.loads)
            .field("reused", &self.reused)
            .finish()
    }
}

impl BlockReuse {
    /// An empty set, for one batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Data blocks the batch loaded (from the block cache, a mapping or
    /// the file).
    pub fn loads(&self) -> u64 {
        self.loads
    }

    /// Lookups of the batch that used a block an earlier key had loaded.
    pub fn reused(&self) -> u64 {
        self.reused
    }

    /// The block at `offset` of `table` (file number, size read at): the
    /// one kept from the table's last lookup when it is that block, else
    /// what `load` returns, which is then kept instead.
    ///
    /// # Errors
    /// What `load` returns.
    pub(crate) fn block(
        &mut self,
        table: (u64, u64),
        offset: u64,
        load: impl FnOnce() -> Result<Arc<Block>>,
    ) -> Result<Arc<Block>> {
        if let Some((at, block)) = self.last.get(&table) {
            if *at == offset {
                self.reused += 1;
                return Ok(block.clone());
            }
        }
        let block = load()?;
        self.loads += 1;
        self.last.insert(table, (offset, block.clone()));
        Ok(block)
    }
}

/// The positions of `keys` in ascending key order (equal keys in their
/// given order): the order a batch visits them in.
pub fn key_order<K: AsRef<[u8]>>(keys: &[K]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by(|&a, &b| keys[a].as_ref().cmp(keys[b].as_ref()));
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_order_sorts_positions_and_keeps_equal_keys_in_order() {
        let keys: [&[u8]; 5] = [b"c", b"a", b"b", b"a", b""];
        assert_eq!(key_order(&keys), [4, 1, 3, 2, 0]);
        assert!(key_order::<&[u8]>(&[]).is_empty());
    }

    #[test]
    fn a_block_is_loaded_once_per_run_of_lookups_in_it() {
        let block = || Ok(Arc::new(Block::new(vec![0, 0, 0, 0]).expect("empty block")));
        let mut r = BlockReuse::new();
        for (table, offset) in [(1, 0), (1, 0), (2, 0), (1, 0), (1, 4096), (1, 4096), (2, 0)] {
            r.block((table, 100), offset, block).unwrap();
        }
        // Table 1: blocks 0 and 4096, each loaded once; table 2: block 0
        // once, kept while table 1 was read.
        assert_eq!((r.loads(), r.reused()), (3, 4));
        // A failed load is returned and counts nothing.
        let failed = r.block((3, 1), 0, || {
            Err(crate::error::Error::InvalidArgument("no such block".into()))
        });
        assert!(failed.is_err());
        assert_eq!(r.loads(), 3);
    }
}
