"""The wheel `make build` made, as the README describes it: one abi3 wheel for CPython 3.9 and
later, linked against the host's Ceph client and OpenSSL 3 libraries, needing glibc 2.34, and
tagged plain `linux_x86_64` (librbd and librados are outside every manylinux policy, and are not
bundled: glance's own rados module loads the host's)."""

import re
import subprocess
import sys
import tomllib
import zipfile

import pytest
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection

from tests.harness import venvs

pytestmark = pytest.mark.wheel

# What the README lists; a new dependency must be added there too.
NEEDED = {"librbd.so.1", "librados.so.2", "libssl.so.3", "libcrypto.so.3", "libgcc_s.so.1",
          "libc.so.6", "ld-linux-x86-64.so.2"}
NEWEST_GLIBC = (2, 34)


@pytest.fixture(scope="module")
def extension(tmp_path_factory):
    """The extension module inside the wheel, opened as ELF."""
    with zipfile.ZipFile(venvs.wheel()) as wheel:
        [name] = [n for n in wheel.namelist() if n.endswith(".so")]
        assert name == "glance_rbd_native/_native.abi3.so"
        path = tmp_path_factory.mktemp("wheel") / "_native.so"
        path.write_bytes(wheel.read(name))
    with open(path, "rb") as stream:
        yield ELFFile(stream)


def test_one_abi3_wheel_for_python_3_9_on():
    version = tomllib.loads((venvs.ROOT / "Cargo.toml").read_text())["package"]["version"]
    assert venvs.wheel().name == f"glance_rbd_native-{version}-cp39-abi3-linux_x86_64.whl"
    with zipfile.ZipFile(venvs.wheel()) as wheel:
        [metadata] = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        assert "\nRequires-Python: >=3.9\n" in wheel.read(metadata).decode()


def test_dynamic_dependencies(extension):
    dynamic = next(s for s in extension.iter_sections() if isinstance(s, DynamicSection))
    needed = {tag.needed for tag in dynamic.iter_tags() if tag.entry.d_tag == "DT_NEEDED"}
    assert needed == NEEDED


def test_newest_glibc_symbol_version(extension):
    versions = set()
    for section in extension.iter_sections():
        if isinstance(section, GNUVerNeedSection):
            for needed, auxiliaries in section.iter_versions():
                if needed.name == "libc.so.6":
                    versions |= {aux.name for aux in auxiliaries}
    newest = max(tuple(map(int, v.removeprefix("GLIBC_").split("."))) for v in versions)
    assert newest == NEWEST_GLIBC


def test_auditwheel_finds_the_plain_linux_tag_true():
    """auditwheel agrees the wheel is `linux_x86_64`: not manylinux, and not repaired (that
    would bundle a second librados next to the one glance's rados module loads)."""
    show = subprocess.run([sys.executable, "-m", "auditwheel", "show", str(venvs.wheel())],
                          capture_output=True, text=True, check=True).stdout
    text = " ".join(show.split())
    assert re.search(r'is consistent with the following platform tag: "linux_x86_64"', text)
