"""Debian 13 (trixie) on arm64, run here under qemu-user: pip chooses the aarch64 wheel `make
build-arm64` cross-compiled from a package index that serves the whole release set (on the
host's loopback, tests/harness/index.py), installs it into its Python 3.13, loads its Ceph 18
librbd and librados, and patches its glance_store 4.9.1; the contract's core runs native against
stock on the host's cluster, over loopback; the arm64 .deb installs with apt. Emulation proves
what the code does on aarch64 (the instructions are aarch64's, translated), not how fast:
nothing here is timed. Every command runs in namespaces of its own (packaging/emulation.py): the
qemu handler registered in them is seen nowhere else, and every mount goes with them."""

import json
import os
import pathlib
import re
import subprocess
import time
import zipfile

import pytest

import emulation
from debian_root import TRIXIE_ARM64, DebianRoot, build_deb
from tests.harness import contract, index as package_index, venvs
from tests.harness.waiting import wait_for

RELEASE = TRIXIE_ARM64

pytestmark = [pytest.mark.cluster, pytest.mark.distro]

CHECKOUT = pathlib.Path(__file__).resolve().parents[2]
GLANCE_STORE = "4.9.1"  # python3-glance-store
VENV = "/opt/glance-rbd-native"  # --system-site-packages: Debian's glance_store, rados, rbd
MODULE = "glance_rbd_native/_native.abi3.so"
SITE = "/usr/lib/python3/dist-packages"


@pytest.fixture(scope="module")
def wheel():
    return venvs.wheel("aarch64")


@pytest.fixture(scope="module")
def root(cluster):
    """The cached arm64 root, the cluster's directory and this checkout mounted read-only at
    their own paths inside."""
    cluster.root.chmod(0o755)
    root = DebianRoot.ensure(
        RELEASE, binds=[cluster.root, CHECKOUT], read_only=[cluster.root, CHECKOUT]
    )
    try:
        yield root
    finally:
        root.close()


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """The release set, both wheels and the sdist, on a package index on loopback."""
    where = tmp_path_factory.mktemp("index")
    with package_index.serving(where / "packages", where / "pypi-server.log") as served:
        served.upload(package_index.release_set())
        yield served


@pytest.fixture(scope="module")
def venv(root, wheel, index):
    """A virtualenv of the root's python3 with the package pip-installed by name from the
    index, as an operator puts it next to glance; removed afterwards. pip takes the aarch64
    wheel (its report says which file); numpy is Debian's, which the virtualenv sees. Debian's
    pip, which the virtualenv sees too, does it: installing pip into the virtualenv first would
    take minutes under emulation."""
    report = "/var/tmp/pip-report.json"
    try:
        root.run("python3", "-m", "venv", "--without-pip", "--system-site-packages", VENV)
        root.run(
            f"{VENV}/bin/python",
            *("-m", "pip", "install", "-q", "--no-cache-dir", "--index-url", index.simple),
            *("--report", report, "glance-rbd-native"),
            timeout=900,
        )
        [installed] = [
            item
            for item in json.loads(root.file(report).read_text())["install"]
            if item["metadata"]["name"] == "glance-rbd-native"
        ]
        assert installed["download_info"]["url"].split("#")[0] == (
            f"{index.url}/packages/{wheel.name}"
        )
        yield f"{VENV}/bin/python"
    finally:
        root.run("rm", "-rf", VENV, report)


def test_an_arm64_debian_13(root):
    assert root.run("uname", "-m").stdout.strip() == "aarch64"
    assert root.run("dpkg", "--print-architecture").stdout.strip() == "arm64"
    versions = root.versions("python3", "python3-glance-store", "librbd1", "librados2", "libc6")
    assert versions["python3"].startswith("3.13.")
    assert versions["python3-glance-store"].startswith(f"{GLANCE_STORE}-")
    assert versions["librbd1"].startswith("18.2.7")
    assert versions["librados2"].startswith("18.2.7")
    assert versions["libc6"].startswith("2.41-")


def test_the_handler_is_seen_only_in_its_namespaces(root):
    """While an arm64 program runs in the root, the machine's own binfmt_misc has no handler
    and nothing is mounted in the machine's namespace; afterwards no process is left."""
    assert emulation.registered() == []
    proc = root.popen(["sleep", "600"])
    try:
        wait_for(root.processes, 30, every=0.1)
        assert root.processes(), "the arm64 sleep did not start"
        assert emulation.registered() == []
        mounts = pathlib.Path("/proc/self/mountinfo").read_text()
        assert str(root.path) not in mounts
        assert " binfmt_misc " not in mounts
    finally:
        root.kill(proc)
        proc.wait()
    # SIGKILLed, a qemu process may take a moment to exit on a busy machine.
    wait_for(lambda: not root.processes(), 10, every=0.1)
    assert root.processes() == []


def test_a_command_starts_once_both_id_maps_are_written(tmp_path):
    """With its user ids mapped and its group ids not yet, a command in new namespaces mounts
    binfmt_misc but cannot open the register file (the root's build then failed now and then).
    It waits for both maps: written here 0.5 s apart, it starts after the second, and the
    handler registers."""
    started = tmp_path / "started"
    script = emulation.script(RELEASE.arch) + f"touch {started}\n"
    proc = subprocess.Popen(
        emulation.wrap(["/bin/sh", "-c", script]), stderr=subprocess.PIPE, text=True
    )
    try:
        ours = os.readlink("/proc/self/ns/user")
        wait_for(lambda: os.readlink(f"/proc/{proc.pid}/ns/user") != ours, 10, "a namespace")
        pathlib.Path(f"/proc/{proc.pid}/uid_map").write_text(emulation.ID_MAP)
        time.sleep(0.5)
        assert proc.poll() is None and not started.exists(), "started with the user ids alone"
        pathlib.Path(f"/proc/{proc.pid}/gid_map").write_text(emulation.ID_MAP)
        _, err = proc.communicate(timeout=30)
    finally:
        emulation.kill(proc)
        proc.wait()
    assert proc.returncode == 0 and err == "", err
    assert started.exists()


def test_the_wheel_installs_and_loads_arm64_ceph(root, venv, wheel):
    with zipfile.ZipFile(wheel) as archive:
        built = archive.read(MODULE)
    probe = (
        "import glance_rbd_native._native as n, platform, sys; print(n.__file__); "
        "print(platform.machine()); print('.'.join(map(str, sys.version_info[:2])))"
    )
    path, machine, python = root.run(venv, "-c", probe).stdout.split()
    assert path.startswith(f"{VENV}/lib/python3.13/site-packages/")
    assert (machine, python) == ("aarch64", "3.13")
    assert root.file(path).read_bytes() == built
    ldd = root.run("ldd", path).stdout
    for lib in ("librbd.so.1", "librados.so.2", "libcrypto.so.3", "libssl.so.3"):
        assert re.search(
            rf"^\s*{re.escape(lib)} => /lib/aarch64-linux-gnu/{re.escape(lib)} ", ldd, re.M
        ), ldd
    assert "not found" not in ldd


def test_patch_accepts_its_glance_store(root, venv):
    probe = (
        "import logging; logging.basicConfig(level=logging.INFO); "
        "import glance_rbd_native as g; print(g.patch())"
    )
    res = root.run(venv, "-c", probe)
    assert res.stdout.split() == ["True"], res.stderr
    assert f"the native RBD writer is active for glance_store {GLANCE_STORE}" in res.stderr


def test_contract_core(root, venv, cluster):
    """The contract's core on aarch64: native against stock, on the host's cluster."""
    cluster.start_mgr()  # the full-pool case sets a quota, which the mgr applies
    junit = "/root/contract-core.xml"
    root.file(junit).unlink(missing_ok=True)
    result = root.run(
        venv,
        *contract.pytest_args(junit, contract.CORE),
        env={"GLANCE_RBD_TEST_CLUSTER": str(cluster.root)},
        cwd=str(CHECKOUT),
        check=False,
        timeout=1800,
    )
    xml = root.file(junit).read_text() if root.file(junit).exists() else ""
    where = f"Debian 13 arm64 (glance_store {GLANCE_STORE})"
    print(f"{where}: {contract.check_cases(where, contract.CORE, result, xml)}")


def test_the_arm64_deb(root, wheel, tmp_path):
    """apt installs the arm64 package from the root's own packages; its python3 loads the
    module, the wheel's byte for byte; apt remove takes every file away."""
    deb = build_deb(wheel, tmp_path)
    assert deb.name.endswith("_arm64.deb")
    try:
        root.install_deb(deb)
        with zipfile.ZipFile(wheel) as archive:
            assert root.file(f"{SITE}/{MODULE}").read_bytes() == archive.read(MODULE)
        out = root.run("python3", "-c", "import glance_rbd_native._native as n; print(n.__file__)")
        assert out.stdout.strip() == f"{SITE}/{MODULE}"
    finally:
        root.remove_deb()
    assert root.installed() is None
    assert not root.file(f"{SITE}/glance_rbd_native").exists()
