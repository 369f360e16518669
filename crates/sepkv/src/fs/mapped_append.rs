//! Appends through a shared memory mapping ([`FileSystem::open_mapped`]
//! on [`super::StdFs`]): a file written by copying into its pages instead
//! of a `write(2)` per append.
//!
//! Why: a store that appends small records to many files at once (a
//! TrieTable per trie leaf) pays, per `write(2)`, the kernel's per-file
//! work on a file gone cold since its last write: looking up its page,
//! its inode's state and, nearly every time, a new modification time that
//! dirties and journals the inode. Through a mapping, an append is a copy
//! into memory; the kernel works once per page (the first write to a page
//! faults) or once per preallocated extent, not once per record.
//!
//! How, and what it promises:
//! - **Space first.** The file is grown ahead of the appends with
//!   `fallocate(2)` (mode 0: blocks allocated and the size extended), in
//!   steps doubling from [`GROW_MIN`] to [`GROW_MAX`] bytes. A full disk is
//!   thus an `ENOSPC` error of the append that needs the space, returned
//!   before any byte is copied, never a `SIGBUS` at a page fault. A file
//!   system without `fallocate` refuses the open (`Unsupported`); callers
//!   then write with system calls.
//! - **A process crash keeps every appended byte.** A shared mapping's
//!   pages are the page cache's: once the copy returns, the bytes are the
//!   kernel's, as after a `write(2)`, and survive the process. What the
//!   file holds past the last append reads as zeros, and its size is the
//!   preallocated one until the writer is dropped (then it is cut to the
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
//!   Pages are faulted in writable a little ahead of the copies
//!   ([`POPULATE_AHEAD`]) with `madvise(MADV_POPULATE_WRITE)` where the
//!   kernel has it (Linux 5.14): one call for a few pages instead of a
//!   fault per page. Not further: a page faulted in writable is dirty, so
//!   a writeback (a sync) before the copies reach it writes its zeros, and
//!   the copies dirty it again — populating a whole 256 KiB step at once
//!   made the process dirty 1.43 bytes per byte appended (1,060-byte
//!   records into 200 files, a file-system sync every 64 MiB), 16 KiB
//!   ahead 1.04, for less CPU (1.19–1.27 against 1.30–1.32 µs a record;
//!   a `write(2)` each: 1.66–1.69 µs, 1.01).
//! - **Failure modes.** The mapping is never truncated under itself: the
//!   writer cuts its file only after unmapping it, and no other part of
//!   sepkv truncates a file open for appending. As with every mapped file
//!   ([`super::Mapping`]), a page that must be read back from the device
//!   (the page holding the end of a reopened file, or one written back and
//!   evicted before the next copy into it) turns a device read error into
//!   `SIGBUS` rather than an `EIO`: the exposure `Options::mmap_reads`
//!   already has. A store that must not take it turns mapped appends off.
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

/// First preallocation step (bytes): a file that takes a few records
/// reserves little.
pub const GROW_MIN: u64 = 64 << 10;

/// Largest preallocation step (bytes): bounds what a file holds past its
/// appended end (at most this, rounded up to a page, plus the last step's
/// rounding).
pub const GROW_MAX: u64 = 256 << 10;

/// Bytes past the end of a copy up to which pages are faulted in
/// writable ahead of the next copies (see the module docs).
pub const POPULATE_AHEAD: u64 = 16 << 10;

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
    /// The file's size: preallocated up to here.
    allocated: u64,
    /// Offset up to which writeback was started.
    hinted: u64,
}

impl MappedWritable {
    /// Opens `path`: a new file (truncating one that exists) for `at ==
    /// None`, else the existing file appended at `at`, whatever follows
    /// `at` cut off. Preallocates the first step and maps the window that
    /// holds the end.
    ///
    /// # Errors
    /// The OS error of the open, the cut, the preallocation or the
    /// mapping; `Unsupported` when the file system has no `fallocate`.
    /// On an error the file holds exactly its first `at` bytes (none for a
    /// new file).
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
        let grow = w.grow_step();
        if let Err(e) = w.reserve(len + grow).and_then(|()| w.remap(len)) {
            // Whatever a partial preallocation added goes (a failed cut
            // leaves zeros, which the owner's recovery cuts).
            w.map = None;
            let _ = w.file().set_len(len);
            w.allocated = len;
            return Err(if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
                io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!("{}: no fallocate for mapped appends", path.display()),
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

    /// The next preallocation step: the bytes appended so far, between
    /// [`GROW_MIN`] and [`GROW_MAX`].
    fn grow_step(&self) -> u64 {
        self.len.clamp(GROW_MIN, GROW_MAX)
    }

    /// Preallocates the file up to at least `end` (a step past it, on a
    /// page boundary). When the step does not fit, exactly what `end`
    /// needs is tried.
    fn reserve(&mut self, end: u64) -> io::Result<()> {
        if end <= self.allocated {
            return Ok(());
        }
        let page = super::PAGE_SIZE;
        let step = (end.max(self.allocated + self.grow_step())).next_multiple_of(page);
        let tight = end.next_multiple_of(page);
        let from = self.allocated;
        if let Err(e) = fallocate(self.file(), from, step - from) {
            if tight >= step || e.raw_os_error() != Some(libc::ENOSPC) {
                return Err(e);
            }
            fallocate(self.file(), from, tight - from)?;
            self.allocated = tight;
        } else {
            self.allocated = step;
        }
        Ok(())
    }

    /// Faults in writable the pages from the populated mark up to
    /// [`POPULATE_AHEAD`] past `end`, within the window and the
    /// preallocation, when `end` passes the mark (a hint: where the kernel
    /// has no `MADV_POPULATE_WRITE` or the call fails, the copies fault
    /// the pages in one by one).
    fn populate(&mut self, end: u64) {
        let Some(map) = &self.map else { return };
        if end <= self.populated {
            return;
        }
        let page = super::PAGE_SIZE;
        let lo = self.populated.max(self.map_start) / page * page;
        let hi = (end + POPULATE_AHEAD)
            .next_multiple_of(page)
            .min(self.allocated)
            .min(self.map_start + map.len() as u64);
        if hi > lo {
            let _ = map.advise_range(
                memmap2::Advice::PopulateWrite,
                (lo - self.map_start) as usize,
                (hi - lo) as usize,
            );
        }
        self.populated = hi.max(self.populated);
    }

    /// Maps the window holding offset `pos`.
    fn remap(&mut self, pos: u64) -> io::Result<()> {
        self.map = None;
        let start = pos / WINDOW * WINDOW;
        // SAFETY: a shared, writable mapping of a file this writer owns.
        // Only bytes below `allocated` (the preallocated size) are ever
        // touched, so no access lands past the file's end while it is
        // mapped; the file is cut only after the mapping is dropped
        // (`cut`), and no other part of sepkv truncates a file open for
        // appending. Another program truncating it would make a copy into
        // the lost pages fault, as `super::Mapping` documents for reads.
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

    /// Unmaps, and cuts the file at its appended end (the preallocated
    /// zeros after it go). A failed cut leaves zeros that the owner's
    /// recovery cuts.
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
        let mut pos = self.len;
        let mut rest = data;
        while !rest.is_empty() {
            if self.map.is_none() || pos < self.map_start || pos >= self.map_start + WINDOW {
                self.remap(pos)?;
            }
            self.populate(end);
            let Some(map) = &mut self.map else {
                return Err(io::Error::other("mapping missing after remap"));
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

/// `fallocate(2)` mode 0 of `len` bytes at `offset`: blocks allocated and
/// the size extended.
fn fallocate(file: &File, offset: u64, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let (Ok(off), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    };
    loop {
        // SAFETY: `fallocate` only reads its integer arguments; the file
        // descriptor is valid for the duration of the call.
        #[allow(unsafe_code)]
        let r = unsafe { libc::fallocate(file.as_raw_fd(), 0, off, len) };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
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
            // Up to just below the window's end, then across it.
            let b = pattern(WINDOW as usize - 1000 - want.len(), 7);
            f.append(&b).unwrap();
            want.extend_from_slice(&b);
            let b = pattern(5000, 9);
            f.append_flush(&b).unwrap();
            want.extend_from_slice(&b);
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
