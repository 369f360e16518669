//! Key ranges for scans, iterators and range compaction.
//!
//! Every Rust range of byte-like keys is a [`KeyRange`]: `..` (all keys),
//! `"a".."m"`, `"a"..`, `..="m"`, `b"a".to_vec()..=b"m".to_vec()`, and a
//! pair of [`Bound`]s. Keys are anything `AsRef<[u8]>` (`&str`, `String`,
//! `&[u8]`, `Vec<u8>`, byte-string literals of equal length). Keys order
//! bytewise, so the key right after `k` is `k` followed by a zero byte:
//! that is how an inclusive end or an exclusive start becomes the
//! half-open form `[lower, upper)` the iterators work with, exactly.

use crate::error::{Error, Result};
use std::ops::{Bound, Range, RangeFrom, RangeFull, RangeInclusive, RangeTo, RangeToInclusive};

/// A range of keys (see the module docs). Implemented for every standard
/// range type over keys that are `AsRef<[u8]>`.
///
/// # Examples
/// ```
/// # let dir = std::env::temp_dir().join(format!("sepkv-doc-range-{}", std::process::id()));
/// # let _ = std::fs::remove_dir_all(&dir); // a leftover of an earlier run
/// let db = sepkv::Db::open(&dir, sepkv::Options::default())?;
/// for k in ["a", "b", "c", "d"] {
///     db.put(k, "v")?;
/// }
/// let keys = |r: sepkv::Scan| r.map(|e| e.unwrap().0).collect::<Vec<_>>();
/// assert_eq!(keys(db.scan(.., false)?).len(), 4);
/// assert_eq!(keys(db.scan("b".."d", false)?), [b"b".to_vec(), b"c".to_vec()]);
/// assert_eq!(keys(db.scan("b"..="d", false)?).len(), 3);
/// assert_eq!(keys(db.scan(..="b", true)?), [b"b".to_vec(), b"a".to_vec()]);
/// # drop(db);
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # Ok::<(), sepkv::Error>(())
/// ```
pub trait KeyRange {
    /// The range as `[lower, upper)`; `None` is unbounded.
    fn half_open(&self) -> (Option<Vec<u8>>, Option<Vec<u8>>);

    /// The range as `[begin, end]` for range compaction, which may cover a
    /// little more than asked: an exclusive end `e` becomes the inclusive
    /// end `e` (no key before `e` can be named exactly). `None` is
    /// unbounded.
    fn closed(&self) -> (Option<Vec<u8>>, Option<Vec<u8>>);
}

/// The smallest key after `k` in bytewise order.
fn successor(k: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(k.len() + 1);
    v.extend_from_slice(k);
    v.push(0);
    v
}

fn lower_of<K: AsRef<[u8]>>(b: Bound<&K>) -> Option<Vec<u8>> {
    match b {
        Bound::Included(k) => Some(k.as_ref().to_vec()),
        Bound::Excluded(k) => Some(successor(k.as_ref())),
        Bound::Unbounded => None,
    }
}

fn upper_half_open<K: AsRef<[u8]>>(b: Bound<&K>) -> Option<Vec<u8>> {
    match b {
        Bound::Included(k) => Some(successor(k.as_ref())),
        Bound::Excluded(k) => Some(k.as_ref().to_vec()),
        Bound::Unbounded => None,
    }
}

fn upper_closed<K: AsRef<[u8]>>(b: Bound<&K>) -> Option<Vec<u8>> {
    match b {
        Bound::Included(k) | Bound::Excluded(k) => Some(k.as_ref().to_vec()),
        Bound::Unbounded => None,
    }
}

macro_rules! key_range {
    ($($t:ty),*) => {$(
        impl<K: AsRef<[u8]>> KeyRange for $t {
            fn half_open(&self) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
                use std::ops::RangeBounds;
                (lower_of(self.start_bound()), upper_half_open(self.end_bound()))
            }
            fn closed(&self) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
                use std::ops::RangeBounds;
                (lower_of(self.start_bound()), upper_closed(self.end_bound()))
            }
        }
    )*};
}

key_range!(
    Range<K>,
    RangeFrom<K>,
    RangeTo<K>,
    RangeInclusive<K>,
    RangeToInclusive<K>,
    (Bound<K>, Bound<K>)
);

impl KeyRange for RangeFull {
    fn half_open(&self) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
        (None, None)
    }
    fn closed(&self) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
        (None, None)
    }
}

impl<R: KeyRange + ?Sized> KeyRange for &R {
    fn half_open(&self) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
        (**self).half_open()
    }
    fn closed(&self) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
        (**self).closed()
    }
}

/// `InvalidArgument` when the range starts after it ends.
pub(crate) fn check_order(lower: Option<&[u8]>, upper: Option<&[u8]>) -> Result<()> {
    if let (Some(l), Some(u)) = (lower, upper) {
        if l > u {
            return Err(Error::InvalidArgument(
                "range start is after range end".into(),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ho(r: impl KeyRange) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
        r.half_open()
    }

    #[test]
    fn every_range_form_maps_exactly() {
        let v = |s: &[u8]| Some(s.to_vec());
        assert_eq!(ho(..), (None, None));
        assert_eq!(ho("a".."c"), (v(b"a"), v(b"c")));
        assert_eq!(ho("a"..="c"), (v(b"a"), v(b"c\0")));
        assert_eq!(ho(b"a".to_vec()..), (v(b"a"), None));
        assert_eq!(ho(..&b"c"[..]), (None, v(b"c")));
        assert_eq!(ho(..=String::from("c")), (None, v(b"c\0")));
        assert_eq!(
            ho((Bound::Excluded("a"), Bound::Included("c"))),
            (v(b"a\0"), v(b"c\0"))
        );
        assert_eq!(("a".."c").closed(), (v(b"a"), v(b"c")));
        assert_eq!(("a"..="c").closed(), (v(b"a"), v(b"c")));
        assert_eq!((..).closed(), (None, None));
    }

    #[test]
    fn order_is_checked() {
        assert!(check_order(Some(b"b"), Some(b"a")).is_err());
        assert!(check_order(Some(b"a"), Some(b"a")).is_ok());
        assert!(check_order(None, Some(b"a")).is_ok());
    }
}
