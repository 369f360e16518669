//! Checkpoints: a consistent, openable copy of a live database
//! ([`Db::checkpoint`]), as RocksDB's `Checkpoint::CreateCheckpoint`.
//!
//! # How the copy is made consistent
//! The copy is the crash image of the database at one sequence number,
//! taken while nothing writes to the directory:
//! 1. the *work gate* is taken: the running value-store GC step and range
//!    compactions ([`Db::compact_range`], GC's garbage discovery) end, and
//!    new GC steps find nothing to do (new range compactions, and writes
//!    that need GC to make room, wait) until the checkpoint is done (GC punches holes, deletes value files and
//!    rewrites HashKV segments, bands and TrieTables; a range compaction
//!    writes tables and manifest edits outside the index's background
//!    thread);
//! 2. the writer lock is taken: user writes wait (they are queued, not
//!    refused);
//! 3. the index's background work (memtable flushes, compactions,
//!    lightweight compactions appending to DTables) and the value store's
//!    (HashKV's write cache and journal checkpoints) are waited for;
//! 4. every write up to the last published sequence number `S` is made
//!    durable (the value store, then the WAL) — which also hands every
//!    buffered byte to the operating system;
//! 5. every file of the directory (and of its subdirectories, FlashKey's
//!    key-only LSM-tree) is copied at its length now, except SSTables of
//!    the LSM-tree, which are hard-linked: an SSTable is never changed
//!    after it is written, so the link shares its space with the source.
//!    DTables (`lwc`) are copied, since lightweight compaction appends to
//!    them; so are value-log files, HashKV segments and journals, bands,
//!    TrieTables, the WALs, the manifest and `CURRENT`. A link refused
//!    because the target is on another file system (or a file system
//!    without links) falls back to a copy. `LOCK` and `*.tmp` files are
//!    left out;
//! 6. the copies and the directory are synced, then the locks are let go.
//!
//! Opening the copy runs ordinary recovery: it replays the copied WAL (or,
//! in log mode, the value log or bands after their checkpoint) and finds
//! exactly the writes up to `S`. Writes wait for steps 3–6, which grow
//! with the size of the value files: a checkpoint of a value-separated
//! database copies its values (only the SSTables are shared). RocksDB
//! avoids the wait by disabling file deletions and copying append-only
//! files up to a recorded length; here preallocated logs (the WAL, the
//! active value-log file, HashKV's journal) receive later writes *inside*
//! the length of the file, so a length alone would not bound the copy.

use super::Db;
use crate::error::{Error, IoContext, Result};
use crate::fs::FileSystem;
use crate::index::filename::LOCK;
use crate::options::IndexKind;
use crate::seqno::SeqNum;
use std::path::Path;
use std::sync::atomic::Ordering;

/// Bytes copied per read.
const COPY_CHUNK: usize = 1 << 20;

/// What [`Db::checkpoint`] did, for tools that report it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckpointReport {
    /// The checkpoint holds exactly the writes up to this sequence number.
    pub sequence: SeqNum,
    /// Files hard-linked (sharing space with the source).
    pub linked_files: u64,
    /// Bytes of the linked files.
    pub linked_bytes: u64,
    /// Files copied.
    pub copied_files: u64,
    /// Bytes copied.
    pub copied_bytes: u64,
}

impl Db {
    /// Writes a consistent copy of the database into the new directory
    /// `dir` and returns the sequence number it holds: opening `dir` gives
    /// exactly the writes up to that number. See [`Db::checkpoint_report`].
    ///
    /// # Examples
    /// ```
    /// use sepkv::{Db, Options, Preset};
    /// let base = std::env::temp_dir().join(format!("sepkv-doc-ckpt-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&base); // a leftover of an earlier run
    /// let db = Db::open(base.join("db"), Options::preset(Preset::WiscKey))?;
    /// db.put("k", vec![7u8; 4096])?;
    /// let seq = db.checkpoint(base.join("copy"))?;
    /// db.put("k", "later")?;
    /// let copy = Db::open(base.join("copy"), Options::default())?;
    /// assert_eq!(copy.last_sequence(), seq);
    /// assert_eq!(copy.get("k")?, Some(vec![7u8; 4096]));
    /// # drop((db, copy));
    /// # std::fs::remove_dir_all(&base).unwrap();
    /// # Ok::<(), sepkv::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Db::checkpoint_report`].
    pub fn checkpoint(&self, dir: impl AsRef<Path>) -> Result<SeqNum> {
        self.checkpoint_report(dir).map(|r| r.sequence)
    }

    /// [`Db::checkpoint`], returning what was linked and copied (files and
    /// bytes). `dir` must not exist (its parent is created if missing).
    /// Writes wait while the checkpoint runs; GC steps are skipped; see
    /// the module docs of `db::checkpoint` for the steps.
    ///
    /// # Errors
    /// - `InvalidArgument`: `dir` exists;
    /// - `ReadOnly`: a read-only handle (its state is partly in memory);
    /// - `Closed`; `Poisoned`: the database failed earlier;
    /// - `Io`: a copy, link or sync failed (`dir` is then removed, best
    ///   effort; the source is unchanged).
    pub fn checkpoint_report(&self, dir: impl AsRef<Path>) -> Result<CheckpointReport> {
        self.check_writable("a checkpoint")?;
        let inner = &self.inner;
        inner.shared.poisoned()?;
        let dst = dir.as_ref();
        let fs = inner.shared.fs.clone();
        if fs.exists(dst) {
            return Err(Error::InvalidArgument(format!(
                "checkpoint directory {} exists; a checkpoint needs a new directory",
                dst.display()
            )));
        }
        let _gate = inner.work_gate.write();
        let guard = inner.writer.lock();
        if !*guard || inner.shared.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        inner.shared.poisoned()?;
        inner.index.wait_idle()?;
        inner.vstore.wait_idle()?;
        let seq = inner.shared.last_seq.load(Ordering::Acquire);
        if let Err(e) = inner.index.make_durable(seq) {
            inner.shared.set_poison(&e);
            return Err(e);
        }
        // DTables are appended to by lightweight compaction: copy them.
        let link_tables = inner.shared.opts.index_kind() != IndexKind::Lwc;
        let mut rep = CheckpointReport {
            sequence: seq,
            ..CheckpointReport::default()
        };
        let res = copy_tree(fs.as_ref(), &inner.shared.dir, dst, link_tables, &mut rep);
        drop(guard);
        if let Err(e) = res {
            let _ = std::fs::remove_dir_all(dst);
            return Err(e);
        }
        Ok(rep)
    }
}

/// Copies directory `src` into the new directory `dst` (see the module
/// docs), syncing every file and directory made.
fn copy_tree(
    fs: &dyn FileSystem,
    src: &Path,
    dst: &Path,
    link_tables: bool,
    rep: &mut CheckpointReport,
) -> Result<()> {
    fs.create_dir_all(dst).ctx(dst)?;
    for name in fs.list(src).ctx(src)? {
        if name == LOCK || name.ends_with(".tmp") || name.ends_with(".new") {
            continue;
        }
        let (from, to) = (src.join(&name), dst.join(&name));
        if fs.is_dir(&from) {
            copy_tree(fs, &from, &to, link_tables, rep)?;
            continue;
        }
        if link_tables && name.ends_with(".sst") {
            match fs.link(&from, &to) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && !fs.exists(&from) => {
                    continue;
                }
                Ok(()) => {
                    rep.linked_files += 1;
                    rep.linked_bytes += fs.file_size(&to).ctx(&to)?;
                    continue;
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::Unsupported | std::io::ErrorKind::CrossesDevices
                    ) => {}
                Err(e) => return Err(Error::io(&to, e)),
            }
        }
        match copy_file(fs, &from, &to) {
            Ok(n) => {
                rep.copied_bytes += n;
                rep.copied_files += 1;
            }
            // An obsolete file removed since the listing (a table a reader
            // held past its compaction): the frozen version names none.
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                let _ = fs.remove(&to);
            }
            Err(e) => return Err(e),
        }
    }
    fs.sync_dir(dst).ctx(dst)?;
    if let Some(parent) = dst.parent() {
        fs.sync_dir(parent).ctx(parent)?;
    }
    Ok(())
}

/// Copies file `from` at its length now into the new file `to` and syncs
/// it; returns the bytes copied.
fn copy_file(fs: &dyn FileSystem, from: &Path, to: &Path) -> Result<u64> {
    let r = fs.open_read(from).ctx(from)?;
    let len = r.len().ctx(from)?;
    let mut w = fs.create(to).ctx(to)?;
    let mut buf = vec![0u8; COPY_CHUNK.min(len as usize)];
    let mut at = 0u64;
    while at < len {
        let n = buf.len().min((len - at) as usize);
        r.read_exact_at(at, &mut buf[..n]).ctx(from)?;
        w.append(&buf[..n]).ctx(to)?;
        at += n as u64;
    }
    w.sync().ctx(to)?;
    Ok(len)
}
