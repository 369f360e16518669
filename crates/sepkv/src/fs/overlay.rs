//! [`OverlayFs`]: a copy-on-write layer over another file system that keeps
//! every change in memory and never writes to the layer below.
//!
//! A read-only open ([`crate::Db::open_read_only`]) runs the ordinary
//! recovery over it: the WAL replay's tables, the new WAL and manifest, a
//! FlashKey hash-table checkpoint land in memory, and the directory below is
//! only read. That is what lets a read-only open work on a full disk and on
//! a read-only mount, with one recovery code path rather than a second,
//! write-free one to keep in step with it.
//!
//! Semantics:
//! - a file created here lives in memory; one opened for appending that
//!   exists below becomes an upper file whose first `base_len` bytes are
//!   read from below and whose appends stay in memory (no copy-up);
//! - removing or renaming away a file below hides it; nothing below is
//!   removed;
//! - syncs succeed and do nothing; hole punching is ignored (the bytes stay
//!   readable, which is harmless for data no live pointer names);
//! - locks are not taken here ([`FileSystem::lock`] hands out a lock that
//!   holds nothing); the read-only open takes its shared lock on the layer
//!   below first.
//!
//! Memory: what recovery writes (about the size of the replayed WAL) plus
//! whatever is appended later; the database opened over it starts no
//! flushes, compactions or GC. Safe for concurrent use.

use super::{Advice, FileLock, FileSystem, RandomAccessFile, WritableFile};
use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A file that lives in the upper (memory) layer.
struct Upper {
    /// The file below whose first `base_len` bytes this one starts with.
    base: Option<PathBuf>,
    base_len: u64,
    /// Bytes after the first `base_len`.
    tail: Vec<u8>,
}

impl Upper {
    fn len(&self) -> u64 {
        self.base_len + self.tail.len() as u64
    }
}

#[derive(Default)]
struct State {
    files: HashMap<PathBuf, Arc<Mutex<Upper>>>,
    /// Files below that were removed or renamed away here.
    hidden: HashSet<PathBuf>,
    /// Directories created here.
    dirs: HashSet<PathBuf>,
}

/// A copy-on-write overlay that keeps every write in memory; see the
/// module docs.
pub struct OverlayFs {
    base: Arc<dyn FileSystem>,
    state: Arc<Mutex<State>>,
}

impl OverlayFs {
    /// An overlay over `base` with no changes yet.
    pub fn new(base: Arc<dyn FileSystem>) -> Self {
        OverlayFs {
            base,
            state: Arc::new(Mutex::new(State::default())),
        }
    }

    /// Bytes held in memory by the files written through the overlay.
    pub fn memory_bytes(&self) -> u64 {
        let st = self.state.lock();
        st.files.values().map(|f| f.lock().tail.len() as u64).sum()
    }

    fn visible_below(&self, st: &State, path: &Path) -> bool {
        !st.hidden.contains(path) && !st.files.contains_key(path) && self.base.exists(path)
    }

    /// The upper file at `path`, made from the file below when there is
    /// only that one.
    fn upper(&self, st: &mut State, path: &Path) -> io::Result<Arc<Mutex<Upper>>> {
        if let Some(f) = st.files.get(path) {
            return Ok(f.clone());
        }
        if !self.visible_below(st, path) || self.base.is_dir(path) {
            return Err(not_found(path));
        }
        let len = self.base.file_size(path)?;
        let f = Arc::new(Mutex::new(Upper {
            base: Some(path.to_path_buf()),
            base_len: len,
            tail: Vec::new(),
        }));
        st.files.insert(path.to_path_buf(), f.clone());
        Ok(f)
    }
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file", path.display()),
    )
}

struct OverlayWriter {
    file: Arc<Mutex<Upper>>,
}

impl WritableFile for OverlayWriter {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.file.lock().tail.extend_from_slice(data);
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn len(&self) -> u64 {
        self.file.lock().len()
    }
}

struct OverlayReader {
    file: Arc<Mutex<Upper>>,
    base: Option<Box<dyn RandomAccessFile>>,
}

impl RandomAccessFile for OverlayReader {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let f = self.file.lock();
        if offset < f.base_len {
            let want = buf.len().min((f.base_len - offset) as usize);
            return match &self.base {
                Some(b) => b.read_at(offset, &mut buf[..want]),
                None => Ok(0),
            };
        }
        let at = (offset - f.base_len) as usize;
        if at >= f.tail.len() {
            return Ok(0);
        }
        let n = buf.len().min(f.tail.len() - at);
        buf[..n].copy_from_slice(&f.tail[at..at + n]);
        Ok(n)
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.file.lock().len())
    }
}

/// The lock an overlay hands out: it holds nothing.
struct NoLock;
impl FileLock for NoLock {}

impl FileSystem for OverlayFs {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let f = Arc::new(Mutex::new(Upper {
            base: None,
            base_len: 0,
            tail: Vec::new(),
        }));
        self.state
            .lock()
            .files
            .insert(path.to_path_buf(), f.clone());
        Ok(Box::new(OverlayWriter { file: f }))
    }

    fn open_append(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let f = self.upper(&mut self.state.lock(), path)?;
        Ok(Box::new(OverlayWriter { file: f }))
    }

    fn open_read(&self, path: &Path) -> io::Result<Box<dyn RandomAccessFile>> {
        let st = self.state.lock();
        if let Some(f) = st.files.get(path) {
            let f = f.clone();
            drop(st);
            let below = f.lock().base.clone();
            let base = match below {
                Some(p) => Some(self.base.open_read(&p)?),
                None => None,
            };
            return Ok(Box::new(OverlayReader { file: f, base }));
        }
        if st.hidden.contains(path) {
            return Err(not_found(path));
        }
        drop(st);
        self.base.open_read(path)
    }

    fn exists(&self, path: &Path) -> bool {
        let st = self.state.lock();
        st.files.contains_key(path) || st.dirs.contains(path) || self.visible_below(&st, path)
    }

    fn is_dir(&self, path: &Path) -> bool {
        let st = self.state.lock();
        st.dirs.contains(path) || (!st.hidden.contains(path) && self.base.is_dir(path))
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let st = self.state.lock();
        let mut names = BTreeSet::new();
        let below = self.base.is_dir(dir);
        if below {
            for n in self.base.list(dir)? {
                if !st.hidden.contains(&dir.join(&n)) {
                    names.insert(n);
                }
            }
        } else if !st.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        for p in st.files.keys().chain(st.dirs.iter()) {
            if p.parent() == Some(dir) {
                if let Some(n) = p.file_name() {
                    names.insert(n.to_string_lossy().into_owned());
                }
            }
        }
        Ok(names.into_iter().collect())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut st = self.state.lock();
        let upper = st.files.remove(path).is_some();
        let below = !st.hidden.contains(path) && self.base.exists(path);
        if below {
            st.hidden.insert(path.to_path_buf());
        }
        if upper || below {
            Ok(())
        } else {
            Err(not_found(path))
        }
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.state.lock();
        let f = self.upper(&mut st, from)?;
        st.files.remove(from);
        if self.base.exists(from) {
            st.hidden.insert(from.to_path_buf());
        }
        st.files.insert(to.to_path_buf(), f);
        Ok(())
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.state.lock();
        let mut d = Some(dir);
        while let Some(p) = d {
            if p.as_os_str().is_empty() || (self.base.is_dir(p) && !st.hidden.contains(p)) {
                break;
            }
            st.dirs.insert(p.to_path_buf());
            d = p.parent();
        }
        Ok(())
    }

    fn sync_dir(&self, _dir: &Path) -> io::Result<()> {
        Ok(())
    }

    fn sync_file_system(&self, _dir: &Path) -> io::Result<bool> {
        Ok(true)
    }

    fn file_size(&self, path: &Path) -> io::Result<u64> {
        let st = self.state.lock();
        if let Some(f) = st.files.get(path) {
            return Ok(f.lock().len());
        }
        if st.hidden.contains(path) {
            return Err(not_found(path));
        }
        self.base.file_size(path)
    }

    fn allocated_size(&self, path: &Path) -> io::Result<u64> {
        let st = self.state.lock();
        if let Some(f) = st.files.get(path) {
            return Ok(f.lock().len());
        }
        if st.hidden.contains(path) {
            return Err(not_found(path));
        }
        self.base.allocated_size(path)
    }

    fn truncate_synced(&self, path: &Path, len: u64) -> io::Result<()> {
        let f = self.upper(&mut self.state.lock(), path)?;
        let mut f = f.lock();
        if len < f.base_len {
            f.base_len = len;
            f.tail.clear();
        } else {
            let keep = (len - f.base_len) as usize;
            f.tail.truncate(keep);
        }
        Ok(())
    }

    fn punch_hole(&self, _path: &Path, _offset: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }

    fn advise(&self, path: &Path, offset: u64, len: u64, advice: Advice) {
        let st = self.state.lock();
        if self.visible_below(&st, path) {
            drop(st);
            self.base.advise(path, offset, len, advice);
        }
    }

    fn lock(&self, _path: &Path) -> io::Result<Box<dyn FileLock>> {
        Ok(Box::new(NoLock))
    }

    fn lock_shared(&self, path: &Path) -> io::Result<Option<Box<dyn FileLock>>> {
        self.base.lock_shared(path)
    }

    fn with_direct_reads(&self) -> io::Result<Arc<dyn FileSystem>> {
        Ok(Arc::new(OverlayFs {
            base: self.base.with_direct_reads()?,
            state: self.state.clone(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{read_all, MemFs};

    fn p(s: &str) -> &Path {
        Path::new(s)
    }

    #[test]
    fn writes_stay_above_and_the_layer_below_is_untouched() {
        let below = MemFs::new();
        below.create_dir_all(p("/d")).unwrap();
        let mut f = below.create(p("/d/a")).unwrap();
        f.append(b"hello").unwrap();
        f.sync().unwrap();
        drop(f);
        let o = OverlayFs::new(Arc::new(below.clone()));
        let mut w = o.open_append(p("/d/a")).unwrap();
        w.append(b" world").unwrap();
        assert_eq!(w.len(), 11);
        assert_eq!(read_all(&o, p("/d/a")).unwrap(), b"hello world");
        let mut n = o.create(p("/d/b")).unwrap();
        n.append(b"new").unwrap();
        o.rename(p("/d/b"), p("/d/c")).unwrap();
        o.remove(p("/d/a")).unwrap();
        assert_eq!(o.list(p("/d")).unwrap(), vec!["c".to_string()]);
        assert!(!o.exists(p("/d/a")));
        assert_eq!(read_all(&o, p("/d/c")).unwrap(), b"new");
        o.create_dir_all(p("/d/sub")).unwrap();
        assert!(o.is_dir(p("/d/sub")));
        // Below: exactly as before.
        assert_eq!(below.list(p("/d")).unwrap(), vec!["a".to_string()]);
        assert_eq!(read_all(&below, p("/d/a")).unwrap(), b"hello");
        assert_eq!(o.memory_bytes(), 3, "the removed file's appends are gone");
    }

    #[test]
    fn truncation_cuts_the_prefix_read_from_below() {
        let below = MemFs::new();
        below.create_dir_all(p("/d")).unwrap();
        let mut f = below.create(p("/d/a")).unwrap();
        f.append(b"0123456789").unwrap();
        drop(f);
        let o = OverlayFs::new(Arc::new(below.clone()));
        o.truncate_synced(p("/d/a"), 4).unwrap();
        let mut w = o.open_append(p("/d/a")).unwrap();
        w.append(b"xy").unwrap();
        assert_eq!(read_all(&o, p("/d/a")).unwrap(), b"0123xy");
        assert_eq!(read_all(&below, p("/d/a")).unwrap(), b"0123456789");
    }
}
