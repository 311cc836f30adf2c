"""DELETE through a real glance-api, native, under uWSGI and under glance's eventlet server, of
images of 1 GiB and 10 GiB: the image is out of the pool's listing when the request returns
(in the trash; its data removed in the background), and the pool's usage comes back to where it
was before the upload, within USAGE_BOUND. The 10 GiB image is stored thin (its first
DATA_10G bytes random, the rest zeros), so that it fits the test cluster: its delete still
removes, or looks for, every one of its 1,280 objects. What a DELETE takes, against stock's, is
the benchmark's to measure (`make bench`); here it is printed."""

import contextlib
import os
import time

import numpy as np
import pytest
import rados
import rbd

from tests.harness import trash, venvs
from tests.harness.data import MiB
from tests.harness.waiting import wait_for

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore:'cgi' is deprecated:DeprecationWarning"),
]

GiB = 1024 * MiB
# (image size, bytes of random data at its start; zeros after)
SIZES = {"1GiB": (GiB, GiB), "10GiB": (10 * GiB, 256 * MiB)}
# What the pool may hold more after the delete than before the upload: the indexes' omap
# entries, and objects of other tests' deletes still being purged are fewer, not more.
USAGE_BOUND = MiB
PIECE = 8 * MiB


def body(size, random_bytes):
    """The request body, in PIECE-sized pieces: `random_bytes` of random data, then zeros."""
    rng = np.random.default_rng(size)
    block = rng.integers(0, 256, 64 * MiB, dtype=np.uint8).tobytes()
    zeros = bytes(PIECE)
    for offset in range(0, size, PIECE):
        if offset < random_bytes:
            start = offset % len(block)
            yield block[start : start + PIECE]
        else:
            yield zeros


def pool_bytes(images):
    """The bytes of every object in the pool, as RADOS stats them. An object listed may be gone
    by its stat (the purge removes the image's header last): it counts for none."""

    def size(obj):
        try:
            return obj.stat()[0]
        except rados.ObjectNotFound:
            return 0

    return sum(size(obj) for obj in images.ioctx.list_objects())


def data_objects(images, image_id):
    return sum(
        1 for obj in images.ioctx.list_objects() if obj.key.startswith(f"rbd_data.{image_id}")
    )


@pytest.fixture(scope="module")
def servers(new_glance_api):
    """A native glance-api storing thin, under uWSGI, gunicorn and eventlet, each started on
    first use."""
    with contextlib.ExitStack() as stack:
        configs = {
            "uwsgi": dict,
            "gunicorn": lambda: dict(server="gunicorn"),
            "eventlet": lambda: dict(server="eventlet", bin_dir=venvs.eventlet_glance()),
        }

        class Servers(dict):
            def __missing__(self, server):
                api = new_glance_api(
                    f"deletes-{server}", native=True, thin_provisioning=True, **configs[server]()
                )
                api.start()
                stack.callback(api.stop)
                self[server] = api
                return api

        yield Servers()


@pytest.mark.parametrize("size", sorted(SIZES))
@pytest.mark.parametrize("server", ["uwsgi", "eventlet"])
def test_delete_returns_with_the_image_in_the_trash(servers, server, size, clean_pool):
    api = servers[server]
    total, random_bytes = SIZES[size]
    before = pool_bytes(clean_pool)
    image_id = api.create_image(f"delete {size}")
    status, out = api.upload(image_id, body(total, random_bytes), size=total)
    assert status == 204, out[:500]
    assert api.image(image_id)["status"] == "active"
    rbd_id = _rbd_id(clean_pool, image_id)
    assert data_objects(clean_pool, rbd_id) >= random_bytes // (8 * MiB)
    started = time.monotonic()
    status, out = api.request("DELETE", f"/v2/images/{image_id}")
    took = time.monotonic() - started
    assert status == 204, out[:500]
    assert image_id not in clean_pool.names()
    assert api.request("GET", f"/v2/images/{image_id}")[0] == 404
    print(f"\n{server}, {size}: DELETE answered in {took:.3f} s")
    gone = wait_for(lambda: data_objects(clean_pool, rbd_id) == 0, timeout=300)
    assert gone, f"{data_objects(clean_pool, rbd_id)} data objects left after 300 s"
    after = wait_for(
        lambda: pool_bytes(clean_pool), timeout=60, until=lambda b: b <= before + USAGE_BOUND
    )
    assert after <= before + USAGE_BOUND, (before, after)
    log = api.log()
    assert (
        f"deleted image {image_id} of pool {clean_pool.pool}: moved to the trash as {rbd_id}" in log
    )
    wait_for(
        lambda: rbd_id not in trash.ids(clean_pool.ioctx) | set(trash.marked(clean_pool.ioctx)),
        timeout=60,
        what="its trash entry and its deletion mark gone",
    )


@pytest.mark.parametrize("server", ["uwsgi", "gunicorn", "eventlet"])
def test_an_entry_held_open_is_a_warning_in_glances_log(servers, server, clean_pool):
    """A deleted image a client holds open in the trash: glance's log has a WARNING naming it
    within a minute of the DELETE, though the worker serves no request after it; let go, its
    trash entry and its mark go."""
    api = servers[server]
    deleted = {}

    def delete():
        image_id = api.create_image("held delete")
        data = os.urandom(8 * MiB)
        status, out = api.upload(image_id, iter([data]), size=len(data))
        assert status == 204, out[:500]
        rbd_id = _rbd_id(clean_pool, image_id)
        status, out = api.request("DELETE", f"/v2/images/{image_id}")
        assert status == 204, out[:500]
        deleted["at"] = time.monotonic()
        return rbd_id

    # Opened as it reaches the trash, as a reader that had it open when it moved: its purge
    # removes glance's snapshot first, which waits for the monitors.
    rbd_id, held = trash.held_after(clean_pool.ioctx, delete)
    with held:
        said = wait_for(
            lambda: [
                line
                for line in api.log().splitlines()
                if "WARNING" in line and f"trash id {rbd_id}" in line
            ],
            timeout=60,
            what="a WARNING naming the held entry in glance's log",
        )
        print(f"\n{server}: WARNING {time.monotonic() - deleted['at']:.1f} s after the DELETE")
        assert "a client has it open" in said[0], said
    wait_for(
        lambda: rbd_id not in trash.ids(clean_pool.ioctx) | set(trash.marked(clean_pool.ioctx)),
        timeout=60,
        what="its trash entry and its deletion mark gone once let go",
    )


def _rbd_id(images, name):
    with rbd.Image(images.ioctx, name) as image:  # not read-only: see tests/harness/stores.py
        return image.id()
