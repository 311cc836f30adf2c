"""Debian 13 (trixie): Python 3.13, glance_store 4.9.1, Ceph 18.2.7 client libraries. The Debian
package made from the wheel built on the host (Debian 12, Python 3.11, Ceph 16) is installed by
apt, the extension module unchanged; the contract tests run on Debian's python3 against the
host's cluster, over loopback, and Debian 13's glance-api 30 serves images under its uWSGI with
the switch on."""

import pathlib
import re
import zipfile

import pytest

from debian_root import TRIXIE
from tests.clients import CLIENTS, SIZE, check_four_at_once, check_upload
from tests.harness import contract, venvs
from tests.harness.data import data_of

RELEASE = TRIXIE

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.distro,
    # glanceclient's HTTP layer still imports cgi (Python 3.11 warns, 3.13 removed it).
    pytest.mark.filterwarnings("ignore:'cgi' is deprecated:DeprecationWarning"),
]

# The import root, mounted at its own path inside: the contract files run from it.
CHECKOUT = pathlib.Path(__file__).resolve().parents[2]
SITE = "/usr/lib/python3/dist-packages"
SERVERS = {
    "uwsgi": dict(server="uwsgi", native=True),
    "uwsgi-stock": dict(server="uwsgi", native=False),
}
GLANCE_STORE = "4.9.1"  # python3-glance-store
ACTIVE = f"the native RBD writer is active for glance_store {GLANCE_STORE}"


@pytest.fixture(scope="module")
def api(request, debian_glance):
    server = debian_glance(request.param, **SERVERS[request.param])
    yield server
    server.stop()


def test_what_debian_ships(debian_root):
    versions = debian_root.versions(
        "glance-api",
        "python3-glance-store",
        "python3",
        "librbd1",
        "librados2",
        "libssl3t64",
        "libc6",
    )
    assert versions["glance-api"].startswith("2:30.0.0-")
    assert versions["python3-glance-store"].startswith(f"{GLANCE_STORE}-")
    assert versions["python3"].startswith("3.13.")
    assert versions["librbd1"].startswith("18.2.7")
    assert versions["librados2"].startswith("18.2.7")
    assert versions["libc6"].startswith("2.41-")
    init = debian_root.file("/etc/init.d/glance-api").read_text()
    assert "\n#UWSGI_INI_PATH=/etc/glance/glance-api-uwsgi.ini\n" in init  # eventlet by default
    ini = debian_root.file("/etc/glance/glance-api-uwsgi.ini").read_text()
    for line in ("processes = 8", "threads = 1", "lazy-apps = true", "uid = glance"):
        assert f"\n{line}\n" in ini


def test_the_host_wheel_in_the_package_unchanged(debian_root):
    """The extension module apt installed is the wheel's, byte for byte, and loads Debian 13's
    Ceph 18 libraries into Python 3.13."""
    with zipfile.ZipFile(venvs.wheel()) as wheel:
        built = wheel.read("glance_rbd_native/_native.abi3.so")
    assert debian_root.file(f"{SITE}/glance_rbd_native/_native.abi3.so").read_bytes() == built
    owner = debian_root.run("dpkg", "-S", f"{SITE}/glance_rbd_native/_native.abi3.so").stdout
    assert owner.startswith("glance-rbd-native:")
    probe = (
        "import glance_rbd_native._native as n, sys; print(n.__file__); "
        "print('.'.join(map(str, sys.version_info[:2])))"
    )
    out = debian_root.run("python3", "-c", probe).stdout.split()
    assert out == [f"{SITE}/glance_rbd_native/_native.abi3.so", "3.13"]
    ldd = debian_root.run("ldd", f"{SITE}/glance_rbd_native/_native.abi3.so").stdout
    for lib in ("librbd.so.1", "librados.so.2", "libcrypto.so.3", "libssl.so.3"):
        assert re.search(
            rf"^\s*{re.escape(lib)} => /lib/x86_64-linux-gnu/{re.escape(lib)} ", ldd, re.M
        ), ldd
    assert "not found" not in ldd


def test_contract_on_debian13(debian_root, cluster):
    """The contract files on Debian 13's python3 and glance_store 4.9.1: native against stock,
    on the host's cluster."""
    # The quota case needs the mgr; Debian 13's root has no ceph-mgr (and the cluster is the
    # host's), so the host starts it.
    cluster.start_mgr()
    env = {"GLANCE_RBD_TEST_CLUSTER": str(cluster.root)}
    # The checkout is mounted read-only: the results go to the root's own disk.
    junit = "/root/contract.xml"
    debian_root.file(junit).unlink(missing_ok=True)
    result = debian_root.run(
        "python3",
        *contract.pytest_args(junit),
        env=env,
        cwd=str(CHECKOUT),
        check=False,
        timeout=1200,
    )
    xml = debian_root.file(junit).read_text() if debian_root.file(junit).exists() else ""
    where = f"Debian 13 (glance_store {GLANCE_STORE})"
    print(f"{where}: {contract.check(where, GLANCE_STORE, result, xml)}")


@pytest.mark.parametrize("api", list(SERVERS), indirect=True)
def test_started_as_debian_does(api, debian_root):
    """The init script's uWSGI mode exec'd Debian's uWSGI python3 plugin as user glance; the
    export in /etc/default/glance-api alone turned the native writer on."""
    proc = pathlib.Path(f"/proc/{api.pid}")
    cmdline = (proc / "cmdline").read_bytes().decode().split("\0")[:-1]
    assert cmdline == [
        "/usr/bin/uwsgi_python3",
        "--http-socket",
        f"127.0.0.1:{api.port}",
        "--ini",
        "/etc/glance/glance-api-uwsgi.ini",
    ]
    uid = debian_root.user("glance")[0]
    assert re.search(rf"^Uid:\s+{uid}\s", (proc / "status").read_text(), re.M)
    environ = (proc / "environ").read_bytes().split(b"\0")
    assert (b"GLANCE_RBD_NATIVE=1" in environ) == api.native
    assert len(re.findall(re.escape(ACTIVE), api.log())) == (8 if api.native else 0)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("api", list(SERVERS), indirect=True)
def test_upload(api, client, cluster, clean_pool):
    """Stored and served back: active with the size, md5 and sha512 of the source, the same
    bytes downloaded, and glance-api's log naming the writer that stored it."""
    check_upload(api, cluster, data_of(SIZE, seed=1300 + len(client)), client)


@pytest.mark.parametrize("api", ["uwsgi"], indirect=True)
def test_four_at_once(api, cluster, clean_pool):
    check_four_at_once(api, cluster, seed=1400)
