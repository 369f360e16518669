use super::table::{Meta, Table, BUCKETS_PER_PAGE};
use super::*;
use crate::fs::{FaultFs, MemFs};
use std::collections::BTreeMap;

fn dir() -> &'static Path {
    Path::new("/db")
}

fn opts(mode: HashMode) -> HashOptions {
    HashOptions {
        mode,
        cache_bytes: 64 << 10,
        checkpoint_bands: 2,
        initial_pages: 1,
        memo_bytes: 4 << 10,
        bands: BandOptions {
            band_entries: 16,
            ..Default::default()
        },
    }
}

fn open(fs: &Arc<dyn FileSystem>, o: HashOptions) -> HashIndex {
    HashIndex::open(dir(), fs.clone(), Arc::new(IoStats::default()), o).unwrap()
}

/// A deterministic generator (xorshift).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn value(k: u64, seq: u64) -> Vec<u8> {
    format!("value-{k}-{seq}-{}", "x".repeat((k % 7) as usize * 10)).into_bytes()
}

fn key(k: u64) -> Vec<u8> {
    format!("key{k:05}").into_bytes()
}

#[test]
fn table_keeps_every_node_through_doublings_and_page_round_trips() {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    fs.create_dir_all(dir()).unwrap();
    let (mut t, existed) =
        Table::open(dir(), fs.clone(), Arc::new(IoStats::default()), 8, 1).unwrap();
    assert!(!existed);
    let mut rng = Rng(7);
    let mut nodes = Vec::new();
    for i in 1..=3000u64 {
        let h = rng.next();
        let fp = (rng.next() & 0xf) as u32; // many fingerprint collisions
        let ptr = ValuePointer {
            file_id: i,
            offset: 20,
            length: 40,
            aux: 0,
        };
        t.insert(h, fp, ptr).unwrap();
        nodes.push((h, fp, ptr));
    }
    let f = t.figures();
    assert!(f.load <= 0.9 + 1e-9 || f.resizing, "{f:?}");
    assert!(f.buckets >= 3000 / 2, "{f:?}");
    for (h, fp, ptr) in &nodes {
        assert!(t.candidates(*h, *fp).unwrap().iter().any(|n| n.ptr == *ptr));
    }
    // Remove half, replace the rest; then checkpoint and reopen.
    for (i, (h, _, ptr)) in nodes.iter().enumerate() {
        if i % 2 == 0 {
            assert!(t.remove(*h, ptr).unwrap());
        } else {
            let new = ValuePointer { offset: 99, ..*ptr };
            assert!(t.replace(*h, ptr, new).unwrap());
        }
    }
    t.checkpoint((5, 20), vec![1, 2, 3]).unwrap();
    drop(t);
    let (mut t, existed) =
        Table::open(dir(), fs.clone(), Arc::new(IoStats::default()), 8, 1).unwrap();
    assert!(existed);
    assert_eq!(t.checkpoint_state(), ((5, 20), &[1u8, 2, 3][..]));
    assert_eq!(t.figures().nodes, 1500);
    for (i, (h, fp, ptr)) in nodes.iter().enumerate() {
        let c = t.candidates(*h, *fp).unwrap();
        assert!(!c.iter().any(|n| n.ptr == *ptr));
        let new = ValuePointer { offset: 99, ..*ptr };
        assert_eq!(c.iter().any(|n| n.ptr == new), i % 2 == 1);
    }
}

/// A lookup of a page on disk reads it without the table's lock and keeps
/// it only while nothing newer exists: not once the page was loaded and
/// changed, nor once a newer image of it was written out.
#[test]
fn pages_read_without_the_lock_are_kept_only_while_current() {
    use super::table::Probe;
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    fs.create_dir_all(dir()).unwrap();
    // Four pages in memory at most; 64 pages of nodes.
    let (mut t, _) = Table::open(dir(), fs.clone(), Arc::new(IoStats::default()), 4, 64).unwrap();
    let ptr = |i: u64| ValuePointer {
        file_id: i,
        offset: 8,
        length: 30,
        aux: 0,
    };
    // Home bits pick the page: key i on page i, bucket 0.
    let h = |page: u64, n: u64| (page << 6) | (n << 38);
    for page in 0..64u64 {
        t.insert(h(page, 0), 1, ptr(page + 1)).unwrap();
    }
    t.checkpoint((1, 0), Vec::new()).unwrap();
    // Page 0 went out long ago: a probe finds it on disk.
    let Probe::Read(r) = t.probe(h(0, 0), 1) else {
        panic!("page 0 should be on disk");
    };
    let page = r.read().unwrap();
    assert_eq!(page.candidates(h(0, 0), 1)[0].ptr, ptr(1));
    // Unchanged: kept; the next probe finds it in memory.
    assert!(t.install(&r, page.clone()));
    assert!(matches!(t.probe(h(0, 0), 1), Probe::Found(c) if c[0].ptr == ptr(1)));

    // Changed in memory after the read: the read's image is not kept.
    let Probe::Read(r) = t.probe(h(1, 0), 1) else {
        panic!("page 1 should be on disk");
    };
    let stale = r.read().unwrap();
    assert!(t.replace(h(1, 0), &ptr(2), ptr(200)).unwrap());
    assert!(!t.install(&r, stale.clone()));
    assert_eq!(t.candidates(h(1, 0), 1).unwrap()[0].ptr, ptr(200));

    // Written out since: the page map names a newer image, so a read of the
    // old one is not kept even when the page has left memory again.
    for page in 2..20u64 {
        t.candidates(h(page, 0), 1).unwrap();
    }
    assert!(matches!(t.probe(h(1, 0), 1), Probe::Read(_)));
    assert!(!t.install(&r, stale));
    assert_eq!(t.candidates(h(1, 0), 1).unwrap()[0].ptr, ptr(200));
    // A full cache of dirty pages: keeping a read page would mean writing
    // one out, which a lookup does not do.
    for page in 30..34u64 {
        assert!(t
            .replace(h(page, 0), &ptr(page + 1), ptr(page + 100))
            .unwrap());
    }
    assert_eq!(t.figures().dirty_pages, 4);
    let Probe::Read(r) = t.probe(h(40, 0), 1) else {
        panic!("page 40 should be on disk");
    };
    assert!(!t.install(&r, r.read().unwrap()));
    assert!(matches!(t.probe(h(40, 0), 1), Probe::Read(_)));
    assert_eq!(t.figures().dirty_pages, 4);
    // And the checkpoint's pages read back as they were written.
    t.checkpoint((2, 0), Vec::new()).unwrap();
    drop(t);
    let (mut t, _) = Table::open(dir(), fs, Arc::new(IoStats::default()), 4, 64).unwrap();
    assert_eq!(t.candidates(h(1, 0), 1).unwrap()[0].ptr, ptr(200));
    assert_eq!(t.candidates(h(0, 0), 1).unwrap()[0].ptr, ptr(1));
}

#[test]
fn meta_decode_rejects_damage_and_junk() {
    let m = Meta {
        base_pages: 4,
        split: 1,
        count: 9,
        generation: 2,
        map: vec![(0, 0), (10, 20), (30, 5), (0, 0), (35, 7)],
        ckpt: (3, 4),
        bands_state: vec![9, 9],
    };
    let b = m.encode_for_test();
    assert_eq!(Meta::decode(&b), Some(m));
    for i in 0..b.len() {
        let mut d = b.clone();
        d[i] ^= 0x20;
        assert_eq!(Meta::decode(&d), None, "flip at {i}");
    }
    for cut in 0..b.len() {
        assert_eq!(Meta::decode(&b[..cut]), None);
    }
}

/// Runs random batches against the index and a model of every version,
/// checking reads at the newest state and at snapshots.
type History = BTreeMap<u64, Vec<(u64, Option<Vec<u8>>)>>;

fn model_run(mode: HashMode, seed: u64) {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    let mut idx = open(&fs, opts(mode));
    let mut rng = Rng(seed);
    // Model: key → [(seq, value or None)].
    let mut hist: History = BTreeMap::new();
    let mut snaps: Vec<u64> = Vec::new();
    let at = |hist: &History, k: u64, s: u64| {
        hist.get(&k)
            .and_then(|v| v.iter().rev().find(|(q, _)| *q <= s))
            .and_then(|(_, v)| v.clone())
    };
    for round in 0..1500u64 {
        let n = 1 + rng.below(4) as usize;
        let ks: Vec<u64> = (0..n).map(|_| rng.below(300)).collect();
        let vals: Vec<Option<Vec<u8>>> = ks
            .iter()
            .map(|&k| (rng.below(5) != 0).then(|| value(k, round)))
            .collect();
        let keys: Vec<Vec<u8>> = ks.iter().map(|&k| key(k)).collect();
        let ops: Vec<Op<'_>> = keys
            .iter()
            .zip(&vals)
            .map(|(k, v)| (&k[..], v.as_deref()))
            .collect();
        let last = loop {
            match idx.write(&ops) {
                Ok(s) => break s,
                Err(Error::ValueStoreFull(_)) => {
                    idx.gc_step().unwrap();
                }
                Err(e) => panic!("{e:?}"),
            }
        };
        let seq0 = last + 1 - n as u64;
        for (i, (&k, v)) in ks.iter().zip(&vals).enumerate() {
            hist.entry(k)
                .or_default()
                .push((seq0 + i as u64, v.clone()));
        }
        match rng.below(40) {
            0 => snaps.push(idx.snapshot()),
            1 if !snaps.is_empty() => {
                let s = snaps.remove(rng.below(snaps.len() as u64) as usize);
                idx.release(s);
            }
            2 | 3 => {
                idx.gc_step().unwrap();
            }
            4 if rng.below(4) == 0 => {
                // Clean reopen: snapshots end with the handle.
                for s in snaps.drain(..) {
                    idx.release(s);
                }
                idx.checkpoint().unwrap();
                drop(idx);
                idx = open(&fs, opts(mode));
            }
            _ => {}
        }
        // Check a few keys now and at every snapshot.
        for _ in 0..3 {
            let k = rng.below(300);
            let now = idx.last_sequence();
            assert_eq!(
                idx.get(&key(k), None).unwrap(),
                at(&hist, k, now),
                "key {k} now"
            );
            for &s in &snaps {
                assert_eq!(
                    idx.get(&key(k), Some(s)).unwrap(),
                    at(&hist, k, s),
                    "key {k} at snapshot {s}"
                );
            }
        }
    }
    for k in 0..300 {
        assert_eq!(idx.get(&key(k), None).unwrap(), at(&hist, k, u64::MAX));
    }
    let f = idx.table_figures();
    assert!(f.nodes > 0 && f.buckets > 64, "{f:?}");
    let (_, faults) = idx.bands().verify();
    assert!(faults.is_empty(), "{faults:?}");
    // GC ran and freed bands.
    let figs = idx.bands().figures();
    let runs = figs.iter().find(|x| x.0 == "gc_runs").unwrap().1;
    assert!(runs > 0, "{figs:?}");
}

#[test]
fn model_memory_mode() {
    model_run(HashMode::Memory, 11);
}

#[test]
fn model_disk_mode_with_a_small_cache() {
    model_run(HashMode::Disk, 12);
}

#[test]
fn disk_mode_memory_stays_bounded() {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    let o = HashOptions {
        cache_bytes: 64 << 10,
        ..opts(HashMode::Disk)
    };
    let idx = open(&fs, o.clone());
    for k in 0..20_000u64 {
        let kk = key(k);
        idx.write(&[(&kk, Some(b"v"))]).unwrap();
    }
    let f = idx.table_figures();
    assert!(f.buckets >= 20_000 / 2, "{f:?}");
    assert!(f.cached_pages <= 8, "{f:?}");
    assert!(
        idx.cached_bytes() < 4 * (64 << 10),
        "{}",
        idx.cached_bytes()
    );
    for k in (0..20_000u64).step_by(97) {
        assert_eq!(idx.get(&key(k), None).unwrap().as_deref(), Some(&b"v"[..]));
    }
    idx.checkpoint().unwrap();
    drop(idx);
    let idx = open(&fs, o);
    for k in (0..20_000u64).step_by(89) {
        assert_eq!(idx.get(&key(k), None).unwrap().as_deref(), Some(&b"v"[..]));
    }
}

#[test]
fn a_crash_recovers_every_synced_write_and_a_prefix_after() {
    for mode in [HashMode::Memory, HashMode::Disk] {
        let ffs = Arc::new(FaultFs::new());
        let fs: Arc<dyn FileSystem> = ffs.clone();
        let idx = open(&fs, opts(mode));
        let mut synced_upto = 0;
        for k in 0..400u64 {
            let v = value(k, k);
            let kk = key(k % 150);
            let s = idx.write(&[(&kk, Some(&v))]).unwrap();
            if k % 50 == 49 {
                idx.sync().unwrap();
                synced_upto = s;
            }
        }
        let last = idx.last_sequence();
        drop(idx);
        ffs.crash();
        let idx = open(&fs, opts(mode));
        let rec = idx.last_sequence();
        assert!(
            rec >= synced_upto && rec <= last,
            "{mode:?}: {synced_upto} <= {rec} <= {last}"
        );
        // State = the writes up to `rec` exactly (seq k+1 wrote key k%150).
        for kk in 0..150u64 {
            let newest = (0..400u64)
                .rev()
                .find(|&k| k % 150 == kk && k < rec)
                .map(|k| value(k, k));
            assert_eq!(
                idx.get(&key(kk), None).unwrap(),
                newest,
                "{mode:?} key {kk}"
            );
        }
        // Reopen again: replay is idempotent.
        drop(idx);
        let idx = open(&fs, opts(mode));
        assert_eq!(idx.last_sequence(), rec);
    }
}

#[test]
fn damaged_records_and_pages_are_corruption() {
    let ffs = Arc::new(FaultFs::new());
    let fs: Arc<dyn FileSystem> = ffs.clone();
    let idx = open(&fs, opts(HashMode::Disk));
    for k in 0..100u64 {
        let kk = key(k);
        idx.write(&[(&kk, Some(&value(k, 0)))]).unwrap();
    }
    idx.checkpoint().unwrap();
    let p = idx.current_pointer(&key(7)).unwrap().unwrap();
    let band = idx.bands().band_file(p.file_id);
    drop(idx);
    ffs.corrupt(&band, p.offset + 40, 0x08).unwrap();
    let idx = open(&fs, opts(HashMode::Disk));
    match idx.get(&key(7), None) {
        Err(Error::Corruption { file, offset, .. }) => assert_eq!((file, offset), (band, p.offset)),
        other => panic!("{other:?}"),
    }
    drop(idx);
    // A damaged meta file.
    let meta = dir().join(table::META);
    ffs.corrupt(&meta, 30, 0x01).unwrap();
    match HashIndex::open(
        dir(),
        fs.clone(),
        Arc::new(IoStats::default()),
        opts(HashMode::Disk),
    ) {
        Err(Error::Corruption { file, .. }) => assert_eq!(file, meta),
        Err(e) => panic!("{e:?}"),
        Ok(_) => panic!("opened with a damaged meta"),
    }
}

#[test]
fn buckets_hold_two_nodes_then_chain() {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    fs.create_dir_all(dir()).unwrap();
    let (mut t, _) = Table::open(dir(), fs, Arc::new(IoStats::default()), 8, 64).unwrap();
    // Five nodes in one bucket (same primary hash, distinct fingerprints).
    let h = 5u64;
    for i in 1..=5u64 {
        let p = ValuePointer {
            file_id: i,
            ..Default::default()
        };
        t.insert(h, i as u32, p).unwrap();
    }
    let f = t.figures();
    assert_eq!((f.overflow_chains, f.overflow_nodes), (1, 3), "{f:?}");
    for i in 1..=5u64 {
        assert_eq!(t.candidates(h, i as u32).unwrap().len(), 1);
    }
    let p1 = ValuePointer {
        file_id: 1,
        ..Default::default()
    };
    assert!(t.remove(h, &p1).unwrap());
    let f = t.figures();
    assert_eq!((f.overflow_chains, f.overflow_nodes), (1, 2), "{f:?}");
    assert_eq!(BUCKETS_PER_PAGE, 64);
}

#[test]
fn concurrent_writers_readers_snapshots_and_gc() {
    for mode in [HashMode::Memory, HashMode::Disk] {
        let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
        let idx = Arc::new(open(&fs, opts(mode)));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut hs = Vec::new();
        // Writers: each owns keys w*1000.., values name the key and a counter.
        for w in 0..3u64 {
            let idx = idx.clone();
            hs.push(std::thread::spawn(move || {
                for i in 0..800u64 {
                    let k = key(w * 1000 + i % 40);
                    let v = format!("{}:{i}", String::from_utf8_lossy(&k));
                    let op = if i % 9 == 8 { None } else { Some(v.as_bytes()) };
                    loop {
                        match idx.write(&[(&k, op)]) {
                            Ok(_) => break,
                            Err(Error::ValueStoreFull(_)) => {
                                idx.gc_step().unwrap();
                            }
                            Err(e) => panic!("{e:?}"),
                        }
                    }
                }
            }));
        }
        // Readers: a value always belongs to its key; a snapshot read is
        // stable while the snapshot lives.
        for r in 0..2u64 {
            let idx = idx.clone();
            let stop = stop.clone();
            hs.push(std::thread::spawn(move || {
                let mut rng = Rng(r + 5);
                while !stop.load(Ordering::Relaxed) {
                    let k = key(rng.below(3) * 1000 + rng.below(40));
                    let s = idx.snapshot();
                    let a = idx.get(&k, Some(s)).unwrap();
                    if let Some(v) = &a {
                        assert!(v.starts_with(&k), "{v:?} read for {k:?}");
                    }
                    let _ = idx.get(&k, None).unwrap();
                    std::thread::yield_now();
                    assert_eq!(idx.get(&k, Some(s)).unwrap(), a, "snapshot read moved");
                    idx.release(s);
                }
            }));
        }
        {
            let idx = idx.clone();
            let stop = stop.clone();
            hs.push(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    idx.gc_step().unwrap();
                    std::thread::yield_now();
                }
            }));
        }
        for h in hs.drain(..3) {
            h.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        for h in hs {
            h.join().unwrap();
        }
        for w in 0..3u64 {
            for j in 0..40u64 {
                let last = (0..800u64).rev().find(|i| i % 40 == j).unwrap();
                let want = (last % 9 != 8).then(|| {
                    format!("{}:{last}", String::from_utf8_lossy(&key(w * 1000 + j))).into_bytes()
                });
                assert_eq!(idx.get(&key(w * 1000 + j), None).unwrap(), want);
            }
        }
    }
}

/// A memory-mode index whose bands ask it for each key's previous
/// version, as the engine wires them ([`engine_write`]).
fn open_for_engine_writes(fs: &Arc<dyn FileSystem>) -> Arc<HashIndex> {
    let idx = Arc::new(open(fs, opts(HashMode::Memory)));
    let weak: std::sync::Weak<dyn crate::vstore::index_log::PrevLookup> =
        Arc::downgrade(&idx) as std::sync::Weak<dyn crate::vstore::index_log::PrevLookup>;
    idx.bands().set_prev_lookup(weak);
    idx
}

/// The engine's write path: the bands log the batch (asking the index for
/// each key's current address), then the index applies it.
fn engine_write(idx: &HashIndex, seq0: u64, ops: &[Op<'_>]) -> Vec<KeyOp> {
    let log: Vec<LogEntry<'_>> = ops
        .iter()
        .enumerate()
        .map(|(i, (k, v))| LogEntry {
            vtype: if v.is_some() {
                ValueType::Value
            } else {
                ValueType::Deletion
            },
            separate: v.is_some(),
            key: k,
            seq: seq0 + i as u64,
            value: v.unwrap_or(b""),
        })
        .collect();
    let ptrs = idx.bands().log_batch(&log).unwrap();
    let addrs = idx.bands().take_last_batch();
    let enc: Vec<Vec<u8>> = ptrs
        .iter()
        .map(|p| p.map(|p| p.encode()).unwrap_or_default())
        .collect();
    let entries: Vec<(ValueType, &[u8], &[u8])> = ops
        .iter()
        .zip(&enc)
        .map(|((k, v), e)| {
            if v.is_some() {
                (ValueType::Pointer, *k, &e[..])
            } else {
                (ValueType::Deletion, *k, &b""[..])
            }
        })
        .collect();
    let out = idx.apply_logged(&entries, &addrs).unwrap();
    let out: Vec<KeyOp> = out.into_iter().map(|x| x.1).collect();
    idx.last_seq
        .store(seq0 + ops.len() as u64 - 1, Ordering::Release);
    out
}

#[test]
fn engine_write_path_links_versions_and_reports_key_changes() {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    let idx = open_for_engine_writes(&fs);
    let ins = |k: &[u8]| KeyOp::Insert(k.to_vec());
    let rem = |k: &[u8]| KeyOp::Remove(k.to_vec());
    assert_eq!(
        engine_write(&idx, 1, &[(b"a", Some(b"1")), (b"b", Some(b"1"))]),
        vec![ins(b"a"), ins(b"b")]
    );
    assert_eq!(engine_write(&idx, 3, &[(b"a", Some(b"2"))]), vec![]);
    assert_eq!(
        engine_write(&idx, 4, &[(b"a", None), (b"zz", None)]),
        vec![rem(b"a")]
    );
    assert_eq!(
        engine_write(
            &idx,
            6,
            &[(b"a", Some(b"3")), (b"a", Some(b"4")), (b"b", None)]
        ),
        vec![ins(b"a"), rem(b"b")]
    );
    let at = |k: &[u8], s| idx.get(k, Some(s)).unwrap();
    assert_eq!(at(b"a", 2), Some(b"1".to_vec()));
    assert_eq!(at(b"a", 3), Some(b"2".to_vec()));
    assert_eq!(at(b"a", 5), None);
    assert_eq!(at(b"a", 6), Some(b"3".to_vec()));
    assert_eq!(at(b"a", 8), Some(b"4".to_vec()));
    assert_eq!(at(b"b", 7), Some(b"1".to_vec()));
    assert_eq!(at(b"b", 8), None);
    assert_eq!(at(b"zz", 8), None);
    // No node for the absent key's delete token.
    assert_eq!(idx.table_figures().nodes, 2);
    // Reopen: the same state, replayed.
    drop(idx);
    let idx = open(&fs, opts(HashMode::Memory));
    assert_eq!(idx.get(b"a", None).unwrap(), Some(b"4".to_vec()));
    assert_eq!(idx.get(b"a", Some(3)).unwrap(), Some(b"2".to_vec()));
    assert_eq!(idx.get(b"b", None).unwrap(), None);
}

/// The engine's GC judges a delete token dead (its index reports deleted
/// keys as absent), so the token goes with its band and the key's node
/// dangles: the next lookup removes it.
#[test]
fn a_node_left_on_a_collected_delete_token_is_removed() {
    struct Engine<'a>(&'a HashIndex);
    impl IndexReader for Engine<'_> {
        fn current_pointer(&self, key: &[u8]) -> Result<Option<ValuePointer>> {
            Ok(self
                .0
                .current_pointer(key)?
                .filter(|p| p.aux & AUX_TOMBSTONE == 0))
        }
        fn oldest_visible_seq(&self) -> u64 {
            self.0.oldest_visible_seq()
        }
        fn last_sequence(&self) -> u64 {
            self.0.last_sequence()
        }
        fn wait_in_flight_writes(&self) -> Result<()> {
            Ok(())
        }
    }
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    let idx = Arc::new(open(&fs, opts(HashMode::Memory)));
    let lookup: Arc<dyn crate::vstore::index_log::PrevLookup> = idx.clone();
    idx.bands().set_prev_lookup(Arc::downgrade(&lookup));
    engine_write(&idx, 1, &[(b"gone", Some(b"v"))]);
    engine_write(&idx, 2, &[(b"gone", None)]);
    // Fill bands past the checkpoint so the first band can be collected.
    for i in 0..80u64 {
        let k = key(i);
        engine_write(&idx, 3 + i, &[(&k, Some(b"x"))]);
    }
    idx.checkpoint().unwrap();
    assert_eq!(idx.table_figures().nodes, 81);
    let e = Engine(&idx);
    let out = idx.bands().gc_step(&e, &*idx).unwrap();
    assert!(out.did_work, "{out:?}");
    assert_eq!(idx.get(b"gone", None).unwrap(), None);
    assert_eq!(idx.table_figures().nodes, 80, "dangling node removed");
    assert_eq!(idx.get(&key(5), None).unwrap().as_deref(), Some(&b"x"[..]));
}

/// A scan's read-ahead (lookups of a window of key-tree entries in
/// parallel) shows exactly what one lookup at a time shows, through runs
/// of `next`, `prev` and seeks: values, versions the scan cannot see,
/// deletions, and a key the hash index lacks (read as deleted).
#[test]
fn scan_read_ahead_shows_what_single_lookups_show() {
    use super::flashkey::{ReadAhead, ValueResolver};
    use crate::index::iter::InternalIterator;
    use crate::index::key::internal_key;
    use crate::index::merger::tests::VecIter;
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    let idx = open_for_engine_writes(&fs);
    // The key tree: each key at its first put; some overwritten later,
    // some deleted, one never in the hash index, and one entry newer than
    // the scan.
    let mut tree = Vec::new();
    let mut seq = 1;
    let values: Vec<Vec<u8>> = (0..300u64).map(|k| value(k, 1)).collect();
    for k in 0..300u64 {
        engine_write(&idx, seq, &[(&key(k), Some(&values[k as usize]))]);
        tree.push((internal_key(&key(k), seq, ValueType::Value), Vec::new()));
        seq += 1;
    }
    let newer = value(7, 2);
    for k in (0..300u64).step_by(7) {
        engine_write(&idx, seq, &[(&key(k), Some(&newer))]);
        seq += 1;
    }
    for k in (3..300u64).step_by(11) {
        engine_write(&idx, seq, &[(&key(k), None)]);
        tree.push((internal_key(&key(k), seq, ValueType::Deletion), Vec::new()));
        seq += 1;
    }
    tree.push((internal_key(b"key00150a", 5, ValueType::Value), Vec::new()));
    let scan_at = seq - 20;
    tree.push((
        internal_key(&key(299), seq + 5, ValueType::Value),
        Vec::new(),
    ));
    tree.sort_by(|a, b| crate::index::key::compare_internal(&a.0, &b.0));
    let make = |threads: usize| {
        let ra = Arc::new(ReadAhead::new(threads, 16));
        let it = ValueResolver::new(
            Box::new(VecIter {
                entries: tree.clone(),
                pos: None,
            }),
            idx.clone(),
            scan_at,
            ra.clone(),
        );
        (it, ra)
    };
    let (mut one, _) = make(0);
    let (mut ahead, ra) = make(4);
    let mut rng = Rng(11);
    let mut windows = 0;
    for step in 0..3000 {
        // Lookups on memory are fast: keep the estimate on the device's
        // side so that windows are taken.
        ra.latency.record(1_000_000_000_000);
        let op = rng.below(100);
        let (a, b): (&mut ValueResolver, &mut ValueResolver) = (&mut one, &mut ahead);
        if op.is_multiple_of(2) {
            // A scan told its length says so before it seeks.
            b.expect_forward(rng.below(150) as usize);
        }
        if !a.valid() || op < 3 {
            a.seek_to_first();
            b.seek_to_first();
        } else if op < 5 {
            a.seek_to_last();
            b.seek_to_last();
        } else if op < 10 {
            let t = internal_key(&key(rng.below(320)), u64::MAX >> 8, ValueType::Value);
            a.seek(&t);
            b.seek(&t);
        } else if op < 30 {
            a.prev();
            b.prev();
        } else {
            a.next();
            b.next();
        }
        assert_eq!(a.valid(), b.valid(), "step {step}");
        assert!(b.status().is_ok());
        if a.valid() {
            assert_eq!(a.key(), b.key(), "step {step}");
            assert_eq!(a.value(), b.value(), "step {step}");
        }
        windows += b.windows_taken();
    }
    assert!(windows > 50, "{windows} windows");
}

/// A key written again is found at the address the index remembered, with
/// no record read; GC judges and moves records from the table's nodes
/// alone; and once GC has moved a key, the remembered address misses and
/// the record reads find the key at its new place, versions linked.
#[test]
fn a_write_finds_the_version_it_supersedes_without_reading_it_back() {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    let stats = Arc::new(IoStats::default());
    let idx = Arc::new(
        HashIndex::open(dir(), fs.clone(), stats.clone(), opts(HashMode::Memory)).unwrap(),
    );
    let lookup: Arc<dyn crate::vstore::index_log::PrevLookup> = idx.clone();
    idx.bands().set_prev_lookup(Arc::downgrade(&lookup));
    let read = || stats.snapshot().total_read();

    engine_write(&idx, 1, &[(b"a", Some(b"1"))]);
    let before = read();
    engine_write(&idx, 2, &[(b"a", Some(b"2"))]);
    assert_eq!(read(), before, "the overwrite read no record");
    assert_eq!(idx.get(b"a", Some(1)).unwrap(), Some(b"1".to_vec()));

    // Fill bands past the checkpoint; band 1 (a's first version and 15
    // live records) holds the only garbage, so GC takes it.
    for i in 0..80u64 {
        let k = key(i);
        engine_write(&idx, 3 + i, &[(&k, Some(b"x"))]);
    }
    idx.checkpoint().unwrap();
    let before = read();
    let out = idx.gc_step().unwrap();
    assert!(out.did_work && out.bytes_read > 0, "{out:?}");
    assert_eq!(
        read() - before,
        out.bytes_read,
        "GC read its band and no record besides"
    );
    assert!(idx.bands().is_collected(&ValuePointer {
        file_id: 1,
        offset: 0,
        length: 0,
        aux: 0
    }));

    // The remembered address is stale now: the write reads the record at
    // the node's address, and links the new version to it.
    let before = read();
    engine_write(&idx, 100, &[(b"a", Some(b"3"))]);
    assert!(read() > before, "a stale address falls back to a read");
    assert_eq!(idx.get(b"a", None).unwrap(), Some(b"3".to_vec()));
    assert_eq!(idx.get(b"a", Some(99)).unwrap(), Some(b"2".to_vec()));
    let before = read();
    engine_write(&idx, 101, &[(b"a", Some(b"4"))]);
    assert_eq!(read(), before, "remembered again after the read");
    assert_eq!(idx.get(b"a", Some(100)).unwrap(), Some(b"3".to_vec()));
    assert_eq!(idx.table_figures().nodes, 81);
}

/// What the address memo does not keep — keys longer than 27 bytes, and
/// every key when it is off — is verified by a record read as before, and
/// a key deleted and put again links its versions through the delete
/// token, memo or not.
#[test]
fn writes_the_memo_does_not_cover_fall_back_to_record_reads() {
    for memo in [0u64, 4 << 10] {
        let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
        let stats = Arc::new(IoStats::default());
        let o = HashOptions {
            memo_bytes: memo,
            ..opts(HashMode::Memory)
        };
        let idx = Arc::new(HashIndex::open(dir(), fs.clone(), stats.clone(), o).unwrap());
        let lookup: Arc<dyn crate::vstore::index_log::PrevLookup> = idx.clone();
        idx.bands().set_prev_lookup(Arc::downgrade(&lookup));
        let read = || stats.snapshot().total_read();
        let long = vec![b'L'; 40];
        let ins = |k: &[u8]| KeyOp::Insert(k.to_vec());
        engine_write(&idx, 1, &[(&long, Some(b"1")), (b"s", Some(b"1"))]);
        let before = read();
        engine_write(&idx, 3, &[(&long, Some(b"2"))]);
        assert!(
            read() > before,
            "memo {memo}: a long key is verified by a read"
        );
        let before = read();
        engine_write(&idx, 4, &[(b"s", Some(b"2"))]);
        if memo == 0 {
            assert!(read() > before, "no memo: the key is verified by a read");
        } else {
            assert_eq!(read(), before, "memo {memo}: remembered");
        }
        assert_eq!(
            engine_write(&idx, 5, &[(b"s", None)]),
            vec![KeyOp::Remove(b"s".to_vec())]
        );
        assert_eq!(
            engine_write(&idx, 6, &[(b"s", Some(b"3"))]),
            vec![ins(b"s")]
        );
        let at = |k: &[u8], s| idx.get(k, Some(s)).unwrap();
        assert_eq!(at(b"s", 6), Some(b"3".to_vec()));
        assert_eq!(at(b"s", 5), None);
        assert_eq!(at(b"s", 4), Some(b"2".to_vec()));
        assert_eq!(at(b"s", 2), Some(b"1".to_vec()));
        assert_eq!(at(&long, 3), Some(b"2".to_vec()));
        assert_eq!(at(&long, 2), Some(b"1".to_vec()));
        assert_eq!(idx.table_figures().nodes, 2, "memo {memo}");
    }
}

/// A GC step persists the bands' state as an edit of what it changed,
/// appended to `HASHEDITS`, not as a whole new `HASHMETA`; an open reads
/// `HASHMETA` plus the edits that extend it, passes over a torn last
/// edit, reports damage before the end as corruption naming the log, and
/// opens a database without an edit log (as format 1 wrote them) as
/// before.
#[test]
fn gc_steps_append_edits_not_the_whole_meta() {
    let ffs = Arc::new(FaultFs::new());
    let fs: Arc<dyn FileSystem> = ffs.clone();
    let stats = Arc::new(IoStats::default());
    let o = opts(HashMode::Memory);
    let idx = HashIndex::open(dir(), fs.clone(), stats.clone(), o.clone()).unwrap();
    let mut rng = Rng(7);
    for i in 0..6000u64 {
        let k = key(if i < 2000 { i } else { rng.below(2000) });
        idx.write(&[(&k, Some(&value(i, i)))]).unwrap();
    }
    idx.checkpoint().unwrap();
    let meta = dir().join(table::META);
    let edits = dir().join(table::EDITS);
    let meta_len = ffs.file_len(&meta).unwrap();
    let before = stats.snapshot().written_in(crate::fs::IoCategory::Manifest);
    let mut steps = 0;
    for _ in 0..30 {
        if idx.gc_step().unwrap().did_work {
            steps += 1;
        }
    }
    assert!(steps >= 10, "{steps} GC steps");
    let per_step = (stats.snapshot().written_in(crate::fs::IoCategory::Manifest) - before) / steps;
    assert!(fs.exists(&edits), "no edit log");
    assert_eq!(ffs.file_len(&meta).unwrap(), meta_len, "HASHMETA rewritten");
    assert!(
        per_step * 4 < meta_len,
        "{per_step} bytes of metadata per GC step against a HASHMETA of {meta_len}"
    );
    let state = idx.table.read().durable_bands_state().to_vec();
    drop(idx);
    // HASHMETA plus the edits give the state the last step persisted.
    let load = || Table::open(dir(), fs.clone(), Arc::new(IoStats::default()), 4, 1);
    let (t, _) = load().unwrap();
    assert_eq!(t.checkpoint_state().1, &state[..]);
    drop(t);
    // A power loss keeps every edit (each is synced).
    ffs.crash();
    let (t, _) = load().unwrap();
    assert_eq!(t.checkpoint_state().1, &state[..]);
    drop(t);
    // Damage before the last edit is corruption.
    ffs.corrupt(&edits, 12, 0x01).unwrap();
    match load() {
        Err(Error::Corruption { file, offset, .. }) => {
            assert_eq!((file, offset), (edits.clone(), 0))
        }
        Err(e) => panic!("{e:?}"),
        Ok(_) => panic!("opened with a damaged edit"),
    }
    ffs.corrupt(&edits, 12, 0x01).unwrap();
    // (A torn last edit: `checkpoints_write_changed_buckets_and_recover_from_deltas`.)
    // Without the edit log: HASHMETA alone, as before it existed (the
    // bands after its checkpoint are replayed; GC judges retired bands
    // again).
    fs.remove(&dir().join(table::EDITS)).unwrap();
    let idx = HashIndex::open(dir(), fs.clone(), stats, o).unwrap();
    for k in 0..2000u64 {
        assert!(idx.get(&key(k), None).unwrap().is_some(), "key {k}");
    }
}

/// Blind puts through the engine, where the key-only LSM-tree says whether
/// a key is live: with the address memo off, overwrites read no record
/// back (the nodes' hash bits and the key's liveness name its node).
#[test]
fn engine_overwrites_read_no_record_back() {
    use crate::{Db, Options, Preset};
    let fs = Arc::new(MemFs::new());
    let o = Options {
        fs: fs.clone(),
        hash_memo_size: 0,
        ..Options::preset(Preset::FlashKey)
    };
    let db = Db::open("/db", o).unwrap();
    let k = |i: u32| format!("key{i:04}");
    for i in 0..200 {
        db.put(k(i), format!("first {i}")).unwrap();
    }
    let before = db.stats().unwrap().io.total_read();
    for round in 0..2 {
        for i in 0..200 {
            db.put(k(i), format!("round {round} {i}")).unwrap();
        }
    }
    assert_eq!(
        db.stats().unwrap().io.total_read(),
        before,
        "400 overwrites read nothing"
    );
    for i in 0..200 {
        assert_eq!(
            db.get(k(i)).unwrap(),
            Some(format!("round 1 {i}").into_bytes())
        );
    }
    assert_eq!(db.stats().unwrap().index_figures["hash_nodes"], 200);
}

/// Keys whose hashes collide in every bit the table keeps
/// ([`table::COLLIDING_PREFIX`]), mixed with ordinary keys, through the
/// engine: puts of new colliding keys beside live ones, overwrites,
/// deletes, puts after deletes, batches, GC, a reopen and a power loss,
/// each step checked against a model (gets and a scan).
#[test]
fn engine_keeps_keys_with_colliding_hashes_apart() {
    use crate::{Db, Options, Preset, ReadOptions, WriteBatch, WriteOptions};
    let fs = FaultFs::new();
    let o = Options {
        fs: Arc::new(fs.clone()),
        band_entries: 32,
        hash_checkpoint_bands: 4,
        write_buffer_size: 64 << 10,
        gc_garbage_ratio: 0.0,
        ..Options::preset(Preset::FlashKey)
    };
    let colliding = |i: u64| {
        let mut k = table::COLLIDING_PREFIX.to_vec();
        k.extend_from_slice(format!("{i:02}").as_bytes());
        k
    };
    let check = |db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>, when: &str| {
        for i in 0..12 {
            let k = colliding(i);
            assert_eq!(db.get(&k).unwrap().as_ref(), model.get(&k), "{when}: {i}");
        }
        for i in 0..20 {
            let k = key(i);
            assert_eq!(db.get(&k).unwrap().as_ref(), model.get(&k), "{when}: {i}");
        }
        let mut it = db.iter(&ReadOptions::default()).unwrap();
        it.seek_to_first();
        let mut seen = BTreeMap::new();
        while it.valid() {
            seen.insert(it.key().to_vec(), it.value().to_vec());
            it.next();
        }
        it.status().unwrap();
        assert_eq!(&seen, model, "{when}: scan");
    };
    let mut model = BTreeMap::new();
    let db = Db::open("/db", o.clone()).unwrap();
    // A new colliding key beside one live colliding key, then beside two,
    // then beside a delete token.
    for (i, v) in [(0, "a"), (1, "b"), (0, "c"), (2, "d"), (1, "e")] {
        db.put(colliding(i), v).unwrap();
        model.insert(colliding(i), v.as_bytes().to_vec());
        check(&db, &model, "steps");
    }
    db.delete(colliding(0)).unwrap();
    model.remove(&colliding(0));
    db.put(colliding(3), "f").unwrap();
    model.insert(colliding(3), b"f".to_vec());
    db.put(colliding(0), "g").unwrap();
    model.insert(colliding(0), b"g".to_vec());
    check(&db, &model, "after a delete");

    let mut rng = Rng(0x5eed);
    let mut step = |db: &Db, model: &mut BTreeMap<Vec<u8>, Vec<u8>>, n: u64, sync: bool| {
        let mut b = WriteBatch::new();
        let mut after = model.clone();
        for _ in 0..1 + rng.below(3) {
            let k = if rng.below(2) == 0 {
                colliding(rng.below(12))
            } else {
                key(rng.below(20))
            };
            if rng.below(4) == 0 {
                b.delete(&k).unwrap();
                after.remove(&k);
            } else {
                let v = value(rng.below(1000), n);
                b.put(&k, &v).unwrap();
                after.insert(k, v);
            }
        }
        db.write(&b, WriteOptions { sync }).unwrap();
        *model = after;
        if n % 50 == 49 {
            db.gc(None).unwrap();
        }
    };
    for n in 0..600 {
        step(&db, &mut model, n, false);
        if n % 100 == 99 {
            check(&db, &model, &format!("op {n}"));
        }
    }
    let st = db.stats().unwrap();
    assert!(st.value_store_figures["gc_runs"] > 0, "GC ran");
    db.close().unwrap();
    drop(db);
    let db = Db::open("/db", o.clone()).unwrap();
    check(&db, &model, "after reopen");
    for n in 600..900 {
        step(&db, &mut model, n, true);
    }
    check(&db, &model, "before the power loss");
    fs.crash();
    drop(db);
    let db = Db::open("/db", o).unwrap();
    check(&db, &model, "after the power loss");
    for n in 900..1000 {
        step(&db, &mut model, n, false);
    }
    check(&db, &model, "after more writes");
}

/// A bands state at replay position `(b, 0)`, nothing retired or invalid.
fn bands_state(b: u64) -> Vec<u8> {
    let mut v = vec![1u8];
    v.extend_from_slice(&b.to_le_bytes());
    v.extend_from_slice(&0u64.to_le_bytes());
    v.extend_from_slice(&0u32.to_le_bytes());
    v.extend_from_slice(&0u32.to_le_bytes());
    v
}

/// Checkpoints after the first append the changed buckets as delta
/// records and the changed page-map entries as an edit, not whole pages
/// and a whole `HASHMETA`; a reopen (and a power loss) rebuilds every page
/// from its last whole image and its deltas, in memory and disk mode.
#[test]
fn checkpoints_write_changed_buckets_and_recover_from_deltas() {
    for cache_pages in [usize::MAX, 4] {
        let ffs = Arc::new(FaultFs::new());
        let fs: Arc<dyn FileSystem> = ffs.clone();
        fs.create_dir_all(dir()).unwrap();
        let load = || {
            Table::open(
                dir(),
                fs.clone(),
                Arc::new(IoStats::default()),
                cache_pages,
                64,
            )
        };
        let (mut t, _) = load().unwrap();
        let mut rng = Rng(11);
        let ptr = |i: u64, round: u64| ValuePointer {
            file_id: i + 1,
            offset: round,
            length: 40,
            aux: 0,
        };
        // (h, fp, round of its newest pointer)
        let mut nodes: Vec<(u64, u32, u64)> = Vec::new();
        for i in 0..4000u64 {
            let (h, fp) = (rng.next(), rng.next() as u32);
            t.insert(h, fp, ptr(i, 0)).unwrap();
            nodes.push((h, fp, 0));
        }
        t.checkpoint((1, 0), bands_state(1)).unwrap();
        let meta_path = dir().join(table::META);
        let edits = dir().join(table::EDITS);
        let pages_file = || {
            let name = fs
                .list(dir())
                .unwrap()
                .into_iter()
                .find(|n| n.starts_with("hash-"));
            dir().join(name.unwrap())
        };
        let pages = pages_file();
        let meta_len = ffs.file_len(&meta_path).unwrap();
        let pages_len = ffs.file_len(&pages).unwrap();
        let check = |t: &mut Table, nodes: &[(u64, u32, u64)], round: u64| {
            assert_eq!(
                t.checkpoint_state(),
                ((round + 1, 0), &bands_state(round + 1)[..])
            );
            assert_eq!(t.figures().nodes, nodes.len() as u64);
            for (i, &(h, fp, r)) in nodes.iter().enumerate() {
                let c = t.candidates(h, fp).unwrap();
                assert_eq!(c.len(), 1, "node {i}");
                assert_eq!(c[0].ptr, ptr(i as u64, r), "node {i} after round {round}");
            }
            let (n, faults) = t.page_check().run();
            assert!(n > 0 && faults.is_empty(), "{faults:?}");
        };
        for round in 1..=20u64 {
            for _ in 0..5 {
                let i = rng.below(nodes.len() as u64) as usize;
                let (h, _, r) = nodes[i];
                assert!(t
                    .replace(h, &ptr(i as u64, r), ptr(i as u64, round))
                    .unwrap());
                nodes[i].2 = round;
            }
            t.checkpoint((round + 1, 0), bands_state(round + 1))
                .unwrap();
            if round % 10 == 0 {
                drop(t);
                t = load().unwrap().0;
                check(&mut t, &nodes, round);
            }
        }
        // 100 changed buckets: their deltas, far less than the 100 pages
        // (of about 60 nodes each) whole checkpoints would have appended.
        let grown = ffs.file_len(&pages).unwrap() - pages_len;
        assert!(
            grown * 2 < pages_len,
            "cache {cache_pages}: {grown} bytes of pages for 100 changes (table {pages_len})"
        );
        assert_eq!(
            ffs.file_len(&meta_path).unwrap(),
            meta_len,
            "HASHMETA rewritten"
        );
        assert!(fs.exists(&edits));
        // Every checkpoint is synced: a power loss keeps the last one.
        drop(t);
        ffs.crash();
        let (mut t, _) = load().unwrap();
        check(&mut t, &nodes, 20);

        // Deltas appended, the marker torn or never synced: the previous
        // checkpoint stays, and its pages read as they were.
        let changed: Vec<usize> = (0..5)
            .map(|_| rng.below(nodes.len() as u64) as usize)
            .collect();
        for &i in &changed {
            let (h, _, r) = nodes[i];
            if t.replace(h, &ptr(i as u64, r), ptr(i as u64, 99)).unwrap() {
                // A node drawn twice was replaced the first time.
            }
        }
        ffs.add_rule(crate::fs::FaultRule {
            op: crate::fs::FaultOp::Sync,
            path_contains: Some(table::EDITS.into()),
            skip: 0,
            times: None,
            kind: crate::fs::FaultKind::Eio,
        });
        assert!(t.checkpoint((50, 0), bands_state(50)).is_err());
        ffs.clear_rules();
        drop(t);
        ffs.crash();
        let (mut t, _) = load().unwrap();
        check(&mut t, &nodes, 20);
        drop(t);
        // A marker cut short at the end of the log is passed over.
        let (mut t, _) = load().unwrap();
        for &i in &changed {
            let (h, _, r) = nodes[i];
            t.replace(h, &ptr(i as u64, r), ptr(i as u64, 21)).unwrap();
        }
        let log_len = ffs.file_len(&edits).unwrap();
        t.checkpoint((21, 0), bands_state(21)).unwrap();
        drop(t);
        let (t2, _) = load().unwrap();
        assert_eq!(t2.checkpoint_state().0, (21, 0));
        drop(t2);
        ffs.truncate(&edits, ffs.file_len(&edits).unwrap() - 3)
            .unwrap();
        let (mut t, _) = load().unwrap();
        check(&mut t, &nodes, 20);
        assert!(log_len > 0 && !fs.exists(&edits), "the torn log is folded");
        // A damaged delta record is corruption at its place, never a
        // wrong node.
        let pages = pages_file();
        for &i in &changed {
            let (h, _, r) = nodes[i];
            t.replace(h, &ptr(i as u64, r), ptr(i as u64, 21)).unwrap();
        }
        t.checkpoint((21, 0), bands_state(21)).unwrap();
        drop(t);
        let end = ffs.file_len(&pages).unwrap();
        ffs.corrupt(&pages, end - 10, 0x40).unwrap();
        // (Open reads the records the edit log's checkpoints name.)
        let faults = match load() {
            Ok((t, _)) => t.page_check().run().1,
            Err(e) => vec![e],
        };
        assert!(
            faults
                .iter()
                .any(|e| matches!(e, Error::Corruption { file, .. } if *file == pages)),
            "{faults:?}"
        );
    }
}

/// When deltas pass the bound, a page is written whole again, and the
/// page file's rewrite folds every chain into whole pages.
#[test]
fn delta_chains_are_bounded_and_folded_by_the_rewrite() {
    let ffs = Arc::new(FaultFs::new());
    let fs: Arc<dyn FileSystem> = ffs.clone();
    fs.create_dir_all(dir()).unwrap();
    let load = || {
        Table::open(
            dir(),
            fs.clone(),
            Arc::new(IoStats::default()),
            usize::MAX,
            1,
        )
    };
    let (mut t, _) = load().unwrap();
    // One page: every change lands on it.
    let h = |n: u64| n % 64;
    let ptr = |n: u64, r: u64| ValuePointer {
        file_id: n + 1,
        offset: r,
        length: 10,
        aux: 0,
    };
    for n in 0..40u64 {
        t.insert(h(n), n as u32, ptr(n, 0)).unwrap();
    }
    t.checkpoint((1, 0), bands_state(1)).unwrap();
    let pages = dir().join("hash-000001.pages");
    let whole = ffs.file_len(&pages).unwrap();
    let mut sizes = Vec::new();
    for r in 1..=30u64 {
        let before = ffs.file_len(&pages).unwrap_or(0);
        let n = r % 40;
        let last = (r - 1) / 40;
        assert!(t.replace(h(n), &ptr(n, last), ptr(n, r)).unwrap());
        t.checkpoint((r + 1, 0), bands_state(r + 1)).unwrap();
        if let Some(after) = ffs.file_len(&pages) {
            if after > before {
                sizes.push(after - before);
            }
        }
        let (mut t2, _) = load().unwrap();
        for m in 0..40u64 {
            let want = if m >= 1 && m <= r {
                ptr(m, m)
            } else {
                ptr(m, 0)
            };
            let c = t2.candidates(h(m), m as u32).unwrap();
            assert_eq!(
                c.iter().map(|x| x.ptr).collect::<Vec<_>>(),
                vec![want],
                "round {r}"
            );
        }
    }
    // Small deltas, and now and then the page whole (at most eight deltas
    // in a row, or a rewrite of the file).
    let big = sizes.iter().filter(|&&s| s * 2 > whole).count();
    let small = sizes.iter().filter(|&&s| s * 4 < whole).count();
    assert!(big >= 3 && small >= 20, "{sizes:?} (page {whole})");
}
