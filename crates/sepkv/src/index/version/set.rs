//! The version set: the current version, the counters that survive restarts
//! (next file number, log number, last sequence) and the manifest that makes
//! them durable.
//!
//! Every change is a [`VersionEdit`] appended to the manifest and synced
//! before it takes effect in memory ("log and apply"). A new manifest starts
//! with a snapshot of the whole version and becomes live when `CURRENT` is
//! atomically switched to name it (temporary file, sync, rename, directory
//! sync). A torn edit at the end of the manifest — a crash during the append
//! — is ignored on recovery: the files it added were not yet referenced and
//! nothing it removed was deleted.
//!
//! Not thread-safe by itself: the database keeps it behind a mutex, which
//! [`log_and_apply`] releases while the manifest is written.

use super::edit::{FileMeta, VersionEdit};
use super::Version;
use crate::error::{Error, IoContext, Result};
use crate::format::record::{RecordReader, RecordWriter};
use crate::fs::{read_all, write_atomic, FileSystem, IoCategory, IoStats};
use crate::index::filename::{manifest_name, CURRENT};
use crate::index::key::compare_internal;
use parking_lot::Mutex;
use std::cmp::Ordering;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

/// Largest file number, and largest file size in bytes, accepted from a
/// manifest (2^48: far beyond any real database, far from overflow).
const MAX_FILE_NUMBER: u64 = 1 << 48;

/// Manifest size past which the next edit starts a new manifest (bytes).
const MANIFEST_ROLL_BYTES: u64 = 16 << 20;

/// See the module docs.
pub struct VersionSet {
    dir: PathBuf,
    fs: Arc<dyn FileSystem>,
    stats: Arc<IoStats>,
    levels: usize,
    current: Arc<Version>,
    live: Vec<Weak<Version>>,
    /// Next file number to hand out.
    pub next_file_number: u64,
    /// WALs with smaller numbers are obsolete.
    pub log_number: u64,
    /// Largest sequence number made durable in the manifest.
    pub last_sequence: u64,
    compact_pointers: Vec<Option<Vec<u8>>>,
    /// The value store's persisted GC state.
    pub value_store_state: Option<Vec<u8>>,
    /// The value store's last persisted garbage table.
    pub value_store_garbage: Option<Vec<u8>>,
    /// Called under the manifest lock for every edit that carries no
    /// garbage table itself: the value store's current table
    /// ([`crate::vstore::ValueStore::garbage_table`]).
    garbage_source: Option<GarbageSource>,
    manifest: Option<RecordWriter>,
    manifest_number: u64,
    /// An edit is between `prepare` and `finish` (its manifest I/O runs
    /// with the set unlocked). A second `prepare` then would start a new
    /// manifest without that edit: every edit goes through the manifest
    /// writer lock of [`log_and_apply`], and this catches one that does not.
    writing: bool,
}

/// Produces the value store's current garbage table (see
/// [`VersionSet::set_garbage_source`]).
pub type GarbageSource = Box<dyn Fn() -> Option<Vec<u8>> + Send + Sync>;

impl VersionSet {
    /// Sets the callback whose table every later edit carries (unless the
    /// edit brings its own). It runs under the manifest lock, so the tables
    /// in the manifest are in the order they were taken; it must not take
    /// the manifest lock itself.
    pub fn set_garbage_source(&mut self, f: GarbageSource) {
        self.garbage_source = Some(f);
    }

    fn blank(dir: &Path, fs: Arc<dyn FileSystem>, stats: Arc<IoStats>, levels: usize) -> Self {
        VersionSet {
            dir: dir.to_path_buf(),
            fs,
            stats,
            levels,
            current: Arc::new(Version::empty(levels)),
            live: Vec::new(),
            next_file_number: 2,
            log_number: 0,
            last_sequence: 0,
            compact_pointers: vec![None; levels],
            value_store_state: None,
            value_store_garbage: None,
            garbage_source: None,
            manifest: None,
            manifest_number: 0,
            writing: false,
        }
    }

    /// A version set for a new, empty database (nothing is written until the
    /// first [`log_and_apply`]).
    pub fn create(dir: &Path, fs: Arc<dyn FileSystem>, stats: Arc<IoStats>, levels: usize) -> Self {
        Self::blank(dir, fs, stats, levels)
    }

    /// Reads `CURRENT` and replays the manifest it names.
    ///
    /// # Errors
    /// `Corruption` (file and offset) for a malformed `CURRENT`, a damaged
    /// manifest record or an edit inconsistent with the version it applies
    /// to; `Io` when a file cannot be read.
    pub fn recover(
        dir: &Path,
        fs: Arc<dyn FileSystem>,
        stats: Arc<IoStats>,
        levels: usize,
    ) -> Result<Self> {
        let mut vs = Self::blank(dir, fs.clone(), stats.clone(), levels);
        let cur_path = dir.join(CURRENT);
        let cur = read_all(fs.as_ref(), &cur_path).ctx(&cur_path)?;
        stats.add_read(IoCategory::Manifest, cur.len() as u64);
        let name = std::str::from_utf8(&cur)
            .ok()
            .and_then(|s| s.strip_suffix('\n'))
            .filter(|s| s.starts_with("MANIFEST-") && !s.contains('/'))
            .ok_or_else(|| Error::corruption(&cur_path, 0, "CURRENT does not name a manifest"))?;
        let mpath = dir.join(name);
        let data = read_all(fs.as_ref(), &mpath).ctx(&mpath)?;
        stats.add_read(IoCategory::Manifest, data.len() as u64);
        let mut reader = RecordReader::new(&data, &mpath);
        let mut version = Version::empty(levels);
        let mut seen_any = false;
        while let Some((off, rec)) = reader.next_record()? {
            let edit = VersionEdit::decode(rec)
                .map_err(|r| Error::corruption(&mpath, off, format!("bad version edit: {r}")))?;
            if !counters_in_range(&edit) {
                return Err(Error::corruption(
                    &mpath,
                    off,
                    "version edit counter out of range",
                ));
            }
            version = apply(&version, &edit, levels).map_err(|r| {
                Error::corruption(&mpath, off, format!("inconsistent version edit: {r}"))
            })?;
            vs.absorb_counters(&edit);
            seen_any = true;
        }
        if !seen_any {
            return Err(Error::corruption(
                &mpath,
                0,
                "manifest holds no complete version edit",
            ));
        }
        // A torn last edit (`LogEnd::Torn`, left in `reader.end()`) is a crash during its append:
        // it never took effect, and the next log_and_apply starts a fresh
        // manifest, so there is nothing to repair here.
        vs.manifest_number = name
            .strip_prefix("MANIFEST-")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| Error::corruption(&cur_path, 0, "bad manifest number"))?;
        vs.next_file_number = vs.next_file_number.max(vs.manifest_number + 1);
        vs.install(version);
        Ok(vs)
    }

    fn absorb_counters(&mut self, edit: &VersionEdit) {
        if let Some(n) = edit.log_number {
            self.log_number = n;
        }
        if let Some(n) = edit.next_file_number {
            self.next_file_number = n;
        }
        if let Some(n) = edit.last_sequence {
            self.last_sequence = n;
        }
        if let Some(st) = &edit.value_store_state {
            self.value_store_state = Some(st.clone());
        }
        if let Some(g) = &edit.value_store_garbage {
            self.value_store_garbage = Some(g.clone());
        }
        for (l, k) in &edit.compact_pointers {
            if *l < self.levels {
                self.compact_pointers[*l] = Some(k.clone());
            }
        }
    }

    fn install(&mut self, v: Version) {
        let v = Arc::new(v);
        self.live.retain(|w| w.strong_count() > 0);
        self.live.push(Arc::downgrade(&v));
        self.current = v;
    }

    /// The current version.
    pub fn current(&self) -> Arc<Version> {
        self.current.clone()
    }

    /// Hands out a new file number.
    pub fn new_file_number(&mut self) -> u64 {
        let n = self.next_file_number;
        self.next_file_number += 1;
        n
    }

    /// The round-robin compaction cursor of `level`.
    pub fn compact_pointer(&self, level: usize) -> Option<&[u8]> {
        self.compact_pointers.get(level)?.as_deref()
    }

    /// Numbers of every SSTable referenced by a version still in use, plus
    /// the manifest's own number.
    pub fn live_files(&self) -> HashSet<u64> {
        let mut s = HashSet::new();
        for v in self.live.iter().filter_map(|w| w.upgrade()) {
            for level in &v.files {
                s.extend(level.iter().map(|f| f.number));
            }
        }
        s
    }

    /// Number of the live manifest.
    pub fn manifest_number(&self) -> u64 {
        self.manifest_number
    }

    /// First step of a manifest write, under the version-set lock: completes
    /// `edit` with the counters, applies it to the current version, and
    /// takes the manifest writer out (or prepares a new manifest's snapshot)
    /// for [`PreparedEdit::write`].
    fn prepare(&mut self, edit: &mut VersionEdit) -> Result<PreparedEdit> {
        assert!(
            !self.writing,
            "a manifest edit was prepared while another was being written"
        );
        if edit.value_store_garbage.is_none() {
            edit.value_store_garbage = self.garbage_source.as_ref().and_then(|f| f());
        }
        edit.next_file_number = Some(self.next_file_number);
        edit.last_sequence = Some(self.last_sequence);
        if edit.log_number.is_none() {
            edit.log_number = Some(self.log_number);
        }
        let v = apply(&self.current, edit, self.levels).map_err(|r| {
            Error::corruption(self.dir.join(manifest_name(self.manifest_number)), 0, r)
        })?;
        let roll = self
            .manifest
            .as_ref()
            .is_none_or(|m| m.len() >= MANIFEST_ROLL_BYTES);
        let target = if roll {
            let number = self.new_file_number();
            let snap = self.snapshot(&v, edit);
            ManifestTarget::New { number, snap }
        } else {
            ManifestTarget::Append(self.manifest.take().expect("manifest open"))
        };
        self.writing = true;
        Ok(PreparedEdit {
            v,
            target,
            dir: self.dir.clone(),
            fs: self.fs.clone(),
            stats: self.stats.clone(),
        })
    }

    /// Last step, under the version-set lock again: on success the manifest
    /// writer goes back and the version becomes current; on failure nothing
    /// changes in memory but the manifest, which the next edit starts anew.
    fn finish(&mut self, p: PreparedEdit, edit: &VersionEdit, r: Result<Written>) -> Result<()> {
        self.writing = false;
        match r {
            Ok(Written { writer, number }) => {
                self.manifest = Some(writer);
                if let Some(n) = number {
                    self.manifest_number = n;
                }
                // Numbers handed out while the edit was written are above
                // the one it recorded: never go back to it.
                let next = self.next_file_number;
                self.absorb_counters(edit);
                self.next_file_number = self.next_file_number.max(next);
                self.install(p.v);
                Ok(())
            }
            Err(e) => {
                self.manifest = None;
                Err(e)
            }
        }
    }

    /// The edit that starts a new manifest: a snapshot of `v` and the
    /// counters of `edit`.
    fn snapshot(&self, v: &Version, edit: &VersionEdit) -> VersionEdit {
        let mut snap = VersionEdit {
            log_number: edit.log_number,
            next_file_number: Some(self.next_file_number),
            last_sequence: edit.last_sequence,
            value_store_state: edit
                .value_store_state
                .clone()
                .or_else(|| self.value_store_state.clone()),
            value_store_garbage: edit
                .value_store_garbage
                .clone()
                .or_else(|| self.value_store_garbage.clone()),
            ..Default::default()
        };
        for (l, files) in v.files.iter().enumerate() {
            for f in files {
                snap.added.push((l, (**f).clone()));
                if let Some(c) = v.counts.get(&f.number) {
                    snap.table_counts.push((f.number, *c));
                }
            }
        }
        for (l, k) in self.compact_pointers.iter().enumerate() {
            if let Some(k) = k {
                snap.compact_pointers.push((l, k.clone()));
            }
        }
        snap.compact_pointers
            .extend(edit.compact_pointers.iter().cloned());
        snap
    }
}

/// Logs `edit` in the manifest and makes the resulting version current,
/// with the version-set lock released while the manifest is written and
/// synced (LevelDB's `LogAndApply`), so that threads needing a file number
/// or the current version do not wait for that I/O. `writer` lets one
/// manifest write run at a time; every edit must go through it, and so must
/// anything that judges manifest files (a new manifest exists on disk
/// before the set names it). `before` runs under both locks just before
/// the edit is completed: state taken there is in manifest order.
///
/// Returns the new current version.
///
/// # Errors
/// `Corruption` if the edit does not apply (a bug); `Io` if the manifest
/// cannot be written, in which case nothing changed in memory and the
/// caller must treat the database as poisoned.
pub fn log_and_apply(
    set: &Mutex<VersionSet>,
    writer: &Mutex<()>,
    edit: &mut VersionEdit,
    before: impl FnOnce(&mut VersionSet, &mut VersionEdit),
) -> Result<Arc<Version>> {
    let _one = writer.lock();
    let p = {
        let mut vs = set.lock();
        before(&mut vs, edit);
        vs.prepare(edit)?
    };
    let mut p = p;
    // Only this thread touches the manifest now: the set's writer is
    // taken out, and a new manifest is named in the set only by `finish`.
    let r = p.write(edit);
    let mut vs = set.lock();
    vs.finish(p, edit, r)?;
    Ok(vs.current())
}

/// Where a prepared edit goes.
enum ManifestTarget {
    /// The live manifest, taken out of the set while it is written.
    Append(RecordWriter),
    /// A new manifest of this number, starting with this snapshot.
    New { number: u64, snap: VersionEdit },
}

/// An edit applied in memory but not yet logged (see [`log_and_apply`]).
struct PreparedEdit {
    v: Version,
    target: ManifestTarget,
    dir: PathBuf,
    fs: Arc<dyn FileSystem>,
    stats: Arc<IoStats>,
}

/// A logged edit: the manifest writer, and the new manifest's number when
/// one was started.
struct Written {
    writer: RecordWriter,
    number: Option<u64>,
}

impl PreparedEdit {
    /// The manifest I/O: appends and syncs the edit, or writes a new
    /// manifest and switches `CURRENT` to it. No lock is needed.
    fn write(&mut self, edit: &VersionEdit) -> Result<Written> {
        match std::mem::replace(
            &mut self.target,
            ManifestTarget::New {
                number: 0,
                snap: VersionEdit::default(),
            },
        ) {
            ManifestTarget::Append(mut m) => {
                m.add_record(&edit.encode())?;
                m.sync()?;
                Ok(Written {
                    writer: m,
                    number: None,
                })
            }
            ManifestTarget::New { number, snap } => {
                let w = self.start_manifest(number, &snap)?;
                Ok(Written {
                    writer: w,
                    number: Some(number),
                })
            }
        }
    }

    /// Writes manifest `number` holding `snap`, then switches `CURRENT` to
    /// it; a failed attempt removes the file.
    fn start_manifest(&self, number: u64, snap: &VersionEdit) -> Result<RecordWriter> {
        let name = manifest_name(number);
        let path = self.dir.join(&name);
        let res = (|| -> Result<RecordWriter> {
            let f = self.fs.create(&path).ctx(&path)?;
            let mut w =
                RecordWriter::new(f, path.clone(), self.stats.clone(), IoCategory::Manifest);
            w.add_record(&snap.encode())?;
            w.sync()?;
            self.fs.sync_dir(&self.dir).ctx(&self.dir)?;
            let cur = self.dir.join(CURRENT);
            let body = format!("{name}\n");
            write_atomic(self.fs.as_ref(), &cur, body.as_bytes()).ctx(&cur)?;
            self.stats
                .add_written(IoCategory::Manifest, body.len() as u64);
            Ok(w)
        })();
        if res.is_err() {
            let _ = self.fs.remove(&path);
        }
        res
    }
}

/// Whether the counters of an edit read from disk lie within their ranges
/// (sequence numbers within 56 bits, file numbers and sizes within
/// `MAX_FILE_NUMBER`); only such counters are trusted, so that nothing
/// computed from them (next numbers, level sizes) can overflow.
pub fn counters_in_range(edit: &VersionEdit) -> bool {
    edit.last_sequence
        .is_none_or(|s| s <= crate::index::key::MAX_SEQ)
        && edit.next_file_number.is_none_or(|n| n <= MAX_FILE_NUMBER)
        && edit.log_number.is_none_or(|n| n <= MAX_FILE_NUMBER)
        && edit
            .added
            .iter()
            .all(|(_, f)| f.number <= MAX_FILE_NUMBER && f.size <= MAX_FILE_NUMBER)
}

/// Applies `edit` to `base`; `Err(reason)` when inconsistent.
pub fn apply(base: &Version, edit: &VersionEdit, levels: usize) -> Result<Version, String> {
    let mut v = base.clone();
    for &(l, n) in &edit.deleted {
        let files = v
            .files
            .get_mut(l)
            .ok_or_else(|| format!("level {l} out of range"))?;
        let before = files.len();
        files.retain(|f| f.number != n);
        if files.len() == before {
            return Err(format!("deleted file {n} is not in level {l}"));
        }
        v.counts.remove(&n);
    }
    for (l, f) in &edit.added {
        if *l >= levels {
            return Err(format!("level {l} out of range"));
        }
        // Pickers and lookups take a file's range as `[smallest, largest]`.
        if compare_internal(&f.smallest, &f.largest) == Ordering::Greater {
            return Err(format!(
                "file {} has its smallest key above its largest",
                f.number
            ));
        }
        v.files[*l].push(Arc::new(f.clone()));
    }
    // Counts of a file no level holds (none is written) are ignored.
    if !edit.table_counts.is_empty() {
        let live: HashSet<u64> = v.files.iter().flatten().map(|f| f.number).collect();
        for (n, c) in &edit.table_counts {
            if live.contains(n) {
                v.counts.insert(*n, *c);
            }
        }
    }
    for (l, files) in v.files.iter_mut().enumerate() {
        if l == 0 {
            files.sort_by_key(|f| f.number);
        } else {
            files.sort_by(|a, b| compare_internal(&a.smallest, &b.smallest));
            for w in files.windows(2) {
                if compare_internal(&w[0].largest, &w[1].smallest) != Ordering::Less {
                    return Err(format!(
                        "files {} and {} overlap in level {l}",
                        w[0].number, w[1].number
                    ));
                }
            }
        }
    }
    Ok(v)
}

/// Total size of `files` (bytes; saturates rather than overflow).
pub fn total_size(files: &[Arc<FileMeta>]) -> u64 {
    files.iter().fold(0, |n, f| n.saturating_add(f.size))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::FaultFs;

    /// File numbers handed out while an edit is being logged (the set is
    /// unlocked then) are never handed out again once it is installed.
    #[test]
    fn numbers_handed_out_during_a_manifest_write_stay_used() {
        let fs: Arc<dyn FileSystem> = Arc::new(FaultFs::new());
        fs.create_dir_all(Path::new("/vs")).unwrap();
        let mut vs = VersionSet::create(Path::new("/vs"), fs, Arc::default(), 7);
        for _ in 0..2 {
            // The first edit starts a manifest, the second appends to it.
            let mut edit = VersionEdit::default();
            let mut p = vs.prepare(&mut edit).unwrap();
            let during = vs.new_file_number();
            let r = p.write(&edit);
            vs.finish(p, &edit, r).unwrap();
            assert!(vs.new_file_number() > during);
        }
        let recovered =
            VersionSet::recover(Path::new("/vs"), vs.fs.clone(), Arc::default(), 7).unwrap();
        assert_eq!(recovered.manifest_number(), vs.manifest_number());
    }

    /// Table counts follow their files: kept by a snapshot edit (a new
    /// manifest), dropped with the file, ignored for a file no level holds.
    #[test]
    fn table_counts_follow_their_files() {
        use crate::index::key::{internal_key, ValueType};
        use crate::index::version::TableCounts;
        let meta = |n: u64, k: &[u8]| FileMeta {
            number: n,
            size: 100,
            smallest: internal_key(k, 2, ValueType::Value),
            largest: internal_key(k, 1, ValueType::Deletion),
        };
        let c = TableCounts {
            entries: 2,
            deletions: 1,
            shadowed: 1,
            largest_seq: 2,
        };
        let add = VersionEdit {
            added: vec![(2, meta(7, b"a")), (2, meta(8, b"b"))],
            table_counts: vec![(7, c), (9, c)],
            ..Default::default()
        };
        let v = apply(&Version::empty(4), &add, 4).unwrap();
        assert_eq!(v.counts.len(), 1);
        assert_eq!(v.counts.get(&7), Some(&c));
        let fs: Arc<dyn FileSystem> = Arc::new(FaultFs::new());
        let vs = VersionSet::create(Path::new("/vs"), fs, Arc::default(), 4);
        let snap = vs.snapshot(&v, &VersionEdit::default());
        assert_eq!(snap.table_counts, vec![(7, c)]);
        let again = apply(&Version::empty(4), &snap, 4).unwrap();
        assert_eq!(again.counts, v.counts);
        let del = VersionEdit {
            deleted: vec![(2, 7)],
            ..Default::default()
        };
        assert!(apply(&again, &del, 4).unwrap().counts.is_empty());
    }
}
