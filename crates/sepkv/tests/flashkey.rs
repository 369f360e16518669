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
