//! Format compatibility: databases written by an earlier build still open.
//!
//! `tests/fixtures/format-v1/<preset>/` holds one small database per preset
//! (and `wisckey-nowal`, WiscKey's log mode), written by
//! `scripts/make-fixtures.sh` (the ignored test `write_fixtures` below)
//! with the build that introduced them and committed. Each holds the keys
//! `key00000`..`key00599` as [`expected`] gives them: small values and
//! separated ones, overwritten and deleted keys, some SSTables (or bands)
//! and a WAL (or log-mode tail) left for the next open to replay.
//!
//! `fixtures_open_verify_and_read_back` copies each fixture to a temporary
//! directory, opens it read-only and read-write, checks `verify` and reads
//! every key back value for value, by `get` and by scan, then writes to it.
//! A change that can no longer read a committed format fails here; such a
//! change must bump `FORMAT_VERSION` and keep reading the old format (see
//! the format-version policy in `docs/operations.md`).
//!
//! `a_newer_format_is_refused_naming_both_versions` rewrites a copy's
//! `IDENTITY` with the next format version.
//!
//! FROZEN: [`expected`] and [`write_into`] describe the committed fixtures;
//! changing them means regenerating every fixture of the format.

use sepkv::format::checksum::{crc, mask};
use sepkv::{Db, Error, Options, Preset, FORMAT_VERSION};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const KEYS: u32 = 600;

/// The fixtures, as `(directory name, preset, wal)`.
const FIXTURES: [(&str, Preset, bool); 7] = [
    ("leveldb", Preset::LevelDb, true),
    ("wisckey", Preset::WiscKey, true),
    ("wisckey-nowal", Preset::WiscKey, false),
    ("hashkv", Preset::HashKv, true),
    ("ktstore", Preset::KtStore, true),
    ("flashkey", Preset::FlashKey, false),
    ("lwc", Preset::Lwc, true),
];

fn fixture_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/format-v1")
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

/// The value of key `i` after phase `phase` (0: first write, 1: overwrite).
fn value(i: u32, phase: u32) -> Vec<u8> {
    let len = if i.is_multiple_of(3) {
        100 + (i * 7) % 300
    } else {
        1 + i % 30
    };
    (0..len)
        .map(|j| (i.wrapping_mul(31) + j * 7 + phase * 101) as u8)
        .collect()
}

/// What every fixture holds once opened.
fn expected() -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut m = BTreeMap::new();
    for i in 0..KEYS {
        m.insert(key(i), value(i, 0));
    }
    for i in (0..KEYS).step_by(5) {
        m.insert(key(i), value(i, 1));
    }
    for i in (0..KEYS).step_by(7) {
        m.remove(&key(i));
    }
    m
}

fn opts(preset: Preset, wal: bool) -> Options {
    Options {
        wal,
        value_threshold: 64,
        // The smallest value-log files: the active one is preallocated.
        vlog_file_size: 1 << 20,
        write_buffer_size: 64 << 10,
        target_file_size: 64 << 10,
        block_size: 1024,
        band_entries: 32,
        hash_checkpoint_bands: 2,
        // Leave the last writes in the WAL (or the log-mode tail), so
        // every open of a fixture replays one.
        flush_on_close: false,
        gc_on_close: false,
        ..Options::preset(preset)
    }
}

/// Writes a fixture database into the new directory `dir`.
fn write_into(dir: &Path, preset: Preset, wal: bool) {
    let db = Db::open(dir, opts(preset, wal)).unwrap();
    for i in 0..KEYS {
        db.put(key(i), value(i, 0)).unwrap();
    }
    db.flush().unwrap();
    for i in (0..KEYS).step_by(5) {
        db.put(key(i), value(i, 1)).unwrap();
    }
    for i in (0..KEYS).step_by(7) {
        db.delete(key(i)).unwrap();
    }
    db.close().unwrap();
    drop(db);
    let _ = std::fs::remove_file(dir.join("LOCK"));
}

/// Copies directory `from` into the new directory `to`.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

fn check(db: &Db, name: &str) {
    let want = expected();
    for i in 0..KEYS {
        let k = key(i);
        assert_eq!(
            db.get(&k).unwrap().as_ref(),
            want.get(&k),
            "{name}: key {i}"
        );
    }
    let got: BTreeMap<_, _> = db.scan(.., false).unwrap().map(|r| r.unwrap()).collect();
    assert!(got == want, "{name}: the scan differs");
    let rep = db.verify().unwrap();
    assert!(rep.faults.is_empty(), "{name}: {:?}", rep.faults);
}

#[test]
fn fixtures_open_verify_and_read_back() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, _, _) in FIXTURES {
        let src = fixture_root().join(name);
        assert!(
            src.join("IDENTITY").exists(),
            "fixture {name} is missing: run scripts/make-fixtures.sh"
        );
        let dir = tmp.path().join(name);
        copy_dir(&src, &dir);
        {
            let ro = Db::open_read_only(&dir, Options::default()).unwrap();
            check(&ro, name);
        }
        let db = Db::open(&dir, Options::default()).unwrap();
        check(&db, name);
        db.put("after", "upgrade").unwrap();
        db.close().unwrap();
        drop(db);
        let db = Db::open(&dir, Options::default()).unwrap();
        assert_eq!(db.get("after").unwrap().as_deref(), Some(&b"upgrade"[..]));
    }
}

#[test]
fn a_newer_format_is_refused_naming_both_versions() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    copy_dir(&fixture_root().join("wisckey"), &dir);
    let id = std::fs::read_to_string(dir.join("IDENTITY")).unwrap();
    let newer = FORMAT_VERSION + 1;
    let body: String = id
        .lines()
        .filter(|l| !l.starts_with("crc="))
        .map(|l| {
            if l.starts_with("format=") {
                format!("format={newer}\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let text = format!("{body}crc={:08x}\n", mask(crc(body.as_bytes())));
    std::fs::write(dir.join("IDENTITY"), text).unwrap();
    let before = std::fs::read_dir(&dir).unwrap().count();
    for e in [
        Db::open(&dir, Options::default()).unwrap_err(),
        Db::open_read_only(&dir, Options::default()).unwrap_err(),
    ] {
        assert!(
            matches!(e, Error::FormatTooNew { found, supported, .. }
                if found == newer && supported == FORMAT_VERSION),
            "{e:?}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("format version {newer}"))
                && msg.contains(&format!("version {FORMAT_VERSION} this build reads")),
            "{msg}"
        );
    }
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        before,
        "a refused open created files"
    );
}

/// Regenerates the committed fixtures (`scripts/make-fixtures.sh`). Only
/// with `SEPKV_WRITE_FIXTURES=1`, so that `--ignored` runs do not rewrite
/// them by accident.
#[test]
#[ignore = "writes the committed fixtures; run scripts/make-fixtures.sh"]
fn write_fixtures() {
    if std::env::var("SEPKV_WRITE_FIXTURES").as_deref() != Ok("1") {
        eprintln!("set SEPKV_WRITE_FIXTURES=1 to rewrite the fixtures");
        return;
    }
    let root = fixture_root();
    for (name, preset, wal) in FIXTURES {
        let dir = root.join(name);
        let _ = std::fs::remove_dir_all(&dir);
        write_into(&dir, preset, wal);
    }
}
