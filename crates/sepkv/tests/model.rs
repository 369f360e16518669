//! Model test: random operations — puts, deletes, batches, snapshots,
//! iterations forward and backward, flushes, compactions and reopens —
//! checked against a `BTreeMap`.

use proptest::prelude::*;
use sepkv::fs::MemFs;
use sepkv::{Db, Options, Preset, ReadOptions, WriteBatch, WriteOptions};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

#[derive(Debug, Clone)]
enum Op {
    Put(u16, u16),
    Delete(u16),
    Batch(Vec<(u16, Option<u16>)>),
    Get(u16),
    Snapshot,
    ReadSnapshot(usize, u16),
    Scan {
        lo: Option<u16>,
        hi: Option<u16>,
        reverse: bool,
        limit: usize,
    },
    Walk(Vec<bool>),
    Flush,
    Compact(Option<(u16, u16)>),
    Gc,
    Reopen,
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn key(k: u16) -> Vec<u8> {
    format!("key{:05}", k).into_bytes()
}

fn value(k: u16, v: u16) -> Vec<u8> {
    // Sizes from a few bytes to a few hundred so blocks hold varied counts.
    let mut s = format!("v{k}-{v}-").into_bytes();
    s.resize(3 + (v as usize * 7) % 300, b'x');
    s
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0u16..400;
    prop_oneof![
        30 => (k.clone(), any::<u16>()).prop_map(|(k, v)| Op::Put(k, v)),
        8 => k.clone().prop_map(Op::Delete),
        6 => proptest::collection::vec((k.clone(), proptest::option::of(any::<u16>())), 1..20).prop_map(Op::Batch),
        12 => k.clone().prop_map(Op::Get),
        2 => Just(Op::Snapshot),
        4 => (0usize..8, k.clone()).prop_map(|(i, k)| Op::ReadSnapshot(i, k)),
        4 => (proptest::option::of(k.clone()), proptest::option::of(k.clone()), any::<bool>(), 1usize..60)
            .prop_map(|(lo, hi, reverse, limit)| Op::Scan { lo, hi, reverse, limit }),
        3 => proptest::collection::vec(any::<bool>(), 1..40).prop_map(Op::Walk),
        2 => Just(Op::Flush),
        1 => proptest::option::of((k.clone(), k)).prop_map(Op::Compact),
        1 => Just(Op::Reopen),
        2 => Just(Op::Gc),
    ]
}

/// Every implemented layout runs the same operations (the contract suite):
/// `leveldb` keeps values inline; `wisckey` separates values of 40 bytes
/// or more into a value log with small files and eager GC; `ktstore` into
/// TrieTables small enough (64 KiB) that the trie splits. The two
/// presets whose tables hold values inline write page-aligned blocks
/// (`block_align`), the others unaligned ones.
fn opts(fs: &MemFs, (preset, wal): (Preset, bool)) -> Options {
    Options {
        wal,
        value_threshold: 40,
        vlog_file_size: 1 << 20,
        gc_chunk_size: 4 << 10,
        gc_garbage_ratio: 0.2,
        fs: Arc::new(fs.clone()),
        write_buffer_size: 64 << 10,
        target_file_size: 64 << 10,
        max_bytes_for_level_base: 128 << 10,
        block_size: 512,
        block_align: matches!(preset, Preset::LevelDb | Preset::Lwc),
        l0_compaction_trigger: 2,
        trie_table_size: 128 << 10,
        trie_roll_size: 64 << 10,
        band_entries: 32,
        hash_checkpoint_bands: 2,
        ..Options::preset(preset)
    }
}

fn run(preset: (Preset, bool), ops: Vec<Op>) -> Result<(), TestCaseError> {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let mut model: Model = BTreeMap::new();
    let mut ops = ops.into_iter();
    // One session per open: snapshots borrow the handle they came from.
    loop {
        let db = Db::open(dir, opts(&fs, preset)).unwrap();
        let mut snaps: Vec<(sepkv::Snapshot<'_>, Model)> = Vec::new();
        let mut reopen = false;
        for op in ops.by_ref() {
            match op {
                Op::Put(k, v) => {
                    db.put(key(k), value(k, v)).unwrap();
                    model.insert(key(k), value(k, v));
                }
                Op::Delete(k) => {
                    db.delete(key(k)).unwrap();
                    model.remove(&key(k));
                }
                Op::Batch(entries) => {
                    let mut b = WriteBatch::new();
                    for (k, v) in &entries {
                        match v {
                            Some(v) => {
                                b.put(key(*k), value(*k, *v)).unwrap();
                                model.insert(key(*k), value(*k, *v));
                            }
                            None => {
                                b.delete(key(*k)).unwrap();
                                model.remove(&key(*k));
                            }
                        }
                    }
                    db.write(
                        &b,
                        WriteOptions {
                            sync: entries.len() % 2 == 0,
                        },
                    )
                    .unwrap();
                }
                Op::Get(k) => {
                    prop_assert_eq!(db.get(key(k)).unwrap(), model.get(&key(k)).cloned())
                }
                Op::Snapshot => {
                    if snaps.len() >= 8 {
                        snaps.remove(0);
                    }
                    snaps.push((db.snapshot().unwrap(), model.clone()));
                }
                Op::ReadSnapshot(i, k) => {
                    if let Some((s, m)) = snaps.get(i) {
                        let ro = ReadOptions {
                            snapshot: Some(s),
                            ..Default::default()
                        };
                        prop_assert_eq!(db.get_opt(&ro, key(k)).unwrap(), m.get(&key(k)).cloned());
                        let got: Vec<_> = db
                            .iter(&ro)
                            .map(|it| {
                                let mut it = it;
                                let mut v = Vec::new();
                                it.seek_to_first();
                                while it.valid() {
                                    v.push((it.key().to_vec(), it.value().to_vec()));
                                    it.next();
                                }
                                it.status().unwrap();
                                v
                            })
                            .unwrap();
                        let want: Vec<_> = m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                        prop_assert_eq!(got, want);
                    }
                }
                Op::Scan {
                    lo,
                    hi,
                    reverse,
                    limit,
                } => {
                    let (lo, hi) = (lo.map(key), hi.map(key));
                    let range = (
                        lo.as_deref().map_or(Bound::Unbounded, Bound::Included),
                        hi.as_deref().map_or(Bound::Unbounded, Bound::Excluded),
                    );
                    if lo.is_some() && hi.is_some() && lo > hi {
                        prop_assert!(db.scan(range, reverse).is_err());
                        continue;
                    }
                    let got: Vec<_> = db
                        .scan(range, reverse)
                        .unwrap()
                        .take(limit)
                        .map(|r| r.unwrap())
                        .collect();
                    let range = model.iter().filter(|(k, _)| {
                        lo.as_ref().is_none_or(|l| *k >= l) && hi.as_ref().is_none_or(|h| *k < h)
                    });
                    let want: Vec<_> = if reverse {
                        range
                            .rev()
                            .take(limit)
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect()
                    } else {
                        range
                            .take(limit)
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect()
                    };
                    prop_assert_eq!(got, want);
                }
                Op::Walk(moves) => {
                    // Mixed next/prev from a seek in the middle.
                    let keys: Vec<_> = model.keys().cloned().collect();
                    if keys.is_empty() {
                        continue;
                    }
                    let mut it = db.iter(&ReadOptions::default()).unwrap();
                    let mut pos = keys.len() / 2;
                    it.seek(&keys[pos]);
                    for fwd in moves {
                        prop_assert!(it.valid());
                        prop_assert_eq!(it.key(), &keys[pos][..]);
                        prop_assert_eq!(it.value(), &model[&keys[pos]][..]);
                        if fwd {
                            it.next();
                            pos += 1;
                        } else if pos == 0 {
                            it.prev();
                            prop_assert!(!it.valid());
                            break;
                        } else {
                            it.prev();
                            pos -= 1;
                        }
                        if pos == keys.len() {
                            prop_assert!(!it.valid());
                            break;
                        }
                    }
                    it.status().unwrap();
                }
                Op::Flush => db.flush().unwrap(),
                Op::Compact(r) => {
                    let r = r.map(|(a, b)| (key(a.min(b)), key(a.max(b))));
                    match r {
                        Some((a, b)) => db.compact_range(a..=b).unwrap(),
                        None => db.compact_range(..).unwrap(),
                    };
                }
                Op::Gc => {
                    db.gc(None).unwrap();
                }
                Op::Reopen => {
                    reopen = true;
                    break;
                }
            }
        }
        if reopen {
            drop(snaps);
            db.close().unwrap();
            continue;
        }
        // Final full comparison, and a clean verify.
        let got: Vec<_> = db.scan(.., false).unwrap().map(|r| r.unwrap()).collect();
        let want: Vec<_> = model.into_iter().collect();
        prop_assert_eq!(got, want);
        let rep = db.verify().unwrap();
        prop_assert!(rep.faults.is_empty(), "verify faults: {:?}", rep.faults);
        return Ok(());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn matches_btreemap(ops in proptest::collection::vec(op(), 1..1500)) {
        // (preset, wal): wisckey also without the index WAL (WiscKey §3.4.2);
        // flashkey has none (its bands are its log).
        for preset in [(Preset::LevelDb, true), (Preset::WiscKey, true), (Preset::WiscKey, false), (Preset::HashKv, true), (Preset::KtStore, true), (Preset::FlashKey, false), (Preset::Lwc, true)] {
            run(preset, ops.clone())?;
        }
    }
}
