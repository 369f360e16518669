//! The state machine: committed entries applied to the node's keyspace.
//!
//! Each entry holds write commands and the leader's clock reading; every
//! replica runs them against its own [`Keyspace`] at that time
//! ([`crate::keyspace::with_clock`]), so each reaches the same records,
//! and the leader answers its client with the replies its own apply
//! produced. The applied log id and membership are written in the same
//! engine batch as the entries' records (`0xFF "raft-applied"`), so after
//! a crash the state machine resumes exactly after its last batch and
//! Raft replays the rest from the log.
//!
//! Snapshots are checkpoints ([`sepkv::Db::checkpoint`]) of the node's
//! database taken under the keyspace's writer lock, so they hold exactly
//! the entries up to the applied log id they record. They travel as the
//! checkpoint's files. A replica installs one by opening the received
//! checkpoint read-only and replacing its own records with its records
//! (the node-local cluster records are kept); `0xFF "raft-installing"`
//! marks an install in progress, and a node that finds it at start-up
//! starts from an empty state machine so that the leader sends the
//! snapshot again.
//!
//! Thread-safety: openraft drives the state machine from one task; the
//! snapshot builder runs beside it and synchronizes through the keyspace's
//! writer lock.

use super::{Request, Response, TypeConfig};
use crate::command::{lookup, run_write};
use crate::keys::{CLUSTER_MARKS_KEY, CLUSTER_TOPOLOGY_KEY, RAFT_APPLIED_KEY, RAFT_INSTALLING_KEY};
use crate::keyspace::{with_clock, Keyspace};
use crate::resp::Reply;
use bytes::Bytes;
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    Entry, EntryPayload, ErrorSubject, ErrorVerb, LogId, RaftSnapshotBuilder, SnapshotMeta,
    StorageError, StorageIOError, StoredMembership,
};
use sepkv::{Db, WriteBatch, WriteOptions};
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

type Membership = StoredMembership<u64, openraft::BasicNode>;

/// The last snapshot built or installed: its meta and its bytes.
type Current = Arc<Mutex<Option<(SnapshotMeta<u64, openraft::BasicNode>, Vec<u8>)>>>;

fn sm_err(verb: ErrorVerb, e: impl std::fmt::Display) -> StorageError<u64> {
    StorageIOError::new(
        ErrorSubject::StateMachine,
        verb,
        openraft::AnyError::error(e.to_string()),
    )
    .into()
}

fn snap_err(verb: ErrorVerb, e: impl std::fmt::Display) -> StorageError<u64> {
    StorageIOError::new(
        ErrorSubject::Snapshot(None),
        verb,
        openraft::AnyError::error(e.to_string()),
    )
    .into()
}

/// What `0xFF "raft-applied"` holds.
#[derive(serde::Serialize, serde::Deserialize, Default, Clone)]
struct Applied {
    log_id: Option<LogId<u64>>,
    membership: Membership,
    /// The clock of the last applied entry: later entries never run
    /// earlier (a new leader's clock may be behind the old one's).
    clock: u64,
}

/// A snapshot as it travels: the checkpoint's files, by relative path.
#[derive(serde::Serialize, serde::Deserialize)]
struct Files {
    files: Vec<(String, Vec<u8>)>,
}

/// The state machine of one node.
pub struct Machine {
    ks: Arc<Keyspace>,
    /// Where snapshots are built and unpacked (beside the database).
    work: PathBuf,
    applied: Applied,
    current: Current,
    snapshots: Arc<AtomicU64>,
}

impl Machine {
    /// The state machine over `ks`; `work` is a directory for snapshot
    /// files. An install interrupted by a crash leaves an empty state.
    ///
    /// # Errors
    /// Engine errors; a malformed applied record.
    pub fn open(ks: Arc<Keyspace>, work: PathBuf) -> Result<Machine, String> {
        let db = ks.db().clone();
        if db
            .get(RAFT_INSTALLING_KEY)
            .map_err(|e| e.to_string())?
            .is_some()
        {
            eprintln!("cluster: a snapshot install was interrupted; starting from an empty state");
            clear(&db).map_err(|e| e.to_string())?;
            ks.reload().map_err(|e| e.to_string())?;
        }
        let applied = match db.get(RAFT_APPLIED_KEY).map_err(|e| e.to_string())? {
            Some(v) => bincode::deserialize(&v)
                .map_err(|e| format!("the applied Raft state in the database is malformed: {e}"))?,
            None => Applied::default(),
        };
        Ok(Machine {
            ks,
            work,
            applied,
            current: Arc::new(Mutex::new(None)),
            snapshots: Arc::new(AtomicU64::new(0)),
        })
    }

    fn builder(&self) -> Builder {
        Builder {
            ks: self.ks.clone(),
            work: self.work.clone(),
            current: self.current.clone(),
            snapshots: self.snapshots.clone(),
        }
    }
}

/// Whether `k` is a node-local record that snapshots neither carry nor
/// replace.
fn local(k: &[u8]) -> bool {
    k == CLUSTER_TOPOLOGY_KEY || k == CLUSTER_MARKS_KEY || k == RAFT_INSTALLING_KEY
}

/// Deletes every record but the node-local ones.
fn clear(db: &Db) -> Result<(), sepkv::Error> {
    let mut b = WriteBatch::new();
    for r in db.scan(.., false)? {
        let (k, _) = r?;
        if local(&k) {
            continue;
        }
        b.delete(&k)?;
        if b.len() >= 4096 {
            db.write(&b, WriteOptions::default())?;
            b = WriteBatch::new();
        }
    }
    db.write(&b, WriteOptions::default())
}

/// Runs one entry's commands in `t`; their replies.
fn run(t: &mut crate::keyspace::Txn<'_>, req: &Request) -> Vec<Reply> {
    match req {
        Request::Commands { cmds, .. } => cmds
            .iter()
            .map(|args| {
                let args: Vec<Bytes> = args.iter().map(|a| Bytes::copy_from_slice(a)).collect();
                let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
                match lookup(&name) {
                    Some(spec) => run_write(spec, t, &args),
                    None => Reply::err(format!("unknown command '{name}' in a replicated entry")),
                }
            })
            .collect(),
        Request::Expire { keys, time } => {
            let mut n = 0;
            for k in keys {
                // Reading an expired key through a transaction deletes it.
                if matches!(t.get(k, *time), Ok(None)) {
                    n += 1;
                }
            }
            vec![Reply::Int(n)]
        }
    }
}

impl RaftStateMachine<TypeConfig> for Machine {
    type SnapshotBuilder = Builder;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<u64>>, Membership), StorageError<u64>> {
        Ok((self.applied.log_id, self.applied.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Response>, StorageError<u64>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let ks = self.ks.clone();
        let mut out = Vec::new();
        let mut t = ks.txn();
        for e in entries {
            self.applied.log_id = Some(e.log_id);
            let replies = match &e.payload {
                EntryPayload::Blank => Vec::new(),
                EntryPayload::Membership(m) => {
                    self.applied.membership = StoredMembership::new(Some(e.log_id), m.clone());
                    Vec::new()
                }
                EntryPayload::Normal(req) => {
                    let clock = req.time().max(self.applied.clock);
                    self.applied.clock = clock;
                    with_clock(clock, || run(&mut t, req))
                }
            };
            out.push(Response {
                replies: Some(replies),
            });
        }
        let rec = bincode::serialize(&self.applied).map_err(|e| sm_err(ErrorVerb::Write, e))?;
        t.put_raw(RAFT_APPLIED_KEY, &rec)
            .map_err(|e| sm_err(ErrorVerb::Write, e))?;
        if let Err(e) = t.commit() {
            // The batch is lost: this replica cannot go on; openraft stops.
            return Err(sm_err(ErrorVerb::Write, e));
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.builder()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<u64>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, openraft::BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<u64>> {
        let data = snapshot.into_inner();
        let err = |e: String| snap_err(ErrorVerb::Write, e);
        let files: Files = bincode::deserialize(&data)
            .map_err(|e| err(format!("a received snapshot is malformed: {e}")))?;
        let dir = self.work.join("incoming");
        let _ = std::fs::remove_dir_all(&dir);
        unpack(&dir, &files).map_err(|e| err(format!("{}: {e}", dir.display())))?;
        let db = self.ks.db().clone();
        let src = Db::open_read_only(&dir, db.options().clone())
            .map_err(|e| err(format!("the received snapshot does not open: {e}")))?;
        let applied = {
            let _writer = self.ks.txn();
            replace(&db, &src).map_err(|e| err(e.to_string()))?;
            let applied: Applied = match db.get(RAFT_APPLIED_KEY).map_err(|e| err(e.to_string()))? {
                Some(v) => bincode::deserialize(&v).map_err(|e| err(e.to_string()))?,
                None => Applied::default(),
            };
            applied
        };
        drop(src);
        let _ = std::fs::remove_dir_all(&dir);
        self.ks.reload().map_err(|e| err(e.to_string()))?;
        if applied.log_id != meta.last_log_id {
            return Err(err(format!(
                "the received snapshot holds log id {:?}, its meta says {:?}",
                applied.log_id, meta.last_log_id
            )));
        }
        eprintln!(
            "cluster: installed a snapshot at log index {}",
            applied.log_id.map_or(0, |l| l.index)
        );
        self.applied = applied;
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Some((meta.clone(), data));
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<u64>> {
        Ok(self
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|(meta, data)| Snapshot {
                meta: meta.clone(),
                snapshot: Box::new(Cursor::new(data.clone())),
            }))
    }
}

/// Replaces `db`'s records (but the node-local ones) with `src`'s,
/// marking the install in progress until the last batch is written.
fn replace(db: &Db, src: &Db) -> Result<(), sepkv::Error> {
    let mut b = WriteBatch::new();
    b.put(RAFT_INSTALLING_KEY, b"1")?;
    db.write(&b, WriteOptions { sync: true })?;
    clear(db)?;
    let mut b = WriteBatch::new();
    let mut bytes = 0;
    for r in src.scan(.., false)? {
        let (k, v) = r?;
        if local(&k) {
            continue;
        }
        bytes += k.len() + v.len();
        b.put(&k, &v)?;
        if b.len() >= 4096 || bytes >= 16 << 20 {
            db.write(&b, WriteOptions::default())?;
            b = WriteBatch::new();
            bytes = 0;
        }
    }
    b.delete(RAFT_INSTALLING_KEY)?;
    db.write(&b, WriteOptions { sync: true })
}

fn pack(dir: &Path, rel: &str, out: &mut Vec<(String, Vec<u8>)>) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir.join(rel))? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        let r = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        if e.file_type()?.is_dir() {
            pack(dir, &r, out)?;
        } else {
            out.push((r.clone(), std::fs::read(dir.join(&r))?));
        }
    }
    Ok(())
}

fn unpack(dir: &Path, files: &Files) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (rel, data) in &files.files {
        if rel.split('/').any(|p| p == ".." || p.is_empty()) || rel.starts_with('/') {
            return Err(std::io::Error::other(format!(
                "bad file name {rel:?} in a snapshot"
            )));
        }
        let p = dir.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&p, data)?;
    }
    Ok(())
}

/// Builds snapshots beside the state machine.
pub struct Builder {
    ks: Arc<Keyspace>,
    work: PathBuf,
    current: Current,
    snapshots: Arc<AtomicU64>,
}

impl RaftSnapshotBuilder<TypeConfig> for Builder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<u64>> {
        let err = |e: String| snap_err(ErrorVerb::Read, e);
        let n = self.snapshots.fetch_add(1, Ordering::AcqRel);
        let dir = self.work.join(format!("build-{n}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&self.work).map_err(|e| err(e.to_string()))?;
        let db = self.ks.db().clone();
        // Under the writer lock: no batch is half-way; the checkpoint and
        // the applied record agree.
        let applied: Applied = {
            let _writer = self.ks.txn();
            db.checkpoint(&dir).map_err(|e| err(e.to_string()))?;
            match db.get(RAFT_APPLIED_KEY).map_err(|e| err(e.to_string()))? {
                Some(v) => bincode::deserialize(&v).map_err(|e| err(e.to_string()))?,
                None => Applied::default(),
            }
        };
        let mut files = Vec::new();
        let r = pack(&dir, "", &mut files);
        let _ = std::fs::remove_dir_all(&dir);
        r.map_err(|e| err(format!("{}: {e}", dir.display())))?;
        let data = bincode::serialize(&Files { files }).map_err(|e| err(e.to_string()))?;
        let meta = SnapshotMeta {
            last_log_id: applied.log_id,
            last_membership: applied.membership.clone(),
            snapshot_id: format!(
                "{}-{}-{n}",
                applied.log_id.map_or(0, |l| l.index),
                crate::keyspace::now_ms()
            ),
        };
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((meta.clone(), data.clone()));
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}
