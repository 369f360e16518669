//! Repeated runs (`--repeat N`): the rounds of each engine and phase
//! summarized as a median and a spread.
//!
//! A `--repeat N` run runs its whole engine list N times, round `r`
//! starting from engine `r mod n` ([`rotation`]), so that no engine always
//! runs first on a cold machine or last after everyone's writes. Every
//! report of it carries the run's identifier and its round
//! ([`PhaseReport::run`], [`PhaseReport::round`]).
//!
//! [`summarize`] groups the reports by run, engine, workload and phase —
//! results of different runs merged with `--from-json` stay apart, each
//! run's rounds side by side — and gives per group the **median** of the
//! rounds (for an even count, the mean of the two middle values) and the
//! **spread as the range**, minimum to maximum, of throughput, write, read
//! and space amplification, the latency percentiles and the time spent
//! settling. An engine that appears in several runs is labelled
//! `engine [run k]`, k counting the runs in order of first appearance.

use crate::measure::LatencySummary;
use crate::report::PhaseReport;
use serde::{Deserialize, Serialize};
use std::io::Write;

/// The order of `n` engines in round `round`: the list rotated to start
/// at engine `round mod n`.
pub fn rotation(n: usize, round: usize) -> Vec<usize> {
    (0..n).map(|i| (round + i) % n.max(1)).collect()
}

/// The median and range of one figure over the rounds of a phase.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// Median of the rounds (mean of the two middle values for an even
    /// count).
    pub median: f64,
    /// Smallest round.
    pub min: f64,
    /// Largest round.
    pub max: f64,
}

impl Spread {
    /// The spread of `values`; `None` when there are none (NaN values are
    /// left out).
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let mut v: Vec<f64> = values.into_iter().filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min: v[0],
            max: v[n - 1],
        })
    }

    /// `median (min–max)` with `prec` decimals.
    pub fn show(&self, prec: usize) -> String {
        format!(
            "{:.prec$} ({:.prec$}–{:.prec$})",
            self.median, self.min, self.max
        )
    }
}

fn show_opt(s: &Option<Spread>, prec: usize) -> String {
    s.as_ref().map_or_else(|| "-".into(), |s| s.show(prec))
}

/// The latency percentiles of a phase over its rounds (µs).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LatencySpread {
    /// Median latency.
    pub p50: Spread,
    /// 99th percentile.
    pub p99: Spread,
    /// 99.9th percentile.
    pub p999: Spread,
    /// 99.99th percentile.
    pub p9999: Spread,
    /// 99.999th percentile, over the rounds that report it.
    pub p99999: Option<Spread>,
    /// Largest.
    pub max: Spread,
}

/// One engine's phase over the rounds of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseSummary {
    /// Engine label; `engine [run k]` when the engine appears in several
    /// runs.
    pub engine: String,
    /// The run's identifier.
    pub run: Option<String>,
    /// Workload name.
    pub workload: String,
    /// Phase name.
    pub phase: String,
    /// Rounds summarized.
    pub rounds: usize,
    /// Operations per second.
    pub ops_per_sec: Spread,
    /// Engine write amplification.
    pub write_amp: Option<Spread>,
    /// Process write amplification (`/proc/self/io`).
    pub process_write_amp: Option<Spread>,
    /// Read amplification.
    pub read_amp: Option<Spread>,
    /// Space amplification.
    pub space_amp: Option<Spread>,
    /// Latency percentiles (µs).
    pub latency_us: LatencySpread,
    /// Seconds spent settling before the phase, over the rounds that
    /// settled.
    pub settle_seconds: Option<Spread>,
    /// Rounds whose settling dropped the page cache.
    pub cache_dropped: usize,
}

/// The reports grouped by (run, engine, workload, phase), in order of
/// first appearance, with each group's display label.
fn groups(reports: &[PhaseReport]) -> Vec<(String, Vec<&PhaseReport>)> {
    let mut keys: Vec<(&Option<String>, &str, &str, &str)> = Vec::new();
    let mut members: Vec<Vec<&PhaseReport>> = Vec::new();
    for r in reports {
        let k = (
            &r.run,
            r.engine.as_str(),
            r.workload.as_str(),
            r.phase.as_str(),
        );
        match keys.iter().position(|x| *x == k) {
            Some(i) => members[i].push(r),
            None => {
                keys.push(k);
                members.push(vec![r]);
            }
        }
    }
    let mut runs: Vec<&Option<String>> = Vec::new();
    for r in reports {
        if !runs.contains(&&r.run) {
            runs.push(&r.run);
        }
    }
    let runs_of = |engine: &str| {
        let mut seen: Vec<&Option<String>> = Vec::new();
        for k in keys.iter().filter(|k| k.1 == engine) {
            if !seen.contains(&k.0) {
                seen.push(k.0);
            }
        }
        seen.len()
    };
    keys.iter()
        .zip(members)
        .map(|(k, m)| {
            let label = if runs_of(k.1) > 1 {
                let n = runs.iter().position(|r| *r == k.0).unwrap_or(0) + 1;
                format!("{} [run {n}]", k.1)
            } else {
                k.1.to_string()
            };
            (label, m)
        })
        .collect()
}

/// Per run, engine, workload and phase: the median and range of its
/// rounds, in order of first appearance.
pub fn summarize(reports: &[PhaseReport]) -> Vec<PhaseSummary> {
    groups(reports)
        .into_iter()
        .map(|(engine, m)| {
            let f = |g: fn(&PhaseReport) -> Option<f64>| Spread::of(m.iter().filter_map(|r| g(r)));
            let lat = |g: fn(&LatencySummary) -> f64| {
                Spread::of(m.iter().map(|r| g(&r.latency_us))).unwrap_or(Spread {
                    median: 0.0,
                    min: 0.0,
                    max: 0.0,
                })
            };
            let first = m[0];
            PhaseSummary {
                engine,
                run: first.run.clone(),
                workload: first.workload.clone(),
                phase: first.phase.clone(),
                rounds: m.len(),
                ops_per_sec: Spread::of(m.iter().map(|r| r.ops_per_sec)).unwrap_or(Spread {
                    median: 0.0,
                    min: 0.0,
                    max: 0.0,
                }),
                write_amp: f(|r| r.write_amp),
                process_write_amp: f(|r| r.process_write_amp),
                read_amp: f(|r| r.read_amp),
                space_amp: f(|r| r.space_amp),
                latency_us: LatencySpread {
                    p50: lat(|l| l.p50),
                    p99: lat(|l| l.p99),
                    p999: lat(|l| l.p999),
                    p9999: lat(|l| l.p9999),
                    p99999: Spread::of(m.iter().filter_map(|r| r.latency_us.p99999)),
                    max: lat(|l| l.max),
                },
                settle_seconds: f(|r| r.settle.map(|s| s.seconds)),
                cache_dropped: m
                    .iter()
                    .filter(|r| r.settle.is_some_and(|s| s.cache_dropped))
                    .count(),
            }
        })
        .collect()
}

/// True when the reports hold repeated rounds: a group of more than one
/// round, or an engine in several runs. Without them every output looks
/// as it did before `--repeat` existed.
pub fn is_repeated(reports: &[PhaseReport]) -> bool {
    groups(reports)
        .iter()
        .any(|(label, m)| m.len() > 1 || *label != m[0].engine)
}

/// One report per group standing for its rounds: the first round's report
/// with the group's label and the medians of throughput, seconds,
/// amplifications and latency percentiles. The side-by-side tables, the
/// comparisons with the best peer and the charts are drawn from these.
pub fn medians(reports: &[PhaseReport]) -> Vec<PhaseReport> {
    groups(reports)
        .into_iter()
        .map(|(label, m)| {
            let med = |g: fn(&PhaseReport) -> Option<f64>| {
                Spread::of(m.iter().filter_map(|r| g(r))).map(|s| s.median)
            };
            let mut r = m[0].clone();
            r.engine = label;
            r.round = None;
            r.ops_per_sec = med(|r| Some(r.ops_per_sec)).unwrap_or(0.0);
            r.seconds = med(|r| Some(r.seconds)).unwrap_or(0.0);
            r.write_amp = med(|r| r.write_amp);
            r.process_write_amp = med(|r| r.process_write_amp);
            r.read_amp = med(|r| r.read_amp);
            r.process_read_amp = med(|r| r.process_read_amp);
            r.space_amp = med(|r| r.space_amp);
            let l = &mut r.latency_us;
            l.p50 = med(|r| Some(r.latency_us.p50)).unwrap_or(0.0);
            l.p99 = med(|r| Some(r.latency_us.p99)).unwrap_or(0.0);
            l.p999 = med(|r| Some(r.latency_us.p999)).unwrap_or(0.0);
            l.p9999 = med(|r| Some(r.latency_us.p9999)).unwrap_or(0.0);
            l.p99999 = med(|r| r.latency_us.p99999);
            l.max = med(|r| Some(r.latency_us.max)).unwrap_or(0.0);
            l.mean = med(|r| Some(r.latency_us.mean)).unwrap_or(0.0);
            r
        })
        .collect()
}

const HEADER: [&str; 13] = [
    "engine",
    "workload",
    "phase",
    "rounds",
    "kops/s",
    "WA",
    "process WA",
    "SA",
    "p50 µs",
    "p99 µs",
    "p99.9 µs",
    "max µs",
    "settle s",
];

fn rows(summaries: &[PhaseSummary]) -> Vec<[String; 13]> {
    let kops = |s: &Spread| Spread {
        median: s.median / 1000.0,
        min: s.min / 1000.0,
        max: s.max / 1000.0,
    };
    summaries
        .iter()
        .map(|s| {
            [
                s.engine.clone(),
                s.workload.clone(),
                s.phase.clone(),
                s.rounds.to_string(),
                kops(&s.ops_per_sec).show(1),
                show_opt(&s.write_amp, 2),
                show_opt(&s.process_write_amp, 2),
                show_opt(&s.space_amp, 2),
                s.latency_us.p50.show(1),
                s.latency_us.p99.show(1),
                s.latency_us.p999.show(1),
                s.latency_us.max.show(0),
                match &s.settle_seconds {
                    Some(t) => format!(
                        "{} ({} dropped)",
                        t.show(1),
                        if s.cache_dropped == 0 {
                            "cache not".to_string()
                        } else {
                            format!("cache {} of {}", s.cache_dropped, s.rounds)
                        }
                    ),
                    None => "-".into(),
                },
            ]
        })
        .collect()
}

const LEGEND: &str =
    "Each figure: the median of the rounds, then (min–max) over them. kops/s = thousands \
of operations per second; WA = engine bytes written / user bytes, process WA = the process's \
storage writes (/proc/self/io) / user bytes; SA = database size / live bytes; latencies in µs; \
settle s = seconds spent settling (sync, waiting for writeback, dropping the page cache) before \
the phase, where it started from an empty database.";

/// Writes the summary of repeated rounds as a text table (one row per
/// run, engine, workload and phase), then its legend.
///
/// # Errors
/// The writer's error.
pub fn print_summary(reports: &[PhaseReport], out: &mut dyn Write) -> std::io::Result<()> {
    let rows = rows(&summarize(reports));
    let mut width: Vec<usize> = HEADER.iter().map(|h| h.chars().count()).collect();
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
            let pad = w.saturating_sub(c.chars().count());
            if i < 3 {
                s.push_str(c);
                s.push_str(&" ".repeat(pad));
            } else {
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            }
        }
        writeln!(out, "{}", s.trim_end())
    };
    writeln!(out, "\nMedians over the rounds:")?;
    line(&HEADER.map(String::from), out)?;
    for row in &rows {
        line(row, out)?;
    }
    writeln!(out, "\n{LEGEND}")
}

/// The summary of repeated rounds as a markdown section.
pub fn markdown_summary(reports: &[PhaseReport]) -> String {
    let mut s = String::from("## Medians over the rounds\n\n");
    s.push_str(&format!("| {} |\n", HEADER.join(" | ")));
    s.push_str(&format!("| --- | --- | --- |{}\n", " ---: |".repeat(10)));
    for row in rows(&summarize(reports)) {
        s.push_str(&format!("| {} |\n", row.join(" | ")));
    }
    s.push_str(&format!("\n{LEGEND}\n\n"));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_ranges() {
        let s = Spread::of([3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        let s = Spread::of([4.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (3.0, 1.0, 10.0));
        assert_eq!(Spread::of([]), None);
        assert_eq!(Spread::of([f64::NAN]), None);
        assert_eq!(Spread::of([5.0]).unwrap().show(1), "5.0 (5.0–5.0)");
    }

    #[test]
    fn rounds_rotate() {
        assert_eq!(rotation(3, 0), [0, 1, 2]);
        assert_eq!(rotation(3, 1), [1, 2, 0]);
        assert_eq!(rotation(3, 2), [2, 0, 1]);
        assert_eq!(rotation(3, 3), [0, 1, 2]);
        assert_eq!(rotation(1, 5), [0]);
    }
}
