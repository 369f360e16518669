//! Micro-benchmark of memtable inserts: ns per insert (wall clock and the
//! thread's CPU time) and key comparisons per insert, for 16-byte keys
//! with a value pointer, filling memtables of the write buffer the presets
//! use (8 MiB).
//!
//! ```text
//! cargo run --release -p sepkv --example memtable_insert -- [--rounds N]
//!     [--buffer BYTES] [--keys decimal|binary] [--order random|sorted]
//! ```
//!
//! Each round fills a fresh memtable until it holds `--buffer` bytes, as a
//! writer does before the memtable is frozen. `decimal` keys are the
//! benchmark harness's (`%016d` of a random number below 1,000,000, so the
//! first ten bytes are zeros); `binary` keys are 16 random bytes. Wall time
//! moves with the machine's load; the minimum over rounds is the figure to
//! compare. For counts that do not move with load, run a round under
//! `valgrind --tool=callgrind --cache-sim=yes --toggle-collect='*fill_one*'`
//! (instructions and simulated cache misses of the inserts only).

use sepkv::index::key::ValueType;
use sepkv::index::memtable::MemTable;
use sepkv::vstore::ValuePointer;
use std::time::Instant;

struct Args {
    rounds: usize,
    buffer: usize,
    binary: bool,
    sorted: bool,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        rounds: 7,
        buffer: 8 << 20,
        binary: false,
        sorted: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--rounds" => a.rounds = val()?.parse().map_err(|e| format!("--rounds: {e}"))?,
            "--buffer" => a.buffer = val()?.parse().map_err(|e| format!("--buffer: {e}"))?,
            "--keys" => {
                a.binary = match val()?.as_str() {
                    "decimal" => false,
                    "binary" => true,
                    k => return Err(format!("--keys: decimal or binary, not {k}")),
                }
            }
            "--order" => {
                a.sorted = match val()?.as_str() {
                    "random" => false,
                    "sorted" => true,
                    o => return Err(format!("--order: random or sorted, not {o}")),
                }
            }
            f => return Err(format!("unknown flag {f}")),
        }
    }
    if a.rounds == 0 || a.buffer == 0 {
        return Err("--rounds and --buffer must be positive".into());
    }
    Ok(a)
}

/// xorshift64*: the same keys every run.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// CPU time of the calling thread, in nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a
    // constant the kernel knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One insert; not inlined, so that a profiler can select the inserts.
#[inline(never)]
fn fill_one(m: &MemTable, seq: u64, key: &[u8], value: &[u8]) {
    m.add(seq, ValueType::Pointer, key, value);
}

fn main() {
    let a = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("memtable_insert: {e}");
            std::process::exit(2);
        }
    };
    // Enough entries to fill the buffer: at least 32 bytes each.
    let cap = a.buffer / 32 + 1;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut keys: Vec<[u8; 16]> = (0..cap)
        .map(|_| {
            let mut k = [0u8; 16];
            if a.binary {
                k[..8].copy_from_slice(&rng.next().to_be_bytes());
                k[8..].copy_from_slice(&rng.next().to_be_bytes());
            } else {
                let s = format!("{:016}", rng.next() % 1_000_000);
                k.copy_from_slice(s.as_bytes());
            }
            k
        })
        .collect();
    if a.sorted {
        keys.sort();
    }
    // Value pointers as the value log writes them: 1 KiB records, one
    // after another in one file.
    let values: Vec<Vec<u8>> = (0..cap)
        .map(|i| {
            ValuePointer {
                file_id: 3,
                offset: i as u64 * 1046,
                length: 1046,
                aux: 0,
            }
            .encode()
        })
        .collect();
    println!(
        "memtable inserts: {} keys, {} order, {}-byte buffer, {} rounds",
        if a.binary { "binary" } else { "decimal" },
        if a.sorted { "sorted" } else { "random" },
        a.buffer,
        a.rounds
    );
    let mut wall = Vec::new();
    let mut cpu = Vec::new();
    for round in 0..a.rounds {
        let m = MemTable::for_buffer(a.buffer);
        let (t0, c0) = (Instant::now(), thread_cpu_ns());
        let mut n = 0;
        while m.approximate_bytes() < a.buffer && n < cap {
            fill_one(&m, n as u64 + 1, &keys[n], &values[n]);
            n += 1;
        }
        let (w, c) = (
            t0.elapsed().as_nanos() as f64,
            (thread_cpu_ns() - c0) as f64,
        );
        // Comparisons per search, sampled over the full memtable.
        let probes = 4096.min(n);
        let cmp: u64 = (0..probes)
            .map(|i| m.search_comparisons(&keys[i * n / probes], n as u64 + 1) as u64)
            .sum();
        println!(
            "round {round}: {n} inserts, {:.1} MiB held, {:.1} ns/insert wall, {:.1} ns/insert thread CPU, {:.1} comparisons per search of the full memtable",
            m.approximate_bytes() as f64 / (1 << 20) as f64,
            w / n as f64,
            c / n as f64,
            cmp as f64 / probes as f64
        );
        wall.push(w / n as f64);
        cpu.push(c / n as f64);
        drop(m);
    }
    let stat = |v: &mut Vec<f64>| {
        v.sort_by(|x, y| x.total_cmp(y));
        (v[0], v[v.len() / 2])
    };
    let (wmin, wmed) = stat(&mut wall);
    let (cmin, cmed) = stat(&mut cpu);
    println!(
        "ns/insert: wall min {wmin:.1} median {wmed:.1}; thread CPU min {cmin:.1} median {cmed:.1}"
    );
}
