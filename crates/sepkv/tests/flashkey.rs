//! The `flashkey` preset through the `Db` API: the hash index, the bands
//! and the key-only LSM-tree together (FlashKey §V).

use sepkv::fs::MemFs;
use sepkv::{Db, HashIndexMode, Options, Preset, ReadOptions, WriteBatch, WriteOptions};
use std::collections::BTreeMap;
use std::sync::Arc;

fn opts(fs: &Arc<MemFs>, mode: HashIndexMode) -> Options {
    Options {
        fs: fs.clone(),
        band_entries: 32,
        hash_checkpoint_bands: 4,
        hash_index_mode: mode,
        hash_cache_size: 64 << 10,
        write_buffer_size: 64 << 10,
        gc_garbage_ratio: 0.2,
        ..Options::preset(Preset::FlashKey)
    }
}

fn scan(db: &Db, snap: Option<&sepkv::Snapshot<'_>>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let ro = ReadOptions {
        snapshot: snap,
        ..Default::default()
    };
    let mut it = db.iter(&ro).unwrap();
    it.seek_to_first();
    let mut out = Vec::new();
    while it.valid() {
        out.push((it.key().to_vec(), it.value().to_vec()));
        it.next();
    }
    it.status().unwrap();
    out
}

#[test]
fn puts_gets_deletes_scans_snapshots_and_reopen() {
    for mode in [HashIndexMode::Memory, HashIndexMode::Disk] {
        let fs = Arc::new(MemFs::new());
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let db = Db::open("/db", opts(&fs, mode)).unwrap();
        for round in 0..6u32 {
            for i in 0..300u32 {
                let k = format!("key{:04}", (i * 7 + round * 13) % 400).into_bytes();
                if (i + round) % 5 == 0 {
                    db.delete(&k).unwrap();
                    model.remove(&k);
                } else {
                    let v = format!("v{round}-{i}-{}", "x".repeat(200)).into_bytes();
                    db.put(&k, &v).unwrap();
                    model.insert(k, v);
                }
            }
        }
        let snap = db.snapshot().unwrap();
        let frozen: Vec<_> = model.clone().into_iter().collect();
        let mut b = WriteBatch::new();
        for (k, _) in model.iter().take(50) {
            b.delete(k).unwrap();
        }
        b.put("zzz", "last").unwrap();
        db.write(&b, WriteOptions { sync: true }).unwrap();
        let dels: Vec<Vec<u8>> = model.keys().take(50).cloned().collect();
        for k in dels {
            model.remove(&k);
        }
        model.insert(b"zzz".to_vec(), b"last".to_vec());
        for (k, v) in &model {
            assert_eq!(db.get(k).unwrap().as_ref(), Some(v), "{mode:?}");
        }
        let now: Vec<_> = model.clone().into_iter().collect();
        assert_eq!(scan(&db, None), now, "{mode:?}: scan now");
        assert_eq!(
            scan(&db, Some(&snap)),
            frozen,
            "{mode:?}: scan at the snapshot"
        );
        for (k, v) in &frozen {
            assert_eq!(snap.get(k).unwrap().as_ref(), Some(v));
        }
        drop(snap);
        db.gc(None).unwrap();
        let st = db.stats().unwrap();
        let text = format!("{st:?}");
        assert!(text.contains("hash_load_percent"), "{text}");
        assert!(text.contains("bands_closed"), "{text}");
        let rep = db.verify().unwrap();
        assert!(rep.faults.is_empty(), "{:?}", rep.faults);
        db.close().unwrap();
        let db = Db::open("/db", opts(&fs, mode)).unwrap();
        assert_eq!(scan(&db, None), now, "{mode:?}: scan after reopen");
        for (k, v) in &model {
            assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
        }
        db.close().unwrap();
    }
}

/// A flipped byte anywhere in a band, a hash-table page or its meta file is
/// reported as corruption with the file (at open, on a read, or by
/// `verify`), never read as a wrong value and never a panic.
#[test]
fn damage_is_corruption_never_a_wrong_value() {
    use sepkv::fs::{FaultFs, FileSystem};
    use std::path::Path;
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut rnd = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let mut caught = 0;
    for trial in 0..200u64 {
        let fs = FaultFs::new();
        let o = Options {
            fs: Arc::new(fs.clone()),
            band_entries: 32,
            hash_checkpoint_bands: 2,
            hash_index_mode: if trial % 2 == 0 {
                HashIndexMode::Memory
            } else {
                HashIndexMode::Disk
            },
            gc_garbage_ratio: 0.0,
            ..Options::preset(Preset::FlashKey)
        };
        let val = |i: u32| format!("value-{i}-{}", "y".repeat(100)).into_bytes();
        {
            let db = Db::open("/db", o.clone()).unwrap();
            for i in 0..300u32 {
                db.put(format!("k{i:04}"), val(i)).unwrap();
            }
            db.close().unwrap();
        }
        let names: Vec<String> = fs
            .list(Path::new("/db"))
            .unwrap()
            .into_iter()
            .filter(|n| n.ends_with(".band") || n.ends_with(".pages") || n == "HASHMETA")
            .collect();
        let name = &names[rnd(names.len() as u64) as usize];
        let path = Path::new("/db").join(name);
        let len = fs.file_len(&path).unwrap();
        let off = rnd(len);
        fs.corrupt(&path, off, 1 << rnd(8)).unwrap();
        let db = match Db::open("/db", o.clone()) {
            Ok(db) => db,
            Err(e) => {
                assert!(e.is_corruption(), "trial {trial}: {name}@{off}: {e}");
                caught += 1;
                continue;
            }
        };
        let mut errs = 0;
        for i in 0..300u32 {
            match db.get(format!("k{i:04}")) {
                Ok(v) => assert_eq!(v, Some(val(i)), "trial {trial}: {name}@{off}: key {i}"),
                Err(e) => {
                    assert!(e.is_corruption(), "trial {trial}: {e}");
                    errs += 1;
                }
            }
        }
        let rep = db.verify().unwrap();
        if errs > 0 || !rep.faults.is_empty() {
            caught += 1;
        }
        for f in &rep.faults {
            assert!(f.is_corruption(), "{f}");
        }
    }
    assert!(caught >= 100, "only {caught} of 200 damages were reported");
}
