//! The `sepkv bench` command: its options ([`BenchArgs`], flattened into
//! the CLI by clap), the default suite, and [`run`], which turns the
//! options into a [`Command`] once ([`crate::plan`]) and carries it out:
//! lists the engines, reports on earlier results, or runs a benchmark and
//! prints the summary table.
//!
//! The default suite (`sepkv bench` with no workload) is the project's main
//! job: every sepkv preset beside the fjall peers (`fjall`, and `fjall-kv`
//! with key-value separation) on a short load, read, scan and overwrite mix
//! of [`SUITE_NUM`] records with [`SUITE_VALUE_SIZE`]-byte values, large
//! enough to be separated. It ends with each preset's throughput as a ratio
//! to the best peer per workload ([`crate::report::print_ratios`]) and
//! writes the tables, the JSON and the charts to [`SUITE_REPORT_DIR`].

use crate::engine::EngineSpec;
use crate::error::{BenchError, Result};
use crate::plan::{Command, Outputs, Plan};
use crate::report::{
    print_ratios, print_table, read_json, write_json, write_markdown, PhaseReport,
};
use crate::DbRoot;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Records of the default suite's workloads.
pub const SUITE_NUM: u64 = 200_000;
/// Value size of the default suite (bytes): above every preset's
/// `value_threshold`, so the value-separated presets separate every value.
pub const SUITE_VALUE_SIZE: usize = 1000;
/// Value size of explicit workloads when `--value-size` is not given
/// (bytes; db_bench's).
pub const DEFAULT_VALUE_SIZE: usize = 100;
/// Records of explicit workloads when `--num` is not given (db_bench's).
pub const DEFAULT_NUM: u64 = 1_000_000;
/// Where the default suite writes its report (JSON, markdown, charts) when
/// `--json`, `--markdown` and `--plot` are not given: a directory of this
/// name in the current directory.
pub const SUITE_REPORT_DIR: &str = "sepkv-bench-report";
/// The peers the default suite runs beside every sepkv preset.
pub const SUITE_PEERS: [&str; 2] = ["fjall", "fjall-kv"];

/// Options of `sepkv bench`. Sizes are bytes. The database directory is
/// the CLI's global `--db` (a fresh temporary directory when not given).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct BenchArgs {
    /// Engines, comma-separated: `sepkv:<preset>`, `fjall`, `fjall-kv`,
    /// `rocksdb`, `rocksdb-blob`, `leveldb` (see --list-engines)
    /// [default: sepkv:leveldb; default suite: every preset, fjall, fjall-kv].
    #[arg(long, value_delimiter = ',', value_name = "SPEC")]
    pub engine: Vec<String>,
    /// Workloads, comma-separated, run in order: fillseq, fillrandom,
    /// overwrite, readrandom, readseq, seekrandom, readwhilewriting,
    /// deleterandom, ycsb-load, ycsb-a..ycsb-f, trace, update. Without it
    /// (and without --trace) the default suite runs: fillrandom,
    /// readrandom, seekrandom, overwrite.
    #[arg(long, value_delimiter = ',', value_name = "NAME")]
    pub workload: Vec<String>,
    /// Records [default: 1000000; default suite: 200000].
    #[arg(long, value_name = "N")]
    pub num: Option<u64>,
    /// Value size of the db_bench-style workloads and `update` (bytes)
    /// [default: 100; default suite: 1000].
    #[arg(long, value_name = "B")]
    pub value_size: Option<usize>,
    /// Key size of the db_bench-style workloads and `update` (bytes;
    /// zero-padded decimal record numbers).
    #[arg(long, default_value_t = 16, value_name = "B")]
    pub key_size: usize,
    /// Operations per phase [default: --num].
    #[arg(long, value_name = "M")]
    pub ops: Option<u64>,
    /// Client threads (readwhilewriting: readers, plus one writer).
    #[arg(long, default_value_t = 1, value_name = "T")]
    pub threads: usize,
    /// Random seed.
    #[arg(long, default_value_t = 1, value_name = "S")]
    pub seed: u64,
    /// Entries read after each seek of seekrandom.
    #[arg(long, default_value_t = 100, value_name = "L")]
    pub scan_length: usize,
    /// Trace files replayed in order into one database, one phase each
    /// (`.gz` accepted); implies `--workload trace` when no workload is given.
    #[arg(long, value_delimiter = ',', value_name = "FILE")]
    pub trace: Vec<PathBuf>,
    /// Keep the database directory after the run.
    #[arg(long)]
    pub keep: bool,
    /// sepkv engines only: take a checkpoint (`Db::checkpoint`) this many
    /// seconds after the database opens, while the workload runs, into
    /// `<db dir>.checkpoint`; then open it read-only, verify it and print
    /// what it holds and its size beside the source's on stderr.
    #[arg(long, value_name = "SECS")]
    pub checkpoint_after: Option<f64>,
    /// Read with direct I/O (O_DIRECT) where the engine can: sepkv
    /// (`Options::use_direct_reads`) and the RocksDB peers; fjall and
    /// LevelDB read buffered, and the report says so.
    #[arg(long)]
    pub direct_io: bool,
    /// Bound the benchmark process's memory, page cache included, with a
    /// memory cgroup (v1 or v2; needs root), so that reads reach the device
    /// once the data outgrows it. Bytes, or with a unit: 400M, 400MiB,
    /// 1GB. Engines run one after another in the same bound.
    #[arg(long, value_name = "BYTES")]
    pub memory_limit: Option<String>,
    /// Emulate a slower device: bound the process's reads and writes to the
    /// disk holding the databases to RATE bytes per second each, or READ and
    /// WRITE apart (`169MB:155MB`, a hard drive's), with the block layer's
    /// throttle (cgroup v1 blkio or v2 io; needs root). On cgroup v1 only
    /// I/O the engines send themselves (reads, fsync, sync_file_range) is
    /// bounded, not the kernel's own writeback; the run reports the bytes
    /// the bound saw.
    #[arg(long, value_name = "RATE|READ:WRITE")]
    pub device_bandwidth: Option<String>,
    /// Also write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also write the results as markdown tables to FILE (engines side by
    /// side per workload, then every phase).
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Also draw charts (throughput, write and space amplification, p99
    /// latency; engines side by side per workload) into DIR, as SVG and —
    /// when a TrueType font is found (SEPKV_PLOT_FONT or the system's
    /// DejaVu/Liberation fonts) — PNG.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Run nothing: read these JSON result files (from --json), print the
    /// table, and write --markdown, --plot and --json (combined) from them.
    #[arg(long, value_delimiter = ',', value_name = "FILE")]
    pub from_json: Vec<PathBuf>,
    /// Sync every write.
    #[arg(long)]
    pub sync: bool,
    /// Update phases of the `update` workload.
    #[arg(long, default_value_t = 3, value_name = "P")]
    pub phases: usize,
    /// Reserve of the `update` workload's value store as a share of the
    /// data: sepkv's value log and HashKV store get a capacity of
    /// data × (1 + R), GC running first when a write would pass it (HashKV
    /// §4.1); `none` leaves them unbounded. Peers are not bounded.
    /// [default: 0.3]
    #[arg(long, value_name = "R|none")]
    pub reserve: Option<String>,
    /// Give a share of the records small values instead of --value-size
    /// ones, e.g. `24:0.5` (HashKV §4.4 Exp. 7: 40-byte pairs mixed with
    /// 1 KiB pairs); a record keeps its size across updates.
    #[arg(long, value_name = "SIZE:SHARE")]
    pub small_values: Option<String>,
    /// YCSB fields per record (inserts write all, updates one).
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub field_count: usize,
    /// YCSB bytes per field.
    #[arg(long, default_value_t = 100, value_name = "B")]
    pub field_length: usize,
    /// List the engine specs and whether this build can run them, then exit.
    #[arg(long)]
    pub list_engines: bool,
    /// Run the whole engine list N times, round r starting from the r-th
    /// engine (rotated), each engine on a fresh database every round; the
    /// report gives per engine and phase the median of the rounds and
    /// their range [default: 1].
    #[arg(long, value_name = "N")]
    pub repeat: Option<u32>,
    /// Do not settle the machine before each engine's run and each phase
    /// that starts from an empty database (by default: syncfs, wait up to
    /// 30 s for dirty pages to drain, drop the page cache where allowed).
    #[arg(long)]
    pub no_settle: bool,
    /// Hide progress: the bars drawn on a terminal, and the lines printed
    /// every 5 seconds when stderr is not one.
    #[arg(long)]
    pub no_progress: bool,
}

/// The directory of the bundled YCSB trace sample.
pub fn bundled_data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data")
}

impl BenchArgs {
    /// The run these options describe; `db` is the database directory
    /// named on the command line, if any (see [`Plan::new`]).
    ///
    /// # Errors
    /// [`BenchError::InvalidArgument`] or [`BenchError::Unavailable`] for
    /// unknown or unavailable engines and workloads, bad settings, or a
    /// missing trace file.
    pub fn plan(&self, db: Option<PathBuf>) -> Result<Plan> {
        Plan::new(self, db, None)
    }
}

fn print_catalogue(out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out, "{:<16} {:<11} notes", "engine", "status")?;
    for (spec, avail, note) in EngineSpec::catalogue() {
        let status = if avail { "available" } else { "unavailable" };
        writeln!(out, "{spec:<16} {status:<11} {note}")?;
    }
    writeln!(
        out,
        "\nflags after a sepkv preset (sepkv:<preset>+flag+...):"
    )?;
    for (flag, what) in crate::engine::TUNING_HELP {
        writeln!(out, "  {flag:<12} {what}")?;
    }
    Ok(())
}

/// Writes the markdown file and the charts where `outputs` names them.
fn write_outputs(outputs: &Outputs, reports: &[PhaseReport]) -> Result<()> {
    if let Some(path) = &outputs.markdown {
        write_markdown(reports, path)?;
        eprintln!("wrote markdown tables to {}", path.display());
    }
    if let Some(dir) = &outputs.plot {
        // Repeated rounds: one bar per engine, at the median.
        let files = if crate::repeat::is_repeated(reports) {
            crate::plot::write_plots(&crate::repeat::medians(reports), dir)?
        } else {
            crate::plot::write_plots(reports, dir)?
        };
        eprintln!("wrote {} chart(s) to {}", files.len(), dir.display());
    }
    Ok(())
}

/// `--from-json`: prints the table of the results in `inputs` and writes
/// `outputs` (the JSON combined) from them.
fn report(inputs: &[PathBuf], outputs: &Outputs) -> Result<()> {
    let reports = read_json(inputs)?;
    {
        let mut out = std::io::stdout().lock();
        print_table(&reports, &mut out).map_err(out_err)?;
        if crate::repeat::is_repeated(&reports) {
            crate::repeat::print_summary(&reports, &mut out).map_err(out_err)?;
        }
        out.flush().map_err(out_err)?;
    }
    if let Some(path) = &outputs.json {
        write_json(&reports, path)?;
    }
    write_outputs(outputs, &reports)
}

fn out_err(e: std::io::Error) -> BenchError {
    BenchError::io("<stdout>", e)
}

/// Runs `sepkv bench`: prints a line per finished phase on stderr, then the
/// summary table on stdout, and writes the JSON file when asked (also for
/// the phases completed before an error).
///
/// # Errors
/// Any planning, engine, trace or output error.
pub fn run(args: &BenchArgs, db: Option<PathBuf>, preset: Option<&str>) -> Result<()> {
    match Command::new(args, db, preset)? {
        Command::ListEngines => print_catalogue(&mut std::io::stdout().lock()).map_err(out_err),
        Command::Report { inputs, outputs } => report(&inputs, &outputs),
        Command::Run(plan) => run_plan(&plan),
    }
}

/// Runs `plan`: the header and notes on stderr, the limits, every engine,
/// then the summary on stdout and the outputs.
fn run_plan(plan: &Plan) -> Result<()> {
    if let Some(dir) = &plan.outputs.create_dir {
        std::fs::create_dir_all(dir).map_err(|e| BenchError::io(dir, e))?;
    }
    let cfg = &plan.config;
    let root = DbRoot::prepare(plan.db.as_deref())?;
    let names: Vec<String> = cfg
        .workloads
        .iter()
        .map(|w| w.workload.to_string())
        .collect();
    let engines: Vec<String> = plan.engines.iter().map(|e| e.to_string()).collect();
    eprintln!(
        "sepkv bench{}: engines {}; workloads {}; num {}; value {} B; key {} B; threads {}; seed {}; sync {}; rounds {}; settle {}; db {}",
        if plan.suite { " (default suite)" } else { "" },
        engines.join(","),
        names.join(","),
        cfg.num,
        cfg.value_size,
        cfg.key_size,
        cfg.threads,
        cfg.seed,
        cfg.sync,
        plan.repeat,
        if plan.settle { "on" } else { "off" },
        root.shown()
    );
    if let Some(sv) = cfg.small_values {
        eprintln!(
            "small values: {:.0} % of the records have {} B values",
            sv.share * 100.0,
            sv.size
        );
    }
    if plan.has_update() {
        match cfg.update_capacity() {
            Some((cap, _)) => eprintln!(
                "update: sepkv value stores bounded to {cap} B (data + {:.0} % reserve; the bands layout to {} B, \
                 the same reserve over its entries' bytes); GC runs when a write would pass it",
                cfg.reserve.unwrap_or(0.0) * 100.0,
                cfg.update_band_capacity().unwrap_or(cap)
            ),
            None => eprintln!("update: sepkv value stores unbounded (--reserve none)"),
        }
    }
    if cfg.direct_io
        && plan
            .engines
            .iter()
            .any(|e| !matches!(e, EngineSpec::RocksDb { .. } | EngineSpec::Sepkv(..)))
    {
        eprintln!("note: --direct-io: only sepkv and the RocksDB peers read with direct I/O; the others use buffered I/O and the report says so");
    }
    // Held until the run ends: dropping it moves the process back out of
    // the bounded group.
    let _memory_limit = match cfg.memory_limit {
        Some(bytes) => {
            let limit = crate::cgroup::MemoryLimit::apply(bytes)?;
            eprintln!(
                "memory limit: {} MiB, page cache included (cgroup {:?} {}; usage now {} MiB)",
                bytes >> 20,
                limit.version(),
                limit.group().display(),
                limit.usage().unwrap_or(0) >> 20
            );
            if engines.len() > 1 {
                eprintln!(
                    "note: --memory-limit bounds the whole process: memory an engine's run leaves in the heap counts against the engines after it (run one engine per process, as scripts/compare.sh does, to give each the whole limit)"
                );
            }
            Some(limit)
        }
        None => None,
    };
    // After the memory limit: on cgroup v2 it bounds the same group.
    let io_limit = match cfg.device_bandwidth {
        Some((r, w)) => {
            let limit = crate::cgroup::IoLimit::apply(root.path(), r, w)?;
            let (major, minor) = limit.device();
            eprintln!(
                "device bandwidth: reads {:.1} MB/s, writes {:.1} MB/s on device {major}:{minor} (bytes only, no seek time)",
                r as f64 / 1e6,
                w as f64 / 1e6
            );
            if engines.len() > 1 {
                eprintln!(
                    "note: --device-bandwidth: writes an engine leaves dirty may be written back while the next engine runs; run one engine per process for a clean account"
                );
            }
            Some(limit)
        }
        None => None,
    };
    let started = std::time::Instant::now();
    let mut reports: Vec<PhaseReport> = Vec::new();
    let res = plan.run(&root, &mut reports, &mut |r| {
        eprintln!(
            "  {} {}/{}: {} ops in {:.2} s ({:.0} ops/s), p99 {:.1} µs",
            r.engine, r.workload, r.phase, r.ops, r.seconds, r.ops_per_sec, r.latency_us.p99
        );
    });
    let kept = root.finish(plan.keep);
    eprintln!("total {:.1} s", started.elapsed().as_secs_f64());
    if let Some((read, written)) = io_limit.as_ref().and_then(|l| l.charged()) {
        eprintln!(
            "device bandwidth: the bound saw {:.1} MB read and {:.1} MB written",
            read as f64 / 1e6,
            written as f64 / 1e6
        );
    }
    drop(io_limit);
    {
        let mut out = std::io::stdout().lock();
        if !reports.is_empty() {
            print_table(&reports, &mut out).map_err(out_err)?;
            let repeated = crate::repeat::is_repeated(&reports);
            if repeated {
                crate::repeat::print_summary(&reports, &mut out).map_err(out_err)?;
            }
            if plan.suite {
                if repeated {
                    print_ratios(&crate::repeat::medians(&reports), &mut out)
                } else {
                    print_ratios(&reports, &mut out)
                }
                .map_err(out_err)?;
                writeln!(
                    out,
                    "\ncaution: one short run on a shared machine can move a phase by tens of \
                     percent; docs/benchmarks.md has the repeated figures at 1 GiB and device-bound"
                )
                .map_err(out_err)?;
            }
        }
        out.flush().map_err(out_err)?;
    }
    if let Some(path) = &plan.outputs.json {
        write_json(&reports, path)?;
        eprintln!(
            "wrote {} phase report(s) to {}",
            reports.len(),
            path.display()
        );
    }
    write_outputs(&plan.outputs, &reports)?;
    if let Ok(Some(dir)) = &kept {
        eprintln!("kept the database directory {}", dir.display());
    }
    res?;
    kept.map(|_| ())
}
