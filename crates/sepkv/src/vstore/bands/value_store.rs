//! [`ValueStore`] for [`BandStore`]: what the engine calls of the bands
//! (appends outside log mode, reads, sync, GC steps, figures and
//! verification), built on the store's own methods.

use super::*;

impl ValueStore for BandStore {
    fn name(&self) -> &'static str {
        "bands"
    }

    fn separates(&self, len: usize) -> bool {
        len >= self.opts.value_threshold
    }

    fn append(&self, records: &[ValueRecord<'_>]) -> Result<Vec<ValuePointer>> {
        let recs: Vec<(Kind, &[u8], u64, &[u8])> = records
            .iter()
            .map(|r| (Kind::Value, r.key, r.seq, r.value))
            .collect();
        self.append_entries(&recs, &|_, _| None, IoCategory::ValueStore)
    }

    /// The fsync runs outside the `io` lock (see the value log's `sync`):
    /// appends go on meanwhile, and a band closed in between was synced
    /// when it was closed.
    fn sync(&self) -> Result<()> {
        let mut o = self.io.lock();
        self.check_failed(&o)?;
        if o.dirty {
            let band = o.band;
            let upto = o.len;
            let path = self.path(band);
            sync_unlocked(&mut o, |o| (&mut o.file, &mut o.failed)).ctx(&path)?;
            if o.band == band {
                o.header_synced = true;
                if o.len == upto {
                    o.dirty = false;
                }
            }
        }
        if !o.dir_synced {
            if let Err(e) = self.fs.sync_dir(&self.dir) {
                o.failed = Some(format!("a directory sync failed: {e}"));
                return Err(Error::io(&self.dir, e));
            }
            o.dir_synced = true;
        }
        Ok(())
    }

    fn read(&self, key: &[u8], ptr: &ValuePointer) -> Result<Option<Vec<u8>>> {
        let Some(buf) = self.read_raw(ptr, IoCategory::ValueStore)? else {
            return Ok(None);
        };
        let e = self.check_entry(ptr, &buf)?;
        if e.key != key {
            return Err(Error::corruption(
                self.path(ptr.file_id),
                ptr.offset,
                "band entry belongs to another key",
            ));
        }
        if !e.kind.holds_value() {
            return Err(Error::corruption(
                self.path(ptr.file_id),
                ptr.offset,
                "value pointer addresses a band entry without a value",
            ));
        }
        Ok(Some(e.payload.to_vec()))
    }

    fn contains(&self, ptr: &ValuePointer) -> bool {
        let st = self.state.lock();
        match st.bands.get(&ptr.file_id) {
            Some(b) => ptr.end() <= b.valid_len,
            // Collected by GC: a later, durable relocation supersedes it.
            None => ptr.file_id < st.next_id,
        }
    }

    fn note_garbage(&self, ptr: &ValuePointer) {
        let mut st = self.state.lock();
        let seq = st.last_seq;
        Self::charge_locked(&mut st, ptr, seq);
    }

    fn log_batch(&self, entries: &[LogEntry<'_>]) -> Result<Vec<Option<ValuePointer>>> {
        if !self.opts.log_mode {
            return Err(Error::InvalidArgument(
                "the bands were opened without log mode".into(),
            ));
        }
        let ptrs = self.log_linked(entries, None)?;
        Ok(entries
            .iter()
            .zip(ptrs)
            .map(|(e, p)| (e.vtype == ValueType::Value && e.separate).then_some(p))
            .collect())
    }

    fn log_position(&self) -> Option<(u64, u64)> {
        let o = self.io.lock();
        self.state.lock().ckpt?;
        Some((o.band, o.len))
    }

    fn state_with_checkpoint(&self, pos: (u64, u64)) -> Vec<u8> {
        let st = self.state.lock();
        let mut p = Self::persisted_locked(&st);
        p.ckpt = pos;
        p.encode()
    }

    fn checkpoint_committed(&self, pos: (u64, u64)) {
        let mut st = self.state.lock();
        if st.ckpt.is_some_and(|c| c < pos) {
            st.ckpt = Some(pos);
        }
    }

    fn replay(&self, f: &mut crate::vstore::ReplaySink<'_>) -> Result<()> {
        if self.state.lock().ckpt.is_none() {
            return Ok(());
        }
        self.replay_entries(&mut |p, e| {
            let (t, v) = match e.kind {
                Kind::Value => (ValueType::Pointer, ValuePointer { aux: 0, ..p }.encode()),
                Kind::Inline => (ValueType::Value, e.payload.to_vec()),
                Kind::Tombstone => (ValueType::Deletion, Vec::new()),
                Kind::Relocation => (ValueType::Pointer, e.payload.to_vec()),
                Kind::GcCopy | Kind::Tag => return Ok(()),
            };
            f(e.seq, t, e.key, &v)
        })
    }

    fn verify(&self) -> (u64, Vec<Error>) {
        let _no_gc = self.gc_lock.lock();
        let ranges: Vec<(u64, u64)> = {
            let st = self.state.lock();
            st.bands
                .iter()
                .filter(|(_, b)| b.retired.is_none())
                .map(|(&id, b)| (id, b.valid_len))
                .collect()
        };
        let mut records = 0;
        let mut faults = Vec::new();
        for (id, end) in ranges {
            match self.replay_band(id, HEADER_LEN, end, &mut |_, _| Ok(())) {
                Ok(n) => records += n,
                Err(e) => faults.push(e),
            }
        }
        (records, faults)
    }

    fn figures(&self) -> Vec<(&'static str, u64)> {
        let (open, closed, retired) = self.band_counts();
        let invalid: u64 = self.invalidity().iter().map(|x| x.1).sum();
        let c = &self.counters;
        let mut v = vec![
            ("bands_open", open),
            ("bands_closed", closed),
            ("bands_retired", retired),
        ];
        if let Some(e) = self.empty_bands() {
            v.push(("bands_empty", e));
        }
        v.extend([
            ("bands_invalid_bytes", invalid),
            ("gc_runs", c.gc_runs.load(Ordering::Relaxed)),
            ("gc_steps", c.gc_steps.load(Ordering::Relaxed)),
            ("gc_bytes_read", c.gc_bytes_read.load(Ordering::Relaxed)),
            (
                "gc_bytes_rewritten",
                c.gc_bytes_rewritten.load(Ordering::Relaxed),
            ),
            ("gc_bytes_freed", c.gc_bytes_freed.load(Ordering::Relaxed)),
            (
                "gc_tombstones_dropped",
                c.gc_tombstones_dropped.load(Ordering::Relaxed),
            ),
        ]);
        v.extend(
            [
                ("gc_victim_bytes", &c.gc_victim_bytes),
                ("gc_victim_invalid", &c.gc_victim_invalid),
                ("gc_victim_live", &c.gc_victim_live),
                ("gc_held_bytes", &c.gc_held_bytes),
                ("gc_held_invalid", &c.gc_held_invalid),
                ("gc_free_invalid", &c.gc_free_invalid),
                ("gc_used_bytes", &c.gc_used_bytes),
                ("gc_live_bytes", &c.gc_live_bytes),
                ("gc_held_steps", &c.gc_held_steps),
            ]
            .map(|(n, x)| (n, x.load(Ordering::Relaxed))),
        );
        v
    }

    fn space(&self) -> SpaceStats {
        let st = self.state.lock();
        let live_bands = st.bands.values().filter(|b| b.retired.is_none());
        let (total, garbage) = live_bands.fold((0u64, 0u64), |(t, g), b| {
            (t + b.valid_len - HEADER_LEN.min(b.valid_len), g + b.invalid)
        });
        // Every listed band's file, retired ones included until deleted, in
        // whole blocks of the file system. Counted from the lengths kept
        // here rather than asked of the file system: the GC thread reads
        // this figure every step, and a store holds hundreds of bands.
        let file_bytes = st
            .bands
            .values()
            .map(|b| b.file_len.max(b.valid_len).div_ceil(BLOCK) * BLOCK)
            .sum();
        drop(st);
        let garbage = garbage.min(total);
        SpaceStats {
            live_bytes: total - garbage,
            garbage_bytes: garbage,
            file_bytes,
        }
    }

    /// Retired bands not deleted yet, and the invalid bytes of bands the
    /// last GC step passed over only because an old reader may still walk
    /// back to the versions in them.
    fn pinned_bytes(&self) -> u64 {
        let st = self.state.lock();
        let retired: u64 = st
            .bands
            .values()
            .filter(|b| b.retired.is_some())
            .map(|b| b.file_len)
            .sum();
        retired + self.reader_held.load(Ordering::Relaxed)
    }

    fn gc_due(&self) -> bool {
        BandStore::gc_due(self)
    }

    fn over_space_bound(&self) -> bool {
        self.over_bound.load(Ordering::Relaxed)
    }

    /// The band files against `value_capacity` (the bytes a user append
    /// is refused past), with the live entry bytes as the floor and a
    /// width of [`PACE_BANDS`] bands: the space governor slows writers
    /// down smoothly over the last tenth of that width (about a band), held
    /// to the rate GC frees space at, rather than letting them meet the
    /// refusal and run GC themselves; GC keeps all the room before it.
    fn capacity_use(&self) -> Option<crate::vstore::CapacityUse> {
        let limit = self.opts.capacity?;
        let st = self.state.lock();
        let (used, live) = Self::used_and_live_locked(&st);
        Some(crate::vstore::CapacityUse {
            used,
            limit,
            floor: live,
            width: Some(PACE_BANDS * self.band_size_locked(&st)),
        })
    }

    /// The band files against `space_bound` bytes per live byte in them,
    /// plus the open band's worth, where `over_space_bound` holds writers.
    fn space_bound_use(&self) -> Option<crate::vstore::CapacityUse> {
        let bound = self.opts.space_bound?;
        let (used, live) = Self::used_and_live_locked(&self.state.lock());
        Some(crate::vstore::CapacityUse {
            used,
            limit: (live as f64 * bound) as u64 + self.opts.band_bytes,
            floor: live,
            width: None,
        })
    }

    fn gc_trigger_ratio(&self) -> Option<f64> {
        self.gc_ratio()
    }

    fn gc_step(
        &self,
        index: &dyn IndexReader,
        relocator: &dyn IndexRelocator,
    ) -> Result<GcOutcome> {
        gc::step(self, index, relocator)
    }

    /// Closes the open band (when it holds entries) so that the pass covers
    /// every record written so far, and starts a pass over the bands up to
    /// it. Without a filter, nothing.
    fn start_filter_pass(&self) -> Result<u64> {
        if self.filter.get().is_none() {
            return Ok(0);
        }
        // The open band of GC copies too: its records were written before
        // the pass started. (Copies made during the pass were judged by it
        // already.)
        let mut gc = self.gc_io.lock();
        if let Some(f) = gc.as_ref().and_then(|o| o.failed.as_ref()) {
            return Err(Error::Poisoned(f.clone()));
        }
        self.close_gc_band(&mut gc)?;
        drop(gc);
        let mut o = self.io.lock();
        if let Some(f) = &o.failed {
            return Err(Error::Poisoned(f.clone()));
        }
        if o.entries > 0 {
            if let Err(e) = self.roll(&mut o) {
                o.failed = Some(format!("closing the band failed: {e}"));
                return Err(e);
            }
        }
        let st = self.state.lock();
        // Every band numbered below the open band of user writes, and the
        // closed bands of GC copies numbered above it.
        let end = st.next_id;
        *self.filter_pass.lock() = Some((0, end));
        Ok(st
            .bands
            .iter()
            .filter(|(&id, b)| id != o.band && b.closed)
            .map(|(_, b)| b.file_len)
            .sum())
    }
}
