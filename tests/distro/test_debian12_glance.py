"""Debian 12's own glance-api (glance 25.1.0, glance_store 4.1.0), switched to the native writer
by /etc/default/glance-api alone, both ways Debian ships it: the init script's eventlet server
and its uWSGI ini.

Under uWSGI, glance reads a chunked body through `_UWSGIChunkFile`, which returns whole HTTP
chunks until it holds the 8 MiB asked for: the driver's first chunk is the first multiple of the
client's chunk at or past 8 MiB (or the whole body, if shorter). The stock 4.1 driver grows an
image of unknown size by one 8 MiB step before its first write (bug 1916482), so every chunking
that does not divide 8 MiB fails with "RBD incomplete write"."""

import json
import pathlib
import re

import pytest

from debian_root import BOOKWORM
from tests.clients import (
    CLIENTS,
    SIZE,
    assert_stored,
    check_four_at_once,
    check_upload,
    upload,
    wait_status,
)
from tests.harness.data import MiB, data_of
from tests.harness.trash import probes_left
from tests.harness.waiting import wait_for

RELEASE = BOOKWORM

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.distro,
    pytest.mark.debian12,
    # glanceclient's HTTP layer still imports cgi (Python 3.11 warns, 3.13 removed it).
    pytest.mark.filterwarnings("ignore:'cgi' is deprecated:DeprecationWarning"),
]

SERVERS = {
    "eventlet": dict(server="eventlet", native=True),
    "uwsgi": dict(server="uwsgi", native=True),
    "uwsgi-stock": dict(server="uwsgi", native=False),
    # An operator's slip: the file is sourced, so a bare assignment stays in the init script.
    "eventlet-unexported": dict(
        server="eventlet", native=False, environment="GLANCE_RBD_NATIVE=1\n"
    ),
}
NATIVE = ["eventlet", "uwsgi"]
# Chunk sizes that do not divide 8 MiB; the smallest fits under uWSGI's default
# chunked-input-limit, so its failure does not depend on the limit being raised.
ODD_PIECES = (64 * 1024 + 3, MiB + 1, 3 * MiB + 7)
ACTIVE = "the native RBD writer is active for glance_store 4.1.0"


@pytest.fixture(scope="module")
def api(request, debian_glance):
    """The running server of a SERVERS configuration; the tests are grouped by it, and only one
    runs at a time."""
    server = debian_glance(request.param, **SERVERS[request.param])
    yield server
    server.stop()


def put_chunked(api, image_id, data, piece):
    """PUTs `data` chunked in pieces of `piece` bytes. The status, or None when the server
    answered before reading the whole body and reset the connection (uWSGI after a 500)."""
    pieces = (data[i : i + piece] for i in range(0, len(data), piece))
    try:
        return api.upload(image_id, pieces)[0]
    except ConnectionResetError:
        return None


def test_what_debian_ships(debian_root):
    """The releases under test, and the defaults of Debian's packaging that the servers keep."""
    versions = debian_root.versions(
        "glance-api", "python3-glance-store", "python3", "uwsgi-plugin-python3"
    )
    assert versions["glance-api"].startswith("2:25.1.0-")
    assert versions["python3-glance-store"].startswith("4.1.0-")
    assert versions["python3"].startswith("3.11.")
    init = debian_root.file("/etc/init.d/glance-api").read_text()
    assert "\n#UWSGI_INI_PATH=/etc/glance/glance-api-uwsgi.ini\n" in init  # eventlet by default
    assert "[ -r /etc/default/$NAME ] && . /etc/default/$NAME" in init
    ini = debian_root.file("/etc/glance/glance-api-uwsgi.ini").read_text()
    for line in (
        "processes = 8",
        "threads = 32",
        "lazy-apps = true",
        "uid = glance",
        "wsgi-manage-chunked-input = true",
    ):
        assert f"\n{line}\n" in ini
    assert "chunked-input-limit" not in ini
    out = debian_root.run(
        "python3", "-c", "import glance_rbd_native; print(glance_rbd_native.__file__)"
    ).stdout
    assert out.startswith("/usr/lib/python3/dist-packages/glance_rbd_native/")


@pytest.mark.parametrize("api", list(SERVERS), indirect=True)
def test_started_as_debian_does(api, debian_root):
    """The init script exec'd the server as user glance; `export GLANCE_RBD_NATIVE=1` in
    /etc/default/glance-api, and nothing else, turned the native writer on."""
    proc = pathlib.Path(f"/proc/{api.pid}")
    cmdline = (proc / "cmdline").read_bytes().decode().split("\0")[:-1]
    if api.server == "uwsgi":
        assert cmdline == [
            "/usr/bin/uwsgi_python311",
            "--http-socket",
            f"127.0.0.1:{api.port}",
            "--ini",
            "/etc/glance/glance-api-uwsgi.ini",
        ]
    else:
        assert cmdline == [
            "/usr/bin/python3",
            "/usr/bin/glance-api",
            "--config-file=/etc/glance/glance-api.conf",
            "--log-file=/var/log/glance/glance-api.log",
        ]
    uid = debian_root.user("glance")[0]
    assert re.search(rf"^Uid:\s+{uid}\s", (proc / "status").read_text(), re.M)
    environ = (proc / "environ").read_bytes().split(b"\0")
    assert (b"GLANCE_RBD_NATIVE=1" in environ) == api.native
    assert (ACTIVE in api.log()) == api.native


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("api", NATIVE, indirect=True)
def test_upload(api, client, cluster, clean_pool):
    """Active with the size, md5 and sha512 of the source, the same bytes back, and glance-api's
    log naming the native writer."""
    check_upload(api, cluster, data_of(SIZE, seed=len(client)), client)


@pytest.mark.parametrize("api", NATIVE, indirect=True)
def test_four_at_once(api, cluster, clean_pool):
    check_four_at_once(api, cluster, seed=400)


@pytest.mark.parametrize("piece", ODD_PIECES)
@pytest.mark.parametrize("size", [SIZE, 8 * MiB + 1])
@pytest.mark.parametrize("api", ["uwsgi-stock", "uwsgi"], indirect=True)
def test_odd_chunks_under_debians_uwsgi(api, size, piece, cluster, clean_pool):
    """Stock fails each with "RBD incomplete write", having written 8 MiB of the first chunk
    glance handed it; the image goes back to queued and nothing is left in the pool. Native
    stores each."""
    data = data_of(size, seed=piece % 1000)
    image_id = api.create_image(f"debian uwsgi chunks of {piece}")
    try:
        status = put_chunked(api, image_id, data, piece)
        if api.native:
            assert status == 204
            assert_stored(api, cluster, image_id, data)
            return
        assert status in (500, None)
        # uWSGI logs the request once the response is out.
        logged = rf"PUT /v2/images/{image_id}/file => .* \(HTTP/1.1 (\d+)\)"
        answered = wait_for(lambda: re.search(logged, api.log()), 10, every=0.1)
        assert answered and answered.group(1) == "500"
        first = min(-(-8 * MiB // piece) * piece, size)
        assert (
            f"Failed to store image {image_id} Store Exception RBD incomplete write "
            f"(Wrote only {8 * MiB} out of {first} bytes)"
        ) in api.log()
        assert wait_status(api, image_id, {"queued", "active", "killed"}) == "queued"
        assert image_id not in cluster.images()
    finally:
        api.delete(image_id)


@pytest.mark.parametrize("client", ["glanceclient, no size", "http, content-length"])
@pytest.mark.parametrize("api", ["uwsgi-stock"], indirect=True)
def test_stock_under_debians_uwsgi_in_8_mib_chunks(api, client, cluster, clean_pool):
    """What stock still stores under uWSGI: glanceclient's 1 MiB chunks add up to exactly 8 MiB,
    and a body with Content-Length is read 8 MiB at a time into an image of its size."""
    check_upload(api, cluster, data_of(SIZE, seed=600 + len(client)), client)


@pytest.mark.parametrize("api", ["eventlet-unexported"], indirect=True)
def test_a_bare_assignment_is_not_enough(api, debian_root, cluster, clean_pool):
    """`GLANCE_RBD_NATIVE=1` without `export` stays a variable of the init script's shell: the
    stock driver serves."""
    assert debian_root.file("/etc/default/glance-api").read_text() == "GLANCE_RBD_NATIVE=1\n"
    data = data_of(SIZE, seed=700)
    image_id = api.create_image("debian unexported")
    try:
        assert upload(api, image_id, data, "http, content-length") == 204
        assert_stored(api, cluster, image_id, data)  # and no native writer in the log
    finally:
        api.delete(image_id)


@pytest.mark.parametrize("api", ["uwsgi"], indirect=True)
def test_check_on_debians_own_glance(api, debian_root, cluster, clean_pool, manager):
    """`glance-rbd-native check` as an operator runs it on this host, against Debian's running
    glance-api and its glance-api.conf: glance_store 4.1.0 is patched, each uWSGI worker runs
    the packaged module, the caps and the round trip go through, and nothing is left."""
    done = debian_root.run(
        "glance-rbd-native",
        "check",
        "--json",
        "--size",
        "16",
        "--config-file",
        "/etc/glance/glance-api.conf",
        check=False,
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    rows = {r["check"]: (r["result"], r["details"]) for r in json.loads(done.stdout)["checks"]}
    assert max(result for result, _ in rows.values()) == done.returncode
    assert rows["glance_store"][1].startswith("glance_store 4.1.0: patch() takes over")
    workers = [
        int(pid)
        for pid in pathlib.Path(f"/proc/{api.pid}/task/{api.pid}/children").read_text().split()
    ]
    assert len(workers) == 8  # Debian's ini: processes = 8
    # The row's result is the host's (the other lane's servers may be starting): its workers'
    # lines are this server's.
    details = rows["glance-api processes"][1]
    # Its map names the file by its path in the mount namespace the init script made: the
    # root's directory on the host.
    module = r"\S*/usr/lib/python3/dist-packages/glance_rbd_native/_native\.abi3\.so"
    for worker in workers:
        assert re.search(
            rf"pid {worker} uwsgi_python311: native module loaded from {module}, not replaced "
            "since(;|$)",
            details,
        ), details
    assert rows["Backend glance_store: caps"][0] == 0, rows["Backend glance_store: caps"]
    result, details = rows["Backend glance_store: round trip"]
    assert result == 0 and details.startswith("16 MiB as client.admin in pool "), details
    assert probes_left(clean_pool.ioctx) == []
