//! The read path: `get`, `multi_get`, snapshots, iterators and scans,
//! and GC's view of the index ([`IndexReader`]).

use super::{Db, DbInner};
use crate::batch::check_key;
use crate::error::{Error, Result};
use crate::fs::IoCategory;
use crate::index::memtable::Lookup;
use crate::index::sstable::ReadCtx;
use crate::iterator::{DbIterator, Scan};
use crate::options::ReadOptions;
use crate::range::{check_order, KeyRange};
use crate::seqno::SeqNum;
use crate::snapshot::{Snapshot, SnapshotPin};
use crate::value_type::ValueType;
use crate::vstore::{IndexReader, ValuePointer};
use std::sync::atomic::Ordering;

impl Db {
    /// The value of `key` in the latest state, or `None`.
    ///
    /// # Errors
    /// `InvalidArgument` for an invalid key; `Closed`; `Corruption` (file
    /// and offset) when a block or record on the read path fails its
    /// checksum, or when the index points outside the value store's valid
    /// range; `Io`.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        self.get_opt(&ReadOptions::default(), key)
    }

    /// The values of `keys`, in order, all read at one sequence number
    /// (a snapshot taken for the call). Stops at the first error.
    ///
    /// # Examples
    /// ```
    /// # let dir = std::env::temp_dir().join(format!("sepkv-doc-mget-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir); // a leftover of an earlier run
    /// let db = sepkv::Db::open(&dir, sepkv::Options::default())?;
    /// db.put("a", "1")?;
    /// db.put("c", "3")?;
    /// let got = db.multi_get(["a", "b", "c"])?;
    /// assert_eq!(got, [Some(b"1".to_vec()), None, Some(b"3".to_vec())]);
    /// # drop(db);
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), sepkv::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Db::get`], for the first key that fails.
    pub fn multi_get<K: AsRef<[u8]>>(
        &self,
        keys: impl IntoIterator<Item = K>,
    ) -> Result<Vec<Option<Vec<u8>>>> {
        self.multi_get_opt(&ReadOptions::default(), keys)
    }

    /// [`Db::multi_get`] as of `opts.snapshot` (or one snapshot taken for
    /// the call).
    ///
    /// # Errors
    /// As [`Db::get`], for the first key that fails.
    pub fn multi_get_opt<K: AsRef<[u8]>>(
        &self,
        opts: &ReadOptions<'_>,
        keys: impl IntoIterator<Item = K>,
    ) -> Result<Vec<Option<Vec<u8>>>> {
        let own;
        let opts = match opts.snapshot {
            Some(_) => opts.clone(),
            None => {
                own = self.snapshot()?;
                ReadOptions {
                    snapshot: Some(&own),
                    ..opts.clone()
                }
            }
        };
        keys.into_iter().map(|k| self.get_opt(&opts, k)).collect()
    }

    /// The value of `key` as of `opts.snapshot` (or the latest state).
    ///
    /// # Errors
    /// As [`Db::get`].
    pub fn get_opt(
        &self,
        opts: &ReadOptions<'_>,
        key: impl AsRef<[u8]>,
    ) -> Result<Option<Vec<u8>>> {
        let key = key.as_ref();
        self.check_open()?;
        check_key(key)?;
        let inner = &self.inner;
        let ctx = ReadCtx {
            category: IoCategory::UserRead,
            fill_cache: !opts.dont_fill_cache,
        };
        let mut attempt = 0;
        let v = loop {
            match inner.lookup(key, opts.snapshot.map(|s| s.seq), ctx)? {
                Lookup::NotFound | Lookup::Deleted => break None,
                Lookup::Found(ValueType::Pointer, p) => {
                    let ptr = ValuePointer::decode(&p).ok_or_else(|| {
                        Error::corruption(&inner.shared.dir, 0, "malformed value pointer in index")
                    })?;
                    let r = inner.vstore.read(key, &ptr);
                    // GC may have moved the value and freed its old place
                    // (punched, or the whole file deleted) between the
                    // lookup and the read: look up again. The same pointer
                    // twice means the answer stands.
                    let freed = match &r {
                        Ok(None) | Err(Error::Corruption { .. }) => true,
                        Err(Error::Io { source, .. }) => {
                            source.kind() == std::io::ErrorKind::NotFound
                        }
                        Ok(Some(_)) | Err(_) => false,
                    };
                    let moved = freed
                        && attempt < 3
                        && opts.snapshot.is_none()
                        && inner.current_pointer(key).ok().flatten() != Some(ptr);
                    if moved {
                        attempt += 1;
                        continue;
                    }
                    // A pointer outside the store's valid range is damage:
                    // recovery never admits one (the same rule as scans).
                    break Some(r?.ok_or_else(|| crate::iterator::lost(&ptr))?);
                }
                Lookup::Found(_, v) => break Some(v),
            }
        };
        if let Some(v) = &v {
            inner.counters.user_bytes_read.add(v.len() as u64);
        }
        Ok(v)
    }

    /// Takes a snapshot of the current state: a read view with `get`,
    /// `multi_get`, `scan` and `iter` of its own (see [`Snapshot`]).
    ///
    /// # Errors
    /// `Closed`.
    pub fn snapshot(&self) -> Result<Snapshot<'_>> {
        self.check_open()?;
        Ok(Snapshot::new(self, self.register_snapshot(None)))
    }

    fn register_snapshot(&self, seq: Option<SeqNum>) -> SnapshotPin {
        SnapshotPin::register(&self.inner.shared.snapshots, seq, || {
            self.inner.shared.last_seq.load(Ordering::Acquire)
        })
    }

    /// A cursor over the whole key space (see [`DbIterator`]).
    ///
    /// # Errors
    /// `Closed`.
    pub fn iter(&self, opts: &ReadOptions<'_>) -> Result<DbIterator> {
        self.iter_bounds(opts, None, None)
    }

    /// A cursor over the keys of `range` (any Rust range of keys; see
    /// [`KeyRange`]): `..`, `"a".."m"`, `"a"..=key`, ...
    ///
    /// # Examples
    /// ```
    /// # let dir = std::env::temp_dir().join(format!("sepkv-doc-iterrange-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir); // a leftover of an earlier run
    /// let db = sepkv::Db::open(&dir, sepkv::Options::default())?;
    /// for k in ["a", "b", "c"] {
    ///     db.put(k, k)?;
    /// }
    /// let mut it = db.iter_range(&sepkv::ReadOptions::default(), "b"..)?;
    /// it.seek_to_last();
    /// assert_eq!(it.key(), b"c");
    /// it.prev();
    /// assert_eq!(it.key(), b"b");
    /// it.prev();
    /// assert!(!it.valid());
    /// it.status()?;
    /// # drop(it);
    /// # drop(db);
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), sepkv::Error>(())
    /// ```
    ///
    /// # Errors
    /// `Closed`; `InvalidArgument` when the range starts after it ends.
    pub fn iter_range(&self, opts: &ReadOptions<'_>, range: impl KeyRange) -> Result<DbIterator> {
        let (lower, upper) = range.half_open();
        self.iter_bounds(opts, lower, upper)
    }

    /// A cursor over `[lower, upper)` (`None` = unbounded).
    fn iter_bounds(
        &self,
        opts: &ReadOptions<'_>,
        lower: Option<Vec<u8>>,
        upper: Option<Vec<u8>>,
    ) -> Result<DbIterator> {
        self.check_open()?;
        check_order(lower.as_deref(), upper.as_deref())?;
        let inner = &self.inner;
        // The iterator holds a snapshot of its own, so value-store GC keeps
        // every value it can reach.
        let snap = self.register_snapshot(opts.snapshot.map(|s| s.seq));
        let seq = snap.seq;
        let ctx = ReadCtx {
            category: IoCategory::UserRead,
            fill_cache: !opts.dont_fill_cache,
        };
        let view = inner.index.iter(seq, ctx)?;
        Ok(DbIterator::new(
            view.iter,
            seq,
            inner.vstore.clone(),
            Box::new((view.pin, snap)),
            lower,
            upper,
        ))
    }

    /// `(key, value)` pairs of `range` (any Rust range of keys; see
    /// [`KeyRange`]) in key order, or in reverse, as a Rust iterator.
    ///
    /// # Examples
    /// ```
    /// # let dir = std::env::temp_dir().join(format!("sepkv-doc-scan-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir); // a leftover of an earlier run
    /// let db = sepkv::Db::open(&dir, sepkv::Options::default())?;
    /// for (k, v) in [("a", "1"), ("b", "2"), ("c", "3")] {
    ///     db.put(k, v)?;
    /// }
    /// let pairs: Vec<(Vec<u8>, Vec<u8>)> = db.scan("b".., true)?.collect::<Result<_, _>>()?;
    /// assert_eq!(pairs, [(b"c".to_vec(), b"3".to_vec()), (b"b".to_vec(), b"2".to_vec())]);
    /// # drop(db);
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), sepkv::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Db::iter_range`]; errors met during the scan are yielded.
    pub fn scan(&self, range: impl KeyRange, reverse: bool) -> Result<Scan> {
        self.scan_opt(&ReadOptions::default(), range, reverse)
    }

    /// [`Db::scan`] with read options: as of `opts.snapshot`, and without
    /// filling the block cache with `opts.dont_fill_cache`.
    ///
    /// # Errors
    /// As [`Db::scan`].
    pub fn scan_opt(
        &self,
        opts: &ReadOptions<'_>,
        range: impl KeyRange,
        reverse: bool,
    ) -> Result<Scan> {
        Ok(Scan::new(
            self.iter_range(opts, range)?,
            reverse,
            self.inner.shared.opts.scan_prefetch_depth,
            self.inner.shared.opts.scan_batch_bytes,
        ))
    }
}

impl DbInner {
    /// Newest version of `key` visible at `seq`, or — with `None` — in the
    /// latest state.
    ///
    /// The index pins its read view before it loads the latest sequence
    /// number (`Index::get`): for the LSM-tree, the super-version is taken
    /// before the latest sequence number is loaded, since the other order
    /// lets a compaction installed in between drop the version visible at
    /// the loaded sequence (it keeps only what the oldest snapshot, or the
    /// then latest sequence, can see), and the read would miss the key.
    /// Pinned first, the version's files stay as they were, and a newer
    /// sequence only adds writes the pinned memtables may or may not hold —
    /// writes that raced the read.
    fn lookup(&self, key: &[u8], seq: Option<SeqNum>, ctx: ReadCtx) -> Result<Lookup> {
        self.index.get(key, seq, ctx)
    }
}

/// GC's view of the index.
impl IndexReader for DbInner {
    fn writers_waiting(&self) -> bool {
        self.gc_steps.lock().waiting > 0
    }

    fn current_pointer(&self, key: &[u8]) -> Result<Option<ValuePointer>> {
        let ctx = ReadCtx {
            category: IoCategory::Gc,
            fill_cache: true,
        };
        match self.lookup(key, None, ctx)? {
            Lookup::Found(ValueType::Pointer, p) => Ok(ValuePointer::decode(&p)),
            _ => Ok(None),
        }
    }

    fn points_at(&self, key: &[u8], addr: &ValuePointer) -> Result<bool> {
        self.index.points_at(key, addr)
    }

    fn points_at_many(&self, probes: &[(&[u8], ValuePointer)]) -> Result<Vec<bool>> {
        let (live, blocks) = self.index.points_at_many(probes)?;
        self.counters
            .gc_index_blocks
            .fetch_add(blocks, Ordering::Relaxed);
        Ok(live)
    }

    fn oldest_visible_seq(&self) -> SeqNum {
        self.shared.smallest_snapshot()
    }

    fn last_sequence(&self) -> SeqNum {
        self.shared.last_seq.load(Ordering::Acquire)
    }

    fn has_readers(&self) -> bool {
        self.shared.newest_snapshot().is_some()
    }

    fn wait_in_flight_writes(&self) -> Result<()> {
        // A write appends its values, logs and inserts them, and publishes
        // its sequence number all under the writer lock; a write that fails
        // in between poisons the database before it lets go. Once the lock
        // is ours, every earlier append is published or poisoned.
        let guard = self.writer.lock();
        self.shared.poisoned()?;
        if !*guard {
            return Err(Error::Closed);
        }
        Ok(())
    }
}
