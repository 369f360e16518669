//! The write cache (HashKV §3.2, §3.8 batch writes).
//!
//! Recently appended records wait here, grouped by the segment (and so by
//! the segment group) they were placed in, until the cache holds
//! `hashkv_write_cache_size` bytes; a flush then issues **one sequential
//! write per segment** (the per-group batch of §3.8). Reads look here first.
//! The batches are written one after another by the flushing thread, not by
//! a pool of threads as in §3.8: they only hand data to the OS, which
//! schedules the device writes itself.
//!
//! Durability: the cache only ever holds records that are already in the
//! write journal, which `append` hands to the OS before it returns, so a
//! process crash loses nothing the engine acknowledged; journal replay puts
//! the records back in their segments on open.
//!
//! Deviation from §3.2: a pair is not updated *in place* in the cache. The
//! engine logs every version's pointer in its WAL before the cache could
//! absorb it, and snapshot readers may still need the older version, so each
//! version keeps its own slot; the cache's gains here are batching and
//! serving reads of recent pairs from memory.

use std::collections::BTreeMap;

/// Records of one segment not yet handed to its file.
#[derive(Debug, Default)]
pub struct Pending {
    /// Segment offset of the first buffered byte.
    pub start: u64,
    /// The buffered records, back to back.
    pub buf: Vec<u8>,
}

/// The write cache.
#[derive(Debug, Default)]
pub struct WriteCache {
    pending: BTreeMap<u64, Pending>,
    bytes: usize,
    limit: usize,
}

impl WriteCache {
    /// A cache flushed at `limit` bytes (0: every append is flushed at once).
    pub fn new(limit: usize) -> WriteCache {
        WriteCache {
            pending: BTreeMap::new(),
            bytes: 0,
            limit,
        }
    }

    /// Buffers record bytes placed at `off` of segment `seg`. Records of a
    /// segment arrive in offset order.
    pub fn add(&mut self, seg: u64, off: u64, rec: &[u8]) {
        let p = self.pending.entry(seg).or_insert_with(|| Pending {
            start: off,
            buf: Vec::new(),
        });
        debug_assert_eq!(p.start + p.buf.len() as u64, off, "out-of-order cache add");
        p.buf.extend_from_slice(rec);
        self.bytes += rec.len();
    }

    /// The buffered bytes `[off, off + len)` of segment `seg`, if all are
    /// here.
    pub fn get(&self, seg: u64, off: u64, len: usize) -> Option<&[u8]> {
        let p = self.pending.get(&seg)?;
        let rel = off.checked_sub(p.start)? as usize;
        p.buf.get(rel..rel.checked_add(len)?)
    }

    /// True when a flush is due.
    pub fn is_full(&self) -> bool {
        self.bytes > 0 && self.bytes >= self.limit
    }

    /// Bytes buffered.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// True when nothing is buffered.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Takes every batch, by segment id.
    pub fn take_all(&mut self) -> Vec<(u64, Pending)> {
        self.bytes = 0;
        std::mem::take(&mut self.pending).into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_by_segment() {
        let mut c = WriteCache::new(10);
        c.add(7, 100, b"abc");
        c.add(7, 103, b"de");
        c.add(2, 0, b"xy");
        assert_eq!(c.get(7, 101, 3), Some(&b"bcd"[..]));
        assert_eq!(c.get(7, 104, 2), None);
        assert_eq!(c.get(3, 0, 1), None);
        assert!(!c.is_full());
        c.add(2, 2, b"zzz");
        assert!(c.is_full());
        let all = c.take_all();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].0, 2);
        assert_eq!(all[1].1.buf, b"abcde");
        assert!(c.is_empty());
    }
}
