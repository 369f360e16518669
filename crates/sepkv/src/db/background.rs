//! Background work the facade owns or waits for: value-store GC (the GC
//! thread and [`Db::gc`]), and the waits on the index's own work (flush,
//! `wait_idle`, `compact_range`).

use super::{Db, DbInner, GcReport};
use crate::error::{Error, Result};
use crate::index::compaction::CompactionStats;
use crate::range::{check_order, KeyRange};
use crate::vstore::GcOutcome;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Pause of the GC thread after a step that found nothing to collect
/// although the store says GC is due (its garbage is held for readers).
const DUE_RETRY: Duration = Duration::from_millis(10);

/// Chunks a step of the GC thread collects under one round of syncs while
/// it runs back to back for the space target (or a capacity or space
/// bound): the value log's step then pays its three fsyncs (value log,
/// WAL, manifest) once per this many chunks. A write held at the target
/// runs steps of one chunk of its own; one that waits for such a step
/// waits for the chunk in hand and the sync round
/// ([`crate::vstore::IndexReader::writers_waiting`]).
const BEHIND_STEP_CHUNKS: usize = 4;

impl Db {
    /// Runs value-store garbage collection in the calling thread until the
    /// estimated garbage ratio is at most `target`, or — with `None` — for
    /// one pass over everything written before the call (reclaiming all
    /// that is reclaimable). When only the index's replay checkpoint keeps
    /// GC from the garbage (log mode: `wisckey` without WAL, `flashkey`),
    /// the index is checkpointed once (a memtable flush) and GC goes on.
    /// With a [`crate::CompactionFilter`] set, the `bands` layout
    /// (`flashkey`, whose hash index has no compaction) first closes its
    /// open band and then takes every band written so far once, garbage or
    /// not, so that the filter meets every record. A no-op for the inline
    /// layout.
    ///
    /// # Errors
    /// `Closed`; `ReadOnly`; `Poisoned`; `Io`; `Corruption` found in the
    /// scanned log.
    pub fn gc(&self, target: Option<f64>) -> Result<GcReport> {
        self.check_writable("GC")?;
        self.inner.shared.poisoned()?;
        let inner = &self.inner;
        let mut budget = {
            let sp = inner.vstore.space();
            sp.live_bytes + sp.garbage_bytes
        };
        if inner.shared.opts.compaction_filter.is_some() {
            // A layout without compaction (bands) lets the filter meet
            // every record: one pass over what is written so far, before
            // the replay checkpoint the flush below moves past it.
            let pass = inner.vstore.start_filter_pass()?;
            if pass > 0 {
                budget += pass;
                inner.flush_memtable()?;
            }
        }
        let mut rep = GcReport::default();
        let mut checkpointed = false;
        loop {
            if target.is_some_and(|t| inner.vstore.space().garbage_ratio() <= t) {
                break;
            }
            if target.is_none() && rep.bytes_read >= budget && rep.steps > 0 {
                break;
            }
            let out: GcOutcome = inner.gc_step()?;
            if !out.did_work {
                // Only the index's replay checkpoint holds the garbage back
                // (log mode: the bands after it are the recovery log):
                // checkpoint once, as a memtable flush does, and go on.
                if out.held_by_checkpoint && !checkpointed {
                    checkpointed = true;
                    inner.flush_memtable()?;
                    continue;
                }
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

    /// Flushes the memtable to an SSTable and waits for it.
    ///
    /// # Errors
    /// `Closed`; `ReadOnly`; `Poisoned`; `Io`.
    pub fn flush(&self) -> Result<()> {
        self.check_writable("a flush")?;
        self.inner.flush_memtable()
    }

    /// Waits until background work is done: no memtable waits for its
    /// flush, no level needs compaction, the files finished work made
    /// obsolete are removed (so the directory's size then counts only live
    /// files), and the value store's own background writes are done
    /// (HashKV's write-cache batches and journal checkpoints). Benchmarks
    /// call it between phases so one phase's compaction debt is not billed
    /// to the next. Value-store GC is not waited for.
    ///
    /// # Errors
    /// `Closed`; `Poisoned` when background work failed.
    pub fn wait_idle(&self) -> Result<()> {
        self.check_open()?;
        if self.inner.read_only {
            // No background work runs on a read-only handle.
            return Ok(());
        }
        self.inner.index.wait_idle()?;
        self.inner.vstore.wait_idle()
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
    /// With a compaction filter ([`crate::Options::compaction_filter`]),
    /// value-store GC's relocations wait from before the flush until the
    /// call ends: a relocation writes a copy of a record back, and a copy
    /// written after the flush would escape the filter, so every record
    /// the filter removes stays removed when the call returns. Another
    /// range compaction may run at the same time (GC's discovery of hidden
    /// garbage is one); the calls share the index's one background thread.
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
    /// // This call drops the tombstone, unless the background compaction of
    /// // tables that are mostly tombstones took it first.
    /// assert!(done.tombstones_dropped <= 1);
    /// assert!(db.get("a")?.is_none());
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
        self.check_writable("a compaction")?;
        let (begin, end) = range.closed();
        let (begin, end) = (begin.as_deref(), end.as_deref());
        check_order(begin, end)?;
        // Not while a checkpoint copies (see `DbInner::work_gate`).
        let _gate = self.inner.work_gate.read();
        // With a filter, no GC relocation writes a copy of a record above
        // the tables compacted here (see `DbInner::range_gate`).
        let _no_relocations = self
            .inner
            .shared
            .opts
            .compaction_filter
            .is_some()
            .then(|| self.inner.range_gate.write());
        self.inner.flush_memtable()?;
        self.inner.index.compact_range(begin, end)
    }
}

impl DbInner {
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
    ///
    /// A step that did work feeds the space governor's measure of GC's
    /// rate ([`super::space::policy::SpaceGovernor::gc_ran`]).
    pub(super) fn gc_step(&self) -> Result<GcOutcome> {
        self.gc_step_chunks(1)
    }

    /// [`DbInner::gc_step`] over up to `chunks` of the layout's GC units
    /// under one round of syncs ([`crate::vstore::ValueStore::gc_step_chunks`]).
    pub(super) fn gc_step_chunks(&self, chunks: usize) -> Result<GcOutcome> {
        // A checkpoint copying the value files holds the gate: the step
        // finds nothing to do rather than wait (a writer that runs GC for
        // room holds the writer lock, which the checkpoint takes after the
        // gate, so waiting here could deadlock).
        let Some(_gate) = self.work_gate.try_read() else {
            return Ok(GcOutcome::default());
        };
        let t = Instant::now();
        self.gc_steps.lock().running += 1;
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if chunks > 1 {
                self.vstore.gc_step_chunks(self, self, chunks)
            } else {
                self.vstore.gc_step(self, self)
            }
        }))
        .unwrap_or_else(|_| {
            let e = Error::Poisoned("value-store GC panicked".into());
            self.shared.set_poison(&e);
            Err(e)
        });
        {
            let mut g = self.gc_steps.lock();
            g.running -= 1;
            g.done += 1;
        }
        self.gc_step_cv.notify_all();
        let micros = u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.counters
            .gc_step_micros_max
            .fetch_max(micros, Ordering::Relaxed);
        if let Ok(o) = &out {
            if o.did_work && o.bytes_freed > 0 {
                self.space
                    .gc_ran(o.bytes_freed, o.bytes_rewritten, t.elapsed());
            }
        }
        out
    }

    /// Waits until a GC step already running — the GC thread's or another
    /// writer's — has ended; false at once when none is. A writer that
    /// finds no room first waits for that step, which may well free what
    /// it needs, instead of queueing a step of its own behind it (steps
    /// are serialised): its stall is then the rest of one step, not that
    /// plus a whole step.
    pub(super) fn wait_for_running_gc(&self) -> bool {
        let mut g = self.gc_steps.lock();
        if g.running == 0 {
            return false;
        }
        let done = g.done;
        g.waiting += 1;
        while g.done == done {
            self.gc_step_cv.wait(&mut g);
        }
        g.waiting -= 1;
        self.counters.write_gc_waits.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Background value-store GC, until `close`: runs steps while the
    /// store says GC is due ([`crate::vstore::ValueStore::gc_due`]; a write
    /// wakes the thread then) — checkpointing the index when that is what
    /// keeps GC from the garbage — or while the estimated garbage ratio is
    /// at or above `Options::gc_garbage_ratio`, and, paced by the write
    /// rate and the distance to the target, while the space amplification
    /// is in the target's GC band ([`super::space::policy`]); otherwise while the
    /// store has work that makes reads cheaper
    /// ([`crate::vstore::ValueStore::reorganize_due`]). Compacts the index
    /// first when most of what is over the line may be garbage compaction
    /// has not reported yet — in its first round after open also by what
    /// the index's upper levels may shadow, before any write has been
    /// sampled ([`super::space::policy::SpaceGovernor::discovery_due_at_open`]).
    pub(super) fn gc_loop(self: Arc<Self>) {
        let closed =
            || self.shared.closed.load(Ordering::Acquire) || self.gc_stop.load(Ordering::Acquire);
        let policy = *self.space.policy();
        let idle = Duration::from_millis(if self.space.active() { 50 } else { 200 });
        let mut pause = idle;
        let mut at_open = true;
        loop {
            // Set when the step below only reorganizes (makes reads
            // cheaper) while writers are busy: the thread then rests as
            // long as the step ran.
            let mut rest = None;
            {
                let mut wake = self.gc_wake.lock();
                if closed() {
                    return;
                }
                if !pause.is_zero() {
                    self.gc_cv.wait_for(&mut wake, pause);
                }
                if closed() || self.shared.bg_error.lock().is_some() {
                    return;
                }
            }
            if self.shared.poison.lock().is_some() {
                return;
            }
            let ratio = match self.vstore.gc_trigger_ratio() {
                Some(r) => r.min(self.shared.opts.gc_garbage_ratio),
                None => self.shared.opts.gc_garbage_ratio,
            };
            let view = self.space_view();
            let d = self.space.refresh(&view);
            let rate = self.space.write_rate();
            let discover = self.space.discovery_due(&d)
                || std::mem::take(&mut at_open) && self.space.discovery_due_at_open(&view);
            let step = if discover {
                self.discover_garbage().map(|_| GcOutcome {
                    did_work: true,
                    ..Default::default()
                })
            } else {
                // The store's own trigger (FlashKey §V-B5: empty bands
                // below a threshold) or the garbage ratio.
                let due = self.vstore.gc_due();
                let by_ratio = due || self.vstore.space().garbage_ratio() >= ratio;
                match policy.gc_pause(&d, rate) {
                    _ if by_ratio => self.gc_step().and_then(|out| {
                        // Room is short and GC may not go past the index's
                        // replay checkpoint: checkpoint (a memtable flush),
                        // so that the next step can collect.
                        if due && out.held_by_checkpoint {
                            self.flush_memtable()?;
                            return Ok(GcOutcome {
                                did_work: true,
                                ..out
                            });
                        }
                        Ok(out)
                    }),
                    // Behind: several chunks per sync round, so that the
                    // syncs and the manifest write are paid once for them.
                    Some(p) if p.is_zero() => self.gc_step_chunks(BEHIND_STEP_CHUNKS),
                    // Nothing frees room yet: work that makes reads cheaper
                    // (KT-Store's sorting of sealed tables).
                    // That work can wait for the writers: while they
                    // write, each step is followed by a rest as long as it
                    // (at most `MAX_GC_PAUSE`), about half of the thread's
                    // time, so that it does not crowd synced writers on a
                    // small machine (KT-Store's sorting took 8 threads of
                    // synced writes from 4.5–4.7× one thread's rate to
                    // 3.8–4.2× on two cores).
                    _ if self.vstore.reorganize_due() => {
                        let t = Instant::now();
                        let out = self.gc_step();
                        if rate > 0.0 {
                            rest = Some(t.elapsed().min(super::space::policy::MAX_GC_PAUSE));
                        }
                        out
                    }
                    Some(p) => {
                        pause = p;
                        continue;
                    }
                    None => {
                        pause = idle;
                        continue;
                    }
                }
            };
            match step {
                Ok(out) if out.did_work => pause = rest.unwrap_or(Duration::ZERO),
                // Due but held back (by readers): look again soon.
                Ok(_) if self.vstore.gc_due() => pause = DUE_RETRY,
                Ok(_) => pause = idle,
                Err(Error::Closed) => return,
                // A failure that poisoned the database ends background GC;
                // any other (a segment that could not be removed) is
                // retried at the next round.
                Err(e) if self.shared.poison.lock().is_some() => {
                    self.shared.set_background_error(e);
                    return;
                }
                Err(_) => pause = idle,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::fs::MemFs;
    use crate::{Db, Options};
    use std::path::Path;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// A writer finding a GC step running waits for exactly that step to
    /// end (never less), and does not wait when none runs.
    #[test]
    fn a_refused_write_waits_for_the_running_gc_step() {
        // No background GC step of its own may start meanwhile.
        let o = Options {
            fs: Arc::new(MemFs::new()),
            gc_garbage_ratio: 0.0,
            space_amp_target: f64::INFINITY,
            ..Options::preset(crate::Preset::WiscKey)
        };
        let db = Db::open(Path::new("/db"), o).unwrap();
        let inner = db.inner.clone();
        assert!(!inner.wait_for_running_gc(), "no step runs");
        // A step in flight, as `gc_step` marks it.
        inner.gc_steps.lock().running += 1;
        let ended = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (inner, ended) = (inner.clone(), ended.clone());
            std::thread::spawn(move || {
                let waited = inner.wait_for_running_gc();
                (waited, ended.load(Ordering::SeqCst))
            })
        };
        // The step ends only once the writer waits for it (a busy machine
        // may start the thread late).
        let start = std::time::Instant::now();
        while inner.gc_steps.lock().waiting == 0 {
            assert!(start.elapsed().as_secs() < 60, "the writer never waited");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        ended.store(true, Ordering::SeqCst);
        {
            let mut g = inner.gc_steps.lock();
            g.running -= 1;
            g.done += 1;
        }
        inner.gc_step_cv.notify_all();
        let (waited, after_end) = waiter.join().unwrap();
        assert!(waited && after_end, "returned before the step ended");
        assert_eq!(db.stats().unwrap().write_gc_waits, 1);
    }
}
