use super::*;
use crate::fs::{FaultFs, FaultKind, FaultOp, FaultRule, MemFs};
use crate::vstore::Relocation;
use std::path::Path;

/// A model index: key → current address, as the hash index keeps it.
#[derive(Default)]
struct Model {
    map: Mutex<HashMap<Vec<u8>, ValuePointer>>,
    last_seq: Mutex<u64>,
    /// Oldest sequence a reader holds (`None`: no reader).
    reader: Mutex<Option<u64>>,
    persisted: Mutex<Option<Vec<u8>>>,
}

impl PrevLookup for Model {
    fn prev(&self, key: &[u8]) -> Option<ValuePointer> {
        self.map.lock().get(key).copied()
    }
}

impl IndexReader for Model {
    fn current_pointer(&self, key: &[u8]) -> Result<Option<ValuePointer>> {
        Ok(self.map.lock().get(key).copied())
    }
    fn oldest_visible_seq(&self) -> u64 {
        self.reader.lock().unwrap_or(*self.last_seq.lock())
    }
    fn last_sequence(&self) -> u64 {
        *self.last_seq.lock()
    }
    fn wait_in_flight_writes(&self) -> Result<()> {
        Ok(())
    }
}

impl IndexRelocator for Model {
    fn relocate(&self, moves: &[Relocation]) -> Result<(Vec<bool>, u64)> {
        let mut map = self.map.lock();
        let ok = moves
            .iter()
            .map(|m| {
                let cur = map.get(&m.key) == Some(&m.old);
                if cur {
                    if m.new.file_id == 0 {
                        map.remove(&m.key);
                    } else {
                        map.insert(m.key.clone(), m.new);
                    }
                }
                cur
            })
            .collect();
        let mut s = self.last_seq.lock();
        *s += 1;
        Ok((ok, *s))
    }
    fn persist_state(&self, state: &[u8]) -> Result<()> {
        *self.persisted.lock() = Some(state.to_vec());
        Ok(())
    }
    fn make_durable(&self, _seq: u64) -> Result<()> {
        Ok(())
    }
}

fn opts(entries: u32) -> BandOptions {
    BandOptions {
        band_entries: entries,
        ..Default::default()
    }
}

fn open(fs: &Arc<dyn FileSystem>, o: BandOptions, state: Option<&[u8]>) -> BandStore {
    let dir = Path::new("/db");
    fs.create_dir_all(dir).unwrap();
    BandStore::open(dir, fs.clone(), Arc::new(IoStats::default()), o, state).unwrap()
}

/// Writes one batch through `bs` and applies it to `m` as the engine would.
fn write(bs: &BandStore, m: &Model, ops: &[(&[u8], Option<&[u8]>)]) -> Vec<ValuePointer> {
    let seq0 = *m.last_seq.lock() + 1;
    let entries: Vec<LogEntry<'_>> = ops
        .iter()
        .enumerate()
        .map(|(i, (k, v))| LogEntry {
            vtype: if v.is_some() {
                ValueType::Value
            } else {
                ValueType::Deletion
            },
            separate: true,
            key: k,
            seq: seq0 + i as u64,
            value: v.unwrap_or(b""),
        })
        .collect();
    let prevs: Vec<Option<ValuePointer>> = ops.iter().map(|(k, _)| m.prev(k)).collect();
    let ptrs = bs.log_linked(&entries, Some(&prevs)).unwrap();
    let mut map = m.map.lock();
    for ((k, _), p) in ops.iter().zip(&ptrs) {
        map.insert(k.to_vec(), *p);
    }
    *m.last_seq.lock() += ops.len() as u64;
    ptrs
}

type Replayed = Vec<(u64, ValueType, Vec<u8>, Vec<u8>)>;

fn replay_all(bs: &BandStore) -> Result<Replayed> {
    let mut out = Vec::new();
    bs.replay(&mut |s, t, k, v| {
        out.push((s, t, k.to_vec(), v.to_vec()));
        Ok(())
    })?;
    Ok(out)
}

#[test]
fn writes_read_back_with_previous_versions_and_tombstones() {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    let bs = open(&fs, opts(1000), None);
    let m = Model::default();
    let p1 = write(&bs, &m, &[(b"k", Some(b"one")), (b"j", Some(b"x"))]);
    let p2 = write(&bs, &m, &[(b"k", Some(b"two"))]);
    let p3 = write(&bs, &m, &[(b"k", None)]);
    assert_eq!(bs.read(b"k", &p1[0]).unwrap().as_deref(), Some(&b"one"[..]));
    assert_eq!(bs.read(b"k", &p2[0]).unwrap().as_deref(), Some(&b"two"[..]));
    let e = bs.read_entry(&p3[0]).unwrap().unwrap();
    assert_eq!((e.kind, e.seq, e.prev), (Kind::Tombstone, 4, Some(p2[0])));
    assert_eq!(bs.read_entry(&p2[0]).unwrap().unwrap().prev, Some(p1[0]));
    assert_eq!(p3[0].aux, AUX_TOMBSTONE);
    // A pointer read with the wrong key, or at a tombstone, is corruption.
    assert!(bs.read(b"j", &p1[0]).unwrap_err().is_corruption());
    assert!(bs.read(b"k", &p3[0]).unwrap_err().is_corruption());
    // Invalidity: both versions of k and the tombstone itself, no more.
    let inv: u64 = bs.invalidity().iter().map(|x| x.1).sum();
    assert_eq!(
        inv,
        (p1[0].length + p2[0].length + p3[0].length) as u64,
        "{:?}",
        bs.invalidity()
    );
    // Two entries of one key in one batch: the second links to the first.
    let p = write(&bs, &m, &[(b"z", Some(b"a")), (b"z", Some(b"b"))]);
    assert_eq!(bs.read_entry(&p[1]).unwrap().unwrap().prev, Some(p[0]));
    // Outside the bands: absent, not an error.
    let beyond = ValuePointer {
        offset: 1 << 30,
        ..p[1]
    };
    assert_eq!(bs.read(b"z", &beyond).unwrap(), None);
    assert!(!bs.contains(&beyond));
}

#[test]
fn bands_close_at_band_entries_and_recovery_replays_them_in_order() {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    let m = Model::default();
    {
        let bs = open(&fs, opts(4), None);
        for i in 0..10u32 {
            let k = format!("key{i}");
            write(&bs, &m, &[(k.as_bytes(), Some(&[i as u8; 40]))]);
        }
        assert_eq!(bs.band_counts(), (1, 2, 0));
        bs.sync().unwrap();
    }
    let bs = open(&fs, opts(4), None);
    let got = replay_all(&bs).unwrap();
    assert_eq!(got.len(), 10);
    for (i, (seq, t, k, v)) in got.iter().enumerate() {
        assert_eq!((*seq, *t), (i as u64 + 1, ValueType::Pointer));
        assert_eq!(k, format!("key{i}").as_bytes());
        let p = ValuePointer::decode(v).unwrap();
        assert_eq!(bs.read(k, &p).unwrap().unwrap(), vec![i as u8; 40]);
    }
    // The intact open band is reused; the next band number follows.
    write(&bs, &m, &[(b"more", Some(b"v"))]);
    assert_eq!(bs.band_counts(), (1, 2, 0));
    assert_eq!(bs.verify().1.len(), 0);
    assert_eq!(bs.verify().0, 11);
}

#[test]
fn a_crash_keeps_whole_batches_only() {
    let ffs = Arc::new(FaultFs::new());
    let fs: Arc<dyn FileSystem> = ffs.clone();
    let m = Model::default();
    let bs = open(&fs, opts(1000), None);
    write(&bs, &m, &[(b"a", Some(b"1")), (b"b", Some(b"2"))]);
    bs.sync().unwrap();
    let last = write(&bs, &m, &[(b"c", Some(b"3")), (b"d", Some(b"4"))]);
    let path = band_path(Path::new("/db"), last[0].file_id);
    // The process dies while the second batch is half written.
    ffs.truncate(&path, last[1].offset + 5).unwrap();
    drop(bs);
    let bs = open(&fs, opts(1000), None);
    let got = replay_all(&bs).unwrap();
    let keys: Vec<&[u8]> = got.iter().map(|x| &x.2[..]).collect();
    assert_eq!(
        keys,
        vec![&b"a"[..], b"b"],
        "a batch is applied all or nothing"
    );
    // Appends continue after the valid end, in a new band.
    let p = write(&bs, &m, &[(b"e", Some(b"5"))]);
    assert_ne!(p[0].file_id, last[0].file_id);
    assert_eq!(bs.read(b"e", &p[0]).unwrap().as_deref(), Some(&b"5"[..]));
    assert_eq!(bs.read(b"c", &last[0]).unwrap(), None, "lost in the crash");
}

#[test]
fn damage_is_corruption_with_file_and_offset() {
    let ffs = Arc::new(FaultFs::new());
    let fs: Arc<dyn FileSystem> = ffs.clone();
    let m = Model::default();
    let bs = open(&fs, opts(3), None);
    let mut ptrs = Vec::new();
    for i in 0..7u8 {
        ptrs.extend(write(&bs, &m, &[(&[b'k', i], Some(&[i; 30]))]));
    }
    bs.sync().unwrap();
    let victim = ptrs[1];
    let path = band_path(Path::new("/db"), victim.file_id);
    ffs.corrupt(&path, victim.offset + 30, 0x40).unwrap();
    drop(bs);
    let bs = open(&fs, opts(3), None);
    match bs.read(&[b'k', 1], &victim) {
        Err(Error::Corruption { file, offset, .. }) => {
            assert_eq!((file, offset), (path.clone(), victim.offset));
        }
        other => panic!("{other:?}"),
    }
    match replay_all(&bs) {
        Err(Error::Corruption { file, offset, .. }) => {
            assert_eq!((file, offset), (path.clone(), victim.offset));
        }
        other => panic!("{other:?}"),
    }
    let (_, faults) = bs.verify();
    assert_eq!(faults.len(), 1, "{faults:?}");
    // A damaged band header is corruption at offset 0.
    ffs.corrupt(&path, 3, 0x01).unwrap();
    drop(bs);
    let dir = Path::new("/db");
    match BandStore::open(dir, fs.clone(), Arc::new(IoStats::default()), opts(3), None) {
        Err(Error::Corruption { file, offset, .. }) => assert_eq!((file, offset), (path, 0)),
        Err(e) => panic!("{e:?}"),
        Ok(_) => panic!("opened a band with a damaged header"),
    }
}

/// Writes 3 bands' worth of keys, overwrites the first band's keys, and
/// moves the checkpoint to the end.
fn fill_and_overwrite(bs: &BandStore, m: &Model) {
    for i in 0..12u8 {
        write(bs, m, &[(&[b'k', i], Some(&[i; 50]))]);
    }
    for i in 0..3u8 {
        write(bs, m, &[(&[b'k', i], Some(&[i + 100; 50]))]);
    }
    let pos = bs.log_position().unwrap();
    bs.checkpoint_committed(pos);
}

fn check_model(bs: &BandStore, m: &Model) {
    for (k, p) in m.map.lock().iter() {
        let e = bs.read_entry(p).unwrap().expect("reachable");
        assert_eq!(&e.key, k);
    }
}

#[test]
fn gc_collects_the_band_with_most_invalid_bytes() {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    let m = Model::default();
    let bs = open(&fs, opts(4), None);
    fill_and_overwrite(&bs, &m);
    let before = bs.invalidity();
    let most = before.iter().max_by_key(|x| x.1).unwrap().0;
    assert_eq!(most, 1, "{before:?}");
    let out = bs.gc_step(&m, &m).unwrap();
    assert!(out.did_work && out.bytes_freed > 0, "{out:?}");
    // k3 is band 1's one valid record.
    assert_eq!(out.bytes_rewritten, 94, "{out:?}");
    assert!(!fs.exists(&band_path(Path::new("/db"), 1)));
    check_model(&bs, &m);
    for i in 0..12u8 {
        let p = m.map.lock()[&vec![b'k', i]];
        let want = if i < 3 { i + 100 } else { i };
        assert_eq!(bs.read(&[b'k', i], &p).unwrap().unwrap(), vec![want; 50]);
    }
    // The collection survives a reopen with the persisted state.
    let state = m.persisted.lock().clone().unwrap();
    drop(bs);
    let bs = open(&fs, opts(4), Some(&state));
    check_model(&bs, &m);
    assert!(!bs.invalidity().iter().any(|x| x.0 == 1));
}

#[test]
fn gc_moves_valid_records_keeping_seq_and_previous_version() {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    let m = Model::default();
    let bs = open(&fs, opts(4), None);
    let first = write(&bs, &m, &[(b"keep", Some(b"v1"))]);
    let second = write(&bs, &m, &[(b"keep", Some(b"v2"))]);
    for i in 0..2u8 {
        write(&bs, &m, &[(&[b'x', i], Some(b"dead"))]);
    }
    // Band 1 = keep@1, keep@2, x0, x1; overwrite x0 and x1 elsewhere.
    for i in 0..2u8 {
        write(&bs, &m, &[(&[b'x', i], Some(b"new"))]);
    }
    let pos = bs.log_position().unwrap();
    bs.checkpoint_committed(pos);
    let out = bs.gc_step(&m, &m).unwrap();
    assert!(out.did_work && out.bytes_rewritten > 0, "{out:?}");
    let now = m.map.lock()[&b"keep".to_vec()];
    assert_ne!(now, second[0]);
    let e = bs.read_entry(&now).unwrap().unwrap();
    assert_eq!((e.kind, e.seq, e.prev), (Kind::GcCopy, 2, Some(first[0])));
    assert_eq!(bs.read(b"keep", &now).unwrap().as_deref(), Some(&b"v2"[..]));
    // The first version went with band 1: a walk back ends there.
    assert_eq!(bs.read_entry(&first[0]).unwrap(), None);
    assert!(
        bs.contains(&first[0]),
        "collected space counts as contained"
    );
}

#[test]
fn gc_waits_for_snapshots_that_can_reach_invalidated_versions() {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    let m = Model::default();
    let bs = open(&fs, opts(4), None);
    for i in 0..4u8 {
        write(&bs, &m, &[(&[b'k', i], Some(b"old"))]);
    }
    // A snapshot at seq 4 can still read every version in band 1.
    *m.reader.lock() = Some(4);
    let old = m.map.lock()[&b"k\x00".to_vec()];
    for i in 0..4u8 {
        write(&bs, &m, &[(&[b'k', i], Some(b"new"))]);
    }
    write(&bs, &m, &[(b"pad", Some(b"p"))]);
    let pos = bs.log_position().unwrap();
    bs.checkpoint_committed(pos);
    let out = bs.gc_step(&m, &m).unwrap();
    assert!(!out.did_work, "collected under a snapshot: {out:?}");
    assert_eq!(
        bs.read(b"k\x00", &old).unwrap().as_deref(),
        Some(&b"old"[..])
    );
    // The snapshot goes: the band is collected.
    *m.reader.lock() = None;
    let out = bs.gc_step(&m, &m).unwrap();
    assert!(out.did_work && out.bytes_freed > 0, "{out:?}");
    assert_eq!(bs.read(b"k\x00", &old).unwrap(), None);
}

#[test]
fn gc_keeps_retired_bands_while_older_readers_live() {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    let m = Model::default();
    let bs = open(&fs, opts(4), None);
    write(&bs, &m, &[(b"live", Some(b"L"))]);
    for i in 0..3u8 {
        write(&bs, &m, &[(&[b'k', i], Some(b"old"))]);
    }
    for i in 0..3u8 {
        write(&bs, &m, &[(&[b'k', i], Some(b"new"))]);
    }
    write(&bs, &m, &[(b"pad", Some(b"p"))]);
    let pos = bs.log_position().unwrap();
    bs.checkpoint_committed(pos);
    let live_old = m.map.lock()[&b"live".to_vec()];
    // A reader older than the relocation the step is about to make.
    let seq = *m.last_seq.lock();
    *m.reader.lock() = Some(seq);
    let out = bs.gc_step(&m, &m).unwrap();
    assert!(out.did_work && out.bytes_rewritten > 0, "{out:?}");
    assert_eq!(out.bytes_freed, 0);
    assert!(bs.pinned_bytes() > 0);
    assert_eq!(
        bs.read(b"live", &live_old).unwrap().as_deref(),
        Some(&b"L"[..])
    );
    *m.reader.lock() = None;
    let out = bs.gc_step(&m, &m).unwrap();
    assert!(out.bytes_freed > 0, "{out:?}");
    assert_eq!(bs.pinned_bytes(), 0);
    let now = m.map.lock()[&b"live".to_vec()];
    assert_eq!(bs.read(b"live", &now).unwrap().as_deref(), Some(&b"L"[..]));
}

#[test]
fn gc_drops_delete_tokens_and_their_nodes() {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    let m = Model::default();
    let bs = open(&fs, opts(4), None);
    write(&bs, &m, &[(b"a", Some(b"1"))]);
    write(&bs, &m, &[(b"a", None)]);
    write(&bs, &m, &[(b"b", Some(b"2"))]);
    write(&bs, &m, &[(b"b", Some(b"3"))]);
    write(&bs, &m, &[(b"pad", Some(b"p"))]);
    let pos = bs.log_position().unwrap();
    bs.checkpoint_committed(pos);
    assert!(m.map.lock().contains_key(&b"a".to_vec()));
    let out = bs.gc_step(&m, &m).unwrap();
    assert!(out.did_work, "{out:?}");
    assert!(
        !m.map.lock().contains_key(&b"a".to_vec()),
        "token's node removed"
    );
    let b = m.map.lock()[&b"b".to_vec()];
    assert_eq!(bs.read(b"b", &b).unwrap().as_deref(), Some(&b"3"[..]));
    assert!(bs.figures().contains(&("gc_tombstones_dropped", 1)));
}

#[test]
fn gc_never_collects_bands_after_the_checkpoint() {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    let m = Model::default();
    let bs = open(&fs, opts(4), None);
    fill_and_overwrite(&bs, &m);
    // Reopen without state: the checkpoint is the start of the bands.
    drop(bs);
    let bs = open(&fs, opts(4), None);
    let out = bs.gc_step(&m, &m).unwrap();
    assert!(!out.did_work, "{out:?}");
}

/// The GC-room figures a step adds: the victim's bytes, split into what
/// the invalidity table counted dead and what GC judged live; the bands
/// GC may not take; the garbage it could take; used and live bytes.
#[test]
fn gc_figures_tell_the_victim_and_the_room() {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    let m = Model::default();
    let bs = open(&fs, opts(4), None);
    // Bands 1-3 hold k0..k11 (4 entries of one size each); band 4, the
    // open band, holds the overwrites of k0..k2.
    for i in 0..12u8 {
        write(&bs, &m, &[(&[b'k', i], Some(&[i; 50]))]);
    }
    for i in 0..3u8 {
        write(&bs, &m, &[(&[b'k', i], Some(&[i + 100; 50]))]);
    }
    // Before the checkpoint moves, the garbage is out of GC's reach.
    let out = bs.gc_step(&m, &m).unwrap();
    assert!(!out.did_work && out.held_by_checkpoint, "{out:?}");
    assert!(bs.figures().contains(&("gc_held_steps", 1)));
    assert!(bs.figures().contains(&("gc_victim_bytes", 0)));
    let pos = bs.log_position().unwrap();
    bs.checkpoint_committed(pos);
    let entry = bs.invalidity().iter().find(|x| x.0 == 1).unwrap().1 / 3;
    let out = bs.gc_step(&m, &m).unwrap();
    assert!(out.did_work, "{out:?}");
    let f: std::collections::HashMap<_, _> = bs.figures().into_iter().collect();
    assert_eq!(f["gc_victim_bytes"], 4 * entry, "{f:?}");
    assert_eq!(f["gc_victim_invalid"], 3 * entry, "{f:?}");
    assert_eq!(f["gc_victim_live"], entry, "{f:?}");
    // Held: the open band of user writes (no band of GC copies yet).
    assert_eq!(f["gc_held_bytes"], 3 * entry, "{f:?}");
    assert_eq!(f["gc_held_invalid"], 0, "{f:?}");
    assert_eq!(f["gc_free_invalid"], 3 * entry, "{f:?}");
    assert_eq!(f["gc_live_bytes"], 12 * entry, "{f:?}");
    assert!(f["gc_used_bytes"] > 15 * entry, "{f:?}");
    assert_eq!(f["gc_held_steps"], 1, "{f:?}");
}

#[test]
fn a_user_write_racing_gc_wins() {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    let m = Model::default();
    let bs = open(&fs, opts(2), None);
    write(&bs, &m, &[(b"a", Some(b"1"))]);
    write(&bs, &m, &[(b"b", Some(b"1"))]);
    write(&bs, &m, &[(b"b", Some(b"2"))]);
    write(&bs, &m, &[(b"pad", Some(b"p"))]);
    let pos = bs.log_position().unwrap();
    bs.checkpoint_committed(pos);
    struct Racing<'a>(&'a Model, &'a BandStore);
    impl IndexReader for Racing<'_> {
        fn current_pointer(&self, key: &[u8]) -> Result<Option<ValuePointer>> {
            self.0.current_pointer(key)
        }
        fn oldest_visible_seq(&self) -> u64 {
            self.0.oldest_visible_seq()
        }
        fn last_sequence(&self) -> u64 {
            self.0.last_sequence()
        }
        fn wait_in_flight_writes(&self) -> Result<()> {
            Ok(())
        }
    }
    impl IndexRelocator for Racing<'_> {
        fn relocate(&self, moves: &[Relocation]) -> Result<(Vec<bool>, u64)> {
            // A user overwrites `a` just before the install.
            write(self.1, self.0, &[(b"a", Some(b"user"))]);
            self.0.relocate(moves)
        }
        fn persist_state(&self, s: &[u8]) -> Result<()> {
            self.0.persist_state(s)
        }
        fn make_durable(&self, s: u64) -> Result<()> {
            self.0.make_durable(s)
        }
    }
    let r = Racing(&m, &bs);
    let out = bs.gc_step(&r, &r).unwrap();
    assert!(out.did_work, "{out:?}");
    let a = m.map.lock()[&b"a".to_vec()];
    assert_eq!(bs.read(b"a", &a).unwrap().as_deref(), Some(&b"user"[..]));
}

#[test]
fn capacity_refuses_user_values_but_not_tombstones() {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    let m = Model::default();
    let bs = open(
        &fs,
        BandOptions {
            capacity: Some(2000),
            band_entries: 4,
            ..Default::default()
        },
        None,
    );
    let mut n = 0;
    let err = loop {
        let seq = *m.last_seq.lock() + 1;
        let e = [LogEntry {
            vtype: ValueType::Value,
            separate: true,
            key: b"k",
            seq,
            value: &[7u8; 200],
        }];
        match bs.log_linked(&e, None) {
            Ok(_) => {
                *m.last_seq.lock() = seq;
                n += 1;
            }
            Err(e) => break e,
        }
        assert!(n < 100, "capacity never reached");
    };
    assert!(matches!(err, Error::ValueStoreFull(_)), "{err:?}");
    assert!(n >= 5, "{n}");
    write(&bs, &m, &[(b"k", None)]);
    assert!(bs.empty_bands().is_some());
}

#[test]
fn persisted_state_roundtrips_and_junk_never_panics() {
    let s = PersistedState {
        ckpt: (3, 99),
        retired: vec![1, 2],
        invalid: vec![(3, 500, 17)],
    };
    assert_eq!(PersistedState::decode(&s.encode()), Some(s.clone()));
    let e = s.encode();
    for cut in 0..e.len() {
        assert_eq!(PersistedState::decode(&e[..cut]), None);
    }
    let mut x = 1u64;
    for len in 0..300 {
        let b: Vec<u8> = (0..len)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                (x >> 33) as u8
            })
            .collect();
        let _ = PersistedState::decode(&b);
    }
}

/// An edit of the persisted state (the hash index's edit log) turns the
/// old state into the new one exactly, holds only what changed, and junk
/// never panics.
#[test]
fn persisted_state_edits_apply_and_hold_only_changes() {
    let old = PersistedState {
        ckpt: (40, 7),
        retired: vec![3, 5],
        invalid: (6..400).map(|b| (b, b * 10, b + 1)).collect(),
    };
    let mut new = old.clone();
    new.retired = vec![5, 6];
    new.invalid.retain(|e| e.0 != 6 && e.0 != 9);
    new.invalid[10].1 += 100;
    new.invalid.push((401, 1, 2));
    let edit = new.edit_from(&old);
    assert!(edit.len() < 120, "{} bytes for 4 changes", edit.len());
    assert_eq!(
        PersistedState::apply_edit(&old.encode(), &edit),
        Some(new.encode())
    );
    // From nothing (a new database's meta holds an empty state).
    let edit = new.edit_from(&PersistedState::default());
    assert_eq!(PersistedState::apply_edit(&[], &edit), Some(new.encode()));
    for cut in 0..edit.len() {
        assert_eq!(PersistedState::apply_edit(&[], &edit[..cut]), None);
    }
    let mut x = 1u64;
    for len in 0..300 {
        let b: Vec<u8> = (0..len)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                (x >> 33) as u8
            })
            .collect();
        let _ = PersistedState::apply_edit(&old.encode(), &b);
    }
}

#[test]
fn without_log_mode_append_works_and_gc_needs_no_checkpoint() {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    let m = Model::default();
    let bs = open(
        &fs,
        BandOptions {
            log_mode: false,
            band_entries: 2,
            ..Default::default()
        },
        None,
    );
    assert_eq!(bs.log_position(), None);
    let mut last = None;
    for seq in 1..=5 {
        let p = bs
            .append(&[ValueRecord {
                key: b"k",
                seq,
                value: b"val",
            }])
            .unwrap()[0];
        if let Some(old) = last.replace(p) {
            bs.note_garbage(&old);
        }
        m.map.lock().insert(b"k".to_vec(), p);
        *m.last_seq.lock() = seq;
    }
    let out = bs.gc_step(&m, &m).unwrap();
    assert!(out.did_work && out.bytes_freed > 0, "{out:?}");
    let p = m.map.lock()[&b"k".to_vec()];
    assert_eq!(bs.read(b"k", &p).unwrap().as_deref(), Some(&b"val"[..]));
}

#[test]
fn a_power_loss_loses_unsynced_batches_and_appends_continue() {
    let ffs = Arc::new(FaultFs::new());
    let fs: Arc<dyn FileSystem> = ffs.clone();
    let m = Model::default();
    let bs = open(&fs, opts(3), None);
    // a0..a2 fill band 1; a3 opens band 2, where b and c stay unsynced.
    for i in 0..4u8 {
        write(&bs, &m, &[(&[b'a', i], Some(b"synced"))]);
    }
    bs.sync().unwrap();
    write(&bs, &m, &[(b"b", Some(b"lost"))]);
    drop(bs);
    ffs.crash();
    let bs = open(&fs, opts(3), None);
    let keys: Vec<Vec<u8>> = replay_all(&bs).unwrap().into_iter().map(|x| x.2).collect();
    assert_eq!(keys.len(), 4, "{keys:?}");
    let p = write(&bs, &m, &[(b"d", Some(b"new"))]);
    assert_eq!(bs.read(b"d", &p[0]).unwrap().as_deref(), Some(&b"new"[..]));
    assert_eq!(bs.verify().1.len(), 0);
}

/// A band closes at `band_bytes` as well as at `band_entries`; with
/// `mmap_reads`, records of closed bands read back through a mapping of the
/// band, the open band's with system calls (its handle is replaced once it
/// closes); a damaged record of a mapped band is corruption at its offset.
#[test]
fn bands_close_at_their_size_and_closed_bands_read_through_a_mapping() {
    use crate::fs::StdFs;
    let dir = tempfile::tempdir().unwrap();
    let bs = BandStore::open(
        dir.path(),
        Arc::new(StdFs),
        Arc::new(IoStats::default()),
        BandOptions {
            band_bytes: 8 << 10,
            mmap_reads: true,
            ..Default::default()
        },
        None,
    )
    .unwrap();
    let m = Model::default();
    let keys: Vec<Vec<u8>> = (0..100).map(|i| format!("k{i:03}").into_bytes()).collect();
    let value = |i: usize| vec![i as u8; 500 + i % 3];
    let mut ptrs = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let v = value(i);
        ptrs.push(write(&bs, &m, &[(k, Some(&v))])[0]);
        // The open band's first record, read before the band closes.
        if i == 0 {
            assert_eq!(bs.read(k, &ptrs[0]).unwrap(), Some(v));
            assert!(bs.handle(ptrs[0].file_id).unwrap().mapping().is_none());
        }
    }
    let bands: std::collections::BTreeSet<u64> = ptrs.iter().map(|p| p.file_id).collect();
    // 8 KiB bands of ~530-byte entries: 16 entries each (entries alone
    // would close them at 65,536).
    assert!(bands.len() >= 6, "{bands:?}");
    for &b in &bands {
        let bytes = ptrs
            .iter()
            .filter(|p| p.file_id == b)
            .map(|p| p.length as u64)
            .sum::<u64>();
        assert!(bytes < (8 << 10) + 600, "band {b}: {bytes} bytes");
    }
    for (i, (k, p)) in keys.iter().zip(&ptrs).enumerate() {
        assert_eq!(bs.read(k, p).unwrap(), Some(value(i)), "record {i}");
    }
    let open = *bands.last().unwrap();
    for &b in &bands {
        let mapped = bs.handle(b).unwrap().mapping().is_some();
        assert_eq!(mapped, b != open, "band {b} (open {open})");
    }
    // Damage a record of the first (closed, mapped) band.
    let p = ptrs[3];
    let path = band_path(dir.path(), p.file_id);
    crate::fs::flip_byte_in_file(&path, p.offset + u64::from(p.length) - 2, 0x10);
    match bs.read(&keys[3], &p) {
        Err(Error::Corruption { offset, .. }) => assert_eq!(offset, p.offset),
        other => panic!("expected corruption, got {other:?}"),
    }
}

#[test]
fn a_band_closed_here_is_read_without_an_open() {
    let ffs = Arc::new(FaultFs::new());
    let fs: Arc<dyn FileSystem> = ffs.clone();
    let m = Model::default();
    let bs = open(&fs, opts(2), None);
    let mut ptrs = Vec::new();
    for i in 0..5u8 {
        ptrs.extend(write(&bs, &m, &[(&[b'k', i], Some(&[i; 40]))]));
    }
    // Bands of two entries: the first two have closed, the third is open.
    assert_eq!(bs.band_counts().1, 2);
    for (i, p) in ptrs.iter().enumerate().take(4) {
        let before = ffs.op_count();
        let got = bs.read(&[b'k', i as u8], p).unwrap();
        assert_eq!(got.as_deref(), Some(&[i as u8; 40][..]));
        // The read itself and nothing else: the band's handle was opened
        // when it closed, not by its first get.
        assert_eq!(ffs.op_count() - before, 1, "read of entry {i}");
    }
    // A band of an earlier process is opened by its first read.
    drop(bs);
    let bs = open(&fs, opts(2), None);
    let before = ffs.op_count();
    assert_eq!(
        bs.read(b"k\0", &ptrs[0]).unwrap().as_deref(),
        Some(&[0u8; 40][..])
    );
    assert!(ffs.op_count() - before > 1);
}

/// GC copies go to a band of their own, never to the band of user writes,
/// so that the records GC found live (the cold ones) are not mixed with
/// fresh writes; the two streams take band numbers from one counter, the
/// copies are durable before their relocation, and both survive a power
/// loss and a reopen, after which the numbers keep growing.
#[test]
fn gc_copies_go_to_a_band_of_their_own() {
    let ffs = Arc::new(FaultFs::new());
    let fs: Arc<dyn FileSystem> = ffs.clone();
    let m = Model::default();
    let bs = open(&fs, opts(4), None);
    fill_and_overwrite(&bs, &m);
    let user_open = bs.log_position().unwrap().0;
    let out = bs.gc_step(&m, &m).unwrap();
    assert!(out.bytes_rewritten > 0, "{out:?}");
    let copy = m.map.lock()[&vec![b'k', 3]];
    assert_ne!(copy.file_id, user_open, "a GC copy landed in the user band");
    assert!(copy.file_id > user_open, "{copy:?} (user band {user_open})");
    let e = bs.read_entry(&copy).unwrap().unwrap();
    assert_eq!((e.kind, e.seq), (Kind::GcCopy, 4));
    // User writes go on in the user band; the next user band takes a number
    // after the GC band's.
    let mut user: Vec<ValuePointer> = Vec::new();
    for i in 0..5u8 {
        user.extend(write(&bs, &m, &[(&[b'u', i], Some(b"new"))]));
    }
    assert!(user.iter().all(|p| p.file_id != copy.file_id), "{user:?}");
    assert!(user[4].file_id > copy.file_id, "{user:?} {copy:?}");
    // More collections: every copy lands in a band no user record is in.
    let pos = bs.log_position().unwrap();
    bs.checkpoint_committed(pos);
    while bs.gc_step(&m, &m).unwrap().did_work {}
    let user_bands: std::collections::BTreeSet<u64> = user.iter().map(|p| p.file_id).collect();
    for (k, p) in m.map.lock().iter() {
        let e = bs.read_entry(p).unwrap().unwrap();
        if e.kind == Kind::GcCopy {
            assert!(!user_bands.contains(&p.file_id), "{k:?} at {p:?}");
        }
    }
    bs.sync().unwrap();
    drop(bs);
    ffs.crash();
    let bs = open(&fs, opts(4), m.persisted.lock().as_deref());
    check_model(&bs, &m);
    assert_eq!(bs.verify().1.len(), 0);
    let after = write(&bs, &m, &[(b"z", Some(b"after"))]);
    let newest = m.map.lock().values().map(|p| p.file_id).max().unwrap();
    assert!(after[0].file_id >= newest, "{after:?} (newest {newest})");
    assert_eq!(
        bs.read(b"z", &after[0]).unwrap().as_deref(),
        Some(&b"after"[..])
    );
}

/// A band of GC copies created right after a roll makes the new band of
/// user writes a band before the last one: its header must be durable by
/// then, or a power loss leaves an empty file below the last band, which
/// open takes for damage.
#[test]
fn a_band_of_gc_copies_after_a_roll_survives_a_power_loss() {
    let ffs = Arc::new(FaultFs::new());
    let fs: Arc<dyn FileSystem> = ffs.clone();
    let m = Model::default();
    let bs = open(&fs, opts(4), None);
    fill_and_overwrite(&bs, &m);
    bs.sync().unwrap();
    // The fourth entry of band 4 closes it; band 5 is created, its header
    // not synced.
    write(&bs, &m, &[(b"u", Some(b"1"))]);
    assert_eq!(bs.log_position().unwrap().0, 5);
    let out = bs.gc_step(&m, &m).unwrap();
    assert!(out.bytes_rewritten > 0, "{out:?}");
    let copy = m.map.lock()[&vec![b'k', 3]];
    assert_eq!(copy.file_id, 6, "{copy:?}");
    drop(bs);
    ffs.crash();
    // Open after the power loss: it must succeed.
    let bs = open(&fs, opts(4), m.persisted.lock().as_deref());
    assert_eq!(bs.read(&[b'k', 3], &copy).unwrap(), Some(vec![3; 50]));
    assert_eq!(bs.verify().1.len(), 0);
    let after = write(&bs, &m, &[(b"z", Some(b"after"))]);
    assert!(after[0].file_id >= 6, "{after:?}");
}

/// A band of GC copies whose header cannot be made durable is removed
/// again: left behind, it would be a band without a header below the last
/// one, which open takes for damage. The store goes on, and opens after a
/// power loss with every record.
#[test]
fn a_failed_creation_of_a_band_of_gc_copies_leaves_no_band() {
    let ffs = Arc::new(FaultFs::new());
    let fs: Arc<dyn FileSystem> = ffs.clone();
    let m = Model::default();
    let bs = open(&fs, opts(4), None);
    fill_and_overwrite(&bs, &m);
    bs.sync().unwrap();
    let next = bs.log_position().unwrap().0 + 1;
    let path = Path::new("/db").join(format!("{next:06}.band"));
    ffs.add_rule(FaultRule {
        path_contains: Some(format!("{next:06}.band")),
        times: Some(1),
        ..FaultRule::new(FaultOp::Sync, FaultKind::Eio)
    });
    assert!(bs.gc_step(&m, &m).is_err(), "the header's sync failed");
    ffs.clear_rules();
    assert_eq!(ffs.file_len(&path), None, "the failed band stayed");
    // User writes go on past the number the failed band took.
    for i in 0..8u8 {
        write(&bs, &m, &[(&[b'n', i], Some(&[i; 50]))]);
    }
    bs.sync().unwrap();
    assert!(bs.log_position().unwrap().0 > next);
    drop(bs);
    ffs.crash();
    // Open after a failed creation and a power loss: it must succeed.
    let bs = open(&fs, opts(4), m.persisted.lock().as_deref());
    check_model(&bs, &m);
}

/// The room GC has is counted in the bytes the bands hold: with 40 live
/// keys of known size, over-provisioning 0.3 and a capacity of their band
/// bytes × 1.3 (as `sepkv bench --reserve 0.3` sets it for the bands),
/// the bound's floor is the entries' bytes with their headers, and a user
/// value is refused (the engine then runs GC) exactly when the band files
/// would pass live band bytes × 1.3, not the user's bytes × 1.3.
#[test]
fn gc_room_is_counted_in_band_bytes() {
    const N: u64 = 40;
    const OP: f64 = 0.3;
    let key = |i: u64| format!("key{i:013}").into_bytes();
    let value = [7u8; 200];
    let entry = band::entry_len(&key(0), &value) as u64;
    assert_eq!(entry, band::ENTRY_OVERHEAD as u64 + 16 + 200);
    let live = N * entry;
    let cap = (live as f64 * (1.0 + OP)).ceil() as u64;
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    let m = Model::default();
    let bs = open(
        &fs,
        BandOptions {
            band_entries: 8,
            band_bytes: 4096,
            capacity: Some(cap),
            space_bound: Some(1.0 + OP),
            ..Default::default()
        },
        None,
    );
    for i in 0..N {
        write(&bs, &m, &[(&key(i), Some(&value))]);
    }
    // Band files: a header per band (a full band is closed and the next
    // opened at once), a trailer per closed band.
    let used = |entries: u64| {
        let bands = entries / 8 + 1;
        bands * HEADER_LEN + entries / 8 * TRAILER_LEN as u64 + entries * entry
    };
    let mut written = N;
    let refused = loop {
        let u = bs.space_bound_use().unwrap();
        assert_eq!(u.used, used(written));
        assert_eq!(u.floor, live, "live band bytes, entry headers included");
        assert_eq!(u.limit, (live as f64 * (1.0 + OP)) as u64 + 4096);
        assert!(written < 2 * N, "the capacity never refused a value");
        let seq = *m.last_seq.lock() + 1;
        let k = key(written % N);
        let e = [LogEntry {
            vtype: ValueType::Value,
            separate: true,
            key: &k,
            seq,
            value: &value,
        }];
        let prev = [m.prev(&k)];
        match bs.log_linked(&e, Some(&prev)) {
            Ok(p) => {
                m.map.lock().insert(k, p[0]);
                *m.last_seq.lock() = seq;
                written += 1;
            }
            Err(e) => break e,
        }
    };
    assert!(matches!(refused, Error::ValueStoreFull(_)), "{refused:?}");
    // Refused exactly where one more entry would pass live × (1 + OP) ...
    let at = bs.space_bound_use().unwrap().used;
    assert!(at <= cap && at + entry > cap, "{at} {cap}");
    // ... which leaves GC 0.3 of the live band bytes, less at most one
    // entry and the bands' headers and trailers.
    let room = (at - live) as f64 / live as f64;
    assert!(room > OP - 0.03 && room <= OP, "{room}");
    // Counted in the user's bytes (216 of the 258 an entry takes) the same
    // capacity would have left 0.3 × 216 / 258 of room.
    assert!(
        room > (1.0 + OP) * 216.0 / entry as f64 - 1.0 + 0.04,
        "{room}"
    );
}

/// Short of room (`gc_due`), one step collects several bands — those with
/// the most garbage, each with at least three quarters of the best one's —
/// and persists their retirement once; with room, a step takes one band.
/// What the steps moved survives a reopen with the persisted state.
#[test]
fn a_step_short_of_room_collects_several_bands() {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    let m = Model::default();
    let bs = open(&fs, opts(4), None);
    // Bands 1-4 hold k0..k15; three of each band's four keys are
    // overwritten (bands 5-7), so bands 1-4 are three quarters garbage.
    for i in 0..16u8 {
        write(&bs, &m, &[(&[b'k', i], Some(&[i; 50]))]);
    }
    for i in (0..16u8).filter(|i| i % 4 != 0) {
        write(&bs, &m, &[(&[b'k', i], Some(&[i + 100; 50]))]);
    }
    let pos = bs.log_position().unwrap();
    bs.checkpoint_committed(pos);
    let fig = |bs: &BandStore, name: &str| {
        bs.figures()
            .into_iter()
            .find(|f| f.0 == name)
            .map_or(0, |f| f.1)
    };
    assert!(!bs.gc_due());
    let out = bs.gc_step(&m, &m).unwrap();
    assert!(out.did_work, "{out:?}");
    assert_eq!((fig(&bs, "gc_steps"), fig(&bs, "gc_runs")), (1, 1));
    check_model(&bs, &m);
    // Reopen with a capacity the bands already pass: GC is due.
    let state = bs.state_with_checkpoint(pos);
    drop(bs);
    let short = BandOptions {
        capacity: Some(1),
        ..opts(4)
    };
    let bs = open(&fs, short.clone(), Some(&state));
    assert!(bs.gc_due());
    let before = m.persisted.lock().clone();
    let out = bs.gc_step(&m, &m).unwrap();
    assert!(out.did_work && out.bytes_freed > 0, "{out:?}");
    assert_eq!((fig(&bs, "gc_steps"), fig(&bs, "gc_runs")), (1, 3));
    assert_ne!(*m.persisted.lock(), before, "the retirement was persisted");
    for b in 1..=4 {
        assert!(!fs.exists(&band_path(Path::new("/db"), b)), "band {b}");
    }
    check_model(&bs, &m);
    let state = m.persisted.lock().clone().unwrap();
    drop(bs);
    let bs = open(&fs, short, Some(&state));
    check_model(&bs, &m);
    for i in 0..16u8 {
        let p = m.map.lock()[&vec![b'k', i]];
        let want = if i % 4 != 0 { i + 100 } else { i };
        assert_eq!(bs.read(&[b'k', i], &p).unwrap().unwrap(), vec![want; 50]);
    }
}

/// With a capacity, the bands tell the space governor their use of it,
/// paced over [`PACE_BANDS`] bands before the capacity, not the whole
/// room.
#[test]
fn capacity_use_paces_over_the_last_bands() {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    let m = Model::default();
    assert!(open(&fs, opts(4), None).capacity_use().is_none());
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    let cap = 1 << 20;
    let bs = open(
        &fs,
        BandOptions {
            capacity: Some(cap),
            ..opts(4)
        },
        None,
    );
    for i in 0..16u8 {
        write(&bs, &m, &[(&[b'k', i], Some(&[i; 50]))]);
    }
    let u = bs.capacity_use().unwrap();
    assert_eq!(u.limit, cap);
    let band = bs.band_size_locked(&bs.state.lock());
    assert_eq!(u.width, Some(PACE_BANDS * band));
    // The room the governor divides is those bands, not all the room.
    assert_eq!(u.room_width(0), PACE_BANDS * band);
    assert!(u.fill(0) == 0.0, "{u:?}");
    let near = crate::vstore::CapacityUse {
        used: cap - band,
        ..u
    };
    assert!(near.fill(0) > 0.9 && near.fill(0) < 1.0, "{near:?}");
}
