"""The memory of processes, from /proc: RSS now, its peak over a run, and the workers of a
uWSGI master whose memory a server's tests and benchmarks watch."""

from __future__ import annotations

import os
import re
import threading


def status_mib(pid: int | str, field: str) -> float:
    """VmRSS (now) or VmHWM (the peak since exec or the last reset) of `pid`, in MiB."""
    with open(f"/proc/{pid}/status") as status:
        return int(re.search(rf"^{field}:\s+(\d+) kB", status.read(), re.M).group(1)) / 1024


def children(pid: int) -> list[int]:
    """The pids of the children of `pid`: a uWSGI master's workers."""
    found = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as listed:
            found.update(int(child) for child in listed.read().split())
    return sorted(found)


class Peak:
    """The peak RSS of each of `pids` from now until `stop()`, and their RSS now (`baseline`).

    VmHWM is restarted from the current RSS by writing 5 to /proc/PID/clear_refs (proc(5)); the
    RSS is also sampled every 50 ms, which alone gives the peak where the write is refused.
    """

    def __init__(self, pids):
        self.pids = list(pids)
        self.baseline = {pid: status_mib(pid, "VmRSS") for pid in self.pids}
        self.reset = True
        for pid in self.pids:
            try:
                with open(f"/proc/{pid}/clear_refs", "w") as refs:
                    refs.write("5")
            except OSError:
                self.reset = False
        self.sampled = dict(self.baseline)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self):
        while not self._done.wait(0.05):
            for pid in self.pids:
                self.sampled[pid] = max(self.sampled[pid], status_mib(pid, "VmRSS"))

    def stop(self) -> dict[int, float]:
        """{pid: peak RSS in MiB}."""
        self._done.set()
        self._thread.join()
        return {
            pid: max(self.sampled[pid], status_mib(pid, "VmHWM") if self.reset else 0)
            for pid in self.pids
        }

    @property
    def source(self) -> str:
        return "VmHWM" if self.reset else "VmRSS every 50 ms"
