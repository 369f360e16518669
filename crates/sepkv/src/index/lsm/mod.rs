//! The LSM-tree index (LevelDB design): a memtable and a write-ahead log in
//! front of leveled SSTables described by a version set and its manifest.
//!
//! The same module is the LWC-tree (index `lwc`, LWC-tree §3): flushes stay
//! in level 0, levels below hold DTables, and compaction is lightweight
//! ([`crate::index::compaction::lightweight`]) instead of leveled; the
//! memtable, WAL, versions, manifest and recovery are shared.
//!
//! Writes go to the WAL, then the memtable; a full memtable is frozen into
//! the immutable memtable (a new WAL starts) and flushed to level-0 or
//! deeper SSTables by one background thread, which also runs leveled
//! compactions ([`background`]). Readers see a *super-version*: the
//! memtable, the immutable memtable and the SSTable version, swapped
//! atomically. Recovery replays the WALs newer than the manifest's log
//! number, and in log mode the value log after the manifest's checkpoint
//! ([`recovery`]).

mod background;
mod recovery;
pub(crate) mod repair;
mod verify;

use crate::batch::WriteBatch;
use crate::error::{Error, IoContext, Result};
use crate::format::record::RecordWriter;
use crate::fs::IoCategory;
use crate::index::cache::BlockCache;
use crate::index::compaction::picker::PickerConfig;
use crate::index::compaction::{CompactionStats, JobContext};
use crate::index::filename::{self, FileKind, CURRENT};
use crate::index::iter::InternalIterator;
use crate::index::key::{SeqNum, ValueType};
use crate::index::memtable::{Lookup, MemTable};
use crate::index::merger::{LevelIterator, MergingIterator};
use crate::index::multi_get::{key_order, BlockReuse};
use crate::index::skiplist::Finger;
use crate::index::sstable::{ReadCtx, TableOptions};
use crate::index::table_cache::TableCache;
use crate::index::version::{log_and_apply, Version, VersionEdit, VersionSet};
use crate::index::{Index, IndexIter, IndexShape, IndexStats, Shared, ValueStoreOpener};
use crate::options::IndexKind;
use crate::report::LevelStats;
use crate::vstore::{ValuePointer, ValueStore};
use background::BgState;
use parking_lot::{Condvar, Mutex, MutexGuard, RwLock};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

/// Bytes a new WAL is preallocated to (`crate::fs::create_preallocated`):
/// one memtable's worth, `write_buffer_size`, which holds its records in
/// the common case; a WAL that outgrows it grows as it is written.
/// Recovery takes the zeros past the last record as the WAL's end
/// ([`crate::format::record::RecordReader::zero_tail`]).
fn wal_preallocation(opts: &crate::options::Options) -> u64 {
    opts.write_buffer_size as u64
}

/// Obsolete WALs kept to be written over by later WALs (recycled, as
/// RocksDB's `recycle_log_file_num` does). A new file's blocks are
/// allocated as its appends reach them, so nearly every `fdatasync` of a
/// synced write into a new file also commits that allocation to the file
/// system's journal; written over, a recycled file's blocks are allocated
/// already and the sync writes the data alone. Only WALs that took synced
/// write batches are kept, at most [`WAL_SPARES`] of them, so that a
/// database written without syncs holds no spare file: the sync that ends
/// a GC step ([`crate::index::Index::make_durable`]) does not count, as
/// it comes once a step, and the spare would stand beside the current WAL
/// as a second memtable's worth of log on disk. Spares live until reused
/// or until the next open removes them as obsolete. Records name their log
/// (`crate::format::record`'s log records), so that the older use's
/// records past the new ones are never replayed.
#[derive(Default)]
struct WalPool {
    /// WALs of this open that took a synced write: kept once obsolete.
    synced: Vec<u64>,
    /// Obsolete WALs ready to be reused.
    spare: Vec<u64>,
    /// `close` began ([`Index::begin_close`]): no WAL is kept or reused.
    closing: bool,
}

/// Most spare WALs kept (each about `write_buffer_size` bytes on disk).
const WAL_SPARES: usize = 1;

/// The memtables and SSTable version a reader works against.
struct SuperVersion {
    mem: Arc<MemTable>,
    imm: Option<Arc<MemTable>>,
    version: Arc<Version>,
}

/// Fingers into a super-version's memtables, so that lookups of keys in
/// ascending order (value-log GC judging a chunk) each start a skiplist
/// search near the last one's place ([`MemTable::get_hashed_from`]).
struct MemFingers<'s> {
    mem: Finger<'s>,
    imm: Option<Finger<'s>>,
}

impl<'s> MemFingers<'s> {
    fn new(sv: &'s SuperVersion) -> MemFingers<'s> {
        MemFingers {
            mem: sv.mem.finger(),
            imm: sv.imm.as_ref().map(|m| m.finger()),
        }
    }
}

/// The current write-ahead log.
struct Wal {
    log: RecordWriter,
    /// The WAL's file number.
    number: u64,
    /// A synced write went to this WAL (it is then recycled when obsolete,
    /// see [`WalPool`]).
    synced: bool,
    scratch: Vec<u8>,
    /// Every write up to this sequence number is durable.
    synced_seq: SeqNum,
    /// Batches logged with pointers that do not carry their value (bumped
    /// at each): their WAL records replay only while the value store holds
    /// those values.
    bare_logged: u64,
    /// `bare_logged` as it was when the last value-store sync began that
    /// has completed: every bare batch counted up to it has its values
    /// durable. A synced write whose batch carries its values needs no
    /// value-store sync while the two are equal.
    bare_synced: u64,
    /// Syncs the value store beside the WAL's sync; started at the first
    /// synced write.
    vsync: Option<ParallelSync>,
    /// The WAL before this one while it may hold records not yet durable
    /// (see [`PrevWal`]).
    prev: Option<PrevWal>,
}

/// The previous WAL, from the memtable switch that ended it until the
/// next sync of the log.
///
/// A switch does not sync: the writer that fills the memtable would wait
/// for the old WAL's fsync, the value store's and the directory's under
/// the writer lock (several milliseconds, a HashKV value store's sync of
/// its segments tens). Instead the next synced write, or
/// [`Index::make_durable`], syncs the old WAL and the directory (the new
/// WAL's entry) before its own sync of the new WAL, and then logs a
/// *seal* — an empty record — in the new WAL: from the seal on, the old
/// WAL is durable whole. The value store needs nothing here: every
/// synced write syncs it while bare pointers may be unsynced
/// ([`Wal::bare_synced`] counts on across the switch).
///
/// Recovery therefore meets an older WAL whose unsynced tail was lost
/// (torn, or zeros in its preallocated space) with newer WAL data after
/// it. Sequence numbers run on without a gap from one WAL to the next,
/// so a gap shows the loss: without a seal in the newer WAL, the lost
/// records were never acknowledged as durable, and the history ends
/// there (as RocksDB's point-in-time recovery ends it); with a seal, the
/// older WAL had been durable, and the gap is damage (`Corruption`).
struct PrevWal {
    number: u64,
    /// Syncs what the old WAL's writer handed to the OS (all of it: the
    /// switch flushed it).
    sync: Arc<crate::format::record::PendingSync>,
}

/// A thread that syncs the value store while the writer syncs the WAL, so
/// that a synced write waits for about one fsync instead of two in a row.
///
/// Why the order of the two syncs may be given up: the pair only has to be
/// complete before the write is acknowledged; a crash in between may leave
/// the WAL record durable and its values not. Recovery already stands that
/// state (the OS may write an unsynced WAL page back before a value-log
/// page, so it arises without a sync too): a WAL batch with a pointer the
/// value store does not hold ([`crate::vstore::ValueStore::contains`]:
/// past the last intact record of the log, in a segment or table the store
/// did not recover) ends the replay — the batch is dropped whole and every
/// later record with it — and the new WAL and manifest written at open make
/// the old WALs obsolete before any new append can reuse that space. The
/// batch was never acknowledged, so the recovered state is a prefix of
/// history that still holds every acknowledged synced write, and no pointer
/// to a lost value is ever read. Both results are waited for: a failure of
/// either fails the write (and poisons the database).
///
/// Most synced writes need neither the thread nor the value store's sync:
/// with `Options::sync_values_in_wal` their WAL record carries the values
/// beside the pointers (batch entry type 3), and recovery restores a value
/// the store lost from there. The value store is synced beside the WAL only
/// while the WAL holds *bare* pointers (of unsynced writes or GC
/// relocations) whose values may not be durable yet (`Wal::bare_logged`
/// against `Wal::bare_synced`): a lost bare pointer ends the replay, and the
/// synced write behind it would go with it.
struct ParallelSync {
    /// `None` only while dropping.
    req: Option<mpsc::Sender<()>>,
    done: mpsc::Receiver<Result<()>>,
    thread: Option<JoinHandle<()>>,
}

/// The thread holds the value store: it is joined when the WAL goes (at
/// close), so that the store is never dropped after the database is gone —
/// a reopen may already be using its files.
impl Drop for ParallelSync {
    fn drop(&mut self) {
        self.req = None;
        if let Some(h) = self.thread.take() {
            let _ = h.join();
        }
    }
}

impl ParallelSync {
    fn start(vstore: Arc<dyn ValueStore>) -> Option<ParallelSync> {
        let (req, req_rx) = mpsc::channel::<()>();
        let (done_tx, done) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("sepkv-vsync".into())
            .spawn(move || {
                // Ends when the WAL (its `Sender`) is dropped.
                while req_rx.recv().is_ok() {
                    if done_tx.send(vstore.sync()).is_err() {
                        break;
                    }
                }
            })
            .ok()?;
        Some(ParallelSync {
            req: Some(req),
            done,
            thread: Some(thread),
        })
    }
}

impl LsmIndex {
    /// Makes every logged write durable: the WAL, and the value store beside
    /// it, the two syncs running at once (see [`ParallelSync`] for why that
    /// is safe) — unless every bare pointer logged is known durable, when
    /// the WAL's fsync alone makes the writes recoverable (values carried
    /// in the WAL are restored from there, `Options::sync_values_in_wal`).
    /// A store with nothing to sync holds every bare pointer's value
    /// durably already. Returns whether the value store was left out.
    fn sync_vstore_and_wal(&self, w: &mut Wal) -> Result<bool> {
        let bare = w.bare_logged;
        if bare == w.bare_synced || !self.vstore.needs_sync() {
            w.bare_synced = bare;
            w.log.sync()?;
            return Ok(true);
        }
        self.sync_both(w)?;
        w.bare_synced = bare;
        Ok(false)
    }

    /// Makes the previous WAL durable when a switch left it unsynced —
    /// its fsync, then the directory's (for the current WAL's entry) — and
    /// logs the seal in the current WAL ([`PrevWal`]); the caller syncs
    /// the current WAL next. With the WAL lock held: for a synced write,
    /// which waits for these syncs anyway.
    fn seal_prev_locked(&self, w: &mut Wal) -> Result<()> {
        let Some(p) = &w.prev else {
            return Ok(());
        };
        self.sync_prev(&p.sync)?;
        Self::log_seal(w)
    }

    /// The previous WAL's fsync, then the directory's (for the current
    /// WAL's entry): what sealing the previous WAL waits for.
    fn sync_prev(&self, sync: &crate::format::record::PendingSync) -> Result<()> {
        sync.sync()?;
        let dir = &self.shared.dir;
        self.shared.fs.sync_dir(dir).ctx(dir)
    }

    /// Forgets the previous WAL, now durable, and logs the seal in the
    /// current one ([`PrevWal`]).
    fn log_seal(w: &mut Wal) -> Result<()> {
        w.prev = None;
        w.log.add_record(&[])?;
        Ok(())
    }

    /// [`LsmIndex::seal_prev_locked`] with the fsyncs run after `guard` is
    /// let go, so that writers append meanwhile. Returns the WAL lock held
    /// again, with no previous WAL left unsynced (a switch in between
    /// starts the round again).
    ///
    /// # Errors
    /// `Closed` once the WAL is gone; `Io` from a sync or the seal's write.
    fn seal_prev<'a>(
        &'a self,
        mut guard: MutexGuard<'a, Option<Wal>>,
    ) -> Result<MutexGuard<'a, Option<Wal>>> {
        loop {
            let Some(w) = guard.as_mut() else {
                return Err(Error::Closed);
            };
            let Some(p) = &w.prev else {
                return Ok(guard);
            };
            let (number, sync) = (p.number, p.sync.clone());
            drop(guard);
            self.sync_prev(&sync)?;
            guard = self.wal.lock();
            if let Some(w) = guard.as_mut() {
                if w.prev.as_ref().is_some_and(|p| p.number == number) {
                    Self::log_seal(w)?;
                }
            }
        }
    }

    /// The two syncs of [`LsmIndex::sync_vstore_and_wal`].
    fn sync_both(&self, w: &mut Wal) -> Result<()> {
        if w.vsync.is_none() {
            w.vsync = ParallelSync::start(self.vstore.clone());
        }
        if let Some(p) = &w.vsync {
            if p.req.as_ref().is_some_and(|r| r.send(()).is_ok()) {
                let wal = w.log.sync();
                let vs = p.done.recv().unwrap_or_else(|_| {
                    Err(Error::Poisoned(
                        "the value-store sync thread is gone".into(),
                    ))
                });
                return vs.and(wal);
            }
        }
        // No thread: one sync after the other.
        self.vstore.sync()?;
        w.log.sync()
    }
}

impl Wal {
    fn new(log: RecordWriter, number: u64, scratch: Vec<u8>, synced_seq: SeqNum) -> Wal {
        Wal {
            log,
            number,
            synced: false,
            scratch,
            synced_seq,
            bare_logged: 0,
            bare_synced: 0,
            vsync: None,
            prev: None,
        }
    }
}

#[derive(Default)]
struct Counters {
    flushes: AtomicU64,
    compactions: AtomicU64,
    trivial_moves: AtomicU64,
    compaction_bytes_in: AtomicU64,
    compaction_bytes_out: AtomicU64,
    compaction_entries_dropped: AtomicU64,
    segments_appended: AtomicU64,
    divisions: AtomicU64,
    reclaims: AtomicU64,
    pushdowns: AtomicU64,
    metadata_from_victim: AtomicU64,
    metadata_reads: AtomicU64,
    /// DTables merged because reads passed their allowance (seek merges).
    seek_merges: AtomicU64,
    /// Bytes those merges wrote.
    seek_merge_bytes: AtomicU64,
    /// Synced writes made durable by the WAL's fsync alone, their values
    /// carried in the WAL (`Options::sync_values_in_wal`).
    wal_only_syncs: AtomicU64,
    /// Carried values restored inline at open because the value store had
    /// lost their records.
    wal_values_restored: AtomicU64,
    /// WALs started on a recycled file.
    wals_recycled: AtomicU64,
    /// Flushes run in the middle of a compaction.
    flushes_in_compaction: AtomicU64,
    /// Compactions the tombstone-density trigger picked
    /// (`picker::pick_garbage`).
    garbage_compactions: AtomicU64,
}

/// The LSM-tree behind the [`Index`] seam.
pub(crate) struct LsmIndex {
    shared: Arc<Shared>,
    vstore: Arc<dyn ValueStore>,
    table_cache: Arc<TableCache>,
    picker: PickerConfig,
    table_options: TableOptions,
    /// The WAL; `None` before recovery and after close. Used under the
    /// facade's writer lock (and briefly by `verify`).
    wal: Mutex<Option<Wal>>,
    /// Obsolete WALs kept for reuse.
    wal_pool: Mutex<WalPool>,
    sv: RwLock<Arc<SuperVersion>>,
    versions: Mutex<VersionSet>,
    /// One manifest write at a time; the version-set lock is released
    /// while it runs ([`log_and_apply`]).
    manifest_writer: Mutex<()>,
    bg: Mutex<BgState>,
    bg_cv: Condvar,
    bg_thread: Mutex<Option<JoinHandle<()>>>,
    counters: Counters,
    /// Index `lwc`: lightweight compaction over DTables.
    lightweight: bool,
    /// The first file number a running compaction may have used, or
    /// `u64::MAX`: tables from there on that no version names yet may be
    /// its outputs, which a flush run in the middle of it must not delete.
    pending_outputs_from: AtomicU64,
}

impl LsmIndex {
    /// The newest version of `key` at `seq` in the view `sv`: the
    /// memtables, then the tables (their data blocks through `reuse`, for
    /// a batch).
    fn get_in<'s>(
        &self,
        sv: &'s SuperVersion,
        key: &[u8],
        seq: SeqNum,
        ctx: ReadCtx,
        reuse: Option<&mut BlockReuse>,
        mut fingers: Option<&mut MemFingers<'s>>,
    ) -> Result<Lookup> {
        // One hash for both memtables' key filters.
        let h = crate::index::sstable::key_hash(key);
        let mut r = match fingers.as_mut() {
            Some(f) => sv.mem.get_hashed_from(&mut f.mem, key, h, seq),
            None => sv.mem.get_hashed(key, h, seq),
        };
        if r == Lookup::NotFound {
            if let Some(imm) = &sv.imm {
                r = match fingers.and_then(|f| f.imm.as_mut()) {
                    Some(f) => imm.get_hashed_from(f, key, h, seq),
                    None => imm.get_hashed(key, h, seq),
                };
            }
        }
        if r == Lookup::NotFound {
            r = sv
                .version
                .get_reusing(&self.table_cache, key, seq, ctx, reuse)?;
        }
        Ok(r)
    }

    /// Opens the version set — or creates it when there is no `CURRENT`
    /// yet (a new database, or one that crashed before its first manifest
    /// and wrote nothing else) — then the value store through
    /// `open_vstore` with the state the manifest holds for it. Recovery is
    /// [`Index::recover`].
    ///
    /// # Errors
    /// `Corruption` for a damaged manifest, or a missing `CURRENT` beside
    /// SSTables or WALs; what `open_vstore` returns; `Io`.
    pub(crate) fn open(
        shared: Arc<Shared>,
        open_vstore: &mut ValueStoreOpener<'_>,
    ) -> Result<(Arc<LsmIndex>, Arc<dyn ValueStore>)> {
        let opts = &shared.opts;
        let (dir, fs, stats) = (&shared.dir, &shared.fs, &shared.stats);
        let fresh = !fs.exists(&dir.join(CURRENT));
        if fresh {
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
        }
        let block_cache = Arc::new(BlockCache::new(opts.block_cache_size));
        let table_cache = Arc::new(
            TableCache::new(
                dir.clone(),
                fs.clone(),
                stats.clone(),
                block_cache,
                opts.max_open_files,
            )
            .with_mmap(opts.mmap_reads)
            .with_seek_merge(if opts.index_kind() == IndexKind::Lwc {
                opts.lwc_seek_merge_bytes
            } else {
                0
            }),
        );
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
            block_align: opts.block_align,
        };
        let mut versions = if fresh {
            VersionSet::create(dir, fs.clone(), stats.clone(), opts.num_levels)
        } else {
            VersionSet::recover(dir, fs.clone(), stats.clone(), opts.num_levels)?
        };
        let vstore = open_vstore(versions.value_store_state.as_deref())?;
        // The value store's garbage estimate of the last session; every
        // edit from now on records the current one, taken under the
        // manifest lock (so a compaction's edit carries the garbage its
        // own drops reported).
        if let Some(g) = versions.value_store_garbage.as_deref() {
            vstore.restore_garbage_table(g)?;
        }
        {
            let vs = vstore.clone();
            versions.set_garbage_source(Box::new(move || vs.garbage_table()));
        }
        let index = Arc::new(LsmIndex {
            sv: RwLock::new(Arc::new(SuperVersion {
                mem: Arc::new(MemTable::for_buffer(opts.write_buffer_size)),
                imm: None,
                version: versions.current(),
            })),
            versions: Mutex::new(versions),
            manifest_writer: Mutex::new(()),
            vstore: vstore.clone(),
            table_cache,
            picker,
            table_options,
            wal: Mutex::new(None),
            wal_pool: Mutex::new(WalPool::default()),
            bg: Mutex::new(BgState::default()),
            bg_cv: Condvar::new(),
            bg_thread: Mutex::new(None),
            counters: Counters::default(),
            lightweight: shared.opts.index_kind() == IndexKind::Lwc,
            pending_outputs_from: AtomicU64::new(u64::MAX),
            shared,
        });
        Ok((index, vstore))
    }

    fn job_context<'a>(&'a self, next: &'a mut dyn FnMut() -> u64) -> JobContext<'a> {
        JobContext {
            dir: &self.shared.dir,
            fs: self.shared.fs.as_ref(),
            stats: &self.shared.stats,
            table_cache: &self.table_cache,
            table_options: self.table_options.clone(),
            picker: self.picker,
            vstore: self.vstore.as_ref(),
            filter: None,
            new_file_number: next,
            between_outputs: None,
        }
    }

    /// Logs `edit`, then publishes the new version to readers.
    fn install(&self, edit: &mut VersionEdit) -> Result<()> {
        let v = log_and_apply(&self.versions, &self.manifest_writer, edit, |_, _| {})?;
        let mut cur = self.sv.write();
        *cur = Arc::new(SuperVersion {
            mem: cur.mem.clone(),
            imm: cur.imm.clone(),
            version: v,
        });
        Ok(())
    }
}

impl Index for LsmIndex {
    fn recover(&self) -> Result<SeqNum> {
        let seq = self.recover_wals()?;
        self.delete_obsolete_files();
        Ok(seq)
    }

    fn start(self: Arc<Self>) -> Result<()> {
        let me = self.clone();
        let handle = std::thread::Builder::new()
            .name("sepkv-bg".into())
            .spawn(move || {
                crate::sched::mark_background();
                me.background_loop()
            })
            .map_err(|e| Error::io(&self.shared.dir, e))?;
        *self.bg_thread.lock() = Some(handle);
        self.bg_cv.notify_all();
        Ok(())
    }

    fn make_room(&self, force: bool) -> Result<()> {
        self.make_room_locked(force)
    }

    fn carries_values(&self) -> bool {
        self.shared.opts.wal
    }

    fn apply(&self, batch: &WriteBatch, seq: SeqNum, sync: bool) -> Result<()> {
        let mut guard = self.wal.lock();
        let Some(w) = guard.as_mut() else {
            return Err(Error::Closed);
        };
        let n = batch.len() as u64;
        batch.encode_into(seq, &mut w.scratch);
        if self.shared.opts.wal {
            w.log.add_record(&w.scratch)?;
            if batch.bare_pointers() > 0 {
                w.bare_logged += 1;
            }
            if sync {
                self.seal_prev_locked(w)?;
                if self.sync_vstore_and_wal(w)? && batch.carried() > 0 {
                    self.counters.wal_only_syncs.fetch_add(1, Ordering::Relaxed);
                }
            } else {
                w.log.flush()?;
            }
        } else if sync {
            // Log mode: the value log holds the batch already.
            self.vstore.sync()?;
        }
        if sync {
            w.synced_seq = seq + n - 1;
            w.synced = true;
        }
        let mem = self.sv.read().mem.clone();
        for (i, e) in batch.entries().enumerate() {
            let e = e?;
            mem.add(seq + i as u64, e.vtype, e.key, e.value);
        }
        Ok(())
    }

    /// The fsyncs run outside the WAL's lock (so writers append and
    /// publish meanwhile): under it the WAL's records are handed to the OS
    /// and the last published sequence number read — every write up to it
    /// is in the WAL by then, as a write is published only after `apply`,
    /// and its values were in the value store before that. A previous WAL
    /// a switch left unsynced is synced and sealed first
    /// ([`LsmIndex::seal_prev`]); a WAL switched after the records were
    /// handed over is the one the pending sync syncs, whole.
    fn make_durable(&self, seq: SeqNum) -> Result<()> {
        let (last, bare, pending) = {
            let guard = self.wal.lock();
            match guard.as_ref() {
                None => return Err(Error::Closed),
                Some(w) if w.synced_seq >= seq => return Ok(()),
                Some(_) => {}
            }
            let mut guard = self.seal_prev(guard)?;
            let Some(w) = guard.as_mut() else {
                return Err(Error::Closed);
            };
            if w.synced_seq >= seq {
                return Ok(());
            }
            let last = self.shared.last_seq.load(Ordering::Acquire);
            if !self.shared.opts.wal {
                // Log mode: the value log holds every write.
                (last, w.bare_logged, None)
            } else {
                match w.log.start_sync()? {
                    Some(p) => (last, w.bare_logged, Some(p)),
                    None => {
                        self.sync_vstore_and_wal(w)?;
                        w.synced_seq = last;
                        return Ok(());
                    }
                }
            }
        };
        self.vstore.sync()?;
        if let Some(p) = pending {
            p.sync()?;
        }
        let mut guard = self.wal.lock();
        if let Some(w) = guard.as_mut() {
            w.synced_seq = w.synced_seq.max(last);
            w.bare_synced = w.bare_synced.max(bare);
        }
        Ok(())
    }

    /// Memtables take consecutive runs of sequence numbers, in order (the
    /// writer lock applies every write, and a switch starts a new run): when
    /// the oldest memtable held begins at or before `seq + 1`, every write
    /// after `seq` is in the memtables held, and the answer reads no table.
    fn written_after(&self, keys: &[&[u8]], seq: SeqNum) -> Option<Vec<bool>> {
        let sv = self.sv.read().clone();
        let oldest = sv.imm.as_ref().unwrap_or(&sv.mem);
        if oldest.min_seq()? > seq.saturating_add(1) {
            return None;
        }
        let newer =
            |m: &MemTable, key: &[u8], h| m.newest_seq_hashed(key, h).is_some_and(|s| s > seq);
        Some(
            keys.iter()
                .map(|k| {
                    let h = crate::index::sstable::key_hash(k);
                    newer(&sv.mem, k, h) || sv.imm.as_ref().is_some_and(|m| newer(m, k, h))
                })
                .collect(),
        )
    }

    /// The super-version is taken before the latest sequence number is
    /// loaded: the other order lets a compaction installed in between drop
    /// the version visible at the loaded sequence (it keeps only what the
    /// oldest snapshot, or the then latest sequence, can see), and the read
    /// would miss the key. Pinned first, the version's files stay as they
    /// were, and a newer sequence only adds writes the pinned memtables may
    /// or may not hold — writes that raced the read.
    fn get(&self, key: &[u8], seq: Option<SeqNum>, ctx: ReadCtx) -> Result<Lookup> {
        let sv = self.sv.read().clone();
        let seq = seq.unwrap_or_else(|| self.shared.last_seq.load(Ordering::Acquire));
        self.get_in(&sv, key, seq, ctx, None, None)
    }

    /// The batch is read at one view, pinned as [`Index::get`] pins its
    /// own (the super-version first, then the latest sequence number), and
    /// its keys are visited in key order, so that each data block is
    /// loaded once for the run of keys that falls in it.
    fn points_at_many(&self, probes: &[(&[u8], ValuePointer)]) -> Result<(Vec<bool>, u64)> {
        let ctx = ReadCtx {
            category: IoCategory::Gc,
            fill_cache: true,
        };
        let sv = self.sv.read().clone();
        let seq = self.shared.last_seq.load(Ordering::Acquire);
        let keys: Vec<&[u8]> = probes.iter().map(|(k, _)| *k).collect();
        let mut reuse = BlockReuse::new();
        let mut live = vec![false; probes.len()];
        // In key order each memtable search starts from the last one's
        // place (a finger) instead of the top of the skiplist.
        let mut fingers = MemFingers::new(&sv);
        for i in key_order(&keys) {
            let (key, addr) = probes[i];
            live[i] = match self.get_in(&sv, key, seq, ctx, Some(&mut reuse), Some(&mut fingers))? {
                Lookup::Found(ValueType::Pointer, p) => ValuePointer::decode(&p) == Some(addr),
                _ => false,
            };
        }
        Ok((live, reuse.loads()))
    }

    fn iter(&self, _seq: SeqNum, ctx: ReadCtx) -> Result<IndexIter> {
        let sv = self.sv.read().clone();
        let mut children: Vec<Box<dyn InternalIterator>> = vec![Box::new(sv.mem.iter())];
        if let Some(imm) = &sv.imm {
            children.push(Box::new(imm.iter()));
        }
        for f in sv.version.files[0].iter().rev() {
            let t = self
                .table_cache
                .get(f.number, f.size, IoCategory::UserRead)?;
            children.push(Box::new(t.iter(ctx)));
        }
        for files in sv.version.files.iter().skip(1) {
            if !files.is_empty() {
                children.push(Box::new(LevelIterator::new(
                    files.clone(),
                    self.table_cache.clone(),
                    ctx,
                )));
            }
        }
        Ok(IndexIter {
            iter: Box::new(MergingIterator::new(children)),
            pin: Box::new(sv),
        })
    }

    fn persist_value_store_state(&self, state: &[u8]) -> Result<()> {
        let mut edit = VersionEdit {
            value_store_state: Some(state.to_vec()),
            ..Default::default()
        };
        log_and_apply(&self.versions, &self.manifest_writer, &mut edit, |_, _| {}).map(|_| ())
    }

    fn wait_flushed(&self) -> Result<()> {
        self.wait_imm_flushed()
    }

    fn wait_idle(&self) -> Result<()> {
        self.wait_bg_idle()
    }

    fn compact_range(&self, begin: Option<&[u8]>, end: Option<&[u8]>) -> Result<CompactionStats> {
        self.compact_range_levels(begin, end)
    }

    fn shape(&self) -> IndexShape {
        let sv = self.sv.read().clone();
        IndexShape {
            memtable_bytes: sv.mem.approximate_bytes() as u64,
            immutable_memtable: sv.imm.is_some(),
            level_bytes: sv
                .version
                .files
                .iter()
                .map(|f| f.iter().map(|x| x.size).sum())
                .collect(),
        }
    }

    fn stats(&self) -> IndexStats {
        let sv = self.sv.read().clone();
        let c = &self.counters;
        let levels: Vec<LevelStats> = sv
            .version
            .files
            .iter()
            .enumerate()
            .map(|(level, f)| LevelStats {
                level,
                files: f.len(),
                bytes: f.iter().map(|x| x.size).sum(),
                segments: f
                    .iter()
                    .map(|x| {
                        self.table_cache
                            .get(x.number, x.size, IoCategory::UserRead)
                            .ok()
                            .and_then(|t| t.as_dtable().map(|d| d.num_segments() as u64))
                            .unwrap_or(1)
                    })
                    .sum(),
            })
            .collect();
        let mut figures = vec![
            ("sstables", levels.iter().map(|l| l.files as u64).sum()),
            ("sstable_bytes", levels.iter().map(|l| l.bytes).sum()),
            ("wal_only_syncs", c.wal_only_syncs.load(Ordering::Relaxed)),
            (
                "wal_values_restored",
                c.wal_values_restored.load(Ordering::Relaxed),
            ),
            ("wals_recycled", c.wals_recycled.load(Ordering::Relaxed)),
            (
                "flushes_in_compaction",
                c.flushes_in_compaction.load(Ordering::Relaxed),
            ),
            (
                "garbage_compactions",
                c.garbage_compactions.load(Ordering::Relaxed),
            ),
        ];
        if self.lightweight {
            // Estimated dead bytes of the DTables (stale tails, shadowed
            // versions; `DTable::dead_bytes`), each level's apart.
            let mut dead_per_level = [0u64; 12];
            for (level, f) in sv.version.files.iter().enumerate() {
                let dead: u64 = f
                    .iter()
                    .filter_map(|x| {
                        let t = self
                            .table_cache
                            .get(x.number, x.size, IoCategory::UserRead)
                            .ok()?;
                        t.as_dtable()?.dead_bytes().ok()
                    })
                    .sum();
                if let Some(d) = dead_per_level.get_mut(level) {
                    *d = dead;
                }
            }
            const DEAD_NAMES: [&str; 12] = [
                "level0_dead_bytes",
                "level1_dead_bytes",
                "level2_dead_bytes",
                "level3_dead_bytes",
                "level4_dead_bytes",
                "level5_dead_bytes",
                "level6_dead_bytes",
                "level7_dead_bytes",
                "level8_dead_bytes",
                "level9_dead_bytes",
                "level10_dead_bytes",
                "level11_dead_bytes",
            ];
            figures.extend(
                DEAD_NAMES
                    .iter()
                    .zip(dead_per_level)
                    .take(sv.version.files.len())
                    .map(|(n, d)| (*n, d)),
            );
            figures.push(("dead_bytes", dead_per_level.iter().sum()));
            figures.extend([
                ("segments", levels.iter().map(|l| l.segments).sum()),
                (
                    "segments_appended",
                    c.segments_appended.load(Ordering::Relaxed),
                ),
                ("divisions", c.divisions.load(Ordering::Relaxed)),
                ("reclaims", c.reclaims.load(Ordering::Relaxed)),
                ("pushdowns", c.pushdowns.load(Ordering::Relaxed)),
                (
                    "metadata_from_victim",
                    c.metadata_from_victim.load(Ordering::Relaxed),
                ),
                ("metadata_reads", c.metadata_reads.load(Ordering::Relaxed)),
                ("seek_merges", c.seek_merges.load(Ordering::Relaxed)),
                (
                    "seek_merge_bytes",
                    c.seek_merge_bytes.load(Ordering::Relaxed),
                ),
            ]);
        }
        IndexStats {
            memtable_bytes: sv.mem.approximate_bytes() as u64,
            immutable_memtable: sv.imm.is_some(),
            flushes: c.flushes.load(Ordering::Relaxed),
            compactions: c.compactions.load(Ordering::Relaxed),
            trivial_moves: c.trivial_moves.load(Ordering::Relaxed),
            compaction_bytes_in: c.compaction_bytes_in.load(Ordering::Relaxed),
            compaction_bytes_out: c.compaction_bytes_out.load(Ordering::Relaxed),
            compaction_entries_dropped: c.compaction_entries_dropped.load(Ordering::Relaxed),
            figures,
            levels,
        }
    }

    fn file_kind(&self, name: &str) -> Option<&'static str> {
        match filename::parse(name)? {
            FileKind::Table(_) => Some("sstables"),
            FileKind::Wal(_) => Some("wal"),
            FileKind::Manifest(_) | FileKind::Current => Some("manifest"),
            FileKind::Identity | FileKind::Lock | FileKind::Temp => Some("other"),
        }
    }

    fn verify(&self, rep: &mut crate::report::VerifyReport) {
        self.verify_files(rep)
    }

    fn begin_close(&self) {
        let spares = {
            let mut pool = self.wal_pool.lock();
            pool.closing = true;
            std::mem::take(&mut pool.spare)
        };
        for m in spares {
            // Best effort, as in `close`.
            let _ = self
                .shared
                .fs
                .remove(&filename::wal_path(&self.shared.dir, m));
        }
    }

    fn shutdown(&self) {
        self.bg.lock().shutting_down = true;
        self.bg_cv.notify_all();
        if let Some(h) = self.bg_thread.lock().take() {
            let _ = h.join();
        }
    }

    fn close(&self) -> Result<()> {
        let res = match self.wal.lock().as_mut() {
            Some(w) if self.shared.poison.lock().is_none() => self
                .seal_prev_locked(w)
                .and_then(|_| self.vstore.sync())
                .and_then(|_| w.log.sync()),
            _ => Ok(()),
        };
        *self.wal.lock() = None;
        // Spare WALs are obsolete: best effort, as the next open's pass
        // removes what is left.
        for m in self.wal_pool.lock().spare.drain(..) {
            let _ = self
                .shared
                .fs
                .remove(&filename::wal_path(&self.shared.dir, m));
        }
        // Tables the last compactions left obsolete while a reader still
        // held them (the background thread, which removes them, has
        // ended): a closed database holds only live files. Not after a
        // failure: a version edit whose write or sync failed may still be
        // in the manifest, naming files the version in memory lacks (the
        // next open's pass judges by the recovered version).
        if self.shared.poison.lock().is_none() && self.shared.bg_error.lock().is_none() {
            self.delete_obsolete_files();
        }
        res
    }
}
