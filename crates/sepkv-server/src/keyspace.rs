//! The keyspace: Redis keys on top of one [`Db`], through its public API
//! only.
//!
//! Reads ([`Keyspace::get`], [`Keyspace::scan`]) take no lock. Every
//! command that changes keys runs as one [`Txn`]: it takes the keyspace's
//! writer lock, reads what it needs, and commits one [`WriteBatch`] holding
//! its key records, expire index records and the updated metadata record
//! (key count, keys with a TTL), so the count never drifts from the data,
//! even across a crash. Serializing read-modify-write commands is what
//! makes `INCR`, `SETNX` or `RENAME` atomic; the batch is written without
//! `sync`, and the connection waits for durability afterwards (see
//! [`crate::durability`]), outside the lock, so that concurrent clients
//! share one fsync.
//!
//! A key whose TTL has passed is absent to every read (lazy expiry) and is
//! deleted by the first writer that meets it, or by the active expiry
//! cycle ([`crate::expire`]). `FLUSHDB` bumps the keyspace generation in
//! the metadata record (one small write, whatever the database holds);
//! records of older generations are absent and are deleted in the
//! background ([`Keyspace::reclaim_step`]).
//!
//! Thread-safety: a `Keyspace` is shared by every connection (`Sync`).

use crate::filter::KeyspaceFilter;
use crate::keys::{self, Meta, Record, EXPIRE_PREFIX, META_KEY, TYPE_STRING};
use sepkv::{Db, Error, WriteBatch, WriteOptions};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Bound;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

thread_local! {
    /// The clock a replicated entry is applied at ([`with_clock`]).
    static CLOCK: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

/// Milliseconds since the Unix epoch; while [`with_clock`] runs on this
/// thread, the time it was given.
pub fn now_ms() -> u64 {
    if let Some(t) = CLOCK.with(|c| c.get()) {
        return t;
    }
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Runs `f` with [`now_ms`] reading `ms` on this thread: a replicated
/// entry carries its leader's clock reading, and every replica runs its
/// commands at that time, so TTLs and expiry decide the same everywhere.
pub fn with_clock<T>(ms: u64, f: impl FnOnce() -> T) -> T {
    struct Reset(Option<u64>);
    impl Drop for Reset {
        fn drop(&mut self) {
            CLOCK.with(|c| c.set(self.0));
        }
    }
    let _reset = Reset(CLOCK.with(|c| c.replace(Some(ms))));
    f()
}

/// A live value: payload and expiry (Unix ms, 0 for none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Value {
    /// Redis type byte.
    pub kind: u8,
    /// The string.
    pub payload: Vec<u8>,
    /// Absolute expiry in Unix ms; 0 for none.
    pub expire: u64,
}

impl Value {
    /// A string value.
    pub fn string(payload: Vec<u8>, expire: u64) -> Value {
        Value {
            kind: TYPE_STRING,
            payload,
            expire,
        }
    }
}

/// Counters for `INFO stats`.
#[derive(Debug, Default)]
pub struct KeyStats {
    /// Keys deleted because their TTL passed.
    pub expired_keys: AtomicU64,
    /// Reads that found a key.
    pub hits: AtomicU64,
    /// Reads that found none.
    pub misses: AtomicU64,
    /// Records of flushed generations deleted.
    pub reclaimed: AtomicU64,
}

/// Redis keys over a [`Db`].
pub struct Keyspace {
    db: Arc<Db>,
    writer: Mutex<Meta>,
    gen: AtomicU32,
    count: AtomicU64,
    expires: AtomicU64,
    /// Watched keys: watchers and the number of changes seen (`WATCH`).
    watched: Mutex<HashMap<Vec<u8>, (usize, u64)>>,
    watching: AtomicUsize,
    /// Tells dead hash field records (for [`Keyspace::reclaim_step`]).
    dead_fields: Arc<KeyspaceFilter>,
    /// Statistics.
    pub stats: KeyStats,
}

/// Hash fields as `(field, value)`, in field order.
pub type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// Reads of the keyspace, either as committed ([`Keyspace::reader`]) or as
/// a transaction sees them ([`Txn`]): what a read command needs, so that
/// the same command runs alone or inside `MULTI`/`EXEC`.
pub trait Reader {
    /// The live value of `key`.
    ///
    /// # Errors
    /// Engine errors.
    fn get(&mut self, key: &[u8], now: u64) -> Result<Option<Value>, Error>;
    /// The value of `field` of hash `key` version `version`.
    ///
    /// # Errors
    /// Engine errors.
    fn field(&mut self, key: &[u8], version: u64, field: &[u8]) -> Result<Option<Vec<u8>>, Error>;
    /// Up to `n` fields of hash `key` version `version` from field `from`
    /// (inclusive), and the field to continue from (`None` at the end).
    ///
    /// # Errors
    /// Engine errors.
    fn fields(
        &mut self,
        key: &[u8],
        version: u64,
        from: &[u8],
        n: usize,
    ) -> Result<(Fields, Option<Vec<u8>>), Error>;
    /// Live keys (`DBSIZE`).
    fn dbsize(&self) -> u64;
    /// Up to `count` key records from engine key `from`, as
    /// [`Keyspace::scan`].
    ///
    /// # Errors
    /// Engine errors.
    fn scan(&mut self, from: &[u8], count: usize, now: u64) -> Result<ScanPage, Error>;
}

/// A page of keys: the live `(user key, value)` pairs in key order and the
/// engine key to continue from (`None` at the end of the key space).
pub type ScanPage = (Vec<(Vec<u8>, Value)>, Option<Vec<u8>>);

/// [`Reader`] of the committed keyspace.
pub struct KeyspaceReader<'a>(pub &'a Keyspace);

impl Reader for KeyspaceReader<'_> {
    fn get(&mut self, key: &[u8], now: u64) -> Result<Option<Value>, Error> {
        self.0.get(key, now)
    }
    fn field(&mut self, key: &[u8], version: u64, field: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        self.0.db.get(keys::field_key(key, version, field))
    }
    fn fields(
        &mut self,
        key: &[u8],
        version: u64,
        from: &[u8],
        n: usize,
    ) -> Result<(Fields, Option<Vec<u8>>), Error> {
        scan_fields(&self.0.db, &BTreeMap::new(), key, version, from, n)
    }
    fn dbsize(&self) -> u64 {
        self.0.len()
    }
    fn scan(&mut self, from: &[u8], count: usize, now: u64) -> Result<ScanPage, Error> {
        self.0.scan(from, count, now)
    }
}

/// Up to `n` fields of a hash version from field `from` on: the engine's
/// records merged with a transaction's pending ones (`overlay`, by engine
/// key, `None` for a deleted field).
fn scan_fields(
    db: &Db,
    overlay: &BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    key: &[u8],
    version: u64,
    from: &[u8],
    n: usize,
) -> Result<(Fields, Option<Vec<u8>>), Error> {
    let prefix = keys::field_prefix(key, version);
    let mut lower = prefix.clone();
    lower.extend_from_slice(from);
    let upper = keys::field_prefix(key, version + 1);
    let range = (Bound::Included(&lower[..]), Bound::Excluded(&upper[..]));
    let mut pending = overlay
        .range::<[u8], _>((Bound::Included(&lower[..]), Bound::Excluded(&upper[..])))
        .peekable();
    let mut disk = db.scan(range, false)?.peekable();
    let mut out = Vec::new();
    loop {
        // The next record in key order; a pending one hides the engine's.
        if matches!(disk.peek(), Some(Err(_))) {
            if let Some(Err(e)) = disk.next() {
                return Err(e);
            }
        }
        let from_pending = match (disk.peek(), pending.peek()) {
            (Some(Ok((dk, _))), Some((pk, _))) => pk.as_slice() <= dk.as_slice(),
            (None, Some(_)) => true,
            _ => false,
        };
        let (k, v) = match (from_pending, pending.peek()) {
            (true, Some(&(pk, pv))) => {
                if matches!(disk.peek(), Some(Ok((dk, _))) if dk == pk) {
                    disk.next();
                }
                pending.next();
                (pk.clone(), pv.clone())
            }
            _ => match disk.next() {
                Some(Ok((k, v))) => (k, Some(v)),
                Some(Err(e)) => return Err(e),
                None => return Ok((out, None)),
            },
        };
        let Some(v) = v else { continue };
        let field = k[prefix.len()..].to_vec();
        if out.len() == n {
            return Ok((out, Some(field)));
        }
        out.push((field, v));
    }
}

fn corrupt_meta() -> Error {
    Error::InvalidArgument("the server's metadata record is malformed".into())
}

impl Keyspace {
    /// Reads the metadata record (a fresh database starts at generation 1).
    ///
    /// # Errors
    /// Engine errors; a malformed metadata record.
    pub fn open(db: Arc<Db>) -> Result<Keyspace, Error> {
        let meta = read_meta(&db)?;
        let dead_fields = KeyspaceFilter::new();
        dead_fields.attach(&db);
        Ok(Keyspace {
            db,
            dead_fields,
            gen: AtomicU32::new(meta.gen),
            count: AtomicU64::new(meta.count),
            expires: AtomicU64::new(meta.expires),
            writer: Mutex::new(meta),
            watched: Mutex::new(HashMap::new()),
            watching: AtomicUsize::new(0),
            stats: KeyStats::default(),
        })
    }

    /// Rereads the metadata record after the database's records were
    /// replaced underneath the keyspace (a replica installing a snapshot).
    ///
    /// # Errors
    /// Engine errors; a malformed metadata record.
    pub fn reload(&self) -> Result<(), Error> {
        let mut w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let meta = read_meta(&self.db)?;
        *w = meta;
        self.gen.store(meta.gen, Ordering::Release);
        self.count.store(meta.count, Ordering::Relaxed);
        self.expires.store(meta.expires, Ordering::Relaxed);
        Ok(())
    }

    /// A [`Reader`] of the committed keyspace.
    pub fn reader(&self) -> KeyspaceReader<'_> {
        KeyspaceReader(self)
    }

    /// Starts watching `key` (`WATCH`); the number of changes seen so far,
    /// for [`Keyspace::watch_changes`].
    pub fn watch(&self, key: &[u8]) -> u64 {
        // Under the writer lock: a commit is either wholly before the watch
        // (its write visible to the reads that follow) or after it (its
        // change counted), never astride.
        let _writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let mut w = self.watched.lock().unwrap_or_else(|p| p.into_inner());
        self.watching.fetch_add(1, Ordering::AcqRel);
        let e = w.entry(key.to_vec()).or_insert((0, 0));
        e.0 += 1;
        e.1
    }

    /// Stops one watch of `key`.
    pub fn unwatch(&self, key: &[u8]) {
        let mut w = self.watched.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = w.get_mut(key) {
            self.watching.fetch_sub(1, Ordering::AcqRel);
            e.0 -= 1;
            if e.0 == 0 {
                w.remove(key);
            }
        }
    }

    /// Changes committed to a watched `key` since watching started.
    pub fn watch_changes(&self, key: &[u8]) -> u64 {
        let w = self.watched.lock().unwrap_or_else(|p| p.into_inner());
        w.get(key).map_or(0, |e| e.1)
    }

    /// The engine handle.
    pub fn db(&self) -> &Arc<Db> {
        &self.db
    }

    /// Live keys (expired ones not yet deleted included), as `DBSIZE`.
    pub fn len(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Whether [`Keyspace::len`] is 0.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys with a TTL.
    pub fn expires(&self) -> u64 {
        self.expires.load(Ordering::Relaxed)
    }

    fn live(&self, raw: Vec<u8>, now: u64) -> Option<Value> {
        let r = Record::decode(raw)?;
        (r.gen == self.gen.load(Ordering::Acquire) && (r.expire == 0 || r.expire > now)).then_some(
            Value {
                kind: r.kind,
                payload: r.payload,
                expire: r.expire,
            },
        )
    }

    /// The live value of `key`; deletes it when its TTL has passed.
    ///
    /// # Errors
    /// Engine errors (a `Corruption` names file and offset).
    pub fn get(&self, key: &[u8], now: u64) -> Result<Option<Value>, Error> {
        let raw = self.db.get(keys::record_key(key))?;
        let Some(raw) = raw else {
            self.stats.misses.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        };
        let expired = matches!(keys::header(&raw), Some((_, g, e))
            if g == self.gen.load(Ordering::Acquire) && e != 0 && e <= now);
        let v = self.live(raw, now);
        if v.is_some() {
            self.stats.hits.fetch_add(1, Ordering::Relaxed);
        } else {
            self.stats.misses.fetch_add(1, Ordering::Relaxed);
        }
        if expired {
            // Lazy expiry: a failed delete (a poisoned database) leaves
            // the key absent to reads all the same.
            let mut t = self.txn();
            if t.get(key, now).is_ok() {
                let _ = t.commit();
            }
        }
        Ok(v)
    }

    /// Starts a write transaction (takes the writer lock).
    pub fn txn(&self) -> Txn<'_> {
        let meta = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let start = *meta;
        Txn {
            ks: self,
            meta,
            start,
            batch: WriteBatch::new(),
            seen: HashMap::new(),
            fields: BTreeMap::new(),
            changed: HashSet::new(),
            flushed: false,
        }
    }

    /// Up to `count` live keys in key order from engine key `from`
    /// (inclusive), as `(user key, value)`, and the engine key to continue
    /// from (`None` at the end of the key space). The field records of a
    /// hash are stepped over in one seek; records that are not live keys
    /// (expired, of a flushed generation) are read but not counted, up to
    /// `100 count + 10 000` of them per call, so a page ends early rather
    /// than reading without bound.
    ///
    /// # Errors
    /// Engine errors.
    pub fn scan(&self, from: &[u8], count: usize, now: u64) -> Result<ScanPage, Error> {
        let upper = [0x40u8];
        let mut lower = from.to_vec();
        let mut out = Vec::new();
        let mut budget = count.saturating_mul(100).saturating_add(10_000);
        'seek: loop {
            let range = (Bound::Included(&lower[..]), Bound::Excluded(&upper[..]));
            for r in self.db.scan(range, false)? {
                let (k, v) = r?;
                if budget == 0 {
                    return Ok((out, Some(k)));
                }
                budget -= 1;
                if let Some((user, _, _)) = keys::parse_field_key(&k) {
                    // Past every field record of this key (versions never
                    // reach all ones).
                    let mut past = k[..5 + user.len()].to_vec();
                    past.extend_from_slice(&[0xff; 9]);
                    lower = past;
                    continue 'seek;
                }
                let Some(user) = keys::user_key(&k) else {
                    continue;
                };
                let user = user.to_vec();
                if let Some(v) = self.live(v, now) {
                    if out.len() == count {
                        return Ok((out, Some(k)));
                    }
                    out.push((user, v));
                }
            }
            return Ok((out, None));
        }
    }

    /// Up to `n` expire index records from engine key `from` (inclusive):
    /// how many were read, the user keys among them whose TTL (of the
    /// current generation) has passed, and where to continue (`None` at the
    /// end of the index). Records of flushed generations are left to
    /// [`Keyspace::reclaim_step`].
    ///
    /// # Errors
    /// Engine errors.
    #[allow(clippy::type_complexity)]
    pub fn sample_expires(
        &self,
        from: &[u8],
        n: usize,
        now: u64,
    ) -> Result<(usize, Vec<Vec<u8>>, Option<Vec<u8>>), Error> {
        let mut upper = EXPIRE_PREFIX.to_vec();
        upper.push(0xff);
        let lower = if from < EXPIRE_PREFIX {
            EXPIRE_PREFIX
        } else {
            from
        };
        let mut due = Vec::new();
        let mut seen = 0;
        for r in self
            .db
            .scan((Bound::Included(lower), Bound::Excluded(&upper[..])), false)?
        {
            let (k, v) = r?;
            if seen == n {
                return Ok((seen, due, Some(k)));
            }
            seen += 1;
            let expire = v
                .get(..8)
                .map_or(0, |b| u64::from_be_bytes(b.try_into().unwrap_or_default()));
            let gen = v
                .get(8..12)
                .map_or(0, |b| u32::from_be_bytes(b.try_into().unwrap_or_default()));
            if gen == self.gen.load(Ordering::Acquire) && expire <= now {
                if let Some(user) = k.get(EXPIRE_PREFIX.len() + 2..) {
                    due.push(user.to_vec());
                }
            }
        }
        Ok((seen, due, None))
    }

    /// Deletes up to `n` records of flushed generations (hash field records
    /// of dead hashes too), reading at most
    /// `10 n` records from `from` on; `Ok(true)` when none remain (and
    /// records that in the metadata).
    ///
    /// # Errors
    /// Engine errors.
    pub fn reclaim_step(&self, from: &mut Vec<u8>, n: usize) -> Result<bool, Error> {
        let gen = self.gen.load(Ordering::Acquire);
        {
            let meta = self.writer.lock().unwrap_or_else(|p| p.into_inner());
            if meta.reclaimed_below >= meta.gen {
                return Ok(true);
            }
        }
        let mut old = Vec::new();
        let mut next = None;
        for (scanned, r) in self.db.scan(from.as_slice().., false)?.enumerate() {
            let (k, v) = r?;
            // Bounded work per step, however few records are stale.
            if old.len() + 1 > n || scanned >= 10 * n {
                next = Some(k);
                break;
            }
            if k.as_slice() == META_KEY {
                continue;
            }
            let stale = if keys::user_key(&k).is_some() {
                keys::header(&v).is_some_and(|(_, g, _)| g < gen)
            } else if k.starts_with(EXPIRE_PREFIX) {
                v.get(8..12)
                    .is_some_and(|b| u32::from_be_bytes(b.try_into().unwrap_or_default()) < gen)
            } else {
                // The fields of flushed hashes (and of any dead hash met).
                self.dead_fields.is_dead(&k)
            };
            if stale {
                old.push(k);
            }
        }
        let mut meta = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let mut b = WriteBatch::new();
        for k in &old {
            // Re-check under the lock: a writer may have replaced it.
            let still = match self.db.get(k)? {
                Some(v) if k.starts_with(EXPIRE_PREFIX) => v
                    .get(8..12)
                    .is_some_and(|b| u32::from_be_bytes(b.try_into().unwrap_or_default()) < gen),
                Some(_) if keys::parse_field_key(k).is_some() => self.dead_fields.is_dead(k),
                Some(v) => keys::header(&v).is_some_and(|(_, g, _)| g < gen),
                None => false,
            };
            if still {
                b.delete(k)?;
            }
        }
        let done = next.is_none();
        if done && meta.gen == gen {
            let mut m = *meta;
            m.reclaimed_below = gen;
            b.put(META_KEY, m.encode())?;
            self.db.write(&b, WriteOptions::default())?;
            *meta = m;
        } else if !b.is_empty() {
            self.db.write(&b, WriteOptions::default())?;
        }
        self.stats
            .reclaimed
            .fetch_add(b.len() as u64, Ordering::Relaxed);
        match next {
            Some(k) => *from = k,
            None => from.clear(),
        }
        Ok(done && meta.reclaimed_below >= meta.gen)
    }
}

/// One write command's transaction: reads through it see its own writes;
/// [`Txn::commit`] writes everything as one batch. Dropping it without
/// commit writes nothing.
pub struct Txn<'a> {
    ks: &'a Keyspace,
    meta: MutexGuard<'a, Meta>,
    start: Meta,
    batch: WriteBatch,
    /// Keys read or written: their state as of this transaction.
    seen: HashMap<Vec<u8>, Option<Value>>,
    /// Hash field records written, by engine key (`None`: deleted).
    fields: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Keys changed by a command (for `WATCH`; expiry is not a change).
    changed: HashSet<Vec<u8>>,
    /// Whether `FLUSHDB` ran.
    flushed: bool,
}

impl Reader for Txn<'_> {
    fn get(&mut self, key: &[u8], now: u64) -> Result<Option<Value>, Error> {
        Txn::get(self, key, now)
    }
    fn field(&mut self, key: &[u8], version: u64, field: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        let k = keys::field_key(key, version, field);
        match self.fields.get(&k) {
            Some(v) => Ok(v.clone()),
            None => self.ks.db.get(k),
        }
    }
    fn fields(
        &mut self,
        key: &[u8],
        version: u64,
        from: &[u8],
        n: usize,
    ) -> Result<(Fields, Option<Vec<u8>>), Error> {
        scan_fields(&self.ks.db, &self.fields, key, version, from, n)
    }
    fn dbsize(&self) -> u64 {
        self.meta.count
    }
    /// The committed page with this transaction's changes in its key
    /// range applied.
    fn scan(&mut self, from: &[u8], count: usize, now: u64) -> Result<ScanPage, Error> {
        let (mut found, next) = self.ks.scan(from, count, now)?;
        if self.flushed {
            // Every committed key belongs to a flushed generation.
            found.clear();
        }
        let in_page = |rk: &[u8]| rk >= from && next.as_deref().is_none_or(|n| rk < n);
        found.retain(|(k, _)| !self.seen.contains_key(k));
        for (k, v) in &self.seen {
            if let Some(v) = v {
                if in_page(&keys::record_key(k)) {
                    found.push((k.clone(), v.clone()));
                }
            }
        }
        found.sort_by_cached_key(|(k, _)| keys::record_key(k));
        Ok((found, next))
    }
}

impl Txn<'_> {
    /// The live value of `key` as this transaction sees it. A record whose
    /// TTL has passed is deleted by this transaction.
    ///
    /// # Errors
    /// Engine errors.
    pub fn get(&mut self, key: &[u8], now: u64) -> Result<Option<Value>, Error> {
        if let Some(v) = self.seen.get(key) {
            return Ok(v.clone());
        }
        let v = match self.ks.db.get(keys::record_key(key))? {
            None => None,
            Some(raw) => match Record::decode(raw) {
                Some(r) if r.gen == self.meta.gen => {
                    if r.expire != 0 && r.expire <= now {
                        self.remove_records(key, true)?;
                        self.ks.stats.expired_keys.fetch_add(1, Ordering::Relaxed);
                        None
                    } else {
                        Some(Value {
                            kind: r.kind,
                            payload: r.payload,
                            expire: r.expire,
                        })
                    }
                }
                _ => None,
            },
        };
        self.seen.insert(key.to_vec(), v.clone());
        Ok(v)
    }

    fn remove_records(&mut self, key: &[u8], had_ttl: bool) -> Result<(), Error> {
        self.batch.delete(keys::record_key(key))?;
        self.meta.count = self.meta.count.saturating_sub(1);
        if had_ttl {
            self.batch.delete(keys::expire_key(key))?;
            self.meta.expires = self.meta.expires.saturating_sub(1);
        }
        Ok(())
    }

    /// Sets `key` to `v`.
    ///
    /// # Errors
    /// Engine errors; `InvalidArgument` beyond the engine's limits.
    pub fn set(&mut self, key: &[u8], v: Value, now: u64) -> Result<(), Error> {
        let prev = self.get(key, now)?;
        let prev_ttl = prev.as_ref().is_some_and(|p| p.expire != 0);
        if prev.is_none() {
            self.meta.count += 1;
        }
        let gen = self.meta.gen;
        self.batch.put(
            keys::record_key(key),
            Record::encode(v.kind, gen, v.expire, &v.payload),
        )?;
        if v.expire != 0 {
            let mut e = v.expire.to_be_bytes().to_vec();
            e.extend_from_slice(&gen.to_be_bytes());
            self.batch.put(keys::expire_key(key), e)?;
            if !prev_ttl {
                self.meta.expires += 1;
            }
        } else if prev_ttl {
            self.batch.delete(keys::expire_key(key))?;
            self.meta.expires = self.meta.expires.saturating_sub(1);
        }
        self.seen.insert(key.to_vec(), Some(v));
        self.changed.insert(key.to_vec());
        Ok(())
    }

    /// A version for a new hash (never handed out before).
    pub fn new_version(&mut self) -> u64 {
        let v = self.meta.next_version.max(1);
        self.meta.next_version = v + 1;
        v
    }

    /// Keeps every later [`Txn::new_version`] above `version`: a hash
    /// copied from another node keeps its version (its field records are
    /// named by it), so this node must never hand that version out again,
    /// or a later hash of the same key would take over the copy's dead
    /// fields.
    pub fn reserve_version(&mut self, version: u64) {
        self.meta.next_version = self.meta.next_version.max(version.saturating_add(1));
    }

    /// Sets field `field` of hash `key` version `version` (the caller
    /// updates the hash's key record).
    ///
    /// # Errors
    /// `InvalidArgument` beyond the engine's limits.
    pub fn put_field(
        &mut self,
        key: &[u8],
        version: u64,
        field: &[u8],
        value: Vec<u8>,
    ) -> Result<(), Error> {
        let k = keys::field_key(key, version, field);
        self.batch.put(&k, &value)?;
        self.fields.insert(k, Some(value));
        Ok(())
    }

    /// Deletes field `field` of hash `key` version `version`.
    ///
    /// # Errors
    /// `InvalidArgument` beyond the engine's limits.
    pub fn del_field(&mut self, key: &[u8], version: u64, field: &[u8]) -> Result<(), Error> {
        let k = keys::field_key(key, version, field);
        self.batch.delete(&k)?;
        self.fields.insert(k, None);
        Ok(())
    }

    /// Deletes `key`; whether it existed.
    ///
    /// # Errors
    /// Engine errors.
    pub fn del(&mut self, key: &[u8], now: u64) -> Result<bool, Error> {
        match self.get(key, now)? {
            Some(p) => {
                self.remove_records(key, p.expire != 0)?;
                self.seen.insert(key.to_vec(), None);
                self.changed.insert(key.to_vec());
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Writes an engine record as it is (a sub-key record copied by slot
    /// migration); key records go through [`Txn::set`].
    ///
    /// # Errors
    /// `InvalidArgument` beyond the engine's limits.
    pub fn put_raw(&mut self, k: &[u8], v: &[u8]) -> Result<(), Error> {
        self.batch.put(k, v)
    }

    /// Deletes an engine record (slot migration's drop of a slot's
    /// records; key records go through [`Txn::del`] first, which counts).
    ///
    /// # Errors
    /// `InvalidArgument` beyond the engine's limits.
    pub fn delete_raw(&mut self, k: &[u8]) -> Result<(), Error> {
        self.batch.delete(k)
    }

    /// Empties the keyspace: bumps the generation.
    pub fn flush(&mut self) {
        self.meta.gen += 1;
        self.meta.count = 0;
        self.meta.expires = 0;
        self.seen.clear();
        self.fields.clear();
        self.batch.clear();
        self.flushed = true;
    }

    /// Counts a commit's changes against the watched keys: every key a
    /// command changed, and after `FLUSHDB` every watched key that was live
    /// before it (as Redis).
    fn touch_watched(&self, start_gen: u32) {
        if self.ks.watching.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut w = self.ks.watched.lock().unwrap_or_else(|p| p.into_inner());
        let now = now_ms();
        for (k, e) in w.iter_mut() {
            let hit = self.changed.contains(k)
                || (self.flushed
                    && self.ks.db.get(keys::record_key(k)).map_or(true, |v| {
                        v.is_some_and(|v| {
                            keys::header(&v)
                                .is_some_and(|(_, g, x)| g == start_gen && (x == 0 || x > now))
                        })
                    }));
            if hit {
                e.1 += 1;
            }
        }
    }

    /// Writes the transaction's batch (not synced) and publishes its
    /// metadata. Returns whether anything was written.
    ///
    /// # Errors
    /// Engine errors (`Poisoned` after an earlier write failure); nothing
    /// is applied then.
    pub fn commit(mut self) -> Result<bool, Error> {
        if *self.meta != self.start {
            self.batch.put(META_KEY, self.meta.encode())?;
        }
        if self.batch.is_empty() {
            return Ok(false);
        }
        // Before the write: a flushed key is looked up as it was (a failed
        // write then aborts a watcher's EXEC needlessly, never wrongly).
        self.touch_watched(self.start.gen);
        let r = self.ks.db.write(&self.batch, WriteOptions::default());
        if let Err(e) = r {
            *self.meta = self.start;
            return Err(e);
        }
        self.start = *self.meta;
        self.ks.count.store(self.meta.count, Ordering::Relaxed);
        self.ks.expires.store(self.meta.expires, Ordering::Relaxed);
        self.ks.gen.store(self.meta.gen, Ordering::Release);
        Ok(true)
    }
}

impl Drop for Txn<'_> {
    fn drop(&mut self) {
        // An uncommitted transaction leaves the metadata as it found it.
        if !self.batch.is_empty() || *self.meta != self.start {
            *self.meta = self.start;
        }
    }
}

/// The keyspace's metadata record (a fresh database starts at generation 1).
///
/// # Errors
/// Engine errors; a malformed metadata record.
fn read_meta(db: &Db) -> Result<Meta, Error> {
    match db.get(META_KEY)? {
        Some(v) => Meta::decode(&v).ok_or_else(corrupt_meta),
        None => Ok(Meta {
            gen: 1,
            count: 0,
            expires: 0,
            reclaimed_below: 1,
            next_version: 1,
        }),
    }
}
