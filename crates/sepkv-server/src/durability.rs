//! When acknowledged writes reach the disk (`--fsync`).
//!
//! Commands write their batches without `sync`; a write then survives a
//! crash of the server process at once (the engine's promise for unsynced
//! writes) and a power loss once synced:
//!
//! - `always`: a connection that wrote waits, before sending its replies,
//!   until a sync covering its writes has completed. One syncer thread
//!   serves every waiting connection: it takes all requests queued while
//!   the previous sync ran and issues one sync for them (group commit), so
//!   50 clients share fsyncs rather than queue for 50 of them.
//! - `everysec`: a thread syncs once a second when anything was written.
//! - `no`: the engine and the OS decide (memtable flushes and file closes).
//!
//! A failed sync poisons the engine; waiting clients get the error.
//!
//! Thread-safety: [`Durability`] is shared by every connection.

use sepkv::{Db, WriteBatch, WriteOptions};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::oneshot;

/// The `--fsync` policy (Redis's `appendfsync`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fsync {
    /// Sync before acknowledging each write.
    Always,
    /// Sync at least once a second.
    #[default]
    EverySec,
    /// Leave it to the OS.
    No,
}

impl Fsync {
    /// The name used by `--fsync` and `CONFIG GET appendfsync`.
    pub fn name(self) -> &'static str {
        match self {
            Fsync::Always => "always",
            Fsync::EverySec => "everysec",
            Fsync::No => "no",
        }
    }
}

impl FromStr for Fsync {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "always" => Ok(Fsync::Always),
            "everysec" => Ok(Fsync::EverySec),
            "no" => Ok(Fsync::No),
            _ => Err(format!(
                "unknown fsync policy {s:?}: always, everysec or no"
            )),
        }
    }
}

type Waiter = oneshot::Sender<Result<(), String>>;

/// The syncing side of the server.
pub struct Durability {
    policy: Fsync,
    tx: Mutex<Option<mpsc::Sender<Waiter>>>,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

fn sync(db: &Db) -> Result<(), String> {
    db.write(&WriteBatch::new(), WriteOptions { sync: true })
        .map_err(|e| e.to_string())
}

impl Durability {
    /// Starts the syncer (`always`) or the once-a-second thread
    /// (`everysec`).
    pub fn start(db: Arc<Db>, policy: Fsync) -> Durability {
        let stop = Arc::new(AtomicBool::new(false));
        let mut tx = None;
        let thread = match policy {
            Fsync::Always => {
                let (t, rx) = mpsc::channel::<Waiter>();
                tx = Some(t);
                Some(std::thread::spawn(move || {
                    while let Ok(first) = rx.recv() {
                        let mut group = vec![first];
                        group.extend(rx.try_iter());
                        let r = sync(&db);
                        for w in group {
                            let _ = w.send(r.clone());
                        }
                    }
                }))
            }
            Fsync::EverySec => {
                let stop = stop.clone();
                Some(std::thread::spawn(move || {
                    let mut synced = db.last_sequence();
                    while !stop.load(Ordering::Acquire) {
                        for _ in 0..10 {
                            std::thread::sleep(Duration::from_millis(100));
                            if stop.load(Ordering::Acquire) {
                                return;
                            }
                        }
                        let last = db.last_sequence();
                        if last != synced && sync(&db).is_ok() {
                            synced = last;
                        }
                    }
                }))
            }
            Fsync::No => None,
        };
        Durability {
            policy,
            tx: Mutex::new(tx),
            stop,
            thread: Mutex::new(thread),
        }
    }

    /// The policy.
    pub fn policy(&self) -> Fsync {
        self.policy
    }

    /// Waits until every write made before the call is synced (policy
    /// `always`; returns at once otherwise).
    ///
    /// # Errors
    /// The sync's error, as text.
    pub async fn wait(&self) -> Result<(), String> {
        if self.policy != Fsync::Always {
            return Ok(());
        }
        let (t, r) = oneshot::channel();
        {
            let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
            match tx.as_ref() {
                Some(tx) if tx.send(t).is_ok() => {}
                _ => return Err("the server is shutting down".into()),
            }
        }
        r.await.unwrap_or_else(|_| Err("the syncer stopped".into()))
    }

    /// Stops the thread (the database's close syncs what is left).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.tx.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = t.join();
        }
    }
}
