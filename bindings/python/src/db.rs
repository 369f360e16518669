//! `sepkv.Db`: one open database.
//!
//! The handle is shared by every object made from it (write batches,
//! snapshots, iterators) through an `Arc<Handle>`; `close()` closes the
//! engine's database at once (releasing its lock) and marks the handle
//! closed, so every later call on any of those objects raises
//! `ClosedError`. Every engine call runs with the GIL released, so threads
//! sharing one `Db` read and write in parallel, as the engine allows.

use crate::batch::PyWriteBatch;
use crate::convert::{bytes_arg, opt_bytes_arg, BytesArg, KeySpan};
use crate::errors::{closed, IntoPyResult};
use crate::iter::{Mode, PyIterator};
use crate::snapshot::PySnapshot;
use pyo3::exceptions::PyKeyError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use sepkv::{Db, Options, Preset, WriteBatch, WriteOptions};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// An open database and whether `close()` was called on it.
pub struct Handle {
    pub db: Db,
    closed: AtomicBool,
}

impl Handle {
    /// The database, or `ClosedError` after `close()`.
    pub fn open_db(&self) -> PyResult<&Db> {
        if self.closed.load(Ordering::Acquire) {
            Err(closed())
        } else {
            Ok(&self.db)
        }
    }

    /// Writes `batch`, durable on return when `sync`.
    pub fn write(&self, batch: &WriteBatch, sync: bool) -> PyResult<()> {
        self.open_db()?.write(batch, WriteOptions { sync }).py()
    }
}

/// A list of `bytes` (or `None`) from the engine's values.
pub fn values_list<'py>(
    py: Python<'py>,
    values: Vec<Option<Vec<u8>>>,
) -> PyResult<Bound<'py, PyList>> {
    PyList::new(
        py,
        values.into_iter().map(|v| v.map(|v| PyBytes::new(py, &v))),
    )
}

/// The keys of `keys` (any iterable of bytes-like objects).
pub fn keys_arg<'py>(keys: &Bound<'py, PyAny>) -> PyResult<Vec<BytesArg<'py>>> {
    keys.try_iter()?.map(|k| bytes_arg(&k?, "key")).collect()
}

/// A persistent key-value database.
///
/// `Db(path, preset=None, create_if_missing=True, read_only=False,
/// **options)` opens (or creates) the database in the directory `path`.
/// `preset` is one of `sepkv.PRESETS` (`None`: what the database records,
/// or leveldb for a new one); `options` are engine options by their Rust
/// names (sizes in bytes). Keys and values are bytes-like; reads return
/// `bytes`.
///
/// Raises `LockedError` when another process or handle has the database
/// open, `ConfigMismatchError` for another preset than the recorded one,
/// `NotADatabaseError`, `CorruptionError`, `IoError`,
/// `InvalidArgumentError` for an option out of range, `TypeError` for an
/// unknown option.
#[pyclass(module = "sepkv", name = "Db", frozen)]
pub struct PyDb {
    handle: Arc<Handle>,
    path: PathBuf,
}

#[pymethods]
impl PyDb {
    #[new]
    #[pyo3(signature = (path, preset=None, create_if_missing=true, read_only=false, **options))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        preset: Option<&str>,
        create_if_missing: bool,
        read_only: bool,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyDb> {
        let mut opts = match preset {
            Some(p) => Options::preset(p.parse::<Preset>().py()?),
            None => Options::default(),
        };
        opts.create_if_missing = create_if_missing;
        crate::options::apply(&mut opts, options)?;
        let p = path.clone();
        let db = py
            .detach(move || {
                if read_only {
                    Db::open_read_only(&p, opts)
                } else {
                    Db::open(&p, opts)
                }
            })
            .py()?;
        Ok(PyDb {
            handle: Arc::new(Handle {
                db,
                closed: AtomicBool::new(false),
            }),
            path,
        })
    }

    /// The database directory.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// True once `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.handle.closed.load(Ordering::Acquire)
    }

    /// The preset the database was created with (its recorded index and
    /// value layout), or `None` for a combination no preset names.
    #[getter]
    fn preset(&self) -> PyResult<Option<&'static str>> {
        let o = self.handle.open_db()?.options();
        Ok(Preset::from_axes(o.index_kind(), o.layout()).map(Preset::name))
    }

    /// Closes the database: flushes what is in memory and releases the
    /// lock. Later calls raise `ClosedError`; closing twice does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if self.handle.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let h = self.handle.clone();
        py.detach(move || h.db.close()).py()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let state = if self.closed() { " closed" } else { "" };
        format!("<sepkv.Db {:?}{state}>", self.path)
    }

    /// The value of `key` (`bytes`), or `default` when it is missing.
    ///
    /// Raises `TypeError` for a key that is not bytes-like,
    /// `InvalidArgumentError` for an empty key or one over 64 KiB,
    /// `CorruptionError`, `IoError`, `ClosedError`.
    #[pyo3(signature = (key, default=None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let key = bytes_arg(key, "key")?;
        let k = key.as_slice();
        let db = self.handle.open_db()?;
        match py.detach(|| db.get(k)).py()? {
            Some(v) => Ok(Some(PyBytes::new(py, &v).into_any())),
            None => Ok(default),
        }
    }

    /// Writes `value` under `key`; with `sync=True` the write is durable
    /// (fsynced) when the call returns.
    ///
    /// Raises `TypeError` for a key or value that is not bytes-like,
    /// `InvalidArgumentError` for an empty key, a key over 64 KiB or a
    /// value over 32 MiB, `ValueStoreFullError`, `ReadOnlyError`,
    /// `PoisonedError`, `IoError`, `ClosedError`.
    #[pyo3(signature = (key, value, sync=false))]
    fn put(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        sync: bool,
    ) -> PyResult<()> {
        let (key, value) = (bytes_arg(key, "key")?, bytes_arg(value, "value")?);
        let (k, v) = (key.as_slice(), value.as_slice());
        let h = &*self.handle;
        let db = h.open_db()?;
        if sync {
            let mut b = WriteBatch::new();
            b.put(k, v).py()?;
            py.detach(|| h.write(&b, true))
        } else {
            py.detach(|| db.put(k, v)).py()
        }
    }

    /// Deletes `key` (no error when it is missing); `sync` as for `put`.
    ///
    /// Raises as `put`.
    #[pyo3(signature = (key, sync=false))]
    fn delete(&self, py: Python<'_>, key: &Bound<'_, PyAny>, sync: bool) -> PyResult<()> {
        let key = bytes_arg(key, "key")?;
        let k = key.as_slice();
        let h = &*self.handle;
        let db = h.open_db()?;
        if sync {
            let mut b = WriteBatch::new();
            b.delete(k).py()?;
            py.detach(|| h.write(&b, true))
        } else {
            py.detach(|| db.delete(k)).py()
        }
    }

    /// The values of `keys`, in order, read at one point in time: a list
    /// of `bytes`, with `None` for each missing key.
    ///
    /// Raises as `get`, for the first key that fails.
    fn multi_get<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let keys = keys_arg(keys)?;
        let slices: Vec<&[u8]> = keys.iter().map(BytesArg::as_slice).collect();
        let db = self.handle.open_db()?;
        let values = py.detach(|| db.multi_get(&slices)).py()?;
        values_list(py, values)
    }

    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let k = bytes_arg(key, "key")?;
        let s = k.as_slice();
        let db = self.handle.open_db()?;
        match py.detach(|| db.get(s)).py()? {
            Some(v) => Ok(PyBytes::new(py, &v)),
            None => Err(PyKeyError::new_err(key.clone().unbind())),
        }
    }

    fn __setitem__(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.put(py, key, value, false)
    }

    fn __delitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        self.delete(py, key, false)
    }

    fn __contains__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let k = bytes_arg(key, "key")?;
        let s = k.as_slice();
        let db = self.handle.open_db()?;
        Ok(py.detach(|| db.get(s)).py()?.is_some())
    }

    /// Iterates over the keys, in order.
    fn __iter__(&self, py: Python<'_>) -> PyResult<PyIterator> {
        self.scan(py, None, None, None, false, Mode::Keys)
    }

    /// `(key, value)` tuples in key order (descending with `reverse`), or
    /// keys alone with `include_value=False`; from `start` (inclusive) to
    /// `stop` (exclusive), of keys beginning with `prefix`. The iterator
    /// reads the database as of its creation.
    ///
    /// Raises `TypeError` for a bound that is not bytes-like; the
    /// iterator raises `CorruptionError` or `IoError` met while reading,
    /// and `ClosedError` once the database is closed.
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

    /// `(key, value)` tuples (as `iterator()`).
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

    /// Keys (as `iterator(include_value=False)`).
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

    /// Values, in key order (as `iterator()`).
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

    /// A batch of writes applied atomically by `write()`, or on leaving a
    /// `with` block that did not raise.
    #[pyo3(signature = (sync=false))]
    fn write_batch(&self, sync: bool) -> PyResult<PyWriteBatch> {
        self.handle.open_db()?;
        Ok(PyWriteBatch::new(self.handle.clone(), sync))
    }

    /// A consistent read view as of now.
    fn snapshot(&self, py: Python<'_>) -> PyResult<PySnapshot> {
        self.handle.open_db()?;
        let h = self.handle.clone();
        py.detach(move || PySnapshot::new(h))
    }

    /// Writes the memtable to an SSTable and waits for it.
    ///
    /// Raises `ReadOnlyError`, `PoisonedError`, `IoError`, `ClosedError`.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let db = self.handle.open_db()?;
        py.detach(|| db.flush()).py()
    }

    /// Compacts the keys from `start` (inclusive) to `stop` (exclusive;
    /// `None` is unbounded) down the index, and waits for it.
    ///
    /// Raises `ReadOnlyError`, `PoisonedError`, `CorruptionError`,
    /// `IoError`, `ClosedError`.
    #[pyo3(signature = (start=None, stop=None))]
    fn compact_range(
        &self,
        py: Python<'_>,
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        use std::ops::Bound as B;
        let lower = opt_bytes_arg(start, "start")?.map_or(B::Unbounded, B::Included);
        let upper = opt_bytes_arg(stop, "stop")?.map_or(B::Unbounded, B::Excluded);
        let db = self.handle.open_db()?;
        py.detach(|| db.compact_range((lower, upper))).py()?;
        Ok(())
    }

    /// Runs value-store garbage collection until the garbage ratio is at
    /// most `target` or, with `None`, one pass over everything written
    /// before the call. Returns a dict: `steps`, `bytes_read`,
    /// `bytes_rewritten`, `bytes_freed` (bytes), `garbage_ratio`.
    /// A no-op for the presets without a value store (leveldb, lwc).
    ///
    /// Raises `ReadOnlyError`, `PoisonedError`, `CorruptionError`,
    /// `IoError`, `ClosedError`.
    #[pyo3(signature = (target=None))]
    fn gc<'py>(&self, py: Python<'py>, target: Option<f64>) -> PyResult<Bound<'py, PyAny>> {
        let db = self.handle.open_db()?;
        let rep = py.detach(|| db.gc(target)).py()?;
        json_to_py(py, &rep)
    }

    /// Checks every live table, the manifest and the write-ahead log.
    /// Returns a dict of counts (`tables`, `entries`, `manifest_edits`,
    /// `wal_records`, `value_records`) when nothing is wrong; raises the
    /// first fault (e.g. `CorruptionError`, naming file and offset) when
    /// something is.
    fn verify<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let db = self.handle.open_db()?;
        let rep = py.detach(|| db.verify()).py()?;
        if let Some(first) = rep.faults.into_iter().next() {
            return Err(crate::errors::to_py(first));
        }
        let d = PyDict::new(py);
        d.set_item("tables", rep.tables)?;
        d.set_item("entries", rep.entries)?;
        d.set_item("manifest_edits", rep.manifest_edits)?;
        d.set_item("wal_records", rep.wal_records)?;
        d.set_item("value_records", rep.value_records)?;
        Ok(d)
    }

    /// A dict of the database's state and counters (the engine's
    /// `DbStats`; byte counts in bytes).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let db = self.handle.open_db()?;
        let s = py.detach(|| db.stats()).py()?;
        json_to_py(py, &s)
    }

    /// Writes a consistent copy of the database into the new directory
    /// `dir` and returns the sequence number it holds.
    ///
    /// Raises `InvalidArgumentError` when `dir` exists, `ReadOnlyError`,
    /// `PoisonedError`, `IoError`, `ClosedError`.
    fn checkpoint(&self, py: Python<'_>, dir: PathBuf) -> PyResult<u64> {
        let db = self.handle.open_db()?;
        py.detach(|| db.checkpoint(&dir)).py()
    }
}

impl PyDb {
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
        let db = self.handle.open_db()?;
        let scan = match span.range() {
            None => None,
            Some(r) => Some(py.detach(|| db.scan(r, reverse)).py()?),
        };
        Ok(PyIterator::new(self.handle.clone(), scan, mode))
    }
}

/// A Python object (dict, list, number) from a serializable report.
pub fn json_to_py<'py, T: serde::Serialize>(py: Python<'py>, v: &T) -> PyResult<Bound<'py, PyAny>> {
    let s = serde_json::to_string(v)
        .map_err(|e| crate::errors::Error::new_err(format!("cannot encode a report: {e}")))?;
    py.import("json")?.call_method1("loads", (s,))
}
