"""Who removes the data of a native delete, on a cluster with a Ceph manager: the manager's task
queue (`rbd task add trash remove`) for a user whose caps allow it, as glance's documented user's
do (`mgr 'profile rbd pool=...'`); the process itself for one whose caps do not. On the session's
cluster, which has no manager, the process does (tests/test_delete.py). The cluster here is a
throwaway of its own with a manager, as the release matrix's: this file runs in that lane."""

import contextlib
import pathlib
import shutil
import tempfile

import pytest
import rbd

from glance_rbd_native._native import _delete_image, _flush_logs
from tests.harness.cluster import Cluster
from tests.harness.data import MiB, data_of, new_name
from tests.harness.stores import SNAP, Images
from tests.harness.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.matrix]


@contextlib.contextmanager
def throwaway(with_mgr):
    root = pathlib.Path(tempfile.mkdtemp(prefix="grn-mgr-", dir="/tmp"))
    try:
        with Cluster(root, with_mgr=with_mgr) as cluster:
            yield cluster
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def managed():
    with throwaway(with_mgr=True) as cluster:
        yield cluster


def deleted_by(cluster, user, conf, caplog):
    """Deletes a stored image as `user`: who removed its data, as its record says."""
    with contextlib.closing(Images(cluster)) as images:
        name = images.store(new_name("purge"), data_of(4 * MiB))
        trash_id, purging = _delete_image(cluster.pool, name, SNAP, conffile=str(conf), user=user)
        assert purging and name not in images.names()
        ids = lambda: {e["id"] for e in rbd.RBD().trash_list(images.ioctx)}  # noqa: E731
        wait_for(lambda: trash_id not in ids(), timeout=120, what="the trash entry to go")

    def record():
        _flush_logs()  # the purge thread's records wait for a native call
        said = [r.getMessage() for r in caplog.records if f"trash id {trash_id}" in r.getMessage()]
        return said[0] if said else None

    return wait_for(record, timeout=30, what="the purge's record")


def test_the_manager_removes_it_for_glances_documented_user(managed, caplog):
    caplog.set_level("INFO", logger="glance_rbd_native")
    pool = f"profile rbd pool={managed.pool}"
    conf = managed.user("glance", mon="profile rbd", osd=pool, mgr=pool)
    assert "is removed, by the Ceph manager" in deleted_by(managed, "glance", conf, caplog)


def test_the_process_removes_it_for_a_user_the_manager_refuses(managed, caplog):
    caplog.set_level("INFO", logger="glance_rbd_native")
    conf = managed.user("nomgr", mon="profile rbd", osd=f"profile rbd pool={managed.pool}")
    assert "is removed, by this process" in deleted_by(managed, "nomgr", conf, caplog)
    refused = [
        r.getMessage() for r in caplog.records if "the Ceph manager refused" in r.getMessage()
    ]
    assert len(refused) == 1 and "client.nomgr" in refused[0] and "mgr 'profile rbd" in refused[0]
    # Not asked again for that user.
    deleted_by(managed, "nomgr", conf, caplog)
    assert sum("the Ceph manager refused" in r.getMessage() for r in caplog.records) == 1


def test_the_process_removes_it_when_no_manager_answers(caplog):
    """A cluster without a manager: a manager command would wait for one for ever. The delete
    returns at once all the same, and the process removes the data once the manager has not
    answered within MANAGER_WAIT (ETIMEDOUT)."""
    caplog.set_level("INFO", logger="glance_rbd_native")
    with throwaway(with_mgr=False) as cluster:
        said = deleted_by(cluster, "admin", cluster.conf_path, caplog)
    assert "is removed, by this process" in said
    said = [r.getMessage() for r in caplog.records]
    assert any("the Ceph manager did not take" in m and "(errno 110)" in m for m in said)
