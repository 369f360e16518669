//! [`FaultFs`]: an in-memory [`FileSystem`] that simulates power loss and
//! injects I/O errors.
//!
//! `FaultFs` has exactly the strict semantics of [`MemFs`] (it is one, with
//! its controls exposed) and enforces the durability model of the engine:
//!
//! - The content of a file that survives a crash is the content it had at its
//!   last successful [`WritableFile::sync`]. A `create` that truncates a file
//!   is not durable either: until the file is synced again, a crash brings
//!   back the old durable content.
//! - A directory entry (a file's creation, a rename, a removal) survives a
//!   crash only once [`FileSystem::sync_dir`] of its directory has returned:
//!   a file that was created and synced in a directory never synced is lost;
//!   an unsynced rename reverts; an unsynced removal reverts and the file
//!   comes back with its durable content. A rename between two directories
//!   is made durable by each directory's `sync_dir` separately. Directories
//!   themselves are durable as soon as `create_dir_all` returns.
//!
//! [`FaultFs::crash`] applies the model: the namespace and every file revert
//! to their durable state, locks are released, and every handle opened
//! before the crash is dead (each later operation on it fails and changes
//! nothing). Afterwards the file system is a freshly booted machine's disk.
//!
//! Faults are injected by [`FaultRule`]s, which count the operations of one
//! [`FaultOp`] class (optionally only those on paths containing a substring)
//! and fail a window of them with [`FaultKind::Eio`] or
//! [`FaultKind::Enospc`]; [`FaultFs::set_space_limit`] makes appends fail
//! with `ENOSPC` once the files would exceed a size. A failed operation
//! changes nothing: a failed append writes nothing, a failed sync makes
//! nothing more durable. Rules and the space limit survive a crash (a test
//! clears them when the faulty period is over).
//!
//! Thread safety: as for [`MemFs`], one mutex guards all the state, so every
//! operation, rule evaluation and crash is atomic; clones and handles share
//! it.

use super::{FileLock, FileSystem, MemFs, RandomAccessFile, WritableFile};
use std::io;
use std::path::Path;

/// A class of file-system operations, as matched by a [`FaultRule`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultOp {
    /// [`WritableFile::append`].
    Write,
    /// [`WritableFile::sync`], and [`FileSystem::sync_file_system`]
    /// (whose path is the directory it was given).
    Sync,
    /// [`FileSystem::create`].
    Create,
    /// [`FileSystem::rename`] (the path filter sees both paths).
    Rename,
    /// [`FileSystem::remove`].
    Remove,
    /// [`FileSystem::sync_dir`].
    SyncDir,
    /// [`RandomAccessFile::read_at`].
    Read,
    /// Every fallible operation: the classes above and the others
    /// (`open_append`, `open_read`, `list`, `create_dir_all`, `file_size`,
    /// `allocated_size`, `lock`, `flush`, [`RandomAccessFile::len`]). These
    /// are exactly the operations counted by [`FaultFs::op_count`].
    Any,
}

/// The error an injected fault produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// An I/O error (`EIO`, OS error 5).
    Eio,
    /// A full device (`ENOSPC`, OS error 28).
    Enospc,
}

impl FaultKind {
    /// The `io::Error` of this fault.
    pub(super) fn error(self) -> io::Error {
        match self {
            FaultKind::Eio => io::Error::from_raw_os_error(5),
            FaultKind::Enospc => io::Error::from_raw_os_error(28),
        }
    }
}

/// A fault-injection rule: of the operations matching `op` and (if set)
/// whose path contains `path_contains`, the first `skip` pass, then the next
/// `times` fail (all following ones when `times` is `None`) with `kind`.
///
/// Every rule counts the operations it matches independently of the other
/// rules; an operation fails when any rule fails it (with the kind of the
/// first such rule, in the order they were added).
#[derive(Debug, Clone)]
pub struct FaultRule {
    /// The operations the rule counts.
    pub op: FaultOp,
    /// When set, only operations on a path containing this substring count.
    pub path_contains: Option<String>,
    /// Matching operations let through before failures start.
    pub skip: u64,
    /// Matching operations failed after the skipped ones; `None` = all.
    pub times: Option<u64>,
    /// The error returned.
    pub kind: FaultKind,
}

impl FaultRule {
    /// A rule failing every operation of class `op` with `kind`.
    pub fn new(op: FaultOp, kind: FaultKind) -> FaultRule {
        FaultRule {
            op,
            path_contains: None,
            skip: 0,
            times: None,
            kind,
        }
    }

    fn matches(&self, op: FaultOp, paths: &[&Path]) -> bool {
        (self.op == FaultOp::Any || self.op == op)
            && self
                .path_contains
                .as_deref()
                .is_none_or(|needle| paths.iter().any(|p| p.to_string_lossy().contains(needle)))
    }
}

/// The fault-injection state of a file system.
#[derive(Debug, Default)]
pub(super) struct Faults {
    /// Rules with the number of operations each has matched.
    rules: Vec<(FaultRule, u64)>,
    /// Total bytes of named or open files that appends may not exceed.
    pub(super) space_limit: Option<u64>,
}

impl Faults {
    pub(super) fn add(&mut self, rule: FaultRule) {
        self.rules.push((rule, 0));
    }

    pub(super) fn clear(&mut self) {
        self.rules.clear();
    }

    /// Counts an operation of class `op` (`FaultOp::Any` for operations of
    /// no named class) on `paths` and returns the injected error, if any.
    pub(super) fn check(&mut self, op: FaultOp, paths: &[&Path]) -> io::Result<()> {
        let mut fault = None;
        for (rule, seen) in &mut self.rules {
            if !rule.matches(op, paths) {
                continue;
            }
            *seen += 1;
            let fails = *seen > rule.skip && rule.times.is_none_or(|t| *seen - rule.skip <= t);
            if fails && fault.is_none() {
                fault = Some(rule.kind);
            }
        }
        fault.map_or(Ok(()), |kind| Err(kind.error()))
    }
}

/// A crash-simulating, fault-injecting in-memory file system.
///
/// It behaves as [`MemFs`] and also records what is durable: a file's content
/// up to its last successful `sync`, and the entries of a directory (files
/// created, renamed, removed in it) as of its last successful `sync_dir`;
/// directories made by `create_dir_all` are durable at once. A truncating
/// `create` is not durable until the file is synced. [`FaultFs::crash`]
/// reverts everything else. Faults are injected by [`FaultRule`]s and
/// [`FaultFs::set_space_limit`]; a failed operation changes nothing.
///
/// Clones share the same files, rules and durability state; every operation
/// is atomic (one mutex guards the state).
#[derive(Debug, Clone, Default)]
pub struct FaultFs {
    mem: MemFs,
}

impl FaultFs {
    /// An empty file system (only `/` and `.` exist) with no rules and no
    /// space limit.
    pub fn new() -> FaultFs {
        FaultFs::default()
    }

    /// Simulates a power loss: the namespace reverts to the durable
    /// directory entries, every file to its durable content, all locks are
    /// released and every handle opened so far becomes dead (its operations
    /// fail with `ErrorKind::Other`). Rules and the space limit stay.
    pub fn crash(&self) {
        self.mem.crash();
    }

    /// Simulates the death of the process: every file keeps what it was
    /// handed (the OS's page cache outlives the process), nothing becomes
    /// durable, all locks are released and every handle opened so far
    /// becomes dead, as after [`FaultFs::crash`]. A later `crash` still
    /// reverts what was never synced. The dead process's threads must be
    /// idle: files they open afterwards are live.
    pub fn kill(&self) {
        self.mem.kill();
    }

    /// Adds a fault rule (its operation count starts at zero).
    pub fn add_rule(&self, rule: FaultRule) {
        self.mem.add_rule(rule);
    }

    /// Removes every fault rule.
    pub fn clear_rules(&self) {
        self.mem.clear_rules();
    }

    /// Sets (or, with `None`, lifts) a limit on the total bytes of the files
    /// that are named or open; an append that would exceed it fails with
    /// `ENOSPC` and writes nothing.
    pub fn set_space_limit(&self, limit: Option<u64>) {
        self.mem.set_space_limit(limit);
    }

    /// Length of the file a crash now would leave at `path`: `None` when the
    /// path's entry is not durable (or is a directory), otherwise the length
    /// of the file's durable content.
    pub fn durable_len(&self, path: &Path) -> Option<u64> {
        self.mem.durable_len(path)
    }

    /// Visible length of the file at `path`; `None` when there is no such
    /// file.
    pub fn file_len(&self, path: &Path) -> Option<u64> {
        self.mem.file_len(path)
    }

    /// XORs the byte at `offset` of file `path` with `xor_mask`, in both its
    /// visible and its durable content (wherever the offset exists). Fails
    /// with `NotFound` for a missing file and `InvalidInput` when `offset`
    /// is past the end of both.
    pub fn corrupt(&self, path: &Path, offset: u64, xor_mask: u8) -> io::Result<()> {
        self.mem.corrupt(path, offset, xor_mask)
    }

    /// Shortens file `path` to `len` bytes, in both its visible and its
    /// durable content. Fails with `NotFound` for a missing file and
    /// `InvalidInput` when `len` exceeds the visible length.
    pub fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        self.mem.truncate(path, len)
    }

    /// Number of operations performed so far: every call that
    /// [`FaultOp::Any`] matches, failed ones included (operations on dead
    /// handles excepted). Rerunning a workload with a rule
    /// `FaultRule { op: Any, skip: k, .. }` then `crash()` simulates a
    /// crash after its first `k` operations.
    pub fn op_count(&self) -> u64 {
        self.mem.op_count()
    }
}

impl FileSystem for FaultFs {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.mem.create(path)
    }

    fn open_append(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.mem.open_append(path)
    }

    fn reuse(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.mem.reuse(path)
    }

    fn open_read(&self, path: &Path) -> io::Result<Box<dyn RandomAccessFile>> {
        self.mem.open_read(path)
    }

    fn exists(&self, path: &Path) -> bool {
        self.mem.exists(path)
    }

    fn is_dir(&self, path: &Path) -> bool {
        self.mem.is_dir(path)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.mem.list(dir)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        self.mem.remove(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.mem.rename(from, to)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.mem.create_dir_all(dir)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.mem.sync_dir(dir)
    }

    fn sync_file_system(&self, dir: &Path) -> io::Result<bool> {
        self.mem.sync_file_system(dir)
    }

    fn file_size(&self, path: &Path) -> io::Result<u64> {
        self.mem.file_size(path)
    }

    fn allocated_size(&self, path: &Path) -> io::Result<u64> {
        self.mem.allocated_size(path)
    }

    fn truncate_synced(&self, path: &Path, len: u64) -> io::Result<()> {
        self.mem.truncate_synced(path, len)
    }

    fn punch_hole(&self, path: &Path, offset: u64, len: u64) -> io::Result<()> {
        self.mem.punch_hole(path, offset, len)
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        self.mem.lock(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{read_all, write_atomic};
    use io::ErrorKind;

    fn p(s: &str) -> &Path {
        Path::new(s)
    }

    /// A file system with `/db` and a durable file `/db/f` holding `data`.
    fn with_durable_file(data: &[u8]) -> FaultFs {
        let fs = FaultFs::new();
        fs.create_dir_all(p("/db")).unwrap();
        let mut f = fs.create(p("/db/f")).unwrap();
        f.append(data).unwrap();
        f.sync().unwrap();
        fs.sync_dir(p("/db")).unwrap();
        fs
    }

    fn content(fs: &FaultFs, path: &str) -> Vec<u8> {
        read_all(fs, p(path)).unwrap()
    }

    fn os_error<T>(r: io::Result<T>) -> Option<i32> {
        match r {
            Ok(_) => panic!("expected an error"),
            Err(e) => e.raw_os_error(),
        }
    }

    fn rule(op: FaultOp, path: Option<&str>, skip: u64, times: Option<u64>) -> FaultRule {
        FaultRule {
            op,
            path_contains: path.map(str::to_string),
            skip,
            times,
            kind: FaultKind::Eio,
        }
    }

    #[test]
    fn faultfs_is_strict_too() {
        let fs = FaultFs::new();
        for r in [
            fs.create(p("/missing/f")).map(|_| ()),
            fs.open_read(p("/f")).map(|_| ()),
            fs.rename(p("/f"), p("/g")),
            fs.remove(p("/f")),
        ] {
            assert_eq!(r.unwrap_err().kind(), ErrorKind::NotFound);
        }
    }

    #[test]
    fn crash_drops_unsynced_appends_and_keeps_synced_data() {
        let fs = with_durable_file(b"durable");
        let mut f = fs.open_append(p("/db/f")).unwrap();
        f.append(b"+lost").unwrap();
        assert_eq!(fs.file_len(p("/db/f")), Some(12));
        assert_eq!(fs.durable_len(p("/db/f")), Some(7));
        fs.crash();
        assert_eq!(content(&fs, "/db/f"), b"durable");
        assert_eq!(fs.file_len(p("/db/f")), Some(7));

        // A second round: synced appends survive.
        let mut f = fs.open_append(p("/db/f")).unwrap();
        f.append(b"+kept").unwrap();
        f.sync().unwrap();
        f.append(b"+lost").unwrap();
        fs.crash();
        assert_eq!(content(&fs, "/db/f"), b"durable+kept");
    }

    /// A reused file is written over from its start; a crash before the
    /// next sync brings its old bytes back, and a rename of it stays only
    /// once the directory is synced.
    #[test]
    fn a_reused_file_is_written_over_and_a_crash_brings_the_old_bytes_back() {
        let fs = with_durable_file(b"old content");
        let mut f = fs.reuse(p("/db/f")).unwrap();
        fs.rename(p("/db/f"), p("/db/g")).unwrap();
        assert_eq!(f.len(), 0);
        f.append(b"NEW").unwrap();
        assert_eq!(f.len(), 3);
        assert_eq!(content(&fs, "/db/g"), b"NEW content");
        fs.sync_dir(p("/db")).unwrap();
        fs.crash();
        assert_eq!(content(&fs, "/db/g"), b"old content");

        let mut f = fs.reuse(p("/db/g")).unwrap();
        fs.rename(p("/db/g"), p("/db/h")).unwrap();
        f.append(b"new").unwrap();
        f.sync().unwrap();
        f.append(b" and longer").unwrap();
        assert_eq!(content(&fs, "/db/h"), b"new and longer");
        fs.crash();
        // The rename was not synced: the file keeps its old name, and the
        // synced write.
        assert!(!fs.exists(p("/db/h")));
        assert_eq!(content(&fs, "/db/g"), b"new content");
    }

    #[test]
    fn a_sync_handle_makes_durable_what_was_flushed_before_it_ran() {
        let fs = with_durable_file(b"durable");
        let mut f = fs.open_append(p("/db/f")).unwrap();
        f.append(b"+kept").unwrap();
        f.flush().unwrap();
        let h = f.sync_handle().expect("the in-memory file offers a handle");
        h.sync().unwrap();
        f.append(b"+lost").unwrap();
        assert_eq!(fs.durable_len(p("/db/f")), Some(12));
        f.flush().unwrap();
        drop(f);
        fs.crash();
        assert_eq!(content(&fs, "/db/f"), b"durable+kept");
        // A handle from before the crash is dead, like its file.
        assert!(h.sync().is_err());

        let mut f = fs.open_append(p("/db/f")).unwrap();
        f.append(b"+again").unwrap();
        let h = f.sync_handle().unwrap();
        drop(f);
        h.sync().unwrap();
        fs.crash();
        assert_eq!(content(&fs, "/db/f"), b"durable+kept+again");
    }

    #[test]
    fn a_failed_sync_through_a_handle_is_reported() {
        let fs = with_durable_file(b"durable");
        let mut f = fs.open_append(p("/db/f")).unwrap();
        f.append(b"+x").unwrap();
        let h = f.sync_handle().unwrap();
        fs.add_rule(FaultRule::new(FaultOp::Sync, FaultKind::Eio));
        assert!(h.sync().is_err());
        fs.crash();
        assert_eq!(content(&fs, "/db/f"), b"durable");
    }

    #[test]
    fn create_without_sync_dir_does_not_survive() {
        let fs = FaultFs::new();
        fs.create_dir_all(p("/db/sub")).unwrap();
        let mut f = fs.create(p("/db/new")).unwrap();
        f.append(b"data").unwrap();
        f.sync().unwrap();
        assert_eq!(fs.durable_len(p("/db/new")), None);
        fs.sync_dir(p("/db/sub")).unwrap(); // the wrong directory
        fs.crash();
        assert!(!fs.exists(p("/db/new")));
        assert!(fs.is_dir(p("/db/sub")), "directories are durable at once");
        assert_eq!(fs.list(p("/db")).unwrap(), ["sub"]);
    }

    #[test]
    fn create_with_sync_dir_survives() {
        let fs = FaultFs::new();
        fs.create_dir_all(p("/db")).unwrap();
        let mut f = fs.create(p("/db/new")).unwrap();
        f.append(b"data").unwrap();
        fs.sync_dir(p("/db")).unwrap();
        // The entry is durable but the data was never synced.
        assert_eq!(fs.durable_len(p("/db/new")), Some(0));
        f.sync().unwrap();
        assert_eq!(fs.durable_len(p("/db/new")), Some(4));
        fs.crash();
        assert_eq!(content(&fs, "/db/new"), b"data");
    }

    #[test]
    fn unsynced_rename_reverts_and_synced_rename_stays() {
        let fs = with_durable_file(b"one");
        fs.rename(p("/db/f"), p("/db/g")).unwrap();
        fs.crash();
        assert_eq!(fs.list(p("/db")).unwrap(), ["f"]);
        assert_eq!(content(&fs, "/db/f"), b"one");

        fs.rename(p("/db/f"), p("/db/g")).unwrap();
        fs.sync_dir(p("/db")).unwrap();
        fs.crash();
        assert_eq!(fs.list(p("/db")).unwrap(), ["g"]);
        assert_eq!(content(&fs, "/db/g"), b"one");
    }

    #[test]
    fn unsynced_rename_over_a_file_brings_the_old_target_back() {
        let fs = with_durable_file(b"old");
        let mut t = fs.create(p("/db/f.tmp")).unwrap();
        t.append(b"new").unwrap();
        t.sync().unwrap();
        fs.rename(p("/db/f.tmp"), p("/db/f")).unwrap();
        assert_eq!(content(&fs, "/db/f"), b"new");
        assert_eq!(fs.durable_len(p("/db/f")), Some(3));
        fs.crash();
        assert_eq!(content(&fs, "/db/f"), b"old");
        assert!(!fs.exists(p("/db/f.tmp")));
    }

    #[test]
    fn unsynced_remove_reverts_and_synced_remove_stays() {
        let fs = with_durable_file(b"keep");
        let mut f = fs.open_append(p("/db/f")).unwrap();
        f.append(b"-unsynced").unwrap();
        drop(f);
        fs.remove(p("/db/f")).unwrap();
        assert!(!fs.exists(p("/db/f")));
        fs.crash();
        assert_eq!(content(&fs, "/db/f"), b"keep");

        fs.remove(p("/db/f")).unwrap();
        fs.sync_dir(p("/db")).unwrap();
        assert_eq!(fs.durable_len(p("/db/f")), None);
        fs.crash();
        assert!(!fs.exists(p("/db/f")));
        assert!(fs.list(p("/db")).unwrap().is_empty());
    }

    #[test]
    fn unsynced_truncating_create_keeps_old_content() {
        let fs = with_durable_file(b"old content");
        let mut f = fs.create(p("/db/f")).unwrap();
        f.append(b"new").unwrap();
        assert_eq!(content(&fs, "/db/f"), b"new");
        assert_eq!(fs.durable_len(p("/db/f")), Some(11));
        fs.crash();
        assert_eq!(content(&fs, "/db/f"), b"old content");

        let mut f = fs.create(p("/db/f")).unwrap();
        f.append(b"new").unwrap();
        f.sync().unwrap();
        fs.crash();
        assert_eq!(content(&fs, "/db/f"), b"new");
    }

    /// `sync_unlocked` makes the flushed bytes durable with the lock let
    /// go, and marks the file failed when the sync fails (a retried fsync
    /// could report success for data the failed one lost).
    #[test]
    fn a_failed_sync_outside_the_lock_marks_the_file_failed() {
        struct Owner {
            file: Box<dyn WritableFile>,
            failed: Option<String>,
        }
        let fs = with_durable_file(b"durable");
        let owner = parking_lot::Mutex::new(Owner {
            file: fs.open_append(p("/db/f")).unwrap(),
            failed: None,
        });
        let mut g = owner.lock();
        g.file.append(b"+x").unwrap();
        crate::fs::sync_unlocked(&mut g, |o| (&mut o.file, &mut o.failed)).unwrap();
        assert!(g.failed.is_none());
        g.file.append(b"+y").unwrap();
        fs.add_rule(FaultRule::new(FaultOp::Sync, FaultKind::Eio));
        assert!(crate::fs::sync_unlocked(&mut g, |o| (&mut o.file, &mut o.failed)).is_err());
        assert!(g.failed.as_deref().is_some_and(|m| m.contains("syncing")));
        drop(g);
        fs.crash();
        assert_eq!(content(&fs, "/db/f"), b"durable+x");
    }

    #[test]
    fn handles_die_in_a_crash() {
        let fs = with_durable_file(b"abc");
        let mut w = fs.open_append(p("/db/f")).unwrap();
        let r = fs.open_read(p("/db/f")).unwrap();
        let lock = fs.lock(p("/db/LOCK")).unwrap();
        fs.crash();

        let ops_before = fs.op_count();
        for e in [
            w.append(b"zzz").unwrap_err(),
            w.flush().unwrap_err(),
            w.sync().unwrap_err(),
            r.read_at(0, &mut [0u8; 3]).unwrap_err(),
            r.len().unwrap_err(),
        ] {
            assert_eq!(e.kind(), ErrorKind::Other);
            assert!(e.to_string().contains("crash"), "{e}");
        }
        assert_eq!(w.len(), 3);
        assert_eq!(fs.op_count(), ops_before, "dead handles do not count");
        assert_eq!(content(&fs, "/db/f"), b"abc", "dead handles change nothing");
        assert_eq!(fs.durable_len(p("/db/f")), Some(3));

        // Locks are released, and the dead lock does not release a new one.
        let relock = fs.lock(p("/db/LOCK")).unwrap();
        drop(lock);
        assert_eq!(
            fs.lock(p("/db/LOCK")).err().map(|e| e.kind()),
            Some(ErrorKind::WouldBlock)
        );
        drop(relock);
        drop((w, r));

        // New handles work.
        let mut w = fs.open_append(p("/db/f")).unwrap();
        w.append(b"d").unwrap();
        assert_eq!(content(&fs, "/db/f"), b"abcd");
    }

    #[test]
    fn rule_skip_and_times() {
        let fs = with_durable_file(b"");
        let mut f = fs.open_append(p("/db/f")).unwrap();
        fs.add_rule(rule(FaultOp::Write, None, 2, Some(2)));
        let results: Vec<bool> = (0..6u8).map(|i| f.append(&[i]).is_ok()).collect();
        assert_eq!(results, [true, true, false, false, true, true]);
        assert_eq!(
            content(&fs, "/db/f"),
            [0, 1, 4, 5],
            "failed appends wrote nothing"
        );
        // The window is over, and other classes were never affected.
        f.append(b"x").unwrap();
        f.sync().unwrap();
        fs.clear_rules();

        fs.add_rule(rule(FaultOp::Sync, None, 1, None));
        f.sync().unwrap();
        for _ in 0..3 {
            f.append(b"y").unwrap();
            assert_eq!(os_error(f.sync()), Some(5));
        }
        assert_eq!(
            fs.durable_len(p("/db/f")),
            Some(5),
            "failed syncs made nothing durable"
        );
        fs.crash();
        assert_eq!(fs.file_len(p("/db/f")), Some(5));
    }

    #[test]
    fn rule_path_filter_and_kind() {
        let fs = FaultFs::new();
        fs.create_dir_all(p("/db")).unwrap();
        fs.add_rule(FaultRule {
            path_contains: Some("vlog".into()),
            kind: FaultKind::Enospc,
            ..FaultRule::new(FaultOp::Create, FaultKind::Eio)
        });
        fs.create(p("/db/wal")).unwrap();
        assert_eq!(os_error(fs.create(p("/db/0001.vlog"))), Some(28));
        assert!(
            !fs.exists(p("/db/0001.vlog")),
            "failed create creates nothing"
        );

        fs.add_rule(rule(FaultOp::Rename, Some("MANIFEST"), 0, Some(1)));
        fs.create(p("/db/m.tmp")).unwrap();
        // The filter matches the destination of a rename too.
        assert_eq!(
            os_error(fs.rename(p("/db/m.tmp"), p("/db/MANIFEST"))),
            Some(5)
        );
        assert!(fs.exists(p("/db/m.tmp")) && !fs.exists(p("/db/MANIFEST")));
        fs.rename(p("/db/m.tmp"), p("/db/MANIFEST")).unwrap();

        fs.add_rule(rule(FaultOp::Remove, None, 0, Some(1)));
        fs.add_rule(rule(FaultOp::SyncDir, None, 0, Some(1)));
        assert_eq!(os_error(fs.remove(p("/db/wal"))), Some(5));
        assert!(fs.exists(p("/db/wal")));
        assert_eq!(os_error(fs.sync_dir(p("/db"))), Some(5));
        fs.crash();
        assert!(
            fs.list(p("/db")).unwrap().is_empty(),
            "failed sync_dir made nothing durable"
        );
    }

    #[test]
    fn read_rules_fail_reads() {
        let fs = with_durable_file(b"abc");
        let r = fs.open_read(p("/db/f")).unwrap();
        fs.add_rule(rule(FaultOp::Read, Some("/db/f"), 1, Some(1)));
        let mut buf = [0u8; 3];
        r.read_exact_at(0, &mut buf).unwrap();
        assert_eq!(os_error(r.read_at(0, &mut buf)), Some(5));
        r.read_exact_at(0, &mut buf).unwrap();
        assert_eq!(&buf, b"abc");
    }

    #[test]
    fn space_limit_fails_appends_without_writing() {
        let fs = with_durable_file(b"12345");
        fs.set_space_limit(Some(10));
        let mut g = fs.create(p("/db/g")).unwrap();
        g.append(b"abc").unwrap();
        assert_eq!(os_error(g.append(b"xyz")), Some(28));
        assert_eq!(fs.file_len(p("/db/g")), Some(3));
        g.append(b"de").unwrap(); // exactly at the limit
        assert_eq!(os_error(g.append(b"f")), Some(28));
        assert_eq!(content(&fs, "/db/g"), b"abcde");

        // Removing a file frees its space once no handle holds it.
        let r = fs.open_read(p("/db/f")).unwrap();
        fs.remove(p("/db/f")).unwrap();
        assert_eq!(os_error(g.append(b"f")), Some(28));
        drop(r);
        g.append(b"fghij").unwrap();
        fs.set_space_limit(None);
        g.append(&[0; 100]).unwrap();
        assert_eq!(fs.file_len(p("/db/g")), Some(110));
    }

    #[test]
    fn corrupt_flips_bits_in_visible_and_durable_content() {
        let fs = with_durable_file(&[0u8; 4]);
        let mut f = fs.open_append(p("/db/f")).unwrap();
        f.append(&[0u8; 2]).unwrap(); // unsynced tail
        fs.corrupt(p("/db/f"), 1, 0x81).unwrap();
        fs.corrupt(p("/db/f"), 5, 0x01).unwrap();
        assert_eq!(content(&fs, "/db/f"), [0, 0x81, 0, 0, 0, 1]);
        fs.crash();
        assert_eq!(content(&fs, "/db/f"), [0, 0x81, 0, 0]);
        fs.corrupt(p("/db/f"), 1, 0x81).unwrap();
        assert_eq!(content(&fs, "/db/f"), [0; 4], "a second flip restores");
        assert_eq!(
            fs.corrupt(p("/db/f"), 4, 1).unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
        assert_eq!(
            fs.corrupt(p("/db/none"), 0, 1).unwrap_err().kind(),
            ErrorKind::NotFound
        );

        // After an unsynced truncating create, both contents are hit.
        let mut f = fs.create(p("/db/f")).unwrap();
        f.append(&[7, 7]).unwrap();
        fs.corrupt(p("/db/f"), 0, 0xff).unwrap();
        assert_eq!(content(&fs, "/db/f"), [0xf8, 7]);
        fs.crash();
        assert_eq!(content(&fs, "/db/f"), [0xff, 0, 0, 0]);
    }

    #[test]
    fn truncate_shortens_visible_and_durable_content() {
        let fs = with_durable_file(b"0123456789");
        let mut f = fs.open_append(p("/db/f")).unwrap();
        f.append(b"ab").unwrap();
        fs.truncate(p("/db/f"), 6).unwrap();
        assert_eq!(fs.file_len(p("/db/f")), Some(6));
        assert_eq!(fs.durable_len(p("/db/f")), Some(6));
        assert_eq!(
            fs.truncate(p("/db/f"), 7).unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
        fs.crash();
        assert_eq!(content(&fs, "/db/f"), b"012345");
    }

    #[test]
    fn op_count_counts_fallible_operations() {
        let fs = FaultFs::new();
        assert_eq!(fs.op_count(), 0);
        fs.create_dir_all(p("/d")).unwrap();
        let mut f = fs.create(p("/d/f")).unwrap();
        f.append(b"x").unwrap();
        f.sync().unwrap();
        let _ = fs.open_read(p("/d/missing"));
        assert!(fs.exists(p("/d/f")) && fs.is_dir(p("/d")) && f.len() == 1);
        assert_eq!(fs.op_count(), 5);
    }

    /// Crashes `write_atomic` after each of its operations in turn: the file
    /// must always hold either the old or the new content.
    #[test]
    fn write_atomic_survives_a_crash_at_every_point() {
        let run = |fs: &FaultFs| write_atomic(fs, p("/db/f"), b"new content");
        let probe = with_durable_file(b"old");
        let start = probe.op_count();
        run(&probe).unwrap();
        let total = probe.op_count() - start;
        assert!(total >= 5);

        let mut outcomes = std::collections::BTreeSet::new();
        for k in 0..=total {
            let fs = with_durable_file(b"old");
            fs.add_rule(FaultRule {
                skip: k,
                ..FaultRule::new(FaultOp::Any, FaultKind::Eio)
            });
            assert_eq!(run(&fs).is_ok(), k == total, "crash point {k}");
            fs.crash();
            fs.clear_rules();
            let got = content(&fs, "/db/f");
            assert!(
                got == b"old" || got == b"new content",
                "crash point {k}: {got:?}"
            );
            outcomes.insert(got);
        }
        assert_eq!(outcomes.len(), 2, "both outcomes are reachable");
    }
}
