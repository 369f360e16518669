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
