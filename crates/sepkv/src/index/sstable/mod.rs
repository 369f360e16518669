//! SSTables (sorted string tables): immutable files of internal-key-sorted
//! entries, written once by a [`TableBuilder`] and read by a [`Table`].
//!
//! A table is a sequence of checksummed blocks closed by a fixed-size footer.
//! Data blocks hold the entries; one bloom filter over the table's user keys
//! lets point lookups skip tables that cannot hold the key; the index block
//! maps, for every data block, a separator key (`>=` the block's last key and
//! `<` the next block's first key) to the block's location. A reader opens a
//! table by reading the footer, then the index and the filter, which it keeps
//! in memory; data blocks are read on demand, verified, and shared through the
//! [`BlockCache`](crate::index::cache::BlockCache).
//!
//! # File format (frozen: format version 1)
//!
//! All integers are little-endian; `varint` is LEB128.
//!
//! ```text
//! table     := data_block* [filter_block] metaindex_block index_block footer
//!
//! block     := contents  type:u8  crc:u32         -- the 5-byte trailer
//!   type    := 0 (no compression; the only type of version 1)
//!   crc     := masked crc32c(contents ++ type)
//!
//! contents  := entry*  restart:u32{n}  n:u32      -- data, metaindex, index
//!   entry   := shared:varint32  non_shared:varint32  value_len:varint32
//!              key_delta[non_shared]  value[value_len]
//!              -- key = previous key[..shared] ++ key_delta
//!   restart := offset of an entry with shared = 0; restart[0] = 0,
//!              strictly increasing; n = 0 exactly when there are no entries
//!
//!   +-------+-------+-----+-------+------------+-----+--------------+---+
//!   |entry 0|entry 1| ... |entry m| restart[0] | ... | restart[n-1] | n |
//!   +-------+-------+-----+-------+------------+-----+--------------+---+
//!
//! data block      entries: internal key -> value, a restart point every
//!                 restart_interval entries
//! filter block    contents := bits[m/8] k:u8 (bloom filter over the user
//!                 keys, XXH3-64 + double hashing; see `filter`)
//! metaindex block entries: meta block name -> block handle, bytewise order;
//!                 "filter.bloom" -> the filter block (absent: no filter);
//!                 "filter.blocks" -> one filter per data block (written
//!                 instead of "filter.bloom" in the segments of a DTable,
//!                 see `crate::index::dtable`)
//! index block     entries: separator internal key -> block handle of the
//!                 data block, one restart point per entry
//! block handle    := offset:varint64  size:varint64   (size excludes trailer)
//!
//! footer (56 bytes, at file_size - 56):
//!   +-----------------+-------------+---------+---------+-----+----------+
//!   | metaindex handle| index handle| zero pad| version | crc | magic    |
//!   |   varints       |   varints   | to 40 B |   u32   | u32 | u64      |
//!   +-----------------+-------------+---------+---------+-----+----------+
//!   0                                         40        44    48        56
//!   version := 1;  crc := masked crc32c(footer[0..44])
//!   magic   := the bytes "sepkvSST" (0x5453_5376_6b70_6573 as u64le)
//! ```
//!
//! Every corrupt byte is reported as [`Error::Corruption`](crate::Error)
//! naming the file and the offset of the damaged block (or of the footer);
//! decoding never panics, whatever the bytes.
//!
//! # Thread-safety
//!
//! [`Table`] is immutable after `open`, `Send + Sync`, and shared through
//! `Arc`; a [`TableIterator`] holds an `Arc` of its table and is used by one
//! thread at a time. A [`TableBuilder`] belongs to one thread.

mod block;
mod builder;
mod filter;
mod footer;
mod index_search;
pub(crate) mod map_gauge;
mod table;

pub(crate) use block::{block_trailer, check_trailer, Block, BLOCK_TRAILER_LEN};
pub use builder::{TableBuilder, TableOptions, TableSummary};
pub(crate) use filter::{key_hash, BloomFilter};
pub(crate) use footer::BlockHandle;
// What the unit tests and the fuzzing entry points build and decode blocks,
// filters and footers with.
pub(crate) use map_gauge::MapGauge;
pub(crate) use table::READ_AHEAD_MIN;
pub use table::{ReadCtx, Table, TableIterator};
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use {
    block::{BlockBuilder, BlockIter, Cmp},
    filter::FilterBuilder,
    footer::{Footer, FOOTER_LEN},
};

/// Name of the bloom filter's entry in the metaindex block.
pub(crate) const FILTER_META_NAME: &str = "filter.bloom";

/// Name of the per-data-block filters' entry in the metaindex block (the
/// segments of a DTable, LWC-tree §3.3): `(offset:varint64,
/// lenprefixed filter)*`, one bloom filter per data block in file order.
pub(crate) const BLOCK_FILTERS_META_NAME: &str = "filter.blocks";
