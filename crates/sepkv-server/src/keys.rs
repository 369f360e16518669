//! How server keys map onto the engine's ordered keys (frozen: a change
//! needs a format migration).
//!
//! Every user key lives in one engine record, its *key record*:
//!
//! ```text
//! key record key:    +-----------+------+----------------+
//!                    | slot u16  | 'k'  | user key bytes |
//!                    | BE, 2 B   | 1 B  | 0..=65532 B    |
//!                    +-----------+------+----------------+
//! key record value:  +------+-----------+----------------+-----------------+
//!                    | type | gen u32   | expire u64     | payload         |
//!                    | 1 B  | BE, 4 B   | BE, 8 B        | (string: bytes) |
//!                    +------+-----------+----------------+-----------------+
//! ```
//!
//! - `slot` is Redis Cluster's hash slot, CRC16 (XMODEM) of the key or of
//!   its `{hash tag}`, mod 16384, written in every mode so that a slot is
//!   one contiguous range of the engine's key space. Its first byte is at
//!   most `0x3F`.
//! - The record kind byte `'k'` marks the key record (the metadata record
//!   of a Redis key; for a string it holds the value itself). Later types
//!   add sub-key kinds after the same slot and user key prefix.
//! - `type` is the Redis type: `1` = string, `2` = hash.
//! - `gen` is the keyspace generation the record was written in: `FLUSHDB`
//!   bumps the generation, and a record of an older one is absent.
//! - `expire` is the absolute expiry in Unix milliseconds, `0` for none.
//!
//! A hash's key record is its metadata: its payload is the hash's
//! *version* and its field count. Each field is one more record, under the
//! same slot, after the key and the version:
//!
//! ```text
//! hash payload:      | version u64 BE | field count u64 BE |
//! field record key:  +----------+------+-------------+----------+-------------+-------+
//!                    | slot u16 | 'h'  | key len u16 | user key | version u64 | field |
//!                    | BE       | 1 B  | BE          |          | BE          |       |
//!                    +----------+------+-------------+----------+-------------+-------+
//! field record value: the field's value, as is.
//! ```
//!
//! A version is drawn from a counter in the metadata record and never
//! reused, so a hash that is deleted, expires, is overwritten or is flushed
//! changes its key record only (O(1) whatever its size): the field records
//! of other versions are dead, invisible to reads, and are dropped by the
//! server's compaction filter ([`crate::filter`]). A field's record key
//! obeys the engine's key limit ([`field_key_len`]).
//!
//! Two more kinds of records live above every slot (first byte `0xFF`):
//!
//! ```text
//! 0xFF 'm'                          -> gen u32 | count u64 | expires u64 | reclaimed-below gen u32
//!                                      | next hash version u64 (BE; absent in records written
//!                                        before hashes, read as 1)
//! 0xFF 'e' | slot u16 BE | user key -> expire u64 BE | gen u32 BE
//! ```
//!
//! In cluster mode ([`crate::cluster`]) two more:
//!
//! ```text
//! 0xFF "cluster-topology" -> the topology in force, as its file text (UTF-8)
//! 0xFF "cluster-marks"    -> migration marks, one a line (UTF-8):
//!                            "migrating SLOT NODE-ID" | "moved SLOT NODE-ID"
//!                            | "importing SLOT NODE-ID"
//! ```
//!
//! The `m` record is the keyspace's metadata: its generation, the number of
//! live keys of that generation (`DBSIZE`), how many of them have a TTL,
//! and the oldest generation whose
//! records may still be on disk. An `e` record (the *expire index*) exists
//! for every key with a TTL, so the active expiry cycle reads only keys
//! that can expire; it is ordered by slot as well.

/// Number of hash slots.
pub const SLOTS: u16 = 16384;
/// Record kind byte of a key record.
pub const KIND_KEY: u8 = b'k';
/// Redis type byte: string.
pub const TYPE_STRING: u8 = 1;
/// Redis type byte: hash.
pub const TYPE_HASH: u8 = 2;
/// Record kind byte of a hash field record.
pub const KIND_FIELD: u8 = b'h';
/// Bytes of a hash field record's key besides the user key and the field.
pub const FIELD_OVERHEAD: usize = 13;
/// Bytes before a key record's payload.
pub const HEADER: usize = 13;
/// Prefix of the keyspace metadata record.
pub const META_KEY: &[u8] = b"\xffm";
/// The record holding the cluster topology in force.
pub const CLUSTER_TOPOLOGY_KEY: &[u8] = b"\xffcluster-topology";
/// The record holding the cluster's migration marks.
pub const CLUSTER_MARKS_KEY: &[u8] = b"\xffcluster-marks";
/// The state machine's last applied Raft log id and membership (a
/// replicated shard), written in the batch of the entries it covers.
pub const RAFT_APPLIED_KEY: &[u8] = b"\xffraft-applied";
/// Present while a replica replaces its records with a snapshot's.
pub const RAFT_INSTALLING_KEY: &[u8] = b"\xffraft-installing";
/// Prefix of expire index records.
pub const EXPIRE_PREFIX: &[u8] = b"\xffe";
/// Longest user key: the engine's key limit less the expire index prefix.
pub const MAX_USER_KEY: usize = sepkv::MAX_KEY_SIZE - 4;
/// Longest string value: the engine's value limit less the record header.
pub const MAX_STRING: usize = sepkv::MAX_VALUE_SIZE - HEADER;

const fn crc16_table() -> [u16; 256] {
    let mut t = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = (i as u16) << 8;
        let mut j = 0;
        while j < 8 {
            c = if c & 0x8000 != 0 {
                (c << 1) ^ 0x1021
            } else {
                c << 1
            };
            j += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

static CRC16: [u16; 256] = crc16_table();

/// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), the checksum
/// Redis Cluster hashes keys with.
pub fn crc16(data: &[u8]) -> u16 {
    data.iter().fold(0u16, |crc, &b| {
        (crc << 8) ^ CRC16[usize::from(((crc >> 8) as u8) ^ b)]
    })
}

/// The hash slot of `key`: of the part between the first `{` and the next
/// `}` when that part is not empty, else of the whole key.
pub fn slot(key: &[u8]) -> u16 {
    let hashed = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|s| {
            key[s + 1..]
                .iter()
                .position(|&b| b == b'}')
                .filter(|&len| len > 0)
                .map(|len| &key[s + 1..s + 1 + len])
        })
        .unwrap_or(key);
    crc16(hashed) % SLOTS
}

/// The engine key of `user`'s key record.
pub fn record_key(user: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(user.len() + 3);
    k.extend_from_slice(&slot(user).to_be_bytes());
    k.push(KIND_KEY);
    k.extend_from_slice(user);
    k
}

/// The user key of a key record's engine key, `None` for other records.
pub fn user_key(record: &[u8]) -> Option<&[u8]> {
    (record.len() >= 3 && record[0] < 0x40 && record[2] == KIND_KEY).then(|| &record[3..])
}

/// The engine key of `user`'s expire index record.
pub fn expire_key(user: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(user.len() + 4);
    k.extend_from_slice(EXPIRE_PREFIX);
    k.extend_from_slice(&slot(user).to_be_bytes());
    k.extend_from_slice(user);
    k
}

/// The engine key length of field `field` of hash `user`.
pub fn field_key_len(user: &[u8], field: &[u8]) -> usize {
    FIELD_OVERHEAD + user.len() + field.len()
}

/// The prefix every field record of `user`'s hash version `version` starts
/// with (the field follows it).
pub fn field_prefix(user: &[u8], version: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(FIELD_OVERHEAD + user.len() + 16);
    k.extend_from_slice(&slot(user).to_be_bytes());
    k.push(KIND_FIELD);
    // User keys are at most `MAX_USER_KEY` < 65536 bytes.
    k.extend_from_slice(&(user.len() as u16).to_be_bytes());
    k.extend_from_slice(user);
    k.extend_from_slice(&version.to_be_bytes());
    k
}

/// The engine key of field `field` of `user`'s hash version `version`.
pub fn field_key(user: &[u8], version: u64, field: &[u8]) -> Vec<u8> {
    let mut k = field_prefix(user, version);
    k.extend_from_slice(field);
    k
}

/// A field record's engine key split into user key, version and field;
/// `None` for other records.
pub fn parse_field_key(k: &[u8]) -> Option<(&[u8], u64, &[u8])> {
    if k.len() < 5 || k[0] >= 0x40 || k[2] != KIND_FIELD {
        return None;
    }
    let len = usize::from(u16::from_be_bytes([k[3], k[4]]));
    let user = k.get(5..5 + len)?;
    let version = u64::from_be_bytes(k.get(5 + len..13 + len)?.try_into().ok()?);
    Some((user, version, &k[13 + len..]))
}

/// A hash's key record payload: version and field count.
pub fn hash_payload(version: u64, count: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(16);
    v.extend_from_slice(&version.to_be_bytes());
    v.extend_from_slice(&count.to_be_bytes());
    v
}

/// Version and field count of a hash's key record payload.
pub fn parse_hash_payload(p: &[u8]) -> Option<(u64, u64)> {
    Some((
        u64::from_be_bytes(p.get(0..8)?.try_into().ok()?),
        u64::from_be_bytes(p.get(8..16)?.try_into().ok()?),
    ))
}

/// A decoded key record value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Redis type byte.
    pub kind: u8,
    /// Generation written in.
    pub gen: u32,
    /// Absolute expiry (Unix ms), 0 for none.
    pub expire: u64,
    /// The payload.
    pub payload: Vec<u8>,
}

impl Record {
    /// Encodes a record value.
    pub fn encode(kind: u8, gen: u32, expire: u64, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(HEADER + payload.len());
        v.push(kind);
        v.extend_from_slice(&gen.to_be_bytes());
        v.extend_from_slice(&expire.to_be_bytes());
        v.extend_from_slice(payload);
        v
    }

    /// Decodes a record value (taking its buffer), `None` when it is too
    /// short to be one.
    pub fn decode(mut v: Vec<u8>) -> Option<Record> {
        let (kind, gen, expire) = header(&v)?;
        v.drain(..HEADER);
        Some(Record {
            kind,
            gen,
            expire,
            payload: v,
        })
    }
}

/// Type, generation and expiry of a record value.
pub fn header(v: &[u8]) -> Option<(u8, u32, u64)> {
    if v.len() < HEADER {
        return None;
    }
    let gen = u32::from_be_bytes(v[1..5].try_into().ok()?);
    let expire = u64::from_be_bytes(v[5..13].try_into().ok()?);
    Some((v[0], gen, expire))
}

/// The keyspace metadata record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Meta {
    /// Current generation.
    pub gen: u32,
    /// Live keys of the current generation.
    pub count: u64,
    /// Of them, keys with a TTL.
    pub expires: u64,
    /// Records of generations below this are gone from disk.
    pub reclaimed_below: u32,
    /// The version the next new hash gets.
    pub next_version: u64,
}

impl Meta {
    /// Encodes the metadata value.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(32);
        v.extend_from_slice(&self.gen.to_be_bytes());
        v.extend_from_slice(&self.count.to_be_bytes());
        v.extend_from_slice(&self.expires.to_be_bytes());
        v.extend_from_slice(&self.reclaimed_below.to_be_bytes());
        v.extend_from_slice(&self.next_version.to_be_bytes());
        v
    }

    /// Decodes the metadata value (24 bytes before hashes, 32 since).
    pub fn decode(v: &[u8]) -> Option<Meta> {
        let next_version = match v.len() {
            24 => 1,
            32 => u64::from_be_bytes(v[24..32].try_into().ok()?),
            _ => return None,
        };
        Some(Meta {
            gen: u32::from_be_bytes(v[0..4].try_into().ok()?),
            count: u64::from_be_bytes(v[4..12].try_into().ok()?),
            expires: u64::from_be_bytes(v[12..20].try_into().ok()?),
            reclaimed_below: u32::from_be_bytes(v[20..24].try_into().ok()?),
            next_version,
        })
    }
}

/// Redis's glob matching (`KEYS`, `SCAN MATCH`, `CONFIG GET`): `*`, `?`,
/// `[abc]`, `[^a]`, `[a-z]` and `\` escapes, on bytes.
pub fn glob_match(pat: &[u8], s: &[u8]) -> bool {
    let (mut p, mut i) = (0, 0);
    while p < pat.len() {
        match pat[p] {
            b'*' => {
                while p + 1 < pat.len() && pat[p + 1] == b'*' {
                    p += 1;
                }
                if p + 1 == pat.len() {
                    return true;
                }
                return (i..=s.len()).any(|j| glob_match(&pat[p + 1..], &s[j..]));
            }
            b'?' => {
                if i >= s.len() {
                    return false;
                }
                i += 1;
            }
            b'[' => {
                if i >= s.len() {
                    return false;
                }
                p += 1;
                let not = p < pat.len() && pat[p] == b'^';
                if not {
                    p += 1;
                }
                let mut matched = false;
                loop {
                    if p >= pat.len() {
                        p -= 1;
                        break;
                    }
                    if pat[p] == b'\\' && p + 1 < pat.len() {
                        p += 1;
                        if pat[p] == s[i] {
                            matched = true;
                        }
                    } else if pat[p] == b']' {
                        break;
                    } else if p + 2 < pat.len() && pat[p + 1] == b'-' {
                        let (mut a, mut b) = (pat[p], pat[p + 2]);
                        if a > b {
                            std::mem::swap(&mut a, &mut b);
                        }
                        p += 2;
                        if (a..=b).contains(&s[i]) {
                            matched = true;
                        }
                    } else if pat[p] == s[i] {
                        matched = true;
                    }
                    p += 1;
                }
                if matched == not {
                    return false;
                }
                i += 1;
            }
            b'\\' if p + 1 < pat.len() => {
                p += 1;
                if i >= s.len() || pat[p] != s[i] {
                    return false;
                }
                i += 1;
            }
            c => {
                if i >= s.len() || c != s[i] {
                    return false;
                }
                i += 1;
            }
        }
        p += 1;
    }
    i == s.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_as_redis_cluster() {
        // Values from the Redis Cluster specification's examples.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}"));
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
    }

    #[test]
    fn record_round_trip() {
        let v = Record::encode(TYPE_STRING, 7, 99, b"hello");
        let r = Record::decode(v).unwrap();
        assert_eq!(
            (r.kind, r.gen, r.expire, &r.payload[..]),
            (1, 7, 99, &b"hello"[..])
        );
        let k = record_key(b"abc");
        assert_eq!(user_key(&k), Some(&b"abc"[..]));
        assert!(user_key(META_KEY).is_none());
        let m = Meta {
            gen: 3,
            count: 10,
            expires: 4,
            reclaimed_below: 2,
            next_version: 9,
        };
        assert_eq!(Meta::decode(&m.encode()), Some(m));
        let old = Meta::decode(&m.encode()[..24]).unwrap();
        assert_eq!(old.next_version, 1);
        let f = field_key(b"h{x}", 7, b"field");
        assert_eq!(f.len(), field_key_len(b"h{x}", b"field"));
        assert_eq!(parse_field_key(&f), Some((&b"h{x}"[..], 7, &b"field"[..])));
        assert!(parse_field_key(&record_key(b"h")).is_none());
        assert_eq!(parse_hash_payload(&hash_payload(3, 4)), Some((3, 4)));
    }

    #[test]
    fn globs() {
        assert!(glob_match(b"*", b""));
        assert!(glob_match(b"h?llo", b"hello"));
        assert!(glob_match(b"h*llo", b"heeeello"));
        assert!(glob_match(b"h[ae]llo", b"hallo"));
        assert!(!glob_match(b"h[^e]llo", b"hello"));
        assert!(glob_match(b"h[a-b]llo", b"hbllo"));
        assert!(glob_match(b"a\\*", b"a*"));
        assert!(!glob_match(b"a\\*", b"ab"));
    }
}
