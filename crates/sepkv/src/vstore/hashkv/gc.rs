//! Garbage collection of segment groups (HashKV §3.3, §3.4, §3.7).
//!
//! One step:
//! 1. free retired segments no reader can reach any more; when the cold
//!    data log is mostly garbage, run one of its (vLog) GC steps instead;
//! 2. pick the groups with the largest write volume since their last GC
//!    (plus the garbage the engine reported in them) — a sort of the
//!    segment table, cheap next to reading a group — up to
//!    `max(main segment size, 4 MiB)` of group bytes, at least one group;
//!    flush the write cache and **seal** each group (later appends open a
//!    fresh log segment); then wait until every write that appended to the
//!    sealed segments has published its pointers
//!    ([`IndexReader::wait_in_flight_writes`]);
//! 3. scan each group sequentially and build an in-memory table of its keys:
//!    the record nearest the group's end is the live version; **no index
//!    queries**. A key written more than once in the group is hot: its
//!    latest record is copied to fresh segments of the group (a new main
//!    segment, then log segments). A key written once is cold (with
//!    `hashkv_hotness`): its value goes to the cold data log. A latest
//!    record that is a tag is carried over;
//! 4. sync the copies, then write the GC's intent to the GC journal (or,
//!    without journal, persist the segment table with the copies adopted);
//! 5. install the new pointers with the index's compare-and-set. A failed
//!    compare-and-set means the user wrote or deleted the key meanwhile —
//!    or, after a crash, that the record the index uses is an *older* one in
//!    the group (its newer record lost its WAL entry). A record of the key
//!    appended to the group since the seal explains a racing write (the
//!    group's new records are scanned, no index query). Otherwise one index
//!    query tells which: if the index points into the group's old segments,
//!    that record is copied and relocated too; otherwise the copy is dead
//!    and remembered as such;
//! 6. write tags for the installed cold moves (after the relocation, so a
//!    tag never hides a record the index still uses);
//! 7. commit: the group becomes `new segments ++ segments appended since the
//!    seal`; persist the segment table in the manifest; mark the GC free in
//!    the GC journal; retire the old segments, deleted once no snapshot or
//!    iterator older than the relocation remains.
//!
//! A crash before 4 leaves unreferenced copies, removed on open. After 4 the
//! open adopts the copies behind the old segments (`old ++ new ++ later`),
//! so the index's pointers, old or new, stay valid, and the next GC keeps
//! whichever the index uses. After 7 the old segments are unlisted and
//! removed on open.
//!
//! GC never overwrites a segment in place, so the GC journal needs no
//! before-images (§3.7 logs the overwritten pairs); the cost is one extra
//! main segment of space per group while its GC runs.

use super::cold::is_cold;
use super::journal::{self, GroupIntent};
use super::record::{self, Kind};
use super::segment::InFlight;
use super::{GcJournal, HashKvStore};
use crate::error::{Error, IoContext, Result};
use crate::format::record::RecordWriter;
use crate::fs::{Advice, IoCategory};
use crate::vstore::{
    GcOutcome, IndexReader, IndexRelocator, Relocation, ValuePointer, ValueRecord,
};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

/// Cold-log garbage ratio above which a GC step collects the cold log.
const COLD_GC_RATIO: f64 = 0.5;
/// Group bytes one step collects at least.
const STEP_BYTES: u64 = 4 << 20;
/// GC journal size at which it is started afresh (bytes).
const GC_JOURNAL_RECYCLE: u64 = 64 << 10;

/// A group being collected.
struct Victim {
    group: u32,
    /// Its segments when sealed, and their lengths.
    old: Vec<(u64, u64)>,
    /// Write volume when sealed.
    volume: u64,
    /// Where its copies go.
    out: Output,
}

/// Appends GC output to fresh segments of one group.
struct Output {
    group: u32,
    segs: Vec<u64>,
    /// Current segment: `(id, len, cap)`.
    cur: Option<(u64, u64, u64)>,
    /// Bytes not yet handed to the current segment's file.
    buf: Vec<u8>,
}

impl Output {
    fn new(group: u32) -> Output {
        Output {
            group,
            segs: Vec::new(),
            cur: None,
            buf: Vec::new(),
        }
    }

    /// Places `rec`; `None` when the reserved space has no room for it.
    fn push(&mut self, s: &HashKvStore, rec: &[u8]) -> Result<Option<ValuePointer>> {
        let n = rec.len() as u64;
        let fits = self.cur.is_some_and(|(_, len, cap)| len + n <= cap);
        if !fits {
            self.finish(s)?;
            let a = {
                let mut st = s.state.lock();
                st.table.alloc(self.group, n, self.segs.is_empty(), 0)
            };
            let Some(a) = a else { return Ok(None) };
            self.segs.push(a.id);
            self.cur = Some((a.id, 0, a.seg.cap));
        }
        let (id, len, cap) = self.cur.expect("set above");
        self.buf.extend_from_slice(rec);
        self.cur = Some((id, len + n, cap));
        Ok(Some(ValuePointer {
            file_id: id,
            offset: len,
            length: n as u32,
            aux: 0,
        }))
    }

    /// Hands buffered output to the current segment's file and publishes
    /// its length in the table (readers may follow relocated pointers).
    fn finish(&mut self, s: &HashKvStore) -> Result<()> {
        let Some((id, len, _)) = self.cur else {
            return Ok(());
        };
        if !self.buf.is_empty() {
            s.files
                .append(id, len - self.buf.len() as u64, &self.buf, IoCategory::Gc)?;
            self.buf.clear();
        }
        let mut st = s.state.lock();
        if let Some(seg) = st.table.segs.get_mut(&id) {
            seg.len = len;
        }
        Ok(())
    }

    fn sync(&mut self, s: &HashKvStore) -> Result<()> {
        self.finish(s)?;
        for &id in &self.segs {
            s.files.sync(id)?;
        }
        Ok(())
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
    old: ValuePointer,
    new: ValuePointer,
    victim: usize,
    cold: Option<u64>,
}

/// Runs one GC step.
pub fn step(
    s: &HashKvStore,
    index: &dyn IndexReader,
    relocator: &dyn IndexRelocator,
) -> Result<GcOutcome> {
    let mut gcj = s.gc_lock.lock();
    let mut out = GcOutcome {
        bytes_freed: s.free_pending(index.oldest_visible_seq())?,
        ..Default::default()
    };
    if gcj
        .writer
        .as_ref()
        .is_some_and(|w| w.len() >= GC_JOURNAL_RECYCLE)
    {
        // Every finished or abandoned GC is in the in-memory table: persist
        // it, then start the GC journal afresh.
        s.checkpoint_table()?;
        let path = s.files.dir.join(journal::GC_JOURNAL);
        let mut f = s.files.fs.create(&path).ctx(&path)?;
        f.sync().ctx(&path)?;
        gcj.writer = Some(RecordWriter::new(
            f,
            path,
            s.files.stats.clone(),
            IoCategory::Gc,
        ));
    }

    // The cold data log is collected as a vLog.
    if s.cold.space().garbage_ratio() >= COLD_GC_RATIO {
        let persist = |c: &[u8]| s.persist_table(relocator, Some(c));
        let o = s.cold.gc_step(index, relocator, &persist)?;
        if o.did_work {
            out.bytes_read += o.bytes_read;
            out.bytes_rewritten += o.bytes_rewritten;
            out.bytes_freed += o.bytes_freed;
            out.did_work = true;
            return Ok(out);
        }
    }

    // Pick and seal.
    let mut victims = {
        let mut st = s.state.lock();
        HashKvStore::check_poisoned(&st)?;
        s.flush_cache(&mut st)?;
        let t = &mut st.table;
        let budget = t.geo.main_size.max(STEP_BYTES);
        let mut order: Vec<(u64, u32)> = t
            .groups
            .iter()
            .enumerate()
            .filter(|(_, g)| !g.segs.is_empty())
            .map(|(i, g)| (g.write_volume + g.noted_garbage, i as u32))
            .filter(|&(score, _)| score > 0)
            .collect();
        order.sort_unstable_by(|a, b| b.cmp(a));
        let mut victims = Vec::new();
        let mut bytes = 0u64;
        for (_, gi) in order {
            if bytes >= budget {
                break;
            }
            let g = &mut t.groups[gi as usize];
            g.sealed = true;
            let old: Vec<(u64, u64)> = g.segs.iter().map(|id| (*id, t.segs[id].len)).collect();
            bytes += old.iter().map(|x| x.1).sum::<u64>();
            victims.push(Victim {
                group: gi,
                old,
                volume: g.write_volume,
                out: Output::new(gi),
            });
        }
        victims
    };
    if victims.is_empty() {
        out.did_work = out.bytes_freed > 0;
        return Ok(out);
    }
    // A write that appended to a sealed segment may not have inserted its
    // pointer yet: the scan would take its record for the latest version,
    // fail the compare-and-set, and relocate the older record the index
    // still held, leaving the write's pointer in a retired segment.
    if let Err(e) = index.wait_in_flight_writes() {
        let _ = abort(s, &victims);
        return Err(e);
    }
    let gc_id = gcj.next_id;
    gcj.next_id += 1;

    let mut moves: Vec<Move> = Vec::new();
    let mut cold_vals: Vec<ColdValue> = Vec::new();
    let mut carried_tags = 0u64;
    let scanned = scan_and_copy(
        s,
        &mut victims,
        &mut moves,
        &mut cold_vals,
        &mut carried_tags,
    );
    let bytes_read = match scanned {
        Ok(Some(n)) => n,
        Ok(None) => {
            // No room in the reserved space for the copies.
            abort(s, &victims)?;
            s.counters.gc_stalls.fetch_add(1, Ordering::Relaxed);
            out.did_work = out.bytes_freed > 0;
            return Ok(out);
        }
        Err(e) => {
            let _ = abort(s, &victims);
            return Err(e);
        }
    };
    out.bytes_read = bytes_read;

    // From the intent on, the copies are part of the groups: any failure
    // keeps both old and new segments listed.
    let mut committed = false;
    let res = relocate_and_commit(
        s,
        index,
        relocator,
        &mut gcj,
        gc_id,
        &mut victims,
        moves,
        cold_vals,
        &mut out,
        &mut committed,
    );
    if let Err(e) = res {
        if !committed {
            keep_both(s, &victims);
        }
        return Err(e);
    }
    s.counters.gc_runs.fetch_add(1, Ordering::Relaxed);
    s.counters
        .gc_groups
        .fetch_add(victims.len() as u64, Ordering::Relaxed);
    s.counters
        .gc_bytes_read
        .fetch_add(bytes_read, Ordering::Relaxed);
    s.counters
        .gc_tags
        .fetch_add(carried_tags, Ordering::Relaxed);
    out.did_work = true;
    Ok(out)
}

/// Steps 3: scans the victims, copies hot records and carried tags to their
/// output, collects cold values. `None` when the reserved space ran out.
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
            let ids: HashSet<u64> = v.old.iter().map(|x| x.0).collect();
            st.dead
                .iter()
                .filter(|(seg, _)| ids.contains(seg))
                .copied()
                .collect()
        };
        let mut bufs: Vec<Vec<u8>> = Vec::with_capacity(v.old.len());
        let mut keys: HashMap<Vec<u8>, Latest> = HashMap::new();
        for (si, &(id, len)) in v.old.iter().enumerate() {
            let mut buf = vec![0u8; len as usize];
            if len > 0 {
                s.files.fs.advise(&s.path(id), 0, len, Advice::Sequential);
                s.files.read_exact(id, 0, &mut buf, IoCategory::Gc)?;
            }
            bytes_read += len;
            let mut pos = 0usize;
            while pos < buf.len() {
                let r = record::decode(&buf[pos..]).map_err(|e| {
                    Error::corruption(
                        s.path(id),
                        pos as u64,
                        format!("hashkv record damaged ({e:?}) inside a segment's valid range"),
                    )
                })?;
                let e = keys.entry(r.key.to_vec()).or_insert(Latest {
                    seg_idx: si,
                    off: 0,
                    len: 0,
                    kind: r.kind,
                    seq: 0,
                    count: 0,
                });
                e.count += 1;
                e.seg_idx = si;
                e.off = pos as u64;
                e.len = r.len as u32;
                e.kind = r.kind;
                e.seq = r.seq;
                pos += r.len;
            }
            bufs.push(buf);
        }
        // Copy in the old order.
        let mut ordered: Vec<(Vec<u8>, Latest)> = keys.into_iter().collect();
        ordered.sort_unstable_by_key(|(_, l)| (l.seg_idx, l.off));
        for (key, l) in ordered {
            let seg = v.old[l.seg_idx].0;
            if dead.contains(&(seg, l.off)) {
                continue;
            }
            let bytes = &bufs[l.seg_idx][l.off as usize..(l.off + l.len as u64) as usize];
            let old = ValuePointer {
                file_id: seg,
                offset: l.off,
                length: l.len,
                aux: 0,
            };
            match l.kind {
                Kind::Tag => {
                    // Tags are hints: without room they are dropped.
                    if v.out.push(s, bytes)?.is_some() {
                        *carried_tags += 1;
                    }
                }
                Kind::Value if s.opts.hotness && l.count == 1 => {
                    let r = record::decode(bytes).expect("decoded above");
                    cold_vals.push(ColdValue {
                        victim: vi,
                        key,
                        seq: l.seq,
                        value: r.value.to_vec(),
                        old,
                    });
                }
                Kind::Value => match v.out.push(s, bytes)? {
                    Some(new) => moves.push(Move {
                        key,
                        old,
                        new,
                        victim: vi,
                        cold: None,
                    }),
                    None => return Ok(None),
                },
            }
        }
        v.out.finish(s)?;
    }
    Ok(Some(bytes_read))
}

/// Steps 4–7.
#[allow(clippy::too_many_arguments)]
fn relocate_and_commit(
    s: &HashKvStore,
    index: &dyn IndexReader,
    relocator: &dyn IndexRelocator,
    gcj: &mut GcJournal,
    gc_id: u64,
    victims: &mut [Victim],
    mut moves: Vec<Move>,
    cold_vals: Vec<ColdValue>,
    out: &mut GcOutcome,
    committed: &mut bool,
) -> Result<()> {
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
        s.cold.sync()?;
        for (c, new) in cold_vals.into_iter().zip(ptrs) {
            moves.push(Move {
                key: c.key,
                old: c.old,
                new,
                victim: c.victim,
                cold: Some(c.seq),
            });
        }
    }
    for v in victims.iter_mut() {
        v.out.sync(s)?;
    }
    s.files.sync_dir()?;
    write_intent(s, relocator, gcj, gc_id, victims)?;

    // Round 1.
    let mut visible = index.last_sequence();
    let mut installed_bytes = 0u64;
    let mut cold_bytes = 0u64;
    let mut tags: Vec<(usize, Vec<u8>, u64, ValuePointer)> = Vec::new();
    let mut round2: Vec<Move> = Vec::new();
    let mut post_keys: HashMap<usize, HashSet<Vec<u8>>> = HashMap::new();
    if !moves.is_empty() {
        let rel: Vec<Relocation> = moves
            .iter()
            .map(|m| Relocation {
                key: m.key.clone(),
                old: m.old,
                new: m.new,
            })
            .collect();
        let (ok, seq) = relocator.relocate(&rel)?;
        visible = visible.max(seq);
        for (m, ok) in moves.into_iter().zip(ok) {
            if ok {
                installed_bytes += m.old.length as u64;
                if let Some(seq) = m.cold {
                    cold_bytes += m.old.length as u64;
                    tags.push((m.victim, m.key, seq, m.new));
                }
                continue;
            }
            // The compare-and-set failed. A record of the key written to
            // the group since the seal explains it (a racing overwrite);
            // otherwise one index query tells whether the key was deleted
            // or the index uses an older record of this group.
            let since_seal = match post_keys.entry(m.victim) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(keys_since_seal(s, &victims[m.victim])?)
                }
            };
            if since_seal.contains(&m.key) {
                mark_dead(s, &m);
                continue;
            }
            s.counters.gc_lookups.fetch_add(1, Ordering::Relaxed);
            let v = &mut victims[m.victim];
            let cur = index.current_pointer(&m.key)?;
            let older = cur.filter(|p| {
                !is_cold(p) && v.old.iter().any(|&(id, _)| id == p.file_id) && *p != m.old
            });
            mark_dead(s, &m);
            if let Some(p) = older {
                let mut buf = vec![0u8; p.length as usize];
                s.files
                    .read_exact(p.file_id, p.offset, &mut buf, IoCategory::Gc)?;
                match record::decode(&buf) {
                    Ok(r) if r.key == m.key && r.kind == Kind::Value && r.len == buf.len() => {}
                    _ => {
                        return Err(Error::corruption(
                            s.path(p.file_id),
                            p.offset,
                            "hashkv record the index points at is damaged",
                        ))
                    }
                }
                let Some(new) = v.out.push(s, &buf)? else {
                    return Err(Error::InvalidArgument(
                        "hashkv GC ran out of reserved space while relocating".into(),
                    ));
                };
                round2.push(Move {
                    key: m.key,
                    old: p,
                    new,
                    victim: m.victim,
                    cold: None,
                });
            }
        }
    }

    // Round 2: records the index still used in the old segments.
    if !round2.is_empty() {
        for v in victims.iter_mut() {
            v.out.sync(s)?;
        }
        s.files.sync_dir()?;
        write_intent(s, relocator, gcj, gc_id, victims)?;
        let rel: Vec<Relocation> = round2
            .iter()
            .map(|m| Relocation {
                key: m.key.clone(),
                old: m.old,
                new: m.new,
            })
            .collect();
        let (ok, seq) = relocator.relocate(&rel)?;
        visible = visible.max(seq);
        for (m, ok) in round2.into_iter().zip(ok) {
            if ok {
                installed_bytes += m.old.length as u64;
            } else {
                mark_dead(s, &m);
            }
        }
    }

    // Tags for the cold moves that were installed.
    let segs_before: usize = victims.iter().map(|v| v.out.segs.len()).sum();
    let mut tag_count = 0u64;
    for (vi, key, seq, cold_ptr) in tags {
        let mut rec = Vec::new();
        record::encode(&mut rec, Kind::Tag, &key, seq, &cold_ptr.encode());
        if victims[vi].out.push(s, &rec)?.is_some() {
            tag_count += 1;
        }
    }
    for v in victims.iter_mut() {
        v.out.sync(s)?;
    }
    s.files.sync_dir()?;
    if victims.iter().map(|v| v.out.segs.len()).sum::<usize>() != segs_before {
        // Tags opened new segments. Once the commit below is in memory, user
        // appends may land in them before the table is persisted: a crash
        // then must still find them.
        write_intent(s, relocator, gcj, gc_id, victims)?;
    }

    // The writes that made the old segments' other records dead must be
    // durable before those segments go: a crash that lost one would leave
    // the index pointing into a removed segment.
    relocator.make_durable(index.last_sequence())?;

    // Commit.
    let retired: Vec<u64>;
    let bytes = {
        let mut st = s.state.lock();
        let mut r = Vec::new();
        for v in victims.iter() {
            let g = &mut st.table.groups[v.group as usize];
            let post: Vec<u64> = g.segs[v.old.len()..].to_vec();
            g.segs = v.out.segs.iter().copied().chain(post).collect();
            g.sealed = false;
            g.write_volume = g.write_volume.saturating_sub(v.volume);
            g.noted_garbage = 0;
            r.extend(v.old.iter().map(|x| x.0));
        }
        let groups: HashSet<u32> = victims.iter().map(|v| v.group).collect();
        st.table.inflight.retain(|f| !groups.contains(&f.group));
        st.table.epoch += 1;
        retired = r;
        *committed = true;
        st.table.encode()
    };
    relocator.persist_state(&bytes)?;
    if let Some(w) = gcj.writer.as_mut() {
        w.add_record(&journal::encode_done(gc_id))?;
        w.flush()?;
    }
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
    Ok(())
}

/// Keys of the records written to a victim's group since it was sealed
/// (the segments after its old ones).
fn keys_since_seal(s: &HashKvStore, v: &Victim) -> Result<HashSet<Vec<u8>>> {
    let post: Vec<(u64, u64)> = {
        let mut st = s.state.lock();
        s.flush_cache(&mut st)?;
        let g = &st.table.groups[v.group as usize];
        g.segs
            .iter()
            .skip(v.old.len())
            .map(|id| (*id, st.table.segs[id].len))
            .collect()
    };
    let mut keys = HashSet::new();
    for (id, len) in post {
        let mut buf = vec![0u8; len as usize];
        s.files.read_exact(id, 0, &mut buf, IoCategory::Gc)?;
        let mut pos = 0;
        while pos < buf.len() {
            let r = record::decode(&buf[pos..]).map_err(|e| {
                Error::corruption(
                    s.path(id),
                    pos as u64,
                    format!("hashkv record damaged ({e:?})"),
                )
            })?;
            keys.insert(r.key.to_vec());
            pos += r.len;
        }
    }
    Ok(keys)
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

/// Records that the victims' copies may be referenced from now on: in the
/// in-memory table (so every persisted copy of it adopts them), then in the
/// GC journal, or — without journal — in a persisted table.
fn write_intent(
    s: &HashKvStore,
    relocator: &dyn IndexRelocator,
    gcj: &mut GcJournal,
    gc_id: u64,
    victims: &[Victim],
) -> Result<()> {
    let intents: Vec<GroupIntent> = {
        let mut st = s.state.lock();
        let groups: HashSet<u32> = victims.iter().map(|v| v.group).collect();
        st.table.inflight.retain(|f| !groups.contains(&f.group));
        for v in victims {
            st.table.inflight.push(InFlight {
                group: v.group,
                old_len: v.old.len(),
                new: v.out.segs.clone(),
            });
        }
        victims
            .iter()
            .map(|v| GroupIntent {
                group: v.group,
                old: v.old.iter().map(|x| x.0).collect(),
                new: v
                    .out
                    .segs
                    .iter()
                    .map(|id| (*id, st.table.segs[id].clone()))
                    .collect(),
            })
            .collect()
    };
    match gcj.writer.as_mut() {
        Some(w) => {
            w.add_record(&journal::encode_begin(gc_id, &intents))?;
            w.sync()
        }
        None => s.persist_table(relocator, None),
    }
}

/// Undoes a GC that installed nothing: removes its copies, unseals.
fn abort(s: &HashKvStore, victims: &[Victim]) -> Result<()> {
    let ids: Vec<u64> = {
        let mut st = s.state.lock();
        let mut ids = Vec::new();
        for v in victims {
            st.table.groups[v.group as usize].sealed = false;
            for &id in &v.out.segs {
                if let Some(seg) = st.table.segs.remove(&id) {
                    st.table.used_units -= seg.units as u64;
                }
                ids.push(id);
            }
        }
        ids
    };
    for id in ids {
        s.files.remove(id)?;
    }
    s.files.fs.sync_dir(&s.files.dir).ctx(&s.files.dir)
}

/// After a failure past the intent: list both the old segments and the
/// copies the intent recorded (`old ++ new ++ later`, as a reopen would);
/// segments opened after the last intent hold only tags and are dropped.
fn keep_both(s: &HashKvStore, victims: &[Victim]) {
    let mut st = s.state.lock();
    let groups: HashSet<u32> = victims.iter().map(|v| v.group).collect();
    if !st.table.inflight.iter().any(|f| groups.contains(&f.group)) {
        // The intent was never recorded: nothing can point at the copies.
        drop(st);
        let _ = abort(s, victims);
        return;
    }
    let recorded: HashMap<u32, Vec<u64>> = st
        .table
        .inflight
        .iter()
        .filter(|f| groups.contains(&f.group))
        .map(|f| (f.group, f.new.clone()))
        .collect();
    st.table.inflight.retain(|f| !groups.contains(&f.group));
    let mut unrecorded = Vec::new();
    for v in victims {
        let new = recorded.get(&v.group).cloned().unwrap_or_default();
        for &id in v.out.segs.iter().filter(|id| !new.contains(id)) {
            if let Some(seg) = st.table.segs.remove(&id) {
                st.table.used_units -= seg.units as u64;
            }
            unrecorded.push(id);
        }
        let g = &mut st.table.groups[v.group as usize];
        let at = v.old.len().min(g.segs.len());
        g.segs.splice(at..at, new);
        g.sealed = false;
    }
    drop(st);
    for id in unrecorded {
        let _ = s.files.remove(id);
    }
}
