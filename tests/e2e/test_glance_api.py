"""End to end: real glance-api processes, switched to the native writer by GLANCE_RBD_NATIVE=1
alone (or left stock), serving real client uploads into the throwaway cluster."""

import io
import re
import socket
import struct

import pytest

from tests.clients import CLIENTS, SIZE, check_four_at_once, check_upload, wait_status
from tests.harness.data import data_of

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.e2e,
    # glanceclient's HTTP layer still imports cgi (Python 3.11 warns, 3.13 removed it).
    pytest.mark.filterwarnings("ignore:'cgi' is deprecated:DeprecationWarning"),
]


@pytest.mark.parametrize("client", CLIENTS)
def test_upload(api, client, cluster, clean_pool):
    data = data_of(SIZE, seed=len(client))
    image_id = check_upload(api, cluster, data, client)
    if api.native:
        # glance passes a size the client gave on to the store: no growth steps then.
        resizes = re.search(
            rf"stored image {image_id} with the native writer: "
            rf"\d+ bytes in [\d.]+s, (\d+) resizes",
            api.log(),
        )
        sized = client in ("glanceclient, size given", "http, content-length")
        assert (int(resizes.group(1)) == 0) == sized


def test_switch_decides_the_driver(native_api, stock_api):
    """The environment variable alone switches: no other difference in configuration."""
    active = "the native RBD writer is active for glance_store"
    assert active in native_api.log()
    assert active not in stock_api.log()
    # The in-flight bound comes from glance-api.conf, which glance reads after the patch.
    bound = (
        f"{native_api.max_in_flight_mib} MiB in flight, shared by all uploads and "
        "downloads of this process ([glance_rbd_native] max_in_flight_mib)"
    )
    assert bound in native_api.log()
    assert "MiB in flight" not in stock_api.log()

    def config(api):
        text = (api.conf_file).read_text()
        return (
            text.replace(api.database, "DATABASE")
            .replace(str(api.root), "ROOT")
            .replace(f"bind_port = {api.port}", "bind_port = PORT")
        )

    assert config(native_api) == config(stock_api)


def test_preforked_workers_leave_the_masters_connection_alone(glance_servers):
    """uWSGI's default: the app, and here a native connection, made in the master, then the
    workers forked. Uploads in the workers (test_upload) went through connections of their own."""
    api = glance_servers("native-preforked")
    master = api.pid
    assert f"connected in uWSGI's master, pid {master}" in api.server_log()
    assert re.search(rf"WSGI app 0 .* ready .* pid: {master} ", api.server_log())
    workers = set(re.findall(r"spawned uWSGI worker \d+ \(pid: (\d+)", api.server_log()))
    assert len(workers) == 2 and str(master) not in workers
    writers = set(
        re.findall(
            r"^\S+ \S+ (\d+) INFO glance_rbd_native.upload .* with the native "
            r"writer",
            api.log(),
            re.M,
        )
    )
    assert writers and writers <= workers


@pytest.mark.parametrize("server", ["native", "stock"])
def test_four_clients_at_once(server, glance_servers, cluster, clean_pool):
    check_four_at_once(glance_servers(server), cluster, seed=100)


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("server", ["native", "stock"])
def test_client_disconnects_mid_upload(server, chunked, glance_servers, cluster, clean_pool):
    """The client sends half of the image and vanishes: glance puts the image back to queued,
    as with the stock driver, and no rbd image is left."""
    api = glance_servers(server)
    data = data_of(SIZE, seed=7)
    image_id = api.create_image("e2e disconnect")
    half = data[: len(data) // 2]
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {len(data)}"
    sock = socket.create_connection(("127.0.0.1", api.port))
    try:
        sock.sendall(
            f"PUT /v2/images/{image_id}/file HTTP/1.1\r\nHost: glance\r\n"
            f"Content-Type: application/octet-stream\r\n{framing}\r\n\r\n".encode()
        )
        sock.sendall(b"%x\r\n%s\r\n" % (len(half), half) if chunked else half)
        wait_status(api, image_id, {"saving"})
        # A reset, not a clean close: the client is gone, not done.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    finally:
        sock.close()
    try:
        assert wait_status(api, image_id, {"queued", "active", "killed"}) == "queued"
        assert image_id not in cluster.images()
        if api.native:
            assert f"removed partial image '{image_id}' in pool '{cluster.pool}'" in api.log()
    finally:
        api.delete(image_id)


# Stock blocks on a full pool until its op timeout (forever without one), so it gets one here.
@pytest.mark.parametrize("server, timeout, answer", [("native", None, 413), ("stock", 5, 500)])
def test_pool_over_quota(server, timeout, answer, full_pool, new_glance_api, cluster):
    """Native: 413 (StorageFull) at once; stock: 500 once its op timeout passes. Either way the
    image goes back to queued and nothing is left in the pool."""
    with new_glance_api(
        f"quota-{server}", native=server == "native", pool=full_pool, timeout=timeout
    ) as api:
        image_id = api.create_image("e2e quota")
        status, body = api.upload(image_id, io.BytesIO(data_of(SIZE)), size=SIZE)
        assert status == answer, body
        assert api.image(image_id)["status"] == "queued"
        assert cluster.images(full_pool) == ["filler"]
        if api.native:
            assert f"Failed to store image {image_id} insufficient space available" in api.log()
        api.delete(image_id)
