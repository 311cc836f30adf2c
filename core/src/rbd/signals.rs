//! Asynchronous signals (SIGTERM, SIGINT, ...) kept away from native code that must not be
//! interrupted. Servers install handlers that call `exit()` (uWSGI's workers do on SIGINT and
//! SIGTERM). Run on one of the native layer's threads, such a handler would run the process's
//! exit beside the interpreter; run inside the exit handler's shutdown of the connections, it
//! would run libceph-common's static destructors in the middle of that shutdown, on the same
//! thread, which is the crash the exit handler exists to prevent, or a deadlock on a lock the
//! interrupted shutdown holds. Blocked, the signal waits: for a thread of Python's, or for the
//! end of the shutdown.

use std::mem::MaybeUninit;

/// Runs `body` with every asynchronous signal blocked on the calling thread, then restores the
/// thread's mask, so that whatever arrived meanwhile is delivered then. Faults (SIGSEGV, SIGBUS,
/// ...) stay unblocked: blocking them would change nothing but their report.
pub(crate) fn blocked<T>(body: impl FnOnce() -> T) -> T {
    let mut all = MaybeUninit::<libc::sigset_t>::uninit();
    let mut previous = MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigfillset initialises `all`; sigdelset and pthread_sigmask take valid pointers
    // to it and to `previous`, which pthread_sigmask fills when it succeeds.
    let saved = unsafe {
        libc::sigfillset(all.as_mut_ptr());
        for fault in [
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGFPE,
            libc::SIGILL,
            libc::SIGTRAP,
            libc::SIGSYS,
        ] {
            libc::sigdelset(all.as_mut_ptr(), fault);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, all.as_ptr(), previous.as_mut_ptr()) == 0
    };
    let result = body();
    if saved {
        // SAFETY: `previous` was filled by the successful call above.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, previous.as_ptr(), std::ptr::null_mut())
        };
    }
    result
}

/// Whether `signal` is blocked on the calling thread (for tests).
#[cfg(test)]
pub(crate) fn is_blocked(signal: libc::c_int) -> bool {
    let mut current = MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: pthread_sigmask fills `current`; sigismember reads it.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), current.as_mut_ptr());
        libc::sigismember(current.as_ptr(), signal) == 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_asynchronous_signals_while_the_body_runs_and_restores_the_mask() {
        assert!(!is_blocked(libc::SIGTERM));
        let inside = blocked(|| {
            (
                is_blocked(libc::SIGTERM),
                is_blocked(libc::SIGINT),
                is_blocked(libc::SIGSEGV),
            )
        });
        assert_eq!(inside, (true, true, false));
        assert!(!is_blocked(libc::SIGTERM));
    }

    #[test]
    fn a_thread_started_inside_inherits_the_blocked_mask() {
        let child = blocked(|| std::thread::spawn(|| is_blocked(libc::SIGTERM)));
        assert!(child.join().unwrap());
        assert!(!is_blocked(libc::SIGTERM));
    }
}
