//! DTables: the append-only tables of the LWC-tree (LWC-tree §3.3).
//!
//! A DTable is one file that grows by appends. Each lightweight compaction
//! that routes entries to it appends one **segment** and a new **tail**; the
//! bytes written before are never modified. A segment is laid out exactly as
//! an SSTable of [`crate::index::sstable`] (data blocks with their 5-byte
//! trailer and CRC-32C, metaindex, index block, 56-byte SSTable footer),
//! with **one bloom filter per data block** (the meta block
//! `filter.blocks`, §3.3) beside the SSTable's whole-table filter
//! (`filter.bloom`, here one per segment). A lookup probes the segment
//! filter first, so that a segment without its key costs one filter probe
//! and no index search; the per-block filter then rules out the one block
//! the index picks (Algorithm 4). Segments written before the segment
//! filter was added have none and are searched by index and block filters
//! alone; older readers use the segment filter as any SSTable filter. The
//! tail that follows
//! the segment holds the table's metadata as of this append:
//!
//! - the **segment directory**: one entry per segment, in append order, each
//!   with its sequence number (1, 2, …; the index segments of §3.3) and the
//!   end offset of its SSTable footer, so a reader opens every segment's
//!   index and filters;
//! - the **overlapped metaindex** (§3.2): for each DTable of the next level
//!   that overlapped this one when the tail was written, its file number,
//!   the size (tail end) it had, and a copy of its segment directory. A
//!   lightweight compaction of this table then appends to those tables
//!   without reading their tails, as long as the recorded size is still
//!   theirs (otherwise it reads the tail: the copy is only a cache);
//! - the **DTable footer**, the last 56 bytes.
//!
//! # Dead bytes
//!
//! Two kinds of bytes in a DTable serve no reader once a newer append
//! lands: the older tails (and any torn append skipped over), found from
//! the directory as the gaps between segments; and the entries of older
//! segments whose user keys a newer segment rewrote. A segment records the
//! latter when it is appended, estimated by probing the older segments'
//! filters with its keys (the `lwc.shadowed` meta block, [`Shadowed`]).
//! [`DTable::dead_bytes`] sums both; the lightweight compaction merges a
//! table when an append would take them past a share of its size.
//!
//! # File format (frozen: DTable format version 1)
//!
//! ```text
//! dtable   := append+
//! append   := [garbage] segment directory_block overlapped_block dfooter
//! segment  := data_block+ block_filters [bloom] [shadowed] metaindex index sst_footer
//!             -- an SSTable whose metaindex names "filter.blocks" and,
//!             -- when written with them, "filter.bloom" and "lwc.shadowed"
//! block_filters := (offset:varint64 lenprefixed bloom)*   one per data block
//! shadowed := entries:varint64 bytes:varint64   what the segment made stale
//!             in the older segments when it was appended (an estimate)
//!
//! directory_block  := count:varint64 (seq:varint64 end:varint64
//!                     entries:varint64 bytes:varint64){count}   + trailer
//! overlapped_block := count:varint64 (number:varint64 size:varint64
//!                     lenprefixed directory_contents){count}    + trailer
//!   trailer := type:u8 (0) crc:u32 (masked crc32c of contents ++ type)
//!
//! dfooter (56 bytes, at size - 56):
//!   +-----------------+------------------+---------+---------+-----+-------+
//!   | directory handle| overlapped handle| zero pad| version | crc | magic |
//!   +-----------------+------------------+---------+---------+-----+-------+
//!   0                                    40        44        48    56
//!   version := 1; crc := masked crc32c(dfooter[0..44])
//!   magic   := the bytes "sepkvDTB"
//! ```
//!
//! # Crash safety
//!
//! The manifest records each DTable's size, the end of its newest durable
//! footer; a reader opens the footer at `size - 56` and ignores every byte
//! past `size`. An append is synced before the version edit naming the new
//! size is logged, so a crash at any point leaves either the old size (the
//! torn or unreferenced append is ignored; the next append lands after it,
//! `[garbage]` above) or the new one. Damage to any byte a reader uses is
//! [`Error::Corruption`](crate::Error) naming the file and offset.
//!
//! # Thread-safety
//!
//! A [`DTable`] is immutable (one footer, one size) and `Send + Sync`; a
//! newer footer is a newer `DTable` value. Appends are made by the one
//! background thread that runs compactions.

mod format;
mod reader;
mod writer;

pub use format::{Aggregated, Directory, SegmentEntry, Shadowed};
pub use reader::{DTable, DTableIterator};
pub use writer::{append_segment, AddEntry, AppendOutcome};

pub(crate) use format::DTABLE_MAGIC;
