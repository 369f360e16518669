//! Appends through a shared memory mapping ([`FileSystem::open_mapped`]
//! on [`super::StdFs`]): a file written by copying into its pages instead
//! of a `write(2)` per append.
//!
//! Why: a store that appends small records to many files at once (a
//! TrieTable per trie leaf) pays, per `write(2)`, the kernel's per-file
//! work on a file gone cold since its last write: looking up its page,
//! its inode's state and, nearly every time, a new modification time that
//! dirties and journals the inode. Through a mapping, an append is a copy
//! into memory; the kernel works once per few pages, not once per record.
//!
//! How, and what it promises:
//! - **Space before any copy.** The file's size is set ahead of the
//!   appends (`ftruncate(2)` to a larger size: a hole, no blocks), in
//!   steps doubling from [`GROW_MIN`] to [`GROW_MAX`] bytes, and every
//!   page is faulted in writable with `madvise(MADV_POPULATE_WRITE)`
//!   (Linux 5.14) *before* a copy touches it. That fault is where the
//!   file system reserves the page's block (ext4's delayed allocation;
//!   tmpfs allocates the page); a shared mapping's write fault that cannot
//!   reserve it would kill the process with `SIGBUS`, but through
//!   `MADV_POPULATE_WRITE` it is an error of the call, which the append
//!   returns (as `ENOSPC` when an `fallocate` of the range says so)
//!   before any byte is copied. A page once faulted in keeps its
//!   reservation until written back, and a page written back has its
//!   block, so no later fault of it allocates. A kernel without the call
//!   refuses the open (`Unsupported`); callers then write with system
//!   calls. (Preallocating with `fallocate` instead allocates real blocks
//!   ahead, which the database's size counts and which a file system
//!   mounted with `discard` discards one extent at a time when the
//!   writer cuts them or the file is deleted: a 256 MiB load left its
//!   process waiting for 5,300 discards.)
//! - **A process crash keeps every appended byte.** A shared mapping's
//!   pages are the page cache's: once the copy returns, the bytes are the
//!   kernel's, as after a `write(2)`, and survive the process. What the
//!   file holds past the last append reads as zeros, and its size is the
//!   grown one until the writer is dropped (then it is cut to the
//!   appended length). So after a crash the file may end in zeros; readers
//!   of such a file stop at the first all-zero record header
//!   ([`crate::format::value_record::DecodeError::Zero`]) and the owner
//!   cuts the zeros on recovery. An append killed half-way leaves a partial
//!   record before the zeros, which its checksum rejects.
//! - **Durability** is unchanged: [`WritableFile::sync`] and the
//!   [`super::SyncHandle`] are `fdatasync`, which writes the pages the
//!   mapping dirtied (a shared mapping's writes mark their pages dirty in
//!   the page cache, and a page written back is write-protected again, so
//!   the next copy into it dirties it anew); a file-system sync (`syncfs`)
//!   covers them too.
//! - **Mapping window.** At most [`WINDOW`] bytes of the file are mapped
//!   at a time, aligned to [`WINDOW`]; an append past the window maps the
//!   next one (a record across the boundary is copied in two parts).
//!   Pages are faulted in up to [`POPULATE_AHEAD`] past each copy: one
//!   call for a few pages instead of a fault per page. Not further: a page
//!   faulted in writable is dirty, so a writeback (a sync) before the
//!   copies reach it writes its zeros, and the copies dirty it again —
//!   faulting in whole 256 KiB steps at once made the process dirty 1.43
//!   bytes per byte appended (1,060-byte records into 200 files, a
//!   file-system sync every 64 MiB), 16 KiB ahead 1.04, for less CPU
//!   (1.19–1.27 against 1.30–1.32 µs a record; a `write(2)` each:
//!   1.66–1.69 µs, 1.01).
//! - **Large appends are written.** An append of [`COPY_BELOW`] bytes or
//!   more is written with `pwrite(2)` at the end instead (the same page
//!   cache, so readers and the mapping see one file): the kernel's copy
//!   into its (large) folios costs less per page than a fault per 4 KiB
//!   page of a mapping, and the per-file cost of one system call is small
//!   beside a copy that long. Measured (200 files, records appended in
//!   random file order, `ftruncate`d ahead, user + system CPU per record):
//!   2,060-byte records 2.95 µs through the mapping against 3.01 µs
//!   written, 4,120-byte ones 6.13 against 4.97, 16,400-byte ones 24.2
//!   against 14.4; 1,060-byte ones 1.3–1.4 against 1.7.
//! - **Failure modes.** The mapping is never truncated under itself: the
//!   writer cuts its file only after unmapping it, and no other part of
//!   sepkv truncates a file open for appending. As with every mapped file
//!   ([`super::Mapping`]), a page that must be read back from the device
//!   (one written back and evicted before the next copy into it) turns a
//!   device read error into `SIGBUS` rather than an `EIO`: the exposure
//!   `Options::mmap_reads` already has. A store that must not take it
//!   turns mapped appends off.
//!
//! Thread-safety: a writer is used by one thread at a time (`&mut self`),
//! its sync handles from any thread.

use super::std_fs::{sync_file_range, Shared};
use super::{SyncHandle, WritableFile};
use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Bytes of the file mapped at a time (a multiple of the page size).
pub const WINDOW: u64 = 4 << 20;

/// First step by which the file's size runs ahead of its end (bytes).
pub const GROW_MIN: u64 = 64 << 10;

/// Largest step by which the file's size runs ahead of its end (bytes).
/// The bytes ahead are a hole: they take no space until faulted in.
pub const GROW_MAX: u64 = 1 << 20;

/// Bytes past the end of a copy up to which pages are faulted in
/// writable ahead of the next copies (see the module docs).
pub const POPULATE_AHEAD: u64 = 16 << 10;

/// Appends at least this long (bytes) are written with `pwrite(2)`, not
/// copied through the mapping (see the module docs).
pub const COPY_BELOW: usize = 4096;

/// Bytes handed to the OS after which writeback of the pages behind them
/// is started (as [`super::StdFs`]'s writer does, so a later sync finds
/// little left), and how far behind the end it stays.
const WRITEBACK_EVERY: u64 = 1 << 20;
const WRITEBACK_LAG: u64 = 1 << 20;

/// A file appended to through a shared mapping; see the module docs.
pub(super) struct MappedWritable {
    shared: Arc<Shared>,
    /// The mapped window, `map_start..map_start + WINDOW` of the file.
    map: Option<memmap2::MmapMut>,
    map_start: u64,
    /// Bytes appended (the logical end).
    len: u64,
    /// Pages of the window below this offset are faulted in writable.
    populated: u64,
    /// The file's size, run ahead of `len`.
    allocated: u64,
    /// Offset up to which writeback was started.
    hinted: u64,
}

impl MappedWritable {
    /// Opens `path`: a new file (truncating one that exists) for `at ==
    /// None`, else the existing file appended at `at`, whatever follows
    /// `at` cut off. Grows the size by the first step, maps the window
    /// that holds the end and faults in the page holding it.
    ///
    /// # Errors
    /// The OS error of the open, the cut, the size change, the mapping or
    /// the fault; `Unsupported` when the kernel has no
    /// `MADV_POPULATE_WRITE`. On an error the file holds exactly its first
    /// `at` bytes (none for a new file).
    pub(super) fn open(path: &Path, at: Option<u64>) -> io::Result<Box<dyn WritableFile>> {
        let mut o = OpenOptions::new();
        o.read(true).write(true);
        let file = match at {
            None => o.create(true).truncate(true).open(path)?,
            Some(_) => o.open(path)?,
        };
        let len = at.unwrap_or(0);
        let size = file.metadata()?.len();
        if size < len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: {size} bytes, cannot append at {len}", path.display()),
            ));
        }
        if size > len {
            file.set_len(len)?;
        }
        let mut w = MappedWritable {
            shared: Arc::new(Shared::new(file, len)),
            map: None,
            map_start: 0,
            len,
            populated: len,
            allocated: len,
            hinted: len,
        };
        // The first page is faulted in now, so that a kernel without the
        // call is found here, where the caller can still fall back.
        let probe = len + 1;
        if let Err(e) = w
            .reserve(probe)
            .and_then(|()| w.remap(len))
            .and_then(|()| w.populate(probe))
        {
            w.map = None;
            let _ = w.file().set_len(len);
            w.allocated = len;
            return Err(if e.raw_os_error() == Some(libc::EINVAL) {
                io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!(
                        "{}: no MADV_POPULATE_WRITE for mapped appends",
                        path.display()
                    ),
                )
            } else {
                e
            });
        }
        Ok(Box::new(w))
    }

    fn file(&self) -> &File {
        &self.shared.file
    }

    /// Grows the file's size (a hole) to at least `end`: a step past it,
    /// on a page boundary, the step the bytes appended so far between
    /// [`GROW_MIN`] and [`GROW_MAX`].
    fn reserve(&mut self, end: u64) -> io::Result<()> {
        if end <= self.allocated {
            return Ok(());
        }
        let step = self.len.clamp(GROW_MIN, GROW_MAX);
        let size = end
            .max(self.allocated + step)
            .next_multiple_of(super::PAGE_SIZE);
        self.file().set_len(size)?;
        self.allocated = size;
        Ok(())
    }

    /// Faults in writable the pages from the populated mark up to
    /// [`POPULATE_AHEAD`] past `end`, within the window and the file's
    /// size, when `end` passes the mark. The pages up to `end` in the
    /// window are faulted in when this returns `Ok`.
    ///
    /// # Errors
    /// `ENOSPC` when the file system has no space for a page (the fault
    /// failed and an `fallocate` of the range says so), else the call's
    /// error (`EFAULT` for a fault that failed otherwise, `EINVAL` where
    /// the kernel lacks the call).
    fn populate(&mut self, end: u64) -> io::Result<()> {
        let Some(map) = &self.map else {
            return Err(io::Error::other("table file not mapped"));
        };
        if end <= self.populated {
            return Ok(());
        }
        let page = super::PAGE_SIZE;
        let lo = self.populated.max(self.map_start) / page * page;
        let hi = (end + POPULATE_AHEAD)
            .next_multiple_of(page)
            .min(self.allocated)
            .min(self.map_start + map.len() as u64);
        if hi > lo {
            if let Err(e) = map.advise_range(
                memmap2::Advice::PopulateWrite,
                (lo - self.map_start) as usize,
                (hi - lo) as usize,
            ) {
                // The fault's own reason is lost (it reads as EFAULT):
                // ask the file system whether it is space.
                if e.raw_os_error() == Some(libc::EFAULT) {
                    if let Err(f) = fallocate_keep_size(self.file(), lo, hi - lo) {
                        if f.raw_os_error() == Some(libc::ENOSPC) {
                            return Err(f);
                        }
                    }
                }
                return Err(e);
            }
        }
        self.populated = hi.max(self.populated);
        Ok(())
    }

    /// Maps the window holding offset `pos`.
    fn remap(&mut self, pos: u64) -> io::Result<()> {
        self.map = None;
        let start = pos / WINDOW * WINDOW;
        // SAFETY: a shared, writable mapping of a file this writer owns.
        // Only pages below `allocated` (the file's size) are touched, and
        // only after `populate` faulted them in writable (so a failed
        // fault is an error of that call, not a signal); the file is cut
        // only after the mapping is dropped (`cut`), and no other part of
        // sepkv truncates a file open for appending. Another program
        // truncating it would make a copy into the lost pages fault, as
        // `super::Mapping` documents for reads.
        #[allow(unsafe_code)]
        let map = unsafe {
            memmap2::MmapOptions::new()
                .offset(start)
                .len(WINDOW as usize)
                .map_mut(self.file())?
        };
        self.map = Some(map);
        self.map_start = start;
        self.populated = pos;
        Ok(())
    }

    /// Unmaps, and cuts the file at its appended end. A failed cut leaves
    /// zeros that the owner's recovery cuts.
    fn cut(&mut self) {
        self.map = None;
        if self.allocated > self.len && self.file().set_len(self.len).is_ok() {
            self.allocated = self.len;
        }
    }

    /// Starts writeback of the whole pages at least [`WRITEBACK_LAG`]
    /// behind the end, every [`WRITEBACK_EVERY`] bytes (a hint).
    fn start_writeback(&mut self) {
        let end = self.len.saturating_sub(WRITEBACK_LAG) / super::PAGE_SIZE * super::PAGE_SIZE;
        if end < self.hinted + WRITEBACK_EVERY {
            return;
        }
        let _ = sync_file_range(self.file(), self.hinted, end, false);
        self.hinted = end;
    }

    /// Copies `data` to the end; on an error nothing is appended (the
    /// length stays, and bytes copied past it are overwritten by the next
    /// append).
    fn copy_in(&mut self, data: &[u8]) -> io::Result<()> {
        let end = self.len + data.len() as u64;
        self.reserve(end)?;
        if data.len() >= COPY_BELOW {
            std::os::unix::fs::FileExt::write_all_at(self.file(), data, self.len)?;
            // The pages written hold data now; the next copies fault in
            // from the page holding the end on.
            let page = super::PAGE_SIZE;
            self.populated = self.populated.max(end / page * page);
            self.len = end;
            self.shared.handed.store(end, Ordering::Release);
            self.start_writeback();
            return Ok(());
        }
        let mut pos = self.len;
        let mut rest = data;
        while !rest.is_empty() {
            if self.map.is_none() || pos < self.map_start || pos >= self.map_start + WINDOW {
                self.remap(pos)?;
            }
            // Every page the copy touches is faulted in first.
            self.populate(end)?;
            let Some(map) = &mut self.map else {
                return Err(io::Error::other("table file not mapped"));
            };
            let off = (pos - self.map_start) as usize;
            let n = rest.len().min(map.len() - off);
            map[off..off + n].copy_from_slice(&rest[..n]);
            pos += n as u64;
            rest = &rest[n..];
        }
        self.len = end;
        self.shared.handed.store(end, Ordering::Release);
        self.start_writeback();
        Ok(())
    }
}

impl WritableFile for MappedWritable {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.copy_in(data)
    }

    fn flush(&mut self) -> io::Result<()> {
        // Every copy is the kernel's already.
        Ok(())
    }

    fn append_flush(&mut self, data: &[u8]) -> io::Result<()> {
        self.copy_in(data)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.shared.sync()
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn sync_handle(&self) -> Option<Box<dyn SyncHandle>> {
        Some(super::std_fs::sync_handle(&self.shared))
    }
}

impl Drop for MappedWritable {
    fn drop(&mut self) {
        self.cut();
    }
}

/// `fallocate(2)` with `FALLOC_FL_KEEP_SIZE` of `len` bytes at `offset`:
/// asks the file system for the blocks, which answers `ENOSPC` when it has
/// none.
fn fallocate_keep_size(file: &File, offset: u64, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let (Ok(off), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    };
    // SAFETY: `fallocate` only reads its integer arguments; the file
    // descriptor is valid for the duration of the call.
    #[allow(unsafe_code)]
    let r = unsafe { libc::fallocate(file.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, off, len) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{FileSystem, StdFs};

    /// Bytes `i` of a test stream.
    fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    /// Appends of every size, one across the mapping window's end, read
    /// back equal through the file; the file is longer (preallocated)
    /// while the writer lives and cut to the appended length when it is
    /// dropped; a reopen at that length appends after it.
    #[test]
    fn mapped_bytes_equal_the_appended_bytes_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        let mut want = Vec::new();
        {
            let mut f = StdFs.open_mapped(&path, None).unwrap();
            let mut seed = 0u8;
            for n in [1usize, 26, 1060, 4096, 70_000, 300_000] {
                let b = pattern(n, seed);
                f.append_flush(&b).unwrap();
                want.extend_from_slice(&b);
                seed = seed.wrapping_add(1);
            }
            // Up to just below the window's end (written), then across it
            // (copied in two parts), then small appends in the next window.
            let b = pattern(WINDOW as usize - 1000 - want.len(), 7);
            f.append(&b).unwrap();
            want.extend_from_slice(&b);
            for (n, seed) in [(3000usize, 9u8), (500, 10), (4095, 11)] {
                let b = pattern(n, seed);
                f.append_flush(&b).unwrap();
                want.extend_from_slice(&b);
            }
            assert_eq!(f.len(), want.len() as u64);
            // The preallocation runs ahead; readers see the bytes at once.
            assert!(std::fs::metadata(&path).unwrap().len() > want.len() as u64);
            let got = std::fs::read(&path).unwrap();
            assert_eq!(&got[..want.len()], &want[..]);
            assert!(got[want.len()..].iter().all(|&b| b == 0));
            f.sync().unwrap();
            let h = f.sync_handle().unwrap();
            h.sync().unwrap();
        }
        assert_eq!(
            std::fs::read(&path).unwrap(),
            want,
            "cut at the end on drop"
        );
        {
            let mut f = StdFs.open_mapped(&path, Some(want.len() as u64)).unwrap();
            assert_eq!(f.len(), want.len() as u64);
            let b = pattern(3333, 11);
            f.append_flush(&b).unwrap();
            want.extend_from_slice(&b);
        }
        assert_eq!(std::fs::read(&path).unwrap(), want);
    }

    /// A writer that never runs its drop (a killed process) leaves the
    /// appended bytes followed by the preallocated zeros; a reopen at the
    /// appended length cuts the zeros and continues there. A reopen past
    /// the file's end is refused, the file untouched.
    #[test]
    fn a_lost_writer_leaves_its_bytes_then_zeros() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        let b = pattern(10_000, 3);
        let mut f = StdFs.open_mapped(&path, None).unwrap();
        f.append_flush(&b).unwrap();
        std::mem::forget(f);
        let got = std::fs::read(&path).unwrap();
        assert!(got.len() >= b.len() + 4096, "{}", got.len());
        assert_eq!(&got[..b.len()], &b[..]);
        assert!(got[b.len()..].iter().all(|&x| x == 0));
        assert!(StdFs
            .open_mapped(&path, Some(got.len() as u64 + 1))
            .is_err());
        assert_eq!(std::fs::read(&path).unwrap().len(), got.len());
        let mut f = StdFs.open_mapped(&path, Some(b.len() as u64)).unwrap();
        f.append_flush(b"tail").unwrap();
        drop(f);
        let got = std::fs::read(&path).unwrap();
        assert_eq!(got.len(), b.len() + 4);
        assert_eq!(&got[b.len()..], b"tail");
    }

    /// File systems without mappings refuse, so callers write with
    /// system calls.
    #[test]
    fn in_memory_file_systems_refuse() {
        let fs = crate::fs::MemFs::new();
        let e = fs
            .open_mapped(std::path::Path::new("/x"), None)
            .err()
            .unwrap();
        assert_eq!(e.kind(), io::ErrorKind::Unsupported);
    }
}
