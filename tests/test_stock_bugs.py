"""Where the installed stock driver fails, the native one succeeds.

Each test first shows the stock failure on the real cluster (as that glance_store release has
it, see stock_versions), then checks the native upload's bytes against the source. Where a
release has fixed the bug, the test checks that stock and native agree instead.
"""

import hashlib
import io
import threading

import pytest
import rbd
from glance_store import exceptions

import glance_rbd_native
from tests import stock_versions
from tests.harness.data import MiB, chunks_of, data_of, expected_result, new_name
from tests.harness.stores import make_store

pytestmark = pytest.mark.cluster


def test_reused_store_second_unknown_size_upload(cluster, clean_pool):
    first, second = data_of(3 * MiB, 1), data_of(2 * MiB + 5, 2)

    store = make_store(cluster, chunk_mib=1)
    stock_names = [new_name("stock"), new_name("stock")]
    store.add(stock_names[0], io.BytesIO(first), 0, "sha512")
    with pytest.raises(Exception) as failure:
        store.add(stock_names[1], io.BytesIO(second), 0, "sha512")
    assert "Invalid argument" in str(failure.value) or "InvalidArgument" in repr(failure.value)
    clean_pool.remove(stock_names[0])
    clean_pool.remove(stock_names[1])

    glance_rbd_native.patch()
    store = make_store(cluster, chunk_mib=1)
    for data in (first, second, first):
        name = new_name("native")
        result = store.add(name, io.BytesIO(data), 0, "sha512")
        assert result[1:4] == expected_result(data)
        assert clean_pool.read(name) == data
        clean_pool.remove(name)


def concurrent_uploads(store, sources):
    """Uploads each source at once, on threads of their own: {name: result}, {name: error}."""
    results, errors = {}, {}

    def run(index, source):
        name = new_name(f"t{index}")
        try:
            results[name] = store.add(name, source, 0, "sha512")
        except Exception as exc:  # recorded, asserted on below
            errors[name] = exc

    threads = [threading.Thread(target=run, args=(i, s)) for i, s in enumerate(sources)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(t.is_alive() for t in threads)
    return results, errors


def first_one_ahead(payloads, chunk):
    """Iterators over `payloads` in which every upload but the first starts once the first has
    written a chunk: the interleaving, common under load, in which stock's shared resize state
    bites (the others see the Store grown already and never grow their own images)."""
    written = threading.Event()

    def first(data):
        pieces = chunks_of(data, [chunk])
        yield next(pieces)
        written.set()  # asked for the second chunk: the first one is written
        yield from pieces

    def later(data):
        if not written.wait(60):
            raise TimeoutError("the first upload never wrote its first chunk")
        yield from chunks_of(data, [chunk])

    return [first(payloads[0])] + [later(data) for data in payloads[1:]]


def test_concurrent_unknown_size_uploads_on_one_store(cluster, clean_pool):
    payloads = [data_of(6 * MiB + i * 4099, seed=i) for i in range(4)]

    store = make_store(cluster, chunk_mib=1)
    results, errors = concurrent_uploads(store, first_one_ahead(payloads, MiB))
    for name in list(results) + list(errors):
        clean_pool.remove(name)
    assert len(errors) == 3, f"stock should fail all but the first: {results}, {errors}"

    glance_rbd_native.patch()
    store = make_store(cluster, chunk_mib=1)
    results, errors = concurrent_uploads(store, first_one_ahead(payloads, MiB))
    assert not errors
    assert len(results) == 4
    for (name, result), data in zip(sorted(results.items()), payloads, strict=True):
        assert result[1:4] == expected_result(data)
        assert hashlib.md5(clean_pool.read(name)).hexdigest() == result[2]
        clean_pool.remove(name)


def test_iterator_chunk_larger_than_headroom(cluster, clean_pool):
    """Stock grows by its doubling step, not by what the chunk needs: 1 byte, then 10 MiB."""
    data = data_of(1 + 10 * MiB)
    pieces = [1, 10 * MiB]

    store = make_store(cluster, chunk_mib=1)
    name = new_name("stock")
    if stock_versions.CHECKS_SIZES:
        failure = pytest.raises(exceptions.Invalid, match="exceeded the expected size")
    else:
        failure = pytest.raises(rbd.IncompleteWriteError)
    with failure:
        store.add(name, chunks_of(data, pieces), 0, "sha512")
    assert name not in clean_pool.names()

    glance_rbd_native.patch()
    name = new_name("native")
    result = make_store(cluster, chunk_mib=1).add(name, chunks_of(data, pieces), 0, "sha512")
    assert result[1:4] == expected_result(data)
    assert clean_pool.read(name) == data
    assert clean_pool.info(name)["size"] == len(data)
    clean_pool.remove(name)


def test_first_chunk_larger_than_the_step(cluster, clean_pool):
    """Bug 1916482 (4.1 to 4.6.1): stock grows the image by one step before doubling it, so a
    first chunk over one step long (glance 25 under uWSGI hands over a little more than 8 MiB)
    fails. Later releases store it, as native does on every release."""
    data = data_of(3 * MiB)
    pieces = [MiB + MiB // 2, MiB]

    name = new_name("stock")
    store = make_store(cluster, chunk_mib=1)
    if stock_versions.RESIZES_BEFORE_DOUBLING:
        with pytest.raises(rbd.IncompleteWriteError):
            store.add(name, chunks_of(data, pieces), 0, "sha512")
        assert name not in clean_pool.names()
    else:
        assert store.add(name, chunks_of(data, pieces), 0, "sha512")[1:4] == expected_result(data)
        assert clean_pool.read(name) == data
        clean_pool.remove(name)

    glance_rbd_native.patch()
    name = new_name("native")
    result = make_store(cluster, chunk_mib=1).add(name, chunks_of(data, pieces), 0, "sha512")
    assert result[1:4] == expected_result(data)
    assert clean_pool.read(name) == data
    clean_pool.remove(name)


def test_short_upload_is_refused_not_padded(cluster, clean_pool):
    """4.x stores fewer bytes than declared as an image of the declared size, zero-padded, under
    the checksum of the bytes received. 5.0 and later refuse it; native refuses it everywhere."""
    data, declared = data_of(MiB + 5), 3 * MiB

    name = new_name("stock")
    store = make_store(cluster, chunk_mib=1)
    if stock_versions.CHECKS_SIZES:
        with pytest.raises(exceptions.Invalid, match="Size mismatch"):
            store.add(name, io.BytesIO(data), declared, "sha512")
        assert name not in clean_pool.names()
    else:
        result = store.add(name, io.BytesIO(data), declared, "sha512")
        stored = clean_pool.read(name)
        assert result[1:3] == (declared, hashlib.md5(data).hexdigest())
        assert stored == data + bytes(declared - len(data))
        assert hashlib.md5(stored).hexdigest() != result[2]
        clean_pool.remove(name)

    glance_rbd_native.patch()
    name = new_name("native")
    with pytest.raises(
        exceptions.Invalid, match=f"Size mismatch: expected {declared} bytes, got {len(data)} bytes"
    ):
        make_store(cluster, chunk_mib=1).add(name, io.BytesIO(data), declared, "sha512")
    assert name not in clean_pool.names()


@pytest.mark.parametrize("thin", [False, True], ids=["thick", "thin"])
def test_oversized_upload_is_refused_clearly(cluster, clean_pool, thin):
    """More bytes than declared: 4.x fails with librbd's raw error, or, when thin provisioning
    skips the extra all-zero chunk, stores the declared size under the checksum of every byte
    sent. 5.0 and later refuse it with Invalid; native does everywhere."""
    declared = 2 * MiB
    data = data_of(declared) + (bytes(MiB) if thin else data_of(MiB, seed=1))

    name = new_name("stock")
    store = make_store(cluster, chunk_mib=1, thin=thin)
    if stock_versions.CHECKS_SIZES:
        with pytest.raises(exceptions.Invalid, match="Size exceeds"):
            store.add(name, io.BytesIO(data), declared, "sha512")
        assert name not in clean_pool.names()
    elif thin:
        result = store.add(name, io.BytesIO(data), declared, "sha512")
        assert result[1:3] == (declared, hashlib.md5(data).hexdigest())
        assert clean_pool.read(name) == data[:declared]
        clean_pool.remove(name)
    else:
        with pytest.raises((rbd.IncompleteWriteError, rbd.InvalidArgument)):
            store.add(name, io.BytesIO(data), declared, "sha512")
        assert name not in clean_pool.names()

    glance_rbd_native.patch()
    name = new_name("native")
    with pytest.raises(
        exceptions.Invalid,
        match=f"Size exceeds: expected {declared} bytes, got {declared + MiB} bytes",
    ):
        make_store(cluster, chunk_mib=1, thin=thin).add(name, io.BytesIO(data), declared, "sha512")
    assert name not in clean_pool.names()
