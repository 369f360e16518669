//! Reading a table: [`Table`] (point lookups, verification) and
//! [`TableIterator`] (a two-level cursor: the index block selects a data
//! block, a block iterator walks it).
//!
//! `Table::open` reads and verifies the footer, the metaindex, the index and
//! the filter, and keeps the index block and the filter in memory. Data blocks
//! are read on demand: looked up in the shared block cache first, otherwise
//! read from the file, checksummed, validated, and inserted in the cache when
//! the read asks for it ([`ReadCtx::fill_cache`]). Every byte read from the
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
use super::FILTER_META_NAME;
use crate::error::{Error, Result};
use crate::fs::{Advice, IoCategory, IoStats, Mapping, RandomAccessFile};
use crate::index::cache::BlockCache;
use crate::index::iter::InternalIterator;
use crate::index::key::{compare_internal, parse_internal_key, user_key};
use std::cmp::Ordering;
use std::path::{Path, PathBuf};
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
    /// checksummed and validated where they lie, and not copied.
    fn mapped_block(
        &self,
        map: &Arc<Mapping>,
        handle: BlockHandle,
        referrer: u64,
        category: IoCategory,
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
        let (contents, trailer) = bytes.split_at(len);
        check_trailer(contents, trailer).map_err(|r| self.corruption(handle.offset, r))?;
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
    filter: Option<BloomFilter>,
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
        Ok(Table {
            src,
            file_number,
            file_size,
            cache,
            category,
            footer,
            index,
            filter,
        })
    }

    /// True when the table has a table-wide bloom filter (tests).
    #[cfg(test)]
    pub(crate) fn has_filter(&self) -> bool {
        self.filter.is_some()
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

    /// Bytes held in memory for the index block and the filter.
    pub fn approximate_memory(&self) -> usize {
        self.index.size() + self.filter.as_ref().map_or(0, BloomFilter::size)
    }

    fn index_corruption(&self, reason: impl Into<String>) -> Error {
        self.src.corruption(self.footer.index.offset, reason)
    }

    /// Decodes a data-block handle read from the index block.
    fn data_handle(&self, value: &[u8]) -> Result<BlockHandle> {
        BlockHandle::decode_exact(value)
            .ok_or_else(|| self.index_corruption("malformed block handle in index block"))
    }

    /// The data block at `handle`, through the cache.
    fn data_block(&self, handle: BlockHandle, ctx: ReadCtx) -> Result<Arc<Block>> {
        self.read_data_block(handle, ctx, false)
    }

    /// [`Table::data_block`]; a `point` read (one block for a lookup) that
    /// takes a system call goes through the file's point-read handle
    /// ([`RandomAccessFile::point_reads`]), so the kernel reads no
    /// neighbours around it.
    fn read_data_block(
        &self,
        handle: BlockHandle,
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
                let block = self.src.mapped_block(map, handle, referrer, ctx.category)?;
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

    /// Point lookup: the first entry whose internal key is `>= ikey`, if its
    /// user key equals `user_key(ikey)`; `None` otherwise (including when the
    /// bloom filter rules the user key out). Returns `(internal key, value)`.
    pub fn get(&self, ikey: &[u8], ctx: ReadCtx) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let hash = super::filter::key_hash(user_key(ikey));
        self.get_filtered(ikey, hash, ctx, &|_, _| true)
    }

    /// [`Table::get`] for a key whose filter hash
    /// ([`key_hash`](super::filter::key_hash) of its user key) is `hash`,
    /// with `block_may_contain(n, offset)` consulted after the index chose
    /// the data block at `offset`, the table's `n`-th, and before it is
    /// read: false skips the block (a per-block bloom filter, LWC-tree
    /// Algorithm 4). `n` is the index entry's ordinal: index blocks are
    /// written with one restart point per entry.
    pub(crate) fn get_filtered(
        &self,
        ikey: &[u8],
        hash: u64,
        ctx: ReadCtx,
        block_may_contain: &dyn Fn(usize, u64) -> bool,
    ) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let target_user_key = user_key(ikey);
        if let Some(filter) = &self.filter {
            if !filter.may_contain_hash(hash) {
                return Ok(None);
            }
        }
        let mut index = BlockIter::new(self.index.clone(), compare_internal);
        index.seek(ikey);
        if !index.valid() {
            return match index.corruption() {
                Some(r) => Err(self.index_corruption(r)),
                None => Ok(None),
            };
        }
        let handle = self.data_handle(index.value())?;
        if !block_may_contain(index.restart_index(), handle.offset) {
            return Ok(None);
        }
        let mut it = BlockIter::new(self.read_data_block(handle, ctx, true)?, compare_internal);
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

    /// A cursor over the table's entries (unpositioned).
    pub fn iter(self: &Arc<Self>, ctx: ReadCtx) -> TableIterator {
        TableIterator {
            index: BlockIter::new(self.index.clone(), compare_internal),
            table: self.clone(),
            ctx,
            data: None,
            data_offset: 0,
            err: None,
            ahead: ReadAhead::default(),
        }
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

/// First read-ahead window of a scan (bytes), issued when a cursor loads
/// the data block after [`READ_AHEAD_AFTER`] loaded in file order. Device
/// bound (400 MB memory limit, 1 M × 1 KiB, 20,000 `seekrandom` scans of
/// 100 entries), starting at 64 KiB after one block scanned 1.05–1.10× as
/// fast as starting at 16 KiB after two.
pub(crate) const READ_AHEAD_MIN: u64 = 64 << 10;

/// Farthest a scan reads ahead of the block it loads (bytes): each hint
/// reaches twice as far past that block as the last one, up to this.
pub(crate) const READ_AHEAD_MAX: u64 = 256 << 10;

/// Data blocks a cursor loads one after another in file order before it
/// reads ahead: a seek that reads one block issues no hint.
pub(crate) const READ_AHEAD_AFTER: u32 = 1;

/// A scan's read-ahead over one table (user scans only; flushes and
/// compactions stream whole tables with the kernel's own read-ahead).
///
/// While blocks of mapped tables are read from the device (the map gauge,
/// [`super::map_gauge`]), a cursor that walks data blocks in file order
/// asks the kernel to read the bytes after the current block
/// (`POSIX_FADV_WILLNEED`) in one request, as RocksDB's iterators read
/// ahead (8 KiB doubling to 256 KiB there): the blocks a scan reaches next
/// then come from memory instead of one system call each on a file handle
/// every reader shares. A hint is issued when the scan reaches halfway
/// into the range the last one covered, and covers what lies between that
/// range's end and [`READ_AHEAD_MIN`] past the block, doubled at each
/// hint up to [`READ_AHEAD_MAX`]; it may reach past the data blocks into
/// the filter and index blocks, never past the footer. When mapped
/// reads are served from memory no hint is issued (a system call that
/// would find every page cached); neither without a mapping
/// (`mmap_reads` off: buffered reads get the kernel's own read-ahead, and
/// direct reads bypass the page cache the hint would fill).
#[derive(Debug, Default)]
struct ReadAhead {
    /// File offset just past the last data block loaded (its trailer
    /// included): where the next block starts when the scan goes on in
    /// file order.
    next: u64,
    /// Data blocks loaded one after another in file order.
    run: u32,
    /// How far past the loaded block the next hint reaches (bytes).
    window: u64,
    /// File offset the hints issued so far reach.
    until: u64,
    /// File offset a loaded block must reach for the next hint: halfway
    /// into the last window hinted (0: none hinted yet).
    trigger: u64,
}

/// A two-level cursor over a table: the index block selects a data block,
/// loaded lazily through the block cache; empty blocks are skipped.
pub struct TableIterator {
    table: Arc<Table>,
    ctx: ReadCtx,
    index: BlockIter,
    /// Iterator over the data block the index points at, if loaded.
    data: Option<BlockIter>,
    /// File offset of the block of `data`.
    data_offset: u64,
    /// The first error met; the iterator stays invalid once set.
    err: Option<Error>,
    /// Read-ahead state of forward scans.
    ahead: ReadAhead,
}

impl TableIterator {
    fn fail(&mut self, e: Error) {
        if self.err.is_none() {
            self.err = Some(e);
        }
        self.data = None;
    }

    /// Records a corruption of the index block, if the index iterator met
    /// one.
    fn check_index(&mut self) {
        if let Some(r) = self.index.corruption() {
            let e = self.table.index_corruption(r);
            self.fail(e);
        }
    }

    /// Records a corruption of the current data block, if any; true when
    /// the iterator is still healthy.
    fn check_data(&mut self) -> bool {
        let reason = self
            .data
            .as_ref()
            .and_then(|d| d.corruption())
            .map(str::to_string);
        if let Some(r) = reason {
            let e = self.table.src.corruption(self.data_offset, r);
            self.fail(e);
        }
        self.err.is_none()
    }

    /// Loads the data block the index iterator points at.
    fn init_data_block(&mut self) {
        if !self.index.valid() {
            self.check_index();
            self.data = None;
            return;
        }
        let handle = match self.table.data_handle(self.index.value()) {
            Ok(h) => h,
            Err(e) => return self.fail(e),
        };
        if self.data.is_some() && self.data_offset == handle.offset {
            return;
        }
        self.read_ahead(handle);
        match self.table.data_block(handle, self.ctx) {
            Ok(block) => {
                self.data = Some(BlockIter::new(block, compare_internal));
                self.data_offset = handle.offset;
            }
            Err(e) => self.fail(e),
        }
    }

    /// Before the block at `handle` is loaded: counts blocks loaded in
    /// file order and, past [`READ_AHEAD_AFTER`] of them while mapped reads
    /// reach the device, hints the kernel to read the next window ahead
    /// ([`ReadAhead`]). Any other block starts the count again.
    fn read_ahead(&mut self, handle: BlockHandle) {
        if self.ctx.category != IoCategory::UserRead {
            return;
        }
        let a = &mut self.ahead;
        let end = handle
            .offset
            .saturating_add(handle.size)
            .saturating_add(BLOCK_TRAILER_LEN as u64);
        // The next block in file order starts where this one ended, or at
        // the next boundary of an aligned table.
        let in_order = handle.offset >= a.next && handle.offset - a.next < super::builder::ALIGN;
        if in_order && a.run > 0 {
            a.run += 1;
        } else {
            a.run = 1;
            a.window = READ_AHEAD_MIN;
            a.until = 0;
            a.trigger = 0;
        }
        a.next = end;
        if a.run <= READ_AHEAD_AFTER || end < a.trigger {
            return;
        }
        let src = &self.table.src;
        if src.map.is_none() {
            return;
        }
        let device = self.table.cache.as_ref().map(|c| c.map_gauge());
        if !device.is_some_and(|g| g.reaching_device()) {
            return;
        }
        let from = a.until.max(end);
        let to = end.saturating_add(a.window).min(src.footer_offset);
        if to > from {
            src.file.advise(from, to - from, Advice::WillNeed);
        }
        a.until = a.until.max(to);
        a.trigger = from + (to.saturating_sub(from)) / 2;
        a.window = (a.window * 2).min(READ_AHEAD_MAX);
    }

    /// Moves forward over exhausted or empty data blocks.
    fn skip_forward(&mut self) {
        while self.check_data() {
            if self.data.as_ref().is_some_and(BlockIter::valid) {
                return;
            }
            if !self.index.valid() {
                self.check_index();
                self.data = None;
                return;
            }
            self.index.next();
            self.init_data_block();
            if let Some(d) = &mut self.data {
                d.seek_to_first();
            }
        }
    }

    /// Moves backward over exhausted or empty data blocks.
    fn skip_backward(&mut self) {
        while self.check_data() {
            if self.data.as_ref().is_some_and(BlockIter::valid) {
                return;
            }
            if !self.index.valid() {
                self.check_index();
                self.data = None;
                return;
            }
            self.index.prev();
            self.init_data_block();
            if let Some(d) = &mut self.data {
                d.seek_to_last();
            }
        }
    }
}

impl InternalIterator for TableIterator {
    fn valid(&self) -> bool {
        self.err.is_none() && self.data.as_ref().is_some_and(BlockIter::valid)
    }

    fn seek_to_first(&mut self) {
        if self.err.is_some() {
            return;
        }
        self.index.seek_to_first();
        self.init_data_block();
        if let Some(d) = &mut self.data {
            d.seek_to_first();
        }
        self.skip_forward();
    }

    fn seek_to_last(&mut self) {
        if self.err.is_some() {
            return;
        }
        self.index.seek_to_last();
        self.init_data_block();
        if let Some(d) = &mut self.data {
            d.seek_to_last();
        }
        self.skip_backward();
    }

    fn seek(&mut self, target: &[u8]) {
        if self.err.is_some() {
            return;
        }
        self.index.seek(target);
        self.init_data_block();
        if let Some(d) = &mut self.data {
            d.seek(target);
        }
        self.skip_forward();
    }

    fn next(&mut self) {
        if !self.valid() {
            return;
        }
        if let Some(d) = &mut self.data {
            d.next();
        }
        self.skip_forward();
    }

    fn prev(&mut self) {
        if !self.valid() {
            return;
        }
        if let Some(d) = &mut self.data {
            d.prev();
        }
        self.skip_backward();
    }

    fn key(&self) -> &[u8] {
        self.data.as_ref().map_or(&[], BlockIter::key)
    }

    fn value(&self) -> &[u8] {
        self.data.as_ref().map_or(&[], BlockIter::value)
    }

    fn status(&self) -> Result<()> {
        match &self.err {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::WritableFile;
    use crate::index::key::{
        append_internal_key, internal_key, seek_key, ValueType, MAX_SEQ, TYPE_FOR_SEEK,
    };
    use crate::index::sstable::block::block_trailer;
    use crate::index::sstable::footer::FORMAT_VERSION;
    use crate::index::sstable::{TableBuilder, TableOptions, TableSummary};
    use proptest::prelude::*;
    use rand::{Rng, SeedableRng};
    use std::collections::BTreeMap;
    use std::io;
    use std::sync::Mutex;

    const NAME: &str = "000042.sst";

    /// A `Vec<u8>`-backed file being written.
    #[derive(Clone, Default)]
    struct VecFile {
        data: Arc<Mutex<Vec<u8>>>,
        syncs: Arc<Mutex<usize>>,
    }

    impl WritableFile for VecFile {
        fn append(&mut self, data: &[u8]) -> io::Result<()> {
            self.data.lock().unwrap().extend_from_slice(data);
            Ok(())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
        fn sync(&mut self) -> io::Result<()> {
            *self.syncs.lock().unwrap() += 1;
            Ok(())
        }
        fn len(&self) -> u64 {
            self.data.lock().unwrap().len() as u64
        }
    }

    /// A `Vec<u8>`-backed file being read.
    struct VecReader(Vec<u8>);

    impl RandomAccessFile for VecReader {
        fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
            let off = usize::try_from(offset).unwrap_or(usize::MAX);
            let Some(src) = self.0.get(off..) else {
                return Ok(0);
            };
            let n = src.len().min(buf.len());
            buf[..n].copy_from_slice(&src[..n]);
            Ok(n)
        }
        fn len(&self) -> io::Result<u64> {
            Ok(self.0.len() as u64)
        }
    }

    type Entries = Vec<(Vec<u8>, Vec<u8>)>;

    fn topts(
        block_size: usize,
        restart_interval: usize,
        bloom_bits_per_key: usize,
    ) -> TableOptions {
        TableOptions {
            block_size,
            restart_interval,
            bloom_bits_per_key,
            block_align: false,
        }
    }

    fn build_with_stats(
        entries: &Entries,
        opts: TableOptions,
        stats: Arc<IoStats>,
    ) -> (Vec<u8>, TableSummary) {
        let file = VecFile::default();
        let mut b = TableBuilder::new(
            Box::new(file.clone()),
            PathBuf::from(NAME),
            opts,
            stats,
            IoCategory::Flush,
        );
        for (k, v) in entries {
            b.add(k, v).unwrap();
        }
        assert_eq!(b.num_entries(), entries.len() as u64);
        let summary = b.finish().unwrap();
        assert_eq!(*file.syncs.lock().unwrap(), 1, "finish syncs the file");
        let bytes = file.data.lock().unwrap().clone();
        (bytes, summary)
    }

    fn build(entries: &Entries, opts: TableOptions) -> Vec<u8> {
        build_with_stats(entries, opts, Arc::new(IoStats::default())).0
    }

    fn open_with(
        bytes: Vec<u8>,
        size: u64,
        cache: Option<Arc<BlockCache>>,
    ) -> Result<(Arc<Table>, Arc<IoStats>)> {
        let stats = Arc::new(IoStats::default());
        let t = Table::open(
            Arc::new(VecReader(bytes)),
            PathBuf::from(NAME),
            42,
            size,
            cache,
            stats.clone(),
            IoCategory::UserRead,
        )?;
        Ok((Arc::new(t), stats))
    }

    fn open(bytes: Vec<u8>) -> Result<Arc<Table>> {
        let size = bytes.len() as u64;
        Ok(open_with(bytes, size, None)?.0)
    }

    const CTX: ReadCtx = ReadCtx {
        category: IoCategory::UserRead,
        fill_cache: true,
    };

    /// Scans forward from the first entry; returns the entries seen and the
    /// final status.
    fn scan(t: &Arc<Table>) -> (Entries, Result<()>) {
        let mut it = t.iter(CTX);
        it.seek_to_first();
        let mut out = Vec::new();
        while it.valid() {
            out.push((it.key().to_vec(), it.value().to_vec()));
            it.next();
        }
        (out, it.status())
    }

    fn scan_back(t: &Arc<Table>) -> (Entries, Result<()>) {
        let mut it = t.iter(CTX);
        it.seek_to_last();
        let mut out = Vec::new();
        while it.valid() {
            out.push((it.key().to_vec(), it.value().to_vec()));
            it.prev();
        }
        out.reverse();
        (out, it.status())
    }

    fn ok(r: (Entries, Result<()>)) -> Entries {
        r.1.unwrap();
        r.0
    }

    fn value_entries(n: usize, seed: u64) -> Entries {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        (0..n)
            .map(|i| {
                let k = internal_key(
                    format!("key{i:06}").as_bytes(),
                    rng.gen_range(1..1000),
                    ValueType::Value,
                );
                let len = rng.gen_range(0..200);
                let v: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                (k, v)
            })
            .collect()
    }

    /// Writes `bytes` to a file of a fresh directory and opens it as a table
    /// recorded at `size` bytes, read through a mapping of the file (the
    /// operating system's file system), with a block cache.
    fn open_mapped(
        bytes: &[u8],
        size: u64,
    ) -> (tempfile::TempDir, Result<Arc<Table>>, Arc<IoStats>) {
        use crate::fs::{FileSystem, MappedFile, StdFs};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(NAME);
        std::fs::write(&path, bytes).unwrap();
        let file = MappedFile::wrap(StdFs.open_read(&path).unwrap());
        assert!(file.mapping().is_some());
        let stats = Arc::new(IoStats::default());
        let t = Table::open(
            Arc::from(file),
            path,
            42,
            size,
            Some(Arc::new(BlockCache::new(1 << 20))),
            stats.clone(),
            IoCategory::UserRead,
        );
        (dir, t.map(Arc::new), stats)
    }

    #[test]
    fn a_mapped_table_serves_blocks_in_place_and_compaction_by_system_calls() {
        let entries = value_entries(2_000, 7);
        let bytes = build(&entries, topts(1024, 4, 10));
        let (_dir, t, stats) = open_mapped(&bytes, bytes.len() as u64);
        let t = t.unwrap();
        let read = || stats.snapshot().read_in(IoCategory::UserRead);
        let before = read();
        assert_eq!(ok(scan(&t)), entries);
        assert_eq!(ok(scan_back(&t)), entries);
        // Every block read in place is still counted as read.
        assert!(
            read() - before >= 2 * (bytes.len() as u64 / 2),
            "{}",
            read() - before
        );
        for (k, v) in entries.iter().step_by(97) {
            assert_eq!(t.get(k, CTX).unwrap(), Some((k.clone(), v.clone())));
        }
        let mut idx = BlockIter::new(t.index.clone(), compare_internal);
        idx.seek_to_first();
        let h = BlockHandle::decode_exact(idx.value()).unwrap();
        assert!(t.data_block(h, CTX).unwrap().is_mapped());
        // Not cached: the page cache holds the bytes.
        assert!(t.cache.as_ref().unwrap().get(42, h.offset).is_none());
        for category in [IoCategory::Compaction, IoCategory::Flush] {
            let ctx = ReadCtx {
                category,
                fill_cache: false,
            };
            assert!(!t.data_block(h, ctx).unwrap().is_mapped(), "{category:?}");
        }
    }

    /// A file that records the read-ahead hints it is given.
    struct HintedFile {
        inner: Box<dyn RandomAccessFile>,
        hints: Arc<parking_lot::Mutex<Vec<(u64, u64)>>>,
    }

    impl RandomAccessFile for HintedFile {
        fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
            self.inner.read_at(offset, buf)
        }
        fn len(&self) -> io::Result<u64> {
            self.inner.len()
        }
        fn advise(&self, offset: u64, len: u64, advice: Advice) {
            assert_eq!(advice, Advice::WillNeed);
            self.hints.lock().push((offset, len));
        }
        fn map(&self) -> io::Result<Option<Arc<Mapping>>> {
            self.inner.map()
        }
    }

    #[test]
    fn a_scan_reads_ahead_only_while_mapped_reads_reach_the_device() {
        use crate::fs::{FileSystem, MappedFile, StdFs};
        let entries = value_entries(3_000, 11);
        let bytes = build(&entries, topts(1024, 4, 10));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(NAME);
        std::fs::write(&path, &bytes).unwrap();
        let hints = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let file = MappedFile::wrap(Box::new(HintedFile {
            inner: StdFs.open_read(&path).unwrap(),
            hints: hints.clone(),
        }));
        let cache = Arc::new(BlockCache::new(1 << 20));
        let t = Arc::new(
            Table::open(
                Arc::from(file),
                path,
                42,
                bytes.len() as u64,
                Some(cache.clone()),
                Arc::new(IoStats::default()),
                IoCategory::UserRead,
            )
            .unwrap(),
        );
        // Served from memory: no hint.
        assert_eq!(ok(scan(&t)), entries);
        assert!(hints.lock().is_empty());

        // Mapped reads now take as long as device reads.
        for _ in 0..64 {
            cache
                .map_gauge()
                .record(crate::index::sstable::map_gauge::SLOW_READ_NANOS);
        }
        assert!(cache.map_gauge().reaching_device());
        assert_eq!(ok(scan(&t)), entries);
        let h = hints.lock().clone();
        assert!(h.len() >= 2, "{h:?}");
        // Hints in file order, not overlapping, none longer than the cap,
        // and none past the footer.
        assert_eq!(h[0].1, READ_AHEAD_MIN);
        for w in h.windows(2) {
            assert!(w[1].0 >= w[0].0 + w[0].1, "{h:?}");
            assert!(w[1].1 <= READ_AHEAD_MAX, "{h:?}");
        }
        assert!(h.iter().all(|&(o, l)| o + l <= t.footer_offset()));
        // The scan reached the last block: the hints reach the table's end.
        let (o, l) = *h.last().unwrap();
        assert_eq!(o + l, t.footer_offset(), "{h:?}");

        // A seek reading one block, and compaction reads, hint nothing.
        hints.lock().clear();
        let mut it = t.iter(CTX);
        it.seek(&entries[1_500].0);
        assert!(it.valid());
        let mut it = t.iter(ReadCtx {
            category: IoCategory::Compaction,
            fill_cache: false,
        });
        it.seek_to_first();
        while it.valid() {
            it.next();
        }
        assert!(hints.lock().is_empty(), "{:?}", hints.lock());
    }

    #[test]
    fn damage_in_a_mapped_table_is_corruption_with_file_and_offset() {
        let entries = value_entries(500, 8);
        let bytes = build(&entries, topts(1024, 4, 10));
        let l = layout(&bytes);
        let (h, _) = l.data[l.data.len() / 2];
        let mut damaged = bytes.clone();
        damaged[h.offset as usize + 3] ^= 0x10;
        let (_dir, t, _) = open_mapped(&damaged, damaged.len() as u64);
        let t = t.unwrap();
        let e = scan(&t).1.unwrap_err();
        match &e {
            Error::Corruption { file, offset, .. } => {
                assert!(file.ends_with(NAME), "{e}");
                assert_eq!(*offset, h.offset, "{e}");
            }
            other => panic!("expected corruption, got {other}"),
        }
    }

    #[test]
    fn a_mapped_table_shorter_than_recorded_is_corruption_not_a_fault() {
        // The file lost its tail (and with it the pages a mapping would
        // fault on) but the table is opened at its recorded size: the footer
        // is then read with a system call and found missing.
        let entries = value_entries(500, 9);
        let bytes = build(&entries, topts(1024, 4, 10));
        let cut = bytes.len() / 2;
        let (_dir, t, _) = open_mapped(&bytes[..cut], bytes.len() as u64);
        assert!(matches!(t, Err(Error::Corruption { .. })), "{:?}", t.err());
        // A block handle past the mapping's end is caught before any byte of
        // it is touched.
        let (_dir, t, _) = open_mapped(&bytes, bytes.len() as u64);
        let t = t.unwrap();
        let map = t.src.map.clone().unwrap();
        let far = BlockHandle {
            offset: map.len() as u64 - 10,
            size: 4,
        };
        let e = t
            .src
            .mapped_block(&map, far, 0, IoCategory::UserRead)
            .unwrap_err();
        assert!(
            matches!(e, Error::Corruption { .. }) && e.to_string().contains("out of range"),
            "{e}"
        );
    }

    fn assert_corruption_at(e: &Error, lo: u64, hi: u64) {
        match e {
            Error::Corruption {
                file,
                offset,
                reason,
            } => {
                assert_eq!(file, Path::new(NAME), "{e}");
                assert!(
                    (lo..hi).contains(offset),
                    "offset {offset} not in {lo}..{hi}: {reason}"
                );
            }
            other => panic!("expected corruption, got {other}"),
        }
    }

    #[test]
    fn table_is_send_sync_and_iterator_is_send() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<Table>();
        send::<TableIterator>();
        send::<TableBuilder>();
    }

    #[test]
    fn roundtrip_10k_keys() {
        let entries = value_entries(10_000, 1);
        let stats = Arc::new(IoStats::default());
        let (bytes, summary) = build_with_stats(&entries, TableOptions::default(), stats.clone());
        assert_eq!(summary.file_size, bytes.len() as u64);
        assert_eq!(summary.entries, 10_000);
        assert_eq!(summary.smallest, entries[0].0);
        assert_eq!(summary.largest, entries[9_999].0);
        assert_eq!(
            stats.snapshot().written_in(IoCategory::Flush),
            bytes.len() as u64
        );
        assert_eq!(stats.snapshot().total_read(), 0);

        let t = open(bytes).unwrap();
        assert_eq!(t.file_number(), 42);
        assert_eq!(t.path(), Path::new(NAME));
        assert_eq!(t.file_size(), summary.file_size);
        // 10k keys at 10 bits each, plus an index entry per block.
        assert!(
            t.approximate_memory() > 12_500,
            "{}",
            t.approximate_memory()
        );
        assert_eq!(ok(scan(&t)), entries.clone());
        assert_eq!(ok(scan_back(&t)), entries.clone());
        for (k, v) in &entries {
            let got = t.get(&seek_key(user_key(k), MAX_SEQ), CTX).unwrap();
            assert_eq!(got.as_ref(), Some(&(k.clone(), v.clone())));
        }
        assert_eq!(t.get(&seek_key(b"key", MAX_SEQ), CTX).unwrap(), None);
        assert_eq!(t.get(&seek_key(b"key0100000", MAX_SEQ), CTX).unwrap(), None);
        assert_eq!(t.get(&seek_key(b"zzz", MAX_SEQ), CTX).unwrap(), None);
        assert_eq!(t.verify().unwrap(), 10_000);
    }

    #[test]
    fn empty_table() {
        let bytes = build(&vec![], TableOptions::default());
        let t = open(bytes).unwrap();
        assert_eq!(ok(scan(&t)), vec![]);
        assert_eq!(ok(scan_back(&t)), vec![]);
        let mut it = t.iter(CTX);
        it.seek(&seek_key(b"a", 5));
        assert!(!it.valid());
        assert_eq!(t.get(&seek_key(b"a", 5), CTX).unwrap(), None);
        assert_eq!(t.verify().unwrap(), 0);
    }

    #[test]
    fn get_picks_the_newest_visible_version() {
        let mut entries = Vec::new();
        entries.push((internal_key(b"aaa", 3, ValueType::Value), b"a3".to_vec()));
        for seq in (1..=100u64).rev() {
            let t = if seq % 10 == 0 {
                ValueType::Deletion
            } else {
                ValueType::Value
            };
            entries.push((
                internal_key(b"apple", seq, t),
                format!("apple@{seq}").into_bytes(),
            ));
        }
        entries.push((
            internal_key(b"banana", 5, ValueType::Pointer),
            b"ptr".to_vec(),
        ));
        for bloom in [0, 10] {
            // Tiny blocks: the versions of "apple" span many blocks.
            let t = open(build(&entries, topts(64, 2, bloom))).unwrap();
            assert!(t.iter(CTX).table.index.size() > 64 * 4);
            for s in 0..=110u64 {
                let got = t.get(&seek_key(b"apple", s), CTX).unwrap();
                if s == 0 {
                    assert_eq!(got, None);
                    continue;
                }
                let want_seq = s.min(100);
                let (k, v) = got.expect("a visible version");
                let p = parse_internal_key(&k).unwrap();
                assert_eq!((p.user_key, p.seq), (&b"apple"[..], want_seq));
                assert_eq!(p.vtype == ValueType::Deletion, want_seq % 10 == 0);
                assert_eq!(v, format!("apple@{want_seq}").into_bytes());
            }
            assert_eq!(t.get(&seek_key(b"appl", MAX_SEQ), CTX).unwrap(), None);
            assert_eq!(t.get(&seek_key(b"apple\0", MAX_SEQ), CTX).unwrap(), None);
            assert_eq!(t.get(&seek_key(b"banana", 4), CTX).unwrap(), None);
            let (k, v) = t.get(&seek_key(b"banana", 5), CTX).unwrap().unwrap();
            assert_eq!(
                (k, v),
                (
                    internal_key(b"banana", 5, ValueType::Pointer),
                    b"ptr".to_vec()
                )
            );
            // An exact internal key finds itself.
            let exact = internal_key(b"apple", 37, ValueType::Value);
            assert_eq!(t.get(&exact, CTX).unwrap().unwrap().0, exact);
            assert_eq!(t.verify().unwrap(), entries.len() as u64);
        }
    }

    #[test]
    fn bloom_filter_has_no_false_negatives_and_few_false_positives() {
        let entries = value_entries(10_000, 2);
        let (t, stats) = {
            let bytes = build(&entries, topts(4096, 16, 10));
            let size = bytes.len() as u64;
            open_with(bytes, size, None).unwrap()
        };
        for (k, _) in &entries {
            assert!(t
                .get(&seek_key(user_key(k), MAX_SEQ), CTX)
                .unwrap()
                .is_some());
        }
        let probes = 10_000;
        let mut passed = 0;
        for i in 0..probes {
            let before = stats.snapshot().total_read();
            let absent = format!("absent{i:06}");
            assert_eq!(
                t.get(&seek_key(absent.as_bytes(), MAX_SEQ), CTX).unwrap(),
                None
            );
            if stats.snapshot().total_read() > before {
                passed += 1;
            }
        }
        let rate = passed as f64 / probes as f64;
        assert!(rate < 0.02, "false-positive rate {rate}");
        // Without a filter every probe reads a block.
        let bytes = build(&entries, topts(4096, 16, 0));
        let size = bytes.len() as u64;
        let (t, stats) = open_with(bytes, size, None).unwrap();
        assert!(t.filter.is_none());
        for i in 0..100 {
            let before = stats.snapshot().total_read();
            let absent = format!("key{i:06}x");
            assert_eq!(
                t.get(&seek_key(absent.as_bytes(), MAX_SEQ), CTX).unwrap(),
                None
            );
            assert!(stats.snapshot().total_read() > before);
        }
    }

    #[test]
    fn cache_hits_avoid_reads() {
        let entries = value_entries(2_000, 3);
        let bytes = build(&entries, topts(1024, 16, 10));
        let size = bytes.len() as u64;
        let cache = Arc::new(BlockCache::new(8 << 20));
        let (t, stats) = open_with(bytes, size, Some(cache.clone())).unwrap();
        let reads = || stats.snapshot().read_in(IoCategory::UserRead);
        let uncached = ReadCtx {
            category: IoCategory::UserRead,
            fill_cache: false,
        };
        let k1 = seek_key(user_key(&entries[10].0), MAX_SEQ);
        let k2 = seek_key(user_key(&entries[1_500].0), MAX_SEQ);

        let r0 = reads();
        assert!(t.get(&k1, CTX).unwrap().is_some());
        let r1 = reads();
        assert!(
            r1 > r0 && r1 - r0 <= 1024 + 500,
            "one block read: {}",
            r1 - r0
        );
        assert!(t.get(&k1, CTX).unwrap().is_some());
        assert_eq!(reads(), r1, "second get is served by the cache");

        // fill_cache = false reads but does not insert.
        assert!(t.get(&k2, uncached).unwrap().is_some());
        let r2 = reads();
        assert!(r2 > r1);
        assert!(t.get(&k2, uncached).unwrap().is_some());
        let r3 = reads();
        assert_eq!(r3 - r2, r2 - r1);
        // ... but it does use blocks that are cached.
        assert!(t.get(&k1, uncached).unwrap().is_some());
        assert_eq!(reads(), r3);

        // A full scan fills the cache; a second scan reads nothing.
        assert_eq!(scan(&t).0.len(), 2_000);
        let r4 = reads();
        assert_eq!(scan(&t).0.len(), 2_000);
        assert_eq!(scan_back(&t).0.len(), 2_000);
        assert_eq!(reads(), r4);

        // The same cache serving another table does not mix up blocks.
        let other = value_entries(2_000, 4);
        let bytes = build(&other, topts(1024, 16, 10));
        let size = bytes.len() as u64;
        let stats2 = Arc::new(IoStats::default());
        let t2 = Table::open(
            Arc::new(VecReader(bytes)),
            PathBuf::from("other"),
            43,
            size,
            Some(cache),
            stats2,
            IoCategory::UserRead,
        )
        .unwrap();
        let t2 = Arc::new(t2);
        assert_eq!(scan(&t2).0, other);
        assert_eq!(scan(&t).0, entries);
    }

    #[test]
    fn concurrent_readers_share_a_table_and_a_small_cache() {
        let entries = Arc::new(value_entries(3_000, 8));
        let bytes = build(&entries, topts(1024, 16, 10));
        let size = bytes.len() as u64;
        // Room for a few blocks only: readers keep evicting each other's.
        let cache = Arc::new(BlockCache::new(16 << 10));
        let (t, _) = open_with(bytes, size, Some(cache)).unwrap();
        let threads: Vec<_> = (0..4u64)
            .map(|n| {
                let (t, entries) = (t.clone(), entries.clone());
                std::thread::spawn(move || {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(n);
                    for _ in 0..2_000 {
                        let (k, v) = &entries[rng.gen_range(0..entries.len())];
                        let got = t.get(&seek_key(user_key(k), MAX_SEQ), CTX).unwrap();
                        assert_eq!(got.as_ref(), Some(&(k.clone(), v.clone())));
                    }
                    let mut it = t.iter(CTX);
                    it.seek(&entries[n as usize * 500].0);
                    for e in &entries[n as usize * 500..] {
                        assert_eq!((it.key(), it.value()), (&e.0[..], &e.1[..]));
                        it.next();
                    }
                    assert!(!it.valid() && it.status().is_ok());
                })
            })
            .collect();
        for th in threads {
            th.join().unwrap();
        }
    }

    #[test]
    fn open_reads_are_counted() {
        let entries = value_entries(100, 5);
        let bytes = build(&entries, topts(512, 16, 10));
        let t_bytes = bytes.clone();
        let size = bytes.len() as u64;
        let (t, stats) = open_with(bytes, size, None).unwrap();
        let opened = stats.snapshot().read_in(IoCategory::UserRead);
        assert!(opened >= FOOTER_LEN as u64 + t.approximate_memory() as u64);
        t.verify().unwrap();
        // verify re-reads the whole file, each byte once.
        let verified = stats.snapshot().read_in(IoCategory::UserRead) - opened;
        assert_eq!(verified, size);
        // open reads everything but the data blocks.
        let data: u64 = layout(&t_bytes).data.iter().map(|(h, _)| h.size + 5).sum();
        assert_eq!(opened, size - data);
    }

    /// Where the blocks of a table are.
    struct Layout {
        data: Vec<(BlockHandle, Entries)>,
        index: BlockHandle,
        metaindex: BlockHandle,
        filter: Option<BlockHandle>,
        footer: u64,
    }

    fn layout(bytes: &[u8]) -> Layout {
        let t = open(bytes.to_vec()).unwrap();
        let mut idx = BlockIter::new(t.index.clone(), compare_internal);
        idx.seek_to_first();
        let mut data = Vec::new();
        while idx.valid() {
            let h = BlockHandle::decode_exact(idx.value()).unwrap();
            let mut it = BlockIter::new(t.data_block(h, CTX).unwrap(), compare_internal);
            it.seek_to_first();
            let mut es = Vec::new();
            while it.valid() {
                es.push((it.key().to_vec(), it.value().to_vec()));
                it.next();
            }
            data.push((h, es));
            idx.next();
        }
        let meta = Arc::new(
            t.src
                .block(
                    t.footer.metaindex,
                    t.src.footer_offset,
                    IoCategory::UserRead,
                )
                .unwrap(),
        );
        let filter = t
            .src
            .filter(meta, t.footer.metaindex, IoCategory::UserRead)
            .unwrap()
            .map(|(_, h)| h);
        Layout {
            data,
            index: t.footer.index,
            metaindex: t.footer.metaindex,
            filter,
            footer: t.src.footer_offset,
        }
    }

    fn block_range(h: BlockHandle) -> (u64, u64) {
        (h.offset, h.offset + h.size + BLOCK_TRAILER_LEN as u64)
    }

    fn flip(bytes: &[u8], bit: u64) -> Vec<u8> {
        let mut b = bytes.to_vec();
        b[(bit / 8) as usize] ^= 1 << (bit % 8);
        b
    }

    fn small_table() -> (Entries, Vec<u8>) {
        let entries = value_entries(300, 6);
        let bytes = build(&entries, topts(512, 4, 10));
        (entries, bytes)
    }

    /// `block_align`: every data block starts on a page boundary and, but
    /// for one holding a single entry larger than a page, ends within it;
    /// the table reads back whole, by gets, scans both ways and `verify`,
    /// and a scan's read-ahead still sees the blocks in file order.
    #[test]
    fn aligned_blocks_fit_their_pages_and_read_back() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let entries: Entries = (0..600)
            .map(|i| {
                let k = internal_key(format!("key{i:06}").as_bytes(), 5, ValueType::Value);
                // Mostly ~1 KiB, some small, a few past a page.
                let len = match i % 50 {
                    0 => 5_000 + rng.gen_range(0..3_000),
                    1..=20 => rng.gen_range(0..100),
                    _ => 900 + rng.gen_range(0..200),
                };
                (k, (0..len).map(|_| rng.gen()).collect())
            })
            .collect();
        for block_size in [1024, 4096, 6000] {
            let mut o = topts(block_size, 16, 10);
            o.block_align = true;
            let bytes = build(&entries, o);
            let lay = layout(&bytes);
            let align = super::super::builder::ALIGN;
            let limit = (block_size as u64).next_multiple_of(align);
            for (h, es) in &lay.data {
                assert_eq!(h.offset % align, 0, "block at {} unaligned", h.offset);
                let (lo, hi) = block_range(*h);
                assert!(
                    hi - lo <= limit || es.len() == 1,
                    "block at {lo} of {} entries takes {} bytes",
                    es.len(),
                    hi - lo
                );
            }
            // Blocks are not cut early: each but the last could not take
            // the next entry (bounded by its three varints of up to 5 bytes
            // and a restart point of 4, as the builder bounds it).
            let entry_overhead = 3 * 5 + 4;
            for w in lay.data.windows(2) {
                let ((h, _), (_, next)) = (&w[0], &w[1]);
                let (k, v) = &next[0];
                let with_next = h.size
                    + BLOCK_TRAILER_LEN as u64
                    + entry_overhead
                    + k.len() as u64
                    + v.len() as u64;
                assert!(with_next > limit, "block at {} cut early", h.offset);
            }
            let t = open(bytes).unwrap();
            for (k, v) in entries.iter().step_by(3) {
                assert_eq!(t.get(k, CTX).unwrap(), Some((k.clone(), v.clone())));
            }
            assert_eq!(ok(scan(&t)), entries);
            assert_eq!(ok(scan_back(&t)), entries);
            assert_eq!(t.verify().unwrap(), entries.len() as u64);
        }
    }

    #[test]
    fn flipped_bit_in_a_data_block_is_corruption() {
        let (entries, bytes) = small_table();
        let lay = layout(&bytes);
        assert!(lay.data.len() >= 10);
        let nblocks = lay.data.len();
        for bi in [0, nblocks / 2, nblocks - 1] {
            let (h, block_entries) = &lay.data[bi];
            let (lo, hi) = block_range(*h);
            let first_in_block = entries.iter().position(|e| e == &block_entries[0]).unwrap();
            let last_in_block = first_in_block + block_entries.len();
            for bit in (lo * 8..hi * 8).step_by(29).chain(hi * 8 - 40..hi * 8) {
                let damaged = flip(&bytes, bit);
                let t = open(damaged).unwrap();
                // Point lookups of keys in the block.
                for (k, _) in block_entries.iter().step_by(7) {
                    let e = t.get(&seek_key(user_key(k), MAX_SEQ), CTX).unwrap_err();
                    assert_corruption_at(&e, h.offset, h.offset + 1);
                }
                // Lookups elsewhere still work.
                let other = &entries[(last_in_block + 3) % entries.len()];
                if !block_entries.contains(other) {
                    let got = t.get(&seek_key(user_key(&other.0), MAX_SEQ), CTX).unwrap();
                    assert_eq!(got.as_ref(), Some(other));
                }
                // Forward and backward scans stop at the block with an error
                // and never yield a wrong entry.
                let (seen, status) = scan(&t);
                assert_corruption_at(&status.unwrap_err(), h.offset, h.offset + 1);
                assert_eq!(&seen[..], &entries[..first_in_block]);
                let (seen, status) = scan_back(&t);
                assert_corruption_at(&status.unwrap_err(), h.offset, h.offset + 1);
                assert_eq!(&seen[..], &entries[last_in_block..]);
                // A seek into the block.
                let mut it = t.iter(CTX);
                it.seek(&block_entries[0].0);
                assert!(!it.valid());
                assert_corruption_at(&it.status().unwrap_err(), h.offset, h.offset + 1);
                // The error is sticky.
                it.seek_to_first();
                assert!(!it.valid() && it.status().is_err());
                // verify.
                assert_corruption_at(&t.verify().unwrap_err(), h.offset, h.offset + 1);
            }
        }
    }

    #[test]
    fn flipped_bit_in_index_filter_metaindex_or_footer_is_corruption() {
        let (_, bytes) = small_table();
        let lay = layout(&bytes);
        let filter = lay.filter.expect("table has a filter");
        let regions = [
            ("index", block_range(lay.index)),
            ("filter", block_range(filter)),
            ("metaindex", block_range(lay.metaindex)),
            ("footer", (lay.footer, bytes.len() as u64)),
        ];
        for (name, (lo, hi)) in regions {
            for bit in lo * 8..hi * 8 {
                let e = open(flip(&bytes, bit)).unwrap_err();
                // The error names the damaged block (or footer) itself.
                assert_corruption_at(&e, lo, lo + 1);
                let _ = name;
            }
        }
    }

    /// A reader whose bytes the test can damage after the table is open.
    struct SharedReader(Arc<Mutex<Vec<u8>>>);

    impl RandomAccessFile for SharedReader {
        fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
            VecReader(self.0.lock().unwrap().clone()).read_at(offset, buf)
        }
        fn len(&self) -> io::Result<u64> {
            Ok(self.0.lock().unwrap().len() as u64)
        }
    }

    #[test]
    fn damage_after_open_is_found_by_verify() {
        let (entries, bytes) = small_table();
        let lay = layout(&bytes);
        let mid = lay.data.len() / 2;
        let regions = [
            block_range(lay.data[0].0),
            block_range(lay.data[mid].0),
            block_range(lay.index),
            block_range(lay.filter.unwrap()),
            block_range(lay.metaindex),
            (lay.footer, bytes.len() as u64),
        ];
        for (lo, hi) in regions {
            for bit in [lo * 8, (lo + hi) * 4 + 3, hi * 8 - 1] {
                let shared = Arc::new(Mutex::new(bytes.clone()));
                let t = Table::open(
                    Arc::new(SharedReader(shared.clone())),
                    PathBuf::from(NAME),
                    42,
                    bytes.len() as u64,
                    None,
                    Arc::new(IoStats::default()),
                    IoCategory::Compaction,
                )
                .unwrap();
                *shared.lock().unwrap() = flip(&bytes, bit);
                assert_corruption_at(&t.verify().unwrap_err(), lo, lo + 1);
                // Reads use the index and filter held in memory: only damage
                // to a data block shows, and then as corruption.
                let t = Arc::new(t);
                let (seen, status) = scan(&t);
                if lay.data.iter().any(|(h, _)| h.offset == lo) {
                    assert_corruption_at(&status.unwrap_err(), lo, lo + 1);
                    assert!(seen.len() < entries.len());
                } else {
                    assert_eq!(ok((seen, status)), entries);
                }
            }
        }
    }

    #[test]
    fn structural_damage_behind_a_valid_checksum_is_corruption() {
        let (entries, bytes) = small_table();
        let lay = layout(&bytes);
        let (h, block_entries) = &lay.data[lay.data.len() / 2];
        let (start, end) = (h.offset as usize, (h.offset + h.size) as usize);
        // (what, where, bytes written there)
        let damages: [(&str, usize, &[u8]); 3] = [
            ("restart count", end - 4, &[0xff; 4]),
            ("shared prefix", start, &[5]),
            ("varint", start, &[0xff; 3]),
        ];
        for (what, at, patch) in damages {
            let mut b = bytes.clone();
            b[at..at + patch.len()].copy_from_slice(patch);
            fix_checksum(&mut b, *h);
            let t = open(b).unwrap();
            let probe = seek_key(user_key(&block_entries[0].0), MAX_SEQ);
            let e = t.get(&probe, CTX).unwrap_err();
            assert_corruption_at(&e, h.offset, h.offset + 1);
            let (seen, status) = scan(&t);
            assert_corruption_at(&status.unwrap_err(), h.offset, h.offset + 1);
            assert!(entries.starts_with(&seen), "{what}: wrong entries");
            assert_corruption_at(&t.verify().unwrap_err(), h.offset, h.offset + 1);
        }
    }

    #[test]
    fn verify_rejects_unparsable_keys() {
        let mut entries = value_entries(50, 7);
        let opts = topts(256, 4, 10);
        // The first key of the third block (not a separator) gets an
        // unknown type byte (7); sizes do not change.
        let lay = layout(&build(&entries, opts.clone()));
        let (h, block_entries) = &lay.data[2];
        assert!(block_entries.len() > 1);
        let at = entries.iter().position(|e| e == &block_entries[0]).unwrap();
        let n = entries[at].0.len();
        entries[at].0[n - 8] = 7;
        let e = open(build(&entries, opts)).unwrap().verify().unwrap_err();
        assert_corruption_at(&e, h.offset, h.offset + 1);
        assert!(e.to_string().contains("unparsable"), "{e}");
    }

    #[test]
    fn bad_magic_and_version_are_named() {
        let (_, bytes) = small_table();
        let lay = layout(&bytes);
        let mut b = bytes.clone();
        let n = b.len();
        b[n - 3] ^= 0x40;
        let e = open(b).unwrap_err();
        assert!(e.to_string().contains("not a sepkv table"), "{e}");

        // A well-formed footer of another format version.
        let mut b = bytes.clone();
        let f = lay.footer as usize;
        b[f + 40..f + 44].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
        let crc = crate::format::checksum::mask(crate::format::checksum::crc(&b[f..f + 44]));
        b[f + 44..f + 48].copy_from_slice(&crc.to_le_bytes());
        let e = open(b).unwrap_err();
        assert_corruption_at(&e, lay.footer, lay.footer + 1);
        assert!(e.to_string().contains("unsupported"), "{e}");
    }

    #[test]
    fn out_of_range_handles_are_corruption() {
        let (_, bytes) = small_table();
        let lay = layout(&bytes);
        let f = lay.footer as usize;
        for index in [
            BlockHandle {
                offset: u64::MAX,
                size: 10,
            },
            BlockHandle {
                offset: 10,
                size: u64::MAX,
            },
            BlockHandle {
                offset: 0,
                size: lay.footer,
            },
            BlockHandle {
                offset: lay.footer - 4,
                size: 0,
            },
        ] {
            let mut b = bytes[..f].to_vec();
            b.extend_from_slice(
                &Footer {
                    metaindex: lay.metaindex,
                    index,
                }
                .encode(),
            );
            let e = open(b).unwrap_err();
            assert_corruption_at(&e, lay.footer, lay.footer + 1);
            assert!(e.to_string().contains("out of range"), "{e}");
        }
    }

    #[test]
    fn truncated_file_is_corruption() {
        let (_, bytes) = small_table();
        let len = bytes.len();
        for keep in [
            0,
            1,
            10,
            FOOTER_LEN - 1,
            FOOTER_LEN,
            FOOTER_LEN + 7,
            len / 2,
            len - 100,
            len - 1,
        ] {
            let short = bytes[..keep].to_vec();
            // The size recorded by the caller is the truncated one ...
            let e = open(short.clone()).unwrap_err();
            assert!(e.is_corruption(), "{e}");
            // ... or the original one, the file being shorter.
            let e = open_with(short, len as u64, None).unwrap_err();
            assert!(e.is_corruption(), "{e}");
            assert!(e.to_string().contains("truncated"), "{e}");
        }
    }

    /// Rewrites the trailer of the block at `h` so its checksum matches.
    fn fix_checksum(bytes: &mut [u8], h: BlockHandle) {
        let (s, e) = (h.offset as usize, (h.offset + h.size) as usize);
        let t = block_trailer(&bytes[s..e]);
        bytes[e..e + BLOCK_TRAILER_LEN].copy_from_slice(&t);
    }

    /// Runs every read path; only checks that nothing panics, that errors
    /// are corruption, and that iteration terminates.
    fn exercise(bytes: Vec<u8>, probes: &[Vec<u8>]) {
        let t = match open(bytes) {
            Ok(t) => t,
            Err(e) => {
                assert!(e.is_corruption(), "{e}");
                return;
            }
        };
        for p in probes {
            if let Err(e) = t.get(p, CTX) {
                assert!(e.is_corruption(), "{e}");
            }
            let mut it = t.iter(CTX);
            it.seek(p);
            for _ in 0..3 {
                if it.valid() {
                    it.prev();
                }
            }
            if let Err(e) = it.status() {
                assert!(e.is_corruption(), "{e}");
            }
        }
        let (seen, st) = scan(&t);
        assert!(seen.len() < 100_000);
        if let Err(e) = st {
            assert!(e.is_corruption(), "{e}");
        }
        let (_, st) = scan_back(&t);
        if let Err(e) = st {
            assert!(e.is_corruption(), "{e}");
        }
        if let Err(e) = t.verify() {
            assert!(e.is_corruption(), "{e}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn random_bytes_are_corruption(data in proptest::collection::vec(any::<u8>(), 0..3000)) {
            let e = open(data).unwrap_err();
            prop_assert!(e.is_corruption(), "{}", e);
        }

        #[test]
        fn random_bytes_behind_a_valid_footer_never_panic(
            data in proptest::collection::vec(any::<u8>(), 0..3000),
            mo in any::<u16>(), ms in any::<u16>(), io in any::<u16>(), is in any::<u16>(),
        ) {
            let mut b = data;
            let footer = Footer {
                metaindex: BlockHandle { offset: mo as u64, size: ms as u64 },
                index: BlockHandle { offset: io as u64, size: is as u64 },
            };
            b.extend_from_slice(&footer.encode());
            exercise(b, &[seek_key(b"key000100", MAX_SEQ)]);
        }

        /// Damage that the checksums cannot see (the trailer is rewritten to
        /// match) must still never panic nor surface as anything but
        /// corruption.
        #[test]
        fn damaged_blocks_with_valid_checksums_never_panic(
            which in any::<prop::sample::Index>(),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..8), 1..6),
        ) {
            let (entries, bytes) = small_table();
            let lay = layout(&bytes);
            let mut blocks: Vec<BlockHandle> = lay.data.iter().map(|(h, _)| *h).collect();
            blocks.extend([lay.index, lay.metaindex]);
            blocks.extend(lay.filter);
            let h = *which.get(&blocks);
            let mut b = bytes.clone();
            for (pos, bit) in flips {
                let at = h.offset as usize + pos.index(h.size as usize);
                b[at] ^= 1 << bit;
            }
            fix_checksum(&mut b, h);
            let probes: Vec<Vec<u8>> = entries.iter().step_by(37).map(|(k, _)| k.clone()).collect();
            exercise(b, &probes);
        }
    }

    /// An internal key ordered by [`compare_internal`], for the model.
    #[derive(Clone, Debug, PartialEq, Eq)]
    struct Ik(Vec<u8>);

    impl Ord for Ik {
        fn cmp(&self, other: &Self) -> Ordering {
            compare_internal(&self.0, &other.0)
        }
    }

    impl PartialOrd for Ik {
        fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
            Some(self.cmp(other))
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        First,
        Last,
        Next,
        Prev,
        Seek(Vec<u8>),
    }

    fn arb_ikey() -> impl Strategy<Value = Vec<u8>> {
        (proptest::collection::vec(0u8..3, 0..4), 0u64..40, 0u8..3).prop_map(|(uk, seq, t)| {
            let mut k = Vec::new();
            append_internal_key(&mut k, &uk, seq, t);
            k
        })
    }

    fn arb_target() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            arb_ikey(),
            (proptest::collection::vec(0u8..3, 0..4), 0u64..42).prop_map(|(uk, seq)| {
                let mut k = Vec::new();
                append_internal_key(&mut k, &uk, seq, TYPE_FOR_SEEK);
                k
            }),
        ]
    }

    fn arb_op() -> impl Strategy<Value = Op> {
        prop_oneof![
            1 => Just(Op::First),
            1 => Just(Op::Last),
            4 => Just(Op::Next),
            4 => Just(Op::Prev),
            3 => arb_target().prop_map(Op::Seek),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn iteration_and_get_match_a_model(
            raw in proptest::collection::vec((arb_ikey(), proptest::collection::vec(any::<u8>(), 0..24)), 0..150),
            block_size in 1usize..300,
            restart_interval in 1usize..5,
            bloom in prop_oneof![Just(0usize), Just(10usize)],
            ops in proptest::collection::vec(arb_op(), 1..60),
            targets in proptest::collection::vec(arb_target(), 1..20),
            cached in any::<bool>(),
        ) {
            let model: BTreeMap<Ik, Vec<u8>> = raw.into_iter().map(|(k, v)| (Ik(k), v)).collect();
            let entries: Entries = model.iter().map(|(k, v)| (k.0.clone(), v.clone())).collect();
            let bytes = build(&entries, topts(block_size, restart_interval, bloom));
            let size = bytes.len() as u64;
            let cache = cached.then(|| Arc::new(BlockCache::new(1 << 20)));
            let (t, _) = open_with(bytes, size, cache).unwrap();
            prop_assert_eq!(t.verify().unwrap(), entries.len() as u64);
            prop_assert_eq!(ok(scan(&t)), entries.clone());
            prop_assert_eq!(ok(scan_back(&t)), entries.clone());

            let mut it = t.iter(CTX);
            let mut cur: Option<Ik> = None;
            for op in ops {
                match op {
                    Op::First => {
                        it.seek_to_first();
                        cur = model.keys().next().cloned();
                    }
                    Op::Last => {
                        it.seek_to_last();
                        cur = model.keys().next_back().cloned();
                    }
                    Op::Seek(t) => {
                        it.seek(&t);
                        cur = model.range(Ik(t)..).next().map(|(k, _)| k.clone());
                    }
                    Op::Next => {
                        let Some(c) = cur.take() else { continue };
                        it.next();
                        cur = model
                            .range((std::ops::Bound::Excluded(c), std::ops::Bound::Unbounded))
                            .next()
                            .map(|(k, _)| k.clone());
                    }
                    Op::Prev => {
                        let Some(c) = cur.take() else { continue };
                        it.prev();
                        cur = model.range(..c).next_back().map(|(k, _)| k.clone());
                    }
                }
                prop_assert_eq!(it.valid(), cur.is_some());
                if let Some(c) = &cur {
                    prop_assert_eq!(it.key(), &c.0[..]);
                    prop_assert_eq!(it.value(), &model[c][..]);
                }
            }
            prop_assert!(it.status().is_ok());

            for target in targets {
                let want = model
                    .range(Ik(target.clone())..)
                    .next()
                    .filter(|(k, _)| user_key(&k.0) == user_key(&target))
                    .map(|(k, v)| (k.0.clone(), v.clone()));
                prop_assert_eq!(t.get(&target, CTX).unwrap(), want);
            }
        }
    }
}
