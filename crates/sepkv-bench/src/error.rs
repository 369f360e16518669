//! The harness's error type.
//!
//! Every failure the harness reports names what it was working on: the
//! engine, the file (and line, for traces) or the argument at fault.

use std::path::PathBuf;

/// An error of the benchmark harness.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A command-line value or setting is out of range or unknown.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Two options that cannot be given together; the message names both.
    #[error("{0}")]
    Conflict(String),
    /// The engine or one of its configurations is not available in this build.
    #[error("{0}")]
    Unavailable(String),
    /// An engine operation failed.
    #[error("engine {engine}: {source}")]
    Engine {
        /// The engine's label (for example `sepkv:leveldb`).
        engine: String,
        /// The engine's own error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A file or directory operation of the harness failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A trace file holds a line the harness cannot replay.
    #[error("{}:{line}: {msg}", file.display())]
    Trace {
        /// The trace file.
        file: PathBuf,
        /// 1-based line number.
        line: u64,
        /// What is wrong with the line.
        msg: String,
    },
    /// A worker thread panicked.
    #[error("a benchmark thread panicked: {0}")]
    Panic(String),
}

impl BenchError {
    /// Wraps an engine's error, naming the engine.
    pub fn engine(
        engine: impl Into<String>,
        e: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        BenchError::Engine {
            engine: engine.into(),
            source: Box::new(e),
        }
    }

    /// Wraps an I/O error, naming the path.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        BenchError::Io {
            path: path.into(),
            source,
        }
    }
}

/// Result of harness operations.
pub type Result<T> = std::result::Result<T, BenchError>;
