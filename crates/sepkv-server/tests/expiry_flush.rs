//! Active expiry deletes keys nobody reads; FLUSHDB empties the keyspace at
//! once, its old records (a hash's fields included) are reclaimed in the
//! background, and the count
//! and data are right after a reopen. The server runs in-process on
//! 127.0.0.1 on a port of its choosing.

mod common;

use common::{Conn, Running};
use std::time::{Duration, Instant};

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn active_expiry_and_flushdb_reclaim() {
    let tmp = tempfile::tempdir().unwrap();
    let mut srv = Running::start(tmp.path());
    let mut c = Conn::new(srv.port);
    for i in 0..300 {
        assert_eq!(c.cmd(&["SET", &format!("t{i}"), "v", "PX", "100"]), "+OK");
    }
    assert_eq!(c.cmd(&["SET", "keep", "v"]), "+OK");
    assert_eq!(c.cmd(&["DBSIZE"]), ":301");
    // Nobody reads the keys: the active cycle deletes them.
    wait_for("active expiry", || c.cmd(&["DBSIZE"]) == ":1");
    assert!(c.cmd(&["INFO", "stats"]).contains("expired_keys:300"));

    for i in 0..3000 {
        assert_eq!(c.cmd(&["SET", &format!("f{i}"), "value"]), "+OK");
    }
    // A hash of 500 fields: its field records are reclaimed too.
    let mut hset = vec!["HSET".to_string(), "hf".to_string()];
    for i in 0..500 {
        hset.extend([format!("old{i}"), "v".to_string()]);
    }
    let hset: Vec<&str> = hset.iter().map(String::as_str).collect();
    assert_eq!(c.cmd(&hset), ":500");
    assert_eq!(c.cmd(&["DBSIZE"]), ":3002");
    assert_eq!(c.cmd(&["FLUSHDB"]), "+OK");
    assert_eq!(c.cmd(&["DBSIZE"]), ":0");
    assert_eq!(c.cmd(&["GET", "f7"]), "nil");
    assert_eq!(c.cmd(&["KEYS", "*"]), "*0");
    assert_eq!(c.cmd(&["HLEN", "hf"]), ":0");
    assert_eq!(c.cmd(&["SET", "f7", "new"]), "+OK");
    assert_eq!(c.cmd(&["HSET", "hf", "new", "v"]), ":1");
    // The 3000 strings but f7 (rewritten since), `keep` and the hash's 500
    // fields (its key record is rewritten too); the step that finishes
    // counts its metadata write as well.
    wait_for("reclaim", || {
        let info = c.cmd(&["INFO", "sepkv"]);
        info.lines()
            .find_map(|l| l.strip_prefix("flushed_records_reclaimed:"))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .is_some_and(|n| n >= 3501)
    });
    drop(c);
    srv.stop();
    let srv = Running::start(tmp.path());
    let mut c = Conn::new(srv.port);
    assert_eq!(c.cmd(&["DBSIZE"]), ":2");
    assert_eq!(c.cmd(&["GET", "f7"]), "new");
    assert_eq!(c.cmd(&["HLEN", "hf"]), ":1");
    assert_eq!(c.cmd(&["HGET", "hf", "old7"]), "nil");
    assert_eq!(c.cmd(&["HGET", "hf", "new"]), "v");
    assert_eq!(c.cmd(&["GET", "f8"]), "nil");
    assert_eq!(c.cmd(&["GET", "keep"]), "nil");
}
