//! Options for opening a database, writing and reading. What a database
//! records of its options, and what may change at every open, is told on
//! [`Options`].

use crate::compaction_filter::CompactionFilter;
use crate::error::{Error, Result};
use crate::fs::{FileSystem, StdFs};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// Largest key accepted by `put`/`delete` (bytes).
pub const MAX_KEY_SIZE: usize = 64 * 1024;
/// Largest value accepted by `put` (bytes).
pub const MAX_VALUE_SIZE: usize = 32 * 1024 * 1024;
/// Largest encoded write batch accepted by `write` (bytes).
pub const MAX_BATCH_SIZE: usize = 256 * 1024 * 1024;

/// Longest [`crate::Db::close`] spends collecting garbage
/// ([`Options::gc_on_close`]); a step under way when it passes finishes.
pub const GC_ON_CLOSE_BUDGET: std::time::Duration = std::time::Duration::from_secs(2);

/// Which index structure maps keys to values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IndexKind {
    /// LevelDB-style LSM-tree with leveled compaction.
    Lsm,
    /// LSM-tree with lightweight compaction (LWC-tree).
    Lwc,
    /// FlashKey hash-table index with a key-only LSM-tree for scans.
    Hash,
}

/// Where values live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueLayout {
    /// No separation: values stay in the index.
    Inline,
    /// WiscKey value log.
    Vlog,
    /// HashKV segment groups.
    HashKv,
    /// KT-Store TrieTables.
    Trie,
    /// FlashKey logical bands.
    Bands,
}

macro_rules! names {
    ($t:ty, $what:literal { $($v:ident => $s:literal),* $(,)? }) => {
        impl $t {
            /// The name used in the CLI and in the database's identity file.
            pub fn name(self) -> &'static str {
                match self { $(Self::$v => $s),* }
            }
        }
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
        impl FromStr for $t {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self> {
                match s {
                    $($s => Ok(Self::$v),)*
                    _ => Err(Error::InvalidArgument(format!(
                        concat!("unknown ", $what, " {:?}; known: ", $($s, " "),*), s).trim_end().to_string())),
                }
            }
        }
    };
}

names!(IndexKind, "index" { Lsm => "lsm", Lwc => "lwc", Hash => "hash" });
names!(ValueLayout, "value layout" { Inline => "inline", Vlog => "vlog", HashKv => "hashkv", Trie => "trie", Bands => "bands" });

/// Named configurations reproducing each paper and its baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Preset {
    /// lsm + inline: a plain LSM store (LevelDB).
    LevelDb,
    /// lsm + vlog (WiscKey).
    WiscKey,
    /// lsm + hashkv (HashKV).
    HashKv,
    /// lsm + trie (KT-Store).
    KtStore,
    /// hash + bands (FlashKey).
    FlashKey,
    /// lwc + inline (LWC-tree).
    Lwc,
}

impl Preset {
    /// The preset's name, as the CLI and the benchmark harness spell it.
    pub fn name(self) -> &'static str {
        match self {
            Preset::LevelDb => "leveldb",
            Preset::WiscKey => "wisckey",
            Preset::HashKv => "hashkv",
            Preset::KtStore => "ktstore",
            Preset::FlashKey => "flashkey",
            Preset::Lwc => "lwc",
        }
    }

    /// The presets this build implements, comma-separated (for messages).
    pub fn available_names() -> String {
        Preset::ALL
            .iter()
            .filter(|p| p.is_available())
            .map(|p| p.name())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The preset with this index and value layout, if any.
    pub fn from_axes(index: IndexKind, layout: ValueLayout) -> Option<Preset> {
        Preset::ALL
            .into_iter()
            .find(|p| p.axes() == (index, layout))
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Parses a preset name. Every preset parses, implemented or not; opening
/// one this build lacks fails in [`Options::validate`].
///
/// # Errors
/// `InvalidArgument` for an unknown name, listing the implemented presets.
///
/// ```
/// use sepkv::Preset;
/// assert_eq!("wisckey".parse::<Preset>().unwrap(), Preset::WiscKey);
/// let e = "nosuch".parse::<Preset>().unwrap_err().to_string();
/// assert_eq!(
///     e,
///     format!("invalid argument: unknown preset \"nosuch\"; available: {}", Preset::available_names())
/// );
/// assert!(Preset::available_names().starts_with("leveldb, wisckey, hashkv"));
/// ```
impl FromStr for Preset {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Preset::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "unknown preset {s:?}; available: {}",
                    Preset::available_names()
                ))
            })
    }
}

/// Describes an index and value layout in the user's words: the preset
/// name when one has them, with the axes after it.
pub(crate) fn describe_config(index: IndexKind, layout: ValueLayout) -> String {
    match Preset::from_axes(index, layout) {
        Some(p) => format!("preset {p} (index {index}, value layout {layout})"),
        None => format!("index {index} with value layout {layout}"),
    }
}

impl Preset {
    /// Every preset.
    pub const ALL: [Preset; 6] = [
        Preset::LevelDb,
        Preset::WiscKey,
        Preset::HashKv,
        Preset::KtStore,
        Preset::FlashKey,
        Preset::Lwc,
    ];

    /// The preset's index and value layout.
    pub fn axes(self) -> (IndexKind, ValueLayout) {
        match self {
            Preset::LevelDb => (IndexKind::Lsm, ValueLayout::Inline),
            Preset::WiscKey => (IndexKind::Lsm, ValueLayout::Vlog),
            Preset::HashKv => (IndexKind::Lsm, ValueLayout::HashKv),
            Preset::KtStore => (IndexKind::Lsm, ValueLayout::Trie),
            Preset::FlashKey => (IndexKind::Hash, ValueLayout::Bands),
            Preset::Lwc => (IndexKind::Lwc, ValueLayout::Inline),
        }
    }

    /// True when this build implements the preset.
    pub fn is_available(self) -> bool {
        let (index, layout) = self.axes();
        config_available(index, layout)
    }
}

/// True when this build implements `index` with `layout`: the LSM-tree and
/// the LWC-tree index each combine with every value layout but `bands`.
pub(crate) fn config_available(index: IndexKind, layout: ValueLayout) -> bool {
    match index {
        IndexKind::Lsm | IndexKind::Lwc => matches!(
            layout,
            ValueLayout::Inline | ValueLayout::Vlog | ValueLayout::HashKv | ValueLayout::Trie
        ),
        IndexKind::Hash => layout == ValueLayout::Bands,
    }
}

/// Options for [`crate::Db::open`]. Sizes are in bytes.
///
/// # What a database records, and what may change at every open
///
/// Like RocksDB's options file and fjall's stored configuration, a database
/// records the choices its files depend on when it is created, and a later
/// [`crate::Db::open`] reads them back:
///
/// | option | recorded | at a later open |
/// |--------|----------|-----------------|
/// | [`Options::index`], [`Options::value_layout`] | in `IDENTITY` | `None` opens what is recorded; a different `Some` is refused with [`crate::Error::ConfigMismatch`] |
/// | [`Options::wal`] (`false`: WiscKey's log mode) | in `IDENTITY` | follows the record when no index or layout is named; otherwise it must match (`ConfigMismatch`) |
/// | `hashkv_main_segment_size`, `hashkv_log_segment_size`, `hashkv_reserved_ratio`, and `value_capacity` of a `hashkv` store | in the segment table | ignored: the store keeps its geometry |
/// | `num_levels` | no | may grow; below the deepest level holding files the open fails |
/// | everything else: cache sizes (`block_cache_size`, `max_open_files`), `write_buffer_size`, table format knobs (`block_size`, `block_align`, `block_restart_interval`, `bloom_bits_per_key`, `target_file_size`), level sizes and level-0 triggers, `sync_values_in_wal`, `flush_on_close`, `gc_on_close`, `mmap_reads`, the LWC-tree's DTable bounds, division number and push-down (`lwc_max_segments`, `lwc_max_table_bytes`, `lwc_division_number`, `lwc_push_down`) its reclaim threshold (`lwc_dead_share`) and its seek merges (`lwc_seek_merge_bytes`), KT-Store's span rules (`trie_span_*`), scan pipeline (`trie_scan_pipeline`, `trie_scan_direct`) and mapped appends (`trie_mapped_appends`), `scan_batch_bytes`, `value_threshold`, GC knobs (`gc_garbage_ratio`, `gc_chunk_size`, `space_amp_target`), `value_capacity` of a value log, `vlog_file_size`, prefetch, the `hashkv` cache, hotness and journal switches, `create_if_missing`, `error_if_exists`, `fs` | no | may change at every open; tables and value files written under older values stay readable |
///
/// So `Db::open(path, Options::default())` opens any existing database as
/// it was created, and `Options::preset(p)` both creates a `p` database and
/// checks that an existing one is `p`.
#[derive(Clone)]
pub struct Options {
    /// Create the database when the directory holds none (default true).
    pub create_if_missing: bool,
    /// Fail when a database already exists (default false).
    pub error_if_exists: bool,
    /// Index structure, recorded at creation. `None` (the default): the
    /// recorded one for an existing database, [`IndexKind::Lsm`] for a new
    /// one. A `Some` that differs from the record is refused with
    /// [`crate::Error::ConfigMismatch`].
    pub index: Option<IndexKind>,
    /// Value layout, recorded at creation. `None` (the default): the
    /// recorded one for an existing database, [`ValueLayout::Inline`] for a
    /// new one. A `Some` that differs from the record is refused with
    /// [`crate::Error::ConfigMismatch`].
    pub value_layout: Option<ValueLayout>,
    /// Values shorter than this stay inline in the index (selective KV
    /// separation, HashKV §3.5), for the `vlog`, `hashkv` and `trie`
    /// layouts. Ignored by the inline layout, where every value is inline,
    /// and by `bands`, where every value goes to a logical band (FlashKey's
    /// hash index holds addresses only). Default 128.
    pub value_threshold: usize,
    /// Memtable size at which it is frozen and flushed (default 8 MiB).
    /// Each memtable also holds a whole-key Bloom filter of one bit per 4
    /// bytes of this size (256 KiB at the default), so that point lookups
    /// of keys it does not hold skip its skiplist.
    pub write_buffer_size: usize,
    /// Uncompressed size of an SSTable data block (default 4 KiB).
    pub block_size: usize,
    /// Data blocks of SSTables and DTable segments start on 4 KiB
    /// boundaries, and are cut before an entry would carry one (trailer
    /// included) past `block_size` rounded up to 4 KiB; only an entry
    /// larger than that makes a block span more. At the default
    /// `block_size` a point read that reaches the device then reads one
    /// page, not the two that a block lying across a boundary takes. The
    /// cost is the zeros up to each boundary: with 1 KiB entries a page
    /// holds three entries, and tables grow about a third. As RocksDB's
    /// `block_align`. Default false. Takes effect for tables written from
    /// then on; tables written either way stay readable.
    pub block_align: bool,
    /// Keys between restart points in a block (default 16).
    pub block_restart_interval: usize,
    /// Bloom filter bits per key; 0 disables filters (default 10).
    pub bloom_bits_per_key: usize,
    /// Capacity of the block cache (default 32 MiB).
    pub block_cache_size: usize,
    /// SSTables kept open in the table cache, and — for the `trie` layout —
    /// TrieTables kept open for appending (default 500). A cached table
    /// holds one file descriptor, and a second one for point reads that
    /// take system calls when the process's open-file limit is at least
    /// four times this number (see `mmap_reads`).
    pub max_open_files: usize,
    /// Target size of SSTables written by compaction (default 4 MiB).
    pub target_file_size: u64,
    /// Size limit of level 1; level n+1 is `level_size_multiplier` times
    /// level n (default 40 MiB).
    pub max_bytes_for_level_base: u64,
    /// Growth factor between levels (default 10).
    pub level_size_multiplier: u64,
    /// Number of levels (default 7).
    pub num_levels: usize,
    /// `lwc` index: most segments a DTable holds before equal division
    /// merges it and divides it (LWC-tree §4.4); 0 (the default) means the
    /// level size ratio, the paper's division number. More segments mean
    /// fewer divisions (less compaction I/O) and more index blocks a
    /// lookup may consult. Between 2 and 1024 when set.
    pub lwc_max_segments: usize,
    /// `lwc` index: most bytes a DTable grows to by appends before equal
    /// division (LWC-tree §4.4); 0 (the default) means 4 ×
    /// `target_file_size`. At least `target_file_size` when set.
    pub lwc_max_table_bytes: u64,
    /// `lwc` index: the division number `n` of equal division (LWC-tree
    /// §4.4): a full DTable is divided into `n` DTables of equal size.
    /// 0 (the default) divides into parts of about `target_file_size`
    /// (`n = ceil(bytes / target_file_size)`); the paper's default is the
    /// level size ratio, and its Fig. 19 sweeps 2 to 16. Between 2 and 64
    /// when set.
    pub lwc_division_number: usize,
    /// `lwc` index: push a full DTable down to the next level (merged with
    /// its new entries and appended there) instead of dividing it in its
    /// own level, where the next level holds its keys (default false).
    /// Beyond the paper. It cut WA by a tenth at 4 M × 100 B from the page
    /// cache, but at 16 M × 100 B under a hard drive's bandwidth it loaded
    /// 0.72× as fast with no lower WA (`docs/notebook/lwc-tree.md`).
    pub lwc_push_down: bool,
    /// `lwc` index: share of a DTable's bytes that may be dead (stale
    /// tails of earlier appends, and versions its newer segments shadow,
    /// estimated by the segments' filters when they are appended) before
    /// the next append to it merges it with its new entries instead,
    /// dropping them (default 0.25). Lower keeps less space after
    /// overwrites for more compaction writes; a load of new keys leaves
    /// nothing dead and is not affected. Between 0.05 and 1.0 when set
    /// (1.0: never).
    pub lwc_dead_share: f64,
    /// `lwc` index: read-triggered merging of DTables (seek merges, the
    /// analogue of LevelDB's seek compaction; `docs/design/lwc-tree.md`,
    /// Scans). Reads charge a DTable for the extra segments they cost:
    /// a seek that positions a cursor in `k` of its segments `k - 1`, a
    /// lookup that consults more than one segment 1. A DTable of `size`
    /// bytes may take `size / lwc_seek_merge_bytes` charges (at least
    /// 100); the charge past that marks it for a merge of its segments
    /// into one (stale versions dropped, divided into tables of
    /// `target_file_size`, same level), which the compaction thread runs
    /// when no level needs compaction. Bytes per charge; 0 turns seek
    /// merges off. Default 1024. A load without reads charges nothing.
    pub lwc_seek_merge_bytes: u64,
    /// Level-0 file count that triggers compaction (default 4).
    pub l0_compaction_trigger: usize,
    /// Level-0 file count at which each write is delayed by 1 ms (default 8).
    pub l0_slowdown_writes_trigger: usize,
    /// Level-0 file count at which writes wait for compaction (default 12).
    pub l0_stop_writes_trigger: usize,
    /// Keep the index's write-ahead log (default true). With `false` (only
    /// for the `vlog` layout, WiscKey §3.4.2) every write is logged in the
    /// value log alone, the vLog head is checkpointed at each memtable flush
    /// and recovery replays the vLog from the checkpoint.
    ///
    /// Recorded at creation. When the options name no index and no value
    /// layout (both `None`), an existing database opens in its recorded
    /// mode whatever this field says; when they name one, it must match
    /// the record ([`crate::Error::ConfigMismatch`]).
    pub wal: bool,
    /// Carry the separated values of a synced write in its WAL record too
    /// (default true; only with `wal`, and only under the LSM-tree and
    /// LWC-tree indexes). A synced write then waits for one fsync, the
    /// WAL's, instead of the WAL's and the value store's: the value store's
    /// copy is made durable later (at the next memtable switch or flush,
    /// or the next sync that needs it), and recovery takes a value the
    /// store lost from the WAL, as an inline value. Costs each synced
    /// value a second write (into the WAL); a memtable is switched once
    /// its WAL reaches `write_buffer_size`, so the WAL stays within its
    /// preallocation. `false` syncs the value store beside the WAL at every
    /// synced write (two fsyncs, each value written once). Unsynced writes,
    /// and synced batches over 1 MiB (a commit group's bound; writing them
    /// twice would cost more than the fsync saved), are not affected.
    pub sync_values_in_wal: bool,
    /// Flush the memtable in [`crate::Db::close`] (default true), so that a
    /// closed database holds no WAL to replay and no log space (see
    /// `close`). `false` leaves the memtable in its WAL, as a process that
    /// exits without closing does; the next open replays it (RocksDB's
    /// `avoid_flush_during_shutdown` is the same choice).
    pub flush_on_close: bool,
    /// Before [`crate::Db::close`] lets go, if this process wrote values,
    /// collect garbage until the store is below the space target's GC
    /// band (`(1 + T) / 2` for target `T`: 1.25 for the default), or GC
    /// finds nothing more, or
    /// [`GC_ON_CLOSE_BUDGET`] has passed (default true); when this process
    /// overwrote values and the index is at most 64 MiB, the index is
    /// compacted first so that compaction reports the garbage it hides. A
    /// process that lives for less than a second (a CLI import, a test, a
    /// service that restarts) otherwise leaves the garbage its last writes
    /// made for the next one: killed and short-lived import rounds ended at
    /// up to 1.8× their live bytes with the default target of 1.5, and at
    /// 1.08–1.28× with this. No effect without a value store or with
    /// `space_amp_target` infinite.
    pub gc_on_close: bool,
    /// Size at which a value-log file is closed and the next begun
    /// (default 64 MiB; bytes). GC frees the tail by punching holes in
    /// the tail file and deleting files wholly behind it. While the tail
    /// and the head share a file, each punch holds that file's inode lock
    /// (and on a file system mounted with `discard`, waits for the discard)
    /// while user appends wait for it; files shorter than the log's span
    /// keep GC's frees off the file the writers append to. 256 MiB until
    /// 2026-11-27: the update experiment (100k × 1000 B, reserve 30 %,
    /// log span about 130 MB) ran 1.08× faster at 64 MiB with p99.9 0.74×,
    /// and `overwrite` (1 M × 1000 B) 1.22×. Reads keep at most 384
    /// value-log files open (24 GiB at 64 MiB), closing the oldest first.
    pub vlog_file_size: u64,
    /// Bytes value-log GC reads from the tail per step (default 4 MiB,
    /// WiscKey §4.1.5); also HashKV's: the cold data log's chunk, and the
    /// group bytes one group step collects (at least one group).
    pub gc_chunk_size: u64,
    /// Estimated garbage ratio of the value store above which background GC
    /// runs; 0 disables background GC (default 0.5).
    pub gc_garbage_ratio: f64,
    /// The space amplification the database keeps to: bytes on disk (index
    /// and value store) ÷ live bytes, must be > 1.0; `f64::INFINITY` sets
    /// no target. Default 1.5. See `db/space/policy.rs` for how it relates to
    /// `value_capacity` and `gc_garbage_ratio`: background GC starts halfway
    /// from 1.0 to the target, writers are slowed down in the last tenth
    /// and stopped (they run GC themselves) at the target. It applies to the
    /// `vlog`, `hashkv` and `trie` layouts; `inline` has no value store.
    /// The `bands` layout keeps FlashKey's band GC (FlashKey §V-B5) and
    /// takes the target as the bound of its band files per live byte in
    /// them when it is tighter than `1 + band_over_provisioning` (see
    /// there).
    pub space_amp_target: f64,
    /// Entries whose values FlashKey's hash index looks up ahead of a scan
    /// once it reads a contiguous run (default 32, WiscKey §3.3.1). For
    /// `Scan` iterators, 0 disables batched value reads (values are read
    /// one at a time); any other value lets a scan's window double
    /// past it, up to `scan_batch_bytes` (see `Scan`).
    pub scan_prefetch_depth: usize,
    /// Most bytes of values one batch of a scan (`Scan` iterators)
    /// resolves (bytes; separated values counted from their pointers
    /// before reading, inline values by their length). The whole rest of
    /// a limited scan (`Scan::limit`) is one batch up to this, so a layout that reads spans (KT-Store §3.3)
    /// reads each table's span at most once per range query; a longer
    /// range is read in batches of this size, holding at most about this
    /// much of values in memory. A scan without a limit doubles its
    /// window up to this. At least 64 KiB. Default 128 MiB (a
    /// 20,000-entry range of 4 KiB values is 80 MiB).
    pub scan_batch_bytes: u64,
    /// Most threads that read prefetched values in parallel, i.e. the most
    /// reads a scan keeps in flight (default 32: on an SSD that serves 20k
    /// 4 KiB reads per second at queue depth 1, 66k at 8 and 90k at 32,
    /// device-bound 100-value scans of `wisckey` ran 1.26x faster with 32
    /// threads than with 8, and no faster with 64). Within this bound the
    /// depth adapts: batches run at the power-of-two depth that served the
    /// most reads per second, a deeper one only when it serves 10 % more
    /// (see `vstore::prefetch`). Threads start with the first batch of
    /// reads that reaches the device; 0 reads inline.
    pub prefetch_threads: usize,
    /// File system under all I/O (default: the operating system's).
    pub fs: Arc<dyn FileSystem>,
    /// Read SSTable blocks, value-store records and every other file with
    /// direct I/O (`O_DIRECT`), bypassing the operating system's page cache,
    /// as RocksDB's `use_direct_reads` does (default false). Reads are
    /// widened to 4 KiB-aligned ranges in aligned buffers; writes stay
    /// buffered. The block cache still caches SSTable blocks. Takes effect
    /// per open and is not recorded. `Db::open` fails with
    /// `InvalidArgument` when the file system cannot
    /// ([`FileSystem::with_direct_reads`]; the in-memory ones, or an
    /// operating-system file system without `O_DIRECT` such as older tmpfs).
    pub use_direct_reads: bool,
    /// Map SSTable, DTable and value-log files into memory (`mmap`) and
    /// serve reads from the mappings while they come from memory (default
    /// true).
    ///
    /// - Tables: point reads, user scans and GC's lookups use a data block
    ///   in place, as LevelDB does with its tables on 64-bit systems: it is
    ///   checksummed where it lies the first time an open table loads it
    ///   (later loads trust the verified bytes, as the block cache trusts
    ///   its copies; so a page the kernel evicts and reads again from the
    ///   device is not checksummed again until `verify` or a reopen), never
    ///   copied, and not put in the block cache (the page cache holds it).
    ///   Compactions, flushes and `verify` read with system calls and
    ///   checksum every block.
    /// - Value log (`wisckey`): a value is copied out of the mapping, with
    ///   no system call. Records appended after a file was mapped are read
    ///   with system calls.
    /// - Logical bands (`flashkey`): a record of a closed band is copied
    ///   out of the mapping, with no system call; the open band is read
    ///   with system calls.
    ///
    /// How long mapped reads take is watched: while they reach the device
    /// (20 µs or more), reads go back to system calls — one request per
    /// block or record (a get's table block through a second handle of the
    /// file advised `POSIX_FADV_RANDOM`, so that the kernel reads no
    /// neighbouring pages with it), and the kernel's read-ahead for scans,
    /// where faults on a mapping would read one 4 KiB page at a time — and a share of
    /// them still tries the mapping, to see when the data is in memory
    /// again. Ignored with `use_direct_reads`, and by file systems that
    /// cannot map (the in-memory ones). Takes effect per open and is not
    /// recorded.
    ///
    /// Never truncate a file of an open database: reading a lost page of a
    /// mapping kills the process (`SIGBUS`). sepkv itself only ever
    /// truncates files before it reads them, at open.
    pub mmap_reads: bool,
    /// Capacity of the value store in bytes, or `None` for the default.
    ///
    /// - `hashkv`: main segments plus reserved space (HashKV §3.2), fixed
    ///   when the database is created; `None` means 64 GiB. Segments are
    ///   created lazily, so unused capacity costs no disk space.
    /// - `wisckey` (value log): the most bytes the log may span from its
    ///   tail to its head (live values plus garbage not yet collected);
    ///   `None` means unbounded. May change between opens.
    /// - `ktstore` (TrieTables): the most bytes the tables may hold (live
    ///   values plus garbage not yet collected, tables GC retired but old
    ///   snapshots still reach included); `None` means unbounded. May
    ///   change between opens.
    /// - `flashkey` (logical bands): the most bytes the band files may
    ///   hold; `None` means unbounded. May change between opens. The bands
    ///   count in their own bytes: an entry takes 42 bytes beyond its key
    ///   and value (`vstore::bands::band::ENTRY_OVERHEAD`), so a capacity
    ///   meant to leave GC a reserve `R` over live data is the data's
    ///   entry bytes × (1 + R), as FlashKey's capacity = live × (1 + OP);
    ///   `band_over_provisioning` sets such a bound relative to the live
    ///   band bytes, and the tighter of the two acts first.
    ///
    /// When a user write would pass the capacity, garbage collection runs
    /// first, in the writing thread (the setup of HashKV §4.1, where both
    /// stores get the data size plus a reserve); if it cannot free enough
    /// the write fails with [`crate::Error::ValueStoreFull`]. GC's own
    /// copies are exempt, so the value log may pass its capacity by up to
    /// one GC chunk while a step runs.
    pub value_capacity: Option<u64>,
    /// Size of a `hashkv` main segment in bytes; the number of segment
    /// groups is `value_capacity * (1 - hashkv_reserved_ratio)` divided by
    /// it, at least 1. Fixed at creation. Default 64 MiB.
    pub hashkv_main_segment_size: u64,
    /// Size of a `hashkv` log segment of the reserved space in bytes. Fixed
    /// at creation. Default 1 MiB.
    pub hashkv_log_segment_size: u64,
    /// Share of `value_capacity` reserved for log segments, in (0, 1).
    /// Fixed at creation. Default 0.3.
    pub hashkv_reserved_ratio: f64,
    /// Bytes of recently written values the `hashkv` write cache holds
    /// before it writes them to their segments in one batch per segment
    /// (a full cache is sealed and written by the store's background
    /// worker, at most two caches' worth being in flight before a writer
    /// helps); 0 disables the cache (every write goes to its segment at
    /// once). Used only with `hashkv_journal` and
    /// `hashkv_journal_values`, the mode whose journal the cache relies on
    /// for crash safety. Default 4 MiB.
    pub hashkv_write_cache_size: usize,
    /// `hashkv` hot/cold separation in GC: values written once since their
    /// insert (never updated) move to a cold data log (HashKV §3.4).
    /// Default true.
    pub hashkv_hotness: bool,
    /// `hashkv` write journal (HashKV §3.7). On, the journal records the
    /// store's metadata — the segments each append or GC step allocates —
    /// and values go straight to their groups' segment files, written once
    /// (with `hashkv_journal_values` it carries the values as well, see
    /// there). Off, the segment table is checkpointed (written and synced)
    /// whenever a segment is allocated instead. Either way open recovers
    /// the records appended after the last checkpoint by scanning the
    /// groups' segment tails, and every acknowledged write survives a
    /// process crash and every synced one a power loss. May change between
    /// opens. Default true.
    pub hashkv_journal: bool,
    /// With `hashkv_journal`: the journal carries each value as well as the
    /// metadata, and the write cache (`hashkv_write_cache_size`) batches
    /// the segment writes behind it, so every value is written twice
    /// (journal, then segment) but a sync is one `fsync` of the journal
    /// whatever the groups written. Off, a sync `fsync`s the segments
    /// written since the last sync and the journal (one `syncfs(2)` when 16
    /// or more are due). May change between opens. Default false.
    pub hashkv_journal_values: bool,
    /// Bytes at which the `hashkv` write journal is checkpointed and
    /// started afresh (the store's worker finishes the checkpoint in the
    /// background). Carrying values (`hashkv_journal_values`), that is the
    /// journal's length, and the disk may hold the journal being retired
    /// and a preallocated spare beside the current one; a store whose
    /// groups hold less than 32 times this uses a thirty-second of their
    /// bytes (at least 1 MiB). Recording metadata only, it is the bytes
    /// appended to segments since the last checkpoint, which open scans
    /// after a crash; a store whose groups hold less than 8 times this uses
    /// an eighth of their bytes (at least 4 MiB). Default 64 MiB.
    pub hashkv_journal_size: u64,
    /// Bytes a `trie` leaf takes (over all its TrieTables) before it
    /// splits into children by the next key byte (or, where keys cannot
    /// split, its table is closed and a new one begun); also the size at
    /// which TT_IN's table rolls, and the most a GC step holds in memory.
    /// Smaller values make more leaves, hence narrower tables and denser
    /// scans, at the cost of more files. May change between opens.
    /// Default 4 MiB.
    pub trie_table_size: u64,
    /// Size in bytes at which a `trie` leaf's active TrieTable is sealed
    /// and a new one begun, before the leaf has taken `trie_table_size`
    /// (beyond KT-Store, whose leaves keep one table each, §3.2). The
    /// active table is the one part of a key range in write order, which
    /// a scan reads whole; a sealed one is sorted by background GC
    /// (`trie_sort_sealed`) and then read as a dense span. So this bounds
    /// what a scan reads beyond the values it asked for, at the cost of
    /// more, smaller tables per leaf. Values at or above `trie_table_size`
    /// turn rolling off. At least 64 KiB. May change between opens.
    /// Default 512 KiB.
    pub trie_roll_size: u64,
    /// Write share past which a `trie` leaf splits before its table is
    /// full (adaptive splitting by write skew, beyond KT-Store §3.5): every
    /// `trie_table_size / 4` bytes appended to the tables, a leaf that took
    /// more than this share of them splits like a full one, when the trie
    /// has at least 4 leaves and the leaf's table holds at least
    /// `trie_table_size / 8` bytes. A fraction in `(0, 1]`; `1.0` turns the
    /// rule off (no leaf can take more than all). May change between opens.
    /// Default 0.5.
    pub trie_split_skew: f64,
    /// Fixed trie levels for the `trie` layout (KT-Store §3.5: "we only
    /// use fixed levels"): `Some(n)` turns adaptive splitting off. Every
    /// leaf sits below `n` levels of internal nodes and never splits; a
    /// leaf's TrieTable that reaches `trie_roll_size` (or
    /// `trie_table_size`) is sealed and a new one begun in the same leaf.
    /// A level fans out on one key byte, and edges are compressed over the
    /// bytes all keys under a node share, so a level is spent only where
    /// keys differ: YCSB's `user` + digits spread by their first digits
    /// (9–10 leaves at 2 levels, about 90 at 3), random binary keys by
    /// their first byte (256 leaves at 1 level, 65,536 at 2). Which byte a
    /// level fans out on is learned from the keys: a leaf above level `n`
    /// holds one key only, and becomes an internal node fanning out on the
    /// first byte where they differ as soon as a second key reaches it,
    /// before that key's value is written (so a sealed table above the
    /// fixed levels holds one key's values). The root counts as one level.
    /// Between 1 and 8; needs `trie_split_skew = 1.0` (a fixed trie has no
    /// skew splits), else `InvalidArgument`. May change between opens: the
    /// nodes made so far stay (they are persisted in the trie file); a
    /// larger `n` deepens the leaves as new keys arrive, `None` lets leaves
    /// split by size again. Default `None` (adaptive splitting).
    pub trie_fixed_levels: Option<u8>,
    /// Whether background GC rewrites each sealed `trie` TrieTable whose
    /// records are in write order into a new table in key order, even when
    /// it holds no garbage (beyond KT-Store: the paper keeps tables in write
    /// order, §3.2). A table is sealed when its leaf splits or it rolls, so
    /// every value is sorted at most once more (write amplification about
    /// one more) and scans then read the sealed part of a key range as one
    /// dense span. Steps run only while background GC is on
    /// (`gc_garbage_ratio` > 0), after any GC the garbage calls for. May
    /// change between opens. Default true.
    pub trie_sort_sealed: bool,
    /// Least share of a `trie` span's bytes that the requested records must
    /// fill for the span to be read with one sequential read, while value
    /// reads reach the device (the span rule, KT-Store §3.3; see
    /// `vstore::trie::scan`). Records of a table that fill less are grouped
    /// into denser spans or read one by one. A fraction in `[0, 1]`; `0.0`
    /// reads each table's whole span from its least to its greatest
    /// requested offset, as the paper does. Default 1/16 (100-entry scans
    /// of 1 KiB values on a virtual disk: 1/8, 1/16 and 1/32 gave 367, 423
    /// and 373 scans/s). May change between opens.
    pub trie_span_density: f64,
    /// [`Options::trie_span_density`] while value reads are served from the
    /// page cache, where a read call costs about a microsecond and every
    /// byte read is a copy. A fraction in `[0, 1]`. Default 3/4: at 1/16,
    /// spans read three times the requested bytes and the copying took a
    /// third of a scan's time. May change between opens.
    pub trie_span_density_memory: f64,
    /// Longest `trie` span read at once (bytes); a longer run of requested
    /// records is cut at record boundaries into reads of at most this
    /// (each byte is still read at most once per batch). Also the size of
    /// each reading thread's span buffer. Between 4 KiB and 1 GiB. Default
    /// 4 MiB (see docs/design/ktstore.md for the measurement). May change
    /// between opens.
    pub trie_span_max: u64,
    /// Longest `trie` span read at once while spans are read in parallel
    /// (reads reach the device and `prefetch_threads` > 0), so one long
    /// span does not leave the other threads idle (bytes). Between 4 KiB
    /// and `trie_span_max`; equal to it, spans are cut only at
    /// `trie_span_max`. Default 512 KiB. May change between opens.
    pub trie_span_parallel: u64,
    /// Memory budget of a limited `trie` scan's read pipeline (bytes): the
    /// span reads of the next entries are in flight on the prefetch pool
    /// while the scan returns the current ones, and the spans being read
    /// plus the values read and not yet returned stay within this (see
    /// `vstore::trie::pipeline`). The scan hands its pointers over in
    /// windows of half this (at most `scan_batch_bytes`), each table read
    /// at most once per window. `0` turns the pipeline off: a limited scan
    /// then reads its whole range (up to `scan_batch_bytes`) before
    /// returning its first entry. 0, or between 1 MiB and 1 GiB. Default
    /// 32 MiB (see docs/design/ktstore.md for the measurement). May change
    /// between opens.
    pub trie_scan_pipeline: u64,
    /// Read the `trie` scan pipeline's spans of 64 KiB or more with direct
    /// I/O (`O_DIRECT`, into aligned buffers, bypassing the page cache)
    /// while value reads reach the device (default true). Reads served
    /// from the page cache, point reads, shorter spans, scans without a
    /// pipeline and file systems without
    /// direct reads stay buffered; a direct read that fails where a
    /// buffered one of the same span succeeds turns it off for the store.
    /// See `vstore::trie::pipeline`, "Direct span reads", and
    /// docs/design/ktstore.md for the measurement. May change between
    /// opens.
    pub trie_scan_direct: bool,
    /// Copy appends shorter than 4 KiB to the `trie` layout's active
    /// TrieTables into a shared memory mapping of each file instead of
    /// writing them with a `write(2)` each (default true; see
    /// docs/design/ktstore.md, "Mapped appends"). An append is then a copy
    /// into the page cache: the same promise (it survives a process crash
    /// once the write returns; a sync makes it durable), without the
    /// kernel's per-file work of a system call into one of many files
    /// (16–26 % of `+paper`'s process CPU per 1 KiB put). A full disk is an
    /// append's `ENOSPC`, as before: each page is faulted in with
    /// `MADV_POPULATE_WRITE` before a copy touches it. File systems
    /// without mappings, and kernels without that call (before Linux
    /// 5.14), write with system calls. The exposure it adds: a device read
    /// error on a table page read back into the page cache ends the
    /// process with `SIGBUS` (as `mmap_reads` does for reads). May change
    /// between opens.
    pub trie_mapped_appends: bool,
    /// Entries after which a `bands` logical band is closed and the next
    /// opened, if `band_bytes` has not closed it first (FlashKey §V-A2).
    /// May change between opens. Default 65,536.
    pub band_entries: u32,
    /// Bytes after which a `bands` logical band is closed and the next
    /// opened: the band closes after the write batch that takes its file to
    /// this size or past it (FlashKey §V-A2: an LBand has a fixed size; a
    /// GC step reads one band). Between 4 KiB and 1 GiB. May change between
    /// opens. Default 1 MiB.
    pub band_bytes: u64,
    /// Over-provisioning `OP` of the `bands` layout (FlashKey §VI: band
    /// capacity = live × (1 + OP)): the band files may take up to
    /// `1 + OP` bytes per live byte in them. Background GC is due from
    /// `1 + 0.9 OP` (unless `gc_garbage_ratio` is 0, which turns the GC
    /// thread off), and past `1 + OP` plus one band each user write runs
    /// a GC step itself before it appends; no write is refused for it
    /// (`value_capacity` is the hard bound). When `space_amp_target` `T`
    /// is tighter (`T < 1 + OP`), `T` is the bound: the tighter of the two
    /// wins. The bound counts the band files against the live bytes in
    /// them; the hash table's pages and the key tree are outside it, and
    /// GC cannot collect the bands after the replay checkpoints (up to
    /// `hash_checkpoint_bands` bands), so a store smaller than that many
    /// bands per `OP` runs above it. Less `OP` costs more GC writes: for
    /// uniform random updates the paper's model gives a GC write
    /// amplification of 5.7 at 0.1, 2.4 at 0.3, 1.7 at 0.5 and 1.3 at 1.0
    /// (see `docs/design/flashkey.md`). Must be positive; `f64::INFINITY`
    /// sets no bound. May change between opens. Default 0.5.
    pub band_over_provisioning: f64,
    /// Where the `hash` index keeps its table (FlashKey §V-A1):
    /// [`HashIndexMode::Memory`] (default) or [`HashIndexMode::Disk`]
    /// behind a write-back page cache of `hash_cache_size` bytes. May
    /// change between opens.
    pub hash_index_mode: HashIndexMode,
    /// Bytes of hash-table pages the `hash` index keeps in memory in
    /// [`HashIndexMode::Disk`] (default 16 MiB).
    pub hash_cache_size: u64,
    /// Bytes of the `hash` index's memo of keys' current addresses: a
    /// put of a key written or read recently finds the version it
    /// supersedes there, without reading that record back to verify a
    /// fingerprint match (beyond FlashKey §V-B2). 40 bytes per key; keys
    /// longer than 27 bytes are not kept. At most 1 GiB; 0 turns it off.
    /// May change between opens. Default 5 MiB (131,072 keys).
    pub hash_memo_size: u64,
    /// The `hash` index checkpoints its dirty pages every this many closed
    /// bands (FlashKey §V-B6); recovery replays the bands after the last
    /// checkpoint. Default 64.
    pub hash_checkpoint_bands: u64,
    /// A filter that drops records while compaction (and, for the `hash`
    /// index, band GC) rewrites them, as RocksDB's compaction filter does
    /// (default `None`). See [`crate::CompactionFilter`] for the contract:
    /// which records it is offered, when, and how snapshots and value-store
    /// garbage follow. Takes effect per open and is not recorded: a reopen
    /// may set another filter or none. Its [`crate::CompactionFilter::name`]
    /// must be 1 to 128 bytes without control characters.
    pub compaction_filter: Option<Arc<dyn CompactionFilter>>,
}

/// Where the `hash` index keeps its table (FlashKey §V-A1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HashIndexMode {
    /// Every page in memory.
    #[default]
    Memory,
    /// Pages on disk behind a bounded write-back cache.
    Disk,
}

impl FromStr for HashIndexMode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "memory" => Ok(HashIndexMode::Memory),
            "disk" => Ok(HashIndexMode::Disk),
            _ => Err(Error::InvalidArgument(format!(
                "unknown hash index mode {s:?} (memory or disk)"
            ))),
        }
    }
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("index", &self.index)
            .field("value_layout", &self.value_layout)
            .field("value_threshold", &self.value_threshold)
            .field("write_buffer_size", &self.write_buffer_size)
            .field("block_size", &self.block_size)
            .field("block_align", &self.block_align)
            .field("target_file_size", &self.target_file_size)
            .field("lwc_max_segments", &self.lwc_max_segments)
            .field("lwc_max_table_bytes", &self.lwc_max_table_bytes)
            .field("lwc_division_number", &self.lwc_division_number)
            .field("lwc_push_down", &self.lwc_push_down)
            .field("lwc_dead_share", &self.lwc_dead_share)
            .field("lwc_seek_merge_bytes", &self.lwc_seek_merge_bytes)
            .field("max_bytes_for_level_base", &self.max_bytes_for_level_base)
            .field("wal", &self.wal)
            .field("sync_values_in_wal", &self.sync_values_in_wal)
            .field("flush_on_close", &self.flush_on_close)
            .field("gc_on_close", &self.gc_on_close)
            .field("vlog_file_size", &self.vlog_file_size)
            .field("gc_garbage_ratio", &self.gc_garbage_ratio)
            .field("space_amp_target", &self.space_amp_target)
            .field(
                "compaction_filter",
                &self.compaction_filter.as_ref().map(|f| f.name()),
            )
            .finish_non_exhaustive()
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            create_if_missing: true,
            error_if_exists: false,
            index: None,
            value_layout: None,
            value_threshold: 128,
            write_buffer_size: 8 << 20,
            block_size: 4096,
            block_align: false,
            block_restart_interval: 16,
            bloom_bits_per_key: 10,
            block_cache_size: 32 << 20,
            max_open_files: 500,
            target_file_size: 4 << 20,
            max_bytes_for_level_base: 40 << 20,
            level_size_multiplier: 10,
            num_levels: 7,
            lwc_max_segments: 0,
            lwc_max_table_bytes: 0,
            lwc_division_number: 0,
            lwc_push_down: false,
            lwc_dead_share: crate::index::compaction::lightweight::DEFAULT_DEAD_SHARE,
            lwc_seek_merge_bytes: crate::index::compaction::lightweight::DEFAULT_SEEK_MERGE_BYTES,
            l0_compaction_trigger: 4,
            l0_slowdown_writes_trigger: 8,
            l0_stop_writes_trigger: 12,
            wal: true,
            sync_values_in_wal: true,
            flush_on_close: true,
            gc_on_close: true,
            vlog_file_size: 64 << 20,
            gc_chunk_size: 4 << 20,
            gc_garbage_ratio: 0.5,
            space_amp_target: 1.5,
            scan_prefetch_depth: 32,
            scan_batch_bytes: 128 << 20,
            prefetch_threads: 32,
            fs: Arc::new(StdFs),
            use_direct_reads: false,
            mmap_reads: true,
            value_capacity: None,
            hashkv_main_segment_size: 64 << 20,
            hashkv_log_segment_size: 1 << 20,
            hashkv_reserved_ratio: 0.3,
            hashkv_write_cache_size: 4 << 20,
            hashkv_hotness: true,
            hashkv_journal: true,
            hashkv_journal_values: false,
            hashkv_journal_size: 64 << 20,
            trie_table_size: 4 << 20,
            trie_roll_size: 512 << 10,
            trie_split_skew: 0.5,
            trie_fixed_levels: None,
            trie_sort_sealed: true,
            trie_span_density: 1.0 / 16.0,
            trie_span_density_memory: 0.75,
            trie_span_max: 4 << 20,
            trie_span_parallel: 512 << 10,
            trie_scan_pipeline: crate::vstore::trie::pipeline::DEFAULT_BUDGET,
            trie_scan_direct: true,
            trie_mapped_appends: true,
            band_entries: 1 << 16,
            band_bytes: 1 << 20,
            band_over_provisioning: 0.5,
            hash_index_mode: HashIndexMode::Memory,
            hash_cache_size: 16 << 20,
            hash_memo_size: 5 << 20,
            hash_checkpoint_bands: 64,
            compaction_filter: None,
        }
    }
}

impl Options {
    /// Default options naming the preset's index and value layout: they
    /// create a database of that preset, and refuse to open an existing
    /// database of another one.
    ///
    /// ```
    /// use sepkv::{IndexKind, Options, Preset, ValueLayout};
    /// let o = Options::preset(Preset::WiscKey);
    /// assert_eq!((o.index, o.value_layout), (Some(IndexKind::Lsm), Some(ValueLayout::Vlog)));
    /// assert_eq!(Options::default().value_layout, None); // whatever the database has
    /// ```
    pub fn preset(p: Preset) -> Self {
        let (index, value_layout) = p.axes();
        Options {
            index: Some(index),
            value_layout: Some(value_layout),
            // FlashKey's bands are its only log (§V-B6).
            wal: value_layout != ValueLayout::Bands,
            ..Options::default()
        }
    }

    /// The index these options select: [`Options::index`], or
    /// [`IndexKind::Lsm`] when it is `None`. After [`crate::Db::open`] the
    /// handle's options hold the recorded value.
    pub fn index_kind(&self) -> IndexKind {
        self.index.unwrap_or(IndexKind::Lsm)
    }

    /// The value layout these options select: [`Options::value_layout`], or
    /// [`ValueLayout::Inline`] when it is `None`.
    pub fn layout(&self) -> ValueLayout {
        self.value_layout.unwrap_or(ValueLayout::Inline)
    }

    /// True when the options name a configuration (an index or a value
    /// layout), which an existing database must then match.
    pub fn names_configuration(&self) -> bool {
        self.index.is_some() || self.value_layout.is_some()
    }

    /// Default `hashkv` capacity when `value_capacity` is `None` (bytes).
    pub const DEFAULT_HASHKV_CAPACITY: u64 = 64 << 30;

    /// The `hashkv` store's capacity in bytes: `value_capacity` or 64 GiB.
    pub fn hashkv_capacity(&self) -> u64 {
        self.value_capacity.unwrap_or(Self::DEFAULT_HASHKV_CAPACITY)
    }

    /// Checks every option.
    ///
    /// # Errors
    /// `InvalidArgument` naming the first option out of range, or a
    /// configuration this build does not implement yet.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidArgument(m));
        let (index, layout) = (self.index_kind(), self.layout());
        if !config_available(index, layout) {
            return bad(format!(
                "{} is not implemented in this build (the hash index takes only the bands layout, and bands only the hash index); available presets: {}",
                describe_config(index, layout),
                Preset::available_names()
            ));
        }
        if !self.wal && !matches!(layout, ValueLayout::Vlog | ValueLayout::Bands) {
            return bad(format!(
                "wal = false needs the vlog layout (WiscKey §3.4.2), not {layout}"
            ));
        }
        if self.wal && layout == ValueLayout::Bands {
            return bad(
                "the bands layout is its own log (FlashKey §V-B6): it needs wal = false".into(),
            );
        }
        if self.value_threshold == 0 {
            return bad("value_threshold must be at least 1".into());
        }
        if !(1 << 20..=1 << 40).contains(&self.vlog_file_size) {
            return bad(format!(
                "vlog_file_size {} must be between 1 MiB and 1 TiB",
                self.vlog_file_size
            ));
        }
        if !(4 << 10..=1 << 30).contains(&self.gc_chunk_size) {
            return bad(format!(
                "gc_chunk_size {} must be between 4 KiB and 1 GiB",
                self.gc_chunk_size
            ));
        }
        if !(0.0..1.0).contains(&self.gc_garbage_ratio) {
            return bad(format!(
                "gc_garbage_ratio {} must be in [0, 1)",
                self.gc_garbage_ratio
            ));
        }
        if self.space_amp_target.is_nan() || self.space_amp_target <= 1.0 {
            return bad(format!(
                "space_amp_target {} must be greater than 1.0 (bytes on disk per live byte; \
                 f64::INFINITY for no target)",
                self.space_amp_target
            ));
        }
        if self.prefetch_threads > 256 || self.scan_prefetch_depth > 4096 {
            return bad(
                "prefetch_threads must be at most 256 and scan_prefetch_depth at most 4096".into(),
            );
        }
        if !(64 << 10..=1 << 30).contains(&self.write_buffer_size) {
            return bad(format!(
                "write_buffer_size {} must be between 64 KiB and 1 GiB",
                self.write_buffer_size
            ));
        }
        if !(256..=1 << 20).contains(&self.block_size) {
            return bad(format!(
                "block_size {} must be between 256 B and 1 MiB",
                self.block_size
            ));
        }
        if !(1..=1024).contains(&self.block_restart_interval) {
            return bad(format!(
                "block_restart_interval {} must be between 1 and 1024",
                self.block_restart_interval
            ));
        }
        if self.bloom_bits_per_key > 64 {
            return bad(format!(
                "bloom_bits_per_key {} must be at most 64",
                self.bloom_bits_per_key
            ));
        }
        if self.max_open_files < 16 {
            return bad(format!(
                "max_open_files {} must be at least 16",
                self.max_open_files
            ));
        }
        if !(64 << 10..=1 << 30).contains(&self.target_file_size) {
            return bad(format!(
                "target_file_size {} must be between 64 KiB and 1 GiB",
                self.target_file_size
            ));
        }
        if self.max_bytes_for_level_base < self.target_file_size {
            return bad("max_bytes_for_level_base must be at least target_file_size".into());
        }
        if self.lwc_max_segments != 0 && !(2..=1024).contains(&self.lwc_max_segments) {
            return bad(format!(
                "lwc_max_segments {} must be 0 (the level size ratio) or between 2 and 1024",
                self.lwc_max_segments
            ));
        }
        if !(0.05..=1.0).contains(&self.lwc_dead_share) {
            return bad(format!(
                "lwc_dead_share {} must be between 0.05 and 1.0",
                self.lwc_dead_share
            ));
        }
        if self.lwc_division_number != 0 && !(2..=64).contains(&self.lwc_division_number) {
            return bad(format!(
                "lwc_division_number {} must be 0 (parts of target_file_size) or between 2 and 64",
                self.lwc_division_number
            ));
        }
        if self.lwc_max_table_bytes != 0
            && !(self.target_file_size..=1 << 40).contains(&self.lwc_max_table_bytes)
        {
            return bad(format!(
                "lwc_max_table_bytes {} must be 0 (4 × target_file_size) or between target_file_size ({}) and 1 TiB",
                self.lwc_max_table_bytes, self.target_file_size
            ));
        }
        if !(2..=100).contains(&self.level_size_multiplier) {
            return bad(format!(
                "level_size_multiplier {} must be between 2 and 100",
                self.level_size_multiplier
            ));
        }
        if !(2..=12).contains(&self.num_levels) {
            return bad(format!(
                "num_levels {} must be between 2 and 12",
                self.num_levels
            ));
        }
        if !(1 <= self.l0_compaction_trigger
            && self.l0_compaction_trigger <= self.l0_slowdown_writes_trigger
            && self.l0_slowdown_writes_trigger <= self.l0_stop_writes_trigger)
        {
            return bad(
                "need 1 <= l0_compaction_trigger <= l0_slowdown_writes_trigger <= l0_stop_writes_trigger"
                    .into(),
            );
        }
        if !(4 << 10..=1 << 30).contains(&self.hashkv_main_segment_size) {
            return bad(format!(
                "hashkv_main_segment_size {} must be between 4 KiB and 1 GiB",
                self.hashkv_main_segment_size
            ));
        }
        if !(4 << 10..=1 << 30).contains(&self.hashkv_log_segment_size) {
            return bad(format!(
                "hashkv_log_segment_size {} must be between 4 KiB and 1 GiB",
                self.hashkv_log_segment_size
            ));
        }
        if !(self.hashkv_reserved_ratio > 0.0 && self.hashkv_reserved_ratio < 1.0) {
            return bad(format!(
                "hashkv_reserved_ratio {} must be in (0, 1)",
                self.hashkv_reserved_ratio
            ));
        }
        if self.value_capacity == Some(0) {
            return bad("value_capacity must be positive (None for the default)".into());
        }
        if self.value_capacity.is_some_and(|c| c > 1 << 50) {
            return bad("value_capacity must be at most 1 PiB".into());
        }
        let cap = self.hashkv_capacity();
        // The geometry checks matter only to the store that uses them (a
        // value log's capacity may be smaller than a main segment).
        if layout == ValueLayout::HashKv
            && (cap < self.hashkv_main_segment_size
                || cap > 1 << 50
                || ((cap as f64 * self.hashkv_reserved_ratio) as u64)
                    < self.hashkv_log_segment_size)
        {
            return bad(format!(
                "value_capacity {cap} must be at most 1 PiB, at least one main segment ({}), and reserve at least one log segment ({})",
                self.hashkv_main_segment_size, self.hashkv_log_segment_size
            ));
        }
        if cap / self.hashkv_main_segment_size.max(1) > 1 << 24 {
            return bad(format!(
                "value_capacity {cap} / hashkv_main_segment_size {} gives more than 16M segment groups",
                self.hashkv_main_segment_size
            ));
        }
        if self.hashkv_write_cache_size > 1 << 30 {
            return bad(format!(
                "hashkv_write_cache_size {} must be at most 1 GiB",
                self.hashkv_write_cache_size
            ));
        }
        if !(1..=1 << 20).contains(&self.band_entries) {
            return bad(format!(
                "band_entries {} must be between 1 and 1048576",
                self.band_entries
            ));
        }
        if self.band_over_provisioning.is_nan() || self.band_over_provisioning <= 0.0 {
            return bad(format!(
                "band_over_provisioning {} must be positive (bytes of room per live byte; \
                 f64::INFINITY for no bound)",
                self.band_over_provisioning
            ));
        }
        if !(4 << 10..=1 << 30).contains(&self.band_bytes) {
            return bad(format!(
                "band_bytes {} must be between 4 KiB and 1 GiB",
                self.band_bytes
            ));
        }
        if self.hash_memo_size > 1 << 30 {
            return bad(format!(
                "hash_memo_size {} must be at most 1 GiB",
                self.hash_memo_size
            ));
        }
        if self.hash_cache_size < 64 << 10 {
            return bad(format!(
                "hash_cache_size {} must be at least 64 KiB",
                self.hash_cache_size
            ));
        }
        if let Some(f) = &self.compaction_filter {
            let name = f.name();
            if name.is_empty() || name.len() > 128 || name.chars().any(char::is_control) {
                return bad(format!(
                    "compaction_filter name {name:?} must be 1 to 128 bytes without control characters"
                ));
            }
        }
        if !(1..=1 << 20).contains(&self.hash_checkpoint_bands) {
            return bad(format!(
                "hash_checkpoint_bands {} must be between 1 and 1048576",
                self.hash_checkpoint_bands
            ));
        }
        if !(64 << 10..=1 << 30).contains(&self.trie_table_size) {
            return bad(format!(
                "trie_table_size {} must be between 64 KiB and 1 GiB",
                self.trie_table_size
            ));
        }
        if self.trie_roll_size < 64 << 10 {
            return bad(format!(
                "trie_roll_size {} must be at least 64 KiB",
                self.trie_roll_size
            ));
        }
        if !(self.trie_split_skew > 0.0 && self.trie_split_skew <= 1.0) {
            return bad(format!(
                "trie_split_skew {} must be a fraction in (0, 1]",
                self.trie_split_skew
            ));
        }
        if let Some(n) = self.trie_fixed_levels {
            if !(1..=8).contains(&n) {
                return bad(format!("trie_fixed_levels {n} must be between 1 and 8"));
            }
            if self.trie_split_skew != 1.0 {
                return bad(format!(
                    "trie_fixed_levels {n} needs trie_split_skew 1.0 (a fixed trie has no skew splits), not {}",
                    self.trie_split_skew
                ));
            }
        }
        for (name, d) in [
            ("trie_span_density", self.trie_span_density),
            ("trie_span_density_memory", self.trie_span_density_memory),
        ] {
            if !(0.0..=1.0).contains(&d) {
                return bad(format!("{name} {d} must be a fraction in [0, 1]"));
            }
        }
        if !(4 << 10..=1 << 30).contains(&self.trie_span_max) {
            return bad(format!(
                "trie_span_max {} must be between 4 KiB and 1 GiB",
                self.trie_span_max
            ));
        }
        if self.trie_scan_pipeline != 0 && !(1 << 20..=1 << 30).contains(&self.trie_scan_pipeline) {
            return bad(format!(
                "trie_scan_pipeline {} must be 0 or between 1 MiB and 1 GiB",
                self.trie_scan_pipeline
            ));
        }
        if !(4 << 10..=self.trie_span_max).contains(&self.trie_span_parallel) {
            return bad(format!(
                "trie_span_parallel {} must be between 4 KiB and trie_span_max ({})",
                self.trie_span_parallel, self.trie_span_max
            ));
        }
        if self.scan_batch_bytes < 64 << 10 {
            return bad(format!(
                "scan_batch_bytes {} must be at least 64 KiB",
                self.scan_batch_bytes
            ));
        }
        if !(64 << 10..=1 << 40).contains(&self.hashkv_journal_size) {
            return bad(format!(
                "hashkv_journal_size {} must be between 64 KiB and 1 TiB",
                self.hashkv_journal_size
            ));
        }
        Ok(())
    }
}

/// Options for a write.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteOptions {
    /// Make the write durable (fsync) before `write` returns. Without it a
    /// returned write survives a process crash but may be lost on power loss.
    pub sync: bool,
}

/// Options for a read.
#[derive(Debug, Clone, Default)]
pub struct ReadOptions<'a> {
    /// Read as of this snapshot (default: the latest state).
    pub snapshot: Option<&'a crate::Snapshot<'a>>,
    /// Do not insert blocks read by this operation into the block cache
    /// (useful for one-off scans). Default false.
    pub dont_fill_cache: bool,
}
