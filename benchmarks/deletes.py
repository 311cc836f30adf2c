"""DELETE through glance-api, native against stock, on the local cluster and under the latency
model: the wall time of the request, and the time until the image's data is gone from the pool.

Four uWSGI glance-api servers (tests/harness/glance_api.py) share one catalogue: native and
stock, each also with the latency model in its environment (CEPH_ARGS). Every image is uploaded
through the local native one, the quickest, and deleted through the server the row measures, so
that the same image, stored the same way, is what each driver deletes. After each DELETE, the
image's data objects (`rbd_data.<id>.*`) are listed until there are none: stock removes them
before it answers, native in the background after it (the Ceph manager's task queue, here the
admin user's caps allow it). Then the pool's bytes must be back to their level before the
upload, within USAGE_BOUND, or the run fails. Before the rows, each server deletes WARM_UP small
images, not counted: a worker's first delete also connects it to the cluster, as its first
upload does, and long-running workers have connected long before.

`rows` runs it on a cluster and database of the caller's (bench.py's `deletes` group); `table`
makes its rows.
"""

import contextlib
import hashlib
import os
import pathlib
import statistics
import tempfile
import time

import rados
import rbd

from benchmarks import huge
from tests.harness.glance_api import GlanceApi

MiB, GiB = 1 << 20, 1 << 30
DRIVERS = ("native", "stock")
# What the pool may hold more after the data is gone than before the upload: the index
# objects' omap entries.
USAGE_BOUND = MiB
GONE_TIMEOUT = 600
# The request's target: at most this at p99, native, for a 10 GiB image.
TARGET_MS = 200
# Deletes of a small image through each server before the rows: a few per uWSGI worker.
WARM_UP = 4


class Pool:
    """The pool, read through Debian's rados and rbd modules: independent of the drivers."""

    def __init__(self, cluster):
        self.client = rados.Rados(conffile=str(cluster.conf_path), rados_id="admin")
        self.client.connect()
        self.ioctx = self.client.open_ioctx(cluster.pool)

    def close(self):
        self.ioctx.close()
        self.client.shutdown()

    def rbd_id(self, name):
        with rbd.Image(self.ioctx, name) as image:
            return image.id()

    def data_objects(self, rbd_id):
        prefix = f"rbd_data.{rbd_id}."
        return sum(1 for obj in self.ioctx.list_objects() if obj.key.startswith(prefix))

    def bytes(self):
        return sum(obj.stat()[0] for obj in self.ioctx.list_objects())


def one(uploader, server, pool, path, md5):
    """Uploads `path` through `uploader`, deletes it through `server`: the figures."""
    size = path.stat().st_size
    before = pool.bytes()
    image_id = uploader.create_image(f"bench delete {size >> 20} MiB")
    with open(path, "rb") as data:
        status, out = uploader.upload(image_id, data, size=size)
    image = uploader.image(image_id)
    if status != 204 or image["checksum"] != md5:
        uploader.delete(image_id)
        raise RuntimeError(f"upload for the delete rows: {status} {out[:300]!r} {image}")
    rbd_id = pool.rbd_id(image_id)
    objects = pool.data_objects(rbd_id)
    started = time.perf_counter()
    status, out = server.request("DELETE", f"/v2/images/{image_id}")
    seconds = time.perf_counter() - started
    if status != 204:
        raise RuntimeError(f"DELETE through {server.url}: {status} {out[:300]!r}")
    while (left := pool.data_objects(rbd_id)) and time.perf_counter() - started < GONE_TIMEOUT:
        time.sleep(0.1)
    gone = time.perf_counter() - started
    if left:
        raise RuntimeError(f"{left} data objects of {image_id} left {GONE_TIMEOUT} s after")
    after = pool.bytes()
    if after > before + USAGE_BOUND:
        raise RuntimeError(f"the pool holds {after - before} bytes more than before the upload")
    return {"size": size, "objects": objects, "seconds": seconds, "gone_seconds": gone}


def rows(cluster, db, root, sizes, rounds, latency):
    """Every sample, by name ("delete native", "latency delete stock"): a list of dicts with
    the image's "size" and data "objects", the request's "seconds", and "gone_seconds", until
    its data objects were gone. latency: the CEPH_ARGS of the latency model."""
    database = db.create_database("glance_deletes")
    samples = {}
    with contextlib.ExitStack() as stack:
        servers = {
            (mode, driver): stack.enter_context(
                GlanceApi(
                    root / f"glance-deletes-{mode}-{driver}",
                    cluster.conf_path,
                    database,
                    native=driver == "native",
                    environment={"CEPH_ARGS": latency} if mode == "latency" else None,
                )
            )
            for mode in ("local", "latency")
            for driver in DRIVERS
        }
        pool = Pool(cluster)
        stack.callback(pool.close)
        uploader = servers["local", "native"]
        with tempfile.TemporaryDirectory(dir=root) as scratch:
            small = pathlib.Path(scratch) / "small.raw"
            small.write_bytes(os.urandom(MiB))
            md5 = hashlib.md5(small.read_bytes()).hexdigest()
            for server in servers.values():
                for _ in range(WARM_UP):
                    one(uploader, server, pool, small, md5)
        for size in sizes:
            path, md5 = huge.data_file(root, size)
            for round_no in range(rounds):
                print(f"deletes: {size >> 20} MiB, round {round_no + 1}/{rounds}", flush=True)
                for (mode, driver), server in servers.items():
                    name = f"{'latency ' if mode == 'latency' else ''}delete {driver}"
                    samples.setdefault(name, []).append(one(uploader, server, pool, path, md5))
    return samples


def p99(values):
    """The 99th percentile, nearest rank: with fewer than 100 values, the highest."""
    ordered = sorted(values)
    return ordered[max(0, -(-99 * len(ordered) // 100) - 1)]


def table(samples, sizes):
    rows = []
    for size in sizes:
        for mode, case in (("", "local"), ("latency ", "latency model (20 ms)")):
            by = {
                d: [s for s in samples[f"{mode}delete {d}"] if s["size"] == size] for d in DRIVERS
            }
            n, st = by["native"], by["stock"]
            ms = {d: [s["seconds"] * 1000 for s in by[d]] for d in DRIVERS}
            p50 = {d: statistics.median(ms[d]) for d in DRIVERS}
            gone = {d: statistics.median(s["gone_seconds"] for s in by[d]) for d in DRIVERS}
            measured = (
                f"request p50 / p99: native {p50['native']:.0f} / {p99(ms['native']):.0f} ms, "
                f"stock {p50['stock']:.0f} / {p99(ms['stock']):.0f} ms "
                f"({p50['stock'] / p50['native']:.0f}x); "
                f"data gone after (median): native {gone['native']:.1f} s, stock "
                f"{gone['stock']:.1f} s; {n[0]['objects']} data objects, {len(n)} and "
                f"{len(st)} deletes"
            )
            target, met = "reported", None
            if size >= 10 * GiB and not mode:
                target = f"native p99 <= {TARGET_MS} ms"
                met = p99(ms["native"]) <= TARGET_MS
            rows.append(
                {
                    "case": f"DELETE of a {size / GiB:g} GiB image through glance-api (uWSGI), "
                    f"{case}",
                    "measured": measured,
                    "target": target,
                    "met": met,
                }
            )
    return rows
