//! Snapshots: consistent read views of a [`Db`].
//!
//! A [`Snapshot`] names a sequence number; reads through it see every write
//! up to that number and none after, whatever is written, flushed,
//! compacted or garbage-collected meanwhile. It borrows the [`Db`] it was
//! taken from, as the `rocksdb` crate's snapshots do, so it cannot outlive
//! the handle. Every iterator or scan keeps a registration of its own, so
//! an iterator opened through a snapshot stays valid after the snapshot is
//! dropped.
//!
//! While a snapshot lives, compaction keeps every version it can see and
//! value-store GC keeps every value it can reach (WiscKey §3.3.2): drop
//! snapshots you no longer need. Snapshots are `Send + Sync`.

use crate::db::Db;
use crate::error::Result;
use crate::iterator::{DbIterator, Scan};
use crate::options::ReadOptions;
use crate::range::KeyRange;
use crate::seqno::SeqNum;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Live read views: sequence number → number of holders.
pub(crate) type SnapshotList = Arc<Mutex<BTreeMap<SeqNum, usize>>>;

/// One registration in the snapshot list, released on drop. Snapshots,
/// iterators and scans each hold one.
pub(crate) struct SnapshotPin {
    pub(crate) seq: SeqNum,
    list: SnapshotList,
}

impl SnapshotPin {
    /// Registers a reader at `seq`, or at the sequence `current` returns
    /// when `seq` is `None` (read under the list's lock, so the oldest
    /// registered sequence never moves backwards).
    pub(crate) fn register(
        list: &SnapshotList,
        seq: Option<SeqNum>,
        current: impl FnOnce() -> SeqNum,
    ) -> SnapshotPin {
        let mut l = list.lock();
        let seq = seq.unwrap_or_else(current);
        *l.entry(seq).or_insert(0) += 1;
        SnapshotPin {
            seq,
            list: list.clone(),
        }
    }
}

impl Drop for SnapshotPin {
    fn drop(&mut self) {
        let mut l = self.list.lock();
        if let Some(c) = l.get_mut(&self.seq) {
            *c -= 1;
            if *c == 0 {
                l.remove(&self.seq);
            }
        }
    }
}

/// A consistent read view of a [`Db`] (see the module docs), taken with
/// [`Db::snapshot`].
///
/// # Examples
/// ```
/// # let dir = std::env::temp_dir().join(format!("sepkv-doc-snapshot-{}", std::process::id()));
/// # let _ = std::fs::remove_dir_all(&dir); // a leftover of an earlier run
/// let db = sepkv::Db::open(&dir, sepkv::Options::default())?;
/// db.put("a", "1")?;
/// let snap = db.snapshot()?;
/// db.put("a", "2")?;
/// db.put("b", "2")?;
/// assert_eq!(snap.get("a")?.as_deref(), Some(&b"1"[..]));
/// assert_eq!(snap.get("b")?, None);
/// assert_eq!(db.get("a")?.as_deref(), Some(&b"2"[..]));
/// let keys: Vec<_> = snap.scan(.., false)?.map(|r| r.unwrap().0).collect();
/// assert_eq!(keys, [b"a".to_vec()]);
/// // An iterator keeps its view after the snapshot is gone.
/// let mut it = snap.iter()?;
/// drop(snap);
/// it.seek_to_first();
/// assert_eq!((it.key(), it.value()), (&b"a"[..], &b"1"[..]));
/// # drop(it);
/// # drop(db);
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # Ok::<(), sepkv::Error>(())
/// ```
pub struct Snapshot<'a> {
    pub(crate) seq: SeqNum,
    db: &'a Db,
    _pin: SnapshotPin,
}

impl std::fmt::Debug for Snapshot<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot").field("seq", &self.seq).finish()
    }
}

impl<'a> Snapshot<'a> {
    pub(crate) fn new(db: &'a Db, pin: SnapshotPin) -> Self {
        Snapshot {
            seq: pin.seq,
            db,
            _pin: pin,
        }
    }

    /// The sequence number the snapshot reads at.
    pub fn sequence(&self) -> SeqNum {
        self.seq
    }

    /// Read options that read through this snapshot, to change further
    /// (e.g. `dont_fill_cache`) and pass to [`Db::get_opt`],
    /// [`Db::iter_range`] or [`Db::scan_opt`].
    pub fn read_options(&self) -> ReadOptions<'_> {
        ReadOptions {
            snapshot: Some(self),
            ..Default::default()
        }
    }

    /// The value of `key` as of the snapshot, or `None`.
    ///
    /// # Errors
    /// As [`Db::get`].
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        self.db.get_opt(&self.read_options(), key)
    }

    /// The values of `keys` as of the snapshot, in order (see
    /// [`Db::multi_get`]).
    ///
    /// ```
    /// # let dir = std::env::temp_dir().join(format!("sepkv-doc-snapmget-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir); // a leftover of an earlier run
    /// let db = sepkv::Db::open(&dir, sepkv::Options::default())?;
    /// db.put("a", "1")?;
    /// let snap = db.snapshot()?;
    /// db.delete("a")?;
    /// assert_eq!(snap.multi_get(["a", "b"])?, [Some(b"1".to_vec()), None]);
    /// # drop(snap);
    /// # drop(db);
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), sepkv::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Db::multi_get`].
    pub fn multi_get<K: AsRef<[u8]>>(
        &self,
        keys: impl IntoIterator<Item = K>,
    ) -> Result<Vec<Option<Vec<u8>>>> {
        self.db.multi_get_opt(&self.read_options(), keys)
    }

    /// `(key, value)` pairs of `range` as of the snapshot, in key order or
    /// in reverse (see [`Db::scan`]).
    ///
    /// # Errors
    /// As [`Db::scan`].
    pub fn scan(&self, range: impl KeyRange, reverse: bool) -> Result<Scan> {
        self.db.scan_opt(&self.read_options(), range, reverse)
    }

    /// A cursor over every key as of the snapshot (see [`DbIterator`]).
    ///
    /// # Errors
    /// As [`Db::iter`].
    pub fn iter(&self) -> Result<DbIterator> {
        self.db.iter(&self.read_options())
    }

    /// A cursor over the keys of `range` as of the snapshot.
    ///
    /// ```
    /// # let dir = std::env::temp_dir().join(format!("sepkv-doc-snapiter-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir); // a leftover of an earlier run
    /// let db = sepkv::Db::open(&dir, sepkv::Options::default())?;
    /// db.put("a", "1")?;
    /// db.put("b", "1")?;
    /// let snap = db.snapshot()?;
    /// db.put("a0", "new")?;
    /// let mut it = snap.iter_range("a"..="b")?;
    /// it.seek_to_first();
    /// let mut keys = Vec::new();
    /// while it.valid() {
    ///     keys.push(it.key().to_vec());
    ///     it.next();
    /// }
    /// it.status()?;
    /// assert_eq!(keys, [b"a".to_vec(), b"b".to_vec()]);
    /// # drop(it);
    /// # drop(snap);
    /// # drop(db);
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), sepkv::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Db::iter_range`].
    pub fn iter_range(&self, range: impl KeyRange) -> Result<DbIterator> {
        self.db.iter_range(&self.read_options(), range)
    }
}
