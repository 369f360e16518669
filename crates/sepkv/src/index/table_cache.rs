//! The table cache: open SSTables by file number, bounded by
//! `Options::max_open_files`.
//!
//! Opening a table reads its footer, index block and bloom filter; the cache
//! keeps those in memory for the hottest tables only, so memory stays
//! bounded whatever the database size. Safe for concurrent use.

use super::cache::BlockCache;
use super::filename::table_path;
use super::sstable::Table;
use crate::error::{IoContext, Result};
use crate::fs::{FileSystem, IoCategory, IoStats};
use std::path::PathBuf;
use std::sync::Arc;

/// Open tables, by file number.
pub struct TableCache {
    dir: PathBuf,
    fs: Arc<dyn FileSystem>,
    stats: Arc<IoStats>,
    blocks: Arc<BlockCache>,
    tables: quick_cache::sync::Cache<u64, Arc<Table>>,
}

impl TableCache {
    /// A cache of at most `capacity` open tables of directory `dir`.
    pub fn new(
        dir: PathBuf,
        fs: Arc<dyn FileSystem>,
        stats: Arc<IoStats>,
        blocks: Arc<BlockCache>,
        capacity: usize,
    ) -> Self {
        TableCache {
            dir,
            fs,
            stats,
            blocks,
            tables: quick_cache::sync::Cache::new(capacity),
        }
    }

    /// The open table `number` of `size` bytes, opening it if needed.
    ///
    /// # Errors
    /// `Io` if the file cannot be opened; `Corruption` if its footer, index
    /// or filter is damaged.
    pub fn get(&self, number: u64, size: u64, category: IoCategory) -> Result<Arc<Table>> {
        if let Some(t) = self.tables.get(&number) {
            return Ok(t);
        }
        let path = table_path(&self.dir, number);
        let file = self.fs.open_read(&path).ctx(&path)?;
        let t = Arc::new(Table::open(
            Arc::from(file),
            path,
            number,
            size,
            Some(self.blocks.clone()),
            self.stats.clone(),
            category,
        )?);
        self.tables.insert(number, t.clone());
        Ok(t)
    }

    /// Forgets table `number` (after it is deleted).
    pub fn evict(&self, number: u64) {
        self.tables.remove(&number);
    }
}
