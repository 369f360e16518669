//! A small persistent thread pool for parallel value reads during scans
//! (WiscKey §3.3.1: values ahead of a scan are fetched by several threads
//! at once so the device's internal parallelism is used). Used by the
//! value log, TrieTables and FlashKey's scan lookups.
//!
//! Workers take boxed jobs from one shared queue and live until the pool is
//! dropped. They are started on demand: a batch of `n` reads starts
//! workers until `min(n, threads)` exist, so a database whose reads never
//! reach the device — where scans resolve values one by one — runs none.
//! Safe to share between threads.

use parking_lot::Mutex;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// The pool.
pub struct Prefetcher {
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    rx: Arc<Mutex<mpsc::Receiver<Job>>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    threads: usize,
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
        }
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

    /// Runs `f(i)` for every `i < n` on the workers and returns the results
    /// in order. Runs inline when the pool has no workers.
    pub fn map<T, F>(&self, n: usize, f: F) -> Vec<T>
    where
        T: Send + 'static,
        F: Fn(usize) -> T + Send + Sync + 'static,
    {
        let sender = self.tx.lock().clone();
        let sender = sender.filter(|_| n > 1 && self.start_workers(n) > 0);
        let Some(sender) = sender else {
            return (0..n).map(f).collect();
        };
        let f = Arc::new(f);
        let (rtx, rrx) = mpsc::channel::<(usize, T)>();
        // One job per index: a worker that finishes a read takes the next
        // one, so up to `threads` reads stay in flight until the batch is
        // done, whatever each read costs (strided shares would leave
        // workers idle behind one slow read).
        for i in 0..n {
            let fw = f.clone();
            let rtx = rtx.clone();
            let job: Job = Box::new(move || {
                let _ = rtx.send((i, fw(i)));
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

    #[test]
    fn map_keeps_order() {
        let p = Prefetcher::new(3);
        let v = p.map(100, |i| i * 2);
        assert_eq!(v, (0..100).map(|i| i * 2).collect::<Vec<_>>());
        let p0 = Prefetcher::new(0);
        assert_eq!(p0.map(3, |i| i), vec![0, 1, 2]);
    }
}
