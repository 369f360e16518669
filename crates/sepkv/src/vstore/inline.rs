//! The `inline` layout: no separation, every value stays in the index.

use super::{
    GcOutcome, IndexReader, IndexRelocator, SpaceStats, ValuePointer, ValueRecord, ValueStore,
};
use crate::error::{Error, Result};

/// The layout without a value store: [`ValueStore::separates`] is always
/// false, so the engine never appends to it or reads from it.
#[derive(Debug, Default)]
pub struct InlineStore;

impl ValueStore for InlineStore {
    fn name(&self) -> &'static str {
        "inline"
    }

    fn separates(&self, _len: usize) -> bool {
        false
    }

    fn append(&self, records: &[ValueRecord<'_>]) -> Result<Vec<ValuePointer>> {
        if records.is_empty() {
            return Ok(Vec::new());
        }
        Err(Error::InvalidArgument(
            "the inline layout stores no separated values".into(),
        ))
    }

    fn sync(&self) -> Result<()> {
        Ok(())
    }

    fn needs_sync(&self) -> bool {
        false
    }

    fn contains(&self, _ptr: &ValuePointer) -> bool {
        false
    }

    fn read(&self, _key: &[u8], ptr: &ValuePointer) -> Result<Option<Vec<u8>>> {
        Err(Error::corruption(
            "index",
            ptr.offset,
            "value pointer found in a database with the inline layout",
        ))
    }

    fn space(&self) -> SpaceStats {
        SpaceStats::default()
    }

    fn gc_step(
        &self,
        _index: &dyn IndexReader,
        _relocator: &dyn IndexRelocator,
    ) -> Result<GcOutcome> {
        Ok(GcOutcome::default())
    }
}
