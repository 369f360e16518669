//! The memtable: recent writes, in internal-key order, in memory.
//!
//! A memtable receives every write after it is logged to the WAL. When it
//! reaches `Options::write_buffer_size` it is frozen (becoming the
//! *immutable memtable*) and flushed to a level-0 SSTable by the background
//! thread. Reads may run concurrently with the single writer (see
//! [`super::skiplist`]).
//!
//! Every memtable carries a whole-key Bloom filter (`KeyFilter`), as
//! RocksDB's `memtable_whole_key_filtering` does: a point lookup of a key
//! the memtable does not hold — most lookups once the data outgrows one
//! write buffer, and nearly all of GC's compare-and-set lookups — costs a
//! hash and one cache line instead of a skiplist descent.
//!
//! # Cost of an insert
//!
//! [`MemTable::add`] hashes the user key into the filter and links one
//! skiplist node holding the user key, its trailer and the value (for the
//! value-separated presets, a varint-coded value pointer of about 8
//! bytes): about 51 bytes per entry with the tower, so an 8 MiB write
//! buffer of 16-byte keys holds about 165,000 entries, and a search of it
//! compares about 31 keys. Measured with the
//! `memtable_insert` example (`cargo run --release -p sepkv --example
//! memtable_insert -- --keys decimal|binary --order random|sorted`, one
//! 8 MiB memtable, instructions and simulated cache misses of the inserts
//! alone under `valgrind --tool=callgrind --cache-sim=yes
//! --toggle-collect='*fill_one*'`), per insert, before and after the
//! in-place comparison, the splice and the prefetch of
//! [`super::skiplist`]:
//!
//! | keys | instructions | L1 data read misses | CPU time, after ÷ before |
//! | --- | ---: | ---: | ---: |
//! | random, the bench harness's (`%016d`) | 2,093 → 1,519 | 28.5 → 28.5 | 0.76–1.07 (median 0.86) |
//! | random, 16 random bytes | 1,844 → 1,374 | 25.8 → 25.8 | 0.80–0.98 (median 0.84) |
//! | sorted | 1,742 → 681 | 2.2 → 2.2 | 0.56 |
//!
//! (CPU time: the median of 7 rounds, builds alternating, five passes
//! for random keys and two for sorted ones, on a machine shared with other
//! builds at load average 8–10.) A random insert misses the cache about
//! once per node it compares — the key sits in the node's own cache line,
//! so a comparison costs one miss, not two — and those misses, which the
//! changes leave as they were, bound what fewer instructions can save:
//! 27 % fewer instructions took about 15 % off the CPU time of a random
//! insert. A sorted run of inserts, which the splice starts near the
//! previous insert, runs 1.8× faster.

use super::iter::InternalIterator;
use super::key::{pack_trailer, parse_internal_key, seek_key, SeqNum, ValueType};
use super::skiplist::{Finger, SkipIter, SkipList};
use super::sstable::key_hash;
use crate::error::Result;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Default write buffer a memtable's filter is sized for (bytes).
const DEFAULT_BUFFER: usize = 8 << 20;

/// Probes per key; each sets or tests one bit of the key's 512-bit block.
const FILTER_PROBES: u32 = 6;

/// A blocked whole-key Bloom filter over the user keys a memtable holds.
///
/// Sized at one bit per 4 bytes of write buffer (a power of two, 4 KiB to
/// 16 MiB of bits; 256 KiB for the default 8 MiB buffer): a memtable of
/// small pointer entries then has about 20 bits per key, and a false
/// positive rate near 1 % with [`FILTER_PROBES`] probes. Each key's probes
/// fall in one 64-byte block, so a test touches one cache line.
///
/// Bits are set with relaxed atomics before the entry is linked into the
/// skiplist, and a writer publishes its sequence number (release) only
/// after its inserts: a reader that acquired a sequence number sees the
/// bits of every entry at or below it.
struct KeyFilter {
    words: Box<[AtomicU64]>,
    /// Number of 512-bit blocks minus one (a power of two minus one).
    block_mask: u64,
}

impl KeyFilter {
    fn for_buffer(buffer_bytes: usize) -> KeyFilter {
        let bits = (buffer_bytes / 4)
            .clamp(1 << 15, 1 << 27)
            .next_power_of_two();
        let words = (0..bits / 64).map(|_| AtomicU64::new(0)).collect();
        KeyFilter {
            words,
            block_mask: (bits / 512) as u64 - 1,
        }
    }

    /// The first word of the block of a key whose [`key_hash`] is `h`.
    fn block(&self, h: u64) -> usize {
        (((h.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) & self.block_mask) * 8) as usize
    }

    fn add(&self, h: u64) {
        let base = self.block(h);
        for i in 0..FILTER_PROBES {
            let bit = (h >> (i * 9)) & 511;
            self.words[base + (bit >> 6) as usize].fetch_or(1 << (bit & 63), Ordering::Relaxed);
        }
    }

    fn may_contain(&self, h: u64) -> bool {
        let base = self.block(h);
        (0..FILTER_PROBES).all(|i| {
            let bit = (h >> (i * 9)) & 511;
            self.words[base + (bit >> 6) as usize].load(Ordering::Relaxed) & (1 << (bit & 63)) != 0
        })
    }
}

/// The skiplist borrowed for one lookup (no reference count touched).
struct Borrowed<'a>(&'a SkipList);

impl AsRef<SkipList> for Borrowed<'_> {
    fn as_ref(&self) -> &SkipList {
        self.0
    }
}

/// What a memtable knows of a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// Not in this memtable: look further down.
    NotFound,
    /// The newest visible version is a tombstone.
    Deleted,
    /// The newest visible version, with its type (`Value` or `Pointer`).
    Found(ValueType, Vec<u8>),
}

/// A memtable.
pub struct MemTable {
    list: SkipList,
    filter: KeyFilter,
    max_seq: AtomicU64,
    /// Smallest sequence number added (`u64::MAX` when empty).
    min_seq: AtomicU64,
}

impl AsRef<SkipList> for Arc<MemTable> {
    fn as_ref(&self) -> &SkipList {
        &self.list
    }
}

impl Default for MemTable {
    fn default() -> Self {
        Self::new()
    }
}

/// What a lookup answers when the newest visible version of its key has
/// type `vtype` and value `value`.
fn answer(vtype: ValueType, value: &[u8]) -> Lookup {
    match vtype {
        ValueType::Deletion => Lookup::Deleted,
        t => Lookup::Found(t, value.to_vec()),
    }
}

impl MemTable {
    /// An empty memtable whose key filter is sized for the default 8 MiB
    /// write buffer.
    pub fn new() -> Self {
        Self::for_buffer(DEFAULT_BUFFER)
    }

    /// An empty memtable whose key filter is sized for a write buffer of
    /// `buffer_bytes` (`Options::write_buffer_size`).
    pub fn for_buffer(buffer_bytes: usize) -> Self {
        MemTable {
            list: SkipList::new(),
            filter: KeyFilter::for_buffer(buffer_bytes),
            max_seq: AtomicU64::new(0),
            min_seq: AtomicU64::new(u64::MAX),
        }
    }

    /// Adds one entry. One writer at a time.
    pub fn add(&self, seq: SeqNum, vtype: ValueType, user_key: &[u8], value: &[u8]) {
        // Before the entry is linked: see `KeyFilter`.
        self.filter.add(key_hash(user_key));
        self.list
            .insert_parts(user_key, pack_trailer(seq, vtype as u8), value);
        // One writer at a time: a load and a store suffice.
        if seq > self.max_seq.load(Ordering::Relaxed) {
            self.max_seq.store(seq, Ordering::Relaxed);
        }
        if seq < self.min_seq.load(Ordering::Relaxed) {
            self.min_seq.store(seq, Ordering::Relaxed);
        }
    }

    /// Smallest sequence number added (`None` when empty).
    pub fn min_seq(&self) -> Option<SeqNum> {
        Some(self.min_seq.load(Ordering::Relaxed)).filter(|&s| s != u64::MAX)
    }

    /// Sequence number of the newest version of `user_key` held, if any.
    pub fn newest_seq(&self, user_key: &[u8]) -> Option<SeqNum> {
        self.newest_seq_hashed(user_key, key_hash(user_key))
    }

    /// [`MemTable::newest_seq`] for a key whose `key_hash` is `hash`
    /// (hashed once for every memtable and table a lookup visits).
    pub fn newest_seq_hashed(&self, user_key: &[u8], hash: u64) -> Option<SeqNum> {
        self.newest(user_key, hash, super::key::MAX_SEQ, |seq, _, _| seq)
    }

    /// `f(sequence number, type, value)` of the newest version of
    /// `user_key` (whose [`key_hash`] is `hash`) with sequence number
    /// `<= seq`, if one is held.
    fn newest<T>(
        &self,
        user_key: &[u8],
        hash: u64,
        seq: SeqNum,
        f: impl FnOnce(SeqNum, ValueType, &[u8]) -> T,
    ) -> Option<T> {
        if !self.filter.may_contain(hash) {
            return None;
        }
        let mut it = SkipIter::new(Borrowed(&self.list));
        it.seek(&seek_key(user_key, seq));
        if !it.valid() {
            return None;
        }
        let p = parse_internal_key(it.key()).filter(|p| p.user_key == user_key)?;
        Some(f(p.seq, p.vtype, it.value()))
    }

    /// Key comparisons the skiplist makes to find `user_key` as of `seq`
    /// (for the memtable micro-benchmark).
    #[doc(hidden)]
    pub fn search_comparisons(&self, user_key: &[u8], seq: SeqNum) -> usize {
        self.list.search_comparisons(&seek_key(user_key, seq))
    }

    /// Largest sequence number added (0 when empty).
    pub fn max_seq(&self) -> SeqNum {
        self.max_seq.load(Ordering::Relaxed)
    }

    /// Newest version of `user_key` with sequence number `<= seq`.
    pub fn get(&self, user_key: &[u8], seq: SeqNum) -> Lookup {
        self.get_hashed(user_key, key_hash(user_key), seq)
    }

    /// [`MemTable::get`] for a key whose `key_hash` is `hash`.
    pub fn get_hashed(&self, user_key: &[u8], hash: u64, seq: SeqNum) -> Lookup {
        self.newest(user_key, hash, seq, |_, vtype, value| answer(vtype, value))
            .unwrap_or(Lookup::NotFound)
    }

    /// A finger for [`MemTable::get_hashed_from`], at the memtable's start.
    pub fn finger(&self) -> Finger<'_> {
        Finger::new(&self.list)
    }

    /// [`MemTable::get_hashed`] searching from `finger`, which it moves to
    /// this key: for a batch of keys looked up in ascending order (value-log
    /// GC judging a chunk) each search starts near the last one's place
    /// instead of at the top of the skiplist. Any order of keys gives the
    /// same answers as [`MemTable::get_hashed`].
    pub fn get_hashed_from<'a>(
        &'a self,
        finger: &mut Finger<'a>,
        user_key: &[u8],
        hash: u64,
        seq: SeqNum,
    ) -> Lookup {
        if !self.filter.may_contain(hash) {
            return Lookup::NotFound;
        }
        self.list
            .seek_from(finger, &seek_key(user_key, seq))
            .and_then(|(key, value)| {
                let p = parse_internal_key(key).filter(|p| p.user_key == user_key)?;
                Some(answer(p.vtype, value))
            })
            .unwrap_or(Lookup::NotFound)
    }

    /// Approximate memory used (bytes).
    pub fn approximate_bytes(&self) -> usize {
        self.list.approximate_bytes()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// A cursor over the entries.
    pub fn iter(self: &Arc<Self>) -> MemTableIterator {
        MemTableIterator(SkipIter::new(self.clone()))
    }
}

/// [`InternalIterator`] over a memtable.
pub struct MemTableIterator(SkipIter<Arc<MemTable>>);

impl InternalIterator for MemTableIterator {
    fn valid(&self) -> bool {
        self.0.valid()
    }
    fn seek_to_first(&mut self) {
        self.0.seek_to_first()
    }
    fn seek_to_last(&mut self) {
        self.0.seek_to_last()
    }
    fn seek(&mut self, target: &[u8]) {
        self.0.seek(target)
    }
    fn next(&mut self) {
        self.0.next()
    }
    fn prev(&mut self) {
        self.0.prev()
    }
    fn key(&self) -> &[u8] {
        self.0.key()
    }
    fn value(&self) -> &[u8] {
        self.0.value()
    }
    fn status(&self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_and_smallest_sequence_numbers() {
        let m = Arc::new(MemTable::new());
        assert_eq!(m.min_seq(), None);
        assert_eq!(m.newest_seq(b"k"), None);
        m.add(7, ValueType::Value, b"k", b"v1");
        m.add(8, ValueType::Value, b"ka", b"v");
        m.add(9, ValueType::Deletion, b"k", b"");
        assert_eq!(m.min_seq(), Some(7));
        assert_eq!(m.newest_seq(b"k"), Some(9));
        assert_eq!(m.newest_seq(b"ka"), Some(8));
        assert_eq!(m.newest_seq(b"j"), None);
        assert_eq!(m.newest_seq(b"kb"), None);
    }

    #[test]
    fn get_respects_sequence_and_tombstones() {
        let m = Arc::new(MemTable::new());
        m.add(1, ValueType::Value, b"k", b"v1");
        m.add(2, ValueType::Deletion, b"k", b"");
        m.add(3, ValueType::Value, b"k", b"v3");
        assert_eq!(m.get(b"k", 0), Lookup::NotFound);
        assert_eq!(
            m.get(b"k", 1),
            Lookup::Found(ValueType::Value, b"v1".to_vec())
        );
        assert_eq!(m.get(b"k", 2), Lookup::Deleted);
        assert_eq!(
            m.get(b"k", 9),
            Lookup::Found(ValueType::Value, b"v3".to_vec())
        );
        assert_eq!(m.get(b"j", 9), Lookup::NotFound);
        assert_eq!(m.get(b"kk", 9), Lookup::NotFound);
    }

    #[test]
    fn keys_of_any_length_read_back() {
        // Keys from 1 to 500 bytes, each its own value.
        let m = Arc::new(MemTable::new());
        let keys: Vec<Vec<u8>> = [1usize, 119, 120, 121, 500]
            .iter()
            .map(|&n| vec![b'a' + (n % 26) as u8; n])
            .collect();
        for (i, k) in keys.iter().enumerate() {
            m.add(i as u64 + 1, ValueType::Value, k, k);
        }
        for k in &keys {
            assert_eq!(m.get(k, 99), Lookup::Found(ValueType::Value, k.clone()));
        }
    }

    #[test]
    fn the_key_filter_finds_every_key_held_and_skips_most_others() {
        // A filter sized for a 1 MiB buffer (256 Ki bits) over 20,000 keys:
        // about 13 bits per key.
        let m = MemTable::for_buffer(1 << 20);
        let key = |i: u32| format!("user{i:010}").into_bytes();
        for i in 0..20_000u32 {
            m.add(i as u64 + 1, ValueType::Pointer, &key(2 * i), b"p");
        }
        for i in 0..20_000u32 {
            assert!(
                m.filter.may_contain(key_hash(&key(2 * i))),
                "false negative"
            );
            assert_eq!(m.newest_seq(&key(2 * i)), Some(i as u64 + 1));
        }
        let passed = (0..20_000u32)
            .filter(|&i| m.filter.may_contain(key_hash(&key(2 * i + 1))))
            .count();
        // About 1 % expected; a filter that passes everything fails here.
        assert!(passed < 20_000 / 20, "{passed} of 20000 absent keys passed");
        for i in 0..20_000u32 {
            assert_eq!(m.newest_seq(&key(2 * i + 1)), None);
        }
    }
}
