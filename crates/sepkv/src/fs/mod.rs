//! The file-system layer: every byte sepkv reads or writes goes through the
//! [`FileSystem`] trait.
//!
//! Three implementations share the trait:
//! - [`StdFs`]: the operating system's file system (the default);
//! - [`MemFs`]: a strict in-memory file system for tests;
//! - [`FaultFs`]: an in-memory file system that remembers what was made
//!   durable (`sync` of a file, `sync_dir` of its directory) and can simulate a
//!   crash that drops everything else, and that injects `EIO`/`ENOSPC` errors
//!   by rule.
//!
//! Durability model (the one the engine is written against, and the one
//! [`FaultFs`] enforces): data appended to a file is durable only after
//! [`WritableFile::sync`] returns; the creation, rename or removal of a
//! directory entry is durable only after [`FileSystem::sync_dir`] on its
//! directory returns.
//!
//! All implementations are safe for concurrent use from several threads.
//! I/O volume is counted by [`IoStats`], by [`IoCategory`].

mod accounting;
mod fault;
mod mapped_append;
mod mem;
mod overlay;
mod std_fs;

pub use accounting::{IoCategory, IoStats, IoStatsSnapshot};
pub use fault::{FaultFs, FaultKind, FaultOp, FaultRule};
pub use mem::MemFs;
pub use overlay::OverlayFs;
pub(crate) use std_fs::AlignedBuf;
pub use std_fs::{open_files_limit, read_handle_budget, DirectReadFs, StdFs, DIRECT_IO_ALIGN};

/// The page size sepkv assumes (bytes): the unit the kernel's page cache
/// reads and writes back, and the file systems' allocation unit, on the
/// platforms sepkv runs on.
pub const PAGE_SIZE: u64 = 4096;

use std::io;
use std::path::{Path, PathBuf};

/// A file opened for appending. Dropping it without `sync` keeps the data in
/// the OS (a process crash does not lose it) but promises nothing on power
/// loss.
pub trait WritableFile: Send {
    /// Appends `data` at the end of the file.
    fn append(&mut self, data: &[u8]) -> io::Result<()>;
    /// Hands buffered data to the operating system (survives a process crash).
    fn flush(&mut self) -> io::Result<()>;
    /// Appends `data` and hands everything buffered to the operating
    /// system: [`WritableFile::append`], then [`WritableFile::flush`]. A
    /// file may write `data` without copying it into its buffer first
    /// (the default does not).
    fn append_flush(&mut self, data: &[u8]) -> io::Result<()> {
        self.append(data)?;
        self.flush()
    }
    /// Flushes, then makes the file's data durable (`fdatasync`).
    fn sync(&mut self) -> io::Result<()>;
    /// Current length in bytes, including buffered data.
    fn len(&self) -> u64;
    /// True when the file is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Sets the file's size to at least `bytes` (zero-filled, sparse where
    /// the file system allows) without moving where appends land, so that
    /// appends within it do not change the size and a data sync need not
    /// log a size change. For files written from the start after
    /// [`FileSystem::create`]; a file opened with
    /// [`FileSystem::open_append`] ignores it, and a preallocated file must
    /// not be reopened that way (appends would land after its zeros).
    /// Readers see zeros past the
    /// appended data ([`crate::format::record`] reads them as the log's
    /// end). The default does nothing.
    ///
    /// # Errors
    /// The OS error of the size change; the file stays usable.
    fn preallocate(&mut self, bytes: u64) -> io::Result<()> {
        let _ = bytes;
        Ok(())
    }
    /// A handle that makes this file's data durable without `&mut self`,
    /// so that its owner can sync outside the lock that orders its
    /// appends: the data handed to the OS ([`WritableFile::flush`]) before
    /// [`SyncHandle::sync`] is called is durable when that returns; appends
    /// racing it may or may not be. `None` (the default) when the file
    /// offers none; the owner then syncs through [`WritableFile::sync`].
    fn sync_handle(&self) -> Option<Box<dyn SyncHandle>> {
        None
    }
}

/// Syncs the file `parts` picks out of the state behind `guard` with the
/// lock let go while the fsync runs: under the lock the file is flushed
/// (every appended byte handed to the OS) and its [`SyncHandle`] taken,
/// then the lock is released until the sync returns, so appends go on
/// meanwhile. A file without a handle syncs under the lock. `guard` is
/// locked again when this returns; the state may have changed meanwhile.
///
/// `parts` also picks the file's failure mark: on an error it is set,
/// since the file's durable end is then unknown and retrying an fsync
/// after a failure is unsafe; its owner refuses further appends and syncs
/// while it is set.
///
/// # Errors
/// The flush's or the sync's error.
pub fn sync_unlocked<R: parking_lot::lock_api::RawMutex, T>(
    guard: &mut parking_lot::lock_api::MutexGuard<'_, R, T>,
    parts: impl Fn(&mut T) -> (&mut Box<dyn WritableFile>, &mut Option<String>),
) -> io::Result<()> {
    let handle = {
        let f = parts(guard).0;
        f.flush().map(|()| f.sync_handle())
    };
    let res = match handle {
        Ok(Some(h)) => parking_lot::lock_api::MutexGuard::unlocked(guard, || h.sync()),
        Ok(None) => parts(guard).0.sync(),
        Err(e) => Err(e),
    };
    if let Err(e) = &res {
        *parts(guard).1 = Some(format!(
            "writing out or syncing its buffered records failed: {e}"
        ));
    }
    res
}

/// See [`WritableFile::sync_handle`].
pub trait SyncHandle: Send + Sync {
    /// `fdatasync` of the file the handle came from.
    ///
    /// # Errors
    /// The sync's error; the file's end is then no longer known to be
    /// durable and the owner must treat the file as failed.
    fn sync(&self) -> io::Result<()>;

    /// Writes out, and waits for, the bytes handed to the OS that no
    /// append will touch again — the whole pages before the page holding
    /// the file's end — without making the file's metadata durable; a
    /// no-op where the file system offers no such call (the default).
    /// Called before a sync that covers many files (`syncfs`), so that the
    /// sync's writeback has only the files' last pages left: while a page
    /// is being queued for writeback it is locked, and an append to it
    /// waits, so a writer appending to a file that a large sync is writing
    /// out would wait for the device's queue to drain.
    ///
    /// # Errors
    /// The writeback's I/O error: as a failed [`SyncHandle::sync`], the
    /// file's data is no longer known to be intact.
    fn write_back(&self) -> io::Result<()> {
        Ok(())
    }
}

/// A file opened for positional reads. Safe to share between threads.
pub trait RandomAccessFile: Send + Sync {
    /// Reads up to `buf.len()` bytes at `offset`; returns the count read
    /// (0 at end of file).
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize>;
    /// Length of the file in bytes.
    fn len(&self) -> io::Result<u64>;
    /// An access-pattern hint for `len` bytes at `offset` on this open file
    /// (`posix_fadvise`); it changes no data and may be ignored.
    fn advise(&self, _offset: u64, _len: u64, _advice: Advice) {}
    /// Maps the whole file, at its length now, read-only into memory
    /// (`mmap`); `Ok(None)` where this handle cannot (in-memory and
    /// direct-read files, an empty file). Wrap the handle in a
    /// [`MappedFile`] to read through the mapping.
    ///
    /// # Errors
    /// The operating system's, when the mapping fails.
    fn map(&self) -> io::Result<Option<std::sync::Arc<Mapping>>> {
        Ok(None)
    }
    /// The mapping this handle's reads are served from ([`MappedFile`]);
    /// `None` for a handle that reads with system calls. Readers that find
    /// one may use its bytes in place instead of copying them out.
    fn mapping(&self) -> Option<&std::sync::Arc<Mapping>> {
        None
    }
    /// A handle of the same file for point reads made with system calls
    /// ([`PointReads`]), or `None` to use this one.
    fn point_reads(&self) -> Option<&dyn RandomAccessFile> {
        None
    }
    /// True when the file is empty.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Reads exactly `buf.len()` bytes at `offset`; a short file is
    /// `ErrorKind::UnexpectedEof`.
    fn read_exact_at(&self, mut offset: u64, mut buf: &mut [u8]) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read_at(offset, buf) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "read past end of file",
                    ))
                }
                Ok(n) => {
                    offset += n as u64;
                    buf = &mut buf[n..];
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Flips the bits of `mask` in the byte at `at` of the file `path` on the
/// real file system, in place: damage under an open (or mapped) file.
#[cfg(test)]
pub(crate) fn flip_byte_in_file(path: &Path, at: u64, mask: u8) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, at).unwrap();
    byte[0] ^= mask;
    file.write_all_at(&byte, at).unwrap();
}

/// A read-only memory map of a whole file, made by
/// [`RandomAccessFile::map`]. It covers the file's length when it was made;
/// bytes appended later are outside it.
///
/// Only files that are never rewritten in place are mapped (SSTables and
/// DTables, which only grow; value-log files and closed logical bands,
/// which never change): a mapping whose file is truncated under it by
/// another program makes a read of the lost pages fault (`SIGBUS`), as in
/// every engine that maps its tables.
pub struct Mapping {
    map: memmap2::Mmap,
}

impl Mapping {
    /// The mapped bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when the mapping is empty (never: empty files are not mapped).
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mapping").field("len", &self.len()).finish()
    }
}

/// The reads of [`RandomAccessFile`] that a wrapper of a handle (its
/// `file` field) passes on to it.
macro_rules! forward_reads {
    () => {
        fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
            self.file.read_at(offset, buf)
        }

        fn len(&self) -> io::Result<u64> {
            self.file.len()
        }

        fn advise(&self, offset: u64, len: u64, advice: Advice) {
            self.file.advise(offset, len, advice);
        }
    };
}

/// A [`RandomAccessFile`] that also hands out a [`Mapping`] of its file
/// ([`RandomAccessFile::mapping`]) to readers that can use the bytes in
/// place. Its own reads stay system calls on the file: one request per
/// read, with the kernel's read-ahead, where a copy out of the mapping would
/// fault a page at a time on data not in memory.
pub struct MappedFile {
    file: Box<dyn RandomAccessFile>,
    map: std::sync::Arc<Mapping>,
}

impl MappedFile {
    /// `file` with a mapping of it, or `file` itself where it cannot be
    /// mapped ([`RandomAccessFile::map`] returns `None`) or the mapping
    /// fails (the process's mappings or address space exhausted, say):
    /// reads then take system calls, as without `Options::mmap_reads`.
    pub fn wrap(file: Box<dyn RandomAccessFile>) -> Box<dyn RandomAccessFile> {
        match file.map() {
            Ok(Some(map)) => Box::new(MappedFile { file, map }),
            Ok(None) | Err(_) => file,
        }
    }

    /// Opens `path` for reading ([`FileSystem::open_read`]) and, when
    /// `map` (`Options::mmap_reads`), [wraps](Self::wrap) it.
    ///
    /// # Errors
    /// The error of the open.
    pub fn open(
        fs: &dyn FileSystem,
        path: &Path,
        map: bool,
    ) -> io::Result<Box<dyn RandomAccessFile>> {
        let file = fs.open_read(path)?;
        Ok(if map { Self::wrap(file) } else { file })
    }
}

impl RandomAccessFile for MappedFile {
    forward_reads!();

    fn mapping(&self) -> Option<&std::sync::Arc<Mapping>> {
        Some(&self.map)
    }
}

/// A file read through `file`, with a second handle for point reads: opened
/// on first use, and advised [`Advice::Random`] so that the kernel reads
/// only the pages a point read asks for, not a read-around window of its
/// neighbours that would push useful pages out of the page cache. Scans,
/// flushes and compactions read through `file` and keep its read-ahead
/// (RocksDB's `advise_random_on_open`, for point reads only). If the second
/// open fails, point reads use `file`.
pub struct PointReads {
    file: Box<dyn RandomAccessFile>,
    fs: std::sync::Arc<dyn FileSystem>,
    path: std::path::PathBuf,
    point: std::sync::OnceLock<Option<Box<dyn RandomAccessFile>>>,
}

impl PointReads {
    /// `file`, the open file `path` of `fs`, with a point-read handle.
    pub fn new(
        file: Box<dyn RandomAccessFile>,
        fs: std::sync::Arc<dyn FileSystem>,
        path: std::path::PathBuf,
    ) -> Self {
        PointReads {
            file,
            fs,
            path,
            point: std::sync::OnceLock::new(),
        }
    }
}

impl RandomAccessFile for PointReads {
    forward_reads!();

    fn map(&self) -> io::Result<Option<std::sync::Arc<Mapping>>> {
        self.file.map()
    }

    fn mapping(&self) -> Option<&std::sync::Arc<Mapping>> {
        self.file.mapping()
    }

    fn point_reads(&self) -> Option<&dyn RandomAccessFile> {
        let point = self.point.get_or_init(|| {
            let f = self.fs.open_read(&self.path).ok()?;
            f.advise(0, 0, Advice::Random);
            Some(f)
        });
        Some(point.as_deref().unwrap_or(&*self.file))
    }
}

/// Access-pattern hints for [`FileSystem::advise`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// The range will be read soon (`POSIX_FADV_WILLNEED`).
    WillNeed,
    /// The file will be read sequentially (`POSIX_FADV_SEQUENTIAL`).
    Sequential,
    /// The file will be read at random places (`POSIX_FADV_RANDOM`).
    Random,
}

/// An advisory lock held on a file; released on drop.
pub trait FileLock: Send + Sync {}

/// The file-system interface under all of sepkv's I/O.
pub trait FileSystem: Send + Sync + 'static {
    /// Creates `path` (truncating an existing file) for appending.
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>>;
    /// Opens an existing file for appending at its end.
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn WritableFile>>;
    /// Opens the existing file `path` for writing from its start, over its
    /// old content, without shortening it: a recycled log, whose blocks
    /// are allocated already, so that a data sync of writes within them
    /// need not commit file-system metadata (block allocation, size) as
    /// well. The writer's length starts at 0; the old bytes stay wherever
    /// no synced write covers them. `ErrorKind::Unsupported` (the default)
    /// where the file system cannot; callers then create a new file.
    fn reuse(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let _ = path;
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "reusing a file is not supported",
        ))
    }
    /// Opens `path` for appends copied into a shared memory mapping of the
    /// file instead of written with a system call each (see
    /// `fs/mapped_append.rs`): `at == None` creates the file (truncating one
    /// that exists); `Some(len)` opens the existing file to append at
    /// `len`, cutting whatever follows (the zeros a crash left). The
    /// writer's file size runs ahead of its appends (a hole), and every
    /// page is faulted in with `MADV_POPULATE_WRITE` before a copy
    /// touches it (a full disk is an append's `ENOSPC`, never a `SIGBUS`),
    /// so until it is dropped, and after a crash, the file is longer than
    /// what was appended and ends in zeros. Appends of 4 KiB or more are
    /// written with `pwrite(2)` into the same file. Appended bytes survive a
    /// process crash once the append returns; [`WritableFile::sync`]
    /// makes them durable, as for [`FileSystem::create`]'s files.
    ///
    /// # Errors
    /// `ErrorKind::Unsupported` (the default) where the file system cannot
    /// (in memory, a kernel without `MADV_POPULATE_WRITE`): callers then
    /// use [`FileSystem::create`] or [`FileSystem::open_append`]. The OS
    /// error of the open, the size change, the mapping or the first page's
    /// fault otherwise; on any
    /// error the file holds exactly its first `at` bytes.
    fn open_mapped(&self, path: &Path, at: Option<u64>) -> io::Result<Box<dyn WritableFile>> {
        let _ = (path, at);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "mapped appends are not supported",
        ))
    }
    /// Opens an existing file for positional reads.
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn RandomAccessFile>>;
    /// True when `path` exists (file or directory).
    fn exists(&self, path: &Path) -> bool;
    /// True when `path` is a directory.
    fn is_dir(&self, path: &Path) -> bool;
    /// Names (not paths) of the entries of directory `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Removes a file.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Atomically renames `from` to `to`, replacing `to`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Creates `dir` and its parents.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Makes the entries of directory `dir` durable (creations, renames,
    /// removals).
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Makes durable, in one call, everything already handed to the OS
    /// (appended and flushed, see [`WritableFile::flush`]) in every file
    /// of the file system holding `dir`, with their sizes and the
    /// directory entries of `dir`; `Ok(false)` when this file system
    /// cannot (the default), and the caller then syncs file by file.
    /// Worth it where many files were written since their last sync: one
    /// call in place of a sync (and, on a journaling file system, a
    /// journal commit) per file.
    ///
    /// # Errors
    /// The sync's I/O error; durability is then unknown, as after a
    /// failed [`WritableFile::sync`].
    fn sync_file_system(&self, dir: &Path) -> io::Result<bool> {
        let _ = dir;
        Ok(false)
    }
    /// Length of a file in bytes.
    fn file_size(&self, path: &Path) -> io::Result<u64>;
    /// Bytes the file occupies on the device (allocated blocks, as `du`
    /// counts them); the logical length where the notion does not apply.
    fn allocated_size(&self, path: &Path) -> io::Result<u64> {
        self.file_size(path)
    }
    /// Shrinks file `path` to `len` bytes (at most its size) and makes the
    /// new size and the data before it durable (`ftruncate` then `fsync`).
    /// Used to cut a preallocated file's unused tail at recovery, so every
    /// file system must provide it (a value-log file whose tail stayed would
    /// be read past its last record at a later open).
    fn truncate_synced(&self, path: &Path, len: u64) -> io::Result<()>;
    /// Frees the device space of bytes `[offset, offset + len)` of a file
    /// without changing its length (`fallocate` with
    /// `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`); the range then reads as
    /// zeros. `ErrorKind::Unsupported` where the file system cannot.
    fn punch_hole(&self, path: &Path, offset: u64, len: u64) -> io::Result<()> {
        let _ = (path, offset, len);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "hole punching is not supported",
        ))
    }
    /// Hints that `[offset, offset + len)` of a file will be read soon
    /// (`posix_fadvise(WILLNEED)`: the page cache is shared, so the hint
    /// helps every reader of the file); a no-op where the notion does not
    /// apply. `Sequential` and `Random` change the read-ahead of one open
    /// file only, so given here (on a file opened for the call) they have
    /// no effect: give them to the reading handle
    /// ([`RandomAccessFile::advise`]).
    fn advise(&self, path: &Path, offset: u64, len: u64, advice: Advice) {
        let _ = (path, offset, len, advice);
    }
    /// Takes an exclusive lock on `path` (creating it), failing with
    /// `ErrorKind::WouldBlock` when another holder has it.
    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>>;
    /// Takes a shared lock on the existing file `path` without creating
    /// or writing anything (a read-only open's lock): shared locks coexist,
    /// and an exclusive [`lock`](Self::lock) conflicts with them both ways.
    /// `Ok(None)` when `path` does not exist (no process ever held the
    /// database, or it sits on a read-only copy without its `LOCK`);
    /// `ErrorKind::WouldBlock` when an exclusive holder has it. The default
    /// (the in-memory file systems, which have no shared locks) takes the
    /// exclusive lock of an existing file.
    ///
    /// # Errors
    /// `WouldBlock` as above; the OS error of the open or the lock.
    fn lock_shared(&self, path: &Path) -> io::Result<Option<Box<dyn FileLock>>> {
        if !self.exists(path) {
            return Ok(None);
        }
        self.lock(path).map(Some)
    }
    /// Makes `to` a second name of the file `from` (a hard link): both
    /// names then share the data, so only files never changed after they
    /// are written may be linked (checkpoints link SSTables).
    /// `ErrorKind::Unsupported` (the default) where the file system has no
    /// links, and `ErrorKind::CrossesDevices` when `to` is on another file
    /// system; callers then copy.
    ///
    /// # Errors
    /// As above, or the OS error of `link(2)`.
    fn link(&self, from: &Path, to: &Path) -> io::Result<()> {
        let _ = (from, to);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "hard links are not supported",
        ))
    }
    /// The same file system with every [`open_read`](Self::open_read)
    /// bypassing the operating system's page cache (`O_DIRECT`), as
    /// `Options::use_direct_reads` asks; writes stay buffered.
    /// `ErrorKind::Unsupported` where the notion does not apply (the
    /// in-memory file systems).
    fn with_direct_reads(&self) -> io::Result<std::sync::Arc<dyn FileSystem>> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "direct reads are not supported by this file system",
        ))
    }
}

/// Creates file `path` and preallocates `bytes` of it
/// ([`WritableFile::preallocate`]): the logs whose syncs are waited on (the
/// WAL, the active value-log file, HashKV's write journal) are made this
/// way, so that a synced write's fdatasync logs no size change (on ext4
/// that roughly halves its cost). A failed preallocation is ignored: the
/// file then grows as it is written.
///
/// # Errors
/// The error of [`FileSystem::create`].
pub fn create_preallocated(
    fs: &dyn FileSystem,
    path: &Path,
    bytes: u64,
) -> io::Result<Box<dyn WritableFile>> {
    let mut file = fs.create(path)?;
    let _ = file.preallocate(bytes);
    Ok(file)
}

/// Reads a whole file into memory.
pub fn read_all(fs: &dyn FileSystem, path: &Path) -> io::Result<Vec<u8>> {
    let f = fs.open_read(path)?;
    let len = f.len()? as usize;
    let mut buf = vec![0u8; len];
    f.read_exact_at(0, &mut buf)?;
    Ok(buf)
}

/// Writes `data` to `path` atomically: a temporary file is written and
/// synced, renamed over `path`, and the directory is synced.
pub fn write_atomic(fs: &dyn FileSystem, path: &Path, data: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = PathBuf::from(path);
    tmp.set_extension("tmp");
    {
        let mut f = fs.create(&tmp)?;
        f.append(data)?;
        f.sync()?;
    }
    fs.rename(&tmp, path)?;
    fs.sync_dir(dir)
}
