"""The native layer's background records in glance's log within seconds, in every process.

The native layer's own threads (a delete's purge, the janitor) never call into Python
(``src/logbridge.rs``): their records wait in a queue for a Python thread to emit them. The
next native call of the process does; so does a thread of the process's own, every ``EVERY``
seconds, so that a worker that serves no more requests still says in glance's log that the data
of a delete cannot be removed. Under eventlet with patched threads logging's locks are green,
and that thread is a green thread of the hub; otherwise it is a daemon thread, which spends its
time in ``time.sleep`` and holds the GIL while it emits (nothing of it runs when the interpreter
exits). A thread does not survive a fork: each process starts its own at its first native call
(``green.call``), so a worker forked after glance was loaded (uWSGI without ``lazy-apps``) has
one too. uWSGI runs the threads of an application only with ``enable-threads`` (or
``threads``); without it, the records still come at the worker's next native call.
"""

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
    has patched threads), else a daemon thread."""
    global _started_in
    pid = os.getpid()
    if _started_in == pid:
        return
    _started_in = pid
    if green:
        import eventlet

        eventlet.spawn_n(_emit_forever, eventlet.sleep)
    else:
        threading.Thread(
            target=_emit_forever, args=(time.sleep,), name="glance-rbd-native-log", daemon=True
        ).start()


def _emit_forever(sleep: Callable[[float], object]) -> None:
    while True:
        sleep(EVERY)
        _flush_logs()
