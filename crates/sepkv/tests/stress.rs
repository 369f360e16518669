//! Concurrent stress test: a bank invariant held under concurrent writers,
//! snapshot readers, value-store GC, flushes and compactions, for every
//! preset this build implements.
//!
//! The database holds [`ACCOUNTS`] accounts. An account's value is its
//! balance, its account number, a nonce that names the write, and a filler of
//! 100–900 bytes derived from the nonce, so every value is separated into
//! the value store and a value read back is checked byte for byte. At the
//! same time, on one database:
//!
//! - writers move random amounts between two accounts, each transfer one
//!   atomic [`WriteBatch`] (1 % of them `sync`). The engine has no
//!   transactions, so the test serialises the read-modify-write of an
//!   account pair with per-account locks (taken in account order); the
//!   engine still sees several writers on overlapping keys. The locks also
//!   guard an in-memory copy of every account, and a writer's `get` must
//!   return exactly the value last written (a stale read fails at once);
//! - after a quarter of its transfers, a writer also writes one of its own
//!   [`SCRATCH`] keys — deletes it, or gives it a small value (kept inline)
//!   or a large one (separated) — after checking that the key reads back
//!   as it last wrote it. A version that left no record in the value store
//!   must never be undone by GC;
//! - two readers take a [`Db::snapshot`] and read every account through it
//!   three ways — `get_opt`, a forward cursor and a backward cursor (whole
//!   key space or split in two ranges at a random account) — and require
//!   the same account-by-account state from all three, exactly
//!   [`ACCOUNTS`] accounts and the initial total. They also run
//!   [`Db::scan`] (its own snapshot) both ways and check the count and
//!   total, and `get` random accounts in the latest state: each must be at
//!   least as new as the state acknowledged before the `get` began;
//! - value-store GC runs in the write path (a `value_capacity` of a few MiB
//!   against about 1 MB of live values), in the background
//!   (`gc_garbage_ratio` 0.2) and from a thread calling `gc(Some(0.2))`;
//!   another thread calls `flush` and `compact_range(..)`, and a
//!   256 KiB write buffer makes the engine flush and compact on its own.
//!   That thread also checks that the manifest `CURRENT` names exists. A
//!   run of a separating layout in which no GC step ran fails: it did not
//!   test what it is for;
//! - a checkpoint thread takes up to four [`Db::checkpoint`]s, opens each
//!   and requires the bank invariant of it (every account intact, the
//!   initial total: a transfer is in a checkpoint whole or not at all) and
//!   a clean `verify`.
//!
//! At the end the database is verified, closed and reopened, and every
//! account and scratch key must equal its in-memory copy. Then writers, `gc` and
//! `flush`/`compact_range` calls run again and `close` is called under that
//! load after a random number of transfers: `close` and every thread must
//! return (with `Closed` for calls after it, nothing else), and after
//! another reopen every account must equal its copy again.
//!
//! Any error — including `ValueStoreFull`, since live data stays well under
//! the capacity — fails the run, as does a wrong value, a missing account, a
//! changed total, or [`HANG_SECS`] seconds in which no transfer finishes and
//! no thread ends (a hang). Failures name the preset, the seed, the thread
//! and the operation, and print a command that reruns the preset with the
//! same seed (the operations then repeat; the thread interleaving does not).
//! The database lives in a temporary directory on the local file system.
//!
//! Every preset in [`Preset::ALL`] is tried, and `wisckey` also in log mode
//! (`wal: false`, named `wisckey-nowal`). A preset whose `open` is refused as
//! not implemented is skipped with a note, so presets that land later are
//! covered without changes here; `leveldb`, `wisckey` and `hashkv` must run.
//!
//! # Environment
//!
//! - `SEPKV_STRESS_SECS=S`: long mode — run each preset for `S` seconds
//!   instead of the default fixed number of transfers ([`TRANSFERS`] per
//!   writer), printing progress every 30 seconds. For example, ten minutes
//!   per preset with eight writers, in release mode:
//!
//!   ```text
//!   SEPKV_STRESS_SECS=600 SEPKV_STRESS_THREADS=8 \
//!       cargo test --release -p sepkv --test stress -- --nocapture
//!   ```
//! - `SEPKV_STRESS_THREADS=N`: writer threads (default 3).
//! - `SEPKV_STRESS_SEED=S`: the seed (default: from the clock; always
//!   printed).
//! - `SEPKV_STRESS_PRESET=P[,P...]`: only these presets (`leveldb`,
//!   `wisckey`, `wisckey-nowal`, `hashkv`, ...).
//! - `SEPKV_STRESS_HASHKV_JOURNAL=off|on|values`: `hashkv` without its
//!   write journal, with it recording metadata (the engine's default) or
//!   carrying values too (`hashkv_journal_values`); by default chosen by
//!   `seed % 3` (on, values, off for 0, 1, 2), so every mode runs under
//!   load.
//! - `SEPKV_STRESS_HASH_MODE=memory|disk`: FlashKey's hash table in memory
//!   or on disk behind a 64 KiB page cache; by default chosen by
//!   `seed % 2` (memory for even seeds).

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sepkv::{
    Db, Error, HashIndexMode, Options, Preset, ReadOptions, Snapshot, WriteBatch, WriteOptions,
};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// Accounts in the bank.
const ACCOUNTS: usize = 2000;
/// Balance every account starts with.
const INITIAL_BALANCE: i64 = 1000;
/// Transfers per writer in the default (fixed-work) mode.
const TRANSFERS: u64 = 2000;
/// Writer threads unless `SEPKV_STRESS_THREADS` says otherwise.
const DEFAULT_WRITERS: usize = 3;
/// Snapshot reader threads.
const READERS: usize = 2;
/// Seconds in which no transfer finishes and no thread ends (or `close`
/// does not return) taken as a hang.
const HANG_SECS: u64 = 120;
/// Bytes before the filler: balance, account, nonce, filler length.
const HEADER: usize = 8 + 4 + 8 + 4;
/// Filler length range (bytes).
const FILLER: std::ops::RangeInclusive<usize> = 100..=900;
/// Scratch keys per writer: beside its transfers, each writer deletes its
/// own scratch keys, or writes them small (kept inline) or large
/// (separated), so that GC meets versions of a key that left no record in
/// the value store; and churns keys under the same prefix (a fresh key
/// put, read, deleted and read as absent, [`churn_write`]). They sort after the accounts, and the readers' checks
/// of the account space skip them.
const SCRATCH: usize = 32;
/// Key prefix of the scratch keys.
const SCRATCH_PREFIX: &[u8] = b"scratch";

/// Run settings from the environment.
#[derive(Clone)]
struct Settings {
    seed: u64,
    secs: Option<u64>,
    writers: usize,
    only: Option<Vec<String>>,
}

fn env_number(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
    )
}

fn settings() -> Settings {
    let seed = env_number("SEPKV_STRESS_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    let writers = env_number("SEPKV_STRESS_THREADS").map_or(DEFAULT_WRITERS, |n| n as usize);
    assert!(writers >= 1, "SEPKV_STRESS_THREADS must be at least 1");
    let only = std::env::var("SEPKV_STRESS_PRESET")
        .ok()
        .map(|v| v.split(',').map(|s| s.trim().to_string()).collect());
    Settings {
        seed,
        secs: env_number("SEPKV_STRESS_SECS"),
        writers,
        only,
    }
}

/// A preset and WAL mode to run.
#[derive(Clone, Copy)]
struct Variant {
    preset: Preset,
    wal: bool,
}

impl Variant {
    fn name(self) -> String {
        // `flashkey` always runs without the index WAL (its bands are its
        // log), so the suffix marks only wisckey's optional log mode.
        let nowal = !self.wal && self.preset != Preset::FlashKey;
        format!("{}{}", self.preset, if nowal { "-nowal" } else { "" })
    }

    /// Presets the stress test must run: a refused open is a failure.
    fn required(self) -> bool {
        matches!(
            self.preset,
            Preset::LevelDb | Preset::WiscKey | Preset::HashKv
        ) || self.preset.is_available()
    }
}

fn variants() -> Vec<Variant> {
    let mut v = Vec::new();
    for p in Preset::ALL {
        v.push(Variant {
            preset: p,
            wal: p != Preset::FlashKey,
        });
        if p == Preset::WiscKey {
            v.push(Variant {
                preset: p,
                wal: false,
            });
        }
    }
    v
}

fn options(v: Variant) -> Options {
    Options {
        wal: v.wal,
        value_threshold: 64,
        write_buffer_size: 256 << 10,
        target_file_size: 128 << 10,
        max_bytes_for_level_base: 512 << 10,
        block_cache_size: 1 << 20,
        gc_garbage_ratio: 0.2,
        gc_chunk_size: 128 << 10,
        vlog_file_size: 1 << 20,
        // About 1 MB of live values (2000 × ~520 bytes): the value log gets
        // four times that, HashKV eight (its space is split among groups).
        value_capacity: Some(if v.preset == Preset::WiscKey {
            4 << 20
        } else {
            8 << 20
        }),
        hashkv_main_segment_size: 256 << 10,
        hashkv_log_segment_size: 64 << 10,
        hashkv_write_cache_size: 64 << 10,
        hashkv_journal_size: 1 << 20,
        // Small bands and frequent hash-table checkpoints: bands close,
        // checkpoints move and GC collects bands within a run.
        band_entries: 64,
        hash_checkpoint_bands: 4,
        // Small TrieTables: leaves roll and split, and background GC sorts
        // the sealed tables while writers append to their children.
        trie_table_size: 128 << 10,
        trie_roll_size: 64 << 10,
        ..Options::preset(v.preset)
    }
}

fn key(i: usize) -> Vec<u8> {
    format!("account{i:06}").into_bytes()
}

/// The filler of a value: a byte stream from the nonce (splitmix64).
fn fill(nonce: u64, out: &mut Vec<u8>, len: usize) {
    let mut x = nonce;
    while out.len() < HEADER + len {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let take = (HEADER + len - out.len()).min(8);
        out.extend_from_slice(&z.to_le_bytes()[..take]);
    }
}

fn encode(account: usize, st: Account, filler: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER + filler);
    v.extend_from_slice(&st.balance.to_le_bytes());
    v.extend_from_slice(&(account as u32).to_le_bytes());
    v.extend_from_slice(&st.nonce.to_le_bytes());
    v.extend_from_slice(&(filler as u32).to_le_bytes());
    fill(st.nonce, &mut v, filler);
    v
}

/// Decodes and checks a value read for `account`.
fn decode(account: usize, v: &[u8]) -> Result<Account, String> {
    let bad = |why: &str| {
        Err(format!(
            "account {account}: bad value ({why}; {} bytes, starts {:02x?})",
            v.len(),
            &v[..v.len().min(HEADER)]
        ))
    };
    if v.len() < HEADER {
        return bad("shorter than its header");
    }
    let word = |at: usize| u64::from_le_bytes(v[at..at + 8].try_into().unwrap());
    let st = Account {
        balance: word(0) as i64,
        nonce: word(12),
    };
    let owner = u32::from_le_bytes(v[8..12].try_into().unwrap()) as usize;
    let filler = u32::from_le_bytes(v[20..24].try_into().unwrap()) as usize;
    if owner != account {
        return bad(&format!("it belongs to account {owner}"));
    }
    if v.len() != HEADER + filler {
        return bad(&format!("filler length {filler} does not match"));
    }
    let mut want = v[..HEADER].to_vec();
    fill(st.nonce, &mut want, filler);
    if want != v {
        return bad("filler bytes differ from those written");
    }
    Ok(st)
}

/// An account's state: what the value encodes besides its filler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Account {
    balance: i64,
    nonce: u64,
}

#[derive(Default)]
struct Counters {
    transfers: AtomicU64,
    synced: AtomicU64,
    get_checks: AtomicU64,
    forward_checks: AtomicU64,
    backward_checks: AtomicU64,
    scan_checks: AtomicU64,
    latest_gets: AtomicU64,
    manifest_checks: AtomicU64,
    scratch_writes: AtomicU64,
    gc_calls: AtomicU64,
    gc_call_steps: AtomicU64,
    flush_calls: AtomicU64,
    compact_calls: AtomicU64,
    checkpoints: AtomicU64,
}

/// State shared by the threads of one run.
struct Shared {
    db: Db,
    label: String,
    seed: u64,
    /// The latest state of every account, each behind its lock.
    accounts: Vec<Mutex<Account>>,
    /// The last acknowledged state of each writer's scratch keys (`None`:
    /// absent or deleted).
    scratch: Vec<Mutex<Vec<Option<Vec<u8>>>>>,
    next_nonce: AtomicU64,
    /// Set on the first failure: every thread stops.
    stop: AtomicBool,
    /// Set when `close` is called under load: `Closed` errors end threads.
    closing: AtomicBool,
    writers_left: AtomicUsize,
    failures: Mutex<Vec<String>>,
    c: Counters,
}

impl Shared {
    fn fail(&self, thread: &str, op: &str, err: impl std::fmt::Display) {
        let msg = format!("{} seed {}: {thread}: {op}: {err}", self.label, self.seed);
        eprintln!("FAILURE {msg}");
        self.failures.lock().push(msg);
        self.stop.store(true, Ordering::SeqCst);
    }

    /// [`Shared::fail`], except that `Closed` after `close` was called
    /// under load only ends the thread.
    fn fail_err(&self, thread: &str, op: &str, err: Error) {
        if !(matches!(err, Error::Closed) && self.closing.load(Ordering::SeqCst)) {
            self.fail(thread, op, err);
        }
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// True while any writer runs (readers and background threads go on
    /// until then).
    fn writing(&self) -> bool {
        self.writers_left.load(Ordering::SeqCst) > 0 && !self.stopped()
    }
}

fn writer(sh: &Shared, id: usize, mut rng: StdRng, work: Work) {
    let name = format!("writer {id}");
    let mut done = 0u64;
    while !sh.stopped() && work.more(done) {
        let a = rng.gen_range(0..ACCOUNTS);
        let b = (a + rng.gen_range(1..ACCOUNTS)) % ACCOUNTS;
        let (lo, hi) = (a.min(b), a.max(b));
        let mut g_lo = sh.accounts[lo].lock();
        let mut g_hi = sh.accounts[hi].lock();
        // The locks make this thread the only writer of both accounts: the
        // latest state must read back exactly.
        for (i, want) in [(lo, *g_lo), (hi, *g_hi)] {
            match sh.db.get(key(i)) {
                Ok(Some(v)) => match decode(i, &v) {
                    Ok(got) if got == want => {}
                    Ok(got) => {
                        return sh.fail(
                            &name,
                            &format!("get account {i}"),
                            format!("stale or wrong value: read {got:?}, last written {want:?}"),
                        )
                    }
                    Err(e) => return sh.fail(&name, &format!("get account {i}"), e),
                },
                Ok(None) => return sh.fail(&name, &format!("get account {i}"), "missing"),
                Err(e) => return sh.fail_err(&name, &format!("get account {i}"), e),
            }
        }
        let amount = rng.gen_range(1..=100);
        let (from, to) = if rng.gen() { (lo, hi) } else { (hi, lo) };
        let mut new = [(lo, *g_lo), (hi, *g_hi)];
        for (i, st) in new.iter_mut() {
            st.balance += if *i == from { -amount } else { amount };
            st.nonce = sh.next_nonce.fetch_add(1, Ordering::Relaxed);
        }
        let mut batch = WriteBatch::new();
        for (i, st) in new {
            let v = encode(i, st, rng.gen_range(FILLER));
            batch.put(key(i), &v).unwrap();
        }
        let sync = rng.gen_ratio(1, 100);
        if let Err(e) = sh.db.write(&batch, WriteOptions { sync }) {
            return sh.fail_err(
                &name,
                &format!("write transfer {amount} from {from} to {to} (sync {sync})"),
                e,
            );
        }
        *g_lo = new[0].1;
        *g_hi = new[1].1;
        drop((g_lo, g_hi));
        done += 1;
        sh.c.transfers.fetch_add(1, Ordering::Relaxed);
        sh.c.synced.fetch_add(sync as u64, Ordering::Relaxed);
        if rng.gen_ratio(1, 4) && !scratch_write(sh, id, &mut rng, &name) {
            return;
        }
    }
}

fn scratch_key(writer: usize, j: usize) -> Vec<u8> {
    format!("scratch{writer:02}-{j:03}").into_bytes()
}

/// One write of a scratch key of writer `id`, after checking that the key
/// reads back as last written: a delete, a small value (below
/// `value_threshold`, kept inline) or a large one (separated). False after
/// a failure.
fn scratch_write(sh: &Shared, id: usize, rng: &mut StdRng, name: &str) -> bool {
    if rng.gen_ratio(1, 4) {
        return churn_write(sh, id, rng, name);
    }
    let j = rng.gen_range(0..SCRATCH);
    let k = scratch_key(id, j);
    let mut states = sh.scratch[id].lock();
    match sh.db.get(&k) {
        Ok(got) if got == states[j] => {}
        Ok(got) => {
            sh.fail(
                name,
                &format!("get scratch key {j}"),
                format!(
                    "read {:?} bytes, last written {:?} bytes",
                    got.map(|v| v.len()),
                    states[j].as_ref().map(|v| v.len())
                ),
            );
            return false;
        }
        Err(e) => {
            sh.fail_err(name, &format!("get scratch key {j}"), e);
            return false;
        }
    }
    let nonce = sh.next_nonce.fetch_add(1, Ordering::Relaxed);
    let new = match rng.gen_range(0..3) {
        0 => None,
        1 => Some(format!("small {nonce}").into_bytes()),
        _ => {
            let mut v = Vec::new();
            fill(nonce, &mut v, rng.gen_range(FILLER));
            Some(v)
        }
    };
    let mut batch = WriteBatch::new();
    match &new {
        Some(v) => batch.put(&k, v).unwrap(),
        None => batch.delete(&k).unwrap(),
    }
    if let Err(e) = sh.db.write(&batch, WriteOptions::default()) {
        sh.fail_err(name, &format!("write scratch key {j}"), e);
        return false;
    }
    states[j] = new;
    sh.c.scratch_writes.fetch_add(1, Ordering::Relaxed);
    true
}

/// Churn (a TTL-style workload): a key never written before, put, read
/// back, deleted and read back as absent, so that GC meets delete tokens
/// whose keys are never written again (FlashKey drops their hash-table
/// nodes with them, §V-B5). The keys carry the scratch prefix, so the
/// readers' checks skip them. False after a failure.
fn churn_write(sh: &Shared, id: usize, rng: &mut StdRng, name: &str) -> bool {
    let nonce = sh.next_nonce.fetch_add(1, Ordering::Relaxed);
    let k = format!("scratch{id:02}-churn-{nonce}").into_bytes();
    let mut v = Vec::new();
    fill(nonce, &mut v, rng.gen_range(FILLER));
    if let Err(e) = sh.db.put(&k, &v) {
        sh.fail_err(name, "put churn key", e);
        return false;
    }
    match sh.db.get(&k) {
        Ok(Some(got)) if got == v => {}
        Ok(got) => {
            sh.fail(
                name,
                "get churn key",
                format!("read {:?} bytes, wrote {}", got.map(|g| g.len()), v.len()),
            );
            return false;
        }
        Err(e) => {
            sh.fail_err(name, "get churn key", e);
            return false;
        }
    }
    if let Err(e) = sh.db.delete(&k) {
        sh.fail_err(name, "delete churn key", e);
        return false;
    }
    match sh.db.get(&k) {
        Ok(None) => {}
        Ok(Some(g)) => {
            sh.fail(
                name,
                "get deleted churn key",
                format!("read {} bytes", g.len()),
            );
            return false;
        }
        Err(e) => {
            sh.fail_err(name, "get deleted churn key", e);
            return false;
        }
    }
    sh.c.scratch_writes.fetch_add(1, Ordering::Relaxed);
    true
}

/// How long writers go on.
#[derive(Clone, Copy)]
enum Work {
    Transfers(u64),
    Until(Instant),
}

impl Work {
    fn more(self, done: u64) -> bool {
        match self {
            Work::Transfers(n) => done < n,
            Work::Until(t) => Instant::now() < t,
        }
    }
}

/// Checks that `entries` are exactly the accounts in order and returns
/// their states.
fn check_entries(
    entries: impl IntoIterator<Item = (Vec<u8>, Vec<u8>)>,
) -> Result<Vec<Account>, String> {
    let mut out = Vec::with_capacity(ACCOUNTS);
    for (k, v) in entries
        .into_iter()
        .filter(|(k, _)| !k.starts_with(SCRATCH_PREFIX))
    {
        let i = out.len();
        if i >= ACCOUNTS {
            return Err(format!(
                "more than {ACCOUNTS} keys: extra key {:?}",
                String::from_utf8_lossy(&k)
            ));
        }
        if k != key(i) {
            return Err(format!(
                "key {i} is {:?}, expected {:?} ({i} keys before it)",
                String::from_utf8_lossy(&k),
                String::from_utf8_lossy(&key(i))
            ));
        }
        out.push(decode(i, &v)?);
    }
    if out.len() != ACCOUNTS {
        return Err(format!("saw {} of {ACCOUNTS} accounts", out.len()));
    }
    Ok(out)
}

fn check_total(accounts: &[Account]) -> Result<(), String> {
    let total: i64 = accounts.iter().map(|a| a.balance).sum();
    let want = INITIAL_BALANCE * ACCOUNTS as i64;
    if total != want {
        return Err(format!("total {total}, expected {want}"));
    }
    Ok(())
}

fn read_by_gets(db: &Db, snap: &Snapshot) -> Result<Vec<Account>, String> {
    let ro = ReadOptions {
        snapshot: Some(snap),
        ..Default::default()
    };
    let mut entries = Vec::with_capacity(ACCOUNTS);
    for i in 0..ACCOUNTS {
        match db.get_opt(&ro, key(i)) {
            Ok(Some(v)) => entries.push((key(i), v)),
            Ok(None) => return Err(format!("account {i} missing")),
            Err(e) => return Err(format!("account {i}: {e}")),
        }
    }
    check_entries(entries)
}

/// Reads every account through cursors at `snap`, forward or backward,
/// over the whole key space or over two ranges split at account `split`.
fn read_by_cursor(
    db: &Db,
    snap: &Snapshot,
    forward: bool,
    split: Option<usize>,
) -> Result<Vec<Account>, String> {
    let ro = ReadOptions {
        snapshot: Some(snap),
        ..Default::default()
    };
    let mid = split.map(key);
    type Bound<'a> = Option<&'a [u8]>;
    let ranges: Vec<(Bound<'_>, Bound<'_>)> = match &mid {
        None => vec![(None, None)],
        Some(m) => vec![(None, Some(m.as_slice())), (Some(m.as_slice()), None)],
    };
    let mut entries = Vec::with_capacity(ACCOUNTS);
    for (lower, upper) in ranges {
        let mut it = db
            .iter_range(
                &ro,
                (
                    lower.map_or(std::ops::Bound::Unbounded, std::ops::Bound::Included),
                    upper.map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded),
                ),
            )
            .map_err(|e| format!("iter_range: {e}"))?;
        let mut part = Vec::new();
        if forward {
            it.seek_to_first();
        } else {
            it.seek_to_last();
        }
        while it.valid() {
            part.push((it.key().to_vec(), it.value().to_vec()));
            if forward {
                it.next();
            } else {
                it.prev();
            }
        }
        it.status()
            .map_err(|e| format!("after {} keys of a range: {e}", part.len()))?;
        if !forward {
            part.reverse();
        }
        entries.extend(part);
    }
    check_entries(entries)
}

fn read_by_scan(db: &Db, reverse: bool) -> Result<Vec<Account>, String> {
    let mut entries = Vec::with_capacity(ACCOUNTS);
    for item in db.scan(.., reverse).map_err(|e| e.to_string())? {
        entries.push(item.map_err(|e| format!("after {} keys: {e}", entries.len()))?);
    }
    if reverse {
        entries.reverse();
    }
    check_entries(entries)
}

/// Reads `n` random accounts in the latest state (no snapshot): each must
/// be at least as new as the state acknowledged before the read began
/// (nonces of one account only grow).
fn read_latest(sh: &Shared, rng: &mut StdRng, n: usize) -> Result<(), String> {
    for _ in 0..n {
        let i = rng.gen_range(0..ACCOUNTS);
        let before = *sh.accounts[i].lock();
        match sh.db.get(key(i)) {
            Ok(Some(v)) => {
                let got = decode(i, &v)?;
                if got.nonce < before.nonce {
                    return Err(format!(
                        "account {i}: stale read {got:?}, but {before:?} was acknowledged before the get began"
                    ));
                }
            }
            Ok(None) => return Err(format!("account {i} missing")),
            Err(e) => return Err(format!("account {i}: {e}")),
        }
        sh.c.latest_gets.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

/// `Some(reason)` when `CURRENT` names a manifest that does not exist. A
/// manifest is written before `CURRENT` switches to it and numbers only
/// grow, so if `CURRENT` reads the same before and after the manifest was
/// found missing, it named a missing file in between.
fn live_manifest_missing(dir: &Path) -> Option<String> {
    let current = || {
        std::fs::read_to_string(dir.join("CURRENT"))
            .ok()
            .map(|s| s.trim_end().to_string())
    };
    let before = current()?;
    if dir.join(&before).exists() {
        return None;
    }
    let after = current()?;
    (before == after).then(|| format!("CURRENT names {before:?}, which does not exist"))
}

/// The first account two views disagree on.
fn same_view(a: &[Account], b: &[Account]) -> Result<(), String> {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        None => Ok(()),
        Some(i) => Err(format!("account {i}: {:?} against {:?}", a[i], b[i])),
    }
}

fn reader(sh: &Shared, id: usize, mut rng: StdRng) {
    let name = format!("reader {id}");
    let mut round = 0u64;
    // At least one round, even when the writers are already done.
    loop {
        let snap = match sh.db.snapshot() {
            Ok(s) => s,
            Err(e) => return sh.fail(&name, "snapshot", e),
        };
        let seq = snap.sequence();
        let split = rng.gen_bool(0.5).then(|| rng.gen_range(0..=ACCOUNTS));
        let how = match split {
            None => "whole key space".to_string(),
            Some(s) => format!("split at account {s}"),
        };
        let gets = match read_by_gets(&sh.db, &snap).and_then(|v| check_total(&v).map(|_| v)) {
            Ok(v) => v,
            Err(e) => return sh.fail(&name, &format!("get_opt at snapshot {seq}"), e),
        };
        sh.c.get_checks.fetch_add(1, Ordering::Relaxed);
        for forward in [true, false] {
            let op = format!(
                "{} cursor at snapshot {seq}, {how}",
                if forward { "forward" } else { "backward" }
            );
            match read_by_cursor(&sh.db, &snap, forward, split)
                .and_then(|v| check_total(&v).map(|_| v))
                .and_then(|v| {
                    same_view(&gets, &v).map_err(|e| format!("differs from get_opt: {e}"))
                }) {
                Ok(()) => {}
                Err(e) => return sh.fail(&name, &op, e),
            }
            if forward {
                sh.c.forward_checks.fetch_add(1, Ordering::Relaxed);
            } else {
                sh.c.backward_checks.fetch_add(1, Ordering::Relaxed);
            }
        }
        drop(snap);
        if let Err(e) = read_latest(sh, &mut rng, 200) {
            return sh.fail(&name, "get (latest state)", e);
        }
        let reverse = round % 2 == 1;
        if let Err(e) = read_by_scan(&sh.db, reverse).and_then(|v| check_total(&v)) {
            return sh.fail(&name, &format!("scan (reverse {reverse})"), e);
        }
        sh.c.scan_checks.fetch_add(1, Ordering::Relaxed);
        round += 1;
        if !sh.writing() {
            return;
        }
    }
}

/// Calls `gc(Some(0.2))` while the writers run.
fn gc_caller(sh: &Shared) {
    while sh.writing() {
        match sh.db.gc(Some(0.2)) {
            Ok(r) => {
                sh.c.gc_calls.fetch_add(1, Ordering::Relaxed);
                sh.c.gc_call_steps.fetch_add(r.steps, Ordering::Relaxed);
            }
            Err(e) => return sh.fail_err("gc thread", "gc(Some(0.2))", e),
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Calls `flush`, and every fourth time `compact_range(..)`, while
/// the writers run; checks each time that the live manifest exists.
fn maintainer(sh: &Shared) {
    let mut i = 0u64;
    while sh.writing() {
        thread::sleep(Duration::from_millis(25));
        if let Err(e) = sh.db.flush() {
            return sh.fail_err("maintenance thread", "flush", e);
        }
        sh.c.flush_calls.fetch_add(1, Ordering::Relaxed);
        if let Some(e) = live_manifest_missing(sh.db.path()) {
            return sh.fail("maintenance thread", "manifest check", e);
        }
        sh.c.manifest_checks.fetch_add(1, Ordering::Relaxed);
        if i % 4 == 3 {
            if let Err(e) = sh.db.compact_range(..) {
                return sh.fail_err("maintenance thread", "compact_range(..)", e);
            }
            sh.c.compact_calls.fetch_add(1, Ordering::Relaxed);
        }
        i += 1;
    }
}

/// Most checkpoints one run takes (each is opened and read whole).
const CHECKPOINTS: u64 = 4;

/// Takes checkpoints while the writers run ([`CHECKPOINTS`] at most), opens
/// each (its own recovery) and requires the bank invariant of it: exactly
/// [`ACCOUNTS`] accounts, each value intact, the initial total, `verify`
/// clean. A checkpoint is consistent at one sequence number, so a transfer
/// is in it whole or not at all.
fn checkpointer(sh: &Shared) {
    let Some(parent) = sh.db.path().parent().map(|p| p.to_path_buf()) else {
        return;
    };
    let mut n = 0u64;
    while sh.writing() && n < CHECKPOINTS {
        thread::sleep(Duration::from_millis(40));
        let dir = parent.join(format!("checkpoint-{n}"));
        if let Err(e) = sh.db.checkpoint(&dir) {
            return sh.fail_err("checkpoint thread", "checkpoint", e);
        }
        let check = || -> Result<(), String> {
            let c = Db::open(&dir, Options::default()).map_err(|e| format!("open: {e}"))?;
            let accounts = read_by_scan(&c, false)?;
            check_total(&accounts)?;
            let rep = c.verify().map_err(|e| e.to_string())?;
            if let Some(f) = rep.faults.first() {
                return Err(format!("verify: {f}"));
            }
            c.close().map_err(|e| format!("close: {e}"))
        };
        if let Err(e) = check() {
            return sh.fail("checkpoint thread", &format!("checkpoint {n}"), e);
        }
        let _ = std::fs::remove_dir_all(&dir);
        sh.c.checkpoints.fetch_add(1, Ordering::Relaxed);
        n += 1;
    }
}

/// Writes the initial accounts.
fn load(db: &Db, accounts: &[Mutex<Account>], rng: &mut StdRng) -> Result<(), Error> {
    for chunk in (0..ACCOUNTS).collect::<Vec<_>>().chunks(100) {
        let mut b = WriteBatch::new();
        for &i in chunk {
            b.put(
                key(i),
                encode(i, *accounts[i].lock(), rng.gen_range(FILLER)),
            )?;
        }
        db.write(&b, WriteOptions::default())?;
    }
    Ok(())
}

/// Starts a thread of the run; a panic in it is a failure of the run, and
/// a writer that ends (however it ends) counts down `writers_left`.
fn spawn(
    sh: &Arc<Shared>,
    name: String,
    f: impl FnOnce(&Shared) + Send + 'static,
) -> thread::JoinHandle<()> {
    let sh = sh.clone();
    thread::spawn(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&sh)));
        if let Err(p) = r {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            sh.fail(&name, "panicked", msg);
        }
        if name.starts_with("writer") {
            sh.writers_left.fetch_sub(1, Ordering::SeqCst);
        }
    })
}

/// Runs `f` in a thread and waits up to [`HANG_SECS`] for it.
fn with_deadline<T: Send + 'static>(
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(HANG_SECS))
        .map_err(|_| format!("{what} did not return within {HANG_SECS} s (hang?)"))
}

/// Outcome of one preset's run.
enum Outcome {
    Skipped(String),
    Ran(Vec<String>),
}

/// Each writer's scratch keys, as last written.
type ScratchModel = Vec<Vec<Option<Vec<u8>>>>;

fn new_shared(
    db: Db,
    label: &str,
    s: &Settings,
    (accounts, scratch): (Vec<Account>, ScratchModel),
    nonce: u64,
) -> Arc<Shared> {
    Arc::new(Shared {
        db,
        label: label.to_string(),
        seed: s.seed,
        accounts: accounts.into_iter().map(Mutex::new).collect(),
        scratch: scratch.into_iter().map(Mutex::new).collect(),
        next_nonce: AtomicU64::new(nonce),
        stop: AtomicBool::new(false),
        closing: AtomicBool::new(false),
        writers_left: AtomicUsize::new(s.writers),
        failures: Mutex::new(Vec::new()),
        c: Counters::default(),
    })
}

/// Waits until `done()` or every thread has ended. Returns false after
/// recording a failure when for [`HANG_SECS`] no transfer finished and no
/// thread ended: threads are stuck and cannot be joined. In long mode
/// prints progress every 30 seconds.
fn watch(
    sh: &Shared,
    handles: &[thread::JoinHandle<()>],
    mut done: impl FnMut() -> bool,
    long: bool,
) -> bool {
    let start = Instant::now();
    let progress = || {
        (
            sh.c.transfers.load(Ordering::Relaxed),
            handles.iter().filter(|h| h.is_finished()).count(),
        )
    };
    let mut last = (progress(), Instant::now());
    let mut report_at = start + Duration::from_secs(30);
    while !done() && !handles.iter().all(|h| h.is_finished()) {
        thread::sleep(Duration::from_millis(20));
        let now = progress();
        if now != last.0 {
            last = (now, Instant::now());
        } else if last.1.elapsed() > Duration::from_secs(HANG_SECS) {
            sh.fail(
                "main",
                "watch",
                format!(
                    "in {HANG_SECS} s no transfer finished and no thread ended \
                     ({} transfers, {} writer(s) and {} thread(s) in all still running{}): hang?",
                    now.0,
                    sh.writers_left.load(Ordering::SeqCst),
                    handles.len() - now.1,
                    if sh.closing.load(Ordering::SeqCst) {
                        ", close called"
                    } else {
                        ""
                    }
                ),
            );
            return false;
        }
        if long && Instant::now() >= report_at {
            report_at += Duration::from_secs(30);
            eprintln!(
                "stress {}: {:.0} s, {} transfers, {} snapshot checks",
                sh.label,
                start.elapsed().as_secs_f64(),
                now.0,
                sh.c.get_checks.load(Ordering::Relaxed)
            );
        }
    }
    true
}

fn join(handles: Vec<thread::JoinHandle<()>>) {
    for h in handles {
        h.join().expect("panics are caught in the thread");
    }
}

fn run_variant(v: Variant, index: usize, s: &Settings, dir: &Path) -> Outcome {
    let label = v.name();
    let seed = s.seed ^ (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let journal_mode = match std::env::var("SEPKV_STRESS_HASHKV_JOURNAL").as_deref() {
        Ok("on") => 0,
        Ok("values") => 1,
        Ok("off") => 2,
        _ => s.seed % 3,
    };
    // FlashKey's hash table in memory, or on disk behind a cache of eight
    // pages, so that lookups read pages while writers change them.
    let hash_on_disk = match std::env::var("SEPKV_STRESS_HASH_MODE").as_deref() {
        Ok("disk") => true,
        Ok("memory") => false,
        _ => s.seed % 2 == 1,
    };
    let opts = Options {
        hashkv_journal: journal_mode != 2,
        hashkv_journal_values: journal_mode == 1,
        hash_index_mode: if hash_on_disk {
            HashIndexMode::Disk
        } else {
            HashIndexMode::Memory
        },
        hash_cache_size: 64 << 10,
        ..options(v)
    };
    let path = dir.join("db");
    let db = match Db::open(&path, opts.clone()) {
        Ok(db) => db,
        Err(Error::InvalidArgument(m)) if !v.required() && m.contains("not implemented") => {
            return Outcome::Skipped(m)
        }
        Err(e) => return Outcome::Ran(vec![format!("{label} seed {}: open: {e}", s.seed)]),
    };
    let initial = (0..ACCOUNTS)
        .map(|i| Account {
            balance: INITIAL_BALANCE,
            nonce: i as u64,
        })
        .collect();
    let scratch = vec![vec![None; SCRATCH]; s.writers];
    let sh = new_shared(db, &label, s, (initial, scratch), ACCOUNTS as u64);
    let mut rng = StdRng::seed_from_u64(seed);
    if let Err(e) = load(&sh.db, &sh.accounts, &mut rng) {
        sh.fail("main", "initial load", e);
        return Outcome::Ran(sh.failures.lock().clone());
    }
    let start = Instant::now();
    let work = match s.secs {
        Some(secs) => Work::Until(start + Duration::from_secs(secs)),
        None => Work::Transfers(TRANSFERS),
    };
    let mut handles = Vec::new();
    for id in 0..s.writers {
        let r = StdRng::seed_from_u64(rng.gen());
        handles.push(spawn(&sh, format!("writer {id}"), move |sh| {
            writer(sh, id, r, work)
        }));
    }
    for id in 0..READERS {
        let r = StdRng::seed_from_u64(rng.gen());
        handles.push(spawn(&sh, format!("reader {id}"), move |sh| {
            reader(sh, id, r)
        }));
    }
    handles.push(spawn(&sh, "gc thread".into(), gc_caller));
    handles.push(spawn(&sh, "maintenance thread".into(), maintainer));
    handles.push(spawn(&sh, "checkpoint thread".into(), checkpointer));
    if !watch(&sh, &handles, || false, s.secs.is_some()) {
        // Threads stuck in the engine cannot be joined: leave them.
        std::mem::forget(handles);
        return Outcome::Ran(sh.failures.lock().clone());
    }
    join(handles);
    report(&sh, s, start.elapsed());
    if sh.stopped() {
        // Close anyway, to see whether it returns.
        let c = sh.clone();
        if let Err(e) = with_deadline("close", move || c.db.close()) {
            sh.fail("main", "close after failure", e);
        }
        return Outcome::Ran(sh.failures.lock().clone());
    }
    let mut failures = Vec::new();
    match final_checks(&sh, &path, opts.clone()) {
        Err(e) => sh.fail("main", "final checks", e),
        Ok(db) => {
            let model = sh.accounts.iter().map(|a| *a.lock()).collect();
            let nonce = sh.next_nonce.load(Ordering::SeqCst);
            let sh2 = new_shared(db, &label, s, (model, scratch_model(&sh)), nonce);
            close_under_load(&sh2, s, &mut rng, &path, opts);
            failures.extend(sh2.failures.lock().iter().cloned());
        }
    }
    let mut all = sh.failures.lock().clone();
    all.extend(failures);
    Outcome::Ran(all)
}

/// The last phase: writers, `gc` and `flush`/`compact_range` calls run
/// while `close` is called. `close` and every thread must return (calls
/// after the close may fail with `Closed`, nothing else), and after a
/// reopen every account must equal its copy: an acknowledged transfer is
/// kept, a refused one is not applied.
fn close_under_load(sh: &Arc<Shared>, s: &Settings, rng: &mut StdRng, path: &Path, opts: Options) {
    let mut handles = Vec::new();
    for id in 0..s.writers {
        let r = StdRng::seed_from_u64(rng.gen());
        handles.push(spawn(sh, format!("writer {id}"), move |sh| {
            writer(sh, id, r, Work::Transfers(u64::MAX))
        }));
    }
    handles.push(spawn(sh, "gc thread".into(), gc_caller));
    handles.push(spawn(sh, "maintenance thread".into(), maintainer));
    let target = rng.gen_range(50..=1000);
    let stuck = |handles| {
        std::mem::forget(handles);
    };
    if !watch(
        sh,
        &handles,
        || sh.c.transfers.load(Ordering::Relaxed) >= target || sh.stopped(),
        false,
    ) {
        return stuck(handles);
    }
    let at = sh.c.transfers.load(Ordering::Relaxed);
    sh.closing.store(true, Ordering::SeqCst);
    let c = sh.clone();
    match with_deadline("close under load", move || c.db.close()) {
        Err(e) => {
            sh.fail("main", &format!("close after {at} transfers"), e);
            return stuck(handles);
        }
        Ok(Err(e)) => sh.fail("main", &format!("close after {at} transfers"), e),
        Ok(Ok(())) => {}
    }
    if !watch(sh, &handles, || false, false) {
        return stuck(handles);
    }
    join(handles);
    eprintln!(
        "stress {}: closed under load after {at} transfers ({} in all)",
        sh.label,
        sh.c.transfers.load(Ordering::Relaxed)
    );
    if sh.stopped() {
        return;
    }
    let want: Vec<Account> = sh.accounts.iter().map(|a| *a.lock()).collect();
    let scratch = scratch_model(sh);
    let res = Db::open(path, opts)
        .map_err(|e| format!("reopen: {e}"))
        .and_then(|db| {
            check_db(&db, &want, &scratch, "after a close under load")?;
            db.close().map_err(|e| format!("close: {e}"))
        });
    if let Err(e) = res {
        sh.fail("main", "checks after a close under load", e);
    }
}

fn report(sh: &Shared, s: &Settings, elapsed: Duration) {
    let c = &sh.c;
    let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let stats = match sh.db.stats() {
        Ok(st) => st,
        Err(e) => return sh.fail("main", "stats", e),
    };
    let gc_steps = stats
        .value_store_figures
        .get("gc_runs")
        .copied()
        .unwrap_or(0);
    eprintln!(
        "stress {}: seed {}, {} writers, {:.1} s: {} transfers ({} synced); snapshot checks: \
         {} by get_opt, {} forward, {} backward, {} scans; {} latest-state gets; \
         {} manifest checks; {} scratch writes; gc: {gc_steps} steps in all, {} in the \
         write path, {} by {} gc() calls; {} flushes ({} flush() calls), {} compactions \
         ({} compact_range calls, {} trivial moves, {} seek merges); {} checkpoints checked",
        sh.label,
        sh.seed,
        s.writers,
        elapsed.as_secs_f64(),
        l(&c.transfers),
        l(&c.synced),
        l(&c.get_checks),
        l(&c.forward_checks),
        l(&c.backward_checks),
        l(&c.scan_checks),
        l(&c.latest_gets),
        l(&c.manifest_checks),
        l(&c.scratch_writes),
        stats.write_gc_steps,
        l(&c.gc_call_steps),
        l(&c.gc_calls),
        stats.flushes,
        l(&c.flush_calls),
        stats.compactions,
        l(&c.compact_calls),
        stats.trivial_moves,
        stats.index_figures.get("seek_merges").copied().unwrap_or(0),
        l(&c.checkpoints),
    );
    if let Some(e) = stats.background_error {
        sh.fail("background", "background work", e);
    }
    // The load must exercise value-store GC wherever values are separated.
    if stats.value_layout != "inline" && gc_steps == 0 && !sh.stopped() {
        sh.fail(
            "main",
            "report",
            "no value-store GC step ran: the load did not exercise GC",
        );
    }
}

fn scratch_model(sh: &Shared) -> ScratchModel {
    sh.scratch.iter().map(|w| w.lock().clone()).collect()
}

/// Verifies `db` and checks that every account equals `want` and every
/// scratch key `scratch`.
fn check_db(db: &Db, want: &[Account], scratch: &ScratchModel, when: &str) -> Result<(), String> {
    for (w, keys) in scratch.iter().enumerate() {
        for (j, v) in keys.iter().enumerate() {
            let got = db
                .get(scratch_key(w, j))
                .map_err(|e| format!("scratch key {w}/{j} {when}: {e}"))?;
            if got != *v {
                return Err(format!(
                    "scratch key {w}/{j} {when}: read {:?} bytes, last written {:?} bytes",
                    got.map(|v| v.len()),
                    v.as_ref().map(|v| v.len())
                ));
            }
        }
    }
    let rep = db.verify().map_err(|e| format!("verify {when}: {e}"))?;
    if !rep.faults.is_empty() {
        return Err(format!("verify {when}: {:?}", rep.faults));
    }
    let snap = db.snapshot().map_err(|e| e.to_string())?;
    let got = read_by_gets(db, &snap).map_err(|e| format!("get_opt {when}: {e}"))?;
    same_view(want, &got).map_err(|e| format!("{when}, last written against read: {e}"))?;
    let got = read_by_cursor(db, &snap, true, None).map_err(|e| format!("cursor {when}: {e}"))?;
    same_view(want, &got).map_err(|e| format!("{when}, last written against cursor: {e}"))
}

/// Verify, close, reopen, check again; returns the reopened database.
fn final_checks(sh: &Arc<Shared>, path: &Path, opts: Options) -> Result<Db, String> {
    let want: Vec<Account> = sh.accounts.iter().map(|a| *a.lock()).collect();
    let scratch = scratch_model(sh);
    check_total(&want).map_err(|e| format!("in-memory accounts: {e}"))?;
    check_db(&sh.db, &want, &scratch, "before close")?;
    let c = sh.clone();
    with_deadline("close", move || c.db.close())?.map_err(|e| format!("close: {e}"))?;
    let db = Db::open(path, opts).map_err(|e| format!("reopen: {e}"))?;
    check_db(&db, &want, &scratch, "after reopen")?;
    Ok(db)
}

#[test]
fn bank_invariant_holds_under_concurrent_load() {
    let s = settings();
    eprintln!(
        "stress: seed {} ({}), {} writers, {}",
        s.seed,
        if std::env::var("SEPKV_STRESS_SEED").is_ok() {
            "SEPKV_STRESS_SEED"
        } else {
            "set SEPKV_STRESS_SEED to repeat"
        },
        s.writers,
        match s.secs {
            Some(t) => format!("{t} s per preset"),
            None => format!("{TRANSFERS} transfers per writer"),
        }
    );
    let mut failures = Vec::new();
    let mut ran = Vec::new();
    for (index, v) in variants().into_iter().enumerate() {
        let label = v.name();
        if s.only.as_ref().is_some_and(|o| !o.contains(&label)) {
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        match run_variant(v, index, &s, dir.path()) {
            Outcome::Skipped(why) => eprintln!("stress {label}: skipped: {why}"),
            Outcome::Ran(f) => {
                ran.push(label.clone());
                if !f.is_empty() {
                    let mut repro = format!(
                        "SEPKV_STRESS_SEED={} SEPKV_STRESS_PRESET={label} SEPKV_STRESS_THREADS={}",
                        s.seed, s.writers
                    );
                    if let Some(t) = s.secs {
                        repro += &format!(" SEPKV_STRESS_SECS={t}");
                    }
                    eprintln!(
                        "stress {label} failed; database kept in {}; reproduce with:\n  {repro} cargo test -p sepkv --test stress -- --nocapture",
                        dir.path().display()
                    );
                    failures.push((label, f, repro));
                    // Threads may still hold the directory.
                    std::mem::forget(dir);
                }
            }
        }
    }
    if let Some(o) = &s.only {
        for name in o {
            assert!(
                variants().iter().any(|v| &v.name() == name),
                "SEPKV_STRESS_PRESET names no preset: {name:?}"
            );
        }
    }
    assert!(!ran.is_empty(), "no preset ran");
    let mut msg = String::new();
    for (label, f, repro) in &failures {
        msg += &format!("\n{label} ({repro}):");
        for e in f {
            msg += &format!("\n  {e}");
        }
    }
    assert!(failures.is_empty(), "stress failures:{msg}");
}
