//! HashKV value storage, the `hashkv` layout (HashKV, ATC '18, §3).
//!
//! Values at least `value_threshold` bytes long (selective KV separation,
//! §3.5) are stored in a value store divided into **segment groups**:
//! `hash(key)` picks the group, and every version of a key is appended to
//! its group, so GC can collect one group at a time and tell live from dead
//! by position alone.
//!
//! - **Storage management** (§3.2, §3.8, [`segment`]): fixed-size main
//!   segments, one per group, and a reserved space of small log segments a
//!   group takes when its main segment is full; an in-memory segment table
//!   gives every append its position without an index lookup. One file per
//!   segment (byte diagram in [`segment`]); a [`ValuePointer`] is `(segment
//!   id, offset, record length, aux = 0)`, or a cold-log pointer with
//!   `aux = 1`. A full reserved space makes `append` fail with
//!   `Error::ValueStoreFull` ("hashkv value store is full …"), leaving the store
//!   untouched.
//! - **Writes** (§3.2): by default an `append` writes its records straight
//!   to their groups' segment files (one write per run of records in one
//!   segment), handing them to the OS before it returns: each value is
//!   written once, and the OS's page cache batches the device writes.
//!   With `hashkv_journal_values` the **write cache** ([`cache`]) holds
//!   them instead, grouped per segment and flushed as one sequential write
//!   per segment; because sepkv promises that an acknowledged write
//!   survives a process crash, the records are then first written to the
//!   write journal, and the cache holds nothing that is not also there
//!   (`hashkv_write_cache_size = 0` flushes within every append).
//! - **GC** (§3.3, [`gc`]): picks the groups with the largest write volume,
//!   scans them sequentially, keeps each key's latest version — no index
//!   queries decide validity — and writes the live records back to the
//!   group's end, in a fresh main segment that new writes fill too;
//!   relocations go through the index's compare-and-set; old segments are
//!   freed after the relocations and the new segment table are durable and
//!   no reader can reach them.
//! - **Hotness awareness** (§3.4, [`cold`]): pairs not updated since
//!   their insert are cold; at their group's GC their values move to a
//!   cold data log and the group keeps a tag. A pair once updated stays
//!   hot (the group's `hot_seq` remembers it across GCs and reopens).
//!   The cold log lives inside `value_capacity`: its span (tail to head)
//!   takes the room the groups' current main segments leave unfilled
//!   first and log-segment units of the reserved space for the rest
//!   ([`segment::Table::free_units`]), and GC moves cold values only
//!   while that leaves free units beyond its own headroom (the rest are
//!   copied back to their group like hot ones); a user append into
//!   main-segment room the cold log holds is refused, as a log segment
//!   is, once it would leave fewer free units than GC's headroom. So the
//!   cold log and the groups' segments together stay within the
//!   capacity. A GC step collects the cold log when its known garbage
//!   reaches `gc_garbage_ratio` (0.5 when background GC is off), when the
//!   reserved space runs low and it holds a log segment of known garbage,
//!   or when a group's copies found no room or two group steps in a row
//!   reclaimed next to nothing: the cold log may then hold values
//!   overwritten since their move that nobody has reported dead (a
//!   superseded tag names where its value was moved to, which the cold
//!   log's own GC may have moved again), and its GC judges liveness by
//!   itself.
//! - **Crash consistency** (§3.7, [`journal`]): metadata journaling. The
//!   write journal records the segments that user writes and GC copies
//!   allocate to their groups, and is replayed on open; the records are
//!   found again by scanning, from the lengths the last checkpoint of the
//!   segment table gives, every segment whose file is longer (their
//!   checksums end the scan at the first torn record). The journal is
//!   checkpointed once an eighth of the groups' bytes (at most
//!   `hashkv_journal_size`) was appended since the last, which bounds that
//!   scan. With `hashkv_journal_values` the journal carries the records'
//!   bytes too, and GC copies where they come from. Without the journal
//!   (`hashkv_journal = false`) the table is checkpointed whenever a
//!   segment is allocated. Open scans whatever the setting, so the mode can
//!   change between opens, after a crash too.
//! - **Range scans** (§3.6): [`ValueStore::read_many`] issues read-ahead
//!   (`advise(WillNeed)` on the open segment file) for every value, then
//!   reads them; while reads are served from memory ([`ReadLatency`]) the
//!   hints are skipped.
//!
//! # Durability
//! `append` returns once its records are handed to the OS (the segment
//! files, or the journal when it carries values); [`ValueStore::sync`]
//! makes them durable: an `fsync` of every segment written since the last
//! sync (one `syncfs(2)` once 16 or more are due, after the segments still
//! open for appends had their pages but the last written back, see
//! [`crate::fs::SyncHandle::write_back`]) and of the journal, or,
//! when the journal carries values, of the journal alone (two journals
//! while a checkpoint is in flight, see below).
//! The segment table is persisted in the manifest by GC
//! ([`IndexRelocator::persist_state`]) and in the store's own checkpoint
//! file `HASHKV-TABLE`; open takes the newer (by epoch) and replays the
//! journals after it.
//!
//! # GC trigger
//! GC runs from the engine's GC thread and `Db::gc`. The paper triggers it
//! when free log segments run low: while fewer than a quarter of the log
//! segments are free, [`ValueStore::gc_due`] says so (the `gc_pressure`
//! figure too) and the GC thread runs steps back to back; it also runs by
//! the garbage ratio (`gc_garbage_ratio`) and the space target, on the
//! store's true space figures.
//!
//! # Deviations from the paper
//! - GC writes a group's live records to a *fresh* main segment (then log
//!   segments) instead of rewriting the main segment in place: readers and
//!   snapshots keep reading the old copies until they are freed, and no
//!   before-images need journaling. Writes that arrive while the GC runs go
//!   to the same fresh segment, interleaved with the copies, so once the GC
//!   commits the group is that segment and new writes fill its free room;
//!   the reserved space only takes what overflows a main segment. The price
//!   is one extra main segment of space per group while its GC runs. When a
//!   group has outgrown its main segment by more than the free log segments
//!   hold, one group per step may overdraw the reserve by a main segment's
//!   worth of log segments for its copies (in all, counting what retired
//!   segments a reader still holds keep over it); the step's commit frees
//!   the group's old segments. Without that, such a store could not be
//!   collected at all.
//! - The latest version of a key in a group is the record with the highest
//!   sequence number (the later one on a tie), not the one nearest the
//!   group's end: copies and new writes share the group's end. A failed
//!   compare-and-set is explained by a newer record of the key appended to
//!   the group during the GC (found by scanning those records); otherwise —
//!   the key was deleted, or after a crash the index uses another record of
//!   the group (a lost WAL tail lets sequence numbers be reused) — one index
//!   query tells which (`gc_index_lookups`). A copy found dead is remembered
//!   in memory so the next GC drops it.
//! - The paper's GC updates the LSM-tree without querying it; sepkv's
//!   installs by compare-and-set, since user writes go on during GC, and
//!   for most keys that asks the index nothing (`gc_moves_judged`): the
//!   group's latest record is the index's version unless the key was
//!   deleted or given an inline value since (the write path tells the
//!   store, per bucket of key hashes), written since the seal, or placed
//!   before the index recovered ([`gc`], step 4).
//! - GC copies are journaled in the write journal (their allocations, or
//!   with `hashkv_journal_values` where each copy comes from), which
//!   orders them with the user writes that share their segment; there is
//!   no separate GC journal.
//! - The write journal's commit record is the record's own checksum in its
//!   segment: §3.7 flushes the cache to the value store, then journals the
//!   metadata with a commit record; here the records are in their segments
//!   before the append returns, and open keeps every intact one. The
//!   write cache is the OS's page cache by default, since sepkv promises
//!   that an acknowledged write survives a process crash and the paper's
//!   in-memory cache would be its only copy; `hashkv_journal_values`
//!   brings back an in-memory cache, behind a journal of the values (every
//!   value written twice).
//! - The write cache does not update pairs in place (see [`cache`]).
//! - A GC step collects several groups (greedy order, up to
//!   `max(main segment size, 4 MiB)` of group bytes and at most a quarter
//!   of the groups) so that small groups share one relocation batch and one
//!   table update; the order is by write volume plus the garbage the engine
//!   reported (so groups with deletions get collected too), found by sorting
//!   instead of a heap.
//! - Tags of deleted keys stay in their group (they are small); values
//!   moved to the cold data log are written through the value log's append
//!   and so counted as value-store writes, not GC writes.
//!
//! Thread-safety: appends, reads and GC share one state lock (held only for
//! table updates, cache operations and journal appends; an append takes
//! the segment handles' lock before it lets the state lock go, and writes
//! its records under that alone, so reads wait for a write only when a
//! second placer queues behind it while holding the state lock); the
//! write journal
//! has its own lock, taken after the state lock, so that its fsync holds
//! neither reads nor the table; GC steps are serialised; reads of files
//! run without the lock. A full write cache is *sealed* under the state
//! lock (its batches stay readable in memory) and written by the store's
//! background worker; a full journal is switched for the next one under
//! the lock, and the worker finishes the checkpoint — segment fsyncs, the
//! table file, removing the old journal — outside it. So neither readers
//! nor the writer whose append filled the cache or the journal wait for
//! that I/O. Until the checkpoint's table is durable, `sync` syncs the old
//! journal beside the new one, and the live table keeps naming the old
//! journal (open replays both); GC, `verify` and close write every sealed
//! batch themselves before they go on.

pub mod cache;
pub mod cold;
pub mod gc;
pub mod journal;
pub mod record;
pub mod segment;

use super::{
    GcOutcome, IndexReader, IndexRelocator, ReadLatency, SpaceStats, ValuePointer, ValueRecord,
    ValueStore,
};
use crate::error::{Error, IoContext, Result};
use crate::format::record::{RecordReader, RecordWriter};
use crate::fs::{
    create_preallocated, read_all, Advice, FileSystem, IoCategory, IoStats, WritableFile,
};
use crate::options::Options;
use crate::seqno::SeqNum;
use cache::{Pending, WriteCache};
use cold::{is_cold, ColdLog};
use journal::{journal_path, parse_journal_name, Entry, GroupIntent, Place, GC_JOURNAL};
use parking_lot::{Condvar, Mutex, MutexGuard};
use record::Kind;
use segment::{parse_seg_name, Alloc, Geometry, PlaceError, SegFiles, Table};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Longest pause [`ValueStore::write_delay`] asks of a user write while the
/// reserve runs out. In the update experiment (300k × 1000 B, three phases,
/// two interleaved runs) 150 µs took p99.99 write latency from 7–15 ms to
/// 2.8–3.9 ms and the longest write from 49–150 ms to 8–11 ms, at 0.92–1.04×
/// the throughput and 1.03–1.08× the bytes written per phase; 50 µs paced
/// writers less well.
const MAX_RESERVE_DELAY: std::time::Duration = std::time::Duration::from_micros(150);

/// Knobs of the HashKV value store (from [`Options`]).
#[derive(Debug, Clone)]
pub struct HashKvOptions {
    /// Values shorter than this stay inline in the index (bytes).
    pub value_threshold: usize,
    /// Total value-store capacity (bytes): main segments plus reserved space.
    pub capacity: u64,
    /// Main segment size (bytes).
    pub main_segment_size: u64,
    /// Log segment size (bytes).
    pub log_segment_size: u64,
    /// Share of the capacity reserved for log segments.
    pub reserved_ratio: f64,
    /// Write cache size (bytes); 0 flushes within every append.
    pub write_cache_size: usize,
    /// Hot/cold separation in GC.
    pub hotness: bool,
    /// The write journal (segment allocations of writes and GC copies).
    pub journal: bool,
    /// The journal carries the values too, and the write cache batches
    /// their segment writes (only with `journal`).
    pub journal_values: bool,
    /// Write-journal size at which it is checkpointed and recycled (bytes).
    pub journal_size: u64,
    /// Cold data log file size (bytes).
    pub cold_file_size: u64,
    /// Bytes the cold data log's GC reads per step.
    pub cold_gc_chunk_size: u64,
    /// Known-garbage ratio of the cold data log at which a GC step collects
    /// it (the engine's `gc_garbage_ratio`; 0.5 when that is 0).
    pub cold_gc_ratio: f64,
}

impl HashKvOptions {
    /// The store's knobs from the database options.
    pub fn from_options(o: &Options) -> HashKvOptions {
        HashKvOptions {
            value_threshold: o.value_threshold,
            capacity: o.hashkv_capacity(),
            main_segment_size: o.hashkv_main_segment_size,
            log_segment_size: o.hashkv_log_segment_size,
            reserved_ratio: o.hashkv_reserved_ratio,
            write_cache_size: o.hashkv_write_cache_size,
            hotness: o.hashkv_hotness,
            journal: o.hashkv_journal,
            journal_values: o.hashkv_journal_values,
            journal_size: o.hashkv_journal_size,
            cold_file_size: o.vlog_file_size,
            cold_gc_chunk_size: o.gc_chunk_size,
            cold_gc_ratio: if o.gc_garbage_ratio > 0.0 {
                o.gc_garbage_ratio
            } else {
                0.5
            },
        }
    }
}

/// Name of the store's own checkpoint of the segment table.
pub const TABLE_FILE: &str = "HASHKV-TABLE";
const TABLE_TMP: &str = "HASHKV-TABLE.new";

/// The file system's allocation unit, as the space figures count it (a
/// segment file occupies its length rounded up to it).
const FS_BLOCK: u64 = crate::fs::PAGE_SIZE;

impl State {
    /// What the journal's checkpoint is due by (compared with
    /// `journal_limit`): its length, or with metadata only the bytes
    /// appended to segments since the last checkpoint.
    fn checkpoint_due(&self) -> u64 {
        self.journal_len.max(self.appended)
    }
}

/// Segments retired by GC, freed once no reader older than `seq` remains.
struct PendingFree {
    seq: u64,
    segs: Vec<u64>,
}

/// Mutable state behind the store's lock.
pub(crate) struct State {
    table: Table,
    cache: WriteCache,
    /// Length of the write journal (bytes; 0 without journaling), as of
    /// the last append under this lock.
    journal_len: u64,
    /// Bytes appended to segments since the journal's last checkpoint
    /// (journal of metadata only): what open would scan after a crash.
    appended: u64,
    journal_num: u64,
    /// GC copies whose relocation failed and that are known dead:
    /// `(segment, offset)`.
    dead: HashSet<(u64, u64)>,
    pending: Vec<PendingFree>,
    /// Bytes the running GC step copied — into its groups and into the
    /// cold data log — whose originals the groups still hold: until the
    /// step commits, each such value is on disk twice, and the space
    /// figures count the copy as garbage rather than live
    /// ([`ValueStore::space`]). Zero between steps.
    gc_copies: u64,
    /// Groups GC left alone because their copies would not fit, with their
    /// GC score and the free log segments then: picked again once the score
    /// changes or log segments are freed.
    stalled: HashMap<u32, (u64, u64)>,
    poisoned: Option<String>,
    /// Bytes at which the journal is checkpointed and recycled: its
    /// length (`journal_len`) when it carries values, `appended` when it
    /// records metadata only (see [`State::checkpoint_due`]).
    /// Carrying values: `journal_size`, or a thirty-second of the groups'
    /// bytes when that is smaller (at least 1 MiB), so that the journals
    /// holding second copies of the values — up to two on disk while a
    /// checkpoint runs, and a preallocated spare — add little to a store's
    /// size (an eighth held the update experiment's space amplification
    /// 0.04–0.09 higher, at the same throughput). Metadata only:
    /// `journal_size`, or an eighth of the groups' bytes when that is
    /// smaller (at least 4 MiB), which bounds the scan on open. Set at
    /// open and at every recycle.
    journal_limit: u64,
    /// A journal checkpoint is in flight (at most one at a time).
    checkpointing: bool,
}

#[derive(Default)]
struct Counters {
    gc_runs: AtomicU64,
    gc_groups: AtomicU64,
    gc_bytes_read: AtomicU64,
    gc_bytes_rewritten: AtomicU64,
    gc_bytes_freed: AtomicU64,
    gc_cold_bytes: AtomicU64,
    /// Cold values kept in their group because the capacity had no free
    /// room for the cold data log to grow.
    gc_cold_kept: AtomicU64,
    /// User writes asked to pause while the reserve ran out.
    write_delays: AtomicU64,
    /// See [`ValueStore::garbage_found`] (segment groups only).
    garbage_found: AtomicU64,
    gc_tags: AtomicU64,
    gc_lookups: AtomicU64,
    /// Relocations GC judged live from the group alone (no index lookup
    /// before the install; see [`gc`], step 4).
    gc_judged: AtomicU64,
    gc_stalls: AtomicU64,
    cache_flushes: AtomicU64,
    checkpoints: AtomicU64,
    full_errors: AtomicU64,
}

/// Buckets of [`StoreCore::departed`] (256 KiB of sequence numbers).
const DEPARTED_BUCKETS: usize = 1 << 15;

/// `key`'s bucket in [`StoreCore::departed`]: the hash's top bits (its
/// group comes from the hash modulo the group count).
fn departed_bucket(key: &[u8]) -> usize {
    (xxhash_rust::xxh3::xxh3_64(key) >> (64 - DEPARTED_BUCKETS.trailing_zeros())) as usize
}

/// The HashKV value store. See the module docs.
///
/// The store's parts live in a [`StoreCore`] shared with its background
/// worker, which hands sealed write-cache batches to their segment files
/// and finishes journal checkpoints (segment fsyncs, the table file) off
/// the write path and outside the state lock; the store derefs to it.
pub struct HashKvStore {
    core: Arc<StoreCore>,
    /// The background worker (with the journal only); joined on drop.
    worker: Option<JoinHandle<()>>,
}

impl std::ops::Deref for HashKvStore {
    type Target = StoreCore;
    fn deref(&self) -> &StoreCore {
        &self.core
    }
}

/// What a HashKV store shares with its background worker.
pub struct StoreCore {
    opts: HashKvOptions,
    files: SegFiles,
    state: Mutex<State>,
    /// The write journal (`None` without journaling). Its own lock, taken
    /// after `state` when both are held (never the other way round), so
    /// that [`ValueStore::sync`] fsyncs it without the state lock and a
    /// segment read never waits for a journal sync.
    journal: Mutex<Option<RecordWriter>>,
    /// The journal a checkpoint in flight retires: its records may not be
    /// in synced segments yet, so [`ValueStore::sync`] syncs it beside the
    /// current one. Set and read under the journal's lock, taken after it.
    retiring: Mutex<Option<RecordWriter>>,
    /// The next journal, created, preallocated and with its directory
    /// entry synced by the worker after a checkpoint, so that switching
    /// journals costs no I/O under the state lock: `(number, file)`.
    spare: Mutex<Option<(u64, Box<dyn WritableFile>)>>,
    /// Write-cache batches sealed but not yet in their files, oldest
    /// first, with their sizes; reads look here after the cache. Taken
    /// after `state` and `flush_lock`.
    flushing: Mutex<VecDeque<(Sealed, usize)>>,
    /// Bytes in `flushing`: raised under the state lock when a batch is
    /// sealed, lowered once it is in its files, so a read (or an append)
    /// that sees 0 needs not take the queue's lock.
    flushing_len: AtomicUsize,
    /// User writes may have to pause ([`ValueStore::write_delay`]), as of
    /// the last [`ValueStore::gc_due`].
    pacing: AtomicBool,
    /// Held while batches of `flushing` are written, in queue order (a
    /// segment's batches must reach its file in offset order). Taken after
    /// `state` (GC drains with the table locked), never before it.
    flush_lock: Mutex<()>,
    /// Work handed to the background worker.
    work: Mutex<Work>,
    work_cv: Condvar,
    /// Serialises GC steps.
    gc_lock: Mutex<()>,
    /// Group GC steps in a row that, with the reserve low, reclaimed less
    /// than a sixteenth of what they read (see [`gc::step`]).
    stuck_group_steps: AtomicU32,
    /// Per bucket of key hashes ([`DEPARTED_BUCKETS`]), the highest
    /// sequence number of a deletion or an inline write of a key in it
    /// ([`ValueStore::note_unseparated`]): a record of a key whose bucket
    /// holds a higher number may be dead although its group holds no newer
    /// record of the key, so GC looks such a key up before it relocates it
    /// (see [`gc`], step 4).
    departed: Box<[AtomicU64]>,
    /// The first segment id allocated once the index had recovered
    /// ([`ValueStore::recovered`]; `u64::MAX` until then). Records in older
    /// segments were placed before deletions were noted, or by a process
    /// a crash stopped (whose last records the index may never have
    /// heard of), so GC looks their keys up.
    trusted_from: AtomicU64,
    cold: ColdLog,
    counters: Counters,
    /// How long segment reads take (steers scans' read-ahead hints).
    latency: ReadLatency,
}

/// A sealed write-cache batch: the buffered records of each segment.
type Sealed = Arc<Vec<(u64, Pending)>>;

/// A journal checkpoint begun by a switch of journals: the table as of the
/// switch, naming the new journal from its start.
struct Checkpoint {
    /// Number of the journal retired.
    old: u64,
    /// Number of the journal switched to.
    new: u64,
    /// The encoded table to write once the segments are synced.
    table: Vec<u8>,
}

/// The background worker's queue.
#[derive(Default)]
struct Work {
    /// Sealed cache batches wait in `flushing`.
    flush: bool,
    checkpoint: Option<Checkpoint>,
    /// The worker is running a round.
    busy: bool,
    shutdown: bool,
    /// Holds the worker between rounds (tests, to look at the store with a
    /// checkpoint in flight).
    paused: bool,
}

/// Writes the table checkpoint atomically (temporary file, sync, rename,
/// directory sync). The temporary name does not end in `.tmp`, which the
/// engine deletes on its own schedule.
fn write_table_file(fs: &dyn FileSystem, dir: &Path, stats: &IoStats, data: &[u8]) -> Result<()> {
    let tmp = dir.join(TABLE_TMP);
    let path = dir.join(TABLE_FILE);
    {
        let mut f = fs.create(&tmp).ctx(&tmp)?;
        f.append(data).and_then(|_| f.sync()).ctx(&tmp)?;
    }
    stats.add_written(IoCategory::Manifest, data.len() as u64);
    fs.rename(&tmp, &path).ctx(&path)?;
    fs.sync_dir(dir).ctx(dir)
}

/// Checks a record read for `key` at `ptr`; returns where its value lies
/// in `buf`. `path` names the file, built only for an error.
fn check_record(
    path: impl FnOnce() -> PathBuf,
    ptr: &ValuePointer,
    key: &[u8],
    buf: &[u8],
) -> Result<std::ops::Range<usize>> {
    let why = match record::decode(buf) {
        Ok(r) if r.len == buf.len() && r.key == key && r.kind == Kind::Value => {
            let start = r.value.as_ptr() as usize - buf.as_ptr() as usize;
            return Ok(start..start + r.value.len());
        }
        Ok(r) if r.key != key => "hashkv record belongs to another key".to_string(),
        Ok(r) if r.kind != Kind::Value => "hashkv pointer refers to a tag, not a value".to_string(),
        Ok(_) => "hashkv record length differs from the pointer".to_string(),
        Err(e) => format!("hashkv record damaged ({e:?})"),
    };
    Err(Error::corruption(path(), ptr.offset, why))
}

/// End of the intact records of `buf` (which starts at a record boundary).
fn intact_prefix(buf: &[u8]) -> usize {
    let mut pos = 0;
    while let Ok(r) = record::decode(&buf[pos..]) {
        pos += r.len;
    }
    pos
}

impl HashKvStore {
    /// Opens the store in `dir`, given the segment table last persisted with
    /// [`IndexRelocator::persist_state`] (`None` for a new database).
    /// Replays the GC and write journals, reconciles segment files with the
    /// table, removes leftover files and checkpoints the table.
    ///
    /// # Errors
    /// `Corruption` for an unreadable table or journal; `Io`.
    pub fn open(
        dir: &Path,
        fs: Arc<dyn FileSystem>,
        stats: Arc<IoStats>,
        opts: HashKvOptions,
        state: Option<&[u8]>,
    ) -> Result<HashKvStore> {
        let manifest = match state {
            Some(s) => Some(Table::decode(s).ok_or_else(|| {
                Error::corruption(dir.join("MANIFEST"), 0, "bad hashkv segment table")
            })?),
            None => None,
        };
        let own_path = dir.join(TABLE_FILE);
        let own = if fs.exists(&own_path) {
            let d = read_all(fs.as_ref(), &own_path).ctx(&own_path)?;
            stats.add_read(IoCategory::Manifest, d.len() as u64);
            Some(
                Table::decode(&d)
                    .ok_or_else(|| Error::corruption(&own_path, 0, "bad hashkv segment table"))?,
            )
        } else {
            None
        };
        let mut table = match (manifest, own) {
            (Some(a), Some(b)) => {
                if a.epoch >= b.epoch {
                    a
                } else {
                    b
                }
            }
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => Table::new(Geometry::new(
                opts.capacity,
                opts.main_segment_size,
                opts.log_segment_size,
                opts.reserved_ratio,
            )),
        };
        let files = SegFiles::new(dir, fs.clone(), stats.clone());

        let snapshot_next = table.next_seg;

        // GC journal of an earlier version: intents of GCs that may have
        // installed relocations but did not commit.
        let gc_path = dir.join(GC_JOURNAL);
        let mut begun: BTreeMap<u64, Vec<GroupIntent>> = BTreeMap::new();
        if fs.exists(&gc_path) {
            let data = read_all(fs.as_ref(), &gc_path).ctx(&gc_path)?;
            stats.add_read(IoCategory::Gc, data.len() as u64);
            let mut r = RecordReader::new(&data, &gc_path);
            while let Some((off, rec)) = r.next_record()? {
                match journal::decode(rec) {
                    Some(Entry::Begin(id, g)) => {
                        begun.insert(id, g);
                    }
                    Some(Entry::Done(id)) => {
                        begun.remove(&id);
                    }
                    _ => {
                        return Err(Error::corruption(
                            &gc_path,
                            off,
                            "malformed GC journal entry",
                        ))
                    }
                }
            }
        }

        // Write journal, from the table's position to the first torn entry.
        let names = fs.list(dir).ctx(dir)?;
        let mut jnums: Vec<u64> = names.iter().filter_map(|n| parse_journal_name(n)).collect();
        jnums.sort_unstable();
        let from = table.journal_pos;
        let mut jdata: Vec<(PathBuf, Vec<u8>, usize)> = Vec::new();
        for &n in jnums.iter().filter(|&&n| n >= from.0) {
            let path = journal_path(dir, n);
            let data = read_all(fs.as_ref(), &path).ctx(&path)?;
            stats.add_read(IoCategory::ValueStore, data.len() as u64);
            let start = if n == from.0 {
                (from.1 as usize).min(data.len())
            } else {
                0
            };
            jdata.push((path, data, start));
        }
        let mut entries: Vec<(&Path, u64, Entry<'_>)> = Vec::new();
        'read: for (path, data, start) in &jdata {
            let mut r = RecordReader::new(&data[*start..], path);
            loop {
                let next = r.next_record().map_err(|e| match e {
                    Error::Corruption {
                        file,
                        offset,
                        reason,
                    } => Error::Corruption {
                        file,
                        offset: offset + *start as u64,
                        reason,
                    },
                    e => e,
                })?;
                let Some((off, rec)) = next else { break };
                let off = off + *start as u64;
                match journal::decode(rec) {
                    Some(e @ (Entry::Write(_) | Entry::Copy(_))) => entries.push((path, off, e)),
                    _ => {
                        return Err(Error::corruption(
                            path,
                            off,
                            "malformed write-journal entry",
                        ))
                    }
                }
            }
            // Zeros to the end are the journal's preallocated space (no
            // entry was cut): the next journal, if any, goes on.
            if matches!(r.end(), Some(crate::format::record::LogEnd::Torn(_))) && !r.zero_tail() {
                break 'read;
            }
        }
        // Segments appended to groups, then (earlier versions) GC output
        // behind the old segments it copied (`old ++ new ++ later`), then
        // the records, in journal order: a copy's source is in place before
        // the copy is replayed.
        for (_, _, e) in &entries {
            let allocs = match e {
                Entry::Write(w) => &w.allocs,
                Entry::Copy(c) => &c.allocs,
                _ => continue,
            };
            for a in allocs {
                table.attach(a, snapshot_next);
            }
        }
        for intents in begun.values() {
            adopt(&mut table, intents);
        }
        for (path, off, e) in &entries {
            match e {
                Entry::Write(w) => replay_records(&mut table, &files, path, *off, w)?,
                Entry::Copy(c) => replay_copies(&mut table, &files, path, *off, c)?,
                _ => {}
            }
        }
        drop(entries);
        drop(jdata);

        // Reconcile segment files with the table.
        let unknown = |id: u64| {
            Error::corruption(
                dir.join(TABLE_FILE),
                0,
                format!("hashkv segment table lists segment {id} but has no entry for it"),
            )
        };
        for gi in 0..table.geo.groups {
            let segs = table.groups[gi as usize].segs.clone();
            for &id in &segs {
                let len = table.seg(id).map_err(unknown)?.len;
                let fl = files.file_len(id)?;
                if fl == len {
                    continue;
                }
                let new_len = if fl > len {
                    // Records appended after the last checkpoint: straight
                    // to the segments when the journal records metadata
                    // only or is off (in any of the group's segments
                    // allocated since, and the one it was filling then);
                    // kept whatever the journal setting now, since it may
                    // change between opens. With a journal of values they
                    // can only be records whose journal entry was lost,
                    // which the WAL then decides.
                    let mut buf = vec![0u8; (fl - len) as usize];
                    files.read_exact(id, len, &mut buf, IoCategory::ValueStore)?;
                    let keep = len + intact_prefix(&buf) as u64;
                    if keep < fl {
                        files.truncate(id, keep)?;
                    }
                    keep
                } else {
                    // The file lost its tail (power loss before a sync):
                    // keep its intact records.
                    let mut buf = vec![0u8; fl as usize];
                    if fl > 0 {
                        files.read_exact(id, 0, &mut buf, IoCategory::ValueStore)?;
                    }
                    let e = intact_prefix(&buf) as u64;
                    if e < fl {
                        files.truncate(id, e)?;
                    }
                    e
                };
                let s = table.segs.get_mut(&id).ok_or_else(|| unknown(id))?;
                if new_len > s.len {
                    table.groups[gi as usize].write_volume += new_len - s.len;
                }
                s.len = new_len;
            }
        }

        // Remove what no table lists: GC output that never committed,
        // segments GC retired, interrupted rewrites.
        let listed = table.listed();
        let mut removed = false;
        for name in fs.list(dir).ctx(dir)? {
            let stale = match parse_seg_name(&name) {
                Some(id) => !listed.contains(&id),
                None => name.ends_with(".hseg.new") || name == TABLE_TMP,
            };
            if stale {
                let p = dir.join(&name);
                match fs.remove(&p) {
                    Ok(()) => removed = true,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(Error::io(&p, e)),
                }
            }
        }
        if removed {
            fs.sync_dir(dir).ctx(dir)?;
        }
        // Everything a pointer may reach is below `next_seg`.
        if let Some(&m) = listed.iter().max() {
            table.next_seg = table.next_seg.max(m + 1);
        }

        let cold = ColdLog::open(
            dir,
            fs.clone(),
            stats.clone(),
            opts.cold_file_size,
            opts.cold_gc_chunk_size,
            table.cold_state.as_deref(),
        )?;

        // Checkpoint: the replayed records are synced, the table names a
        // fresh journal, and the old journals go.
        files.sync_dirty()?;
        let new_num = jnums.last().copied().unwrap_or(0).max(table.journal_pos.0) + 1;
        table.journal_pos = (new_num, 0);
        table.epoch += 1;
        let encoded = table.encode().map_err(unknown)?;
        write_table_file(fs.as_ref(), dir, &stats, &encoded)?;
        for &n in &jnums {
            let p = journal_path(dir, n);
            match fs.remove(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(&p, e)),
            }
        }
        let journal_limit = HashKvStore::journal_limit(&opts, &table);
        let journal = if opts.journal {
            let p = journal_path(dir, new_num);
            // Preallocated to the length at which it is recycled.
            let f = create_preallocated(
                fs.as_ref(),
                &p,
                HashKvStore::journal_prealloc(&opts, journal_limit),
            )
            .ctx(&p)?;
            Some(RecordWriter::new(
                f,
                p,
                stats.clone(),
                IoCategory::ValueStore,
            ))
        } else {
            None
        };
        // The checkpoint holds what the GC journal's intents adopted.
        if fs.exists(&gc_path) {
            fs.remove(&gc_path).ctx(&gc_path)?;
        }
        fs.sync_dir(dir).ctx(dir)?;

        let core = StoreCore {
            files,
            state: Mutex::new(State {
                table,
                cache: WriteCache::new(opts.write_cache_size),
                journal_len: 0,
                appended: 0,
                journal_num: new_num,
                dead: HashSet::new(),
                pending: Vec::new(),
                gc_copies: 0,
                stalled: HashMap::new(),
                poisoned: None,
                journal_limit,
                checkpointing: false,
            }),
            journal: Mutex::new(journal),
            retiring: Mutex::new(None),
            spare: Mutex::new(None),
            flushing: Mutex::new(VecDeque::new()),
            flushing_len: AtomicUsize::new(0),
            pacing: AtomicBool::new(false),
            flush_lock: Mutex::new(()),
            work: Mutex::new(Work::default()),
            work_cv: Condvar::new(),
            gc_lock: Mutex::new(()),
            stuck_group_steps: AtomicU32::new(0),
            departed: (0..DEPARTED_BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            trusted_from: AtomicU64::new(u64::MAX),
            cold,
            counters: Counters::default(),
            latency: ReadLatency::default(),
            opts,
        };
        let core = Arc::new(core);
        let worker = if core.opts.journal {
            let c = core.clone();
            Some(
                std::thread::Builder::new()
                    .name("sepkv-hashkv".into())
                    .spawn(move || {
                        crate::sched::mark_background();
                        c.work_loop()
                    })
                    .map_err(|e| Error::io(dir, e))?,
            )
        } else {
            None
        };
        let store = HashKvStore { core, worker };
        store.refresh_cold_units();
        Ok(store)
    }

    /// Charges the cold data log's span (live and garbage bytes from its
    /// tail to its head) to the capacity, in log-segment units, and counts
    /// the main segments' free room, which the cold log takes first
    /// ([`Table::free_units`]).
    ///
    /// Without the second, moving cold values out of a group took reserve
    /// that GC had just freed, while their room in the group's new main
    /// segment went unused: with the reserve low GC stayed due, and steps
    /// that freed almost nothing ran back to back whenever writers slowed
    /// down (in the update experiment with a 30 µs pause per write, the
    /// first phase's GC wrote 6.5 GB for 305 MB of updates).
    fn refresh_cold_units(&self) {
        let cold = self.cold.space();
        let span = cold.live_bytes + cold.garbage_bytes;
        let mut st = self.state.lock();
        st.table.cold_units = span.div_ceil(st.table.geo.log_size.max(1));
        st.table.count_main_slack();
    }
}

/// Adopts the output of an uncommitted GC into its groups: after the old
/// segments when they are still listed, so the group reads `old ++ new ++
/// later`. Already-adopted or committed GCs are left alone.
fn adopt(table: &mut Table, intents: &[GroupIntent]) {
    for gi in intents {
        if gi.group >= table.geo.groups
            || gi.old.is_empty()
            || gi.new.iter().any(|(id, _)| table.segs.contains_key(id))
        {
            continue;
        }
        let list = &table.groups[gi.group as usize].segs;
        if list.len() < gi.old.len() || list[..gi.old.len()] != gi.old[..] {
            continue;
        }
        let at = gi.old.len();
        let ids: Vec<u64> = gi.new.iter().map(|(id, _)| *id).collect();
        table.groups[gi.group as usize]
            .segs
            .splice(at..at, ids.iter().copied());
        for (id, s) in &gi.new {
            table.used_units += s.units as u64;
            table.segs.insert(*id, s.clone());
            table.next_seg = table.next_seg.max(id + 1);
        }
    }
}

/// Applies the records of one write-journal entry: puts each record in
/// its segment file unless it is already there.
fn replay_records(
    table: &mut Table,
    files: &SegFiles,
    jpath: &Path,
    joff: u64,
    w: &journal::WriteEntry<'_>,
) -> Result<()> {
    for (p, bytes) in &w.records {
        let Some(seg) = table.segs.get(&p.seg) else {
            // Collected by GC since.
            continue;
        };
        let group = seg.group;
        let end = p.off + p.len as u64;
        let fl = files.file_len(p.seg)?;
        if fl < p.off {
            return Err(Error::corruption(
                jpath,
                joff,
                format!(
                    "write journal places a record at offset {} of segment {} but the segment ends at {fl}",
                    p.off, p.seg
                ),
            ));
        }
        if fl < end {
            if fl > p.off {
                files.truncate(p.seg, p.off)?;
            }
            files.append(p.seg, p.off, bytes, IoCategory::ValueStore)?;
        } else {
            // Present, but maybe only in the OS (a process crash): the
            // checkpoint that retires this journal syncs it.
            files.mark_dirty(p.seg);
        }
        let s = table.segs.get_mut(&p.seg).expect("checked above");
        if end > s.len {
            s.len = end;
            table.groups[group as usize].write_volume += p.len as u64;
        }
    }
    Ok(())
}

/// Applies the copies of one copy entry: puts each copy in its segment
/// file unless it is already there, reading it again from its source.
fn replay_copies(
    table: &mut Table,
    files: &SegFiles,
    jpath: &Path,
    joff: u64,
    c: &journal::CopyEntry,
) -> Result<()> {
    for (p, (src, src_off)) in &c.copies {
        if !table.segs.contains_key(&p.seg) {
            // Collected by GC since.
            continue;
        }
        let end = p.off + p.len as u64;
        let fl = files.file_len(p.seg)?;
        if fl < p.off {
            return Err(Error::corruption(
                jpath,
                joff,
                format!(
                    "write journal places a copy at offset {} of segment {} but the segment ends at {fl}",
                    p.off, p.seg
                ),
            ));
        }
        if fl < end {
            // The copy's source stays until the copy is synced.
            let mut buf = vec![0u8; p.len as usize];
            let read = if table.segs.contains_key(src) {
                files.read_exact(*src, *src_off, &mut buf, IoCategory::Gc)
            } else {
                Err(Error::corruption(jpath, joff, "source segment is gone"))
            };
            match (read, record::decode(&buf)) {
                (Ok(()), Ok(r)) if r.len == buf.len() => {}
                _ => {
                    return Err(Error::corruption(
                        jpath,
                        joff,
                        format!(
                            "write journal copies {} bytes at {src_off} of segment {src} that are not a record",
                            p.len
                        ),
                    ))
                }
            }
            if fl > p.off {
                files.truncate(p.seg, p.off)?;
            }
            files.append(p.seg, p.off, &buf, IoCategory::Gc)?;
        } else {
            files.mark_dirty(p.seg);
        }
        if let Some(s) = table.segs.get_mut(&p.seg) {
            s.len = s.len.max(end);
        }
    }
    Ok(())
}

impl HashKvStore {
    fn check_poisoned(st: &State) -> Result<()> {
        match &st.poisoned {
            Some(p) => Err(Error::Poisoned(p.clone())),
            None => Ok(()),
        }
    }

    /// Journal length at which it is checkpointed and recycled: see
    /// `State::journal_limit` (the journal file is preallocated to it).
    fn journal_limit(opts: &HashKvOptions, t: &Table) -> u64 {
        let held: u64 = t
            .groups
            .iter()
            .flat_map(|g| g.segs.iter())
            .map(|id| t.segs.get(id).map_or(0, |s| s.len))
            .sum();
        if opts.journal_values {
            opts.journal_size.min((held / 32).max(1 << 20))
        } else {
            // Metadata only: the bytes appended since the checkpoint bound
            // what open scans, not the journal's size.
            opts.journal_size.min((held / 8).max(4 << 20))
        }
    }

    /// Bytes a new journal file is preallocated to: its recycling length
    /// when it carries values; 64 KiB when it records metadata only (a few
    /// bytes per allocated segment), beyond which it simply grows.
    fn journal_prealloc(opts: &HashKvOptions, limit: u64) -> u64 {
        if opts.journal_values {
            limit
        } else {
            limit.min(64 << 10)
        }
    }

    /// Free log segments below which GC is pressing (§3.3 trigger).
    pub(crate) fn low_watermark(t: &Table) -> u64 {
        (t.geo.reserved_units / 4).max(2).min(t.geo.reserved_units)
    }
}

impl StoreCore {
    /// Whether GC may take the record of `key` with sequence number `seq`
    /// in segment `seg`, the latest of the key in its sealed group, for
    /// the version the index holds without looking the key up (see
    /// [`gc`], step 4): the segment was allocated since the index
    /// recovered, and no deletion or inline write noted in the key's
    /// bucket is newer than the record. The caller still rules out
    /// records of the key placed since the seal.
    fn judged_from_group(&self, key: &[u8], seq: SeqNum, seg: u64) -> bool {
        seg >= self.trusted_from.load(Ordering::Acquire)
            && self.departed[departed_bucket(key)].load(Ordering::Relaxed) < seq
    }

    fn path(&self, id: u64) -> PathBuf {
        self.files.path(id)
    }

    /// Seals the write cache: its batches move to `flushing`, where reads
    /// still find them, for the worker or [`Self::drain_flushing`] to
    /// write. Returns false when the cache was empty. State locked.
    fn seal_cache(&self, st: &mut State) -> bool {
        if st.cache.is_empty() {
            return false;
        }
        let parts = st.cache.take_all();
        let bytes = parts.iter().map(|(_, p)| p.buf.len()).sum();
        self.flushing.lock().push_back((Arc::new(parts), bytes));
        self.flushing_len.fetch_add(bytes, Ordering::AcqRel);
        true
    }

    /// Bytes sealed and not yet in their files.
    fn flushing_bytes(&self) -> usize {
        self.flushing_len.load(Ordering::Acquire)
    }

    /// Writes every sealed batch to its segments, oldest first: one
    /// sequential write per segment (§3.8 batch writes). Takes the flush
    /// lock; the state lock may be held (never taken here).
    fn drain_flushing(&self) -> Result<()> {
        let _g = self.flush_lock.lock();
        loop {
            let Some((batch, _)) = self.flushing.lock().front().cloned() else {
                return Ok(());
            };
            for (seg, p) in batch.iter() {
                self.files
                    .append(*seg, p.start, &p.buf, IoCategory::ValueStore)?;
            }
            // Popped only once written: a read that misses the cache finds
            // the records here or in the file.
            if let Some((_, n)) = self.flushing.lock().pop_front() {
                self.flushing_len.fetch_sub(n, Ordering::AcqRel);
            }
            self.counters.cache_flushes.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Hands every cached record to its file before returning (GC, verify,
    /// `flush`, close). Called with the state locked; a failure poisons.
    fn flush_cache(&self, st: &mut State) -> Result<()> {
        self.seal_cache(st);
        if let Err(e) = self.drain_flushing() {
            st.poisoned = Some(e.to_string());
            return Err(e);
        }
        Ok(())
    }

    /// The record `ptr` names while it is still in memory (the cache, or a
    /// sealed batch not yet written); its value bytes. State locked.
    fn cached(&self, st: &State, key: &[u8], ptr: &ValuePointer) -> Result<Option<Vec<u8>>> {
        let len = ptr.length as usize;
        let found = match st.cache.get(ptr.file_id, ptr.offset, len) {
            Some(b) => Some(b.to_vec()),
            // Nothing sealed and unwritten (the count rises under the
            // state lock, held here): the queue's lock is not taken.
            None if self.flushing_bytes() == 0 => None,
            None => self.flushing.lock().iter().rev().find_map(|(batch, _)| {
                batch.iter().find_map(|(seg, p)| {
                    let rel = ptr.offset.checked_sub(p.start)? as usize;
                    (*seg == ptr.file_id)
                        .then(|| p.buf.get(rel..rel.checked_add(len)?))
                        .flatten()
                        .map(<[u8]>::to_vec)
                })
            }),
        };
        match found {
            Some(b) => {
                let range = check_record(|| self.path(ptr.file_id), ptr, key, &b)?;
                Ok(Some(b[range].to_vec()))
            }
            None => Ok(None),
        }
    }

    /// Starts a journal checkpoint (§3.7): the cache is sealed, appends go
    /// to the next journal from now on, and the worker is handed the table
    /// naming that journal, to write once the segments holding the old
    /// journal's records are synced; then it removes the old journal. Until
    /// then the live table keeps naming the old journal (a GC persisting it
    /// meanwhile makes open replay both), and `sync` syncs both journals.
    /// The next journal is the worker's spare when there is one; otherwise
    /// it is created here. State locked; no checkpoint may be in flight.
    fn switch_journal(&self, st: &mut State) -> Result<()> {
        let fs = self.files.fs.as_ref();
        let dir = &self.files.dir;
        let num = st.journal_num + 1;
        let p = journal_path(dir, num);
        let f = match self.spare.lock().take() {
            Some((n, f)) if n == num => f,
            _ => {
                let limit = HashKvStore::journal_limit(&self.opts, &st.table);
                let len = HashKvStore::journal_prealloc(&self.opts, limit);
                let f = create_preallocated(fs, &p, len).ctx(&p)?;
                fs.sync_dir(dir).ctx(dir)?;
                f
            }
        };
        self.seal_cache(st);
        st.table.epoch += 1;
        let live = st.table.journal_pos;
        st.table.journal_pos = (num, 0);
        let table = self.encode(&st.table);
        st.table.journal_pos = live;
        let table = table?;
        {
            let mut j = self.journal.lock();
            let old = j.replace(RecordWriter::new(
                f,
                p,
                self.files.stats.clone(),
                IoCategory::ValueStore,
            ));
            *self.retiring.lock() = old;
        }
        let old = st.journal_num;
        st.journal_len = 0;
        st.appended = 0;
        st.journal_num = num;
        st.journal_limit = HashKvStore::journal_limit(&self.opts, &st.table);
        st.checkpointing = true;
        self.work.lock().checkpoint = Some(Checkpoint {
            old,
            new: num,
            table,
        });
        self.work_cv.notify_all();
        Ok(())
    }

    /// Asks the worker to write the sealed batches.
    fn request_flush(&self) {
        self.work.lock().flush = true;
        self.work_cv.notify_all();
    }

    /// The background worker: writes sealed batches and finishes
    /// checkpoints until the store is dropped (pending work is done first).
    /// A failure poisons the store: appends, syncs and GC then fail.
    fn work_loop(&self) {
        loop {
            let checkpoint = {
                let mut w = self.work.lock();
                w.busy = false;
                while w.paused || (!w.flush && w.checkpoint.is_none()) {
                    if w.shutdown {
                        self.work_cv.notify_all();
                        return;
                    }
                    self.work_cv.notify_all();
                    self.work_cv.wait(&mut w);
                }
                w.busy = true;
                w.flush = false;
                w.checkpoint.take()
            };
            let mut r = self.drain_flushing();
            if let (Ok(()), Some(c)) = (&r, checkpoint) {
                r = self.finish_checkpoint(c);
            }
            if let Err(e) = r {
                let mut st = self.state.lock();
                if st.poisoned.is_none() {
                    st.poisoned = Some(e.to_string());
                }
            }
        }
    }

    /// The I/O of a checkpoint [`Self::switch_journal`] began, under no
    /// state lock: sync the written segments (journal of values), write
    /// the table naming the new journal, drop the old journal, prepare the
    /// spare.
    fn finish_checkpoint(&self, c: Checkpoint) -> Result<()> {
        let fs = self.files.fs.as_ref();
        let dir = &self.files.dir;
        // A journal of values may go only once the segments hold its
        // records durably. A journal of allocations has nothing the table
        // does not hold: segments that lose unsynced bytes to a power
        // loss are cut to their intact records on open, as after any
        // crash, and `sync` still syncs them.
        if self.opts.journal_values {
            self.files.sync_dirty()?;
        }
        write_table_file(fs, dir, &self.files.stats, &c.table)?;
        // The new table is durable: the old journal is needed no more.
        self.retiring.lock().take();
        let old = journal_path(dir, c.old);
        match fs.remove(&old) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(&old, e)),
        }
        // The spare, for the next switch. Best effort: without one the
        // switch creates the journal itself.
        let next = c.new + 1;
        let p = journal_path(dir, next);
        let limit = {
            let st = self.state.lock();
            HashKvStore::journal_limit(&self.opts, &st.table)
        };
        let len = HashKvStore::journal_prealloc(&self.opts, limit);
        match create_preallocated(fs, &p, len).and_then(|f| fs.sync_dir(dir).map(|_| f)) {
            Ok(f) => *self.spare.lock() = Some((next, f)),
            Err(_) => {
                let _ = fs.remove(&p);
            }
        }
        let mut st = self.state.lock();
        if st.table.journal_pos < (c.new, 0) {
            st.table.journal_pos = (c.new, 0);
        }
        st.checkpointing = false;
        drop(st);
        self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        self.work_cv.notify_all();
        Ok(())
    }

    /// Waits until no checkpoint is in flight (or the store is poisoned,
    /// when the one in flight will never end). Looks again at least every
    /// millisecond: the worker's notification needs no lock order with the
    /// state lock then.
    fn wait_checkpoint(&self) {
        loop {
            {
                let st = self.state.lock();
                if !st.checkpointing || st.poisoned.is_some() {
                    return;
                }
            }
            let mut w = self.work.lock();
            if w.shutdown {
                return;
            }
            self.work_cv
                .wait_for(&mut w, std::time::Duration::from_millis(1));
        }
    }

    /// Waits until the worker has nothing left to do.
    pub(crate) fn wait_worker_idle(&self) {
        let mut w = self.work.lock();
        while w.busy || w.flush || w.checkpoint.is_some() {
            if w.shutdown {
                return;
            }
            self.work_cv.wait(&mut w);
        }
    }

    /// Makes placed records survive a process crash; `sources` says where
    /// each record is a GC copy from (journaled as metadata only). Called
    /// with the state locked; with a journal of metadata the lock is let go
    /// while the records are written (the segment handles' lock, taken
    /// first, keeps each file's appends in placement order), so the state
    /// may have changed when this returns.
    fn write_placed(
        &self,
        st: &mut MutexGuard<'_, State>,
        allocs: &[Alloc],
        places: &[Place],
        data: &[u8],
        sources: Option<&[(u64, u64)]>,
    ) -> Result<()> {
        let cat = match sources {
            Some(_) => IoCategory::Gc,
            None => IoCategory::ValueStore,
        };
        let mut journal = self.journal.lock();
        match journal.as_mut() {
            Some(j) if self.opts.journal_values => {
                let entry = match sources {
                    Some(src) => journal::encode_copy(allocs, places, src),
                    None => journal::encode_write(allocs, places, data),
                };
                j.add_record(&entry)?;
                j.flush()?;
                st.journal_len = j.len();
                drop(journal);
                let mut at = 0usize;
                for p in places {
                    let n = p.len as usize;
                    st.cache.add(p.seg, p.off, &data[at..at + n]);
                    at += n;
                }
                // The cache's batches and the checkpoint's fsyncs go to the
                // worker: neither readers nor this writer wait for them.
                if st.cache.is_full() && self.seal_cache(st) {
                    self.request_flush();
                }
            }
            Some(j) => {
                // Metadata only (§3.7): the allocations, before any record
                // lands in the segments they name; the records themselves
                // are found again by scanning the segments' tails on open.
                if !allocs.is_empty() {
                    j.add_record(&journal::encode_write(allocs, &[], &[]))?;
                    j.flush()?;
                    st.journal_len = j.len();
                }
                drop(journal);
                // The writes run with the state lock let go, so that reads
                // (which take it to check a pointer) do not wait for them;
                // the handles' lock, taken first, keeps each file's
                // appends in the order they were placed.
                let mut appends = self.files.appends();
                MutexGuard::unlocked(st, move || {
                    self.append_direct(&mut appends, places, data, cat)
                })?;
                // Bytes since the checkpoint bound the scan on open.
                st.appended += data.len() as u64;
            }
            None => {
                drop(journal);
                if !allocs.is_empty() {
                    // Without a journal the table must know a segment
                    // before a pointer into it is acknowledged.
                    st.table.epoch += 1;
                    let encoded = self.encode(&st.table)?;
                    write_table_file(
                        self.files.fs.as_ref(),
                        &self.files.dir,
                        &self.files.stats,
                        &encoded,
                    )?;
                    self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
                }
                return self.append_direct(&mut self.files.appends(), places, data, cat);
            }
        }
        if st.checkpoint_due() >= st.journal_limit && !st.checkpointing {
            self.switch_journal(st)?;
        }
        Ok(())
    }

    /// With the state lock held (`_st`): waits until every record placed
    /// so far is in its file. Records are placed under the state lock and,
    /// with a journal of metadata, written once it is let go, so a segment
    /// still taking appends may count records its file does not hold yet
    /// (a record a published pointer names is always written). Each writer
    /// takes the segment handles' lock before it lets the state lock go;
    /// taking that lock after it is therefore a barrier. For readers of a
    /// whole segment that may still take appends: GC's look at the
    /// records placed since a seal, `verify`.
    pub(crate) fn wait_placed_written(&self, _st: &State) {
        drop(self.files.appends());
    }

    /// Writes placed records straight to their segment files, in `places`
    /// order (`data` holds their bytes in that order): one write per run
    /// of records that follow each other in one segment. The handles'
    /// lock held, taken while the state lock was.
    fn append_direct(
        &self,
        appends: &mut segment::Appends<'_>,
        places: &[Place],
        data: &[u8],
        cat: IoCategory,
    ) -> Result<()> {
        let mut at = 0usize;
        let mut i = 0;
        while i < places.len() {
            let (seg, off) = (places[i].seg, places[i].off);
            let mut end = off;
            let mut n = 0usize;
            while i < places.len() && places[i].seg == seg && places[i].off == end {
                end += places[i].len as u64;
                n += places[i].len as usize;
                i += 1;
            }
            appends.append(seg, off, &data[at..at + n], cat)?;
            at += n;
        }
        Ok(())
    }

    /// Encodes the table; `Corruption` when it is inconsistent.
    fn encode(&self, t: &Table) -> Result<Vec<u8>> {
        t.encode().map_err(|id| self.unknown_segment(id))
    }

    /// The error for a segment a group lists but the table does not know.
    fn unknown_segment(&self, id: u64) -> Error {
        Error::corruption(
            self.path(id),
            0,
            format!("hashkv segment table lists segment {id} but has no entry for it"),
        )
    }

    /// Places records in `group` for GC — copies of the records at
    /// `sources` (`(segment, offset)`), or new records (tags) when
    /// `sources` is `None` — after everything placed there so far, using
    /// the reserved space's GC headroom when a log segment is needed.
    /// Returns their pointers; `None` when the reserved space has no room
    /// (nothing is placed then).
    ///
    /// # Errors
    /// `Io` (the store is then poisoned); `Corruption` for an inconsistent
    /// table; `Poisoned`.
    pub(crate) fn place_for_gc(
        &self,
        group: u32,
        recs: &[&[u8]],
        sources: Option<&[(u64, u64)]>,
    ) -> Result<Option<Vec<ValuePointer>>> {
        let mut st = self.state.lock();
        HashKvStore::check_poisoned(&st)?;
        let mut allocs = Vec::new();
        let mut undo = Vec::new();
        let mut places = Vec::with_capacity(recs.len());
        let mut data = Vec::new();
        for r in recs {
            let len = r.len() as u64;
            match st.table.place(group, len, 0, &mut allocs, &mut undo) {
                Ok((seg, off)) => {
                    places.push(Place {
                        seg,
                        off,
                        len: r.len() as u32,
                    });
                    data.extend_from_slice(r);
                }
                Err(e) => {
                    st.table.rollback(undo);
                    return match e {
                        PlaceError::Full(_) => Ok(None),
                        PlaceError::Unknown(id) => Err(self.unknown_segment(id)),
                    };
                }
            }
        }
        if let Err(e) = self.write_placed(&mut st, &allocs, &places, &data, sources) {
            st.poisoned = Some(e.to_string());
            return Err(e);
        }
        st.gc_copies += data.len() as u64;
        Ok(Some(
            places
                .iter()
                .map(|p| ValuePointer {
                    file_id: p.seg,
                    offset: p.off,
                    length: p.len,
                    aux: 0,
                })
                .collect(),
        ))
    }

    /// Hands the cached records to their files and makes the segments GC
    /// placed records in durable (`ids`), with their directory entries.
    pub(crate) fn sync_segments(&self, ids: &[u64]) -> Result<()> {
        {
            let mut st = self.state.lock();
            HashKvStore::check_poisoned(&st)?;
            self.flush_cache(&mut st)?;
        }
        let r = ids
            .iter()
            .try_for_each(|&id| self.files.sync(id))
            .and_then(|_| self.files.sync_dir());
        if let Err(e) = &r {
            self.state.lock().poisoned = Some(e.to_string());
        }
        r
    }

    /// Persists the table in the manifest (and records the cold log's
    /// state first when given).
    fn persist_table(&self, relocator: &dyn IndexRelocator, cold: Option<&[u8]>) -> Result<()> {
        let bytes = {
            let mut st = self.state.lock();
            if let Some(c) = cold {
                st.table.cold_state = Some(c.to_vec());
            }
            st.table.epoch += 1;
            self.encode(&st.table)?
        };
        relocator.persist_state(&bytes)
    }

    /// Frees retired segments no live reader can reach; returns bytes freed.
    fn free_pending(&self, oldest: u64) -> Result<u64> {
        let ready: Vec<PendingFree> = {
            let mut st = self.state.lock();
            let (ready, keep): (Vec<_>, Vec<_>) =
                st.pending.drain(..).partition(|p| p.seq <= oldest);
            st.pending = keep;
            ready
        };
        if ready.is_empty() {
            return Ok(0);
        }
        let mut freed = 0;
        let mut failed = None;
        for p in ready {
            let mut left = Vec::new();
            for id in p.segs {
                if failed.is_some() {
                    left.push(id);
                    continue;
                }
                if let Err(e) = self.files.remove(id) {
                    // Kept for the next step (removing is idempotent):
                    // the space is not lost until a reopen.
                    failed = Some(e);
                    left.push(id);
                    continue;
                }
                let mut st = self.state.lock();
                if let Some(s) = st.table.segs.remove(&id) {
                    st.table.used_units -= s.units as u64;
                    freed += s.len;
                }
                st.dead.retain(|&(seg, _)| seg != id);
            }
            if !left.is_empty() {
                self.state.lock().pending.push(PendingFree {
                    seq: p.seq,
                    segs: left,
                });
            }
        }
        self.counters
            .gc_bytes_freed
            .fetch_add(freed, Ordering::Relaxed);
        if let Some(e) = failed {
            return Err(e);
        }
        self.files
            .fs
            .sync_dir(&self.files.dir)
            .ctx(&self.files.dir)?;
        Ok(freed)
    }

    /// The segment table's geometry.
    pub fn geometry(&self) -> Geometry {
        self.state.lock().table.geo
    }

    /// Free log segments in the reserved space.
    pub fn free_log_segments(&self) -> u64 {
        self.state.lock().table.free_units()
    }

    /// The group `key` hashes to.
    pub fn group_of(&self, key: &[u8]) -> u32 {
        self.state.lock().table.geo.group_of(key)
    }

    /// Flushes the write cache to the segment files.
    ///
    /// # Errors
    /// `Io`; `Poisoned` after an earlier write failure.
    pub fn flush(&self) -> Result<()> {
        let mut st = self.state.lock();
        HashKvStore::check_poisoned(&st)?;
        self.flush_cache(&mut st)
    }

    fn read_segment(&self, key: &[u8], ptr: &ValuePointer) -> Result<Option<Vec<u8>>> {
        {
            let st = self.state.lock();
            match st.table.segs.get(&ptr.file_id) {
                Some(s) if ptr.end() <= s.len => {}
                _ => return Ok(None),
            }
            if let Some(v) = self.cached(&st, key, ptr)? {
                return Ok(Some(v));
            }
        }
        let mut buf = vec![0u8; ptr.length as usize];
        let res = self.latency.time(|| {
            self.files
                .read_exact(ptr.file_id, ptr.offset, &mut buf, IoCategory::ValueStore)
        });
        match res {
            Ok(()) => {}
            // Freed by GC between the check and the read.
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Ok(None)
            }
            Err(e) => return Err(e),
        }
        let range = check_record(|| self.path(ptr.file_id), ptr, key, &buf)?;
        buf.truncate(range.end);
        buf.drain(..range.start);
        Ok(Some(buf))
    }
}

impl ValueStore for HashKvStore {
    fn name(&self) -> &'static str {
        "hashkv"
    }

    fn separates(&self, len: usize) -> bool {
        len >= self.opts.value_threshold
    }

    fn append(&self, records: &[ValueRecord<'_>]) -> Result<Vec<ValuePointer>> {
        if records.is_empty() {
            return Ok(Vec::new());
        }
        let mut st = self.state.lock();
        HashKvStore::check_poisoned(&st)?;
        let mut allocs = Vec::new();
        let mut undo = Vec::new();
        let mut places = Vec::with_capacity(records.len());
        let mut groups = Vec::with_capacity(records.len());
        let mut data = Vec::new();
        for r in records {
            let len = record::record_len(r.key, r.value);
            let Ok(len32) = u32::try_from(len) else {
                st.table.rollback(undo);
                return Err(Error::InvalidArgument(format!(
                    "value of {} bytes is too large for the hashkv layout",
                    r.value.len()
                )));
            };
            let g = st.table.geo.group_of(r.key);
            // User writes leave GC its headroom of log segments: a GC whose
            // victim's live data passes a main segment needs some for the
            // copies before it frees anything.
            let headroom = st.table.geo.gc_headroom();
            match st
                .table
                .place(g, len as u64, headroom, &mut allocs, &mut undo)
            {
                Ok((seg, off)) => {
                    places.push(Place {
                        seg,
                        off,
                        len: len32,
                    });
                    groups.push(g);
                    record::encode(&mut data, Kind::Value, r.key, r.seq, r.value);
                }
                Err(PlaceError::Full(msg)) => {
                    st.table.rollback(undo);
                    self.counters.full_errors.fetch_add(1, Ordering::Relaxed);
                    return Err(Error::ValueStoreFull(msg));
                }
                Err(PlaceError::Unknown(id)) => {
                    st.table.rollback(undo);
                    return Err(self.unknown_segment(id));
                }
            }
        }
        // Counted before the write lets the state lock go: a GC sealing one
        // of these groups meanwhile takes the volume with the records.
        for (p, g) in places.iter().zip(groups) {
            st.table.groups[g as usize].write_volume += p.len as u64;
        }
        if let Err(e) = self.write_placed(&mut st, &allocs, &places, &data, None) {
            st.poisoned = Some(e.to_string());
            return Err(e);
        }
        let journal_behind = st.checkpointing && st.checkpoint_due() >= 2 * st.journal_limit;
        drop(st);
        // The journal passed twice its limit while the last checkpoint is
        // still in flight: wait for it (it cannot be waited for under the
        // state lock), so that the journal — disk space, and replay time
        // after a crash — stays bounded however far the worker falls
        // behind.
        if journal_behind {
            self.wait_checkpoint();
        }
        // The worker fell behind by two caches' worth: this writer helps,
        // so that sealed batches never pile up in memory.
        if self.flushing_bytes() >= 2 * self.opts.write_cache_size.max(1) {
            if let Err(e) = self.drain_flushing() {
                self.state.lock().poisoned = Some(e.to_string());
                return Err(e);
            }
        }
        Ok(places
            .iter()
            .map(|p| ValuePointer {
                file_id: p.seg,
                offset: p.off,
                length: p.len,
                aux: 0,
            })
            .collect())
    }

    /// With the journal, the fsyncs run under no lock: every record an
    /// append acknowledged was handed to the OS under the journal's lock
    /// (and, journal carrying metadata only, its record written and its
    /// segment counted as written under the segment handles' lock before
    /// the append returned), so a sync through the handles taken
    /// here covers it, and appends, reads and the table stay free meanwhile
    /// (a journal recycled in between was checkpointed first). Without it,
    /// segments are synced under the state lock.
    fn sync(&self) -> Result<()> {
        let mut st = self.state.lock();
        HashKvStore::check_poisoned(&st)?;
        let r = if self.opts.journal {
            drop(st);
            let r = (|| {
                // Segments first: the journal's allocations name them.
                if !self.opts.journal_values {
                    self.files.sync_dirty()?;
                }
                // The journal a checkpoint in flight retires holds records
                // (or allocations) that may not be in synced segments or
                // a durable table yet: synced too.
                let mut j = self.journal.lock();
                let mut r = self.retiring.lock();
                let mut pending = Vec::with_capacity(2);
                for w in [j.as_mut(), r.as_mut()].into_iter().flatten() {
                    match w.start_sync()? {
                        Some(p) => pending.push(p),
                        None => w.sync()?,
                    }
                }
                drop(r);
                drop(j);
                pending.into_iter().try_for_each(|p| p.sync())
            })();
            st = self.state.lock();
            r
        } else {
            self.files.sync_dirty()
        };
        if let Err(e) = &r {
            st.poisoned = Some(e.to_string());
        }
        r
    }

    fn read(&self, key: &[u8], ptr: &ValuePointer) -> Result<Option<Vec<u8>>> {
        if is_cold(ptr) {
            return self.cold.read(key, ptr);
        }
        self.read_segment(key, ptr)
    }

    /// Read-ahead hints pay off only when reads reach the device.
    fn batch_reads_pay(&self) -> bool {
        !self.latency.from_memory()
    }

    fn read_many(&self, reqs: &[(Vec<u8>, ValuePointer)]) -> Result<Vec<Option<Vec<u8>>>> {
        let mut out: Vec<Option<Vec<u8>>> = vec![None; reqs.len()];
        let mut from_files = Vec::new();
        {
            let st = self.state.lock();
            for (i, (k, p)) in reqs.iter().enumerate() {
                if is_cold(p) {
                    continue;
                }
                match st.table.segs.get(&p.file_id) {
                    Some(s) if p.end() <= s.len => {}
                    _ => continue,
                }
                match self.cached(&st, k, p)? {
                    Some(v) => out[i] = Some(v),
                    None => from_files.push(i),
                }
            }
        }
        // §3.6: read-ahead for every value of the scan, then the reads —
        // unless reads are served from memory, where the hints only cost
        // system calls.
        if self.batch_reads_pay() {
            for &i in &from_files {
                let p = &reqs[i].1;
                if let Ok(h) = self.files.reader(p.file_id) {
                    h.advise(p.offset, p.length as u64, Advice::WillNeed);
                }
            }
        }
        for &i in &from_files {
            let (k, p) = &reqs[i];
            out[i] = self.read_segment(k, p)?;
        }
        for (i, (k, p)) in reqs.iter().enumerate() {
            if is_cold(p) {
                out[i] = self.cold.read(k, p)?;
            }
        }
        Ok(out)
    }

    fn contains(&self, ptr: &ValuePointer) -> bool {
        if is_cold(ptr) {
            return self.cold.contains(ptr);
        }
        let st = self.state.lock();
        match st.table.segs.get(&ptr.file_id) {
            Some(s) => ptr.end() <= s.len,
            // Collected by GC: a later, durable relocation supersedes it.
            None => ptr.file_id < st.table.next_seg,
        }
    }

    fn tracks_unseparated(&self) -> bool {
        true
    }

    fn note_unseparated(&self, key: &[u8], seq: SeqNum) {
        self.departed[departed_bucket(key)].fetch_max(seq, Ordering::Relaxed);
    }

    fn recovered(&self) {
        let next = self.state.lock().table.next_seg;
        self.trusted_from.store(next, Ordering::Release);
    }

    fn note_garbage(&self, ptr: &ValuePointer) {
        if is_cold(ptr) {
            self.cold.note_garbage(ptr);
            return;
        }
        let mut st = self.state.lock();
        if let Some(s) = st.table.segs.get(&ptr.file_id) {
            let g = s.group as usize;
            let grp = &mut st.table.groups[g];
            if grp.segs.contains(&ptr.file_id) {
                grp.noted_garbage += ptr.length as u64;
                self.counters
                    .garbage_found
                    .fetch_add(ptr.length as u64, Ordering::Relaxed);
            }
        }
    }

    fn verify(&self) -> (u64, Vec<Error>) {
        let segs: Vec<(u64, u64)> = {
            let mut st = self.state.lock();
            if let Err(e) = self.flush_cache(&mut st) {
                return (0, vec![e]);
            }
            let mut v = Vec::new();
            for gi in 0..st.table.geo.groups {
                match st.table.group_lens(gi) {
                    Ok(l) => v.extend(l),
                    Err(id) => return (0, vec![self.unknown_segment(id)]),
                }
            }
            v.sort_unstable();
            self.wait_placed_written(&st);
            v
        };
        let mut records = 0u64;
        let mut faults = Vec::new();
        for (id, len) in segs {
            let path = self.path(id);
            let mut buf = vec![0u8; len as usize];
            if let Err(e) = self
                .files
                .read_exact(id, 0, &mut buf, IoCategory::ValueStore)
            {
                // A GC running meanwhile may have collected the segment:
                // its group no longer lists it (the file goes before the
                // table entry, so the entry alone does not say).
                let st = self.state.lock();
                let listed = st
                    .table
                    .segs
                    .get(&id)
                    .is_some_and(|s| st.table.groups[s.group as usize].segs.contains(&id));
                if listed {
                    faults.push(e);
                }
                continue;
            }
            let mut pos = 0usize;
            while pos < buf.len() {
                match record::decode(&buf[pos..]) {
                    Ok(r) => {
                        pos += r.len;
                        records += 1;
                    }
                    Err(e) => {
                        faults.push(Error::corruption(
                            &path,
                            pos as u64,
                            format!("hashkv record damaged ({e:?})"),
                        ));
                        break;
                    }
                }
            }
        }
        let (n, f) = self.cold.verify();
        records += n;
        faults.extend(f);
        (records, faults)
    }

    fn figures(&self) -> Vec<(&'static str, u64)> {
        let (
            groups,
            max_wv,
            sum_wv,
            free,
            reserved,
            used_groups,
            cache,
            jlen,
            pressure,
            units,
            counted,
            room,
        ) = {
            let st = self.state.lock();
            let t = &st.table;
            let max_wv = t.groups.iter().map(|g| g.write_volume).max().unwrap_or(0);
            let sum_wv: u64 = t.groups.iter().map(|g| g.write_volume).sum();
            let used = t.groups.iter().filter(|g| !g.segs.is_empty()).count() as u64;
            (
                t.geo.groups as u64,
                max_wv,
                sum_wv,
                t.free_units(),
                t.geo.reserved_units,
                used,
                st.cache.bytes() as u64,
                st.journal_len,
                (t.free_units() < HashKvStore::low_watermark(t)) as u64,
                t.used_units,
                t.main_slack_units,
                t.main_room_left_units(),
            )
        };
        let cold = self.cold.space();
        let c = &self.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        vec![
            ("groups", groups),
            ("groups_in_use", used_groups),
            ("group_write_volume_max", max_wv),
            ("group_write_volume_avg", sum_wv / groups.max(1)),
            ("log_segments_reserved", reserved),
            ("log_segments_in_groups", units),
            ("log_segments_free", free),
            // The main segments' free room as counted at the last GC step,
            // and what is left of it now (`Table::main_room_left_units`).
            // A user append into room the cold log took is refused once it
            // would leave less than GC's headroom free, as a log segment is.
            ("main_room_units", counted),
            ("main_room_left_units", room),
            ("gc_pressure", pressure),
            ("gc_runs", l(&c.gc_runs)),
            ("gc_groups_collected", l(&c.gc_groups)),
            ("gc_bytes_read", l(&c.gc_bytes_read)),
            ("gc_bytes_rewritten", l(&c.gc_bytes_rewritten)),
            ("gc_bytes_freed", l(&c.gc_bytes_freed)),
            ("gc_cold_bytes_moved", l(&c.gc_cold_bytes)),
            ("gc_cold_bytes_kept", l(&c.gc_cold_kept)),
            ("write_delays", l(&c.write_delays)),
            ("gc_tags_written", l(&c.gc_tags)),
            ("gc_index_lookups", l(&c.gc_lookups)),
            ("gc_moves_judged", l(&c.gc_judged)),
            ("gc_stalled_full", l(&c.gc_stalls)),
            ("cold_log_bytes", cold.live_bytes + cold.garbage_bytes),
            ("cold_log_garbage_bytes", cold.garbage_bytes),
            ("write_cache_bytes", cache),
            ("write_cache_flushes", l(&c.cache_flushes)),
            ("write_journal_bytes", jlen),
            ("table_checkpoints", l(&c.checkpoints)),
            ("store_full_errors", l(&c.full_errors)),
        ]
    }

    fn garbage_found(&self) -> u64 {
        self.counters.garbage_found.load(Ordering::Relaxed) + self.cold.garbage_found()
    }

    /// Three sections: noted garbage per segment group (by group index),
    /// the cold log's reported garbage by region, and its inferred garbage
    /// by region ([`ColdLog::hint_entries`]). A table of two sections
    /// (before inferred garbage was kept) restores with none inferred.
    fn garbage_table(&self) -> Option<Vec<u8>> {
        let groups: Vec<(u64, u64)> = {
            let st = self.state.lock();
            st.table
                .groups
                .iter()
                .enumerate()
                .map(|(i, g)| (i as u64, g.noted_garbage))
                .collect()
        };
        Some(super::garbage::encode(&[
            groups,
            self.cold.garbage_entries(),
            self.cold.hint_entries(),
        ]))
    }

    fn restore_garbage_table(&self, table: &[u8]) -> Result<()> {
        let t = super::garbage::decode(table)
            .ok_or_else(|| super::garbage::corrupt(&self.files.dir))?;
        if let Some(groups) = t.first() {
            let mut st = self.state.lock();
            let t = &mut st.table;
            for &(i, g) in groups {
                let Some(grp) = t.groups.get(i as usize) else {
                    continue;
                };
                let held: u64 = grp
                    .segs
                    .iter()
                    .map(|id| t.segs.get(id).map_or(0, |s| s.len))
                    .sum();
                t.groups[i as usize].noted_garbage = g.min(held);
            }
        }
        if let Some(cold) = t.get(1) {
            self.cold.restore_garbage_entries(cold);
        }
        if let Some(hints) = t.get(2) {
            self.cold.restore_hint_entries(hints);
        }
        Ok(())
    }

    /// Live bytes are the groups' segments less the garbage noted in them
    /// and the running GC step's copies (whose originals still count), plus
    /// the cold log's live bytes. Garbage adds those copies and the
    /// segments the running step retired and has not deleted yet (those a
    /// reader still holds once it ends wait for the reader and are garbage
    /// no step can free: they count in neither), so that a step moves
    /// bytes between the two figures instead of making live bytes swell
    /// while it copies and the disk look a step's worth fuller after it
    /// commits. The space target judges every write by these figures
    /// (`db/space/policy.rs`).
    fn space(&self) -> SpaceStats {
        let (total, noted, seg_bytes, jlen, copies, retired) = {
            let st = self.state.lock();
            let t = &st.table;
            let mut total = 0u64;
            let mut noted = 0u64;
            for g in &t.groups {
                noted += g.noted_garbage;
                for id in &g.segs {
                    total += t.segs.get(id).map_or(0, |s| s.len);
                }
            }
            // Segment files are append-only and dense: their length, up to
            // the file system's block, is what they occupy (retired and
            // in-flight ones included), and no per-file `stat` is needed on
            // this frequently called path. The blocks count: with the
            // default geometry's 716 groups, the last blocks of a small
            // store's segments are megabytes.
            let (mut listed, mut seg_bytes) = (0u64, 0u64);
            for s in t.segs.values() {
                listed += s.len;
                seg_bytes += s.len.next_multiple_of(FS_BLOCK);
            }
            // Every segment is a group's, or retired by GC. Those the
            // running step retired are freed when it ends; those a reader
            // still holds (`pending` after the step) are no garbage GC can
            // free, and stay out of the figure.
            let pinned: u64 = st
                .pending
                .iter()
                .flat_map(|p| &p.segs)
                .filter_map(|id| t.segs.get(id).map(|s| s.len))
                .sum();
            let retired = listed.saturating_sub(total).saturating_sub(pinned);
            let noted = noted.min(total);
            let copies = st.gc_copies.min(total - noted);
            (total, noted, seg_bytes, st.journal_len, copies, retired)
        };
        let cold = self.cold.space();
        let file_bytes = seg_bytes + cold.file_bytes + jlen;
        let live = total - noted - copies + cold.live_bytes;
        let garbage = noted + copies + retired + cold.garbage_bytes;
        SpaceStats {
            live_bytes: live,
            garbage_bytes: garbage,
            file_bytes,
        }
    }

    fn wait_idle(&self) -> Result<()> {
        self.wait_worker_idle();
        HashKvStore::check_poisoned(&self.state.lock())
    }

    /// `MAX_RESERVE_DELAY` times [`Table::pause_depth`]: from halfway
    /// between the low watermark and GC's headroom down to the headroom,
    /// where an append is refused and the writer waits for a GC step.
    /// Far from the low watermark, as the last [`ValueStore::gc_due`]
    /// found it (the engine asks after every write, under the state lock
    /// it takes anyway), no lock is taken.
    fn write_delay(&self) -> std::time::Duration {
        if !self.pacing.load(Ordering::Relaxed) {
            return std::time::Duration::ZERO;
        }
        let depth = {
            let st = self.state.lock();
            st.table.pause_depth(Self::low_watermark(&st.table))
        };
        if depth <= 0.0 {
            return std::time::Duration::ZERO;
        }
        self.counters.write_delays.fetch_add(1, Ordering::Relaxed);
        MAX_RESERVE_DELAY.mul_f64(depth)
    }

    /// Free log segments below a quarter of the reserve (HashKV §3.3: GC
    /// runs when the reserved space runs low).
    fn gc_due(&self) -> bool {
        let st = self.state.lock();
        let low = HashKvStore::low_watermark(&st.table);
        self.pacing
            .store(st.table.pause_depth(low) > 0.0, Ordering::Relaxed);
        st.table.free_units() < low
    }

    /// The reserved space held by retired log segments (main segments are
    /// not counted against the capacity's reserve).
    fn pinned_bytes(&self) -> u64 {
        let st = self.state.lock();
        let units: u64 = st
            .pending
            .iter()
            .flat_map(|p| p.segs.iter())
            .filter_map(|id| st.table.segs.get(id))
            .map(|s| s.units as u64)
            .sum();
        units * st.table.geo.log_size
    }

    fn gc_step(
        &self,
        index: &dyn IndexReader,
        relocator: &dyn IndexRelocator,
    ) -> Result<GcOutcome> {
        // The main segments' room as the step starts: writers have filled
        // some of it since the last step.
        self.refresh_cold_units();
        let r = gc::step(self, index, relocator);
        // Cold moves grew the cold log, or its own GC shrank it.
        self.refresh_cold_units();
        r
    }
}

impl Drop for HashKvStore {
    fn drop(&mut self) {
        if let Some(w) = self.worker.take() {
            self.work.lock().shutdown = true;
            self.work_cv.notify_all();
            let _ = w.join();
        }
        let mut st = self.state.lock();
        if st.poisoned.is_none() {
            let _ = self.flush_cache(&mut st);
            if let Some(j) = self.journal.lock().as_mut() {
                let _ = j.flush();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::FaultFs;

    /// 8 MiB of 256 KiB main and 64 KiB log segments; every value
    /// separated.
    fn small() -> Options {
        Options {
            value_threshold: 1,
            value_capacity: Some(8 << 20),
            hashkv_main_segment_size: 256 << 10,
            hashkv_log_segment_size: 64 << 10,
            ..Options::default()
        }
    }

    /// A store whose journal carries values, behind its write cache.
    fn open(fs: &Arc<FaultFs>) -> HashKvStore {
        open_with(
            fs,
            &Options {
                hashkv_journal: true,
                hashkv_journal_values: true,
                hashkv_write_cache_size: 64 << 10,
                hashkv_journal_size: 64 << 10,
                ..small()
            },
        )
    }

    fn open_with(fs: &Arc<FaultFs>, o: &Options) -> HashKvStore {
        let fs: Arc<dyn FileSystem> = fs.clone();
        HashKvStore::open(
            Path::new("/db"),
            fs,
            Arc::new(IoStats::default()),
            HashKvOptions::from_options(o),
            None,
        )
        .unwrap()
    }

    type Put = (Vec<u8>, ValuePointer, Vec<u8>);

    /// Appends a 1000-byte value under key `i`.
    fn put(s: &HashKvStore, i: u64) -> Put {
        let (k, v) = (
            format!("key{i:06}").into_bytes(),
            format!("{i:>1000}").into_bytes(),
        );
        let p = s
            .append(&[ValueRecord {
                key: &k,
                seq: i + 1,
                value: &v,
            }])
            .unwrap()[0];
        (k, p, v)
    }

    /// Every value reads back (key named on failure).
    fn check(s: &HashKvStore, puts: &[Put]) {
        for (k, p, v) in puts {
            let got = s.read(k, p).unwrap();
            assert!(got.as_ref() == Some(v), "{}", String::from_utf8_lossy(k));
        }
    }

    fn fresh() -> Arc<FaultFs> {
        let fs = Arc::new(FaultFs::new());
        fs.create_dir_all(Path::new("/db")).unwrap();
        fs
    }

    /// A fresh store whose worker is held.
    fn held(fs: &Arc<FaultFs>) -> HashKvStore {
        let s = open(fs);
        s.work.lock().paused = true;
        s
    }

    /// Appends values from key `from` on until `done` holds.
    fn put_until(s: &HashKvStore, from: u64, done: impl Fn(&HashKvStore) -> bool) -> Vec<Put> {
        let mut puts = Vec::new();
        while !done(s) {
            puts.push(put(s, from + puts.len() as u64));
        }
        puts
    }

    fn resume(s: &HashKvStore) {
        s.work.lock().paused = false;
        s.work_cv.notify_all();
    }

    /// With the worker held, a full cache is sealed but not written: its
    /// records are read from memory, the segment files do not have them
    /// yet, and once the worker runs they are in the files.
    #[test]
    fn sealed_batches_are_read_before_they_reach_their_files() {
        let fs = fresh();
        let s = held(&fs);
        let puts = put_until(&s, 0, |s| s.flushing_bytes() > 0);
        let missing = |s: &HashKvStore| {
            puts.iter()
                .filter(|(_, p, _)| s.files.file_len(p.file_id).unwrap() < p.end())
                .count()
        };
        assert!(missing(&s) > 0, "nothing sealed is missing from the files");
        check(&s, &puts);
        let reqs: Vec<_> = puts.iter().map(|(k, p, _)| (k.clone(), *p)).collect();
        let want: Vec<_> = puts.iter().map(|(_, _, v)| Some(v.clone())).collect();
        assert!(s.read_many(&reqs).unwrap() == want);
        resume(&s);
        s.wait_idle().unwrap();
        assert_eq!(s.flushing_bytes(), 0);
        assert_eq!(missing(&s), 0);
        check(&s, &puts);
    }

    /// A full journal is switched while the worker is held, so the
    /// checkpoint that would put its records in synced segments has not
    /// run; a `sync` then must make the retired journal durable too: after
    /// a power cut, open replays it and the new one, and every value
    /// appended before the sync reads back.
    #[test]
    fn sync_covers_the_journal_a_checkpoint_in_flight_retires() {
        let fs = fresh();
        let s = held(&fs);
        let mut puts = put_until(&s, 0, |s| s.state.lock().checkpointing);
        assert!(s.retiring.lock().is_some());
        for _ in 0..5 {
            puts.push(put(&s, puts.len() as u64));
        }
        s.sync().unwrap();
        fs.crash();
        drop(s);
        let s = open(&fs);
        check(&s, &puts);
        assert!(s.verify().1.is_empty());
    }

    /// With the worker held mid-checkpoint, an append that takes the new
    /// journal past twice its limit waits until the checkpoint ends: the
    /// journal never grows without bound behind a slow worker.
    #[test]
    fn appends_wait_for_a_checkpoint_once_the_journal_doubles() {
        let fs = fresh();
        let s = Arc::new(held(&fs));
        let n = put_until(&s, 0, |s| s.state.lock().checkpointing).len() as u64;
        let (limit, num) = {
            let st = s.state.lock();
            (st.journal_limit, st.journal_num)
        };
        let writer = {
            let s = s.clone();
            std::thread::spawn(move || {
                (0..2 * limit / 1000 + 16)
                    .map(|i| put(&s, n + i))
                    .collect::<Vec<_>>()
            })
        };
        // The writer stops at twice the limit and stays there.
        while s.state.lock().journal_len < 2 * limit {
            std::thread::yield_now();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(s.state.lock().checkpointing);
        assert!(s.state.lock().journal_len < 2 * limit + 2048);
        resume(&s);
        let puts = writer.join().unwrap();
        s.wait_idle().unwrap();
        // Past the checkpoint the journal was switched again.
        assert!(s.state.lock().journal_num > num);
        check(&s, &puts);
    }

    /// The worker finishes a checkpoint: the table names the new journal,
    /// the old one is gone and a spare waits for the next switch, which
    /// takes it.
    #[test]
    fn a_finished_checkpoint_leaves_a_spare_for_the_next_switch() {
        let fs = fresh();
        let s = open(&fs);
        let first = s.state.lock().journal_num;
        let mut n = 0;
        while s.state.lock().journal_num == first {
            put(&s, n);
            n += 1;
        }
        s.wait_idle().unwrap();
        let st = s.state.lock();
        assert_eq!(st.journal_num, first + 1);
        assert_eq!(st.table.journal_pos, (first + 1, 0));
        drop(st);
        assert!(!fs.exists(&journal_path(Path::new("/db"), first)));
        assert_eq!(s.spare.lock().as_ref().map(|(n, _)| *n), Some(first + 2));
        while s.state.lock().journal_num == first + 1 {
            put(&s, n);
            n += 1;
        }
        assert!(s.spare.lock().is_none(), "the switch took the spare");
        s.wait_idle().unwrap();
        assert_eq!(s.counters.checkpoints.load(Ordering::Relaxed), 2);
        assert_eq!(s.spare.lock().as_ref().map(|(n, _)| *n), Some(first + 3));
    }

    type Hook = Box<dyn FnOnce(&MapIndex) + Send>;

    /// The index as a map, for GC's judged relocations: what the engine's
    /// facade does, without an LSM-tree. `relocate_judged` installs unless
    /// the key was written after the judgement, as the engine does when
    /// its memtables answer; `relocate` is a compare-and-set.
    struct MapIndex {
        map: parking_lot::Mutex<HashMap<Vec<u8>, (ValuePointer, SeqNum)>>,
        last: AtomicU64,
        /// Runs once inside `wait_in_flight_writes`: a write that lands
        /// after GC sealed its groups and is published before it judges.
        hook: parking_lot::Mutex<Option<Hook>>,
    }

    impl MapIndex {
        fn write(&self, key: &[u8], p: ValuePointer) {
            let seq = self.last.fetch_add(1, Ordering::SeqCst) + 1;
            self.map.lock().insert(key.to_vec(), (p, seq));
        }
    }

    impl IndexReader for MapIndex {
        fn current_pointer(&self, key: &[u8]) -> Result<Option<ValuePointer>> {
            Ok(self.map.lock().get(key).map(|e| e.0))
        }
        fn oldest_visible_seq(&self) -> SeqNum {
            self.last_sequence()
        }
        fn last_sequence(&self) -> SeqNum {
            self.last.load(Ordering::SeqCst)
        }
        fn wait_in_flight_writes(&self) -> Result<()> {
            if let Some(f) = self.hook.lock().take() {
                f(self);
            }
            Ok(())
        }
    }

    impl IndexRelocator for MapIndex {
        fn relocate(&self, moves: &[crate::vstore::Relocation]) -> Result<(Vec<bool>, SeqNum)> {
            let ok = moves
                .iter()
                .map(|m| {
                    let cur = self.map.lock().get(&m.key).map(|e| e.0);
                    cur == Some(m.old) && {
                        self.write(&m.key, m.new);
                        true
                    }
                })
                .collect();
            Ok((ok, self.last_sequence()))
        }
        fn relocate_judged(
            &self,
            moves: &[crate::vstore::Relocation],
            judged_at: SeqNum,
        ) -> Result<(Vec<bool>, SeqNum)> {
            let ok = moves
                .iter()
                .map(|m| {
                    let written_after =
                        self.map.lock().get(&m.key).is_some_and(|e| e.1 > judged_at);
                    !written_after && {
                        self.write(&m.key, m.new);
                        true
                    }
                })
                .collect();
            Ok((ok, self.last_sequence()))
        }
        fn persist_state(&self, _state: &[u8]) -> Result<()> {
            Ok(())
        }
        fn make_durable(&self, _seq: SeqNum) -> Result<()> {
            Ok(())
        }
    }

    /// A write that reaches a group after GC sealed it, and is published
    /// before GC judges the sealed records, is in neither the sealed
    /// segments nor the writes after the judgement: GC must still see it
    /// (the records placed since the seal) and not put the sealed version
    /// back in its place.
    #[test]
    fn a_write_between_the_seal_and_the_judgement_is_not_overwritten() {
        let s = Arc::new(open_with(
            &fresh(),
            &Options {
                hashkv_hotness: false,
                ..small()
            },
        ));
        s.recovered();
        let idx = Arc::new(MapIndex {
            map: parking_lot::Mutex::new(HashMap::new()),
            last: AtomicU64::new(0),
            hook: parking_lot::Mutex::new(None),
        });
        let val = |i: u64, round: u64| format!("{i}-{round:>1000}").into_bytes();
        let put = |i: u64, round: u64| {
            let k = format!("key{i:06}").into_bytes();
            let v = val(i, round);
            let seq = idx.last_sequence() + 1;
            let p = s
                .append(&[ValueRecord {
                    key: &k,
                    seq,
                    value: &v,
                }])
                .unwrap()[0];
            idx.write(&k, p);
        };
        // Two versions of every key of one group (the one GC picks: the
        // others hold a single version each).
        let g = s.group_of(b"key000000");
        let ours: Vec<u64> = (0..2000)
            .filter(|&i| s.group_of(format!("key{i:06}").as_bytes()) == g)
            .take(40)
            .collect();
        for i in 0..200 {
            put(i, 0);
        }
        for &i in &ours {
            put(i, 1);
        }
        let s2 = s.clone();
        *idx.hook.lock() = Some(Box::new(move |ix: &MapIndex| {
            let k = b"key000000";
            let v = format!("{}-{:>1000}", 0, 7).into_bytes();
            let seq = ix.last_sequence() + 1;
            let p = s2
                .append(&[ValueRecord {
                    key: k,
                    seq,
                    value: &v,
                }])
                .unwrap()[0];
            ix.write(k, p);
        }));
        let out = s.gc_step(idx.as_ref(), idx.as_ref()).unwrap();
        assert!(out.did_work && idx.hook.lock().is_none());
        assert!(s.counters.gc_judged.load(Ordering::Relaxed) > 0);
        for &i in &ours {
            let k = format!("key{i:06}").into_bytes();
            let p = idx.current_pointer(&k).unwrap().unwrap();
            let want = if i == 0 { val(0, 7) } else { val(i, 1) };
            let got = s.read(&k, &p).unwrap();
            assert!(got == Some(want), "key {i} lost its latest version");
        }
    }
}
