"""Who removes the data of a native delete, on a cluster with a Ceph manager: the manager's task
queue (`rbd task add trash remove`) for a user whose caps allow it, as glance's documented user's
do (`mgr 'profile rbd pool=...'`); the process itself for one whose caps do not. On the session's
cluster, which has no manager, the process does (tests/test_delete.py). The cluster here is a
throwaway of its own with a manager, as the release matrix's: this file runs in that lane."""

import contextlib
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import pytest
import rbd

from glance_rbd_native._native import _delete_image, _flush_logs
from tests.harness import trash
from tests.harness.cluster import Cluster
from tests.harness.command import CHECKOUT
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
        trash_id, purging = _delete_image(
            cluster.pool, name, SNAP, connect={"conffile": str(conf), "user": user}
        )
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
    caplog.set_level("DEBUG", logger="glance_rbd_native")
    conf = managed.user("nomgr", mon="profile rbd", osd=f"profile rbd pool={managed.pool}")

    def said(text):
        return [m for m in (r.getMessage() for r in caplog.records) if text in m]

    assert "is removed, by this process" in deleted_by(managed, "nomgr", conf, caplog)
    (refused,) = said("the Ceph manager refused")
    assert "client.nomgr" in refused and "mgr 'profile rbd" in refused
    (asked,) = said("asking the Ceph manager, as client.nomgr")
    # Not asked again for that user: the second delete's data goes without a question.
    assert "is removed, by this process" in deleted_by(managed, "nomgr", conf, caplog)
    assert said("asking the Ceph manager, as client.nomgr") == [asked]
    assert len(said("the Ceph manager refused")) == 1


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


# -- a purge that cannot stall: the process removes the data (a user without mgr caps) ----------


def warnings_naming(caplog, trash_id):
    _flush_logs()  # the purge thread's records wait for a native call
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelname == "WARNING" and f"trash id {trash_id}" in r.getMessage()
    ]


def held_in_the_trash(images, user, conf, stack):
    """Deletes a stored image as `user` and holds it open as it reaches the trash
    (`trash.hold`): its trash id. Its purge removes glance's snapshot first, which waits for the
    monitors, so the open nearly always comes before the removal; when it does not, another
    image is tried."""

    def delete():
        name = images.store(new_name("held"), data_of(4 * MiB))
        # With operation timeouts (glance's rados_connect_timeout) the purge runs on the
        # delete's connection, the client its mark names: the one the fence test blocklists.
        trash_id, purging = _delete_image(
            images.pool,
            name,
            SNAP,
            connect={"conffile": str(conf), "user": user, "connect_timeout": 30},
        )
        assert purging
        return trash_id

    trash_id, held = trash.held_after(images.ioctx, delete)
    stack.enter_context(held)
    return trash_id


def test_entries_held_open_delay_no_other_and_go_once_let_go(managed, caplog):
    """Two deleted images another client holds open in the trash, then three others deleted:
    the three are removed while the two are held; each held one is a WARNING in the log within
    a minute of its delete; let go, they are removed within a minute, by the same process."""
    caplog.set_level("INFO", logger="glance_rbd_native")
    conf = managed.user("holding", mon="profile rbd", osd=f"profile rbd pool={managed.pool}")
    with contextlib.closing(Images(managed)) as images, contextlib.ExitStack() as holds:
        held = [held_in_the_trash(images, "holding", conf, holds) for _ in range(2)]
        started = time.monotonic()
        others = []
        for _ in range(3):
            name = images.store(new_name("other"), data_of(4 * MiB))
            others.append(
                _delete_image(
                    images.pool, name, SNAP, connect={"conffile": str(conf), "user": "holding"}
                )[0]
            )
        wait_for(
            lambda: not set(others) & (trash.ids(images.ioctx) | set(trash.marked(images.ioctx))),
            timeout=30,
            what="the three others' trash entries and marks gone while two are held",
        )
        print(f"\nthree others gone {time.monotonic() - started:.1f} s after their deletes")
        assert set(held) <= trash.ids(images.ioctx) and set(held) <= set(trash.marked(images.ioctx))
        for trash_id in held:
            said = wait_for(
                lambda trash_id=trash_id: warnings_naming(caplog, trash_id),
                timeout=60 - (time.monotonic() - started),
                what=f"a WARNING naming held trash entry {trash_id}",
            )
            assert "a client has it open" in said[0] and "sweep --remove" in said[0], said
        assert set(held) <= trash.ids(images.ioctx)
        holds.close()
        let_go = time.monotonic()
        wait_for(
            lambda: not set(held) & (trash.ids(images.ioctx) | set(trash.marked(images.ioctx))),
            timeout=60,
            what="the held entries and their marks gone once let go",
        )
        print(f"held entries gone {time.monotonic() - let_go:.1f} s after they were let go")
    _flush_logs()
    removed = [
        r.getMessage() for r in caplog.records if "is removed, by this process" in r.getMessage()
    ]
    assert all(any(f"trash id {t}" in m for m in removed) for t in held + others), removed


def test_a_fenced_purge_connects_again_and_finishes(managed, caplog):
    """The purging client fenced (blocklisted) while an entry is held open: a WARNING says so,
    and once the entry is let go, the purge removes it through a new connection."""
    caplog.set_level("INFO", logger="glance_rbd_native")
    conf = managed.user("fenced", mon="profile rbd", osd=f"profile rbd pool={managed.pool}")
    with contextlib.closing(Images(managed)) as images, contextlib.ExitStack() as holds:
        trash_id = held_in_the_trash(images, "fenced", conf, holds)
        addr = trash.marked(images.ioctx)[trash_id]["addr"]
        managed.ceph("osd", "blocklist", "add", addr)
        try:
            wait_for(
                lambda: [m for m in warnings_naming(caplog, trash_id) if "fenced" in m],
                timeout=60,
                what="a WARNING that the purging client was fenced",
            )
            holds.close()
            wait_for(
                lambda: trash_id not in trash.ids(images.ioctx) | set(trash.marked(images.ioctx)),
                timeout=60,
                what="the entry and its mark gone after the fence, once let go",
            )
        finally:
            managed.ceph("osd", "blocklist", "rm", addr)


class QuietDeleter:
    """`tests/harness/quiet_deleter.py` deleting image `name` as user "quiet": a process that
    makes no native call after its delete. Its output lines are collected as they come."""

    def __init__(self, cluster, conf, name):
        self.child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.harness.quiet_deleter",
                str(conf),
                "quiet",
                cluster.pool,
                name,
                SNAP,
                "90",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=CHECKOUT,
        )
        self.lines = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.child.stdout))
        self.reader.start()

    def trash_id(self):
        said = wait_for(
            lambda: [line for line in self.lines if line.startswith("deleted ")],
            timeout=60,
            what="the quiet process's delete",
            every=0.005,  # the entry is to be held before its purge removes it
        )
        return said[0].split()[1]

    def warnings(self):
        return [line for line in self.lines if line.startswith("WARNING")]

    def stop(self):
        self.child.kill()
        self.child.wait(timeout=30)
        self.reader.join(timeout=30)
        self.child.stdout.close()


def test_a_worker_that_makes_no_more_native_calls_logs_the_warning(managed):
    """The records of the purge threads wait for a Python thread: a process that makes no native
    call after its delete still writes the WARNING of an entry held open within a minute."""
    conf = managed.user("quiet", mon="profile rbd", osd=f"profile rbd pool={managed.pool}")
    with contextlib.closing(Images(managed)) as images, contextlib.ExitStack() as stack:
        latest = {}

        def delete():
            deleter = QuietDeleter(managed, conf, images.store(new_name("quiet"), data_of(4 * MiB)))
            stack.callback(deleter.stop)
            trash_id = deleter.trash_id()
            latest.update(deleter=deleter, deleted=time.monotonic())
            return trash_id

        trash_id, held = trash.held_after(images.ioctx, delete)
        deleter, deleted = latest["deleter"], latest["deleted"]
        with held:
            said = wait_for(
                deleter.warnings, timeout=60, what="the WARNING of the held entry in its log"
            )
            print(f"\nWARNING {time.monotonic() - deleted:.1f} s after the delete: {said[0]}")
            assert f"trash id {trash_id}" in said[0] and "a client has it open" in said[0]
        wait_for(
            lambda: trash_id not in trash.ids(images.ioctx),
            timeout=60,
            what="the entry gone once let go",
        )
