//! Recovery of the LSM-tree at open: WAL replay, and in log mode the value
//! log's replay from the manifest's checkpoint (WiscKey §3.4.2).

use super::{wal_preallocation, LsmIndex, SuperVersion, Wal};
use crate::batch::decode_batch;
use crate::error::{Error, IoContext, Result};
use crate::format::record::{log_has_records, LogEnd, RecordReader, RecordWriter};
use crate::fs::{create_preallocated, read_all, IoCategory};
use crate::index::compaction::flush_to_tables;
use crate::index::filename::{self, FileKind};
use crate::index::key::{SeqNum, ValueType};
use crate::index::memtable::MemTable;
use crate::index::version::{log_and_apply, VersionEdit};
use crate::vstore::ValuePointer;
use std::sync::Arc;

impl LsmIndex {
    /// Replays WALs newer than the manifest's log number, writes what they
    /// hold to level-0 SSTables, and starts a new WAL and manifest. Returns
    /// the last sequence number restored.
    pub(super) fn recover_wals(&self) -> Result<SeqNum> {
        let (dir, fs, stats) = (&self.shared.dir, &self.shared.fs, &self.shared.stats);
        let (log_number, mut max_seq) = {
            let vs = self.versions.lock();
            (vs.log_number, vs.last_sequence)
        };
        let names = fs.list(dir).ctx(dir)?;
        let mut wals: Vec<u64> = names
            .iter()
            .filter_map(|n| match filename::parse(n) {
                Some(FileKind::Wal(x)) if x >= log_number => Some(x),
                _ => None,
            })
            .collect();
        wals.sort_unstable();
        // Numbers handed out after the last manifest edit (a WAL started at
        // a memtable switch, outputs of an unfinished compaction) are not in
        // the manifest: never hand them out again, or a new file would
        // truncate a WAL that is still being replayed.
        let max_used = names
            .iter()
            .filter_map(|n| match filename::parse(n) {
                Some(FileKind::Wal(x)) | Some(FileKind::Table(x)) | Some(FileKind::Manifest(x)) => {
                    Some(x)
                }
                _ => None,
            })
            .max()
            .unwrap_or(0);
        {
            let mut vs = self.versions.lock();
            vs.next_file_number = vs.next_file_number.max(max_used + 1);
        }
        let mut edit = VersionEdit::default();
        let mut mem = Arc::new(MemTable::for_buffer(self.shared.opts.write_buffer_size));
        // Carried values whose record the value store lost.
        let mut restored_inline = 0u64;
        let mut next = || self.versions.lock().new_file_number();
        {
            let mut ctx = self.job_context(&mut next);
            // The sequence number the next batch must start at: WALs
            // continue one another without a gap (see `PrevWal`), the
            // first from the manifest's last sequence number (its flushed
            // memtable ended the WAL before it).
            let mut expect = max_seq + 1;
            'replay: for (i, &n) in wals.iter().enumerate() {
                let path = filename::wal_path(dir, n);
                let data = read_all(fs.as_ref(), &path).ctx(&path)?;
                stats.add_read(IoCategory::Wal, data.len() as u64);
                let mut r = RecordReader::for_log(&data, &path, n);
                let mut first = true;
                while let Some((off, rec)) = r.next_record()? {
                    if rec.is_empty() {
                        // A seal: the WAL before this one was durable.
                        continue;
                    }
                    let b = decode_batch(rec).ok_or_else(|| {
                        Error::corruption(&path, off, "malformed write batch in WAL")
                    })?;
                    let last = (b.seq.checked_add(b.entries.len() as u64))
                        .filter(|_| b.seq > 0 && !b.entries.is_empty())
                        .map(|end| end - 1)
                        .filter(|&l| l <= crate::index::key::MAX_SEQ);
                    let Some(last) = last else {
                        return Err(Error::corruption(
                            &path,
                            off,
                            format!(
                                "write batch with sequence {} and {} entries is out of range",
                                b.seq,
                                b.entries.len()
                            ),
                        ));
                    };
                    if first && b.seq > expect {
                        // The WAL before lost records: an unsynced tail,
                        // unless this WAL holds a seal.
                        if has_seal(&data, &path, n)? {
                            return Err(Error::corruption(
                                &path,
                                off,
                                format!(
                                    "WAL starts at sequence {} but the WAL before it, \
                                     sealed as durable, ends before {expect}",
                                    b.seq
                                ),
                            ));
                        }
                        break 'replay;
                    }
                    first = false;
                    // A batch whose values did not survive the crash ends
                    // the history (WiscKey §3.3.3): nothing after it is
                    // replayed, so the state stays a prefix. A pointer that
                    // carries its value (a synced write under
                    // `Options::sync_values_in_wal`) is never lost: when
                    // the store did not keep the record, the value carried
                    // in the WAL is restored inline.
                    let held = |e: &crate::batch::BatchEntry<'_>| {
                        ValuePointer::decode(e.value).is_some_and(|p| self.vstore.contains(&p))
                    };
                    let lost = b
                        .entries
                        .iter()
                        .zip(&b.carried)
                        .any(|(e, c)| e.vtype == ValueType::Pointer && c.is_none() && !held(e));
                    if lost {
                        break 'replay;
                    }
                    for (j, (e, c)) in b.entries.iter().zip(&b.carried).enumerate() {
                        match c {
                            Some(v) if !held(e) => {
                                restored_inline += 1;
                                mem.add(b.seq + j as u64, ValueType::Value, e.key, v)
                            }
                            _ => mem.add(b.seq + j as u64, e.vtype, e.key, e.value),
                        }
                    }
                    max_seq = max_seq.max(last);
                    expect = expect.max(last + 1);
                    if mem.approximate_bytes() >= self.shared.opts.write_buffer_size {
                        for (f, c) in flush_to_tables(&mut ctx, &mut mem.iter())? {
                            edit.table_counts.push((f.number, c));
                            edit.added.push((0, f));
                        }
                        mem = Arc::new(MemTable::for_buffer(self.shared.opts.write_buffer_size));
                    }
                }
                if let Some(LogEnd::Stale(_)) = r.end() {
                    // The WAL's records end where a recycled file's older
                    // records begin: no record was cut.
                    continue 'replay;
                }
                if let Some(LogEnd::Torn(_)) = r.end() {
                    // Zeros to the end are the WAL's preallocated space
                    // (or a write of which nothing persisted): no record
                    // was cut, and the next WAL continues the history.
                    if r.zero_tail() {
                        continue 'replay;
                    }
                    // A torn record ends this WAL. A newer WAL with data
                    // follows when this one's unsynced tail was lost (a
                    // switch does not sync, see `PrevWal`): the newer
                    // WAL's first batch then starts past the gap, and is
                    // judged above. Otherwise the history ends here.
                    let later_data = wals[i + 1..].iter().any(|&m| {
                        let p = filename::wal_path(dir, m);
                        read_all(fs.as_ref(), &p).map_or(true, |d| log_has_records(&d, &p, m))
                    });
                    if later_data {
                        continue 'replay;
                    }
                    break 'replay;
                }
            }
            // Log mode: the value log after the checkpoint holds the writes
            // the lost memtables had (WiscKey §3.4.2).
            self.vstore.replay(&mut |seq, t, k, v| {
                mem.add(seq, t, k, v);
                max_seq = max_seq.max(seq);
                Ok(())
            })?;
            if !mem.is_empty() {
                for (f, c) in flush_to_tables(&mut ctx, &mut mem.iter())? {
                    edit.table_counts.push((f.number, c));
                    edit.added.push((0, f));
                }
            }
        }
        self.counters
            .wal_values_restored
            .fetch_add(restored_inline, std::sync::atomic::Ordering::Relaxed);
        // Commit the replayed state before the new WAL exists: an open that
        // fails or crashes after this point finds the old WALs obsolete, and
        // before it finds no new WAL, so a torn tail stays in the newest WAL.
        let number = self.versions.lock().new_file_number();
        let path = filename::wal_path(dir, number);
        edit.log_number = Some(number);
        let log_pos = self.vstore.log_position();
        if let Some(p) = log_pos {
            self.vstore.sync()?;
            edit.value_store_state = Some(self.vstore.state_with_checkpoint(p));
        }
        let v = log_and_apply(&self.versions, &self.manifest_writer, &mut edit, |vs, _| {
            vs.last_sequence = max_seq;
        })?;
        if let Some(p) = log_pos {
            self.vstore.checkpoint_committed(p);
        }
        let file = create_preallocated(fs.as_ref(), &path, wal_preallocation(&self.shared.opts))
            .ctx(&path)?;
        fs.sync_dir(dir).ctx(dir)?;
        *self.sv.write() = Arc::new(SuperVersion {
            mem: Arc::new(MemTable::for_buffer(self.shared.opts.write_buffer_size)),
            imm: None,
            version: v,
        });
        *self.wal.lock() = Some(Wal::new(
            RecordWriter::new(file, path, stats.clone(), IoCategory::Wal),
            number,
            Vec::new(),
            max_seq,
        ));
        self.bg.lock().imm_log_number = number;
        Ok(max_seq)
    }
}

/// True when the WAL in `data` holds a seal (an empty record, first or
/// later; a recycled WAL's own first record, empty too, is not returned
/// by the reader and so is not taken for one): the WAL before it was
/// durable whole when the seal was written (`super::PrevWal`).
fn has_seal(data: &[u8], path: &std::path::Path, number: u64) -> Result<bool> {
    let mut r = RecordReader::for_log(data, path, number);
    while let Some((_, rec)) = r.next_record()? {
        if rec.is_empty() {
            return Ok(true);
        }
    }
    Ok(false)
}
