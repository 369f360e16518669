//! The plan of one `sepkv bench` invocation, made once from the parsed
//! command line ([`BenchArgs`]) and handed down by reference.
//!
//! [`Command::new`] is the only place that reads the arguments: it picks
//! what the invocation does (list the engines, report on earlier results,
//! or run), resolves every default (the default suite's engines,
//! workloads, record count and value size; db_bench's otherwise; the
//! suite's report directory), parses every value (sizes, rates, shares,
//! engine specs, workload names), checks the settings
//! ([`BenchConfig::validate`]) and the engines' availability, and refuses
//! combinations that cannot mean anything (`--from-json` with a flag of a
//! run, `--checkpoint-after` without a sepkv engine, `--preset` with
//! `--engine`). What comes out is checked: the runner
//! ([`Plan::run`]), the summary and the output writers read the plan and
//! derive nothing from the arguments again.
//!
//! A plan is plain data (no files are touched while it is made, except
//! that trace files must exist); it is safe to share between threads.

use crate::cli::{
    BenchArgs, DEFAULT_NUM, DEFAULT_VALUE_SIZE, SUITE_NUM, SUITE_PEERS, SUITE_REPORT_DIR,
    SUITE_VALUE_SIZE,
};
use crate::config::{BenchConfig, SmallValues, Workload, WorkloadRun};
use crate::engine::{EngineFactory, EngineSpec};
use crate::error::{BenchError, Result};
use crate::report::PhaseReport;
use crate::DbRoot;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What one `sepkv bench` invocation does.
#[derive(Debug, Clone)]
pub enum Command {
    /// `--list-engines`: print the engine catalogue and exit.
    ListEngines,
    /// `--from-json`: run nothing; read these result files, print their
    /// table and write the outputs.
    Report {
        /// The JSON result files, in order.
        inputs: Vec<PathBuf>,
        /// Where the combined results go.
        outputs: Outputs,
    },
    /// Run a benchmark (boxed: a plan is large beside the other commands).
    Run(Box<Plan>),
}

/// Where the results of an invocation are written besides the summary
/// table on stdout.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outputs {
    /// The phase reports as JSON (`--json`).
    pub json: Option<PathBuf>,
    /// The markdown tables (`--markdown`).
    pub markdown: Option<PathBuf>,
    /// The directory of the charts (`--plot`).
    pub plot: Option<PathBuf>,
    /// A directory to create before anything runs: the default suite's
    /// report directory ([`SUITE_REPORT_DIR`]) when it writes there.
    pub create_dir: Option<PathBuf>,
}

impl Outputs {
    /// The outputs named on the command line.
    fn of(args: &BenchArgs) -> Self {
        Outputs {
            json: args.json.clone(),
            markdown: args.markdown.clone(),
            plot: args.plot.clone(),
            create_dir: None,
        }
    }

    /// True when no output file or directory is named.
    fn is_empty(&self) -> bool {
        self.json.is_none() && self.markdown.is_none() && self.plot.is_none()
    }

    /// The default suite's report: tables, JSON and charts in `dir`.
    fn suite_report(dir: &Path) -> Self {
        Outputs {
            json: Some(dir.join("results.json")),
            markdown: Some(dir.join("results.md")),
            plot: Some(dir.to_path_buf()),
            create_dir: Some(dir.to_path_buf()),
        }
    }
}

/// A benchmark to run: engines, settings, where and what to write. Made by
/// [`Command::new`] (or [`BenchArgs::plan`]); always checked.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Engines, in order; each available in this build.
    pub engines: Vec<EngineSpec>,
    /// Settings and workloads (valid: [`BenchConfig::validate`] passed).
    pub config: BenchConfig,
    /// Database directory (`None`: a temporary one).
    pub db: Option<PathBuf>,
    /// Keep the databases afterwards.
    pub keep: bool,
    /// Where the results go.
    pub outputs: Outputs,
    /// True when this is the default suite (no `--workload`, no `--trace`).
    pub suite: bool,
    /// Rounds of the whole engine list (`--repeat`, at least 1).
    pub repeat: u32,
    /// Settle the machine before each empty database (not `--no-settle`;
    /// see [`crate::settle`]).
    pub settle: bool,
}

impl Command {
    /// The command `args` describe. `db` is the database directory named
    /// on the command line, if any; `preset` the CLI's global `--preset`,
    /// which stands for `--engine sepkv:<preset>`.
    ///
    /// # Errors
    /// [`BenchError::InvalidArgument`] for an unknown engine or workload,
    /// a value out of range or unparsable, a missing trace file, or flags
    /// that cannot be combined; [`BenchError::Unavailable`] for an engine
    /// this build cannot run.
    pub fn new(args: &BenchArgs, db: Option<PathBuf>, preset: Option<&str>) -> Result<Self> {
        if args.list_engines {
            return Ok(Command::ListEngines);
        }
        if !args.from_json.is_empty() {
            refuse_run_flags(args, preset)?;
            return Ok(Command::Report {
                inputs: args.from_json.clone(),
                outputs: Outputs::of(args),
            });
        }
        Plan::new(args, db, preset).map(|p| Command::Run(Box::new(p)))
    }
}

/// `--from-json` runs nothing: a flag that only shapes a run is refused
/// rather than ignored.
fn refuse_run_flags(args: &BenchArgs, preset: Option<&str>) -> Result<()> {
    let given = [
        ("--engine", !args.engine.is_empty()),
        ("--preset", preset.is_some()),
        ("--workload", !args.workload.is_empty()),
        ("--trace", !args.trace.is_empty()),
        ("--keep", args.keep),
        ("--checkpoint-after", args.checkpoint_after.is_some()),
        ("--memory-limit", args.memory_limit.is_some()),
        ("--device-bandwidth", args.device_bandwidth.is_some()),
        ("--repeat", args.repeat.is_some()),
        ("--no-settle", args.no_settle),
    ];
    match given.iter().find(|(_, on)| *on) {
        Some((flag, _)) => Err(BenchError::InvalidArgument(format!(
            "{flag} does not apply to --from-json, which reads results and runs nothing"
        ))),
        None => Ok(()),
    }
}

impl Plan {
    /// The run `args` describe (`--list-engines` and `--from-json` are not
    /// looked at; [`Command::new`] handles them). See [`Command::new`].
    ///
    /// # Errors
    /// As [`Command::new`].
    pub fn new(args: &BenchArgs, db: Option<PathBuf>, preset: Option<&str>) -> Result<Self> {
        let suite = args.workload.is_empty() && args.trace.is_empty();
        let repeat = match args.repeat {
            None => 1,
            Some(0) => {
                return Err(BenchError::InvalidArgument(
                    "--repeat 0: the engines must run at least once (1 or more rounds)".into(),
                ))
            }
            Some(n) => n,
        };
        let engines = engines(args, preset, suite)?;
        let num = args
            .num
            .unwrap_or(if suite { SUITE_NUM } else { DEFAULT_NUM });
        let workloads: Vec<WorkloadRun> = if suite {
            vec![
                Workload::FillRandom.into(),
                Workload::ReadRandom.into(),
                WorkloadRun {
                    workload: Workload::SeekRandom,
                    ops: Some(args.ops.unwrap_or((num / 10).max(1))),
                },
                Workload::Overwrite.into(),
            ]
        } else if args.workload.is_empty() {
            vec![Workload::Trace.into()]
        } else {
            args.workload
                .iter()
                .filter(|s| !s.trim().is_empty())
                .map(|s| s.parse::<Workload>().map(WorkloadRun::from))
                .collect::<Result<_>>()?
        };
        for t in &args.trace {
            if !t.is_file() {
                return Err(BenchError::InvalidArgument(format!(
                    "trace file {} not found",
                    t.display()
                )));
            }
        }
        let config = BenchConfig {
            workloads,
            num,
            value_size: args.value_size.unwrap_or(if suite {
                SUITE_VALUE_SIZE
            } else {
                DEFAULT_VALUE_SIZE
            }),
            key_size: args.key_size,
            ops: args.ops,
            threads: args.threads,
            seed: args.seed,
            scan_length: args.scan_length,
            traces: args.trace.clone(),
            sync: args.sync,
            direct_io: args.direct_io,
            memory_limit: parse_flag(
                "--memory-limit",
                args.memory_limit.as_deref(),
                crate::cgroup::parse_bytes,
            )?,
            device_bandwidth: parse_flag(
                "--device-bandwidth",
                args.device_bandwidth.as_deref(),
                crate::cgroup::parse_bandwidth,
            )?,
            checkpoint_after: checkpoint_after(args.checkpoint_after)?,
            phases: args.phases,
            field_count: args.field_count,
            field_length: args.field_length,
            progress: !args.no_progress,
            small_values: args
                .small_values
                .as_deref()
                .map(str::parse::<SmallValues>)
                .transpose()?,
            reserve: reserve(args.reserve.as_deref())?,
        };
        config.validate()?;
        for e in &engines {
            e.check_available()?;
        }
        if config.checkpoint_after.is_some()
            && !engines.iter().any(|e| matches!(e, EngineSpec::Sepkv(..)))
        {
            return Err(BenchError::InvalidArgument(
                "--checkpoint-after applies to sepkv engines only, and none is given".into(),
            ));
        }
        // The default suite leaves its report behind even when no output
        // was asked for: the tables, the JSON and the charts, in one
        // directory.
        let mut outputs = Outputs::of(args);
        if suite && outputs.is_empty() {
            outputs = Outputs::suite_report(Path::new(SUITE_REPORT_DIR));
        }
        Ok(Plan {
            engines,
            config,
            db,
            keep: args.keep,
            outputs,
            suite,
            repeat,
            settle: !args.no_settle,
        })
    }

    /// True when a workload of the plan is `update`.
    pub fn has_update(&self) -> bool {
        self.config
            .workloads
            .iter()
            .any(|w| w.workload == Workload::Update)
    }

    /// Runs the plan's workloads on each engine in turn, [`Plan::repeat`]
    /// times (round `r` in the order [`crate::repeat::rotation`] gives),
    /// each engine in its own directory under `root` (with several
    /// rounds, under `round-<r>/`; emptied after the engine's run unless
    /// [`Plan::keep`]), settling the machine before each empty database
    /// unless told not to. Pushes the reports, each tagged with an
    /// identifier of this run and its round, onto `reports`, calling
    /// `on_phase` as each phase completes. The plan was checked when it
    /// was made, so nothing is checked again.
    ///
    /// # Errors
    /// The first error of a run (the reports of the phases completed
    /// before it stay in `reports`), or a directory that cannot be
    /// created or emptied.
    pub fn run(
        &self,
        root: &DbRoot,
        reports: &mut Vec<PhaseReport>,
        on_phase: &mut dyn FnMut(&PhaseReport),
    ) -> Result<()> {
        let mut settler = self.settle.then(crate::settle::Settler::new);
        let run_id = run_id();
        let n = self.engines.len();
        for round in 0..self.repeat {
            let base = if self.repeat > 1 {
                root.path().join(format!("round-{round}"))
            } else {
                root.path().to_path_buf()
            };
            for i in crate::repeat::rotation(n, round as usize) {
                let e = &self.engines[i];
                if self.repeat > 1 {
                    eprintln!("round {} of {}: {e}", round + 1, self.repeat);
                }
                let dir = crate::DbRoot::dir_under(&base, &e.label(), n);
                let first = reports.len();
                let res = crate::runner::run_checked(
                    e,
                    &dir,
                    &self.config,
                    settler.as_mut(),
                    reports,
                    on_phase,
                );
                for r in &mut reports[first..] {
                    r.run = Some(run_id.clone());
                    r.round = Some(round);
                }
                res?;
                if !self.keep && dir != root.path() {
                    std::fs::remove_dir_all(&dir).map_err(|e| BenchError::io(&dir, e))?;
                }
            }
        }
        Ok(())
    }
}

/// An identifier of this run: the start time (Unix seconds), the process
/// id and, after the first, the count of runs this process made before
/// (two runs within a second of one process stay apart).
fn run_id() -> String {
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    match n {
        0 => format!("{secs}-{}", std::process::id()),
        n => format!("{secs}-{}-{n}", std::process::id()),
    }
}

/// The engines of a run: `--engine`, else `--preset`, else the default
/// suite's (every preset beside [`SUITE_PEERS`]) or `sepkv:leveldb`.
fn engines(args: &BenchArgs, preset: Option<&str>, suite: bool) -> Result<Vec<EngineSpec>> {
    let named: Vec<String> = match preset {
        Some(_) if !args.engine.is_empty() => {
            return Err(BenchError::Conflict(
                "give either --preset or --engine to bench, not both".into(),
            ))
        }
        Some(p) => vec![format!("sepkv:{p}")],
        None => args.engine.clone(),
    };
    if named.is_empty() && suite {
        Ok(sepkv::Preset::ALL
            .iter()
            .map(|&p| EngineSpec::Sepkv(p, Default::default()))
            .chain(
                SUITE_PEERS
                    .iter()
                    .map(|s| s.parse())
                    .collect::<Result<Vec<_>>>()?,
            )
            .collect())
    } else if named.is_empty() {
        Ok(vec![EngineSpec::Sepkv(
            sepkv::Preset::LevelDb,
            Default::default(),
        )])
    } else {
        named
            .iter()
            .filter(|s| !s.trim().is_empty())
            .map(|s| s.parse())
            .collect()
    }
}

/// `--checkpoint-after SECS`, at most a day.
fn checkpoint_after(secs: Option<f64>) -> Result<Option<Duration>> {
    match secs {
        Some(s) if !(0.0..=86_400.0).contains(&s) => Err(BenchError::InvalidArgument(format!(
            "--checkpoint-after {s}: not between 0 and 86400 seconds"
        ))),
        s => Ok(s.map(Duration::from_secs_f64)),
    }
}

/// `--reserve R|none` (default 0.3).
fn reserve(r: Option<&str>) -> Result<Option<f64>> {
    match r.unwrap_or("0.3").trim() {
        "none" => Ok(None),
        r => r.parse().map(Some).map_err(|_| {
            BenchError::InvalidArgument(format!(
                "--reserve {r:?}: expected a share such as 0.3, or none"
            ))
        }),
    }
}

/// The value of `flag`, if given, parsed by `parse`; an `InvalidArgument`
/// from parsing names the flag.
fn parse_flag<T>(
    flag: &str,
    value: Option<&str>,
    parse: fn(&str) -> Result<T>,
) -> Result<Option<T>> {
    value.map(parse).transpose().map_err(|e| match e {
        BenchError::InvalidArgument(m) => BenchError::InvalidArgument(format!("{flag} {m}")),
        e => e,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> BenchArgs {
        BenchArgs {
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

    #[test]
    fn the_suite_writes_its_report_directory_unless_an_output_is_named() {
        let plan = Plan::new(&args(), None, None).unwrap();
        let dir = Path::new(SUITE_REPORT_DIR);
        assert_eq!(plan.outputs, Outputs::suite_report(dir));
        assert_eq!(plan.outputs.plot.as_deref(), Some(dir));
        let named = BenchArgs {
            markdown: Some("m.md".into()),
            ..args()
        };
        let plan = Plan::new(&named, None, None).unwrap();
        assert_eq!(plan.outputs.markdown.as_deref(), Some(Path::new("m.md")));
        assert_eq!((plan.outputs.json, plan.outputs.create_dir), (None, None));
        let explicit = BenchArgs {
            workload: vec!["fillseq".into()],
            ..args()
        };
        assert!(Plan::new(&explicit, None, None).unwrap().outputs.is_empty());
    }

    #[test]
    fn the_preset_stands_for_one_sepkv_engine_and_excludes_engine() {
        let explicit = BenchArgs {
            workload: vec!["fillseq".into()],
            ..args()
        };
        let plan = Plan::new(&explicit, None, Some("wisckey")).unwrap();
        let names: Vec<String> = plan.engines.iter().map(|e| e.to_string()).collect();
        assert_eq!(names, ["sepkv:wisckey"]);
        let both = BenchArgs {
            engine: vec!["fjall".into()],
            ..explicit
        };
        let err = Plan::new(&both, None, Some("wisckey")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "give either --preset or --engine to bench, not both"
        );
    }

    #[test]
    fn meaningless_combinations_are_refused() {
        let from_json = BenchArgs {
            from_json: vec!["r.json".into()],
            workload: vec!["fillseq".into()],
            ..args()
        };
        let err = Command::new(&from_json, None, None).unwrap_err();
        assert!(
            matches!(&err, BenchError::InvalidArgument(m) if m.starts_with("--workload does not apply to --from-json")),
            "{err}"
        );
        let from_json = BenchArgs {
            workload: Vec::new(),
            ..from_json
        };
        assert!(matches!(
            Command::new(&from_json, None, Some("wisckey")),
            Err(BenchError::InvalidArgument(m)) if m.starts_with("--preset ")
        ));
        match Command::new(&from_json, None, None).unwrap() {
            Command::Report { inputs, outputs } => {
                assert_eq!(inputs, [PathBuf::from("r.json")]);
                assert!(outputs.is_empty());
            }
            c => panic!("{c:?}"),
        }
        let peers_only = BenchArgs {
            engine: vec!["fjall".into()],
            workload: vec!["fillseq".into()],
            checkpoint_after: Some(1.0),
            ..args()
        };
        assert!(matches!(
            Plan::new(&peers_only, None, None),
            Err(BenchError::InvalidArgument(m)) if m.starts_with("--checkpoint-after applies")
        ));
        let bad_reserve = BenchArgs {
            workload: vec!["update".into()],
            reserve: Some("lots".into()),
            ..args()
        };
        assert!(Plan::new(&bad_reserve, None, None).is_err());
        let list = BenchArgs {
            list_engines: true,
            workload: vec!["nope".into()],
            ..args()
        };
        assert!(matches!(
            Command::new(&list, None, None),
            Ok(Command::ListEngines)
        ));
    }

    #[test]
    fn a_bad_size_or_rate_names_its_flag() {
        for (memory_limit, device_bandwidth, flag) in [
            (Some("lots"), None, "--memory-limit "),
            (None, Some("fast"), "--device-bandwidth "),
        ] {
            let bad = BenchArgs {
                workload: vec!["fillseq".into()],
                memory_limit: memory_limit.map(String::from),
                device_bandwidth: device_bandwidth.map(String::from),
                ..args()
            };
            let err = Plan::new(&bad, None, None).unwrap_err();
            assert!(
                matches!(&err, BenchError::InvalidArgument(m) if m.starts_with(flag)),
                "{err}"
            );
        }
    }
}
