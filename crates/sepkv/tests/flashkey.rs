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

/// Overwrites only, after the keys are in: the key-only LSM-tree then sees
/// no writes and its memtable stays empty, which must not keep its replay
/// checkpoint — and so every band after it — from moving. With 2 MiB of
/// room, 200 keys of about 1 KiB (200 KB live) and 8 MB of overwrites, GC
/// must keep making room; nothing is refused as `ValueStoreFull`.
#[test]
fn overwrites_alone_never_fill_the_bands() {
    for mode in [HashIndexMode::Memory, HashIndexMode::Disk] {
        let fs = Arc::new(MemFs::new());
        let o = Options {
            value_capacity: Some(2 << 20),
            ..opts(&fs, mode)
        };
        let db = Db::open("/db", o).unwrap();
        let val = |i: u32, r: u32| format!("{i}-{r}-{}", "v".repeat(1000)).into_bytes();
        for r in 0..40u32 {
            for i in 0..200u32 {
                db.put(format!("key{i:04}"), val(i, r))
                    .unwrap_or_else(|e| panic!("{mode:?}: round {r}, key {i}: {e}"));
            }
        }
        for i in 0..200u32 {
            assert_eq!(db.get(format!("key{i:04}")).unwrap(), Some(val(i, 39)));
        }
        assert_eq!(scan(&db, None).len(), 200);
        db.close().unwrap();
    }
}

/// Where [`GateFs`] holds a GC step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gate {
    Open,
    Armed,
    Holding,
}

type GateCell = Arc<(std::sync::Mutex<Gate>, std::sync::Condvar)>;

/// A `MemFs` that, while armed, stops the thread named `gated-gc` at its
/// first read of a band file — a GC step that has picked its band and is
/// about to read it — until the test opens the gate.
struct GateFs {
    inner: MemFs,
    gate: GateCell,
}

struct GateFile {
    inner: Box<dyn sepkv::fs::RandomAccessFile>,
    gate: Option<GateCell>,
}

impl sepkv::fs::RandomAccessFile for GateFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        if let Some(g) = &self.gate {
            if std::thread::current().name() == Some("gated-gc") {
                let mut st = g.0.lock().unwrap();
                if *st == Gate::Armed {
                    *st = Gate::Holding;
                    g.1.notify_all();
                    while *st == Gate::Holding {
                        st = g.1.wait(st).unwrap();
                    }
                }
            }
        }
        self.inner.read_at(offset, buf)
    }
    fn len(&self) -> std::io::Result<u64> {
        self.inner.len()
    }
}

impl GateFs {
    fn set(&self, to: Gate) {
        *self.gate.0.lock().unwrap() = to;
        self.gate.1.notify_all();
    }

    fn wait_until_holding(&self) {
        let mut st = self.gate.0.lock().unwrap();
        while *st != Gate::Holding {
            st = self.gate.1.wait(st).unwrap();
        }
    }
}

impl sepkv::fs::FileSystem for GateFs {
    fn create(&self, p: &std::path::Path) -> std::io::Result<Box<dyn sepkv::fs::WritableFile>> {
        self.inner.create(p)
    }
    fn open_append(
        &self,
        p: &std::path::Path,
    ) -> std::io::Result<Box<dyn sepkv::fs::WritableFile>> {
        self.inner.open_append(p)
    }
    fn open_read(
        &self,
        p: &std::path::Path,
    ) -> std::io::Result<Box<dyn sepkv::fs::RandomAccessFile>> {
        let band = p.extension().is_some_and(|e| e == "band");
        Ok(Box::new(GateFile {
            inner: self.inner.open_read(p)?,
            gate: band.then(|| self.gate.clone()),
        }))
    }
    fn exists(&self, p: &std::path::Path) -> bool {
        self.inner.exists(p)
    }
    fn is_dir(&self, p: &std::path::Path) -> bool {
        self.inner.is_dir(p)
    }
    fn list(&self, d: &std::path::Path) -> std::io::Result<Vec<String>> {
        self.inner.list(d)
    }
    fn remove(&self, p: &std::path::Path) -> std::io::Result<()> {
        self.inner.remove(p)
    }
    fn rename(&self, a: &std::path::Path, b: &std::path::Path) -> std::io::Result<()> {
        self.inner.rename(a, b)
    }
    fn create_dir_all(&self, d: &std::path::Path) -> std::io::Result<()> {
        self.inner.create_dir_all(d)
    }
    fn sync_dir(&self, d: &std::path::Path) -> std::io::Result<()> {
        self.inner.sync_dir(d)
    }
    fn file_size(&self, p: &std::path::Path) -> std::io::Result<u64> {
        self.inner.file_size(p)
    }
    fn truncate_synced(&self, p: &std::path::Path, len: u64) -> std::io::Result<()> {
        self.inner.truncate_synced(p, len)
    }
    fn lock(&self, p: &std::path::Path) -> std::io::Result<Box<dyn sepkv::fs::FileLock>> {
        self.inner.lock(p)
    }
}

/// A write that supersedes the last live record of the band a GC step has
/// picked, before the step reads and judges the band: the step finds every
/// record dead and moves none, and must still keep the band for a snapshot
/// older than that write, which walks back to the record in it. (The step
/// used to free the band by the invalidity it read when it picked the band,
/// from before the write: the snapshot then lost the key.) The gate holds
/// the step between its pick and its read, so the order is fixed.
#[test]
fn gc_keeps_a_band_a_write_during_the_step_made_dead_for_older_snapshots() {
    let fs = Arc::new(GateFs {
        inner: MemFs::new(),
        gate: Arc::new((std::sync::Mutex::new(Gate::Open), std::sync::Condvar::new())),
    });
    let o = Options {
        fs: fs.clone(),
        band_entries: 4,
        hash_checkpoint_bands: 1,
        // No background GC: only the gated step collects.
        gc_garbage_ratio: 0.99,
        ..Options::preset(Preset::FlashKey)
    };
    let db = Arc::new(Db::open("/db", o).unwrap());
    let v = |s: &str| format!("{s}-{}", "p".repeat(300)).into_bytes();
    // Band 1: k and three fillers. The fillers are overwritten into band 2,
    // which the fourth put closes: band 1 holds one live record, k.
    for k in ["k", "f1", "f2", "f3"] {
        db.put(k, v(k)).unwrap();
    }
    for k in ["f1", "f2", "f3", "g"] {
        db.put(k, v(&format!("{k}-new"))).unwrap();
    }
    // Both replay checkpoints past band 1, so that GC may take it.
    db.flush().unwrap();
    let snap = db.snapshot().unwrap();
    fs.set(Gate::Armed);
    let gc = {
        let db = db.clone();
        std::thread::Builder::new()
            .name("gated-gc".into())
            .spawn(move || db.gc(None).unwrap())
            .unwrap()
    };
    // The step has picked band 1 (all its garbage was made before the
    // snapshot) and waits at its read.
    fs.wait_until_holding();
    db.put("k", v("k-new")).unwrap();
    fs.set(Gate::Open);
    let rep = gc.join().unwrap();
    assert!(rep.steps >= 1 && rep.bytes_read > 0, "{rep:?}");
    assert_eq!(snap.get("k").unwrap(), Some(v("k")), "at the snapshot");
    let at_snap: Vec<_> = scan(&db, Some(&snap));
    let keys: Vec<&[u8]> = at_snap.iter().map(|(k, _)| k.as_slice()).collect();
    assert_eq!(keys, [&b"f1"[..], b"f2", b"f3", b"g", b"k"]);
    assert_eq!(at_snap[4].1, v("k"));
    assert_eq!(db.get("k").unwrap(), Some(v("k-new")));
    drop(snap);
    // Once the snapshot is gone, the band goes.
    db.gc(None).unwrap();
    assert_eq!(db.get("k").unwrap(), Some(v("k-new")));
    assert!(db.verify().unwrap().faults.is_empty());
}

/// On a real directory, closed bands are read through mappings (the
/// default `mmap_reads`): values read back right through GC deleting
/// mapped bands while a reader thread reads beside the writer, and after
/// a reopen.
#[test]
fn mapped_bands_serve_reads_through_gc_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let opts = || Options {
        band_bytes: 16 << 10,
        hash_checkpoint_bands: 4,
        write_buffer_size: 64 << 10,
        gc_garbage_ratio: 0.2,
        ..Options::preset(Preset::FlashKey)
    };
    let key = |i: u32| format!("key{i:04}").into_bytes();
    let value = |i: u32, round: u32| format!("{i:04}-{round}-{}", "v".repeat(300)).into_bytes();
    let mut model: BTreeMap<u32, u32> = BTreeMap::new();
    let mut freed = 0;
    {
        let db = Db::open(dir.path(), opts()).unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut n = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let i = (n * 31) % 400;
                    if let Some(v) = db.get(key(i)).unwrap() {
                        assert!(v.starts_with(format!("{i:04}-").as_bytes()), "key {i}");
                    }
                    n = n.wrapping_add(1);
                }
            });
            for round in 0..12u32 {
                for i in 0..400u32 {
                    let i = (i * 17 + round) % 400;
                    db.put(key(i), value(i, round)).unwrap();
                    model.insert(i, round);
                }
                if round % 3 == 2 {
                    freed += db.gc(None).unwrap().bytes_freed;
                }
                for (&i, &r) in model.iter().step_by(7) {
                    assert_eq!(db.get(key(i)).unwrap(), Some(value(i, r)), "round {round}");
                }
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
    }
    assert!(freed > 0, "GC deleted bands");
    let db = Db::open(dir.path(), opts()).unwrap();
    for (&i, &r) in &model {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i, r)), "after reopen");
    }
}

/// A TTL-style churn (FlashKey §V-B5): each round writes keys never seen
/// before, deletes them and runs GC. Collecting a band drops its delete
/// tokens and, with each, the key's hash-table node: the table holds at
/// most the nodes of the tokens GC could not reach yet (the bands after
/// the replay checkpoints), and the database stops growing. The same after
/// a reopen and after a power loss.
#[test]
fn churn_deletes_leave_the_hash_table() {
    use sepkv::fs::FaultFs;
    const KEYS: u32 = 1000;
    const ROUNDS: u32 = 30;
    let fs = FaultFs::new();
    let o = Options {
        fs: Arc::new(fs.clone()),
        band_bytes: 32 << 10,
        hash_checkpoint_bands: 4,
        write_buffer_size: 64 << 10,
        gc_garbage_ratio: 0.0,
        ..Options::preset(Preset::FlashKey)
    };
    let nodes = |db: &Db| db.stats().unwrap().index_figures["hash_nodes"];
    let value = vec![b'v'; 300];
    let db = Db::open("/db", o.clone()).unwrap();
    // The page file is append-only and rewritten once it passes four times
    // the live pages plus 4 MiB: bounded, but not flat at this size.
    let page_file = |st: &sepkv::DbStats| {
        st.files
            .iter()
            .find(|g| g.kind == "sstables")
            .map_or(0, |g| g.allocated_bytes)
    };
    let outside_pages = |st: &sepkv::DbStats| st.disk_bytes - page_file(st);
    let (mut disk_at_10, mut disk_at_30) = (0, 0);
    for round in 0..ROUNDS {
        for i in 0..KEYS {
            db.put(format!("r{round:03}-k{i:05}"), &value).unwrap();
        }
        for i in 0..KEYS {
            db.delete(format!("r{round:03}-k{i:05}")).unwrap();
        }
        for _ in 0..4 {
            db.gc(None).unwrap();
        }
        // How many bands lie after the replay checkpoints varies from
        // round to round: the most of rounds 5 to 15 against the most of
        // rounds 20 to 30.
        let now = outside_pages(&db.stats().unwrap());
        if (4..15).contains(&round) {
            disk_at_10 = disk_at_10.max(now);
        } else if round >= 19 {
            disk_at_30 = disk_at_30.max(now);
        }
    }
    let st = db.stats().unwrap();
    let dropped = st.value_store_figures["gc_tombstones_dropped"];
    assert!(
        dropped >= u64::from(KEYS * (ROUNDS - 2)),
        "only {dropped} delete tokens dropped"
    );
    assert!(
        nodes(&db) <= u64::from(KEYS),
        "{} nodes left after {} keys written and deleted",
        nodes(&db),
        KEYS * ROUNDS
    );
    assert!(
        disk_at_30 * 10 <= disk_at_10 * 11,
        "the bands grew from at most {disk_at_10} bytes in rounds 5-15 to {disk_at_30} in rounds 20-30"
    );
    let live_pages = st.index_figures["hash_buckets"] / 64;
    assert!(
        page_file(&st) <= (4 << 20) + 5 * live_pages * 8192,
        "page file of {} bytes for {live_pages} pages",
        page_file(&st)
    );
    let left = nodes(&db);
    db.close().unwrap();
    drop(db);

    // Reopen: the checkpoint holds no more nodes than the table did.
    let db = Db::open("/db", o.clone()).unwrap();
    assert!(
        nodes(&db) <= left,
        "{} nodes after reopen, {left} before",
        nodes(&db)
    );
    for i in (0..KEYS).step_by(97) {
        assert_eq!(db.get(format!("r{:03}-k{i:05}", ROUNDS - 1)).unwrap(), None);
    }
    // More churn, then a power loss in the middle of it: recovery replays
    // the relocation records that removed nodes.
    for round in ROUNDS..ROUNDS + 3 {
        for i in 0..KEYS {
            db.put(format!("r{round:03}-k{i:05}"), &value).unwrap();
        }
        for i in 0..KEYS {
            db.delete(format!("r{round:03}-k{i:05}")).unwrap();
        }
        db.gc(None).unwrap();
    }
    // The deletes are durable from here (a synced write makes every
    // earlier one durable); what follows may be lost.
    let mut synced = WriteBatch::new();
    synced.put("synced", &value).unwrap();
    db.write(&synced, WriteOptions { sync: true }).unwrap();
    db.put("after", &value).unwrap();
    fs.crash();
    drop(db);
    let db = Db::open("/db", o).unwrap();
    assert!(
        nodes(&db) <= u64::from(2 * KEYS),
        "{} nodes after a crash",
        nodes(&db)
    );
    for round in [0, ROUNDS - 1, ROUNDS + 2] {
        for i in (0..KEYS).step_by(89) {
            let k = format!("r{round:03}-k{i:05}");
            assert_eq!(db.get(&k).unwrap(), None, "{k} after a crash");
        }
    }
    for _ in 0..4 {
        db.gc(None).unwrap();
    }
    assert!(
        nodes(&db) <= u64::from(KEYS),
        "{} nodes after GC",
        nodes(&db)
    );
}

/// Loads `KEYS` keys of 500 bytes into bands of 64 KiB under
/// over-provisioning `op` and space target `target`, then overwrites random
/// keys ten times over; returns the open database.
fn overwritten_bands(op: f64, target: f64) -> Db {
    const KEYS: u64 = 4000;
    let o = Options {
        fs: Arc::new(MemFs::new()),
        band_bytes: 64 << 10,
        hash_checkpoint_bands: 2,
        write_buffer_size: 64 << 10,
        band_over_provisioning: op,
        space_amp_target: target,
        ..Options::preset(Preset::FlashKey)
    };
    let db = Db::open("/db", o).unwrap();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..KEYS {
        db.put(format!("k{i:05}"), "v".repeat(500)).unwrap();
    }
    for n in 0..10 * KEYS {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let k = format!("k{:05}", x % KEYS);
        db.put(k, format!("{n}-{}", "v".repeat(500))).unwrap();
    }
    db
}

/// The bands' space bound feeds the writers' pacer: under sustained
/// overwrites writers are slowed down as the bands near the bound, a
/// write is held for one GC step at most, and the bands stay near it.
#[test]
fn the_band_bound_paces_writers() {
    let db = overwritten_bands(0.3, f64::INFINITY);
    let s = db.stats().unwrap();
    assert!(s.space_slowdowns > 0, "no write was paced: {s:?}");
    assert!(
        s.write_gc_steps_max <= 1,
        "held for {} steps",
        s.write_gc_steps_max
    );
    let amp = s.value_store.file_bytes as f64 / s.value_store.live_bytes as f64;
    // The slack of `over_provisioning_bounds_the_bands`.
    assert!(amp <= 1.3 + 0.2, "the bands take {amp:.2}× live");
    db.close().unwrap();
}

/// Over-provisioning (FlashKey §VI: band capacity = live × (1 + OP)) bounds
/// the band files per live byte under overwrites, with the space target
/// the bound when it is tighter; with neither, the bands drift to the
/// garbage ratio's trigger.
#[test]
fn over_provisioning_bounds_the_bands() {
    let run = |op: f64, target: f64| -> f64 {
        let db = overwritten_bands(op, target);
        let sp = db.stats().unwrap().value_store;
        let amp = sp.file_bytes as f64 / sp.live_bytes as f64;
        db.close().unwrap();
        amp
    };
    // Slack: one band past the bound before writers help, the bands after
    // the replay checkpoints (the key tree's lags by up to 4 bands of
    // 64 KiB) against about 2 MB live, and whole blocks.
    let slack = 0.2;
    let a = run(0.3, f64::INFINITY);
    assert!(a <= 1.3 + slack, "OP 0.3: the bands take {a:.2}× live");
    let b = run(0.5, 1.2);
    assert!(b <= 1.2 + slack, "OP 0.5, target 1.2: {b:.2}× live");
    let c = run(f64::INFINITY, f64::INFINITY);
    assert!(c > 1.6, "no bound: {c:.2}× live (the garbage ratio's 2.0)");
    let bad = Options {
        band_over_provisioning: 0.0,
        ..Options::preset(Preset::FlashKey)
    };
    let err = Db::open(
        "/nowhere",
        Options {
            fs: Arc::new(MemFs::new()),
            ..bad
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("band_over_provisioning"), "{err}");
}

/// `stats().files` and `disk_bytes` count the key tree's files in `keys/`
/// (as `sstables`), not only the files at the top of the directory.
#[test]
fn stats_count_the_key_trees_files() {
    use sepkv::fs::FileSystem;
    let fs = Arc::new(MemFs::new());
    let db = Db::open("/db", opts(&fs, HashIndexMode::Memory)).unwrap();
    for i in 0..3000u32 {
        db.put(format!("k{i:06}"), vec![b'v'; 100]).unwrap();
    }
    db.flush().unwrap();
    db.wait_idle().unwrap();
    let in_keys = fs.list("/db/keys".as_ref()).unwrap();
    assert!(
        in_keys.iter().any(|n| n.ends_with(".sst")),
        "no key-tree table in keys/: {in_keys:?}"
    );
    let keys_bytes: u64 = in_keys
        .iter()
        .map(|n| {
            fs.allocated_size(&std::path::Path::new("/db/keys").join(n))
                .unwrap()
        })
        .sum();
    let top: Vec<String> = fs.list("/db".as_ref()).unwrap();
    let top_files = top
        .iter()
        .filter(|n| !fs.is_dir(&std::path::Path::new("/db").join(n)))
        .count();
    let st = db.stats().unwrap();
    let counted: u64 = st.files.iter().map(|g| g.files).sum();
    assert_eq!(
        counted,
        (top_files + in_keys.len()) as u64,
        "{:?}",
        st.files
    );
    let sstables = st.files.iter().find(|g| g.kind == "sstables").unwrap();
    assert!(sstables.allocated_bytes >= keys_bytes, "{:?}", st.files);
    assert!(st.disk_bytes >= keys_bytes, "{st:?}");
}

/// Zipf-0.99 overwrites (HashKV's update experiment in small) at the
/// default over-provisioning of 0.5: GC copies the records it finds live
/// to bands of their own, so the cold records it moved once are not mixed
/// with the hot ones again and copied over and over. With the copies in
/// the band of user writes GC copied 1.25 bytes per user byte here, with
/// bands of their own 0.84 (the paper's model for uniform updates at this
/// over-provisioning gives 0.72; the bands after the replay checkpoints,
/// a tenth of the data here, are out of GC's reach).
#[test]
fn zipf_overwrites_copy_cold_records_rarely() {
    const KEYS: usize = 4000;
    const VALUE: usize = 500;
    let o = Options {
        fs: Arc::new(MemFs::new()),
        band_bytes: 64 << 10,
        hash_checkpoint_bands: 2,
        write_buffer_size: 64 << 10,
        ..Options::preset(Preset::FlashKey)
    };
    let db = Db::open("/db", o).unwrap();
    for i in 0..KEYS {
        db.put(format!("k{i:05}"), vec![b'v'; VALUE]).unwrap();
    }
    // Zipf(0.99) by inverting its cumulative weights.
    let mut cdf = Vec::with_capacity(KEYS);
    let mut sum = 0.0;
    for r in 1..=KEYS {
        sum += 1.0 / (r as f64).powf(0.99);
        cdf.push(sum);
    }
    let before = db.stats().unwrap();
    let fig = |s: &sepkv::DbStats, n: &str| s.value_store_figures.get(n).copied().unwrap_or(0);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let updates = 10 * KEYS;
    for n in 0..updates {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let u = (x >> 11) as f64 / (1u64 << 53) as f64 * sum;
        let rank = cdf.partition_point(|&c| c < u).min(KEYS - 1);
        // Hot keys spread over the key space, as a hash would.
        let k = (rank * 2_654_435_761) % KEYS;
        db.put(
            format!("k{k:05}"),
            format!("{n:08}{}", "v".repeat(VALUE - 8)),
        )
        .unwrap();
    }
    let after = db.stats().unwrap();
    let user = (after.user_bytes_written - before.user_bytes_written) as f64;
    let copies = (fig(&after, "gc_bytes_rewritten") - fig(&before, "gc_bytes_rewritten")) as f64;
    assert!(fig(&after, "gc_runs") > 0, "GC never ran");
    let per_user = copies / user;
    let sp = after.value_store;
    let amp = sp.file_bytes as f64 / sp.live_bytes as f64;
    eprintln!("GC copies per user byte {per_user:.3}, bands {amp:.2}× live");
    assert!(
        per_user < 0.95,
        "GC copied {per_user:.2} bytes per user byte"
    );
    // The bound of `over_provisioning_bounds_the_bands`, with its slack.
    assert!(amp <= 1.5 + 0.2, "the bands take {amp:.2}× live");
    db.close().unwrap();
}
