//! The index: what maps each key to an inline value or a value pointer.
//!
//! The [`Db`](crate::Db) facade drives an index through one seam, the
//! crate-internal `Index` trait defined here. The facade owns what every
//! index shares: sequence numbers (`last_seq`), the writer lock and group
//! commit, value separation, the snapshot list, value-store GC and its
//! compare-and-set, and poisoning. An index owns its own structures and
//! their durability: its memtable and write-ahead log (if it has one), its
//! on-disk tables, its manifest or checkpoint, its background work, and
//! recovery of all of it.
//!
//! Two indexes are implemented by one module: the LSM-tree (module `lsm`),
//! the design of LevelDB with leveled compaction, and the LWC-tree (index
//! `lwc`), the same LSM-tree whose levels below 0 hold append-only DTables
//! ([`dtable`]) grown by lightweight compaction
//! ([`compaction::lightweight`]); `lsm` picks its compaction style from
//! [`crate::IndexKind`]. Their parts live here one concept a module:
//! internal keys ([`key`]), cursor iterators ([`iter`], [`merger`]), the
//! [`memtable`] over a concurrent [`skiplist`], SSTables ([`sstable`]) and
//! DTables with the block [`cache`] and [`table_cache`], the version set and
//! manifest ([`version`]), file naming ([`filename`]), [`compaction`], and
//! sorted, batched point lookups for value-store GC ([`multi_get`]).
//! The write-ahead log is the record framing of [`crate::format::record`]
//! carrying encoded write batches.
//!
//! # Adding an index
//! Implement `Index` in a module of its own, give it an `open` function of
//! the shape of `lsm::LsmIndex::open`, and add its arm to the one `match`
//! on [`crate::IndexKind`] in the facade's `open`. Nothing else in the
//! facade names an index.

pub mod cache;
pub mod compaction;
pub mod dtable;
pub mod filename;
pub mod hash;
pub mod iter;
pub mod key;
pub(crate) mod lsm;
pub mod memtable;
pub mod merger;
pub mod multi_get;
pub mod skiplist;
pub mod sstable;
pub mod table_cache;
pub mod version;

use crate::batch::WriteBatch;
use crate::error::{Error, Result};
use crate::fs::{FileSystem, IoCategory, IoStats};
use crate::options::Options;
use crate::report::{LevelStats, VerifyReport};
use crate::snapshot::SnapshotList;
use crate::vstore::{ValuePointer, ValueStore};
use compaction::CompactionStats;
use iter::InternalIterator;
use key::{SeqNum, ValueType};
use memtable::Lookup;
use parking_lot::{Mutex, RwLock};
use sstable::ReadCtx;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// State the facade shares with its index. The facade creates it before
/// the index and hands the index an `Arc` of it.
pub(crate) struct Shared {
    /// The database directory.
    pub dir: PathBuf,
    /// The options the database runs with (configuration resolved).
    pub opts: Options,
    /// The file system every file goes through.
    pub fs: Arc<dyn FileSystem>,
    /// I/O accounting.
    pub stats: Arc<IoStats>,
    /// The last sequence number published to readers. Only the facade
    /// stores it (after `Index::apply` returned, under the writer lock, and
    /// after `Index::recover`); an index loads it.
    pub last_seq: AtomicU64,
    /// Live snapshots and iterators; see [`Shared::smallest_snapshot`].
    pub snapshots: SnapshotList,
    /// Set when the database is poisoned: a failed write or fsync left the
    /// index or the value store in a state no later write may build on.
    pub poison: Mutex<Option<String>>,
    /// The first error of a background thread (the index's flushes and
    /// compactions, or value-store GC). Once set, `Index::make_room` and
    /// the waits fail with `Poisoned`. A leaf lock: take no other lock
    /// while holding it.
    pub bg_error: Mutex<Option<Error>>,
    /// Set when `close` begins: background work stops, waits end.
    pub closed: AtomicBool,
    /// Time writers spent delayed or stopped (µs).
    pub stall_micros: AtomicU64,
    /// Records the compaction filter removed (compactions and band GC).
    pub filter_removed: Arc<AtomicU64>,
    /// Keeps value-store GC's relocations and filtering compactions apart:
    /// a compaction that asks a filter holds it exclusively from before it
    /// reads its inputs until its edit is installed, a relocation shares it
    /// from its liveness lookups through its write. Otherwise a relocation
    /// that judged a record live before the compaction removed it would
    /// write the record back under a newer sequence number.
    pub filter_gate: RwLock<()>,
    /// The last published sequence number when a filtering compaction that
    /// removed records was last installed (0: never). GC that judged
    /// liveness at a sequence number not past it may have judged before
    /// the removal, so its relocation looks the keys up again.
    pub filter_installed_at: AtomicU64,
}

impl Shared {
    /// `Poisoned` once the database is poisoned.
    pub fn poisoned(&self) -> Result<()> {
        if let Some(p) = self.poison.lock().as_ref() {
            return Err(Error::Poisoned(p.clone()));
        }
        Ok(())
    }

    /// Poisons the database with `e` (the first reason is kept). `Closed`
    /// never poisons: it is returned before anything is written (a write,
    /// GC relocation or state persist that found the database closing), so
    /// nothing is left out of step, and a writer racing `close` must see
    /// `Closed`, not a failure that never happened.
    pub fn set_poison(&self, e: &Error) {
        if matches!(e, Error::Closed) {
            return;
        }
        let mut p = self.poison.lock();
        if p.is_none() {
            *p = Some(e.to_string());
        }
    }

    /// `Poisoned` once a background thread failed.
    pub fn background_failed(&self) -> Result<()> {
        match self.bg_error.lock().as_ref() {
            Some(e) => Err(Error::Poisoned(e.to_string())),
            None => Ok(()),
        }
    }

    /// Records a background failure (the first is kept) and poisons the
    /// database.
    pub fn set_background_error(&self, e: Error) {
        if matches!(e, Error::Closed) {
            return;
        }
        self.set_poison(&e);
        let mut b = self.bg_error.lock();
        if b.is_none() {
            *b = Some(e);
        }
    }

    /// The oldest sequence number a live snapshot or iterator reads at; the
    /// latest published sequence number when there is none. A version
    /// visible at or after it must be kept (compaction, GC).
    pub fn smallest_snapshot(&self) -> SeqNum {
        let l = self.snapshots.lock();
        l.keys()
            .next()
            .copied()
            .unwrap_or_else(|| self.last_seq.load(Ordering::Acquire))
    }

    /// The newest sequence number a live snapshot or iterator reads at, if
    /// any: the compaction filter is not offered records at or below it.
    pub fn newest_snapshot(&self) -> Option<SeqNum> {
        self.snapshots.lock().keys().next_back().copied()
    }

    /// Adds the time since `since` to the writers' stall time.
    pub fn note_stall(&self, since: Instant) {
        self.stall_micros
            .fetch_add(since.elapsed().as_micros() as u64, Ordering::Relaxed);
    }
}

/// Opens the value store with the state the index persisted for it
/// (`None` for a new database); see `Index` on who calls it.
pub(crate) type ValueStoreOpener<'a> = dyn FnMut(Option<&[u8]>) -> Result<Arc<dyn ValueStore>> + 'a;

/// An ordered view of an index at a sequence number, for
/// [`crate::DbIterator`].
pub(crate) struct IndexIter {
    /// Every version of every key in internal-key order (user key
    /// ascending, then sequence number descending), as internal keys
    /// ([`key`]); the facade's iterator hides versions newer than its
    /// sequence number and resolves value pointers.
    pub iter: Box<dyn InternalIterator>,
    /// Keeps alive what `iter` reads (memtables, table files) until the
    /// iterator is dropped.
    pub pin: Box<dyn Send>,
}

/// The index part of [`crate::DbStats`]. Figures an index does not have
/// stay at their defaults.
#[derive(Debug, Clone, Default)]
pub(crate) struct IndexStats {
    /// Tables per level (state).
    pub levels: Vec<LevelStats>,
    /// Bytes in the active memtable (state).
    pub memtable_bytes: u64,
    /// True while an immutable memtable waits for its flush (state).
    pub immutable_memtable: bool,
    /// Memtable flushes (counter since open).
    pub flushes: u64,
    /// Compactions that rewrote files (counter since open).
    pub compactions: u64,
    /// Compactions that only moved a file down a level (counter).
    pub trivial_moves: u64,
    /// Bytes read by compactions (counter).
    pub compaction_bytes_in: u64,
    /// Bytes written by compactions (counter).
    pub compaction_bytes_out: u64,
    /// Entries compaction dropped (counter).
    pub compaction_entries_dropped: u64,
    /// The index's own figures, shown by `stats` under the index: sizes
    /// and loads (state) or tallies (counters since open), as the name
    /// says.
    pub figures: Vec<(&'static str, u64)>,
}

/// What [`Index::shape`] returns.
#[derive(Debug, Clone, Default)]
pub(crate) struct IndexShape {
    /// Bytes in the active memtable.
    pub memtable_bytes: u64,
    /// An immutable memtable waits for its flush.
    pub immutable_memtable: bool,
    /// Bytes of the tables of each level.
    pub level_bytes: Vec<u64>,
}

/// An index structure behind the [`Db`](crate::Db) facade.
///
/// # Locks
/// The facade holds one *writer lock* around every write: it makes room
/// ([`Index::make_room`]), appends separated values to the value store,
/// applies the batch ([`Index::apply`]) and publishes `Shared::last_seq`,
/// all without letting go. Value-store GC relies on it: its
/// `wait_in_flight_writes` takes the writer lock, and its relocation is a
/// compare-and-set (an [`Index::get`] then an [`Index::apply`]) under the
/// writer lock, so no user write slips between check and install. Methods
/// documented "writer lock held" are only called so; they need no lock of
/// their own against one another. Reads ([`Index::get`], [`Index::iter`])
/// take no lock on the write path and run in parallel with everything.
///
/// # Durability
/// The index owns its write-ahead log, if it has one: [`Index::apply`] logs
/// the batch before inserting it, syncing on request, and always syncs the
/// value store first (a value is durable before any pointer to it). In log
/// mode (`Options::wal` off) the value store is the log: the facade has
/// appended every entry to it ([`ValueStore::log_batch`]) before `apply`,
/// and the index records a replay checkpoint with its own durable state:
/// when a flush makes the index's state durable up to the value-store
/// position [`ValueStore::log_position`] taken at the memtable switch, it
/// persists [`ValueStore::state_with_checkpoint`] of that position in the
/// same atomic step (the manifest edit of the flush), then calls
/// [`ValueStore::checkpoint_committed`]. Recovery replays the value store
/// from there ([`ValueStore::replay`]).
///
/// # Errors
/// A failed write or sync in the index is returned; the facade poisons the
/// database for every error of `apply`, `make_durable` and
/// `persist_value_store_state`, and an index poisons it itself
/// (`Shared::set_poison`, `Shared::set_background_error`) for failures in
/// its own background work and in `make_room`.
pub(crate) trait Index: Send + Sync {
    /// Restores the index at open, before any other call but
    /// [`Index::start`] is made: replays what the index logged (its WAL,
    /// or in log mode the value store after its checkpoint) and makes the
    /// replayed state durable in the index's own structures. Returns the
    /// last sequence number restored; the facade publishes it.
    ///
    /// A history that ends in a batch whose separated values did not
    /// survive ([`ValueStore::contains`] false) ends before it, so the
    /// state stays a prefix of the write history (WiscKey §3.3.3); a value
    /// carried beside its pointer is restored inline instead.
    ///
    /// # Errors
    /// `Corruption` for damage in the index's logs or manifest (a torn
    /// tail of the newest log is the end of history, not damage); `Io`.
    fn recover(&self) -> Result<SeqNum>;

    /// Starts the index's background work (flushes, compactions), after
    /// [`Index::recover`].
    ///
    /// # Errors
    /// `Io` when a thread cannot be started.
    fn start(self: Arc<Self>) -> Result<()>;

    /// Makes room for a write: waits or delays while the index is backed up
    /// (an immutable memtable not yet flushed, too many level-0 SSTables)
    /// and starts a flush when the memtable is full. With `force`, also
    /// switches a non-empty memtable that is not full (for a flush).
    /// Writer lock held.
    ///
    /// # Errors
    /// `Poisoned` after a background failure; `Closed` once `close` began;
    /// `Io` when the switch to a new WAL fails (the database is poisoned).
    fn make_room(&self, force: bool) -> Result<()>;

    /// Logs (if the index has a WAL) and inserts `batch`, whose entries get
    /// the consecutive sequence numbers from `first_seq`; the entries hold
    /// inline values, tombstones, or encoded value pointers
    /// (`ValueType::Pointer`), some of which may carry their value too
    /// ([`Index::carries_values`]). With `sync`, every applied write (this
    /// batch and all before) is durable on return — value store first,
    /// unless every pointer logged since the value store's last sync carries
    /// its value, when the log's sync suffices. Does not
    /// publish: the facade stores `last_seq` after it returns. Writer lock
    /// held, room made.
    ///
    /// # Errors
    /// `Io` when the log append or sync fails (the facade poisons the
    /// database: the batch may be half logged).
    fn apply(&self, batch: &WriteBatch, first_seq: SeqNum, sync: bool) -> Result<()>;

    /// Whether [`Index::apply`] takes pointer entries that carry their
    /// value (`Options::sync_values_in_wal`): its log keeps the value, so a
    /// synced batch made only of such entries (and inline values and
    /// tombstones) is durable once the log is, whatever the value store
    /// holds, and recovery falls back to the carried value for a record the
    /// store lost. Default: no (the entries are then never built).
    fn carries_values(&self) -> bool {
        false
    }

    /// Makes every applied write up to sequence number `seq` durable: the
    /// value store's records, then the index's WAL (in log mode the value
    /// store alone). Cheap when they already are. Called *without* the
    /// writer lock, with `seq` already published: an implementation makes
    /// at least every write published when it looks durable, and lets
    /// writers go on while its fsyncs run.
    ///
    /// # Errors
    /// `Io` when a sync fails (the facade poisons the database).
    fn make_durable(&self, seq: SeqNum) -> Result<()>;

    /// For each of `keys`, whether a version newer than sequence number
    /// `seq` has been applied, when the index can tell without reading a
    /// table; `None` when it cannot (the caller then asks [`Index::get`]).
    /// GC's compare-and-set asks it under the writer lock, for keys it
    /// looked up after `seq` was published. Default: `None`.
    fn written_after(&self, keys: &[&[u8]], seq: SeqNum) -> Option<Vec<bool>> {
        let _ = (keys, seq);
        None
    }

    /// The newest version of `key` at sequence number `seq`, or — with
    /// `None` — in the latest state. No lock held.
    ///
    /// With `None` the index must pin its read view (memtables, table
    /// version) *before* it loads `Shared::last_seq`: the other order lets
    /// a compaction installed in between drop the version visible at the
    /// loaded sequence, and the read would miss the key.
    ///
    /// # Errors
    /// `Corruption` (file and offset) for a damaged table on the read path;
    /// `Io`.
    fn get(&self, key: &[u8], seq: Option<SeqNum>, ctx: ReadCtx) -> Result<Lookup>;

    /// True when `key`'s newest version is a separated value at `addr`, a
    /// record GC has read from the value store and knows holds `key`
    /// ([`crate::vstore::IndexReader::points_at`]). The default asks
    /// [`Index::get`] for the pointer; an index whose entries hold the
    /// addresses (FlashKey's hash table) answers from them.
    ///
    /// # Errors
    /// As [`Index::get`].
    fn points_at(&self, key: &[u8], addr: &ValuePointer) -> Result<bool> {
        let ctx = ReadCtx {
            category: IoCategory::Gc,
            fill_cache: true,
        };
        Ok(match self.get(key, None, ctx)? {
            Lookup::Found(ValueType::Pointer, p) => ValuePointer::decode(&p) == Some(*addr),
            _ => false,
        })
    }

    /// For each of `probes` — a key and the address of a record GC read
    /// that holds it — whether the key's newest version is a separated
    /// value at that address: [`Index::points_at`] for many keys. Returns
    /// the answers in the order of `probes`, and the index data blocks the
    /// lookups loaded (from the block cache, a mapping or the file). Each
    /// answer holds at a state no older than the call. No lock held.
    ///
    /// The default asks [`Index::points_at`] key by key and counts no
    /// block. The LSM-tree answers every key at one read view, in key
    /// order, loading each data block once for all the keys that fall in
    /// it ([`multi_get`]).
    ///
    /// # Errors
    /// As [`Index::get`].
    fn points_at_many(&self, probes: &[(&[u8], ValuePointer)]) -> Result<(Vec<bool>, u64)> {
        let live = probes
            .iter()
            .map(|(key, addr)| self.points_at(key, addr))
            .collect::<Result<_>>()?;
        Ok((live, 0))
    }

    /// An ordered view of every version at or before `seq` (and possibly
    /// newer ones, which the facade hides). The facade has registered a
    /// snapshot at `seq` before the call, so nothing `seq` can see is
    /// dropped while the view lives. No lock held.
    ///
    /// # Errors
    /// `Io` or `Corruption` opening a table.
    fn iter(&self, seq: SeqNum, ctx: ReadCtx) -> Result<IndexIter>;

    /// Durably records the value store's GC state (e.g. the vLog tail) in
    /// the index's manifest or checkpoint; it is handed to the
    /// [`ValueStoreOpener`] at the next open. No lock held (called by GC).
    ///
    /// # Errors
    /// `Io` (the facade poisons the database).
    fn persist_value_store_state(&self, state: &[u8]) -> Result<()>;

    /// Waits until what the last forced [`Index::make_room`] switched out
    /// is flushed to durable index structures. No lock held.
    ///
    /// # Errors
    /// `Poisoned` after a background failure; `Closed` once `close` began.
    fn wait_flushed(&self) -> Result<()>;

    /// Waits until background work is done (nothing to flush, no
    /// compaction due, no step running) and the files finished work made
    /// obsolete are removed. No lock held.
    ///
    /// # Errors
    /// `Poisoned` after a background failure; `Closed` once `close` began.
    fn wait_idle(&self) -> Result<()>;

    /// Compacts the keys in `[begin, end]` (`None` = unbounded) as far down
    /// as the index goes; the facade has flushed the memtable first. An
    /// index without range compaction returns empty stats. No lock held.
    ///
    /// # Errors
    /// `Poisoned`; `Closed`; `Io`; `Corruption` met while merging.
    fn compact_range(&self, begin: Option<&[u8]>, end: Option<&[u8]>) -> Result<CompactionStats>;

    /// The index part of the stats. No lock held.
    fn stats(&self) -> IndexStats;

    /// The memtables' and levels' sizes alone, from memory (no table is
    /// opened, as [`Index::stats`] does for its per-table figures): for
    /// the space target, which asks at every refresh, and `close`.
    fn shape(&self) -> IndexShape;

    /// The kind of a file of the database directory for
    /// [`crate::FileGroupStats`]: `Some("sstables")`, `Some("wal")`,
    /// `Some("manifest")`, `Some("other")` — or `None` for a file the index
    /// does not own (the value store's).
    fn file_kind(&self, name: &str) -> Option<&'static str>;

    /// Checks the index's files (manifest, current WAL, tables), adding
    /// every fault found, with file and offset, to `rep`. No lock held.
    fn verify(&self, rep: &mut VerifyReport);

    /// Called once by `close`, before its last flush: files kept only to
    /// speed later writes up (the LSM-tree's spare WALs) are released, and
    /// the flush's new WAL is a new, empty file rather than one written
    /// over a spare, so that a closed database holds no log space it does
    /// not need. Default: nothing.
    fn begin_close(&self) {}

    /// Stops background work and waits for it to end. Called once by
    /// `close`, after `Shared::closed` is set and before the writer lock is
    /// taken for [`Index::close`].
    fn shutdown(&self);

    /// Syncs the WAL unless the database is poisoned and releases it;
    /// later writes are refused by the facade. Writer lock held.
    ///
    /// # Errors
    /// `Io` when the final sync fails.
    fn close(&self) -> Result<()>;
}
