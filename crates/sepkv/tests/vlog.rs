//! Value-log (`wisckey` preset) scenarios: GC racing user writes, space
//! really freed, and a crash at every file-system operation of a GC cycle.

use sepkv::fs::{FaultFs, FaultKind, FaultOp, FaultRule, FileSystem, IoCategory, MemFs, StdFs};
use sepkv::{Db, Options, Preset, WriteOptions};
use std::path::Path;
use std::sync::Arc;

mod common;
use common::power_cut;

fn opts(fs: Arc<dyn FileSystem>) -> Options {
    Options {
        fs,
        value_threshold: 64,
        vlog_file_size: 1 << 20,
        gc_chunk_size: 64 << 10,
        gc_garbage_ratio: 0.0,
        write_buffer_size: 256 << 10,
        ..Options::preset(Preset::WiscKey)
    }
}

fn key(i: usize) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn value(i: usize, round: usize) -> Vec<u8> {
    let mut v = format!("value-{i}-{round}-").into_bytes();
    v.resize(1000, b'a' + (round % 26) as u8);
    v
}

#[test]
fn gc_never_loses_a_racing_overwrite() {
    let fs = MemFs::new();
    let db = Arc::new(Db::open("/db", opts(Arc::new(fs))).unwrap());
    const N: usize = 400;
    for i in 0..N {
        db.put(key(i), value(i, 0)).unwrap();
    }
    let gc = common::GcLoop::start(&db);
    // The writer overwrites keys while GC relocates them.
    let mut latest = vec![0usize; N];
    for round in 1..40 {
        for i in (0..N).filter(|i| (i + round) % 3 == 0) {
            db.put(key(i), value(i, round)).unwrap();
            latest[i] = round;
        }
    }
    let steps = gc.stop();
    assert!(steps > 0, "GC never ran");
    db.gc(None).unwrap();
    for (i, &round) in latest.iter().enumerate() {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i, round)), "key {i}");
    }
    let s = db.stats().unwrap();
    assert!(s.value_store_figures["gc_bytes_rewritten"] > 0);
}

/// GC judges the records of a step in one batch, at one view, and keeps
/// the compare-and-set at commit: keys deleted or overwritten while GC runs
/// — in the memtable, or already flushed and compacted into the tables
/// the batch reads — stay deleted or keep their newer value.
#[test]
fn gc_never_resurrects_a_racing_delete() {
    let db = Arc::new(Db::open("/db", opts(Arc::new(MemFs::new()))).unwrap());
    const N: usize = 600;
    for i in 0..N {
        db.put(key(i), value(i, 0)).unwrap();
    }
    db.compact_range(..).unwrap();
    let gc = common::GcLoop::start(&db);
    // `None`: deleted; `Some(round)`: the value of that round.
    let mut latest: Vec<Option<usize>> = vec![Some(0); N];
    for round in 1..30 {
        for i in (0..N).filter(|i| (i + round) % 5 == 0) {
            if (i / 5 + round) % 2 == 0 {
                db.delete(key(i)).unwrap();
                latest[i] = None;
            } else {
                db.put(key(i), value(i, round)).unwrap();
                latest[i] = Some(round);
            }
        }
        if round % 7 == 0 {
            // The deletions reach the tables the lookups read.
            db.compact_range(..).unwrap();
        }
    }
    let steps = gc.stop();
    assert!(steps > 0, "GC never ran");
    db.gc(None).unwrap();
    let mut deleted = 0;
    for (i, round) in latest.iter().enumerate() {
        assert_eq!(
            db.get(key(i)).unwrap(),
            round.map(|r| value(i, r)),
            "key {i}"
        );
        deleted += usize::from(round.is_none());
    }
    assert!(deleted > 0);
}

/// GC judges a step's records with one batch of index lookups in key
/// order: keys that fall in one index data block share one load of it. A
/// step over about a thousand records, written in no key order, loads a
/// few dozen blocks rather than one per record — counted by
/// `gc_index_blocks`, and seen in the bytes GC reads (through the tables'
/// mappings every load is a read of the block).
#[test]
fn gc_loads_each_index_block_once_per_step() {
    let dir = tempfile::tempdir().unwrap();
    let o = Options {
        gc_chunk_size: 1 << 20,
        ..opts(Arc::new(StdFs))
    };
    let db = Db::open(dir.path(), o).unwrap();
    const N: usize = 4000;
    // A fixed shuffle of the keys: the log holds them in no key order.
    let shuffled = |round: usize| (0..N).map(move |i| (i * 7919 + round) % N);
    for i in shuffled(0) {
        db.put(key(i), value(i, 0)).unwrap();
    }
    for i in shuffled(1).filter(|i| i % 2 == 0) {
        db.put(key(i), value(i, 1)).unwrap();
    }
    db.compact_range(..).unwrap();
    let before = db.stats().unwrap();
    let rep = db.gc(None).unwrap();
    let after = db.stats().unwrap();
    let figure = |s: &sepkv::DbStats, name: &str| s.value_store_figures[name];
    let lookups = figure(&after, "gc_lookups") - figure(&before, "gc_lookups");
    let log_read = figure(&after, "gc_bytes_read") - figure(&before, "gc_bytes_read");
    let blocks = after.gc_index_blocks - before.gc_index_blocks;
    let gc_read = after.io.read_in(IoCategory::Gc) - before.io.read_in(IoCategory::Gc);
    assert!(
        rep.steps >= 3 && lookups >= N as u64,
        "{rep:?}, {lookups} lookups"
    );
    assert!(
        blocks > 0 && blocks * 8 < lookups,
        "{blocks} index blocks loaded for {lookups} records judged"
    );
    // Before, each lookup read a block of about 4 KiB: four times the log.
    let index_read = gc_read - log_read;
    assert!(
        index_read < lookups * 512,
        "{index_read} B of index read for {lookups} lookups ({log_read} B of log)"
    );
    for i in (0..N).step_by(37) {
        assert_eq!(
            db.get(key(i)).unwrap(),
            Some(value(i, usize::from(i % 2 == 0)))
        );
    }
}

#[test]
fn snapshot_keeps_values_gc_would_free() {
    let db = Db::open("/db", opts(Arc::new(MemFs::new()))).unwrap();
    for i in 0..200 {
        db.put(key(i), value(i, 0)).unwrap();
    }
    let snap = db.snapshot().unwrap();
    let mut it = db.iter(&Default::default()).unwrap();
    for i in 0..200 {
        db.put(key(i), value(i, 1)).unwrap();
    }
    db.gc(None).unwrap();
    db.gc(None).unwrap();
    let ro = sepkv::ReadOptions {
        snapshot: Some(&snap),
        ..Default::default()
    };
    for i in 0..200 {
        assert_eq!(db.get_opt(&ro, key(i)).unwrap(), Some(value(i, 0)));
    }
    it.seek_to_first();
    let mut n = 0;
    while it.valid() {
        assert_eq!(it.value(), &value(n, 0)[..]);
        n += 1;
        it.next();
    }
    it.status().unwrap();
    assert_eq!(n, 200);
    for i in 0..200 {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 1)));
    }
}

#[test]
fn gc_frees_space_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts(Arc::new(StdFs))).unwrap();
    const N: usize = 8000; // 8 MB of 1000-byte values
    for round in 0..2 {
        for i in 0..N {
            db.put(key(i), value(i, round)).unwrap();
        }
    }
    db.compact_range(..).unwrap();
    let before = db.stats().unwrap().disk_bytes;
    let rep = db.gc(None).unwrap();
    assert!(rep.bytes_freed > 0, "{rep:?}");
    db.compact_range(..).unwrap();
    let after = db.stats().unwrap().disk_bytes;
    let live = (N * (1000 + 9)) as u64;
    assert!(after < before, "before {before} after {after}");
    assert!(
        (after as f64) < 1.3 * live as f64,
        "disk {after} vs live {live} after GC"
    );
    for i in (0..N).step_by(97) {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 1)));
    }
}

/// Loads a database, then crashes a GC cycle at its k-th file-system
/// operation, for every k until a cycle completes.
#[test]
fn crash_at_every_step_of_a_gc_cycle() {
    const N: usize = 120;
    let mut k = 0u64;
    loop {
        let fs = FaultFs::new();
        let dir = Path::new("/gcdb");
        {
            let db = Db::open(dir, opts(Arc::new(fs.clone()))).unwrap();
            for round in 0..2 {
                for i in 0..N {
                    if round == 0 || i % 2 == 0 {
                        db.write(&single(i, round), WriteOptions { sync: i % 10 == 0 })
                            .unwrap();
                    }
                }
            }
            db.write(&sepkv::WriteBatch::new(), WriteOptions { sync: true })
                .unwrap();
            db.flush().unwrap();
            fs.add_rule(FaultRule {
                op: FaultOp::Any,
                path_contains: None,
                skip: k,
                times: None,
                kind: FaultKind::Eio,
            });
            let done = db.gc(None).is_ok();
            power_cut(&fs, db);
            let db = Db::open(dir, opts(Arc::new(fs.clone())))
                .unwrap_or_else(|e| panic!("reopen after crash at op {k}: {e}"));
            // Everything was flushed (synced) before GC began: nothing may be lost.
            for i in 0..N {
                let want = value(i, if i % 2 == 0 { 1 } else { 0 });
                assert_eq!(
                    db.get(key(i)).unwrap(),
                    Some(want),
                    "key {i} after crash at GC op {k}"
                );
            }
            // A later GC completes and still loses nothing.
            db.gc(None).unwrap();
            for i in (0..N).step_by(7) {
                assert_eq!(
                    db.get(key(i)).unwrap(),
                    Some(value(i, if i % 2 == 0 { 1 } else { 0 }))
                );
            }
            if done {
                break;
            }
        }
        k += 1;
        assert!(k < 10_000, "GC cycle never completed");
    }
    assert!(
        k > 5,
        "the GC cycle was expected to take several file-system operations"
    );
}

fn single(i: usize, round: usize) -> sepkv::WriteBatch {
    let mut b = sepkv::WriteBatch::new();
    b.put(key(i), value(i, round)).unwrap();
    b
}

/// `value_capacity` bounds the log: a write that would pass it runs GC
/// first; only data that is all live is refused, cleanly; deleting data
/// makes room again. With the index WAL and in log mode (WiscKey §3.4.2).
#[test]
fn capacity_runs_gc_first_and_refuses_only_live_data() {
    for wal in [true, false] {
        let fs = MemFs::new();
        let o = Options {
            wal,
            value_capacity: Some(2 << 20),
            gc_chunk_size: 16 << 10,
            ..opts(Arc::new(fs.clone()))
        };
        let db = Db::open("/db", o.clone()).unwrap();
        for round in 0..5000 {
            db.put(key(1), value(1, round)).unwrap();
        }
        let s = db.stats().unwrap();
        assert!(s.write_gc_steps >= 1, "wal {wal}");
        let span = s.value_store.live_bytes + s.value_store.garbage_bytes;
        assert!(span <= (2 << 20) + (16 << 10), "wal {wal}: span {span}");
        assert_eq!(db.get(key(1)).unwrap(), Some(value(1, 4999)));

        let mut n = 2;
        let err = loop {
            match db.put(key(n), value(n, 0)) {
                Ok(()) => n += 1,
                Err(e) => break e,
            }
            assert!(n < 10_000, "wal {wal}: the log never filled");
        };
        assert!(
            matches!(&err, sepkv::Error::ValueStoreFull(m) if m.contains("value_capacity")),
            "wal {wal}: {err:?}"
        );
        // About 2 MiB of 1 KiB records went in before the refusal.
        assert!((1800..2100).contains(&n), "wal {wal}: {n} keys");
        for i in 2..n {
            assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 0)), "wal {wal}");
        }
        db.put(b"small", b"inline").unwrap();
        for i in (2..n).step_by(2) {
            db.delete(key(i)).unwrap();
        }
        // The deleted half is garbage GC now frees for new values.
        for i in 0..(n - 2) / 4 {
            db.put(key(20_000 + i), value(i, 1)).unwrap();
        }
        assert!(db.verify().unwrap().faults.is_empty());
        db.close().unwrap();
        let db = Db::open("/db", o).unwrap();
        for i in 2..n {
            let want = (i % 2 == 1).then(|| value(i, 0));
            assert_eq!(db.get(key(i)).unwrap(), want, "wal {wal}: key {i}");
        }
        for i in 0..(n - 2) / 4 {
            assert_eq!(db.get(key(20_000 + i)).unwrap(), Some(value(i, 1)));
        }
        assert_eq!(db.get(b"small").unwrap(), Some(b"inline".to_vec()));
    }
}

/// Synced writes carry their values in the WAL (`sync_values_in_wal`, on
/// by default): each waits for the WAL's fsync alone, and a power loss
/// that takes the value log's unsynced tail loses none of them — recovery
/// restores the carried values inline. A WAL grown past
/// `write_buffer_size` by carried values switches the memtable. With the
/// option off, every synced write syncs the value log too and nothing is
/// restored from the WAL.
#[test]
fn synced_writes_survive_a_lost_value_log_tail_through_their_wal() {
    const N: usize = 600;
    for carry in [true, false] {
        let fs = FaultFs::new();
        let dir = Path::new("/carry");
        let o = || Options {
            sync_values_in_wal: carry,
            ..opts(Arc::new(fs.clone()))
        };
        {
            let db = Db::open(dir, o()).unwrap();
            for i in 0..N {
                db.write(&single(i, 0), WriteOptions { sync: true })
                    .unwrap();
            }
            let s = db.stats().unwrap();
            let wal_only = s.index_figures["wal_only_syncs"];
            if carry {
                assert_eq!(wal_only, N as u64, "every synced write takes one fsync");
                // 600 KB of carried values against a 256 KiB write buffer:
                // the WAL, not the memtable, asked for the switches.
                let switched = s.flushes + u64::from(s.immutable_memtable);
                assert!(switched >= 2, "{switched} memtable switches");
            } else {
                assert_eq!(wal_only, 0);
            }
            power_cut(&fs, db);
        }
        let db = Db::open(dir, o()).unwrap();
        let restored = db.stats().unwrap().index_figures["wal_values_restored"];
        if carry {
            assert!(restored > 0, "the value log's tail was expected to be lost");
        } else {
            assert_eq!(restored, 0);
        }
        for i in 0..N {
            assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 0)), "key {i}");
        }
        assert!(db.verify().unwrap().faults.is_empty());
        // Values restored inline stay readable through flushes, GC,
        // compactions and another reopen.
        for i in (0..N).step_by(3) {
            db.put(key(i), value(i, 1)).unwrap();
        }
        db.flush().unwrap();
        db.gc(None).unwrap();
        db.compact_range(..).unwrap();
        drop(db);
        let db = Db::open(dir, o()).unwrap();
        for i in 0..N {
            let round = usize::from(i % 3 == 0);
            assert_eq!(db.get(key(i)).unwrap(), Some(value(i, round)), "key {i}");
        }
        assert!(db.verify().unwrap().faults.is_empty());
    }
}

/// A synced write after unsynced ones whose pointers sit in the WAL syncs
/// the value log as well: once it returns, a power loss keeps the earlier
/// writes too (their WAL records would otherwise point at lost values and
/// end the replay before the synced write). A synced batch over 1 MiB is
/// not carried.
#[test]
fn a_synced_write_makes_earlier_unsynced_pointers_durable() {
    let fs = FaultFs::new();
    let dir = Path::new("/mixed");
    let db = Db::open(dir, opts(Arc::new(fs.clone()))).unwrap();
    for i in 0..50 {
        db.put(key(i), value(i, 0)).unwrap();
    }
    db.write(&single(50, 0), WriteOptions { sync: true })
        .unwrap();
    assert_eq!(db.stats().unwrap().index_figures["wal_only_syncs"], 0);
    db.write(&single(51, 0), WriteOptions { sync: true })
        .unwrap();
    assert_eq!(db.stats().unwrap().index_figures["wal_only_syncs"], 1);
    power_cut(&fs, db);
    let db = Db::open(dir, opts(Arc::new(fs.clone()))).unwrap();
    for i in 0..52 {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 0)), "key {i}");
    }
    // A synced batch over 1 MiB is not carried: its values are synced in
    // the value log, beside the WAL.
    let mut big = sepkv::WriteBatch::new();
    for i in 52..1200 {
        big.put(key(i), value(i, 0)).unwrap();
    }
    db.write(&big, WriteOptions { sync: true }).unwrap();
    assert_eq!(db.stats().unwrap().index_figures["wal_only_syncs"], 0);
    power_cut(&fs, db);
    let db = Db::open(dir, opts(Arc::new(fs.clone()))).unwrap();
    for i in 0..1200 {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 0)), "key {i}");
    }
    assert_eq!(db.stats().unwrap().index_figures["wal_values_restored"], 0);
}
