//! Reading a DTable at one size: every segment opened as an SSTable with
//! its per-block filters; lookups by Algorithm 4 (newest segment first).

use super::format::{
    decode_aggregated, Aggregated, BlockFilters, DFooter, Directory, Shadowed, DFOOTER_LEN,
    SHADOWED_META_NAME,
};
use crate::error::{Error, Result};
use crate::fs::{IoCategory, IoStats, RandomAccessFile};
use crate::index::cache::BlockCache;
use crate::index::iter::InternalIterator;
use crate::index::key::user_key;
use crate::index::merger::MergingIterator;
use crate::index::multi_get::BlockReuse;
use crate::index::sstable::{
    check_trailer, key_hash, BlockHandle, ReadCtx, Table, TableIterator, BLOCK_FILTERS_META_NAME,
    BLOCK_TRAILER_LEN, READ_AHEAD_MIN,
};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Smallest first read-ahead window of a segment's cursor (bytes). A
/// scan's cursor in a segment reads ahead, once it loads a second block in
/// file order, a window of the segment's share (by entries) of one
/// SSTable's [`READ_AHEAD_MIN`], at least this: the segments of a DTable
/// together read ahead about what one table would, where a full window per
/// segment read several times the bytes a short scan uses.
const SEGMENT_READ_AHEAD_MIN: u64 = 16 << 10;

/// A lookup's answer: the internal key and value found.
type Hit = (Vec<u8>, Vec<u8>);

/// One segment: an SSTable inside the DTable, plus its block filters.
struct Segment {
    seq: u64,
    /// Entries the directory gives the segment.
    entries: u64,
    /// Bytes the directory gives the segment.
    bytes: u64,
    table: Arc<Table>,
    filters: BlockFilters,
}

/// An open DTable as of one footer.
pub struct DTable {
    path: PathBuf,
    number: u64,
    size: u64,
    directory: Directory,
    overlapped: Vec<Aggregated>,
    /// Oldest first.
    segments: Vec<Segment>,
    /// [`DTable::dead_bytes`], once read.
    dead: OnceLock<u64>,
    /// Read charges against this reader ([`DTable::charge`]).
    charged: AtomicU64,
}

impl std::fmt::Debug for DTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DTable")
            .field("path", &self.path)
            .field("size", &self.size)
            .field("segments", &self.segments.len())
            .finish_non_exhaustive()
    }
}

/// Reads and checksums the tail block at `handle`, which must end by
/// `limit`.
fn tail_block(
    file: &dyn RandomAccessFile,
    path: &Path,
    stats: &IoStats,
    handle: BlockHandle,
    limit: u64,
    referrer: u64,
    category: IoCategory,
) -> Result<Vec<u8>> {
    let end = handle
        .offset
        .checked_add(handle.size)
        .and_then(|e| e.checked_add(BLOCK_TRAILER_LEN as u64));
    let len = match (end, usize::try_from(handle.size)) {
        (Some(e), Ok(l)) if e <= limit => l,
        _ => {
            return Err(Error::corruption(
                path,
                referrer,
                format!(
                    "block handle (offset {}, size {}) out of range of the {limit}-byte table",
                    handle.offset, handle.size
                ),
            ))
        }
    };
    let mut buf = vec![0u8; len + BLOCK_TRAILER_LEN];
    file.read_exact_at(handle.offset, &mut buf).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            Error::corruption(path, handle.offset, "file truncated inside a DTable tail")
        } else {
            Error::io(path, e)
        }
    })?;
    stats.add_read(category, buf.len() as u64);
    let trailer = buf.split_off(len);
    check_trailer(&buf, &trailer).map_err(|r| Error::corruption(path, handle.offset, r))?;
    Ok(buf)
}

impl DTable {
    /// Opens the DTable in `file` as of `size` (the end of the footer the
    /// manifest recorded; later bytes are ignored): reads the footer, the
    /// directory, the overlapped metaindex, and the index, metaindex and
    /// block filters of every segment.
    ///
    /// # Errors
    /// `Corruption` naming the file and offset of any damaged byte; `Io`
    /// when a read fails.
    pub fn open(
        file: Arc<dyn RandomAccessFile>,
        path: PathBuf,
        number: u64,
        size: u64,
        cache: Option<Arc<BlockCache>>,
        stats: Arc<IoStats>,
        category: IoCategory,
    ) -> Result<DTable> {
        let Some(footer_at) = size.checked_sub(DFOOTER_LEN as u64) else {
            return Err(Error::corruption(
                path,
                0,
                format!("{size} bytes is shorter than a DTable footer"),
            ));
        };
        let mut fb = vec![0u8; DFOOTER_LEN];
        file.read_exact_at(footer_at, &mut fb).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                Error::corruption(&path, footer_at, "file truncated before its DTable footer")
            } else {
                Error::io(&path, e)
            }
        })?;
        stats.add_read(category, DFOOTER_LEN as u64);
        let footer = DFooter::decode(&fb).map_err(|r| Error::corruption(&path, footer_at, r))?;
        let dir_bytes = tail_block(
            file.as_ref(),
            &path,
            &stats,
            footer.directory,
            footer_at,
            footer_at,
            category,
        )?;
        let directory = Directory::decode(&dir_bytes, footer.directory.offset)
            .map_err(|r| Error::corruption(&path, footer.directory.offset, r))?;
        let ov_bytes = tail_block(
            file.as_ref(),
            &path,
            &stats,
            footer.overlapped,
            footer_at,
            footer_at,
            category,
        )?;
        let overlapped = decode_aggregated(&ov_bytes)
            .map_err(|r| Error::corruption(&path, footer.overlapped.offset, r))?;
        let mut segments = Vec::with_capacity(directory.segments.len());
        for s in &directory.segments {
            let table = Arc::new(Table::open(
                file.clone(),
                path.clone(),
                number,
                s.end,
                cache.clone(),
                stats.clone(),
                category,
            )?);
            let filters = match table.meta_block(BLOCK_FILTERS_META_NAME)? {
                Some(b) => BlockFilters::decode(&b).map_err(|r| {
                    Error::corruption(
                        &path,
                        table.footer_offset(),
                        format!("segment {}: {r}", s.seq),
                    )
                })?,
                None => BlockFilters::default(),
            };
            segments.push(Segment {
                seq: s.seq,
                entries: s.entries,
                bytes: s.bytes,
                table,
                filters,
            });
        }
        Ok(DTable {
            path,
            number,
            size,
            directory,
            overlapped,
            segments,
            dead: OnceLock::new(),
            charged: AtomicU64::new(0),
        })
    }

    /// Path of the file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// File number.
    pub fn file_number(&self) -> u64 {
        self.number
    }

    /// Size this reader reads the table at (bytes, the end of its footer).
    pub fn file_size(&self) -> u64 {
        self.size
    }

    /// The segment directory.
    pub fn directory(&self) -> &Directory {
        &self.directory
    }

    /// The overlapped metaindex (§3.2).
    pub fn overlapped(&self) -> &[Aggregated] {
        &self.overlapped
    }

    /// Number of segments.
    pub fn num_segments(&self) -> usize {
        self.segments.len()
    }

    /// Bytes held in memory for indexes and filters.
    pub fn approximate_memory(&self) -> usize {
        self.segments
            .iter()
            .map(|s| s.table.approximate_memory() + s.filters.size())
            .sum()
    }

    /// Point lookup (Algorithm 4): segments from the newest to the oldest;
    /// in each, the whole-segment filter is probed (a segment written before
    /// it existed has none), then the index picks the one data block that
    /// may hold the key, its bloom filter is consulted, and only then is the
    /// block read. The key is hashed once for every filter. The
    /// first segment holding a version of the user key with sequence
    /// `<=` that of `ikey` answers: later segments hold newer versions.
    /// Returns `(internal key, value)` as [`Table::get`] does.
    pub fn get(&self, ikey: &[u8], ctx: ReadCtx) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        self.get_reusing(ikey, ctx, None)
    }

    /// [`DTable::get`] as one lookup of a batch: each segment's data block
    /// comes from `reuse` when the batch's last lookup in that segment
    /// loaded it ([`BlockReuse`]).
    pub fn get_reusing(
        &self,
        ikey: &[u8],
        ctx: ReadCtx,
        reuse: Option<&mut BlockReuse>,
    ) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        self.get_probing(ikey, ctx, reuse).map(|(hit, _)| hit)
    }

    /// [`DTable::get_reusing`], and the number of segments the lookup
    /// consulted (probed the filters of): 1 when the newest segment
    /// answered, every segment when none did.
    pub fn get_probing(
        &self,
        ikey: &[u8],
        ctx: ReadCtx,
        mut reuse: Option<&mut BlockReuse>,
    ) -> Result<(Option<Hit>, usize)> {
        let hash = key_hash(user_key(ikey));
        for (i, s) in self.segments.iter().rev().enumerate() {
            let filters = &s.filters;
            let may_contain = |n, off| filters.may_contain_hash(n, off, hash);
            if let Some(hit) =
                s.table
                    .get_filtered(ikey, hash, ctx, &may_contain, reuse.as_deref_mut())?
            {
                return Ok((Some(hit), i + 1));
            }
        }
        Ok((None, self.segments.len()))
    }

    /// Adds `n` read charges (extra segments that seeks positioned a cursor
    /// in, or lookups that consulted more than one segment) to this
    /// reader's count, and returns the count before them. The count lives
    /// as long as the reader: an append, which opens a new one, starts it
    /// again.
    pub fn charge(&self, n: u64) -> u64 {
        self.charged.fetch_add(n, Ordering::Relaxed)
    }

    /// Read charges counted so far ([`DTable::charge`]).
    pub fn charged(&self) -> u64 {
        self.charged.load(Ordering::Relaxed)
    }

    /// Estimated bytes of the table that no reader needs once its newest
    /// segment is read: the stale tails of earlier appends (and any torn
    /// append skipped over, [`Directory::stale_tail_bytes`]) plus the
    /// bytes every segment recorded, when it was appended, as shadowed in
    /// the older ones ([`Shadowed`]; segments written without the record
    /// count 0). Old versions a snapshot still reads count as dead too: the
    /// figure measures what a rewrite could drop at most. Reads each
    /// segment's `lwc.shadowed` block the first time it is asked.
    ///
    /// # Errors
    /// `Corruption` when a recorded block is damaged; `Io` when a read fails.
    pub fn dead_bytes(&self) -> Result<u64> {
        if let Some(&d) = self.dead.get() {
            return Ok(d);
        }
        let mut dead = self.directory.stale_tail_bytes();
        for s in &self.segments {
            if let Some(b) = s.table.meta_block(SHADOWED_META_NAME)? {
                let sh = Shadowed::decode(&b).map_err(|r| {
                    Error::corruption(
                        &self.path,
                        s.table.footer_offset(),
                        format!("segment {}: {r}", s.seq),
                    )
                })?;
                dead = dead.saturating_add(sh.bytes);
            }
        }
        let dead = dead.min(self.size);
        Ok(*self.dead.get_or_init(|| dead))
    }

    /// What a segment holding `user_keys` (each once) would shadow if it
    /// were appended now: for each key, the entry of the newest segment
    /// whose whole-segment filter may hold it, counted with that segment's
    /// bytes per entry. An estimate: a filter's false positive counts an
    /// entry that is not there (1 % at 10 bits per key), and segments
    /// without a segment filter are not searched. No I/O.
    pub fn shadowed_by<'k>(&self, user_keys: impl IntoIterator<Item = &'k [u8]>) -> Shadowed {
        let mut sh = Shadowed::default();
        for uk in user_keys {
            let hash = key_hash(uk);
            let hit = self
                .segments
                .iter()
                .rev()
                .find(|s| s.table.filter_may_contain_hash(hash) == Some(true));
            if let Some(s) = hit {
                sh.entries += 1;
                sh.bytes += s.bytes / s.entries.max(1);
            }
        }
        sh
    }

    /// Number of segments carrying both the whole-segment filter and
    /// per-block filters (tests).
    #[cfg(test)]
    pub(crate) fn segments_with_both_filters(&self) -> usize {
        self.segments
            .iter()
            .filter(|s| s.table.has_filter() && !s.filters.is_empty())
            .count()
    }

    /// A cursor over every entry of every segment, merged in internal-key
    /// order (unpositioned).
    pub fn iter(&self, ctx: ReadCtx) -> DTableIterator {
        let total = self.segments.iter().map(|s| s.entries).sum::<u64>().max(1);
        let children: Vec<TableIterator> = self
            .segments
            .iter()
            .rev()
            .map(|s| {
                let share = READ_AHEAD_MIN.saturating_mul(s.entries) / total;
                s.table
                    .iter(ctx)
                    .with_first_read_ahead(share.max(SEGMENT_READ_AHEAD_MIN))
            })
            .collect();
        DTableIterator {
            merged: MergingIterator::new(children),
            ctx,
        }
    }

    /// Re-reads every segment and checks it as [`Table::verify`] does, and
    /// that each per-block filter holds the keys of its block. Returns the
    /// number of entries.
    pub fn verify(&self) -> Result<u64> {
        let mut n = 0;
        for s in &self.segments {
            let got = s.table.verify()?;
            let want = self
                .directory
                .segments
                .iter()
                .find(|e| e.seq == s.seq)
                .map_or(got, |e| e.entries);
            if got != want {
                return Err(Error::corruption(
                    &self.path,
                    s.table.footer_offset(),
                    format!(
                        "segment {} holds {got} entries, its directory says {want}",
                        s.seq
                    ),
                ));
            }
            n += got;
        }
        Ok(n)
    }
}

/// A merged cursor over the segments of one DTable.
///
/// A seek positions a cursor in every segment, and each loads one data
/// block. While the blocks of mapped tables are read from the device (the
/// map gauge), a seek first asks the kernel (`POSIX_FADV_WILLNEED`) for
/// the block each segment's cursor will load and the one after it, then
/// positions the cursors: the segments' reads run together, so a seek
/// waits about one device read instead of one per segment. Each segment's
/// cursor reads ahead, once it walks on in file order, its share (by
/// entries) of one SSTable's first window, at least
/// 16 KiB.
pub struct DTableIterator {
    /// The segments' cursors, newest first, merged (unboxed: one
    /// allocation for all of them).
    merged: MergingIterator<TableIterator>,
    ctx: ReadCtx,
}

impl DTableIterator {
    /// Hints the block each of the later segments will load for a seek to
    /// `target`; returns how many hints were issued.
    fn hint_seek(&self, target: &[u8]) -> usize {
        self.merged
            .children()
            .iter()
            .filter(|c| c.table().hint_seek(target, true, self.ctx))
            .count()
    }
}

impl InternalIterator for DTableIterator {
    fn valid(&self) -> bool {
        self.merged.valid()
    }
    fn seek_to_first(&mut self) {
        self.merged.seek_to_first()
    }
    fn seek_to_last(&mut self) {
        self.merged.seek_to_last()
    }
    fn seek(&mut self, target: &[u8]) {
        self.hint_seek(target);
        self.merged.seek(target)
    }
    fn next(&mut self) {
        self.merged.next()
    }
    fn prev(&mut self) {
        self.merged.prev()
    }
    fn key(&self) -> &[u8] {
        self.merged.key()
    }
    fn value(&self) -> &[u8] {
        self.merged.value()
    }
    fn status(&self) -> Result<()> {
        self.merged.status()
    }
    fn expect_forward(&mut self, n: usize) {
        self.merged.expect_forward(n)
    }
}
