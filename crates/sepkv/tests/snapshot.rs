//! Snapshot reads as the `rocksdb` crate offers them: `get`, `multi_get`,
//! `scan` and cursors on the snapshot itself, consistent through writes,
//! flushes, compactions and value-store GC; iterators opened through a
//! snapshot stay valid after it is dropped. Keys and values are anything
//! `AsRef<[u8]>`.

use sepkv::fs::MemFs;
use sepkv::{Db, Options, Preset, ReadOptions, WriteBatch};
use std::sync::Arc;

fn opts(fs: &MemFs, preset: Preset) -> Options {
    Options {
        fs: Arc::new(fs.clone()),
        write_buffer_size: 64 << 10,
        gc_garbage_ratio: 0.0,
        hashkv_main_segment_size: 64 << 10,
        hashkv_log_segment_size: 16 << 10,
        value_capacity: Some(8 << 20),
        band_entries: 64,
        hash_checkpoint_bands: 2,
        ..Options::preset(preset)
    }
}

fn key(i: u32) -> String {
    format!("key{i:05}")
}

fn value(i: u32, round: u32) -> Vec<u8> {
    format!("{round}-{i}-{}", "v".repeat(200)).into_bytes()
}

#[test]
fn snapshot_reads_stay_put_through_writes_flushes_compactions_and_gc() {
    for preset in [
        Preset::LevelDb,
        Preset::WiscKey,
        Preset::HashKv,
        Preset::FlashKey,
    ] {
        let fs = MemFs::new();
        let db = Db::open("/db", opts(&fs, preset)).unwrap();
        for i in 0..500 {
            db.put(key(i), value(i, 0)).unwrap();
        }
        let snap = db.snapshot().unwrap();
        for i in 0..500 {
            if i % 3 == 0 {
                db.delete(key(i)).unwrap();
            } else {
                db.put(key(i), value(i, 1)).unwrap();
            }
        }
        db.put("new", "x").unwrap();
        db.flush().unwrap();
        db.compact_range(..).unwrap();
        db.gc(None).unwrap();

        for i in (0..500).step_by(7) {
            assert_eq!(snap.get(key(i)).unwrap(), Some(value(i, 0)), "{preset}");
        }
        assert_eq!(snap.get("new").unwrap(), None);
        let keys: Vec<String> = (0..10).map(key).collect();
        let want: Vec<_> = (0..10).map(|i| Some(value(i, 0))).collect();
        assert_eq!(snap.multi_get(&keys).unwrap(), want, "{preset}");
        let now = db.multi_get(&keys).unwrap();
        assert_eq!(now[0], None);
        assert_eq!(now[1], Some(value(1, 1)));

        let all: Vec<_> = snap.scan(.., false).unwrap().map(|r| r.unwrap()).collect();
        assert_eq!(all.len(), 500, "{preset}");
        assert!(all
            .iter()
            .enumerate()
            .all(|(i, (k, v))| *k == key(i as u32).into_bytes() && *v == value(i as u32, 0)));
        let back: Vec<_> = snap
            .scan(key(10)..=key(19), true)
            .unwrap()
            .map(|r| r.unwrap().0)
            .collect();
        let want: Vec<_> = (10..20).rev().map(|i| key(i).into_bytes()).collect();
        assert_eq!(back, want, "{preset}");

        // Through read options, as before.
        let ro = ReadOptions {
            dont_fill_cache: true,
            ..snap.read_options()
        };
        assert_eq!(db.get_opt(&ro, key(3)).unwrap(), Some(value(3, 0)));
        assert_eq!(db.scan_opt(&ro, .., false).unwrap().count(), 500);

        // A cursor outlives the snapshot it came from and keeps its view,
        // even as GC runs on.
        let mut it = snap.iter_range(key(100)..key(200)).unwrap();
        drop(snap);
        for i in 0..500 {
            db.put(key(i), value(i, 2)).unwrap();
        }
        db.flush().unwrap();
        db.gc(None).unwrap();
        it.seek_to_first();
        let mut n = 0;
        while it.valid() {
            assert_eq!(it.key(), key(100 + n).as_bytes());
            assert_eq!(it.value(), &value(100 + n, 0)[..], "{preset}");
            it.next();
            n += 1;
        }
        it.status().unwrap();
        assert_eq!(n, 100);
        drop(it);
        assert_eq!(db.stats().unwrap().live_snapshots, 0);
    }
}

#[test]
fn keys_and_values_are_anything_byte_like() {
    let fs = MemFs::new();
    let db = Db::open("/db", opts(&fs, Preset::LevelDb)).unwrap();
    db.put("str", "a").unwrap();
    db.put(String::from("string"), String::from("b")).unwrap();
    db.put(b"array", b"c").unwrap();
    db.put(vec![b'v', b'e', b'c'], vec![b'd']).unwrap();
    db.put(&b"slice"[..], &b"e"[..]).unwrap();
    let mut batch = WriteBatch::new();
    batch.put("batch", [1u8, 2, 3]).unwrap();
    batch.delete(String::from("str")).unwrap();
    db.write(&batch, Default::default()).unwrap();
    db.delete(b"array").unwrap();
    assert_eq!(db.get("str").unwrap(), None);
    assert_eq!(db.get(String::from("string")).unwrap(), Some(b"b".to_vec()));
    let owned: Vec<u8> = b"vec".to_vec();
    assert_eq!(db.get(owned).unwrap(), Some(b"d".to_vec()));
    assert_eq!(db.get("batch").unwrap(), Some(vec![1, 2, 3]));
    let mut it = db.iter(&ReadOptions::default()).unwrap();
    it.seek("s");
    assert_eq!(it.key(), b"slice");
    it.seek_before(String::from("s"));
    assert_eq!(it.key(), b"batch");
}

#[test]
fn handles_snapshots_and_iterators_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Db>();
    send_sync::<sepkv::Snapshot<'static>>();
    send::<sepkv::DbIterator>();
    send::<sepkv::Scan>();
    // A snapshot shared by reader threads.
    let fs = MemFs::new();
    let db = Db::open("/db", opts(&fs, Preset::WiscKey)).unwrap();
    for i in 0..100 {
        db.put(key(i), value(i, 0)).unwrap();
    }
    let snap = db.snapshot().unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..100 {
                db.put(key(i), value(i, 1)).unwrap();
            }
        });
        for _ in 0..2 {
            s.spawn(|| {
                let n = snap
                    .scan(.., false)
                    .unwrap()
                    .map(|r| r.unwrap())
                    .filter(|(k, v)| {
                        let i: u32 = std::str::from_utf8(&k[3..]).unwrap().parse().unwrap();
                        *v == value(i, 0)
                    })
                    .count();
                assert_eq!(n, 100);
            });
        }
    });
}
