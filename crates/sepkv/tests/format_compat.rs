//! Format compatibility: databases written by an earlier build still open.
//!
//! `tests/fixtures/format-v<N>/<preset>/` holds, for every format version
//! this build reads, one small database per preset
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
//! the format-version policy in `docs/format.md`).
//!
//! Format 2 moved the value log and HashKV segments to the shared
//! value-record codec. The `format_1_*` tests check the upgrade of the
//! format-1 fixtures: old files stay in the older codecs and are read in
//! them, new files are in the shared codec only, GC moves old records into
//! new files, and an upgrade cut short before `IDENTITY` is rewritten is
//! taken up again by the next open.
//!
//! `a_newer_format_is_refused_naming_both_versions` rewrites a copy's
//! `IDENTITY` with the next format version.
//!
//! FROZEN: [`expected`] and [`write_into`] describe the committed fixtures;
//! changing them means regenerating every fixture of the format.

use sepkv::format::checksum::{crc, mask};
use sepkv::format::value_record::{Codec, DecodeError};
use sepkv::{Db, Error, Options, Preset, FORMAT_VERSION, OLDEST_FORMAT_VERSION};
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

/// The oldest format version this build reads; every version from it to
/// `FORMAT_VERSION` has fixtures.
const OLDEST: u32 = OLDEST_FORMAT_VERSION;

fn fixture_root(version: u32) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/format-v{version}"))
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
    for version in OLDEST..=FORMAT_VERSION {
        for (name, _, _) in FIXTURES {
            let src = fixture_root(version).join(name);
            assert!(
                src.join("IDENTITY").exists(),
                "fixture v{version}/{name} is missing: run scripts/make-fixtures.sh"
            );
            let name = &format!("v{version}/{name}");
            let dir = tmp.path().join(name);
            copy_dir(&src, &dir);
            {
                let ro = Db::open_read_only(&dir, Options::default()).unwrap();
                check(&ro, name);
            }
            // A read-only open changes nothing, the upgrade included.
            assert_eq!(
                identity_line(&dir, "format"),
                Some(version as u64),
                "{name}"
            );
            let db = Db::open(&dir, Options::default()).unwrap();
            check(&db, name);
            db.put("after", "upgrade").unwrap();
            db.close().unwrap();
            drop(db);
            assert_eq!(
                identity_line(&dir, "format"),
                Some(FORMAT_VERSION as u64),
                "{name}"
            );
            let db = Db::open(&dir, Options::default()).unwrap();
            assert_eq!(db.get("after").unwrap().as_deref(), Some(&b"upgrade"[..]));
        }
    }
}

/// The number on the `name=` line of `dir`'s `IDENTITY`, if any.
fn identity_line(dir: &Path, name: &str) -> Option<u64> {
    let id = std::fs::read_to_string(dir.join("IDENTITY")).unwrap();
    id.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
        .map(|v| v.parse().unwrap())
}

/// The value-store files of `dir` with suffix `suffix`, by number.
fn files(dir: &Path, suffix: &str) -> BTreeMap<u64, PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            let n = p
                .file_name()?
                .to_str()?
                .strip_suffix(suffix)?
                .parse()
                .ok()?;
            Some((n, p))
        })
        .collect()
}

/// Walks the records of `path` in `codec` up to its end, or to the zeros
/// of preallocated space; returns how many there are. Zeros GC left where
/// it freed a value log's tail (a punched hole) are stepped over: the next
/// record starts at most 4 bytes (its checksum's zero bytes) before the
/// next byte that is not zero. Damage, or bytes of another codec, is an
/// error.
fn records_in(path: &Path, codec: Codec) -> Result<usize, (u64, DecodeError)> {
    let data = std::fs::read(path).unwrap();
    let (mut pos, mut n) = (0usize, 0usize);
    while pos < data.len() {
        match codec.decode(&data[pos..]) {
            Ok(r) => {
                pos += r.len;
                n += 1;
            }
            Err(DecodeError::Zero) => {
                let Some(q) = data[pos..].iter().position(|&b| b != 0) else {
                    break;
                };
                let q = pos + q;
                pos = (q.saturating_sub(4).max(pos)..=q)
                    .find(|&at| codec.decode(&data[at..]).is_ok())
                    .ok_or((q as u64, DecodeError::Zero))?;
            }
            Err(e) => return Err((pos as u64, e)),
        }
    }
    Ok(n)
}

/// Checks that the value-log files (`.vlog`) and HashKV segments
/// (`.hseg`) of `dir` numbered below `vlog_below` and `hseg_below` are in
/// the format-1 codecs and the others in the shared one; returns the
/// records of the new files.
fn check_codecs(dir: &Path, vlog_below: u64, hseg_below: u64) -> usize {
    let mut new = 0;
    for (suffix, below, old) in [
        (".vlog", vlog_below, Codec::VlogV1),
        (".hseg", hseg_below, Codec::HashKvV1),
    ] {
        for (n, p) in files(dir, suffix) {
            let codec = if n < below { old } else { Codec::Shared };
            let count = records_in(&p, codec)
                .unwrap_or_else(|e| panic!("{} in {codec:?}: {e:?}", p.display()));
            if codec == Codec::Shared {
                new += count;
                // Nothing new decodes in an older codec.
                if count > 0 {
                    assert!(records_in(&p, old).is_err(), "{}", p.display());
                }
            }
        }
    }
    new
}

/// The fixtures whose layout has files of the format-1 record codecs
/// (value log, HashKV segments and cold data log).
fn separating_fixtures() -> impl Iterator<Item = (&'static str, Preset, bool)> {
    FIXTURES
        .into_iter()
        .filter(|f| matches!(f.1, Preset::WiscKey | Preset::HashKv))
}

/// Opens `dir` again and checks that `verify` finds no fault.
fn reopen_verified(dir: &Path, name: &str) -> Db {
    let db = Db::open(dir, Options::default()).unwrap();
    let rep = db.verify().unwrap();
    assert!(rep.faults.is_empty(), "{name}: {:?}", rep.faults);
    db
}

/// A value GC and the upgrade tests give the separated keys (every third).
fn third(i: u32) -> Vec<u8> {
    let mut v = value(i, 2);
    v.resize(200, i as u8);
    v
}

#[test]
fn format_1_upgrade_writes_new_files_in_the_shared_codec_and_gc_moves_old_records() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, preset, wal) in separating_fixtures() {
        let dir = tmp.path().join(name);
        copy_dir(&fixture_root(1).join(name), &dir);
        let old_vlogs = files(&dir, ".vlog");
        let old_segs = files(&dir, ".hseg");
        assert!(!old_vlogs.is_empty() || !old_segs.is_empty(), "{name}");
        let old_left = |dir: &Path, vlog_below: u64, hseg_below: u64| {
            files(dir, ".vlog")
                .keys()
                .filter(|&&n| n < vlog_below)
                .count()
                + files(dir, ".hseg")
                    .keys()
                    .filter(|&&n| n < hseg_below)
                    .count()
        };
        let db = Db::open(&dir, opts(preset, wal)).unwrap();
        // The upgrade is recorded before anything is written: every file
        // present is below the recorded numbers.
        let vlog_below = identity_line(&dir, "v1-vlog-below").unwrap_or(0);
        let hseg_below = identity_line(&dir, "v1-hseg-below").unwrap_or(0);
        assert_eq!(identity_line(&dir, "format"), Some(2), "{name}");
        assert!(old_vlogs.keys().all(|&n| n < vlog_below), "{name}");
        assert!(old_segs.keys().all(|&n| n < hseg_below), "{name}");
        assert_eq!(preset == Preset::HashKv, hseg_below > 0, "{name}");
        let before = old_left(&dir, vlog_below, hseg_below);
        assert!(before > 0, "{name}");
        let old_left = |dir: &Path| old_left(dir, vlog_below, hseg_below);
        // New versions of half the separated keys: the other half stays in
        // the old files until GC moves it.
        let mut want = expected();
        for i in (0..KEYS).step_by(6) {
            db.put(key(i), third(i)).unwrap();
            want.insert(key(i), third(i));
        }
        db.flush().unwrap();
        assert!(check_codecs(&dir, vlog_below, hseg_below) > 0, "{name}");
        // GC until no old file is left (bounded: a few passes; the
        // background GC may have begun).
        for _ in 0..8 {
            if old_left(&dir) == 0 {
                break;
            }
            db.gc(None).unwrap();
        }
        assert!(
            old_left(&dir) < before,
            "{name}: GC freed none of the {before} old files"
        );
        check_codecs(&dir, vlog_below, hseg_below);
        for (k, v) in &want {
            assert_eq!(db.get(k).unwrap().as_ref(), Some(v), "{name}");
        }
        db.close().unwrap();
        drop(db);
        // Reopened: the same files, read in the same codecs.
        let db = reopen_verified(&dir, name);
        assert_eq!(
            identity_line(&dir, "v1-vlog-below"),
            Some(vlog_below).filter(|&n| n > 0)
        );
        let got: BTreeMap<_, _> = db.scan(.., false).unwrap().map(|r| r.unwrap()).collect();
        assert!(got == want, "{name}: the scan differs after reopen");
    }
}

#[test]
fn format_1_upgrade_cut_short_before_identity_is_rewritten_opens_again() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, preset, wal) in separating_fixtures() {
        let dir = tmp.path().join(name);
        copy_dir(&fixture_root(1).join(name), &dir);
        let v1 = std::fs::read(dir.join("IDENTITY")).unwrap();
        // The store opens and starts its first new files; the process
        // dies before `IDENTITY` names them (put back here).
        let db = Db::open(&dir, opts(preset, wal)).unwrap();
        db.close().unwrap();
        drop(db);
        let first = identity_line(&dir, "v1-vlog-below");
        std::fs::write(dir.join("IDENTITY"), &v1).unwrap();
        let db = Db::open(&dir, opts(preset, wal)).unwrap();
        check(&db, name);
        // The new open counts the empty files of the first among the old.
        assert!(identity_line(&dir, "v1-vlog-below") >= first, "{name}");
        db.put(key(3), third(3)).unwrap();
        db.close().unwrap();
        drop(db);
        let db = reopen_verified(&dir, name);
        assert_eq!(db.get(key(3)).unwrap(), Some(third(3)), "{name}");
    }
}

#[test]
fn a_new_database_is_written_in_the_shared_codec_only() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, preset, wal) in separating_fixtures() {
        let dir = tmp.path().join(name);
        write_into(&dir, preset, wal);
        let db = Db::open(&dir, opts(preset, wal)).unwrap();
        for i in (0..KEYS).step_by(6) {
            db.put(key(i), third(i)).unwrap();
        }
        db.flush().unwrap();
        assert!(check_codecs(&dir, 0, 0) > 0, "{name}");
        // GC copies too.
        db.gc(None).unwrap();
        db.close().unwrap();
        drop(db);
        assert_eq!(identity_line(&dir, "format"), Some(2), "{name}");
        assert_eq!(identity_line(&dir, "v1-vlog-below"), None, "{name}");
        assert_eq!(identity_line(&dir, "v1-hseg-below"), None, "{name}");
        check_codecs(&dir, 0, 0);
        reopen_verified(&dir, name);
    }
}

#[test]
fn a_newer_format_is_refused_naming_both_versions() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    copy_dir(&fixture_root(FORMAT_VERSION).join("wisckey"), &dir);
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
    // Older than any version this build reads: refused, naming both.
    let older = body.replace(&format!("format={newer}\n"), "format=0\n");
    let text = format!("{older}crc={:08x}\n", mask(crc(older.as_bytes())));
    std::fs::write(dir.join("IDENTITY"), text).unwrap();
    let e = Db::open(&dir, Options::default()).unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(e, Error::NotADatabase { .. })
            && msg.contains("format version 0 is not supported")
            && msg.contains(&format!("reads {OLDEST} to {FORMAT_VERSION}")),
        "{msg}"
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
    let root = fixture_root(FORMAT_VERSION);
    for (name, preset, wal) in FIXTURES {
        let dir = root.join(name);
        let _ = std::fs::remove_dir_all(&dir);
        write_into(&dir, preset, wal);
    }
}
