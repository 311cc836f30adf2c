"""`pip install glance-rbd-native` from a package index, as glance hosts install it: the release
set (`make dist`) uploaded with twine to pypiserver on loopback (tests/harness/index.py), then
installed by name into a glance 33 virtualenv made as a glance host's (`venvs.glance_host`:
`--system-site-packages` over Debian's python3-rados and python3-rbd), patched, and a round trip
through the patched Store on the cluster, stored by the native writer. Once as pip chooses (the
manylinux wheel), once from the sdist alone (`--no-binary`, built here). The aarch64 wheel is
chosen from such an index in the arm64 root (tests/distro/test_debian13_arm64.py)."""

import email.parser
import json
import pathlib

import pytest

from tests.harness import index as package_index, venvs
from tests.harness.data import new_name

pytestmark = [pytest.mark.cluster, pytest.mark.packaging]

NAME = "glance-rbd-native"
ROUND_TRIP = pathlib.Path(__file__).parent / "harness" / "index_round_trip.py"
SIZE = 20 * 1024 * 1024 + 12345  # two 8 MiB chunks and part of a third
# The build requirement of pyproject.toml, which pip's isolated build of the sdist fetches from
# the same index: it passes nothing on to PyPI.
MATURIN = "maturin>=1.9,<2"


def run(*argv, timeout=600):
    return venvs.run(*argv, timeout=timeout)


@pytest.fixture(scope="module")
def glance_python():
    return venvs.glance_host()


@pytest.fixture(scope="module")
def index(tmp_path_factory, glance_python):
    where = tmp_path_factory.mktemp("index")
    with package_index.serving(where / "packages", where / "pypi-server.log") as served:
        released = package_index.release_set()
        served.upload(released)
        assert served.names() == sorted(f.name for f in released)
        run(glance_python, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
            "-d", served.folder, MATURIN)  # fmt: skip
        yield served


def pip_install(python, index, tmp_path, *options, timeout=600):
    """`pip install glance-rbd-native` from `index` alone, as a first install; what pip
    installed it from (the URL of its report)."""
    run(python, "-m", "pip", "uninstall", "-q", "-y", NAME)
    report = tmp_path / "report.json"
    run(python, "-m", "pip", "install", "-q", "--no-cache-dir", "--index-url", index.simple,
        "--report", report, *options, NAME, timeout=timeout)  # fmt: skip
    [installed] = [
        item for item in json.loads(report.read_text())["install"]
        if item["metadata"]["name"] == NAME
    ]  # fmt: skip
    return installed["download_info"]["url"].split("#")[0]


def dist_info(python):
    """The installed package's .dist-info folder."""
    probe = (
        "from importlib import metadata; print(metadata.distribution('glance-rbd-native')._path)"
    )
    return pathlib.Path(run(python, "-c", probe).stdout.strip())


def round_trip(python, cluster):
    """The round trip's report, and what the package logged."""
    image = new_name("index")
    done = run(python, ROUND_TRIP, cluster.conf_path, cluster.pool, image, SIZE)
    return image, json.loads(done.stdout), done.stderr


def assert_stored_natively(python, cluster):
    image, seen, logged = round_trip(python, cluster)
    site = dist_info(python).parent
    assert seen["patched"] and seen["module"].startswith(f"{site}/glance_rbd_native/")
    assert seen["stored"] == seen["length"] == SIZE
    assert seen["checksum_right"] and seen["multihash_right"] and seen["read_right"]
    assert f"stored image {image} with the native writer: {SIZE} bytes" in logged


def test_pip_takes_the_manylinux_wheel_by_name_and_glance_stores_natively(
    index, glance_python, cluster, clean_pool, tmp_path
):
    wheel = venvs.wheel("x86_64")
    assert pip_install(glance_python, index, tmp_path) == f"{index.url}/packages/{wheel.name}"
    tag = (dist_info(glance_python) / "WHEEL").read_text()
    assert "\nTag: cp39-abi3-manylinux_2_34_x86_64\n" in tag
    assert_stored_natively(glance_python, cluster)


@pytest.mark.time_limit(2400)  # a release build from scratch, beside the other lane
def test_pip_builds_the_sdist_alone_and_glance_stores_natively(
    index, glance_python, cluster, clean_pool, tmp_path
):
    """With --no-binary, pip builds the sdist from the index (maturin from the same index),
    as on a host no wheel fits: a plain linux wheel, true of a local build; the metadata,
    the licence and the start-up switch as in the release wheels."""
    sdist = venvs.sdist()
    url = pip_install(glance_python, index, tmp_path, "--no-binary", NAME, timeout=2400)
    assert url == f"{index.url}/packages/{sdist.name}"
    version = venvs.cargo_version()
    info = dist_info(glance_python)
    assert "\nTag: cp39-abi3-linux_x86_64\n" in (info / "WHEEL").read_text()
    metadata = email.parser.HeaderParser().parsestr((info / "METADATA").read_text())
    assert metadata["Version"] == version
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata.get_all("License-File") == ["LICENSE"]
    assert (info / "licenses" / "LICENSE").is_file()
    assert (info.parent / "glance_rbd_native_switch.pth").is_file()
    assert (info.parent / "glance_rbd_native" / "py.typed").is_file()
    probe = "import glance_rbd_native as g; print(g.__version__)"
    assert run(glance_python, "-c", probe).stdout.split() == [version]
    assert_stored_natively(glance_python, cluster)
