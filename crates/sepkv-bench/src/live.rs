//! Live user bytes: the key + value bytes a database would hold if it kept
//! exactly the latest version of every key — the denominator of space
//! amplification.
//!
//! Generated workloads address records by number, so [`DenseLive`] keeps
//! one `u32` per record (4 bytes × records: 40 MB for 10 M records) and is
//! safe to update from many threads. Trace replay addresses arbitrary keys;
//! [`KeyedLive`] keeps a hash map from a 64-bit hash of the key to the
//! entry size (16 bytes per key plus the map's overhead).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Live bytes of records addressed by number, updated concurrently.
#[derive(Debug, Default)]
pub struct DenseLive {
    /// Per record: key + value bytes + 1, or 0 when absent.
    sizes: Vec<AtomicU32>,
    bytes: AtomicU64,
    records: AtomicU64,
}

impl DenseLive {
    /// Tracks records `0..capacity`.
    pub fn new(capacity: u64) -> Self {
        let mut d = DenseLive::default();
        d.ensure(capacity);
        d
    }

    /// Makes room for records `0..capacity`.
    pub fn ensure(&mut self, capacity: u64) {
        let cap = capacity as usize;
        if self.sizes.len() < cap {
            self.sizes.resize_with(cap, || AtomicU32::new(0));
        }
    }

    /// Record `n` now holds a key of `key_len` and a value of `value_len`
    /// bytes. Records beyond the capacity are ignored (the runner sizes it).
    pub fn put(&self, n: u64, key_len: usize, value_len: usize) {
        let Some(slot) = self.sizes.get(n as usize) else {
            debug_assert!(false, "record {n} beyond live-bytes capacity");
            return;
        };
        let size = (key_len + value_len).min(u32::MAX as usize - 1) as u32;
        let old = slot.swap(size + 1, Ordering::Relaxed);
        self.bytes.fetch_add(size as u64, Ordering::Relaxed);
        if old == 0 {
            self.records.fetch_add(1, Ordering::Relaxed);
        } else {
            self.bytes.fetch_sub((old - 1) as u64, Ordering::Relaxed);
        }
    }

    /// Record `n` was deleted.
    pub fn delete(&self, n: u64) {
        let Some(slot) = self.sizes.get(n as usize) else {
            return;
        };
        let old = slot.swap(0, Ordering::Relaxed);
        if old != 0 {
            self.bytes.fetch_sub((old - 1) as u64, Ordering::Relaxed);
            self.records.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// True when record `n` exists.
    pub fn contains(&self, n: u64) -> bool {
        self.sizes
            .get(n as usize)
            .is_some_and(|s| s.load(Ordering::Relaxed) != 0)
    }

    /// Live key + value bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Live records.
    pub fn records(&self) -> u64 {
        self.records.load(Ordering::Relaxed)
    }
}

/// Live bytes of arbitrary keys (trace replay), single-threaded. Keys are
/// identified by a 64-bit hash; two distinct keys colliding (odds about
/// n²/2⁶⁵) would be counted as one.
#[derive(Debug, Default)]
pub struct KeyedLive {
    sizes: HashMap<u64, u32>,
    bytes: u64,
}

impl KeyedLive {
    /// An empty tracker.
    pub fn new() -> Self {
        Self::default()
    }

    /// `key` now holds a value of `value_len` bytes.
    pub fn put(&mut self, key: &[u8], value_len: usize) {
        let size = (key.len() + value_len).min(u32::MAX as usize) as u32;
        let h = xxhash_rust::xxh3::xxh3_64(key);
        self.bytes += size as u64;
        if let Some(old) = self.sizes.insert(h, size) {
            self.bytes -= old as u64;
        }
    }

    /// `key` was deleted.
    pub fn delete(&mut self, key: &[u8]) {
        if let Some(old) = self.sizes.remove(&xxhash_rust::xxh3::xxh3_64(key)) {
            self.bytes -= old as u64;
        }
    }

    /// Live key + value bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Live keys.
    pub fn records(&self) -> u64 {
        self.sizes.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_tracks_overwrites_and_deletes() {
        let d = DenseLive::new(10);
        d.put(1, 16, 100);
        d.put(2, 16, 100);
        d.put(1, 16, 50);
        assert_eq!((d.bytes(), d.records()), (182, 2));
        d.delete(2);
        d.delete(2);
        d.delete(7);
        assert_eq!((d.bytes(), d.records()), (66, 1));
        d.put(1, 16, 0);
        assert_eq!((d.bytes(), d.records()), (16, 1));
        assert!(d.contains(1) && !d.contains(2));
    }

    #[test]
    fn keyed_tracks_overwrites_and_deletes() {
        let mut k = KeyedLive::new();
        k.put(b"user1", 1000);
        k.put(b"user2", 1000);
        k.put(b"user1", 100);
        assert_eq!((k.bytes(), k.records()), (1110, 2));
        k.delete(b"user2");
        k.delete(b"nope");
        assert_eq!((k.bytes(), k.records()), (105, 1));
    }
}
