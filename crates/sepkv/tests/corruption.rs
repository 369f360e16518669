//! Corruption scenarios on the fault-injecting file system.
//!
//! Damage to any file of a database — an SSTable, the write-ahead log, the
//! manifest, `CURRENT`, `IDENTITY` — must surface as an error naming the
//! damaged file (and, where the format allows, the offset of the damaged
//! block or record). A read never returns a wrong value, and nothing panics.
//!
//! The tests parse the frozen on-disk formats (record framing, table layout)
//! themselves, so that they know exactly which block or record a flipped bit
//! lands in and which offset the error must name.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use sepkv::format::coding::{get_varint32, get_varint64};
use sepkv::fs::{read_all, write_atomic, FaultFs, FileSystem};
use sepkv::{Db, Error, Options, ReadOptions, Result};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const DIR: &str = "/db";

fn dir() -> &'static Path {
    Path::new(DIR)
}

fn opts(fs: &FaultFs) -> Options {
    Options {
        fs: Arc::new(fs.clone()),
        write_buffer_size: 64 << 10,
        block_size: 1024,
        ..Options::default()
    }
}

fn key(i: usize) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

/// A value of 40 to 159 bytes that identifies its key.
fn value(i: usize) -> Vec<u8> {
    let mut v = format!("value-{i}-").into_bytes();
    let len = 40 + (i * 37) % 120;
    while v.len() < len {
        v.push(b'a' + (v.len() % 26) as u8);
    }
    v
}

/// Paths of the files of the database whose names satisfy `pred`, sorted.
fn files(fs: &FaultFs, pred: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs
        .list(dir())
        .unwrap()
        .into_iter()
        .filter(|n| pred(n))
        .map(|n| dir().join(n))
        .collect();
    v.sort();
    v
}

fn read(fs: &FaultFs, p: &Path) -> Vec<u8> {
    read_all(fs, p).unwrap()
}

/// Panics unless `e` is a corruption of `file` at exactly `offset`.
#[track_caller]
fn assert_corruption_at(e: &Error, file: &Path, offset: u64, what: &str) {
    match e {
        Error::Corruption {
            file: f, offset: o, ..
        } if f == file && *o == offset => {}
        other => panic!(
            "{what}: expected a corruption of {} at offset {offset}, got {other:?}",
            file.display()
        ),
    }
}

/// Panics unless `e` is a corruption naming `file` (any offset).
#[track_caller]
fn assert_corruption_of(e: &Error, file: &Path, what: &str) {
    match e {
        Error::Corruption { file: f, .. } if f == file => {}
        other => panic!(
            "{what}: expected a corruption of {}, got {other:?}",
            file.display()
        ),
    }
}

// ---------------------------------------------------------------------------
// Table layout (format version 1, see `index::sstable`).

const FOOTER_LEN: u64 = 56;
const BLOCK_TRAILER_LEN: u64 = 5;
const KEY_TRAILER_LEN: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RegionKind {
    Data(usize),
    Filter,
    Metaindex,
    Index,
    Footer,
}

/// A checksummed unit of a table file: `[start, end)`, trailer included.
#[derive(Debug, Clone, Copy)]
struct Region {
    kind: RegionKind,
    start: u64,
    end: u64,
}

struct TableLayout {
    /// Every region, in file order; together they cover the whole file.
    regions: Vec<Region>,
    /// The user keys of each data block.
    block_keys: Vec<Vec<Vec<u8>>>,
}

impl TableLayout {
    fn region_at(&self, offset: u64) -> Region {
        *self
            .regions
            .iter()
            .find(|r| r.start <= offset && offset < r.end)
            .expect("every byte of a table belongs to a region")
    }

    fn data_region(&self, block: usize) -> Region {
        *self
            .regions
            .iter()
            .find(|r| r.kind == RegionKind::Data(block))
            .expect("data block")
    }

    fn keys(&self) -> impl Iterator<Item = &Vec<u8>> {
        self.block_keys.iter().flatten()
    }
}

fn decode_handle(mut src: &[u8]) -> (u64, u64) {
    let offset = get_varint64(&mut src).expect("handle offset");
    let size = get_varint64(&mut src).expect("handle size");
    (offset, size)
}

/// The `(key, value)` entries of a block's contents.
fn block_entries(contents: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let n = u32::from_le_bytes(contents[contents.len() - 4..].try_into().unwrap()) as usize;
    let mut src = &contents[..contents.len() - 4 - 4 * n];
    let mut out = Vec::new();
    let mut last: Vec<u8> = Vec::new();
    while !src.is_empty() {
        let shared = get_varint32(&mut src).unwrap() as usize;
        let non_shared = get_varint32(&mut src).unwrap() as usize;
        let value_len = get_varint32(&mut src).unwrap() as usize;
        let mut k = last[..shared].to_vec();
        k.extend_from_slice(&src[..non_shared]);
        src = &src[non_shared..];
        out.push((k.clone(), src[..value_len].to_vec()));
        src = &src[value_len..];
        last = k;
    }
    out
}

fn table_layout(data: &[u8]) -> TableLayout {
    let len = data.len() as u64;
    assert_eq!(&data[data.len() - 8..], b"sepkvSST", "table magic");
    let mut footer = &data[(len - FOOTER_LEN) as usize..];
    let mi = (
        get_varint64(&mut footer).unwrap(),
        get_varint64(&mut footer).unwrap(),
    );
    let ix = (
        get_varint64(&mut footer).unwrap(),
        get_varint64(&mut footer).unwrap(),
    );
    let contents = |(off, size): (u64, u64)| &data[off as usize..(off + size) as usize];
    let region = |kind, (off, size): (u64, u64)| Region {
        kind,
        start: off,
        end: off + size + BLOCK_TRAILER_LEN,
    };
    let mut regions = Vec::new();
    let mut block_keys = Vec::new();
    for (i, (_sep, h)) in block_entries(contents(ix)).iter().enumerate() {
        let h = decode_handle(h);
        block_keys.push(
            block_entries(contents(h))
                .into_iter()
                .map(|(k, _)| k[..k.len() - KEY_TRAILER_LEN].to_vec())
                .collect(),
        );
        regions.push(region(RegionKind::Data(i), h));
    }
    for (name, h) in block_entries(contents(mi)) {
        assert_eq!(name, b"filter.bloom", "the only meta block");
        regions.push(region(RegionKind::Filter, decode_handle(&h)));
    }
    regions.push(region(RegionKind::Metaindex, mi));
    regions.push(region(RegionKind::Index, ix));
    regions.push(Region {
        kind: RegionKind::Footer,
        start: len - FOOTER_LEN,
        end: len,
    });
    regions.sort_by_key(|r| r.start);
    // The checksummed regions tile the file: no byte lies outside them (no
    // padding that a checksum does not cover).
    let mut at = 0;
    for r in &regions {
        assert_eq!(r.start, at, "gap or overlap before {r:?}");
        at = r.end;
    }
    assert_eq!(at, len, "bytes after the footer");
    TableLayout {
        regions,
        block_keys,
    }
}

// ---------------------------------------------------------------------------
// Scans over a damaged table.

/// Checks a scan (forward over `expected`, or backward when `expected` is
/// reversed) that must meet the damage: it yields a correct prefix of
/// `expected` of at most `limit` entries, then exactly one corruption of
/// `file` at `offset`, then ends.
#[track_caller]
fn check_damaged_scan(
    scan: Result<sepkv::Scan>,
    expected: &[(Vec<u8>, Vec<u8>)],
    limit: usize,
    file: &Path,
    offset: u64,
    what: &str,
) {
    let mut scan = match scan {
        Ok(s) => s,
        // Opening a level-0 table happens when the iterator is made.
        Err(e) => return assert_corruption_at(&e, file, offset, what),
    };
    let mut n = 0;
    loop {
        match scan.next() {
            Some(Ok(kv)) => {
                assert!(n < limit, "{what}: read past the damage ({n} entries)");
                assert_eq!(kv, expected[n], "{what}: entry {n} is wrong");
                n += 1;
            }
            Some(Err(e)) => {
                assert_corruption_at(&e, file, offset, what);
                break;
            }
            None => panic!("{what}: the scan ended after {n} entries without reporting the damage"),
        }
    }
    assert!(
        scan.next().is_none(),
        "{what}: the scan went on after its error"
    );
}

fn all_entries(range: std::ops::Range<usize>) -> Vec<(Vec<u8>, Vec<u8>)> {
    range.map(|i| (key(i), value(i))).collect()
}

// ---------------------------------------------------------------------------
// SSTables.

/// A data block damaged under an open database (before any read cached it)
/// is reported by `get`, by scans and iterators, and by
/// `verify`, each naming the table and the block's offset. Reads away from
/// the block keep working, and so do writes.
#[test]
fn sst_data_block_damage_is_reported_without_reopen() {
    let fs = FaultFs::new();
    let o = Options {
        // Keep level 0 (whose tables overlap) below the compaction trigger,
        // so that no compaction rewrites the damaged file.
        l0_compaction_trigger: 10,
        l0_slowdown_writes_trigger: 10,
        l0_stop_writes_trigger: 12,
        ..opts(&fs)
    };
    let db = Db::open(dir(), o).unwrap();
    let n = 2500;
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut StdRng::seed_from_u64(7));
    for &i in &order {
        db.put(key(i), value(i)).unwrap();
    }
    db.flush().unwrap();
    let st = db.stats().unwrap();
    assert!(
        st.levels[0].files >= 3,
        "expected several level-0 tables: {:?}",
        st.levels
    );
    assert_eq!(st.compactions + st.trivial_moves, 0);
    let tables = files(&fs, |n| n.ends_with(".sst"));
    assert_eq!(
        tables.len(),
        st.levels.iter().map(|l| l.files).sum::<usize>()
    );

    // Damage a data block in the middle of the largest table.
    let victim = tables
        .iter()
        .max_by_key(|p| fs.file_len(p).unwrap())
        .unwrap()
        .clone();
    let layout = table_layout(&read(&fs, &victim));
    assert!(layout.block_keys.len() >= 8, "too few blocks");
    let b = layout.block_keys.len() / 2;
    let r = layout.data_region(b);
    let flip_at = (r.start + r.end) / 2;
    fs.corrupt(&victim, flip_at, 0x10).unwrap();
    let damaged: BTreeSet<Vec<u8>> = layout.block_keys[b].iter().cloned().collect();
    assert!(!damaged.is_empty());

    // Point reads.
    let mut good = 0;
    for i in 0..n {
        let what = format!("get key {i}");
        match db.get(key(i)) {
            Ok(v) => {
                assert!(
                    !damaged.contains(&key(i)),
                    "{what}: read from the damaged block: {v:?}"
                );
                assert_eq!(v, Some(value(i)), "{what}");
                good += 1;
            }
            // A key of another table may be looked up in the damaged block
            // too (a bloom-filter false positive); that must fail the same way.
            Err(e) => assert_corruption_at(&e, &victim, r.start, &what),
        }
    }
    assert!(good >= n - damaged.len() - n / 20, "{good} good reads");
    // A failed block is never cached as good.
    let k = damaged.iter().next().unwrap();
    for _ in 0..2 {
        assert_corruption_at(&db.get(k).unwrap_err(), &victim, r.start, "repeated get");
    }

    // Scans in both directions stop at the damage.
    let expected = all_entries(0..n);
    let first_bad = expected
        .iter()
        .position(|(k, _)| damaged.contains(k))
        .unwrap();
    let last_bad = expected
        .iter()
        .rposition(|(k, _)| damaged.contains(k))
        .unwrap();
    check_damaged_scan(
        db.scan(.., false),
        &expected,
        first_bad,
        &victim,
        r.start,
        "forward scan",
    );
    let mut reversed = expected.clone();
    reversed.reverse();
    check_damaged_scan(
        db.scan(.., true),
        &reversed,
        n - 1 - last_bad,
        &victim,
        r.start,
        "reverse scan",
    );

    // The cursor API: `status()` reports the damage once the cursor stops.
    let mut it = db.iter(&ReadOptions::default()).unwrap();
    it.seek_to_first();
    let mut seen = 0;
    while it.valid() {
        assert_eq!(
            (it.key(), it.value()),
            (&expected[seen].0[..], &expected[seen].1[..])
        );
        seen += 1;
        it.next();
    }
    assert!(seen <= first_bad, "the cursor read past the damage");
    assert_corruption_at(
        &it.status().unwrap_err(),
        &victim,
        r.start,
        "iterator status",
    );
    drop(it);

    // A range that starts after the damaged block (at the first key of the
    // next block of the damaged table) reads completely and cleanly.
    let from = layout.block_keys[b + 1][0].clone();
    let start = expected.iter().position(|(k, _)| *k == from).unwrap();
    let got: Vec<_> = db
        .scan(&from[..].., false)
        .unwrap()
        .collect::<Result<_>>()
        .unwrap();
    assert_eq!(got, expected[start..]);

    // `verify` reports exactly this damage.
    let rep = db.verify().unwrap();
    assert_eq!(rep.tables, tables.len());
    assert_eq!(rep.faults.len(), 1, "{:?}", rep.faults);
    assert_corruption_at(&rep.faults[0], &victim, r.start, "verify");

    // Read errors do not poison the database.
    db.put(b"after", b"damage").unwrap();
    assert_eq!(db.get(b"after").unwrap(), Some(b"damage".to_vec()));

    // The damage is still reported after a reopen.
    db.close().unwrap();
    let db = Db::open(dir(), opts(&fs)).unwrap();
    assert_corruption_at(
        &db.get(k).unwrap_err(),
        &victim,
        r.start,
        "get after reopen",
    );
    assert_eq!(db.get(b"after").unwrap(), Some(b"damage".to_vec()));
    db.close().unwrap();
}

/// For bit flips all over a table — data blocks, filter, metaindex, index,
/// footer — made while the database is closed: after reopening, every read
/// either returns the right value or fails with a corruption naming the
/// table and the offset of the damaged block (or footer). Which reads fail
/// is exactly determined by where the flip is; `verify` reports it too.
#[test]
fn sst_bit_flips_anywhere_in_a_table_are_caught_after_reopen() {
    const PER_TABLE: usize = 300;
    let fs = FaultFs::new();
    let db = Db::open(dir(), opts(&fs)).unwrap();
    // Three tables with disjoint key ranges.
    for t in 0..3 {
        for i in t * PER_TABLE..(t + 1) * PER_TABLE {
            db.put(key(i), value(i)).unwrap();
        }
        db.flush().unwrap();
    }
    db.close().unwrap();
    let tables = files(&fs, |n| n.ends_with(".sst"));
    assert_eq!(tables.len(), 3);
    let (victim, layout) = tables
        .iter()
        .map(|p| (p.clone(), table_layout(&read(&fs, p))))
        .find(|(_, l)| l.block_keys[0][0] == key(PER_TABLE))
        .expect("the middle table");
    let victim_keys: BTreeSet<Vec<u8>> = layout.keys().cloned().collect();
    assert_eq!(victim_keys.len(), PER_TABLE);
    assert!(layout.block_keys.len() >= 8, "too few blocks");
    for kind in [
        RegionKind::Filter,
        RegionKind::Metaindex,
        RegionKind::Index,
        RegionKind::Footer,
    ] {
        assert!(
            layout.regions.iter().any(|r| r.kind == kind),
            "no {kind:?} region"
        );
    }
    let expected = all_entries(0..3 * PER_TABLE);
    let len = fs.file_len(&victim).unwrap();

    // Flip positions: the first, middle and last byte of every region (the
    // last is in the checksum of a block), and random ones.
    let mut rng = StdRng::seed_from_u64(0x5eed);
    let mut flips: Vec<u64> = layout
        .regions
        .iter()
        .flat_map(|r| [r.start, (r.start + r.end) / 2, r.end - 1])
        .collect();
    flips.extend((0..3000).map(|_| rng.gen_range(0..len)));
    let others: Vec<usize> = (0..PER_TABLE)
        .chain(2 * PER_TABLE..3 * PER_TABLE)
        .step_by(7)
        .collect();

    for &at in &flips {
        let mask = 1u8 << rng.gen_range(0..8);
        let r = layout.region_at(at);
        let what = format!(
            "flip {mask:#04x} at {at} in {:?} [{}, {})",
            r.kind, r.start, r.end
        );
        // The keys whose reads must fail.
        let hit: BTreeSet<Vec<u8>> = match r.kind {
            RegionKind::Data(b) => layout.block_keys[b].iter().cloned().collect(),
            _ => victim_keys.clone(),
        };
        fs.corrupt(&victim, at, mask).unwrap();
        let db = Db::open(dir(), opts(&fs)).unwrap_or_else(|e| panic!("{what}: open failed: {e}"));
        for i in (PER_TABLE..2 * PER_TABLE).chain(others.iter().copied()) {
            match db.get(key(i)) {
                Ok(v) if !hit.contains(&key(i)) => assert_eq!(v, Some(value(i)), "{what}: get {i}"),
                Ok(v) => panic!("{what}: get {i} returned {v:?} from damaged data"),
                Err(e) if hit.contains(&key(i)) => {
                    assert_corruption_at(&e, &victim, r.start, &what)
                }
                Err(e) => panic!("{what}: get {i} of an intact key failed: {e}"),
            }
        }
        let first_bad = expected.iter().position(|(k, _)| hit.contains(k)).unwrap();
        let last_bad = expected.iter().rposition(|(k, _)| hit.contains(k)).unwrap();
        check_damaged_scan(
            db.scan(.., false),
            &expected,
            first_bad,
            &victim,
            r.start,
            &what,
        );
        let mut reversed = expected.clone();
        reversed.reverse();
        check_damaged_scan(
            db.scan(.., true),
            &reversed,
            expected.len() - 1 - last_bad,
            &victim,
            r.start,
            &what,
        );
        let rep = db.verify().unwrap();
        assert_eq!(rep.faults.len(), 1, "{what}: {:?}", rep.faults);
        assert_corruption_at(&rep.faults[0], &victim, r.start, &what);
        db.close().unwrap();
        fs.corrupt(&victim, at, mask).unwrap();
    }

    // Every flip was undone: the database is whole.
    let db = Db::open(dir(), opts(&fs)).unwrap();
    let rep = db.verify().unwrap();
    assert!(rep.faults.is_empty(), "{:?}", rep.faults);
    assert_eq!(rep.tables, 3);
    let got: Vec<_> = db.scan(.., false).unwrap().collect::<Result<_>>().unwrap();
    assert_eq!(got, expected);
}

/// A compaction that meets a damaged block fails (poisoning the database)
/// instead of writing output without the block's entries; once the damage
/// is repaired, a reopen finds every key.
#[test]
fn compaction_over_a_damaged_table_fails_and_loses_nothing() {
    let fs = FaultFs::new();
    let o = || Options {
        l0_compaction_trigger: 10,
        l0_slowdown_writes_trigger: 10,
        l0_stop_writes_trigger: 12,
        ..opts(&fs)
    };
    let db = Db::open(dir(), o()).unwrap();
    let n = 2000;
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut StdRng::seed_from_u64(11));
    for &i in &order {
        db.put(key(i), value(i)).unwrap();
    }
    db.flush().unwrap();
    let tables = files(&fs, |n| n.ends_with(".sst"));
    assert!(tables.len() >= 3);
    let victim = tables[tables.len() / 2].clone();
    let layout = table_layout(&read(&fs, &victim));
    let r = layout.data_region(layout.block_keys.len() / 2);
    fs.corrupt(&victim, r.start + 7, 0x02).unwrap();

    let e = db.compact_range(..).unwrap_err();
    match &e {
        Error::Corruption { file, .. } => assert_eq!(file, &victim),
        Error::Poisoned(m) => assert!(m.contains(victim.to_str().unwrap()), "{m}"),
        other => panic!("expected the compaction to fail on the damage, got {other:?}"),
    }
    // Nothing was lost: every key of intact blocks still reads right.
    let damaged: BTreeSet<Vec<u8>> = layout.block_keys[layout.block_keys.len() / 2]
        .iter()
        .cloned()
        .collect();
    let mut good = 0;
    for i in 0..n {
        match db.get(key(i)) {
            Ok(v) => {
                assert!(
                    !damaged.contains(&key(i)),
                    "key {i} read from the damaged block"
                );
                assert_eq!(v, Some(value(i)), "key {i}");
                good += 1;
            }
            Err(e) => assert_corruption_at(&e, &victim, r.start, &format!("key {i}")),
        }
    }
    assert!(good >= n - damaged.len() - n / 20, "{good} good reads");
    db.close().unwrap();
    fs.corrupt(&victim, r.start + 7, 0x02).unwrap();
    let db = Db::open(dir(), o()).unwrap();
    let got: Vec<_> = db.scan(.., false).unwrap().collect::<Result<_>>().unwrap();
    assert_eq!(got, all_entries(0..n));
    db.compact_range(..).unwrap();
    assert!(db.verify().unwrap().faults.is_empty());
    let got: Vec<_> = db.scan(.., false).unwrap().collect::<Result<_>>().unwrap();
    assert_eq!(got, all_entries(0..n));
}

/// `verify` on an open database checks its manifest and current WAL too.
#[test]
fn verify_reports_damage_to_the_manifest_and_wal_of_an_open_database() {
    let fs = FaultFs::new();
    let db = Db::open(dir(), opts(&fs)).unwrap();
    for round in 0..3 {
        for i in round * 100..(round + 1) * 100 {
            db.put(key(i), value(i)).unwrap();
        }
        db.flush().unwrap();
    }
    for i in 300..320 {
        db.put(key(i), value(i)).unwrap();
    }
    let rep = db.verify().unwrap();
    assert!(rep.faults.is_empty(), "{:?}", rep.faults);
    assert!(rep.manifest_edits >= 4 && rep.wal_records == 20, "{rep:?}");

    let manifest = files(&fs, |n| n.starts_with("MANIFEST-")).pop().unwrap();
    let recs = records(&read(&fs, &manifest));
    let (start, end) = recs[1];
    fs.corrupt(&manifest, (start + end) / 2, 0x08).unwrap();
    let rep = db.verify().unwrap();
    assert_eq!(rep.faults.len(), 1, "{:?}", rep.faults);
    assert_corruption_at(&rep.faults[0], &manifest, start, "verify of the manifest");
    fs.corrupt(&manifest, (start + end) / 2, 0x08).unwrap();

    let log = files(&fs, |n| n.ends_with(".log")).pop().unwrap();
    let recs = records(&read(&fs, &log));
    assert_eq!(recs.len(), 20);
    let (start, end) = recs[4];
    fs.corrupt(&log, end - 1, 0x40).unwrap();
    let rep = db.verify().unwrap();
    assert_eq!(rep.faults.len(), 1, "{:?}", rep.faults);
    assert_corruption_at(&rep.faults[0], &log, start, "verify of the WAL");
    fs.corrupt(&log, end - 1, 0x40).unwrap();
    assert!(db.verify().unwrap().faults.is_empty());
}

/// A table that is truncated or missing is an error for the reads that need
/// it — never a silent "not found".
#[test]
fn sst_truncated_or_missing_is_an_error_not_a_miss() {
    const PER_TABLE: usize = 300;
    let fs = FaultFs::new();
    let db = Db::open(dir(), opts(&fs)).unwrap();
    for t in 0..2 {
        for i in t * PER_TABLE..(t + 1) * PER_TABLE {
            db.put(key(i), value(i)).unwrap();
        }
        db.flush().unwrap();
    }
    db.close().unwrap();
    let tables = files(&fs, |n| n.ends_with(".sst"));
    assert_eq!(tables.len(), 2);
    let (victim, layout) = tables
        .iter()
        .map(|p| (p.clone(), table_layout(&read(&fs, p))))
        .find(|(_, l)| l.block_keys[0][0] == key(PER_TABLE))
        .expect("the second table");
    let original = read(&fs, &victim);

    // Truncated: by one byte, into the index, into the data.
    for cut in [
        original.len() as u64 - 1,
        layout.regions.last().unwrap().start - 3,
        100,
    ] {
        fs.truncate(&victim, cut).unwrap();
        let db = Db::open(dir(), opts(&fs)).unwrap();
        for i in (0..2 * PER_TABLE).step_by(11) {
            let got = db.get(key(i));
            if i < PER_TABLE {
                assert_eq!(got.unwrap(), Some(value(i)));
            } else {
                assert_corruption_of(
                    &got.unwrap_err(),
                    &victim,
                    &format!("get {i}, cut at {cut}"),
                );
            }
        }
        let rep = db.verify().unwrap();
        assert_eq!(rep.faults.len(), 1, "{:?}", rep.faults);
        assert_corruption_of(&rep.faults[0], &victim, "verify");
        db.close().unwrap();
        let mut f = fs.create(&victim).unwrap();
        f.append(&original).unwrap();
        f.sync().unwrap();
    }

    // Missing.
    fs.remove(&victim).unwrap();
    let db = Db::open(dir(), opts(&fs)).unwrap();
    let names_victim = |e: &Error| match e {
        Error::Corruption { file, .. } => file == &victim,
        Error::Io { path, source } => {
            path == &victim && source.kind() == std::io::ErrorKind::NotFound
        }
        _ => false,
    };
    for i in (0..2 * PER_TABLE).step_by(11) {
        let got = db.get(key(i));
        if i < PER_TABLE {
            assert_eq!(got.unwrap(), Some(value(i)));
        } else {
            let e = got.unwrap_err();
            assert!(
                names_victim(&e),
                "get {i} of a key in a missing table: {e:?}"
            );
        }
    }
    let mut scan = db.scan(.., false).unwrap();
    let e = scan
        .find_map(|r| r.err())
        .expect("the scan must report the missing table");
    assert!(names_victim(&e), "{e:?}");
    let rep = db.verify().unwrap();
    assert_eq!(rep.faults.len(), 1, "{:?}", rep.faults);
    assert!(names_victim(&rep.faults[0]), "{:?}", rep.faults);
}

// ---------------------------------------------------------------------------
// Write-ahead log.

/// `(start, end)` of every record of a log (see `format::record`); the
/// zeros of a preallocated WAL past its last record are not records.
fn records(data: &[u8]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < data.len() && data[at..].iter().any(|&b| b != 0) {
        let len = u32::from_le_bytes(data[at..at + 4].try_into().unwrap()) as usize;
        out.push((at as u64, (at + 12 + len) as u64));
        at += 12 + len;
    }
    assert!(at <= data.len(), "records run past the end of the log");
    out
}

const WAL_RECORDS: usize = 12;

/// A closed database whose writes (one record each) are only in its WAL.
/// Returns the file system, the WAL and its records.
fn db_with_unflushed_wal() -> (FaultFs, PathBuf, Vec<(u64, u64)>) {
    let fs = FaultFs::new();
    let o = Options {
        flush_on_close: false,
        ..opts(&fs)
    };
    let db = Db::open(dir(), o).unwrap();
    for i in 0..WAL_RECORDS {
        db.put(key(i), value(i)).unwrap();
    }
    db.close().unwrap();
    assert!(
        files(&fs, |n| n.ends_with(".sst")).is_empty(),
        "nothing was flushed"
    );
    let logs = files(&fs, |n| n.ends_with(".log"));
    assert_eq!(logs.len(), 1, "{logs:?}");
    let data = read(&fs, &logs[0]);
    assert!(!data.is_empty(), "the WAL holds the writes");
    let recs = records(&data);
    assert_eq!(recs.len(), WAL_RECORDS);
    (fs, logs[0].clone(), recs)
}

/// Opens the database and checks that exactly the first `present` writes
/// are in it; returns it open.
#[track_caller]
fn open_expecting_prefix(fs: &FaultFs, present: usize, what: &str) -> Db {
    let db = Db::open(dir(), opts(fs)).unwrap_or_else(|e| panic!("{what}: open failed: {e:?}"));
    for i in 0..WAL_RECORDS {
        let want = (i < present).then(|| value(i));
        assert_eq!(db.get(key(i)).unwrap(), want, "{what}: key {i}");
    }
    let n = db.scan(b"key"..b"kez", false).unwrap().count();
    assert_eq!(n, present, "{what}: scan");
    db
}

/// A flipped bit anywhere in a WAL record that valid records follow makes
/// `open` fail with a corruption naming the log and the record's offset;
/// undoing the flip makes every write come back.
#[test]
fn wal_flip_before_valid_records_fails_open_with_the_record_offset() {
    let (fs, log, recs) = db_with_unflushed_wal();
    let (_, body_end) = recs[WAL_RECORDS - 2];
    for at in 0..body_end {
        let (start, _) = *recs.iter().find(|(s, e)| *s <= at && at < *e).unwrap();
        let mask = 1u8 << (at % 8);
        fs.corrupt(&log, at, mask).unwrap();
        match Db::open(dir(), opts(&fs)) {
            Ok(_) => panic!("flip at {at}: open succeeded over a damaged record"),
            Err(e) => assert_corruption_at(&e, &log, start, &format!("flip at {at}")),
        }
        fs.corrupt(&log, at, mask).unwrap();
    }
    let db = open_expecting_prefix(&fs, WAL_RECORDS, "after undoing the flips");
    db.close().unwrap();
}

/// A flipped bit in the payload of the last record is a torn tail: the
/// database opens without that write and keeps every earlier one, also
/// across later reopens.
#[test]
fn wal_flip_in_last_record_payload_is_a_torn_tail() {
    for pick in 0..3 {
        let (fs, log, recs) = db_with_unflushed_wal();
        let (start, end) = recs[WAL_RECORDS - 1];
        let at = match pick {
            0 => start + 12,
            1 => (start + 12 + end) / 2,
            _ => end - 1,
        };
        fs.corrupt(&log, at, 0x04).unwrap();
        let what = format!("flip at {at} in the last record [{start}, {end})");
        let db = open_expecting_prefix(&fs, WAL_RECORDS - 1, &what);
        db.put(b"later", b"write").unwrap();
        db.close().unwrap();
        let db = open_expecting_prefix(&fs, WAL_RECORDS - 1, &format!("{what}, reopened"));
        assert_eq!(db.get(b"later").unwrap(), Some(b"write".to_vec()));
        assert!(db.verify().unwrap().faults.is_empty());
    }
}

/// The header of a record has its own checksum; a header that fails it is
/// corruption wherever the record is (the record rules only treat a short
/// header, a length past the end, zeros, or a bad final payload as torn).
#[test]
fn wal_flip_in_last_record_header_is_corruption() {
    for at_in_header in [0, 5, 11] {
        let (fs, log, recs) = db_with_unflushed_wal();
        let (start, _) = recs[WAL_RECORDS - 1];
        fs.corrupt(&log, start + at_in_header, 0x01).unwrap();
        let e = Db::open(dir(), opts(&fs)).expect_err("open must fail");
        assert_corruption_at(&e, &log, start, "last header");
    }
}

/// A WAL cut inside its last record (a write the crash interrupted), or
/// followed by zero bytes (preallocated space), opens cleanly.
#[test]
fn wal_truncated_last_record_or_zero_tail_is_a_torn_tail() {
    let (_, _, recs) = db_with_unflushed_wal();
    let (start, end) = recs[WAL_RECORDS - 1];
    for cut in [
        start,
        start + 1,
        start + 11,
        start + 12,
        (start + end) / 2,
        end - 1,
    ] {
        let (fs, log, _) = db_with_unflushed_wal();
        fs.truncate(&log, cut).unwrap();
        let db = open_expecting_prefix(&fs, WAL_RECORDS - 1, &format!("cut at {cut}"));
        db.close().unwrap();
    }
    for zeros in [1usize, 11, 12, 100, 5000] {
        let (fs, log, _) = db_with_unflushed_wal();
        let mut f = fs.open_append(&log).unwrap();
        f.append(&vec![0u8; zeros]).unwrap();
        f.sync().unwrap();
        drop(f);
        let db = open_expecting_prefix(&fs, WAL_RECORDS, &format!("{zeros} zero bytes appended"));
        db.put(b"later", b"write").unwrap();
        db.close().unwrap();
        let db = open_expecting_prefix(&fs, WAL_RECORDS, &format!("{zeros} zeros, reopened"));
        assert_eq!(db.get(b"later").unwrap(), Some(b"write".to_vec()));
    }
}

/// A torn tail is still a torn tail after a recovery that was interrupted
/// (an I/O error, or a power loss, at any point of `open`): the next `open`
/// succeeds with every complete record.
#[test]
fn wal_torn_tail_survives_an_interrupted_recovery() {
    let torn_db = || {
        let (fs, log, recs) = db_with_unflushed_wal();
        let (start, end) = recs[WAL_RECORDS - 1];
        fs.truncate(&log, (start + end) / 2).unwrap();
        fs
    };
    let probe = torn_db();
    let start = probe.op_count();
    open_expecting_prefix(&probe, WAL_RECORDS - 1, "uninterrupted")
        .close()
        .unwrap();
    let total = probe.op_count() - start;
    for crash in [false, true] {
        for k in 0..total {
            let what = format!("recovery failing from operation {k} of {total}, crash {crash}");
            let fs = torn_db();
            fs.add_rule(sepkv::fs::FaultRule {
                skip: k,
                ..sepkv::fs::FaultRule::new(sepkv::fs::FaultOp::Any, sepkv::fs::FaultKind::Eio)
            });
            if let Ok(db) = Db::open(dir(), opts(&fs)) {
                let _ = db.close();
            }
            if crash {
                fs.crash();
            }
            fs.clear_rules();
            open_expecting_prefix(&fs, WAL_RECORDS - 1, &what)
                .close()
                .unwrap();
        }
    }
}

/// A WAL record payload: a write batch (`seq`, `count`, then entries of
/// `(type, key, value)`), see `batch.rs`.
fn batch_payload(seq: u64, count: u32, entries: &[(u8, &[u8], &[u8])]) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&seq.to_le_bytes());
    p.extend_from_slice(&count.to_le_bytes());
    for &(t, k, v) in entries {
        p.push(t);
        sepkv::format::coding::put_length_prefixed(&mut p, k);
        if t != 0 {
            sepkv::format::coding::put_length_prefixed(&mut p, v);
        }
    }
    p
}

/// Appends `payload` as a correctly checksummed record to the WAL of a
/// fresh [`db_with_unflushed_wal`] and opens it, catching panics. Returns
/// the log, the record's offset and the outcome (`None`: a panic).
fn open_with_appended_record(payload: &[u8]) -> (PathBuf, u64, Option<Result<()>>) {
    let (fs, log, recs) = db_with_unflushed_wal();
    let at = recs[WAL_RECORDS - 1].1;
    let mut rec = Vec::new();
    sepkv::format::record::encode_record(&mut rec, payload);
    let mut f = fs.open_append(&log).unwrap();
    f.append(&rec).unwrap();
    f.sync().unwrap();
    drop(f);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        Db::open(dir(), opts(&fs)).map(|db| {
            // Whatever was accepted must leave the earlier writes intact.
            for i in 0..WAL_RECORDS {
                assert_eq!(db.get(key(i)).unwrap(), Some(value(i)), "key {i}");
            }
            db.put(b"later", b"write").unwrap();
            assert_eq!(db.get(b"later").unwrap(), Some(b"write".to_vec()));
        })
    }));
    (log, at, outcome.ok())
}

/// A record whose checksum is right but whose batch is malformed is
/// corruption (it is not a torn write), even as the last record.
#[test]
fn wal_checksummed_but_malformed_batch_is_corruption() {
    let next = WAL_RECORDS as u64 + 1;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("garbage", b"definitely not a write batch".to_vec()),
        ("short header", vec![1, 2, 3]),
        (
            "count beyond entries",
            batch_payload(next, 2, &[(1, b"k", b"v")]),
        ),
        ("bytes after the entries", {
            let mut p = batch_payload(next, 1, &[(1, b"k", b"v")]);
            p.push(0);
            p
        }),
        (
            "unknown entry type",
            batch_payload(next, 1, &[(7, b"k", b"v")]),
        ),
    ];
    for (what, payload) in cases {
        let (log, at, outcome) = open_with_appended_record(&payload);
        match outcome {
            None => panic!("{what}: open panicked"),
            Some(Ok(())) => panic!("{what}: open accepted a malformed batch"),
            Some(Err(e)) => assert_corruption_at(&e, &log, at, what),
        }
    }
}

/// Sequence numbers are 56 bits. A checksummed batch whose sequence numbers
/// run past that (or an empty batch at sequence 0) is malformed; recovery
/// must report it as corruption, not overflow while replaying it.
#[test]
fn wal_batch_with_out_of_range_sequence_is_corruption() {
    const MAX_SEQ: u64 = (1 << 56) - 1;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty batch at sequence 0", batch_payload(0, 0, &[])),
        (
            "sequence past 56 bits",
            batch_payload(MAX_SEQ, 2, &[(1, b"k1", b"v"), (1, b"k2", b"v")]),
        ),
        (
            "sequence u64::MAX",
            batch_payload(u64::MAX, 1, &[(1, b"k", b"v")]),
        ),
    ];
    let mut failures = Vec::new();
    for (what, payload) in cases {
        let (log, at, outcome) = open_with_appended_record(&payload);
        match outcome {
            None => failures.push(format!("{what}: open panicked")),
            Some(Ok(())) => failures.push(format!("{what}: open accepted the batch")),
            Some(Err(Error::Corruption { file, offset, .. })) if file == log && offset == at => {}
            Some(Err(e)) => failures.push(format!("{what}: {e:?}")),
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

// ---------------------------------------------------------------------------
// Manifest and CURRENT.

/// A closed database whose live manifest holds several edits (the engine
/// starts a new manifest at every open, so the edits are made in the last
/// session). Returns the file system, the manifest, its records and the
/// number of keys written.
fn db_with_manifest_edits() -> (FaultFs, PathBuf, Vec<(u64, u64)>, usize) {
    let fs = FaultFs::new();
    let db = Db::open(dir(), opts(&fs)).unwrap();
    for i in 0..100 {
        db.put(key(i), value(i)).unwrap();
    }
    db.close().unwrap();
    let db = Db::open(dir(), opts(&fs)).unwrap();
    let mut n = 100;
    for _ in 0..4 {
        for i in n..n + 100 {
            db.put(key(i), value(i)).unwrap();
        }
        n += 100;
        db.flush().unwrap();
    }
    db.close().unwrap();
    let current = read(&fs, &dir().join("CURRENT"));
    let name = std::str::from_utf8(&current)
        .unwrap()
        .trim_end()
        .to_string();
    assert!(name.starts_with("MANIFEST-"), "{name:?}");
    let manifest = dir().join(&name);
    assert_eq!(
        files(&fs, |n| n.starts_with("MANIFEST-")),
        std::slice::from_ref(&manifest)
    );
    let recs = records(&read(&fs, &manifest));
    assert!(
        recs.len() >= 5,
        "expected a snapshot and four flush edits: {recs:?}"
    );
    (fs, manifest, recs, n)
}

#[track_caller]
fn check_all_keys(db: &Db, n: usize) {
    for i in 0..n {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i)), "key {i}");
    }
    assert_eq!(db.scan(.., false).unwrap().count(), n);
}

/// A flipped bit anywhere in a manifest record but the last makes `open`
/// fail with a corruption naming the manifest and the record's offset.
#[test]
fn manifest_flip_fails_open_with_the_record_offset() {
    let (fs, manifest, recs, n) = db_with_manifest_edits();
    let (_, end) = recs[recs.len() - 2];
    for at in 0..end {
        let (start, _) = *recs.iter().find(|(s, e)| *s <= at && at < *e).unwrap();
        let mask = 1u8 << (at % 8);
        fs.corrupt(&manifest, at, mask).unwrap();
        match Db::open(dir(), opts(&fs)) {
            Ok(_) => panic!("flip at {at}: open succeeded over a damaged manifest"),
            Err(e) => assert_corruption_at(&e, &manifest, start, &format!("flip at {at}")),
        }
        fs.corrupt(&manifest, at, mask).unwrap();
    }
    let db = Db::open(dir(), opts(&fs)).unwrap();
    check_all_keys(&db, n);
}

/// A checksummed manifest edit whose counters are out of range (a file
/// number or sequence number that cannot be incremented, a sequence number
/// past 56 bits) is corruption: open must report it naming the manifest,
/// not panic later while handing out numbers.
#[test]
fn manifest_edit_with_out_of_range_counters_is_corruption() {
    use sepkv::index::version::VersionEdit;
    let cases = [
        (
            "next_file_number u64::MAX",
            VersionEdit {
                next_file_number: Some(u64::MAX),
                ..Default::default()
            },
        ),
        (
            "last_sequence u64::MAX",
            VersionEdit {
                last_sequence: Some(u64::MAX),
                ..Default::default()
            },
        ),
        (
            "last_sequence past 56 bits",
            VersionEdit {
                last_sequence: Some(1 << 56),
                ..Default::default()
            },
        ),
    ];
    let mut failures = Vec::new();
    for (what, edit) in cases {
        let (fs, manifest, _, n) = db_with_manifest_edits();
        let at = fs.file_len(&manifest).unwrap();
        let mut rec = Vec::new();
        sepkv::format::record::encode_record(&mut rec, &edit.encode());
        let mut f = fs.open_append(&manifest).unwrap();
        f.append(&rec).unwrap();
        f.sync().unwrap();
        drop(f);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Db::open(dir(), opts(&fs)).map(|db| {
                check_all_keys(&db, n);
                db.put(b"later", b"write").unwrap();
                db.flush().unwrap();
                assert_eq!(db.get(b"later").unwrap(), Some(b"write".to_vec()));
            })
        }));
        match outcome {
            Err(_) => failures.push(format!("{what}: panicked")),
            Ok(Ok(())) => failures.push(format!("{what}: accepted")),
            Ok(Err(Error::Corruption { file, offset, .. })) if file == manifest && offset == at => {
            }
            Ok(Err(e)) => failures.push(format!("{what}: {e:?}")),
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// `CURRENT` holding anything but `MANIFEST-<n>\n` is a corruption naming
/// `CURRENT`; putting the right content back restores the database.
#[test]
fn current_garbage_is_corruption_naming_current() {
    let (fs, _manifest, _, n) = db_with_manifest_edits();
    let current = dir().join("CURRENT");
    let original = read(&fs, &current);
    let mut flipped = original.clone();
    flipped[0] ^= 0x01;
    let no_newline = original[..original.len() - 1].to_vec();
    let garbage: Vec<Vec<u8>> = vec![
        Vec::new(),
        b"\n".to_vec(),
        b"hello world\n".to_vec(),
        b"\xff\xfe\x00garbage\n".to_vec(),
        b"../MANIFEST-000001\n".to_vec(),
        b"MANIFEST-000003/x\n".to_vec(),
        flipped,
        no_newline,
    ];
    for g in garbage {
        write_atomic(&fs, &current, &g).unwrap();
        match Db::open(dir(), opts(&fs)) {
            Ok(_) => panic!("CURRENT = {g:?}: open succeeded"),
            Err(e) => assert_corruption_of(&e, &current, &format!("CURRENT = {g:?}")),
        }
    }
    write_atomic(&fs, &current, &original).unwrap();
    let db = Db::open(dir(), opts(&fs)).unwrap();
    check_all_keys(&db, n);
}

/// `CURRENT` naming a manifest that does not exist fails `open` with an
/// error naming the missing manifest (or `CURRENT`), and changes nothing.
#[test]
fn current_naming_a_missing_manifest_fails_open() {
    let (fs, manifest, _, n) = db_with_manifest_edits();
    let current = dir().join("CURRENT");
    let original = read(&fs, &current);
    write_atomic(&fs, &current, b"MANIFEST-999999\n").unwrap();
    let missing = dir().join("MANIFEST-999999");
    match Db::open(dir(), opts(&fs)) {
        Ok(_) => panic!("open succeeded with CURRENT naming a missing manifest"),
        Err(Error::Corruption { file, .. }) if file == current || file == missing => {}
        Err(Error::Io { path, source })
            if path == missing && source.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => panic!("unexpected error {e:?}"),
    }
    assert!(fs.exists(&manifest), "the real manifest is kept");
    write_atomic(&fs, &current, &original).unwrap();
    let db = Db::open(dir(), opts(&fs)).unwrap();
    check_all_keys(&db, n);
}

// ---------------------------------------------------------------------------
// IDENTITY.

const MAGIC_LEN: u64 = "sepkv-identity".len() as u64;

/// A closed database with a few keys; returns its IDENTITY's content.
fn small_db(fs: &FaultFs) -> Vec<u8> {
    let db = Db::open(dir(), opts(fs)).unwrap();
    for i in 0..50 {
        db.put(key(i), value(i)).unwrap();
    }
    db.close().unwrap();
    read(fs, &dir().join("IDENTITY"))
}

/// Every single-bit flip of IDENTITY is refused as documented in
/// `identity.rs` — `NotADatabase` when the magic line is damaged (or the
/// file is no longer text), `Corruption` naming IDENTITY otherwise — unless
/// it leaves the recorded content equal (an upper/lower-case change of a
/// checksum hex digit, or a trailing-whitespace change), in which case the
/// database opens with all its data. A refused open never rewrites the file.
#[test]
fn identity_bit_flips_are_refused() {
    let fs = FaultFs::new();
    let original = small_db(&fs);
    let id = dir().join("IDENTITY");
    let crc_at = original.windows(4).position(|w| w == b"crc=").unwrap() as u64;
    let mut accepted = Vec::new();
    for at in 0..original.len() as u64 {
        for bit in 0..8 {
            let mask = 1u8 << bit;
            fs.corrupt(&id, at, mask).unwrap();
            let flipped = read(&fs, &id);
            let what = format!("flip {mask:#04x} at {at}");
            match Db::open(dir(), opts(&fs)) {
                Ok(db) => {
                    accepted.push((at, mask));
                    // Only a flip that leaves the recorded content equal
                    // may pass: the case of a checksum hex digit, or the
                    // final newline turned into other whitespace.
                    let (old, new) = (original[at as usize], flipped[at as usize]);
                    let hex_case = at > crc_at + 3
                        && old.is_ascii_hexdigit()
                        && new.eq_ignore_ascii_case(&old);
                    let last_ws = at + 1 == original.len() as u64
                        && (new.is_ascii_whitespace() || new == 0x0b);
                    assert!(
                        hex_case || last_ws,
                        "{what}: accepted a flip that changes the content"
                    );
                    assert_eq!(db.get(key(7)).unwrap(), Some(value(7)), "{what}");
                    db.close().unwrap();
                }
                Err(Error::NotADatabase { path, .. }) => {
                    assert_eq!(path, dir(), "{what}");
                    let text = std::str::from_utf8(&flipped);
                    assert!(
                        at < MAGIC_LEN || text.is_err(),
                        "{what}: NotADatabase for a text file with an intact magic line"
                    );
                }
                Err(e) => {
                    assert_corruption_of(&e, &id, &what);
                    assert!(
                        at >= MAGIC_LEN,
                        "{what}: a damaged magic line means a foreign file"
                    );
                }
            }
            assert_eq!(read(&fs, &id), flipped, "{what}: IDENTITY was rewritten");
            fs.corrupt(&id, at, mask).unwrap();
        }
    }
    assert!(accepted.len() <= 9, "{accepted:?}");
    let db = Db::open(dir(), opts(&fs)).unwrap();
    check_all_keys(&db, 50);
}

/// `identity.rs` documents `NotADatabase` only for a missing magic line and
/// an unsupported version, and `Corruption` for damage to a file that has
/// the magic line. A flip that sets the high bit of a byte after the magic
/// line makes the file invalid UTF-8, and is reported as `NotADatabase`
/// ("IDENTITY is not text") instead of a corruption of IDENTITY.
#[test]
fn identity_non_text_damage_after_magic_is_corruption() {
    let fs = FaultFs::new();
    let original = small_db(&fs);
    let id = dir().join("IDENTITY");
    for at in MAGIC_LEN..original.len() as u64 {
        fs.corrupt(&id, at, 0x80).unwrap();
        let e = Db::open(dir(), opts(&fs)).expect_err("open must fail");
        assert_corruption_of(&e, &id, &format!("high bit set at {at}"));
        fs.corrupt(&id, at, 0x80).unwrap();
    }
}

/// An IDENTITY that is empty, lost its checksum line, or is missing from a
/// directory that holds a database is refused, and nothing is overwritten:
/// restoring the file brings the database back.
#[test]
fn identity_truncated_or_missing_is_refused_without_damage() {
    let fs = FaultFs::new();
    let original = small_db(&fs);
    let id = dir().join("IDENTITY");
    let crc_at = original.windows(4).position(|w| w == b"crc=").unwrap() as u64;

    // Empty: no magic line, so per identity.rs not recognisable.
    fs.truncate(&id, 0).unwrap();
    let e = Db::open(dir(), opts(&fs)).expect_err("open must fail");
    assert!(matches!(e, Error::NotADatabase { .. }), "{e:?}");
    assert!(read(&fs, &id).is_empty(), "IDENTITY must not be rewritten");

    // No checksum line: a corruption.
    write_atomic(&fs, &id, &original[..crc_at as usize]).unwrap();
    let e = Db::open(dir(), opts(&fs)).expect_err("open must fail");
    assert_corruption_of(&e, &id, "no checksum line");
    // Cut in the middle of the checksum.
    write_atomic(&fs, &id, &original[..crc_at as usize + 6]).unwrap();
    let e = Db::open(dir(), opts(&fs)).expect_err("open must fail");
    assert_corruption_of(&e, &id, "cut checksum");

    // Missing from a directory full of database files: not a fresh database.
    fs.remove(&id).unwrap();
    let before = fs.list(dir()).unwrap();
    let e = Db::open(dir(), opts(&fs)).expect_err("open must fail");
    assert!(matches!(e, Error::NotADatabase { .. }), "{e:?}");
    assert!(!fs.exists(&id), "no new IDENTITY over an existing database");
    let mut after = fs.list(dir()).unwrap();
    after.retain(|n| n != "LOCK");
    let mut before = before;
    before.retain(|n| n != "LOCK");
    assert_eq!(after, before, "files changed by a refused open");

    write_atomic(&fs, &id, &original).unwrap();
    let db = Db::open(dir(), opts(&fs)).unwrap();
    check_all_keys(&db, 50);
}

/// The LWC-tree's DTables (LWC-tree §3.3): a flipped bit anywhere in a
/// DTable of two or more segments — data blocks, per-block filters, index
/// blocks, segment footers, the segment directory, the overlapped
/// metaindex, the DTable footer — is reported by `verify` after a reopen as
/// a corruption of that file, and no read returns a wrong value.
#[test]
fn dtable_bit_flips_anywhere_are_caught_after_reopen() {
    let fs = FaultFs::new();
    let lwc = |fs: &FaultFs| Options {
        fs: Arc::new(fs.clone()),
        write_buffer_size: 64 << 10,
        target_file_size: 64 << 10,
        max_bytes_for_level_base: 256 << 10,
        l0_compaction_trigger: 1,
        block_size: 1024,
        // Overwrites are appended as segments, never merged away by the
        // reclaim: the DTables under test keep several segments.
        lwc_dead_share: 1.0,
        ..Options::preset(sepkv::Preset::Lwc)
    };
    let n = 1200;
    let db = Db::open(dir(), lwc(&fs)).unwrap();
    for i in 0..n {
        db.put(key(i), value(i)).unwrap();
    }
    db.flush().unwrap();
    db.wait_idle().unwrap();
    // Overwrite every key with its own value again: new segments.
    for round in 0..2 {
        for i in (round..n).step_by(2) {
            db.put(key(i), value(i)).unwrap();
        }
        db.flush().unwrap();
        db.wait_idle().unwrap();
    }
    let levels = db.stats().unwrap().levels;
    db.close().unwrap();
    assert!(
        levels.iter().any(|l| l.segments > l.files as u64),
        "no DTable with two segments: {levels:?}"
    );
    // The largest table file is a DTable with several segments.
    let table = files(&fs, |n| n.ends_with(".sst"))
        .into_iter()
        .max_by_key(|p| read(&fs, p).len())
        .unwrap();
    let len = read(&fs, &table).len() as u64;
    assert_eq!(&read(&fs, &table)[len as usize - 8..], b"sepkvDTB");
    // The live bytes: each segment the directory lists, and the newest
    // tail (directory block to the end). Earlier tails are dead bytes an
    // append left behind; nothing reads them.
    let bytes = read(&fs, &table);
    let mut f = &bytes[len as usize - 56..];
    let dir_at = get_varint64(&mut f).unwrap();
    let dir_len = get_varint64(&mut f).unwrap();
    let mut d = &bytes[dir_at as usize..(dir_at + dir_len) as usize];
    let mut live = vec![(dir_at, len)];
    for _ in 0..get_varint64(&mut d).unwrap() {
        let (_seq, end) = (get_varint64(&mut d).unwrap(), get_varint64(&mut d).unwrap());
        let (_entries, size) = (get_varint64(&mut d).unwrap(), get_varint64(&mut d).unwrap());
        live.push((end - size, end));
    }
    assert!(live.len() >= 3, "{live:?}");
    let is_live = |o: u64| live.iter().any(|&(a, b)| a <= o && o < b);
    let mut rng = StdRng::seed_from_u64(11);
    // Every third byte of the newest tail and a sample of the rest.
    let mut at: BTreeSet<u64> = (dir_at..len).step_by(3).collect();
    while at.len() < 330 {
        let o = rng.gen_range(0..len);
        if is_live(o) {
            at.insert(o);
        }
    }
    for &off in &at {
        fs.corrupt(&table, off, 0x10).unwrap();
        let db = Db::open(dir(), lwc(&fs));
        let db = match db {
            Ok(db) => db,
            Err(e) => {
                assert_corruption_of(&e, &table, "open over a damaged DTable");
                fs.corrupt(&table, off, 0x10).unwrap();
                continue;
            }
        };
        for i in (0..n).step_by(7) {
            match db.get(key(i)) {
                Ok(v) => assert_eq!(v, Some(value(i)), "byte {off}: key {i}"),
                Err(e) => assert_corruption_of(&e, &table, "read of a damaged DTable"),
            }
        }
        let rep = db.verify().unwrap();
        assert!(
            rep.faults
                .iter()
                .any(|e| matches!(e, Error::Corruption { file, .. } if file == &table)),
            "flip at byte {off} of {} undetected: {:?}",
            table.display(),
            rep.faults
        );
        db.close().unwrap();
        fs.corrupt(&table, off, 0x10).unwrap();
    }
}
