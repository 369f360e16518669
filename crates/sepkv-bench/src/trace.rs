//! Reading operation traces (the YCSB trace format: one operation per
//! line, fields separated by tabs or spaces; `.gz` files are decompressed):
//!
//! ```text
//! INSERT <key> <value bytes>
//! UPDATE <key> <value bytes>
//! READ   <key>
//! SCAN   <start key> <record count>
//! DELETE <key>
//! ```
//!
//! Every line is one operation: a blank or malformed line is an error
//! naming the file and the line number.

use crate::error::{BenchError, Result};
use flate2::read::MultiGzDecoder;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// Largest value size a trace may ask for (bytes).
pub const MAX_TRACE_VALUE: u64 = 64 << 20;
/// Largest key a trace may name (bytes).
pub const MAX_TRACE_KEY: usize = 64 << 10;
/// Largest scan length a trace may ask for (entries).
pub const MAX_TRACE_SCAN: u64 = 1 << 24;

/// One trace operation; keys borrow the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceOp<'a> {
    /// Put a new key with a value of `size` bytes.
    Insert {
        /// The key.
        key: &'a [u8],
        /// Value size (bytes).
        size: u64,
    },
    /// Put an existing key with a value of `size` bytes.
    Update {
        /// The key.
        key: &'a [u8],
        /// Value size (bytes).
        size: u64,
    },
    /// Get a key.
    Read {
        /// The key.
        key: &'a [u8],
    },
    /// Seek to `key` and read `count` entries.
    Scan {
        /// The start key.
        key: &'a [u8],
        /// Entries to read.
        count: u64,
    },
    /// Delete a key.
    Delete {
        /// The key.
        key: &'a [u8],
    },
}

fn number(field: Option<&str>, what: &str, max: u64) -> std::result::Result<u64, String> {
    let f = field.ok_or_else(|| format!("missing {what}"))?;
    let n: u64 = f
        .parse()
        .map_err(|_| format!("{what} {f:?} is not a non-negative integer"))?;
    if n > max {
        return Err(format!("{what} {n} exceeds the limit of {max}"));
    }
    Ok(n)
}

/// Parses one line (without its line terminator).
///
/// # Errors
/// A message saying what is wrong with the line.
pub fn parse_line(line: &str) -> std::result::Result<TraceOp<'_>, String> {
    let mut f = line.split_ascii_whitespace();
    let Some(op) = f.next() else {
        return Err("blank line (every line must be one operation)".into());
    };
    let key = f
        .next()
        .ok_or_else(|| format!("{op}: missing key"))?
        .as_bytes();
    if key.len() > MAX_TRACE_KEY {
        return Err(format!(
            "key of {} bytes exceeds the limit of {MAX_TRACE_KEY}",
            key.len()
        ));
    }
    let parsed = match op {
        "INSERT" => TraceOp::Insert {
            key,
            size: number(f.next(), "value size", MAX_TRACE_VALUE)?,
        },
        "UPDATE" => TraceOp::Update {
            key,
            size: number(f.next(), "value size", MAX_TRACE_VALUE)?,
        },
        "READ" => TraceOp::Read { key },
        "SCAN" => TraceOp::Scan {
            key,
            count: number(f.next(), "record count", MAX_TRACE_SCAN)?,
        },
        "DELETE" => TraceOp::Delete { key },
        other => {
            return Err(format!(
                "unknown operation {other:?}; expected INSERT, UPDATE, READ, SCAN or DELETE"
            ))
        }
    };
    if let Some(extra) = f.next() {
        return Err(format!("{op}: unexpected extra field {extra:?}"));
    }
    Ok(parsed)
}

/// Reads a trace file line by line.
pub struct TraceReader {
    path: PathBuf,
    reader: Box<dyn BufRead + Send>,
    line: String,
    line_no: u64,
}

impl TraceReader {
    /// Opens `path`, decompressing when its name ends in `.gz`.
    ///
    /// # Errors
    /// [`BenchError::Io`] when the file cannot be opened.
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| BenchError::io(path, e))?;
        let reader: Box<dyn BufRead + Send> = if path.extension().is_some_and(|e| e == "gz") {
            Box::new(BufReader::with_capacity(1 << 16, MultiGzDecoder::new(file)))
        } else {
            Box::new(BufReader::with_capacity(1 << 16, file))
        };
        Ok(Self::from_reader(path, reader))
    }

    /// Reads a trace from `reader`; `path` names it in errors.
    pub fn from_reader(path: &Path, reader: Box<dyn BufRead + Send>) -> Self {
        TraceReader {
            path: path.to_path_buf(),
            reader,
            line: String::new(),
            line_no: 0,
        }
    }

    /// The line number of the operation last returned (1-based).
    pub fn line_no(&self) -> u64 {
        self.line_no
    }

    /// The trace's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The next operation, or `None` at the end of the file.
    ///
    /// # Errors
    /// [`BenchError::Trace`] (file and line) for a malformed line or a read
    /// error.
    pub fn next_op(&mut self) -> Result<Option<TraceOp<'_>>> {
        self.line.clear();
        let n = self
            .reader
            .read_line(&mut self.line)
            .map_err(|e| BenchError::Trace {
                file: self.path.clone(),
                line: self.line_no + 1,
                msg: format!("read error: {e}"),
            })?;
        if n == 0 {
            return Ok(None);
        }
        self.line_no += 1;
        let text = self.line.trim_end_matches(['\n', '\r']);
        parse_line(text).map(Some).map_err(|msg| BenchError::Trace {
            file: self.path.clone(),
            line: self.line_no,
            msg,
        })
    }
}

/// Kind of a trace operation in a [`TraceChunk`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// `INSERT`.
    Insert,
    /// `UPDATE`.
    Update,
    /// `READ`.
    Read,
    /// `SCAN`.
    Scan,
    /// `DELETE`.
    Delete,
}

/// One operation of a [`TraceChunk`].
#[derive(Debug, Clone)]
pub struct ChunkOp {
    /// The operation.
    pub kind: OpKind,
    key: std::ops::Range<usize>,
    /// Value size (bytes) of inserts and updates, entries of scans, else 0.
    pub n: u64,
    /// 1-based line number in the trace file.
    pub line: u64,
}

/// A run of parsed operations with their keys in one buffer, so a replay
/// can parse ahead and time only the operations.
#[derive(Debug, Default)]
pub struct TraceChunk {
    arena: Vec<u8>,
    ops: Vec<ChunkOp>,
}

impl TraceChunk {
    /// The operations.
    pub fn ops(&self) -> &[ChunkOp] {
        &self.ops
    }

    /// The key of `op`.
    pub fn key(&self, op: &ChunkOp) -> &[u8] {
        &self.arena[op.key.clone()]
    }

    fn push(&mut self, op: TraceOp<'_>, line: u64) {
        let (kind, key, n) = match op {
            TraceOp::Insert { key, size } => (OpKind::Insert, key, size),
            TraceOp::Update { key, size } => (OpKind::Update, key, size),
            TraceOp::Read { key } => (OpKind::Read, key, 0),
            TraceOp::Scan { key, count } => (OpKind::Scan, key, count),
            TraceOp::Delete { key } => (OpKind::Delete, key, 0),
        };
        let start = self.arena.len();
        self.arena.extend_from_slice(key);
        self.ops.push(ChunkOp {
            kind,
            key: start..self.arena.len(),
            n,
            line,
        });
    }
}

impl TraceReader {
    /// Replaces `chunk`'s contents with up to `max_ops` next operations;
    /// returns how many were read (0 at the end of the file).
    ///
    /// # Errors
    /// As [`TraceReader::next_op`].
    pub fn read_chunk(&mut self, max_ops: usize, chunk: &mut TraceChunk) -> Result<usize> {
        chunk.arena.clear();
        chunk.ops.clear();
        while chunk.ops.len() < max_ops {
            let line = self.line_no + 1;
            match self.next_op()? {
                Some(op) => chunk.push(op, line),
                None => break,
            }
        }
        Ok(chunk.ops.len())
    }
}

/// Counts the lines of a trace file (decompressing `.gz`).
///
/// # Errors
/// [`BenchError::Io`] when the file cannot be read.
pub fn count_lines(path: &Path) -> Result<u64> {
    let file = File::open(path).map_err(|e| BenchError::io(path, e))?;
    let mut r: Box<dyn Read> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(MultiGzDecoder::new(file))
    } else {
        Box::new(file)
    };
    let mut buf = vec![0u8; 1 << 16];
    let (mut lines, mut last) = (0u64, b'\n');
    loop {
        let n = r.read(&mut buf).map_err(|e| BenchError::io(path, e))?;
        if n == 0 {
            break;
        }
        lines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
        last = buf[n - 1];
    }
    if last != b'\n' {
        lines += 1;
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_operation() {
        assert_eq!(
            parse_line("INSERT\tuser1\t1000"),
            Ok(TraceOp::Insert {
                key: b"user1",
                size: 1000
            })
        );
        assert_eq!(
            parse_line("UPDATE user1 100"),
            Ok(TraceOp::Update {
                key: b"user1",
                size: 100
            })
        );
        assert_eq!(
            parse_line("READ\tuser1"),
            Ok(TraceOp::Read { key: b"user1" })
        );
        assert_eq!(
            parse_line("SCAN\tuser1\t7"),
            Ok(TraceOp::Scan {
                key: b"user1",
                count: 7
            })
        );
        assert_eq!(
            parse_line("DELETE\tuser1"),
            Ok(TraceOp::Delete { key: b"user1" })
        );
    }

    #[test]
    fn rejects_malformed_lines() {
        for bad in [
            "",
            "   ",
            "INSERT",
            "INSERT\tuser1",
            "INSERT\tuser1\tx",
            "INSERT\tuser1\t-5",
            "READ\tuser1\textra",
            "SCAN\tuser1",
            "FROB\tuser1",
            "insert\tuser1\t10",
            "INSERT\tuser1\t99999999999",
        ] {
            assert!(parse_line(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn reader_names_file_and_line() {
        let text = "INSERT\ta\t10\r\nREAD\ta\nSCAN\ta\tlots\n";
        let mut r =
            TraceReader::from_reader(Path::new("t.tsv"), Box::new(std::io::Cursor::new(text)));
        assert!(matches!(
            r.next_op().unwrap(),
            Some(TraceOp::Insert { size: 10, .. })
        ));
        assert!(matches!(r.next_op().unwrap(), Some(TraceOp::Read { .. })));
        let e = r.next_op().unwrap_err();
        match &e {
            BenchError::Trace { line, .. } => assert_eq!(*line, 3),
            other => panic!("{other:?}"),
        }
        assert!(e.to_string().starts_with("t.tsv:3: "), "{e}");
    }

    #[test]
    fn chunks_keep_keys_and_lines() {
        let text = "INSERT\tk1\t10\nREAD\tk22\nSCAN\tk3\t5\nDELETE\tk1\n";
        let mut r = TraceReader::from_reader(Path::new("t"), Box::new(std::io::Cursor::new(text)));
        let mut c = TraceChunk::default();
        assert_eq!(r.read_chunk(3, &mut c).unwrap(), 3);
        let ops = c.ops();
        assert_eq!(
            (ops[0].kind, c.key(&ops[0]), ops[0].n, ops[0].line),
            (OpKind::Insert, &b"k1"[..], 10, 1)
        );
        assert_eq!(
            (ops[1].kind, c.key(&ops[1]), ops[1].line),
            (OpKind::Read, &b"k22"[..], 2)
        );
        assert_eq!((ops[2].kind, ops[2].n), (OpKind::Scan, 5));
        assert_eq!(r.read_chunk(3, &mut c).unwrap(), 1);
        assert_eq!((c.ops()[0].kind, c.ops()[0].line), (OpKind::Delete, 4));
        assert_eq!(r.read_chunk(3, &mut c).unwrap(), 0);
    }
}
