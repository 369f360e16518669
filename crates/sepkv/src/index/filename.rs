//! Names of the files in a database directory.
//!
//! ```text
//! IDENTITY          format version and configuration (index, value layout)
//! LOCK              held by the process that has the database open
//! CURRENT           name of the live manifest, switched atomically by rename
//! MANIFEST-NNNNNN   version edits
//! NNNNNN.log        write-ahead log
//! NNNNNN.sst        SSTable
//! *.tmp             temporary files, removed on open
//! ```

use std::path::{Path, PathBuf};

/// Kinds of files in a database directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// `IDENTITY`.
    Identity,
    /// `LOCK`.
    Lock,
    /// `CURRENT`.
    Current,
    /// `MANIFEST-NNNNNN`.
    Manifest(u64),
    /// `NNNNNN.log`.
    Wal(u64),
    /// `NNNNNN.sst`.
    Table(u64),
    /// `*.tmp`.
    Temp,
}

/// Name of the identity file.
pub const IDENTITY: &str = "IDENTITY";
/// Name of the lock file.
pub const LOCK: &str = "LOCK";
/// Name of the current-manifest pointer.
pub const CURRENT: &str = "CURRENT";

/// Path of WAL `n`.
pub fn wal_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.log"))
}

/// Path of SSTable `n`.
pub fn table_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.sst"))
}

/// File name of manifest `n`.
pub fn manifest_name(n: u64) -> String {
    format!("MANIFEST-{n:06}")
}

/// Classifies a file name; `None` for names sepkv does not own.
pub fn parse(name: &str) -> Option<FileKind> {
    match name {
        IDENTITY => return Some(FileKind::Identity),
        LOCK => return Some(FileKind::Lock),
        CURRENT => return Some(FileKind::Current),
        _ => {}
    }
    if name.ends_with(".tmp") {
        return Some(FileKind::Temp);
    }
    if let Some(n) = name.strip_prefix("MANIFEST-") {
        return n.parse().ok().map(FileKind::Manifest);
    }
    let (stem, ext) = name.split_once('.')?;
    let n: u64 = stem.parse().ok()?;
    match ext {
        "log" => Some(FileKind::Wal(n)),
        "sst" => Some(FileKind::Table(n)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_roundtrip() {
        let d = Path::new("db");
        assert_eq!(
            parse(wal_path(d, 7).file_name().unwrap().to_str().unwrap()),
            Some(FileKind::Wal(7))
        );
        assert_eq!(
            parse(table_path(d, 12).file_name().unwrap().to_str().unwrap()),
            Some(FileKind::Table(12))
        );
        assert_eq!(parse(&manifest_name(3)), Some(FileKind::Manifest(3)));
        assert_eq!(parse("CURRENT.tmp"), Some(FileKind::Temp));
        assert_eq!(parse("notes.txt"), None);
    }
}
