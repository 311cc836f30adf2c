//! The process-wide state of the module, for the Python side: the in-flight bound shared by all
//! transfers (`transfer::shares`), what uses it now, and giving memory back once they end.

use std::collections::HashMap;

use pyo3::prelude::*;

use crate::error::Error;
use crate::transfer::shares::PROCESS;

/// Sets the bytes all uploads and downloads of the process may hold at once, shared evenly.
#[pyfunction]
pub(crate) fn set_max_in_flight(bytes: usize) -> PyResult<()> {
    if bytes == 0 {
        return Err(Error::Usage("max_in_flight must be at least 1 byte".into()).into());
    }
    PROCESS.set_bound(bytes);
    Ok(())
}

/// {"bound": bytes, "transfers": running, "held": bytes in flight or being hashed}.
#[pyfunction]
pub(crate) fn in_flight() -> HashMap<&'static str, usize> {
    let (bound, transfers, held) = PROCESS.snapshot();
    HashMap::from([("bound", bound), ("transfers", transfers), ("held", held)])
}

/// After a transfer ended and its chunks were freed: detached, the memory malloc keeps goes
/// back to the system if no transfer runs any more.
pub(crate) fn transfer_ended(py: Python<'_>) {
    py.detach(|| PROCESS.release_memory_if_idle());
}
