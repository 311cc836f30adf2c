"""Native waits kept off eventlet's hub (glance_rbd_native.green), in an interpreter that eventlet
has monkey-patched as glance's eventlet server does: while the patched Store uploads and
downloads, a green thread that sleeps 10 ms at a time wakes on time. With every native call
made directly instead, it wakes only when the transfer is over: the measure can fail. Records
the native layer logs from eventlet's pool reach logging, from the hub's own thread."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from tests.harness.data import MiB

pytestmark = [pytest.mark.cluster, pytest.mark.alone]

CHECKOUT = pathlib.Path(__file__).resolve().parents[1]  # the child imports tests.harness

SIZE = 192 * MiB
# A green thread that ticks every 10 ms is woken this late at most, by a transfer that keeps
# its waits off the hub. Measured on a loaded 2-core machine, where the OSD, the native digest
# threads and the hub share the CPU: 5-75 ms; with the calls made on the hub, the whole
# transfer, 0.28-0.88 s.
GREEN_LATE = 0.15

# argv: ceph.conf, pool, size. Prints one JSON object: per mode ("green": as shipped, "direct":
# every green.call replaced by a plain call), per transfer, its seconds and the tick's worst
# lateness; and the records of a failed upload, with whether the hub's thread emitted them.
CHILD = r"""
import warnings
warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")
import eventlet
eventlet.monkey_patch()

import io, json, logging, sys, time, uuid
from eventlet import patcher

import glance_rbd_native
from glance_rbd_native import green
from glance_store import location
from glance_store._drivers import rbd as rbd_driver
from tests.harness.cluster import Cluster
from tests.harness.data import data_of
from tests.harness.stores import make_store

real_ident = patcher.original("threading").get_ident
hub_thread = real_ident()
records = []

class Collect(logging.Handler):
    def emit(self, record):
        records.append({"level": record.levelname, "message": record.getMessage(),
                        "hub": real_ident() == hub_thread})

logging.getLogger().addHandler(Collect())
logging.getLogger().setLevel(logging.INFO)

conf, pool, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
assert glance_rbd_native.patch()
store = make_store(Cluster.describe(conf, pool))
data = data_of(size, seed=7)
late = []

def ticker():
    while True:
        start = time.monotonic()
        eventlet.sleep(0.01)
        late.append(time.monotonic() - start - 0.01)

def timed(transfer):
    eventlet.sleep(0.05)  # the ticker is running
    del late[:]
    start = time.monotonic()
    result = transfer()
    seconds = time.monotonic() - start
    eventlet.sleep(0.05)  # its last tick, however late, is in
    return result, {"seconds": seconds, "late": max(late)}

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
    green.call = shipped if mode == "green" else (lambda fn, *args, **kwargs: fn(*args, **kwargs))
    name = f"green-{mode}-{uuid.uuid4()}"
    out["names"].append(name)
    (uri, written, _, _, _), up = timed(lambda: upload(name))
    (read, loc), down = timed(lambda: download(uri))
    assert written == read == size, (written, read)
    store.delete(loc)
    out[mode] = {"upload": up, "download": down}
green.call = shipped

class Failing(io.RawIOBase):
    # Two chunks, then the client is gone.
    def __init__(self):
        self.left = 2
    def readable(self):
        return True
    def read(self, n=-1):
        if self.left == 0:
            raise OSError("client went away")
        self.left -= 1
        return data[:n]

failed = f"green-failed-{uuid.uuid4()}"
out["names"].append(failed)
del records[:]
try:
    store.add(failed, Failing(), size, "sha512")
except OSError:
    pass
out["failed"] = {"name": failed, "records": records}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def measured(cluster):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GLANCE_RBD_NATIVE")}
    run = subprocess.run([sys.executable, "-c", CHILD, str(cluster.conf_path), cluster.pool,
                          str(SIZE)], cwd=CHECKOUT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.splitlines()[-1])
    for mode in ("green", "direct"):
        for transfer, figures in result[mode].items():
            print(f"{mode} {transfer}: {figures['seconds']:.2f}s, "
                  f"tick late by {figures['late'] * 1000:.1f} ms at most")
    assert not set(result["names"]) & set(cluster.images())
    return result


@pytest.mark.parametrize("transfer", ["upload", "download"])
def test_the_hub_goes_on_during_native_waits(measured, transfer):
    assert measured["green"][transfer]["late"] < GREEN_LATE, measured["green"][transfer]


@pytest.mark.parametrize("transfer", ["upload", "download"])
def test_direct_native_waits_block_the_hub(measured, transfer):
    # What the test above would see without green.call: nothing in either loop waits on the
    # hub (the source is in memory, the chunks are only counted), so the hub waits out most of
    # the transfer.
    direct = measured["direct"][transfer]
    assert direct["late"] > 0.5 * direct["seconds"], direct
    assert direct["late"] > max(GREEN_LATE, 3 * measured["green"][transfer]["late"]), direct


def test_records_from_the_pool_reach_logging_on_the_hub(measured, cluster):
    failed = measured["failed"]
    removed = f"removed partial image '{failed['name']}' in pool '{cluster.pool}'"
    records = [r for r in failed["records"] if r["message"] == removed]
    assert records == [{"level": "INFO", "message": removed, "hub": True}], failed["records"]
    assert all(r["hub"] for r in failed["records"])
