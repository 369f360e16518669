//! Charts of a run (`sepkv bench --plot DIR`): grouped bar charts, one
//! group per workload and phase, one bar per engine, as SVG files
//! (`throughput.svg`, `write-amp.svg`, `space-amp.svg`, `p99-latency.svg`).

use crate::error::{BenchError, Result};
use crate::report::{engines_and_phases, PhaseReport};
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// Bar colors, one per engine (cycled).
const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// One chart: file name, title, y axis label and the value of a report.
type Metric = (
    &'static str,
    &'static str,
    &'static str,
    fn(&PhaseReport) -> Option<f64>,
);

const METRICS: [Metric; 4] = [
    ("throughput.svg", "Throughput", "kops/s", |r| {
        Some(r.ops_per_sec / 1000.0)
    }),
    (
        "write-amp.svg",
        "Write amplification",
        "bytes written / user bytes",
        |r| r.write_amp,
    ),
    (
        "space-amp.svg",
        "Space amplification",
        "database size / live bytes",
        |r| r.space_amp,
    ),
    ("p99-latency.svg", "p99 latency", "µs", |r| {
        Some(r.latency_us.p99)
    }),
];

fn plot_err(path: &Path, e: impl std::fmt::Display) -> BenchError {
    BenchError::io(path, std::io::Error::other(e.to_string()))
}

/// Writes the charts of `reports` into `dir` (created if missing) and
/// returns the files written.
///
/// # Errors
/// [`BenchError::Io`] when the directory or a file cannot be written.
pub fn write_plots(reports: &[PhaseReport], dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| BenchError::io(dir, e))?;
    let (engines, phases) = engines_and_phases(reports);
    let mut written = Vec::new();
    for (file, title, unit, value) in METRICS {
        let path = dir.join(file);
        // Values by phase (rows) and engine (columns).
        let table: Vec<Vec<Option<f64>>> = phases
            .iter()
            .map(|(w, p)| {
                engines
                    .iter()
                    .map(|e| {
                        reports
                            .iter()
                            .find(|r| &r.engine == e && &r.workload == w && &r.phase == p)
                            .and_then(value)
                    })
                    .collect()
            })
            .collect();
        let max = table
            .iter()
            .flatten()
            .flatten()
            .fold(0.0f64, |m, &v| m.max(v));
        if phases.is_empty() || max <= 0.0 {
            continue;
        }
        let width = (160 + phases.len() * (30 + 14 * engines.len())).max(640) as u32;
        let root = SVGBackend::new(&path, (width, 520)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| plot_err(&path, e))?;
        let n = phases.len();
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(90)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..n as f64, 0f64..max * 1.1)
            .map_err(|e| plot_err(&path, e))?;
        let labels: Vec<String> = phases
            .iter()
            .map(|(w, p)| {
                if p == "run" {
                    w.clone()
                } else {
                    format!("{w}/{p}")
                }
            })
            .collect();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n * 2 + 1)
            .x_label_formatter(&|x| {
                let i = x.floor() as usize;
                if (x - i as f64 - 0.5).abs() < 1e-6 && i < labels.len() {
                    labels[i].clone()
                } else {
                    String::new()
                }
            })
            .x_label_style(
                ("sans-serif", 12)
                    .into_font()
                    .transform(FontTransform::Rotate90),
            )
            .y_desc(unit)
            .draw()
            .map_err(|e| plot_err(&path, e))?;
        let bar = 0.8 / engines.len() as f64;
        for (ei, engine) in engines.iter().enumerate() {
            let color = COLORS[ei % COLORS.len()];
            let bars = table.iter().enumerate().filter_map(|(pi, row)| {
                row[ei].map(|v| {
                    let x0 = pi as f64 + 0.1 + ei as f64 * bar;
                    Rectangle::new([(x0, 0.0), (x0 + bar, v)], color.filled())
                })
            });
            chart
                .draw_series(bars)
                .map_err(|e| plot_err(&path, e))?
                .label(engine.as_str())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(|e| plot_err(&path, e))?;
        root.present().map_err(|e| plot_err(&path, e))?;
        drop(chart);
        drop(root);
        written.push(path);
    }
    Ok(written)
}
