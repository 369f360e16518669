//! The public iterator: ordered, snapshot-consistent iteration over user
//! keys, forward and backward, with seek and key bounds.
//!
//! [`DbIterator`] is a cursor (`seek`, `next`, `prev`, `key`, `value`) over a
//! merging iterator of the memtables and every level, as of one sequence
//! number. It holds the memtables and the version it started from, so
//! concurrent writes, flushes and compactions neither change what it sees nor
//! delete files under it. [`Scan`] wraps it as a Rust `Iterator`.

use crate::error::{Error, Result};
use crate::index::iter::InternalIterator;
use crate::index::key::{parse_internal_key, seek_key, SeqNum, ValueType, MAX_SEQ};
use crate::vstore::{ReadPipeline, ValuePointer, ValueStore};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(PartialEq, Eq, Clone, Copy)]
enum Direction {
    Forward,
    Reverse,
}

/// A cursor over the user keys of a database. See the module docs.
pub struct DbIterator {
    inner: Box<dyn InternalIterator>,
    seq: SeqNum,
    dir: Direction,
    valid: bool,
    saved_key: Vec<u8>,
    saved_value: Vec<u8>,
    saved_type: ValueType,
    lower: Option<Vec<u8>>,
    upper: Option<Vec<u8>>,
    err: Option<Error>,
    vstore: Arc<dyn ValueStore>,
    resolved: Vec<u8>,
    /// Leave value pointers unresolved (the scan resolves them in bulk).
    defer: bool,
    _pin: Box<dyn Send>,
}

impl DbIterator {
    pub(crate) fn new(
        inner: Box<dyn InternalIterator>,
        seq: SeqNum,
        vstore: Arc<dyn ValueStore>,
        pin: Box<dyn Send>,
        lower: Option<Vec<u8>>,
        upper: Option<Vec<u8>>,
    ) -> Self {
        DbIterator {
            inner,
            seq,
            dir: Direction::Forward,
            valid: false,
            saved_key: Vec::new(),
            saved_value: Vec::new(),
            saved_type: ValueType::Value,
            lower,
            upper,
            err: None,
            vstore,
            resolved: Vec::new(),
            defer: false,
            _pin: pin,
        }
    }

    /// True when positioned at an entry.
    pub fn valid(&self) -> bool {
        self.valid
    }

    /// Positions at the first key `>= lower bound`.
    pub fn seek_to_first(&mut self) {
        match self.lower.clone() {
            Some(l) => self.seek(&l),
            None => {
                self.dir = Direction::Forward;
                self.inner.seek_to_first();
                self.find_next_user_entry(false);
                self.finish_move();
            }
        }
    }

    /// Positions at the last key `< upper bound`.
    pub fn seek_to_last(&mut self) {
        match self.upper.clone() {
            Some(u) => self.seek_before(&u),
            None => {
                self.dir = Direction::Reverse;
                self.inner.seek_to_last();
                self.find_prev_user_entry();
                self.finish_move();
            }
        }
    }

    /// Positions at the first key `>= key` (clamped to the bounds).
    pub fn seek(&mut self, key: impl AsRef<[u8]>) {
        let key = key.as_ref();
        let key = match &self.lower {
            Some(l) if key < l.as_slice() => l.clone(),
            _ => key.to_vec(),
        };
        self.dir = Direction::Forward;
        self.inner.seek(&seek_key(&key, self.seq));
        self.find_next_user_entry(false);
        self.finish_move();
    }

    /// Positions at the last key `< key` (clamped to the bounds).
    pub fn seek_before(&mut self, key: impl AsRef<[u8]>) {
        let key = key.as_ref();
        let key = match &self.upper {
            Some(u) if key > u.as_slice() => u.clone(),
            _ => key.to_vec(),
        };
        // First entry of `key` at any sequence, then step back.
        self.dir = Direction::Forward;
        self.inner.seek(&seek_key(&key, MAX_SEQ));
        if self.inner.valid() {
            self.saved_key = key;
            self.step_back_before_saved_key();
        } else {
            self.dir = Direction::Reverse;
            self.inner.seek_to_last();
        }
        if self.inner.status().is_err() {
            self.valid = false;
        } else {
            self.find_prev_user_entry();
        }
        self.finish_move();
    }

    /// Moves to the next key. Requires `valid()`.
    pub fn next(&mut self) {
        if !self.valid {
            return;
        }
        if self.dir == Direction::Reverse {
            self.dir = Direction::Forward;
            if self.inner.valid() {
                self.inner.next();
            } else {
                self.inner.seek_to_first();
            }
            if !self.inner.valid() {
                self.valid = false;
                self.finish_move();
                return;
            }
        } else {
            self.saved_key.clear();
            self.saved_key
                .extend_from_slice(crate::index::key::user_key(self.inner.key()));
            self.inner.next();
        }
        self.find_next_user_entry(true);
        self.finish_move();
    }

    /// Moves to the previous key. Requires `valid()`.
    pub fn prev(&mut self) {
        if !self.valid {
            return;
        }
        if self.dir == Direction::Forward {
            self.saved_key.clear();
            self.saved_key
                .extend_from_slice(crate::index::key::user_key(self.inner.key()));
            self.step_back_before_saved_key();
        }
        self.find_prev_user_entry();
        self.finish_move();
    }

    /// Steps the inner iterator back until it is before every entry of
    /// `saved_key`, and switches to reverse.
    fn step_back_before_saved_key(&mut self) {
        loop {
            self.inner.prev();
            if !self.inner.valid() {
                break;
            }
            if crate::index::key::user_key(self.inner.key()) < self.saved_key.as_slice() {
                break;
            }
        }
        self.dir = Direction::Reverse;
    }

    /// Current key. Requires `valid()`.
    pub fn key(&self) -> &[u8] {
        debug_assert!(self.valid);
        match self.dir {
            Direction::Forward => crate::index::key::user_key(self.inner.key()),
            Direction::Reverse => &self.saved_key,
        }
    }

    /// Current value. Requires `valid()`.
    pub fn value(&self) -> &[u8] {
        debug_assert!(self.valid);
        &self.resolved
    }

    /// The first error met; an iterator that stopped on an error is not at
    /// the end of the data.
    pub fn status(&self) -> Result<()> {
        if let Some(e) = &self.err {
            return Err(e.clone());
        }
        self.inner.status()
    }

    fn find_next_user_entry(&mut self, mut skipping: bool) {
        while self.inner.valid() {
            match parse_internal_key(self.inner.key()) {
                None => {
                    self.err = Some(Error::corruption(
                        PathBuf::from("index"),
                        0,
                        "unparsable internal key during iteration",
                    ));
                    break;
                }
                Some(p) if p.seq <= self.seq => match p.vtype {
                    ValueType::Deletion => {
                        self.saved_key.clear();
                        self.saved_key.extend_from_slice(p.user_key);
                        skipping = true;
                    }
                    _ => {
                        if !(skipping
                            && crate::index::key::compare_bytes(p.user_key, &self.saved_key)
                                != std::cmp::Ordering::Greater)
                        {
                            self.valid = true;
                            return;
                        }
                    }
                },
                Some(_) => {}
            }
            self.inner.next();
        }
        self.valid = false;
    }

    fn find_prev_user_entry(&mut self) {
        let mut vtype = ValueType::Deletion;
        while self.inner.valid() {
            match parse_internal_key(self.inner.key()) {
                None => {
                    self.err = Some(Error::corruption(
                        PathBuf::from("index"),
                        0,
                        "unparsable internal key during iteration",
                    ));
                    vtype = ValueType::Deletion;
                    break;
                }
                Some(p) if p.seq <= self.seq => {
                    if vtype != ValueType::Deletion && p.user_key < self.saved_key.as_slice() {
                        break;
                    }
                    vtype = p.vtype;
                    if vtype == ValueType::Deletion {
                        self.saved_key.clear();
                        self.saved_value.clear();
                    } else {
                        self.saved_key.clear();
                        self.saved_key.extend_from_slice(p.user_key);
                        self.saved_value.clear();
                        self.saved_value.extend_from_slice(self.inner.value());
                        self.saved_type = p.vtype;
                    }
                }
                Some(_) => {}
            }
            self.inner.prev();
        }
        if vtype == ValueType::Deletion || self.err.is_some() {
            self.valid = false;
            self.saved_key.clear();
            self.saved_value.clear();
            self.dir = Direction::Forward;
        } else {
            self.valid = true;
        }
    }

    /// Type and stored bytes of the current entry (an encoded value pointer
    /// for separated values). Requires `valid()`.
    fn raw(&self) -> (ValueType, &[u8]) {
        match self.dir {
            Direction::Forward => {
                let t = parse_internal_key(self.inner.key()).map(|p| p.vtype);
                (t.unwrap_or(ValueType::Value), self.inner.value())
            }
            Direction::Reverse => (self.saved_type, self.saved_value.as_slice()),
        }
    }

    /// Applies bounds and resolves the current value.
    fn finish_move(&mut self) {
        // An iterator that met an error is invalid (the contract of
        // `InternalIterator`), so its status needs asking only once it is;
        // moving backward, the entry found may lie behind an inner
        // iterator that has run off the end or failed.
        if self.err.is_some() || (!self.inner.valid() && self.inner.status().is_err()) {
            self.valid = false;
        }
        if !self.valid {
            return;
        }
        let k = self.key();
        let out = self.lower.as_deref().is_some_and(|l| k < l)
            || self.upper.as_deref().is_some_and(|u| k >= u);
        if out {
            self.valid = false;
            return;
        }
        if self.defer {
            return;
        }
        let (vtype, raw) = self.raw();
        let res = match vtype {
            ValueType::Pointer => {
                let key = self.key();
                resolve(self.vstore.as_ref(), key, raw)
            }
            _ => Ok(raw.to_vec()),
        };
        match res {
            Ok(v) => self.resolved = v,
            Err(e) => {
                self.err = Some(e);
                self.valid = false;
            }
        }
    }
}

/// Reads a separated value; a pointer outside the store's valid range is
/// reported as corruption (the write-ahead-log replay never admits one, so
/// it means damage).
fn resolve(vstore: &dyn ValueStore, key: &[u8], raw: &[u8]) -> Result<Vec<u8>> {
    let ptr = ValuePointer::decode(raw)
        .ok_or_else(|| Error::corruption("index", 0, "malformed value pointer"))?;
    vstore.read(key, &ptr)?.ok_or_else(|| lost(&ptr))
}

pub(crate) fn lost(ptr: &ValuePointer) -> Error {
    Error::corruption(
        format!("value store file {}", ptr.file_id),
        ptr.offset,
        "value pointer outside the value store's valid range",
    )
}

/// An entry a scan pulled from the index, before its value is read.
enum Pulled {
    /// Key and value, stored in the index.
    Inline(Vec<u8>, Vec<u8>),
    /// Key and the pointer to its value in the value store.
    Behind(Vec<u8>, ValuePointer),
}

/// An entry a pipelined scan pulled, waiting to be returned.
enum Ahead {
    /// Key and value, stored in the index.
    Inline(Vec<u8>, Vec<u8>),
    /// Key and pointer; the value comes from the pipeline, in order.
    Behind(Vec<u8>, ValuePointer),
    /// The index iterator's error, after the last entry it gave.
    Failed(Error),
}

/// A Rust iterator over `(key, value)` pairs of a key range, forward or
/// backward. An error ends the iteration after being yielded once.
///
/// The first two entries are read one at a time. Once the scan has
/// returned two and batches pay ([`ValueStore::batch_reads_pay`]; a
/// `scan_prefetch_depth` of 0 turns batches off), it fetches the keys of
/// the next entries from the index and reads their separated values in one
/// batch ([`ValueStore::read_many`]: parallel prefetch, WiscKey §3.3.1, or
/// span reads, KT-Store §3.3); inline values cost nothing extra. How far a
/// batch reaches depends on what the scan knows of its end:
///
/// - **A limit** ([`Scan::limit`]): the scan ends after `n` entries, and
///   batches start with the first entry and hold the whole rest of the
///   scan, so nothing past the `n`th entry is read.
/// - **No limit**: a batch holds as many entries as the scan has returned
///   so far, so the window doubles with each batch (2, 4, 8, ...) with no
///   cap in entries. A range's end bound does not change this: callers
///   scan bounded ranges and stop early (a page of `SCAN`, the keys of one
///   slot), and reading the rest of the range for them would read up to
///   `scan_batch_bytes` they never use.
///
/// Every batch stops at `Options::scan_batch_bytes` of values (separated
/// ones counted from their pointers, inline ones by their length), which
/// also bounds the values a scan holds in memory. Hence a layout that
/// reads spans reads each TrieTable's span at most once per batch: a
/// limited scan of `B` bytes of values reads each table at most
/// `ceil(B / scan_batch_bytes)` times — once, up to the default 128 MiB —
/// and a scan without a limit over `N` entries makes at most `log2 N`
/// batches before its batches reach `scan_batch_bytes`, each table read
/// once per batch that reaches it. A scan the caller stops after `k`
/// entries has read the values of at most `2k` (its last batch is no
/// larger than what came before it); a caller that knows how many entries
/// it wants says so with [`Scan::limit`] and gets every table read once.
/// A limited scan over a layout with a read pipeline
/// ([`ValueStore::read_pipeline`]: KT-Store's, `Options::trie_scan_pipeline`)
/// does not wait for its whole range: it pulls entries from the index a
/// window at a time (the pipeline's window, at most `scan_batch_bytes` of
/// values), hands their pointers to the pipeline, whose reads run ahead of
/// the cursor within its memory budget, and returns each entry as soon as
/// its value is read, pulling the next window while less than one is left
/// ahead of it. Dropping the scan stops the pipeline's reads.
///
/// The entries and values returned are the same whichever way they are
/// read.
pub struct Scan {
    it: DbIterator,
    reverse: bool,
    started: bool,
    done: bool,
    depth: usize,
    yielded: usize,
    limit: Option<usize>,
    /// Most bytes of separated values one batch of a limited scan reads.
    batch_bytes: u64,
    ready: std::collections::VecDeque<Result<(Vec<u8>, Vec<u8>)>>,
    /// The read pipeline of a limited scan, once it batches.
    pipe: Option<Box<dyn ReadPipeline>>,
    /// True once the scan asked the value store for a pipeline.
    pipe_asked: bool,
    /// Entries pulled for the pipeline and not yet returned, in order.
    ahead: std::collections::VecDeque<Ahead>,
    /// Bytes of values of `ahead` (separated ones from their pointers).
    ahead_bytes: u64,
}

impl Scan {
    pub(crate) fn new(mut it: DbIterator, reverse: bool, depth: usize, batch_bytes: u64) -> Self {
        it.defer = true;
        Scan {
            it,
            reverse,
            started: false,
            done: false,
            depth,
            yielded: 0,
            limit: None,
            batch_bytes,
            ready: std::collections::VecDeque::new(),
            pipe: None,
            pipe_asked: false,
            ahead: std::collections::VecDeque::new(),
            ahead_bytes: 0,
        }
    }

    /// Most entries a limited scan announces ahead to an index that looks
    /// values up itself (FlashKey's hash table). The values of a limited
    /// scan are batched by bytes (`Options::scan_batch_bytes`), not by this.
    pub const MAX_LIMITED_WINDOW: usize = 4096;

    /// Ends the scan after `n` entries (like [`Iterator::take`]) and lets it
    /// read the values of all of them — up to `Options::scan_batch_bytes`
    /// of values per batch — in one batch once batches pay, rather than
    /// one at a time for the first two entries and then in windows that
    /// double (see [`Scan`]). The
    /// entries and values are the same either way; only how they are read
    /// differs.
    #[must_use]
    pub fn limit(mut self, n: usize) -> Self {
        self.limit = Some(n);
        if !self.reverse {
            // An index that looks values up itself (FlashKey's hash
            // table) reads them ahead too.
            self.it
                .inner
                .expect_forward(n.min(Self::MAX_LIMITED_WINDOW));
        }
        self
    }

    fn advance(&mut self) {
        if !self.started {
            self.started = true;
            if self.reverse {
                self.it.seek_to_last();
            } else {
                self.it.seek_to_first();
            }
        } else if self.reverse {
            self.it.prev();
        } else {
            self.it.next();
        }
    }

    /// Moves to the next entry and takes its key and what the index holds
    /// for its value; `None` (with `done` set) after the last entry or the
    /// first that failed.
    // Inlined into both callers: on the one-entry path this is the whole
    // of a scan step, and as a call (returning the entry through memory)
    // `seekrandom` ran 5-8 % slower in four pairs of runs.
    #[inline(always)]
    fn pull(&mut self) -> Option<Pulled> {
        self.advance();
        if !self.it.valid() {
            self.done = true;
            return None;
        }
        let (t, raw) = self.it.raw();
        let key = self.it.key().to_vec();
        Some(if t == ValueType::Pointer {
            // A malformed pointer names no file: its read reports it lost.
            let p = ValuePointer::decode(raw).unwrap_or(ValuePointer {
                file_id: u64::MAX,
                ..Default::default()
            });
            Pulled::Behind(key, p)
        } else {
            Pulled::Inline(key, raw.to_vec())
        })
    }

    /// Pulls the next `n` entries into `ready`: an inline value as it is,
    /// an entry behind a pointer in place with its value to come, and the
    /// values behind pointers read in one batch. After the iterator's last
    /// entry, or the first that failed, queues the iterator's error if it
    /// has one.
    /// Stops early once the entries pulled hold `max_bytes` of values
    /// (separated ones counted from their pointers).
    fn fill(&mut self, n: usize, max_bytes: u64) {
        let start = self.ready.len();
        // Where each pointer's entry waits in `ready`, and its read.
        let mut at: Vec<usize> = Vec::new();
        let mut reqs: Vec<(Vec<u8>, ValuePointer)> = Vec::new();
        let mut bytes = 0u64;
        while self.ready.len() - start < n && bytes < max_bytes {
            match self.pull() {
                None => break,
                Some(Pulled::Inline(key, value)) => {
                    // Inline values count too: they are held until returned.
                    bytes += value.len() as u64;
                    self.ready.push_back(Ok((key, value)));
                }
                Some(Pulled::Behind(key, p)) => {
                    at.push(self.ready.len());
                    bytes += u64::from(p.length);
                    reqs.push((key.clone(), p));
                    self.ready.push_back(Ok((key, Vec::new())));
                }
            }
        }
        if !reqs.is_empty() {
            self.read_values(&at, &reqs);
        }
        if self.done {
            if let Err(e) = self.it.status() {
                self.ready.push_back(Err(e));
            }
        }
    }

    /// The next entry with its value, read on its own and handed over
    /// without the queue; `None` at the end (the iterator's error, if it
    /// stopped on one, comes first).
    fn one(&mut self) -> Option<Result<(Vec<u8>, Vec<u8>)>> {
        match self.pull() {
            None => self.it.status().err().map(Err),
            Some(Pulled::Inline(key, value)) => Some(Ok((key, value))),
            Some(Pulled::Behind(key, p)) => Some(match self.it.vstore.read(&key, &p) {
                Ok(Some(value)) => Ok((key, value)),
                Ok(None) => Err(lost(&p)),
                Err(e) => Err(e),
            }),
        }
    }

    /// Pulls the next window of entries (up to `window` bytes of values,
    /// no further than the limit) into `ahead` and hands their pointers to
    /// the pipeline.
    fn pull_window(&mut self, window: u64) {
        let left = self.limit.map_or(usize::MAX, |l| {
            l.saturating_sub(self.yielded + self.ahead.len())
        });
        let mut reqs: Vec<(Vec<u8>, ValuePointer)> = Vec::new();
        let mut bytes = 0u64;
        let mut n = 0;
        while bytes < window && n < left {
            match self.pull() {
                None => break,
                Some(Pulled::Inline(key, value)) => {
                    bytes += value.len() as u64;
                    self.ahead.push_back(Ahead::Inline(key, value));
                }
                Some(Pulled::Behind(key, p)) => {
                    bytes += u64::from(p.length);
                    reqs.push((key.clone(), p));
                    self.ahead.push_back(Ahead::Behind(key, p));
                }
            }
            n += 1;
        }
        if self.done {
            if let Err(e) = self.it.status() {
                self.ahead.push_back(Ahead::Failed(e));
            }
        }
        self.ahead_bytes += bytes;
        if let Some(pipe) = self.pipe.as_mut() {
            pipe.push(reqs);
        }
    }

    /// The next entry of a pipelined scan; `None` at its end.
    fn next_piped(&mut self) -> Option<Result<(Vec<u8>, Vec<u8>)>> {
        let window = self.pipe.as_ref()?.window().min(self.batch_bytes).max(1);
        if self.ahead_bytes < window && !self.done {
            self.pull_window(window);
        }
        Some(match self.ahead.pop_front()? {
            Ahead::Inline(key, value) => {
                self.ahead_bytes -= value.len() as u64;
                Ok((key, value))
            }
            Ahead::Failed(e) => Err(e),
            Ahead::Behind(key, p) => {
                self.ahead_bytes -= u64::from(p.length);
                let got = match self.pipe.as_mut().and_then(|pipe| pipe.next_value()) {
                    Some(Ok(Some(v))) => Ok(Some(v)),
                    Some(Ok(None)) => Ok(None),
                    // A failed read: read it again alone, which tells a
                    // table GC deleted (lost) from damage.
                    _ => self.it.vstore.read(&key, &p),
                };
                match got {
                    Ok(Some(v)) => Ok((key, v)),
                    Ok(None) => Err(lost(&p)),
                    Err(e) => Err(e),
                }
            }
        })
    }

    /// Reads `reqs` in one batch and puts each value in place at the
    /// matching `at` of `ready`; the first read that fails replaces its
    /// entry, and nothing after it is kept.
    fn read_values(&mut self, at: &[usize], reqs: &[(Vec<u8>, ValuePointer)]) {
        let values: Vec<Result<Vec<u8>>> = match self.it.vstore.read_many(reqs) {
            Ok(vals) => vals
                .into_iter()
                .zip(reqs)
                .map(|(v, (_, p))| v.ok_or_else(|| lost(p)))
                .collect(),
            Err(e) => reqs.iter().map(|_| Err(e.clone())).collect(),
        };
        for (&i, v) in at.iter().zip(values) {
            match v {
                Ok(v) => {
                    if let Some(Ok((_, slot))) = self.ready.get_mut(i) {
                        *slot = v;
                    }
                }
                Err(e) => {
                    self.ready[i] = Err(e);
                    self.ready.truncate(i + 1);
                    self.done = true;
                    return;
                }
            }
        }
    }
}

impl Iterator for Scan {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.limit.is_some_and(|l| self.yielded >= l) {
            self.ready.clear();
            // Stop the pipeline's reads now, not when the scan is dropped.
            self.pipe = None;
            self.ahead.clear();
            return None;
        }
        if !self.pipe_asked
            && self.limit.is_some()
            && self.ready.is_empty()
            && !self.done
            && self.it.vstore.batch_reads_pay()
        {
            self.pipe_asked = true;
            self.pipe = self.it.vstore.read_pipeline();
        }
        let item = if self.pipe.is_some() {
            self.next_piped()?
        } else if self.ready.is_empty() && !self.done {
            // One entry at a time until the access looks like a scan, then a
            // window that grows with the scan up to the depth, so a short
            // scan does not read far past its end. A limited scan knows its
            // end: the rest of it at once.
            // Reads from memory gain nothing from batches: resolve one
            // value at a time and read none past where the caller stops.
            // Without a limit the window doubles with each batch (the
            // entries returned so far), past the depth, until a batch
            // holds `batch_bytes` of values.
            let pays = || self.it.vstore.batch_reads_pay();
            let (n, max_bytes) = match self.limit {
                Some(l) if pays() => (l - self.yielded, self.batch_bytes),
                None if self.yielded >= 2 && self.depth > 0 && pays() => {
                    (self.yielded, self.batch_bytes)
                }
                _ => (1, u64::MAX),
            };
            if n == 1 {
                self.one()?
            } else {
                self.fill(n, max_bytes);
                self.ready.pop_front()?
            }
        } else {
            self.ready.pop_front()?
        };
        self.yielded += 1;
        if item.is_err() {
            self.done = true;
            self.ready.clear();
            self.pipe = None;
            self.ahead.clear();
        }
        Some(item)
    }
}
