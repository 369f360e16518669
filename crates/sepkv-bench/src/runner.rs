//! Running workloads: one database per engine, workloads in order, each
//! phase measured (operations, latencies, engine and process I/O, space)
//! and reported.
//!
//! Workloads that need data (`readrandom`, `ycsb-a`, ...) use what the
//! previous workloads left; when the database holds no suitable data they
//! first load it in a phase reported as `auto-load`. `fillseq`,
//! `fillrandom`, `ycsb-load`, `trace` and `update` start from an empty
//! database (the previous one is closed and its files deleted).
//!
//! With a [`Settler`], the machine is settled (see [`crate::settle`])
//! before the engine opens its first database and before each phase that
//! starts from an empty one; the phase after a settling records it
//! ([`PhaseReport::settle`]).

use crate::config::{BenchConfig, Workload, WorkloadRun, CHURN_ROUNDS_PER_PHASE};
use crate::engine::{
    chunk_kind, Chunk, ChunkOutcome, Engine, EngineFactory, EngineIo, EngineOptions, ScanResult,
};
use crate::error::{BenchError, Result};
use crate::gen::{bench_key, rng, Permutation, ValueSource};
use crate::live::{DenseLive, KeyedLive};
use crate::measure::{Latencies, ProcIo};
use crate::report::{PhaseMeasurements, PhaseReport, Settings, PAGE_CACHE_NOTE};
use crate::settle::{SettleRecord, Settler};
use crate::trace::{OpKind, TraceChunk, TraceReader};
use crate::ycsb::{self, InsertSequence, ScrambledZipfian, WorkloadSpec, YcsbGenerator, YcsbOp};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rand::Rng;
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

/// Trace operations parsed ahead of their replay (bounded memory).
const TRACE_CHUNK_OPS: usize = 4096;
/// Entries per scan of `readseq`.
const READSEQ_CHUNK: u64 = 1000;

/// What a phase's operations produced.
#[derive(Debug, Default)]
struct Outcome {
    ops: u64,
    not_found: u64,
    seconds: f64,
    lat: Latencies,
    user_written: u64,
    user_read: u64,
    counts: BTreeMap<String, u64>,
    notes: Vec<String>,
}

impl Outcome {
    fn merge(&mut self, o: Outcome) {
        self.ops += o.ops;
        self.not_found += o.not_found;
        self.lat.merge(&o.lat);
        self.user_written += o.user_written;
        self.user_read += o.user_read;
        for (k, v) in o.counts {
            *self.counts.entry(k).or_insert(0) += v;
        }
        self.notes.extend(o.notes);
    }

    fn count(&mut self, name: &str, n: u64) {
        if n > 0 {
            *self.counts.entry(name.to_string()).or_insert(0) += n;
        }
    }
}

/// One operation of a phase's loop, as [`Exec::op`] takes it.
#[derive(Debug, Clone, Copy)]
enum Op<'a> {
    Put(&'a [u8], &'a [u8]),
    Delete(&'a [u8]),
    Get(&'a [u8]),
    Scan(&'a [u8], usize),
}

/// Runs one thread's operations against an engine and accounts for their
/// latencies and reads in an [`Outcome`]. An engine with a
/// [`Engine::chunk_len`] of 1 gets each operation at once, timed here; an
/// engine that takes chunks gets them [`Engine::chunk_len`] at a time
/// and times each operation itself.
struct Exec<'e> {
    eng: &'e dyn Engine,
    chunked: bool,
    chunk_len: usize,
    chunk: Chunk,
    /// Per queued operation: its latency joins the next one's (the read of
    /// a read-modify-write).
    joins: Vec<bool>,
    outcomes: Vec<ChunkOutcome>,
    buf: Vec<u8>,
    res: ScanResult,
    /// Nanoseconds of joined operations waiting for the one they join.
    pending_ns: u64,
    /// Operations run so far (queued ones not counted).
    done: u64,
    scan_entries: u64,
    empty_scans: u64,
    o: Outcome,
}

impl<'e> Exec<'e> {
    fn new(eng: &'e dyn Engine) -> Self {
        let chunk_len = eng.chunk_len().max(1);
        Exec {
            eng,
            chunked: chunk_len > 1,
            chunk_len,
            chunk: Chunk::default(),
            joins: Vec::new(),
            outcomes: Vec::new(),
            buf: Vec::new(),
            res: ScanResult::default(),
            pending_ns: 0,
            done: 0,
            scan_entries: 0,
            empty_scans: 0,
            o: Outcome::default(),
        }
    }

    /// Runs `op`, or queues it in the chunk (running the chunk once it is
    /// full). `join`: its latency is added to the next operation's, which
    /// counts as one operation with it.
    fn op(&mut self, op: Op<'_>, join: bool) -> Result<()> {
        if self.chunked {
            match op {
                Op::Put(k, v) => self.chunk.push(chunk_kind::PUT, k, v, 0),
                Op::Delete(k) => self.chunk.push(chunk_kind::DELETE, k, &[], 0),
                Op::Get(k) => self.chunk.push(chunk_kind::GET, k, &[], 0),
                Op::Scan(k, n) => {
                    let n = u32::try_from(n).map_err(|_| {
                        BenchError::InvalidArgument(format!("scan length {n} is too long"))
                    })?;
                    self.chunk.push(chunk_kind::SCAN, k, &[], n)
                }
            }
            self.joins.push(join);
            if self.chunk.len() >= self.chunk_len {
                self.run_chunk()?;
            }
            return Ok(());
        }
        let t0 = Instant::now();
        let mut out = ChunkOutcome::default();
        match op {
            Op::Put(k, v) => self.eng.put(k, v)?,
            Op::Delete(k) => self.eng.delete(k)?,
            Op::Get(k) => {
                if self.eng.get(k, &mut self.buf)? {
                    out.found = 1;
                    out.bytes = self.buf.len() as u64;
                }
            }
            Op::Scan(k, n) => {
                self.eng.scan(k, n, &mut self.res)?;
                out.bytes = self.res.key_bytes + self.res.value_bytes;
                out.entries = self.res.entries;
            }
        }
        out.nanos = t0.elapsed().as_nanos().min(u64::MAX as u128) as u64;
        let kind = match op {
            Op::Put(..) => chunk_kind::PUT,
            Op::Delete(_) => chunk_kind::DELETE,
            Op::Get(_) => chunk_kind::GET,
            Op::Scan(..) => chunk_kind::SCAN,
        };
        self.account(kind, &out, join);
        Ok(())
    }

    fn account(&mut self, kind: u32, out: &ChunkOutcome, join: bool) {
        self.done += 1;
        match kind {
            chunk_kind::GET if out.found != 0 => self.o.user_read += out.bytes,
            chunk_kind::GET => self.o.not_found += 1,
            chunk_kind::SCAN => {
                self.o.user_read += out.bytes;
                self.scan_entries += out.entries;
                self.empty_scans += u64::from(out.entries == 0);
            }
            _ => {}
        }
        if join {
            self.pending_ns += out.nanos;
        } else {
            self.o.lat.record_ns(self.pending_ns + out.nanos);
            self.pending_ns = 0;
        }
    }

    /// Runs the queued operations.
    fn run_chunk(&mut self) -> Result<()> {
        if self.chunk.is_empty() {
            return Ok(());
        }
        self.eng.run_chunk(&self.chunk, &mut self.outcomes)?;
        if self.outcomes.len() != self.chunk.len() {
            return Err(BenchError::InvalidArgument(format!(
                "internal: engine {} returned {} outcomes for {} operations",
                self.eng.label(),
                self.outcomes.len(),
                self.chunk.len()
            )));
        }
        let outcomes = std::mem::take(&mut self.outcomes);
        for (i, out) in outcomes.iter().enumerate() {
            let (kind, join) = (self.chunk.ops()[i].kind, self.joins[i]);
            self.account(kind, out, join);
        }
        self.outcomes = outcomes;
        self.chunk.clear();
        self.joins.clear();
        Ok(())
    }

    /// Operations run so far; queued ones are not counted.
    fn done(&self) -> u64 {
        self.done
    }

    /// Runs what is queued and returns the outcome (scan counts included).
    fn finish(mut self) -> Result<Outcome> {
        self.run_chunk()?;
        let (entries, empty) = (self.scan_entries, self.empty_scans);
        let mut o = self.o;
        o.count("scan_entries", entries);
        o.count("empty_scans", empty);
        Ok(o)
    }
}

/// Seconds between progress lines when stderr is not a terminal.
const PROGRESS_LINE_SECS: u64 = 5;

/// Progress of one phase on stderr: a bar on a terminal; elsewhere (a pipe,
/// a log file, CI) a line every [`PROGRESS_LINE_SECS`] seconds, so that a
/// long phase is never silent. Off with `--no-progress`.
enum Progress {
    Off,
    Bar(ProgressBar),
    Lines(ProgressLines),
}

/// The line printer of a [`Progress`] off a terminal: a thread that wakes
/// every few seconds and prints how far the phase has come.
struct ProgressLines {
    shared: Arc<LineState>,
    printer: Option<std::thread::JoinHandle<()>>,
}

struct LineState {
    label: String,
    /// Waiting for background work, not counting operations.
    waiting: bool,
    /// Operations in the phase; 0 when unknown.
    len: u64,
    done: AtomicU64,
    stop: Mutex<bool>,
    cv: Condvar,
}

/// One progress line: `  [12 s] label: 1234 of 5000 ops (24 %), 102.8 kops/s`.
fn progress_line(label: &str, done: u64, len: u64, secs: f64) -> String {
    let rate = if secs > 0.0 {
        done as f64 / secs / 1000.0
    } else {
        0.0
    };
    let of = if len > 0 {
        format!(" of {len} ops ({:.0} %)", done as f64 * 100.0 / len as f64)
    } else {
        " ops".to_string()
    };
    format!("  [{secs:.0} s] {label}: {done}{of}, {rate:.1} kops/s")
}

impl Progress {
    fn new(enabled: bool, len: u64, label: &str) -> Self {
        if !enabled {
            return Progress::Off;
        }
        if !std::io::stderr().is_terminal() {
            return Self::lines(
                len,
                label,
                std::time::Duration::from_secs(PROGRESS_LINE_SECS),
            );
        }
        if len == 0 {
            return Progress::Off;
        }
        let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr_with_hz(4));
        if let Ok(style) =
            ProgressStyle::with_template("{msg} [{wide_bar}] {human_pos}/{human_len} eta {eta}")
        {
            pb.set_style(style.progress_chars("=> "));
        }
        pb.set_message(label.to_string());
        Progress::Bar(pb)
    }

    /// Lines (off a terminal only) while the phase's flush and
    /// compactions are waited for.
    fn waiting(enabled: bool, label: &str) -> Self {
        if !enabled || std::io::stderr().is_terminal() {
            return Progress::Off;
        }
        Self::lines_with(
            0,
            label,
            true,
            std::time::Duration::from_secs(PROGRESS_LINE_SECS),
        )
    }

    fn lines(len: u64, label: &str, every: std::time::Duration) -> Self {
        Self::lines_with(len, label, false, every)
    }

    fn lines_with(len: u64, label: &str, waiting: bool, every: std::time::Duration) -> Self {
        let shared = Arc::new(LineState {
            waiting,
            label: label.to_string(),
            len,
            done: AtomicU64::new(0),
            stop: Mutex::new(false),
            cv: Condvar::new(),
        });
        let st = shared.clone();
        let started = Instant::now();
        let printer = std::thread::Builder::new()
            .name("bench-progress".into())
            .spawn(move || {
                let mut stopped = st.stop.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    let (g, _) = st
                        .cv
                        .wait_timeout_while(stopped, every, |s| !*s)
                        .unwrap_or_else(|e| e.into_inner());
                    stopped = g;
                    if *stopped {
                        return;
                    }
                    let secs = started.elapsed().as_secs_f64();
                    if st.waiting {
                        eprintln!(
                            "  [{secs:.0} s] {}: waiting for flushes and compactions",
                            st.label
                        );
                    } else {
                        eprintln!(
                            "{}",
                            progress_line(&st.label, st.done.load(Ordering::Relaxed), st.len, secs)
                        );
                    }
                }
            })
            .ok();
        Progress::Lines(ProgressLines { shared, printer })
    }

    fn inc(&self, n: u64) {
        match self {
            Progress::Off => {}
            Progress::Bar(pb) => pb.inc(n),
            Progress::Lines(l) => {
                l.shared.done.fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    fn ticker(&self) -> Ticker<'_> {
        Ticker {
            pb: self,
            pending: 0,
        }
    }

    fn finish(&self) {
        match self {
            Progress::Off => {}
            Progress::Bar(pb) => pb.finish_and_clear(),
            Progress::Lines(l) => l.stop(),
        }
    }
}

impl ProgressLines {
    fn stop(&self) {
        *self.shared.stop.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.shared.cv.notify_all();
    }
}

impl Drop for ProgressLines {
    fn drop(&mut self) {
        self.stop();
        if let Some(h) = self.printer.take() {
            let _ = h.join();
        }
    }
}

/// Batches progress increments of one thread.
struct Ticker<'a> {
    pb: &'a Progress,
    pending: u64,
}

impl Ticker<'_> {
    #[inline]
    fn tick(&mut self, n: u64) {
        self.pending += n;
        if self.pending >= 1024 {
            self.flush();
        }
    }

    fn flush(&mut self) {
        self.pb.inc(self.pending);
        self.pending = 0;
    }
}

impl Drop for Ticker<'_> {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Thread `t` of `threads`' share of `0..total`.
fn share(total: u64, threads: usize, t: usize) -> Range<u64> {
    let th = threads as u64;
    let t = t as u64;
    (total * t / th)..(total * (t + 1) / th)
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Runs `f(thread, share)` on `threads` threads over `0..total`; the
/// outcome's seconds are the wall-clock time of the whole.
fn parallel<F>(threads: usize, total: u64, f: F) -> Result<Outcome>
where
    F: Fn(usize, Range<u64>) -> Result<Outcome> + Sync,
{
    let start = Instant::now();
    let results: Vec<std::thread::Result<Result<Outcome>>> = std::thread::scope(|s| {
        let f = &f;
        let handles: Vec<_> = (0..threads)
            .map(|t| s.spawn(move || f(t, share(total, threads, t))))
            .collect();
        handles.into_iter().map(|h| h.join()).collect()
    });
    let seconds = start.elapsed().as_secs_f64();
    let mut out = Outcome::default();
    for r in results {
        match r {
            Ok(Ok(o)) => out.merge(o),
            Ok(Err(e)) => return Err(e),
            Err(p) => return Err(BenchError::Panic(panic_message(p))),
        }
    }
    out.seconds = seconds;
    Ok(out)
}

/// What the database holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dataset {
    Empty,
    /// db_bench-style records `0..num` (some possibly deleted).
    Bench,
    /// YCSB records `0..records`.
    Ycsb {
        records: u64,
    },
    /// Whatever the trace left.
    Trace,
    /// What a churn left: no live record.
    Other,
}

/// Runs every workload of `cfg` on engines from `factory` in the empty
/// directory `dir`, pushing one report per phase onto `reports` and
/// calling `on_phase` with each. Reports of phases done before an error
/// stay in `reports`.
///
/// # Errors
/// [`crate::BenchError::InvalidArgument`] for
/// settings [`BenchConfig::validate`] refuses; the first engine, file or
/// trace error.
pub fn run_engine(
    factory: &dyn EngineFactory,
    dir: &Path,
    cfg: &BenchConfig,
    reports: &mut Vec<PhaseReport>,
    on_phase: &mut dyn FnMut(&PhaseReport),
) -> Result<()> {
    cfg.validate()?;
    run_checked(factory, dir, cfg, None, reports, on_phase)
}

/// [`run_engine`] for settings already checked (a [`crate::plan::Plan`]'s),
/// settling with `settler` when one is given.
pub(crate) fn run_checked(
    factory: &dyn EngineFactory,
    dir: &Path,
    cfg: &BenchConfig,
    settler: Option<&mut Settler>,
    reports: &mut Vec<PhaseReport>,
    on_phase: &mut dyn FnMut(&PhaseReport),
) -> Result<()> {
    let mut run = EngineRun {
        factory,
        dir: dir.to_path_buf(),
        cfg,
        engine: None,
        dataset: Dataset::Empty,
        dense: DenseLive::default(),
        keyed: KeyedLive::new(),
        values: ValueSource::new(cfg.seed),
        stream: 0,
        reports,
        on_phase,
        bounded: false,
        settler,
        settled: None,
    };
    let res = run.start().and_then(|_| {
        for w in &cfg.workloads {
            run.workload(w)?;
        }
        Ok(())
    });
    let closed = match run.engine.take() {
        Some(e) => e.close(),
        None => Ok(()),
    };
    res.and(closed)
}

struct EngineRun<'a> {
    factory: &'a dyn EngineFactory,
    dir: PathBuf,
    cfg: &'a BenchConfig,
    engine: Option<Box<dyn Engine>>,
    dataset: Dataset,
    dense: DenseLive,
    keyed: KeyedLive,
    values: ValueSource,
    stream: u64,
    reports: &'a mut Vec<PhaseReport>,
    on_phase: &'a mut dyn FnMut(&PhaseReport),
    /// The database being opened is the `update` workload's (bounded value
    /// store, see [`BenchConfig::update_capacity`]).
    bounded: bool,
    /// Settles the machine before each empty database, when given.
    settler: Option<&'a mut Settler>,
    /// The last settling, for the report of the next phase.
    settled: Option<SettleRecord>,
}

/// What the threads of a phase share besides the engine (see
/// [`EngineRun::op_phase`]).
struct PhaseData<'r> {
    cfg: &'r BenchConfig,
    dense: &'r DenseLive,
    values: &'r ValueSource,
}

impl PhaseData<'_> {
    /// A buffer for one key.
    fn key_buf(&self) -> Vec<u8> {
        Vec::with_capacity(self.cfg.key_size)
    }

    /// Puts record `n` with the next value of `vs`, recording it as live
    /// and its bytes as written.
    fn put(
        &self,
        ex: &mut Exec<'_>,
        vs: &mut ValueSource,
        key: &mut Vec<u8>,
        n: u64,
    ) -> Result<()> {
        bench_key(n, self.cfg.key_size, key);
        let v = vs.next(self.cfg.value_len(n));
        ex.op(Op::Put(key, v), false)?;
        self.dense.put(n, key.len(), v.len());
        ex.o.user_written += (key.len() + v.len()) as u64;
        Ok(())
    }
}

fn clear_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| BenchError::io(dir, e))?;
    for entry in std::fs::read_dir(dir).map_err(|e| BenchError::io(dir, e))? {
        let p = entry.map_err(|e| BenchError::io(dir, e))?.path();
        let r = if p.is_dir() && !p.is_symlink() {
            std::fs::remove_dir_all(&p)
        } else {
            std::fs::remove_file(&p)
        };
        r.map_err(|e| BenchError::io(&p, e))?;
    }
    Ok(())
}

/// The process's storage I/O as the engine's, for engines without their
/// own accounting: written = `write_bytes - cancelled_write_bytes`, read =
/// `read_bytes`, both under the category `process` (empty when
/// `/proc/self/io` is unavailable).
fn process_as_engine_io(process: Option<ProcIo>) -> EngineIo {
    let mut io = EngineIo::default();
    if let Some(p) = process {
        io.written.insert("process".into(), p.net_written());
        io.read.insert("process".into(), p.read_bytes);
    }
    io
}

fn no_engine() -> BenchError {
    BenchError::InvalidArgument("internal: no engine is open".into())
}

impl EngineRun<'_> {
    fn engine_options(&self) -> EngineOptions {
        EngineOptions {
            sync: self.cfg.sync,
            direct_io: self.cfg.direct_io,
            value_capacity: if self.bounded {
                self.cfg.update_capacity()
            } else {
                None
            },
            band_capacity: if self.bounded {
                self.cfg.update_band_capacity()
            } else {
                None
            },
            checkpoint_after: self.cfg.checkpoint_after,
        }
    }

    fn start(&mut self) -> Result<()> {
        clear_dir(&self.dir)?;
        if let Some(s) = self.settler.as_deref_mut() {
            let what = self.factory.label();
            self.settled = Some(s.settle(&self.dir, &what));
        }
        self.engine = Some(self.factory.open(&self.dir, &self.engine_options())?);
        Ok(())
    }

    /// Closes the engine, deletes its files and opens an empty one.
    fn fresh(&mut self) -> Result<()> {
        if let Some(e) = self.engine.take() {
            e.close()?;
        }
        self.dense = DenseLive::default();
        self.keyed = KeyedLive::new();
        self.dataset = Dataset::Empty;
        self.start()
    }

    fn next_stream(&mut self) -> u64 {
        self.stream += 1;
        self.stream << 16
    }

    fn live(&self) -> (u64, u64) {
        match self.dataset {
            Dataset::Trace => (self.keyed.bytes(), self.keyed.records()),
            _ => (self.dense.bytes(), self.dense.records()),
        }
    }

    /// Measures one phase: engine and process counters around `body`, then
    /// a flush, the database size and the live bytes.
    fn measure(
        &mut self,
        workload: &str,
        phase: &str,
        body: impl FnOnce(&mut Self) -> Result<Outcome>,
    ) -> Result<()> {
        let eng = self.engine.as_deref().ok_or_else(no_engine)?;
        let before = eng.stats()?;
        let proc_before = ProcIo::read();
        let out = body(self)?;
        let eng = self.engine.as_deref().ok_or_else(no_engine)?;
        {
            // Flushing and waiting for compaction can take long: say so
            // off a terminal too.
            let _wait = Progress::waiting(
                self.cfg.progress,
                &format!("{} {workload}/{phase}", eng.label()),
            );
            eng.flush()?;
        }
        let after = eng.stats()?;
        let proc_after = ProcIo::read();
        let db_bytes = eng.disk_usage()?;
        let (live_bytes, live_records) = self.live();
        let process = proc_before.zip(proc_after).map(|(b, a)| a.since(&b));
        let io = if eng.io_accounting() {
            after.io.since(&before.io)
        } else {
            process_as_engine_io(process)
        };
        let m = PhaseMeasurements {
            ops: out.ops,
            not_found: out.not_found,
            seconds: out.seconds,
            latency: out.lat.summary(),
            user_written: out.user_written,
            user_read: out.user_read,
            io,
            process,
            db_bytes,
            live_bytes,
            live_records,
        };
        let d = m.derive();
        let mut notes = eng.notes();
        notes.extend(out.notes);
        if m.process.is_none() {
            notes.push("process I/O counters (/proc/self/io) are unavailable".into());
        }
        if d.page_cache {
            notes.push(format!(
                "{workload}/{phase}: {PAGE_CACHE_NOTE} (engine read {:.1} MB from files, the process {:.1} MB from storage)",
                m.io.total_read() as f64 / 1e6,
                m.process.map_or(0, |p| p.read_bytes) as f64 / 1e6
            ));
        }
        let report = PhaseReport {
            engine: eng.label().to_string(),
            workload: workload.to_string(),
            phase: phase.to_string(),
            ops: m.ops,
            not_found: m.not_found,
            seconds: m.seconds,
            ops_per_sec: if m.seconds > 0.0 {
                m.ops as f64 / m.seconds
            } else {
                0.0
            },
            latency_us: m.latency,
            user_bytes_written: m.user_written,
            user_bytes_read: m.user_read,
            bytes_written: m.io.total_written(),
            bytes_read: m.io.total_read(),
            bytes_written_by_category: m.io.written.clone(),
            bytes_read_by_category: m.io.read.clone(),
            process_io: m.process,
            write_amp: d.write_amp,
            read_amp: d.read_amp,
            space_amp: d.space_amp,
            process_write_amp: d.process_write_amp,
            process_read_amp: d.process_read_amp,
            db_bytes: m.db_bytes,
            live_bytes: m.live_bytes,
            live_records: m.live_records,
            page_cache: d.page_cache,
            notes,
            counts: out.counts,
            engine_counters: after.counters,
            settings: Settings::of(self.cfg, eng.direct_io()),
            engine_options: eng.settings(),
            run: None,
            round: None,
            settle: self.settled.take(),
        };
        (self.on_phase)(&report);
        self.reports.push(report);
        Ok(())
    }

    fn workload(&mut self, w: &WorkloadRun) -> Result<()> {
        let ops = self.cfg.ops_for(w);
        let name = w.workload.to_string();
        match w.workload {
            Workload::FillSeq => self.fill(&name, "run", false),
            Workload::FillRandom => self.fill(&name, "run", true),
            Workload::Overwrite => {
                self.ensure_bench()?;
                self.overwrite(&name, "run", ops, false)
            }
            Workload::ReadRandom => {
                self.ensure_bench()?;
                self.read_random(&name, ops)
            }
            Workload::ReadSeq => {
                self.ensure_bench()?;
                self.read_seq(&name, ops)
            }
            Workload::SeekRandom => {
                self.ensure_bench()?;
                self.seek_random(&name, ops)
            }
            Workload::ReadWhileWriting => {
                self.ensure_bench()?;
                self.read_while_writing(&name, ops)
            }
            Workload::DeleteRandom => {
                self.ensure_bench()?;
                self.delete_random(&name, ops)
            }
            Workload::YcsbLoad => {
                if self.dataset != Dataset::Empty {
                    self.fresh()?;
                }
                self.ycsb_load(&name, "load")
            }
            Workload::Ycsb(letter) => {
                let records = self.ensure_ycsb()?;
                self.ycsb_run(&name, letter, records, ops)
            }
            Workload::Trace => self.trace(),
            Workload::Update => {
                // A database of its own, with the value store bounded by
                // `--reserve` (HashKV §4.1).
                self.bounded = true;
                let res = self.fresh().and_then(|_| {
                    self.fill(&name, "load", true)?;
                    for p in 1..=self.cfg.phases {
                        self.overwrite(&name, &format!("update-{p}"), ops, true)?;
                    }
                    Ok(())
                });
                self.bounded = false;
                res
            }
            Workload::Churn => {
                self.fresh()?;
                for p in 1..=self.cfg.phases as u64 {
                    self.churn(&name, p)?;
                }
                // Nothing is left live; the next workload starts afresh.
                self.dataset = Dataset::Other;
                Ok(())
            }
        }
    }

    fn ensure_bench(&mut self) -> Result<()> {
        match self.dataset {
            Dataset::Bench => Ok(()),
            Dataset::Empty => self.fill("fillrandom", "auto-load", true),
            _ => {
                self.fresh()?;
                self.fill("fillrandom", "auto-load", true)
            }
        }
    }

    fn ensure_ycsb(&mut self) -> Result<u64> {
        match self.dataset {
            Dataset::Ycsb { records } => return Ok(records),
            Dataset::Empty => {}
            _ => self.fresh()?,
        }
        self.ycsb_load("ycsb-load", "auto-load")?;
        match self.dataset {
            Dataset::Ycsb { records } => Ok(records),
            _ => Err(BenchError::InvalidArgument(
                "internal: the YCSB load left no records".into(),
            )),
        }
    }

    /// One measured phase of `ops` operations, one at a time, shared out
    /// over the threads: each thread makes its own state with `init(t)`
    /// (random streams, a key buffer) and runs `step` for each index `i` of
    /// its share; an operation and its progress tick are counted after each
    /// step. The phases below differ only in `init` and `step`.
    fn op_phase<S>(
        &mut self,
        workload: &str,
        phase: &str,
        ops: u64,
        init: impl Fn(&PhaseData<'_>, usize) -> S + Sync,
        step: impl Fn(&PhaseData<'_>, &mut S, &mut Exec<'_>, u64) -> Result<()> + Sync,
    ) -> Result<()> {
        let cfg = self.cfg;
        let label = format!("{workload}/{phase}");
        self.measure(workload, phase, |r| {
            let eng = r.engine.as_deref().ok_or_else(no_engine)?;
            let d = PhaseData {
                cfg,
                dense: &r.dense,
                values: &r.values,
            };
            let pb = Progress::new(cfg.progress, ops, &format!("{} {label}", eng.label()));
            let out = parallel(cfg.threads, ops, |t, range| {
                let mut state = init(&d, t);
                let mut ex = Exec::new(eng);
                let mut tick = pb.ticker();
                for i in range {
                    step(&d, &mut state, &mut ex, i)?;
                    ex.o.ops += 1;
                    tick.tick(1);
                }
                ex.finish()
            });
            pb.finish();
            out
        })
    }

    /// Writes records `0..num` once each, in key order or a random order,
    /// into an empty database.
    fn fill(&mut self, workload: &str, phase: &str, random: bool) -> Result<()> {
        if self.dataset != Dataset::Empty {
            self.fresh()?;
        }
        let cfg = self.cfg;
        let num = cfg.num;
        self.dense.ensure(num);
        let stream = self.next_stream();
        let perm = Permutation::new(num, cfg.seed ^ stream);
        self.op_phase(
            workload,
            phase,
            num,
            |d, t| (d.values.fork(stream + t as u64), d.key_buf()),
            |d, (vs, key), ex, i| {
                let n = if random { perm.get(i) } else { i };
                d.put(ex, vs, key, n)
            },
        )?;
        self.dataset = Dataset::Bench;
        Ok(())
    }

    /// `ops` puts of existing records: uniformly random keys, or scrambled
    /// Zipf-0.99 keys (`zipf`, the `update` workload).
    fn overwrite(&mut self, workload: &str, phase: &str, ops: u64, zipf: bool) -> Result<()> {
        let cfg = self.cfg;
        let num = cfg.num;
        let stream = self.next_stream();
        self.op_phase(
            workload,
            phase,
            ops,
            |d, t| {
                let s = stream + t as u64;
                let z = ScrambledZipfian::new(0, num - 1);
                (rng(cfg.seed, s), z, d.values.fork(s), d.key_buf())
            },
            |d, (rng, zipfian, vs, key), ex, _| {
                let n = if zipf {
                    zipfian.next(rng)
                } else {
                    rng.gen_range(0..num)
                };
                d.put(ex, vs, key, n)
            },
        )
    }

    fn read_random(&mut self, workload: &str, ops: u64) -> Result<()> {
        let cfg = self.cfg;
        let num = cfg.num;
        let stream = self.next_stream();
        self.op_phase(
            workload,
            "run",
            ops,
            |d, t| (rng(cfg.seed, stream + t as u64), d.key_buf()),
            |_, (rng, key), ex, _| {
                bench_key(rng.gen_range(0..num), cfg.key_size, key);
                ex.op(Op::Get(key), false)
            },
        )
    }

    fn read_seq(&mut self, workload: &str, ops: u64) -> Result<()> {
        let cfg = self.cfg;
        self.measure(workload, "run", |r| {
            let eng = r.engine.as_deref().ok_or_else(no_engine)?;
            let pb = Progress::new(cfg.progress, ops, &format!("{} {workload}/run", eng.label()));
            let mut out = parallel(cfg.threads, ops, |_, range| {
                let mut start: Vec<u8> = Vec::new();
                let mut res = ScanResult::default();
                let mut left = range.end - range.start;
                let mut o = Outcome::default();
                let mut tick = pb.ticker();
                while left > 0 {
                    let n = left.min(READSEQ_CHUNK);
                    let t0 = Instant::now();
                    eng.scan(&start, n as usize, &mut res)?;
                    let ns = t0.elapsed().as_nanos() as u64;
                    if res.entries == 0 {
                        if start.is_empty() {
                            break; // empty database
                        }
                        start.clear(); // wrap around
                        continue;
                    }
                    o.lat.record_n(ns / res.entries, res.entries);
                    o.ops += res.entries;
                    o.user_read += res.key_bytes + res.value_bytes;
                    left -= res.entries.min(left);
                    tick.tick(res.entries);
                    if res.entries < n {
                        start.clear();
                    } else {
                        start.clear();
                        start.extend_from_slice(&res.last_key);
                        start.push(0);
                    }
                }
                Ok(o)
            });
            pb.finish();
            if let Ok(o) = &mut out {
                o.notes.push(format!(
                    "readseq latencies are per entry, averaged over scans of {READSEQ_CHUNK} entries"
                ));
            }
            out
        })
    }

    fn seek_random(&mut self, workload: &str, ops: u64) -> Result<()> {
        let cfg = self.cfg;
        let num = cfg.num;
        let stream = self.next_stream();
        self.op_phase(
            workload,
            "run",
            ops,
            |d, t| (rng(cfg.seed, stream + t as u64), d.key_buf()),
            |_, (rng, key), ex, _| {
                bench_key(rng.gen_range(0..num), cfg.key_size, key);
                ex.op(Op::Scan(key, cfg.scan_length), false)
            },
        )
    }

    fn read_while_writing(&mut self, workload: &str, ops: u64) -> Result<()> {
        let cfg = self.cfg;
        let num = cfg.num;
        let stream = self.next_stream();
        self.measure(workload, "run", |r| {
            let eng = r.engine.as_deref().ok_or_else(no_engine)?;
            let (dense, values) = (&r.dense, &r.values);
            let pb = Progress::new(cfg.progress, ops, &format!("{} {workload}/run", eng.label()));
            let stop = AtomicBool::new(false);
            let (readers, writer) = std::thread::scope(|s| {
                let writer = s.spawn(|| -> Result<Outcome> {
                    let mut rng = rng(cfg.seed, stream + 0xFFFF);
                    let mut vs = values.fork(stream + 0xFFFF);
                    let mut key = Vec::with_capacity(cfg.key_size);
                    let mut o = Outcome::default();
                    while !stop.load(Ordering::Relaxed) {
                        let n = rng.gen_range(0..num);
                        bench_key(n, cfg.key_size, &mut key);
                        let v = vs.next(cfg.value_len(n));
                        let t0 = Instant::now();
                        eng.put(&key, v)?;
                        o.lat.record_since(t0);
                        dense.put(n, key.len(), v.len());
                        o.user_written += (key.len() + v.len()) as u64;
                        o.ops += 1;
                    }
                    Ok(o)
                });
                let readers = parallel(cfg.threads, ops, |t, range| {
                    let mut rng = rng(cfg.seed, stream + t as u64);
                    let mut key = Vec::with_capacity(cfg.key_size);
                    let mut buf = Vec::new();
                    let mut o = Outcome::default();
                    let mut tick = pb.ticker();
                    for _ in range {
                        bench_key(rng.gen_range(0..num), cfg.key_size, &mut key);
                        let t0 = Instant::now();
                        let found = eng.get(&key, &mut buf)?;
                        o.lat.record_since(t0);
                        if found {
                            o.user_read += buf.len() as u64;
                        } else {
                            o.not_found += 1;
                        }
                        o.ops += 1;
                        tick.tick(1);
                    }
                    Ok(o)
                });
                stop.store(true, Ordering::Relaxed);
                (readers, writer.join())
            });
            pb.finish();
            let mut out = readers?;
            let w = match writer {
                Ok(w) => w?,
                Err(p) => return Err(BenchError::Panic(panic_message(p))),
            };
            out.user_written += w.user_written;
            out.count("writer_ops", w.ops);
            let wl = w.lat.summary();
            out.count("writer_p99_ns", (wl.p99 * 1000.0) as u64);
            out.notes.push(
                "readwhilewriting: ops and latencies are the readers'; the writer's puts are in counts.writer_ops and in the bytes written".into(),
            );
            Ok(out)
        })
    }

    fn delete_random(&mut self, workload: &str, ops: u64) -> Result<()> {
        let cfg = self.cfg;
        let num = cfg.num;
        let stream = self.next_stream();
        let perm = Permutation::new(num, cfg.seed ^ stream);
        self.op_phase(
            workload,
            "run",
            ops,
            |d, _| d.key_buf(),
            |d, key, ex, i| {
                let n = perm.get(i % num);
                bench_key(n, cfg.key_size, key);
                ex.op(Op::Delete(key), false)?;
                d.dense.delete(n);
                ex.o.user_written += key.len() as u64;
                Ok(())
            },
        )
    }

    /// Phase `phase` of the `churn` workload: [`CHURN_ROUNDS_PER_PHASE`]
    /// rounds, each writing `num` keys never written before (past every
    /// record number the other workloads use), deleting them and running
    /// the engine's GC four times. One thread.
    fn churn(&mut self, workload: &str, phase: u64) -> Result<()> {
        let cfg = self.cfg;
        let num = cfg.num;
        let stream = self.next_stream();
        let label = format!("{workload}/rounds-{phase}");
        let first = (phase - 1) * CHURN_ROUNDS_PER_PHASE;
        self.measure(workload, &format!("rounds-{phase}"), |r| {
            let eng = r.engine.as_deref().ok_or_else(no_engine)?;
            let values = &r.values;
            let pb = Progress::new(
                cfg.progress,
                2 * num * CHURN_ROUNDS_PER_PHASE,
                &format!("{} {}", eng.label(), label),
            );
            let out = parallel(1, CHURN_ROUNDS_PER_PHASE, |_, range| {
                let mut vs = values.fork(stream);
                let mut key = Vec::with_capacity(cfg.key_size);
                let mut ex = Exec::new(eng);
                let mut tick = pb.ticker();
                for round in range {
                    let base = (1 << 40) + (first + round) * num;
                    for i in 0..num {
                        bench_key(base + i, cfg.key_size, &mut key);
                        let v = vs.next(cfg.value_len(i));
                        ex.op(Op::Put(&key, v), false)?;
                        ex.o.user_written += (key.len() + v.len()) as u64;
                        ex.o.ops += 1;
                        tick.tick(1);
                    }
                    for i in 0..num {
                        bench_key(base + i, cfg.key_size, &mut key);
                        ex.op(Op::Delete(&key), false)?;
                        ex.o.user_written += key.len() as u64;
                        ex.o.ops += 1;
                        tick.tick(1);
                    }
                    for _ in 0..4 {
                        eng.gc()?;
                    }
                }
                ex.finish()
            });
            pb.finish();
            out
        })
    }

    /// YCSB load: records `0..num` with all fields, in record order (their
    /// hashed keys make that a random key order), into an empty database.
    fn ycsb_load(&mut self, workload: &str, phase: &str) -> Result<()> {
        if self.dataset != Dataset::Empty {
            self.fresh()?;
        }
        let cfg = self.cfg;
        let num = cfg.num;
        self.dense.ensure(num);
        let stream = self.next_stream();
        let record = cfg.field_count * cfg.field_length;
        let label = format!("{workload}/{phase}");
        self.measure(workload, phase, |r| {
            let eng = r.engine.as_deref().ok_or_else(no_engine)?;
            let (dense, values) = (&r.dense, &r.values);
            let pb = Progress::new(cfg.progress, num, &format!("{} {}", eng.label(), label));
            let out = parallel(cfg.threads, num, |t, range| {
                let mut vs = values.fork(stream + t as u64);
                let mut key = Vec::with_capacity(32);
                let mut ex = Exec::new(eng);
                let mut tick = pb.ticker();
                for n in range {
                    ycsb::key_name(n, &mut key);
                    let v = vs.next(record);
                    ex.op(Op::Put(&key, v), false)?;
                    dense.put(n, key.len(), v.len());
                    ex.o.user_written += (key.len() + v.len()) as u64;
                    ex.o.ops += 1;
                    tick.tick(1);
                }
                let mut o = ex.finish()?;
                o.count("inserts", o.ops);
                Ok(o)
            });
            pb.finish();
            out
        })?;
        self.dataset = Dataset::Ycsb { records: num };
        Ok(())
    }

    fn ycsb_run(&mut self, workload: &str, letter: char, records: u64, ops: u64) -> Result<()> {
        let cfg = self.cfg;
        let spec = WorkloadSpec::core(letter).ok_or_else(|| {
            BenchError::InvalidArgument(format!("unknown YCSB workload {letter:?}"))
        })?;
        // Inserts can add at most `ops` records.
        let inserts_max = if spec.insert > 0.0 { ops } else { 0 };
        self.dense.ensure(records + inserts_max);
        let stream = self.next_stream();
        let seq = InsertSequence::new(records);
        let record = cfg.field_count * cfg.field_length;
        self.measure(workload, "run", |r| {
            let eng = r.engine.as_deref().ok_or_else(no_engine)?;
            let (dense, values) = (&r.dense, &r.values);
            let pb = Progress::new(
                cfg.progress,
                ops,
                &format!("{} {workload}/run", eng.label()),
            );
            let out = parallel(cfg.threads, ops, |t, range| {
                let mut gen = YcsbGenerator::new(spec, records, ops, &seq);
                let mut rng = rng(cfg.seed, stream + t as u64);
                let mut vs = values.fork(stream + t as u64);
                let mut key = Vec::with_capacity(32);
                let mut ex = Exec::new(eng);
                // Inserted records not acknowledged yet (queued in a
                // chunk): (operations run once it has run, record).
                let mut unacked: std::collections::VecDeque<(u64, u64)> = Default::default();
                let mut queued = 0u64;
                let mut c = [0u64; 5]; // read, update, insert, scan, rmw
                let mut tick = pb.ticker();
                for _ in range {
                    let op = gen.next_op(&mut rng);
                    let (YcsbOp::Read(k)
                    | YcsbOp::Update(k)
                    | YcsbOp::Insert(k)
                    | YcsbOp::Scan(k, _)
                    | YcsbOp::ReadModifyWrite(k)) = op;
                    ycsb::key_name(k, &mut key);
                    match op {
                        YcsbOp::Read(_) => {
                            c[0] += 1;
                            ex.op(Op::Get(&key), false)?;
                        }
                        YcsbOp::Update(_) => {
                            c[1] += 1;
                            let v = vs.next(cfg.field_length);
                            ex.op(Op::Put(&key, v), false)?;
                            dense.put(k, key.len(), v.len());
                            ex.o.user_written += (key.len() + v.len()) as u64;
                        }
                        YcsbOp::Insert(_) => {
                            c[2] += 1;
                            let v = vs.next(record);
                            ex.op(Op::Put(&key, v), false)?;
                            dense.put(k, key.len(), v.len());
                            unacked.push_back((queued + 1, k));
                            ex.o.user_written += (key.len() + v.len()) as u64;
                        }
                        YcsbOp::Scan(_, len) => {
                            c[3] += 1;
                            ex.op(Op::Scan(&key, len as usize), false)?;
                        }
                        YcsbOp::ReadModifyWrite(_) => {
                            c[4] += 1;
                            ex.op(Op::Get(&key), true)?;
                            queued += 1;
                            let v = vs.next(cfg.field_length);
                            ex.op(Op::Put(&key, v), false)?;
                            dense.put(k, key.len(), v.len());
                            ex.o.user_written += (key.len() + v.len()) as u64;
                        }
                    }
                    queued += 1;
                    // An insert is acknowledged (readers may pick its key)
                    // once it has run.
                    while unacked.front().is_some_and(|&(at, _)| at <= ex.done()) {
                        if let Some((_, k)) = unacked.pop_front() {
                            seq.acknowledge(k);
                        }
                    }
                    ex.o.ops += 1;
                    tick.tick(1);
                }
                let mut o = ex.finish()?;
                for (_, k) in unacked {
                    seq.acknowledge(k);
                }
                for (name, n) in ["reads", "updates", "inserts", "scans", "read_modify_writes"]
                    .iter()
                    .zip(c)
                {
                    o.count(name, n);
                }
                Ok(o)
            });
            pb.finish();
            out
        })?;
        self.dataset = Dataset::Ycsb {
            records: seq.issued(),
        };
        Ok(())
    }

    /// Replays each trace file as one phase into one (initially empty)
    /// database.
    fn trace(&mut self) -> Result<()> {
        if self.dataset != Dataset::Empty {
            self.fresh()?;
        }
        self.dataset = Dataset::Trace;
        let cfg = self.cfg;
        for path in &cfg.traces {
            let phase = path.file_name().map_or_else(
                || path.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            );
            let mut reader = TraceReader::open(path)?;
            let show = cfg.progress;
            // Counting the lines costs a pass over the file: only for a bar.
            let total = if show && std::io::stderr().is_terminal() {
                crate::trace::count_lines(path)?
            } else {
                0
            };
            let stream = self.next_stream();
            let label = format!("trace/{phase}");
            self.measure("trace", &phase, |r| {
                let eng = r.engine.as_deref().ok_or_else(no_engine)?;
                let keyed = &mut r.keyed;
                let mut vs = r.values.fork(stream);
                let pb = Progress::new(show, total, &format!("{} {}", eng.label(), label));
                let mut tick = pb.ticker();
                let mut chunk = TraceChunk::default();
                let mut buf = Vec::new();
                let mut res = ScanResult::default();
                let mut o = Outcome::default();
                let mut c = [0u64; 6]; // insert, update, read, scan, delete, scan entries
                let mut seconds = 0.0;
                if cfg.threads > 1 {
                    o.notes.push(
                        "trace replay is single-threaded; --threads was ignored for it".into(),
                    );
                }
                while reader.read_chunk(TRACE_CHUNK_OPS, &mut chunk)? > 0 {
                    let start = Instant::now();
                    for op in chunk.ops() {
                        let key = chunk.key(op);
                        let ctx = |e: BenchError| BenchError::Trace {
                            file: path.clone(),
                            line: op.line,
                            msg: e.to_string(),
                        };
                        let t0 = Instant::now();
                        match op.kind {
                            OpKind::Insert | OpKind::Update => {
                                c[usize::from(op.kind == OpKind::Update)] += 1;
                                let v = vs.next(op.n as usize);
                                eng.put(key, v).map_err(ctx)?;
                                o.lat.record_since(t0);
                                keyed.put(key, v.len());
                                o.user_written += (key.len() + v.len()) as u64;
                            }
                            OpKind::Read => {
                                c[2] += 1;
                                let found = eng.get(key, &mut buf).map_err(ctx)?;
                                o.lat.record_since(t0);
                                if found {
                                    o.user_read += buf.len() as u64;
                                } else {
                                    o.not_found += 1;
                                }
                            }
                            OpKind::Scan => {
                                c[3] += 1;
                                eng.scan(key, op.n as usize, &mut res).map_err(ctx)?;
                                o.lat.record_since(t0);
                                c[5] += res.entries;
                                o.user_read += res.key_bytes + res.value_bytes;
                            }
                            OpKind::Delete => {
                                c[4] += 1;
                                eng.delete(key).map_err(ctx)?;
                                o.lat.record_since(t0);
                                keyed.delete(key);
                                o.user_written += key.len() as u64;
                            }
                        }
                        o.ops += 1;
                        tick.tick(1);
                    }
                    seconds += start.elapsed().as_secs_f64();
                }
                drop(tick);
                pb.finish();
                for (name, n) in [
                    "inserts",
                    "updates",
                    "reads",
                    "scans",
                    "deletes",
                    "scan_entries",
                ]
                .iter()
                .zip(c)
                {
                    o.count(name, n);
                }
                o.seconds = seconds;
                Ok(o)
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_the_range() {
        for (total, threads) in [(10u64, 3usize), (1, 4), (0, 2), (1000, 1)] {
            let mut next = 0;
            for t in 0..threads {
                let r = share(total, threads, t);
                assert_eq!(r.start, next);
                next = r.end;
            }
            assert_eq!(next, total);
        }
    }
}

#[cfg(test)]
mod progress_tests {
    use super::*;

    #[test]
    fn progress_lines_say_how_far_and_how_fast() {
        assert_eq!(
            progress_line("sepkv:leveldb fillrandom/run", 250_000, 1_000_000, 5.0),
            "  [5 s] sepkv:leveldb fillrandom/run: 250000 of 1000000 ops (25 %), 50.0 kops/s"
        );
        assert_eq!(
            progress_line("fjall trace/run.tsv", 1000, 0, 10.0),
            "  [10 s] fjall trace/run.tsv: 1000 ops, 0.1 kops/s"
        );
    }

    #[test]
    fn line_printer_stops_when_the_phase_ends() {
        // A printer that would wait an hour must end at `finish`.
        let p = Progress::lines(10, "x", std::time::Duration::from_secs(3600));
        p.ticker().tick(3);
        match &p {
            Progress::Lines(l) => assert_eq!(l.shared.done.load(Ordering::Relaxed), 3),
            _ => panic!("expected lines"),
        }
        p.finish();
        drop(p); // joins the printer thread
    }
}
