"""The progress of long native uploads and downloads, in glance's log.

The native layer keeps the transfers running in the process, with their bytes so far, when
each last made progress and what it waits on (``transfers()``). One reporter thread per process
reads them every second while any runs, and logs under ``glance_rbd_native.progress``:

- at INFO, every ``progress_interval`` seconds of a transfer that runs that long: its bytes,
  time and rate;
- at WARNING, once per stall, a transfer that has made no progress for ``stall_threshold``
  seconds, with what it waits on: glance's image data, the cluster, its share of the in-flight
  bound, or the consumer of a download; at INFO when it moves again.

The reporter is a Python thread since native threads never call into Python: under eventlet,
logging's locks are green. With eventlet's threads patched it is a green thread of the hub. It
is started by the first transfer of a process (a child of ``fork()`` starts its own), waits on
an event while no transfer runs, and never keeps the interpreter alive.
"""

import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Optional, TypeVar, Union

from glance_rbd_native._native import in_flight, transfers
from glance_rbd_native.units import duration, size

if TYPE_CHECKING:
    from glance_rbd_native._native import RbdReader, RbdWriter, _Transfer

    _Watched = TypeVar("_Watched", RbdReader, RbdWriter)

LOG = logging.getLogger(__name__)

DEFAULT_INTERVAL = 30
# Twice the interval, and longer than the pauses of a healthy cluster (an OSD marked down after
# its heartbeat grace of 20 s, then peering): a stall is named before a second line shows the
# bytes unchanged.
DEFAULT_STALL_THRESHOLD = 60
# How often the reporter reads the transfers while any runs.
TICK = 1.0

# Set by settings.apply at each transfer.
_interval = DEFAULT_INTERVAL
_stall_threshold = DEFAULT_STALL_THRESHOLD

# The reporter of this process. A child of fork() inherits the parent's without its thread.
_reporter: Optional["_Reporter"] = None
# Per pid: a child may inherit the lock held by a thread that does not exist in it.
_start_locks: dict[int, threading.Lock] = {}

_WAITS = {
    "source": "glance's image data (the client's request body, or an import's source)",
    "consumer": "the consumer of the download (the client has not taken the next chunk)",
    "cluster": "the cluster (librbd {ops} in flight)",
    "share": "room in its share of the process's in-flight bound ({bound} shared by "
    "{transfers} transfers)",
}


def configure(interval: int, stall_threshold: int) -> None:
    """Seconds between progress lines and without progress before a warning; 0 turns each off."""
    global _interval, _stall_threshold
    _interval, _stall_threshold = interval, stall_threshold


def watch() -> None:
    """A transfer has just started in this process: the reporter watches it, started here if
    this process has none (from the calling thread: under eventlet, a green thread)."""
    global _reporter
    if not (_interval or _stall_threshold):
        return
    pid = os.getpid()
    reporter = _reporter
    if reporter is None or reporter.pid != pid:
        with _start_locks.setdefault(pid, threading.Lock()):
            reporter = _reporter
            if reporter is None or reporter.pid != pid:
                reporter = _reporter = _Reporter()
    reporter.wake.set()


def watching(transfer: "_Watched") -> "_Watched":
    """``transfer``, the RbdWriter or RbdReader just made, with the reporter watching it."""
    watch()
    return transfer


class _Seen:
    """What the reporter said of one transfer."""

    def __init__(self) -> None:
        self.last_line = 0.0  # on the interval's grid, so that lines do not drift
        self.stalled: Optional[float] = None  # its last progress when the stall was reported


class _Reporter:
    """The reporter thread of one process, and what it said of each transfer."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        # Made now, from threading's names as they are now: patched by eventlet, or not.
        self.wake = threading.Event()
        self._seen: dict[int, _Seen] = {}
        self.thread = threading.Thread(
            target=self._run, name="glance-rbd-native-progress", daemon=True
        )
        self.thread.start()

    def _run(self) -> None:
        while True:
            # Cleared before the transfers are read: one that starts after the read sets it
            # again, so it is never missed.
            self.wake.clear()
            running: Union[list[_Transfer], bool]
            try:
                running = transfers()
                self._report(running)
            except Exception:  # one bad round must not end the reports of the process
                LOG.exception("glance-rbd-native: could not report the progress of transfers")
                running = True
            if running:
                time.sleep(TICK)
            else:
                self.wake.wait()

    def _report(self, running: "list[_Transfer]") -> None:
        interval, threshold = _interval, _stall_threshold
        seen: dict[int, _Seen] = {}
        for transfer in running:
            state = seen[transfer["id"]] = self._seen.get(transfer["id"]) or _Seen()
            _report_one(transfer, state, interval, threshold)
        self._seen = seen


def _report_one(transfer: "_Transfer", state: _Seen, interval: int, threshold: int) -> None:
    name = f"{transfer['kind']} of {transfer['pool']}/{transfer['image']}"
    elapsed, progressed, done = transfer["elapsed"], transfer["progressed"], transfer["bytes"]
    if interval and elapsed - state.last_line >= interval:
        state.last_line = elapsed - elapsed % interval
        of = " of " + size(transfer["size"]) if transfer["size"] else ""
        LOG.info(
            "%s: %s%s in %s (%s/s)",
            name,
            size(done),
            of,
            duration(elapsed),
            size(done / elapsed if elapsed else 0),
        )
    idle = elapsed - progressed
    if state.stalled is None:
        if threshold and idle >= threshold:
            state.stalled = progressed
            LOG.warning(
                "%s: no progress for %s at %s, waiting for %s",
                name,
                duration(idle),
                size(done),
                _waiting(transfer),
            )
    elif progressed != state.stalled:
        LOG.info(
            "%s: moving again after %s without progress, at %s",
            name,
            duration(progressed - state.stalled),
            size(done),
        )
        state.stalled = None


def _waiting(transfer: "_Transfer") -> str:
    waiting = transfer["waiting"]
    if waiting == "share":
        process = in_flight()
        return _WAITS["share"].format(bound=size(process["bound"]), transfers=process["transfers"])
    ops = "writes" if transfer["kind"] == "upload" else "reads"
    return _WAITS.get(waiting, waiting).format(ops=ops)
