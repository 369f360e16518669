//! The index: an LSM-tree mapping keys to inline values or value pointers.
//!
//! Parts, one concept a module: internal keys ([`key`]), cursor iterators
//! ([`iter`]), the memtable, the write-ahead log, SSTables ([`sstable`]), the
//! version set and manifest ([`version`]) and leveled compaction
//! ([`compaction`]).

pub mod iter;
pub mod key;
pub mod sstable;
