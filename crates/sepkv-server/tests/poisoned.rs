//! A failed sync under `--fsync always`: the commands of that group are
//! answered with the error (not acknowledged), later writes are refused as
//! the engine is poisoned, and reads go on being served.

mod common;

use common::{Conn, Running};
use sepkv::fs::{FaultFs, FaultKind, FaultOp, FaultRule};
use sepkv::{Options, Preset};
use sepkv_server::Fsync;
use std::path::Path;
use std::sync::Arc;

#[test]
fn failed_sync_refuses_writes_and_serves_reads() {
    let fs = FaultFs::new();
    let mut opts = Options::preset(Preset::WiscKey);
    opts.fs = Arc::new(fs.clone());
    let mut srv = Running::start_with(Path::new("/db"), opts, Fsync::Always);
    let mut c = Conn::new(srv.port);
    assert_eq!(c.cmd(&["SET", "before", "v"]), "+OK");
    fs.add_rule(FaultRule::new(FaultOp::Sync, FaultKind::Eio));
    let r = c.cmd(&["SET", "failed", "v"]);
    assert!(r.starts_with("-ERR sync failed"), "{r}");
    fs.clear_rules();
    let r = c.cmd(&["SET", "later", "v"]);
    assert!(r.starts_with("-ERR") && r.contains("read-only"), "{r}");
    assert_eq!(c.cmd(&["GET", "before"]), "v");
    assert_eq!(c.cmd(&["PING"]), "+PONG");
    drop(c);
    srv.stop();
}
