//! Reports that the index and the value store fill in and the facade hands
//! out: the figures of one index level ([`LevelStats`], part of
//! `Db::stats`) and what a verification pass checked and found
//! ([`VerifyReport`]). Plain data, below both sides, so that neither the
//! index nor the value store imports the facade.

use crate::error::Error;

/// Files and bytes of one level.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct LevelStats {
    /// Level number.
    pub level: usize,
    /// Number of SSTables.
    pub files: usize,
    /// Total bytes of the SSTables.
    pub bytes: u64,
    /// Segments of the level's tables: one per SSTable, the segment count
    /// of each DTable (index `lwc`, LWC-tree §3.3); `segments / files` is
    /// the mean number of segments per table.
    pub segments: u64,
}

/// Result of [`Db::verify`](crate::Db::verify).
#[derive(Debug, Default)]
pub struct VerifyReport {
    /// SSTables checked.
    pub tables: usize,
    /// Entries read from SSTables.
    pub entries: u64,
    /// Manifest edits checked.
    pub manifest_edits: usize,
    /// WAL records checked.
    pub wal_records: usize,
    /// Value-store records checked.
    pub value_records: u64,
    /// Every fault found, each naming file and offset.
    pub faults: Vec<Error>,
}
