//! The engine specs of the command line (`sepkv:<preset>`), the factories
//! that open them, and the sepkv implementation of the [`Engine`] trait.
//!
//! The trait itself and its plain types live in [`crate::contract`], which
//! the peers (`peers/`) implement without importing this module; they are
//! re-exported here. Peers (RocksDB, fjall, ...) plug in by implementing
//! [`Engine`] and [`EngineFactory`] and adding a case to [`EngineSpec`].

pub use crate::contract::{
    chunk_kind, BatchOp, Chunk, ChunkOp, ChunkOutcome, Engine, EngineFactory, EngineIo,
    EngineOptions, EngineStats, ScanResult,
};
use crate::error::{BenchError, Result};
use crate::measure::dir_allocated_bytes;
use crate::peers::fjall::FjallEngine;
use sepkv::fs::IoCategory;
use sepkv::{Db, Options, Preset, WriteBatch, WriteOptions};
use serde_json::json;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// An engine named on the command line: `sepkv:<preset>` (or `sepkv`,
/// meaning `sepkv:leveldb`), `fjall`, `fjall-kv`, `rocksdb`,
/// `rocksdb-blob`, `leveldb` (Google's LevelDB, not the sepkv preset),
/// `badger`, `badger-kv`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineSpec {
    /// sepkv with one of its presets, plus tuning flags
    /// (`sepkv:wisckey+nowal+noprefetch`).
    Sepkv(Preset, Tuning),
    /// fjall 3.x; `kv`: key-value separation (`fjall-kv`).
    Fjall {
        /// Key-value separation with a 128-byte threshold.
        kv: bool,
    },
    /// RocksDB (cargo feature `rocksdb`, release builds); `blob`:
    /// integrated BlobDB (`rocksdb-blob`).
    RocksDb {
        /// Blob files for values of at least 128 bytes, with blob GC.
        blob: bool,
    },
    /// Google's LevelDB 1.22 (cargo feature `leveldb`, release builds).
    LevelDb,
    /// Badger v4 (cargo feature `badger`, release builds); `kv`: value
    /// threshold 128 B (`badger-kv`) instead of Badger's default 1 MiB.
    Badger {
        /// Values of at least 128 bytes in Badger's value log.
        kv: bool,
    },
}

/// Flags that vary a sepkv preset, written `+flag` after the preset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tuning {
    /// `+nowal`: the value log replaces the index WAL (WiscKey §3.4.2).
    pub no_wal: bool,
    /// `+noprefetch`: scans read values one by one (no parallel prefetch).
    pub no_prefetch: bool,
    /// `+nohot`: HashKV without hotness awareness (§3.4; Exp. 6).
    pub no_hotness: bool,
    /// `+nojournal`: HashKV without its write journal, which records the segments writes and
    /// GC copies allocate (§3.7; Exp. 8): the segment table is checkpointed at every allocation.
    pub no_journal: bool,
    /// `+jvalues`: HashKV's write journal carries the values as well, behind its write cache
    /// (§3.2): every value written twice, one journal fsync per sync.
    pub journal_values: bool,
    /// `+nosep`: every value is separated, none kept inline
    /// (`value_threshold` 1; selective separation off, HashKV §3.5, Exp. 7).
    pub no_selective: bool,
    /// `+diskhash`: FlashKey's hash table on disk behind its bounded page
    /// cache rather than in memory (§V-A1).
    pub disk_hash: bool,
    /// `+lwc`: the LWC-tree index (lightweight compaction) under the
    /// preset's value layout, e.g. `sepkv:wisckey+lwc` = lwc + vlog.
    pub lwc_index: bool,
    /// `+wide`: the LWC-tree's DTables take twice the default segments
    /// and bytes before equal division (`lwc_max_segments` = 2 × the level
    /// ratio, `lwc_max_table_bytes` = 8 × `target_file_size`): fewer
    /// divisions and less compaction I/O, more index blocks per lookup.
    pub wide_dtables: bool,
    /// `+pushdown`: full DTables are pushed down a level instead of
    /// divided in their own (`lwc_push_down`).
    pub push_down: bool,
    /// `+divN`: `lwc_division_number` = N (§4.4; the paper's Fig. 19
    /// sweeps 2–16).
    pub division_number: Option<u8>,
    /// `+segN`: `lwc_max_segments` = N (2-1024): fewer segments per DTable
    /// mean fewer cursors per scan and more divisions.
    pub max_segments: Option<u16>,
    /// `+deadN`: `lwc_dead_share` = N % (5-100): a DTable whose dead
    /// bytes would pass N % of it with an append is merged instead; 100
    /// never.
    pub dead_percent: Option<u8>,
    /// `+seekN`: `lwc_seek_merge_bytes` = N (bytes of a DTable per read
    /// charge before its segments are merged; 0 turns seek merges off).
    pub seek_merge_bytes: Option<u32>,
    /// `+nosort`: KT-Store's sealed TrieTables stay in write order
    /// (`trie_sort_sealed` off), one of the paper's rules (§3.2); adaptive
    /// and skew splits stay on, so this is not the paper's layout alone.
    pub no_sort: bool,
    /// `+noroll`: a KT-Store leaf keeps one TrieTable until it splits
    /// (`trie_roll_size` = `trie_table_size`), one of the paper's rules
    /// (§3.2); adaptive and skew splits stay on.
    pub no_roll: bool,
    /// `+paper`: the layout as its paper describes it, through public
    /// options. For the LWC-tree index, the paper's bounds (§4.4, §5.1),
    /// scaled: a DTable is bounded by its band alone (no segment bound;
    /// the band is `lwc_max_table_bytes`' default, 4 × `target_file_size`,
    /// for the paper's 40 MB) and a full one is divided into the level
    /// ratio's number of parts. For KT-Store's TrieTables: no sorting of sealed tables (§3.2), no rolling (one table
    /// per leaf, §3.2), no skew splits, each table's whole span from the
    /// least to the greatest requested offset read once per range query
    /// (§3.3: span density floors 0, spans up to 1 GiB, not cut for
    /// parallel reads), no parallel reads (`prefetch_threads` 0) and a
    /// trie of [`PAPER_TRIE_LEVELS`] fixed levels (§3.5,
    /// `trie_fixed_levels`): leaves never split; a full table is sealed
    /// and a new one begun in its leaf.
    pub paper: bool,
    /// `+align`: data blocks of SSTables and DTables start on 4 KiB
    /// boundaries and fit their pages (`block_align`).
    pub block_align: bool,
    /// `+opX`: `band_over_provisioning` = X (FlashKey's over-provisioning),
    /// kept in thousandths.
    pub over_provisioning_milli: Option<u32>,
    /// `+saX`: `space_amp_target` = X, kept in thousandths.
    pub space_target_milli: Option<u32>,
    /// `+ckptN`: `hash_checkpoint_bands` = N (FlashKey's hash-table
    /// checkpoint interval, in closed bands).
    pub checkpoint_bands: Option<u32>,
    /// `+batchM`: `scan_batch_bytes` = M MiB (values a limited scan
    /// resolves in one batch).
    pub scan_batch_mib: Option<u32>,
    /// `+pipeM`: `trie_scan_pipeline` = M MiB (a limited scan's read
    /// pipeline budget; 0 = off).
    pub scan_pipeline_mib: Option<u32>,
    /// `+buffered`: `trie_scan_direct` off (the scan pipeline's spans are
    /// read through the page cache).
    pub scan_buffered: bool,
    /// `+nomap`: `trie_mapped_appends` off (TrieTables appended with a
    /// `write(2)` each).
    pub no_map: bool,
}

/// Parses the X of `+opX` or `+saX` into thousandths.
fn milli(flag: &str, x: &str) -> Result<u32> {
    match x.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 1000.0 => Ok((v * 1000.0).round() as u32),
        _ => Err(BenchError::InvalidArgument(format!(
            "+{flag}{x}: expected a positive number such as +{flag}0.3"
        ))),
    }
}

/// Fixed trie levels `+paper` gives KT-Store (`trie_fixed_levels`). The
/// paper does not say how many it uses; four spread the harness's keys
/// (16 zero-padded digits, so the shared zeros are one compressed edge)
/// over hundreds of leaves at 10^5–10^6 keys, and YCSB's `user` + digits
/// over about 900 (three digits below `user`).
pub const PAPER_TRIE_LEVELS: u8 = 4;

/// The `+flag`s of [`Tuning`] and what each does, for `--list-engines`.
pub const TUNING_HELP: [(&str, &str); 25] = [
    (
        "+nowal",
        "the value log replaces the index WAL (WiscKey §3.4.2)",
    ),
    ("+noprefetch", "scans read values one by one"),
    ("+nohot", "HashKV without hotness awareness (§3.4)"),
    (
        "+nojournal",
        "HashKV without its write journal (§3.7): table checkpoints instead",
    ),
    (
        "+jvalues",
        "HashKV's journal carries the values behind its write cache (§3.2)",
    ),
    ("+nosep", "every value separated (value_threshold 1)"),
    (
        "+diskhash",
        "FlashKey's hash table on disk behind its page cache",
    ),
    ("+lwc", "the LWC-tree index under the preset's value layout"),
    (
        "+wide",
        "LWC-tree DTables take 2x the segments and bytes before division",
    ),
    (
        "+pushdown",
        "full LWC-tree DTables pushed down a level instead of divided",
    ),
    (
        "+divN",
        "LWC-tree division number N (2-64): a full DTable divided into N equal parts",
    ),
    (
        "+segN",
        "LWC-tree DTables hold at most N segments (2-1024) before division",
    ),
    (
        "+deadN",
        "LWC-tree DTables merged once N % (5-100) of their bytes would be dead after an append; 100: never",
    ),
    (
        "+seekN",
        "LWC-tree seek merges after a DTable's size / N read charges (extra segments a read consulted); 0: off",
    ),
    (
        "+nosort",
        "sealed TrieTables stay in write order (as KT-Store §3.2; splits stay adaptive)",
    ),
    (
        "+noroll",
        "a KT-Store leaf keeps one TrieTable until it splits (as §3.2; splits stay adaptive)",
    ),
    (
        "+paper",
        "the layout as its paper: KT-Store with 4 fixed trie levels, without sorting, rolling or \
         adaptive splits, whole spans once, serial reads; the LWC-tree's bounds scaled (a 16 MiB band per DTable, no segment bound, \
         division into 10)",
    ),
    (
        "+align",
        "index data blocks start on 4 KiB boundaries and fit their pages",
    ),
    (
        "+opX",
        "band_over_provisioning X: the bands held to 1 + X bytes per live byte",
    ),
    (
        "+ckptN",
        "hash_checkpoint_bands N: FlashKey checkpoints its hash table every N closed bands",
    ),
    (
        "+batchM",
        "scan_batch_bytes M MiB: values a limited scan resolves in one batch",
    ),
    (
        "+buffered",
        "KT-Store's scan pipeline reads spans through the page cache (trie_scan_direct off)",
    ),
    (
        "+nomap",
        "KT-Store's TrieTables appended with a write(2) each, not through mappings (trie_mapped_appends off)",
    ),
    (
        "+pipeM",
        "trie_scan_pipeline M MiB: memory budget of a limited scan's read pipeline (0 = off)",
    ),
    (
        "+saX",
        "space_amp_target X (for flashkey: the bands' bound when tighter)",
    ),
];

impl fmt::Display for Tuning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.no_wal {
            f.write_str("+nowal")?;
        }
        if self.no_prefetch {
            f.write_str("+noprefetch")?;
        }
        if self.no_hotness {
            f.write_str("+nohot")?;
        }
        if self.no_journal {
            f.write_str("+nojournal")?;
        }
        if self.journal_values {
            f.write_str("+jvalues")?;
        }
        if self.no_selective {
            f.write_str("+nosep")?;
        }
        if self.disk_hash {
            f.write_str("+diskhash")?;
        }
        if self.lwc_index {
            f.write_str("+lwc")?;
        }
        if self.wide_dtables {
            f.write_str("+wide")?;
        }
        if self.push_down {
            f.write_str("+pushdown")?;
        }
        if let Some(n) = self.division_number {
            write!(f, "+div{n}")?;
        }
        if let Some(n) = self.max_segments {
            write!(f, "+seg{n}")?;
        }
        if let Some(n) = self.dead_percent {
            write!(f, "+dead{n}")?;
        }
        if let Some(n) = self.seek_merge_bytes {
            write!(f, "+seek{n}")?;
        }
        if self.no_sort {
            f.write_str("+nosort")?;
        }
        if self.no_roll {
            f.write_str("+noroll")?;
        }
        if self.paper {
            f.write_str("+paper")?;
        }
        if self.block_align {
            f.write_str("+align")?;
        }
        if let Some(m) = self.over_provisioning_milli {
            write!(f, "+op{}", m as f64 / 1000.0)?;
        }
        if let Some(m) = self.space_target_milli {
            write!(f, "+sa{}", m as f64 / 1000.0)?;
        }
        if let Some(n) = self.checkpoint_bands {
            write!(f, "+ckpt{n}")?;
        }
        if let Some(m) = self.scan_batch_mib {
            write!(f, "+batch{m}")?;
        }
        if let Some(m) = self.scan_pipeline_mib {
            write!(f, "+pipe{m}")?;
        }
        if self.scan_buffered {
            f.write_str("+buffered")?;
        }
        if self.no_map {
            f.write_str("+nomap")?;
        }
        Ok(())
    }
}

/// Peer engine specs and what they are.
const PEERS: [(&str, EngineSpec, &str); 7] = [
    (
        "fjall",
        EngineSpec::Fjall { kv: false },
        "fjall 3.x LSM-tree, no compression, 32 MiB cache",
    ),
    (
        "fjall-kv",
        EngineSpec::Fjall { kv: true },
        "fjall 3.x with key-value separation at 128 B, blob GC in compactions (staleness 0.5)",
    ),
    (
        "rocksdb",
        EngineSpec::RocksDb { blob: false },
        "RocksDB 7.8/7.9 (rocksdb crate 0.20: the system library or the bundled build), leveled, no compression, 32 MiB block cache",
    ),
    (
        "rocksdb-blob",
        EngineSpec::RocksDb { blob: true },
        "RocksDB integrated BlobDB, min_blob_size 128 B, blob GC on",
    ),
    (
        "leveldb",
        EngineSpec::LevelDb,
        "LevelDB 1.22 (C++, bundled), no compression, 32 MiB block cache",
    ),
    (
        "badger",
        EngineSpec::Badger { kv: false },
        "Badger v4 (Go, in-process), default ValueThreshold (1 MiB: values stay in its LSM-tree), no compression",
    ),
    (
        "badger-kv",
        EngineSpec::Badger { kv: true },
        "Badger v4 with ValueThreshold 128 B (values in its value log), value-log GC every second and at each phase's flush",
    ),
];

/// Why this build cannot run a native peer built behind a cargo feature, if
/// it cannot: the feature is off (`not_built` says how to build it), or
/// this is a debug build (the peer would be measured unoptimised).
fn native_peer_unavailable(built: bool, not_built: &'static str) -> Option<&'static str> {
    if !built {
        Some(not_built)
    } else if cfg!(debug_assertions) {
        Some("built, but refuses to run in a debug build: use --release")
    } else {
        None
    }
}

/// Why this build cannot run LevelDB, if it cannot.
fn leveldb_unavailable() -> Option<&'static str> {
    native_peer_unavailable(
        cfg!(feature = "leveldb"),
        "not built: rebuild with `--release --features leveldb` (with CC=clang CXX=clang++: LevelDB 1.22's build fails under GCC)",
    )
}

/// Why this build cannot run Badger, if it cannot.
fn badger_unavailable() -> Option<&'static str> {
    native_peer_unavailable(
        cfg!(feature = "badger"),
        "not built: rebuild with `--release --features badger` (needs Go 1.24 or newer)",
    )
}

/// Why this build cannot run RocksDB, if it cannot.
fn rocksdb_unavailable() -> Option<&'static str> {
    native_peer_unavailable(
        cfg!(feature = "rocksdb"),
        "not built: rebuild with `--release --features rocksdb`",
    )
}

impl EngineSpec {
    /// Every spec with whether this build can run it and a remark.
    pub fn catalogue() -> Vec<(String, bool, String)> {
        let mut v: Vec<_> = Preset::ALL
            .iter()
            .map(|&p| {
                let (index, layout) = p.axes();
                let avail = p.is_available();
                let note = if avail {
                    format!("index {index}, value layout {layout}")
                } else {
                    format!("index {index}, value layout {layout}: not implemented in this build of sepkv")
                };
                (format!("sepkv:{p}"), avail, note)
            })
            .collect();
        for (name, spec, what) in PEERS {
            let why = match spec {
                EngineSpec::RocksDb { .. } => rocksdb_unavailable(),
                EngineSpec::LevelDb => leveldb_unavailable(),
                EngineSpec::Badger { .. } => badger_unavailable(),
                _ => None,
            };
            v.push((
                name.to_string(),
                why.is_none(),
                match why {
                    Some(why) => format!("{what}: {why}"),
                    None => what.to_string(),
                },
            ));
        }
        v
    }

    /// Every spec this build can run with its default configuration: the
    /// available sepkv presets, then the available peers.
    pub fn available() -> Vec<EngineSpec> {
        let mut v: Vec<_> = Preset::ALL
            .iter()
            .filter(|p| p.is_available())
            .map(|&p| EngineSpec::Sepkv(p, Tuning::default()))
            .collect();
        v.extend(
            PEERS
                .iter()
                .map(|(_, s, _)| *s)
                .filter(|s| s.check_available().is_ok()),
        );
        v
    }

    /// Fails with a clear message when this build cannot run the spec.
    pub fn check_available(&self) -> Result<()> {
        match self {
            EngineSpec::Fjall { .. } => Ok(()),
            EngineSpec::RocksDb { .. } => match rocksdb_unavailable() {
                None => Ok(()),
                Some(why) => Err(BenchError::Unavailable(format!("engine {self}: {why}"))),
            },
            EngineSpec::LevelDb => match leveldb_unavailable() {
                None => Ok(()),
                Some(why) => Err(BenchError::Unavailable(format!("engine {self}: {why}"))),
            },
            EngineSpec::Badger { .. } => match badger_unavailable() {
                None => Ok(()),
                Some(why) => Err(BenchError::Unavailable(format!("engine {self}: {why}"))),
            },
            EngineSpec::Sepkv(p, t) if p.is_available() => {
                // A tuning may give the preset's layout an index it does not
                // take (`+lwc` under the bands).
                let mut o = Options::preset(*p);
                if t.lwc_index {
                    o.index = Some(sepkv::IndexKind::Lwc);
                }
                let lwc_flag = if t.wide_dtables {
                    Some("+wide")
                } else if t.push_down {
                    Some("+pushdown")
                } else if t.division_number.is_some() {
                    Some("+divN")
                } else if t.max_segments.is_some() {
                    Some("+segN")
                } else if t.dead_percent.is_some() {
                    Some("+deadN")
                } else if t.seek_merge_bytes.is_some() {
                    Some("+seekN")
                } else {
                    None
                };
                if let Some(flag) = lwc_flag {
                    if o.index.unwrap_or(p.axes().0) != sepkv::IndexKind::Lwc {
                        return Err(BenchError::Unavailable(format!(
                            "engine {self} is unavailable: {flag} concerns the LWC-tree's \
                             DTables; use it with sepkv:lwc or with +lwc"
                        )));
                    }
                }
                let lwc = o.index.unwrap_or(p.axes().0) == sepkv::IndexKind::Lwc;
                if t.paper && !lwc && o.layout() != sepkv::ValueLayout::Trie {
                    return Err(BenchError::Unavailable(format!(
                        "engine {self} is unavailable: +paper is the paper configuration of \
                         KT-Store and of the LWC-tree; use it with sepkv:ktstore or sepkv:lwc"
                    )));
                }
                if (t.no_sort || t.no_roll || t.scan_buffered || t.no_map)
                    && o.layout() != sepkv::ValueLayout::Trie
                {
                    let flag = if t.no_sort {
                        "+nosort"
                    } else if t.no_roll {
                        "+noroll"
                    } else if t.no_map {
                        "+nomap"
                    } else {
                        "+buffered"
                    };
                    return Err(BenchError::Unavailable(format!(
                        "engine {self} is unavailable: {flag} concerns KT-Store's TrieTables; \
                         use it with sepkv:ktstore"
                    )));
                }
                o.validate().map_err(|e| {
                    BenchError::Unavailable(format!("engine {self} is unavailable: {e}"))
                })
            }
            EngineSpec::Sepkv(p, _) => {
                let avail: Vec<_> = Preset::ALL
                    .iter()
                    .filter(|p| p.is_available())
                    .map(|p| format!("sepkv:{p}"))
                    .collect();
                Err(BenchError::Unavailable(format!(
                    "engine sepkv:{p} is unavailable: preset {p} ({} + {}) is not implemented in this build of sepkv; available: {}",
                    p.axes().0,
                    p.axes().1,
                    avail.join(", ")
                )))
            }
        }
    }
}

impl fmt::Display for EngineSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineSpec::Sepkv(p, t) => write!(f, "sepkv:{p}{t}"),
            EngineSpec::Fjall { kv: false } => f.write_str("fjall"),
            EngineSpec::Fjall { kv: true } => f.write_str("fjall-kv"),
            EngineSpec::RocksDb { blob: false } => f.write_str("rocksdb"),
            EngineSpec::RocksDb { blob: true } => f.write_str("rocksdb-blob"),
            EngineSpec::LevelDb => f.write_str("leveldb"),
            EngineSpec::Badger { kv: false } => f.write_str("badger"),
            EngineSpec::Badger { kv: true } => f.write_str("badger-kv"),
        }
    }
}

impl FromStr for EngineSpec {
    type Err = BenchError;

    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim();
        let (kind, config) = match s.split_once(':') {
            Some((k, c)) => (k, Some(c)),
            None => (s, None),
        };
        match kind {
            "sepkv" => {
                let mut tuning = Tuning::default();
                let config = config.map(|c| {
                    let mut parts = c.split('+');
                    let preset = parts.next().unwrap_or("");
                    for flag in parts {
                        match flag {
                            "nowal" => tuning.no_wal = true,
                            "noprefetch" => tuning.no_prefetch = true,
                            "nohot" => tuning.no_hotness = true,
                            "nojournal" => tuning.no_journal = true,
                            "jvalues" => tuning.journal_values = true,
                            "nosep" => tuning.no_selective = true,
                            "diskhash" => tuning.disk_hash = true,
                            "lwc" => tuning.lwc_index = true,
                            "wide" => tuning.wide_dtables = true,
                            "pushdown" => tuning.push_down = true,
                            f if f.starts_with("seg") => {
                                tuning.max_segments = match f[3..].parse::<u16>() {
                                    Ok(n) if (2..=1024).contains(&n) => Some(n),
                                    _ => {
                                        return Err(BenchError::InvalidArgument(format!(
                                            "+{f}: expected a segment bound from 2 to 1024, such as +seg4"
                                        )))
                                    }
                                }
                            }
                            f if f.starts_with("seek") => {
                                tuning.seek_merge_bytes = match f[4..].parse::<u32>() {
                                    Ok(n) => Some(n),
                                    _ => {
                                        return Err(BenchError::InvalidArgument(format!(
                                            "+{f}: expected bytes per read charge (0: off), such as +seek1024"
                                        )))
                                    }
                                }
                            }
                            f if f.starts_with("dead") => {
                                tuning.dead_percent = match f[4..].parse::<u8>() {
                                    Ok(n) if (5..=100).contains(&n) => Some(n),
                                    _ => {
                                        return Err(BenchError::InvalidArgument(format!(
                                            "+{f}: expected a dead share in percent from 5 to 100, such as +dead25"
                                        )))
                                    }
                                }
                            }
                            f if f.starts_with("div") => {
                                tuning.division_number = match f[3..].parse::<u8>() {
                                    Ok(n) if (2..=64).contains(&n) => Some(n),
                                    _ => {
                                        return Err(BenchError::InvalidArgument(format!(
                                            "+{f}: expected a division number from 2 to 64, such as +div10"
                                        )))
                                    }
                                }
                            }
                            "nosort" => tuning.no_sort = true,
                            "buffered" => tuning.scan_buffered = true,
                            "nomap" => tuning.no_map = true,
                            "noroll" => tuning.no_roll = true,
                            "paper" => tuning.paper = true,
                            "align" => tuning.block_align = true,
                            f if f.starts_with("batch") => {
                                let m = f[5..].parse::<u32>().ok().filter(|m| (1..=65536).contains(m));
                                tuning.scan_batch_mib = Some(m.ok_or_else(|| {
                                    BenchError::InvalidArgument(format!(
                                        "+{f}: expected MiB from 1 to 65536, such as +batch16"
                                    ))
                                })?)
                            }
                            f if f.starts_with("pipe") => {
                                let m = f[4..]
                                    .parse::<u32>()
                                    .ok()
                                    .filter(|m| *m == 0 || (1..=1024).contains(m));
                                tuning.scan_pipeline_mib = Some(m.ok_or_else(|| {
                                    BenchError::InvalidArgument(format!(
                                        "+{f}: expected 0 (off) or MiB from 1 to 1024, such as +pipe32"
                                    ))
                                })?)
                            }
                            f if f.starts_with("ckpt") => {
                                tuning.checkpoint_bands = match f[4..].parse::<u32>() {
                                    Ok(n) if (1..=1 << 20).contains(&n) => Some(n),
                                    _ => {
                                        return Err(BenchError::InvalidArgument(format!(
                                            "+{f}: expected closed bands from 1 to 1048576, such as +ckpt16"
                                        )))
                                    }
                                }
                            }
                            f if f.starts_with("op") => {
                                tuning.over_provisioning_milli = Some(milli("op", &f[2..])?)
                            }
                            f if f.starts_with("sa") => {
                                tuning.space_target_milli = Some(milli("sa", &f[2..])?)
                            }
                            _ => {
                                let flags: Vec<&str> = TUNING_HELP.iter().map(|f| f.0).collect();
                                return Err(BenchError::InvalidArgument(format!(
                                    "unknown sepkv flag +{flag} in engine {s:?}; flags: {}",
                                    flags.join(", ")
                                )));
                            }
                        }
                    }
                    Ok(preset)
                });
                let config = config.transpose()?;
                let preset = match config {
                    None | Some("") => Preset::LevelDb,
                    Some(c) => c.parse::<Preset>().map_err(|_| {
                        BenchError::InvalidArgument(format!(
                            "unknown sepkv preset {c:?} in engine {s:?}; available: {}",
                            Preset::available_names()
                        ))
                    })?,
                };
                Ok(EngineSpec::Sepkv(preset, tuning))
            }
            k if config.is_none() && PEERS.iter().any(|(n, _, _)| *n == k) => Ok(PEERS
                .iter()
                .find(|(n, _, _)| *n == k)
                .map(|(_, spec, _)| *spec)
                .expect("found above")),
            k if PEERS.iter().any(|(n, _, _)| *n == k) => Err(BenchError::InvalidArgument(format!(
                "engine {k} takes no configuration (got {s:?})"
            ))),
            _ => Err(BenchError::InvalidArgument(format!(
                "unknown engine {s:?}; expected sepkv:<preset>, fjall, fjall-kv, rocksdb, rocksdb-blob, leveldb, badger or badger-kv (see --list-engines)"
            ))),
        }
    }
}

impl EngineFactory for EngineSpec {
    fn label(&self) -> String {
        self.to_string()
    }

    fn open(&self, dir: &Path, opts: &EngineOptions) -> Result<Box<dyn Engine>> {
        self.check_available()?;
        match *self {
            EngineSpec::Sepkv(preset, tuning) => Ok(Box::new(SepkvEngine::open_tuned(
                dir, preset, tuning, opts,
            )?)),
            EngineSpec::Fjall { kv } => Ok(Box::new(FjallEngine::open(dir, kv, opts)?)),
            #[cfg(feature = "rocksdb")]
            EngineSpec::RocksDb { blob } => Ok(Box::new(crate::peers::rocks::RocksEngine::open(
                dir, blob, opts,
            )?)),
            #[cfg(not(feature = "rocksdb"))]
            EngineSpec::RocksDb { .. } => Err(BenchError::Unavailable(format!(
                "engine {self} is not built: rebuild with `--release --features rocksdb`"
            ))),
            #[cfg(feature = "leveldb")]
            EngineSpec::LevelDb => Ok(Box::new(crate::peers::leveldb::LevelDbEngine::open(
                dir, opts,
            )?)),
            #[cfg(not(feature = "leveldb"))]
            EngineSpec::LevelDb => Err(BenchError::Unavailable(format!(
                "engine {self} is not built: rebuild with `--release --features leveldb`"
            ))),
            #[cfg(feature = "badger")]
            EngineSpec::Badger { kv } => Ok(Box::new(crate::peers::badger::BadgerEngine::open(
                dir, kv, opts,
            )?)),
            #[cfg(not(feature = "badger"))]
            EngineSpec::Badger { .. } => Err(BenchError::Unavailable(format!(
                "engine {self} is not built: rebuild with `--release --features badger`"
            ))),
        }
    }
}

/// Longest wait, between phases, for KT-Store's background sorting of
/// sealed TrieTables.
const SORT_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

/// sepkv behind the [`Engine`] trait.
pub struct SepkvEngine {
    db: std::sync::Arc<Db>,
    /// The thread of `--checkpoint-after` and its stop flag.
    checkpointer: Option<(
        std::sync::Arc<std::sync::atomic::AtomicBool>,
        std::thread::JoinHandle<()>,
    )>,
    label: String,
    preset: Preset,
    options: Options,
    write: WriteOptions,
    direct_io_requested: bool,
    path: PathBuf,
}

impl SepkvEngine {
    /// Opens sepkv with `preset`'s default options in `dir`.
    ///
    /// # Errors
    /// [`BenchError::Unavailable`] for a preset this build lacks; the
    /// engine's error when opening fails.
    pub fn open(dir: &Path, preset: Preset, opts: &EngineOptions) -> Result<Self> {
        Self::open_tuned(dir, preset, Tuning::default(), opts)
    }

    /// Opens sepkv with `preset` varied by `tuning` in `dir`.
    ///
    /// # Errors
    /// As [`SepkvEngine::open`].
    pub fn open_tuned(
        dir: &Path,
        preset: Preset,
        tuning: Tuning,
        opts: &EngineOptions,
    ) -> Result<Self> {
        let label = format!(
            "sepkv:{preset}{tuning}{}",
            if opts.direct_io { "+direct" } else { "" }
        );
        EngineSpec::Sepkv(preset, tuning).check_available()?;
        let mut options = Options::preset(preset);
        options.wal = options.wal && !tuning.no_wal;
        if tuning.no_prefetch {
            options.scan_prefetch_depth = 0;
        }
        if tuning.no_hotness {
            options.hashkv_hotness = false;
        }
        if tuning.no_journal {
            options.hashkv_journal = false;
        }
        if tuning.journal_values {
            options.hashkv_journal_values = true;
        }
        if tuning.no_selective {
            options.value_threshold = 1;
        }
        if tuning.disk_hash {
            options.hash_index_mode = sepkv::HashIndexMode::Disk;
        }
        if tuning.lwc_index {
            options.index = Some(sepkv::IndexKind::Lwc);
        }
        if tuning.wide_dtables {
            options.lwc_max_segments = 2 * options.level_size_multiplier as usize;
            options.lwc_max_table_bytes = 8 * options.target_file_size;
        }
        if tuning.push_down {
            options.lwc_push_down = true;
        }
        if tuning.paper && options.index.unwrap_or(preset.axes().0) == sepkv::IndexKind::Lwc {
            // §4.4: a DTable is bounded by its band only, and a full one is
            // divided into the level ratio's number of parts. The paper's
            // 40 MB band under a 100 GB store is scaled to the default
            // DTable bound (16 MiB) of the 0.3-1 GiB stores run here.
            options.lwc_max_segments = 1024;
            options.lwc_max_table_bytes = 4 * options.target_file_size;
            options.lwc_division_number = options.level_size_multiplier as usize;
        }
        if let Some(n) = tuning.division_number {
            options.lwc_division_number = n as usize;
        }
        if let Some(n) = tuning.max_segments {
            options.lwc_max_segments = n as usize;
        }
        if let Some(n) = tuning.dead_percent {
            options.lwc_dead_share = f64::from(n) / 100.0;
        }
        if let Some(n) = tuning.seek_merge_bytes {
            options.lwc_seek_merge_bytes = u64::from(n);
        }
        if tuning.no_sort {
            options.trie_sort_sealed = false;
        }
        if tuning.no_roll {
            options.trie_roll_size = options.trie_table_size;
        }
        if tuning.paper && options.layout() == sepkv::ValueLayout::Trie {
            options.trie_sort_sealed = false;
            options.trie_roll_size = options.trie_table_size;
            options.trie_split_skew = 1.0;
            options.trie_fixed_levels = Some(PAPER_TRIE_LEVELS);
            options.trie_span_density = 0.0;
            options.trie_span_density_memory = 0.0;
            options.trie_span_max = 1 << 30;
            options.trie_span_parallel = options.trie_span_max;
            options.prefetch_threads = 0;
            // Serial whole-span reads: no read pipeline (`+pipeM` sets one).
            options.trie_scan_pipeline = 0;
        }
        options.block_align = tuning.block_align;
        if let Some(m) = tuning.over_provisioning_milli {
            options.band_over_provisioning = m as f64 / 1000.0;
        }
        if let Some(m) = tuning.space_target_milli {
            options.space_amp_target = m as f64 / 1000.0;
        }
        if let Some(n) = tuning.checkpoint_bands {
            options.hash_checkpoint_bands = u64::from(n);
        }
        if let Some(m) = tuning.scan_batch_mib {
            options.scan_batch_bytes = u64::from(m) << 20;
        }
        if let Some(m) = tuning.scan_pipeline_mib {
            options.trie_scan_pipeline = u64::from(m) << 20;
        }
        if tuning.scan_buffered {
            options.trie_scan_direct = false;
        }
        if tuning.no_map {
            options.trie_mapped_appends = false;
        }
        if let Some((capacity, reserved)) = opts.value_capacity {
            // The bands count their bound in the bytes their entries take
            // (FlashKey: capacity = live × (1 + OP)); the reserve over the
            // user's bytes would leave GC less room than the reserve.
            options.value_capacity = match (options.layout(), opts.band_capacity) {
                (sepkv::ValueLayout::Bands, Some(b)) => Some(b),
                _ => Some(capacity),
            };
            options.hashkv_reserved_ratio = reserved;
            // A small run (a test, a smoke run) would not hold even one
            // default 64 MiB main segment: shrink the segments so the store
            // has at least 16 segment groups and the reserve at least 16 log
            // segments. At 1 GiB and above the defaults stand.
            let pow2_floor = |x: u64| {
                if x == 0 {
                    0
                } else {
                    1u64 << (63 - x.leading_zeros())
                }
            };
            let main_room = (capacity as f64 * (1.0 - reserved)) as u64 / 16;
            let log_room = (capacity as f64 * reserved) as u64 / 16;
            options.hashkv_main_segment_size = options
                .hashkv_main_segment_size
                .min(pow2_floor(main_room).max(64 << 10));
            options.hashkv_log_segment_size = options
                .hashkv_log_segment_size
                .min(pow2_floor(log_room).max(4 << 10));
        }
        options.use_direct_reads = opts.direct_io;
        let db = std::sync::Arc::new(
            Db::open(dir, options.clone()).map_err(|e| BenchError::engine(&label, e))?,
        );
        let checkpointer = opts
            .checkpoint_after
            .map(|after| Self::checkpoint_later(db.clone(), dir, after));
        Ok(SepkvEngine {
            db,
            checkpointer,
            label,
            preset,
            options,
            write: WriteOptions { sync: opts.sync },
            direct_io_requested: opts.direct_io,
            path: dir.to_path_buf(),
        })
    }

    fn err(&self, e: sepkv::Error) -> BenchError {
        BenchError::engine(&self.label, e)
    }

    /// `--checkpoint-after`: a thread that waits `after` (unless the engine
    /// closes first), takes a checkpoint of `db` into `<dir>.checkpoint`
    /// while the workload runs, opens it read-only, verifies it, counts its
    /// keys, and prints that with the space of source and checkpoint
    /// (allocated bytes; hard-linked SSTables shared) on stderr. Failures
    /// are printed, never fatal to the run.
    fn checkpoint_later(
        db: std::sync::Arc<Db>,
        dir: &Path,
        after: std::time::Duration,
    ) -> (
        std::sync::Arc<std::sync::atomic::AtomicBool>,
        std::thread::JoinHandle<()>,
    ) {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (src, stop2) = (dir.to_path_buf(), stop.clone());
        let handle = std::thread::spawn(move || {
            let start = std::time::Instant::now();
            while start.elapsed() < after {
                if stop2.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            let ckpt = src.with_extension("checkpoint");
            let at = start.elapsed();
            let t = std::time::Instant::now();
            let rep = match db.checkpoint_report(&ckpt) {
                Ok(r) => r,
                Err(e) => return eprintln!("checkpoint {}: {e}", ckpt.display()),
            };
            let took = t.elapsed();
            let (src_b, ckpt_b) = (
                dir_allocated_bytes(&src).unwrap_or(0),
                dir_allocated_bytes(&ckpt).unwrap_or(0),
            );
            let checked = Db::open_read_only(&ckpt, Options::default()).and_then(|c| {
                let faults = c.verify()?.faults.len();
                let mut keys = 0u64;
                for r in c.scan(.., false)? {
                    r?;
                    keys += 1;
                }
                Ok((keys, faults, c.last_sequence()))
            });
            let mib = |b: u64| b as f64 / (1 << 20) as f64;
            match checked {
                Ok((keys, faults, seq)) => eprintln!(
                    "checkpoint {} under load after {:.1} s, taken in {:.0} ms: sequence {} \
                     (reopened at {seq}), {} file(s) linked ({:.1} MiB), {} copied ({:.1} MiB); \
                     opened read-only: {keys} keys, verify: {faults} fault(s); on disk: source \
                     {:.1} MiB, checkpoint {:.1} MiB (linked tables counted in both)",
                    ckpt.display(),
                    at.as_secs_f64(),
                    took.as_secs_f64() * 1e3,
                    rep.sequence,
                    rep.linked_files,
                    mib(rep.linked_bytes),
                    rep.copied_files,
                    mib(rep.copied_bytes),
                    mib(src_b),
                    mib(ckpt_b),
                ),
                Err(e) => eprintln!("checkpoint {}: open or verify: {e}", ckpt.display()),
            }
        });
        (stop, handle)
    }
}

impl Engine for SepkvEngine {
    fn label(&self) -> &str {
        &self.label
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut b = WriteBatch::new();
        b.put(key, value).map_err(|e| self.err(e))?;
        self.db.write(&b, self.write).map_err(|e| self.err(e))
    }

    fn get(&self, key: &[u8], buf: &mut Vec<u8>) -> Result<bool> {
        match self.db.get(key).map_err(|e| self.err(e))? {
            Some(v) => {
                *buf = v;
                Ok(true)
            }
            None => {
                buf.clear();
                Ok(false)
            }
        }
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete(key).map_err(|e| self.err(e))?;
        self.db.write(&b, self.write).map_err(|e| self.err(e))
    }

    fn write_batch(&self, ops: &[BatchOp<'_>]) -> Result<()> {
        let mut b = WriteBatch::new();
        for op in ops {
            match *op {
                BatchOp::Put(k, v) => b.put(k, v),
                BatchOp::Delete(k) => b.delete(k),
            }
            .map_err(|e| self.err(e))?;
        }
        self.db.write(&b, self.write).map_err(|e| self.err(e))
    }

    fn scan(&self, start: &[u8], n: usize, out: &mut ScanResult) -> Result<()> {
        out.clear();
        // The Rust iterator reads separated values ahead in parallel once the
        // scan runs (WiscKey §3.3.1); the cursor API reads them one by one.
        // Told the length, it resolves the whole scan's values in one batch
        // where batches pay (span reads see the whole range, KT-Store §3.3).
        let scan = self.db.scan(start.., false).map_err(|e| self.err(e))?;
        for item in scan.limit(n) {
            let (k, v) = item.map_err(|e| self.err(e))?;
            out.entries += 1;
            out.key_bytes += k.len() as u64;
            out.add_value(&v);
            out.last_key.clear();
            out.last_key.extend_from_slice(&k);
        }
        Ok(())
    }

    fn gc(&self) -> Result<()> {
        self.db.gc(None).map(|_| ()).map_err(|e| self.err(e))
    }

    fn flush(&self) -> Result<()> {
        // Also let background compaction finish, so the phase that caused it
        // is the one billed for it.
        self.db.flush().map_err(|e| self.err(e))?;
        self.db.wait_idle().map_err(|e| self.err(e))?;
        // KT-Store's sorting of sealed tables is debt of the same kind: wait
        // for background GC to sort them (bounded, in case it cannot run).
        if self.options.trie_sort_sealed && self.options.gc_garbage_ratio > 0.0 {
            let unsorted = || -> Result<u64> {
                let s = self.db.stats().map_err(|e| self.err(e))?;
                Ok(s.value_store_figures
                    .get("trie_tables_sealed_unsorted")
                    .copied()
                    .unwrap_or(0))
            };
            let deadline = std::time::Instant::now() + SORT_WAIT;
            let mut waited = false;
            while unsorted()? > 0 && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(20));
                waited = true;
            }
            if waited {
                // The sorting's relocations went into the index.
                self.db.wait_idle().map_err(|e| self.err(e))?;
            }
        }
        Ok(())
    }

    fn stats(&self) -> Result<EngineStats> {
        let s = self.db.stats().map_err(|e| self.err(e))?;
        let by_cat =
            |v: &[(IoCategory, u64)]| v.iter().map(|(c, n)| (c.name().to_string(), *n)).collect();
        let mut counters = BTreeMap::new();
        counters.insert("flushes".into(), s.flushes);
        counters.insert("compactions".into(), s.compactions);
        counters.insert("trivial_moves".into(), s.trivial_moves);
        counters.insert("compaction_bytes_in".into(), s.compaction_bytes_in);
        counters.insert("compaction_bytes_out".into(), s.compaction_bytes_out);
        counters.insert(
            "compaction_entries_dropped".into(),
            s.compaction_entries_dropped,
        );
        counters.insert("write_stall_micros".into(), s.write_stall_micros);
        counters.insert("write_stop_micros".into(), s.write_stop_micros);
        // The engine's own space-amplification estimate, in thousandths
        // (beside the harness's measured SA).
        if s.space_amp_estimate.is_finite() {
            counters.insert(
                "space_amp_estimate_milli".into(),
                (s.space_amp_estimate * 1000.0).round() as u64,
            );
        }
        counters.insert("space_hidden_garbage".into(), s.space_hidden_garbage);
        counters.insert("write_gc_steps".into(), s.write_gc_steps);
        counters.insert("write_gc_waits".into(), s.write_gc_waits);
        counters.insert("write_gc_steps_max".into(), s.write_gc_steps_max);
        counters.insert("gc_step_micros_max".into(), s.gc_step_micros_max);
        counters.insert("gc_relocation_lookups".into(), s.gc_relocation_lookups);
        counters.insert("gc_index_blocks".into(), s.gc_index_blocks);
        counters.insert("write_groups".into(), s.write_groups);
        counters.insert("write_synced_groups".into(), s.write_synced_groups);
        counters.insert("write_batches".into(), s.write_batches);
        counters.insert("space_slowdowns".into(), s.space_slowdowns);
        counters.insert("space_stops".into(), s.space_stops);
        counters.insert("space_discoveries".into(), s.space_discoveries);
        counters.insert("space_target_misses".into(), s.space_target_misses);
        counters.insert("engine_user_bytes_written".into(), s.user_bytes_written);
        counters.insert("engine_user_bytes_read".into(), s.user_bytes_read);
        counters.insert("engine_disk_bytes".into(), s.disk_bytes);
        counters.insert("memtable_bytes".into(), s.memtable_bytes);
        for l in &s.levels {
            counters.insert(format!("level{}_files", l.level), l.files as u64);
            counters.insert(format!("level{}_segments", l.level), l.segments);
            counters.insert(format!("level{}_bytes", l.level), l.bytes);
            let dead = format!("level{}_dead_bytes", l.level);
            if let Some(&v) = s.index_figures.get(dead.as_str()) {
                counters.insert(dead, v);
            }
        }
        // The LWC-tree's tallies (segments appended, divisions, ...), and
        // the syncs that needed the WAL alone.
        for name in [
            "segments_appended",
            "divisions",
            "reclaims",
            "dead_bytes",
            "pushdowns",
            "metadata_from_victim",
            "metadata_reads",
            "seek_merges",
            "seek_merge_bytes",
            "wal_only_syncs",
            "wal_values_restored",
            "flushes_in_compaction",
            "hash_nodes",
            "hash_buckets",
            "key_tree_sstable_bytes",
        ] {
            if let Some(&v) = s.index_figures.get(name) {
                counters.insert(name.into(), v);
            }
        }
        // The value layout's own figures (for the trie: span and single
        // reads, splits, tables), prefixed so they cannot clash.
        for (name, v) in &s.value_store_figures {
            counters.insert(format!("vstore_{name}"), *v);
        }
        if let Some(e) = s.background_error {
            return Err(BenchError::engine(
                &self.label,
                std::io::Error::other(format!("background error: {e}")),
            ));
        }
        Ok(EngineStats {
            io: EngineIo {
                read: by_cat(&s.io.read),
                written: by_cat(&s.io.written),
            },
            counters,
        })
    }

    fn io_accounting(&self) -> bool {
        true
    }

    fn path(&self) -> &Path {
        &self.path
    }

    fn settings(&self) -> serde_json::Value {
        let o = &self.options;
        let mut v = json!({
            "engine": "sepkv",
            "preset": self.preset.name(),
            "index": o.index_kind().name(),
            "value_layout": o.layout().name(),
            "value_threshold": o.value_threshold,
            "write_buffer_size": o.write_buffer_size,
            "block_size": o.block_size,
            "block_align": o.block_align,
            "block_restart_interval": o.block_restart_interval,
            "bloom_bits_per_key": o.bloom_bits_per_key,
            "block_cache_size": o.block_cache_size,
            "max_open_files": o.max_open_files,
            "target_file_size": o.target_file_size,
            "max_bytes_for_level_base": o.max_bytes_for_level_base,
            "level_size_multiplier": o.level_size_multiplier,
            "num_levels": o.num_levels,
            "lwc_max_segments": o.lwc_max_segments,
            "lwc_max_table_bytes": o.lwc_max_table_bytes,
            "lwc_division_number": o.lwc_division_number,
            "lwc_push_down": o.lwc_push_down,
            "trie_table_size": o.trie_table_size,
            "trie_roll_size": o.trie_roll_size,
            "trie_sort_sealed": o.trie_sort_sealed,
            "trie_split_skew": o.trie_split_skew,
            "trie_fixed_levels": o.trie_fixed_levels,
            "trie_span_density": o.trie_span_density,
            "trie_span_density_memory": o.trie_span_density_memory,
            "trie_span_max": o.trie_span_max,
            "trie_span_parallel": o.trie_span_parallel,
            "scan_batch_bytes": o.scan_batch_bytes,
            "l0_compaction_trigger": o.l0_compaction_trigger,
            "l0_slowdown_writes_trigger": o.l0_slowdown_writes_trigger,
            "l0_stop_writes_trigger": o.l0_stop_writes_trigger,
            "wal": o.wal,
            "scan_prefetch_depth": o.scan_prefetch_depth,
            "prefetch_threads": o.prefetch_threads,
            "vlog_file_size": o.vlog_file_size,
            "gc_garbage_ratio": o.gc_garbage_ratio,
            "sync": self.write.sync,
            "direct_io": o.use_direct_reads,
            "mmap_reads": o.mmap_reads && !o.use_direct_reads,
        });
        // Outside the macro: more fields pass `json!`'s recursion limit.
        v["lwc_dead_share"] = json!(o.lwc_dead_share);
        v["lwc_seek_merge_bytes"] = json!(o.lwc_seek_merge_bytes);
        v["trie_scan_pipeline"] = o.trie_scan_pipeline.into();
        v["trie_scan_direct"] = o.trie_scan_direct.into();
        v["trie_mapped_appends"] = o.trie_mapped_appends.into();
        v
    }

    fn direct_io(&self) -> bool {
        self.options.use_direct_reads
    }

    fn notes(&self) -> Vec<String> {
        if self.direct_io_requested {
            vec![format!("{}: reads use direct I/O (O_DIRECT, Options::use_direct_reads); writes are buffered", self.label)]
        } else {
            Vec::new()
        }
    }

    fn close(mut self: Box<Self>) -> Result<()> {
        if let Some((stop, h)) = self.checkpointer.take() {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let _ = h.join();
        }
        self.db
            .close()
            .map_err(|e| BenchError::engine(&self.label, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        assert_eq!(
            "sepkv:leveldb".parse::<EngineSpec>().unwrap(),
            EngineSpec::Sepkv(Preset::LevelDb, Default::default())
        );
        assert_eq!(
            "sepkv".parse::<EngineSpec>().unwrap(),
            EngineSpec::Sepkv(Preset::LevelDb, Default::default())
        );
        // Every preset is implemented; a tuning that gives a layout an
        // index it does not take is refused before anything runs.
        for p in Preset::ALL {
            let spec = format!("sepkv:{p}").parse::<EngineSpec>().unwrap();
            assert!(spec.check_available().is_ok(), "{p}");
        }
        let w = "sepkv:flashkey+lwc".parse::<EngineSpec>().unwrap();
        let e = w.check_available().unwrap_err().to_string();
        assert!(e.contains("unavailable") && e.contains("bands"), "{e}");
        assert!("sepkv:nope".parse::<EngineSpec>().is_err());
        // Over-provisioning and the space target, printed back as given.
        let o = "sepkv:flashkey+op0.3+sa1.6".parse::<EngineSpec>().unwrap();
        assert_eq!(o.to_string(), "sepkv:flashkey+op0.3+sa1.6");
        assert!("sepkv:flashkey+op0".parse::<EngineSpec>().is_err());
        let c = "sepkv:flashkey+ckpt8".parse::<EngineSpec>().unwrap();
        assert_eq!(c.to_string(), "sepkv:flashkey+ckpt8");
        assert!("sepkv:flashkey+ckpt0".parse::<EngineSpec>().is_err());
        assert!("sepkv:flashkey+opx".parse::<EngineSpec>().is_err());
        // The scan pipeline's budget: 0 (off) or 1-1024 MiB.
        for ok in [
            "sepkv:ktstore+pipe0",
            "sepkv:ktstore+pipe32",
            "sepkv:ktstore+pipe1024",
            "sepkv:ktstore+buffered",
            "sepkv:ktstore+pipe0+buffered",
        ] {
            assert_eq!(ok.parse::<EngineSpec>().unwrap().to_string(), ok);
        }
        for bad in [
            "sepkv:ktstore+pipe",
            "sepkv:ktstore+pipe1025",
            "sepkv:ktstore+pipex",
        ] {
            let err = bad.parse::<EngineSpec>().unwrap_err().to_string();
            assert!(err.contains("such as +pipe32"), "{bad}: {err}");
        }
        assert_eq!(
            "rocksdb".parse::<EngineSpec>().unwrap(),
            EngineSpec::RocksDb { blob: false }
        );
        assert_eq!(
            "fjall-kv".parse::<EngineSpec>().unwrap(),
            EngineSpec::Fjall { kv: true }
        );
        // The LevelDB peer parses; without its feature it cannot open.
        let l = "leveldb".parse::<EngineSpec>().unwrap();
        assert_eq!(l, EngineSpec::LevelDb);
        assert_eq!(
            l.check_available().is_ok(),
            cfg!(feature = "leveldb") && !cfg!(debug_assertions)
        );
        // So does Badger's.
        let b = "badger-kv".parse::<EngineSpec>().unwrap();
        assert_eq!(b, EngineSpec::Badger { kv: true });
        assert_eq!(
            b.check_available().is_ok(),
            cfg!(feature = "badger") && !cfg!(debug_assertions)
        );
        assert!("whatever".parse::<EngineSpec>().is_err());
    }

    #[test]
    fn scan_results_read_every_value_byte() {
        let mut a = ScanResult::default();
        let mut b = ScanResult::default();
        a.add_value(b"value one");
        b.add_value(b"value onf");
        assert_eq!(a.value_bytes, 9);
        assert_ne!(a.value_digest, b.value_digest, "the last byte was read");
        a.clear();
        assert_eq!((a.value_bytes, a.value_digest), (0, 0));
    }

    #[test]
    fn scan_reads_n_entries_and_last_key() {
        let dir = tempfile::tempdir().unwrap();
        let e = SepkvEngine::open(dir.path(), Preset::LevelDb, &EngineOptions::default()).unwrap();
        for k in [b"a", b"b", b"c", b"d"] {
            e.put(k, b"vv").unwrap();
        }
        let mut out = ScanResult::default();
        e.scan(b"b", 2, &mut out).unwrap();
        assert_eq!((out.entries, out.key_bytes, out.value_bytes), (2, 2, 4));
        assert_eq!(out.last_key, b"c");
        e.scan(b"c", 10, &mut out).unwrap();
        assert_eq!(out.entries, 2);
        e.scan(b"z", 10, &mut out).unwrap();
        assert_eq!(out.entries, 0);
        let mut buf = Vec::new();
        assert!(e.get(b"a", &mut buf).unwrap());
        assert_eq!(buf, b"vv");
        e.delete(b"a").unwrap();
        assert!(!e.get(b"a", &mut buf).unwrap());
        e.write_batch(&[BatchOp::Put(b"x", b"1"), BatchOp::Delete(b"b")])
            .unwrap();
        assert!(e.get(b"x", &mut buf).unwrap());
        assert!(!e.get(b"b", &mut buf).unwrap());
        let s = e.stats().unwrap();
        assert!(s.io.total_written() > 0);
        assert!(s.io.written.contains_key("wal"));
        assert_eq!(e.settings()["preset"], "leveldb");
        Box::new(e).close().unwrap();
    }
}
