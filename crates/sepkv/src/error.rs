//! The one error type of the crate.
//!
//! Every fallible public function returns [`Result<T>`]. Variants are
//! structured so that callers can react to them: a [`Error::Corruption`]
//! always names the file and the byte offset at which the damage was found,
//! and is never turned into a wrong value or a panic.

use std::path::PathBuf;
use std::sync::Arc;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Errors reported by sepkv.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O error, with the file it happened on.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// File or directory the operation touched.
        path: PathBuf,
        /// The underlying error (shared so the error can be cloned).
        #[source]
        source: Arc<std::io::Error>,
    },
    /// Stored data failed a checksum or a structural check.
    #[error("corruption in {file} at offset {offset}: {reason}")]
    Corruption {
        /// The damaged file.
        file: PathBuf,
        /// Byte offset in `file` of the damaged record, block or field.
        offset: u64,
        /// What was found wrong.
        reason: String,
    },
    /// An argument or option is outside what sepkv accepts.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The directory is not a sepkv database (or is one of another format).
    #[error("{path} is not a sepkv database: {reason}")]
    NotADatabase {
        /// Path that was opened.
        path: PathBuf,
        /// Why it was refused.
        reason: String,
    },
    /// The database was created with a different configuration.
    #[error("configuration mismatch: database has {stored}, open asked for {requested}")]
    ConfigMismatch {
        /// Configuration recorded in the database.
        stored: String,
        /// Configuration passed to `open`.
        requested: String,
    },
    /// Another process (or handle) holds the database lock.
    #[error("database {path} is locked by another process or handle")]
    Busy {
        /// The `LOCK` file.
        path: PathBuf,
    },
    /// The handle was closed.
    #[error("database is closed")]
    Closed,
    /// A write needs more value-store space than `Options::value_capacity`
    /// allows and garbage collection, run first, could not free enough
    /// (the separated values written so far are all live). Nothing of the
    /// refused write was applied; the database stays writable (deletes and
    /// inline writes still go through, and GC can run once data is deleted).
    #[error("value store full: {0}")]
    ValueStoreFull(String),
    /// An earlier write or sync failed; the database refuses further writes
    /// until it is closed and reopened (a failed `fsync` leaves the page
    /// cache in an unknown state, so retrying it is unsafe).
    #[error("database is read-only after an earlier write failure: {0}")]
    Poisoned(String),
    /// The handle was opened with [`crate::Db::open_read_only`]: writes,
    /// flushes, compactions, GC and checkpoints are refused, and nothing
    /// was changed. Unlike [`Error::Poisoned`], nothing failed: open the
    /// database with [`crate::Db::open`] to write.
    #[error("database was opened read-only: {0} is refused")]
    ReadOnly(&'static str),
    /// The database was written by a newer build, in a format this build
    /// cannot read (see the format-version policy in the operations docs).
    #[error(
        "{path} is in format version {found}, newer than the version {supported} this build \
         reads; open it with a build that supports format {found}"
    )]
    FormatTooNew {
        /// The `IDENTITY` file.
        path: PathBuf,
        /// The format version the database records.
        found: u32,
        /// The newest format version this build reads.
        supported: u32,
    },
}

impl Error {
    /// Builds an [`Error::Io`] for `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source: Arc::new(source),
        }
    }

    /// Builds an [`Error::Corruption`].
    pub fn corruption(file: impl Into<PathBuf>, offset: u64, reason: impl Into<String>) -> Self {
        Error::Corruption {
            file: file.into(),
            offset,
            reason: reason.into(),
        }
    }

    /// True for [`Error::Corruption`].
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corruption { .. })
    }

    /// True when the error is an I/O error reporting a full device (ENOSPC).
    pub fn is_no_space(&self) -> bool {
        match self {
            Error::Io { source, .. } => {
                source.kind() == std::io::ErrorKind::StorageFull
                    || source.raw_os_error() == Some(28)
            }
            _ => false,
        }
    }
}

/// Extension to attach a path to `std::io::Result`.
pub(crate) trait IoContext<T> {
    fn ctx(self, path: &std::path::Path) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, path: &std::path::Path) -> Result<T> {
        self.map_err(|e| Error::io(path, e))
    }
}
