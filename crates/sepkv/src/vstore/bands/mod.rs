//! FlashKey's logical bands (LBands), the `bands` layout (FlashKey §V-A2,
//! §V-A4, §V-B5).
//!
//! Values (and, in log mode, every other entry of a write) are appended to
//! the one **open band**; when it holds `band_bytes` bytes (default 1 MiB;
//! FlashKey's LBands have a fixed size) or `band_entries` entries (default
//! 65,536) it gets a **closed-band trailer**, is synced and joins the closed
//! bands, and the next band is opened; the new band's directory entry is
//! made durable by the next [`ValueStore::sync`], with those of every band
//! created since the one before. Bands live one per file,
//! `NNNNNN.band`, named by the band's sequence number, which only grows:
//! the file system's free space plays the part of the paper's empty-band
//! list, and [`BandStore::empty_bands`] counts the bands that still fit
//! into `value_capacity`. The format is in [`band`].
//!
//! - **Log mode** (`log_mode`, as the value log's WiscKey §3.4.2 mode):
//!   every put, delete token and GC relocation of a write batch is appended
//!   to the bands, with the end-of-batch flag on its last entry, so the
//!   bands alone rebuild the index after a crash; FlashKey has no separate
//!   WAL. Recovery replays the bands after the last checkpoint in band
//!   order and applies a batch all or nothing.
//! - **Previous versions.** Every entry records the address of its key's
//!   previous version, so a read at an older sequence number can walk back
//!   from the newest version (as in FASTER's hybrid log; the paper has no
//!   snapshots). The address comes from the index through `index_log::PrevLookup`
//!   or from the caller of [`BandStore::log_linked`].
//! - **Invalidity table** (§V-A4): the invalid bytes of each band, raised on
//!   every overwrite and delete from the previous version's length the
//!   index knows (no disk read), together with the newest sequence number
//!   that invalidated something in the band. It is persisted with each
//!   checkpoint ([`ValueStore::state_with_checkpoint`]).
//! - **GC** (§V-B5, [`gc`]): picks the closed band with the most invalid
//!   bytes, moves its valid records to the open band of GC copies and
//!   installs them by compare-and-set. To keep every version a live
//!   snapshot can reach, a band is collected only once the newest write
//!   that invalidated a record in it is visible to every reader (its
//!   sequence number is at most [`IndexReader::oldest_visible_seq`]), and
//!   its file is deleted only when the relocation is visible to every
//!   reader too.
//! - **Two streams.** GC copies go to a band of their own, not to the band
//!   of user writes: a record GC finds live has outlived its band (a cold
//!   one under skewed updates), and mixed with fresh writes it would be
//!   copied again as soon as they are overwritten. Both open bands take
//!   their numbers from one counter, so numbers interleave. A band of GC
//!   copies is created by the first copy after the last one closed, with
//!   the band of user writes locked: that band is synced first (so that
//!   every band below a durable one has a durable header), then the new
//!   band's header and directory entry. Its copies are synced after each step, before their
//!   relocations are logged in the band of user writes, which keeps the
//!   order replay applies; replay skips GC copies. At open, every band
//!   without a trailer keeps its complete batches and only the
//!   highest-numbered one is reopened (for user writes), so no format
//!   changed.
//! - **Capacity**: with `value_capacity` set, a user append that would take
//!   the band files past it is refused with `ValueStoreFull` (the engine
//!   then runs GC and retries); GC copies, delete tokens and relocations
//!   are exempt.
//!
//! Thread-safety: appends (and syncs) hold the open band's lock; reads take
//! the state lock only to check the address, never across I/O. Lock order:
//! `gc_lock`, then `gc_io`, then `io`, then `state`.

pub mod band;
pub mod gc;
mod index_log;
mod value_store;

use super::index_log::{OwnedEntry, PrevLookup};
use super::{open_for_reads, ReadLatency, ValueRecord, ValueStore};
use super::{GcOutcome, IndexReader, IndexRelocator, LogEntry, SpaceStats, ValuePointer};
use crate::compaction_filter::CompactionFilter;
use crate::error::{Error, IoContext, Result};
use crate::format::coding::{get_fixed32, get_fixed64, put_fixed32, put_fixed64};
use crate::format::value_record::{DecodeError, Kind};
use crate::fs::sync_unlocked;
use crate::fs::{FileSystem, IoCategory, IoStats, RandomAccessFile, WritableFile};
use crate::seqno::SeqNum;
use crate::value_type::ValueType;
use band::{Entry, AUX_TOMBSTONE, BATCH_END, HEADER_LEN, TRAILER_LEN};
use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

/// Knobs of the bands (from `Options`).
#[derive(Debug, Clone)]
pub struct BandOptions {
    /// Values shorter than this are logged inline (log mode) rather than
    /// addressed by a pointer; 0 addresses every value (the hash index
    /// keeps no values).
    pub value_threshold: usize,
    /// Entries after which the open band is closed (default 65,536).
    pub band_entries: u32,
    /// Bytes after which the open band is closed: it closes after the
    /// batch that takes its file to this size or past it (default 1 MiB).
    pub band_bytes: u64,
    /// The bands replace the write-ahead log.
    pub log_mode: bool,
    /// Read records of closed bands through a mapping of the file while
    /// reads come from memory (`Options::mmap_reads`; default false).
    pub mmap_reads: bool,
    /// Most bytes the band files may take before a user append is refused
    /// with `ValueStoreFull`; `None` = unbounded.
    pub capacity: Option<u64>,
    /// GC is due when fewer empty bands than this — or than
    /// 1/[`EMPTY_SHARE`] of the bands the capacity holds, whichever is
    /// more — fit into the capacity (§V-B5; ignored without a capacity).
    pub gc_empty_bands: u64,
    /// A second index (the key-only LSM-tree of §V-A3) replays the bands
    /// from a checkpoint of its own ([`BandStore::set_key_checkpoint`]); GC
    /// collects only bands before both checkpoints.
    pub key_index: bool,
    /// Most bytes the bands may take per live byte in them: `1 + OP` for
    /// FlashKey's over-provisioning `OP` (the paper's band capacity =
    /// live × (1 + OP)), or the space target if that is tighter; `None`
    /// sets no bound. A soft bound: GC is due from `1 + 0.9 (B − 1)`
    /// ([`BandStore::gc_ratio`]), and past `B` writers run GC steps
    /// themselves ([`ValueStore::over_space_bound`]); no write is
    /// refused for it.
    pub space_bound: Option<f64>,
}

impl Default for BandOptions {
    fn default() -> Self {
        BandOptions {
            value_threshold: 0,
            band_entries: 1 << 16,
            band_bytes: 1 << 20,
            log_mode: true,
            mmap_reads: false,
            capacity: None,
            gc_empty_bands: 4,
            key_index: false,
            space_bound: None,
        }
    }
}

/// Path of band `id`.
pub fn band_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:06}.band"))
}

/// The open band, behind its own lock so that `write(2)` and `fsync` never
/// hold the state lock readers take.
struct Open {
    band: u64,
    file: Box<dyn WritableFile>,
    /// Bytes handed to the OS (header included).
    len: u64,
    entries: u32,
    max_seq: u64,
    dirty: bool,
    /// The band's directory entry is durable (a roll syncs the directory
    /// only every other band; `sync` makes up for it).
    dir_synced: bool,
    /// The band was synced since it was created: its header is durable
    /// (a band of GC copies created after it need not sync it again).
    header_synced: bool,
    /// Set by a failed write or sync: the band's end is unknown.
    failed: Option<String>,
    /// The encoding buffer of appends, kept between them up to
    /// [`SCRATCH_KEEP`] bytes.
    scratch: Vec<u8>,
}

/// Largest encoding buffer the open band keeps between appends (bytes);
/// a larger batch's buffer is freed after it.
const SCRATCH_KEEP: usize = 64 << 10;

#[derive(Debug, Clone, Default)]
struct BandInfo {
    /// End of the last complete batch.
    valid_len: u64,
    /// Bytes of the file (valid length plus trailer or torn tail).
    file_len: u64,
    entries: u32,
    closed: bool,
    /// Invalid bytes (§V-A4).
    invalid: u64,
    /// Newest sequence number that invalidated a record in the band.
    inval_seq: u64,
    /// Collected by GC; the file is deleted once this sequence number is
    /// visible to every reader.
    retired: Option<u64>,
}

impl BandInfo {
    /// A band just created: its header of `len` bytes, nothing else.
    fn created(len: u64) -> BandInfo {
        BandInfo {
            valid_len: len,
            file_len: len,
            ..Default::default()
        }
    }
}

struct State {
    bands: BTreeMap<u64, BandInfo>,
    /// The open band of user writes.
    open: u64,
    /// The open band of GC copies, if one is open.
    gc_open: Option<u64>,
    /// The number the next band created takes (both streams draw from it).
    next_id: u64,
    /// Log mode: replay starts here; GC collects only bands before it.
    ckpt: Option<(u64, u64)>,
    /// The key index's replay position (`key_index`); `None` until known.
    key_ckpt: Option<(u64, u64)>,
    /// Largest sequence number appended.
    last_seq: u64,
}

#[derive(Default)]
struct Counters {
    /// Bands collected.
    gc_runs: AtomicU64,
    /// GC steps that collected bands (a step takes up to
    /// [`gc::MAX_VICTIMS`]).
    gc_steps: AtomicU64,
    gc_bytes_read: AtomicU64,
    gc_bytes_rewritten: AtomicU64,
    gc_bytes_freed: AtomicU64,
    gc_tombstones_dropped: AtomicU64,
    /// GC-room figures, sums over the steps that took a victim (see
    /// `gc::note_pick`).
    gc_victim_bytes: AtomicU64,
    gc_victim_invalid: AtomicU64,
    gc_victim_live: AtomicU64,
    gc_held_bytes: AtomicU64,
    gc_held_invalid: AtomicU64,
    gc_free_invalid: AtomicU64,
    gc_used_bytes: AtomicU64,
    gc_live_bytes: AtomicU64,
    /// Steps that found garbage only in bands after the replay checkpoints.
    gc_held_steps: AtomicU64,
}

/// The logical bands. See the module docs.
pub struct BandStore {
    opts: BandOptions,
    dir: PathBuf,
    fs: Arc<dyn FileSystem>,
    stats: Arc<IoStats>,
    /// Open read handles by band, at most [`crate::fs::read_handle_budget`]
    /// (each closed band's with its mapping); past it, `quick_cache` closes
    /// the ones it judges coldest (S3-FIFO: a band read once goes first).
    handles: quick_cache::sync::Cache<u64, Arc<dyn RandomAccessFile>>,
    /// Held while a handle is added after checking that its band is still
    /// open, and while `roll` drops the handle of the band it closed.
    handle_gate: Mutex<()>,
    /// How long record reads take: mapped reads only while they come from
    /// memory.
    latency: ReadLatency,
    io: Mutex<Open>,
    /// The open band of GC copies (see the module docs), created by the
    /// first copy after the previous one closed.
    gc_io: Mutex<Option<Open>>,
    state: Mutex<State>,
    gc_lock: Mutex<()>,
    prev_lookup: RwLock<Option<Weak<dyn PrevLookup>>>,
    /// Addresses of every entry of the last user batch (see
    /// [`BandStore::take_last_batch`]).
    last_batch: Mutex<Vec<ValuePointer>>,
    counters: Counters,
    /// Invalid bytes the last GC step found in bands it may not collect
    /// yet only because a reader older than the writes that invalidated
    /// them is alive (part of [`ValueStore::pinned_bytes`]).
    reader_held: AtomicU64,
    /// [`BandStore::gc_due`] as of the last band roll or GC (§V-B5).
    due: AtomicBool,
    /// [`ValueStore::over_space_bound`] as of the last band roll or GC.
    over_bound: AtomicBool,
    /// The compaction filter GC asks about live records, and the counter
    /// of its removals ([`BandStore::set_filter`]).
    filter: OnceLock<(Arc<dyn CompactionFilter>, Arc<AtomicU64>)>,
    /// The filter pass under way ([`ValueStore::start_filter_pass`]): the
    /// lowest band it has not taken yet, and the band it ends before.
    filter_pass: Mutex<Option<(u64, u64)>>,
}

/// The persisted state: checkpoint, retired bands and invalidity table.
///
/// ```text
/// state := 1 ckpt_band:u64le ckpt_off:u64le
///          n_retired:u32le (band:u64le)*
///          n_inval:u32le (band:u64le invalid:u64le inval_seq:u64le)*
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PersistedState {
    ckpt: (u64, u64),
    retired: Vec<u64>,
    invalid: Vec<(u64, u64, u64)>,
}

/// GC is due once fewer empty bands than 1/`EMPTY_SHARE` of the bands
/// `value_capacity` holds remain (an eighth). The empty bands are room GC
/// does not work in; a share of 1/32 was measured in the update
/// experiment (300,000 keys, 1000-byte values) and copied as much or more
/// at capacities of data + 30 % and + 60 %.
pub const EMPTY_SHARE: u64 = 8;

/// Bands of `value_capacity`'s room, ending at the capacity, that the
/// space governor's capacity bands divide ([`ValueStore::capacity_use`]):
/// writers are slowed over the last tenth of them (about a band), so that
/// GC works with nearly all the room. Measured in the update experiment
/// (200,000 keys, data + 30 %, one run each): pacing over 40 bands held
/// the band files at 1.270 × their live bytes and GC copied 2.01 bytes
/// per user byte; over 12, 1.277 and 1.92–1.94; without pacing (writers
/// meet the refusal), 1.286 and 1.81–1.92, with twice the stall time.
pub const PACE_BANDS: u64 = 12;

/// Largest band number or offset a persisted state may hold.
const MAX_POS: u64 = 1 << 48;

/// The file system's allocation unit, for the bands' file bytes (bytes).
const BLOCK: u64 = crate::fs::PAGE_SIZE;

impl PersistedState {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = vec![1u8];
        v.extend_from_slice(&self.ckpt.0.to_le_bytes());
        v.extend_from_slice(&self.ckpt.1.to_le_bytes());
        v.extend_from_slice(&(self.retired.len() as u32).to_le_bytes());
        for b in &self.retired {
            v.extend_from_slice(&b.to_le_bytes());
        }
        v.extend_from_slice(&(self.invalid.len() as u32).to_le_bytes());
        for (b, i, s) in &self.invalid {
            v.extend_from_slice(&b.to_le_bytes());
            v.extend_from_slice(&i.to_le_bytes());
            v.extend_from_slice(&s.to_le_bytes());
        }
        v
    }

    pub(crate) fn decode(b: &[u8]) -> Option<PersistedState> {
        let mut pos = 0usize;
        let mut word = |n: usize| -> Option<u64> {
            let s = b.get(pos..pos + n)?;
            pos += n;
            let mut w = [0u8; 8];
            w[..n].copy_from_slice(s);
            Some(u64::from_le_bytes(w))
        };
        if word(1)? != 1 {
            return None;
        }
        let ckpt = (word(8)?, word(8)?);
        if ckpt.0 > MAX_POS || ckpt.1 > MAX_POS {
            return None;
        }
        let nr = word(4)? as usize;
        if nr > b.len() / 8 {
            return None;
        }
        let mut retired = Vec::with_capacity(nr);
        for _ in 0..nr {
            retired.push(word(8).filter(|&x| x <= MAX_POS)?);
        }
        let ni = word(4)? as usize;
        if ni > b.len() / 24 {
            return None;
        }
        let mut invalid = Vec::with_capacity(ni);
        for _ in 0..ni {
            invalid.push((word(8).filter(|&x| x <= MAX_POS)?, word(8)?, word(8)?));
        }
        (pos == b.len()).then_some(PersistedState {
            ckpt,
            retired,
            invalid,
        })
    }
}

/// The change from one persisted state to the next, as the hash index's
/// edit log records it (`index/hash/table.rs`): what a GC step changed,
/// not the whole table.
///
/// ```text
/// edit := 1 ckpt_band:u64le ckpt_off:u64le
///         n_retired:u32le (band:u64le)*        bands newly retired
///         n_gone:u32le (band:u64le)*           bands no longer listed at all
///         n_inval:u32le (band:u64le invalid:u64le inval_seq:u64le)*   entries set
/// ```
impl PersistedState {
    /// The edit that turns the encoded state `old` (empty: none yet) into
    /// the encoded state `new`; `None` when either does not decode.
    pub(crate) fn edit(old: &[u8], new: &[u8]) -> Option<Vec<u8>> {
        let old = if old.is_empty() {
            PersistedState::default()
        } else {
            PersistedState::decode(old)?
        };
        Some(PersistedState::decode(new)?.edit_from(&old))
    }

    /// The edit that turns `old` into `self`.
    pub(crate) fn edit_from(&self, old: &PersistedState) -> Vec<u8> {
        use std::collections::{BTreeMap, BTreeSet};
        let old_retired: BTreeSet<u64> = old.retired.iter().copied().collect();
        let new_retired: BTreeSet<u64> = self.retired.iter().copied().collect();
        let old_inval: BTreeMap<u64, (u64, u64)> =
            old.invalid.iter().map(|&(b, i, s)| (b, (i, s))).collect();
        let new_inval: BTreeMap<u64, (u64, u64)> =
            self.invalid.iter().map(|&(b, i, s)| (b, (i, s))).collect();
        let added: Vec<u64> = new_retired.difference(&old_retired).copied().collect();
        let gone: Vec<u64> = old_retired
            .iter()
            .chain(old_inval.keys())
            .filter(|b| !new_retired.contains(b) && !new_inval.contains_key(b))
            .copied()
            .collect::<BTreeSet<u64>>()
            .into_iter()
            .collect();
        let set: Vec<(u64, u64, u64)> = new_inval
            .iter()
            .filter(|(b, v)| old_inval.get(b) != Some(v))
            .map(|(&b, &(i, s))| (b, i, s))
            .collect();
        let mut v = vec![1u8];
        put_fixed64(&mut v, self.ckpt.0);
        put_fixed64(&mut v, self.ckpt.1);
        for list in [&added, &gone] {
            put_fixed32(&mut v, list.len() as u32);
            for &b in list {
                put_fixed64(&mut v, b);
            }
        }
        put_fixed32(&mut v, set.len() as u32);
        for (b, i, s) in set {
            for w in [b, i, s] {
                put_fixed64(&mut v, w);
            }
        }
        v
    }

    /// Applies an edit made by [`PersistedState::edit_from`] to the encoded
    /// state `state`; `None` when either is damaged.
    pub(crate) fn apply_edit(state: &[u8], edit: &[u8]) -> Option<Vec<u8>> {
        use std::collections::BTreeMap;
        let base = if state.is_empty() {
            PersistedState::default()
        } else {
            PersistedState::decode(state)?
        };
        let mut src = edit;
        let (&tag, rest) = src.split_first()?;
        src = rest;
        if tag != 1 {
            return None;
        }
        let pos = |src: &mut &[u8]| get_fixed64(src).filter(|&x| x <= MAX_POS);
        let ckpt = (pos(&mut src)?, pos(&mut src)?);
        let mut retired: std::collections::BTreeSet<u64> = base.retired.into_iter().collect();
        let mut inval: BTreeMap<u64, (u64, u64)> = base
            .invalid
            .into_iter()
            .map(|(b, i, s)| (b, (i, s)))
            .collect();
        // Bands newly retired, then bands no longer listed at all.
        for retire in [true, false] {
            let n = get_fixed32(&mut src)? as usize;
            if n > src.len() / 8 {
                return None;
            }
            for _ in 0..n {
                let b = pos(&mut src)?;
                if retire {
                    retired.insert(b);
                } else {
                    retired.remove(&b);
                }
                inval.remove(&b);
            }
        }
        let n = get_fixed32(&mut src)? as usize;
        if n > src.len() / 24 {
            return None;
        }
        for _ in 0..n {
            let b = pos(&mut src)?;
            let (i, s) = (get_fixed64(&mut src)?, get_fixed64(&mut src)?);
            inval.insert(b, (i, s));
        }
        if !src.is_empty() {
            return None;
        }
        Some(
            PersistedState {
                ckpt,
                retired: retired.into_iter().collect(),
                invalid: inval.into_iter().map(|(b, (i, s))| (b, i, s)).collect(),
            }
            .encode(),
        )
    }
}

impl BandStore {
    /// Opens the bands in `dir`, given the state last persisted (`None` for
    /// a new database).
    ///
    /// # Errors
    /// `Corruption` for an unreadable state or a band whose header is
    /// damaged; `Io`.
    pub fn open(
        dir: &Path,
        fs: Arc<dyn FileSystem>,
        stats: Arc<IoStats>,
        opts: BandOptions,
        state: Option<&[u8]>,
    ) -> Result<BandStore> {
        let persisted = match state {
            Some(s) => Some(
                PersistedState::decode(s)
                    .ok_or_else(|| Error::corruption(dir.join("MANIFEST"), 0, "bad band state"))?,
            ),
            None => None,
        };
        let mut ids: Vec<u64> = fs
            .list(dir)
            .ctx(dir)?
            .iter()
            .filter_map(|n| n.strip_suffix(".band")?.parse().ok())
            .collect();
        ids.sort_unstable();
        // Bands whose collection was durable: finish deleting them.
        if let Some(p) = &persisted {
            for r in &p.retired {
                if let Ok(i) = ids.binary_search(r) {
                    let path = band_path(dir, *r);
                    fs.remove(&path).ctx(&path)?;
                    ids.remove(i);
                }
            }
        }
        let mut bands = BTreeMap::new();
        let mut reuse = None;
        let last_id = ids.last().copied();
        let mut last_seq = 0;
        for &id in &ids {
            let path = band_path(dir, id);
            let size = fs.file_size(&path).ctx(&path)?;
            let f = fs.open_read(&path).ctx(&path)?;
            let mut head = vec![0u8; (HEADER_LEN as usize).min(size as usize)];
            f.read_exact_at(0, &mut head).ctx(&path)?;
            stats.add_read(IoCategory::ValueStore, head.len() as u64);
            if band::decode_header(&head) != Some(id) {
                if Some(id) == last_id && size <= HEADER_LEN {
                    // A band whose creation a crash interrupted: it never
                    // held an entry.
                    fs.remove(&path).ctx(&path)?;
                    continue;
                }
                return Err(Error::corruption(&path, 0, "band header damaged"));
            }
            let mut info = BandInfo {
                file_len: size,
                closed: true,
                ..Default::default()
            };
            let trailer = if size >= HEADER_LEN + TRAILER_LEN as u64 {
                let mut t = vec![0u8; TRAILER_LEN];
                let at = size - TRAILER_LEN as u64;
                f.read_exact_at(at, &mut t).ctx(&path)?;
                stats.add_read(IoCategory::ValueStore, TRAILER_LEN as u64);
                band::decode_trailer(&t, at)
            } else {
                None
            };
            match trailer {
                Some(t) => {
                    info.valid_len = t.data_end;
                    info.entries = t.entries;
                    last_seq = last_seq.max(t.max_seq);
                }
                None => {
                    // The open band at a crash: keep its complete batches.
                    let mut buf = vec![0u8; (size - HEADER_LEN) as usize];
                    f.read_exact_at(HEADER_LEN, &mut buf).ctx(&path)?;
                    stats.add_read(IoCategory::ValueStore, buf.len() as u64);
                    let (end, n, max_seq) = band::scan_batches(&buf, HEADER_LEN, |_, _| {});
                    // Everything before the checkpoint was durable when it
                    // was taken: a band ending earlier is damaged, not torn.
                    if let Some(p) = &persisted {
                        if p.ckpt.0 == id && end < p.ckpt.1 {
                            return Err(Error::corruption(
                                &path,
                                end,
                                "band entry damaged before the replay checkpoint",
                            ));
                        }
                    }
                    info.valid_len = end;
                    info.entries = n;
                    last_seq = last_seq.max(max_seq);
                    if Some(id) == last_id
                        && end == size
                        && n < opts.band_entries
                        && end < opts.band_bytes
                    {
                        reuse = Some((id, size, n, max_seq));
                    }
                }
            }
            bands.insert(id, info);
        }
        if let Some(p) = &persisted {
            for &(b, inv, s) in &p.invalid {
                if let Some(i) = bands.get_mut(&b) {
                    i.invalid = inv.min(i.valid_len);
                    i.inval_seq = s;
                }
            }
        }
        let (open, file, len, entries, max_seq) = match reuse {
            Some((id, size, n, max_seq)) => {
                let path = band_path(dir, id);
                let f = fs.open_append(&path).ctx(&path)?;
                if let Some(i) = bands.get_mut(&id) {
                    i.closed = false;
                }
                (id, f, size, n, max_seq)
            }
            None => {
                let id = last_id
                    .map_or(1, |l| l + 1)
                    .max(persisted.as_ref().map_or(1, |p| {
                        p.ckpt.0.max(p.retired.iter().max().map_or(0, |r| r + 1))
                    }));
                let (f, len) = Self::create_band(fs.as_ref(), dir, id, &stats, true)?;
                bands.insert(id, BandInfo::created(len));
                (id, f, len, 0, 0)
            }
        };
        let ckpt = opts.log_mode.then(|| {
            persisted
                .as_ref()
                .map(|p| p.ckpt)
                .unwrap_or((bands.keys().next().copied().unwrap_or(open), 0))
        });
        let bs = BandStore {
            opts,
            dir: dir.to_path_buf(),
            fs,
            stats,
            handles: quick_cache::sync::Cache::new(crate::fs::read_handle_budget()),
            handle_gate: Mutex::new(()),
            latency: ReadLatency::default(),
            gc_io: Mutex::new(None),
            io: Mutex::new(Open {
                band: open,
                file,
                len,
                entries,
                max_seq,
                dirty: false,
                dir_synced: true,
                header_synced: false,
                failed: None,
                scratch: Vec::new(),
            }),
            state: Mutex::new(State {
                bands,
                open,
                gc_open: None,
                next_id: open + 1,
                ckpt,
                key_ckpt: None,
                last_seq,
            }),
            gc_lock: Mutex::new(()),
            prev_lookup: RwLock::new(None),
            last_batch: Mutex::new(Vec::new()),
            counters: Counters::default(),
            reader_held: AtomicU64::new(0),
            filter: OnceLock::new(),
            filter_pass: Mutex::new(None),
            due: AtomicBool::new(false),
            over_bound: AtomicBool::new(false),
        };
        bs.refresh_due_locked(&bs.state.lock());
        Ok(bs)
    }

    /// Creates band `id` with its header; returns the file and its length.
    fn create_band(
        fs: &dyn FileSystem,
        dir: &Path,
        id: u64,
        stats: &IoStats,
        sync_dir: bool,
    ) -> Result<(Box<dyn WritableFile>, u64)> {
        let path = band_path(dir, id);
        let mut f = fs.create(&path).ctx(&path)?;
        let h = band::encode_header(id);
        let made = f.append(&h).and_then(|_| f.flush()).ctx(&path);
        if made.is_ok() {
            stats.add_written(IoCategory::ValueStore, h.len() as u64);
        }
        if let Err(e) = made.and_then(|()| match sync_dir {
            true => fs.sync_dir(dir).ctx(dir),
            false => Ok(()),
        }) {
            drop(f);
            Self::discard_band(fs, dir, &path);
            return Err(e);
        }
        Ok((f, h.len() as u64))
    }

    /// Removes the file of a band whose creation failed, and makes the
    /// removal durable: a band without a durable header below the last one
    /// is damage to [`BandStore::open`], which would refuse the store. Best
    /// effort: the error that stopped the creation is the one reported.
    fn discard_band(fs: &dyn FileSystem, dir: &Path, path: &Path) {
        if fs.remove(path).is_ok() {
            let _ = fs.sync_dir(dir);
        }
    }

    /// Sets the compaction filter GC asks about the live records it
    /// relocates (the hash index has no compaction that could), and the
    /// counter its removals add to. Once; later calls are ignored.
    pub fn set_filter(&self, filter: Arc<dyn CompactionFilter>, removed: Arc<AtomicU64>) {
        let _ = self.filter.set((filter, removed));
    }

    /// The filter and its removal counter, if set.
    pub(crate) fn filter(&self) -> Option<&(Arc<dyn CompactionFilter>, Arc<AtomicU64>)> {
        self.filter.get()
    }

    /// Takes the next band of the filter pass under way among `eligible`
    /// (closed bands GC may collect, ascending), or ends the pass.
    pub(crate) fn next_filter_band(&self, eligible: impl Iterator<Item = u64>) -> Option<u64> {
        let mut pass = self.filter_pass.lock();
        let (from, end) = (*pass)?;
        match eligible.filter(|&id| id >= from && id < end).min() {
            Some(id) => {
                *pass = Some((id + 1, end));
                Some(id)
            }
            None => {
                *pass = None;
                None
            }
        }
    }

    /// Lets the index tell the bands each key's current address, which the
    /// next entry of the key records as its previous version and which the
    /// invalidity table charges (§V-A4).
    pub fn set_prev_lookup(&self, l: Weak<dyn PrevLookup>) {
        *self.prev_lookup.write() = Some(l);
    }

    fn path(&self, id: u64) -> PathBuf {
        band_path(&self.dir, id)
    }

    /// Path of band `id` (for errors).
    pub fn band_file(&self, id: u64) -> PathBuf {
        self.path(id)
    }

    fn handle(&self, id: u64) -> Result<Arc<dyn RandomAccessFile>> {
        if let Some(h) = self.handles.get(&id) {
            return Ok(h);
        }
        // Only a closed band is mapped: a mapping covers the file as it is
        // when made, and the open band still grows (its handle is dropped
        // when it closes, so that the next read maps it whole).
        let closed = || self.state.lock().bands.get(&id).is_some_and(|b| b.closed);
        let was_closed = closed();
        let h = open_for_reads(
            &*self.fs,
            &self.path(id),
            self.opts.mmap_reads && was_closed,
        )?;
        // A band that closed meanwhile is opened again, mapped, next time:
        // `roll` marks the band closed before it drops the band's handle
        // under the gate, so a handle added here unmapped is dropped.
        let _gate = self.handle_gate.lock();
        if was_closed || !closed() {
            self.handles.insert(id, h.clone());
        }
        Ok(h)
    }

    fn check_failed(&self, o: &Open) -> Result<()> {
        match &o.failed {
            Some(why) => Err(Error::Poisoned(format!(
                "band {}: {why}",
                self.path(o.band).display()
            ))),
            None => Ok(()),
        }
    }

    /// Bytes the band files take (retired bands included until deleted).
    fn used_locked(st: &State) -> u64 {
        st.bands.values().map(|b| b.file_len.max(b.valid_len)).sum()
    }

    /// Mean bytes of a closed band (the size an empty band will take).
    fn band_size_locked(&self, st: &State) -> u64 {
        let (n, bytes) = st
            .bands
            .values()
            .filter(|b| b.closed && b.entries > 0)
            .fold((0u64, 0u64), |(n, s), b| (n + 1, s + b.file_len));
        if let Some(mean) = bytes.checked_div(n) {
            mean.max(1)
        } else {
            let open = st.bands.get(&st.open);
            let per_entry = open
                .filter(|b| b.entries > 0)
                .map_or(1024, |b| (b.valid_len - HEADER_LEN) / b.entries as u64);
            (per_entry * self.opts.band_entries as u64 + HEADER_LEN).min(self.opts.band_bytes)
                + TRAILER_LEN as u64
        }
    }

    /// Empty bands that still fit into the capacity (the paper's empty-band
    /// list); `None` without a capacity.
    pub fn empty_bands(&self) -> Option<u64> {
        self.empty_bands_locked(&self.state.lock())
    }

    fn empty_bands_locked(&self, st: &State) -> Option<u64> {
        let cap = self.opts.capacity?;
        Some(cap.saturating_sub(Self::used_locked(st)) / self.band_size_locked(st))
    }

    /// The empty-band threshold below which GC is due: `gc_empty_bands`,
    /// or 1/[`EMPTY_SHARE`] of the bands the capacity holds if that is
    /// more.
    fn due_threshold_locked(&self, st: &State) -> u64 {
        let bands = self
            .opts
            .capacity
            .map_or(0, |c| c / self.band_size_locked(st));
        self.opts.gc_empty_bands.max(bands / EMPTY_SHARE)
    }

    /// Recomputes [`BandStore::gc_due`] (a band closed or was freed).
    fn refresh_due_locked(&self, st: &State) {
        let due = self
            .empty_bands_locked(st)
            .is_some_and(|n| n < self.due_threshold_locked(st));
        self.due.store(due, Ordering::Relaxed);
        if let Some(bound) = self.opts.space_bound {
            // Past the bound by more than the open band's worth: writers
            // help GC.
            let (used, live) = Self::used_and_live_locked(st);
            let over = used as f64 > live as f64 * bound + self.opts.band_bytes as f64;
            self.over_bound.store(over, Ordering::Relaxed);
        }
    }

    /// Bytes the band files take and live bytes in them (each band's
    /// entries less its invalid bytes), retired bands counted as used.
    fn used_and_live_locked(st: &State) -> (u64, u64) {
        st.bands.values().fold((0, 0), |(u, l), b| {
            let live = match b.retired {
                Some(_) => 0,
                None => (b.valid_len - HEADER_LEN.min(b.valid_len)).saturating_sub(b.invalid),
            };
            (u + b.file_len.max(b.valid_len), l + live)
        })
    }

    /// The garbage ratio (invalid ÷ all entry bytes, as
    /// [`ValueStore::space`] gives it) at which background GC is due by
    /// the space bound: `1 − 1 / (1 + 0.9 (B − 1))` for bound `B`, so that
    /// GC keeps the bands a tenth of the over-provisioning below the
    /// bound, where writers would have to help. `None` without a bound.
    pub fn gc_ratio(&self) -> Option<f64> {
        self.opts
            .space_bound
            .map(|b| 1.0 - 1.0 / (1.0 + 0.9 * (b - 1.0)))
    }

    /// True when fewer empty bands than the threshold remain (§V-B5):
    /// `gc_empty_bands` or 1/[`EMPTY_SHARE`] of the bands the capacity holds,
    /// whichever is more. Updated when a band closes and when GC frees
    /// one.
    pub fn gc_due(&self) -> bool {
        self.due.load(Ordering::Relaxed)
    }

    /// Charges the record at `ptr` to its band's invalid bytes, made
    /// invalid by the write with sequence number `seq` (§V-A4).
    pub fn note_invalid(&self, ptr: &ValuePointer, seq: SeqNum) {
        let mut st = self.state.lock();
        Self::charge_locked(&mut st, ptr, seq);
    }

    fn charge_locked(st: &mut State, ptr: &ValuePointer, seq: SeqNum) {
        if let Some(b) = st.bands.get_mut(&ptr.file_id) {
            if b.retired.is_none() {
                b.invalid = (b.invalid + ptr.length as u64).min(b.valid_len);
                b.inval_seq = b.inval_seq.max(seq);
            }
        }
    }

    /// Appends a batch (log mode) and returns the address of every entry,
    /// delete tokens and relocations included. `prevs` gives each entry's
    /// previous version; `None` asks the [`PrevLookup`] (entries of the
    /// same key earlier in the batch take precedence either way). A
    /// relocation records no previous version and is charged as invalid
    /// itself: it serves only a replay, and GC takes no band after the
    /// replay checkpoints.
    ///
    /// # Errors
    /// `ValueStoreFull` (nothing written) when a batch with user values
    /// would pass the capacity; `Io` (the store is then poisoned).
    pub fn log_linked(
        &self,
        entries: &[LogEntry<'_>],
        prevs: Option<&[Option<ValuePointer>]>,
    ) -> Result<Vec<ValuePointer>> {
        let recs: Vec<(Kind, &[u8], u64, &[u8])> = entries
            .iter()
            .map(|e| {
                let kind = match e.vtype {
                    ValueType::Value if e.separate => Kind::Value,
                    ValueType::Value => Kind::Inline,
                    ValueType::Deletion => Kind::Tombstone,
                    ValueType::Pointer => Kind::Relocation,
                };
                (kind, e.key, e.seq, e.value)
            })
            .collect();
        let lookup = if prevs.is_none() {
            self.prev_lookup.read().as_ref().and_then(Weak::upgrade)
        } else {
            None
        };
        let prev_of = |i: usize, key: &[u8]| -> Option<ValuePointer> {
            match prevs {
                Some(p) => p.get(i).copied().flatten(),
                None => lookup.as_ref().and_then(|l| l.prev(key)),
            }
        };
        let ptrs = self.append_entries(&recs, &prev_of, IoCategory::ValueStore)?;
        *self.last_batch.lock() = ptrs.clone();
        Ok(ptrs)
    }

    /// The addresses of every entry of the last batch logged through
    /// [`ValueStore::log_batch`] or [`BandStore::log_linked`] (delete tokens
    /// and relocations included, which `log_batch` does not return), taken
    /// once. The writer's lock orders a batch's logging before its index
    /// update, so the index calls this with that lock held.
    pub fn take_last_batch(&self) -> Vec<ValuePointer> {
        std::mem::take(&mut *self.last_batch.lock())
    }

    /// Appends entries `(kind, key, seq, payload)` as one batch. `prev_of`
    /// gives an entry's previous version (for GC copies: the original's).
    ///
    /// GC copies (`cat` = [`IoCategory::Gc`]) go to the open band of GC
    /// copies, every other entry to the open band of user writes.
    fn append_entries(
        &self,
        recs: &[(Kind, &[u8], u64, &[u8])],
        prev_of: &dyn Fn(usize, &[u8]) -> Option<ValuePointer>,
        cat: IoCategory,
    ) -> Result<Vec<ValuePointer>> {
        if cat == IoCategory::Gc {
            return self.append_gc_copies(recs, prev_of);
        }
        let mut o = self.io.lock();
        self.check_failed(&o)?;
        if recs.is_empty() {
            return Ok(Vec::new());
        }
        let ptrs = self.append_locked(&mut o, recs, prev_of, cat)?;
        if o.entries >= self.opts.band_entries || o.len >= self.opts.band_bytes {
            if let Err(e) = self.roll(&mut o) {
                o.failed = Some(format!("closing the band failed: {e}"));
                return Err(e);
            }
        }
        Ok(ptrs)
    }

    /// Appends GC copies to the open band of GC copies, creating it if
    /// none is open, and closes it once full. The copies are durable when
    /// [`BandStore::sync_gc`] returns.
    fn append_gc_copies(
        &self,
        recs: &[(Kind, &[u8], u64, &[u8])],
        prev_of: &dyn Fn(usize, &[u8]) -> Option<ValuePointer>,
    ) -> Result<Vec<ValuePointer>> {
        let mut slot = self.gc_io.lock();
        if let Some(o) = slot.as_ref() {
            self.check_failed(o)?;
        }
        if recs.is_empty() {
            return Ok(Vec::new());
        }
        if slot.is_none() {
            // Every band numbered below one whose directory entry is
            // durable must have a durable header: at open, only the last
            // band may be a creation a crash cut short, and a torn header
            // anywhere else is damage. So, with `io` held (no band of user
            // writes is created meanwhile, whose directory sync could make
            // this band's entry durable before its header): the open band
            // of user writes (whose header a roll leaves unsynced) is
            // synced, then this band takes the next number and is created
            // with its header and directory entry durable. The entry must
            // be durable anyway: the copies' relocations are logged in the
            // band of user writes, and a recovery must find the band they
            // point into.
            let (id, file, len) = {
                let mut o = self.io.lock();
                self.check_failed(&o)?;
                // A band synced since its creation (every GC step's
                // relocations sync it) has a durable header already.
                if !o.header_synced {
                    let path = self.path(o.band);
                    if let Err(e) = o.file.flush().and_then(|_| o.file.sync()) {
                        o.failed = Some(format!("a sync failed: {e}"));
                        return Err(Error::io(path, e));
                    }
                    o.dirty = false;
                    o.header_synced = true;
                }
                let id = self.take_band_number();
                let (mut file, len) =
                    Self::create_band(self.fs.as_ref(), &self.dir, id, &self.stats, true)?;
                if let Err(e) = file.sync() {
                    drop(file);
                    let path = self.path(id);
                    Self::discard_band(self.fs.as_ref(), &self.dir, &path);
                    return Err(Error::io(path, e));
                }
                (id, file, len)
            };
            {
                let mut st = self.state.lock();
                st.bands.insert(id, BandInfo::created(len));
                st.gc_open = Some(id);
            }
            *slot = Some(Open {
                band: id,
                file,
                len,
                entries: 0,
                max_seq: 0,
                dirty: false,
                dir_synced: true,
                header_synced: true,
                failed: None,
                scratch: Vec::new(),
            });
        }
        let Some(o) = slot.as_mut() else {
            return Err(Error::Poisoned("no band for GC copies".into()));
        };
        let ptrs = self.append_locked(o, recs, prev_of, IoCategory::Gc)?;
        if o.entries >= self.opts.band_entries || o.len >= self.opts.band_bytes {
            if let Err(e) = self.close_gc_band(&mut slot) {
                if let Some(o) = slot.as_mut() {
                    o.failed = Some(format!("closing the band failed: {e}"));
                }
                return Err(e);
            }
        }
        Ok(ptrs)
    }

    /// Makes the GC copies appended so far durable.
    ///
    /// # Errors
    /// `Io` (GC copies are refused from then on: `Poisoned`).
    pub(crate) fn sync_gc(&self) -> Result<()> {
        let mut slot = self.gc_io.lock();
        let Some(o) = slot.as_mut() else {
            return Ok(());
        };
        self.check_failed(o)?;
        if o.dirty {
            let path = self.path(o.band);
            if let Err(e) = o.file.sync() {
                o.failed = Some(format!("a sync failed: {e}"));
                return Err(Error::io(path, e));
            }
            o.dirty = false;
        }
        Ok(())
    }

    /// Closes the open band of GC copies (trailer, sync), if one is open
    /// and holds entries; the next copy opens a new one. `gc_io` held.
    fn close_gc_band(&self, slot: &mut Option<Open>) -> Result<()> {
        let Some(o) = slot.as_mut() else {
            return Ok(());
        };
        if o.entries == 0 {
            return Ok(());
        }
        self.write_trailer(o)?;
        {
            let mut st = self.state.lock();
            if let Some(b) = st.bands.get_mut(&o.band) {
                b.closed = true;
                b.file_len = o.len + TRAILER_LEN as u64;
            }
            st.gc_open = None;
            self.refresh_due_locked(&st);
        }
        self.open_closed_band(o.band);
        *slot = None;
        Ok(())
    }

    /// Opens the read handle (mapped from now on) of `band`, which just
    /// closed, while its file's inode and directory entry are in memory: a
    /// get that opened it on its first read of the band could wait for the
    /// device twice, once for the open's lookup. Should the open fail,
    /// `handle` opens it on the first read, as for a band of an earlier
    /// process.
    fn open_closed_band(&self, band: u64) {
        let reads = open_for_reads(&*self.fs, &self.path(band), self.opts.mmap_reads).ok();
        let _gate = self.handle_gate.lock();
        match reads {
            Some(h) => self.handles.insert(band, h),
            None => {
                self.handles.remove(&band);
            }
        }
    }

    /// The number of the next band, for either stream.
    fn take_band_number(&self) -> u64 {
        let mut st = self.state.lock();
        let id = st.next_id;
        st.next_id += 1;
        id
    }

    /// Writes the closed-band trailer of `o` and syncs the band.
    fn write_trailer(&self, o: &mut Open) -> Result<()> {
        let path = self.path(o.band);
        let t = band::encode_trailer(&band::Trailer {
            entries: o.entries,
            data_end: o.len,
            max_seq: o.max_seq,
        });
        o.file
            .append(&t)
            .and_then(|_| o.file.flush())
            .and_then(|_| o.file.sync())
            .ctx(&path)?;
        self.stats
            .add_written(IoCategory::ValueStore, t.len() as u64);
        Ok(())
    }

    /// Encodes and writes `recs` at the end of `o` and updates the band's
    /// lengths, the last sequence number and the invalidity table; the
    /// caller closes the band when full.
    fn append_locked(
        &self,
        o: &mut Open,
        recs: &[(Kind, &[u8], u64, &[u8])],
        prev_of: &dyn Fn(usize, &[u8]) -> Option<ValuePointer>,
        cat: IoCategory,
    ) -> Result<Vec<ValuePointer>> {
        let need: u64 = recs.iter().map(|r| band::entry_len(r.1, r.3) as u64).sum();
        if let Some(cap) = self.opts.capacity {
            if recs.iter().any(|r| r.0 == Kind::Value) {
                let used = Self::used_locked(&self.state.lock());
                if used + need > cap {
                    return Err(Error::ValueStoreFull(format!(
                        "the bands take {used} bytes and {need} more would pass value_capacity {cap}; \
                         GC could not free enough (delete data or reopen with a larger value_capacity)"
                    )));
                }
            }
        }
        let user = cat != IoCategory::Gc;
        // The open band's encoding buffer, reused from append to append.
        let mut buf = std::mem::take(&mut o.scratch);
        buf.clear();
        buf.reserve(need as usize);
        let mut ptrs = Vec::with_capacity(recs.len());
        // Previous versions and what they invalidate: `(address, seq)`.
        let mut charges: Vec<(ValuePointer, u64)> = Vec::new();
        let mut in_batch: HashMap<&[u8], ValuePointer> = HashMap::new();
        let mut max_seq = o.max_seq;
        for (i, &(kind, key, seq, payload)) in recs.iter().enumerate() {
            let linked = user && kind != Kind::Relocation;
            let prev = if linked {
                in_batch.get(key).copied().or_else(|| prev_of(i, key))
            } else if user {
                None
            } else {
                // A GC copy keeps the original's previous version.
                prev_of(i, key)
            };
            let before = buf.len();
            let flags = if i + 1 == recs.len() { BATCH_END } else { 0 };
            band::encode_entry(&mut buf, kind, flags, key, seq, prev.as_ref(), payload);
            let p = ValuePointer {
                file_id: o.band,
                offset: o.len + before as u64,
                length: (buf.len() - before) as u32,
                aux: if kind == Kind::Tombstone {
                    AUX_TOMBSTONE
                } else {
                    0
                },
            };
            if linked {
                if let Some(prev) = prev {
                    // A delete token was charged when it was written.
                    if prev.aux & AUX_TOMBSTONE == 0 {
                        charges.push((prev, seq));
                    }
                }
                if kind == Kind::Tombstone {
                    // A delete token is garbage once nothing older survives.
                    charges.push((p, seq));
                }
                if recs.len() > 1 {
                    // A batch of one has no earlier entry to find.
                    in_batch.insert(key, p);
                }
            } else if user && kind == Kind::Relocation {
                // A relocation record is only log: garbage as soon as it is
                // written, collectable once the replay checkpoints pass it.
                charges.push((p, seq));
            }
            max_seq = max_seq.max(seq);
            ptrs.push(p);
        }
        if let Err(e) = o.file.append(&buf).and_then(|_| o.file.flush()) {
            o.failed = Some(format!("a write failed: {e}"));
            return Err(Error::io(self.path(o.band), e));
        }
        self.stats.add_written(cat, buf.len() as u64);
        o.len += buf.len() as u64;
        if buf.capacity() <= SCRATCH_KEEP {
            o.scratch = buf;
        }
        o.entries += recs.len() as u32;
        o.max_seq = max_seq;
        o.dirty = true;
        {
            let mut st = self.state.lock();
            if let Some(b) = st.bands.get_mut(&o.band) {
                b.valid_len = o.len;
                b.file_len = o.len;
                b.entries = o.entries;
            }
            st.last_seq = st.last_seq.max(max_seq);
            for (p, s) in charges {
                Self::charge_locked(&mut st, &p, s);
            }
        }
        Ok(ptrs)
    }

    /// Closes the open band (trailer, sync) and opens the next. `io` held.
    fn roll(&self, o: &mut Open) -> Result<()> {
        self.write_trailer(o)?;
        let id = self.take_band_number();
        // A power loss may keep a later band only if it keeps this one:
        // the directory is synced when the closing band's entry is not
        // durable yet (covering both entries), so every other roll. File
        // systems need not persist unsynced directory entries in the order
        // they were made, so leaving every entry to the next `sync` could
        // keep band N + 2 and lose band N + 1 — a hole in the log, which
        // replay without a WAL would apply as if nothing were missing.
        let sync_dir = !o.dir_synced;
        let (file, len) =
            Self::create_band(self.fs.as_ref(), &self.dir, id, &self.stats, sync_dir)?;
        {
            let mut st = self.state.lock();
            if let Some(b) = st.bands.get_mut(&o.band) {
                b.closed = true;
                b.file_len = o.len + TRAILER_LEN as u64;
            }
            st.bands.insert(id, BandInfo::created(len));
            st.open = id;
            self.refresh_due_locked(&st);
        }
        self.open_closed_band(o.band);
        *o = Open {
            band: id,
            file,
            len,
            entries: 0,
            max_seq: o.max_seq,
            dirty: false,
            dir_synced: sync_dir,
            header_synced: false,
            failed: None,
            scratch: std::mem::take(&mut o.scratch),
        };
        Ok(())
    }

    /// `None` when `ptr` is outside every band's valid range.
    fn readable(&self, ptr: &ValuePointer) -> bool {
        let st = self.state.lock();
        ptr.offset >= HEADER_LEN
            && st
                .bands
                .get(&ptr.file_id)
                .is_some_and(|b| ptr.end() <= b.valid_len)
    }

    fn read_raw(&self, ptr: &ValuePointer, cat: IoCategory) -> Result<Option<Vec<u8>>> {
        if !self.readable(ptr) {
            return Ok(None);
        }
        let h = match self.handle(ptr.file_id) {
            Ok(h) => h,
            // Deleted by GC between the check and the open.
            Err(_) if !self.readable(ptr) => return Ok(None),
            Err(e) => return Err(e),
        };
        let buf = self
            .latency
            .read(&*h, ptr.offset, ptr.length as usize)
            .ctx(&self.path(ptr.file_id))?;
        self.stats.add_read(cat, buf.len() as u64);
        Ok(Some(buf))
    }

    /// Reads the entry at `ptr` whatever its kind (an index verifying a
    /// fingerprint match, or walking back to an older version). `Ok(None)`
    /// when the address lies outside the bands (collected, or lost in a
    /// crash).
    ///
    /// # Errors
    /// `Corruption` with band file and offset when the bytes there are not
    /// an intact entry of the pointer's length.
    pub fn read_entry(&self, ptr: &ValuePointer) -> Result<Option<OwnedEntry>> {
        let Some(buf) = self.read_raw(ptr, IoCategory::ValueStore)? else {
            return Ok(None);
        };
        let e = self.check_entry(ptr, &buf)?;
        Ok(Some(OwnedEntry {
            kind: e.kind,
            key: e.key.to_vec(),
            seq: e.seq,
            prev: e.prev,
            payload: e.payload.to_vec(),
        }))
    }

    fn check_entry<'a>(&self, ptr: &ValuePointer, buf: &'a [u8]) -> Result<Entry<'a>> {
        match band::decode_entry(buf) {
            Ok(e) if e.len == buf.len() => Ok(e),
            Ok(_) => Err(Error::corruption(
                self.path(ptr.file_id),
                ptr.offset,
                "band entry length differs from the pointer",
            )),
            Err(e) => Err(Error::corruption(
                self.path(ptr.file_id),
                ptr.offset,
                format!("band entry damaged ({e:?})"),
            )),
        }
    }

    /// True when `ptr` lies in a band GC has collected and deleted.
    pub fn is_collected(&self, ptr: &ValuePointer) -> bool {
        let st = self.state.lock();
        ptr.file_id < st.next_id && !st.bands.contains_key(&ptr.file_id)
    }

    /// The key index's replay position, if known.
    pub fn key_checkpoint(&self) -> Option<(u64, u64)> {
        self.state.lock().key_ckpt
    }

    /// The replay position of the last committed checkpoint (log mode).
    pub fn checkpoint_position(&self) -> Option<(u64, u64)> {
        self.state.lock().ckpt
    }

    /// Records the key index's durable replay position (monotonic).
    pub fn set_key_checkpoint(&self, pos: (u64, u64)) {
        let mut st = self.state.lock();
        if st.key_ckpt.is_none_or(|c| c < pos) {
            st.key_ckpt = Some(pos);
        }
    }

    /// The first band GC must keep: the lower of the checkpoints (log
    /// mode); `None` without log mode.
    fn gc_limit_locked(&self, st: &State) -> Option<u64> {
        let c = st.ckpt?.0;
        if self.opts.key_index {
            Some(st.key_ckpt.map_or(0, |k| k.0.min(c)))
        } else {
            Some(c)
        }
    }

    /// Sequence number of the last appended entry.
    pub fn last_seq(&self) -> SeqNum {
        self.state.lock().last_seq
    }

    /// The invalidity table: `(band, invalid bytes)` of every band.
    pub fn invalidity(&self) -> Vec<(u64, u64)> {
        let st = self.state.lock();
        st.bands.iter().map(|(&b, i)| (b, i.invalid)).collect()
    }

    /// `(open, closed, retired)` band counts.
    pub fn band_counts(&self) -> (u64, u64, u64) {
        let st = self.state.lock();
        let retired = st.bands.values().filter(|b| b.retired.is_some()).count() as u64;
        let closed = st
            .bands
            .values()
            .filter(|b| b.closed && b.retired.is_none())
            .count() as u64;
        let open = 1 + u64::from(st.gc_open.is_some());
        (open, closed, retired)
    }

    fn persisted_locked(st: &State) -> PersistedState {
        PersistedState {
            ckpt: st.ckpt.unwrap_or((0, 0)),
            retired: st
                .bands
                .iter()
                .filter(|(_, b)| b.retired.is_some())
                .map(|(&id, _)| id)
                .collect(),
            invalid: st
                .bands
                .iter()
                .filter(|(_, b)| b.invalid > 0 && b.retired.is_none())
                .map(|(&id, b)| (id, b.invalid, b.inval_seq))
                .collect(),
        }
    }

    /// Replays the complete batches of band `id` from `start` to its valid
    /// end; `Corruption` where an entry before the valid end is damaged.
    fn replay_band(
        &self,
        id: u64,
        start: u64,
        end: u64,
        f: &mut dyn FnMut(u64, &Entry<'_>) -> Result<()>,
    ) -> Result<u64> {
        if start >= end {
            return Ok(0);
        }
        let path = self.path(id);
        let h = self.handle(id)?;
        let mut buf = vec![0u8; (end - start) as usize];
        h.read_exact_at(start, &mut buf).ctx(&path)?;
        self.stats.add_read(IoCategory::Wal, buf.len() as u64);
        let mut err = None;
        let (stop, n, _) = band::scan_batches(&buf, start, |at, e| {
            if err.is_none() {
                if let Err(x) = f(at, e) {
                    err = Some(x);
                }
            }
        });
        if let Some(e) = err {
            return Err(e);
        }
        if stop < end {
            let why = match band::decode_entry(&buf[(stop - start) as usize..]) {
                Err(DecodeError::Truncated) | Ok(_) => "band ends inside a write batch".into(),
                Err(e) => format!("band entry damaged ({e:?})"),
            };
            return Err(Error::corruption(path, stop, why));
        }
        Ok(n as u64)
    }

    /// Replays every complete batch after the checkpoint in band order,
    /// calling `f(address, entry)` (GC copies included, which
    /// [`ValueStore::replay`] skips). For an index that rebuilds itself from
    /// the bands.
    ///
    /// # Errors
    /// `Corruption` with band file and offset; `Io`; whatever `f` returns.
    pub fn replay_entries(
        &self,
        f: &mut dyn FnMut(ValuePointer, &Entry<'_>) -> Result<()>,
    ) -> Result<()> {
        let from = self.state.lock().ckpt.unwrap_or((0, 0));
        self.replay_entries_from(from, f)
    }

    /// As [`BandStore::replay_entries`], from position `from`.
    ///
    /// # Errors
    /// `Corruption` with band file and offset; `Io`; whatever `f` returns.
    pub fn replay_entries_from(
        &self,
        from: (u64, u64),
        f: &mut dyn FnMut(ValuePointer, &Entry<'_>) -> Result<()>,
    ) -> Result<()> {
        let ranges: Vec<(u64, u64, u64)> = {
            let st = self.state.lock();
            let ckpt = from;
            st.bands
                .iter()
                .filter(|(&id, b)| id >= ckpt.0 && b.retired.is_none())
                .map(|(&id, b)| {
                    let from = if id == ckpt.0 { ckpt.1 } else { 0 };
                    (id, from.max(HEADER_LEN), b.valid_len)
                })
                .collect()
        };
        for (id, start, end) in ranges {
            self.replay_band(id, start, end, &mut |at, e| f(e.pointer(id, at), e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
