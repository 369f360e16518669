//! LevelDB behind the [`Engine`] trait (cargo feature `leveldb`): Google's
//! C++ LevelDB 1.22 as bundled and built by the `leveldb-sys` crate, through
//! the `leveldb` crate's bindings. Compression off, sepkv's block cache
//! size and memtable size, default block size (4 KiB).
//!
//! The binding exposes no properties and no flush, so the engine reports
//! no counters of its own and [`Engine::flush`] makes the log durable with
//! a synced empty write; the memtable stays in the log until LevelDB
//! compacts it, as it would for any LevelDB user.

use super::{PROCESS_IO_NOTE, SEPKV_BLOCK_CACHE};
use crate::engine::{BatchOp, Engine, EngineIo, EngineOptions, EngineStats, ScanResult};
use crate::error::{BenchError, Result};
use leveldb::batch::{Batch, Writebatch};
use leveldb::database::cache::Cache;
use leveldb::database::Database;
use leveldb::iterator::{Iterable, LevelDBIterator};
use leveldb::kv::KV;
use leveldb::options::{Options, ReadOptions, WriteOptions};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// sepkv's default memtable size, used as LevelDB's write buffer size.
const WRITE_BUFFER_SIZE: usize = 8 << 20;

/// A key as the binding wants it: owned bytes.
pub struct Bytes(Vec<u8>);

impl db_key::Key for Bytes {
    fn from_u8(key: &[u8]) -> Self {
        Bytes(key.to_vec())
    }

    fn as_slice<T, F: Fn(&[u8]) -> T>(&self, f: F) -> T {
        f(&self.0)
    }
}

/// LevelDB with one database per directory.
pub struct LevelDbEngine {
    db: Database<Bytes>,
    label: String,
    sync: bool,
    path: PathBuf,
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
        let mut o = Options::new();
        o.create_if_missing = true;
        o.write_buffer_size = Some(WRITE_BUFFER_SIZE);
        o.cache = Some(Cache::new(SEPKV_BLOCK_CACHE as usize));
        o.max_open_files = Some(1000);
        let db = Database::open(dir, o).map_err(|e| BenchError::engine(&label, e))?;
        Ok(LevelDbEngine {
            db,
            label,
            sync: opts.sync,
            path: dir.to_path_buf(),
        })
    }

    fn err(&self, e: leveldb::error::Error) -> BenchError {
        BenchError::engine(&self.label, e)
    }

    fn wopts(&self) -> WriteOptions {
        let mut w = WriteOptions::new();
        w.sync = self.sync;
        w
    }
}

impl Engine for LevelDbEngine {
    fn label(&self) -> &str {
        &self.label
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.db
            .put(self.wopts(), Bytes(key.to_vec()), value)
            .map_err(|e| self.err(e))
    }

    fn get(&self, key: &[u8], buf: &mut Vec<u8>) -> Result<bool> {
        buf.clear();
        match self
            .db
            .get(ReadOptions::new(), Bytes(key.to_vec()))
            .map_err(|e| self.err(e))?
        {
            Some(v) => {
                buf.extend_from_slice(&v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.db
            .delete(self.wopts(), Bytes(key.to_vec()))
            .map_err(|e| self.err(e))
    }

    fn write_batch(&self, ops: &[BatchOp<'_>]) -> Result<()> {
        let mut b = Writebatch::new();
        for op in ops {
            match *op {
                BatchOp::Put(k, v) => b.put(Bytes(k.to_vec()), v),
                BatchOp::Delete(k) => b.delete(Bytes(k.to_vec())),
            }
        }
        self.db.write(self.wopts(), &b).map_err(|e| self.err(e))
    }

    fn scan(&self, start: &[u8], n: usize, out: &mut ScanResult) -> Result<()> {
        out.clear();
        let mut it = self.db.iter(ReadOptions::new());
        it.seek(&Bytes(start.to_vec()));
        // The first advance only marks the iterator started (it stays at
        // the seek position); later ones move it.
        while (out.entries as usize) < n && it.advance() {
            let (k, v) = it.entry();
            out.entries += 1;
            out.key_bytes += k.0.len() as u64;
            out.value_bytes += v.len() as u64;
            out.last_key.clear();
            out.last_key.extend_from_slice(&k.0);
        }
        Ok(())
    }

    /// A synced empty batch: everything written so far is durable in the
    /// log. LevelDB's binding offers no memtable flush.
    fn flush(&self) -> Result<()> {
        let mut w = WriteOptions::new();
        w.sync = true;
        self.db
            .write(w, &Writebatch::new())
            .map_err(|e| self.err(e))
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
            "crate": "leveldb 0.8 over leveldb-sys 2 (bundled LevelDB 1.22)",
            "compression": "none",
            "block_cache_size": SEPKV_BLOCK_CACHE,
            "block_size": 4096,
            "bloom_filter": false,
            "write_buffer_size": WRITE_BUFFER_SIZE,
            "max_open_files": 1000,
            "sync": self.sync,
            "direct_io": false,
        })
    }

    fn notes(&self) -> Vec<String> {
        vec![
            format!("{}: {PROCESS_IO_NOTE}", self.label),
            format!(
                "{}: the binding sets no bloom filter policy, so point reads of LevelDB here go without one",
                self.label
            ),
        ]
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.flush()?;
        drop(self.db);
        Ok(())
    }
}
