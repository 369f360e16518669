//! [`FileSystem`] over the operating system's files.

use super::{FileLock, FileSystem, RandomAccessFile, SyncHandle, WritableFile};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Size of the user-space write buffer of a [`WritableFile`] (bytes).
const WRITE_BUFFER: usize = 64 * 1024;

/// Bytes handed to the OS after which a file's writeback is started
/// (`sync_file_range`, Linux), so that a later `fsync` finds little left to
/// write and whoever waits for it — often a writer behind a lock — waits
/// less (RocksDB's `bytes_per_sync`). Nothing is made durable by it.
const WRITEBACK_EVERY: u64 = 1 << 20;

/// Writeback is started only for bytes at least this far behind the end of
/// the file, and only for whole pages: a page under writeback may not
/// change until its write completes ("stable pages"), so an append that
/// lands on it would wait for the device — a millisecond or more inside the
/// append, under whatever lock the caller holds. Appends only ever touch
/// the last page; keeping a margin also leaves room for the page cache to
/// merge the writes that follow.
const WRITEBACK_LAG: u64 = 1 << 20;

/// Alignment of a started writeback's end (bytes; the page size on the
/// platforms sepkv runs on, or a multiple of it).
const WRITEBACK_ALIGN: u64 = super::PAGE_SIZE;

/// Bytes, at least, that a sync first writes out and waits for apart from
/// the file's last page ([`write_back_settled`]): below it a sync writes
/// everything in one go, as a synced write's few pages.
const SETTLE_BEFORE_SYNC: u64 = 256 * 1024;

/// The operating system's file system. Zero-sized; clone freely.
#[derive(Debug, Default, Clone, Copy)]
pub struct StdFs;

/// A writable file and its progress, shared by its [`StdWritable`] and the
/// [`SyncHandle`]s it hands out.
pub(super) struct Shared {
    pub(super) file: File,
    /// Bytes of the file handed to the OS (its end as `write` sees it;
    /// a preallocated file is longer).
    pub(super) handed: AtomicU64,
    /// Bytes known to be synced or written back: where the next
    /// [`write_back_settled`] starts.
    settled: AtomicU64,
}

struct StdWritable {
    /// Shared with the [`SyncHandle`]s handed out (`&File` writes).
    shared: Arc<Shared>,
    buf: Vec<u8>,
    len: u64,
    /// Offset up to which writeback was started.
    hinted: u64,
    /// Opened with `O_APPEND` (writes land at the end of the file, so a
    /// preallocation would put them past its zeros).
    appending: bool,
}

impl StdWritable {
    /// Writes to `file` from `len` bytes on (where its position is).
    fn boxed(file: File, len: u64, appending: bool) -> Box<dyn WritableFile> {
        Box::new(StdWritable {
            shared: Arc::new(Shared::new(file, len)),
            buf: Vec::with_capacity(WRITE_BUFFER),
            len,
            hinted: len,
            appending,
        })
    }

    /// Starts the writeback of what was handed to the OS since the last
    /// start, up to [`WRITEBACK_LAG`] behind the end and on a page boundary,
    /// once that is [`WRITEBACK_EVERY`] bytes. A hint: failures are
    /// ignored (the `fsync` that makes data durable reports its own).
    fn start_writeback(&mut self) {
        let written = self.len - self.buf.len() as u64;
        let end = written.saturating_sub(WRITEBACK_LAG) / WRITEBACK_ALIGN * WRITEBACK_ALIGN;
        if end < self.hinted + WRITEBACK_EVERY {
            return;
        }
        // A hint: its failure is the sync's to report.
        let _ = sync_file_range(&self.shared.file, self.hinted, end, false);
        self.hinted = end;
    }
}

impl WritableFile for StdWritable {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.len += data.len() as u64;
        if self.buf.len() + data.len() > WRITE_BUFFER {
            self.flush()?;
            if data.len() >= WRITE_BUFFER {
                (&self.shared.file).write_all(data)?;
                self.shared.handed.store(self.len, Ordering::Release);
                self.start_writeback();
                return Ok(());
            }
        }
        self.buf.extend_from_slice(data);
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            let r = (&self.shared.file).write_all(&self.buf);
            self.buf.clear();
            r?;
            self.shared.handed.store(self.len, Ordering::Release);
            self.start_writeback();
        }
        Ok(())
    }

    fn append_flush(&mut self, data: &[u8]) -> io::Result<()> {
        // What is buffered goes first; `data` is written from where it
        // is, not copied into the buffer.
        self.flush()?;
        self.len += data.len() as u64;
        (&self.shared.file).write_all(data)?;
        self.shared.handed.store(self.len, Ordering::Release);
        self.start_writeback();
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.flush()?;
        self.shared.sync()
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn preallocate(&mut self, bytes: u64) -> io::Result<()> {
        // ftruncate(2) to a larger size: the new range is a hole. The file
        // position (where `write` lands) does not move.
        if !self.appending && bytes > self.len && bytes > self.shared.file.metadata()?.len() {
            self.shared.file.set_len(bytes)?;
        }
        Ok(())
    }

    fn sync_handle(&self) -> Option<Box<dyn SyncHandle>> {
        Some(Box::new(StdSync(Arc::clone(&self.shared))))
    }
}

impl Shared {
    /// `file`, of which `len` bytes are handed to the OS and taken as
    /// settled.
    pub(super) fn new(file: File, len: u64) -> Shared {
        Shared {
            file,
            handed: AtomicU64::new(len),
            settled: AtomicU64::new(len),
        }
    }

    /// `fdatasync`, after [`write_back_settled`] when at least
    /// [`SETTLE_BEFORE_SYNC`] bytes before the last page are not yet
    /// written back: the sync itself then writes the last pages alone, so
    /// that an append to the file's last page — which waits while that
    /// page is locked for writeback — waits for a few pages' write instead
    /// of the whole sync's (a GC's or a flush's sync of a file that
    /// writers go on appending to).
    pub(super) fn sync(&self) -> io::Result<()> {
        let handed = self.handed.load(Ordering::Acquire);
        if handed.saturating_sub(self.settled.load(Ordering::Acquire)) >= SETTLE_BEFORE_SYNC {
            self.write_back_settled()?;
        }
        self.file.sync_data()?;
        self.settled.fetch_max(handed, Ordering::AcqRel);
        Ok(())
    }

    /// Writes out the whole pages between the last settled byte and the
    /// page holding the end handed to the OS, and waits for them
    /// (`sync_file_range(2)`, Linux; elsewhere nothing). Pages are only
    /// ever appended to at the end, so none of these changes again.
    ///
    /// # Errors
    /// The writeback's I/O error (reported here, it is not reported again
    /// by the `fdatasync` that follows on this descriptor).
    fn write_back_settled(&self) -> io::Result<()> {
        let handed = self.handed.load(Ordering::Acquire);
        let start = self.settled.load(Ordering::Acquire) / WRITEBACK_ALIGN * WRITEBACK_ALIGN;
        let end = handed / WRITEBACK_ALIGN * WRITEBACK_ALIGN;
        if end <= start {
            return Ok(());
        }
        // Written back, not durable: the settled mark only moves where the
        // next write-back starts, while a sync still writes the file's
        // metadata and flushes the device's cache.
        if sync_file_range(&self.file, start, end, true)? {
            self.settled.fetch_max(end, Ordering::AcqRel);
        }
        Ok(())
    }
}

/// `sync_file_range(2)` over `start..end` of `file`: starts the writeback
/// of its dirty pages, and with `wait` also waits for any already under
/// writeback first and for all of them at the end. `Ok(false)` where the
/// call is not available (not Linux) or the file system or file does not
/// take it; the sync that follows then does all the work.
///
/// # Errors
/// With `wait`, the writeback's I/O error.
pub(super) fn sync_file_range(file: &File, start: u64, end: u64, wait: bool) -> io::Result<bool> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::io::AsRawFd;
        let flags = if wait {
            libc::SYNC_FILE_RANGE_WAIT_BEFORE
                | libc::SYNC_FILE_RANGE_WRITE
                | libc::SYNC_FILE_RANGE_WAIT_AFTER
        } else {
            libc::SYNC_FILE_RANGE_WRITE
        };
        // SAFETY: a plain syscall on a descriptor `file` owns.
        #[allow(unsafe_code)]
        let r = unsafe {
            libc::sync_file_range(
                file.as_raw_fd(),
                start as libc::off64_t,
                end.saturating_sub(start) as libc::off64_t,
                flags,
            )
        };
        if r == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        if matches!(
            e.raw_os_error(),
            Some(libc::EINVAL | libc::ENOSYS | libc::ESPIPE | libc::EOPNOTSUPP)
        ) {
            return Ok(false);
        }
        Err(e)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (file, start, end, wait);
        Ok(false)
    }
}

/// [`SyncHandle`] of a [`StdWritable`] (or of a mapped writer).
struct StdSync(Arc<Shared>);

/// The [`SyncHandle`] of the file behind `shared`.
pub(super) fn sync_handle(shared: &Arc<Shared>) -> Box<dyn SyncHandle> {
    Box::new(StdSync(Arc::clone(shared)))
}

impl SyncHandle for StdSync {
    fn sync(&self) -> io::Result<()> {
        self.0.sync()
    }

    fn write_back(&self) -> io::Result<()> {
        self.0.write_back_settled()
    }
}

impl Drop for StdWritable {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

struct StdRandom {
    file: File,
}

impl RandomAccessFile for StdRandom {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.file.read_at(buf, offset)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn advise(&self, offset: u64, len: u64, advice: super::Advice) {
        fadvise(&self.file, offset, len, advice);
    }

    fn map(&self) -> io::Result<Option<Arc<super::Mapping>>> {
        if self.file.metadata()?.len() == 0 {
            return Ok(None);
        }
        // SAFETY: the mapping is read-only and private to this process's
        // readers; sepkv maps only files it never rewrites in place (tables,
        // which only grow; value-log files and closed bands), and readers use
        // no byte past the length a table was recorded at. Another program
        // truncating the file would make a read of the lost pages fault, as
        // `Mapping` documents.
        #[allow(unsafe_code)]
        let map = unsafe { memmap2::MmapOptions::new().map(&self.file)? };
        // Point reads touch one block: no read-around on a fault. A no-op
        // where unsupported.
        let _ = map.advise(memmap2::Advice::Random);
        Ok(Some(Arc::new(super::Mapping { map })))
    }
}

/// Alignment of direct reads: file offset, length and buffer address (bytes).
/// 4 KiB covers devices of 512-byte and 4 KiB logical blocks.
pub const DIRECT_IO_ALIGN: usize = 4096;

/// [`StdFs`] whose reads bypass the page cache: files opened for reading
/// use `O_DIRECT`, and each read is widened to [`DIRECT_IO_ALIGN`]
/// boundaries, read into an aligned buffer and copied out. A get then costs
/// the device reads it would cost with a cold cache, which is what
/// device-bound measurements need. Writes, directory operations and locks are
/// [`StdFs`]'s. Made by [`FileSystem::with_direct_reads`] on [`StdFs`].
#[derive(Debug, Default, Clone, Copy)]
pub struct DirectReadFs;

struct DirectRandom {
    file: File,
}

/// A zeroed heap buffer whose address and length are multiples of
/// [`DIRECT_IO_ALIGN`], as `O_DIRECT` reads need: a read of an aligned
/// range into it goes from the device straight into the buffer (see
/// [`DirectReadFs`]).
pub(crate) struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    layout: std::alloc::Layout,
}

impl AlignedBuf {
    /// A buffer of at least `len` bytes (at least [`DIRECT_IO_ALIGN`],
    /// rounded up to a multiple of it).
    ///
    /// # Errors
    /// `InvalidInput` for a length too large for a layout, `OutOfMemory`
    /// when the allocation fails.
    pub(crate) fn new(len: usize) -> io::Result<AlignedBuf> {
        let len = len
            .max(DIRECT_IO_ALIGN)
            .checked_next_multiple_of(DIRECT_IO_ALIGN)
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        let layout = std::alloc::Layout::from_size_align(len, DIRECT_IO_ALIGN)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SAFETY: the layout has a non-zero size.
        #[allow(unsafe_code)]
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = std::ptr::NonNull::new(ptr)
            .ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
        Ok(AlignedBuf { ptr, layout })
    }

    /// Its length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.layout.size()
    }

    /// Its bytes, to write.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` points to `layout.size()` initialised (zeroed)
        // bytes owned by `self`, borrowed mutably for the slice's life.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size())
        }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        #[allow(unsafe_code)]
        unsafe {
            std::alloc::dealloc(self.ptr.as_ptr(), self.layout)
        }
    }
}

impl RandomAccessFile for DirectRandom {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let align = DIRECT_IO_ALIGN as u64;
        if offset.is_multiple_of(align)
            && buf.len().is_multiple_of(DIRECT_IO_ALIGN)
            && (buf.as_ptr() as usize).is_multiple_of(DIRECT_IO_ALIGN)
        {
            // Already aligned (an [`AlignedBuf`] and an aligned range): the
            // device writes straight into `buf`, no bounce buffer, no copy.
            return loop {
                match self.file.read_at(buf, offset) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    r => break r,
                }
            };
        }
        let start = offset - offset % align;
        let end = offset
            .checked_add(buf.len() as u64)
            .and_then(|e| e.checked_next_multiple_of(align))
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        let mut aligned = AlignedBuf::new((end - start) as usize)?;
        let window = aligned.as_mut_slice();
        let mut got = 0usize;
        // Short reads happen at the end of the file; a read that returns
        // less than asked elsewhere is retried from where it stopped, on an
        // aligned boundary as `O_DIRECT` requires.
        while got < window.len() {
            match self.file.read_at(&mut window[got..], start + got as u64) {
                Ok(0) => break,
                Ok(n) => {
                    got += n;
                    if !got.is_multiple_of(DIRECT_IO_ALIGN) {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let skip = (offset - start) as usize;
        if got <= skip {
            return Ok(0);
        }
        let n = (got - skip).min(buf.len());
        buf[..n].copy_from_slice(&window[skip..skip + n]);
        Ok(n)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }
}

impl FileSystem for DirectReadFs {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        StdFs.create(path)
    }
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        StdFs.open_append(path)
    }
    fn reuse(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        StdFs.reuse(path)
    }
    fn open_mapped(&self, path: &Path, at: Option<u64>) -> io::Result<Box<dyn WritableFile>> {
        StdFs.open_mapped(path, at)
    }
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn RandomAccessFile>> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .map_err(|e| {
                if e.raw_os_error() == Some(libc::EINVAL) {
                    io::Error::new(
                        io::ErrorKind::Unsupported,
                        format!(
                            "{}: the file system does not support direct reads (O_DIRECT)",
                            path.display()
                        ),
                    )
                } else {
                    e
                }
            })?;
        Ok(Box::new(DirectRandom { file }))
    }
    fn exists(&self, path: &Path) -> bool {
        StdFs.exists(path)
    }
    fn is_dir(&self, path: &Path) -> bool {
        StdFs.is_dir(path)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        StdFs.list(dir)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        StdFs.remove(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        StdFs.rename(from, to)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        StdFs.create_dir_all(dir)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        StdFs.sync_dir(dir)
    }
    fn sync_file_system(&self, dir: &Path) -> io::Result<bool> {
        StdFs.sync_file_system(dir)
    }
    fn file_size(&self, path: &Path) -> io::Result<u64> {
        StdFs.file_size(path)
    }
    fn allocated_size(&self, path: &Path) -> io::Result<u64> {
        StdFs.allocated_size(path)
    }
    fn truncate_synced(&self, path: &Path, len: u64) -> io::Result<()> {
        StdFs.truncate_synced(path, len)
    }
    fn punch_hole(&self, path: &Path, offset: u64, len: u64) -> io::Result<()> {
        StdFs.punch_hole(path, offset, len)
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        StdFs.lock(path)
    }
    fn lock_shared(&self, path: &Path) -> io::Result<Option<Box<dyn FileLock>>> {
        StdFs.lock_shared(path)
    }
    fn link(&self, from: &Path, to: &Path) -> io::Result<()> {
        StdFs.link(from, to)
    }
    fn with_direct_reads(&self) -> io::Result<Arc<dyn FileSystem>> {
        Ok(Arc::new(DirectReadFs))
    }
}

/// `posix_fadvise` on an open file; a hint that fails changes nothing.
fn fadvise(file: &File, offset: u64, len: u64, advice: super::Advice) {
    use std::os::fd::AsRawFd;
    let adv = match advice {
        super::Advice::WillNeed => libc::POSIX_FADV_WILLNEED,
        super::Advice::Sequential => libc::POSIX_FADV_SEQUENTIAL,
        super::Advice::Random => libc::POSIX_FADV_RANDOM,
    };
    let (Ok(off), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return;
    };
    // SAFETY: `posix_fadvise` only reads its integer arguments; the file
    // descriptor is valid for the duration of the call. A hint that fails
    // changes nothing, so its result is ignored.
    #[allow(unsafe_code)]
    unsafe {
        libc::posix_fadvise(file.as_raw_fd(), off, len, adv);
    }
}

struct StdLock {
    _file: File,
}

impl FileLock for StdLock {}

impl FileSystem for StdFs {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        Ok(StdWritable::boxed(file, 0, false))
    }

    fn open_append(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let file = OpenOptions::new().append(true).open(path)?;
        let len = file.metadata()?.len();
        Ok(StdWritable::boxed(file, len, true))
    }

    fn open_mapped(&self, path: &Path, at: Option<u64>) -> io::Result<Box<dyn WritableFile>> {
        super::mapped_append::MappedWritable::open(path, at)
    }

    fn reuse(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        // Neither truncated nor appending: writes land from offset 0.
        let file = OpenOptions::new().write(true).open(path)?;
        Ok(StdWritable::boxed(file, 0, false))
    }

    fn open_read(&self, path: &Path) -> io::Result<Box<dyn RandomAccessFile>> {
        Ok(Box::new(StdRandom {
            file: File::open(path)?,
        }))
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            if let Some(n) = e.file_name().to_str() {
                out.push(n.to_string());
            }
        }
        out.sort();
        Ok(out)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    /// `syncfs(2)` on `dir`: the data, sizes and directory entries of
    /// every file of its file system (Linux reports writeback errors
    /// through it since 5.8).
    fn sync_file_system(&self, dir: &Path) -> io::Result<bool> {
        use std::os::unix::io::AsRawFd;
        let d = File::open(dir)?;
        // SAFETY: a plain system call on a descriptor that stays open for
        // its duration.
        #[allow(unsafe_code)]
        let r = unsafe { libc::syncfs(d.as_raw_fd()) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(true)
    }

    fn file_size(&self, path: &Path) -> io::Result<u64> {
        Ok(std::fs::metadata(path)?.len())
    }

    fn allocated_size(&self, path: &Path) -> io::Result<u64> {
        Ok(std::fs::metadata(path)?.blocks() * 512)
    }

    fn truncate_synced(&self, path: &Path, len: u64) -> io::Result<()> {
        let file = OpenOptions::new().write(true).open(path)?;
        if len > file.metadata()?.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{}: cannot truncate to {len} bytes, past its end",
                    path.display()
                ),
            ));
        }
        file.set_len(len)?;
        file.sync_all()
    }

    fn punch_hole(&self, path: &Path, offset: u64, len: u64) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        let file = OpenOptions::new().write(true).open(path)?;
        let (off, len) = (
            libc::off_t::try_from(offset)
                .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?,
            libc::off_t::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?,
        );
        // SAFETY: `fallocate` only reads its integer arguments; the file
        // descriptor is valid for the duration of the call.
        #[allow(unsafe_code)]
        let r = unsafe {
            libc::fallocate(
                file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                off,
                len,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    fn advise(&self, path: &Path, offset: u64, len: u64, advice: super::Advice) {
        if let Ok(file) = File::open(path) {
            fadvise(&file, offset, len, advice);
        }
    }

    fn with_direct_reads(&self) -> io::Result<Arc<dyn FileSystem>> {
        Ok(Arc::new(DirectReadFs))
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        match file.try_lock() {
            Ok(()) => Ok(Box::new(StdLock { _file: file })),
            Err(std::fs::TryLockError::WouldBlock) => Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "lock held by another process",
            )),
            Err(std::fs::TryLockError::Error(e)) => Err(e),
        }
    }

    fn lock_shared(&self, path: &Path) -> io::Result<Option<Box<dyn FileLock>>> {
        // Opened for reading only: works on a read-only mount and on a
        // full disk, and creates nothing.
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        match file.try_lock_shared() {
            Ok(()) => Ok(Some(Box::new(StdLock { _file: file }))),
            Err(std::fs::TryLockError::WouldBlock) => Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "lock held by a process that has the database open for writing",
            )),
            Err(std::fs::TryLockError::Error(e)) => Err(e),
        }
    }

    fn link(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::hard_link(from, to)
    }
}

/// Fewest and most read handles [`read_handle_budget`] gives.
const READ_HANDLES: std::ops::RangeInclusive<usize> = 1024..=16384;

/// Most read handles a store of many small files (FlashKey's bands,
/// KT-Store's TrieTables) keeps open: a quarter of the process's open-file
/// limit, at least 1024 and at most 16384. Past it, the handles of the
/// files read least are closed. A store whose files outnumber its handles
/// keeps closing and reopening them, and each reopen of a mapped file
/// costs an `open`, an `mmap` and page faults, and its close an `munmap`
/// whose TLB shootdown interrupts every core: a 1 GiB FlashKey store (1 MiB
/// bands) against a fixed 1024 handles, split by `quick_cache` into eight
/// shards of 128, read at half the rate it reads with every band open.
pub fn read_handle_budget() -> usize {
    let quarter = open_files_limit().map_or(usize::MAX, |n| (n / 4) as usize);
    quarter.clamp(*READ_HANDLES.start(), *READ_HANDLES.end())
}

/// The process's soft limit on open files (`RLIMIT_NOFILE`); `None` where
/// there is none to read, or it is unlimited.
pub fn open_files_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `getrlimit` writes one `rlimit` through a valid pointer.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) };
        if rc == 0 && r.rlim_cur != libc::RLIM_INFINITY {
            // `rlim_t` is `u64` here but not on every Unix.
            #[allow(clippy::unnecessary_cast)]
            return Some(r.rlim_cur as u64);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `append_flush` writes what `append` buffered first, then its own
    /// bytes, all handed to the OS, and counts them in the length.
    #[test]
    fn append_flush_keeps_order_and_length() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut f = StdFs.create(&path).unwrap();
        f.append(b"one,").unwrap();
        f.append_flush(b"two,").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"one,two,");
        f.append_flush(b"three").unwrap();
        assert_eq!(f.len(), 13);
        assert_eq!(std::fs::read(&path).unwrap(), b"one,two,three");
        let big = vec![7u8; 3 * WRITE_BUFFER];
        f.append_flush(&big).unwrap();
        assert_eq!(f.len(), 13 + big.len() as u64);
        assert_eq!(std::fs::read(&path).unwrap().len(), 13 + big.len());
    }

    /// Direct reads of aligned ranges into an [`AlignedBuf`] (read in
    /// place) and of unaligned ranges (through the bounce buffer) return
    /// the file's bytes, and a read past the end comes back short.
    #[test]
    fn direct_reads_aligned_in_place_and_unaligned() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..5 * DIRECT_IO_ALIGN + 100)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        std::fs::write(&path, &data).unwrap();
        let Ok(f) = DirectReadFs.open_read(&path) else {
            // No O_DIRECT here (tmpfs): nothing to check.
            return;
        };
        let a = DIRECT_IO_ALIGN;
        let mut buf = AlignedBuf::new(2 * a).unwrap();
        assert_eq!(buf.len(), 2 * a);
        let got = f.read_at(a as u64, buf.as_mut_slice()).unwrap();
        assert_eq!(got, 2 * a);
        assert_eq!(buf.as_mut_slice(), &data[a..3 * a]);
        // The last aligned unit holds 100 bytes of the file.
        let got = f.read_at(5 * a as u64, buf.as_mut_slice()).unwrap();
        assert_eq!(got, 100);
        assert_eq!(&buf.as_mut_slice()[..100], &data[5 * a..]);
        // Unaligned offset, length and buffer.
        let mut v = vec![0u8; 3000];
        f.read_exact_at(1234, &mut v[..2999]).unwrap();
        assert_eq!(&v[..2999], &data[1234..1234 + 2999]);
    }

    fn shared(path: &Path) -> Shared {
        Shared {
            file: OpenOptions::new()
                .create(true)
                .truncate(true)
                .read(true)
                .write(true)
                .open(path)
                .unwrap(),
            handed: AtomicU64::new(0),
            settled: AtomicU64::new(0),
        }
    }

    /// A write-back covers the whole pages from where the last stopped to
    /// the page holding the end, never that page; a sync then covers all.
    /// (Elsewhere than Linux a write-back does nothing.)
    #[cfg(target_os = "linux")]
    #[test]
    fn write_back_covers_the_settled_pages_and_a_sync_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let s = shared(&path);
        let page = WRITEBACK_ALIGN;
        let data: Vec<u8> = (0..3 * page + 100).map(|i| i as u8).collect();
        (&s.file).write_all(&data).unwrap();
        // Nothing handed yet as far as the handle knows: nothing to do.
        s.write_back_settled().unwrap();
        assert_eq!(s.settled.load(Ordering::Acquire), 0);
        s.handed.store(data.len() as u64, Ordering::Release);
        s.write_back_settled().unwrap();
        assert_eq!(s.settled.load(Ordering::Acquire), 3 * page);
        (&s.file).write_all(&data).unwrap();
        s.handed.store(2 * data.len() as u64, Ordering::Release);
        s.write_back_settled().unwrap();
        assert_eq!(s.settled.load(Ordering::Acquire), 6 * page);
        s.sync().unwrap();
        assert_eq!(s.settled.load(Ordering::Acquire), 2 * data.len() as u64);
        let mut back = vec![0u8; 2 * data.len()];
        s.file.read_exact_at(&mut back, 0).unwrap();
        assert_eq!(&back[..data.len()], &data[..]);
        assert_eq!(&back[data.len()..], &data[..]);
    }

    /// A sync settles everything handed, whether it wrote back first (at
    /// least [`SETTLE_BEFORE_SYNC`] outstanding) or not.
    #[test]
    fn a_sync_settles_everything_handed() {
        let dir = tempfile::tempdir().unwrap();
        let s = shared(&dir.path().join("f"));
        let small = vec![7u8; 5000];
        (&s.file).write_all(&small).unwrap();
        s.handed.store(5000, Ordering::Release);
        s.sync().unwrap();
        assert_eq!(s.settled.load(Ordering::Acquire), 5000);
        let big = vec![9u8; SETTLE_BEFORE_SYNC as usize + 10];
        (&s.file).write_all(&big).unwrap();
        let end = 5000 + big.len() as u64;
        s.handed.store(end, Ordering::Release);
        s.sync().unwrap();
        assert_eq!(s.settled.load(Ordering::Acquire), end);
    }
}
