//! The value store as an index's log: what FlashKey's hash index
//! (`index/hash/`) takes from the bands (`vstore/bands/`), in one place.
//!
//! In FlashKey (§V-A2, §V-B4) the logical bands are the only log: every put
//! and delete token of a write batch is appended to them, the hash index
//! keeps for each key the address of its newest entry, and recovery
//! replays the bands after the index's last checkpoint. The index therefore
//! needs more of its value store than the [`ValueStore`](super::ValueStore)
//! trait gives every index:
//!
//! - [`BandStore`]: the store itself, opened by the index (not by the
//!   facade) with [`BandOptions`], and asked to log linked entries
//!   (`log_linked`), read an entry back whole ([`OwnedEntry`]), note
//!   invalidated bytes (`note_invalid`), replay entries after a checkpoint
//!   (`replay_entries`) and move its own and the key index's checkpoints;
//! - [`PersistedState`]: the bands' part of the index's checkpoint (the
//!   invalidity table), which the index stores in its meta file and edits;
//! - [`PrevLookup`]: the way back, by which the bands ask the index for a
//!   key's current address while an entry is written, to link it as the
//!   previous version;
//! - [`AUX_TOMBSTONE`]: the bit of [`ValuePointer::aux`] that marks an
//!   address of a delete token, which both sides read.
//!
//! The index names only this module; the bands' file format, GC and open
//! band stay private to `vstore/bands/`.

use super::ValuePointer;
use crate::format::value_record::Kind;
use crate::seqno::SeqNum;

pub(crate) use super::bands::PersistedState;
pub use super::bands::{BandOptions, BandStore};

/// [`ValuePointer::aux`] bit: the pointer addresses a delete token (an
/// entry of kind `Deletion` in the bands), not a value. Frozen: format
/// version 1 (the hash index's meta file stores addresses with it).
pub const AUX_TOMBSTONE: u64 = 1;

/// Where an index tells the bands the current address of a key (the
/// previous version of the entry being written). Called with the writer's
/// lock held, before the entry is appended.
pub trait PrevLookup: Send + Sync {
    /// The address the index holds for `key`, if any.
    fn prev(&self, key: &[u8]) -> Option<ValuePointer>;
}

/// A band entry read back for an index (see [`BandStore::read_entry`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedEntry {
    /// What the entry is.
    pub kind: Kind,
    /// The user key.
    pub key: Vec<u8>,
    /// Sequence number of the write.
    pub seq: SeqNum,
    /// Address of the key's previous version.
    pub prev: Option<ValuePointer>,
    /// Value, encoded pointer, or empty.
    pub payload: Vec<u8>,
}
