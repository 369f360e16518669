//! Helpers the command-line suites share: run the `sepkv` binary of this
//! build against a database directory.
#![allow(dead_code)] // each suite uses its own share of these

use std::path::Path;
use std::process::{Command, Output, Stdio};

pub fn sepkv(db: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sepkv"))
        .arg("--db")
        .arg(db)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run sepkv")
}

pub fn sepkv_stdin(db: &Path, args: &[&str], input: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_sepkv"))
        .arg("--db")
        .arg(db)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sepkv");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
