//! Tables of mostly tombstones leave the index: a churn of keys written
//! once and deleted (TTL-style data) grows no LSM-tree, through `Db` with
//! the `flashkey` (its key-only tree), `wisckey` and `hashkv` presets,
//! across a reopen; and a snapshot keeps what it reads until released.

use sepkv::fs::MemFs;
use sepkv::{Db, Options, Preset, ReadOptions};
use std::sync::Arc;

const KEYS: u32 = 1000;
const ROUNDS: u32 = 30;

fn opts(fs: &Arc<MemFs>, preset: Preset) -> Options {
    Options {
        fs: fs.clone(),
        band_bytes: 32 << 10,
        hash_checkpoint_bands: 4,
        write_buffer_size: 64 << 10,
        gc_garbage_ratio: 0.0,
        ..Options::preset(preset)
    }
}

/// Bytes of the index's SSTables (for `flashkey`, its key tree's).
fn table_bytes(db: &Db) -> u64 {
    let st = db.stats().unwrap();
    let f = &st.index_figures;
    f.get("sstable_bytes")
        .or_else(|| f.get("key_tree_sstable_bytes"))
        .copied()
        .expect("the index reports its table bytes")
}

fn round(db: &Db, r: u32, value: &[u8]) {
    for i in 0..KEYS {
        db.put(format!("r{r:03}-k{i:05}"), value).unwrap();
    }
    for i in 0..KEYS {
        db.delete(format!("r{r:03}-k{i:05}")).unwrap();
    }
    // One table a round, as a memtable larger than a round would give.
    db.flush().unwrap();
    for _ in 0..4 {
        db.gc(None).unwrap();
    }
    db.wait_idle().unwrap();
}

/// Thirty rounds of 1,000 keys of 300 bytes written and deleted, flushed,
/// GC four times a round, the database reopened after round 20: the index's tables
/// and the whole database peak within 10 % (plus one round's tables) of
/// their peak around round 10. Before the tombstone-density trigger
/// every round's flush left a table of puts and tombstones no compaction
/// reached, and the tables grew by one a round.
fn churn_stays_flat(preset: Preset) {
    let fs = Arc::new(MemFs::new());
    let value = vec![b'v'; 300];
    let mut db = Db::open("/db", opts(&fs, preset)).unwrap();
    let (mut tables_10, mut tables_30, mut disk_10, mut disk_30) = (0, 0, 0, 0);
    let mut one_round = 0;
    for r in 0..ROUNDS {
        if r == 20 {
            db.close().unwrap();
            db = Db::open("/db", opts(&fs, preset)).unwrap();
        }
        let before = table_bytes(&db);
        round(&db, r, &value);
        let st = db.stats().unwrap();
        let t = table_bytes(&db);
        one_round = one_round.max(t.saturating_sub(before));
        if (5..15).contains(&r) {
            tables_10 = tables_10.max(t);
            disk_10 = disk_10.max(st.disk_bytes);
        } else if r >= 20 {
            tables_30 = tables_30.max(t);
            disk_30 = disk_30.max(st.disk_bytes);
        }
    }
    let name = format!("{preset:?}");
    assert!(
        tables_30 <= tables_10 + tables_10 / 10 + one_round,
        "{name}: the index's tables grew from {tables_10} bytes (rounds 5-15) to {tables_30} (rounds 20-30); one round adds {one_round}"
    );
    // Level 0 gathers up to its trigger's count of tables before they go
    // down and out (a reopen flushes one more): the rounds' peaks differ
    // by up to one round's tables.
    assert!(
        disk_30 <= disk_10 + disk_10 / 10 + one_round,
        "{name}: the database grew from {disk_10} bytes (rounds 5-15) to {disk_30} (rounds 20-30); one round's tables are {one_round}"
    );
    let st = db.stats().unwrap();
    assert!(
        st.index_figures["garbage_compactions"] > 0,
        "{name}: no table was rewritten for its tombstones"
    );
    for r in [0, ROUNDS / 2, ROUNDS - 1] {
        for i in (0..KEYS).step_by(97) {
            assert_eq!(db.get(format!("r{r:03}-k{i:05}")).unwrap(), None);
        }
    }
    db.put("after", &value).unwrap();
    assert_eq!(db.get("after").unwrap().as_deref(), Some(&value[..]));
}

#[test]
fn churn_leaves_no_tables_flashkey() {
    churn_stays_flat(Preset::FlashKey);
}

#[test]
fn churn_leaves_no_tables_wisckey() {
    churn_stays_flat(Preset::WiscKey);
}

#[test]
fn churn_leaves_no_tables_hashkv() {
    churn_stays_flat(Preset::HashKv);
}

/// A snapshot taken before the deletes keeps every key's value readable
/// through the churn: the trigger leaves tables holding entries newer than
/// the snapshot alone. Once the snapshot is released the tables go.
fn snapshot_keeps_what_it_reads(preset: Preset) {
    let fs = Arc::new(MemFs::new());
    let value = vec![b's'; 300];
    let db = Db::open("/db", opts(&fs, preset)).unwrap();
    for i in 0..KEYS {
        db.put(format!("s-k{i:05}"), &value).unwrap();
    }
    let snap = db.snapshot().unwrap();
    for i in 0..KEYS {
        db.delete(format!("s-k{i:05}")).unwrap();
    }
    for r in 0..10 {
        round(&db, r, &value);
    }
    db.flush().unwrap();
    db.wait_idle().unwrap();
    let name = format!("{preset:?}");
    let ro = ReadOptions {
        snapshot: Some(&snap),
        ..Default::default()
    };
    for i in (0..KEYS).step_by(7) {
        let k = format!("s-k{i:05}");
        assert_eq!(
            db.get_opt(&ro, &k).unwrap().as_deref(),
            Some(&value[..]),
            "{name}: {k} at the snapshot"
        );
        assert_eq!(db.get(&k).unwrap(), None, "{name}: {k}");
    }
    let held = table_bytes(&db);
    assert!(held > 0, "{name}: the snapshot's keys are in no table");
    drop(snap);
    // The background thread looks again within half a second; wait for
    // it to find the tables the snapshot held.
    let start = std::time::Instant::now();
    while table_bytes(&db) * 2 > held && start.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(50));
        db.wait_idle().unwrap();
    }
    let after = table_bytes(&db);
    assert!(
        after * 2 <= held,
        "{name}: {held} bytes of tables before the snapshot went, {after} after"
    );
    for i in (0..KEYS).step_by(7) {
        assert_eq!(db.get(format!("s-k{i:05}")).unwrap(), None);
    }
}

#[test]
fn snapshot_keeps_what_it_reads_flashkey() {
    snapshot_keeps_what_it_reads(Preset::FlashKey);
}

#[test]
fn snapshot_keeps_what_it_reads_wisckey() {
    snapshot_keeps_what_it_reads(Preset::WiscKey);
}
