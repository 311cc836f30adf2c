"""All of pytest in two lanes at once (`make test-python`, and so `make test`).

One pytest process runs the project on this host (the cluster, the servers, the load runs, the
wheel, and Debian 12's packaged glance, whose root is built early); the other runs it against
other releases (every glance_store release, the Debian 13 and sid roots, the emulated one) and
as it is installed from its sdist and from an index (the packaging layer, which also mostly
waits: on a build from source, or on pip). Run
one after the other they left a core idle for most of an hour: the releases' lane mostly waits
on a virtualenv, a Debian root being built, or qemu on one core. Each lane is a pytest session
of its own, with its own throwaway cluster, watchdog and contract guard; they share no pool,
virtualenv, server, nor a root at the same time. A cluster handed in through
GLANCE_RBD_TEST_CLUSTER goes to the host's lane alone: the other's `clean_pool` would see its
images.

The host's lane writes to the terminal; the releases' lane to target/pytest-releases.log, shown
when it ends. Both end with their time by layer and slowest tests, merged here into one report.
A lane ended by its watchdog, by an interrupt or by an error of pytest's own ends the other.

One rule holds between them (this module is also a pytest plugin, loaded by tests/conftest.py): a
test marked `alone` measures memory or latency against stock's in the same run, and the other
lane's load would skew it, so while it runs every process of the other lane runs at the lowest
priority (nice 19; the autogroup of each of its sessions too, for daemons and servers). The
other lane goes on, on what CPU is left, and never waits: a test there keeps its own time
limits."""

from __future__ import annotations

import contextlib
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
    ("host", "not (matrix or distro or packaging) or debian12"),
    ("releases", "(matrix or distro or packaging) and not debian12"),
)
# pytest's statuses: interrupted (the watchdog's, or ^C), internal error, usage error; and
# the watchdog's own exit when the main thread did not stop.
ENDS_THE_OTHER = {2, 3, 4}
NO_TESTS = 5
SLOWEST = 20
# The priority of the other lane while a test `alone` runs.
LOWEST = 19


class Lane:
    def __init__(self, name: str, markers: str, args: list[str], *, shown: bool):
        self.name = name
        self.shown = shown
        self.log = OUT / f"pytest-{name}.log"
        self.timings = OUT / f"timings-{name}.json"
        self.timings.unlink(missing_ok=True)
        env = dict(os.environ)
        if not shown:
            env.pop("GLANCE_RBD_TEST_CLUSTER", None)
        self.started = time.monotonic()
        self.ended: float | None = None
        self.interrupted = False
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                # Each skip with its reason, in the summary: none goes unseen.
                "-rs",
                "-m",
                markers,
                f"--timings-out={self.timings}",
                *args,
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
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
        """Once: a second SIGINT would cut short the teardown that the first one started
        (its servers and daemons would be left running)."""
        if self.proc.poll() is None and not self.interrupted:
            self.interrupted = True
            self.proc.send_signal(signal.SIGINT)

    def minutes(self) -> float:
        return ((self.ended or time.monotonic()) - self.started) / 60

    def last_line(self) -> str:
        lines = self.log.read_text(errors="replace").strip().splitlines()
        return lines[-1].strip("= ") if lines else "(no output)"


def run(args: list[str]) -> int:
    OUT.mkdir(exist_ok=True)
    # A run started in the background (`make test &`) inherits SIGINT ignored, and the lanes
    # would too: Python then never raises KeyboardInterrupt, and interrupt() could not stop them.
    signal.signal(signal.SIGINT, signal.default_int_handler)
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
                print(
                    f"\n[the {lane.name} lane ended after {lane.minutes():.1f} min, exit "
                    f"{status}: {lane.last_line()}]",
                    flush=True,
                )
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
    for title, lines in timing_sections(layers, tests, where=", both lanes"):
        section(title)
        print(*lines, sep="\n")
    section("lanes")
    for lane in lanes:
        print(
            f"{lane.name:9} {lane.minutes():5.1f} min  exit {statuses.get(lane.name)}  "
            f"{lane.last_line()}"
        )


# -- the rule between the lanes: a pytest plugin -------------------------------------------


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "alone: while it runs, the other lane of `make test` runs "
        "at the lowest priority (tests/harness/lanes.py): it measures memory "
        "or latency against stock's",
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    others = _other_lanes() if item.get_closest_marker("alone") else []
    if not others:
        yield
        return
    # Again every half second: a session the other lane starts meanwhile (a daemon, a server)
    # begins with an autogroup of its own at nice 0.
    done = threading.Event()

    def keep_low() -> None:
        while not done.wait(0.5):
            _renice(others, LOWEST)

    keeper = threading.Thread(target=keep_low, name="alone", daemon=True)
    _renice(others, LOWEST)
    keeper.start()
    try:
        yield
    finally:
        done.set()
        keeper.join()
        _renice(others, 0)


def _other_lanes() -> list[int]:
    """The other lanes' pytest processes: this one's siblings, if its parent is the runner."""
    parent = os.getppid()
    try:
        cmdline = pathlib.Path(f"/proc/{parent}/cmdline").read_bytes().split(b"\0")
        children = pathlib.Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    except OSError:
        return []
    if b"tests.harness.lanes" not in cmdline:
        return []
    return [int(pid) for pid in children if int(pid) != os.getpid()]


def _renice(roots: list[int], nice: int) -> None:
    """Every process under `roots` (a lane, its clusters' daemons, its servers, its children)
    to `nice`; what they start meanwhile inherits it. Where the kernel schedules each session as
    a group of its own (autogroup), a task's nice orders it only within its session: a process
    in a session of its own (a daemon, a server) gets its session's nice too. The lanes' own
    session, which the test alone shares, keeps its nice."""
    ours = os.getsid(0)
    pending = list(roots)
    while pending:
        pid = pending.pop()
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, pid, nice)
            if os.getsid(pid) != ours:
                with contextlib.suppress(OSError):  # no autogroups: task nice is the whole story
                    pathlib.Path(f"/proc/{pid}/autogroup").write_text(str(nice))
            for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
                os.setpriority(os.PRIO_PROCESS, int(task.name), nice)  # each thread has its own
                pending += map(int, (task / "children").read_text().split())


def timing_sections(
    layers: dict[str, float], tests: dict[str, float], where: str = ""
) -> list[tuple[str, list[str]]]:
    """A long run's time by layer and its slowest tests, as (title, lines): what a session
    (tests/conftest.py) and the lanes' runner end with."""
    if sum(layers.values()) <= 60:
        return []
    by_layer = [
        f"{layer:10} {seconds / 60:5.1f} min"
        for layer, seconds in sorted(layers.items(), key=lambda item: -item[1])
    ]
    slowest = [
        f"{seconds:7.1f} s  {nodeid}"
        for nodeid, seconds in sorted(tests.items(), key=lambda item: -item[1])[:SLOWEST]
    ]
    return [
        (f"time by layer{where} (setup, call and teardown of its tests)", by_layer),
        (f"the {SLOWEST} slowest tests (setup, call and teardown)", slowest),
    ]


def section(title: str) -> None:
    width = shutil.get_terminal_size((100, 24)).columns
    print(f" {title} ".center(width, "="), flush=True)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
