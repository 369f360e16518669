//! The Raft log and vote, stored in a second sepkv [`Db`] of their own
//! (`raft/` under the data directory), every change written with `sync`.
//!
//! Records (values are bincode):
//!
//! ```text
//! "v"                    the vote
//! "c"                    the last committed log id
//! "p"                    the last purged log id
//! "e" | index (u64 BE)   one entry
//! ```
//!
//! The log is kept apart from the state machine's database so that the
//! state machine's `--fsync` policy, its compactions and its snapshots
//! never touch it, and a wiped state machine (a snapshot being installed)
//! leaves the vote in place.
//!
//! Thread-safety: [`LogStore`] is a cheap handle (`Clone`) over a shared
//! `Db`; openraft calls it from its own task.

// openraft's storage traits return its (large) error type as it is.
#![allow(clippy::result_large_err)]

use super::TypeConfig;
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{
    Entry, ErrorSubject, ErrorVerb, LogId, RaftLogReader, StorageError, StorageIOError, Vote,
};
use sepkv::{Db, WriteBatch, WriteOptions};
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

const VOTE: &[u8] = b"v";
const COMMITTED: &[u8] = b"c";
const PURGED: &[u8] = b"p";

fn entry_key(index: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(9);
    k.push(b'e');
    k.extend_from_slice(&index.to_be_bytes());
    k
}

fn io_err(
    subject: ErrorSubject<u64>,
    verb: ErrorVerb,
    e: impl std::fmt::Display,
) -> StorageError<u64> {
    StorageIOError::new(subject, verb, openraft::AnyError::error(e.to_string())).into()
}

fn read_err(e: impl std::fmt::Display) -> StorageError<u64> {
    io_err(ErrorSubject::Logs, ErrorVerb::Read, e)
}

fn write_err(e: impl std::fmt::Display) -> StorageError<u64> {
    io_err(ErrorSubject::Logs, ErrorVerb::Write, e)
}

/// The log and vote store.
#[derive(Clone)]
pub struct LogStore {
    db: Arc<Db>,
}

impl LogStore {
    /// Opens (or creates) the log database at `dir`.
    ///
    /// # Errors
    /// The engine's open error.
    pub fn open(dir: &std::path::Path) -> Result<LogStore, sepkv::Error> {
        let db = Db::open(dir, sepkv::Options::default())?;
        Ok(LogStore { db: Arc::new(db) })
    }

    fn get<T: serde::de::DeserializeOwned>(
        &self,
        key: &[u8],
    ) -> Result<Option<T>, StorageError<u64>> {
        match self.db.get(key).map_err(read_err)? {
            None => Ok(None),
            Some(v) => bincode::deserialize(&v)
                .map(Some)
                .map_err(|e| read_err(format!("raft log record {key:?} is malformed: {e}"))),
        }
    }

    fn put<T: serde::Serialize>(&self, key: &[u8], v: &T) -> Result<(), StorageError<u64>> {
        let mut b = WriteBatch::new();
        b.put(key, bincode::serialize(v).map_err(write_err)?)
            .map_err(write_err)?;
        self.db
            .write(&b, WriteOptions { sync: true })
            .map_err(write_err)
    }

    /// Deletes the entries of `range`, then writes `extra` in the same
    /// synced batch.
    fn delete_range(
        &self,
        range: (Bound<u64>, Bound<u64>),
        extra: Option<(&[u8], Vec<u8>)>,
    ) -> Result<(), StorageError<u64>> {
        let lo = match range.0 {
            Bound::Included(i) => entry_key(i),
            Bound::Excluded(i) => entry_key(i + 1),
            Bound::Unbounded => entry_key(0),
        };
        let hi = match range.1 {
            Bound::Included(i) => Bound::Included(entry_key(i)),
            Bound::Excluded(i) => Bound::Excluded(entry_key(i)),
            Bound::Unbounded => Bound::Excluded(b"f".to_vec()),
        };
        let mut b = WriteBatch::new();
        for r in self
            .db
            .scan((Bound::Included(lo), hi), false)
            .map_err(read_err)?
        {
            let (k, _) = r.map_err(read_err)?;
            b.delete(&k).map_err(write_err)?;
            if b.len() >= 4096 {
                self.db
                    .write(&b, WriteOptions { sync: false })
                    .map_err(write_err)?;
                b = WriteBatch::new();
            }
        }
        if let Some((k, v)) = extra {
            b.put(k, v).map_err(write_err)?;
        }
        self.db
            .write(&b, WriteOptions { sync: true })
            .map_err(write_err)
    }

    /// Closes the log database.
    pub fn close(&self) {
        let _ = self.db.close();
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<u64>> {
        let lo = match range.start_bound() {
            Bound::Included(&i) => entry_key(i),
            Bound::Excluded(&i) => entry_key(i + 1),
            Bound::Unbounded => entry_key(0),
        };
        let hi = match range.end_bound() {
            Bound::Included(&i) => Bound::Included(entry_key(i)),
            Bound::Excluded(&i) => Bound::Excluded(entry_key(i)),
            Bound::Unbounded => Bound::Excluded(b"f".to_vec()),
        };
        let mut out = Vec::new();
        for r in self
            .db
            .scan((Bound::Included(lo), hi), false)
            .map_err(read_err)?
        {
            let (k, v) = r.map_err(read_err)?;
            let e: Entry<TypeConfig> = bincode::deserialize(&v)
                .map_err(|e| read_err(format!("raft log entry {k:?} is malformed: {e}")))?;
            out.push(e);
        }
        Ok(out)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<u64>> {
        let purged = self.get::<Option<LogId<u64>>>(PURGED)?.flatten();
        let last = match self
            .db
            .scan(entry_key(0)..b"f".to_vec(), true)
            .map_err(read_err)?
            .next()
        {
            Some(r) => {
                let (_, v) = r.map_err(read_err)?;
                let e: Entry<TypeConfig> = bincode::deserialize(&v).map_err(read_err)?;
                Some(e.log_id)
            }
            None => purged,
        };
        Ok(LogState {
            last_purged_log_id: purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError<u64>> {
        self.put(VOTE, vote).map_err(|_| {
            io_err(
                ErrorSubject::Vote,
                ErrorVerb::Write,
                "the vote was not saved",
            )
        })
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError<u64>> {
        self.get(VOTE)
    }

    async fn save_committed(&mut self, c: Option<LogId<u64>>) -> Result<(), StorageError<u64>> {
        self.put(COMMITTED, &c)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<u64>>, StorageError<u64>> {
        Ok(self.get::<Option<LogId<u64>>>(COMMITTED)?.flatten())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<u64>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let mut b = WriteBatch::new();
        for e in entries {
            b.put(
                entry_key(e.log_id.index),
                bincode::serialize(&e).map_err(write_err)?,
            )
            .map_err(write_err)?;
        }
        let r = self.db.write(&b, WriteOptions { sync: true });
        match r {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(write_err(e))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        self.delete_range((Bound::Included(log_id.index), Bound::Unbounded), None)
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        let v = bincode::serialize(&Some(log_id)).map_err(write_err)?;
        self.delete_range(
            (Bound::Unbounded, Bound::Included(log_id.index)),
            Some((PURGED, v)),
        )
    }
}
