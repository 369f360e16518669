//! The block cache: decoded SSTable blocks shared between all readers.
//!
//! Entries are keyed by `(file number, block offset)`; file numbers are never
//! reused, so an entry can never be mistaken for a block of another file, and
//! entries of deleted files simply age out. Each entry is charged the bytes of
//! its block contents (plus a small fixed overhead) against the capacity.
//! Blocks are immutable and handed out as `Arc`s: an iterator keeps its block
//! alive even after the cache evicts it. Only blocks whose checksum and
//! structure were verified are inserted.
//!
//! Thread-safety: the cache is `Send + Sync` and meant to be shared through
//! `Arc` by every table of a database; it is a sharded, lock-per-shard
//! S3-FIFO cache (`quick_cache`). Two readers missing the same block at the
//! same time may both read it; the second insert replaces the first.
//!
//! Beside the blocks, the cache holds the `MapGauge` that decides, for all
//! tables of the database, whether the blocks of mapped tables are read in
//! place or with system calls.

use crate::index::sstable::{Block, MapGauge};
use quick_cache::sync::Cache;
use quick_cache::Weighter;
use std::sync::Arc;

/// Key of a cached block: `(file number, block offset)`.
type BlockKey = (u64, u64);

/// Charges a block its size in bytes.
#[derive(Debug, Clone, Copy)]
struct BlockWeighter;

impl Weighter<BlockKey, Arc<Block>> for BlockWeighter {
    fn weight(&self, _key: &BlockKey, block: &Arc<Block>) -> u64 {
        // Never 0: zero-weight entries would never be evicted.
        (block.charge() as u64).max(1)
    }
}

/// A cache of decoded SSTable blocks, bounded in bytes.
pub struct BlockCache {
    inner: Cache<BlockKey, Arc<Block>, BlockWeighter>,
    capacity: usize,
    map_gauge: MapGauge,
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCache")
            .field("capacity", &self.capacity)
            .field("used", &self.inner.weight())
            .field("blocks", &self.inner.len())
            .finish()
    }
}

/// Typical block size, used to size the cache's item tables.
const TYPICAL_BLOCK: usize = 4096;

impl BlockCache {
    /// A cache holding at most about `capacity_bytes` bytes of blocks. A block
    /// larger than a shard of the cache is not kept.
    pub fn new(capacity_bytes: usize) -> Self {
        let items = (capacity_bytes / TYPICAL_BLOCK).max(1);
        BlockCache {
            inner: Cache::with_weighter(items, capacity_bytes as u64, BlockWeighter),
            capacity: capacity_bytes,
            map_gauge: MapGauge::default(),
        }
    }

    /// Whether mapped tables' blocks are read in place (shared by every
    /// table that reads through this cache).
    pub(crate) fn map_gauge(&self) -> &MapGauge {
        &self.map_gauge
    }

    /// The cached block at `offset` of table `file_number`.
    pub(crate) fn get(&self, file_number: u64, offset: u64) -> Option<Arc<Block>> {
        self.inner.get(&(file_number, offset))
    }

    /// Caches `block` as the block at `offset` of table `file_number`.
    pub(crate) fn insert(&self, file_number: u64, offset: u64, block: Arc<Block>) {
        self.inner.insert((file_number, offset), block);
    }

    /// Bytes currently charged.
    #[cfg(test)]
    pub(crate) fn used(&self) -> u64 {
        self.inner.weight()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::sstable::BlockBuilder;

    fn block(n: usize) -> Arc<Block> {
        let mut b = BlockBuilder::new(16);
        b.add(b"key", &vec![7u8; n]);
        Arc::new(Block::new(b.finish()).unwrap())
    }

    #[test]
    fn cache_hit_returns_same_block() {
        let c = BlockCache::new(1 << 20);
        assert!(c.get(1, 0).is_none());
        let b = block(100);
        c.insert(1, 0, b.clone());
        let got = c.get(1, 0).expect("cached");
        assert!(Arc::ptr_eq(&got, &b));
        // Keyed by file number and offset.
        assert!(c.get(2, 0).is_none());
        assert!(c.get(1, 1).is_none());
        assert_eq!(c.used(), b.charge() as u64);
    }

    #[test]
    fn cache_is_bounded_by_bytes() {
        let cap = 256 << 10;
        let c = BlockCache::new(cap);
        for i in 0..1000 {
            c.insert(9, i * 4096, block(4000));
        }
        assert!(c.used() <= cap as u64, "used {} > {}", c.used(), cap);
        let kept = (0..1000).filter(|&i| c.get(9, i * 4096).is_some()).count();
        assert!(kept > 0 && kept < 1000, "kept {kept}");
        // An evicted block stays alive for whoever holds it.
        let held = block(10);
        c.insert(9, 1 << 40, held.clone());
        for i in 0..1000 {
            c.insert(10, i * 4096, block(4000));
        }
        assert_eq!(held.size(), block(10).size());
    }

    #[test]
    fn zero_capacity_cache_keeps_nothing() {
        let c = BlockCache::new(0);
        c.insert(1, 0, block(10));
        assert!(c.get(1, 0).is_none());
        assert_eq!(c.used(), 0);
    }

    #[test]
    fn cache_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<BlockCache>();
    }
}
