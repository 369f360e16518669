//! The compaction picker: a pure function from a version to a choice, so
//! policy is testable without I/O.
//!
//! Leveled policy (LevelDB, described in WiscKey §2.1 and LWC-tree §2.1):
//! level 0 is scored by file count over `l0_compaction_trigger`, level
//! `n >= 1` by its bytes over `max_bytes_for_level_base *
//! level_size_multiplier^(n-1)`. The level with the highest score `>= 1` is
//! compacted: one file (round-robin after the level's compaction pointer;
//! for level 0 grown to every overlapping level-0 file) merged with the
//! overlapping files of the next level. A single file with no overlap below
//! and little overlap two levels below is moved, not rewritten.

use crate::index::key::compare_internal;
use crate::index::key::{user_key, SeqNum};
use crate::index::version::{set::total_size, FileMeta, TableCounts, Version};
use std::cmp::Ordering;
use std::sync::Arc;

/// The knobs the picker reads (from `Options`).
#[derive(Debug, Clone, Copy)]
pub struct PickerConfig {
    /// Number of levels.
    pub levels: usize,
    /// Level-0 file count that triggers compaction.
    pub l0_trigger: usize,
    /// Size limit of level 1 (bytes).
    pub max_bytes_base: u64,
    /// Growth factor between levels.
    pub multiplier: u64,
    /// Target size of output files (bytes).
    pub target_file_size: u64,
}

impl PickerConfig {
    /// Size limit of `level >= 1` (bytes).
    pub fn max_bytes(&self, level: usize) -> u64 {
        let mut b = self.max_bytes_base;
        for _ in 1..level {
            b = b.saturating_mul(self.multiplier);
        }
        b
    }

    /// Most bytes of grandparent overlap one output file may have before it
    /// is cut (limits the cost of the next compaction).
    pub fn max_grandparent_overlap(&self) -> u64 {
        self.target_file_size.saturating_mul(10)
    }
}

/// Files chosen for one compaction of `level` into `output_level`
/// (`level + 1`, or `level` itself for a bottommost-level rewrite).
#[derive(Debug, Clone, PartialEq)]
pub struct CompactionInputs {
    /// The level compacted.
    pub level: usize,
    /// The level the outputs go to.
    pub output_level: usize,
    /// Files of `level`.
    pub upper: Vec<Arc<FileMeta>>,
    /// Overlapping files of `output_level` when it is `level + 1`.
    pub lower: Vec<Arc<FileMeta>>,
    /// Overlapping files of `output_level + 1` (to bound output overlap).
    pub grandparents: Vec<Arc<FileMeta>>,
}

/// The picker's decision.
#[derive(Debug, Clone, PartialEq)]
pub enum Choice {
    /// Nothing needs compaction.
    Nothing,
    /// Move one file from `level` to `level + 1` by a manifest edit only.
    Move {
        /// Source level.
        level: usize,
        /// The file.
        file: Arc<FileMeta>,
    },
    /// Merge the inputs.
    Merge(CompactionInputs),
}

/// Compaction scores of every level but the last (score `>= 1` needs work).
pub fn scores(v: &Version, cfg: &PickerConfig) -> Vec<f64> {
    (0..cfg.levels - 1)
        .map(|l| {
            if l == 0 {
                v.files[0].len() as f64 / cfg.l0_trigger as f64
            } else {
                v.level_bytes(l) as f64 / cfg.max_bytes(l) as f64
            }
        })
        .collect()
}

fn key_range(files: &[Arc<FileMeta>]) -> (Vec<u8>, Vec<u8>) {
    let mut lo = &files[0].smallest;
    let mut hi = &files[0].largest;
    for f in files {
        if compare_internal(&f.smallest, lo) == Ordering::Less {
            lo = &f.smallest;
        }
        if compare_internal(&f.largest, hi) == Ordering::Greater {
            hi = &f.largest;
        }
    }
    (user_key(lo).to_vec(), user_key(hi).to_vec())
}

/// Completes a compaction of `level` starting from `initial` files.
pub fn setup_inputs(
    v: &Version,
    cfg: &PickerConfig,
    level: usize,
    initial: Vec<Arc<FileMeta>>,
) -> CompactionInputs {
    let mut upper = initial;
    if level == 0 {
        let (lo, hi) = key_range(&upper);
        upper = v.overlapping(0, Some(&lo), Some(&hi));
    }
    let (lo, hi) = key_range(&upper);
    let lower = v.overlapping(level + 1, Some(&lo), Some(&hi));
    let (lo, hi) = if lower.is_empty() {
        (lo, hi)
    } else {
        let all: Vec<_> = upper.iter().chain(lower.iter()).cloned().collect();
        key_range(&all)
    };
    let grandparents = if level + 2 < cfg.levels {
        v.overlapping(level + 2, Some(&lo), Some(&hi))
    } else {
        Vec::new()
    };
    CompactionInputs {
        level,
        output_level: level + 1,
        upper,
        lower,
        grandparents,
    }
}

/// Picks the next automatic compaction.
pub fn pick(v: &Version, cfg: &PickerConfig, compact_pointers: &[Option<&[u8]>]) -> Choice {
    let sc = scores(v, cfg);
    let Some((level, &best)) = sc
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.partial_cmp(b.1).unwrap_or(Ordering::Equal))
    else {
        return Choice::Nothing;
    };
    if best < 1.0 {
        return Choice::Nothing;
    }
    let files = &v.files[level];
    let first = if level == 0 {
        files[0].clone()
    } else {
        let ptr = compact_pointers.get(level).copied().flatten();
        files
            .iter()
            .find(|f| ptr.is_none_or(|p| compare_internal(&f.largest, p) == Ordering::Greater))
            .unwrap_or(&files[0])
            .clone()
    };
    let inputs = setup_inputs(v, cfg, level, vec![first]);
    if inputs.upper.len() == 1
        && inputs.lower.is_empty()
        && total_size(&inputs.grandparents) <= cfg.max_grandparent_overlap()
    {
        return Choice::Move {
            level,
            file: inputs.upper[0].clone(),
        };
    }
    Choice::Merge(inputs)
}

/// Share of a table's entries that must be garbage (tombstones and versions
/// shadowed within the table, [`TableCounts::garbage`]) before the
/// tombstone-density trigger ([`pick_garbage`]) rewrites it. A table of
/// ordinary puts and overwrites stays far below it.
pub const GARBAGE_TRIGGER_RATIO: f64 = 0.5;

/// Whether the tombstone-density trigger may pick file `f` of version `v`:
/// counted ([`Version::counts`]), at least [`GARBAGE_TRIGGER_RATIO`]
/// garbage, and every entry visible to every reader (its largest sequence
/// number at most `smallest_snapshot`), so that the rewrite drops the
/// garbage instead of keeping it for a snapshot.
fn garbage_of(v: &Version, f: &FileMeta, smallest_snapshot: SeqNum) -> Option<u64> {
    let c: &TableCounts = v.counts.get(&f.number)?;
    let g = c.garbage();
    (c.entries > 0
        && g as f64 >= GARBAGE_TRIGGER_RATIO * c.entries as f64
        && c.largest_seq <= smallest_snapshot)
        .then_some(g)
}

/// The tombstone-density trigger (as RocksDB's files marked for compaction
/// by its deletion collector, or Pebble's tombstone-density compactions):
/// for when [`pick`] has nothing to do, the table of a level `>= 1` with the
/// most garbage among those [`GARBAGE_TRIGGER_RATIO`] or more garbage whose
/// entries no snapshot still needs. When no deeper level overlaps it, the
/// table is rewritten in place, which drops its tombstones and shadowed
/// versions (the drop rule's ordinary conditions then all hold), so the
/// same table is never picked twice; otherwise it is merged into the next
/// level as any compaction is, which carries its tombstones down until a
/// level with nothing below drops them. Level 0, which its file count
/// empties, and tables without counts are left out. `None` when no table
/// qualifies.
pub fn pick_garbage(
    v: &Version,
    cfg: &PickerConfig,
    smallest_snapshot: SeqNum,
) -> Option<CompactionInputs> {
    let (level, f, _) = (1..cfg.levels.min(v.files.len()))
        .flat_map(|l| v.files[l].iter().map(move |f| (l, f)))
        .filter_map(|(l, f)| garbage_of(v, f, smallest_snapshot).map(|g| (l, f, g)))
        .max_by_key(|&(_, _, g)| g)?;
    let (lo, hi) = (user_key(&f.smallest), user_key(&f.largest));
    let below = (level + 1..cfg.levels.min(v.files.len()))
        .any(|l| !v.overlapping(l, Some(lo), Some(hi)).is_empty());
    if !below {
        return Some(CompactionInputs {
            level,
            output_level: level,
            upper: vec![f.clone()],
            lower: Vec::new(),
            grandparents: Vec::new(),
        });
    }
    Some(setup_inputs(v, cfg, level, vec![f.clone()]))
}

/// Picks a manual compaction of the files of `level` overlapping the user
/// key range `[begin, end]`; `None` when the level has none there.
pub fn pick_range(
    v: &Version,
    cfg: &PickerConfig,
    level: usize,
    begin: Option<&[u8]>,
    end: Option<&[u8]>,
) -> Option<CompactionInputs> {
    let files = v.overlapping(level, begin, end);
    if files.is_empty() {
        return None;
    }
    Some(setup_inputs(v, cfg, level, files))
}

/// Picks a rewrite of the files of `level` (at least 1) overlapping the user
/// key range `[begin, end]` into `level` itself: the bottommost-level step
/// of a manual range compaction (RocksDB's `CompactRange` with
/// `bottommost_level_compaction`), which drops the tombstones and
/// overwritten versions no reader needs when no level below holds the
/// range. The files of a level `>= 1` are disjoint and sorted, so the
/// outputs replace a contiguous run. `None` for level 0 or when the level
/// has no files there.
pub fn pick_in_place(
    v: &Version,
    cfg: &PickerConfig,
    level: usize,
    begin: Option<&[u8]>,
    end: Option<&[u8]>,
) -> Option<CompactionInputs> {
    if level == 0 || level >= cfg.levels {
        return None;
    }
    let upper = v.overlapping(level, begin, end);
    if upper.is_empty() {
        return None;
    }
    let (lo, hi) = key_range(&upper);
    let grandparents = if level + 1 < cfg.levels {
        v.overlapping(level + 1, Some(&lo), Some(&hi))
    } else {
        Vec::new()
    };
    Some(CompactionInputs {
        level,
        output_level: level,
        upper,
        lower: Vec::new(),
        grandparents,
    })
}

/// The level a flushed memtable covering `[lo, hi]` (user keys) goes to:
/// as deep as level 2 while it overlaps nothing on the way and its
/// grandparent overlap stays small (LevelDB's placement, which keeps
/// sequential loads out of level 0).
pub fn level_for_flush(v: &Version, cfg: &PickerConfig, lo: &[u8], hi: &[u8]) -> usize {
    let mut level = 0;
    if !v.overlapping(0, Some(lo), Some(hi)).is_empty() {
        return 0;
    }
    while level < 2 && level + 1 < cfg.levels {
        if !v.overlapping(level + 1, Some(lo), Some(hi)).is_empty() {
            break;
        }
        if level + 2 < cfg.levels
            && total_size(&v.overlapping(level + 2, Some(lo), Some(hi)))
                > cfg.max_grandparent_overlap()
        {
            break;
        }
        level += 1;
    }
    level
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::key::{internal_key, ValueType};

    fn f(n: u64, lo: &str, hi: &str, size: u64) -> Arc<FileMeta> {
        Arc::new(FileMeta {
            number: n,
            size,
            smallest: internal_key(lo.as_bytes(), 10, ValueType::Value),
            largest: internal_key(hi.as_bytes(), 1, ValueType::Value),
        })
    }

    fn cfg() -> PickerConfig {
        PickerConfig {
            levels: 4,
            l0_trigger: 2,
            max_bytes_base: 100,
            multiplier: 10,
            target_file_size: 10,
        }
    }

    #[test]
    fn nothing_when_under_limits() {
        let mut v = Version::empty(4);
        v.files[0].push(f(1, "a", "c", 5));
        v.files[1].push(f(2, "a", "z", 50));
        assert_eq!(pick(&v, &cfg(), &[]), Choice::Nothing);
    }

    #[test]
    fn level0_grows_to_overlapping_files() {
        let mut v = Version::empty(4);
        v.files[0] = vec![f(1, "a", "c", 5), f(2, "b", "e", 5), f(3, "x", "y", 5)];
        v.files[1] = vec![f(4, "a", "b", 5), f(5, "d", "f", 5), f(6, "g", "h", 5)];
        match pick(&v, &cfg(), &[]) {
            Choice::Merge(c) => {
                assert_eq!(c.level, 0);
                let up: Vec<_> = c.upper.iter().map(|f| f.number).collect();
                let lo: Vec<_> = c.lower.iter().map(|f| f.number).collect();
                assert_eq!(up, vec![1, 2]);
                assert_eq!(lo, vec![4, 5]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn round_robin_and_trivial_move() {
        let mut v = Version::empty(4);
        v.files[1] = vec![f(1, "a", "b", 60), f(2, "c", "d", 60)];
        v.files[2] = vec![f(3, "a", "a", 5)];
        let ptr = internal_key(b"b", 1, ValueType::Value);
        match pick(&v, &cfg(), &[None, Some(&ptr)]) {
            Choice::Move { level: 1, file } => assert_eq!(file.number, 2),
            other => panic!("{other:?}"),
        }
        match pick(&v, &cfg(), &[]) {
            Choice::Merge(c) => assert_eq!(c.lower[0].number, 3),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn in_place_takes_the_overlapping_run_of_one_level() {
        let mut v = Version::empty(4);
        v.files[0].push(f(9, "a", "z", 5));
        v.files[2] = vec![f(1, "a", "b", 5), f(2, "c", "d", 5), f(3, "e", "f", 5)];
        v.files[3] = vec![f(4, "c", "c", 5), f(5, "x", "y", 5)];
        assert_eq!(pick_in_place(&v, &cfg(), 0, None, None), None);
        assert_eq!(pick_in_place(&v, &cfg(), 1, None, None), None);
        let c = pick_in_place(&v, &cfg(), 2, Some(b"b"), Some(b"c")).unwrap();
        assert_eq!((c.level, c.output_level), (2, 2));
        let up: Vec<_> = c.upper.iter().map(|f| f.number).collect();
        assert_eq!(up, vec![1, 2]);
        assert!(c.lower.is_empty());
        let gp: Vec<_> = c.grandparents.iter().map(|f| f.number).collect();
        assert_eq!(gp, vec![4]);
        let last = pick_in_place(&v, &cfg(), 3, None, None).unwrap();
        assert!(last.grandparents.is_empty());
        let r = pick_range(&v, &cfg(), 2, Some(b"b"), Some(b"c")).unwrap();
        assert_eq!((r.level, r.output_level), (2, 3));
    }

    fn counts(entries: u64, deletions: u64, shadowed: u64, largest_seq: u64) -> TableCounts {
        TableCounts {
            entries,
            deletions,
            shadowed,
            largest_seq,
        }
    }

    #[test]
    fn garbage_trigger_picks_dense_tables_no_snapshot_needs() {
        let mut v = Version::empty(4);
        v.files[0].push(f(1, "a", "b", 5));
        v.files[1] = vec![f(2, "c", "d", 5), f(3, "e", "f", 5)];
        v.files[2] = vec![f(4, "e", "e", 5), f(5, "x", "y", 5)];
        // Level 0 and uncounted tables are never picked.
        v.counts.insert(1, counts(100, 100, 0, 10));
        assert_eq!(pick_garbage(&v, &cfg(), 100), None);
        // Under the ratio: nothing.
        v.counts.insert(2, counts(100, 30, 19, 10));
        assert_eq!(pick_garbage(&v, &cfg(), 100), None);
        // At the ratio, nothing below: rewritten in place.
        v.counts.insert(2, counts(100, 30, 20, 10));
        let c = pick_garbage(&v, &cfg(), 100).unwrap();
        assert_eq!((c.level, c.output_level), (1, 1));
        assert_eq!(c.upper[0].number, 2);
        assert!(c.lower.is_empty() && c.grandparents.is_empty());
        // A snapshot older than the table's newest entry holds it.
        assert_eq!(pick_garbage(&v, &cfg(), 9), None);
        // The table with the most garbage wins; with level 2 below it,
        // it is merged down.
        v.counts.insert(3, counts(200, 150, 0, 10));
        let c = pick_garbage(&v, &cfg(), 10).unwrap();
        assert_eq!((c.level, c.output_level), (1, 2));
        assert_eq!(c.upper[0].number, 3);
        let lo: Vec<_> = c.lower.iter().map(|f| f.number).collect();
        assert_eq!(lo, vec![4]);
        // The last level has nothing below.
        v.counts.insert(5, counts(300, 290, 0, 10));
        let c = pick_garbage(&v, &cfg(), 10).unwrap();
        assert_eq!((c.level, c.output_level, c.upper[0].number), (2, 2, 5));
    }

    #[test]
    fn flush_placement() {
        let mut v = Version::empty(4);
        assert_eq!(level_for_flush(&v, &cfg(), b"a", b"b"), 2);
        v.files[2].push(f(1, "a", "a", 5));
        assert_eq!(level_for_flush(&v, &cfg(), b"a", b"b"), 1);
        v.files[0].push(f(2, "b", "c", 5));
        assert_eq!(level_for_flush(&v, &cfg(), b"a", b"b"), 0);
    }
}
