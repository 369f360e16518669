//! Space that stays bounded: the garbage estimate survives a reopen, and
//! the space-amplification target presses writers before it is passed.

use sepkv::fs::{FileSystem, MemFs};
use sepkv::{Db, Options, Preset};
use std::sync::Arc;

/// The database's bytes on disk less its manifest's, which grows by an
/// edit per flush, compaction or GC step until it rolls and, in the small
/// stores of these tests, outweighs the data.
fn disk_without_manifest(s: &sepkv::DbStats) -> u64 {
    let manifest: u64 = s
        .files
        .iter()
        .filter(|g| g.kind == "manifest")
        .map(|g| g.allocated_bytes)
        .sum();
    s.disk_bytes - manifest
}

fn key(i: usize) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn value(i: usize, round: usize) -> Vec<u8> {
    let mut v = format!("value-{i}-{round}-").into_bytes();
    v.resize(1000, b'a' + (round % 26) as u8);
    v
}

/// No background GC and no target: the figures move only by what the test
/// does.
fn quiet(preset: Preset, fs: &Arc<dyn FileSystem>) -> Options {
    Options {
        fs: fs.clone(),
        gc_garbage_ratio: 0.0,
        space_amp_target: f64::INFINITY,
        value_threshold: 64,
        ..Options::preset(preset)
    }
}

/// [`quiet`] with the default target of 1.5 and files small enough that a
/// few thousand 1000-byte values fill several: HashKV's groups and reserve
/// in `hashkv_capacity` bytes.
fn bounded(preset: Preset, fs: &Arc<dyn FileSystem>, hashkv_capacity: u64) -> Options {
    Options {
        space_amp_target: 1.5,
        write_buffer_size: 256 << 10,
        vlog_file_size: 1 << 20,
        gc_chunk_size: 256 << 10,
        trie_table_size: 256 << 10,
        hashkv_main_segment_size: 256 << 10,
        hashkv_log_segment_size: 64 << 10,
        hashkv_journal_size: 64 << 10,
        value_capacity: (preset == Preset::HashKv).then_some(hashkv_capacity),
        ..quiet(preset, fs)
    }
}

/// Three rounds over 300 keys, compacted so compaction reports the first
/// two rounds as garbage; after a reopen the store reports the same
/// garbage, not zero.
#[test]
fn a_reopened_database_reports_the_garbage_it_had() {
    for preset in [Preset::WiscKey, Preset::HashKv, Preset::KtStore] {
        let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
        let before = {
            let db = Db::open("/db", quiet(preset, &fs)).unwrap();
            for round in 0..3 {
                for i in 0..300 {
                    db.put(key(i), value(i, round)).unwrap();
                }
            }
            db.compact_range(..).unwrap();
            let s = db.stats().unwrap().value_store;
            assert!(
                s.garbage_bytes >= 2 * 300 * 1000,
                "{preset:?}: compaction reported {} B",
                s.garbage_bytes
            );
            db.close().unwrap();
            s
        };
        let db = Db::open("/db", quiet(preset, &fs)).unwrap();
        let after = db.stats().unwrap().value_store;
        assert_eq!(after.garbage_bytes, before.garbage_bytes, "{preset:?}");
        assert_eq!(after.live_bytes, before.live_bytes, "{preset:?}");
        // And again, with more garbage noted in the second session.
        for i in 0..300 {
            db.put(key(i), value(i, 3)).unwrap();
        }
        db.compact_range(..).unwrap();
        let more = db.stats().unwrap().value_store;
        assert!(more.garbage_bytes > after.garbage_bytes, "{preset:?}");
        drop(db);
        let db = Db::open("/db", quiet(preset, &fs)).unwrap();
        assert_eq!(
            db.stats().unwrap().value_store.garbage_bytes,
            more.garbage_bytes,
            "{preset:?}: after a drop without close"
        );
        for i in 0..300 {
            assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 3)));
        }
    }
}

/// With no background GC, overwrites make garbage until the target
/// presses: writers are slowed down, then stopped to run GC themselves,
/// and the estimate the target is judged by never passes it (checked after
/// every round); the data stays intact. Backpressure is told by its
/// counters, not by timing.
#[test]
fn backpressure_engages_before_the_target_is_passed() {
    for preset in [Preset::WiscKey, Preset::HashKv, Preset::KtStore] {
        let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
        let db = Db::open("/db", bounded(preset, &fs, 64 << 20)).unwrap();
        let n = 2000;
        let mut max_amp: f64 = 0.0;
        for round in 0..12 {
            for i in 0..n {
                db.put(key(i), value(i, round)).unwrap();
            }
            let s = db.stats().unwrap();
            max_amp = max_amp.max(s.space_amp_estimate);
            assert!(
                s.space_amp_estimate < 1.5 + 0.05,
                "{preset:?} round {round}: estimate {} {:?} hidden {} stops {} misses {} slow {} disc {} {:?}",
                s.space_amp_estimate,
                s.value_store,
                s.space_hidden_garbage,
                s.space_stops,
                s.space_target_misses,
                s.space_slowdowns,
                s.space_discoveries,
                s.value_store_figures
            );
        }
        let s = db.stats().unwrap();
        assert!(s.space_slowdowns > 0, "{preset:?}: no slowdown");
        assert!(s.space_stops > 0, "{preset:?}: no stop");
        assert!(s.write_gc_steps > 0, "{preset:?}: writers ran no GC");
        // A stopped writer lets its write through only when GC keeps
        // finding nothing to free: rarely.
        assert!(
            s.space_target_misses * 4 <= s.space_stops,
            "{preset:?}: {} misses of {} stops",
            s.space_target_misses,
            s.space_stops
        );
        // The directory (index, WAL and value store) against the live user
        // bytes. The manifest is left out: it grows by an edit per GC step
        // (HashKV's carries its segment table) until it rolls at 16 MiB,
        // which in a store this small outweighs the data.
        let live = (n * (9 + 1000)) as f64;
        let amp = disk_without_manifest(&s) as f64 / live;
        assert!(
            amp < 1.9,
            "{preset:?}: directory {} B = {amp:.2}x vs {:?} hidden {} est {} gc {:?} files {:?}",
            s.disk_bytes,
            s.value_store,
            s.space_hidden_garbage,
            s.space_amp_estimate,
            s.value_store_figures,
            s.files
        );
        for i in 0..n {
            assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 11)), "{preset:?}");
        }
        eprintln!("{preset:?}: max estimate {max_amp:.2}, directory {amp:.2}x, {s:?}");
    }
}

/// At the target a writer is held for one GC step at most — the step
/// already running, or one it runs — and then writes; the index
/// compaction that finds hidden garbage is left to the GC thread instead
/// of being run by the writer that met the stop. A sustained overwrite
/// keeps the estimate within the target and the directory near it all
/// the same. Without background GC (`quiet`) the stops are the only GC, so
/// every held write shows; a writer that ran GC until the store was back
/// under the target, or compacted the index and then collected, was held
/// for more than one step.
#[test]
fn a_stopped_writer_is_held_for_one_gc_step() {
    for preset in [Preset::WiscKey, Preset::HashKv, Preset::KtStore] {
        let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
        let db = Db::open("/db", bounded(preset, &fs, 64 << 20)).unwrap();
        let n = 2000;
        for round in 0..10 {
            for i in 0..n {
                db.put(key(i), value(i, round)).unwrap();
            }
            let s = db.stats().unwrap();
            assert!(
                s.write_gc_steps_max <= 1,
                "{preset:?} round {round}: a write was held for {} GC steps",
                s.write_gc_steps_max
            );
            assert!(
                s.space_amp_estimate < 1.5 + 0.05,
                "{preset:?} round {round}: estimate {}",
                s.space_amp_estimate
            );
        }
        let s = db.stats().unwrap();
        assert!(s.space_stops > 0, "{preset:?}: no stop");
        assert_eq!(s.write_gc_steps_max, 1, "{preset:?}: no write was held");
        for i in 0..n {
            assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 9)), "{preset:?}");
        }
        db.close().unwrap();
    }
}

/// `value_capacity` alone (no target), with background GC on: writers are
/// slowed down before the value log fills, every write succeeds (no
/// `ValueStoreFull` while garbage remains), and the log never spans more
/// than the capacity.
#[test]
fn capacity_slows_writers_before_it_is_reached() {
    for preset in [Preset::WiscKey, Preset::KtStore] {
        let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
        let n = 2000usize;
        let data = (n * (9 + 1000)) as u64;
        let cap = data + data * 3 / 10;
        let o = Options {
            space_amp_target: f64::INFINITY,
            gc_garbage_ratio: 0.5,
            write_buffer_size: 256 << 10,
            vlog_file_size: 1 << 20,
            gc_chunk_size: 256 << 10,
            trie_table_size: 256 << 10,
            value_capacity: Some(cap),
            ..quiet(preset, &fs)
        };
        let db = Db::open("/db", o).unwrap();
        for round in 0..10 {
            for i in 0..n {
                db.put(key(i), value(i, round))
                    .unwrap_or_else(|e| panic!("{preset:?} round {round} key {i}: {e}"));
            }
        }
        let s = db.stats().unwrap();
        assert!(s.space_slowdowns > 0, "{preset:?}: no slowdown");
        let span = s.value_store.live_bytes + s.value_store.garbage_bytes;
        assert!(span <= cap, "{preset:?}: {span} > {cap}");
        for i in 0..n {
            assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 9)), "{preset:?}");
        }
        db.close().unwrap();
    }
}

/// The WAL files in `dir`.
fn wal_files(dir: &std::path::Path) -> Vec<std::fs::DirEntry> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .collect()
}

/// Bytes the WAL files in `dir` occupy on disk, as `du` counts them.
fn wal_allocated(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    wal_files(dir)
        .iter()
        .map(|e| e.metadata().unwrap().blocks() * 512)
        .sum()
}

/// A clean close flushes the memtable: the closed database holds no WAL
/// space — not the values synced writes carried in it, nor a spare WAL
/// kept for reuse — and nothing is lost. With `flush_on_close` off the
/// WAL keeps them, which shows the measure can tell.
#[test]
fn a_closed_database_holds_no_log_space() {
    for preset in [Preset::WiscKey, Preset::HashKv, Preset::LevelDb] {
        for flush_on_close in [true, false] {
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().join("db");
            let o = || Options {
                write_buffer_size: 1 << 20,
                flush_on_close,
                ..Options::preset(preset)
            };
            let db = Db::open(&dir, o()).unwrap();
            let sync = sepkv::WriteOptions { sync: true };
            // 3 MB of synced writes: three WAL switches, so that a spare is
            // kept, and a last WAL about half full.
            for b in 0..300 {
                let mut batch = sepkv::WriteBatch::new();
                for i in b * 10..b * 10 + 10 {
                    batch.put(key(i), value(i, 0)).unwrap();
                }
                db.write(&batch, sync).unwrap();
            }
            db.close().unwrap();
            let wal = wal_allocated(&dir);
            if flush_on_close {
                assert!(wal < 64 << 10, "{preset:?}: {wal} B of WAL after close");
            } else {
                assert!(
                    wal >= 256 << 10,
                    "{preset:?}: {wal} B of WAL without the flush"
                );
            }
            let db = Db::open(&dir, o()).unwrap();
            for i in 0..3000 {
                assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 0)), "{preset:?}");
            }
        }
    }
}

/// GC syncs the WAL at the end of every step, but a WAL synced only so
/// is not kept for reuse once obsolete: with no synced write there is no
/// spare, and the directory holds one WAL, not two memtables' worth of log.
/// (A spare stood beside the current WAL through every GC-heavy update
/// run, adding a tenth to its space amplification.)
#[test]
fn gc_syncs_keep_no_spare_wal() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let db = Db::open(
        &dir,
        Options {
            write_buffer_size: 256 << 10,
            vlog_file_size: 1 << 20,
            gc_chunk_size: 256 << 10,
            gc_garbage_ratio: 0.0,
            space_amp_target: f64::INFINITY,
            value_threshold: 64,
            ..Options::preset(Preset::WiscKey)
        },
    )
    .unwrap();
    // Round 0 writes every key, later rounds the even ones: GC finds the
    // odd keys' values live beside the garbage and relocates them, which
    // ends with the sync.
    let latest = |i: usize| if i.is_multiple_of(2) { 3 } else { 0 };
    for round in 0..4 {
        for i in (0..1000).filter(|&i: &usize| round == 0 || i.is_multiple_of(2)) {
            db.put(key(i), value(i, round)).unwrap();
        }
        db.compact_range(..).unwrap();
        let rep = db.gc(Some(0.0)).unwrap();
        assert!(
            round == 0 || rep.bytes_rewritten > 0,
            "round {round}: GC moved nothing"
        );
        // The WAL GC synced becomes obsolete.
        db.flush().unwrap();
        db.wait_idle().unwrap();
    }
    assert_eq!(wal_files(&dir).len(), 1, "WAL files beside the current one");
    assert_eq!(db.stats().unwrap().index_figures["wals_recycled"], 0);
    for i in 0..1000 {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i, latest(i))));
    }
    db.close().unwrap();
}

/// A database whose index's upper levels shadow most of its values (a
/// short-lived process overwrote them all, then exited) has its index
/// compacted by the GC thread right after open, before any write: the
/// garbage estimate is not settled then, so without this nothing would
/// find that garbage until writes came. Polls, with a generous bound; the
/// test does not depend on how soon.
#[test]
fn an_open_compacts_an_index_whose_upper_levels_hide_most_values() {
    for preset in [Preset::WiscKey, Preset::HashKv] {
        let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
        {
            let db = Db::open("/db", quiet(preset, &fs)).unwrap();
            for i in 0..300 {
                db.put(key(i), value(i, 0)).unwrap();
            }
            db.compact_range(..).unwrap();
            for i in 0..300 {
                db.put(key(i), value(i, 1)).unwrap();
            }
            db.flush().unwrap();
            db.close().unwrap();
        }
        // Background GC and the default target.
        let o = Options {
            fs: fs.clone(),
            value_threshold: 64,
            ..Options::preset(preset)
        };
        let db = Db::open("/db", o).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while db.stats().unwrap().space_discoveries == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "{preset:?}: no index compaction after open"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        for i in 0..300 {
            assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 1)), "{preset:?}");
        }
    }
}

/// A short-lived process that overwrote its data leaves the store below
/// the target's GC band when it closes (`Options::gc_on_close`): the close
/// finds the garbage the index hides and collects it. Without it the same
/// process leaves the store higher, where only writers' backpressure held
/// it. Judged after a reopen, by the value store's bytes on disk over the
/// live records once a compaction has reported every dead one.
#[test]
fn close_collects_what_a_short_process_left() {
    for preset in [Preset::WiscKey, Preset::HashKv, Preset::KtStore] {
        let amp_after = |gc_on_close: bool| -> f64 {
            let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
            // No background GC (`quiet`): only writers and the close
            // collect. Eleven HashKV groups for a megabyte of values.
            let o = Options {
                gc_on_close,
                ..bounded(preset, &fs, 4 << 20)
            };
            let n = 1000;
            for round in 0..3 {
                let db = Db::open("/db", o.clone()).unwrap();
                for i in 0..n {
                    db.put(key(i), value(i, round)).unwrap();
                }
                db.close().unwrap();
            }
            let db = Db::open("/db", quiet(preset, &fs)).unwrap();
            db.compact_range(..).unwrap();
            let s = db.stats().unwrap().value_store;
            for i in 0..n {
                assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 2)), "{preset:?}");
            }
            s.file_bytes as f64 / s.live_bytes as f64
        };
        let with = amp_after(true);
        let without = amp_after(false);
        eprintln!("{preset:?}: value-store amplification {with:.3} with, {without:.3} without");
        assert!(
            with < 1.3,
            "{preset:?}: {with:.3} after a close that collects"
        );
        assert!(
            without > with + 0.1,
            "{preset:?}: {without:.3} without, {with:.3} with"
        );
    }
}

/// Closes from several threads at once, while the store has garbage to
/// collect at close: every call returns `Ok`, the handle is closed after
/// them, and the data reads back whole after a reopen.
#[test]
fn concurrent_closes_all_return_and_lose_nothing() {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    // With the GC thread running, as a close finds it.
    let o = Options {
        gc_garbage_ratio: Options::preset(Preset::WiscKey).gc_garbage_ratio,
        ..bounded(Preset::WiscKey, &fs, 0)
    };
    let db = Arc::new(Db::open("/db", o.clone()).unwrap());
    for round in 0..3 {
        for i in 0..800 {
            db.put(key(i), value(i, round)).unwrap();
        }
    }
    let closers: Vec<_> = (0..4)
        .map(|_| {
            let db = db.clone();
            std::thread::spawn(move || db.close())
        })
        .collect();
    for c in closers {
        c.join().unwrap().unwrap();
    }
    assert!(matches!(
        db.put(key(0), value(0, 9)),
        Err(sepkv::Error::Closed)
    ));
    drop(db);
    let db = Db::open("/db", o).unwrap();
    for i in 0..800 {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 2)));
    }
    assert!(db.verify().unwrap().faults.is_empty());
}

/// The space estimate follows the bytes on disk through a load and an
/// overwrite of every key in another order: after the load's samples, a
/// share of overwrites counted since open (a third, halfway through the
/// overwrite) put the estimate 0.2–0.5 below the directory's figure, and
/// the target acted late. The target is set high (3.0) and background GC
/// is off, so that no GC moves the figures and only the estimate is
/// judged.
#[test]
fn the_estimate_follows_the_bytes_on_disk_through_a_load_and_an_overwrite() {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    let db = Db::open(
        "/db",
        Options {
            space_amp_target: 3.0,
            ..bounded(Preset::WiscKey, &fs, 0)
        },
    )
    .unwrap();
    let n = 20_000;
    // A fixed shuffle of the keys (an odd stride walks all of them).
    let order = |stride: usize| (0..n).map(move |i| (i * stride + 7) % n);
    for i in order(7919) {
        db.put(key(i), value(i, 0)).unwrap();
    }
    let user = (n * (9 + 1000)) as f64;
    let mut worst: f64 = 0.0;
    for (done, i) in order(104_729).enumerate() {
        db.put(key(i), value(i, 1)).unwrap();
        if !(done + 1).is_multiple_of(n / 10) {
            continue;
        }
        let s = db.stats().unwrap();
        // The directory less the manifest (an edit per flush and
        // compaction, large against a store this small) against the live
        // user bytes.
        let on_disk = disk_without_manifest(&s) as f64 / user;
        let gap = on_disk - s.space_amp_estimate;
        worst = worst.max(gap.abs());
        assert!(
            gap.abs() < 0.1,
            "after {} overwrites: estimate {:.3}, on disk {on_disk:.3} ({:?}, hidden {})",
            done + 1,
            s.space_amp_estimate,
            s.value_store,
            s.space_hidden_garbage
        );
    }
    let s = db.stats().unwrap();
    assert_eq!(s.space_stops, 0, "the target was not approached");
    assert!(s.space_amp_estimate > 1.6, "{}", s.space_amp_estimate);
    eprintln!("largest gap between estimate and disk: {worst:.3}");
    for i in 0..n {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 1)));
    }
}
