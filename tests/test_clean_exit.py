"""A process that calls C `exit()` shuts down its idle cluster connections before
libceph-common's static destructors run, and connects no more. The shape is a preloading
server's worker: exit() called from one thread while the main thread is blocked.

A probe registered with libc before the connection runs after native's exit handler, and lists
the live threads: no Ceph messenger thread (`msgr-worker-*`) may be left. The same probe
registered after the connection runs before the handler and sees them: the probe can fail."""

import json
import os
import subprocess
import sys

import pytest

from tests.harness.data import new_name

pytestmark = pytest.mark.cluster

# argv: mode, ceph.conf, pool, image name, output file. Each process that runs the probe
# appends one JSON line to the output file. Modes:
#   idle: the probe, then an upload, then exit() while nothing holds the connection;
#   control: an upload, then the probe (which so runs before native's handler), then exit();
#   busy: the probe, then exit() while an upload is still writing;
#   fork: the probe, an upload, then two children exit() (one after an upload of its own),
#       then the parent uploads again and exits.
CHILD = r"""
import ctypes, json, os, sys, threading, time

import glance_rbd_native

mode, conf, pool, name, out = sys.argv[1:6]
libc = ctypes.CDLL(None)
glance_rbd_native.native_digests()  # librados and libceph-common are loaded from here on

def threads():
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as comm:
                names.append(comm.read().strip())
        except FileNotFoundError:  # a thread that ended meanwhile
            pass
    return sorted(names)

def probe(_):
    seen = threads()
    # Without the handler, this connects (the connection is cached) and finds no such pool.
    try:
        glance_rbd_native.RbdWriter("no-such-pool", "late", conffile=conf, user="admin")
        late = "connected"
    except Exception as err:
        late = f"{type(err).__name__}: {err}"
    line = json.dumps({"pid": os.getpid(), "threads": seen, "late": late}) + "\n"
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, line.encode())
    os.close(fd)

# atexit() itself is not exported by glibc: it is __cxa_atexit with no object, as here.
PROBE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(probe)

def register_probe():
    assert libc.__cxa_atexit(PROBE, None, None) == 0

def upload(image):
    with glance_rbd_native.RbdWriter(pool, image, conffile=conf, user="admin") as writer:
        writer.write(os.urandom(4 << 20))

def exit_from_a_thread():
    # ctypes releases the GIL for the call; the main thread stays blocked, as a worker's is.
    threading.Thread(target=libc.exit, args=(0,)).start()
    threading.Event().wait()

if mode != "control":
    register_probe()
if mode == "busy":
    writer = glance_rbd_native.RbdWriter(pool, name, conffile=conf, user="admin")
    for _ in range(8):
        writer.write(os.urandom(4 << 20))
    exit_from_a_thread()
upload(name)
if mode == "control":
    register_probe()
if mode == "fork":
    children = []
    for index in range(2):
        pid = os.fork()
        if pid == 0:
            if index == 1:
                upload(f"{name}-child")
            libc.exit(0)
        children.append(pid)
    statuses = []
    for pid in children:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                statuses.append(os.waitstatus_to_exitcode(status))
                break
            time.sleep(0.1)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            statuses.append("hung")
    # The parent's connection, untouched by its children's exits, serves it again.
    upload(f"{name}-again")
    print(json.dumps({"parent": os.getpid(), "children": children, "statuses": statuses,
                      "connections": glance_rbd_native.connection_count()}), flush=True)
exit_from_a_thread()
"""

MESSENGER = "msgr-worker-"


def run_child(cluster, mode, name, out):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GLANCE_RBD_NATIVE")}
    run = subprocess.run([sys.executable, "-c", CHILD, mode, str(cluster.conf_path),
                          cluster.pool, name, str(out)], env=env, capture_output=True, text=True,
                         timeout=180)
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
def test_idle_connections_are_shut_down_before_the_destructors(cluster, clean_pool, tmp_path,
                                                                 round_):
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
