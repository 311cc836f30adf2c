"""The run's watchdog (tests/harness/watchdog.py), seen from outside: a child pytest runs the
tests of tests/harness/watched_run.py on a throwaway cluster of its own, and this test does to
that cluster what a failing machine does."""

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests.harness import watchdog
from tests.harness.waiting import wait_for

pytestmark = pytest.mark.cluster

CHECKOUT = pathlib.Path(__file__).resolve().parents[1]

# From the OSD's death to the child's exit: the watchdog looks every second, the interrupted
# upload returns at once, and the session's teardown stops the monitor.
ENDS_WITHIN = 30


def _child(tmp_path, *args, cases=("test_writes_until_the_run_ends",)):
    env = {k: v for k, v in os.environ.items() if k != "GLANCE_RBD_TEST_CLUSTER"}
    env["WATCHED_RUN_READY"] = str(tmp_path / "ready")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            *args,
            *(f"tests/harness/watched_run.py::{case}" for case in cases),
        ],
        cwd=CHECKOUT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait_for(path: pathlib.Path, child: subprocess.Popen, timeout: float) -> str:
    def written():
        if path.exists():
            return True
        assert child.poll() is None, child.stdout.read()
        return False

    assert wait_for(written, timeout, every=0.1), f"no {path.name} after {timeout} s"
    return path.read_text()


def _alive(pid: int) -> bool:
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def _assert_gone(pids, within: float = 10) -> None:
    """The processes end within seconds (a SIGKILL is delivered, not waited for)."""
    gone = wait_for(lambda: not any(_alive(pid) for pid in pids), within, every=0.1)
    assert gone, f"the cluster's daemons outlived the run: {pids}"


def test_a_killed_osd_ends_the_run_with_its_log(tmp_path):
    child = _child(tmp_path)
    try:
        root = pathlib.Path(_wait_for(tmp_path / "ready", child, 120))
        pids = json.loads((root / "cluster.json").read_text())["pids"]
        os.kill(pids["osd.0"], signal.SIGKILL)
        killed = time.monotonic()
        out, _ = child.communicate(timeout=ENDS_WITHIN + 60)
        ended = time.monotonic() - killed
    finally:
        child.kill()
        child.wait()
    assert child.returncode == pytest.ExitCode.INTERRUPTED, out
    assert ended < ENDS_WITHIN, f"{ended:.1f} s\n{out}"
    assert f"osd.0 of the test cluster in {root} died (killed by SIGKILL)" in out
    assert f"==> {root}/log/osd.0.out <==" in out and f"==> {root}/log/osd.0.log <==" in out
    assert "watchdog: the run was ended" in out  # the summary's section
    _assert_gone(pids.values())


def test_a_full_disk_ends_the_run(tmp_path):
    # Less than this much free: any disk, from the moment the cluster is up.
    child = _child(tmp_path, "--min-free-gib", "1e9")
    out, _ = child.communicate(timeout=300)
    assert child.returncode == pytest.ExitCode.INTERRUPTED, out
    assert "GiB free, less than --min-free-gib 1e+09: its OSD would stop (ENOSPC)" in out


def test_a_test_past_its_time_limit_fails_and_the_run_goes_on(tmp_path):
    """A write waiting on a frozen OSD (alive: nothing for the cluster check) is stopped by the
    time limit; the next test runs. The first test's mark gives it more (the cluster's boot)."""
    child = _child(
        tmp_path,
        "--time-limit",
        "5",
        "-rA",
        cases=("test_the_cluster_answers", "test_writes_to_a_frozen_osd", "test_the_run_goes_on"),
    )
    out, _ = child.communicate(timeout=300)
    assert child.returncode == pytest.ExitCode.TESTS_FAILED, out
    assert "test_writes_to_a_frozen_osd (call): past its time limit of 5 s" in out
    assert "1 failed, 2 passed" in out
    assert "Thread" in out  # every thread's stack, in the failed test's stderr


def test_a_test_that_cannot_be_interrupted_ends_the_process(tmp_path):
    """The main thread inside a librbd call that waits on a frozen OSD: the watchdog prints
    every thread's stack, kills the cluster's daemons and exits."""
    child = _child(
        tmp_path,
        "--time-limit",
        "5",
        "--hard-exit-after",
        "5",
        cases=("test_the_cluster_answers", "test_grows_an_image_on_a_frozen_osd"),
    )
    out, _ = child.communicate(timeout=300)
    assert child.returncode == watchdog.HARD_EXIT, out
    assert "test_grows_an_image_on_a_frozen_osd (call): past its time limit of 5 s" in out
    assert "the main thread did not stop in 5 s; every thread's stack:" in out
    assert "in _write_while_frozen" in out  # the main thread's stack
    assert "the clusters' daemons are killed" in out
    root = pathlib.Path((tmp_path / "ready").read_text())
    _assert_gone(json.loads((root / "cluster.json").read_text())["pids"].values())
    # A hard exit skips the child's teardown, which removes its cluster's directory.
    shutil.rmtree(root)
