//! The drop rule every compaction applies to its sorted stream of entries
//! (leveled merges, the LWC-tree's lightweight compactions and in-place
//! rewrites), and where the [`CompactionFilter`] is asked.
//!
//! Per user key, entries arrive newest first. A version is dropped when a
//! newer version of the key is visible to every reader (its sequence
//! number is at most the oldest snapshot's); a tombstone is dropped when no
//! reader needs it and no level below the output can hold the key. The
//! newest version a stream meets, when it is a put no registered reader can
//! see, is offered to the filter; a `Remove` turns it into a tombstone at
//! its own sequence number, which the tombstone rule then keeps or drops —
//! so a removal in an upper level hides every older version below, and at
//! the bottom (or where nothing lies below) leaves nothing. A dropped or
//! removed value pointer is reported to the value store as garbage.

use crate::compaction_filter::{CompactionFilter, FilterDecision, LazyValue};
use crate::index::key::{internal_key, parse_internal_key, SeqNum, ValueType, MAX_SEQ};
use crate::index::version::Version;
use crate::vstore::{ValuePointer, ValueStore};

use super::CompactionStats;

/// What becomes of one entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Written as it is.
    Keep,
    /// Left out.
    Drop,
    /// Written as [`DropRule::replacement`] with an empty value: a
    /// tombstone the filter's removal left in the entry's place.
    Replace,
}

/// The filter a compaction asks, and which records it may ask about.
#[derive(Clone, Copy)]
pub struct FilterCtx<'a> {
    /// The filter.
    pub filter: &'a dyn CompactionFilter,
    /// The newest sequence number a registered reader (snapshot, iterator)
    /// reads at when the compaction starts (0 when there is none): records
    /// at or below it may be read and are not offered.
    pub newest_reader: SeqNum,
}

/// The drop rule over one sorted stream (see the module docs).
pub(crate) struct DropRule<'a> {
    version: &'a Version,
    snapshot: SeqNum,
    /// Tombstones are kept while a level `> below` may hold the key.
    below: usize,
    vstore: &'a dyn ValueStore,
    filter: Option<FilterCtx<'a>>,
    current: Vec<u8>,
    has_current: bool,
    last_seq: SeqNum,
    replacement: Vec<u8>,
    tombstones: u64,
    dropped: u64,
    removed: u64,
}

impl<'a> DropRule<'a> {
    /// The rule for a compaction whose output goes to level `below`, as of
    /// `snapshot` (the oldest sequence number a reader may use).
    pub(crate) fn new(
        version: &'a Version,
        snapshot: SeqNum,
        below: usize,
        vstore: &'a dyn ValueStore,
        filter: Option<FilterCtx<'a>>,
    ) -> Self {
        DropRule {
            version,
            snapshot,
            below,
            vstore,
            filter,
            current: Vec::new(),
            has_current: false,
            last_seq: MAX_SEQ,
            replacement: Vec::new(),
            tombstones: 0,
            dropped: 0,
            removed: 0,
        }
    }

    /// Adds `seen` entries read, and what this rule dropped and removed, to
    /// `st`.
    pub(crate) fn tally(&self, seen: u64, st: &mut CompactionStats) {
        st.entries_in += seen;
        st.dropped += self.dropped;
        st.tombstones_dropped += self.tombstones;
        st.filter_removed += self.removed;
    }

    /// The tombstone to write for the last [`Verdict::Replace`].
    pub(crate) fn replacement(&self) -> &[u8] {
        &self.replacement
    }

    /// The verdict on the entry `(ikey, value)`; `None` when the key does
    /// not parse. `may_filter` is false for a stream whose newest entries
    /// another rule already offered to the filter.
    pub(crate) fn verdict(
        &mut self,
        ikey: &[u8],
        value: &[u8],
        may_filter: bool,
    ) -> Option<Verdict> {
        let p = parse_internal_key(ikey)?;
        let newest = !self.has_current || p.user_key != self.current.as_slice();
        if newest {
            self.current.clear();
            self.current.extend_from_slice(p.user_key);
            self.has_current = true;
            self.last_seq = MAX_SEQ;
        }
        let mut vtype = p.vtype;
        let mut removed = false;
        if let Some(f) = self.filter.filter(|f| {
            newest && may_filter && p.vtype != ValueType::Deletion && p.seq > f.newest_reader
        }) {
            let lazy = match p.vtype {
                ValueType::Pointer => ValuePointer::decode(value)
                    .map(|ptr| LazyValue::separated(p.user_key, ptr, self.vstore)),
                _ => Some(LazyValue::here(p.user_key, value)),
            };
            // An undecodable pointer is left for reads to report.
            if let Some(lazy) = lazy {
                if f.filter.filter(p.user_key, &lazy) == FilterDecision::Remove {
                    removed = true;
                    vtype = ValueType::Deletion;
                    self.removed += 1;
                    if let Some(ptr) =
                        ValuePointer::decode(value).filter(|_| p.vtype == ValueType::Pointer)
                    {
                        self.vstore.note_garbage(&ptr);
                    }
                    // GC that judges liveness from the value store alone
                    // (HashKV) must look this key up again.
                    if self.vstore.tracks_unseparated() {
                        self.vstore.note_unseparated(p.user_key, p.seq);
                    }
                }
            }
        }
        let drop = if self.last_seq <= self.snapshot {
            // A newer version of this key is visible to every reader.
            true
        } else {
            vtype == ValueType::Deletion
                && p.seq <= self.snapshot
                && !self.version.key_may_exist_below(self.below, p.user_key)
        };
        self.last_seq = p.seq;
        if drop {
            self.dropped += 1;
            if p.vtype == ValueType::Deletion {
                self.tombstones += 1;
            }
            if p.vtype == ValueType::Pointer && !removed {
                if let Some(ptr) = ValuePointer::decode(value) {
                    self.vstore.note_garbage(&ptr);
                }
            }
            return Some(Verdict::Drop);
        }
        if removed {
            self.replacement = internal_key(p.user_key, p.seq, ValueType::Deletion);
            return Some(Verdict::Replace);
        }
        Some(Verdict::Keep)
    }
}
