"""The run's watchdog (a pytest plugin, loaded by tests/conftest.py): a run fails instead of
hanging.

- **A time limit for every test**: each phase of a test (setup, call, teardown) gets
  `--time-limit` seconds (default 900), or what its `time_limit(seconds)` mark says. Past it,
  the test fails with the stacks of every thread, and the run goes on.
- **A dead cluster or a full disk ends the run**: every second it checks the daemons of each
  test cluster booted or attached in this process (`tests/harness/cluster.py`; a daemon that a
  test stops on purpose is not counted) and the free space of their disks. A daemon gone, or
  less than `--min-free-gib` free, ends the run at once: the test running is interrupted, the
  session's teardown stops what it started, and the summary names what died, with the last
  lines of its log.

Both reach the main thread with a signal sent to that thread (SIGALRM): a blocking system call
there is interrupted, and the native module's waits check for signals. Should the main thread
still not move `--hard-exit-after` seconds later, the watchdog prints every thread's stack,
kills the clusters' daemons and exits the process (status 3)."""

from __future__ import annotations

import faulthandler
import os
import shutil
import signal
import sys
import threading
import time

import pytest

from tests.harness.cluster import Cluster

GIB = 1 << 30
# The status of a run the watchdog ended itself, when the main thread could not be reached.
HARD_EXIT = 3


def pytest_addoption(parser):
    group = parser.getgroup("watchdog", "the run's watchdog (tests/harness/watchdog.py)")
    group.addoption(
        "--time-limit",
        type=float,
        default=900.0,
        metavar="SECONDS",
        help="the longest a test's setup, call or teardown may take, unless its "
        "time_limit mark says otherwise (default 900; 0: none)",
    )
    group.addoption(
        "--min-free-gib",
        type=float,
        default=2.0,
        metavar="GIB",
        help="the run ends once a test cluster's disk has less free (default 2)",
    )
    group.addoption(
        "--hard-exit-after",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long the main thread has to end the test once told, before the "
        "watchdog ends the process itself (default 60)",
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "time_limit(seconds): this test's own limit for each of "
        "its phases, in place of --time-limit",
    )
    dog = Watchdog(
        config.getoption("time_limit"),
        config.getoption("min_free_gib") * GIB,
        config.getoption("hard_exit_after"),
    )
    config.pluginmanager.register(dog, "watchdog")
    dog.start()


class Watchdog:
    """One thread per run; the main thread tells it which phase of which test runs."""

    INTERVAL = 1.0

    def __init__(self, time_limit: float, min_free: float, hard_exit_after: float):
        self.time_limit = time_limit
        self.min_free = min_free
        self.hard_exit_after = hard_exit_after
        self.ended: str | None = None  # why the run was ended, once it is
        self._main = threading.main_thread().ident
        # The phase running: (what, deadline), or None between phases.
        self._phase: tuple[str, float] | None = None
        self._overrun: str | None = None
        self._told_at: float | None = None
        # The real standard error: pytest captures fd 2 while a test runs, and is not
        # capturing while plugins are configured.
        self._stderr = os.dup(2)
        self._stop = threading.Event()
        self._status = 0

    def start(self) -> None:
        signal.signal(signal.SIGALRM, self._on_signal)
        threading.Thread(target=self._run, name="watchdog", daemon=True).start()

    # -- the main thread's side ------------------------------------------------------------

    # Old-style wrappers: pytest 7 (Debian 12's) runs this plugin too, in the roots.
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item):
        self._begin(item, "setup")
        yield
        self._end()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        self._begin(item, "call")
        yield
        self._end()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item):
        self._begin(item, "teardown")
        yield
        self._end()

    def _begin(self, item, when: str) -> None:
        if self.ended:  # the interrupt was caught somewhere: end the run here
            raise KeyboardInterrupt(self.ended)
        mark = item.get_closest_marker("time_limit")
        limit = float(mark.args[0]) if mark else self.time_limit
        self._phase = (
            (
                f"{item.nodeid} ({when}): past its time limit of {limit:g} s",
                time.monotonic() + limit,
            )
            if limit
            else None
        )

    def _end(self) -> None:
        self._phase = None
        self._overrun = None
        self._told_at = None

    def _on_signal(self, _signum, _frame) -> None:
        if self.ended:
            raise KeyboardInterrupt(self.ended)
        overrun = self._overrun
        if overrun and self._phase:
            faulthandler.dump_traceback(2, all_threads=True)  # into the test's captured stderr
            pytest.fail(overrun, pytrace=False)

    def pytest_sessionfinish(self, session):
        self._stop.set()
        self._status = session.exitstatus

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self):
        if self.ended:
            # What was left of the interrupted test may wait on the dead cluster for ever when
            # the interpreter frees it (a writer draining its writes): the run is over.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(int(self._status))

    def pytest_terminal_summary(self, terminalreporter):
        if self.ended:
            terminalreporter.section("watchdog: the run was ended", red=True)
            for line in self.ended.splitlines():
                terminalreporter.line(line, red=True)

    # -- the watchdog's thread ------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(self.INTERVAL):
            if self._told_at is not None:
                if time.monotonic() - self._told_at > self.hard_exit_after:
                    self._hard_exit()
                continue
            phase = self._phase
            if phase and time.monotonic() > phase[1]:
                self._overrun = phase[0]
                self._tell()
                continue
            problem = self._problem()
            if problem:
                self.ended = problem
                self._write(f"\nwatchdog: {problem}\nwatchdog: ending the run\n")
                self._tell()

    def _problem(self) -> str | None:
        """What makes going on pointless: a cluster's daemon gone, or its disk nearly full."""
        for cluster in list(Cluster.watched):
            for name in cluster.dead():
                return (
                    f"{name} of the test cluster in {cluster.root} died "
                    f"({cluster.exit_status(name)}); the last lines of its log:\n"
                    f"{cluster.log_tail(name)}"
                )
            free = shutil.disk_usage(cluster.root).free
            if free < self.min_free:
                return (
                    f"the disk of the test cluster in {cluster.root} has "
                    f"{free / GIB:.1f} GiB free, less than --min-free-gib "
                    f"{self.min_free / GIB:g}: its OSD would stop (ENOSPC)"
                )
        return None

    def _tell(self) -> None:
        """Interrupts the main thread: a blocking call there returns EINTR and runs the
        handler."""
        self._told_at = time.monotonic()
        signal.pthread_kill(self._main, signal.SIGALRM)

    def _hard_exit(self) -> None:
        why = self.ended or self._overrun or "?"
        self._write(
            f"\nwatchdog: {why}\nwatchdog: the main thread did not stop in "
            f"{self.hard_exit_after:g} s; every thread's stack:\n"
        )
        faulthandler.dump_traceback(self._stderr, all_threads=True)
        for cluster in list(Cluster.watched):
            cluster.kill_daemons()
        self._write(f"watchdog: the clusters' daemons are killed; exiting with {HARD_EXIT}\n")
        os._exit(HARD_EXIT)

    def _write(self, text: str) -> None:
        os.write(self._stderr, text.encode(errors="replace"))
