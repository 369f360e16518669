//! fjall 2.x behind the [`Engine`] trait: `fjall` (a plain LSM-tree) and
//! `fjall-kv` (its key-value separation, values of at least 128 bytes in
//! blob files).

use super::{PROCESS_IO_NOTE, SEPKV_BLOCK_CACHE, SEPKV_VALUE_THRESHOLD};
use crate::engine::{BatchOp, Engine, EngineIo, EngineOptions, EngineStats, ScanResult};
use crate::error::{BenchError, Result};
use fjall::{
    CompressionType, Config, GarbageCollection, Keyspace, KvSeparationOptions,
    PartitionCreateOptions, PartitionHandle, PersistMode,
};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Blob files whose share of stale values exceeds this are rewritten when
/// the harness flushes `fjall-kv` (sepkv's `gc_garbage_ratio` default).
pub const FJALL_GC_STALENESS: f32 = 0.5;
/// The longest [`FjallEngine::flush`] waits for background compactions.
const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// How long the compaction counters must stay still to count as idle.
const IDLE_QUIET: Duration = Duration::from_millis(200);

/// fjall with one partition, optionally key-value separated.
pub struct FjallEngine {
    keyspace: Keyspace,
    partition: PartitionHandle,
    label: String,
    kv_separation: bool,
    sync: bool,
    direct_io_requested: bool,
    path: PathBuf,
}

impl FjallEngine {
    /// Opens fjall in `dir` (empty or a previous fjall database); `kv`
    /// enables key-value separation with a 128-byte threshold.
    ///
    /// # Errors
    /// fjall's error when opening fails.
    pub fn open(dir: &Path, kv: bool, opts: &EngineOptions) -> Result<Self> {
        let label = if kv { "fjall-kv" } else { "fjall" }.to_string();
        let err = |e: fjall::Error| BenchError::engine(&label, e);
        let keyspace = Config::new(dir)
            .cache_size(SEPKV_BLOCK_CACHE)
            .open()
            .map_err(err)?;
        let mut popts = PartitionCreateOptions::default().compression(CompressionType::None);
        if kv {
            // with_kv_separation copies the partition's compression (None).
            popts = popts.with_kv_separation(
                KvSeparationOptions::default().separation_threshold(SEPKV_VALUE_THRESHOLD),
            );
        }
        let partition = keyspace.open_partition("bench", popts).map_err(err)?;
        Ok(FjallEngine {
            keyspace,
            partition,
            label,
            kv_separation: kv,
            sync: opts.sync,
            direct_io_requested: opts.direct_io,
            path: dir.to_path_buf(),
        })
    }

    fn err(&self, e: fjall::Error) -> BenchError {
        BenchError::engine(&self.label, e)
    }

    fn persist_if_sync(&self) -> Result<()> {
        if self.sync {
            self.keyspace
                .persist(PersistMode::SyncAll)
                .map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// Waits until no compaction runs and the completed-compaction count
    /// has not moved for [`IDLE_QUIET`] (fjall has no "wait for idle").
    fn wait_compactions(&self) {
        let deadline = Instant::now() + IDLE_TIMEOUT;
        let mut last = self.keyspace.compactions_completed();
        let mut quiet_since = Instant::now();
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            let done = self.keyspace.compactions_completed();
            if self.keyspace.active_compactions() > 0 || done != last {
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
        self.partition.insert(key, value).map_err(|e| self.err(e))?;
        self.persist_if_sync()
    }

    fn get(&self, key: &[u8], buf: &mut Vec<u8>) -> Result<bool> {
        buf.clear();
        match self.partition.get(key).map_err(|e| self.err(e))? {
            Some(v) => {
                buf.extend_from_slice(&v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.partition.remove(key).map_err(|e| self.err(e))?;
        self.persist_if_sync()
    }

    fn write_batch(&self, ops: &[BatchOp<'_>]) -> Result<()> {
        let mut b = self
            .keyspace
            .batch()
            .durability(self.sync.then_some(PersistMode::SyncAll));
        for op in ops {
            match *op {
                BatchOp::Put(k, v) => b.insert(&self.partition, k, v),
                BatchOp::Delete(k) => b.remove(&self.partition, k),
            }
        }
        b.commit().map_err(|e| self.err(e))
    }

    fn scan(&self, start: &[u8], n: usize, out: &mut ScanResult) -> Result<()> {
        out.clear();
        for item in self.partition.range(start.to_vec()..).take(n) {
            let (k, v) = item.map_err(|e| self.err(e))?;
            out.entries += 1;
            out.key_bytes += k.len() as u64;
            out.value_bytes += v.len() as u64;
            out.last_key.clear();
            out.last_key.extend_from_slice(&k);
        }
        Ok(())
    }

    /// Syncs the journal, writes the memtable to a segment and waits for
    /// that flush, then waits for the compactions it triggered (until none
    /// runs and none completes for 200 ms). For `fjall-kv` it then runs
    /// fjall's blob garbage collection, which fjall never starts by itself:
    /// a scan for stale values, rewriting blob files more than half stale,
    /// and dropping fully stale ones (sepkv collects its value log in the
    /// background with the same 0.5 garbage ratio).
    fn flush(&self) -> Result<()> {
        self.keyspace
            .persist(PersistMode::SyncAll)
            .map_err(|e| self.err(e))?;
        self.partition
            .rotate_memtable_and_wait()
            .map_err(|e| self.err(e))?;
        self.wait_compactions();
        if self.kv_separation {
            self.partition.gc_scan().map_err(|e| self.err(e))?;
            self.partition
                .gc_with_staleness_threshold(FJALL_GC_STALENESS)
                .map_err(|e| self.err(e))?;
            self.partition
                .gc_drop_stale_segments()
                .map_err(|e| self.err(e))?;
            self.wait_compactions();
        }
        Ok(())
    }

    fn stats(&self) -> Result<EngineStats> {
        let mut counters = BTreeMap::new();
        let ks = &self.keyspace;
        counters.insert("flushes".into(), ks.flushes_completed() as u64);
        counters.insert("compactions".into(), ks.compactions_completed() as u64);
        counters.insert(
            "compaction_micros".into(),
            ks.time_compacting().as_micros() as u64,
        );
        counters.insert("journals".into(), ks.journal_count() as u64);
        counters.insert("engine_disk_bytes".into(), ks.disk_space());
        counters.insert("segments".into(), self.partition.segment_count() as u64);
        counters.insert("blob_files".into(), self.partition.blob_file_count() as u64);
        counters.insert("write_buffer_bytes".into(), ks.write_buffer_size());
        Ok(EngineStats {
            io: EngineIo::default(),
            counters,
        })
    }

    fn io_accounting(&self) -> bool {
        false
    }

    fn path(&self) -> &Path {
        &self.path
    }

    fn settings(&self) -> serde_json::Value {
        json!({
            "engine": "fjall",
            "version": "2.11",
            "kv_separation": self.kv_separation,
            "separation_threshold": self.kv_separation.then_some(SEPKV_VALUE_THRESHOLD),
            "blob_file_target_size": self.kv_separation.then_some(128u64 << 20),
            "blob_gc": self.kv_separation.then_some(json!({
                "when": "at every harness flush (end of phase)",
                "staleness_threshold": FJALL_GC_STALENESS,
            })),
            "compression": "none",
            "cache_size": SEPKV_BLOCK_CACHE,
            "max_memtable_size": 16u64 << 20,
            "max_write_buffer_size": 64u64 << 20,
            "max_journaling_size": 512u64 << 20,
            "block_size": 4096,
            "bloom_bits_per_key": 10,
            "compaction": "leveled (fjall default)",
            "sync": self.sync,
            "persist_mode": if self.sync { "SyncAll per write" } else { "buffered (no persist per write)" },
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
        self.keyspace
            .persist(PersistMode::SyncAll)
            .map_err(|e| BenchError::engine(&label, e))?;
        drop(self.partition);
        drop(self.keyspace);
        Ok(())
    }
}
