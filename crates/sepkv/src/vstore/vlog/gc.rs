//! Online garbage collection of the value log (WiscKey §3.3.2).
//!
//! One step:
//! 1. read a chunk (`gc_chunk_size` bytes, whole records) at the tail,
//!    after every write that appended into it has published its pointers
//!    ([`IndexReader::wait_in_flight_writes`]);
//! 2. a record is live when the index's current pointer for its key is this
//!    very record: the chunk's records, sorted by key once (their keys
//!    ranges of the chunk's buffer), are judged in one batch
//!    ([`IndexReader::points_at_many`]), which the LSM-tree answers at one
//!    read view in key order, loading each index data block once for the
//!    keys that fall in it;
//! 3. append the live records at the head in key order (so that each
//!    group of relocations is a sorted run of memtable inserts): encoded
//!    as copies into the step's buffer first, then handed to the file in
//!    pieces of 64 KiB under the append lock
//!    (`VlogStore::append_encoded`), so a user append waits for one
//!    piece's write at most; synced here only when
//!    the relocation's sync does not cover this log
//!    ([`IndexRelocator::make_durable_syncs_store`]);
//! 4. install the new pointers by compare-and-set, in groups, durably (a
//!    user write that raced the step keeps its newer value);
//! 5. make the index durable up to the writes that superseded the dead
//!    records, then persist the new tail in the manifest;
//! 6. free the chunk — punch a hole, or delete a file the tail has left —
//!    once no snapshot or iterator older than the relocation is alive.
//!
//! The GC thread, when it is behind, runs steps of several chunks
//! ([`step_chunks`]): 1–4 for each chunk, the relocations installed
//! without a sync, then 5 and 6 once for all of them, so the step pays one
//! durability point and one manifest record however many chunks it took.
//!
//! A crash between any two steps loses nothing: before 4 the copies at the
//! head are unreferenced garbage; before 5 the old records are no longer
//! current and the next step finds them dead (a relocation whose WAL
//! record reached the disk without its copy is dropped at recovery, as a
//! user write whose value was lost is, and its key keeps the old record,
//! which nothing has freed); before 6 the open of the value log punches
//! everything behind the persisted tail again.

use super::{encode_state, record, GcScratch, PendingFree, VlogStore};
use crate::error::{Error, IoContext, Result};
use crate::fs::IoCategory;
use crate::vstore::{GcOutcome, IndexReader, IndexRelocator, Relocation, ValuePointer, ValueStore};
use std::ops::Range;
use std::sync::atomic::Ordering;

/// Bytes of copies a GC step appends at a time, each under the value
/// log's append lock on its own (256 KiB until 2026-11-27; see
/// `RELOCATE_GROUP` in `db/write.rs`).
const GC_APPEND_PIECE: usize = 64 << 10;

/// Most chunks one step collects under one round of syncs
/// ([`step_chunks`]).
pub const MAX_STEP_CHUNKS: usize = 16;

/// Runs one GC step on `vlog`: one chunk.
pub fn step(
    vlog: &VlogStore,
    index: &dyn IndexReader,
    relocator: &dyn IndexRelocator,
) -> Result<GcOutcome> {
    step_chunks(vlog, index, relocator, 1)
}

/// A range of the log a step collected: `(file, start, end)`.
type Collected = (u64, u64, u64);

/// What one chunk of a step did.
struct ChunkDone {
    /// The range collected, and the tail after it.
    range: Collected,
    new_tail: (u64, u64),
    /// Readers at this sequence number or later no longer reach the range.
    visible_from: u64,
    /// Every write that made a record of the range dead is at or below it.
    judged_to: u64,
    /// The chunk was the tail file's end (or the log's head): the step
    /// goes no further.
    last: bool,
}

/// Runs one GC step on `vlog` over up to `chunks` chunks (at least one, at
/// most [`MAX_STEP_CHUNKS`]) under one round of syncs: each chunk's live
/// records are copied and their pointers installed, then one
/// [`IndexRelocator::make_durable`] covers every chunk's relocations and
/// the writes that made its dead records dead, one
/// [`IndexRelocator::persist_state`] records the tail after the last
/// chunk, and then the chunks are freed. A step stops early at the head
/// (the active file), at the end of a file, and at the log-mode replay
/// checkpoint, and after the chunk in hand when a writer waits for the
/// step ([`IndexReader::writers_waiting`]). With a relocator whose syncs do not cover this log
/// ([`IndexRelocator::make_durable_syncs_store`] false), each chunk is
/// relocated and made durable on its own, as a one-chunk step is.
pub fn step_chunks(
    vlog: &VlogStore,
    index: &dyn IndexReader,
    relocator: &dyn IndexRelocator,
    chunks: usize,
) -> Result<GcOutcome> {
    let mut scratch = vlog.gc_lock.lock();
    let cpu = crate::sched::thread_cpu_micros();
    let r = step_chunks_locked(vlog, index, relocator, chunks, &mut scratch);
    vlog.counters.gc_cpu_micros.fetch_add(
        crate::sched::thread_cpu_micros().saturating_sub(cpu),
        Ordering::Relaxed,
    );
    r
}

/// [`step_chunks`] under the GC lock, with its scratch buffers.
fn step_chunks_locked(
    vlog: &VlogStore,
    index: &dyn IndexReader,
    relocator: &dyn IndexRelocator,
    chunks: usize,
    scratch: &mut GcScratch,
) -> Result<GcOutcome> {
    let chunks = chunks.clamp(1, MAX_STEP_CHUNKS);
    let deferred = chunks > 1 && relocator.make_durable_syncs_store();
    let mut out = GcOutcome::default();
    out.bytes_freed += free_pending(vlog, index.oldest_visible_seq())?;
    let mut done: Vec<ChunkDone> = Vec::with_capacity(chunks);
    let mut cursor = vlog.state.lock().tail;
    for _ in 0..chunks {
        match collect_chunk(vlog, index, relocator, cursor, deferred, scratch, &mut out)? {
            Some(c) => {
                cursor = c.new_tail;
                let last = c.last;
                done.push(c);
                // A writer held for this step waits for one chunk and the
                // sync round, not for the rest.
                if last || index.writers_waiting() {
                    break;
                }
            }
            None => break,
        }
    }
    let Some(last) = done.last() else {
        out.did_work = out.bytes_freed > 0;
        return Ok(out);
    };
    let t = std::time::Instant::now();
    // A record judged dead was superseded by a newer write; that write must
    // be durable before the tail passes the record (a crash that lost it
    // would leave the index pointing behind the tail). Such writes are at
    // or below `judged_to`; the relocations (installed unsynced when
    // `deferred`) are at or below `visible_from`. One sync round covers
    // every chunk of the step.
    let durable_to = done
        .iter()
        .map(|c| {
            if deferred {
                c.judged_to.max(c.visible_from)
            } else {
                c.judged_to
            }
        })
        .max()
        .unwrap_or(0);
    relocator.make_durable(durable_to)?;
    let new_tail = last.new_tail;
    // Publish the new tail before persisting it: the relocations behind it
    // are already durable, and a state persisted concurrently (a memtable
    // flush in log mode) then carries this tail or a later one, never an
    // older one than the space freed below.
    let ckpt = {
        let mut st = vlog.state.lock();
        st.tail = new_tail;
        st.ckpt
    };
    relocator.persist_state(&encode_state(new_tail, ckpt))?;
    vlog.counters.gc_sync_rounds.fetch_add(1, Ordering::Relaxed);
    vlog.counters
        .gc_sync_micros
        .fetch_add(micros(t), Ordering::Relaxed);
    let t = std::time::Instant::now();
    {
        // Readers at `visible_from` or later no longer reach a range (its
        // live records were relocated at or before that sequence, its dead
        // ones were overwritten before it); older readers may, so the free
        // waits for them.
        let mut st = vlog.state.lock();
        for c in &done {
            let (file, start, end) = c.range;
            st.pending.push(PendingFree {
                seq: c.visible_from,
                file,
                start,
                end,
                whole_file: c.new_tail.0 > file,
            });
        }
    }
    out.bytes_freed += free_pending(vlog, index.oldest_visible_seq())?;
    vlog.counters
        .gc_free_micros
        .fetch_add(micros(t), Ordering::Relaxed);
    vlog.counters.gc_runs.fetch_add(1, Ordering::Relaxed);
    out.did_work = true;
    Ok(out)
}

/// Microseconds since `t`.
fn micros(t: std::time::Instant) -> u64 {
    u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// Reads, judges and relocates the chunk at `cursor` (the tail, or where
/// the step's previous chunk ended); `None` when there is nothing to
/// collect there (the head, or the log-mode replay checkpoint). The
/// relocations are durable when this returns unless `deferred` (the step's
/// sync round makes them so).
fn collect_chunk(
    vlog: &VlogStore,
    index: &dyn IndexReader,
    relocator: &dyn IndexRelocator,
    cursor: (u64, u64),
    deferred: bool,
    scratch: &mut GcScratch,
    out: &mut GcOutcome,
) -> Result<Option<ChunkDone>> {
    let t = std::time::Instant::now();
    // Where the chunk is.
    let (file, start, end, is_active) = {
        let st = vlog.state.lock();
        let (f, o) = cursor;
        let mut is_active = f >= st.head_file;
        let mut end = st.files.get(&f).map_or(0, |i| i.valid_len);
        // In log mode the records after the checkpoint are the recovery
        // log: GC stops there.
        if let Some((cf, co)) = st.ckpt {
            if cf == f {
                end = end.min(co);
                is_active = true;
            } else if cf < f {
                end = o;
                is_active = true;
            }
        }
        (f, o, end, is_active)
    };
    // Records before `end` may belong to writes that have not inserted
    // their pointers yet; judged now they would look dead.
    index.wait_in_flight_writes()?;
    // Every judgement below looks at the index at this sequence number or
    // later, so relocation need only ask what was written since.
    let judged_at = index.last_sequence();
    if start >= end {
        if is_active {
            return Ok(None);
        }
        // The tail file is used up: move to the next one.
        return Ok(Some(ChunkDone {
            range: (file, start, end),
            new_tail: (file + 1, 0),
            visible_from: judged_at,
            judged_to: judged_at,
            last: false,
        }));
    }

    // Read whole records from [start, start + chunk), into the step's
    // buffer (grown, never zeroed again, while chunks keep their size).
    let path = vlog.path(file);
    let handle = vlog.reader.handle(file)?;
    let codec = vlog.reader.codec(file);
    let want = (end - start).min(vlog.opts.gc_chunk_size.max(codec.header_len() as u64));
    let mut len = want as usize;
    let GcScratch { read, copies } = scratch;
    if read.len() < len {
        read.resize(len, 0);
    }
    // The tail is read front to back (WiscKey §3.5), in one read of the
    // whole chunk, so no read-ahead hint is needed.
    handle.read_exact_at(start, &mut read[..len]).ctx(&path)?;
    let mut pos = 0usize;
    // The records holding values, to judge: where key and value lie in
    // the buffer, sequence number, and the record's address.
    let mut held: Vec<(Range<usize>, u64, Range<usize>, ValuePointer)> = Vec::new();
    loop {
        let buf = &read[..len];
        match codec.decode(&buf[pos..]) {
            Ok(r) => {
                let ptr = ValuePointer {
                    file_id: file,
                    offset: start + pos as u64,
                    length: r.len as u32,
                    aux: 0,
                };
                if r.kind.holds_value() {
                    held.push((range_in(buf, r.key), r.seq, range_in(buf, r.value), ptr));
                }
                pos += r.len;
            }
            Err(record::DecodeError::Truncated) => {
                if pos > 0 || start + len as u64 >= end {
                    break;
                }
                // A record larger than the chunk: read it whole.
                let need = codec.announced_len(buf).unwrap_or(len) as u64;
                let need = need.min(end - start);
                if need <= len as u64 {
                    return Err(Error::corruption(
                        &path,
                        start,
                        "value-log record runs past the valid end",
                    ));
                }
                len = need as usize;
                if read.len() < len {
                    read.resize(len, 0);
                }
                handle.read_exact_at(start, &mut read[..len]).ctx(&path)?;
            }
            Err(e) => {
                return Err(Error::corruption(
                    &path,
                    start + pos as u64,
                    format!("value-log record damaged ({e:?}) inside the valid range"),
                ));
            }
        }
    }
    let buf = &read[..len];
    let chunk_end = start + pos as u64;
    // Judged, copied and relocated in key order: the index then looks the
    // keys up in that order without sorting them again (each of its
    // blocks loaded once for the keys in it), and each relocation group's
    // memtable inserts come as a sorted run, which the skiplist's splice
    // serves from the last insert's place instead of from the top (a
    // chunk's live keys are far apart in write order, close together in
    // key order).
    held.sort_unstable_by(|a, b| buf[a.0.clone()].cmp(&buf[b.0.clone()]));
    // Judge every record in one batch.
    let lookups = held.len() as u64;
    let is_live = {
        let probes: Vec<(&[u8], ValuePointer)> = held
            .iter()
            .map(|(k, _, _, p)| (&buf[k.clone()], *p))
            .collect();
        index.points_at_many(&probes)?
    };
    if is_live.len() != held.len() {
        return Err(Error::InvalidArgument(
            "the index judged a different number of records than asked".into(),
        ));
    }
    let live: Vec<(&[u8], u64, &[u8], ValuePointer)> = held
        .iter()
        .zip(&is_live)
        .filter(|(_, live)| **live)
        .map(|((k, seq, v, p), _)| (&buf[k.clone()], *seq, &buf[v.clone()], *p))
        .collect();
    // Every write that made a record of the chunk dead is published by
    // now (a lookup may have met one still in flight), so at or below
    // this sequence number.
    index.wait_in_flight_writes()?;
    let judged_to = index.last_sequence();
    vlog.reader.stats.add_read(IoCategory::Gc, pos as u64);
    vlog.counters
        .gc_bytes_read
        .fetch_add(pos as u64, Ordering::Relaxed);
    vlog.counters
        .gc_lookups
        .fetch_add(lookups, Ordering::Relaxed);
    vlog.counters.gc_chunks.fetch_add(1, Ordering::Relaxed);
    vlog.counters
        .gc_judge_micros
        .fetch_add(micros(t), Ordering::Relaxed);
    let t = std::time::Instant::now();
    out.bytes_read += pos as u64;

    // Re-append the live records at the head, then relocate.
    let mut live_bytes = 0u64;
    let mut visible_from = index.last_sequence();
    if !live.is_empty() {
        // Encoded here, outside the value log's append lock, into pieces
        // of about GC_APPEND_PIECE bytes, each a batch of its own; then
        // appended piece by piece, so that a user append waits for one
        // piece's copy into the file at most. Durable before any pointer
        // to them is: by the relocation's own sync (or the step's sync
        // round) when the index's syncs cover this log (the engine's
        // value log), else synced here (HashKV's cold data log).
        copies.clear();
        let mut lens: Vec<u32> = Vec::with_capacity(live.len());
        let mut pieces: Vec<(usize, usize)> = Vec::new();
        let (mut piece_from, mut piece_rec) = (0usize, 0usize);
        for (i, (k, seq, v, _)) in live.iter().enumerate() {
            let before = copies.len();
            let piece_full = before - piece_from + record::record_len(k, v) >= GC_APPEND_PIECE;
            let last = i + 1 == live.len() || piece_full;
            let flags = if last { record::FLAG_BATCH_END } else { 0 };
            record::encode(copies, record::Kind::GcCopy, flags, k, *seq, v);
            lens.push((copies.len() - before) as u32);
            if last {
                pieces.push((piece_rec, i + 1));
                piece_rec = i + 1;
                piece_from = copies.len();
            }
        }
        let mut new = Vec::with_capacity(live.len());
        let mut at = 0usize;
        for &(from, to) in &pieces {
            let bytes: usize = lens[from..to].iter().map(|&l| l as usize).sum();
            new.extend(vlog.append_encoded(
                &copies[at..at + bytes],
                &lens[from..to],
                IoCategory::Gc,
            )?);
            at += bytes;
        }
        if !relocator.make_durable_syncs_store() {
            vlog.sync()?;
        }

        let moves: Vec<Relocation> = live
            .iter()
            .zip(&new)
            .map(|((k, _, _, old), new)| Relocation {
                key: k.to_vec(),
                old: *old,
                new: *new,
            })
            .collect();
        let (installed, seq) = if deferred {
            relocator.relocate_judged_unsynced(&moves, judged_at)?
        } else {
            relocator.relocate_judged(&moves, judged_at)?
        };
        visible_from = visible_from.max(seq);
        for (m, ok) in moves.iter().zip(&installed) {
            if *ok {
                live_bytes += m.new.length as u64;
            } else {
                // The user overwrote the key meanwhile: the copy is garbage.
                vlog.note_garbage(&m.new);
            }
        }
        out.bytes_rewritten += live_bytes;
        vlog.counters
            .gc_bytes_rewritten
            .fetch_add(live_bytes, Ordering::Relaxed);
    }
    {
        let mut st = vlog.state.lock();
        if let Some(f) = st.files.get_mut(&file) {
            let dead = (chunk_end - start).saturating_sub(live_bytes);
            // The garbage reported inside the chunk goes with it; dead
            // bytes no report had named were found by this step.
            let reported = f.take_garbage(start, chunk_end);
            vlog.counters
                .garbage_found
                .fetch_add(dead - dead.min(reported), Ordering::Relaxed);
        }
    }
    vlog.counters
        .gc_relocate_micros
        .fetch_add(micros(t), Ordering::Relaxed);
    let file_done = chunk_end >= end && !is_active;
    Ok(Some(ChunkDone {
        range: (file, start, chunk_end),
        new_tail: if file_done {
            (file + 1, 0)
        } else {
            (file, chunk_end)
        },
        visible_from,
        judged_to,
        // Past the chunk the file goes on unread only at its valid end
        // (the head, or the checkpoint): nothing more to take.
        last: chunk_end >= end && is_active,
    }))
}

/// Where `part`, a slice of `whole`, lies in it.
fn range_in(whole: &[u8], part: &[u8]) -> Range<usize> {
    let from = (part.as_ptr() as usize).saturating_sub(whole.as_ptr() as usize);
    debug_assert!(from + part.len() <= whole.len(), "not a slice of it");
    from..from + part.len()
}

/// Frees queued ranges no live reader can reach; returns bytes freed.
fn free_pending(vlog: &VlogStore, oldest: u64) -> Result<u64> {
    let ready: Vec<PendingFree> = {
        let mut st = vlog.state.lock();
        let (ready, keep): (Vec<_>, Vec<_>) = st.pending.drain(..).partition(|p| p.seq <= oldest);
        st.pending = keep;
        if let Some(last) = ready
            .iter()
            .map(|p| {
                if p.whole_file {
                    (p.file + 1, 0)
                } else {
                    (p.file, p.end)
                }
            })
            .max()
        {
            st.freed = st.freed.max(last);
        }
        ready
    };
    let mut freed = 0;
    let mut ready = ready.into_iter();
    while let Some(p) = ready.next() {
        let path = vlog.path(p.file);
        if p.whole_file {
            // What the removal releases is what the file still holds: the
            // chunks before this one were punched as GC passed them. Its
            // logical size counted them again, and a GC rate measured on
            // it (`SpaceGovernor::gc_ran`) read 64 MiB freed in the
            // milliseconds of a file's last chunk — thousands of MB/s —
            // which let writers run to `value_capacity` unpaced.
            let held = vlog
                .reader
                .fs
                .allocated_size(&path)
                .unwrap_or(p.end - p.start);
            vlog.reader.handles.remove(&p.file);
            vlog.state.lock().files.remove(&p.file);
            let removed = match vlog.reader.fs.remove(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(&path, e)),
                _ => vlog
                    .reader
                    .fs
                    .sync_dir(&vlog.reader.dir)
                    .ctx(&vlog.reader.dir),
            };
            if let Err(e) = removed {
                // Queue this file and the rest again: the next step retries,
                // instead of the space staying lost until a reopen.
                let mut st = vlog.state.lock();
                st.pending.push(p);
                st.pending.extend(ready);
                return Err(e);
            }
            freed += held;
        } else if p.end > p.start {
            // Hole punching is best effort: where unsupported, the space
            // returns when the whole file is deleted.
            if vlog
                .reader
                .fs
                .punch_hole(&path, p.start, p.end - p.start)
                .is_ok()
            {
                freed += p.end - p.start;
            }
        }
    }
    vlog.counters
        .gc_bytes_freed
        .fetch_add(freed, Ordering::Relaxed);
    Ok(freed)
}

#[cfg(test)]
mod tests {
    use super::super::{record, VlogOptions, VlogStore};
    use crate::error::Result;
    use crate::fs::{FileSystem, IoStats, MemFs};
    use crate::vstore::{
        IndexReader, IndexRelocator, Relocation, ValuePointer, ValueRecord, ValueStore,
    };
    use parking_lot::Mutex;
    use std::collections::HashMap;
    use std::path::Path;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;

    /// An index whose writes are published only when GC waits for the
    /// writes in flight, as the engine's writer lock makes them. Counts
    /// the durability points and tail records GC asks for.
    #[derive(Default)]
    struct Index {
        map: Mutex<HashMap<Vec<u8>, ValuePointer>>,
        in_flight: Mutex<Vec<(Vec<u8>, ValuePointer)>>,
        last_seq: Mutex<u64>,
        /// `make_durable` syncs the value log (the engine's relocator).
        syncs_store: bool,
        /// Relocations installed and not yet made durable.
        unsynced: Mutex<usize>,
        durable_calls: AtomicUsize,
        persist_calls: AtomicUsize,
        /// A writer waits for the step.
        waiting: AtomicBool,
        /// Writes published at the first relocation, before its
        /// compare-and-set: user writes that raced the step.
        race: Mutex<Vec<(Vec<u8>, ValuePointer)>>,
    }

    impl Index {
        fn publish(&self) {
            let mut map = self.map.lock();
            for (k, p) in self.in_flight.lock().drain(..) {
                map.insert(k, p);
                *self.last_seq.lock() += 1;
            }
        }
    }

    impl IndexReader for Index {
        fn current_pointer(&self, key: &[u8]) -> Result<Option<ValuePointer>> {
            Ok(self.map.lock().get(key).copied())
        }
        fn oldest_visible_seq(&self) -> u64 {
            *self.last_seq.lock()
        }
        fn last_sequence(&self) -> u64 {
            *self.last_seq.lock()
        }
        fn wait_in_flight_writes(&self) -> Result<()> {
            self.publish();
            Ok(())
        }
        fn writers_waiting(&self) -> bool {
            self.waiting.load(Ordering::SeqCst)
        }
    }

    impl IndexRelocator for Index {
        fn relocate(&self, moves: &[Relocation]) -> Result<(Vec<bool>, u64)> {
            let raced: Vec<_> = self.race.lock().drain(..).collect();
            if !raced.is_empty() {
                self.in_flight.lock().extend(raced);
                self.publish();
            }
            let mut map = self.map.lock();
            let ok = moves
                .iter()
                .map(|m| {
                    let cur = map.get(&m.key) == Some(&m.old);
                    if cur {
                        map.insert(m.key.clone(), m.new);
                    }
                    cur
                })
                .collect();
            Ok((ok, *self.last_seq.lock()))
        }
        fn relocate_judged_unsynced(
            &self,
            moves: &[Relocation],
            _judged_at: u64,
        ) -> Result<(Vec<bool>, u64)> {
            assert!(
                self.syncs_store,
                "deferred only when the sync covers the log"
            );
            *self.unsynced.lock() += moves.len();
            self.relocate(moves)
        }
        fn persist_state(&self, _state: &[u8]) -> Result<()> {
            assert_eq!(
                *self.unsynced.lock(),
                0,
                "the tail moved before the relocations were durable"
            );
            self.persist_calls.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
        fn make_durable(&self, _seq: u64) -> Result<()> {
            *self.unsynced.lock() = 0;
            self.durable_calls.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
        fn make_durable_syncs_store(&self) -> bool {
            self.syncs_store
        }
    }

    /// A value log in `dir` of 1 MiB files, collected in chunks of
    /// `gc_chunk_size` bytes, every value separated.
    fn small_vlog(dir: &Path, fs: Arc<MemFs>, gc_chunk_size: u64) -> VlogStore {
        VlogStore::open(
            dir,
            fs,
            Arc::new(IoStats::default()),
            VlogOptions::new(1 << 20, gc_chunk_size),
            None,
        )
        .unwrap()
    }

    /// What GC reports freed is what the store released: a file the tail
    /// has left, whose chunks were punched as GC passed them, counts only
    /// what it still held. (Its logical size counted the punched chunks
    /// twice, and the GC rate writers are held to read thousands of MB/s.)
    #[test]
    fn bytes_freed_count_each_byte_once() {
        let fs = Arc::new(MemFs::new());
        let dir = Path::new("/db");
        fs.create_dir_all(dir).unwrap();
        let vlog = small_vlog(dir, fs.clone(), 256 << 10);
        let index = Index::default();
        let allocated = || -> u64 {
            fs.list(dir)
                .unwrap()
                .iter()
                .map(|n| fs.allocated_size(&dir.join(n)).unwrap_or(0))
                .sum()
        };
        // One key overwritten: all but its last value is garbage, over
        // three files.
        let value = vec![7u8; 1000];
        for seq in 1..=3000 {
            let rec = ValueRecord {
                key: b"k",
                seq,
                value: &value,
            };
            let p = vlog.append(&[rec]).unwrap()[0];
            index.in_flight.lock().push((b"k".to_vec(), p));
            index.publish();
        }
        let before = allocated();
        let (mut freed, mut copied) = (0, 0);
        for _ in 0..64 {
            let out = vlog.gc_step(&index, &index).unwrap();
            if !out.did_work {
                break;
            }
            freed += out.bytes_freed;
            copied += out.bytes_rewritten;
        }
        let after = allocated();
        assert!(after < before / 2, "GC freed little: {before} -> {after}");
        // The copies (one live value, moved at most once per step) added
        // what GC freed beyond the shrinkage.
        assert!(
            freed <= before - after + copied + 4096,
            "reported {freed} B freed; the files shrank by {} B, copies {copied} B",
            before - after
        );
    }

    /// GC reads each record of log it passes once, and judges it with one
    /// index lookup: the lookups equal the records in the bytes read,
    /// whatever share of them is live.
    #[test]
    fn gc_reads_each_record_once_and_looks_it_up_once() {
        let fs = Arc::new(MemFs::new());
        let dir = Path::new("/db");
        fs.create_dir_all(dir).unwrap();
        let vlog = small_vlog(dir, fs, 64 << 10);
        let index = Index::default();
        // 2000 records over 1000 keys, each written twice: half garbage,
        // over several files.
        let value = vec![3u8; 1000];
        let keys: Vec<Vec<u8>> = (0..1000u32).map(|i| i.to_be_bytes().to_vec()).collect();
        let mut record_len = 0u64;
        for (seq, key) in keys.iter().chain(&keys).enumerate() {
            let rec = ValueRecord {
                key,
                seq: seq as u64 + 1,
                value: &value,
            };
            let p = vlog.append(&[rec]).unwrap()[0];
            record_len = p.length as u64;
            index.in_flight.lock().push((key.clone(), p));
            index.publish();
        }
        let figure = |name: &str| {
            vlog.figures()
                .into_iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v)
                .unwrap()
        };
        let mut read = 0;
        for _ in 0..40 {
            let out = vlog.gc_step(&index, &index).unwrap();
            read += out.bytes_read;
        }
        assert_eq!(read, figure("gc_bytes_read"));
        let (tail_file, tail_off) = vlog.tail();
        assert!(tail_file >= 1, "GC did not leave the first file");
        assert!(read > 0 && read % record_len == 0, "{read} B read");
        assert_eq!(
            figure("gc_lookups"),
            read / record_len,
            "one lookup per record read (tail at {tail_file}:{tail_off})"
        );
        // Every key still reads its newest value.
        assert_newest(&vlog, &index, &keys, &value);
    }

    /// A value appended by a write that has not inserted its pointer yet is
    /// live: GC must not judge it (and free its space) before the write
    /// publishes.
    #[test]
    fn gc_keeps_values_of_writes_in_flight() {
        let fs = Arc::new(MemFs::new());
        let dir = Path::new("/db");
        fs.create_dir_all(dir).unwrap();
        let vlog = small_vlog(dir, fs, 1 << 20);
        let index = Index::default();
        let rec = |key: &'static [u8], seq| ValueRecord {
            key,
            seq,
            value: b"some value",
        };
        // An overwritten key, so the chunk has garbage to collect.
        for seq in 1..=2 {
            let p = vlog.append(&[rec(b"a", seq)]).unwrap()[0];
            index.in_flight.lock().push((b"a".to_vec(), p));
            index.publish();
        }
        // A write between its append and its index insert.
        let p = vlog.append(&[rec(b"b", 3)]).unwrap()[0];
        index.in_flight.lock().push((b"b".to_vec(), p));

        let out = vlog.gc_step(&index, &index).unwrap();
        assert!(out.did_work && out.bytes_freed > 0, "{out:?}");
        index.publish(); // the write completes (no-op once GC waited for it)
        for key in [&b"a"[..], b"b"] {
            let p = index.current_pointer(key).unwrap().unwrap();
            assert_eq!(
                vlog.read(key, &p).unwrap().as_deref(),
                Some(&b"some value"[..]),
                "{key:?} lost"
            );
        }
    }

    /// Asserts that every one of `keys` reads `value` through the index's
    /// current pointer.
    fn assert_newest(vlog: &VlogStore, index: &Index, keys: &[Vec<u8>], value: &[u8]) {
        for key in keys {
            let p = index.current_pointer(key).unwrap().unwrap();
            assert_eq!(vlog.read(key, &p).unwrap().as_deref(), Some(value));
        }
    }

    /// Writes `rounds` values of 1000 bytes for each of `keys` keys, key
    /// after key, round after round: every round but the last is garbage.
    fn overwritten(vlog: &VlogStore, index: &Index, keys: u32, rounds: u32) -> Vec<Vec<u8>> {
        let value = vec![5u8; 1000];
        let keys: Vec<Vec<u8>> = (0..keys).map(|i| i.to_be_bytes().to_vec()).collect();
        let mut seq = 0;
        for _ in 0..rounds {
            for key in &keys {
                seq += 1;
                let rec = ValueRecord {
                    key,
                    seq,
                    value: &value,
                };
                let p = vlog.append(&[rec]).unwrap()[0];
                index.in_flight.lock().push((key.clone(), p));
                index.publish();
            }
        }
        keys
    }

    /// A step of several chunks pays one sync round for all of them: one
    /// durability point (after every chunk's relocations, which it
    /// installs unsynced) and one tail record, whatever the chunks; the
    /// tail moves only after the relocations are durable; every key still
    /// reads its newest value.
    #[test]
    fn a_step_of_several_chunks_syncs_once() {
        let fs = Arc::new(MemFs::new());
        let dir = Path::new("/db");
        fs.create_dir_all(dir).unwrap();
        let vlog = small_vlog(dir, fs, 64 << 10);
        let index = Index {
            syncs_store: true,
            ..Index::default()
        };
        // About 1.2 MB over two files; a third of it live.
        let keys = overwritten(&vlog, &index, 400, 3);
        let figure = |name: &str| {
            vlog.figures()
                .into_iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v)
                .unwrap()
        };
        let out = super::step_chunks(&vlog, &index, &index, 4).unwrap();
        assert!(out.did_work && out.bytes_freed > 0, "{out:?}");
        assert_eq!(figure("gc_chunks"), 4, "{out:?}");
        assert!(out.bytes_read > 3 * (64 << 10), "{out:?}");
        assert_eq!(index.durable_calls.load(Ordering::SeqCst), 1);
        assert_eq!(index.persist_calls.load(Ordering::SeqCst), 1);
        assert_eq!(figure("gc_sync_rounds"), 1);
        // One chunk per step: one round per chunk.
        let out = vlog.gc_step(&index, &index).unwrap();
        assert!(out.did_work, "{out:?}");
        assert_eq!(figure("gc_chunks"), 5);
        assert_eq!(index.durable_calls.load(Ordering::SeqCst), 2);
        assert_eq!(index.persist_calls.load(Ordering::SeqCst), 2);
        // Across a file's end and on to the head: every step syncs once.
        for step in 3..40 {
            let out = super::step_chunks(&vlog, &index, &index, 16).unwrap();
            if !out.did_work {
                break;
            }
            assert_eq!(index.persist_calls.load(Ordering::SeqCst), step);
            assert!(index.durable_calls.load(Ordering::SeqCst) <= step);
        }
        assert!(vlog.tail().0 >= 1, "GC did not leave the first file");
        assert_newest(&vlog, &index, &keys, &[5u8; 1000]);
    }

    /// A writer waiting for a step of several chunks waits for one: the
    /// step ends after the chunk in hand. A relocator whose syncs do not
    /// cover the log gets each chunk's relocations made durable on their
    /// own, never deferred.
    #[test]
    fn a_waiting_writer_ends_a_step_of_several_chunks() {
        let fs = Arc::new(MemFs::new());
        let dir = Path::new("/db");
        fs.create_dir_all(dir).unwrap();
        let vlog = small_vlog(dir, fs, 64 << 10);
        let index = Index::default();
        overwritten(&vlog, &index, 400, 3);
        index.waiting.store(true, Ordering::SeqCst);
        let out = super::step_chunks(&vlog, &index, &index, 8).unwrap();
        assert!(out.did_work, "{out:?}");
        assert!(out.bytes_read <= 64 << 10, "{out:?}");
        index.waiting.store(false, Ordering::SeqCst);
        // Not deferred (`relocate_judged_unsynced` would panic): the
        // relocations of each chunk are durable on their own.
        let out = super::step_chunks(&vlog, &index, &index, 8).unwrap();
        assert!(out.bytes_read > 4 * (64 << 10), "{out:?}");
        assert_eq!(index.persist_calls.load(Ordering::SeqCst), 2);
    }

    /// A step over a mix of records — live, dead before the step, and
    /// overwritten by a user write between the judging and the
    /// compare-and-set — leaves what the per-record path left: every key
    /// reads its newest value; the raced keys keep the user's write and
    /// their copies count as garbage, not as rewritten; each copy the step
    /// installed sits where its pointer says, as a GC copy of the key's
    /// value, and the pieces it appended end their batches.
    #[test]
    fn a_step_over_live_dead_and_raced_records_keeps_every_newest_value() {
        let fs = Arc::new(MemFs::new());
        let dir = Path::new("/db");
        fs.create_dir_all(dir).unwrap();
        let vlog = small_vlog(dir, fs, 256 << 10);
        let index = Index::default();
        let value_of =
            |i: u32, round: u32| vec![(i % 251) as u8 ^ round as u8; 700 + (i % 5) as usize * 100];
        // 300 keys; the even ones written twice (their first record is
        // dead), keys in a shuffled order so that the chunk's write order
        // is not key order.
        let keys: Vec<Vec<u8>> = (0..300u32)
            .map(|i| ((i * 7919) % 300).to_be_bytes().to_vec())
            .collect();
        let mut seq = 0;
        let mut put = |key: &[u8], value: &[u8]| {
            seq += 1;
            let rec = ValueRecord { key, seq, value };
            let p = vlog.append(&[rec]).unwrap()[0];
            index.in_flight.lock().push((key.to_vec(), p));
            index.publish();
        };
        for (i, key) in keys.iter().enumerate() {
            put(key, &value_of(i as u32, 0));
        }
        for (i, key) in keys.iter().enumerate().filter(|(i, _)| i.is_multiple_of(2)) {
            put(key, &value_of(i as u32, 1));
        }
        // Keys 1, 3, ..., 29 (live in the first chunk) are overwritten by
        // a user write while the step relocates.
        let raced: Vec<usize> = (1..30).step_by(2).collect();
        for &i in &raced {
            let v = value_of(i as u32, 2);
            let rec = ValueRecord {
                key: &keys[i],
                seq: 10_000 + i as u64,
                value: &v,
            };
            let p = vlog.append(&[rec]).unwrap()[0];
            index.race.lock().push((keys[i].clone(), p));
        }
        let figure = |name: &str| {
            vlog.figures()
                .into_iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v)
                .unwrap()
        };
        let head_before = vlog.head();
        let out = vlog.gc_step(&index, &index).unwrap();
        assert!(out.did_work && out.bytes_read > 0, "{out:?}");
        assert_eq!(out.bytes_rewritten, figure("gc_bytes_rewritten"));
        let newest = |i: usize| -> Vec<u8> {
            if raced.contains(&i) {
                value_of(i as u32, 2)
            } else if i.is_multiple_of(2) {
                value_of(i as u32, 1)
            } else {
                value_of(i as u32, 0)
            }
        };
        // Every copy the step installed: where its pointer says, a GC copy.
        let (head_file, head_off) = head_before;
        let mut installed = 0u64;
        let mut last_copy: Option<(u64, u64, u8)> = None;
        for (i, key) in keys.iter().enumerate() {
            let p = index.current_pointer(key).unwrap().unwrap();
            assert_eq!(
                vlog.read(key, &p).unwrap().as_deref(),
                Some(&newest(i)[..]),
                "key {i} lost its newest value"
            );
            if (p.file_id, p.offset) >= (head_file, head_off) && !raced.contains(&i) {
                let mut bytes = vec![0u8; p.length as usize];
                let handle = vlog.reader.handle(p.file_id).unwrap();
                handle.read_exact_at(p.offset, &mut bytes).unwrap();
                let rec = record::decode(&bytes).unwrap();
                assert_eq!(rec.kind, record::Kind::GcCopy, "key {i}");
                assert_eq!(rec.key, &key[..]);
                assert_eq!(rec.len, p.length as usize);
                installed += u64::from(p.length);
                if last_copy.is_none_or(|(f, o, _)| (p.file_id, p.offset) > (f, o)) {
                    last_copy = Some((p.file_id, p.offset, rec.flags));
                }
            }
        }
        assert!(installed > 0, "the step copied nothing");
        assert_eq!(installed, out.bytes_rewritten, "{out:?}");
        // The raced keys were live when judged: their copies are garbage.
        for &i in &raced {
            let p = index.current_pointer(&keys[i]).unwrap().unwrap();
            assert!(p.offset < head_off || p.file_id < head_file, "key {i}");
        }
        // The appended pieces end their batches: the last record the step
        // wrote carries the batch-end flag.
        let (_, _, flags) = last_copy.unwrap();
        assert_eq!(flags & record::FLAG_BATCH_END, record::FLAG_BATCH_END);
        // And more steps, to the head, keep every newest value.
        for _ in 0..16 {
            if !vlog.gc_step(&index, &index).unwrap().did_work {
                break;
            }
        }
        for (i, key) in keys.iter().enumerate() {
            let p = index.current_pointer(key).unwrap().unwrap();
            assert_eq!(vlog.read(key, &p).unwrap().as_deref(), Some(&newest(i)[..]));
        }
    }
}
