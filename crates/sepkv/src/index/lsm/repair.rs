//! Repair of an LSM-tree whose manifest or `CURRENT` is lost or damaged
//! (`Db::repair`), after LevelDB's `RepairDB`.
//!
//! 1. The manifests that survive are read up to their first damaged
//!    record: the last value-store state they hold is kept, and the tables
//!    their edits deleted are known obsolete (a compaction's inputs that
//!    were not removed yet): they are left out, since a tombstone that
//!    compaction dropped at the bottom level may have been all that hid
//!    their entries.
//! 2. Every other SSTable or DTable is read whole, and every WAL up to its
//!    first damaged record. A table that cannot be read whole is dropped
//!    and reported.
//! 3. For each key the version with the highest sequence number wins,
//!    tombstones included: a key deleted before the loss stays deleted as
//!    long as its tombstone (or a newer write) survives in a table or WAL.
//!    Sequence numbers decide, never file numbers or levels.
//! 4. The winners are written, in sequence order and with their own
//!    sequence numbers, to a new WAL, and a new manifest names it (with the
//!    kept value-store state and a last sequence number just before the
//!    oldest winner); `CURRENT` is switched to it. The old tables, WALs,
//!    manifests and `CURRENT` are moved into `lost/` (never deleted).
//! 5. The next open replays the new WAL into level-0 tables as any
//!    recovery does.
//!
//! Value files (value logs, HashKV segments, TrieTables) stay where they
//! are: the pointers in the winners name them. HashKV and the TrieTables
//! keep their own tables beside the manifest; the value log's tail, kept
//! only in the manifest, is set to the oldest record a winner names. What cannot be ruled out is
//! reported: a damaged table that cannot be read whole is dropped, so its
//! keys may lose their newest version (or, where it held the newest
//! tombstone, come back with an older value); and without a surviving
//! manifest, a compaction input that was not removed yet cannot be told
//! from a live table.
//!
//! Memory: every winner is held in memory during the repair.

use crate::batch::{decode_batch, WriteBatch};
use crate::error::{Error, IoContext, Result};
use crate::format::record::{RecordReader, RecordWriter};
use crate::fs::{read_all, FileSystem, IoCategory, IoStats};
use crate::index::filename::{self, FileKind, CURRENT};
use crate::index::iter::InternalIterator;
use crate::index::key::{parse_internal_key, SeqNum, ValueType};
use crate::index::sstable::ReadCtx;
use crate::index::table_cache::AnyTable;
use crate::index::version::{log_and_apply, VersionEdit, VersionSet};
use crate::vstore::ValuePointer;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// What an LSM repair found and did (filled into the facade's `RepairReport`).
#[derive(Debug, Default)]
pub(crate) struct LsmRepair {
    pub tables_kept: Vec<u64>,
    pub tables_dropped: Vec<(u64, String)>,
    pub tables_obsolete: Vec<u64>,
    pub wals_read: Vec<u64>,
    pub wal_damage: Vec<String>,
    pub manifests_read: Vec<String>,
    pub value_store_state_kept: bool,
    pub entries_read: u64,
    pub live_keys: u64,
    pub tombstones: u64,
    pub last_sequence: SeqNum,
    /// The value log's tail the repair set (file id, offset).
    pub value_log_tail: Option<(u64, u64)>,
}

/// One winning entry: sequence number, type, value (or encoded pointer).
type Winner = (SeqNum, ValueType, Vec<u8>);

/// One entry read from a table: user key, then as [`Winner`].
type Entry = (Vec<u8>, SeqNum, ValueType, Vec<u8>);

fn offer(map: &mut BTreeMap<Vec<u8>, Winner>, key: &[u8], seq: SeqNum, t: ValueType, v: &[u8]) {
    match map.get(key) {
        Some((s, _, _)) if *s >= seq => {}
        _ => {
            map.insert(key.to_vec(), (seq, t, v.to_vec()));
        }
    }
}

/// Repairs the LSM-tree in `dir`; see the module docs. The caller holds
/// the database's lock.
pub(crate) fn repair(
    dir: &Path,
    fs: &Arc<dyn FileSystem>,
    stats: &Arc<IoStats>,
    levels: usize,
    vlog: bool,
) -> Result<LsmRepair> {
    let mut rep = LsmRepair::default();
    let names = fs.list(dir).ctx(dir)?;
    let mut tables = Vec::new();
    let mut wals = Vec::new();
    let mut manifests = Vec::new();
    let mut max_used = 0u64;
    for n in &names {
        match filename::parse(n) {
            Some(FileKind::Table(x)) => tables.push(x),
            Some(FileKind::Wal(x)) => wals.push(x),
            Some(FileKind::Manifest(x)) => manifests.push((x, n.clone())),
            _ => continue,
        }
        if let Some(FileKind::Table(x) | FileKind::Wal(x) | FileKind::Manifest(x)) =
            filename::parse(n)
        {
            max_used = max_used.max(x);
        }
    }
    tables.sort_unstable();
    wals.sort_unstable();
    manifests.sort_unstable();

    // 1. What the manifests still tell.
    let mut vstate: Option<Vec<u8>> = None;
    // Each table number's fate by the last edit that named it: live when
    // it was added (within an edit, deletions apply before additions, so a
    // DTable lightweight compaction grew, deleted and added again in one
    // edit, stays live).
    let mut live: BTreeMap<u64, bool> = BTreeMap::new();
    for (_, name) in &manifests {
        let path = dir.join(name);
        let Ok(data) = read_all(fs.as_ref(), &path) else {
            continue;
        };
        let mut r = RecordReader::new(&data, &path);
        let mut edits = 0;
        let mut damage = None;
        loop {
            match r.next_record() {
                Ok(Some((off, rec))) => match VersionEdit::decode(rec) {
                    Ok(e) => {
                        edits += 1;
                        if let Some(s) = e.value_store_state {
                            vstate = Some(s);
                        }
                        for (_, n) in e.deleted {
                            live.insert(n, false);
                        }
                        for (_, f) in e.added {
                            live.insert(f.number, true);
                        }
                    }
                    Err(reason) => {
                        damage = Some(format!("offset {off}: {reason}"));
                        break;
                    }
                },
                Ok(None) => break,
                Err(e) => {
                    damage = Some(e.to_string());
                    break;
                }
            }
        }
        rep.manifests_read.push(match damage {
            Some(d) => format!("{name}: {edits} edit(s) read, then damage ({d})"),
            None => format!("{name}: {edits} edit(s) read"),
        });
    }
    rep.value_store_state_kept = vstate.is_some();

    // 2. Tables and WALs.
    let mut win: BTreeMap<Vec<u8>, Winner> = BTreeMap::new();
    let ctx = ReadCtx {
        category: IoCategory::Compaction,
        fill_cache: false,
    };
    for &n in &tables {
        // Deleted by the last edit that named it: a compaction input not
        // removed yet.
        if live.get(&n) == Some(&false) {
            rep.tables_obsolete.push(n);
            continue;
        }
        let path = filename::table_path(dir, n);
        let read = || -> Result<Vec<Entry>> {
            let size = fs.file_size(&path).ctx(&path)?;
            let file: Arc<dyn crate::fs::RandomAccessFile> =
                Arc::from(fs.open_read(&path).ctx(&path)?);
            let t = AnyTable::open(
                file,
                path.clone(),
                n,
                size,
                None,
                stats.clone(),
                IoCategory::Compaction,
            )?;
            t.verify()?;
            let mut it = t.iter(ctx);
            it.seek_to_first();
            let mut out = Vec::new();
            while it.valid() {
                let p = parse_internal_key(it.key())
                    .ok_or_else(|| Error::corruption(&path, 0, "malformed internal key"))?;
                out.push((p.user_key.to_vec(), p.seq, p.vtype, it.value().to_vec()));
                it.next();
            }
            it.status()?;
            Ok(out)
        };
        match read() {
            Ok(entries) => {
                for (k, s, t, v) in &entries {
                    offer(&mut win, k, *s, *t, v);
                }
                rep.entries_read += entries.len() as u64;
                rep.tables_kept.push(n);
            }
            Err(e) => rep.tables_dropped.push((n, e.to_string())),
        }
    }
    for &n in &wals {
        let path = filename::wal_path(dir, n);
        let Ok(data) = read_all(fs.as_ref(), &path) else {
            rep.wal_damage
                .push(format!("{}: unreadable", path.display()));
            continue;
        };
        let mut r = RecordReader::for_log(&data, &path, n);
        loop {
            match r.next_record() {
                Ok(Some((_, []))) => {}
                Ok(Some((off, rec))) => {
                    let Some(b) = decode_batch(rec) else {
                        rep.wal_damage
                            .push(format!("{} at {off}: malformed batch", path.display()));
                        break;
                    };
                    for (j, e) in b.entries.iter().enumerate() {
                        offer(&mut win, e.key, b.seq + j as u64, e.vtype, e.value);
                        rep.entries_read += 1;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    rep.wal_damage.push(e.to_string());
                    break;
                }
            }
        }
        rep.wals_read.push(n);
    }
    // 3. Winners in sequence order.
    let mut order: Vec<(&Vec<u8>, &Winner)> = win.iter().collect();
    order.sort_by_key(|(_, w)| w.0);
    for (_, w) in &order {
        match w.1 {
            ValueType::Deletion => rep.tombstones += 1,
            _ => rep.live_keys += 1,
        }
    }
    if vlog {
        // The value log's tail decides where its open scans: a tail from
        // no manifest (or from a stale edit) could lie in punched-out
        // space, which reads as the log's end. The oldest record a winner
        // names is a record boundary with nothing live before it.
        let oldest = order
            .iter()
            .filter(|(_, w)| w.1 == ValueType::Pointer)
            .filter_map(|(_, w)| ValuePointer::decode(&w.2))
            .map(|p| (p.file_id, p.offset))
            .min();
        if let Some(tail) = oldest {
            vstate = Some(crate::vstore::vlog::state_for_tail(tail));
            rep.value_log_tail = Some(tail);
        }
    }
    let first_seq = order.first().map_or(1, |(_, w)| w.0);
    rep.last_sequence = order.last().map_or(0, |(_, w)| w.0);

    // 4. The new WAL, then the manifest that names it.
    let lost = dir.join("lost");
    fs.create_dir_all(&lost).ctx(&lost)?;
    let wal_number = max_used + 1;
    let wal_path = filename::wal_path(dir, wal_number);
    {
        let file = fs.create(&wal_path).ctx(&wal_path)?;
        let mut w = RecordWriter::new(file, wal_path.clone(), stats.clone(), IoCategory::Wal);
        let mut buf = Vec::new();
        for (k, (seq, t, v)) in &order {
            let mut b = WriteBatch::new();
            b.push(*t, k, v);
            b.encode_into(*seq, &mut buf);
            w.add_record(&buf)?;
        }
        w.sync()?;
    }
    fs.sync_dir(dir).ctx(dir)?;
    // The old manifests and CURRENT go first: the version set writes a
    // new manifest (numbered past every file) and CURRENT.
    let move_out = |name: &str| -> Result<()> {
        let from = dir.join(name);
        if fs.exists(&from) {
            fs.rename(&from, &lost.join(name)).ctx(&from)?;
        }
        Ok(())
    };
    for (_, name) in &manifests {
        move_out(name)?;
    }
    move_out(CURRENT)?;
    fs.sync_dir(dir).ctx(dir)?;
    let mut vs = VersionSet::create(dir, fs.clone(), stats.clone(), levels);
    vs.next_file_number = wal_number + 1;
    let set = Mutex::new(vs);
    let mut edit = VersionEdit {
        log_number: Some(wal_number),
        value_store_state: vstate,
        ..VersionEdit::default()
    };
    let last = first_seq.saturating_sub(1);
    log_and_apply(&set, &Mutex::new(()), &mut edit, |vs, _| {
        vs.last_sequence = last;
    })?;
    // 5. The old tables and WALs, now named by nothing.
    for &n in &tables {
        move_out(&format!("{n:06}.sst"))?;
    }
    for &n in &wals {
        move_out(&format!("{n:06}.log"))?;
    }
    fs.sync_dir(dir).ctx(dir)?;
    fs.sync_dir(&lost).ctx(&lost)?;
    Ok(rep)
}
