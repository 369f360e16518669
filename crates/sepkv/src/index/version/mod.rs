//! Versions of the LSM-tree: which SSTables make up each level.
//!
//! A [`Version`] is immutable; readers and iterators hold an `Arc` to the one
//! they started with, so files they use are not deleted under them. Levels
//! 1 and up hold files with disjoint user-key ranges, sorted by key; a user
//! key's versions never span two files of one level (compaction only cuts
//! output files between user keys). Level 0 holds flushed memtables, which
//! may overlap; newer files have larger numbers.

pub mod edit;
pub mod set;

pub use edit::{FileMeta, TableCounts, VersionEdit};
pub use set::{log_and_apply, VersionSet};

use super::key::{parse_internal_key, seek_key, user_key, SeqNum, ValueType};
use super::memtable::Lookup;
use super::multi_get::BlockReuse;
use super::sstable::ReadCtx;
use super::table_cache::TableCache;
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::sync::Arc;

/// One immutable version.
#[derive(Debug, Clone, Default)]
pub struct Version {
    /// Files of each level. Level 0 in increasing file number (oldest
    /// first); other levels in increasing key order.
    pub files: Vec<Vec<Arc<FileMeta>>>,
    /// What each file holds, by file number, for the files whose writer
    /// counted it ([`TableCounts`]); the tombstone-density trigger of the
    /// compaction picker reads it.
    pub counts: HashMap<u64, TableCounts>,
}

impl Version {
    /// An empty version of `levels` levels.
    pub fn empty(levels: usize) -> Self {
        Version {
            files: vec![Vec::new(); levels],
            counts: HashMap::new(),
        }
    }

    /// Total bytes of the files of `level`.
    pub fn level_bytes(&self, level: usize) -> u64 {
        set::total_size(&self.files[level])
    }

    /// Files of `level` whose user-key range intersects `[begin, end]`
    /// (`None` = unbounded). For level 0 the range grows to cover every file
    /// that overlaps a selected one, so the result is closed under overlap.
    pub fn overlapping(
        &self,
        level: usize,
        begin: Option<&[u8]>,
        end: Option<&[u8]>,
    ) -> Vec<Arc<FileMeta>> {
        let mut lo = begin.map(|b| b.to_vec());
        let mut hi = end.map(|e| e.to_vec());
        'restart: loop {
            let mut out = Vec::new();
            for f in &self.files[level] {
                let fs = user_key(&f.smallest);
                let fl = user_key(&f.largest);
                if lo.as_deref().is_some_and(|b| fl < b) || hi.as_deref().is_some_and(|e| fs > e) {
                    continue;
                }
                if level == 0 {
                    if lo.as_deref().is_some_and(|b| fs < b) {
                        lo = Some(fs.to_vec());
                        continue 'restart;
                    }
                    if hi.as_deref().is_some_and(|e| fl > e) {
                        hi = Some(fl.to_vec());
                        continue 'restart;
                    }
                }
                out.push(f.clone());
            }
            return out;
        }
    }

    /// True when some file in a level `> level` may hold `user_key`.
    pub fn key_may_exist_below(&self, level: usize, uk: &[u8]) -> bool {
        self.files.iter().skip(level + 1).any(|files| {
            files
                .iter()
                .any(|f| user_key(&f.smallest) <= uk && uk <= user_key(&f.largest))
        })
    }

    /// Newest version of `uk` with sequence `<= seq` in the SSTables.
    pub fn get(&self, tc: &TableCache, uk: &[u8], seq: SeqNum, ctx: ReadCtx) -> Result<Lookup> {
        self.get_reusing(tc, uk, seq, ctx, None)
    }

    /// [`Version::get`] as one lookup of a batch ([`crate::index::multi_get`]):
    /// the data block of each table it reaches comes from `reuse` when the
    /// batch's last lookup in that table loaded it. A batch that visits its
    /// keys in ascending order loads each block once.
    pub fn get_reusing(
        &self,
        tc: &TableCache,
        uk: &[u8],
        seq: SeqNum,
        ctx: ReadCtx,
        mut reuse: Option<&mut BlockReuse>,
    ) -> Result<Lookup> {
        let target = seek_key(uk, seq);
        let mut probe = |f: &FileMeta| -> Result<Option<Lookup>> {
            let t = tc.get(f.number, f.size, ctx.category)?;
            let hit = match t.as_dtable() {
                Some(d) => {
                    let (hit, consulted) = d.get_probing(&target, ctx, reuse.as_deref_mut())?;
                    // A lookup that consulted more than one segment is
                    // charged to the DTable (the LWC-tree's seek merges).
                    if consulted > 1 {
                        tc.charge_reads(&t, 1);
                    }
                    hit
                }
                None => t.get_reusing(&target, ctx, reuse.as_deref_mut())?,
            };
            match hit {
                None => Ok(None),
                Some((k, v)) => {
                    let p = parse_internal_key(&k).ok_or_else(|| {
                        Error::corruption(t.path(), 0, "unparsable internal key returned by table")
                    })?;
                    Ok(Some(match p.vtype {
                        ValueType::Deletion => Lookup::Deleted,
                        vt => Lookup::Found(vt, v),
                    }))
                }
            }
        };
        for f in self.files[0].iter().rev() {
            if user_key(&f.smallest) <= uk && uk <= user_key(&f.largest) {
                if let Some(r) = probe(f)? {
                    return Ok(r);
                }
            }
        }
        for files in self.files.iter().skip(1) {
            let i = files.partition_point(|f| user_key(&f.largest) < uk);
            if let Some(f) = files.get(i) {
                if user_key(&f.smallest) <= uk {
                    if let Some(r) = probe(f)? {
                        return Ok(r);
                    }
                }
            }
        }
        Ok(Lookup::NotFound)
    }
}
