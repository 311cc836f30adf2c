"""A process that uploads, then calls C `exit()` from a second thread while its main thread is
blocked, as a preloading server's worker does, for tests/test_clean_exit.py. A probe registered
with libc lists the live threads when it runs at exit, and tries a new connection. Run from the
checkout's root:

    python -m tests.harness.exit_probe MODE CEPH_CONF POOL IMAGE OUTPUT

Each process that runs the probe appends one JSON line to OUTPUT. The modes:

- idle: the probe, then an upload, then exit() while nothing holds the connection;
- control: an upload, then the probe (which so runs before native's handler), then exit();
- busy: the probe, then exit() while an upload is still writing;
- fork: the probe, an upload, then two children exit() (one after an upload of its own), then
  the parent uploads again, prints its pid, its children's and their exit statuses, and exits.
"""

import ctypes
import json
import os
import sys
import threading

import glance_rbd_native
from tests.harness.waiting import exit_status

LIBC = ctypes.CDLL(None)
# What the probe connects with, set by main() before it can run.
conf = out = ""


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
    assert LIBC.__cxa_atexit(PROBE, None, None) == 0


def upload(pool, image):
    with glance_rbd_native.RbdWriter(pool, image, conffile=conf, user="admin") as writer:
        writer.write(os.urandom(4 << 20))


def exit_from_a_thread():
    # ctypes releases the GIL for the call; the main thread stays blocked, as a worker's is.
    threading.Thread(target=LIBC.exit, args=(0,)).start()
    threading.Event().wait()


def main():
    global conf, out
    mode, conf, pool, name, out = sys.argv[1:6]
    glance_rbd_native.native_digests()  # librados and libceph-common are loaded from here on
    if mode != "control":
        register_probe()
    if mode == "busy":
        writer = glance_rbd_native.RbdWriter(pool, name, conffile=conf, user="admin")
        for _ in range(8):
            writer.write(os.urandom(4 << 20))
        exit_from_a_thread()
    upload(pool, name)
    if mode == "control":
        register_probe()
    if mode == "fork":
        children = []
        for index in range(2):
            pid = os.fork()
            if pid == 0:
                if index == 1:
                    upload(pool, f"{name}-child")
                LIBC.exit(0)
            children.append(pid)
        statuses = [exit_status(pid, 60) for pid in children]
        # The parent's connection, untouched by its children's exits, serves it again.
        upload(pool, f"{name}-again")
        report = {
            "parent": os.getpid(),
            "children": children,
            "statuses": statuses,
            "connections": glance_rbd_native.connection_count(),
        }
        print(json.dumps(report), flush=True)
    exit_from_a_thread()


if __name__ == "__main__":
    main()
