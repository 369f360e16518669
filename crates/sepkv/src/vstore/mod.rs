//! Value stores: where separated values live.
//!
//! The index maps each key either to an inline value or to a
//! [`ValuePointer`] into a [`ValueStore`]. Each layout of `DESIGN.md`
//! (`vlog`, `hashkv`, `trie`, `bands`) is one implementation of the trait;
//! [`InlineStore`] is the layout without separation, the case "every value is
//! small".
//!
//! Contracts:
//! - **Durability ordering**: a value is durable before any pointer to it;
//!   the engine calls [`ValueStore::sync`] before it syncs the index records
//!   that point into the store.
//! - **GC ↔ index**: a relocation is installed only through
//!   [`IndexRelocator::compare_and_set`]; space is freed only after the
//!   relocated values and the index update are durable.
//! - Reads verify the record's checksum and that the stored key equals the
//!   looked-up key; a mismatch is `Corruption`, never a wrong value.
//!
//! Implementations are shared between threads (`Send + Sync`).

mod inline;
mod pointer;

pub use inline::InlineStore;
pub use pointer::ValuePointer;

use crate::error::Result;
use crate::index::key::SeqNum;

/// One value handed to [`ValueStore::append`].
#[derive(Debug, Clone, Copy)]
pub struct ValueRecord<'a> {
    /// The user key.
    pub key: &'a [u8],
    /// Sequence number of the write.
    pub seq: SeqNum,
    /// The value.
    pub value: &'a [u8],
}

/// Space figures of a value store (bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SpaceStats {
    /// Bytes of records still referenced by the index (estimate).
    pub live_bytes: u64,
    /// Bytes of records known to be garbage (estimate).
    pub garbage_bytes: u64,
    /// Bytes the store's files occupy.
    pub file_bytes: u64,
}

/// What one garbage-collection step did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct GcOutcome {
    /// Bytes scanned.
    pub bytes_read: u64,
    /// Bytes of live records rewritten.
    pub bytes_rewritten: u64,
    /// Bytes of space released.
    pub bytes_freed: u64,
    /// False when there was nothing to collect.
    pub did_work: bool,
}

/// The index as GC sees it: liveness queries (WiscKey §3.3.2, FlashKey).
pub trait IndexReader: Send + Sync {
    /// The pointer the index currently holds for `key`, if the key maps to a
    /// separated value.
    fn current_pointer(&self, key: &[u8]) -> Result<Option<ValuePointer>>;
}

/// The index as GC writes it: atomic relocation.
pub trait IndexRelocator: Send + Sync {
    /// Installs `new` for `key` only if the key still maps to `old`; returns
    /// whether it did. A user write that raced the GC always wins.
    fn compare_and_set(&self, key: &[u8], old: &ValuePointer, new: &ValuePointer) -> Result<bool>;
}

/// A value layout.
pub trait ValueStore: Send + Sync {
    /// Layout name (`inline`, `vlog`, …).
    fn name(&self) -> &'static str;

    /// True when a value of `len` bytes is separated into this store rather
    /// than kept inline in the index.
    fn separates(&self, len: usize) -> bool;

    /// Appends `records` in order and returns one pointer per record. The
    /// records survive a process crash once this returns; they are durable
    /// after [`ValueStore::sync`].
    ///
    /// # Errors
    /// `Io` on write failure; the store is then poisoned.
    fn append(&self, records: &[ValueRecord<'_>]) -> Result<Vec<ValuePointer>>;

    /// Makes every appended record durable.
    fn sync(&self) -> Result<()>;

    /// Reads the value `ptr` points at, checking the checksum and that the
    /// record belongs to `key`.
    ///
    /// # Errors
    /// `Corruption` with file and offset on a checksum or key mismatch.
    fn read(&self, key: &[u8], ptr: &ValuePointer) -> Result<Vec<u8>>;

    /// Reads many values for a scan, in the layout's own way (prefetch,
    /// read-ahead, span reads). The default reads them one by one.
    fn read_many(&self, reqs: &[(&[u8], ValuePointer)]) -> Result<Vec<Vec<u8>>> {
        reqs.iter().map(|(k, p)| self.read(k, p)).collect()
    }

    /// Space figures.
    fn space(&self) -> SpaceStats;

    /// Runs one garbage-collection step.
    fn gc_step(&self, index: &dyn IndexReader, relocator: &dyn IndexRelocator)
        -> Result<GcOutcome>;
}
