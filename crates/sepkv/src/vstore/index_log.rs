//! The value store as an index's log: what FlashKey's hash index
//! (`index/hash/`) takes from the bands (`vstore/bands/`), in one place.
//!
//! In FlashKey (§V-A2, §V-B4) the logical bands are the only log: every put
//! and delete token of a write batch is appended to them, the hash index
//! keeps for each key the address of its newest entry, and recovery
//! replays the bands after the index's last checkpoint. The index therefore
//! needs more of its value store than the [`ValueStore`] trait gives every
//! index; this module names all of it:
//!
//! - [`IndexLog`]: the trait the index holds its log by
//!   (`Arc<dyn IndexLog>`), a [`ValueStore`] that also logs linked entries
//!   ([`IndexLog::log_linked`]), reads an entry back whole
//!   ([`OwnedEntry`]), notes invalidated bytes, replays entries
//!   ([`LoggedEntry`]) and keeps the key index's checkpoint;
//! - [`open_bands`] with [`BandOptions`]: the bands, opened by the index
//!   (not by the facade), as an [`IndexLog`];
//! - [`state_edit`] and [`apply_state_edit`]: the bands' part of the
//!   index's checkpoint (the invalidity table, from
//!   [`ValueStore::state_with_checkpoint`]) as edits the index appends to
//!   its meta file;
//! - [`PrevLookup`]: the way back, by which the bands ask the index for a
//!   key's current address while an entry is written, to link it as the
//!   previous version;
//! - [`AUX_TOMBSTONE`]: the bit of [`ValuePointer::aux`] that marks an
//!   address of a delete token, which both sides read.
//!
//! The index names only this module; the bands' file format, GC and open
//! band stay private to `vstore/bands/`.
//!
//! The index calls the log through `dyn IndexLog`: one indirect call per
//! band read, no allocation for the call itself, against a read that goes
//! to a file — while a generic parameter would carry the bands' type
//! through the index, FlashKey's facade and the key tree's log. Every
//! method is safe to call from several threads at once.

use super::{LogEntry, ValuePointer, ValueStore};
use crate::compaction_filter::CompactionFilter;
use crate::error::Result;
use crate::format::value_record::Kind;
use crate::fs::{FileSystem, IoStats};
use crate::seqno::SeqNum;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Weak};

pub use super::bands::BandOptions;

/// A [`ValueStore`] that is also the index's only log (FlashKey §V-A2):
/// what the hash index needs of the bands beyond every value store's
/// methods. Implemented by the bands; positions are `(band, offset)`
/// pairs as [`ValueStore::log_position`] returns them.
pub trait IndexLog: ValueStore {
    /// Sets the compaction filter GC asks about the live records it
    /// relocates (the hash index has no compaction that could), and the
    /// counter its removals add to (FlashKey §V-B5). Once; later calls are
    /// ignored.
    fn set_filter(&self, filter: Arc<dyn CompactionFilter>, removed: Arc<AtomicU64>);

    /// Lets the index tell the log each key's current address, which the
    /// next entry of the key records as its previous version and which the
    /// invalidity table charges (§V-A4). Held weakly: the index owns the
    /// log, not the other way round.
    fn set_prev_lookup(&self, lookup: Weak<dyn PrevLookup>);

    /// Appends a batch and returns the address of every entry, delete
    /// tokens and relocations included (§V-A2). `prevs` gives each entry's
    /// previous version (one per entry); `None` asks the [`PrevLookup`].
    /// Entries of the same key earlier in the batch take precedence either
    /// way.
    ///
    /// # Errors
    /// `ValueStoreFull` (nothing written) when a batch with user values
    /// would pass the capacity; `Io` (the log is then poisoned).
    fn log_linked(
        &self,
        entries: &[LogEntry<'_>],
        prevs: Option<&[Option<ValuePointer>]>,
    ) -> Result<Vec<ValuePointer>>;

    /// The addresses of every entry of the last batch logged through
    /// [`ValueStore::log_batch`] or [`IndexLog::log_linked`] (delete tokens
    /// and relocations included), taken once: a second call returns an
    /// empty vector. The index calls it with the writer's lock held, which
    /// orders a batch's logging before its index update.
    fn take_last_batch(&self) -> Vec<ValuePointer>;

    /// Reads the entry at `ptr` whatever its kind: to verify a fingerprint
    /// match or walk back to an older version (§V-B1, §V-B2). `Ok(None)`
    /// when the address lies outside the log (collected, or lost in a
    /// crash).
    ///
    /// # Errors
    /// `Corruption` with band file and offset when the bytes there are not
    /// an intact entry of the pointer's length; `Io`.
    fn read_entry(&self, ptr: &ValuePointer) -> Result<Option<OwnedEntry>>;

    /// True when `ptr` lies in a band GC has collected and deleted.
    fn is_collected(&self, ptr: &ValuePointer) -> bool;

    /// Path of band `id`, for the index's error messages.
    fn band_file(&self, id: u64) -> PathBuf;

    /// Charges the entry at `ptr` to its band's invalid bytes, made invalid
    /// by the write with sequence number `seq` (§V-A4).
    fn note_invalid(&self, ptr: &ValuePointer, seq: SeqNum);

    /// Sequence number of the last appended entry (0 for an empty log).
    fn last_seq(&self) -> SeqNum;

    /// Replays every complete batch from `from` (`None`: the last committed
    /// checkpoint, [`IndexLog::checkpoint_position`]) in band order,
    /// calling `f(address, entry)` for every entry, GC copies included
    /// (§V-B4, §V-B6). For an index that rebuilds itself from the log.
    ///
    /// # Errors
    /// `Corruption` with band file and offset; `Io`; whatever `f` returns.
    fn replay_entries(
        &self,
        from: Option<(u64, u64)>,
        f: &mut dyn FnMut(ValuePointer, &LoggedEntry<'_>) -> Result<()>,
    ) -> Result<()>;

    /// The replay position of the last committed checkpoint of the hash
    /// table (§V-B6), if any.
    fn checkpoint_position(&self) -> Option<(u64, u64)>;

    /// The key index's replay position (§V-A3), if known.
    fn key_checkpoint(&self) -> Option<(u64, u64)>;

    /// Records the key index's durable replay position (§V-A3); GC keeps
    /// the bands after the lower of the two checkpoints. Monotonic: an
    /// older position is ignored.
    fn set_key_checkpoint(&self, pos: (u64, u64));
}

/// Opens the bands in `dir` as the index's log, given the state last
/// persisted (the bytes [`ValueStore::state_with_checkpoint`] returned;
/// `None` for a new database). Reads and writes go through `fs` and are
/// counted in `stats`.
///
/// # Errors
/// `Corruption` for an unreadable state or a band whose header is damaged;
/// `Io`.
pub fn open_bands(
    dir: &Path,
    fs: Arc<dyn FileSystem>,
    stats: Arc<IoStats>,
    opts: BandOptions,
    state: Option<&[u8]>,
) -> Result<Arc<dyn IndexLog>> {
    Ok(Arc::new(super::bands::BandStore::open(
        dir, fs, stats, opts, state,
    )?))
}

/// The edit that turns the bands' persisted state `old` (empty: none yet)
/// into `new`, both as [`ValueStore::state_with_checkpoint`] encodes them:
/// only what changed, for the index's edit log. `None` when either does not
/// decode (the index then writes the whole state).
pub fn state_edit(old: &[u8], new: &[u8]) -> Option<Vec<u8>> {
    super::bands::PersistedState::edit(old, new)
}

/// Applies an edit made by [`state_edit`] to the encoded state `state`
/// (empty: none yet). `None` when either is damaged.
pub fn apply_state_edit(state: &[u8], edit: &[u8]) -> Option<Vec<u8>> {
    super::bands::PersistedState::apply_edit(state, edit)
}

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

/// A band entry read back for an index (see [`IndexLog::read_entry`]).
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

/// An entry met while replaying the log ([`IndexLog::replay_entries`]),
/// borrowed from the band being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoggedEntry<'a> {
    /// What the entry is.
    pub kind: Kind,
    /// The user key.
    pub key: &'a [u8],
    /// Sequence number of the write.
    pub seq: SeqNum,
    /// Address of the key's previous version (its `aux` is 0: the kind of
    /// the previous entry is known only by reading it).
    pub prev: Option<ValuePointer>,
    /// Value, encoded pointer, or empty.
    pub payload: &'a [u8],
}
