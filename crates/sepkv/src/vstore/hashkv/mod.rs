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
//!   `gc_chunk_size` (4 MiB) of group bytes, at least one group and at most
//!   a quarter of the groups) so that small groups share one relocation
//!   batch, one sync of the copies and one table update, while a step
//!   stays as short as a value-log step; the order is by write volume plus the garbage the engine
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
pub mod segment;

mod options;
mod recovery;
mod store;
#[cfg(test)]
mod tests;
mod value_store;

pub use options::HashKvOptions;

use super::{
    GcOutcome, IndexReader, IndexRelocator, ReadLatency, SpaceStats, ValuePointer, ValueRecord,
    ValueStore,
};
use crate::error::{Error, IoContext, Result};
use crate::format::record::{RecordReader, RecordWriter};
use crate::format::value_record::{self as record, Codec, Kind};
use crate::fs::{
    create_preallocated, read_all, Advice, FileSystem, IoCategory, IoStats, WritableFile,
};
use crate::options::Options;
use crate::seqno::SeqNum;
use cache::{Pending, WriteCache};
use cold::{is_cold, ColdLog};
use journal::{journal_path, parse_journal_name, Entry, GroupIntent, Place, GC_JOURNAL};
use parking_lot::{Condvar, Mutex, MutexGuard};
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
    /// Segments numbered below this hold the format-1 record codec
    /// ([`Codec::HashKvV1`]); 0 when there are none.
    legacy_below: u64,
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
    codec: Codec,
    path: impl FnOnce() -> PathBuf,
    ptr: &ValuePointer,
    key: &[u8],
    buf: &[u8],
) -> Result<std::ops::Range<usize>> {
    let why = match codec.decode(buf) {
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

/// The record codec of segment `id` when the segments below
/// `legacy_below` are in the format-1 codec.
fn seg_codec(id: u64, legacy_below: u64) -> Codec {
    if id < legacy_below {
        Codec::HashKvV1
    } else {
        Codec::Shared
    }
}

/// End of the intact records of `buf` (which starts at a record boundary).
fn intact_prefix(codec: Codec, buf: &[u8]) -> usize {
    let mut pos = 0;
    while let Ok(r) = codec.decode(&buf[pos..]) {
        pos += r.len;
    }
    pos
}
