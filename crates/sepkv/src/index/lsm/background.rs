//! The LSM-tree's background work and what waits for it: making room in
//! the memtable (write stalls, memtable switch), flushing the immutable
//! memtable to SSTables, leveled and manual compactions, and removing
//! obsolete files.

use super::{LsmIndex, SuperVersion};
use crate::error::{Error, IoContext, Result};
use crate::format::record::RecordWriter;
use crate::fs::{create_preallocated, IoCategory};
use crate::index::compaction::lightweight;
use crate::index::compaction::picker::{self, Choice};
use crate::index::compaction::rule::FilterCtx;
use crate::index::compaction::{flush_to_tables, run_compaction, CompactionStats};
use crate::index::filename::{self, FileKind};
use crate::index::memtable::MemTable;
use crate::index::version::{log_and_apply, Version, VersionEdit};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// What the background thread and the threads waiting for it share, under
/// `LsmIndex::bg` (signalled through `LsmIndex::bg_cv`). Failures are in
/// `Shared::bg_error`.
#[derive(Default)]
pub(super) struct BgState {
    pub(super) shutting_down: bool,
    /// WALs older than this are obsolete once the immutable memtable is
    /// flushed.
    pub(super) imm_log_number: u64,
    /// Log mode: the value-log position where the immutable memtable's
    /// writes end (its flush checkpoints it).
    pub(super) imm_log_position: Option<(u64, u64)>,
    manual: Option<ManualCompaction>,
    /// True while the background thread runs a step (a flush or a
    /// compaction, with the obsolete-file pass that ends it), so that
    /// `wait_idle` does not return between a step's new version and the
    /// removal of the files it made obsolete.
    step_running: bool,
}

impl LsmIndex {
    /// Makes room in the memtable; with `force`, freezes a non-empty
    /// memtable even if it is not full. Called with the facade's writer
    /// lock held.
    pub(super) fn make_room_locked(&self, mut force: bool) -> Result<()> {
        let opts = &self.shared.opts;
        let mut allow_delay = !force;
        loop {
            self.shared.background_failed()?;
            // Only the figures are kept: a super-version held across the
            // waits below would keep the files of its version alive past
            // the delete pass of the compaction being waited for.
            let (l0, mem_bytes, mem_empty, has_imm) = {
                let sv = self.sv.read();
                (
                    sv.version.files[0].len(),
                    sv.mem.approximate_bytes(),
                    sv.mem.is_empty(),
                    sv.imm.is_some(),
                )
            };
            // Synced writes that carry their values in the WAL
            // (`Options::sync_values_in_wal`) grow it faster than the
            // memtable: a WAL past its preallocation switches the memtable
            // too, which bounds the WAL's size and its replay.
            let wal_bytes = self.wal.lock().as_ref().map_or(0, |w| w.log.len());
            let mem_bytes = mem_bytes.max(wal_bytes as usize);
            if allow_delay && l0 >= opts.l0_slowdown_writes_trigger {
                // Spread the delay over writes instead of stalling one for
                // seconds when level 0 hits the stop trigger.
                let t = Instant::now();
                std::thread::sleep(Duration::from_millis(1));
                self.shared.note_stall(t);
                allow_delay = false;
                continue;
            }
            if !force && mem_bytes < opts.write_buffer_size {
                return Ok(());
            }
            if force && mem_empty {
                return Ok(());
            }
            if has_imm || l0 >= opts.l0_stop_writes_trigger {
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
                    cur.imm.is_some() || cur.version.files[0].len() >= opts.l0_stop_writes_trigger
                };
                if still && self.shared.background_failed().is_ok() {
                    self.bg_cv.wait_for(&mut bg, Duration::from_millis(100));
                }
                drop(bg);
                self.shared.note_stall(t);
                continue;
            }
            match self.switch_memtable() {
                Ok(()) => {}
                Err(Error::Closed) => return Err(Error::Closed),
                Err(e) => {
                    self.shared.set_poison(&e);
                    return Err(e);
                }
            }
            self.bg_cv.notify_all();
            force = false;
        }
    }

    /// Log mode, with nothing to flush (the memtable empty and no
    /// immutable memtable waiting): every write before the value store's
    /// current position is in the SSTables, so that position becomes the
    /// replay checkpoint at once — persisted in the manifest, then
    /// committed to the value store — without a flush. A memtable that
    /// stays empty (an index that sees no writes for a while) otherwise
    /// never moves its checkpoint, and the value store keeps everything
    /// after it. Returns false (and does nothing) when there is something
    /// to flush or the store keeps no log. Called with the facade's writer
    /// lock held, so no write lands in between.
    ///
    /// # Errors
    /// `Io` from the value store's sync or the manifest write.
    pub(crate) fn checkpoint_if_clean(&self) -> Result<bool> {
        self.shared.background_failed()?;
        let sv = self.sv.read().clone();
        if !sv.mem.is_empty() || sv.imm.is_some() {
            return Ok(false);
        }
        let Some(pos) = self.vstore.log_position() else {
            return Ok(false);
        };
        // As a flush: the log up to the checkpoint is durable before the
        // manifest names it.
        self.vstore.sync()?;
        // Through the manifest writer like every other edit: a flush or
        // compaction may be writing the manifest with the version-set lock
        // released, and an edit that skipped the writer would start a new
        // manifest without that edit in it. The state is taken under the
        // manifest lock, as a flush takes it.
        let mut edit = VersionEdit::default();
        log_and_apply(
            &self.versions,
            &self.manifest_writer,
            &mut edit,
            |_, edit| {
                edit.value_store_state = Some(self.vstore.state_with_checkpoint(pos));
            },
        )?;
        self.vstore.checkpoint_committed(pos);
        Ok(true)
    }

    /// Freezes the memtable and starts a new WAL, syncing nothing: the old
    /// WAL's records are handed to the OS, and its sync waits for the next
    /// synced write or [`crate::index::Index::make_durable`], which seals
    /// it ([`super::PrevWal`]). The new WAL's directory entry is synced
    /// then too. A file system that offers no sync handle gets the old
    /// WAL (and the value store) synced here, and the directory after.
    fn switch_memtable(&self) -> Result<()> {
        let shared = &self.shared;
        let mut guard = self.wal.lock();
        let Some(w) = guard.as_mut() else {
            return Err(Error::Closed);
        };
        // Log mode: the WAL holds no records (the value log is the log).
        let pending = if shared.opts.wal {
            w.log.start_sync()?
        } else {
            None
        };
        let sync_now = shared.opts.wal && pending.is_none();
        if sync_now {
            let bare = w.bare_logged;
            self.vstore.sync()?;
            w.log.sync()?;
            w.synced_seq = shared.last_seq.load(Ordering::Acquire);
            w.bare_synced = bare;
        }
        if w.synced {
            self.wal_pool.lock().synced.push(w.number);
        }
        let number = self.versions.lock().new_file_number();
        let log = self.new_wal(number)?;
        if sync_now {
            shared.fs.sync_dir(&shared.dir).ctx(&shared.dir)?;
        }
        // Replaces a previous WAL never synced: its memtable was flushed
        // (a switch waits for that), so it is obsolete.
        w.prev = pending.map(|p| super::PrevWal {
            number: w.number,
            sync: Arc::new(p),
        });
        w.log = log;
        w.number = number;
        w.synced = false;
        let mut bg = self.bg.lock();
        bg.imm_log_number = number;
        bg.imm_log_position = self.vstore.log_position();
        let mut cur = self.sv.write();
        *cur = Arc::new(SuperVersion {
            mem: Arc::new(MemTable::for_buffer(self.shared.opts.write_buffer_size)),
            imm: Some(cur.mem.clone()),
            version: cur.version.clone(),
        });
        Ok(())
    }

    /// Starts WAL `number`: written over a spare WAL when one is kept
    /// ([`super::WalPool`]), else a new preallocated file. The caller
    /// syncs the directory.
    ///
    /// A recycled WAL is written in log records (`crate::format::record`),
    /// and its first, empty record is synced before the spare takes the
    /// WAL's name: recovery then knows the file for a recycled one by
    /// that record, and reads a WAL without it by the plain rules. A
    /// crash before the rename leaves an obsolete file, removed at open.
    pub(super) fn new_wal(&self, number: u64) -> Result<RecordWriter> {
        let shared = &self.shared;
        let path = filename::wal_path(&shared.dir, number);
        let size = super::wal_preallocation(&shared.opts);
        {
            // Held across the rename, so that the obsolete-file pass does
            // not remove the spare meanwhile.
            let mut pool = self.wal_pool.lock();
            let reuse = if pool.closing { None } else { pool.spare.pop() };
            if let Some(m) = reuse {
                let old = filename::wal_path(&shared.dir, m);
                let recycled = shared.fs.reuse(&old).ctx(&old).and_then(|mut file| {
                    // A spare smaller than a memtable's worth grows to it.
                    let _ = file.preallocate(size);
                    let mut log = RecordWriter::for_log(
                        file,
                        path.clone(),
                        shared.stats.clone(),
                        IoCategory::Wal,
                        number,
                    );
                    log.add_record(&[])?;
                    log.sync()?;
                    shared.fs.rename(&old, &path).ctx(&old)?;
                    Ok(log)
                });
                match recycled {
                    Ok(log) => {
                        self.counters.wals_recycled.fetch_add(1, Ordering::Relaxed);
                        return Ok(log);
                    }
                    // Best effort: a new file takes its place.
                    Err(_) => {
                        let _ = shared.fs.remove(&old);
                    }
                }
            }
        }
        let file = create_preallocated(shared.fs.as_ref(), &path, size).ctx(&path)?;
        Ok(RecordWriter::new(
            file,
            path,
            shared.stats.clone(),
            IoCategory::Wal,
        ))
    }

    /// Waits until no immutable memtable waits for its flush.
    pub(super) fn wait_imm_flushed(&self) -> Result<()> {
        let mut bg = self.bg.lock();
        loop {
            self.shared.background_failed()?;
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

    /// Waits until no memtable waits for its flush, no level needs
    /// compaction and no step is running (the files a finished step made
    /// obsolete are gone).
    pub(super) fn wait_bg_idle(&self) -> Result<()> {
        let mut bg = self.bg.lock();
        loop {
            self.shared.background_failed()?;
            // The super-version is let go before the wait: held across it,
            // its version would keep alive the files the running step
            // makes obsolete, past that step's delete pass.
            let busy = bg.step_running || {
                let sv = self.sv.read();
                sv.imm.is_some()
                    || picker::scores(&sv.version, &self.picker)
                        .iter()
                        .any(|&s| s >= 1.0)
                    || self.garbage_due(&sv.version)
                    || self.seek_merge_due()
            };
            if !busy {
                // A reader (an iterator, a writer waiting for room) may
                // have held an old version through the last step's delete
                // pass; with the background thread idle — it starts no
                // step while this thread holds `bg` — no table is being
                // made, so one more pass here is safe.
                self.delete_obsolete_files();
                return Ok(());
            }
            if bg.shutting_down {
                return Err(Error::Closed);
            }
            self.bg_cv.notify_all();
            self.bg_cv.wait_for(&mut bg, Duration::from_millis(50));
        }
    }

    /// `Db::compact_range` after its flush: merges each level's files in
    /// `[begin, end]` into the next level down to the bottommost level that
    /// holds data there (level 0 goes at least to level 1), then rewrites
    /// the files of that level the merges did not produce.
    pub(super) fn compact_range_levels(
        &self,
        begin: Option<&[u8]>,
        end: Option<&[u8]>,
    ) -> Result<CompactionStats> {
        let levels = self.shared.opts.num_levels;
        // Files numbered from here on are outputs of this call.
        let first_new = self.versions.lock().next_file_number;
        let mut total = CompactionStats::default();
        for level in 0..levels {
            // The version is let go before each compaction runs: held, it
            // would keep the files that compaction makes obsolete on disk
            // until the next one (a whole database's worth after a
            // bottommost rewrite).
            let (deepest, here, stale) = {
                let v = self.sv.read().version.clone();
                let deepest = (0..levels)
                    .filter(|&l| !v.overlapping(l, begin, end).is_empty())
                    .max();
                let bottom = deepest.unwrap_or(0).max(1);
                // The bottommost level holds files no merge of this call
                // produced (they may keep tombstones and old versions an
                // earlier compaction had to keep).
                let stale = v
                    .overlapping(bottom, begin, end)
                    .iter()
                    .any(|f| f.number < first_new);
                (deepest, !v.overlapping(level, begin, end).is_empty(), stale)
            };
            let Some(deepest) = deepest else {
                break;
            };
            // Level 0 files overlap one another: they always go down.
            let bottom = deepest.max(1);
            if level < bottom {
                if here {
                    total.add(&self.run_manual(level, false, begin, end)?);
                }
                continue;
            }
            // The bottommost level: rewrite it in place when stale.
            if stale {
                total.add(&self.run_manual(bottom, true, begin, end)?);
            }
            break;
        }
        Ok(total)
    }

    fn run_manual(
        &self,
        level: usize,
        in_place: bool,
        begin: Option<&[u8]>,
        end: Option<&[u8]>,
    ) -> Result<CompactionStats> {
        let mut bg = self.bg.lock();
        // Wait for another manual compaction to finish — unless `close` has
        // begun: the background thread will never finish it then.
        while bg.manual.as_ref().is_some_and(|m| !m.done) {
            self.shared.background_failed()?;
            if bg.shutting_down {
                return Err(Error::Closed);
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
            if let Err(e) = self.shared.background_failed() {
                bg.manual = None;
                return Err(e);
            }
            if bg.manual.as_ref().is_none_or(|m| m.done) {
                let stats = bg.manual.take().map(|m| m.stats).unwrap_or_default();
                self.bg_cv.notify_all();
                return Ok(stats);
            }
            if bg.shutting_down {
                // Nobody will run it: a caller waiting for its turn must
                // not wait for it.
                bg.manual = None;
                self.bg_cv.notify_all();
                return Err(Error::Closed);
            }
            self.bg_cv.wait_for(&mut bg, Duration::from_millis(100));
        }
    }

    /// The background thread: flushes, manual and automatic compactions,
    /// until `shutdown`.
    pub(super) fn background_loop(self: Arc<Self>) {
        loop {
            {
                let mut bg = self.bg.lock();
                loop {
                    if bg.shutting_down {
                        return;
                    }
                    if self.shared.background_failed().is_ok() {
                        let sv = self.sv.read().clone();
                        let manual = bg.manual.as_ref().is_some_and(|m| !m.done);
                        let auto = picker::scores(&sv.version, &self.picker)
                            .iter()
                            .any(|&s| s >= 1.0)
                            || self.garbage_due(&sv.version)
                            || self.seek_merge_due();
                        if sv.imm.is_some() || manual || auto {
                            bg.step_running = true;
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
                self.shared.set_background_error(e);
            }
            self.bg.lock().step_running = false;
            self.bg_cv.notify_all();
        }
    }

    fn background_step(&self) -> Result<()> {
        let sv = self.sv.read().clone();
        if let Some(imm) = sv.imm.clone() {
            return self.flush_imm(&imm);
        }
        // Holding the old version through the step would keep the files
        // the step makes obsolete alive past its delete pass.
        drop(sv);
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
            let ptrs: Vec<Option<&[u8]>> = (0..self.shared.opts.num_levels)
                .map(|l| vs.compact_pointer(l))
                .collect();
            let c = if self.lightweight {
                lightweight::pick(&v, &self.picker, &ptrs)
            } else {
                picker::pick(&v, &self.picker, &ptrs)
            };
            (v, c)
        };
        match choice {
            Choice::Nothing => {
                // Nothing else is due: a DTable that reads found too many
                // segments in, if any (LWC-tree).
                if let Some(inputs) = self.pick_seek_merge(&v) {
                    let st = self.compact(v, &inputs)?;
                    let c = &self.counters;
                    c.seek_merges.fetch_add(1, Ordering::Relaxed);
                    c.seek_merge_bytes
                        .fetch_add(st.bytes_out, Ordering::Relaxed);
                    return Ok(());
                }
                // Then a table of mostly garbage, if any.
                let smallest = self.shared.smallest_snapshot();
                let inputs = (!self.lightweight)
                    .then(|| picker::pick_garbage(&v, &self.picker, smallest))
                    .flatten();
                match inputs {
                    Some(inputs) => {
                        self.compact(v, &inputs)?;
                        self.counters
                            .garbage_compactions
                            .fetch_add(1, Ordering::Relaxed);
                        Ok(())
                    }
                    None => Ok(()),
                }
            }
            Choice::Move { level, file } => {
                let mut edit = VersionEdit::default();
                edit.deleted.push((level, file.number));
                edit.added.push((level + 1, (*file).clone()));
                edit.compact_pointers.push((level, file.largest.clone()));
                self.install(&mut edit)?;
                self.counters.trivial_moves.fetch_add(1, Ordering::Relaxed);
                self.delete_obsolete_files();
                Ok(())
            }
            Choice::Merge(inputs) => self.compact(v, &inputs).map(|_| ()),
        }
    }

    /// Whether the tombstone-density trigger has a table to rewrite in `v`
    /// ([`picker::pick_garbage`]; never for the LWC-tree, whose DTables
    /// carry no counts). The background thread runs it only when no level
    /// needs compaction.
    fn garbage_due(&self, v: &Version) -> bool {
        !self.lightweight
            && picker::pick_garbage(v, &self.picker, self.shared.smallest_snapshot()).is_some()
    }

    /// Whether reads marked a DTable for a seek merge
    /// ([`TableCache::charge_reads`](crate::index::table_cache::TableCache::charge_reads));
    /// the background thread runs it only when no level needs compaction.
    fn seek_merge_due(&self) -> bool {
        self.lightweight && self.table_cache.seek_merges_due()
    }

    /// The seek merge to run in `v`: the first DTable marked due that `v`
    /// still holds at the size it was marked at (one appended to, merged
    /// or moved since is dropped: its new reader counts again), merged
    /// with itself in its level, as a bottommost-level rewrite is
    /// ([`lightweight::run_in_place`]: stale versions dropped, divided into
    /// tables of `target_file_size`). The other marked tables stay marked.
    fn pick_seek_merge(&self, v: &Version) -> Option<picker::CompactionInputs> {
        if !self.seek_merge_due() {
            return None;
        }
        let mut due = self.table_cache.take_seek_merges();
        let mut found = None;
        while found.is_none() && !due.is_empty() {
            let (number, size) = due.remove(0);
            found = (1..v.files.len()).find_map(|level| {
                v.files[level]
                    .iter()
                    .find(|f| f.number == number && f.size == size)
                    .map(|f| (level, f.clone()))
            });
        }
        self.table_cache.restore_seek_merges(due);
        let (level, f) = found?;
        Some(picker::CompactionInputs {
            level,
            output_level: level,
            upper: vec![f],
            lower: Vec::new(),
            grandparents: Vec::new(),
        })
    }

    /// Runs a compaction of `inputs` picked from `v`. Takes `v` by value so
    /// that it is released before obsolete files are deleted (a version still
    /// held keeps its files alive).
    fn compact(
        &self,
        v: Arc<Version>,
        inputs: &picker::CompactionInputs,
    ) -> Result<CompactionStats> {
        let lwc = self.lightweight;
        if lwc && inputs.level >= 1 && inputs.upper.len() > 1 {
            // A lightweight compaction holds its victim's entries in
            // memory: a manual range compaction of many DTables runs one
            // victim at a time, each against the version the last left.
            drop(v);
            let mut total = CompactionStats::default();
            for f in &inputs.upper {
                let v = self.versions.lock().current();
                let Some(cur) = v.files[inputs.level]
                    .iter()
                    .find(|x| x.number == f.number)
                    .cloned()
                else {
                    continue;
                };
                let one = if inputs.output_level == inputs.level {
                    picker::CompactionInputs {
                        level: inputs.level,
                        output_level: inputs.level,
                        upper: vec![cur],
                        lower: Vec::new(),
                        grandparents: Vec::new(),
                    }
                } else {
                    picker::setup_inputs(&v, &self.picker, inputs.level, vec![cur])
                };
                total.add(&self.compact(v, &one)?);
            }
            return Ok(total);
        }
        // With a filter, no GC relocation runs from here until the edit is
        // installed (see `Shared::filter_gate`).
        let _no_relocations = self
            .shared
            .opts
            .compaction_filter
            .is_some()
            .then(|| self.shared.filter_gate.write());
        let smallest = self.shared.smallest_snapshot();
        // From here until the edit is installed, tables numbered from
        // `first` on that no version names are this job's outputs.
        let first = self.versions.lock().next_file_number;
        self.pending_outputs_from.store(first, Ordering::SeqCst);
        let _pending = PendingOutputs(&self.pending_outputs_from);
        let mut next = || self.versions.lock().new_file_number();
        let flush_waiting = || self.flush_in_compaction();
        let mut ctx = self.job_context(&mut next);
        ctx.between_outputs = Some(&flush_waiting);
        // Taken after `smallest`: a reader registered in between only
        // narrows what the filter is offered.
        ctx.filter = self
            .shared
            .opts
            .compaction_filter
            .as_deref()
            .map(|filter| FilterCtx {
                filter,
                newest_reader: self.shared.newest_snapshot().unwrap_or(0),
            });
        let (mut edit, st): (VersionEdit, CompactionStats) =
            if lwc && inputs.output_level == inputs.level + 1 {
                let o = &self.shared.opts;
                let bounds = lightweight::LwcConfig {
                    push_down: o.lwc_push_down,
                    division_number: o.lwc_division_number,
                    dead_share: o.lwc_dead_share,
                    ..lightweight::LwcConfig::new(
                        &self.picker,
                        o.lwc_max_segments,
                        o.lwc_max_table_bytes,
                    )
                };
                lightweight::run_lightweight(&mut ctx, &v, inputs, smallest, &bounds)?
            } else if lwc {
                lightweight::run_in_place(&mut ctx, &v, inputs, smallest)?
            } else {
                run_compaction(&mut ctx, &v, inputs, smallest)?
            };
        drop(v);
        self.install(&mut edit)?;
        if st.filter_removed > 0 {
            self.shared.filter_installed_at.store(
                self.shared.last_seq.load(Ordering::Acquire),
                Ordering::Release,
            );
        }
        drop(_no_relocations);
        let c = &self.counters;
        c.compactions.fetch_add(1, Ordering::Relaxed);
        c.compaction_bytes_in
            .fetch_add(st.bytes_in, Ordering::Relaxed);
        c.compaction_bytes_out
            .fetch_add(st.bytes_out, Ordering::Relaxed);
        c.compaction_entries_dropped
            .fetch_add(st.dropped, Ordering::Relaxed);
        self.shared
            .filter_removed
            .fetch_add(st.filter_removed, Ordering::Relaxed);
        c.segments_appended
            .fetch_add(st.segments_appended, Ordering::Relaxed);
        c.divisions.fetch_add(st.divisions, Ordering::Relaxed);
        c.reclaims.fetch_add(st.reclaims, Ordering::Relaxed);
        c.pushdowns.fetch_add(st.pushdowns, Ordering::Relaxed);
        c.metadata_from_victim
            .fetch_add(st.metadata_from_victim, Ordering::Relaxed);
        c.metadata_reads
            .fetch_add(st.metadata_reads, Ordering::Relaxed);
        self.delete_obsolete_files();
        Ok(st)
    }

    /// Flushes the immutable memtable, if one waits, in the middle of a
    /// compaction (between two of its outputs), into level 0 — never
    /// deeper, where the compaction is writing — and wakes the writers
    /// waiting for room. Level 0 may then pass its stop trigger while the
    /// compaction runs; writers wait for that instead of for the whole
    /// compaction at the first full memtable.
    fn flush_in_compaction(&self) -> Result<()> {
        let imm = self.sv.read().imm.clone();
        let Some(imm) = imm else {
            return Ok(());
        };
        self.flush_imm_to(&imm, true)?;
        self.counters
            .flushes_in_compaction
            .fetch_add(1, Ordering::Relaxed);
        let _bg = self.bg.lock();
        self.bg_cv.notify_all();
        Ok(())
    }

    fn flush_imm(&self, imm: &Arc<MemTable>) -> Result<()> {
        self.flush_imm_to(imm, false)
    }

    /// Writes `imm` into tables of level 0 (with `level0_only`, or for the
    /// LWC-tree) or of the level [`picker::level_for_flush`] picks.
    fn flush_imm_to(&self, imm: &Arc<MemTable>, level0_only: bool) -> Result<()> {
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
        for (f, c) in files {
            edit.table_counts.push((f.number, c));
            // The LWC-tree takes flushes in level 0 only: deeper levels hold
            // DTables, which grow by lightweight compaction.
            let level = if self.lightweight || level0_only {
                0
            } else {
                picker::level_for_flush(
                    &v,
                    &self.picker,
                    crate::index::key::user_key(&f.smallest),
                    crate::index::key::user_key(&f.largest),
                )
            };
            edit.added.push((level, f));
        }
        // Values must be durable before the SSTables pointing at them replace
        // the WAL.
        self.vstore.sync()?;
        // The memtable's writes are now in SSTables: publish the version and
        // drop the memtable in one step so readers never miss them.
        let nv = log_and_apply(
            &self.versions,
            &self.manifest_writer,
            &mut edit,
            |vs, edit| {
                // Log mode: recovery replays the value log from where this
                // memtable's writes end. The state is taken under the
                // manifest lock so it is never older than one GC persisted
                // before it.
                edit.value_store_state = log_pos.map(|p| self.vstore.state_with_checkpoint(p));
                // Only what the flushed memtable holds is durable: recording
                // a larger sequence would claim writes a crash may still lose.
                vs.last_sequence = vs.last_sequence.max(imm.max_seq());
            },
        )?;
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

    /// Removes files no live version, WAL range or manifest needs.
    ///
    /// Tables and WALs are judged from a copy of the version set's state:
    /// only the background thread (and recovery, before it starts) creates
    /// tables, and a WAL created meanwhile is numbered above the log number.
    /// A flush run in the middle of a compaction (the same thread) leaves
    /// alone the tables numbered from the compaction's first output on
    /// (`pending_outputs_from`): no version names them before its edit.
    /// Manifests and temporary files are judged and removed under the
    /// version-set lock, because a value-store GC may roll the manifest (a
    /// new `MANIFEST-n` and a `CURRENT.tmp`) at any moment: judged from a
    /// stale number, the live manifest would be deleted.
    pub(super) fn delete_obsolete_files(&self) {
        let (dir, fs) = (&self.shared.dir, &self.shared.fs);
        let (live, log_number) = {
            let vs = self.versions.lock();
            (vs.live_files(), vs.log_number)
        };
        let Ok(names) = fs.list(dir) else {
            return;
        };
        let mut locked = Vec::new();
        let pending_from = self.pending_outputs_from.load(Ordering::SeqCst);
        for name in names {
            let remove = match filename::parse(&name) {
                Some(FileKind::Table(n)) => {
                    let dead = !live.contains(&n) && n < pending_from;
                    if dead {
                        self.table_cache.evict(n);
                    }
                    dead
                }
                Some(FileKind::Wal(n)) if n < log_number => {
                    // Judged and removed under the pool's lock, which a
                    // WAL switch holds while it renames a spare.
                    let mut pool = self.wal_pool.lock();
                    if pool.spare.contains(&n) {
                        continue;
                    }
                    if let Some(i) = pool.synced.iter().position(|&m| m == n) {
                        pool.synced.swap_remove(i);
                        if pool.spare.len() < super::WAL_SPARES && !pool.closing {
                            pool.spare.push(n);
                            continue;
                        }
                    }
                    let _ = fs.remove(&dir.join(&name));
                    continue;
                }
                Some(kind @ (FileKind::Manifest(_) | FileKind::Temp)) => {
                    locked.push((kind, name.clone()));
                    false
                }
                _ => false,
            };
            if remove {
                // Best effort: a file left behind is removed on the next pass.
                let _ = fs.remove(&dir.join(&name));
            }
        }
        if locked.is_empty() {
            return;
        }
        // A manifest being started exists before the set names it: judge
        // them with no manifest write running.
        let _writer = self.manifest_writer.lock();
        let vs = self.versions.lock();
        for (kind, name) in locked {
            if kind != FileKind::Manifest(vs.manifest_number()) {
                let _ = fs.remove(&dir.join(&name));
            }
        }
    }
}

/// Clears [`LsmIndex::pending_outputs_from`] when a compaction ends, by
/// its edit installed or by an error.
struct PendingOutputs<'a>(&'a AtomicU64);

impl Drop for PendingOutputs<'_> {
    fn drop(&mut self) {
        self.0.store(u64::MAX, Ordering::SeqCst);
    }
}
