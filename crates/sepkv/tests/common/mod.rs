//! Helpers shared by the scenario tests.

use sepkv::fs::{FaultFs, FaultKind, FaultOp, FaultRule};
use sepkv::Db;

/// Power cut: nothing more reaches the disk (background threads included)
/// until the crash has dropped every unsynced byte.
pub fn power_cut(fs: &FaultFs, db: Db) {
    fs.add_rule(FaultRule {
        op: FaultOp::Any,
        path_contains: None,
        skip: 0,
        times: None,
        kind: FaultKind::Eio,
    });
    drop(db);
    fs.crash();
    fs.clear_rules();
}
