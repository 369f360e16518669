//! Internal keys: a user key followed by an 8-byte trailer packing the
//! sequence number and the entry type.
//!
//! ```text
//! internal key := user_key  trailer:u64le
//! trailer      := (sequence << 8) | type
//! type         := 0 deletion (tombstone) | 1 inline value | 2 value pointer
//! ```
//! Frozen: format version 1.
//!
//! Order: user key ascending (bytewise), then sequence number descending,
//! then type descending, so that the newest version of a key comes first.

use std::cmp::Ordering;

pub use crate::seqno::{SeqNum, MAX_SEQ};
pub use crate::value_type::ValueType;

/// Bytes of the trailer.
pub const TRAILER_LEN: usize = 8;

/// Type used in seek keys: sorts before every real type of the same
/// sequence number.
pub const TYPE_FOR_SEEK: u8 = 0xff;

/// Packs a sequence number and type byte.
pub fn pack_trailer(seq: SeqNum, t: u8) -> u64 {
    debug_assert!(seq <= MAX_SEQ);
    (seq << 8) | t as u64
}

/// Appends the internal key `(user_key, seq, t)` to `dst`.
pub fn append_internal_key(dst: &mut Vec<u8>, user_key: &[u8], seq: SeqNum, t: u8) {
    dst.extend_from_slice(user_key);
    dst.extend_from_slice(&pack_trailer(seq, t).to_le_bytes());
}

/// Builds an internal key.
pub fn internal_key(user_key: &[u8], seq: SeqNum, t: ValueType) -> Vec<u8> {
    let mut v = Vec::with_capacity(user_key.len() + TRAILER_LEN);
    append_internal_key(&mut v, user_key, seq, t as u8);
    v
}

/// Builds the key that seeks to the newest version of `user_key` visible at
/// `seq`.
pub fn seek_key(user_key: &[u8], seq: SeqNum) -> Vec<u8> {
    let mut v = Vec::with_capacity(user_key.len() + TRAILER_LEN);
    append_internal_key(&mut v, user_key, seq, TYPE_FOR_SEEK);
    v
}

/// A decoded internal key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParsedKey<'a> {
    /// The user key.
    pub user_key: &'a [u8],
    /// Sequence number of the write.
    pub seq: SeqNum,
    /// Entry type.
    pub vtype: ValueType,
}

/// Decodes an internal key; `None` if it is too short or has an unknown
/// type.
pub fn parse_internal_key(ikey: &[u8]) -> Option<ParsedKey<'_>> {
    if ikey.len() < TRAILER_LEN {
        return None;
    }
    let (uk, tr) = ikey.split_at(ikey.len() - TRAILER_LEN);
    let tr = u64::from_le_bytes(tr.try_into().ok()?);
    Some(ParsedKey {
        user_key: uk,
        seq: tr >> 8,
        vtype: ValueType::from_u8((tr & 0xff) as u8)?,
    })
}

/// The user-key part of an internal key (empty if it is shorter than a
/// trailer, so that comparisons of damaged keys never panic).
pub fn user_key(ikey: &[u8]) -> &[u8] {
    &ikey[..ikey.len().saturating_sub(TRAILER_LEN)]
}

/// The trailer of an internal key (0 if it is too short).
pub fn trailer(ikey: &[u8]) -> u64 {
    if ikey.len() < TRAILER_LEN {
        return 0;
    }
    u64::from_le_bytes(
        ikey[ikey.len() - TRAILER_LEN..]
            .try_into()
            .expect("8 bytes"),
    )
}

/// Compares two internal keys in index order.
pub fn compare_internal(a: &[u8], b: &[u8]) -> Ordering {
    compare_bytes(user_key(a), user_key(b)).then_with(|| trailer(b).cmp(&trailer(a)))
}

/// Keys longer than this are compared by `memcmp`.
const INLINE_COMPARE_MAX: usize = 64;

/// Bytewise order of `a` and `b`, the same as `a.cmp(b)`. Keys of up to 64
/// bytes — index keys are mostly short — are compared eight bytes at a
/// time in place, which saves a call to `memcmp` per comparison on the
/// hot paths of seeks and scans (block search, merging).
#[inline]
pub fn compare_bytes(a: &[u8], b: &[u8]) -> Ordering {
    let n = a.len().min(b.len());
    if n > INLINE_COMPARE_MAX {
        return a.cmp(b);
    }
    let (mut x, mut y) = (&a[..n], &b[..n]);
    while let (Some((xa, xr)), Some((ya, yr))) =
        (x.split_first_chunk::<8>(), y.split_first_chunk::<8>())
    {
        let (u, v) = (u64::from_be_bytes(*xa), u64::from_be_bytes(*ya));
        if u != v {
            return u.cmp(&v);
        }
        (x, y) = (xr, yr);
    }
    for (p, q) in x.iter().zip(y) {
        if p != q {
            return p.cmp(q);
        }
    }
    a.len().cmp(&b.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #[test]
        fn compare_bytes_is_bytewise_order(
            a in proptest::collection::vec(0u8..4, 0..80),
            b in proptest::collection::vec(0u8..4, 0..80),
        ) {
            proptest::prop_assert_eq!(compare_bytes(&a, &b), a.cmp(&b));
            let mut c = a.clone();
            c.extend_from_slice(&b);
            proptest::prop_assert_eq!(compare_bytes(&a, &c), a.cmp(&c));
            proptest::prop_assert_eq!(compare_bytes(&c, &a), c.cmp(&a));
        }
    }

    #[test]
    fn order_is_user_key_then_newest_first() {
        let a1 = internal_key(b"a", 1, ValueType::Value);
        let a2 = internal_key(b"a", 2, ValueType::Value);
        let b1 = internal_key(b"b", 1, ValueType::Deletion);
        assert_eq!(compare_internal(&a2, &a1), Ordering::Less);
        assert_eq!(compare_internal(&a1, &b1), Ordering::Less);
        assert_eq!(compare_internal(&seek_key(b"a", 2), &a2), Ordering::Less);
        assert_eq!(compare_internal(&seek_key(b"a", 1), &a2), Ordering::Greater);
        let p = parse_internal_key(&a2).unwrap();
        assert_eq!(
            (p.user_key, p.seq, p.vtype),
            (&b"a"[..], 2, ValueType::Value)
        );
        assert!(parse_internal_key(b"short").is_none());
    }
}
