//! The WiscKey value log (vLog), the `vlog` layout (WiscKey §3).
//!
//! Values at least `value_threshold` bytes long are appended to the vLog as
//! records of the shared value-record codec ([`crate::format::value_record`]:
//! checksum, kind, flags, key size, value size, sequence number, key,
//! value; the last record of each append carries
//! [`FLAG_BATCH_END`]); the index keeps a [`ValuePointer`] `(file, offset, record
//! length)`. The log is split into files `NNNNNN.vlog` of about
//! `vlog_file_size` bytes; it is one append-only sequence from the **tail**
//! (oldest byte still needed) to the **head** (end of the newest file).
//!
//! - **Write buffer** (§3.4.1): the records of one write are gathered in a
//!   user-space buffer and handed to the OS in one `write`; lookups check
//!   the buffer first. The buffer is emptied before `append` returns, because
//!   sepkv promises that an acknowledged write survives a process crash.
//! - **Durability ordering**: the engine appends values, then logs the
//!   pointers in its WAL; with `sync` it syncs the vLog before the WAL.
//!   After a power loss a WAL record whose pointers reach past the surviving
//!   vLog ends the WAL replay ([`ValueStore::contains`]), so recovery keeps a
//!   prefix of history.
//! - **Garbage collection** (§3.3.2, [`gc`]): read a chunk at the tail,
//!   check each record's liveness with an index lookup, re-append live
//!   records at the head, sync, install the new pointers by compare-and-set
//!   (a racing user write wins), persist the new tail in the manifest, and
//!   then free the chunk by punching a hole (a file wholly behind the tail
//!   is deleted). Freeing waits while a snapshot or iterator older than the
//!   relocation exists, since it may still reach the old copies.
//! - **Crash consistency** (§3.3.3): on open the newest file is scanned and
//!   its valid length fixed at the last intact record (a torn tail is left
//!   behind, never read); appends go to a new file. A pointer outside the
//!   valid range reads as lost (absent); a checksum or key mismatch inside it
//!   is `Corruption` with file and offset.
//! - **Older files**: a database of format 1 wrote its value-log files in
//!   the older record codec of [`crate::format::value_record::legacy`].
//!   Files numbered below [`VlogOptions::legacy_below`] are read in it;
//!   appends never go to one (an upgrading open starts a new file), and
//!   GC re-encodes the live records it copies out of them.
//! - **Scans** (§3.3.1): [`ValueStore::read_many`] reads values in
//!   parallel on a small pool ([`crate::vstore::prefetch`]) while value reads reach the
//!   device; while they are served from memory ([`ReadLatency`]) it reads
//!   them in the caller, where the hand-offs would cost more than the reads.
//!
//! Thread-safety: appends (and syncs) are serialised by the lock of the
//! active file, GC steps by a lock of their own; reads take only the state
//! lock, which is never held across a `write`, an `fsync` or a file
//! creation, so a read never waits on a writer's or GC's I/O. A failed
//! write or sync marks the active file failed and refuses every later
//! append and sync: the file's end is then unknown, and retrying an fsync
//! after a failure is unsafe.

pub mod gc;

use super::{
    GcOutcome, IndexReader, IndexRelocator, ReadLatency, SpaceStats, ValuePointer, ValueRecord,
    ValueStore,
};
use crate::error::{Error, IoContext, Result};
use crate::format::value_record::{self as record, Codec, Kind, FLAG_BATCH_END};
use crate::fs::sync_unlocked;
use crate::fs::{
    create_preallocated, Advice, FileSystem, IoCategory, IoStats, RandomAccessFile, WritableFile,
};
use crate::spin::SpinMutex;
use crate::vstore::open_for_reads;
use crate::vstore::prefetch::Prefetcher;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Knobs of the value log (from `Options`).
#[derive(Debug, Clone)]
pub struct VlogOptions {
    /// Values shorter than this stay inline in the index (bytes).
    pub value_threshold: usize,
    /// Size at which a vLog file is closed and the next one started (bytes).
    pub file_size: u64,
    /// Bytes GC reads from the tail per step.
    pub gc_chunk_size: u64,
    /// Threads reading values in parallel for scans (0 = none).
    pub prefetch_threads: usize,
    /// The value log replaces the index's WAL (WiscKey §3.4.2).
    pub log_mode: bool,
    /// Most bytes the log may span from tail to head before a user append
    /// is refused with `ValueStoreFull` (the engine then runs GC and
    /// retries); `None` = unbounded. GC copies are exempt.
    pub capacity: Option<u64>,
    /// Serve value reads from a mapping of each file while reads come from
    /// memory (`Options::mmap_reads`).
    pub mmap_reads: bool,
    /// Files numbered below this hold the format-1 record codec
    /// ([`Codec::VlogV1`]); 0 when there are none (a database created in
    /// format 2). `None` opens the log of a format-1 database: every file
    /// present is in the older codec, and the store starts a new file for
    /// its appends, whose number [`VlogStore::legacy_below`] then reports
    /// (for the caller to record durably before the first append).
    pub legacy_below: Option<u64>,
}

impl VlogOptions {
    /// A log of files of `file_size` bytes, GC reading `gc_chunk_size`
    /// bytes per step, created in the current format: every value
    /// separated, no log mode, no capacity, no prefetch threads, plain
    /// reads.
    pub fn new(file_size: u64, gc_chunk_size: u64) -> VlogOptions {
        VlogOptions {
            value_threshold: 1,
            file_size,
            gc_chunk_size,
            prefetch_threads: 0,
            log_mode: false,
            capacity: None,
            mmap_reads: false,
            legacy_below: Some(0),
        }
    }
}

/// Path of vLog file `id`.
pub fn vlog_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:06}.vlog"))
}

/// The file appends go to. Behind its own lock ([`VlogStore::io`]), so
/// that `write(2)` and `fsync` never hold the state lock readers take.
struct Active {
    id: u64,
    file: Box<dyn WritableFile>,
    /// Bytes handed to the OS.
    flushed: u64,
    /// True when the file holds data not yet synced.
    dirty: bool,
    /// Set by a failed write or sync: the file's end is no longer known, so
    /// every later append or sync is refused (as the engine's poisoning).
    failed: Option<String>,
}

#[derive(Default)]
struct FileInfo {
    /// Bytes of intact records from the start of the file.
    valid_len: u64,
    /// Bytes taken for garbage: per region the larger of the two estimates
    /// below, which may name the same bytes and so are never added.
    garbage: u64,
    /// Garbage the engine reported ([`ValueStore::note_garbage`]: the index
    /// dropped the last pointer to it), by [`GARBAGE_REGION`] of the file,
    /// so that GC, which collects the file a chunk at a time from its
    /// start, knows how much of the reported garbage its chunk held.
    noted: RegionCounts,
    /// Garbage a layout inferred without the index
    /// ([`VlogStore::hint_garbage`]: HashKV's GC sees a cold value's tag
    /// followed by a newer version of its key), by region. Compaction
    /// reports the same bytes later, so a region counts the larger of the
    /// two, not their sum.
    hinted: RegionCounts,
}

/// Bytes by [`GARBAGE_REGION`] (region index → bytes) and their total.
#[derive(Default)]
struct RegionCounts {
    total: u64,
    regions: BTreeMap<u64, u64>,
}

impl RegionCounts {
    fn get(&self, region: u64) -> u64 {
        self.regions.get(&region).copied().unwrap_or(0)
    }

    /// Adds `len` bytes at `offset`, the total capped at `cap`; returns the
    /// bytes added.
    fn add(&mut self, offset: u64, len: u64, cap: u64) -> u64 {
        let add = len.min(cap.saturating_sub(self.total));
        if add > 0 {
            *self.regions.entry(offset / GARBAGE_REGION).or_default() += add;
            self.total += add;
        }
        add
    }

    /// Removes what lies in `[start, end)`: all of each region inside, and
    /// of a region cut by the range its share ([`region_cut`]). Returns the
    /// bytes removed.
    fn take(&mut self, start: u64, end: u64, valid_len: u64) -> u64 {
        let mut taken = 0;
        let first = start / GARBAGE_REGION;
        let last = end.div_ceil(GARBAGE_REGION);
        let keys: Vec<u64> = self.regions.range(first..last).map(|(&r, _)| r).collect();
        for r in keys {
            let (overlap, rest) = region_cut(r, start, end, valid_len);
            let g = self.regions[&r];
            let t = if overlap >= rest {
                g
            } else {
                (g as u128 * overlap as u128 / rest as u128) as u64
            };
            if t >= g {
                self.regions.remove(&r);
            } else {
                self.regions.insert(r, g - t);
            }
            taken += t.min(g);
        }
        self.total = self.total.saturating_sub(taken);
        taken
    }
}

/// How much of region `r` a range `[start, end)` of its file covers, when
/// the file is collected front to back (nothing before `start` is left)
/// and nothing past `valid_len` can be garbage: `(covered, rest)` bytes,
/// `rest` being the region's part from `start` on. The region's garbage is
/// taken to lie evenly over `rest`, so `covered / rest` of it is in the
/// range.
fn region_cut(r: u64, start: u64, end: u64, valid_len: u64) -> (u64, u64) {
    let lo = r * GARBAGE_REGION;
    let hi = ((r + 1) * GARBAGE_REGION)
        .min(valid_len.max(end))
        .max(lo + 1);
    let from = lo.max(start);
    (hi.min(end).saturating_sub(from), hi - from.min(hi))
}

/// Granularity of the garbage the value log tracks within a file (bytes).
pub const GARBAGE_REGION: u64 = 1 << 20;

/// Bits of a garbage-table id that hold the region (the file number is
/// above them).
const REGION_BITS: u32 = 26;

impl FileInfo {
    fn new(valid_len: u64) -> Self {
        FileInfo {
            valid_len,
            ..Default::default()
        }
    }

    fn region_garbage(&self, region: u64) -> u64 {
        self.noted.get(region).max(self.hinted.get(region))
    }

    /// Adds `len` bytes of reported garbage at `offset` (capped at the
    /// valid length); returns the bytes added.
    fn add_garbage(&mut self, offset: u64, len: u64) -> u64 {
        self.add(offset, len, false)
    }

    /// Adds `len` bytes of inferred garbage at `offset` (capped at the
    /// valid length); returns the bytes added.
    fn add_hint(&mut self, offset: u64, len: u64) -> u64 {
        self.add(offset, len, true)
    }

    fn add(&mut self, offset: u64, len: u64, hint: bool) -> u64 {
        let r = offset / GARBAGE_REGION;
        let before = self.region_garbage(r);
        let counts = if hint {
            &mut self.hinted
        } else {
            &mut self.noted
        };
        let added = counts.add(offset, len, self.valid_len);
        self.garbage += self.region_garbage(r) - before;
        added
    }

    /// Removes the garbage taken for `[start, end)`, which GC collected
    /// (see [`RegionCounts::take`]), from both estimates. Returns the bytes
    /// of [`FileInfo::garbage`] removed.
    fn take_garbage(&mut self, start: u64, end: u64) -> u64 {
        let before = self.garbage;
        self.noted.take(start, end, self.valid_len);
        self.hinted.take(start, end, self.valid_len);
        let regions: std::collections::BTreeSet<u64> = self
            .noted
            .regions
            .keys()
            .chain(self.hinted.regions.keys())
            .copied()
            .collect();
        self.garbage = regions.into_iter().map(|r| self.region_garbage(r)).sum();
        before.saturating_sub(self.garbage)
    }
}

struct PendingFree {
    /// Relocations are visible from this sequence number.
    seq: u64,
    file: u64,
    start: u64,
    end: u64,
    whole_file: bool,
}

struct State {
    /// The file appends go to (`Active::id`).
    head_file: u64,
    files: BTreeMap<u64, FileInfo>,
    /// `(file, offset)`: everything before is no longer needed.
    tail: (u64, u64),
    /// `(file, offset)`: everything before may already be freed.
    freed: (u64, u64),
    /// Log mode: recovery replays from here; GC never passes it.
    ckpt: Option<(u64, u64)>,
    pending: Vec<PendingFree>,
}

#[derive(Default)]
struct Counters {
    gc_runs: AtomicU64,
    gc_bytes_read: AtomicU64,
    /// Index lookups GC made to judge records (one per record that holds
    /// a value); each reads what a point read of the index reads.
    gc_lookups: AtomicU64,
    gc_bytes_rewritten: AtomicU64,
    gc_bytes_freed: AtomicU64,
    /// See [`ValueStore::garbage_found`].
    garbage_found: AtomicU64,
    /// Chunks GC read (a step reads one or more).
    gc_chunks: AtomicU64,
    /// Sync rounds of GC steps: one index durability point and one tail
    /// persisted in the manifest each (one per step).
    gc_sync_rounds: AtomicU64,
    /// Wall time of GC steps by part (µs): reading and judging chunks,
    /// copying and installing their live records, the sync round, and
    /// freeing what the tail left.
    gc_judge_micros: AtomicU64,
    gc_relocate_micros: AtomicU64,
    gc_sync_micros: AtomicU64,
    gc_free_micros: AtomicU64,
    /// CPU time of the thread running GC steps, all parts together (µs;
    /// the wall times above also count waits for a core and for locks).
    gc_cpu_micros: AtomicU64,
}

/// Buffers a GC step reuses from chunk to chunk, held under the value
/// log's GC lock: the chunk read from the tail, and the live records
/// encoded as copies for the head. Reused so that a step neither zeroes
/// nor allocates a chunk's worth of memory per chunk.
#[derive(Default)]
pub(super) struct GcScratch {
    pub(super) read: Vec<u8>,
    pub(super) copies: Vec<u8>,
}

/// Shared read side (used by prefetch workers).
struct Reader {
    dir: PathBuf,
    fs: Arc<dyn FileSystem>,
    stats: Arc<IoStats>,
    /// Open read handles by file, at most [`MAX_OPEN_VLOG_FILES`]; past
    /// it, `quick_cache` closes the ones it judges coldest, as the bands'
    /// and TrieTables' handle caches do.
    handles: quick_cache::sync::Cache<u64, Arc<dyn RandomAccessFile>>,
    /// How long value reads take (steers scans' parallel reads, and reads
    /// through a mapping).
    latency: ReadLatency,
    /// Map the files ([`VlogOptions::mmap_reads`]).
    mmap: bool,
    /// Files below this number are in the format-1 codec.
    legacy_below: u64,
}

/// Most value-log files the reader keeps open (one descriptor each, beside
/// the index's `max_open_files` tables): 24 GiB of log at the default
/// `vlog_file_size` of 64 MiB. Past it, the handles of the files read least
/// are closed (a read holding one keeps it until done).
const MAX_OPEN_VLOG_FILES: usize = 384;

impl Reader {
    /// The record codec of file `id`.
    fn codec(&self, id: u64) -> Codec {
        codec_of(id, self.legacy_below)
    }

    fn handle(&self, id: u64) -> Result<Arc<dyn RandomAccessFile>> {
        if let Some(h) = self.handles.get(&id) {
            return Ok(h);
        }
        let h = open_for_reads(&*self.fs, &vlog_path(&self.dir, id), self.mmap)?;
        self.handles.insert(id, h.clone());
        Ok(h)
    }

    fn read_record(&self, key: &[u8], ptr: &ValuePointer, cat: IoCategory) -> Result<Vec<u8>> {
        let h = self.handle(ptr.file_id)?;
        let path = || vlog_path(&self.dir, ptr.file_id);
        let buf = self
            .latency
            .read(&*h, ptr.offset, ptr.length as usize)
            .map_err(|e| Error::io(path(), e))?;
        self.stats.add_read(cat, buf.len() as u64);
        let range = check_record(self.codec(ptr.file_id), path, ptr, key, &buf)?;
        Ok(into_value(buf, range))
    }
}

/// Checks a record read for `key` at `ptr`; returns where its value lies
/// in `buf`. `path` names the file, built only for an error.
fn check_record(
    codec: Codec,
    path: impl FnOnce() -> PathBuf,
    ptr: &ValuePointer,
    key: &[u8],
    buf: &[u8],
) -> Result<std::ops::Range<usize>> {
    let why = match codec.decode(buf) {
        Ok(r) if r.len == buf.len() && r.key == key && r.kind.holds_value() => {
            let start = r.value.as_ptr() as usize - buf.as_ptr() as usize;
            return Ok(start..start + r.value.len());
        }
        Ok(r) if !r.kind.holds_value() => "value pointer addresses a log-only record".to_string(),
        Ok(r) if r.key != key => "value-log record belongs to another key".to_string(),
        Ok(_) => "value-log record length differs from the pointer".to_string(),
        Err(e) => format!("value-log record damaged ({e:?})"),
    };
    Err(Error::corruption(path(), ptr.offset, why))
}

/// The value of a checked record, reusing the read buffer.
fn into_value(mut buf: Vec<u8>, range: std::ops::Range<usize>) -> Vec<u8> {
    buf.truncate(range.end);
    buf.drain(..range.start);
    buf
}

/// The value log. See the module docs.
///
/// Lock order: `gc_lock`, then `io`, then `state`. `state` is only ever
/// held for in-memory work.
pub struct VlogStore {
    opts: VlogOptions,
    reader: Arc<Reader>,
    io: SpinMutex<Active>,
    state: Mutex<State>,
    gc_lock: Mutex<GcScratch>,
    counters: Counters,
    prefetch: Prefetcher,
}

/// The record codec of file `id` when files below `legacy_below` are in
/// the format-1 codec.
fn codec_of(id: u64, legacy_below: u64) -> Codec {
    if id < legacy_below {
        Codec::VlogV1
    } else {
        Codec::Shared
    }
}

/// Encodes the state persisted in the manifest: the tail and, in log mode,
/// the replay checkpoint.
///
/// ```text
/// state := 1 tail_file:u64le tail_off:u64le
///        | 2 tail_file:u64le tail_off:u64le ckpt_file:u64le ckpt_off:u64le
/// ```
/// File numbers and offsets above [`MAX_POS`] are damage: decoding refuses
/// them (the file after one would overflow).
fn encode_state(tail: (u64, u64), ckpt: Option<(u64, u64)>) -> Vec<u8> {
    let mut v = vec![if ckpt.is_some() { 2u8 } else { 1 }];
    v.extend_from_slice(&tail.0.to_le_bytes());
    v.extend_from_slice(&tail.1.to_le_bytes());
    if let Some(c) = ckpt {
        v.extend_from_slice(&c.0.to_le_bytes());
        v.extend_from_slice(&c.1.to_le_bytes());
    }
    v
}

type Pos = (u64, u64);

/// The persisted state of a value log whose tail is `tail` (file id,
/// offset), outside log mode: what a repair that lost the manifest writes
/// ([`crate::Db::repair`]), with the oldest record a live pointer names as
/// the tail, so that nothing before it is scanned at open.
pub(crate) fn state_for_tail(tail: Pos) -> Vec<u8> {
    encode_state(tail, None)
}

/// Largest file number or offset a persisted state may hold (2^48: far
/// beyond any real log, far from overflow).
const MAX_POS: u64 = 1 << 48;

pub(crate) fn decode_state(b: &[u8]) -> Option<(Pos, Option<Pos>)> {
    let word = |i: usize| -> Option<u64> {
        let w = u64::from_le_bytes(b.get(i..i + 8)?.try_into().ok()?);
        (w <= MAX_POS).then_some(w)
    };
    match (b.first(), b.len()) {
        (Some(1), 17) => Some(((word(1)?, word(9)?), None)),
        (Some(2), 33) => Some(((word(1)?, word(9)?), Some((word(17)?, word(25)?)))),
        _ => None,
    }
}

impl VlogStore {
    /// Opens the value log in `dir`, given the state last persisted with
    /// [`IndexRelocator::persist_state`] (`None` for a new database).
    ///
    /// # Errors
    /// `Corruption` for an unreadable persisted state; `Io`.
    pub fn open(
        dir: &Path,
        fs: Arc<dyn FileSystem>,
        stats: Arc<IoStats>,
        opts: VlogOptions,
        state: Option<&[u8]>,
    ) -> Result<VlogStore> {
        let mut ids: Vec<u64> = fs
            .list(dir)
            .ctx(dir)?
            .iter()
            .filter_map(|n| n.strip_suffix(".vlog")?.parse().ok())
            .collect();
        ids.sort_unstable();
        let (tail, ckpt) = match state {
            Some(s) => decode_state(s)
                .ok_or_else(|| Error::corruption(dir.join("MANIFEST"), 0, "bad value-log state"))?,
            None => ((ids.first().copied().unwrap_or(1), 0), None),
        };
        let ckpt = opts.log_mode.then(|| ckpt.unwrap_or(tail));
        let mut files = BTreeMap::new();
        for &id in &ids {
            let path = vlog_path(dir, id);
            if id < tail.0 {
                fs.remove(&path).ctx(&path)?;
                continue;
            }
            let len = fs.file_size(&path).ctx(&path)?;
            files.insert(id, FileInfo::new(len));
        }
        // The newest file may end in a torn append, or in the zeros of its
        // preallocation: fix its valid length at the last intact record. If
        // that is its end, appends continue in it. Otherwise the file is cut
        // there (durably, so that its size is its valid length at every
        // later open, when it is no longer scanned) and appends go to a new
        // file: the torn bytes are never read.
        // A format-1 log: every file present is in the older codec, and
        // appends go to a new file, the first in the shared codec.
        let upgrading = opts.legacy_below.is_none();
        let mut legacy_below = opts.legacy_below.unwrap_or(u64::MAX);
        let mut reuse = None;
        if let Some((&last, info)) = files.iter_mut().next_back() {
            let start = if last == tail.0 { tail.1 } else { 0 };
            let len = info.valid_len;
            let path = vlog_path(dir, last);
            let codec = codec_of(last, legacy_below);
            info.valid_len = scan_valid_len(fs.as_ref(), &path, codec, start, len, &stats)?;
            if info.valid_len == len && len < opts.file_size && !upgrading {
                reuse = Some((last, len));
            } else if info.valid_len < len {
                fs.truncate_synced(&path, info.valid_len).ctx(&path)?;
            }
        }
        let (next_id, file, flushed) = match reuse {
            Some((id, len)) => {
                let path = vlog_path(dir, id);
                (id, fs.open_append(&path).ctx(&path)?, len)
            }
            None => {
                let id = files.keys().next_back().map_or(tail.0.max(1), |l| l + 1);
                if upgrading {
                    legacy_below = id;
                }
                let path = vlog_path(dir, id);
                // Preallocated to its roll size.
                let file = create_preallocated(fs.as_ref(), &path, opts.file_size).ctx(&path)?;
                fs.sync_dir(dir).ctx(dir)?;
                files.insert(id, FileInfo::new(0));
                (id, file, 0)
            }
        };
        // Free what an earlier GC left behind (idempotent).
        if tail.1 > 0 && files.contains_key(&tail.0) {
            let _ = fs.punch_hole(&vlog_path(dir, tail.0), 0, tail.1);
        }
        let reader = Arc::new(Reader {
            dir: dir.to_path_buf(),
            fs,
            stats,
            handles: quick_cache::sync::Cache::new(MAX_OPEN_VLOG_FILES),
            latency: ReadLatency::default(),
            mmap: opts.mmap_reads,
            legacy_below,
        });
        Ok(VlogStore {
            prefetch: Prefetcher::new(opts.prefetch_threads),
            opts,
            reader,
            io: SpinMutex::new(Active {
                id: next_id,
                file,
                flushed,
                dirty: false,
                failed: None,
            }),
            state: Mutex::new(State {
                head_file: next_id,
                files,
                tail,
                freed: tail,
                ckpt,
                pending: Vec::new(),
            }),
            gc_lock: Mutex::new(GcScratch::default()),
            counters: Counters::default(),
        })
    }

    fn path(&self, id: u64) -> PathBuf {
        vlog_path(&self.reader.dir, id)
    }

    /// Files numbered below this hold the format-1 record codec (0: none).
    /// After an open with [`VlogOptions::legacy_below`] `None`, the number
    /// of the file the store started for its appends.
    pub fn legacy_below(&self) -> u64 {
        self.reader.legacy_below
    }

    /// Refuses to touch a file whose earlier write or sync failed.
    fn check_failed(&self, a: &Active) -> Result<()> {
        match &a.failed {
            Some(why) => Err(Error::Poisoned(format!(
                "value log {}: {why}",
                self.path(a.id).display()
            ))),
            None => Ok(()),
        }
    }

    /// Closes the active file when full and starts the next one. Called with
    /// `io` locked.
    fn maybe_roll(&self, a: &mut Active) -> Result<()> {
        if a.flushed < self.opts.file_size {
            return Ok(());
        }
        let old = self.path(a.id);
        a.file.sync().ctx(&old)?;
        a.dirty = false;
        let id = a.id + 1;
        let path = self.path(id);
        let file =
            create_preallocated(self.reader.fs.as_ref(), &path, self.opts.file_size).ctx(&path)?;
        self.reader
            .fs
            .sync_dir(&self.reader.dir)
            .ctx(&self.reader.dir)?;
        {
            let mut st = self.state.lock();
            st.files.insert(id, FileInfo::new(0));
            st.head_file = id;
        }
        *a = Active {
            id,
            file,
            flushed: 0,
            dirty: false,
            failed: None,
        };
        Ok(())
    }

    /// Appends records of one batch under `cat`; the last carries the
    /// end-of-batch bit. The records are encoded into one buffer and handed
    /// to the OS in one `write` (the §3.4.1 write buffer, emptied before
    /// returning since sepkv promises that an acknowledged write survives a
    /// process crash); only then is the file's valid length published, so
    /// no reader or GC sees a record before it is in the file.
    fn append_records(
        &self,
        records: &[(Kind, &[u8], u64, &[u8])],
        cat: IoCategory,
    ) -> Result<Vec<ValuePointer>> {
        let mut a = self.io.lock();
        self.check_failed(&a)?;
        // Bytes the batch's records take: checked against the capacity and
        // reserved for the buffer they are encoded into.
        let len: usize = records.iter().map(|r| record::record_len(r.1, r.3)).sum();
        if let Some(cap) = self.opts.capacity {
            // Only new user values are refused: GC copies must go through to
            // free space, and tombstones, inline values and relocations of
            // log mode are small and what lets space be freed at all.
            if records.iter().any(|r| r.0 == Kind::Value) {
                let need = len as u64;
                let span = Self::span_locked(&self.state.lock());
                if span + need > cap {
                    return Err(Error::ValueStoreFull(format!(
                        "the value log spans {span} bytes from tail to head and {need} more would pass value_capacity {cap}; \
                         GC could not free enough (delete data or reopen with a larger value_capacity)"
                    )));
                }
            }
        }
        let mut buf = Vec::with_capacity(len);
        let mut ptrs = Vec::with_capacity(records.len());
        for (i, &(kind, key, seq, value)) in records.iter().enumerate() {
            let before = buf.len();
            let flags = if i + 1 == records.len() {
                FLAG_BATCH_END
            } else {
                0
            };
            record::encode(&mut buf, kind, flags, key, seq, value);
            ptrs.push(ValuePointer {
                file_id: a.id,
                offset: a.flushed + before as u64,
                length: (buf.len() - before) as u32,
                aux: 0,
            });
        }
        self.write_batch(&mut a, &buf, cat)?;
        Ok(ptrs)
    }

    /// Writes one encoded batch at the head of the open file `a`, publishes
    /// its valid length and rolls to the next file when this one is full
    /// (files roll between batches only, so a batch never spans files). A
    /// failure marks the log failed.
    fn write_batch(&self, a: &mut Active, bytes: &[u8], cat: IoCategory) -> Result<()> {
        if let Err(e) = a.file.append(bytes).and_then(|_| a.file.flush()) {
            a.failed = Some(format!("a write failed: {e}"));
            return Err(Error::io(self.path(a.id), e));
        }
        self.reader.stats.add_written(cat, bytes.len() as u64);
        a.flushed += bytes.len() as u64;
        a.dirty = true;
        if let Some(f) = self.state.lock().files.get_mut(&a.id) {
            f.valid_len = a.flushed;
        }
        if let Err(e) = self.maybe_roll(a) {
            a.failed = Some(format!("starting the next file failed: {e}"));
            return Err(e);
        }
        Ok(())
    }

    /// The share of the next GC chunk (`gc_chunk_size` bytes from the
    /// tail) known to be garbage, by the regions it covers (a region cut
    /// by the chunk's end counts in proportion); 0 when the tail file is
    /// empty. What a GC step there would free per byte it reads.
    pub fn tail_chunk_garbage_ratio(&self) -> f64 {
        let st = self.state.lock();
        let (id, start) = st.tail;
        let Some(f) = st.files.get(&id) else {
            return 0.0;
        };
        let end = f
            .valid_len
            .min(start.saturating_add(self.opts.gc_chunk_size));
        if end <= start {
            return 0.0;
        }
        let mut garbage = 0.0;
        for r in start / GARBAGE_REGION..end.div_ceil(GARBAGE_REGION) {
            let (covered, rest) = region_cut(r, start, end, f.valid_len);
            let share = (covered as f64 / rest.max(1) as f64).min(1.0);
            garbage += f.region_garbage(r) as f64 * share;
        }
        (garbage / (end - start) as f64).min(1.0)
    }

    /// Bytes from the tail to the head.
    fn span_locked(st: &State) -> u64 {
        st.files
            .range(st.tail.0..)
            .map(|(&id, f)| {
                let from = if id == st.tail.0 { st.tail.1 } else { 0 };
                f.valid_len.saturating_sub(from)
            })
            .sum()
    }

    /// Appends values (user writes or GC copies) as one batch.
    fn append_as(&self, records: &[ValueRecord<'_>], cat: IoCategory) -> Result<Vec<ValuePointer>> {
        let kind = if cat == IoCategory::Gc {
            Kind::GcCopy
        } else {
            Kind::Value
        };
        let recs: Vec<(Kind, &[u8], u64, &[u8])> = records
            .iter()
            .map(|r| (kind, r.key, r.seq, r.value))
            .collect();
        self.append_records(&recs, cat)
    }

    /// Appends records GC encoded beforehand, outside the append lock:
    /// `bytes` holds whole records in the shared codec, one batch (the
    /// last record carries [`FLAG_BATCH_END`]), `lens` their lengths in
    /// order. Under the lock only the bytes are handed to the file, so a
    /// user append waits for a copy and a `write(2)`, not for the
    /// encoding and checksums of the piece. Exempt from the capacity, as
    /// GC copies are.
    pub(super) fn append_encoded(
        &self,
        bytes: &[u8],
        lens: &[u32],
        cat: IoCategory,
    ) -> Result<Vec<ValuePointer>> {
        debug_assert_eq!(lens.iter().map(|&l| l as usize).sum::<usize>(), bytes.len());
        let mut a = self.io.lock();
        self.check_failed(&a)?;
        let mut ptrs = Vec::with_capacity(lens.len());
        let mut at = a.flushed;
        for &length in lens {
            ptrs.push(ValuePointer {
                file_id: a.id,
                offset: at,
                length,
                aux: 0,
            });
            at += u64::from(length);
        }
        self.write_batch(&mut a, bytes, cat)?;
        Ok(ptrs)
    }

    /// `(head file, head offset)`: the end of the last published append.
    pub fn head(&self) -> (u64, u64) {
        let st = self.state.lock();
        let len = st.files.get(&st.head_file).map_or(0, |f| f.valid_len);
        (st.head_file, len)
    }

    /// `(tail file, tail offset)`.
    pub fn tail(&self) -> (u64, u64) {
        self.state.lock().tail
    }

    /// `(file << 26 | region, garbage bytes)` of every region of every
    /// file at or after the tail ([`GARBAGE_REGION`]): the reported
    /// garbage ([`ValueStore::note_garbage`]).
    pub fn garbage_entries(&self) -> Vec<(u64, u64)> {
        self.region_entries(false)
    }

    /// The same for the inferred garbage ([`VlogStore::hint_garbage`]).
    pub fn hint_entries(&self) -> Vec<(u64, u64)> {
        self.region_entries(true)
    }

    fn region_entries(&self, hints: bool) -> Vec<(u64, u64)> {
        let st = self.state.lock();
        // Files numbered 2^22 and beyond (ids past 2^48) keep their
        // estimate in memory only.
        st.files
            .range(st.tail.0..(1 << (48 - REGION_BITS)))
            .flat_map(|(&id, f)| {
                let counts = if hints { &f.hinted } else { &f.noted };
                counts
                    .regions
                    .iter()
                    .map(move |(&r, &g)| ((id << REGION_BITS) | r, g))
            })
            .collect()
    }

    /// Restores what [`VlogStore::garbage_entries`] returned: regions of
    /// files at or after the tail (capped at each file's valid length);
    /// other entries are ignored.
    pub fn restore_garbage_entries(&self, entries: &[(u64, u64)]) {
        self.restore_entries(entries, false)
    }

    /// Restores what [`VlogStore::hint_entries`] returned, as
    /// [`VlogStore::restore_garbage_entries`] does.
    pub fn restore_hint_entries(&self, entries: &[(u64, u64)]) {
        self.restore_entries(entries, true)
    }

    fn restore_entries(&self, entries: &[(u64, u64)], hints: bool) {
        let mut st = self.state.lock();
        let tail = st.tail.0;
        let mask = (1u64 << REGION_BITS) - 1;
        for &(key, g) in entries {
            let (id, r) = (key >> REGION_BITS, key & mask);
            if id < tail {
                continue;
            }
            if let Some(f) = st.files.get_mut(&id) {
                f.add(r * GARBAGE_REGION, g, hints);
            }
        }
    }

    /// Notes `ptr`'s record as garbage that a layout inferred without the
    /// index (HashKV's GC: a cold value's tag followed by a newer version
    /// of the key). The index reports the same bytes when compaction drops
    /// the pointer, so a region counts the larger of the reported and the
    /// inferred bytes (`FileInfo::garbage`), never their sum. Only the
    /// estimate changes: GC still asks the index before it drops a record.
    pub fn hint_garbage(&self, ptr: &ValuePointer) {
        let mut st = self.state.lock();
        if (ptr.file_id, ptr.offset) < st.tail {
            return;
        }
        if let Some(f) = st.files.get_mut(&ptr.file_id) {
            f.add_hint(ptr.offset, ptr.length as u64);
        }
    }
}

/// Scans the records of `path` from `start`; returns the end of the last
/// intact record.
fn scan_valid_len(
    fs: &dyn FileSystem,
    path: &Path,
    codec: Codec,
    start: u64,
    len: u64,
    stats: &IoStats,
) -> Result<u64> {
    const CHUNK: u64 = 4 << 20;
    let f = fs.open_read(path).ctx(path)?;
    f.advise(start, 0, Advice::Sequential);
    let mut pos = start;
    let mut batch_end = start;
    let mut buf: Vec<u8> = Vec::new();
    let mut buf_start = start;
    loop {
        let rel = (pos - buf_start) as usize;
        match codec.decode(&buf[rel..]) {
            Ok(r) => {
                pos += r.len as u64;
                if r.flags & FLAG_BATCH_END != 0 {
                    batch_end = pos;
                }
            }
            Err(record::DecodeError::Truncated) => {
                let file_left = len.saturating_sub(buf_start + buf.len() as u64);
                if file_left == 0 {
                    return Ok(batch_end);
                }
                // Keep the partial record and read more.
                buf.drain(..rel);
                buf_start = pos;
                let n = file_left.min(CHUNK.max(buf.len() as u64)) as usize;
                let old = buf.len();
                buf.resize(old + n, 0);
                f.read_exact_at(buf_start + old as u64, &mut buf[old..])
                    .ctx(path)?;
                stats.add_read(IoCategory::ValueStore, n as u64);
            }
            Err(_) => return Ok(batch_end),
        }
    }
}

impl ValueStore for VlogStore {
    fn name(&self) -> &'static str {
        "vlog"
    }

    fn separates(&self, len: usize) -> bool {
        len >= self.opts.value_threshold
    }

    fn append(&self, records: &[ValueRecord<'_>]) -> Result<Vec<ValuePointer>> {
        self.append_as(records, IoCategory::ValueStore)
    }

    fn needs_sync(&self) -> bool {
        let a = self.io.lock();
        a.dirty || a.failed.is_some()
    }

    /// The fsync runs outside the `io` lock, through the file's
    /// [`crate::fs::SyncHandle`]: every record acknowledged so far was
    /// handed to the OS under that lock, so the sync covers it, and
    /// appends (a user's, GC's copies) go on meanwhile. A file rolled in
    /// between was synced when it was closed.
    fn sync(&self) -> Result<()> {
        let mut a = self.io.lock();
        self.check_failed(&a)?;
        if !a.dirty {
            return Ok(());
        }
        let id = a.id;
        let upto = a.flushed;
        let path = self.path(id);
        sync_unlocked(&mut a, |a| (&mut a.file, &mut a.failed)).ctx(&path)?;
        if a.id == id && a.flushed == upto {
            a.dirty = false;
        }
        Ok(())
    }

    fn read(&self, key: &[u8], ptr: &ValuePointer) -> Result<Option<Vec<u8>>> {
        {
            let st = self.state.lock();
            if (ptr.file_id, ptr.offset) < st.freed {
                return Ok(None);
            }
            match st.files.get(&ptr.file_id) {
                Some(f) if ptr.end() <= f.valid_len => {}
                _ => return Ok(None),
            }
        }
        self.reader
            .read_record(key, ptr, IoCategory::ValueStore)
            .map(Some)
    }

    /// Parallel reads pay off only when reads reach the device.
    fn batch_reads_pay(&self) -> bool {
        self.prefetch.threads() > 0 && !self.reader.latency.from_memory()
    }

    fn read_many(&self, reqs: &[(Vec<u8>, ValuePointer)]) -> Result<Vec<Option<Vec<u8>>>> {
        if reqs.len() < 2 || !self.batch_reads_pay() {
            return reqs.iter().map(|(k, p)| self.read(k, p)).collect();
        }
        // Validity is decided here, under the lock; the reads run on the pool.
        let mut valid = Vec::with_capacity(reqs.len());
        {
            let st = self.state.lock();
            for (_, p) in reqs {
                let ok = (p.file_id, p.offset) >= st.freed
                    && st
                        .files
                        .get(&p.file_id)
                        .is_some_and(|f| p.end() <= f.valid_len);
                valid.push(ok);
            }
        }
        let jobs: Arc<Vec<(Vec<u8>, ValuePointer, bool)>> = Arc::new(
            reqs.iter()
                .zip(valid)
                .map(|((k, p), ok)| (k.clone(), *p, ok))
                .collect(),
        );
        let reader = self.reader.clone();
        let n = jobs.len();
        let results = self.prefetch.map(n, move |i| {
            let (k, p, ok) = &jobs[i];
            if !ok {
                return Ok(None);
            }
            reader.read_record(k, p, IoCategory::ValueStore).map(Some)
        });
        results.into_iter().collect()
    }

    fn contains(&self, ptr: &ValuePointer) -> bool {
        let st = self.state.lock();
        if (ptr.file_id, ptr.offset) < st.tail {
            // Collected by GC: a later, durable relocation supersedes it.
            return true;
        }
        st.files
            .get(&ptr.file_id)
            .is_some_and(|f| ptr.end() <= f.valid_len)
    }

    fn note_garbage(&self, ptr: &ValuePointer) {
        let mut st = self.state.lock();
        if (ptr.file_id, ptr.offset) < st.tail {
            return;
        }
        if let Some(f) = st.files.get_mut(&ptr.file_id) {
            let added = f.add_garbage(ptr.offset, ptr.length as u64);
            self.counters
                .garbage_found
                .fetch_add(added, Ordering::Relaxed);
        }
    }

    fn garbage_found(&self) -> u64 {
        self.counters.garbage_found.load(Ordering::Relaxed)
    }

    fn garbage_table(&self) -> Option<Vec<u8>> {
        Some(super::garbage::encode(&[self.garbage_entries()]))
    }

    fn restore_garbage_table(&self, table: &[u8]) -> Result<()> {
        let t = super::garbage::decode(table)
            .ok_or_else(|| super::garbage::corrupt(&self.reader.dir))?;
        if let Some(s) = t.first() {
            self.restore_garbage_entries(s);
        }
        Ok(())
    }

    fn capacity_use(&self) -> Option<super::CapacityUse> {
        let cap = self.opts.capacity?;
        let st = self.state.lock();
        let used = Self::span_locked(&st);
        let garbage: u64 = st.files.range(st.tail.0..).map(|(_, f)| f.garbage).sum();
        // A GC step appends its copies before it moves the tail: the
        // user's limit is the capacity less one chunk of copies.
        Some(super::CapacityUse {
            used,
            limit: cap.saturating_sub(self.opts.gc_chunk_size),
            floor: used - garbage.min(used),
            width: None,
        })
    }

    fn space(&self) -> SpaceStats {
        let st = self.state.lock();
        let total = Self::span_locked(&st);
        let garbage: u64 = st.files.range(st.tail.0..).map(|(_, f)| f.garbage).sum();
        let ids: Vec<u64> = st.files.keys().copied().collect();
        drop(st);
        let file_bytes = ids
            .iter()
            .filter_map(|&id| self.reader.fs.allocated_size(&self.path(id)).ok())
            .sum();
        let garbage = garbage.min(total);
        SpaceStats {
            live_bytes: total - garbage,
            garbage_bytes: garbage,
            file_bytes,
        }
    }

    fn gc_step(
        &self,
        index: &dyn IndexReader,
        relocator: &dyn IndexRelocator,
    ) -> Result<GcOutcome> {
        gc::step(self, index, relocator)
    }

    fn gc_step_chunks(
        &self,
        index: &dyn IndexReader,
        relocator: &dyn IndexRelocator,
        chunks: usize,
    ) -> Result<GcOutcome> {
        gc::step_chunks(self, index, relocator, chunks)
    }

    fn verify(&self) -> (u64, Vec<Error>) {
        // No GC step may punch the range while it is being read.
        let _no_gc = self.gc_lock.lock();
        let ranges: Vec<(u64, u64, u64)> = {
            let st = self.state.lock();
            st.files
                .iter()
                .filter(|(&id, _)| id >= st.tail.0)
                .map(|(&id, f)| (id, if id == st.tail.0 { st.tail.1 } else { 0 }, f.valid_len))
                .collect()
        };
        let mut records = 0;
        let mut faults = Vec::new();
        for (id, start, end) in ranges {
            let path = self.path(id);
            let h = match self.reader.handle(id) {
                Ok(h) => h,
                Err(e) => {
                    faults.push(e);
                    continue;
                }
            };
            let mut pos = start;
            let mut want = 4u64 << 20;
            'file: while pos < end {
                let n = want.min(end - pos);
                let mut buf = vec![0u8; n as usize];
                if let Err(e) = h.read_exact_at(pos, &mut buf).ctx(&path) {
                    faults.push(e);
                    break;
                }
                self.reader.stats.add_read(IoCategory::ValueStore, n);
                let mut rel = 0usize;
                let codec = self.reader.codec(id);
                loop {
                    match codec.decode(&buf[rel..]) {
                        Ok(r) => {
                            rel += r.len;
                            records += 1;
                        }
                        Err(record::DecodeError::Truncated) if rel < buf.len() || rel == 0 => {
                            if rel == 0 {
                                if n == end - pos {
                                    faults.push(Error::corruption(
                                        &path,
                                        pos,
                                        "value-log record runs past the valid end",
                                    ));
                                    break 'file;
                                }
                                // One record larger than the read: read it whole.
                                want = want.saturating_mul(2);
                            }
                            break;
                        }
                        Err(record::DecodeError::Truncated) => break,
                        Err(e) => {
                            faults.push(Error::corruption(
                                &path,
                                pos + rel as u64,
                                format!("value-log record damaged ({e:?})"),
                            ));
                            break 'file;
                        }
                    }
                }
                pos += rel as u64;
            }
        }
        (records, faults)
    }

    fn log_batch(&self, entries: &[super::LogEntry<'_>]) -> Result<Vec<Option<ValuePointer>>> {
        use crate::value_type::ValueType;
        let recs: Vec<(Kind, &[u8], u64, &[u8])> = entries
            .iter()
            .map(|e| {
                let kind = match e.vtype {
                    ValueType::Value if e.separate => Kind::Value,
                    ValueType::Value => Kind::Inline,
                    ValueType::Deletion => Kind::Tombstone,
                    ValueType::Pointer => Kind::Relocation,
                };
                (kind, e.key, e.seq, e.value)
            })
            .collect();
        let ptrs = self.append_records(&recs, IoCategory::ValueStore)?;
        Ok(recs
            .iter()
            .zip(ptrs)
            .map(|(r, p)| (r.0 == Kind::Value).then_some(p))
            .collect())
    }

    fn log_position(&self) -> Option<(u64, u64)> {
        self.state.lock().ckpt?;
        Some(self.head())
    }

    fn state_with_checkpoint(&self, pos: (u64, u64)) -> Vec<u8> {
        encode_state(self.state.lock().tail, Some(pos))
    }

    fn checkpoint_committed(&self, pos: (u64, u64)) {
        let mut st = self.state.lock();
        if st.ckpt.is_some_and(|c| c < pos) {
            st.ckpt = Some(pos);
        }
    }

    fn replay(&self, f: &mut super::ReplaySink<'_>) -> Result<()> {
        use crate::value_type::ValueType;
        let ranges = {
            let st = self.state.lock();
            let Some(ckpt) = st.ckpt else { return Ok(()) };
            let r: Vec<(u64, u64, u64)> = st
                .files
                .iter()
                .filter(|(&id, _)| id >= ckpt.0)
                .map(|(&id, f)| (id, if id == ckpt.0 { ckpt.1 } else { 0 }, f.valid_len))
                .collect();
            r
        };
        for (id, start, end) in ranges {
            if start >= end {
                continue;
            }
            let path = self.path(id);
            let h = self.reader.handle(id)?;
            let mut buf = vec![0u8; (end - start) as usize];
            h.read_exact_at(start, &mut buf).ctx(&path)?;
            self.reader
                .stats
                .add_read(IoCategory::Wal, buf.len() as u64);
            let mut pos = 0usize;
            let mut batch: Vec<(u64, ValueType, Vec<u8>, Vec<u8>)> = Vec::new();
            let codec = self.reader.codec(id);
            while pos < buf.len() {
                let r = codec.decode(&buf[pos..]).map_err(|e| {
                    Error::corruption(
                        &path,
                        start + pos as u64,
                        format!("value-log record damaged ({e:?})"),
                    )
                })?;
                let at = start + pos as u64;
                let entry = match r.kind {
                    Kind::Value => Some((
                        ValueType::Pointer,
                        ValuePointer {
                            file_id: id,
                            offset: at,
                            length: r.len as u32,
                            aux: 0,
                        }
                        .encode(),
                    )),
                    Kind::Inline => Some((ValueType::Value, r.value.to_vec())),
                    Kind::Tombstone => Some((ValueType::Deletion, Vec::new())),
                    Kind::Relocation => Some((ValueType::Pointer, r.value.to_vec())),
                    // Never in a value log: HashKV's tags live in its segments.
                    Kind::GcCopy | Kind::Tag => None,
                };
                if let Some((t, v)) = entry {
                    batch.push((r.seq, t, r.key.to_vec(), v));
                }
                pos += r.len;
                if r.flags & FLAG_BATCH_END != 0 {
                    for (seq, t, k, v) in batch.drain(..) {
                        f(seq, t, &k, &v)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn figures(&self) -> Vec<(&'static str, u64)> {
        let (hf, ho) = self.head();
        let (tf, to) = self.tail();
        let c = &self.counters;
        vec![
            ("vlog_head_file", hf),
            ("vlog_head_offset", ho),
            ("vlog_tail_file", tf),
            ("vlog_tail_offset", to),
            ("gc_runs", c.gc_runs.load(Ordering::Relaxed)),
            ("gc_bytes_read", c.gc_bytes_read.load(Ordering::Relaxed)),
            ("gc_lookups", c.gc_lookups.load(Ordering::Relaxed)),
            (
                "gc_bytes_rewritten",
                c.gc_bytes_rewritten.load(Ordering::Relaxed),
            ),
            ("gc_bytes_freed", c.gc_bytes_freed.load(Ordering::Relaxed)),
            ("gc_chunks", c.gc_chunks.load(Ordering::Relaxed)),
            ("gc_sync_rounds", c.gc_sync_rounds.load(Ordering::Relaxed)),
            ("gc_judge_micros", c.gc_judge_micros.load(Ordering::Relaxed)),
            (
                "gc_relocate_micros",
                c.gc_relocate_micros.load(Ordering::Relaxed),
            ),
            ("gc_sync_micros", c.gc_sync_micros.load(Ordering::Relaxed)),
            ("gc_free_micros", c.gc_free_micros.load(Ordering::Relaxed)),
            ("gc_cpu_micros", c.gc_cpu_micros.load(Ordering::Relaxed)),
            ("prefetch_depth", self.prefetch.depth() as u64),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::{FileInfo, GARBAGE_REGION};

    /// GC takes the garbage reported inside its chunk, not the file's: a
    /// chunk nobody reported garbage in leaves the rest of the file's
    /// reports alone.
    #[test]
    fn garbage_is_taken_by_region() {
        let r = GARBAGE_REGION;
        let mut f = FileInfo::new(10 * r);
        assert_eq!(f.add_garbage(0, 1000), 1000);
        assert_eq!(f.add_garbage(5 * r + 10, 3000), 3000);
        assert_eq!(f.add_garbage(9 * r, 500), 500);
        assert_eq!(f.garbage, 4500);
        // A chunk over regions 1..4: nothing reported there.
        assert_eq!(f.take_garbage(r, 4 * r), 0);
        assert_eq!(f.garbage, 4500);
        // Half of region 5 goes with a chunk ending in its middle.
        assert_eq!(f.take_garbage(4 * r, 5 * r + r / 2), 1500);
        assert_eq!(f.garbage, 3000);
        // The rest of region 5 and everything to the end.
        assert_eq!(f.take_garbage(5 * r + r / 2, 10 * r), 2000);
        assert_eq!(f.garbage, 1000, "region 0 was before the chunks");
        // Reports never pass the valid length.
        f.valid_len = 1500;
        assert_eq!(f.add_garbage(0, 1000), 500);
    }

    /// A value-log file is preallocated to its roll size; a reopen cuts the
    /// zeros after the last record durably (so that the file's size is its
    /// valid length at every later open) and appends go to a new file.
    /// Every value reads back, and a crash after the reopen loses none.
    #[test]
    fn preallocated_files_are_cut_at_their_last_record_on_reopen() {
        use super::{vlog_path, VlogOptions, VlogStore};
        use crate::fs::{FaultFs, FileSystem, IoStats};
        use crate::vstore::{ValueRecord, ValueStore};
        use std::path::Path;
        use std::sync::Arc;
        let fs = FaultFs::new();
        let dir = Path::new("/db");
        fs.create_dir_all(dir).unwrap();
        let open = || {
            VlogStore::open(
                dir,
                Arc::new(fs.clone()),
                Arc::new(IoStats::default()),
                VlogOptions::new(1 << 20, GARBAGE_REGION),
                None,
            )
            .unwrap()
        };
        let value = vec![7u8; 100];
        let mut written = Vec::new();
        for round in 0..3u64 {
            let vlog = open();
            let key = format!("k{round}").into_bytes();
            let rec = ValueRecord {
                key: &key,
                seq: round + 1,
                value: &value,
            };
            let ptr = vlog.append(&[rec]).unwrap()[0];
            vlog.sync().unwrap();
            // The active file is preallocated: its size is the roll size.
            let active = vlog_path(dir, ptr.file_id);
            assert_eq!(fs.file_size(&active).unwrap(), 1 << 20, "round {round}");
            written.push((key, ptr));
            drop(vlog);
            fs.crash();
        }
        let vlog = open();
        for (key, ptr) in &written {
            assert!(vlog.contains(ptr));
            assert_eq!(vlog.read(key, ptr).unwrap(), Some(value.clone()));
            // Cut at the record's end: exactly one record per file.
            let path = vlog_path(dir, ptr.file_id);
            assert_eq!(
                fs.file_size(&path).unwrap(),
                ptr.offset + u64::from(ptr.length)
            );
        }
        let ids: Vec<u64> = written.iter().map(|(_, p)| p.file_id).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    }

    /// With `mmap_reads`, a file's records read back through its mapping;
    /// records appended after the mapping was made are read with system
    /// calls; a damaged record is reported as corruption at its offset.
    #[test]
    fn mapped_reads_return_every_value_and_report_damage() {
        use super::{vlog_path, VlogOptions, VlogStore};
        use crate::error::Error;
        use crate::fs::{IoStats, StdFs};
        use crate::vstore::{ValueRecord, ValueStore};
        use std::sync::Arc;
        let dir = tempfile::tempdir().unwrap();
        let vlog = VlogStore::open(
            dir.path(),
            Arc::new(StdFs),
            Arc::new(IoStats::default()),
            VlogOptions {
                mmap_reads: true,
                ..VlogOptions::new(64 << 10, GARBAGE_REGION)
            },
            None,
        )
        .unwrap();
        let keys: Vec<Vec<u8>> = (0..400).map(|i| format!("k{i:04}").into_bytes()).collect();
        let value = |i: usize| vec![i as u8; 300 + i % 7];
        let mut ptrs = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            let v = value(i);
            let rec = ValueRecord {
                key: k,
                seq: i as u64 + 1,
                value: &v,
            };
            ptrs.push(vlog.append(&[rec]).unwrap()[0]);
            vlog.sync().unwrap();
            // Read the first records early, so that their file is mapped
            // before the rest of it is written.
            if i < 3 {
                assert_eq!(vlog.read(k, &ptrs[i]).unwrap(), Some(v));
            }
        }
        assert!(
            ptrs.last().unwrap().file_id > ptrs[0].file_id,
            "several files"
        );
        for (i, (k, p)) in keys.iter().zip(&ptrs).enumerate() {
            assert_eq!(vlog.read(k, p).unwrap(), Some(value(i)), "record {i}");
        }
        let h = vlog.reader.handle(ptrs[0].file_id).unwrap();
        assert!(h.mapping().is_some());
        // Damage one record of a mapped file (the page cache is shared, so
        // the mapping sees the write).
        let p = ptrs[5];
        let path = vlog_path(dir.path(), p.file_id);
        crate::fs::flip_byte_in_file(&path, p.offset + u64::from(p.length) - 2, 0x40);
        match vlog.read(&keys[5], &p) {
            Err(Error::Corruption { offset, .. }) => assert_eq!(offset, p.offset),
            other => panic!("expected corruption, got {other:?}"),
        }
    }

    /// The next chunk's garbage share comes from the regions it covers:
    /// garbage elsewhere in the file does not count, and a hint of bytes
    /// already reported adds nothing.
    #[test]
    fn tail_chunk_garbage_ratio_reads_the_regions_of_the_next_chunk() {
        use super::{VlogOptions, VlogStore};
        use crate::fs::{FileSystem, IoStats, MemFs};
        use crate::vstore::{ValueRecord, ValueStore};
        use std::path::Path;
        use std::sync::Arc;
        let fs = Arc::new(MemFs::new());
        fs.create_dir_all(Path::new("/db")).unwrap();
        let vlog = VlogStore::open(
            Path::new("/db"),
            fs,
            Arc::new(IoStats::default()),
            VlogOptions::new(8 << 20, GARBAGE_REGION),
            None,
        )
        .unwrap();
        let value = vec![3u8; 1000];
        let keys: Vec<Vec<u8>> = (0..3000).map(|i| format!("k{i:05}").into_bytes()).collect();
        let recs: Vec<ValueRecord<'_>> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| ValueRecord {
                key: k,
                seq: i as u64 + 1,
                value: &value,
            })
            .collect();
        let ptrs = vlog.append(&recs).unwrap();
        vlog.sync().unwrap();
        assert_eq!(vlog.tail_chunk_garbage_ratio(), 0.0);
        // Garbage in the second region only: not in the next chunk.
        let second: Vec<_> = ptrs
            .iter()
            .filter(|p| p.offset / GARBAGE_REGION == 1)
            .collect();
        for p in &second {
            vlog.note_garbage(p);
        }
        assert_eq!(vlog.tail_chunk_garbage_ratio(), 0.0);
        // Every record starting in the first region, hinted, then reported.
        let first: Vec<_> = ptrs.iter().filter(|p| p.offset < GARBAGE_REGION).collect();
        for p in &first {
            vlog.hint_garbage(p);
        }
        let r = vlog.tail_chunk_garbage_ratio();
        assert!(r > 0.99, "{r}");
        let before = vlog.space().garbage_bytes;
        for p in &first {
            vlog.note_garbage(p);
        }
        assert_eq!(vlog.space().garbage_bytes, before, "counted once");
        assert_eq!(vlog.tail_chunk_garbage_ratio(), r);
    }

    /// Inferred garbage and reported garbage may name the same bytes: a
    /// region counts the larger, and GC takes both.
    #[test]
    fn hints_and_reports_of_the_same_region_count_once() {
        let r = GARBAGE_REGION;
        let mut f = FileInfo::new(10 * r);
        assert_eq!(f.add_hint(10, 3000), 3000);
        assert_eq!(f.garbage, 3000);
        // Compaction reports 2000 of the same bytes: no change.
        assert_eq!(f.add_garbage(20, 2000), 2000);
        assert_eq!(f.garbage, 3000);
        // It reports more than was inferred: the report counts.
        assert_eq!(f.add_garbage(30, 1500), 1500);
        assert_eq!(f.garbage, 3500);
        // Another region adds.
        assert_eq!(f.add_hint(2 * r, 700), 700);
        assert_eq!(f.garbage, 4200);
        // GC of region 0 takes both estimates there, and only there.
        assert_eq!(f.take_garbage(0, r), 3500);
        assert_eq!(f.garbage, 700);
        assert_eq!(f.noted.total, 0);
        assert_eq!(f.hinted.total, 700);
        // Each estimate is capped at the valid length on its own.
        f.valid_len = 1000;
        assert_eq!(f.add_hint(0, 1000), 300);
        assert_eq!(f.add_garbage(0, 5000), 1000);
        assert_eq!(f.garbage, 1000 + 700);
    }
}
