//! HashKV (`hashkv` preset) scenarios: group GC keeps the latest version
//! without index queries, racing overwrites survive GC, writes that arrive
//! while GC collects their group take no reserved space, hot/cold
//! separation, a full store, and a crash at every file-system operation of a
//! write-cache flush and of a GC cycle (with and without the journal).

use sepkv::fs::{Advice, FaultFs, FaultKind, FaultOp, FaultRule, FileSystem, MemFs};
use sepkv::{Db, Error, Options, Preset, ReadOptions, WriteBatch, WriteOptions};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// 8 segment groups of 64 KiB main segments, 32 log segments of 16 KiB.
fn opts(fs: Arc<dyn FileSystem>) -> Options {
    Options {
        fs,
        value_threshold: 64,
        value_capacity: Some(1 << 20),
        hashkv_main_segment_size: 64 << 10,
        hashkv_log_segment_size: 16 << 10,
        hashkv_reserved_ratio: 0.5,
        hashkv_write_cache_size: 16 << 10,
        gc_garbage_ratio: 0.0,
        write_buffer_size: 256 << 10,
        ..Options::preset(Preset::HashKv)
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

fn single(i: usize, round: usize) -> WriteBatch {
    let mut b = WriteBatch::new();
    b.put(key(i), value(i, round)).unwrap();
    b
}

/// The segment group of `k` under `opts` (8 groups; `hash(key)` modulo
/// the groups, as the store picks it).
fn hashkv_group(k: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(k) % 8
}

fn fig(db: &Db, name: &str) -> u64 {
    db.stats().unwrap().value_store_figures[name]
}

#[test]
fn group_gc_keeps_the_latest_version_without_index_queries() {
    let db = Db::open("/db", opts(Arc::new(MemFs::new()))).unwrap();
    const N: usize = 150;
    for round in 0..3 {
        for i in 0..N {
            if round == 0 || i % 3 != 0 {
                db.put(key(i), value(i, round)).unwrap();
            }
        }
    }
    let before = db.stats().unwrap().value_store.file_bytes;
    let rep = db.gc(None).unwrap();
    assert!(rep.steps > 0 && rep.bytes_freed > 0, "{rep:?}");
    for i in 0..N {
        let want = value(i, if i % 3 == 0 { 0 } else { 2 });
        assert_eq!(db.get(key(i)).unwrap(), Some(want), "key {i}");
    }
    // Validity came from position in the group alone.
    assert_eq!(fig(&db, "gc_index_lookups"), 0);
    assert_eq!(fig(&db, "group_write_volume_max"), 0);
    assert!(fig(&db, "gc_groups_collected") >= 8);
    let after = db.stats().unwrap().value_store.file_bytes;
    assert!(after < before, "before {before} after {after}");
    // Deleted keys: their copies fail the compare-and-set, one index query
    // each tells they are gone, and the next GC drops them.
    for i in (0..N).step_by(5) {
        db.delete(key(i)).unwrap();
    }
    db.put(key(1), value(1, 9)).unwrap();
    db.gc(None).unwrap();
    let lookups = fig(&db, "gc_index_lookups");
    assert!(lookups > 0 && lookups <= N as u64 / 5 + 1, "{lookups}");
    for i in 0..N {
        let want = match i {
            _ if i % 5 == 0 => None,
            1 => Some(value(1, 9)),
            _ if i % 3 == 0 => Some(value(i, 0)),
            _ => Some(value(i, 2)),
        };
        assert_eq!(db.get(key(i)).unwrap(), want, "key {i}");
    }
    assert!(db.verify().unwrap().faults.is_empty());
}

/// GC takes most keys' latest record in their group for the version the
/// index holds without looking them up (`gc_moves_judged`), but never a
/// key deleted or given an inline value since: those writes leave no newer
/// record in the group, so a relocation taken on the group's word would
/// bring the old value back. Nor, after a reopen, a record placed before
/// the index recovered.
#[test]
fn gc_judges_from_the_group_only_what_left_no_newer_write_elsewhere() {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    const N: usize = 150;
    let want = |i: usize, round: usize| -> Option<Vec<u8>> {
        match i % 6 {
            0 => None,
            1 => Some(format!("small-{i}").into_bytes()),
            _ => Some(value(i, round)),
        }
    };
    {
        let db = Db::open("/db", opts(fs.clone())).unwrap();
        for round in 0..2 {
            for i in 0..N {
                db.put(key(i), value(i, round)).unwrap();
            }
        }
        for i in 0..N {
            match i % 6 {
                0 => db.delete(key(i)).unwrap(),
                // Below `value_threshold`: kept inline in the index.
                1 => db.put(key(i), want(i, 1).unwrap()).unwrap(),
                _ => {}
            }
        }
        let rep = db.gc(None).unwrap();
        assert!(rep.steps > 0 && rep.bytes_freed > 0, "{rep:?}");
        for i in 0..N {
            assert_eq!(db.get(key(i)).unwrap(), want(i, 1), "key {i}");
        }
        let judged = fig(&db, "gc_moves_judged");
        assert!(judged >= (N as u64 * 2 / 3) - 2, "{judged} judged");
        db.close().unwrap();
    }
    let db = Db::open("/db", opts(fs)).unwrap();
    for i in 0..N {
        assert_eq!(db.get(key(i)).unwrap(), want(i, 1), "key {i}");
    }
    // Records placed before the reopen are looked up: at most the keys
    // written since are judged from their group.
    let rewritten = (0..N).filter(|i| i % 6 == 2).count() as u64;
    for i in (0..N).filter(|i| i % 6 == 2) {
        db.put(key(i), value(i, 2)).unwrap();
    }
    let rep = db.gc(None).unwrap();
    assert!(rep.bytes_rewritten > 2 * rewritten * 1000, "{rep:?}");
    assert!(fig(&db, "gc_moves_judged") <= rewritten);
    // Written since the reopen, twice: judged again.
    for round in 3..5 {
        for i in (0..N).filter(|i| i % 6 >= 2) {
            db.put(key(i), value(i, round)).unwrap();
        }
    }
    db.gc(None).unwrap();
    assert!(fig(&db, "gc_moves_judged") > 0);
    for i in 0..N {
        assert_eq!(db.get(key(i)).unwrap(), want(i, 4), "key {i}");
    }
    assert!(db.verify().unwrap().faults.is_empty());
}

#[test]
fn gc_never_loses_a_racing_overwrite() {
    let db = Arc::new(Db::open("/db", opts(Arc::new(MemFs::new()))).unwrap());
    const N: usize = 200;
    for i in 0..N {
        db.put(key(i), value(i, 0)).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let gc = {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || {
            // Runs at least until it has done a step (this thread may be
            // scheduled only after the writers finish); the garbage they
            // leave makes one certain, so the bound only ends a broken GC.
            let (mut steps, mut rounds) = (0, 0);
            while !stop.load(Ordering::Relaxed) || (steps == 0 && rounds < 1000) {
                steps += db.gc(None).unwrap().steps;
                rounds += 1;
            }
            steps
        })
    };
    let mut latest = vec![0usize; N];
    for round in 1..30 {
        for i in (0..N).filter(|i| (i + round) % 3 == 0) {
            // GC keeps the store from filling up.
            loop {
                match db.put(key(i), value(i, round)) {
                    Ok(()) => break,
                    Err(Error::InvalidArgument(m)) if m.contains("full") => {
                        std::thread::yield_now()
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            latest[i] = round;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let steps = gc.join().unwrap();
    assert!(steps > 0, "GC never ran");
    db.gc(None).unwrap();
    for (i, &round) in latest.iter().enumerate() {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i, round)), "key {i}");
    }
    assert!(fig(&db, "gc_bytes_rewritten") > 0);
    assert!(db.verify().unwrap().faults.is_empty());
}

#[test]
fn snapshot_keeps_values_gc_would_free() {
    let db = Db::open("/db", opts(Arc::new(MemFs::new()))).unwrap();
    for i in 0..100 {
        db.put(key(i), value(i, 0)).unwrap();
    }
    let snap = db.snapshot().unwrap();
    for i in 0..100 {
        db.put(key(i), value(i, 1)).unwrap();
    }
    db.gc(None).unwrap();
    db.gc(None).unwrap();
    let ro = ReadOptions {
        snapshot: Some(&snap),
        ..Default::default()
    };
    for i in 0..100 {
        assert_eq!(db.get_opt(&ro, key(i)).unwrap(), Some(value(i, 0)));
    }
    drop(snap);
    db.gc(None).unwrap();
    for i in 0..100 {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 1)));
    }
}

#[test]
fn hot_cold_separation_moves_cold_values_and_tags_them() {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    // GC runs only when the test calls it.
    let opts = |fs| Options {
        space_amp_target: f64::INFINITY,
        ..opts(fs)
    };
    let db = Db::open("/db", opts(fs.clone())).unwrap();
    // Keys 0..60 written once (cold), 60..120 written three times (hot).
    for i in 0..60 {
        db.put(key(i), value(i, 0)).unwrap();
    }
    for round in 0..3 {
        for i in 60..120 {
            db.put(key(i), value(i, round)).unwrap();
        }
    }
    db.gc(None).unwrap();
    // A segment record: the shared codec's header, a 9-byte key, 1000 bytes.
    let rec = sepkv::format::value_record::HEADER_LEN as u64 + 9 + 1000;
    let moved = fig(&db, "gc_cold_bytes_moved");
    assert_eq!(moved, 60 * rec, "cold values moved");
    assert_eq!(fig(&db, "gc_tags_written"), 60);
    assert!(fig(&db, "cold_log_bytes") >= 60 * 1000);
    // Every live value was relocated once: hot ones within their groups,
    // cold ones to the cold data log.
    assert_eq!(fig(&db, "gc_bytes_rewritten"), 120 * rec);
    for i in 0..120 {
        let want = value(i, if i < 60 { 0 } else { 2 });
        assert_eq!(db.get(key(i)).unwrap(), Some(want), "key {i}");
    }
    // A cold key updated later is found after its tag: hot again, stays in
    // its group. Only that group is collected; its hot keys, not written
    // since, stay hot (HashKV §3.4: updated at least once since their
    // insert), across a reopen too: nothing more moves to the cold log.
    db.close().unwrap();
    let db = Db::open("/db", opts(fs.clone())).unwrap();
    db.put(key(7), value(7, 5)).unwrap();
    let group_hot = (60..120)
        .filter(|&i| hashkv_group(&key(i)) == hashkv_group(&key(7)))
        .count() as u64;
    assert!(group_hot > 0);
    db.gc(None).unwrap();
    assert_eq!(fig(&db, "gc_groups_collected"), 1);
    assert_eq!(fig(&db, "gc_cold_bytes_moved"), 0, "hot keys stay hot");
    // Key 7 went back to its group, its tag was dropped (superseded); the
    // group's hot keys were copied back.
    assert_eq!(fig(&db, "gc_bytes_rewritten"), (group_hot + 1) * rec);
    assert_eq!(db.get(key(7)).unwrap(), Some(value(7, 5)));
    for i in (0..120).filter(|&i| i != 7) {
        let want = value(i, if i < 60 { 0 } else { 2 });
        assert_eq!(db.get(key(i)).unwrap(), Some(want), "key {i}");
    }
    // A key inserted now is cold at its group's next GC; key 7 is not.
    db.put(key(500), value(500, 0)).unwrap();
    db.put(key(7), value(7, 6)).unwrap();
    db.gc(None).unwrap();
    assert_eq!(fig(&db, "gc_cold_bytes_moved"), rec, "only the new key");
    let scanned: Vec<_> = db.scan(.., false).unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(scanned.len(), 121);
    assert!(db.verify().unwrap().faults.is_empty());
    db.close().unwrap();

    // Without hotness awareness everything stays in the groups.
    let db = Db::open(
        "/db2",
        Options {
            hashkv_hotness: false,
            ..opts(Arc::new(MemFs::new()))
        },
    )
    .unwrap();
    for i in 0..60 {
        db.put(key(i), value(i, 0)).unwrap();
    }
    db.gc(None).unwrap();
    assert_eq!(fig(&db, "gc_cold_bytes_moved"), 0);
    assert_eq!(fig(&db, "gc_bytes_rewritten"), 60 * rec);
}

/// Writes keys 0, 1, ... once each under `opts` until 17 of the 32 log
/// segments are in use (the main segments, 512 KiB, are full by then);
/// returns how many.
fn fill_into_17_log_segments(db: &Db) -> usize {
    let mut n = 0;
    while fig(db, "log_segments_free") > 15 {
        db.put(key(n), value(n, 0)).unwrap();
        n += 1;
    }
    n
}

/// Log-segment units the groups' log segments and the part of the cold
/// data log's span the main segments' free room does not cover hold
/// together, and the reserve (16 KiB units under `opts`). The free room is
/// what is left of it now (`main_room_left_units`), not the store's last
/// count of it: appends since the count have taken theirs.
fn reserve_use(db: &Db) -> (u64, u64) {
    let cold = fig(db, "cold_log_bytes").div_ceil(16 << 10);
    (
        fig(db, "log_segments_in_groups") + cold.saturating_sub(fig(db, "main_room_left_units")),
        fig(db, "log_segments_reserved"),
    )
}

/// The cold data log lives inside `value_capacity`, in the main segments'
/// free room and then the reserve: GC moves cold values only into room
/// that is free, and keeps the rest in their groups, copied like hot ones.
/// Moving them all made the groups and the cold log hold 44 of the 32
/// units, and the overwrites below then met `ValueStoreFull` with garbage
/// left.
#[test]
fn cold_moves_stay_within_the_capacity() {
    let db = Db::open("/db", opts(Arc::new(MemFs::new()))).unwrap();
    // Values written once, past the main segments (512 KiB) into 17 of
    // the 32 log segments (from 18 of them on, overwriting every value
    // meets a full store).
    let n = fill_into_17_log_segments(&db);
    db.gc(None).unwrap();
    // Each step moves what the free room holds, and keeps the rest in
    // their groups; the room the moved values leave in their groups' main
    // segments counts at the next step.
    assert!(fig(&db, "gc_cold_bytes_kept") > 0, "the room ran short");
    assert!(fig(&db, "gc_cold_bytes_moved") > 0, "but some");
    // The groups' log segments and the cold log stay within the reserve,
    // as they do while every value is overwritten (writers run GC when
    // the store is full).
    let (used, reserved) = reserve_use(&db);
    assert!(used <= reserved, "{used} of {reserved} units");
    for i in 0..n {
        db.put(key(i), value(i, 1)).unwrap();
        let (used, reserved) = reserve_use(&db);
        assert!(used <= reserved, "write {i}: {used} of {reserved} units");
    }
    for i in 0..n {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 1)), "key {i}");
    }
    assert!(db.verify().unwrap().faults.is_empty());
}

/// A cold key updated later leaves its cold value as garbage. Group GC
/// sees the tag followed by the update and notes that garbage at once,
/// before any compaction drops the tag's pointer; the note survives a
/// reopen, and compaction reporting the same bytes later does not count
/// them twice.
#[test]
fn group_gc_notes_superseded_cold_values_once() {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    // The cold log's GC stays away: its garbage ratio stays below 0.9, and
    // its garbage below a log segment.
    let opts = |fs| Options {
        gc_garbage_ratio: 0.9,
        hashkv_log_segment_size: 64 << 10,
        // GC runs only when the test calls it.
        space_amp_target: f64::INFINITY,
        ..opts(fs)
    };
    let db = Db::open("/db", opts(fs.clone())).unwrap();
    for i in 0..60 {
        db.put(key(i), value(i, 0)).unwrap();
    }
    db.gc(None).unwrap();
    assert_eq!(fig(&db, "gc_tags_written"), 60);
    assert_eq!(fig(&db, "cold_log_garbage_bytes"), 0);
    // Update half the cold keys; the memtable holds both pointers, so no
    // compaction has reported anything.
    for i in 0..30 {
        db.put(key(i), value(i, 1)).unwrap();
    }
    assert_eq!(fig(&db, "cold_log_garbage_bytes"), 0);
    db.gc(None).unwrap();
    let noted = fig(&db, "cold_log_garbage_bytes");
    let cold = fig(&db, "cold_log_bytes");
    assert!(
        noted >= 30 * 1000 && noted < cold,
        "30 superseded cold values of 60: {noted} of {cold}"
    );
    db.close().unwrap();

    let db = Db::open("/db", opts(fs)).unwrap();
    assert_eq!(
        fig(&db, "cold_log_garbage_bytes"),
        noted,
        "kept across a reopen"
    );
    // Compaction drops the tags' pointers and reports the same values.
    db.compact_range(..).unwrap();
    assert_eq!(fig(&db, "cold_log_garbage_bytes"), noted, "counted once");
    for i in 0..60 {
        let want = value(i, usize::from(i < 30));
        assert_eq!(db.get(key(i)).unwrap(), Some(want), "key {i}");
    }
    assert!(db.verify().unwrap().faults.is_empty());
}

/// With the cold values a group's GC found superseded noted, the cold
/// log's own GC reclaims them with no compaction in between.
#[test]
fn superseded_cold_values_are_collected_without_a_compaction() {
    // GC runs only when the test says: no writer runs it for the target.
    let o = Options {
        space_amp_target: f64::INFINITY,
        ..opts(Arc::new(MemFs::new()))
    };
    let db = Db::open("/db", o).unwrap();
    for i in 0..60 {
        db.put(key(i), value(i, 0)).unwrap();
    }
    db.gc(None).unwrap();
    let cold = fig(&db, "cold_log_bytes");
    assert!(cold >= 60 * 1000, "{cold}");
    for i in 0..40 {
        db.put(key(i), value(i, 1)).unwrap();
    }
    db.gc(None).unwrap();
    let left = fig(&db, "cold_log_bytes");
    assert!(
        left < cold / 2,
        "the 40 superseded of 60 collected: {left} of {cold}"
    );
    for i in 0..60 {
        let want = value(i, usize::from(i < 40));
        assert_eq!(db.get(key(i)).unwrap(), Some(want), "key {i}");
    }
    assert!(db.verify().unwrap().faults.is_empty());
}

/// The cold data log lives inside `value_capacity`, first in the room its
/// values left in their groups' main segments: a GC that moves a group's
/// values to the cold log leaves a main segment of tags, and the cold log
/// takes no reserved space while the main segments' free room covers it;
/// a reopen counts both again.
#[test]
fn the_cold_data_log_takes_the_main_segments_room_first() {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    let reserved;
    {
        let db = Db::open("/db", opts(fs.clone())).unwrap();
        reserved = fig(&db, "log_segments_reserved");
        assert_eq!(fig(&db, "log_segments_free"), reserved);
        // 120 values written once: GC moves them all to the cold log.
        for i in 0..120 {
            db.put(key(i), value(i, 0)).unwrap();
        }
        db.gc(None).unwrap();
        let cold = fig(&db, "cold_log_bytes");
        assert!(cold >= 120 * 1000, "{cold}");
        let units = cold.div_ceil(16 << 10);
        // The groups' segments were rewritten as main segments of tags:
        // their free room holds the cold log, and the reserve is free.
        assert!(fig(&db, "main_room_units") >= units);
        assert_eq!(fig(&db, "log_segments_in_groups"), 0);
        assert_eq!(fig(&db, "log_segments_free"), reserved);
    }
    let db = Db::open("/db", opts(fs)).unwrap();
    let cold = fig(&db, "cold_log_bytes");
    assert!(
        fig(&db, "main_room_units") >= cold.div_ceil(16 << 10),
        "counted again after a reopen"
    );
    assert_eq!(fig(&db, "log_segments_free"), reserved);
    // Overwrite every cold key: the cold copies become garbage, and the
    // cold log's GC returns its segments.
    for i in 0..120 {
        db.put(key(i), value(i, 1)).unwrap();
    }
    db.compact_range(..).unwrap();
    db.gc(None).unwrap();
    assert!(fig(&db, "cold_log_bytes") < cold, "cold log collected");
    let (used, reserved) = reserve_use(&db);
    assert!(used <= reserved, "{used} of {reserved} units");
    for i in 0..120 {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 1)), "key {i}");
    }
}

#[test]
fn a_full_store_runs_gc_first_and_refuses_only_live_data() {
    let fs = MemFs::new();
    // 3 groups of 64 KiB, 4 log segments of 16 KiB; no background GC
    // (`gc_garbage_ratio` 0 in `opts`). Without hotness awareness: cold
    // values would leave for the cold data log, which is not bounded.
    let o = Options {
        value_capacity: Some(256 << 10),
        hashkv_reserved_ratio: 0.25,
        hashkv_hotness: false,
        ..opts(Arc::new(fs.clone()))
    };
    let db = Db::open("/db", o.clone()).unwrap();
    // Overwrites of one key pass the capacity many times over: each time a
    // write finds the store full, GC runs first and frees the garbage.
    for round in 0..1000 {
        db.put(key(1), value(1, round)).unwrap();
    }
    assert!(db.stats().unwrap().write_gc_steps >= 1);
    assert_eq!(db.get(key(1)).unwrap(), Some(value(1, 999)));
    // Distinct keys are all live: the store fills and says so.
    let mut n = 2;
    let err = loop {
        match db.put(key(n), value(n, 0)) {
            Ok(()) => n += 1,
            Err(e) => break e,
        }
        assert!(n < 10_000, "the store never filled");
    };
    let Error::ValueStoreFull(m) = &err else {
        panic!("{err:?}")
    };
    assert!(m.contains("full") && m.contains("value_capacity"), "{m}");
    assert!(fig(&db, "store_full_errors") >= 1);
    // Nothing was damaged: every acknowledged value reads back, the
    // database still takes deletes and small (inline) values.
    for i in 2..n {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 0)), "key {i}");
    }
    assert!(db.verify().unwrap().faults.is_empty());
    db.put(b"small", b"inline").unwrap();
    for i in (2..n).step_by(2) {
        db.delete(key(i)).unwrap();
    }
    db.close().unwrap();
    let db = Db::open("/db", o).unwrap();
    for i in 2..n {
        let want = (i % 2 == 1).then(|| value(i, 0));
        assert_eq!(db.get(key(i)).unwrap(), want, "key {i}");
    }
    assert_eq!(db.get(key(1)).unwrap(), Some(value(1, 999)));
}

#[test]
fn reopen_keeps_data_and_the_geometry_it_was_created_with() {
    let fs = MemFs::new();
    {
        let db = Db::open("/db", opts(Arc::new(fs.clone()))).unwrap();
        for i in 0..100 {
            db.put(key(i), value(i, 0)).unwrap();
        }
        db.close().unwrap();
    }
    let db = Db::open(
        "/db",
        Options {
            value_capacity: Some(64 << 30),
            ..opts(Arc::new(fs.clone()))
        },
    )
    .unwrap();
    assert_eq!(fig(&db, "groups"), 8);
    for i in 0..100 {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 0)));
    }
    let got: Vec<_> = db
        .scan(key(10)..key(20), false)
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(got.len(), 10);
    assert_eq!(got[3], (key(13), value(13, 0)));
}

#[test]
fn verify_names_a_damaged_segment() {
    let fs = FaultFs::new();
    let db = Db::open("/db", opts(Arc::new(fs.clone()))).unwrap();
    for i in 0..50 {
        db.put(key(i), value(i, 0)).unwrap();
    }
    assert!(db.verify().unwrap().faults.is_empty());
    let seg = fs
        .list(Path::new("/db"))
        .unwrap()
        .into_iter()
        .find(|n| n.ends_with(".hseg"))
        .unwrap();
    fs.corrupt(&Path::new("/db").join(&seg), 40, 0x55).unwrap();
    let faults = db.verify().unwrap().faults;
    assert_eq!(faults.len(), 1, "{faults:?}");
    assert!(
        matches!(&faults[0], Error::Corruption { file, offset: 0, .. } if file.ends_with(&seg)),
        "{faults:?}"
    );
}

/// Writes values (synced: in the write journal), then crashes a write whose
/// batch fills the write cache and the journal at its k-th file-system
/// operation — its own or the store's worker's, which writes the sealed
/// cache and finishes the journal checkpoint — for every k until both
/// complete: the synced values and an all-or-nothing batch survive, an
/// acknowledged batch survives whole, and nothing reads as corrupt.
#[test]
fn crash_at_every_step_of_a_cache_flush() {
    crash_at_every_step_of_a_write_checkpoint(true);
}

/// As [`crash_at_every_step_of_a_cache_flush`] with the journal recording
/// metadata only: the values go straight to their segments, and the
/// checkpoint the batch's bytes trigger is crashed at every step.
#[test]
fn crash_at_every_step_of_a_metadata_journal_checkpoint() {
    crash_at_every_step_of_a_write_checkpoint(false);
}

fn crash_at_every_step_of_a_write_checkpoint(values: bool) {
    const N: usize = 40;
    const M: usize = 30;
    let dir = Path::new("/flushdb");
    let mut k = 0u64;
    loop {
        let fs = FaultFs::new();
        // The batch fills the cache (one flush) and the journal (one
        // checkpoint that recycles it).
        let o = Options {
            hashkv_journal: true,
            hashkv_journal_values: values,
            hashkv_write_cache_size: 64 << 10,
            hashkv_journal_size: 64 << 10,
            ..opts(Arc::new(fs.clone()))
        };
        let db = Db::open(dir, o.clone()).unwrap();
        for i in 0..N {
            db.write(&single(i, 0), WriteOptions { sync: i % 4 == 3 })
                .unwrap();
        }
        db.write(&WriteBatch::new(), WriteOptions { sync: true })
            .unwrap();
        fs.add_rule(FaultRule {
            op: FaultOp::Any,
            path_contains: None,
            skip: k,
            times: None,
            kind: FaultKind::Eio,
        });
        let mut b = WriteBatch::new();
        for i in N..N + M {
            b.put(key(i), value(i, 1)).unwrap();
        }
        let acked = db.write(&b, WriteOptions { sync: true }).is_ok();
        // The cache flush and the checkpoint run in the store's worker.
        let done = acked && db.wait_idle().is_ok();
        if done {
            assert_eq!(fig(&db, "write_cache_flushes") >= 1, values);
            assert!(fig(&db, "table_checkpoints") >= 1);
        }
        fs.crash();
        fs.clear_rules();
        drop(db);
        let db = Db::open(dir, o.clone())
            .unwrap_or_else(|e| panic!("reopen after crash at flush op {k}: {e}"));
        for i in 0..N {
            assert_eq!(
                db.get(key(i)).unwrap(),
                Some(value(i, 0)),
                "key {i} after crash at flush op {k}"
            );
        }
        let present = (N..N + M)
            .filter(|&i| db.get(key(i)).unwrap() == Some(value(i, 1)))
            .count();
        assert!(
            present == 0 || present == M,
            "torn batch after crash at flush op {k}"
        );
        if acked {
            assert_eq!(present, M, "acknowledged batch lost at op {k}");
        }
        assert!(db.verify().unwrap().faults.is_empty(), "op {k}");
        if done {
            break;
        }
        k += 1;
        assert!(k < 10_000, "the flush never completed");
    }
    assert!(k > 3, "the flush was expected to take several operations");
}

/// Loads a database, then crashes a GC cycle at its k-th file-system
/// operation, for every k until a cycle completes.
fn crash_at_every_step_of_a_gc_cycle(journal: bool, values: bool) {
    const N: usize = 120;
    let dir = Path::new("/gcdb");
    let mut k = 0u64;
    loop {
        let fs = FaultFs::new();
        let o = Options {
            hashkv_journal: journal,
            hashkv_journal_values: values,
            ..opts(Arc::new(fs.clone()))
        };
        let db = Db::open(dir, o.clone()).unwrap();
        for round in 0..2 {
            for i in 0..N {
                if round == 0 || i % 2 == 0 {
                    db.write(&single(i, round), WriteOptions { sync: i % 10 == 0 })
                        .unwrap();
                }
            }
        }
        db.write(&WriteBatch::new(), WriteOptions { sync: true })
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
        fs.crash();
        fs.clear_rules();
        drop(db);
        let want = |i: usize| value(i, 1 - i % 2);
        let db = Db::open(dir, o.clone())
            .unwrap_or_else(|e| panic!("reopen after crash at GC op {k}: {e}"));
        // Everything was synced before GC began: nothing may be lost.
        for i in 0..N {
            assert_eq!(
                db.get(key(i)).unwrap(),
                Some(want(i)),
                "key {i} after crash at GC op {k}"
            );
        }
        // A later GC completes and still loses nothing.
        db.gc(None).unwrap();
        for i in 0..N {
            assert_eq!(db.get(key(i)).unwrap(), Some(want(i)), "key {i}");
        }
        assert!(db.verify().unwrap().faults.is_empty(), "op {k}");
        drop(db);
        // And survives one more crash.
        fs.crash();
        let db = Db::open(dir, o).unwrap();
        for i in (0..N).step_by(7) {
            assert_eq!(db.get(key(i)).unwrap(), Some(want(i)));
        }
        if done {
            break;
        }
        k += 1;
        assert!(k < 10_000, "GC cycle never completed");
    }
    assert!(
        k > 5,
        "the GC cycle was expected to take several file-system operations"
    );
}

#[test]
fn crash_at_every_step_of_a_gc_cycle_with_journal() {
    crash_at_every_step_of_a_gc_cycle(true, false);
}

#[test]
fn crash_at_every_step_of_a_gc_cycle_with_a_journal_of_values() {
    crash_at_every_step_of_a_gc_cycle(true, true);
}

#[test]
fn crash_at_every_step_of_a_gc_cycle_without_journal() {
    crash_at_every_step_of_a_gc_cycle(false, false);
}

/// Without journal, writes go straight to their segments; a crash keeps
/// every synced write.
#[test]
fn without_journal_synced_writes_survive_a_crash() {
    let fs = FaultFs::new();
    let o = Options {
        hashkv_journal: false,
        ..opts(Arc::new(fs.clone()))
    };
    let dir = Path::new("/nj");
    let mut synced = 0;
    {
        let db = Db::open(dir, o.clone()).unwrap();
        for i in 0..300 {
            let sync = i % 7 == 0;
            db.write(&single(i, 0), WriteOptions { sync }).unwrap();
            if sync {
                synced = i;
            }
        }
        fs.crash();
    }
    let db = Db::open(dir, o).unwrap();
    for i in 0..=synced {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 0)), "key {i}");
    }
    assert!(db.verify().unwrap().faults.is_empty());
}

/// The journal can be switched between opens, also after a crash: a
/// store that wrote in one journal mode (off, metadata only, values) and
/// lost power keeps its synced writes when it is reopened in another
/// (`tests/kill.rs` kills a process writing unsynced in the default mode).
#[test]
fn synced_writes_survive_a_crash_and_a_switch_of_the_journal() {
    const MODES: [(bool, bool, &str); 3] = [
        (false, false, "off"),
        (true, false, "metadata"),
        (true, true, "values"),
    ];
    for (first, then) in [(0, 1), (1, 0), (0, 2), (2, 0), (1, 2), (2, 1)] {
        let fs = FaultFs::new();
        let with = |m: usize| Options {
            hashkv_journal: MODES[m].0,
            hashkv_journal_values: MODES[m].1,
            ..opts(Arc::new(fs.clone()))
        };
        let dir = Path::new("/switch");
        {
            let db = Db::open(dir, with(first)).unwrap();
            for i in 0..300 {
                db.write(&single(i, 0), WriteOptions { sync: true })
                    .unwrap();
            }
            // Unsynced: may be lost, never torn or corrupt.
            for i in 300..400 {
                db.write(&single(i, 0), WriteOptions::default()).unwrap();
            }
            fs.crash();
        }
        let db = Db::open(dir, with(then)).unwrap();
        for i in 0..300 {
            assert!(
                db.get(key(i)).unwrap() == Some(value(i, 0)),
                "key {i} lost or wrong, written with the journal {}, reopened with it {}",
                MODES[first].2,
                MODES[then].2,
            );
        }
        for i in 300..400 {
            let v = db.get(key(i)).unwrap();
            assert!(v.is_none() || v == Some(value(i, 0)), "key {i}");
        }
        assert!(db.verify().unwrap().faults.is_empty());
    }
}

/// A `MemFs` that counts read-ahead requests on segment files and, with
/// `device`, makes every segment read take at least 50 µs, like a read
/// that reaches a device rather than the page cache.
struct CountingFs {
    inner: MemFs,
    will_need: Arc<std::sync::atomic::AtomicU64>,
    /// Random-access hints given on segment readers.
    random: Arc<std::sync::atomic::AtomicU64>,
    device: bool,
}

struct CountingFile {
    inner: Box<dyn sepkv::fs::RandomAccessFile>,
    will_need: Arc<std::sync::atomic::AtomicU64>,
    random: Arc<std::sync::atomic::AtomicU64>,
    device: bool,
}

impl sepkv::fs::RandomAccessFile for CountingFile {
    fn read_at(&self, off: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.device {
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
        self.inner.read_at(off, buf)
    }
    fn len(&self) -> std::io::Result<u64> {
        self.inner.len()
    }
    fn advise(&self, off: u64, len: u64, advice: sepkv::fs::Advice) {
        if advice == sepkv::fs::Advice::WillNeed && len > 0 {
            self.will_need.fetch_add(1, Ordering::Relaxed);
        }
        if advice == sepkv::fs::Advice::Random {
            self.random.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.advise(off, len, advice)
    }
}

impl FileSystem for CountingFs {
    fn create(&self, p: &Path) -> std::io::Result<Box<dyn sepkv::fs::WritableFile>> {
        self.inner.create(p)
    }
    fn open_append(&self, p: &Path) -> std::io::Result<Box<dyn sepkv::fs::WritableFile>> {
        self.inner.open_append(p)
    }
    fn open_read(&self, p: &Path) -> std::io::Result<Box<dyn sepkv::fs::RandomAccessFile>> {
        let inner = self.inner.open_read(p)?;
        if p.extension().is_none_or(|e| e != "hseg") {
            return Ok(inner);
        }
        Ok(Box::new(CountingFile {
            inner,
            will_need: self.will_need.clone(),
            random: self.random.clone(),
            device: self.device,
        }))
    }
    fn exists(&self, p: &Path) -> bool {
        self.inner.exists(p)
    }
    fn is_dir(&self, p: &Path) -> bool {
        self.inner.is_dir(p)
    }
    fn list(&self, d: &Path) -> std::io::Result<Vec<String>> {
        self.inner.list(d)
    }
    fn remove(&self, p: &Path) -> std::io::Result<()> {
        self.inner.remove(p)
    }
    fn rename(&self, a: &Path, b: &Path) -> std::io::Result<()> {
        self.inner.rename(a, b)
    }
    fn create_dir_all(&self, d: &Path) -> std::io::Result<()> {
        self.inner.create_dir_all(d)
    }
    fn sync_dir(&self, d: &Path) -> std::io::Result<()> {
        self.inner.sync_dir(d)
    }
    fn file_size(&self, p: &Path) -> std::io::Result<u64> {
        self.inner.file_size(p)
    }
    fn truncate_synced(&self, p: &Path, len: u64) -> std::io::Result<()> {
        self.inner.truncate_synced(p, len)
    }
    fn advise(&self, p: &Path, off: u64, len: u64, advice: sepkv::fs::Advice) {
        if advice == sepkv::fs::Advice::WillNeed
            && p.extension().is_some_and(|e| e == "hseg")
            && len > 0
        {
            self.will_need.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.advise(p, off, len, advice)
    }
    fn lock(&self, p: &Path) -> std::io::Result<Box<dyn sepkv::fs::FileLock>> {
        self.inner.lock(p)
    }
}

/// A database on `fs` holding keys 0..100, closed and opened again, so
/// that its values are read from their segment files.
fn hundred_values_reopened(fs: CountingFs) -> Db {
    let fs = Arc::new(fs);
    {
        let db = Db::open("/db", opts(fs.clone())).unwrap();
        for i in 0..100 {
            db.put(key(i), value(i, 0)).unwrap();
        }
        db.close().unwrap();
    }
    Db::open("/db", opts(fs)).unwrap()
}

/// Scans of 60 values after a reopen (values in their segment files, not
/// the write cache): how many read-ahead hints the store gave.
fn read_ahead_hints_of_a_scan(device: bool) -> u64 {
    let will_need = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let db = hundred_values_reopened(CountingFs {
        inner: MemFs::new(),
        will_need: will_need.clone(),
        random: Arc::default(),
        device,
    });
    // Point reads first: they teach the store how long a read takes.
    for i in 0..10 {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 0)));
    }
    let before = will_need.load(Ordering::Relaxed);
    let got: Vec<_> = db
        .scan(key(20)..key(80), false)
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(got.len(), 60);
    for (n, (k, v)) in got.iter().enumerate() {
        assert_eq!((k, v), (&key(20 + n), &value(20 + n, 0)));
    }
    will_need.load(Ordering::Relaxed) - before
}

/// HashKV §3.6: when reads reach the device, a scan hints read-ahead for
/// every value before reading them; when they are served from memory the
/// hints would only cost system calls, and none are given.
#[test]
fn range_scans_read_ahead_every_value_on_a_device() {
    let advised = read_ahead_hints_of_a_scan(true);
    assert!(advised >= 50, "{advised} read-ahead requests for 60 values");
    // From memory none would be given, but one read preempted for a time
    // slice looks like a device read to the running estimate for the next
    // couple of dozen reads, so a loaded machine may see some.
    let from_memory = read_ahead_hints_of_a_scan(false);
    assert!(
        from_memory < 30,
        "{from_memory} read-ahead requests for 60 values served from memory"
    );
}

/// Point reads of segments are random: the store says so on the handle it
/// reads through (read-ahead is a property of one open file, so a hint
/// given on another descriptor of the same file would change nothing).
#[test]
fn segment_readers_are_hinted_random_access() {
    let random = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let db = hundred_values_reopened(CountingFs {
        inner: MemFs::new(),
        will_need: Arc::default(),
        random: random.clone(),
        device: false,
    });
    for i in 0..100 {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 0)));
    }
    assert!(
        random.load(Ordering::Relaxed) >= 1,
        "no segment reader was hinted random access"
    );
}

/// GC copies are journaled with the writes (where each copy comes from):
/// over many GC cycles the write journal is recycled at its size (the
/// worker finishing each checkpoint before the next round), and everything
/// survives a crash.
#[test]
fn gc_cycles_recycle_the_journal_and_everything_survives_a_crash() {
    let fs = FaultFs::new();
    let o = Options {
        hashkv_journal: true,
        hashkv_journal_size: 64 << 10,
        ..opts(Arc::new(fs.clone()))
    };
    let dir = Path::new("/gcj");
    let db = Db::open(dir, o.clone()).unwrap();
    let mut max_journal = 0;
    for round in 0..1500 {
        for i in 0..8 {
            let k = (round * 3 + i) % 40;
            db.put(key(k), value(k, round)).unwrap();
        }
        db.gc(None).unwrap();
        max_journal = max_journal.max(fig(&db, "write_journal_bytes"));
        db.wait_idle().unwrap();
    }
    assert!(fig(&db, "gc_runs") >= 1500);
    assert!(
        max_journal < 80 << 10,
        "write journal grew to {max_journal}"
    );
    assert!(fig(&db, "table_checkpoints") >= 1);
    let want: Vec<_> = (0..40).map(|i| db.get(key(i)).unwrap()).collect();
    db.write(&WriteBatch::new(), WriteOptions { sync: true })
        .unwrap();
    fs.crash();
    drop(db);
    let db = Db::open(dir, o).unwrap();
    for (i, w) in want.iter().enumerate() {
        assert_eq!(&db.get(key(i)).unwrap(), w, "key {i}");
    }
    assert!(db.verify().unwrap().faults.is_empty());
}

/// Where [`GateFs`] holds the GC thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GateState {
    Open,
    Armed,
    Holding,
}

/// A `MemFs` that, while armed, stops the thread named `gated-gc` at its
/// first read-ahead hint on a segment file — a GC step that has sealed
/// its groups and is about to scan them — until the test opens the gate.
struct GateFs {
    inner: MemFs,
    gate: Arc<(Mutex<GateState>, Condvar)>,
}

impl GateFs {
    fn set(&self, to: GateState) {
        *self.gate.0.lock().unwrap() = to;
        self.gate.1.notify_all();
    }

    fn wait_until_holding(&self) {
        let mut st = self.gate.0.lock().unwrap();
        while *st != GateState::Holding {
            st = self.gate.1.wait(st).unwrap();
        }
    }
}

impl FileSystem for GateFs {
    fn create(&self, p: &Path) -> std::io::Result<Box<dyn sepkv::fs::WritableFile>> {
        self.inner.create(p)
    }
    fn open_append(&self, p: &Path) -> std::io::Result<Box<dyn sepkv::fs::WritableFile>> {
        self.inner.open_append(p)
    }
    fn open_read(&self, p: &Path) -> std::io::Result<Box<dyn sepkv::fs::RandomAccessFile>> {
        self.inner.open_read(p)
    }
    fn exists(&self, p: &Path) -> bool {
        self.inner.exists(p)
    }
    fn is_dir(&self, p: &Path) -> bool {
        self.inner.is_dir(p)
    }
    fn list(&self, d: &Path) -> std::io::Result<Vec<String>> {
        self.inner.list(d)
    }
    fn remove(&self, p: &Path) -> std::io::Result<()> {
        self.inner.remove(p)
    }
    fn rename(&self, a: &Path, b: &Path) -> std::io::Result<()> {
        self.inner.rename(a, b)
    }
    fn create_dir_all(&self, d: &Path) -> std::io::Result<()> {
        self.inner.create_dir_all(d)
    }
    fn sync_dir(&self, d: &Path) -> std::io::Result<()> {
        self.inner.sync_dir(d)
    }
    fn file_size(&self, p: &Path) -> std::io::Result<u64> {
        self.inner.file_size(p)
    }
    fn truncate_synced(&self, p: &Path, len: u64) -> std::io::Result<()> {
        self.inner.truncate_synced(p, len)
    }
    fn advise(&self, p: &Path, off: u64, len: u64, advice: Advice) {
        if advice == Advice::WillNeed
            && p.extension().is_some_and(|e| e == "hseg")
            && std::thread::current().name() == Some("gated-gc")
        {
            let mut st = self.gate.0.lock().unwrap();
            if *st == GateState::Armed {
                *st = GateState::Holding;
                self.gate.1.notify_all();
                while *st == GateState::Holding {
                    st = self.gate.1.wait(st).unwrap();
                }
            }
        }
        self.inner.advise(p, off, len, advice)
    }
    fn lock(&self, p: &Path) -> std::io::Result<Box<dyn sepkv::fs::FileLock>> {
        self.inner.lock(p)
    }
}

/// The sealed-group case, deterministically: a GC step seals the groups it
/// collects; writes that reach those groups while it runs must not take a
/// log segment each (with more groups than log segments that refused
/// writes with the store nearly empty), and once GC is done every group
/// appends into the free room of the main segment GC wrote, not into the
/// reserved space.
#[test]
fn writes_during_gc_take_no_reserved_space() {
    let fs = Arc::new(GateFs {
        inner: MemFs::new(),
        gate: Arc::new((Mutex::new(GateState::Open), Condvar::new())),
    });
    // 8 groups of 64 KiB main segments and 6 log segments of 16 KiB: fewer
    // log segments than groups. No background GC; no hot/cold separation
    // (the cold data log is not bounded by the capacity).
    let o = Options {
        value_capacity: Some(608 << 10),
        hashkv_reserved_ratio: 96.0 / 608.0,
        hashkv_hotness: false,
        ..opts(fs.clone())
    };
    let db = Arc::new(Db::open("/db", o).unwrap());
    assert_eq!(
        (fig(&db, "groups"), fig(&db, "log_segments_reserved")),
        (8, 6)
    );
    // 64 KiB live: 6 % of the capacity.
    const N: usize = 64;
    for i in 0..N {
        db.put(key(i), value(i, 0)).unwrap();
    }
    let mut latest = vec![0usize; N];
    for round in 1..=12 {
        fs.set(GateState::Armed);
        let gc = {
            let db = db.clone();
            std::thread::Builder::new()
                .name("gated-gc".into())
                .spawn(move || db.gc(None).unwrap())
                .unwrap()
        };
        fs.wait_until_holding();
        // GC has sealed its groups and waits: overwrite every key, in
        // pairs, as the writers of the original report did.
        let writer = {
            let db = db.clone();
            std::thread::spawn(move || {
                for i in (0..N).step_by(2) {
                    let mut b = WriteBatch::new();
                    b.put(key(i), value(i, round)).unwrap();
                    b.put(key(i + 1), value(i + 1, round)).unwrap();
                    db.write(&b, WriteOptions::default()).unwrap();
                }
            })
        };
        // A refused write would run GC itself and wait for this one: let
        // GC go on then, and fail below.
        while !writer.is_finished() && fig(&db, "store_full_errors") == 0 {
            std::thread::yield_now();
        }
        fs.set(GateState::Open);
        writer.join().unwrap();
        let rep = gc.join().unwrap();
        assert!(rep.steps > 0, "round {round}: {rep:?}");
        latest.iter_mut().for_each(|r| *r = round);
        assert_eq!(
            fig(&db, "store_full_errors"),
            0,
            "round {round}: writes found the store full while GC ran, with {} KiB live",
            N
        );
    }
    // Every group appends into its main segment's free room.
    db.gc(None).unwrap();
    for (i, r) in latest.iter_mut().enumerate() {
        db.put(key(i), value(i, 99)).unwrap();
        *r = 99;
    }
    assert_eq!(fig(&db, "log_segments_free"), 6);
    for (i, &round) in latest.iter().enumerate() {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i, round)), "key {i}");
    }
    assert!(db.verify().unwrap().faults.is_empty());
}

/// The writes made while GC held its groups sealed went to the groups'
/// new main segments before GC's copies of older versions: the latest
/// version is the one with the highest sequence number, found without
/// index queries — also after a reopen, when the failed relocations of
/// those copies are no longer remembered.
#[test]
fn a_copy_placed_after_a_newer_write_is_not_taken_for_the_latest() {
    let fs = Arc::new(GateFs {
        inner: MemFs::new(),
        gate: Arc::new((Mutex::new(GateState::Open), Condvar::new())),
    });
    let o = Options {
        hashkv_hotness: false,
        ..opts(fs.clone())
    };
    const N: usize = 100;
    {
        let db = Arc::new(Db::open("/db", o.clone()).unwrap());
        for round in 0..2 {
            for i in 0..N {
                db.put(key(i), value(i, round)).unwrap();
            }
        }
        fs.set(GateState::Armed);
        let gc = {
            let db = db.clone();
            std::thread::Builder::new()
                .name("gated-gc".into())
                .spawn(move || db.gc(None).unwrap())
                .unwrap()
        };
        fs.wait_until_holding();
        for i in 0..N {
            db.put(key(i), value(i, 2)).unwrap();
        }
        fs.set(GateState::Open);
        gc.join().unwrap();
        for i in 0..N {
            assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 2)), "key {i}");
        }
        db.close().unwrap();
    }
    let db = Db::open("/db", o).unwrap();
    db.gc(None).unwrap();
    assert_eq!(fig(&db, "gc_index_lookups"), 0);
    assert!(fig(&db, "gc_groups_collected") > 0);
    for i in 0..N {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 2)), "key {i}");
    }
    assert!(db.verify().unwrap().faults.is_empty());
}

/// A segment GC retired that cannot be removed stays queued: the next step
/// frees it and every other segment retired with it.
#[test]
fn a_failed_segment_removal_loses_no_space() {
    let fs = FaultFs::new();
    let o = Options {
        hashkv_hotness: false,
        // GC runs only when the test calls it.
        space_amp_target: f64::INFINITY,
        ..opts(Arc::new(fs.clone()))
    };
    let db = Db::open("/db", o).unwrap();
    // Overwrites push the groups into log segments.
    for round in 0..6 {
        for i in 0..120 {
            db.put(key(i), value(i, round)).unwrap();
        }
    }
    let reserved = fig(&db, "log_segments_reserved");
    assert!(fig(&db, "log_segments_free") < reserved);
    fs.add_rule(FaultRule {
        op: FaultOp::Remove,
        path_contains: Some(".hseg".into()),
        skip: 0,
        times: Some(1),
        kind: FaultKind::Eio,
    });
    assert!(db.gc(None).is_err(), "the removal was expected to fail");
    fs.clear_rules();
    db.gc(None).unwrap();
    assert_eq!(fig(&db, "log_segments_free"), reserved);
    for i in 0..120 {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 5)), "key {i}");
    }
    assert!(db.verify().unwrap().faults.is_empty());
}

/// The sealed-group load, bounded by operations rather than time:
/// capacity 8 MiB, main segments 256 KiB, log segments 64 KiB, 2000 keys
/// with values of 100–900 bytes (about 1 MB live); three writers each read
/// two keys and write both back in one batch (1 % synced), two readers
/// read every key through a snapshot (half by iterator, half by `get`),
/// and a thread runs `gc(Some(0.2))` beside them. No write may find the
/// store full for good, no read may miss a key or see another key's value.
/// `SEPKV_HASHKV_LOAD_OPS` sets the batches per writer (default 10000:
/// about four times the capacity written).
#[test]
fn concurrent_writers_snapshot_readers_and_gc_keep_room() {
    use rand::{Rng, SeedableRng};
    let ops: usize = std::env::var("SEPKV_HASHKV_LOAD_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    let o = Options {
        fs: Arc::new(MemFs::new()),
        value_capacity: Some(8 << 20),
        hashkv_main_segment_size: 256 << 10,
        hashkv_log_segment_size: 64 << 10,
        write_buffer_size: 1 << 20,
        ..Options::preset(Preset::HashKv)
    };
    const N: usize = 2000;
    let val = |i: usize, tag: u64, len: usize| {
        let mut v = format!("{i}:{tag}:").into_bytes();
        v.resize(len, b'a' + (tag % 26) as u8);
        v
    };
    let owned = |i: usize, v: &[u8]| v.starts_with(format!("{i}:").as_bytes());
    let db = Arc::new(Db::open("/load", o.clone()).unwrap());
    let mut rng = rand::rngs::StdRng::seed_from_u64(10);
    for i in 0..N {
        db.put(key(i), val(i, 0, rng.gen_range(100..=900))).unwrap();
    }
    let done = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..3u64)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(100 + t);
                for n in 0..ops as u64 {
                    let (a, b) = (rng.gen_range(0..N), rng.gen_range(0..N));
                    for k in [a, b] {
                        let v = db.get(key(k)).unwrap().expect("every key exists");
                        assert!(owned(k, &v), "key {k} read another key's value");
                    }
                    let tag = (t + 1) << 32 | n;
                    let mut wb = WriteBatch::new();
                    wb.put(key(a), val(a, tag, rng.gen_range(100..=900)))
                        .unwrap();
                    wb.put(key(b), val(b, tag, rng.gen_range(100..=900)))
                        .unwrap();
                    let sync = rng.gen_range(0..100) == 0;
                    db.write(&wb, WriteOptions { sync })
                        .unwrap_or_else(|e| panic!("writer {t}, batch {n}: {e}"));
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (db, done) = (db.clone(), done.clone());
            std::thread::spawn(move || {
                let mut scans = 0u64;
                while !done.load(Ordering::Relaxed) || scans == 0 {
                    let snap = db.snapshot().unwrap();
                    let ro = ReadOptions {
                        snapshot: Some(&snap),
                        ..Default::default()
                    };
                    let mut it = db.iter(&ro).unwrap();
                    it.seek_to_first();
                    for i in 0..N / 2 {
                        assert!(it.valid(), "the snapshot iterator ended at key {i}");
                        assert_eq!(it.key(), &key(i)[..]);
                        assert!(owned(i, it.value()), "key {i}");
                        it.next();
                    }
                    it.status().unwrap();
                    for i in N / 2..N {
                        let v = db.get_opt(&ro, key(i)).unwrap();
                        assert!(v.is_some_and(|v| owned(i, &v)), "key {i}");
                    }
                    scans += 1;
                }
                scans
            })
        })
        .collect();
    let gc = {
        let (db, done) = (db.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                db.gc(Some(0.2)).unwrap();
                std::thread::yield_now();
            }
        })
    };
    for w in writers {
        w.join().unwrap();
    }
    done.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
    gc.join().unwrap();
    let st = db.stats().unwrap();
    assert!(st.value_store_figures["gc_runs"] > 0, "{st:?}");
    assert!(db.verify().unwrap().faults.is_empty());
    let want: Vec<_> = (0..N).map(|i| db.get(key(i)).unwrap()).collect();
    drop(db);
    let db = Db::open("/load", o).unwrap();
    for (i, w) in want.iter().enumerate() {
        assert_eq!(&db.get(key(i)).unwrap(), w, "key {i} after reopen");
    }
}

/// Space GC retired stays allocated while a reader older than the GC may
/// still read it. A write that needs that space waits for the reader
/// rather than finding the store full: here one group whose live data
/// (70 KiB, 22 % of the capacity) passes its main segment, a reader holding
/// a snapshot from before the GC, and overwrites until the group needs the
/// log segments the GC retired.
#[test]
fn a_write_waits_for_readers_to_release_retired_space() {
    // 1 group of 64 KiB, 16 log segments of 16 KiB; no background GC, no
    // hot/cold separation.
    let o = Options {
        value_capacity: Some(320 << 10),
        hashkv_reserved_ratio: 0.8,
        hashkv_hotness: false,
        ..opts(Arc::new(MemFs::new()))
    };
    let db = Arc::new(Db::open("/db", o).unwrap());
    assert_eq!(
        (fig(&db, "groups"), fig(&db, "log_segments_reserved")),
        (1, 16)
    );
    const N: usize = 70;
    for i in 0..N {
        db.put(key(i), value(i, 0)).unwrap();
    }
    let writer_done = Arc::new(AtomicBool::new(false));
    let (taken_tx, taken_rx) = std::sync::mpsc::channel();
    let reader = {
        let (db, writer_done) = (db.clone(), writer_done.clone());
        std::thread::spawn(move || {
            let snap = db.snapshot().unwrap();
            taken_tx.send(()).unwrap();
            // Holds the snapshot until a write waits for it (or the writes
            // ended without waiting).
            while db.stats().unwrap().write_waits_for_readers == 0
                && !writer_done.load(Ordering::Relaxed)
            {
                std::thread::yield_now();
            }
            let ro = ReadOptions {
                snapshot: Some(&snap),
                ..Default::default()
            };
            for i in 0..N {
                assert_eq!(db.get_opt(&ro, key(i)).unwrap(), Some(value(i, 0)));
            }
        })
    };
    taken_rx.recv().unwrap();
    let mut res = Ok(());
    'rounds: for round in 1..8 {
        for i in 0..N {
            res = db.put(key(i), value(i, round));
            if res.is_err() {
                break 'rounds;
            }
        }
    }
    writer_done.store(true, Ordering::Relaxed);
    reader.join().unwrap();
    res.unwrap();
    assert!(db.stats().unwrap().write_waits_for_readers > 0);
    for i in 0..N {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 7)), "key {i}");
    }
    assert!(db.verify().unwrap().faults.is_empty());
}

/// Uniform overwrites of a store filled to 70 % of `value_capacity`: every
/// write finds room while garbage remains, round after round. Two things
/// had made writes meet a full store here. The cold log's values died
/// unseen: after its GC moved them, a superseded tag named where they had
/// been, and the index, whose memtable held every overwrite, reported
/// nothing; group steps that gain no room now hand over to the cold log's
/// GC, which looks the keys up. And the groups outgrew their main
/// segments by more than GC's headroom, so no group's copies fit the
/// reserve; one group per step may now overdraw it by a main segment's
/// worth until its old segments are freed.
#[test]
fn uniform_overwrites_at_seventy_percent_find_room() {
    let db = Db::open("/db", opts(Arc::new(MemFs::new()))).unwrap();
    // 1 MiB: 512 KiB of main segments and 32 log segments of 16 KiB.
    let n = fill_into_17_log_segments(&db);
    assert!(n > 650, "{n} values");
    db.gc(None).unwrap();
    let mut x: u64 = 12345;
    // The round of each key's last write.
    let mut last = vec![0; n];
    for round in 1..=8 {
        for _ in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let i = (x % n as u64) as usize;
            db.put(key(i), value(i, round)).unwrap();
            last[i] = round;
        }
        // Within the reserve, or above it by at most the overdraft of a
        // step in flight (four units: a 64 KiB main segment's worth).
        let (used, reserved) = reserve_use(&db);
        assert!(
            used <= reserved + 4,
            "round {round}: {used} of {reserved} units"
        );
    }
    assert!(
        fig(&db, "store_full_errors") > 0,
        "writers met the capacity"
    );
    for (i, &r) in last.iter().enumerate() {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i, r)), "key {i}");
    }
    assert!(db.verify().unwrap().faults.is_empty());
}

/// With `gc_chunk_size` below a group's bytes, every GC step collects
/// exactly one group, yet `Db::gc` still reaches every group, every key
/// keeps its latest version, and the longest step is reported.
#[test]
fn a_gc_step_takes_one_group_when_the_budget_is_below_a_group() {
    let db = Db::open(
        "/db",
        Options {
            gc_chunk_size: 4 << 10,
            hashkv_hotness: false,
            ..opts(Arc::new(MemFs::new()))
        },
    )
    .unwrap();
    const N: usize = 150;
    for round in 0..3 {
        for i in 0..N {
            db.put(key(i), value(i, round)).unwrap();
        }
    }
    let rep = db.gc(None).unwrap();
    assert!(rep.steps > 0 && rep.bytes_freed > 0, "{rep:?}");
    let (runs, groups) = (fig(&db, "gc_runs"), fig(&db, "gc_groups_collected"));
    assert_eq!(runs, groups, "each step one group");
    assert!(groups >= 8, "{groups} groups collected");
    assert!(db.stats().unwrap().gc_step_micros_max > 0);
    for i in 0..N {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 2)), "key {i}");
    }
}
