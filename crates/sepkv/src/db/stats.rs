//! What the database reports about itself: [`DbStats`] and the other
//! report types, [`Db::stats`] and [`Db::verify`].

use super::{Db, DbInner};
use crate::error::Result;
use crate::fs::{FileSystem, IoStatsSnapshot};
use crate::index::filename::{IDENTITY, LOCK};
pub use crate::report::{LevelStats, VerifyReport};
use crate::vstore::SpaceStats;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::Ordering;

/// What [`Db::gc`] did (bytes).
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct GcReport {
    /// GC steps run.
    pub steps: u64,
    /// Bytes scanned at the tail.
    pub bytes_read: u64,
    /// Bytes of live values rewritten at the head.
    pub bytes_rewritten: u64,
    /// Bytes of space released.
    pub bytes_freed: u64,
    /// Estimated garbage ratio afterwards.
    pub garbage_ratio: f64,
}

/// The files of one kind in the database directory.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct FileGroupStats {
    /// `sstables`, `wal`, `manifest` (with `CURRENT`), `value store`
    /// (value-log files, `hashkv` segments, journals and table) or `other`
    /// (`IDENTITY`, `LOCK`, temporary files).
    pub kind: String,
    /// Number of files.
    pub files: u64,
    /// Sum of the file lengths: what `ls -l` shows (bytes).
    pub size_bytes: u64,
    /// Device space the files occupy: what `du` shows (bytes). Smaller than
    /// the size where value-store GC punched holes into a file, and where a
    /// WAL or the active value-log file is preallocated (its size is set
    /// ahead of its data, so that syncing it logs no size change).
    pub allocated_bytes: u64,
}

/// A point-in-time report of the database's state. Byte counts are bytes.
///
/// Two kinds of figures: the *state* (configuration, sequence number,
/// levels, files, memtable, value-store space) is read from what is on
/// disk and in memory now, and is the same after a reopen; the *counters*
/// (`io`, `user_bytes_*`, `flushes`, `compactions`, `trivial_moves`,
/// `compaction_*`, `write_*`) count what this
/// handle did since it was opened and are not persisted: a freshly opened
/// database (every `sepkv` command) starts them at 0.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DbStats {
    /// Index structure (state).
    pub index: String,
    /// Value layout (state).
    pub value_layout: String,
    /// Last sequence number assigned (state).
    pub last_sequence: u64,
    /// SSTables per level (state).
    pub levels: Vec<LevelStats>,
    /// Files in the directory by kind, with their sizes and the device
    /// space they occupy (state).
    pub files: Vec<FileGroupStats>,
    /// Bytes in the active memtable (state).
    pub memtable_bytes: u64,
    /// True while an immutable memtable waits for its flush (state).
    pub immutable_memtable: bool,
    /// Bytes read and written, by category (counter since open).
    pub io: IoStatsSnapshot,
    /// Key and value bytes written by users (counter since open).
    pub user_bytes_written: u64,
    /// Value bytes returned to users by `get` (counter since open).
    pub user_bytes_read: u64,
    /// Memtable flushes (counter since open).
    pub flushes: u64,
    /// Compactions that rewrote files (counter since open).
    pub compactions: u64,
    /// Compactions that only moved a file down a level (counter since
    /// open).
    pub trivial_moves: u64,
    /// Bytes read by compactions (counter since open).
    pub compaction_bytes_in: u64,
    /// Bytes written by compactions (counter since open).
    pub compaction_bytes_out: u64,
    /// Entries compaction dropped: shadowed versions, obsolete tombstones
    /// (counter since open).
    pub compaction_entries_dropped: u64,
    /// Records the compaction filter removed, in compactions and band GC
    /// (counter since open).
    pub filter_removed: u64,
    /// Index-specific figures, named by the index (for `lsm`: `sstables`,
    /// `sstable_bytes`); sizes and loads are state, tallies count since
    /// open.
    pub index_figures: BTreeMap<String, u64>,
    /// Time writers spent delayed or stopped (µs), including GC run by
    /// writes the value store refused for want of space (counter since
    /// open).
    pub write_stall_micros: u64,
    /// The part of `write_stall_micros` spent at the space target's hard
    /// bound, each write held for one GC step (or the index compaction in
    /// its place); the rest is the slowdown band's pauses (µs, counter
    /// since open).
    pub write_stop_micros: u64,
    /// GC steps run by writes the value store refused for want of space
    /// (`Options::value_capacity`; counter since open).
    pub write_gc_steps: u64,
    /// Times a write that found no room (or met the space target's stop)
    /// waited for a GC step already running instead of running one itself
    /// (counter since open).
    pub write_gc_waits: u64,
    /// Most GC steps a single write was held for since open — steps it ran
    /// itself plus steps already running that it waited to end; 0 when no
    /// write was held. A write that meets the space target's hard bound
    /// is held for one step at most, and one more when it also meets the
    /// bands' space bound (`flashkey` with a space target); only a
    /// write the value store refused (`value_capacity` reached) may be
    /// held for more, one step per retry until the room is made.
    pub write_gc_steps_max: u64,
    /// Wall-clock time of the longest value-store GC step since open, in
    /// microseconds, whether the GC thread, a write held at the space
    /// target or [`crate::Db::gc`] ran it: the longest a write held for
    /// one step can wait on the step itself. 0 before the first step.
    pub gc_step_micros_max: u64,
    /// Index lookups GC's relocation made again, after its own liveness
    /// check, because the memtables could no longer tell whether the keys
    /// were written since (counter since open; the liveness check's own
    /// lookups are the value store's `gc_lookups` figure).
    pub gc_relocation_lookups: u64,
    /// Index data blocks GC's liveness checks and its relocation's repeated
    /// lookups loaded — from the block cache, or read and checksummed in
    /// place through a table's mapping, or read from the file (counter
    /// since open). A GC step looks its records' keys up in one batch, in
    /// key order, so keys falling in one data block of a table share one
    /// load: with `lsm` and `lwc` indexes this is at most one per lookup
    /// that reaches a table, and fewer the more the step's keys share
    /// blocks. An index that reads no table blocks (`hash`) counts none.
    pub gc_index_blocks: u64,
    /// Commit groups written (counter since open): each is one value-store
    /// append and one WAL record for all of its members' batches.
    pub write_groups: u64,
    /// Commit groups that asked for a sync (counter since open): writes
    /// per synced group is how many synced writes share one round of
    /// fsyncs.
    pub write_synced_groups: u64,
    /// Writes (batches) that went through the commit queue (counter since
    /// open).
    pub write_batches: u64,
    /// Times such a write waited for readers (snapshots, iterators) older
    /// than a GC step to release the space the step retired (counter since
    /// open).
    pub write_waits_for_readers: u64,
    /// The space-amplification target in force (`Options::space_amp_target`;
    /// infinite for none or for the `inline` layout).
    pub space_amp_target: f64,
    /// Estimated space amplification the target is judged by: index and
    /// value-store bytes on disk ÷ live value bytes, garbage the index may
    /// still hide counted as garbage once its estimate is settled (state;
    /// see `db/space/policy.rs`).
    pub space_amp_estimate: f64,
    /// Value bytes the index may hide as garbage: overwritten pointers
    /// compaction has not dropped yet (state, estimate).
    pub space_hidden_garbage: u64,
    /// Writes slowed down by the target (counter since open).
    pub space_slowdowns: u64,
    /// Writes that met the target and ran GC first (counter since open).
    pub space_stops: u64,
    /// Index compactions run to find hidden garbage (counter since open).
    pub space_discoveries: u64,
    /// Writes let through at the target because GC kept finding nothing
    /// to do (counter since open).
    pub space_target_misses: u64,
    /// Snapshots alive (state).
    pub live_snapshots: usize,
    /// Value-store space estimates (state; `file_bytes` is allocated
    /// space).
    pub value_store: SpaceStats,
    /// Layout-specific value-store figures: positions and sizes (vLog head
    /// and tail, segment groups in use) are state; the GC tallies
    /// (`gc_runs`, `gc_bytes_read`, ...) count since open.
    pub value_store_figures: BTreeMap<String, u64>,
    /// Bytes the database directory occupies on the device (state; the sum
    /// of `files[..].allocated_bytes`).
    pub disk_bytes: u64,
    /// Background error that poisoned the database, if any.
    pub background_error: Option<String>,
}

impl Db {
    /// Checks every live SSTable (every block and checksum), the manifest
    /// and the current WAL. Faults are collected, not returned as errors.
    ///
    /// # Errors
    /// `Closed`.
    pub fn verify(&self) -> Result<VerifyReport> {
        self.check_open()?;
        Ok(self.inner.verify())
    }

    /// A report of the database's state and I/O.
    ///
    /// # Errors
    /// `Closed`.
    pub fn stats(&self) -> Result<DbStats> {
        self.check_open()?;
        Ok(self.inner.stats())
    }
}

impl DbInner {
    fn verify(&self) -> VerifyReport {
        let mut rep = VerifyReport::default();
        // The index: manifest, current WAL, tables.
        self.index.verify(&mut rep);
        // Value store.
        let (records, faults) = self.vstore.verify();
        rep.value_records = records;
        rep.faults.extend(faults);
        rep
    }

    /// The directory's files by kind (see [`FileGroupStats`]): `IDENTITY`
    /// and `LOCK` are `other`, the index names the kind of its files, and
    /// every other file is the value store's. The files of a subdirectory
    /// (FlashKey's key tree in `keys/`) count under the kind the index
    /// gives the subdirectory. Files that vanish while they are counted
    /// are skipped.
    fn file_groups(&self) -> Vec<FileGroupStats> {
        const KINDS: [&str; 5] = ["sstables", "wal", "manifest", "value store", "other"];
        let mut groups: Vec<FileGroupStats> = KINDS
            .iter()
            .map(|k| FileGroupStats {
                kind: k.to_string(),
                ..Default::default()
            })
            .collect();
        let (dir, fs) = (&self.shared.dir, &self.shared.fs);
        for name in fs.list(dir).unwrap_or_default() {
            let kind = if name == IDENTITY || name == LOCK {
                "other"
            } else {
                self.index.file_kind(&name).unwrap_or("value store")
            };
            let path = dir.join(&name);
            if fs.is_dir(&path) {
                for child in fs.list(&path).unwrap_or_default() {
                    add_file(&mut groups, kind, fs.as_ref(), &path.join(child));
                }
            } else {
                add_file(&mut groups, kind, fs.as_ref(), &path);
            }
        }
        groups
    }

    fn stats(&self) -> DbStats {
        let shared = &self.shared;
        let ix = self.index.stats();
        let c = &self.counters;
        let files = self.file_groups();
        let disk_bytes = files.iter().map(|g| g.allocated_bytes).sum();
        let view = self.space_view();
        let space = self.space.policy().decide(&view);
        let sc = &self.space.counters;
        DbStats {
            index: shared.opts.index_kind().to_string(),
            value_layout: shared.opts.layout().to_string(),
            last_sequence: shared.last_seq.load(Ordering::Acquire),
            levels: ix.levels,
            files,
            memtable_bytes: ix.memtable_bytes,
            immutable_memtable: ix.immutable_memtable,
            io: shared.stats.snapshot(),
            user_bytes_written: c.user_bytes_written.load(Ordering::Relaxed),
            user_bytes_read: c.user_bytes_read.get(),
            flushes: ix.flushes,
            compactions: ix.compactions,
            trivial_moves: ix.trivial_moves,
            compaction_bytes_in: ix.compaction_bytes_in,
            compaction_bytes_out: ix.compaction_bytes_out,
            compaction_entries_dropped: ix.compaction_entries_dropped,
            filter_removed: shared.filter_removed.load(Ordering::Relaxed),
            index_figures: ix
                .figures
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            write_stall_micros: shared.stall_micros.load(Ordering::Relaxed),
            write_stop_micros: c.write_stop_micros.load(Ordering::Relaxed),
            write_gc_steps: c.write_gc_steps.load(Ordering::Relaxed),
            write_gc_waits: c.write_gc_waits.load(Ordering::Relaxed),
            write_gc_steps_max: c.write_gc_steps_max.load(Ordering::Relaxed),
            gc_step_micros_max: c.gc_step_micros_max.load(Ordering::Relaxed),
            gc_relocation_lookups: c.gc_relocation_lookups.load(Ordering::Relaxed),
            gc_index_blocks: c.gc_index_blocks.load(Ordering::Relaxed),
            write_groups: self.commit.groups(),
            write_synced_groups: self.commit.synced_groups(),
            write_batches: self.commit.batches(),
            write_waits_for_readers: c.write_reader_waits.load(Ordering::Relaxed),
            space_amp_target: self.space.policy().target(),
            space_amp_estimate: space.amp,
            space_hidden_garbage: view.hidden_garbage,
            space_slowdowns: sc.slowdowns.load(Ordering::Relaxed),
            space_stops: sc.stops.load(Ordering::Relaxed),
            space_discoveries: sc.discoveries.load(Ordering::Relaxed),
            space_target_misses: sc.target_misses.load(Ordering::Relaxed),
            live_snapshots: shared.snapshots.lock().values().sum(),
            value_store: self.vstore.space(),
            value_store_figures: self
                .vstore
                .figures()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            disk_bytes,
            background_error: shared.bg_error.lock().as_ref().map(|e| e.to_string()),
        }
    }
}

/// Adds the file at `path` to `kind`'s group of `groups` (made if
/// missing); a file that vanished is skipped. The caller has told files
/// from directories (a subdirectory holds files only).
fn add_file(groups: &mut Vec<FileGroupStats>, kind: &str, fs: &dyn FileSystem, path: &Path) {
    let (Ok(size), Ok(allocated)) = (fs.file_size(path), fs.allocated_size(path)) else {
        return;
    };
    let g = match groups.iter().position(|g| g.kind == kind) {
        Some(i) => &mut groups[i],
        None => {
            groups.push(FileGroupStats {
                kind: kind.to_string(),
                ..Default::default()
            });
            groups.last_mut().expect("just pushed")
        }
    };
    g.files += 1;
    g.size_bytes += size;
    g.allocated_bytes += allocated;
}
