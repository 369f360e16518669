//! The exception classes and the mapping from engine errors to them.
//!
//! `sepkv.Error` is the base of every exception the module raises for an
//! engine error; each error kind of the engine has a subclass. `IoError`
//! is also an `OSError`, with `errno` set from the operating system's
//! error when there is one. `ConfigMismatchError` is an
//! `InvalidArgumentError` (opening a database with another preset is an
//! invalid argument). An engine error kind without a class of its own is
//! raised as `Error`.

use pyo3::exceptions::{PyException, PyOSError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

pyo3::create_exception!(
    sepkv,
    Error,
    PyException,
    "Base class of every error the engine reports; the message is the engine's."
);
pyo3::create_exception!(
    sepkv,
    CorruptionError,
    Error,
    "Stored data failed a checksum or a structural check (the message names file and byte offset)."
);
pyo3::create_exception!(
    sepkv,
    InvalidArgumentError,
    Error,
    "An argument or option is outside what the engine accepts (a key or value over the limit, an option out of range)."
);
pyo3::create_exception!(
    sepkv,
    ConfigMismatchError,
    InvalidArgumentError,
    "The database was created with another configuration (preset) than the one asked for."
);
pyo3::create_exception!(
    sepkv,
    ValueStoreFullError,
    Error,
    "A write needs more value-store space than `value_capacity` allows; nothing of it was applied."
);
pyo3::create_exception!(
    sepkv,
    LockedError,
    Error,
    "Another process (or another open handle) holds the database."
);
pyo3::create_exception!(sepkv, ClosedError, Error, "The database handle was closed.");
pyo3::create_exception!(
    sepkv,
    NotADatabaseError,
    Error,
    "The directory is not a sepkv database."
);
pyo3::create_exception!(
    sepkv,
    PoisonedError,
    Error,
    "An earlier write or sync failed; writes are refused until the database is reopened."
);
pyo3::create_exception!(
    sepkv,
    ReadOnlyError,
    Error,
    "The database was opened with read_only=True and the call would change it."
);
pyo3::create_exception!(
    sepkv,
    FormatTooNewError,
    Error,
    "The database was written by a newer build in a format this build cannot read."
);

/// `IoError(Error, OSError)`: made with `type()` at import, as a class
/// with two bases cannot be declared by `create_exception!`.
static IO_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

fn io_error_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    IO_ERROR
        .get_or_try_init(py, || {
            let bases = PyTuple::new(
                py,
                [
                    py.get_type::<Error>().into_any(),
                    py.get_type::<PyOSError>().into_any(),
                ],
            )?;
            let ns = PyDict::new(py);
            ns.set_item("__module__", "sepkv")?;
            ns.set_item(
                "__doc__",
                "An operating-system I/O error (also an OSError: errno is the \
                 system's error number, or None).",
            )?;
            let builtins = py.import("builtins")?;
            let ty = builtins
                .getattr("type")?
                .call1(("IoError", bases, ns))?
                .cast_into::<PyType>()?;
            Ok(ty.unbind())
        })
        .map(|t| t.bind(py))
}

/// Registers every exception class in the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("CorruptionError", py.get_type::<CorruptionError>())?;
    m.add(
        "InvalidArgumentError",
        py.get_type::<InvalidArgumentError>(),
    )?;
    m.add("ConfigMismatchError", py.get_type::<ConfigMismatchError>())?;
    m.add("ValueStoreFullError", py.get_type::<ValueStoreFullError>())?;
    m.add("LockedError", py.get_type::<LockedError>())?;
    m.add("ClosedError", py.get_type::<ClosedError>())?;
    m.add("NotADatabaseError", py.get_type::<NotADatabaseError>())?;
    m.add("PoisonedError", py.get_type::<PoisonedError>())?;
    m.add("ReadOnlyError", py.get_type::<ReadOnlyError>())?;
    m.add("FormatTooNewError", py.get_type::<FormatTooNewError>())?;
    m.add("IoError", io_error_type(py)?)?;
    Ok(())
}

/// The Python exception for an engine error, carrying the engine's message.
pub fn to_py(e: sepkv::Error) -> PyErr {
    let msg = e.to_string();
    match e {
        sepkv::Error::Io { source, .. } => Python::attach(|py| {
            let ty = match io_error_type(py) {
                Ok(t) => t,
                Err(err) => return err,
            };
            // OSError(errno, strerror) sets `errno` and `strerror`.
            match source.raw_os_error() {
                Some(errno) => PyErr::from_type(ty.clone(), (errno, msg)),
                None => PyErr::from_type(ty.clone(), (msg,)),
            }
        }),
        sepkv::Error::Corruption { .. } => CorruptionError::new_err(msg),
        sepkv::Error::InvalidArgument(_) => InvalidArgumentError::new_err(msg),
        sepkv::Error::NotADatabase { .. } => NotADatabaseError::new_err(msg),
        sepkv::Error::ConfigMismatch { .. } => ConfigMismatchError::new_err(msg),
        sepkv::Error::Busy { .. } => LockedError::new_err(msg),
        sepkv::Error::Closed => ClosedError::new_err(msg),
        sepkv::Error::ValueStoreFull(_) => ValueStoreFullError::new_err(msg),
        sepkv::Error::Poisoned(_) => PoisonedError::new_err(msg),
        sepkv::Error::ReadOnly(_) => ReadOnlyError::new_err(msg),
        sepkv::Error::FormatTooNew { .. } => FormatTooNewError::new_err(msg),
        _ => Error::new_err(msg),
    }
}

/// `ClosedError` for a call on a closed handle, in the engine's words.
pub fn closed() -> PyErr {
    to_py(sepkv::Error::Closed)
}

/// Maps an engine result to a Python one.
pub trait IntoPyResult<T> {
    /// The value, or the engine error as its Python exception.
    fn py(self) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for sepkv::Result<T> {
    fn py(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}
