//! The index: an LSM-tree mapping keys to inline values or value pointers.
//!
//! Parts, one concept a module: internal keys ([`key`]), cursor iterators
//! ([`iter`], [`merger`]), the [`memtable`] over a concurrent [`skiplist`],
//! SSTables ([`sstable`]) with the block [`cache`] and [`table_cache`], the
//! version set and manifest ([`version`]), file naming ([`filename`]) and
//! leveled [`compaction`]. The write-ahead log is the record framing of
//! [`crate::format::record`] carrying encoded write batches.

pub mod cache;
pub mod compaction;
pub mod filename;
pub mod hash;
pub mod iter;
pub mod key;
pub mod memtable;
pub mod merger;
pub mod skiplist;
pub mod sstable;
pub mod table_cache;
pub mod version;
