//! When acknowledged writes reach the disk (`--fsync`).
//!
//! The writer ([`crate::writer`]) commits each group of write commands as
//! one engine batch without `sync`; a write then survives a crash of the
//! server process at once (the engine's promise for unsynced writes) and a
//! power loss once synced:
//!
//! - `always`: the writer syncs after each group, before any of its
//!   commands is answered; the clients of a group share that fsync.
//! - `everysec`: a thread here syncs once a second when anything was
//!   written.
//! - `no`: the engine and the OS decide (memtable flushes and file closes).
//!
//! A failed sync poisons the engine; the commands of the group get the
//! error.
//!
//! Thread-safety: [`Durability`] is shared by every connection.

use sepkv::{Db, WriteBatch, WriteOptions};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

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

/// The syncing side of the server.
pub struct Durability {
    policy: Fsync,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

fn sync(db: &Db) -> Result<(), String> {
    db.write(&WriteBatch::new(), WriteOptions { sync: true })
        .map_err(|e| e.to_string())
}

impl Durability {
    /// Starts the once-a-second thread (`everysec`).
    pub fn start(db: Arc<Db>, policy: Fsync) -> Durability {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = match policy {
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
            Fsync::Always | Fsync::No => None,
        };
        Durability {
            policy,
            stop,
            thread: Mutex::new(thread),
        }
    }

    /// The policy.
    pub fn policy(&self) -> Fsync {
        self.policy
    }

    /// Stops the thread (the database's close syncs what is left).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = t.join();
        }
    }
}
