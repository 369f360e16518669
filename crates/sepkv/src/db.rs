//! The database facade.

/// A consistent read view (placeholder until the facade lands).
#[derive(Debug)]
pub struct Snapshot {
    pub(crate) seq: u64,
}
