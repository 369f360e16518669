//! The write path: group commit, value separation, the writer lock, GC
//! for writes the value store refused, and GC's compare-and-set
//! ([`IndexRelocator`]).

use super::{Db, DbInner};
use crate::batch::WriteBatch;
use crate::commit::Group;
use crate::error::{Error, Result};
use crate::fs::IoCategory;
use crate::index::memtable::Lookup;
use crate::index::sstable::ReadCtx;
use crate::options::{WriteOptions, MAX_BATCH_SIZE};
use crate::seqno::SeqNum;
use crate::spin::SpinMutexGuard;
use crate::value_type::ValueType;
use crate::vstore::{IndexReader, IndexRelocator, LogEntry, Relocation, ValuePointer, ValueRecord};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Longest a write the value store refused waits for the oldest reader to
/// release space GC retired (see `DbInner::wait_for_readers`).
const ROOM_WAIT: Duration = Duration::from_secs(10);

/// Largest encoded batch whose separated values a synced write carries in
/// its WAL record (`Options::sync_values_in_wal`): a commit group's bound.
const CARRY_BYTES: usize = crate::commit::GROUP_BYTES;

/// Longest encoded [`ValuePointer`]: four varints.
const POINTER_MAX: usize = 10 + 10 + 5 + 10;

/// Encoded bytes, at most, of an index batch of entries `(key length,
/// value length kept in the batch)`, each with a pointer: the type byte,
/// three length prefixes, the key, the pointer and the value kept (an
/// inline value, or a carried one).
fn index_batch_bytes(entries: impl Iterator<Item = (usize, Option<usize>)>) -> usize {
    entries
        .map(|(key, value)| 1 + 15 + key + POINTER_MAX + value.unwrap_or(0))
        .sum()
}

/// Progress of the GC a refused write runs (see `DbInner::gc_for_room`).
#[derive(Default)]
struct RoomGc {
    /// Value-store bytes (live + garbage) when the write was first refused.
    start_bytes: Option<u64>,
    /// Bytes GC has read since.
    read: u64,
    /// A memtable flush was forced to let GC go on.
    flushed: bool,
    /// The write waited once for a GC step it found running.
    waited: bool,
}

impl Db {
    /// Sets `key` to `value` (not synced; see [`Db::write`]). Keys and
    /// values are bytes: `&str`, `String`, `&[u8]`, `Vec<u8>`, arrays.
    ///
    /// # Errors
    /// `InvalidArgument` for an empty key, a key over
    /// [`crate::options::MAX_KEY_SIZE`] or a value over
    /// [`crate::options::MAX_VALUE_SIZE`] bytes; `Closed`; `Poisoned`; `Io`.
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        let mut b = WriteBatch::new();
        b.put(key, value)?;
        self.write(&b, WriteOptions::default())
    }

    /// Removes `key` (not synced). Removing a missing key is not an error.
    ///
    /// # Errors
    /// As [`Db::put`].
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete(key)?;
        self.write(&b, WriteOptions::default())
    }

    /// Applies `batch` atomically.
    ///
    /// # Errors
    /// `InvalidArgument` for a batch over [`crate::options::MAX_BATCH_SIZE`]
    /// bytes; `Closed`; `ReadOnly` on a handle from [`Db::open_read_only`]; `Poisoned` after an earlier failure; `Io` if the WAL
    /// append or sync fails (the write is then not acknowledged and the
    /// database is poisoned).
    pub fn write(&self, batch: &WriteBatch, opts: WriteOptions) -> Result<()> {
        self.write_with_sequence(batch, opts).map(|_| ())
    }

    /// [`Db::write`], returning the sequence number given to the batch's
    /// last entry (its entries have consecutive numbers ending there; an
    /// empty batch returns the current last sequence number).
    ///
    /// # Errors
    /// As [`Db::write`].
    pub fn write_with_sequence(&self, batch: &WriteBatch, opts: WriteOptions) -> Result<SeqNum> {
        self.check_writable("a write")?;
        if batch.is_empty() {
            // Nothing to log, but `sync` still promises that every earlier
            // write is durable when this returns.
            let last = self.last_sequence();
            if opts.sync {
                self.inner.make_durable(last)?;
            }
            return Ok(last);
        }
        if batch.approximate_size() > MAX_BATCH_SIZE {
            return Err(Error::InvalidArgument(format!(
                "batch of {} bytes exceeds the {MAX_BATCH_SIZE} byte limit",
                batch.approximate_size()
            )));
        }
        self.inner.write(batch, opts)
    }
}

impl DbInner {
    /// Commits `batch` through the group-commit queue ([`crate::commit`]).
    fn write(&self, batch: &WriteBatch, opts: WriteOptions) -> Result<SeqNum> {
        self.commit
            .commit(batch, opts.sync, |g| self.write_group(g))
    }

    /// Writes a whole commit group as one batch; returns each member's last
    /// sequence number. When the value store stays full after GC, the
    /// members are written one by one, so that those without separated
    /// values (deletes, small values) still go through.
    fn write_group(&self, g: &Group<'_>) -> Vec<Result<SeqNum>> {
        let n = g.len();
        match self.write_batch(&g.batch, g.sync) {
            Ok(last) => {
                let mut end = last + 1 - g.batch.len() as u64;
                g.members()
                    .map(|m| {
                        end += m as u64;
                        Ok(end - 1)
                    })
                    .collect()
            }
            Err(Error::ValueStoreFull(_)) if n > 1 => {
                match g.batch.split(&g.members().collect::<Vec<_>>()) {
                    Ok(bs) => bs.iter().map(|b| self.write_batch(b, g.sync)).collect(),
                    Err(e) => vec![Err(e); n],
                }
            }
            Err(e) => vec![Err(e); n],
        }
    }

    /// Writes one batch: room, value separation (GC first when the value
    /// store refuses it), WAL, memtable, publish — all under the writer
    /// lock, which GC's `wait_in_flight_writes` relies on.
    fn write_batch(&self, batch: &WriteBatch, sync: bool) -> Result<SeqNum> {
        let mut guard = self.writer.lock();
        let user_bytes = batch.user_bytes();
        let mut room = RoomGc::default();
        // GC steps this write is held for (`DbStats::write_gc_steps_max`).
        let mut held = 0u64;
        let out = self.write_batch_held(batch, sync, &mut guard, user_bytes, &mut room, &mut held);
        if held > 0 {
            self.counters
                .write_gc_steps_max
                .fetch_max(held, Ordering::Relaxed);
        }
        out
    }

    /// [`DbInner::write_batch`]'s work, counting in `held` the GC steps the
    /// write is held for.
    fn write_batch_held(
        &self,
        batch: &WriteBatch,
        sync: bool,
        guard: &mut SpinMutexGuard<'_, bool>,
        user_bytes: u64,
        room: &mut RoomGc,
        held: &mut u64,
    ) -> Result<SeqNum> {
        loop {
            self.shared.poisoned()?;
            if !**guard {
                return Err(Error::Closed);
            }
            self.index.make_room(false)?;
            if !self.shared.opts.wal || self.vstore.separates(batch.max_value_len()) {
                *held += u64::from(self.space_backpressure(guard, user_bytes)?);
                if self.vstore.over_space_bound() {
                    // The store is past its own space bound (the bands'
                    // over-provisioning): this writer runs a GC step, or
                    // waits for the one running, then writes whatever it
                    // freed.
                    let t = Instant::now();
                    *held += 1;
                    SpinMutexGuard::unlocked(guard, || -> Result<()> {
                        if !self.wait_for_running_gc() {
                            self.gc_step()?;
                            self.counters.write_gc_steps.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(())
                    })?;
                    self.shared.note_stall(t);
                }
                let pause = self.vstore.write_delay();
                if !pause.is_zero() {
                    let t = Instant::now();
                    SpinMutexGuard::unlocked(guard, || std::thread::sleep(pause));
                    self.shared.note_stall(t);
                }
                // Backpressure may have let go of the writer lock (a delay,
                // GC run by this writer): the database may have closed or
                // been poisoned meanwhile, and nothing may reach the value
                // store or the log after that.
                self.shared.poisoned()?;
                if !**guard {
                    return Err(Error::Closed);
                }
                if self.space.sample_due() {
                    if let Some(Ok(e)) = batch.entries().next() {
                        let ctx = ReadCtx {
                            category: IoCategory::Gc,
                            fill_cache: false,
                        };
                        let hit = matches!(
                            self.index.get(e.key, None, ctx)?,
                            Lookup::Found(ValueType::Pointer, _)
                        );
                        self.space.sampled(hit);
                    }
                }
            }

            // Separate large values into the value store (never for
            // `inline`); in log mode the value log records every entry.
            let prepared = if !self.shared.opts.wal {
                Some(self.log_entries(batch))
            } else if self.vstore.separates(batch.max_value_len()) {
                // A synced batch carries its values in the WAL record too,
                // so that its sync waits for the WAL's fsync alone — up to
                // `CARRY_BYTES`: past that, writing the values twice costs
                // more than the value store's fsync it saves.
                let carry = sync
                    && self.shared.opts.sync_values_in_wal
                    && batch.approximate_size() <= CARRY_BYTES
                    && self.index.carries_values();
                Some(self.separate_values(batch, carry))
            } else {
                None
            };
            let prepared = match prepared {
                Some(Err(Error::ValueStoreFull(msg))) => {
                    // The append would pass `value_capacity`: GC first
                    // (HashKV §4.1 setup), with the writer lock released so
                    // that GC can install its relocations; then retry.
                    let t = Instant::now();
                    *held += 1;
                    let more = SpinMutexGuard::unlocked(guard, || self.gc_for_room(room));
                    self.shared.note_stall(t);
                    if !more? {
                        return Err(Error::ValueStoreFull(msg));
                    }
                    continue;
                }
                // Anything else may have left part of the batch in the
                // value store, out of step with the index: refuse further
                // writes.
                Some(Err(e)) => {
                    self.shared.set_poison(&e);
                    return Err(e);
                }
                Some(Ok(b)) => Some(b),
                None => None,
            };
            let seq = self.write_locked(prepared.as_ref().unwrap_or(batch), sync)?;
            self.counters
                .user_bytes_written
                .fetch_add(user_bytes, Ordering::Relaxed);
            self.space.wrote(user_bytes);
            let due = self.vstore.gc_due();
            if due != self.gc_was_due.load(Ordering::Relaxed)
                && self.gc_was_due.swap(due, Ordering::Relaxed) != due
                && due
            {
                // Room runs short: background GC now, not at its next
                // round (FlashKey §V-B5).
                self.gc_cv.notify_one();
            }
            return Ok(seq);
        }
    }

    /// One round of GC for a write the value store refused for want of
    /// space; called without the writer lock. Returns false once retrying
    /// is pointless: GC has read as many bytes as the store held when the
    /// write was first refused (a whole pass) without making room, or it
    /// has nothing to do even after a memtable flush (in log mode GC stops
    /// at the replay checkpoint, which a flush moves) — unless space GC
    /// retired is held for readers, which it waits for first.
    fn gc_for_room(&self, room: &mut RoomGc) -> Result<bool> {
        let start = *room.start_bytes.get_or_insert_with(|| {
            let space = self.vstore.space();
            space.live_bytes + space.garbage_bytes
        });
        if room.read > start {
            return self.wait_for_readers(room);
        }
        if !room.waited {
            room.waited = true;
            if self.wait_for_running_gc() {
                return Ok(true);
            }
        }
        // A checkpoint that is copying keeps GC out (`work_gate`): wait for
        // it here, where no lock is held, rather than find no work and
        // give up on room the next step would make.
        drop(self.work_gate.read());
        let out = self.gc_step()?;
        self.counters.write_gc_steps.fetch_add(1, Ordering::Relaxed);
        room.read += out.bytes_read.max(1);
        if !out.did_work {
            if room.flushed {
                return self.wait_for_readers(room);
            }
            room.flushed = true;
            self.flush_memtable()?;
        }
        Ok(true)
    }

    /// For a write whose GC made no room: while the value store holds
    /// space GC retired for readers older than the GC
    /// (`ValueStore::pinned_bytes`), waits until the oldest reader is gone
    /// — at most [`ROOM_WAIT`], as a reader may belong to the writing
    /// thread — and lets the write's GC start over, which frees that space.
    /// False when nothing is held, the reader stays, or the database closes.
    fn wait_for_readers(&self, room: &mut RoomGc) -> Result<bool> {
        if self.vstore.pinned_bytes() == 0 {
            return Ok(false);
        }
        self.counters
            .write_reader_waits
            .fetch_add(1, Ordering::Relaxed);
        let oldest = self.shared.smallest_snapshot();
        let since = Instant::now();
        while self.shared.smallest_snapshot() == oldest
            && oldest < self.shared.last_seq.load(Ordering::Acquire)
        {
            self.shared.poisoned()?;
            if since.elapsed() >= ROOM_WAIT || self.shared.closed.load(Ordering::Acquire) {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        *room = RoomGc::default();
        Ok(true)
    }

    /// Applies a prepared batch to the index and publishes it; returns its
    /// last sequence number. Called with the writer lock held and room
    /// made. A failed apply poisons the database: the batch may be half
    /// logged.
    fn write_locked(&self, batch: &WriteBatch, sync: bool) -> Result<SeqNum> {
        let seq = self.shared.last_seq.load(Ordering::Relaxed) + 1;
        let last = seq + batch.len() as u64 - 1;
        // Deletions and inline values, for a store that wants them (a batch
        // of pointers alone, as every relocation is, has none).
        if self.vstore.tracks_unseparated() && batch.len() > batch.bare_pointers() + batch.carried()
        {
            for (i, e) in batch.entries().enumerate() {
                let e = e?;
                if e.vtype != ValueType::Pointer {
                    self.vstore.note_unseparated(e.key, seq + i as u64);
                }
            }
        }
        if let Err(e) = self.index.apply(batch, seq, sync) {
            self.shared.set_poison(&e);
            return Err(e);
        }
        self.shared.last_seq.store(last, Ordering::Release);
        Ok(last)
    }

    /// Log mode (WiscKey §3.4.2): appends every entry of `batch` to the
    /// value log, which is then the only log; returns the index batch
    /// (separated values replaced by pointers). Writer lock held.
    fn log_entries(&self, batch: &WriteBatch) -> Result<WriteBatch> {
        let entries: Vec<_> = batch.entries().collect::<Result<_>>()?;
        let seq0 = self.shared.last_seq.load(Ordering::Relaxed) + 1;
        let log: Vec<LogEntry<'_>> = entries
            .iter()
            .enumerate()
            .map(|(i, e)| LogEntry {
                vtype: e.vtype,
                separate: e.vtype == ValueType::Value && self.vstore.separates(e.value.len()),
                key: e.key,
                seq: seq0 + i as u64,
                value: e.value,
            })
            .collect();
        let ptrs = match self.vstore.log_batch(&log) {
            Ok(p) => p,
            // Refused before anything was written: the engine runs GC.
            Err(e @ Error::ValueStoreFull(_)) => return Err(e),
            Err(e) => {
                self.shared.set_poison(&e);
                return Err(e);
            }
        };
        self.note_separated(
            entries
                .iter()
                .zip(&ptrs)
                .filter_map(|(e, p)| match (p, e.vtype) {
                    (Some(p), ValueType::Value) => Some((e.key.len() + e.value.len(), p)),
                    _ => None,
                }),
        );
        let mut out = WriteBatch::with_capacity(index_batch_bytes(
            entries
                .iter()
                .zip(&ptrs)
                .map(|(e, p)| (e.key.len(), p.is_none().then_some(e.value.len()))),
        ));
        let mut encoded = Vec::with_capacity(POINTER_MAX);
        for (e, p) in entries.iter().zip(ptrs) {
            match p {
                Some(p) => {
                    encoded.clear();
                    p.encode_to(&mut encoded);
                    out.push(ValueType::Pointer, e.key, &encoded);
                }
                None => out.push(e.vtype, e.key, e.value),
            }
        }
        Ok(out)
    }

    /// Appends the values `batch` separates to the value store and returns
    /// the index batch: those values replaced by pointers that, with
    /// `carry`, carry the value beside them for the WAL (type 3 entries,
    /// see [`Index::carries_values`]). Writer lock held.
    ///
    /// [`Index::carries_values`]: crate::index::Index::carries_values
    fn separate_values(&self, batch: &WriteBatch, carry: bool) -> Result<WriteBatch> {
        let entries: Vec<_> = batch.entries().collect::<Result<_>>()?;
        let seq0 = self.shared.last_seq.load(Ordering::Relaxed) + 1;
        let records: Vec<ValueRecord<'_>> = entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.vtype == ValueType::Value && self.vstore.separates(e.value.len()))
            .map(|(i, e)| ValueRecord {
                key: e.key,
                seq: seq0 + i as u64,
                value: e.value,
            })
            .collect();
        let ptrs = self.vstore.append(&records)?;
        self.note_separated(
            records
                .iter()
                .zip(&ptrs)
                .map(|(r, p)| (r.key.len() + r.value.len(), p)),
        );
        let mut ptrs = ptrs.into_iter();
        let separated = |e: &crate::batch::BatchEntry<'_>| {
            e.vtype == ValueType::Value && self.vstore.separates(e.value.len())
        };
        let mut out = WriteBatch::with_capacity(index_batch_bytes(entries.iter().map(|e| {
            let kept = !separated(e) || carry;
            (e.key.len(), kept.then_some(e.value.len()))
        })));
        let mut encoded = Vec::with_capacity(POINTER_MAX);
        for e in &entries {
            if separated(e) {
                let p = ptrs.next().ok_or_else(|| {
                    Error::InvalidArgument("value store returned too few pointers".into())
                })?;
                encoded.clear();
                p.encode_to(&mut encoded);
                if carry {
                    out.push_carried(e.key, &encoded, e.value);
                } else {
                    out.push(ValueType::Pointer, e.key, &encoded);
                }
            } else {
                out.push(e.vtype, e.key, e.value);
            }
        }
        Ok(out)
    }

    /// Tells the space governor how many record bytes the separated values'
    /// user bytes took: `(key and value bytes, pointer)` per value (a
    /// pointer's length is its record's length).
    fn note_separated<'p>(&self, values: impl Iterator<Item = (usize, &'p ValuePointer)>) {
        let (payload, records) = values.fold((0u64, 0u64), |(u, r), (n, p)| {
            (u + n as u64, r + p.length as u64)
        });
        self.space.separated(payload, records);
    }

    /// Switches the memtable (under the writer lock) and waits for its
    /// flush: every write before the call is then in the index's durable
    /// structures.
    ///
    /// What the switch waits for is done first, without the writer lock,
    /// so that writers go on filling the memtable meanwhile: the previous
    /// memtable's flush, and a sync of the value store, after which the
    /// syncs that follow find little left to write — the flush's, and
    /// under the lock FlashKey's forced hash-table checkpoint's. (The
    /// LSM-tree's switch itself syncs nothing since 2026-11-28; before,
    /// it synced the value store under the lock, and in a traced `hashkv`
    /// update run GC's garbage discovery, flushing right after a load,
    /// held every writer for 63–72 ms in that sync.)
    pub(super) fn flush_memtable(&self) -> Result<()> {
        self.index.wait_flushed()?;
        self.shared.poisoned()?;
        if let Err(e) = self.vstore.sync() {
            // A failed fsync may have dropped the dirty pages: as a failed
            // sync in the switch itself, nothing more may be written.
            self.shared.set_poison(&e);
            return Err(e);
        }
        {
            let guard = self.writer.lock();
            self.shared.poisoned()?;
            if !*guard {
                return Err(Error::Closed);
            }
            self.index.make_room(true)?;
        }
        self.index.wait_flushed()
    }
}

/// Relocations installed under one hold of the writer lock: short enough
/// that a writer's spin for the lock ([`crate::spin::LOCK_SPIN`]) usually
/// outlasts the hold (256 until 2026-11-27; 64 halved the update
/// experiment's p99.9, `bench-results/gc-pieces-2026-11-27/`).
const RELOCATE_GROUP: usize = 64;

impl DbInner {
    /// One group of [`IndexRelocator::relocate`], written without a sync;
    /// returns which moves were installed and, when any was, the sequence
    /// number of the write.
    fn relocate_group(
        &self,
        moves: &[Relocation],
        judged_at: Option<SeqNum>,
    ) -> Result<(Vec<bool>, Option<SeqNum>)> {
        // No range compaction with a filter runs (see
        // `DbInner::range_gate`), and no filtering compaction from the
        // lookups to the write (see `Shared::filter_gate`).
        let _range = self.range_gate.read();
        let _gate = self.shared.filter_gate.read();
        // A judgment made before a filtering compaction's removals were
        // installed no longer holds: look the keys up (under the gate, so
        // after the install).
        let judged_at =
            judged_at.filter(|&at| self.shared.filter_installed_at.load(Ordering::Acquire) < at);
        // Loaded before the lookups: if `last_seq` still holds it under the
        // writer lock, nothing was published since they ran (writes and
        // relocations publish under that lock) and they still hold.
        let seen = self.shared.last_seq.load(Ordering::Acquire);
        // GC found every key pointing at `old` at `judged_at` or later: a
        // key still does at `seen` unless a version newer than `judged_at`
        // was written, which the memtables usually tell. Else (they were
        // switched and flushed since) each key is looked up again.
        let judged = judged_at.and_then(|at| {
            let keys: Vec<&[u8]> = moves.iter().map(|m| m.key.as_slice()).collect();
            let written = self.index.written_after(&keys, at)?;
            Some(written.into_iter().map(|w| !w).collect::<Vec<bool>>())
        });
        let mut installed = match judged {
            Some(v) => v,
            None => {
                self.counters
                    .gc_relocation_lookups
                    .fetch_add(moves.len() as u64, Ordering::Relaxed);
                let probes: Vec<(&[u8], ValuePointer)> =
                    moves.iter().map(|m| (m.key.as_slice(), m.old)).collect();
                self.points_at_many(&probes)?
            }
        };
        let guard = self.writer.lock();
        self.shared.poisoned()?;
        if !*guard {
            return Err(Error::Closed);
        }
        self.index.make_room(false)?;
        // Under the writer lock no user write can slip between the check
        // and the install.
        if self.shared.last_seq.load(Ordering::Acquire) != seen {
            // The lookups above saw `old` at `seen` or later, so a key still
            // points there unless a version newer than `seen` was written —
            // which the index can often tell from its memtables alone,
            // without a table read under the lock.
            let keys: Vec<&[u8]> = moves
                .iter()
                .zip(&installed)
                .filter(|(_, ok)| **ok)
                .map(|(m, _)| m.key.as_slice())
                .collect();
            let mut written = self.index.written_after(&keys, seen).map(Vec::into_iter);
            for (m, ok) in moves.iter().zip(installed.iter_mut()) {
                if *ok {
                    *ok = match written.as_mut() {
                        Some(w) => !w.next().expect("one answer per key"),
                        None => {
                            self.counters
                                .gc_relocation_lookups
                                .fetch_add(1, Ordering::Relaxed);
                            self.points_at(&m.key, &m.old)?
                        }
                    };
                }
            }
        }
        let mut batch = WriteBatch::new();
        for (m, _) in moves.iter().zip(&installed).filter(|(_, ok)| **ok) {
            batch.push(ValueType::Pointer, &m.key, &m.new.encode());
        }
        if batch.is_empty() {
            return Ok((installed, None));
        }
        if !self.shared.opts.wal {
            // Log mode: the relocation must be in the value log too.
            batch = self.log_entries(&batch)?;
        }
        let seq = self.write_locked(&batch, false)?;
        Ok((installed, Some(seq)))
    }
}

impl DbInner {
    /// [`IndexRelocator::relocate`] in groups of [`RELOCATE_GROUP`], then
    /// one `make_durable`.
    fn relocate_groups(
        &self,
        moves: &[Relocation],
        judged_at: Option<SeqNum>,
    ) -> Result<(Vec<bool>, SeqNum)> {
        let (installed, seq) = self.relocate_groups_unsynced(moves, judged_at)?;
        if let Some(s) = seq {
            self.make_durable(s)?;
        }
        Ok((installed, seq.unwrap_or(seq_or_last(self))))
    }

    /// [`DbInner::relocate_groups`] without the sync: the sequence number
    /// of the last write, when any move was installed.
    fn relocate_groups_unsynced(
        &self,
        moves: &[Relocation],
        judged_at: Option<SeqNum>,
    ) -> Result<(Vec<bool>, Option<SeqNum>)> {
        let mut installed = Vec::with_capacity(moves.len());
        let mut seq = None;
        for group in moves.chunks(RELOCATE_GROUP) {
            let (ok, s) = self.relocate_group(group, judged_at)?;
            installed.extend(ok);
            seq = s.or(seq);
        }
        Ok((installed, seq))
    }
}

/// The newest published sequence number.
fn seq_or_last(inner: &DbInner) -> SeqNum {
    inner.shared.last_seq.load(Ordering::Acquire)
}

/// GC's side of the index: the compare-and-set lives here, in the facade,
/// over the seam's `get` and `apply`, so every index gets the same rules.
impl IndexRelocator for DbInner {
    /// The index lookups run before the writer lock is taken, so that
    /// writers do not wait for them (after GC's own liveness check,
    /// [`IndexRelocator::relocate_judged`], the memtables alone usually
    /// answer: only keys written since GC judged them lost their place);
    /// under the lock only the moves found current are checked again, and
    /// only when a write was published since: the index says whether the keys were written since
    /// ([`crate::index::Index::written_after`], from the memtables), or
    /// else each is looked up again. A move found stale stays stale: its
    /// old record was published before the GC judged it
    /// (`wait_in_flight_writes`), and a key never points back at a place it
    /// has moved from — every write and every relocation gives it a new
    /// one.
    ///
    /// The moves are installed in groups of [`RELOCATE_GROUP`], each under
    /// the writer lock on its own and written without a sync, then made
    /// durable together: a GC step relocating thousands of records holds
    /// writers up for one group's lookups at a time, not for all of them
    /// and an fsync.
    fn relocate(&self, moves: &[Relocation]) -> Result<(Vec<bool>, SeqNum)> {
        self.relocate_groups(moves, None)
    }

    /// Skips the lookups before the lock when the memtables tell which
    /// keys were written since `judged_at` (see
    /// [`DbInner::relocate_group`]).
    fn relocate_judged(
        &self,
        moves: &[Relocation],
        judged_at: SeqNum,
    ) -> Result<(Vec<bool>, SeqNum)> {
        self.relocate_groups(moves, Some(judged_at))
    }

    /// [`IndexRelocator::relocate_judged`] with the `make_durable` left to
    /// the caller's sync round.
    fn relocate_judged_unsynced(
        &self,
        moves: &[Relocation],
        judged_at: SeqNum,
    ) -> Result<(Vec<bool>, SeqNum)> {
        let (installed, seq) = self.relocate_groups_unsynced(moves, Some(judged_at))?;
        Ok((installed, seq.unwrap_or_else(|| seq_or_last(self))))
    }

    fn persist_state(&self, state: &[u8]) -> Result<()> {
        let r = self.index.persist_value_store_state(state);
        if let Err(e) = &r {
            self.shared.set_poison(e);
        }
        r
    }

    /// Without the writer lock: the index syncs what was published by the
    /// time it looks (see [`Index::make_durable`]), and writers go on while
    /// the fsyncs run — a GC step ends with one, and writers waiting for it
    /// were the longest write latencies of update-heavy runs.
    fn make_durable(&self, seq: SeqNum) -> Result<()> {
        self.shared.poisoned()?;
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        let r = self.index.make_durable(seq);
        if let Err(e) = &r {
            self.shared.set_poison(e);
        }
        r
    }

    /// [`Index::make_durable`] syncs the engine's value store before the
    /// index's log, by its contract.
    fn make_durable_syncs_store(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use crate::fs::MemFs;
    use crate::{Db, Options, Preset};
    use std::path::Path;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    /// GC's compare-and-set re-checks a key under the writer lock from the
    /// memtables when every write since its lookup is still there, and
    /// falls back to a lookup once a flush has taken some of them away.
    #[test]
    fn written_after_answers_from_the_memtables_or_not_at_all() {
        let o = Options {
            fs: Arc::new(MemFs::new()),
            ..Options::preset(Preset::LevelDb)
        };
        let db = Db::open(Path::new("/db"), o).unwrap();
        let inner = db.inner.clone();
        let last = || inner.shared.last_seq.load(Ordering::Acquire);
        let wa = |keys: &[&str], seq| {
            let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
            inner.index.written_after(&keys, seq)
        };
        db.put("a", "1").unwrap();
        db.put("b", "1").unwrap();
        let seen = last();
        assert_eq!(wa(&["a"], seen), Some(vec![false]));
        db.put("a", "2").unwrap();
        db.delete("b").unwrap();
        assert_eq!(wa(&["a"], seen), Some(vec![true]));
        assert_eq!(wa(&["b"], seen), Some(vec![true]));
        assert_eq!(wa(&["c"], seen), Some(vec![false]));
        assert_eq!(
            wa(&["a", "b", "c"], seen),
            Some(vec![true, true, false]),
            "one answer per key, in order"
        );
        // Not after the newest write.
        assert_eq!(wa(&["a"], last()), Some(vec![false]));
        // The writes after `seen` left the memtables for a table.
        db.flush().unwrap();
        db.put("c", "1").unwrap();
        assert_eq!(wa(&["a"], seen), None);
        assert_eq!(wa(&["c"], seen), None);
        // Writes after the flush are answered again.
        let seen = last();
        db.put("d", "1").unwrap();
        assert_eq!(wa(&["d"], seen), Some(vec![true]));
        assert_eq!(wa(&["c"], seen), Some(vec![false]));
    }

    /// A batch of liveness checks answers as the same checks made key by
    /// key — keys in the active memtable, the immutable one, level 0 and
    /// the levels below, overwritten, deleted or never written, stale and
    /// current addresses, in no order and repeated — while it loads each
    /// index data block once for the keys that fall in it.
    #[test]
    fn points_at_many_answers_as_points_at_key_by_key() {
        use crate::vstore::{IndexReader, ValuePointer};
        let o = Options {
            fs: Arc::new(MemFs::new()),
            write_buffer_size: 64 << 10,
            // No background GC, neither by garbage ratio nor for the space
            // target: relocations would move the keys' current pointers
            // into the memtable, and no lookup would reach a table block.
            gc_garbage_ratio: 0.0,
            space_amp_target: f64::INFINITY,
            ..Options::preset(Preset::WiscKey)
        };
        let db = Db::open(Path::new("/db"), o).unwrap();
        let inner = db.inner.clone();
        let key = |i: usize| format!("key{i:05}").into_bytes();
        let value = |i: usize, round: usize| format!("{i}-{round}-").repeat(40);
        const N: usize = 3000;
        let pointer = |k: &[u8]| inner.current_pointer(k).unwrap();
        // Round 0 compacted into the levels below 0; round 1 (every third
        // key) flushed to level 0; deletions and round 2 in the memtables.
        for i in 0..N {
            db.put(key(i), value(i, 0)).unwrap();
        }
        db.compact_range(..).unwrap();
        let mut stale: Vec<(Vec<u8>, ValuePointer)> = Vec::new();
        for i in (0..N).step_by(3) {
            stale.push((key(i), pointer(&key(i)).unwrap()));
            db.put(key(i), value(i, 1)).unwrap();
        }
        db.flush().unwrap();
        for i in (1..N).step_by(7) {
            stale.push((key(i), pointer(&key(i)).unwrap()));
            if i % 2 == 0 {
                db.delete(key(i)).unwrap();
            } else {
                db.put(key(i), value(i, 2)).unwrap();
            }
        }
        let mut probes: Vec<(Vec<u8>, ValuePointer)> = (0..N)
            .filter_map(|i| pointer(&key(i)).map(|p| (key(i), p)))
            .collect();
        probes.extend(stale);
        // A key never written, at an address another key holds.
        let some = probes[0].1;
        probes.push((b"absent".to_vec(), some));
        // No order: a fixed shuffle, and a repeat of the first probes.
        let len = probes.len();
        let mut shuffled: Vec<(Vec<u8>, ValuePointer)> =
            (0..len).map(|i| probes[(i * 7919) % len].clone()).collect();
        shuffled.extend(probes[..50].iter().cloned());
        let refs: Vec<(&[u8], ValuePointer)> =
            shuffled.iter().map(|(k, p)| (k.as_slice(), *p)).collect();
        let (batch, blocks) = inner.index.points_at_many(&refs).unwrap();
        let one_by_one: Vec<bool> = refs
            .iter()
            .map(|(k, p)| inner.index.points_at(k, p).unwrap())
            .collect();
        assert_eq!(batch, one_by_one);
        let live = batch.iter().filter(|l| **l).count();
        assert!(
            live > N / 2 && live < refs.len(),
            "{live} of {}",
            refs.len()
        );
        // Every probe reaches a table or a memtable; the tables' blocks hold
        // dozens of keys each, so the batch loads far fewer blocks than it
        // has keys.
        assert!(
            blocks > 0 && blocks * 10 < refs.len() as u64,
            "{blocks} blocks loaded for {} keys",
            refs.len()
        );
        // The facade's answer is the index's, and its loads are counted.
        db.wait_idle().unwrap();
        let (_, again) = inner.index.points_at_many(&refs).unwrap();
        let counted = || db.stats().unwrap().gc_index_blocks;
        let before = counted();
        assert_eq!(inner.points_at_many(&refs).unwrap(), batch);
        assert_eq!(counted() - before, again);
    }

    /// A relocation GC judged at a sequence number is installed only for
    /// the keys not written since, whether the memtables still hold those
    /// writes (no lookup) or a flush took them away (lookups again).
    #[test]
    fn judged_relocations_skip_keys_written_since_the_judgement() {
        use crate::vstore::{IndexReader, IndexRelocator, Relocation};
        let o = Options {
            fs: Arc::new(MemFs::new()),
            ..Options::preset(Preset::WiscKey)
        };
        let db = Db::open(Path::new("/db"), o).unwrap();
        let inner = db.inner.clone();
        let value = |tag: &str| tag.repeat(200);
        for flush in [false, true] {
            for k in ["a", "b", "c", "d"] {
                db.put(k, value("old")).unwrap();
            }
            let judged_at = inner.last_sequence();
            // Each key moves onto its own record (a copy elsewhere would do
            // the same): what is checked is which moves are installed.
            let moves: Vec<Relocation> = ["a", "b", "c", "d"]
                .iter()
                .map(|k| {
                    let old = inner.current_pointer(k.as_bytes()).unwrap().unwrap();
                    Relocation {
                        key: k.as_bytes().to_vec(),
                        old,
                        new: old,
                    }
                })
                .collect();
            db.put("b", value("new")).unwrap();
            db.delete("d").unwrap();
            if flush {
                db.flush().unwrap();
                db.put("e", "x").unwrap();
            }
            let (installed, _) = inner.relocate_judged(&moves, judged_at).unwrap();
            assert_eq!(installed, [true, false, true, false], "flush {flush}");
            assert_eq!(db.get("b").unwrap().unwrap(), value("new").as_bytes());
            assert_eq!(db.get("d").unwrap(), None);
            assert_eq!(db.get("a").unwrap().unwrap(), value("old").as_bytes());
        }
    }
}
