//! [`MemFs`]: a strict in-memory [`FileSystem`], and the engine behind
//! [`FaultFs`](super::FaultFs).
//!
//! The model is a small POSIX-like file system. Files are inodes (a byte
//! vector plus bookkeeping) named by directory entries; a path is a plain
//! [`PathBuf`] and nothing is normalised, except that the root `/` and the
//! current directory `.` (also spelled as the empty path) always exist, and
//! [`FileSystem::create_dir_all`] registers every ancestor. The file system is
//! strict where a lenient fake would hide bugs: creating a file in a missing
//! directory, opening, removing or sizing a missing file, listing a missing
//! directory and renaming a missing file all fail with `NotFound`, and a
//! directory cannot be opened as a file. A file removed while handles are
//! open on it stays readable and writable through them (the POSIX `unlink`
//! rule) but is gone from the namespace. Appended data is visible to every
//! reader at once; `flush` has nothing to do.
//!
//! Besides the visible state, the engine records what is durable: for every
//! file the content that survives a power loss (up to its last `sync`), and
//! for the namespace the directory entries as of each directory's last
//! `sync_dir`. [`MemFs`] keeps that record but never uses it; [`FaultFs`]
//! (a `MemFs` with the crash and fault-injection controls exposed) is where
//! it matters, and the durability rules are described there.
//!
//! Invariants: every inode is referenced by the visible namespace, the
//! durable namespace or an open handle, and is freed when none remains; a
//! handle carries the crash epoch it was opened in and acts only while that
//! epoch is current.
//!
//! Thread safety: all state sits behind one mutex shared (through an `Arc`)
//! by every clone of the file system and every handle it returned; each
//! operation takes the mutex once, so operations are atomic with respect to
//! each other.
//!
//! [`FaultFs`]: super::FaultFs

use super::fault::{FaultKind, FaultOp, Faults};
use super::{FileLock, FileSystem, RandomAccessFile, SyncHandle, WritableFile};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Fault class of the operations outside the named [`FaultOp`] classes
/// (opening, listing, sizing, locking, flushing...): only rules for
/// [`FaultOp::Any`] match them.
const OTHER: FaultOp = FaultOp::Any;

/// A strict in-memory file system.
///
/// Paths are plain [`PathBuf`]s; `/` and `.` always exist, and
/// [`FileSystem::create_dir_all`] registers every ancestor. Creating a file in
/// a missing directory, opening, removing or sizing a missing file, listing a
/// missing directory and renaming a missing file fail with `NotFound`;
/// directories cannot be opened as files (renaming one is unsupported). A
/// removed file stays usable through the handles open on it. Appends are
/// visible to readers at once. [`FileSystem::lock`] fails with `WouldBlock`
/// while another lock of the same path is alive.
///
/// Clones share the same files; every operation is atomic (one mutex guards
/// the state).
#[derive(Clone, Default)]
pub struct MemFs {
    state: Arc<Mutex<State>>,
}

type Ino = u64;

/// A directory entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    Dir,
    File(Ino),
}

/// A file's content and bookkeeping.
#[derive(Default)]
struct Inode {
    /// Visible content.
    data: Vec<u8>,
    /// Bytes freed by `punch_hole` (the engine never punches a range twice).
    punched: u64,
    /// `data[..synced_len]` is the durable content, unless `old_durable` is
    /// set.
    synced_len: usize,
    /// Durable content that an unsynced truncation (a `create` over the file)
    /// removed from `data`; `synced_len` is 0 while this is set.
    old_durable: Option<Vec<u8>>,
    /// Size set by `WritableFile::preallocate`: reads see `data` followed
    /// by zeros up to it, and appends still land at `data.len()`.
    reserved: u64,
    /// `reserved` as of the last sync (what a crash keeps).
    synced_reserved: u64,
    /// Handles of the current epoch open on this inode.
    open: usize,
}

impl Inode {
    /// The size readers see: the content, or the preallocated size when
    /// larger.
    fn size(&self) -> u64 {
        (self.data.len() as u64).max(self.reserved)
    }

    /// The content a crash now would leave (without the zeros of a
    /// preallocation).
    fn durable(&self) -> &[u8] {
        match &self.old_durable {
            Some(old) => old,
            None => &self.data[..self.synced_len],
        }
    }

    /// Truncates the visible content to zero, keeping the durable content
    /// until the next sync.
    fn truncate_visible(&mut self) {
        if self.old_durable.is_none() {
            self.data.truncate(self.synced_len);
            self.old_durable = Some(std::mem::take(&mut self.data));
        } else {
            self.data.clear();
        }
        self.synced_len = 0;
        self.reserved = 0;
    }

    /// Makes the visible content durable.
    fn sync(&mut self) {
        self.synced_len = self.data.len();
        self.old_durable = None;
        self.synced_reserved = self.reserved;
    }

    /// Drops everything not durable.
    fn revert(&mut self) {
        match self.old_durable.take() {
            Some(old) => self.data = old,
            None => self.data.truncate(self.synced_len),
        }
        self.synced_len = self.data.len();
        self.reserved = self.synced_reserved;
    }
}

#[derive(Default)]
struct State {
    /// The visible namespace (directories and files, root excluded).
    live: BTreeMap<PathBuf, Entry>,
    /// The namespace a crash now would leave.
    durable: BTreeMap<PathBuf, Entry>,
    inodes: HashMap<Ino, Inode>,
    next_ino: Ino,
    /// Paths locked by a live [`FileLock`].
    locks: HashSet<PathBuf>,
    /// Incremented by every crash; handles of older epochs are dead.
    epoch: u64,
    /// Operations performed (see [`MemFs::op_count`]).
    ops: u64,
    faults: Faults,
}

/// True for the directories that exist implicitly.
fn is_root(p: &Path) -> bool {
    p.as_os_str().is_empty() || p == Path::new("/") || p == Path::new(".")
}

/// The directory `p` lives in (the empty parent of a relative name is `.`).
fn parent_of(p: &Path) -> &Path {
    match p.parent() {
        Some(q) if !q.as_os_str().is_empty() => q,
        _ => Path::new("."),
    }
}

/// The key under which directory `d` is compared with [`parent_of`].
fn dir_key(d: &Path) -> &Path {
    if d.as_os_str().is_empty() {
        Path::new(".")
    } else {
        d
    }
}

fn error(kind: io::ErrorKind, what: &str, path: &Path) -> io::Error {
    io::Error::new(kind, format!("{what}: {}", path.display()))
}

fn not_found(path: &Path) -> io::Error {
    error(io::ErrorKind::NotFound, "no such file or directory", path)
}

fn dead_handle() -> io::Error {
    io::Error::other("file handle invalidated by a simulated crash")
}

impl State {
    /// Counts an operation and applies the fault rules to it.
    fn begin(&mut self, op: FaultOp, paths: &[&Path]) -> io::Result<()> {
        self.ops += 1;
        self.faults.check(op, paths)
    }

    fn lookup(&self, p: &Path) -> Option<Entry> {
        if is_root(p) {
            Some(Entry::Dir)
        } else {
            self.live.get(p).copied()
        }
    }

    /// The inode of file `p`.
    fn file(&self, p: &Path) -> io::Result<Ino> {
        match self.lookup(p) {
            Some(Entry::File(ino)) => Ok(ino),
            Some(Entry::Dir) => Err(error(io::ErrorKind::IsADirectory, "is a directory", p)),
            None => Err(not_found(p)),
        }
    }

    /// Checks that `p` is a directory.
    fn dir(&self, p: &Path) -> io::Result<()> {
        match self.lookup(p) {
            Some(Entry::Dir) => Ok(()),
            Some(Entry::File(_)) => Err(error(io::ErrorKind::NotADirectory, "not a directory", p)),
            None => Err(not_found(p)),
        }
    }

    fn inode(&mut self, ino: Ino) -> &mut Inode {
        self.inodes
            .get_mut(&ino)
            .expect("a referenced inode is never freed")
    }

    /// The inode of file `p`, created (empty) in an existing directory when
    /// missing.
    fn file_or_new(&mut self, p: &Path) -> io::Result<(Ino, bool)> {
        match self.lookup(p) {
            Some(Entry::File(ino)) => Ok((ino, false)),
            Some(Entry::Dir) => self.file(p).map(|ino| (ino, false)),
            None => {
                self.dir(parent_of(p))?;
                let ino = self.next_ino;
                self.next_ino += 1;
                self.inodes.insert(ino, Inode::default());
                self.live.insert(p.to_path_buf(), Entry::File(ino));
                Ok((ino, true))
            }
        }
    }

    /// Frees `ino` when nothing references it any more.
    fn collect(&mut self, ino: Ino) {
        let Some(inode) = self.inodes.get(&ino) else {
            return;
        };
        let linked = self
            .live
            .values()
            .chain(self.durable.values())
            .any(|e| *e == Entry::File(ino));
        if inode.open == 0 && !linked {
            self.inodes.remove(&ino);
        }
    }

    /// Frees every unreferenced inode.
    fn collect_all(&mut self) {
        let linked: HashSet<Ino> = self
            .live
            .values()
            .chain(self.durable.values())
            .filter_map(|e| match e {
                Entry::File(ino) => Some(*ino),
                Entry::Dir => None,
            })
            .collect();
        self.inodes
            .retain(|ino, inode| inode.open > 0 || linked.contains(ino));
    }

    /// Bytes held by the files that are named or open.
    fn live_bytes(&self) -> u64 {
        let named: HashSet<Ino> = self
            .live
            .values()
            .filter_map(|e| match e {
                Entry::File(ino) => Some(*ino),
                Entry::Dir => None,
            })
            .collect();
        self.inodes
            .iter()
            .filter(|(ino, inode)| inode.open > 0 || named.contains(ino))
            .map(|(_, inode)| inode.data.len() as u64)
            .sum()
    }
}

impl MemFs {
    /// An empty file system (only `/` and `.` exist).
    pub fn new() -> MemFs {
        MemFs::default()
    }

    /// Runs `f` on the state as operation `op` on `paths`.
    fn with<T>(
        &self,
        op: FaultOp,
        paths: &[&Path],
        f: impl FnOnce(&mut State) -> io::Result<T>,
    ) -> io::Result<T> {
        let mut st = self.state.lock();
        st.begin(op, paths)?;
        f(&mut st)
    }

    fn handle(&self, st: &mut State, ino: Ino, path: &Path) -> Handle {
        st.inode(ino).open += 1;
        Handle {
            state: Arc::clone(&self.state),
            ino,
            path: path.to_path_buf(),
            epoch: st.epoch,
        }
    }

    fn writable(&self, st: &mut State, ino: Ino, path: &Path) -> Box<dyn WritableFile> {
        let len = st.inode(ino).data.len() as u64;
        Box::new(MemWritable {
            handle: self.handle(st, ino, path),
            len,
            at: None,
        })
    }

    // Controls used by `FaultFs`.

    /// Simulates a power loss (see `FaultFs::crash`).
    pub(super) fn crash(&self) {
        let mut st = self.state.lock();
        let st = &mut *st;
        st.epoch += 1;
        st.locks.clear();
        st.live = st.durable.clone();
        for inode in st.inodes.values_mut() {
            inode.open = 0;
            inode.revert();
        }
        st.collect_all();
    }

    pub(super) fn kill(&self) {
        let mut st = self.state.lock();
        let st = &mut *st;
        st.epoch += 1;
        st.locks.clear();
        for inode in st.inodes.values_mut() {
            inode.open = 0;
        }
        st.collect_all();
    }

    pub(super) fn add_rule(&self, rule: super::FaultRule) {
        self.state.lock().faults.add(rule);
    }

    pub(super) fn clear_rules(&self) {
        self.state.lock().faults.clear();
    }

    pub(super) fn set_space_limit(&self, limit: Option<u64>) {
        self.state.lock().faults.space_limit = limit;
    }

    pub(super) fn op_count(&self) -> u64 {
        self.state.lock().ops
    }

    /// Length of the file a crash now would leave at `path`.
    pub(super) fn durable_len(&self, path: &Path) -> Option<u64> {
        let st = self.state.lock();
        match st.durable.get(path) {
            Some(Entry::File(ino)) => Some(st.inodes[ino].durable().len() as u64),
            _ => None,
        }
    }

    /// Visible length of file `path`.
    pub(super) fn file_len(&self, path: &Path) -> Option<u64> {
        let st = self.state.lock();
        match st.lookup(path) {
            Some(Entry::File(ino)) => Some(st.inodes[&ino].data.len() as u64),
            _ => None,
        }
    }

    pub(super) fn corrupt(&self, path: &Path, offset: u64, xor_mask: u8) -> io::Result<()> {
        let mut st = self.state.lock();
        let ino = st.file(path)?;
        let inode = st.inode(ino);
        let mut hit = false;
        // While `old_durable` is unset the durable content is a prefix of
        // `data`, so one flip covers both.
        for content in std::iter::once(&mut inode.data).chain(inode.old_durable.as_mut()) {
            if let Some(b) = usize::try_from(offset)
                .ok()
                .and_then(|o| content.get_mut(o))
            {
                *b ^= xor_mask;
                hit = true;
            }
        }
        if hit {
            Ok(())
        } else {
            Err(error(
                io::ErrorKind::InvalidInput,
                &format!("offset {offset} is past the end of the file"),
                path,
            ))
        }
    }

    pub(super) fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let mut st = self.state.lock();
        let ino = st.file(path)?;
        let inode = st.inode(ino);
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l <= inode.data.len())
            .ok_or_else(|| {
                error(
                    io::ErrorKind::InvalidInput,
                    &format!("cannot extend the file to {len} bytes"),
                    path,
                )
            })?;
        inode.data.truncate(len);
        inode.synced_len = inode.synced_len.min(len);
        inode.reserved = inode.reserved.min(len as u64);
        inode.synced_reserved = inode.synced_reserved.min(len as u64);
        if let Some(old) = &mut inode.old_durable {
            old.truncate(len);
        }
        Ok(())
    }
}

impl fmt::Debug for MemFs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.state.lock();
        f.debug_struct("MemFs")
            .field("entries", &st.live.len())
            .field("inodes", &st.inodes.len())
            .field("epoch", &st.epoch)
            .field("ops", &st.ops)
            .finish()
    }
}

impl FileSystem for MemFs {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.with(FaultOp::Create, &[path], |st| {
            let (ino, new) = st.file_or_new(path)?;
            if !new {
                st.inode(ino).truncate_visible();
            }
            Ok(self.writable(st, ino, path))
        })
    }

    fn open_append(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.with(OTHER, &[path], |st| {
            let ino = st.file(path)?;
            Ok(self.writable(st, ino, path))
        })
    }

    fn reuse(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.with(OTHER, &[path], |st| {
            let ino = st.file(path)?;
            Ok(Box::new(MemWritable {
                handle: self.handle(st, ino, path),
                len: 0,
                at: Some(0),
            }) as Box<dyn WritableFile>)
        })
    }

    fn open_read(&self, path: &Path) -> io::Result<Box<dyn RandomAccessFile>> {
        self.with(OTHER, &[path], |st| {
            let ino = st.file(path)?;
            Ok(Box::new(MemRandom {
                handle: self.handle(st, ino, path),
            }) as Box<dyn RandomAccessFile>)
        })
    }

    fn exists(&self, path: &Path) -> bool {
        self.state.lock().lookup(path).is_some()
    }

    fn is_dir(&self, path: &Path) -> bool {
        self.state.lock().lookup(path) == Some(Entry::Dir)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.with(OTHER, &[dir], |st| {
            st.dir(dir)?;
            let key = dir_key(dir);
            let mut names: Vec<String> = st
                .live
                .keys()
                .filter(|p| !is_root(p) && parent_of(p) == key)
                .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
                .collect();
            names.sort();
            names.dedup();
            Ok(names)
        })
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        self.with(FaultOp::Remove, &[path], |st| {
            let ino = st.file(path)?;
            st.live.remove(path);
            st.collect(ino);
            Ok(())
        })
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.with(FaultOp::Rename, &[from, to], |st| {
            let ino = match st.lookup(from) {
                Some(Entry::File(ino)) => ino,
                Some(Entry::Dir) => {
                    return Err(error(
                        io::ErrorKind::Unsupported,
                        "renaming a directory is not supported",
                        from,
                    ))
                }
                None => return Err(not_found(from)),
            };
            st.dir(parent_of(to))?;
            let replaced = match st.lookup(to) {
                Some(Entry::Dir) => {
                    return Err(error(io::ErrorKind::IsADirectory, "is a directory", to))
                }
                Some(Entry::File(old)) => Some(old),
                None => None,
            };
            if replaced == Some(ino) {
                return Ok(()); // same file: nothing to do
            }
            st.live.remove(from);
            st.live.insert(to.to_path_buf(), Entry::File(ino));
            if let Some(old) = replaced {
                st.collect(old);
            }
            Ok(())
        })
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.with(OTHER, &[dir], |st| {
            let missing: Vec<&Path> = dir
                .ancestors()
                .take_while(|a| !is_root(a))
                .filter(|a| st.lookup(a).is_none())
                .collect();
            for a in dir.ancestors().take_while(|a| !is_root(a)) {
                if let Some(Entry::File(_)) = st.lookup(a) {
                    return Err(error(io::ErrorKind::NotADirectory, "not a directory", a));
                }
            }
            // Directories are durable as soon as they are created.
            for a in missing {
                st.live.insert(a.to_path_buf(), Entry::Dir);
                st.durable.insert(a.to_path_buf(), Entry::Dir);
            }
            Ok(())
        })
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.with(FaultOp::SyncDir, &[dir], |st| {
            st.dir(dir)?;
            let key = dir_key(dir);
            let in_dir =
                |p: &PathBuf, e: &Entry| matches!(e, Entry::File(_)) && parent_of(p) == key;
            st.durable.retain(|p, e| !in_dir(p, e));
            let entries: Vec<(PathBuf, Entry)> = st
                .live
                .iter()
                .filter(|(p, e)| in_dir(p, e))
                .map(|(p, e)| (p.clone(), *e))
                .collect();
            st.durable.extend(entries);
            st.collect_all();
            Ok(())
        })
    }

    /// As `syncfs(2)`: every file's content and every directory entry
    /// become durable.
    fn sync_file_system(&self, dir: &Path) -> io::Result<bool> {
        self.with(FaultOp::Sync, &[dir], |st| {
            st.dir(dir)?;
            for inode in st.inodes.values_mut() {
                inode.sync();
            }
            st.durable = st.live.clone();
            st.collect_all();
            Ok(true)
        })
    }

    fn file_size(&self, path: &Path) -> io::Result<u64> {
        self.with(OTHER, &[path], |st| {
            let ino = st.file(path)?;
            Ok(st.inode(ino).size())
        })
    }

    fn allocated_size(&self, path: &Path) -> io::Result<u64> {
        self.with(OTHER, &[path], |st| {
            let ino = st.file(path)?;
            let inode = st.inode(ino);
            Ok((inode.data.len() as u64).saturating_sub(inode.punched))
        })
    }

    fn truncate_synced(&self, path: &Path, len: u64) -> io::Result<()> {
        self.with(FaultOp::Sync, &[path], |st| {
            let ino = st.file(path)?;
            let inode = st.inode(ino);
            if len > inode.size() {
                return Err(error(
                    io::ErrorKind::InvalidInput,
                    &format!("cannot truncate to {len} bytes, past the end"),
                    path,
                ));
            }
            // Within the preallocation, the zeros up to `len` become data.
            inode.data.resize(len as usize, 0);
            inode.reserved = inode.reserved.min(len);
            inode.sync();
            Ok(())
        })
    }

    fn punch_hole(&self, path: &Path, offset: u64, len: u64) -> io::Result<()> {
        self.with(OTHER, &[path], |st| {
            let ino = st.file(path)?;
            let inode = st.inode(ino);
            let mut freed = 0;
            for content in std::iter::once(&mut inode.data).chain(inode.old_durable.as_mut()) {
                let start = (offset as usize).min(content.len());
                let end = (offset.saturating_add(len) as usize).min(content.len());
                content[start..end].fill(0);
                freed = freed.max(end - start);
            }
            inode.punched += freed as u64;
            Ok(())
        })
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        self.with(OTHER, &[path], |st| {
            if st.locks.contains(path) {
                return Err(error(
                    io::ErrorKind::WouldBlock,
                    "lock held by another handle",
                    path,
                ));
            }
            st.file_or_new(path)?;
            st.locks.insert(path.to_path_buf());
            Ok(Box::new(MemLock {
                state: Arc::clone(&self.state),
                path: path.to_path_buf(),
                epoch: st.epoch,
            }) as Box<dyn FileLock>)
        })
    }
}

/// What every open file handle holds.
struct Handle {
    state: Arc<Mutex<State>>,
    ino: Ino,
    /// The path the file was opened by (for fault rules).
    path: PathBuf,
    epoch: u64,
}

impl Handle {
    /// Makes the file's data durable: the sync of the file and of its
    /// [`SyncHandle`]s alike, under the same fault rules.
    fn sync(&self) -> io::Result<()> {
        self.with(FaultOp::Sync, |st, ino| {
            st.inode(ino).sync();
            Ok(())
        })
    }

    /// Runs `f` on the state and the inode as operation `op`, unless the
    /// handle died in a crash.
    fn with<T>(
        &self,
        op: FaultOp,
        f: impl FnOnce(&mut State, Ino) -> io::Result<T>,
    ) -> io::Result<T> {
        let mut st = self.state.lock();
        if st.epoch != self.epoch {
            return Err(dead_handle());
        }
        st.begin(op, &[&self.path])?;
        f(&mut st, self.ino)
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        let mut st = self.state.lock();
        if st.epoch == self.epoch {
            st.inode(self.ino).open -= 1;
            st.collect(self.ino);
        }
    }
}

struct MemWritable {
    handle: Handle,
    /// Length at the last successful operation (reported once dead).
    len: u64,
    /// Where the next write lands in a reused file (`FileSystem::reuse`),
    /// which is written over from its start; `None` when writes append.
    at: Option<u64>,
}

impl WritableFile for MemWritable {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        let at = self.at;
        let len = self.handle.with(FaultOp::Write, |st, ino| {
            let start = at.map_or(usize::MAX, |a| a as usize);
            let grows = {
                let inode = st.inode(ino);
                let end = start.min(inode.data.len()).saturating_add(data.len());
                end.saturating_sub(inode.data.len())
            };
            if let Some(limit) = st.faults.space_limit {
                if st.live_bytes().saturating_add(grows as u64) > limit {
                    return Err(FaultKind::Enospc.error());
                }
            }
            let inode = st.inode(ino);
            if start >= inode.data.len() {
                inode.data.extend_from_slice(data);
                return Ok(inode.data.len() as u64);
            }
            // Written over: the durable content stays what it was until
            // the next sync (as after a truncation), so a crash brings the
            // old bytes back.
            if start < inode.synced_len && inode.old_durable.is_none() {
                let old = inode.data[..inode.synced_len].to_vec();
                inode.old_durable = Some(old);
                inode.synced_len = 0;
            }
            let end = start + data.len();
            if end > inode.data.len() {
                inode.data.resize(end, 0);
            }
            inode.data[start..end].copy_from_slice(data);
            Ok(end as u64)
        })?;
        self.len = len;
        if self.at.is_some() {
            self.at = Some(len);
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.handle.with(OTHER, |_, _| Ok(()))
    }

    fn sync(&mut self) -> io::Result<()> {
        self.handle.sync()
    }

    fn preallocate(&mut self, bytes: u64) -> io::Result<()> {
        self.handle.with(OTHER, |st, ino| {
            let inode = st.inode(ino);
            inode.reserved = inode.reserved.max(bytes);
            Ok(())
        })
    }

    fn len(&self) -> u64 {
        if let Some(at) = self.at {
            return at;
        }
        let mut st = self.handle.state.lock();
        if st.epoch == self.handle.epoch {
            st.inode(self.handle.ino).data.len() as u64
        } else {
            self.len
        }
    }

    fn sync_handle(&self) -> Option<Box<dyn SyncHandle>> {
        let h = &self.handle;
        let mut st = h.state.lock();
        if st.epoch == h.epoch {
            st.inode(h.ino).open += 1;
        }
        // A handle of a file lost in a crash stays dead: its epoch is old.
        Some(Box::new(MemSync(Handle {
            state: Arc::clone(&h.state),
            ino: h.ino,
            path: h.path.clone(),
            epoch: h.epoch,
        })))
    }
}

/// [`SyncHandle`] of a [`MemWritable`]: a sync through it is the same
/// operation, with the same fault rules, as one through the file.
struct MemSync(Handle);

impl SyncHandle for MemSync {
    fn sync(&self) -> io::Result<()> {
        self.0.sync()
    }
}

struct MemRandom {
    handle: Handle,
}

impl RandomAccessFile for MemRandom {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.handle.with(FaultOp::Read, |st, ino| {
            let inode = st.inode(ino);
            let data = &inode.data;
            let start = usize::try_from(offset).map_or(data.len(), |o| o.min(data.len()));
            let n = buf.len().min(data.len() - start);
            buf[..n].copy_from_slice(&data[start..start + n]);
            // Past the content, a preallocated file reads as zeros.
            let size = usize::try_from(inode.size()).unwrap_or(usize::MAX);
            let from = usize::try_from(offset)
                .unwrap_or(usize::MAX)
                .max(data.len());
            let zeros = buf.len().saturating_sub(n).min(size.saturating_sub(from));
            buf[n..n + zeros].fill(0);
            Ok(n + zeros)
        })
    }

    fn len(&self) -> io::Result<u64> {
        self.handle.with(OTHER, |st, ino| Ok(st.inode(ino).size()))
    }
}

struct MemLock {
    state: Arc<Mutex<State>>,
    path: PathBuf,
    epoch: u64,
}

impl FileLock for MemLock {}

impl Drop for MemLock {
    fn drop(&mut self) {
        let mut st = self.state.lock();
        if st.epoch == self.epoch {
            st.locks.remove(&self.path);
        }
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

    fn write(fs: &MemFs, path: &str, data: &[u8]) {
        let mut f = fs.create(p(path)).unwrap();
        f.append(data).unwrap();
    }

    /// A preallocated file reads as its data then zeros; appends land after
    /// the data; a crash keeps the preallocation only once synced, and the
    /// synced data only.
    #[test]
    fn preallocation_reads_zeros_and_survives_a_crash_once_synced() {
        let fs = MemFs::new();
        fs.create_dir_all(p("/d")).unwrap();
        let mut f = fs.create(p("/d/a")).unwrap();
        f.preallocate(16).unwrap();
        assert_eq!(fs.file_size(p("/d/a")).unwrap(), 16);
        f.append(b"abc").unwrap();
        assert_eq!(f.len(), 3);
        let mut want = b"abc".to_vec();
        want.resize(16, 0);
        assert_eq!(read_all(&fs, p("/d/a")).unwrap(), want);
        fs.sync_dir(p("/d")).unwrap();
        fs.crash();
        // Nothing synced: neither the data nor the size.
        assert_eq!(fs.file_size(p("/d/a")).unwrap(), 0);
        let mut f = fs.create(p("/d/a")).unwrap();
        f.preallocate(16).unwrap();
        f.append(b"abc").unwrap();
        f.sync().unwrap();
        f.append(b"def").unwrap();
        fs.crash();
        assert_eq!(read_all(&fs, p("/d/a")).unwrap(), want);
        assert_eq!(fs.allocated_size(p("/d/a")).unwrap(), 3);
    }

    fn kind<T>(r: io::Result<T>) -> ErrorKind {
        match r {
            Ok(_) => panic!("expected an error"),
            Err(e) => e.kind(),
        }
    }

    #[test]
    fn types_are_send_and_sync() {
        fn check<T: Send + Sync + 'static>() {}
        check::<MemFs>();
        check::<MemWritable>();
        check::<MemRandom>();
        check::<MemLock>();
    }

    #[test]
    fn missing_things_are_not_found() {
        let fs = MemFs::new();
        assert_eq!(kind(fs.create(p("/nodir/a"))), ErrorKind::NotFound);
        assert_eq!(kind(fs.open_read(p("/a"))), ErrorKind::NotFound);
        assert_eq!(kind(fs.open_append(p("/a"))), ErrorKind::NotFound);
        assert_eq!(kind(fs.remove(p("/a"))), ErrorKind::NotFound);
        assert_eq!(kind(fs.file_size(p("/a"))), ErrorKind::NotFound);
        assert_eq!(kind(fs.list(p("/nodir"))), ErrorKind::NotFound);
        assert_eq!(kind(fs.rename(p("/a"), p("/b"))), ErrorKind::NotFound);
        assert_eq!(kind(fs.sync_dir(p("/nodir"))), ErrorKind::NotFound);
        assert_eq!(kind(fs.lock(p("/nodir/LOCK"))), ErrorKind::NotFound);
        assert!(!fs.exists(p("/a")));
        // Nothing was created along the way.
        assert!(fs.list(p("/")).unwrap().is_empty());

        write(&fs, "/a", b"x");
        assert_eq!(kind(fs.rename(p("/a"), p("/nodir/b"))), ErrorKind::NotFound);
        assert!(fs.exists(p("/a")), "a failed rename keeps the source");
        assert_eq!(kind(fs.create(p("/a/b"))), ErrorKind::NotADirectory);
        assert_eq!(kind(fs.create_dir_all(p("/a/b"))), ErrorKind::NotADirectory);
    }

    #[test]
    fn directories_are_not_files() {
        let fs = MemFs::new();
        fs.create_dir_all(p("/d")).unwrap();
        assert!(fs.open_read(p("/d")).is_err());
        assert!(fs.open_append(p("/d")).is_err());
        assert!(fs.create(p("/d")).is_err());
        assert!(fs.remove(p("/d")).is_err());
        assert!(fs.file_size(p("/d")).is_err());
        assert!(fs.lock(p("/d")).is_err());
        write(&fs, "/f", b"x");
        assert!(fs.rename(p("/f"), p("/d")).is_err());
        assert!(fs.is_dir(p("/d")) && fs.exists(p("/f")));
        assert_eq!(kind(fs.list(p("/f"))), ErrorKind::NotADirectory);
    }

    #[test]
    fn create_dir_all_registers_ancestors_and_list_is_sorted() {
        let fs = MemFs::new();
        fs.create_dir_all(p("/db/sub/deep")).unwrap();
        for d in ["/", ".", "/db", "/db/sub", "/db/sub/deep"] {
            assert!(fs.is_dir(p(d)), "{d} should be a directory");
        }
        fs.create_dir_all(p("/db/sub")).unwrap(); // idempotent
        write(&fs, "/db/zeta", b"");
        write(&fs, "/db/alpha", b"");
        write(&fs, "/db/sub/inner", b"");
        assert_eq!(fs.list(p("/db")).unwrap(), ["alpha", "sub", "zeta"]);
        assert_eq!(fs.list(p("/db/sub")).unwrap(), ["deep", "inner"]);
        assert_eq!(fs.list(p("/")).unwrap(), ["db"]);
        assert!(fs.is_dir(p("/db")) && !fs.is_dir(p("/db/alpha")));

        // Relative paths live under `.`.
        fs.create_dir_all(p("rel/x")).unwrap();
        write(&fs, "top", b"");
        assert_eq!(fs.list(p(".")).unwrap(), ["rel", "top"]);
        assert_eq!(fs.list(p("")).unwrap(), ["rel", "top"]);
        assert_eq!(fs.list(p("rel")).unwrap(), ["x"]);
        write_atomic(&fs, p("CURRENT"), b"v1").unwrap();
        assert_eq!(read_all(&fs, p("CURRENT")).unwrap(), b"v1");
    }

    #[test]
    fn appends_are_visible_and_create_truncates() {
        let fs = MemFs::new();
        let mut w = fs.create(p("/f")).unwrap();
        let r = fs.open_read(p("/f")).unwrap();
        w.append(b"hello").unwrap();
        assert_eq!(w.len(), 5);
        assert_eq!(r.len().unwrap(), 5);
        let mut buf = [0u8; 8];
        assert_eq!(r.read_at(1, &mut buf).unwrap(), 4);
        assert_eq!(&buf[..4], b"ello");
        assert_eq!(r.read_at(5, &mut buf).unwrap(), 0);
        assert_eq!(r.read_at(u64::MAX, &mut buf).unwrap(), 0);
        assert_eq!(
            r.read_exact_at(2, &mut buf).unwrap_err().kind(),
            ErrorKind::UnexpectedEof
        );
        drop(w);

        let mut a = fs.open_append(p("/f")).unwrap();
        assert_eq!(a.len(), 5);
        a.append(b" world").unwrap();
        a.flush().unwrap();
        assert_eq!(read_all(&fs, p("/f")).unwrap(), b"hello world");
        assert_eq!(fs.file_size(p("/f")).unwrap(), 11);

        let mut c = fs.create(p("/f")).unwrap();
        assert_eq!(c.len(), 0);
        assert_eq!(r.len().unwrap(), 0, "existing readers see the truncation");
        c.append(b"new").unwrap();
        assert_eq!(read_all(&fs, p("/f")).unwrap(), b"new");
    }

    #[test]
    fn removed_file_lives_on_through_open_handles() {
        let fs = MemFs::new();
        fs.create_dir_all(p("/d")).unwrap();
        let mut w = fs.create(p("/d/f")).unwrap();
        w.append(b"abc").unwrap();
        let r = fs.open_read(p("/d/f")).unwrap();
        fs.remove(p("/d/f")).unwrap();

        assert!(!fs.exists(p("/d/f")));
        assert!(fs.list(p("/d")).unwrap().is_empty());
        assert_eq!(kind(fs.open_read(p("/d/f"))), ErrorKind::NotFound);
        assert_eq!(kind(fs.remove(p("/d/f"))), ErrorKind::NotFound);

        w.append(b"def").unwrap();
        w.sync().unwrap();
        let mut buf = [0u8; 6];
        r.read_exact_at(0, &mut buf).unwrap();
        assert_eq!(&buf, b"abcdef");

        // A new file under the same name is a different file.
        write(&fs, "/d/f", b"zz");
        assert_eq!(r.len().unwrap(), 6);
        assert_eq!(read_all(&fs, p("/d/f")).unwrap(), b"zz");
        drop((w, r));
        assert_eq!(
            fs.state.lock().inodes.len(),
            1,
            "the unlinked inode is freed"
        );
    }

    #[test]
    fn rename_replaces_target() {
        let fs = MemFs::new();
        write(&fs, "/a", b"new");
        write(&fs, "/b", b"old");
        let old_reader = fs.open_read(p("/b")).unwrap();
        fs.rename(p("/a"), p("/b")).unwrap();
        assert!(!fs.exists(p("/a")));
        assert_eq!(read_all(&fs, p("/b")).unwrap(), b"new");
        assert_eq!(old_reader.len().unwrap(), 3);
        let mut buf = [0u8; 3];
        old_reader.read_exact_at(0, &mut buf).unwrap();
        assert_eq!(&buf, b"old");
        fs.rename(p("/b"), p("/b")).unwrap();
        assert_eq!(read_all(&fs, p("/b")).unwrap(), b"new");
        assert_eq!(fs.list(p("/")).unwrap(), ["b"]);
    }

    #[test]
    fn lock_conflicts_until_dropped() {
        let fs = MemFs::new();
        let l = fs.lock(p("/LOCK")).unwrap();
        assert!(fs.exists(p("/LOCK")), "lock creates the file");
        assert_eq!(kind(fs.lock(p("/LOCK"))), ErrorKind::WouldBlock);
        assert_eq!(kind(fs.clone().lock(p("/LOCK"))), ErrorKind::WouldBlock);
        let other = fs.lock(p("/OTHER")).unwrap();
        drop(l);
        let again = fs.lock(p("/LOCK")).unwrap();
        assert_eq!(kind(fs.lock(p("/LOCK"))), ErrorKind::WouldBlock);
        drop((again, other));
        fs.lock(p("/LOCK")).unwrap();
    }

    #[test]
    fn clones_share_state_across_threads() {
        let fs = MemFs::new();
        fs.create_dir_all(p("/t")).unwrap();
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let fs = fs.clone();
                std::thread::spawn(move || {
                    let path = PathBuf::from(format!("/t/{i}"));
                    let mut w = fs.create(&path).unwrap();
                    for _ in 0..100 {
                        w.append(&[i as u8; 3]).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(fs.list(p("/t")).unwrap(), ["0", "1", "2", "3"]);
        for i in 0..4u8 {
            let data = read_all(&fs, &PathBuf::from(format!("/t/{i}"))).unwrap();
            assert_eq!(data, vec![i; 300]);
        }
    }
}
