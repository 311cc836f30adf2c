"""Native calls that wait, kept off eventlet's hub.

A native upload or download waits for librbd with the GIL released, but in an eventlet worker
(glance-api's eventlet server) the thread that waits is the hub's: every other green thread of
the worker would wait with it. When eventlet has patched threads, each call that may wait runs
in eventlet's pool of real threads (``tpool``) and the green thread yields to the hub until it
returns. The native layer's log records from there are queued and emitted by the green thread
afterwards: logging's locks are green under eventlet. Without eventlet, calls run as they are.
Each call also makes sure that the process emits its background records within seconds
(``log_pump``).
"""

import sys
from typing import Any, Callable, TypeVar, cast

from glance_rbd_native import log_pump
from glance_rbd_native._native import _flush_logs, _queue_logs_here

_T = TypeVar("_T")


def call(fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """``fn(*args, **kwargs)``, off the hub when eventlet has patched threads."""
    green = _eventlet_threads()
    log_pump.start(green)
    if not green:
        return fn(*args, **kwargs)
    from eventlet import tpool

    try:
        return cast(_T, tpool.execute(_queued, fn, *args, **kwargs))
    finally:
        _flush_logs()


def _queued(fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    _queue_logs_here()
    return fn(*args, **kwargs)


def _eventlet_threads() -> bool:
    if "eventlet" not in sys.modules:
        return False
    from eventlet import patcher

    return cast(bool, patcher.is_monkey_patched("thread"))
