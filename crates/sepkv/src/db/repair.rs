//! [`Db::repair`]: rebuilding a database whose manifest or `CURRENT` is
//! lost or damaged, from the tables, WALs and value files that survive
//! (the LSM-tree's part is `crate::index::lsm::repair`, whose module docs
//! give the steps and what cannot be ruled out).

use super::Db;
use crate::error::{Error, Result};
use crate::fs::IoStats;
use crate::index::filename::{IDENTITY, LOCK};
use crate::options::{IndexKind, Options, ValueLayout};
use std::path::Path;
use std::sync::Arc;

/// What [`Db::repair`] kept and dropped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RepairReport {
    /// Each manifest found, with the edits read and the damage met.
    pub manifests: Vec<String>,
    /// Tables read whole and kept (their newest versions are kept).
    pub tables_kept: usize,
    /// Tables dropped, with why (damage): the keys they held may have lost
    /// their newest version, or — where it was a tombstone — come back
    /// with an older value. Moved to `lost/`.
    pub tables_dropped: Vec<String>,
    /// Tables a surviving manifest edit had deleted (compaction inputs not
    /// removed yet): left out. Moved to `lost/`.
    pub tables_obsolete: usize,
    /// WALs read (each up to its first damaged record).
    pub wals_read: usize,
    /// Damage met in WALs; what followed it is lost.
    pub wal_damage: Vec<String>,
    /// The value store's GC state (e.g. the value-log tail) was recovered
    /// from a manifest record.
    pub value_store_state_kept: bool,
    /// Entries read from tables and WALs (all versions).
    pub entries_read: u64,
    /// Keys whose newest version is a value (the keys after the repair).
    pub live_keys: u64,
    /// Keys whose newest version is a tombstone (deleted keys kept
    /// deleted).
    pub tombstones: u64,
    /// The newest sequence number found.
    pub last_sequence: u64,
    /// Keys a full scan of the repaired database returns.
    pub keys_after: u64,
    /// What the repair could not rule out, in words.
    pub warnings: Vec<String>,
}

impl Db {
    /// Rebuilds the database in `path` after its manifest or `CURRENT` was
    /// lost or damaged, as LevelDB's `RepairDB`: every readable table and
    /// WAL is read, the newest version of each key by sequence number wins
    /// (tombstones included, so a key deleted before the loss stays
    /// deleted while its tombstone survives), the winners are written to a
    /// new WAL named by a new manifest, and the old tables, WALs, manifests
    /// and `CURRENT` are moved into `path/lost/`. Value files stay in
    /// place. The database is then opened once (replaying that WAL into
    /// tables), scanned to count its keys, and closed.
    ///
    /// Supported for the LSM-tree presets with a WAL (`leveldb`,
    /// `wisckey`, `hashkv`, `ktstore`, `lwc`). Not for `flashkey` (its hash
    /// table is rebuilt at every open from its checkpoint and bands; its
    /// state is not a manifest) nor WiscKey's log mode (`wal = false`),
    /// whose history is the value log after a checkpoint the manifest
    /// held. `IDENTITY` must survive (it is written at creation and
    /// rewritten only when an open upgrades a format-1 database; the open
    /// that ends a repair does so too). Memory: every key's newest version is held during the
    /// repair.
    ///
    /// # Errors
    /// - `NotADatabase`: no `IDENTITY`;
    /// - `InvalidArgument`: an unsupported configuration (above);
    /// - `Busy`: the database is open elsewhere;
    /// - `Io`: a write of the repair failed (the old files are moved only
    ///   after the new WAL and manifest are durable; running the repair
    ///   again is safe);
    /// - what the final open returns.
    pub fn repair(path: impl AsRef<Path>, opts: Options) -> Result<RepairReport> {
        let dir = path.as_ref().to_path_buf();
        let fs = opts.fs.clone();
        if !fs.exists(&dir.join(IDENTITY)) {
            return Err(Error::NotADatabase {
                path: dir,
                reason: "no IDENTITY file: repair needs it to know the configuration".into(),
            });
        }
        let opts = Self::resolve_options(&dir, opts)?;
        opts.validate()?;
        if opts.index_kind() == IndexKind::Hash {
            return Err(Error::InvalidArgument(
                "repair rebuilds an LSM-tree's manifest; a flashkey database has none \
                 (its hash table is rebuilt by open from its checkpoint and bands)"
                    .into(),
            ));
        }
        if !opts.wal {
            return Err(Error::InvalidArgument(
                "repair needs the index's WAL; in log mode (wal = false) the history after \
                 the manifest's checkpoint is only in the value log"
                    .into(),
            ));
        }
        let lock_path = dir.join(LOCK);
        let lock = fs.lock(&lock_path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::WouldBlock {
                Error::Busy {
                    path: lock_path.clone(),
                }
            } else {
                Error::io(&lock_path, e)
            }
        })?;
        let stats = Arc::new(IoStats::default());
        let vlog = opts.layout() == ValueLayout::Vlog;
        let r = crate::index::lsm::repair::repair(&dir, &fs, &stats, opts.num_levels, vlog)?;
        drop(lock);
        let mut rep = RepairReport {
            manifests: r.manifests_read,
            tables_kept: r.tables_kept.len(),
            tables_dropped: r
                .tables_dropped
                .iter()
                .map(|(n, why)| format!("{n:06}.sst: {why}"))
                .collect(),
            tables_obsolete: r.tables_obsolete.len(),
            wals_read: r.wals_read.len(),
            wal_damage: r.wal_damage,
            value_store_state_kept: r.value_store_state_kept,
            entries_read: r.entries_read,
            live_keys: r.live_keys,
            tombstones: r.tombstones,
            last_sequence: r.last_sequence,
            keys_after: 0,
            warnings: Vec::new(),
        };
        if !rep.tables_dropped.is_empty() {
            rep.warnings.push(format!(
                "{} damaged table(s) dropped: their keys may have lost their newest version, \
                 and keys whose newest tombstone they held may show an older value",
                rep.tables_dropped.len()
            ));
        }
        if rep.manifests.is_empty() {
            rep.warnings.push(
                "no manifest survived: a compaction input not yet removed cannot be told from \
                 a live table (sequence numbers still decide between their versions)"
                    .into(),
            );
        }
        if let Some((file, offset)) = r.value_log_tail {
            rep.warnings.push(format!(
                "the value log's tail was set to the oldest record a kept key names (file \
                 {file}, offset {offset}); GC re-estimates its garbage from there"
            ));
        }
        let db = Db::open(&dir, opts)?;
        let mut n = 0u64;
        for r in db.scan(.., false)? {
            r?;
            n += 1;
        }
        rep.keys_after = n;
        db.close()?;
        Ok(rep)
    }
}
