//! `Options::use_direct_reads`: reads through `O_DIRECT` return the same
//! bytes as buffered reads, for every implemented preset, and a file system
//! that cannot read directly is refused at open with `InvalidArgument`.

use sepkv::fs::{FileSystem, MemFs, StdFs, DIRECT_IO_ALIGN};
use sepkv::{Db, Error, Options, Preset};
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("direct-reads-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// True when the file system under `dir` accepts `O_DIRECT`; otherwise
/// checks that opening a database with direct reads there is refused with
/// `InvalidArgument`, the documented behaviour.
fn direct_io_supported(dir: &Path) -> bool {
    let probe = dir.join("probe");
    std::fs::write(&probe, b"x").unwrap();
    let direct = StdFs.with_direct_reads().unwrap();
    match direct.open_read(&probe) {
        Ok(_) => true,
        Err(e) => {
            assert_eq!(e.kind(), std::io::ErrorKind::Unsupported, "{e}");
            let opts = Options {
                use_direct_reads: true,
                ..Options::default()
            };
            match Db::open(dir.join("db"), opts) {
                Err(Error::InvalidArgument(m)) => assert!(m.contains("use_direct_reads"), "{m}"),
                other => panic!("expected InvalidArgument, got {:?}", other.map(|_| ())),
            }
            eprintln!(
                "note: no O_DIRECT under {}: only the refusal was checked",
                dir.display()
            );
            false
        }
    }
}

#[test]
fn direct_reads_return_the_bytes_of_buffered_reads_at_any_offset() {
    let dir = scratch("file");
    if !direct_io_supported(&dir) {
        return;
    }
    let path = dir.join("data");
    // Not a multiple of the alignment, so reads meet a short last block.
    let data: Vec<u8> = (0..3 * DIRECT_IO_ALIGN + 1234)
        .map(|i| (i * 31 % 251) as u8)
        .collect();
    std::fs::write(&path, &data).unwrap();
    let direct = StdFs.with_direct_reads().unwrap();
    let f = direct.open_read(&path).unwrap();
    assert_eq!(f.len().unwrap(), data.len() as u64);
    let a = DIRECT_IO_ALIGN;
    for &(off, len) in &[
        (0, 1),
        (0, a),
        (1, a),
        (a - 1, 2),
        (a + 17, 2 * a),
        (3 * a, 1234),
        (3 * a + 1000, 234),
        (5, data.len() - 5),
    ] {
        let mut buf = vec![0u8; len];
        f.read_exact_at(off as u64, &mut buf).unwrap();
        assert_eq!(buf, &data[off..off + len], "offset {off} length {len}");
    }
    // Past the end: short, then nothing.
    let mut buf = vec![0u8; 100];
    let n = f.read_at(data.len() as u64 - 10, &mut buf).unwrap();
    assert_eq!(&buf[..n], &data[data.len() - 10..]);
    assert_eq!(f.read_at(data.len() as u64 + 5000, &mut buf).unwrap(), 0);
}

#[test]
fn every_preset_reads_its_data_back_with_direct_reads() {
    for preset in Preset::ALL.iter().copied().filter(|p| p.is_available()) {
        let dir = scratch(&format!("db-{preset}"));
        if !direct_io_supported(&dir) {
            return;
        }
        let db_dir = dir.join("db");
        let opts = || Options {
            use_direct_reads: true,
            write_buffer_size: 256 << 10,
            target_file_size: 256 << 10,
            ..Options::preset(preset)
        };
        let value = |i: u32| -> Vec<u8> {
            let len = [10usize, 700, 5000, 9000][i as usize % 4];
            (0..len).map(|j| (i as usize + j) as u8).collect()
        };
        let n = 3000u32;
        {
            let db = Db::open(&db_dir, opts()).unwrap();
            for i in 0..n {
                db.put(format!("key{i:06}"), value(i)).unwrap();
            }
            db.flush().unwrap();
            for i in (0..n).step_by(97) {
                assert_eq!(
                    db.get(format!("key{i:06}")).unwrap(),
                    Some(value(i)),
                    "{preset} key {i}"
                );
            }
            db.close().unwrap();
        }
        let db = Db::open(&db_dir, opts()).unwrap();
        for i in 0..n {
            assert_eq!(
                db.get(format!("key{i:06}")).unwrap(),
                Some(value(i)),
                "{preset} key {i}"
            );
        }
        let scanned: Vec<_> = db.scan(.., false).unwrap().map(|r| r.unwrap()).collect();
        assert_eq!(scanned.len(), n as usize, "{preset}");
        for (i, (k, v)) in scanned.into_iter().enumerate() {
            assert_eq!(k, format!("key{i:06}").into_bytes());
            assert_eq!(v, value(i as u32), "{preset} scan key {i}");
        }
        db.close().unwrap();
    }
}

#[test]
fn an_in_memory_file_system_refuses_direct_reads() {
    let opts = Options {
        fs: Arc::new(MemFs::new()),
        use_direct_reads: true,
        ..Options::default()
    };
    match Db::open("/db", opts) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("use_direct_reads"), "{m}"),
        other => panic!("expected InvalidArgument, got {:?}", other.map(|_| ())),
    }
}
