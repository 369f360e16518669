//! FlashKey behind the index seam: the hash index (§V-A1) for point
//! reads and writes, and the key-only LSM-tree (§V-A3) for ordered scans,
//! over the logical bands, which are the only log (`Options::wal` is off).
//!
//! - **Write** ([`Index::apply`]): the engine has logged the batch in the
//!   bands ([`ValueStore::log_batch`]; each entry records its key's
//!   previous version, which the bands ask of the hash index). The hash
//!   index points each key's node at its new entry; a key's first put
//!   inserts the key into the key tree and its delete removes it, with the
//!   entry's sequence number (overwrites never touch the key tree).
//! - **Read** ([`Index::get`]): the hash index finds the node, verifies the
//!   key by reading the record and walks back to the version visible at the
//!   sequence number; the value comes with it (one record read).
//! - **Scan** ([`Index::iter`]): the key tree's iterator, each visible key's
//!   value fetched through the hash index at the scan's sequence number.
//! - **Durability and recovery**: the hash table checkpoints its pages every
//!   `hash_checkpoint_bands` closed bands; the key tree is an LSM index in
//!   log mode in the subdirectory `keys`, whose flushes checkpoint its own
//!   position in the bands. Recovery replays the bands after each
//!   checkpoint into its structure, so after a crash both hold exactly the
//!   writes that survived in the bands.

use super::keylog::KeyLog;
use super::{HashIndex, HashOptions, KeyLiveness, KeyOp, Walk};
use crate::batch::WriteBatch;
use crate::error::{Error, IoContext, Result};
use crate::format::value_record::Kind;
use crate::fs::IoCategory;
use crate::index::compaction::CompactionStats;
use crate::index::iter::InternalIterator;
use crate::index::key::{self, SeqNum, ValueType};
use crate::index::lsm::LsmIndex;
use crate::index::memtable::Lookup;
use crate::index::sstable::ReadCtx;
use crate::index::{Index, IndexIter, IndexShape, IndexStats, Shared, ValueStoreOpener};
use crate::options::{IndexKind, ValueLayout};
use crate::report::VerifyReport;
use crate::vstore::index_log::{BandOptions, IndexLog, OwnedEntry, PrevLookup};
use crate::vstore::prefetch::Prefetcher;
use crate::vstore::{ReadLatency, ValuePointer, ValueStore};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// The bands' space bound: `1 + over_provisioning` or the space target,
/// whichever is tighter; `None` when both are infinite.
pub(crate) fn band_space_bound(over_provisioning: f64, space_amp_target: f64) -> Option<f64> {
    let b = (1.0 + over_provisioning).min(space_amp_target);
    b.is_finite().then_some(b)
}

/// Subdirectory of the key-only LSM-tree.
pub const KEYS_DIR: &str = "keys";

/// The FlashKey index. See the module docs.
pub(crate) struct FlashKeyIndex {
    shared: Arc<Shared>,
    hash: Arc<HashIndex>,
    bands: Arc<dyn IndexLog>,
    keys: Arc<LsmIndex>,
    keys_shared: Arc<Shared>,
    /// Parallel lookups for scans (see [`ValueResolver`]).
    read_ahead: Arc<ReadAhead>,
}

impl FlashKeyIndex {
    /// Opens the bands, the hash index (loading its checkpoint and
    /// replaying the bands after it) and the key tree. The value store is
    /// the bands, whatever `_open_vstore` would open.
    ///
    /// # Errors
    /// `Corruption` with file and offset; `Io`.
    pub(crate) fn open(
        shared: Arc<Shared>,
        _open_vstore: &mut ValueStoreOpener<'_>,
    ) -> Result<(Arc<FlashKeyIndex>, Arc<dyn ValueStore>)> {
        let opts = &shared.opts;
        let hash = Arc::new(HashIndex::open(
            &shared.dir,
            shared.fs.clone(),
            shared.stats.clone(),
            HashOptions {
                mode: opts.hash_index_mode,
                cache_bytes: opts.hash_cache_size,
                checkpoint_bands: opts.hash_checkpoint_bands,
                initial_pages: 16,
                memo_bytes: opts.hash_memo_size,
                bands: BandOptions {
                    value_threshold: 0,
                    band_entries: opts.band_entries,
                    band_bytes: opts.band_bytes,
                    mmap_reads: opts.mmap_reads,
                    log_mode: true,
                    capacity: opts.value_capacity,
                    gc_empty_bands: 4,
                    key_index: true,
                    space_bound: band_space_bound(
                        opts.band_over_provisioning,
                        opts.space_amp_target,
                    ),
                },
            },
        )?);
        let bands = hash.bands().clone();
        if let Some(f) = &opts.compaction_filter {
            bands.set_filter(f.clone(), shared.filter_removed.clone());
        }
        let lookup: Arc<dyn PrevLookup> = hash.clone();
        bands.set_prev_lookup(Arc::downgrade(&lookup));
        let kdir = shared.dir.join(KEYS_DIR);
        shared.fs.create_dir_all(&kdir).ctx(&kdir)?;
        let mut kopts = opts.clone();
        kopts.index = Some(IndexKind::Lsm);
        kopts.value_layout = Some(ValueLayout::Inline);
        kopts.wal = false;
        // The hash table decides what lives; band GC asks the filter and
        // removes a key from the key-only tree too.
        kopts.compaction_filter = None;
        let keys_shared = Arc::new(Shared {
            dir: kdir.clone(),
            opts: kopts,
            fs: shared.fs.clone(),
            stats: shared.stats.clone(),
            last_seq: AtomicU64::new(0),
            snapshots: shared.snapshots.clone(),
            poison: Mutex::new(None),
            bg_error: Mutex::new(None),
            closed: AtomicBool::new(false),
            stall_micros: AtomicU64::new(0),
            filter_removed: Arc::new(AtomicU64::new(0)),
            filter_gate: parking_lot::RwLock::new(()),
            filter_installed_at: AtomicU64::new(0),
        });
        let manifest = kdir.join("MANIFEST");
        let kb = bands.clone();
        let (keys, _) = LsmIndex::open(keys_shared.clone(), &mut |state: Option<&[u8]>| {
            let log: Arc<dyn ValueStore> = Arc::new(KeyLog::open(kb.clone(), state, &manifest)?);
            Ok(log)
        })?;
        let vstore: Arc<dyn ValueStore> = bands.clone();
        let read_ahead = Arc::new(ReadAhead::new(
            opts.prefetch_threads,
            opts.scan_prefetch_depth,
        ));
        Ok((
            Arc::new(FlashKeyIndex {
                shared,
                hash,
                bands,
                keys,
                keys_shared,
                read_ahead,
            }),
            vstore,
        ))
    }

    /// Checkpoints the hash table when due (or now, with `force`), and
    /// switches the key tree's memtable when its checkpoint lags the hash
    /// table's by `2 × hash_checkpoint_bands` bands (or now, with `force`),
    /// so that its flush moves its checkpoint too — or, when the key tree
    /// has nothing to flush (overwrites only), moves its checkpoint at once
    /// (`LsmIndex::checkpoint_if_clean`): GC keeps the bands after either.
    /// Writer lock held.
    fn checkpoint_if_due(&self, force: bool) -> Result<()> {
        if force {
            self.hash.checkpoint()?;
        } else {
            self.hash.checkpoint_if_due()?;
        }
        let lag = match (
            self.bands.checkpoint_position(),
            self.bands.key_checkpoint(),
        ) {
            (Some(h), Some(k)) => h.0.saturating_sub(k.0),
            _ => 0,
        };
        if (force || lag >= 2 * self.shared.opts.hash_checkpoint_bands)
            && !self.keys.checkpoint_if_clean()?
        {
            // Keys were inserted or removed since the last flush: their
            // flush moves the checkpoint.
            self.keys.make_room(true)?;
        }
        Ok(())
    }
}

impl Index for FlashKeyIndex {
    /// Recovers the key tree, after which it holds exactly the live keys
    /// the hash table holds: writes ask it whether a key is live from then
    /// on ([`HashIndex::set_liveness`]).
    fn recover(&self) -> Result<SeqNum> {
        let k = self.keys.recover()?;
        let seq = self.hash.last_seq().max(k);
        self.keys_shared.last_seq.store(seq, Ordering::Release);
        let keys: Arc<dyn KeyLiveness> = self.keys.clone();
        self.hash.set_liveness(Arc::downgrade(&keys));
        Ok(seq)
    }

    fn start(self: Arc<Self>) -> Result<()> {
        self.keys.clone().start()
    }

    fn make_room(&self, force: bool) -> Result<()> {
        self.keys.make_room(false)?;
        self.checkpoint_if_due(force)
    }

    fn apply(&self, batch: &WriteBatch, first_seq: SeqNum, sync: bool) -> Result<()> {
        let addrs = self.bands.take_last_batch();
        let entries: Vec<_> = batch.entries().collect::<Result<_>>()?;
        let view: Vec<(ValueType, &[u8], &[u8])> =
            entries.iter().map(|e| (e.vtype, e.key, e.value)).collect();
        let ops = self.hash.apply_logged(&view, &addrs)?;
        self.hash.set_last_seq(first_seq + entries.len() as u64 - 1);
        // The key tree gets each change with its entry's sequence number,
        // so a scan at a snapshot sees the keys of then.
        for (i, op) in ops {
            let mut b = WriteBatch::new();
            match op {
                KeyOp::Insert(k) => b.push(ValueType::Value, &k, b""),
                KeyOp::Remove(k) => b.push(ValueType::Deletion, &k, b""),
            }
            self.keys.apply(&b, first_seq + i as u64, false)?;
        }
        self.keys_shared
            .last_seq
            .store(first_seq + entries.len() as u64 - 1, Ordering::Release);
        if sync {
            self.bands.sync()?;
        }
        Ok(())
    }

    fn make_durable(&self, _seq: SeqNum) -> Result<()> {
        self.bands.sync()
    }

    fn get(&self, key: &[u8], seq: Option<SeqNum>, ctx: ReadCtx) -> Result<Lookup> {
        let mut found = None;
        for _ in 0..8 {
            let at = seq.unwrap_or_else(|| self.shared.last_seq.load(Ordering::Acquire));
            match self.hash.walk(key, at)? {
                Walk::Found(p, e) => {
                    found = Some((p, e));
                    break;
                }
                // A reader without a snapshot raced a write and the GC that
                // collected the version it wanted: read again, newer.
                Walk::Gone if seq.is_none() => continue,
                Walk::Absent | Walk::Gone => break,
            }
        }
        Ok(match found {
            None => Lookup::NotFound,
            Some((_, e)) if e.kind == Kind::Tombstone => Lookup::Deleted,
            // GC asks for the address it compares; a user gets the value
            // the lookup has read already.
            Some((p, _)) if ctx.category == IoCategory::Gc => {
                Lookup::Found(ValueType::Pointer, p.encode())
            }
            Some((_, e)) => Lookup::Found(ValueType::Value, e.payload),
        })
    }

    /// From the hash table's nodes, without reading the record again. A
    /// delete token the key's node still points at is current too
    /// (although [`Index::get`] reads it as absent): GC drops it by a
    /// relocation to the null address, which removes the node (§V-B5)
    /// under the same compare-and-set as any move.
    fn points_at(&self, key: &[u8], addr: &ValuePointer) -> Result<bool> {
        self.hash.points_at(key, addr)
    }

    fn iter(&self, seq: SeqNum, ctx: ReadCtx) -> Result<IndexIter> {
        let inner = self.keys.iter(seq, ctx)?;
        Ok(IndexIter {
            iter: Box::new(ValueResolver::new(
                inner.iter,
                self.hash.clone(),
                seq,
                self.read_ahead.clone(),
            )),
            pin: inner.pin,
        })
    }

    fn persist_value_store_state(&self, state: &[u8]) -> Result<()> {
        use crate::vstore::IndexRelocator;
        self.hash.persist_state(state)
    }

    fn wait_flushed(&self) -> Result<()> {
        self.keys.wait_flushed()
    }

    fn wait_idle(&self) -> Result<()> {
        self.keys.wait_idle()
    }

    fn compact_range(&self, begin: Option<&[u8]>, end: Option<&[u8]>) -> Result<CompactionStats> {
        self.keys.compact_range(begin, end)
    }

    fn shape(&self) -> IndexShape {
        self.keys.shape()
    }

    fn stats(&self) -> IndexStats {
        let mut s = self.keys.stats();
        let t = self.hash.table_figures();
        let mut figures = vec![
            ("hash_buckets", t.buckets),
            ("hash_nodes", t.nodes),
            ("hash_load_percent", (t.load * 100.0).round() as u64),
            ("hash_overflow_chains", t.overflow_chains),
            ("hash_overflow_nodes", t.overflow_nodes),
            ("hash_cached_pages", t.cached_pages),
            ("hash_dirty_pages", t.dirty_pages),
            ("hash_resizing", t.resizing as u64),
        ];
        for (name, v) in s.figures.drain(..) {
            figures.push(match name {
                "sstables" => ("key_tree_sstables", v),
                "sstable_bytes" => ("key_tree_sstable_bytes", v),
                other => (other, v),
            });
        }
        s.figures = figures;
        s
    }

    fn file_kind(&self, name: &str) -> Option<&'static str> {
        if name.ends_with(".band") {
            return None;
        }
        if name == super::table::META || name == super::table::EDITS {
            return Some("manifest");
        }
        if name.starts_with("hash-") && name.ends_with(".pages") {
            return Some("sstables");
        }
        if name == KEYS_DIR {
            return Some("sstables");
        }
        self.keys.file_kind(name)
    }

    fn verify(&self, rep: &mut VerifyReport) {
        self.keys.verify(rep);
        let (_, faults) = self.hash.verify_table();
        rep.faults.extend(faults);
    }

    fn shutdown(&self) {
        self.keys_shared.closed.store(true, Ordering::Release);
        self.keys.shutdown();
    }

    fn close(&self) -> Result<()> {
        if self.shared.poisoned().is_ok() {
            self.hash.checkpoint()?;
        }
        self.keys.close()
    }
}

/// The key tree holds a key, at the newest sequence number, while the
/// key's newest version is a value (a key's first put inserts it and its
/// delete removes it). Looked up as the bands' reads are counted, which
/// are what it spares: a put the address memo does not serve would
/// otherwise read the record of the key's node back.
impl KeyLiveness for LsmIndex {
    fn is_live(&self, key: &[u8]) -> Result<bool> {
        let ctx = ReadCtx {
            category: IoCategory::ValueStore,
            fill_cache: true,
        };
        Ok(matches!(
            Index::get(self, key, None, ctx)?,
            Lookup::Found(..)
        ))
    }
}

/// The key tree's iterator with each visible key's value fetched through
/// the hash index at the scan's sequence number. Entries the scan cannot
/// see (newer, or deletes) pass unchanged; a key the key tree holds but the
/// hash index does not (never after recovery) reads as deleted.
///
/// **Several values at once** (FlashKey §V-A3: a scan walks the key tree
/// and fetches the values through the hash table; WiscKey §3.3.1's
/// parallel prefetch): once the scan has moved forward twice in a row and
/// lookups take device time ([`ReadLatency`]), the resolver takes the next
/// entries of the key tree — a window that doubles with each window up to
/// `scan_prefetch_depth` — and runs their lookups in parallel on a small
/// pool, so that up to `prefetch_threads` record reads are in flight. The
/// key tree's iterator then stands past the window; a `prev` repositions it
/// at the current entry first. A scan told its length
/// ([`crate::Scan::limit`]) says so before it seeks, and that many entries
/// are looked up in the first window. On cached data lookups stay one at
/// a time (the hand-offs would cost more than the reads).
pub(super) struct ValueResolver {
    inner: Box<dyn InternalIterator>,
    hash: Arc<HashIndex>,
    seq: SeqNum,
    /// The current entry when it was not resolved ahead, if its key was
    /// rewritten (a key the hash index lacks reads as deleted).
    cur_key: Option<Vec<u8>>,
    cur_value: Vec<u8>,
    /// Entries resolved ahead; the front one is the current entry, and
    /// `inner` stands after the back one. Empty: `inner` is current.
    ahead: VecDeque<Ahead>,
    err: Option<Error>,
    /// Forward steps in a row (a window starts after two).
    run: usize,
    /// Size of the next window.
    window: usize,
    /// Windows taken.
    windows: usize,
    /// Entries a scan said it will read from the next seek
    /// ([`InternalIterator::expect_forward`]).
    expected: Option<usize>,
    read_ahead: Arc<ReadAhead>,
}

/// An entry resolved ahead of the scan.
struct Ahead {
    /// The key tree's internal key (a `prev` repositions at it).
    key: Vec<u8>,
    /// The key presented instead, as for `cur_key`.
    rewritten: Option<Vec<u8>>,
    value: Result<Vec<u8>>,
}

/// What a scan's read-ahead shares across the iterators of one database:
/// the pool, the lookup-time estimate and the largest window.
pub(super) struct ReadAhead {
    pool: Prefetcher,
    /// Time of one lookup (one or more record reads).
    pub(super) latency: ReadLatency,
    depth: usize,
}

impl ReadAhead {
    pub(super) fn new(threads: usize, depth: usize) -> ReadAhead {
        ReadAhead {
            pool: Prefetcher::new(threads),
            latency: ReadLatency::default(),
            depth,
        }
    }

    /// Windows pay only with a pool and lookups that reach the device.
    fn pays(&self) -> bool {
        self.pool.threads() > 0 && self.depth > 1 && !self.latency.from_memory()
    }
}

/// What a scan shows for the key-tree entry `(ukey, seq)` given the hash
/// index's answer at the scan's sequence number: its value, or (`None`
/// key) a deletion when the hash index has no live version.
fn shown(
    found: Result<Option<(ValuePointer, OwnedEntry)>>,
    ukey: &[u8],
    seq: SeqNum,
) -> Result<(Option<Vec<u8>>, Vec<u8>)> {
    Ok(match found? {
        Some((_, e)) if e.kind != Kind::Tombstone => (None, e.payload),
        _ => (
            Some(key::internal_key(ukey, seq, ValueType::Deletion)),
            Vec::new(),
        ),
    })
}

impl ValueResolver {
    /// The key tree's iterator `inner` resolved through `hash` at `seq`.
    pub(super) fn new(
        inner: Box<dyn InternalIterator>,
        hash: Arc<HashIndex>,
        seq: SeqNum,
        read_ahead: Arc<ReadAhead>,
    ) -> ValueResolver {
        ValueResolver {
            inner,
            hash,
            seq,
            cur_key: None,
            cur_value: Vec::new(),
            ahead: VecDeque::new(),
            err: None,
            run: 0,
            window: 2,
            windows: 0,
            expected: None,
            read_ahead,
        }
    }

    /// Windows taken since the last call (tests).
    #[cfg(test)]
    pub(super) fn windows_taken(&mut self) -> usize {
        std::mem::take(&mut self.windows)
    }

    /// The user key and sequence number of the inner entry when the scan
    /// sees it as a value to fetch.
    fn wanted(&self) -> Option<(Vec<u8>, SeqNum)> {
        let p = key::parse_internal_key(self.inner.key())?;
        (p.vtype == ValueType::Value && p.seq <= self.seq).then(|| (p.user_key.to_vec(), p.seq))
    }

    /// Resolves the inner entry as the current one (no read-ahead).
    fn resolve(&mut self) {
        self.ahead.clear();
        self.cur_key = None;
        self.cur_value.clear();
        if !self.inner.valid() {
            return;
        }
        let Some((ukey, seq)) = self.wanted() else {
            return;
        };
        let hash = &self.hash;
        let found = self
            .read_ahead
            .latency
            .time(|| hash.lookup(&ukey, self.seq));
        match shown(found, &ukey, seq) {
            Ok((k, v)) => {
                self.cur_key = k;
                self.cur_value = v;
            }
            Err(e) => {
                self.err.get_or_insert(e);
            }
        }
    }

    /// Takes up to `n` entries from the inner iterator (which stands at
    /// the first of them) and resolves their values in parallel.
    fn fill(&mut self, n: usize) {
        self.cur_key = None;
        self.cur_value.clear();
        let mut entries = Vec::with_capacity(n);
        let mut lookups: Vec<(usize, Vec<u8>, SeqNum)> = Vec::new();
        while entries.len() < n && self.inner.valid() {
            if let Some((ukey, seq)) = self.wanted() {
                lookups.push((entries.len(), ukey, seq));
            }
            entries.push(Ahead {
                key: self.inner.key().to_vec(),
                rewritten: None,
                value: Ok(self.inner.value().to_vec()),
            });
            self.inner.next();
        }
        let keys: Arc<Vec<Vec<u8>>> = Arc::new(lookups.iter().map(|l| l.1.clone()).collect());
        let (hash, ra, at) = (self.hash.clone(), self.read_ahead.clone(), self.seq);
        let found = self.read_ahead.pool.map(keys.len(), move |i| {
            ra.latency.time(|| hash.lookup(&keys[i], at))
        });
        for ((i, ukey, seq), f) in lookups.into_iter().zip(found) {
            let e = &mut entries[i];
            e.value = shown(f, &ukey, seq).map(|(k, v)| {
                e.rewritten = k;
                v
            });
        }
        self.ahead = entries.into();
        self.take_error();
    }

    /// Moves an error of the current read-ahead entry to `err`.
    fn take_error(&mut self) {
        if let Some(Ahead { value: Err(e), .. }) = self.ahead.front() {
            self.err.get_or_insert(e.clone());
        }
    }

    /// Moves forward from a position `inner` already stands at (after
    /// a `next` of it, or after a window): one lookup, or a window.
    fn forward(&mut self) {
        self.run += 1;
        if self.run >= 2 && self.inner.valid() && self.read_ahead.pays() {
            let n = self.window.clamp(2, self.read_ahead.depth);
            self.window = n.saturating_mul(2);
            self.windows += 1;
            self.fill(n);
        } else {
            self.resolve();
        }
    }

    /// Starts over after a jump: no window, no run — unless the scan said
    /// how far it will read forward (a seek, not `seek_to_last`): then
    /// the whole of that is looked up in one window, and windows of
    /// `scan_prefetch_depth` follow.
    fn jumped(&mut self, forward: bool) {
        self.run = 0;
        self.window = 2;
        let expected = self.expected.take().filter(|_| forward);
        match expected {
            Some(n) if n > 1 && self.inner.valid() && self.read_ahead.pays() => {
                self.run = 2;
                self.window = self.read_ahead.depth;
                self.windows += 1;
                self.fill(n);
            }
            _ => self.resolve(),
        }
    }
}

impl InternalIterator for ValueResolver {
    fn valid(&self) -> bool {
        self.err.is_none() && (!self.ahead.is_empty() || self.inner.valid())
    }
    fn seek_to_first(&mut self) {
        self.inner.seek_to_first();
        self.jumped(true);
    }
    fn seek_to_last(&mut self) {
        self.inner.seek_to_last();
        self.jumped(false);
    }
    fn seek(&mut self, target: &[u8]) {
        self.inner.seek(target);
        self.jumped(true);
    }
    fn next(&mut self) {
        if self.ahead.is_empty() {
            self.inner.next();
            self.forward();
            return;
        }
        self.ahead.pop_front();
        if self.ahead.is_empty() {
            // `inner` stands at the entry after the window.
            self.forward();
        } else {
            self.take_error();
        }
    }
    fn prev(&mut self) {
        if let Some(cur) = self.ahead.front() {
            // Back to the current entry (internal keys are unique).
            let at = cur.key.clone();
            self.inner.seek(&at);
        }
        self.inner.prev();
        self.jumped(false);
    }
    fn key(&self) -> &[u8] {
        match self.ahead.front() {
            Some(a) => a.rewritten.as_deref().unwrap_or(&a.key),
            None => self.cur_key.as_deref().unwrap_or_else(|| self.inner.key()),
        }
    }
    fn value(&self) -> &[u8] {
        match self.ahead.front() {
            Some(Ahead { value: Ok(v), .. }) => v,
            Some(_) => &[],
            None => &self.cur_value,
        }
    }
    fn status(&self) -> Result<()> {
        match &self.err {
            Some(e) => Err(e.clone()),
            None => self.inner.status(),
        }
    }
    fn expect_forward(&mut self, n: usize) {
        self.expected = Some(n);
    }
}
