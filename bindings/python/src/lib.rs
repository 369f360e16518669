//! The `sepkv` Python module: bindings to the sepkv storage engine.
//!
//! Classes: [`db::PyDb`] (`sepkv.Db`), [`batch::PyWriteBatch`],
//! [`snapshot::PySnapshot`], [`iter::PyIterator`]; the exceptions are in
//! [`errors`]. Every engine call runs with the GIL released. The Python
//! API is documented in the package README and in `sepkv.pyi`.

mod batch;
mod convert;
mod db;
mod errors;
mod iter;
mod options;
mod snapshot;

use pyo3::prelude::*;

/// sepkv: a persistent key-value store built on key-value separation.
#[pymodule(gil_used = false)]
fn sepkv(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<db::PyDb>()?;
    m.add_class::<batch::PyWriteBatch>()?;
    m.add_class::<snapshot::PySnapshot>()?;
    m.add_class::<iter::PyIterator>()?;
    errors::register(m)?;
    m.add(
        "PRESETS",
        ::sepkv::Preset::ALL
            .iter()
            .filter(|p| p.is_available())
            .map(|p| p.name())
            .collect::<Vec<_>>(),
    )?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
