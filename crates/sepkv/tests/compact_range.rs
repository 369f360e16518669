//! `Db::compact_range` compacts down to the bottommost level that holds
//! data, level 0 included (RocksDB's `CompactRange`): afterwards no level-0
//! file overlaps the range and no tombstone or overwritten version a reader
//! no longer needs remains there. "Entries in SSTables" is what `verify`
//! reads from every table, so it counts tombstones and old versions too.

use sepkv::fs::MemFs;
use sepkv::{Db, Options, Preset};
use std::path::Path;
use std::sync::Arc;

fn opts(fs: &MemFs, preset: Preset) -> Options {
    Options {
        fs: Arc::new(fs.clone()),
        write_buffer_size: 64 << 10,
        target_file_size: 64 << 10,
        max_bytes_for_level_base: 256 << 10,
        gc_garbage_ratio: 0.0,
        ..Options::preset(preset)
    }
}

fn level0_files(db: &Db) -> usize {
    db.stats().unwrap().levels[0].files
}

fn table_entries(db: &Db) -> u64 {
    let rep = db.verify().unwrap();
    assert!(rep.faults.is_empty(), "{:?}", rep.faults);
    rep.entries
}

/// The `sepkv` session of the report: every command is a process of its
/// own, each leaving its write in the WAL (as one that exits without
/// closing does), so each reaches level 0 through WAL recovery.
#[test]
fn delete_then_compact_leaves_no_tombstone_and_no_level0_file() {
    for preset in [Preset::LevelDb, Preset::WiscKey, Preset::HashKv] {
        let fs = MemFs::new();
        let dir = Path::new("/db");
        let o = || Options {
            hashkv_main_segment_size: 64 << 10,
            hashkv_log_segment_size: 16 << 10,
            value_capacity: Some(4 << 20),
            // As a process that exits without closing leaves it.
            flush_on_close: false,
            ..opts(&fs, preset)
        };
        let big = vec![b'v'; 300]; // separated by wisckey and hashkv
        for step in 0..3 {
            let db = Db::open(dir, o()).unwrap();
            match step {
                0 => db.put("a", &big).unwrap(),
                1 => db.put("b", &big).unwrap(),
                _ => db.delete("a").unwrap(),
            }
            db.close().unwrap();
        }
        let db = Db::open(dir, o()).unwrap();
        assert_eq!(level0_files(&db), 3, "{preset}: setup");
        assert_eq!(table_entries(&db), 3, "{preset}: setup");

        let done = db.compact_range(..).unwrap();
        assert_eq!(level0_files(&db), 0, "{preset}: level 0 after compact");
        assert_eq!(table_entries(&db), 1, "{preset}: only b remains");
        assert_eq!(done.files_in, 3, "{preset}: {done:?}");
        assert_eq!(done.files_out, 1, "{preset}: {done:?}");
        assert_eq!(done.tombstones_dropped, 1, "{preset}: {done:?}");
        assert_eq!(done.dropped, 2, "{preset}: tombstone and the value it hid");
        assert!(done.bytes_in > done.bytes_out, "{preset}: {done:?}");
        assert_eq!(db.get("a").unwrap(), None);
        assert_eq!(db.get("b").unwrap(), Some(big.clone()));
        // Nothing left to drop: a second call rewrites the bottommost
        // file (it cannot know the file is clean) and drops nothing.
        let again = db.compact_range(..).unwrap();
        assert_eq!(
            (again.files_in, again.files_out),
            (1, 1),
            "{preset}: {again:?}"
        );
        assert_eq!(again.dropped, 0, "{preset}: {again:?}");
        db.close().unwrap();
        let db = Db::open(dir, o()).unwrap();
        assert_eq!(table_entries(&db), 1);
        assert_eq!(db.get("b").unwrap(), Some(big));
    }
}

fn key(i: u32) -> String {
    format!("k{i:06}")
}

/// Tombstones an earlier compaction had to keep for a snapshot sit in the
/// bottommost level; once the snapshot is gone, compacting the range
/// rewrites that level in place and drops them.
#[test]
fn the_bottommost_level_is_rewritten_once_no_snapshot_needs_its_tombstones() {
    let fs = MemFs::new();
    let db = Db::open("/db", opts(&fs, Preset::LevelDb)).unwrap();
    let value = vec![7u8; 100];
    for i in 0..3000 {
        db.put(key(i), &value).unwrap();
    }
    db.compact_range(..).unwrap();
    assert_eq!(level0_files(&db), 0);
    assert_eq!(table_entries(&db), 3000);

    let snap = db.snapshot().unwrap();
    for i in (0..3000).step_by(2) {
        db.delete(key(i)).unwrap();
    }
    for i in (1..3000).step_by(10) {
        db.put(key(i), b"new").unwrap();
    }
    let kept = db.compact_range(..).unwrap();
    assert_eq!(kept.tombstones_dropped, 0, "the snapshot needs them");
    assert_eq!(level0_files(&db), 0);
    assert_eq!(table_entries(&db), 3000 + 1500 + 300);
    assert_eq!(snap.get(key(0)).unwrap(), Some(value.clone()));
    // Once the snapshot is gone, the tables (more than half garbage) may
    // also be rewritten by the tombstone-density trigger before the
    // manual compaction reaches them: the two drop everything together.
    let dropped_before = db.stats().unwrap().compaction_entries_dropped;
    drop(snap);

    let done = db.compact_range(..).unwrap();
    assert!(done.tombstones_dropped <= 1500, "{done:?}");
    db.wait_idle().unwrap();
    let dropped = db.stats().unwrap().compaction_entries_dropped - dropped_before;
    assert_eq!(dropped, 1500 + 1500 + 300, "{done:?}");
    assert_eq!(table_entries(&db), 1500);
    assert_eq!(level0_files(&db), 0);
    assert_eq!(db.scan(.., false).unwrap().count(), 1500);
    assert_eq!(db.get(key(1)).unwrap(), Some(b"new".to_vec()));
    assert_eq!(db.get(key(3)).unwrap(), Some(value));
    assert_eq!(db.get(key(2)).unwrap(), None);
}

/// A bounded range compacts what overlaps it and leaves the rest.
#[test]
fn a_range_compaction_reaches_the_bottom_inside_the_range() {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    // Two sessions, so that both halves sit in level 0 as separate files.
    let o = || Options {
        write_buffer_size: 1 << 20, // no flush before the sessions end
        flush_on_close: false,      // nor at their end
        ..opts(&fs, Preset::LevelDb)
    };
    for (lo, hi) in [(0, 1000), (1000, 2000)] {
        let db = Db::open(dir, o()).unwrap();
        for i in lo..hi {
            db.put(key(i), b"v1").unwrap();
        }
        for i in lo..hi {
            db.delete(key(i)).unwrap();
        }
        db.close().unwrap();
    }
    let db = Db::open(dir, o()).unwrap();
    assert_eq!(level0_files(&db), 2);
    assert_eq!(table_entries(&db), 4000);
    // The first half's file, and only it, overlaps [k000000, k000999].
    let done = db.compact_range(key(0)..=key(999)).unwrap();
    assert_eq!(done.tombstones_dropped, 1000, "{done:?}");
    assert_eq!(level0_files(&db), 1, "the other half stays in level 0");
    assert_eq!(table_entries(&db), 2000);
    let rest = db.compact_range(key(1000)..).unwrap();
    assert_eq!(rest.tombstones_dropped, 1000, "{rest:?}");
    assert_eq!(level0_files(&db), 0);
    assert_eq!(table_entries(&db), 0);
    assert!(db.compact_range(key(5).as_str()..key(1).as_str()).is_err());
}
