//! A small persistent thread pool for parallel value reads during scans
//! (WiscKey §3.3.1: values ahead of a scan are fetched by several threads
//! at once so the device's internal parallelism is used). Used by the
//! value log, TrieTables and FlashKey's scan lookups.
//!
//! Workers take boxed jobs from one shared queue and live until the pool is
//! dropped. They are started on demand: a batch of `n` reads starts
//! workers until `min(n, depth)` exist, so a database whose reads never
//! reach the device — where scans resolve values one by one — runs none.
//! Safe to share between threads.
//!
//! # Adaptive depth
//!
//! How many reads a batch keeps in flight (its *depth*) is not fixed: a
//! device that serves more reads per second the more it is given (an SSD's
//! internal parallelism) should get the most the pool has, while one that
//! does not (a disk, or a device already saturated by other work) gains
//! nothing from more threads but latency. [`DepthControl`] keeps, for each
//! power-of-two depth up to the pool's size, a running mean of the reads
//! per second batches achieved at it; batches run at the best depth, and
//! every [`PROBE_EVERY`]th batch tries a neighbouring one, so the choice
//! follows the device as its load changes. A deeper level is preferred
//! only when it serves [`GAIN`] more reads per second.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// A batch tries a depth other than the best one every this many batches.
pub const PROBE_EVERY: u64 = 8;

/// How much more throughput a deeper level must show to be preferred over a
/// shallower one (1.10: 10 % more reads per second).
pub const GAIN: f64 = 1.10;

/// Weight of a new observation in a level's running mean.
const EWMA: f64 = 0.25;

/// The depth choice of a pool (see the module docs). Pure bookkeeping, no
/// clock: [`Prefetcher::map`] measures and reports.
#[derive(Debug, Clone)]
pub struct DepthControl {
    /// Depth of each level: 1, 2, 4, ... up to the pool's size (the last
    /// level is the size itself when it is not a power of two).
    levels: Vec<usize>,
    /// Running mean of reads per second at each level (`None`: not yet
    /// measured).
    rate: Vec<Option<f64>>,
    /// The level batches run at.
    best: usize,
    /// Batches planned so far.
    batches: u64,
    /// Direction of the next probe (up first).
    probe_up: bool,
}

impl DepthControl {
    /// A control for a pool of `max` threads (at least 1). It starts at the
    /// deepest level, the pool's size, so the first batches read as before
    /// the control was learnt.
    pub fn new(max: usize) -> Self {
        let max = max.max(1);
        let mut levels = Vec::new();
        let mut d = 1;
        while d < max {
            levels.push(d);
            d *= 2;
        }
        levels.push(max);
        let n = levels.len();
        DepthControl {
            levels,
            rate: vec![None; n],
            best: n - 1,
            batches: 0,
            probe_up: true,
        }
    }

    /// The depth batches run at now.
    pub fn depth(&self) -> usize {
        self.levels[self.best]
    }

    /// The depth for the next batch of `n` reads: the best level's, or a
    /// neighbour's every [`PROBE_EVERY`]th batch. Never more than `n`.
    pub fn plan(&mut self, n: usize) -> usize {
        self.batches += 1;
        let mut level = self.best;
        if self.batches.is_multiple_of(PROBE_EVERY) {
            self.probe_up = !self.probe_up;
            level = if self.probe_up {
                (level + 1).min(self.levels.len() - 1)
            } else {
                level.saturating_sub(1)
            };
        }
        self.levels[level].min(n)
    }

    /// Reports that a batch of `n` reads ran at `depth` and took `secs`.
    /// Batches too short to fill their depth (`n < 2 × depth`) or at a
    /// depth that is no level teach nothing.
    pub fn observe(&mut self, depth: usize, n: usize, secs: f64) {
        let Some(level) = self.levels.iter().position(|&d| d == depth) else {
            return;
        };
        if n < 2 * depth || secs <= 0.0 {
            return;
        }
        let r = n as f64 / secs;
        self.rate[level] = Some(match self.rate[level] {
            Some(old) => old + EWMA * (r - old),
            None => r,
        });
        // The best level: the shallowest whose rate no deeper measured
        // level beats by GAIN.
        let mut best: Option<(usize, f64)> = None;
        for (i, r) in self.rate.iter().enumerate() {
            let Some(r) = *r else { continue };
            match best {
                Some((_, b)) if r < b * GAIN => {}
                _ => best = Some((i, r)),
            }
        }
        if let Some((i, _)) = best {
            self.best = i;
        }
    }
}

/// The pool.
pub struct Prefetcher {
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    rx: Arc<Mutex<mpsc::Receiver<Job>>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    threads: usize,
    control: Mutex<DepthControl>,
}

impl Prefetcher {
    /// A pool of at most `threads` workers (0 = no pool: callers read
    /// inline). No worker starts until the first batch.
    pub fn new(threads: usize) -> Self {
        let (tx, rx) = mpsc::channel::<Job>();
        Prefetcher {
            tx: Mutex::new((threads > 0).then_some(tx)),
            rx: Arc::new(Mutex::new(rx)),
            workers: Mutex::new(Vec::new()),
            threads,
            control: Mutex::new(DepthControl::new(threads)),
        }
    }

    /// The depth batches run at now (see the module docs).
    pub fn depth(&self) -> usize {
        self.control.lock().depth()
    }

    /// Most worker threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Starts workers until `want` run (at most `threads`); returns how
    /// many run (fewer when the system refuses a thread).
    fn start_workers(&self, want: usize) -> usize {
        let mut workers = self.workers.lock();
        while workers.len() < want.min(self.threads) {
            let rx = self.rx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("sepkv-prefetch-{}", workers.len()))
                .spawn(move || loop {
                    let job = rx.lock().recv();
                    match job {
                        Ok(job) => job(),
                        Err(_) => return,
                    }
                });
            match spawned {
                Ok(h) => workers.push(h),
                Err(_) => break,
            }
        }
        workers.len()
    }

    /// Hands `job` to the workers without waiting for it (starting every
    /// worker the pool may have, on first use); the job runs once a worker
    /// is free, in the order handed in. Gives the job back when the pool
    /// has no workers (`threads` = 0, or the system refused every thread),
    /// so the caller runs it itself.
    pub fn submit(
        &self,
        job: Box<dyn FnOnce() + Send + 'static>,
    ) -> Result<(), Box<dyn FnOnce() + Send + 'static>> {
        let Some(sender) = self.tx.lock().clone() else {
            return Err(job);
        };
        if self.start_workers(self.threads) == 0 {
            return Err(job);
        }
        sender.send(job).map_err(|e| e.0)
    }

    /// Runs `f(i)` for every `i < n` on the workers, at most the adaptive
    /// depth at a time, and returns the results in order. Runs inline when
    /// the pool has no workers or the depth is 1.
    pub fn map<T, F>(&self, n: usize, f: F) -> Vec<T>
    where
        T: Send + 'static,
        F: Fn(usize) -> T + Send + Sync + 'static,
    {
        let sender = self.tx.lock().clone();
        let depth = if sender.is_some() && n > 1 {
            self.control.lock().plan(n)
        } else {
            1
        };
        let started = Instant::now();
        let lanes = if depth > 1 {
            self.start_workers(depth).min(depth)
        } else {
            0
        };
        let sender = sender.filter(|_| lanes > 1);
        let Some(sender) = sender else {
            let out = (0..n).map(f).collect();
            if depth == 1 && n > 1 {
                self.control
                    .lock()
                    .observe(1, n, started.elapsed().as_secs_f64());
            }
            return out;
        };
        let f = Arc::new(f);
        let next = Arc::new(AtomicUsize::new(0));
        let (rtx, rrx) = mpsc::channel::<(usize, T)>();
        // `lanes` jobs, each taking the next unread index until none is
        // left: `lanes` reads stay in flight until the batch is done,
        // whatever each read costs (strided shares would leave a lane idle
        // behind one slow read).
        for _ in 0..lanes {
            let fw = f.clone();
            let rtx = rtx.clone();
            let next = next.clone();
            let job: Job = Box::new(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n || rtx.send((i, fw(i))).is_err() {
                    return;
                }
            });
            if sender.send(job).is_err() {
                break;
            }
        }
        drop(rtx);
        let mut out: Vec<Option<T>> = (0..n).map(|_| None).collect();
        for (i, v) in rrx {
            out[i] = Some(v);
        }
        if lanes == depth {
            self.control
                .lock()
                .observe(depth, n, started.elapsed().as_secs_f64());
        }
        out.into_iter()
            .enumerate()
            .map(|(i, v)| v.unwrap_or_else(|| f(i)))
            .collect()
    }
}

impl Drop for Prefetcher {
    fn drop(&mut self) {
        self.tx.lock().take();
        for w in self.workers.lock().drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Workers start with the first batch, no more than it can use and
    /// never more than the bound.
    #[test]
    fn workers_start_on_demand() {
        let p = Prefetcher::new(4);
        assert_eq!(p.workers.lock().len(), 0);
        assert_eq!(p.map(1, |i| i), vec![0]);
        assert_eq!(p.workers.lock().len(), 0, "one read runs inline");
        assert_eq!(p.map(2, |i| i + 1), vec![1, 2]);
        assert_eq!(p.workers.lock().len(), 2);
        assert_eq!(p.map(50, |i| i).len(), 50);
        assert_eq!(p.workers.lock().len(), 4);
    }

    /// A device whose reads per second grow with the depth up to
    /// `saturates_at` and no further.
    fn device(saturates_at: usize) -> impl Fn(usize) -> f64 {
        move |d| 10_000.0 * d.min(saturates_at) as f64
    }

    /// Runs `batches` batches of `n` reads through the control against
    /// `rate` (reads per second at a depth) and returns the depth it
    /// settled at.
    fn settle(c: &mut DepthControl, rate: impl Fn(usize) -> f64, batches: usize) -> usize {
        for _ in 0..batches {
            let d = c.plan(100);
            c.observe(d, 100, 100.0 / rate(d));
        }
        c.depth()
    }

    #[test]
    fn depth_settles_where_the_device_stops_gaining() {
        // Saturates at 8: deeper levels serve no more, so 8 is kept.
        let mut c = DepthControl::new(32);
        assert_eq!(c.depth(), 32, "starts at the pool's size");
        assert_eq!(settle(&mut c, device(8), 400), 8);
        // A device that gains all the way keeps the deepest level.
        let mut c = DepthControl::new(32);
        assert_eq!(settle(&mut c, device(1000), 400), 32);
        // One that never gains (a disk) reads one at a time.
        let mut c = DepthControl::new(32);
        assert_eq!(settle(&mut c, |_| 5_000.0, 400), 1);
        // A pool size that is not a power of two is a level of its own.
        let mut c = DepthControl::new(24);
        assert_eq!(settle(&mut c, device(1000), 400), 24);
    }

    #[test]
    fn depth_follows_a_device_that_changes() {
        let mut c = DepthControl::new(32);
        assert_eq!(settle(&mut c, device(4), 400), 4);
        // The device gets more parallel (its other load went away): the
        // probes find the deeper levels serving more and climb.
        assert_eq!(settle(&mut c, device(32), 2000), 32);
        assert_eq!(settle(&mut c, device(2), 2000), 2);
    }

    #[test]
    fn short_batches_teach_nothing() {
        let mut c = DepthControl::new(16);
        for _ in 0..100 {
            let d = c.plan(4);
            assert!(d <= 4, "a batch never runs deeper than its reads");
            c.observe(d, 4, 1.0);
        }
        assert_eq!(c.depth(), 16);
        assert_eq!(c.plan(1), 1);
    }

    #[test]
    fn map_keeps_order() {
        let p = Prefetcher::new(3);
        let v = p.map(100, |i| i * 2);
        assert_eq!(v, (0..100).map(|i| i * 2).collect::<Vec<_>>());
        let p0 = Prefetcher::new(0);
        assert_eq!(p0.map(3, |i| i), vec![0, 1, 2]);
    }
}
