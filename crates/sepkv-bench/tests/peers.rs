//! The peer engines: spec parsing and the catalogue, and small end-to-end
//! runs on fjall and fjall-kv (RocksDB and LevelDB are not built in tests).

use sepkv_bench::config::{BenchConfig, Workload, WorkloadRun};
use sepkv_bench::engine::{EngineFactory, EngineSpec};
use sepkv_bench::report::PhaseReport;
use sepkv_bench::runner::run_engine;
use sepkv_bench::BenchError;

/// Whether this test build can run Badger (release, feature `badger`).
const BADGER_BUILT: bool = cfg!(feature = "badger") && !cfg!(debug_assertions);

#[test]
fn peer_specs_parse_and_print() {
    for (s, spec) in [
        ("fjall", EngineSpec::Fjall { kv: false }),
        ("fjall-kv", EngineSpec::Fjall { kv: true }),
        ("rocksdb", EngineSpec::RocksDb { blob: false }),
        ("rocksdb-blob", EngineSpec::RocksDb { blob: true }),
        ("leveldb", EngineSpec::LevelDb),
    ] {
        assert_eq!(s.parse::<EngineSpec>().unwrap(), spec);
        assert_eq!(spec.to_string(), s);
        assert_eq!(spec.label(), s);
    }
    assert!(" fjall ".parse::<EngineSpec>().is_ok());
    assert!(matches!(
        "fjall:x".parse::<EngineSpec>(),
        Err(BenchError::InvalidArgument(_))
    ));
    // Badger parses; it runs only in a release build with its feature,
    // and otherwise says how to build it.
    let b: EngineSpec = "badger".parse().unwrap();
    assert_eq!(b, EngineSpec::Badger { kv: false });
    let avail = b.check_available();
    assert_eq!(avail.is_ok(), BADGER_BUILT);
    if let Err(e) = avail {
        assert!(matches!(e, BenchError::Unavailable(_)), "{e}");
        assert!(e.to_string().contains("badger"), "{e}");
    }
    assert!("blobdb".parse::<EngineSpec>().is_err());
    // Tests never build RocksDB (feature off) and run in debug builds.
    let e = EngineSpec::RocksDb { blob: true }
        .check_available()
        .unwrap_err();
    assert!(matches!(e, BenchError::Unavailable(_)), "{e}");
    assert!(e.to_string().contains("rocksdb-blob"), "{e}");
    let e = EngineSpec::LevelDb.check_available().unwrap_err();
    assert!(e.to_string().contains("leveldb"), "{e}");
    EngineSpec::Fjall { kv: true }.check_available().unwrap();
}

#[test]
fn catalogue_lists_peers() {
    let cat = EngineSpec::catalogue();
    let find = |n: &str| cat.iter().find(|(s, _, _)| s == n).cloned().unwrap();
    assert!(find("fjall").1);
    assert!(find("fjall-kv").1);
    assert!(!find("rocksdb").1);
    assert!(
        find("rocksdb").2.contains("--features rocksdb") || find("rocksdb").2.contains("debug")
    );
    assert!(!find("leveldb").1);
    assert_eq!(find("badger").1, BADGER_BUILT);
    assert_eq!(find("badger-kv").1, BADGER_BUILT);
    assert!(
        BADGER_BUILT
            || find("badger-kv").2.contains("--features badger")
            || find("badger-kv").2.contains("debug")
    );
    let avail = EngineSpec::available();
    assert!(avail.contains(&EngineSpec::Fjall { kv: false }));
    assert!(avail.contains(&EngineSpec::Fjall { kv: true }));
    assert!(!avail.contains(&EngineSpec::RocksDb { blob: false }));
    assert!(avail
        .iter()
        .any(|s| matches!(s, EngineSpec::Sepkv(sepkv::Preset::LevelDb, _))));
}

fn run_small(spec: EngineSpec) -> Vec<PhaseReport> {
    let cfg = BenchConfig {
        workloads: [
            Workload::FillRandom,
            Workload::Overwrite,
            Workload::ReadRandom,
            Workload::SeekRandom,
            Workload::Ycsb('a'),
            Workload::Update,
        ]
        .into_iter()
        .map(WorkloadRun::from)
        .collect(),
        num: 2000,
        ops: Some(500),
        value_size: 1000,
        phases: 1,
        progress: false,
        ..BenchConfig::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let mut reports = Vec::new();
    run_engine(&spec, dir.path(), &cfg, &mut reports, &mut |_| {}).unwrap();
    reports
}

fn phase<'a>(reports: &'a [PhaseReport], workload: &str, phase: &str) -> &'a PhaseReport {
    reports
        .iter()
        .find(|r| r.workload == workload && r.phase == phase)
        .unwrap_or_else(|| panic!("no report {workload}/{phase}"))
}

fn check_peer_run(reports: &[PhaseReport], label: &str) {
    check_run(reports, label, "fjall");
}

/// What every peer's small run must show: every record written and read
/// back, scans that read entries, and the process's I/O as the engine's.
fn check_run(reports: &[PhaseReport], label: &str, engine: &str) {
    let fill = phase(reports, "fillrandom", "run");
    assert_eq!(fill.ops, 2000);
    assert_eq!(fill.live_records, 2000);
    assert_eq!(fill.live_bytes, 2000 * 1016);
    assert!(fill.db_bytes > 0);
    let read = phase(reports, "readrandom", "run");
    assert_eq!((read.ops, read.not_found), (500, 0));
    assert_eq!(read.user_bytes_read, 500 * 1000);
    let seek = phase(reports, "seekrandom", "run");
    assert!(seek.counts["scan_entries"] > 500);
    phase(reports, "ycsb-a", "run");
    phase(reports, "update", "update-1");
    for r in reports {
        assert_eq!(r.engine, label);
        assert_eq!(r.engine_options["engine"], engine);
        assert_eq!(r.engine_options["compression"], "none");
        assert!(
            r.notes.iter().any(|n| n.contains("/proc/self/io")),
            "{:?}",
            r.notes
        );
        if let Some(p) = r.process_io {
            // The engine's bytes are the process's.
            assert!(r.bytes_written_by_category.keys().all(|k| k == "process"));
            assert_eq!(r.bytes_written, p.net_written());
            assert_eq!(r.write_amp, r.process_write_amp);
        }
    }
}

#[test]
fn fjall_end_to_end_small() {
    let reports = run_small(EngineSpec::Fjall { kv: false });
    check_peer_run(&reports, "fjall");
    let r = phase(&reports, "fillrandom", "run");
    assert_eq!(r.engine_options["kv_separation"], false);
    assert_eq!(r.engine_counters["blob_files"], 0);

    // Markdown and charts of the run, and the JSON round trip behind
    // `--from-json`.
    let md = sepkv_bench::report::markdown(&reports);
    assert!(md.contains("## Throughput (kops/s)"), "{md}");
    assert!(md.contains("| workload | phase | fjall |"), "{md}");
    assert!(md.contains("| fillrandom | run |"), "{md}");
    assert!(!md.contains("Best sepkv preset"), "no sepkv side: {md}");
    // Beside a sepkv engine twice as fast that writes half as much, the
    // comparison section shows the ratios.
    let mut both = reports.clone();
    both.extend(reports.iter().cloned().map(|mut r| {
        r.engine = "sepkv:test".into();
        r.ops_per_sec *= 2.0;
        r.process_write_amp = r.process_write_amp.map(|w| w / 2.0);
        r
    }));
    let md = sepkv_bench::report::markdown(&both);
    assert!(md.contains("## Best sepkv preset vs best peer"), "{md}");
    let row = md
        .lines()
        .find(|l| l.starts_with("| fillrandom | run | **"))
        .unwrap_or_else(|| panic!("{md}"));
    assert!(row.contains("**2.00×** (sepkv:test"), "{row}");
    assert!(row.contains("**0.50×** (sepkv:test"), "{row}");
    assert!(row.contains("**1.00×** (sepkv:test"), "{row}");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    sepkv_bench::report::write_json(&reports, &json).unwrap();
    let back = sepkv_bench::report::read_json(&[json.clone(), json]).unwrap();
    assert_eq!(back.len(), 2 * reports.len());
    let files = sepkv_bench::plot::write_plots(&reports, &dir.path().join("plots")).unwrap();
    assert_eq!(files.len(), 4);
    for f in files {
        let svg = std::fs::read_to_string(&f).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("fjall"),
            "{}",
            f.display()
        );
    }
}

#[test]
fn fjall_kv_end_to_end_small_separates_values() {
    let reports = run_small(EngineSpec::Fjall { kv: true });
    check_peer_run(&reports, "fjall-kv");
    let r = phase(&reports, "fillrandom", "run");
    assert_eq!(r.engine_options["kv_separation"], true);
    assert_eq!(r.engine_options["separation_threshold"], 128);
    assert!(
        r.engine_counters["blob_files"] > 0,
        "1000-byte values go to blob files: {:?}",
        r.engine_counters
    );
}

/// Badger's small runs, through its Go driver and the chunked operations:
/// only in a release build with the feature `badger`
/// (`cargo test --release --features badger -p sepkv-bench --test peers`).
#[cfg(all(feature = "badger", not(debug_assertions)))]
#[test]
fn badger_end_to_end_small() {
    for (kv, label) in [(false, "badger"), (true, "badger-kv")] {
        let reports = run_small(EngineSpec::Badger { kv });
        check_run(&reports, label, "badger");
        let r = phase(&reports, "fillrandom", "run");
        let threshold = if kv { 128 } else { 1 << 20 };
        assert_eq!(r.engine_options["value_threshold"], threshold);
        assert!(r.engine_counters.contains_key("vlog_gc_runs"));
        // Chunked operations are timed one by one, in the driver.
        assert!(r.latency_us.p50 > 0.0 && r.latency_us.p50 <= r.latency_us.max);
    }
}
