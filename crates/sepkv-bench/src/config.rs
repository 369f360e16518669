//! What to run: the workloads and the settings of a benchmark run.

use crate::error::{BenchError, Result};
use crate::gen::decimal_digits;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// A workload of the harness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// Write `num` records in key order into a fresh database.
    FillSeq,
    /// Write each of `num` records once, in random order, into a fresh
    /// database.
    FillRandom,
    /// Overwrite `ops` uniformly random records.
    Overwrite,
    /// Get `ops` uniformly random records.
    ReadRandom,
    /// Read `ops` entries in key order (wrapping around at the end).
    ReadSeq,
    /// `ops` times: seek to a uniformly random record and read
    /// `scan_length` entries.
    SeekRandom,
    /// `threads` readers doing `ops` random gets in total while one writer
    /// overwrites random records until they finish.
    ReadWhileWriting,
    /// Delete `ops` random records (each at most once while `ops <= num`).
    DeleteRandom,
    /// YCSB load phase: insert records `0..num` (YCSB keys, 1000-byte
    /// values by default) into a fresh database.
    YcsbLoad,
    /// YCSB core workload A–F (run phase) over the loaded records.
    Ycsb(char),
    /// Replay the `--trace` files into a fresh database, one phase each.
    Trace,
    /// HashKV's update-intensive experiment: load `num` records, then
    /// `phases` phases of `ops` (default `num`) Zipf-0.99 updates.
    Update,
    /// TTL-style churn into a fresh database: `phases` phases of
    /// [`CHURN_ROUNDS_PER_PHASE`] rounds; a round writes `num` keys never
    /// written before, deletes them, and runs the engine's GC four times
    /// ([`crate::engine::Engine::gc`]). Nothing stays live: what the
    /// database keeps is overhead (its size after each phase).
    Churn,
}

/// Rounds of the `churn` workload per phase.
pub const CHURN_ROUNDS_PER_PHASE: u64 = 10;

impl Workload {
    /// Every workload name, for help and error messages.
    pub const NAMES: [&'static str; 18] = [
        "fillseq",
        "fillrandom",
        "overwrite",
        "readrandom",
        "readseq",
        "seekrandom",
        "readwhilewriting",
        "deleterandom",
        "ycsb-load",
        "ycsb-a",
        "ycsb-b",
        "ycsb-c",
        "ycsb-d",
        "ycsb-e",
        "ycsb-f",
        "trace",
        "update",
        "churn",
    ];
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Workload::FillSeq => f.write_str("fillseq"),
            Workload::FillRandom => f.write_str("fillrandom"),
            Workload::Overwrite => f.write_str("overwrite"),
            Workload::ReadRandom => f.write_str("readrandom"),
            Workload::ReadSeq => f.write_str("readseq"),
            Workload::SeekRandom => f.write_str("seekrandom"),
            Workload::ReadWhileWriting => f.write_str("readwhilewriting"),
            Workload::DeleteRandom => f.write_str("deleterandom"),
            Workload::YcsbLoad => f.write_str("ycsb-load"),
            Workload::Ycsb(c) => write!(f, "ycsb-{c}"),
            Workload::Trace => f.write_str("trace"),
            Workload::Update => f.write_str("update"),
            Workload::Churn => f.write_str("churn"),
        }
    }
}

impl FromStr for Workload {
    type Err = BenchError;

    fn from_str(s: &str) -> Result<Self> {
        let w = match s.trim().to_ascii_lowercase().as_str() {
            "fillseq" => Workload::FillSeq,
            "fillrandom" => Workload::FillRandom,
            "overwrite" => Workload::Overwrite,
            "readrandom" => Workload::ReadRandom,
            "readseq" => Workload::ReadSeq,
            "seekrandom" => Workload::SeekRandom,
            "readwhilewriting" => Workload::ReadWhileWriting,
            "deleterandom" => Workload::DeleteRandom,
            "ycsb-load" => Workload::YcsbLoad,
            "trace" => Workload::Trace,
            "update" => Workload::Update,
            "churn" => Workload::Churn,
            other => match other
                .strip_prefix("ycsb-")
                .map(|l| l.chars().collect::<Vec<_>>())
            {
                Some(l) if l.len() == 1 && ('a'..='f').contains(&l[0]) => Workload::Ycsb(l[0]),
                _ => {
                    return Err(BenchError::InvalidArgument(format!(
                        "unknown workload {s:?}; expected one of: {}",
                        Workload::NAMES.join(", ")
                    )))
                }
            },
        };
        Ok(w)
    }
}

/// One entry of the workload list, with an optional operation count that
/// overrides the run's `ops` (used by the default suite).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkloadRun {
    /// The workload.
    pub workload: Workload,
    /// Operations for this workload only.
    pub ops: Option<u64>,
}

impl From<Workload> for WorkloadRun {
    fn from(workload: Workload) -> Self {
        WorkloadRun {
            workload,
            ops: None,
        }
    }
}

/// Bytes a band entry of sepkv's `bands` layout takes beyond the record's
/// key and value (see [`BenchConfig::update_band_capacity`]).
pub const BAND_ENTRY_OVERHEAD: usize = sepkv::vstore::bands::band::ENTRY_OVERHEAD;

/// Largest `--num` (records): live-byte tracking keeps 4 bytes per record.
pub const MAX_NUM: u64 = 1 << 32;

/// Settings of a benchmark run (the same for every engine). Sizes are in
/// bytes.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Workloads, run in order on one database per engine.
    pub workloads: Vec<WorkloadRun>,
    /// Records (`--num`).
    pub num: u64,
    /// Value size of the db_bench-style workloads and `update`.
    pub value_size: usize,
    /// Key size of the db_bench-style workloads and `update` (zero-padded
    /// decimal record numbers).
    pub key_size: usize,
    /// Operations per phase; `None` = `num`.
    pub ops: Option<u64>,
    /// Client threads (readers for `readwhilewriting`).
    pub threads: usize,
    /// Seed of every random choice.
    pub seed: u64,
    /// Entries read after each seek of `seekrandom`.
    pub scan_length: usize,
    /// Trace files replayed by `trace`, in order.
    pub traces: Vec<PathBuf>,
    /// Sync every write.
    pub sync: bool,
    /// Ask engines for direct I/O.
    pub direct_io: bool,
    /// The process's memory bound (`--memory-limit`, bytes; applied by the
    /// caller with [`crate::cgroup::MemoryLimit`] and recorded here for the
    /// reports).
    pub memory_limit: Option<u64>,
    /// The emulated device's bandwidth (`--device-bandwidth`, bytes per
    /// second: reads, writes; applied by the caller with
    /// [`crate::cgroup::IoLimit`] and recorded here for the reports).
    pub device_bandwidth: Option<(u64, u64)>,
    /// Update phases of `update`.
    pub phases: usize,
    /// YCSB fields per record.
    pub field_count: usize,
    /// YCSB bytes per field.
    pub field_length: usize,
    /// Show progress on stderr: bars on a terminal, else a line every 5 s.
    pub progress: bool,
    /// A share of records with small values instead of `value_size` ones
    /// (HashKV §4.4 Exp. 7's mix of small and large pairs).
    pub small_values: Option<SmallValues>,
    /// Reserve of the `update` workload's value store, as a share of the
    /// data size: sepkv's value store gets a capacity of data × (1 +
    /// reserve) (HashKV §4.1: 40 GiB plus 30 %); `None` = unbounded.
    pub reserve: Option<f64>,
    /// sepkv only: take a checkpoint this long after the database opens
    /// (`--checkpoint-after`), while the workload runs.
    pub checkpoint_after: Option<std::time::Duration>,
}

/// Records whose values are `size` bytes instead of `value_size`: a fixed
/// `share` of the record numbers, chosen by hashing them (so a record keeps
/// its size across updates).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SmallValues {
    /// Value bytes of the small records.
    pub size: usize,
    /// Share of records that are small, in [0, 1].
    pub share: f64,
}

impl std::str::FromStr for SmallValues {
    type Err = BenchError;

    fn from_str(s: &str) -> Result<Self> {
        let bad = || {
            BenchError::InvalidArgument(format!(
                "--small-values {s:?}: expected SIZE:SHARE, e.g. 24:0.5"
            ))
        };
        let (size, share) = s.split_once(':').ok_or_else(bad)?;
        Ok(SmallValues {
            size: size.trim().parse().map_err(|_| bad())?,
            share: share.trim().parse().map_err(|_| bad())?,
        })
    }
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            workloads: Vec::new(),
            num: 1_000_000,
            value_size: 100,
            key_size: 16,
            ops: None,
            threads: 1,
            seed: 1,
            scan_length: 100,
            traces: Vec::new(),
            sync: false,
            direct_io: false,
            memory_limit: None,
            device_bandwidth: None,
            phases: 3,
            field_count: 10,
            field_length: 100,
            progress: true,
            small_values: None,
            reserve: Some(0.3),
            checkpoint_after: None,
        }
    }
}

impl BenchConfig {
    /// Operations of a workload entry.
    pub fn ops_for(&self, w: &WorkloadRun) -> u64 {
        w.ops.or(self.ops).unwrap_or(self.num)
    }

    /// Value bytes of record `n` in the db_bench-style workloads and
    /// `update`.
    pub fn value_len(&self, n: u64) -> usize {
        let Some(sv) = self.small_values else {
            return self.value_size;
        };
        let u = (crate::gen::splitmix64(n ^ self.seed.rotate_left(17)) >> 11) as f64;
        if u / ((1u64 << 53) as f64) < sv.share {
            sv.size
        } else {
            self.value_size
        }
    }

    /// Mean value bytes per record (bytes).
    pub fn mean_value_len(&self) -> f64 {
        match self.small_values {
            Some(sv) => sv.share * sv.size as f64 + (1.0 - sv.share) * self.value_size as f64,
            None => self.value_size as f64,
        }
    }

    /// The `update` workload's value-store sizing: `(capacity in bytes,
    /// share of it reserved)` for data of `num` records, or `None` without
    /// a reserve. HashKV's reserved space is then exactly the reserve and
    /// its main segments hold the data.
    pub fn update_capacity(&self) -> Option<(u64, f64)> {
        let r = self.reserve?;
        let data = self.num as f64 * (self.key_size as f64 + self.mean_value_len());
        Some(((data * (1.0 + r)).ceil() as u64, r / (1.0 + r)))
    }

    /// The `update` workload's bound for sepkv's `bands` layout: the data
    /// counted in the bytes its band entries take (each record's key and
    /// value plus the entry's fixed
    /// [`BAND_ENTRY_OVERHEAD`] bytes of header and previous-version
    /// address) times `1 + reserve`, so that the reserve is the room band
    /// GC works in, as FlashKey's capacity is `live × (1 + OP)`. `None`
    /// without a reserve.
    pub fn update_band_capacity(&self) -> Option<u64> {
        let r = self.reserve?;
        let entry = self.key_size as f64 + self.mean_value_len() + BAND_ENTRY_OVERHEAD as f64;
        Some((self.num as f64 * entry * (1.0 + r)).ceil() as u64)
    }

    /// Checks the settings.
    ///
    /// # Errors
    /// [`BenchError::InvalidArgument`] naming the first bad setting.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(BenchError::InvalidArgument(m));
        if self.workloads.is_empty() {
            return bad("no workload given".into());
        }
        if self.num == 0 || self.num > MAX_NUM {
            return bad(format!(
                "--num {} must be between 1 and {MAX_NUM}",
                self.num
            ));
        }
        let digits = decimal_digits(self.num - 1);
        if self.key_size < digits || self.key_size > 65_536 {
            return bad(format!(
                "--key-size {} must be between {digits} (the digits of the largest record number) and 65536",
                self.key_size
            ));
        }
        if self.value_size > 32 << 20 {
            return bad(format!("--value-size {} exceeds 32 MiB", self.value_size));
        }
        if let Some(sv) = self.small_values {
            if sv.size > 32 << 20 || !(0.0..=1.0).contains(&sv.share) {
                return bad(format!(
                    "--small-values {}:{}: the size must be at most 32 MiB and the share in [0, 1]",
                    sv.size, sv.share
                ));
            }
        }
        if let Some(r) = self.reserve {
            if !(r > 0.0 && r <= 10.0) {
                return bad(format!("--reserve {r} must be in (0, 10] (or none)"));
            }
        }
        if !(1..=1024).contains(&self.threads) {
            return bad(format!(
                "--threads {} must be between 1 and 1024",
                self.threads
            ));
        }
        if self.scan_length == 0 || self.scan_length > 1 << 24 {
            return bad(format!(
                "--scan-length {} must be between 1 and 16777216",
                self.scan_length
            ));
        }
        if !(1..=1000).contains(&self.phases) {
            return bad(format!(
                "--phases {} must be between 1 and 1000",
                self.phases
            ));
        }
        if self.field_count == 0 || self.field_count * self.field_length > 32 << 20 {
            return bad("--field-count must be at least 1 and a record at most 32 MiB".into());
        }
        let has_trace = self.workloads.iter().any(|w| w.workload == Workload::Trace);
        if has_trace && self.traces.is_empty() {
            return bad("the trace workload needs --trace FILE[,FILE...]".into());
        }
        if !has_trace && !self.traces.is_empty() {
            return bad("--trace was given but no trace workload is in --workload".into());
        }
        for w in &self.workloads {
            if w.workload != Workload::Trace && self.ops_for(w) == 0 {
                return bad(format!("--ops for {} must be at least 1", w.workload));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workload_names_round_trip() {
        for n in Workload::NAMES {
            let w: Workload = n.parse().unwrap();
            assert_eq!(w.to_string(), n);
        }
        assert!("ycsb-g".parse::<Workload>().is_err());
        assert!("ycsb-".parse::<Workload>().is_err());
        assert!("fill".parse::<Workload>().is_err());
    }

    #[test]
    fn validation_catches_bad_settings() {
        let mut c = BenchConfig {
            workloads: vec![Workload::FillSeq.into()],
            num: 1000,
            ..BenchConfig::default()
        };
        c.validate().unwrap();
        c.key_size = 2;
        assert!(c.validate().is_err());
        c.key_size = 16;
        c.workloads = vec![Workload::Trace.into()];
        assert!(c.validate().is_err());
        c.traces = vec!["x".into()];
        c.validate().unwrap();
        c.threads = 0;
        assert!(c.validate().is_err());
    }

    #[test]
    fn small_value_mix_and_update_capacity() {
        let mut c = BenchConfig {
            num: 10_000,
            value_size: 1000,
            small_values: Some("24:0.25".parse().unwrap()),
            ..BenchConfig::default()
        };
        let small = (0..c.num).filter(|&n| c.value_len(n) == 24).count();
        assert!((2200..2800).contains(&small), "{small} small records");
        let (cap, reserved) = c.update_capacity().unwrap();
        let data = 10_000.0 * (16.0 + 0.25 * 24.0 + 0.75 * 1000.0);
        assert_eq!(cap, (data * 1.3f64).ceil() as u64);
        assert!((reserved - 0.3 / 1.3).abs() < 1e-12);
        // The bands' bound counts each entry's own bytes too.
        let entries = 10_000.0 * (16.0 + 0.25 * 24.0 + 0.75 * 1000.0 + 42.0);
        assert_eq!(
            c.update_band_capacity(),
            Some((entries * 1.3f64).ceil() as u64)
        );
        c.reserve = None;
        assert_eq!(c.update_capacity(), None);
        assert_eq!(c.update_band_capacity(), None);
        assert!("24".parse::<SmallValues>().is_err());
        c.small_values = Some(SmallValues {
            size: 24,
            share: 1.5,
        });
        assert!(c.validate().is_err());
    }
}
