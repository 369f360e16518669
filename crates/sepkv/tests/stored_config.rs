//! A database opens with the configuration it recorded at creation:
//! `Options::default()` (no index, no value layout named) reopens any
//! preset, WiscKey's log mode included; naming a different configuration is
//! `ConfigMismatch`, in the user's words (preset names).

use sepkv::fs::{FileSystem, MemFs};
use sepkv::{Db, Error, IndexKind, Options, Preset, ValueLayout};
use std::path::Path;
use std::sync::Arc;

fn on(fs: &MemFs, o: Options) -> Options {
    Options {
        fs: Arc::new(fs.clone()),
        hashkv_main_segment_size: 64 << 10,
        hashkv_log_segment_size: 16 << 10,
        value_capacity: Some(8 << 20),
        ..o
    }
}

#[test]
fn default_options_reopen_every_preset_as_created() {
    for preset in Preset::ALL.into_iter().filter(|p| p.is_available()) {
        let fs = MemFs::new();
        let dir = Path::new("/db");
        let db = Db::open(dir, on(&fs, Options::preset(preset))).unwrap();
        let big = vec![b'x'; 1000];
        db.put("k", &big).unwrap();
        db.close().unwrap();

        let db = Db::open(dir, on(&fs, Options::default())).unwrap();
        let (index, layout) = preset.axes();
        assert_eq!(db.options().index, Some(index), "{preset}");
        assert_eq!(db.options().value_layout, Some(layout), "{preset}");
        assert_eq!(db.get("k").unwrap(), Some(big.clone()), "{preset}");
        let s = db.stats().unwrap();
        assert_eq!(s.value_layout, layout.name());
        db.put("k2", &big).unwrap();
        db.close().unwrap();

        // The same preset named again opens; another is refused, naming
        // both presets.
        let db = Db::open(dir, on(&fs, Options::preset(preset))).unwrap();
        assert_eq!(db.get("k2").unwrap(), Some(big));
        db.close().unwrap();
        let other = if preset == Preset::WiscKey {
            Preset::HashKv
        } else {
            Preset::WiscKey
        };
        match Db::open(dir, on(&fs, Options::preset(other))) {
            Err(Error::ConfigMismatch { stored, requested }) => {
                assert!(stored.contains(&format!("preset {preset}")), "{stored}");
                assert!(
                    requested.contains(&format!("preset {other}")),
                    "{requested}"
                );
            }
            r => panic!("{preset} opened as {other}: {:?}", r.map(|_| ())),
        }
        // Naming only one axis counts as naming a configuration.
        let half = Options {
            value_layout: Some(other.axes().1),
            ..Options::default()
        };
        assert!(matches!(
            Db::open(dir, on(&fs, half)),
            Err(Error::ConfigMismatch { .. })
        ));
    }
}

/// Log mode keeps the last writes only in the value log: reopening it as
/// if it had a WAL would lose them. The mode is recorded and followed.
#[test]
fn log_mode_is_recorded_and_followed() {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let created = Options {
        wal: false,
        ..Options::preset(Preset::WiscKey)
    };
    let db = Db::open(dir, on(&fs, created.clone())).unwrap();
    db.put("small", "v").unwrap();
    db.put("big", vec![1u8; 500]).unwrap();
    db.close().unwrap(); // no flush: the writes are only in the value log

    let db = Db::open(dir, on(&fs, Options::default())).unwrap();
    assert!(!db.options().wal);
    assert_eq!(db.get("small").unwrap(), Some(b"v".to_vec()));
    assert_eq!(db.get("big").unwrap(), Some(vec![1u8; 500]));
    db.put("later", "w").unwrap();
    db.close().unwrap();

    // Naming wisckey with a WAL is another configuration.
    match Db::open(dir, on(&fs, Options::preset(Preset::WiscKey))) {
        Err(Error::ConfigMismatch { stored, requested }) => {
            assert!(stored.contains("wal = false"), "{stored}");
            assert!(!requested.contains("wal = false"), "{requested}");
        }
        r => panic!("{:?}", r.map(|_| ())),
    }
    let db = Db::open(dir, on(&fs, created)).unwrap();
    assert_eq!(db.get("later").unwrap(), Some(b"w".to_vec()));
}

#[test]
fn a_new_database_without_a_named_configuration_is_leveldb() {
    let fs = MemFs::new();
    let db = Db::open("/db", on(&fs, Options::default())).unwrap();
    assert_eq!(db.options().index, Some(IndexKind::Lsm));
    assert_eq!(db.options().value_layout, Some(ValueLayout::Inline));
    db.close().unwrap();
    assert!(Db::open("/db", on(&fs, Options::preset(Preset::LevelDb))).is_ok());
}

#[test]
fn errors_name_presets_and_list_only_available_ones() {
    let fs = MemFs::new();
    let hash_vlog = Options {
        index: Some(IndexKind::Hash),
        value_layout: Some(ValueLayout::Vlog),
        ..Options::default()
    };
    let e = Db::open("/db", on(&fs, hash_vlog))
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        format!(
            "invalid argument: index hash with value layout vlog is not implemented in this build (the hash index takes only the bands layout, and bands only the hash index); available presets: {}",
            Preset::available_names()
        )
    );
    assert!(
        !fs.exists(Path::new("/db")),
        "a refused open created the directory"
    );
    let e = "nosuch".parse::<Preset>().unwrap_err().to_string();
    for p in Preset::ALL {
        assert_eq!(e.contains(p.name()), p.is_available(), "{e}");
    }
    assert_eq!(e.matches("invalid argument").count(), 1, "{e}");
}
