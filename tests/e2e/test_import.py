"""glance's interoperable import with the switch on. glance-direct, web-download and
copy-image end in the driver's add, called from a task thread rather than the request's: the
native writer serves each store write."""

import hashlib
import io

import pytest

from tests.harness.data import MiB, data_of
from tests.harness.glance_api import BACKEND, SECOND_BACKEND, SECOND_POOL
from tests.harness.stores import SNAP
from tests.harness.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]

SIZE = 20 * MiB + 4321


def wait_imported(api, image_id, stores=(), timeout=120):
    """Waits for the import task: the image active (and in every store asked for), or failed."""

    def finished(image):
        failed = image.get("os_glance_failed_import")
        in_stores = set(filter(None, image.get("stores", "").split(",")))
        if failed or (image["status"] == "active" and set(stores) <= in_stores):
            return True
        return image["status"] == "killed"

    return wait_for(lambda: api.image(image_id), timeout, every=0.2, until=finished)


def import_task(api, image_id, timeout=120):
    """The image's import task, once it has succeeded or failed."""
    task = wait_for(
        lambda: api.tasks(image_id)[0],
        timeout,
        every=0.2,
        until=lambda task: task["status"] in ("success", "failure"),
    )
    assert task["status"] in ("success", "failure"), task
    return task


def assert_imported(api, cluster, image_id, data, stores):
    image = wait_imported(api, image_id, stores if api.multistore else ())
    assert image["status"] == "active", image
    assert not image.get("os_glance_failed_import"), image
    assert image["size"] == len(data)
    assert image["checksum"] == hashlib.md5(data).hexdigest()
    assert image["os_hash_value"] == hashlib.sha512(data).hexdigest()
    pools = {BACKEND: cluster.pool, SECOND_BACKEND: SECOND_POOL}
    if api.multistore:
        assert set(image["stores"].split(",")) == set(stores)
    for store in stores:
        pool = pools[store]
        assert image_id in cluster.images(pool)
        assert SNAP in cluster.rbd("snap", "ls", f"{pool}/{image_id}")
    assert b"".join(api.request("GET", f"/v2/images/{image_id}/file")[1:]) == data
    # One line per store write, from the native writer.
    lines = api.log().count(f"stored image {image_id} with the native writer")
    assert lines == (len(stores) if api.native else 0)


@pytest.mark.parametrize("server", ["native", "native-multistore"])
def test_glance_direct(server, glance_servers, cluster, clean_pool):
    api = glance_servers(server)
    data = data_of(SIZE, seed=11)
    image_id = api.create_image("import glance-direct")
    try:
        api.stage(image_id, data)
        stores = [BACKEND] if api.multistore else []
        api.import_image(image_id, "glance-direct", stores=stores)
        assert_imported(api, cluster, image_id, data, stores or [BACKEND])
    finally:
        api.delete(image_id)
    assert image_id not in cluster.images()


@pytest.mark.parametrize("server", ["native", "native-multistore"])
def test_web_download(server, glance_servers, web_source, cluster, clean_pool):
    api = glance_servers(server)
    data = data_of(SIZE, seed=12)
    web_source.files["web-download.raw"] = data
    image_id = api.create_image("import web-download")
    try:
        stores = [BACKEND] if api.multistore else []
        api.import_image(
            image_id, "web-download", stores=stores, uri=web_source.url("web-download.raw")
        )
        assert_imported(api, cluster, image_id, data, stores or [BACKEND])
    finally:
        api.delete(image_id)


def test_copy_image_to_a_second_rbd_backend(glance_servers, cluster, clean_pool):
    api = glance_servers("native-multistore")
    data = data_of(SIZE, seed=13)
    image_id = api.create_image("import copy-image")
    try:
        assert api.upload(image_id, io.BytesIO(data), size=len(data))[0] == 204
        assert_imported(api, cluster, image_id, data, [BACKEND])
        api.import_image(image_id, "copy-image", stores=[SECOND_BACKEND])
        assert_imported(api, cluster, image_id, data, [BACKEND, SECOND_BACKEND])
    finally:
        api.delete(image_id)
    assert image_id not in cluster.images(SECOND_POOL)


def test_import_into_a_pool_over_quota_fails_as_stock_does(full_pool, new_glance_api, cluster):
    """glance-direct into a full pool: the import fails on both servers and ends the same way,
    and neither leaves an image in the pool. Stock blocks until its op timeout; native fails at
    once with StorageFull."""
    data = data_of(SIZE, seed=14)
    outcome = {}
    for server in ("native", "stock"):
        with new_glance_api(
            f"import-quota-{server}", native=server == "native", pool=full_pool, timeout=5
        ) as api:
            image_id = api.create_image("import quota")
            api.stage(image_id, data)
            api.import_image(image_id, "glance-direct")
            task = import_task(api, image_id)
            image = api.image(image_id)
            outcome[server] = {
                "task": task["status"],
                "image": image["status"],
                "size": image["size"],
                "checksum": image["checksum"],
            }
            assert cluster.images(full_pool) == ["filler"]
            if api.native:
                assert f"Failed to store image {image_id} insufficient space available" in api.log()
            api.delete(image_id)
    assert outcome["native"] == outcome["stock"]
    assert outcome["native"]["task"] == "failure"


PARALLEL = "Parallel store import starting for image {image_id}"


@pytest.mark.parametrize("server", ["native", "stock"])
def test_glance_direct_to_two_rbd_stores_at_once(server, new_glance_api, cluster, second_pool):
    """glance 33's parallel import (`[image_import_opts] max_parallel_stores = 2`): glance-direct
    to both rbd stores at once, each write in a thread of glance's pool, native as stock: the
    image active in both, its bytes and hashes right in each."""
    data = data_of(SIZE, seed=15)
    stores = [BACKEND, SECOND_BACKEND]
    with new_glance_api(
        f"parallel-{server}", native=server == "native", multistore=True, max_parallel_stores=2
    ) as api:
        image_id = api.create_image("parallel import")
        api.stage(image_id, data)
        api.import_image(image_id, "glance-direct", stores=stores)
        try:
            assert_imported(api, cluster, image_id, data, stores)
            assert PARALLEL.format(image_id=image_id) in api.log()
        finally:
            api.delete(image_id)


def test_a_parallel_import_with_a_store_over_quota_fails_and_leaves_nothing(
    full_pool, new_glance_api, cluster
):
    """A parallel import to two stores, the second's pool over its quota, every store required
    (`all_stores_must_succeed`): the task fails, on both servers alike, and neither leaves an
    image in either pool; native's write to the full pool fails at once with StorageFull. glance
    33 itself leaves the image `importing` after it, with either driver: its parallel flow's
    revert resets no status (docs/compatibility.md)."""
    data = data_of(SIZE, seed=16)
    outcome = {}
    for server in ("native", "stock"):
        with new_glance_api(
            f"parallel-quota-{server}",
            native=server == "native",
            multistore=True,
            second_pool=full_pool,
            max_parallel_stores=2,
            timeout=5,
        ) as api:
            image_id = api.create_image("parallel import over quota")
            api.stage(image_id, data)
            api.import_image(
                image_id,
                "glance-direct",
                stores=[BACKEND, SECOND_BACKEND],
                all_stores_must_succeed=True,
            )
            task = import_task(api, image_id)
            image = api.image(image_id)
            outcome[server] = {"task": task["status"], "image": image["status"]}
            assert PARALLEL.format(image_id=image_id) in api.log()
            assert image_id not in cluster.images(cluster.pool)
            assert cluster.images(full_pool) == ["filler"]
            if api.native:
                assert "insufficient space available" in api.log()
            api.delete(image_id)
    print(f"\nafter a parallel import over quota: {outcome}")
    assert outcome["native"] == outcome["stock"]
    assert outcome["native"]["task"] == "failure", outcome
    # glance's doing, not the driver's: docs/compatibility.md says so while this holds.
    assert outcome["native"]["image"] == "importing", outcome
