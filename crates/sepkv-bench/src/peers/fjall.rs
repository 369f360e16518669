//! fjall 3.x behind the [`Engine`] trait: `fjall` (a plain LSM-tree) and
//! `fjall-kv` (its key-value separation, values of at least 128 bytes in
//! blob files).
//!
//! fjall 3 has no blob GC call: a compaction of the index tables drops the
//! blob files left without a live value and rewrites the live values of
//! the stale blob files that only the tables it merges point into. Which
//! files are stale enough is set by two `KvSeparationOptions`:
//! `staleness_threshold` (here [`FJALL_GC_STALENESS`], sepkv's
//! `gc_garbage_ratio`) and `age_cutoff`, the share of those files, oldest
//! first, that one compaction rewrites. Here the cutoff is
//! [`FJALL_GC_AGE_CUTOFF`] = 1.0, so every blob file at least half stale
//! is rewritten when a compaction reaches it. With fjall's default cutoff
//! (0.25) space amplification kept growing over twelve full overwrites of
//! 200,000 1000-byte values (past 5×); with 1.0 it levelled off near 3×.

use super::{PROCESS_IO_NOTE, SEPKV_BLOCK_CACHE, SEPKV_VALUE_THRESHOLD};
use crate::contract::{BatchOp, Engine, EngineIo, EngineOptions, EngineStats, ScanResult};
use crate::error::{BenchError, Result};
use fjall::config::CompressionPolicy;
use fjall::{
    CompressionType, Database, Keyspace, KeyspaceCreateOptions, KvSeparationOptions, PersistMode,
};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A blob file at least this share stale (stale bytes over the file's
/// bytes) may be rewritten by a compaction of the tables that point into
/// it: fjall's `KvSeparationOptions::staleness_threshold` (its default is
/// 0.25), set to sepkv's `gc_garbage_ratio` default.
pub const FJALL_GC_STALENESS: f32 = 0.5;
/// The share of the blob files a compaction finds stale enough that it
/// rewrites (oldest first): all of them (fjall's default is 0.25; see the
/// module documentation).
pub const FJALL_GC_AGE_CUTOFF: f32 = 1.0;
/// fjall 3's default blob file target size (64 MiB).
const FJALL_BLOB_FILE_SIZE: u64 = 64 << 20;
/// fjall 3's default per-keyspace memtable size (64 MiB).
const FJALL_MEMTABLE_SIZE: u64 = 64 << 20;
/// fjall 3's default cap on the size of all journals (512 MiB).
const FJALL_MAX_JOURNALING_SIZE: u64 = 512 << 20;
/// fjall 3's default cap on its worker threads (flushes and compactions).
const FJALL_MAX_WORKERS: usize = 4;
/// The longest [`FjallEngine::flush`] waits for background compactions.
const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// How long the compaction counters must stay still to count as idle.
const IDLE_QUIET: Duration = Duration::from_millis(200);

/// fjall with one keyspace, optionally key-value separated.
pub struct FjallEngine {
    db: Database,
    keyspace: Keyspace,
    label: String,
    kv_separation: bool,
    sync: bool,
    direct_io_requested: bool,
    worker_threads: usize,
    path: PathBuf,
}

impl FjallEngine {
    /// Opens fjall in `dir` (empty or a previous fjall 3 database); `kv`
    /// enables key-value separation with a 128-byte threshold.
    ///
    /// # Errors
    /// fjall's error when opening fails.
    pub fn open(dir: &Path, kv: bool, opts: &EngineOptions) -> Result<Self> {
        let label = if kv { "fjall-kv" } else { "fjall" }.to_string();
        let err = |e: fjall::Error| BenchError::engine(&label, e);
        // fjall's default worker count, set explicitly so that the
        // settings report the number in effect.
        let worker_threads = std::thread::available_parallelism()
            .map_or(1, usize::from)
            .min(FJALL_MAX_WORKERS);
        let db = Database::builder(dir)
            .cache_size(SEPKV_BLOCK_CACHE)
            .journal_compression(CompressionType::None)
            .worker_threads(worker_threads)
            .open()
            .map_err(err)?;
        let mut kopts = KeyspaceCreateOptions::default()
            .data_block_compression_policy(CompressionPolicy::disabled())
            .index_block_compression_policy(CompressionPolicy::disabled());
        if kv {
            kopts = kopts.with_kv_separation(Some(
                KvSeparationOptions::default()
                    .separation_threshold(SEPKV_VALUE_THRESHOLD)
                    .compression(CompressionType::None)
                    .staleness_threshold(FJALL_GC_STALENESS)
                    .age_cutoff(FJALL_GC_AGE_CUTOFF),
            ));
        }
        let keyspace = db.keyspace("bench", || kopts).map_err(err)?;
        Ok(FjallEngine {
            db,
            keyspace,
            label,
            kv_separation: kv,
            sync: opts.sync,
            direct_io_requested: opts.direct_io,
            worker_threads,
            path: dir.to_path_buf(),
        })
    }

    fn err(&self, e: fjall::Error) -> BenchError {
        BenchError::engine(&self.label, e)
    }

    fn persist_if_sync(&self) -> Result<()> {
        if self.sync {
            self.db
                .persist(PersistMode::SyncAll)
                .map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// Waits until no compaction runs and the completed-compaction count
    /// has not moved for [`IDLE_QUIET`] (fjall has no "wait for idle").
    fn wait_compactions(&self) {
        let deadline = Instant::now() + IDLE_TIMEOUT;
        let mut last = self.db.compactions_completed();
        let mut quiet_since = Instant::now();
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            let done = self.db.compactions_completed();
            if self.db.active_compactions() > 0 || done != last {
                last = done;
                quiet_since = Instant::now();
            } else if quiet_since.elapsed() >= IDLE_QUIET {
                return;
            }
        }
    }
}

impl Engine for FjallEngine {
    fn label(&self) -> &str {
        &self.label
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.keyspace.insert(key, value).map_err(|e| self.err(e))?;
        self.persist_if_sync()
    }

    fn get(&self, key: &[u8], buf: &mut Vec<u8>) -> Result<bool> {
        buf.clear();
        match self.keyspace.get(key).map_err(|e| self.err(e))? {
            Some(v) => {
                buf.extend_from_slice(&v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.keyspace.remove(key).map_err(|e| self.err(e))?;
        self.persist_if_sync()
    }

    /// Commits with `SyncAll` in sync mode, else with fjall's default batch
    /// durability (`Buffer`: the journal is handed to the OS, as a single
    /// write's is).
    fn write_batch(&self, ops: &[BatchOp<'_>]) -> Result<()> {
        let mut b = self.db.batch();
        if self.sync {
            b = b.durability(Some(PersistMode::SyncAll));
        }
        for op in ops {
            match *op {
                BatchOp::Put(k, v) => b.insert(&self.keyspace, k, v),
                BatchOp::Delete(k) => b.remove(&self.keyspace, k),
            }
        }
        b.commit().map_err(|e| self.err(e))
    }

    fn scan(&self, start: &[u8], n: usize, out: &mut ScanResult) -> Result<()> {
        out.clear();
        for guard in self.keyspace.range(start..).take(n) {
            let (k, v) = guard.into_inner().map_err(|e| self.err(e))?;
            out.entries += 1;
            out.key_bytes += k.len() as u64;
            out.add_value(&v);
            out.last_key.clear();
            out.last_key.extend_from_slice(&k);
        }
        Ok(())
    }

    /// Syncs the journal, writes the memtable to a table and waits for that
    /// flush, then waits for the compactions it triggered (until none runs
    /// and none completes for 200 ms). fjall 3 has no blob GC call: for
    /// `fjall-kv` those compactions are the GC (see the module
    /// documentation), so the phase's flush waits for it too.
    fn flush(&self) -> Result<()> {
        self.db
            .persist(PersistMode::SyncAll)
            .map_err(|e| self.err(e))?;
        self.keyspace
            .rotate_memtable_and_wait()
            .map_err(|e| self.err(e))?;
        self.wait_compactions();
        Ok(())
    }

    fn stats(&self) -> Result<EngineStats> {
        let mut counters = BTreeMap::new();
        let db = &self.db;
        let ks = &self.keyspace;
        counters.insert("compactions".into(), db.compactions_completed() as u64);
        counters.insert(
            "compaction_micros".into(),
            db.time_compacting().as_micros() as u64,
        );
        counters.insert("journals".into(), db.journal_count() as u64);
        counters.insert(
            "engine_disk_bytes".into(),
            db.disk_space().map_err(|e| self.err(e))?,
        );
        // fjall 3 calls its segments tables.
        counters.insert("segments".into(), ks.table_count() as u64);
        counters.insert("blob_files".into(), ks.blob_file_count() as u64);
        counters.insert("stale_blob_bytes".into(), ks.fragmented_blob_bytes());
        counters.insert("write_buffer_bytes".into(), db.write_buffer_size());
        Ok(EngineStats {
            io: EngineIo::default(),
            counters,
        })
    }

    fn path(&self) -> &Path {
        &self.path
    }

    fn settings(&self) -> serde_json::Value {
        let kv = self.kv_separation;
        json!({
            "engine": "fjall",
            "version": "3.1",
            "kv_separation": kv,
            "separation_threshold": kv.then_some(SEPKV_VALUE_THRESHOLD),
            "blob_file_target_size": kv.then_some(FJALL_BLOB_FILE_SIZE),
            "blob_compression": kv.then_some("none"),
            "blob_gc": kv.then_some(json!({
                "when": "during compactions (fjall 3 has no manual GC call)",
                "staleness_threshold": FJALL_GC_STALENESS,
                "age_cutoff": FJALL_GC_AGE_CUTOFF,
            })),
            "compression": "none",
            "journal_compression": "none",
            "cache_size": SEPKV_BLOCK_CACHE,
            "max_memtable_size": FJALL_MEMTABLE_SIZE,
            "max_write_buffer_size": null,
            "max_journaling_size": FJALL_MAX_JOURNALING_SIZE,
            "block_size": 4096,
            "bloom_filter": "L0: 0.01% false-positive rate; other levels: 10 bits per key",
            "compaction": "leveled (fjall default: L0 threshold 4, 64 MiB tables, level ratio 10)",
            "worker_threads": self.worker_threads,
            "sync": self.sync,
            "persist_mode": if self.sync { "SyncAll per write" } else { "Buffer (journal handed to the OS per write, no fsync)" },
            "direct_io": false,
        })
    }

    fn notes(&self) -> Vec<String> {
        let mut v = vec![format!("{}: {PROCESS_IO_NOTE}", self.label)];
        if self.direct_io_requested {
            v.push(format!(
                "{}: direct I/O was requested but is not supported: this run used buffered I/O",
                self.label
            ));
        }
        v
    }

    fn close(self: Box<Self>) -> Result<()> {
        let label = self.label.clone();
        self.db
            .persist(PersistMode::SyncAll)
            .map_err(|e| BenchError::engine(&label, e))?;
        drop(self.keyspace);
        drop(self.db);
        Ok(())
    }
}
