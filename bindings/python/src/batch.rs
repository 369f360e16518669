//! `sepkv.WriteBatch`: writes applied together, atomically.

use crate::convert::bytes_arg;
use crate::db::Handle;
use crate::errors::IntoPyResult;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use sepkv::WriteBatch;
use std::sync::{Arc, Mutex, MutexGuard};

/// Puts and deletes gathered in memory and applied atomically by
/// `write()`, or when a `with` block that did not raise ends (a block
/// that raises discards them).
#[pyclass(module = "sepkv", name = "WriteBatch", frozen)]
pub struct PyWriteBatch {
    handle: Arc<Handle>,
    batch: Mutex<WriteBatch>,
    sync: bool,
}

impl PyWriteBatch {
    /// An empty batch for `handle`'s database.
    pub fn new(handle: Arc<Handle>, sync: bool) -> Self {
        PyWriteBatch {
            handle,
            batch: Mutex::new(WriteBatch::new()),
            sync,
        }
    }

    fn batch(&self) -> MutexGuard<'_, WriteBatch> {
        self.batch.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[pymethods]
impl PyWriteBatch {
    /// Adds a put of `value` under `key`.
    fn put(&self, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let (k, v) = (bytes_arg(key, "key")?, bytes_arg(value, "value")?);
        self.batch().put(k.as_slice(), v.as_slice()).py()
    }

    /// Adds a delete of `key`.
    fn delete(&self, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let k = bytes_arg(key, "key")?;
        self.batch().delete(k.as_slice()).py()
    }

    /// Drops the writes gathered so far.
    fn clear(&self) {
        self.batch().clear();
    }

    /// Applies the gathered writes atomically (durable on return when the
    /// batch was made with `sync=True`) and empties the batch.
    fn write(&self, py: Python<'_>) -> PyResult<()> {
        self.handle.open_db()?;
        let b = std::mem::take(&mut *self.batch());
        let (h, sync) = (&*self.handle, self.sync);
        py.detach(|| h.write(&b, sync))
    }

    fn __len__(&self) -> usize {
        self.batch().len()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (exc_type, *_rest))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: &Bound<'_, PyAny>,
        _rest: &Bound<'_, PyTuple>,
    ) -> PyResult<bool> {
        if exc_type.is_none() {
            self.write(py)?;
        } else {
            self.clear();
        }
        Ok(false)
    }
}
