"""The progress of long transfers in glance's log (glance_rbd_native.progress), with a 1 s
interval and a 2 s stall threshold: lines with growing bytes for slow uploads and downloads and
none for short ones; one warning per stall, naming what the transfer waits on (glance's image
data, the consumer of a download, the cluster), then a line when it moves again; all of it
from one Python thread per process (a forked child starts its own, eventlet makes it green),
which costs nothing while no transfer runs and never keeps the interpreter alive."""

import io
import json
import logging
import os
import pathlib
import re
import subprocess
import sys
import threading
import time
import traceback

import pytest
from glance_store import location
from glance_store._drivers import rbd as rbd_driver

import glance_rbd_native
from glance_rbd_native import progress, settings
from tests.harness.data import MiB, data_of, expected_result, new_name
from tests.harness.stores import SNAP, make_store
from tests.harness.waiting import exit_status, wait_for

pytestmark = [
    pytest.mark.cluster,
    # eventlet, imported by glance's dependencies in this interpreter, warns in its at-fork hook.
    pytest.mark.filterwarnings("ignore:Using fork\\(\\) is a bad idea:DeprecationWarning"),
]

CHECKOUT = pathlib.Path(__file__).resolve().parents[1]  # the children import tests.harness

INTERVAL = 1
THRESHOLD = 2
LOGGER = "glance_rbd_native.progress"
REPORTER = "glance-rbd-native-progress"
SOURCE = "glance's image data (the client's request body, or an import's source)"
CONSUMER = "the consumer of the download (the client has not taken the next chunk)"
LINE = re.compile(
    r"(?P<kind>upload|download) of (?P<pool>[^/]+)/(?P<image>[^:]+): "
    r"(?P<bytes>[\d.]+ \w+)(?: of (?P<size>[\d.]+ \w+))? in (?P<elapsed>\d+) s "
    r"\((?P<rate>[\d.]+ [\w/]+)\)$"
)
UNITS = {"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


@pytest.fixture(autouse=True)
def _short_reports(monkeypatch):
    """Read at each transfer (settings.apply); the defaults are back for the tests after."""
    monkeypatch.setenv(settings.PROGRESS_INTERVAL_ENV, str(INTERVAL))
    monkeypatch.setenv(settings.STALL_THRESHOLD_ENV, str(THRESHOLD))
    yield
    progress.configure(progress.DEFAULT_INTERVAL, progress.DEFAULT_STALL_THRESHOLD)
    glance_rbd_native.set_max_in_flight(glance_rbd_native.DEFAULT_MAX_IN_FLIGHT)


@pytest.fixture
def lines(caplog):
    """lines(image, level): the reporter's records about `image`, at `level` if given."""
    caplog.set_level(logging.INFO, logger=LOGGER)

    def about(image, level=None):
        return [
            r
            for r in caplog.records
            if r.name == LOGGER and f"/{image}: " in r.getMessage() and level in (None, r.levelno)
        ]

    return about


def size_of(text):
    number, unit = text.split()
    return float(number) * UNITS[unit]


def parsed(records):
    """The progress lines as (bytes, seconds), each checked against the line's format."""
    out = []
    for record in records:
        match = LINE.match(record.getMessage())
        assert match, record.getMessage()
        out.append((size_of(match["bytes"]), int(match["elapsed"])))
    return out


def from_the_reporter(records):
    """Every record was emitted by this process's reporter, a daemon Python thread."""
    thread = progress._reporter.thread
    assert thread.daemon and thread.is_alive() and thread in threading.enumerate()
    assert {(r.process, r.thread, r.threadName) for r in records} == {
        (os.getpid(), thread.ident, REPORTER)
    }


class Source:
    """glance's image data, read by the store in chunks: one every `delay` seconds, and
    `stall` seconds more before the one at `stall_at` bytes."""

    def __init__(self, data, delay, stall_at=None, stall=0.0):
        self._stream = io.BytesIO(data)
        self._delay, self._stall_at, self._stall = delay, stall_at, stall

    def read(self, size=-1):
        if self._stream.tell() == self._stall_at:
            time.sleep(self._stall)
        time.sleep(self._delay)
        return self._stream.read(size)


def stored(images, data):
    """An image holding `data` with glance's snapshot, written without the code under test."""
    name = new_name("progress")
    images.create(name, len(data))
    images.write(name, data)
    images.snapshot(name)
    return name


def locate(store, cluster, name):
    uri = f"rbd://{cluster.fsid}/{cluster.pool}/{name}/{SNAP}"
    return location.Location("rbd", rbd_driver.StoreLocation, store.conf, uri=uri)


def upload(cluster, images, source, data, name=None):
    name = name or new_name("progress")
    result = make_store(cluster, chunk_mib=1).add(name, source, len(data), "sha512")
    assert result[1:4] == expected_result(data)
    assert images.read(name) == data
    return name


def test_a_slow_upload_gets_lines_with_growing_bytes(cluster, clean_pool, lines):
    glance_rbd_native.patch()
    data = data_of(8 * MiB, seed=1)
    name = upload(cluster, clean_pool, Source(data, delay=0.4), data)
    info = lines(name, logging.INFO)
    progressed = parsed(info)
    assert len(progressed) >= 2, [r.getMessage() for r in info]
    assert all(LINE.match(r.getMessage())["size"] == "8.0 MiB" for r in info)
    assert all(LINE.match(r.getMessage())["kind"] == "upload" for r in info)
    assert [b for b, _ in progressed] == sorted({b for b, _ in progressed})
    assert [s for _, s in progressed] == sorted({s for _, s in progressed})
    assert not lines(name, logging.WARNING)
    from_the_reporter(lines(name))
    clean_pool.remove(name)


def test_a_slow_download_gets_lines_with_growing_bytes(cluster, clean_pool, lines, monkeypatch):
    """The interval from glance-api.conf this time, not the environment."""
    monkeypatch.delenv(settings.PROGRESS_INTERVAL_ENV)
    glance_rbd_native.patch()
    data = data_of(8 * MiB, seed=2)
    name = stored(clean_pool, data)
    store = make_store(cluster, chunk_mib=1)
    settings.register_opts(store.conf)
    store.conf.set_override("progress_interval", INTERVAL, group="glance_rbd_native")
    chunks, size = store.get(locate(store, cluster, name))
    read = []
    for chunk in chunks:
        read.append(chunk)
        time.sleep(0.4)
    assert b"".join(read) == data and size == len(data)
    info = lines(name, logging.INFO)
    progressed = parsed(info)
    assert len(progressed) >= 2, [r.getMessage() for r in info]
    assert all(LINE.match(r.getMessage())["kind"] == "download" for r in info)
    assert [b for b, _ in progressed] == sorted({b for b, _ in progressed})
    assert not lines(name, logging.WARNING)
    from_the_reporter(lines(name))
    clean_pool.remove(name)


def test_a_stalled_source_is_named_once_then_the_upload_completes(cluster, clean_pool, lines):
    glance_rbd_native.patch()
    data = data_of(8 * MiB, seed=3)
    # Stalled for 2.5 thresholds, so the reporter sees it stalled at several rounds; slow
    # enough after it to be seen moving again.
    source = Source(data, delay=0.3, stall_at=2 * MiB, stall=5)
    name = upload(cluster, clean_pool, source, data)
    [warning] = lines(name, logging.WARNING)
    stalled = re.fullmatch(
        rf"upload of {cluster.pool}/{name}: no progress for (\d+) s at "
        rf"2\.0 MiB, waiting for {re.escape(SOURCE)}",
        warning.getMessage(),
    )
    assert stalled and THRESHOLD <= int(stalled[1]) < 5, warning.getMessage()
    [moving] = [r for r in lines(name, logging.INFO) if "moving again" in r.getMessage()]
    assert moving.created > warning.created
    moved = re.fullmatch(
        rf"upload of {cluster.pool}/{name}: moving again after (\d+) s without "
        r"progress, at [\d.]+ MiB",
        moving.getMessage(),
    )
    assert moved and 5 <= int(moved[1]) <= 7, moving.getMessage()
    from_the_reporter(lines(name))
    clean_pool.remove(name)


def test_a_download_whose_consumer_stops_is_named(cluster, clean_pool, lines):
    glance_rbd_native.patch()
    data = data_of(6 * MiB, seed=4)
    name = stored(clean_pool, data)
    store = make_store(cluster, chunk_mib=1)
    chunks, _ = store.get(locate(store, cluster, name))
    stream = iter(chunks)
    read = [next(stream)]
    time.sleep(THRESHOLD + 2.5)  # the client stops reading, then goes on slowly
    for chunk in stream:
        read.append(chunk)
        time.sleep(0.4)
    assert b"".join(read) == data
    [warning] = lines(name, logging.WARNING)
    assert re.fullmatch(
        rf"download of {cluster.pool}/{name}: no progress for \d+ s at 1\.0 MiB, "
        rf"waiting for {re.escape(CONSUMER)}",
        warning.getMessage(),
    ), warning.getMessage()
    assert any("moving again" in r.getMessage() for r in lines(name, logging.INFO))
    clean_pool.remove(name)


@pytest.fixture
def osd_back(cluster):
    """The OSD runs again after the test, however it ended."""
    yield
    cluster.start_osd()


class StopsOsdAt(Source):
    """Stops the OSD once `at` bytes have been read, and goes on: the cluster goes away
    mid-upload. Stopped from another thread, so the source itself never waits for it."""

    def __init__(self, cluster, data, at):
        super().__init__(data, delay=0.3)
        self._at = at
        self.stopping = threading.Thread(target=cluster.stop_osd)

    def read(self, size=-1):
        if self._stream.tell() >= self._at and self.stopping.ident is None:
            self.stopping.start()
        return super().read(size)


def test_a_stalled_cluster_is_named(cluster, clean_pool, lines, osd_back, monkeypatch):
    """No librados timeout: the writes in flight wait for the OSD, and the upload with them,
    until it is back; then it completes."""
    monkeypatch.setenv("GLANCE_RBD_NATIVE_MAX_IN_FLIGHT_MIB", "2")  # room runs out at once
    glance_rbd_native.patch()
    data = data_of(24 * MiB, seed=5)
    name = new_name("progress-osd")
    source = StopsOsdAt(cluster, data, at=2 * MiB)
    outcome = {}

    def run():
        try:
            upload(cluster, clean_pool, source, data, name)
            outcome["done"] = True
        except BaseException as exc:  # reported below
            outcome["error"] = exc

    uploading = threading.Thread(target=run)
    uploading.start()
    try:
        assert wait_for(lambda: lines(name, logging.WARNING), timeout=60, every=0.2), (
            "no warning while the OSD was down"
        )
        assert uploading.is_alive()
    finally:
        if source.stopping.ident is not None:
            source.stopping.join(timeout=60)
        cluster.start_osd()
        uploading.join(timeout=180)
    assert outcome == {"done": True}, outcome
    [warning] = lines(name, logging.WARNING)
    assert re.fullmatch(
        rf"upload of {cluster.pool}/{name}: no progress for \d+ s at [\d.]+ MiB, "
        r"waiting for the cluster \(librbd writes in flight\)",
        warning.getMessage(),
    ), warning.getMessage()
    assert any("moving again" in r.getMessage() for r in lines(name, logging.INFO))
    clean_pool.remove(name)


def test_only_transfers_longer_than_the_interval_get_lines(cluster, clean_pool, lines, monkeypatch):
    # 2 s: well above what a quick transfer takes on a loaded machine.
    monkeypatch.setenv(settings.PROGRESS_INTERVAL_ENV, "2")
    glance_rbd_native.patch()
    data = data_of(16 * MiB, seed=6)
    slow = new_name("progress-slow")
    uploading = threading.Thread(
        target=upload, args=(cluster, clean_pool, Source(data, delay=0.4), data, slow)
    )
    uploading.start()
    quick = []
    small = data_of(MiB, seed=7)
    store = make_store(cluster, chunk_mib=1)
    while uploading.is_alive():
        name = upload(cluster, clean_pool, io.BytesIO(small), small)
        chunks, _ = store.get(locate(store, cluster, name))
        assert b"".join(chunks) == small
        quick.append(name)
        time.sleep(0.3)
    uploading.join()
    # The reporter ran while the quick ones did, and said nothing of them.
    assert len(parsed(lines(slow, logging.INFO))) >= 2
    assert len(quick) >= 3
    for name in quick:
        assert not lines(name)
        clean_pool.remove(name)
    clean_pool.remove(slow)


def test_the_reporter_costs_nothing_while_no_transfer_runs(cluster, clean_pool, lines, monkeypatch):
    glance_rbd_native.patch()
    data = data_of(MiB, seed=8)
    clean_pool.remove(upload(cluster, clean_pool, io.BytesIO(data), data))
    reporter = progress._reporter
    assert reporter.pid == os.getpid() and reporter.thread.is_alive()
    reads = []
    real = progress.transfers

    def counted():
        reads.append(time.monotonic())
        return real()

    monkeypatch.setattr(progress, "transfers", counted)
    time.sleep(progress.TICK + 0.5)  # its last round after the upload is over
    del reads[:]
    time.sleep(3)
    assert reads == [], "the reporter polls while no transfer runs"
    assert reporter.thread.is_alive()
    # ... and the next transfer wakes it at once.
    clean_pool.remove(upload(cluster, clean_pool, Source(data, delay=0.5), data))
    assert reads and progress._reporter is reporter


def test_the_reporter_never_keeps_a_process_alive(cluster, clean_pool):
    name = new_name("progress-exit")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GLANCE_RBD_NATIVE")}
    started = time.monotonic()
    try:
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.harness.slow_upload",
                str(cluster.conf_path),
                cluster.pool,
                name,
            ],
            cwd=CHECKOUT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        if name in clean_pool.names():
            clean_pool.remove(name)
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout.splitlines()
    assert "uploaded" in out
    assert any(line.startswith(f"{LOGGER} upload of {cluster.pool}/{name}: ") for line in out)
    assert time.monotonic() - started < 60


def test_a_forked_child_reports_with_a_reporter_of_its_own(cluster, clean_pool):
    glance_rbd_native.patch()
    data = data_of(6 * MiB, seed=10)
    clean_pool.remove(upload(cluster, clean_pool, io.BytesIO(data), data))
    parent = progress._reporter
    assert parent.pid == os.getpid()
    time.sleep(progress.TICK + 0.5)  # waiting for the next transfer, holding nothing
    name = new_name("progress-child")
    pid = os.fork()
    if pid == 0:  # the child: a slow upload, its lines collected; the verdict in the exit code
        code = 1
        try:
            records = []
            handler = logging.Handler()
            handler.emit = records.append
            logging.getLogger(LOGGER).addHandler(handler)
            logging.getLogger(LOGGER).setLevel(logging.INFO)
            store = make_store(cluster, chunk_mib=1)
            # Read back by the parent: the pool's rados handle is the parent's.
            result = store.add(name, Source(data, delay=0.5), len(data), "sha512")
            assert result[1:4] == expected_result(data)
            own = progress._reporter
            mine = [r for r in records if f"/{name}: " in r.getMessage()]
            assert own is not parent and own.pid == os.getpid(), "the parent's reporter"
            assert len(mine) >= 2, [r.getMessage() for r in records]
            assert {(r.process, r.thread) for r in mine} == {(os.getpid(), own.thread.ident)}
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    status = exit_status(pid, 90)
    try:
        assert status == 0, status
        assert clean_pool.read(name) == data
    finally:
        if name in clean_pool.names():
            clean_pool.remove(name)
    assert progress._reporter is parent and parent.thread.is_alive()


def test_under_eventlet_the_reporter_is_a_green_thread(cluster, clean_pool):
    name = new_name("progress-green")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GLANCE_RBD_NATIVE")}
    try:
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.harness.green_progress",
                str(cluster.conf_path),
                cluster.pool,
                name,
            ],
            cwd=CHECKOUT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        result = json.loads(run.stdout.splitlines()[-1])
        assert result["patched"] and result["written"] == 6 * MiB
        assert clean_pool.read(name) == data_of(6 * MiB, seed=11)
    finally:
        if name in clean_pool.names():
            clean_pool.remove(name)
    mine = [r for r in result["records"] if f"/{name}: " in r["message"]]
    # Emitted on the hub's own thread, by the reporter: a green thread.
    assert mine and all(r["hub"] and r["thread"] == REPORTER for r in mine), mine
    assert len([r for r in mine if LINE.match(r["message"])]) >= 2, mine
    [warning] = [r for r in mine if r["level"] == "WARNING"]
    assert warning["message"].endswith(f"waiting for {SOURCE}"), warning
    # The hub went on meanwhile (test_green.py's bound).
    assert result["late"] < 0.15, result["late"]
