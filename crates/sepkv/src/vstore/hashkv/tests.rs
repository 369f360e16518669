//! Tests of the store's core: the write cache, journal switches and
//! checkpoints.

use super::*;
use crate::fs::FaultFs;

/// 8 MiB of 256 KiB main and 64 KiB log segments; every value
/// separated.
fn small() -> Options {
    Options {
        value_threshold: 1,
        value_capacity: Some(8 << 20),
        hashkv_main_segment_size: 256 << 10,
        hashkv_log_segment_size: 64 << 10,
        ..Options::default()
    }
}

/// A store whose journal carries values, behind its write cache.
fn open(fs: &Arc<FaultFs>) -> HashKvStore {
    open_with(
        fs,
        &Options {
            hashkv_journal: true,
            hashkv_journal_values: true,
            hashkv_write_cache_size: 64 << 10,
            hashkv_journal_size: 64 << 10,
            ..small()
        },
    )
}

fn open_with(fs: &Arc<FaultFs>, o: &Options) -> HashKvStore {
    let fs: Arc<dyn FileSystem> = fs.clone();
    HashKvStore::open(
        Path::new("/db"),
        fs,
        Arc::new(IoStats::default()),
        HashKvOptions::from_options(o),
        None,
    )
    .unwrap()
}

type Put = (Vec<u8>, ValuePointer, Vec<u8>);

/// Appends a 1000-byte value under key `i`.
fn put(s: &HashKvStore, i: u64) -> Put {
    let (k, v) = (
        format!("key{i:06}").into_bytes(),
        format!("{i:>1000}").into_bytes(),
    );
    let p = s
        .append(&[ValueRecord {
            key: &k,
            seq: i + 1,
            value: &v,
        }])
        .unwrap()[0];
    (k, p, v)
}

/// Every value reads back (key named on failure).
fn check(s: &HashKvStore, puts: &[Put]) {
    for (k, p, v) in puts {
        let got = s.read(k, p).unwrap();
        assert!(got.as_ref() == Some(v), "{}", String::from_utf8_lossy(k));
    }
}

fn fresh() -> Arc<FaultFs> {
    let fs = Arc::new(FaultFs::new());
    fs.create_dir_all(Path::new("/db")).unwrap();
    fs
}

/// A fresh store whose worker is held.
fn held(fs: &Arc<FaultFs>) -> HashKvStore {
    let s = open(fs);
    s.work.lock().paused = true;
    s
}

/// Appends values from key `from` on until `done` holds.
fn put_until(s: &HashKvStore, from: u64, done: impl Fn(&HashKvStore) -> bool) -> Vec<Put> {
    let mut puts = Vec::new();
    while !done(s) {
        puts.push(put(s, from + puts.len() as u64));
    }
    puts
}

fn resume(s: &HashKvStore) {
    s.work.lock().paused = false;
    s.work_cv.notify_all();
}

/// With the worker held, a full cache is sealed but not written: its
/// records are read from memory, the segment files do not have them
/// yet, and once the worker runs they are in the files.
#[test]
fn sealed_batches_are_read_before_they_reach_their_files() {
    let fs = fresh();
    let s = held(&fs);
    let puts = put_until(&s, 0, |s| s.flushing_bytes() > 0);
    let missing = |s: &HashKvStore| {
        puts.iter()
            .filter(|(_, p, _)| s.files.file_len(p.file_id).unwrap() < p.end())
            .count()
    };
    assert!(missing(&s) > 0, "nothing sealed is missing from the files");
    check(&s, &puts);
    let reqs: Vec<_> = puts.iter().map(|(k, p, _)| (k.clone(), *p)).collect();
    let want: Vec<_> = puts.iter().map(|(_, _, v)| Some(v.clone())).collect();
    assert!(s.read_many(&reqs).unwrap() == want);
    resume(&s);
    s.wait_idle().unwrap();
    assert_eq!(s.flushing_bytes(), 0);
    assert_eq!(missing(&s), 0);
    check(&s, &puts);
}

/// A full journal is switched while the worker is held, so the
/// checkpoint that would put its records in synced segments has not
/// run; a `sync` then must make the retired journal durable too: after
/// a power cut, open replays it and the new one, and every value
/// appended before the sync reads back.
#[test]
fn sync_covers_the_journal_a_checkpoint_in_flight_retires() {
    let fs = fresh();
    let s = held(&fs);
    let mut puts = put_until(&s, 0, |s| s.state.lock().checkpointing);
    assert!(s.retiring.lock().is_some());
    for _ in 0..5 {
        puts.push(put(&s, puts.len() as u64));
    }
    s.sync().unwrap();
    fs.crash();
    drop(s);
    let s = open(&fs);
    check(&s, &puts);
    assert!(s.verify().1.is_empty());
}

/// With the worker held mid-checkpoint, an append that takes the new
/// journal past twice its limit waits until the checkpoint ends: the
/// journal never grows without bound behind a slow worker.
#[test]
fn appends_wait_for_a_checkpoint_once_the_journal_doubles() {
    let fs = fresh();
    let s = Arc::new(held(&fs));
    let n = put_until(&s, 0, |s| s.state.lock().checkpointing).len() as u64;
    let (limit, num) = {
        let st = s.state.lock();
        (st.journal_limit, st.journal_num)
    };
    let writer = {
        let s = s.clone();
        std::thread::spawn(move || {
            (0..2 * limit / 1000 + 16)
                .map(|i| put(&s, n + i))
                .collect::<Vec<_>>()
        })
    };
    // The writer stops at twice the limit and stays there.
    while s.state.lock().journal_len < 2 * limit {
        std::thread::yield_now();
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(s.state.lock().checkpointing);
    assert!(s.state.lock().journal_len < 2 * limit + 2048);
    resume(&s);
    let puts = writer.join().unwrap();
    s.wait_idle().unwrap();
    // Past the checkpoint the journal was switched again.
    assert!(s.state.lock().journal_num > num);
    check(&s, &puts);
}

/// The worker finishes a checkpoint: the table names the new journal,
/// the old one is gone and a spare waits for the next switch, which
/// takes it.
#[test]
fn a_finished_checkpoint_leaves_a_spare_for_the_next_switch() {
    let fs = fresh();
    let s = open(&fs);
    let first = s.state.lock().journal_num;
    let mut n = 0;
    while s.state.lock().journal_num == first {
        put(&s, n);
        n += 1;
    }
    s.wait_idle().unwrap();
    let st = s.state.lock();
    assert_eq!(st.journal_num, first + 1);
    assert_eq!(st.table.journal_pos, (first + 1, 0));
    drop(st);
    assert!(!fs.exists(&journal_path(Path::new("/db"), first)));
    assert_eq!(s.spare.lock().as_ref().map(|(n, _)| *n), Some(first + 2));
    while s.state.lock().journal_num == first + 1 {
        put(&s, n);
        n += 1;
    }
    assert!(s.spare.lock().is_none(), "the switch took the spare");
    s.wait_idle().unwrap();
    assert_eq!(s.counters.checkpoints.load(Ordering::Relaxed), 2);
    assert_eq!(s.spare.lock().as_ref().map(|(n, _)| *n), Some(first + 3));
}

type Hook = Box<dyn FnOnce(&MapIndex) + Send>;

/// The index as a map, for GC's judged relocations: what the engine's
/// facade does, without an LSM-tree. `relocate_judged` installs unless
/// the key was written after the judgement, as the engine does when
/// its memtables answer; `relocate` is a compare-and-set.
struct MapIndex {
    map: parking_lot::Mutex<HashMap<Vec<u8>, (ValuePointer, SeqNum)>>,
    last: AtomicU64,
    /// Runs once inside `wait_in_flight_writes`: a write that lands
    /// after GC sealed its groups and is published before it judges.
    hook: parking_lot::Mutex<Option<Hook>>,
}

impl MapIndex {
    fn new() -> MapIndex {
        MapIndex {
            map: parking_lot::Mutex::new(HashMap::new()),
            last: AtomicU64::new(0),
            hook: parking_lot::Mutex::new(None),
        }
    }

    fn write(&self, key: &[u8], p: ValuePointer) {
        let seq = self.last.fetch_add(1, Ordering::SeqCst) + 1;
        self.map.lock().insert(key.to_vec(), (p, seq));
    }

    /// Appends `key` = `value` to `s` at the next sequence number and
    /// points the index at it.
    fn put(&self, s: &HashKvStore, key: &[u8], value: &[u8]) {
        let seq = self.last_sequence() + 1;
        let p = s.append(&[ValueRecord { key, seq, value }]).unwrap()[0];
        self.write(key, p);
    }
}

impl IndexReader for MapIndex {
    fn current_pointer(&self, key: &[u8]) -> Result<Option<ValuePointer>> {
        Ok(self.map.lock().get(key).map(|e| e.0))
    }
    fn oldest_visible_seq(&self) -> SeqNum {
        self.last_sequence()
    }
    fn last_sequence(&self) -> SeqNum {
        self.last.load(Ordering::SeqCst)
    }
    fn wait_in_flight_writes(&self) -> Result<()> {
        if let Some(f) = self.hook.lock().take() {
            f(self);
        }
        Ok(())
    }
}

impl IndexRelocator for MapIndex {
    fn relocate(&self, moves: &[crate::vstore::Relocation]) -> Result<(Vec<bool>, SeqNum)> {
        let ok = moves
            .iter()
            .map(|m| {
                let cur = self.map.lock().get(&m.key).map(|e| e.0);
                cur == Some(m.old) && {
                    self.write(&m.key, m.new);
                    true
                }
            })
            .collect();
        Ok((ok, self.last_sequence()))
    }
    fn relocate_judged(
        &self,
        moves: &[crate::vstore::Relocation],
        judged_at: SeqNum,
    ) -> Result<(Vec<bool>, SeqNum)> {
        let ok = moves
            .iter()
            .map(|m| {
                let written_after = self.map.lock().get(&m.key).is_some_and(|e| e.1 > judged_at);
                !written_after && {
                    self.write(&m.key, m.new);
                    true
                }
            })
            .collect();
        Ok((ok, self.last_sequence()))
    }
    fn persist_state(&self, _state: &[u8]) -> Result<()> {
        Ok(())
    }
    fn make_durable(&self, _seq: SeqNum) -> Result<()> {
        Ok(())
    }
}

/// A write that reaches a group after GC sealed it, and is published
/// before GC judges the sealed records, is in neither the sealed
/// segments nor the writes after the judgement: GC must still see it
/// (the records placed since the seal) and not put the sealed version
/// back in its place.
#[test]
fn a_write_between_the_seal_and_the_judgement_is_not_overwritten() {
    let s = Arc::new(open_with(
        &fresh(),
        &Options {
            hashkv_hotness: false,
            ..small()
        },
    ));
    s.recovered();
    let idx = Arc::new(MapIndex::new());
    let val = |i: u64, round: u64| format!("{i}-{round:>1000}").into_bytes();
    let put = |i: u64, round: u64| idx.put(&s, format!("key{i:06}").as_bytes(), &val(i, round));
    // Two versions of every key of one group (the one GC picks: the
    // others hold a single version each).
    let g = s.group_of(b"key000000");
    let ours: Vec<u64> = (0..2000)
        .filter(|&i| s.group_of(format!("key{i:06}").as_bytes()) == g)
        .take(40)
        .collect();
    for i in 0..200 {
        put(i, 0);
    }
    for &i in &ours {
        put(i, 1);
    }
    let s2 = s.clone();
    *idx.hook.lock() = Some(Box::new(move |ix: &MapIndex| {
        let k = b"key000000";
        let v = format!("{}-{:>1000}", 0, 7).into_bytes();
        let seq = ix.last_sequence() + 1;
        let p = s2
            .append(&[ValueRecord {
                key: k,
                seq,
                value: &v,
            }])
            .unwrap()[0];
        ix.write(k, p);
    }));
    let out = s.gc_step(idx.as_ref(), idx.as_ref()).unwrap();
    assert!(out.did_work && idx.hook.lock().is_none());
    assert!(s.counters.gc_judged.load(Ordering::Relaxed) > 0);
    for &i in &ours {
        let k = format!("key{i:06}").into_bytes();
        let p = idx.current_pointer(&k).unwrap().unwrap();
        let want = if i == 0 { val(0, 7) } else { val(i, 1) };
        let got = s.read(&k, &p).unwrap();
        assert!(got == Some(want), "key {i} lost its latest version");
    }
}

/// A GC step stops taking groups once their bytes reach
/// `gc_step_bytes`: with a budget smaller than any group it collects
/// exactly one, the most written, however many are due; with a budget of
/// a few groups, more than one and fewer than the quarter of the groups
/// a step may take.
#[test]
fn a_gc_step_collects_groups_up_to_its_byte_budget() {
    for budget in [16u64 << 10, 400 << 10] {
        let s = HashKvStore::open(
            Path::new("/db"),
            {
                let fs = fresh();
                let fs: Arc<dyn FileSystem> = fs;
                fs
            },
            Arc::new(IoStats::default()),
            HashKvOptions {
                gc_step_bytes: budget,
                ..HashKvOptions::from_options(&Options {
                    hashkv_hotness: false,
                    ..small()
                })
            },
            None,
        )
        .unwrap();
        s.recovered();
        let idx = MapIndex::new();
        // Two versions of 1,500 keys: every group holds garbage.
        for round in 0..2u64 {
            for i in 0..1500u64 {
                let v = format!("{round}-{i:>1000}");
                idx.put(&s, format!("key{i:06}").as_bytes(), v.as_bytes());
            }
        }
        let groups = s.state.lock().table.geo.groups as u64;
        let before = s.counters.gc_groups.load(Ordering::Relaxed);
        let out = s.gc_step(&idx, &idx).unwrap();
        let taken = s.counters.gc_groups.load(Ordering::Relaxed) - before;
        assert!(out.did_work && taken >= 1, "the step collected nothing");
        // Each group holds about 3,000 × 1 KB / groups of records: a step
        // reads at most its budget plus the one group that crossed it.
        let per_group = 3000 * 1030 / groups;
        assert!(
            out.bytes_read < budget + 2 * per_group,
            "budget {budget}: read {} bytes in {taken} of {groups} groups",
            out.bytes_read
        );
        if budget < per_group / 2 {
            assert_eq!(taken, 1, "budget {budget} below a group");
        } else {
            assert!(
                taken > 1 && taken < groups / 4,
                "budget {budget}: {taken} group(s) of {groups}, read {}",
                out.bytes_read
            );
        }
        // Every key still reads its latest version.
        for i in 0..1500u64 {
            let k = format!("key{i:06}").into_bytes();
            let p = idx.current_pointer(&k).unwrap().unwrap();
            let want = format!("1-{i:>1000}").into_bytes();
            assert!(s.read(&k, &p).unwrap() == Some(want), "key {i}");
        }
    }
}
