//! TrieTable (`ktstore` preset) scenarios: span reads against point reads,
//! splitting on real key shapes, GC per table, reopen and recovery, damage.

use sepkv::fs::{FaultFs, FaultKind, FaultOp, FaultRule, FileSystem, IoStats, MemFs};
use sepkv::vstore::trie::{TrieOptions, TrieStore};
use sepkv::vstore::{ValuePointer, ValueRecord, ValueStore};
use sepkv::{Db, Error, Options, Preset, ReadOptions, WriteOptions};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod common;
use common::power_cut;

fn opts(fs: Arc<dyn FileSystem>) -> Options {
    Options {
        fs,
        value_threshold: 64,
        trie_table_size: 256 << 10,
        gc_garbage_ratio: 0.0,
        // GC runs only when a test asks for it.
        space_amp_target: f64::INFINITY,
        write_buffer_size: 256 << 10,
        ..Options::preset(Preset::KtStore)
    }
}

fn key(i: usize) -> Vec<u8> {
    format!("{i:016}").into_bytes()
}

fn value(i: usize, round: usize) -> Vec<u8> {
    let mut v = format!("value-{i}-{round}-").into_bytes();
    v.resize(1000, b'a' + (round % 26) as u8);
    v
}

/// YCSB's key for record `n`: `user` and the FNV-64 hash in decimal.
fn ycsb_key(n: u64) -> Vec<u8> {
    let mut h: i64 = 0xCBF2_9CE4_8422_2325u64 as i64;
    let mut v = n as i64;
    for _ in 0..8 {
        h ^= v & 0xff;
        v >>= 8;
        h = h.wrapping_mul(1_099_511_628_211);
    }
    format!("user{}", h.wrapping_abs()).into_bytes()
}

/// `0..n` in an order shuffled by `seed` (Fisher–Yates over a 64-bit
/// LCG), the same on every run.
fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut x = seed;
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        order.swap(i, (x >> 33) as usize % (i + 1));
    }
    order
}

fn figure(db: &Db, name: &str) -> u64 {
    db.stats().unwrap().value_store_figures[name]
}

fn store(fs: &MemFs, table_size: u64) -> TrieStore {
    store_with(fs, table_size, 1.0)
}

/// [`store`] with the write-skew rule at `split_skew`.
fn store_with(fs: &MemFs, table_size: u64, split_skew: f64) -> TrieStore {
    store_rolling(fs, table_size, table_size, split_skew)
}

/// [`store_with`] whose leaves roll their tables at `roll_size`.
fn store_rolling(fs: &MemFs, table_size: u64, roll_size: u64, split_skew: f64) -> TrieStore {
    let dir = Path::new("/ts");
    fs.create_dir_all(dir).unwrap();
    TrieStore::open(
        dir,
        Arc::new(fs.clone()),
        Arc::new(IoStats::default()),
        TrieOptions {
            value_threshold: 1,
            table_size,
            roll_size,
            split_skew,
            fixed_levels: None,
            sort_sealed: true,
            prefetch_threads: 4,
            max_open_writers: 500,
            capacity: None,
            spans: Default::default(),
            scan_pipeline: 0,
            scan_direct: false,
            mapped_appends: false,
        },
    )
    .unwrap()
}

/// Appends `(key, seq, value)` one record per call, as single writes do.
fn put(s: &TrieStore, k: &[u8], seq: u64, v: &[u8]) -> ValuePointer {
    s.append(&[ValueRecord {
        key: k,
        seq,
        value: v,
    }])
    .unwrap()[0]
}

fn figures(s: &TrieStore) -> BTreeMap<&'static str, u64> {
    s.figures().into_iter().collect()
}

/// The span reads of `read_many` return exactly what one point read per
/// pointer returns: over dense runs, over spans that are mostly garbage
/// (overwritten versions between the requested records), over sparse
/// pointers, for pointers outside the valid range, and for a damaged record
/// inside a span.
#[test]
fn a_span_read_returns_exactly_what_per_pointer_reads_return() {
    let fs = MemFs::new();
    let s = store(&fs, 1 << 30);
    let mut seq = 0;
    let mut cur: BTreeMap<Vec<u8>, ValuePointer> = BTreeMap::new();
    let mut stale: Vec<(Vec<u8>, ValuePointer)> = Vec::new();
    // 2000 keys in shuffled order, then overwrite 90 % of them twice: the
    // table is mostly garbage, and the live records of a key range are
    // spread between garbage.
    let order = shuffled(2000, 7);
    for round in 0..3 {
        for &i in &order {
            if round > 0 && i % 10 == 0 {
                continue;
            }
            seq += 1;
            let k = key(i);
            let mut v = value(i, round);
            v.truncate(100 + (i * 13) % 400);
            let p = put(&s, &k, seq, &v);
            if let Some(old) = cur.insert(k.clone(), p) {
                stale.push((k, old));
            }
        }
    }
    let check = |reqs: &[(Vec<u8>, ValuePointer)]| {
        let many = s.read_many(reqs);
        let one: Result<Vec<_>, _> = reqs.iter().map(|(k, p)| s.read(k, p)).collect();
        match (many, one) {
            (Ok(a), Ok(b)) => assert_eq!(a, b),
            (Err(a), Err(b)) => {
                assert!(a.is_corruption() && b.is_corruption(), "{a} / {b}")
            }
            (a, b) => panic!("read_many {a:?} but point reads {b:?}"),
        }
    };
    let all: Vec<(Vec<u8>, ValuePointer)> = cur.iter().map(|(k, p)| (k.clone(), *p)).collect();
    // Every key range a scan window could ask for.
    for (lo, n) in [
        (0, 2000),
        (0, 32),
        (500, 100),
        (1990, 10),
        (1234, 7),
        (10, 2),
    ] {
        check(&all[lo..lo + n]);
    }
    // Only keys written once (every tenth): their records sit among the
    // garbage of 9 overwritten neighbours each.
    let sparse: Vec<_> = all
        .iter()
        .filter(|(k, _)| cur[k].offset < 600_000)
        .cloned()
        .collect();
    assert!(sparse.len() > 100);
    check(&sparse);
    // Old versions are garbage to the index but still valid records here.
    check(&stale[..300]);
    let f = figures(&s);
    assert!(f["span_reads"] > 0 && f["span_values"] > 500, "{f:?}");
    assert!(f["single_reads"] > 0, "{f:?}");
    // Pointers outside the valid range read as lost either way.
    let mut outside = all[..20].to_vec();
    outside[3].1.offset += 1 << 40;
    outside[7].1.file_id = 999;
    check(&outside);
    assert_eq!(s.read_many(&outside).unwrap()[3], None);
    // A record of another key is corruption either way.
    let mut swapped = all[100..140].to_vec();
    swapped[5].0 = b"someone-else".to_vec();
    check(&swapped);
    // Damage inside a span: corruption either way, at the record's offset.
    let victim = all[50].1;
    let path = PathBuf::from(format!("/ts/{:06}.tt", victim.file_id));
    let mut data = sepkv::fs::read_all(&fs, &path).unwrap();
    data[(victim.offset + 30) as usize] ^= 0x40;
    let mut f = fs.create(&path).unwrap();
    f.append(&data).unwrap();
    drop(f);
    let reqs = all[40..70].to_vec();
    check(&reqs);
    match s.read_many(&reqs) {
        Err(Error::Corruption { offset, file, .. }) => {
            assert_eq!((offset, file), (victim.offset, path))
        }
        other => panic!("{other:?}"),
    }
}

/// Scans through the engine return what gets return. Over tables whose
/// records are in key order (here a sequential load) the scan windows are
/// served by span reads.
#[test]
fn scans_match_gets_and_use_span_reads() {
    let db = Db::open("/db", opts(Arc::new(MemFs::new()))).unwrap();
    const N: usize = 3000;
    for i in 0..N {
        db.put(key(i), value(i, 0)).unwrap();
    }
    assert!(figure(&db, "trie_sorted_permille") > 900);
    let got: Vec<_> = db
        .scan(&key(100)..&key(2100), false)
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(got.len(), 2000);
    for (j, (k, v)) in got.iter().enumerate() {
        assert_eq!((k, v), (&key(100 + j), &value(100 + j, 0)));
    }
    assert!(figure(&db, "span_values") > 1000);
    // Overwrites in descending order leave tables out of key order; scans
    // stay exact, whichever way they read.
    for i in (0..N).rev().step_by(3) {
        db.put(key(i), value(i, 1)).unwrap();
    }
    let want = |i: usize| value(i, usize::from((N - 1 - i).is_multiple_of(3)));
    for (lo, hi, reverse) in [(0, N, false), (17, 1500, true), (2990, N, false)] {
        let got: Vec<_> = db
            .scan(&key(lo)..&key(hi), reverse)
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        let keys: Vec<usize> = if reverse {
            (lo..hi).rev().collect()
        } else {
            (lo..hi).collect()
        };
        assert_eq!(got.len(), keys.len());
        for ((k, v), i) in got.iter().zip(keys) {
            assert_eq!((k, v), (&key(i), &want(i)));
            assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
        }
    }
    assert!(db.verify().unwrap().faults.is_empty());
}

/// A scan told its length ([`sepkv::Scan::limit`]) returns what `take`
/// returns, stops exactly there, and — its whole range planned at once —
/// reads it with fewer, longer span reads than windows ramping up to the
/// prefetch depth.
#[test]
fn a_limited_scan_plans_its_whole_range_at_once() {
    let db = Db::open("/db", opts(Arc::new(MemFs::new()))).unwrap();
    const N: usize = 3000;
    for i in 0..N {
        db.put(key(i), value(i, 0)).unwrap();
    }
    // Tables in key order: batches pay even from memory.
    assert!(figure(&db, "trie_sorted_permille") > 900);
    let reads = |db: &Db| figure(db, "span_reads") + figure(db, "single_reads");
    let r0 = reads(&db);
    let ramped: Vec<_> = db
        .scan(&key(200).., false)
        .unwrap()
        .take(600)
        .map(|r| r.unwrap())
        .collect();
    let r1 = reads(&db);
    let limited: Vec<_> = db
        .scan(&key(200).., false)
        .unwrap()
        .limit(600)
        .map(|r| r.unwrap())
        .collect();
    let r2 = reads(&db);
    assert_eq!(limited, ramped);
    assert_eq!(limited.len(), 600);
    for (j, (k, v)) in limited.iter().enumerate() {
        assert_eq!((k, v), (&key(200 + j), &value(200 + j, 0)));
    }
    assert!(
        r2 - r1 < r1 - r0,
        "limited scan: {} reads, ramped: {}",
        r2 - r1,
        r1 - r0
    );
    // A limit past the end ends with the range; zero yields nothing.
    let tail = db.scan(&key(N - 5).., false).unwrap().limit(100).count();
    assert_eq!(tail, 5);
    assert_eq!(db.scan(&key(0).., true).unwrap().limit(0).count(), 0);
}

/// A range query of N entries, N well past what one window of the prefetch
/// depth or 4,096 entries holds, reads each TrieTable at most once: the
/// tables read over the whole scan (`span_tables`) are at most the tables
/// there are, and no more span or single reads than that are made. With a
/// small `scan_batch_bytes` the same scan is read in several batches, so
/// some tables are read again — the figure can tell the two apart.
#[test]
fn a_long_limited_scan_reads_each_table_at_most_once() {
    const N: usize = 10_000;
    let db = long_range(N, 128 << 20);
    let tables = figure(&db, "trie_tables");
    let (t0, r0) = table_reads(&db);
    let got: Vec<_> = db
        .scan(&key(0).., false)
        .unwrap()
        .limit(N)
        .map(|r| r.unwrap())
        .collect();
    let (t1, r1) = table_reads(&db);
    assert_eq!(got.len(), N);
    for (j, (k, v)) in got.iter().enumerate() {
        assert_eq!((k, v), (&key(j), &value(j, 0)));
    }
    assert!(
        t1 - t0 <= tables,
        "{} table reads, {tables} tables",
        t1 - t0
    );
    assert!(r1 - r0 <= tables, "{} reads, {tables} tables", r1 - r0);
    // Batches of 1 MiB: about ten of them, each table at a boundary read
    // twice.
    let small = long_range(N, 1 << 20);
    let (t0, _) = table_reads(&small);
    assert_eq!(small.scan(&key(0).., false).unwrap().limit(N).count(), N);
    let (t1, _) = table_reads(&small);
    assert!(
        t1 - t0 > figure(&small, "trie_tables"),
        "{} table reads in 1 MiB batches",
        t1 - t0
    );
}

/// A database of `N` 1,000-byte values in key order over at least 20
/// TrieTables, with `scan_batch_bytes` at `batch`.
fn long_range(n: usize, batch: u64) -> Db {
    let db = Db::open(
        "/db",
        Options {
            scan_batch_bytes: batch,
            ..opts(Arc::new(MemFs::new()))
        },
    )
    .unwrap();
    for i in 0..n {
        db.put(key(i), value(i, 0)).unwrap();
    }
    // Tables in key order: batches pay even from memory.
    assert!(figure(&db, "trie_sorted_permille") > 900);
    assert!(figure(&db, "trie_tables") >= 20);
    db
}

/// Tables read by span reads and read calls (span and single) so far.
fn table_reads(db: &Db) -> (u64, u64) {
    (
        figure(db, "span_tables"),
        figure(db, "span_reads") + figure(db, "single_reads"),
    )
}

/// A scan without a limit over a range with an end bound — forward with
/// an upper bound, backward with a lower one — reads tables as an
/// open-ended one does (the bound does not make it read ahead to the end:
/// callers stop bounded scans early): a logarithmic number of times, and
/// returns the same entries.
#[test]
fn a_long_bounded_scan_reads_tables_a_logarithmic_number_of_times() {
    const N: usize = 10_000;
    let db = long_range(N, 128 << 20);
    let tables = figure(&db, "trie_tables");
    for reverse in [false, true] {
        let (lo, hi) = (100, N - 100);
        let (t0, _) = table_reads(&db);
        let got: Vec<_> = db
            .scan(&key(lo)..&key(hi), reverse)
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        let (t1, _) = table_reads(&db);
        let want: Vec<usize> = if reverse {
            (lo..hi).rev().collect()
        } else {
            (lo..hi).collect()
        };
        assert_eq!(got.len(), want.len());
        for ((k, v), i) in got.iter().zip(want) {
            assert_eq!((k, v), (&key(i), &value(i, 0)));
        }
        let windows = ((hi - lo) as f64).log2().ceil() as u64 + 1;
        assert!(
            t1 - t0 <= tables + windows,
            "reverse {reverse}: {} table reads, {tables} tables, {windows} windows",
            t1 - t0
        );
    }
    // Stopped early, a bounded scan reads no more than an open-ended one.
    for taken in [3usize, 40, 300] {
        let v0 = figure(&db, "span_values") + figure(&db, "single_reads");
        let got = db
            .scan(&key(0)..&key(N), false)
            .unwrap()
            .take(taken)
            .count();
        let read = figure(&db, "span_values") + figure(&db, "single_reads") - v0;
        assert_eq!(got, taken);
        assert!(
            read <= 2 * taken as u64,
            "{taken} taken, {read} values read"
        );
    }
}

/// A scan over an open-ended range doubles its window past the prefetch
/// depth, so the tables it reads over `N` entries grow with `log N` (plus
/// one per table touched), not with `N / scan_prefetch_depth`; with small
/// batches the window stops growing at `scan_batch_bytes` of values and
/// the scan still returns everything.
#[test]
fn an_open_ended_scan_reads_tables_a_logarithmic_number_of_times() {
    const N: usize = 10_000;
    let db = long_range(N, 128 << 20);
    let tables = figure(&db, "trie_tables");
    for reverse in [false, true] {
        // Forward from the first key, backward from past the last: open at
        // the end the scan walks towards.
        let (t0, _) = table_reads(&db);
        let got: Vec<_> = if reverse {
            db.scan(..key(N), true)
                .unwrap()
                .map(|r| r.unwrap())
                .collect()
        } else {
            db.scan(&key(0).., false)
                .unwrap()
                .map(|r| r.unwrap())
                .collect()
        };
        let (t1, _) = table_reads(&db);
        assert_eq!(got.len(), N);
        for (j, (k, v)) in got.iter().enumerate() {
            let i = if reverse { N - 1 - j } else { j };
            assert_eq!((k, v), (&key(i), &value(i, 0)));
        }
        // Windows of 2, 4, 8, ...: at most log2(N) + 1 of them, each
        // table read once by every window that reaches it.
        let windows = (N as f64).log2().ceil() as u64 + 1;
        assert!(
            t1 - t0 <= tables + windows,
            "reverse {reverse}: {} table reads, {tables} tables, {windows} windows",
            t1 - t0
        );
    }
    // Batches of 1 MiB (about 1,000 values): the window stops there.
    let small = long_range(N, 1 << 20);
    let got: Vec<_> = small
        .scan(&key(0).., false)
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(got.len(), N);
    for (j, (k, v)) in got.iter().enumerate() {
        assert_eq!((k, v), (&key(j), &value(j, 0)));
    }
}

/// A scan the caller stops early has read values of at most about twice
/// the entries it returned: the window never runs ahead of what was
/// consumed by more than what was consumed.
#[test]
fn an_open_ended_scan_stopped_early_reads_at_most_twice_what_it_returned() {
    const N: usize = 10_000;
    let db = long_range(N, 128 << 20);
    for taken in [3usize, 40, 300, 2000] {
        let v0 = figure(&db, "span_values") + figure(&db, "single_reads");
        let got: Vec<_> = db
            .scan(&key(0).., false)
            .unwrap()
            .take(taken)
            .map(|r| r.unwrap())
            .collect();
        let v1 = figure(&db, "span_values") + figure(&db, "single_reads");
        assert_eq!(got.len(), taken);
        let read = v1 - v0;
        assert!(
            read <= 2 * taken as u64,
            "{taken} taken, {read} values read"
        );
    }
}

/// The span options are checked when the database opens.
#[test]
fn span_options_out_of_range_are_refused() {
    let bad = [
        Options {
            trie_span_density: 1.5,
            ..opts(Arc::new(MemFs::new()))
        },
        Options {
            trie_span_density_memory: -0.1,
            ..opts(Arc::new(MemFs::new()))
        },
        Options {
            trie_span_max: 100,
            ..opts(Arc::new(MemFs::new()))
        },
        Options {
            trie_span_parallel: 8 << 20,
            ..opts(Arc::new(MemFs::new()))
        },
        Options {
            scan_batch_bytes: 10,
            ..opts(Arc::new(MemFs::new()))
        },
        Options {
            trie_scan_pipeline: 1000,
            ..opts(Arc::new(MemFs::new()))
        },
        Options {
            trie_scan_pipeline: 2 << 30,
            ..opts(Arc::new(MemFs::new()))
        },
    ];
    for o in bad {
        match Db::open("/db", o) {
            Err(Error::InvalidArgument(_)) => {}
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("accepted"),
        }
    }
}

/// The trie adapts to YCSB's keys (`user` + decimal hash): the first split
/// skips the shared `user` prefix, leaves fan out on digits below it, and
/// the shape survives a reopen.
#[test]
fn trie_splits_on_ycsb_keys_and_survives_reopen() {
    let fs = MemFs::new();
    let o = Options {
        trie_table_size: 64 << 10,
        ..opts(Arc::new(fs.clone()))
    };
    let db = Db::open("/db", o.clone()).unwrap();
    for n in 0..4000u64 {
        db.put(ycsb_key(n), value(n as usize, 0)).unwrap();
    }
    let (splits, leaves, depth, nodes) = (
        figure(&db, "trie_splits"),
        figure(&db, "trie_leaves"),
        figure(&db, "trie_depth"),
        figure(&db, "trie_nodes"),
    );
    assert!(splits >= 5, "{splits} splits");
    assert!(leaves >= 20, "{leaves} leaves");
    assert!(depth >= 3, "depth {depth}");
    db.close().unwrap();
    drop(db);
    let db = Db::open("/db", o).unwrap();
    assert_eq!(figure(&db, "trie_nodes"), nodes);
    assert_eq!(figure(&db, "trie_leaves"), leaves);
    for n in (0..4000u64).step_by(37) {
        assert_eq!(db.get(ycsb_key(n)).unwrap(), Some(value(n as usize, 0)));
    }
    // New writes after the reopen go on routing through the same trie.
    for n in 4000..5000u64 {
        db.put(ycsb_key(n), value(n as usize, 1)).unwrap();
    }
    assert!(figure(&db, "trie_leaves") >= leaves);
    assert!(db.verify().unwrap().faults.is_empty());
}

/// Zero-padded decimal keys (db_bench's): the shared zeros become one
/// compressed edge and leaves fan out by ten on the digits that vary.
#[test]
fn trie_splits_on_zero_padded_decimal_keys() {
    let fs = MemFs::new();
    let s = store(&fs, 32 << 10);
    let mut x = 3u64;
    for seq in 1..=20_000u64 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let k = key((x >> 33) as usize % 100_000);
        put(&s, &k, seq, &[7u8; 200]);
    }
    let leaves = s.leaf_prefixes();
    assert!(leaves.len() >= 50, "{} leaves", leaves.len());
    for p in &leaves {
        // 16 digits, the first 11 zero for every key below 100000.
        assert!(p.len() >= 12 && p.starts_with(b"00000000000"), "{p:?}");
        assert!(p.iter().all(u8::is_ascii_digit));
    }
    let (_, _, depth) = s.trie_shape();
    assert!(depth >= 3);
    // Leaves hold disjoint key ranges, in key order.
    for w in leaves.windows(2) {
        assert!(w[0] < w[1] && !w[1].starts_with(&w[0]));
    }
}

/// A leaf rolls its active table every `roll_size` bytes and splits only
/// once it has taken `table_size` over all its tables, so it splits where
/// a leaf with one table would; the bytes it rolled survive a reopen, so
/// it still splits there afterwards. Every value reads back.
#[test]
fn leaves_roll_tables_before_they_split() {
    let (roll, table) = (32u64 << 10, 128u64 << 10);
    let (fs_roll, fs_one) = (MemFs::new(), MemFs::new());
    let mut x = 11u64;
    let mut seq = 0u64;
    let mut batch = |n: usize| -> Vec<(Vec<u8>, u64, Vec<u8>)> {
        (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                seq += 1;
                let k = key((x >> 33) as usize % 100_000);
                let v = format!("v{seq}").repeat(40).into_bytes();
                (k, seq, v)
            })
            .collect()
    };
    let mut written = Vec::new();
    let mut round = |rolling: &TrieStore, one: &TrieStore, n: usize| {
        for (k, seq, v) in batch(n) {
            let p = put(rolling, &k, seq, &v);
            put(one, &k, seq, &v);
            written.push((k, p, v));
        }
    };
    let rolling = store_rolling(&fs_roll, table, roll, 1.0);
    let one = store(&fs_one, table);
    round(&rolling, &one, 6000);
    let (fr, fo) = (figures(&rolling), figures(&one));
    assert!(fr["trie_rolls"] >= 10, "{fr:?}");
    assert_eq!(fo["trie_rolls"], 0, "{fo:?}");
    assert!(fr["trie_splits"] >= 2, "{fr:?}");
    assert_eq!(fr["trie_splits"], fo["trie_splits"]);
    assert_eq!(rolling.leaf_prefixes(), one.leaf_prefixes());
    for (_, len, _, active) in rolling.tables() {
        if active {
            assert!(len < roll + 512, "an active table of {len} bytes");
        }
    }
    // After a reopen each leaf still counts what it rolled: the two tries
    // keep splitting at the same points.
    rolling.sync().unwrap();
    one.sync().unwrap();
    drop((rolling, one));
    let rolling = store_rolling(&fs_roll, table, roll, 1.0);
    let one = store(&fs_one, table);
    // A short round: leaves split in it only on the bytes they took
    // before the reopen.
    round(&rolling, &one, 1500);
    let (fr, fo) = (figures(&rolling), figures(&one));
    assert!(fo["trie_splits"] > 0, "{fo:?}");
    assert_eq!(fr["trie_splits"], fo["trie_splits"]);
    assert_eq!(rolling.leaf_prefixes(), one.leaf_prefixes());
    for (k, p, v) in &written {
        assert_eq!(rolling.read(k, p).unwrap().as_ref(), Some(v));
    }
}

/// Adaptive splitting by write skew: once writes crowd into one leaf, it
/// splits at a fraction of the table size — and only then: with the rule
/// off, or with writes spread evenly, the same tables do not split early.
/// The shape the rule made survives a reopen.
#[test]
fn a_leaf_with_a_skewed_write_share_splits_before_its_table_is_full() {
    const TABLE: u64 = 1 << 20;
    // Phase 1 spreads writes over all of 0..100000 (the root splits into
    // ten leaves by the first varying digit); phase 2 writes only keys
    // 30000..39999, one leaf's range.
    let run = |skew: f64, hot: bool| {
        let fs = MemFs::new();
        let s = store_with(&fs, TABLE, skew);
        let mut x = 11u64;
        let mut seq = 0u64;
        let mut next = |range: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % range
        };
        for _ in 0..6000 {
            seq += 1;
            put(&s, &key(next(100_000) as usize), seq, &[1u8; 200]);
        }
        let after_spread = s.trie_shape();
        for _ in 0..2400 {
            seq += 1;
            let n = if hot {
                30_000 + next(10_000)
            } else {
                next(100_000)
            };
            put(&s, &key(n as usize), seq, &[2u8; 200]);
        }
        (fs, s, after_spread)
    };
    let skew_splits = |s: &TrieStore| figures(s)["trie_skew_splits"];
    let size_splits = |s: &TrieStore| figures(s)["trie_splits"] - skew_splits(s);
    let (fs, s, (_, leaves_spread, _)) = run(0.5, true);
    assert!(leaves_spread >= 10, "{leaves_spread} leaves after phase 1");
    assert!(skew_splits(&s) >= 1, "the hot leaf did not split");
    // Only the root's table reached the table size.
    assert_eq!(size_splits(&s), 1);
    let hot: Vec<_> = s
        .leaf_prefixes()
        .into_iter()
        .filter(|p| p.starts_with(b"000000000003"))
        .collect();
    assert!(hot.len() >= 2, "hot range leaves: {hot:?}");
    // The same writes without the rule, and evenly spread writes with it:
    // no early split.
    let (_, off, _) = run(1.0, true);
    assert_eq!(skew_splits(&off), 0);
    assert_eq!(size_splits(&off), 1);
    assert_eq!(off.leaf_prefixes().len(), leaves_spread);
    let (_, even, _) = run(0.5, false);
    assert_eq!(skew_splits(&even), 0);
    // Reopen: the split is in the trie file.
    let prefixes = s.leaf_prefixes();
    s.sync().unwrap();
    drop(s);
    let s = store_with(&fs, TABLE, 0.5);
    assert_eq!(s.leaf_prefixes(), prefixes);
}

/// Open append handles stay under the cap: a sync leaves only the most
/// recently appended active tables open; a closed table reopens at its
/// end on its next append, and every value reads back, also after a
/// reopen.
#[test]
fn open_append_handles_stay_under_the_cap() {
    let fs = MemFs::new();
    let dir = Path::new("/ts");
    fs.create_dir_all(dir).unwrap();
    let open = |cap: usize| {
        TrieStore::open(
            dir,
            Arc::new(fs.clone()),
            Arc::new(IoStats::default()),
            TrieOptions {
                value_threshold: 1,
                table_size: 64 << 10,
                roll_size: 64 << 10,
                split_skew: 1.0,
                fixed_levels: None,
                sort_sealed: true,
                prefetch_threads: 0,
                max_open_writers: cap,
                capacity: None,
                spans: Default::default(),
                scan_pipeline: 0,
                scan_direct: false,
                mapped_appends: false,
            },
        )
        .unwrap()
    };
    let s = open(4);
    let mut written: Vec<(Vec<u8>, ValuePointer, Vec<u8>)> = Vec::new();
    let mut x = 5u64;
    let mut seq = 0u64;
    let mut write = |s: &TrieStore, n: usize, round: u8| {
        let mut out = Vec::new();
        for _ in 0..n {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = key((x >> 33) as usize % 100_000);
            let v = vec![round; 200];
            seq += 1;
            let p = put(s, &k, seq, &v);
            out.push((k, p, v));
        }
        out
    };
    written.extend(write(&s, 6000, 1));
    let f = figures(&s);
    assert!(f["trie_tables_active"] >= 8, "{f:?}");
    s.sync().unwrap();
    assert_eq!(figures(&s)["trie_tables_open"], 4);
    // Appends to closed tables reopen them; between syncs the dirty ones
    // stay open, and the next sync closes the surplus again.
    written.extend(write(&s, 2000, 2));
    assert!(figures(&s)["trie_tables_open"] > 4);
    s.sync().unwrap();
    assert_eq!(figures(&s)["trie_tables_open"], 4);
    for (k, p, v) in &written {
        assert_eq!(s.read(k, p).unwrap().as_ref(), Some(v));
    }
    drop(s);
    let s = open(4);
    assert_eq!(figures(&s)["trie_tables_open"], 4);
    written.extend(write(&s, 500, 3));
    s.sync().unwrap();
    assert_eq!(figures(&s)["trie_tables_open"], 4);
    for (k, p, v) in &written {
        assert_eq!(s.read(k, p).unwrap().as_ref(), Some(v));
    }
}

/// GC collects the table with the most garbage, rewrites its live values
/// in key order (so scans over it read dense spans), frees space, and
/// keeps what a snapshot older than the collection still reads.
#[test]
fn gc_rewrites_tables_in_key_order_and_respects_snapshots() {
    let fs = MemFs::new();
    let db = Db::open("/db", opts(Arc::new(fs.clone()))).unwrap();
    const N: usize = 2000;
    let order = shuffled(N, 11);
    for &i in &order {
        db.put(key(i), value(i, 0)).unwrap();
    }
    // In an SSTable below level 0, so that the range compaction below
    // merges the overwrites with it.
    db.flush().unwrap();
    for &i in order.iter().filter(|&&i| i % 2 == 0) {
        db.put(key(i), value(i, 1)).unwrap();
    }
    assert_eq!(db.stats().unwrap().value_store.garbage_bytes, 0);
    // Compaction drops the old versions and reports them as garbage.
    db.compact_range(..).unwrap();
    let noted = db.stats().unwrap().value_store;
    assert!(noted.garbage_bytes > 500_000, "{noted:?}");

    let snap = db.snapshot().unwrap();
    let rep = db.gc(Some(0.0)).unwrap();
    assert!(rep.steps > 0 && rep.bytes_rewritten > 0, "{rep:?}");
    // Retired, not freed: the snapshot predates the relocations.
    assert_eq!(figure(&db, "gc_bytes_freed"), 0);
    assert!(figure(&db, "trie_tables_retired") > 0);
    let ro = ReadOptions {
        snapshot: Some(&snap),
        ..Default::default()
    };
    for i in (0..N).step_by(7) {
        let want = value(i, usize::from(i.is_multiple_of(2)));
        assert_eq!(db.get_opt(&ro, key(i)).unwrap(), Some(want.clone()));
        assert_eq!(db.get(key(i)).unwrap(), Some(want));
    }
    drop(snap);
    // Known garbage is gone: a full pass frees the retired tables and
    // sweeps (and sorts) the rest.
    let rep2 = db.gc(None).unwrap();
    assert!(figure(&db, "gc_bytes_freed") > 0, "{rep2:?}");
    let after = db.stats().unwrap().value_store;
    assert!(after.garbage_bytes < noted.garbage_bytes / 4, "{after:?}");
    assert!(
        after.file_bytes < noted.file_bytes,
        "{noted:?} -> {after:?}"
    );
    // A scan over sorted tables reads most values through spans.
    let spans0 = figure(&db, "span_values");
    let singles0 = figure(&db, "single_reads");
    let got: Vec<_> = db.scan(.., false).unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(got.len(), N);
    for (i, (k, v)) in got.iter().enumerate() {
        assert_eq!(
            (k, v),
            (&key(i), &value(i, usize::from(i.is_multiple_of(2))))
        );
    }
    let spans = figure(&db, "span_values") - spans0;
    let singles = figure(&db, "single_reads") - singles0;
    assert!(
        spans > 4 * singles,
        "span values {spans}, single reads {singles}"
    );
    assert!(db.verify().unwrap().faults.is_empty());
}

/// With `trie_sort_sealed`, background GC rewrites every sealed table
/// written in random key order into one in key order — with no garbage to
/// call for it — and scans then read through spans; with it off, sealed
/// tables stay as written.
#[test]
fn background_gc_sorts_sealed_tables() {
    const N: usize = 1500;
    let order = shuffled(N, 5);
    for sort in [true, false] {
        let fs = MemFs::new();
        let o = Options {
            // Background GC on; the data holds no garbage.
            gc_garbage_ratio: 0.5,
            trie_table_size: 64 << 10,
            trie_sort_sealed: sort,
            ..opts(Arc::new(fs.clone()))
        };
        let db = Db::open("/db", o.clone()).unwrap();
        for &i in &order {
            db.put(key(i), value(i, 0)).unwrap();
        }
        db.wait_idle().unwrap();
        assert!(figure(&db, "trie_splits") > 3);
        if !sort {
            assert!(figure(&db, "trie_tables_sealed_unsorted") > 3);
            assert_eq!(figure(&db, "gc_runs"), 0);
            continue;
        }
        // The background thread works through the sealed tables; wait
        // for it (a bound on a hang, not a timing assertion).
        let t = std::time::Instant::now();
        while figure(&db, "trie_tables_sealed_unsorted") > 0 {
            assert!(t.elapsed().as_secs() < 120, "sealed tables never sorted");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(figure(&db, "gc_runs") > 3);
        assert_eq!(db.stats().unwrap().value_store.garbage_bytes, 0);
        db.close().unwrap();
        // The sorted tables are known sorted after a reopen.
        let db = Db::open("/db", o).unwrap();
        assert_eq!(figure(&db, "trie_tables_sealed_unsorted"), 0);
        let (spans0, singles0) = (figure(&db, "span_values"), figure(&db, "single_reads"));
        let got: Vec<_> = db.scan(.., false).unwrap().map(|r| r.unwrap()).collect();
        assert_eq!(got.len(), N);
        for (i, (k, v)) in got.iter().enumerate() {
            assert_eq!((k, v), (&key(i), &value(i, 0)));
        }
        let spans = figure(&db, "span_values") - spans0;
        let singles = figure(&db, "single_reads") - singles0;
        assert!(
            spans > 2 * singles,
            "span values {spans}, single reads {singles}"
        );
        assert!(db.verify().unwrap().faults.is_empty());
    }
}

#[test]
fn gc_never_loses_a_racing_overwrite() {
    let db = Arc::new(Db::open("/db", opts(Arc::new(MemFs::new()))).unwrap());
    const N: usize = 400;
    for i in 0..N {
        db.put(key(i), value(i, 0)).unwrap();
    }
    let gc = common::GcLoop::start(&db);
    let mut latest = vec![0usize; N];
    for round in 1..40 {
        for i in (0..N).filter(|i| (i + round) % 3 == 0) {
            db.put(key(i), value(i, round)).unwrap();
            latest[i] = round;
        }
    }
    let steps = gc.stop();
    assert!(steps > 0, "GC never ran");
    db.gc(None).unwrap();
    for (i, &round) in latest.iter().enumerate() {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i, round)), "key {i}");
    }
    assert!(figure(&db, "gc_bytes_rewritten") > 0);
    assert!(db.verify().unwrap().faults.is_empty());
}

/// Crashes a GC cycle at its k-th file-system operation, for every k until
/// a cycle completes: nothing synced before GC is lost, and a later GC
/// completes.
#[test]
fn crash_at_every_step_of_a_gc_cycle() {
    const N: usize = 150;
    let mut k = 0u64;
    loop {
        let fs = FaultFs::new();
        let dir = Path::new("/gcdb");
        let o = Options {
            trie_table_size: 64 << 10,
            ..opts(Arc::new(fs.clone()))
        };
        let db = Db::open(dir, o.clone()).unwrap();
        for round in 0..2 {
            for i in 0..N {
                if round == 0 || i % 2 == 0 {
                    db.put(key(i), value(i, round)).unwrap();
                }
            }
        }
        db.write(&sepkv::WriteBatch::new(), WriteOptions { sync: true })
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
        power_cut(&fs, db);
        let db = Db::open(dir, o.clone())
            .unwrap_or_else(|e| panic!("reopen after crash at GC op {k}: {e}"));
        let want = |i: usize| value(i, usize::from(i.is_multiple_of(2)));
        for i in 0..N {
            assert_eq!(
                db.get(key(i)).unwrap(),
                Some(want(i)),
                "key {i} after a crash at GC op {k}"
            );
        }
        db.gc(None).unwrap();
        for i in (0..N).step_by(7) {
            assert_eq!(db.get(key(i)).unwrap(), Some(want(i)));
        }
        let rep = db.verify().unwrap();
        assert!(rep.faults.is_empty(), "op {k}: {:?}", rep.faults);
        if done {
            break;
        }
        k += 1;
        assert!(k < 10_000, "GC cycle never completed");
    }
    assert!(k > 5, "a GC cycle takes several file-system operations");
}

/// After a crash, writes synced before it survive, unsynced ones may not,
/// and the trie and the tables go on working; a torn table tail is cut
/// off and the table closed for appends.
#[test]
fn recovery_keeps_synced_writes_and_cuts_torn_tails() {
    let fs = FaultFs::new();
    let dir = Path::new("/rdb");
    let o = Options {
        trie_table_size: 64 << 10,
        ..opts(Arc::new(fs.clone()))
    };
    let db = Db::open(dir, o.clone()).unwrap();
    for i in 0..500 {
        // The last write is synced, and with it every earlier one.
        let mut b = sepkv::WriteBatch::new();
        b.put(key(i), value(i, 0)).unwrap();
        db.write(&b, WriteOptions { sync: i == 499 }).unwrap();
    }
    for i in 500..700 {
        db.put(key(i), value(i, 0)).unwrap();
    }
    power_cut(&fs, db);
    let db = Db::open(dir, o.clone()).unwrap();
    for i in 0..500 {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 0)), "key {i}");
    }
    // Whatever survived of the rest is a prefix.
    let survived = (500..700)
        .take_while(|&i| db.get(key(i)).unwrap().is_some())
        .count();
    for i in 500 + survived..700 {
        assert_eq!(db.get(key(i)).unwrap(), None);
    }
    for i in 700..900 {
        db.put(key(i), value(i, 1)).unwrap();
    }
    db.close().unwrap();
    drop(db);
    // A torn append: garbage after the last record of every table.
    let tables: Vec<PathBuf> = fs
        .list(dir)
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".tt"))
        .map(|n| dir.join(n))
        .collect();
    assert!(tables.len() > 3);
    for t in &tables {
        let mut f = fs.open_append(t).unwrap();
        f.append(&[0x5a; 37]).unwrap();
        f.sync().unwrap();
    }
    let db = Db::open(dir, o).unwrap();
    assert_eq!(figure(&db, "trie_tables_active"), 0);
    for i in (0..500).chain(700..900) {
        let round = if i < 700 { 0 } else { 1 };
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i, round)));
    }
    for i in 900..1000 {
        db.put(key(i), value(i, 2)).unwrap();
    }
    assert!(figure(&db, "trie_tables_active") > 0);
    assert_eq!(db.get(key(950)).unwrap(), Some(value(950, 2)));
    let rep = db.verify().unwrap();
    assert!(rep.faults.is_empty(), "{:?}", rep.faults);
}

/// Damage is corruption with file and offset: in a TrieTable record (for
/// get, scan and verify) and in the trie file (open fails).
#[test]
fn damage_is_reported_with_file_and_offset() {
    let fs = MemFs::new();
    let dir = Path::new("/ddb");
    let o = opts(Arc::new(fs.clone()));
    let db = Db::open(dir, o.clone()).unwrap();
    for i in 0..300 {
        db.put(key(i), value(i, 0)).unwrap();
    }
    db.close().unwrap();
    drop(db);
    let tables: Vec<PathBuf> = fs
        .list(dir)
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".tt"))
        .map(|n| dir.join(n))
        .collect();
    let victim = &tables[0];
    let mut data = sepkv::fs::read_all(&fs, victim).unwrap();
    // The first record: header 22 bytes, key 16, value 1000.
    data[22 + 16 + 500] ^= 1;
    let mut f = fs.create(victim).unwrap();
    f.append(&data).unwrap();
    drop(f);
    let db = Db::open(dir, o.clone()).unwrap();
    let damaged_key = (0..300)
        .find(|&i| db.get(key(i)).is_err())
        .expect("no key reads the damaged record");
    match db.get(key(damaged_key)) {
        Err(Error::Corruption { file, offset, .. }) => {
            assert_eq!((&file, offset), (victim, 0));
        }
        other => panic!("{other:?}"),
    }
    let scan: Result<Vec<_>, _> = db.scan(.., false).unwrap().collect();
    assert!(scan.unwrap_err().is_corruption());
    let rep = db.verify().unwrap();
    assert!(
        rep.faults
            .iter()
            .any(|e| matches!(e, Error::Corruption { file, offset: 0, .. } if file == victim)),
        "{:?}",
        rep.faults
    );
    db.close().unwrap();
    drop(db);
    // The trie file.
    let trie = dir.join("TRIE");
    let mut data = sepkv::fs::read_all(&fs, &trie).unwrap();
    assert!(data.len() > 20);
    data[14] ^= 0x10;
    data.extend_from_slice(&data.clone()); // valid-looking records follow
    let mut f = fs.create(&trie).unwrap();
    f.append(&data).unwrap();
    drop(f);
    match Db::open(dir, o) {
        Err(Error::Corruption { file, .. }) => assert_eq!(file, trie),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a damaged trie file was accepted"),
    }
}

/// `value_capacity` bounds the tables: a write that would pass it runs GC
/// first; only live data is refused; deleting data makes room again.
#[test]
fn capacity_runs_gc_first_and_refuses_only_live_data() {
    let fs = MemFs::new();
    let o = Options {
        value_capacity: Some(2 << 20),
        ..opts(Arc::new(fs.clone()))
    };
    let db = Db::open("/db", o.clone()).unwrap();
    for round in 0..5000 {
        db.put(key(1), value(1, round)).unwrap();
    }
    let s = db.stats().unwrap();
    assert!(s.write_gc_steps >= 1);
    // The tables, one GC copy past the capacity, and the trie file.
    assert!(s.value_store.file_bytes <= (2 << 20) + (300 << 10), "{s:?}");
    assert_eq!(db.get(key(1)).unwrap(), Some(value(1, 4999)));
    let mut n = 2;
    let err = loop {
        match db.put(key(n), value(n, 0)) {
            Ok(()) => n += 1,
            Err(e) => break e,
        }
        assert!(n < 10_000, "the tables never filled");
    };
    assert!(
        matches!(&err, Error::ValueStoreFull(m) if m.contains("value_capacity")),
        "{err:?}"
    );
    assert!((1700..2100).contains(&n), "{n} keys");
    for i in (2..n).step_by(2) {
        db.delete(key(i)).unwrap();
    }
    for i in 0..(n - 2) / 4 {
        db.put(key(20_000 + i), value(i, 1)).unwrap();
    }
    assert!(db.verify().unwrap().faults.is_empty());
    db.close().unwrap();
    drop(db);
    let db = Db::open("/db", o).unwrap();
    for i in 2..n {
        let want = (i % 2 == 1).then(|| value(i, 0));
        assert_eq!(db.get(key(i)).unwrap(), want, "key {i}");
    }
    for i in 0..(n - 2) / 4 {
        assert_eq!(db.get(key(20_000 + i)).unwrap(), Some(value(i, 1)));
    }
}

/// A sync with many leaves' tables written syncs them with one
/// file-system sync, and what it made durable reads back after a power
/// loss.
#[test]
fn many_written_tables_sync_in_one_call() {
    let fs = FaultFs::new();
    let dir = Path::new("/ts");
    fs.create_dir_all(dir).unwrap();
    let topts = TrieOptions {
        value_threshold: 1,
        table_size: 64 << 10,
        roll_size: 64 << 10,
        split_skew: 1.0,
        fixed_levels: None,
        sort_sealed: false,
        prefetch_threads: 4,
        max_open_writers: 500,
        capacity: None,
        spans: Default::default(),
        scan_pipeline: 0,
        scan_direct: false,
        mapped_appends: false,
    };
    let open = || {
        TrieStore::open(
            dir,
            Arc::new(fs.clone()),
            Arc::new(IoStats::default()),
            topts.clone(),
        )
        .unwrap()
    };
    let s = open();
    let mut ptrs = Vec::new();
    for (seq, i) in shuffled(4000, 7).into_iter().enumerate() {
        ptrs.push((i, put(&s, &key(i), seq as u64 + 1, &value(i, 0))));
    }
    let leaves = figures(&s)["trie_leaves"];
    assert!(leaves >= 16, "{leaves} leaves");
    // From here every per-table sync fails: only one file-system sync can
    // make the tables durable.
    fs.add_rule(FaultRule {
        path_contains: Some(".tt".into()),
        ..FaultRule::new(FaultOp::Sync, FaultKind::Eio)
    });
    // One value into every leaf's table, then a sync.
    for (seq, i) in (0..4000).step_by(40).enumerate() {
        ptrs.push((i, put(&s, &key(i), 10_000 + seq as u64, &value(i, 1))));
    }
    s.sync().unwrap();
    drop(s);
    fs.crash();
    fs.clear_rules();
    let s = open();
    for (i, p) in ptrs.iter().rev().take(100) {
        assert_eq!(s.read(&key(*i), p).unwrap(), Some(value(*i, 1)));
    }
}

/// On the operating system's files (the index's SSTables read through
/// their mappings, `mmap_reads`): gets and scans return every value; after
/// damage to the TrieTables, every read returns the right value or
/// `Corruption`, never a wrong value.
#[test]
fn tables_on_disk_read_back_and_report_damage() {
    let tmp = tempfile::tempdir().unwrap();
    let o = Options {
        fs: Arc::new(sepkv::fs::StdFs),
        ..opts(Arc::new(MemFs::new()))
    };
    assert!(o.mmap_reads);
    let db = Db::open(tmp.path(), o.clone()).unwrap();
    let n = 2_000;
    for i in 0..n {
        db.put(key(i), value(i, 0)).unwrap();
    }
    db.flush().unwrap();
    for i in shuffled(n, 3) {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 0)), "key {i}");
    }
    // A scan reads its values in spans of the tables.
    let got: Vec<(Vec<u8>, Vec<u8>)> = db.scan(.., false).unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(got.len(), n);
    for (i, (k, v)) in got.iter().enumerate() {
        assert_eq!((k, v), (&key(i), &value(i, 0)));
    }
    db.close().unwrap();

    // Damage a byte in the middle of every table (in place: a file of an
    // open database is never truncated).
    let tables: Vec<PathBuf> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".tt"))
        .collect();
    assert!(!tables.is_empty());
    for t in &tables {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(t)
            .unwrap();
        let len = f.metadata().unwrap().len();
        let mut b = [0u8];
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut b, len / 2).unwrap();
        b[0] ^= 0x20;
        std::os::unix::fs::FileExt::write_all_at(&f, &b, len / 2).unwrap();
    }
    let db = Db::open(tmp.path(), o).unwrap();
    let mut damaged = 0;
    for i in 0..n {
        match db.get(key(i)) {
            Ok(v) => assert_eq!(v, Some(value(i, 0)), "key {i}"),
            Err(Error::Corruption { .. }) => damaged += 1,
            Err(e) => panic!("key {i}: {e}"),
        }
    }
    assert!(damaged > 0, "the damage is found");
    for r in db.scan(.., false).unwrap() {
        match r {
            Ok((k, v)) => {
                let i: usize = std::str::from_utf8(&k).unwrap().parse().unwrap();
                assert_eq!(v, value(i, 0));
            }
            Err(Error::Corruption { .. }) => break,
            Err(e) => panic!("{e}"),
        }
    }
}

/// [`opts`] with a trie of `levels` fixed levels (KT-Store §3.5) and small
/// tables, so that a load splits an adaptive trie many times over.
fn fixed_opts(fs: Arc<dyn FileSystem>, levels: u8) -> Options {
    Options {
        trie_fixed_levels: Some(levels),
        trie_split_skew: 1.0,
        trie_table_size: 64 << 10,
        trie_roll_size: 64 << 10,
        trie_sort_sealed: false,
        ..opts(fs)
    }
}

/// Every entry of `db` in key order, by a full scan.
fn scan_all(db: &Db) -> Vec<(Vec<u8>, Vec<u8>)> {
    db.scan(..&[0xffu8; 32][..], false)
        .unwrap()
        .map(|r| r.unwrap())
        .collect()
}

/// With fixed levels, YCSB keys spread over leaves below the shared
/// `user`: the trie fans out only where keys differ, every leaf sits at
/// the fixed depth, and a load that would split an adaptive trie dozens of
/// times only rolls tables in their leaves. Values and range scans across
/// leaves are exact, and the shape survives a reopen.
#[test]
fn fixed_levels_spread_ycsb_keys_and_never_split_by_size() {
    let fs = MemFs::new();
    let o = fixed_opts(Arc::new(fs.clone()), 3);
    let db = Db::open("/db", o.clone()).unwrap();
    let mut model = BTreeMap::new();
    for n in 0..3000u64 {
        model.insert(ycsb_key(n), value(n as usize, 0));
        db.put(ycsb_key(n), value(n as usize, 0)).unwrap();
    }
    let (splits, leaves, nodes) = (
        figure(&db, "trie_splits"),
        figure(&db, "trie_leaves"),
        figure(&db, "trie_nodes"),
    );
    // 3 MB in 64 KiB tables: an adaptive trie would split about 45 times
    // and its leaves go on splitting; here the splits only made the fixed
    // levels (one per internal node above the leaves).
    assert!(leaves >= 50, "{leaves} leaves");
    assert!(
        splits < nodes - leaves + 1,
        "{splits} splits, {nodes} nodes"
    );
    // A load of three times as many bytes (overwrites and new keys) adds no
    // split: the leaves are at the fixed depth and only roll.
    for n in 0..9000u64 {
        let k = ycsb_key(n % 3000 + (n % 2) * 3000);
        model.insert(k.clone(), value(n as usize, 1));
        db.put(k, value(n as usize, 1)).unwrap();
    }
    assert_eq!(figure(&db, "trie_splits"), splits);
    // 12 MB over about a hundred leaves: their tables roll in place.
    assert!(
        figure(&db, "trie_rolls") >= 20,
        "{} rolls",
        figure(&db, "trie_rolls")
    );
    assert!(figure(&db, "trie_depth") >= 4);
    // Scans across many leaves, forward and backward, equal the model.
    assert_eq!(scan_all(&db), model.into_iter().collect::<Vec<_>>());
    let (lo, hi) = (b"user3".to_vec(), b"user6".to_vec());
    let want: Vec<_> = scan_all(&db)
        .into_iter()
        .filter(|(k, _)| *k >= lo && *k < hi)
        .rev()
        .collect();
    let got: Vec<_> = db
        .scan(&lo[..]..&hi[..], true)
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert!(want.len() > 500);
    assert_eq!(got, want);
    let nodes = figure(&db, "trie_nodes");
    let leaves = figure(&db, "trie_leaves");
    let before = scan_all(&db);
    db.close().unwrap();
    drop(db);
    let db = Db::open("/db", o).unwrap();
    assert_eq!(figure(&db, "trie_nodes"), nodes);
    assert_eq!(figure(&db, "trie_leaves"), leaves);
    assert_eq!(scan_all(&db), before);
    for n in 6000..7000u64 {
        db.put(ycsb_key(n), value(n as usize, 2)).unwrap();
    }
    assert_eq!(figure(&db, "trie_splits"), 0, "a split after the reopen");
    assert!(db.verify().unwrap().faults.is_empty());
}

/// The store's view: with one fixed level, random binary keys fan out by
/// their first byte at the root and every leaf is one byte long; a leaf above the fixed level never holds two
/// keys, so no sealed table spans more than one leaf's range.
#[test]
fn fixed_levels_spread_binary_keys_by_their_first_byte() {
    let fs = MemFs::new();
    let dir = Path::new("/ts");
    fs.create_dir_all(dir).unwrap();
    let open = || {
        TrieStore::open(
            dir,
            Arc::new(fs.clone()),
            Arc::new(IoStats::default()),
            TrieOptions {
                value_threshold: 1,
                table_size: 64 << 10,
                roll_size: 64 << 10,
                split_skew: 1.0,
                fixed_levels: Some(1),
                sort_sealed: false,
                prefetch_threads: 0,
                max_open_writers: 64,
                capacity: None,
                spans: Default::default(),
                scan_pipeline: 0,
                scan_direct: false,
                mapped_appends: false,
            },
        )
        .unwrap()
    };
    let s = open();
    let mut x = 7u64;
    let mut written = Vec::new();
    for seq in 1..=6000u64 {
        let mut k = Vec::with_capacity(16);
        for _ in 0..2 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            k.extend_from_slice(&x.to_be_bytes());
        }
        // Batches of 8, as group commit hands them over.
        written.push((k, seq, vec![(seq % 251) as u8; 300]));
        if written.len() % 8 == 0 {
            let batch = &written[written.len() - 8..];
            let recs: Vec<ValueRecord<'_>> = batch
                .iter()
                .map(|(k, seq, v)| ValueRecord {
                    key: k,
                    seq: *seq,
                    value: v,
                })
                .collect();
            let ptrs = s.append(&recs).unwrap();
            for ((k, _, v), p) in batch.iter().zip(ptrs) {
                assert_eq!(s.read(k, &p).unwrap().as_ref(), Some(v));
            }
        }
    }
    let f = figures(&s);
    assert_eq!(f["trie_splits"], 1, "{f:?}");
    let leaves = s.leaf_prefixes();
    assert!(leaves.len() >= 250, "{} leaves", leaves.len());
    assert!(leaves.iter().all(|p| p.len() == 1), "{leaves:?}");
    // The root's table, sealed at the split, holds one key's value.
    let (_, len, _, active) = s.tables()[0];
    assert!(!active && len < 400, "the root's table holds {len} bytes");
    s.sync().unwrap();
    drop(s);
    let s = open();
    assert_eq!(s.leaf_prefixes(), leaves);
}

/// A fixed trie survives a power cut: its shape and every synced value
/// come back, and writes after the reopen make no split.
#[test]
fn fixed_levels_survive_a_power_cut() {
    let fs = FaultFs::new();
    let o = fixed_opts(Arc::new(fs.clone()), 3);
    let db = Db::open("/db", o.clone()).unwrap();
    for n in 0..2000u64 {
        db.put(ycsb_key(n), value(n as usize, 0)).unwrap();
    }
    db.write(&sepkv::WriteBatch::new(), WriteOptions { sync: true })
        .unwrap();
    let leaves = figure(&db, "trie_leaves");
    // Unsynced writes may be lost; synced ones may not.
    for n in 2000..2100u64 {
        db.put(ycsb_key(n), value(n as usize, 0)).unwrap();
    }
    power_cut(&fs, db);
    let db = Db::open("/db", o).unwrap();
    assert!(figure(&db, "trie_leaves") >= leaves);
    for n in 0..2000u64 {
        assert_eq!(db.get(ycsb_key(n)).unwrap(), Some(value(n as usize, 0)));
    }
    for n in 2100..2600u64 {
        db.put(ycsb_key(n), value(n as usize, 1)).unwrap();
    }
    assert_eq!(figure(&db, "trie_splits"), 0);
    assert!(db.verify().unwrap().faults.is_empty());
}

/// [`SlowDisk`] over [`MemFs`]: TrieTable reads take `delay` each, as a
/// device's would, so value reads count as reaching the device and limited
/// scans read through the pipeline on the prefetch pool. Counts the
/// TrieTable reads made.
fn slow_reads(delay_us: u64) -> SlowDisk {
    SlowDisk {
        inner: Arc::new(MemFs::new()),
        ..slow_disk(delay_us, false)
    }
}

/// A `ktstore` database over `fs` with a scan pipeline of `budget` bytes,
/// small tables (many spans per scan) and the prefetch pool's threads.
fn pipelined(fs: &SlowDisk, budget: u64) -> Db {
    Db::open(
        "/db",
        Options {
            trie_scan_pipeline: budget,
            trie_span_parallel: 64 << 10,
            prefetch_threads: 8,
            ..opts(Arc::new(fs.clone()))
        },
    )
    .unwrap()
}

/// Point reads until the store's read-time estimate says reads reach the
/// device (the slow file system's delay), so scans batch and pipeline.
fn warm_latency(db: &Db, n: usize) {
    for i in 0..64 {
        let _ = db.get(key(i % n)).unwrap();
    }
}

/// Pipelined limited scans return exactly what a `BTreeMap` model returns
/// — forward and reverse, bounded and open, limits inside and past the
/// range — over tables written in random order and tables GC sorted,
/// while a writer rewrites keys (with the values the model holds, so the
/// expected result does not depend on timing) and GC runs, and the reads
/// go through the pipeline within its budget.
#[test]
fn pipelined_scans_match_a_btreemap_model() {
    let fs = slow_reads(30);
    let budget = 1 << 20;
    let db = Arc::new(pipelined(&fs, budget));
    const N: usize = 4000;
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for (round, order) in [shuffled(N, 1), shuffled(N, 2)].into_iter().enumerate() {
        for i in order.into_iter().filter(|i| round == 0 || i % 3 == 0) {
            db.put(key(i), value(i, round)).unwrap();
            model.insert(key(i), value(i, round));
        }
    }
    for i in (0..N).step_by(7) {
        db.delete(key(i)).unwrap();
        model.remove(&key(i));
    }
    warm_latency(&db, N);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (db, stop, model) = (db.clone(), stop.clone(), model.clone());
        std::thread::spawn(move || {
            let mut rewrites = 0u64;
            'outer: loop {
                for (k, v) in model.iter().step_by(5) {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break 'outer;
                    }
                    db.put(k, v).unwrap();
                    rewrites += 1;
                }
            }
            rewrites
        })
    };
    let gc = common::GcLoop::start(&db);
    let cases: [(usize, usize, bool, usize); 6] = [
        (0, N, false, N),
        (100, 3500, false, 2000),
        (0, N, true, 3000),
        (250, 1900, true, 10_000),
        (3990, N, false, 100),
        (17, 18, false, 5),
    ];
    for &(lo, hi, reverse, limit) in cases.iter().cycle().take(18) {
        let got: Vec<_> = db
            .scan(&key(lo)..&key(hi), reverse)
            .unwrap()
            .limit(limit)
            .map(|r| r.unwrap())
            .collect();
        let range = model.range(key(lo)..key(hi));
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
        assert_eq!(
            got.len(),
            want.len(),
            "{lo}..{hi} reverse {reverse} limit {limit}"
        );
        assert!(got == want, "{lo}..{hi} reverse {reverse} limit {limit}");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rewrites = writer.join().unwrap();
    let steps = gc.stop();
    assert!(
        rewrites > 0 && steps > 0,
        "{rewrites} rewrites, {steps} GC steps"
    );
    let peak = figure(&db, "scan_pipeline_peak_bytes");
    assert!(peak > 0, "the pipeline never ran");
    assert!(peak <= budget, "held {peak} bytes, budget {budget}");
    assert!(figure(&db, "span_reads") > 0);
}

/// The pipeline runs ahead of a slow caller until it holds its budget,
/// and never more: spans being read and values not yet returned stay
/// within `trie_scan_pipeline`.
#[test]
fn the_pipeline_holds_no_more_than_its_budget() {
    let fs = slow_reads(30);
    let budget = 1 << 20;
    let db = pipelined(&fs, budget);
    const N: usize = 5000;
    for i in 0..N {
        db.put(key(i), value(i, 0)).unwrap();
    }
    warm_latency(&db, N);
    let mut scan = db.scan(&key(0).., false).unwrap().limit(N);
    for j in 0..N {
        let (k, v) = scan.next().unwrap().unwrap();
        assert_eq!((k, v), (key(j), value(j, 0)));
        if j < 50 {
            // A slow caller: the readers fill the budget meanwhile.
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
    assert!(scan.next().is_none());
    let peak = figure(&db, "scan_pipeline_peak_bytes");
    assert!(peak <= budget, "held {peak} bytes, budget {budget}");
    assert!(
        peak >= budget / 2,
        "held at most {peak} bytes: no read ahead"
    );
}

/// A scan dropped half-way stops its pipeline: when the drop returns no
/// read of it is running, and no TrieTable read happens afterwards.
#[test]
fn a_scan_dropped_half_way_leaves_no_reader_running() {
    let fs = slow_reads(2000);
    let db = pipelined(&fs, 4 << 20);
    const N: usize = 6000;
    for i in 0..N {
        db.put(key(i), value(i, 0)).unwrap();
    }
    warm_latency(&db, N);
    let reads = || fs.reads.load(std::sync::atomic::Ordering::SeqCst);
    let mut running_at_drop = 0;
    for taken in [1, 300, 2500] {
        let mut scan = db.scan(&key(0).., false).unwrap().limit(N);
        for j in 0..taken {
            assert_eq!(scan.next().unwrap().unwrap().0, key(j));
        }
        running_at_drop += figure(&db, "scan_pipeline_reads_running");
        drop(scan);
        assert_eq!(figure(&db, "scan_pipeline_reads_running"), 0);
        let after_drop = reads();
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(reads(), after_drop, "read after the drop ({taken} taken)");
    }
    assert!(
        running_at_drop > 0,
        "no scan was dropped with reads running"
    );
}

/// A file system over real files whose TrieTable reads take `delay` each
/// (so value reads count as reaching the device and limited scans read
/// through the pipeline), with direct reads where the files allow them.
/// `fail_direct`: its direct handles open but every read fails, as on a
/// file system that takes `O_DIRECT` at open and refuses the reads.
#[derive(Clone)]
struct SlowDisk {
    inner: Arc<dyn FileSystem>,
    delay: std::time::Duration,
    fail_direct: bool,
    /// True for the direct-read view made by `with_direct_reads`.
    direct: bool,
    reads: Arc<std::sync::atomic::AtomicU64>,
}

struct SlowDiskFile {
    inner: Box<dyn sepkv::fs::RandomAccessFile>,
    delay: Option<std::time::Duration>,
    fail: bool,
    reads: Arc<std::sync::atomic::AtomicU64>,
}

impl sepkv::fs::RandomAccessFile for SlowDiskFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.fail {
            return Err(std::io::Error::from_raw_os_error(22));
        }
        if let Some(d) = self.delay {
            self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            std::thread::sleep(d);
        }
        self.inner.read_at(offset, buf)
    }
    fn len(&self) -> std::io::Result<u64> {
        self.inner.len()
    }
}

impl FileSystem for SlowDisk {
    fn create(&self, path: &Path) -> std::io::Result<Box<dyn sepkv::fs::WritableFile>> {
        self.inner.create(path)
    }
    fn open_append(&self, path: &Path) -> std::io::Result<Box<dyn sepkv::fs::WritableFile>> {
        self.inner.open_append(path)
    }
    fn reuse(&self, path: &Path) -> std::io::Result<Box<dyn sepkv::fs::WritableFile>> {
        self.inner.reuse(path)
    }
    fn open_read(&self, path: &Path) -> std::io::Result<Box<dyn sepkv::fs::RandomAccessFile>> {
        let table = path.extension().is_some_and(|e| e == "tt");
        Ok(Box::new(SlowDiskFile {
            inner: self.inner.open_read(path)?,
            delay: table.then_some(self.delay),
            fail: self.direct && self.fail_direct,
            reads: self.reads.clone(),
        }))
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    fn is_dir(&self, path: &Path) -> bool {
        self.inner.is_dir(path)
    }
    fn list(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        self.inner.list(dir)
    }
    fn remove(&self, path: &Path) -> std::io::Result<()> {
        self.inner.remove(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.inner.rename(from, to)
    }
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn sync_file_system(&self, dir: &Path) -> std::io::Result<bool> {
        self.inner.sync_file_system(dir)
    }
    fn file_size(&self, path: &Path) -> std::io::Result<u64> {
        self.inner.file_size(path)
    }
    fn allocated_size(&self, path: &Path) -> std::io::Result<u64> {
        self.inner.allocated_size(path)
    }
    fn truncate_synced(&self, path: &Path, len: u64) -> std::io::Result<()> {
        self.inner.truncate_synced(path, len)
    }
    fn punch_hole(&self, path: &Path, offset: u64, len: u64) -> std::io::Result<()> {
        self.inner.punch_hole(path, offset, len)
    }
    fn lock(&self, path: &Path) -> std::io::Result<Box<dyn sepkv::fs::FileLock>> {
        self.inner.lock(path)
    }
    fn lock_shared(&self, path: &Path) -> std::io::Result<Option<Box<dyn sepkv::fs::FileLock>>> {
        self.inner.lock_shared(path)
    }
    fn link(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.inner.link(from, to)
    }
    fn with_direct_reads(&self) -> std::io::Result<Arc<dyn FileSystem>> {
        Ok(Arc::new(SlowDisk {
            inner: self.inner.with_direct_reads()?,
            direct: true,
            ..self.clone()
        }))
    }
}

fn slow_disk(delay_us: u64, fail_direct: bool) -> SlowDisk {
    SlowDisk {
        inner: Arc::new(sepkv::fs::StdFs),
        delay: std::time::Duration::from_micros(delay_us),
        fail_direct,
        direct: false,
        reads: Arc::default(),
    }
}

/// True when files in `dir` can be opened for direct reads (`O_DIRECT`;
/// not on tmpfs).
fn direct_reads_work(dir: &Path) -> bool {
    let probe = dir.join("probe");
    std::fs::write(&probe, [0u8; 8192]).unwrap();
    let ok = sepkv::fs::DirectReadFs.open_read(&probe).is_ok();
    std::fs::remove_file(&probe).unwrap();
    ok
}

/// A `ktstore` database in `dir` over `fs`, pipelined as [`pipelined`],
/// with direct span reads on or off.
fn pipelined_at(dir: &Path, fs: &SlowDisk, budget: u64, direct: bool) -> Db {
    Db::open(
        dir,
        Options {
            trie_scan_pipeline: budget,
            trie_scan_direct: direct,
            // Spans past the shortest read directly (64 KiB).
            trie_span_parallel: 256 << 10,
            prefetch_threads: 8,
            ..opts(Arc::new(fs.clone()))
        },
    )
    .unwrap()
}

/// With direct span reads, pipelined scans over real files return exactly
/// what a `BTreeMap` model returns (tables in random write order, tables
/// GC sorted, and the active tables being appended to), forward and
/// reverse, with ranges and limits that start and end at offsets of no
/// alignment; the spans were read directly, within the budget; and the
/// same store with the option off reads them buffered, with the same
/// results.
#[test]
fn direct_span_reads_match_a_btreemap_model() {
    let tmp = tempfile::tempdir().unwrap();
    if !direct_reads_work(tmp.path()) {
        eprintln!("skipped: the temporary directory's file system has no O_DIRECT");
        return;
    }
    let dir = tmp.path().join("db");
    let fs = slow_disk(30, false);
    let budget = 1 << 20;
    const N: usize = 4000;
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    {
        let db = pipelined_at(&dir, &fs, budget, true);
        for (round, order) in [shuffled(N, 3), shuffled(N, 4)].into_iter().enumerate() {
            for i in order.into_iter().filter(|i| round == 0 || i % 3 == 0) {
                // Odd lengths: records start at every alignment.
                let mut v = value(i, round);
                v.truncate(900 + i % 97);
                db.put(key(i), &v).unwrap();
                model.insert(key(i), v);
            }
            if round == 0 {
                // Sealed tables sorted by GC, then more appends.
                db.gc(Some(0.0)).unwrap();
            }
        }
        for i in (0..N).step_by(7) {
            db.delete(key(i)).unwrap();
            model.remove(&key(i));
        }
        db.close().unwrap();
    }
    let cases: [(usize, usize, bool, usize); 5] = [
        (0, N, false, N),
        (100, 3500, false, 2000),
        (0, N, true, 3000),
        (250, 1900, true, 10_000),
        (3990, N, false, 100),
    ];
    for direct in [true, false] {
        let db = pipelined_at(&dir, &fs, budget, direct);
        // One more write: the active table is read while appended to.
        db.put(key(N - 1), value(N - 1, 9)).unwrap();
        model.insert(key(N - 1), value(N - 1, 9));
        warm_latency(&db, N);
        for &(lo, hi, reverse, limit) in &cases {
            let got: Vec<_> = db
                .scan(&key(lo)..&key(hi), reverse)
                .unwrap()
                .limit(limit)
                .map(|r| r.unwrap())
                .collect();
            let range = model.range(key(lo)..key(hi));
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
            assert_eq!(
                got.len(),
                want.len(),
                "direct {direct}: {lo}..{hi} {reverse} {limit}"
            );
            assert!(got == want, "direct {direct}: {lo}..{hi} {reverse} {limit}");
        }
        let peak = figure(&db, "scan_pipeline_peak_bytes");
        assert!(
            peak > 0 && peak <= budget,
            "held {peak} bytes, budget {budget}"
        );
        assert!(figure(&db, "span_reads") > 0);
        let direct_reads = figure(&db, "span_direct_reads");
        if direct {
            assert!(direct_reads > 0, "no span was read directly");
            assert_eq!(figure(&db, "span_direct_off"), 0);
        } else {
            assert_eq!(direct_reads, 0, "direct reads with the option off");
        }
        db.close().unwrap();
    }
}

/// A record damaged on disk is `Corruption` at its table and offset when
/// a direct span read brings it, and the other records of the span still
/// read; a direct read that fails where the buffered read of the same
/// span works turns direct reads off and the scan returns every value.
#[test]
fn direct_span_reads_report_damage_and_fall_back_when_refused() {
    let tmp = tempfile::tempdir().unwrap();
    if !direct_reads_work(tmp.path()) {
        eprintln!("skipped: the temporary directory's file system has no O_DIRECT");
        return;
    }
    let dir = tmp.path().join("db");
    const N: usize = 2000;
    let fs = slow_disk(30, false);
    {
        let db = pipelined_at(&dir, &fs, 1 << 20, true);
        for i in 0..N {
            db.put(key(i), value(i, 0)).unwrap();
        }
        db.close().unwrap();
    }
    // Damage one value byte of a record in the middle of the first table.
    let mut tables: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "tt"))
        .collect();
    tables.sort();
    let victim = tables[0].clone();
    let mut data = std::fs::read(&victim).unwrap();
    // Records of 22 header bytes, a 16-byte key and a 1000-byte value: the
    // fifth record's value.
    let rec = 22 + 16 + 1000;
    let damaged_at = 4 * rec as u64;
    data[4 * rec + 22 + 16 + 500] ^= 1;
    std::fs::write(&victim, &data).unwrap();
    {
        let db = pipelined_at(&dir, &fs, 1 << 20, true);
        // Point reads away from the damage, to warm the read-time estimate.
        for i in N - 64..N {
            db.get(key(i)).unwrap();
        }
        let mut ok = 0;
        let mut damage = Vec::new();
        for r in db.scan(&key(0)..&key(N), false).unwrap().limit(N) {
            match r {
                Ok(_) => ok += 1,
                Err(e) => {
                    damage.push(e);
                    break;
                }
            }
        }
        match damage.as_slice() {
            [Error::Corruption { file, offset, .. }] => {
                assert_eq!((file, *offset), (&victim, damaged_at));
            }
            other => panic!("expected one Corruption, got {other:?} after {ok} values"),
        }
        assert!(
            figure(&db, "span_direct_reads") > 0,
            "no span was read directly"
        );
        db.close().unwrap();
    }
    // Repair the byte; then refuse every direct read.
    data[4 * rec + 22 + 16 + 500] ^= 1;
    std::fs::write(&victim, &data).unwrap();
    let refusing = slow_disk(30, true);
    let db = pipelined_at(&dir, &refusing, 1 << 20, true);
    warm_latency(&db, N);
    for _ in 0..2 {
        let got: Vec<_> = db
            .scan(&key(0)..&key(N), false)
            .unwrap()
            .limit(N)
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(got.len(), N);
        for (j, (k, v)) in got.into_iter().enumerate() {
            assert_eq!((k, v), (key(j), value(j, 0)));
        }
    }
    assert_eq!(figure(&db, "span_direct_reads"), 0);
    assert_eq!(figure(&db, "span_direct_off"), 1);
    db.close().unwrap();
}

/// A scan dropped half-way with direct span reads stops its pipeline as
/// the buffered one does: no read of it runs once the drop returns, and no
/// TrieTable read happens afterwards.
#[test]
fn a_direct_scan_dropped_half_way_leaves_no_reader_running() {
    let tmp = tempfile::tempdir().unwrap();
    if !direct_reads_work(tmp.path()) {
        eprintln!("skipped: the temporary directory's file system has no O_DIRECT");
        return;
    }
    let fs = slow_disk(2000, false);
    let db = pipelined_at(&tmp.path().join("db"), &fs, 4 << 20, true);
    const N: usize = 6000;
    for i in 0..N {
        db.put(key(i), value(i, 0)).unwrap();
    }
    warm_latency(&db, N);
    let reads = || fs.reads.load(std::sync::atomic::Ordering::SeqCst);
    let mut running_at_drop = 0;
    for taken in [1, 300, 2500] {
        let mut scan = db.scan(&key(0).., false).unwrap().limit(N);
        for j in 0..taken {
            assert_eq!(scan.next().unwrap().unwrap().0, key(j));
        }
        running_at_drop += figure(&db, "scan_pipeline_reads_running");
        drop(scan);
        assert_eq!(figure(&db, "scan_pipeline_reads_running"), 0);
        let after_drop = reads();
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(reads(), after_drop, "read after the drop ({taken} taken)");
    }
    assert!(
        running_at_drop > 0,
        "no scan was dropped with reads running"
    );
    assert!(
        figure(&db, "span_direct_reads") > 0,
        "no span was read directly"
    );
}

/// A table whose file ends in zeros after its last record — what a mapped
/// writer's preallocation leaves when its process dies — is cut at that
/// record on open and stays active: later appends continue in it, and every
/// value reads back. (Before mapped appends such a tail read as torn, and
/// the table was sealed with its zeros.)
#[test]
fn a_zero_tail_is_cut_and_the_table_stays_active() {
    let fs = MemFs::new();
    let s = store(&fs, 1 << 20);
    let mut ptrs = Vec::new();
    for i in 0..50 {
        ptrs.push((i, put(&s, &key(i), i as u64 + 1, &value(i, 0))));
    }
    s.sync().unwrap();
    let before: Vec<(u64, u64, u64, bool)> = s.tables();
    assert!(before.iter().any(|t| t.3), "an active table");
    drop(s);
    for &(id, len, _, active) in &before {
        if active {
            let path = Path::new("/ts").join(format!("{id:06}.tt"));
            let mut f = fs.open_append(&path).unwrap();
            f.append(&vec![0u8; 70_000]).unwrap();
            f.sync().unwrap();
            assert_eq!(fs.file_size(&path).unwrap(), len + 70_000);
        }
    }
    let s = store(&fs, 1 << 20);
    assert_eq!(s.tables(), before, "same tables, lengths and states");
    for &(id, len, _, active) in &before {
        if active {
            let path = Path::new("/ts").join(format!("{id:06}.tt"));
            assert_eq!(fs.file_size(&path).unwrap(), len, "zeros cut");
        }
    }
    for (i, p) in &ptrs {
        assert_eq!(s.read(&key(*i), p).unwrap(), Some(value(*i, 0)));
    }
    // The next value of a key goes to the same table, right after.
    let (i, p) = ptrs[0];
    let q = put(&s, &key(i), 1000, &value(i, 1));
    assert_eq!(q.file_id, p.file_id);
    assert_eq!(s.read(&key(i), &q).unwrap(), Some(value(i, 1)));
}

/// Where the child of [`mapped_appends_survive_a_killed_process`] writes.
const KILL_CHILD_DIR: &str = "SEPKV_KTSTORE_KILL_CHILD_DIR";

fn kill_opts() -> Options {
    Options {
        fs: Arc::new(sepkv::fs::StdFs),
        trie_table_size: 128 << 10,
        trie_mapped_appends: true,
        ..opts(Arc::new(MemFs::new()))
    }
}

/// The database on the operating system's files, its TrieTables appended
/// through mappings, written by a child process that is killed (SIGKILL)
/// while it writes: every write it acknowledged reads back after the
/// reopen, the state is a prefix of its writes, `verify` finds nothing,
/// and the preallocated zeros after each table's last record are gone
/// (recovery cut them). Writing then goes on, and survives a reopen.
#[test]
fn mapped_appends_survive_a_killed_process() {
    const N: usize = 200_000;
    let order = shuffled(N, 11);
    if let Ok(dir) = std::env::var(KILL_CHILD_DIR) {
        // The child: write until killed, noting each acknowledged write
        // (a write(2) of its count, which the kill does not undo).
        let dir = PathBuf::from(dir);
        let db = Db::open(dir.join("db"), kill_opts()).unwrap();
        let acked = std::fs::File::create(dir.join("acked")).unwrap();
        for (n, &i) in order.iter().enumerate() {
            db.put(key(i), value(i, 0)).unwrap();
            std::os::unix::fs::FileExt::write_all_at(&acked, &(n as u64 + 1).to_le_bytes(), 0)
                .unwrap();
        }
        loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "mapped_appends_survive_a_killed_process",
            "--exact",
            "--nocapture",
        ])
        .env(KILL_CHILD_DIR, tmp.path())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let acked_path = tmp.path().join("acked");
    let read_acked = || -> usize {
        std::fs::read(&acked_path)
            .ok()
            .and_then(|b| Some(u64::from_le_bytes(b.get(..8)?.try_into().ok()?) as usize))
            .unwrap_or(0)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while read_acked() < 20_000 {
        assert!(
            std::time::Instant::now() < deadline,
            "the child wrote {} values in time",
            read_acked()
        );
        assert!(child.try_wait().unwrap().is_none(), "the child died");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let acked = read_acked();
    assert!(acked < N, "killed before the end");

    // Reopened with appends by system calls, so that the files show what
    // recovery left.
    let plain = Options {
        trie_mapped_appends: false,
        ..kill_opts()
    };
    let db = Db::open(tmp.path().join("db"), plain.clone()).unwrap();
    let mut present = 0;
    for (n, &i) in order.iter().enumerate() {
        match db.get(key(i)).unwrap() {
            Some(v) => {
                assert_eq!(v, value(i, 0), "key {i}");
                assert_eq!(n, present, "a prefix of the writes");
                present += 1;
            }
            None => assert!(n >= acked, "acknowledged write {n} (key {i}) lost"),
        }
    }
    assert!(
        present >= acked && present <= acked + 1,
        "{present} of {acked}"
    );
    assert!(db.verify().unwrap().faults.is_empty());
    // Recovery cut every table's zeros: each file ends in its last
    // record's value, whose bytes are never 0.
    let ends_in_records = || {
        let tables: Vec<PathBuf> = std::fs::read_dir(tmp.path().join("db"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().ends_with(".tt"))
            .collect();
        assert!(tables.len() > 2, "{} tables", tables.len());
        for t in &tables {
            let b = std::fs::read(t).unwrap();
            if let Some(&last) = b.last() {
                assert_ne!(last, 0, "{} ends in zeros", t.display());
            }
        }
    };
    ends_in_records();
    // Writing goes on, by system calls and then through mappings again,
    // and all of it survives reopens; a closed store leaves no zeros.
    for &i in &order[present..present + 2000] {
        db.put(key(i), value(i, 0)).unwrap();
    }
    db.close().unwrap();
    drop(db);
    let db = Db::open(tmp.path().join("db"), kill_opts()).unwrap();
    for &i in &order[present + 2000..present + 4000] {
        db.put(key(i), value(i, 0)).unwrap();
    }
    db.close().unwrap();
    drop(db);
    ends_in_records();
    let db = Db::open(tmp.path().join("db"), plain).unwrap();
    for &i in &order[..present + 4000] {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 0)), "key {i}");
    }
    assert!(db.verify().unwrap().faults.is_empty());
}
