//! SSTables (sorted string tables).
