//! The process's idle cluster connections shut down at `exit()`, before libceph-common's static
//! destructors run: with the messenger threads still up, one of them can read an option already
//! destroyed and abort the process (`boost::bad_get`). The connections' module hands over the
//! shutdown; this one knows only when to run it.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use super::signals;

/// The pid that registered the handler. A child of `fork()` inherits the registration, and
/// registers again at its own first connect, after whatever destructors it registered since.
static REGISTERED: AtomicU32 = AtomicU32::new(0);
/// What the handler runs: the first shutdown registered (there is one).
static SHUTDOWN: OnceLock<fn()> = OnceLock::new();

/// Registers the handler that runs `shutdown`, once per process, after a successful connect.
/// Handlers and static destructors run in the reverse order of their registration, and
/// libceph-common registers some of its destructors at the first connect, so ours runs before
/// them.
pub(crate) fn register(shutdown: fn()) {
    SHUTDOWN.get_or_init(|| shutdown);
    let pid = std::process::id();
    if REGISTERED.swap(pid, Ordering::AcqRel) != pid {
        // SAFETY: `at_exit` takes no arguments and lives as long as the process: CPython never
        // unloads an extension module. A failed registration leaves things as they were.
        unsafe { libc::atexit(at_exit) };
    }
}

extern "C" fn at_exit() {
    let Some(&shutdown) = SHUTDOWN.get() else {
        return;
    };
    // A panic must not unwind into exit(); at worst the connections stay up. A second signal
    // (a service manager's SIGTERM after SIGINT) waits for the end of the shutdown: its handler
    // may call exit() again, which would run the destructors that follow this handler at once.
    let _ = std::panic::catch_unwind(|| signals::blocked(shutdown));
}
