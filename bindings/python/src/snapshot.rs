//! `sepkv.Snapshot`: a consistent read view owned by Python.
//!
//! The engine's [`Snapshot`] borrows its [`Db`]; the Python object owns
//! the database's handle and the snapshot borrowing it together (a
//! `self_cell`), so the snapshot lives as long as Python keeps it and is
//! released by `release()` or at the end of a `with` block.

use crate::convert::{bytes_arg, BytesArg, KeySpan};
use crate::db::{keys_arg, values_list, Handle};
use crate::errors::IntoPyResult;
use crate::iter::{Mode, PyIterator};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};
use sepkv::Snapshot;
use std::sync::{Arc, RwLock};

type BorrowedSnapshot<'a> = Snapshot<'a>;

self_cell::self_cell!(
    struct OwnedSnapshot {
        owner: Arc<Handle>,
        #[covariant]
        dependent: BorrowedSnapshot,
    }
);

/// A consistent read view of the database as of its creation.
#[pyclass(module = "sepkv", name = "Snapshot", frozen)]
pub struct PySnapshot {
    handle: Arc<Handle>,
    snap: RwLock<Option<OwnedSnapshot>>,
}

impl PySnapshot {
    /// A snapshot of `handle`'s database as of now (call without the GIL).
    pub fn new(handle: Arc<Handle>) -> PyResult<PySnapshot> {
        let snap = OwnedSnapshot::try_new(handle.clone(), |h| h.open_db()?.snapshot().py())?;
        Ok(PySnapshot {
            handle,
            snap: RwLock::new(Some(snap)),
        })
    }

    /// Runs `f` on the snapshot, without the GIL.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Snapshot<'_>) -> sepkv::Result<T> + Send,
    ) -> PyResult<T> {
        self.handle.open_db()?;
        py.detach(|| {
            let g = self.snap.read().unwrap_or_else(|e| e.into_inner());
            match g.as_ref() {
                Some(s) => f(s.borrow_dependent()).py(),
                None => Err(crate::errors::Error::new_err("snapshot was released")),
            }
        })
    }

    fn scan(
        &self,
        py: Python<'_>,
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
        prefix: Option<&Bound<'_, PyAny>>,
        reverse: bool,
        mode: Mode,
    ) -> PyResult<PyIterator> {
        let span = KeySpan::new(start, stop, prefix)?;
        let scan = match span.range() {
            None => {
                self.with(py, |_| Ok(()))?;
                None
            }
            Some(r) => Some(self.with(py, |s| s.scan(r, reverse))?),
        };
        Ok(PyIterator::new(self.handle.clone(), scan, mode))
    }
}

#[pymethods]
impl PySnapshot {
    /// The sequence number the snapshot reads at.
    #[getter]
    fn sequence(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |s| Ok(s.sequence()))
    }

    /// The value of `key` as of the snapshot, or `default`.
    #[pyo3(signature = (key, default=None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let key = bytes_arg(key, "key")?;
        let k = key.as_slice();
        match self.with(py, |s| s.get(k))? {
            Some(v) => Ok(Some(PyBytes::new(py, &v).into_any())),
            None => Ok(default),
        }
    }

    /// The values of `keys` as of the snapshot (`None` for missing ones).
    fn multi_get<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let keys = keys_arg(keys)?;
        let slices: Vec<&[u8]> = keys.iter().map(BytesArg::as_slice).collect();
        let values = self.with(py, |s| s.multi_get(&slices))?;
        values_list(py, values)
    }

    /// As `Db.iterator`, as of the snapshot.
    #[pyo3(signature = (start=None, stop=None, prefix=None, reverse=false, include_value=true))]
    fn iterator(
        &self,
        py: Python<'_>,
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
        prefix: Option<&Bound<'_, PyAny>>,
        reverse: bool,
        include_value: bool,
    ) -> PyResult<PyIterator> {
        let mode = if include_value {
            Mode::Items
        } else {
            Mode::Keys
        };
        self.scan(py, start, stop, prefix, reverse, mode)
    }

    /// As `Db.items`, as of the snapshot.
    #[pyo3(signature = (start=None, stop=None, prefix=None, reverse=false))]
    fn items(
        &self,
        py: Python<'_>,
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
        prefix: Option<&Bound<'_, PyAny>>,
        reverse: bool,
    ) -> PyResult<PyIterator> {
        self.scan(py, start, stop, prefix, reverse, Mode::Items)
    }

    /// As `Db.keys`, as of the snapshot.
    #[pyo3(signature = (start=None, stop=None, prefix=None, reverse=false))]
    fn keys(
        &self,
        py: Python<'_>,
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
        prefix: Option<&Bound<'_, PyAny>>,
        reverse: bool,
    ) -> PyResult<PyIterator> {
        self.scan(py, start, stop, prefix, reverse, Mode::Keys)
    }

    /// As `Db.values`, as of the snapshot.
    #[pyo3(signature = (start=None, stop=None, prefix=None, reverse=false))]
    fn values(
        &self,
        py: Python<'_>,
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
        prefix: Option<&Bound<'_, PyAny>>,
        reverse: bool,
    ) -> PyResult<PyIterator> {
        self.scan(py, start, stop, prefix, reverse, Mode::Values)
    }

    /// Releases the snapshot (iterators made from it keep their view).
    /// Later reads through it raise `sepkv.Error`; releasing twice does
    /// nothing.
    fn release(&self, py: Python<'_>) {
        let s = py.detach(|| self.snap.write().unwrap_or_else(|e| e.into_inner()).take());
        drop(s);
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> bool {
        self.release(py);
        false
    }
}
