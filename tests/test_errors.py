"""Each error path of the native Store.add: the stock exception, and no image left behind."""

import io

import pytest
from glance_store import exceptions

import glance_rbd_native
from tests.harness.data import MiB, data_of, new_name
from tests.harness.stores import make_store

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("native")]


class FailingReader:
    """Gives `good` bytes, then raises `error` (a client that goes away mid-upload)."""

    def __init__(self, good, error):
        self._stream = io.BytesIO(data_of(good))
        self._error = error

    def read(self, size=-1):
        chunk = self._stream.read(size)
        if not chunk:
            raise self._error
        return chunk


class ImageSizeLimitExceeded(Exception):
    """What glance's LimitingReader raises past image_size_cap (glance.common.exception)."""


class FailingVerifier:
    def __init__(self, after):
        self.calls = 0
        self._after = after

    def update(self, chunk):
        self.calls += 1
        if self.calls > self._after:
            raise ValueError("signature does not match")


def test_duplicate_leaves_existing_image_untouched(cluster, clean_pool):
    name = new_name("dup")
    clean_pool.create(name, MiB)
    clean_pool.write(name, b"keep me")
    store = make_store(cluster, chunk_mib=1)
    with pytest.raises(exceptions.Duplicate, match=f"RBD image {name} already exists"):
        store.add(name, io.BytesIO(data_of(2 * MiB)), 2 * MiB, "sha512")
    assert clean_pool.info(name) == {"size": MiB, "snaps": {}}
    assert clean_pool.read(name, snapshot=None)[:7] == b"keep me"
    clean_pool.remove(name)


def test_size_exceeds(cluster, clean_pool):
    name = new_name()
    store = make_store(cluster, chunk_mib=1)
    with pytest.raises(
        exceptions.Invalid, match=f"Size exceeds: expected {2 * MiB} bytes, got {3 * MiB} bytes"
    ):
        store.add(name, io.BytesIO(data_of(3 * MiB)), 2 * MiB, "sha512")
    assert name not in clean_pool.names()


def test_size_mismatch(cluster, clean_pool):
    name = new_name()
    store = make_store(cluster, chunk_mib=1)
    with pytest.raises(
        exceptions.Invalid, match=f"Size mismatch: expected {3 * MiB} bytes, got {MiB + 5} bytes"
    ):
        store.add(name, io.BytesIO(data_of(MiB + 5)), 3 * MiB, "sha512")
    assert name not in clean_pool.names()


@pytest.mark.parametrize("known", [True, False], ids=["known", "unknown"])
@pytest.mark.parametrize(
    "error",
    [OSError("connection reset by peer"), ImageSizeLimitExceeded()],
    ids=["ioerror", "size-limit"],
)
def test_reader_error_reraised_unchanged(cluster, clean_pool, known, error):
    name = new_name()
    store = make_store(cluster, chunk_mib=1)
    with pytest.raises(type(error)) as raised:
        store.add(name, FailingReader(5 * MiB + 3, error), 8 * MiB if known else 0, "sha512")
    assert raised.value is error
    assert name not in clean_pool.names()


def test_verifier_error_reraised_unchanged(cluster, clean_pool):
    name = new_name()
    verifier = FailingVerifier(after=2)
    store = make_store(cluster, chunk_mib=1)
    with pytest.raises(ValueError, match="signature does not match"):
        store.add(name, io.BytesIO(data_of(5 * MiB)), 0, "sha512", verifier=verifier)
    assert verifier.calls == 3
    assert name not in clean_pool.names()


def test_missing_pool_names_the_pool(cluster, clean_pool):
    store = make_store(cluster, chunk_mib=1, pool="no-such-pool")
    with pytest.raises(exceptions.BackendException, match="pool 'no-such-pool'"):
        store.add(new_name(), io.BytesIO(b"x"), 1, "sha512")


def test_bad_conf_path_is_a_backend_error(cluster, clean_pool, tmp_path):
    store = make_store(cluster, chunk_mib=1, conf_file=tmp_path / "missing.conf")
    with pytest.raises(exceptions.BackendException, match=r"missing\.conf"):
        store.add(new_name(), io.BytesIO(b"x"), 1, "sha512")


def test_bad_conf_in_multi_store_is_bad_store_configuration(cluster, clean_pool, tmp_path):
    good = make_store(cluster, chunk_mib=1, backend="ceph1")
    good.conf_file = str(tmp_path / "missing.conf")
    with pytest.raises(exceptions.BadStoreConfiguration, match=r"missing\.conf"):
        good.add(new_name(), io.BytesIO(b"x"), 1, "sha512")


def test_unknown_user_is_a_backend_error(cluster, clean_pool):
    store = make_store(cluster, chunk_mib=1, user="nobody", timeout=5)
    with pytest.raises(exceptions.BackendException, match="nobody"):
        store.add(new_name(), io.BytesIO(b"x"), 1, "sha512")


def test_pool_over_quota_is_storage_full(cluster, clean_pool):
    """A pool quota needs a ceph-mgr; once the pool is flagged full, add gives StorageFull
    (stock blocks until its op timeout, then raises rbd.Timeout) and removes its image."""
    with cluster.pool_over_quota("quota") as pool:
        name = new_name()
        store = make_store(cluster, chunk_mib=1, pool=pool, timeout=20)
        with pytest.raises(exceptions.StorageFull):
            store.add(name, io.BytesIO(data_of(4 * MiB)), 0, "sha512")
        assert name not in cluster.images(pool)
    assert glance_rbd_native.is_patched()
