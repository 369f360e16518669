//! [`HashKvOptions`]: the knobs of the HashKV value store, taken from
//! the database's [`Options`].

use super::*;

/// Knobs of the HashKV value store (from [`Options`]).
#[derive(Debug, Clone)]
pub struct HashKvOptions {
    /// Values shorter than this stay inline in the index (bytes).
    pub value_threshold: usize,
    /// Total value-store capacity (bytes): main segments plus reserved space.
    pub capacity: u64,
    /// Main segment size (bytes).
    pub main_segment_size: u64,
    /// Log segment size (bytes).
    pub log_segment_size: u64,
    /// Share of the capacity reserved for log segments.
    pub reserved_ratio: f64,
    /// Write cache size (bytes); 0 flushes within every append.
    pub write_cache_size: usize,
    /// Hot/cold separation in GC.
    pub hotness: bool,
    /// The write journal (segment allocations of writes and GC copies).
    pub journal: bool,
    /// The journal carries the values too, and the write cache batches
    /// their segment writes (only with `journal`).
    pub journal_values: bool,
    /// Write-journal size at which it is checkpointed and recycled (bytes).
    pub journal_size: u64,
    /// Cold data log file size (bytes).
    pub cold_file_size: u64,
    /// Bytes the cold data log's GC reads per step.
    pub cold_gc_chunk_size: u64,
    /// Group bytes a GC step collects: it takes groups, most written
    /// first, until the bytes written to them reach this, and at least one
    /// group (the engine's `gc_chunk_size`, 4 MiB by default, so that a
    /// writer held for one step waits about as long as for a value-log
    /// step).
    pub gc_step_bytes: u64,
    /// Known-garbage ratio of the cold data log at which a GC step collects
    /// it (the engine's `gc_garbage_ratio`; 0.5 when that is 0).
    pub cold_gc_ratio: f64,
    /// Segments numbered below this hold the format-1 record codec; 0
    /// when there are none (a database created in format 2). `None` opens
    /// the store of a format-1 database: every segment allocated so far is
    /// in the older codec and receives no more appends, and
    /// [`StoreCore::legacy_below`] reports the number the store chose
    /// (for the caller to record durably before the first append).
    pub legacy_below: Option<u64>,
    /// As `legacy_below`, for the cold data log's files
    /// ([`crate::vstore::vlog::VlogOptions::legacy_below`]).
    pub cold_legacy_below: Option<u64>,
}

impl HashKvOptions {
    /// The store's knobs from the database options.
    pub fn from_options(o: &Options) -> HashKvOptions {
        HashKvOptions {
            value_threshold: o.value_threshold,
            capacity: o.hashkv_capacity(),
            main_segment_size: o.hashkv_main_segment_size,
            log_segment_size: o.hashkv_log_segment_size,
            reserved_ratio: o.hashkv_reserved_ratio,
            write_cache_size: o.hashkv_write_cache_size,
            hotness: o.hashkv_hotness,
            journal: o.hashkv_journal,
            journal_values: o.hashkv_journal_values,
            journal_size: o.hashkv_journal_size,
            cold_file_size: o.vlog_file_size,
            cold_gc_chunk_size: o.gc_chunk_size,
            gc_step_bytes: o.gc_chunk_size,
            cold_gc_ratio: if o.gc_garbage_ratio > 0.0 {
                o.gc_garbage_ratio
            } else {
                0.5
            },
            legacy_below: Some(0),
            cold_legacy_below: Some(0),
        }
    }
}
