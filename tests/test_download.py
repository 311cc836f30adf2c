"""Store.get and Store.get_size, stock against native, on the real cluster: the same chunks,
bytes, sizes and exceptions, whatever glance_store is installed; and the native iterator
stopped mid-stream (a client that disconnects) leaves nothing open."""

import gc
import os

import pytest
import rbd
from glance_store import exceptions

import glance_rbd_native
from tests import stock_versions
from tests.harness.data import MiB, data_of, new_name
from tests.harness.stores import SNAP, locate, make_store

pytestmark = pytest.mark.cluster

DRIVERS = ("stock", "native")


def use(driver):
    if driver == "native":
        assert glance_rbd_native.patch()
    else:
        glance_rbd_native.unpatch()


def stored(images, data, name=None):
    """The name of an image holding `data` with glance's snapshot, written independently of
    both drivers."""
    name = name or new_name("read")
    images.create(name, len(data))
    if data:
        images.write(name, data)
    images.snapshot(name)
    return name


def read_with(driver, cluster, name, snapshot=SNAP, **store_kwargs):
    """(chunk lengths, bytes, size) as `driver`'s get returns them."""
    use(driver)
    store = make_store(cluster, **store_kwargs)
    chunks, size = store.get(locate(store, cluster, name, snapshot))
    parts = list(chunks)
    return (
        [len(p) for p in parts],
        b"".join(parts),
        size,
        store.get_size(locate(store, cluster, name, snapshot)),
    )


@pytest.mark.parametrize("size", [0, 1, 8 * MiB - 1, 8 * MiB, 8 * MiB + 1, 3 * 8 * MiB + 5])
def test_same_chunks_bytes_and_size(cluster, clean_pool, size):
    data = data_of(size, seed=size % 997)
    name = stored(clean_pool, data)
    results = {driver: read_with(driver, cluster, name) for driver in DRIVERS}
    assert results["native"] == results["stock"]
    lengths, content, reported, get_size = results["native"]
    assert content == data and reported == get_size == size
    assert lengths == [min(8 * MiB, size - pos) for pos in range(0, size, 8 * MiB)]
    clean_pool.remove(name)


@pytest.mark.parametrize("chunk_mib", [1, 4])
def test_the_store_chunk_size(cluster, clean_pool, chunk_mib):
    data = data_of(5 * MiB + 3, seed=chunk_mib)
    name = stored(clean_pool, data)
    results = {driver: read_with(driver, cluster, name, chunk_mib=chunk_mib) for driver in DRIVERS}
    assert results["native"] == results["stock"]
    assert results["native"][0][0] == chunk_mib * MiB
    clean_pool.remove(name)


def test_reads_the_snapshot_not_the_head(cluster, clean_pool):
    """glance's location names the snapshot: what was written after it is not served."""
    data = data_of(2 * MiB, seed=5)
    name = stored(clean_pool, data)
    clean_pool.write(name, bytes(MiB))
    results = {driver: read_with(driver, cluster, name) for driver in DRIVERS}
    assert results["native"] == results["stock"]
    assert results["native"][1] == data
    clean_pool.remove(name)


def errors_of(driver, cluster, name, snapshot=SNAP, pool=None):
    """What get() and get_size() raise, as (type, message)."""
    use(driver)
    store = make_store(cluster)
    raised = []
    for call in (store.get, store.get_size):
        with pytest.raises(Exception) as info:
            call(locate(store, cluster, name, snapshot, pool))
        raised.append((type(info.value), str(info.value)))
    return raised


def test_a_missing_image(cluster, clean_pool):
    name = new_name("missing")
    raised = {driver: errors_of(driver, cluster, name) for driver in DRIVERS}
    assert raised["native"] == raised["stock"]
    assert raised["native"][0][0] is exceptions.NotFound
    assert name in raised["native"][0][1]


def test_a_missing_snapshot(cluster, clean_pool):
    name = stored(clean_pool, data_of(MiB))
    raised = {driver: errors_of(driver, cluster, name, snapshot="nosuch") for driver in DRIVERS}
    assert raised["native"] == raised["stock"]
    assert raised["native"][0][0] is exceptions.NotFound
    clean_pool.remove(name)


def test_a_missing_pool_is_named(cluster, clean_pool):
    """Stock lets librados' ObjectNotFound escape; native raises BackendException naming the
    pool, as its add does."""
    name = new_name("nopool")
    stock = errors_of("stock", cluster, name, pool="no-such-pool")
    assert stock[0][0].__name__ == "ObjectNotFound"
    native = errors_of("native", cluster, name, pool="no-such-pool")
    for kind, message in native:
        assert kind is exceptions.BackendException
        assert "pool 'no-such-pool'" in message


def test_deleted_between_get_and_iterating(cluster, clean_pool):
    """Stock's get() closes the image it measured and reopens it to iterate: an image removed
    in between gives NotFound once iterated. Native's get() keeps the image it opened for the
    iteration, watched: the removal is refused (ImageBusy), and the iteration reads it whole."""
    data = data_of(MiB, seed=9)
    for driver in DRIVERS:
        name = stored(clean_pool, data)
        use(driver)
        store = make_store(cluster)
        chunks, _ = store.get(locate(store, cluster, name))
        if driver == "stock":
            clean_pool.remove(name)
            with pytest.raises(exceptions.NotFound, match=name):
                list(chunks)
        else:
            with pytest.raises(rbd.ImageBusy):
                clean_pool.remove(name)
            assert b"".join(chunks) == data
            clean_pool.remove(name)


def test_iterating_twice_reads_twice(cluster, clean_pool):
    data = data_of(3 * MiB, seed=11)
    name = stored(clean_pool, data)
    for driver in DRIVERS:
        use(driver)
        store = make_store(cluster, chunk_mib=1)
        chunks, _ = store.get(locate(store, cluster, name))
        assert b"".join(chunks) == b"".join(chunks) == data
    clean_pool.remove(name)


def removed_mid_read(cluster, images, data, remove):
    """Reads the first 1 MiB chunk of a new image, calls `remove(name)`, reads on; the
    image's name, and the bytes or the exception the consumer got."""
    name = stored(images, data)
    store = make_store(cluster, chunk_mib=1)
    chunks, _ = store.get(locate(store, cluster, name))
    stream = iter(chunks)
    parts = [next(stream)]
    remove(name)
    try:
        parts.extend(stream)
    except Exception as exc:  # what the consumer would see
        return name, exc
    return name, b"".join(parts)


def test_deleted_by_glance_mid_read(cluster, clean_pool, monkeypatch):
    """glance's delete (the installed stock one) while the image is read: it removes the
    snapshot, then fails to remove the watched image (InUseByStore); the download, at that
    snapshot, ends with NotFound, and the image can be deleted once it has. So with native on
    every release, and with stock before 5.4. Stock from 5.4 opens read-only, without a watch:
    the image goes, and librbd reads its removed objects as zeros, which stock serves as the
    rest of the image, with no error."""
    monkeypatch.setenv("GLANCE_RBD_NATIVE_MAX_IN_FLIGHT_MIB", "2")  # reads left to make
    data = data_of(24 * MiB, seed=17)
    for driver in DRIVERS:
        use(driver)
        store = make_store(cluster)
        refused = []

        def delete(name, store=store, refused=refused):
            try:
                store.delete(locate(store, cluster, name))
            except exceptions.InUseByStore:
                refused.append(name)

        name, served = removed_mid_read(cluster, clean_pool, data, delete)
        if driver == "stock" and stock_versions.OPENS_READ_ONLY:
            assert not refused and name not in clean_pool.names()
            assert len(served) == len(data) and served != data and not any(served[-MiB:])
        else:
            assert refused == [name]
            assert isinstance(served, exceptions.NotFound) and name in str(served)
            store.delete(locate(store, cluster, name))
            assert name not in clean_pool.names()


def open_fds():
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("how", ["close", "garbage"])
def test_stopped_mid_stream_leaves_nothing_open(cluster, clean_pool, native, how):
    """50 downloads stopped after one chunk, by close() or by dropping the iterator: the
    image can be removed right after (no reader watches it any more), and neither file
    descriptors nor cached connections grow."""
    data = data_of(6 * MiB, seed=13)
    store = make_store(cluster, chunk_mib=1)
    name = stored(clean_pool, data)
    chunks, _ = store.get(locate(store, cluster, name))
    assert next(iter(chunks)) == data[:MiB]  # warm: the connection is made and cached
    chunks.close()
    fds, connections = open_fds(), glance_rbd_native.connection_count()
    # Without the cyclic collector: what glance drops must be freed, and the reader closed, by
    # reference counting alone.
    gc.disable()
    try:
        for _ in range(50):
            chunks, _ = store.get(locate(store, cluster, name))
            stream = iter(chunks)
            assert next(stream) == data[:MiB]
            if how == "close":
                chunks.close()
            else:
                del chunks, stream
    finally:
        gc.enable()
    assert open_fds() <= fds + 2
    assert glance_rbd_native.connection_count() == connections
    clean_pool.remove(name)
    assert name not in clean_pool.names()
