//! glance-rbd-native's Python extension, `glance_rbd_native._native`: the PyO3 face of the
//! transfer core (the `glance-rbd-core` crate, core/), its classes, exceptions and logging. The
//! core knows nothing of Python; this crate holds everything that does.

mod buffer;
mod cephx;
mod delete;
mod detach;
mod exceptions;
mod logbridge;
mod process;
mod reader;
mod versions;
mod writer;

use pyo3::prelude::*;
use pyo3::types::PyTuple;

#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    // Records from the `log` macros go to Python's `logging`, under `glance_rbd_native.*`.
    logbridge::install(module.py())?;
    module.add_class::<writer::RbdWriter>()?;
    module.add_class::<reader::RbdReader>()?;
    module.add_function(wrap_pyfunction!(writer::connection_count, module)?)?;
    module.add_function(wrap_pyfunction!(writer::native_digests, module)?)?;
    module.add_function(wrap_pyfunction!(process::set_max_in_flight, module)?)?;
    module.add_function(wrap_pyfunction!(process::in_flight, module)?)?;
    module.add_function(wrap_pyfunction!(process::transfers, module)?)?;
    module.add_function(wrap_pyfunction!(logbridge::queue_logs_here, module)?)?;
    module.add_function(wrap_pyfunction!(logbridge::flush_logs, module)?)?;
    module.add_function(wrap_pyfunction!(delete::delete_image, module)?)?;
    module.add_function(wrap_pyfunction!(cephx::connect_failure, module)?)?;
    module.add_function(wrap_pyfunction!(cephx::caps_advice, module)?)?;
    module.add_function(wrap_pyfunction!(cephx::glance_caps, module)?)?;
    module.add_function(wrap_pyfunction!(process::mark_identity, module)?)?;
    module.add_function(wrap_pyfunction!(versions::library_versions, module)?)?;
    module.add(
        "DEFAULT_MAX_IN_FLIGHT",
        glance_rbd_core::transfer::shares::DEFAULT_BOUND,
    )?;
    module.add("ZERO_BLOCK", glance_rbd_core::transfer::zeros::BLOCK)?;
    module.add(
        "_TIMEOUT_OPTIONS",
        PyTuple::new(module.py(), glance_rbd_core::rbd::cluster::TIMEOUT_OPTIONS)?,
    )?;
    exceptions::register(module)?;
    Ok(())
}
