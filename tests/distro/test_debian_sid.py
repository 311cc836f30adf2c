"""Debian sid, the next stable: Python 3.14, glance 33.0.0, glance_store 5.7.0, Ceph 20.2 (Tentacle)
client libraries and daemons. The host's wheel goes into Debian's python3 unchanged, and a
Tentacle cluster of sid's own daemons runs in the root, on loopback, with Tentacle's defaults:
`aes256k` keys, the only cipher its monmap allows.

Clients, all as glance's documented user (`mon 'profile rbd'`, osd and mgr `profile rbd` on the
pools): sid's python3 and Ceph 20 client, with Tentacle's defaults; and the host's Ceph 16
client with glance_store 5.7 and 4.1, once the cluster allows the legacy `aes` cipher and gives
glance a legacy key (what an operator with older glance hosts has to do). The contract files
run from each; sid's glance-api 33 serves images from the Tentacle cluster under Debian's uWSGI.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

import pytest

from debian_root import SID
from tests import stock_versions
from tests.clients import CLIENTS, SIZE, check_four_at_once, check_upload
from tests.harness import cephx, contract, venvs
from tests.harness.cluster import Cluster, key_type
from tests.harness.data import data_of

RELEASE = SID

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.distro,
    pytest.mark.filterwarnings("ignore:'cgi' is deprecated:DeprecationWarning"),
]

CHECKOUT = pathlib.Path(__file__).resolve().parents[2]
SITE = "/usr/lib/python3/dist-packages"
GLANCE_STORE = "5.7.0"  # python3-glance-store
ACTIVE = f"the native RBD writer is active for glance_store {GLANCE_STORE}"
SERVERS = {
    "uwsgi": dict(server="uwsgi", native=True),
    "uwsgi-stock": dict(server="uwsgi", native=False),
}
# The pool glance stores in, and the one the contract's quota case makes (and deletes).
POOLS = ("images", "quota")
GLANCE_CAPS = ", ".join(f"profile rbd pool={pool}" for pool in POOLS)


@pytest.fixture(scope="module")
def tentacle(debian_root):
    """A Ceph 20 cluster of sid's daemons (mon, osd, mgr), run in the root; the stores of the
    contract files connect as glance's documented user, with a key of Tentacle's default."""
    root = pathlib.Path(tempfile.mkdtemp(prefix="grn20-", dir="/tmp"))
    root.chmod(0o755)  # glance-api runs as user glance: it reads ceph.conf and its keyring
    try:
        with Cluster(root, with_mgr=True, inside=debian_root, osd_size_gib=4) as booted:
            conf = booted.user("glance", mon="profile rbd", osd=GLANCE_CAPS, mgr=GLANCE_CAPS)
            booted.use_for_stores("glance", conf)
            yield booted
        assert not debian_root.processes("root"), "Ceph daemons left running in the Debian root"
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def tentacle_pool(tentacle):
    """Fails the test when it leaves an image in the Tentacle cluster's pool."""
    before = set(tentacle.images())
    yield tentacle
    left = set(tentacle.images()) - before
    for name in left:
        tentacle.rbd("rm", "--no-progress", f"{tentacle.pool}/{name}")
    assert not left, f"images left in the pool: {sorted(left)}"


@contextlib.contextmanager
def older_clients_allowed(cluster: Cluster):
    """What an operator with glance hosts older than the cluster does (docs/deployment.md):
    allow the legacy `aes` cipher in the monmap, and give admin and glance legacy keys (and
    the users made meanwhile). Put back to Tentacle's defaults afterwards."""
    keyrings = {
        entity: cluster.root / f"ceph.{entity}.keyring"
        for entity in ("client.admin", "client.glance")
    }
    cluster.allow_ciphers("aes", "aes256k")
    try:
        for entity, keyring in keyrings.items():
            cluster.rekey(entity, keyring, "aes")
        cluster.make_users_with("aes")
        yield
    finally:
        cluster.make_users_with(None)
        for entity, keyring in keyrings.items():
            cluster.rekey(entity, keyring, "aes256k")
        cluster.allow_ciphers("aes256k")


def test_what_debian_ships(debian_root):
    versions = debian_root.versions(
        "glance-api",
        "python3-glance-store",
        "python3",
        "librbd1",
        "librados2",
        "ceph-mon",
        "ceph-osd",
        "ceph-mgr",
    )
    assert versions["glance-api"].startswith("2:33.0.0-")
    assert versions["python3-glance-store"].startswith(f"{GLANCE_STORE}-")
    assert versions["python3"].startswith("3.14.")
    for package in ("librbd1", "librados2", "ceph-mon", "ceph-osd", "ceph-mgr"):
        assert versions[package].startswith("20.2."), (package, versions[package])


def test_the_host_wheel_in_the_package_unchanged(debian_root):
    """The extension module apt installed is the wheel's, byte for byte, and loads sid's Ceph 20
    libraries into Python 3.14."""
    with zipfile.ZipFile(venvs.wheel()) as wheel:
        built = wheel.read("glance_rbd_native/_native.abi3.so")
    module = f"{SITE}/glance_rbd_native/_native.abi3.so"
    assert debian_root.file(module).read_bytes() == built
    assert debian_root.run("dpkg", "-S", module).stdout.startswith("glance-rbd-native:")
    probe = (
        "import glance_rbd_native._native as n, sys; print(n.__file__); "
        "print('.'.join(map(str, sys.version_info[:2])))"
    )
    out = debian_root.run("python3", "-c", probe).stdout.split()
    assert out == [module, "3.14"]
    ldd = debian_root.run("ldd", module).stdout
    for lib in ("librbd.so.1", "librados.so.2"):
        # sid's ldd names the /usr path (merged /usr).
        assert re.search(
            rf"^\s*{re.escape(lib)} => /usr/lib/x86_64-linux-gnu/{re.escape(lib)} ", ldd, re.M
        ), ldd
    assert "not found" not in ldd


def test_tentacle_defaults(tentacle):
    """A new Tentacle cluster allows aes256k alone, and its keys are of that cipher."""
    monmap = tentacle.ceph("mon", "dump")
    assert re.search(r"^auth_allowed_ciphers:? aes256k$", monmap, re.M), monmap
    keyring = (tentacle.root / "ceph.client.glance.keyring").read_text()
    assert key_type(re.search(r"key = (\S+)", keyring).group(1)) == "aes256k"


def test_contract_from_sid(debian_root, tentacle):
    """The contract files on sid's python3, glance_store 5.7.0 and Ceph 20 client, as glance's
    user with Tentacle's defaults: native against that stock."""
    # The checkout is mounted read-only: the results go to the root's own disk.
    junit = "/root/contract.xml"
    debian_root.file(junit).unlink(missing_ok=True)
    result = debian_root.run(
        "python3",
        *contract.pytest_args(junit),
        env={"GLANCE_RBD_TEST_CLUSTER": str(tentacle.root)},
        cwd=str(CHECKOUT),
        check=False,
        timeout=1200,
    )
    xml = debian_root.file(junit).read_text() if debian_root.file(junit).exists() else ""
    where = f"Debian sid (glance_store {GLANCE_STORE}, Ceph 20 client)"
    print(f"{where}: {contract.check(where, GLANCE_STORE, result, xml)}")


def test_contract_from_an_older_host(tentacle, tmp_path):
    """The contract files on the host: Debian 12's Ceph 16 client, with glance_store 5.7.0 (this
    interpreter's), once the cluster allows aes and glance has a legacy key. (What differs on
    Tentacle is the client's Ceph release; what differs between glance_store releases the
    matrix runs against the Ceph 16 cluster.)"""
    version = stock_versions.VERSION_TEXT
    python = sys.executable
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["GLANCE_RBD_TEST_CLUSTER"] = str(tentacle.root)
    junit = tmp_path / "contract.xml"
    with older_clients_allowed(tentacle):
        result = subprocess.run(
            [str(python), *contract.pytest_args(str(junit))],
            cwd=CHECKOUT,
            env=env,
            capture_output=True,
            text=True,
            timeout=1200,
        )
    xml = junit.read_text() if junit.exists() else ""
    where = f"the host's Ceph 16 client, glance_store {version}, on Ceph 20"
    print(f"{where}: {contract.check(where, version, result, xml)}")


# glance's user wrong in one way at a time (tests/test_cephx.py): every case, uploads, downloads
# and the command, and the caps granted after a refusal.
CEPHX = [
    "-m",
    "pytest",
    "-q",
    "-p",
    "no:cacheprovider",
    "-W",
    "ignore::DeprecationWarning",
    "tests/test_cephx.py",
]
CEPHX_CASES = len(cephx.CASES) * 3 + 1


def test_cephx_from_sid(debian_root, tentacle):
    """The cephx cases on sid's Ceph 20 client against the Tentacle cluster with its defaults:
    the errors name what is wrong, and nothing is left (test_cephx.py's expectations for a
    Ceph 20 client on a Ceph 20 cluster)."""
    result = debian_root.run(
        "python3",
        *CEPHX,
        env={"GLANCE_RBD_TEST_CLUSTER": str(tentacle.root)},
        cwd=str(CHECKOUT),
        check=False,
        timeout=1200,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert re.search(rf"^{CEPHX_CASES} passed in ", result.stdout, re.M), result.stdout[-2000:]


def test_cephx_from_an_older_host(tentacle):
    """The cephx cases on the host's Ceph 16 client against the Tentacle cluster that allows
    aes (the expectations for a Ceph 16 client on a Ceph 20 cluster)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["GLANCE_RBD_TEST_CLUSTER"] = str(tentacle.root)
    with older_clients_allowed(tentacle):
        result = subprocess.run(
            [sys.executable, *CEPHX],
            cwd=CHECKOUT,
            env=env,
            capture_output=True,
            text=True,
            timeout=1200,
        )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert re.search(rf"^{CEPHX_CASES} passed in ", result.stdout, re.M), result.stdout[-2000:]


@pytest.fixture(scope="module")
def api(request, debian_glance, tentacle):
    server = debian_glance(
        request.param, ceph_conf=tentacle.store_conf, user="glance", **SERVERS[request.param]
    )
    yield server
    server.stop()


@pytest.mark.parametrize("api", list(SERVERS), indirect=True)
def test_started_as_debian_does(api, debian_root):
    proc = pathlib.Path(f"/proc/{api.pid}")
    cmdline = (proc / "cmdline").read_bytes().decode().split("\0")[:-1]
    assert cmdline[0] == "/usr/bin/uwsgi_python3", cmdline
    uid = debian_root.user("glance")[0]
    assert re.search(rf"^Uid:\s+{uid}\s", (proc / "status").read_text(), re.M)
    environ = (proc / "environ").read_bytes().split(b"\0")
    assert (b"GLANCE_RBD_NATIVE=1" in environ) == api.native
    workers = api.uwsgi_processes()
    assert len(re.findall(re.escape(ACTIVE), api.log())) == (workers if api.native else 0)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("api", list(SERVERS), indirect=True)
def test_upload(api, client, tentacle_pool):
    """glance 33 on the Tentacle cluster: active with the size, md5 and sha512 of the source, the
    same bytes downloaded, and the log naming the writer that stored it."""
    check_upload(api, tentacle_pool, data_of(SIZE, seed=1500 + len(client)), client)


@pytest.mark.parametrize("api", ["uwsgi"], indirect=True)
def test_four_at_once(api, tentacle_pool):
    check_four_at_once(api, tentacle_pool, seed=1600)
