//! [`FileSystem`] over the operating system's files.

use super::{FileLock, FileSystem, RandomAccessFile, WritableFile};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

/// Size of the user-space write buffer of a [`WritableFile`] (bytes).
const WRITE_BUFFER: usize = 64 * 1024;

/// The operating system's file system. Zero-sized; clone freely.
#[derive(Debug, Default, Clone, Copy)]
pub struct StdFs;

struct StdWritable {
    file: File,
    buf: Vec<u8>,
    len: u64,
}

impl WritableFile for StdWritable {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.len += data.len() as u64;
        if self.buf.len() + data.len() > WRITE_BUFFER {
            self.flush()?;
            if data.len() >= WRITE_BUFFER {
                return self.file.write_all(data);
            }
        }
        self.buf.extend_from_slice(data);
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            let r = self.file.write_all(&self.buf);
            self.buf.clear();
            r?;
        }
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.flush()?;
        self.file.sync_data()
    }

    fn len(&self) -> u64 {
        self.len
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
        Ok(Box::new(StdWritable {
            file,
            buf: Vec::with_capacity(WRITE_BUFFER),
            len: 0,
        }))
    }

    fn open_append(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let file = OpenOptions::new().append(true).open(path)?;
        let len = file.metadata()?.len();
        Ok(Box::new(StdWritable {
            file,
            buf: Vec::with_capacity(WRITE_BUFFER),
            len,
        }))
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

    fn file_size(&self, path: &Path) -> io::Result<u64> {
        Ok(std::fs::metadata(path)?.len())
    }

    fn allocated_size(&self, path: &Path) -> io::Result<u64> {
        Ok(std::fs::metadata(path)?.blocks() * 512)
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
}
