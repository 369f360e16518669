//! sepkv: a persistent key-value storage engine built on key-value
//! separation.
//!
//! An index keeps keys (and small values); a value store keeps large values.
//! The index and the value layout are chosen when a database is created
//! (see [`Options`], [`Preset`]), recorded in it, and read back when it is
//! opened again.
//!
//! ```
//! use sepkv::{Db, Options, Preset, WriteBatch, WriteOptions};
//!
//! let dir = std::env::temp_dir().join(format!("sepkv-example-{}", std::process::id()));
//! # let _ = std::fs::remove_dir_all(&dir); // a leftover of an earlier run
//! let db = Db::open(&dir, Options::preset(Preset::WiscKey))?;
//! db.put("user:1", "alice")?;
//! let mut batch = WriteBatch::new();
//! batch.put("user:2", "bob")?;
//! batch.delete("user:1")?;
//! db.write(&batch, WriteOptions { sync: true })?; // atomic, durable on return
//! assert_eq!(db.get("user:2")?.as_deref(), Some(&b"bob"[..]));
//!
//! let snap = db.snapshot()?; // a consistent view
//! db.put("user:3", "carol")?;
//! let keys: Vec<Vec<u8>> = snap.scan("user:".., false)?.map(|r| r.map(|(k, _)| k)).collect::<Result<_, _>>()?;
//! assert_eq!(keys, [b"user:2".to_vec()]);
//! drop(snap);
//! db.close()?;
//!
//! // The database records its configuration: reopen with the defaults.
//! let db = Db::open(&dir, Options::default())?;
//! assert_eq!(db.get("user:3")?.as_deref(), Some(&b"carol"[..]));
//! db.close()?;
//! std::fs::remove_dir_all(&dir).expect("remove the example database");
//! # Ok::<(), sepkv::Error>(())
//! ```
//!
//! # Presets: which to pick
//!
//! Figures from `docs/benchmarks.md` (1 M × 16-byte keys and 1000-byte
//! values, about 1 GiB, one client thread; from the page cache on
//! 2026-11-28 beside fjall 3, RocksDB and BlobDB, C++ LevelDB and Badger,
//! and device-bound under a 400 MiB memory limit on 2026-11-29):
//!
//! - [`Preset::LevelDb`] (lsm + inline, the default): no value store to size
//!   or collect. Pick it for small values, scan-heavy work and short-lived
//!   data: it is sepkv's fastest preset for scans (1.24× C++ LevelDB's
//!   100-entry scans from the page cache).
//! - [`Preset::WiscKey`] (lsm + vlog): values of at least
//!   `value_threshold` bytes go to a value log. Pick it for large values
//!   and write-heavy work: it is the fastest preset for random loads, at
//!   about half the write amplification of the fastest peer (1.11 against
//!   fjall-kv's 2.16) but not its speed (0.61× fjall-kv from the page
//!   cache, 0.80× device-bound). Garbage is reclaimed by [`Db::gc`] and a
//!   background thread.
//! - [`Preset::HashKv`] (lsm + hashkv): values hashed to fixed-size segment
//!   groups collected one group at a time. Pick it for update-heavy work on
//!   a bounded store (`value_capacity`): 1.10–1.67× the capped value log's
//!   update throughput per phase (1.13–1.32× in the last phase) writing
//!   0.94–1.00× its bytes, at 300 k × 1000-byte records (HashKV §4.2's
//!   experiment, scaled); it led YCSB A (1.53× the best peer).
//!
//! - [`Preset::KtStore`] (lsm + trie): values in TrieTables partitioned by
//!   key prefix, so a range scan reads each table's span once (KT-Store
//!   §3.3). Scans gain where reads reach the device (2.7× `wisckey`'s
//!   100-entry scans device-bound); from the page cache they run at 0.80×
//!   `wisckey`'s.
//!
//! - [`Preset::FlashKey`] (hash + bands, FlashKey §V): a hash-table index
//!   (in memory or on disk behind a bounded page cache) over logical bands
//!   that are the only log, with a key-only LSM-tree for ordered scans; a
//!   point read reads one record; reads at snapshots walk each record's
//!   previous-version address.
//!
//! - [`Preset::Lwc`] (lwc + inline): the LWC-tree (LWC-tree §3): deeper
//!   levels hold append-only DTables, and a compaction reads one victim and
//!   appends a segment to each overlapping DTable below instead of
//!   rewriting them. Index `lwc` also combines with `vlog`, `hashkv` and
//!   `trie` through [`Options::index`].
//!
//! Every preset is implemented in this build; an index and value layout
//! that do not combine (for example `hash` with `vlog`) fail with
//! [`Error::InvalidArgument`] listing what is.
//!
//! # Durability
//!
//! - `WriteOptions { sync: true }`: once `write` returns, the write and
//!   every earlier write survive a process crash or a power loss.
//! - `sync: false` (the default, and what [`Db::put`] and [`Db::delete`]
//!   do): the write survives a process crash once `write` returns; a power
//!   loss may drop it with every later write, never an earlier synced one.
//! - A [`WriteBatch`] is atomic, and recovery restores a prefix of the
//!   write history: no holes.
//! - Damage found on disk is [`Error::Corruption`] naming file and offset,
//!   never a wrong value; after a failed write or `fsync` the database
//!   refuses writes ([`Error::Poisoned`]) until reopened.
//!
//! # Threads
//!
//! [`Db`] is `Send + Sync`: share one handle between threads by reference or
//! in an `Arc`. Writes are serialized by a writer lock; reads take no lock
//! on the write path and run in parallel with writes, flushes, compactions
//! and value-store GC. [`Snapshot`]s are `Send + Sync` and borrow their
//! `Db`; iterators ([`DbIterator`], [`Scan`]) own what they read and are
//! `Send`. One process at a time may open a database (a second open is
//! [`Error::Busy`]).
#![deny(missing_docs)]
#![deny(unsafe_code)]

mod batch;
mod commit;
pub mod compaction_filter;
mod counter;
mod db;
mod error;
#[doc(hidden)]
pub mod format;
pub mod fs;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod identity;
#[doc(hidden)]
pub mod index;
mod iterator;
mod options;
mod range;
mod report;
mod sched;
#[doc(hidden)]
pub mod seqno;
mod snapshot;
mod spin;
#[doc(hidden)]
pub mod value_type;
#[doc(hidden)]
pub mod vstore;

/// The README's Rust program, compiled and run as a doctest so that the
/// first code a reader copies keeps working.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

pub use batch::{BatchEntry, WriteBatch};
pub use compaction_filter::{CompactionFilter, FilterDecision, LazyValue};
pub use db::{
    stored_config, CheckpointReport, Db, DbStats, FileGroupStats, GcReport, LevelStats,
    RepairReport, VerifyReport,
};
pub use error::{Error, Result};
pub use identity::{FORMAT_VERSION, OLDEST_FORMAT_VERSION};
pub use index::compaction::CompactionStats;
pub use iterator::{DbIterator, Scan};
pub use options::{
    HashIndexMode, IndexKind, Options, Preset, ReadOptions, ValueLayout, WriteOptions,
    GC_ON_CLOSE_BUDGET, MAX_BATCH_SIZE, MAX_KEY_SIZE, MAX_VALUE_SIZE,
};
pub use range::KeyRange;
pub use snapshot::Snapshot;
