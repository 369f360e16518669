//! Checkpoints (`Db::checkpoint`) under load, for every preset (and
//! `wisckey` in log mode), on the operating system's file system.
//!
//! Three writer threads write random keys (small and separated values,
//! deletes, batches) and log each entry with its sequence number; a
//! fourth thread runs GC and range compactions; the main thread takes
//! three checkpoints meanwhile. Then the source runs a full GC pass and a
//! full compaction and takes more writes. Each checkpoint must then open
//! at exactly the sequence number `checkpoint` returned, pass `verify`, and
//! read value for value — by `get` of every key ever written and by a full
//! scan — the state the write log gives at that sequence number. Hard links
//! must have been used for SSTables (every preset but `lwc`, whose DTables
//! are appended to and are copied).
//!
//! `SEPKV_CHECKPOINT_MILLIS` sets how long the writers run before each
//! checkpoint (default 150).

mod common;
use common::run_cmd;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sepkv::{Db, Options, Preset, WriteBatch, WriteOptions};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const KEYS: u64 = 1500;

fn opts(preset: Preset, wal: bool) -> Options {
    Options {
        wal,
        value_threshold: 64,
        vlog_file_size: 1 << 20,
        gc_chunk_size: 16 << 10,
        gc_garbage_ratio: 0.2,
        write_buffer_size: 64 << 10,
        target_file_size: 64 << 10,
        max_bytes_for_level_base: 256 << 10,
        block_size: 1024,
        l0_compaction_trigger: 2,
        trie_table_size: 128 << 10,
        trie_roll_size: 64 << 10,
        band_entries: 32,
        hash_checkpoint_bands: 2,
        ..Options::preset(preset)
    }
}

/// `(sequence number, key, value or None for a delete)` of every entry.
type Log = Vec<(u64, Vec<u8>, Option<Vec<u8>>)>;

fn key(i: u64) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn writer(db: &Db, seed: u64, stop: &AtomicBool, log: &Mutex<Log>) {
    let mut rng = StdRng::seed_from_u64(seed);
    while !stop.load(Ordering::Relaxed) {
        let n = rng.gen_range(1..=4);
        let mut b = WriteBatch::new();
        let mut entries = Vec::new();
        for _ in 0..n {
            let k = key(rng.gen_range(0..KEYS));
            if rng.gen_ratio(1, 8) {
                b.delete(&k).unwrap();
                entries.push((k, None));
            } else {
                let len = if rng.gen_bool(0.5) {
                    rng.gen_range(1..40)
                } else {
                    rng.gen_range(100..1500)
                };
                let v: Vec<u8> = (0..len).map(|_| rng.gen::<u8>()).collect();
                b.put(&k, &v).unwrap();
                entries.push((k, Some(v)));
            }
        }
        let sync = rng.gen_ratio(1, 20);
        let last = db.write_with_sequence(&b, WriteOptions { sync }).unwrap();
        let first = last + 1 - n as u64;
        let mut l = log.lock().unwrap();
        for (j, (k, v)) in entries.into_iter().enumerate() {
            l.push((first + j as u64, k, v));
        }
    }
}

fn state_at(log: &Log, seq: u64) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut sorted: Vec<_> = log.iter().filter(|e| e.0 <= seq).collect();
    sorted.sort_by_key(|e| e.0);
    let mut m = BTreeMap::new();
    for (_, k, v) in sorted {
        match v {
            Some(v) => m.insert(k.clone(), v.clone()),
            None => m.remove(k),
        };
    }
    m
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sepkv-ckpt-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Allocated bytes under `dirs`, each hard-linked file counted once. The
/// source is live: a file removed while it is counted is skipped.
pub fn du(dirs: &[&Path]) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut seen = std::collections::HashSet::new();
    let mut total = 0;
    let mut stack: Vec<PathBuf> = dirs.iter().map(|d| d.to_path_buf()).collect();
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let Ok(m) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if m.is_dir() {
                stack.push(p);
            } else if seen.insert((m.dev(), m.ino())) {
                total += m.blocks() * 512;
            }
        }
    }
    total
}

fn run(preset: Preset, wal: bool) {
    let _serial = common::serial();
    let name = format!("{preset}{}", if wal { "" } else { "-nowal" });
    let base = tmp(&name);
    let src = base.join("db");
    let db = Arc::new(Db::open(&src, opts(preset, wal)).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let log = Arc::new(Mutex::new(Log::new()));
    let mut threads = Vec::new();
    for t in 0..3u64 {
        let (db, stop, log) = (db.clone(), stop.clone(), log.clone());
        threads.push(std::thread::spawn(move || writer(&db, t, &stop, &log)));
    }
    {
        let (db, stop) = (db.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let mut i = 0u32;
            while !stop.load(Ordering::Relaxed) {
                db.gc(Some(0.1)).unwrap();
                if i.is_multiple_of(4) {
                    db.compact_range(..).unwrap();
                }
                i += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
        }));
    }
    let millis = std::env::var("SEPKV_CHECKPOINT_MILLIS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(150);
    let mut checkpoints = Vec::new();
    for i in 0..3 {
        std::thread::sleep(Duration::from_millis(millis));
        let dir = base.join(format!("ckpt{i}"));
        let rep = db.checkpoint_report(&dir).unwrap();
        // Space right after the checkpoint: linked SSTables are shared.
        eprintln!(
            "{name}: checkpoint {i} at sequence {}: {} file(s) linked ({} KiB), {} copied \
             ({} KiB); on disk: source {} KiB, checkpoint {} KiB, both together {} KiB",
            rep.sequence,
            rep.linked_files,
            rep.linked_bytes / 1024,
            rep.copied_files,
            rep.copied_bytes / 1024,
            du(&[&src]) / 1024,
            du(&[&dir]) / 1024,
            du(&[&src, &dir]) / 1024
        );
        if preset != Preset::Lwc && rep.linked_files == 0 {
            // Not an error before the first flush; later ones must link.
            assert!(i == 0, "{name}: no SSTable was linked: {rep:?}");
        }
        if preset == Preset::Lwc {
            assert_eq!(rep.linked_files, 0, "{name}: DTables must be copied");
        }
        checkpoints.push((dir, rep.sequence));
    }
    // An existing directory is refused.
    assert!(db.checkpoint(&checkpoints[0].0).is_err());
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    // Later work on the source must not reach into the checkpoints.
    db.gc(None).unwrap();
    db.compact_range(..).unwrap();
    for i in 0..200 {
        db.put(key(i), vec![9u8; 700]).unwrap();
    }
    db.flush().unwrap();
    db.gc(None).unwrap();
    let log = log.lock().unwrap();
    for (dir, seq) in &checkpoints {
        let want = state_at(&log, *seq);
        let c = Db::open(dir, Options::default()).unwrap();
        assert_eq!(c.recovered_sequence(), *seq, "{name}: {}", dir.display());
        for i in 0..KEYS {
            let k = key(i);
            assert_eq!(
                c.get(&k).unwrap().as_ref(),
                want.get(&k),
                "{name}: key {i} at sequence {seq}"
            );
        }
        let got: BTreeMap<_, _> = c.scan(.., false).unwrap().map(|r| r.unwrap()).collect();
        assert!(got == want, "{name}: scan at sequence {seq} differs");
        let rep = c.verify().unwrap();
        assert!(rep.faults.is_empty(), "{name}: {:?}", rep.faults);
    }
    let (last, _) = checkpoints.last().unwrap();
    eprintln!(
        "{name}: source {} KiB, last checkpoint {} KiB alone, both together {} KiB",
        du(&[&src]) / 1024,
        du(&[last]) / 1024,
        du(&[&src, last]) / 1024
    );
    drop(db);
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn checkpoint_leveldb() {
    run(Preset::LevelDb, true);
}

#[test]
fn checkpoint_wisckey() {
    run(Preset::WiscKey, true);
}

#[test]
fn checkpoint_wisckey_log_mode() {
    run(Preset::WiscKey, false);
}

#[test]
fn checkpoint_hashkv() {
    run(Preset::HashKv, true);
}

#[test]
fn checkpoint_ktstore() {
    run(Preset::KtStore, true);
}

#[test]
fn checkpoint_flashkey() {
    run(Preset::FlashKey, false);
}

#[test]
fn checkpoint_lwc() {
    run(Preset::Lwc, true);
}

/// A checkpoint into another file system (a tmpfs the test mounts, where
/// the machine allows it) cannot link: every SSTable is copied instead,
/// and the copy opens and reads as the source.
#[test]
fn checkpoint_to_another_file_system_copies_the_tables() {
    let _serial = common::serial();
    let base = tmp("xdev");
    let mnt = base.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let m = mnt.to_str().unwrap().to_string();
    if !run_cmd(&["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", &m]) {
        eprintln!("skipped: this machine does not let the test mount a tmpfs");
        let _ = std::fs::remove_dir_all(&base);
        return;
    }
    struct Unmount(String, PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            run_cmd(&["umount", &self.0]);
            let _ = std::fs::remove_dir_all(&self.1);
        }
    }
    let _guard = Unmount(m, base.clone());
    let db = Db::open(base.join("db"), opts(Preset::LevelDb, true)).unwrap();
    for i in 0..KEYS {
        db.put(key(i), vec![(i % 250) as u8; 200]).unwrap();
    }
    db.flush().unwrap();
    db.delete(key(3)).unwrap();
    let same_fs = db.checkpoint_report(base.join("same")).unwrap();
    assert!(same_fs.linked_files > 0, "{same_fs:?}");
    let rep = db.checkpoint_report(mnt.join("copy")).unwrap();
    assert_eq!(rep.linked_files, 0, "{rep:?}");
    assert_eq!(
        rep.copied_files,
        same_fs.copied_files + same_fs.linked_files
    );
    let c = Db::open(mnt.join("copy"), Options::default()).unwrap();
    assert_eq!(c.recovered_sequence(), rep.sequence);
    for i in 0..KEYS {
        let want = (i != 3).then(|| vec![(i % 250) as u8; 200]);
        assert_eq!(c.get(key(i)).unwrap(), want, "key {i}");
    }
    assert!(c.verify().unwrap().faults.is_empty());
}
