"""The Debian package: built from the wheel `make build` made by packaging/deb.py (what `make deb`
runs), then installed by apt into Debian 12's root, used, and removed by apt, which must leave
nothing of it behind. The root is left without the package, as it was found."""

import pathlib
import re
import subprocess
import zipfile

import pytest
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

from debian_root import BOOKWORM, PACKAGE, DebianRoot, build_deb
from tests.harness import venvs

RELEASE = BOOKWORM

pytestmark = [pytest.mark.distro, pytest.mark.debian12]

ROOT = pathlib.Path(__file__).resolve().parents[2]
SITE = "/usr/lib/python3/dist-packages"
DOC = f"/usr/share/doc/{PACKAGE}"
DEPENDS = (
    "python3 (>= 3.9), python3-glance-store (>= 4.1), python3-numpy, librbd1 (>= 16), "
    "librados2 (>= 16), libssl3 (>= 3.0.0), libgcc-s1 (>= 4.2), libc6 (>= 2.34)"
)
# Which driver serves, in a python3 that never imports the package itself: native's get_size
# replaces stock's as it is (add and get are wrapped as stock wraps its own, so their names are
# stock's), and is_patched() says that add, get and get_size were swapped.
DRIVER_PROBE = """\
import logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s %(message)s")
from glance_store._drivers import rbd
native = sys.modules.get("glance_rbd_native")
print(rbd.Store.get_size.__module__, native.is_patched() if native else "not-loaded")
"""


def host_arch():
    return subprocess.run(
        ["dpkg", "--print-architecture"], check=True, capture_output=True, text=True
    ).stdout.strip()


def contents(deb):
    """The package's paths (absolute, as dpkg -L lists them) -> (mode, owner)."""
    out = subprocess.run(
        ["dpkg-deb", "-c", str(deb)], check=True, capture_output=True, text=True
    ).stdout
    listed = {}
    for line in out.splitlines():
        mode, owner, _size, _date, _time, path = line.split(maxsplit=5)
        listed["/" + path.removeprefix("./").rstrip("/")] = (mode, owner)
    return listed


def field(deb, name):
    return subprocess.run(
        ["dpkg-deb", "-f", str(deb), name], check=True, capture_output=True, text=True
    ).stdout.strip()


def test_name_and_control(deb):
    version = venvs.cargo_version()
    assert deb.name == f"{PACKAGE}_{version}_{host_arch()}.deb"
    assert field(deb, "Package") == PACKAGE
    assert field(deb, "Version") == version
    assert field(deb, "Architecture") == host_arch()
    assert field(deb, "Depends") == DEPENDS
    assert field(deb, "Section") == "python"
    assert field(deb, "Priority") == "optional"
    assert re.fullmatch(r"[^<>]+ <[^<>@\s]+@[^<>\s]+>", field(deb, "Maintainer"))
    assert int(field(deb, "Installed-Size")) > 1000  # KiB: the extension alone is 1 MiB
    assert field(deb, "Description").startswith("Native Ceph RBD uploads and downloads")


def test_depends_names_the_package_of_every_library_linked(deb, tmp_path):
    """What dpkg-shlibdeps looks up, by hand: the package that ships each library the extension
    needs (DT_NEEDED) on this host is among the dependencies."""
    subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp_path)], check=True)
    with open(tmp_path / SITE.lstrip("/") / "glance_rbd_native" / "_native.abi3.so", "rb") as so:
        dynamic = next(s for s in ELFFile(so).iter_sections() if isinstance(s, DynamicSection))
        needed = {tag.needed for tag in dynamic.iter_tags() if tag.entry.d_tag == "DT_NEEDED"}
    owners = {}
    for lib in needed:
        # By name: ld.so finds them through /lib, dpkg lists some under /usr/lib.
        out = subprocess.run(
            ["dpkg", "-S", f"*/{lib}"], check=True, capture_output=True, text=True
        ).stdout
        owners[lib] = {
            pkg.split(":")[0]
            for line in out.splitlines()
            for pkg in line.split(": ")[0].split(", ")
        }
    assert owners == {
        "librbd.so.1": {"librbd1"},
        "librados.so.2": {"librados2"},
        "libssl.so.3": {"libssl3"},
        "libcrypto.so.3": {"libssl3"},
        "libgcc_s.so.1": {"libgcc-s1"},
        "libc.so.6": {"libc6"},
        "ld-linux-x86-64.so.2": {"libc6"},
    }
    assert set().union(*owners.values()) <= {dep.split()[0] for dep in DEPENDS.split(", ")}


def test_files(deb):
    """The wheel's files in dist-packages, the switch among them, but for RECORD and the
    licence (dpkg keeps the list, the copyright file carries the licence); the command in
    /usr/bin; copyright and changelog; no bytecode, which is made at install; all root's."""
    version = venvs.cargo_version()
    dist_info = f"glance_rbd_native-{version}.dist-info"
    with zipfile.ZipFile(venvs.wheel()) as wheel:
        from_wheel = {
            f"{SITE}/{name}"
            for name in wheel.namelist()
            if name != f"{dist_info}/RECORD"
            and not name.startswith(f"{dist_info}/licenses/")
            and not name.endswith("/")  # auditwheel writes the folders as entries too
        }
        so = wheel.read("glance_rbd_native/_native.abi3.so")
    files = {path for path, (mode, _) in contents(deb).items() if not mode.startswith("d")}
    assert files == from_wheel | {
        "/usr/bin/glance-rbd-native",
        f"{DOC}/copyright",
        f"{DOC}/changelog.Debian.gz",
    }
    assert f"{SITE}/glance_rbd_native_switch.pth" in files
    assert f"{SITE}/{dist_info}/entry_points.txt" in files  # __version__ and oslo.config read it
    listed = contents(deb)
    assert {owner for _, owner in listed.values()} == {"root/root"}
    assert listed[f"{SITE}/glance_rbd_native/_native.abi3.so"][0] == "-rw-r--r--"
    assert listed["/usr/bin/glance-rbd-native"][0] == "-rwxr-xr-x"
    assert {mode for mode, _ in listed.values() if mode.startswith("d")} == {"drwxr-xr-x"}
    assert not [path for path in listed if "__pycache__" in path or path.endswith(".pyc")]
    # The extension is the wheel's, byte for byte.
    extracted = subprocess.run(
        [
            "sh",
            "-c",
            f"dpkg-deb --fsys-tarfile {deb} | tar -xO .{SITE}/glance_rbd_native/_native.abi3.so",
        ],
        check=True,
        capture_output=True,
    ).stdout
    assert extracted == so


def test_the_same_wheel_gives_the_same_bytes(tmp_path):
    """With SOURCE_DATE_EPOCH set, two builds of one wheel are identical."""
    first = build_deb(venvs.wheel(), tmp_path / "1", epoch=1764547200)
    second = build_deb(venvs.wheel(), tmp_path / "2", epoch=1764547200)
    assert first.read_bytes() == second.read_bytes()


@pytest.fixture(scope="module")
def root():
    """Debian 12's cached root, without the package before and after."""
    root = DebianRoot.ensure(RELEASE)
    try:
        root.remove_deb()  # left by an interrupted run
        try:
            yield root
        finally:
            root.remove_deb()
    finally:
        root.close()


@pytest.fixture(scope="module")
def installed(root, deb):
    """Installs the package with apt. apt's output, and the package's paths that the root had
    before (the directories it shares with other packages)."""
    existed = {path for path in contents(deb) if root.file(path).exists()}
    return root.install_deb(deb), existed


def run_python(root, code, switch):
    env = {"GLANCE_RBD_NATIVE": "1"} if switch else {}
    return root.run("python3", "-c", code, env=env)


def test_apt_installs_it(installed, root, deb):
    """From the root's own packages: nothing else installed, nothing downloaded; dpkg lists
    exactly the package's paths; py3compile made the bytecode."""
    output, _ = installed
    assert "0 upgraded, 1 newly installed, 0 to remove" in output
    assert "Need to get 0 B/" in output
    assert "Setting up glance-rbd-native" in output
    assert root.installed() == venvs.cargo_version()
    listed = set(root.run("dpkg", "-L", PACKAGE).stdout.split())
    assert listed == {"/.", *contents(deb)} - {"/"}
    package = root.file(f"{SITE}/glance_rbd_native")
    compiled = {pyc.name.split(".")[0] for pyc in (package / "__pycache__").glob("*.pyc")}
    assert compiled == {py.stem for py in package.glob("*.py")}


def test_python3_imports_it_from_dist_packages(installed, root):
    probe = (
        "import glance_rbd_native as p, glance_rbd_native._native as n\n"
        "from importlib import metadata\n"
        "print(p.__file__, n.__file__, p.__version__)\n"
        "print(*[e.name for e in metadata.entry_points(group='oslo.config.opts')])\n"
    )
    lines = run_python(root, probe, switch=False).stdout.splitlines()
    assert lines[0].split() == [
        f"{SITE}/glance_rbd_native/__init__.py",
        f"{SITE}/glance_rbd_native/_native.abi3.so",
        venvs.cargo_version(),
    ]
    assert "glance_rbd_native" in lines[1].split()


def test_the_command(installed, root):
    assert (
        root.run("sh", "-c", "command -v glance-rbd-native").stdout.strip()
        == "/usr/bin/glance-rbd-native"
    )
    assert root.run("glance-rbd-native", "--help").stdout.startswith("usage: glance-rbd-native")
    # The options reach oslo-config-generator through the package's entry points.
    opts = root.run("oslo-config-generator", "--namespace", "glance_rbd_native").stdout
    assert "[glance_rbd_native]" in opts
    assert "max_in_flight_mib" in opts


@pytest.mark.parametrize("switch", [True, False])
def test_the_switch_in_a_fresh_python3(installed, root, switch):
    """GLANCE_RBD_NATIVE=1 and nothing else: the .pth in dist-packages patches the driver as it
    is imported, in a python3 that never imports the package itself."""
    out = run_python(root, DRIVER_PROBE, switch).stdout
    assert out.splitlines()[-1] == (
        "glance_rbd_native.download True" if switch else "glance_store._drivers.rbd not-loaded"
    )
    assert ("the native RBD writer is active for glance_store 4.1.0" in out) == switch


def test_apt_remove_leaves_nothing(installed, root, deb):
    """`apt-get remove`: every path the package brought is gone, bytecode included, dpkg forgets
    it, and a python3 with the switch still set starts cleanly on the stock driver."""
    _, existed = installed
    listed = set(root.run("dpkg", "-L", PACKAGE).stdout.split())
    output = root.remove_deb()
    assert "Removing glance-rbd-native" in output
    assert root.installed() is None
    status = root.run("dpkg", "-s", PACKAGE, check=False)
    assert status.returncode == 1
    assert "is not installed and no information is available" in status.stderr
    left = {path for path in listed - existed - {"/."} if root.file(path).exists()}
    assert not left
    assert all(root.file(path).is_dir() for path in existed)
    assert not [
        *root.path.glob("usr/lib/python3*/dist-packages/glance_rbd_native*"),
        *root.path.glob("usr/local/lib/python3*/dist-packages/glance_rbd_native*"),
        *root.path.glob("usr/share/doc/glance-rbd-native*"),
    ]
    probe = DRIVER_PROBE + (
        "import importlib.util\nprint(importlib.util.find_spec('glance_rbd_native'))\n"
    )
    result = run_python(root, probe, switch=True)
    assert result.stdout.splitlines()[-2:] == ["glance_store._drivers.rbd not-loaded", "None"]
    assert result.stderr == ""
