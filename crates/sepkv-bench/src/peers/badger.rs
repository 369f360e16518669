//! Badger v4 (Go), the production WiscKey, behind the [`Engine`] trait
//! (cargo feature `badger`): `badger` (Badger's default `ValueThreshold`,
//! 1 MiB, so values stay in its LSM-tree) and `badger-kv` (threshold
//! 128 B, values of at least 128 bytes in its value log).
//!
//! The driver (`badger/driver.go`) is built by the crate's build script as
//! a static library and linked into this process: the harness generates,
//! times and accounts for every operation as it does for every engine,
//! calling Badger through the C ABI. Running it in-process keeps a
//! round trip to another process out of every operation's latency, and
//! lets the process I/O counters and the memory cgroup of device-bound
//! runs cover Badger as they cover the other peers.

use super::{PROCESS_IO_NOTE, SEPKV_BLOCK_CACHE, SEPKV_VALUE_THRESHOLD};
use crate::contract::{
    BatchOp, Chunk, ChunkOp, ChunkOutcome, Engine, EngineIo, EngineOptions, EngineStats, ScanResult,
};
use crate::error::{BenchError, Result};
use serde_json::json;
use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, CStr, CString};
use std::path::{Path, PathBuf};

/// sepkv's default memtable size, used as Badger's `MemTableSize`.
const MEMTABLE_SIZE: i64 = 8 << 20;
/// Badger's `ValueLogFileSize`: sepkv's default `vlog_file_size` until
/// 2026-11-27 (64 MiB since), kept so that Badger's figures stay
/// comparable with the earlier runs (value-log GC rewrites whole files:
/// Badger's default, 1 GiB, would leave nothing collectable at the sizes
/// benchmarked here).
const VLOG_FILE_SIZE: i64 = 256 << 20;
/// Badger's default `ValueThreshold` (1 MiB), reported for `badger`.
const DEFAULT_VALUE_THRESHOLD: u64 = 1 << 20;
/// The discard ratio of value-log GC (the driver's `gcDiscardRatio`).
const GC_DISCARD_RATIO: f64 = 0.5;
/// Operations the harness hands the driver at once ([`Engine::run_chunk`]).
/// The driver runs a chunk on a goroutine of its own and times each
/// operation there: a call from another thread into Go stays bound to that
/// thread, so each wait inside Badger (every write waits for its writer
/// goroutine) would cost two thread switches if run in the call itself.
const CHUNK_LEN: usize = 64;
/// Figures `sepkv_badger_stats` writes, and their counter names.
const STAT_NAMES: [&str; 10] = [
    "tables",
    "level0_tables",
    "table_bytes",
    "vlog_gc_runs",
    "vlog_gc_rewrites",
    "l0_bytes_written",
    "compaction_bytes_written",
    "vlog_bytes_written",
    "vlog_bytes_read",
    "lsm_bytes_read",
];

extern "C" {
    fn sepkv_badger_open(
        dir: *const c_char,
        value_threshold: i64,
        sync_writes: c_int,
        cache_bytes: i64,
        vlog_file_size: i64,
        memtable_bytes: i64,
        handle: *mut i64,
    ) -> *mut c_char;
    fn sepkv_badger_put(h: i64, k: *const u8, kn: usize, v: *const u8, vn: usize) -> *mut c_char;
    fn sepkv_badger_delete(h: i64, k: *const u8, kn: usize) -> *mut c_char;
    fn sepkv_badger_get(
        h: i64,
        k: *const u8,
        kn: usize,
        buf: *mut u8,
        cap: usize,
        found: *mut c_int,
        vlen: *mut usize,
    ) -> *mut c_char;
    fn sepkv_badger_write(h: i64, p: *const u8, n: usize) -> *mut c_char;
    #[allow(clippy::too_many_arguments)]
    fn sepkv_badger_scan(
        h: i64,
        s: *const u8,
        sn: usize,
        n: usize,
        entries: *mut u64,
        key_bytes: *mut u64,
        value_bytes: *mut u64,
        last: *mut u8,
        last_cap: usize,
        last_len: *mut usize,
    ) -> *mut c_char;
    fn sepkv_badger_run(
        h: i64,
        p: *const u8,
        pn: usize,
        ops: *const ChunkOp,
        n: usize,
        out: *mut ChunkOutcome,
    ) -> *mut c_char;
    fn sepkv_badger_flush(h: i64) -> *mut c_char;
    fn sepkv_badger_stats(h: i64, out: *mut i64) -> *mut c_char;
    fn sepkv_badger_close(h: i64) -> *mut c_char;
    fn sepkv_badger_free(p: *mut c_char);
}

/// Turns the driver's error string (null: success) into a result, and
/// releases it.
fn check(label: &str, what: &str, e: *mut c_char) -> Result<()> {
    if e.is_null() {
        return Ok(());
    }
    // SAFETY: a non-null return is a NUL-terminated string the driver
    // allocated with C.CString; it is read once, then freed by the driver.
    let msg = unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned();
    // SAFETY: as above; not used after this call.
    unsafe { sepkv_badger_free(e) };
    Err(BenchError::engine(
        label,
        DriverError(format!("{what}: {msg}")),
    ))
}

/// An error Badger or its driver reported.
#[derive(Debug)]
struct DriverError(String);

impl std::fmt::Display for DriverError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DriverError {}

/// The address of `s` for the driver: null when empty. An empty slice's
/// dangling address (such as 0x1) must never reach Go, whose garbage
/// collector aborts the process on finding it in a pointer.
fn ptr(s: &[u8]) -> *const u8 {
    if s.is_empty() {
        std::ptr::null()
    } else {
        s.as_ptr()
    }
}

/// The spare capacity of `v` for the driver to write into: null when
/// there is none (see [`ptr`]).
fn spare(v: &mut Vec<u8>) -> *mut u8 {
    if v.capacity() == 0 {
        std::ptr::null_mut()
    } else {
        v.as_mut_ptr()
    }
}

/// A Badger database opened through the driver.
pub struct BadgerEngine {
    handle: i64,
    label: String,
    kv: bool,
    sync: bool,
    direct_io_requested: bool,
    path: PathBuf,
}

impl BadgerEngine {
    /// Opens Badger in `dir`; `kv` sets the value threshold to 128 B
    /// (otherwise Badger's default, 1 MiB).
    ///
    /// # Errors
    /// [`BenchError::Unavailable`] in a debug build; Badger's error when
    /// opening fails; [`BenchError::InvalidArgument`] for a path with a
    /// NUL byte.
    pub fn open(dir: &Path, kv: bool, opts: &EngineOptions) -> Result<Self> {
        let label = if kv { "badger-kv" } else { "badger" }.to_string();
        if cfg!(debug_assertions) {
            return Err(BenchError::Unavailable(format!(
                "engine {label} refuses to run in a debug build: build sepkv with --release"
            )));
        }
        let cdir = CString::new(dir.as_os_str().as_encoded_bytes()).map_err(|_| {
            BenchError::InvalidArgument(format!("{}: a path with a NUL byte", dir.display()))
        })?;
        let threshold = if kv {
            i64::from(SEPKV_VALUE_THRESHOLD)
        } else {
            0
        };
        let mut handle = 0i64;
        // SAFETY: every pointer is valid for the call; the driver copies
        // the path before it returns.
        let e = unsafe {
            sepkv_badger_open(
                cdir.as_ptr(),
                threshold,
                c_int::from(opts.sync),
                SEPKV_BLOCK_CACHE as i64,
                VLOG_FILE_SIZE,
                MEMTABLE_SIZE,
                &mut handle,
            )
        };
        check(&label, "open", e)?;
        Ok(BadgerEngine {
            handle,
            label,
            kv,
            sync: opts.sync,
            direct_io_requested: opts.direct_io,
            path: dir.to_path_buf(),
        })
    }
}

impl Engine for BadgerEngine {
    fn label(&self) -> &str {
        &self.label
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        // SAFETY: the slices are valid for the call; the driver copies them.
        let e =
            unsafe { sepkv_badger_put(self.handle, ptr(key), key.len(), ptr(value), value.len()) };
        check(&self.label, "put", e)
    }

    fn get(&self, key: &[u8], buf: &mut Vec<u8>) -> Result<bool> {
        loop {
            let (mut found, mut len) = (0 as c_int, 0usize);
            buf.clear();
            // SAFETY: the driver writes at most `capacity` bytes into the
            // buffer's spare capacity, and `len` says how long the value is.
            let e = unsafe {
                sepkv_badger_get(
                    self.handle,
                    ptr(key),
                    key.len(),
                    spare(buf),
                    buf.capacity(),
                    &mut found,
                    &mut len,
                )
            };
            check(&self.label, "get", e)?;
            if found == 0 {
                return Ok(false);
            }
            if len <= buf.capacity() {
                // SAFETY: the driver copied `len` bytes of value into the
                // buffer (it fits), initialising them.
                unsafe { buf.set_len(len) };
                return Ok(true);
            }
            // Too long for the buffer: look it up again with room for it.
            buf.reserve(len);
        }
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        // SAFETY: the slice is valid for the call; the driver copies it.
        let e = unsafe { sepkv_badger_delete(self.handle, ptr(key), key.len()) };
        check(&self.label, "delete", e)
    }

    fn write_batch(&self, ops: &[BatchOp<'_>]) -> Result<()> {
        let mut b = Vec::new();
        for op in ops {
            let (code, k, v): (u8, &[u8], &[u8]) = match *op {
                BatchOp::Put(k, v) => (1, k, v),
                BatchOp::Delete(k) => (2, k, &[]),
            };
            b.push(code);
            b.extend_from_slice(&(k.len() as u32).to_le_bytes());
            b.extend_from_slice(&(v.len() as u32).to_le_bytes());
            b.extend_from_slice(k);
            b.extend_from_slice(v);
        }
        // SAFETY: the buffer is valid for the call; the driver copies it.
        let e = unsafe { sepkv_badger_write(self.handle, ptr(&b), b.len()) };
        check(&self.label, "write batch", e)
    }

    fn scan(&self, start: &[u8], n: usize, out: &mut ScanResult) -> Result<()> {
        out.clear();
        loop {
            let mut last_len = 0usize;
            let cap = out.last_key.capacity().max(64);
            out.last_key.reserve(cap);
            // SAFETY: the out-parameters are valid; the driver writes at most
            // `capacity` bytes of the last key into the key buffer.
            let e = unsafe {
                sepkv_badger_scan(
                    self.handle,
                    ptr(start),
                    start.len(),
                    n,
                    &mut out.entries,
                    &mut out.key_bytes,
                    &mut out.value_bytes,
                    spare(&mut out.last_key),
                    out.last_key.capacity(),
                    &mut last_len,
                )
            };
            check(&self.label, "scan", e)?;
            if last_len <= out.last_key.capacity() {
                // SAFETY: the driver copied the `last_len` bytes of the last key.
                unsafe { out.last_key.set_len(last_len) };
                return Ok(());
            }
            // A last key longer than the buffer: scan again with room.
            out.clear();
            out.last_key.reserve(last_len);
        }
    }

    fn chunk_len(&self) -> usize {
        CHUNK_LEN
    }

    fn run_chunk(&self, chunk: &Chunk, out: &mut Vec<ChunkOutcome>) -> Result<()> {
        let n = chunk.len();
        out.clear();
        out.resize(n, ChunkOutcome::default());
        if n == 0 {
            return Ok(());
        }
        // SAFETY: the chunk's bytes and operations are valid for the call
        // (the driver copies them); the driver writes exactly `n` outcomes,
        // `repr(C)` as its own mirror of the type.
        let e = unsafe {
            sepkv_badger_run(
                self.handle,
                ptr(chunk.bytes()),
                chunk.bytes().len(),
                chunk.ops().as_ptr(),
                n,
                out.as_mut_ptr(),
            )
        };
        check(&self.label, "run", e)
    }

    /// Syncs, waits for compactions to stay idle for 200 ms, then runs
    /// value-log GC (discard ratio 0.5) until a run rewrites nothing.
    /// Badger has no call to write its memtable out: up to
    /// [`MEMTABLE_SIZE`] bytes per memtable stay in memory (durable in
    /// their write-ahead `.mem` files), and are written to tables in a
    /// later phase or at close.
    fn flush(&self) -> Result<()> {
        // SAFETY: plain call with the handle.
        let e = unsafe { sepkv_badger_flush(self.handle) };
        check(&self.label, "flush", e)
    }

    fn stats(&self) -> Result<EngineStats> {
        let mut v = [0i64; STAT_NAMES.len()];
        // SAFETY: the driver writes exactly STAT_NAMES.len() figures.
        let e = unsafe { sepkv_badger_stats(self.handle, v.as_mut_ptr()) };
        check(&self.label, "stats", e)?;
        let counters: BTreeMap<String, u64> = STAT_NAMES
            .iter()
            .zip(v)
            .map(|(n, x)| (n.to_string(), x.max(0) as u64))
            .collect();
        Ok(EngineStats {
            io: EngineIo::default(),
            counters,
        })
    }

    fn path(&self) -> &Path {
        &self.path
    }

    fn settings(&self) -> serde_json::Value {
        json!({
            "engine": "badger",
            "version": "4.9.6 (Go, linked in-process)",
            "value_threshold": if self.kv { u64::from(SEPKV_VALUE_THRESHOLD) } else { DEFAULT_VALUE_THRESHOLD },
            "value_threshold_source": if self.kv { "set to sepkv's value_threshold" } else { "Badger's default" },
            "value_log_file_size": VLOG_FILE_SIZE,
            "vlog_gc": {
                "when": "every second in a background goroutine, and at every harness flush (end of phase), each time until a run rewrites nothing",
                "discard_ratio": GC_DISCARD_RATIO,
            },
            "compression": "none",
            "block_cache_size": SEPKV_BLOCK_CACHE,
            "memtable_size": MEMTABLE_SIZE,
            "num_memtables": 5,
            "block_size": 4096,
            "bloom_false_positive": 0.01,
            "compaction": "leveled (Badger default: 4 compactors, 5 level-0 tables, stall at 15)",
            "sync": self.sync,
            "writes": "one read-write transaction per put, delete or batch",
            "operations": format!("in chunks of {CHUNK_LEN}, each run and timed on a goroutine of the driver; one call per operation in readseq, readwhilewriting and trace replays"),
            "direct_io": false,
        })
    }

    fn notes(&self) -> Vec<String> {
        let mut v = vec![
            format!("{}: {PROCESS_IO_NOTE}", self.label),
            format!(
                "{}: operations run in chunks of {CHUNK_LEN} on a goroutine of the driver, each timed \
                 there; readseq, readwhilewriting and trace replays call once per operation, and each \
                 write then costs two thread switches more than Badger called from Go",
                self.label
            ),
            format!(
                "{}: Badger cannot be told to write its memtable out: at the end of a phase up to \
                 {} MiB per memtable stay in memory (durable in their .mem write-ahead files) and are \
                 counted in a later phase",
                self.label,
                MEMTABLE_SIZE >> 20
            ),
        ];
        if self.direct_io_requested {
            v.push(format!(
                "{}: direct I/O was requested but is not supported: this run used buffered I/O",
                self.label
            ));
        }
        v
    }

    fn close(mut self: Box<Self>) -> Result<()> {
        let h = std::mem::take(&mut self.handle);
        // SAFETY: plain call; the handle was taken and is not used again.
        let e = unsafe { sepkv_badger_close(h) };
        check(&self.label, "close", e)
    }
}

impl Drop for BadgerEngine {
    /// Closes a database dropped without [`Engine::close`] (after an
    /// error), so that its files and goroutines do not outlive it.
    fn drop(&mut self) {
        if self.handle != 0 {
            // SAFETY: plain call; the handle is not used again.
            let e = unsafe { sepkv_badger_close(std::mem::take(&mut self.handle)) };
            let _ = check(&self.label, "close", e);
        }
    }
}
