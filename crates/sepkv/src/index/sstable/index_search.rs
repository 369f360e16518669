//! [`IndexSearch`]: the search of an open table's index block, decoded
//! once when the table opens.
//!
//! A seek or a lookup first finds, in the table's index block, the data
//! block that may hold its key. Searched in place, that is a binary search
//! over the block's restart array, and each probe reads a restart offset
//! and decodes the separator it points at: two cache lines in different
//! places of a block of tens of KiB, about twenty lines per search for a
//! 4 MiB table (~1,000 data blocks). Indexes are held in memory but, across
//! the tables and DTable segments of a database, not in the CPU's caches.
//!
//! At open, every separator's user key is reduced to one `u64`: the eight
//! bytes that follow the prefix all the table's separators share (zero
//! padded, read big-endian). Since every separator starts with that prefix
//! and they are sorted, the windows are sorted too, and a key's window
//! orders it against every separator whose window differs. A search is a
//! binary search over a flat array of 8 bytes per data block, and full
//! separators are decoded only for the entries whose window equals the
//! key's (usually none or one; a key that shares more than eight bytes
//! past the prefix with many separators falls back to a binary search of
//! the decoded separators among them).
//!
//! Invariants: one window per index entry, in index order, the index
//! written with one restart point per entry (as [`super::TableBuilder`]
//! writes it). An index that does not show this shape when decoded (an
//! entry off its restart point, a key shorter than a trailer, a separator
//! without the shared prefix, windows out of order, damage) gets no
//! `IndexSearch`, and its table searches the block as before, which reports
//! the damage where it is met.
//!
//! Thread-safety: immutable after `build`, `Send + Sync`.

use super::block::{Block, BlockIter};
use super::footer::BlockHandle;
use crate::index::key::{compare_internal, user_key};
use std::cmp::Ordering;
use std::sync::Arc;

/// The decoded search structure of one index block.
#[derive(Debug)]
pub(crate) struct IndexSearch {
    /// The bytes every separator's user key starts with.
    prefix: Box<[u8]>,
    /// Per index entry: the eight bytes of its user key after `prefix`
    /// (0 for the last entry, outside `body`), and its block handle packed
    /// ([`pack`]), side by side so that the search's last probe brings in
    /// the handle too.
    entries: Box<[(u64, u64)]>,
    /// The entries the windows order: all but the last. A table's last
    /// separator is a short successor of its last key (`"1"` after
    /// `"0000000000123456"`), which shares little with the others, so it
    /// is compared in full when a search passes every other entry.
    body: usize,
}

/// Bits of a packed handle holding the block size: blocks up to 16 MiB,
/// offsets up to 1 TiB (an index with larger ones is not decoded).
const SIZE_BITS: u32 = 24;

/// `handle` in one `u64`, when it fits.
fn pack(h: BlockHandle) -> Option<u64> {
    (h.size < 1 << SIZE_BITS && h.offset < 1 << (64 - SIZE_BITS))
        .then_some(h.offset << SIZE_BITS | h.size)
}

fn unpack(p: u64) -> BlockHandle {
    BlockHandle {
        offset: p >> SIZE_BITS,
        size: p & ((1 << SIZE_BITS) - 1),
    }
}

/// The eight bytes of `rest` (zero padded), big-endian: for strings that
/// follow one common prefix, `a < b` implies `window(a) <= window(b)`.
fn window(rest: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    let n = rest.len().min(8);
    w[..n].copy_from_slice(&rest[..n]);
    u64::from_be_bytes(w)
}

impl IndexSearch {
    /// Decodes `index` (an index block: internal-key separators, one
    /// restart point per entry). `None` when the block does not have that
    /// shape or is damaged; the caller then searches the block itself.
    pub(crate) fn build(index: &Arc<Block>) -> Option<IndexSearch> {
        let n = index.num_restarts();
        if n == 0 {
            return None;
        }
        let body = if n > 1 { n - 1 } else { n };
        let mut it = BlockIter::new(index.clone(), compare_internal);
        it.seek_to_entry(0);
        let first = user_key(it.key()).to_vec();
        it.seek_to_entry(body - 1);
        let last = user_key(it.key());
        if it.corruption().is_some() {
            return None;
        }
        let shared = first.iter().zip(last).take_while(|(a, b)| a == b).count();
        let prefix: Box<[u8]> = first[..shared].into();
        let mut entries: Vec<(u64, u64)> = Vec::with_capacity(n);
        it.seek_to_first();
        while it.valid() {
            let k = it.key();
            if it.restart_index() != entries.len() || k.len() < crate::index::key::TRAILER_LEN {
                return None;
            }
            let w = if entries.len() < body {
                let rest = user_key(k).strip_prefix(&prefix[..])?;
                window(rest)
            } else {
                0
            };
            if entries.len() < body && entries.last().is_some_and(|&(p, _)| p > w) {
                return None;
            }
            let handle = pack(BlockHandle::decode_exact(it.value())?)?;
            entries.push((w, handle));
            it.next();
        }
        if it.corruption().is_some() || entries.len() != n {
            return None;
        }
        Some(IndexSearch {
            prefix,
            entries: entries.into_boxed_slice(),
            body,
        })
    }

    /// Number of index entries (data blocks).
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The block handle of entry `i`, if there is one.
    pub(crate) fn handle(&self, i: usize) -> Option<BlockHandle> {
        self.entries.get(i).map(|&(_, h)| unpack(h))
    }

    /// The ordinal of the first entry whose separator is `>= target` (an
    /// internal key), `len()` when there is none: where [`BlockIter::seek`]
    /// over `index`, the block this was built from, would land. Separators
    /// are decoded from `index` only for entries whose window equals the
    /// target's; a damaged one is `Err` with the reason.
    pub(crate) fn find(&self, index: &Arc<Block>, target: &[u8]) -> Result<usize, String> {
        let at = self.find_in_body(index, target)?;
        if at < self.body || self.body == self.entries.len() {
            return Ok(at);
        }
        // Past every entry but the last: the last separator decides.
        let mut it = BlockIter::new(index.clone(), compare_internal);
        it.seek_to_entry(self.body);
        if !it.valid() {
            return Err(it.corruption().unwrap_or("index entry missing").to_string());
        }
        Ok(match compare_internal(it.key(), target) {
            Ordering::Less => self.entries.len(),
            _ => self.body,
        })
    }

    /// [`IndexSearch::find`] among the `body` entries: `body` when the
    /// target is above all of them.
    fn find_in_body(&self, index: &Arc<Block>, target: &[u8]) -> Result<usize, String> {
        let body = &self.entries[..self.body];
        let uk = user_key(target);
        let l = self.prefix.len();
        let head = &uk[..l.min(uk.len())];
        match head.cmp(&self.prefix[..head.len()]) {
            // Below every separator (a shorter key that is a prefix of the
            // shared one is below them too).
            Ordering::Less => return Ok(0),
            Ordering::Greater => return Ok(body.len()),
            Ordering::Equal if uk.len() < l => return Ok(0),
            Ordering::Equal => {}
        }
        let t = window(&uk[l..]);
        let mut lo = body.partition_point(|&(w, _)| w < t);
        let mut hi = lo + body[lo..].partition_point(|&(w, _)| w == t);
        if lo == hi {
            return Ok(lo);
        }
        // Entries before `lo` are below the target and from `hi` on above
        // it; between, the separators decide.
        let mut it = BlockIter::new(index.clone(), compare_internal);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            it.seek_to_entry(mid);
            if !it.valid() {
                return Err(it.corruption().unwrap_or("index entry missing").to_string());
            }
            if compare_internal(it.key(), target) == Ordering::Less {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    /// Bytes held in memory.
    pub(crate) fn size(&self) -> usize {
        self.prefix.len() + std::mem::size_of_val(&*self.entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::key::{internal_key, ValueType};
    use crate::index::sstable::block::BlockBuilder;
    use proptest::prelude::*;

    fn index_block(keys: &[Vec<u8>]) -> Arc<Block> {
        let mut b = BlockBuilder::new(1);
        for (i, k) in keys.iter().enumerate() {
            let h = BlockHandle {
                offset: 4096 * i as u64,
                size: 4000 + i as u64,
            };
            b.add(k, &h.encode());
        }
        Arc::new(Block::new(b.finish()).unwrap())
    }

    /// Sorted, distinct internal keys from `(user key, seq)` pairs.
    fn separators(raw: Vec<(Vec<u8>, u64)>) -> Vec<Vec<u8>> {
        let mut keys: Vec<Vec<u8>> = raw
            .into_iter()
            .map(|(u, s)| internal_key(&u, s, ValueType::Value))
            .collect();
        keys.sort_by(|a, b| compare_internal(a, b));
        keys.dedup();
        keys
    }

    /// The decoded search lands where the block's own search does.
    fn agrees(keys: &[Vec<u8>], targets: &[Vec<u8>]) -> Result<(), TestCaseError> {
        let block = index_block(keys);
        let search = IndexSearch::build(&block);
        prop_assert!(search.is_some(), "a well-formed index is decoded");
        let search = search.unwrap();
        for t in targets {
            let mut want = BlockIter::new(block.clone(), compare_internal);
            want.seek(t);
            let got = search.find(&block, t);
            prop_assert!(got.is_ok());
            let got = got.unwrap();
            if want.valid() {
                prop_assert_eq!(got, want.restart_index());
                let h = BlockHandle::decode_exact(want.value()).unwrap();
                prop_assert_eq!(search.handle(got), Some(h));
            } else {
                prop_assert_eq!(got, search.len());
                prop_assert_eq!(search.handle(got), None);
            }
        }
        Ok(())
    }

    /// Keys with a long shared prefix, keys equal in the eight bytes after
    /// it, user keys of several versions, and targets below, inside and
    /// above the range.
    #[test]
    fn finds_the_first_separator_not_below_the_target() {
        let mut raw = Vec::new();
        for i in 0..300u64 {
            raw.push((format!("user{i:012}").into_bytes(), 5));
            raw.push((format!("user{i:012}").into_bytes(), 9));
            // Equal in the window after the shared prefix, different later.
            raw.push((format!("user{:08}xx{i:04}", i / 50).into_bytes(), 1));
        }
        let keys = separators(raw);
        let mut targets = vec![
            internal_key(b"", 0, ValueType::Value),
            internal_key(b"use", 3, ValueType::Value),
            internal_key(b"user", 3, ValueType::Value),
            internal_key(b"userz", 3, ValueType::Value),
            internal_key(b"v", 3, ValueType::Value),
            b"short".to_vec(),
        ];
        for k in &keys {
            let uk = user_key(k);
            for s in [0, 5, 7, 9, 10, u64::MAX >> 8] {
                targets.push(internal_key(uk, s, ValueType::Value));
            }
            let mut longer = uk.to_vec();
            longer.push(0);
            targets.push(internal_key(&longer, 3, ValueType::Value));
        }
        agrees(&keys, &targets).unwrap();
    }

    proptest! {
        #[test]
        fn agrees_with_the_block_search(
            raw in proptest::collection::vec(
                (proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(0u8), Just(255u8)], 0..14), 0u64..4),
                1..80),
            prefix in proptest::collection::vec(any::<u8>(), 0..6),
            targets in proptest::collection::vec(
                (proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(0u8), Just(255u8)], 0..16), 0u64..5),
                1..40),
        ) {
            let with = |u: Vec<u8>| { let mut p = prefix.clone(); p.extend(u); p };
            let keys = separators(raw.into_iter().map(|(u, s)| (with(u), s)).collect());
            let mut ts: Vec<Vec<u8>> = targets.iter()
                .map(|(u, s)| internal_key(&with(u.clone()), *s, ValueType::Value)).collect();
            ts.extend(targets.iter().map(|(u, s)| internal_key(u, *s, ValueType::Value)));
            agrees(&keys, &ts)?;
        }
    }

    /// An index block not written one restart point per entry, or whose
    /// keys are not internal keys, is left to the block's own search.
    #[test]
    fn declines_other_shapes() {
        let keys = separators(
            (0..40u64)
                .map(|i| (format!("k{i:03}").into_bytes(), 1))
                .collect(),
        );
        let mut b = BlockBuilder::new(16);
        for k in &keys {
            b.add(k, b"h");
        }
        assert!(IndexSearch::build(&Arc::new(Block::new(b.finish()).unwrap())).is_none());
        let mut b = BlockBuilder::new(1);
        b.add(b"abc", b"h");
        assert!(IndexSearch::build(&Arc::new(Block::new(b.finish()).unwrap())).is_none());
        let empty = Arc::new(Block::new(BlockBuilder::new(1).finish()).unwrap());
        assert!(IndexSearch::build(&empty).is_none());
    }
}
