//! Compaction filters: user code that drops records while the engine
//! rewrites them, as RocksDB's `CompactionFilter` does — the way expired
//! or orphaned data gives its space back without a delete per key.
//!
//! Set one with [`crate::Options::compaction_filter`]. The engine then asks
//! [`CompactionFilter::filter`] about records it is rewriting anyway, and a
//! [`FilterDecision::Remove`] is as if the key had been deleted at that
//! moment.
//!
//! # Contract
//!
//! - **Which records.** The newest version of a key that one rewrite meets
//!   (a newer version may still sit in the memtable or in a level above the
//!   compaction's inputs; it is offered when a compaction meets it), and
//!   only puts: deletions and tombstones are never offered. A record a live
//!   [`crate::Snapshot`] or iterator can read (its sequence number is at
//!   most the newest registered reader's when the compaction starts) is not
//!   offered, and stays: the rule RocksDB follows. Band GC (`flashkey`) is
//!   stricter: it offers nothing while any reader is registered, since
//!   removing a key's hash-table node would cut an older reader off from
//!   the versions it walks back to.
//! - **When.** During LSM compactions (leveled and lightweight: every
//!   preset whose index is `lsm` or `lwc`, so `leveldb`, `wisckey`,
//!   `hashkv`, `ktstore`, `lwc`) and, for the `hash` index (`flashkey`),
//!   which has no compaction, during band GC, for each live record of the
//!   band it collects. Memtable flushes do not call the filter: a flush
//!   keeps every entry (older versions may lie in the tables below, so a
//!   removal there would need a tombstone anyway), runs on the path
//!   writers wait for, and meets data seconds old; the first compaction
//!   of the flushed table asks the filter. A record that no rewrite meets
//!   is not asked about: leveled compaction moves a file down without
//!   rewriting it when nothing below overlaps it, the bottommost level is
//!   rewritten only by [`crate::Db::compact_range`], and band GC takes
//!   bands with garbage first. To bound the space of data that expires,
//!   call `compact_range(..)` and [`crate::Db::gc`] now and then (for
//!   example once per lifetime of the data): with a filter set, `Db::gc`
//!   on `flashkey` closes the open band and takes every band once.
//! - **What a removal does.** As if the key had been deleted when the
//!   rewrite is installed. In an upper level, or where a live snapshot
//!   still needs an older version, the record becomes a tombstone at its
//!   own sequence number, so no older version comes back; where no older
//!   version can lie below and no reader needs one, nothing is left. A
//!   separated value becomes garbage for its value store's GC exactly as
//!   an overwritten one does (it is reported to the value log's, HashKV's
//!   and the trie layout's garbage tables the way compaction reports a
//!   shadowed pointer; band GC does not copy it). Value-store GC does not
//!   relocate values while a filtering compaction runs, so it cannot write
//!   a removed record back. Removals are counted in
//!   [`crate::DbStats::filter_removed`].
//! - **Snapshots.** Records a registered reader can see are not offered
//!   (above). A snapshot taken *while* a compaction runs, at a sequence
//!   number past a record that compaction removes, reads the record until
//!   the compaction is installed and not afterwards.
//! - **Determinism.** A `Remove` is final, and the same record may be
//!   offered more than once (a compaction that fails runs again): decide
//!   from the key and value, and from state that only moves one way (a
//!   clock, an epoch), so that a record removed once would be removed
//!   whenever it is met again.
//! - **Reading the database.** The filter may read the same database
//!   (`Db::get`, `Db::iter`, scans, snapshots) from inside the callback: no
//!   lock a read takes is held while it runs. It must not write to it: a
//!   write may wait for room that only the calling compaction or GC step
//!   makes.
//! - **Threads.** The filter is called from background threads (the
//!   compaction thread; for `flashkey`, the GC thread, [`crate::Db::gc`]'s
//!   caller, or a writer running GC for room), possibly from several at
//!   once: it is `Send + Sync`.
//! - **Cost.** The filter runs once per record a rewrite meets. Deciding on
//!   the key alone reads nothing; [`LazyValue::get`] of a separated value
//!   reads it from the value store (a random read per record, where the
//!   compaction otherwise reads only the index), so a filter that needs
//!   the value makes compactions slower by that much. Band GC has the
//!   value at hand. [`LazyValue::len`] reads nothing. While a filtering
//!   compaction runs, value-store GC's relocations wait for it.
//! - **Name.** [`CompactionFilter::name`] is for logs and stats and is not
//!   recorded in the database (as in RocksDB): a reopen may set another
//!   filter or none; records already removed stay removed.
//!
//! # Examples
//! ```
//! use sepkv::{CompactionFilter, Db, FilterDecision, LazyValue, Options};
//! use std::sync::Arc;
//!
//! /// Drops every key under `tmp:`.
//! struct DropTmp;
//! impl CompactionFilter for DropTmp {
//!     fn name(&self) -> &str {
//!         "drop-tmp"
//!     }
//!     fn filter(&self, key: &[u8], _value: &LazyValue<'_>) -> FilterDecision {
//!         if key.starts_with(b"tmp:") {
//!             FilterDecision::Remove
//!         } else {
//!             FilterDecision::Keep
//!         }
//!     }
//! }
//!
//! # let dir = std::env::temp_dir().join(format!("sepkv-doc-cfilter-{}", std::process::id()));
//! # let _ = std::fs::remove_dir_all(&dir); // a leftover of an earlier run
//! let opts = Options { compaction_filter: Some(Arc::new(DropTmp)), ..Options::default() };
//! let db = Db::open(&dir, opts)?;
//! db.put("tmp:1", "scratch")?;
//! db.put("user:1", "alice")?;
//! db.compact_range(..)?; // flushes, then rewrites every level
//! assert_eq!(db.get("tmp:1")?, None);
//! assert_eq!(db.get("user:1")?.as_deref(), Some(&b"alice"[..]));
//! assert_eq!(db.stats()?.filter_removed, 1);
//! # drop(db);
//! # std::fs::remove_dir_all(&dir).unwrap();
//! # Ok::<(), sepkv::Error>(())
//! ```

use crate::error::{Error, Result};
use crate::vstore::{ValuePointer, ValueStore};
use std::borrow::Cow;

/// Decides, record by record, whether a rewrite keeps what it meets. See
/// the [module docs](self) for the full contract.
pub trait CompactionFilter: Send + Sync + 'static {
    /// A short name for logs and stats (not recorded in the database).
    fn name(&self) -> &str;

    /// Decides on the newest version of one key met by compaction (and by
    /// value-store GC where a layout has no compaction). `value` reads the
    /// user value lazily: a filter that decides on the key alone never
    /// causes a value-store read.
    fn filter(&self, key: &[u8], value: &LazyValue<'_>) -> FilterDecision;
}

/// What [`CompactionFilter::filter`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterDecision {
    /// The record stays as it is.
    Keep,
    /// The key is deleted as of the rewrite: reads no longer see this
    /// version once the rewrite is installed, and a separated value becomes
    /// value-store garbage.
    Remove,
}

/// The value of the record offered to a [`CompactionFilter`], read only
/// when asked for.
pub struct LazyValue<'a> {
    key: &'a [u8],
    source: Source<'a>,
}

enum Source<'a> {
    /// The value itself: kept inline in the index, or already read.
    Here(&'a [u8]),
    /// A separated value: where it lies in the value store.
    Separated {
        ptr: ValuePointer,
        vstore: &'a dyn ValueStore,
    },
}

impl<'a> LazyValue<'a> {
    /// A value the caller holds.
    pub(crate) fn here(key: &'a [u8], value: &'a [u8]) -> Self {
        LazyValue {
            key,
            source: Source::Here(value),
        }
    }

    /// A separated value at `ptr` in `vstore`.
    pub(crate) fn separated(key: &'a [u8], ptr: ValuePointer, vstore: &'a dyn ValueStore) -> Self {
        LazyValue {
            key,
            source: Source::Separated { ptr, vstore },
        }
    }

    /// The value's bytes. An inline value is borrowed; a separated one is
    /// read from the value store (checksum and key verified) on every call.
    ///
    /// # Errors
    /// What a value-store read returns (`Io`, `Corruption` with file and
    /// offset), and `Corruption` when the pointer lies outside the store.
    /// A filter that cannot read the value should return
    /// [`FilterDecision::Keep`]: the record is offered again by a later
    /// rewrite.
    pub fn get(&self) -> Result<Cow<'_, [u8]>> {
        match &self.source {
            Source::Here(v) => Ok(Cow::Borrowed(v)),
            Source::Separated { ptr, vstore } => match vstore.read(self.key, ptr)? {
                Some(v) => Ok(Cow::Owned(v)),
                None => Err(Error::Corruption {
                    file: format!("{} value store", vstore.name()).into(),
                    offset: ptr.offset,
                    reason: format!(
                        "value pointer of file {} outside the store's valid range \
                         (met by a compaction filter)",
                        ptr.file_id
                    ),
                }),
            },
        }
    }

    /// The stored size in bytes, without reading anything: exact for an
    /// inline value; for a separated value, the size of its value-store
    /// record (the value plus the key and the record's header, a few dozen
    /// bytes), so never less than the value's length.
    pub fn len(&self) -> usize {
        match &self.source {
            Source::Here(v) => v.len(),
            Source::Separated { ptr, .. } => ptr.length as usize,
        }
    }

    /// True when [`LazyValue::len`] is 0 (an empty inline value).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when the value lies in the value store, so that
    /// [`LazyValue::get`] reads it.
    pub fn is_separated(&self) -> bool {
        matches!(self.source, Source::Separated { .. })
    }
}
