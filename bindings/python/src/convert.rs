//! Python arguments to engine arguments: bytes-like keys and values, and
//! the `start` / `stop` / `prefix` bounds of an iteration.
//!
//! A `bytes` argument is read in place (it is immutable, and the caller's
//! reference keeps it alive while the GIL is released); a `bytearray` or
//! a `memoryview` is copied first, since another thread may change it once
//! the GIL is released.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyMemoryView};
use std::ops::Bound as RangeBound;

/// A bytes-like argument: borrowed from a `bytes` object or copied.
pub enum BytesArg<'py> {
    /// A `bytes` object, read in place.
    Bytes(Bound<'py, PyBytes>),
    /// A copy of a mutable buffer.
    Owned(Vec<u8>),
}

impl BytesArg<'_> {
    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        match self {
            BytesArg::Bytes(b) => b.as_bytes(),
            BytesArg::Owned(v) => v,
        }
    }
}

/// Extracts a bytes-like argument (`bytes`, `bytearray`, `memoryview`);
/// anything else is a `TypeError` naming `what` (`key`, `value`, ...).
pub fn bytes_arg<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<BytesArg<'py>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(BytesArg::Bytes(b.clone()));
    }
    if let Ok(b) = obj.cast::<PyByteArray>() {
        return Ok(BytesArg::Owned(b.to_vec()));
    }
    if obj.is_instance_of::<PyMemoryView>() {
        let b = obj.call_method0("tobytes")?;
        return Ok(BytesArg::Bytes(b.cast_into::<PyBytes>()?));
    }
    Err(PyTypeError::new_err(format!(
        "{what} must be bytes, bytearray or memoryview, not {}",
        obj.get_type().name()?
    )))
}

/// An optional bytes-like argument (`None` is `None`).
pub fn opt_bytes_arg(obj: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Option<Vec<u8>>> {
    match obj {
        None => Ok(None),
        Some(o) if o.is_none() => Ok(None),
        Some(o) => Ok(Some(bytes_arg(o, what)?.as_slice().to_vec())),
    }
}

/// The smallest key after every key starting with `prefix`, or `None`
/// when there is none (the prefix is empty or all `0xff`).
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last != 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// A key range as the engine takes it: `(lower, upper)` bounds.
pub type EngineRange = (RangeBound<Vec<u8>>, RangeBound<Vec<u8>>);

/// The keys an iteration covers: `[lower, upper)`, or nothing at all.
pub enum KeySpan {
    /// `[lower, upper)`; `None` is unbounded.
    Range(Option<Vec<u8>>, Option<Vec<u8>>),
    /// No key can match (the bounds cross, or miss the prefix).
    Empty,
}

impl KeySpan {
    /// The span of `start` (inclusive), `stop` (exclusive) and `prefix`
    /// together.
    pub fn new(
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
        prefix: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<KeySpan> {
        let mut lower = opt_bytes_arg(start, "start")?;
        let mut upper = opt_bytes_arg(stop, "stop")?;
        if let Some(p) = opt_bytes_arg(prefix, "prefix")? {
            if lower.as_ref().is_none_or(|l| *l < p) {
                lower = Some(p.clone());
            }
            if let Some(e) = prefix_end(&p) {
                if upper.as_ref().is_none_or(|u| *u > e) {
                    upper = Some(e);
                }
            }
        }
        if let (Some(l), Some(u)) = (&lower, &upper) {
            if l >= u {
                return Ok(KeySpan::Empty);
            }
        }
        Ok(KeySpan::Range(lower, upper))
    }

    /// The span as a range the engine takes, or `None` when empty.
    pub fn range(self) -> Option<EngineRange> {
        match self {
            KeySpan::Empty => None,
            KeySpan::Range(l, u) => Some((
                l.map_or(RangeBound::Unbounded, RangeBound::Included),
                u.map_or(RangeBound::Unbounded, RangeBound::Excluded),
            )),
        }
    }
}
