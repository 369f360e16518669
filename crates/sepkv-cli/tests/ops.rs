//! Operating a database from the command line, with real processes:
//! - `get`, `scan`, `stats` and `verify` open read-only: beside a process
//!   that has the database open for writing (an `import` waiting on its
//!   stdin) they fail with the lock error and exit 2, and work once it
//!   ends; they leave the directory unchanged;
//! - `sepkv checkpoint DIR` writes a copy that `verify` passes and `scan`
//!   reads exactly as the source, for every preset; an existing DIR is
//!   refused;
//! - `sepkv repair` rebuilds a `wisckey` database whose manifest and
//!   `CURRENT` were removed: the same keys read back.

mod common;

use common::{sepkv, sepkv_stdin, text};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

fn import(db: &Path, preset: &str, input: &str) {
    let out = sepkv_stdin(db, &["--preset", preset, "import", "--batch", "50"], input);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

fn records(n: usize) -> String {
    (0..n)
        .map(|i| format!("k{i:05}\t{}\n", format!("v{i}-").repeat(1 + i % 40)))
        .collect()
}

#[test]
fn read_only_commands_refuse_a_writer_process_then_read() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    import(&db, "wisckey", &records(500));
    // A writer process: an import that has written one batch and waits for
    // more input, holding the database open.
    let mut writer = Command::new(env!("CARGO_BIN_EXE_sepkv"))
        .arg("--db")
        .arg(&db)
        .args(["import", "--batch", "1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = writer.stdin.take().unwrap();
    stdin.write_all(b"live\tyes\n").unwrap();
    stdin.flush().unwrap();
    let mut line = String::new();
    BufReader::new(writer.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "acked 1");
    for args in [
        &["get", "k00001"][..],
        &["scan", "--limit", "3"],
        &["stats"],
    ] {
        let out = sepkv(&db, args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stdout)
        );
        let err = text(&out.stderr);
        assert!(err.contains("locked by another process"), "{args:?}: {err}");
    }
    let out = sepkv(&db, &["verify"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).contains("locked by another process"));
    drop(stdin);
    assert!(writer.wait().unwrap().success());
    let out = sepkv(&db, &["get", "live"]);
    assert_eq!(text(&out.stdout), "yes\n");
    let out = sepkv(&db, &["get", "k00001"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "v1-v1-");
    let out = sepkv(&db, &["verify"]);
    assert!(out.status.success(), "{}", text(&out.stdout));
}

#[test]
fn checkpoint_command_copies_every_preset() {
    let tmp = tempfile::tempdir().unwrap();
    for preset in ["leveldb", "wisckey", "hashkv", "ktstore", "flashkey", "lwc"] {
        let db = tmp.path().join(preset);
        let copy = tmp.path().join(format!("{preset}-ckpt"));
        import(&db, preset, &records(2000));
        let out = sepkv(&db, &["checkpoint", copy.to_str().unwrap()]);
        assert!(out.status.success(), "{preset}: {}", text(&out.stderr));
        assert!(
            text(&out.stdout).contains("at sequence 2000"),
            "{preset}: {}",
            text(&out.stdout)
        );
        let out = sepkv(&copy, &["verify"]);
        assert!(out.status.success(), "{preset}: {}", text(&out.stdout));
        let a = sepkv(&db, &["scan"]);
        let b = sepkv(&copy, &["scan"]);
        assert_eq!(text(&a.stdout).lines().count(), 2000, "{preset}");
        assert_eq!(a.stdout, b.stdout, "{preset}: the copy reads otherwise");
        let out = sepkv(&db, &["checkpoint", copy.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2));
        assert!(
            text(&out.stderr).contains("exists"),
            "{}",
            text(&out.stderr)
        );
    }
}

#[test]
fn repair_command_rebuilds_a_lost_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    import(&db, "wisckey", &records(3000));
    let before = sepkv(&db, &["scan"]);
    for e in std::fs::read_dir(&db).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("MANIFEST-") || name == "CURRENT" {
            std::fs::remove_file(p).unwrap();
        }
    }
    let out = sepkv(&db, &["get", "k00001"]);
    assert_eq!(out.status.code(), Some(2));
    let out = sepkv(&db, &["repair"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report = text(&out.stdout);
    assert!(report.contains("keys after repair: 3000"), "{report}");
    let after = sepkv(&db, &["scan"]);
    assert_eq!(before.stdout, after.stdout);
    let out = sepkv(&db, &["verify"]);
    assert!(out.status.success(), "{}", text(&out.stdout));
}
