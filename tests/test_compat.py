"""The differences between glance_store releases, as the installed release has them: native reads
the options and applies the timeouts exactly where the installed stock driver does."""

import io
import logging

import pytest
import rados

import glance_rbd_native
from glance_rbd_native import compat
from tests import stock_versions
from tests.harness.data import data_of, expected_result, new_name
from tests.harness.stores import make_store

LIBRADOS_TIMEOUTS = ("rados_osd_op_timeout", "rados_mon_op_timeout", "client_mount_timeout")


@pytest.mark.parametrize(
    "version,supported",
    [
        ("4.0.0", False),
        ("4.1.0", True),
        ("4.1.1", True),
        ("4.3.3", True),
        ("4.10.0", True),
        ("5.0.0.0rc1", True),
        ("5.7.0", True),
        ("5.99.3", True),
        ("6.0.0", False),
        ("3.0.0", False),
        (None, False),
        ("unknown", False),
    ],
)
def test_supported_range(version, supported):
    assert compat.is_supported(version) is supported


@pytest.mark.parametrize("version", ["4.0.0", "6.0.0", None])
def test_unsupported_release_keeps_the_stock_driver(monkeypatch, caplog, version):
    monkeypatch.setattr(compat, "glance_store_version", lambda: version)
    with caplog.at_level(logging.WARNING):
        assert not glance_rbd_native.patch()
    assert not glance_rbd_native.is_patched()
    assert f"found {version}: keeping the stock rbd driver" in caplog.text
    assert glance_rbd_native.patch(force=True)


def test_installed_release_is_supported():
    assert compat.glance_store_version() == stock_versions.VERSION_TEXT
    assert glance_rbd_native.patch()


def test_detection_agrees_with_the_release_notes():
    assert compat.stock_sets_librados_timeouts() is stock_versions.SETS_LIBRADOS_TIMEOUTS


def test_the_delete_is_the_installed_releases():
    """Read off the installed stock delete's source, against the release notes' boundary."""
    assert compat.delete_rules() == compat.DeleteRules(
        refuse_clones_first=not stock_versions.TRASHES_IMAGES_WITH_SNAPSHOTS,
        trash_with_snapshots=stock_versions.TRASHES_IMAGES_WITH_SNAPSHOTS,
    )


@pytest.mark.cluster
@pytest.mark.parametrize("backend", [None, "ceph1"], ids=["single", "multi"])
def test_options_are_the_ones_stock_configured(cluster, backend):
    store = make_store(cluster, chunk_mib=2, thin=True, backend=backend, user="admin")
    options = compat.store_options(store)
    assert options.rbd_store_pool == store.pool
    assert options.rbd_store_user == store.user
    assert options.rbd_store_ceph_conf == store.conf_file
    assert options.rbd_store_chunk_size << 20 == store.WRITE_CHUNKSIZE
    assert options.rbd_thin_provisioning is store.thin_provisioning is True


@pytest.mark.cluster
@pytest.mark.skipif(
    not stock_versions.HAS_STORE_CONF, reason="[backend_defaults] arrived in glance_store 5.0"
)
def test_multi_store_options_from_backend_defaults(cluster, clean_pool):
    """From 5.0, options left out of a backend's group come from [backend_defaults]; the group
    itself then answers None."""
    store = make_store(
        cluster,
        chunk_mib=1,
        backend="ceph1",
        timeout=30,
        defaults=("rbd_store_user", "rados_connect_timeout"),
    )
    assert store.conf.ceph1.rbd_store_user is None
    assert compat.store_options(store).rbd_store_user == cluster.store_user
    assert compat.connect_timeout(store) == 30

    glance_rbd_native.patch()
    data = data_of(1000)
    name = new_name()
    assert store.add(name, io.BytesIO(data), len(data), "sha512")[1:4] == expected_result(data)
    clean_pool.remove(name)


def librados_defaults(cluster):
    client = rados.Rados(conffile=str(cluster.conf_path), rados_id="admin")
    try:
        return {key: client.conf_get(key) for key in LIBRADOS_TIMEOUTS}
    finally:
        client.shutdown()


@pytest.mark.cluster
@pytest.mark.parametrize("timeout", [-1, 0, 7])
def test_timeouts_are_the_ones_stock_sets(cluster, timeout):
    """Stock's own connection, read back from librados, against what native will apply."""
    store = make_store(cluster, timeout=timeout)
    with store.get_connection(conffile=store.conf_file, rados_id=store.user) as conn:
        stock = {key: conn.conf_get(key) for key in LIBRADOS_TIMEOUTS}
    native = compat.connect_timeout(store)
    if native is None:
        assert stock == librados_defaults(cluster)
    else:
        assert stock == dict.fromkeys(LIBRADOS_TIMEOUTS, str(native))
    if stock_versions.SETS_LIBRADOS_TIMEOUTS and timeout >= 0:
        assert native == timeout
    else:
        assert native is None
