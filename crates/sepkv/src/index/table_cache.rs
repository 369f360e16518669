//! The table cache: open SSTables and DTables by file number, bounded by
//! `Options::max_open_files`.
//!
//! Opening a table reads its footer, index block and bloom filter; the cache
//! keeps those in memory for the hottest tables only, so memory stays
//! bounded whatever the database size. Safe for concurrent use.
//!
//! A table file is an SSTable or a DTable (LWC-tree); the magic number at
//! the end of the recorded size tells which, and [`AnyTable`] reads either.
//! A DTable grows by appends, so one file number has several sizes over
//! time: the cache keeps the newest size it was asked for, and a reader of
//! an older version asking for an older size gets a reader of its own.

use super::cache::BlockCache;
use super::dtable::{DTable, DTableIterator, DTABLE_MAGIC};
use super::filename::table_path;
use super::iter::InternalIterator;
use super::multi_get::BlockReuse;
use super::sstable::{ReadCtx, Table, TableIterator};
use crate::error::{Error, IoContext, Result};
use crate::fs::{
    open_files_limit, FileSystem, IoCategory, IoStats, MappedFile, PointReads, RandomAccessFile,
};
use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// An open table of either format.
#[derive(Debug)]
pub enum AnyTable {
    /// An SSTable (flush output, leveled compaction output).
    Sst(Arc<Table>),
    /// A DTable (lightweight compaction output).
    Dt(DTable),
}

impl AnyTable {
    /// Point lookup; see [`Table::get`] and [`DTable::get`].
    pub fn get(&self, ikey: &[u8], ctx: ReadCtx) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        match self {
            AnyTable::Sst(t) => t.get(ikey, ctx),
            AnyTable::Dt(t) => t.get(ikey, ctx),
        }
    }

    /// Point lookup as one of a batch; see [`Table::get_reusing`] and
    /// [`DTable::get_reusing`].
    pub fn get_reusing(
        &self,
        ikey: &[u8],
        ctx: ReadCtx,
        reuse: Option<&mut BlockReuse>,
    ) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        match self {
            AnyTable::Sst(t) => t.get_reusing(ikey, ctx, reuse),
            AnyTable::Dt(t) => t.get_reusing(ikey, ctx, reuse),
        }
    }

    /// A cursor over the entries (unpositioned).
    pub fn iter(&self, ctx: ReadCtx) -> AnyTableIterator {
        match self {
            AnyTable::Sst(t) => AnyTableIterator::Sst(t.iter(ctx)),
            AnyTable::Dt(t) => AnyTableIterator::Dt(t.iter(ctx)),
        }
    }

    /// Re-reads and checks every block; returns the entry count.
    pub fn verify(&self) -> Result<u64> {
        match self {
            AnyTable::Sst(t) => t.verify(),
            AnyTable::Dt(t) => t.verify(),
        }
    }

    /// Path of the file.
    pub fn path(&self) -> &Path {
        match self {
            AnyTable::Sst(t) => t.path(),
            AnyTable::Dt(t) => t.path(),
        }
    }

    /// Size the table is read at.
    pub fn file_size(&self) -> u64 {
        match self {
            AnyTable::Sst(t) => t.file_size(),
            AnyTable::Dt(t) => t.file_size(),
        }
    }

    /// The DTable, when this is one.
    pub fn as_dtable(&self) -> Option<&DTable> {
        match self {
            AnyTable::Dt(t) => Some(t),
            AnyTable::Sst(_) => None,
        }
    }

    /// Opens the table of `size` bytes in `file`, by its magic number.
    pub fn open(
        file: Arc<dyn RandomAccessFile>,
        path: PathBuf,
        number: u64,
        size: u64,
        cache: Option<Arc<super::cache::BlockCache>>,
        stats: Arc<IoStats>,
        category: IoCategory,
    ) -> Result<AnyTable> {
        let mut magic = [0u8; 8];
        let dtable = match size.checked_sub(8) {
            Some(at) => match file.read_exact_at(at, &mut magic) {
                Ok(()) => u64::from_le_bytes(magic) == DTABLE_MAGIC,
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => false,
                Err(e) => return Err(Error::io(&path, e)),
            },
            None => false,
        };
        Ok(if dtable {
            AnyTable::Dt(DTable::open(
                file, path, number, size, cache, stats, category,
            )?)
        } else {
            AnyTable::Sst(Arc::new(Table::open(
                file, path, number, size, cache, stats, category,
            )?))
        })
    }
}

/// A cursor over a table of either format.
// The SSTable cursor, the common case, stays unboxed: no allocation per
// table a scan enters.
#[allow(clippy::large_enum_variant)]
pub enum AnyTableIterator {
    /// Over an SSTable.
    Sst(TableIterator),
    /// Over a DTable's segments.
    Dt(DTableIterator),
}

macro_rules! either {
    ($self:ident, $it:ident => $e:expr) => {
        match $self {
            AnyTableIterator::Sst($it) => $e,
            AnyTableIterator::Dt($it) => $e,
        }
    };
}

impl InternalIterator for AnyTableIterator {
    fn valid(&self) -> bool {
        either!(self, i => i.valid())
    }
    fn seek_to_first(&mut self) {
        either!(self, i => i.seek_to_first())
    }
    fn seek_to_last(&mut self) {
        either!(self, i => i.seek_to_last())
    }
    fn seek(&mut self, target: &[u8]) {
        either!(self, i => i.seek(target))
    }
    fn next(&mut self) {
        either!(self, i => i.next())
    }
    fn prev(&mut self) {
        either!(self, i => i.prev())
    }
    fn key(&self) -> &[u8] {
        either!(self, i => i.key())
    }
    fn value(&self) -> &[u8] {
        either!(self, i => i.value())
    }
    fn status(&self) -> Result<()> {
        either!(self, i => i.status())
    }
}

/// Open tables, by file number.
pub struct TableCache {
    dir: PathBuf,
    fs: Arc<dyn FileSystem>,
    stats: Arc<IoStats>,
    blocks: Arc<BlockCache>,
    tables: quick_cache::sync::Cache<u64, Arc<AnyTable>>,
    /// Read tables through a mapping of their files
    /// ([`Options::mmap_reads`](crate::Options::mmap_reads)).
    mmap: bool,
    /// Give each table a second handle for point reads ([`PointReads`]).
    point_reads: bool,
    /// Read-triggered merging of DTables ([`TableCache::charge_reads`]).
    seek_merge: SeekMerge,
}

/// The fewest read charges a DTable is allowed before a seek merge, however
/// small it is (LevelDB's seek compaction allows a file at least 100
/// seeks).
pub const MIN_SEEK_MERGE_CHARGES: u64 = 100;

/// Read charges of DTables and the tables whose charges passed their
/// allowance (the LWC-tree's seek merges; `Options::lwc_seek_merge_bytes`).
#[derive(Default)]
struct SeekMerge {
    /// Bytes of a DTable per read charge it is allowed; 0: never merge.
    bytes_per_charge: u64,
    /// Tables (file number, size) due for a merge, oldest first.
    due: Mutex<Vec<(u64, u64)>>,
    /// `due` is not empty (read without the lock).
    any_due: AtomicBool,
}

/// Whether a second handle per cached table ([`PointReads`]) fits the
/// open-file limit `limit`: the cache's tables may then hold two files
/// each and still use at most half of it, leaving the rest to logs, value
/// files and the application. Without room, point reads share the one
/// handle (and its read-around).
fn point_reads_fit(capacity: usize, limit: Option<u64>) -> bool {
    limit.is_none_or(|n| (capacity as u64).saturating_mul(4) <= n)
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
            mmap: false,
            point_reads: point_reads_fit(capacity, open_files_limit()),
            seek_merge: SeekMerge::default(),
        }
    }

    /// Counts read charges against DTables ([`TableCache::charge_reads`]):
    /// a DTable of `size` bytes is due for a merge once it has taken
    /// `size / bytes_per_charge` charges (at least
    /// [`MIN_SEEK_MERGE_CHARGES`]); 0 counts nothing.
    pub fn with_seek_merge(mut self, bytes_per_charge: u64) -> Self {
        self.seek_merge.bytes_per_charge = bytes_per_charge;
        self
    }

    /// Charges `n` reads to `t` when it is a DTable and seek merges are on:
    /// a seek that positioned cursors in `k` segments charges `k - 1`, a
    /// lookup that consulted more than one segment charges 1. The charge
    /// that takes the table past its allowance marks it due for a merge of
    /// its segments ([`TableCache::take_seek_merges`]).
    pub fn charge_reads(&self, t: &AnyTable, n: u64) {
        let per = self.seek_merge.bytes_per_charge;
        if per == 0 || n == 0 {
            return;
        }
        let Some(d) = t.as_dtable() else {
            return;
        };
        let allowance = (d.file_size() / per).max(MIN_SEEK_MERGE_CHARGES);
        let before = d.charge(n);
        if before < allowance && before.saturating_add(n) >= allowance {
            self.seek_merge
                .due
                .lock()
                .push((d.file_number(), d.file_size()));
            self.seek_merge.any_due.store(true, Ordering::Release);
        }
    }

    /// Whether some DTable's read charges passed its allowance since the
    /// last [`TableCache::take_seek_merges`].
    pub fn seek_merges_due(&self) -> bool {
        self.seek_merge.any_due.load(Ordering::Acquire)
    }

    /// The DTables (file number, size) whose read charges passed their
    /// allowance, in the order they did; the list is emptied.
    pub fn take_seek_merges(&self) -> Vec<(u64, u64)> {
        let mut due = self.seek_merge.due.lock();
        self.seek_merge.any_due.store(false, Ordering::Release);
        std::mem::take(&mut *due)
    }

    /// Puts back tables [`TableCache::take_seek_merges`] returned and that
    /// were not merged yet, ahead of any marked since.
    pub fn restore_seek_merges(&self, tables: Vec<(u64, u64)>) {
        if tables.is_empty() {
            return;
        }
        let mut due = self.seek_merge.due.lock();
        let later = std::mem::replace(&mut *due, tables);
        due.extend(later);
        self.seek_merge.any_due.store(true, Ordering::Release);
    }

    /// Reads tables through a mapping of their files where the file system
    /// can map them ([`crate::fs::RandomAccessFile::map`]).
    pub fn with_mmap(mut self, mmap: bool) -> Self {
        self.mmap = mmap;
        self
    }

    /// The open table `number` read at `size` bytes, opening it if needed.
    ///
    /// # Errors
    /// `Io` if the file cannot be opened; `Corruption` if its footer, index
    /// or filter is damaged.
    pub fn get(&self, number: u64, size: u64, category: IoCategory) -> Result<Arc<AnyTable>> {
        let cached = self.tables.get(&number);
        if let Some(t) = &cached {
            if t.file_size() == size {
                return Ok(t.clone());
            }
        }
        let path = table_path(&self.dir, number);
        let mut file = MappedFile::open(&*self.fs, &path, self.mmap).ctx(&path)?;
        if self.point_reads {
            file = Box::new(PointReads::new(file, self.fs.clone(), path.clone()));
        }
        let t = Arc::new(AnyTable::open(
            Arc::from(file),
            path,
            number,
            size,
            Some(self.blocks.clone()),
            self.stats.clone(),
            category,
        )?);
        // Keep the newest size of a growing DTable.
        if cached.is_none_or(|c| c.file_size() < size) {
            self.tables.insert(number, t.clone());
        }
        Ok(t)
    }

    /// Forgets table `number` (after it is deleted).
    pub fn evict(&self, number: u64) {
        self.tables.remove(&number);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::MemFs;

    #[test]
    fn point_reads_fit_the_open_file_limit() {
        assert!(point_reads_fit(500, None));
        assert!(point_reads_fit(500, Some(2000)));
        assert!(!point_reads_fit(500, Some(1999)));
        assert!(!point_reads_fit(500, Some(1024)));
    }

    #[test]
    fn point_reads_open_one_handle_of_the_same_file_or_fall_back() {
        let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
        let path = Path::new("/t/000001.sst");
        fs.create_dir_all(Path::new("/t")).unwrap();
        let mut w = fs.create(path).unwrap();
        w.append(b"0123456789").unwrap();
        w.sync().unwrap();
        drop(w);
        let f = PointReads::new(fs.open_read(path).unwrap(), fs.clone(), path.into());
        let p = f.point_reads().unwrap();
        let mut buf = [0u8; 4];
        p.read_exact_at(3, &mut buf).unwrap();
        assert_eq!(&buf, b"3456");
        // Opened once, then kept.
        let again = f.point_reads().unwrap();
        assert!(std::ptr::addr_eq(p as *const _, again as *const _));
        // A file that can no longer be opened: point reads use the handle
        // in hand.
        let g = PointReads::new(fs.open_read(path).unwrap(), fs.clone(), path.into());
        fs.remove(path).unwrap();
        let p = g.point_reads().unwrap();
        p.read_exact_at(0, &mut buf).unwrap();
        assert_eq!(&buf, b"0123");
    }
}
