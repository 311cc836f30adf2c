"""What the programs that run transfers under eventlet share (green_transfers, green_progress):
imported first, it monkey-patches as glance's eventlet server does, then gives a green ticker
whose lateness tells whether anything held the hub, and a log handler that records whether the
hub's thread emitted each record."""

import warnings

# eventlet warns that it is deprecated on import: the filter comes first (hence E402 below).
warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")
import eventlet  # noqa: E402

eventlet.monkey_patch()

import logging  # noqa: E402
import time  # noqa: E402

from eventlet import patcher  # noqa: E402

real_ident = patcher.original("threading").get_ident
hub_thread = real_ident()
# The ticker's lateness per tick, and the records Collect took: the programs read and reset them.
late: list[float] = []
records: list[dict] = []


class Collect(logging.Handler):
    """Appends each record to `records`: its level, message, whether the hub's thread emitted
    it, and with `thread`, the name of the thread that did."""

    def __init__(self, thread=False):
        super().__init__()
        self.thread = thread

    def emit(self, record):
        taken = {"level": record.levelname, "message": record.getMessage()}
        if self.thread:
            taken["thread"] = record.threadName
        records.append({**taken, "hub": real_ident() == hub_thread})


def ticker():
    """A green thread that sleeps 10 ms at a time, forever, and notes how late it wakes."""
    while True:
        start = time.monotonic()
        eventlet.sleep(0.01)
        late.append(time.monotonic() - start - 0.01)


def threads_patched():
    return patcher.is_monkey_patched("thread")
