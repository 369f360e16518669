//! TrieTable files (KT-Store §3.2): where the values of one key range live,
//! in write order.
//!
//! A TrieTable is one append-only file `NNNNNN.tt` of value records in the
//! shared codec ([`crate::format::value_record`], flags 0), with no file
//! header: the catalog in the trie file says which node a table serves and
//! how long it is.
//!
//! ```text
//! NNNNNN.tt := record*
//! record    := crc:u32le kind:u8 flags:u8=0 key_len:u32le value_len:u32le seq:u64le key value
//! ```
//! `kind` is 1 (a user's value) or 2 (a copy written by GC). A
//! [`ValuePointer`] into a table is `(table id, record offset, record
//! length, aux = 0)`. Frozen: format version 1.
//!
//! A table is **active** while a trie node appends to it and **sealed**
//! once it is closed for appends (at a split, a roll, a GC step, a torn
//! tail found on open, or as GC's output); a sealed table never changes
//! until GC deletes it. This module holds the per-file pieces: naming, the
//! in-memory [`TableInfo`], record checks, the scan that finds where a
//! table's intact records end, and a bounded cache of open read handles.

use crate::error::{Error, IoContext, Result};
use crate::format::value_record::{self, DecodeError};
use crate::fs::{Advice, FileSystem, IoCategory, IoStats, RandomAccessFile, WritableFile};
use crate::vstore::ValuePointer;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// File-name suffix of TrieTables.
pub const SUFFIX: &str = ".tt";

/// Path of TrieTable `id`.
pub fn table_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:06}{SUFFIX}"))
}

/// The id of a TrieTable file name, `None` for other names.
pub fn parse_name(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(SUFFIX)?;
    (stem.len() >= 6 && stem.bytes().all(|b| b.is_ascii_digit()))
        .then(|| stem.parse().ok())
        .flatten()
}

/// Where a table stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableState {
    /// A trie node appends to it.
    Active,
    /// Closed for appends; its length is final.
    Sealed,
    /// Collected by GC; deleted once no reader can reach it.
    Retired,
}

/// What the store knows of one table (in memory; the catalog persists the
/// state and length).
#[derive(Debug, Clone)]
pub struct TableInfo {
    /// Active, sealed or retired.
    pub state: TableState,
    /// Bytes of intact records from the start of the file; pointers past
    /// it are outside the valid range.
    pub valid_len: u64,
    /// Bytes known to be durable (synced).
    pub synced_len: u64,
    /// Bytes of records known to be garbage (an estimate fed by
    /// compaction; lost on reopen).
    pub garbage: u64,
    /// Smallest and largest key appended since `bounds_from` (for
    /// splits); `None` before the first record.
    pub bounds: Option<(Vec<u8>, Vec<u8>)>,
    /// `bounds` covers the records from this offset on (0: the whole
    /// table).
    pub bounds_from: u64,
    /// Every record's key is larger than the one before (known for the
    /// whole table only; false when unknown).
    pub sorted: bool,
}

impl TableInfo {
    /// A new, empty active table.
    pub fn new_active() -> Self {
        TableInfo {
            state: TableState::Active,
            valid_len: 0,
            synced_len: 0,
            garbage: 0,
            bounds: None,
            bounds_from: 0,
            sorted: true,
        }
    }

    /// A sealed table of `len` bytes, its records in key order or not.
    pub fn sealed(len: u64, sorted: bool) -> Self {
        TableInfo {
            state: TableState::Sealed,
            valid_len: len,
            synced_len: len,
            garbage: 0,
            bounds: None,
            bounds_from: len,
            sorted,
        }
    }

    /// Sealed, holding records, and not in key order: what sorting sealed
    /// tables (`Options::trie_sort_sealed`) would rewrite.
    pub fn unsorted_sealed(&self) -> bool {
        self.state == TableState::Sealed && !self.sorted && self.valid_len > 0
    }

    /// Widens the key bounds with `key`, appended after every key noted so
    /// far.
    pub fn note_key(&mut self, key: &[u8]) {
        match &mut self.bounds {
            None => self.bounds = Some((key.to_vec(), key.to_vec())),
            Some((lo, hi)) => {
                if key <= hi.as_slice() {
                    self.sorted = false;
                }
                if key < lo.as_slice() {
                    lo.clear();
                    lo.extend_from_slice(key);
                } else if key > hi.as_slice() {
                    hi.clear();
                    hi.extend_from_slice(key);
                }
            }
        }
    }

    /// Estimated live bytes.
    pub fn live(&self) -> u64 {
        self.valid_len - self.garbage.min(self.valid_len)
    }
}

/// The append handle of an active table.
pub struct TableWriter {
    /// The file, positioned at its end; `None` while closed to keep the
    /// number of open handles under the cap (only a clean writer is
    /// closed; the next append reopens it at its end).
    pub file: Option<Box<dyn WritableFile>>,
    /// True while it holds appended data not yet synced.
    pub dirty: bool,
    /// When it was last appended to (the store's append count).
    pub last_use: u64,
}

/// Checks a record read for `key` at `ptr` (`buf` holds exactly the
/// record); returns where its value lies in `buf`. `path` names the file,
/// built only for an error.
///
/// # Errors
/// `Corruption` at the pointer's offset for a damaged record, a record of
/// another key or length, or one that holds no value.
pub fn check_record(
    path: impl FnOnce() -> PathBuf,
    ptr: &ValuePointer,
    key: &[u8],
    buf: &[u8],
) -> Result<Range<usize>> {
    let why = match value_record::decode(buf) {
        Ok(r) if r.len == buf.len() && r.key == key && r.kind.holds_value() => {
            let start = r.value.as_ptr() as usize - buf.as_ptr() as usize;
            return Ok(start..start + r.value.len());
        }
        Ok(r) if !r.kind.holds_value() => "value pointer addresses a record without a value".into(),
        Ok(r) if r.key != key => "TrieTable record belongs to another key".into(),
        Ok(_) => "TrieTable record length differs from the pointer".into(),
        Err(e) => format!("TrieTable record damaged ({e:?})"),
    };
    Err(Error::corruption(path(), ptr.offset, why))
}

/// The value of a checked record, reusing the read buffer.
pub fn into_value(mut buf: Vec<u8>, range: Range<usize>) -> Vec<u8> {
    buf.truncate(range.end);
    buf.drain(..range.start);
    buf
}

/// What [`scan`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanEnd {
    /// End of the last intact record.
    pub valid_len: u64,
    /// True when bytes after `valid_len` are not records (a torn tail).
    pub torn: bool,
    /// True when every byte after `valid_len` is zero: the tail is space
    /// preallocated for appends ([`crate::fs::FileSystem::open_mapped`]),
    /// or never written, rather than a damaged record (`torn` is set too).
    pub zero_tail: bool,
}

/// Bytes read per step by [`scan`] and by verification.
pub const SCAN_CHUNK: u64 = 4 << 20;

/// Reads the records of `path` in `[start, len)` front to back, calling
/// `f(offset, record)` for each intact one, and returns where the intact
/// records end. A record that does not decode ends the scan as a torn
/// tail; callers that expect none there report it.
///
/// # Errors
/// `Io` when the file cannot be read, or any error `f` returns.
pub fn scan(
    fs: &dyn FileSystem,
    path: &Path,
    start: u64,
    len: u64,
    stats: &IoStats,
    cat: IoCategory,
    mut f: impl FnMut(u64, &value_record::Record<'_>) -> Result<()>,
) -> Result<ScanEnd> {
    if start >= len {
        return Ok(ScanEnd {
            valid_len: start,
            torn: start > len,
            zero_tail: false,
        });
    }
    let file = fs.open_read(path).ctx(path)?;
    file.advise(start, len - start, Advice::Sequential);
    let mut buf: Vec<u8> = Vec::new();
    let mut buf_start = start;
    let mut pos = start;
    loop {
        let rel = (pos - buf_start) as usize;
        match value_record::decode(&buf[rel..]) {
            Ok(r) => {
                f(pos, &r)?;
                pos += r.len as u64;
            }
            Err(DecodeError::Truncated) => {
                let file_left = len - (buf_start + buf.len() as u64);
                if file_left == 0 {
                    let rest = &buf[rel..];
                    return Ok(ScanEnd {
                        valid_len: pos,
                        torn: pos < len,
                        zero_tail: pos < len && rest.iter().all(|&b| b == 0),
                    });
                }
                // Keep the partial record and read more: at least a chunk,
                // and the whole record when its header says it is larger.
                buf.drain(..rel);
                buf_start = pos;
                let need = value_record::announced_len(&buf).unwrap_or(0) as u64;
                let n = file_left.min(SCAN_CHUNK.max(need.saturating_sub(buf.len() as u64)));
                let old = buf.len();
                buf.resize(old + n as usize, 0);
                file.read_exact_at(buf_start + old as u64, &mut buf[old..])
                    .ctx(path)?;
                stats.add_read(cat, n);
            }
            Err(e) => {
                // An all-zero header: zeros to the end are a preallocated
                // (or never written) tail, anything else a damaged one.
                let zero_tail = e == DecodeError::Zero && {
                    let mut zeros = buf[rel..].iter().all(|&b| b == 0);
                    let mut at = buf_start + buf.len() as u64;
                    while zeros && at < len {
                        let n = (len - at).min(SCAN_CHUNK);
                        buf.resize(n as usize, 0);
                        file.read_exact_at(at, &mut buf).ctx(path)?;
                        stats.add_read(cat, n);
                        zeros = buf.iter().all(|&b| b == 0);
                        at += n;
                    }
                    zeros
                };
                return Ok(ScanEnd {
                    valid_len: pos,
                    torn: true,
                    zero_tail,
                });
            }
        }
    }
}

/// Open read handles by table id, shared by readers and GC; past
/// [`crate::fs::read_handle_budget`] (a 4 MiB TrieTable each, so 4 GiB of
/// values at the least), `quick_cache` closes the ones it judges coldest
/// (S3-FIFO: a table read once goes first). (Emptying the whole
/// cache when it filled made a store of more tables than that reopen a
/// table on one read in five under random reads, and close 512 files at
/// once every few hundred reads.)
pub struct Handles {
    dir: PathBuf,
    fs: Arc<dyn FileSystem>,
    map: quick_cache::sync::Cache<u64, Arc<dyn RandomAccessFile>>,
}

impl Handles {
    /// An empty cache for the tables in `dir`.
    pub fn new(dir: &Path, fs: Arc<dyn FileSystem>) -> Self {
        Self::with_capacity(dir, fs, crate::fs::read_handle_budget())
    }

    /// An empty cache of at most `cap` (at least 1) handles.
    pub fn with_capacity(dir: &Path, fs: Arc<dyn FileSystem>, cap: usize) -> Self {
        Handles {
            dir: dir.to_path_buf(),
            fs,
            map: quick_cache::sync::Cache::new(cap.max(1)),
        }
    }

    /// The read handle of table `id`, opened on first use.
    ///
    /// # Errors
    /// `Io` when the file cannot be opened.
    pub fn get(&self, id: u64) -> Result<Arc<dyn RandomAccessFile>> {
        if let Some(h) = self.map.get(&id) {
            return Ok(h);
        }
        // Hinted for random access: point reads land anywhere in a table;
        // span reads ask for read-ahead themselves.
        let h = crate::vstore::open_for_reads(&*self.fs, &table_path(&self.dir, id), false)?;
        self.map.insert(id, h.clone());
        Ok(h)
    }

    /// Forgets the handle of a deleted table.
    pub fn forget(&self, id: u64) {
        self.map.remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::value_record::Kind;
    use crate::fs::MemFs;

    #[test]
    fn names_roundtrip_and_foreign_names_are_ignored() {
        let p = table_path(Path::new("/d"), 42);
        assert_eq!(p, Path::new("/d/000042.tt"));
        assert_eq!(parse_name("000042.tt"), Some(42));
        assert_eq!(parse_name("1234567.tt"), Some(1234567));
        for n in ["42.tt", "000042.log", "TRIE", "abcdef.tt", "000042.tt.new"] {
            assert_eq!(parse_name(n), None, "{n}");
        }
    }

    #[test]
    fn scan_finds_the_end_of_intact_records() {
        let fs = MemFs::new();
        let dir = Path::new("/t");
        fs.create_dir_all(dir).unwrap();
        let path = table_path(dir, 1);
        let mut data = Vec::new();
        let mut ends = Vec::new();
        for i in 0..50u64 {
            // One record larger than a scan chunk is not needed to test the
            // chunking: records of varied size cross the buffer refills.
            value_record::encode(
                &mut data,
                Kind::Value,
                0,
                format!("k{i}").as_bytes(),
                i,
                &vec![b'v'; (i as usize * 37) % 500],
            );
            ends.push(data.len() as u64);
        }
        let mut f = fs.create(&path).unwrap();
        f.append(&data).unwrap();
        f.sync().unwrap();
        let stats = IoStats::default();
        let mut keys = 0;
        let end = scan(
            &fs,
            &path,
            0,
            data.len() as u64,
            &stats,
            IoCategory::ValueStore,
            |_, _| {
                keys += 1;
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(
            end,
            ScanEnd {
                valid_len: data.len() as u64,
                torn: false,
                zero_tail: false,
            }
        );
        assert_eq!(keys, 50);
        // Cut anywhere: the scan ends at the last whole record.
        for cut in [1u64, 30, ends[10] + 3, ends[49] - 1] {
            let end = scan(
                &fs,
                &path,
                0,
                cut,
                &stats,
                IoCategory::ValueStore,
                |_, _| Ok(()),
            )
            .unwrap();
            let want = ends
                .iter()
                .copied()
                .filter(|&e| e <= cut)
                .max()
                .unwrap_or(0);
            assert_eq!(end.valid_len, want, "cut {cut}");
            assert!(end.torn);
        }
        // Starting at a record boundary works too.
        let end = scan(
            &fs,
            &path,
            ends[20],
            data.len() as u64,
            &stats,
            IoCategory::ValueStore,
            |_, _| Ok(()),
        )
        .unwrap();
        assert_eq!(end.valid_len, data.len() as u64);
    }

    #[test]
    fn scan_reads_a_record_larger_than_a_chunk() {
        let fs = MemFs::new();
        let dir = Path::new("/t");
        fs.create_dir_all(dir).unwrap();
        let path = table_path(dir, 2);
        let mut data = Vec::new();
        value_record::encode(&mut data, Kind::Value, 0, b"a", 1, b"small");
        value_record::encode(
            &mut data,
            Kind::Value,
            0,
            b"b",
            2,
            &vec![7u8; SCAN_CHUNK as usize + 100],
        );
        let mut f = fs.create(&path).unwrap();
        f.append(&data).unwrap();
        let mut n = 0;
        let end = scan(
            &fs,
            &path,
            0,
            data.len() as u64,
            &IoStats::default(),
            IoCategory::ValueStore,
            |_, _| {
                n += 1;
                Ok(())
            },
        )
        .unwrap();
        assert_eq!((end.valid_len, end.torn, n), (data.len() as u64, false, 2));
    }

    #[test]
    fn check_record_reports_the_pointer_offset() {
        let mut b = Vec::new();
        value_record::encode(&mut b, Kind::Value, 0, b"key", 3, b"value");
        let ptr = ValuePointer {
            file_id: 1,
            offset: 77,
            length: b.len() as u32,
            aux: 0,
        };
        let p = || PathBuf::from("000001.tt");
        let r = check_record(p, &ptr, b"key", &b).unwrap();
        assert_eq!(&b[r], b"value");
        for (key, buf) in [
            (&b"other"[..], b.clone()),
            (b"key", {
                let mut d = b.clone();
                d[25] ^= 1;
                d
            }),
        ] {
            match check_record(p, &ptr, key, &buf) {
                Err(Error::Corruption { offset, .. }) => assert_eq!(offset, 77),
                other => panic!("{other:?}"),
            }
        }
        let mut tomb = Vec::new();
        value_record::encode(&mut tomb, Kind::Tombstone, 0, b"key", 3, b"");
        assert!(check_record(p, &ptr, b"key", &tomb).is_err());
    }
}
