//! Native work with the interpreter detached: the GIL rule of the Python classes.
//!
//! Every librbd call, every wait and every lock of an upload or a download happens inside
//! `py.detach`; waits re-attach briefly, every 100 ms (`wait::POLL_INTERVAL`), only
//! to let Python run its signal handlers, so Ctrl-C ends a stuck wait.

use pyo3::prelude::*;

use crate::exceptions::to_python;
use crate::logbridge;
use glance_rbd_core::error::{Error, Result};

/// Runs `op` detached. Its waits poll for Python signals; a raised handler (KeyboardInterrupt)
/// ends the wait and is what the caller sees.
pub(crate) fn run<T: Send>(
    py: Python<'_>,
    op: impl FnOnce(&mut dyn FnMut() -> Result<()>) -> Result<T> + Send,
) -> PyResult<T> {
    logbridge::flush();
    let mut signal: Option<PyErr> = None;
    let result = py.detach(|| {
        let mut poll = || {
            Python::attach(|py| py.check_signals()).map_err(|err| {
                signal = Some(err);
                Error::Interrupted
            })
        };
        op(&mut poll)
    });
    match (result, signal) {
        (Ok(value), _) => Ok(value),
        (Err(Error::Interrupted), Some(err)) => Err(err),
        (Err(err), _) => Err(to_python(err)),
    }
}
