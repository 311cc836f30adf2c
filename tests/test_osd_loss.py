"""A fault a real cluster has: three OSDs, pools of three replicas and `min_size` 2, and one OSD
killed with SIGKILL (a crash, the OOM killer) in the middle of an upload and in the middle of a
download. Its peers report it down within seconds; the placement groups go on with two
replicas, and both drivers finish with every byte right."""

import io
import pathlib
import shutil
import tempfile

import pytest

import glance_rbd_native
from tests.harness.cluster import Cluster
from tests.harness.data import MiB, data_of, expected_result, new_name
from tests.harness.stores import Images, locate, make_store

pytestmark = [pytest.mark.cluster, pytest.mark.load]

SIZE = 96 * MiB


@pytest.fixture(scope="module")
def three_osds():
    root = pathlib.Path(tempfile.mkdtemp(prefix="grn3-", dir="/tmp"))
    try:
        with Cluster(root, osds=3, osd_size_gib=4) as cluster:
            yield cluster
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pool(three_osds):
    access = Images(three_osds)
    yield access
    access.close()
    # The next case starts with three OSDs again.
    three_osds.start_osd(0, 1, 2)


class KillsAnOsd:
    """A source that kills osd.1 with SIGKILL once `after` bytes have been read."""

    def __init__(self, cluster, data, after):
        self._cluster, self._stream, self._after = cluster, io.BytesIO(data), after
        self.killed = False

    def read(self, size=-1):
        if not self.killed and self._stream.tell() >= self._after:
            self._cluster.kill_osd(1)
            self.killed = True
        return self._stream.read(size)


@pytest.mark.parametrize("driver", ["stock", "native"])
def test_an_osd_killed_mid_upload(three_osds, pool, driver):
    if driver == "native":
        assert glance_rbd_native.patch()
    data = data_of(SIZE, seed=31)
    name = new_name(f"osd-loss-{driver}")
    source = KillsAnOsd(three_osds, data, after=SIZE // 3)
    result = make_store(three_osds, chunk_mib=4).add(name, source, SIZE, "sha512")
    assert source.killed
    assert result[1:4] == expected_result(data)
    assert pool.read(name) == data
    pool.remove(name)


@pytest.mark.parametrize("driver", ["stock", "native"])
def test_an_osd_killed_mid_download(three_osds, pool, driver):
    if driver == "native":
        assert glance_rbd_native.patch()
    data = data_of(SIZE, seed=32)
    name = pool.store(new_name(f"osd-loss-read-{driver}"), data)
    store = make_store(three_osds, chunk_mib=4)
    chunks, size = store.get(locate(store, three_osds, name))
    parts = []
    for chunk in chunks:
        parts.append(chunk)
        if len(parts) == 8:
            three_osds.kill_osd(1)
    assert size == SIZE and b"".join(parts) == data
    pool.remove(name)
