//! `sepkv.Iterator`: a Python iterator over an engine [`Scan`].
//!
//! The scan owns what it reads (and its own registration, so it sees the
//! database as of its creation whatever is written meanwhile). Entries are
//! pulled in batches with the GIL released, growing from one entry to
//! [`MAX_BATCH`] as the iteration goes on, so a caller that takes the
//! first entry alone reads no more than that.

use crate::db::Handle;
use crate::errors::IntoPyResult;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use sepkv::Scan;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// Most entries one batch pulls from the scan.
const MAX_BATCH: usize = 256;

/// What each step of the iteration yields.
#[derive(Clone, Copy)]
pub enum Mode {
    /// `(key, value)` tuples.
    Items,
    /// Keys.
    Keys,
    /// Values.
    Values,
}

struct State {
    scan: Option<Scan>,
    ready: VecDeque<sepkv::Result<(Vec<u8>, Vec<u8>)>>,
    batch: usize,
}

/// An iterator over a key range (see `Db.iterator`).
#[pyclass(module = "sepkv", name = "Iterator")]
pub struct PyIterator {
    handle: Arc<Handle>,
    state: Mutex<State>,
    mode: Mode,
}

impl PyIterator {
    /// An iterator yielding `mode` from `scan` (`None`: nothing).
    pub fn new(handle: Arc<Handle>, scan: Option<Scan>, mode: Mode) -> Self {
        PyIterator {
            handle,
            state: Mutex::new(State {
                scan,
                ready: VecDeque::new(),
                batch: 1,
            }),
            mode,
        }
    }
}

#[pymethods]
impl PyIterator {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.handle.open_db()?;
        let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        if state.ready.is_empty() {
            let Some(scan) = state.scan.as_mut() else {
                return Ok(None);
            };
            let n = state.batch;
            let ready = &mut state.ready;
            let ended = py.detach(|| {
                for _ in 0..n {
                    match scan.next() {
                        Some(Ok(kv)) => ready.push_back(Ok(kv)),
                        Some(Err(e)) => {
                            ready.push_back(Err(e));
                            return true;
                        }
                        None => return true,
                    }
                }
                false
            });
            state.batch = (n * 2).min(MAX_BATCH);
            if ended {
                state.scan = None;
            }
        }
        let Some(next) = state.ready.pop_front() else {
            return Ok(None);
        };
        let (k, v) = next.py()?;
        Ok(Some(match self.mode {
            Mode::Items => {
                PyTuple::new(py, [PyBytes::new(py, &k), PyBytes::new(py, &v)])?.into_any()
            }
            Mode::Keys => PyBytes::new(py, &k).into_any(),
            Mode::Values => PyBytes::new(py, &v).into_any(),
        }))
    }
}
