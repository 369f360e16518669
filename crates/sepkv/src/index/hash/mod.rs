//! The FlashKey hash index (§V-A1, §V-B1–B3, §V-B6) over logical bands.
//!
//! [`HashIndex`] maps each key to the address of its newest version in the
//! bands (an `IndexLog`) through the [`table::Table`]; every put, delete token and
//! GC relocation is logged in the bands, which are the only log.
//!
//! - **Get** (§V-B1): hash the key, read the record of each node of its
//!   bucket whose fingerprint matches until one holds the key; a delete
//!   token reads as absent.
//! - **Put / delete** (§V-B2, §V-B3): under the writer's lock, find the
//!   key's node, append the batch to the open band (each entry records the
//!   address it supersedes, which the invalidity table charges), then point
//!   the node at the new entry or add a node for a new key. A delete of a
//!   key the table does not hold writes nothing. Finding the node reads no
//!   record in the common case (see [`HashIndex::set_liveness`]): a node
//!   holds 64 bits of the key's hashes besides its bucket, and the key-only
//!   LSM-tree says whether the key is live, which together name the node
//!   unless two nodes share all those bits (a true collision).
//! - **Snapshots** (beyond the paper): a read at sequence number `s` starts
//!   at the newest version and follows the previous-version addresses back
//!   to the first entry with a sequence number `<= s`. GC keeps such
//!   versions (see `vstore::index_log`).
//! - **Modes** (§V-A1): `Memory` keeps every page in memory; `Disk` keeps
//!   at most `cache_bytes` of pages. Both checkpoint the changed buckets
//!   of the dirty pages (delta records, [`table`]) every
//!   `checkpoint_bands` closed bands (§V-B6), so recovery loads the
//!   checkpoint and replays only the bands after it, and GC may collect the
//!   bands before it.
//!
//! Thread-safety: writes, relocations and checkpoints are serialised by the
//! writer's lock. The table has a readers-writer lock of its own, never
//! held across a band read:
//! - a lookup whose page is in memory holds it for reading, so lookups run
//!   side by side;
//! - a lookup whose page is on disk reads the page with no lock held
//!   ([`table::Table::probe`]), then keeps it in memory only if it can
//!   take the lock for writing at once and without writing a dirty page
//!   out ([`table::Table::install`]);
//! - a change holds it for writing, with what loading its page takes: a
//!   page read, and the write of a dirty page evicted for room;
//! - a checkpoint holds it for writing while it appends the dirty pages,
//!   and syncs the page file and replaces the meta file without it, as a
//!   persist of the bands' state does (both under `meta_io`).

pub(crate) mod flashkey;
pub mod keylog;
pub mod table;

use crate::error::{Error, Result};
use crate::format::value_record::Kind;
use crate::fs::{FileSystem, IoStats};
use crate::index::key::{SeqNum, ValueType};
use crate::vstore::index_log::{open_bands, BandOptions, IndexLog, OwnedEntry, AUX_TOMBSTONE};
use crate::vstore::{GcOutcome, IndexReader, IndexRelocator, LogEntry, Relocation, ValuePointer};
use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use table::{hash_key, Probe, Table, TableFigures};

/// Where the hash table lives (§V-A1): the engine's option.
pub use crate::options::HashIndexMode as HashMode;

/// Knobs of the hash index.
#[derive(Debug, Clone)]
pub struct HashOptions {
    /// Memory or disk.
    pub mode: HashMode,
    /// Disk mode: most bytes of pages kept in memory.
    pub cache_bytes: u64,
    /// Checkpoint the table every this many closed bands (§V-B6; >= 1).
    pub checkpoint_bands: u64,
    /// Pages of a new table (64 buckets each; rounded up to a power of two).
    pub initial_pages: u64,
    /// Bytes of the memo of keys' current addresses (0: none).
    pub memo_bytes: u64,
    /// The bands.
    pub bands: BandOptions,
}

impl Default for HashOptions {
    fn default() -> Self {
        HashOptions {
            mode: HashMode::Memory,
            cache_bytes: 8 << 20,
            checkpoint_bands: 64,
            initial_pages: 16,
            memo_bytes: 5 << 20,
            bands: BandOptions::default(),
        }
    }
}

/// One operation of a write batch: a put (`Some(value)`) or a delete.
pub type Op<'a> = (&'a [u8], Option<&'a [u8]>);

/// The hash index with its bands. See the module docs.
pub struct HashIndex {
    bands: Arc<dyn IndexLog>,
    /// Read-locked by lookups of pages in memory, write-locked by
    /// everything that changes the table or its cache.
    table: RwLock<Table>,
    /// The writer's lock; holds the open band at the last checkpoint.
    writer: Mutex<u64>,
    last_seq: AtomicU64,
    snapshots: Mutex<BTreeMap<SeqNum, usize>>,
    /// Serialises writes of the meta file (checkpoints, the bands' state),
    /// which run without the table's lock: held from the moment a
    /// checkpoint takes the bands' state until its meta is written, so that
    /// a newer bands state GC persists is never overwritten by an older one.
    meta_io: Mutex<()>,
    /// Current addresses the bands asked for while logging the batch being
    /// written ([`PrevLookup`]), for [`HashIndex::apply_logged`].
    pending_prev: Mutex<HashMap<Vec<u8>, PrevResult>>,
    /// Addresses known to hold a key's record, so that a write finds the
    /// address it supersedes without reading the record back.
    known: AddressMemo,
    /// Whether a key is live, for a write the memo does not serve
    /// ([`HashIndex::set_liveness`]).
    liveness: RwLock<Option<Weak<dyn KeyLiveness>>>,
    opts: HashOptions,
}

/// Whether a key is live — its newest version a value, not a delete token
/// — as a structure beside the hash table knows it exactly: the key-only
/// LSM-tree (§V-A3), which holds every live key and no other.
pub trait KeyLiveness: Send + Sync {
    /// True when `key`'s newest version is a value.
    ///
    /// # Errors
    /// `Io` or `Corruption` reading the structure.
    fn is_live(&self, key: &[u8]) -> Result<bool>;
}

/// Slots of one set of the [`AddressMemo`] (a power of two).
const MEMO_WAYS: usize = 4;
/// Longest key the [`AddressMemo`] keeps (bytes).
const MEMO_KEY_MAX: usize = 27;

/// The address of a key's newest value, as a user's put wrote it or a read
/// verified it: as many 40-byte slots as [`HashOptions::memo_bytes`] holds,
/// rounded down to a power of two, in sets of four chosen by the key's
/// hash, each set in order of use. Keys longer than 27 bytes, and
/// addresses past 4 GiB of band numbers or offsets, are not kept.
///
/// A put or delete first finds the address of the key's current version,
/// to record it in the new entry and charge it to the invalidity table
/// (§V-A4, §V-B2). The table holds only fingerprints, so each fingerprint
/// match costs a record read to verify the key (§V-B1). A key written or
/// read recently is found here instead: if a node of the key's bucket
/// holds the address remembered for the key, that node is the key's, since
/// the record at an address never changes while the process runs (bands
/// are append-only and a band's number is never used again). A remembered
/// address no node holds any more (moved by GC) misses, and the record
/// reads decide as before. Delete tokens are not remembered.
struct AddressMemo {
    slots: Mutex<Vec<MemoSlot>>,
}

#[derive(Clone, Copy, Default)]
struct MemoSlot {
    /// Band number; 0 = empty.
    band: u32,
    offset: u32,
    length: u32,
    len: u8,
    key: [u8; MEMO_KEY_MAX],
}

impl MemoSlot {
    /// The slot for `key` at `ptr`; `None` for what the memo does not keep
    /// (a long key, a delete token, an address past 32 bits).
    fn new(key: &[u8], ptr: ValuePointer) -> Option<MemoSlot> {
        let (Ok(band), Ok(offset)) = (u32::try_from(ptr.file_id), u32::try_from(ptr.offset)) else {
            return None;
        };
        if key.len() > MEMO_KEY_MAX || band == 0 || ptr.aux != 0 {
            return None;
        }
        let mut slot = MemoSlot {
            band,
            offset,
            length: ptr.length,
            len: key.len() as u8,
            key: [0; MEMO_KEY_MAX],
        };
        slot.key[..key.len()].copy_from_slice(key);
        Some(slot)
    }

    fn holds(&self, key: &[u8]) -> bool {
        self.band != 0 && &self.key[..self.len as usize] == key
    }

    fn ptr(&self) -> ValuePointer {
        ValuePointer {
            file_id: self.band.into(),
            offset: self.offset.into(),
            length: self.length,
            aux: 0,
        }
    }
}

impl AddressMemo {
    /// A memo of at most `bytes` (none below one set).
    fn new(bytes: u64) -> AddressMemo {
        let slots = (bytes / std::mem::size_of::<MemoSlot>() as u64) as usize;
        let slots = if slots < MEMO_WAYS {
            0
        } else {
            1 << slots.ilog2()
        };
        AddressMemo {
            slots: Mutex::new(vec![MemoSlot::default(); slots]),
        }
    }

    fn set(h: u64, slots: usize) -> std::ops::Range<usize> {
        let first = (h as usize & (slots / MEMO_WAYS - 1)) * MEMO_WAYS;
        first..first + MEMO_WAYS
    }

    /// Remembers that the record at `ptr` holds `key` (hash `h`), first in
    /// its set; the set's least recently used key goes.
    fn note(&self, h: u64, key: &[u8], ptr: ValuePointer) {
        self.put(h, key, ptr, true);
    }

    /// As [`AddressMemo::note`], but a key new to its set takes the least
    /// recently used slot and stays there, and a key already there keeps
    /// its place.
    fn note_cold(&self, h: u64, key: &[u8], ptr: ValuePointer) {
        self.put(h, key, ptr, false);
    }

    /// Puts `key` at `ptr` where its set holds it, else in the least
    /// recently used slot; `first` moves it to the front.
    fn put(&self, h: u64, key: &[u8], ptr: ValuePointer, first: bool) {
        let Some(slot) = MemoSlot::new(key, ptr) else {
            return;
        };
        let mut slots = self.slots.lock();
        if slots.is_empty() {
            return;
        }
        let n = slots.len();
        let set = &mut slots[Self::set(h, n)];
        let mut at = set
            .iter()
            .position(|s| s.holds(key))
            .unwrap_or(MEMO_WAYS - 1);
        if first {
            set[..=at].rotate_right(1);
            at = 0;
        }
        set[at] = slot;
    }

    /// The address remembered for `key` (hash `h`), if any.
    fn get(&self, h: u64, key: &[u8]) -> Option<ValuePointer> {
        let slots = self.slots.lock();
        if slots.is_empty() {
            return None;
        }
        slots[Self::set(h, slots.len())]
            .iter()
            .find(|s| s.holds(key))
            .map(MemoSlot::ptr)
    }
}

/// The outcome of [`HashIndex::walk`].
#[derive(Debug)]
pub enum Walk {
    /// The version visible at the sequence number (maybe a delete token).
    Found(ValuePointer, OwnedEntry),
    /// The key had no version then.
    Absent,
    /// The walk reached a collected band.
    Gone,
}

/// A key's current address as a lookup for the bands found it (or why
/// it failed).
type PrevResult = std::result::Result<Option<ValuePointer>, String>;

/// What a batch did to the set of keys (for the key-only LSM-tree, §V-A3):
/// a key's first put inserts it, its delete removes it; overwrites do
/// nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyOp {
    /// The key came into existence.
    Insert(Vec<u8>),
    /// The key was deleted.
    Remove(Vec<u8>),
}

impl HashIndex {
    /// Opens (or creates) the index in `dir`: loads the last checkpoint and
    /// replays the bands after it.
    ///
    /// # Errors
    /// `Corruption` with file and offset for damaged pages, meta or bands;
    /// `Io`.
    pub fn open(
        dir: &Path,
        fs: Arc<dyn FileSystem>,
        stats: Arc<IoStats>,
        mut opts: HashOptions,
    ) -> Result<HashIndex> {
        use crate::error::IoContext;
        fs.create_dir_all(dir).ctx(dir)?;
        opts.bands.log_mode = true;
        opts.bands.value_threshold = 0;
        opts.checkpoint_bands = opts.checkpoint_bands.max(1);
        let cache_pages = match opts.mode {
            HashMode::Memory => usize::MAX,
            HashMode::Disk => (opts.cache_bytes / 8192).max(4) as usize,
        };
        let (table, existed) = Table::open(
            dir,
            fs.clone(),
            stats.clone(),
            cache_pages,
            opts.initial_pages,
        )?;
        let state = existed.then(|| table.checkpoint_state().1.to_vec());
        let bands = open_bands(
            dir,
            fs,
            stats,
            opts.bands.clone(),
            state.as_deref().filter(|s| !s.is_empty()),
        )?;
        let idx = HashIndex {
            last_seq: AtomicU64::new(0),
            bands,
            table: RwLock::new(table),
            writer: Mutex::new(0),
            snapshots: Mutex::new(BTreeMap::new()),
            meta_io: Mutex::new(()),
            pending_prev: Mutex::new(HashMap::new()),
            known: AddressMemo::new(opts.memo_bytes),
            liveness: RwLock::new(None),
            opts,
        };
        idx.recover()?;
        Ok(idx)
    }

    /// Replays the bands after the checkpoint into the table (idempotent:
    /// it starts from the checkpoint's pages every time), then checkpoints.
    fn recover(&self) -> Result<()> {
        let mut w = self.writer.lock();
        let bands = self.bands.clone();
        bands.replay_entries(None, &mut |addr, e| {
            match e.kind {
                Kind::Value | Kind::Tombstone => {
                    let old = self.upsert(e.key, None, addr)?;
                    self.charge(old, addr, e.seq);
                }
                Kind::Relocation => {
                    let p = ValuePointer::decode(e.payload).ok_or_else(|| {
                        Error::corruption(
                            format!("band {}", addr.file_id),
                            addr.offset,
                            "relocation record holds no pointer",
                        )
                    })?;
                    // Log only: garbage once written (as when logged).
                    self.bands.note_invalid(&addr, e.seq);
                    if p.file_id == 0 {
                        if let Some((n, _)) = self.find(e.key)? {
                            let (h, _) = hash_key(e.key);
                            self.table.write().remove(h, &n)?;
                        }
                    } else {
                        self.upsert(e.key, None, p)?;
                    }
                }
                Kind::GcCopy | Kind::Inline | Kind::Tag => {}
            }
            Ok(())
        })?;
        self.last_seq
            .store(self.bands.last_seq(), Ordering::Release);
        self.checkpoint_locked(&mut w)
    }

    /// Charges the version `old` superseded by `new` (§V-A4).
    fn charge(&self, old: Option<ValuePointer>, new: ValuePointer, seq: SeqNum) {
        if let Some(o) = old {
            if o.aux & AUX_TOMBSTONE == 0 {
                self.bands.note_invalid(&o, seq);
            }
        }
        if new.aux & AUX_TOMBSTONE != 0 {
            self.bands.note_invalid(&new, seq);
        }
    }

    /// Points `key`'s node at `new` (its current address `known`, or found
    /// by lookup), adding a node for a new key; returns the old address.
    fn upsert(
        &self,
        key: &[u8],
        known: Option<Option<ValuePointer>>,
        new: ValuePointer,
    ) -> Result<Option<ValuePointer>> {
        let (h, fp) = hash_key(key);
        let old = match known {
            Some(k) => k,
            None => self.current_address(key)?,
        };
        self.known.note(h, key, new);
        let mut t = self.table.write();
        match old {
            Some(o) => {
                if !t.replace(h, &o, new)? {
                    return Err(Error::InvalidArgument(
                        "hash-table node moved under the writer".into(),
                    ));
                }
            }
            None => t.insert(h, fp, new)?,
        }
        Ok(old)
    }

    /// Nodes of `h`'s bucket whose fingerprint is `fp` ([`Table::candidates`]),
    /// reading a page that is on disk without the table's lock
    /// ([`Table::probe`]). A page that fails to read or check there is
    /// looked up again under the lock, which reports the fault.
    ///
    /// # Errors
    /// `Corruption` (page file and offset) for a damaged page; `Io`.
    fn candidates(&self, h: u64, fp: u32) -> Result<Vec<table::Node>> {
        let probe = self.table.read().probe(h, fp);
        let read = match probe {
            Probe::Found(c) => return Ok(c),
            Probe::Read(r) => r,
            Probe::Load => return self.table.write().candidates(h, fp),
        };
        match read.read() {
            Ok(page) => {
                let c = page.candidates(h, fp);
                // Keeping the page is worth no wait: skipped while another
                // thread holds the table.
                if let Some(mut t) = self.table.try_write() {
                    t.install(&read, page);
                }
                Ok(c)
            }
            Err(_) => self.table.write().candidates(h, fp),
        }
    }

    /// The address of `key`'s newest record (a delete token included), as
    /// [`HashIndex::find`] gives it, without reading a record when no node
    /// has the key's hash bits, when the [`AddressMemo`] names one of those
    /// that do, or when the key's liveness tells which one is the key's
    /// ([`HashIndex::by_liveness`]).
    ///
    /// Writes only: under the writer's lock the liveness and the table
    /// agree (see [`HashIndex::set_liveness`]).
    ///
    /// # Errors
    /// As [`HashIndex::find`]; `Io` or `Corruption` asking the liveness.
    fn current_address(&self, key: &[u8]) -> Result<Option<ValuePointer>> {
        self.address(key, true)
    }

    /// [`HashIndex::current_address`], asking the liveness only with
    /// `liveness`.
    fn address(&self, key: &[u8], liveness: bool) -> Result<Option<ValuePointer>> {
        let (h, fp) = hash_key(key);
        let cands = self.candidates(h, fp)?;
        if cands.is_empty() {
            return Ok(None);
        }
        if let Some(p) = self.known.get(h, key) {
            if cands.iter().any(|n| n.ptr == p) {
                return Ok(Some(p));
            }
        }
        if liveness {
            if let Some(p) = self.by_liveness(key, &cands)? {
                return Ok(p);
            }
        }
        Ok(self.find(key)?.map(|x| x.0))
    }

    /// Gives the hash index a way to know whether a key is live (the
    /// key-only LSM-tree), which must hold every key that has a node not
    /// on a delete token and no other from then on, whenever the writer's
    /// lock is free; a write then takes the address it supersedes from the
    /// nodes whose hash bits are the key's and the key's liveness, in the
    /// common case without reading a record. GC's lookups
    /// ([`IndexReader::current_pointer`]), which may run beside a write, do
    /// not ask it. Without one (the hash index alone, or while recovery
    /// replays the bands) a write verifies the key by reading the records
    /// of the nodes that match it.
    pub fn set_liveness(&self, l: Weak<dyn KeyLiveness>) {
        *self.liveness.write() = Some(l);
    }

    /// `key`'s current address decided from its liveness and the nodes
    /// `cands` that hold its hash bits (all of them, so the key's node is
    /// among them if it has one), or `None` when only reading records can
    /// tell:
    /// - the key is live: its node is the one of `cands` not on a delete
    ///   token, when there is one such node only;
    /// - the key is not live: it has no node when no node of `cands` is on
    ///   a delete token (a new key whose hash bits another key's node
    ///   holds: a true collision, and the new key gets a node of its own).
    ///
    /// A live key's node is never one a collected band holds (GC moves
    /// live values first), so no node here is a dangling one
    /// [`HashIndex::find`] would remove.
    fn by_liveness(
        &self,
        key: &[u8],
        cands: &[table::Node],
    ) -> Result<Option<Option<ValuePointer>>> {
        let Some(l) = self.liveness.read().as_ref().and_then(Weak::upgrade) else {
            return Ok(None);
        };
        let token = |n: &&table::Node| n.ptr.aux & AUX_TOMBSTONE != 0;
        if l.is_live(key)? {
            let mut values = cands.iter().filter(|n| !token(n));
            return Ok(match (values.next(), values.next()) {
                (Some(n), None) => Some(Some(n.ptr)),
                _ => None,
            });
        }
        Ok((!cands.iter().any(|n| token(&n))).then_some(None))
    }

    /// True when a node of `key`'s bucket points at `addr`, a record known
    /// to hold `key` (GC has just read it): then `addr` is the key's newest
    /// record. No record is read.
    ///
    /// # Errors
    /// `Corruption` or `Io` loading the table page (disk mode).
    pub fn points_at(&self, key: &[u8], addr: &ValuePointer) -> Result<bool> {
        let (h, fp) = hash_key(key);
        let found = self.candidates(h, fp)?.iter().any(|n| n.ptr == *addr);
        if found {
            // The relocation that usually follows finds the node here; as
            // the set's least recently used, so that GC's cold keys do not
            // push out keys written often.
            self.known.note_cold(h, key, *addr);
        }
        Ok(found)
    }

    /// The node holding `key` and its newest entry, verifying the key by
    /// reading the record of each fingerprint match (§V-B1).
    fn find(&self, key: &[u8]) -> Result<Option<(ValuePointer, OwnedEntry)>> {
        let (h, fp) = hash_key(key);
        // A node read just before GC moved it may point into a band GC has
        // since freed: look again, and find it at its new address. A node
        // that still points there after the look again is dangling (its
        // delete token was collected): it goes.
        let mut last: Option<Vec<table::Node>> = None;
        for _ in 0..4 {
            let cands = self.candidates(h, fp)?;
            if last.as_ref() == Some(&cands) {
                for n in &cands {
                    if self.bands.is_collected(&n.ptr) {
                        self.table.write().remove(h, &n.ptr)?;
                    }
                }
                break;
            }
            let mut moved = false;
            for n in &cands {
                match self.bands.read_entry(&n.ptr)? {
                    Some(e) if e.key == key => {
                        self.known.note(h, key, n.ptr);
                        return Ok(Some((n.ptr, e)));
                    }
                    Some(_) => {}
                    None => moved = true,
                }
            }
            if !moved {
                break;
            }
            last = Some(cands);
        }
        Ok(None)
    }

    /// The version of `key` visible at sequence number `at` — its address
    /// and entry (a delete token included) — walking back previous-version
    /// addresses from the newest; `None` when the key has no version then.
    ///
    /// # Errors
    /// `Corruption` with band file and offset when a record is damaged or a
    /// previous-version address leads to another key.
    pub fn lookup(&self, key: &[u8], at: SeqNum) -> Result<Option<(ValuePointer, OwnedEntry)>> {
        Ok(match self.walk(key, at)? {
            Walk::Found(p, e) => Some((p, e)),
            Walk::Absent | Walk::Gone => None,
        })
    }

    /// As [`HashIndex::lookup`], telling a key absent at `at` from a walk
    /// that reached a collected band (`Walk::Gone`): a reader that holds no
    /// snapshot may race the write and the GC that made its version
    /// unreachable, and then reads again at a newer sequence number.
    pub fn walk(&self, key: &[u8], at: SeqNum) -> Result<Walk> {
        let Some((mut ptr, mut e)) = self.find(key)? else {
            return Ok(Walk::Absent);
        };
        loop {
            if e.seq <= at {
                return match e.kind {
                    Kind::Value | Kind::GcCopy | Kind::Tombstone => Ok(Walk::Found(ptr, e)),
                    _ => Err(Error::corruption(
                        self.bands.band_file(ptr.file_id),
                        ptr.offset,
                        "hash-table node addresses a log-only record",
                    )),
                };
            }
            let Some(prev) = e.prev else {
                return Ok(Walk::Absent);
            };
            let Some(pe) = self.bands.read_entry(&prev)? else {
                return Ok(Walk::Gone);
            };
            if pe.key != key || pe.seq >= e.seq {
                return Err(Error::corruption(
                    self.bands.band_file(prev.file_id),
                    prev.offset,
                    "previous-version address leads to another key",
                ));
            }
            (ptr, e) = (prev, pe);
        }
    }

    /// Checks every hash-table page; returns the pages checked and faults.
    pub fn verify_table(&self) -> (u64, Vec<Error>) {
        let check = self.table.read().page_check();
        check.run()
    }

    /// Sets the last sequence number (the engine publishes its own).
    pub fn set_last_seq(&self, s: SeqNum) {
        self.last_seq.store(s, Ordering::Release);
    }

    /// The sequence number recovery restored (or the last written).
    pub fn last_seq(&self) -> SeqNum {
        self.last_seq.load(Ordering::Acquire)
    }

    /// Checkpoints when `checkpoint_bands` bands closed since the last one;
    /// returns whether it did. Writer lock held.
    ///
    /// # Errors
    /// `Io`.
    pub fn checkpoint_if_due(&self) -> Result<bool> {
        let mut w = self.writer.lock();
        let open = self.bands.log_position().map_or(0, |p| p.0);
        if open >= *w + self.opts.checkpoint_bands {
            self.checkpoint_locked(&mut w)?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Reads `key` at the newest state (`None`) or at sequence number
    /// `seq`, walking back previous-version addresses.
    ///
    /// # Errors
    /// `Corruption` with band file and offset when a record is damaged or a
    /// previous-version address leads to another key.
    pub fn get(&self, key: &[u8], seq: Option<SeqNum>) -> Result<Option<Vec<u8>>> {
        let at = seq.unwrap_or_else(|| self.last_seq.load(Ordering::Acquire));
        Ok(self
            .lookup(key, at)?
            .and_then(|(_, e)| (e.kind != Kind::Tombstone).then_some(e.payload)))
    }

    /// Applies a write batch; returns the sequence number of its last
    /// entry. The batch is logged in the bands before any node changes.
    ///
    /// # Errors
    /// `ValueStoreFull` (nothing written) when the bands are full — run GC
    /// ([`HashIndex::gc_step`]) and retry; `Io`; `Corruption`.
    pub fn write(&self, ops: &[Op<'_>]) -> Result<SeqNum> {
        let mut w = self.writer.lock();
        let seq0 = self.last_seq.load(Ordering::Relaxed) + 1;
        // Each entry's current address: from the table, or from an earlier
        // entry of the batch (the bands link those themselves).
        let mut seen: HashMap<&[u8], usize> = HashMap::new();
        let mut prevs: Vec<Option<ValuePointer>> = Vec::with_capacity(ops.len());
        let mut keep: Vec<bool> = Vec::with_capacity(ops.len());
        let mut exists: HashMap<&[u8], bool> = HashMap::new();
        for (i, (k, v)) in ops.iter().enumerate() {
            let cur = if seen.contains_key(k) {
                None
            } else {
                self.current_address(k)?
            };
            let present = *exists.entry(k).or_insert(cur.is_some());
            // A delete of an absent key changes nothing.
            let write = v.is_some() || present;
            if write {
                seen.insert(k, i);
                exists.insert(k, v.is_some());
            }
            prevs.push(cur);
            keep.push(write);
        }
        let mut entries = Vec::with_capacity(ops.len());
        let mut eprevs = Vec::with_capacity(ops.len());
        for (i, (k, v)) in ops.iter().enumerate() {
            if keep[i] {
                entries.push(LogEntry {
                    vtype: if v.is_some() {
                        ValueType::Value
                    } else {
                        ValueType::Deletion
                    },
                    separate: true,
                    key: k,
                    seq: seq0 + i as u64,
                    value: v.unwrap_or(b""),
                });
                eprevs.push(prevs[i]);
            }
        }
        let last = seq0 + ops.len() as u64 - 1;
        if !entries.is_empty() {
            let ptrs = self.bands.log_linked(&entries, Some(&eprevs))?;
            let mut latest: HashMap<&[u8], ValuePointer> = HashMap::new();
            for ((e, p), prev) in entries.iter().zip(&ptrs).zip(&eprevs) {
                let old = latest.get(e.key).copied().or(*prev);
                self.upsert(e.key, Some(old), *p)?;
                latest.insert(e.key, *p);
            }
        }
        self.last_seq.store(last, Ordering::Release);
        let open = self.bands.log_position().map_or(0, |p| p.0);
        if open >= *w + self.opts.checkpoint_bands {
            self.checkpoint_locked(&mut w)?;
        }
        Ok(last)
    }

    /// Applies a batch the bands logged through [`ValueStore::log_batch`]
    /// (the engine's write path): `entries` are the batch as the index
    /// receives it (`Pointer` for a put or a GC relocation, `Deletion`),
    /// `addrs` the address of each entry (`IndexLog::take_last_batch`).
    /// Returns how the batch changed the set of keys, each change with the
    /// position in `entries` of the entry that made it. Writer lock held.
    ///
    /// # Errors
    /// `Corruption`, `Io`; a lookup the bands made while logging failed.
    pub fn apply_logged(
        &self,
        entries: &[(ValueType, &[u8], &[u8])],
        addrs: &[ValuePointer],
    ) -> Result<Vec<(usize, KeyOp)>> {
        if entries.len() != addrs.len() {
            return Err(Error::InvalidArgument(format!(
                "{} entries but {} band addresses",
                entries.len(),
                addrs.len()
            )));
        }
        let mut pending = std::mem::take(&mut *self.pending_prev.lock());
        let mut latest: HashMap<&[u8], Option<ValuePointer>> = HashMap::new();
        let mut ops = Vec::new();
        for (i, (&(t, key, value), addr)) in entries.iter().zip(addrs).enumerate() {
            let old = match latest.get(key) {
                Some(p) => *p,
                None => match pending.remove(key) {
                    Some(r) => r.map_err(Error::InvalidArgument)?,
                    None => self.current_address(key)?,
                },
            };
            let live = old.is_some_and(|p| p.aux & AUX_TOMBSTONE == 0);
            // A user's put of a value, the one kind of entry remembered: a
            // GC relocation moves mostly keys no one writes, which would
            // push keys written often out of the memo.
            let mut put = false;
            let new = match t {
                ValueType::Pointer => {
                    let p = ValuePointer::decode(value).ok_or_else(|| {
                        Error::InvalidArgument("batch holds a malformed pointer".into())
                    })?;
                    // A user's put addresses its own entry; a GC relocation
                    // moves the node to the copy (or, null, removes it).
                    put = p == (ValuePointer { aux: 0, ..*addr });
                    if put && !live {
                        ops.push((i, KeyOp::Insert(key.to_vec())));
                    }
                    // GC removing a live value (the compaction filter's
                    // removal) takes the key out of the key-only tree too.
                    if p.file_id == 0 && live {
                        ops.push((i, KeyOp::Remove(key.to_vec())));
                    }
                    Some(p)
                }
                ValueType::Deletion => {
                    if live {
                        ops.push((i, KeyOp::Remove(key.to_vec())));
                    }
                    // A delete of an absent key needs no node.
                    old.map(|_| *addr)
                }
                ValueType::Value => {
                    return Err(Error::InvalidArgument(
                        "the hash index keeps no inline values".into(),
                    ))
                }
            };
            let (h, fp) = hash_key(key);
            let mut tbl = self.table.write();
            match (old, new) {
                (Some(o), Some(n)) if n.file_id == 0 => {
                    tbl.remove(h, &o)?;
                }
                (Some(o), Some(n)) if !tbl.replace(h, &o, n)? => {
                    return Err(Error::InvalidArgument(
                        "hash-table node moved under the writer".into(),
                    ));
                }
                (None, Some(n)) if n.file_id != 0 => tbl.insert(h, fp, n)?,
                _ => {}
            }
            drop(tbl);
            if let (true, Some(n)) = (put, new) {
                self.known.note(h, key, n);
            }
            latest.insert(key, new.filter(|n| n.file_id != 0));
        }
        Ok(ops)
    }

    /// Writes the table's checkpoint (§V-B6). Writer lock held; the
    /// table's lock only while the dirty pages are appended.
    fn checkpoint_locked(&self, w: &mut u64) -> Result<()> {
        self.bands.sync()?;
        let Some(pos) = self.bands.log_position() else {
            return Ok(());
        };
        let _meta_io = self.meta_io.lock();
        let state = self.bands.state_with_checkpoint(pos);
        let rest = self.table.write().checkpoint_write(pos, state)?;
        let meta = rest.finish()?;
        self.table.write().checkpoint_done(meta);
        self.bands.checkpoint_committed(pos);
        *w = pos.0;
        Ok(())
    }

    /// Checkpoints now (as at a clean shutdown).
    ///
    /// # Errors
    /// `Io`.
    pub fn checkpoint(&self) -> Result<()> {
        let mut w = self.writer.lock();
        self.checkpoint_locked(&mut w)
    }

    /// Makes every write durable.
    ///
    /// # Errors
    /// `Io`.
    pub fn sync(&self) -> Result<()> {
        self.bands.sync()
    }

    /// Registers a snapshot at the latest sequence number and returns it.
    pub fn snapshot(&self) -> SeqNum {
        let s = self.last_seq.load(Ordering::Acquire);
        *self.snapshots.lock().entry(s).or_insert(0) += 1;
        s
    }

    /// Releases a snapshot taken with [`HashIndex::snapshot`].
    pub fn release(&self, seq: SeqNum) {
        let mut m = self.snapshots.lock();
        if let Some(n) = m.get_mut(&seq) {
            *n -= 1;
            if *n == 0 {
                m.remove(&seq);
            }
        }
    }

    /// Runs one band GC step (§V-B5).
    ///
    /// # Errors
    /// `Io`, `Corruption`.
    pub fn gc_step(&self) -> Result<GcOutcome> {
        self.bands.gc_step(self, self)
    }

    /// The bands.
    pub fn bands(&self) -> &Arc<dyn IndexLog> {
        &self.bands
    }

    /// Figures of the table.
    pub fn table_figures(&self) -> TableFigures {
        self.table.read().figures()
    }

    /// Estimated bytes of pages in memory.
    pub fn cached_bytes(&self) -> usize {
        self.table.read().cached_bytes()
    }
}

impl crate::vstore::index_log::PrevLookup for HashIndex {
    fn prev(&self, key: &[u8]) -> Option<ValuePointer> {
        let r = self.current_address(key).map_err(|e| e.to_string());
        let p = r.clone().ok().flatten();
        self.pending_prev.lock().insert(key.to_vec(), r);
        p
    }
}

impl IndexReader for HashIndex {
    fn current_pointer(&self, key: &[u8]) -> Result<Option<ValuePointer>> {
        self.address(key, false)
    }

    fn points_at(&self, key: &[u8], addr: &ValuePointer) -> Result<bool> {
        HashIndex::points_at(self, key, addr)
    }

    fn oldest_visible_seq(&self) -> SeqNum {
        let last = self.last_seq.load(Ordering::Acquire);
        self.snapshots
            .lock()
            .keys()
            .next()
            .copied()
            .map_or(last, |s| s.min(last))
    }

    fn last_sequence(&self) -> SeqNum {
        self.last_seq.load(Ordering::Acquire)
    }

    fn wait_in_flight_writes(&self) -> Result<()> {
        drop(self.writer.lock());
        Ok(())
    }
}

impl IndexRelocator for HashIndex {
    /// Installs each move whose key's node still holds `old` (a null `new`
    /// removes the node: a dropped delete token), logs the installed ones
    /// as relocation records, and makes them durable.
    fn relocate(&self, moves: &[Relocation]) -> Result<(Vec<bool>, SeqNum)> {
        let _w = self.writer.lock();
        let installed: Vec<bool> = moves
            .iter()
            .map(|m| {
                let (h, fp) = hash_key(&m.key);
                Ok(self.candidates(h, fp)?.iter().any(|n| n.ptr == m.old))
            })
            .collect::<Result<_>>()?;
        let seq0 = self.last_seq.load(Ordering::Relaxed) + 1;
        let encoded: Vec<Vec<u8>> = moves.iter().map(|m| m.new.encode()).collect();
        let entries: Vec<LogEntry<'_>> = moves
            .iter()
            .zip(&installed)
            .zip(&encoded)
            .filter(|((_, ok), _)| **ok)
            .enumerate()
            .map(|(i, ((m, _), enc))| LogEntry {
                vtype: ValueType::Pointer,
                separate: false,
                key: &m.key,
                seq: seq0 + i as u64,
                value: enc,
            })
            .collect();
        if entries.is_empty() {
            return Ok((installed, self.last_seq.load(Ordering::Acquire)));
        }
        let n = entries.len() as u64;
        self.bands.log_linked(&entries, None)?;
        self.bands.sync()?;
        {
            let mut t = self.table.write();
            for (m, _) in moves.iter().zip(&installed).filter(|(_, ok)| **ok) {
                let (h, _) = hash_key(&m.key);
                if m.new.file_id == 0 {
                    t.remove(h, &m.old)?;
                } else {
                    t.replace(h, &m.old, m.new)?;
                }
            }
        }
        let last = seq0 + n - 1;
        self.last_seq.store(last, Ordering::Release);
        Ok((installed, last))
    }

    fn persist_state(&self, state: &[u8]) -> Result<()> {
        let _meta_io = self.meta_io.lock();
        let w = self.table.read().with_bands_state(state.to_vec());
        w.write()?;
        self.table.write().bands_state_persisted(w);
        Ok(())
    }

    fn make_durable(&self, _seq: SeqNum) -> Result<()> {
        self.bands.sync()
    }
}

#[cfg(test)]
mod tests;
