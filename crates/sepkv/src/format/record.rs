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
//!
//! **Log records** (write-ahead logs, so that a log file can be recycled):
//! ```text
//! header := len:u32le  payload_crc:u32le  log:u32le  header_crc:u32le   (16 bytes)
//!   len          payload length, with bit 31 set (what tells the two
//!                headers apart; a payload is at most 2^30 bytes)
//!   log          the low 32 bits of the number of the log the record was
//!                written to
//!   header_crc   masked CRC-32C of the first 12 header bytes
//! ```
//! A recycled file (RocksDB's `recycle_log_file_num` does the same) is
//! written over from its start, so past the last record of its new use lie
//! the records of an older one, whole or cut anywhere. Only recycled files
//! are written in log records, and the first one — an empty record — is
//! synced before the file takes the log's name, so a log that does not
//! start with a log record of its own number is read by the plain rules
//! above. In a recycled log, a reader that knows the log's number
//! ([`RecordReader::for_log`]) takes a record of another
//! log, a plain record, or a header that fails its checksum or is cut
//! short, as the **stale tail** of a recycled file
//! ([`LogEnd::Stale`]) — unless a valid record of its own log follows
//! further on, which makes it **corruption** at that offset as before. A
//! valid header of its own log whose payload is cut or fails its checksum,
//! with no own record after it, is a torn tail. What such a reader gives up,
//! in recycled logs only: damage to the header of the last record is taken
//! as the log's end, as damage to the last payload already is. Log records were added in
//! format version 1 without a version change: a reader that predates them
//! fails the first one's header checksum with data after it, and so reports
//! corruption; it never misreads one.

use super::checksum::{crc, mask, unmask};
use crate::error::{Error, IoContext, Result};
use crate::fs::{IoCategory, IoStats, SyncHandle, WritableFile};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Bytes of a record header.
pub const HEADER_LEN: usize = 12;
/// Largest payload a record may carry (bytes).
pub const MAX_PAYLOAD: usize = 1 << 30;
/// Bytes of a log record's header (see the module docs).
pub const LOG_HEADER_LEN: usize = 16;
/// Bit of a header's length field that marks a log record.
const LOG_FLAG: u32 = 1 << 31;

/// The log field of a log record written to log `number`.
fn log_tag(number: u64) -> u32 {
    number as u32
}

/// Frames `payload` as one record appended to `dst`.
pub fn encode_record(dst: &mut Vec<u8>, payload: &[u8]) {
    let mut head = [0u8; 8];
    head[..4].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    head[4..].copy_from_slice(&mask(crc(payload)).to_le_bytes());
    dst.extend_from_slice(&head);
    dst.extend_from_slice(&mask(crc(&head)).to_le_bytes());
    dst.extend_from_slice(payload);
}

/// Frames `payload` as one log record of log `log` appended to `dst`.
pub fn encode_log_record(dst: &mut Vec<u8>, log: u64, payload: &[u8]) {
    let mut head = [0u8; 12];
    head[..4].copy_from_slice(&(payload.len() as u32 | LOG_FLAG).to_le_bytes());
    head[4..8].copy_from_slice(&mask(crc(payload)).to_le_bytes());
    head[8..].copy_from_slice(&log_tag(log).to_le_bytes());
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
    /// The log number written into each record's header (log records).
    log: Option<u64>,
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
            log: None,
        }
    }

    /// Wraps `file` to write log records of log `number` (see the module
    /// docs): `file` may be a recycled file written over from its start.
    pub fn for_log(
        file: Box<dyn WritableFile>,
        path: PathBuf,
        stats: Arc<IoStats>,
        category: IoCategory,
        number: u64,
    ) -> Self {
        RecordWriter {
            log: Some(number),
            ..RecordWriter::new(file, path, stats, category)
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
        match self.log {
            Some(n) => encode_log_record(&mut self.scratch, n, payload),
            None => encode_record(&mut self.scratch, payload),
        }
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
    /// The log's records end at this offset, and what follows is an older
    /// use's data in a recycled file ([`RecordReader::for_log`]): no record
    /// of the log was cut there.
    Stale(u64),
}

/// Reads the records of an in-memory copy of a log.
pub struct RecordReader<'a> {
    data: &'a [u8],
    pos: usize,
    file: &'a Path,
    end: Option<LogEnd>,
    /// The log field of a recycled log's records: set by `for_log`, and
    /// kept only when the file starts with a record of that log.
    log: Option<u32>,
}

/// Why a log reader could not read a record of its own at an offset.
#[derive(Clone, Copy)]
enum Miss {
    /// A valid header of the log whose payload is cut or fails its checksum.
    Cut,
    /// A header that fails its checksum, or one too short to check.
    BadHeader,
    /// A valid record of another log, or a plain one.
    Stale,
}

impl<'a> RecordReader<'a> {
    /// Reads `data`, the contents of `file` (used in error messages).
    pub fn new(data: &'a [u8], file: &'a Path) -> Self {
        RecordReader {
            data,
            pos: 0,
            file,
            end: None,
            log: None,
        }
    }

    /// Reads `data`, the contents of log `number` at `file`, which may be
    /// a recycled file (see the module docs): one whose first record is a
    /// log record of `number`. Any other file is read by the plain rules.
    /// The recycled log's first record, an empty one, is not returned.
    pub fn for_log(data: &'a [u8], file: &'a Path, number: u64) -> Self {
        RecordReader {
            log: Some(log_tag(number)),
            ..RecordReader::new(data, file)
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
        if start == 0 && self.log.is_some() {
            // A recycled log starts with an empty record of its own,
            // synced before the file took the log's name; any other log is
            // read by the plain rules.
            match log_record_at(self.data, 0) {
                LogRecord::Valid { log, payload: [] } if Some(log) == self.log => {
                    self.pos = LOG_HEADER_LEN;
                    return self.next_record();
                }
                _ => self.log = None,
            }
        }
        if rest.len() < HEADER_LEN || all_zero(rest) {
            if self.log.is_some() && !all_zero(rest) {
                return self.missed(Miss::BadHeader);
            }
            return torn(self);
        }
        if let Some(log) = self.log {
            // A plain record in a recycled log is an older use's.
            if rest[3] & 0x80 == 0 {
                return self.missed(Miss::Stale);
            }
            return self.next_log_record(log);
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

    /// Reads the log record at the current offset (its length field is
    /// flagged), of log field `log`.
    fn next_log_record(&mut self, log: u32) -> Result<Option<(u64, &'a [u8])>> {
        let start = self.pos;
        match log_record_at(self.data, start) {
            LogRecord::Valid { log: l, .. } if l != log => self.missed(Miss::Stale),
            LogRecord::Valid { payload, .. } => {
                self.pos = start + LOG_HEADER_LEN + payload.len();
                Ok(Some((start as u64, payload)))
            }
            LogRecord::Cut { log: l } if l == log => self.missed(Miss::Cut),
            LogRecord::Cut { .. } => self.missed(Miss::Stale),
            LogRecord::BadHeader => self.missed(Miss::BadHeader),
        }
    }

    /// Ends a log reader's log at the current offset, where no record of
    /// its own could be read: corruption when a record of its own follows
    /// further on, else a torn or stale tail (see the module docs).
    fn missed(&mut self, why: Miss) -> Result<Option<(u64, &'a [u8])>> {
        let start = self.pos;
        let log = self.log.expect("only log readers miss");
        // The flag and the log field are tested before any checksum.
        let tag = log.to_le_bytes();
        let data = self.data;
        let later = (start + 1..data.len().saturating_sub(LOG_HEADER_LEN - 1)).any(|at| {
            data[at + 3] & 0x80 != 0
                && data[at + 8..at + 12] == tag
                && matches!(log_record_at(data, at), LogRecord::Valid { log: l, .. } if l == log)
        });
        if later {
            let what = match why {
                Miss::Cut => "record payload checksum mismatch",
                Miss::BadHeader => "record header checksum mismatch",
                Miss::Stale => "record of another log",
            };
            return Err(Error::corruption(
                self.file,
                start as u64,
                format!("{what} before valid records of this log"),
            ));
        }
        // No header of this log here: whatever follows — an older record,
        // a piece of one, zeros — is the older use's (a header of this log
        // cut by the crash is no different: nothing after it is of this
        // log either).
        self.end = Some(match why {
            Miss::Cut => LogEnd::Torn(start as u64),
            Miss::BadHeader | Miss::Stale => LogEnd::Stale(start as u64),
        });
        Ok(None)
    }
}

/// What lies at an offset of a log, read as a log record.
enum LogRecord<'a> {
    /// A whole record whose checksums hold.
    Valid { log: u32, payload: &'a [u8] },
    /// A header whose checksum holds, with its payload cut short by the end
    /// of the data or failing its checksum.
    Cut { log: u32 },
    /// No log record header: too short, not flagged, or failing its checksum.
    BadHeader,
}

/// Reads `data[at..]` as a log record.
fn log_record_at(data: &[u8], at: usize) -> LogRecord<'_> {
    let Some(head) = data.get(at..at + LOG_HEADER_LEN) else {
        return LogRecord::BadHeader;
    };
    let word = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().expect("4 bytes"));
    let len_field = word(0);
    if len_field & LOG_FLAG == 0 || crc(&head[..12]) != unmask(word(12)) {
        return LogRecord::BadHeader;
    }
    let log = word(8);
    let len = (len_field & !LOG_FLAG) as usize;
    match data.get(at + LOG_HEADER_LEN..).and_then(|d| d.get(..len)) {
        Some(payload) if crc(payload) == unmask(word(4)) => LogRecord::Valid { log, payload },
        _ => LogRecord::Cut { log },
    }
}

/// True when `data` (log `number`, see [`RecordReader::for_log`]) holds at
/// least one record of that log, or damage a reader would report.
pub fn log_has_records(data: &[u8], file: &Path, number: u64) -> bool {
    !matches!(
        RecordReader::for_log(data, file, number).next_record(),
        Ok(None)
    )
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
        drain(RecordReader::new(data, Path::new("LOG")))
    }

    /// Every record `r` reads, or the error, and how the log ended.
    fn drain(mut r: RecordReader<'_>) -> (Result<Vec<Vec<u8>>>, Option<LogEnd>) {
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

    /// A recycled log as the writer makes it: an empty record of its own
    /// first, then `records`.
    fn recycled(number: u64, records: &[&[u8]]) -> Vec<u8> {
        let mut v = log_of(number, &[b""]);
        v.extend_from_slice(&log_of(number, records));
        v
    }

    fn log_of(number: u64, records: &[&[u8]]) -> Vec<u8> {
        let mut v = Vec::new();
        for r in records {
            encode_log_record(&mut v, number, r);
        }
        v
    }

    /// Reads `data` as log `number`: the records, or the error.
    fn read_log(data: &[u8], number: u64) -> (Result<Vec<Vec<u8>>>, Option<LogEnd>) {
        drain(RecordReader::for_log(data, Path::new("LOG"), number))
    }

    #[test]
    fn log_records_roundtrip_and_plain_logs_still_read() {
        let data = recycled(7, &[b"a", b"", b"hello world"]);
        let (recs, end) = read_log(&data, 7);
        assert_eq!(
            recs.unwrap(),
            vec![b"a".to_vec(), vec![], b"hello world".to_vec()]
        );
        assert_eq!(end, Some(LogEnd::Clean));
        // A log of plain records (written before log records existed).
        let (recs, end) = read_log(&log(&[b"x", b"y"]), 7);
        assert_eq!(recs.unwrap().len(), 2);
        assert_eq!(end, Some(LogEnd::Clean));
        // A reader without a log number reports a log record as damage,
        // never as data.
        let mut tail = data.clone();
        tail.resize(data.len() + 32, 0);
        assert!(read_all(&tail).0.unwrap_err().is_corruption());
    }

    /// A recycled file: log 9's records written over log 4's, the write
    /// cut at every byte (what a crash can leave). Every state reads as
    /// the whole records of log 9 written before the cut, never one of
    /// log 4, and never as corruption.
    #[test]
    fn recycled_log_reads_every_crash_state() {
        let old = log_of(
            4,
            &[b"old one", b"old record two", b"old three", b"old four!"],
        );
        // The first, empty record is synced before the file is renamed.
        let new = recycled(9, &[b"new first", b"second"]);
        let first = LOG_HEADER_LEN;
        let bounds = [first, first + LOG_HEADER_LEN + 9, new.len()];
        assert!(old.len() > new.len());
        for cut in first..=new.len() {
            let mut d = old.clone();
            d[..cut].copy_from_slice(&new[..cut]);
            let (recs, end) = read_log(&d, 9);
            let recs = recs.unwrap_or_else(|e| panic!("cut {cut}: {e}"));
            // The first, empty record is not returned.
            let whole = bounds.iter().filter(|&&b| b <= cut).count();
            assert_eq!(recs.len(), whole - 1, "cut {cut}");
            assert!(recs.iter().all(|r| !r.starts_with(b"old")), "cut {cut}");
            let at = bounds[whole - 1] as u64;
            assert!(
                matches!(end, Some(LogEnd::Stale(o) | LogEnd::Torn(o)) if o == at),
                "cut {cut}: {end:?}"
            );
        }
        // A file that does not start with a record of its own log is read
        // by the plain rules: another log's records there are damage.
        assert!(read_log(&old, 9).0.unwrap_err().is_corruption());
    }

    #[test]
    fn damage_before_records_of_the_same_log_is_corruption() {
        let old = log_of(4, &[&[7u8; 200]]);
        let new = recycled(9, &[b"first", b"second", b"third"]);
        let second = 2 * LOG_HEADER_LEN + 5;
        let mut base = old.clone();
        base[..new.len()].copy_from_slice(&new);
        for at in [second, second + 3, second + 9, second + LOG_HEADER_LEN + 1] {
            let mut d = base.clone();
            d[at] ^= 0x10;
            match read_log(&d, 9).0 {
                Err(Error::Corruption { offset, .. }) => assert_eq!(offset, second as u64),
                other => panic!("byte {at}: expected corruption, got {other:?}"),
            }
        }
        // Damage in the last record, with only another log's bytes after
        // it, ends the log there (the module docs' stated limit).
        let mut d = base.clone();
        d[second + LOG_HEADER_LEN + 6 + LOG_HEADER_LEN + 1] ^= 0x10;
        let (recs, _) = read_log(&d, 9);
        assert_eq!(recs.unwrap().len(), 2);
    }

    #[test]
    fn plain_records_after_log_records_are_stale() {
        let mut d = recycled(3, &[b"new"]);
        let end = d.len() as u64;
        d.extend_from_slice(&log(&[b"plain, older"]));
        let (recs, e) = read_log(&d, 3);
        assert_eq!(recs.unwrap(), vec![b"new".to_vec()]);
        assert_eq!(e, Some(LogEnd::Stale(end)));
        assert!(log_has_records(&d, Path::new("LOG"), 3));
        // Another log's records are damage unless a record of its own
        // comes first; a recycled log's first, empty record is no data.
        assert!(log_has_records(&log_of(2, &[b"a"]), Path::new("LOG"), 3));
        let mut d = recycled(3, &[]);
        d.extend_from_slice(&log_of(2, &[b"older"]));
        assert!(!log_has_records(&d, Path::new("LOG"), 3));
        assert!(!log_has_records(&[0u8; 64], Path::new("LOG"), 3));
    }
}
