//! The [`Engine`] trait every benchmarked key-value store implements, and
//! the plain types it speaks in: options, batches, chunks of operations,
//! scan results, I/O and stats.
//!
//! An engine is opened on an empty directory by an [`EngineFactory`]; the
//! harness calls the operations from one or more threads at once (engines
//! are `Send + Sync`), calls [`Engine::flush`] after each phase, and reads
//! [`Engine::stats`] before and after it.
//!
//! This module depends on nothing else of the harness but its error type
//! and `measure`, so that the peers (`peers/`) implement it and
//! `engine.rs` opens them, with no import running back.

use crate::error::{BenchError, Result};
use crate::measure::dir_allocated_bytes;
use std::collections::BTreeMap;
use std::path::Path;

/// How the harness wants an engine opened.
#[derive(Debug, Clone, Copy, Default)]
pub struct EngineOptions {
    /// Make every write durable (fsync) before it returns.
    pub sync: bool,
    /// Bypass the page cache for reads and writes (O_DIRECT) if the engine
    /// can; engines that cannot say so through [`Engine::notes`].
    pub direct_io: bool,
    /// Bound sepkv's value store: `(capacity in bytes, share of it that
    /// HashKV reserves for log segments)`; other engines ignore it.
    pub value_capacity: Option<(u64, f64)>,
    /// Bound of sepkv's `bands` layout (FlashKey) in the bytes its band
    /// entries take, headers included: the same reserve over the data as
    /// `value_capacity`, so that the reserve is the room its GC has (a band
    /// entry carries 42 bytes beyond its key and value); other engines and
    /// layouts ignore it.
    pub band_capacity: Option<u64>,
    /// sepkv only: take a checkpoint this long after open, into
    /// `<dir>.checkpoint`, and report it on stderr (see
    /// `SepkvEngine::checkpoint_later`); other engines ignore it.
    pub checkpoint_after: Option<std::time::Duration>,
}

/// One operation of a write batch.
#[derive(Debug, Clone, Copy)]
pub enum BatchOp<'a> {
    /// Set a key to a value.
    Put(&'a [u8], &'a [u8]),
    /// Remove a key.
    Delete(&'a [u8]),
}

/// What one [`Engine::scan`] returned.
///
/// Every engine reads each value it returns through [`ScanResult::add_value`],
/// which hashes all of the value's bytes, as a client that uses the values
/// does (YCSB's clients copy them out); Badger's Go driver, which scans in
/// Go, hashes them there (CRC-32C) and leaves `value_digest` at 0. An
/// engine that hands out values in place (RocksDB, LevelDB, Badger) would
/// otherwise be measured for a scan whose values nobody reads, and one that
/// copies them or checks their checksums (sepkv) for one that does.
#[derive(Debug, Clone, Default)]
pub struct ScanResult {
    /// Entries returned.
    pub entries: u64,
    /// Key bytes returned.
    pub key_bytes: u64,
    /// Value bytes returned.
    pub value_bytes: u64,
    /// XOR of the 64-bit XXH3 of every value returned: proof that each
    /// value's bytes were read.
    pub value_digest: u64,
    /// The last key returned (empty when nothing was).
    pub last_key: Vec<u8>,
}

impl ScanResult {
    /// Resets the result for reuse, keeping the key buffer's capacity.
    pub fn clear(&mut self) {
        self.entries = 0;
        self.key_bytes = 0;
        self.value_bytes = 0;
        self.value_digest = 0;
        self.last_key.clear();
    }

    /// Counts a returned value and reads all of its bytes (its XXH3 goes
    /// into [`ScanResult::value_digest`]).
    pub fn add_value(&mut self, value: &[u8]) {
        self.value_bytes += value.len() as u64;
        // `black_box`: nothing reads the digest, and the hash must not be
        // optimised away.
        self.value_digest ^= std::hint::black_box(xxhash_rust::xxh3::xxh3_64(value));
    }
}

/// The kinds of [`ChunkOp`].
pub mod chunk_kind {
    /// Set the key to the value.
    pub const PUT: u32 = 1;
    /// Remove the key.
    pub const DELETE: u32 = 2;
    /// Read the key's value.
    pub const GET: u32 = 3;
    /// Read up to `scan_len` entries from the first key at or after the key.
    pub const SCAN: u32 = 4;
}

/// One operation of a [`Chunk`]: its kind ([`chunk_kind`]) and where its
/// key and value lie in the chunk's bytes. `repr(C)`: engines driven
/// through a C ABI read it as it is.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ChunkOp {
    /// One of [`chunk_kind`].
    pub kind: u32,
    /// Entries to read ([`chunk_kind::SCAN`] only).
    pub scan_len: u32,
    /// Offset of the key in [`Chunk::bytes`].
    pub key_off: u64,
    /// Key length in bytes.
    pub key_len: u64,
    /// Offset of the value in [`Chunk::bytes`] ([`chunk_kind::PUT`] only).
    pub value_off: u64,
    /// Value length in bytes.
    pub value_len: u64,
}

/// What one [`ChunkOp`] did. `repr(C)`, as [`ChunkOp`].
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChunkOutcome {
    /// How long the operation took, in nanoseconds.
    pub nanos: u64,
    /// 1 when a get found its key, else 0.
    pub found: u64,
    /// Bytes read: the value of a get, keys and values of a scan.
    pub bytes: u64,
    /// Entries a scan read.
    pub entries: u64,
}

/// A run of operations handed to an engine at once
/// ([`Engine::run_chunk`]): their keys and values side by side in one
/// buffer.
#[derive(Debug, Default)]
pub struct Chunk {
    bytes: Vec<u8>,
    ops: Vec<ChunkOp>,
}

impl Chunk {
    /// The operations, in order.
    pub fn ops(&self) -> &[ChunkOp] {
        &self.ops
    }

    /// The buffer the operations' keys and values lie in.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The key of `op`.
    pub fn key(&self, op: &ChunkOp) -> &[u8] {
        &self.bytes[op.key_off as usize..(op.key_off + op.key_len) as usize]
    }

    /// The value of `op` (empty but for puts).
    pub fn value(&self, op: &ChunkOp) -> &[u8] {
        &self.bytes[op.value_off as usize..(op.value_off + op.value_len) as usize]
    }

    /// Operations in the chunk.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// True when the chunk holds no operation.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Empties the chunk, keeping its buffers.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.ops.clear();
    }

    /// Appends an operation of `kind` on `key` (and `value`).
    pub fn push(&mut self, kind: u32, key: &[u8], value: &[u8], scan_len: u32) {
        let key_off = self.bytes.len() as u64;
        self.bytes.extend_from_slice(key);
        let value_off = self.bytes.len() as u64;
        self.bytes.extend_from_slice(value);
        self.ops.push(ChunkOp {
            kind,
            scan_len,
            key_off,
            key_len: key.len() as u64,
            value_off,
            value_len: value.len() as u64,
        });
    }
}

/// Bytes an engine read from and wrote to its files since it was opened,
/// by the engine's own categories (for sepkv: `wal`, `manifest`, `flush`,
/// `compaction`, `user_read`, `value_store`, `gc`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct EngineIo {
    /// Bytes read, by category.
    pub read: BTreeMap<String, u64>,
    /// Bytes written, by category.
    pub written: BTreeMap<String, u64>,
}

impl EngineIo {
    /// Total bytes read.
    pub fn total_read(&self) -> u64 {
        self.read.values().sum()
    }

    /// Total bytes written.
    pub fn total_written(&self) -> u64 {
        self.written.values().sum()
    }

    /// The bytes counted since `before` (per category, saturating at zero).
    pub fn since(&self, before: &EngineIo) -> EngineIo {
        let diff = |now: &BTreeMap<String, u64>, then: &BTreeMap<String, u64>| {
            now.iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.saturating_sub(then.get(k).copied().unwrap_or(0)),
                    )
                })
                .collect()
        };
        EngineIo {
            read: diff(&self.read, &before.read),
            written: diff(&self.written, &before.written),
        }
    }
}

/// A point-in-time report of an engine.
#[derive(Debug, Clone, Default)]
pub struct EngineStats {
    /// File I/O since the engine was opened (bytes).
    pub io: EngineIo,
    /// Other engine counters since it was opened (flushes, compactions,
    /// stall µs, ...), by name; units are in the names where they matter.
    pub counters: BTreeMap<String, u64>,
}

/// A key-value store under test. All sizes are bytes.
pub trait Engine: Send + Sync {
    /// The label used in reports, for example `sepkv:leveldb`.
    fn label(&self) -> &str;

    /// Sets `key` to `value` (durable before returning when opened with
    /// [`EngineOptions::sync`]).
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()>;

    /// Reads `key` into `buf` (replacing its contents); `false` when the
    /// key is missing.
    fn get(&self, key: &[u8], buf: &mut Vec<u8>) -> Result<bool>;

    /// Removes `key` (a missing key is not an error).
    fn delete(&self, key: &[u8]) -> Result<()>;

    /// Applies `ops` atomically.
    fn write_batch(&self, ops: &[BatchOp<'_>]) -> Result<()>;

    /// Positions at the first key `>= start` and reads up to `n` entries in
    /// key order into `out` (cleared first).
    fn scan(&self, start: &[u8], n: usize, out: &mut ScanResult) -> Result<()>;

    /// Writes buffered data (memtables) to files and waits for it and for
    /// the background work it triggers (compactions), so the next phase
    /// starts clean.
    fn flush(&self) -> Result<()>;

    /// The engine's I/O accounting and counters.
    fn stats(&self) -> Result<EngineStats>;

    /// Runs value-store garbage collection on demand, where the engine has
    /// such a call (sepkv: one pass of `Db::gc`). The default: nothing
    /// (the peers collect in their compactions).
    fn gc(&self) -> Result<()> {
        Ok(())
    }

    /// True when [`EngineStats::io`] is measured by the engine itself
    /// (sepkv). False, the default (the peers): the harness then bills the
    /// process's storage I/O (`/proc/self/io`) as the engine's, under the
    /// category `process`.
    fn io_accounting(&self) -> bool {
        false
    }

    /// The database directory.
    fn path(&self) -> &Path;

    /// Bytes the database occupies on the device (allocated blocks, like
    /// `du`). The default walks [`Engine::path`].
    fn disk_usage(&self) -> Result<u64> {
        dir_allocated_bytes(self.path()).map_err(|e| BenchError::io(self.path(), e))
    }

    /// The configuration in effect, for the JSON report.
    fn settings(&self) -> serde_json::Value;

    /// True when the engine's reads bypass the page cache (direct I/O).
    fn direct_io(&self) -> bool {
        false
    }

    /// Remarks for the report, such as a requested option the engine ignored.
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }

    /// How many operations the harness hands this engine at once through
    /// [`Engine::run_chunk`]; 1 (the default) means one call per
    /// operation, timed by the harness.
    fn chunk_len(&self) -> usize {
        1
    }

    /// Runs the chunk's operations in order, pushing one outcome per
    /// operation onto `out` (cleared first), each timed by the engine.
    /// The default runs each through the per-operation calls.
    fn run_chunk(&self, chunk: &Chunk, out: &mut Vec<ChunkOutcome>) -> Result<()> {
        out.clear();
        let mut buf = Vec::new();
        let mut res = ScanResult::default();
        for op in chunk.ops() {
            let key = chunk.key(op);
            let t0 = std::time::Instant::now();
            let mut o = ChunkOutcome::default();
            match op.kind {
                chunk_kind::PUT => self.put(key, chunk.value(op))?,
                chunk_kind::DELETE => self.delete(key)?,
                chunk_kind::GET => {
                    if self.get(key, &mut buf)? {
                        o.found = 1;
                        o.bytes = buf.len() as u64;
                    }
                }
                chunk_kind::SCAN => {
                    self.scan(key, op.scan_len as usize, &mut res)?;
                    o.bytes = res.key_bytes + res.value_bytes;
                    o.entries = res.entries;
                }
                k => {
                    return Err(BenchError::InvalidArgument(format!(
                        "internal: unknown chunk operation {k}"
                    )))
                }
            }
            o.nanos = t0.elapsed().as_nanos() as u64;
            out.push(o);
        }
        Ok(())
    }

    /// Shuts the engine down cleanly.
    fn close(self: Box<Self>) -> Result<()>;
}

/// Opens engines of one kind and configuration on empty directories.
pub trait EngineFactory: Send + Sync {
    /// The label of the engines it opens (also used to name directories).
    fn label(&self) -> String;

    /// Opens (creating) an engine in `dir`.
    fn open(&self, dir: &Path, opts: &EngineOptions) -> Result<Box<dyn Engine>>;
}
