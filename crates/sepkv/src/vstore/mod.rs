//! Value stores: where separated values live.
//!
//! The index maps each key either to an inline value or to a
//! [`ValuePointer`] into a [`ValueStore`]. Each value layout
//! (`vlog`, `hashkv`, `trie`, `bands`; `docs/architecture.md`) is one implementation of the trait;
//! [`InlineStore`] is the layout without separation, the case "every value is
//! small".
//!
//! Contracts:
//! - **Durability ordering**: a value is durable before any pointer to it;
//!   the engine calls [`ValueStore::sync`] before it syncs the index records
//!   that point into the store.
//! - **GC ↔ index**: a relocation is installed only through the index's
//!   compare-and-set ([`IndexRelocator::relocate`]); space is freed only
//!   after the relocated values and the index update are durable, and after
//!   every write that made a freed version dead is durable too
//!   ([`IndexRelocator::make_durable`]): otherwise a crash that lost that
//!   write would leave the index pointing into freed space.
//! - Reads verify the record's checksum and that the stored key equals the
//!   looked-up key; a mismatch is `Corruption`, never a wrong value.
//!
//! Implementations are shared between threads (`Send + Sync`).

pub mod bands;
pub mod garbage;
pub mod hashkv;
pub(crate) mod index_log;
mod inline;
mod pointer;
pub mod prefetch;
pub mod trie;
pub mod vlog;

pub use hashkv::HashKvStore;
pub use inline::InlineStore;
pub use pointer::ValuePointer;
pub use trie::TrieStore;
pub use vlog::VlogStore;

use crate::error::Result;
use crate::seqno::SeqNum;

/// One value handed to [`ValueStore::append`].
#[derive(Debug, Clone, Copy)]
pub struct ValueRecord<'a> {
    /// The user key.
    pub key: &'a [u8],
    /// Sequence number of the write.
    pub seq: SeqNum,
    /// The value.
    pub value: &'a [u8],
}

impl SpaceStats {
    /// `garbage_bytes / (live_bytes + garbage_bytes)`, 0 when empty.
    pub fn garbage_ratio(&self) -> f64 {
        let total = self.live_bytes + self.garbage_bytes;
        if total == 0 {
            0.0
        } else {
            self.garbage_bytes as f64 / total as f64
        }
    }
}

/// A running estimate of how long one value read takes, which tells reads
/// the page cache serves (a few µs) from reads that reach the device (tens
/// of µs and more). Parallel reads (WiscKey §3.3.1) and read-ahead hints
/// (HashKV §3.6) pay off only on the device; on cached data their thread
/// hand-offs and system calls cost more than the reads, so scans skip them
/// while reads are fast. One read in [`ReadLatency::SAMPLE_EVERY`] of each
/// thread updates the estimate (a store to one shared cache line on every
/// read would cost readers on other cores more than the estimate is
/// worth), so a scan that starts missing the cache switches back within a
/// few dozen reads.
#[derive(Debug, Default)]
pub struct ReadLatency {
    /// Exponentially weighted mean (weight 1/8) in nanoseconds.
    mean_ns: std::sync::atomic::AtomicU64,
}

impl ReadLatency {
    /// Mean read time below which reads count as served from memory (ns).
    pub const MEMORY_NS: u64 = 20_000;

    /// Adds one read that took `ns` nanoseconds. Concurrent updates may
    /// lose one another; the estimate only steers a choice.
    pub fn record(&self, ns: u64) {
        use std::sync::atomic::Ordering;
        let old = self.mean_ns.load(Ordering::Relaxed);
        let new = old - old / 8 + ns / 8;
        self.mean_ns.store(new, Ordering::Relaxed);
    }

    /// Reads of a thread per one timed by [`ReadLatency::time`].
    pub const SAMPLE_EVERY: u32 = 4;

    /// Runs `f`; times it and records the time for one call in
    /// [`ReadLatency::SAMPLE_EVERY`] of the calling thread.
    pub fn time<T>(&self, f: impl FnOnce() -> T) -> T {
        thread_local! {
            static CALLS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
        }
        let n = CALLS.with(|c| {
            let n = c.get().wrapping_add(1);
            c.set(n);
            n
        });
        if n % Self::SAMPLE_EVERY != 1 {
            return f();
        }
        let t = std::time::Instant::now();
        let r = f();
        self.record(t.elapsed().as_nanos().min(u64::MAX as u128) as u64);
        r
    }

    /// True while reads look served from memory.
    pub fn from_memory(&self) -> bool {
        self.mean_ns.load(std::sync::atomic::Ordering::Relaxed) < Self::MEMORY_NS
    }

    /// Reads the `len` bytes at `offset` of `file`, timed ([`Self::time`]).
    /// While reads come from memory and `file` has a mapping that holds the
    /// range ([`crate::fs::MappedFile`], `Options::mmap_reads`), they are
    /// copied out of it with no system call; otherwise they are read with
    /// one. A mapped read that reaches the device is timed like any other,
    /// so reads go back to system calls — one request per record, where
    /// faults would read a page at a time — once they are slow.
    ///
    /// # Errors
    /// The file's, for a read with a system call (`UnexpectedEof` past its
    /// end).
    pub fn read(
        &self,
        file: &dyn crate::fs::RandomAccessFile,
        offset: u64,
        len: usize,
    ) -> std::io::Result<Vec<u8>> {
        let mapped = file.mapping().filter(|_| self.from_memory()).and_then(|m| {
            let start = usize::try_from(offset).ok()?;
            m.bytes().get(start..start.checked_add(len)?)
        });
        match mapped {
            Some(bytes) => self.time(|| Ok(bytes.to_vec())),
            None => self.time(|| {
                let mut buf = vec![0u8; len];
                file.read_exact_at(offset, &mut buf).map(|()| buf)
            }),
        }
    }
}

/// Opens `path` for value reads: mapped when `mmap` (`Options::mmap_reads`)
/// and the file system can map it (the mapping covers the file as it is
/// now: records appended later are read with system calls), and hinted for
/// random access on the handle itself, the only one a random-access hint
/// holds for.
///
/// # Errors
/// `Io` when the file cannot be opened or mapped.
pub(crate) fn open_for_reads(
    fs: &dyn crate::fs::FileSystem,
    path: &std::path::Path,
    mmap: bool,
) -> Result<std::sync::Arc<dyn crate::fs::RandomAccessFile>> {
    use crate::error::IoContext;
    let file = crate::fs::MappedFile::open(fs, path, mmap).ctx(path)?;
    file.advise(0, 0, crate::fs::Advice::Random);
    Ok(std::sync::Arc::from(file))
}

/// Receiver of replayed log entries: `(sequence, type, key, value)`.
pub type ReplaySink<'a> =
    dyn FnMut(SeqNum, crate::value_type::ValueType, &[u8], &[u8]) -> Result<()> + 'a;

/// One entry of [`ValueStore::log_batch`].
#[derive(Debug, Clone, Copy)]
pub struct LogEntry<'a> {
    /// `Value` (with `separate` deciding inline or not), `Deletion`, or
    /// `Pointer` for a GC relocation (value = encoded pointer).
    pub vtype: crate::value_type::ValueType,
    /// For `Value`: store the value separately (and return a pointer).
    pub separate: bool,
    /// The user key.
    pub key: &'a [u8],
    /// Sequence number of the entry.
    pub seq: SeqNum,
    /// The value, encoded pointer, or empty.
    pub value: &'a [u8],
}

/// Space figures of a value store (bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SpaceStats {
    /// Bytes of records still referenced by the index (estimate).
    pub live_bytes: u64,
    /// Bytes of records known to be garbage (estimate).
    pub garbage_bytes: u64,
    /// Bytes the store's files occupy.
    pub file_bytes: u64,
}

/// How much of `value_capacity` a store has in use, for the capacity
/// bands of the space governor (`db/space/policy.rs`). Bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CapacityUse {
    /// Bytes counted against the capacity now.
    pub used: u64,
    /// `used` at which a user append is refused (`ValueStoreFull`).
    pub limit: u64,
    /// What `used` would be with all the garbage the store knows of
    /// collected (its live bytes, by its own estimate); 0 when unknown.
    pub floor: u64,
    /// At most this width of the room, ending at `limit`, is what the
    /// governor's capacity bands divide (the bands set a few bands' worth,
    /// so that writers are paced only just before the refusal and GC
    /// works with all the room); `None`: the whole room (below).
    pub width: Option<u64>,
}

impl CapacityUse {
    /// How far `used` has come into the room GC can free — from `floor`,
    /// less the `hidden` garbage the index may still hide, up to `limit`,
    /// but never narrower than the last fifth of the capacity, so that the
    /// bands on it keep a width writers can be paced over even when little
    /// of the garbage is known: 0 at the room's start, 1 when user appends
    /// are refused. A store's own `width` narrows that room.
    pub fn fill(&self, hidden: u64) -> f64 {
        let width = self.room_width(hidden);
        let start = self.limit.saturating_sub(width);
        (self.used.saturating_sub(start) as f64 / width as f64).min(1.0)
    }

    /// The width of the room [`CapacityUse::fill`] measures (bytes, at
    /// least 1).
    pub fn room_width(&self, hidden: u64) -> u64 {
        let floor = self.floor.saturating_sub(hidden);
        let room = self.limit.saturating_sub(floor).max(self.limit / 5).max(1);
        self.width.map_or(room, |w| w.clamp(1, room))
    }
}

/// What one garbage-collection step did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct GcOutcome {
    /// Bytes scanned.
    pub bytes_read: u64,
    /// Bytes of live records rewritten.
    pub bytes_rewritten: u64,
    /// Bytes of space released.
    pub bytes_freed: u64,
    /// False when there was nothing to collect.
    pub did_work: bool,
    /// Nothing was collected, but garbage lies after the index's replay
    /// checkpoint (log mode), where GC may not go: an index checkpoint (a
    /// memtable flush) would let the next step collect it.
    pub held_by_checkpoint: bool,
}

/// The index as GC sees it: liveness queries (WiscKey §3.3.2, FlashKey).
pub trait IndexReader: Send + Sync {
    /// The pointer the index currently holds for `key`, if the key maps to a
    /// separated value.
    fn current_pointer(&self, key: &[u8]) -> Result<Option<ValuePointer>>;
    /// True when `key`'s current version is the record at `addr`, a record
    /// GC has read and knows holds `key`: the liveness check of WiscKey
    /// §3.3.2. The default compares [`IndexReader::current_pointer`]; an
    /// index whose entries hold the addresses answers without reading a
    /// record.
    fn points_at(&self, key: &[u8], addr: &ValuePointer) -> Result<bool> {
        Ok(self.current_pointer(key)? == Some(*addr))
    }
    /// [`IndexReader::points_at`] for each of `probes` (key, address of a
    /// record GC read that holds the key), answered in the order given.
    /// GC asks it once per step for every record it judges: an index may
    /// then look the keys up in key order at one read view and load each
    /// of its blocks once for all the keys that fall in it
    /// ([`crate::index::multi_get`]). Each answer holds at a state no older
    /// than the call, as a one-key answer does. The default asks
    /// [`IndexReader::points_at`] key by key.
    fn points_at_many(&self, probes: &[(&[u8], ValuePointer)]) -> Result<Vec<bool>> {
        probes
            .iter()
            .map(|(key, addr)| self.points_at(key, addr))
            .collect()
    }
    /// The oldest sequence number a live reader (snapshot or iterator) may
    /// still read at; the latest sequence number when there is none. Space
    /// holding values such a reader can reach must not be freed.
    fn oldest_visible_seq(&self) -> SeqNum;
    /// The latest sequence number visible to new readers.
    fn last_sequence(&self) -> SeqNum;
    /// True when a snapshot or iterator is registered: GC then asks the
    /// compaction filter nothing (removing a key's node would cut a reader
    /// off from the older versions it walks back to). The default claims
    /// one.
    fn has_readers(&self) -> bool {
        true
    }
    /// Returns once no write is *in flight*: every value appended to the
    /// store before the call belongs to a write that has either published
    /// its index entries (so [`IndexReader::current_pointer`] sees them) or
    /// failed (the database is then poisoned and this returns the error).
    ///
    /// A writer appends its values before it inserts their pointers into
    /// the index, so GC must call this after it has fixed the range it
    /// collects (the chunk end, the sealed segments) and before it judges
    /// any record in that range: otherwise a value whose pointer is about
    /// to be inserted looks dead, and its space is freed under it.
    ///
    /// # Errors
    /// `Poisoned` or `Closed` when in-flight writes can never publish.
    fn wait_in_flight_writes(&self) -> Result<()>;

    /// True when a writer is held waiting for the GC step running now (the
    /// space target's stop): a step of several chunks
    /// ([`ValueStore::gc_step_chunks`]) then ends after the chunk in hand,
    /// so that the writer waits for one chunk and the step's sync round,
    /// not for every chunk. Default: false.
    fn writers_waiting(&self) -> bool {
        false
    }
}

/// One relocation for [`IndexRelocator::relocate`].
#[derive(Debug, Clone)]
pub struct Relocation {
    /// The user key.
    pub key: Vec<u8>,
    /// Where the value was.
    pub old: ValuePointer,
    /// Where GC copied it.
    pub new: ValuePointer,
}

/// A record value GC read and holds while it is judged: key, sequence
/// number, the value (or where it lies in a buffer), address.
pub(crate) type HeldRecord<V> = (Vec<u8>, SeqNum, V, ValuePointer);

/// The records of `held` the index still points at, in their order: one
/// [`IndexReader::points_at_many`] batch, so the index may look the keys up
/// in key order, each of its blocks loaded once. Value GC judges with it.
///
/// # Errors
/// What the index's lookups return.
pub(crate) fn retain_live<V>(
    index: &dyn IndexReader,
    held: Vec<HeldRecord<V>>,
) -> Result<Vec<HeldRecord<V>>> {
    let probes: Vec<(&[u8], ValuePointer)> =
        held.iter().map(|(k, _, _, p)| (k.as_slice(), *p)).collect();
    let is_live = index.points_at_many(&probes)?;
    drop(probes);
    Ok(held
        .into_iter()
        .zip(is_live)
        .filter_map(|(r, live)| live.then_some(r))
        .collect())
}

/// The index as GC writes it: atomic relocation and durable GC progress.
pub trait IndexRelocator: Send + Sync {
    /// Installs each `new` pointer only if its key still maps to `old`
    /// (compare-and-set; a user write that raced the GC always wins), and
    /// makes the installed pointers durable before returning. Returns which
    /// relocations were installed and the sequence number from which they
    /// are visible.
    fn relocate(&self, moves: &[Relocation]) -> Result<(Vec<bool>, SeqNum)>;
    /// [`IndexRelocator::relocate`] for moves GC has just judged live: it
    /// loaded [`IndexReader::last_sequence`] as `judged_at` (after
    /// [`IndexReader::wait_in_flight_writes`]) and then found each key
    /// pointing at its `old` record. The implementation may then skip
    /// looking the keys up again and only ask whether a version newer than
    /// `judged_at` was written since. Default: [`IndexRelocator::relocate`].
    fn relocate_judged(
        &self,
        moves: &[Relocation],
        judged_at: SeqNum,
    ) -> Result<(Vec<bool>, SeqNum)> {
        let _ = judged_at;
        self.relocate(moves)
    }
    /// [`IndexRelocator::relocate_judged`] without the durability: the
    /// installed pointers are durable only once
    /// [`IndexRelocator::make_durable`] is called with the returned
    /// sequence number (or a later one), which the caller must do before
    /// it frees the old records. Lets a GC step relocate several chunks
    /// under one sync round. Only for a relocator whose
    /// [`IndexRelocator::make_durable`] syncs the value store first
    /// ([`IndexRelocator::make_durable_syncs_store`]); the default syncs
    /// as [`IndexRelocator::relocate_judged`] does.
    fn relocate_judged_unsynced(
        &self,
        moves: &[Relocation],
        judged_at: SeqNum,
    ) -> Result<(Vec<bool>, SeqNum)> {
        self.relocate_judged(moves, judged_at)
    }
    /// Durably records the layout's GC state (e.g. the vLog tail) in the
    /// index's manifest; it is handed back to the layout on open.
    fn persist_state(&self, state: &[u8]) -> Result<()>;
    /// Makes every index write up to sequence number `seq` durable (the
    /// value store's records, then the index's WAL; in log mode the value
    /// log alone). GC calls it before it frees a version that a *newer*
    /// write made dead: were that write lost in a crash, the recovered
    /// index would fall back to the freed version.
    fn make_durable(&self, seq: SeqNum) -> Result<()>;
    /// True when [`IndexRelocator::make_durable`] — and so the durability
    /// [`IndexRelocator::relocate`] promises — syncs the value store GC
    /// runs over before the index's log: GC may then leave its copies to
    /// that sync instead of syncing them before it relocates. False (the
    /// default) for a store the index does not sync, such as HashKV's cold
    /// data log.
    fn make_durable_syncs_store(&self) -> bool {
        false
    }
}

/// A value layout.
pub trait ValueStore: Send + Sync {
    /// Layout name (`inline`, `vlog`, …).
    fn name(&self) -> &'static str;

    /// True when a value of `len` bytes is separated into this store rather
    /// than kept inline in the index. Must be monotone in `len` (a threshold):
    /// the write path asks it once, with a batch's longest value.
    fn separates(&self, len: usize) -> bool;

    /// Appends `records` in order and returns one pointer per record. The
    /// records survive a process crash once this returns; they are durable
    /// after [`ValueStore::sync`].
    ///
    /// # Errors
    /// `Io` on write failure; the store is then poisoned.
    fn append(&self, records: &[ValueRecord<'_>]) -> Result<Vec<ValuePointer>>;

    /// Makes every appended record durable.
    fn sync(&self) -> Result<()>;

    /// False when [`ValueStore::sync`] never has anything to do (the store
    /// keeps no values of its own): a synced write then syncs only the WAL.
    fn needs_sync(&self) -> bool {
        true
    }

    /// Reads the value `ptr` points at, checking the checksum and that the
    /// record belongs to `key`. `Ok(None)` when the pointer lies outside the
    /// store's valid range (WiscKey §3.3.3); recovery never admits such a
    /// pointer, so `Db`'s reads report it as `Corruption`.
    ///
    /// # Errors
    /// `Corruption` with file and offset on a checksum or key mismatch.
    fn read(&self, key: &[u8], ptr: &ValuePointer) -> Result<Option<Vec<u8>>>;

    /// True when reading a scan's values ahead in batches
    /// ([`ValueStore::read_many`]) pays off now — reads reach the device.
    /// While it is false scans resolve values one at a time, so they read
    /// nothing past where the caller stops. The default: never.
    fn batch_reads_pay(&self) -> bool {
        false
    }

    /// Reads many values for a scan, in the layout's own way (prefetch,
    /// read-ahead, span reads). The default reads them one by one.
    fn read_many(&self, reqs: &[(Vec<u8>, ValuePointer)]) -> Result<Vec<Option<Vec<u8>>>> {
        reqs.iter().map(|(k, p)| self.read(k, p)).collect()
    }

    /// A pipeline that reads a limited scan's values ahead of its cursor
    /// within a memory budget ([`ReadPipeline`]), or `None` when the layout
    /// has none or it is off; the scan then reads its values with
    /// [`ValueStore::read_many`]. The default: none.
    fn read_pipeline(&self) -> Option<Box<dyn ReadPipeline>> {
        None
    }

    /// False when `ptr` reaches past what survived a crash (used by
    /// recovery: such a WAL record ends the replay, so the recovered state
    /// stays a prefix of history). Pointers into space that GC already
    /// collected count as contained: a later relocation supersedes them.
    fn contains(&self, ptr: &ValuePointer) -> bool;

    /// Tells the store that the record at `ptr` became garbage (compaction
    /// dropped the last reference to it). Feeds the garbage estimate.
    fn note_garbage(&self, _ptr: &ValuePointer) {}

    /// True when the store wants to hear of writes that leave no record in
    /// it ([`ValueStore::note_unseparated`]). Default false: the write path
    /// then looks at no entry for it.
    fn tracks_unseparated(&self) -> bool {
        false
    }

    /// Tells the store that the write with sequence number `seq` deleted
    /// `key` or gave it an inline value, so that no record of this version
    /// is in the store and any older record of the key is dead. Called by
    /// the write path under the writer lock, before the write is applied
    /// and published: GC, which judges liveness after
    /// [`IndexReader::wait_in_flight_writes`], has heard of every write
    /// published by then. Only when [`ValueStore::tracks_unseparated`].
    fn note_unseparated(&self, _key: &[u8], _seq: SeqNum) {}

    /// Tells the store that the index has recovered (its WAL replayed, any
    /// record recovery wrote back is in place) and that every record placed
    /// from now on is written by this process, with its deletions and
    /// inline writes told to [`ValueStore::note_unseparated`]. Called once,
    /// before the first write and before GC starts.
    fn recovered(&self) {}

    /// The garbage estimate per file (segment group, table), encoded as a
    /// [`garbage`] table, for the engine to record in the manifest with
    /// each edit (under the manifest lock) so that it survives a restart.
    /// `None` (the default) when the layout keeps no such estimate.
    fn garbage_table(&self) -> Option<Vec<u8>> {
        None
    }

    /// Bytes this store has learned are garbage since it was opened:
    /// reports through [`ValueStore::note_garbage`] that fell in its range,
    /// plus dead bytes its GC found that no report had named. The engine
    /// compares it with the garbage its writes may have made to estimate
    /// what the index still hides (`db/space/policy.rs`). The default, 0, makes
    /// that estimate only shrink when the index is compacted whole.
    fn garbage_found(&self) -> u64 {
        0
    }

    /// Restores the estimate of [`ValueStore::garbage_table`] at open,
    /// before any write or GC step. Entries for files that no longer exist
    /// are ignored; counts are capped at the file's valid bytes.
    ///
    /// # Errors
    /// `Corruption` when `table` does not decode.
    fn restore_garbage_table(&self, _table: &[u8]) -> Result<()> {
        Ok(())
    }

    /// Log mode (WiscKey §3.4.2, `Options::wal = false`): appends every
    /// entry of a batch — separated values, small inline values, deletes and
    /// GC relocations — so the store alone can rebuild the memtable after a
    /// crash. Returns a pointer for each separated value. The default
    /// refuses: only layouts that can serve as the log implement it.
    ///
    /// # Errors
    /// `InvalidArgument` for layouts without a log mode; `Io`.
    fn log_batch(&self, _entries: &[LogEntry<'_>]) -> Result<Vec<Option<ValuePointer>>> {
        Err(crate::Error::InvalidArgument(format!(
            "the {} layout cannot replace the write-ahead log",
            self.name()
        )))
    }

    /// Current end of the log (log mode), as `(file, offset)`.
    fn log_position(&self) -> Option<(u64, u64)> {
        None
    }

    /// The state to persist so that recovery replays from `pos` (log mode).
    fn state_with_checkpoint(&self, _pos: (u64, u64)) -> Vec<u8> {
        Vec::new()
    }

    /// Tells the store that a checkpoint at `pos` is durable: everything
    /// logged before it is in SSTables, so GC may collect up to it.
    fn checkpoint_committed(&self, _pos: (u64, u64)) {}

    /// Replays the whole batches logged after the last durable checkpoint
    /// (log mode), calling `f(seq, type, key, value)` for each entry in
    /// order; the value of a `Pointer` entry is an encoded pointer.
    fn replay(&self, _f: &mut ReplaySink<'_>) -> Result<()> {
        Ok(())
    }

    /// Reads every record in the store's valid range and checks it;
    /// returns the faults found (file and offset), plus the number of
    /// records checked.
    fn verify(&self) -> (u64, Vec<crate::Error>) {
        (0, Vec::new())
    }

    /// Layout-specific figures for `stats()`, as `(name, value)` pairs.
    fn figures(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

    /// Space figures.
    fn space(&self) -> SpaceStats;

    /// How much of `value_capacity` is in use (see [`CapacityUse`]);
    /// `None` when the store is unbounded or has no such figure. The
    /// default: `None`.
    fn capacity_use(&self) -> Option<CapacityUse> {
        None
    }

    /// The store's own soft space bound as a [`CapacityUse`], for the
    /// space governor's pacing: `used` the bytes its files take, `floor`
    /// the live bytes in them, `limit` where a user write runs a GC step
    /// itself ([`ValueStore::over_space_bound`]). Writers are slowed down
    /// as `used` nears `limit`; nothing is refused for it. Takes the
    /// store's state lock; asked when the governor takes a fresh view.
    /// The default: `None` (no such bound).
    fn space_bound_use(&self) -> Option<CapacityUse> {
        None
    }

    /// Bytes of the store's capacity that GC has retired but may not free
    /// yet because readers (snapshots, iterators) older than the GC step may
    /// still read them; a later step frees them once those readers are
    /// gone. A write the store refused may wait for them. The default: 0.
    fn pinned_bytes(&self) -> u64 {
        0
    }

    /// Waits until the store's own background work (HashKV's write-cache
    /// batches and journal checkpoints) is done. The default: nothing to
    /// wait for.
    ///
    /// # Errors
    /// `Poisoned` when that work failed.
    fn wait_idle(&self) -> Result<()> {
        Ok(())
    }

    /// How long a user write should pause before it appends (the writer
    /// lock let go meanwhile), so that GC keeps ahead of the writers where
    /// it frees room only a whole step at a time: HashKV's reserve, where
    /// a writer that finds it full waits for a whole group's GC. The
    /// default: no pause.
    fn write_delay(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }

    /// True when the store is running out of room and GC should run now,
    /// whatever the garbage ratio (FlashKey §V-B5: empty bands below a
    /// threshold). Cheap: the write path asks after every write. The
    /// default: never.
    fn gc_due(&self) -> bool {
        false
    }

    /// True when the store takes more room than its own space bound lets it
    /// (the bands' over-provisioning, `Options::band_over_provisioning`):
    /// a user write then runs a GC step itself before it appends, and is
    /// written whatever the step freed. Cheap: the write path asks before
    /// every write. The default: never.
    fn over_space_bound(&self) -> bool {
        false
    }

    /// The garbage ratio at which background GC runs by the store's own
    /// space bound, when it has one; the GC thread takes the lower of this
    /// and `Options::gc_garbage_ratio`. The default: `None`.
    fn gc_trigger_ratio(&self) -> Option<f64> {
        None
    }

    /// True when the store has GC work that frees no room but makes reads
    /// cheaper: the `trie` layout's sealed TrieTables still in write order,
    /// which a GC step rewrites in key order (`Options::trie_sort_sealed`).
    /// Background GC runs such steps when neither [`ValueStore::gc_due`]
    /// nor the garbage ratio nor the space target calls for one; the store's
    /// GC victim choice puts garbage first. Takes the store's state lock
    /// at most; asked once per background GC round. The default: never.
    fn reorganize_due(&self) -> bool {
        false
    }

    /// Starts a pass of GC steps over every record written so far, for the
    /// compaction filter to meet them (see [`crate::CompactionFilter`]):
    /// the bands layout, whose hash index has no compaction, takes each of
    /// its bands in turn in the steps that follow, even without garbage.
    /// Returns the bytes the pass will read. Default: nothing, 0
    /// (compaction offers the other layouts' records).
    ///
    /// # Errors
    /// `Io` or `Poisoned` from closing the open band.
    fn start_filter_pass(&self) -> Result<u64> {
        Ok(0)
    }

    /// Runs one garbage-collection step.
    fn gc_step(&self, index: &dyn IndexReader, relocator: &dyn IndexRelocator)
        -> Result<GcOutcome>;

    /// One GC step over up to `chunks` of the layout's GC units (the value
    /// log's `gc_chunk_size` chunks) under one round of syncs, for a
    /// caller that is behind and would rather pay the syncs once for
    /// several chunks than once per chunk. The default (a layout without
    /// such steps) runs [`ValueStore::gc_step`].
    ///
    /// # Errors
    /// As [`ValueStore::gc_step`].
    fn gc_step_chunks(
        &self,
        index: &dyn IndexReader,
        relocator: &dyn IndexRelocator,
        chunks: usize,
    ) -> Result<GcOutcome> {
        let _ = chunks;
        self.gc_step(index, relocator)
    }
}

/// Values of a scan read ahead of its cursor: the scan hands in its
/// pointers window by window ([`ReadPipeline::push`]) and takes the values
/// back one at a time in the order it handed them in
/// ([`ReadPipeline::next_value`]), while the reads of the values after
/// them are in flight. Dropping the pipeline stops it: reads not yet begun
/// are never made, and the drop returns once no read of it is running.
pub trait ReadPipeline: Send {
    /// Most bytes of values (counted from the pointers' lengths) the
    /// caller should hand in per [`ReadPipeline::push`].
    fn window(&self) -> u64;

    /// Hands in the next window of `(key, pointer)` requests; their reads
    /// start as the memory budget allows.
    fn push(&mut self, reqs: Vec<(Vec<u8>, ValuePointer)>);

    /// The value of the next request handed in, waiting for its read:
    /// `Ok(Some(value))`, `Ok(None)` when the pointer lies outside the
    /// store's valid range, `Err` for a failed read or a record that did
    /// not check out (the caller may read that one again with
    /// [`ValueStore::read`], which tells the two apart). `None` when every
    /// request handed in was returned.
    fn next_value(&mut self) -> Option<Result<Option<Vec<u8>>>>;
}

#[cfg(test)]
mod tests {
    use super::ReadLatency;

    #[test]
    fn read_latency_tells_memory_from_device() {
        let l = ReadLatency::default();
        assert!(l.from_memory(), "no reads yet: assume memory");
        for _ in 0..50 {
            l.record(2_000);
        }
        assert!(l.from_memory());
        // A few device reads switch it.
        let mut n = 0;
        while l.from_memory() {
            l.record(100_000);
            n += 1;
        }
        assert!(n <= 4, "took {n} slow reads");
        // And a run of cached reads switches it back.
        for _ in 0..30 {
            l.record(2_000);
        }
        assert!(l.from_memory());
    }
}
