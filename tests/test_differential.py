"""The same inputs through the stock driver and the patched one give the same results.

Every case uploads through glance_store's Store.add twice on the real cluster, once stock and
once native, then compares the return values, the bytes read back, the image size and the
snapshot state, and checks both against the source.
"""

import io

import pytest

import glance_rbd_native
from tests.harness.data import (
    MiB,
    ShortReader,
    chunks_of,
    data_of,
    expected_result,
    new_name,
    sparse_data,
)
from tests.harness.stores import SNAP, make_store

pytestmark = pytest.mark.cluster


class RecordingVerifier:
    def __init__(self):
        self.chunks = []

    def update(self, chunk):
        self.chunks.append(bytes(chunk))


SOURCES = {
    "file": lambda data, chunk: io.BytesIO(data),
    "short-reads": lambda data, chunk: ShortReader(data, seed=len(data)),
    "iterator": lambda data, chunk: chunks_of(data, [chunk // 3 + 1, 7, chunk // 2]),
}


def upload_both(cluster, images, data, declared_size, source, store_kwargs, algo="sha512"):
    """Uploads through stock then native; returns {driver: (result, bytes, info, verifier)}."""
    outcome = {}
    for driver in ("stock", "native"):
        if driver == "native":
            assert glance_rbd_native.patch()
        else:
            glance_rbd_native.unpatch()
        store = make_store(cluster, **store_kwargs)
        name = new_name(driver)
        verifier = RecordingVerifier()
        result = store.add(
            name,
            SOURCES[source](data, store.WRITE_CHUNKSIZE),
            declared_size,
            algo,
            verifier=verifier,
        )
        try:
            outcome[driver] = (
                result,
                images.read(name),
                images.info(name),
                verifier.chunks,
                name,
                images.data_objects(name),
            )
        finally:
            images.remove(name)
    glance_rbd_native.unpatch()
    return outcome


def assert_same(outcome, data, cluster, algo="sha512"):
    (s_res, s_bytes, s_info, s_chunks, s_name, s_objs) = outcome["stock"]
    (n_res, n_bytes, n_info, n_chunks, n_name, n_objs) = outcome["native"]
    # Same tuple, but for the image name in the location.
    assert n_res[0] == s_res[0].replace(s_name, n_name)
    assert n_res[0] == f"rbd://{cluster.fsid}/{cluster.pool}/{n_name}/{SNAP}"
    assert n_res[1:] == s_res[1:]
    assert n_res[1:4] == expected_result(data, algo)
    assert n_bytes == s_bytes == data
    assert n_info == s_info == {"size": len(data), "snaps": {SNAP: True}}
    assert n_chunks == s_chunks
    assert b"".join(n_chunks) == data
    # Thin writes skip zero blocks at least as well as stock skips zero chunks.
    assert n_objs <= s_objs


def sizes_around(chunk):
    return {
        "1B": 1,
        "chunk-1": chunk - 1,
        "chunk": chunk,
        "chunk+1": chunk + 1,
        "many": 3 * chunk + 7,
    }


@pytest.mark.parametrize(
    "chunk_mib,thin", [(1, False), (1, True), (4, False)], ids=["1MiB", "1MiB-thin", "4MiB"]
)
@pytest.mark.parametrize("size_name", list(sizes_around(MiB)))
@pytest.mark.parametrize("known", [True, False], ids=["known", "unknown"])
@pytest.mark.parametrize("source", list(SOURCES))
def test_same_as_stock(cluster, clean_pool, chunk_mib, thin, size_name, known, source):
    chunk = chunk_mib * MiB
    size = sizes_around(chunk)[size_name]
    data = sparse_data(size, seed=size) if thin else data_of(size, seed=size)
    outcome = upload_both(
        cluster,
        clean_pool,
        data,
        size if known else 0,
        source,
        dict(chunk_mib=chunk_mib, thin=thin),
    )
    assert_same(outcome, data, cluster)


@pytest.mark.parametrize("known", [True, False], ids=["known", "unknown"])
def test_thin_all_zero_image_allocates_nothing(cluster, clean_pool, known):
    data = bytes(3 * MiB + 5)
    outcome = upload_both(
        cluster, clean_pool, data, len(data) if known else 0, "file", dict(chunk_mib=1, thin=True)
    )
    assert_same(outcome, data, cluster)
    assert outcome["native"][5] == 0


def test_thick_writes_zero_chunks_like_stock(cluster, clean_pool):
    data = bytes(2 * MiB) + data_of(MiB)
    outcome = upload_both(cluster, clean_pool, data, len(data), "file", dict(chunk_mib=1))
    assert_same(outcome, data, cluster)
    assert outcome["native"][5] == outcome["stock"][5] == 3


# Native digests, and two that fall back to hashlib (ripemd160, md5-sha1).
@pytest.mark.parametrize("algo", ["md5", "sha256", "sha3_512", "blake2b", "ripemd160", "md5-sha1"])
def test_hashing_algorithms(cluster, clean_pool, algo):
    data = data_of(2 * MiB + 3)
    outcome = upload_both(
        cluster, clean_pool, data, len(data), "file", dict(chunk_mib=1), algo=algo
    )
    assert_same(outcome, data, cluster, algo)


@pytest.mark.parametrize("known", [True, False], ids=["known", "unknown"])
def test_multi_store_metadata(cluster, clean_pool, known):
    data = data_of(MiB + 1)
    outcome = upload_both(
        cluster,
        clean_pool,
        data,
        len(data) if known else 0,
        "file",
        dict(chunk_mib=1, backend="ceph1"),
    )
    assert_same(outcome, data, cluster)
    assert outcome["native"][0][4] == {"store": "ceph1"}


def test_empty_image_unknown_size(cluster, clean_pool):
    outcome = upload_both(cluster, clean_pool, b"", 0, "file", dict(chunk_mib=1))
    assert_same(outcome, b"", cluster)


def test_back_compat_four_tuple(cluster, clean_pool):
    """Called without hashing_algo, add returns the pre-multihash 4-tuple, as stock."""
    data = data_of(1000)
    results = {}
    for driver in ("stock", "native"):
        if driver == "native":
            glance_rbd_native.patch()
        store = make_store(cluster, chunk_mib=1)
        name = new_name(driver)
        results[driver] = store.add(name, io.BytesIO(data), len(data))
        clean_pool.remove(name)
    assert len(results["native"]) == len(results["stock"]) == 4
    assert results["native"][1:] == results["stock"][1:]
