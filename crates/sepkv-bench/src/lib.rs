//! sepkv-bench: the benchmark harness behind `sepkv bench`.
//!
//! It runs db_bench-style workloads (`fillseq`, `fillrandom`, `overwrite`,
//! `readrandom`, `readseq`, `seekrandom`, `readwhilewriting`,
//! `deleterandom`), the YCSB core workloads (`ycsb-load`, `ycsb-a` …
//! `ycsb-f`, see [`ycsb`]), replays of real operation traces (`trace`, see
//! [`trace`]) and HashKV's update-intensive experiment (`update`) against
//! one or more engines behind the [`engine::Engine`] trait, and reports for
//! every phase: throughput, latency percentiles, user and engine bytes,
//! process I/O, write/read/space amplification and whether reads came from
//! the page cache ([`report::PhaseReport`]; the JSON schema is documented in
//! the crate's README).
//!
//! ```no_run
//! use sepkv_bench::{config::{BenchConfig, Workload}, engine::EngineSpec, DbRoot, run_engines};
//! let cfg = BenchConfig {
//!     workloads: vec![Workload::FillRandom.into(), Workload::ReadRandom.into()],
//!     num: 100_000,
//!     ..BenchConfig::default()
//! };
//! let root = DbRoot::prepare(None)?;
//! let mut reports = Vec::new();
//! run_engines(&[EngineSpec::Sepkv(sepkv::Preset::LevelDb, Default::default())], &cfg, &root, &mut reports, &mut |_| {})?;
//! sepkv_bench::report::print_table(&reports, &mut std::io::stdout())
//!     .map_err(|e| sepkv_bench::BenchError::io("<stdout>", e))?;
//! root.finish(false)?;
//! # Ok::<(), sepkv_bench::BenchError>(())
//! ```
#![deny(missing_docs)]

pub mod cgroup;
pub mod cli;
pub mod config;
pub mod contract;
pub mod engine;
mod error;
pub mod gen;
pub mod live;
pub mod measure;
pub mod peers;
pub mod plan;
pub mod plot;
pub mod repeat;
pub mod report;
pub mod runner;
pub mod settle;
pub mod trace;
pub mod ycsb;

pub use error::{BenchError, Result};

use engine::{EngineFactory, EngineSpec};
use report::PhaseReport;
use std::path::{Path, PathBuf};

/// The directory the databases of a run live in: a fresh temporary
/// directory, or one the user named (which must be missing or empty).
pub struct DbRoot {
    kind: RootKind,
}

enum RootKind {
    Temp(tempfile::TempDir),
    Given { path: PathBuf, created: bool },
}

impl DbRoot {
    /// Prepares `dir` (created when missing; refused when it holds
    /// anything), or a new temporary directory when `None`.
    ///
    /// # Errors
    /// [`BenchError::InvalidArgument`] for a non-empty directory or a file;
    /// [`BenchError::Io`] when it cannot be created.
    pub fn prepare(dir: Option<&Path>) -> Result<Self> {
        let kind = match dir {
            None => RootKind::Temp(
                tempfile::Builder::new()
                    .prefix("sepkv-bench-")
                    .tempdir()
                    .map_err(|e| BenchError::io(std::env::temp_dir(), e))?,
            ),
            Some(p) => {
                let created = !p.exists();
                if !created {
                    if !p.is_dir() {
                        return Err(BenchError::InvalidArgument(format!(
                            "--db {} is not a directory",
                            p.display()
                        )));
                    }
                    let mut it = std::fs::read_dir(p).map_err(|e| BenchError::io(p, e))?;
                    if it.next().is_some() {
                        return Err(BenchError::InvalidArgument(format!(
                            "--db {} is not empty; the benchmark needs a missing or empty directory (it deletes what it creates)",
                            p.display()
                        )));
                    }
                }
                std::fs::create_dir_all(p).map_err(|e| BenchError::io(p, e))?;
                RootKind::Given {
                    path: p.to_path_buf(),
                    created,
                }
            }
        };
        Ok(DbRoot { kind })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        match &self.kind {
            RootKind::Temp(t) => t.path(),
            RootKind::Given { path, .. } => path,
        }
    }

    /// The directory as run logs show it: the path the user named, or
    /// `<temporary directory>` for a temporary one (its name says nothing
    /// worth keeping in a result file).
    pub fn shown(&self) -> String {
        match &self.kind {
            RootKind::Temp(_) => "<temporary directory>".into(),
            RootKind::Given { path, .. } => path.display().to_string(),
        }
    }

    /// The directory of engine `label` when `engines` engines run: the root
    /// itself for one engine, else a subdirectory named after the label.
    pub fn engine_dir(&self, label: &str, engines: usize) -> PathBuf {
        Self::dir_under(self.path(), label, engines)
    }

    /// The directory of engine `label` under `base` when `engines` engines
    /// run: `base` for one engine, else a subdirectory named after the
    /// label.
    pub(crate) fn dir_under(base: &Path, label: &str, engines: usize) -> PathBuf {
        if engines <= 1 {
            base.to_path_buf()
        } else {
            let name: String = label
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                        c
                    } else {
                        '-'
                    }
                })
                .collect();
            base.join(name)
        }
    }

    /// Keeps the databases (returning their directory) or deletes what the
    /// run created.
    ///
    /// # Errors
    /// [`BenchError::Io`] when deleting fails.
    pub fn finish(self, keep: bool) -> Result<Option<PathBuf>> {
        match self.kind {
            RootKind::Temp(t) if keep => Ok(Some(t.keep())),
            RootKind::Temp(t) => {
                let p = t.path().to_path_buf();
                t.close().map_err(|e| BenchError::io(p, e))?;
                Ok(None)
            }
            RootKind::Given { path, .. } if keep => Ok(Some(path)),
            RootKind::Given { path, created } => {
                if created {
                    std::fs::remove_dir_all(&path).map_err(|e| BenchError::io(&path, e))?;
                } else {
                    for entry in std::fs::read_dir(&path).map_err(|e| BenchError::io(&path, e))? {
                        let p = entry.map_err(|e| BenchError::io(&path, e))?.path();
                        let r = if p.is_dir() {
                            std::fs::remove_dir_all(&p)
                        } else {
                            std::fs::remove_file(&p)
                        };
                        r.map_err(|e| BenchError::io(&p, e))?;
                    }
                }
                Ok(None)
            }
        }
    }
}

/// Runs `cfg` on every engine in turn (each in its own directory under
/// `root`), pushing the reports onto `reports` and calling `on_phase` as
/// each phase completes. Every engine is checked for availability before
/// anything runs.
///
/// # Errors
/// The first unavailable engine, or the first error of a run (the reports
/// of the phases completed before it stay in `reports`).
pub fn run_engines(
    engines: &[EngineSpec],
    cfg: &config::BenchConfig,
    root: &DbRoot,
    reports: &mut Vec<PhaseReport>,
    on_phase: &mut dyn FnMut(&PhaseReport),
) -> Result<()> {
    cfg.validate()?;
    if engines.is_empty() {
        return Err(BenchError::InvalidArgument("no engine given".into()));
    }
    for e in engines {
        e.check_available()?;
    }
    for e in engines {
        let dir = root.engine_dir(&e.label(), engines.len());
        runner::run_checked(e, &dir, cfg, None, reports, on_phase)?;
    }
    Ok(())
}
