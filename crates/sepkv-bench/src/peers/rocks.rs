//! RocksDB behind the [`Engine`] trait (cargo feature `rocksdb`):
//! `rocksdb` (leveled LSM-tree) and `rocksdb-blob` (integrated BlobDB,
//! values of at least 128 bytes in blob files, blob GC on).
//!
//! Through the `rocksdb` crate 0.20, whose C bindings match RocksDB 7.8 and
//! 7.9: either a system library (`ROCKSDB_LIB_DIR` and
//! `ROCKSDB_INCLUDE_DIR`, as `scripts/build-rocksdb-peers.sh` sets them for
//! the distribution's RocksDB 7.8.3) or the crate's bundled RocksDB 7.9.2,
//! built from C++ sources when those variables are unset. The library's
//! version is read back from the `OPTIONS` file RocksDB writes at open
//! ([`RocksEngine::rocksdb_version`]).

use super::{PROCESS_IO_NOTE, SEPKV_BLOCK_CACHE, SEPKV_VALUE_THRESHOLD};
use crate::contract::{BatchOp, Engine, EngineIo, EngineOptions, EngineStats, ScanResult};
use crate::error::{BenchError, Result};
use rocksdb::{BlockBasedOptions, Cache, DBCompressionType, Options, WriteBatch, WriteOptions, DB};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// sepkv's default memtable size, used as RocksDB's write buffer size.
const WRITE_BUFFER_SIZE: usize = 8 << 20;
/// The longest [`RocksEngine::flush`] waits for background work.
const IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// RocksDB with the default column family.
pub struct RocksEngine {
    db: DB,
    label: String,
    blob: bool,
    write: bool,
    direct_io_requested: bool,
    path: PathBuf,
    version: Option<String>,
}

impl RocksEngine {
    /// Opens RocksDB in `dir`; `blob` turns on integrated BlobDB.
    ///
    /// # Errors
    /// [`BenchError::Unavailable`] in a debug build; RocksDB's error when
    /// opening fails.
    pub fn open(dir: &Path, blob: bool, opts: &EngineOptions) -> Result<Self> {
        let label = format!(
            "{}{}",
            if blob { "rocksdb-blob" } else { "rocksdb" },
            if opts.direct_io { "+direct" } else { "" }
        );
        if cfg!(debug_assertions) {
            return Err(BenchError::Unavailable(format!(
                "engine {label} refuses to run in a debug build: build sepkv with --release"
            )));
        }
        let mut o = Options::default();
        o.create_if_missing(true);
        o.set_compression_type(DBCompressionType::None);
        o.set_write_buffer_size(WRITE_BUFFER_SIZE);
        o.increase_parallelism(2);
        let mut t = BlockBasedOptions::default();
        let cache = Cache::new_lru_cache(SEPKV_BLOCK_CACHE as usize)
            .map_err(|e| BenchError::engine(&label, e))?;
        t.set_block_cache(&cache);
        t.set_block_size(4096);
        t.set_bloom_filter(10.0, false);
        o.set_block_based_table_factory(&t);
        if blob {
            o.set_enable_blob_files(true);
            o.set_min_blob_size(u64::from(SEPKV_VALUE_THRESHOLD));
            o.set_enable_blob_gc(true);
            o.set_blob_compression_type(DBCompressionType::None);
        }
        if opts.direct_io {
            // O_DIRECT for user reads and compaction input: reads then come
            // from the device (or RocksDB's block cache), not the page cache.
            o.set_use_direct_reads(true);
        }
        let db = DB::open(&o, dir).map_err(|e| BenchError::engine(&label, e))?;
        Ok(RocksEngine {
            db,
            label,
            blob,
            write: opts.sync,
            direct_io_requested: opts.direct_io,
            path: dir.to_path_buf(),
            version: options_file_version(dir),
        })
    }

    /// The version of the RocksDB library that opened the database (for
    /// example `7.8.3`), as RocksDB recorded it in its newest `OPTIONS`
    /// file; `None` when no such file or line was found.
    pub fn rocksdb_version(&self) -> Option<&str> {
        self.version.as_deref()
    }

    fn err(&self, e: rocksdb::Error) -> BenchError {
        BenchError::engine(&self.label, e)
    }

    fn wopts(&self) -> WriteOptions {
        let mut w = WriteOptions::default();
        w.set_sync(self.write);
        w
    }

    fn prop(&self, name: &str) -> u64 {
        self.db.property_int_value(name).ok().flatten().unwrap_or(0)
    }
}

impl Engine for RocksEngine {
    fn label(&self) -> &str {
        &self.label
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.db
            .put_opt(key, value, &self.wopts())
            .map_err(|e| self.err(e))
    }

    fn get(&self, key: &[u8], buf: &mut Vec<u8>) -> Result<bool> {
        buf.clear();
        match self.db.get_pinned(key).map_err(|e| self.err(e))? {
            Some(v) => {
                buf.extend_from_slice(&v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.db
            .delete_opt(key, &self.wopts())
            .map_err(|e| self.err(e))
    }

    fn write_batch(&self, ops: &[BatchOp<'_>]) -> Result<()> {
        let mut b = WriteBatch::default();
        for op in ops {
            match *op {
                BatchOp::Put(k, v) => b.put(k, v),
                BatchOp::Delete(k) => b.delete(k),
            }
        }
        self.db.write_opt(b, &self.wopts()).map_err(|e| self.err(e))
    }

    fn scan(&self, start: &[u8], n: usize, out: &mut ScanResult) -> Result<()> {
        out.clear();
        let mut it = self.db.raw_iterator();
        it.seek(start);
        while it.valid() && (out.entries as usize) < n {
            if let (Some(k), Some(v)) = (it.key(), it.value()) {
                out.entries += 1;
                out.key_bytes += k.len() as u64;
                out.add_value(v);
                out.last_key.clear();
                out.last_key.extend_from_slice(k);
            }
            it.next();
        }
        it.status().map_err(|e| self.err(e))
    }

    /// Flushes the memtable (waiting for it), syncs the WAL, then waits
    /// until RocksDB reports no pending or running flush and compaction.
    fn flush(&self) -> Result<()> {
        self.db.flush().map_err(|e| self.err(e))?;
        self.db.flush_wal(true).map_err(|e| self.err(e))?;
        let deadline = Instant::now() + IDLE_TIMEOUT;
        while Instant::now() < deadline {
            let busy = self.prop("rocksdb.num-running-compactions")
                + self.prop("rocksdb.compaction-pending")
                + self.prop("rocksdb.num-running-flushes")
                + self.prop("rocksdb.mem-table-flush-pending");
            if busy == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    fn stats(&self) -> Result<EngineStats> {
        let mut counters = BTreeMap::new();
        counters.insert(
            "engine_disk_bytes".into(),
            self.prop("rocksdb.total-sst-files-size") + self.prop("rocksdb.total-blob-file-size"),
        );
        counters.insert(
            "live_sst_bytes".into(),
            self.prop("rocksdb.live-sst-files-size"),
        );
        counters.insert("blob_files".into(), self.prop("rocksdb.num-blob-files"));
        counters.insert(
            "live_blob_bytes".into(),
            self.prop("rocksdb.live-blob-file-size"),
        );
        for l in 0..7 {
            counters.insert(
                format!("level{l}_files"),
                self.prop(&format!("rocksdb.num-files-at-level{l}")),
            );
        }
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
            "engine": "rocksdb",
            "crate": "rocksdb 0.20",
            "rocksdb_version": self.version,
            "blob_files": self.blob,
            "min_blob_size": self.blob.then_some(SEPKV_VALUE_THRESHOLD),
            "blob_gc": self.blob,
            "compression": "none",
            "block_cache_size": SEPKV_BLOCK_CACHE,
            "block_size": 4096,
            "bloom_bits_per_key": 10,
            "write_buffer_size": WRITE_BUFFER_SIZE,
            "background_threads": 2,
            "compaction": "leveled (RocksDB default)",
            "sync": self.write,
            "direct_io": self.direct_io_requested,
            "direct_io_scope": self.direct_io_requested.then_some("reads (use_direct_reads)"),
        })
    }

    fn direct_io(&self) -> bool {
        self.direct_io_requested
    }

    fn notes(&self) -> Vec<String> {
        let mut v = vec![format!("{}: {PROCESS_IO_NOTE}", self.label)];
        v.push(format!(
            "{}: RocksDB {} (rocksdb crate 0.20)",
            self.label,
            self.version.as_deref().unwrap_or("of unknown version")
        ));
        if self.direct_io_requested {
            v.push(format!(
                "{}: direct I/O for reads (use_direct_reads); writes, WAL and flushes stay buffered",
                self.label
            ));
        }
        v
    }

    fn close(self: Box<Self>) -> Result<()> {
        let label = self.label.clone();
        self.db
            .flush_wal(true)
            .map_err(|e| BenchError::engine(&label, e))?;
        drop(self.db);
        Ok(())
    }
}

/// The `rocksdb_version=` line of the newest `OPTIONS-<number>` file in
/// `dir` (RocksDB writes one at every open and options change).
fn options_file_version(dir: &Path) -> Option<String> {
    let newest = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let n: u64 = name.strip_prefix("OPTIONS-")?.parse().ok()?;
            Some((n, name))
        })
        .max()?;
    let text = std::fs::read_to_string(dir.join(newest.1)).ok()?;
    text.lines()
        .find_map(|l| l.trim().strip_prefix("rocksdb_version="))
        .map(|v| v.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::options_file_version;

    #[test]
    fn version_comes_from_the_newest_options_file() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, version: &str| {
            let text =
                format!("[Version]\n  rocksdb_version={version}\n  options_file_version=1.1\n");
            std::fs::write(dir.path().join(name), text).unwrap();
        };
        assert_eq!(options_file_version(dir.path()), None);
        write("OPTIONS-000012", "7.8.3");
        // Older by number though later by name.
        write("OPTIONS-9", "6.0.0");
        write("OPTIONS-000012.dbtmp", "1.0.0");
        assert_eq!(options_file_version(dir.path()).as_deref(), Some("7.8.3"));
        std::fs::write(dir.path().join("OPTIONS-000013"), "[Version]\n").unwrap();
        assert_eq!(options_file_version(dir.path()), None);
    }

    #[test]
    fn rocksdb_records_the_version_it_runs() {
        let dir = tempfile::tempdir().unwrap();
        let mut o = rocksdb::Options::default();
        o.create_if_missing(true);
        let db = rocksdb::DB::open(&o, dir.path()).unwrap();
        db.put(b"k", b"v").unwrap();
        let v = options_file_version(dir.path()).expect("a rocksdb_version line");
        let parts: Vec<&str> = v.split('.').collect();
        assert_eq!(parts.len(), 3, "{v}");
        assert!(parts.iter().all(|p| p.parse::<u32>().is_ok()), "{v}");
        // The crate binds the C API of RocksDB 7.8 and 7.9.
        assert!(v.starts_with("7.8.") || v.starts_with("7.9."), "{v}");
    }
}
