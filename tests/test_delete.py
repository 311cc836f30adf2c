"""Store.delete, stock against native, on the real cluster: the same exceptions and the same
pool afterwards, whatever glance_store is installed. Native returns once the image is in the
pool's trash; its data goes in the background, and its mark in the pool's index with it."""

import io
import threading

import pytest
import rados
import rbd
from glance_store import exceptions

import glance_rbd_native
from glance_rbd_native._native import _delete_image
from tests import stock_versions
from tests.harness.data import MiB, data_of, new_name
from tests.harness.stores import SNAP, locate, make_store
from tests.harness.waiting import wait_for

pytestmark = pytest.mark.cluster

DRIVERS = ("stock", "native")
DELETES = "glance_rbd_native.deletes"


def use(driver):
    if driver == "native":
        assert glance_rbd_native.patch()
    else:
        glance_rbd_native.unpatch()


def delete_with(driver, cluster, name, pool=None):
    """What `driver`'s delete raised, as (type, message), or None."""
    use(driver)
    store = make_store(cluster)
    try:
        store.delete(locate(store, cluster, name, pool=pool))
    except Exception as exc:  # what glance would see
        return type(exc), str(exc)
    return None


def trash(images):
    """{name: entry} of the pool's trash."""
    return {entry["name"]: entry for entry in rbd.RBD().trash_list(images.ioctx)}


def deletion_marks(images):
    """{image id: mark} of the native deletes in progress in the pool."""
    with rados.ReadOpCtx() as op:
        try:
            entries, _ = images.ioctx.get_omap_vals(op, "", "", 1000)
            images.ioctx.operate_read_op(op, DELETES)
        except rados.ObjectNotFound:
            return {}
        return dict(entries)


def purged(images, name):
    """True once no trash entry and no deletion mark of image `name` is left."""
    return name not in trash(images) and not any(
        name.encode() in mark for mark in deletion_marks(images).values()
    )


def test_an_image(cluster, clean_pool, caplog):
    """The image goes from glance's view at once; native's data, and its mark, soon after."""
    caplog.set_level("INFO", logger="glance_rbd_native")
    for driver in DRIVERS:
        name = clean_pool.store(new_name(f"del-{driver}"), data_of(3 * MiB, seed=1))
        assert delete_with(driver, cluster, name) is None
        assert name not in clean_pool.names()
        assert wait_for(lambda name=name: purged(clean_pool, name), timeout=60), driver
    said = [r.getMessage() for r in caplog.records if r.name == "glance_rbd_native.delete"]
    assert len(said) == 1 and "moved to the trash as" in said[0] and cluster.pool in said[0]


def test_a_protected_snapshot_with_clones(cluster, clean_pool):
    """InUseByStore on every release (4.1 checks for clones first, later ones are refused the
    unprotect); the image, its snapshot and the clone stay."""
    results = {}
    for driver in DRIVERS:
        name = clean_pool.store(new_name(f"parent-{driver}"), data_of(MiB, seed=2))
        clone = new_name(f"clone-{driver}")
        rbd.RBD().clone(clean_pool.ioctx, name, SNAP, clean_pool.ioctx, clone)
        raised = delete_with(driver, cluster, name)
        results[driver] = (raised, clean_pool.info(name), clone in clean_pool.names())
        clean_pool.remove(clone)
        clean_pool.remove(name)
    assert results["native"] == results["stock"]
    assert results["native"] == (
        (exceptions.InUseByStore, exceptions.InUseByStore().msg),
        {"size": MiB, "snaps": {SNAP: True}},
        True,
    )


def test_an_image_with_other_snapshots(cluster, clean_pool):
    """glance's snapshot goes; then 4.3 on move the image to the trash with the others, where
    it stays, and 4.1 raises HasSnapshot."""
    results = {}
    for driver in DRIVERS:
        name = clean_pool.store(new_name(f"snaps-{driver}"), data_of(MiB, seed=3))
        with rbd.Image(clean_pool.ioctx, name) as image:
            image.create_snap("backup")
        raised = delete_with(driver, cluster, name)
        entry = trash(clean_pool).get(name)
        kept = clean_pool.info(name) if name in clean_pool.names() else None
        results[driver] = (raised and raised[0], kept, entry is not None)
        if entry is not None:
            rbd.RBD().trash_restore(clean_pool.ioctx, entry["id"], name)
        clean_pool.remove(name)
    assert results["native"] == results["stock"]
    if stock_versions.TRASHES_IMAGES_WITH_SNAPSHOTS:
        assert results["native"] == (None, None, True)
    else:
        assert results["native"] == (
            exceptions.HasSnapshot,
            {"size": MiB, "snaps": {"backup": False}},
            False,
        )


def test_a_missing_image(cluster, clean_pool):
    name = new_name("missing")
    raised = {driver: delete_with(driver, cluster, name) for driver in DRIVERS}
    assert raised["native"] == raised["stock"]
    assert raised["native"] == (exceptions.NotFound, f"RBD image {name} does not exist")


def test_a_missing_pool_is_named(cluster, clean_pool):
    """Stock lets librados' ObjectNotFound escape; native raises BackendException naming the
    pool, as its add and get do."""
    name = new_name("nopool")
    stock = delete_with("stock", cluster, name, pool="no-such-pool")
    assert stock[0].__name__ == "ObjectNotFound"
    native = delete_with("native", cluster, name, pool="no-such-pool")
    assert native[0] is exceptions.BackendException
    assert "pool 'no-such-pool'" in native[1]


def test_a_connection_key_it_does_not_know_is_refused_before_connecting(cluster):
    """A misspelt key of `connect` would otherwise drop a setting and connect without it."""
    connect = {"conffile": str(cluster.conf_path), "conf_file": "/etc/ceph/other.conf"}
    with pytest.raises(TypeError, match="connect has no key 'conf_file'"):
        _delete_image(cluster.pool, new_name("never"), connect=connect)


def test_an_image_a_client_has_open(cluster, clean_pool):
    """A client that has the image open (a reader before glance_store 5.4, nova's, an rbd
    map): glance's snapshot goes, the image stays, InUseByStore; deleted once it closes."""
    results = {}
    for driver in DRIVERS:
        name = clean_pool.store(new_name(f"open-{driver}"), data_of(MiB, seed=4))
        with rbd.Image(clean_pool.ioctx, name, snapshot=SNAP):
            raised = delete_with(driver, cluster, name)
            results[driver] = (raised, clean_pool.info(name))
        assert delete_with(driver, cluster, name) is None
        assert name not in clean_pool.names()
        assert wait_for(lambda name=name: purged(clean_pool, name), timeout=60), driver
    assert results["native"] == results["stock"]
    assert results["native"] == (
        (exceptions.InUseByStore, exceptions.InUseByStore().msg),
        {"size": MiB, "snaps": {}},
    )


class HeldSource(io.RawIOBase):
    """`size` bytes, whose reads stop after `first` until released."""

    def __init__(self, size, first):
        self._data = io.BytesIO(data_of(size, seed=5))
        self._first = first
        self.reached = threading.Event()
        self.release = threading.Event()

    def readable(self):
        return True

    def read(self, size=-1):
        if self._data.tell() >= self._first and not self.release.is_set():
            self.reached.set()
            assert self.release.wait(60)
        return self._data.read(size)


def test_an_image_being_uploaded(cluster, clean_pool):
    """glance deletes an image whose upload runs (a user deletes a queued image): InUseByStore,
    the upload goes on and is stored whole; the delete succeeds after."""
    results = {}
    for driver in DRIVERS:
        use(driver)
        store = make_store(cluster, chunk_mib=1)
        name = new_name(f"uploading-{driver}")
        source = HeldSource(4 * MiB, first=2 * MiB)
        stored = []
        upload = threading.Thread(
            target=lambda store=store, name=name, source=source, stored=stored: stored.append(
                store.add(name, source, 4 * MiB, "sha512")
            )
        )
        upload.start()
        assert source.reached.wait(30)
        raised = delete_with(driver, cluster, name)
        source.release.set()
        upload.join(60)
        results[driver] = (raised, stored[0][1] if stored else None)
        assert clean_pool.read(name) == data_of(4 * MiB, seed=5)
        assert delete_with(driver, cluster, name) is None
        assert wait_for(lambda name=name: purged(clean_pool, name), timeout=60), driver
    assert results["native"] == results["stock"]
    assert results["native"] == ((exceptions.InUseByStore, exceptions.InUseByStore().msg), 4 * MiB)
