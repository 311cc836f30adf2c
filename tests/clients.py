"""Clients of the end-to-end tests: the ways images reach glance-api, and what a stored image
must look like afterwards."""

import hashlib
import io
import threading

import glanceclient

from tests.harness.data import MiB, data_of
from tests.harness.glance_api import BACKEND
from tests.harness.stores import SNAP
from tests.harness.waiting import wait_for

# Not a multiple of the 8 MiB chunk: the last read is short.
SIZE = 20 * MiB + 12345

CLIENTS = (
    "glanceclient, size given",
    "glanceclient, no size",
    "http, content-length",
    "http, chunked",
)


def glance_client(api):
    # No keystone: any token passes the unauthenticated pipeline.
    return glanceclient.Client(endpoint=f"{api.url}/v2", token="unused")


def upload(api, image_id, data, client):
    """Uploads `data` the way `client` does; returns the HTTP status."""
    if client.startswith("glanceclient"):
        glance = glance_client(api)
        size = len(data) if client.endswith("size given") else None
        # glanceclient streams a file object with chunked transfer encoding.
        resp, _ = glance.images.upload(
            image_id, io.BytesIO(data), image_size=size, backend=BACKEND if api.multistore else None
        )
        return resp.status_code
    if client == "http, content-length":
        return api.upload(image_id, io.BytesIO(data), size=len(data))[0]
    # Pieces of odd sizes, so the server's reads straddle the client's chunks.
    pieces = (data[i : i + 3 * MiB + 7] for i in range(0, len(data), 3 * MiB + 7))
    return api.upload(image_id, pieces)[0]


def assert_stored(api, cluster, image_id, data):
    """Active with glance's size and digests of `data`, the same bytes back, and the log naming
    the writer that stored it."""
    image = api.image(image_id)
    assert image["status"] == "active"
    assert image["size"] == len(data)
    assert image["checksum"] == hashlib.md5(data).hexdigest()
    assert image["os_hash_algo"] == "sha512"
    assert image["os_hash_value"] == hashlib.sha512(data).hexdigest()
    if api.multistore:
        assert image["stores"] == BACKEND
    assert b"".join(glance_client(api).images.data(image_id)) == data
    assert image_id in cluster.images()
    assert SNAP in cluster.rbd("snap", "ls", f"{cluster.pool}/{image_id}")
    native_line = f"stored image {image_id} with the native writer"
    assert (native_line in api.log()) == api.native


def check_upload(api, cluster, data, client):
    """Uploads `data` into a new image the way `client` does, checks it stored, and deletes it
    through glance, which must remove the rbd image too. The image's id."""
    image_id = api.create_image(f"upload {client}")
    try:
        assert upload(api, image_id, data, client) == 204
        assert_stored(api, cluster, image_id, data)
    finally:
        api.delete(image_id)
    assert image_id not in cluster.images()
    return image_id


def check_four_at_once(api, cluster, seed):
    """Four uploads started together, each by another client: all stored, then deleted."""
    sources = [data_of(SIZE + i, seed=seed + i) for i in range(4)]
    ids = [api.create_image(f"concurrent {i}") for i in range(len(sources))]
    statuses = [None] * len(sources)
    start = threading.Barrier(len(sources))

    def run(i):
        start.wait()
        statuses[i] = upload(api, ids[i], sources[i], CLIENTS[i % len(CLIENTS)])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(sources))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    try:
        assert statuses == [204] * 4
        for image_id, data in zip(ids, sources, strict=True):
            assert_stored(api, cluster, image_id, data)
    finally:
        for image_id in ids:
            api.delete(image_id)


def wait_status(api, image_id, wanted, timeout=60):
    status = wait_for(
        lambda: api.image(image_id)["status"],
        timeout,
        every=0.1,
        until=lambda status: status in wanted,
    )
    assert status in wanted, f"image {image_id} still {status} after {timeout}s"
    return status
