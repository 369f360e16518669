//! The bands as the hash index's log: [`IndexLog`] for [`BandStore`],
//! forwarding to the store's own methods.

use super::band::Entry;
use super::BandStore;
use crate::compaction_filter::CompactionFilter;
use crate::error::Result;
use crate::seqno::SeqNum;
use crate::vstore::index_log::{IndexLog, LoggedEntry, OwnedEntry, PrevLookup};
use crate::vstore::{LogEntry, ValuePointer};
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Weak};

impl IndexLog for BandStore {
    fn set_filter(&self, filter: Arc<dyn CompactionFilter>, removed: Arc<AtomicU64>) {
        BandStore::set_filter(self, filter, removed)
    }

    fn set_prev_lookup(&self, lookup: Weak<dyn PrevLookup>) {
        BandStore::set_prev_lookup(self, lookup)
    }

    fn log_linked(
        &self,
        entries: &[LogEntry<'_>],
        prevs: Option<&[Option<ValuePointer>]>,
    ) -> Result<Vec<ValuePointer>> {
        BandStore::log_linked(self, entries, prevs)
    }

    fn take_last_batch(&self) -> Vec<ValuePointer> {
        BandStore::take_last_batch(self)
    }

    fn read_entry(&self, ptr: &ValuePointer) -> Result<Option<OwnedEntry>> {
        BandStore::read_entry(self, ptr)
    }

    fn is_collected(&self, ptr: &ValuePointer) -> bool {
        BandStore::is_collected(self, ptr)
    }

    fn band_file(&self, id: u64) -> PathBuf {
        BandStore::band_file(self, id)
    }

    fn note_invalid(&self, ptr: &ValuePointer, seq: SeqNum) {
        BandStore::note_invalid(self, ptr, seq)
    }

    fn last_seq(&self) -> SeqNum {
        BandStore::last_seq(self)
    }

    fn replay_entries(
        &self,
        from: Option<(u64, u64)>,
        f: &mut dyn FnMut(ValuePointer, &LoggedEntry<'_>) -> Result<()>,
    ) -> Result<()> {
        let mut each = |addr: ValuePointer, e: &Entry<'_>| {
            f(
                addr,
                &LoggedEntry {
                    kind: e.kind,
                    key: e.key,
                    seq: e.seq,
                    prev: e.prev,
                    payload: e.payload,
                },
            )
        };
        match from {
            None => BandStore::replay_entries(self, &mut each),
            Some(pos) => BandStore::replay_entries_from(self, pos, &mut each),
        }
    }

    fn checkpoint_position(&self) -> Option<(u64, u64)> {
        BandStore::checkpoint_position(self)
    }

    fn key_checkpoint(&self) -> Option<(u64, u64)> {
        BandStore::key_checkpoint(self)
    }

    fn set_key_checkpoint(&self, pos: (u64, u64)) {
        BandStore::set_key_checkpoint(self, pos)
    }
}
