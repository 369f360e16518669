//! `Db::verify` for the LSM-tree: the manifest, the current WAL and every
//! live SSTable.

use super::LsmIndex;
use crate::batch::decode_batch;
use crate::error::Error;
use crate::format::record::RecordReader;
use crate::fs::{read_all, IoCategory};
use crate::index::filename::CURRENT;
use crate::index::version::VersionEdit;
use crate::report::VerifyReport;

impl LsmIndex {
    /// Checks the manifest `CURRENT` names (every edit decodes), the
    /// current WAL (what is handed to the operating system) and every block
    /// of every live SSTable; adds the faults to `rep`.
    pub(super) fn verify_files(&self, rep: &mut VerifyReport) {
        let (dir, fs) = (&self.shared.dir, &self.shared.fs);
        // Manifest.
        let cur = dir.join(CURRENT);
        match read_all(fs.as_ref(), &cur) {
            Err(e) => rep.faults.push(Error::io(&cur, e)),
            Ok(c) => {
                let name = String::from_utf8_lossy(&c).trim_end().to_string();
                let mpath = dir.join(&name);
                match read_all(fs.as_ref(), &mpath) {
                    Err(e) => rep.faults.push(Error::io(&mpath, e)),
                    Ok(data) => {
                        let mut r = RecordReader::new(&data, &mpath);
                        loop {
                            match r.next_record() {
                                Ok(Some((off, rec))) => {
                                    if let Err(reason) = VersionEdit::decode(rec) {
                                        rep.faults.push(Error::corruption(&mpath, off, reason));
                                    }
                                    rep.manifest_edits += 1;
                                }
                                Ok(None) => break,
                                Err(e) => {
                                    rep.faults.push(e);
                                    break;
                                }
                            }
                        }
                    }
                }
            }
        }
        // Current WAL: only the records already handed to the OS, up to the
        // length it had then. Past it, writers append while the file is
        // read (and a preallocated WAL has its size already), so a record
        // there may be caught half-copied.
        let wal = self.wal.lock().as_mut().map(|w| {
            let _ = w.log.flush();
            (w.log.path().to_path_buf(), w.log.len(), w.number)
        });
        if let Some((path, len, number)) = wal {
            if let Ok(data) = read_all(fs.as_ref(), &path) {
                let data = &data[..usize::try_from(len).map_or(data.len(), |l| l.min(data.len()))];
                let mut r = RecordReader::for_log(data, &path, number);
                loop {
                    match r.next_record() {
                        // A seal (`super::PrevWal`): no batch.
                        Ok(Some((_, []))) => {}
                        Ok(Some((off, rec))) => {
                            if decode_batch(rec).is_none() {
                                rep.faults.push(Error::corruption(
                                    &path,
                                    off,
                                    "malformed write batch in WAL",
                                ));
                            }
                            rep.wal_records += 1;
                        }
                        Ok(None) => break,
                        Err(e) => {
                            rep.faults.push(e);
                            break;
                        }
                    }
                }
            }
        }
        // SSTables.
        let v = self.sv.read().version.clone();
        for f in v.files.iter().flatten() {
            rep.tables += 1;
            let res = self
                .table_cache
                .get(f.number, f.size, IoCategory::UserRead)
                .and_then(|t| t.verify());
            match res {
                Ok(n) => rep.entries += n,
                Err(e) => rep.faults.push(e),
            }
        }
    }
}
