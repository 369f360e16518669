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
//!   merged entries are divided into `n = ceil(bytes / target_file_size)`
//!   DTables of equal size (cut between user keys) that replace the target
//!   in its level. The bytes are the target's size plus its new entries',
//!   known before the merge; what the merge drops makes the last part the
//!   smaller. A run of new entries too long to hold (below) is cut into
//!   parts of `target_file_size` instead.
//!
//! An SSTable target (flushed straight into a deeper level) is treated the
//! same way, since only DTables take appends.
//!
//! **Reclaim** (ours; §3.3 leaves stale versions and tails in place). A
//! target whose dead bytes — stale tails of earlier appends and torn
//! appends, and the entries its newer segments shadow
//! ([`DTable::dead_bytes`](crate::index::dtable::DTable::dead_bytes)) —
//! plus what the new run would shadow (its user keys probed against the
//! target's segment filters, in memory) would pass `dead_share` of its
//! size after the append is treated as a full target: merged with its run,
//! which drops the stale versions and the old tails, and divided (or
//! pushed down). The run records what it shadowed in its segment when it
//! is appended, so the count survives a reopen. A load of new keys shadows
//! nothing (a filter's false positive aside) and never reclaims.
//!
//! **Memory.** The victim is read as a stream, one target's run of entries
//! at a time, and a run is held in memory (in one buffer) only up to
//! `max_table_bytes`: a longer run cannot fit its target, so the target is
//! merged with what is held and the rest of the run as it streams in. A
//! division and a new table stream their output. A compaction therefore
//! holds at most about `max_table_bytes` of entries whatever its victim's
//! size (level 0 may hold many flushed tables), so that it does not take
//! memory the page cache would give to reads. With push-down on, a full
//! target's merged entries are held until it is known where they go.
//!
//! **Bounds and space amplification.** Every DTable holds at most
//! `max_segments` segments and about `max_table_bytes` bytes (one segment
//! more than the bound is never written). A lookup therefore reads at most
//! `max_segments` index blocks' worth of candidates but, by the per-block
//! filters, one data block in the common case. The stale versions a DTable
//! can hold are those of its older segments; reclaim keeps them and the
//! stale tails (as estimated) at most `dead_share` of the table after each
//! append, so the bottom level's space amplification stays near
//! `1 / (1 - dead_share)` (1.33 by default) and upper levels add their
//! usual `1 / (ratio - 1)`. A table no append reaches keeps what it has.
//! The measured figures are in `docs/design/lwc-tree.md`.
//!
//! The job only writes; the caller installs the returned edit and then
//! deletes obsolete files.

use super::picker::{self, Choice, CompactionInputs, PickerConfig};
use super::rule::{DropRule, Verdict};
use super::{CompactionStats, JobContext};
use crate::error::{Error, Result};
use crate::fs::IoCategory;
use crate::index::dtable::{append_segment, Aggregated, Directory, Shadowed};
use crate::index::filename::table_path;
use crate::index::iter::InternalIterator;
use crate::index::key::{compare_internal, user_key, SeqNum};
use crate::index::merger::MergingIterator;
use crate::index::sstable::ReadCtx;
use crate::index::version::{FileMeta, Version, VersionEdit};
use std::cmp::Ordering;
use std::path::Path;
use std::sync::Arc;

/// Default of [`LwcConfig::dead_share`] and `Options::lwc_dead_share`.
pub const DEFAULT_DEAD_SHARE: f64 = 0.25;

/// Default of `Options::lwc_seek_merge_bytes`: bytes of a DTable per read
/// charge (an extra segment a seek positioned a cursor in, or a lookup
/// that consulted more than one segment) before its segments are merged.
pub const DEFAULT_SEEK_MERGE_BYTES: u64 = 1024;

/// Bounds of the LWC-tree's DTables (§4.4).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LwcConfig {
    /// Most segments a DTable may hold (default: the level size ratio,
    /// the paper's division number).
    pub max_segments: usize,
    /// Most bytes a DTable may hold (default: 4 × `target_file_size`).
    pub max_table_bytes: u64,
    /// Push full DTables down instead of dividing them where the next
    /// level holds their keys (`Options::lwc_push_down`).
    pub push_down: bool,
    /// Parts of an equal division (`Options::lwc_division_number`); 0
    /// divides into parts of about `target_file_size`.
    pub division_number: usize,
    /// Share of a target's bytes, dead once an append lands, past which
    /// the target is merged with its new entries instead (dropping them)
    /// ([`DTable::dead_bytes`](crate::index::dtable::DTable::dead_bytes)
    /// plus what the new segment would shadow; `Options::lwc_dead_share`).
    pub dead_share: f64,
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
            division_number: 0,
            dead_share: DEFAULT_DEAD_SHARE,
        }
    }

    /// The divider of a full target's `total` merged bytes (§4.4): `n`
    /// equal parts with a division number, else parts of about
    /// `target_file_size`.
    fn divider(&self, total: u64, target_file_size: u64) -> Divider {
        match self.division_number {
            0 => Divider::equal(total, target_file_size),
            n => Divider::new(total.div_ceil(n as u64)),
        }
    }
}

/// The next automatic compaction of an LWC-tree: the leveled picker's
/// choice (same scores, same victims, and the same trivial moves of a
/// level-0 file that overlaps nothing below), except that a victim of
/// level 1 or deeper with no overlap below is always moved (moving a DTable
/// keeps its segments; there is nothing to append to).
///
/// A level-0 SSTable moved down stays an SSTable in a level of DTables.
/// The first victim that reaches it merges it with its new entries and
/// divides the result into DTables (an SSTable takes no appends), which
/// writes its bytes once, as rewriting it on the way down would have; a
/// sequential load, whose tables never overlap, writes them never.
pub fn pick(v: &Version, cfg: &PickerConfig, compact_pointers: &[Option<&[u8]>]) -> Choice {
    match picker::pick(v, cfg, compact_pointers) {
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

fn bad_key(dir: &Path) -> Error {
    Error::corruption(dir, 0, "unparsable internal key in compaction input")
}

/// Bytes a run's buffer has room for past the bound it is filled to: the
/// entry that passes the bound (larger ones make the buffer grow).
const RUN_SLACK: usize = 64 << 10;

/// Sorted entries held in one buffer: the bytes of every key and value back
/// to back, and where each ends. A compaction keeps at most one target's
/// run of new entries here (and, with push-down, the full targets it
/// carries down), in two allocations rather than two per entry.
#[derive(Default)]
struct EntryBuf {
    data: Vec<u8>,
    /// End of each entry's key and of its value in `data`.
    ends: Vec<(usize, usize)>,
}

impl EntryBuf {
    /// A buffer with room for `bytes` of keys and values (and a few more:
    /// it is filled until it passes `bytes`).
    fn with_capacity(bytes: u64) -> Self {
        let bytes = usize::try_from(bytes).unwrap_or(usize::MAX / 2);
        EntryBuf {
            data: Vec::with_capacity(bytes.saturating_add(RUN_SLACK)),
            ends: Vec::new(),
        }
    }

    fn push(&mut self, k: &[u8], v: &[u8]) {
        self.data.extend_from_slice(k);
        let key_end = self.data.len();
        self.data.extend_from_slice(v);
        self.ends.push((key_end, self.data.len()));
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Bytes of keys and values held.
    fn bytes(&self) -> u64 {
        self.data.len() as u64
    }

    /// Entry `i` as (internal key, value).
    fn get(&self, i: usize) -> (&[u8], &[u8]) {
        let start = if i == 0 { 0 } else { self.ends[i - 1].1 };
        let (key_end, end) = self.ends[i];
        (&self.data[start..key_end], &self.data[key_end..end])
    }

    fn clear(&mut self) {
        self.data.clear();
        self.ends.clear();
    }

    /// Adds every entry of `other` after this buffer's.
    fn extend_from(&mut self, other: &EntryBuf) {
        let base = self.data.len();
        self.data.extend_from_slice(&other.data);
        self.ends
            .extend(other.ends.iter().map(|&(k, v)| (base + k, base + v)));
    }
}

/// A sorted stream of entries whose next entry can be looked at before it
/// is taken.
trait Source {
    /// The next entry (internal key, value), or `None` at the end.
    fn peek(&mut self) -> Result<Option<(&[u8], &[u8])>>;
    /// Moves past the entry [`Source::peek`] returned.
    fn advance(&mut self);
}

/// A merged cursor through a [`DropRule`]: the entries that survive it.
struct Filtered<'a, I> {
    iter: I,
    rule: DropRule<'a>,
    /// The cursor is positioned and its entry passed the rule (as what
    /// the verdict says: itself or the rule's replacement).
    ready: Option<Verdict>,
    /// Entries the rule has seen.
    seen: u64,
    dir: &'a Path,
}

impl<'a, I: InternalIterator> Filtered<'a, I> {
    /// `iter` positioned at its first entry, through `rule`.
    fn new(mut iter: I, rule: DropRule<'a>, dir: &'a Path) -> Self {
        iter.seek_to_first();
        Filtered {
            iter,
            rule,
            ready: None,
            seen: 0,
            dir,
        }
    }

    /// Adds what the rule saw and dropped to `st`.
    fn tally(&self, st: &mut CompactionStats) {
        self.rule.tally(self.seen, st);
    }
}

impl<I: InternalIterator> Source for Filtered<'_, I> {
    fn peek(&mut self) -> Result<Option<(&[u8], &[u8])>> {
        while self.ready.is_none() && self.iter.valid() {
            self.seen += 1;
            let verdict = self
                .rule
                .verdict(self.iter.key(), self.iter.value(), true)
                .ok_or_else(|| bad_key(self.dir))?;
            if verdict == Verdict::Drop {
                self.iter.next();
            } else {
                self.ready = Some(verdict);
            }
        }
        if !self.iter.valid() {
            self.iter.status()?;
            return Ok(None);
        }
        Ok(Some(match self.ready {
            Some(Verdict::Replace) => (self.rule.replacement(), &[]),
            _ => (self.iter.key(), self.iter.value()),
        }))
    }

    fn advance(&mut self) {
        self.iter.next();
        self.ready = None;
    }
}

/// The entries of an [`EntryBuf`] as a [`Source`].
struct BufSource {
    buf: EntryBuf,
    pos: usize,
}

impl Source for BufSource {
    fn peek(&mut self) -> Result<Option<(&[u8], &[u8])>> {
        Ok((self.pos < self.buf.len()).then(|| self.buf.get(self.pos)))
    }

    fn advance(&mut self) {
        self.pos += 1;
    }
}

/// Where cuts fall when entries are divided into tables of about `per`
/// bytes: before an entry, once the current table holds `per` bytes or
/// more, and only between two user keys (every version of a key stays in
/// one table, so levels stay disjoint).
struct Divider {
    per: u64,
    acc: u64,
    last_user_key: Vec<u8>,
}

impl Divider {
    /// Parts of about `per` bytes (at least 1).
    fn new(per: u64) -> Self {
        Divider {
            per: per.max(1),
            acc: 0,
            last_user_key: Vec::new(),
        }
    }

    /// Equal division (§4.4) of about `total` bytes into `ceil(total /
    /// target)` parts.
    fn equal(total: u64, target: u64) -> Self {
        let n = total.div_ceil(target.max(1)).max(1);
        Self::new(total.div_ceil(n))
    }

    /// Whether the current part ends before the entry with internal key
    /// `k`; never before a part's first entry, since the part then holds
    /// no bytes.
    fn cut_before(&self, k: &[u8]) -> bool {
        self.acc >= self.per && user_key(k) != self.last_user_key.as_slice()
    }

    /// Counts the entry `(k, v)` into the current part.
    fn take(&mut self, k: &[u8], v: &[u8]) {
        self.acc += (k.len() + v.len()) as u64;
        self.last_user_key.clear();
        self.last_user_key.extend_from_slice(user_key(k));
    }

    /// Starts the next part.
    fn next_part(&mut self) {
        self.acc = 0;
    }
}

/// Writes the rest of `src` as new one-segment DTables of `level`, cut by
/// `divider`, and returns their metadata.
fn write_new_tables(
    ctx: &mut JobContext<'_>,
    version: &Version,
    level: usize,
    src: &mut dyn Source,
    mut divider: Divider,
    st: &mut CompactionStats,
) -> Result<Vec<FileMeta>> {
    let mut out = Vec::new();
    while src.peek()?.is_some() {
        ctx.output_done()?;
        let number = (ctx.new_file_number)();
        let path = table_path(ctx.dir, number);
        divider.next_part();
        let mut entries = 0u64;
        let job: &JobContext<'_> = ctx;
        let o = append_segment(
            job.fs,
            &path,
            None,
            Shadowed::default(),
            |add| {
                while let Some((k, v)) = src.peek()? {
                    if divider.cut_before(k) {
                        break;
                    }
                    add(k, v)?;
                    divider.take(k, v);
                    entries += 1;
                    src.advance();
                }
                Ok(())
            },
            |lo, hi| aggregate(job, version, level + 1, lo, hi),
            &job.table_options,
            job.stats,
            IoCategory::Compaction,
        )?;
        st.bytes_out += o.bytes_written;
        st.files_out += 1;
        st.entries_out += entries;
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

/// Routes sorted user keys to the targets of a level (in key order) by the
/// routing rule of the module docs. Keys must come in order; the target of
/// a key never precedes that of an earlier key, and asking again for the
/// same key gives the same target.
struct Router<'t> {
    targets: &'t [Arc<FileMeta>],
    j: usize,
}

impl<'t> Router<'t> {
    fn new(targets: &'t [Arc<FileMeta>]) -> Self {
        Router { targets, j: 0 }
    }

    /// The index of the target of user key `uk`.
    fn route(&mut self, uk: &[u8]) -> usize {
        while self.j + 1 < self.targets.len() {
            let (cur, nxt) = (&self.targets[self.j], &self.targets[self.j + 1]);
            let in_next = uk >= user_key(&nxt.smallest);
            let in_gap = uk > user_key(&cur.largest);
            if in_next || (in_gap && nxt.size < cur.size) {
                self.j += 1;
            } else {
                break;
            }
        }
        self.j
    }
}

/// The victims' stream, its router, and the target whose run it holds.
type Rest<'r, 's, 't> = (&'r mut (dyn Source + 's), &'r mut Router<'t>, usize);

/// A full target merged with its run of new entries, through the drop rule
/// of the target's level: the target's cursor on one side; on the other
/// the run, first what was buffered, then what the victims' stream still
/// holds for the same target.
struct TargetMerge<'r, 's, 't, 'a, I> {
    table: I,
    run: &'r EntryBuf,
    pos: usize,
    /// The victims' stream and its router, while the run goes on there.
    rest: Option<Rest<'r, 's, 't>>,
    rule: DropRule<'a>,
    /// Which side the peeked entry comes from (true: the table), once it
    /// passed the rule, and the rule's verdict on it.
    ready: Option<(bool, Verdict)>,
    /// Entries of the table the rule has seen.
    table_seen: u64,
    dir: &'a Path,
}

/// The run's entry at `pos`: from the buffer, else the stream's next entry
/// while it routes to the same target (the stream is let go at the first
/// that does not).
fn run_entry<'s>(
    run: &'s EntryBuf,
    pos: usize,
    rest: &'s mut Option<Rest<'_, '_, '_>>,
) -> Result<Option<(&'s [u8], &'s [u8])>> {
    if pos < run.len() {
        return Ok(Some(run.get(pos)));
    }
    let routed = match rest.as_mut() {
        Some((src, router, j)) => match src.peek()? {
            Some((k, _)) => router.route(user_key(k)) == *j,
            None => false,
        },
        None => false,
    };
    if !routed {
        *rest = None;
        return Ok(None);
    }
    match rest.as_mut() {
        Some((src, _, _)) => src.peek(),
        None => Ok(None),
    }
}

impl<I: InternalIterator> TargetMerge<'_, '_, '_, '_, I> {
    /// The side of the smaller next entry (true: the table), or `None` at
    /// the end of both.
    fn smaller(&mut self) -> Result<Option<bool>> {
        let run = run_entry(self.run, self.pos, &mut self.rest)?;
        if !self.table.valid() {
            self.table.status()?;
            return Ok(run.map(|_| false));
        }
        Ok(Some(match run {
            Some((k, _)) => compare_internal(self.table.key(), k) != Ordering::Greater,
            None => true,
        }))
    }

    fn advance_side(&mut self, table: bool) {
        if table {
            self.table.next();
        } else if self.pos < self.run.len() {
            self.pos += 1;
        } else if let Some((src, _, _)) = self.rest.as_mut() {
            src.advance();
        }
    }

    /// Adds what the rule saw of the table and dropped to `st` (the run's
    /// entries were counted where they were read).
    fn tally(&self, st: &mut CompactionStats) {
        self.rule.tally(self.table_seen, st);
    }
}

impl<I: InternalIterator> Source for TargetMerge<'_, '_, '_, '_, I> {
    fn peek(&mut self) -> Result<Option<(&[u8], &[u8])>> {
        let (side, verdict) = loop {
            if let Some(ready) = self.ready {
                break ready;
            }
            let Some(side) = self.smaller()? else {
                return Ok(None);
            };
            // The run's entries passed the victims' rule, which offered
            // their keys to the filter; a key the table alone holds is
            // offered here.
            let verdict = if side {
                self.table_seen += 1;
                self.rule
                    .verdict(self.table.key(), self.table.value(), true)
            } else {
                match run_entry(self.run, self.pos, &mut self.rest)? {
                    Some((k, v)) => self.rule.verdict(k, v, false),
                    None => return Ok(None),
                }
            }
            .ok_or_else(|| bad_key(self.dir))?;
            if verdict == Verdict::Drop {
                self.advance_side(side);
            } else {
                self.ready = Some((side, verdict));
            }
        };
        if verdict == Verdict::Replace {
            Ok(Some((self.rule.replacement(), &[])))
        } else if side {
            Ok(Some((self.table.key(), self.table.value())))
        } else {
            run_entry(self.run, self.pos, &mut self.rest)
        }
    }

    fn advance(&mut self) {
        if let Some((side, _)) = self.ready.take() {
            self.advance_side(side);
        }
    }
}

/// The user keys of `run`'s entries, each once (a key's versions are
/// adjacent in a sorted run).
fn run_user_keys(run: &EntryBuf) -> impl Iterator<Item = &[u8]> {
    let mut last: Option<&[u8]> = None;
    (0..run.len()).filter_map(move |i| {
        let uk = user_key(run.get(i).0);
        if last == Some(uk) {
            return None;
        }
        last = Some(uk);
        Some(uk)
    })
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
    // Algorithm 1: read the victim (newest first for level 0), as a stream.
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
    // Tombstones must stay while the output level or a deeper one may hold
    // the key: the output level keeps its older segments.
    let rule = DropRule::new(version, smallest_snapshot, level, ctx.vstore, ctx.filter);
    let mut src = Filtered::new(MergingIterator::new(children), rule, ctx.dir);
    let mut edit = VersionEdit::default();
    for f in &inputs.upper {
        edit.deleted.push((level, f.number));
    }
    let sink = Sink {
        version,
        smallest_snapshot,
        lwc,
    };
    let estimate = st.bytes_in;
    sink.place(
        ctx,
        &mut src,
        estimate,
        out_level,
        &inputs.lower,
        &aggregated,
        &mut edit,
        &mut st,
    )?;
    src.tally(&mut st);
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
/// manual range compaction, `output_level == level`, or a seek merge of
/// one DTable that reads found too many segments in) into new one-segment
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
    let rule = DropRule::new(version, smallest_snapshot, level, ctx.vstore, ctx.filter);
    let mut src = Filtered::new(MergingIterator::new(children), rule, ctx.dir);
    let divider = Divider::equal(st.bytes_in, ctx.picker.target_file_size);
    let tables = write_new_tables(ctx, version, level, &mut src, divider, &mut st)?;
    src.tally(&mut st);
    let mut edit = VersionEdit::default();
    for f in &inputs.upper {
        edit.deleted.push((level, f.number));
    }
    if !tables.is_empty() {
        for f in tables {
            edit.added.push((level, f));
        }
        ctx.fs
            .sync_dir(ctx.dir)
            .map_err(|e| Error::io(ctx.dir, e))?;
    }
    Ok((edit, st))
}

/// Full targets pushed down from one level: their merged entries, in key
/// order (targets are disjoint and visited in order), and their copies of
/// the next level's metadata.
#[derive(Default)]
struct Pushed {
    entries: EntryBuf,
    aggregated: Vec<Aggregated>,
}

/// Where a lightweight compaction puts its entries: appended to the
/// targets of a level, pushed on to the next level, or divided.
struct Sink<'a> {
    version: &'a Version,
    smallest_snapshot: SeqNum,
    lwc: &'a LwcConfig,
}

impl Sink<'_> {
    /// Puts the sorted entries of `src` (about `estimate` bytes) into
    /// `level`, whose DTables overlapping them are `targets` (in key order):
    /// new tables when there are none, else one segment per target by the
    /// routing rule, a full target pushed down or divided (module docs).
    /// Targets pushed down go on, together, to `level + 1`.
    ///
    /// Entries are taken from `src` one target's run at a time; a run is
    /// held in memory up to `max_table_bytes` (past that it cannot fit its
    /// target, and the rest of it streams into the target's division).
    #[allow(clippy::too_many_arguments)]
    fn place(
        &self,
        ctx: &mut JobContext<'_>,
        src: &mut dyn Source,
        estimate: u64,
        level: usize,
        targets: &[Arc<FileMeta>],
        aggregated: &[Aggregated],
        edit: &mut VersionEdit,
        st: &mut CompactionStats,
    ) -> Result<()> {
        if src.peek()?.is_none() {
            return Ok(());
        }
        if targets.is_empty() {
            let divider = Divider::equal(estimate, ctx.picker.target_file_size);
            for f in write_new_tables(ctx, self.version, level, src, divider, st)? {
                edit.added.push((level, f));
            }
            return Ok(());
        }
        let mut router = Router::new(targets);
        // Room for the longest run held, so that the buffer does not grow
        // by doubling past it (pages not written stay unallocated).
        let mut run = EntryBuf::with_capacity(self.lwc.max_table_bytes);
        let mut pushed = Pushed::default();
        while let Some((k, _)) = src.peek()? {
            let j = router.route(user_key(k));
            run.clear();
            let ended = loop {
                match src.peek()? {
                    None => break true,
                    Some((k, v)) => {
                        if router.route(user_key(k)) != j {
                            break true;
                        }
                        if run.bytes() > self.lwc.max_table_bytes {
                            break false;
                        }
                        run.push(k, v);
                    }
                }
                src.advance();
            };
            ctx.output_done()?;
            let rest = (!ended).then_some((&mut *src, &mut router, j));
            self.append(
                ctx,
                &targets[j],
                &run,
                rest,
                level,
                aggregated,
                edit,
                st,
                &mut pushed,
            )?;
        }
        let Pushed {
            entries,
            aggregated,
        } = pushed;
        if entries.is_empty() {
            return Ok(());
        }
        let lo = user_key(entries.get(0).0).to_vec();
        let hi = user_key(entries.get(entries.len() - 1).0).to_vec();
        let below = self.version.overlapping(level + 1, Some(&lo), Some(&hi));
        let estimate = entries.bytes();
        self.place(
            ctx,
            &mut BufSource {
                buf: entries,
                pos: 0,
            },
            estimate,
            level + 1,
            &below,
            &aggregated,
            edit,
            st,
        )
    }

    /// Appends `run` to target `t` of `level` (Algorithm 3) when the run
    /// ended there (`rest` is `None`) and the append passes no bound; or
    /// else merges `t` with the run (and, with `rest`, the run's remainder
    /// still in the victims' stream) and either adds the merged entries
    /// (with `t`'s overlapped metaindex) to `pushed`, to go to `level + 1`,
    /// or divides them in `level` (§4.4).
    #[allow(clippy::too_many_arguments)]
    fn append(
        &self,
        ctx: &mut JobContext<'_>,
        t: &Arc<FileMeta>,
        run: &EntryBuf,
        rest: Option<Rest<'_, '_, '_>>,
        level: usize,
        aggregated: &[Aggregated],
        edit: &mut VersionEdit,
        st: &mut CompactionStats,
        pushed: &mut Pushed,
    ) -> Result<()> {
        let (version, lwc) = (self.version, self.lwc);
        // §3.2: the victim's copy of the target's directory, if current.
        let copy = aggregated
            .iter()
            .find(|a| a.number == t.number && a.size == t.size)
            .map(|a| a.directory.clone());
        let from_victim = copy.is_some();
        let directory: Option<Directory> = match copy {
            Some(d) => Some(d),
            None => {
                let r = ctx
                    .table_cache
                    .get(t.number, t.size, IoCategory::Compaction)?;
                r.as_dtable().map(|d| d.directory().clone())
            }
        };
        let whole_run = rest.is_none();
        let mut fits = whole_run
            && directory.as_ref().is_some_and(|d| {
                d.segments.len() < lwc.max_segments
                    && t.size.saturating_add(run.bytes()) <= lwc.max_table_bytes
            });
        // Reclaim: a target whose dead bytes (stale tails, versions its
        // newer segments shadow) would pass `dead_share` of its size with
        // this append is merged with its new entries instead, as a full
        // one is, which drops them.
        let mut shadowed = Shadowed::default();
        if fits {
            let r = ctx
                .table_cache
                .get(t.number, t.size, IoCategory::Compaction)?;
            if let Some(d) = r.as_dtable() {
                shadowed = d.shadowed_by(run_user_keys(run));
                let dead = d.dead_bytes()?.saturating_add(shadowed.bytes);
                let total = t.size.saturating_add(run.bytes());
                if dead as f64 > lwc.dead_share * total as f64 {
                    fits = false;
                    st.reclaims += 1;
                }
            }
        }
        if let (true, Some(dir)) = (fits, directory.as_ref()) {
            let lo = min_key(&t.smallest, run.get(0).0);
            let hi = max_key(&t.largest, run.get(run.len() - 1).0);
            let path = table_path(ctx.dir, t.number);
            let job: &JobContext<'_> = ctx;
            let o = append_segment(
                job.fs,
                &path,
                Some(dir),
                shadowed,
                |add| {
                    (0..run.len()).try_for_each(|i| {
                        let (k, v) = run.get(i);
                        add(k, v)
                    })
                },
                |_, _| aggregate(job, version, level + 1, &lo, &hi),
                &job.table_options,
                job.stats,
                IoCategory::Compaction,
            )?;
            st.segments_appended += 1;
            // Counted for appends only: a full target is read whole below,
            // whichever copy of its directory was at hand.
            if from_victim {
                st.metadata_from_victim += 1;
            } else {
                st.metadata_reads += 1;
            }
            st.bytes_out += o.bytes_written;
            st.entries_out += run.len() as u64;
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
            return Ok(());
        }
        // The target is full: merge it with its new entries. Tombstones
        // stay while `level + 1` or deeper may hold the key: the merged
        // entries land in `level` (division) or on top of the older
        // segments of `level + 1` (push-down).
        let rctx = ReadCtx {
            category: IoCategory::Compaction,
            fill_cache: false,
        };
        let r = ctx
            .table_cache
            .get(t.number, t.size, IoCategory::Compaction)?;
        st.bytes_in += t.size;
        st.files_in += 1;
        let mut table = r.iter(rctx);
        table.seek_to_first();
        let mut merged = TargetMerge {
            table,
            run,
            pos: 0,
            rest,
            rule: DropRule::new(
                version,
                self.smallest_snapshot,
                level,
                ctx.vstore,
                ctx.filter,
            ),
            ready: None,
            table_seen: 0,
            dir: ctx.dir,
        };
        edit.deleted.push((level, t.number));
        // Push-down: while the next level holds tables under these keys,
        // append them there instead of rewriting them in this level; every
        // byte has to go down once anyway. The merged entries are held
        // until that is known.
        if lwc.push_down && level + 1 < ctx.picker.levels {
            let mut kept = EntryBuf::default();
            while let Some((k, v)) = merged.peek()? {
                kept.push(k, v);
                merged.advance();
            }
            merged.tally(st);
            if kept.is_empty() {
                return Ok(());
            }
            let lo = user_key(kept.get(0).0);
            let hi = user_key(kept.get(kept.len() - 1).0);
            if !version
                .overlapping(level + 1, Some(lo), Some(hi))
                .is_empty()
            {
                st.pushdowns += 1;
                pushed.entries.extend_from(&kept);
                if let Some(d) = r.as_dtable() {
                    pushed.aggregated.extend(d.overlapped().iter().cloned());
                }
                return Ok(());
            }
            st.divisions += 1;
            let divider = lwc.divider(kept.bytes(), ctx.picker.target_file_size);
            let mut src = BufSource { buf: kept, pos: 0 };
            for f in write_new_tables(ctx, version, level, &mut src, divider, st)? {
                edit.added.push((level, f));
            }
            return Ok(());
        }
        // §4.4 equal division: tables of equal size replace the target.
        // When the whole run is known the parts are equal by the bytes in
        // hand (the target's size over-counts what the merge drops, so the
        // last part is the smaller); a run too long to hold is cut into
        // parts of `target_file_size`.
        let divider = if whole_run {
            lwc.divider(
                t.size.saturating_add(run.bytes()),
                ctx.picker.target_file_size,
            )
        } else if lwc.division_number > 0 {
            Divider::new(lwc.max_table_bytes.div_ceil(lwc.division_number as u64))
        } else {
            Divider::new(ctx.picker.target_file_size)
        };
        let tables = write_new_tables(ctx, version, level, &mut merged, divider, st)?;
        merged.tally(st);
        if !tables.is_empty() {
            st.divisions += 1;
        }
        for f in tables {
            edit.added.push((level, f));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::key::{internal_key, ValueType};

    fn meta(n: u64, lo: &str, hi: &str, size: u64) -> Arc<FileMeta> {
        Arc::new(FileMeta {
            number: n,
            size,
            smallest: internal_key(lo.as_bytes(), 1, ValueType::Value),
            largest: internal_key(hi.as_bytes(), 1, ValueType::Value),
        })
    }

    fn routes(keys: &[&str], targets: &[Arc<FileMeta>]) -> Vec<usize> {
        let mut r = Router::new(targets);
        keys.iter().map(|k| r.route(k.as_bytes())).collect()
    }

    #[test]
    fn routing_keeps_ranges_and_balances_gaps() {
        let heavy = meta(1, "c", "e", 1000);
        let light = meta(2, "m", "p", 10);
        let e = ["a", "c", "d", "f", "h", "m", "q"];
        // Gap keys f, h go to the lighter neighbour.
        assert_eq!(
            routes(&e, &[heavy.clone(), light.clone()]),
            vec![0, 0, 0, 1, 1, 1, 1]
        );
        let heavy2 = meta(2, "m", "p", 5000);
        assert_eq!(routes(&e, &[heavy, heavy2]), vec![0, 0, 0, 0, 0, 1, 1]);
    }

    #[test]
    fn asking_again_for_a_key_gives_the_same_target() {
        let targets = [meta(1, "c", "e", 1000), meta(2, "m", "p", 10)];
        let mut r = Router::new(&targets);
        for k in ["a", "a", "d", "d", "h", "h", "q", "q"] {
            let first = r.route(k.as_bytes());
            assert_eq!(r.route(k.as_bytes()), first, "{k}");
        }
    }

    /// The parts `divider` cuts `entries` into, as entry counts.
    fn cut(entries: &[(Vec<u8>, Vec<u8>)], mut divider: Divider) -> Vec<usize> {
        let mut parts = vec![0usize];
        for (k, v) in entries {
            if divider.cut_before(k) {
                parts.push(0);
                divider.next_part();
            }
            divider.take(k, v);
            *parts.last_mut().unwrap() += 1;
        }
        parts
    }

    #[test]
    fn division_is_equal_and_cuts_between_user_keys() {
        let mut e: Vec<(Vec<u8>, Vec<u8>)> = ["a", "b", "c", "d", "e", "f", "g", "h"]
            .iter()
            .map(|k| (internal_key(k.as_bytes(), 5, ValueType::Value), vec![0; 10]))
            .collect();
        // A second version of "c" (older, so after the first).
        e.insert(3, (internal_key(b"c", 2, ValueType::Value), vec![0; 10]));
        let total: u64 = e.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum();
        let per_entry = total / e.len() as u64;
        // Three parts of three entries: the cut after "c"'s first version
        // waits for its second.
        let parts = cut(&e, Divider::equal(total, total.div_ceil(3)));
        assert_eq!(parts.len(), 3, "{parts:?}");
        assert_eq!(parts.iter().sum::<usize>(), e.len());
        let mut at = 0;
        for p in &parts[..parts.len() - 1] {
            at += p;
            assert_ne!(user_key(&e[at - 1].0), user_key(&e[at].0));
        }
        // Parts of a fixed size, just over two entries: a part ends after
        // its third entry, except that the first waits for "c"'s second
        // version; the last holds the remainder.
        let parts = cut(&e, Divider::new(2 * per_entry + 1));
        assert_eq!(parts, vec![4, 3, 2]);
    }

    #[test]
    fn an_entry_buffer_gives_back_what_it_holds() {
        let mut a = EntryBuf::default();
        a.push(b"k1", b"");
        a.push(b"key2", b"value2");
        let mut b = EntryBuf::default();
        b.push(b"k3", b"v3");
        b.extend_from(&a);
        assert_eq!(b.len(), 3);
        assert_eq!(b.bytes(), 2 + 2 + 2 + 4 + 6);
        assert_eq!(b.get(0), (&b"k3"[..], &b"v3"[..]));
        assert_eq!(b.get(1), (&b"k1"[..], &b""[..]));
        assert_eq!(b.get(2), (&b"key2"[..], &b"value2"[..]));
        b.clear();
        assert!(b.is_empty());
    }
}
