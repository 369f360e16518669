//! The background thread flushes a waiting memtable between two outputs of
//! a running compaction (as LevelDB's compaction loop does): the flush goes
//! to level 0, the compaction's outputs, not yet named by any version,
//! survive the flush's delete pass, and every write reads back, before and
//! after a reopen, for the LSM-tree and the LWC-tree.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sepkv::fs::MemFs;
use sepkv::{Db, Options, Preset};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

fn opts(fs: &MemFs, preset: Preset) -> Options {
    Options {
        fs: Arc::new(fs.clone()),
        // Small memtables fill while a compaction of many small outputs
        // runs; level 1 is large, so level-0 compactions rewrite (or, for
        // the LWC-tree, append to) many tables.
        write_buffer_size: 64 << 10,
        target_file_size: 64 << 10,
        max_bytes_for_level_base: 8 << 20,
        block_size: 1024,
        ..Options::preset(preset)
    }
}

fn figure(db: &Db, name: &str) -> u64 {
    db.stats()
        .unwrap()
        .index_figures
        .get(name)
        .copied()
        .unwrap_or(0)
}

fn check(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    for (k, v) in model.iter().step_by(7) {
        assert_eq!(db.get(k).unwrap().as_deref(), Some(v.as_slice()), "{k:?}");
    }
    let got: Vec<_> = db.scan(.., false).unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(got.len(), model.len());
    assert!(
        got.iter()
            .zip(model)
            .all(|(a, b)| a.0 == *b.0 && a.1 == *b.1),
        "a scan differs from the model"
    );
}

/// Writes until some flush ran inside a compaction (at most 40 rounds:
/// each round's compactions are larger than the last's, so the writer
/// outruns one sooner or later on any machine), then checks the data.
#[test]
fn a_memtable_flushed_inside_a_compaction_loses_nothing() {
    for preset in [Preset::LevelDb, Preset::Lwc] {
        let fs = MemFs::new();
        let dir = Path::new("/db");
        let db = Db::open(dir, opts(&fs, preset)).unwrap();
        let mut model = BTreeMap::new();
        let mut rng = StdRng::seed_from_u64(5);
        let mut rounds = 0;
        while figure(&db, "flushes_in_compaction") == 0 {
            rounds += 1;
            assert!(
                rounds <= 40,
                "{preset}: no flush ran inside a compaction in {rounds} rounds"
            );
            for i in 0..5_000u32 {
                let k = format!("key{:07}", rng.gen_range(0..200_000)).into_bytes();
                let v = format!("{rounds}-{i}-{}", "v".repeat(rng.gen_range(20..120)));
                db.put(&k, &v).unwrap();
                model.insert(k, v.into_bytes());
            }
        }
        eprintln!("{preset}: a flush ran inside a compaction in round {rounds}");
        db.wait_idle().unwrap();
        check(&db, &model);
        let rep = db.verify().unwrap();
        assert!(rep.faults.is_empty(), "{preset}: {:?}", rep.faults);
        db.close().unwrap();
        let db = Db::open(dir, opts(&fs, preset)).unwrap();
        check(&db, &model);
        db.close().unwrap();
    }
}
