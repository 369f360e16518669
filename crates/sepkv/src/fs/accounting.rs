//! I/O accounting: bytes read and written, by category.
//!
//! The engine attributes every read and write to an [`IoCategory`] at the
//! place it issues the I/O; [`IoStats`] holds relaxed counters, sharded by
//! thread so that readers on different cores do not trade a cache line on
//! every read, and is shared by all threads of one database.

use crate::counter::ShardedCounter;

/// What an I/O was done for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IoCategory {
    /// The write-ahead log (appends, and replay on open).
    Wal,
    /// Manifest, `CURRENT` and the identity file.
    Manifest,
    /// SSTables written by memtable flushes.
    Flush,
    /// SSTables read and written by compaction.
    Compaction,
    /// SSTable reads serving user gets and scans.
    UserRead,
    /// Value-store appends and reads serving users.
    ValueStore,
    /// Value-store garbage collection.
    Gc,
}

impl IoCategory {
    /// Every category, in reporting order.
    pub const ALL: [IoCategory; 7] = [
        IoCategory::Wal,
        IoCategory::Manifest,
        IoCategory::Flush,
        IoCategory::Compaction,
        IoCategory::UserRead,
        IoCategory::ValueStore,
        IoCategory::Gc,
    ];

    fn idx(self) -> usize {
        self as usize
    }

    /// Lower-case name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            IoCategory::Wal => "wal",
            IoCategory::Manifest => "manifest",
            IoCategory::Flush => "flush",
            IoCategory::Compaction => "compaction",
            IoCategory::UserRead => "user_read",
            IoCategory::ValueStore => "value_store",
            IoCategory::Gc => "gc",
        }
    }
}

/// Counters of bytes read and written, by category.
#[derive(Debug, Default)]
pub struct IoStats {
    read: [ShardedCounter; 7],
    written: [ShardedCounter; 7],
}

/// A point-in-time copy of [`IoStats`] (bytes).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct IoStatsSnapshot {
    /// Bytes read, by category, in [`IoCategory::ALL`] order.
    pub read: Vec<(IoCategory, u64)>,
    /// Bytes written, by category, in [`IoCategory::ALL`] order.
    pub written: Vec<(IoCategory, u64)>,
}

impl IoStatsSnapshot {
    /// Total bytes read.
    pub fn total_read(&self) -> u64 {
        self.read.iter().map(|x| x.1).sum()
    }
    /// Total bytes written.
    pub fn total_written(&self) -> u64 {
        self.written.iter().map(|x| x.1).sum()
    }
    /// Bytes written in one category.
    pub fn written_in(&self, cat: IoCategory) -> u64 {
        self.written.iter().find(|x| x.0 == cat).map_or(0, |x| x.1)
    }
    /// Bytes read in one category.
    pub fn read_in(&self, cat: IoCategory) -> u64 {
        self.read.iter().find(|x| x.0 == cat).map_or(0, |x| x.1)
    }
}

impl IoStats {
    /// Counts `n` bytes read for `cat`.
    pub fn add_read(&self, cat: IoCategory, n: u64) {
        self.read[cat.idx()].add(n);
    }
    /// Counts `n` bytes written for `cat`.
    pub fn add_written(&self, cat: IoCategory, n: u64) {
        self.written[cat.idx()].add(n);
    }
    /// Copies the counters.
    pub fn snapshot(&self) -> IoStatsSnapshot {
        IoStatsSnapshot {
            read: IoCategory::ALL
                .iter()
                .map(|&c| (c, self.read[c.idx()].get()))
                .collect(),
            written: IoCategory::ALL
                .iter()
                .map(|&c| (c, self.written[c.idx()].get()))
                .collect(),
        }
    }
}
