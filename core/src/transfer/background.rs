//! Threads the native layer starts itself, marked as such: the log bridge never calls into
//! Python from them (under eventlet, taking a green lock there can hang the hub). Threads of
//! eventlet's pool that run native calls for the hub are marked too (`mark_current`).

use std::cell::Cell;
use std::io;
use std::thread::JoinHandle;

use crate::rbd::signals;

thread_local! {
    static BACKGROUND: Cell<bool> = const { Cell::new(false) };
}

/// Starts a named thread, marked as background before `body` runs. It starts with
/// asynchronous signals blocked, so they go to Python's threads, never to it
/// (`rbd::signals`).
pub(crate) fn spawn<T: Send + 'static>(
    name: String,
    body: impl FnOnce() -> T + Send + 'static,
) -> io::Result<JoinHandle<T>> {
    signals::blocked(|| {
        std::thread::Builder::new().name(name).spawn(move || {
            BACKGROUND.with(|background| background.set(true));
            body()
        })
    })
}

/// Marks the calling thread as background: one that runs native calls for another, whose
/// records that one emits later.
pub fn mark_current() {
    BACKGROUND.with(|background| background.set(true));
}

/// Whether the calling thread was started by `spawn`, or marked by `mark_current`.
pub fn is_background_thread() -> bool {
    BACKGROUND.with(Cell::get)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_spawned_threads_are_marked() {
        assert!(!is_background_thread());
        let marked = spawn("test".into(), is_background_thread).unwrap();
        assert!(marked.join().unwrap());
    }

    #[test]
    fn spawned_threads_start_with_asynchronous_signals_blocked() {
        let blocked = spawn("test".into(), || signals::is_blocked(libc::SIGTERM));
        assert!(blocked.unwrap().join().unwrap());
    }
}
