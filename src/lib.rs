//! glance-rbd-native: native Ceph RBD uploads and downloads for glance_store.
//!
//! Three layers, each depending only on those before it: `rbd` (librbd and librados),
//! `transfer` (one upload or download of a whole image) and `bindings` (the PyO3 classes). The
//! first two know nothing of Python; `error` is the one error type of all three.

mod bindings;
mod error;
mod rbd;
mod transfer;

// The plain-Rust API, as small as the memcheck program (examples/lifecycle.rs) needs: it drives
// uploads and downloads under valgrind with no Python in the way. Everything else is internal.
pub use error::{Error, Op, Target};
pub use rbd::cluster::{Cluster, ConnectOptions, IoCtx};
pub use rbd::completion::Poll;
pub use rbd::image::{id_of, remove_with_snapshot};
pub use transfer::download::{Destination, Download, DownloadOptions};
pub use transfer::in_flight::Buffer;
pub use transfer::upload::{Summary, Upload, UploadOptions};

use pyo3::prelude::*;

use bindings::{cephx, exceptions, logbridge, process, reader, writer};

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
    module.add_function(wrap_pyfunction!(cephx::connect_failure, module)?)?;
    module.add_function(wrap_pyfunction!(cephx::glance_caps, module)?)?;
    module.add("DEFAULT_MAX_IN_FLIGHT", transfer::shares::DEFAULT_BOUND)?;
    module.add("ZERO_BLOCK", transfer::zeros::BLOCK)?;
    exceptions::register(module)?;
    Ok(())
}
