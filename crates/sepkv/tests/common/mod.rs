//! Helpers shared by the scenario tests.

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
