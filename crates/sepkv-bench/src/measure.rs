//! Measurement primitives: latency histograms, the process's I/O counters
//! (`/proc/self/io`) and the allocated size of a directory tree.

use hdrhistogram::Histogram;
use std::path::Path;
use std::time::Instant;

/// Latencies of one phase, recorded in nanoseconds with three significant
/// digits (hdrhistogram; the range grows as needed).
#[derive(Clone)]
pub struct Latencies {
    hist: Histogram<u64>,
}

impl Default for Latencies {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Latencies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Latencies")
            .field("count", &self.hist.len())
            .finish()
    }
}

impl Latencies {
    /// An empty histogram.
    pub fn new() -> Self {
        // 3 significant digits with auto-resize cannot fail.
        let mut hist =
            Histogram::new(3).unwrap_or_else(|_| unreachable!("3 significant digits are valid"));
        hist.auto(true);
        Latencies { hist }
    }

    /// Records one operation that started at `start` and ends now.
    #[inline]
    pub fn record_since(&mut self, start: Instant) {
        self.record_ns(start.elapsed().as_nanos().min(u64::MAX as u128) as u64);
    }

    /// Records one latency of `ns` nanoseconds.
    #[inline]
    pub fn record_ns(&mut self, ns: u64) {
        // With auto-resize, recording only fails for values hdrhistogram
        // cannot represent at all; clamp rather than lose the sample.
        if self.hist.record(ns.max(1)).is_err() {
            let _ = self.hist.record(self.hist.high());
        }
    }

    /// Records `count` operations of `ns` nanoseconds each.
    pub fn record_n(&mut self, ns: u64, count: u64) {
        if count > 0 && self.hist.record_n(ns.max(1), count).is_err() {
            let _ = self.hist.record_n(self.hist.high(), count);
        }
    }

    /// Adds another histogram's samples.
    pub fn merge(&mut self, other: &Latencies) {
        let _ = self.hist.add(&other.hist);
    }

    /// Number of samples.
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// Percentiles and maximum in microseconds.
    pub fn summary(&self) -> LatencySummary {
        if self.hist.is_empty() {
            return LatencySummary::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        LatencySummary {
            p50: us(self.hist.value_at_quantile(0.50)),
            p99: us(self.hist.value_at_quantile(0.99)),
            p999: us(self.hist.value_at_quantile(0.999)),
            p9999: us(self.hist.value_at_quantile(0.9999)),
            p99999: (self.hist.len() >= P99999_MIN_OPS)
                .then(|| us(self.hist.value_at_quantile(0.99999))),
            max: us(self.hist.max()),
            mean: self.hist.mean() / 1000.0,
        }
    }
}

/// Fewest samples from which a p99.999 is reported: below a million, the
/// 99.999th percentile rests on fewer than ten samples and is noise.
pub const P99999_MIN_OPS: u64 = 1_000_000;

/// Latency percentiles of a phase, in microseconds (µs).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LatencySummary {
    /// Median (µs).
    pub p50: f64,
    /// 99th percentile (µs).
    pub p99: f64,
    /// 99.9th percentile (µs).
    pub p999: f64,
    /// 99.99th percentile (µs).
    pub p9999: f64,
    /// 99.999th percentile (µs); `None` (JSON `null`) for a phase of fewer
    /// than [`P99999_MIN_OPS`] operations, where it is not meaningful.
    #[serde(default)]
    pub p99999: Option<f64>,
    /// Largest (µs).
    pub max: f64,
    /// Mean (µs).
    pub mean: f64,
}

/// The process's storage I/O counters from `/proc/self/io` (bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProcIo {
    /// Bytes the process caused to be read from storage (page-cache hits
    /// are not counted).
    pub read_bytes: u64,
    /// Bytes the process caused to be sent to storage (counted when pages
    /// are dirtied).
    pub write_bytes: u64,
    /// Dirtied bytes that were never written because their file was
    /// truncated or deleted first.
    pub cancelled_write_bytes: u64,
}

impl ProcIo {
    /// Reads `/proc/self/io`; `None` where it is missing or unreadable.
    pub fn read() -> Option<ProcIo> {
        let text = std::fs::read_to_string("/proc/self/io").ok()?;
        Self::parse(&text)
    }

    /// Parses the text of `/proc/self/io`.
    pub fn parse(text: &str) -> Option<ProcIo> {
        let mut io = ProcIo::default();
        let mut seen = 0;
        for line in text.lines() {
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            let Ok(v) = value.trim().parse::<u64>() else {
                continue;
            };
            match name.trim() {
                "read_bytes" => io.read_bytes = v,
                "write_bytes" => io.write_bytes = v,
                "cancelled_write_bytes" => io.cancelled_write_bytes = v,
                _ => continue,
            }
            seen += 1;
        }
        (seen == 3).then_some(io)
    }

    /// The counts since `before` (saturating).
    pub fn since(&self, before: &ProcIo) -> ProcIo {
        ProcIo {
            read_bytes: self.read_bytes.saturating_sub(before.read_bytes),
            write_bytes: self.write_bytes.saturating_sub(before.write_bytes),
            cancelled_write_bytes: self
                .cancelled_write_bytes
                .saturating_sub(before.cancelled_write_bytes),
        }
    }

    /// Written bytes that reached (or will reach) storage:
    /// `write_bytes - cancelled_write_bytes`.
    pub fn net_written(&self) -> u64 {
        self.write_bytes.saturating_sub(self.cancelled_write_bytes)
    }
}

/// Bytes allocated on the device for every file under `path` (the sum of
/// `st_blocks * 512`, like `du`); symbolic links are not followed.
///
/// # Errors
/// The first metadata or directory-listing error, except files that vanish
/// while the tree is walked (an engine deleting obsolete files).
pub fn dir_allocated_bytes(path: &Path) -> std::io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut total = meta.blocks() * 512;
    if meta.is_dir() {
        for entry in std::fs::read_dir(path)? {
            let entry = match entry {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            total += dir_allocated_bytes(&entry.path())?;
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_io() {
        let t = "rchar: 1\nwchar: 2\nsyscr: 3\nsyscw: 4\nread_bytes: 4096\nwrite_bytes: 8192\ncancelled_write_bytes: 512\n";
        let io = ProcIo::parse(t).unwrap();
        assert_eq!(
            io,
            ProcIo {
                read_bytes: 4096,
                write_bytes: 8192,
                cancelled_write_bytes: 512
            }
        );
        assert_eq!(io.net_written(), 7680);
        assert!(ProcIo::parse("rchar: 1\n").is_none());
    }

    #[test]
    fn latency_percentiles_in_micros() {
        let mut l = Latencies::new();
        for i in 1..=1000u64 {
            l.record_ns(i * 1000);
        }
        let s = l.summary();
        assert!((s.p50 - 500.0).abs() < 1.0, "{s:?}");
        assert!((s.max - 1000.0).abs() < 1.0, "{s:?}");
        assert_eq!(l.count(), 1000);
        assert_eq!(s.p99999, None, "not meaningful below a million");
    }

    #[test]
    fn p99999_from_a_million_operations() {
        let mut l = Latencies::new();
        l.record_n(10_000, P99999_MIN_OPS - 20);
        l.record_n(5_000_000, 20);
        let s = l.summary();
        assert!((s.p9999 - 10.0).abs() < 0.1, "{s:?}");
        let p = s.p99999.expect("a million operations");
        assert!((p - 5000.0).abs() < 5.0, "{s:?}");
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains("\"p99999\":"), "{json}");
        // Reports written before the field existed still load.
        let old: LatencySummary = serde_json::from_str(
            r#"{"p50":1.0,"p99":2.0,"p999":3.0,"p9999":4.0,"max":5.0,"mean":1.5}"#,
        )
        .unwrap();
        assert_eq!(old.p99999, None);
    }

    #[test]
    fn allocated_size_counts_blocks() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a"), vec![1u8; 10_000]).unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("sub/b"), vec![1u8; 5000]).unwrap();
        let n = dir_allocated_bytes(d.path()).unwrap();
        assert!(n >= 15_000, "{n}");
        assert_eq!(dir_allocated_bytes(&d.path().join("missing")).unwrap(), 0);
    }
}
