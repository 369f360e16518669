//! Process-level crash tests: `sepkv import` is killed with SIGKILL at
//! random moments, 20 times; afterwards `sepkv verify` passes and every
//! record the importer acknowledged (`acked <total>` on stdout) reads back
//! with its value. With `--sync` (the default preset) and without it
//! (`hashkv`, whose values go straight to their segments: an acknowledged
//! write is in the OS, which outlives the process).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const ROUNDS: usize = 20;
const LINES: usize = 200_000;

fn key(round: usize, i: usize) -> String {
    format!("r{round:02}-k{i:07}")
}

fn value(round: usize, i: usize, long: bool) -> String {
    let pad = if long { 100 + i % 1100 } else { i % 97 };
    format!("value-{round}-{i}-{}", "x".repeat(pad))
}

fn sepkv(db: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sepkv"));
    c.arg("--db").arg(db);
    c
}

#[test]
fn sigkill_during_import_loses_no_acknowledged_record() {
    killed_imports(&["import", "--sync", "--batch", "100"], false);
}

/// Unsynced `hashkv` imports of values 120–1220 bytes long, most of them
/// separated into segment groups.
#[test]
fn sigkill_during_unsynced_hashkv_import_loses_no_acknowledged_record() {
    killed_imports(&["--preset", "hashkv", "import", "--batch", "100"], true);
}

fn killed_imports(args: &[&str], long: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let seed = std::env::var("SEPKV_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(7u64);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut acked_per_round = Vec::new();
    for round in 0..ROUNDS {
        let mut child = sepkv(&db)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn sepkv");
        let mut stdin = child.stdin.take().unwrap();
        let feeder = std::thread::spawn(move || {
            let mut buf = String::new();
            for i in 0..LINES {
                buf.push_str(&key(round, i));
                buf.push('\t');
                buf.push_str(&value(round, i, long));
                buf.push('\n');
                if buf.len() > 64 << 10 {
                    if stdin.write_all(buf.as_bytes()).is_err() {
                        return; // killed
                    }
                    buf.clear();
                }
            }
            let _ = stdin.write_all(buf.as_bytes());
        });
        let acked = Arc::new(AtomicU64::new(0));
        let stdout = child.stdout.take().unwrap();
        let acked2 = acked.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(n) = line.strip_prefix("acked ") {
                    acked2.store(n.parse().expect("acked count"), Ordering::SeqCst);
                }
            }
        });
        std::thread::sleep(Duration::from_millis(rng.gen_range(30..600)));
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        feeder.join().unwrap();
        reader.join().unwrap();
        acked_per_round.push(acked.load(Ordering::SeqCst) as usize);
    }
    eprintln!("acknowledged per round: {acked_per_round:?}");
    assert!(
        acked_per_round.iter().any(|&a| a > 0),
        "no round acknowledged anything"
    );
    assert!(
        acked_per_round.iter().any(|&a| a < LINES),
        "no round was interrupted"
    );

    let out = sepkv(&db).arg("verify").output().unwrap();
    assert!(
        out.status.success(),
        "verify failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let out = sepkv(&db).arg("scan").output().unwrap();
    assert!(
        out.status.success(),
        "scan failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let stored: HashMap<&str, &str> = text.lines().filter_map(|l| l.split_once('\t')).collect();
    for (round, &acked) in acked_per_round.iter().enumerate() {
        for i in 0..acked {
            let k = key(round, i);
            assert_eq!(
                stored.get(k.as_str()).copied(),
                Some(value(round, i, long).as_str()),
                "acknowledged {k} lost"
            );
        }
    }
    // Whatever else survived is intact, never a torn or foreign value.
    for (k, v) in &stored {
        let (r, i) = k.split_once("-k").unwrap();
        let (round, i): (usize, usize) = (r[1..].parse().unwrap(), i.parse().unwrap());
        assert_eq!(*v, value(round, i, long));
    }
}
