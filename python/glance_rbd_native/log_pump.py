"""The native layer's background records in glance's log within seconds, in every process.

The native layer's own threads (a delete's purge, the janitor) never call into Python
(``src/logbridge.rs``): their records wait in a queue for a Python thread to emit them. The
next native call of the process does; so does a thread of the process's own, every ``EVERY``
seconds, so that a worker that serves no more requests still says in glance's log that the data
of a delete cannot be removed. Under eventlet with patched threads logging's locks are green,
and that thread is a green thread of the hub; otherwise it is a daemon thread, which spends its
time in ``time.sleep``. It emits under a lock that an ``atexit`` handler takes for good, before
the interpreter finalizes: a daemon thread that took the GIL back then would end in the middle
of the native call (``pthread_exit`` through Rust's frames aborts the process). A thread does not
survive a fork: each process starts its own at its first native call
(``green.call``), so a worker forked after glance was loaded (uWSGI without ``lazy-apps``) has
one too. uWSGI runs the threads of an application only with ``enable-threads`` (or
``threads``); without it, the records still come at the worker's next native call.
"""

import atexit
import os
import threading
import time
from typing import Callable, Optional

from glance_rbd_native._native import _flush_logs

# Seconds between two looks at the queue: a look is one native call that takes a lock.
EVERY = 2.0

_started_in: Optional[int] = None


def start(green: bool) -> None:
    """Starts this process's emitter, once per process: a green thread if ``green`` (eventlet
    has patched threads), else a daemon thread. One that cannot start is tried again at the next
    call; the records still come at the native calls meanwhile."""
    global _started_in
    pid = os.getpid()
    if _started_in == pid:
        return
    _started_in = pid
    try:
        if green:
            import eventlet

            eventlet.spawn_n(_emit_forever, eventlet.sleep, None)
        else:
            # Made here, not at import: eventlet may patch threading after this module loads.
            emitting = threading.Lock()
            atexit.register(_stop, emitting, pid)
            threading.Thread(
                target=_emit_forever,
                args=(time.sleep, emitting),
                name="glance-rbd-native-log",
                daemon=True,
            ).start()
    except Exception:  # a thread refused (RuntimeError), eventlet gone: not the caller's failure
        _started_in = None


def _stop(emitting: threading.Lock, pid: int) -> None:
    """At exit: waits for an emit under way to end, and keeps the thread from another. Only in
    the process that made the lock: a fork's child inherits the handler, and the lock as it was."""
    if os.getpid() == pid:
        emitting.acquire()


def _emit_forever(sleep: Callable[[float], object], emitting: Optional[threading.Lock]) -> None:
    while True:
        sleep(EVERY)
        if emitting is None:
            _flush_logs()
        elif emitting.acquire(blocking=False):
            try:
                _flush_logs()
            finally:
                emitting.release()
        else:
            return  # the interpreter is exiting
