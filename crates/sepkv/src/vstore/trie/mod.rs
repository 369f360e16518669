//! KT-Store's TrieTables, the `trie` layout (KT-Store, NPC '18, §3).
//!
//! Values at least `value_threshold` bytes long go into many **TrieTables**
//! instead of one value log: a [`trie`] over key prefixes routes each key to
//! the table of its leaf, so tables are in key order across the trie and in
//! write order within each table (§3.1–3.2). The index keeps a
//! [`ValuePointer`] `(table id, offset, record length)`.
//!
//! - **Writes** (§3.3): match the longest prefix, create the node and its
//!   table on first use, append the record (checksum, key, sequence number,
//!   value: [`crate::format::value_record`]) to the table; the engine then
//!   inserts the pointer into the LSM-tree. One append hands each touched
//!   table its records before it returns — copied into the table's shared
//!   mapping ([`FileSystem::open_mapped`], `Options::trie_mapped_appends`),
//!   or in one `write(2)` where the file system has no mappings — so an
//!   acknowledged write survives a process crash; [`ValueStore::sync`]
//!   makes them durable. A batch's records go to several tables; the batch stays
//!   atomic because the index applies it (or not) as one WAL record.
//! - **Range queries** (§3.3, [`scan`]): [`ValueStore::read_many`] groups a
//!   scan's pointers by table and reads each table's span `[min offset, max
//!   offset + size]` with one sequential read, tables in parallel; spans
//!   that would be mostly bytes nobody asked for are cut where the pointers
//!   thin out, and pointers left alone are read one by one (the density
//!   rule is in [`scan`]). Point reads read one record.
//! - **Reliability** (§3.5, [`trie`]): the trie and the list of tables
//!   live in the store's own file `TRIE`, an append-only log of checksummed
//!   edits; a change is in it before any value is appended under it, and
//!   it is synced with the tables, so it is durable before any durable
//!   pointer depends on it. On open, each active table is scanned from the
//!   length last known durable to the end of its last intact record (like
//!   the value log's torn tails). Zeros after the last record (a mapped
//!   writer's preallocation, left by a crash) are cut and the table stays
//!   active; a table with a torn tail is cut there, sealed, and never
//!   appended to again. A pointer outside a table's valid range
//!   is not [`ValueStore::contains`]-ed, so the WAL replay stops before it,
//!   and a read of it that fails reads as lost (absent); a checksum or key
//!   mismatch inside it is `Corruption` with file and offset. Recovery
//!   replays the WAL and keeps values already appended as they are (§3.5).
//! - **Adaptive splitting** (beyond the paper, its §3.5 future work): a
//!   leaf that has taken `table_size` bytes splits into children by the
//!   next key byte where its keys differ ([`trie::Trie::split`]); its
//!   table is sealed. TT_IN, and a leaf whose keys are all one key, roll
//!   to a fresh table instead. A leaf whose **write share is skewed**
//!   splits early: every `table_size / 4` bytes appended (an epoch), a
//!   leaf that took more than `split_skew` (default 1/2) of them splits,
//!   provided the trie has at least [`SKEW_MIN_LEAVES`] leaves and the
//!   leaf has taken at least `table_size / 8` bytes (so a young leaf does
//!   not split on a burst). The epoch's counts are kept in memory only; a
//!   split is persisted like any other, before a value depends on it.
//! - **Fixed levels** (the paper's §3.5, with
//!   [`TrieOptions::fixed_levels`] = `Some(n)`): no leaf splits by size or
//!   skew; a full table rolls in its leaf. A leaf with fewer than `n`
//!   nodes above it ([`trie::Trie::level`]) holds one key: when another
//!   key reaches it, before that key's value is written, it splits on the
//!   first byte where the two differ and the key is routed again
//!   (`place_fixed`). So each level fans out on a byte where keys differ,
//!   learned from the first keys, and shared bytes stay compressed edges.
//! - **Rolling leaves** (beyond the paper, whose leaves keep one table,
//!   §3.2): a leaf's active table is sealed and replaced every
//!   `roll_size` bytes, before the leaf has taken `table_size`; the leaf
//!   counts the bytes it rolled (persisted in the trie file) to know when
//!   it splits. The active table is the one part of a key range still in
//!   write order, and a scan reads all of it as one span; the sealed ones
//!   are sorted by background GC ([`gc`], "Sorting sealed tables") and
//!   read as dense spans. So `roll_size` bounds what a scan reads beyond
//!   the values it asked for. Measured on a 1 GiB store whose reads reach
//!   the device (`docs/notebook/ktstore-trietables.md`), 512 KiB rolls cut a 100-entry scan's
//!   read amplification from 5.8 to 1.3.
//! - **GC per TrieTable** (beyond the paper, [`gc`]): garbage is tracked
//!   per table (fed by compaction through [`ValueStore::note_garbage`]); a
//!   step takes the table with the most, rewrites its live values **in key
//!   order** into a new sealed table through the index's compare-and-set,
//!   and deletes the old table once the relocations and the writes that made
//!   the rest dead are durable and no snapshot older than the relocation is
//!   alive. `value_capacity` bounds the bytes the tables hold; a user append
//!   past it fails with `ValueStoreFull` and the engine runs GC and retries.
//!
//! # Files
//! `NNNNNN.tt` TrieTables (format in [`table`]), `TRIE` the trie file
//! (format in [`trie`]). Active tables keep their files open for
//! appending, at most `max_open_writers` (`Options::max_open_files`) of
//! them: past that, the least recently appended tables whose data is
//! synced are closed and reopened at their end on their next append (a
//! table with unsynced data stays open until the next sync, which then
//! closes the surplus). A mapped writer's file size runs up to 1 MiB
//! (a hole) ahead of its table's end; closing (or sealing) cuts it. Up to 512 read handles are cached besides.
//!
//! Thread-safety: appends, syncs and the catalog are serialised by one
//! internal lock, GC steps by another; reads take the first only after a
//! read fails (to tell a deleted table from damage) and run concurrently
//! with everything else.

pub mod gc;
pub mod pipeline;
pub mod scan;
pub mod table;
// The layout is named after its trie; the module holding the trie itself
// keeps the plain name too.
#[allow(clippy::module_inception)]
pub mod trie;

use super::{
    GcOutcome, IndexReader, IndexRelocator, ReadLatency, SpaceStats, ValuePointer, ValueRecord,
    ValueStore,
};
use crate::error::{Error, IoContext, Result};
use crate::format::value_record::{self, Kind};
use crate::fs::{FileSystem, IoCategory, IoStats};
use crate::vstore::prefetch::Prefetcher;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use table::{table_path, Handles, TableInfo, TableState, TableWriter};
use trie::{Catalog, Edit, Persisted, Place, TrieLog};

/// Knobs of the trie layout (from `Options`).
#[derive(Debug, Clone)]
pub struct TrieOptions {
    /// Values shorter than this stay inline in the index (bytes).
    pub value_threshold: usize,
    /// Bytes a leaf takes over all its tables before it splits, or size at
    /// which TT_IN's table rolls (bytes).
    pub table_size: u64,
    /// Size at which a leaf's active table rolls before the leaf splits
    /// (bytes; at or above `table_size`, never).
    pub roll_size: u64,
    /// Write share past which a leaf splits early (adaptive splitting by
    /// write skew; `1.0` = never; see [`TrieStore`]'s module docs).
    pub split_skew: f64,
    /// Fixed trie levels (KT-Store §3.5): leaves never split by size or
    /// skew; a leaf above this many levels holds one key and fans out when
    /// a second arrives. `None` = adaptive splitting.
    pub fixed_levels: Option<u8>,
    /// Background GC sorts sealed tables in write order by key (see
    /// [`TrieStore`]'s module docs, "Sorting sealed tables").
    pub sort_sealed: bool,
    /// Threads reading spans and values in parallel for scans (0 = none).
    pub prefetch_threads: usize,
    /// Most active tables kept open for appending (clean ones beyond are
    /// closed, least recently appended first, and reopened on use).
    pub max_open_writers: usize,
    /// Most bytes the tables may hold before a user append is refused with
    /// `ValueStoreFull`; `None` = unbounded. GC copies are exempt.
    pub capacity: Option<u64>,
    /// How range queries cut each table's requested records into span
    /// reads (see [`scan`]).
    pub spans: scan::SpanRules,
    /// Memory budget of a limited scan's read pipeline (bytes; 0 = no
    /// pipeline: the scan reads its range in one batch). See [`pipeline`].
    pub scan_pipeline: u64,
    /// The scan pipeline reads its spans with direct I/O while value
    /// reads reach the device (see [`pipeline`], "Direct span reads").
    pub scan_direct: bool,
    /// Active tables are appended to through shared memory mappings
    /// ([`FileSystem::open_mapped`]) where the file system has them.
    pub mapped_appends: bool,
}

impl TrieOptions {
    /// The trie knobs of `o`.
    pub fn from_options(o: &crate::Options) -> Self {
        TrieOptions {
            value_threshold: o.value_threshold,
            table_size: o.trie_table_size,
            roll_size: o.trie_roll_size,
            split_skew: o.trie_split_skew,
            fixed_levels: o.trie_fixed_levels,
            sort_sealed: o.trie_sort_sealed,
            prefetch_threads: o.prefetch_threads,
            max_open_writers: o.max_open_files,
            capacity: o.value_capacity,
            spans: scan::SpanRules {
                density: o.trie_span_density,
                density_memory: o.trie_span_density_memory,
                max: o.trie_span_max,
                parallel: o.trie_span_parallel,
            },
            scan_pipeline: o.trie_scan_pipeline,
            scan_direct: o.trie_scan_direct,
            mapped_appends: o.trie_mapped_appends,
        }
    }
}

/// Fewest leaves for the write-skew rule: with fewer, a leaf's share of
/// the writes says little about skew (a lone root takes them all).
pub const SKEW_MIN_LEAVES: usize = 4;

/// Durable bytes appended since the active tables' durable lengths were
/// last recorded in the trie file, past which [`ValueStore::sync`] records
/// them (so recovery scans at most about this much).
const RECORD_DURABLE_EVERY: u64 = 64 << 20;

/// Largest scratch buffer an append keeps for the next one (bytes).
const SCRATCH_KEEP: usize = 1 << 20;

/// A table retired by GC, deleted once no reader can reach it.
struct PendingFree {
    /// Readers at this sequence number or later no longer reach it.
    seq: u64,
    table: u64,
}

/// Everything the internal lock guards.
struct State {
    cat: Catalog,
    tables: BTreeMap<u64, TableInfo>,
    /// Which place appends to each active table.
    owners: HashMap<u64, Place>,
    writers: HashMap<u64, TableWriter>,
    /// Tables sealed since the last sync, with data still to sync.
    sealing: Vec<(u64, TableWriter)>,
    log: TrieLog,
    /// Tables were created since the directory was last synced.
    dir_dirty: bool,
    pending: Vec<PendingFree>,
    /// Bytes synced since durable lengths were last recorded.
    synced_unrecorded: u64,
    /// Appends so far (the clock of [`TableWriter::last_use`]).
    appends: u64,
    /// Bytes the tables hold (the sum of their valid lengths).
    held: u64,
    /// Of those, bytes in tables whose records are in key order.
    sorted_bytes: u64,
    /// User bytes appended in the current skew epoch, and their share per
    /// table (adaptive splitting by write skew; in memory only).
    epoch_bytes: u64,
    epoch_by_table: HashMap<u64, u64>,
    /// Append handles opened since the surplus over the cap was last
    /// trimmed.
    opened_since_trim: usize,
    /// Where an append encodes each table's records before writing them
    /// (kept between appends, up to [`SCRATCH_KEEP`] bytes).
    scratch: Vec<u8>,
    /// Levels of leaves routed to under fixed levels.
    leaf_levels: LeafLevels,
}

/// Levels of leaves ([`trie::Trie::level`]), remembered while the trie has
/// `nodes` nodes: a leaf's level changes only when a node is inserted
/// above it, which adds a node.
#[derive(Default)]
struct LeafLevels {
    nodes: usize,
    by_leaf: HashMap<Vec<u8>, usize>,
}

impl State {
    /// Recounts `held` and `sorted_bytes` from the tables.
    fn recount(&mut self) {
        self.held = self.tables.values().map(|t| t.valid_len).sum();
        self.sorted_bytes = self
            .tables
            .values()
            .filter(|t| t.sorted)
            .map(|t| t.valid_len)
            .sum();
    }

    /// Keeps the open append handles at most `cap`: closes the least
    /// recently appended clean ones (a dirty one stays open until a sync
    /// has made its data durable, so the cap can be passed between syncs).
    /// Unless `now`, it trims only once an eighth of `cap` handles were
    /// opened since the last trim, so that appends to more active tables
    /// than the cap do not each pay a pass over every handle.
    fn close_idle_writers(&mut self, cap: usize, now: bool) {
        let cap = cap.max(1);
        let st = self;
        if st.writers.len() <= cap {
            return;
        }
        if !now && st.opened_since_trim < (cap / 8).max(1) {
            return;
        }
        st.opened_since_trim = 0;
        let open = st.writers.values().filter(|w| w.file.is_some()).count();
        if open <= cap {
            return;
        }
        let mut idle: Vec<(u64, u64)> = st
            .writers
            .iter()
            .filter(|(_, w)| w.file.is_some() && !w.dirty)
            .map(|(&id, w)| (w.last_use, id))
            .collect();
        idle.sort_unstable();
        for (_, id) in idle.into_iter().take(open - cap) {
            if let Some(w) = st.writers.get_mut(&id) {
                w.file = None;
            }
        }
    }

    /// Share of the held bytes in key-ordered tables, in thousandths.
    fn sorted_permille(&self) -> u64 {
        (self.sorted_bytes * 1000)
            .checked_div(self.held)
            .unwrap_or(0)
    }

    /// Applies catalog edits (trie edits are applied by the trie itself)
    /// and appends the group to the trie file.
    fn commit(&mut self, edits: &[Edit]) -> Result<()> {
        if edits.is_empty() {
            return Ok(());
        }
        for e in edits {
            if !matches!(e, Edit::Node { .. } | Edit::InternalTable(_)) {
                self.cat.apply(e);
            }
        }
        self.log.append(edits)?;
        self.log.maybe_compact(&self.cat)?;
        Ok(())
    }
}

#[derive(Default)]
pub(crate) struct Counters {
    splits: AtomicU64,
    /// Of the splits, those the write-skew rule made.
    skew_splits: AtomicU64,
    rolls: AtomicU64,
    span_reads: AtomicU64,
    span_bytes: AtomicU64,
    span_values: AtomicU64,
    single_reads: AtomicU64,
    /// Per batch of a range query, the tables it read (a table read in
    /// several spans of one batch counts once).
    span_tables: AtomicU64,
    /// Most bytes the scan pipelines held at once.
    pipeline_peak: AtomicU64,
    /// Pipeline reads running now.
    pipeline_running: AtomicU64,
    gc_runs: AtomicU64,
    gc_bytes_read: AtomicU64,
    gc_bytes_rewritten: AtomicU64,
    gc_bytes_freed: AtomicU64,
    /// See [`ValueStore::garbage_found`].
    garbage_found: AtomicU64,
}

/// The read side, shared with the scan workers.
pub(crate) struct Reader {
    dir: PathBuf,
    fs: Arc<dyn FileSystem>,
    stats: Arc<IoStats>,
    handles: Handles,
    /// How long single value reads take (steers parallel reads).
    latency: ReadLatency,
    /// Direct-read (`O_DIRECT`) handles for the span reads of scan
    /// pipelines (`Options::trie_scan_direct`); `None` when off, or when
    /// the file system has no direct reads.
    direct: Option<Handles>,
    /// Cleared when a direct read was refused (a file system that cannot
    /// read a table directly): spans are read buffered from then on.
    direct_ok: std::sync::atomic::AtomicBool,
    /// Span reads made with direct I/O.
    direct_reads: AtomicU64,
}

impl Reader {
    fn path(&self, id: u64) -> PathBuf {
        table_path(&self.dir, id)
    }

    /// Reads and checks the record at `ptr` (known inside its table).
    fn read_record(&self, key: &[u8], ptr: &ValuePointer) -> Result<Vec<u8>> {
        let h = self.handles.get(ptr.file_id)?;
        let mut buf = vec![0u8; ptr.length as usize];
        self.latency
            .time(|| h.read_exact_at(ptr.offset, &mut buf))
            .map_err(|e| Error::io(self.path(ptr.file_id), e))?;
        self.stats
            .add_read(IoCategory::ValueStore, buf.len() as u64);
        let range = table::check_record(|| self.path(ptr.file_id), ptr, key, &buf)?;
        Ok(table::into_value(buf, range))
    }
}

/// The TrieTable value store. See the module docs.
pub struct TrieStore {
    opts: TrieOptions,
    reader: Arc<Reader>,
    state: Mutex<State>,
    gc_lock: Mutex<()>,
    counters: Arc<Counters>,
    prefetch: Arc<Prefetcher>,
    /// [`State::sorted_permille`], readable without the lock.
    sorted_permille: AtomicU64,
}

/// Where the reconciliation of open left a table.
enum Found {
    /// Keep it active, appending after `valid_len`.
    Active(TableInfo),
    /// Seal it at its valid length (torn tail, or no owner).
    Seal(TableInfo),
}

impl TrieStore {
    /// Opens the store in `dir`, creating it when the directory holds no
    /// TrieTables.
    ///
    /// # Errors
    /// `Corruption` for a damaged trie file, a missing one while tables
    /// exist, or an active table shorter than its recorded durable length;
    /// `Io`.
    pub fn open(
        dir: &Path,
        fs: Arc<dyn FileSystem>,
        stats: Arc<IoStats>,
        opts: TrieOptions,
    ) -> Result<TrieStore> {
        let on_disk: BTreeMap<u64, String> = fs
            .list(dir)
            .ctx(dir)?
            .into_iter()
            .filter_map(|n| Some((table::parse_name(&n)?, n)))
            .collect();
        let (mut cat, log, _fresh) =
            TrieLog::open(dir, fs.clone(), stats.clone(), on_disk.is_empty())?;
        let mut edits = Vec::new();
        let mut removed = false;
        // Files the catalog does not list were created by a change that
        // never reached the trie file: no pointer can depend on them.
        for (&id, name) in &on_disk {
            if !cat.tables.contains_key(&id) {
                let p = dir.join(name);
                fs.remove(&p).ctx(&p)?;
                removed = true;
            }
        }
        let mut tables = BTreeMap::new();
        let mut writers = HashMap::new();
        let mut owners = HashMap::new();
        let listed: Vec<(u64, Persisted)> = cat.tables.iter().map(|(&i, &s)| (i, s)).collect();
        for (id, persisted) in listed {
            let path = table_path(dir, id);
            let size = if on_disk.contains_key(&id) {
                Some(fs.file_size(&path).ctx(&path)?)
            } else {
                None
            };
            match (persisted, size) {
                (Persisted::Sealed { len, sorted }, Some(size)) if size >= len => {
                    if size > len {
                        // Bytes past a sealed table's length are never
                        // read: the zeros a mapped writer preallocated
                        // (the process ended before it cut them), or a
                        // torn tail found earlier. Cutting them only
                        // frees space, so a failure is no error.
                        let _ = fs.truncate_synced(&path, len);
                    }
                    tables.insert(id, TableInfo::sealed(len, sorted));
                }
                // Sealed, but a power loss took data the next sync would
                // have made durable (the trie file reached the disk first,
                // which only the OS's own write-back does): no durable
                // pointer reaches past what is left.
                (Persisted::Sealed { .. }, Some(size)) => {
                    let found = Self::recover_active(fs.as_ref(), &stats, &path, 0, size)?;
                    let (Found::Active(info) | Found::Seal(info)) = found;
                    fs.open_append(&path)
                        .and_then(|mut f| f.sync())
                        .ctx(&path)?;
                    edits.push(Edit::Table {
                        id,
                        state: Persisted::Sealed {
                            len: info.valid_len,
                            sorted: info.sorted,
                        },
                    });
                    tables.insert(id, TableInfo::sealed(info.valid_len, info.sorted));
                }
                // Created, but its directory entry never became durable: a
                // power loss took it before any pointer into it was synced.
                (Persisted::Sealed { len, .. }, None) => {
                    tables.insert(id, TableInfo::sealed(0, true));
                    if len > 0 {
                        edits.push(Edit::Table {
                            id,
                            state: Persisted::Sealed {
                                len: 0,
                                sorted: true,
                            },
                        });
                    }
                }
                (Persisted::Active { .. }, None) => {
                    tables.insert(id, TableInfo::sealed(0, true));
                    edits.push(Edit::Table {
                        id,
                        state: Persisted::Sealed {
                            len: 0,
                            sorted: true,
                        },
                    });
                }
                (Persisted::Active { durable }, Some(size)) => {
                    if size < durable {
                        return Err(Error::corruption(
                            &path,
                            size,
                            format!("TrieTable is shorter than its durable length {durable}"),
                        ));
                    }
                    let found = Self::recover_active(fs.as_ref(), &stats, &path, durable, size)?;
                    match found {
                        Found::Active(info) => {
                            tables.insert(id, info);
                        }
                        Found::Seal(info) => {
                            // Cut the torn bytes (never read: no pointer
                            // reaches past the valid length) and make the
                            // intact part durable before it is recorded
                            // as final.
                            fs.truncate_synced(&path, info.valid_len).ctx(&path)?;
                            edits.push(Edit::Table {
                                id,
                                state: Persisted::Sealed {
                                    len: info.valid_len,
                                    sorted: info.sorted,
                                },
                            });
                            tables.insert(id, info);
                        }
                    }
                }
            }
        }
        // Attach the active tables to their places; detach places whose
        // table is not active.
        let mut places: Vec<Place> = cat
            .trie
            .leaves()
            .map(|(p, _)| Place::Leaf(p.to_vec()))
            .collect();
        places.push(Place::Internal);
        for place in places {
            let Some(t) = cat.trie.table(&place) else {
                continue;
            };
            match tables.get(&t) {
                Some(info) if info.state == TableState::Active && !owners.contains_key(&t) => {
                    owners.insert(t, place);
                }
                _ => cat.trie.set_table(&place, None, &mut edits),
            }
        }
        for (&id, info) in tables.iter_mut() {
            if info.state != TableState::Active {
                continue;
            }
            if !owners.contains_key(&id) {
                // Active in the catalog but owned by no node: seal it.
                info.state = TableState::Sealed;
                edits.push(Edit::Table {
                    id,
                    state: Persisted::Sealed {
                        len: info.valid_len,
                        sorted: info.sorted,
                    },
                });
                continue;
            }
            let path = table_path(dir, id);
            writers.insert(
                id,
                TableWriter {
                    file: Some(
                        open_writer(
                            fs.as_ref(),
                            &path,
                            Some(info.valid_len),
                            opts.mapped_appends,
                        )
                        .ctx(&path)?,
                    ),
                    dirty: false,
                    last_use: 0,
                },
            );
        }
        let mut st = State {
            cat,
            tables,
            owners,
            writers,
            sealing: Vec::new(),
            log,
            dir_dirty: false,
            pending: Vec::new(),
            synced_unrecorded: 0,
            appends: 0,
            held: 0,
            sorted_bytes: 0,
            epoch_bytes: 0,
            epoch_by_table: HashMap::new(),
            opened_since_trim: 0,
            scratch: Vec::new(),
            leaf_levels: LeafLevels::default(),
        };
        st.recount();
        st.close_idle_writers(opts.max_open_writers, true);
        st.commit(&edits)?;
        st.log.sync()?;
        if removed {
            fs.sync_dir(dir).ctx(dir)?;
        }
        let scan_direct = opts.scan_direct;
        Ok(TrieStore {
            prefetch: Arc::new(Prefetcher::new(opts.prefetch_threads)),
            opts,
            reader: Arc::new(Reader {
                dir: dir.to_path_buf(),
                handles: Handles::new(dir, fs.clone()),
                // A long scan reads a few hundred tables at once at most;
                // a quarter of the buffered handles' budget holds them.
                direct: scan_direct
                    .then(|| fs.with_direct_reads().ok())
                    .flatten()
                    .map(|d| Handles::with_capacity(dir, d, crate::fs::read_handle_budget() / 4)),
                direct_ok: std::sync::atomic::AtomicBool::new(true),
                direct_reads: AtomicU64::new(0),
                fs,
                stats,
                latency: ReadLatency::default(),
            }),
            sorted_permille: AtomicU64::new(st.sorted_permille()),
            state: Mutex::new(st),
            gc_lock: Mutex::new(()),
            counters: Arc::default(),
        })
    }

    /// Scans an active table from its durable length: where its intact
    /// records end, and the key bounds of what was scanned.
    fn recover_active(
        fs: &dyn FileSystem,
        stats: &IoStats,
        path: &Path,
        durable: u64,
        size: u64,
    ) -> Result<Found> {
        let mut info = TableInfo::new_active();
        info.bounds_from = durable;
        info.synced_len = durable;
        let end = table::scan(
            fs,
            path,
            durable,
            size,
            stats,
            IoCategory::ValueStore,
            |_, r| {
                info.note_key(r.key);
                Ok(())
            },
        )?;
        info.valid_len = end.valid_len;
        // Order is known only for a table scanned from its start.
        info.sorted &= durable == 0;
        if end.zero_tail {
            // Zeros after the last record: space a mapped writer
            // preallocated (or data a power loss never wrote), not a
            // damaged record. Cut, durably (so that the file's size is
            // its length at a later open), the table stays active.
            fs.truncate_synced(path, end.valid_len).ctx(path)?;
            return Ok(Found::Active(info));
        }
        if end.torn {
            info.state = TableState::Sealed;
            info.synced_len = end.valid_len;
            return Ok(Found::Seal(info));
        }
        Ok(Found::Active(info))
    }

    fn path(&self, id: u64) -> PathBuf {
        self.reader.path(id)
    }

    /// Creates the active table of `place`. State locked.
    fn new_table(&self, st: &mut State, place: &Place, edits: &mut Vec<Edit>) -> Result<u64> {
        let id = st.cat.next_id;
        let path = self.path(id);
        let file = open_writer(
            self.reader.fs.as_ref(),
            &path,
            None,
            self.opts.mapped_appends,
        )
        .ctx(&path)?;
        st.dir_dirty = true;
        st.opened_since_trim += 1;
        st.cat.next_id = id + 1;
        st.appends += 1;
        st.writers.insert(
            id,
            TableWriter {
                file: Some(file),
                dirty: false,
                last_use: st.appends,
            },
        );
        st.tables.insert(id, TableInfo::new_active());
        st.owners.insert(id, place.clone());
        st.cat.trie.set_table(place, Some(id), edits);
        edits.push(Edit::Table {
            id,
            state: Persisted::Active { durable: 0 },
        });
        Ok(id)
    }

    /// Closes table `id` for appends: marks it sealed and records its final
    /// length. Its data is synced with the next [`ValueStore::sync`],
    /// before the trie file (which then claims the length). The caller
    /// detaches it from its place. State locked.
    fn seal_locked(&self, st: &mut State, id: u64, edits: &mut Vec<Edit>) {
        if let Some(w) = st.writers.remove(&id) {
            if w.dirty {
                st.sealing.push((id, w));
            }
        }
        st.owners.remove(&id);
        if let Some(info) = st.tables.get_mut(&id) {
            info.state = TableState::Sealed;
            edits.push(Edit::Table {
                id,
                state: Persisted::Sealed {
                    len: info.valid_len,
                    sorted: info.sorted,
                },
            });
        }
    }

    /// The smallest and largest key in table `id`, read from the table when
    /// the bounds kept in memory do not cover all of it. State locked.
    fn key_bounds(&self, st: &State, id: u64) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let Some(info) = st.tables.get(&id) else {
            return Ok(None);
        };
        if info.bounds_from == 0 {
            return Ok(info.bounds.clone());
        }
        let mut b = TableInfo::new_active();
        table::scan(
            self.reader.fs.as_ref(),
            &self.path(id),
            0,
            info.valid_len,
            &self.reader.stats,
            IoCategory::ValueStore,
            |_, r| {
                b.note_key(r.key);
                Ok(())
            },
        )?;
        Ok(b.bounds)
    }

    /// Bytes the place owning active table `id` has taken: for a leaf, its
    /// rolled bytes plus the table's length; for TT_IN, the table's
    /// length. State locked.
    fn taken(&self, st: &State, id: u64, place: &Place) -> u64 {
        let len = st.tables.get(&id).map_or(0, |t| t.valid_len);
        st.cat.trie.rolled(place).saturating_add(len)
    }

    /// Whether active table `id` must be sealed now: its leaf has taken
    /// `table_size` bytes (the leaf splits), or the table itself passed
    /// `roll_size` (a leaf's) or `table_size` (TT_IN's). State locked.
    fn table_full(&self, st: &State, id: u64) -> bool {
        let (Some(info), Some(place)) = (st.tables.get(&id), st.owners.get(&id)) else {
            return false;
        };
        match place {
            Place::Leaf(_) => {
                info.valid_len >= self.opts.roll_size.min(self.opts.table_size)
                    || (self.opts.fixed_levels.is_none()
                        && st.cat.trie.rolled(place).saturating_add(info.valid_len)
                            >= self.opts.table_size)
            }
            Place::Internal => info.valid_len >= self.opts.table_size,
        }
    }

    /// Seals active table `id`, which [`TrieStore::table_full`] or the
    /// write-skew rule (`skewed`) picked: a leaf that has taken
    /// `table_size` bytes, or a skewed one, splits (adaptive splitting);
    /// otherwise the table rolls, and a leaf adds its length to its rolled
    /// bytes. A leaf that cannot split (its keys are all one key) rolls and
    /// starts counting afresh; with `skewed` it is left as it is. State
    /// locked.
    fn split_or_roll(&self, st: &mut State, id: u64, skewed: bool) -> Result<()> {
        let Some(place) = st.owners.get(&id).cloned() else {
            return Ok(());
        };
        let taken = self.taken(st, id, &place);
        let mut edits = Vec::new();
        // A fixed trie (KT-Store §3.5) never splits a leaf: its table rolls.
        let wants_split =
            self.opts.fixed_levels.is_none() && (skewed || taken >= self.opts.table_size);
        let split = match &place {
            Place::Leaf(p) if wants_split => match self.key_bounds(st, id)? {
                Some((lo, hi)) => st.cat.trie.split(p, &lo, &hi, &mut edits),
                None => false,
            },
            _ => false,
        };
        if split {
            self.counters.splits.fetch_add(1, Ordering::Relaxed);
            if skewed {
                self.counters.skew_splits.fetch_add(1, Ordering::Relaxed);
            }
            self.seal_locked(st, id, &mut edits);
            return st.commit(&edits);
        }
        if skewed {
            return Ok(());
        }
        self.counters.rolls.fetch_add(1, Ordering::Relaxed);
        let rolled = if wants_split || self.opts.fixed_levels.is_some() {
            0
        } else {
            taken
        };
        self.roll_locked(st, id, &place, rolled)
    }

    /// Detaches active table `id` from `place`, whose rolled bytes (a
    /// leaf's) become `rolled`, seals it and logs both in one edit group;
    /// the place's next write makes a new table. State locked.
    fn roll_locked(&self, st: &mut State, id: u64, place: &Place, rolled: u64) -> Result<()> {
        let mut edits = Vec::new();
        st.cat.trie.roll(place, rolled, &mut edits);
        self.seal_locked(st, id, &mut edits);
        st.commit(&edits)
    }

    /// Appends users' values, each to the table its key routes to, and
    /// returns their pointers.
    fn append_values(&self, records: &[ValueRecord<'_>]) -> Result<Vec<ValuePointer>> {
        let mut st = self.state.lock();
        if let Some(cap) = self.opts.capacity {
            let need: u64 = records
                .iter()
                .map(|r| value_record::record_len(r.key, r.value) as u64)
                .sum();
            let held = st.held;
            if held + need > cap {
                return Err(Error::ValueStoreFull(format!(
                    "the TrieTables hold {held} bytes and {need} more would pass value_capacity {cap}; \
                     GC could not free enough (delete data or reopen with a larger value_capacity)"
                )));
            }
        }
        // Route every record (creating nodes and tables on first use), and
        // log the trie's changes before any value depends on them.
        let mut edits = Vec::new();
        let mut targets = Vec::with_capacity(records.len());
        // Fixed levels: keys routed in this batch to leaves above the fixed
        // levels, and the tables those leaves gave up while this batch
        // already routed records to them (sealed once they are written).
        let mut shallow: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        let mut detached: Vec<u64> = Vec::new();
        for r in records {
            let place = match self.opts.fixed_levels {
                Some(levels) => self.place_fixed(
                    &mut st,
                    r.key,
                    levels,
                    &mut shallow,
                    &mut detached,
                    &mut edits,
                )?,
                None => st.cat.trie.place(r.key, &mut edits),
            };
            let id = match st.cat.trie.table(&place) {
                Some(id) => id,
                None => self.new_table(&mut st, &place, &mut edits)?,
            };
            targets.push(id);
        }
        st.commit(&edits)?;
        // The records grouped by table, in batch order within each (a
        // stable sort), so that each table takes its records in one write.
        let mut order: Vec<usize> = (0..records.len()).collect();
        if records.len() > 1 {
            order.sort_by_key(|&i| targets[i]);
        }
        let mut ptrs = vec![ValuePointer::default(); records.len()];
        // Each table's records are encoded into the store's one scratch
        // buffer and written from it.
        let mut buf = std::mem::take(&mut st.scratch);
        let skew_on = self.opts.split_skew < 1.0 && self.opts.fixed_levels.is_none();
        st.appends += 1;
        let tick = st.appends;
        let mut touched: Vec<u64> = Vec::with_capacity(1);
        let mut rest = &order[..];
        while let Some(&first) = rest.first() {
            let id = targets[first];
            let n_recs = rest.iter().take_while(|&&i| targets[i] == id).count();
            let (group, tail) = rest.split_at(n_recs);
            rest = tail;
            let st = &mut *st;
            let Some(info) = st.tables.get_mut(&id) else {
                return Err(Error::corruption(
                    self.path(id),
                    0,
                    "active TrieTable unknown",
                ));
            };
            let base = info.valid_len;
            let was_sorted = info.sorted;
            buf.clear();
            for &i in group {
                let r = &records[i];
                let offset = base + buf.len() as u64;
                value_record::encode(&mut buf, Kind::Value, 0, r.key, r.seq, r.value);
                ptrs[i] = ValuePointer {
                    file_id: id,
                    offset,
                    length: (base + buf.len() as u64 - offset) as u32,
                    aux: 0,
                };
                info.note_key(r.key);
            }
            let w = st.writers.get_mut(&id).ok_or_else(|| {
                Error::corruption(self.path(id), 0, "active TrieTable has no writer")
            })?;
            let file = match &mut w.file {
                Some(f) => f,
                // Closed under the handle cap, clean: reopen at its end.
                None => {
                    st.opened_since_trim += 1;
                    let path = self.path(id);
                    let file = open_writer(
                        self.reader.fs.as_ref(),
                        &path,
                        Some(base),
                        self.opts.mapped_appends,
                    )
                    .ctx(&path)?;
                    w.file.insert(file)
                }
            };
            file.append_flush(&buf)
                .map_err(|e| Error::io(self.path(id), e))?;
            w.dirty = true;
            w.last_use = tick;
            let n = buf.len() as u64;
            self.reader.stats.add_written(IoCategory::ValueStore, n);
            let mut delta: i64 = 0;
            if let Some(info) = st.tables.get_mut(&id) {
                let old = info.valid_len;
                info.valid_len += n;
                if info.sorted {
                    delta = n as i64;
                } else if was_sorted {
                    delta = -(old as i64);
                }
            }
            st.held += n;
            st.sorted_bytes = st.sorted_bytes.saturating_add_signed(delta);
            if skew_on {
                st.epoch_bytes += n;
                *st.epoch_by_table.entry(id).or_default() += n;
            }
            touched.push(id);
        }
        // Keep the scratch buffer unless one large batch grew it.
        if buf.capacity() <= SCRATCH_KEEP {
            st.scratch = buf;
        }
        self.publish_order(&st);
        if !detached.is_empty() {
            let mut edits = Vec::new();
            for id in detached {
                self.seal_locked(&mut st, id, &mut edits);
            }
            st.commit(&edits)?;
        }
        let full: Vec<u64> = touched
            .into_iter()
            .filter(|&id| self.table_full(&st, id))
            .collect();
        let skewed = self.skewed_leaves(&mut st, &full);
        for id in full {
            self.split_or_roll(&mut st, id, false)?;
        }
        for id in skewed {
            self.split_or_roll(&mut st, id, true)?;
        }
        st.close_idle_writers(self.opts.max_open_writers, false);
        Ok(ptrs)
    }

    /// Routes `key` in a trie of `levels` fixed levels (KT-Store §3.5). A
    /// leaf with fewer than `levels` internal nodes above it holds one key
    /// only: when `key` is another one, the leaf becomes internal, fanning
    /// out on the first byte where the two differ ([`trie::Trie::split`]),
    /// and the key is routed again. `shallow` holds the key each such leaf
    /// took in this batch; a table the leaf gave up is detached from the
    /// trie here and pushed to `detached`, to be sealed once this batch's
    /// records are written. State locked.
    fn place_fixed(
        &self,
        st: &mut State,
        key: &[u8],
        levels: u8,
        shallow: &mut HashMap<Vec<u8>, Vec<u8>>,
        detached: &mut Vec<u64>,
        edits: &mut Vec<Edit>,
    ) -> Result<Place> {
        // Each split adds a level, so this ends within `levels` rounds;
        // the bound guards against a trie file with odd nodes.
        // Most keys reach a leaf at the fixed depth, found with one lookup
        // and its level remembered.
        if let Some(leaf) = st.cat.trie.leaf_of(key) {
            let nodes = st.cat.trie.nodes();
            let levels_known = &mut st.leaf_levels;
            if levels_known.nodes != nodes {
                // Only a new node moves an existing leaf down.
                levels_known.nodes = nodes;
                levels_known.by_leaf.clear();
            }
            let level = match levels_known.by_leaf.get(leaf) {
                Some(&l) => l,
                None => {
                    let l = st.cat.trie.level(leaf);
                    levels_known.by_leaf.insert(leaf.to_vec(), l);
                    l
                }
            };
            debug_assert_eq!(level, st.cat.trie.level(leaf));
            if level >= usize::from(levels) {
                return Ok(Place::Leaf(leaf.to_vec()));
            }
        }
        for _ in 0..=usize::from(levels) + 1 {
            let (place, level) = st.cat.trie.place_with_level(key, edits);
            let Place::Leaf(p) = &place else {
                return Ok(place);
            };
            debug_assert_eq!(level, st.cat.trie.level(p));
            if level >= usize::from(levels) {
                return Ok(place);
            }
            // The one key the leaf holds: from this batch, else from its
            // active table.
            let table = st.cat.trie.table(&place);
            let held = match shallow.get(p) {
                Some(k) => Some((k.clone(), k.clone())),
                None => match table {
                    Some(id) => self.key_bounds_cached(st, id)?,
                    None => None,
                },
            };
            let other = match held {
                Some((lo, hi)) if lo != key || hi != key => Some((lo, hi)),
                _ => None,
            };
            let Some((lo, hi)) = other else {
                shallow.insert(p.clone(), key.to_vec());
                return Ok(place);
            };
            let lo = lo.as_slice().min(key).to_vec();
            let hi = hi.as_slice().max(key).to_vec();
            if !st.cat.trie.split(p, &lo, &hi, edits) {
                return Ok(place);
            }
            self.counters.splits.fetch_add(1, Ordering::Relaxed);
            shallow.remove(p);
            if let Some(id) = table {
                // The node is internal now; the table stays open until
                // this batch's records routed to it are written.
                st.owners.remove(&id);
                detached.push(id);
            }
        }
        Ok(st.cat.trie.place(key, edits))
    }

    /// [`TrieStore::key_bounds`], keeping bounds read from the table in
    /// memory so they are read once. State locked.
    fn key_bounds_cached(&self, st: &mut State, id: u64) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let b = self.key_bounds(st, id)?;
        if let Some(info) = st.tables.get_mut(&id) {
            info.bounds = b.clone();
            info.bounds_from = 0;
        }
        Ok(b)
    }

    /// Adaptive splitting by write skew (beyond KT-Store §3.5): at the end
    /// of each epoch of `table_size / 4` appended bytes, the active leaf
    /// tables (not in `full`) that took more than `split_skew` of the
    /// epoch's bytes, while the trie has at least [`SKEW_MIN_LEAVES`]
    /// leaves and the leaf has taken at least `table_size / 8` bytes; then a
    /// new epoch begins. The leaves returned split like full ones, so a
    /// range that draws most writes gets narrower tables — and denser
    /// spans — before its table fills. State locked.
    fn skewed_leaves(&self, st: &mut State, full: &[u64]) -> Vec<u64> {
        if st.epoch_bytes < self.opts.table_size / 4 {
            return Vec::new();
        }
        let epoch = std::mem::take(&mut st.epoch_bytes);
        let by_table = std::mem::take(&mut st.epoch_by_table);
        if self.opts.split_skew >= 1.0
            || self.opts.fixed_levels.is_some()
            || st.cat.trie.leaves().count() < SKEW_MIN_LEAVES
        {
            return Vec::new();
        }
        let mut out: Vec<u64> = by_table
            .into_iter()
            .filter(|&(id, b)| {
                b as f64 > self.opts.split_skew * epoch as f64
                    && !full.contains(&id)
                    && match st.owners.get(&id) {
                        Some(place @ Place::Leaf(_)) => {
                            self.taken(st, id, place) >= self.opts.table_size / 8
                        }
                        _ => false,
                    }
            })
            .map(|(id, _)| id)
            .collect();
        out.sort_unstable();
        out
    }

    /// Publishes the key-ordered share after the tables changed. State
    /// locked.
    fn publish_order(&self, st: &State) {
        self.sorted_permille
            .store(st.sorted_permille(), Ordering::Relaxed);
    }

    fn sync_locked(&self, st: &mut State) -> Result<()> {
        // Every dirty table at once: the file system commits concurrent
        // syncs together, where one after another each waits for its own
        // commit (a hundred tables would take a hundred commits).
        let mut sealing = std::mem::take(&mut st.sealing);
        let mut dirty: Vec<(u64, &mut TableWriter)> = sealing
            .iter_mut()
            .map(|(id, w)| (*id, w))
            .chain(
                st.writers
                    .iter_mut()
                    .filter(|(_, w)| w.dirty)
                    .map(|(&id, w)| (id, w)),
            )
            .collect();
        let dir = &self.reader.dir;
        let results = match sync_file_system(&mut dirty, self.reader.fs.as_ref(), dir) {
            Some(r) => r,
            None => sync_all(&mut dirty, dir),
        };
        let mut synced = 0;
        let mut first_err = None;
        let mut failed_sealing = Vec::new();
        let ids: Vec<u64> = dirty.iter().map(|(id, _)| *id).collect();
        drop(dirty);
        for (id, r) in ids.into_iter().zip(results) {
            match r {
                Ok(()) => {
                    if let Some(w) = st.writers.get_mut(&id) {
                        w.dirty = false;
                    }
                    if let Some(info) = st.tables.get_mut(&id) {
                        synced += info.valid_len - info.synced_len;
                        info.synced_len = info.valid_len;
                    }
                }
                Err(e) => {
                    failed_sealing.push(id);
                    first_err.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_err {
            // Keep what is still unsynced for the next attempt.
            st.sealing = sealing
                .into_iter()
                .filter(|(id, _)| failed_sealing.contains(id))
                .collect();
            return Err(e);
        }
        if st.dir_dirty {
            let dir = &self.reader.dir;
            self.reader.fs.sync_dir(dir).ctx(dir)?;
            st.dir_dirty = false;
        }
        st.synced_unrecorded += synced;
        if st.synced_unrecorded >= RECORD_DURABLE_EVERY {
            let edits: Vec<Edit> = st
                .writers
                .keys()
                .filter_map(|&id| {
                    let info = st.tables.get(&id)?;
                    Some(Edit::Table {
                        id,
                        state: Persisted::Active {
                            durable: info.synced_len,
                        },
                    })
                })
                .collect();
            st.commit(&edits)?;
            st.synced_unrecorded = 0;
        }
        // Synced writers are clean: close the surplus over the cap.
        st.close_idle_writers(self.opts.max_open_writers, true);
        // After the tables: the trie file claims nothing they do not hold.
        st.log.sync()
    }

    /// Node count, leaf count and depth of the trie.
    pub fn trie_shape(&self) -> (usize, usize, usize) {
        let st = self.state.lock();
        let t = &st.cat.trie;
        (t.nodes(), t.leaves().count(), t.depth())
    }

    /// `(table id, valid bytes, garbage bytes, active)` of every table not
    /// retired by GC, by id.
    pub fn tables(&self) -> Vec<(u64, u64, u64, bool)> {
        let st = self.state.lock();
        st.tables
            .iter()
            .filter(|(_, t)| t.state != TableState::Retired)
            .map(|(&id, t)| {
                (
                    id,
                    t.valid_len,
                    t.garbage.min(t.valid_len),
                    t.state == TableState::Active,
                )
            })
            .collect()
    }

    /// The leaves' prefixes, in key order.
    pub fn leaf_prefixes(&self) -> Vec<Vec<u8>> {
        let st = self.state.lock();
        st.cat.trie.leaves().map(|(p, _)| p.to_vec()).collect()
    }

    /// Checks a pointer against the valid ranges: `Some(true)` inside a
    /// table, `Some(false)` outside the valid range, `None` for a table
    /// that no longer exists. State locked.
    fn valid_locked(st: &State, ptr: &ValuePointer) -> Option<bool> {
        let t = st.tables.get(&ptr.file_id)?;
        Some(
            ptr.offset
                .checked_add(ptr.length as u64)
                .is_some_and(|end| end <= t.valid_len),
        )
    }
}

/// Opens the append handle of table `path`: a new file for `at == None`,
/// else the existing one appended at `at` (its valid length). Through a
/// shared mapping when `mapped` and the file system has them
/// ([`FileSystem::open_mapped`]), else with system calls: after a refused
/// or failed mapped open the file holds exactly its first `at` bytes, so
/// [`FileSystem::open_append`] continues at `at`.
///
/// # Errors
/// The OS error of the open.
fn open_writer(
    fs: &dyn FileSystem,
    path: &Path,
    at: Option<u64>,
    mapped: bool,
) -> std::io::Result<Box<dyn crate::fs::WritableFile>> {
    if mapped {
        if let Ok(f) = fs.open_mapped(path, at) {
            return Ok(f);
        }
    }
    match at {
        None => fs.create(path),
        Some(_) => fs.open_append(path),
    }
}

/// Tables to sync from which [`TrieStore`] syncs the file system in one
/// call, where it can.
const SYNC_FILE_SYSTEM_AT: usize = 16;

/// Syncs `tables` with one file-system sync
/// ([`FileSystem::sync_file_system`]) after handing each one's buffered
/// records to the OS, when there are [`SYNC_FILE_SYSTEM_AT`] or more of
/// them and the file system can: a memtable flush with a thousand
/// leaves' tables written would otherwise take a sync (and a journal
/// commit) per table. One result per table, in order; `None`: not done,
/// sync them one by one.
fn sync_file_system(
    tables: &mut [(u64, &mut TableWriter)],
    fs: &dyn FileSystem,
    dir: &Path,
) -> Option<Vec<Result<()>>> {
    if tables.len() < SYNC_FILE_SYSTEM_AT {
        return None;
    }
    let mut failed = None;
    for (id, w) in tables.iter_mut() {
        if let Some(f) = &mut w.file {
            if let Err(e) = f.flush().ctx(&table_path(dir, *id)) {
                failed = Some(e);
                break;
            }
        }
    }
    let all = |r: Result<()>| Some(vec![r; tables.len()]);
    match failed {
        // Nothing was synced: every table stays due.
        Some(e) => all(Err(e)),
        None => match fs.sync_file_system(dir) {
            Ok(true) => all(Ok(())),
            Ok(false) => None,
            Err(e) => all(Err(Error::io(dir, e))),
        },
    }
}

/// Syncs the files of `tables` in parallel (at most 16 threads); returns
/// one result per table, in order.
fn sync_all(tables: &mut [(u64, &mut TableWriter)], dir: &Path) -> Vec<Result<()>> {
    let sync = |(id, w): &mut (u64, &mut TableWriter)| -> Result<()> {
        match &mut w.file {
            Some(f) => f.sync().ctx(&table_path(dir, *id)),
            // Only clean writers are closed: nothing to sync.
            None => Ok(()),
        }
    };
    if tables.len() <= 1 {
        return tables.iter_mut().map(sync).collect();
    }
    let per = tables.len().div_ceil(16);
    std::thread::scope(|s| {
        let handles: Vec<_> = tables
            .chunks_mut(per)
            .map(|chunk| {
                let n = chunk.len();
                (
                    n,
                    s.spawn(move || chunk.iter_mut().map(sync).collect::<Vec<_>>()),
                )
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|(n, h)| {
                h.join().unwrap_or_else(|_| {
                    (0..n)
                        .map(|_| Err(Error::Poisoned("a table sync thread panicked".into())))
                        .collect()
                })
            })
            .collect()
    })
}

impl ValueStore for TrieStore {
    fn name(&self) -> &'static str {
        "trie"
    }

    fn separates(&self, len: usize) -> bool {
        len >= self.opts.value_threshold
    }

    fn append(&self, records: &[ValueRecord<'_>]) -> Result<Vec<ValuePointer>> {
        self.append_values(records)
    }

    fn sync(&self) -> Result<()> {
        let mut st = self.state.lock();
        self.sync_locked(&mut st)
    }

    /// Reads first and asks the state only when the read fails, so that a
    /// reader never waits for the state lock, which a writer holds across
    /// its appends. A record read is checked (checksum, key), and a
    /// pointer the index hands out lies within its table's intact records;
    /// a table GC has deleted since may still be read through a handle
    /// opened before, and yields the same record.
    fn read(&self, key: &[u8], ptr: &ValuePointer) -> Result<Option<Vec<u8>>> {
        self.counters.single_reads.fetch_add(1, Ordering::Relaxed);
        match self.reader.read_record(key, ptr) {
            Ok(v) => Ok(Some(v)),
            // A table GC has deleted (or a pointer past a table's intact
            // records, lost in a crash) holds no value.
            Err(_) if Self::valid_locked(&self.state.lock(), ptr) != Some(true) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Batches pay while reads reach the device (span reads, and single
    /// reads in parallel), and from memory while at least half the bytes
    /// lie in tables whose records are in key order, where a scan's values
    /// sit back to back and one read call serves many of them. Otherwise
    /// a scan reads its values one at a time and nothing past where it
    /// stops.
    fn batch_reads_pay(&self) -> bool {
        !self.reader.latency.from_memory() || self.sorted_permille.load(Ordering::Relaxed) >= 500
    }

    fn read_many(&self, reqs: &[(Vec<u8>, ValuePointer)]) -> Result<Vec<Option<Vec<u8>>>> {
        scan::read_many(self, reqs)
    }

    fn read_pipeline(&self) -> Option<Box<dyn crate::vstore::ReadPipeline>> {
        let budget = self.opts.scan_pipeline;
        if budget == 0 {
            return None;
        }
        let from_memory = self.reader.latency.from_memory();
        let pool = (self.opts.prefetch_threads > 0 && !from_memory).then(|| self.prefetch.clone());
        Some(Box::new(pipeline::Pipeline::new(
            self.reader.clone(),
            pool,
            self.counters.clone(),
            budget,
            &self.opts.spans,
            from_memory,
            self.opts.scan_direct,
        )))
    }

    fn contains(&self, ptr: &ValuePointer) -> bool {
        let st = self.state.lock();
        match Self::valid_locked(&st, ptr) {
            Some(ok) => ok,
            // A table id handed out and since deleted by GC: a later,
            // durable relocation supersedes the pointer.
            None => ptr.file_id < st.cat.next_id && !st.cat.tables.contains_key(&ptr.file_id),
        }
    }

    fn note_garbage(&self, ptr: &ValuePointer) {
        let mut st = self.state.lock();
        if let Some(t) = st.tables.get_mut(&ptr.file_id) {
            if t.state != TableState::Retired {
                let before = t.garbage;
                t.garbage = (t.garbage + ptr.length as u64).min(t.valid_len);
                self.counters
                    .garbage_found
                    .fetch_add(t.garbage - before, Ordering::Relaxed);
            }
        }
    }

    fn garbage_found(&self) -> u64 {
        self.counters.garbage_found.load(Ordering::Relaxed)
    }

    fn garbage_table(&self) -> Option<Vec<u8>> {
        let st = self.state.lock();
        let s: Vec<(u64, u64)> = st
            .tables
            .iter()
            .filter(|(_, t)| t.state != TableState::Retired)
            .map(|(&id, t)| (id, t.garbage))
            .collect();
        Some(super::garbage::encode(&[s]))
    }

    fn restore_garbage_table(&self, table: &[u8]) -> Result<()> {
        let t = super::garbage::decode(table)
            .ok_or_else(|| super::garbage::corrupt(&self.reader.dir))?;
        let mut st = self.state.lock();
        for &(id, g) in t.first().map_or(&[][..], |s| &s[..]) {
            if let Some(t) = st.tables.get_mut(&id) {
                if t.state != TableState::Retired {
                    t.garbage = g.min(t.valid_len);
                }
            }
        }
        Ok(())
    }

    fn capacity_use(&self) -> Option<super::CapacityUse> {
        let cap = self.opts.capacity?;
        let st = self.state.lock();
        let garbage: u64 = st
            .tables
            .values()
            .filter(|t| t.state != TableState::Retired)
            .map(|t| t.garbage.min(t.valid_len))
            .sum();
        Some(super::CapacityUse {
            used: st.held,
            limit: cap,
            floor: st.held.saturating_sub(garbage),
            width: None,
        })
    }

    /// Live and garbage bytes of the tables GC may still collect; tables
    /// GC has already retired (waiting for old snapshots) count only in
    /// `file_bytes`, so that they never look like garbage left to collect.
    fn space(&self) -> SpaceStats {
        let st = self.state.lock();
        let mut s = SpaceStats::default();
        for t in st.tables.values() {
            s.file_bytes += t.valid_len;
            if t.state != TableState::Retired {
                s.live_bytes += t.live();
                s.garbage_bytes += t.garbage.min(t.valid_len);
            }
        }
        s.file_bytes += st.log.len();
        s
    }

    fn reorganize_due(&self) -> bool {
        self.opts.sort_sealed
            && self
                .state
                .lock()
                .tables
                .values()
                .any(TableInfo::unsorted_sealed)
    }

    fn gc_step(
        &self,
        index: &dyn IndexReader,
        relocator: &dyn IndexRelocator,
    ) -> Result<GcOutcome> {
        gc::step(self, index, relocator)
    }

    fn verify(&self) -> (u64, Vec<Error>) {
        // No GC step may delete a table while it is read.
        let _no_gc = self.gc_lock.lock();
        let ranges: Vec<(u64, u64)> = {
            let st = self.state.lock();
            st.tables
                .iter()
                .filter(|(_, t)| t.valid_len > 0)
                .map(|(&id, t)| (id, t.valid_len))
                .collect()
        };
        let mut records = 0;
        let mut faults = Vec::new();
        // The trie file: every record intact and well formed.
        let tp = self.reader.dir.join(trie::TRIE_FILE);
        match crate::fs::read_all(self.reader.fs.as_ref(), &tp) {
            Err(e) => faults.push(Error::io(&tp, e)),
            Ok(data) => {
                let mut r = crate::format::record::RecordReader::new(&data, &tp);
                loop {
                    match r.next_record() {
                        Ok(Some((off, payload))) => {
                            if trie::decode_edits(payload).is_none() {
                                faults.push(Error::corruption(
                                    &tp,
                                    off,
                                    "malformed trie-file record",
                                ));
                                break;
                            }
                        }
                        Ok(None) => break,
                        Err(e) => {
                            faults.push(e);
                            break;
                        }
                    }
                }
            }
        }
        for (id, len) in ranges {
            let path = self.path(id);
            let end = table::scan(
                self.reader.fs.as_ref(),
                &path,
                0,
                len,
                &self.reader.stats,
                IoCategory::ValueStore,
                |_, _| {
                    records += 1;
                    Ok(())
                },
            );
            match end {
                Ok(end) if end.torn => faults.push(Error::corruption(
                    &path,
                    end.valid_len,
                    "TrieTable record damaged inside the valid range",
                )),
                Ok(_) => {}
                Err(e) => faults.push(e),
            }
        }
        (records, faults)
    }

    fn figures(&self) -> Vec<(&'static str, u64)> {
        let st = self.state.lock();
        let t = &st.cat.trie;
        let mut quartiles = [0u64; 4];
        let mut max_garbage = 0;
        let mut sealed = 0;
        let mut to_sort = 0;
        let mut retired = 0;
        for info in st.tables.values() {
            match info.state {
                TableState::Retired => {
                    retired += 1;
                    continue;
                }
                TableState::Sealed => {
                    sealed += 1;
                    to_sort += u64::from(info.unsorted_sealed());
                }
                TableState::Active => {}
            }
            let g = info.garbage.min(info.valid_len);
            max_garbage = max_garbage.max(g);
            if let Some(q) = (4 * g).checked_div(info.valid_len) {
                quartiles[(q as usize).min(3)] += 1;
            }
        }
        let c = &self.counters;
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        vec![
            ("trie_nodes", t.nodes() as u64),
            ("trie_leaves", t.leaves().count() as u64),
            ("trie_depth", t.depth() as u64),
            ("trie_tables", (st.tables.len() - retired) as u64),
            ("trie_tables_active", st.writers.len() as u64),
            (
                "trie_tables_open",
                st.writers.values().filter(|w| w.file.is_some()).count() as u64,
            ),
            ("trie_tables_sealed", sealed),
            ("trie_tables_sealed_unsorted", to_sort),
            ("trie_tables_retired", retired as u64),
            ("trie_file_bytes", st.log.len()),
            ("trie_sorted_permille", st.sorted_permille()),
            ("trie_garbage_max_table", max_garbage),
            ("trie_tables_garbage_lt25pct", quartiles[0]),
            ("trie_tables_garbage_25_50pct", quartiles[1]),
            ("trie_tables_garbage_50_75pct", quartiles[2]),
            ("trie_tables_garbage_ge75pct", quartiles[3]),
            ("trie_splits", ld(&c.splits)),
            ("trie_skew_splits", ld(&c.skew_splits)),
            ("trie_rolls", ld(&c.rolls)),
            ("span_reads", ld(&c.span_reads)),
            ("span_bytes", ld(&c.span_bytes)),
            ("span_values", ld(&c.span_values)),
            ("single_reads", ld(&c.single_reads)),
            ("span_tables", ld(&c.span_tables)),
            ("span_direct_reads", ld(&self.reader.direct_reads)),
            (
                "span_direct_off",
                u64::from(
                    self.reader.direct.is_none() || !self.reader.direct_ok.load(Ordering::Relaxed),
                ),
            ),
            ("scan_pipeline_peak_bytes", ld(&c.pipeline_peak)),
            ("scan_pipeline_reads_running", ld(&c.pipeline_running)),
            ("gc_runs", ld(&c.gc_runs)),
            ("gc_bytes_read", ld(&c.gc_bytes_read)),
            ("gc_bytes_rewritten", ld(&c.gc_bytes_rewritten)),
            ("gc_bytes_freed", ld(&c.gc_bytes_freed)),
            ("prefetch_depth", self.prefetch.depth() as u64),
        ]
    }
}
