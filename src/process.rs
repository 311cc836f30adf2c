//! The process-wide state of the module, for the Python side: the in-flight bound shared by all
//! transfers (`transfer::shares`), what uses it now, the transfers running and their progress
//! (`transfer::progress`), and giving memory back once they end.

use std::collections::HashMap;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::exceptions::OrRaise;
use glance_rbd_core::transfer::progress;
use glance_rbd_core::transfer::shares::{PROCESS, check_bound};

/// Sets the bytes all uploads and downloads of the process may hold at once, shared evenly.
#[pyfunction]
pub(crate) fn set_max_in_flight(bytes: usize) -> PyResult<()> {
    check_bound(bytes).or_raise()?;
    PROCESS.set_bound(bytes);
    Ok(())
}

/// {"bound": bytes, "transfers": running, "held": bytes in flight or being hashed}.
#[pyfunction]
pub(crate) fn in_flight() -> HashMap<&'static str, usize> {
    let (bound, transfers, held) = PROCESS.snapshot();
    HashMap::from([("bound", bound), ("transfers", transfers), ("held", held)])
}

/// The uploads and downloads running in this process, oldest first, each a dict: "id",
/// "kind" ("upload" or "download"), "pool", "image", "size" (0: unknown), "bytes" (accepted by
/// write() or handed out), "elapsed" and "progressed" (seconds from its start to now and to its
/// last progress), "waiting" ("source", "consumer", "cluster" or "share").
#[pyfunction]
pub(crate) fn transfers(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    // Detached, as every lock the transfers take (the GIL rule).
    let running = py.detach(progress::snapshot);
    running
        .into_iter()
        .map(|transfer| {
            let dict = PyDict::new(py);
            dict.set_item("id", transfer.id)?;
            dict.set_item("kind", transfer.kind.name())?;
            dict.set_item("pool", transfer.pool)?;
            dict.set_item("image", transfer.image)?;
            dict.set_item("size", transfer.size)?;
            dict.set_item("bytes", transfer.bytes)?;
            dict.set_item("elapsed", transfer.elapsed.as_secs_f64())?;
            dict.set_item("progressed", transfer.progressed.as_secs_f64())?;
            dict.set_item("waiting", transfer.waiting.name())?;
            Ok(dict)
        })
        .collect()
}

/// After a transfer ended and its chunks were freed: detached, the memory malloc keeps goes
/// back to the system if no transfer runs any more.
pub(crate) fn transfer_ended(py: Python<'_>) {
    py.detach(|| PROCESS.release_memory_if_idle());
}

/// Who this process is, as a mark names its writer (host, boot id, pid, start, pid namespace,
/// cgroup), with the librados `client` (global id) and `address` it writes with: a JSON object.
#[pyfunction(name = "_mark_identity")]
#[pyo3(signature = (client, address = None))]
pub(crate) fn mark_identity(client: u64, address: Option<&str>) -> String {
    glance_rbd_core::transfer::identity_object(client, address)
}
