//! [`ValueStore`] for [`HashKvStore`]: what the engine calls, built on the
//! store's core, and closing the store on drop.

use super::*;

impl ValueStore for HashKvStore {
    fn name(&self) -> &'static str {
        "hashkv"
    }

    fn separates(&self, len: usize) -> bool {
        len >= self.opts.value_threshold
    }

    fn append(&self, records: &[ValueRecord<'_>]) -> Result<Vec<ValuePointer>> {
        if records.is_empty() {
            return Ok(Vec::new());
        }
        let mut st = self.state.lock();
        HashKvStore::check_poisoned(&st)?;
        let mut allocs = Vec::new();
        let mut undo = Vec::new();
        let mut places = Vec::with_capacity(records.len());
        let mut groups = Vec::with_capacity(records.len());
        let mut data = Vec::new();
        for r in records {
            let len = record::record_len(r.key, r.value);
            let Ok(len32) = u32::try_from(len) else {
                st.table.rollback(undo);
                return Err(Error::InvalidArgument(format!(
                    "value of {} bytes is too large for the hashkv layout",
                    r.value.len()
                )));
            };
            let g = st.table.geo.group_of(r.key);
            // User writes leave GC its headroom of log segments: a GC whose
            // victim's live data passes a main segment needs some for the
            // copies before it frees anything.
            let headroom = st.table.geo.gc_headroom();
            match st
                .table
                .place(g, len as u64, headroom, &mut allocs, &mut undo)
            {
                Ok((seg, off)) => {
                    places.push(Place {
                        seg,
                        off,
                        len: len32,
                    });
                    groups.push(g);
                    record::encode(&mut data, Kind::Value, 0, r.key, r.seq, r.value);
                }
                Err(PlaceError::Full(msg)) => {
                    st.table.rollback(undo);
                    self.counters.full_errors.fetch_add(1, Ordering::Relaxed);
                    return Err(Error::ValueStoreFull(msg));
                }
                Err(PlaceError::Unknown(id)) => {
                    st.table.rollback(undo);
                    return Err(self.unknown_segment(id));
                }
            }
        }
        // Counted before the write lets the state lock go: a GC sealing one
        // of these groups meanwhile takes the volume with the records.
        for (p, g) in places.iter().zip(groups) {
            st.table.groups[g as usize].write_volume += p.len as u64;
        }
        if let Err(e) = self.write_placed(&mut st, &allocs, &places, &data, None) {
            st.poisoned = Some(e.to_string());
            return Err(e);
        }
        let journal_behind = st.checkpointing && st.checkpoint_due() >= 2 * st.journal_limit;
        drop(st);
        // The journal passed twice its limit while the last checkpoint is
        // still in flight: wait for it (it cannot be waited for under the
        // state lock), so that the journal — disk space, and replay time
        // after a crash — stays bounded however far the worker falls
        // behind.
        if journal_behind {
            self.wait_checkpoint();
        }
        // The worker fell behind by two caches' worth: this writer helps,
        // so that sealed batches never pile up in memory.
        if self.flushing_bytes() >= 2 * self.opts.write_cache_size.max(1) {
            if let Err(e) = self.drain_flushing() {
                self.state.lock().poisoned = Some(e.to_string());
                return Err(e);
            }
        }
        Ok(places
            .iter()
            .map(|p| ValuePointer {
                file_id: p.seg,
                offset: p.off,
                length: p.len,
                aux: 0,
            })
            .collect())
    }

    /// With the journal, the fsyncs run under no lock: every record an
    /// append acknowledged was handed to the OS under the journal's lock
    /// (and, journal carrying metadata only, its record written and its
    /// segment counted as written under the segment handles' lock before
    /// the append returned), so a sync through the handles taken
    /// here covers it, and appends, reads and the table stay free meanwhile
    /// (a journal recycled in between was checkpointed first). Without it,
    /// segments are synced under the state lock.
    fn sync(&self) -> Result<()> {
        let mut st = self.state.lock();
        HashKvStore::check_poisoned(&st)?;
        let r = if self.opts.journal {
            drop(st);
            let r = (|| {
                // Segments first: the journal's allocations name them.
                if !self.opts.journal_values {
                    self.files.sync_dirty()?;
                }
                // The journal a checkpoint in flight retires holds records
                // (or allocations) that may not be in synced segments or
                // a durable table yet: synced too.
                let mut j = self.journal.lock();
                let mut r = self.retiring.lock();
                let mut pending = Vec::with_capacity(2);
                for w in [j.as_mut(), r.as_mut()].into_iter().flatten() {
                    match w.start_sync()? {
                        Some(p) => pending.push(p),
                        None => w.sync()?,
                    }
                }
                drop(r);
                drop(j);
                pending.into_iter().try_for_each(|p| p.sync())
            })();
            st = self.state.lock();
            r
        } else {
            self.files.sync_dirty()
        };
        if let Err(e) = &r {
            st.poisoned = Some(e.to_string());
        }
        r
    }

    fn read(&self, key: &[u8], ptr: &ValuePointer) -> Result<Option<Vec<u8>>> {
        if is_cold(ptr) {
            return self.cold.read(key, ptr);
        }
        self.read_segment(key, ptr)
    }

    /// Read-ahead hints pay off only when reads reach the device.
    fn batch_reads_pay(&self) -> bool {
        !self.latency.from_memory()
    }

    fn read_many(&self, reqs: &[(Vec<u8>, ValuePointer)]) -> Result<Vec<Option<Vec<u8>>>> {
        let mut out: Vec<Option<Vec<u8>>> = vec![None; reqs.len()];
        let mut from_files = Vec::new();
        {
            let st = self.state.lock();
            for (i, (k, p)) in reqs.iter().enumerate() {
                if is_cold(p) {
                    continue;
                }
                match st.table.segs.get(&p.file_id) {
                    Some(s) if p.end() <= s.len => {}
                    _ => continue,
                }
                match self.cached(&st, k, p)? {
                    Some(v) => out[i] = Some(v),
                    None => from_files.push(i),
                }
            }
        }
        // §3.6: read-ahead for every value of the scan, then the reads —
        // unless reads are served from memory, where the hints only cost
        // system calls.
        if self.batch_reads_pay() {
            for &i in &from_files {
                let p = &reqs[i].1;
                if let Ok(h) = self.files.reader(p.file_id) {
                    h.advise(p.offset, p.length as u64, Advice::WillNeed);
                }
            }
        }
        for &i in &from_files {
            let (k, p) = &reqs[i];
            out[i] = self.read_segment(k, p)?;
        }
        for (i, (k, p)) in reqs.iter().enumerate() {
            if is_cold(p) {
                out[i] = self.cold.read(k, p)?;
            }
        }
        Ok(out)
    }

    fn contains(&self, ptr: &ValuePointer) -> bool {
        if is_cold(ptr) {
            return self.cold.contains(ptr);
        }
        let st = self.state.lock();
        match st.table.segs.get(&ptr.file_id) {
            Some(s) => ptr.end() <= s.len,
            // Collected by GC: a later, durable relocation supersedes it.
            None => ptr.file_id < st.table.next_seg,
        }
    }

    fn tracks_unseparated(&self) -> bool {
        true
    }

    fn note_unseparated(&self, key: &[u8], seq: SeqNum) {
        self.departed[departed_bucket(key)].fetch_max(seq, Ordering::Relaxed);
    }

    fn recovered(&self) {
        let next = self.state.lock().table.next_seg;
        self.trusted_from.store(next, Ordering::Release);
    }

    fn note_garbage(&self, ptr: &ValuePointer) {
        if is_cold(ptr) {
            self.cold.note_garbage(ptr);
            return;
        }
        let mut st = self.state.lock();
        if let Some(s) = st.table.segs.get(&ptr.file_id) {
            let g = s.group as usize;
            let grp = &mut st.table.groups[g];
            if grp.segs.contains(&ptr.file_id) {
                grp.noted_garbage += ptr.length as u64;
                self.counters
                    .garbage_found
                    .fetch_add(ptr.length as u64, Ordering::Relaxed);
            }
        }
    }

    fn verify(&self) -> (u64, Vec<Error>) {
        let segs: Vec<(u64, u64)> = {
            let mut st = self.state.lock();
            if let Err(e) = self.flush_cache(&mut st) {
                return (0, vec![e]);
            }
            let mut v = Vec::new();
            for gi in 0..st.table.geo.groups {
                match st.table.group_lens(gi) {
                    Ok(l) => v.extend(l),
                    Err(id) => return (0, vec![self.unknown_segment(id)]),
                }
            }
            v.sort_unstable();
            self.wait_placed_written(&st);
            v
        };
        let mut records = 0u64;
        let mut faults = Vec::new();
        for (id, len) in segs {
            let path = self.path(id);
            let mut buf = vec![0u8; len as usize];
            if let Err(e) = self
                .files
                .read_exact(id, 0, &mut buf, IoCategory::ValueStore)
            {
                // A GC running meanwhile may have collected the segment:
                // its group no longer lists it (the file goes before the
                // table entry, so the entry alone does not say).
                let st = self.state.lock();
                let listed = st
                    .table
                    .segs
                    .get(&id)
                    .is_some_and(|s| st.table.groups[s.group as usize].segs.contains(&id));
                if listed {
                    faults.push(e);
                }
                continue;
            }
            let mut pos = 0usize;
            let codec = self.codec(id);
            while pos < buf.len() {
                match codec.decode(&buf[pos..]) {
                    Ok(r) => {
                        pos += r.len;
                        records += 1;
                    }
                    Err(e) => {
                        faults.push(Error::corruption(
                            &path,
                            pos as u64,
                            format!("hashkv record damaged ({e:?})"),
                        ));
                        break;
                    }
                }
            }
        }
        let (n, f) = self.cold.verify();
        records += n;
        faults.extend(f);
        (records, faults)
    }

    fn figures(&self) -> Vec<(&'static str, u64)> {
        let (
            groups,
            max_wv,
            sum_wv,
            free,
            reserved,
            used_groups,
            cache,
            jlen,
            pressure,
            units,
            counted,
            room,
        ) = {
            let st = self.state.lock();
            let t = &st.table;
            let max_wv = t.groups.iter().map(|g| g.write_volume).max().unwrap_or(0);
            let sum_wv: u64 = t.groups.iter().map(|g| g.write_volume).sum();
            let used = t.groups.iter().filter(|g| !g.segs.is_empty()).count() as u64;
            (
                t.geo.groups as u64,
                max_wv,
                sum_wv,
                t.free_units(),
                t.geo.reserved_units,
                used,
                st.cache.bytes() as u64,
                st.journal_len,
                (t.free_units() < HashKvStore::low_watermark(t)) as u64,
                t.used_units,
                t.main_slack_units,
                t.main_room_left_units(),
            )
        };
        let cold = self.cold.space();
        let c = &self.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        vec![
            ("groups", groups),
            ("groups_in_use", used_groups),
            ("group_write_volume_max", max_wv),
            ("group_write_volume_avg", sum_wv / groups.max(1)),
            ("log_segments_reserved", reserved),
            ("log_segments_in_groups", units),
            ("log_segments_free", free),
            // The main segments' free room as counted at the last GC step,
            // and what is left of it now (`Table::main_room_left_units`).
            // A user append into room the cold log took is refused once it
            // would leave less than GC's headroom free, as a log segment is.
            ("main_room_units", counted),
            ("main_room_left_units", room),
            ("gc_pressure", pressure),
            ("gc_runs", l(&c.gc_runs)),
            ("gc_groups_collected", l(&c.gc_groups)),
            ("gc_bytes_read", l(&c.gc_bytes_read)),
            ("gc_bytes_rewritten", l(&c.gc_bytes_rewritten)),
            ("gc_bytes_freed", l(&c.gc_bytes_freed)),
            ("gc_cold_bytes_moved", l(&c.gc_cold_bytes)),
            ("gc_cold_bytes_kept", l(&c.gc_cold_kept)),
            ("write_delays", l(&c.write_delays)),
            ("gc_tags_written", l(&c.gc_tags)),
            ("gc_index_lookups", l(&c.gc_lookups)),
            ("gc_moves_judged", l(&c.gc_judged)),
            ("gc_stalled_full", l(&c.gc_stalls)),
            ("cold_log_bytes", cold.live_bytes + cold.garbage_bytes),
            ("cold_log_garbage_bytes", cold.garbage_bytes),
            ("write_cache_bytes", cache),
            ("write_cache_flushes", l(&c.cache_flushes)),
            ("write_journal_bytes", jlen),
            ("table_checkpoints", l(&c.checkpoints)),
            ("store_full_errors", l(&c.full_errors)),
        ]
    }

    fn garbage_found(&self) -> u64 {
        self.counters.garbage_found.load(Ordering::Relaxed) + self.cold.garbage_found()
    }

    /// Three sections: noted garbage per segment group (by group index),
    /// the cold log's reported garbage by region, and its inferred garbage
    /// by region ([`ColdLog::hint_entries`]). A table of two sections
    /// (before inferred garbage was kept) restores with none inferred.
    fn garbage_table(&self) -> Option<Vec<u8>> {
        let groups: Vec<(u64, u64)> = {
            let st = self.state.lock();
            st.table
                .groups
                .iter()
                .enumerate()
                .map(|(i, g)| (i as u64, g.noted_garbage))
                .collect()
        };
        Some(crate::vstore::garbage::encode(&[
            groups,
            self.cold.garbage_entries(),
            self.cold.hint_entries(),
        ]))
    }

    fn restore_garbage_table(&self, table: &[u8]) -> Result<()> {
        let t = crate::vstore::garbage::decode(table)
            .ok_or_else(|| crate::vstore::garbage::corrupt(&self.files.dir))?;
        if let Some(groups) = t.first() {
            let mut st = self.state.lock();
            let t = &mut st.table;
            for &(i, g) in groups {
                let Some(grp) = t.groups.get(i as usize) else {
                    continue;
                };
                let held: u64 = grp
                    .segs
                    .iter()
                    .map(|id| t.segs.get(id).map_or(0, |s| s.len))
                    .sum();
                t.groups[i as usize].noted_garbage = g.min(held);
            }
        }
        if let Some(cold) = t.get(1) {
            self.cold.restore_garbage_entries(cold);
        }
        if let Some(hints) = t.get(2) {
            self.cold.restore_hint_entries(hints);
        }
        Ok(())
    }

    /// Live bytes are the groups' segments less the garbage noted in them
    /// and the running GC step's copies (whose originals still count), plus
    /// the cold log's live bytes. Garbage adds those copies and the
    /// segments the running step retired and has not deleted yet (those a
    /// reader still holds once it ends wait for the reader and are garbage
    /// no step can free: they count in neither), so that a step moves
    /// bytes between the two figures instead of making live bytes swell
    /// while it copies and the disk look a step's worth fuller after it
    /// commits. The space target judges every write by these figures
    /// (`db/space/policy.rs`).
    fn space(&self) -> SpaceStats {
        let (total, noted, seg_bytes, jlen, copies, retired) = {
            let st = self.state.lock();
            let t = &st.table;
            let mut total = 0u64;
            let mut noted = 0u64;
            for g in &t.groups {
                noted += g.noted_garbage;
                for id in &g.segs {
                    total += t.segs.get(id).map_or(0, |s| s.len);
                }
            }
            // Segment files are append-only and dense: their length, up to
            // the file system's block, is what they occupy (retired and
            // in-flight ones included), and no per-file `stat` is needed on
            // this frequently called path. The blocks count: with the
            // default geometry's 716 groups, the last blocks of a small
            // store's segments are megabytes.
            let (mut listed, mut seg_bytes) = (0u64, 0u64);
            for s in t.segs.values() {
                listed += s.len;
                seg_bytes += s.len.next_multiple_of(FS_BLOCK);
            }
            // Every segment is a group's, or retired by GC. Those the
            // running step retired are freed when it ends; those a reader
            // still holds (`pending` after the step) are no garbage GC can
            // free, and stay out of the figure.
            let pinned: u64 = st
                .pending
                .iter()
                .flat_map(|p| &p.segs)
                .filter_map(|id| t.segs.get(id).map(|s| s.len))
                .sum();
            let retired = listed.saturating_sub(total).saturating_sub(pinned);
            let noted = noted.min(total);
            let copies = st.gc_copies.min(total - noted);
            (total, noted, seg_bytes, st.journal_len, copies, retired)
        };
        let cold = self.cold.space();
        let file_bytes = seg_bytes + cold.file_bytes + jlen;
        let live = total - noted - copies + cold.live_bytes;
        let garbage = noted + copies + retired + cold.garbage_bytes;
        SpaceStats {
            live_bytes: live,
            garbage_bytes: garbage,
            file_bytes,
        }
    }

    fn wait_idle(&self) -> Result<()> {
        self.wait_worker_idle();
        HashKvStore::check_poisoned(&self.state.lock())
    }

    /// `MAX_RESERVE_DELAY` times [`Table::pause_depth`]: from halfway
    /// between the low watermark and GC's headroom down to the headroom,
    /// where an append is refused and the writer waits for a GC step.
    /// Far from the low watermark, as the last [`ValueStore::gc_due`]
    /// found it (the engine asks after every write, under the state lock
    /// it takes anyway), no lock is taken.
    fn write_delay(&self) -> std::time::Duration {
        if !self.pacing.load(Ordering::Relaxed) {
            return std::time::Duration::ZERO;
        }
        let depth = {
            let st = self.state.lock();
            st.table.pause_depth(Self::low_watermark(&st.table))
        };
        if depth <= 0.0 {
            return std::time::Duration::ZERO;
        }
        self.counters.write_delays.fetch_add(1, Ordering::Relaxed);
        MAX_RESERVE_DELAY.mul_f64(depth)
    }

    /// Free log segments below a quarter of the reserve (HashKV §3.3: GC
    /// runs when the reserved space runs low).
    fn gc_due(&self) -> bool {
        let st = self.state.lock();
        let low = HashKvStore::low_watermark(&st.table);
        self.pacing
            .store(st.table.pause_depth(low) > 0.0, Ordering::Relaxed);
        st.table.free_units() < low
    }

    /// The reserved space held by retired log segments (main segments are
    /// not counted against the capacity's reserve).
    fn pinned_bytes(&self) -> u64 {
        let st = self.state.lock();
        let units: u64 = st
            .pending
            .iter()
            .flat_map(|p| p.segs.iter())
            .filter_map(|id| st.table.segs.get(id))
            .map(|s| s.units as u64)
            .sum();
        units * st.table.geo.log_size
    }

    fn gc_step(
        &self,
        index: &dyn IndexReader,
        relocator: &dyn IndexRelocator,
    ) -> Result<GcOutcome> {
        // The main segments' room as the step starts: writers have filled
        // some of it since the last step.
        self.refresh_cold_units();
        let r = gc::step(self, index, relocator);
        // Cold moves grew the cold log, or its own GC shrank it.
        self.refresh_cold_units();
        r
    }
}

impl Drop for HashKvStore {
    fn drop(&mut self) {
        if let Some(w) = self.worker.take() {
            self.work.lock().shutdown = true;
            self.work_cv.notify_all();
            let _ = w.join();
        }
        let mut st = self.state.lock();
        if st.poisoned.is_none() {
            let _ = self.flush_cache(&mut st);
            if let Some(j) = self.journal.lock().as_mut() {
                let _ = j.flush();
            }
        }
    }
}
