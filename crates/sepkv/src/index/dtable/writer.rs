//! Writing DTables: create one, or append a segment and a new tail
//! (Algorithms 2 and 3).

use super::format::{
    encode_aggregated, Aggregated, DFooter, Directory, SegmentEntry, Shadowed, SHADOWED_META_NAME,
};
use crate::error::{Error, IoContext, Result};
use crate::fs::{FileSystem, IoCategory, IoStats, WritableFile};
use crate::index::sstable::{block_trailer, BlockHandle, TableBuilder, TableOptions};
use std::path::Path;
use std::sync::Arc;

/// What [`append_segment`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendOutcome {
    /// New size of the table (end of the new footer): the size the manifest
    /// must record.
    pub size: u64,
    /// The new directory.
    pub directory: Directory,
    /// Smallest internal key of the segment.
    pub smallest: Vec<u8>,
    /// Largest internal key of the segment.
    pub largest: Vec<u8>,
    /// Bytes written by this append (segment and tail).
    pub bytes_written: u64,
}

fn put_block(
    file: &mut dyn WritableFile,
    path: &Path,
    stats: &IoStats,
    category: IoCategory,
    contents: &[u8],
) -> Result<BlockHandle> {
    let h = BlockHandle {
        offset: file.len(),
        size: contents.len() as u64,
    };
    file.append(contents).ctx(path)?;
    file.append(&block_trailer(contents)).ctx(path)?;
    stats.add_written(category, contents.len() as u64 + 5);
    Ok(h)
}

/// Adds one entry (internal key, value) to the segment being written;
/// entries come in internal-key order.
pub type AddEntry<'b> = dyn FnMut(&[u8], &[u8]) -> Result<()> + 'b;

/// Appends one segment to the DTable at `path`, and a tail whose directory
/// is `prior` plus the new segment; syncs. With `prior == None` the file is
/// created (a new table). `fill` hands the segment's entries (internal-key
/// order, at least one) to the function it is given, one at a time, so a
/// caller can stream them from a cursor without holding them in memory.
/// `overlapped` is then called with the segment's smallest and largest
/// internal keys and returns the tail's overlapped metaindex (§3.2).
/// `shadowed`, when it counts anything, is recorded in the segment's meta
/// block `lwc.shadowed`: what the new segment shadows in `prior`'s
/// segments ([`DTable::shadowed_by`](super::DTable::shadowed_by)). Bytes
/// already in the file stay as they are: a reader at the old size is
/// unaffected, and any torn earlier append is skipped over.
///
/// # Errors
/// `Io` when a write or the sync fails (the file then holds bytes past the
/// old size, which readers ignore); `InvalidArgument` for an oversized
/// entry or an empty segment; any error of `fill` or `overlapped`, which
/// stops the append where it is, with the same effect as a failed write.
#[allow(clippy::too_many_arguments)]
pub fn append_segment(
    fs: &dyn FileSystem,
    path: &Path,
    prior: Option<&Directory>,
    shadowed: Shadowed,
    fill: impl FnOnce(&mut AddEntry<'_>) -> Result<()>,
    overlapped: impl FnOnce(&[u8], &[u8]) -> Result<Vec<Aggregated>>,
    opts: &TableOptions,
    stats: &Arc<IoStats>,
    category: IoCategory,
) -> Result<AppendOutcome> {
    let file = match prior {
        None => fs.create(path).ctx(path)?,
        Some(_) => fs.open_append(path).ctx(path)?,
    };
    let start = file.len();
    let mut b = TableBuilder::new(
        file,
        path.to_path_buf(),
        opts.clone(),
        stats.clone(),
        category,
    )
    .with_block_filters();
    if shadowed != Shadowed::default() {
        b = b.with_meta_block(SHADOWED_META_NAME, shadowed.encode());
    }
    fill(&mut |k, v| b.add(k, v))?;
    if b.num_entries() == 0 {
        return Err(Error::InvalidArgument("empty DTable segment".into()));
    }
    let (summary, mut file, _) = b.finish_unsynced()?;
    let mut directory = prior.cloned().unwrap_or_default();
    directory.segments.push(SegmentEntry {
        seq: directory.next_seq(),
        end: summary.file_size,
        entries: summary.entries,
        bytes: summary.file_size - start,
    });
    let overlapped = overlapped(&summary.smallest, &summary.largest)?;
    let f = file.as_mut();
    let dh = put_block(f, path, stats, category, &directory.encode())?;
    let oh = put_block(f, path, stats, category, &encode_aggregated(&overlapped))?;
    let footer = DFooter {
        directory: dh,
        overlapped: oh,
    }
    .encode();
    f.append(&footer).ctx(path)?;
    stats.add_written(category, footer.len() as u64);
    f.sync().ctx(path)?;
    let size = f.len();
    Ok(AppendOutcome {
        size,
        directory,
        smallest: summary.smallest,
        largest: summary.largest,
        bytes_written: size - start,
    })
}

#[cfg(test)]
mod tests {
    use super::super::DTable;
    use super::*;
    use crate::fs::MemFs;
    use crate::index::iter::InternalIterator;
    use crate::index::key::{internal_key, seek_key, ValueType};
    use crate::index::sstable::ReadCtx;
    use std::collections::BTreeMap;

    fn ctx() -> ReadCtx {
        ReadCtx {
            category: IoCategory::UserRead,
            fill_cache: false,
        }
    }

    fn open(fs: &MemFs, path: &Path, size: u64) -> Result<DTable> {
        DTable::open(
            Arc::from(fs.open_read(path).unwrap()),
            path.to_path_buf(),
            1,
            size,
            None,
            Arc::new(IoStats::default()),
            IoCategory::UserRead,
        )
    }

    fn seg(keys: &[(&str, u64)]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut v: Vec<_> = keys
            .iter()
            .map(|(k, s)| {
                (
                    internal_key(k.as_bytes(), *s, ValueType::Value),
                    format!("{k}@{s}").into_bytes(),
                )
            })
            .collect();
        v.sort_by(|a, b| crate::index::key::compare_internal(&a.0, &b.0));
        v
    }

    fn append(
        fs: &MemFs,
        path: &Path,
        prior: Option<&Directory>,
        e: &[(Vec<u8>, Vec<u8>)],
    ) -> AppendOutcome {
        let opts = TableOptions {
            block_size: 64,
            ..Default::default()
        };
        append_segment(
            fs,
            path,
            prior,
            Shadowed::default(),
            |add| e.iter().try_for_each(|(k, v)| add(k, v)),
            |_, _| Ok(Vec::new()),
            &opts,
            &Arc::new(IoStats::default()),
            IoCategory::Compaction,
        )
        .unwrap()
    }

    #[test]
    fn segments_newest_first_and_old_sizes_stay_readable() {
        let fs = MemFs::new();
        let path = Path::new("/t/000001.sst");
        fs.create_dir_all(Path::new("/t")).unwrap();
        let keys1: Vec<(String, u64)> = (0..50).map(|i| (format!("k{i:03}"), 1)).collect();
        let s1: Vec<_> = keys1.iter().map(|(k, s)| (k.as_str(), *s)).collect();
        let a1 = append(&fs, path, None, &seg(&s1));
        let keys2: Vec<(String, u64)> = (0..50)
            .step_by(3)
            .map(|i| (format!("k{i:03}"), 9))
            .collect();
        let s2: Vec<_> = keys2.iter().map(|(k, s)| (k.as_str(), *s)).collect();
        let a2 = append(&fs, path, Some(&a1.directory), &seg(&s2));
        assert_eq!(a2.directory.segments.len(), 2);
        let t1 = open(&fs, path, a1.size).unwrap();
        let t2 = open(&fs, path, a2.size).unwrap();
        assert_eq!(t2.segments_with_both_filters(), 2);
        let mut model = BTreeMap::new();
        for i in 0..50 {
            let k = format!("k{i:03}");
            let newest = if i % 3 == 0 { 9 } else { 1 };
            model.insert(k.clone(), newest);
            let hit = t2
                .get(&seek_key(k.as_bytes(), 100), ctx())
                .unwrap()
                .unwrap();
            assert_eq!(hit.1, format!("{k}@{newest}").into_bytes());
            // As of sequence 5 the older segment answers.
            let old = t2.get(&seek_key(k.as_bytes(), 5), ctx()).unwrap().unwrap();
            assert_eq!(old.1, format!("{k}@1").into_bytes());
            let v1 = t1
                .get(&seek_key(k.as_bytes(), 100), ctx())
                .unwrap()
                .unwrap();
            assert_eq!(v1.1, format!("{k}@1").into_bytes());
        }
        assert!(t2.get(&seek_key(b"k0005", 100), ctx()).unwrap().is_none());
        let mut it = t2.iter(ctx());
        it.seek_to_first();
        let mut n = 0;
        while it.valid() {
            n += 1;
            it.next();
        }
        assert_eq!(n, 50 + keys2.len());
        assert_eq!(t2.verify().unwrap(), n as u64);
    }

    /// A new segment's keys found in the older segments' filters count
    /// as shadowed; recorded with the segment, they and the stale tail of
    /// the earlier append make up the table's dead bytes.
    #[test]
    fn shadowed_entries_and_stale_tails_are_dead_bytes() {
        let fs = MemFs::new();
        let path = Path::new("/t/000001.sst");
        fs.create_dir_all(Path::new("/t")).unwrap();
        let keys: Vec<String> = (0..200).map(|i| format!("k{i:03}")).collect();
        let s1: Vec<_> = keys.iter().map(|k| (k.as_str(), 1)).collect();
        let a1 = append(&fs, path, None, &seg(&s1));
        let t1 = open(&fs, path, a1.size).unwrap();
        assert_eq!(t1.dead_bytes().unwrap(), 0);
        let over: Vec<&[u8]> = keys[..100].iter().map(|k| k.as_bytes()).collect();
        let sh = t1.shadowed_by(over.iter().copied());
        assert_eq!(sh.entries, 100);
        let per_entry = a1.directory.segments[0].bytes / 200;
        assert_eq!(sh.bytes, 100 * per_entry);
        let absent: Vec<String> = (0..200).map(|i| format!("x{i:03}")).collect();
        let none = t1.shadowed_by(absent.iter().map(|k| k.as_bytes()));
        assert!(none.entries < 10, "{none:?}");
        let s2: Vec<_> = keys[..100].iter().map(|k| (k.as_str(), 2)).collect();
        let e2 = seg(&s2);
        let a2 = append_segment(
            &fs,
            path,
            Some(&a1.directory),
            sh,
            |add| e2.iter().try_for_each(|(k, v)| add(k, v)),
            |_, _| Ok(Vec::new()),
            &TableOptions {
                block_size: 64,
                ..Default::default()
            },
            &Arc::new(IoStats::default()),
            IoCategory::Compaction,
        )
        .unwrap();
        let t2 = open(&fs, path, a2.size).unwrap();
        let tail = a1.size - a1.directory.segments[0].end;
        assert_eq!(t2.dead_bytes().unwrap(), tail + sh.bytes);
        assert_eq!(t2.verify().unwrap(), 300);
        let hit = t2.get(&seek_key(b"k007", 9), ctx()).unwrap().unwrap();
        assert_eq!(hit.1, b"k007@2".to_vec());
    }

    #[test]
    fn torn_append_leaves_previous_state() {
        let fs = MemFs::new();
        let path = Path::new("/t/000001.sst");
        fs.create_dir_all(Path::new("/t")).unwrap();
        let a1 = append(&fs, path, None, &seg(&[("a", 1), ("b", 1)]));
        // A torn append: garbage past the recorded size.
        {
            let mut f = fs.open_append(path).unwrap();
            f.append(&[0xAB; 77]).unwrap();
        }
        let t = open(&fs, path, a1.size).unwrap();
        assert!(t.get(&seek_key(b"a", 9), ctx()).unwrap().is_some());
        // The next append skips the garbage.
        let a2 = append(&fs, path, Some(&a1.directory), &seg(&[("c", 2)]));
        let t = open(&fs, path, a2.size).unwrap();
        assert!(t.get(&seek_key(b"c", 9), ctx()).unwrap().is_some());
        assert!(t.get(&seek_key(b"a", 9), ctx()).unwrap().is_some());
        assert_eq!(t.verify().unwrap(), 3);
        // A size pointing at the garbage is corruption, not a panic.
        assert!(matches!(
            open(&fs, path, a1.size + 77),
            Err(Error::Corruption { .. })
        ));
    }

    #[test]
    fn every_flipped_byte_is_corruption_or_harmless() {
        let fs = MemFs::new();
        let path = Path::new("/t/000001.sst");
        fs.create_dir_all(Path::new("/t")).unwrap();
        let a1 = append(&fs, path, None, &seg(&[("a", 1), ("b", 1), ("c", 1)]));
        let a2 = append(&fs, path, Some(&a1.directory), &seg(&[("b", 5)]));
        let bytes = crate::fs::read_all(&fs, path).unwrap();
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            let p2 = Path::new("/t/000002.sst");
            let mut f = fs.create(p2).unwrap();
            f.append(&b).unwrap();
            drop(f);
            let r = open(&fs, p2, a2.size).and_then(|t| {
                let n = t.verify()?;
                let v = t.get(&seek_key(b"b", 9), ctx())?;
                Ok((n, v))
            });
            match r {
                Err(Error::Corruption { .. }) => {}
                Err(e) => panic!("byte {i}: unexpected error {e}"),
                Ok((n, v)) => {
                    // Only padding bytes may be flipped unnoticed.
                    assert_eq!(n, 4, "byte {i}");
                    assert_eq!(v.map(|x| x.1), Some(b"b@5".to_vec()), "byte {i}");
                }
            }
        }
    }

    /// A file that records the `WillNeed` hints it is given.
    struct HintedFile {
        inner: Box<dyn crate::fs::RandomAccessFile>,
        hints: Arc<parking_lot::Mutex<Vec<(u64, u64)>>>,
    }

    impl crate::fs::RandomAccessFile for HintedFile {
        fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
            self.inner.read_at(offset, buf)
        }
        fn len(&self) -> std::io::Result<u64> {
            self.inner.len()
        }
        fn advise(&self, offset: u64, len: u64, advice: crate::fs::Advice) {
            if advice == crate::fs::Advice::WillNeed {
                self.hints.lock().push((offset, len));
            }
        }
        fn map(&self) -> std::io::Result<Option<Arc<crate::fs::Mapping>>> {
            self.inner.map()
        }
    }

    /// Three segments with interleaved keys on a real, mapped file: while
    /// mapped reads reach the device, a seek hints the block it loads and
    /// the next in each segment, each inside that segment; from memory it
    /// hints nothing. Either way every seek and
    /// scan across the segments returns exactly the model's entries.
    #[test]
    fn a_device_bound_seek_hints_the_later_segments_and_scans_stay_exact() {
        use crate::fs::{MappedFile, StdFs};
        use crate::index::cache::BlockCache;
        use crate::index::key::parse_internal_key;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("000001.sst");
        let mut prior: Option<Directory> = None;
        let mut model: BTreeMap<Vec<u8>, (u64, Vec<u8>)> = BTreeMap::new();
        let mut ends = Vec::new();
        for (n, seq) in [(1u64, 1u64), (2, 5), (3, 9)] {
            // Segment n holds every n-th key (n = 1: all of them).
            let e: Vec<_> = (0..600)
                .step_by(n as usize)
                .map(|i| {
                    let k = format!("key{i:04}");
                    let v = format!("{k}@{seq}").into_bytes();
                    model.insert(k.clone().into_bytes(), (seq, v.clone()));
                    (internal_key(k.as_bytes(), seq, ValueType::Value), v)
                })
                .collect();
            let o = append_segment(
                &StdFs,
                &path,
                prior.as_ref(),
                Shadowed::default(),
                |add| e.iter().try_for_each(|(k, v)| add(k, v)),
                |_, _| Ok(Vec::new()),
                &TableOptions {
                    block_size: 256,
                    ..Default::default()
                },
                &Arc::new(IoStats::default()),
                IoCategory::Compaction,
            )
            .unwrap();
            ends.push(o.size);
            prior = Some(o.directory);
        }
        let size = *ends.last().unwrap();
        let hints = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let file = MappedFile::wrap(Box::new(HintedFile {
            inner: StdFs.open_read(&path).unwrap(),
            hints: hints.clone(),
        }));
        let cache = Arc::new(BlockCache::new(1 << 20));
        let t = DTable::open(
            Arc::from(file),
            path.clone(),
            1,
            size,
            Some(cache.clone()),
            Arc::new(IoStats::default()),
            IoCategory::UserRead,
        )
        .unwrap();
        assert_eq!(t.num_segments(), 3);
        let check = |t: &DTable| {
            for start in [0usize, 1, 7, 299, 300, 598, 599] {
                let k = format!("key{start:04}");
                let mut it = t.iter(ctx());
                it.seek(&seek_key(k.as_bytes(), u64::MAX >> 8));
                // Every version of the next 40 user keys, newest first.
                let mut got = Vec::new();
                while it.valid() && got.len() < 40 {
                    let p = parse_internal_key(it.key()).unwrap();
                    if got
                        .last()
                        .is_none_or(|(g, _, _): &(Vec<u8>, u64, Vec<u8>)| g != p.user_key)
                    {
                        got.push((p.user_key.to_vec(), p.seq, it.value().to_vec()));
                    }
                    it.next();
                }
                assert!(it.status().is_ok());
                let want: Vec<_> = model
                    .range(k.clone().into_bytes()..)
                    .take(40)
                    .map(|(k, (s, v))| (k.clone(), *s, v.clone()))
                    .collect();
                assert_eq!(got, want, "scan from {k}");
            }
        };
        // Served from memory: no hint.
        check(&t);
        assert!(hints.lock().is_empty(), "{:?}", hints.lock());
        // Mapped reads now take as long as device reads.
        for _ in 0..64 {
            cache
                .map_gauge()
                .record(crate::index::sstable::map_gauge::SLOW_READ_NANOS);
        }
        assert!(cache.map_gauge().reaching_device());
        let mut it = t.iter(ctx());
        it.seek(&seek_key(b"key0300", u64::MAX >> 8));
        assert!(it.valid());
        let h = hints.lock().clone();
        // Segments 3, 2 and 1 (newest first), each hint inside its own
        // segment and reaching past the seek's block into the next one.
        assert_eq!(h.len(), 3, "{h:?}");
        let bounds = [(ends[1], ends[2]), (ends[0], ends[1]), (0, ends[0])];
        for (&(o, l), &(lo, hi)) in h.iter().zip(&bounds) {
            assert!(o >= lo && o + l <= hi, "{h:?} {ends:?}");
            assert!(l > 256 + 5, "a hint of one block only: {h:?}");
        }
        // A seek past a segment's last key hints nothing for it.
        hints.lock().clear();
        let mut it = t.iter(ctx());
        it.seek(&seek_key(b"zzz", u64::MAX >> 8));
        assert!(!it.valid());
        assert!(hints.lock().is_empty());
        // Scans stay exact with the hints.
        check(&t);
        // Compaction reads never hint.
        hints.lock().clear();
        let mut it = t.iter(ReadCtx {
            category: IoCategory::Compaction,
            fill_cache: false,
        });
        it.seek(&seek_key(b"key0300", u64::MAX >> 8));
        assert!(it.valid());
        assert!(hints.lock().is_empty());
    }
}
