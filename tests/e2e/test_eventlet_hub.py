"""One eventlet glance-api worker (glance 32's own server) moving 1 GiB, native and stock: an
upload, then the download of it, while GETs of the image go to the same worker
(tests/harness/hub_latency.py). Every request of a worker is a green thread on one OS thread,
so a wait in librbd made on that thread holds up every request. Stock makes each 8 MiB write
and read there; native makes its waits in eventlet's pool (glance_rbd_native.green).

What is asserted holds on a loaded 2-core machine where the OSD, the native threads, the worker
and this process share the CPU: every request answered, native's p99 during a transfer at most
P99_BOUND above the same worker's p99 at rest, and under stock's, all measured in the same run.
The bound is on what a transfer adds: on a fresh machine that builds Debian roots beside the
tests, the worker at rest already had a p99 of 760 ms. The product target, a native p99 of at
most 100 ms, is the benchmark's to report: here a full garbage collection of the worker alone
holds its hub for 150-350 ms (one every 40 or so GETs), with either driver and with no
transfer at all."""

import contextlib
import functools
import hashlib
import http.client
import time

import numpy as np
import pytest

from tests.harness import hub_latency, venvs
from tests.harness.data import MiB

pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.alone]

SIZE = 1024 * MiB
DRIVERS = ("native", "stock")
# Seconds native's p99 during a transfer may add to the worker's p99 at rest. Measured (2-core
# machine, other test runs beside it, load 1.5 to 4): native 0.13-0.37 s for uploads, 0.04-0.64
# s for downloads; stock 0.72-1.43 s and 0.61-4.4 s. A native call that held the hub for a
# whole transfer gave 6.4 s.
P99_BOUND = 1.0
# The probe is meaningless when the worker cannot keep up with it at rest: a worker answers in
# 8-21 ms then; on a machine loaded past that, seconds.
IDLE_P50_MAX = 0.1
IDLE_TRIES = 3


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A file of SIZE random bytes, and its md5."""
    path = tmp_path_factory.mktemp("hub") / "image"
    rng = np.random.default_rng(1024)
    md5 = hashlib.md5()
    with open(path, "wb") as out:
        for _ in range(SIZE // (64 * MiB)):
            block = rng.integers(0, 256, 64 * MiB, dtype=np.uint8).tobytes()
            md5.update(block)
            out.write(block)
    yield path, md5.hexdigest()
    path.unlink()


def download(api, image_id):
    """GETs the image data, counting it rather than keeping it (1 GiB): (status, bytes
    received, the first MiB)."""
    conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=600)
    try:
        conn.request("GET", f"/v2/images/{image_id}/file")
        resp = conn.getresponse()
        head = resp.read(MiB)
        received = len(head)
        buffer = memoryview(bytearray(MiB))
        while n := resp.readinto(buffer):
            received += n
        return resp.status, received, head
    finally:
        conn.close()


def test_small_requests_are_answered_during_transfers(new_glance_api, source, cluster):
    path, md5 = source
    with open(path, "rb") as f:
        first_mib = f.read(MiB)
    bin_dir = venvs.eventlet_glance()
    with contextlib.ExitStack() as stack:
        servers = {
            driver: stack.enter_context(
                new_glance_api(
                    f"eventlet-hub-{driver}",
                    native=driver == "native",
                    server="eventlet",
                    bin_dir=bin_dir,
                    processes=1,
                )
            )
            for driver in DRIVERS
        }
        images = {
            driver: api.create_image(f"hub latency {driver}") for driver, api in servers.items()
        }
        for driver, image_id in images.items():
            stack.callback(servers[driver].delete, image_id)
        figures = {}
        for driver, api in servers.items():
            hub_latency.warm_up_transfers(api)
            hub_latency.warm_up(api, images[driver])
        # A burst of load from elsewhere passes: the probe at rest is tried again, IDLE_TRIES
        # times at most, before the test gives up on this machine (a skip, with its figures,
        # listed at the end of the run).
        for _ in range(IDLE_TRIES):
            for driver, api in servers.items():
                figures[driver, "idle"] = hub_latency.measure(
                    api, images[driver], functools.partial(time.sleep, 2)
                )[1]
            if all(figures[driver, "idle"].p50 <= IDLE_P50_MAX for driver in DRIVERS):
                break
            time.sleep(5)
        else:
            idle = {driver: figures[driver, "idle"].summary() for driver in DRIVERS}
            pytest.skip(
                f"the machine stayed too loaded for the probe, {IDLE_TRIES} times: with no "
                f"transfer, {idle}"
            )
        # Interleaved, so that a burst of load from elsewhere falls on both drivers alike.
        for driver, api in servers.items():
            with open(path, "rb") as body:
                (status, out), figures[driver, "upload"] = hub_latency.measure(
                    api,
                    images[driver],
                    functools.partial(api.upload, images[driver], body, size=SIZE),
                )
            assert status == 204, out[:500]
            image = api.image(images[driver])
            assert (image["status"], image["size"], image["checksum"]) == ("active", SIZE, md5)
        for driver, api in servers.items():
            (status, received, head), figures[driver, "download"] = hub_latency.measure(
                api, images[driver], functools.partial(download, api, images[driver])
            )
            assert (status, received, head == first_mib) == (200, SIZE, True)
        native_log = servers["native"].log()
    assert f"stored image {images['native']} with the native writer" in native_log

    print()
    for (driver, transfer), latencies in figures.items():
        print(f"eventlet, 1 worker, {driver}, {transfer}: GET {latencies.summary()}")
    for (driver, transfer), latencies in figures.items():
        assert latencies.failed == [], (driver, transfer, latencies.failed[:5])
        assert latencies.count >= 10, (driver, transfer, latencies.summary())
    at_rest = figures["native", "idle"].p99
    for transfer in ("upload", "download"):
        native, stock = figures["native", transfer], figures["stock", transfer]
        assert native.p99 <= at_rest + P99_BOUND, (
            transfer,
            native.summary(),
            figures["native", "idle"].summary(),
        )
        assert native.p99 < stock.p99, (transfer, native.summary(), stock.summary())
