//! Crash test on the fault-injecting file system.
//!
//! Each seed runs several crash cycles on one simulated disk: open (recover),
//! check the recovered state, run random writes (puts, deletes, batches, with
//! random `sync`) while flushes and compactions run in the background, then
//! cut the power at a random moment (`FaultFs::crash` drops every unsynced
//! byte and directory entry) — or, in one cycle in four, kill the process
//! (`FaultFs::kill`: the OS keeps everything it was handed) — and start
//! again. After every recovery:
//! - no acknowledged synced write is lost, and after a kill no acknowledged
//!   write at all (including through the power cuts that follow);
//! - the state equals the model at exactly one write boundary at or after
//!   the last sync (a prefix of history: no holes, batches all or nothing);
//! - no corruption is reported by open, reads, scans or `verify`.
//!
//! `SEPKV_CRASH_SEEDS=N` sets the number of seeds (default 100, 10 crashes
//! each = 1000 crash/reopen iterations); `SEPKV_CRASH_SEED=S` runs one seed;
//! `SEPKV_CRASH_PRESET=P` one preset (`wisckey-nowal` for log mode);
//! `hashkv` switches its write journal mode at every reopen, in turn off,
//! metadata only (`hashkv_journal`) and carrying values
//! (`hashkv_journal_values`), starting from `seed % 3`, so every mode and
//! the switches between them are crashed;
//! `SEPKV_CRASH_HASHKV_JOURNAL=off|on|values` holds it at one setting.
//! `ktstore` runs odd seeds with a trie of two fixed levels
//! (`trie_fixed_levels`) and even seeds with adaptive splitting.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sepkv::fs::{FaultFs, FaultKind, FaultOp, FaultRule};
use sepkv::{Db, Options, Preset, WriteBatch, WriteOptions};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

mod common;
use common::{power_cut, process_kill};

/// Every preset, as `(preset, wal)`: wisckey also runs without the index
/// WAL (WiscKey §3.4.2); flashkey has none.
const PRESETS: [(Preset, bool); 7] = [
    (Preset::LevelDb, true),
    (Preset::WiscKey, true),
    (Preset::WiscKey, false),
    (Preset::HashKv, true),
    (Preset::KtStore, true),
    (Preset::FlashKey, false),
    (Preset::Lwc, true),
];

/// `preset`'s name in reports (`wisckey-nowal` without the index WAL).
fn label((preset, wal): (Preset, bool)) -> String {
    let nowal = !wal && preset != Preset::FlashKey;
    format!("{preset}{}", if nowal { "-nowal" } else { "" })
}

/// Opens per seed; every open after the first follows a crash.
const CYCLES: usize = 11;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

struct Write {
    seq_start: u64,
    seq_end: u64,
    changes: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

fn opts(fs: &FaultFs, (preset, wal): (Preset, bool)) -> Options {
    Options {
        wal,
        value_threshold: 64,
        vlog_file_size: 1 << 20,
        gc_chunk_size: 16 << 10,
        gc_garbage_ratio: 0.3,
        fs: Arc::new(fs.clone()),
        write_buffer_size: 64 << 10,
        target_file_size: 64 << 10,
        max_bytes_for_level_base: 256 << 10,
        block_size: 1024,
        l0_compaction_trigger: 2,
        // A tight value-log (or TrieTable) capacity makes writes run GC
        // themselves, racing the background GC thread and memtable flushes.
        value_capacity: (preset == Preset::WiscKey || preset == Preset::KtStore)
            .then_some(512 << 10),
        // Small TrieTables: leaves roll and split, and tables are sealed
        // and collected within a seed.
        trie_table_size: 128 << 10,
        trie_roll_size: 64 << 10,
        // Few open files: TrieTables' append handles are closed past the
        // cap and reopened on their next append.
        max_open_files: if preset == Preset::KtStore { 16 } else { 500 },
        // Small bands and frequent hash-table checkpoints, so that a crash
        // lands before, during and after them.
        band_entries: 32,
        hash_checkpoint_bands: 2,
        ..Options::preset(preset)
    }
}

fn apply(model: &mut Model, w: &Write) {
    for (k, v) in &w.changes {
        match v {
            Some(v) => model.insert(k.clone(), v.clone()),
            None => model.remove(k),
        };
    }
}

fn run_seed(preset: (Preset, bool), seed: u64) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let fs = FaultFs::new();
    let dir = Path::new("/crashdb");
    let mut base: Model = BTreeMap::new();
    let mut pending: Vec<Write> = Vec::new();
    let mut last_synced = 0u64;
    // The last write acknowledged before the end of a cycle.
    let mut last_acked = 0u64;
    // The last cycle ended in a killed process.
    let mut after_kill = false;
    for cycle in 0..CYCLES {
        let journal_mode = match std::env::var("SEPKV_CRASH_HASHKV_JOURNAL").as_deref() {
            Ok("off") => 0,
            Ok("on") => 1,
            Ok("values") => 2,
            _ => (seed + cycle as u64) % 3,
        };
        let o = Options {
            hashkv_journal: journal_mode >= 1,
            hashkv_journal_values: journal_mode == 2,
            // Synced writes carry their values in the WAL in two of three
            // cycles, so both sync paths and the switch are crashed.
            sync_values_in_wal: match std::env::var("SEPKV_CRASH_CARRY").as_deref() {
                Ok("on") => true,
                Ok("off") => false,
                _ => !(seed + 2 * cycle as u64).is_multiple_of(3),
            },
            ..opts(&fs, preset)
        };
        let o = if preset.0 == Preset::KtStore && seed % 2 == 1 {
            Options {
                trie_fixed_levels: Some(2),
                trie_split_skew: 1.0,
                ..o
            }
        } else {
            o
        };
        let db = Db::open(dir, o).map_err(|e| format!("cycle {cycle}: open failed: {e}"))?;
        // Check the recovered state.
        let recovered = db.recovered_sequence();
        if recovered < last_synced {
            return Err(format!(
                "cycle {cycle}: recovered sequence {recovered} is before the last synced (or, after a kill, acknowledged) write {last_synced}"
            ));
        }
        // Sequence numbers between user writes belong to GC relocations; a
        // user batch must be wholly in or wholly out.
        if let Some(w) = pending
            .iter()
            .find(|w| w.seq_start <= recovered && recovered < w.seq_end)
        {
            return Err(format!(
                "cycle {cycle}: recovered sequence {recovered} splits the batch {}..={} (torn batch)",
                w.seq_start, w.seq_end
            ));
        }
        for w in pending.iter().filter(|w| w.seq_end <= recovered) {
            apply(&mut base, w);
        }
        pending.clear();
        let got: Result<Vec<_>, _> = db.scan(.., false).map_err(|e| e.to_string())?.collect();
        let got = got.map_err(|e| format!("cycle {cycle}: scan failed: {e}"))?;
        if got.len() != base.len()
            || got
                .iter()
                .zip(base.iter())
                .any(|(a, b)| a.0 != *b.0 || a.1 != *b.1)
        {
            let first = got
                .iter()
                .zip(base.iter())
                .find(|(a, b)| a.0 != *b.0 || a.1 != *b.1)
                .map(|(a, b)| {
                    format!(
                        "db has {:?}, model has {:?}",
                        String::from_utf8_lossy(&a.0),
                        String::from_utf8_lossy(b.0)
                    )
                });
            return Err(format!(
                "cycle {cycle}: state after recovery to seq {recovered} differs from the model ({} vs {} keys; {:?})",
                got.len(),
                base.len(),
                first
            ));
        }
        for _ in 0..20 {
            let k = format!("k{:04}", rng.gen_range(0..1500)).into_bytes();
            let v = db
                .get(&k)
                .map_err(|e| format!("cycle {cycle}: get failed: {e}"))?;
            if v.as_ref() != base.get(&k) {
                return Err(format!(
                    "cycle {cycle}: get {:?} differs from the model",
                    String::from_utf8_lossy(&k)
                ));
            }
        }
        if cycle % 3 == 0 {
            let rep = db.verify().map_err(|e| e.to_string())?;
            if !rep.faults.is_empty() {
                return Err(format!("cycle {cycle}: verify reported {:?}", rep.faults));
            }
        }
        if cycle + 1 == CYCLES {
            break;
        }
        // Random writes, then a crash at a random point. After a kill, a
        // few: files the dead process wrote and nothing writes again must
        // have been made durable by the open itself.
        let n_ops = if after_kill {
            rng.gen_range(1..50)
        } else {
            rng.gen_range(1000..4000)
        };
        for _ in 0..n_ops {
            let sync = rng.gen_bool(0.05);
            let mut b = WriteBatch::new();
            let mut changes = Vec::new();
            let n = if rng.gen_bool(0.1) {
                rng.gen_range(2..12)
            } else {
                1
            };
            for _ in 0..n {
                let k = format!("k{:04}", rng.gen_range(0..1500)).into_bytes();
                if rng.gen_bool(0.15) {
                    b.delete(&k).unwrap();
                    changes.push((k, None));
                } else {
                    let len = rng.gen_range(1..200);
                    let v: Vec<u8> = (0..len).map(|_| rng.gen_range(b'a'..=b'z')).collect();
                    b.put(&k, &v).unwrap();
                    changes.push((k, Some(v)));
                }
            }
            let seq_end = db
                .write_with_sequence(&b, WriteOptions { sync })
                .map_err(|e| format!("cycle {cycle}: write failed: {e}"))?;
            last_acked = seq_end;
            if sync {
                last_synced = seq_end;
            }
            let seq_start = seq_end + 1 - b.len() as u64;
            pending.push(Write {
                seq_start,
                seq_end,
                changes,
            });
            if rng.gen_bool(0.002) {
                db.flush()
                    .map_err(|e| format!("cycle {cycle}: flush failed: {e}"))?;
            }
        }
        // One cycle in four ends in a killed process rather than a power
        // cut: every acknowledged write must then survive, and the next
        // open makes it durable before a later power cut.
        after_kill = (seed + cycle as u64) % 4 == 1;
        if after_kill {
            process_kill(&fs, db);
            last_synced = last_acked;
        } else {
            power_cut(&fs, db);
        }
    }
    Ok(())
}

/// Power cut: from this instant no operation reaches the disk — not even
/// those the old instance's background threads start while it is being
/// dropped — and then everything unsynced is gone.
/// Value `i` of the lost-values tests, tagged by the write that made it.
fn lost_value(i: u32, tag: u8) -> Vec<u8> {
    vec![tag; 300 + i as usize]
}

/// The lost-values tests' setup: 40 keys `k000`.. with values tagged `a`,
/// made durable by a synced empty batch (its sequence number is returned);
/// then every sync of the value store's files (`files` in their path)
/// fails. Returns the batch the tests write next: keys `k000`–`k004`
/// tagged `b` and new keys `n000`–`n004` tagged `c`.
fn load_then_fail_syncs(db: &Db, fs: &FaultFs, files: &str) -> (u64, WriteBatch) {
    for i in 0..40u32 {
        db.put(format!("k{i:03}"), lost_value(i, b'a')).unwrap();
    }
    let before = db
        .write_with_sequence(&WriteBatch::new(), WriteOptions { sync: true })
        .unwrap();
    fail_syncs_of(fs, files);
    let mut b = WriteBatch::new();
    for i in 0..5u32 {
        b.put(format!("k{i:03}"), lost_value(i, b'b')).unwrap();
        b.put(format!("n{i:03}"), lost_value(i, b'c')).unwrap();
    }
    (before, b)
}

/// Every later sync of a file whose path holds `files` fails.
fn fail_syncs_of(fs: &FaultFs, files: &str) {
    fs.add_rule(FaultRule {
        op: FaultOp::Sync,
        path_contains: Some(files.into()),
        skip: 0,
        times: None,
        kind: FaultKind::Eio,
    });
}

#[test]
fn crash_recovery_keeps_a_prefix_of_history() {
    let seeds: Vec<u64> = match std::env::var("SEPKV_CRASH_SEED") {
        Ok(s) => vec![s.parse().expect("SEPKV_CRASH_SEED is a number")],
        Err(_) => {
            let n = std::env::var("SEPKV_CRASH_SEEDS")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(100u64);
            (0..n).collect()
        }
    };
    let presets: Vec<(Preset, bool)> = match std::env::var("SEPKV_CRASH_PRESET") {
        Ok(p) => {
            let (name, wal) = match p.strip_suffix("-nowal") {
                Some(n) => (n, false),
                None => (p.as_str(), true),
            };
            let preset: Preset = name.parse().expect("SEPKV_CRASH_PRESET names a preset");
            // flashkey has no index WAL (its bands are its log).
            vec![(preset, wal && preset != Preset::FlashKey)]
        }
        Err(_) => PRESETS.to_vec(),
    };
    let mut failures = Vec::new();
    for &preset in &presets {
        let label = label(preset);
        for &seed in &seeds {
            if let Err(e) = run_seed(preset, seed) {
                eprintln!("{label} seed {seed} failed: {e}");
                eprintln!(
                    "reproduce: SEPKV_CRASH_PRESET={label} SEPKV_CRASH_SEED={seed} cargo test -p sepkv --test crash -- --nocapture"
                );
                failures.push((label.clone(), seed));
            }
        }
        eprintln!(
            "{label}: {} crash/reopen iterations run",
            seeds.len() * (CYCLES - 1)
        );
    }
    assert!(
        failures.is_empty(),
        "{} runs failed: {:?}",
        failures.len(),
        failures
    );
}

/// A killed process, then a power loss after the reopen: what the dead
/// process handed to the OS survives the kill, and the reopen makes it
/// durable before recovery commits pointers to it, so the loss keeps every
/// acknowledged write of the dead process as well as the synced write the
/// new one made.
#[test]
fn a_kill_then_a_power_loss_after_the_reopen_loses_nothing_acknowledged() {
    for preset in PRESETS {
        for journal in [false, true] {
            let fs = FaultFs::new();
            let o = Options {
                // No GC: every value stays where the dead process wrote it.
                gc_garbage_ratio: 0.0,
                // The values span several value-log files.
                vlog_file_size: 1 << 20,
                hashkv_journal: journal,
                value_capacity: None,
                ..opts(&fs, preset)
            };
            let dir = Path::new("/killdb");
            let label = label(preset);
            let val =
                |i: u32| format!("{i:08}-{}", "v".repeat(100 + (i as usize % 1000))).into_bytes();
            let db = Db::open(dir, o.clone()).unwrap();
            for i in 0..3000u32 {
                let mut b = WriteBatch::new();
                b.put(format!("k{i:05}").into_bytes(), val(i)).unwrap();
                db.write(&b, WriteOptions::default()).unwrap();
            }
            process_kill(&fs, db);
            let db = Db::open(dir, o.clone()).unwrap_or_else(|e| panic!("{label}: reopen: {e}"));
            let mut b = WriteBatch::new();
            b.put(b"last", val(7)).unwrap();
            db.write(&b, WriteOptions { sync: true }).unwrap();
            drop(db);
            fs.crash();
            let db = Db::open(dir, o).unwrap_or_else(|e| panic!("{label}: open: {e}"));
            assert_eq!(db.get(b"last").unwrap(), Some(val(7)), "{label}");
            for i in 0..3000u32 {
                let got = db
                    .get(format!("k{i:05}").as_bytes())
                    .unwrap_or_else(|e| panic!("{label} (hashkv journal {journal}): k{i:05}: {e}"));
                assert_eq!(
                    got,
                    Some(val(i)),
                    "{label} (hashkv journal {journal}): k{i:05} lost"
                );
            }
        }
    }
}

/// GC may free a version only once the write that made it dead is durable:
/// here every separated value is superseded by an unsynced delete or small
/// (inline) value, GC then collects the old values, and the power is cut.
/// The recovered index may hold either version of each key, but never a
/// pointer to space GC has freed (WiscKey §3.3.2, HashKV §3.7).
#[test]
fn gc_never_frees_a_version_whose_newer_write_is_not_durable() {
    const N: usize = 300;
    for preset in [
        (Preset::WiscKey, true),
        (Preset::WiscKey, false),
        (Preset::HashKv, true),
        (Preset::KtStore, true),
        (Preset::FlashKey, false),
    ] {
        let fs = FaultFs::new();
        let dir = Path::new("/gcdurable");
        let key = |i: usize| format!("k{i:04}").into_bytes();
        let old = |i: usize| format!("{i:0>500}").into_bytes();
        let new = |i: usize| format!("n{i}").into_bytes();
        {
            let db = Db::open(dir, opts(&fs, preset)).unwrap();
            for i in 0..N {
                db.put(key(i), old(i)).unwrap();
            }
            db.write(&WriteBatch::new(), WriteOptions { sync: true })
                .unwrap();
            db.flush().unwrap();
            for i in 0..N {
                let mut b = WriteBatch::new();
                if i % 2 == 0 {
                    b.delete(key(i)).unwrap();
                } else {
                    b.put(key(i), new(i)).unwrap();
                }
                db.write(&b, WriteOptions { sync: false }).unwrap();
            }
            db.gc(None).unwrap();
            power_cut(&fs, db);
        }
        let db = Db::open(dir, opts(&fs, preset)).unwrap();
        for i in 0..N {
            let got = db
                .get(key(i))
                .unwrap_or_else(|e| panic!("{preset:?}: key {i} after the crash: {e}"));
            let newer = if i % 2 == 0 { None } else { Some(new(i)) };
            assert!(
                got == Some(old(i)) || got == newer,
                "{preset:?}: key {i} reads {got:?}"
            );
        }
        let rep = db.verify().unwrap();
        assert!(rep.faults.is_empty(), "{preset:?}: {:?}", rep.faults);
    }
}

/// A synced write whose value-store sync fails while its WAL sync succeeds
/// (the two run at once) leaves a durable WAL record pointing at values
/// that did not survive: after the crash the write is gone whole, every
/// earlier synced write is there, and nothing reads as corrupt.
#[test]
fn a_wal_record_whose_values_were_lost_is_dropped_whole() {
    for (preset, files) in [
        (Preset::WiscKey, ".vlog"),
        (Preset::HashKv, ".h"),
        (Preset::KtStore, ".tt"),
    ] {
        let fs = FaultFs::new();
        let dir = Path::new("/lostvalues");
        let value = lost_value;
        let before;
        // Values carried in the WAL would make the value store's sync
        // unneeded; this is the path without them.
        let o = || Options {
            sync_values_in_wal: false,
            ..opts(&fs, (preset, true))
        };
        {
            let db = Db::open(dir, o()).unwrap();
            let b;
            (before, b) = load_then_fail_syncs(&db, &fs, files);
            let r = db.write(&b, WriteOptions { sync: true });
            assert!(
                r.is_err(),
                "{preset:?}: the value-store sync failure was not reported"
            );
            fs.clear_rules();
            power_cut(&fs, db);
        }
        let db = Db::open(dir, o()).unwrap();
        assert_eq!(db.recovered_sequence(), before, "{preset:?}");
        for i in 0..40u32 {
            assert_eq!(
                db.get(format!("k{i:03}")).unwrap(),
                Some(value(i, b'a')),
                "{preset:?}: k{i:03}"
            );
        }
        for i in 0..5u32 {
            assert_eq!(db.get(format!("n{i:03}")).unwrap(), None, "{preset:?}");
        }
        let rep = db.verify().unwrap();
        assert!(rep.faults.is_empty(), "{preset:?}: {:?}", rep.faults);
    }
}

/// The same synced batch with its values carried in the WAL (the default,
/// `Options::sync_values_in_wal`): its sync needs no value-store fsync (one
/// that would fail is never reached), and after a power cut that took the
/// store's unsynced records the batch is restored whole from the WAL.
#[test]
fn a_synced_batch_whose_values_the_store_lost_is_restored_from_the_wal() {
    for (preset, files) in [
        (Preset::WiscKey, ".vlog"),
        (Preset::HashKv, ".h"),
        (Preset::KtStore, ".tt"),
        (Preset::Lwc, ".vlog"),
    ] {
        let fs = FaultFs::new();
        let dir = Path::new("/carried");
        let value = lost_value;
        let o = || {
            let mut o = opts(&fs, (preset, true));
            if preset == Preset::Lwc {
                // The LWC-tree over the value log.
                o.value_layout = Some(sepkv::ValueLayout::Vlog);
            }
            o
        };
        {
            let db = Db::open(dir, o()).unwrap();
            let (_, b) = load_then_fail_syncs(&db, &fs, files);
            let last = db
                .write_with_sequence(&b, WriteOptions { sync: true })
                .unwrap_or_else(|e| panic!("{preset:?}: {e}"));
            assert_eq!(db.stats().unwrap().index_figures["wal_only_syncs"], 1);
            fs.clear_rules();
            power_cut(&fs, db);
            let db = Db::open(dir, o()).unwrap();
            assert_eq!(db.recovered_sequence(), last, "{preset:?}");
            let restored = db.stats().unwrap().index_figures["wal_values_restored"];
            assert!(restored > 0, "{preset:?}: the store kept every record");
            for i in 0..40u32 {
                let want = value(i, if i < 5 { b'b' } else { b'a' });
                assert_eq!(
                    db.get(format!("k{i:03}")).unwrap(),
                    Some(want),
                    "{preset:?}"
                );
            }
            for i in 0..5u32 {
                assert_eq!(
                    db.get(format!("n{i:03}")).unwrap(),
                    Some(value(i, b'c')),
                    "{preset:?}"
                );
            }
            let rep = db.verify().unwrap();
            assert!(rep.faults.is_empty(), "{preset:?}: {:?}", rep.faults);
        }
    }
}

/// An empty batch written with `sync` makes every earlier write durable, as
/// a non-empty synced batch would.
#[test]
fn an_empty_synced_batch_makes_earlier_writes_durable() {
    for preset in [
        Preset::LevelDb,
        Preset::WiscKey,
        Preset::HashKv,
        Preset::KtStore,
        Preset::FlashKey,
        Preset::Lwc,
    ] {
        let fs = FaultFs::new();
        // flashkey has no index WAL (its bands are its log).
        let wal = preset != Preset::FlashKey;
        let db = Db::open("/db", opts(&fs, (preset, wal))).unwrap();
        for i in 0..50u32 {
            db.put(format!("k{i:03}"), vec![i as u8; 300]).unwrap();
        }
        db.write(&WriteBatch::new(), WriteOptions { sync: true })
            .unwrap();
        power_cut(&fs, db);
        let db = Db::open("/db", opts(&fs, (preset, wal))).unwrap();
        for i in 0..50u32 {
            assert_eq!(
                db.get(format!("k{i:03}")).unwrap(),
                Some(vec![i as u8; 300]),
                "{preset:?} lost k{i:03}"
            );
        }
    }
}

/// WALs that took synced writes are written over by later WALs once
/// obsolete (recycled). After a power cut, recovery replays only each
/// WAL's own records: the older records past them in a recycled file, of
/// keys written or deleted since, never come back.
#[test]
fn recycled_wals_replay_only_their_own_records() {
    const ROUNDS: u32 = 6;
    const KEYS: u32 = 400;
    // One size for every record, so that the last round's records end
    // where an older record of the recycled file starts: that record is
    // whole and valid, and only its log number tells it apart.
    let value = |i: u32, round: u32| vec![(i + 7 * round) as u8; 200];
    // The round before the last deletes every twentieth key; the last
    // round writes the other fourth keys.
    let want = |i: u32| match (i % 20, i % 4) {
        (0, _) => None,
        (_, 0) => Some(value(i, ROUNDS - 1)),
        _ => Some(value(i, ROUNDS - 2)),
    };
    for preset in [Preset::LevelDb, Preset::WiscKey, Preset::Lwc] {
        let fs = FaultFs::new();
        let dir = Path::new("/recycled");
        // A round fits in one WAL: WALs switch at the flushes alone.
        let o = || Options {
            write_buffer_size: 256 << 10,
            ..opts(&fs, (preset, true))
        };
        {
            let db = Db::open(dir, o()).unwrap();
            for round in 0..ROUNDS - 1 {
                // The round before the last one is not synced: its WAL is
                // not kept, so the last round's WAL is written over the one
                // of the round before, whose records are older than what
                // the flush leaves in the SSTables.
                let sync = WriteOptions {
                    sync: round != ROUNDS - 2,
                };
                for i in 0..KEYS {
                    let mut b = WriteBatch::new();
                    let key = format!("k{i:04}");
                    if round == ROUNDS - 2 && i % 20 == 0 {
                        b.delete(key).unwrap();
                    } else {
                        b.put(key, value(i, round)).unwrap();
                    }
                    db.write(&b, sync).unwrap();
                }
                // Makes the older WALs obsolete.
                db.flush().unwrap();
            }
            // Stays in the WAL, the recycled one.
            for i in (0..KEYS).step_by(4).filter(|i| i % 20 != 0) {
                let mut b = WriteBatch::new();
                b.put(format!("k{i:04}"), value(i, ROUNDS - 1)).unwrap();
                db.write(&b, WriteOptions { sync: true }).unwrap();
            }
            let recycled = db.stats().unwrap().index_figures["wals_recycled"];
            assert!(recycled > 0, "{preset:?}: no WAL was recycled");
            power_cut(&fs, db);
        }
        for reopen in 0..2 {
            let db = Db::open(dir, o()).unwrap();
            for i in 0..KEYS {
                assert_eq!(
                    db.get(format!("k{i:04}")).unwrap(),
                    want(i),
                    "{preset:?}, open {reopen}: k{i:04}"
                );
            }
            let rep = db.verify().unwrap();
            assert!(rep.faults.is_empty(), "{preset:?}: {:?}", rep.faults);
            power_cut(&fs, db);
        }
    }
}

/// How [`an_older_wal_that_lost_its_unsynced_tail_ends_the_history`]
/// damages the WAL before the current one.
#[derive(Debug, Clone, Copy, PartialEq)]
enum OlderWalLoss {
    /// Nothing lost: both WALs replay whole.
    None,
    /// Cut a third of the way in (a torn record, as a lost page shows).
    Cut,
    /// Zeros from a third of the way in (lost pages of the preallocated
    /// space).
    Zeros,
}

/// A memtable switch does not sync the old WAL; the next synced write
/// seals it. After a power loss that kept a newer WAL's pages but not the
/// older one's tail, recovery ends the history at the loss — the newer
/// WAL's writes, never acknowledged as durable, are dropped with it — so
/// the state stays a prefix. Once a synced write has sealed the older
/// WAL, the same loss is damage, and open reports it.
#[test]
fn an_older_wal_that_lost_its_unsynced_tail_ends_the_history() {
    use sepkv::fs::FileSystem;
    let key = |i: usize| format!("k{i:05}");
    let value = |i: usize| vec![(i % 251) as u8; 200];
    for preset in [
        Preset::LevelDb,
        Preset::WiscKey,
        Preset::HashKv,
        Preset::Lwc,
    ] {
        for (loss, synced) in [
            (OlderWalLoss::None, false),
            (OlderWalLoss::Cut, false),
            (OlderWalLoss::Zeros, false),
            (OlderWalLoss::Cut, true),
        ] {
            let what = format!("{preset:?}, {loss:?}, synced {synced}");
            let dir = Path::new("/older-wal");
            let wals = |fs: &FaultFs| -> Vec<std::path::PathBuf> {
                let mut v: Vec<String> = fs
                    .list(dir)
                    .unwrap()
                    .into_iter()
                    .filter(|n| n.ends_with(".log"))
                    .collect();
                v.sort();
                v.into_iter().map(|n| dir.join(n)).collect()
            };
            // Writes until one lands in a new WAL (the first after the
            // switch). The old memtable's flush fails at its table's sync,
            // so the old WAL stays live. The flush may fail before the
            // write that switched is logged: that write then fails, and
            // the round starts again on a new file system.
            let (fs, o, written, first_in_new) = 'attempt: {
                for _ in 0..50 {
                    let fs = FaultFs::new();
                    let o = {
                        let fs = fs.clone();
                        move || Options {
                            // No GC: its relocations would write batches
                            // of their own.
                            gc_garbage_ratio: 0.0,
                            value_capacity: None,
                            ..opts(&fs, (preset, true))
                        }
                    };
                    let db = Db::open(dir, o()).unwrap();
                    fs.add_rule(FaultRule {
                        path_contains: Some(".sst".into()),
                        ..FaultRule::new(FaultOp::Sync, FaultKind::Eio)
                    });
                    let mut written = 0;
                    loop {
                        assert!(written < 100_000, "{what}: the memtable never switched");
                        let mut b = WriteBatch::new();
                        b.put(key(written), value(written)).unwrap();
                        if let Err(e) = db.write(&b, WriteOptions { sync: synced }) {
                            assert_eq!(wals(&fs).len(), 2, "{what}: write {written}: {e}");
                            break;
                        }
                        written += 1;
                        if wals(&fs).len() == 2 {
                            process_kill(&fs, db);
                            break 'attempt (fs, o, written, written - 1);
                        }
                    }
                }
                panic!("{what}: no write landed in the new WAL in 50 rounds");
            };
            let older = wals(&fs)[0].clone();
            let len = fs.file_len(&older).unwrap();
            let at = len / 3;
            match loss {
                OlderWalLoss::None => {}
                OlderWalLoss::Cut => fs.truncate(&older, at).unwrap(),
                OlderWalLoss::Zeros => {
                    let f = fs.open_read(&older).unwrap();
                    let mut data = vec![0u8; (len - at) as usize];
                    f.read_exact_at(at, &mut data).unwrap();
                    for (i, &b) in data.iter().enumerate() {
                        if b != 0 {
                            fs.corrupt(&older, at + i as u64, b).unwrap();
                        }
                    }
                }
            }
            let db = match Db::open(dir, o()) {
                Err(e) if synced && loss != OlderWalLoss::None => {
                    assert!(e.is_corruption(), "{what}: {e}");
                    continue;
                }
                Err(e) => panic!("{what}: open failed: {e}"),
                Ok(db) => db,
            };
            assert!(
                !synced || loss == OlderWalLoss::None,
                "{what}: a sealed WAL's loss went unreported"
            );
            // A prefix of the writes: all of them, or fewer than the older
            // WAL held.
            let kept = (0..written)
                .position(|i| db.get(key(i)).unwrap().is_none())
                .unwrap_or(written);
            for i in 0..written {
                let want = (i < kept).then(|| value(i));
                assert_eq!(db.get(key(i)).unwrap(), want, "{what}: {}", key(i));
            }
            if loss == OlderWalLoss::None {
                assert_eq!(kept, written, "{what}");
            } else {
                assert!(kept > 0 && kept < first_in_new, "{what}: kept {kept}");
            }
            power_cut(&fs, db);
        }
    }
}

/// FlashKey's checkpoints append their pages' changed buckets (delta
/// records), sync the page file, then append the checkpoint's marker to the
/// edit log `HASHEDITS`. A power loss (or a kill) after the deltas and
/// before the marker is durable leaves the previous checkpoint in force:
/// every acknowledged synced write is read back, nothing is corruption.
#[test]
fn flashkey_power_loss_between_page_deltas_and_the_checkpoint_marker() {
    let preset = (Preset::FlashKey, false);
    for kill in [false, true] {
        let fs = FaultFs::new();
        let dir = Path::new("/fkdb");
        let edits = dir.join("HASHEDITS");
        let o = opts(&fs, preset);
        let db = Db::open(dir, o.clone()).unwrap();
        let key = |i: u32| format!("k{i:04}").into_bytes();
        let val = |round: u32, i: u32| format!("{round}-{i}-{}", "v".repeat(80)).into_bytes();
        let mut model = Model::new();
        // Loads and overwrites: checkpoints of delta records every two bands.
        for round in 0..4 {
            for i in 0..300 {
                db.put(key(i), val(round, i)).unwrap();
                model.insert(key(i), val(round, i));
            }
        }
        db.write(&WriteBatch::new(), WriteOptions { sync: true })
            .unwrap();
        assert!(fs.file_len(&edits).is_some(), "no checkpoint record");
        // From now on the edit log's syncs fail: a checkpoint's deltas
        // reach the page file and its sync, its marker never becomes
        // durable.
        fail_syncs_of(&fs, "HASHEDITS");
        let mut unsure = None;
        for i in 0..300 {
            let mut b = WriteBatch::new();
            b.put(key(i), val(9, i)).unwrap();
            match db.write(&b, WriteOptions { sync: true }) {
                Ok(_) => {
                    model.insert(key(i), val(9, i));
                }
                Err(_) => {
                    unsure = Some(i);
                    break;
                }
            }
        }
        let torn = fs.file_len(&edits).unwrap_or(0) > fs.durable_len(&edits).unwrap_or(0);
        assert!(
            torn || unsure.is_some(),
            "no checkpoint marker was left unsynced"
        );
        if kill {
            process_kill(&fs, db);
        } else {
            power_cut(&fs, db);
        }
        let db = Db::open(dir, o).unwrap_or_else(|e| panic!("kill {kill}: reopen: {e}"));
        for (k, v) in &model {
            let got = db.get(k).unwrap();
            let k_str = String::from_utf8_lossy(k);
            if unsure.map(key).as_deref() == Some(&k[..]) {
                assert!(got.is_some(), "kill {kill}: {k_str} lost");
                continue;
            }
            assert_eq!(got.as_deref(), Some(&v[..]), "kill {kill}: {k_str}");
        }
        let rep = db.verify().unwrap();
        assert!(rep.faults.is_empty(), "kill {kill}: {:?}", rep.faults);
    }
}
