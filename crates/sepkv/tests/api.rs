//! Basic API behaviour on the in-memory and real file systems.

use sepkv::fs::MemFs;
use sepkv::{Db, Options};
use std::path::Path;
use std::sync::Arc;

fn small(fs: &MemFs) -> Options {
    Options {
        fs: Arc::new(fs.clone()),
        write_buffer_size: 64 << 10,
        target_file_size: 64 << 10,
        max_bytes_for_level_base: 256 << 10,
        l0_compaction_trigger: 2,
        ..Options::default()
    }
}

#[test]
fn put_get_flush_compact_reopen() {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let db = Db::open(dir, small(&fs)).unwrap();
    for i in 0..20_000u32 {
        db.put(
            format!("k{:08}", (i * 7919) % 20_000).as_bytes(),
            format!("value-{i}").as_bytes(),
        )
        .unwrap();
    }
    for i in (0..20_000u32).step_by(3) {
        db.delete(format!("k{i:08}").as_bytes()).unwrap();
    }
    db.flush().unwrap();
    let check = |db: &Db| {
        for i in 0..20_000u32 {
            let got = db.get(format!("k{i:08}").as_bytes()).unwrap();
            assert_eq!(got.is_some(), i % 3 != 0, "key {i}");
        }
        let n = db.scan(.., false).unwrap().count();
        assert_eq!(n, 20_000 - 6667);
        let n = db.scan(.., true).unwrap().count();
        assert_eq!(n, 20_000 - 6667);
    };
    check(&db);
    db.compact_range(..).unwrap();
    check(&db);
    let s = db.stats().unwrap();
    assert!(s.flushes > 0);
    db.close().unwrap();
    assert!(matches!(db.get(b"k"), Err(sepkv::Error::Closed)));
    let db = Db::open(dir, small(&fs)).unwrap();
    check(&db);
}

/// The index reports its own figures through the stats (for the LSM-tree:
/// SSTables and their bytes), and every file of the directory lands in a
/// group the index or the facade names.
#[test]
fn stats_carry_the_index_figures_and_file_groups() {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let db = Db::open(dir, small(&fs)).unwrap();
    for i in 0..5_000u32 {
        db.put(format!("k{i:08}"), format!("value-{i}")).unwrap();
    }
    db.flush().unwrap();
    db.wait_idle().unwrap();
    let s = db.stats().unwrap();
    let files: usize = s.levels.iter().map(|l| l.files).sum();
    let bytes: u64 = s.levels.iter().map(|l| l.bytes).sum();
    assert!(files > 0, "{s:?}");
    assert_eq!(s.index_figures["sstables"], files as u64);
    assert_eq!(s.index_figures["sstable_bytes"], bytes);
    let group = |kind: &str| s.files.iter().find(|g| g.kind == kind).unwrap().clone();
    assert_eq!(group("sstables").files, files as u64);
    assert_eq!(group("sstables").size_bytes, bytes);
    assert!(group("wal").files >= 1);
    assert!(group("manifest").files >= 2, "MANIFEST and CURRENT");
    assert_eq!(group("other").files, 2, "IDENTITY and LOCK");
    assert_eq!(group("value store").files, 0);
    db.close().unwrap();
}

/// `wait_idle` returns only once the files a finished flush or compaction
/// made obsolete are gone: the directory then holds exactly the SSTables
/// the levels list, and a space figure taken then is not inflated.
#[test]
fn wait_idle_leaves_no_obsolete_tables() {
    let fs = MemFs::new();
    let db = Db::open("/db", small(&fs)).unwrap();
    for round in 0..30u32 {
        for i in 0..2_000u32 {
            db.put(
                format!("k{:08}", (i * 7919 + round * 13) % 50_000),
                format!("v{round}-{i}"),
            )
            .unwrap();
        }
        db.wait_idle().unwrap();
        let s = db.stats().unwrap();
        let listed: u64 = s.levels.iter().map(|l| l.files as u64).sum();
        let on_disk = s.files.iter().find(|g| g.kind == "sstables").unwrap().files;
        assert_eq!(on_disk, listed, "round {round}");
    }
    db.close().unwrap();
}
