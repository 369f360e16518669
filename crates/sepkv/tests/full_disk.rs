//! A full disk, for every preset (and `wisckey` in log mode).
//!
//! Synced batches are written until the disk is full; then:
//! - the failing write returns a clear error (`No space left on device`,
//!   or `Poisoned` naming it for a write after the first failure);
//! - the writer's handle still reads every acknowledged key;
//! - after the writer is gone, a read-only open (`Db::open_read_only`, what
//!   `sepkv get` uses) works on the still-full disk, `verify` passes, and
//!   every acknowledged key reads back with its value: nothing is lost;
//! - once space returns, the database opens for writing, `verify` passes,
//!   and new synced writes go through and read back.
//!
//! The disk is a 16 MiB tmpfs mounted by the test (grown to 64 MiB by a
//! remount) where the machine allows it (root, `mount` available), else a
//! `FaultFs` whose space limit fails appends with `ENOSPC` (lifted to let
//! writes resume). `SEPKV_FULL_DISK=faultfs` forces the latter. Each preset
//! prints one line: acked, lost, read on the full disk, resumed.

mod common;
use common::run_cmd;
use sepkv::fs::{FaultFs, FileSystem, StdFs};
use sepkv::{Db, Error, Options, Preset, WriteBatch, WriteOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

const DISK: u64 = 16 << 20;
const GROWN: u64 = 64 << 20;
/// Bounds of the fill loop.
const MAX_BATCHES: u64 = 20_000;
const MAX_FILL_TIME: Duration = Duration::from_secs(60);
const BATCH: u64 = 20;

fn opts(preset: Preset, wal: bool, fs: Arc<dyn FileSystem>) -> Options {
    Options {
        wal,
        fs,
        value_threshold: 64,
        vlog_file_size: 1 << 20,
        write_buffer_size: 256 << 10,
        target_file_size: 256 << 10,
        hashkv_main_segment_size: 64 << 10,
        hashkv_log_segment_size: 16 << 10,
        hashkv_journal_size: 256 << 10,
        value_capacity: Some(64 << 20),
        trie_table_size: 256 << 10,
        trie_roll_size: 128 << 10,
        gc_on_close: false,
        ..Options::preset(preset)
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("key{i:08}").into_bytes()
}

fn value(i: u64) -> Vec<u8> {
    let len = if i.is_multiple_of(2) {
        20
    } else {
        300 + i % 700
    };
    (0..len).map(|j| (i * 13 + j) as u8).collect()
}

/// The disk the test runs on.
enum Disk {
    Tmpfs(PathBuf),
    Fault(FaultFs),
}

impl Disk {
    fn fs(&self) -> Arc<dyn FileSystem> {
        match self {
            Disk::Tmpfs(_) => Arc::new(StdFs),
            Disk::Fault(f) => Arc::new(f.clone()),
        }
    }

    fn root(&self) -> PathBuf {
        match self {
            Disk::Tmpfs(p) => p.clone(),
            Disk::Fault(_) => PathBuf::from("/disk"),
        }
    }

    fn resize(&self, bytes: Option<u64>) {
        match self {
            Disk::Tmpfs(p) => {
                let size = bytes.unwrap_or(GROWN);
                assert!(
                    run_cmd(&[
                        "mount",
                        "-o",
                        &format!("remount,size={size}"),
                        p.to_str().unwrap()
                    ]),
                    "remount"
                );
            }
            Disk::Fault(f) => f.set_space_limit(bytes),
        }
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        if let Disk::Tmpfs(p) = self {
            run_cmd(&["umount", p.to_str().unwrap()]);
            let _ = std::fs::remove_dir(p);
        }
    }
}

fn disk(name: &str) -> Disk {
    let mnt = std::env::temp_dir().join(format!("sepkv-full-{name}-{}", std::process::id()));
    let forced = std::env::var("SEPKV_FULL_DISK").as_deref() == Ok("faultfs");
    if !forced {
        std::fs::create_dir_all(&mnt).unwrap();
        let size = format!("size={DISK}");
        if run_cmd(&[
            "mount",
            "-t",
            "tmpfs",
            "-o",
            &size,
            "tmpfs",
            mnt.to_str().unwrap(),
        ]) {
            return Disk::Tmpfs(mnt);
        }
        let _ = std::fs::remove_dir(&mnt);
    }
    let f = FaultFs::new();
    f.create_dir_all(Path::new("/disk")).unwrap();
    f.set_space_limit(Some(DISK));
    Disk::Fault(f)
}

fn full_disk(preset: Preset, wal: bool) {
    let _serial = common::serial();
    let name = format!("{preset}{}", if wal { "" } else { "-nowal" });
    let disk = disk(&name);
    let kind = match disk {
        Disk::Tmpfs(_) => "tmpfs",
        Disk::Fault(_) => "FaultFs",
    };
    let dir = disk.root().join("db");
    let o = || opts(preset, wal, disk.fs());
    // Fill until the disk is full.
    let db = Db::open(&dir, o()).unwrap();
    let mut acked = 0u64;
    let t = Instant::now();
    let err = loop {
        assert!(
            acked / BATCH < MAX_BATCHES && t.elapsed() < MAX_FILL_TIME,
            "{name}: the disk never filled"
        );
        let mut b = WriteBatch::new();
        for i in acked..acked + BATCH {
            b.put(key(i), value(i)).unwrap();
        }
        match db.write(&b, WriteOptions { sync: true }) {
            Ok(()) => acked += BATCH,
            Err(e) => break e,
        }
    };
    let msg = err.to_string();
    assert!(
        err.is_no_space() || matches!(err, Error::Poisoned(_) | Error::ValueStoreFull(_)),
        "{name}: unexpected error {err:?}"
    );
    assert!(
        msg.contains("No space left on device")
            || msg.contains("os error 28")
            || matches!(err, Error::ValueStoreFull(_)),
        "{name}: the error does not say the disk is full: {msg}"
    );
    // The failed writer still reads.
    for i in (0..acked).step_by(97) {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i)), "{name}: key {i}");
    }
    let _ = db.close();
    drop(db);
    // Read-only on the full disk.
    let ro = Db::open_read_only(&dir, o())
        .unwrap_or_else(|e| panic!("{name}: read-only open on a full disk: {e}"));
    let mut read = 0u64;
    let mut lost = 0u64;
    for i in 0..acked {
        match ro.get(key(i)).unwrap() {
            Some(v) if v == value(i) => read += 1,
            _ => lost += 1,
        }
    }
    let rep = ro.verify().unwrap();
    assert!(rep.faults.is_empty(), "{name}: {:?}", rep.faults);
    drop(ro);
    // Space returns.
    disk.resize(None);
    let db = Db::open(&dir, o()).unwrap_or_else(|e| panic!("{name}: reopen after growth: {e}"));
    let rep = db.verify().unwrap();
    assert!(rep.faults.is_empty(), "{name}: {:?}", rep.faults);
    let mut resumed = 0u64;
    for i in acked + 1_000_000..acked + 1_000_000 + 10 * BATCH {
        db.write(
            &{
                let mut b = WriteBatch::new();
                b.put(key(i), value(i)).unwrap();
                b
            },
            WriteOptions { sync: true },
        )
        .unwrap_or_else(|e| panic!("{name}: write after growth: {e}"));
        resumed += 1;
    }
    for i in (0..acked).chain(acked + 1_000_000..acked + 1_000_000 + resumed) {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i)), "{name}: key {i}");
    }
    drop(db);
    eprintln!(
        "full disk ({kind} {} MiB) {name}: acked {acked}, lost {lost}, read on the full disk \
         {read}, resumed {resumed}; error: {msg}",
        DISK >> 20
    );
    assert_eq!(lost, 0, "{name}: acknowledged writes lost");
}

#[test]
fn full_disk_leveldb() {
    full_disk(Preset::LevelDb, true);
}

#[test]
fn full_disk_wisckey() {
    full_disk(Preset::WiscKey, true);
}

#[test]
fn full_disk_wisckey_log_mode() {
    full_disk(Preset::WiscKey, false);
}

#[test]
fn full_disk_hashkv() {
    full_disk(Preset::HashKv, true);
}

#[test]
fn full_disk_ktstore() {
    full_disk(Preset::KtStore, true);
}

#[test]
fn full_disk_flashkey() {
    full_disk(Preset::FlashKey, false);
}

#[test]
fn full_disk_lwc() {
    full_disk(Preset::Lwc, true);
}
