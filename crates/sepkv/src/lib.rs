//! sepkv: a persistent key-value storage engine built on key-value
//! separation.
#![deny(missing_docs)]
#![deny(unsafe_code)]

mod db;
pub mod error;
pub mod format;
pub mod fs;
pub mod index;
pub mod options;
pub mod vstore;

pub use db::Snapshot;
pub use error::{Error, Result};
pub use options::{IndexKind, Options, Preset, ReadOptions, ValueLayout, WriteOptions};
