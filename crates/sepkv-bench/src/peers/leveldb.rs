//! LevelDB behind the [`Engine`] trait (cargo feature `leveldb`): Google's
//! C++ LevelDB 1.22 as bundled and built by the `leveldb-sys` crate, driven
//! through its C API (`leveldb/c.h`). Compression off, sepkv's block cache
//! size, memtable size and bloom filter (10 bits per key, LevelDB's own
//! filter policy), default block size (4 KiB).
//!
//! The C API exposes no flush, so [`Engine::flush`] makes the log durable
//! with a synced empty write; the memtable stays in the log until LevelDB
//! compacts it, as it would for any LevelDB user. The engine reports no
//! counters of its own.

use super::{PROCESS_IO_NOTE, SEPKV_BLOCK_CACHE};
use crate::contract::{BatchOp, Engine, EngineIo, EngineOptions, EngineStats, ScanResult};
use crate::error::{BenchError, Result};
use leveldb_sys as c;
use serde_json::json;
use std::collections::BTreeMap;
use std::ffi::{c_char, CStr, CString};
use std::io;
use std::path::{Path, PathBuf};
use std::ptr;

/// sepkv's default memtable size, used as LevelDB's write buffer size.
const WRITE_BUFFER_SIZE: usize = 8 << 20;

/// Bloom filter bits per key: sepkv's default (`Options::bloom_bits_per_key`)
/// and the RocksDB peers'.
const BLOOM_BITS_PER_KEY: i32 = 10;

/// LevelDB with one database per directory.
pub struct LevelDbEngine {
    db: *mut c::leveldb_t,
    options: *mut c::leveldb_options_t,
    cache: *mut c::leveldb_cache_t,
    filter: *mut c::leveldb_filterpolicy_t,
    read: *mut c::leveldb_readoptions_t,
    write: *mut c::leveldb_writeoptions_t,
    synced: *mut c::leveldb_writeoptions_t,
    label: String,
    sync: bool,
    path: PathBuf,
}

// SAFETY: a LevelDB `DB` is safe for concurrent use by many threads without
// external synchronisation (LevelDB's documentation, "Concurrency"); the
// option objects are only read after open, and every other handle the
// engine creates (iterators, batches, returned values) stays within one call.
unsafe impl Send for LevelDbEngine {}
// SAFETY: see `Send`.
unsafe impl Sync for LevelDbEngine {}

/// Takes LevelDB's error string out of `err` (freeing it), if one was set.
fn take_error(err: *mut c_char) -> Option<String> {
    if err.is_null() {
        return None;
    }
    // SAFETY: LevelDB sets `err` to a NUL-terminated string it allocated
    // with malloc, to be released with `leveldb_free`.
    unsafe {
        let msg = CStr::from_ptr(err).to_string_lossy().into_owned();
        c::leveldb_free(err.cast());
        Some(msg)
    }
}

impl LevelDbEngine {
    /// Opens LevelDB in `dir`.
    ///
    /// # Errors
    /// [`BenchError::Unavailable`] in a debug build (LevelDB is then built
    /// without optimisations); LevelDB's error when opening fails.
    pub fn open(dir: &Path, opts: &EngineOptions) -> Result<Self> {
        let label = "leveldb".to_string();
        if cfg!(debug_assertions) {
            return Err(BenchError::Unavailable(format!(
                "engine {label} refuses to run in a debug build: build sepkv with --release"
            )));
        }
        let name = CString::new(dir.as_os_str().as_encoded_bytes()).map_err(|_| {
            BenchError::InvalidArgument(format!("database path {} holds a NUL byte", dir.display()))
        })?;
        // SAFETY: plain calls of LevelDB's C API; every object created here
        // is owned by the engine and destroyed in `Drop` (or below, when
        // the open fails), after the database that uses it.
        unsafe {
            let options = c::leveldb_options_create();
            c::leveldb_options_set_create_if_missing(options, 1);
            c::leveldb_options_set_write_buffer_size(options, WRITE_BUFFER_SIZE);
            c::leveldb_options_set_max_open_files(options, 1000);
            c::leveldb_options_set_compression(options, c::Compression::No);
            let cache = c::leveldb_cache_create_lru(SEPKV_BLOCK_CACHE as usize);
            c::leveldb_options_set_cache(options, cache);
            let filter = c::leveldb_filterpolicy_create_bloom(BLOOM_BITS_PER_KEY);
            c::leveldb_options_set_filter_policy(options, filter);
            let read = c::leveldb_readoptions_create();
            let write = c::leveldb_writeoptions_create();
            c::leveldb_writeoptions_set_sync(write, u8::from(opts.sync));
            let synced = c::leveldb_writeoptions_create();
            c::leveldb_writeoptions_set_sync(synced, 1);
            let mut err: *mut c_char = ptr::null_mut();
            let db = c::leveldb_open(options, name.as_ptr(), &mut err);
            let engine = LevelDbEngine {
                db,
                options,
                cache,
                filter,
                read,
                write,
                synced,
                label,
                sync: opts.sync,
                path: dir.to_path_buf(),
            };
            if let Some(msg) = take_error(err) {
                return Err(BenchError::engine(&engine.label, io::Error::other(msg)));
            }
            if db.is_null() {
                return Err(BenchError::engine(
                    &engine.label,
                    io::Error::other("open returned no database"),
                ));
            }
            Ok(engine)
        }
    }

    fn check(&self, err: *mut c_char) -> Result<()> {
        match take_error(err) {
            Some(msg) => Err(BenchError::engine(&self.label, io::Error::other(msg))),
            None => Ok(()),
        }
    }

    fn write_raw(&self, batch: *mut c::leveldb_writebatch_t, synced: bool) -> Result<()> {
        let wopts = if synced { self.synced } else { self.write };
        let mut err: *mut c_char = ptr::null_mut();
        // SAFETY: `db`, the options and `batch` are live LevelDB objects.
        unsafe { c::leveldb_write(self.db, wopts, batch, &mut err) };
        self.check(err)
    }
}

impl Drop for LevelDbEngine {
    fn drop(&mut self) {
        // SAFETY: the database closes first; then the objects it used,
        // each created once in `open` and destroyed once here.
        unsafe {
            if !self.db.is_null() {
                c::leveldb_close(self.db);
            }
            c::leveldb_options_destroy(self.options);
            c::leveldb_filterpolicy_destroy(self.filter);
            c::leveldb_cache_destroy(self.cache);
            c::leveldb_readoptions_destroy(self.read);
            c::leveldb_writeoptions_destroy(self.write);
            c::leveldb_writeoptions_destroy(self.synced);
        }
    }
}

/// A write batch destroyed on every path out of a call.
struct Batch(*mut c::leveldb_writebatch_t);

impl Drop for Batch {
    fn drop(&mut self) {
        // SAFETY: created by `leveldb_writebatch_create`, destroyed once.
        unsafe { c::leveldb_writebatch_destroy(self.0) }
    }
}

/// An iterator destroyed on every path out of a call.
struct Iter(*mut c::leveldb_iterator_t);

impl Drop for Iter {
    fn drop(&mut self) {
        // SAFETY: created by `leveldb_create_iterator`, destroyed once,
        // before the database closes (it lives within one call).
        unsafe { c::leveldb_iter_destroy(self.0) }
    }
}

impl Engine for LevelDbEngine {
    fn label(&self) -> &str {
        &self.label
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut err: *mut c_char = ptr::null_mut();
        // SAFETY: the slices outlive the call; LevelDB copies them.
        unsafe {
            c::leveldb_put(
                self.db,
                self.write,
                key.as_ptr().cast(),
                key.len(),
                value.as_ptr().cast(),
                value.len(),
                &mut err,
            )
        };
        self.check(err)
    }

    fn get(&self, key: &[u8], buf: &mut Vec<u8>) -> Result<bool> {
        buf.clear();
        let mut err: *mut c_char = ptr::null_mut();
        let mut len = 0usize;
        // SAFETY: LevelDB returns a malloc'd copy of the value (or null
        // when the key is missing or on error), released here.
        unsafe {
            let v = c::leveldb_get(
                self.db,
                self.read,
                key.as_ptr().cast(),
                key.len(),
                &mut len,
                &mut err,
            );
            self.check(err)?;
            if v.is_null() {
                return Ok(false);
            }
            buf.extend_from_slice(std::slice::from_raw_parts(v.cast::<u8>(), len));
            c::leveldb_free(v.cast());
        }
        Ok(true)
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        let mut err: *mut c_char = ptr::null_mut();
        // SAFETY: the key outlives the call.
        unsafe {
            c::leveldb_delete(
                self.db,
                self.write,
                key.as_ptr().cast(),
                key.len(),
                &mut err,
            )
        };
        self.check(err)
    }

    fn write_batch(&self, ops: &[BatchOp<'_>]) -> Result<()> {
        // SAFETY: a new batch, destroyed by `Batch`'s drop.
        let b = Batch(unsafe { c::leveldb_writebatch_create() });
        for op in ops {
            match *op {
                // SAFETY: `b.0` is live; the batch copies the key and value.
                BatchOp::Put(k, v) => unsafe {
                    c::leveldb_writebatch_put(
                        b.0,
                        k.as_ptr().cast(),
                        k.len(),
                        v.as_ptr().cast(),
                        v.len(),
                    )
                },
                // SAFETY: `b.0` is live; the batch copies the key.
                BatchOp::Delete(k) => unsafe {
                    c::leveldb_writebatch_delete(b.0, k.as_ptr().cast(), k.len())
                },
            }
        }
        self.write_raw(b.0, self.sync)
    }

    fn scan(&self, start: &[u8], n: usize, out: &mut ScanResult) -> Result<()> {
        out.clear();
        // SAFETY: the iterator lives within this call; the key and value
        // slices it hands out are valid until it moves, and are copied or
        // measured before that.
        unsafe {
            let it = Iter(c::leveldb_create_iterator(self.db, self.read));
            c::leveldb_iter_seek(it.0, start.as_ptr().cast(), start.len());
            while (out.entries as usize) < n && c::leveldb_iter_valid(it.0) != 0 {
                let (mut klen, mut vlen) = (0usize, 0usize);
                // The binding declares the length out-parameters `const`;
                // LevelDB writes them, so they come from mutable places.
                let k = c::leveldb_iter_key(it.0, (&raw mut klen).cast_const());
                let v = c::leveldb_iter_value(it.0, (&raw mut vlen).cast_const());
                out.entries += 1;
                out.key_bytes += klen as u64;
                out.add_value(std::slice::from_raw_parts(v.cast::<u8>(), vlen));
                out.last_key.clear();
                out.last_key
                    .extend_from_slice(std::slice::from_raw_parts(k.cast::<u8>(), klen));
                c::leveldb_iter_next(it.0);
            }
            let mut err: *const c_char = ptr::null();
            c::leveldb_iter_get_error(it.0, (&raw mut err).cast_const());
            self.check(err.cast_mut())?;
        }
        Ok(())
    }

    /// A synced empty batch: everything written so far is durable in the
    /// log. LevelDB's C API offers no memtable flush.
    fn flush(&self) -> Result<()> {
        // SAFETY: an empty batch, destroyed by `Batch`'s drop.
        let b = Batch(unsafe { c::leveldb_writebatch_create() });
        self.write_raw(b.0, true)
    }

    fn stats(&self) -> Result<EngineStats> {
        Ok(EngineStats {
            io: EngineIo::default(),
            counters: BTreeMap::new(),
        })
    }

    fn path(&self) -> &Path {
        &self.path
    }

    fn settings(&self) -> serde_json::Value {
        json!({
            "engine": "leveldb",
            "crate": "leveldb-sys 2 (bundled LevelDB 1.22, C API)",
            "compression": "none",
            "block_cache_size": SEPKV_BLOCK_CACHE,
            "block_size": 4096,
            "bloom_bits_per_key": BLOOM_BITS_PER_KEY,
            "write_buffer_size": WRITE_BUFFER_SIZE,
            "max_open_files": 1000,
            "sync": self.sync,
            "direct_io": false,
        })
    }

    fn notes(&self) -> Vec<String> {
        vec![format!("{}: {PROCESS_IO_NOTE}", self.label)]
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.flush()
        // The database closes as the engine drops.
    }
}
