//! Bad input and hostile environments: invalid keys, values and options,
//! paths that hold no database, a database already open, a recorded
//! configuration that differs, use after `close`, and a device that fills up
//! or fails. Each must produce the documented error, and the database must
//! keep (or, after a reopen, regain) every acknowledged write.

use sepkv::format::checksum::{crc, mask};
use sepkv::fs::{
    read_all, write_atomic, FaultFs, FaultKind, FaultOp, FaultRule, FileSystem, MemFs,
};
use sepkv::{
    Db, Error, IndexKind, Options, Preset, ReadOptions, Result, ValueLayout, WriteBatch,
    WriteOptions, MAX_KEY_SIZE, MAX_VALUE_SIZE,
};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

const DIR: &str = "/db";

fn dir() -> &'static Path {
    Path::new(DIR)
}

fn opts_on(fs: Arc<dyn FileSystem>) -> Options {
    Options {
        fs,
        write_buffer_size: 64 << 10,
        ..Options::default()
    }
}

fn mem_opts(fs: &MemFs) -> Options {
    opts_on(Arc::new(fs.clone()))
}

fn fault_opts(fs: &FaultFs) -> Options {
    opts_on(Arc::new(fs.clone()))
}

fn key(i: usize) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn value(i: usize) -> Vec<u8> {
    let mut v = format!("value-{i}-").into_bytes();
    v.resize(40 + (i * 37) % 120, b'v');
    v
}

/// Panics unless `r` is an `InvalidArgument` whose message contains
/// `needle`.
#[track_caller]
fn assert_invalid<T: std::fmt::Debug>(r: Result<T>, needle: &str, what: &str) {
    match r {
        Err(Error::InvalidArgument(m)) => {
            assert!(
                m.contains(needle),
                "{what}: message {m:?} does not name {needle:?}"
            )
        }
        other => panic!("{what}: expected InvalidArgument naming {needle:?}, got {other:?}"),
    }
}

#[track_caller]
fn assert_closed<T: std::fmt::Debug>(r: Result<T>, what: &str) {
    assert!(
        matches!(r, Err(Error::Closed)),
        "{what}: expected Closed, got {r:?}"
    );
}

#[track_caller]
fn assert_poisoned<T: std::fmt::Debug>(r: Result<T>, what: &str) {
    assert!(
        matches!(r, Err(Error::Poisoned(_))),
        "{what}: expected Poisoned, got {r:?}"
    );
}

/// The database's key-value pairs.
fn contents(db: &Db) -> BTreeMap<Vec<u8>, Vec<u8>> {
    db.scan(.., false).unwrap().map(|r| r.unwrap()).collect()
}

// ---------------------------------------------------------------------------
// Keys and values.

#[test]
fn invalid_keys_and_values_are_rejected_and_the_database_keeps_working() {
    let fs = MemFs::new();
    let db = Db::open(dir(), mem_opts(&fs)).unwrap();
    db.put(b"a", b"1").unwrap();
    let long_key = vec![b'k'; MAX_KEY_SIZE + 1];
    let long_value = vec![b'v'; MAX_VALUE_SIZE + 1];
    let bad_keys: [(&[u8], &str); 2] = [(b"", "empty key"), (&long_key, "key of")];

    for (k, needle) in bad_keys {
        let what = format!("{needle} ({} bytes)", k.len());
        assert_invalid(db.put(k, b"x"), needle, &format!("put, {what}"));
        assert_invalid(db.delete(k), needle, &format!("delete, {what}"));
        assert_invalid(db.get(k), needle, &format!("get, {what}"));
        let snap = db.snapshot().unwrap();
        let ro = ReadOptions {
            snapshot: Some(&snap),
            ..Default::default()
        };
        assert_invalid(db.get_opt(&ro, k), needle, &format!("get_opt, {what}"));
        let mut b = WriteBatch::new();
        b.put(b"ok", b"1").unwrap();
        let before = b.clone();
        assert_invalid(b.put(k, b"x"), needle, &format!("batch put, {what}"));
        assert_invalid(b.delete(k), needle, &format!("batch delete, {what}"));
        assert_eq!(b, before, "{what}: a rejected entry changed the batch");
    }
    assert_invalid(db.put(b"k", &long_value), "value of", "put of a long value");
    let mut b = WriteBatch::new();
    assert_invalid(
        b.put(b"k", &long_value),
        "value of",
        "batch put of a long value",
    );
    assert!(b.is_empty());
    drop(long_value);
    // The limits themselves are accepted.
    let mut b = WriteBatch::new();
    b.put(vec![b'k'; MAX_KEY_SIZE], vec![0u8; MAX_VALUE_SIZE])
        .unwrap();
    assert_eq!(b.len(), 1);
    drop(b);
    // An inverted range.
    assert_invalid(db.scan(b"b"..b"a", false).map(|_| ()), "range", "scan b..a");
    assert_invalid(
        db.iter_range(&ReadOptions::default(), b"b"..b"a")
            .map(|_| ()),
        "range",
        "iter_range b..a",
    );

    // Nothing was written by the rejected calls, and the database works.
    assert_eq!(db.get(b"k").unwrap(), None);
    assert_eq!(db.get(b"ok").unwrap(), None);
    db.write(&WriteBatch::new(), WriteOptions { sync: true })
        .unwrap();
    db.put(b"b", b"2").unwrap();
    db.delete(b"a").unwrap();
    assert_eq!(
        contents(&db).into_iter().collect::<Vec<_>>(),
        vec![(b"b".to_vec(), b"2".to_vec())]
    );
    db.close().unwrap();
    let db = Db::open(dir(), mem_opts(&fs)).unwrap();
    assert_eq!(contents(&db).len(), 1);
}

#[test]
fn largest_key_and_a_large_value_work_and_survive_reopen() {
    let fs = MemFs::new();
    let big_key = vec![0xabu8; MAX_KEY_SIZE];
    let mut other_big_key = big_key.clone();
    *other_big_key.last_mut().unwrap() = 0xac;
    let big_value: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 251) as u8).collect();
    let expect = |db: &Db| {
        assert_eq!(db.get(&big_key).unwrap().as_deref(), Some(&b"small"[..]));
        assert_eq!(db.get(&other_big_key).unwrap().as_ref(), Some(&big_value));
        assert_eq!(db.get(b"mid").unwrap().as_ref(), Some(&big_value));
        let got = contents(db);
        assert_eq!(got.len(), 4);
        assert_eq!(got.get(&b"z"[..]), Some(&b"last".to_vec()));
        assert!(db.verify().unwrap().faults.is_empty());
    };
    let db = Db::open(dir(), mem_opts(&fs)).unwrap();
    db.put(&big_key, b"small").unwrap();
    let mut b = WriteBatch::new();
    b.put(&other_big_key, &big_value).unwrap();
    b.put(b"mid", &big_value).unwrap();
    b.put(b"z", b"last").unwrap();
    db.write(&b, WriteOptions { sync: true }).unwrap();
    expect(&db);
    db.close().unwrap();
    // Recovered from the WAL.
    let db = Db::open(dir(), mem_opts(&fs)).unwrap();
    expect(&db);
    // From SSTables, after a compaction.
    db.compact_range(..).unwrap();
    assert!(db.stats().unwrap().levels.iter().any(|l| l.files > 0));
    expect(&db);
    db.close().unwrap();
    let db = Db::open(dir(), mem_opts(&fs)).unwrap();
    expect(&db);
}

#[test]
fn a_value_of_exactly_max_value_size_works_and_survives_reopen() {
    let fs = MemFs::new();
    let v: Vec<u8> = (0..MAX_VALUE_SIZE).map(|i| (i % 253) as u8).collect();
    let db = Db::open(dir(), mem_opts(&fs)).unwrap();
    db.put(b"huge", &v).unwrap();
    db.put(b"after", b"x").unwrap();
    assert!(db.get(b"huge").unwrap() == Some(v.clone()));
    db.close().unwrap();
    let db = Db::open(dir(), mem_opts(&fs)).unwrap();
    assert!(
        db.get(b"huge").unwrap() == Some(v.clone()),
        "after WAL replay"
    );
    assert_eq!(db.get(b"after").unwrap(), Some(b"x".to_vec()));
    assert!(db.verify().unwrap().faults.is_empty());
    db.close().unwrap();
    let db = Db::open(dir(), mem_opts(&fs)).unwrap();
    assert!(db.get(b"huge").unwrap() == Some(v), "from an SSTable");
}

// ---------------------------------------------------------------------------
// Options.

type Tweak = fn(&mut Options);

#[test]
fn invalid_options_are_rejected_naming_the_option() {
    let cases: Vec<(&str, Tweak)> = vec![
        ("write_buffer_size", |o| {
            o.write_buffer_size = (64 << 10) - 1
        }),
        ("write_buffer_size", |o| o.write_buffer_size = (1 << 30) + 1),
        ("block_size", |o| o.block_size = 255),
        ("block_size", |o| o.block_size = (1 << 20) + 1),
        ("block_restart_interval", |o| o.block_restart_interval = 0),
        ("block_restart_interval", |o| {
            o.block_restart_interval = 1025
        }),
        ("bloom_bits_per_key", |o| o.bloom_bits_per_key = 65),
        ("max_open_files", |o| o.max_open_files = 15),
        ("target_file_size", |o| o.target_file_size = (64 << 10) - 1),
        ("target_file_size", |o| {
            o.target_file_size = (1 << 30) + 1;
            o.max_bytes_for_level_base = 1 << 40;
        }),
        ("max_bytes_for_level_base", |o| {
            o.max_bytes_for_level_base = o.target_file_size - 1
        }),
        ("level_size_multiplier", |o| o.level_size_multiplier = 1),
        ("level_size_multiplier", |o| o.level_size_multiplier = 101),
        ("num_levels", |o| o.num_levels = 1),
        ("num_levels", |o| o.num_levels = 13),
        ("lwc_max_segments", |o| o.lwc_max_segments = 1),
        ("lwc_max_segments", |o| o.lwc_max_segments = 1025),
        ("lwc_dead_share", |o| o.lwc_dead_share = 0.0),
        ("lwc_dead_share", |o| o.lwc_dead_share = 1.5),
        ("lwc_dead_share", |o| o.lwc_dead_share = f64::NAN),
        ("lwc_max_table_bytes", |o| {
            o.lwc_max_table_bytes = o.target_file_size - 1
        }),
        ("lwc_max_table_bytes", |o| {
            o.lwc_max_table_bytes = (1 << 40) + 1
        }),
        ("l0_compaction_trigger", |o| o.l0_compaction_trigger = 0),
        ("l0_compaction_trigger", |o| {
            o.l0_compaction_trigger = o.l0_slowdown_writes_trigger + 1
        }),
        ("l0_slowdown_writes_trigger", |o| {
            o.l0_slowdown_writes_trigger = o.l0_stop_writes_trigger + 1
        }),
        ("l0_stop_writes_trigger", |o| {
            o.l0_stop_writes_trigger = o.l0_slowdown_writes_trigger - 1
        }),
        ("trie_table_size", |o| o.trie_table_size = (64 << 10) - 1),
        ("trie_table_size", |o| o.trie_table_size = (1 << 30) + 1),
        ("trie_roll_size", |o| o.trie_roll_size = (64 << 10) - 1),
        ("trie_split_skew", |o| o.trie_split_skew = 0.0),
        ("trie_split_skew", |o| o.trie_split_skew = 1.01),
        ("trie_split_skew", |o| o.trie_split_skew = f64::NAN),
        ("trie_fixed_levels", |o| {
            o.trie_fixed_levels = Some(0);
            o.trie_split_skew = 1.0;
        }),
        ("trie_fixed_levels", |o| {
            o.trie_fixed_levels = Some(9);
            o.trie_split_skew = 1.0;
        }),
        // A fixed trie has no skew splits: the two options contradict.
        ("trie_fixed_levels", |o| o.trie_fixed_levels = Some(2)),
    ];
    for (i, (name, tweak)) in cases.into_iter().enumerate() {
        let fs = MemFs::new();
        let mut o = mem_opts(&fs);
        tweak(&mut o);
        let what = format!("case {i} ({name})");
        assert_invalid(o.validate(), name, &what);
        assert_invalid(Db::open(dir(), o).map(|_| ()), name, &what);
        assert!(
            !fs.exists(dir()),
            "{what}: a refused open created the directory"
        );
    }

    // The bounds themselves are valid.
    let valid: Vec<Tweak> = vec![
        |o| o.write_buffer_size = 64 << 10,
        |o| o.write_buffer_size = 1 << 30,
        |o| o.block_size = 256,
        |o| o.block_size = 1 << 20,
        |o| o.block_restart_interval = 1,
        |o| o.block_restart_interval = 1024,
        |o| o.bloom_bits_per_key = 0,
        |o| o.bloom_bits_per_key = 64,
        |o| o.max_open_files = 16,
        |o| o.lwc_max_segments = 2,
        |o| o.lwc_max_segments = 1024,
        |o| o.lwc_max_table_bytes = o.target_file_size,
        |o| o.lwc_max_table_bytes = 1 << 40,
        |o| o.target_file_size = 64 << 10,
        |o| {
            o.target_file_size = 1 << 30;
            o.max_bytes_for_level_base = 1 << 30;
        },
        |o| o.max_bytes_for_level_base = o.target_file_size,
        |o| o.level_size_multiplier = 2,
        |o| o.level_size_multiplier = 100,
        |o| o.num_levels = 2,
        |o| o.num_levels = 12,
        |o| o.trie_table_size = 64 << 10,
        |o| o.trie_table_size = 1 << 30,
        |o| o.trie_roll_size = 64 << 10,
        |o| o.trie_roll_size = u64::MAX,
        |o| o.trie_split_skew = 0.01,
        |o| o.trie_split_skew = 1.0,
        |o| {
            o.trie_fixed_levels = Some(1);
            o.trie_split_skew = 1.0;
        },
        |o| {
            o.trie_fixed_levels = Some(8);
            o.trie_split_skew = 1.0;
        },
        |o| {
            o.l0_compaction_trigger = 1;
            o.l0_slowdown_writes_trigger = 1;
            o.l0_stop_writes_trigger = 1;
        },
    ];
    for (i, tweak) in valid.into_iter().enumerate() {
        let mut o = Options::default();
        tweak(&mut o);
        o.validate()
            .unwrap_or_else(|e| panic!("valid case {i}: {e}"));
    }
}

#[test]
fn unimplemented_presets_and_layouts_are_rejected() {
    for p in Preset::ALL {
        let fs = MemFs::new();
        let o = Options {
            fs: Arc::new(fs.clone()),
            ..Options::preset(p)
        };
        let (index, layout) = p.axes();
        if p.is_available() {
            Db::open(dir(), o).unwrap().close().unwrap();
            continue;
        }
        let what = format!("preset {p}");
        let e = Db::open(dir(), o).map(|_| ()).unwrap_err();
        let Error::InvalidArgument(m) = &e else {
            panic!("{what}: {e:?}")
        };
        assert!(
            m.contains(index.name()) && m.contains(layout.name()),
            "{what}: {m}"
        );
        assert!(
            !fs.exists(dir()),
            "{what}: a refused open created the directory"
        );
    }
    assert!(Preset::LevelDb.is_available());
    let fs = MemFs::new();
    let o = Options {
        value_layout: Some(ValueLayout::Bands),
        ..mem_opts(&fs)
    };
    assert_invalid(Db::open(dir(), o).map(|_| ()), "bands", "lsm + bands");
    // Value-log options out of range, and the WAL-less mode this build lacks.
    for (tweak, name) in [
        (
            (|o: &mut Options| {
                *o = Options {
                    wal: false,
                    ..Options::preset(Preset::LevelDb)
                }
            }) as fn(&mut Options),
            "wal",
        ),
        (
            |o: &mut Options| o.gc_garbage_ratio = 1.0,
            "gc_garbage_ratio",
        ),
        (
            |o: &mut Options| o.space_amp_target = 1.0,
            "space_amp_target",
        ),
        (
            |o: &mut Options| o.space_amp_target = 0.5,
            "space_amp_target",
        ),
        (
            |o: &mut Options| o.space_amp_target = f64::NAN,
            "space_amp_target",
        ),
        (|o: &mut Options| o.vlog_file_size = 1024, "vlog_file_size"),
        (|o: &mut Options| o.gc_chunk_size = 16, "gc_chunk_size"),
        (|o: &mut Options| o.value_threshold = 0, "value_threshold"),
    ] {
        let mut o = Options::preset(Preset::WiscKey);
        tweak(&mut o);
        match o.validate() {
            Err(Error::InvalidArgument(m)) => assert!(m.contains(name), "{name}: {m}"),
            other => panic!("{name}: expected InvalidArgument, got {other:?}"),
        }
    }
    let o = Options {
        index: Some(IndexKind::Hash),
        ..mem_opts(&fs)
    };
    assert_invalid(Db::open(dir(), o).map(|_| ()), "hash", "hash + inline");
}

// ---------------------------------------------------------------------------
// Paths that hold no database.

#[test]
fn a_regular_file_is_not_a_database_and_is_left_alone() {
    // The operating system's file system.
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("data.bin");
    std::fs::write(&file, b"precious").unwrap();
    let e = Db::open(&file, Options::default()).map(|_| ()).unwrap_err();
    assert!(
        matches!(&e, Error::NotADatabase { path, .. } if path == &file),
        "{e:?}"
    );
    assert_eq!(std::fs::read(&file).unwrap(), b"precious");
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);

    // The in-memory one.
    let fs = MemFs::new();
    fs.create_dir_all(Path::new("/d")).unwrap();
    write_atomic(&fs, Path::new("/d/f"), b"precious").unwrap();
    let e = Db::open("/d/f", mem_opts(&fs)).map(|_| ()).unwrap_err();
    assert!(matches!(&e, Error::NotADatabase { .. }), "{e:?}");
    assert_eq!(read_all(&fs, Path::new("/d/f")).unwrap(), b"precious");
    assert_eq!(fs.list(Path::new("/d")).unwrap(), ["f"]);
}

/// Files a refused open may have created in a foreign directory.
fn names(p: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(p)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

#[test]
fn a_foreign_directory_is_not_a_database_and_its_files_are_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("notes.txt"), b"my notes").unwrap();
    for create_if_missing in [true, false] {
        let o = Options {
            create_if_missing,
            ..Options::default()
        };
        let e = Db::open(tmp.path(), o).map(|_| ()).unwrap_err();
        assert!(
            matches!(&e, Error::NotADatabase { path, .. } if path == tmp.path()),
            "{e:?}"
        );
        assert_eq!(
            std::fs::read(tmp.path().join("notes.txt")).unwrap(),
            b"my notes"
        );
        // At most the lock file is added (see the ignored test below).
        let mut n = names(tmp.path());
        n.retain(|x| x != "LOCK");
        assert_eq!(n, ["notes.txt"]);
    }

    let fs = MemFs::new();
    fs.create_dir_all(dir()).unwrap();
    write_atomic(&fs, &dir().join("notes.txt"), b"my notes").unwrap();
    let e = Db::open(dir(), mem_opts(&fs)).map(|_| ()).unwrap_err();
    assert!(matches!(&e, Error::NotADatabase { .. }), "{e:?}");
    assert_eq!(
        read_all(&fs, &dir().join("notes.txt")).unwrap(),
        b"my notes"
    );
    let mut n = fs.list(dir()).unwrap();
    n.retain(|x| x != "LOCK");
    assert_eq!(n, ["notes.txt"]);
}

#[test]
fn a_refused_open_leaves_a_foreign_directory_exactly_as_found() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("notes.txt"), b"my notes").unwrap();
    assert!(matches!(
        Db::open(tmp.path(), Options::default()),
        Err(Error::NotADatabase { .. })
    ));
    assert_eq!(names(tmp.path()), ["notes.txt"]);
    let empty = tempfile::tempdir().unwrap();
    let o = Options {
        create_if_missing: false,
        ..Options::default()
    };
    assert!(matches!(
        Db::open(empty.path(), o),
        Err(Error::NotADatabase { .. })
    ));
    assert!(names(empty.path()).is_empty(), "{:?}", names(empty.path()));
}

#[test]
fn create_if_missing_off_and_error_if_exists() {
    let tmp = tempfile::tempdir().unwrap();
    let no_create = || Options {
        create_if_missing: false,
        ..Options::default()
    };
    // A missing path is not created.
    let missing = tmp.path().join("missing");
    let e = Db::open(&missing, no_create()).map(|_| ()).unwrap_err();
    assert!(matches!(&e, Error::NotADatabase { .. }), "{e:?}");
    assert!(!missing.exists());
    // An empty directory gets no database.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let e = Db::open(&empty, no_create()).map(|_| ()).unwrap_err();
    assert!(matches!(&e, Error::NotADatabase { .. }), "{e:?}");
    assert!(!empty.join("IDENTITY").exists() && !empty.join("CURRENT").exists());

    // error_if_exists: fine for a new database, an error for an existing one.
    let path = tmp.path().join("db");
    let exclusive = || Options {
        error_if_exists: true,
        ..Options::default()
    };
    let db = Db::open(&path, exclusive()).unwrap();
    db.put(b"k", b"v").unwrap();
    db.close().unwrap();
    let e = Db::open(&path, exclusive()).map(|_| ()).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("exists")),
        "{e:?}"
    );
    // Refused without damage; create_if_missing off opens an existing one.
    let db = Db::open(&path, no_create()).unwrap();
    assert_eq!(db.get(b"k").unwrap(), Some(b"v".to_vec()));
}

// ---------------------------------------------------------------------------
// Locking.

fn check_busy(path: &Path, opts: impl Fn() -> Options) {
    let first = Db::open(path, opts()).unwrap();
    first.put(b"k", b"1").unwrap();
    for _ in 0..2 {
        match Db::open(path, opts()) {
            Err(Error::Busy { path: lock }) => assert_eq!(lock, path.join("LOCK")),
            Err(e) => panic!("expected Busy, got {e:?}"),
            Ok(_) => panic!("two handles opened the same database"),
        }
    }
    // The refused open disturbed nothing.
    first.put(b"k", b"2").unwrap();
    assert_eq!(first.get(b"k").unwrap(), Some(b"2".to_vec()));
    first.close().unwrap();
    let second = Db::open(path, opts()).unwrap();
    assert_eq!(second.get(b"k").unwrap(), Some(b"2".to_vec()));
    // Dropping a handle without `close` releases the lock too.
    assert!(matches!(Db::open(path, opts()), Err(Error::Busy { .. })));
    drop(second);
    let third = Db::open(path, opts()).unwrap();
    assert_eq!(third.get(b"k").unwrap(), Some(b"2".to_vec()));
}

#[test]
fn second_open_is_busy_until_the_first_closes() {
    let tmp = tempfile::tempdir().unwrap();
    check_busy(&tmp.path().join("db"), Options::default);
    let fs = MemFs::new();
    check_busy(dir(), || mem_opts(&fs));
}

// ---------------------------------------------------------------------------
// Recorded configuration.

/// An IDENTITY file body, as `identity.rs` documents it (with the `wal`
/// line a database gets since the mode is recorded).
fn identity(format: &str, index: &str, layout: &str) -> String {
    identity_lines(format!(
        "format={format}\nindex={index}\nlayout={layout}\nwal=on\n"
    ))
}

fn identity_lines(lines: String) -> String {
    let body = format!("sepkv-identity\n{lines}");
    format!("{body}crc={:08x}\n", mask(crc(body.as_bytes())))
}

#[test]
fn a_different_recorded_configuration_is_refused() {
    let fs = MemFs::new();
    let id = dir().join("IDENTITY");
    let db = Db::open(dir(), mem_opts(&fs)).unwrap();
    db.put(b"k", b"v").unwrap();
    db.close().unwrap();
    let original = read_all(&fs, &id).unwrap();
    // The hand-made file matches what the engine writes.
    assert_eq!(original, identity("2", "lsm", "inline").as_bytes());

    // Named configurations must match the record.
    let leveldb = || Options {
        fs: Arc::new(fs.clone()),
        ..Options::preset(Preset::LevelDb)
    };
    for (index, layout) in [("lsm", "vlog"), ("hash", "bands"), ("lwc", "inline")] {
        let text = identity("1", index, layout);
        write_atomic(&fs, &id, text.as_bytes()).unwrap();
        match Db::open(dir(), leveldb()) {
            Err(Error::ConfigMismatch { stored, requested }) => {
                assert!(
                    stored.contains(index) && stored.contains(layout),
                    "{stored}"
                );
                assert!(
                    requested.contains("lsm") && requested.contains("inline"),
                    "{requested}"
                );
            }
            other => panic!(
                "{index}+{layout}: expected ConfigMismatch, got {:?}",
                other.map(|_| ())
            ),
        }
        assert_eq!(
            read_all(&fs, &id).unwrap(),
            text.as_bytes(),
            "IDENTITY was rewritten"
        );
    }
    // Unnamed, the record decides: a recorded preset this build lacks is
    // refused by its name, and an unknown WAL mode is damage.
    write_atomic(&fs, &id, identity("1", "lsm", "bands").as_bytes()).unwrap();
    match Db::open(dir(), mem_opts(&fs)) {
        Err(Error::InvalidArgument(m)) => assert!(
            m.starts_with("index lsm with value layout bands is not implemented"),
            "{m}"
        ),
        other => panic!("expected InvalidArgument, got {:?}", other.map(|_| ())),
    }
    let text = identity_lines("format=1\nindex=lsm\nlayout=inline\nwal=maybe\n".into());
    write_atomic(&fs, &id, text.as_bytes()).unwrap();
    match Db::open(dir(), mem_opts(&fs)) {
        Err(Error::Corruption { reason, .. }) => assert!(reason.contains("wal"), "{reason}"),
        other => panic!("expected Corruption, got {:?}", other.map(|_| ())),
    }
    // A file written before the mode was recorded (no `wal` line) opens,
    // and the read-write open upgrades it to format 2.
    let text = identity_lines("format=1\nindex=lsm\nlayout=inline\n".into());
    write_atomic(&fs, &id, text.as_bytes()).unwrap();
    Db::open(dir(), leveldb()).unwrap().close().unwrap();
    let upgraded = String::from_utf8(read_all(&fs, &id).unwrap()).unwrap();
    assert!(upgraded.contains("\nformat=2\n"), "{upgraded}");
    // An older format is not a database this build knows; a newer one is
    // named as such, with both versions.
    write_atomic(&fs, &id, identity("0", "lsm", "inline").as_bytes()).unwrap();
    match Db::open(dir(), mem_opts(&fs)) {
        Err(Error::NotADatabase { reason, .. }) => assert!(
            reason.contains("format version 0") && reason.contains("1 to 2"),
            "{reason}"
        ),
        other => panic!(
            "format 0: expected NotADatabase, got {:?}",
            other.map(|_| ())
        ),
    }
    for format in ["3", "4294967295"] {
        write_atomic(&fs, &id, identity(format, "lsm", "inline").as_bytes()).unwrap();
        match Db::open(dir(), mem_opts(&fs)) {
            Err(e @ Error::FormatTooNew { .. }) => {
                let m = e.to_string();
                assert!(m.contains(format) && m.contains("version 2"), "{m}");
            }
            other => panic!(
                "format {format}: expected FormatTooNew, got {:?}",
                other.map(|_| ())
            ),
        }
    }
    // Restored, the database is intact.
    write_atomic(&fs, &id, &original).unwrap();
    let db = Db::open(dir(), mem_opts(&fs)).unwrap();
    assert_eq!(db.get(b"k").unwrap(), Some(b"v".to_vec()));
    db.close().unwrap();

    // A directory holding only a hand-made IDENTITY, on the real file system.
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("IDENTITY"), identity("1", "lsm", "vlog")).unwrap();
    assert_eq!(
        sepkv::stored_config(tmp.path()).unwrap(),
        Some((IndexKind::Lsm, ValueLayout::Vlog))
    );
    let e = Db::open(tmp.path(), Options::preset(Preset::LevelDb))
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(e, Error::ConfigMismatch { .. }), "{e:?}");
    assert_eq!(names(tmp.path()).iter().filter(|n| *n != "LOCK").count(), 1);
    std::fs::write(tmp.path().join("IDENTITY"), identity("7", "lsm", "inline")).unwrap();
    let e = sepkv::stored_config(tmp.path()).unwrap_err();
    assert!(matches!(e, Error::FormatTooNew { found: 7, .. }), "{e:?}");
}

// ---------------------------------------------------------------------------
// Use after close.

#[test]
fn every_call_after_close_is_closed() {
    let fs = MemFs::new();
    let db = Db::open(dir(), mem_opts(&fs)).unwrap();
    db.put(b"k", b"v").unwrap();
    let snap = db.snapshot().unwrap();
    db.close().unwrap();
    db.close().unwrap();
    let mut b = WriteBatch::new();
    b.put(b"x", b"y").unwrap();
    assert_closed(db.put(b"k", b"w"), "put");
    assert_closed(db.delete(b"k"), "delete");
    assert_closed(db.write(&b, WriteOptions { sync: true }), "write");
    assert_closed(
        db.write(&WriteBatch::new(), WriteOptions::default()),
        "empty write",
    );
    assert_closed(db.get(b"k"), "get");
    let ro = ReadOptions {
        snapshot: Some(&snap),
        ..Default::default()
    };
    assert_closed(db.get_opt(&ro, b"k"), "get_opt with a snapshot");
    assert_closed(db.iter(&ReadOptions::default()).map(|_| ()), "iter");
    assert_closed(
        db.iter_range(&ReadOptions::default(), ..b"z").map(|_| ()),
        "iter_range",
    );
    assert_closed(db.scan(.., true).map(|_| ()), "scan");
    assert_closed(db.snapshot(), "snapshot");
    assert_closed(db.flush(), "flush");
    assert_closed(db.compact_range(..), "compact_range");
    assert_closed(db.verify().map(|_| ()), "verify");
    assert_closed(db.stats().map(|_| ()), "stats");
    db.close().unwrap();
    drop(snap);
    drop(db);
    let db = Db::open(dir(), mem_opts(&fs)).unwrap();
    assert_eq!(db.get(b"k").unwrap(), Some(b"v".to_vec()));
    assert_eq!(db.get(b"x").unwrap(), None);
}

// ---------------------------------------------------------------------------
// Full device and failing I/O.

/// Bytes held by the files of the database directory.
fn usage(fs: &FaultFs) -> u64 {
    fs.list(dir())
        .unwrap()
        .iter()
        .filter_map(|n| fs.file_len(&dir().join(n)))
        .sum()
}

/// Writes `n` keys starting at `from`, every `sync_every`-th synced.
fn write_keys(
    db: &Db,
    model: &mut BTreeMap<Vec<u8>, Vec<u8>>,
    from: usize,
    n: usize,
    sync_every: usize,
) {
    for i in from..from + n {
        let mut b = WriteBatch::new();
        b.put(key(i), value(i)).unwrap();
        db.write(
            &b,
            WriteOptions {
                sync: i % sync_every == 0,
            },
        )
        .unwrap();
        model.insert(key(i), value(i));
    }
}

/// Checks that `db` holds exactly `model`, plus possibly the whole of the
/// failed batch `failed` (all of it or none).
#[track_caller]
fn check_after_failure(
    db: &Db,
    model: &BTreeMap<Vec<u8>, Vec<u8>>,
    failed: &[(Vec<u8>, Vec<u8>)],
    what: &str,
) {
    let mut got = contents(db);
    let present: Vec<bool> = failed.iter().map(|(k, _)| got.contains_key(k)).collect();
    assert!(
        present.iter().all(|&p| p) || present.iter().all(|&p| !p),
        "{what}: the failed batch is partly present: {present:?}"
    );
    for (k, v) in failed {
        if let Some(g) = got.remove(k) {
            assert_eq!(&g, v, "{what}: the failed write is present but not intact");
        }
    }
    assert_eq!(got.len(), model.len(), "{what}: key count");
    assert!(
        got == *model,
        "{what}: contents differ from the acknowledged writes"
    );
}

#[test]
fn enospc_on_a_wal_append_poisons_and_loses_no_acknowledged_write() {
    let fs = FaultFs::new();
    let db = Db::open(dir(), fault_opts(&fs)).unwrap();
    let mut model = BTreeMap::new();
    write_keys(&db, &mut model, 0, 200, 10);
    // Unsynced writes after the last synced one.
    write_keys(&db, &mut model, 200, 5, usize::MAX);

    fs.set_space_limit(Some(usage(&fs) + 64));
    let big = vec![b'x'; 1000];
    let failed = vec![
        (b"failed-a".to_vec(), big.clone()),
        (b"failed-b".to_vec(), b"b".to_vec()),
    ];
    let mut b = WriteBatch::new();
    for (k, v) in &failed {
        b.put(k, v).unwrap();
    }
    let e = db.write(&b, WriteOptions { sync: true }).unwrap_err();
    assert!(e.is_no_space(), "{e:?}");
    assert!(
        matches!(&e, Error::Io { path, .. } if path.extension().is_some_and(|x| x == "log")),
        "{e:?}"
    );

    // Reads continue and see exactly the acknowledged writes.
    for (k, v) in &model {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
    }
    assert_eq!(db.get(b"failed-a").unwrap(), None);
    assert!(contents(&db) == model);
    // Writes now fail with Poisoned, even ones that would fit.
    assert_poisoned(db.put(b"s", b"t"), "small put");
    assert_poisoned(db.delete(key(3)), "delete");
    assert_poisoned(db.write(&b, WriteOptions { sync: true }), "synced write");
    assert_poisoned(db.flush(), "flush");
    assert_poisoned(db.compact_range(..), "compact_range");
    fs.set_space_limit(None);
    assert_poisoned(db.put(b"s", b"t"), "put once space is back");
    assert_eq!(db.get(key(3)).unwrap(), Some(value(3)));

    db.close().unwrap();
    let db = Db::open(dir(), fault_opts(&fs)).unwrap();
    check_after_failure(&db, &model, &failed, "after reopen");
    db.put(b"s", b"t").unwrap();
    assert_eq!(db.get(b"s").unwrap(), Some(b"t".to_vec()));
}

/// ENOSPC, then a power loss instead of a clean close: every synced write
/// survives, and the state is a prefix of the write history.
#[test]
fn enospc_then_crash_keeps_every_synced_write() {
    let fs = FaultFs::new();
    let db = Db::open(dir(), fault_opts(&fs)).unwrap();
    let mut model = BTreeMap::new();
    write_keys(&db, &mut model, 0, 195, 10); // key 190 is the last synced one
    write_keys(&db, &mut model, 195, 5, usize::MAX);
    fs.set_space_limit(Some(usage(&fs)));
    let e = db.put(b"failed", [b'x'; 500]).unwrap_err();
    assert!(e.is_no_space(), "{e:?}");
    assert_poisoned(db.put(b"s", b"t"), "put after ENOSPC");
    fs.crash();
    drop(db);
    fs.set_space_limit(None);
    let db = Db::open(dir(), fault_opts(&fs)).unwrap();
    assert_eq!(db.get(b"failed").unwrap(), None);
    let got = contents(&db);
    let n = got.len();
    assert!(n >= 191, "synced writes lost: {n} keys recovered");
    let want: BTreeMap<_, _> = (0..n).map(|i| (key(i), value(i))).collect();
    assert!(
        got == want,
        "recovered state is not a prefix of the history"
    );
}

/// A failing background flush (writing its table, or logging it in the
/// manifest) poisons the database: writes then fail with `Poisoned`, `stats`
/// shows the background error, reads continue, and a reopen once the fault
/// is gone recovers every acknowledged write (and leaves no stray table
/// behind).
#[test]
fn failing_background_flush_poisons_and_reopen_recovers() {
    let rules = [
        (FaultOp::Write, ".sst", FaultKind::Enospc, "os error 28"),
        (FaultOp::Create, ".sst", FaultKind::Enospc, "os error 28"),
        (FaultOp::Sync, ".sst", FaultKind::Eio, "os error 5"),
        (FaultOp::Write, "MANIFEST", FaultKind::Enospc, "os error 28"),
        (FaultOp::Sync, "MANIFEST", FaultKind::Eio, "os error 5"),
    ];
    for (op, file, kind, needle) in rules {
        let what = format!("{op:?} of {file} fails with {kind:?}");
        let fs = FaultFs::new();
        let db = Db::open(dir(), fault_opts(&fs)).unwrap();
        let mut model = BTreeMap::new();
        write_keys(&db, &mut model, 0, 100, 7);
        db.flush().unwrap();
        fs.add_rule(FaultRule {
            path_contains: Some(file.into()),
            ..FaultRule::new(op, kind)
        });
        let mut i = 100;
        let e = loop {
            assert!(i < 100_000, "{what}: writes never failed");
            match db.put(key(i), value(i)) {
                Ok(()) => {
                    model.insert(key(i), value(i));
                    i += 1;
                }
                Err(e) => break e,
            }
        };
        assert!(matches!(e, Error::Poisoned(_)), "{what}: {e:?}");
        assert!(i > 200, "{what}: failed before a memtable filled ({i})");
        let st = db.stats().unwrap();
        let bg = st
            .background_error
            .unwrap_or_else(|| panic!("{what}: no background error"));
        assert!(bg.contains(file) && bg.contains(needle), "{what}: {bg}");
        assert_poisoned(db.put(b"s", b"t"), &what);
        assert_poisoned(db.flush(), &what);
        for (k, v) in &model {
            assert_eq!(db.get(k).unwrap().as_ref(), Some(v), "{what}");
        }
        assert!(contents(&db) == model, "{what}: scan");
        db.close().unwrap();

        fs.clear_rules();
        let db = Db::open(dir(), fault_opts(&fs)).unwrap();
        assert!(contents(&db) == model, "{what}: after reopen");
        assert!(db.verify().unwrap().faults.is_empty());
        let st = db.stats().unwrap();
        assert!(st.background_error.is_none());
        let tables = fs
            .list(dir())
            .unwrap()
            .iter()
            .filter(|n| n.ends_with(".sst"))
            .count();
        assert_eq!(
            tables,
            st.levels.iter().map(|l| l.files).sum::<usize>(),
            "{what}: stray tables"
        );
        db.put(b"s", b"t").unwrap();
        db.flush().unwrap();
    }
}

#[test]
fn eio_on_a_wal_sync_fails_the_write_and_poisons() {
    let fs = FaultFs::new();
    let db = Db::open(dir(), fault_opts(&fs)).unwrap();
    let mut model = BTreeMap::new();
    write_keys(&db, &mut model, 0, 50, 5);
    fs.add_rule(FaultRule {
        path_contains: Some(".log".into()),
        times: Some(1),
        ..FaultRule::new(FaultOp::Sync, FaultKind::Eio)
    });
    // Unsynced writes do not sync, so the rule does not fire.
    write_keys(&db, &mut model, 50, 5, usize::MAX);
    let failed = vec![
        (b"failed-a".to_vec(), b"1".to_vec()),
        (b"failed-b".to_vec(), b"2".to_vec()),
    ];
    let mut b = WriteBatch::new();
    for (k, v) in &failed {
        b.put(k, v).unwrap();
    }
    let e = db.write(&b, WriteOptions { sync: true }).unwrap_err();
    match &e {
        Error::Io { path, source } => {
            assert_eq!(source.raw_os_error(), Some(5), "{e:?}");
            assert_eq!(path.extension().and_then(|x| x.to_str()), Some("log"));
        }
        _ => panic!("expected an I/O error, got {e:?}"),
    }
    assert!(!e.is_no_space());
    // Not acknowledged, so not visible; later writes are refused even
    // though the fault is over.
    assert_eq!(db.get(b"failed-a").unwrap(), None);
    assert_poisoned(db.put(b"s", b"t"), "put");
    assert_poisoned(db.write(&b, WriteOptions { sync: true }), "synced write");
    assert_poisoned(db.flush(), "flush");
    assert!(contents(&db) == model);
    db.close().unwrap();

    fs.clear_rules();
    let db = Db::open(dir(), fault_opts(&fs)).unwrap();
    check_after_failure(&db, &model, &failed, "after reopen");
    db.put(b"s", b"t").unwrap();
    db.write(&b, WriteOptions { sync: true }).unwrap();
    assert_eq!(db.get(b"failed-b").unwrap(), Some(b"2".to_vec()));
}

/// A database with tables and with writes only in its WAL, closed cleanly.
/// Returns the file system and the number of keys.
fn db_needing_recovery() -> (FaultFs, usize) {
    let fs = FaultFs::new();
    let db = Db::open(dir(), fault_opts(&fs)).unwrap();
    let mut model = BTreeMap::new();
    write_keys(&db, &mut model, 0, 300, 50);
    db.flush().unwrap();
    write_keys(&db, &mut model, 300, 60, 25);
    db.close().unwrap();
    (fs, model.len())
}

#[track_caller]
fn check_keys(db: &Db, n: usize, what: &str) {
    let want: BTreeMap<_, _> = (0..n).map(|i| (key(i), value(i))).collect();
    assert!(contents(db) == want, "{what}: contents differ");
    for i in (0..n).step_by(13) {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i)), "{what}: key {i}");
    }
}

/// A full device during recovery fails `open` with ENOSPC; once space is
/// back, `open` recovers everything.
#[test]
fn enospc_during_recovery_fails_open_and_a_later_open_recovers() {
    let (fs, n) = db_needing_recovery();
    fs.set_space_limit(Some(usage(&fs)));
    let e = Db::open(dir(), fault_opts(&fs)).map(|_| ()).unwrap_err();
    assert!(e.is_no_space(), "{e:?}");
    // Still full: still refused, and nothing is lost.
    let e = Db::open(dir(), fault_opts(&fs)).map(|_| ()).unwrap_err();
    assert!(e.is_no_space(), "{e:?}");
    fs.set_space_limit(None);
    let db = Db::open(dir(), fault_opts(&fs)).unwrap();
    check_keys(&db, n, "after the device has room again");
}

/// Every operation of `open` (and of the `close` after it) in turn fails
/// with EIO, together with all later ones; optionally the power is then cut.
/// Whatever happened, a clean `open` afterwards recovers every write.
#[test]
fn an_io_error_at_any_point_of_recovery_leaves_the_database_recoverable() {
    let (probe, _) = db_needing_recovery();
    let start = probe.op_count();
    Db::open(dir(), fault_opts(&probe))
        .unwrap()
        .close()
        .unwrap();
    let total = probe.op_count() - start;
    assert!(total >= 10, "{total} operations");
    for crash in [false, true] {
        for k in 0..total + 2 {
            let what = format!("failing from operation {k} of {total}, crash {crash}");
            let (fs, n) = db_needing_recovery();
            fs.add_rule(FaultRule {
                skip: k,
                ..FaultRule::new(FaultOp::Any, FaultKind::Eio)
            });
            if let Ok(db) = Db::open(dir(), fault_opts(&fs)) {
                let _ = db.close();
            }
            if crash {
                fs.crash();
            }
            fs.clear_rules();
            let db = Db::open(dir(), fault_opts(&fs)).unwrap_or_else(|e| panic!("{what}: {e:?}"));
            check_keys(&db, n, &what);
            assert!(db.verify().unwrap().faults.is_empty(), "{what}");
        }
    }
}
