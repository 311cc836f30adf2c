"""A glance-api worker killed in the middle of an upload (SIGKILL: the OOM killer, uWSGI's
harakiri, a failed liveness probe), under uWSGI, as glance's documented cephx user: what
`glance-rbd-native status` and `sweep` show, and the retried upload of the same image ID."""

import contextlib
import hashlib
import io
import os
import signal
import threading
import time

import pytest

from glance_rbd_native import leftovers
from tests.harness.command import report
from tests.harness.data import MiB, data_of
from tests.harness.glance_api import held_body, writer_of
from tests.harness.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]

SIZE = 64 * MiB
IMPORT_SIZE = 512 * MiB  # long enough to be caught in the middle of its store write


@pytest.fixture(scope="module")
def api(new_glance_api):
    with new_glance_api("killed", native=True) as server:
        yield server


@pytest.fixture
def ioctx(images):
    """The pool, as admin (the session's connection)."""
    return images.ioctx


def kill_and_sweep(api, ioctx, image_id):
    """Kills the worker writing `image_id` once `status` shows it alive; returns the seconds
    from the kill to `sweep` listing it. The worker is stopped (SIGSTOP) as soon as its mark
    is there, so that an import, whose data is already staged, cannot end before `status`
    looks: a stopped process is alive."""
    pid = writer_of(ioctx, image_id)
    os.kill(pid, signal.SIGSTOP)
    alive = {u["image"]: u for u in report(api.conf_file, "status")["uploads"]}
    assert alive[image_id]["state"] == "alive" and alive[image_id]["pid"] == pid
    assert "stopped" in alive[image_id]["reason"], alive[image_id]
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    gone = wait_for(
        lambda: [u["image"] for u in report(api.conf_file, "sweep")["gone"]], 60, every=0.5
    )
    assert gone, "the sweep never listed the leftover"
    assert gone == [image_id]
    return time.monotonic() - killed


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_worker_killed_mid_put(api, cluster, ioctx, clean_pool, mariadb, chunked):
    data = data_of(SIZE, seed=21)
    image_id = api.create_image("killed mid-PUT")
    release = threading.Event()
    outcome = {}

    def put():
        with contextlib.suppress(OSError):
            outcome["first"] = api.upload(
                image_id, held_body(data, release), size=None if chunked else SIZE
            )

    sender = threading.Thread(target=put)
    sender.start()
    try:
        listed = kill_and_sweep(api, ioctx, image_id)
    finally:
        release.set()
        sender.join(60)
    try:
        assert api.image(image_id)["status"] == "saving"
        # glance refuses a new PUT to an image it believes is being saved, before any store
        # is called: whichever the driver, the data goes nowhere.
        refused = api.upload(image_id, io.BytesIO(data), size=None if chunked else SIZE)
        assert refused[0] == 409 and b"from saving to saving" in refused[1], refused
        # The operator's step of the runbook (docs/operations.md): back to `queued`.
        assert (
            mariadb.execute(
                api.database,
                "UPDATE images SET status = 'queued' WHERE id = %s AND status = 'saving'",
                image_id,
            )
            == 1
        )
        started = time.monotonic()
        retried = api.upload(image_id, io.BytesIO(data), size=None if chunked else SIZE)
        stored = time.monotonic() - started
        print(
            f"\n{'chunked' if chunked else 'content-length'}: sweep listed the leftover "
            f"{listed:.1f} s after the kill; the retried PUT answered {retried[0]} in "
            f"{stored:.1f} s"
        )
        assert retried[0] == 204, retried
        image = api.image(image_id)
        assert image["status"] == "active"
        assert image["checksum"] == hashlib.md5(data).hexdigest()
        assert "left over from an upload whose writer is gone" in api.log()
        assert image_id not in leftovers.marks(ioctx)
    finally:
        api.delete(image_id)
        report(api.conf_file, "sweep", "--remove")
    assert image_id not in cluster.images()


def test_a_worker_killed_mid_import(api, cluster, ioctx, clean_pool, mariadb):
    """glance-direct: the task dies with the worker, the image stays `importing`, and glance
    keeps its import lock for an hour. With the runbook's operator step (the image back to
    `uploading`: the staged data is still there) and the lock aged past the hour, the retried
    import busts the lock, and the leftover goes."""
    data = data_of(64 * MiB, seed=22) * (IMPORT_SIZE // (64 * MiB))
    image_id = api.create_image("killed mid-import")
    try:
        api.stage(image_id, data)
        api.import_image(image_id, "glance-direct")
        listed = kill_and_sweep(api, ioctx, image_id)
        assert api.image(image_id)["status"] == "importing"
        assert (
            mariadb.execute(
                api.database,
                "UPDATE images SET status = 'uploading' WHERE id = %s AND status = 'importing'",
                image_id,
            )
            == 1
        )
        # An hour later, as glance sees it: the dead task's lock is stale.
        assert (
            mariadb.execute(
                api.database,
                "UPDATE tasks SET updated_at = updated_at - "
                "INTERVAL 2 HOUR WHERE status = 'processing'",
            )
            >= 1
        )
        started = time.monotonic()
        api.import_image(image_id, "glance-direct")

        def active(image):
            if image["status"] == "active":
                return True
            assert not image.get("os_glance_failed_import"), image
            return False

        image = wait_for(lambda: api.image(image_id), 180, every=0.5, until=active)
        assert image["status"] == "active", image
        print(
            f"\nimport: sweep listed the leftover {listed:.1f} s after the kill; the "
            f"retried import was active {time.monotonic() - started:.1f} s after it began"
        )
        assert image["checksum"] == hashlib.md5(data).hexdigest()
        assert "left over from an upload whose writer is gone" in api.log()
    finally:
        api.delete(image_id)
        report(api.conf_file, "sweep", "--remove")
    assert image_id not in cluster.images()
