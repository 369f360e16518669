//! Checksummed record framing for append-only logs (write-ahead log,
//! manifest).
//!
//! ```text
//! record := header payload
//! header := len:u32le  payload_crc:u32le  header_crc:u32le      (12 bytes)
//!   len          payload length in bytes
//!   payload_crc  masked CRC-32C of the payload
//!   header_crc   masked CRC-32C of the first 8 header bytes
//! ```
//! Frozen: format version 1. Do not change without bumping the format
//! version recorded in the database.
//!
//! The separate header checksum lets the reader tell a torn tail from damage:
//! - fewer than 12 bytes left, a header whose length runs past the end of the
//!   file, or a run of zero bytes to the end of the file: a **torn tail** —
//!   a write that the crash interrupted; reading stops cleanly there;
//! - a payload whose checksum fails and which is followed by nothing but
//!   zero bytes up to the end of the file: also a torn tail (the last write
//!   was only partly persisted); likewise a header whose checksum fails when
//!   only zero bytes follow it. Zero bytes past the last record are what a
//!   preallocated log ([`WritableFile::preallocate`]) holds, and what a
//!   crash leaves where a write did not reach the disk;
//! - any other checksum failure: **corruption**, reported with file and
//!   offset, because valid data follows it and dropping it silently would
//!   lose acknowledged writes.

use super::checksum::{crc, mask, unmask};
use crate::error::{Error, IoContext, Result};
use crate::fs::{IoCategory, IoStats, SyncHandle, WritableFile};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Bytes of a record header.
pub const HEADER_LEN: usize = 12;
/// Largest payload a record may carry (bytes).
pub const MAX_PAYLOAD: usize = 1 << 30;

/// Frames `payload` as one record appended to `dst`.
pub fn encode_record(dst: &mut Vec<u8>, payload: &[u8]) {
    let mut head = [0u8; 8];
    head[..4].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    head[4..].copy_from_slice(&mask(crc(payload)).to_le_bytes());
    dst.extend_from_slice(&head);
    dst.extend_from_slice(&mask(crc(&head)).to_le_bytes());
    dst.extend_from_slice(payload);
}

/// A sync of a [`RecordWriter`]'s records handed to the OS so far, run
/// without the writer ([`RecordWriter::start_sync`]).
pub struct PendingSync {
    handle: Box<dyn SyncHandle>,
    path: PathBuf,
}

impl PendingSync {
    /// Makes the records durable.
    ///
    /// # Errors
    /// `Io` naming the file; the writer must then be treated as failed
    /// (retrying an fsync after a failure is unsafe).
    pub fn sync(&self) -> Result<()> {
        self.handle.sync().ctx(&self.path)
    }
}

/// Appends records to a file, counting bytes under one [`IoCategory`].
pub struct RecordWriter {
    file: Box<dyn WritableFile>,
    path: PathBuf,
    stats: Arc<IoStats>,
    category: IoCategory,
    scratch: Vec<u8>,
}

impl RecordWriter {
    /// Wraps `file` (positioned at its end).
    pub fn new(
        file: Box<dyn WritableFile>,
        path: PathBuf,
        stats: Arc<IoStats>,
        category: IoCategory,
    ) -> Self {
        RecordWriter {
            file,
            path,
            stats,
            category,
            scratch: Vec::new(),
        }
    }

    /// Appends one record; returns the file offset where it starts.
    ///
    /// # Errors
    /// `InvalidArgument` for a payload over [`MAX_PAYLOAD`]; `Io` on failure.
    pub fn add_record(&mut self, payload: &[u8]) -> Result<u64> {
        if payload.len() > MAX_PAYLOAD {
            return Err(Error::InvalidArgument(format!(
                "record of {} bytes exceeds the {} byte limit",
                payload.len(),
                MAX_PAYLOAD
            )));
        }
        let offset = self.file.len();
        self.scratch.clear();
        encode_record(&mut self.scratch, payload);
        self.file.append(&self.scratch).ctx(&self.path)?;
        self.stats
            .add_written(self.category, self.scratch.len() as u64);
        Ok(offset)
    }

    /// Hands buffered records to the OS (they then survive a process crash).
    pub fn flush(&mut self) -> Result<()> {
        self.file.flush().ctx(&self.path)
    }

    /// Makes all appended records durable.
    pub fn sync(&mut self) -> Result<()> {
        self.file.sync().ctx(&self.path)
    }

    /// Hands buffered records to the OS and returns what makes them
    /// durable without this writer: the caller syncs through it after
    /// letting go of the lock that guards the writer, so appends go on
    /// meanwhile. `None` when the file offers no such handle: call
    /// [`RecordWriter::sync`] then.
    ///
    /// # Errors
    /// `Io` if the flush fails.
    pub fn start_sync(&mut self) -> Result<Option<PendingSync>> {
        self.flush()?;
        Ok(self.file.sync_handle().map(|handle| PendingSync {
            handle,
            path: self.path.clone(),
        }))
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.file.len()
    }

    /// True when nothing was written.
    pub fn is_empty(&self) -> bool {
        self.file.len() == 0
    }

    /// Path of the file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// True when every byte of `b` is zero (true for an empty slice).
fn all_zero(b: &[u8]) -> bool {
    b.iter().all(|&x| x == 0)
}

/// How a log ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogEnd {
    /// Every byte belonged to a complete, valid record.
    Clean,
    /// A torn write starts at this offset; the bytes from here on are not
    /// part of the log.
    Torn(u64),
}

/// Reads the records of an in-memory copy of a log.
pub struct RecordReader<'a> {
    data: &'a [u8],
    pos: usize,
    file: &'a Path,
    end: Option<LogEnd>,
}

impl<'a> RecordReader<'a> {
    /// Reads `data`, the contents of `file` (used in error messages).
    pub fn new(data: &'a [u8], file: &'a Path) -> Self {
        RecordReader {
            data,
            pos: 0,
            file,
            end: None,
        }
    }

    /// How the log ended; `None` until [`Self::next_record`] returned `None`.
    pub fn end(&self) -> Option<LogEnd> {
        self.end
    }

    /// True when the log ended torn and every byte from the torn offset to
    /// the end of the file is zero: the unused tail of a preallocated log,
    /// or a write of which nothing persisted. No record was cut there.
    pub fn zero_tail(&self) -> bool {
        match self.end {
            Some(LogEnd::Torn(off)) => all_zero(&self.data[off as usize..]),
            _ => false,
        }
    }

    /// Returns the next record as `(offset, payload)`, `None` at the end of
    /// the log (clean or torn, see [`Self::end`]).
    ///
    /// # Errors
    /// `Corruption` with the record's offset for damage that is not a torn
    /// tail (see the module docs).
    pub fn next_record(&mut self) -> Result<Option<(u64, &'a [u8])>> {
        if self.end.is_some() {
            return Ok(None);
        }
        let start = self.pos;
        let rest = &self.data[start..];
        if rest.is_empty() {
            self.end = Some(LogEnd::Clean);
            return Ok(None);
        }
        let torn = |me: &mut Self| {
            me.end = Some(LogEnd::Torn(start as u64));
            Ok(None)
        };
        if rest.len() < HEADER_LEN || all_zero(rest) {
            return torn(self);
        }
        let len = u32::from_le_bytes(rest[0..4].try_into().expect("4 bytes")) as usize;
        let pcrc = unmask(u32::from_le_bytes(rest[4..8].try_into().expect("4 bytes")));
        let hcrc = unmask(u32::from_le_bytes(rest[8..12].try_into().expect("4 bytes")));
        if crc(&rest[..8]) != hcrc {
            if all_zero(&rest[HEADER_LEN..]) {
                return torn(self);
            }
            return Err(Error::corruption(
                self.file,
                start as u64,
                "record header checksum mismatch",
            ));
        }
        if rest.len() - HEADER_LEN < len {
            return torn(self);
        }
        let payload = &rest[HEADER_LEN..HEADER_LEN + len];
        if crc(payload) != pcrc {
            if all_zero(&rest[HEADER_LEN + len..]) {
                return torn(self);
            }
            return Err(Error::corruption(
                self.file,
                start as u64,
                "record payload checksum mismatch",
            ));
        }
        self.pos = start + HEADER_LEN + len;
        Ok(Some((start as u64, payload)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(records: &[&[u8]]) -> Vec<u8> {
        let mut v = Vec::new();
        for r in records {
            encode_record(&mut v, r);
        }
        v
    }

    fn read_all(data: &[u8]) -> (Result<Vec<Vec<u8>>>, Option<LogEnd>) {
        let p = Path::new("LOG");
        let mut r = RecordReader::new(data, p);
        let mut out = Vec::new();
        loop {
            match r.next_record() {
                Ok(Some((_, rec))) => out.push(rec.to_vec()),
                Ok(None) => return (Ok(out), r.end()),
                Err(e) => return (Err(e), r.end()),
            }
        }
    }

    #[test]
    fn roundtrip() {
        let data = log(&[b"a", b"", b"hello world"]);
        let (recs, end) = read_all(&data);
        assert_eq!(
            recs.unwrap(),
            vec![b"a".to_vec(), vec![], b"hello world".to_vec()]
        );
        assert_eq!(end, Some(LogEnd::Clean));
    }

    #[test]
    fn every_truncation_is_a_torn_tail() {
        let data = log(&[b"first", b"second record", b"third"]);
        for cut in 0..data.len() {
            let (recs, end) = read_all(&data[..cut]);
            let recs = recs.expect("truncation is never corruption");
            assert!(recs.len() <= 3);
            if cut < data.len() {
                assert!(matches!(end, Some(LogEnd::Torn(_)) | Some(LogEnd::Clean)));
            }
        }
    }

    #[test]
    fn zero_fill_tail_is_torn() {
        let mut data = log(&[b"first"]);
        let good = data.len() as u64;
        data.extend_from_slice(&[0u8; 40]);
        let (recs, end) = read_all(&data);
        assert_eq!(recs.unwrap().len(), 1);
        assert_eq!(end, Some(LogEnd::Torn(good)));
    }

    /// A preallocated log: records, then zeros to the end. Every prefix of
    /// the records, the rest zeroed (what a crash can leave), reads as the
    /// complete records of the prefix, ends torn, and says whether a record
    /// was cut (`zero_tail` false) or not.
    #[test]
    fn preallocated_log_reads_every_crash_state() {
        let data = log(&[b"first", b"second record", b"third"]);
        let bounds = [0, HEADER_LEN + 5, 2 * HEADER_LEN + 18, data.len()];
        for cut in 0..=data.len() {
            let mut d = data[..cut].to_vec();
            d.resize(data.len() + 64, 0);
            let p = Path::new("LOG");
            let mut r = RecordReader::new(&d, p);
            let mut n = 0;
            while r.next_record().expect("never corruption").is_some() {
                n += 1;
            }
            let whole = bounds.iter().filter(|&&b| b > 0 && b <= cut).count();
            assert_eq!(n, whole, "cut {cut}");
            let at_bound = bounds.contains(&cut);
            assert_eq!(
                r.end(),
                Some(LogEnd::Torn(bounds[whole] as u64)),
                "cut {cut}"
            );
            assert_eq!(r.zero_tail(), at_bound, "cut {cut}");
        }
    }

    #[test]
    fn flipped_bit_before_valid_data_is_corruption_with_offset() {
        let mut data = log(&[b"first", b"second", b"third"]);
        let second = (HEADER_LEN + 5) as u64;
        for bit in 0..8 {
            let mut d = data.clone();
            d[second as usize + HEADER_LEN + 2] ^= 1 << bit;
            let (recs, _) = read_all(&d);
            match recs {
                Err(Error::Corruption { offset, .. }) => assert_eq!(offset, second),
                other => panic!("expected corruption, got {other:?}"),
            }
        }
        // A flipped bit in a header length is caught by the header checksum.
        data[second as usize] ^= 0x40;
        assert!(read_all(&data).0.unwrap_err().is_corruption());
    }
}
