"""A process that calls C `exit()` shuts down its idle cluster connections before
libceph-common's static destructors run, and connects no more. The shape is a preloading
server's worker: exit() called from one thread while the main thread is blocked.

A probe registered with libc before the connection runs after native's exit handler, and lists
the live threads: no Ceph messenger thread (`msgr-worker-*`) may be left. The same probe
registered after the connection runs before the handler and sees them: the probe can fail."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from tests.harness.data import new_name

pytestmark = pytest.mark.cluster

# The child, tests/harness/exit_probe.py, imports tests.harness from the checkout's root.
CHECKOUT = pathlib.Path(__file__).resolve().parents[1]

MESSENGER = "msgr-worker-"


def run_child(cluster, mode, name, out):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GLANCE_RBD_NATIVE")}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.harness.exit_probe",
            mode,
            str(cluster.conf_path),
            cluster.pool,
            name,
            str(out),
        ],
        cwd=CHECKOUT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    probes = {}
    if out.exists():
        for line in out.read_text().splitlines():
            seen = json.loads(line)
            probes[seen["pid"]] = seen
    return run, probes


def assert_clean(run):
    assert run.returncode == 0, (run.returncode, run.stderr[-3000:])
    assert "terminate called" not in run.stderr, run.stderr[-3000:]


def messengers(seen):
    return [thread for thread in seen["threads"] if thread.startswith(MESSENGER)]


@pytest.mark.parametrize("round_", range(5))
def test_idle_connections_are_shut_down_before_the_destructors(
    cluster, clean_pool, tmp_path, round_
):
    name = new_name("clean-exit")
    run, probes = run_child(cluster, "idle", name, tmp_path / "probe")
    clean_pool.remove(name)
    assert_clean(run)
    (seen,) = probes.values()
    print(f"after native's handler: {seen['threads']}")
    assert not messengers(seen), seen
    # The cache refuses to connect anew, rather than connect during exit.
    assert seen["late"].startswith("ConnectError: [Errno 125] cannot connect to the Ceph"), seen
    assert "the process is exiting" in seen["late"], seen


def test_control_a_probe_before_the_handler_sees_the_messengers(cluster, clean_pool, tmp_path):
    name = new_name("clean-exit-control")
    run, probes = run_child(cluster, "control", name, tmp_path / "probe")
    clean_pool.remove(name)
    assert_clean(run)
    (seen,) = probes.values()
    print(f"before native's handler: {seen['threads']}")
    assert messengers(seen), seen
    assert seen["late"].startswith("PoolNotFound:"), seen


def test_a_transfer_running_at_exit_is_left_alone(cluster, clean_pool, tmp_path):
    name = new_name("clean-exit-busy")
    run, probes = run_child(cluster, "busy", name, tmp_path / "probe")
    # The upload never finished: its partial image is left, still watched by the dead client
    # until the OSD's watch timeout, unless that client is blocklisted.
    status = json.loads(cluster.rbd("status", "--format", "json", f"{cluster.pool}/{name}"))
    for watcher in status["watchers"]:
        cluster.ceph("osd", "blocklist", "add", watcher["address"])
    clean_pool.remove(name)
    assert_clean(run)
    (seen,) = probes.values()
    print(f"after native's handler, an upload running: {seen['threads']}")
    # Its connection was not shut down under it...
    assert messengers(seen), seen
    # ...and no connection starts anew.
    assert "the process is exiting" in seen["late"], seen


def test_children_exiting_leave_the_parents_connection_alone(cluster, clean_pool, tmp_path):
    name = new_name("clean-exit-fork")
    run, probes = run_child(cluster, "fork", name, tmp_path / "probe")
    for image in (name, f"{name}-child", f"{name}-again"):
        clean_pool.remove(image)
    assert_clean(run)
    report = json.loads(run.stdout.splitlines()[-1])
    assert report["statuses"] == [0, 0], report
    assert report["connections"] == 1, report  # the parent's first, reused
    assert set(probes) == {report["parent"], *report["children"]}, probes
    for seen in probes.values():
        assert not messengers(seen), seen
        assert "the process is exiting" in seen["late"], seen
