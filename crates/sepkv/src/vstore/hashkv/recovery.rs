//! Opening the store: [`HashKvStore::open`] reads the segment table,
//! replays the GC and write journals, reconciles segment files with the
//! table, removes leftover files and checkpoints the table.

use super::*;

impl HashKvStore {
    /// Opens the store in `dir`, given the segment table last persisted with
    /// [`IndexRelocator::persist_state`] (`None` for a new database).
    /// Replays the GC and write journals, reconciles segment files with the
    /// table, removes leftover files and checkpoints the table.
    ///
    /// # Errors
    /// `Corruption` for an unreadable table or journal; `Io`.
    pub fn open(
        dir: &Path,
        fs: Arc<dyn FileSystem>,
        stats: Arc<IoStats>,
        opts: HashKvOptions,
        state: Option<&[u8]>,
    ) -> Result<HashKvStore> {
        let manifest = match state {
            Some(s) => Some(Table::decode(s).ok_or_else(|| {
                Error::corruption(dir.join("MANIFEST"), 0, "bad hashkv segment table")
            })?),
            None => None,
        };
        let own_path = dir.join(TABLE_FILE);
        let own = if fs.exists(&own_path) {
            let d = read_all(fs.as_ref(), &own_path).ctx(&own_path)?;
            stats.add_read(IoCategory::Manifest, d.len() as u64);
            Some(
                Table::decode(&d)
                    .ok_or_else(|| Error::corruption(&own_path, 0, "bad hashkv segment table"))?,
            )
        } else {
            None
        };
        let mut table = match (manifest, own) {
            (Some(a), Some(b)) => {
                if a.epoch >= b.epoch {
                    a
                } else {
                    b
                }
            }
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => Table::new(Geometry::new(
                opts.capacity,
                opts.main_segment_size,
                opts.log_segment_size,
                opts.reserved_ratio,
            )),
        };
        let files = SegFiles::new(dir, fs.clone(), stats.clone());
        // A format-1 store: every segment allocated before this open is in
        // the older codec (fixed below, once replay has allocated all).
        let mut legacy_below = opts.legacy_below.unwrap_or(u64::MAX);

        let snapshot_next = table.next_seg;

        // GC journal of an earlier version: intents of GCs that may have
        // installed relocations but did not commit.
        let gc_path = dir.join(GC_JOURNAL);
        let mut begun: BTreeMap<u64, Vec<GroupIntent>> = BTreeMap::new();
        if fs.exists(&gc_path) {
            let data = read_all(fs.as_ref(), &gc_path).ctx(&gc_path)?;
            stats.add_read(IoCategory::Gc, data.len() as u64);
            let mut r = RecordReader::new(&data, &gc_path);
            while let Some((off, rec)) = r.next_record()? {
                match journal::decode(rec) {
                    Some(Entry::Begin(id, g)) => {
                        begun.insert(id, g);
                    }
                    Some(Entry::Done(id)) => {
                        begun.remove(&id);
                    }
                    _ => {
                        return Err(Error::corruption(
                            &gc_path,
                            off,
                            "malformed GC journal entry",
                        ))
                    }
                }
            }
        }

        // Write journal, from the table's position to the first torn entry.
        let names = fs.list(dir).ctx(dir)?;
        let mut jnums: Vec<u64> = names.iter().filter_map(|n| parse_journal_name(n)).collect();
        jnums.sort_unstable();
        let from = table.journal_pos;
        let mut jdata: Vec<(PathBuf, Vec<u8>, usize)> = Vec::new();
        for &n in jnums.iter().filter(|&&n| n >= from.0) {
            let path = journal_path(dir, n);
            let data = read_all(fs.as_ref(), &path).ctx(&path)?;
            stats.add_read(IoCategory::ValueStore, data.len() as u64);
            let start = if n == from.0 {
                (from.1 as usize).min(data.len())
            } else {
                0
            };
            jdata.push((path, data, start));
        }
        let mut entries: Vec<(&Path, u64, Entry<'_>)> = Vec::new();
        'read: for (path, data, start) in &jdata {
            let mut r = RecordReader::new(&data[*start..], path);
            loop {
                let next = r.next_record().map_err(|e| match e {
                    Error::Corruption {
                        file,
                        offset,
                        reason,
                    } => Error::Corruption {
                        file,
                        offset: offset + *start as u64,
                        reason,
                    },
                    e => e,
                })?;
                let Some((off, rec)) = next else { break };
                let off = off + *start as u64;
                match journal::decode(rec) {
                    Some(e @ (Entry::Write(_) | Entry::Copy(_))) => entries.push((path, off, e)),
                    _ => {
                        return Err(Error::corruption(
                            path,
                            off,
                            "malformed write-journal entry",
                        ))
                    }
                }
            }
            // Zeros to the end are the journal's preallocated space (no
            // entry was cut): the next journal, if any, goes on.
            if matches!(r.end(), Some(crate::format::record::LogEnd::Torn(_))) && !r.zero_tail() {
                break 'read;
            }
        }
        // Segments appended to groups, then (earlier versions) GC output
        // behind the old segments it copied (`old ++ new ++ later`), then
        // the records, in journal order: a copy's source is in place before
        // the copy is replayed.
        for (_, _, e) in &entries {
            let allocs = match e {
                Entry::Write(w) => &w.allocs,
                Entry::Copy(c) => &c.allocs,
                _ => continue,
            };
            for a in allocs {
                table.attach(a, snapshot_next);
            }
        }
        for intents in begun.values() {
            adopt(&mut table, intents);
        }
        for (path, off, e) in &entries {
            match e {
                Entry::Write(w) => replay_records(&mut table, &files, path, *off, w)?,
                Entry::Copy(c) => replay_copies(&mut table, &files, legacy_below, path, *off, c)?,
                _ => {}
            }
        }
        drop(entries);
        drop(jdata);

        // Reconcile segment files with the table.
        let unknown = |id: u64| {
            Error::corruption(
                dir.join(TABLE_FILE),
                0,
                format!("hashkv segment table lists segment {id} but has no entry for it"),
            )
        };
        for gi in 0..table.geo.groups {
            let segs = table.groups[gi as usize].segs.clone();
            for &id in &segs {
                let len = table.seg(id).map_err(unknown)?.len;
                let fl = files.file_len(id)?;
                if fl == len {
                    continue;
                }
                let new_len = if fl > len {
                    // Records appended after the last checkpoint: straight
                    // to the segments when the journal records metadata
                    // only or is off (in any of the group's segments
                    // allocated since, and the one it was filling then);
                    // kept whatever the journal setting now, since it may
                    // change between opens. With a journal of values they
                    // can only be records whose journal entry was lost,
                    // which the WAL then decides.
                    let mut buf = vec![0u8; (fl - len) as usize];
                    files.read_exact(id, len, &mut buf, IoCategory::ValueStore)?;
                    let keep = len + intact_prefix(seg_codec(id, legacy_below), &buf) as u64;
                    if keep < fl {
                        files.truncate(id, keep)?;
                    }
                    keep
                } else {
                    // The file lost its tail (power loss before a sync):
                    // keep its intact records.
                    let mut buf = vec![0u8; fl as usize];
                    if fl > 0 {
                        files.read_exact(id, 0, &mut buf, IoCategory::ValueStore)?;
                    }
                    let e = intact_prefix(seg_codec(id, legacy_below), &buf) as u64;
                    if e < fl {
                        files.truncate(id, e)?;
                    }
                    e
                };
                let s = table.segs.get_mut(&id).ok_or_else(|| unknown(id))?;
                if new_len > s.len {
                    table.groups[gi as usize].write_volume += new_len - s.len;
                }
                s.len = new_len;
            }
        }

        // Remove what no table lists: GC output that never committed,
        // segments GC retired, interrupted rewrites.
        let listed = table.listed();
        let mut removed = false;
        for name in fs.list(dir).ctx(dir)? {
            let stale = match parse_seg_name(&name) {
                Some(id) => !listed.contains(&id),
                None => name.ends_with(".hseg.new") || name == TABLE_TMP,
            };
            if stale {
                let p = dir.join(&name);
                match fs.remove(&p) {
                    Ok(()) => removed = true,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(Error::io(&p, e)),
                }
            }
        }
        if removed {
            fs.sync_dir(dir).ctx(dir)?;
        }
        // Everything a pointer may reach is below `next_seg`.
        if let Some(&m) = listed.iter().max() {
            table.next_seg = table.next_seg.max(m + 1);
        }
        if opts.legacy_below.is_none() {
            legacy_below = table.next_seg;
        }
        table.legacy_below = legacy_below;

        let cold = ColdLog::open(
            dir,
            fs.clone(),
            stats.clone(),
            opts.cold_file_size,
            opts.cold_gc_chunk_size,
            opts.cold_legacy_below,
            table.cold_state.as_deref(),
        )?;

        // Checkpoint: the replayed records are synced, the table names a
        // fresh journal, and the old journals go.
        files.sync_dirty()?;
        let new_num = jnums.last().copied().unwrap_or(0).max(table.journal_pos.0) + 1;
        table.journal_pos = (new_num, 0);
        table.epoch += 1;
        let encoded = table.encode().map_err(unknown)?;
        write_table_file(fs.as_ref(), dir, &stats, &encoded)?;
        for &n in &jnums {
            let p = journal_path(dir, n);
            match fs.remove(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(&p, e)),
            }
        }
        let journal_limit = HashKvStore::journal_limit(&opts, &table);
        let journal = if opts.journal {
            let p = journal_path(dir, new_num);
            // Preallocated to the length at which it is recycled.
            let f = create_preallocated(
                fs.as_ref(),
                &p,
                HashKvStore::journal_prealloc(&opts, journal_limit),
            )
            .ctx(&p)?;
            Some(RecordWriter::new(
                f,
                p,
                stats.clone(),
                IoCategory::ValueStore,
            ))
        } else {
            None
        };
        // The checkpoint holds what the GC journal's intents adopted.
        if fs.exists(&gc_path) {
            fs.remove(&gc_path).ctx(&gc_path)?;
        }
        fs.sync_dir(dir).ctx(dir)?;

        let core = StoreCore {
            files,
            state: Mutex::new(State {
                table,
                cache: WriteCache::new(opts.write_cache_size),
                journal_len: 0,
                appended: 0,
                journal_num: new_num,
                dead: HashSet::new(),
                pending: Vec::new(),
                gc_copies: 0,
                stalled: HashMap::new(),
                poisoned: None,
                journal_limit,
                checkpointing: false,
            }),
            journal: Mutex::new(journal),
            retiring: Mutex::new(None),
            spare: Mutex::new(None),
            flushing: Mutex::new(VecDeque::new()),
            flushing_len: AtomicUsize::new(0),
            pacing: AtomicBool::new(false),
            flush_lock: Mutex::new(()),
            work: Mutex::new(Work::default()),
            work_cv: Condvar::new(),
            gc_lock: Mutex::new(()),
            stuck_group_steps: AtomicU32::new(0),
            departed: (0..DEPARTED_BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            trusted_from: AtomicU64::new(u64::MAX),
            cold,
            counters: Counters::default(),
            latency: ReadLatency::default(),
            opts,
            legacy_below,
        };
        let core = Arc::new(core);
        let worker = if core.opts.journal {
            let c = core.clone();
            Some(
                std::thread::Builder::new()
                    .name("sepkv-hashkv".into())
                    .spawn(move || {
                        crate::sched::mark_background();
                        c.work_loop()
                    })
                    .map_err(|e| Error::io(dir, e))?,
            )
        } else {
            None
        };
        let store = HashKvStore { core, worker };
        store.refresh_cold_units();
        Ok(store)
    }

    /// Charges the cold data log's span (live and garbage bytes from its
    /// tail to its head) to the capacity, in log-segment units, and counts
    /// the main segments' free room, which the cold log takes first
    /// ([`Table::free_units`]).
    ///
    /// Without the second, moving cold values out of a group took reserve
    /// that GC had just freed, while their room in the group's new main
    /// segment went unused: with the reserve low GC stayed due, and steps
    /// that freed almost nothing ran back to back whenever writers slowed
    /// down (in the update experiment with a 30 µs pause per write, the
    /// first phase's GC wrote 6.5 GB for 305 MB of updates).
    pub(super) fn refresh_cold_units(&self) {
        let cold = self.cold.space();
        let span = cold.live_bytes + cold.garbage_bytes;
        let mut st = self.state.lock();
        st.table.cold_units = span.div_ceil(st.table.geo.log_size.max(1));
        st.table.count_main_slack();
    }
}

/// Adopts the output of an uncommitted GC into its groups: after the old
/// segments when they are still listed, so the group reads `old ++ new ++
/// later`. Already-adopted or committed GCs are left alone.
fn adopt(table: &mut Table, intents: &[GroupIntent]) {
    for gi in intents {
        if gi.group >= table.geo.groups
            || gi.old.is_empty()
            || gi.new.iter().any(|(id, _)| table.segs.contains_key(id))
        {
            continue;
        }
        let list = &table.groups[gi.group as usize].segs;
        if list.len() < gi.old.len() || list[..gi.old.len()] != gi.old[..] {
            continue;
        }
        let at = gi.old.len();
        let ids: Vec<u64> = gi.new.iter().map(|(id, _)| *id).collect();
        table.groups[gi.group as usize]
            .segs
            .splice(at..at, ids.iter().copied());
        for (id, s) in &gi.new {
            table.used_units += s.units as u64;
            table.segs.insert(*id, s.clone());
            table.next_seg = table.next_seg.max(id + 1);
        }
    }
}

/// Applies the records of one write-journal entry: puts each record in
/// its segment file unless it is already there.
fn replay_records(
    table: &mut Table,
    files: &SegFiles,
    jpath: &Path,
    joff: u64,
    w: &journal::WriteEntry<'_>,
) -> Result<()> {
    for (p, bytes) in &w.records {
        let Some(seg) = table.segs.get(&p.seg) else {
            // Collected by GC since.
            continue;
        };
        let group = seg.group;
        let end = p.off + p.len as u64;
        let fl = files.file_len(p.seg)?;
        if fl < p.off {
            return Err(Error::corruption(
                jpath,
                joff,
                format!(
                    "write journal places a record at offset {} of segment {} but the segment ends at {fl}",
                    p.off, p.seg
                ),
            ));
        }
        if fl < end {
            if fl > p.off {
                files.truncate(p.seg, p.off)?;
            }
            files.append(p.seg, p.off, bytes, IoCategory::ValueStore)?;
        } else {
            // Present, but maybe only in the OS (a process crash): the
            // checkpoint that retires this journal syncs it.
            files.mark_dirty(p.seg);
        }
        let s = table.segs.get_mut(&p.seg).expect("checked above");
        if end > s.len {
            s.len = end;
            table.groups[group as usize].write_volume += p.len as u64;
        }
    }
    Ok(())
}

/// Applies the copies of one copy entry: puts each copy in its segment
/// file unless it is already there, reading it again from its source.
///
/// A copy out of a segment in the format-1 codec was re-encoded by GC:
/// its source is read at the older length and re-encoded the same way.
fn replay_copies(
    table: &mut Table,
    files: &SegFiles,
    legacy_below: u64,
    jpath: &Path,
    joff: u64,
    c: &journal::CopyEntry,
) -> Result<()> {
    for (p, (src, src_off)) in &c.copies {
        if !table.segs.contains_key(&p.seg) {
            // Collected by GC since.
            continue;
        }
        let end = p.off + p.len as u64;
        let fl = files.file_len(p.seg)?;
        if fl < p.off {
            return Err(Error::corruption(
                jpath,
                joff,
                format!(
                    "write journal places a copy at offset {} of segment {} but the segment ends at {fl}",
                    p.off, p.seg
                ),
            ));
        }
        if fl < end {
            // The copy's source stays until the copy is synced.
            let codec = seg_codec(*src, legacy_below);
            let src_len = (p.len as usize).saturating_sub(record::HEADER_LEN - codec.header_len());
            let mut buf = vec![0u8; src_len];
            let read = if table.segs.contains_key(src) {
                files.read_exact(*src, *src_off, &mut buf, IoCategory::Gc)
            } else {
                Err(Error::corruption(jpath, joff, "source segment is gone"))
            };
            let copy = match (read, codec.decode(&buf)) {
                (Ok(()), Ok(r)) if r.len == buf.len() => match codec {
                    Codec::Shared => Some(buf.clone()),
                    _ => Some(record::reencode(&r)),
                },
                _ => None,
            };
            let Some(copy) = copy.filter(|b| b.len() == p.len as usize) else {
                return Err(Error::corruption(
                    jpath,
                    joff,
                    format!(
                        "write journal copies {} bytes at {src_off} of segment {src} that are not a record",
                        p.len
                    ),
                ));
            };
            if fl > p.off {
                files.truncate(p.seg, p.off)?;
            }
            files.append(p.seg, p.off, &copy, IoCategory::Gc)?;
        } else {
            files.mark_dirty(p.seg);
        }
        if let Some(s) = table.segs.get_mut(&p.seg) {
            s.len = s.len.max(end);
        }
    }
    Ok(())
}
