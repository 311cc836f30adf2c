"""Uploads and downloads under eventlet's monkey-patching, as glance's eventlet server runs them,
for tests/test_green.py: a green thread ticks every 10 ms meanwhile, and how late it wakes tells
whether the native waits kept off the hub. Run from the checkout's root:

    python -m tests.harness.green_transfers CEPH_CONF POOL SIZE

Prints one JSON object: per mode ("green": as shipped, "direct": every green.call replaced by a
plain call), per transfer, its seconds and the tick's worst lateness; and the records of a failed
upload, with whether the hub's thread emitted them. Importing it patches the interpreter: it is
a program, not a library.
"""

# The hub's module first: it monkey-patches before anything else is imported.
from tests.harness.green_hub import Collect, late, records, ticker  # isort: skip

import io
import json
import logging
import sys
import time
import uuid

import eventlet
from glance_store import location
from glance_store._drivers import rbd as rbd_driver

import glance_rbd_native
from glance_rbd_native import green
from tests.harness.cluster import Cluster
from tests.harness.data import data_of
from tests.harness.stores import make_store


class Failing(io.RawIOBase):
    """Two chunks of `data`, then the client is gone."""

    def __init__(self, data):
        self.data = data
        self.left = 2

    def readable(self):
        return True

    def read(self, n=-1):
        if self.left == 0:
            raise OSError("client went away")
        self.left -= 1
        return self.data[:n]


def timed(transfer):
    eventlet.sleep(0.05)  # the ticker is running
    del late[:]
    start = time.monotonic()
    result = transfer()
    seconds = time.monotonic() - start
    eventlet.sleep(0.05)  # its last tick, however late, is in
    return result, {"seconds": seconds, "late": max(late)}


def main():
    logging.getLogger().addHandler(Collect())
    logging.getLogger().setLevel(logging.INFO)

    conf, pool, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
    assert glance_rbd_native.patch()
    store = make_store(Cluster.describe(conf, pool))
    data = data_of(size, seed=7)

    def upload(name):
        return store.add(name, io.BytesIO(data), size, "sha512")

    def download(uri):
        loc = location.Location("rbd", rbd_driver.StoreLocation, store.conf, uri=uri)
        chunks, _ = store.get(loc)
        return sum(len(chunk) for chunk in chunks), loc

    eventlet.spawn(ticker)
    shipped = green.call
    out = {"names": []}
    for mode in ("green", "direct"):
        green.call = (
            shipped if mode == "green" else (lambda fn, *args, **kwargs: fn(*args, **kwargs))
        )
        name = f"green-{mode}-{uuid.uuid4()}"
        out["names"].append(name)
        (uri, written, _, _, _), up = timed(lambda name=name: upload(name))
        (read, loc), down = timed(lambda uri=uri: download(uri))
        assert written == read == size, (written, read)
        store.delete(loc)
        out[mode] = {"upload": up, "download": down}
    green.call = shipped

    failed = f"green-failed-{uuid.uuid4()}"
    out["names"].append(failed)
    del records[:]
    try:
        store.add(failed, Failing(data), size, "sha512")
    except OSError:
        pass
    out["failed"] = {"name": failed, "records": records}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
