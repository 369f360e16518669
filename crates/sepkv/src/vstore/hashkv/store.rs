//! The store's core: journals and their switches, the write cache and
//! its flushes, the checkpoint worker, placement of GC copies, freeing
//! segments, and reads from the segment files.

use super::*;

impl HashKvStore {
    pub(super) fn check_poisoned(st: &State) -> Result<()> {
        match &st.poisoned {
            Some(p) => Err(Error::Poisoned(p.clone())),
            None => Ok(()),
        }
    }

    /// Journal length at which it is checkpointed and recycled: see
    /// `State::journal_limit` (the journal file is preallocated to it).
    pub(super) fn journal_limit(opts: &HashKvOptions, t: &Table) -> u64 {
        let held: u64 = t
            .groups
            .iter()
            .flat_map(|g| g.segs.iter())
            .map(|id| t.segs.get(id).map_or(0, |s| s.len))
            .sum();
        if opts.journal_values {
            opts.journal_size.min((held / 32).max(1 << 20))
        } else {
            // Metadata only: the bytes appended since the checkpoint bound
            // what open scans, not the journal's size.
            opts.journal_size.min((held / 8).max(4 << 20))
        }
    }

    /// Bytes a new journal file is preallocated to: its recycling length
    /// when it carries values; 64 KiB when it records metadata only (a few
    /// bytes per allocated segment), beyond which it simply grows.
    pub(super) fn journal_prealloc(opts: &HashKvOptions, limit: u64) -> u64 {
        if opts.journal_values {
            limit
        } else {
            limit.min(64 << 10)
        }
    }

    /// Free log segments below which GC is pressing (§3.3 trigger).
    pub(crate) fn low_watermark(t: &Table) -> u64 {
        (t.geo.reserved_units / 4).max(2).min(t.geo.reserved_units)
    }
}

impl StoreCore {
    /// Whether GC may take the record of `key` with sequence number `seq`
    /// in segment `seg`, the latest of the key in its sealed group, for
    /// the version the index holds without looking the key up (see
    /// [`gc`], step 4): the segment was allocated since the index
    /// recovered, and no deletion or inline write noted in the key's
    /// bucket is newer than the record. The caller still rules out
    /// records of the key placed since the seal.
    pub(super) fn judged_from_group(&self, key: &[u8], seq: SeqNum, seg: u64) -> bool {
        seg >= self.trusted_from.load(Ordering::Acquire)
            && self.departed[departed_bucket(key)].load(Ordering::Relaxed) < seq
    }

    /// The record codec of segment `id`.
    pub(super) fn codec(&self, id: u64) -> Codec {
        seg_codec(id, self.legacy_below)
    }

    /// Segments numbered below this hold the format-1 record codec (0:
    /// none). After an open with [`HashKvOptions::legacy_below`] `None`,
    /// the first segment number the store had not allocated.
    pub fn legacy_below(&self) -> u64 {
        self.legacy_below
    }

    /// As [`StoreCore::legacy_below`], for the cold data log's files.
    pub fn cold_legacy_below(&self) -> u64 {
        self.cold.legacy_below()
    }

    pub(super) fn path(&self, id: u64) -> PathBuf {
        self.files.path(id)
    }

    /// Seals the write cache: its batches move to `flushing`, where reads
    /// still find them, for the worker or [`Self::drain_flushing`] to
    /// write. Returns false when the cache was empty. State locked.
    pub(super) fn seal_cache(&self, st: &mut State) -> bool {
        if st.cache.is_empty() {
            return false;
        }
        let parts = st.cache.take_all();
        let bytes = parts.iter().map(|(_, p)| p.buf.len()).sum();
        self.flushing.lock().push_back((Arc::new(parts), bytes));
        self.flushing_len.fetch_add(bytes, Ordering::AcqRel);
        true
    }

    /// Bytes sealed and not yet in their files.
    pub(super) fn flushing_bytes(&self) -> usize {
        self.flushing_len.load(Ordering::Acquire)
    }

    /// Writes every sealed batch to its segments, oldest first: one
    /// sequential write per segment (§3.8 batch writes). Takes the flush
    /// lock; the state lock may be held (never taken here).
    pub(super) fn drain_flushing(&self) -> Result<()> {
        let _g = self.flush_lock.lock();
        loop {
            let Some((batch, _)) = self.flushing.lock().front().cloned() else {
                return Ok(());
            };
            for (seg, p) in batch.iter() {
                self.files
                    .append(*seg, p.start, &p.buf, IoCategory::ValueStore)?;
            }
            // Popped only once written: a read that misses the cache finds
            // the records here or in the file.
            if let Some((_, n)) = self.flushing.lock().pop_front() {
                self.flushing_len.fetch_sub(n, Ordering::AcqRel);
            }
            self.counters.cache_flushes.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Hands every cached record to its file before returning (GC, verify,
    /// `flush`, close). Called with the state locked; a failure poisons.
    pub(super) fn flush_cache(&self, st: &mut State) -> Result<()> {
        self.seal_cache(st);
        if let Err(e) = self.drain_flushing() {
            st.poisoned = Some(e.to_string());
            return Err(e);
        }
        Ok(())
    }

    /// The record `ptr` names while it is still in memory (the cache, or a
    /// sealed batch not yet written); its value bytes. State locked.
    pub(super) fn cached(
        &self,
        st: &State,
        key: &[u8],
        ptr: &ValuePointer,
    ) -> Result<Option<Vec<u8>>> {
        let len = ptr.length as usize;
        let found = match st.cache.get(ptr.file_id, ptr.offset, len) {
            Some(b) => Some(b.to_vec()),
            // Nothing sealed and unwritten (the count rises under the
            // state lock, held here): the queue's lock is not taken.
            None if self.flushing_bytes() == 0 => None,
            None => self.flushing.lock().iter().rev().find_map(|(batch, _)| {
                batch.iter().find_map(|(seg, p)| {
                    let rel = ptr.offset.checked_sub(p.start)? as usize;
                    (*seg == ptr.file_id)
                        .then(|| p.buf.get(rel..rel.checked_add(len)?))
                        .flatten()
                        .map(<[u8]>::to_vec)
                })
            }),
        };
        match found {
            Some(b) => {
                let range = check_record(
                    self.codec(ptr.file_id),
                    || self.path(ptr.file_id),
                    ptr,
                    key,
                    &b,
                )?;
                Ok(Some(b[range].to_vec()))
            }
            None => Ok(None),
        }
    }

    /// Starts a journal checkpoint (§3.7): the cache is sealed, appends go
    /// to the next journal from now on, and the worker is handed the table
    /// naming that journal, to write once the segments holding the old
    /// journal's records are synced; then it removes the old journal. Until
    /// then the live table keeps naming the old journal (a GC persisting it
    /// meanwhile makes open replay both), and `sync` syncs both journals.
    /// The next journal is the worker's spare when there is one; otherwise
    /// it is created here. State locked; no checkpoint may be in flight.
    pub(super) fn switch_journal(&self, st: &mut State) -> Result<()> {
        let fs = self.files.fs.as_ref();
        let dir = &self.files.dir;
        let num = st.journal_num + 1;
        let p = journal_path(dir, num);
        let f = match self.spare.lock().take() {
            Some((n, f)) if n == num => f,
            _ => {
                let limit = HashKvStore::journal_limit(&self.opts, &st.table);
                let len = HashKvStore::journal_prealloc(&self.opts, limit);
                let f = create_preallocated(fs, &p, len).ctx(&p)?;
                fs.sync_dir(dir).ctx(dir)?;
                f
            }
        };
        self.seal_cache(st);
        st.table.epoch += 1;
        let live = st.table.journal_pos;
        st.table.journal_pos = (num, 0);
        let table = self.encode(&st.table);
        st.table.journal_pos = live;
        let table = table?;
        {
            let mut j = self.journal.lock();
            let old = j.replace(RecordWriter::new(
                f,
                p,
                self.files.stats.clone(),
                IoCategory::ValueStore,
            ));
            *self.retiring.lock() = old;
        }
        let old = st.journal_num;
        st.journal_len = 0;
        st.appended = 0;
        st.journal_num = num;
        st.journal_limit = HashKvStore::journal_limit(&self.opts, &st.table);
        st.checkpointing = true;
        self.work.lock().checkpoint = Some(Checkpoint {
            old,
            new: num,
            table,
        });
        self.work_cv.notify_all();
        Ok(())
    }

    /// Asks the worker to write the sealed batches.
    pub(super) fn request_flush(&self) {
        self.work.lock().flush = true;
        self.work_cv.notify_all();
    }

    /// The background worker: writes sealed batches and finishes
    /// checkpoints until the store is dropped (pending work is done first).
    /// A failure poisons the store: appends, syncs and GC then fail.
    pub(super) fn work_loop(&self) {
        loop {
            let checkpoint = {
                let mut w = self.work.lock();
                w.busy = false;
                while w.paused || (!w.flush && w.checkpoint.is_none()) {
                    if w.shutdown {
                        self.work_cv.notify_all();
                        return;
                    }
                    self.work_cv.notify_all();
                    self.work_cv.wait(&mut w);
                }
                w.busy = true;
                w.flush = false;
                w.checkpoint.take()
            };
            let mut r = self.drain_flushing();
            if let (Ok(()), Some(c)) = (&r, checkpoint) {
                r = self.finish_checkpoint(c);
            }
            if let Err(e) = r {
                let mut st = self.state.lock();
                if st.poisoned.is_none() {
                    st.poisoned = Some(e.to_string());
                }
            }
        }
    }

    /// The I/O of a checkpoint [`Self::switch_journal`] began, under no
    /// state lock: sync the written segments (journal of values), write
    /// the table naming the new journal, drop the old journal, prepare the
    /// spare.
    pub(super) fn finish_checkpoint(&self, c: Checkpoint) -> Result<()> {
        let fs = self.files.fs.as_ref();
        let dir = &self.files.dir;
        // A journal of values may go only once the segments hold its
        // records durably. A journal of allocations has nothing the table
        // does not hold: segments that lose unsynced bytes to a power
        // loss are cut to their intact records on open, as after any
        // crash, and `sync` still syncs them.
        if self.opts.journal_values {
            self.files.sync_dirty()?;
        }
        write_table_file(fs, dir, &self.files.stats, &c.table)?;
        // The new table is durable: the old journal is needed no more.
        self.retiring.lock().take();
        let old = journal_path(dir, c.old);
        match fs.remove(&old) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(&old, e)),
        }
        // The spare, for the next switch. Best effort: without one the
        // switch creates the journal itself.
        let next = c.new + 1;
        let p = journal_path(dir, next);
        let limit = {
            let st = self.state.lock();
            HashKvStore::journal_limit(&self.opts, &st.table)
        };
        let len = HashKvStore::journal_prealloc(&self.opts, limit);
        match create_preallocated(fs, &p, len).and_then(|f| fs.sync_dir(dir).map(|_| f)) {
            Ok(f) => *self.spare.lock() = Some((next, f)),
            Err(_) => {
                let _ = fs.remove(&p);
            }
        }
        let mut st = self.state.lock();
        if st.table.journal_pos < (c.new, 0) {
            st.table.journal_pos = (c.new, 0);
        }
        st.checkpointing = false;
        drop(st);
        self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        self.work_cv.notify_all();
        Ok(())
    }

    /// Waits until no checkpoint is in flight (or the store is poisoned,
    /// when the one in flight will never end). Looks again at least every
    /// millisecond: the worker's notification needs no lock order with the
    /// state lock then.
    pub(super) fn wait_checkpoint(&self) {
        loop {
            {
                let st = self.state.lock();
                if !st.checkpointing || st.poisoned.is_some() {
                    return;
                }
            }
            let mut w = self.work.lock();
            if w.shutdown {
                return;
            }
            self.work_cv
                .wait_for(&mut w, std::time::Duration::from_millis(1));
        }
    }

    /// Waits until the worker has nothing left to do.
    pub(crate) fn wait_worker_idle(&self) {
        let mut w = self.work.lock();
        while w.busy || w.flush || w.checkpoint.is_some() {
            if w.shutdown {
                return;
            }
            self.work_cv.wait(&mut w);
        }
    }

    /// Makes placed records survive a process crash; `sources` says where
    /// each record is a GC copy from (journaled as metadata only). Called
    /// with the state locked; with a journal of metadata the lock is let go
    /// while the records are written (the segment handles' lock, taken
    /// first, keeps each file's appends in placement order), so the state
    /// may have changed when this returns.
    pub(super) fn write_placed(
        &self,
        st: &mut MutexGuard<'_, State>,
        allocs: &[Alloc],
        places: &[Place],
        data: &[u8],
        sources: Option<&[(u64, u64)]>,
    ) -> Result<()> {
        let cat = match sources {
            Some(_) => IoCategory::Gc,
            None => IoCategory::ValueStore,
        };
        let mut journal = self.journal.lock();
        match journal.as_mut() {
            Some(j) if self.opts.journal_values => {
                let entry = match sources {
                    Some(src) => journal::encode_copy(allocs, places, src),
                    None => journal::encode_write(allocs, places, data),
                };
                j.add_record(&entry)?;
                j.flush()?;
                st.journal_len = j.len();
                drop(journal);
                let mut at = 0usize;
                for p in places {
                    let n = p.len as usize;
                    st.cache.add(p.seg, p.off, &data[at..at + n]);
                    at += n;
                }
                // The cache's batches and the checkpoint's fsyncs go to the
                // worker: neither readers nor this writer wait for them.
                if st.cache.is_full() && self.seal_cache(st) {
                    self.request_flush();
                }
            }
            Some(j) => {
                // Metadata only (§3.7): the allocations, before any record
                // lands in the segments they name; the records themselves
                // are found again by scanning the segments' tails on open.
                if !allocs.is_empty() {
                    j.add_record(&journal::encode_write(allocs, &[], &[]))?;
                    j.flush()?;
                    st.journal_len = j.len();
                }
                drop(journal);
                // The writes run with the state lock let go, so that reads
                // (which take it to check a pointer) do not wait for them;
                // the handles' lock, taken first, keeps each file's
                // appends in the order they were placed.
                let mut appends = self.files.appends();
                MutexGuard::unlocked(st, move || {
                    self.append_direct(&mut appends, places, data, cat)
                })?;
                // Bytes since the checkpoint bound the scan on open.
                st.appended += data.len() as u64;
            }
            None => {
                drop(journal);
                if !allocs.is_empty() {
                    // Without a journal the table must know a segment
                    // before a pointer into it is acknowledged.
                    st.table.epoch += 1;
                    let encoded = self.encode(&st.table)?;
                    write_table_file(
                        self.files.fs.as_ref(),
                        &self.files.dir,
                        &self.files.stats,
                        &encoded,
                    )?;
                    self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
                }
                return self.append_direct(&mut self.files.appends(), places, data, cat);
            }
        }
        if st.checkpoint_due() >= st.journal_limit && !st.checkpointing {
            self.switch_journal(st)?;
        }
        Ok(())
    }

    /// With the state lock held (`_st`): waits until every record placed
    /// so far is in its file. Records are placed under the state lock and,
    /// with a journal of metadata, written once it is let go, so a segment
    /// still taking appends may count records its file does not hold yet
    /// (a record a published pointer names is always written). Each writer
    /// takes the segment handles' lock before it lets the state lock go;
    /// taking that lock after it is therefore a barrier. For readers of a
    /// whole segment that may still take appends: GC's look at the
    /// records placed since a seal, `verify`.
    pub(crate) fn wait_placed_written(&self, _st: &State) {
        drop(self.files.appends());
    }

    /// Writes placed records straight to their segment files, in `places`
    /// order (`data` holds their bytes in that order): one write per run
    /// of records that follow each other in one segment. The handles'
    /// lock held, taken while the state lock was.
    pub(super) fn append_direct(
        &self,
        appends: &mut segment::Appends<'_>,
        places: &[Place],
        data: &[u8],
        cat: IoCategory,
    ) -> Result<()> {
        let mut at = 0usize;
        let mut i = 0;
        while i < places.len() {
            let (seg, off) = (places[i].seg, places[i].off);
            let mut end = off;
            let mut n = 0usize;
            while i < places.len() && places[i].seg == seg && places[i].off == end {
                end += places[i].len as u64;
                n += places[i].len as usize;
                i += 1;
            }
            appends.append(seg, off, &data[at..at + n], cat)?;
            at += n;
        }
        Ok(())
    }

    /// Encodes the table; `Corruption` when it is inconsistent.
    pub(super) fn encode(&self, t: &Table) -> Result<Vec<u8>> {
        t.encode().map_err(|id| self.unknown_segment(id))
    }

    /// The error for a segment a group lists but the table does not know.
    pub(super) fn unknown_segment(&self, id: u64) -> Error {
        Error::corruption(
            self.path(id),
            0,
            format!("hashkv segment table lists segment {id} but has no entry for it"),
        )
    }

    /// Places records in `group` for GC — copies of the records at
    /// `sources` (`(segment, offset)`), or new records (tags) when
    /// `sources` is `None` — after everything placed there so far, using
    /// the reserved space's GC headroom when a log segment is needed.
    /// Returns their pointers; `None` when the reserved space has no room
    /// (nothing is placed then).
    ///
    /// # Errors
    /// `Io` (the store is then poisoned); `Corruption` for an inconsistent
    /// table; `Poisoned`.
    pub(crate) fn place_for_gc(
        &self,
        group: u32,
        recs: &[&[u8]],
        sources: Option<&[(u64, u64)]>,
    ) -> Result<Option<Vec<ValuePointer>>> {
        let mut st = self.state.lock();
        HashKvStore::check_poisoned(&st)?;
        let mut allocs = Vec::new();
        let mut undo = Vec::new();
        let mut places = Vec::with_capacity(recs.len());
        let mut data = Vec::new();
        for r in recs {
            let len = r.len() as u64;
            match st.table.place(group, len, 0, &mut allocs, &mut undo) {
                Ok((seg, off)) => {
                    places.push(Place {
                        seg,
                        off,
                        len: r.len() as u32,
                    });
                    data.extend_from_slice(r);
                }
                Err(e) => {
                    st.table.rollback(undo);
                    return match e {
                        PlaceError::Full(_) => Ok(None),
                        PlaceError::Unknown(id) => Err(self.unknown_segment(id)),
                    };
                }
            }
        }
        if let Err(e) = self.write_placed(&mut st, &allocs, &places, &data, sources) {
            st.poisoned = Some(e.to_string());
            return Err(e);
        }
        st.gc_copies += data.len() as u64;
        Ok(Some(
            places
                .iter()
                .map(|p| ValuePointer {
                    file_id: p.seg,
                    offset: p.off,
                    length: p.len,
                    aux: 0,
                })
                .collect(),
        ))
    }

    /// Hands the cached records to their files and makes the segments GC
    /// placed records in durable (`ids`), with their directory entries.
    pub(crate) fn sync_segments(&self, ids: &[u64]) -> Result<()> {
        {
            let mut st = self.state.lock();
            HashKvStore::check_poisoned(&st)?;
            self.flush_cache(&mut st)?;
        }
        let r = ids
            .iter()
            .try_for_each(|&id| self.files.sync(id))
            .and_then(|_| self.files.sync_dir());
        if let Err(e) = &r {
            self.state.lock().poisoned = Some(e.to_string());
        }
        r
    }

    /// Persists the table in the manifest (and records the cold log's
    /// state first when given).
    pub(super) fn persist_table(
        &self,
        relocator: &dyn IndexRelocator,
        cold: Option<&[u8]>,
    ) -> Result<()> {
        let bytes = {
            let mut st = self.state.lock();
            if let Some(c) = cold {
                st.table.cold_state = Some(c.to_vec());
            }
            st.table.epoch += 1;
            self.encode(&st.table)?
        };
        relocator.persist_state(&bytes)
    }

    /// Frees retired segments no live reader can reach; returns bytes freed.
    pub(super) fn free_pending(&self, oldest: u64) -> Result<u64> {
        let ready: Vec<PendingFree> = {
            let mut st = self.state.lock();
            let (ready, keep): (Vec<_>, Vec<_>) =
                st.pending.drain(..).partition(|p| p.seq <= oldest);
            st.pending = keep;
            ready
        };
        if ready.is_empty() {
            return Ok(0);
        }
        let mut freed = 0;
        let mut failed = None;
        for p in ready {
            let mut left = Vec::new();
            for id in p.segs {
                if failed.is_some() {
                    left.push(id);
                    continue;
                }
                if let Err(e) = self.files.remove(id) {
                    // Kept for the next step (removing is idempotent):
                    // the space is not lost until a reopen.
                    failed = Some(e);
                    left.push(id);
                    continue;
                }
                let mut st = self.state.lock();
                if let Some(s) = st.table.segs.remove(&id) {
                    st.table.used_units -= s.units as u64;
                    freed += s.len;
                }
                st.dead.retain(|&(seg, _)| seg != id);
            }
            if !left.is_empty() {
                self.state.lock().pending.push(PendingFree {
                    seq: p.seq,
                    segs: left,
                });
            }
        }
        self.counters
            .gc_bytes_freed
            .fetch_add(freed, Ordering::Relaxed);
        if let Some(e) = failed {
            return Err(e);
        }
        self.files
            .fs
            .sync_dir(&self.files.dir)
            .ctx(&self.files.dir)?;
        Ok(freed)
    }

    /// The segment table's geometry.
    pub fn geometry(&self) -> Geometry {
        self.state.lock().table.geo
    }

    /// Free log segments in the reserved space.
    pub fn free_log_segments(&self) -> u64 {
        self.state.lock().table.free_units()
    }

    /// The group `key` hashes to.
    pub fn group_of(&self, key: &[u8]) -> u32 {
        self.state.lock().table.geo.group_of(key)
    }

    /// Flushes the write cache to the segment files.
    ///
    /// # Errors
    /// `Io`; `Poisoned` after an earlier write failure.
    pub fn flush(&self) -> Result<()> {
        let mut st = self.state.lock();
        HashKvStore::check_poisoned(&st)?;
        self.flush_cache(&mut st)
    }

    pub(super) fn read_segment(&self, key: &[u8], ptr: &ValuePointer) -> Result<Option<Vec<u8>>> {
        {
            let st = self.state.lock();
            match st.table.segs.get(&ptr.file_id) {
                Some(s) if ptr.end() <= s.len => {}
                _ => return Ok(None),
            }
            if let Some(v) = self.cached(&st, key, ptr)? {
                return Ok(Some(v));
            }
        }
        let mut buf = vec![0u8; ptr.length as usize];
        let res = self.latency.time(|| {
            self.files
                .read_exact(ptr.file_id, ptr.offset, &mut buf, IoCategory::ValueStore)
        });
        match res {
            Ok(()) => {}
            // Freed by GC between the check and the read.
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Ok(None)
            }
            Err(e) => return Err(e),
        }
        let range = check_record(
            self.codec(ptr.file_id),
            || self.path(ptr.file_id),
            ptr,
            key,
            &buf,
        )?;
        buf.truncate(range.end);
        buf.drain(..range.start);
        Ok(Some(buf))
    }
}
