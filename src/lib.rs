//! glance-rbd-native: a native Ceph RBD upload path for glance_store.
//!
//! Plain-Rust layers (`cluster`, `image`, `aio`, `zeros`, `digest`, `upload`, `download`) know
//! nothing of Python; the `writer`, `reader`, `buffer` and `exceptions` modules are the PyO3
//! face of them.

pub mod aio;
pub mod budget;
mod buffer;
pub mod cluster;
mod detach;
pub mod digest;
pub mod download;
pub mod error;
mod exceptions;
mod ffi;
pub mod image;
mod janitor;
mod logbridge;
mod reader;
pub mod upload;
mod writer;
pub mod zeros;

use pyo3::prelude::*;

#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    // Records from the `log` macros go to Python's `logging`, under `glance_rbd_native.*`.
    logbridge::install(module.py())?;
    module.add_class::<writer::RbdWriter>()?;
    module.add_class::<reader::RbdReader>()?;
    module.add_function(wrap_pyfunction!(writer::connection_count, module)?)?;
    module.add_function(wrap_pyfunction!(writer::native_digests, module)?)?;
    module.add("DEFAULT_MAX_IN_FLIGHT", upload::DEFAULT_MAX_IN_FLIGHT)?;
    module.add("ZERO_BLOCK", zeros::BLOCK)?;
    exceptions::register(module)?;
    Ok(())
}
