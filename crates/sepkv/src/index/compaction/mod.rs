//! Leveled compaction: merging the inputs chosen by the [`picker`] into new
//! SSTables of the next level; the LWC-tree's appending alternative is
//! [`lightweight`].
//!
//! For each user key the merge keeps the newest version and every version a
//! live snapshot may still read; older versions are dropped. A tombstone is
//! dropped when no snapshot needs it and no deeper level can hold the key
//! (so it has nothing left to hide). Output files are cut near
//! `target_file_size`, or earlier when they would overlap too much of the
//! level below the output, and only between user keys, so one user key never
//! spans two files of a level.
//!
//! A bottommost-level rewrite (`output_level == level`, picked by
//! [`picker::pick_in_place`] for a manual range compaction) merges files of
//! one level into that level again, under the same rules.
//!
//! The job only writes new files; the caller installs the returned
//! [`VersionEdit`] through the version set, then deletes the inputs.

pub mod lightweight;
pub mod picker;
pub mod rule;

use super::filename::table_path;
use super::iter::InternalIterator;
use super::key::{parse_internal_key, user_key, SeqNum, ValueType};
use super::merger::{LevelIterator, MergingIterator};
use super::sstable::{ReadCtx, TableBuilder, TableOptions};
use super::table_cache::TableCache;
use super::version::{FileMeta, TableCounts, Version, VersionEdit};
use crate::error::{Error, IoContext, Result};
use crate::fs::{FileSystem, IoCategory, IoStats};
use crate::vstore::ValueStore;
use picker::{CompactionInputs, PickerConfig};
use rule::{DropRule, FilterCtx, Verdict};
use std::cmp::Ordering;
use std::path::Path;
use std::sync::Arc;

/// What a compaction did (or, summed, what [`crate::Db::compact_range`]
/// did). Bytes are file bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct CompactionStats {
    /// Compactions run.
    pub compactions: u64,
    /// Input SSTables.
    pub files_in: u64,
    /// Output SSTables.
    pub files_out: u64,
    /// Entries read.
    pub entries_in: u64,
    /// Entries written.
    pub entries_out: u64,
    /// Entries dropped (shadowed versions and obsolete tombstones).
    pub dropped: u64,
    /// Tombstones dropped (part of `dropped`).
    pub tombstones_dropped: u64,
    /// Records the compaction filter removed (each either dropped, and
    /// then part of `dropped`, or written as a tombstone).
    pub filter_removed: u64,
    /// Bytes of input files.
    pub bytes_in: u64,
    /// Bytes of output files (for a lightweight compaction: bytes appended
    /// plus bytes of new DTables).
    pub bytes_out: u64,
    /// Segments appended to DTables (lightweight compaction, LWC-tree §3.1).
    pub segments_appended: u64,
    /// DTables divided because they passed a bound (§4.4).
    pub divisions: u64,
    /// DTables merged with their new entries (and then divided or pushed
    /// down) because an append would have left more than
    /// `lwc_dead_share` of their bytes dead.
    pub reclaims: u64,
    /// DTables that would have passed a bound and were instead merged with
    /// their new entries and appended to the next level (see
    /// `lightweight`'s module docs: push-down).
    pub pushdowns: u64,
    /// Appends whose target's metadata came from the victim's overlapped
    /// metaindex (§3.2), without reading the target.
    pub metadata_from_victim: u64,
    /// Appends that read the target's metadata (the victim's copy was
    /// missing or stale).
    pub metadata_reads: u64,
}

impl CompactionStats {
    /// Adds `o` to these figures.
    pub fn add(&mut self, o: &CompactionStats) {
        self.compactions += o.compactions;
        self.files_in += o.files_in;
        self.files_out += o.files_out;
        self.entries_in += o.entries_in;
        self.entries_out += o.entries_out;
        self.dropped += o.dropped;
        self.tombstones_dropped += o.tombstones_dropped;
        self.filter_removed += o.filter_removed;
        self.bytes_in += o.bytes_in;
        self.bytes_out += o.bytes_out;
        self.segments_appended += o.segments_appended;
        self.divisions += o.divisions;
        self.reclaims += o.reclaims;
        self.pushdowns += o.pushdowns;
        self.metadata_from_victim += o.metadata_from_victim;
        self.metadata_reads += o.metadata_reads;
    }
}

/// Everything a compaction or flush needs from the database.
pub struct JobContext<'a> {
    /// Database directory.
    pub dir: &'a Path,
    /// File system.
    pub fs: &'a dyn FileSystem,
    /// I/O accounting.
    pub stats: &'a Arc<IoStats>,
    /// Open tables.
    pub table_cache: &'a Arc<TableCache>,
    /// Table format options.
    pub table_options: TableOptions,
    /// Picker configuration (target size, overlap limit).
    pub picker: PickerConfig,
    /// The value store (told about pointers compaction drops).
    pub vstore: &'a dyn ValueStore,
    /// The compaction filter, when one is set (never used by a flush).
    pub filter: Option<FilterCtx<'a>>,
    /// Hands out file numbers.
    pub new_file_number: &'a mut dyn FnMut() -> u64,
    /// Called by a compaction between two outputs (files written, segments
    /// appended): the background thread flushes a waiting memtable there,
    /// as LevelDB's compaction loop does, so that writers do not wait a
    /// whole compaction for room. `None` in a flush.
    pub between_outputs: Option<&'a dyn Fn() -> Result<()>>,
}

impl JobContext<'_> {
    /// Runs [`JobContext::between_outputs`], if set: a compaction calls it
    /// once an output is written.
    pub fn output_done(&self) -> Result<()> {
        match self.between_outputs {
            Some(between) => between(),
            None => Ok(()),
        }
    }
}

/// Writes the entries of `iter` (already positioned or not) into SSTables,
/// cutting files per the rules in the module docs. `rule` decides, per
/// entry, whether it is kept (a flush passes none: every entry is).
fn write_tables(
    ctx: &mut JobContext<'_>,
    iter: &mut dyn InternalIterator,
    category: IoCategory,
    grandparents: &[Arc<FileMeta>],
    mut rule: Option<&mut DropRule<'_>>,
    stats: &mut CompactionStats,
) -> Result<Vec<(FileMeta, TableCounts)>> {
    let mut outputs = Vec::new();
    let mut builder: Option<(u64, TableBuilder, TableCounts)> = None;
    // The user key of the last entry written to the current output.
    let mut last_written: Option<Vec<u8>> = None;
    let mut last_user_key: Option<Vec<u8>> = None;
    let mut gp_index = 0usize;
    let mut gp_overlap = 0u64;
    let mut seen_key = false;
    iter.seek_to_first();
    while iter.valid() {
        let ikey = iter.key();
        let p = parse_internal_key(ikey).ok_or_else(|| {
            Error::corruption(ctx.dir, 0, "unparsable internal key in compaction input")
        })?;
        stats.entries_in += 1;
        let new_user_key = last_user_key.as_deref() != Some(p.user_key);
        if new_user_key {
            // Track overlap with the grandparent level, then decide whether
            // to cut the current output before this key.
            while gp_index < grandparents.len()
                && user_key(&grandparents[gp_index].largest) < p.user_key
            {
                if seen_key {
                    gp_overlap += grandparents[gp_index].size;
                }
                gp_index += 1;
            }
            seen_key = true;
            let cut = builder.as_ref().is_some_and(|(_, b, _)| {
                b.estimated_size() >= ctx.picker.target_file_size
                    || gp_overlap > ctx.picker.max_grandparent_overlap()
            });
            if cut {
                let (n, b, c) = builder.take().expect("builder");
                finish_output(n, b, c, &mut outputs, stats)?;
                gp_overlap = 0;
                ctx.output_done()?;
            }
            last_user_key = Some(p.user_key.to_vec());
        }
        let verdict = match rule.as_deref_mut() {
            Some(r) => r.verdict(ikey, iter.value(), true).ok_or_else(|| {
                Error::corruption(ctx.dir, 0, "unparsable internal key in compaction input")
            })?,
            None => Verdict::Keep,
        };
        if verdict != Verdict::Drop {
            if builder.is_none() {
                let n = (ctx.new_file_number)();
                let path = table_path(ctx.dir, n);
                let file = ctx.fs.create(&path).ctx(&path)?;
                builder = Some((
                    n,
                    TableBuilder::new(
                        file,
                        path,
                        ctx.table_options.clone(),
                        ctx.stats.clone(),
                        category,
                    ),
                    TableCounts::default(),
                ));
                last_written = None;
            }
            let (_, b, counts) = builder.as_mut().expect("builder");
            let deletion = match (verdict, rule.as_deref()) {
                (Verdict::Replace, Some(r)) => {
                    b.add(r.replacement(), &[])?;
                    true
                }
                _ => {
                    b.add(ikey, iter.value())?;
                    p.vtype == ValueType::Deletion
                }
            };
            let same_key = last_written.as_deref() == Some(p.user_key);
            counts.add(deletion, same_key, p.seq);
            if !same_key {
                last_written = Some(p.user_key.to_vec());
            }
            stats.entries_out += 1;
        }
        iter.next();
    }
    iter.status()?;
    if let Some((n, b, c)) = builder.take() {
        finish_output(n, b, c, &mut outputs, stats)?;
    }
    if !outputs.is_empty() {
        ctx.fs.sync_dir(ctx.dir).ctx(ctx.dir)?;
    }
    Ok(outputs)
}

fn finish_output(
    number: u64,
    b: TableBuilder,
    counts: TableCounts,
    outputs: &mut Vec<(FileMeta, TableCounts)>,
    stats: &mut CompactionStats,
) -> Result<()> {
    let s = b.finish()?;
    stats.bytes_out += s.file_size;
    outputs.push((
        FileMeta {
            number,
            size: s.file_size,
            smallest: s.smallest,
            largest: s.largest,
        },
        counts,
    ));
    Ok(())
}

/// Writes a memtable (or any iterator) into level-0-style tables: every
/// entry is kept. Returns the new files (usually one), each with what it
/// holds.
pub fn flush_to_tables(
    ctx: &mut JobContext<'_>,
    iter: &mut dyn InternalIterator,
) -> Result<Vec<(FileMeta, TableCounts)>> {
    let mut st = CompactionStats::default();
    let saved = ctx.picker.target_file_size;
    // A flush produces one file however large the memtable is.
    ctx.picker.target_file_size = u64::MAX;
    let r = write_tables(ctx, iter, IoCategory::Flush, &[], None, &mut st);
    ctx.picker.target_file_size = saved;
    r
}

/// Runs the merge of `inputs` as of `smallest_snapshot` (the oldest sequence
/// number a reader may still use) and returns the edit to install.
pub fn run_compaction(
    ctx: &mut JobContext<'_>,
    version: &Version,
    inputs: &CompactionInputs,
    smallest_snapshot: SeqNum,
) -> Result<(VersionEdit, CompactionStats)> {
    let rctx = ReadCtx {
        category: IoCategory::Compaction,
        fill_cache: false,
    };
    let mut children: Vec<Box<dyn InternalIterator>> = Vec::new();
    if inputs.level == 0 {
        // Newest first.
        for f in inputs.upper.iter().rev() {
            let t = ctx
                .table_cache
                .get(f.number, f.size, IoCategory::Compaction)?;
            children.push(Box::new(t.iter(rctx)));
        }
    } else {
        children.push(Box::new(LevelIterator::new(
            inputs.upper.clone(),
            ctx.table_cache.clone(),
            rctx,
        )));
    }
    if !inputs.lower.is_empty() {
        children.push(Box::new(LevelIterator::new(
            inputs.lower.clone(),
            ctx.table_cache.clone(),
            rctx,
        )));
    }
    let mut merged = MergingIterator::new(children);
    let mut st = CompactionStats {
        compactions: 1,
        files_in: (inputs.upper.len() + inputs.lower.len()) as u64,
        bytes_in: inputs
            .upper
            .iter()
            .chain(&inputs.lower)
            .map(|f| f.size)
            .sum(),
        ..Default::default()
    };
    let output_level = inputs.output_level;
    let mut rule = DropRule::new(
        version,
        smallest_snapshot,
        output_level,
        ctx.vstore,
        ctx.filter,
    );
    let outputs = write_tables(
        ctx,
        &mut merged,
        IoCategory::Compaction,
        &inputs.grandparents,
        Some(&mut rule),
        &mut st,
    )?;
    // `write_tables` counted the entries read.
    rule.tally(0, &mut st);
    st.files_out = outputs.len() as u64;
    let mut edit = VersionEdit::default();
    for f in &inputs.upper {
        edit.deleted.push((inputs.level, f.number));
    }
    for f in &inputs.lower {
        edit.deleted.push((output_level, f.number));
    }
    for (f, c) in outputs {
        edit.table_counts.push((f.number, c));
        edit.added.push((output_level, f));
    }
    if let Some(last) = inputs
        .upper
        .iter()
        .filter(|_| output_level > inputs.level)
        .map(|f| &f.largest)
        .max_by(|a, b| super::key::compare_internal(a, b))
    {
        edit.compact_pointers.push((inputs.level, last.clone()));
    }
    debug_assert!(edit
        .added
        .windows(2)
        .all(
            |w| super::key::compare_internal(&w[0].1.largest, &w[1].1.smallest) == Ordering::Less
        ));
    Ok((edit, st))
}
