//! Garbage collection of logical bands (FlashKey §V-B5).
//!
//! One step:
//! 1. delete the files of bands collected earlier whose relocations every
//!    live reader can now see;
//! 2. pick the victim: the closed band with the most invalid bytes (the
//!    invalidity table, §V-A4) among those that lie wholly before the
//!    replay checkpoint (log mode: the bands after it are the recovery log)
//!    and whose newest invalidating write is visible to every reader
//!    (`inval_seq <= oldest_visible_seq`: no snapshot can still walk back
//!    to a version that write superseded). When room is short
//!    ([`BandStore::gc_due`], or the bands past their bound), up to
//!    [`MAX_VICTIMS`]: the next bands by invalid bytes, each with at least
//!    three quarters of the best one's garbage. Steps 3–6 run once for
//!    all of them, so that they share the syncs of 4 and 5, which were
//!    most of a step's time;
//! 3. after every in-flight write has published its entries, read the band
//!    and judge each record: a value is valid iff the index points at its
//!    address; a delete token the index points at is valid too, and is
//!    dropped by a relocation to the null address (the index removes the
//!    key's node, §V-B5); every other record (older versions, delete
//!    tokens nothing points at, relocation records and inline values, which
//!    lie before the checkpoint and are never replayed) is dropped;
//! 4. append the valid values to the open band of GC copies (same
//!    sequence number and previous-version address; never to the band of
//!    user writes, see the module docs of `bands`), sync it;
//! 5. install them by compare-and-set (a racing user write wins), make the
//!    index durable up to every write that invalidated the band (the
//!    relocation's own sync covers that unless a newer write charged a
//!    victim meanwhile), and persist the band as retired;
//! 6. delete the file once the relocation, and every write that made a
//!    record of the band dead — the band's invalidity entry read after the
//!    judging, since a write may supersede a record between the pick and
//!    the judging — are visible to every reader (until then reads of old
//!    addresses, and snapshots walking back, still find their bytes).
//!
//! A step that finds no band it may take says why: garbage only after the
//! replay checkpoint (`GcOutcome::held_by_checkpoint`: a checkpoint lets
//! the next step go on), or only in bands an old reader may still walk
//! back into (counted in `ValueStore::pinned_bytes`, which a refused write
//! waits for).
//!
//! A crash before 5 leaves the copies as unreferenced garbage and the band
//! closed; after 5 the open finishes deleting retired bands.

use super::band::{self, HEADER_LEN};
use super::BandStore;
use crate::compaction_filter::{CompactionFilter, FilterDecision, LazyValue};
use crate::error::{Error, IoContext, Result};
use crate::format::value_record::Kind;
use crate::fs::IoCategory;
use crate::vstore::{GcOutcome, IndexReader, IndexRelocator, Relocation, ValuePointer};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Most bands one step collects when room is short (see the module docs):
/// their copies, relocations and retirement share one sync of the band of
/// GC copies, one of the band of user writes and one of the hash table's
/// edit log.
pub const MAX_VICTIMS: usize = 4;

/// A band a step collects: number, valid end, newest invalidating write
/// at the pick.
#[derive(Clone, Copy)]
struct Victim {
    id: u64,
    end: u64,
    inval_seq: u64,
}

/// Runs one GC step on `bs`.
pub fn step(
    bs: &BandStore,
    index: &dyn IndexReader,
    relocator: &dyn IndexRelocator,
) -> Result<GcOutcome> {
    let _one_at_a_time = bs.gc_lock.lock();
    let mut out = GcOutcome::default();
    out.bytes_freed += free_retired(bs, index.oldest_visible_seq())?;
    out.did_work = out.bytes_freed > 0;

    let oldest = index.oldest_visible_seq();
    // Room is short: take several victims and share the step's syncs.
    let most = if bs.gc_due() || bs.over_bound.load(Ordering::Relaxed) {
        MAX_VICTIMS
    } else {
        1
    };
    let victims: Vec<Victim> = {
        let st = bs.state.lock();
        let limit = bs.gc_limit_locked(&st);
        // Bands with garbage that only a replay checkpoint or only an old
        // reader keeps from GC: a checkpoint, or the reader's release, lets
        // them go (`GcOutcome::held_by_checkpoint`, `pinned_bytes`).
        let (mut by_ckpt, mut by_readers) = (false, 0u64);
        let mut cands: Vec<(u64, &super::BandInfo)> = Vec::new();
        let mut room = Room::default();
        for (&id, b) in &st.bands {
            room.used += b.file_len.max(b.valid_len);
            if b.retired.is_some() {
                continue;
            }
            let before_ckpt = limit.is_none_or(|l| id < l);
            let visible = b.inval_seq <= oldest;
            let entries = b.valid_len.saturating_sub(HEADER_LEN);
            room.live += entries.saturating_sub(b.invalid);
            if !b.closed || id == st.open || !before_ckpt {
                room.held += entries;
                room.held_invalid += b.invalid;
            } else if visible {
                room.free_invalid += b.invalid;
            }
            if !b.closed || id == st.open || b.invalid == 0 {
                continue;
            }
            match (before_ckpt, visible) {
                (true, true) => cands.push((id, b)),
                (false, true) => by_ckpt = true,
                (true, false) => by_readers += b.invalid,
                (false, false) => {}
            }
        }
        bs.reader_held.store(by_readers, Ordering::Relaxed);
        // Most invalid bytes first, the oldest band among equals.
        cands.sort_by_key(|&(id, b)| (std::cmp::Reverse(b.invalid), id));
        // A filter pass under way takes its next band first, garbage or
        // not, so that the filter meets every record once.
        let eligible = st.bands.iter().filter(|(&id, b)| {
            b.closed
                && id != st.open
                && b.retired.is_none()
                && limit.is_none_or(|l| id < l)
                && b.inval_seq <= oldest
        });
        let pass = bs
            .next_filter_band(eligible.map(|(&id, _)| id))
            .and_then(|id| st.bands.get(&id).map(|b| (id, b)));
        let picked: Vec<(u64, &super::BandInfo)> = match pass {
            Some(p) => vec![p],
            None => {
                // Further victims only while they hold at least three
                // quarters of the best one's garbage: the step must not
                // take bands greedy choice would leave for later.
                let best = cands.first().map_or(0, |(_, b)| b.invalid);
                cands
                    .into_iter()
                    .take(most)
                    .take_while(|(_, b)| b.invalid * 4 >= best * 3)
                    .collect()
            }
        };
        for &(id, b) in &picked {
            note_pick(bs, &st, limit, id, b, &room);
        }
        out.held_by_checkpoint = picked.is_empty() && by_ckpt;
        picked
            .into_iter()
            .map(|(id, b)| Victim {
                id,
                end: b.valid_len,
                inval_seq: b.inval_seq,
            })
            .collect()
    };
    if victims.is_empty() {
        if out.held_by_checkpoint {
            bs.counters.gc_held_steps.fetch_add(1, Ordering::Relaxed);
        }
        return Ok(out);
    }
    // The ranges are fixed (closed bands); judge them only once every
    // write that appended into the store has published its index entries.
    index.wait_in_flight_writes()?;

    // Live records the compaction filter removes go as a delete token's
    // do (relocation to the null address). Not while a reader is
    // registered: it may walk back through the node.
    let filter = bs.filter().filter(|_| !index.has_readers());
    let mut moves: Vec<Relocation> = Vec::new();
    let mut drops: Vec<Relocation> = Vec::new();
    let mut removes: Vec<Relocation> = Vec::new();
    let mut judged_live = 0u64;
    // Every victim is judged before anything is copied: damage found in
    // one leaves no copies behind.
    let judged = victims
        .iter()
        .map(|v| judge(bs, index, v, filter))
        .collect::<Result<Vec<Judged>>>()?;
    for j in judged {
        // Each victim's copies are one batch in the band of GC copies,
        // which closes between batches once full.
        out.bytes_read += j.bytes_read;
        judged_live += j.live;
        drops.extend(j.drops);
        removes.extend(j.removes);
        if j.copies.is_empty() {
            continue;
        }
        let recs: Vec<(Kind, &[u8], u64, &[u8])> = j
            .copies
            .iter()
            .map(|c| (Kind::GcCopy, &c.key[..], c.seq, &c.payload[..]))
            .collect();
        let prevs: Vec<Option<ValuePointer>> = j.copies.iter().map(|c| c.prev).collect();
        let ptrs = bs.append_entries(&recs, &|i, _| prevs[i], IoCategory::Gc)?;
        for (c, p) in j.copies.into_iter().zip(&ptrs) {
            out.bytes_rewritten += p.length as u64;
            moves.push(Relocation {
                key: c.key,
                old: c.old,
                new: *p,
            });
        }
    }
    // The copies are durable before any relocation to them is logged.
    if !moves.is_empty() {
        bs.sync_gc()?;
    }
    let n_moves = moves.len();
    let n_drops = drops.len();
    let mut relocs = moves;
    relocs.extend(drops);
    relocs.extend(removes);
    let inval_seq = victims.iter().map(|v| v.inval_seq).max().unwrap_or(0);
    let mut free_seq = inval_seq;
    // The sequence number up to which `relocate` made the writes durable.
    let mut durable = None;
    if !relocs.is_empty() {
        let (installed, seq) = relocator.relocate(&relocs)?;
        free_seq = free_seq.max(seq);
        if installed.iter().any(|&x| x) {
            durable = Some(seq);
        }
        let mut st = bs.state.lock();
        for (r, ok) in relocs.iter().zip(&installed).take(n_moves) {
            if !ok {
                // A user write won the race: the copy is garbage.
                super::BandStore::charge_locked(&mut st, &r.new, seq);
            }
        }
        let count = |r: &[bool]| r.iter().filter(|&&x| x).count() as u64;
        let (dropped, removed) = installed[n_moves..].split_at(n_drops);
        bs.counters
            .gc_tombstones_dropped
            .fetch_add(count(dropped), Ordering::Relaxed);
        if let Some((_, counter)) = filter {
            counter.fetch_add(count(removed), Ordering::Relaxed);
        }
    }
    // A write may have superseded a record of a victim after it was picked
    // and before it was judged (the record was then judged dead and
    // dropped): its sequence number is in the band's invalidity entry now,
    // not in the one the pick read, and a reader older than that write may
    // still walk back to the record. The band stays until such readers are
    // gone. (Records superseded after they were judged live were moved:
    // the relocation's sequence number covers those writes.)
    let dead_seq = {
        let st = bs.state.lock();
        victims
            .iter()
            .map(|v| st.bands.get(&v.id).map_or(v.inval_seq, |b| b.inval_seq))
            .fold(inval_seq, u64::max)
    };
    free_seq = free_seq.max(dead_seq);
    // The writes that made the victims' records dead must be durable
    // before the bands go: were one lost, the recovered index would fall
    // back to a freed version. The relocation's sync covers every write
    // published before it, so a second sync is needed only when none was
    // installed or a newer write invalidated a record meanwhile.
    if durable.is_none_or(|d| dead_seq > d) {
        relocator.make_durable(dead_seq)?;
    }
    let state = {
        let mut st = bs.state.lock();
        for v in &victims {
            if let Some(b) = st.bands.get_mut(&v.id) {
                b.retired = Some(free_seq);
            }
        }
        super::BandStore::persisted_locked(&st).encode()
    };
    relocator.persist_state(&state)?;
    out.did_work = true;
    out.bytes_freed += free_retired(bs, index.oldest_visible_seq())?;
    let c = &bs.counters;
    c.gc_runs.fetch_add(victims.len() as u64, Ordering::Relaxed);
    c.gc_steps.fetch_add(1, Ordering::Relaxed);
    c.gc_victim_live.fetch_add(judged_live, Ordering::Relaxed);
    c.gc_bytes_read.fetch_add(out.bytes_read, Ordering::Relaxed);
    c.gc_bytes_rewritten
        .fetch_add(out.bytes_rewritten, Ordering::Relaxed);
    c.gc_bytes_freed
        .fetch_add(out.bytes_freed, Ordering::Relaxed);
    Ok(out)
}

/// A live record of a victim, to be copied.
struct Copy {
    key: Vec<u8>,
    seq: u64,
    prev: Option<ValuePointer>,
    payload: Vec<u8>,
    old: ValuePointer,
}

/// What judging one victim found.
struct Judged {
    /// Live values to copy.
    copies: Vec<Copy>,
    /// Current delete tokens, to drop (relocation to the null address).
    drops: Vec<Relocation>,
    /// Live records the compaction filter removes.
    removes: Vec<Relocation>,
    /// Entry bytes judged live.
    live: u64,
    /// Bytes read.
    bytes_read: u64,
}

/// Reads victim `v` and judges each record against the index (step 3 of
/// the module docs).
fn judge(
    bs: &BandStore,
    index: &dyn IndexReader,
    v: &Victim,
    filter: Option<&(Arc<dyn CompactionFilter>, Arc<AtomicU64>)>,
) -> Result<Judged> {
    let id = v.id;
    let path = bs.path(id);
    let h = bs.handle(id)?;
    let mut buf = vec![0u8; v.end.saturating_sub(HEADER_LEN) as usize];
    h.read_exact_at(HEADER_LEN, &mut buf).ctx(&path)?;
    bs.stats.add_read(IoCategory::Gc, buf.len() as u64);
    let mut j = Judged {
        copies: Vec::new(),
        drops: Vec::new(),
        removes: Vec::new(),
        live: 0,
        bytes_read: buf.len() as u64,
    };
    let mut err = None;
    let (stop, _, _) = band::scan_batches(&buf, HEADER_LEN, |at, e| {
        if err.is_some() {
            return;
        }
        let addr = e.pointer(id, at);
        let addressable = e.kind.holds_value() || e.kind == Kind::Tombstone;
        if !addressable {
            return;
        }
        match index.points_at(e.key, &addr) {
            Ok(true) => {
                let removed = e.kind != Kind::Tombstone
                    && filter.is_some_and(|(f, _)| {
                        f.filter(e.key, &LazyValue::here(e.key, e.payload))
                            == FilterDecision::Remove
                    });
                if e.kind == Kind::Tombstone || removed {
                    let to = if removed {
                        &mut j.removes
                    } else {
                        &mut j.drops
                    };
                    to.push(Relocation {
                        key: e.key.to_vec(),
                        old: addr,
                        new: ValuePointer::default(),
                    });
                } else {
                    j.live += e.len as u64;
                    j.copies.push(Copy {
                        key: e.key.to_vec(),
                        seq: e.seq,
                        prev: e.prev,
                        payload: e.payload.to_vec(),
                        old: addr,
                    });
                }
            }
            Ok(false) => {}
            Err(x) => err = Some(x),
        }
    });
    if let Some(e) = err {
        return Err(e);
    }
    if stop < v.end {
        return Err(Error::corruption(
            &path,
            stop,
            "band entry damaged (found by GC)",
        ));
    }
    Ok(j)
}

/// Deletes retired bands whose relocation every reader sees; returns the
/// bytes freed.
fn free_retired(bs: &BandStore, oldest_visible: u64) -> Result<u64> {
    let due: Vec<(u64, u64)> = {
        let st = bs.state.lock();
        st.bands
            .iter()
            .filter(|(_, b)| b.retired.is_some_and(|s| s <= oldest_visible))
            .map(|(&id, b)| (id, b.file_len))
            .collect()
    };
    let mut freed = 0;
    for (id, len) in due {
        // Readers that find the band gone read its addresses as collected.
        {
            let mut st = bs.state.lock();
            st.bands.remove(&id);
            bs.refresh_due_locked(&st);
        }
        bs.handles.remove(&id);
        let path = bs.path(id);
        bs.fs.remove(&path).ctx(&path)?;
        freed += len;
    }
    Ok(freed)
}

/// What the bands hold when GC picks a victim, gathered by the pick's own
/// pass over them (see [`note_pick`]).
#[derive(Default, Clone, Copy)]
struct Room {
    /// Entry bytes GC may not take: open bands and bands at or after the
    /// replay checkpoints.
    held: u64,
    /// Invalid bytes of those bands.
    held_invalid: u64,
    /// Invalid bytes GC could take now.
    free_invalid: u64,
    /// Bytes of the band files.
    used: u64,
    /// Live entry bytes.
    live: u64,
}

/// Adds what GC saw at a pick to the store's GC-room figures
/// (`BandStore::figures`, all sums over the steps that took a victim):
/// the victim's bytes and the invalid bytes the table gave it; the bands
/// GC may not take (the open bands and every band at or after the replay
/// checkpoints) with their invalid bytes; the invalid bytes GC could take;
/// and the band files' bytes and live bytes. With `SEPKV_GC_TRACE` set, a
/// line per pick goes to standard error.
fn note_pick(
    bs: &BandStore,
    st: &super::State,
    limit: Option<u64>,
    id: u64,
    victim: &super::BandInfo,
    room: &Room,
) {
    let Room {
        held,
        held_invalid: held_inval,
        free_invalid: free_inval,
        used,
        live,
    } = *room;
    let bytes = victim.valid_len.saturating_sub(HEADER_LEN);
    let c = &bs.counters;
    for (counter, v) in [
        (&c.gc_victim_bytes, bytes),
        (&c.gc_victim_invalid, victim.invalid),
        (&c.gc_held_bytes, held),
        (&c.gc_held_invalid, held_inval),
        (&c.gc_free_invalid, free_inval),
        (&c.gc_used_bytes, used),
        (&c.gc_live_bytes, live),
    ] {
        counter.fetch_add(v, Ordering::Relaxed);
    }
    if trace() {
        eprintln!(
            "gc pick band {id}: bytes {bytes} invalid {} | held {held} (invalid {held_inval}) \
             | collectable invalid {free_inval} | used {used} live {live} | limit {limit:?} open {} gc_open {:?}",
            victim.invalid, st.open, st.gc_open
        );
    }
}

/// Whether `SEPKV_GC_TRACE` asks for a line per GC pick (read once).
fn trace() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("SEPKV_GC_TRACE").is_some())
}
