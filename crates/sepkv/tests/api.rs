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
