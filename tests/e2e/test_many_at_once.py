"""Many transfers at once in one glance-api process: 16 uploads and 16 downloads through one
uWSGI worker of 32 threads, native and stock configured alike. Every byte must be right, and
the native worker's memory must stay near stock's: the in-flight bound is one per process,
shared by all its transfers, and what malloc keeps goes back when the last one ends.

Both workers peak far above the bound, at some 25 MiB per transfer, about three chunks: the
one glance reads from the request or hands uWSGI to send, the one in librbd, librbd's copy.
What native may hold beyond that: the bound is shared evenly, so with 32 transfers each one's
share (48 MiB / 32) is under a chunk and each holds the one 8 MiB chunk it always may. An
upload's chunk in flight is the one stock holds in its synchronous write; a download's read
ahead is not, since stock reads only when its consumer asks. So native holds at most the larger
of the bound and one chunk per download more than stock (128 MiB here). Were the bound per
transfer, each download could read 48 MiB ahead and each upload keep 48 MiB in flight: up to
1.2 GiB more than stock. Each worker is restarted before its burst and warmed by one small
transfer, so both start alike: glibc's arenas empty, the cluster connected.
"""

import concurrent.futures
import contextlib
import hashlib
import http.client
import io
import threading
import time

import pytest

from tests.e2e.conftest import MAX_IN_FLIGHT_MIB
from tests.harness import memory
from tests.harness.data import MiB, data_of

pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.alone]

SIZE = 64 * MiB
UPLOADS = DOWNLOADS = 16
THREADS = UPLOADS + DOWNLOADS  # of the one uWSGI worker: every transfer runs at once
CHUNK_MIB = 8  # rbd_store_chunk_size of the test servers
# Where the chunks of 32 threads are freed, into up to 16 glibc arenas (8 per core) that each
# keep some for reuse, and how many transfers overlap at the peak, move one server's peak by
# 150 MiB from run to run (stock's growth measured 836 to 1008 MiB, native's 757 to 914).
ARENA_SLACK_MIB = 96
# After the burst: native has trimmed, stock keeps what it freed; only the native module and
# its one cached connection (librbd's caches and threads) may be more.
AFTER_SLACK_MIB = 32


def worker(api):
    """The pid of the uWSGI master's one worker."""
    [pid] = memory.children(api.pid)
    return pid


def upload(api, image_id, data, chunked):
    if not chunked:
        return api.upload(image_id, io.BytesIO(data), size=len(data))[0]
    # glanceclient's 1 MiB pieces, off by a few bytes so that none ends on a chunk boundary.
    step = MiB + 7
    return api.upload(image_id, (data[i : i + step] for i in range(0, len(data), step)))[0]


def download(api, image_id):
    """GETs the image's data as it arrives; (status, bytes, md5)."""
    conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=600)
    try:
        conn.request("GET", f"/v2/images/{image_id}/file")
        resp = conn.getresponse()
        md5, received = hashlib.md5(), 0
        while chunk := resp.read(MiB):
            md5.update(chunk)
            received += len(chunk)
        return resp.status, received, md5.hexdigest()
    finally:
        conn.close()


def burst(api, sources, stored):
    """Uploads each source into a new image and downloads each stored image, all at once.
    (ids of the new images, upload statuses, download results)."""
    new_ids = [api.create_image(f"many at once {i}") for i in range(len(sources))]
    start = threading.Barrier(len(sources) + len(stored))

    def up(i):
        start.wait()
        return upload(api, new_ids[i], sources[i], chunked=i % 2 == 1)

    def down(image_id):
        start.wait()
        return download(api, image_id)

    with concurrent.futures.ThreadPoolExecutor(len(sources) + len(stored)) as pool:
        ups = [pool.submit(up, i) for i in range(len(sources))]
        downs = [pool.submit(down, image_id) for image_id in stored]
        return new_ids, [f.result() for f in ups], [f.result() for f in downs]


def measure(api, cluster, sources, digests):
    """Stores the sources, restarts the server, then runs the burst with the worker's RSS
    watched; checks every byte. (before, peak, after) RSS of the worker, in MiB."""
    ids = []
    try:
        api.start()
        stored = [api.create_image(f"to download {i}") for i in range(len(sources))]
        ids += stored
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            statuses = list(
                pool.map(lambda i: upload(api, stored[i], sources[i], False), range(len(sources)))
            )
        assert statuses == [204] * len(sources)
        # A fresh worker, warmed by one small transfer: imported, connected, arenas empty.
        api.stop()
        api.start()
        warm = api.create_image("warm-up")
        ids.append(warm)
        assert upload(api, warm, bytes(MiB), chunked=False) == 204
        assert download(api, warm)[:2] == (200, MiB)
        pid = worker(api)
        watched = memory.Peak([pid])
        before = watched.baseline[pid]
        started = time.monotonic()
        try:
            new_ids, statuses, downloads = burst(api, sources, stored)
        finally:
            peak = watched.stop()[pid]
        seconds = time.monotonic() - started
        ids += new_ids
        time.sleep(2)  # the worker may end a transfer after its client has the response
        after = memory.status_mib(pid, "VmRSS")
        assert worker(api) == pid  # the worker served it all, and did not die
        assert statuses == [204] * len(sources)
        assert downloads == [(200, SIZE, digest) for digest in digests]
        log = api.log()
        for image_id, digest in zip(new_ids, digests, strict=True):
            image = api.image(image_id)
            assert (image["status"], image["size"], image["checksum"]) == ("active", SIZE, digest)
            assert (f"stored image {image_id} with the native writer" in log) == api.native
        print(
            f"{'native' if api.native else 'stock'}: burst {seconds:.1f}s, worker RSS before "
            f"{before:.0f}, peak {peak:.0f}, after {after:.0f} MiB"
        )
        return before, peak, after
    finally:
        with contextlib.suppress(OSError):  # a server that died: its images are named below
            for image_id in ids:
                api.delete(image_id)
        api.stop()
        left = set(ids) & set(cluster.images())
        assert not left, f"images left in the pool: {sorted(left)}"


def test_many_transfers_at_once_in_one_worker(new_glance_api, cluster):
    sources = [data_of(SIZE, seed=1600 + i) for i in range(UPLOADS)]
    digests = [hashlib.md5(data).hexdigest() for data in sources]
    memory = {}
    for name, native in (("native", True), ("stock", False)):
        api = new_glance_api(f"many-{name}", native=native, processes=1, threads=THREADS)
        memory[name] = measure(api, cluster, sources, digests)
    (n_before, n_peak, n_after), (s_before, s_peak, s_after) = memory["native"], memory["stock"]
    allowance = max(MAX_IN_FLIGHT_MIB, DOWNLOADS * CHUNK_MIB) + ARENA_SLACK_MIB
    assert n_peak - n_before <= s_peak - s_before + allowance, memory
    assert n_after <= s_after + AFTER_SLACK_MIB, memory
