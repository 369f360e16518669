//! The server's compaction filter: which engine records are dead for good.
//!
//! A hash's field records outlive their hash: `DEL`, expiry, `FLUSHDB` and
//! overwriting a hash change its key record only (see [`crate::keys`]).
//! [`KeyspaceFilter`] is the server's [`sepkv::CompactionFilter`]: it tells
//! the engine's compaction (and `flashkey`'s band GC, which stands in for
//! compaction there) to drop a field record when its hash's key record is
//! absent, of another type, of a flushed generation, expired, or of another
//! version — so their values become garbage the value store reclaims, and
//! deleted hashes give their space back. It decides on the key alone and
//! never reads a value. `sepkv serve` installs it
//! ([`sepkv::Options::compaction_filter`]) and attaches it to the database
//! once open ([`KeyspaceFilter::attach`]).
//!
//! Every decision is final, as the engine's contract asks: a version that
//! is not its key's live one never becomes live again, a flushed
//! generation never comes back, and an expiry that has passed stays past.
//!
//! The decision reads the database (`Db::get` of the key record and of the
//! metadata record) and caches the last hash looked up, since a hash's
//! field records are adjacent in key order. A cached answer is used only
//! for a field whose version is older than the metadata record's next
//! version at lookup time: such a version had been committed then, and a
//! version that was not its key's live one at that moment can never
//! become live again (versions are never reused). A field of a newer
//! version triggers a fresh lookup, so a hash created after the lookup is
//! never judged by a stale answer. The other way round, a hash deleted
//! after the lookup would be kept by a cached "live": that only delays its
//! removal, and a cached answer is reused for at most [`CACHE_FOR`].
//!
//! Key records themselves are not dropped here, even expired ones: the key
//! count (`DBSIZE`) and the expire index must change in the same batch as
//! the key, which only a keyspace transaction can do. The active expiry
//! cycle visits every key with a TTL within a bounded number of cycles and
//! deletes it that way; its value then goes the way of any deleted value.
//!
//! Thread-safety: shared by the engine's background threads; the cache is
//! behind a mutex held for one lookup.

use crate::keys::{self, Meta, META_KEY, TYPE_HASH};
use crate::keyspace::now_ms;
use sepkv::{CompactionFilter, Db, FilterDecision, LazyValue};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

/// How long a looked-up hash is reused for its adjacent fields.
pub const CACHE_FOR: Duration = Duration::from_millis(100);

/// The last hash looked up.
#[derive(Debug, Clone)]
struct Cached {
    user: Vec<u8>,
    /// The metadata record's next version when looked up.
    next_version: u64,
    /// When looked up.
    at: Instant,
    /// The live version and expiry of the key's hash, `None` when the key
    /// is absent, of another type or of a flushed generation.
    live: Option<(u64, u64)>,
}

/// Drops dead hash field records in compaction (see the module docs).
#[derive(Debug, Default)]
pub struct KeyspaceFilter {
    db: OnceLock<Weak<Db>>,
    cache: Mutex<Option<Cached>>,
}

impl KeyspaceFilter {
    /// A filter not yet attached to its database: it keeps everything
    /// until [`KeyspaceFilter::attach`].
    pub fn new() -> Arc<KeyspaceFilter> {
        Arc::new(KeyspaceFilter::default())
    }

    /// Gives the filter the database it filters (once; later calls are
    /// ignored). It holds only a weak handle, so the database closes as
    /// usual.
    pub fn attach(&self, db: &Arc<Db>) {
        let _ = self.db.set(Arc::downgrade(db));
    }

    /// Whether the engine record `key` is dead for good: a hash field
    /// record whose hash no longer has its version. Any other record, a
    /// filter not attached, or a failed lookup: `false` (kept).
    pub fn is_dead(&self, key: &[u8]) -> bool {
        let Some((user, version, _)) = keys::parse_field_key(key) else {
            return false;
        };
        let Some(db) = self.db.get().and_then(Weak::upgrade) else {
            return false;
        };
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let fresh = cache.as_ref().is_some_and(|c| {
            c.user == user && version < c.next_version && c.at.elapsed() < CACHE_FOR
        });
        if !fresh {
            match lookup(&db, user) {
                Some(c) => *cache = Some(c),
                None => return false,
            }
        }
        let Some(c) = cache.as_ref() else {
            return false;
        };
        match c.live {
            Some((v, expire)) => v != version || (expire != 0 && expire <= now_ms()),
            None => true,
        }
    }
}

impl CompactionFilter for KeyspaceFilter {
    fn name(&self) -> &str {
        "sepkv-server-dead-hash-fields"
    }

    fn filter(&self, key: &[u8], _value: &LazyValue<'_>) -> FilterDecision {
        if self.is_dead(key) {
            FilterDecision::Remove
        } else {
            FilterDecision::Keep
        }
    }
}

/// Reads the metadata record, then `user`'s key record (in that order:
/// see the module docs); `None` on an engine error.
fn lookup(db: &Db, user: &[u8]) -> Option<Cached> {
    let meta = match db.get(META_KEY).ok()? {
        Some(v) => Meta::decode(&v)?,
        None => Meta {
            gen: 1,
            next_version: 1,
            ..Meta::default()
        },
    };
    let raw = db.get(keys::record_key(user)).ok()?;
    let live = raw.and_then(|v| {
        let (kind, gen, expire) = keys::header(&v)?;
        if kind != TYPE_HASH || gen != meta.gen {
            return None;
        }
        let (version, _) = keys::parse_hash_payload(&v[keys::HEADER..])?;
        Some((version, expire))
    });
    Some(Cached {
        at: Instant::now(),
        user: user.to_vec(),
        next_version: meta.next_version.max(1),
        live,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::{hashes, keyspace as keycmds, server, strings};
    use crate::keyspace::{Keyspace, Txn};
    use bytes::Bytes;

    type Cmd = fn(&mut Txn<'_>, &[Bytes]) -> crate::command::CmdResult;

    fn run(ks: &Keyspace, f: Cmd, args: &[&str]) {
        let a: Vec<Bytes> = args.iter().map(|s| Bytes::from(s.to_string())).collect();
        let mut t = ks.txn();
        f(&mut t, &a).unwrap();
        t.commit().unwrap();
    }

    fn version(db: &Db, user: &[u8]) -> u64 {
        let v = db.get(keys::record_key(user)).unwrap().unwrap();
        keys::parse_hash_payload(&v[keys::HEADER..]).unwrap().0
    }

    #[test]
    fn dead_fields_and_only_them() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(Db::open(dir.path(), sepkv::Options::default()).unwrap());
        let ks = Keyspace::open(db.clone()).unwrap();
        let f = KeyspaceFilter::new();
        let field =
            |user: &str, v: u64, name: &str| keys::field_key(user.as_bytes(), v, name.as_bytes());
        run(&ks, hashes::hset, &["hset", "h", "a", "1", "b", "2"]);
        let v1 = version(&db, b"h");
        // Not attached yet: everything kept.
        run(&ks, keycmds::del, &["del", "h"]);
        assert!(!f.is_dead(&field("h", v1, "a")));
        f.attach(&db);
        assert!(f.is_dead(&field("h", v1, "a")), "deleted hash");
        // Recreated after the cache said absent: the new version is live.
        run(&ks, hashes::hset, &["hset", "h", "a", "3"]);
        let v2 = version(&db, b"h");
        assert!(v2 > v1);
        assert!(!f.is_dead(&field("h", v2, "a")), "recreated hash");
        assert!(f.is_dead(&field("h", v1, "b")), "older version");
        // Overwritten by a string: the cached "live" is trusted for
        // CACHE_FOR at most.
        run(&ks, strings::set, &["set", "h", "x"]);
        std::thread::sleep(CACHE_FOR + Duration::from_millis(20));
        assert!(f.is_dead(&field("h", v2, "a")), "overwritten hash");
        // Expired.
        run(&ks, hashes::hset, &["hset", "e", "a", "1"]);
        let ve = version(&db, b"e");
        assert!(!f.is_dead(&field("e", ve, "a")));
        run(&ks, keycmds::pexpire, &["pexpire", "e", "30"]);
        std::thread::sleep(CACHE_FOR + Duration::from_millis(20));
        assert!(f.is_dead(&field("e", ve, "a")), "expired hash");
        // Flushed.
        run(&ks, hashes::hset, &["hset", "g", "a", "1"]);
        let vg = version(&db, b"g");
        assert!(!f.is_dead(&field("g", vg, "a")));
        run(&ks, server::flushdb, &["flushdb"]);
        std::thread::sleep(CACHE_FOR + Duration::from_millis(20));
        assert!(f.is_dead(&field("g", vg, "a")), "flushed hash");
        // Other records are never dead.
        assert!(!f.is_dead(&keys::record_key(b"h")));
        assert!(!f.is_dead(&keys::expire_key(b"e")));
        assert!(!f.is_dead(META_KEY));
        db.close().unwrap();
    }
}
