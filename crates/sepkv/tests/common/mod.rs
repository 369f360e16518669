//! Helpers shared by the scenario tests.
#![allow(dead_code)] // each suite uses its own share of these

use sepkv::fs::{FaultFs, FaultKind, FaultOp, FaultRule};
use sepkv::Db;

/// Power cut: nothing more reaches the disk (background threads included)
/// until the crash has dropped every unsynced byte.
pub fn power_cut(fs: &FaultFs, db: Db) {
    stop_the_world(fs, db);
    fs.crash();
    fs.clear_rules();
}

/// The process is killed (SIGKILL): nothing more reaches the OS
/// (background threads included), and everything it was handed stays,
/// synced or not.
#[allow(dead_code)]
pub fn process_kill(fs: &FaultFs, db: Db) {
    stop_the_world(fs, db);
    fs.kill();
    fs.clear_rules();
}

/// Fails every file-system operation from now on and drops `db` (its
/// threads joined, their operations failing).
fn stop_the_world(fs: &FaultFs, db: Db) {
    fs.add_rule(FaultRule {
        op: FaultOp::Any,
        path_contains: None,
        skip: 0,
        times: None,
        kind: FaultKind::Eio,
    });
    drop(db);
}

/// Runs the system command `cmd` (program, then arguments) with its
/// errors silenced; true when it ran and succeeded. The suites that mount
/// a tmpfs use it, and skip where the machine does not allow mounting.
pub fn run_cmd(cmd: &[&str]) -> bool {
    std::process::Command::new(cmd[0])
        .args(&cmd[1..])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Serializes the tests of one binary that spawn processes with those that
/// close a database and open it again at once. A spawned child holds a copy
/// of every descriptor of the test process until it executes its program,
/// so a `LOCK` a test just closed can stay locked for that moment and the
/// next open sees `Busy`. Hold the guard for the whole test.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static GATE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    GATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A thread calling `Db::gc` back to back until [`GcLoop::stop`], which
/// returns the GC steps it ran: the racing side of the GC-safety tests.
pub struct GcLoop {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl GcLoop {
    /// Starts calling `db.gc(None)` in a loop.
    pub fn start(db: &std::sync::Arc<Db>) -> GcLoop {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let (db, flag) = (db.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut steps = 0;
            while !flag.load(Ordering::Relaxed) {
                steps += db.gc(None).unwrap().steps;
            }
            steps
        });
        GcLoop { stop, thread }
    }

    /// Stops the loop; the GC steps it ran.
    pub fn stop(self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}
