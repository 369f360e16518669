//! Tests of the table reader and its iterator.

use super::iter::*;
use super::*;
use crate::fs::WritableFile;
use crate::index::key::{
    append_internal_key, internal_key, seek_key, ValueType, MAX_SEQ, TYPE_FOR_SEEK,
};
use crate::index::sstable::block::block_trailer;
use crate::index::sstable::footer::FORMAT_VERSION;
use crate::index::sstable::{TableBuilder, TableOptions, TableSummary};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::io;
use std::sync::Mutex;

const NAME: &str = "000042.sst";

/// A `Vec<u8>`-backed file being written.
#[derive(Clone, Default)]
struct VecFile {
    data: Arc<Mutex<Vec<u8>>>,
    syncs: Arc<Mutex<usize>>,
}

impl WritableFile for VecFile {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.data.lock().unwrap().extend_from_slice(data);
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn sync(&mut self) -> io::Result<()> {
        *self.syncs.lock().unwrap() += 1;
        Ok(())
    }
    fn len(&self) -> u64 {
        self.data.lock().unwrap().len() as u64
    }
}

/// A `Vec<u8>`-backed file being read.
struct VecReader(Vec<u8>);

impl RandomAccessFile for VecReader {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let off = usize::try_from(offset).unwrap_or(usize::MAX);
        let Some(src) = self.0.get(off..) else {
            return Ok(0);
        };
        let n = src.len().min(buf.len());
        buf[..n].copy_from_slice(&src[..n]);
        Ok(n)
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.len() as u64)
    }
}

type Entries = Vec<(Vec<u8>, Vec<u8>)>;

fn topts(block_size: usize, restart_interval: usize, bloom_bits_per_key: usize) -> TableOptions {
    TableOptions {
        block_size,
        restart_interval,
        bloom_bits_per_key,
        block_align: false,
    }
}

fn build_with_stats(
    entries: &Entries,
    opts: TableOptions,
    stats: Arc<IoStats>,
) -> (Vec<u8>, TableSummary) {
    let file = VecFile::default();
    let mut b = TableBuilder::new(
        Box::new(file.clone()),
        PathBuf::from(NAME),
        opts,
        stats,
        IoCategory::Flush,
    );
    for (k, v) in entries {
        b.add(k, v).unwrap();
    }
    assert_eq!(b.num_entries(), entries.len() as u64);
    let summary = b.finish().unwrap();
    assert_eq!(*file.syncs.lock().unwrap(), 1, "finish syncs the file");
    let bytes = file.data.lock().unwrap().clone();
    (bytes, summary)
}

fn build(entries: &Entries, opts: TableOptions) -> Vec<u8> {
    build_with_stats(entries, opts, Arc::new(IoStats::default())).0
}

fn open_with(
    bytes: Vec<u8>,
    size: u64,
    cache: Option<Arc<BlockCache>>,
) -> Result<(Arc<Table>, Arc<IoStats>)> {
    let stats = Arc::new(IoStats::default());
    let t = Table::open(
        Arc::new(VecReader(bytes)),
        PathBuf::from(NAME),
        42,
        size,
        cache,
        stats.clone(),
        IoCategory::UserRead,
    )?;
    Ok((Arc::new(t), stats))
}

fn open(bytes: Vec<u8>) -> Result<Arc<Table>> {
    let size = bytes.len() as u64;
    Ok(open_with(bytes, size, None)?.0)
}

const CTX: ReadCtx = ReadCtx {
    category: IoCategory::UserRead,
    fill_cache: true,
};

/// Scans forward from the first entry; returns the entries seen and the
/// final status.
fn scan(t: &Arc<Table>) -> (Entries, Result<()>) {
    let mut it = t.iter(CTX);
    it.seek_to_first();
    let mut out = Vec::new();
    while it.valid() {
        out.push((it.key().to_vec(), it.value().to_vec()));
        it.next();
    }
    (out, it.status())
}

fn scan_back(t: &Arc<Table>) -> (Entries, Result<()>) {
    let mut it = t.iter(CTX);
    it.seek_to_last();
    let mut out = Vec::new();
    while it.valid() {
        out.push((it.key().to_vec(), it.value().to_vec()));
        it.prev();
    }
    out.reverse();
    (out, it.status())
}

fn ok(r: (Entries, Result<()>)) -> Entries {
    r.1.unwrap();
    r.0
}

fn value_entries(n: usize, seed: u64) -> Entries {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|i| {
            let k = internal_key(
                format!("key{i:06}").as_bytes(),
                rng.gen_range(1..1000),
                ValueType::Value,
            );
            let len = rng.gen_range(0..200);
            let v: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            (k, v)
        })
        .collect()
}

/// Writes `bytes` to a file of a fresh directory and opens it as a table
/// recorded at `size` bytes, read through a mapping of the file (the
/// operating system's file system), with a block cache.
fn open_mapped(bytes: &[u8], size: u64) -> (tempfile::TempDir, Result<Arc<Table>>, Arc<IoStats>) {
    use crate::fs::{FileSystem, MappedFile, StdFs};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(NAME);
    std::fs::write(&path, bytes).unwrap();
    let file = MappedFile::wrap(StdFs.open_read(&path).unwrap());
    assert!(file.mapping().is_some());
    let stats = Arc::new(IoStats::default());
    let t = Table::open(
        Arc::from(file),
        path,
        42,
        size,
        Some(Arc::new(BlockCache::new(1 << 20))),
        stats.clone(),
        IoCategory::UserRead,
    );
    (dir, t.map(Arc::new), stats)
}

#[test]
fn a_mapped_table_serves_blocks_in_place_and_compaction_by_system_calls() {
    let entries = value_entries(2_000, 7);
    let bytes = build(&entries, topts(1024, 4, 10));
    let (_dir, t, stats) = open_mapped(&bytes, bytes.len() as u64);
    let t = t.unwrap();
    let read = || stats.snapshot().read_in(IoCategory::UserRead);
    let before = read();
    assert_eq!(ok(scan(&t)), entries);
    assert_eq!(ok(scan_back(&t)), entries);
    // Every block read in place is still counted as read.
    assert!(
        read() - before >= 2 * (bytes.len() as u64 / 2),
        "{}",
        read() - before
    );
    for (k, v) in entries.iter().step_by(97) {
        assert_eq!(t.get(k, CTX).unwrap(), Some((k.clone(), v.clone())));
    }
    let mut idx = BlockIter::new(t.index.clone(), compare_internal);
    idx.seek_to_first();
    let h = BlockHandle::decode_exact(idx.value()).unwrap();
    assert!(t.data_block(h, CTX).unwrap().is_mapped());
    // Not cached: the page cache holds the bytes.
    assert!(t.cache.as_ref().unwrap().get(42, h.offset).is_none());
    for category in [IoCategory::Compaction, IoCategory::Flush] {
        let ctx = ReadCtx {
            category,
            fill_cache: false,
        };
        assert!(!t.data_block(h, ctx).unwrap().is_mapped(), "{category:?}");
    }
}

/// A file that records the read-ahead hints it is given.
struct HintedFile {
    inner: Box<dyn RandomAccessFile>,
    hints: Arc<parking_lot::Mutex<Vec<(u64, u64)>>>,
}

impl RandomAccessFile for HintedFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read_at(offset, buf)
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn advise(&self, offset: u64, len: u64, advice: Advice) {
        assert_eq!(advice, Advice::WillNeed);
        self.hints.lock().push((offset, len));
    }
    fn map(&self) -> io::Result<Option<Arc<Mapping>>> {
        self.inner.map()
    }
}

#[test]
fn a_scan_reads_ahead_only_while_mapped_reads_reach_the_device() {
    use crate::fs::{FileSystem, MappedFile, StdFs};
    let entries = value_entries(3_000, 11);
    let bytes = build(&entries, topts(1024, 4, 10));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(NAME);
    std::fs::write(&path, &bytes).unwrap();
    let hints = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let file = MappedFile::wrap(Box::new(HintedFile {
        inner: StdFs.open_read(&path).unwrap(),
        hints: hints.clone(),
    }));
    let cache = Arc::new(BlockCache::new(1 << 20));
    let t = Arc::new(
        Table::open(
            Arc::from(file),
            path,
            42,
            bytes.len() as u64,
            Some(cache.clone()),
            Arc::new(IoStats::default()),
            IoCategory::UserRead,
        )
        .unwrap(),
    );
    // Served from memory: no hint.
    assert_eq!(ok(scan(&t)), entries);
    assert!(hints.lock().is_empty());

    // Mapped reads now take as long as device reads.
    for _ in 0..64 {
        cache
            .map_gauge()
            .record(crate::index::sstable::map_gauge::SLOW_READ_NANOS);
    }
    assert!(cache.map_gauge().reaching_device());
    assert_eq!(ok(scan(&t)), entries);
    let h = hints.lock().clone();
    assert!(h.len() >= 2, "{h:?}");
    // Hints in file order, not overlapping, none longer than the cap,
    // and none past the footer.
    assert_eq!(h[0].1, READ_AHEAD_MIN);
    for w in h.windows(2) {
        assert!(w[1].0 >= w[0].0 + w[0].1, "{h:?}");
        assert!(w[1].1 <= READ_AHEAD_MAX, "{h:?}");
    }
    assert!(h.iter().all(|&(o, l)| o + l <= t.footer_offset()));
    // The scan reached the last block: the hints reach the table's end.
    let (o, l) = *h.last().unwrap();
    assert_eq!(o + l, t.footer_offset(), "{h:?}");

    // A seek reading one block, and compaction reads, hint nothing.
    hints.lock().clear();
    let mut it = t.iter(CTX);
    it.seek(&entries[1_500].0);
    assert!(it.valid());
    let mut it = t.iter(ReadCtx {
        category: IoCategory::Compaction,
        fill_cache: false,
    });
    it.seek_to_first();
    while it.valid() {
        it.next();
    }
    assert!(hints.lock().is_empty(), "{:?}", hints.lock());
}

#[test]
fn damage_in_a_mapped_table_is_corruption_with_file_and_offset() {
    let entries = value_entries(500, 8);
    let bytes = build(&entries, topts(1024, 4, 10));
    let l = layout(&bytes);
    let (h, _) = l.data[l.data.len() / 2];
    let mut damaged = bytes.clone();
    damaged[h.offset as usize + 3] ^= 0x10;
    let (_dir, t, _) = open_mapped(&damaged, damaged.len() as u64);
    let t = t.unwrap();
    let e = scan(&t).1.unwrap_err();
    match &e {
        Error::Corruption { file, offset, .. } => {
            assert!(file.ends_with(NAME), "{e}");
            assert_eq!(*offset, h.offset, "{e}");
        }
        other => panic!("expected corruption, got {other}"),
    }
}

#[test]
fn a_mapped_block_is_checksummed_once_per_open_table() {
    use std::os::unix::fs::FileExt;
    let entries = value_entries(500, 11);
    let bytes = build(&entries, topts(1024, 4, 10));
    let l = layout(&bytes);
    let (h, _) = l.data[l.data.len() / 2];
    // Without a block cache there is no map gauge: every load is in place.
    let open_uncached = |path: &std::path::Path, size: u64| {
        use crate::fs::{FileSystem, MappedFile, StdFs};
        let file = MappedFile::wrap(StdFs.open_read(path).unwrap());
        assert!(file.mapping().is_some());
        let stats = Arc::new(IoStats::default());
        let t = Table::open(
            Arc::from(file),
            std::path::PathBuf::from(NAME),
            42,
            size,
            None,
            stats,
            IoCategory::UserRead,
        );
        Arc::new(t.unwrap())
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(NAME);
    std::fs::write(&path, &bytes).unwrap();
    let t = open_uncached(&path, bytes.len() as u64);
    // The first scan checksums every block.
    assert_eq!(ok(scan(&t)), entries);
    // A checksum byte of one block changes on disk; the mapping shows it.
    let at = h.offset + h.size + 1;
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&[bytes[at as usize] ^ 0x55], at).unwrap();
    drop(f);
    // Loads of the verified block trust it: the entries are unchanged.
    assert_eq!(ok(scan(&t)), entries);
    // `verify` re-reads and checksums every block.
    assert_corruption_at(&t.verify().unwrap_err(), h.offset, h.offset + 1);
    // A table opened again checksums the block at its first load.
    let e = scan(&open_uncached(&path, bytes.len() as u64))
        .1
        .unwrap_err();
    assert_corruption_at(&e, h.offset, h.offset + 1);
}

#[test]
fn a_mapped_table_shorter_than_recorded_is_corruption_not_a_fault() {
    // The file lost its tail (and with it the pages a mapping would
    // fault on) but the table is opened at its recorded size: the footer
    // is then read with a system call and found missing.
    let entries = value_entries(500, 9);
    let bytes = build(&entries, topts(1024, 4, 10));
    let cut = bytes.len() / 2;
    let (_dir, t, _) = open_mapped(&bytes[..cut], bytes.len() as u64);
    assert!(matches!(t, Err(Error::Corruption { .. })), "{:?}", t.err());
    // A block handle past the mapping's end is caught before any byte of
    // it is touched.
    let (_dir, t, _) = open_mapped(&bytes, bytes.len() as u64);
    let t = t.unwrap();
    let map = t.src.map.clone().unwrap();
    let far = BlockHandle {
        offset: map.len() as u64 - 10,
        size: 4,
    };
    let e = t
        .src
        .mapped_block(&map, far, 0, IoCategory::UserRead, false)
        .unwrap_err();
    assert!(
        matches!(e, Error::Corruption { .. }) && e.to_string().contains("out of range"),
        "{e}"
    );
}

fn assert_corruption_at(e: &Error, lo: u64, hi: u64) {
    match e {
        Error::Corruption {
            file,
            offset,
            reason,
        } => {
            assert_eq!(file, Path::new(NAME), "{e}");
            assert!(
                (lo..hi).contains(offset),
                "offset {offset} not in {lo}..{hi}: {reason}"
            );
        }
        other => panic!("expected corruption, got {other}"),
    }
}

#[test]
fn table_is_send_sync_and_iterator_is_send() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Table>();
    send::<TableIterator>();
    send::<TableBuilder>();
}

#[test]
fn roundtrip_10k_keys() {
    let entries = value_entries(10_000, 1);
    let stats = Arc::new(IoStats::default());
    let (bytes, summary) = build_with_stats(&entries, TableOptions::default(), stats.clone());
    assert_eq!(summary.file_size, bytes.len() as u64);
    assert_eq!(summary.entries, 10_000);
    assert_eq!(summary.smallest, entries[0].0);
    assert_eq!(summary.largest, entries[9_999].0);
    assert_eq!(
        stats.snapshot().written_in(IoCategory::Flush),
        bytes.len() as u64
    );
    assert_eq!(stats.snapshot().total_read(), 0);

    let t = open(bytes).unwrap();
    assert_eq!(t.file_number(), 42);
    assert_eq!(t.path(), Path::new(NAME));
    assert_eq!(t.file_size(), summary.file_size);
    // 10k keys at 10 bits each, plus an index entry per block.
    assert!(
        t.approximate_memory() > 12_500,
        "{}",
        t.approximate_memory()
    );
    assert_eq!(ok(scan(&t)), entries.clone());
    assert_eq!(ok(scan_back(&t)), entries.clone());
    for (k, v) in &entries {
        let got = t.get(&seek_key(user_key(k), MAX_SEQ), CTX).unwrap();
        assert_eq!(got.as_ref(), Some(&(k.clone(), v.clone())));
    }
    assert_eq!(t.get(&seek_key(b"key", MAX_SEQ), CTX).unwrap(), None);
    assert_eq!(t.get(&seek_key(b"key0100000", MAX_SEQ), CTX).unwrap(), None);
    assert_eq!(t.get(&seek_key(b"zzz", MAX_SEQ), CTX).unwrap(), None);
    assert_eq!(t.verify().unwrap(), 10_000);
}

#[test]
fn empty_table() {
    let bytes = build(&vec![], TableOptions::default());
    let t = open(bytes).unwrap();
    assert_eq!(ok(scan(&t)), vec![]);
    assert_eq!(ok(scan_back(&t)), vec![]);
    let mut it = t.iter(CTX);
    it.seek(&seek_key(b"a", 5));
    assert!(!it.valid());
    assert_eq!(t.get(&seek_key(b"a", 5), CTX).unwrap(), None);
    assert_eq!(t.verify().unwrap(), 0);
}

#[test]
fn get_picks_the_newest_visible_version() {
    let mut entries = Vec::new();
    entries.push((internal_key(b"aaa", 3, ValueType::Value), b"a3".to_vec()));
    for seq in (1..=100u64).rev() {
        let t = if seq % 10 == 0 {
            ValueType::Deletion
        } else {
            ValueType::Value
        };
        entries.push((
            internal_key(b"apple", seq, t),
            format!("apple@{seq}").into_bytes(),
        ));
    }
    entries.push((
        internal_key(b"banana", 5, ValueType::Pointer),
        b"ptr".to_vec(),
    ));
    for bloom in [0, 10] {
        // Tiny blocks: the versions of "apple" span many blocks.
        let t = open(build(&entries, topts(64, 2, bloom))).unwrap();
        assert!(t.index.size() > 64 * 4);
        for s in 0..=110u64 {
            let got = t.get(&seek_key(b"apple", s), CTX).unwrap();
            if s == 0 {
                assert_eq!(got, None);
                continue;
            }
            let want_seq = s.min(100);
            let (k, v) = got.expect("a visible version");
            let p = parse_internal_key(&k).unwrap();
            assert_eq!((p.user_key, p.seq), (&b"apple"[..], want_seq));
            assert_eq!(p.vtype == ValueType::Deletion, want_seq % 10 == 0);
            assert_eq!(v, format!("apple@{want_seq}").into_bytes());
        }
        assert_eq!(t.get(&seek_key(b"appl", MAX_SEQ), CTX).unwrap(), None);
        assert_eq!(t.get(&seek_key(b"apple\0", MAX_SEQ), CTX).unwrap(), None);
        assert_eq!(t.get(&seek_key(b"banana", 4), CTX).unwrap(), None);
        let (k, v) = t.get(&seek_key(b"banana", 5), CTX).unwrap().unwrap();
        assert_eq!(
            (k, v),
            (
                internal_key(b"banana", 5, ValueType::Pointer),
                b"ptr".to_vec()
            )
        );
        // An exact internal key finds itself.
        let exact = internal_key(b"apple", 37, ValueType::Value);
        assert_eq!(t.get(&exact, CTX).unwrap().unwrap().0, exact);
        assert_eq!(t.verify().unwrap(), entries.len() as u64);
    }
}

#[test]
fn bloom_filter_has_no_false_negatives_and_few_false_positives() {
    let entries = value_entries(10_000, 2);
    let (t, stats) = {
        let bytes = build(&entries, topts(4096, 16, 10));
        let size = bytes.len() as u64;
        open_with(bytes, size, None).unwrap()
    };
    for (k, _) in &entries {
        assert!(t
            .get(&seek_key(user_key(k), MAX_SEQ), CTX)
            .unwrap()
            .is_some());
    }
    let probes = 10_000;
    let mut passed = 0;
    for i in 0..probes {
        let before = stats.snapshot().total_read();
        let absent = format!("absent{i:06}");
        assert_eq!(
            t.get(&seek_key(absent.as_bytes(), MAX_SEQ), CTX).unwrap(),
            None
        );
        if stats.snapshot().total_read() > before {
            passed += 1;
        }
    }
    let rate = passed as f64 / probes as f64;
    assert!(rate < 0.02, "false-positive rate {rate}");
    // Without a filter every probe reads a block.
    let bytes = build(&entries, topts(4096, 16, 0));
    let size = bytes.len() as u64;
    let (t, stats) = open_with(bytes, size, None).unwrap();
    assert!(t.filter.is_none());
    for i in 0..100 {
        let before = stats.snapshot().total_read();
        let absent = format!("key{i:06}x");
        assert_eq!(
            t.get(&seek_key(absent.as_bytes(), MAX_SEQ), CTX).unwrap(),
            None
        );
        assert!(stats.snapshot().total_read() > before);
    }
}

#[test]
fn cache_hits_avoid_reads() {
    let entries = value_entries(2_000, 3);
    let bytes = build(&entries, topts(1024, 16, 10));
    let size = bytes.len() as u64;
    let cache = Arc::new(BlockCache::new(8 << 20));
    let (t, stats) = open_with(bytes, size, Some(cache.clone())).unwrap();
    let reads = || stats.snapshot().read_in(IoCategory::UserRead);
    let uncached = ReadCtx {
        category: IoCategory::UserRead,
        fill_cache: false,
    };
    let k1 = seek_key(user_key(&entries[10].0), MAX_SEQ);
    let k2 = seek_key(user_key(&entries[1_500].0), MAX_SEQ);

    let r0 = reads();
    assert!(t.get(&k1, CTX).unwrap().is_some());
    let r1 = reads();
    assert!(
        r1 > r0 && r1 - r0 <= 1024 + 500,
        "one block read: {}",
        r1 - r0
    );
    assert!(t.get(&k1, CTX).unwrap().is_some());
    assert_eq!(reads(), r1, "second get is served by the cache");

    // fill_cache = false reads but does not insert.
    assert!(t.get(&k2, uncached).unwrap().is_some());
    let r2 = reads();
    assert!(r2 > r1);
    assert!(t.get(&k2, uncached).unwrap().is_some());
    let r3 = reads();
    assert_eq!(r3 - r2, r2 - r1);
    // ... but it does use blocks that are cached.
    assert!(t.get(&k1, uncached).unwrap().is_some());
    assert_eq!(reads(), r3);

    // A full scan fills the cache; a second scan reads nothing.
    assert_eq!(scan(&t).0.len(), 2_000);
    let r4 = reads();
    assert_eq!(scan(&t).0.len(), 2_000);
    assert_eq!(scan_back(&t).0.len(), 2_000);
    assert_eq!(reads(), r4);

    // The same cache serving another table does not mix up blocks.
    let other = value_entries(2_000, 4);
    let bytes = build(&other, topts(1024, 16, 10));
    let size = bytes.len() as u64;
    let stats2 = Arc::new(IoStats::default());
    let t2 = Table::open(
        Arc::new(VecReader(bytes)),
        PathBuf::from("other"),
        43,
        size,
        Some(cache),
        stats2,
        IoCategory::UserRead,
    )
    .unwrap();
    let t2 = Arc::new(t2);
    assert_eq!(scan(&t2).0, other);
    assert_eq!(scan(&t).0, entries);
}

#[test]
fn concurrent_readers_share_a_table_and_a_small_cache() {
    let entries = Arc::new(value_entries(3_000, 8));
    let bytes = build(&entries, topts(1024, 16, 10));
    let size = bytes.len() as u64;
    // Room for a few blocks only: readers keep evicting each other's.
    let cache = Arc::new(BlockCache::new(16 << 10));
    let (t, _) = open_with(bytes, size, Some(cache)).unwrap();
    let threads: Vec<_> = (0..4u64)
        .map(|n| {
            let (t, entries) = (t.clone(), entries.clone());
            std::thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(n);
                for _ in 0..2_000 {
                    let (k, v) = &entries[rng.gen_range(0..entries.len())];
                    let got = t.get(&seek_key(user_key(k), MAX_SEQ), CTX).unwrap();
                    assert_eq!(got.as_ref(), Some(&(k.clone(), v.clone())));
                }
                let mut it = t.iter(CTX);
                it.seek(&entries[n as usize * 500].0);
                for e in &entries[n as usize * 500..] {
                    assert_eq!((it.key(), it.value()), (&e.0[..], &e.1[..]));
                    it.next();
                }
                assert!(!it.valid() && it.status().is_ok());
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
}

#[test]
fn open_reads_are_counted() {
    let entries = value_entries(100, 5);
    let bytes = build(&entries, topts(512, 16, 10));
    let t_bytes = bytes.clone();
    let size = bytes.len() as u64;
    let (t, stats) = open_with(bytes, size, None).unwrap();
    let opened = stats.snapshot().read_in(IoCategory::UserRead);
    // What open holds in memory was read, except the decoded index, which
    // is built from the index block read.
    let decoded = t.index_search.as_ref().map_or(0, |s| s.size());
    assert!(decoded > 0, "the table's index is decoded");
    assert!(opened >= FOOTER_LEN as u64 + (t.approximate_memory() - decoded) as u64);
    t.verify().unwrap();
    // verify re-reads the whole file, each byte once.
    let verified = stats.snapshot().read_in(IoCategory::UserRead) - opened;
    assert_eq!(verified, size);
    // open reads everything but the data blocks.
    let data: u64 = layout(&t_bytes).data.iter().map(|(h, _)| h.size + 5).sum();
    assert_eq!(opened, size - data);
}

/// Where the blocks of a table are.
struct Layout {
    data: Vec<(BlockHandle, Entries)>,
    index: BlockHandle,
    metaindex: BlockHandle,
    filter: Option<BlockHandle>,
    footer: u64,
}

fn layout(bytes: &[u8]) -> Layout {
    let t = open(bytes.to_vec()).unwrap();
    let mut idx = BlockIter::new(t.index.clone(), compare_internal);
    idx.seek_to_first();
    let mut data = Vec::new();
    while idx.valid() {
        let h = BlockHandle::decode_exact(idx.value()).unwrap();
        let mut it = BlockIter::new(t.data_block(h, CTX).unwrap(), compare_internal);
        it.seek_to_first();
        let mut es = Vec::new();
        while it.valid() {
            es.push((it.key().to_vec(), it.value().to_vec()));
            it.next();
        }
        data.push((h, es));
        idx.next();
    }
    let meta = Arc::new(
        t.src
            .block(
                t.footer.metaindex,
                t.src.footer_offset,
                IoCategory::UserRead,
            )
            .unwrap(),
    );
    let filter = t
        .src
        .filter(meta, t.footer.metaindex, IoCategory::UserRead)
        .unwrap()
        .map(|(_, h)| h);
    Layout {
        data,
        index: t.footer.index,
        metaindex: t.footer.metaindex,
        filter,
        footer: t.src.footer_offset,
    }
}

fn block_range(h: BlockHandle) -> (u64, u64) {
    (h.offset, h.offset + h.size + BLOCK_TRAILER_LEN as u64)
}

fn flip(bytes: &[u8], bit: u64) -> Vec<u8> {
    let mut b = bytes.to_vec();
    b[(bit / 8) as usize] ^= 1 << (bit % 8);
    b
}

fn small_table() -> (Entries, Vec<u8>) {
    let entries = value_entries(300, 6);
    let bytes = build(&entries, topts(512, 4, 10));
    (entries, bytes)
}

/// `block_align`: every data block starts on a page boundary and, but
/// for one holding a single entry larger than a page, ends within it;
/// the table reads back whole, by gets, scans both ways and `verify`,
/// and a scan's read-ahead still sees the blocks in file order.
#[test]
fn aligned_blocks_fit_their_pages_and_read_back() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let entries: Entries = (0..600)
        .map(|i| {
            let k = internal_key(format!("key{i:06}").as_bytes(), 5, ValueType::Value);
            // Mostly ~1 KiB, some small, a few past a page.
            let len = match i % 50 {
                0 => 5_000 + rng.gen_range(0..3_000),
                1..=20 => rng.gen_range(0..100),
                _ => 900 + rng.gen_range(0..200),
            };
            (k, (0..len).map(|_| rng.gen()).collect())
        })
        .collect();
    for block_size in [1024, 4096, 6000] {
        let mut o = topts(block_size, 16, 10);
        o.block_align = true;
        let bytes = build(&entries, o);
        let lay = layout(&bytes);
        let align = super::super::builder::ALIGN;
        let limit = (block_size as u64).next_multiple_of(align);
        for (h, es) in &lay.data {
            assert_eq!(h.offset % align, 0, "block at {} unaligned", h.offset);
            let (lo, hi) = block_range(*h);
            assert!(
                hi - lo <= limit || es.len() == 1,
                "block at {lo} of {} entries takes {} bytes",
                es.len(),
                hi - lo
            );
        }
        // Blocks are not cut early: each but the last could not take
        // the next entry (bounded by its three varints of up to 5 bytes
        // and a restart point of 4, as the builder bounds it).
        let entry_overhead = 3 * 5 + 4;
        for w in lay.data.windows(2) {
            let ((h, _), (_, next)) = (&w[0], &w[1]);
            let (k, v) = &next[0];
            let with_next = h.size
                + BLOCK_TRAILER_LEN as u64
                + entry_overhead
                + k.len() as u64
                + v.len() as u64;
            assert!(with_next > limit, "block at {} cut early", h.offset);
        }
        let t = open(bytes).unwrap();
        for (k, v) in entries.iter().step_by(3) {
            assert_eq!(t.get(k, CTX).unwrap(), Some((k.clone(), v.clone())));
        }
        assert_eq!(ok(scan(&t)), entries);
        assert_eq!(ok(scan_back(&t)), entries);
        assert_eq!(t.verify().unwrap(), entries.len() as u64);
    }
}

#[test]
fn flipped_bit_in_a_data_block_is_corruption() {
    let (entries, bytes) = small_table();
    let lay = layout(&bytes);
    assert!(lay.data.len() >= 10);
    let nblocks = lay.data.len();
    for bi in [0, nblocks / 2, nblocks - 1] {
        let (h, block_entries) = &lay.data[bi];
        let (lo, hi) = block_range(*h);
        let first_in_block = entries.iter().position(|e| e == &block_entries[0]).unwrap();
        let last_in_block = first_in_block + block_entries.len();
        for bit in (lo * 8..hi * 8).step_by(29).chain(hi * 8 - 40..hi * 8) {
            let damaged = flip(&bytes, bit);
            let t = open(damaged).unwrap();
            // Point lookups of keys in the block.
            for (k, _) in block_entries.iter().step_by(7) {
                let e = t.get(&seek_key(user_key(k), MAX_SEQ), CTX).unwrap_err();
                assert_corruption_at(&e, h.offset, h.offset + 1);
            }
            // Lookups elsewhere still work.
            let other = &entries[(last_in_block + 3) % entries.len()];
            if !block_entries.contains(other) {
                let got = t.get(&seek_key(user_key(&other.0), MAX_SEQ), CTX).unwrap();
                assert_eq!(got.as_ref(), Some(other));
            }
            // Forward and backward scans stop at the block with an error
            // and never yield a wrong entry.
            let (seen, status) = scan(&t);
            assert_corruption_at(&status.unwrap_err(), h.offset, h.offset + 1);
            assert_eq!(&seen[..], &entries[..first_in_block]);
            let (seen, status) = scan_back(&t);
            assert_corruption_at(&status.unwrap_err(), h.offset, h.offset + 1);
            assert_eq!(&seen[..], &entries[last_in_block..]);
            // A seek into the block.
            let mut it = t.iter(CTX);
            it.seek(&block_entries[0].0);
            assert!(!it.valid());
            assert_corruption_at(&it.status().unwrap_err(), h.offset, h.offset + 1);
            // The error is sticky.
            it.seek_to_first();
            assert!(!it.valid() && it.status().is_err());
            // verify.
            assert_corruption_at(&t.verify().unwrap_err(), h.offset, h.offset + 1);
        }
    }
}

#[test]
fn flipped_bit_in_index_filter_metaindex_or_footer_is_corruption() {
    let (_, bytes) = small_table();
    let lay = layout(&bytes);
    let filter = lay.filter.expect("table has a filter");
    let regions = [
        ("index", block_range(lay.index)),
        ("filter", block_range(filter)),
        ("metaindex", block_range(lay.metaindex)),
        ("footer", (lay.footer, bytes.len() as u64)),
    ];
    for (name, (lo, hi)) in regions {
        for bit in lo * 8..hi * 8 {
            let e = open(flip(&bytes, bit)).unwrap_err();
            // The error names the damaged block (or footer) itself.
            assert_corruption_at(&e, lo, lo + 1);
            let _ = name;
        }
    }
}

/// A reader whose bytes the test can damage after the table is open.
struct SharedReader(Arc<Mutex<Vec<u8>>>);

impl RandomAccessFile for SharedReader {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        VecReader(self.0.lock().unwrap().clone()).read_at(offset, buf)
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.lock().unwrap().len() as u64)
    }
}

#[test]
fn damage_after_open_is_found_by_verify() {
    let (entries, bytes) = small_table();
    let lay = layout(&bytes);
    let mid = lay.data.len() / 2;
    let regions = [
        block_range(lay.data[0].0),
        block_range(lay.data[mid].0),
        block_range(lay.index),
        block_range(lay.filter.unwrap()),
        block_range(lay.metaindex),
        (lay.footer, bytes.len() as u64),
    ];
    for (lo, hi) in regions {
        for bit in [lo * 8, (lo + hi) * 4 + 3, hi * 8 - 1] {
            let shared = Arc::new(Mutex::new(bytes.clone()));
            let t = Table::open(
                Arc::new(SharedReader(shared.clone())),
                PathBuf::from(NAME),
                42,
                bytes.len() as u64,
                None,
                Arc::new(IoStats::default()),
                IoCategory::Compaction,
            )
            .unwrap();
            *shared.lock().unwrap() = flip(&bytes, bit);
            assert_corruption_at(&t.verify().unwrap_err(), lo, lo + 1);
            // Reads use the index and filter held in memory: only damage
            // to a data block shows, and then as corruption.
            let t = Arc::new(t);
            let (seen, status) = scan(&t);
            if lay.data.iter().any(|(h, _)| h.offset == lo) {
                assert_corruption_at(&status.unwrap_err(), lo, lo + 1);
                assert!(seen.len() < entries.len());
            } else {
                assert_eq!(ok((seen, status)), entries);
            }
        }
    }
}

#[test]
fn structural_damage_behind_a_valid_checksum_is_corruption() {
    let (entries, bytes) = small_table();
    let lay = layout(&bytes);
    let (h, block_entries) = &lay.data[lay.data.len() / 2];
    let (start, end) = (h.offset as usize, (h.offset + h.size) as usize);
    // (what, where, bytes written there)
    let damages: [(&str, usize, &[u8]); 3] = [
        ("restart count", end - 4, &[0xff; 4]),
        ("shared prefix", start, &[5]),
        ("varint", start, &[0xff; 3]),
    ];
    for (what, at, patch) in damages {
        let mut b = bytes.clone();
        b[at..at + patch.len()].copy_from_slice(patch);
        fix_checksum(&mut b, *h);
        let t = open(b).unwrap();
        let probe = seek_key(user_key(&block_entries[0].0), MAX_SEQ);
        let e = t.get(&probe, CTX).unwrap_err();
        assert_corruption_at(&e, h.offset, h.offset + 1);
        let (seen, status) = scan(&t);
        assert_corruption_at(&status.unwrap_err(), h.offset, h.offset + 1);
        assert!(entries.starts_with(&seen), "{what}: wrong entries");
        assert_corruption_at(&t.verify().unwrap_err(), h.offset, h.offset + 1);
    }
}

#[test]
fn verify_rejects_unparsable_keys() {
    let mut entries = value_entries(50, 7);
    let opts = topts(256, 4, 10);
    // The first key of the third block (not a separator) gets an
    // unknown type byte (7); sizes do not change.
    let lay = layout(&build(&entries, opts.clone()));
    let (h, block_entries) = &lay.data[2];
    assert!(block_entries.len() > 1);
    let at = entries.iter().position(|e| e == &block_entries[0]).unwrap();
    let n = entries[at].0.len();
    entries[at].0[n - 8] = 7;
    let e = open(build(&entries, opts)).unwrap().verify().unwrap_err();
    assert_corruption_at(&e, h.offset, h.offset + 1);
    assert!(e.to_string().contains("unparsable"), "{e}");
}

#[test]
fn bad_magic_and_version_are_named() {
    let (_, bytes) = small_table();
    let lay = layout(&bytes);
    let mut b = bytes.clone();
    let n = b.len();
    b[n - 3] ^= 0x40;
    let e = open(b).unwrap_err();
    assert!(e.to_string().contains("not a sepkv table"), "{e}");

    // A well-formed footer of another format version.
    let mut b = bytes.clone();
    let f = lay.footer as usize;
    b[f + 40..f + 44].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    let crc = crate::format::checksum::mask(crate::format::checksum::crc(&b[f..f + 44]));
    b[f + 44..f + 48].copy_from_slice(&crc.to_le_bytes());
    let e = open(b).unwrap_err();
    assert_corruption_at(&e, lay.footer, lay.footer + 1);
    assert!(e.to_string().contains("unsupported"), "{e}");
}

#[test]
fn out_of_range_handles_are_corruption() {
    let (_, bytes) = small_table();
    let lay = layout(&bytes);
    let f = lay.footer as usize;
    for index in [
        BlockHandle {
            offset: u64::MAX,
            size: 10,
        },
        BlockHandle {
            offset: 10,
            size: u64::MAX,
        },
        BlockHandle {
            offset: 0,
            size: lay.footer,
        },
        BlockHandle {
            offset: lay.footer - 4,
            size: 0,
        },
    ] {
        let mut b = bytes[..f].to_vec();
        b.extend_from_slice(
            &Footer {
                metaindex: lay.metaindex,
                index,
            }
            .encode(),
        );
        let e = open(b).unwrap_err();
        assert_corruption_at(&e, lay.footer, lay.footer + 1);
        assert!(e.to_string().contains("out of range"), "{e}");
    }
}

#[test]
fn truncated_file_is_corruption() {
    let (_, bytes) = small_table();
    let len = bytes.len();
    for keep in [
        0,
        1,
        10,
        FOOTER_LEN - 1,
        FOOTER_LEN,
        FOOTER_LEN + 7,
        len / 2,
        len - 100,
        len - 1,
    ] {
        let short = bytes[..keep].to_vec();
        // The size recorded by the caller is the truncated one ...
        let e = open(short.clone()).unwrap_err();
        assert!(e.is_corruption(), "{e}");
        // ... or the original one, the file being shorter.
        let e = open_with(short, len as u64, None).unwrap_err();
        assert!(e.is_corruption(), "{e}");
        assert!(e.to_string().contains("truncated"), "{e}");
    }
}

/// Rewrites the trailer of the block at `h` so its checksum matches.
fn fix_checksum(bytes: &mut [u8], h: BlockHandle) {
    let (s, e) = (h.offset as usize, (h.offset + h.size) as usize);
    let t = block_trailer(&bytes[s..e]);
    bytes[e..e + BLOCK_TRAILER_LEN].copy_from_slice(&t);
}

/// Runs every read path; only checks that nothing panics, that errors
/// are corruption, and that iteration terminates.
fn exercise(bytes: Vec<u8>, probes: &[Vec<u8>]) {
    let t = match open(bytes) {
        Ok(t) => t,
        Err(e) => {
            assert!(e.is_corruption(), "{e}");
            return;
        }
    };
    for p in probes {
        if let Err(e) = t.get(p, CTX) {
            assert!(e.is_corruption(), "{e}");
        }
        let mut it = t.iter(CTX);
        it.seek(p);
        for _ in 0..3 {
            if it.valid() {
                it.prev();
            }
        }
        if let Err(e) = it.status() {
            assert!(e.is_corruption(), "{e}");
        }
    }
    let (seen, st) = scan(&t);
    assert!(seen.len() < 100_000);
    if let Err(e) = st {
        assert!(e.is_corruption(), "{e}");
    }
    let (_, st) = scan_back(&t);
    if let Err(e) = st {
        assert!(e.is_corruption(), "{e}");
    }
    if let Err(e) = t.verify() {
        assert!(e.is_corruption(), "{e}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_bytes_are_corruption(data in proptest::collection::vec(any::<u8>(), 0..3000)) {
        let e = open(data).unwrap_err();
        prop_assert!(e.is_corruption(), "{}", e);
    }

    #[test]
    fn random_bytes_behind_a_valid_footer_never_panic(
        data in proptest::collection::vec(any::<u8>(), 0..3000),
        mo in any::<u16>(), ms in any::<u16>(), io in any::<u16>(), is in any::<u16>(),
    ) {
        let mut b = data;
        let footer = Footer {
            metaindex: BlockHandle { offset: mo as u64, size: ms as u64 },
            index: BlockHandle { offset: io as u64, size: is as u64 },
        };
        b.extend_from_slice(&footer.encode());
        exercise(b, &[seek_key(b"key000100", MAX_SEQ)]);
    }

    /// Damage that the checksums cannot see (the trailer is rewritten to
    /// match) must still never panic nor surface as anything but
    /// corruption.
    #[test]
    fn damaged_blocks_with_valid_checksums_never_panic(
        which in any::<prop::sample::Index>(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..8), 1..6),
    ) {
        let (entries, bytes) = small_table();
        let lay = layout(&bytes);
        let mut blocks: Vec<BlockHandle> = lay.data.iter().map(|(h, _)| *h).collect();
        blocks.extend([lay.index, lay.metaindex]);
        blocks.extend(lay.filter);
        let h = *which.get(&blocks);
        let mut b = bytes.clone();
        for (pos, bit) in flips {
            let at = h.offset as usize + pos.index(h.size as usize);
            b[at] ^= 1 << bit;
        }
        fix_checksum(&mut b, h);
        let probes: Vec<Vec<u8>> = entries.iter().step_by(37).map(|(k, _)| k.clone()).collect();
        exercise(b, &probes);
    }
}

/// An internal key ordered by [`compare_internal`], for the model.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Ik(Vec<u8>);

impl Ord for Ik {
    fn cmp(&self, other: &Self) -> Ordering {
        compare_internal(&self.0, &other.0)
    }
}

impl PartialOrd for Ik {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[derive(Debug, Clone)]
enum Op {
    First,
    Last,
    Next,
    Prev,
    Seek(Vec<u8>),
}

fn arb_ikey() -> impl Strategy<Value = Vec<u8>> {
    (proptest::collection::vec(0u8..3, 0..4), 0u64..40, 0u8..3).prop_map(|(uk, seq, t)| {
        let mut k = Vec::new();
        append_internal_key(&mut k, &uk, seq, t);
        k
    })
}

fn arb_target() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        arb_ikey(),
        (proptest::collection::vec(0u8..3, 0..4), 0u64..42).prop_map(|(uk, seq)| {
            let mut k = Vec::new();
            append_internal_key(&mut k, &uk, seq, TYPE_FOR_SEEK);
            k
        }),
    ]
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => Just(Op::First),
        1 => Just(Op::Last),
        4 => Just(Op::Next),
        4 => Just(Op::Prev),
        3 => arb_target().prop_map(Op::Seek),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn iteration_and_get_match_a_model(
        raw in proptest::collection::vec((arb_ikey(), proptest::collection::vec(any::<u8>(), 0..24)), 0..150),
        block_size in 1usize..300,
        restart_interval in 1usize..5,
        bloom in prop_oneof![Just(0usize), Just(10usize)],
        ops in proptest::collection::vec(arb_op(), 1..60),
        targets in proptest::collection::vec(arb_target(), 1..20),
        cached in any::<bool>(),
    ) {
        let model: BTreeMap<Ik, Vec<u8>> = raw.into_iter().map(|(k, v)| (Ik(k), v)).collect();
        let entries: Entries = model.iter().map(|(k, v)| (k.0.clone(), v.clone())).collect();
        let bytes = build(&entries, topts(block_size, restart_interval, bloom));
        let size = bytes.len() as u64;
        let cache = cached.then(|| Arc::new(BlockCache::new(1 << 20)));
        let (t, _) = open_with(bytes, size, cache).unwrap();
        prop_assert_eq!(t.verify().unwrap(), entries.len() as u64);
        prop_assert_eq!(ok(scan(&t)), entries.clone());
        prop_assert_eq!(ok(scan_back(&t)), entries.clone());

        let mut it = t.iter(CTX);
        let mut cur: Option<Ik> = None;
        for op in ops {
            match op {
                Op::First => {
                    it.seek_to_first();
                    cur = model.keys().next().cloned();
                }
                Op::Last => {
                    it.seek_to_last();
                    cur = model.keys().next_back().cloned();
                }
                Op::Seek(t) => {
                    it.seek(&t);
                    cur = model.range(Ik(t)..).next().map(|(k, _)| k.clone());
                }
                Op::Next => {
                    let Some(c) = cur.take() else { continue };
                    it.next();
                    cur = model
                        .range((std::ops::Bound::Excluded(c), std::ops::Bound::Unbounded))
                        .next()
                        .map(|(k, _)| k.clone());
                }
                Op::Prev => {
                    let Some(c) = cur.take() else { continue };
                    it.prev();
                    cur = model.range(..c).next_back().map(|(k, _)| k.clone());
                }
            }
            prop_assert_eq!(it.valid(), cur.is_some());
            if let Some(c) = &cur {
                prop_assert_eq!(it.key(), &c.0[..]);
                prop_assert_eq!(it.value(), &model[c][..]);
            }
        }
        prop_assert!(it.status().is_ok());

        for target in targets {
            let want = model
                .range(Ik(target.clone())..)
                .next()
                .filter(|(k, _)| user_key(&k.0) == user_key(&target))
                .map(|(k, v)| (k.0.clone(), v.clone()));
            prop_assert_eq!(t.get(&target, CTX).unwrap(), want);
        }
    }
}

/// A table whose index is decoded at open ([`IndexSearch`]) seeks, walks
/// both ways and looks up exactly as the same table searching its index
/// block in place: from every key's versions, between keys, and below and
/// above the table's range (the last separator is a short successor).
#[test]
fn the_decoded_index_and_the_block_search_agree() {
    let entries = value_entries(3_000, 7);
    let bytes = build(&entries, topts(512, 4, 10));
    let decoded = open(bytes.clone()).unwrap();
    assert!(decoded.index_search.is_some(), "the index is decoded");
    let mut plain = open(bytes).unwrap();
    Arc::get_mut(&mut plain).unwrap().index_search = None;
    let mut targets = vec![
        seek_key(b"", MAX_SEQ),
        seek_key(b"key", MAX_SEQ),
        seek_key(b"kez", MAX_SEQ),
        seek_key(b"key9", MAX_SEQ),
        seek_key(b"zzz", 0),
    ];
    for (k, _) in entries.iter().step_by(7) {
        let uk = user_key(k);
        targets.push(seek_key(uk, MAX_SEQ));
        targets.push(seek_key(uk, 0));
        targets.push(k.clone());
        let mut between = uk.to_vec();
        between.push(b'!');
        targets.push(seek_key(&between, MAX_SEQ));
    }
    let walk = |t: &Arc<Table>, target: &[u8]| {
        let mut it = t.iter(CTX);
        it.seek(target);
        let mut seen = Vec::new();
        for _ in 0..40 {
            if !it.valid() {
                break;
            }
            seen.push(it.key().to_vec());
            it.next();
        }
        it.seek(target);
        for _ in 0..40 {
            if !it.valid() {
                break;
            }
            seen.push(it.key().to_vec());
            it.prev();
        }
        it.status().unwrap();
        seen
    };
    for t in &targets {
        assert_eq!(walk(&decoded, t), walk(&plain, t));
        assert_eq!(
            decoded.get(t, CTX).unwrap(),
            plain.get(t, CTX).unwrap(),
            "get {t:?}"
        );
    }
    assert_eq!(ok(scan(&decoded)), entries);
    assert_eq!(ok(scan_back(&decoded)), entries);
}
