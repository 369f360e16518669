//! Reading a table: [`Table`] (point lookups, verification) and
//! [`TableIterator`] (a two-level cursor: the index block selects a data
//! block, a block iterator walks it).
//!
//! `Table::open` reads and verifies the footer, the metaindex, the index and
//! the filter, and keeps the index block and the filter in memory, the index
//! also decoded for searching (`IndexSearch`, 16 bytes per data block; an
//! index of another shape is searched in place). Data blocks
//! are read on demand: looked up in the shared block cache first, otherwise
//! read from the file, checksummed, validated, and inserted in the cache when
//! the read asks for it ([`ReadCtx::fill_cache`]). A mapped table serves
//! its data blocks in place instead; it checksums each one the first time
//! this open table loads it and trusts the verified bytes afterwards
//! (`VerifiedBlocks`), as a block cache trusts the blocks it holds.
//! Every byte read from the
//! file is counted in [`IoStats`]: under the read's category for data blocks,
//! under the category given to `open` for the blocks `open` and `verify`
//! read.
//!
//! Errors: any damage is an [`Error::Corruption`] naming the file and the
//! offset of the damaged block (or of the footer, or of the block holding an
//! out-of-range handle); a file shorter than the sizes it records is
//! corruption too. An iterator that meets an error becomes invalid for good
//! and reports the error from `status()`; later seeks do not clear it.
//!
//! Thread-safety: [`Table`] is immutable, `Send + Sync`, shared via `Arc`;
//! lookups from many threads run in parallel. A [`TableIterator`] is used by
//! one thread at a time and keeps its table alive.

use super::block::{check_trailer, Block, BlockBytes, BlockIter, BLOCK_TRAILER_LEN};
use super::filter::BloomFilter;
use super::footer::{BlockHandle, Footer, FOOTER_LEN};
use super::index_search::IndexSearch;
use super::FILTER_META_NAME;
use crate::error::{Error, Result};
use crate::fs::{Advice, IoCategory, IoStats, Mapping, RandomAccessFile};
use crate::index::cache::BlockCache;
use crate::index::iter::InternalIterator;
use crate::index::key::{compare_internal, parse_internal_key, user_key};
use crate::index::multi_get::BlockReuse;
use std::cmp::Ordering;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;

/// How a read is accounted and cached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadCtx {
    /// Category the bytes read are counted under.
    pub category: IoCategory,
    /// Insert the data blocks read into the block cache (false for scans
    /// that should not evict the working set, such as compaction).
    pub fill_cache: bool,
}

fn bytewise(a: &[u8], b: &[u8]) -> Ordering {
    a.cmp(b)
}

/// The file a table lives in, with what is needed to read blocks safely.
struct Source {
    file: Arc<dyn RandomAccessFile>,
    path: PathBuf,
    stats: Arc<IoStats>,
    /// Offset of the footer: every block must end at or before it.
    footer_offset: u64,
    /// The file's mapping, when it is read through one
    /// ([`Options::mmap_reads`](crate::Options::mmap_reads)): data blocks of
    /// point reads and user scans are then used in place.
    map: Option<Arc<Mapping>>,
}

impl Source {
    fn corruption(&self, offset: u64, reason: impl Into<String>) -> Error {
        Error::corruption(&self.path, offset, reason)
    }

    /// Reads exactly `len` bytes at `offset` through `file`, a handle of
    /// this table's file; a short file is corruption.
    fn read(
        &self,
        file: &dyn RandomAccessFile,
        offset: u64,
        len: usize,
        category: IoCategory,
    ) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        match file.read_exact_at(offset, &mut buf) {
            Ok(()) => {
                self.stats.add_read(category, len as u64);
                Ok(buf)
            }
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(self.corruption(
                offset,
                format!("file truncated: cannot read {len} bytes at offset {offset}"),
            )),
            Err(e) => Err(Error::io(&self.path, e)),
        }
    }

    /// Reads the footer.
    fn footer(&self, category: IoCategory) -> Result<Footer> {
        let bytes = self.read(&*self.file, self.footer_offset, FOOTER_LEN, category)?;
        Footer::decode(&bytes).map_err(|r| self.corruption(self.footer_offset, r))
    }

    /// Reads, through `file` (a handle of this table's file), and
    /// checksums the contents of the block at `handle`. An out-of-range
    /// handle is reported at `referrer`, the offset of the block (or
    /// footer) that holds the handle.
    fn contents(
        &self,
        file: &dyn RandomAccessFile,
        handle: BlockHandle,
        referrer: u64,
        category: IoCategory,
    ) -> Result<Vec<u8>> {
        let len = self.checked_len(handle, referrer)?;
        let mut buf = self.read(file, handle.offset, len + BLOCK_TRAILER_LEN, category)?;
        let (contents, trailer) = buf.split_at(len);
        check_trailer(contents, trailer).map_err(|r| self.corruption(handle.offset, r))?;
        buf.truncate(len);
        Ok(buf)
    }

    /// Length of the contents of the block at `handle`, checked to end (with
    /// its trailer) at or before the footer; an out-of-range handle is
    /// reported at `referrer`.
    fn checked_len(&self, handle: BlockHandle, referrer: u64) -> Result<usize> {
        let end = handle
            .offset
            .checked_add(handle.size)
            .and_then(|e| e.checked_add(BLOCK_TRAILER_LEN as u64));
        match (end, usize::try_from(handle.size)) {
            (Some(end), Ok(len)) if end <= self.footer_offset => Ok(len),
            _ => Err(self.corruption(
                referrer,
                format!(
                    "block handle (offset {}, size {}) out of range of the {}-byte data region",
                    handle.offset, handle.size, self.footer_offset
                ),
            )),
        }
    }

    /// [`Source::block`] served from `map` in place: the contents are
    /// validated where they lie, and not copied, and checksummed unless
    /// `checked` says an earlier load of the same block already did.
    fn mapped_block(
        &self,
        map: &Arc<Mapping>,
        handle: BlockHandle,
        referrer: u64,
        category: IoCategory,
        checked: bool,
    ) -> Result<Block> {
        let len = self.checked_len(handle, referrer)?;
        let with_trailer = len + BLOCK_TRAILER_LEN;
        let start = usize::try_from(handle.offset).unwrap_or(usize::MAX);
        let Some(bytes) = start
            .checked_add(with_trailer)
            .and_then(|end| map.bytes().get(start..end))
        else {
            return Err(self.corruption(
                handle.offset,
                format!(
                    "file truncated: cannot read {with_trailer} bytes at offset {}",
                    handle.offset
                ),
            ));
        };
        self.stats.add_read(category, with_trailer as u64);
        if checked {
            // One byte per page, so that a page the kernel dropped faults
            // here, inside the load the map gauge times, as a checksum's
            // pass over every byte would have made it.
            for i in (0..bytes.len()).step_by(4096) {
                std::hint::black_box(bytes[i]);
            }
        } else {
            let (contents, trailer) = bytes.split_at(len);
            check_trailer(contents, trailer).map_err(|r| self.corruption(handle.offset, r))?;
        }
        Block::from_bytes(BlockBytes::Mapped {
            map: map.clone(),
            start,
            len,
        })
        .map_err(|r| self.corruption(handle.offset, r))
    }

    /// Reads, checksums and validates the block at `handle`.
    fn block(&self, handle: BlockHandle, referrer: u64, category: IoCategory) -> Result<Block> {
        self.block_from(&*self.file, handle, referrer, category)
    }

    /// [`Source::block`] through `file`, a handle of this table's file.
    fn block_from(
        &self,
        file: &dyn RandomAccessFile,
        handle: BlockHandle,
        referrer: u64,
        category: IoCategory,
    ) -> Result<Block> {
        let contents = self.contents(file, handle, referrer, category)?;
        Block::new(contents).map_err(|r| self.corruption(handle.offset, r))
    }

    /// Reads the filter the metaindex block `meta` (read from `metaindex`)
    /// names, if it names one.
    fn filter(
        &self,
        meta: Arc<Block>,
        metaindex: BlockHandle,
        category: IoCategory,
    ) -> Result<Option<(BloomFilter, BlockHandle)>> {
        let mut it = BlockIter::new(meta, bytewise);
        it.seek(FILTER_META_NAME.as_bytes());
        if let Some(r) = it.corruption() {
            return Err(self.corruption(metaindex.offset, r));
        }
        if !it.valid() || it.key() != FILTER_META_NAME.as_bytes() {
            return Ok(None);
        }
        let handle = BlockHandle::decode_exact(it.value()).ok_or_else(|| {
            self.corruption(metaindex.offset, "malformed filter handle in metaindex")
        })?;
        let contents = self.contents(&*self.file, handle, metaindex.offset, category)?;
        let filter = BloomFilter::parse(contents).map_err(|r| self.corruption(handle.offset, r))?;
        Ok(Some((filter, handle)))
    }
}

/// An open, immutable SSTable.
pub struct Table {
    src: Source,
    file_number: u64,
    file_size: u64,
    cache: Option<Arc<BlockCache>>,
    /// Category of the reads done by `open` and `verify`.
    category: IoCategory,
    footer: Footer,
    index: Arc<Block>,
    /// The index decoded for searching ([`IndexSearch`]); `None` when
    /// the block is searched in place.
    index_search: Option<IndexSearch>,
    filter: Option<BloomFilter>,
    /// Which data blocks of a mapped table were checksummed in place.
    verified: Option<VerifiedBlocks>,
}

/// The data blocks of a mapped table whose checksum a load has verified
/// in place, one bit per block, by the block's ordinal in the index (the
/// index block has one entry per restart point, so a cursor on it knows
/// the ordinal: [`BlockIter::restart_index`]). A table's bytes before its
/// footer never change once written, and a mapping shows the same bytes
/// to every load, so a block verified once need not be checksummed again
/// while the table stays open; pages the kernel drops and reads again
/// from the device are trusted as a block cache's copies are.
/// [`Table::verify`] still reads and checksums every block.
///
/// Thread-safety: the bits are atomics; a race makes two loads both
/// checksum a block, never a load skip one that was not verified.
struct VerifiedBlocks {
    bits: Box<[AtomicU64]>,
}

impl VerifiedBlocks {
    /// One bit for each of the `blocks` data blocks a table's index lists
    /// (its index block has one restart point per entry, as the builder
    /// writes it and [`Table::get_filtered`]'s per-block filters rely on).
    /// An ordinal past the end finds no bit: such a load checksums.
    fn new(blocks: usize) -> VerifiedBlocks {
        VerifiedBlocks {
            bits: (0..blocks.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }

    fn is_set(&self, ordinal: usize) -> bool {
        self.bits
            .get(ordinal / 64)
            .is_some_and(|w| w.load(AtomicOrdering::Relaxed) & (1 << (ordinal % 64)) != 0)
    }

    fn set(&self, ordinal: usize) {
        if let Some(w) = self.bits.get(ordinal / 64) {
            w.fetch_or(1 << (ordinal % 64), AtomicOrdering::Relaxed);
        }
    }

    /// Bytes held in memory.
    fn size(&self) -> usize {
        self.bits.len() * 8
    }
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("path", &self.src.path)
            .field("file_number", &self.file_number)
            .field("file_size", &self.file_size)
            .field("has_filter", &self.filter.is_some())
            .finish_non_exhaustive()
    }
}

impl Table {
    /// Opens the table in `file`, of `file_size` bytes (as recorded when it
    /// was written), reading and verifying the footer, the index and the
    /// filter. `file_number` keys its blocks in `cache`; `path` names the
    /// file in errors; the bytes read are counted under `category`.
    pub fn open(
        file: Arc<dyn RandomAccessFile>,
        path: PathBuf,
        file_number: u64,
        file_size: u64,
        cache: Option<Arc<BlockCache>>,
        stats: Arc<IoStats>,
        category: IoCategory,
    ) -> Result<Table> {
        let Some(footer_offset) = file_size.checked_sub(FOOTER_LEN as u64) else {
            return Err(Error::corruption(
                path,
                0,
                format!("not a sepkv table: {file_size} bytes is shorter than a table footer"),
            ));
        };
        let src = Source {
            map: file.mapping().cloned(),
            file,
            path,
            stats,
            footer_offset,
        };
        let footer = src.footer(category)?;
        let index = Arc::new(src.block(footer.index, footer_offset, category)?);
        let meta = Arc::new(src.block(footer.metaindex, footer_offset, category)?);
        let filter = src
            .filter(meta, footer.metaindex, category)?
            .map(|(f, _)| f);
        let verified = src
            .map
            .as_ref()
            .map(|_| VerifiedBlocks::new(index.num_restarts()));
        let index_search = IndexSearch::build(&index);
        Ok(Table {
            src,
            file_number,
            file_size,
            cache,
            category,
            footer,
            index,
            index_search,
            filter,
            verified,
        })
    }

    /// True when the table has a table-wide bloom filter (tests).
    #[cfg(test)]
    pub(crate) fn has_filter(&self) -> bool {
        self.filter.is_some()
    }

    /// The table-wide bloom filter's answer for the user key whose filter
    /// hash is `hash`: `Some(false)` when the table certainly lacks it,
    /// `None` when the table has no such filter.
    pub(crate) fn filter_may_contain_hash(&self, hash: u64) -> Option<bool> {
        self.filter.as_ref().map(|f| f.may_contain_hash(hash))
    }

    /// Path of the table file.
    pub fn path(&self) -> &Path {
        &self.src.path
    }

    /// File number of the table.
    pub fn file_number(&self) -> u64 {
        self.file_number
    }

    /// Size of the table file in bytes.
    pub fn file_size(&self) -> u64 {
        self.file_size
    }

    /// Bytes held in memory for the index block (and its decoded search) and the filter.
    pub fn approximate_memory(&self) -> usize {
        self.index.size()
            + self.index_search.as_ref().map_or(0, IndexSearch::size)
            + self.filter.as_ref().map_or(0, BloomFilter::size)
            + self.verified.as_ref().map_or(0, VerifiedBlocks::size)
    }

    fn index_corruption(&self, reason: impl Into<String>) -> Error {
        self.src.corruption(self.footer.index.offset, reason)
    }

    /// The data block a seek to `target` starts in: its handle and its
    /// ordinal in the index, `None` past the last block. Through the
    /// decoded index when the table has one ([`IndexSearch`]), else by
    /// searching the index block; with `next`, also the handle of the
    /// block after it, if any.
    fn find_block(
        &self,
        target: &[u8],
        next: bool,
    ) -> Result<Option<(BlockHandle, usize, Option<BlockHandle>)>> {
        if let Some(d) = &self.index_search {
            let i = d
                .find(&self.index, target)
                .map_err(|r| self.index_corruption(r))?;
            return Ok(d
                .handle(i)
                .map(|h| (h, i, next.then(|| d.handle(i + 1)).flatten())));
        }
        let mut index = BlockIter::new(self.index.clone(), compare_internal);
        index.seek(target);
        if !index.valid() {
            return match index.corruption() {
                Some(r) => Err(self.index_corruption(r)),
                None => Ok(None),
            };
        }
        let handle = self.data_handle(index.value())?;
        let ordinal = index.restart_index();
        let after = if next {
            index.next();
            index
                .valid()
                .then(|| BlockHandle::decode_exact(index.value()))
                .flatten()
        } else {
            None
        };
        Ok(Some((handle, ordinal, after)))
    }

    /// Decodes a data-block handle read from the index block.
    fn data_handle(&self, value: &[u8]) -> Result<BlockHandle> {
        BlockHandle::decode_exact(value)
            .ok_or_else(|| self.index_corruption("malformed block handle in index block"))
    }

    /// The data block at `handle`, through the cache.
    #[cfg(test)]
    fn data_block(&self, handle: BlockHandle, ctx: ReadCtx) -> Result<Arc<Block>> {
        self.read_data_block(handle, None, ctx, false)
    }

    /// The data block at `handle`, the `ordinal`-th the index lists,
    /// through the cache.
    fn data_block_at(
        &self,
        handle: BlockHandle,
        ordinal: usize,
        ctx: ReadCtx,
    ) -> Result<Arc<Block>> {
        self.read_data_block(handle, Some(ordinal), ctx, false)
    }

    /// [`Table::data_block_at`]; a `point` read (one block for a lookup)
    /// that takes a system call goes through the file's point-read handle
    /// ([`RandomAccessFile::point_reads`]), so the kernel reads no
    /// neighbours around it. `ordinal`, the block's place in the index,
    /// lets a mapped table checksum the block once ([`VerifiedBlocks`]);
    /// without it the block is checksummed at every load.
    fn read_data_block(
        &self,
        handle: BlockHandle,
        ordinal: Option<usize>,
        ctx: ReadCtx,
        point: bool,
    ) -> Result<Arc<Block>> {
        // A mapped table serves reads of blocks in memory in place, as
        // LevelDB's mapped tables do: no copy, and no block cache (the page
        // cache holds the bytes). While such reads keep reaching the device
        // (the gauge), blocks are read with system calls: one device request
        // per block, and read-ahead for a scan, where faults would read a
        // page at a time. Compactions and flushes stream whole tables: they
        // always read with system calls, whose read-ahead suits them.
        if let Some(map) = &self.src.map {
            let streaming = matches!(ctx.category, IoCategory::Compaction | IoCategory::Flush);
            let gauge = self.cache.as_ref().map(|c| c.map_gauge());
            if !streaming && gauge.is_none_or(|g| g.read_in_place()) {
                let referrer = self.footer.index.offset;
                let started = std::time::Instant::now();
                let slot = self.verified.as_ref().zip(ordinal);
                let checked = slot.is_some_and(|(v, n)| v.is_set(n));
                let block = self
                    .src
                    .mapped_block(map, handle, referrer, ctx.category, checked)?;
                if let (Some((v, n)), false) = (slot, checked) {
                    v.set(n);
                }
                if let Some(g) = gauge {
                    g.record(started.elapsed().as_nanos() as u64);
                }
                return Ok(Arc::new(block));
            }
        }
        if let Some(cache) = &self.cache {
            if let Some(block) = cache.get(self.file_number, handle.offset) {
                return Ok(block);
            }
        }
        let file = if point {
            self.src.file.point_reads().unwrap_or(&*self.src.file)
        } else {
            &*self.src.file
        };
        let block =
            Arc::new(
                self.src
                    .block_from(file, handle, self.footer.index.offset, ctx.category)?,
            );
        if ctx.fill_cache {
            if let Some(cache) = &self.cache {
                cache.insert(self.file_number, handle.offset, block.clone());
            }
        }
        Ok(block)
    }

    /// A hint before a user scan's cursor over this table seeks to
    /// `target`: asks the kernel to start reading the data block the seek
    /// will load (`POSIX_FADV_WILLNEED`), without waiting for it. A caller
    /// that positions several cursors (a DTable's segments) hints all of
    /// them first, so their blocks come from the device together instead of
    /// one after another. Issued only for user reads of a mapped table
    /// while mapped reads reach the device (the map gauge): from memory the
    /// system call would find every page cached, and direct reads bypass
    /// the page cache the hint fills. With `next`, the hint reaches to the
    /// end of the data block after that one, the block a short scan loads
    /// next. Returns whether a hint was issued.
    /// The index is searched in memory; a damaged index issues no hint and
    /// is reported by the seek itself.
    pub(crate) fn hint_seek(&self, target: &[u8], next: bool, ctx: ReadCtx) -> bool {
        if ctx.category != IoCategory::UserRead || self.src.map.is_none() {
            return false;
        }
        if !self
            .cache
            .as_ref()
            .is_some_and(|c| c.map_gauge().reaching_device())
        {
            return false;
        }
        let Ok(Some((handle, _, after))) = self.find_block(target, next) else {
            return false;
        };
        if self
            .src
            .checked_len(handle, self.footer.index.offset)
            .is_err()
        {
            return false;
        }
        let mut end = handle.offset + handle.size + BLOCK_TRAILER_LEN as u64;
        if let Some(h) =
            after.filter(|h| self.src.checked_len(*h, self.footer.index.offset).is_ok())
        {
            end = end.max(h.offset + h.size + BLOCK_TRAILER_LEN as u64);
        }
        self.src
            .file
            .advise(handle.offset, end - handle.offset, Advice::WillNeed);
        true
    }

    /// Point lookup: the first entry whose internal key is `>= ikey`, if its
    /// user key equals `user_key(ikey)`; `None` otherwise (including when the
    /// bloom filter rules the user key out). Returns `(internal key, value)`.
    pub fn get(&self, ikey: &[u8], ctx: ReadCtx) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        self.get_reusing(ikey, ctx, None)
    }

    /// [`Table::get`] as one lookup of a batch: the data block comes from
    /// `reuse` when the batch's last lookup in this table loaded it
    /// ([`BlockReuse`]).
    pub fn get_reusing(
        &self,
        ikey: &[u8],
        ctx: ReadCtx,
        reuse: Option<&mut BlockReuse>,
    ) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let hash = super::filter::key_hash(user_key(ikey));
        self.get_filtered(ikey, hash, ctx, &|_, _| true, reuse)
    }

    /// [`Table::get`] for a key whose filter hash
    /// ([`key_hash`](super::filter::key_hash) of its user key) is `hash`,
    /// with `block_may_contain(n, offset)` consulted after the index chose
    /// the data block at `offset`, the table's `n`-th, and before it is
    /// read: false skips the block (a per-block bloom filter, LWC-tree
    /// Algorithm 4). `n` is the index entry's ordinal: index blocks are
    /// written with one restart point per entry. With `reuse`, the data
    /// block is taken from it when the batch's last lookup in this table
    /// loaded the same one, and kept there otherwise.
    pub(crate) fn get_filtered(
        &self,
        ikey: &[u8],
        hash: u64,
        ctx: ReadCtx,
        block_may_contain: &dyn Fn(usize, u64) -> bool,
        reuse: Option<&mut BlockReuse>,
    ) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let target_user_key = user_key(ikey);
        if let Some(filter) = &self.filter {
            if !filter.may_contain_hash(hash) {
                return Ok(None);
            }
        }
        let Some((handle, ordinal, _)) = self.find_block(ikey, false)? else {
            return Ok(None);
        };
        if !block_may_contain(ordinal, handle.offset) {
            return Ok(None);
        }
        let block = match reuse {
            Some(r) => r.block((self.file_number, self.file_size), handle.offset, || {
                self.read_data_block(handle, Some(ordinal), ctx, true)
            })?,
            None => self.read_data_block(handle, Some(ordinal), ctx, true)?,
        };
        let mut it = BlockIter::new(block, compare_internal);
        it.seek(ikey);
        if let Some(r) = it.corruption() {
            return Err(self.src.corruption(handle.offset, r));
        }
        // When every key of the block is < ikey, the first entry >= ikey is
        // the first of the next block; but then `last < ikey <= separator <
        // next first`, and a separator either is the block's last key
        // (impossible here) or has a user key strictly between the two
        // blocks', so that entry's user key differs from ikey's: no need to
        // read the next block.
        Ok(it
            .valid()
            .then(|| (it.key(), it.value()))
            .filter(|(k, _)| user_key(k) == target_user_key)
            .map(|(k, v)| (k.to_vec(), v.to_vec())))
    }

    /// Contents of the meta block the metaindex names `name`, checksummed;
    /// `None` when there is none. Reads are counted under the category
    /// given to `open`.
    pub(crate) fn meta_block(&self, name: &str) -> Result<Option<Vec<u8>>> {
        let footer = self.footer;
        let meta = Arc::new(self.src.block(
            footer.metaindex,
            self.src.footer_offset,
            self.category,
        )?);
        let mut it = BlockIter::new(meta, bytewise);
        it.seek(name.as_bytes());
        if let Some(r) = it.corruption() {
            return Err(self.src.corruption(footer.metaindex.offset, r));
        }
        if !it.valid() || it.key() != name.as_bytes() {
            return Ok(None);
        }
        let handle = BlockHandle::decode_exact(it.value()).ok_or_else(|| {
            self.src
                .corruption(footer.metaindex.offset, "malformed meta block handle")
        })?;
        Ok(Some(self.src.contents(
            &*self.src.file,
            handle,
            footer.metaindex.offset,
            self.category,
        )?))
    }

    /// Offset of the table's footer (its blocks all end before it).
    pub(crate) fn footer_offset(&self) -> u64 {
        self.src.footer_offset
    }

    /// Re-reads the whole file, bypassing the cache, and checks every block
    /// checksum, that every key parses, that keys are strictly increasing,
    /// that each index separator is `>=` the last key of its block and `<`
    /// the first key of the next, that data blocks do not overlap, and that
    /// the filter holds every user key. Returns the number of entries, or the
    /// first corruption found. Reads are counted under the category given to
    /// `open`.
    pub fn verify(&self) -> Result<u64> {
        let cat = self.category;
        let src = &self.src;
        let footer = src.footer(cat)?;
        let index_at = footer.index.offset;
        let index = Arc::new(src.block(footer.index, src.footer_offset, cat)?);
        let meta_block = Arc::new(src.block(footer.metaindex, src.footer_offset, cat)?);
        let mut meta = BlockIter::new(meta_block.clone(), bytewise);
        meta.seek_to_first();
        let mut prev_name: Option<Vec<u8>> = None;
        while meta.valid() {
            if prev_name.as_deref().is_some_and(|p| p >= meta.key()) {
                return Err(src.corruption(footer.metaindex.offset, "metaindex names out of order"));
            }
            prev_name = Some(meta.key().to_vec());
            meta.next();
        }
        if let Some(r) = meta.corruption() {
            return Err(src.corruption(footer.metaindex.offset, r));
        }
        let filter = src.filter(meta_block, footer.metaindex, cat)?;

        let mut idx = BlockIter::new(index, compare_internal);
        idx.seek_to_first();
        let mut count = 0u64;
        let mut prev_key: Option<Vec<u8>> = None;
        let mut prev_sep: Option<Vec<u8>> = None;
        let mut prev_end = 0u64;
        while idx.valid() {
            let sep = idx.key().to_vec();
            if parse_internal_key(&sep).is_none() {
                return Err(src.corruption(index_at, "unparsable separator key in index block"));
            }
            if prev_sep
                .as_deref()
                .is_some_and(|p| compare_internal(p, &sep) != Ordering::Less)
            {
                return Err(src.corruption(index_at, "index keys are not strictly increasing"));
            }
            let handle = self.data_handle(idx.value())?;
            if handle.offset < prev_end {
                return Err(src.corruption(
                    index_at,
                    format!(
                        "data block at {} overlaps the previous block",
                        handle.offset
                    ),
                ));
            }
            let block = src.block(handle, index_at, cat)?;
            let mut it = BlockIter::new(Arc::new(block), compare_internal);
            it.seek_to_first();
            let mut first = true;
            while it.valid() {
                let key = it.key();
                if parse_internal_key(key).is_none() {
                    return Err(src.corruption(handle.offset, "unparsable internal key"));
                }
                if prev_key
                    .as_deref()
                    .is_some_and(|p| compare_internal(p, key) != Ordering::Less)
                {
                    return Err(src.corruption(handle.offset, "keys are not strictly increasing"));
                }
                if first {
                    if prev_sep
                        .as_deref()
                        .is_some_and(|p| compare_internal(p, key) != Ordering::Less)
                    {
                        return Err(src.corruption(
                            index_at,
                            format!(
                                "index separator is not below the first key of the block at {}",
                                handle.offset
                            ),
                        ));
                    }
                    first = false;
                }
                if let Some((f, fh)) = &filter {
                    if !f.may_contain(user_key(key)) {
                        return Err(
                            src.corruption(fh.offset, "bloom filter misses a key of the table")
                        );
                    }
                }
                let pk = prev_key.get_or_insert_with(Vec::new);
                pk.clear();
                pk.extend_from_slice(key);
                count += 1;
                it.next();
            }
            if let Some(r) = it.corruption() {
                return Err(src.corruption(handle.offset, r));
            }
            if !first
                && prev_key
                    .as_deref()
                    .is_some_and(|last| compare_internal(last, &sep) == Ordering::Greater)
            {
                return Err(src.corruption(
                    index_at,
                    format!(
                        "index separator is below the last key of the block at {}",
                        handle.offset
                    ),
                ));
            }
            prev_sep = Some(sep);
            prev_end = handle.offset + handle.size + BLOCK_TRAILER_LEN as u64;
            idx.next();
        }
        if let Some(r) = idx.corruption() {
            return Err(src.corruption(index_at, r));
        }
        Ok(count)
    }
}

mod iter;
#[cfg(test)]
mod tests;

pub use iter::TableIterator;
pub(crate) use iter::READ_AHEAD_MIN;
