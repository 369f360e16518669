//! The database facade: [`Db`].
//!
//! The facade owns what every index shares and drives the index through
//! the `Index` seam ([`crate::index`]): one `match` on
//! [`crate::IndexKind`] in [`Db::open`] picks it. By concern:
//! - this module: the `Db` handle, `open` (configuration, `IDENTITY`, the
//!   value store, the index) and `close`;
//! - `write`: group commit, value separation, the writer lock, GC run by
//!   writes the value store refused, and GC's compare-and-set;
//! - `read`: `get`, `multi_get`, snapshots, iterators and scans;
//! - `background`: value-store GC (the thread and `Db::gc`), flush,
//!   `wait_idle`, `compact_range`;
//! - `stats`: the report types, `stats` and `verify`.
//!
//! # Write path
//! Concurrent writes are grouped ([`crate::commit`]): the first writer of a
//! group leads it and writes every member's batch as one. The leader takes
//! the writer lock, makes room in the index (for the LSM-tree: freezing a
//! full memtable, delaying or stopping when level 0 backs up), assigns
//! consecutive sequence numbers, appends separated values to the value
//! store, applies the group to the index as one batch (the LSM-tree logs it
//! as one WAL record, synced once when any member asked for
//! `WriteOptions::sync`, and inserts it into the memtable) and publishes
//! the last sequence number, which makes it visible to readers. Value-store
//! GC judges a record only after the write that appended it has published
//! (see `IndexReader::wait_in_flight_writes`).
//!
//! # Durability promise
//! - `sync = true`: the write and every write before it survive a crash of
//!   the process or of the machine once `write` returns.
//! - `sync = false`: the write survives a crash of the process once `write`
//!   returns (it is in the operating system's page cache); a power loss may
//!   drop it together with every later write, never an earlier synced one.
//! - Write batches are atomic: after any crash either all or none of a batch
//!   is visible. Recovery restores a prefix of the write history: the state
//!   at some sequence number at or after the last synced write.
//!
//! # Read path
//! Reads take no lock on the write path: the index pins its read view (for
//! the LSM-tree the current memtable, the immutable memtable and the
//! SSTable version), then loads the published sequence number (or uses a
//! snapshot's) and looks the key up newest first; a value pointer is
//! resolved in the value store.
//!
//! # Background work
//! The index runs its own background work (the LSM-tree: one thread that
//! flushes immutable memtables to SSTables and runs leveled compactions);
//! the facade runs value-store GC in a thread of its own. A failed
//! background write poisons the database (writes then fail with
//! [`Error::Poisoned`]; reads continue) until it is reopened.
//!
//! `Db` is `Send + Sync`; share it between threads by reference or `Arc`.

mod background;
mod checkpoint;
mod read;
mod repair;
mod space;
mod stats;
mod write;

pub use checkpoint::CheckpointReport;
pub use repair::RepairReport;
pub use stats::{DbStats, FileGroupStats, GcReport, LevelStats, VerifyReport};

use crate::commit::CommitQueue;
use crate::error::{Error, IoContext, Result};
use crate::fs::{read_all, write_atomic, FileLock, FileSystem, IoCategory, IoStats};
use crate::identity::{Identity, LegacyFiles, FORMAT_VERSION};
use crate::index::filename::{IDENTITY, LOCK};
use crate::index::lsm::LsmIndex;
use crate::index::{Index, Shared};
use crate::options::{IndexKind, Options, ValueLayout};
use crate::seqno::SeqNum;
use crate::spin::SpinMutex;
use crate::vstore::hashkv::HashKvOptions;
use crate::vstore::vlog::{VlogOptions, VlogStore};
use crate::vstore::{HashKvStore, InlineStore, ValueStore};
use parking_lot::{Condvar, Mutex};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Counters of the facade (since open).
#[derive(Default)]
struct Counters {
    user_bytes_written: AtomicU64,
    /// Sharded: every read adds to it.
    user_bytes_read: crate::counter::ShardedCounter,
    write_gc_steps: AtomicU64,
    write_gc_waits: AtomicU64,
    /// Time writers were held at the space target's stop, µs
    /// (`DbStats::write_stop_micros`).
    write_stop_micros: AtomicU64,
    /// Most GC steps one write was held for (`DbStats::write_gc_steps_max`).
    write_gc_steps_max: AtomicU64,
    /// Longest value-store GC step, µs (`DbStats::gc_step_micros_max`).
    gc_step_micros_max: AtomicU64,
    write_reader_waits: AtomicU64,
    gc_relocation_lookups: AtomicU64,
    gc_index_blocks: AtomicU64,
}

/// GC steps running and finished (see `DbInner::wait_for_running_gc`).
#[derive(Default)]
struct GcSteps {
    running: u32,
    done: u64,
    /// Writers blocked in `wait_for_running_gc` now.
    waiting: u32,
}

/// The state behind a [`Db`] handle, shared with its GC thread.
struct DbInner {
    /// What the index sees too: options, directory, `last_seq`, snapshots,
    /// poison.
    shared: Arc<Shared>,
    index: Arc<dyn Index>,
    vstore: Arc<dyn ValueStore>,
    /// The writer lock (see `crate::index::Index`): held by a write from
    /// making room to publishing, by GC's compare-and-set and by
    /// `wait_in_flight_writes`. True while the database accepts writes.
    writer: SpinMutex<bool>,
    commit: CommitQueue,
    counters: Counters,
    /// Last sequence number restored by recovery at open.
    recovered_seq: AtomicU64,
    /// The value store said GC was due at the last write (a write wakes
    /// the GC thread when this turns true).
    gc_was_due: AtomicBool,
    /// Set by `close` before anything else: the GC thread ends after its
    /// current step, so that no step of it is cut short by the close (a
    /// step whose relocation fails leaves its copies behind as garbage
    /// nothing counts).
    gc_stop: AtomicBool,
    /// Set by the first `close`: a later or concurrent one returns at once,
    /// so that no GC step of its own runs beside the first one's close.
    closing: AtomicBool,
    /// Wakes the GC thread at `close`, and when GC becomes due.
    gc_wake: Mutex<()>,
    gc_cv: Condvar,
    /// GC steps in flight, whoever runs them; `gc_step_cv` is notified as
    /// each ends.
    gc_steps: Mutex<GcSteps>,
    gc_step_cv: Condvar,
    lock: Mutex<Option<Box<dyn FileLock>>>,
    /// The space-amplification target's state ([`space::policy`]).
    space: space::policy::SpaceGovernor,
    /// Opened by [`Db::open_read_only`]: every write is refused with
    /// [`Error::ReadOnly`], no background work runs, and the file system
    /// is an [`crate::fs::OverlayFs`] that keeps recovery's writes in
    /// memory.
    read_only: bool,
    /// Held exclusively by [`Db::checkpoint`]; held shared by each GC
    /// step, each range compaction ([`Db::compact_range`] and GC's garbage
    /// discovery), which run outside the index's background thread: a
    /// checkpoint waits for the running ones and keeps new ones out while
    /// it copies (see `checkpoint`). GC steps and the discovery only try
    /// it, and skip their work when a checkpoint holds it.
    work_gate: parking_lot::RwLock<()>,
    /// With a compaction filter, held exclusively by [`Db::compact_range`]
    /// from before its flush until its compactions are installed, and
    /// shared by each group of GC relocations from its liveness lookups
    /// through its write. A relocation writes a record back under a newer
    /// sequence number: landing after the range compaction's flush, the
    /// copy would sit above the tables that compaction merges, out of the
    /// filter's reach, and outlive the removal of the record it copies.
    /// Taken before `Shared::filter_gate`; the index's background thread
    /// never takes it.
    range_gate: parking_lot::RwLock<()>,
}

/// Opens the value store of the layout `shared.opts` names, handing it the
/// state the index persisted for it (`None` for a new database).
///
/// `stored` is the database's `IDENTITY` (`None` for a new database). A
/// format-1 database is upgraded here: the store opens with every file it
/// has in the format-1 record codecs and starts new ones for its appends,
/// and `IDENTITY` is rewritten in the current format, naming those first
/// new files, before anything is written in the shared codec
/// (`*upgraded` is then set).
fn open_value_store(
    shared: &Shared,
    stored: Option<&Identity>,
    upgraded: &mut bool,
    state: Option<&[u8]>,
) -> Result<Arc<dyn ValueStore>> {
    let (dir, fs, stats, opts) = (&shared.dir, &shared.fs, &shared.stats, &shared.opts);
    let upgrading = stored.filter(|id| id.format < FORMAT_VERSION);
    let legacy = stored.map(|id| id.legacy).unwrap_or_default();
    // `None`: a format-1 store, which picks its own boundary.
    let below = |n: u64| upgrading.is_none().then_some(n);
    let mut found = LegacyFiles::default();
    let store: Arc<dyn ValueStore> = match opts.layout() {
        ValueLayout::Vlog => {
            let v = VlogStore::open(
                dir,
                fs.clone(),
                stats.clone(),
                VlogOptions {
                    value_threshold: opts.value_threshold,
                    file_size: opts.vlog_file_size,
                    gc_chunk_size: opts.gc_chunk_size,
                    prefetch_threads: opts.prefetch_threads,
                    log_mode: !opts.wal,
                    capacity: opts.value_capacity,
                    mmap_reads: opts.mmap_reads,
                    legacy_below: below(legacy.vlog_below),
                },
                state,
            )?;
            found.vlog_below = v.legacy_below();
            Arc::new(v)
        }
        ValueLayout::HashKv => {
            let h = HashKvStore::open(
                dir,
                fs.clone(),
                stats.clone(),
                HashKvOptions {
                    legacy_below: below(legacy.hseg_below),
                    cold_legacy_below: below(legacy.vlog_below),
                    ..HashKvOptions::from_options(opts)
                },
                state,
            )?;
            found = LegacyFiles {
                vlog_below: h.cold_legacy_below(),
                hseg_below: h.legacy_below(),
            };
            Arc::new(h)
        }
        ValueLayout::Trie => Arc::new(crate::vstore::trie::TrieStore::open(
            dir,
            fs.clone(),
            stats.clone(),
            crate::vstore::trie::TrieOptions::from_options(opts),
        )?),
        _ => Arc::new(InlineStore),
    };
    if let Some(id) = upgrading {
        upgrade_identity(shared, id, found)?;
        *upgraded = true;
    }
    Ok(store)
}

/// Rewrites the `IDENTITY` of a format-1 database (`stored`) in the
/// current format, recording which value-store files hold the format-1
/// record codecs (`legacy`). Atomic (`write_atomic`): a crash leaves the
/// old record or the new one, and an open after the old one upgrades
/// again, from the same files.
fn upgrade_identity(shared: &Shared, stored: &Identity, legacy: LegacyFiles) -> Result<()> {
    let id_path = shared.dir.join(IDENTITY);
    let body = Identity {
        format: FORMAT_VERSION,
        legacy,
        ..*stored
    }
    .encode();
    write_atomic(shared.fs.as_ref(), &id_path, body.as_bytes()).ctx(&id_path)?;
    shared
        .stats
        .add_written(IoCategory::Manifest, body.len() as u64);
    Ok(())
}

/// A persistent key-value database. See the module docs for the write and
/// read paths and the durability promise.
///
/// # Examples
/// ```
/// let dir = std::env::temp_dir().join(format!("sepkv-doc-db-{}", std::process::id()));
/// # let _ = std::fs::remove_dir_all(&dir); // a leftover of an earlier run
/// let db = sepkv::Db::open(&dir, sepkv::Options::default())?;
/// db.put("hello", "world")?;
/// assert_eq!(db.get("hello")?, Some(b"world".to_vec()));
/// db.close()?;
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # Ok::<(), sepkv::Error>(())
/// ```
pub struct Db {
    inner: Arc<DbInner>,
    gc_thread: Mutex<Option<JoinHandle<()>>>,
}

impl Db {
    /// Opens (or creates) the database in directory `path`.
    ///
    /// An existing database opens with the configuration recorded when it
    /// was created (index, value layout, WAL mode) unless `opts` names one
    /// ([`Options::index`], [`Options::value_layout`]), which must then
    /// match; every other option may change at each open (the table in
    /// [`Options`](crate::Options) lists what is recorded). A new database gets the
    /// configuration `opts` names, `leveldb` (lsm + inline) when none.
    /// Recovery replays the write-ahead logs newer than the manifest's log
    /// number into SSTables, then starts a new log and manifest.
    ///
    /// A database of format version [`crate::OLDEST_FORMAT_VERSION`] (1)
    /// is upgraded to [`crate::FORMAT_VERSION`] (2) in place: its value-log
    /// files and HashKV segments stay in the older record codecs and are
    /// read in them, new records go to new files, and `IDENTITY` records
    /// which files are older; builds of version 1 refuse it from then on
    /// (`docs/format.md`, "Files in the older record codecs").
    ///
    /// # Examples
    /// ```
    /// use sepkv::{Db, Options, Preset};
    /// let dir = std::env::temp_dir().join(format!("sepkv-doc-open-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir); // a leftover of an earlier run
    /// let db = Db::open(&dir, Options::preset(Preset::WiscKey))?;
    /// db.put("k", "v")?;
    /// db.close()?;
    /// // Reopening needs no options: the database knows it is `wisckey`.
    /// let db = Db::open(&dir, Options::default())?;
    /// assert_eq!(db.options().value_layout, Some(sepkv::ValueLayout::Vlog));
    /// assert_eq!(db.get("k")?.as_deref(), Some(&b"v"[..]));
    /// db.close()?;
    /// // Naming another configuration is refused.
    /// let e = Db::open(&dir, Options::preset(Preset::HashKv)).unwrap_err();
    /// assert!(matches!(e, sepkv::Error::ConfigMismatch { .. }));
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), sepkv::Error>(())
    /// ```
    ///
    /// # Errors
    /// - `InvalidArgument`: invalid options (a preset this build does not
    ///   implement, named or recorded, included), or `error_if_exists` and
    ///   the database exists;
    /// - `NotADatabase`: `path` is a file, a directory with other contents,
    ///   an unsupported format, or missing while `create_if_missing` is off;
    /// - `FormatTooNew`: a newer build wrote the database;
    /// - `ConfigMismatch`: `opts` names another configuration than the
    ///   recorded one;
    /// - `Busy`: another process or handle has it open;
    /// - `Corruption`: damaged manifest, `CURRENT` or WAL (file and offset);
    /// - `Io`: the file system failed.
    pub fn open(path: impl AsRef<Path>, opts: Options) -> Result<Db> {
        Self::open_with(path.as_ref(), opts, false)
    }

    /// Opens the existing database in directory `path` for reading only,
    /// as RocksDB's `OpenForReadOnly`: nothing in the directory is written,
    /// created, removed or synced, so it works on a full disk and on a
    /// read-only mount.
    ///
    /// Recovery runs as in [`Db::open`], but over an
    /// [`crate::fs::OverlayFs`]: the WAL is replayed into memory (the
    /// tables, WAL and manifest recovery would write stay in memory, about
    /// the size of the WALs replayed), FlashKey's hash table is rebuilt in
    /// memory from its checkpoint and the bands after it. No flush,
    /// compaction or GC runs; the handle shows the database as of the open.
    ///
    /// Locking: the open takes a *shared* lock on `LOCK` (opened for
    /// reading, never created), so read-only opens coexist, and is refused
    /// with [`Error::Busy`] while a process or handle has the database open
    /// for writing (which holds the lock exclusively). The choice (refuse
    /// rather than read beside a writer) is LevelDB's: a writer's
    /// compactions delete tables and its GC punches holes in value files
    /// that a point-in-time reader would still name, and telling those
    /// apart from damage would need the writer's cooperation. While a
    /// read-only handle is open, [`Db::open`] for writing is refused with
    /// `Busy` in turn. A directory without a `LOCK` file (a copy, or a
    /// read-only mount of one) is opened without a lock.
    ///
    /// Writes ([`Db::put`], [`Db::delete`], [`Db::write`]), [`Db::flush`],
    /// [`Db::compact_range`], [`Db::gc`] and [`Db::checkpoint`] return
    /// [`Error::ReadOnly`]. `opts` is used as in [`Db::open`], except that
    /// `create_if_missing` and `error_if_exists` are ignored.
    ///
    /// # Examples
    /// ```
    /// use sepkv::{Db, Error, Options};
    /// let dir = std::env::temp_dir().join(format!("sepkv-doc-ro-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir); // a leftover of an earlier run
    /// let db = Db::open(&dir, Options::default())?;
    /// db.put("k", "v")?;
    /// // A writer holds the lock: read-only opens are refused meanwhile.
    /// assert!(matches!(Db::open_read_only(&dir, Options::default()), Err(Error::Busy { .. })));
    /// db.close()?;
    /// let ro = Db::open_read_only(&dir, Options::default())?;
    /// let ro2 = Db::open_read_only(&dir, Options::default())?;
    /// assert_eq!(ro.get("k")?.as_deref(), Some(&b"v"[..]));
    /// assert_eq!(ro2.get("k")?.as_deref(), Some(&b"v"[..]));
    /// assert!(matches!(ro.put("k", "w"), Err(Error::ReadOnly(_))));
    /// # drop((ro, ro2));
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), sepkv::Error>(())
    /// ```
    ///
    /// # Errors
    /// - `NotADatabase`: `path` holds no sepkv database (or one of an
    ///   older, unsupported format); `FormatTooNew`: a newer build wrote it;
    /// - `Busy`: a process or handle has it open for writing;
    /// - `ConfigMismatch`, `InvalidArgument`: as [`Db::open`];
    /// - `Corruption`: damaged manifest, `CURRENT`, WAL or checkpoint;
    /// - `Io`: a read failed.
    pub fn open_read_only(path: impl AsRef<Path>, opts: Options) -> Result<Db> {
        Self::open_with(path.as_ref(), opts, true)
    }

    fn open_with(path: &Path, mut opts: Options, read_only: bool) -> Result<Db> {
        let dir = path.to_path_buf();
        if read_only {
            let fs = opts.fs.clone();
            if !fs.is_dir(&dir) || !fs.exists(&dir.join(IDENTITY)) {
                return Err(Error::NotADatabase {
                    path: dir,
                    reason: "it holds no database (IDENTITY is missing); a read-only \
                             open creates nothing"
                        .into(),
                });
            }
            opts.create_if_missing = false;
            opts.error_if_exists = false;
        }
        let opts = Self::resolve_options(&dir, opts)?;
        opts.validate()?;
        let fs = opts.fs.clone();
        if fs.exists(&dir) && !fs.is_dir(&dir) {
            return Err(Error::NotADatabase {
                path: dir,
                reason: "it is a file, not a directory".into(),
            });
        }
        if !fs.exists(&dir) {
            if !opts.create_if_missing {
                return Err(Error::NotADatabase {
                    path: dir,
                    reason: "it does not exist and create_if_missing is off".into(),
                });
            }
            fs.create_dir_all(&dir).ctx(&dir)?;
        }
        // Refuse foreign directories before taking the lock, so a refused
        // open leaves the directory exactly as it was.
        if !fs.exists(&dir.join(IDENTITY)) {
            let names = fs.list(&dir).ctx(&dir)?;
            if let Some(foreign) = names.iter().find(|n| n.as_str() != LOCK) {
                return Err(Error::NotADatabase {
                    path: dir,
                    reason: format!(
                        "no IDENTITY file, and the directory holds other files (e.g. {foreign:?})"
                    ),
                });
            }
            if !opts.create_if_missing {
                return Err(Error::NotADatabase {
                    path: dir,
                    reason: "it holds no database and create_if_missing is off".into(),
                });
            }
        }
        let lock_path = dir.join(LOCK);
        let busy = |e: std::io::Error| {
            if e.kind() == std::io::ErrorKind::WouldBlock {
                Error::Busy {
                    path: lock_path.clone(),
                }
            } else {
                Error::io(&lock_path, e)
            }
        };
        let mut opts = opts;
        let lock = if read_only {
            let lock = fs.lock_shared(&lock_path).map_err(busy)?;
            // From here on every write lands in memory.
            opts.fs = Arc::new(crate::fs::OverlayFs::new(fs.clone()));
            lock
        } else {
            Some(fs.lock(&lock_path).map_err(busy)?)
        };
        let probe = if read_only {
            dir.join(IDENTITY)
        } else {
            lock_path.clone()
        };
        let opts = Self::direct_reads(opts, &probe)?;
        let fs = opts.fs.clone();
        let stats = Arc::new(IoStats::default());
        let stored_identity = Self::check_identity(&dir, fs.as_ref(), &opts, &stats)?;
        if !read_only {
            Self::sync_what_the_os_holds(&dir, fs.as_ref())?;
        }

        let shared = Arc::new(Shared {
            dir: dir.clone(),
            opts,
            fs,
            stats,
            last_seq: AtomicU64::new(0),
            snapshots: Arc::new(Mutex::new(BTreeMap::new())),
            poison: Mutex::new(None),
            bg_error: Mutex::new(None),
            closed: AtomicBool::new(false),
            stall_micros: AtomicU64::new(0),
            filter_removed: Arc::new(AtomicU64::new(0)),
            filter_gate: parking_lot::RwLock::new(()),
            filter_installed_at: AtomicU64::new(0),
        });
        // The index reads the value store's persisted state from its own
        // manifest or checkpoint, so it opens the value store.
        let mut upgraded = false;
        let mut open_vstore = |state: Option<&[u8]>| {
            open_value_store(&shared, stored_identity.as_ref(), &mut upgraded, state)
        };
        // The one place that names an index: adding one adds an arm here.
        let (index, vstore): (Arc<dyn Index>, Arc<dyn ValueStore>) = match shared.opts.index_kind()
        {
            // The LWC-tree is the LSM-tree with lightweight compaction: the
            // index reads its compaction style from the options.
            IndexKind::Lsm | IndexKind::Lwc => {
                let (index, vstore) = LsmIndex::open(shared.clone(), &mut open_vstore)?;
                (index, vstore)
            }
            IndexKind::Hash => {
                let (index, vstore) = crate::index::hash::flashkey::FlashKeyIndex::open(
                    shared.clone(),
                    &mut open_vstore,
                )?;
                (index, vstore)
            }
        };
        // A layout whose store was not opened through `open_value_store`
        // has no files in the older codecs.
        if let Some(id) = stored_identity.as_ref() {
            if id.format < FORMAT_VERSION && !upgraded {
                upgrade_identity(&shared, id, LegacyFiles::default())?;
            }
        }
        // The space policy covers the layouts whose garbage it tracks (value
        // log, HashKV, TrieTables). The bands keep FlashKey's own policy
        // (their invalidity table and band GC, §V-B5): the policy's hidden
        // index-garbage estimate and its stops starve band GC, whose victims
        // must lie before the hash table's checkpoint.
        let space_target = if matches!(
            shared.opts.layout(),
            ValueLayout::Inline | ValueLayout::Bands
        ) {
            f64::INFINITY
        } else {
            shared.opts.space_amp_target
        };
        // The capacity's bands (`crate::space`) for the same layouts, and
        // the slowdown band of the bands' own space bound (their
        // over-provisioning, or the target if tighter), whose garbage the
        // invalidity table knows exactly: no estimate of hidden garbage.
        let bands = shared.opts.layout() == ValueLayout::Bands;
        let bounded = match shared.opts.layout() {
            ValueLayout::Inline => false,
            ValueLayout::Bands => {
                vstore.space_bound_use().is_some() || vstore.capacity_use().is_some()
            }
            _ => vstore.capacity_use().is_some(),
        };
        let mut space = space::policy::SpaceGovernor::new(space_target, bounded);
        if bands {
            space = space.with_exact_garbage();
        }
        let inner = Arc::new(DbInner {
            shared,
            index,
            vstore,
            writer: SpinMutex::new(false),
            commit: CommitQueue::default(),
            counters: Counters::default(),
            recovered_seq: AtomicU64::new(0),
            gc_was_due: AtomicBool::new(false),
            gc_stop: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            gc_wake: Mutex::new(()),
            gc_cv: Condvar::new(),
            gc_steps: Mutex::new(GcSteps::default()),
            gc_step_cv: Condvar::new(),
            lock: Mutex::new(lock),
            space,
            read_only,
            work_gate: parking_lot::RwLock::new(()),
            range_gate: parking_lot::RwLock::new(()),
        });
        let seq = inner.index.recover()?;
        inner.vstore.recovered();
        inner
            .space
            .index_compacted(inner.may_shadow(), inner.vstore.garbage_found());
        inner.shared.last_seq.store(seq, Ordering::Release);
        inner.recovered_seq.store(seq, Ordering::Release);
        *inner.writer.lock() = true;
        if read_only {
            // No flush, compaction or GC: nothing would ever make their
            // results durable, and the handle shows the state at open.
            return Ok(Db {
                inner,
                gc_thread: Mutex::new(None),
            });
        }
        inner.index.clone().start()?;
        let gc_handle = if inner.shared.opts.layout() != ValueLayout::Inline
            && inner.shared.opts.gc_garbage_ratio > 0.0
        {
            let gc_inner = inner.clone();
            let spawned = std::thread::Builder::new()
                .name("sepkv-gc".into())
                .spawn(move || {
                    crate::sched::mark_background();
                    gc_inner.gc_loop()
                });
            match spawned {
                Ok(h) => Some(h),
                Err(e) => {
                    inner.shared.closed.store(true, Ordering::Release);
                    inner.index.shutdown();
                    return Err(Error::io(&inner.shared.dir, e));
                }
            }
        } else {
            None
        };
        Ok(Db {
            inner,
            gc_thread: Mutex::new(gc_handle),
        })
    }

    /// Makes durable whatever the database's files hold only in the OS:
    /// after a process crash, appends a store acknowledged but never synced
    /// are still in the page cache, and recovery is about to make their
    /// pointers durable (replayed WAL records flushed to tables, value
    /// stores checkpointing tables that name them). Without this a power
    /// loss after the reopen could take the values of writes older than
    /// synced ones that survive. One `syncfs(2)`; where the file system
    /// cannot, every file is synced.
    fn sync_what_the_os_holds(dir: &Path, fs: &dyn FileSystem) -> Result<()> {
        if fs.sync_file_system(dir).ctx(dir)? {
            return Ok(());
        }
        fn each(dir: &Path, fs: &dyn FileSystem) -> Result<()> {
            for name in fs.list(dir).ctx(dir)? {
                let p = dir.join(name);
                if fs.is_dir(&p) {
                    each(&p, fs)?;
                } else {
                    fs.open_append(&p).and_then(|mut f| f.sync()).ctx(&p)?;
                }
            }
            fs.sync_dir(dir).ctx(dir)
        }
        each(dir, fs)
    }

    /// With `use_direct_reads`, swaps the file system for its direct-read
    /// form and checks on `probe` (a file of the database) that the file
    /// system under the directory accepts `O_DIRECT`; `InvalidArgument`
    /// when either fails.
    fn direct_reads(mut opts: Options, probe: &Path) -> Result<Options> {
        if !opts.use_direct_reads {
            return Ok(opts);
        }
        let refuse = |e: std::io::Error| {
            Error::InvalidArgument(format!(
                "use_direct_reads: {e} (the file system must support O_DIRECT)"
            ))
        };
        opts.fs = opts.fs.with_direct_reads().map_err(refuse)?;
        opts.fs.open_read(probe).map_err(refuse)?;
        Ok(opts)
    }

    /// Fills the configuration `opts` leaves open (`None` index and value
    /// layout) from the database's `IDENTITY`, or with the defaults when
    /// there is none, and refuses a named one that differs. Reads only.
    fn resolve_options(dir: &Path, mut opts: Options) -> Result<Options> {
        let fs = opts.fs.clone();
        let id_path = dir.join(IDENTITY);
        if !fs.is_dir(dir) || !fs.exists(&id_path) {
            // A new database: the named configuration or the default.
            opts.index = Some(opts.index_kind());
            opts.value_layout = Some(opts.layout());
            return Ok(opts);
        }
        let data = read_all(fs.as_ref(), &id_path).ctx(&id_path)?;
        let stored = Identity::decode(&id_path, &data)?;
        if !opts.names_configuration() {
            opts.index = Some(stored.index);
            opts.value_layout = Some(stored.layout);
            if let Some(wal) = stored.wal {
                opts.wal = wal;
            }
        }
        Self::check_config(&stored, &opts)?;
        Ok(opts)
    }

    /// `ConfigMismatch` unless `opts` selects the recorded configuration.
    fn check_config(stored: &Identity, opts: &Options) -> Result<()> {
        let wanted = Identity::new(opts);
        let same = (stored.index, stored.layout) == (wanted.index, wanted.layout)
            && stored.wal.is_none_or(|w| w == opts.wal);
        if !same {
            return Err(Error::ConfigMismatch {
                stored: stored.describe(),
                requested: wanted.describe(),
            });
        }
        Ok(())
    }

    /// The options this handle runs with: those given to [`Db::open`], with
    /// the recorded configuration filled in ([`Options::index`] and
    /// [`Options::value_layout`] are always `Some` here).
    ///
    /// ```
    /// let dir = std::env::temp_dir().join(format!("sepkv-doc-options-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir); // a leftover of an earlier run
    /// let db = sepkv::Db::open(&dir, sepkv::Options::default())?;
    /// assert_eq!(db.options().index, Some(sepkv::IndexKind::Lsm));
    /// assert_eq!(db.options().value_layout, Some(sepkv::ValueLayout::Inline));
    /// # drop(db);
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), sepkv::Error>(())
    /// ```
    pub fn options(&self) -> &Options {
        &self.inner.shared.opts
    }

    /// Reads `IDENTITY` and checks the configuration it records, or writes
    /// it for a new database. Whether the index holds data yet is the
    /// index's to judge at its open.
    ///
    /// Returns the stored record, `None` for a new database.
    fn check_identity(
        dir: &Path,
        fs: &dyn FileSystem,
        opts: &Options,
        stats: &IoStats,
    ) -> Result<Option<Identity>> {
        let id_path = dir.join(IDENTITY);
        let wanted = Identity::new(opts);
        if fs.exists(&id_path) {
            let data = read_all(fs, &id_path).ctx(&id_path)?;
            stats.add_read(IoCategory::Manifest, data.len() as u64);
            let stored = Identity::decode(&id_path, &data)?;
            Self::check_config(&stored, opts)?;
            if opts.error_if_exists {
                return Err(Error::InvalidArgument(format!(
                    "database {} already exists (error_if_exists is set)",
                    dir.display()
                )));
            }
            return Ok(Some(stored));
        }
        let names = fs.list(dir).ctx(dir)?;
        let foreign: Vec<_> = names.iter().filter(|n| n.as_str() != LOCK).collect();
        if !foreign.is_empty() {
            return Err(Error::NotADatabase {
                path: dir.into(),
                reason: format!(
                    "no IDENTITY file, and the directory holds other files (e.g. {:?})",
                    foreign[0]
                ),
            });
        }
        if !opts.create_if_missing {
            return Err(Error::NotADatabase {
                path: dir.into(),
                reason: "it holds no database and create_if_missing is off".into(),
            });
        }
        let body = wanted.encode();
        write_atomic(fs, &id_path, body.as_bytes()).ctx(&id_path)?;
        stats.add_written(IoCategory::Manifest, body.len() as u64);
        Ok(None)
    }

    fn check_open(&self) -> Result<()> {
        if self.inner.shared.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// `check_open`, then [`Error::ReadOnly`] naming `what` on a read-only
    /// handle.
    fn check_writable(&self, what: &'static str) -> Result<()> {
        self.check_open()?;
        if self.inner.read_only {
            return Err(Error::ReadOnly(what));
        }
        Ok(())
    }

    /// True for a handle opened with [`Db::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.inner.read_only
    }

    /// The last sequence number recovery restored when this handle was
    /// opened: the state then was exactly the writes up to it. (Background
    /// value-store GC may write relocations right after open, so
    /// [`Db::last_sequence`] can already be larger.)
    pub fn recovered_sequence(&self) -> SeqNum {
        self.inner.recovered_seq.load(Ordering::Acquire)
    }

    /// Largest sequence number visible to reads.
    pub fn last_sequence(&self) -> SeqNum {
        self.inner.shared.last_seq.load(Ordering::Acquire)
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.inner.shared.dir
    }

    /// Flushes the memtable, stops background work, syncs the WAL and
    /// releases the lock. Later calls on this handle fail with
    /// [`Error::Closed`]; closing twice is not an error.
    ///
    /// The flush leaves a closed database with no log to replay: the next
    /// open starts at once, and the WAL's space (up to `write_buffer_size`
    /// bytes, most of it the values synced writes carry,
    /// `Options::sync_values_in_wal`; a spare WAL kept for reuse as well)
    /// is freed rather than held while the database sits closed, as Badger
    /// does at close. A short-lived process, such as a CLI import, would
    /// otherwise leave a WAL about as large as the data it wrote.
    /// `Options::flush_on_close = false` skips the flush.
    ///
    /// Before that, with a value store, close stops the GC thread after its
    /// current step and collects garbage until the store is below the
    /// space target's GC band (for at most
    /// [`crate::GC_ON_CLOSE_BUDGET`], 2 s;
    /// `Options::gc_on_close = false` skips it), so that a short-lived
    /// process leaves no more garbage than the target allows.
    ///
    /// # Errors
    /// `Io` if the flush or the final WAL sync fails (the lock is released
    /// anyway; the WAL then still holds every write, and the next open
    /// replays it).
    pub fn close(&self) -> Result<()> {
        let inner = &self.inner;
        if inner.closing.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        if inner.read_only {
            // Nothing to flush, no background work: drop what recovery
            // kept in memory and the shared lock.
            inner.shared.closed.store(true, Ordering::Release);
            inner.index.shutdown();
            let res = {
                let mut open = inner.writer.lock();
                *open = false;
                inner.index.close()
            };
            *inner.lock.lock() = None;
            return res;
        }
        // The GC thread first, so that no step of it is cut short below.
        inner.gc_stop.store(true, Ordering::Release);
        {
            let _g = inner.gc_wake.lock();
            inner.gc_cv.notify_all();
        }
        if let Some(h) = self.gc_thread.lock().take() {
            let _ = h.join();
        }
        // While the database is still open (GC's relocations are writes):
        // leave the store inside its space target for the next process.
        // Best effort: an error here leaves garbage, never a wrong state,
        // and it is reported by whatever it poisoned.
        let _ = inner.gc_before_close();
        inner.shared.closed.store(true, Ordering::Release);
        // New writers see `closed`. One already queued for the writer lock
        // may still write after the flush: its write then stays in the new
        // WAL, synced below and replayed at the next open.
        inner.index.begin_close();
        let flushed = if inner.shared.opts.flush_on_close
            && inner.shared.poisoned().is_ok()
            && inner.index.shape().memtable_bytes > 0
        {
            inner.flush_memtable()
        } else {
            Ok(())
        };
        inner.index.shutdown();
        let res = {
            let mut open = inner.writer.lock();
            *open = false;
            inner.index.close()
        };
        *inner.lock.lock() = None;
        flushed.and(res)
    }
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("path", &self.inner.shared.dir)
            .field("options", &self.inner.shared.opts)
            .finish_non_exhaustive()
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// The index and value layout recorded in the database at `path` on the
/// operating system's file system, or `None` when it holds no database.
/// [`Db::open`] reads the record itself; this is for tools that want to
/// know what a directory holds without opening it (the `sepkv` CLI refuses
/// read-only commands on a directory where it returns `None`).
///
/// # Errors
/// `Corruption` for a damaged `IDENTITY`; `NotADatabase` for a foreign one
/// or an older, unsupported format; `FormatTooNew` for a newer format;
/// `Io` when it cannot be read.
pub fn stored_config(
    path: impl AsRef<Path>,
) -> Result<Option<(crate::IndexKind, crate::ValueLayout)>> {
    let p = path.as_ref().join(IDENTITY);
    if !p.exists() {
        return Ok(None);
    }
    let data = std::fs::read(&p).ctx(&p)?;
    let id = Identity::decode(&p, &data)?;
    Ok(Some((id.index, id.layout)))
}
