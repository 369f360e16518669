//! Per-phase results: the [`PhaseReport`] record (the JSON schema, see the
//! crate's README), the amplification arithmetic, the summary table and
//! the JSON file.

use crate::config::BenchConfig;
use crate::engine::EngineIo;
use crate::error::{BenchError, Result};
use crate::measure::{LatencySummary, ProcIo};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// Engine reads of at least this many bytes (1 MiB) are enough to judge
/// whether the page cache served them.
pub const PAGE_CACHE_MIN_BYTES: u64 = 1 << 20;

/// The phrase of the per-phase page-cache note (the table summarizes those
/// notes in one line).
pub const PAGE_CACHE_NOTE: &str = "reads were served from the page cache";

/// The settings of the run, repeated in every report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// Records (`--num`).
    pub num: u64,
    /// Operations per phase requested (`--ops`; `null` = `num`).
    pub ops: Option<u64>,
    /// Value size of the db_bench-style workloads (bytes).
    pub value_size: usize,
    /// Key size of the db_bench-style workloads (bytes).
    pub key_size: usize,
    /// Client threads.
    pub threads: usize,
    /// Random seed.
    pub seed: u64,
    /// Every write synced.
    pub sync: bool,
    /// Entries per seek of `seekrandom`.
    pub scan_length: usize,
    /// Update phases of `update`.
    pub phases: usize,
    /// YCSB fields per record.
    pub field_count: usize,
    /// YCSB bytes per field.
    pub field_length: usize,
    /// Direct I/O requested.
    pub direct_io_requested: bool,
    /// Direct I/O in effect.
    pub direct_io: bool,
    /// The process's memory bound, page cache included (`--memory-limit`,
    /// bytes; `null` = none).
    #[serde(default)]
    pub memory_limit: Option<u64>,
    /// The emulated device's bandwidth (`--device-bandwidth`, bytes per
    /// second: `[reads, writes]`; `null` = the device's own).
    #[serde(default)]
    pub device_bandwidth: Option<[u64; 2]>,
    /// Trace files (names only) of the `trace` workload.
    pub traces: Vec<String>,
    /// Small-value mix (`--small-values`), if any.
    #[serde(default)]
    pub small_values: Option<crate::config::SmallValues>,
    /// Reserve of the `update` workload's value store (`--reserve`; `null`
    /// = unbounded).
    #[serde(default)]
    pub reserve: Option<f64>,
    /// The `update` workload's sepkv value-store capacity (bytes).
    #[serde(default)]
    pub update_value_capacity: Option<u64>,
}

impl Settings {
    /// Where the phase's reads could be served from: `page cache`,
    /// `device-bound (memory limit N MiB)`, `direct reads`, or both bounds;
    /// with `, device bandwidth R/W MB/s` after it under `--device-bandwidth`.
    pub fn mode(&self) -> String {
        let mode = self.read_mode();
        match self.device_bandwidth {
            None => mode,
            Some([r, w]) => format!(
                "{mode}, device bandwidth {:.0}/{:.0} MB/s",
                r as f64 / 1e6,
                w as f64 / 1e6
            ),
        }
    }

    fn read_mode(&self) -> String {
        match (self.memory_limit, self.direct_io) {
            (None, false) => "page cache".into(),
            (None, true) => "device-bound (direct reads)".into(),
            (Some(b), false) => format!("device-bound (memory limit {} MiB)", b >> 20),
            (Some(b), true) => {
                format!("device-bound (memory limit {} MiB, direct reads)", b >> 20)
            }
        }
    }

    /// The settings of `cfg` with the engine's direct-I/O state.
    pub fn of(cfg: &BenchConfig, direct_io: bool) -> Self {
        Settings {
            num: cfg.num,
            ops: cfg.ops,
            value_size: cfg.value_size,
            key_size: cfg.key_size,
            threads: cfg.threads,
            seed: cfg.seed,
            sync: cfg.sync,
            scan_length: cfg.scan_length,
            phases: cfg.phases,
            field_count: cfg.field_count,
            field_length: cfg.field_length,
            direct_io_requested: cfg.direct_io,
            direct_io,
            memory_limit: cfg.memory_limit,
            device_bandwidth: cfg.device_bandwidth.map(|(r, w)| [r, w]),
            traces: cfg
                .traces
                .iter()
                .map(|p| {
                    p.file_name().map_or_else(
                        || p.display().to_string(),
                        |n| n.to_string_lossy().into_owned(),
                    )
                })
                .collect(),
            small_values: cfg.small_values,
            reserve: cfg.reserve,
            update_value_capacity: cfg.update_capacity().map(|c| c.0),
        }
    }
}

/// The results of one phase of one workload on one engine. Byte counts
/// are bytes; amplifications are `null` when their denominator is zero.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseReport {
    /// Engine label (`sepkv:leveldb`).
    pub engine: String,
    /// Workload name (`fillrandom`, `ycsb-a`, `trace`, ...).
    pub workload: String,
    /// Phase name (`run`, `load`, `auto-load`, `update-2`, a trace file name).
    pub phase: String,
    /// Operations done (for trace replay: the file's lines).
    pub ops: u64,
    /// Gets that found no value.
    pub not_found: u64,
    /// Wall-clock time of the operations (s), excluding the flush after them.
    pub seconds: f64,
    /// `ops / seconds`.
    pub ops_per_sec: f64,
    /// Latency of one operation (µs).
    pub latency_us: LatencySummary,
    /// Key + value bytes of puts, key bytes of deletes.
    pub user_bytes_written: u64,
    /// Value bytes returned by gets, key + value bytes returned by scans.
    pub user_bytes_read: u64,
    /// Bytes the engine wrote to files during the phase and its flush.
    pub bytes_written: u64,
    /// Bytes the engine read from files during the phase and its flush.
    pub bytes_read: u64,
    /// `bytes_written` by engine category.
    pub bytes_written_by_category: BTreeMap<String, u64>,
    /// `bytes_read` by engine category.
    pub bytes_read_by_category: BTreeMap<String, u64>,
    /// The process's storage I/O during the phase (`/proc/self/io`
    /// differences), `null` where unavailable.
    pub process_io: Option<ProcIo>,
    /// `bytes_written / user_bytes_written`.
    pub write_amp: Option<f64>,
    /// `bytes_read / user_bytes_read`.
    pub read_amp: Option<f64>,
    /// `db_bytes / live_bytes`.
    pub space_amp: Option<f64>,
    /// `(process write_bytes - cancelled_write_bytes) / user_bytes_written`.
    pub process_write_amp: Option<f64>,
    /// `process read_bytes / user_bytes_read`.
    pub process_read_amp: Option<f64>,
    /// Allocated size of the database directory after the phase's flush.
    pub db_bytes: u64,
    /// Key + value bytes of the live records after the phase.
    pub live_bytes: u64,
    /// Live records (keys) after the phase.
    pub live_records: u64,
    /// True when the engine read at least 1 MiB from files but the process
    /// read less than half of that from storage: reads were served by the
    /// operating system's page cache.
    pub page_cache: bool,
    /// Remarks (page cache, unsupported options, ...).
    pub notes: Vec<String>,
    /// Workload-specific counts (operation mix, scan entries, writer ops).
    pub counts: BTreeMap<String, u64>,
    /// Engine counters after the phase (cumulative since it was opened).
    pub engine_counters: BTreeMap<String, u64>,
    /// The run's settings.
    pub settings: Settings,
    /// The engine's configuration.
    pub engine_options: serde_json::Value,
    /// The run this phase belongs to: an identifier of one `sepkv bench`
    /// invocation, so that results merged with `--from-json` keep each
    /// run's rounds apart. Reports written before the field existed get
    /// one when they are read ([`read_json`]).
    #[serde(default)]
    pub run: Option<String>,
    /// The round of a `--repeat` run (0 = the first); `null` in reports
    /// written before the field existed.
    #[serde(default)]
    pub round: Option<u32>,
    /// The settling done before the phase (see [`crate::settle`]); `null`
    /// when the phase continued on the database of the one before it, or
    /// settling was off (`--no-settle`).
    #[serde(default)]
    pub settle: Option<crate::settle::SettleRecord>,
}

/// `num / den`, or `None` when `den` is zero.
pub fn ratio(num: u64, den: u64) -> Option<f64> {
    (den > 0).then(|| num as f64 / den as f64)
}

/// What a phase measured, before the arithmetic.
#[derive(Debug, Clone, Default)]
pub struct PhaseMeasurements {
    /// Operations.
    pub ops: u64,
    /// Gets that found nothing.
    pub not_found: u64,
    /// Seconds.
    pub seconds: f64,
    /// Latency percentiles.
    pub latency: LatencySummary,
    /// User bytes written.
    pub user_written: u64,
    /// User bytes read.
    pub user_read: u64,
    /// Engine I/O during the phase.
    pub io: EngineIo,
    /// Process I/O during the phase.
    pub process: Option<ProcIo>,
    /// Database size after the phase.
    pub db_bytes: u64,
    /// Live bytes after the phase.
    pub live_bytes: u64,
    /// Live records after the phase.
    pub live_records: u64,
}

/// The derived figures of a phase: amplifications and the page-cache flag.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Derived {
    /// Engine write amplification.
    pub write_amp: Option<f64>,
    /// Engine read amplification.
    pub read_amp: Option<f64>,
    /// Space amplification.
    pub space_amp: Option<f64>,
    /// Process write amplification.
    pub process_write_amp: Option<f64>,
    /// Process read amplification.
    pub process_read_amp: Option<f64>,
    /// Reads served from the page cache.
    pub page_cache: bool,
}

impl PhaseMeasurements {
    /// Amplifications and the page-cache flag.
    pub fn derive(&self) -> Derived {
        let written = self.io.total_written();
        let read = self.io.total_read();
        let page_cache = match &self.process {
            Some(p) => read >= PAGE_CACHE_MIN_BYTES && p.read_bytes.saturating_mul(2) < read,
            None => false,
        };
        Derived {
            write_amp: ratio(written, self.user_written),
            read_amp: ratio(read, self.user_read),
            space_amp: ratio(self.db_bytes, self.live_bytes),
            process_write_amp: self
                .process
                .and_then(|p| ratio(p.net_written(), self.user_written)),
            process_read_amp: self
                .process
                .and_then(|p| ratio(p.read_bytes, self.user_read)),
            page_cache,
        }
    }
}

/// The engine cell of a phase row: with its round (`engine r2`) when the
/// reports hold repeated rounds.
fn engine_and_round(r: &PhaseReport, repeated: bool) -> String {
    match r.round {
        Some(n) if repeated => format!("{} r{n}", r.engine),
        _ => r.engine.clone(),
    }
}

fn fmt_opt(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.prec$}"))
}

fn mb(b: u64) -> String {
    format!("{:.1}", b as f64 / 1e6)
}

/// The p99.999 of a phase in µs, or `n/m` (not meaningful) for a phase of
/// fewer than [`crate::measure::P99999_MIN_OPS`] operations.
fn fmt_p99999(l: &LatencySummary) -> String {
    match l.p99999 {
        Some(v) => format!("{v:.1}"),
        None => "n/m".into(),
    }
}

/// Writes the summary table: one row per phase, then the legend and any
/// notes.
///
/// # Errors
/// The writer's error.
pub fn print_table(reports: &[PhaseReport], out: &mut dyn Write) -> std::io::Result<()> {
    let header = [
        "engine",
        "workload",
        "phase",
        "ops",
        "secs",
        "kops/s",
        "p50us",
        "p99us",
        "p99.9us",
        "p99.99us",
        "p99.999us",
        "max_us",
        "WA",
        "RA",
        "SA",
        "wr_MB",
        "rd_MB",
        "db_MB",
        "live_MB",
        "pc",
    ];
    let repeated = crate::repeat::is_repeated(reports);
    let rows: Vec<Vec<String>> = reports
        .iter()
        .map(|r| {
            vec![
                engine_and_round(r, repeated),
                r.workload.clone(),
                r.phase.clone(),
                r.ops.to_string(),
                format!("{:.2}", r.seconds),
                format!("{:.1}", r.ops_per_sec / 1000.0),
                format!("{:.1}", r.latency_us.p50),
                format!("{:.1}", r.latency_us.p99),
                format!("{:.1}", r.latency_us.p999),
                format!("{:.1}", r.latency_us.p9999),
                fmt_p99999(&r.latency_us),
                format!("{:.0}", r.latency_us.max),
                fmt_opt(r.write_amp, 2),
                fmt_opt(r.read_amp, 2),
                fmt_opt(r.space_amp, 2),
                mb(r.bytes_written),
                mb(r.bytes_read),
                mb(r.db_bytes),
                mb(r.live_bytes),
                if r.page_cache {
                    "yes".into()
                } else {
                    "-".into()
                },
            ]
        })
        .collect();
    let mut width: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, c) in width.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &[String], out: &mut dyn Write| -> std::io::Result<()> {
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(&width).enumerate() {
            if i > 0 {
                s.push_str("  ");
            }
            if i < 3 {
                s.push_str(&format!("{c:<w$}"));
            } else {
                s.push_str(&format!("{c:>w$}"));
            }
        }
        writeln!(out, "{}", s.trim_end())
    };
    line(
        &header.iter().map(|h| h.to_string()).collect::<Vec<_>>(),
        out,
    )?;
    for row in &rows {
        line(row, out)?;
    }
    writeln!(
        out,
        "\nWA = engine bytes written / user bytes written; RA = engine bytes read / user bytes read;\n\
         SA = database directory size / live user bytes (after the phase's flush); latencies in µs;\n\
         p99.999 only for phases of at least 1,000,000 operations (n/m: not meaningful);\n\
         MB = 10^6 bytes; pc = reads served from the page cache (process read far below engine read)."
    )?;
    let cached = reports.iter().filter(|r| r.page_cache).count();
    if cached > 0 {
        writeln!(
            out,
            "note: in {cached} of {} phases the engine's file reads were served from the page cache \
             (the data fits in memory); read figures there measure memory, not the device",
            reports.len()
        )?;
    }
    if repeated {
        writeln!(
            out,
            "rN after an engine: the round (0 = the first) of a repeated run."
        )?;
    }
    for (engine, mode) in modes(reports) {
        writeln!(out, "mode: {engine}: {mode}")?;
    }
    let mut seen = std::collections::BTreeSet::new();
    for r in reports {
        for n in r.notes.iter().filter(|n| !n.contains(PAGE_CACHE_NOTE)) {
            if seen.insert(n.clone()) {
                writeln!(out, "note: {n}")?;
            }
        }
    }
    Ok(())
}

/// Each engine's run mode ([`Settings::mode`]), in report order; an engine
/// whose phases ran in several modes is listed once per mode.
fn modes(reports: &[PhaseReport]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for r in reports {
        let m = (r.engine.clone(), r.settings.mode());
        if !out.contains(&m) {
            out.push(m);
        }
    }
    out
}

/// Reads reports written by [`write_json`] (several files are
/// concatenated in order): an array of reports, or the object a repeated
/// run writes (`phases` and `summary`; the summary is made again from the
/// phases). Reports without a run identifier (written before it existed)
/// get one per file, `<file name> #<position in the list>`, so rounds of
/// different files never merge.
///
/// # Errors
/// [`BenchError::Io`] when a file cannot be read or is not such JSON.
pub fn read_json(paths: &[std::path::PathBuf]) -> Result<Vec<PhaseReport>> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum File {
        Phases(Vec<PhaseReport>),
        Repeated { phases: Vec<PhaseReport> },
    }
    let mut all = Vec::new();
    for (i, p) in paths.iter().enumerate() {
        let text = std::fs::read_to_string(p).map_err(|e| BenchError::io(p, e))?;
        let file: File = serde_json::from_str(&text).map_err(|e| {
            BenchError::io(
                p,
                std::io::Error::other(format!(
                    "not a sepkv bench JSON file (an array of phase reports, or an object with `phases`): {e}"
                )),
            )
        })?;
        let (File::Phases(v) | File::Repeated { phases: v }) = file;
        let name = p.file_name().map_or_else(
            || p.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        all.extend(v.into_iter().map(|mut r| {
            if r.run.is_none() {
                r.run = Some(format!("{name} #{}", i + 1));
            }
            r
        }));
    }
    Ok(all)
}

/// The engines of `reports` and their `(workload, phase)` rows, both in
/// order of first appearance.
pub fn engines_and_phases(reports: &[PhaseReport]) -> (Vec<String>, Vec<(String, String)>) {
    let mut engines: Vec<String> = Vec::new();
    let mut phases: Vec<(String, String)> = Vec::new();
    for r in reports {
        if !engines.contains(&r.engine) {
            engines.push(r.engine.clone());
        }
        let k = (r.workload.clone(), r.phase.clone());
        if !phases.contains(&k) {
            phases.push(k);
        }
    }
    (engines, phases)
}

/// The reports as markdown: side-by-side tables (one row per workload and
/// phase, one column per engine) of throughput, p99 latency, write, read
/// and space amplification, then every phase in full, the run's settings
/// and the notes.
pub fn markdown(reports: &[PhaseReport]) -> String {
    use std::fmt::Write as _;
    let repeated = crate::repeat::is_repeated(reports);
    // Repeated rounds: the tables side by side show each group's medians.
    let shown = if repeated {
        crate::repeat::medians(reports)
    } else {
        reports.to_vec()
    };
    let (engines, phases) = engines_and_phases(&shown);
    let find = |e: &str, w: &str, p: &str| {
        shown
            .iter()
            .find(|r| r.engine == e && r.workload == w && r.phase == p)
    };
    let mut s = String::new();
    let _ = writeln!(s, "# Benchmark results\n");
    if let Some(r) = reports.first() {
        let st = &r.settings;
        let _ = writeln!(
            s,
            "{} records; values {} B, keys {} B (YCSB: {} × {} B fields); {} thread(s); sync {}; seed {}.\n",
            st.num, st.value_size, st.key_size, st.field_count, st.field_length, st.threads, st.sync, st.seed
        );
    }
    let modes = modes(reports);
    if !modes.is_empty() {
        let _ = writeln!(
            s,
            "Modes (where reads could be served from):
"
        );
        for (engine, mode) in &modes {
            let _ = writeln!(s, "- {engine}: {mode}");
        }
        let _ = writeln!(s);
    }
    if repeated {
        s.push_str(&crate::repeat::markdown_summary(reports));
    }
    s.push_str(&best_vs_peers(&shown, &phases));
    type Cell = fn(&PhaseReport) -> String;
    let sections: [(&str, Cell); 5] = [
        ("Throughput (kops/s)", |r| {
            format!("{:.1}", r.ops_per_sec / 1000.0)
        }),
        ("p99 latency (µs)", |r| format!("{:.1}", r.latency_us.p99)),
        ("Write amplification", |r| fmt_opt(r.write_amp, 2)),
        ("Read amplification", |r| fmt_opt(r.read_amp, 2)),
        ("Space amplification", |r| fmt_opt(r.space_amp, 2)),
    ];
    for (title, cell) in sections {
        let of = if repeated {
            ", medians of the rounds"
        } else {
            ""
        };
        let _ = writeln!(s, "## {title}{of}\n");
        let _ = writeln!(s, "| workload | phase | {} |", engines.join(" | "));
        let _ = writeln!(s, "| --- | --- |{}", " ---: |".repeat(engines.len()));
        for (w, p) in &phases {
            let cells: Vec<String> = engines
                .iter()
                .map(|e| find(e, w, p).map_or_else(|| "".into(), cell))
                .collect();
            let _ = writeln!(s, "| {w} | {p} | {} |", cells.join(" | "));
        }
        let _ = writeln!(s);
    }
    let _ = writeln!(s, "## All phases\n");
    let _ = writeln!(
        s,
        "| engine | workload | phase | ops | secs | kops/s | p50 µs | p99 µs | p99.9 µs | p99.99 µs | p99.999 µs | WA | RA | SA | written MB | read MB | db MB | live MB | page cache |"
    );
    let _ = writeln!(s, "| --- | --- | --- |{}", " ---: |".repeat(16));
    for r in reports {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.2} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            engine_and_round(r, repeated),
            r.workload,
            r.phase,
            r.ops,
            r.seconds,
            r.ops_per_sec / 1000.0,
            r.latency_us.p50,
            r.latency_us.p99,
            r.latency_us.p999,
            r.latency_us.p9999,
            fmt_p99999(&r.latency_us),
            fmt_opt(r.write_amp, 2),
            fmt_opt(r.read_amp, 2),
            fmt_opt(r.space_amp, 2),
            mb(r.bytes_written),
            mb(r.bytes_read),
            mb(r.db_bytes),
            mb(r.live_bytes),
            if r.page_cache { "yes" } else { "-" }
        );
    }
    let _ = writeln!(
        s,
        "\nWA = engine bytes written / user bytes written; RA = engine bytes read / user bytes read; \
         SA = database directory size / live user bytes (after the phase's flush). \
         For engines without their own I/O accounting (the peers) the engine bytes are the process's \
         storage I/O (`/proc/self/io`), which does not count reads served by the page cache. \
         p99.999 only for phases of at least 1,000,000 operations (n/m: not meaningful). MB = 10^6 bytes.\n"
    );
    let mut seen = std::collections::BTreeSet::new();
    let mut notes = String::new();
    for r in reports {
        for n in r.notes.iter().filter(|n| !n.contains(PAGE_CACHE_NOTE)) {
            if seen.insert(n.clone()) {
                let _ = writeln!(notes, "- {n}");
            }
        }
    }
    if !notes.is_empty() {
        let _ = writeln!(s, "## Notes\n\n{notes}");
    }
    let mut seen = std::collections::BTreeSet::new();
    let _ = writeln!(s, "## Engine settings\n");
    for r in reports {
        if seen.insert(r.engine.clone()) {
            let _ = writeln!(s, "- `{}`: `{}`", r.engine, r.engine_options);
        }
    }
    s
}

/// The markdown section comparing, per workload and phase, the best sepkv
/// preset with the best peer (`+direct` runs excluded: like with like):
/// throughput ratio (higher is better for sepkv), and write and space
/// amplification ratios (lower is better). Write amplification is the
/// process's (`/proc/self/io`) for every engine, the one measure all of
/// them share. Empty when the reports lack either side.
fn best_vs_peers(reports: &[PhaseReport], phases: &[(String, String)]) -> String {
    use std::fmt::Write as _;
    let is_sepkv = |r: &PhaseReport| r.engine.starts_with("sepkv:");
    let comparable = |r: &&PhaseReport| !r.engine.ends_with("+direct");
    type Metric = fn(&PhaseReport) -> Option<f64>;
    // The best engine of one side by a metric: (value, engine).
    let best = |w: &str, p: &str, sepkv: bool, m: Metric, higher: bool| {
        reports
            .iter()
            .filter(comparable)
            .filter(|r| r.workload == w && r.phase == p && is_sepkv(r) == sepkv)
            .filter_map(|r| m(r).map(|v| (v, r.engine.as_str())))
            .max_by(|a, b| {
                let o = a.0.total_cmp(&b.0);
                if higher {
                    o
                } else {
                    o.reverse()
                }
            })
    };
    let metrics: [(Metric, bool); 3] = [
        (|r| Some(r.ops_per_sec / 1000.0), true),
        (|r| r.process_write_amp, false),
        (|r| r.space_amp, false),
    ];
    let mut rows = String::new();
    for (w, p) in phases {
        let mut cells = Vec::new();
        for (m, higher) in metrics {
            let cell = match (best(w, p, true, m, higher), best(w, p, false, m, higher)) {
                (Some((a, ea)), Some((b, eb))) if b > 0.0 => {
                    format!("**{:.2}×** ({ea} {a:.2} / {eb} {b:.2})", a / b)
                }
                _ => "".into(),
            };
            cells.push(cell);
        }
        if cells.iter().any(|c| !c.is_empty()) {
            let _ = writeln!(rows, "| {w} | {p} | {} |", cells.join(" | "));
        }
    }
    if rows.is_empty() {
        return String::new();
    }
    format!(
        "## Best sepkv preset vs best peer\n\n\
         Per row, the best sepkv preset against the best peer engine, each chosen by that \
         column's figure. Throughput: sepkv ÷ peer in kops/s (above 1: sepkv faster). Write \
         amplification (process I/O for every engine) and space amplification: sepkv ÷ peer \
         (below 1: sepkv writes or keeps less).\n\n\
         | workload | phase | throughput | write amplification | space amplification |\n\
         | --- | --- | ---: | ---: | ---: |\n{rows}\n"
    )
}

/// Writes [`markdown`] of `reports` to `path`.
///
/// # Errors
/// [`BenchError::Io`] when the file cannot be written.
pub fn write_markdown(reports: &[PhaseReport], path: &Path) -> Result<()> {
    std::fs::write(path, markdown(reports)).map_err(|e| BenchError::io(path, e))
}

/// Writes `reports` as a JSON array to `path`; reports of repeated rounds
/// ([`crate::repeat::is_repeated`]) as an object of the array (`phases`)
/// and its summary (`summary`, [`crate::repeat::summarize`]).
///
/// # Errors
/// [`BenchError::Io`] when the file cannot be written.
pub fn write_json(reports: &[PhaseReport], path: &Path) -> Result<()> {
    let text = if crate::repeat::is_repeated(reports) {
        serde_json::to_string_pretty(&serde_json::json!({
            "phases": reports,
            "summary": crate::repeat::summarize(reports),
        }))
    } else {
        serde_json::to_string_pretty(reports)
    }
    .map_err(|e| BenchError::io(path, std::io::Error::other(e)))?;
    std::fs::write(path, text + "\n").map_err(|e| BenchError::io(path, e))
}

/// Writes, per workload and phase, each sepkv preset's throughput as a
/// ratio to the best peer's (the fastest engine whose name does not start
/// with `sepkv:`), and its write amplification beside the peer's: the
/// summary the default suite ends with. Writes nothing when the reports
/// hold no peer or no sepkv preset.
///
/// # Errors
/// The writer's error.
pub fn print_ratios(reports: &[PhaseReport], out: &mut dyn Write) -> std::io::Result<()> {
    let is_sepkv = |r: &PhaseReport| r.engine.starts_with("sepkv:");
    let (_, phases) = engines_and_phases(reports);
    let mut header_done = false;
    for (w, p) in &phases {
        let of_phase = || reports.iter().filter(|r| &r.workload == w && &r.phase == p);
        let Some(peer) = of_phase()
            .filter(|r| !is_sepkv(r))
            .max_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec))
        else {
            continue;
        };
        if peer.ops_per_sec <= 0.0 {
            continue;
        }
        for r in of_phase().filter(|r| is_sepkv(r)) {
            if !header_done {
                writeln!(
                    out,
                    "\nEach sepkv preset against the best peer of each workload (throughput \
                     ratio above 1: the preset is faster; WA: bytes written to files per user byte)"
                )?;
                writeln!(
                    out,
                    "{:<12} {:<16} {:>8} {:>10} {:>6}   {:<10} {:>8} {:>6}",
                    "workload",
                    "preset",
                    "kops/s",
                    "× best peer",
                    "WA",
                    "best peer",
                    "kops/s",
                    "WA"
                )?;
                header_done = true;
            }
            let workload = if p == "run" {
                w.clone()
            } else {
                format!("{w}/{p}")
            };
            writeln!(
                out,
                "{:<12} {:<16} {:>8.1} {:>10.2}× {:>6}   {:<10} {:>8.1} {:>6}",
                workload,
                r.engine.trim_start_matches("sepkv:"),
                r.ops_per_sec / 1000.0,
                r.ops_per_sec / peer.ops_per_sec,
                fmt_opt(r.write_amp, 2),
                peer.engine,
                peer.ops_per_sec / 1000.0,
                fmt_opt(peer.write_amp, 2),
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amplification_arithmetic() {
        let mut io = EngineIo::default();
        io.written.insert("wal".into(), 3000);
        io.written.insert("flush".into(), 1000);
        io.read.insert("user_read".into(), 8 << 20);
        let m = PhaseMeasurements {
            user_written: 2000,
            user_read: 1 << 20,
            io,
            process: Some(ProcIo {
                read_bytes: 4096,
                write_bytes: 5000,
                cancelled_write_bytes: 1000,
            }),
            db_bytes: 3000,
            live_bytes: 1500,
            ..Default::default()
        };
        let d = m.derive();
        assert_eq!(d.write_amp, Some(2.0));
        assert_eq!(d.read_amp, Some(8.0));
        assert_eq!(d.space_amp, Some(2.0));
        assert_eq!(d.process_write_amp, Some(2.0));
        assert_eq!(d.process_read_amp, Some(4096.0 / (1 << 20) as f64));
        assert!(d.page_cache);
        let none = PhaseMeasurements::default().derive();
        assert_eq!(
            (none.write_amp, none.read_amp, none.space_amp),
            (None, None, None)
        );
        assert!(!none.page_cache);
    }
}
