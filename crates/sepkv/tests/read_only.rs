//! Read-only opens (`Db::open_read_only`), for every preset, on the
//! operating system's file system:
//! - the directory is byte for byte the same after the open, reads, scans,
//!   `verify` and `close` (no file created, removed, grown or changed),
//!   although the database holds a WAL (or log-mode tail) to replay;
//! - every key reads back as written (deleted keys stay deleted), scans
//!   agree, `verify` finds nothing;
//! - writes, flushes, compactions, GC and checkpoints return
//!   `Error::ReadOnly`, whose message is not `Poisoned`'s;
//! - two read-only handles coexist; a read-only open beside a writer is
//!   refused with `Busy`, and a writer beside a read-only handle too;
//! - on a read-only mount (a tmpfs remounted `ro`, where the machine lets
//!   the test mount one; skipped otherwise) the open, reads and `verify`
//!   work.

mod common;
use common::run_cmd;
use sepkv::{Db, Error, Options, Preset};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sepkv-ro-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Small options: separated values, several SSTables, bands and segments.
fn opts(preset: Preset) -> Options {
    Options {
        value_threshold: 64,
        vlog_file_size: 1 << 20,
        write_buffer_size: 64 << 10,
        target_file_size: 64 << 10,
        block_size: 1024,
        band_entries: 32,
        hash_checkpoint_bands: 2,
        trie_table_size: 128 << 10,
        trie_roll_size: 64 << 10,
        // The tail stays in the WAL (or the log-mode value log / bands), so
        // the read-only open has something to replay.
        flush_on_close: false,
        gc_on_close: false,
        ..Options::preset(preset)
    }
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Writes a mix of small and separated values, overwrites and deletes,
/// with a flush in the middle; returns the expected state.
fn fill(db: &Db) -> Model {
    let mut m = Model::new();
    for i in 0..600u32 {
        let k = format!("key{i:05}").into_bytes();
        let v = if i.is_multiple_of(3) {
            vec![(i % 251) as u8; 300]
        } else {
            format!("v{i}").into_bytes()
        };
        db.put(&k, &v).unwrap();
        m.insert(k, v);
        if i == 300 {
            db.flush().unwrap();
        }
    }
    for i in (0..600u32).step_by(7) {
        let k = format!("key{i:05}").into_bytes();
        db.delete(&k).unwrap();
        m.remove(&k);
    }
    for i in (0..600u32).step_by(11) {
        let k = format!("key{i:05}").into_bytes();
        let v = vec![b'o'; 200];
        db.put(&k, &v).unwrap();
        m.insert(k, v);
    }
    m
}

/// Every file under `dir` (but `LOCK`) with its content.
fn image(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n != "LOCK") {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

fn check_reads(db: &Db, m: &Model) {
    for i in 0..600u32 {
        let k = format!("key{i:05}").into_bytes();
        assert_eq!(db.get(&k).unwrap().as_ref(), m.get(&k), "key {i}");
    }
    let scanned: Model = db.scan(.., false).unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(&scanned, m, "scan");
    let rep = db.verify().unwrap();
    assert!(rep.faults.is_empty(), "verify: {rep:?}");
}

#[test]
fn read_only_open_writes_nothing_and_refuses_writes() {
    let _serial = common::serial();
    for preset in Preset::ALL {
        let dir = tmp(preset.name());
        let m = {
            let db = Db::open(&dir, opts(preset)).unwrap();
            let m = fill(&db);
            db.close().unwrap();
            m
        };
        let before = image(&dir);
        let ro = Db::open_read_only(&dir, Options::default()).unwrap();
        assert!(ro.is_read_only());
        let ro2 = Db::open_read_only(&dir, Options::default()).unwrap();
        check_reads(&ro, &m);
        check_reads(&ro2, &m);
        let msg = |e: Error| {
            assert!(matches!(e, Error::ReadOnly(_)), "{preset}: {e:?}");
            let s = e.to_string();
            assert!(
                s.contains("read-only") && !s.contains("write failure"),
                "{s}"
            );
        };
        msg(ro.put("x", "y").unwrap_err());
        msg(ro.delete("key00001").unwrap_err());
        msg(ro.flush().unwrap_err());
        msg(ro.compact_range(..).unwrap_err());
        msg(ro.gc(None).unwrap_err());
        msg(ro.checkpoint(dir.with_extension("ckpt")).unwrap_err());
        ro.wait_idle().unwrap();
        let _ = ro.stats().unwrap();
        // A writer is refused while read-only handles are open.
        assert!(
            matches!(Db::open(&dir, Options::default()), Err(Error::Busy { .. })),
            "{preset}: writer beside a read-only handle"
        );
        ro.close().unwrap();
        drop(ro2);
        assert_eq!(
            image(&dir),
            before,
            "{preset}: a read-only open changed files"
        );
        // And the other way round: read-only beside a writer is refused.
        let w = Db::open(&dir, Options::default()).unwrap();
        let e = Db::open_read_only(&dir, Options::default()).unwrap_err();
        assert!(matches!(e, Error::Busy { .. }), "{preset}: {e:?}");
        check_reads(&w, &m);
        drop(w);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn read_only_open_refuses_a_missing_database() {
    let dir = tmp("missing");
    let e = Db::open_read_only(&dir, Options::default()).unwrap_err();
    assert!(matches!(e, Error::NotADatabase { .. }), "{e:?}");
    assert!(!dir.exists(), "a read-only open created the directory");
}

#[test]
fn read_only_open_works_on_a_read_only_mount() {
    let _serial = common::serial();
    let mnt = tmp("mount");
    std::fs::create_dir_all(&mnt).unwrap();
    let m = mnt.to_str().unwrap();
    if !run_cmd(&["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", m]) {
        eprintln!("skipped: this machine does not let the test mount a tmpfs");
        let _ = std::fs::remove_dir(&mnt);
        return;
    }
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            run_cmd(&["umount", self.0.to_str().unwrap()]);
            let _ = std::fs::remove_dir(&self.0);
        }
    }
    let _guard = Unmount(mnt.clone());
    for preset in Preset::ALL {
        let dir = mnt.join(preset.name());
        let db = Db::open(&dir, opts(preset)).unwrap();
        let model = fill(&db);
        db.close().unwrap();
        // Every handle the writer had open for writing goes with it.
        drop(db);
        assert!(run_cmd(&["mount", "-o", "remount,ro", m]), "remount ro");
        assert!(std::fs::write(dir.join("probe"), b"x").is_err(), "not ro");
        let ro = Db::open_read_only(&dir, Options::default())
            .unwrap_or_else(|e| panic!("{preset} on a read-only mount: {e}"));
        check_reads(&ro, &model);
        drop(ro);
        assert!(run_cmd(&["mount", "-o", "remount,rw", m]), "remount rw");
    }
}
