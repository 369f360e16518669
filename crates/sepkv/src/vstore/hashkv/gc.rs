//! Garbage collection of segment groups (HashKV §3.3, §3.4, §3.7).
//!
//! One step:
//! 1. free retired segments no reader can reach any more; when the cold
//!    data log's known garbage reaches the GC ratio, or the reserve runs
//!    low and the chunk at its tail holds a log segment of garbage, or two
//!    group steps in a row reclaimed less than a sixteenth of what they
//!    read while the reserve was low, run one of its (vLog) GC steps
//!    instead;
//! 2. pick the groups with the largest write volume since their last GC
//!    (plus the garbage the engine reported in them) — a sort of the
//!    segment table, cheap next to reading a group — until their bytes
//!    reach [`super::options::HashKvOptions::gc_step_bytes`] (the
//!    engine's `gc_chunk_size`, 4 MiB by default: a writer held for one
//!    step then waits about as long as for a value-log step) or a quarter
//!    of the groups are taken, at least one group; flush the write cache and **seal** each
//!    group: its segments take no more records, and the next record placed
//!    in it — a user's or a GC copy — opens a fresh main segment; then wait
//!    until every write that appended to the sealed segments has published
//!    its pointers ([`IndexReader::wait_in_flight_writes`]);
//! 3. scan each group's sealed segments sequentially and build an in-memory
//!    table of its keys: the record with the highest sequence number (the
//!    later one on a tie) is the live version; **no index queries**. A key
//!    updated at least once since its insert is hot (§3.4): it has more
//!    than one record in the group (a tag and the update that followed it
//!    count), or its value was kept hot by an earlier GC of the group (its
//!    sequence number is at most the group's `hot_seq`, the highest one
//!    that GC copied back as hot). A hot key's latest record is copied to
//!    the group's end (the fresh main segment, then log segments), among
//!    the writes that arrive meanwhile, and is written like a write (its
//!    allocations journaled; with a journal of values, where it comes from,
//!    and the copy cached). A key written once since its insert is
//!    cold (with `hashkv_hotness`): its value goes to the cold data log
//!    while there is free room for it (the main segments' unfilled room,
//!    then the reserve's) beyond GC's headroom and this group's copies,
//!    and is otherwise copied back like a hot one (the
//!    group's `hot_seq` may then cover it: see [`super::segment::Group`]). A
//!    latest record that is a tag is carried over; an older tag names a
//!    cold value a newer version replaced, which the cold log counts as
//!    garbage when the step commits (before compaction drops the tag's
//!    pointer).
//!    A group whose copies would not fit in the fresh main segment and the
//!    free reserved space may overdraw the reserve by a main segment's
//!    worth of log segments, one group per step (`copies_fit`); one that
//!    does not fit even so is left alone, and the step takes one of the
//!    cold data log's GC steps instead (values overwritten since their
//!    move may hold its room, dead without anyone having reported it);
//! 4. install the new pointers with the index's compare-and-set (which
//!    syncs the journal first: from then on the copies survive a crash).
//!    Most keys need no index lookup for it (§3.3: the group alone tells
//!    the latest version). Every version of a key with a separated value
//!    is in the key's group, so its latest record in the sealed segments
//!    is the version the index holds at `judged_at` (the last sequence
//!    number published once the in-flight writes were) unless the key was
//!    written again since the seal (the records placed since, read before
//!    step 3), was deleted or given an inline value (the write path tells
//!    the store, [`crate::vstore::ValueStore::note_unseparated`]: the
//!    newest such write per bucket of key hashes), or the record's segment
//!    predates the index's recovery (`StoreCore::trusted_from`). Those
//!    keys are looked up; the others go to
//!    [`IndexRelocator::relocate_judged`], which asks the memtables only
//!    whether the key was written after `judged_at`. A
//!    failed compare-and-set means the user wrote or deleted the key
//!    meanwhile — or, after a crash, that the index uses another record of
//!    the group. A record of the key with a higher sequence number placed in
//!    the group since the seal explains a racing write (those records are
//!    scanned, no index query). Otherwise one index query tells which: if
//!    the index points into the sealed segments, that record is copied and
//!    relocated too; otherwise the copy is dead and remembered as such;
//! 5. place tags for the installed cold moves at the group's end (after the
//!    relocation, so a tag never hides a record the index still uses);
//! 6. make the writes that made the sealed segments' other records dead
//!    durable, and sync the segments placed since the seal;
//! 7. commit: the group drops its sealed segments and is what was placed
//!    since the seal — the fresh main segment, whose free room new writes
//!    go on filling; persist the segment table in the manifest; retire the
//!    old segments, deleted once no snapshot or iterator older than the
//!    relocation remains.
//!
//! A crash at any point leaves each group `sealed segments ++ segments
//! placed since` (the journal, or a table checkpoint without it, records
//! every allocation), so the index's pointers, old or new, stay valid, and
//! the next GC keeps whichever the index uses. A step that fails or finds
//! no room leaves the same in memory, with its copies remembered as dead.
//!
//! GC never overwrites a segment in place, so no before-images are
//! journaled (§3.7 logs the overwritten pairs); the cost is one extra main
//! segment of space per group while its GC runs.

use super::cold::is_cold;
use super::HashKvStore;
use crate::error::{Error, Result};
use crate::format::value_record::{self as record, Codec, Kind};
use crate::fs::{Advice, IoCategory};
use crate::seqno::SeqNum;
use crate::vstore::{
    GcOutcome, IndexReader, IndexRelocator, Relocation, ValuePointer, ValueRecord,
};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

/// Bytes of copies placed under one hold of the store's lock.
const COPY_BATCH: usize = 256 << 10;

/// A group being collected.
struct Victim {
    group: u32,
    /// Its segments when sealed, and their lengths.
    old: Vec<(u64, u64)>,
    /// Write volume when sealed.
    volume: u64,
    /// Copies placed in the group: `(segment, offset)`.
    placed: Vec<(u64, u64)>,
    /// Those of them the index now uses.
    installed: HashSet<(u64, u64)>,
    /// Left alone (its copies would not fit).
    skipped: bool,
    /// Cold pointers of tags a newer version of their key superseded in
    /// the group: cold-log garbage, noted when the step commits.
    stale_cold: Vec<ValuePointer>,
    /// The group's `hot_seq` when sealed: a value at most this old was
    /// kept hot by an earlier GC.
    hot_seq: u64,
    /// The highest sequence number among the values this step copies back
    /// as hot: the group's next `hot_seq`.
    copied_hot_seq: u64,
    /// Bytes of cold values copied back to the group because the cold
    /// data log had no room (counted when the step commits).
    kept_cold: u64,
}

impl Victim {
    fn is_old(&self, seg: u64) -> bool {
        self.old.iter().any(|&(id, _)| id == seg)
    }
}

/// What a scan decided for one key.
struct Latest {
    /// Index of the old segment and offset of the latest record.
    seg_idx: usize,
    off: u64,
    len: u32,
    kind: Kind,
    seq: u64,
    /// Records of the key in the group.
    count: u32,
}

/// A value classified cold, on its way to the cold data log.
struct ColdValue {
    victim: usize,
    key: Vec<u8>,
    seq: u64,
    value: Vec<u8>,
    old: ValuePointer,
}

/// A relocation and what it was for.
struct Move {
    key: Vec<u8>,
    /// Sequence number of the record.
    seq: u64,
    old: ValuePointer,
    new: ValuePointer,
    victim: usize,
    cold: bool,
}

/// Runs one GC step.
pub fn step(
    s: &HashKvStore,
    index: &dyn IndexReader,
    relocator: &dyn IndexRelocator,
) -> Result<GcOutcome> {
    let _serial = s.gc_lock.lock();
    // However the step ends (committed, or its copies left dead for the
    // group's next GC), it has no copies in flight after it; reset while
    // the step still holds `gc_lock`.
    struct CopiesDone<'a>(&'a HashKvStore);
    impl Drop for CopiesDone<'_> {
        fn drop(&mut self) {
            let mut st = self.0.state.lock();
            st.gc_copies = 0;
            st.table.gc_overdraft = 0;
        }
    }
    let _copies = CopiesDone(s);
    let mut out = GcOutcome {
        bytes_freed: s.free_pending(index.oldest_visible_seq())?,
        ..Default::default()
    };

    // The cold data log is collected as a vLog, from its tail: when its
    // known garbage reaches the engine's ratio, or when the reserved space
    // it shares with the log segments runs low and the chunk at its tail
    // holds at least a log segment of known garbage, so that the step
    // gives back a unit of the reserve. A tail chunk with less is left to
    // age: with the garbage a group's GC infers from superseded tags
    // counted (step 3), taking the cold log whenever it held a log
    // segment of garbage anywhere had writers wait behind steps that
    // copied three quarters of what they read.
    let cold = s.cold.space();
    let (low, log_size) = {
        let st = s.state.lock();
        let t = &st.table;
        (
            t.free_units() < HashKvStore::low_watermark(t),
            t.geo.log_size,
        )
    };
    let tail_garbage = || s.cold.tail_chunk_garbage_ratio() * s.opts.cold_gc_chunk_size as f64;
    // Two group steps in a row, with the reserve low, that reclaimed less
    // than a sixteenth of what they read: the room is held by cold values
    // no one has reported dead. A superseded tag names where its value was
    // moved to, and once the cold log's GC has moved the value again that
    // note misses it; the index reports it only when compaction drops the
    // pointer, which a store small next to the write buffer may not reach
    // before it is full. The cold log's GC looks every key up, so it finds
    // them.
    let stuck = low && cold.live_bytes > 0 && s.stuck_group_steps.load(Ordering::Relaxed) >= 2;
    if (stuck
        || cold.garbage_ratio() >= s.opts.cold_gc_ratio
        || (low && tail_garbage() >= log_size as f64))
        && cold_step(s, index, relocator, &mut out)?
    {
        s.stuck_group_steps.store(0, Ordering::Relaxed);
        return Ok(out);
    }

    let mut victims = seal(s)?;
    if victims.is_empty() {
        out.did_work = out.bytes_freed > 0;
        return Ok(out);
    }
    let mut committed = false;
    // A write that appended to a sealed segment may not have inserted its
    // pointer yet: the scan would take its record for the latest version,
    // fail the compare-and-set, and relocate the older record the index
    // still held, leaving the write's pointer in a retired segment.
    let res = index.wait_in_flight_writes().and_then(|_| {
        // Every write published by now has placed its records and told the
        // store of its deletions and inline values (step 4).
        let judged_at = index.last_sequence();
        collect(
            s,
            index,
            relocator,
            &mut victims,
            judged_at,
            &mut out,
            &mut committed,
        )
    });
    match res {
        Ok(true) => {
            // What the step read, less what it copied back or moved to the
            // cold log (both in `bytes_rewritten`).
            let reclaimed = out.bytes_read.saturating_sub(out.bytes_rewritten);
            if low && reclaimed * 16 < out.bytes_read {
                s.stuck_group_steps.fetch_add(1, Ordering::Relaxed);
            } else {
                s.stuck_group_steps.store(0, Ordering::Relaxed);
            }
            let done = victims.iter().filter(|v| !v.skipped).count();
            s.counters.gc_runs.fetch_add(1, Ordering::Relaxed);
            s.counters
                .gc_groups
                .fetch_add(done as u64, Ordering::Relaxed);
            s.counters
                .gc_bytes_read
                .fetch_add(out.bytes_read, Ordering::Relaxed);
            out.did_work = true;
            Ok(out)
        }
        Ok(false) => {
            // No room in the reserved space for the copies.
            give_up(s, &victims);
            s.counters.gc_stalls.fetch_add(1, Ordering::Relaxed);
            // The cold data log may hold values that are dead without
            // anyone having said so: keys overwritten since their move,
            // whose tags no group GC has read yet and whose pointers no
            // compaction has dropped. Its GC judges liveness by itself
            // (index lookups), so its tail is the room left to try.
            if cold.live_bytes + cold.garbage_bytes > 0 && cold_step(s, index, relocator, &mut out)?
            {
                return Ok(out);
            }
            out.did_work = out.bytes_freed > 0;
            Ok(out)
        }
        Err(e) => {
            if !committed {
                give_up(s, &victims);
            }
            Err(e)
        }
    }
}

/// One GC step of the cold data log, added to `out`; true when it did work.
fn cold_step(
    s: &HashKvStore,
    index: &dyn IndexReader,
    relocator: &dyn IndexRelocator,
    out: &mut GcOutcome,
) -> Result<bool> {
    let persist = |c: &[u8]| s.persist_table(relocator, Some(c));
    let o = s.cold.gc_step(index, relocator, &persist)?;
    if o.did_work {
        out.bytes_read += o.bytes_read;
        out.bytes_rewritten += o.bytes_rewritten;
        out.bytes_freed += o.bytes_freed;
        out.did_work = true;
    }
    Ok(o.did_work)
}

/// Step 2: picks the victims, flushes the cache and seals them.
fn seal(s: &HashKvStore) -> Result<Vec<Victim>> {
    let mut st = s.state.lock();
    HashKvStore::check_poisoned(&st)?;
    s.flush_cache(&mut st)?;
    let st = &mut *st;
    let t = &mut st.table;
    // Group bytes, not segment sizes: a group's main segment is mostly
    // unwritten room until the group fills. The budget bounds the step's
    // reads, copies and the time a writer held for it waits; the first
    // group is taken whatever its size.
    let budget = s.opts.gc_step_bytes;
    // Sealing most groups at once would retire most of the store in one
    // step, to be freed only when every reader older than the step is gone.
    let max_groups = (t.geo.groups as usize / 4).max(1);
    let free = t.free_units();
    st.stalled.retain(|gi, &mut (score, was_free)| {
        let g = &t.groups[*gi as usize];
        g.write_volume + g.noted_garbage == score && free <= was_free
    });
    let stalled = &st.stalled;
    let mut order: Vec<(u64, u32)> = t
        .groups
        .iter()
        .enumerate()
        .filter(|&(i, g)| !g.segs.is_empty() && !stalled.contains_key(&(i as u32)))
        .map(|(i, g)| (g.write_volume + g.noted_garbage, i as u32))
        .filter(|&(score, _)| score > 0)
        .collect();
    order.sort_unstable_by(|a, b| b.cmp(a));
    let mut victims: Vec<Victim> = Vec::new();
    let mut bytes = 0u64;
    for (_, gi) in order {
        if bytes >= budget || victims.len() >= max_groups {
            break;
        }
        let old = match t.group_lens(gi) {
            Ok(o) => o,
            Err(id) => {
                for v in &victims {
                    t.groups[v.group as usize].sealed = false;
                }
                return Err(s.unknown_segment(id));
            }
        };
        let g = &mut t.groups[gi as usize];
        g.sealed = true;
        bytes += old.iter().map(|x| x.1).sum::<u64>();
        victims.push(Victim {
            group: gi,
            old,
            volume: g.write_volume,
            placed: Vec::new(),
            installed: HashSet::new(),
            skipped: false,
            stale_cold: Vec::new(),
            hot_seq: g.hot_seq,
            copied_hot_seq: 0,
            kept_cold: 0,
        });
    }
    Ok(victims)
}

/// Steps 3–7; false when the reserved space has no room for the copies.
/// `judged_at`: the last sequence number published once the victims'
/// in-flight writes were (step 4).
#[allow(clippy::too_many_arguments)]
fn collect(
    s: &HashKvStore,
    index: &dyn IndexReader,
    relocator: &dyn IndexRelocator,
    victims: &mut [Victim],
    judged_at: SeqNum,
    out: &mut GcOutcome,
    committed: &mut bool,
) -> Result<bool> {
    // The keys user writes placed in each victim between its seal and now,
    // those published by `judged_at` among them; GC has placed nothing
    // there yet (its copies come in step 3), so this reads little.
    let since_seal: Vec<HashMap<Vec<u8>, u64>> = victims
        .iter()
        .map(|v| keys_since_seal(s, v))
        .collect::<Result<_>>()?;
    let mut moves: Vec<Move> = Vec::new();
    let mut cold_vals: Vec<ColdValue> = Vec::new();
    let mut carried_tags = 0u64;
    let Some(bytes_read) =
        scan_and_copy(s, victims, &mut moves, &mut cold_vals, &mut carried_tags)?
    else {
        return Ok(false);
    };
    out.bytes_read = bytes_read;
    if victims.iter().all(|v| v.skipped) {
        return Ok(false);
    }
    s.counters
        .gc_tags
        .fetch_add(carried_tags, Ordering::Relaxed);
    relocate_and_commit(
        s,
        index,
        relocator,
        victims,
        moves,
        cold_vals,
        (judged_at, &since_seal),
        out,
        committed,
    )
}

/// The segments of `v`'s group placed since the seal.
///
/// # Errors
/// `Corruption` when the group no longer starts with its sealed segments.
fn placed_since_seal(s: &HashKvStore, t: &super::Table, v: &Victim) -> Result<Vec<u64>> {
    let segs = &t.groups[v.group as usize].segs;
    let n = v.old.len();
    if segs.len() < n || segs.iter().zip(&v.old).any(|(a, b)| *a != b.0) {
        return Err(Error::corruption(
            s.path(v.old[0].0),
            0,
            format!(
                "hashkv group {} lost its sealed segments during GC",
                v.group
            ),
        ));
    }
    Ok(segs[n..].to_vec())
}

/// Room for `need` bytes of copies in `group`: its last segment's free
/// room (a fresh main segment while sealed) and the free reserved space,
/// less what records not splitting across segments may waste.
fn copies_fit(s: &HashKvStore, group: u32, need: u64, max_rec: u64) -> Result<bool> {
    let mut st = s.state.lock();
    if copies_fit_in(s, &st.table, group, need, max_rec, 0)? {
        return Ok(true);
    }
    // The reserve cannot take this group's copies. Its old segments are
    // freed when the step commits, so one group per step may overdraw the
    // reserve by up to a main segment's worth of log segments until then:
    // the one extra main segment per group under collection the store
    // already allows (module docs). Without it, a store whose groups have
    // outgrown their main segments by more than GC's headroom cannot be
    // collected at all, and writes meet a full store with garbage left.
    // What the store is already over the reserve (retired segments a
    // reader still holds after an earlier overdraft) comes off it, so the
    // store never passes the reserve by more than the allowance.
    let t = &st.table;
    let allowance = t.geo.main_size.div_ceil(t.geo.log_size.max(1));
    let extra = allowance.saturating_sub(t.over_units());
    if t.gc_overdraft == 0 && extra > 0 && copies_fit_in(s, t, group, need, max_rec, extra)? {
        st.table.gc_overdraft = allowance;
        return Ok(true);
    }
    Ok(false)
}

/// Whether `need` bytes of copies (records up to `max_rec` bytes) fit the
/// room left at `group`'s end and the free log segments, `extra` more.
fn copies_fit_in(
    s: &HashKvStore,
    t: &super::Table,
    group: u32,
    need: u64,
    max_rec: u64,
    extra: u64,
) -> Result<bool> {
    let g = &t.groups[group as usize];
    let last_room = match g.segs.last() {
        Some(&id) if !g.sealed => {
            let seg = t.seg(id).map_err(|id| s.unknown_segment(id))?;
            seg.cap - seg.len
        }
        _ => t.geo.main_size,
    };
    let room = last_room + (t.free_units() + extra) * t.geo.log_size;
    let waste = (1 + need.div_ceil(t.geo.log_size)) * max_rec;
    Ok(need + waste <= room)
}

/// Step 3: scans the victims, copies hot records and carried tags to their
/// groups' ends, collects cold values. `None` when the reserved space ran
/// out midway.
fn scan_and_copy(
    s: &HashKvStore,
    victims: &mut [Victim],
    moves: &mut Vec<Move>,
    cold_vals: &mut Vec<ColdValue>,
    carried_tags: &mut u64,
) -> Result<Option<u64>> {
    let mut bytes_read = 0u64;
    for (vi, v) in victims.iter_mut().enumerate() {
        let dead: HashSet<(u64, u64)> = {
            let st = s.state.lock();
            st.dead
                .iter()
                .filter(|(seg, _)| v.is_old(*seg))
                .copied()
                .collect()
        };
        let mut bufs: Vec<Vec<u8>> = Vec::with_capacity(v.old.len());
        let mut keys: HashMap<Vec<u8>, Latest> = HashMap::new();
        // Tags a newer record of their key supersedes: `(segment index,
        // offset, length)`.
        let mut stale_tags: Vec<(usize, u64, u32)> = Vec::new();
        // The group's segments are read whole, one after another: ask for
        // all of them first, so that the device reads them in parallel
        // (§3.8 retrieves a group's segments with several threads).
        for &(id, len) in v.old.iter().filter(|&&(_, len)| len > 0) {
            s.files.fs.advise(&s.path(id), 0, len, Advice::WillNeed);
        }
        for (si, &(id, len)) in v.old.iter().enumerate() {
            let mut buf = vec![0u8; len as usize];
            if len > 0 {
                s.files.read_exact(id, 0, &mut buf, IoCategory::Gc)?;
            }
            bytes_read += len;
            let mut pos = 0usize;
            while pos < buf.len() {
                let r = record_at(s, id, &buf, pos)?;
                if !matches!(r.kind, Kind::Value | Kind::Tag) {
                    return Err(Error::corruption(
                        s.path(id),
                        pos as u64,
                        format!("hashkv segment holds a record of kind {:?}", r.kind),
                    ));
                }
                if dead.contains(&(id, pos as u64)) {
                    pos += r.len;
                    continue;
                }
                let e = keys.entry(r.key.to_vec()).or_insert(Latest {
                    seg_idx: si,
                    off: 0,
                    len: 0,
                    kind: r.kind,
                    seq: 0,
                    count: 0,
                });
                e.count += 1;
                // Records come in position order: on a tie the later wins.
                if e.count == 1 || r.seq >= e.seq {
                    // A tag copied by an unfinished step keeps its
                    // original's sequence number: a tie is no newer version.
                    if e.count > 1 && e.kind == Kind::Tag && r.seq > e.seq {
                        stale_tags.push((e.seg_idx, e.off, e.len));
                    }
                    e.seg_idx = si;
                    e.off = pos as u64;
                    e.len = r.len as u32;
                    e.kind = r.kind;
                    e.seq = r.seq;
                } else if r.kind == Kind::Tag {
                    stale_tags.push((si, pos as u64, r.len as u32));
                }
                pos += r.len;
            }
            bufs.push(buf);
        }
        // A superseded tag names a cold value a newer version replaced
        // (HashKV §3.4: the update lands after the tag). The index reports
        // it only when compaction drops the tag's pointer; noting it now
        // keeps the cold log's garbage, and so the space figures and its
        // GC, current. A tag and its copy from an unfinished step name the
        // same value: it is noted once.
        let mut stale_cold: HashSet<ValuePointer> = HashSet::new();
        for (si, off, len) in stale_tags {
            let tag = ValuePointer {
                file_id: v.old[si].0,
                offset: off,
                length: len,
                aux: 0,
            };
            let r = s
                .codec(tag.file_id)
                .decode(slice(&bufs, v, &tag))
                .map_err(|e| Error::corruption(s.path(tag.file_id), off, format!("{e:?}")))?;
            stale_cold.extend(ValuePointer::decode(r.value).filter(is_cold));
        }
        v.stale_cold = stale_cold.into_iter().collect();
        // Copy in the old order.
        let mut ordered: Vec<(Vec<u8>, Latest)> = keys.into_iter().collect();
        ordered.sort_unstable_by_key(|(_, l)| (l.seg_idx, l.off));
        let cold_candidate = |l: &Latest| s.opts.hotness && l.count == 1 && l.seq > v.hot_seq;
        // The cold data log may grow only into free room: the main
        // segments' unfilled room, then the reserve it shares with the
        // groups' log segments (`Table::free_units`); `value_capacity`
        // bounds them all. What is free less GC's headroom,
        // one unit for the two logs' different record sizes, what this
        // step has already chosen, and the log segments this group's hot
        // copies will take beyond its fresh main segment. Cold values
        // beyond that stay in their group, copied like hot ones.
        let mut cold_room = if s.opts.hotness {
            let hot_need: u64 = ordered
                .iter()
                .filter(|(_, l)| l.kind == Kind::Value && !cold_candidate(l))
                .map(|(_, l)| l.len as u64)
                .sum();
            let st = s.state.lock();
            let t = &st.table;
            let spill = hot_need
                .saturating_sub(t.geo.main_size)
                .div_ceil(t.geo.log_size.max(1));
            let chosen: u64 = cold_vals.iter().map(|c| c.old.length as u64).sum();
            let units = t
                .free_units()
                .saturating_sub(t.geo.gc_headroom() + 1 + spill);
            (units * t.geo.log_size).saturating_sub(chosen)
        } else {
            0
        };
        let mut hot: Vec<(Vec<u8>, u64, ValuePointer)> = Vec::new();
        let mut tags: Vec<ValuePointer> = Vec::new();
        for (key, l) in ordered {
            let old = ValuePointer {
                file_id: v.old[l.seg_idx].0,
                offset: l.off,
                length: l.len,
                aux: 0,
            };
            match l.kind {
                // Written once since its insert: neither a second record
                // in the group nor a value an earlier GC kept hot.
                Kind::Value if cold_candidate(&l) && cold_room >= l.len as u64 => {
                    cold_room -= l.len as u64;
                    let bytes = slice(&bufs, v, &old);
                    let r = s.codec(old.file_id).decode(bytes).map_err(|e| {
                        Error::corruption(s.path(old.file_id), old.offset, format!("{e:?}"))
                    })?;
                    cold_vals.push(ColdValue {
                        victim: vi,
                        key,
                        seq: l.seq,
                        value: r.value.to_vec(),
                        old,
                    });
                }
                Kind::Value => {
                    if !cold_candidate(&l) {
                        v.copied_hot_seq = v.copied_hot_seq.max(l.seq);
                    } else {
                        v.kept_cold += l.len as u64;
                    }
                    hot.push((key, l.seq, old));
                }
                // Tags (the scan let no other kind through).
                _ => tags.push(old),
            }
        }
        // A copy out of a format-1 segment is re-encoded, a byte longer.
        let copy_len = |p: &ValuePointer| {
            (p.length as usize + record::HEADER_LEN - s.codec(p.file_id).header_len()) as u64
        };
        let need: u64 = hot.iter().map(|h| copy_len(&h.2)).sum();
        let max_rec = hot.iter().map(|h| copy_len(&h.2)).max().unwrap_or(0);
        if !copies_fit(s, v.group, need, max_rec)? {
            // Left alone, its records where they are, until space is freed.
            v.skipped = true;
            cold_vals.retain(|c| c.victim != vi);
            stall(s, v.group);
            continue;
        }
        for batch in batches(&hot, |h| h.2.length as usize) {
            let copies = copies(s, &bufs, v, batch.iter().map(|h| &h.2))?;
            let recs: Vec<&[u8]> = copies.iter().map(|r| r.as_ref()).collect();
            let srcs: Vec<(u64, u64)> = batch.iter().map(|h| (h.2.file_id, h.2.offset)).collect();
            let Some(ptrs) = s.place_for_gc(v.group, &recs, Some(&srcs))? else {
                stall(s, v.group);
                return Ok(None);
            };
            for ((key, seq, old), new) in batch.iter().zip(ptrs) {
                v.placed.push((new.file_id, new.offset));
                moves.push(Move {
                    key: key.clone(),
                    seq: *seq,
                    old: *old,
                    new,
                    victim: vi,
                    cold: false,
                });
            }
        }
        // Tags are hints: without room they are dropped.
        if !tags.is_empty() {
            let copies = copies(s, &bufs, v, tags.iter())?;
            let recs: Vec<&[u8]> = copies.iter().map(|r| r.as_ref()).collect();
            let srcs: Vec<(u64, u64)> = tags.iter().map(|p| (p.file_id, p.offset)).collect();
            if let Some(ptrs) = s.place_for_gc(v.group, &recs, Some(&srcs))? {
                *carried_tags += ptrs.len() as u64;
                v.placed.extend(ptrs.iter().map(|p| (p.file_id, p.offset)));
            }
        }
    }
    Ok(Some(bytes_read))
}

/// Unseals a group whose copies found no room and leaves it out of the
/// next steps until its score changes or log segments are freed.
fn stall(s: &HashKvStore, group: u32) {
    let mut st = s.state.lock();
    let free = st.table.free_units();
    let g = &mut st.table.groups[group as usize];
    g.sealed = false;
    let score = g.write_volume + g.noted_garbage;
    st.stalled.insert(group, (score, free));
}

/// `items` cut into runs of about [`COPY_BATCH`] bytes.
fn batches<T>(items: &[T], size: impl Fn(&T) -> usize) -> Vec<&[T]> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0usize);
    for (i, it) in items.iter().enumerate() {
        bytes += size(it);
        if bytes >= COPY_BATCH {
            out.push(&items[start..=i]);
            (start, bytes) = (i + 1, 0);
        }
    }
    if start < items.len() {
        out.push(&items[start..]);
    }
    out
}

/// The bytes of the old record at `p` among the victim's segment buffers.
/// The bytes a GC copy of the record at `p` (`rec`, read from its
/// segment) writes: the record as it is, or re-encoded in the shared codec
/// when its segment is in the format-1 codec.
fn copy_bytes<'a>(s: &HashKvStore, p: &ValuePointer, rec: &'a [u8]) -> Result<Cow<'a, [u8]>> {
    match s.codec(p.file_id) {
        Codec::Shared => Ok(Cow::Borrowed(rec)),
        codec => {
            let r = codec
                .decode(rec)
                .map_err(|e| Error::corruption(s.path(p.file_id), p.offset, format!("{e:?}")))?;
            Ok(Cow::Owned(record::reencode(&r)))
        }
    }
}

/// The record at `pos` of `buf`, the bytes of segment `id` within its
/// valid length, in the segment's codec; damage is Corruption there.
fn record_at<'a>(
    s: &HashKvStore,
    id: u64,
    buf: &'a [u8],
    pos: usize,
) -> Result<record::Record<'a>> {
    s.codec(id).decode(&buf[pos..]).map_err(|e| {
        Error::corruption(
            s.path(id),
            pos as u64,
            format!("hashkv record damaged ({e:?}) inside a segment's valid range"),
        )
    })
}

/// The bytes of GC copies of the records at `ptrs` in victim `v`'s
/// segments (read into `bufs`), as [`copy_bytes`] gives them.
fn copies<'a, 'p>(
    s: &HashKvStore,
    bufs: &'a [Vec<u8>],
    v: &Victim,
    ptrs: impl Iterator<Item = &'p ValuePointer>,
) -> Result<Vec<Cow<'a, [u8]>>> {
    ptrs.map(|p| copy_bytes(s, p, slice(bufs, v, p))).collect()
}

fn slice<'a>(bufs: &'a [Vec<u8>], v: &Victim, p: &ValuePointer) -> &'a [u8] {
    let si = v
        .old
        .iter()
        .position(|&(id, _)| id == p.file_id)
        .unwrap_or(0);
    &bufs[si][p.offset as usize..(p.offset + p.length as u64) as usize]
}

/// Steps 4–7; false when the reserved space has no room for a copy.
#[allow(clippy::too_many_arguments)]
fn relocate_and_commit(
    s: &HashKvStore,
    index: &dyn IndexReader,
    relocator: &dyn IndexRelocator,
    victims: &mut [Victim],
    mut moves: Vec<Move>,
    cold_vals: Vec<ColdValue>,
    (judged_at, since_seal): (SeqNum, &[HashMap<Vec<u8>, u64>]),
    out: &mut GcOutcome,
    committed: &mut bool,
) -> Result<bool> {
    // Cold values to the cold data log.
    if !cold_vals.is_empty() {
        let recs: Vec<ValueRecord<'_>> = cold_vals
            .iter()
            .map(|c| ValueRecord {
                key: &c.key,
                seq: c.seq,
                value: &c.value,
            })
            .collect();
        let ptrs = s.cold.append(&recs)?;
        s.state.lock().gc_copies += ptrs.iter().map(|p| p.length as u64).sum::<u64>();
        s.cold.sync()?;
        for (c, new) in cold_vals.into_iter().zip(ptrs) {
            moves.push(Move {
                key: c.key,
                seq: c.seq,
                old: c.old,
                new,
                victim: c.victim,
                cold: true,
            });
        }
    }

    // Round 1.
    let mut visible = index.last_sequence();
    let mut installed_bytes = 0u64;
    let mut cold_bytes = 0u64;
    let mut tags: Vec<(usize, Vec<u8>, u64, ValuePointer)> = Vec::new();
    let mut round2: Vec<Move> = Vec::new();
    let mut post_keys: HashMap<usize, HashMap<Vec<u8>, u64>> = HashMap::new();
    if !moves.is_empty() {
        let judged: Vec<bool> = moves
            .iter()
            .map(|m| {
                !since_seal[m.victim].contains_key(&m.key)
                    && s.judged_from_group(&m.key, m.seq, m.old.file_id)
            })
            .collect();
        let (ok, seq) = relocate_split(s, relocator, &moves, &judged, judged_at)?;
        visible = visible.max(seq);
        for (m, ok) in moves.into_iter().zip(ok) {
            if ok {
                installed_bytes += m.old.length as u64;
                if m.cold {
                    cold_bytes += m.old.length as u64;
                    tags.push((m.victim, m.key, m.seq, m.new));
                } else {
                    victims[m.victim]
                        .installed
                        .insert((m.new.file_id, m.new.offset));
                }
                continue;
            }
            // The compare-and-set failed. A newer record of the key placed
            // in the group since the seal explains it (a racing overwrite);
            // otherwise one index query tells whether the key was deleted
            // or the index uses another record of this group.
            let since_seal = match post_keys.entry(m.victim) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(keys_since_seal(s, &victims[m.victim])?)
                }
            };
            if since_seal.get(&m.key).is_some_and(|&q| q > m.seq) {
                mark_dead(s, &m);
                continue;
            }
            s.counters.gc_lookups.fetch_add(1, Ordering::Relaxed);
            let v = &mut victims[m.victim];
            let cur = index.current_pointer(&m.key)?;
            let other = cur.filter(|p| !is_cold(p) && v.is_old(p.file_id) && *p != m.old);
            mark_dead(s, &m);
            if let Some(p) = other {
                let mut buf = vec![0u8; p.length as usize];
                s.files
                    .read_exact(p.file_id, p.offset, &mut buf, IoCategory::Gc)?;
                let seq = match s.codec(p.file_id).decode(&buf) {
                    Ok(r) if r.key == m.key && r.kind == Kind::Value && r.len == buf.len() => r.seq,
                    _ => {
                        return Err(Error::corruption(
                            s.path(p.file_id),
                            p.offset,
                            "hashkv record the index points at is damaged",
                        ))
                    }
                };
                let copy = copy_bytes(s, &p, &buf)?;
                let Some(new) =
                    s.place_for_gc(v.group, &[&copy], Some(&[(p.file_id, p.offset)]))?
                else {
                    stall(s, v.group);
                    return Ok(false);
                };
                v.placed.push((new[0].file_id, new[0].offset));
                round2.push(Move {
                    key: m.key,
                    seq,
                    old: p,
                    new: new[0],
                    victim: m.victim,
                    cold: false,
                });
            }
        }
    }

    // Round 2: records the index still used in the old segments.
    if !round2.is_empty() {
        let (ok, seq) = relocator.relocate(&relocations(&round2))?;
        visible = visible.max(seq);
        for (m, ok) in round2.into_iter().zip(ok) {
            if ok {
                installed_bytes += m.old.length as u64;
                victims[m.victim]
                    .installed
                    .insert((m.new.file_id, m.new.offset));
            } else {
                mark_dead(s, &m);
            }
        }
    }

    // Tags for the cold moves that were installed; hints, dropped without
    // room.
    let mut tag_count = 0u64;
    let mut by_victim: HashMap<usize, Vec<Vec<u8>>> = HashMap::new();
    for (vi, key, seq, cold_ptr) in tags {
        let mut rec = Vec::new();
        record::encode(&mut rec, Kind::Tag, 0, &key, seq, &cold_ptr.encode());
        by_victim.entry(vi).or_default().push(rec);
    }
    for (vi, recs) in by_victim {
        let refs: Vec<&[u8]> = recs.iter().map(|r| r.as_slice()).collect();
        if s.place_for_gc(victims[vi].group, &refs, None)?.is_some() {
            tag_count += refs.len() as u64;
        }
    }

    // The writes that made the old segments' other records dead must be
    // durable before those segments go: a crash that lost one would leave
    // the index pointing into a removed segment. So must the copies, which
    // a replay could no longer read from their sources.
    relocator.make_durable(index.last_sequence())?;
    let new_segs: Vec<u64> = {
        let st = s.state.lock();
        let mut ids = Vec::new();
        for v in victims.iter().filter(|v| !v.skipped) {
            ids.extend(placed_since_seal(s, &st.table, v)?);
        }
        ids
    };
    s.sync_segments(&new_segs)?;

    // Commit.
    let mut retired: Vec<u64> = Vec::new();
    let bytes = {
        let mut st = s.state.lock();
        // Dead bytes of the collected groups no report had named: what
        // they held, less what was copied, less what was reported.
        let held: u64 = victims
            .iter()
            .filter(|v| !v.skipped)
            .flat_map(|v| v.old.iter().map(|x| x.1))
            .sum();
        let noted: u64 = victims
            .iter()
            .filter(|v| !v.skipped)
            .map(|v| st.table.groups[v.group as usize].noted_garbage)
            .sum();
        let found = held.saturating_sub(installed_bytes).saturating_sub(noted);
        s.counters.garbage_found.fetch_add(found, Ordering::Relaxed);
        // The originals leave the groups with this commit: the copies are
        // the live ones now.
        st.gc_copies = 0;
        for v in victims.iter().filter(|v| !v.skipped) {
            placed_since_seal(s, &st.table, v)?;
            let g = &mut st.table.groups[v.group as usize];
            g.segs.drain(..v.old.len());
            g.sealed = false;
            g.write_volume = g.write_volume.saturating_sub(v.volume);
            g.noted_garbage = 0;
            g.hot_seq = g.hot_seq.max(v.copied_hot_seq);
            s.counters
                .gc_cold_kept
                .fetch_add(v.kept_cold, Ordering::Relaxed);
            retired.extend(v.old.iter().map(|x| x.0));
        }
        st.table.epoch += 1;
        *committed = true;
        s.encode(&st.table)?
    };
    // Before the edit, which carries the garbage table with them.
    for v in victims.iter().filter(|v| !v.skipped) {
        for p in &v.stale_cold {
            s.cold.hint_garbage(p);
        }
    }
    relocator.persist_state(&bytes)?;
    let visible = visible.max(index.last_sequence());
    s.state.lock().pending.push(super::PendingFree {
        seq: visible,
        segs: retired,
    });
    out.bytes_rewritten += installed_bytes;
    out.bytes_freed += s.free_pending(index.oldest_visible_seq())?;
    s.counters
        .gc_bytes_rewritten
        .fetch_add(installed_bytes, Ordering::Relaxed);
    s.counters
        .gc_cold_bytes
        .fetch_add(cold_bytes, Ordering::Relaxed);
    s.counters.gc_tags.fetch_add(tag_count, Ordering::Relaxed);
    Ok(true)
}

/// What the index is asked to install for `moves`.
fn relocations<'a>(moves: impl IntoIterator<Item = &'a Move>) -> Vec<Relocation> {
    moves
        .into_iter()
        .map(|m| Relocation {
            key: m.key.clone(),
            old: m.old,
            new: m.new,
        })
        .collect()
}

/// Sequence numbers of the records placed in a victim's group since it was
/// sealed, by key (the highest per key).
fn keys_since_seal(s: &HashKvStore, v: &Victim) -> Result<HashMap<Vec<u8>, u64>> {
    let post: Vec<(u64, u64)> = {
        let mut st = s.state.lock();
        s.flush_cache(&mut st)?;
        let ids = placed_since_seal(s, &st.table, v)?;
        let mut post = Vec::with_capacity(ids.len());
        for id in ids {
            let seg = st.table.seg(id).map_err(|id| s.unknown_segment(id))?;
            post.push((id, seg.len));
        }
        s.wait_placed_written(&st);
        post
    };
    let mut keys: HashMap<Vec<u8>, u64> = HashMap::new();
    for (id, len) in post {
        let mut buf = vec![0u8; len as usize];
        s.files.read_exact(id, 0, &mut buf, IoCategory::Gc)?;
        let mut pos = 0;
        while pos < buf.len() {
            let r = record_at(s, id, &buf, pos)?;
            let q = keys.entry(r.key.to_vec()).or_insert(r.seq);
            *q = (*q).max(r.seq);
            pos += r.len;
        }
    }
    Ok(keys)
}

/// Relocates `moves`: those marked in `judged` as GC judged them from their
/// group alone ([`IndexRelocator::relocate_judged`] at `judged_at`: no
/// index lookup unless a write since then may have replaced them), the
/// others with [`IndexRelocator::relocate`]. The answers come in `moves`'
/// order, with the later of the two visibility sequence numbers.
fn relocate_split(
    s: &HashKvStore,
    relocator: &dyn IndexRelocator,
    moves: &[Move],
    judged: &[bool],
    judged_at: SeqNum,
) -> Result<(Vec<bool>, SeqNum)> {
    let pick = |want: bool| {
        relocations(
            moves
                .iter()
                .zip(judged)
                .filter(|(_, &j)| j == want)
                .map(|(m, _)| m),
        )
    };
    let (yes, no) = (pick(true), pick(false));
    let mut seq = 0;
    let mut ok_yes = Vec::new();
    if !yes.is_empty() {
        s.counters
            .gc_judged
            .fetch_add(yes.len() as u64, Ordering::Relaxed);
        let (ok, q) = relocator.relocate_judged(&yes, judged_at)?;
        ok_yes = ok;
        seq = q;
    }
    let mut ok_no = Vec::new();
    if !no.is_empty() {
        let (ok, q) = relocator.relocate(&no)?;
        ok_no = ok;
        seq = seq.max(q);
    }
    let (mut a, mut b) = (ok_yes.into_iter(), ok_no.into_iter());
    let ok = judged
        .iter()
        .map(|&j| if j { a.next() } else { b.next() })
        .collect::<Option<Vec<bool>>>()
        .ok_or_else(|| Error::InvalidArgument("relocation returned too few answers".into()))?;
    Ok((ok, seq))
}

/// Remembers a copy whose relocation failed as dead (a cold copy becomes
/// cold-log garbage).
fn mark_dead(s: &HashKvStore, m: &Move) {
    if is_cold(&m.new) {
        s.cold.note_garbage(&m.new);
    } else {
        s.state.lock().dead.insert((m.new.file_id, m.new.offset));
    }
}

/// Leaves the victims as they are after a step that did not commit:
/// unsealed, with the copies the index does not use remembered as dead
/// (the group keeps its old segments, which hold the same records).
fn give_up(s: &HashKvStore, victims: &[Victim]) {
    let mut st = s.state.lock();
    for v in victims {
        st.table.groups[v.group as usize].sealed = false;
        for p in &v.placed {
            if !v.installed.contains(p) {
                st.dead.insert(*p);
            }
        }
    }
}
