//! Online garbage collection of the value log (WiscKey §3.3.2).
//!
//! One step:
//! 1. read a chunk (`gc_chunk_size` bytes, whole records) at the tail,
//!    after every write that appended into it has published its pointers
//!    ([`IndexReader::wait_in_flight_writes`]);
//! 2. a record is live when the index's current pointer for its key is this
//!    very record: the chunk's records are judged in one batch
//!    ([`IndexReader::points_at_many`]), which the LSM-tree answers at one
//!    read view in key order, loading each index data block once for the
//!    keys that fall in it;
//! 3. append the live records at the head in key order (in pieces of
//!    64 KiB, so user appends never wait long for the value log; sorted,
//!    so that each group of relocations is a sorted run of memtable
//!    inserts), synced here only when
//!    the relocation's sync does not cover this log
//!    ([`IndexRelocator::make_durable_syncs_store`]);
//! 4. install the new pointers by compare-and-set, in groups, durably (a
//!    user write that raced the step keeps its newer value);
//! 5. make the index durable up to the writes that superseded the dead
//!    records, then persist the new tail in the manifest;
//! 6. free the chunk — punch a hole, or delete a file the tail has left —
//!    once no snapshot or iterator older than the relocation is alive.
//!
//! A crash between any two steps loses nothing: before 4 the copies at the
//! head are unreferenced garbage; before 5 the old records are no longer
//! current and the next step finds them dead (a relocation whose WAL
//! record reached the disk without its copy is dropped at recovery, as a
//! user write whose value was lost is, and its key keeps the old record,
//! which nothing has freed); before 6 the open of the value log punches
//! everything behind the persisted tail again.

use super::{encode_state, record, PendingFree, VlogStore};
use crate::error::{Error, IoContext, Result};
use crate::fs::IoCategory;
use crate::vstore::{
    retain_live, GcOutcome, IndexReader, IndexRelocator, Relocation, ValuePointer, ValueRecord,
    ValueStore,
};
use std::ops::Range;
use std::sync::atomic::Ordering;

/// Bytes of copies a GC step appends at a time, each under the value
/// log's append lock on its own (256 KiB until 2026-11-27; see
/// `RELOCATE_GROUP` in `db/write.rs`).
const GC_APPEND_PIECE: usize = 64 << 10;

/// Runs one GC step on `vlog`.
pub fn step(
    vlog: &VlogStore,
    index: &dyn IndexReader,
    relocator: &dyn IndexRelocator,
) -> Result<GcOutcome> {
    let _one_at_a_time = vlog.gc_lock.lock();
    let mut out = GcOutcome::default();
    out.bytes_freed += free_pending(vlog, index.oldest_visible_seq())?;

    // Where the chunk is.
    let (file, start, end, is_active) = {
        let st = vlog.state.lock();
        let (f, o) = st.tail;
        let mut is_active = f == st.head_file;
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
            out.did_work = out.bytes_freed > 0;
            return Ok(out);
        }
        // The tail file is used up: move to the next one.
        advance(
            vlog,
            index,
            relocator,
            (file, start, end),
            (file + 1, 0),
            index.last_sequence(),
            &mut out,
        )?;
        out.did_work = true;
        return Ok(out);
    }

    // Read whole records from [start, start + chunk).
    let path = vlog.path(file);
    let handle = vlog.reader.handle(file)?;
    let codec = vlog.reader.codec(file);
    let want = (end - start).min(vlog.opts.gc_chunk_size.max(codec.header_len() as u64));
    let mut buf = vec![0u8; want as usize];
    // The tail is read front to back (WiscKey §3.5), in one read of the
    // whole chunk, so no read-ahead hint is needed.
    handle.read_exact_at(start, &mut buf).ctx(&path)?;
    let mut pos = 0usize;
    // The records holding values, to judge: key, sequence number, where
    // the value lies in `buf`, and the record's address.
    let mut held: Vec<(Vec<u8>, u64, Range<usize>, ValuePointer)> = Vec::new();
    loop {
        match codec.decode(&buf[pos..]) {
            Ok(r) => {
                let ptr = ValuePointer {
                    file_id: file,
                    offset: start + pos as u64,
                    length: r.len as u32,
                    aux: 0,
                };
                if r.kind.holds_value() {
                    held.push((r.key.to_vec(), r.seq, range_in(&buf, r.value), ptr));
                }
                pos += r.len;
            }
            Err(record::DecodeError::Truncated) => {
                if pos > 0 || start + buf.len() as u64 >= end {
                    break;
                }
                // A record larger than the chunk: read it whole.
                let need = codec.announced_len(&buf).unwrap_or(buf.len()) as u64;
                let need = need.min(end - start);
                if need <= buf.len() as u64 {
                    return Err(Error::corruption(
                        &path,
                        start,
                        "value-log record runs past the valid end",
                    ));
                }
                buf.resize(need as usize, 0);
                handle.read_exact_at(start, &mut buf).ctx(&path)?;
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
    let chunk_end = start + pos as u64;
    // Judge every record in one batch: the index may then look the keys up
    // in key order, each of its blocks loaded once for the keys in it.
    let lookups = held.len() as u64;
    let mut live: Vec<(Vec<u8>, u64, &[u8], ValuePointer)> = retain_live(index, held)?
        .into_iter()
        .map(|(k, seq, v, p)| (k, seq, &buf[v], p))
        .collect();
    // Copied and relocated in key order: each relocation group's memtable
    // inserts then come as a sorted run, which the skiplist's splice serves
    // from the last insert's place instead of from the top (a chunk's live
    // keys are far apart in write order, close together in key order).
    live.sort_unstable_by(|a, b| a.0.cmp(&b.0));
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
    out.bytes_read = pos as u64;

    // Re-append the live records at the head, durably, then relocate.
    let mut live_bytes = 0u64;
    let mut visible_from = index.last_sequence();
    if !live.is_empty() {
        let records: Vec<ValueRecord<'_>> = live
            .iter()
            .map(|(k, seq, v, _)| ValueRecord {
                key: k,
                seq: *seq,
                value: v,
            })
            .collect();
        // In pieces, so that user appends wait for one piece at most; then
        // durable before any pointer to them is: by the relocation's own
        // sync when the index's syncs cover this log (the engine's value
        // log), else synced here (HashKV's cold data log).
        let mut new = Vec::with_capacity(records.len());
        let mut from = 0;
        while from < records.len() {
            let mut to = from;
            let mut bytes = 0usize;
            while to < records.len() && (to == from || bytes < GC_APPEND_PIECE) {
                bytes += records[to].key.len() + records[to].value.len();
                to += 1;
            }
            new.extend(vlog.append_as(&records[from..to], IoCategory::Gc)?);
            from = to;
        }
        if !relocator.make_durable_syncs_store() {
            vlog.sync()?;
        }

        let moves: Vec<Relocation> = live
            .iter()
            .zip(&new)
            .map(|((k, _, _, old), new)| Relocation {
                key: k.clone(),
                old: *old,
                new: *new,
            })
            .collect();
        let (installed, seq) = relocator.relocate_judged(&moves, judged_at)?;
        visible_from = visible_from.max(seq);
        for (m, ok) in moves.iter().zip(&installed) {
            if *ok {
                live_bytes += m.new.length as u64;
            } else {
                // The user overwrote the key meanwhile: the copy is garbage.
                vlog.note_garbage(&m.new);
            }
        }
        out.bytes_rewritten = live_bytes;
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
    // A record judged dead was superseded by a newer write; that write must
    // be durable before the tail passes the record (a crash that lost it
    // would leave the index pointing behind the tail). Such writes are at
    // or below `judged_to`: after relocations, whose sync covered a later
    // sequence number, this costs nothing.
    relocator.make_durable(judged_to)?;
    let new_tail = if chunk_end >= end && !is_active {
        (file + 1, 0)
    } else {
        (file, chunk_end)
    };
    advance(
        vlog,
        index,
        relocator,
        (file, start, chunk_end),
        new_tail,
        visible_from,
        &mut out,
    )?;
    vlog.counters.gc_runs.fetch_add(1, Ordering::Relaxed);
    out.did_work = true;
    Ok(out)
}

/// Where `part`, a slice of `whole`, lies in it.
fn range_in(whole: &[u8], part: &[u8]) -> Range<usize> {
    let from = (part.as_ptr() as usize).saturating_sub(whole.as_ptr() as usize);
    debug_assert!(from + part.len() <= whole.len(), "not a slice of it");
    from..from + part.len()
}

/// Persists `new_tail` and queues the freeing of `range = (file, start,
/// end)`. Readers at `visible_from` or later no longer reach the range (its
/// live records were relocated at or before that sequence, its dead ones
/// were overwritten before it); older readers may, so the free waits for
/// them.
fn advance(
    vlog: &VlogStore,
    index: &dyn IndexReader,
    relocator: &dyn IndexRelocator,
    range: (u64, u64, u64),
    new_tail: (u64, u64),
    visible_from: u64,
    out: &mut GcOutcome,
) -> Result<()> {
    let (file, start, end) = range;
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
    {
        let mut st = vlog.state.lock();
        st.pending.push(PendingFree {
            seq: visible_from,
            file,
            start,
            end,
            whole_file: new_tail.0 > file,
        });
    }
    out.bytes_freed += free_pending(vlog, index.oldest_visible_seq())?;
    Ok(())
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
    use super::super::{VlogOptions, VlogStore};
    use crate::error::Result;
    use crate::fs::{FileSystem, IoStats, MemFs};
    use crate::vstore::{
        IndexReader, IndexRelocator, Relocation, ValuePointer, ValueRecord, ValueStore,
    };
    use parking_lot::Mutex;
    use std::collections::HashMap;
    use std::path::Path;
    use std::sync::Arc;

    /// An index whose writes are published only when GC waits for the
    /// writes in flight, as the engine's writer lock makes them.
    #[derive(Default)]
    struct Index {
        map: Mutex<HashMap<Vec<u8>, ValuePointer>>,
        in_flight: Mutex<Vec<(Vec<u8>, ValuePointer)>>,
        last_seq: Mutex<u64>,
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
    }

    impl IndexRelocator for Index {
        fn relocate(&self, moves: &[Relocation]) -> Result<(Vec<bool>, u64)> {
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
        fn persist_state(&self, _state: &[u8]) -> Result<()> {
            Ok(())
        }
        fn make_durable(&self, _seq: u64) -> Result<()> {
            Ok(())
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
        for key in &keys {
            let p = index.current_pointer(key).unwrap().unwrap();
            assert_eq!(vlog.read(key, &p).unwrap().as_deref(), Some(&value[..]));
        }
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
}
