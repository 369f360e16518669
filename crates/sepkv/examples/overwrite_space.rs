//! The space target's estimate against the bytes on disk during an
//! overwrite: loads `--num` records of `--value-size` bytes in random
//! order into a `wisckey` database, overwrites every record once in
//! another random order, and every `--every` writes prints what the
//! engine estimates (`space_amp_estimate`, the value log's live and
//! garbage bytes, the garbage it thinks the index hides) beside what is
//! true (the database directory's allocated bytes ÷ the live user bytes,
//! and the value log's real garbage: its span less the live records).
//!
//! ```text
//! cargo run --release -p sepkv --example overwrite_space -- DIR
//!     [--num N] [--value-size B] [--every W]
//! ```
//!
//! DIR must not exist; it is deleted at the end. 16-byte keys (`%016d`,
//! the benchmark harness's). Output: one line per report, tab-separated,
//! with a header line.

use sepkv::{Db, Options, Preset};
use std::path::{Path, PathBuf};
use std::time::Instant;

struct Args {
    dir: PathBuf,
    num: u64,
    value_size: usize,
    every: u64,
}

fn parse() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let dir = PathBuf::from(it.next().ok_or("usage: overwrite_space DIR [options]")?);
    let mut a = Args {
        dir,
        num: 500_000,
        value_size: 1000,
        every: 50_000,
    };
    while let Some(flag) = it.next() {
        let v = it.next().ok_or(format!("{flag} needs a value"))?;
        let n: u64 = v
            .parse()
            .map_err(|_| format!("{flag}: not a number: {v}"))?;
        match flag.as_str() {
            "--num" => a.num = n.max(1),
            "--value-size" => a.value_size = n as usize,
            "--every" => a.every = n.max(1),
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    Ok(a)
}

/// A random permutation of `0..n` (Fisher–Yates over a xorshift
/// generator seeded by `seed`).
fn order(n: u64, seed: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).collect();
    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ seed;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
    v
}

/// Allocated bytes of every file under `dir`.
fn allocated(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.blocks() * 512)
                .sum()
        })
        .unwrap_or(0)
}

fn main() {
    let a = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    if a.dir.exists() {
        eprintln!("{} exists; give a new directory", a.dir.display());
        std::process::exit(2);
    }
    let db = match Db::open(&a.dir, Options::preset(Preset::WiscKey)) {
        Ok(db) => db,
        Err(e) => {
            eprintln!("open: {e}");
            std::process::exit(1);
        }
    };
    let value = vec![b'v'; a.value_size];
    let user_per = 16 + a.value_size as u64;
    println!(
        "phase\twrites\tsecs\test_sa\ttrue_sa\tvlog_live_mb\tvlog_garbage_mb\tvlog_true_garbage_mb\thidden_mb\tdisk_mb\tstall_s\tstop_s"
    );
    let start = Instant::now();
    let mut record_len = 0u64;
    for (phase, seed) in [("fill", 1u64), ("overwrite", 2)] {
        for (i, k) in order(a.num, seed).into_iter().enumerate() {
            let key = format!("{k:016}");
            if let Err(e) = db.put(key.as_bytes(), &value) {
                eprintln!("put: {e}");
                std::process::exit(1);
            }
            let i = i as u64 + 1;
            if !i.is_multiple_of(a.every) && i != a.num {
                continue;
            }
            let s = match db.stats() {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("stats: {e}");
                    std::process::exit(1);
                }
            };
            let live_records = if phase == "fill" { i } else { a.num };
            if phase == "fill" && record_len == 0 {
                // The value log's span after the first report is all live
                // records (nothing was overwritten yet).
                let span = s.value_store.live_bytes + s.value_store.garbage_bytes;
                record_len = span / i;
            }
            let span = s.value_store.live_bytes + s.value_store.garbage_bytes;
            let true_garbage = span.saturating_sub(live_records * record_len);
            let disk = allocated(&a.dir);
            let mb = |b: u64| b as f64 / 1e6;
            println!(
                "{phase}\t{i}\t{:.2}\t{:.3}\t{:.3}\t{:.1}\t{:.1}\t{:.1}\t{:.1}\t{:.1}\t{:.2}\t{:.2}",
                start.elapsed().as_secs_f64(),
                s.space_amp_estimate,
                disk as f64 / (live_records * user_per) as f64,
                mb(s.value_store.live_bytes),
                mb(s.value_store.garbage_bytes),
                mb(true_garbage),
                mb(s.space_hidden_garbage),
                mb(disk),
                s.write_stall_micros as f64 / 1e6,
                s.write_stop_micros as f64 / 1e6,
            );
        }
    }
    drop(db);
    let _ = std::fs::remove_dir_all(&a.dir);
}
