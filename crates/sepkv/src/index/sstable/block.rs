//! Blocks: the unit of I/O, checksumming and caching of an SSTable.
//!
//! A block is a sorted run of `(key, value)` entries with prefix-compressed
//! keys, followed by an array of restart points (see the format diagram in
//! the parent module). [`BlockBuilder`] produces the contents; the trailer
//! (compression type and masked CRC-32C) is added by [`block_trailer`] and
//! checked by [`check_trailer`]. [`Block`] is the decoded, immutable form held
//! in memory and shared through `Arc` between the block cache and any number
//! of iterators; [`BlockIter`] is a cursor over one block.
//!
//! Invariants checked when a [`Block`] is built from bytes: the restart count
//! fits the block, restart offsets are strictly increasing, the first one is
//! 0 and all lie inside the entry region, and a block has no restart points
//! exactly when it has no entries. Entries are decoded lazily; any malformed
//! entry (bad varint, shared prefix longer than the previous key, lengths
//! running past the entry region, a restart entry with a shared prefix) makes
//! the iterator invalid with a reason available from [`BlockIter::corruption`].
//! Nothing in this module panics on any byte string.
//!
//! Thread-safety: [`Block`] is immutable and `Send + Sync`; a [`BlockIter`]
//! is used by one thread at a time.

use crate::format::checksum;
use crate::format::coding::{get_varint32, put_fixed32, put_varint32};
use std::cmp::Ordering;
use std::sync::Arc;

/// Bytes of the trailer after every block: compression type and masked CRC.
pub(crate) const BLOCK_TRAILER_LEN: usize = 5;

/// The only compression type of format version 1: none.
pub(crate) const NO_COMPRESSION: u8 = 0;

/// A key comparator.
pub(crate) type Cmp = fn(&[u8], &[u8]) -> Ordering;

/// Builds the trailer of a block whose contents are `contents`.
pub(crate) fn block_trailer(contents: &[u8]) -> [u8; BLOCK_TRAILER_LEN] {
    let crc = checksum::mask(checksum::crc_parts(&[contents, &[NO_COMPRESSION]]));
    let c = crc.to_le_bytes();
    [NO_COMPRESSION, c[0], c[1], c[2], c[3]]
}

/// Checks the trailer of `contents`; the error is the reason of the
/// corruption.
pub(crate) fn check_trailer(contents: &[u8], trailer: &[u8]) -> Result<(), String> {
    let [ty, c0, c1, c2, c3] = match <[u8; BLOCK_TRAILER_LEN]>::try_from(trailer) {
        Ok(t) => t,
        Err(_) => return Err("truncated block trailer".to_string()),
    };
    let stored = checksum::unmask(u32::from_le_bytes([c0, c1, c2, c3]));
    let actual = checksum::crc_parts(&[contents, &[ty]]);
    if stored != actual {
        return Err(format!(
            "block checksum mismatch (stored {stored:#010x}, computed {actual:#010x})"
        ));
    }
    if ty != NO_COMPRESSION {
        return Err(format!("unknown block compression type {ty}"));
    }
    Ok(())
}

/// Builds the contents of one block.
#[derive(Debug)]
pub(crate) struct BlockBuilder {
    buf: Vec<u8>,
    restarts: Vec<u32>,
    /// Entries added since the last restart point.
    counter: usize,
    restart_interval: usize,
    last_key: Vec<u8>,
}

impl BlockBuilder {
    /// A builder placing a restart point every `restart_interval` entries
    /// (0 is taken as 1).
    pub(crate) fn new(restart_interval: usize) -> Self {
        BlockBuilder {
            buf: Vec::new(),
            restarts: Vec::new(),
            counter: 0,
            restart_interval: restart_interval.max(1),
            last_key: Vec::new(),
        }
    }

    /// True when no entry was added since the last `finish`.
    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty() && self.restarts.is_empty()
    }

    /// Size of the block `finish` would produce now (without trailer).
    pub(crate) fn estimated_size(&self) -> usize {
        self.buf.len() + 4 * self.restarts.len() + 4
    }

    /// An upper bound of [`Self::estimated_size`] once an entry of a
    /// `key_len`-byte key and a `value_len`-byte value is added (no prefix
    /// shared, a new restart point, three 5-byte varints).
    pub(crate) fn size_with(&self, key_len: usize, value_len: usize) -> usize {
        self.estimated_size() + 15 + key_len + value_len + 4
    }

    /// Appends an entry. Keys must be added in increasing order, and the
    /// block must stay below 4 GiB (callers bound key and value sizes).
    pub(crate) fn add(&mut self, key: &[u8], value: &[u8]) {
        let shared = if self.restarts.is_empty() || self.counter >= self.restart_interval {
            self.restarts.push(self.buf.len() as u32);
            self.counter = 0;
            0
        } else {
            self.last_key
                .iter()
                .zip(key)
                .take_while(|(a, b)| a == b)
                .count()
        };
        let delta = &key[shared..];
        put_varint32(&mut self.buf, shared as u32);
        put_varint32(&mut self.buf, delta.len() as u32);
        put_varint32(&mut self.buf, value.len() as u32);
        self.buf.extend_from_slice(delta);
        self.buf.extend_from_slice(value);
        self.last_key.truncate(shared);
        self.last_key.extend_from_slice(delta);
        self.counter += 1;
    }

    /// Returns the finished block contents and resets the builder.
    pub(crate) fn finish(&mut self) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.buf);
        for &r in &self.restarts {
            put_fixed32(&mut out, r);
        }
        put_fixed32(&mut out, self.restarts.len() as u32);
        self.restarts.clear();
        self.counter = 0;
        self.last_key.clear();
        out
    }
}

/// Where a block's contents live: a buffer of its own (read with a system
/// call, or built in memory), or a range of a mapped table file
/// ([`Options::mmap_reads`](crate::Options::mmap_reads)), used in place.
#[derive(Debug)]
pub(crate) enum BlockBytes {
    /// An owned buffer.
    Heap(Vec<u8>),
    /// Bytes `[start, start + len)` of a mapping.
    Mapped {
        map: Arc<crate::fs::Mapping>,
        start: usize,
        len: usize,
    },
}

impl std::ops::Deref for BlockBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            BlockBytes::Heap(v) => v,
            // The range was checked against the mapping when the value was
            // made; an empty slice would read as a corrupt block, never as
            // data.
            BlockBytes::Mapped { map, start, len } => map
                .bytes()
                .get(*start..start.saturating_add(*len))
                .unwrap_or(&[]),
        }
    }
}

/// A decoded, immutable block (contents without trailer).
#[derive(Debug)]
pub(crate) struct Block {
    data: BlockBytes,
    /// Offset of the restart array = end of the entry region.
    restarts_offset: usize,
    num_restarts: usize,
}

impl Block {
    /// Validates the restart array of `data`; the error is the reason of the
    /// corruption.
    pub(crate) fn new(data: Vec<u8>) -> Result<Block, String> {
        Block::from_bytes(BlockBytes::Heap(data))
    }

    /// [`Block::new`] over contents that may live in a mapping.
    pub(crate) fn from_bytes(data: BlockBytes) -> Result<Block, String> {
        let len = data.len();
        let Some(count_bytes) = len.checked_sub(4).and_then(|p| data.get(p..)) else {
            return Err(format!(
                "block of {len} bytes is too short for a restart count"
            ));
        };
        let mut cb = count_bytes;
        let n = crate::format::coding::get_fixed32(&mut cb).unwrap_or(u32::MAX) as usize;
        let max = (len - 4) / 4;
        if n > max {
            return Err(format!(
                "restart count {n} out of range for a block of {len} bytes"
            ));
        }
        let block = Block {
            restarts_offset: len - 4 - 4 * n,
            num_restarts: n,
            data,
        };
        if (n == 0) != (block.restarts_offset == 0) {
            return Err(format!(
                "block has {n} restart points for {} bytes of entries",
                block.restarts_offset
            ));
        }
        let mut prev = None;
        for i in 0..n {
            let r = block.restart(i);
            let ok = match prev {
                None => r == 0,
                Some(p) => r > p,
            } && r < block.restarts_offset;
            if !ok {
                return Err(format!("restart point {i} at {r} out of range"));
            }
            prev = Some(r);
        }
        Ok(block)
    }

    /// Bytes of the block contents.
    pub(crate) fn size(&self) -> usize {
        self.data.len()
    }

    /// Memory charged for the block in the cache.
    pub(crate) fn charge(&self) -> usize {
        self.data.len() + std::mem::size_of::<Block>()
    }

    /// Number of restart points (in a block written with restart
    /// interval 1, such as an index block, its number of entries).
    pub(crate) fn num_restarts(&self) -> usize {
        self.num_restarts
    }

    /// True when the contents are used in place from a mapped file.
    #[cfg(test)]
    pub(crate) fn is_mapped(&self) -> bool {
        matches!(self.data, BlockBytes::Mapped { .. })
    }

    /// Offset of restart point `i` (validated in `new`).
    fn restart(&self, i: usize) -> usize {
        let p = self.restarts_offset + 4 * i;
        match self.data.get(p..p + 4) {
            Some(&[a, b, c, d]) => u32::from_le_bytes([a, b, c, d]) as usize,
            _ => self.restarts_offset,
        }
    }
}

/// Header of one entry: `(shared, non_shared, value_len, offset of the key
/// delta)`.
fn decode_entry(data: &[u8], offset: usize, limit: usize) -> Option<(usize, usize, usize, usize)> {
    let region = data.get(offset..limit)?;
    // The common case: three one-byte lengths (LevelDB's `DecodeEntry`).
    if let [a, b, c, ..] = *region {
        if (a | b | c) < 0x80 {
            let (shared, non_shared, value_len) = (a as usize, b as usize, c as usize);
            if non_shared + value_len > region.len() - 3 {
                return None;
            }
            return Some((shared, non_shared, value_len, offset + 3));
        }
    }
    let mut s = region;
    let shared = get_varint32(&mut s)? as usize;
    let non_shared = get_varint32(&mut s)? as usize;
    let value_len = get_varint32(&mut s)? as usize;
    if non_shared.checked_add(value_len)? > s.len() {
        return None;
    }
    Some((
        shared,
        non_shared,
        value_len,
        offset + (region.len() - s.len()),
    ))
}

/// A cursor over the entries of one block.
pub(crate) struct BlockIter {
    block: Arc<Block>,
    cmp: Cmp,
    /// Offset of the current entry; `restarts_offset` when invalid.
    current: usize,
    /// Offset just past the current entry.
    next: usize,
    /// Index of the restart point at or before `current`.
    restart_index: usize,
    key: Vec<u8>,
    value: (usize, usize),
    err: Option<String>,
}

impl BlockIter {
    /// An unpositioned iterator over `block` ordered by `cmp`.
    pub(crate) fn new(block: Arc<Block>, cmp: Cmp) -> Self {
        let end = block.restarts_offset;
        BlockIter {
            current: end,
            next: end,
            restart_index: block.num_restarts,
            block,
            cmp,
            key: Vec::new(),
            value: (0, 0),
            err: None,
        }
    }

    /// Index of the restart point at or before the current entry: in a
    /// block written with restart interval 1 (index blocks), the current
    /// entry's ordinal.
    pub(crate) fn restart_index(&self) -> usize {
        self.restart_index
    }

    /// True when positioned at an entry.
    pub(crate) fn valid(&self) -> bool {
        self.err.is_none() && self.current < self.block.restarts_offset
    }

    /// Why the block was found malformed, if it was.
    pub(crate) fn corruption(&self) -> Option<&str> {
        self.err.as_deref()
    }

    /// Key of the current entry. Requires `valid()`.
    pub(crate) fn key(&self) -> &[u8] {
        &self.key
    }

    /// Value of the current entry. Requires `valid()`.
    pub(crate) fn value(&self) -> &[u8] {
        self.block
            .data
            .get(self.value.0..self.value.1)
            .unwrap_or(&[])
    }

    fn invalidate(&mut self) {
        self.current = self.block.restarts_offset;
        self.next = self.block.restarts_offset;
        self.restart_index = self.block.num_restarts;
        self.key.clear();
        self.value = (0, 0);
    }

    fn corrupt(&mut self, reason: String) {
        if self.err.is_none() {
            self.err = Some(reason);
        }
        self.invalidate();
    }

    fn seek_to_restart(&mut self, i: usize) {
        self.key.clear();
        self.restart_index = i;
        self.next = self.block.restart(i);
    }

    /// Decodes the entry at `self.next`; false at the end or on corruption.
    fn parse_next(&mut self) -> bool {
        if self.err.is_some() {
            return false;
        }
        let limit = self.block.restarts_offset;
        let offset = self.next;
        if offset >= limit {
            self.invalidate();
            return false;
        }
        let Some((shared, non_shared, value_len, delta_at)) =
            decode_entry(&self.block.data, offset, limit)
        else {
            self.corrupt(format!("malformed block entry at block offset {offset}"));
            return false;
        };
        if shared > self.key.len() {
            self.corrupt(format!(
                "block entry at block offset {offset} shares {shared} bytes of a {}-byte key",
                self.key.len()
            ));
            return false;
        }
        let Some(delta) = self.block.data.get(delta_at..delta_at + non_shared) else {
            self.corrupt(format!(
                "block entry at block offset {offset} runs past the block"
            ));
            return false;
        };
        self.key.truncate(shared);
        self.key.extend_from_slice(delta);
        let vstart = delta_at + non_shared;
        self.value = (vstart, vstart + value_len);
        self.current = offset;
        self.next = vstart + value_len;
        while self.restart_index + 1 < self.block.num_restarts
            && self.block.restart(self.restart_index + 1) <= self.current
        {
            self.restart_index += 1;
        }
        true
    }

    /// Key stored at restart point `i` (which must share nothing).
    fn restart_key(&self, i: usize) -> Result<&[u8], String> {
        let offset = self.block.restart(i);
        let (shared, non_shared, _, delta_at) =
            decode_entry(&self.block.data, offset, self.block.restarts_offset)
                .ok_or_else(|| format!("malformed block entry at block offset {offset}"))?;
        if shared != 0 {
            return Err(format!(
                "restart entry at block offset {offset} has a shared prefix"
            ));
        }
        self.block
            .data
            .get(delta_at..delta_at + non_shared)
            .ok_or_else(|| format!("block entry at block offset {offset} runs past the block"))
    }

    /// Positions at the first entry.
    pub(crate) fn seek_to_first(&mut self) {
        if self.err.is_some() || self.block.num_restarts == 0 {
            self.invalidate();
            return;
        }
        self.seek_to_restart(0);
        self.parse_next();
    }

    /// Positions at the last entry.
    pub(crate) fn seek_to_last(&mut self) {
        if self.err.is_some() || self.block.num_restarts == 0 {
            self.invalidate();
            return;
        }
        self.seek_to_restart(self.block.num_restarts - 1);
        while self.parse_next() && self.next < self.block.restarts_offset {}
    }

    /// Positions at entry `i` of a block whose every entry is a restart
    /// point (restart interval 1, as index blocks are written); past the
    /// last entry the iterator becomes invalid. One entry is decoded.
    pub(crate) fn seek_to_entry(&mut self, i: usize) {
        if self.err.is_some() || i >= self.block.num_restarts {
            self.invalidate();
            return;
        }
        self.seek_to_restart(i);
        self.parse_next();
    }

    /// Positions at the first entry whose key is `>= target`.
    pub(crate) fn seek(&mut self, target: &[u8]) {
        if self.err.is_some() || self.block.num_restarts == 0 {
            self.invalidate();
            return;
        }
        // Last restart point whose key is < target (or 0).
        let (mut lo, mut hi) = (0, self.block.num_restarts - 1);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            match self.restart_key(mid) {
                Ok(k) if (self.cmp)(k, target) == Ordering::Less => lo = mid,
                Ok(_) => hi = mid - 1,
                Err(reason) => {
                    self.corrupt(reason);
                    return;
                }
            }
        }
        self.seek_to_restart(lo);
        while self.parse_next() {
            if (self.cmp)(&self.key, target) != Ordering::Less {
                return;
            }
        }
    }

    /// Moves to the next entry. Requires `valid()`.
    pub(crate) fn next(&mut self) {
        if self.valid() {
            self.parse_next();
        }
    }

    /// Moves to the previous entry. Requires `valid()`.
    pub(crate) fn prev(&mut self) {
        if !self.valid() {
            return;
        }
        let original = self.current;
        let mut ri = self.restart_index;
        while self.block.restart(ri) >= original {
            if ri == 0 {
                self.invalidate();
                return;
            }
            ri -= 1;
        }
        self.seek_to_restart(ri);
        while self.parse_next() && self.next < original {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bytewise(a: &[u8], b: &[u8]) -> Ordering {
        a.cmp(b)
    }

    fn build(entries: &[(Vec<u8>, Vec<u8>)], interval: usize) -> Arc<Block> {
        let mut b = BlockBuilder::new(interval);
        for (k, v) in entries {
            b.add(k, v);
        }
        let est = b.estimated_size();
        let data = b.finish();
        assert_eq!(est, data.len());
        Arc::new(Block::new(data).expect("valid block"))
    }

    fn sorted_entries(keys: Vec<Vec<u8>>) -> Vec<(Vec<u8>, Vec<u8>)> {
        let set: std::collections::BTreeSet<Vec<u8>> = keys.into_iter().collect();
        set.into_iter()
            .enumerate()
            .map(|(i, k)| (k, format!("v{i}").into_bytes()))
            .collect()
    }

    #[test]
    fn empty_block_has_no_entries() {
        let block = build(&[], 16);
        assert_eq!(block.size(), 4);
        let mut it = BlockIter::new(block, bytewise);
        it.seek_to_first();
        assert!(!it.valid());
        it.seek_to_last();
        assert!(!it.valid());
        it.seek(b"a");
        assert!(!it.valid());
        assert!(it.corruption().is_none());
    }

    /// Entries whose lengths need one varint byte and those that need
    /// two (127 and 128 bytes and beyond) decode alike, in both
    /// directions; an entry whose lengths run past the block is damage.
    #[test]
    fn one_and_two_byte_lengths_decode_alike() {
        let entries: Vec<(Vec<u8>, Vec<u8>)> = (0..64usize)
            .map(|i| {
                let mut k = format!("{i:03}").into_bytes();
                k.resize(3 + (i * 7) % 200, b'k');
                (k, vec![b'v'; (i * 13) % 300])
            })
            .collect();
        let mut sorted = entries.clone();
        sorted.sort();
        let block = build(&sorted, 4);
        let mut it = BlockIter::new(block.clone(), bytewise);
        it.seek_to_first();
        for (k, v) in &sorted {
            assert_eq!((it.key(), it.value()), (&k[..], &v[..]));
            it.next();
        }
        assert!(!it.valid() && it.corruption().is_none());
        it.seek_to_last();
        for (k, _) in sorted.iter().rev() {
            assert_eq!(it.key(), &k[..]);
            it.prev();
        }
        assert!(!it.valid() && it.corruption().is_none());

        // A first entry claiming more value bytes than the block holds.
        let mut data = build(&[(b"a".to_vec(), b"b".to_vec())], 1).data.to_vec();
        data[2] = 0x7f;
        let mut it = BlockIter::new(Arc::new(Block::new(data).unwrap()), bytewise);
        it.seek_to_first();
        assert!(!it.valid());
        assert!(it.corruption().is_some());
    }

    #[test]
    fn trailer_detects_damage() {
        let contents = b"some block contents".to_vec();
        let t = block_trailer(&contents);
        assert!(check_trailer(&contents, &t).is_ok());
        let mut bad = contents.clone();
        bad[3] ^= 0x10;
        assert!(check_trailer(&bad, &t).is_err());
        let mut t2 = t;
        t2[0] = 1;
        assert!(check_trailer(&contents, &t2).is_err());
        assert!(check_trailer(&contents, &t[..4]).is_err());
    }

    #[test]
    fn rejects_bad_restart_arrays() {
        assert!(Block::new(vec![]).is_err());
        assert!(Block::new(vec![1, 0, 0]).is_err());
        // Count larger than the block.
        assert!(Block::new(vec![0, 0, 0, 0, 9, 0, 0, 0]).is_err());
        // Entries but no restart point.
        assert!(Block::new(vec![0, 0, 0, 0, 0, 0, 0]).is_err());
        // First restart not at 0.
        assert!(Block::new(vec![0, 1, 1, 0, 0, 0, 1, 0, 0, 0]).is_err());
        // The same block with its restart at 0 is fine.
        assert!(Block::new(vec![0, 1, 0, 0, 0, 0, 1, 0, 0, 0]).is_ok());
    }

    proptest! {
        #[test]
        fn matches_model(
            keys in proptest::collection::vec(proptest::collection::vec(0u8..4, 0..6), 0..80),
            interval in 1usize..6,
            targets in proptest::collection::vec(proptest::collection::vec(0u8..4, 0..6), 1..10),
        ) {
            let entries = sorted_entries(keys);
            let block = build(&entries, interval);
            let mut it = BlockIter::new(block, bytewise);
            // Forward.
            it.seek_to_first();
            let mut got = Vec::new();
            while it.valid() {
                got.push((it.key().to_vec(), it.value().to_vec()));
                it.next();
            }
            prop_assert_eq!(&got, &entries);
            // Backward.
            it.seek_to_last();
            let mut back = Vec::new();
            while it.valid() {
                back.push((it.key().to_vec(), it.value().to_vec()));
                it.prev();
            }
            back.reverse();
            prop_assert_eq!(&back, &entries);
            // Seeks, then one step each way.
            for t in &targets {
                let pos = entries.partition_point(|(k, _)| k < t);
                it.seek(t);
                prop_assert_eq!(it.valid(), pos < entries.len());
                if pos < entries.len() {
                    prop_assert_eq!(it.key(), &entries[pos].0[..]);
                    it.prev();
                    if pos == 0 {
                        prop_assert!(!it.valid());
                    } else {
                        prop_assert_eq!(it.key(), &entries[pos - 1].0[..]);
                        it.next();
                        prop_assert_eq!(it.key(), &entries[pos].0[..]);
                        it.next();
                        prop_assert_eq!(it.valid(), pos + 1 < entries.len());
                    }
                }
            }
            prop_assert!(it.corruption().is_none());
        }

        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200),
                                    target in proptest::collection::vec(any::<u8>(), 0..8)) {
            exercise(data, &target);
        }

        #[test]
        fn bit_flips_never_panic(
            keys in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..12), 1..40),
            interval in 1usize..5,
            flips in proptest::collection::vec(any::<(usize, u8)>(), 1..4),
            target in proptest::collection::vec(any::<u8>(), 0..8),
        ) {
            let entries = sorted_entries(keys);
            let mut b = BlockBuilder::new(interval);
            for (k, v) in &entries {
                b.add(k, v);
            }
            let mut data = b.finish();
            let len = data.len();
            for (pos, bit) in flips {
                data[pos % len] ^= 1 << (bit % 8);
            }
            exercise(data, &target);
        }
    }

    /// Drives every operation over possibly malformed bytes; only checks
    /// that nothing panics and that iteration terminates.
    fn exercise(data: Vec<u8>, target: &[u8]) {
        let Ok(block) = Block::new(data) else {
            return;
        };
        let block = Arc::new(block);
        let mut it = BlockIter::new(block.clone(), bytewise);
        it.seek_to_first();
        let mut n = 0;
        while it.valid() && n < 10_000 {
            let _ = (it.key(), it.value());
            it.next();
            n += 1;
        }
        it.seek_to_last();
        n = 0;
        while it.valid() && n < 10_000 {
            let _ = (it.key(), it.value());
            it.prev();
            n += 1;
        }
        let mut it = BlockIter::new(block, bytewise);
        it.seek(target);
        if it.valid() {
            it.prev();
            it.next();
            it.next();
        }
    }
}
