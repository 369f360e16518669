//! `Db::repair` after manifest loss, for every preset it supports
//! (`leveldb`, `wisckey`, `hashkv`, `ktstore`, `lwc`).
//!
//! A database is written with overwrites and deletes spread over flushes,
//! compactions and GC (so tombstones and older versions sit in different
//! tables, and the last writes stay in the WAL), then closed. Three copies
//! are damaged: every `MANIFEST-*` and `CURRENT` removed; the manifest's
//! bytes garbled in the middle; `CURRENT` alone removed. Each must then be
//! refused by `open`, repaired, and read exactly as before: no key lost,
//! no deleted key back (checked by `get` of every key ever written and by
//! a full scan), `verify` clean, writes accepted. `flashkey` and log mode
//! are refused with a clear error. Each case prints keys before and after.

use sepkv::{Db, Error, Options, Preset};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const KEYS: u32 = 2000;

fn opts(preset: Preset) -> Options {
    Options {
        value_threshold: 64,
        vlog_file_size: 1 << 20,
        gc_chunk_size: 16 << 10,
        write_buffer_size: 64 << 10,
        target_file_size: 64 << 10,
        max_bytes_for_level_base: 256 << 10,
        block_size: 1024,
        l0_compaction_trigger: 2,
        trie_table_size: 128 << 10,
        trie_roll_size: 64 << 10,
        flush_on_close: false,
        gc_on_close: false,
        ..Options::preset(preset)
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn value(i: u32, round: u32) -> Vec<u8> {
    let len = if i.is_multiple_of(2) {
        10
    } else {
        100 + (i + round) % 500
    };
    (0..len).map(|j| (i * 7 + j + round * 31) as u8).collect()
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn build(dir: &Path, preset: Preset) -> Model {
    let db = Db::open(dir, opts(preset)).unwrap();
    let mut m = Model::new();
    for round in 0..3u32 {
        for i in 0..KEYS {
            if (i + round).is_multiple_of(3) || round == 0 {
                db.put(key(i), value(i, round)).unwrap();
                m.insert(key(i), value(i, round));
            }
        }
        // Deletes of keys whose values are in older tables.
        for i in (round..KEYS).step_by(11) {
            db.delete(key(i)).unwrap();
            m.remove(&key(i));
        }
        db.flush().unwrap();
        if round == 1 {
            db.compact_range(..).unwrap();
            db.gc(None).unwrap();
        }
    }
    // A tail left in the WAL: a delete and a few writes.
    db.delete(key(1)).unwrap();
    m.remove(&key(1));
    for i in 0..20 {
        db.put(key(KEYS + i), value(i, 9)).unwrap();
        m.insert(key(KEYS + i), value(i, 9));
    }
    db.close().unwrap();
    m
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else if e.file_name() != "LOCK" {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

fn manifests(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("MANIFEST-"))
        })
        .collect()
}

fn check(db: &Db, m: &Model, what: &str) {
    for i in 0..KEYS + 20 {
        assert_eq!(
            db.get(key(i)).unwrap().as_ref(),
            m.get(&key(i)),
            "{what}: key {i}"
        );
    }
    let got: Model = db.scan(.., false).unwrap().map(|r| r.unwrap()).collect();
    assert!(&got == m, "{what}: the scan differs");
    let rep = db.verify().unwrap();
    assert!(rep.faults.is_empty(), "{what}: {:?}", rep.faults);
}

fn case(preset: Preset, damage: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let m = build(&src, preset);
    let dir = tmp.path().join("db");
    copy_dir(&src, &dir);
    match damage {
        "manifest-lost" => {
            for p in manifests(&dir) {
                std::fs::remove_file(p).unwrap();
            }
            std::fs::remove_file(dir.join("CURRENT")).unwrap();
        }
        "manifest-garbled" => {
            for p in manifests(&dir) {
                let mut d = std::fs::read(&p).unwrap();
                let (mid, end) = (d.len() / 2, (d.len() / 2 + 16).min(d.len()));
                for b in &mut d[mid..end] {
                    *b ^= 0x5a;
                }
                std::fs::write(&p, d).unwrap();
            }
        }
        "current-lost" => std::fs::remove_file(dir.join("CURRENT")).unwrap(),
        _ => unreachable!(),
    }
    let what = format!("{preset} {damage}");
    let e = Db::open(&dir, Options::default()).unwrap_err();
    assert!(
        e.is_corruption(),
        "{what}: the damage went unnoticed: {e:?}"
    );
    let rep = Db::repair(&dir, Options::default()).unwrap_or_else(|e| panic!("{what}: {e}"));
    eprintln!(
        "repair {what}: keys before {}, after {} ({} tombstones kept, {} tables kept, \
         {} dropped, {} obsolete, {} WALs; value-store state kept: {}); warnings: {:?}",
        m.len(),
        rep.keys_after,
        rep.tombstones,
        rep.tables_kept,
        rep.tables_dropped.len(),
        rep.tables_obsolete,
        rep.wals_read,
        rep.value_store_state_kept,
        rep.warnings
    );
    assert_eq!(rep.keys_after, m.len() as u64, "{what}");
    assert!(dir.join("lost").is_dir(), "{what}: no lost/");
    let db = Db::open(&dir, Options::default()).unwrap();
    check(&db, &m, &what);
    db.put("after", "repair").unwrap();
    db.gc(None).unwrap();
    db.compact_range(..).unwrap();
    let mut m2 = m.clone();
    m2.insert(b"after".to_vec(), b"repair".to_vec());
    let got: Model = db.scan(.., false).unwrap().map(|r| r.unwrap()).collect();
    assert!(got == m2, "{what}: after GC and compaction");
}

fn all_damages(preset: Preset) {
    for d in ["manifest-lost", "manifest-garbled", "current-lost"] {
        case(preset, d);
    }
}

#[test]
fn repair_leveldb() {
    all_damages(Preset::LevelDb);
}

#[test]
fn repair_wisckey() {
    all_damages(Preset::WiscKey);
}

#[test]
fn repair_hashkv() {
    all_damages(Preset::HashKv);
}

#[test]
fn repair_ktstore() {
    all_damages(Preset::KtStore);
}

#[test]
fn repair_lwc() {
    all_damages(Preset::Lwc);
}

#[test]
fn repair_refuses_what_it_cannot_rebuild() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, o) in [
        ("flashkey", Options::preset(Preset::FlashKey)),
        (
            "nowal",
            Options {
                wal: false,
                ..Options::preset(Preset::WiscKey)
            },
        ),
    ] {
        let dir = tmp.path().join(name);
        let db = Db::open(&dir, o).unwrap();
        db.put("k", "v").unwrap();
        drop(db);
        let e = Db::repair(&dir, Options::default()).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{name}: {e:?}");
        // Nothing was touched.
        let db = Db::open(&dir, Options::default()).unwrap();
        assert_eq!(db.get("k").unwrap().as_deref(), Some(&b"v"[..]));
    }
    let e = Db::repair(tmp.path().join("none"), Options::default()).unwrap_err();
    assert!(matches!(e, Error::NotADatabase { .. }), "{e:?}");
}
