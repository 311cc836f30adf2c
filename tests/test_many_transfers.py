"""Many uploads and downloads at once in one process share one in-flight bound.

Each run is a child process of its own (benchmarks/many.py: K threads, a Store each), stock
then native, so that its RSS is its own. Every byte is checked; native's peak stays within
stock's plus the bound, the process never holds more than the bound and one chunk per transfer
(two for a download: a read holds librbd's buffers too),
and what the transfers freed goes back to the system once the last one ends. In this process,
in_flight() counts the transfers running and the bytes they hold, and both go back to 0.
"""

import contextlib
import gc
import hashlib
import io
import json
import os
import pathlib
import subprocess
import sys
import threading

import pytest
from glance_store import location
from glance_store._drivers import rbd as rbd_driver

import glance_rbd_native
from benchmarks.many import create_image
from glance_rbd_native import DEFAULT_MAX_IN_FLIGHT, settings
from tests.harness.cluster import CephError
from tests.harness.data import MiB, data_of, new_name
from tests.harness.stores import SNAP, Images, make_store

pytestmark = pytest.mark.cluster

CHECKOUT = pathlib.Path(__file__).resolve().parents[1]
BOUND_MIB = DEFAULT_MAX_IN_FLIGHT // MiB
CHUNK_MIB = 8  # glance's rbd_store_chunk_size, the Stores' default
# The runs' images, and the ones they read, live in a pool of their own: the children remove
# what they make, and the pool must then hold the sources alone.
POOL = "many-transfers"
# MiB each transfer moves, by K. K=4 x 64 MiB is where the bound bites: eight chunks each, four
# transfers, 64 MiB between them. With more at once each moves less, to keep the file short.
SIZE_MIB = {1: 64, 4: 64, 16: 32, 64: 16}
KINDS = ("upload", "download", "mixed")
# Chunks Python lets go of after the last transfer ended, so after the driver's trim: the last
# one each download's consumer still holds when its reader ends.
KEPT_SLACK_MIB = 16
# malloc's mmap threshold fixed (mallopt(3)), as docs/performance.md measures reads: a freed
# 8 MiB chunk goes back to the system at once, so the peak is what the transfers held at once.
# With glibc's defaults the peak is also what glibc kept for reuse, which varies by tens of MiB
# from run to run for the same transfers, stock's as much as native's.
CHUNKS_UNMAPPED = {"MALLOC_MMAP_THRESHOLD_": str(MiB)}
GLIBC_DEFAULTS: dict[str, str] = {}


@pytest.fixture(scope="module")
def pool(cluster):
    """POOL, through Debian's rbd module."""
    with contextlib.suppress(CephError):
        cluster.delete_pool(POOL)  # left by a run that was killed
    cluster.create_pool(POOL)
    try:
        with contextlib.closing(Images(cluster, pool=POOL)) as images:
            yield images
    finally:
        cluster.delete_pool(POOL)


class Runs:
    """Runs of benchmarks/many.py against POOL and the images the downloads read."""

    def __init__(self, cluster, pool):
        self.cluster, self.pool = cluster, pool
        # {MiB: (image, md5)}, stored once as glance stores an image.
        self.sources = {
            mib: (f"source-{mib}", create_image(pool, f"source-{mib}", mib * MiB, seed=mib))
            for mib in sorted(set(SIZE_MIB.values()))
        }

    def run(self, driver, kind, transfers, allocator):
        """One run, checked right and cleaned up after; its JSON."""
        image, md5 = self.sources[SIZE_MIB[transfers]]
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("GLANCE_RBD_NATIVE", "MALLOC_"))
        }
        env.update(allocator)
        cmd = [
            sys.executable,
            "-m",
            "benchmarks.many",
            "--conf",
            str(self.cluster.conf_path),
            "--pool",
            POOL,
            "--driver",
            driver,
            "--kind",
            kind,
            "--transfers",
            str(transfers),
            "--size-mib",
            str(SIZE_MIB[transfers]),
            "--image",
            image,
            "--expect-md5",
            md5,
            "--watch-bound",
        ]
        out = subprocess.run(
            cmd, cwd=CHECKOUT, env=env, capture_output=True, text=True, timeout=600, check=False
        )
        assert out.returncode == 0, out.stderr[-4000:]
        result = json.loads(out.stdout.splitlines()[-1])
        assert result["ok"], result["errors"]
        assert result["patched"] == (driver == "native")
        assert self.pool.names() == {name for name, _ in self.sources.values()}
        return result


@pytest.fixture(scope="module")
def runs(cluster, pool):
    return Runs(cluster, pool)


def over(result, field):
    """MiB of RSS over the run's baseline."""
    return result[f"{field}_rss_mib"] - result["baseline_rss_mib"]


def figures(result):
    return (
        f"{result['driver']} {result['seconds']:.2f}s, peak +{over(result, 'peak'):.0f}, "
        f"kept +{over(result, 'kept'):.0f}, trimmed +{over(result, 'trimmed'):.0f} MiB"
    )


CASES = [
    pytest.param(k, kind, marks=[pytest.mark.load] if k == 64 else [], id=f"{kind}-{k}")
    for k in SIZE_MIB
    for kind in KINDS
]


@pytest.mark.alone
@pytest.mark.parametrize(("transfers", "kind"), CASES)
def test_native_holds_no_more_than_stock_plus_the_bound(runs, transfers, kind):
    stock = runs.run("stock", kind, transfers, CHUNKS_UNMAPPED)
    native = runs.run("native", kind, transfers, CHUNKS_UNMAPPED)
    problems = []
    # Beyond what stock holds, native may hold the bound, or one chunk per transfer when more
    # run than the bound has chunks: each always may have one in flight.
    allowed = max(BOUND_MIB, native["transfers"] * CHUNK_MIB)
    if over(native, "peak") > over(stock, "peak") + allowed:
        problems.append(f"native's peak is over stock's plus {allowed} MiB")
    if over(native, "kept") > over(stock, "kept") + KEPT_SLACK_MIB:
        problems.append("native keeps more than stock")
    # Sampled every millisecond: a breach between two samples goes unseen, none is invented.
    if native["over_bound_max_mib"] > 0:
        problems.append(
            f"the process held {native['held_max_mib']:.0f} MiB, "
            f"{native['over_bound_max_mib']:.0f} more than the bound and one chunk per "
            f"transfer"
        )
    if native["in_flight_after"] != {"bound": DEFAULT_MAX_IN_FLIGHT, "transfers": 0, "held": 0}:
        problems.append(f"in_flight() after the transfers: {native['in_flight_after']}")
    assert not problems, f"{'; '.join(problems)} ({figures(stock)}; {figures(native)})"


@pytest.mark.alone
@pytest.mark.parametrize(("transfers", "kind"), [(4, "download"), (16, "mixed")])
def test_freed_memory_goes_back_once_the_last_transfer_ends(runs, transfers, kind):
    """With glibc's defaults, where the chunks freed stay in the arenas of the threads that
    freed them. Once the transfers end, the child trims malloc itself (trimmed_rss_mib): after
    native's own trim, that finds little more to give back."""
    stock = runs.run("stock", kind, transfers, GLIBC_DEFAULTS)
    native = runs.run("native", kind, transfers, GLIBC_DEFAULTS)
    said = f"{figures(stock)}; {figures(native)}"
    assert over(native, "kept") - over(native, "trimmed") <= KEPT_SLACK_MIB, said
    assert over(native, "kept") <= over(stock, "kept") + KEPT_SLACK_MIB, said


# -- in this process -------------------------------------------------------------------------

BOUND = 48 * MiB  # set in glance's configuration of every Store below
CHUNK = MiB


@pytest.fixture
def bounded(cluster, pool, native, monkeypatch):
    """A function making native Stores on POOL with 1 MiB chunks and BOUND in their glance
    configuration, alone (no environment override); the default bound again afterwards, for
    RbdWriter and RbdReader used directly, which never set it."""
    monkeypatch.delenv(settings.MAX_IN_FLIGHT_ENV, raising=False)
    gc.collect()
    assert glance_rbd_native.in_flight()["transfers"] == 0

    def store():
        made = make_store(cluster, chunk_mib=CHUNK // MiB, pool=POOL)
        settings.register_opts(made.conf)
        made.conf.set_override("max_in_flight_mib", BOUND // MiB, group=settings.GROUP.name)
        return made

    yield store
    glance_rbd_native.set_max_in_flight(DEFAULT_MAX_IN_FLIGHT)


@pytest.fixture
def readable(cluster, pool):
    """(the Location glance gives for an image in POOL, its data): larger than the reads BOUND
    allows in flight (half of it: each counts twice), so that only the shares limit how far
    downloads of it read ahead."""
    data, name = data_of(32 * MiB, seed=3), new_name("in-flight-source")
    pool.create(name, len(data))
    try:
        pool.write(name, data)
        pool.snapshot(name)
        uri = f"rbd://{cluster.fsid}/{POOL}/{name}/{SNAP}"
        yield (
            (lambda store: location.Location("rbd", rbd_driver.StoreLocation, store.conf, uri=uri)),
            data,
        )
    finally:
        pool.remove(name)


class PausedAfterFirstChunk:
    """An upload's source that, once its first chunk is read, says so and waits for `go`."""

    def __init__(self, data, paused, go):
        self._stream, self._paused, self._go = io.BytesIO(data), paused, go

    def read(self, size=-1):
        if self._stream.tell() and self._paused:
            self._paused.release()
            self._paused = None
            assert self._go.wait(60)
        return self._stream.read(size)


def test_in_flight_counts_transfers_and_their_bytes_then_back_to_zero(pool, bounded, readable):
    """4 uploads and 4 downloads in threads, each stopped after its first chunk: in_flight()
    counts 8 transfers, holding what their shares of the bound set in glance's configuration
    allow; once they end, 0 and 0."""
    where, source = readable
    uploads = {new_name("in-flight"): data_of(4 * MiB, seed=i) for i in range(4)}
    paused, go = threading.Semaphore(0), threading.Event()
    added, received, threads = {}, [], []

    def upload(name, data, store):
        added[name] = store.add(name, PausedAfterFirstChunk(data, paused, go), len(data), "sha512")

    def download(chunks):
        parts = iter(chunks)
        first = next(parts)
        paused.release()
        assert go.wait(60)
        received.append(first + b"".join(parts))

    try:
        try:
            # Stores made here: the first Stores of a process, made in threads at once, import
            # glance_store's drivers at once, after which one thread may never join (either
            # driver).
            threads += [
                threading.Thread(target=upload, args=(name, data, bounded()))
                for name, data in uploads.items()
            ]
            for thread in threads:
                thread.start()
            for _ in threads:
                assert paused.acquire(timeout=60)
            # Opened here, all four before any reads: each reads ahead within an eighth.
            readers = [store.get(where(store))[0] for store in (bounded() for _ in range(4))]
            threads += [threading.Thread(target=download, args=(r,)) for r in readers]
            for thread in threads[4:]:
                thread.start()
            for _ in readers:
                assert paused.acquire(timeout=60)
            running = glance_rbd_native.in_flight()
        finally:
            go.set()
            for thread in threads:
                thread.join(timeout=120)
        assert running["bound"] == BOUND
        assert running["transfers"] == 8
        # Each download read ahead its share, 3 chunks counted twice (librbd's buffers), and
        # handed one out; each upload may still be writing its first.
        assert 4 * 2 * 2 * CHUNK <= running["held"] <= 4 * 2 * 2 * CHUNK + 4 * CHUNK
        assert glance_rbd_native.in_flight() == {"bound": BOUND, "transfers": 0, "held": 0}
        assert received == [source] * 4
        for name, data in uploads.items():
            assert added[name][1:3] == (len(data), hashlib.md5(data).hexdigest())
            assert pool.read(name) == data
    finally:
        for name in uploads:
            pool.remove(name)


def test_transfers_started_one_after_another_hold_the_bound_and_a_chunk_each(bounded, readable):
    """Four downloads started one after the other, each consumed up to its first chunk: the
    first read ahead the whole bound while alone, and each later one its share of the moment.
    Each transfer may always hold one chunk, counted twice for a download (librbd's buffers), so
    the process may hold the bound and two chunks per download; more is shares taken of a bound
    already spent."""
    where, _ = readable
    parts = []
    try:
        for _ in range(4):
            store = bounded()
            parts.append(iter(store.get(where(store))[0]))
            next(parts[-1])
        running = glance_rbd_native.in_flight()
    finally:
        for chunks in parts:
            chunks.close()
    assert running["transfers"] == 4
    assert running["held"] <= BOUND + 4 * 2 * CHUNK, f"{running['held'] / MiB:.0f} MiB held"
    assert glance_rbd_native.in_flight() == {"bound": BOUND, "transfers": 0, "held": 0}
