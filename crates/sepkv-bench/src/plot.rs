//! Charts of a run (`sepkv bench --plot DIR`): grouped bar charts, one
//! group per workload and phase, one bar per engine (`throughput`,
//! `write-amp`, `space-amp`, `p99-latency`), each as an SVG file and a PNG
//! file of the same name beside it.
//!
//! An SVG's text is left to the fonts of whoever views it, so it is laid
//! out with an estimate of its size and needs no font here. A PNG's text
//! is rasterized with a TrueType font read at run time: the file named by
//! `SEPKV_PLOT_FONT`, else the first of [`FONT_PATHS`] present (DejaVu Sans
//! on Debian comes with the package `fonts-dejavu-core`). Without a usable
//! font the PNGs are skipped with a one-line warning on stderr and the SVGs
//! are still written.

use crate::error::{BenchError, Result};
use crate::report::{engines_and_phases, PhaseReport};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingErrorKind,
};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

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

/// Environment variable naming a TrueType font file for the PNG charts.
pub const FONT_ENV: &str = "SEPKV_PLOT_FONT";

/// Where the PNG charts look for a font, in order, after [`FONT_ENV`].
pub const FONT_PATHS: [&str; 9] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/usr/local/share/fonts/DejaVuSans.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
    "/Library/Fonts/Arial.ttf",
];

/// The font family of every text of a chart (the SVGs name it; the PNGs
/// draw it with the font registered under this name).
const FAMILY: &str = "sans-serif";

/// One chart: file stem, title, y axis label and the value of a report.
type Metric = (
    &'static str,
    &'static str,
    &'static str,
    fn(&PhaseReport) -> Option<f64>,
);

const METRICS: [Metric; 4] = [
    ("throughput", "Throughput", "kops/s", |r| {
        Some(r.ops_per_sec / 1000.0)
    }),
    (
        "write-amp",
        "Write amplification",
        "bytes written / user bytes",
        |r| r.write_amp,
    ),
    (
        "space-amp",
        "Space amplification",
        "database size / live bytes",
        |r| r.space_amp,
    ),
    ("p99-latency", "p99 latency", "µs", |r| {
        Some(r.latency_us.p99)
    }),
];

/// What one chart shows: a group of bars per x label, a bar per engine.
#[derive(Debug, Clone)]
struct Chart {
    title: String,
    unit: String,
    /// X labels (`workload` or `workload/phase`).
    labels: Vec<String>,
    engines: Vec<String>,
    /// Values by label (rows) and engine (columns).
    table: Vec<Vec<Option<f64>>>,
}

impl Chart {
    fn max(&self) -> f64 {
        self.table
            .iter()
            .flatten()
            .flatten()
            .fold(0.0f64, |m, &v| m.max(v))
    }

    /// Pixel size of the image.
    fn size(&self) -> (u32, u32) {
        let bars = 160 + self.labels.len() * (30 + 14 * self.engines.len());
        ((bars.max(560) + self.legend_width()) as u32, 520)
    }

    /// Width of the legend column right of the bars (a generous estimate,
    /// the same for both formats).
    fn legend_width(&self) -> usize {
        let chars = self
            .engines
            .iter()
            .map(|e| e.chars().count())
            .max()
            .unwrap_or(0);
        56 + 8 * chars
    }

    /// Height of the area below the bars holding the rotated x labels.
    fn x_label_height(&self) -> u32 {
        let chars = self
            .labels
            .iter()
            .map(|l| l.chars().count())
            .max()
            .unwrap_or(0);
        (20 + 8 * chars).clamp(60, 200) as u32
    }
}

fn plot_err(path: &Path, e: impl std::fmt::Display) -> BenchError {
    BenchError::io(path, std::io::Error::other(e.to_string()))
}

/// The charts of `reports`: one per metric that has a positive value.
fn charts(reports: &[PhaseReport]) -> Vec<(&'static str, Chart)> {
    let (engines, phases) = engines_and_phases(reports);
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
    METRICS
        .iter()
        .filter_map(|&(stem, title, unit, value)| {
            let table = phases
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
            let chart = Chart {
                title: title.to_string(),
                unit: unit.to_string(),
                labels: labels.clone(),
                engines: engines.clone(),
                table,
            };
            (!chart.labels.is_empty() && chart.max() > 0.0).then_some((stem, chart))
        })
        .collect()
}

/// Writes the charts of `reports` into `dir` (created if missing): an SVG
/// file per chart, and a PNG file beside each when a font is found (see
/// the module documentation). Returns the SVG files written.
///
/// # Errors
/// [`BenchError::Io`] when the directory or a file cannot be written.
pub fn write_plots(reports: &[PhaseReport], dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| BenchError::io(dir, e))?;
    let charts = charts(reports);
    let png = !charts.is_empty() && png_font_loaded();
    let mut written = Vec::new();
    for (stem, chart) in &charts {
        let svg = dir.join(format!("{stem}.svg"));
        write_svg(chart, &svg, FAMILY)?;
        written.push(svg);
        if png {
            write_png(chart, &dir.join(format!("{stem}.png")))?;
        }
    }
    Ok(written)
}

fn write_svg(chart: &Chart, path: &Path, family: &str) -> Result<()> {
    let backend = EstimatedText(SVGBackend::new(path, chart.size()));
    draw(chart, backend.into_drawing_area(), family).map_err(|e| plot_err(path, e))
}

fn write_png(chart: &Chart, path: &Path) -> Result<()> {
    let backend = BitMapBackend::new(path, chart.size());
    draw(chart, backend.into_drawing_area(), FAMILY).map_err(|e| plot_err(path, e))
}

/// Draws `chart` on `root`: the bars on the left, the legend on the right.
fn draw<DB: DrawingBackend>(
    chart: &Chart,
    root: DrawingArea<DB, Shift>,
    family: &str,
) -> std::result::Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let (width, _) = root.dim_in_pixel();
    let (left, right) = root.split_horizontally(width.saturating_sub(chart.legend_width() as u32));
    let n = chart.labels.len();
    let mut ctx = ChartBuilder::on(&left)
        .caption(&chart.title, (family, 22))
        .margin(12)
        .x_label_area_size(chart.x_label_height())
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..n as f64, 0f64..chart.max() * 1.1)?;
    // Ticks between the groups; the groups' labels are drawn below, as
    // plotters would center rotated labels on the axis.
    ctx.configure_mesh()
        .disable_x_mesh()
        .x_labels(n + 1)
        .x_label_formatter(&|_| String::new())
        .y_label_style((family, 12))
        .axis_desc_style((family, 14))
        .y_desc(chart.unit.as_str())
        .draw()?;
    let bar = 0.8 / chart.engines.len() as f64;
    for ei in 0..chart.engines.len() {
        let color = COLORS[ei % COLORS.len()];
        let bars = chart.table.iter().enumerate().filter_map(|(pi, row)| {
            row[ei].map(|v| {
                let x0 = pi as f64 + 0.1 + ei as f64 * bar;
                Rectangle::new([(x0, 0.0), (x0 + bar, v)], color.filled())
            })
        });
        ctx.draw_series(bars)?;
    }
    // X labels, reading downwards from just below the axis.
    let style = TextStyle::from((family, 12).into_font().transform(FontTransform::Rotate90))
        .pos(Pos::new(HPos::Left, VPos::Center));
    for (i, label) in chart.labels.iter().enumerate() {
        let (x, y) = ctx.backend_coord(&(i as f64 + 0.5, 0.0));
        left.draw(&Text::new(label.as_str(), (x, y + 8), &style))?;
    }
    draw_legend(&right, &chart.engines, family)?;
    root.present()
}

/// Draws a color key of `engines` at the top left of `area`. (Plotters'
/// own series labels measure text with the registered font, which an SVG
/// must not need.)
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    engines: &[String],
    family: &str,
) -> std::result::Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    if engines.is_empty() {
        return Ok(());
    }
    let style = TextStyle::from((family, 13)).pos(Pos::new(HPos::Left, VPos::Center));
    let mut text_width = 0;
    for e in engines {
        text_width = text_width.max(area.estimate_text_size(e, &style)?.0 as i32);
    }
    let (area_width, _) = area.dim_in_pixel();
    let (pad, swatch, line) = (8, 12, 20);
    let (x0, y0) = (4, 40);
    let x1 = (x0 + 2 * pad + swatch + 6 + text_width).min(area_width as i32 - 4);
    let y1 = y0 + 2 * pad + line * engines.len() as i32;
    area.draw(&Rectangle::new([(x0, y0), (x1, y1)], WHITE.filled()))?;
    area.draw(&Rectangle::new([(x0, y0), (x1, y1)], BLACK))?;
    for (i, engine) in engines.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let y = y0 + pad + line * i as i32 + line / 2;
        let sx = x0 + pad;
        area.draw(&Rectangle::new(
            [(sx, y - swatch / 2), (sx + swatch, y + swatch / 2)],
            color.filled(),
        ))?;
        area.draw(&Text::new(engine.as_str(), (sx + swatch + 6, y), &style))?;
    }
    Ok(())
}

/// Registers a TrueType font under [`FAMILY`] for the PNG charts, once per
/// process, and tells whether one is registered. The first call without a
/// usable font warns on stderr.
fn png_font_loaded() -> bool {
    static LOADED: OnceLock<bool> = OnceLock::new();
    *LOADED.get_or_init(|| match register_system_font() {
        Ok(_) => true,
        Err(why) => {
            eprintln!("warning: no PNG charts, SVG only: {why}");
            false
        }
    })
}

/// Registers the first usable font of `SEPKV_PLOT_FONT` and [`FONT_PATHS`]
/// and returns its file, or says why none could be.
fn register_system_font() -> std::result::Result<PathBuf, String> {
    let from_env = std::env::var_os(FONT_ENV).filter(|v| !v.is_empty());
    let candidates = from_env
        .iter()
        .map(PathBuf::from)
        .chain(FONT_PATHS.iter().map(PathBuf::from));
    let mut rejected = Vec::new();
    for path in candidates {
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if from_env.as_deref() == Some(path.as_os_str()) {
                    rejected.push(format!("{} (not found)", path.display()));
                }
                continue;
            }
            Err(e) => {
                rejected.push(format!("{} ({e})", path.display()));
                continue;
            }
        };
        // Plotters keeps the font for the life of the process; this happens
        // at most once per candidate file and process.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        match plotters::style::register_font(FAMILY, FontStyle::Normal, bytes) {
            Ok(()) => {
                if !rejected.is_empty() {
                    eprintln!(
                        "warning: PNG charts use {}: unusable: {}",
                        path.display(),
                        rejected.join(", ")
                    );
                }
                return Ok(path);
            }
            Err(_) => rejected.push(format!("{} (not a TrueType font)", path.display())),
        }
    }
    let mut why = format!(
        "no TrueType font found (set {FONT_ENV}=FILE, or install DejaVu Sans: Debian package fonts-dejavu-core)"
    );
    if !rejected.is_empty() {
        why.push_str(&format!("; unusable: {}", rejected.join(", ")));
    }
    Err(why)
}

/// A backend that estimates the size of text from its length instead of
/// asking the font, so that drawing on it needs no font file: for the SVG
/// backend, whose text the viewer renders. Everything else is passed on.
struct EstimatedText<B>(B);

impl<B: DrawingBackend> DrawingBackend for EstimatedText<B> {
    type ErrorType = B::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.0.get_size()
    }

    fn ensure_prepared(&mut self) -> std::result::Result<(), DrawingErrorKind<B::ErrorType>> {
        self.0.ensure_prepared()
    }

    fn present(&mut self) -> std::result::Result<(), DrawingErrorKind<B::ErrorType>> {
        self.0.present()
    }

    fn draw_pixel(
        &mut self,
        point: BackendCoord,
        color: BackendColor,
    ) -> std::result::Result<(), DrawingErrorKind<B::ErrorType>> {
        self.0.draw_pixel(point, color)
    }

    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> std::result::Result<(), DrawingErrorKind<B::ErrorType>> {
        self.0.draw_line(from, to, style)
    }

    fn draw_rect<S: BackendStyle>(
        &mut self,
        upper_left: BackendCoord,
        bottom_right: BackendCoord,
        style: &S,
        fill: bool,
    ) -> std::result::Result<(), DrawingErrorKind<B::ErrorType>> {
        self.0.draw_rect(upper_left, bottom_right, style, fill)
    }

    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> std::result::Result<(), DrawingErrorKind<B::ErrorType>> {
        self.0.draw_path(path, style)
    }

    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> std::result::Result<(), DrawingErrorKind<B::ErrorType>> {
        self.0.draw_circle(center, radius, style, fill)
    }

    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> std::result::Result<(), DrawingErrorKind<B::ErrorType>> {
        self.0.fill_polygon(vert, style)
    }

    fn draw_text<S: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &S,
        pos: BackendCoord,
    ) -> std::result::Result<(), DrawingErrorKind<B::ErrorType>> {
        self.0.draw_text(text, style, pos)
    }

    /// About 0.6 em per character (sans-serif fonts average a little
    /// less), one em high; unrotated, like plotters' own estimate.
    fn estimate_text_size<S: BackendTextStyle>(
        &self,
        text: &str,
        style: &S,
    ) -> std::result::Result<(u32, u32), DrawingErrorKind<B::ErrorType>> {
        let em = style.size();
        let width = 0.6 * em * text.chars().count() as f64;
        Ok((width.ceil() as u32, em.ceil() as u32))
    }

    fn blit_bitmap(
        &mut self,
        pos: BackendCoord,
        size: (u32, u32),
        src: &[u8],
    ) -> std::result::Result<(), DrawingErrorKind<B::ErrorType>> {
        self.0.blit_bitmap(pos, size, src)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart() -> Chart {
        Chart {
            title: "Throughput".into(),
            unit: "kops/s".into(),
            labels: vec![
                "fillrandom".into(),
                "ycsb-load/load".into(),
                "ycsb-a".into(),
            ],
            engines: vec![
                "sepkv:leveldb".into(),
                "fjall".into(),
                "rocksdb-blob".into(),
            ],
            table: vec![
                vec![Some(120.0), Some(80.5), Some(95.0)],
                vec![Some(60.0), None, Some(70.0)],
                vec![Some(30.0), Some(25.0), Some(0.0)],
            ],
        }
    }

    #[test]
    fn svg_needs_no_font() {
        // A family no one registers: the SVG path must never ask for it.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.svg");
        write_svg(&chart(), &path, "no-such-family").unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{svg}");
        for text in ["Throughput", "kops/s", "ycsb-load/load", "rocksdb-blob"] {
            assert!(svg.contains(text), "{text} missing from {svg}");
        }
    }

    #[test]
    fn png_beside_svg_when_a_font_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let loaded = png_font_loaded();
        let c = chart();
        let svg = dir.path().join("t.svg");
        write_svg(&c, &svg, FAMILY).unwrap();
        if !loaded {
            eprintln!("no system font: PNG not checked");
            return;
        }
        let png = dir.path().join("t.png");
        write_png(&c, &png).unwrap();
        let bytes = std::fs::read(&png).unwrap();
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"));
        // Width and height of the IHDR chunk.
        let be = |i: usize| u32::from_be_bytes(bytes[i..i + 4].try_into().unwrap());
        assert_eq!((be(16), be(20)), c.size());
    }

    #[test]
    fn no_chart_without_values() {
        assert!(charts(&[]).is_empty());
        let dir = tempfile::tempdir().unwrap();
        assert!(write_plots(&[], &dir.path().join("p")).unwrap().is_empty());
    }
}
