//! sepkv: a persistent key-value storage engine built on key-value
//! separation.
//!
//! An index keeps keys (and small values); a value store keeps large values.
//! The index and the value layout are chosen when a database is created
//! (see [`Options`], [`Preset`]) and recorded in it. This build implements
//! the LSM-tree index with inline values (the `leveldb` preset); the
//! value-store contract ([`vstore::ValueStore`]) is where the separated
//! layouts plug in.
//!
//! ```
//! use sepkv::{Db, Options, WriteBatch, WriteOptions};
//! let dir = tempfile::tempdir().unwrap();
//! let db = Db::open(dir.path(), Options::default()).unwrap();
//! let mut batch = WriteBatch::new();
//! batch.put(b"a", b"1").unwrap();
//! batch.put(b"b", b"2").unwrap();
//! db.write(&batch, WriteOptions { sync: true }).unwrap();
//! let keys: Vec<_> = db.scan(None, None, false).unwrap().map(|r| r.unwrap().0).collect();
//! assert_eq!(keys, vec![b"a".to_vec(), b"b".to_vec()]);
//! ```
#![deny(missing_docs)]
#![deny(unsafe_code)]

mod batch;
mod commit;
mod db;
pub mod error;
pub mod format;
pub mod fs;
#[doc(hidden)]
pub mod fuzzing;
mod identity;
pub mod index;
mod iterator;
pub mod options;
pub mod vstore;

pub use batch::{BatchEntry, WriteBatch};
pub use db::{stored_config, Db, DbStats, GcReport, LevelStats, Snapshot, VerifyReport};
pub use error::{Error, Result};
pub use identity::FORMAT_VERSION;
pub use iterator::{DbIterator, Scan};
pub use options::{
    IndexKind, Options, Preset, ReadOptions, ValueLayout, WriteOptions, MAX_BATCH_SIZE,
    MAX_KEY_SIZE, MAX_VALUE_SIZE,
};
