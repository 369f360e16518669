//! The space-amplification target: the pacing policy ([`policy`]) and
//! the facade's side of it: the space view, the writers' backpressure and the
//! index compaction that finds garbage the index hides.

pub(crate) mod policy;

use super::DbInner;
use crate::error::{Error, Result};
use crate::options::GC_ON_CLOSE_BUDGET;
use crate::spin::SpinMutexGuard;
use policy::{Pressure, SpaceView, WriteAction};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Largest index (memtables and tables, bytes) that close compacts whole to
/// find the garbage it hides ([`DbInner::gc_before_close`]): well under a
/// second's compaction.
const CLOSE_DISCOVERY_MAX_INDEX: u64 = 64 << 20;

impl DbInner {
    /// The memtables' bytes and the bytes per index level.
    fn index_shape(&self) -> (u64, Vec<u64>) {
        let s = self.index.shape();
        let mem = s.memtable_bytes
            + if s.immutable_memtable {
                s.memtable_bytes
            } else {
                0
            };
        (mem, s.level_bytes)
    }

    /// The space figures the target is judged by.
    pub(super) fn space_view(&self) -> SpaceView {
        let (mem, levels) = self.index_shape();
        SpaceView {
            // The WAL holds about what the memtables hold.
            index_bytes: levels.iter().sum::<u64>() + mem,
            hidden_garbage: self.space.hidden_garbage(self.vstore.garbage_found()),
            hidden_settled: self.space.hidden_settled(),
            value: self.vstore.space(),
            capacity: if self.space.active() {
                self.vstore.capacity_use()
            } else {
                None
            },
            bound: if self.space.active() {
                self.vstore.space_bound_use()
            } else {
                None
            },
            payload_share: self.space.payload_share(),
        }
    }

    /// Value bytes the index's upper levels and memtables may shadow: their
    /// share of the index's bytes, of the value store's span. Used at open,
    /// when what the last session wrote is unknown.
    pub(super) fn may_shadow(&self) -> u64 {
        let (mem, levels) = self.index_shape();
        let bottom = levels.iter().rposition(|&b| b > 0);
        let upper: u64 = bottom.map_or(0, |b| levels[..b].iter().sum::<u64>()) + mem;
        let all: u64 = levels.iter().sum::<u64>() + mem;
        if all == 0 {
            return 0;
        }
        let v = self.vstore.space();
        ((v.live_bytes + v.garbage_bytes) as f64 * upper as f64 / all as f64) as u64
    }

    /// Compacts the whole index so that compaction reports the garbage its
    /// upper levels and memtable hide ([`policy::Decision::discover`]).
    pub(super) fn discover_garbage(&self) -> Result<()> {
        // A checkpoint is copying: discover another time (see `work_gate`).
        let Some(_gate) = self.work_gate.try_read() else {
            return Ok(());
        };
        self.space.discovered();
        let from = self.space.total_written();
        self.flush_memtable()?;
        self.index.compact_range(None, None)?;
        self.space.index_compacted(
            self.space.total_written() - from,
            self.vstore.garbage_found(),
        );
        Ok(())
    }

    /// Before close ([`crate::Options::gc_on_close`]): GC steps — and the
    /// index compaction that finds hidden garbage, when that is due — until
    /// the store is below the target's GC band (where the GC thread of a
    /// process that lived on would rest), GC finds nothing twice in a row,
    /// or [`GC_ON_CLOSE_BUDGET`] has passed. Only after this process
    /// wrote: a reader's close (a CLI `get`, `stats`) does not collect.
    /// Returns the steps run.
    pub(super) fn gc_before_close(&self) -> Result<u32> {
        if !self.shared.opts.gc_on_close
            || !self.space.policy().enabled()
            || self.space.total_written() == 0
        {
            return Ok(0);
        }
        let start = Instant::now();
        let (mut steps, mut fruitless) = (0u32, 0u32);
        // What the index's upper levels may shadow, counted as garbage: if
        // this process overwrote values and that could put the store in the
        // GC band, compact the index (when it is small enough to do so
        // quickly) so that the figures below are the index's, not the
        // sampled estimate's, which lags in a process that lives a second.
        // Discovery flushes the memtable: not when the caller asked close
        // not to (`flush_on_close = false`).
        let may_compact = || {
            let (mem, levels) = self.index_shape();
            self.shared.opts.flush_on_close
                && mem + levels.iter().sum::<u64>() <= CLOSE_DISCOVERY_MAX_INDEX
        };
        if self.space.overwrites_seen() && may_compact() {
            let mut view = self.space_view();
            view.hidden_garbage = view.hidden_garbage.max(self.may_shadow());
            if self.space.discovery_due_at_close(&view) {
                self.discover_garbage()?;
                steps += 1;
            }
        }
        while fruitless < 2 && start.elapsed() < GC_ON_CLOSE_BUDGET {
            self.shared.poisoned()?;
            let d = self.space.refresh(&self.space_view());
            if d.target_pressure < Pressure::Gc || !d.collectable {
                break;
            }
            let worked = if self.space.discovery_due(&d) && may_compact() {
                self.discover_garbage()?;
                true
            } else {
                self.gc_step()?.did_work
            };
            steps += 1;
            fruitless = if worked { 0 } else { fruitless + 1 };
        }
        Ok(steps)
    }

    /// Before a write of `bytes` that separates values (writer lock held):
    /// the target's pacing. In the slowdown band the writer pauses briefly,
    /// held to a rate GC sustains ([`policy::SpaceGovernor::before_write`]).
    /// At the target itself (the hard bound) it is held for one GC step at
    /// most, without the writer lock: the step already running (the GC
    /// thread's, or another writer's) if there is one, else one it runs
    /// itself; then it writes whatever the step freed. A stop that asks for
    /// the index compaction that finds hidden garbage runs that compaction
    /// in place of the step. Returns the GC steps (or index compactions)
    /// the write was held for: 0 or 1.
    pub(super) fn space_backpressure(
        &self,
        guard: &mut SpinMutexGuard<'_, bool>,
        bytes: u64,
    ) -> Result<u32> {
        loop {
            match self.space.before_write(bytes) {
                WriteAction::Go => return Ok(0),
                WriteAction::Refresh => {
                    self.space.refresh(&self.space_view());
                    if self.space.before_write(bytes) == WriteAction::Refresh {
                        return Ok(0);
                    }
                }
                WriteAction::Delay(d) => {
                    let t = Instant::now();
                    SpinMutexGuard::unlocked(guard, || std::thread::sleep(d));
                    self.shared.note_stall(t);
                    return Ok(0);
                }
                WriteAction::Stop { discover } => {
                    let t = Instant::now();
                    let worked = SpinMutexGuard::unlocked(guard, || -> Result<bool> {
                        if discover {
                            // The index compaction that finds hidden
                            // garbage, in place of a step.
                            self.discover_garbage()?;
                            return Ok(true);
                        }
                        // A step already running: its end is the room this
                        // write waits for (steps are serialised, so running
                        // one of its own would first wait for that one).
                        if self.wait_for_running_gc() {
                            return Ok(true);
                        }
                        let out = self.gc_step()?;
                        self.counters.write_gc_steps.fetch_add(1, Ordering::Relaxed);
                        Ok(out.did_work)
                    });
                    self.shared.note_stall(t);
                    self.counters.write_stop_micros.fetch_add(
                        u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX),
                        Ordering::Relaxed,
                    );
                    if !worked? {
                        // GC could free nothing: the write goes through as
                        // a missed target rather than wait forever.
                        self.space
                            .counters
                            .target_misses
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    self.shared.poisoned()?;
                    if !**guard {
                        return Err(Error::Closed);
                    }
                    self.space.refresh(&self.space_view());
                    return Ok(1);
                }
            }
        }
    }
}
