//! Lightweight compaction of the LWC-tree (LWC-tree §3.1, Algorithms 1–3),
//! with workload balance (§3.4) and equal division (§4.4).
//!
//! A compaction of level `i` reads its victim only: one DTable (or, from
//! level 0, the overlapping flushed SSTables, merged), drops what leveled
//! compaction drops (versions no snapshot can read; tombstones no snapshot
//! needs that hide nothing in the output level or below; see
//! [`super::run_compaction`]), and splits the surviving sorted entries into
//! one **segment** per overlapping DTable of level `i + 1` (the targets).
//! Each segment is appended to its target with a new tail whose segment
//! directory is the target's old one plus the new segment (the metadata
//! merge, Algorithm 3). The old directory comes from the victim's
//! overlapped metaindex when the copy there is current (§3.2: no read of
//! the target at all), else from the target's tail. The victim is removed
//! from level `i`; the targets' new sizes and ranges go into one version
//! edit, installed atomically by the caller after every append is synced.
//! A crash before that edit leaves bytes past the recorded sizes, which
//! readers ignore and the next append skips.
//!
//! **Routing and workload balance (§3.4).** A key inside a target's range
//! goes to that target. A key in the gap between two adjacent targets'
//! ranges may go to either without breaking the level's order; it goes to
//! the one holding fewer bytes, so the range an over-full table would grow
//! into is handed to its lighter neighbour, and no data moves. (The
//! victim's own range, emptied by the compaction, is such a gap for the
//! next compaction of level `i - 1`.) Keys below the first target or above
//! the last go to it.
//!
//! **Full targets: push-down, else equal division (§4.4).** A target that
//! would pass either bound — `max_segments` segments, or `max_table_bytes`
//! bytes — is not appended to: it is merged fully with its new entries
//! (dropping stale versions and tombstones as above, as of its own level).
//! - **Push-down** (ours, beyond the paper; off unless
//!   `Options::lwc_push_down`): when the next level holds
//!   DTables under the merged keys, the merged entries leave the target's
//!   level and are appended there, routed over that level's DTables like a
//!   victim's entries (and a full one there is handled the same way, one
//!   level further). Every byte of a full target has to go down a level at
//!   some point; dividing it first would write it once more in its own
//!   level. The paper divides in place because its DTables fill SMR bands;
//!   on a file system nothing binds a table to its level's band. A counting
//!   run of 4 M × 100 B random puts found a third of the LWC-tree's
//!   compaction bytes in level-1 divisions before this. Off by default:
//!   its jobs are larger, and at 16 M × 100 B under a hard drive's
//!   bandwidth the load ran 0.72× as fast with no lower WA.
//! - **Equal division** otherwise (push-down off, the bottom level, or
//!   nothing below): the
//!   merged entries are divided into `n = ceil(live bytes /
//!   target_file_size)` DTables of equal size (cut between user keys) that
//!   replace the target in its level.
//!
//! An SSTable target (flushed straight into a deeper level) is treated the
//! same way, since only DTables take appends. A compaction holds the
//! entries of its victim and of every full target it merges in memory
//! (each at most `max_table_bytes` plus its new entries).
//!
//! **Bounds and space amplification.** Every DTable holds at most
//! `max_segments` segments and about `max_table_bytes` bytes (one segment
//! more than the bound is never written). A lookup therefore reads at most
//! `max_segments` index blocks' worth of candidates but, by the per-block
//! filters, one data block in the common case. The stale versions a DTable
//! can hold are those of its older segments: in the worst case (every
//! segment rewrites the same keys) a table holds `max_segments` versions of
//! each key, so the bottom level's space amplification is at most
//! `max_segments` (10 by default) and upper levels add their usual
//! `1 / (ratio - 1)`; with uniform updates a segment shadows about
//! `1 / max_segments` of its table, and the measured figure is in the
//! README.
//!
//! The job only writes; the caller installs the returned edit and then
//! deletes obsolete files.

use super::picker::{self, Choice, CompactionInputs, PickerConfig};
use super::{CompactionStats, JobContext};
use crate::error::{Error, Result};
use crate::fs::IoCategory;
use crate::index::dtable::{append_segment, Aggregated, Directory};
use crate::index::filename::table_path;
use crate::index::iter::InternalIterator;
use crate::index::key::{
    compare_internal, parse_internal_key, user_key, SeqNum, ValueType, MAX_SEQ,
};
use crate::index::merger::MergingIterator;
use crate::index::sstable::ReadCtx;
use crate::index::version::{FileMeta, Version, VersionEdit};
use crate::vstore::{ValuePointer, ValueStore};
use std::cmp::Ordering;
use std::sync::Arc;

/// Bounds of the LWC-tree's DTables (§4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LwcConfig {
    /// Most segments a DTable may hold (default: the level size ratio,
    /// the paper's division number).
    pub max_segments: usize,
    /// Most bytes a DTable may hold (default: 4 × `target_file_size`).
    pub max_table_bytes: u64,
    /// Push full DTables down instead of dividing them where the next
    /// level holds their keys (`Options::lwc_push_down`).
    pub push_down: bool,
}

impl LwcConfig {
    /// The default bounds for `cfg`: `max_segments` = the level size ratio
    /// (at least 2), `max_table_bytes` = 4 × `target_file_size`.
    pub fn from_picker(cfg: &PickerConfig) -> Self {
        Self::new(cfg, 0, 0)
    }

    /// The bounds `Options::lwc_max_segments` and
    /// `Options::lwc_max_table_bytes` ask for; 0 takes
    /// [`LwcConfig::from_picker`]'s default.
    pub fn new(cfg: &PickerConfig, max_segments: usize, max_table_bytes: u64) -> Self {
        LwcConfig {
            max_segments: if max_segments == 0 {
                (cfg.multiplier as usize).max(2)
            } else {
                max_segments
            },
            max_table_bytes: if max_table_bytes == 0 {
                cfg.target_file_size.saturating_mul(4)
            } else {
                max_table_bytes
            },
            push_down: false,
        }
    }
}

/// The next automatic compaction of an LWC-tree: the leveled picker's
/// choice (same scores, same victims), except that a level-0 file is never
/// moved down as it is (deeper levels take DTables; it is rewritten as one)
/// and a victim of level 1 or deeper with no overlap below is always moved
/// (moving a DTable keeps its segments; there is nothing to append to).
pub fn pick(v: &Version, cfg: &PickerConfig, compact_pointers: &[Option<&[u8]>]) -> Choice {
    match picker::pick(v, cfg, compact_pointers) {
        Choice::Move { level: 0, file } => {
            Choice::Merge(picker::setup_inputs(v, cfg, 0, vec![file]))
        }
        Choice::Merge(inputs)
            if inputs.level > 0 && inputs.lower.is_empty() && inputs.upper.len() == 1 =>
        {
            Choice::Move {
                level: inputs.level,
                file: inputs.upper[0].clone(),
            }
        }
        c => c,
    }
}

/// The drop rules of leveled compaction, applied to one sorted stream.
struct DropRule<'a> {
    version: &'a Version,
    snapshot: SeqNum,
    /// Tombstones are kept while a level `> below` may hold the key.
    below: usize,
    vstore: &'a dyn ValueStore,
    current: Vec<u8>,
    has_current: bool,
    last_seq: SeqNum,
    tombstones: u64,
    dropped: u64,
}

impl<'a> DropRule<'a> {
    fn new(
        version: &'a Version,
        snapshot: SeqNum,
        below: usize,
        vstore: &'a dyn ValueStore,
    ) -> Self {
        DropRule {
            version,
            snapshot,
            below,
            vstore,
            current: Vec::new(),
            has_current: false,
            last_seq: MAX_SEQ,
            tombstones: 0,
            dropped: 0,
        }
    }

    fn keep(&mut self, ikey: &[u8], value: &[u8]) -> Option<bool> {
        let p = parse_internal_key(ikey)?;
        if !self.has_current || p.user_key != self.current.as_slice() {
            self.current.clear();
            self.current.extend_from_slice(p.user_key);
            self.has_current = true;
            self.last_seq = MAX_SEQ;
        }
        let drop = if self.last_seq <= self.snapshot {
            true
        } else {
            p.vtype == ValueType::Deletion
                && p.seq <= self.snapshot
                && !self.version.key_may_exist_below(self.below, p.user_key)
        };
        self.last_seq = p.seq;
        if drop {
            self.dropped += 1;
            if p.vtype == ValueType::Deletion {
                self.tombstones += 1;
            }
            if p.vtype == ValueType::Pointer {
                if let Some(ptr) = ValuePointer::decode(value) {
                    self.vstore.note_garbage(&ptr);
                }
            }
        }
        Some(!drop)
    }
}

type Entries = Vec<(Vec<u8>, Vec<u8>)>;

fn bad_key(ctx: &JobContext<'_>) -> Error {
    Error::corruption(ctx.dir, 0, "unparsable internal key in compaction input")
}

/// Drains `iter` through `rule` into memory.
fn collect(
    ctx: &JobContext<'_>,
    iter: &mut dyn InternalIterator,
    rule: &mut DropRule<'_>,
    st: &mut CompactionStats,
) -> Result<Entries> {
    let mut out = Vec::new();
    iter.seek_to_first();
    while iter.valid() {
        st.entries_in += 1;
        if rule
            .keep(iter.key(), iter.value())
            .ok_or_else(|| bad_key(ctx))?
        {
            out.push((iter.key().to_vec(), iter.value().to_vec()));
        }
        iter.next();
    }
    iter.status()?;
    Ok(out)
}

fn entry_bytes(e: &(Vec<u8>, Vec<u8>)) -> u64 {
    (e.0.len() + e.1.len()) as u64
}

/// Splits sorted `entries` into `n` runs of about equal bytes, cutting only
/// between user keys.
fn divide(entries: &[(Vec<u8>, Vec<u8>)], n: usize) -> Vec<&[(Vec<u8>, Vec<u8>)]> {
    let total: u64 = entries.iter().map(entry_bytes).sum();
    let per = total.div_ceil(n.max(1) as u64).max(1);
    let mut parts = Vec::new();
    let mut start = 0;
    let mut acc = 0u64;
    for i in 0..entries.len() {
        acc += entry_bytes(&entries[i]);
        let boundary = entries
            .get(i + 1)
            .is_some_and(|nx| user_key(&nx.0) != user_key(&entries[i].0));
        if acc >= per && boundary {
            parts.push(&entries[start..=i]);
            start = i + 1;
            acc = 0;
        }
    }
    if start < entries.len() {
        parts.push(&entries[start..]);
    }
    parts
}

/// Writes `entries` as new one-segment DTables of about `target_file_size`
/// bytes each (equal division), returning their metadata.
fn write_new_tables(
    ctx: &mut JobContext<'_>,
    version: &Version,
    level: usize,
    entries: &[(Vec<u8>, Vec<u8>)],
    st: &mut CompactionStats,
) -> Result<Vec<FileMeta>> {
    let total: u64 = entries.iter().map(entry_bytes).sum();
    let n = total.div_ceil(ctx.picker.target_file_size.max(1)).max(1) as usize;
    let mut out = Vec::new();
    for part in divide(entries, n) {
        ctx.output_done()?;
        let number = (ctx.new_file_number)();
        let path = table_path(ctx.dir, number);
        let (lo, hi) = (&part[0].0, &part[part.len() - 1].0);
        let overlapped = aggregate(ctx, version, level + 1, lo, hi)?;
        let o = append_segment(
            ctx.fs,
            &path,
            None,
            part.iter().map(|(k, v)| (k.as_slice(), v.as_slice())),
            &overlapped,
            &ctx.table_options,
            ctx.stats,
            IoCategory::Compaction,
        )?;
        st.bytes_out += o.bytes_written;
        st.files_out += 1;
        st.entries_out += part.len() as u64;
        out.push(FileMeta {
            number,
            size: o.size,
            smallest: o.smallest,
            largest: o.largest,
        });
    }
    Ok(out)
}

/// The overlapped metaindex (§3.2) of a table of range `[lo, hi]`
/// (internal keys) whose next level is `below`: the directory of each
/// DTable there that overlaps it, as of its current size (from the table
/// cache, where those tables are usually open already).
fn aggregate(
    ctx: &JobContext<'_>,
    version: &Version,
    below: usize,
    lo: &[u8],
    hi: &[u8],
) -> Result<Vec<Aggregated>> {
    let mut out = Vec::new();
    if below >= version.files.len() {
        return Ok(out);
    }
    for f in version.overlapping(below, Some(user_key(lo)), Some(user_key(hi))) {
        let r = ctx
            .table_cache
            .get(f.number, f.size, IoCategory::Compaction)?;
        if let Some(d) = r.as_dtable() {
            out.push(Aggregated {
                number: f.number,
                size: f.size,
                directory: d.directory().clone(),
            });
        }
    }
    Ok(out)
}

/// Merges two internal-key-sorted runs (keys are unique across them).
fn merge_sorted(a: Entries, b: Entries) -> Entries {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let mut ai = a.into_iter().peekable();
    let mut bi = b.into_iter().peekable();
    loop {
        let take_a = match (ai.peek(), bi.peek()) {
            (Some(x), Some(y)) => compare_internal(&x.0, &y.0) != Ordering::Greater,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        let e = if take_a { ai.next() } else { bi.next() };
        out.extend(e);
    }
    out
}

/// For each entry of `entries` (sorted), the index of the target it goes
/// to (non-decreasing), by the routing rule of the module docs.
fn route(entries: &[(Vec<u8>, Vec<u8>)], targets: &[Arc<FileMeta>]) -> Vec<usize> {
    let mut j = 0;
    let mut out = Vec::with_capacity(entries.len());
    for (k, _) in entries {
        let uk = user_key(k);
        while j + 1 < targets.len() {
            let (cur, nxt) = (&targets[j], &targets[j + 1]);
            let in_next = uk >= user_key(&nxt.smallest);
            let in_gap = uk > user_key(&cur.largest);
            if in_next || (in_gap && nxt.size < cur.size) {
                j += 1;
            } else {
                break;
            }
        }
        out.push(j);
    }
    out
}

fn min_key(a: &[u8], b: &[u8]) -> Vec<u8> {
    if compare_internal(a, b) == Ordering::Greater {
        b
    } else {
        a
    }
    .to_vec()
}

fn max_key(a: &[u8], b: &[u8]) -> Vec<u8> {
    if compare_internal(a, b) == Ordering::Less {
        b
    } else {
        a
    }
    .to_vec()
}

/// Runs the lightweight compaction of `inputs` (picked by [`pick`]) as of
/// `smallest_snapshot`, and returns the edit to install.
///
/// # Errors
/// `Io` or `Corruption` from reading the victim or a target and from the
/// appends; nothing is installed then, and the bytes appended so far lie
/// past the recorded sizes, where readers ignore them.
pub fn run_lightweight(
    ctx: &mut JobContext<'_>,
    version: &Version,
    inputs: &CompactionInputs,
    smallest_snapshot: SeqNum,
    lwc: &LwcConfig,
) -> Result<(VersionEdit, CompactionStats)> {
    let rctx = ReadCtx {
        category: IoCategory::Compaction,
        fill_cache: false,
    };
    let level = inputs.level;
    let out_level = inputs.output_level;
    debug_assert_eq!(out_level, level + 1);
    let mut st = CompactionStats {
        compactions: 1,
        files_in: inputs.upper.len() as u64,
        bytes_in: inputs.upper.iter().map(|f| f.size).sum(),
        ..Default::default()
    };
    // Algorithm 1: read the victim (newest first for level 0).
    let mut aggregated: Vec<Aggregated> = Vec::new();
    let mut children: Vec<Box<dyn InternalIterator>> = Vec::new();
    let victims: Vec<&Arc<FileMeta>> = if level == 0 {
        inputs.upper.iter().rev().collect()
    } else {
        inputs.upper.iter().collect()
    };
    for f in victims {
        let t = ctx
            .table_cache
            .get(f.number, f.size, IoCategory::Compaction)?;
        if let Some(d) = t.as_dtable() {
            aggregated.extend(d.overlapped().iter().cloned());
        }
        children.push(Box::new(t.iter(rctx)));
    }
    let mut merged = MergingIterator::new(children);
    // Tombstones must stay while the output level or a deeper one may hold
    // the key: the output level keeps its older segments.
    let mut rule = DropRule::new(version, smallest_snapshot, level, ctx.vstore);
    let entries = collect(ctx, &mut merged, &mut rule, &mut st)?;
    let mut edit = VersionEdit::default();
    for f in &inputs.upper {
        edit.deleted.push((level, f.number));
    }
    let sink = Sink {
        version,
        smallest_snapshot,
        lwc,
    };
    sink.place(
        ctx,
        &entries,
        out_level,
        &inputs.lower,
        &aggregated,
        &mut edit,
        &mut st,
    )?;
    st.dropped += rule.dropped;
    st.tombstones_dropped += rule.tombstones;
    if st.files_out > 0 {
        ctx.fs
            .sync_dir(ctx.dir)
            .map_err(|e| Error::io(ctx.dir, e))?;
    }
    if let Some(last) = inputs
        .upper
        .iter()
        .map(|f| &f.largest)
        .max_by(|a, b| compare_internal(a, b))
    {
        edit.compact_pointers.push((level, last.clone()));
    }
    Ok((edit, st))
}

/// Rewrites the files of `inputs.level` (the bottommost-level step of a
/// manual range compaction, `output_level == level`) into new one-segment
/// DTables of that level, as a full merge: the equal division of §4.4
/// applied to the inputs together.
///
/// # Errors
/// `Io` or `Corruption` from reading the inputs or writing the outputs.
pub fn run_in_place(
    ctx: &mut JobContext<'_>,
    version: &Version,
    inputs: &CompactionInputs,
    smallest_snapshot: SeqNum,
) -> Result<(VersionEdit, CompactionStats)> {
    let rctx = ReadCtx {
        category: IoCategory::Compaction,
        fill_cache: false,
    };
    let level = inputs.level;
    let mut st = CompactionStats {
        compactions: 1,
        files_in: inputs.upper.len() as u64,
        bytes_in: inputs.upper.iter().map(|f| f.size).sum(),
        ..Default::default()
    };
    let mut children: Vec<Box<dyn InternalIterator>> = Vec::new();
    for f in inputs.upper.iter().rev() {
        let t = ctx
            .table_cache
            .get(f.number, f.size, IoCategory::Compaction)?;
        children.push(Box::new(t.iter(rctx)));
    }
    let mut merged = MergingIterator::new(children);
    let mut rule = DropRule::new(version, smallest_snapshot, level, ctx.vstore);
    let entries = collect(ctx, &mut merged, &mut rule, &mut st)?;
    st.dropped += rule.dropped;
    st.tombstones_dropped += rule.tombstones;
    let mut edit = VersionEdit::default();
    for f in &inputs.upper {
        edit.deleted.push((level, f.number));
    }
    if !entries.is_empty() {
        for f in write_new_tables(ctx, version, level, &entries, &mut st)? {
            edit.added.push((level, f));
        }
        ctx.fs
            .sync_dir(ctx.dir)
            .map_err(|e| Error::io(ctx.dir, e))?;
    }
    Ok((edit, st))
}

/// Where a lightweight compaction puts its entries: appended to the
/// targets of a level, pushed on to the next level, or divided.
struct Sink<'a> {
    version: &'a Version,
    smallest_snapshot: SeqNum,
    lwc: &'a LwcConfig,
}

impl Sink<'_> {
    /// Puts sorted `entries` into `level`, whose DTables overlapping them
    /// are `targets` (in key order): new tables when there are none, else
    /// one segment per target by the routing rule, a full target pushed
    /// down or divided (module docs). Targets pushed down go on, together,
    /// to `level + 1`.
    #[allow(clippy::too_many_arguments)]
    fn place(
        &self,
        ctx: &mut JobContext<'_>,
        entries: &[(Vec<u8>, Vec<u8>)],
        level: usize,
        targets: &[Arc<FileMeta>],
        aggregated: &[Aggregated],
        edit: &mut VersionEdit,
        st: &mut CompactionStats,
    ) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        if targets.is_empty() {
            for f in write_new_tables(ctx, self.version, level, entries, st)? {
                edit.added.push((level, f));
            }
            return Ok(());
        }
        let routes = route(entries, targets);
        // Entries of the targets pushed down, in key order (targets are
        // disjoint and visited in order), and those targets' copies of the
        // next level's metadata.
        let mut pushed: Entries = Vec::new();
        let mut pushed_aggregated: Vec<Aggregated> = Vec::new();
        let mut start = 0;
        while start < entries.len() {
            let j = routes[start];
            let end = start + routes[start..].iter().take_while(|&&r| r == j).count();
            let slice = &entries[start..end];
            start = end;
            ctx.output_done()?;
            if let Some((kept, overlapped)) =
                self.append(ctx, &targets[j], slice, level, aggregated, edit, st)?
            {
                pushed.extend(kept);
                pushed_aggregated.extend(overlapped);
            }
        }
        if pushed.is_empty() {
            return Ok(());
        }
        let (lo, hi) = (
            user_key(&pushed[0].0),
            user_key(&pushed[pushed.len() - 1].0),
        );
        let below = self.version.overlapping(level + 1, Some(lo), Some(hi));
        self.place(
            ctx,
            &pushed,
            level + 1,
            &below,
            &pushed_aggregated,
            edit,
            st,
        )
    }

    /// Appends `slice` to target `t` of `level` (Algorithm 3); or, when the
    /// append would pass a bound, merges `t` with `slice` and either
    /// returns the merged entries (with `t`'s overlapped metaindex) to be
    /// pushed to `level + 1`, or divides them in `level` (§4.4).
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    fn append(
        &self,
        ctx: &mut JobContext<'_>,
        t: &Arc<FileMeta>,
        slice: &[(Vec<u8>, Vec<u8>)],
        level: usize,
        aggregated: &[Aggregated],
        edit: &mut VersionEdit,
        st: &mut CompactionStats,
    ) -> Result<Option<(Entries, Vec<Aggregated>)>> {
        let (version, lwc) = (self.version, self.lwc);
        let slice_bytes: u64 = slice.iter().map(entry_bytes).sum();
        // §3.2: the victim's copy of the target's directory, if current.
        let copy = aggregated
            .iter()
            .find(|a| a.number == t.number && a.size == t.size)
            .map(|a| a.directory.clone());
        let directory: Option<Directory> = match copy {
            Some(d) => {
                st.metadata_from_victim += 1;
                Some(d)
            }
            None => {
                st.metadata_reads += 1;
                let r = ctx
                    .table_cache
                    .get(t.number, t.size, IoCategory::Compaction)?;
                r.as_dtable().map(|d| d.directory().clone())
            }
        };
        let fits = directory.as_ref().is_some_and(|d| {
            d.segments.len() < lwc.max_segments
                && t.size.saturating_add(slice_bytes) <= lwc.max_table_bytes
        });
        if let (true, Some(dir)) = (fits, directory.as_ref()) {
            let lo = min_key(&t.smallest, &slice[0].0);
            let hi = max_key(&t.largest, &slice[slice.len() - 1].0);
            let overlapped = aggregate(ctx, version, level + 1, &lo, &hi)?;
            let path = table_path(ctx.dir, t.number);
            let o = append_segment(
                ctx.fs,
                &path,
                Some(dir),
                slice.iter().map(|(k, v)| (k.as_slice(), v.as_slice())),
                &overlapped,
                &ctx.table_options,
                ctx.stats,
                IoCategory::Compaction,
            )?;
            st.segments_appended += 1;
            st.bytes_out += o.bytes_written;
            st.entries_out += slice.len() as u64;
            edit.deleted.push((level, t.number));
            edit.added.push((
                level,
                FileMeta {
                    number: t.number,
                    size: o.size,
                    smallest: lo,
                    largest: hi,
                },
            ));
            return Ok(None);
        }
        // The target is full: merge it with its new entries.
        let rctx = ReadCtx {
            category: IoCategory::Compaction,
            fill_cache: false,
        };
        let r = ctx
            .table_cache
            .get(t.number, t.size, IoCategory::Compaction)?;
        st.bytes_in += t.size;
        st.files_in += 1;
        let mut old = Vec::new();
        let mut it = r.iter(rctx);
        it.seek_to_first();
        while it.valid() {
            old.push((it.key().to_vec(), it.value().to_vec()));
            it.next();
        }
        it.status()?;
        let all = merge_sorted(slice.to_vec(), old);
        // Tombstones stay while `level + 1` or deeper may hold the key: the
        // merged entries land in `level` (division) or on top of the older
        // segments of `level + 1` (push-down).
        let mut rule = DropRule::new(version, self.smallest_snapshot, level, ctx.vstore);
        let mut kept = Vec::with_capacity(all.len());
        for (k, v) in all {
            st.entries_in += 1;
            if rule.keep(&k, &v).ok_or_else(|| bad_key(ctx))? {
                kept.push((k, v));
            }
        }
        // The slice's entries were counted once when read from the victim.
        st.entries_in -= slice.len() as u64;
        st.dropped += rule.dropped;
        st.tombstones_dropped += rule.tombstones;
        edit.deleted.push((level, t.number));
        if kept.is_empty() {
            return Ok(None);
        }
        // Push-down: while the next level holds tables under these keys,
        // append them there instead of rewriting them in this level; every
        // byte has to go down once anyway.
        let (lo, hi) = (user_key(&kept[0].0), user_key(&kept[kept.len() - 1].0));
        if lwc.push_down
            && level + 1 < ctx.picker.levels
            && !version
                .overlapping(level + 1, Some(lo), Some(hi))
                .is_empty()
        {
            st.pushdowns += 1;
            let overlapped = r
                .as_dtable()
                .map(|d| d.overlapped().to_vec())
                .unwrap_or_default();
            return Ok(Some((kept, overlapped)));
        }
        // §4.4 equal division: tables of equal size replace the target.
        st.divisions += 1;
        for f in write_new_tables(ctx, version, level, &kept, st)? {
            edit.added.push((level, f));
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::key::internal_key;

    fn meta(n: u64, lo: &str, hi: &str, size: u64) -> Arc<FileMeta> {
        Arc::new(FileMeta {
            number: n,
            size,
            smallest: internal_key(lo.as_bytes(), 1, ValueType::Value),
            largest: internal_key(hi.as_bytes(), 1, ValueType::Value),
        })
    }

    fn ents(keys: &[&str]) -> Entries {
        keys.iter()
            .map(|k| (internal_key(k.as_bytes(), 5, ValueType::Value), vec![0; 10]))
            .collect()
    }

    #[test]
    fn routing_keeps_ranges_and_balances_gaps() {
        let heavy = meta(1, "c", "e", 1000);
        let light = meta(2, "m", "p", 10);
        let e = ents(&["a", "c", "d", "f", "h", "m", "q"]);
        // Gap keys f, h go to the lighter neighbour.
        assert_eq!(
            route(&e, &[heavy.clone(), light.clone()]),
            vec![0, 0, 0, 1, 1, 1, 1]
        );
        let heavy2 = meta(2, "m", "p", 5000);
        assert_eq!(route(&e, &[heavy, heavy2]), vec![0, 0, 0, 0, 0, 1, 1]);
    }

    #[test]
    fn division_is_equal_and_cuts_between_user_keys() {
        let mut e = ents(&["a", "b", "c", "d", "e", "f", "g", "h"]);
        e.insert(3, (internal_key(b"c", 2, ValueType::Value), vec![0; 10]));
        let parts = divide(&e, 3);
        assert_eq!(parts.len(), 3);
        assert_eq!(parts.iter().map(|p| p.len()).sum::<usize>(), e.len());
        for w in parts.windows(2) {
            assert_ne!(user_key(&w[0].last().unwrap().0), user_key(&w[1][0].0));
        }
    }
}
