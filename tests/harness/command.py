"""The glance-rbd-native command as the tests run it: a process of its own, given glance's
configuration file, optionally under a prefix that places it elsewhere (another pid namespace,
a container's)."""

import json
import pathlib
import subprocess
import sys

CHECKOUT = pathlib.Path(__file__).resolve().parents[2]
# The prefix that runs a command in a pid namespace of its own (its own /proc), as kolla runs
# glance_api: it sees no other container's processes.
OWN_PID_NAMESPACE = ("unshare", "--pid", "--fork", "--mount-proc", "--kill-child")


def in_namespace_of(pid: int) -> tuple[str, ...]:
    """The prefix that runs a command inside the pid and mount namespaces of process `pid`."""
    return ("nsenter", "--target", str(pid), "--pid", "--mount")


def run(conf_file, *args, wrap=(), check=True, status=0) -> subprocess.CompletedProcess:
    """`WRAP... python -m glance_rbd_native ARGS --config-file CONF`; with `check`, asserts that
    it exited with `status`."""
    done = subprocess.run(
        [*wrap, sys.executable, "-m", "glance_rbd_native", *args, "--config-file", str(conf_file)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=CHECKOUT,
    )
    if check:
        assert done.returncode == status, done.stdout + done.stderr
    return done


def report(conf_file, *args, wrap=(), status=0) -> dict:
    """The JSON report (`--format json`) on the first backend, of a run that must exit with
    `status` (1: `sweep --remove` left some of what it set out to remove)."""
    return json.loads(run(conf_file, *args, "--format", "json", wrap=wrap, status=status).stdout)[0]


def check_report(conf_file, *args, status) -> dict:
    """The JSON report of `check`, which must exit with `status`, or with the processes row's
    Warning where that is worse: that row is the host's (another lane's glance-api may be
    starting meanwhile), and the tests of it look at their own servers' lines
    (tests/e2e/test_check_processes.py)."""
    done = run(conf_file, "check", "--json", *args, check=False)
    report = json.loads(done.stdout)
    processes = [r["result"] for r in report["checks"] if r["check"] == "glance-api processes"]
    assert done.returncode == max(status, *processes), done.stdout + done.stderr
    return report
