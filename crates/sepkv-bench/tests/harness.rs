//! Tests of the harness itself: amplification arithmetic on a fake engine
//! with known byte counts, the JSON schema, trace replay counts and errors,
//! and small end-to-end runs on sepkv.

use sepkv_bench::config::{BenchConfig, Workload, WorkloadRun};
use sepkv_bench::engine::{
    BatchOp, Engine, EngineFactory, EngineIo, EngineOptions, EngineSpec, EngineStats, ScanResult,
};
use sepkv_bench::report::{write_json, PhaseReport};
use sepkv_bench::runner::run_engine;
use sepkv_bench::{BenchError, DbRoot, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Bytes the fake engine "writes" per user byte put.
const FAKE_WRITE_FACTOR: u64 = 2;
/// Bytes the fake engine "reads" per get that finds its key.
const FAKE_READ_BYTES: u64 = 4096;
/// Bytes the fake engine "occupies" per live user byte.
const FAKE_SPACE_FACTOR: u64 = 3;

/// An in-memory engine with exactly known I/O: every put writes
/// `FAKE_WRITE_FACTOR × (key + value)` bytes to category `log`, every
/// found get reads `FAKE_READ_BYTES` from `data`, and the disk usage is
/// `FAKE_SPACE_FACTOR ×` the live key + value bytes.
struct FakeEngine {
    map: Mutex<BTreeMap<Vec<u8>, Vec<u8>>>,
    written: Mutex<u64>,
    read: Mutex<u64>,
    path: PathBuf,
    /// Operations handed over at once ([`Engine::chunk_len`]).
    chunk: usize,
}

impl Engine for FakeEngine {
    fn label(&self) -> &str {
        "fake"
    }
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        *self.written.lock().unwrap() += FAKE_WRITE_FACTOR * (key.len() + value.len()) as u64;
        self.map
            .lock()
            .unwrap()
            .insert(key.to_vec(), value.to_vec());
        Ok(())
    }
    fn get(&self, key: &[u8], buf: &mut Vec<u8>) -> Result<bool> {
        match self.map.lock().unwrap().get(key) {
            Some(v) => {
                *self.read.lock().unwrap() += FAKE_READ_BYTES;
                buf.clear();
                buf.extend_from_slice(v);
                Ok(true)
            }
            None => Ok(false),
        }
    }
    fn delete(&self, key: &[u8]) -> Result<()> {
        *self.written.lock().unwrap() += FAKE_WRITE_FACTOR * key.len() as u64;
        self.map.lock().unwrap().remove(key);
        Ok(())
    }
    fn write_batch(&self, ops: &[BatchOp<'_>]) -> Result<()> {
        for op in ops {
            match *op {
                BatchOp::Put(k, v) => self.put(k, v)?,
                BatchOp::Delete(k) => self.delete(k)?,
            }
        }
        Ok(())
    }
    fn scan(&self, start: &[u8], n: usize, out: &mut ScanResult) -> Result<()> {
        out.clear();
        for (k, v) in self.map.lock().unwrap().range(start.to_vec()..).take(n) {
            out.entries += 1;
            out.key_bytes += k.len() as u64;
            out.add_value(v);
            out.last_key.clear();
            out.last_key.extend_from_slice(k);
        }
        Ok(())
    }
    fn flush(&self) -> Result<()> {
        Ok(())
    }
    fn stats(&self) -> Result<EngineStats> {
        let mut io = EngineIo::default();
        io.written
            .insert("log".into(), *self.written.lock().unwrap());
        io.read.insert("data".into(), *self.read.lock().unwrap());
        Ok(EngineStats {
            io,
            counters: BTreeMap::new(),
        })
    }
    fn io_accounting(&self) -> bool {
        true
    }
    fn chunk_len(&self) -> usize {
        self.chunk
    }
    fn path(&self) -> &Path {
        &self.path
    }
    fn disk_usage(&self) -> Result<u64> {
        let live: usize = self
            .map
            .lock()
            .unwrap()
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum();
        Ok(FAKE_SPACE_FACTOR * live as u64)
    }
    fn settings(&self) -> serde_json::Value {
        serde_json::json!({ "engine": "fake" })
    }
    fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

struct FakeFactory;

impl EngineFactory for FakeFactory {
    fn label(&self) -> String {
        "fake".into()
    }
    fn open(&self, dir: &Path, o: &EngineOptions) -> Result<Box<dyn Engine>> {
        ChunkedFactory(1).open(dir, o)
    }
}

/// [`FakeFactory`] whose engines take operations `.0` at a time (run by
/// the trait's default `run_chunk`).
struct ChunkedFactory(usize);

impl EngineFactory for ChunkedFactory {
    fn label(&self) -> String {
        "fake".into()
    }
    fn open(&self, dir: &Path, _: &EngineOptions) -> Result<Box<dyn Engine>> {
        Ok(Box::new(FakeEngine {
            map: Mutex::new(BTreeMap::new()),
            written: Mutex::new(0),
            read: Mutex::new(0),
            path: dir.to_path_buf(),
            chunk: self.0,
        }))
    }
}

fn config(workloads: &[Workload], num: u64) -> BenchConfig {
    BenchConfig {
        workloads: workloads.iter().map(|&w| WorkloadRun::from(w)).collect(),
        num,
        progress: false,
        ..BenchConfig::default()
    }
}

fn run(factory: &dyn EngineFactory, cfg: &BenchConfig) -> Result<Vec<PhaseReport>> {
    let dir = tempfile::tempdir().unwrap();
    let mut reports = Vec::new();
    run_engine(factory, dir.path(), cfg, &mut reports, &mut |_| {})?;
    Ok(reports)
}

fn phase<'a>(reports: &'a [PhaseReport], workload: &str, phase: &str) -> &'a PhaseReport {
    reports
        .iter()
        .find(|r| r.workload == workload && r.phase == phase)
        .unwrap_or_else(|| {
            panic!(
                "no report {workload}/{phase} in {:?}",
                reports
                    .iter()
                    .map(|r| (&r.workload, &r.phase))
                    .collect::<Vec<_>>()
            )
        })
}

#[test]
fn amplification_on_a_fake_engine_with_known_bytes() {
    let mut cfg = config(
        &[Workload::FillSeq, Workload::ReadRandom, Workload::Overwrite],
        1000,
    );
    cfg.ops = Some(500);
    let reports = run(&FakeFactory, &cfg).unwrap();
    assert_eq!(reports.len(), 3);

    let fill = phase(&reports, "fillseq", "run");
    let entry = (16 + 100) as u64;
    assert_eq!(fill.ops, 1000);
    assert_eq!(fill.user_bytes_written, 1000 * entry);
    assert_eq!(fill.bytes_written, FAKE_WRITE_FACTOR * 1000 * entry);
    assert_eq!(fill.bytes_written_by_category["log"], fill.bytes_written);
    assert_eq!(fill.write_amp, Some(FAKE_WRITE_FACTOR as f64));
    assert_eq!(fill.read_amp, None, "nothing was read");
    assert_eq!(fill.live_bytes, 1000 * entry);
    assert_eq!(fill.live_records, 1000);
    assert_eq!(fill.db_bytes, FAKE_SPACE_FACTOR * 1000 * entry);
    assert_eq!(fill.space_amp, Some(FAKE_SPACE_FACTOR as f64));

    let read = phase(&reports, "readrandom", "run");
    assert_eq!(read.ops, 500);
    assert_eq!(read.not_found, 0);
    assert_eq!(read.user_bytes_read, 500 * 100);
    assert_eq!(read.bytes_read, 500 * FAKE_READ_BYTES);
    assert_eq!(read.read_amp, Some(FAKE_READ_BYTES as f64 / 100.0));
    assert_eq!(read.bytes_written, 0, "phase figures are differences");
    assert_eq!(read.write_amp, None);

    let over = phase(&reports, "overwrite", "run");
    assert_eq!(over.user_bytes_written, 500 * entry);
    assert_eq!(over.write_amp, Some(FAKE_WRITE_FACTOR as f64));
    assert_eq!(
        over.live_bytes,
        1000 * entry,
        "overwrites keep the live size"
    );
    assert_eq!(over.space_amp, Some(FAKE_SPACE_FACTOR as f64));
}

#[test]
fn deletes_and_auto_load_are_accounted() {
    let mut cfg = config(&[Workload::DeleteRandom, Workload::ReadRandom], 400);
    cfg.ops = Some(100);
    let reports = run(&FakeFactory, &cfg).unwrap();
    let load = phase(&reports, "fillrandom", "auto-load");
    assert_eq!((load.ops, load.live_records), (400, 400));
    let del = phase(&reports, "deleterandom", "run");
    assert_eq!(
        del.user_bytes_written,
        100 * 16,
        "deletes count their key bytes"
    );
    assert_eq!(del.live_records, 300, "each record is deleted at most once");
    assert_eq!(del.live_bytes, 300 * 116);
    let read = phase(&reports, "readrandom", "run");
    assert_eq!(read.ops, 100);
    assert!(
        read.not_found > 0 && read.not_found < 100,
        "{}",
        read.not_found
    );
}

#[test]
fn json_has_the_documented_fields() {
    let mut cfg = config(
        &[
            Workload::FillRandom,
            Workload::ReadRandom,
            Workload::SeekRandom,
            Workload::Ycsb('a'),
        ],
        300,
    );
    cfg.ops = Some(200);
    let reports = run(&FakeFactory, &cfg).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.json");
    write_json(&reports, &path).unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let arr = v.as_array().expect("an array");
    assert_eq!(arr.len(), reports.len());
    for obj in arr {
        for field in [
            "engine",
            "workload",
            "phase",
            "ops",
            "not_found",
            "seconds",
            "ops_per_sec",
            "latency_us",
            "user_bytes_written",
            "user_bytes_read",
            "bytes_written",
            "bytes_read",
            "bytes_written_by_category",
            "bytes_read_by_category",
            "process_io",
            "write_amp",
            "read_amp",
            "space_amp",
            "process_write_amp",
            "process_read_amp",
            "db_bytes",
            "live_bytes",
            "live_records",
            "page_cache",
            "notes",
            "counts",
            "engine_counters",
            "settings",
            "engine_options",
        ] {
            assert!(obj.get(field).is_some(), "missing {field} in {obj}");
        }
        for p in ["p50", "p99", "p999", "p9999", "max", "mean"] {
            assert!(obj["latency_us"][p].is_number(), "latency_us.{p}");
        }
        // A phase under a million operations: no p99.999.
        assert!(obj["latency_us"]["p99999"].is_null(), "latency_us.p99999");
        for s in [
            "num",
            "ops",
            "value_size",
            "key_size",
            "threads",
            "seed",
            "sync",
            "scan_length",
            "phases",
            "field_count",
            "field_length",
            "direct_io_requested",
            "direct_io",
            "traces",
        ] {
            assert!(obj["settings"].get(s).is_some(), "settings.{s}");
        }
        assert_eq!(obj["settings"]["num"], 300);
        assert_eq!(obj["engine"], "fake");
        assert!(obj["ops"].as_u64().unwrap() > 0);
    }
    // Round trip.
    let back: Vec<PhaseReport> = serde_json::from_value(v).unwrap();
    assert_eq!(back.len(), reports.len());
    assert_eq!(back[0].ops, reports[0].ops);
}

fn write_trace(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn trace_replay_ops_equal_line_counts() {
    let dir = tempfile::tempdir().unwrap();
    let mut load = String::new();
    for i in 0..50 {
        load.push_str(&format!("INSERT\tuser{i}\t{}\n", 100 + i));
    }
    let load = write_trace(dir.path(), "load.tsv", &load);
    let run_text = "READ\tuser1\nREAD\tmissing\nUPDATE\tuser1\t10\nSCAN\tuser10\t5\nDELETE\tuser2\nREAD\tuser2\nINSERT\tnew\t7\n";
    let run_file = write_trace(dir.path(), "run.tsv", run_text);
    // Also a gzip-compressed copy of the run trace.
    let gz = dir.path().join("run2.tsv.gz");
    {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(
            std::fs::File::create(&gz).unwrap(),
            flate2::Compression::default(),
        );
        e.write_all(run_text.as_bytes()).unwrap();
        e.finish().unwrap();
    }
    for factory in [
        &FakeFactory as &dyn EngineFactory,
        &EngineSpec::Sepkv(sepkv::Preset::LevelDb, Default::default()),
    ] {
        let mut cfg = config(&[Workload::Trace], 10);
        cfg.traces = vec![load.clone(), run_file.clone(), gz.clone()];
        let reports = run(factory, &cfg).unwrap();
        assert_eq!(reports.len(), 3);
        let l = phase(&reports, "trace", "load.tsv");
        assert_eq!(l.ops, 50);
        assert_eq!(l.counts["inserts"], 50);
        let user: u64 = (0..50)
            .map(|i| format!("user{i}").len() as u64 + 100 + i)
            .sum();
        assert_eq!(l.user_bytes_written, user);
        assert_eq!(l.live_bytes, user);
        assert_eq!(l.live_records, 50);
        for name in ["run.tsv", "run2.tsv.gz"] {
            let r = phase(&reports, "trace", name);
            assert_eq!(r.ops, 7, "{name}: one operation per line");
            assert_eq!(r.counts["reads"], 3);
            assert_eq!(r.counts["updates"], 1);
            assert_eq!(r.counts["scans"], 1);
            assert_eq!(r.counts["deletes"], 1);
            assert_eq!(r.counts["inserts"], 1);
            assert_eq!(r.counts["scan_entries"], 5);
        }
        let r = phase(&reports, "trace", "run.tsv");
        assert_eq!(r.not_found, 2, "the missing key and the deleted one");
        assert_eq!(r.live_records, 50, "one deleted, one inserted");
        let r2 = phase(&reports, "trace", "run2.tsv.gz");
        assert_eq!(r2.not_found, 2, "`missing` and the deleted user2 again");
        assert_eq!(r2.live_records, 50);
    }
}

#[test]
fn malformed_trace_line_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write_trace(
        dir.path(),
        "bad.tsv",
        "INSERT\tuser1\t10\nREAD\tuser1\nUPDATE\tuser1\tten\nREAD\tuser1\n",
    );
    let mut cfg = config(&[Workload::Trace], 10);
    cfg.traces = vec![bad];
    let err = run(&FakeFactory, &cfg).unwrap_err();
    match &err {
        BenchError::Trace { file, line, msg } => {
            assert_eq!(*line, 3);
            assert!(file.ends_with("bad.tsv"));
            assert!(msg.contains("ten"), "{msg}");
        }
        other => panic!("expected a trace error, got {other:?}"),
    }
    assert!(err.to_string().contains("bad.tsv:3:"), "{err}");

    let blank = write_trace(dir.path(), "blank.tsv", "READ\tuser1\n\nREAD\tuser1\n");
    cfg.traces = vec![blank];
    let err = run(&FakeFactory, &cfg).unwrap_err();
    assert!(matches!(err, BenchError::Trace { line: 2, .. }), "{err}");
}

#[test]
fn sepkv_end_to_end_small() {
    let mut cfg = config(
        &[
            Workload::FillRandom,
            Workload::ReadRandom,
            Workload::ReadSeq,
            Workload::SeekRandom,
            Workload::ReadWhileWriting,
            Workload::Update,
            Workload::Ycsb('e'),
        ],
        2000,
    );
    cfg.ops = Some(500);
    cfg.phases = 2;
    cfg.threads = 2;
    let reports = run(
        &EngineSpec::Sepkv(sepkv::Preset::LevelDb, Default::default()),
        &cfg,
    )
    .unwrap();
    let fill = phase(&reports, "fillrandom", "run");
    assert_eq!(fill.ops, 2000);
    assert_eq!(fill.live_records, 2000);
    assert_eq!(fill.live_bytes, 2000 * 116);
    assert!(
        fill.write_amp.unwrap() >= 1.0,
        "the WAL alone writes every byte"
    );
    assert!(fill.db_bytes > 0);
    let read = phase(&reports, "readrandom", "run");
    assert_eq!((read.ops, read.not_found), (500, 0));
    assert_eq!(read.user_bytes_read, 500 * 100);
    let seq = phase(&reports, "readseq", "run");
    assert_eq!(seq.ops, 500);
    let seek = phase(&reports, "seekrandom", "run");
    assert_eq!(seek.ops, 500);
    assert!(seek.counts["scan_entries"] > 500);
    let rww = phase(&reports, "readwhilewriting", "run");
    assert_eq!(rww.ops, 500);
    assert!(rww.counts.contains_key("writer_ops") || rww.user_bytes_written == 0);
    for p in ["load", "update-1", "update-2"] {
        let r = phase(&reports, "update", p);
        assert_eq!(r.ops, if p == "load" { 2000 } else { 500 });
    }
    phase(&reports, "ycsb-load", "auto-load");
    let e = phase(&reports, "ycsb-e", "run");
    assert_eq!(e.ops, 500);
    assert_eq!(
        e.counts.get("scans").copied().unwrap_or(0) + e.counts.get("inserts").copied().unwrap_or(0),
        500
    );
    for r in &reports {
        assert_eq!(r.engine, "sepkv:leveldb");
        assert!(r.seconds > 0.0);
        assert_eq!(r.engine_options["preset"], "leveldb");
    }
}

#[test]
fn unavailable_presets_are_reported() {
    // Every preset is implemented: a tuning that gives an index a layout it
    // does not take (the LWC-tree under the bands) is what remains.
    let spec: EngineSpec = "sepkv:flashkey+lwc".parse().unwrap();
    let root = DbRoot::prepare(None).unwrap();
    let cfg = config(&[Workload::FillSeq], 10);
    let mut reports = Vec::new();
    let err =
        sepkv_bench::run_engines(&[spec], &cfg, &root, &mut reports, &mut |_| {}).unwrap_err();
    assert!(matches!(err, BenchError::Unavailable(_)), "{err}");
    assert!(
        err.to_string().contains("wisckey") && err.to_string().contains("not implemented"),
        "{err}"
    );
    assert!(reports.is_empty());
    root.finish(false).unwrap();
}

/// `+wide` widens the LWC-tree's DTable bounds: it runs on an `lwc`
/// index, reports the bounds it set, and is refused elsewhere.
#[test]
fn wide_dtables_apply_to_the_lwc_index_only() {
    let spec: EngineSpec = "sepkv:lwc+wide".parse().unwrap();
    assert_eq!(spec.to_string(), "sepkv:lwc+wide");
    let root = DbRoot::prepare(None).unwrap();
    let cfg = config(&[Workload::FillSeq], 10);
    let mut reports = Vec::new();
    sepkv_bench::run_engines(&[spec], &cfg, &root, &mut reports, &mut |_| {}).unwrap();
    let r = &reports[0];
    assert_eq!(r.engine_options["lwc_max_segments"], 20);
    assert_eq!(r.engine_options["lwc_max_table_bytes"], 32u64 << 20);
    // An unknown flag is named, with every flag there is.
    let err = "sepkv:lwc+broad"
        .parse::<EngineSpec>()
        .unwrap_err()
        .to_string();
    assert!(err.contains("+broad"), "{err}");
    for flag in ["+nowal", "+nosep", "+diskhash", "+lwc", "+wide", "+nosort"] {
        assert!(err.contains(flag), "{flag}: {err}");
    }
    for other in ["sepkv:wisckey+wide", "sepkv:leveldb+wide"] {
        let spec: EngineSpec = other.parse().unwrap();
        let mut reports = Vec::new();
        let err =
            sepkv_bench::run_engines(&[spec], &cfg, &root, &mut reports, &mut |_| {}).unwrap_err();
        assert!(err.to_string().contains("+wide"), "{other}: {err}");
    }
    root.finish(false).unwrap();
}

/// `+paper`, `+divN`, `+segN`, `+pushdown`, `+deadN` and `+seekN` set the
/// LWC-tree's bounds, division, push-down, reclaim and seek-merge options on an `lwc` index and are
/// refused elsewhere.
#[test]
fn paper_division_and_push_down_flags_apply_to_the_lwc_index_only() {
    let root = DbRoot::prepare(None).unwrap();
    let cfg = config(&[Workload::FillSeq], 10);
    for (name, segments, division, push) in [
        ("sepkv:lwc+paper", 1024, 10, false),
        ("sepkv:lwc+div4", 0, 4, false),
        ("sepkv:lwc+pushdown", 0, 0, true),
        ("sepkv:lwc+seg4", 4, 0, false),
        ("sepkv:wisckey+lwc+div12+paper", 1024, 12, false),
    ] {
        let spec: EngineSpec = name.parse().unwrap();
        assert_eq!(spec.to_string(), name);
        let mut reports = Vec::new();
        sepkv_bench::run_engines(&[spec], &cfg, &root, &mut reports, &mut |_| {}).unwrap();
        let o = &reports[0].engine_options;
        assert_eq!(o["lwc_max_segments"], segments, "{name}");
        assert_eq!(o["lwc_division_number"], division, "{name}");
        assert_eq!(o["lwc_push_down"], push, "{name}");
    }
    for bad in ["sepkv:lwc+div1", "sepkv:lwc+div65", "sepkv:lwc+divx"] {
        let err = bad.parse::<EngineSpec>().unwrap_err().to_string();
        assert!(err.contains("division number"), "{bad}: {err}");
    }
    let err = "sepkv:lwc+seg1".parse::<EngineSpec>().unwrap_err();
    assert!(err.to_string().contains("segment bound"), "{err}");
    // `+deadN` sets the reclaim threshold in percent.
    for (name, share) in [("sepkv:lwc", 0.25), ("sepkv:lwc+dead40", 0.4)] {
        let spec: EngineSpec = name.parse().unwrap();
        assert_eq!(spec.to_string(), name);
        let mut reports = Vec::new();
        sepkv_bench::run_engines(&[spec], &cfg, &root, &mut reports, &mut |_| {}).unwrap();
        assert_eq!(reports[0].engine_options["lwc_dead_share"], share, "{name}");
    }
    for bad in ["sepkv:lwc+dead4", "sepkv:lwc+dead101", "sepkv:lwc+deadx"] {
        let err = bad.parse::<EngineSpec>().unwrap_err().to_string();
        assert!(err.contains("dead share"), "{bad}: {err}");
    }
    // `+seekN` sets the bytes per read charge of seek merges (0: off).
    for (name, bytes) in [
        ("sepkv:lwc", 1024),
        ("sepkv:lwc+seek4096", 4096),
        ("sepkv:lwc+seek0", 0),
    ] {
        let spec: EngineSpec = name.parse().unwrap();
        assert_eq!(spec.to_string(), name);
        let mut reports = Vec::new();
        sepkv_bench::run_engines(&[spec], &cfg, &root, &mut reports, &mut |_| {}).unwrap();
        assert_eq!(
            reports[0].engine_options["lwc_seek_merge_bytes"], bytes,
            "{name}"
        );
    }
    let err = "sepkv:lwc+seekx".parse::<EngineSpec>().unwrap_err();
    assert!(err.to_string().contains("read charge"), "{err}");
    for other in [
        "sepkv:leveldb+paper",
        "sepkv:wisckey+pushdown",
        "sepkv:hashkv+div8",
        "sepkv:leveldb+dead20",
        "sepkv:leveldb+seek512",
    ] {
        let spec: EngineSpec = other.parse().unwrap();
        let mut reports = Vec::new();
        let err =
            sepkv_bench::run_engines(&[spec], &cfg, &root, &mut reports, &mut |_| {}).unwrap_err();
        assert!(err.to_string().contains("LWC-tree"), "{other}: {err}");
    }
    root.finish(false).unwrap();
}

/// `+nosort` keeps KT-Store's sealed TrieTables in write order; it is
/// refused on a preset without TrieTables.
#[test]
fn nosort_and_noroll_change_trie_tables_only_on_ktstore() {
    let root = DbRoot::prepare(None).unwrap();
    let cfg = config(&[Workload::FillSeq], 10);
    let mut reports = Vec::new();
    let specs: Vec<EngineSpec> = [
        "sepkv:ktstore",
        "sepkv:ktstore+nosort",
        "sepkv:ktstore+noroll",
    ]
    .iter()
    .map(|s| s.parse().unwrap())
    .collect();
    assert_eq!(specs[1].to_string(), "sepkv:ktstore+nosort");
    assert_eq!(specs[2].to_string(), "sepkv:ktstore+noroll");
    sepkv_bench::run_engines(&specs, &cfg, &root, &mut reports, &mut |_| {}).unwrap();
    let o = |i: usize, k: &str| reports[i].engine_options[k].clone();
    assert_eq!(o(0, "trie_sort_sealed"), true);
    assert_eq!(o(1, "trie_sort_sealed"), false);
    assert_eq!(o(2, "trie_sort_sealed"), true);
    assert!(o(0, "trie_roll_size").as_u64() < o(0, "trie_table_size").as_u64());
    assert_eq!(o(2, "trie_roll_size"), o(2, "trie_table_size"));
    for flag in ["+nosort", "+noroll"] {
        let spec: EngineSpec = format!("sepkv:wisckey{flag}").parse().unwrap();
        let err = sepkv_bench::run_engines(&[spec], &cfg, &root, &mut Vec::new(), &mut |_| {})
            .unwrap_err();
        assert!(err.to_string().contains(flag), "{err}");
    }
    root.finish(false).unwrap();
}

/// `+paper` sets the public options of KT-Store as its paper describes it
/// (recorded in the report), and is refused without TrieTables.
#[test]
fn paper_sets_the_papers_options_only_on_ktstore() {
    let root = DbRoot::prepare(None).unwrap();
    let cfg = config(&[Workload::FillRandom, Workload::SeekRandom], 200);
    let mut reports = Vec::new();
    let spec: EngineSpec = "sepkv:ktstore+paper".parse().unwrap();
    assert_eq!(spec.to_string(), "sepkv:ktstore+paper");
    sepkv_bench::run_engines(&[spec], &cfg, &root, &mut reports, &mut |_| {}).unwrap();
    let o = |k: &str| reports[0].engine_options[k].clone();
    assert_eq!(o("trie_sort_sealed"), false);
    assert_eq!(o("trie_roll_size"), o("trie_table_size"));
    assert_eq!(o("trie_split_skew"), 1.0);
    assert_eq!(o("trie_fixed_levels"), 4);
    assert_eq!(o("trie_span_density"), 0.0);
    assert_eq!(o("trie_span_density_memory"), 0.0);
    assert_eq!(o("trie_span_parallel"), o("trie_span_max"));
    assert_eq!(o("prefetch_threads"), 0);
    assert_eq!(o("trie_scan_pipeline"), 0);
    let spec: EngineSpec = "sepkv:wisckey+paper".parse().unwrap();
    let err =
        sepkv_bench::run_engines(&[spec], &cfg, &root, &mut Vec::new(), &mut |_| {}).unwrap_err();
    assert!(err.to_string().contains("+paper"), "{err}");
    root.finish(false).unwrap();
}

#[test]
fn db_root_refuses_non_empty_dirs_and_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("x"), b"x").unwrap();
    assert!(matches!(
        DbRoot::prepare(Some(dir.path())),
        Err(BenchError::InvalidArgument(_))
    ));
    let fresh = dir.path().join("new");
    let root = DbRoot::prepare(Some(&fresh)).unwrap();
    std::fs::write(fresh.join("file"), b"1").unwrap();
    assert_eq!(root.finish(false).unwrap(), None);
    assert!(!fresh.exists());
    let root = DbRoot::prepare(None).unwrap();
    let kept = root.finish(true).unwrap().unwrap();
    assert!(kept.is_dir());
    std::fs::remove_dir_all(kept).unwrap();
}

#[test]
fn default_suite_plan_runs_every_preset_beside_the_fjall_peers() {
    let args = cli_defaults();
    let plan = args.plan(None).unwrap();
    assert!(plan.suite);
    assert!(plan.config.traces.is_empty());
    assert_eq!(plan.config.value_size, sepkv_bench::cli::SUITE_VALUE_SIZE);
    assert_eq!(plan.config.num, sepkv_bench::cli::SUITE_NUM);
    let engines: Vec<String> = plan.engines.iter().map(|e| e.to_string()).collect();
    assert_eq!(
        engines,
        [
            "sepkv:leveldb",
            "sepkv:wisckey",
            "sepkv:hashkv",
            "sepkv:ktstore",
            "sepkv:flashkey",
            "sepkv:lwc",
            "fjall",
            "fjall-kv"
        ]
    );
    let names: Vec<String> = plan
        .config
        .workloads
        .iter()
        .map(|w| w.workload.to_string())
        .collect();
    assert_eq!(
        names,
        ["fillrandom", "readrandom", "seekrandom", "overwrite"]
    );
    // Explicit workloads keep db_bench's defaults: one engine, 100-byte values.
    let explicit = sepkv_bench::cli::BenchArgs {
        workload: vec!["fillrandom".into()],
        ..args.clone()
    }
    .plan(None)
    .unwrap();
    assert!(!explicit.suite);
    assert_eq!(explicit.engines.len(), 1);
    assert_eq!(explicit.config.value_size, 100);

    let bad = sepkv_bench::cli::BenchArgs {
        engine: vec!["sepkv:flashkey+lwc".into()],
        ..args.clone()
    };
    assert!(matches!(bad.plan(None), Err(BenchError::Unavailable(_))));
    let bad = sepkv_bench::cli::BenchArgs {
        workload: vec!["nope".into()],
        ..args
    };
    assert!(matches!(
        bad.plan(None),
        Err(BenchError::InvalidArgument(_))
    ));
}

/// Operations handed to an engine in chunks are accounted for as those
/// handed over one at a time: the same data, reads, misses, scans and
/// bytes, phase by phase.
#[test]
fn chunked_operations_account_as_single_ones() {
    let mut cfg = config(
        &[
            Workload::FillRandom,
            Workload::ReadRandom,
            Workload::SeekRandom,
            Workload::DeleteRandom,
            Workload::ReadRandom,
            Workload::Ycsb('a'),
        ],
        2000,
    );
    cfg.ops = Some(700);
    let one = run(&FakeFactory, &cfg).unwrap();
    let many = run(&ChunkedFactory(16), &cfg).unwrap();
    assert_eq!(one.len(), many.len());
    for (a, b) in one.iter().zip(&many) {
        let what = format!("{}/{}", a.workload, a.phase);
        assert_eq!((&a.workload, &a.phase), (&b.workload, &b.phase));
        assert_eq!(a.ops, b.ops, "{what}");
        assert_eq!(a.not_found, b.not_found, "{what}");
        assert_eq!(a.user_bytes_read, b.user_bytes_read, "{what}");
        assert_eq!(a.user_bytes_written, b.user_bytes_written, "{what}");
        assert_eq!(a.bytes_written, b.bytes_written, "{what}");
        assert_eq!(a.db_bytes, b.db_bytes, "{what}");
        assert_eq!(a.counts, b.counts, "{what}");
        assert!(b.latency_us.p50 > 0.0, "{what}: timed per operation");
    }
    // Deletes were applied: the second readrandom misses some keys.
    let misses: Vec<u64> = many
        .iter()
        .filter(|r| r.workload == "readrandom")
        .map(|r| r.not_found)
        .collect();
    assert_eq!(misses[0], 0);
    assert!(misses[1] > 0, "{misses:?}");
    let seek = phase(&many, "seekrandom", "run");
    assert!(seek.counts["scan_entries"] > 700);
}

/// The `churn` workload: three phases of ten rounds of fresh keys written,
/// deleted and collected; on `flashkey` the hash table keeps no more nodes
/// than one round's keys (a round of 4,000 keys of 300 bytes fills more
/// than the default 1 MiB band, and the open band is never collected),
/// and nothing is live.
#[test]
fn churn_workload_on_flashkey() {
    let mut cfg = config(&[Workload::Churn], 4000);
    cfg.phases = 3;
    cfg.value_size = 300;
    let reports = run(
        &EngineSpec::Sepkv(sepkv::Preset::FlashKey, Default::default()),
        &cfg,
    )
    .unwrap();
    for p in ["rounds-1", "rounds-2", "rounds-3"] {
        let r = phase(&reports, "churn", p);
        assert_eq!(r.ops, 2 * 4000 * 10, "{p}");
        assert_eq!(r.live_records, 0, "{p}");
    }
    let last = phase(&reports, "churn", "rounds-3");
    let nodes = last.engine_counters["hash_nodes"];
    assert!(nodes <= 4000, "{nodes} hash-table nodes left");
    // The bands, the page file and HASHMETA: the engine's count of the
    // directory less the key tree's tables in `keys/`, whose tombstones
    // stay until its compaction reaches them.
    let db = |p: &str| {
        let c = &phase(&reports, "churn", p).engine_counters;
        c["engine_disk_bytes"] - c["key_tree_sstable_bytes"]
    };
    assert!(
        db("rounds-3") * 10 <= db("rounds-1") * 11,
        "the bands and the hash table grew from {} bytes after round 10 to {} after round 30",
        db("rounds-1"),
        db("rounds-3")
    );
    assert!(last.engine_counters["vstore_gc_tombstones_dropped"] > 0);
}

/// The options `sepkv bench` gets with nothing given (the command line's
/// defaults, which `BenchArgs::default()` leaves at zero).
fn cli_defaults() -> sepkv_bench::cli::BenchArgs {
    sepkv_bench::cli::BenchArgs {
        key_size: 16,
        threads: 1,
        seed: 1,
        scan_length: 100,
        phases: 3,
        field_count: 10,
        field_length: 100,
        ..Default::default()
    }
}

fn repeat_args(engines: &[&str], repeat: Option<u32>) -> sepkv_bench::cli::BenchArgs {
    sepkv_bench::cli::BenchArgs {
        engine: engines.iter().map(|e| e.to_string()).collect(),
        workload: vec!["fillrandom".into(), "overwrite".into()],
        num: Some(2000),
        value_size: Some(200),
        repeat,
        no_settle: true,
        no_progress: true,
        ..cli_defaults()
    }
}

#[test]
fn repeat_zero_is_refused_and_repeat_applies_to_runs_only() {
    let err = repeat_args(&["sepkv:leveldb"], Some(0))
        .plan(None)
        .unwrap_err();
    assert!(matches!(err, BenchError::InvalidArgument(_)), "{err:?}");
    assert!(err.to_string().contains("--repeat 0"), "{err}");
    let plan = repeat_args(&["sepkv:leveldb"], None).plan(None).unwrap();
    assert_eq!((plan.repeat, plan.settle), (1, false));
    let from_json = sepkv_bench::cli::BenchArgs {
        from_json: vec!["a.json".into()],
        repeat: Some(3),
        ..Default::default()
    };
    let err = sepkv_bench::plan::Command::new(&from_json, None, None).unwrap_err();
    assert!(err.to_string().contains("--repeat does not apply"), "{err}");
}

/// Runs `args`' plan in a fresh root and returns its reports.
fn run_plan(args: &sepkv_bench::cli::BenchArgs) -> Vec<PhaseReport> {
    let plan = args.plan(None).unwrap();
    let root = DbRoot::prepare(None).unwrap();
    let mut reports = Vec::new();
    let mut order = Vec::new();
    plan.run(&root, &mut reports, &mut |r| {
        order.push((r.engine.clone(), r.workload.clone()))
    })
    .unwrap();
    // Each engine's directory is emptied after its run (no --keep).
    assert_eq!(
        std::fs::read_dir(root.path())
            .unwrap()
            .flat_map(|e| std::fs::read_dir(e.unwrap().path()).into_iter().flatten())
            .count(),
        0,
        "databases left behind"
    );
    root.finish(false).unwrap();
    reports
}

#[test]
fn repeated_rounds_rotate_the_engines_and_report_medians() {
    let reports = run_plan(&repeat_args(
        &["sepkv:leveldb", "sepkv:wisckey", "fjall"],
        Some(3),
    ));
    assert_eq!(reports.len(), 3 * 3 * 2);
    // Round r starts from engine r; each engine runs both phases in turn.
    let firsts: Vec<(&str, u32)> = reports
        .iter()
        .filter(|r| r.workload == "fillrandom")
        .map(|r| (r.engine.as_str(), r.round.unwrap()))
        .collect();
    assert_eq!(
        firsts,
        [
            ("sepkv:leveldb", 0),
            ("sepkv:wisckey", 0),
            ("fjall", 0),
            ("sepkv:wisckey", 1),
            ("fjall", 1),
            ("sepkv:leveldb", 1),
            ("fjall", 2),
            ("sepkv:leveldb", 2),
            ("sepkv:wisckey", 2),
        ]
    );
    let run = reports[0].run.clone().expect("a run identifier");
    assert!(reports.iter().all(|r| r.run.as_ref() == Some(&run)));
    // Every round starts on an empty database: the fill finds nothing.
    for r in reports.iter().filter(|r| r.workload == "fillrandom") {
        assert_eq!(r.live_records, 2000, "{}", r.engine);
        assert!(r.settle.is_none(), "--no-settle");
    }
    assert!(sepkv_bench::repeat::is_repeated(&reports));
    let sums = sepkv_bench::repeat::summarize(&reports);
    assert_eq!(sums.len(), 6);
    for s in &sums {
        assert_eq!(s.rounds, 3, "{}", s.engine);
        let mut v: Vec<f64> = reports
            .iter()
            .filter(|r| r.engine == s.engine && r.workload == s.workload)
            .map(|r| r.ops_per_sec)
            .collect();
        v.sort_by(f64::total_cmp);
        assert_eq!(
            (s.ops_per_sec.min, s.ops_per_sec.median, s.ops_per_sec.max),
            (v[0], v[1], v[2])
        );
        let wa = s.process_write_amp.or(s.write_amp).expect("bytes written");
        assert!(wa.min <= wa.median && wa.median <= wa.max);
        assert!(s.latency_us.p50.min <= s.latency_us.p99.max);
    }
    // Text and markdown carry the medians and ranges.
    let mut text = Vec::new();
    sepkv_bench::repeat::print_summary(&reports, &mut text).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(text.contains("Medians over the rounds"), "{text}");
    let leveldb_fill = &sums[0];
    assert!(
        text.contains(&format!(
            "{:.1} ({:.1}–{:.1})",
            leveldb_fill.ops_per_sec.median / 1000.0,
            leveldb_fill.ops_per_sec.min / 1000.0,
            leveldb_fill.ops_per_sec.max / 1000.0
        )),
        "{text}"
    );
    let md = sepkv_bench::report::markdown(&reports);
    assert!(md.contains("## Medians over the rounds"), "{md}");
    assert!(md.contains("## Throughput (kops/s), medians of the rounds"));
    assert!(md.contains("| sepkv:wisckey r2 | fillrandom |"), "{md}");
}

#[test]
fn repeated_json_round_trips_and_runs_merged_from_json_stay_apart() {
    let args = repeat_args(&["sepkv:wisckey"], Some(2));
    let a = run_plan(&args);
    let b = run_plan(&args);
    assert_ne!(a[0].run, b[0].run, "two invocations, two run identifiers");
    let dir = tempfile::tempdir().unwrap();
    let (pa, pb) = (dir.path().join("a.json"), dir.path().join("b.json"));
    write_json(&a, &pa).unwrap();
    write_json(&b, &pb).unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&pa).unwrap()).unwrap();
    assert_eq!(v["phases"].as_array().unwrap().len(), 4);
    let summary = v["summary"].as_array().unwrap();
    assert_eq!(summary.len(), 2);
    assert_eq!(summary[0]["rounds"], 2);
    for f in ["median", "min", "max"] {
        assert!(summary[0]["ops_per_sec"][f].is_number(), "{f}");
        assert!(summary[0]["latency_us"]["p99"][f].is_number(), "{f}");
    }
    let merged = sepkv_bench::report::read_json(&[pa.clone(), pb]).unwrap();
    assert_eq!(merged.len(), 8);
    let sums = sepkv_bench::repeat::summarize(&merged);
    let labels: Vec<(&str, &str, usize)> = sums
        .iter()
        .map(|s| (s.engine.as_str(), s.workload.as_str(), s.rounds))
        .collect();
    assert_eq!(
        labels,
        [
            ("sepkv:wisckey [run 1]", "fillrandom", 2),
            ("sepkv:wisckey [run 1]", "overwrite", 2),
            ("sepkv:wisckey [run 2]", "fillrandom", 2),
            ("sepkv:wisckey [run 2]", "overwrite", 2),
        ]
    );
    // Side by side in the markdown: one column per run.
    let md = sepkv_bench::report::markdown(&merged);
    assert!(
        md.contains("| workload | phase | sepkv:wisckey [run 1] | sepkv:wisckey [run 2] |"),
        "{md}"
    );
    // A file of single runs (an array, without run identifiers) still
    // reads; two such files stay apart too.
    let mut single = a[..2].to_vec();
    for r in &mut single {
        r.run = None;
        r.round = None;
    }
    let ps = dir.path().join("single.json");
    std::fs::write(&ps, serde_json::to_string(&single).unwrap()).unwrap();
    let back = sepkv_bench::report::read_json(&[ps.clone(), ps]).unwrap();
    assert_eq!(back[0].run.as_deref(), Some("single.json #1"));
    assert_eq!(back[2].run.as_deref(), Some("single.json #2"));
    assert_eq!(sepkv_bench::repeat::summarize(&back).len(), 4);
    // Not JSON of the harness: a clear error naming the file.
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"x\": 1}").unwrap();
    let err = sepkv_bench::report::read_json(&[bad]).unwrap_err();
    assert!(err.to_string().contains("bad.json"), "{err}");
    assert!(
        err.to_string().contains("not a sepkv bench JSON file"),
        "{err}"
    );
}

#[test]
fn settling_is_recorded_before_each_empty_database() {
    let mut args = repeat_args(&["sepkv:leveldb"], None);
    args.no_settle = false;
    args.workload = vec!["fillrandom".into(), "overwrite".into(), "fillseq".into()];
    let reports = run_plan(&args);
    let settle = |w: &str| phase(&reports, w, "run").settle;
    let s = settle("fillrandom").expect("settled before the first database");
    assert!(s.seconds >= 0.0 && s.seconds < 60.0, "{s:?}");
    assert!(settle("overwrite").is_none(), "continues the same database");
    assert!(settle("fillseq").is_some(), "starts from an empty database");
}
