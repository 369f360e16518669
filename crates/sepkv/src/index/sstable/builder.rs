//! Writing a table: [`TableBuilder`] streams sorted entries into data
//! blocks, then writes the filter, metaindex and index blocks and the footer.
//!
//! Invariants: entries are added in strictly increasing internal-key order
//! (checked by `debug_assert`); a data block is cut once its contents reach
//! `block_size` (with `block_align`, before an entry would carry it past
//! its aligned size, and each data block starts on an [`ALIGN`] boundary);
//! the index entry of a block is written only when the first key of the
//! next block (or the end of the table) is known, so that its separator
//! can be shortened to a key `>=` the block's last key and `<` the next
//! block's first key. Every byte written is counted in [`IoStats`] under
//! the builder's category. After an I/O error the builder refuses further
//! work and `finish` returns that error; the partial file is the caller's to
//! delete.
//!
//! Thread-safety: a builder is owned by one thread (`Send`).

use super::block::{block_trailer, BlockBuilder};
use super::filter::FilterBuilder;
use super::footer::{BlockHandle, Footer, FOOTER_LEN};
use super::{BLOCK_FILTERS_META_NAME, FILTER_META_NAME};
use crate::error::{Error, Result};
use crate::fs::{IoCategory, IoStats, WritableFile};
use crate::index::key::{
    compare_internal, pack_trailer, user_key, ValueType, MAX_SEQ, TRAILER_LEN,
};
use std::cmp::Ordering;
use std::path::PathBuf;
use std::sync::Arc;

/// Trailer given to shortened separator keys: the smallest internal key of
/// its user key that still parses.
fn separator_trailer() -> [u8; TRAILER_LEN] {
    pack_trailer(MAX_SEQ, ValueType::Pointer as u8).to_le_bytes()
}

/// A key `k` with `last <= k < next` in internal order, shorter than `last`
/// when the user keys allow it.
fn shortest_separator(last: &[u8], next: &[u8]) -> Vec<u8> {
    let (a, b) = (user_key(last), user_key(next));
    let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    if common + 1 < a.len() && common < b.len() {
        let byte = a[common];
        if byte < 0xff && byte + 1 < b[common] {
            let mut sep = a[..=common].to_vec();
            sep[common] = byte + 1;
            sep.extend_from_slice(&separator_trailer());
            debug_assert_eq!(compare_internal(last, &sep), Ordering::Less);
            debug_assert_eq!(compare_internal(&sep, next), Ordering::Less);
            return sep;
        }
    }
    last.to_vec()
}

/// A key `k >= last` in internal order, shorter than `last` when possible.
fn short_successor(last: &[u8]) -> Vec<u8> {
    let a = user_key(last);
    if let Some(i) = a.iter().position(|&b| b != 0xff) {
        if i + 1 < a.len() {
            let mut sep = a[..=i].to_vec();
            sep[i] += 1;
            sep.extend_from_slice(&separator_trailer());
            debug_assert_eq!(compare_internal(last, &sep), Ordering::Less);
            return sep;
        }
    }
    last.to_vec()
}

/// The unit `block_align` aligns data blocks to: one page, the unit a
/// device and the kernel's page cache read.
pub const ALIGN: u64 = crate::fs::PAGE_SIZE;

/// The bloom filter of one data block: `(block offset, encoded filter)`.
type BlockFilter = (u64, Vec<u8>);

/// Options of the tables a [`TableBuilder`] writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableOptions {
    /// Contents size at which a data block is cut (bytes, before the
    /// trailer).
    pub block_size: usize,
    /// Entries between restart points in a data block (0 is taken as 1).
    pub restart_interval: usize,
    /// Bloom filter bits per distinct user key; 0 writes no filter.
    pub bloom_bits_per_key: usize,
    /// Data blocks start on `ALIGN` boundaries and take at most
    /// `block_size` rounded up to `ALIGN`, trailer included, unless one
    /// entry is larger: a point read then touches the fewest pages
    /// ([`Options::block_align`](crate::Options::block_align)).
    pub block_align: bool,
}

impl Default for TableOptions {
    /// 4 KiB blocks, a restart point every 16 entries, 10 bits per key.
    fn default() -> Self {
        TableOptions {
            block_size: 4096,
            restart_interval: 16,
            bloom_bits_per_key: 10,
            block_align: false,
        }
    }
}

/// What [`TableBuilder::finish`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSummary {
    /// Size of the finished file in bytes.
    pub file_size: u64,
    /// Number of entries.
    pub entries: u64,
    /// Smallest internal key (empty for an empty table).
    pub smallest: Vec<u8>,
    /// Largest internal key (empty for an empty table).
    pub largest: Vec<u8>,
}

/// Writes one SSTable.
pub struct TableBuilder {
    file: Box<dyn WritableFile>,
    path: PathBuf,
    opts: TableOptions,
    stats: Arc<IoStats>,
    category: IoCategory,
    /// Bytes written so far (the offset of the next block).
    offset: u64,
    data_block: BlockBuilder,
    index_block: BlockBuilder,
    filter: Option<FilterBuilder>,
    /// Per-data-block filters (DTable segments): the filter of the block
    /// being built, and `(block offset, filter)` of the finished blocks.
    block_filters: Option<(FilterBuilder, Vec<BlockFilter>)>,
    /// Further meta blocks `(name, contents)`, named after the filters'
    /// in bytewise order (a DTable segment's `lwc.shadowed`).
    extra_meta: Vec<(&'static str, Vec<u8>)>,
    /// Handle of the last data block, whose index entry waits for the next
    /// key.
    pending: Option<BlockHandle>,
    smallest: Vec<u8>,
    last_key: Vec<u8>,
    entries: u64,
    /// The first error met; later calls return it.
    failed: Option<Error>,
}

impl std::fmt::Debug for TableBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableBuilder")
            .field("path", &self.path)
            .field("offset", &self.offset)
            .field("entries", &self.entries)
            .finish_non_exhaustive()
    }
}

impl TableBuilder {
    /// A builder writing to `file` (empty, named `path` for errors).
    /// `restart_interval == 0` is taken as 1; `bloom_bits_per_key == 0`
    /// writes no filter.
    pub fn new(
        file: Box<dyn WritableFile>,
        path: PathBuf,
        opts: TableOptions,
        stats: Arc<IoStats>,
        category: IoCategory,
    ) -> Self {
        let filter =
            (opts.bloom_bits_per_key > 0).then(|| FilterBuilder::new(opts.bloom_bits_per_key));
        TableBuilder {
            offset: file.len(),
            file,
            path,
            data_block: BlockBuilder::new(opts.restart_interval),
            // Every index entry is a restart point: binary search covers all.
            index_block: BlockBuilder::new(1),
            filter,
            block_filters: None,
            extra_meta: Vec::new(),
            opts,
            stats,
            category,
            pending: None,
            smallest: Vec::new(),
            last_key: Vec::new(),
            entries: 0,
            failed: None,
        }
    }

    /// Adds one bloom filter per data block, written as the meta block
    /// [`BLOCK_FILTERS_META_NAME`] (the segments of a DTable, LWC-tree
    /// §3.3), beside the table-wide filter. The table-wide one lets a
    /// lookup pass a segment that lacks its key with one filter probe,
    /// before any index search; a per-block one then rules out the data
    /// block the index picks. No effect when `bloom_bits_per_key == 0`.
    pub(crate) fn with_block_filters(mut self) -> Self {
        if self.filter.is_some() {
            self.block_filters =
                Some((FilterBuilder::new(self.opts.bloom_bits_per_key), Vec::new()));
        }
        self
    }

    /// Adds the meta block `name` with `contents`, written after the
    /// filters. Names must sort after [`FILTER_META_NAME`] and come in
    /// bytewise order (the metaindex is searched by name).
    pub(crate) fn with_meta_block(mut self, name: &'static str, contents: Vec<u8>) -> Self {
        debug_assert!(name > FILTER_META_NAME);
        debug_assert!(self.extra_meta.last().is_none_or(|(n, _)| *n < name));
        self.extra_meta.push((name, contents));
        self
    }

    fn check(&self) -> Result<()> {
        match &self.failed {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Adds an entry. Internal keys must be strictly increasing in
    /// [`compare_internal`] order.
    pub fn add(&mut self, ikey: &[u8], value: &[u8]) -> Result<()> {
        self.check()?;
        debug_assert!(ikey.len() >= TRAILER_LEN, "internal key too short");
        debug_assert!(
            self.entries == 0 || compare_internal(&self.last_key, ikey) == Ordering::Less,
            "keys added out of order"
        );
        if ikey.len() > u32::MAX as usize / 2 || value.len() > u32::MAX as usize / 2 {
            return Err(Error::InvalidArgument(format!(
                "table entry too large (key {} bytes, value {} bytes)",
                ikey.len(),
                value.len()
            )));
        }
        // Aligned blocks are cut before the entry that would carry them
        // past their aligned size, so that each fits its pages; the cut
        // comes before the entry touches the index, filters or last key.
        let trailer = super::block::BLOCK_TRAILER_LEN;
        if self.opts.block_align
            && !self.data_block.is_empty()
            && self.data_block.size_with(ikey.len(), value.len()) + trailer > self.aligned_limit()
        {
            self.flush_data_block()?;
        }
        if let Some(handle) = self.pending.take() {
            let sep = shortest_separator(&self.last_key, ikey);
            self.index_block.add(&sep, &handle.encode());
        }
        if let Some(f) = &mut self.filter {
            f.add_key(user_key(ikey));
        }
        if let Some((f, _)) = &mut self.block_filters {
            f.add_key(user_key(ikey));
        }
        if self.entries == 0 {
            self.smallest = ikey.to_vec();
        }
        self.last_key.clear();
        self.last_key.extend_from_slice(ikey);
        self.entries += 1;
        self.data_block.add(ikey, value);
        let full = if self.opts.block_align {
            self.data_block.estimated_size() + trailer >= self.aligned_limit()
        } else {
            self.data_block.estimated_size() >= self.opts.block_size
        };
        if full {
            self.flush_data_block()?;
        }
        Ok(())
    }

    /// Bytes of zeros written before the next data block: up to the next
    /// [`ALIGN`] boundary with `block_align`, else none.
    fn padding(&self) -> u64 {
        if self.opts.block_align {
            self.offset.next_multiple_of(ALIGN) - self.offset
        } else {
            0
        }
    }

    /// Most bytes an aligned data block takes, trailer included.
    fn aligned_limit(&self) -> usize {
        self.opts.block_size.max(1).next_multiple_of(ALIGN as usize)
    }

    /// Writes the current data block, if it has entries.
    fn flush_data_block(&mut self) -> Result<()> {
        if self.data_block.is_empty() {
            return Ok(());
        }
        let contents = self.data_block.finish();
        // Zeros up to the boundary; no index entry points into them.
        let pad = self.padding();
        if pad > 0 {
            self.write_raw(&[0u8; ALIGN as usize][..pad as usize])?;
        }
        let handle = self.write_block(&contents)?;
        if let Some((f, done)) = &mut self.block_filters {
            done.push((handle.offset, f.finish()));
            *f = FilterBuilder::new(self.opts.bloom_bits_per_key);
        }
        self.pending = Some(handle);
        Ok(())
    }

    /// Appends block contents and trailer; returns the block's handle.
    fn write_block(&mut self, contents: &[u8]) -> Result<BlockHandle> {
        let handle = BlockHandle {
            offset: self.offset,
            size: contents.len() as u64,
        };
        self.write_raw(contents)?;
        self.write_raw(&block_trailer(contents))?;
        Ok(handle)
    }

    fn write_raw(&mut self, data: &[u8]) -> Result<()> {
        self.check()?;
        if let Err(e) = self.file.append(data) {
            let err = Error::io(&self.path, e);
            self.failed = Some(err.clone());
            return Err(err);
        }
        self.offset += data.len() as u64;
        self.stats.add_written(self.category, data.len() as u64);
        Ok(())
    }

    /// Approximate size of the file if it were finished now.
    pub fn estimated_size(&self) -> u64 {
        let trailer = super::block::BLOCK_TRAILER_LEN as u64;
        let filter = self
            .filter
            .as_ref()
            .map_or(0, |f| f.estimated_size() as u64 + trailer);
        let pad = if self.data_block.is_empty() {
            0
        } else {
            self.padding()
        };
        self.offset
            + pad
            + (self.data_block.estimated_size() as u64 + trailer)
            + (self.index_block.estimated_size() as u64 + trailer)
            + filter
            + FOOTER_LEN as u64
    }

    /// Entries added so far.
    pub fn num_entries(&self) -> u64 {
        self.entries
    }

    /// Writes the remaining blocks and the footer, and syncs the file.
    pub fn finish(self) -> Result<TableSummary> {
        let (summary, mut file, path) = self.finish_unsynced()?;
        if let Err(e) = file.sync() {
            return Err(Error::io(&path, e));
        }
        Ok(summary)
    }

    /// Writes the remaining blocks and the footer without syncing, and hands
    /// the file back (a DTable appends its tail after the segment).
    pub(crate) fn finish_unsynced(
        mut self,
    ) -> Result<(TableSummary, Box<dyn WritableFile>, PathBuf)> {
        self.check()?;
        self.flush_data_block()?;

        // The metaindex names its blocks in bytewise order:
        // BLOCK_FILTERS_META_NAME ("filter.blocks") before FILTER_META_NAME.
        let mut metaindex = BlockBuilder::new(1);
        if let Some((_, done)) = self.block_filters.take() {
            let mut contents = Vec::new();
            for (offset, f) in &done {
                crate::format::coding::put_varint64(&mut contents, *offset);
                crate::format::coding::put_length_prefixed(&mut contents, f);
            }
            let handle = self.write_block(&contents)?;
            metaindex.add(BLOCK_FILTERS_META_NAME.as_bytes(), &handle.encode());
        }
        if let Some(f) = self.filter.take() {
            let handle = self.write_block(&f.finish())?;
            metaindex.add(FILTER_META_NAME.as_bytes(), &handle.encode());
        }
        for (name, contents) in std::mem::take(&mut self.extra_meta) {
            let handle = self.write_block(&contents)?;
            metaindex.add(name.as_bytes(), &handle.encode());
        }
        let metaindex_handle = self.write_block(&metaindex.finish())?;

        if let Some(handle) = self.pending.take() {
            let sep = short_successor(&self.last_key);
            self.index_block.add(&sep, &handle.encode());
        }
        let index_contents = self.index_block.finish();
        let index_handle = self.write_block(&index_contents)?;

        let footer = Footer {
            metaindex: metaindex_handle,
            index: index_handle,
        };
        self.write_raw(&footer.encode())?;
        let summary = TableSummary {
            file_size: self.offset,
            entries: self.entries,
            smallest: std::mem::take(&mut self.smallest),
            largest: std::mem::take(&mut self.last_key),
        };
        Ok((summary, self.file, self.path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::key::internal_key;

    fn ik(k: &[u8], seq: u64) -> Vec<u8> {
        internal_key(k, seq, ValueType::Value)
    }

    #[test]
    fn separators_bound_blocks() {
        let cases: &[(&[u8], u64, &[u8], u64)] = &[
            (b"abcdef", 5, b"abzzz", 9),
            (b"abc", 5, b"abd", 9),
            (b"abc", 5, b"abcd", 9),
            (b"a\xff\xff", 5, b"b", 9),
            (b"same", 9, b"same", 5),
            (b"helloworld", 1, b"help", 1),
        ];
        for &(a, sa, b, sb) in cases {
            let (last, next) = (ik(a, sa), ik(b, sb));
            let sep = shortest_separator(&last, &next);
            assert_ne!(
                compare_internal(&last, &sep),
                Ordering::Greater,
                "{a:?} {b:?}"
            );
            assert_eq!(compare_internal(&sep, &next), Ordering::Less, "{a:?} {b:?}");
            assert!(sep.len() <= last.len());
        }
        assert_eq!(
            user_key(&shortest_separator(&ik(b"abcdef", 1), &ik(b"abzzz", 1))),
            b"abd"
        );
        for a in [&b"abc"[..], b"\xff\xff", b"\xffabc", b""] {
            let last = ik(a, 3);
            let s = short_successor(&last);
            assert_ne!(compare_internal(&last, &s), Ordering::Greater);
        }
        assert_eq!(user_key(&short_successor(&ik(b"abc", 3))), b"b");
    }
}
