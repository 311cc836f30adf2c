"""All of pytest in two lanes at once (`make test-python`, and so `make test`).

One pytest process runs the project on this host (the cluster, the servers, the load runs, the
wheel); the other runs it against other releases (every glance_store release, the Debian roots,
the emulated one). Run one after the other they left a core idle for most of an hour: the
releases' lane mostly waits on a virtualenv, a Debian root being built, or qemu on one core.
Each lane is a pytest session of its own, with its own throwaway cluster, watchdog and contract
guard; they share no pool, virtualenv, root or server. A cluster handed in through
GLANCE_RBD_TEST_CLUSTER goes to the host's lane alone: the other's `clean_pool` would see its
images.

The host's lane writes to the terminal; the releases' lane to target/pytest-releases.log, shown
when it ends. Both end with their time by layer and slowest tests, merged here into one report.
A lane ended by its watchdog, by an interrupt or by an error of pytest's own ends the other.

One rule holds between them (this module is also a pytest plugin, loaded by tests/conftest.py): a
test marked `alone` (it measures memory or latency against stock's in the same run, which the
other lane's load would skew) runs while the other lane runs no test; the other lane's next test
waits for it. A test waiting on something that needs none of this machine's time (a Debian root
that another process builds) lets an `alone` test run meanwhile: `waiting()`."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "target"
# (name, the markers it runs); the first is shown as it runs and gets the cluster handed in.
LANES = (
    ("host", "not (matrix or distro)"),
    ("releases", "matrix or distro"),
)
# pytest's statuses: interrupted (the watchdog's, or ^C), internal error, usage error; and
# the watchdog's own exit when the main thread did not stop.
ENDS_THE_OTHER = {2, 3, 4}
NO_TESTS = 5
SLOWEST = 20
# The lanes' lock, handed to them in the environment: held shared by a lane's test, exclusive by
# a test alone; its gate, taken before either, keeps a waiting `alone` test from being starved.
LOCK_ENV = "GLANCE_RBD_TEST_LANES_LOCK"


class Lane:
    def __init__(self, name: str, markers: str, args: list[str], *, shown: bool):
        self.name = name
        self.shown = shown
        self.log = OUT / f"pytest-{name}.log"
        self.timings = OUT / f"timings-{name}.json"
        self.timings.unlink(missing_ok=True)
        env = dict(os.environ, **{LOCK_ENV: str(OUT / "lanes.lock")})
        if not shown:
            env.pop("GLANCE_RBD_TEST_CLUSTER", None)
        self.started = time.monotonic()
        self.ended: float | None = None
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-q", "-m", markers,
             f"--timings-out={self.timings}", *args],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self._pump = threading.Thread(target=self._copy, name=f"lane-{name}", daemon=True)
        self._pump.start()

    def _copy(self) -> None:
        """Into the lane's log, and onto the terminal if shown, as it comes."""
        with open(self.log, "wb") as log:
            while chunk := os.read(self.proc.stdout.fileno(), 65536):
                log.write(chunk)
                log.flush()
                if self.shown:
                    os.write(1, chunk)

    def poll(self) -> int | None:
        status = self.proc.poll()
        if status is not None and self.ended is None:
            self._pump.join()
            self.ended = time.monotonic()
        return status

    def interrupt(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)

    def minutes(self) -> float:
        return ((self.ended or time.monotonic()) - self.started) / 60

    def last_line(self) -> str:
        lines = self.log.read_text(errors="replace").strip().splitlines()
        return lines[-1].strip("= ") if lines else "(no output)"


def run(args: list[str]) -> int:
    OUT.mkdir(exist_ok=True)
    lanes = [Lane(name, markers, args, shown=i == 0) for i, (name, markers) in enumerate(LANES)]
    statuses: dict[str, int] = {}

    def interrupt_all(_signum, _frame) -> None:
        for lane in lanes:
            lane.interrupt()

    signal.signal(signal.SIGTERM, interrupt_all)  # a stopped run stops both, clusters and all
    while len(statuses) < len(lanes):
        try:
            time.sleep(0.5)
        except KeyboardInterrupt:
            # ^C reached every lane too (one process group): each tears its cluster down.
            continue
        for lane in lanes:
            if lane.name in statuses or (status := lane.poll()) is None:
                continue
            statuses[lane.name] = status
            if len(statuses) < len(lanes):
                print(f"\n[the {lane.name} lane ended after {lane.minutes():.1f} min, exit "
                      f"{status}: {lane.last_line()}]", flush=True)
            if status in ENDS_THE_OTHER:
                interrupt_all(None, None)
    for lane in lanes[1:]:
        section(f"the {lane.name} lane ({lane.log.relative_to(ROOT)})")
        sys.stdout.write(lane.log.read_text(errors="replace"))
    report(lanes, statuses)
    failed = [status for status in statuses.values() if status not in (0, NO_TESTS)]
    if all(status == NO_TESTS for status in statuses.values()):
        return NO_TESTS
    return failed[0] if failed else 0


def report(lanes: list[Lane], statuses: dict[str, int]) -> None:
    """The lanes' time by layer and slowest tests, added up; each lane's result and time."""
    layers: dict[str, float] = {}
    tests: dict[str, float] = {}
    for lane in lanes:
        if not lane.timings.exists():
            continue
        timings = json.loads(lane.timings.read_text())
        for layer, seconds in timings["layers"].items():
            layers[layer] = layers.get(layer, 0.0) + seconds
        tests.update(timings["tests"])
    if sum(layers.values()) > 60:
        section("time by layer, both lanes (setup, call and teardown of its tests)")
        for layer, seconds in sorted(layers.items(), key=lambda item: -item[1]):
            print(f"{layer:10} {seconds / 60:5.1f} min")
        section(f"the {SLOWEST} slowest tests (setup, call and teardown)")
        for nodeid, seconds in sorted(tests.items(), key=lambda item: -item[1])[:SLOWEST]:
            print(f"{seconds:7.1f} s  {nodeid}")
    section("lanes")
    for lane in lanes:
        print(f"{lane.name:9} {lane.minutes():5.1f} min  exit {statuses.get(lane.name)}  "
              f"{lane.last_line()}")


# -- the rule between the lanes: a pytest plugin -------------------------------------------

class _Held:
    path: str | None = None  # the lanes' lock, if this session is a lane
    lock = None  # its file while one of the lane's tests runs, held shared or exclusive


def _take(exclusive: bool) -> None:
    with open(f"{_Held.path}.gate", "a") as gate:
        fcntl.flock(gate, fcntl.LOCK_EX)
        fcntl.flock(_Held.lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)


def pytest_configure(config):
    config.addinivalue_line("markers", "alone: runs while the other lane of `make test` runs "
                            "no test (tests/harness/lanes.py): it measures memory or latency")
    # Taken out of the environment: a child pytest of a test (a release's contract) must not
    # wait for the lock its parent holds.
    _Held.path = os.environ.pop(LOCK_ENV, None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if _Held.path is None:
        yield
        return
    with open(_Held.path, "a") as lock:
        _Held.lock = lock
        try:
            _take(exclusive=item.get_closest_marker("alone") is not None)
            yield
        finally:
            _Held.lock = None  # closing the file releases the lock


@contextlib.contextmanager
def waiting():
    """Around a wait that needs none of this machine's time: a test alone may run meanwhile."""
    lock = _Held.lock
    if lock is None:
        yield
        return
    fcntl.flock(lock, fcntl.LOCK_UN)
    try:
        yield
    finally:
        _take(exclusive=False)


def section(title: str) -> None:
    width = shutil.get_terminal_size((100, 24)).columns
    print(f" {title} ".center(width, "="), flush=True)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
