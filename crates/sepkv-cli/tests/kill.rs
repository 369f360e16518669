//! Process-level crash tests: `sepkv import` is killed with SIGKILL 20
//! times; afterwards `sepkv verify` passes and every record the importer
//! acknowledged (`acked <total>` on stdout) reads back with its value. With
//! `--sync` (the default preset) and without it (`hashkv`, whose values go
//! straight to their segments: an acknowledged write is in the OS, which
//! outlives the process).
//!
//! A round's kill is timed from the importer's progress, not from its
//! start: most rounds wait for the first acknowledgement and then kill
//! after a random delay, so each of them interrupts writes whatever the
//! load on the machine (a start, an open and its recovery can take longer
//! than any fixed window). The other rounds kill at a random moment from
//! the start, often inside the open's recovery. An importer that exits by
//! itself must have succeeded; its standard error is shown when it did not.
//! `SEPKV_KILL_SEED` picks the random delays.
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

const ROUNDS: usize = 20;
const LINES: usize = 200_000;
/// Signal number of SIGKILL on Linux, as `ExitStatus::signal` reports it.
const SIGKILL: i32 = 9;
/// How long a round waits for the importer's first acknowledgement before
/// the test fails: far beyond a start and a recovery on a loaded machine.
const FIRST_ACK_TIMEOUT: Duration = Duration::from_secs(120);

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
    let mut killed_rounds = 0;
    for round in 0..ROUNDS {
        // One round in four kills at any moment (the open's recovery
        // included), the others a while after the first acknowledgement.
        let at_any_moment = rng.gen_ratio(1, 4);
        let delay = Duration::from_millis(if at_any_moment {
            rng.gen_range(0..600)
        } else {
            rng.gen_range(0..300)
        });
        let stderr_path = tmp.path().join(format!("stderr-{round}"));
        let stderr = std::fs::File::create(&stderr_path).unwrap();
        let mut child = sepkv(&db)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
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
        let (first_ack, first_ack_seen) = mpsc::channel::<()>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(n) = line.strip_prefix("acked ") {
                    acked2.store(n.parse().expect("acked count"), Ordering::SeqCst);
                    let _ = first_ack.send(());
                }
            }
            // Dropping the sender here tells a waiting round that the
            // importer's stdout closed: it exited, its status says how.
        });
        if at_any_moment {
            std::thread::sleep(delay);
        } else {
            match first_ack_seen.recv_timeout(FIRST_ACK_TIMEOUT) {
                Ok(()) => std::thread::sleep(delay),
                Err(mpsc::RecvTimeoutError::Disconnected) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "round {round}: the importer acknowledged nothing in {FIRST_ACK_TIMEOUT:?}; \
                         its stderr: {}",
                        std::fs::read_to_string(&stderr_path).unwrap_or_default()
                    );
                }
            }
        }
        let _ = child.kill(); // SIGKILL
        let status = child.wait().expect("wait for sepkv");
        feeder.join().unwrap();
        reader.join().unwrap();
        let acked = acked.load(Ordering::SeqCst) as usize;
        if status.signal() == Some(SIGKILL) {
            killed_rounds += 1;
        } else {
            // It exited before the kill: only a finished import may.
            assert!(
                status.success() && acked == LINES,
                "round {round}: the importer exited by itself ({status}) after \
                 acknowledging {acked} of {LINES}; its stderr: {}",
                std::fs::read_to_string(&stderr_path).unwrap_or_default()
            );
        }
        if !at_any_moment {
            assert!(
                acked > 0,
                "round {round} was killed after an acknowledgement"
            );
        }
        acked_per_round.push(acked);
    }
    eprintln!("acknowledged per round (seed {seed}): {acked_per_round:?}");
    assert!(killed_rounds > 0, "no round was interrupted by the kill");

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
