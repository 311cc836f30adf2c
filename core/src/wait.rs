//! The one wait of the native layer (`wait_until`): of every operation on the cluster and of an
//! upload's budget, which the caller can cut short (`Poll`: a signal, a fenced client).

use std::sync::{Condvar, Mutex};
use std::time::Duration;

use crate::error::Result;
use crate::sync;

/// Called while a wait blocks, every `POLL_INTERVAL`: an error ends the wait (a signal, say).
pub type Poll<'a> = &'a mut dyn FnMut() -> Result<()>;

/// How often a blocked wait asks its `Poll` whether to give up.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Waits on `signal` until `ready(value)` holds, calling `poll` every `POLL_INTERVAL` with the
/// lock released; `poll`'s error ends the wait. Every wait on librbd or on an upload's budget
/// goes through here.
pub(crate) fn wait_until<T: Copy>(
    value: &Mutex<T>,
    signal: &Condvar,
    ready: impl Fn(&T) -> bool,
    poll: Poll,
) -> Result<T> {
    let mut guard = sync::lock(value);
    while !ready(&guard) {
        let (next, timeout) = sync::wait_timeout(signal, guard, POLL_INTERVAL);
        guard = next;
        if timeout.timed_out() && !ready(&guard) {
            drop(guard);
            poll()?;
            guard = sync::lock(value);
        }
    }
    Ok(*guard)
}
