//! Hotness awareness (HashKV §3.4): the cold data log and tags.
//!
//! GC classifies the pairs of a segment group as the paper does: a pair
//! updated at least once since its insert is **hot** and its latest version
//! goes back to the group; a pair written once is **cold**: its value moves
//! to the **cold data log** and the group keeps only a **tag** (key and
//! metadata, the value replaced by the cold-log pointer). A later update of
//! the key lands after the tag in the group, so the next GC sees two
//! records and treats the pair as hot again, without asking the index.
//! A hot pair stays hot at later GCs although its group then holds only
//! the copy: the group's `hot_seq` (the highest sequence number GC copied
//! back as hot, kept in the segment table) marks a value alone in its group
//! and at most that old as one an earlier GC kept hot (a cold value kept
//! in its group for lack of cold-log room can fall under it too). This
//! follows §3.4's wording; classifying afresh at every GC — hot
//! only when written twice *since the last GC* — sends a pair that is
//! updated now and then, but less often than its group is collected, to
//! the cold log again and again, where every update leaves a dead value
//! that only the cold log's GC reclaims.
//!
//! The cold data log is the WiscKey value log ([`VlogStore`]) in the same
//! directory (`NNNNNN.vlog`), collected "as in vLog" (§3.4): its GC checks
//! liveness with index lookups, re-appends live values at its head and
//! relocates by compare-and-set. Its persisted tail travels inside the
//! HashKV segment table. Cold pointers carry `aux = 1`; everything else of
//! the pointer is the value log's `(file, offset, length)`.
//!
//! A tag is written only after the relocation to the cold log was
//! installed, so a tag never hides an older record the index still uses.

use crate::error::{Error, Result};
use crate::fs::{FileSystem, IoStats};
use crate::seqno::SeqNum;
use crate::vstore::vlog::{VlogOptions, VlogStore};
use crate::vstore::{
    GcOutcome, IndexReader, IndexRelocator, Relocation, SpaceStats, ValuePointer, ValueRecord,
    ValueStore,
};
use std::path::Path;
use std::sync::Arc;

/// `aux` of a pointer into the cold data log.
pub const COLD_AUX: u64 = 1;

/// True for a pointer into the cold data log.
pub fn is_cold(p: &ValuePointer) -> bool {
    p.aux == COLD_AUX
}

fn to_vlog(p: &ValuePointer) -> ValuePointer {
    ValuePointer { aux: 0, ..*p }
}

fn from_vlog(p: &ValuePointer) -> ValuePointer {
    ValuePointer {
        aux: COLD_AUX,
        ..*p
    }
}

/// The cold data log.
pub struct ColdLog {
    log: VlogStore,
}

/// The index as the cold log's GC sees it: only cold pointers are its own.
struct ColdIndex<'a>(&'a dyn IndexReader);

impl IndexReader for ColdIndex<'_> {
    fn current_pointer(&self, key: &[u8]) -> Result<Option<ValuePointer>> {
        Ok(self
            .0
            .current_pointer(key)?
            .filter(is_cold)
            .map(|p| to_vlog(&p)))
    }

    fn points_at_many(&self, probes: &[(&[u8], ValuePointer)]) -> Result<Vec<bool>> {
        // The cold log's records are cold pointers in the index.
        let cold: Vec<(&[u8], ValuePointer)> =
            probes.iter().map(|(k, p)| (*k, from_vlog(p))).collect();
        self.0.points_at_many(&cold)
    }

    fn oldest_visible_seq(&self) -> SeqNum {
        self.0.oldest_visible_seq()
    }

    fn last_sequence(&self) -> SeqNum {
        self.0.last_sequence()
    }

    fn wait_in_flight_writes(&self) -> Result<()> {
        self.0.wait_in_flight_writes()
    }
}

/// Callback persisting the cold log's state inside the segment table.
pub type PersistCold<'a> = &'a (dyn Fn(&[u8]) -> Result<()> + Sync);

struct ColdRelocator<'a> {
    inner: &'a dyn IndexRelocator,
    persist: PersistCold<'a>,
}

impl ColdRelocator<'_> {
    /// `moves` with the cold log's pointers as the index holds them.
    fn to_index(moves: &[Relocation]) -> Vec<Relocation> {
        moves
            .iter()
            .map(|m| Relocation {
                key: m.key.clone(),
                old: from_vlog(&m.old),
                new: from_vlog(&m.new),
            })
            .collect()
    }
}

impl IndexRelocator for ColdRelocator<'_> {
    fn relocate(&self, moves: &[Relocation]) -> Result<(Vec<bool>, SeqNum)> {
        self.inner.relocate(&Self::to_index(moves))
    }

    fn relocate_judged(
        &self,
        moves: &[Relocation],
        judged_at: SeqNum,
    ) -> Result<(Vec<bool>, SeqNum)> {
        self.inner
            .relocate_judged(&Self::to_index(moves), judged_at)
    }

    fn persist_state(&self, state: &[u8]) -> Result<()> {
        (self.persist)(state)
    }

    fn make_durable(&self, seq: SeqNum) -> Result<()> {
        self.inner.make_durable(seq)
    }
}

impl ColdLog {
    /// Opens the cold data log in `dir` with its persisted state.
    ///
    /// # Errors
    /// As [`VlogStore::open`].
    pub fn open(
        dir: &Path,
        fs: Arc<dyn FileSystem>,
        stats: Arc<IoStats>,
        file_size: u64,
        gc_chunk_size: u64,
        legacy_below: Option<u64>,
        state: Option<&[u8]>,
    ) -> Result<ColdLog> {
        let log = VlogStore::open(
            dir,
            fs,
            stats,
            VlogOptions {
                legacy_below,
                ..VlogOptions::new(file_size, gc_chunk_size)
            },
            state,
        )?;
        Ok(ColdLog { log })
    }

    /// Files numbered below this hold the format-1 record codec
    /// ([`VlogStore::legacy_below`]).
    pub fn legacy_below(&self) -> u64 {
        self.log.legacy_below()
    }

    /// Appends cold values; returns cold pointers.
    ///
    /// # Errors
    /// `Io`.
    pub fn append(&self, records: &[ValueRecord<'_>]) -> Result<Vec<ValuePointer>> {
        Ok(self.log.append(records)?.iter().map(from_vlog).collect())
    }

    /// Makes the cold log durable.
    ///
    /// # Errors
    /// `Io`.
    pub fn sync(&self) -> Result<()> {
        self.log.sync()
    }

    /// Reads a cold value.
    ///
    /// # Errors
    /// As [`ValueStore::read`].
    pub fn read(&self, key: &[u8], ptr: &ValuePointer) -> Result<Option<Vec<u8>>> {
        self.log.read(key, &to_vlog(ptr))
    }

    /// See [`ValueStore::contains`].
    pub fn contains(&self, ptr: &ValuePointer) -> bool {
        self.log.contains(&to_vlog(ptr))
    }

    /// See [`ValueStore::note_garbage`].
    pub fn note_garbage(&self, ptr: &ValuePointer) {
        self.log.note_garbage(&to_vlog(ptr));
    }

    /// Notes a cold value whose key has a newer version as garbage
    /// inferred without the index ([`VlogStore::hint_garbage`]).
    pub fn hint_garbage(&self, ptr: &ValuePointer) {
        self.log.hint_garbage(&to_vlog(ptr));
    }

    /// The inferred garbage by region, as [`ColdLog::garbage_entries`].
    pub fn hint_entries(&self) -> Vec<(u64, u64)> {
        self.log.hint_entries()
    }

    /// Restores what [`ColdLog::hint_entries`] returned.
    pub fn restore_hint_entries(&self, entries: &[(u64, u64)]) {
        self.log.restore_hint_entries(entries)
    }

    /// See [`VlogStore::tail_chunk_garbage_ratio`].
    pub fn tail_chunk_garbage_ratio(&self) -> f64 {
        self.log.tail_chunk_garbage_ratio()
    }

    /// `(file, garbage bytes)` of the cold log's files.
    pub fn garbage_entries(&self) -> Vec<(u64, u64)> {
        self.log.garbage_entries()
    }

    /// Restores what [`ColdLog::garbage_entries`] returned.
    pub fn restore_garbage_entries(&self, entries: &[(u64, u64)]) {
        self.log.restore_garbage_entries(entries)
    }

    /// See [`ValueStore::garbage_found`].
    pub fn garbage_found(&self) -> u64 {
        self.log.garbage_found()
    }

    /// Space figures of the cold log.
    pub fn space(&self) -> SpaceStats {
        self.log.space()
    }

    /// Checks every cold record.
    pub fn verify(&self) -> (u64, Vec<Error>) {
        self.log.verify()
    }

    /// The value log's figures.
    pub fn figures(&self) -> Vec<(&'static str, u64)> {
        self.log.figures()
    }

    /// One GC step of the cold log (WiscKey's, with index lookups).
    ///
    /// # Errors
    /// As [`ValueStore::gc_step`].
    pub fn gc_step(
        &self,
        index: &dyn IndexReader,
        relocator: &dyn IndexRelocator,
        persist: PersistCold<'_>,
    ) -> Result<GcOutcome> {
        self.log.gc_step(
            &ColdIndex(index),
            &ColdRelocator {
                inner: relocator,
                persist,
            },
        )
    }
}
