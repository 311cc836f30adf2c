"""Faults and load on the real cluster: a stopped OSD (uploading and downloading), interrupts,
many uploads at once."""

import errno
import io
import json
import logging
import os
import re
import signal
import threading
import time

import pytest
import rbd as rbd_module
from glance_store import location
from glance_store._drivers import rbd

import glance_rbd_native
from glance_rbd_native import RbdWriter, leftovers
from tests.harness import trash
from tests.harness.cluster import free_port
from tests.harness.data import MiB, data_of, expected_result, new_name
from tests.harness.stores import SNAP, locate, make_store
from tests.harness.waiting import wait_for

pytestmark = pytest.mark.cluster


@pytest.fixture
def osd_stopped(cluster):
    """Stops the OSD for the test body; it is always back afterwards."""

    def stop():
        cluster.stop_osd()

    yield stop
    cluster.start_osd()


def removed_for_good(pool, name):
    """Whether the janitor is done with partial image `name`: no image, no trash entry, no
    mark. Its removal moves the image to the trash, and restores it under its name when a
    client still watches it (a watch a close while the OSD was down could not end lapses after
    30 s): the name alone is gone for a moment at each try."""
    return (
        name not in pool.names()
        and name not in trash.names(pool.ioctx)
        and name not in leftovers.marks(pool.ioctx)
    )


def interrupt_main_thread_after(seconds):
    timer = threading.Timer(seconds, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    return timer


@pytest.fixture
def ctrl_c():
    """Python's own SIGINT handler, whatever this process inherited: a shell's background job
    starts with SIGINT ignored, and Python then installs no handler."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_interrupts_a_stuck_write_and_abort_cleans_up(
    cluster, clean_pool, osd_stopped, ctrl_c
):
    name = new_name()
    writer = RbdWriter(
        cluster.pool,
        name,
        conffile=str(cluster.conf_path),
        user="admin",
        order=20,
        max_in_flight=MiB,
    )
    writer.write(data_of(MiB))
    osd_stopped()
    interrupt_main_thread_after(0.5)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        for _ in range(8):  # the second write waits for room that never comes
            writer.write(data_of(MiB))
    assert time.monotonic() - started < 0.5 + 1.0
    with pytest.raises(ValueError, match="interrupted"):
        writer.write(b"more")
    cluster.start_osd()
    writer.abort()
    assert writer.closed
    assert name not in clean_pool.names()


def test_sixteen_concurrent_unknown_size_uploads_through_one_store(cluster, clean_pool):
    glance_rbd_native.patch()
    store = make_store(cluster, chunk_mib=1)
    payloads = {new_name(f"c{i}"): data_of(2 * MiB + i * 4097, seed=i) for i in range(16)}
    results, errors = {}, []

    def upload(name, data):
        try:
            results[name] = store.add(name, io.BytesIO(data), 0, "sha512")
        except Exception as exc:  # asserted below
            errors.append(exc)

    threads = [threading.Thread(target=upload, args=item) for item in payloads.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors
    for name, data in payloads.items():
        assert results[name][1:4] == expected_result(data)
        assert clean_pool.read(name) == data
        clean_pool.remove(name)


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def rss_kib():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


@pytest.mark.load
def test_back_to_back_uploads_keep_memory_fds_and_connections_flat(cluster, clean_pool):
    glance_rbd_native.patch()
    data = data_of(256 * 1024)

    # One Store: building a ConfigOpts per upload would measure oslo.config, not this code.
    store = make_store(cluster, chunk_mib=1)

    def one_upload():
        name = new_name("loop")
        store.add(name, io.BytesIO(data), len(data), "sha512")
        clean_pool.remove(name)

    for _ in range(20):  # warm up: connection, allocator pools
        one_upload()
    fds, rss, connections = open_fds(), rss_kib(), glance_rbd_native.connection_count()
    for _ in range(300):
        one_upload()
    assert open_fds() <= fds + 2
    assert rss_kib() - rss < 16 * 1024, f"RSS grew by {(rss_kib() - rss) // 1024} MiB"
    assert glance_rbd_native.connection_count() == connections


class StopsOsdAfter:
    """A source that stops the OSD once `after` bytes have been read: the cluster goes away
    mid-upload."""

    def __init__(self, cluster, data, after):
        self._cluster, self._stream, self._after = cluster, io.BytesIO(data), after
        self.stopped = False

    def read(self, size=-1):
        if not self.stopped and self._stream.tell() >= self._after:
            self._cluster.stop_osd()
            self.stopped = time.monotonic()
        return self._stream.read(size)


def test_osd_stopped_mid_upload_errors_within_the_timeout_then_cleans_up(
    cluster, clean_pool, osd_stopped, caplog
):
    caplog.set_level(logging.INFO, logger="glance_rbd_native")
    glance_rbd_native.patch()
    name = new_name("osd-down")
    timeout = 5
    store = make_store(cluster, chunk_mib=1, timeout=timeout)
    source = StopsOsdAfter(cluster, data_of(16 * MiB), after=4 * MiB)
    with pytest.raises(glance_rbd_native.TimedOut) as raised:
        store.add(name, source, 0, "sha512")
    assert source.stopped
    elapsed = time.monotonic() - source.stopped
    assert raised.value.errno == errno.ETIMEDOUT
    # The writes in flight time out together (the first one waits for the OSD to be marked
    # down); closing and removal are left to the background: a bound, not a hang.
    assert elapsed < 3 * timeout, f"{elapsed:.1f}s"
    cluster.start_osd()
    assert wait_for(lambda: removed_for_good(clean_pool, name), timeout=90), (
        "the partial image was not removed once the OSD was back"
    )
    # The janitor thread never calls into Python: its record waits in the queue, and the
    # process's log thread (log_pump, started by the upload) emits it within seconds, with no
    # native call made meanwhile. It logs once it has also cleared its mark.
    removed = f"removed partial image '{name}' in pool '{cluster.pool}' after an earlier failure"
    records = wait_for(
        lambda: [r for r in caplog.records if r.getMessage() == removed],
        timeout=30,
        what="the janitor's record, emitted by the log thread",
    )
    assert len(records) == 1
    assert records[0].threadName == "glance-rbd-native-log"


def test_a_leftover_closed_while_the_osd_stays_down_is_removed_once_it_is_back(
    cluster, clean_pool, osd_stopped, caplog
):
    """The janitor closes the partial image at once. With the OSD down for longer than the
    operation timeout, the close cannot release the image's exclusive lock, which stays with
    this process's client; librbd then takes that lock's owner for alive (a watch of its address
    is there: the remover's own) and refuses the removal for as long as the client lives. The
    janitor breaks that lock of its own, and the image goes once the OSD is back. Its tries
    failing for 30 s are a WARNING in the log within 60 s of the failed upload."""
    caplog.set_level(logging.INFO, logger="glance_rbd_native")
    glance_rbd_native.patch()
    name = new_name("osd-down-long")
    store = make_store(cluster, chunk_mib=1, timeout=5)
    source = StopsOsdAfter(cluster, data_of(16 * MiB), after=4 * MiB)
    with pytest.raises(glance_rbd_native.TimedOut):
        store.add(name, source, 0, "sha512")
    failed = time.monotonic()

    def warned():
        return [
            r
            for r in caplog.records
            if r.levelno == logging.WARNING and "is not removed yet" in r.getMessage()
        ]

    # Meanwhile the janitor's close gives up on the OSD.
    assert wait_for(warned, timeout=60), "no WARNING of the janitor within 60 s"
    (record,) = warned()
    assert name in record.getMessage() and "after its upload failed" in record.getMessage()
    assert time.monotonic() - failed >= 30
    cluster.start_osd()
    assert wait_for(lambda: removed_for_good(clean_pool, name), timeout=90), (
        "the partial image was not removed once the OSD was back"
    )


def test_ctrl_c_interrupts_a_start_a_delete_and_an_open_that_wait_on_an_osd_away(
    cluster, clean_pool, osd_stopped, ctrl_c
):
    """Where glance sets no rados_connect_timeout (its default), an upload's start, a delete or a
    download's open whose OSD does not answer waits as long as librados does, as stock's do;
    but, as an upload's writes, they end at an interrupt (a worker's shutdown), with the
    signal's exception. Once the OSD is back, what they were at goes on in the background: the
    upload's image, made after all, is removed; the delete is done."""
    glance_rbd_native.patch()
    read = clean_pool.store(new_name("open-osd-away"), data_of(MiB))
    deleted = clean_pool.store(new_name("delete-osd-away"), data_of(MiB))
    added = new_name("start-osd-away")
    store = make_store(cluster)
    store.get(locate(store, cluster, read))  # connected before the OSD goes
    osd_stopped()
    for call in (
        lambda: store.add(added, io.BytesIO(data_of(MiB)), MiB, "sha512"),
        lambda: store.get(locate(store, cluster, read)),
        lambda: store.delete(locate(store, cluster, deleted)),
    ):
        interrupt_main_thread_after(1.0)
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            call()
        assert time.monotonic() - started < 1.0 + 1.0
    cluster.start_osd()
    chunks, size = store.get(locate(store, cluster, read))
    assert size == MiB and b"".join(chunks) == data_of(MiB)

    def done():
        return {deleted, added}.isdisjoint(
            [*clean_pool.names(), *leftovers.marks(clean_pool.ioctx)]
        )

    assert wait_for(done, timeout=60), "the delete not done, or the start's image or mark left"
    store.delete(locate(store, cluster, read))


def test_a_delete_while_the_osd_is_down_fails_within_the_timeout_and_changes_nothing(
    cluster, clean_pool, osd_stopped
):
    """A delete whose OSD is away raises stock's exception for no answer (``rbd.Timeout``, as
    stock's delete lets it escape) within rados_connect_timeout, and leaves the image whole,
    its snapshot still protected: the next delete, once the OSD is back, goes through."""
    glance_rbd_native.patch()
    timeout = 5
    name = clean_pool.store(new_name("delete-osd-down"), data_of(4 * MiB))
    store = make_store(cluster, timeout=timeout)
    osd_stopped()
    started = time.monotonic()
    with pytest.raises(rbd_module.Timeout) as raised:
        store.delete(locate(store, cluster, name))
    took = time.monotonic() - started
    assert f"image '{name}' in pool '{cluster.pool}'" in str(raised.value)
    assert took < 3 * timeout, f"{took:.1f}s"
    cluster.start_osd()
    assert clean_pool.info(name)["snaps"] == {SNAP: True}
    store.delete(locate(store, cluster, name))
    assert name not in clean_pool.names()


def test_a_purge_the_osd_leaves_unanswered_times_out_says_so_and_ends_once_it_is_back(
    cluster, clean_pool, osd_stopped, caplog
):
    """Without rados_connect_timeout (glance's default) the delete's connection waits for an
    absent OSD for ever; the purge tries on one whose operations time out (30 s), so that a try
    the OSD leaves unanswered fails, is a WARNING within a minute, and leaves the threads to the
    next tries. The entry, held open until the OSD stops so that its first tries wait, goes once
    the OSD is back and the hold ends. The user has no mgr cap, so that the process removes the
    data itself: a manager that took the removal would retry it on a schedule of its own."""
    caplog.set_level(logging.INFO, logger="glance_rbd_native")
    glance_rbd_native.patch()
    pool = f"profile rbd pool={cluster.pool}"
    conf = cluster.user("purging", mon="profile rbd", osd=pool)
    store = make_store(cluster, user="purging", conf_file=conf)  # rados_connect_timeout unset

    def delete():
        name = clean_pool.store(new_name("purge-osd-down"), data_of(MiB))
        store.delete(locate(store, cluster, name))
        return trash.names(clean_pool.ioctx)[name]

    trash_id, held = trash.held_after(clean_pool.ioctx, delete)
    osd_stopped()
    stopped = time.monotonic()

    def warned():
        return [
            r.getMessage()
            for r in caplog.records
            if r.levelno == logging.WARNING and f"trash id {trash_id}" in r.getMessage()
        ]

    said = wait_for(warned, timeout=60, what="the WARNING of a purge try the OSD left unanswered")
    print(f"\nWARNING {time.monotonic() - stopped:.1f} s after the OSD stopped: {said[0]}")
    assert "is not removed yet" in said[0] and "errno 110" in said[0], said
    cluster.start_osd()
    held.close()
    wait_for(
        lambda: (
            trash_id not in trash.ids(clean_pool.ioctx)
            and trash_id not in trash.marked(clean_pool.ioctx)
        ),
        timeout=90,
        what="the entry and its mark gone once the OSD is back and the hold ended",
    )


# About 45 s, most of it the OSD's watch timeout lapsing before the image can be removed.
@pytest.mark.load
def test_osd_stopped_mid_read_errors_within_the_timeout(
    cluster, clean_pool, osd_stopped, monkeypatch
):
    """A download whose OSD goes away: the reads in flight and the next ones time out within
    rados_connect_timeout, the consumer gets a clear error, and the reader lets go of the
    image (it is removable once the OSD is back)."""
    monkeypatch.setenv("GLANCE_RBD_NATIVE_MAX_IN_FLIGHT_MIB", "4")  # most reads still to make
    glance_rbd_native.patch()
    timeout = 5
    data = data_of(32 * MiB)
    name = new_name("osd-down-read")
    clean_pool.create(name, len(data))
    clean_pool.write(name, data)
    clean_pool.snapshot(name)
    store = make_store(cluster, chunk_mib=1, timeout=timeout)
    uri = f"rbd://{cluster.fsid}/{cluster.pool}/{name}/{SNAP}"
    chunks, _ = store.get(location.Location("rbd", rbd.StoreLocation, store.conf, uri=uri))
    stream = iter(chunks)
    assert next(stream) == data[:MiB]
    osd_stopped()
    stopped = time.monotonic()
    with pytest.raises(glance_rbd_native.TimedOut) as raised:
        for _ in stream:
            pass
    elapsed = time.monotonic() - stopped
    assert raised.value.errno == errno.ETIMEDOUT
    assert f"image '{name}' in pool '{cluster.pool}'" in str(raised.value)
    assert elapsed < 3 * timeout, f"{elapsed:.1f}s"
    cluster.start_osd()

    def removed():
        try:
            clean_pool.remove(name)
        except rbd_module.ImageBusy:
            return False
        return True

    # The reader closed the image while the OSD was down, so its watch could not be taken
    # back: it lapses on the OSD's watch timeout (30 s), and then the image can go.
    assert wait_for(removed, timeout=90)


@pytest.fixture
def full_osd(cluster):
    """Marks the OSD full by lowering the full ratios below its usage; restores them after."""

    def set_ratios(nearfull, backfillfull, full):
        cluster.ceph("osd", "set-nearfull-ratio", str(nearfull))
        cluster.ceph("osd", "set-backfillfull-ratio", str(backfillfull))
        cluster.ceph("osd", "set-full-ratio", str(full))

    def is_full():
        osds = json.loads(cluster.ceph("osd", "dump", "--format", "json"))["osds"]
        return "full" in osds[0]["state"]

    def fill():
        set_ratios(0.00001, 0.00002, 0.00003)
        assert wait_for(is_full, timeout=60), "the OSD was not marked full"

    yield fill
    set_ratios(0.85, 0.90, 0.95)
    assert wait_for(lambda: not is_full(), timeout=60)


@pytest.mark.parametrize("timeout", [10, -1], ids=["timeout", "no-timeout"])
def test_full_osd_is_storage_full_at_once(cluster, clean_pool, full_osd, timeout):
    """librbd blocks on a full cluster; the native writer sets full-try, so writes fail with
    ENOSPC and the partial image can still be removed, with or without a timeout."""
    from glance_store import exceptions

    glance_rbd_native.patch()
    full_osd()
    name = new_name("full")
    store = make_store(cluster, chunk_mib=1, timeout=timeout)
    started = time.monotonic()
    with pytest.raises(exceptions.StorageFull):
        store.add(name, io.BytesIO(data_of(4 * MiB)), 0, "sha512")
    assert time.monotonic() - started < 10
    assert name not in clean_pool.names()


def test_bad_keyring_is_a_clear_error_within_the_timeout(cluster, clean_pool, tmp_path):
    from glance_store import exceptions

    keyring = tmp_path / "bad.keyring"
    keyring.write_text("[client.admin]\n\tkey = AQBvaGVsbG8gd29ybGQhISEhISEhISEhISE=\n")
    conf = tmp_path / "ceph.conf"
    conf.write_text(
        cluster.conf_path.read_text().replace(
            f"keyring = {cluster.root}/ceph.client.admin.keyring", f"keyring = {keyring}"
        )
    )
    glance_rbd_native.patch()
    store = make_store(cluster, chunk_mib=1, timeout=5, conf_file=conf)
    started = time.monotonic()
    with pytest.raises(exceptions.BackendException, match="cannot connect"):
        store.add(new_name(), io.BytesIO(b"x"), 1, "sha512")
    assert time.monotonic() - started < 10


def test_a_dead_backend_fails_on_its_own_while_others_upload(cluster, clean_pool, tmp_path):
    """A backend whose monitor does not answer holds up its own uploads for librados' mount
    timeout, all of them together, and nobody else's: uploads to a live backend go on."""
    from glance_store import exceptions

    mount_timeout = 10
    dead_conf = tmp_path / "dead.conf"
    dead_conf.write_text(
        re.sub(
            r"mon host = .*",
            f"mon host = v2:127.0.0.1:{free_port()}\nclient mount timeout = {mount_timeout}",
            cluster.conf_path.read_text(),
        )
    )
    glance_rbd_native.patch()
    dead = make_store(cluster, chunk_mib=1, conf_file=dead_conf)
    live = make_store(cluster, chunk_mib=1, backend="ceph1")
    failures = []

    def upload_to_dead():
        started = time.monotonic()
        try:
            dead.add(new_name("dead"), io.BytesIO(b"x"), 1, "sha512")
        except exceptions.BackendException as exc:
            failures.append((exc, time.monotonic() - started))

    stuck = [threading.Thread(target=upload_to_dead) for _ in range(2)]
    for thread in stuck:
        thread.start()
    time.sleep(1)  # both are waiting on the dead monitor now
    data = data_of(4 * MiB)
    for _ in range(3):
        name = new_name("live")
        assert live.add(name, io.BytesIO(data), len(data), "sha512")[1:4] == expected_result(data)
        assert clean_pool.read(name) == data
        clean_pool.remove(name)
    assert all(thread.is_alive() for thread in stuck), (
        "the dead backend gave up before the live uploads were done: nothing was shown"
    )
    for thread in stuck:
        thread.join(timeout=3 * mount_timeout)
    assert not any(thread.is_alive() for thread in stuck)
    assert len(failures) == 2
    for exc, elapsed in failures:
        assert "cannot connect" in str(exc)
        # One connect, shared by both: neither waited for the other's timeout too.
        assert mount_timeout - 1 < elapsed < mount_timeout + 5, f"{elapsed:.1f}s"
