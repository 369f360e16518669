//! The database facade: [`Db`].
//!
//! # Write path
//! Concurrent writes are grouped ([`crate::commit`]): the first writer of a
//! group leads it and writes every member's batch as one. The leader takes
//! the writer lock, makes room (freezing a full memtable, delaying or
//! stopping when level 0 backs up), assigns consecutive sequence numbers,
//! appends separated values to the value store, appends the group as one
//! WAL record (synced once when any member asked for `WriteOptions::sync`),
//! inserts it into the memtable and publishes the last sequence number,
//! which makes it visible to readers. Value-store GC judges a record only
//! after the write that appended it has published (see
//! `IndexReader::wait_in_flight_writes`).
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
//! Reads take no lock on the write path: they load the published sequence
//! number (or use a snapshot's), then the current memtable, the immutable
//! memtable and the SSTable version, newest first.
//!
//! # Background work
//! One background thread flushes immutable memtables to SSTables and runs
//! leveled compactions. A failed background write poisons the database
//! (writes then fail with [`Error::Poisoned`]; reads continue) until it is
//! reopened.
//!
//! `Db` is `Send + Sync`; share it between threads by reference or `Arc`.

use crate::batch::{check_key, decode_batch, WriteBatch};
use crate::commit::{CommitQueue, Group};
use crate::error::{Error, IoContext, Result};
use crate::format::record::{LogEnd, RecordReader, RecordWriter};
use crate::fs::{
    read_all, write_atomic, FileLock, FileSystem, IoCategory, IoStats, IoStatsSnapshot,
};
use crate::identity::{Identity, FORMAT_VERSION};
use crate::index::cache::BlockCache;
use crate::index::compaction::picker::{self, Choice, PickerConfig};
use crate::index::compaction::{flush_to_tables, run_compaction, CompactionStats, JobContext};
use crate::index::filename::{self, FileKind, CURRENT, IDENTITY, LOCK};
use crate::index::iter::InternalIterator;
use crate::index::key::{SeqNum, ValueType};
use crate::index::memtable::{Lookup, MemTable};
use crate::index::merger::{LevelIterator, MergingIterator};
use crate::index::sstable::{ReadCtx, TableOptions};
use crate::index::table_cache::TableCache;
use crate::index::version::{Version, VersionEdit, VersionSet};
use crate::iterator::{DbIterator, Scan};
use crate::options::ValueLayout;
use crate::options::{Options, ReadOptions, WriteOptions, MAX_BATCH_SIZE};
use crate::range::{check_order, KeyRange};
use crate::snapshot::{Snapshot, SnapshotList, SnapshotPin};
use crate::vstore::hashkv::HashKvOptions;
use crate::vstore::vlog::{VlogOptions, VlogStore};
use crate::vstore::{
    GcOutcome, HashKvStore, IndexReader, IndexRelocator, InlineStore, LogEntry, Relocation,
    SpaceStats, ValuePointer, ValueRecord, ValueStore,
};
use parking_lot::{Condvar, Mutex, MutexGuard, RwLock};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The memtables and SSTable version a reader works against.
struct SuperVersion {
    mem: Arc<MemTable>,
    imm: Option<Arc<MemTable>>,
    version: Arc<Version>,
}

struct Writer {
    wal: RecordWriter,
    wal_number: u64,
    scratch: Vec<u8>,
    /// Every write up to this sequence number is durable.
    synced_seq: SeqNum,
}

struct ManualCompaction {
    level: usize,
    /// Rewrite `level` into itself (the bottommost step) instead of
    /// merging it into `level + 1`.
    in_place: bool,
    begin: Option<Vec<u8>>,
    end: Option<Vec<u8>>,
    done: bool,
    /// What the compaction did, set with `done`.
    stats: CompactionStats,
}

#[derive(Default)]
struct BgState {
    shutting_down: bool,
    /// WALs older than this are obsolete once the immutable memtable is
    /// flushed.
    imm_log_number: u64,
    /// Log mode: the value-log position where the immutable memtable's
    /// writes end (its flush checkpoints it).
    imm_log_position: Option<(u64, u64)>,
    manual: Option<ManualCompaction>,
    error: Option<Error>,
}

#[derive(Default)]
struct Counters {
    user_bytes_written: AtomicU64,
    user_bytes_read: AtomicU64,
    flushes: AtomicU64,
    compactions: AtomicU64,
    trivial_moves: AtomicU64,
    compaction_bytes_in: AtomicU64,
    compaction_bytes_out: AtomicU64,
    compaction_entries_dropped: AtomicU64,
    stall_micros: AtomicU64,
    write_gc_steps: AtomicU64,
    write_reader_waits: AtomicU64,
}

/// Longest a write the value store refused waits for the oldest reader to
/// release space GC retired (see `DbInner::wait_for_readers`).
const ROOM_WAIT: Duration = Duration::from_secs(10);

/// Progress of the GC a refused write runs (see `DbInner::gc_for_room`).
#[derive(Default)]
struct RoomGc {
    /// Value-store bytes (live + garbage) when the write was first refused.
    start_bytes: Option<u64>,
    /// Bytes GC has read since.
    read: u64,
    /// A memtable flush was forced to let GC go on.
    flushed: bool,
}

struct DbInner {
    dir: PathBuf,
    opts: Options,
    fs: Arc<dyn FileSystem>,
    stats: Arc<IoStats>,
    table_cache: Arc<TableCache>,
    vstore: Arc<dyn ValueStore>,
    picker: PickerConfig,
    table_options: TableOptions,
    writer: Mutex<Option<Writer>>,
    commit: CommitQueue,
    sv: RwLock<Arc<SuperVersion>>,
    last_seq: AtomicU64,
    versions: Mutex<VersionSet>,
    bg: Mutex<BgState>,
    bg_cv: Condvar,
    snapshots: SnapshotList,
    counters: Counters,
    /// Last sequence number restored by recovery at open.
    recovered_seq: AtomicU64,
    closed: AtomicBool,
    poison: Mutex<Option<String>>,
    lock: Mutex<Option<Box<dyn FileLock>>>,
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
    bg_thread: Mutex<Option<JoinHandle<()>>>,
    gc_thread: Mutex<Option<JoinHandle<()>>>,
}

/// What [`Db::gc`] did (bytes).
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct GcReport {
    /// GC steps run.
    pub steps: u64,
    /// Bytes scanned at the tail.
    pub bytes_read: u64,
    /// Bytes of live values rewritten at the head.
    pub bytes_rewritten: u64,
    /// Bytes of space released.
    pub bytes_freed: u64,
    /// Estimated garbage ratio afterwards.
    pub garbage_ratio: f64,
}

/// Files and bytes of one level.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct LevelStats {
    /// Level number.
    pub level: usize,
    /// Number of SSTables.
    pub files: usize,
    /// Total bytes of the SSTables.
    pub bytes: u64,
}

/// The files of one kind in the database directory.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct FileGroupStats {
    /// `sstables`, `wal`, `manifest` (with `CURRENT`), `value store`
    /// (value-log files, `hashkv` segments, journals and table) or `other`
    /// (`IDENTITY`, `LOCK`, temporary files).
    pub kind: String,
    /// Number of files.
    pub files: u64,
    /// Sum of the file lengths: what `ls -l` shows (bytes).
    pub size_bytes: u64,
    /// Device space the files occupy: what `du` shows (bytes). Smaller than
    /// the size where value-store GC punched holes into a file.
    pub allocated_bytes: u64,
}

/// A point-in-time report of the database's state. Byte counts are bytes.
///
/// Two kinds of figures: the *state* (configuration, sequence number,
/// levels, files, memtable, value-store space) is read from what is on
/// disk and in memory now, and is the same after a reopen; the *counters*
/// (`io`, `user_bytes_*`, `flushes`, `compactions`, `trivial_moves`,
/// `compaction_*`, `write_stall_micros`, `write_gc_steps`) count what this
/// handle did since it was opened and are not persisted: a freshly opened
/// database (every `sepkv` command) starts them at 0.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DbStats {
    /// Index structure (state).
    pub index: String,
    /// Value layout (state).
    pub value_layout: String,
    /// Last sequence number assigned (state).
    pub last_sequence: u64,
    /// SSTables per level (state).
    pub levels: Vec<LevelStats>,
    /// Files in the directory by kind, with their sizes and the device
    /// space they occupy (state).
    pub files: Vec<FileGroupStats>,
    /// Bytes in the active memtable (state).
    pub memtable_bytes: u64,
    /// True while an immutable memtable waits for its flush (state).
    pub immutable_memtable: bool,
    /// Bytes read and written, by category (counter since open).
    pub io: IoStatsSnapshot,
    /// Key and value bytes written by users (counter since open).
    pub user_bytes_written: u64,
    /// Value bytes returned to users by `get` (counter since open).
    pub user_bytes_read: u64,
    /// Memtable flushes (counter since open).
    pub flushes: u64,
    /// Compactions that rewrote files (counter since open).
    pub compactions: u64,
    /// Compactions that only moved a file down a level (counter since
    /// open).
    pub trivial_moves: u64,
    /// Bytes read by compactions (counter since open).
    pub compaction_bytes_in: u64,
    /// Bytes written by compactions (counter since open).
    pub compaction_bytes_out: u64,
    /// Entries compaction dropped: shadowed versions, obsolete tombstones
    /// (counter since open).
    pub compaction_entries_dropped: u64,
    /// Time writers spent delayed or stopped (µs), including GC run by
    /// writes the value store refused for want of space (counter since
    /// open).
    pub write_stall_micros: u64,
    /// GC steps run by writes the value store refused for want of space
    /// (`Options::value_capacity`; counter since open).
    pub write_gc_steps: u64,
    /// Times such a write waited for readers (snapshots, iterators) older
    /// than a GC step to release the space the step retired (counter since
    /// open).
    pub write_waits_for_readers: u64,
    /// Snapshots alive (state).
    pub live_snapshots: usize,
    /// Value-store space estimates (state; `file_bytes` is allocated
    /// space).
    pub value_store: SpaceStats,
    /// Layout-specific value-store figures: positions and sizes (vLog head
    /// and tail, segment groups in use) are state; the GC tallies
    /// (`gc_runs`, `gc_bytes_read`, ...) count since open.
    pub value_store_figures: BTreeMap<String, u64>,
    /// Bytes the database directory occupies on the device (state; the sum
    /// of `files[..].allocated_bytes`).
    pub disk_bytes: u64,
    /// Background error that poisoned the database, if any.
    pub background_error: Option<String>,
}

/// Result of [`Db::verify`].
#[derive(Debug, Default)]
pub struct VerifyReport {
    /// SSTables checked.
    pub tables: usize,
    /// Entries read from SSTables.
    pub entries: u64,
    /// Manifest edits checked.
    pub manifest_edits: usize,
    /// WAL records checked.
    pub wal_records: usize,
    /// Value-store records checked.
    pub value_records: u64,
    /// Every fault found, each naming file and offset.
    pub faults: Vec<Error>,
}

impl Db {
    /// Opens (or creates) the database in directory `path`.
    ///
    /// An existing database opens with the configuration recorded when it
    /// was created (index, value layout, WAL mode) unless `opts` names one
    /// ([`Options::index`], [`Options::value_layout`]), which must then
    /// match; every other option may change at each open (the table in
    /// [`crate::options`] lists what is recorded). A new database gets the
    /// configuration `opts` names, `leveldb` (lsm + inline) when none.
    /// Recovery replays the write-ahead logs newer than the manifest's log
    /// number into SSTables, then starts a new log and manifest.
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
    /// - `ConfigMismatch`: `opts` names another configuration than the
    ///   recorded one;
    /// - `Busy`: another process or handle has it open;
    /// - `Corruption`: damaged manifest, `CURRENT` or WAL (file and offset);
    /// - `Io`: the file system failed.
    pub fn open(path: impl AsRef<Path>, opts: Options) -> Result<Db> {
        let dir = path.as_ref().to_path_buf();
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
        let lock = fs.lock(&lock_path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::WouldBlock {
                Error::Busy {
                    path: lock_path.clone(),
                }
            } else {
                Error::io(&lock_path, e)
            }
        })?;
        let opts = Self::direct_reads(opts, &lock_path)?;
        let fs = opts.fs.clone();
        let stats = Arc::new(IoStats::default());
        let fresh = Self::check_identity(&dir, fs.as_ref(), &opts, &stats)?;

        let block_cache = Arc::new(BlockCache::new(opts.block_cache_size));
        let table_cache = Arc::new(TableCache::new(
            dir.clone(),
            fs.clone(),
            stats.clone(),
            block_cache,
            opts.max_open_files,
        ));
        let picker = PickerConfig {
            levels: opts.num_levels,
            l0_trigger: opts.l0_compaction_trigger,
            max_bytes_base: opts.max_bytes_for_level_base,
            multiplier: opts.level_size_multiplier,
            target_file_size: opts.target_file_size,
        };
        let table_options = TableOptions {
            block_size: opts.block_size,
            restart_interval: opts.block_restart_interval,
            bloom_bits_per_key: opts.bloom_bits_per_key,
        };
        let versions = if fresh {
            VersionSet::create(&dir, fs.clone(), stats.clone(), opts.num_levels)
        } else {
            VersionSet::recover(&dir, fs.clone(), stats.clone(), opts.num_levels)?
        };
        let vstore: Arc<dyn ValueStore> = match opts.layout() {
            ValueLayout::Vlog => Arc::new(VlogStore::open(
                &dir,
                fs.clone(),
                stats.clone(),
                VlogOptions {
                    value_threshold: opts.value_threshold,
                    file_size: opts.vlog_file_size,
                    gc_chunk_size: opts.gc_chunk_size,
                    prefetch_threads: opts.prefetch_threads,
                    log_mode: !opts.wal,
                    capacity: opts.value_capacity,
                },
                versions.value_store_state.as_deref(),
            )?),
            ValueLayout::HashKv => Arc::new(HashKvStore::open(
                &dir,
                fs.clone(),
                stats.clone(),
                HashKvOptions::from_options(&opts),
                versions.value_store_state.as_deref(),
            )?),
            ValueLayout::Trie => Arc::new(crate::vstore::trie::TrieStore::open(
                &dir,
                fs.clone(),
                stats.clone(),
                crate::vstore::trie::TrieOptions::from_options(&opts),
            )?),
            _ => Arc::new(InlineStore),
        };
        let inner = Arc::new(DbInner {
            sv: RwLock::new(Arc::new(SuperVersion {
                mem: Arc::new(MemTable::new()),
                imm: None,
                version: versions.current(),
            })),
            last_seq: AtomicU64::new(versions.last_sequence),
            versions: Mutex::new(versions),
            dir,
            opts,
            fs,
            stats,
            table_cache,
            vstore,
            picker,
            table_options,
            writer: Mutex::new(None),
            commit: CommitQueue::default(),
            bg: Mutex::new(BgState::default()),
            bg_cv: Condvar::new(),
            snapshots: Arc::new(Mutex::new(BTreeMap::new())),
            counters: Counters::default(),
            recovered_seq: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            poison: Mutex::new(None),
            lock: Mutex::new(Some(lock)),
        });
        inner.recover_wals()?;
        inner.delete_obsolete_files();
        let bg_inner = inner.clone();
        let handle = std::thread::Builder::new()
            .name("sepkv-bg".into())
            .spawn(move || bg_inner.background_loop())
            .map_err(|e| Error::io(&inner.dir, e))?;
        let gc_handle =
            if inner.opts.layout() != ValueLayout::Inline && inner.opts.gc_garbage_ratio > 0.0 {
                let gc_inner = inner.clone();
                Some(
                    std::thread::Builder::new()
                        .name("sepkv-gc".into())
                        .spawn(move || gc_inner.gc_loop())
                        .map_err(|e| Error::io(&inner.dir, e))?,
                )
            } else {
                None
            };
        let db = Db {
            inner,
            bg_thread: Mutex::new(Some(handle)),
            gc_thread: Mutex::new(gc_handle),
        };
        db.inner.bg_cv.notify_all();
        Ok(db)
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
        let wanted = Identity {
            format: FORMAT_VERSION,
            index: opts.index_kind(),
            layout: opts.layout(),
            wal: Some(opts.wal),
        };
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
        &self.inner.opts
    }

    /// Reads or writes `IDENTITY`; returns true for a new database.
    fn check_identity(
        dir: &Path,
        fs: &dyn FileSystem,
        opts: &Options,
        stats: &IoStats,
    ) -> Result<bool> {
        let id_path = dir.join(IDENTITY);
        let wanted = Identity {
            format: FORMAT_VERSION,
            index: opts.index_kind(),
            layout: opts.layout(),
            wal: Some(opts.wal),
        };
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
            if fs.exists(&dir.join(CURRENT)) {
                return Ok(false);
            }
            // Created but crashed before its first manifest: start afresh if
            // nothing else was written.
            let names = fs.list(dir).ctx(dir)?;
            if names.iter().any(|n| {
                matches!(
                    filename::parse(n),
                    Some(FileKind::Table(_)) | Some(FileKind::Wal(_))
                )
            }) {
                return Err(Error::corruption(
                    dir.join(CURRENT),
                    0,
                    "CURRENT is missing",
                ));
            }
            return Ok(true);
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
        Ok(true)
    }

    fn check_open(&self) -> Result<()> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// Sets `key` to `value` (not synced; see [`Db::write`]). Keys and
    /// values are bytes: `&str`, `String`, `&[u8]`, `Vec<u8>`, arrays.
    ///
    /// # Errors
    /// `InvalidArgument` for an empty key, a key over
    /// [`crate::options::MAX_KEY_SIZE`] or a value over
    /// [`crate::options::MAX_VALUE_SIZE`] bytes; `Closed`; `Poisoned`; `Io`.
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        let mut b = WriteBatch::new();
        b.put(key, value)?;
        self.write(&b, WriteOptions::default())
    }

    /// Removes `key` (not synced). Removing a missing key is not an error.
    ///
    /// # Errors
    /// As [`Db::put`].
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete(key)?;
        self.write(&b, WriteOptions::default())
    }

    /// Applies `batch` atomically.
    ///
    /// # Errors
    /// `InvalidArgument` for a batch over [`crate::options::MAX_BATCH_SIZE`]
    /// bytes; `Closed`; `Poisoned` after an earlier failure; `Io` if the WAL
    /// append or sync fails (the write is then not acknowledged and the
    /// database is poisoned).
    pub fn write(&self, batch: &WriteBatch, opts: WriteOptions) -> Result<()> {
        self.write_with_sequence(batch, opts).map(|_| ())
    }

    /// [`Db::write`], returning the sequence number given to the batch's
    /// last entry (its entries have consecutive numbers ending there; an
    /// empty batch returns the current last sequence number).
    ///
    /// # Errors
    /// As [`Db::write`].
    pub fn write_with_sequence(&self, batch: &WriteBatch, opts: WriteOptions) -> Result<SeqNum> {
        self.check_open()?;
        if batch.is_empty() {
            // Nothing to log, but `sync` still promises that every earlier
            // write is durable when this returns.
            let last = self.last_sequence();
            if opts.sync {
                self.inner.make_durable(last)?;
            }
            return Ok(last);
        }
        if batch.approximate_size() > MAX_BATCH_SIZE {
            return Err(Error::InvalidArgument(format!(
                "batch of {} bytes exceeds the {MAX_BATCH_SIZE} byte limit",
                batch.approximate_size()
            )));
        }
        self.inner.write(batch, opts)
    }

    /// The value of `key` in the latest state, or `None`.
    ///
    /// # Errors
    /// `InvalidArgument` for an invalid key; `Closed`; `Corruption` (file
    /// and offset) when a block or record on the read path fails its
    /// checksum, or when the index points outside the value store's valid
    /// range; `Io`.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        self.get_opt(&ReadOptions::default(), key)
    }

    /// The values of `keys`, in order, all read at one sequence number
    /// (a snapshot taken for the call). Stops at the first error.
    ///
    /// # Examples
    /// ```
    /// # let dir = std::env::temp_dir().join(format!("sepkv-doc-mget-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir); // a leftover of an earlier run
    /// let db = sepkv::Db::open(&dir, sepkv::Options::default())?;
    /// db.put("a", "1")?;
    /// db.put("c", "3")?;
    /// let got = db.multi_get(["a", "b", "c"])?;
    /// assert_eq!(got, [Some(b"1".to_vec()), None, Some(b"3".to_vec())]);
    /// # drop(db);
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), sepkv::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Db::get`], for the first key that fails.
    pub fn multi_get<K: AsRef<[u8]>>(
        &self,
        keys: impl IntoIterator<Item = K>,
    ) -> Result<Vec<Option<Vec<u8>>>> {
        self.multi_get_opt(&ReadOptions::default(), keys)
    }

    /// [`Db::multi_get`] as of `opts.snapshot` (or one snapshot taken for
    /// the call).
    ///
    /// # Errors
    /// As [`Db::get`], for the first key that fails.
    pub fn multi_get_opt<K: AsRef<[u8]>>(
        &self,
        opts: &ReadOptions<'_>,
        keys: impl IntoIterator<Item = K>,
    ) -> Result<Vec<Option<Vec<u8>>>> {
        let own;
        let opts = match opts.snapshot {
            Some(_) => opts.clone(),
            None => {
                own = self.snapshot()?;
                ReadOptions {
                    snapshot: Some(&own),
                    ..opts.clone()
                }
            }
        };
        keys.into_iter().map(|k| self.get_opt(&opts, k)).collect()
    }

    /// The value of `key` as of `opts.snapshot` (or the latest state).
    ///
    /// # Errors
    /// As [`Db::get`].
    pub fn get_opt(
        &self,
        opts: &ReadOptions<'_>,
        key: impl AsRef<[u8]>,
    ) -> Result<Option<Vec<u8>>> {
        let key = key.as_ref();
        self.check_open()?;
        check_key(key)?;
        let inner = &self.inner;
        let ctx = ReadCtx {
            category: IoCategory::UserRead,
            fill_cache: !opts.dont_fill_cache,
        };
        let mut attempt = 0;
        let v = loop {
            match inner.lookup(key, opts.snapshot.map(|s| s.seq), ctx)? {
                Lookup::NotFound | Lookup::Deleted => break None,
                Lookup::Found(ValueType::Pointer, p) => {
                    let ptr = ValuePointer::decode(&p).ok_or_else(|| {
                        Error::corruption(&inner.dir, 0, "malformed value pointer in index")
                    })?;
                    let r = inner.vstore.read(key, &ptr);
                    // GC may have moved the value and freed its old place
                    // between the lookup and the read: look up again. The
                    // same pointer twice means the answer stands.
                    let moved = matches!(r, Ok(None) | Err(Error::Corruption { .. }))
                        && attempt < 3
                        && opts.snapshot.is_none()
                        && inner.current_pointer(key).ok().flatten() != Some(ptr);
                    if moved {
                        attempt += 1;
                        continue;
                    }
                    // A pointer outside the store's valid range is damage:
                    // recovery never admits one (the same rule as scans).
                    break Some(r?.ok_or_else(|| crate::iterator::lost(&ptr))?);
                }
                Lookup::Found(_, v) => break Some(v),
            }
        };
        if let Some(v) = &v {
            inner
                .counters
                .user_bytes_read
                .fetch_add(v.len() as u64, Ordering::Relaxed);
        }
        Ok(v)
    }

    /// Takes a snapshot of the current state: a read view with `get`,
    /// `multi_get`, `scan` and `iter` of its own (see [`Snapshot`]).
    ///
    /// # Errors
    /// `Closed`.
    pub fn snapshot(&self) -> Result<Snapshot<'_>> {
        self.check_open()?;
        Ok(Snapshot::new(self, self.register_snapshot(None)))
    }

    fn register_snapshot(&self, seq: Option<SeqNum>) -> SnapshotPin {
        SnapshotPin::register(&self.inner.snapshots, seq, || {
            self.inner.last_seq.load(Ordering::Acquire)
        })
    }

    /// Runs value-store garbage collection in the calling thread until the
    /// estimated garbage ratio is at most `target`, or — with `None` — for
    /// one pass over everything written before the call (reclaiming all
    /// that is reclaimable). A no-op for the inline layout.
    ///
    /// # Errors
    /// `Closed`; `Poisoned`; `Io`; `Corruption` found in the scanned log.
    pub fn gc(&self, target: Option<f64>) -> Result<GcReport> {
        self.check_open()?;
        self.inner.poisoned()?;
        let inner = &self.inner;
        let budget = {
            let sp = inner.vstore.space();
            sp.live_bytes + sp.garbage_bytes
        };
        let mut rep = GcReport::default();
        loop {
            if target.is_some_and(|t| inner.vstore.space().garbage_ratio() <= t) {
                break;
            }
            if target.is_none() && rep.bytes_read >= budget && rep.steps > 0 {
                break;
            }
            let out: GcOutcome = inner.gc_step()?;
            if !out.did_work {
                break;
            }
            rep.steps += 1;
            rep.bytes_read += out.bytes_read;
            rep.bytes_rewritten += out.bytes_rewritten;
            rep.bytes_freed += out.bytes_freed;
        }
        rep.garbage_ratio = inner.vstore.space().garbage_ratio();
        Ok(rep)
    }

    /// A cursor over the whole key space (see [`DbIterator`]).
    ///
    /// # Errors
    /// `Closed`.
    pub fn iter(&self, opts: &ReadOptions<'_>) -> Result<DbIterator> {
        self.iter_bounds(opts, None, None)
    }

    /// A cursor over the keys of `range` (any Rust range of keys; see
    /// [`KeyRange`]): `..`, `"a".."m"`, `"a"..=key`, ...
    ///
    /// # Examples
    /// ```
    /// # let dir = std::env::temp_dir().join(format!("sepkv-doc-iterrange-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir); // a leftover of an earlier run
    /// let db = sepkv::Db::open(&dir, sepkv::Options::default())?;
    /// for k in ["a", "b", "c"] {
    ///     db.put(k, k)?;
    /// }
    /// let mut it = db.iter_range(&sepkv::ReadOptions::default(), "b"..)?;
    /// it.seek_to_last();
    /// assert_eq!(it.key(), b"c");
    /// it.prev();
    /// assert_eq!(it.key(), b"b");
    /// it.prev();
    /// assert!(!it.valid());
    /// it.status()?;
    /// # drop(it);
    /// # drop(db);
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), sepkv::Error>(())
    /// ```
    ///
    /// # Errors
    /// `Closed`; `InvalidArgument` when the range starts after it ends.
    pub fn iter_range(&self, opts: &ReadOptions<'_>, range: impl KeyRange) -> Result<DbIterator> {
        let (lower, upper) = range.half_open();
        self.iter_bounds(opts, lower, upper)
    }

    /// A cursor over `[lower, upper)` (`None` = unbounded).
    fn iter_bounds(
        &self,
        opts: &ReadOptions<'_>,
        lower: Option<Vec<u8>>,
        upper: Option<Vec<u8>>,
    ) -> Result<DbIterator> {
        self.check_open()?;
        check_order(lower.as_deref(), upper.as_deref())?;
        let inner = &self.inner;
        // The iterator holds a snapshot of its own, so value-store GC keeps
        // every value it can reach.
        let snap = self.register_snapshot(opts.snapshot.map(|s| s.seq));
        let seq = snap.seq;
        let sv = inner.sv.read().clone();
        let ctx = ReadCtx {
            category: IoCategory::UserRead,
            fill_cache: !opts.dont_fill_cache,
        };
        let mut children: Vec<Box<dyn InternalIterator>> = vec![Box::new(sv.mem.iter())];
        if let Some(imm) = &sv.imm {
            children.push(Box::new(imm.iter()));
        }
        for f in sv.version.files[0].iter().rev() {
            let t = inner
                .table_cache
                .get(f.number, f.size, IoCategory::UserRead)?;
            children.push(Box::new(t.iter(ctx)));
        }
        for files in sv.version.files.iter().skip(1) {
            if !files.is_empty() {
                children.push(Box::new(LevelIterator::new(
                    files.clone(),
                    inner.table_cache.clone(),
                    ctx,
                )));
            }
        }
        Ok(DbIterator::new(
            MergingIterator::new(children),
            seq,
            inner.vstore.clone(),
            Box::new((sv, snap)),
            lower,
            upper,
        ))
    }

    /// `(key, value)` pairs of `range` (any Rust range of keys; see
    /// [`KeyRange`]) in key order, or in reverse, as a Rust iterator.
    ///
    /// # Examples
    /// ```
    /// # let dir = std::env::temp_dir().join(format!("sepkv-doc-scan-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir); // a leftover of an earlier run
    /// let db = sepkv::Db::open(&dir, sepkv::Options::default())?;
    /// for (k, v) in [("a", "1"), ("b", "2"), ("c", "3")] {
    ///     db.put(k, v)?;
    /// }
    /// let pairs: Vec<(Vec<u8>, Vec<u8>)> = db.scan("b".., true)?.collect::<Result<_, _>>()?;
    /// assert_eq!(pairs, [(b"c".to_vec(), b"3".to_vec()), (b"b".to_vec(), b"2".to_vec())]);
    /// # drop(db);
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), sepkv::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Db::iter_range`]; errors met during the scan are yielded.
    pub fn scan(&self, range: impl KeyRange, reverse: bool) -> Result<Scan> {
        self.scan_opt(&ReadOptions::default(), range, reverse)
    }

    /// [`Db::scan`] with read options: as of `opts.snapshot`, and without
    /// filling the block cache with `opts.dont_fill_cache`.
    ///
    /// # Errors
    /// As [`Db::scan`].
    pub fn scan_opt(
        &self,
        opts: &ReadOptions<'_>,
        range: impl KeyRange,
        reverse: bool,
    ) -> Result<Scan> {
        Ok(Scan::new(
            self.iter_range(opts, range)?,
            reverse,
            self.inner.opts.scan_prefetch_depth,
        ))
    }

    /// Flushes the memtable to an SSTable and waits for it.
    ///
    /// # Errors
    /// `Closed`; `Poisoned`; `Io`.
    pub fn flush(&self) -> Result<()> {
        self.check_open()?;
        self.inner.flush_memtable()
    }

    /// Waits until background work is done: no memtable waits for its flush
    /// and no level needs compaction. Benchmarks call it between phases so
    /// one phase's compaction debt is not billed to the next.
    ///
    /// # Errors
    /// `Closed`; `Poisoned` when background work failed.
    pub fn wait_idle(&self) -> Result<()> {
        self.check_open()?;
        let inner = &self.inner;
        let mut bg = inner.bg.lock();
        loop {
            if let Some(e) = &bg.error {
                return Err(Error::Poisoned(e.to_string()));
            }
            let sv = inner.sv.read().clone();
            let busy = sv.imm.is_some()
                || picker::scores(&sv.version, &inner.picker)
                    .iter()
                    .any(|&s| s >= 1.0);
            if !busy {
                return Ok(());
            }
            if bg.shutting_down {
                return Err(Error::Closed);
            }
            inner.bg_cv.notify_all();
            inner.bg_cv.wait_for(&mut bg, Duration::from_millis(50));
        }
    }

    /// Compacts the keys of `range` (any Rust range of keys, `..` for all;
    /// see [`KeyRange`]) down to the bottommost level that holds data
    /// there, as RocksDB's `CompactRange` does: flushes the memtable, merges
    /// each level's files in the range into the next level down to that
    /// level (level 0 goes at least to level 1), then rewrites the files of
    /// that level the merges did not produce. Afterwards no level-0 file
    /// overlaps the range and, unless a snapshot still needs them or a
    /// deeper level holds the key outside the compacted files, no
    /// tombstone and no overwritten version in the range remains (their
    /// value-store space becomes garbage for GC). An exclusive end is
    /// compacted as if inclusive. Blocks until done; writes go on
    /// meanwhile, and what they add after the flush stays where it lands.
    ///
    /// Returns what the compactions did: files and bytes in and out,
    /// entries and tombstones dropped.
    ///
    /// # Examples
    /// ```
    /// # let dir = std::env::temp_dir().join(format!("sepkv-doc-compact-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir); // a leftover of an earlier run
    /// let db = sepkv::Db::open(&dir, sepkv::Options::default())?;
    /// db.put("a", "1")?;
    /// db.flush()?;
    /// db.delete("a")?;
    /// let done = db.compact_range(..)?;
    /// assert_eq!(done.tombstones_dropped, 1);
    /// let stats = db.stats()?;
    /// assert_eq!(stats.levels.iter().map(|l| l.files).sum::<usize>(), 0);
    /// # drop(db);
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), sepkv::Error>(())
    /// ```
    ///
    /// # Errors
    /// `Closed`; `InvalidArgument` when the range starts after it ends;
    /// `Poisoned`; `Io`; `Corruption` met while merging.
    pub fn compact_range(&self, range: impl KeyRange) -> Result<CompactionStats> {
        self.check_open()?;
        let (begin, end) = range.closed();
        let (begin, end) = (begin.as_deref(), end.as_deref());
        check_order(begin, end)?;
        let inner = &self.inner;
        inner.flush_memtable()?;
        // Files numbered from here on are outputs of this call.
        let first_new = inner.versions.lock().next_file_number;
        let mut total = CompactionStats::default();
        for level in 0..inner.opts.num_levels {
            let v = inner.sv.read().version.clone();
            let deepest = (0..inner.opts.num_levels)
                .filter(|&l| !v.overlapping(l, begin, end).is_empty())
                .max();
            let Some(deepest) = deepest else {
                break;
            };
            // Level 0 files overlap one another: they always go down.
            let bottom = deepest.max(1);
            if level < bottom {
                if !v.overlapping(level, begin, end).is_empty() {
                    total.add(&inner.run_manual(level, false, begin, end)?);
                }
                continue;
            }
            // The bottommost level: rewrite it in place when it holds files
            // no merge of this call produced (they may keep tombstones and
            // old versions an earlier compaction had to keep).
            let stale = v
                .overlapping(bottom, begin, end)
                .iter()
                .any(|f| f.number < first_new);
            if stale {
                total.add(&inner.run_manual(bottom, true, begin, end)?);
            }
            break;
        }
        Ok(total)
    }

    /// Checks every live SSTable (every block and checksum), the manifest
    /// and the current WAL. Faults are collected, not returned as errors.
    ///
    /// # Errors
    /// `Closed`.
    pub fn verify(&self) -> Result<VerifyReport> {
        self.check_open()?;
        Ok(self.inner.verify())
    }

    /// A report of the database's state and I/O.
    ///
    /// # Errors
    /// `Closed`.
    pub fn stats(&self) -> Result<DbStats> {
        self.check_open()?;
        Ok(self.inner.stats())
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
        self.inner.last_seq.load(Ordering::Acquire)
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.inner.dir
    }

    /// Stops background work, syncs the WAL and releases the lock. Later
    /// calls on this handle fail with [`Error::Closed`]; closing twice is
    /// not an error.
    ///
    /// # Errors
    /// `Io` if the final WAL sync fails (the lock is released anyway).
    pub fn close(&self) -> Result<()> {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        {
            let mut bg = self.inner.bg.lock();
            bg.shutting_down = true;
        }
        self.inner.bg_cv.notify_all();
        if let Some(h) = self.bg_thread.lock().take() {
            let _ = h.join();
        }
        if let Some(h) = self.gc_thread.lock().take() {
            let _ = h.join();
        }
        let res = match self.inner.writer.lock().as_mut() {
            Some(w) if self.inner.poison.lock().is_none() => {
                self.inner.vstore.sync().and_then(|_| w.wal.sync())
            }
            _ => Ok(()),
        };
        *self.inner.writer.lock() = None;
        *self.inner.lock.lock() = None;
        res
    }
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("path", &self.inner.dir)
            .field("options", &self.inner.opts)
            .finish_non_exhaustive()
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

impl DbInner {
    fn poisoned(&self) -> Result<()> {
        if let Some(p) = self.poison.lock().as_ref() {
            return Err(Error::Poisoned(p.clone()));
        }
        Ok(())
    }

    fn set_poison(&self, e: &Error) {
        let mut p = self.poison.lock();
        if p.is_none() {
            *p = Some(e.to_string());
        }
    }

    /// Commits `batch` through the group-commit queue ([`crate::commit`]).
    fn write(&self, batch: &WriteBatch, opts: WriteOptions) -> Result<SeqNum> {
        self.commit
            .commit(batch, opts.sync, |g| self.write_group(g))
    }

    /// Writes a whole commit group as one batch; returns each member's last
    /// sequence number. When the value store stays full after GC, the
    /// members are written one by one, so that those without separated
    /// values (deletes, small values) still go through.
    fn write_group(&self, g: &Group) -> Vec<Result<SeqNum>> {
        let n = g.members.len();
        match self.write_batch(&g.batch, g.sync) {
            Ok(last) => {
                let mut end = last + 1 - g.batch.len() as u64;
                g.members
                    .iter()
                    .map(|&m| {
                        end += m as u64;
                        Ok(end - 1)
                    })
                    .collect()
            }
            Err(Error::ValueStoreFull(_)) if n > 1 => match g.batch.split(&g.members) {
                Ok(bs) => bs.iter().map(|b| self.write_batch(b, g.sync)).collect(),
                Err(e) => vec![Err(e); n],
            },
            Err(e) => vec![Err(e); n],
        }
    }

    /// Writes one batch: room, value separation (GC first when the value
    /// store refuses it), WAL, memtable, publish — all under the writer
    /// lock, which GC's `wait_in_flight_writes` relies on.
    fn write_batch(&self, batch: &WriteBatch, sync: bool) -> Result<SeqNum> {
        let mut guard = self.writer.lock();
        let user_bytes = batch.user_bytes();
        let mut room = RoomGc::default();
        loop {
            self.poisoned()?;
            let Some(w) = guard.as_mut() else {
                return Err(Error::Closed);
            };
            self.make_room(w, false)?;

            // Separate large values into the value store (never for
            // `inline`); in log mode the value log records every entry.
            let prepared = if !self.opts.wal {
                Some(self.log_entries(batch))
            } else if self.vstore.separates(batch.max_value_len()) {
                Some(self.separate_values(batch))
            } else {
                None
            };
            let prepared = match prepared {
                Some(Err(Error::ValueStoreFull(msg))) => {
                    // The append would pass `value_capacity`: GC first
                    // (HashKV §4.1 setup), with the writer lock released so
                    // that GC can install its relocations; then retry.
                    let t = Instant::now();
                    let more = MutexGuard::unlocked(&mut guard, || self.gc_for_room(&mut room));
                    self.note_stall(t);
                    if !more? {
                        return Err(Error::ValueStoreFull(msg));
                    }
                    continue;
                }
                // Anything else may have left part of the batch in the
                // value store, out of step with the index: refuse further
                // writes.
                Some(Err(e)) => {
                    self.set_poison(&e);
                    return Err(e);
                }
                Some(Ok(b)) => Some(b),
                None => None,
            };
            let seq = self.write_locked(w, prepared.as_ref().unwrap_or(batch), sync)?;
            self.counters
                .user_bytes_written
                .fetch_add(user_bytes, Ordering::Relaxed);
            return Ok(seq);
        }
    }

    /// One round of GC for a write the value store refused for want of
    /// space; called without the writer lock. Returns false once retrying
    /// is pointless: GC has read as many bytes as the store held when the
    /// write was first refused (a whole pass) without making room, or it
    /// has nothing to do even after a memtable flush (in log mode GC stops
    /// at the replay checkpoint, which a flush moves) — unless space GC
    /// retired is held for readers, which it waits for first.
    fn gc_for_room(&self, room: &mut RoomGc) -> Result<bool> {
        let start = *room.start_bytes.get_or_insert_with(|| {
            let space = self.vstore.space();
            space.live_bytes + space.garbage_bytes
        });
        if room.read > start {
            return self.wait_for_readers(room);
        }
        let out = self.gc_step()?;
        self.counters.write_gc_steps.fetch_add(1, Ordering::Relaxed);
        room.read += out.bytes_read.max(1);
        if !out.did_work {
            if room.flushed {
                return self.wait_for_readers(room);
            }
            room.flushed = true;
            self.flush_memtable()?;
        }
        Ok(true)
    }

    /// For a write whose GC made no room: while the value store holds
    /// space GC retired for readers older than the GC
    /// (`ValueStore::pinned_bytes`), waits until the oldest reader is gone
    /// — at most [`ROOM_WAIT`], as a reader may belong to the writing
    /// thread — and lets the write's GC start over, which frees that space.
    /// False when nothing is held, the reader stays, or the database closes.
    fn wait_for_readers(&self, room: &mut RoomGc) -> Result<bool> {
        if self.vstore.pinned_bytes() == 0 {
            return Ok(false);
        }
        self.counters
            .write_reader_waits
            .fetch_add(1, Ordering::Relaxed);
        let oldest = self.smallest_snapshot();
        let since = Instant::now();
        while self.smallest_snapshot() == oldest && oldest < self.last_seq.load(Ordering::Acquire) {
            self.poisoned()?;
            if since.elapsed() >= ROOM_WAIT || self.bg.lock().shutting_down {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        *room = RoomGc::default();
        Ok(true)
    }

    /// Logs and applies a prepared batch; returns its last sequence number.
    /// Called with the writer lock held and room made.
    fn write_locked(&self, w: &mut Writer, batch: &WriteBatch, sync: bool) -> Result<SeqNum> {
        let seq = self.last_seq.load(Ordering::Relaxed) + 1;
        let n = batch.len() as u64;
        batch.encode_into(seq, &mut w.scratch);
        let res = if self.opts.wal {
            w.wal.add_record(&w.scratch).and_then(|_| {
                if sync {
                    self.vstore.sync()?;
                    w.wal.sync()
                } else {
                    w.wal.flush()
                }
            })
        } else if sync {
            // Log mode: the value log holds the batch already.
            self.vstore.sync()
        } else {
            Ok(())
        };
        if let Err(e) = res {
            self.set_poison(&e);
            return Err(e);
        }
        if sync {
            w.synced_seq = seq + n - 1;
        }
        let mem = self.sv.read().mem.clone();
        for (i, e) in batch.entries().enumerate() {
            let e = e?;
            mem.add(seq + i as u64, e.vtype, e.key, e.value);
        }
        self.last_seq.store(seq + n - 1, Ordering::Release);
        Ok(seq + n - 1)
    }

    /// Newest version of `key` visible at `seq`, or — with `None` — in the
    /// latest state.
    ///
    /// The super-version is taken before the latest sequence number is
    /// loaded: the other order lets a compaction installed in between drop
    /// the version visible at the loaded sequence (it keeps only what the
    /// oldest snapshot, or the then latest sequence, can see), and the read
    /// would miss the key. Pinned first, the version's files stay as they
    /// were, and a newer sequence only adds writes the pinned memtables may
    /// or may not hold — writes that raced the read.
    fn lookup(&self, key: &[u8], seq: Option<SeqNum>, ctx: ReadCtx) -> Result<Lookup> {
        let sv = self.sv.read().clone();
        let seq = seq.unwrap_or_else(|| self.last_seq.load(Ordering::Acquire));
        let mut r = sv.mem.get(key, seq);
        if r == Lookup::NotFound {
            if let Some(imm) = &sv.imm {
                r = imm.get(key, seq);
            }
        }
        if r == Lookup::NotFound {
            r = sv.version.get(&self.table_cache, key, seq, ctx)?;
        }
        Ok(r)
    }

    /// Runs one value-store GC step. The parts GC writes through decide
    /// what a failure means: a failed WAL write, index sync or manifest
    /// edit poisons the database (`relocate`, `make_durable`,
    /// `persist_state`), and a layout whose own write or fsync failed
    /// refuses every later append and sync, since retrying an fsync after a
    /// failure is unsafe. Other failures (a segment that could not be
    /// removed, damage found in the scanned range) leave the store as it was
    /// and may be retried. A panic in the layout's GC leaves its state
    /// unknown: it poisons the database and is reported as an error, so the
    /// thread that ran it (a writer, `Db::gc` or the GC thread) does not die
    /// silently.
    fn gc_step(&self) -> Result<GcOutcome> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.vstore.gc_step(self, self)
        }))
        .unwrap_or_else(|_| {
            let e = Error::Poisoned("value-store GC panicked".into());
            self.set_poison(&e);
            Err(e)
        })
    }

    /// Background value-store GC: runs steps while the estimated garbage
    /// ratio is at or above `Options::gc_garbage_ratio`.
    fn gc_loop(self: Arc<Self>) {
        loop {
            {
                let mut bg = self.bg.lock();
                if bg.shutting_down {
                    return;
                }
                self.bg_cv.wait_for(&mut bg, Duration::from_millis(200));
                if bg.shutting_down || bg.error.is_some() {
                    return;
                }
            }
            if self.poison.lock().is_some() {
                return;
            }
            let ratio = self.opts.gc_garbage_ratio;
            while self.vstore.space().garbage_ratio() >= ratio {
                if self.bg.lock().shutting_down {
                    return;
                }
                match self.gc_step() {
                    Ok(out) if out.did_work => {}
                    Ok(_) => break,
                    Err(Error::Closed) => return,
                    // A failure that poisoned the database ends background
                    // GC; any other (a segment that could not be removed)
                    // is retried at the next round.
                    Err(e) if self.poison.lock().is_some() => {
                        self.bg.lock().error = Some(e);
                        return;
                    }
                    Err(_) => break,
                }
            }
        }
    }

    /// Log mode (WiscKey §3.4.2): appends every entry of `batch` to the
    /// value log, which is then the only log; returns the index batch
    /// (separated values replaced by pointers). Writer lock held.
    fn log_entries(&self, batch: &WriteBatch) -> Result<WriteBatch> {
        let entries: Vec<_> = batch.entries().collect::<Result<_>>()?;
        let seq0 = self.last_seq.load(Ordering::Relaxed) + 1;
        let log: Vec<LogEntry<'_>> = entries
            .iter()
            .enumerate()
            .map(|(i, e)| LogEntry {
                vtype: e.vtype,
                separate: e.vtype == ValueType::Value && self.vstore.separates(e.value.len()),
                key: e.key,
                seq: seq0 + i as u64,
                value: e.value,
            })
            .collect();
        let ptrs = match self.vstore.log_batch(&log) {
            Ok(p) => p,
            // Refused before anything was written: the engine runs GC.
            Err(e @ Error::ValueStoreFull(_)) => return Err(e),
            Err(e) => {
                self.set_poison(&e);
                return Err(e);
            }
        };
        let mut out = WriteBatch::new();
        for (e, p) in entries.iter().zip(ptrs) {
            match p {
                Some(p) => out.push(ValueType::Pointer, e.key, &p.encode()),
                None => out.push(e.vtype, e.key, e.value),
            }
        }
        Ok(out)
    }

    fn separate_values(&self, batch: &WriteBatch) -> Result<WriteBatch> {
        let entries: Vec<_> = batch.entries().collect::<Result<_>>()?;
        let seq0 = self.last_seq.load(Ordering::Relaxed) + 1;
        let records: Vec<ValueRecord<'_>> = entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.vtype == ValueType::Value && self.vstore.separates(e.value.len()))
            .map(|(i, e)| ValueRecord {
                key: e.key,
                seq: seq0 + i as u64,
                value: e.value,
            })
            .collect();
        let ptrs = self.vstore.append(&records)?;
        let mut ptrs = ptrs.into_iter();
        let mut out = WriteBatch::new();
        for e in &entries {
            if e.vtype == ValueType::Value && self.vstore.separates(e.value.len()) {
                let p = ptrs.next().ok_or_else(|| {
                    Error::InvalidArgument("value store returned too few pointers".into())
                })?;
                out.push(ValueType::Pointer, e.key, &p.encode());
            } else {
                out.push(e.vtype, e.key, e.value);
            }
        }
        Ok(out)
    }

    /// Makes room in the memtable; with `force`, freezes a non-empty
    /// memtable even if it is not full. Called with the writer lock held.
    fn make_room(&self, w: &mut Writer, mut force: bool) -> Result<()> {
        let mut allow_delay = !force;
        loop {
            if let Some(e) = self.bg.lock().error.clone() {
                return Err(Error::Poisoned(e.to_string()));
            }
            let sv = self.sv.read().clone();
            let l0 = sv.version.files[0].len();
            if allow_delay && l0 >= self.opts.l0_slowdown_writes_trigger {
                // Spread the delay over writes instead of stalling one for
                // seconds when level 0 hits the stop trigger.
                let t = Instant::now();
                std::thread::sleep(Duration::from_millis(1));
                self.note_stall(t);
                allow_delay = false;
                continue;
            }
            if !force && sv.mem.approximate_bytes() < self.opts.write_buffer_size {
                return Ok(());
            }
            if force && sv.mem.is_empty() {
                return Ok(());
            }
            if sv.imm.is_some() || l0 >= self.opts.l0_stop_writes_trigger {
                let t = Instant::now();
                let mut bg = self.bg.lock();
                // Once `close` has begun the background thread stops
                // flushing: waiting for it would wait forever (and `close`
                // for this writer's lock).
                if bg.shutting_down {
                    return Err(Error::Closed);
                }
                self.bg_cv.notify_all();
                let still = {
                    let cur = self.sv.read();
                    cur.imm.is_some()
                        || cur.version.files[0].len() >= self.opts.l0_stop_writes_trigger
                };
                if still && bg.error.is_none() {
                    self.bg_cv.wait_for(&mut bg, Duration::from_millis(100));
                }
                drop(bg);
                self.note_stall(t);
                continue;
            }
            // Freeze the memtable and start a new WAL. The old WAL is synced
            // first so that a later synced write never sits behind a hole.
            if let Err(e) = self.vstore.sync().and_then(|_| w.wal.sync()) {
                self.set_poison(&e);
                return Err(e);
            }
            w.synced_seq = self.last_seq.load(Ordering::Acquire);
            let number = self.versions.lock().new_file_number();
            let path = filename::wal_path(&self.dir, number);
            let created = self
                .fs
                .create(&path)
                .ctx(&path)
                .and_then(|f| self.fs.sync_dir(&self.dir).ctx(&self.dir).map(|_| f));
            let file = match created {
                Ok(f) => f,
                Err(e) => {
                    self.set_poison(&e);
                    return Err(e);
                }
            };
            w.wal = RecordWriter::new(file, path, self.stats.clone(), IoCategory::Wal);
            w.wal_number = number;
            {
                let mut bg = self.bg.lock();
                bg.imm_log_number = number;
                bg.imm_log_position = self.vstore.log_position();
                let mut cur = self.sv.write();
                *cur = Arc::new(SuperVersion {
                    mem: Arc::new(MemTable::new()),
                    imm: Some(cur.mem.clone()),
                    version: cur.version.clone(),
                });
            }
            self.bg_cv.notify_all();
            force = false;
        }
    }

    fn note_stall(&self, since: Instant) {
        self.counters
            .stall_micros
            .fetch_add(since.elapsed().as_micros() as u64, Ordering::Relaxed);
    }

    fn flush_memtable(&self) -> Result<()> {
        {
            let mut guard = self.writer.lock();
            self.poisoned()?;
            let Some(w) = guard.as_mut() else {
                return Err(Error::Closed);
            };
            self.make_room(w, true)?;
        }
        let mut bg = self.bg.lock();
        loop {
            if let Some(e) = &bg.error {
                return Err(Error::Poisoned(e.to_string()));
            }
            if self.sv.read().imm.is_none() {
                return Ok(());
            }
            if bg.shutting_down {
                return Err(Error::Closed);
            }
            self.bg_cv.notify_all();
            self.bg_cv.wait_for(&mut bg, Duration::from_millis(100));
        }
    }

    fn run_manual(
        &self,
        level: usize,
        in_place: bool,
        begin: Option<&[u8]>,
        end: Option<&[u8]>,
    ) -> Result<CompactionStats> {
        let mut bg = self.bg.lock();
        // Wait for another manual compaction to finish.
        while bg.manual.as_ref().is_some_and(|m| !m.done) {
            if let Some(e) = &bg.error {
                return Err(Error::Poisoned(e.to_string()));
            }
            self.bg_cv.wait_for(&mut bg, Duration::from_millis(100));
        }
        bg.manual = Some(ManualCompaction {
            level,
            in_place,
            begin: begin.map(|b| b.to_vec()),
            end: end.map(|e| e.to_vec()),
            done: false,
            stats: CompactionStats::default(),
        });
        self.bg_cv.notify_all();
        loop {
            if let Some(e) = bg.error.clone() {
                bg.manual = None;
                return Err(Error::Poisoned(e.to_string()));
            }
            if bg.manual.as_ref().is_none_or(|m| m.done) {
                let stats = bg.manual.take().map(|m| m.stats).unwrap_or_default();
                self.bg_cv.notify_all();
                return Ok(stats);
            }
            if bg.shutting_down {
                return Err(Error::Closed);
            }
            self.bg_cv.wait_for(&mut bg, Duration::from_millis(100));
        }
    }

    fn background_loop(self: Arc<Self>) {
        loop {
            {
                let mut bg = self.bg.lock();
                loop {
                    if bg.shutting_down {
                        return;
                    }
                    if bg.error.is_none() {
                        let sv = self.sv.read().clone();
                        let manual = bg.manual.as_ref().is_some_and(|m| !m.done);
                        let auto = picker::scores(&sv.version, &self.picker)
                            .iter()
                            .any(|&s| s >= 1.0);
                        if sv.imm.is_some() || manual || auto {
                            break;
                        }
                    }
                    self.bg_cv.wait_for(&mut bg, Duration::from_millis(500));
                }
            }
            // A panic here is a bug; turn it into a background error so
            // writers waiting on this thread fail instead of hanging.
            let step =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.background_step()))
                    .unwrap_or_else(|_| Err(Error::Poisoned("background thread panicked".into())));
            if let Err(e) = step {
                self.set_poison(&e);
                self.bg.lock().error = Some(e);
            }
            let _g = self.bg.lock();
            self.bg_cv.notify_all();
        }
    }

    fn job_context<'a>(&'a self, next: &'a mut dyn FnMut() -> u64) -> JobContext<'a> {
        JobContext {
            dir: &self.dir,
            fs: self.fs.as_ref(),
            stats: &self.stats,
            table_cache: &self.table_cache,
            table_options: self.table_options.clone(),
            picker: self.picker,
            vstore: self.vstore.as_ref(),
            new_file_number: next,
        }
    }

    fn background_step(&self) -> Result<()> {
        let sv = self.sv.read().clone();
        if let Some(imm) = sv.imm.clone() {
            return self.flush_imm(&imm);
        }
        let manual = {
            let bg = self.bg.lock();
            bg.manual
                .as_ref()
                .filter(|m| !m.done)
                .map(|m| (m.level, m.in_place, m.begin.clone(), m.end.clone()))
        };
        if let Some((level, in_place, begin, end)) = manual {
            let v = self.versions.lock().current();
            let (b, e) = (begin.as_deref(), end.as_deref());
            let inputs = if in_place {
                picker::pick_in_place(&v, &self.picker, level, b, e)
            } else {
                picker::pick_range(&v, &self.picker, level, b, e)
            };
            let stats = match inputs {
                Some(inputs) => self.compact(v, &inputs)?,
                None => CompactionStats::default(),
            };
            if let Some(m) = self.bg.lock().manual.as_mut() {
                m.done = true;
                m.stats = stats;
            }
            return Ok(());
        }
        let (v, choice) = {
            let vs = self.versions.lock();
            let v = vs.current();
            let ptrs: Vec<Option<&[u8]>> = (0..self.opts.num_levels)
                .map(|l| vs.compact_pointer(l))
                .collect();
            let c = picker::pick(&v, &self.picker, &ptrs);
            (v, c)
        };
        match choice {
            Choice::Nothing => Ok(()),
            Choice::Move { level, file } => {
                let mut edit = VersionEdit::default();
                edit.deleted.push((level, file.number));
                edit.added.push((level + 1, (*file).clone()));
                edit.compact_pointers.push((level, file.largest.clone()));
                self.install(&mut edit)?;
                self.counters.trivial_moves.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Choice::Merge(inputs) => self.compact(v, &inputs).map(|_| ()),
        }
    }

    fn smallest_snapshot(&self) -> SeqNum {
        let l = self.snapshots.lock();
        l.keys()
            .next()
            .copied()
            .unwrap_or_else(|| self.last_seq.load(Ordering::Acquire))
    }

    /// Runs a compaction of `inputs` picked from `v`. Takes `v` by value so
    /// that it is released before obsolete files are deleted (a version still
    /// held keeps its files alive).
    fn compact(
        &self,
        v: Arc<Version>,
        inputs: &picker::CompactionInputs,
    ) -> Result<CompactionStats> {
        let smallest = self.smallest_snapshot();
        let mut next = || self.versions.lock().new_file_number();
        let mut ctx = self.job_context(&mut next);
        let (mut edit, st): (VersionEdit, CompactionStats) =
            run_compaction(&mut ctx, &v, inputs, smallest)?;
        drop(v);
        self.install(&mut edit)?;
        let c = &self.counters;
        c.compactions.fetch_add(1, Ordering::Relaxed);
        c.compaction_bytes_in
            .fetch_add(st.bytes_in, Ordering::Relaxed);
        c.compaction_bytes_out
            .fetch_add(st.bytes_out, Ordering::Relaxed);
        c.compaction_entries_dropped
            .fetch_add(st.dropped, Ordering::Relaxed);
        self.delete_obsolete_files();
        Ok(st)
    }

    /// Logs `edit`, then publishes the new version to readers.
    fn install(&self, edit: &mut VersionEdit) -> Result<()> {
        let v = {
            let mut vs = self.versions.lock();
            vs.log_and_apply(edit)?;
            vs.current()
        };
        let mut cur = self.sv.write();
        *cur = Arc::new(SuperVersion {
            mem: cur.mem.clone(),
            imm: cur.imm.clone(),
            version: v,
        });
        Ok(())
    }

    fn flush_imm(&self, imm: &Arc<MemTable>) -> Result<()> {
        let (log_number, log_pos) = {
            let bg = self.bg.lock();
            (bg.imm_log_number, bg.imm_log_position)
        };
        let mut next = || self.versions.lock().new_file_number();
        let mut ctx = self.job_context(&mut next);
        let files = flush_to_tables(&mut ctx, &mut imm.iter())?;
        let mut edit = VersionEdit {
            log_number: Some(log_number),
            ..Default::default()
        };
        let v = self.versions.lock().current();
        for f in files {
            let level = picker::level_for_flush(
                &v,
                &self.picker,
                crate::index::key::user_key(&f.smallest),
                crate::index::key::user_key(&f.largest),
            );
            edit.added.push((level, f));
        }
        // Values must be durable before the SSTables pointing at them replace
        // the WAL.
        self.vstore.sync()?;
        // The memtable's writes are now in SSTables: publish the version and
        // drop the memtable in one step so readers never miss them.
        let nv = {
            let mut vs = self.versions.lock();
            // Log mode: recovery replays the value log from where this
            // memtable's writes end. The state is taken under the manifest
            // lock so it is never older than one GC persisted before it.
            edit.value_store_state = log_pos.map(|p| self.vstore.state_with_checkpoint(p));
            // Only what the flushed memtable holds is durable: recording a
            // larger sequence would claim writes a crash may still lose.
            vs.last_sequence = vs.last_sequence.max(imm.max_seq());
            vs.log_and_apply(&mut edit)?;
            vs.current()
        };
        if let Some(p) = log_pos {
            self.vstore.checkpoint_committed(p);
        }
        {
            let mut cur = self.sv.write();
            *cur = Arc::new(SuperVersion {
                mem: cur.mem.clone(),
                imm: None,
                version: nv,
            });
        }
        self.counters.flushes.fetch_add(1, Ordering::Relaxed);
        self.delete_obsolete_files();
        Ok(())
    }

    /// Replays WALs newer than the manifest's log number, writes what they
    /// hold to level-0 SSTables, and starts a new WAL and manifest.
    fn recover_wals(&self) -> Result<()> {
        let log_number = self.versions.lock().log_number;
        let names = self.fs.list(&self.dir).ctx(&self.dir)?;
        let mut wals: Vec<u64> = names
            .iter()
            .filter_map(|n| match filename::parse(n) {
                Some(FileKind::Wal(x)) if x >= log_number => Some(x),
                _ => None,
            })
            .collect();
        wals.sort_unstable();
        // Numbers handed out after the last manifest edit (a WAL started at
        // a memtable switch, outputs of an unfinished compaction) are not in
        // the manifest: never hand them out again, or a new file would
        // truncate a WAL that is still being replayed.
        let max_used = names
            .iter()
            .filter_map(|n| match filename::parse(n) {
                Some(FileKind::Wal(x)) | Some(FileKind::Table(x)) | Some(FileKind::Manifest(x)) => {
                    Some(x)
                }
                _ => None,
            })
            .max()
            .unwrap_or(0);
        {
            let mut vs = self.versions.lock();
            vs.next_file_number = vs.next_file_number.max(max_used + 1);
        }
        let mut edit = VersionEdit::default();
        let mut max_seq = self.last_seq.load(Ordering::Relaxed);
        let mut mem = Arc::new(MemTable::new());
        let mut next = || self.versions.lock().new_file_number();
        {
            let mut ctx = self.job_context(&mut next);
            'replay: for (i, &n) in wals.iter().enumerate() {
                let path = filename::wal_path(&self.dir, n);
                let data = read_all(self.fs.as_ref(), &path).ctx(&path)?;
                self.stats.add_read(IoCategory::Wal, data.len() as u64);
                let mut r = RecordReader::new(&data, &path);
                while let Some((off, rec)) = r.next_record()? {
                    let b = decode_batch(rec).ok_or_else(|| {
                        Error::corruption(&path, off, "malformed write batch in WAL")
                    })?;
                    let last = (b.seq.checked_add(b.entries.len() as u64))
                        .filter(|_| b.seq > 0 && !b.entries.is_empty())
                        .map(|end| end - 1)
                        .filter(|&l| l <= crate::index::key::MAX_SEQ);
                    let Some(last) = last else {
                        return Err(Error::corruption(
                            &path,
                            off,
                            format!(
                                "write batch with sequence {} and {} entries is out of range",
                                b.seq,
                                b.entries.len()
                            ),
                        ));
                    };
                    // A batch whose values did not survive the crash ends
                    // the history (WiscKey §3.3.3): nothing after it is
                    // replayed, so the state stays a prefix.
                    let lost = b.entries.iter().any(|e| {
                        e.vtype == ValueType::Pointer
                            && ValuePointer::decode(e.value)
                                .is_none_or(|p| !self.vstore.contains(&p))
                    });
                    if lost {
                        break 'replay;
                    }
                    for (j, e) in b.entries.iter().enumerate() {
                        mem.add(b.seq + j as u64, e.vtype, e.key, e.value);
                    }
                    max_seq = max_seq.max(last);
                    if mem.approximate_bytes() >= self.opts.write_buffer_size {
                        for f in flush_to_tables(&mut ctx, &mut mem.iter())? {
                            edit.added.push((0, f));
                        }
                        mem = Arc::new(MemTable::new());
                    }
                }
                if let Some(LogEnd::Torn(off)) = r.end() {
                    // A torn tail ends the history. Only the newest WAL with
                    // data can have one: an older WAL is synced before the
                    // next one starts, so a torn older WAL followed by data
                    // means damage.
                    let later_data = wals[i + 1..].iter().any(|&m| {
                        let p = filename::wal_path(&self.dir, m);
                        self.fs.file_size(&p).map_or(true, |len| len > 0)
                    });
                    if later_data {
                        return Err(Error::corruption(
                            &path,
                            off,
                            "torn record in a WAL that is followed by newer WAL data",
                        ));
                    }
                    break 'replay;
                }
            }
            // Log mode: the value log after the checkpoint holds the writes
            // the lost memtables had (WiscKey §3.4.2).
            self.vstore.replay(&mut |seq, t, k, v| {
                mem.add(seq, t, k, v);
                max_seq = max_seq.max(seq);
                Ok(())
            })?;
            if !mem.is_empty() {
                for f in flush_to_tables(&mut ctx, &mut mem.iter())? {
                    edit.added.push((0, f));
                }
            }
        }
        // Commit the replayed state before the new WAL exists: an open that
        // fails or crashes after this point finds the old WALs obsolete, and
        // before it finds no new WAL, so a torn tail stays in the newest WAL.
        let number = self.versions.lock().new_file_number();
        let path = filename::wal_path(&self.dir, number);
        self.last_seq.store(max_seq, Ordering::Release);
        self.recovered_seq.store(max_seq, Ordering::Release);
        edit.log_number = Some(number);
        let log_pos = self.vstore.log_position();
        if let Some(p) = log_pos {
            self.vstore.sync()?;
            edit.value_store_state = Some(self.vstore.state_with_checkpoint(p));
        }
        let v = {
            let mut vs = self.versions.lock();
            vs.last_sequence = max_seq;
            vs.log_and_apply(&mut edit)?;
            vs.current()
        };
        if let Some(p) = log_pos {
            self.vstore.checkpoint_committed(p);
        }
        let file = self.fs.create(&path).ctx(&path)?;
        self.fs.sync_dir(&self.dir).ctx(&self.dir)?;
        *self.sv.write() = Arc::new(SuperVersion {
            mem: Arc::new(MemTable::new()),
            imm: None,
            version: v,
        });
        *self.writer.lock() = Some(Writer {
            wal: RecordWriter::new(file, path, self.stats.clone(), IoCategory::Wal),
            wal_number: number,
            scratch: Vec::new(),
            synced_seq: max_seq,
        });
        self.bg.lock().imm_log_number = number;
        Ok(())
    }

    /// Removes files no live version, WAL range or manifest needs.
    ///
    /// Tables and WALs are judged from a copy of the version set's state:
    /// only the background thread (and recovery, before it starts) creates
    /// tables, and a WAL created meanwhile is numbered above the log number.
    /// Manifests and temporary files are judged and removed under the
    /// version-set lock, because a value-store GC may roll the manifest (a
    /// new `MANIFEST-n` and a `CURRENT.tmp`) at any moment: judged from a
    /// stale number, the live manifest would be deleted.
    fn delete_obsolete_files(&self) {
        let (live, log_number) = {
            let vs = self.versions.lock();
            (vs.live_files(), vs.log_number)
        };
        let Ok(names) = self.fs.list(&self.dir) else {
            return;
        };
        let mut locked = Vec::new();
        for name in names {
            let remove = match filename::parse(&name) {
                Some(FileKind::Table(n)) => {
                    let dead = !live.contains(&n);
                    if dead {
                        self.table_cache.evict(n);
                    }
                    dead
                }
                Some(FileKind::Wal(n)) => n < log_number,
                Some(kind @ (FileKind::Manifest(_) | FileKind::Temp)) => {
                    locked.push((kind, name.clone()));
                    false
                }
                _ => false,
            };
            if remove {
                // Best effort: a file left behind is removed on the next pass.
                let _ = self.fs.remove(&self.dir.join(&name));
            }
        }
        if locked.is_empty() {
            return;
        }
        let vs = self.versions.lock();
        for (kind, name) in locked {
            if kind != FileKind::Manifest(vs.manifest_number()) {
                let _ = self.fs.remove(&self.dir.join(&name));
            }
        }
    }

    fn verify(&self) -> VerifyReport {
        let mut rep = VerifyReport::default();
        // Manifest.
        let cur = self.dir.join(CURRENT);
        match read_all(self.fs.as_ref(), &cur) {
            Err(e) => rep.faults.push(Error::io(&cur, e)),
            Ok(c) => {
                let name = String::from_utf8_lossy(&c).trim_end().to_string();
                let mpath = self.dir.join(&name);
                match read_all(self.fs.as_ref(), &mpath) {
                    Err(e) => rep.faults.push(Error::io(&mpath, e)),
                    Ok(data) => {
                        let mut r = RecordReader::new(&data, &mpath);
                        loop {
                            match r.next_record() {
                                Ok(Some((off, rec))) => {
                                    if let Err(reason) = VersionEdit::decode(rec) {
                                        rep.faults.push(Error::corruption(&mpath, off, reason));
                                    }
                                    rep.manifest_edits += 1;
                                }
                                Ok(None) => break,
                                Err(e) => {
                                    rep.faults.push(e);
                                    break;
                                }
                            }
                        }
                    }
                }
            }
        }
        // Current WAL (only what is already handed to the OS).
        let wal = self.writer.lock().as_mut().map(|w| {
            let _ = w.wal.flush();
            w.wal.path().to_path_buf()
        });
        if let Some(path) = wal {
            if let Ok(data) = read_all(self.fs.as_ref(), &path) {
                let mut r = RecordReader::new(&data, &path);
                loop {
                    match r.next_record() {
                        Ok(Some((off, rec))) => {
                            if decode_batch(rec).is_none() {
                                rep.faults.push(Error::corruption(
                                    &path,
                                    off,
                                    "malformed write batch in WAL",
                                ));
                            }
                            rep.wal_records += 1;
                        }
                        Ok(None) => break,
                        Err(e) => {
                            rep.faults.push(e);
                            break;
                        }
                    }
                }
            }
        }
        // Value store.
        let (records, faults) = self.vstore.verify();
        rep.value_records = records;
        rep.faults.extend(faults);
        // SSTables.
        let v = self.sv.read().version.clone();
        for f in v.files.iter().flatten() {
            rep.tables += 1;
            let res = self
                .table_cache
                .get(f.number, f.size, IoCategory::UserRead)
                .and_then(|t| t.verify());
            match res {
                Ok(n) => rep.entries += n,
                Err(e) => rep.faults.push(e),
            }
        }
        rep
    }

    /// The directory's files by kind (see [`FileGroupStats`]); files that
    /// vanish while they are counted are skipped.
    fn file_groups(&self) -> Vec<FileGroupStats> {
        const KINDS: [&str; 5] = ["sstables", "wal", "manifest", "value store", "other"];
        let mut groups: Vec<FileGroupStats> = KINDS
            .iter()
            .map(|k| FileGroupStats {
                kind: k.to_string(),
                ..Default::default()
            })
            .collect();
        for name in self.fs.list(&self.dir).unwrap_or_default() {
            let kind = match filename::parse(&name) {
                Some(FileKind::Table(_)) => 0,
                Some(FileKind::Wal(_)) => 1,
                Some(FileKind::Manifest(_) | FileKind::Current) => 2,
                None => 3,
                Some(FileKind::Identity | FileKind::Lock | FileKind::Temp) => 4,
            };
            let path = self.dir.join(&name);
            let (Ok(size), Ok(allocated)) =
                (self.fs.file_size(&path), self.fs.allocated_size(&path))
            else {
                continue;
            };
            let g = &mut groups[kind];
            g.files += 1;
            g.size_bytes += size;
            g.allocated_bytes += allocated;
        }
        groups
    }

    fn stats(&self) -> DbStats {
        let sv = self.sv.read().clone();
        let c = &self.counters;
        let files = self.file_groups();
        let disk_bytes = files.iter().map(|g| g.allocated_bytes).sum();
        DbStats {
            index: self.opts.index_kind().to_string(),
            value_layout: self.opts.layout().to_string(),
            last_sequence: self.last_seq.load(Ordering::Acquire),
            levels: sv
                .version
                .files
                .iter()
                .enumerate()
                .map(|(level, f)| LevelStats {
                    level,
                    files: f.len(),
                    bytes: f.iter().map(|x| x.size).sum(),
                })
                .collect(),
            files,
            memtable_bytes: sv.mem.approximate_bytes() as u64,
            immutable_memtable: sv.imm.is_some(),
            io: self.stats.snapshot(),
            user_bytes_written: c.user_bytes_written.load(Ordering::Relaxed),
            user_bytes_read: c.user_bytes_read.load(Ordering::Relaxed),
            flushes: c.flushes.load(Ordering::Relaxed),
            compactions: c.compactions.load(Ordering::Relaxed),
            trivial_moves: c.trivial_moves.load(Ordering::Relaxed),
            compaction_bytes_in: c.compaction_bytes_in.load(Ordering::Relaxed),
            compaction_bytes_out: c.compaction_bytes_out.load(Ordering::Relaxed),
            compaction_entries_dropped: c.compaction_entries_dropped.load(Ordering::Relaxed),
            write_stall_micros: c.stall_micros.load(Ordering::Relaxed),
            write_gc_steps: c.write_gc_steps.load(Ordering::Relaxed),
            write_waits_for_readers: c.write_reader_waits.load(Ordering::Relaxed),
            live_snapshots: self.snapshots.lock().values().sum(),
            value_store: self.vstore.space(),
            value_store_figures: self
                .vstore
                .figures()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            disk_bytes,
            background_error: self.bg.lock().error.as_ref().map(|e| e.to_string()),
        }
    }
}

/// The index and value layout recorded in the database at `path` on the
/// operating system's file system, or `None` when it holds no database.
/// [`Db::open`] reads the record itself; this is for tools that want to
/// know what a directory holds without opening it (the `sepkv` CLI refuses
/// read-only commands on a directory where it returns `None`).
///
/// # Errors
/// `Corruption` for a damaged `IDENTITY`; `NotADatabase` for a foreign one;
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

impl IndexReader for DbInner {
    fn current_pointer(&self, key: &[u8]) -> Result<Option<ValuePointer>> {
        let ctx = ReadCtx {
            category: IoCategory::Gc,
            fill_cache: false,
        };
        match self.lookup(key, None, ctx)? {
            Lookup::Found(ValueType::Pointer, p) => Ok(ValuePointer::decode(&p)),
            _ => Ok(None),
        }
    }

    fn oldest_visible_seq(&self) -> SeqNum {
        self.smallest_snapshot()
    }

    fn last_sequence(&self) -> SeqNum {
        self.last_seq.load(Ordering::Acquire)
    }

    fn wait_in_flight_writes(&self) -> Result<()> {
        // A write appends its values, logs and inserts them, and publishes
        // its sequence number all under the writer lock; a write that fails
        // in between poisons the database before it lets go. Once the lock
        // is ours, every earlier append is published or poisoned.
        let guard = self.writer.lock();
        self.poisoned()?;
        if guard.is_none() {
            return Err(Error::Closed);
        }
        Ok(())
    }
}

impl IndexRelocator for DbInner {
    fn relocate(&self, moves: &[Relocation]) -> Result<(Vec<bool>, SeqNum)> {
        let mut guard = self.writer.lock();
        self.poisoned()?;
        let Some(w) = guard.as_mut() else {
            return Err(Error::Closed);
        };
        self.make_room(w, false)?;
        // Under the writer lock no user write can slip between the check
        // and the install.
        let mut batch = WriteBatch::new();
        let mut installed = Vec::with_capacity(moves.len());
        for m in moves {
            let ok = self.current_pointer(&m.key)? == Some(m.old);
            if ok {
                batch.push(ValueType::Pointer, &m.key, &m.new.encode());
            }
            installed.push(ok);
        }
        if batch.is_empty() {
            return Ok((installed, self.last_seq.load(Ordering::Acquire)));
        }
        if !self.opts.wal {
            // Log mode: the relocation must be in the value log too.
            batch = self.log_entries(&batch)?;
        }
        let seq = self.write_locked(w, &batch, true)?;
        Ok((installed, seq))
    }

    fn persist_state(&self, state: &[u8]) -> Result<()> {
        let mut edit = VersionEdit {
            value_store_state: Some(state.to_vec()),
            ..Default::default()
        };
        let r = self.versions.lock().log_and_apply(&mut edit);
        if let Err(e) = &r {
            self.set_poison(e);
        }
        r
    }

    fn make_durable(&self, seq: SeqNum) -> Result<()> {
        let mut guard = self.writer.lock();
        self.poisoned()?;
        let Some(w) = guard.as_mut() else {
            return Err(Error::Closed);
        };
        if w.synced_seq >= seq {
            return Ok(());
        }
        // Under the writer lock every write up to `last_seq` is in the WAL
        // (or, in log mode, in the value log).
        let last = self.last_seq.load(Ordering::Acquire);
        let res = if self.opts.wal {
            self.vstore.sync().and_then(|_| w.wal.sync())
        } else {
            self.vstore.sync()
        };
        if let Err(e) = res {
            self.set_poison(&e);
            return Err(e);
        }
        w.synced_seq = last;
        Ok(())
    }
}
