"""A slow upload that stalls, under eventlet's monkey-patching as glance's eventlet server runs
it, for tests/test_progress.py: a green thread ticks every 10 ms meanwhile. Run from the
checkout's root:

    python -m tests.harness.green_progress CEPH_CONF POOL IMAGE

Prints one JSON object: the bytes written, the tick's worst lateness, the progress reporter's
records (with whether the hub's thread emitted them) and whether threads were patched.
Importing it patches the interpreter: it is a program, not a library.
"""

# The hub's module first: it monkey-patches before anything else is imported.
from tests.harness.green_hub import Collect, late, records, threads_patched, ticker  # isort: skip

import io
import json
import logging
import sys

import eventlet

import glance_rbd_native
from tests.harness.cluster import Cluster
from tests.harness.data import MiB, data_of
from tests.harness.stores import make_store


class Slow:
    """`data`, read 0.3 s apart, with a stall of 3.5 s at its middle."""

    def __init__(self, data):
        self.stream = io.BytesIO(data)

    def read(self, size):
        eventlet.sleep(3.5 if self.stream.tell() == 3 * MiB else 0.3)
        return self.stream.read(size)


def main():
    logging.getLogger("glance_rbd_native.progress").addHandler(Collect(thread=True))
    logging.getLogger("glance_rbd_native.progress").setLevel(logging.INFO)
    conf, pool, name = sys.argv[1:]
    assert glance_rbd_native.patch()
    data = data_of(6 * MiB, seed=11)
    store = make_store(Cluster.describe(conf, pool), chunk_mib=1)  # configured on the hub
    eventlet.spawn(ticker)
    eventlet.sleep(0.05)
    written = store.add(name, Slow(data), len(data), "md5")[1]
    print(
        json.dumps(
            {
                "written": written,
                "late": max(late),
                "records": records,
                "patched": threads_patched(),
            }
        )
    )


if __name__ == "__main__":
    main()
