"""Downloads through glance-api under uWSGI. Whole downloads are checked byte for byte with
every upload (clients.assert_stored, on every server); here, clients that walk away halfway:
the worker's native reader is stopped and let go each time, so file descriptors, threads and
memory of the workers stay flat.

Memory is measured once it has settled, after SETTLE downloads: each worker's threads (uWSGI's,
librbd's) have glibc arenas that keep freed chunks. The native driver gives that memory back
when the last transfer of a process ends, so a worker's RSS after the abandoned downloads is
near what it was before (it kept some hundred MiB more, and more each run, before it did). A
leak of one chunk per download would be 2.4 GiB over ABANDONED downloads, of one MiB, 300 MiB:
the bound is under that."""

import io
import os
import socket

import pytest

from tests.harness import memory
from tests.harness.data import MiB, data_of
from tests.harness.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]

SIZE = 16 * MiB
SETTLE = 100
ABANDONED = 300


def usage(pids):
    """Open file descriptors, threads and resident MiB, summed over `pids`."""
    fds = threads = rss = 0
    for pid in pids:
        fds += len(os.listdir(f"/proc/{pid}/fd"))
        threads += len(os.listdir(f"/proc/{pid}/task"))
        rss += memory.status_mib(pid, "VmRSS")
    return fds, threads, rss


def abandon(api, image_id):
    """GETs the image and hangs up once half of it has arrived."""
    with socket.create_connection(("127.0.0.1", api.port), timeout=60) as sock:
        sock.sendall(
            f"GET /v2/images/{image_id}/file HTTP/1.1\r\nHost: glance\r\n"
            f"Connection: close\r\n\r\n".encode()
        )
        received = 0
        while received < SIZE // 2:
            got = sock.recv(1 << 20)
            assert got, "the server closed first"
            received += len(got)


def test_abandoned_downloads_leave_nothing_behind(glance_servers, cluster, clean_pool):
    api = glance_servers("native")
    data = data_of(SIZE, seed=300)
    image_id = api.create_image("e2e abandoned downloads")
    try:
        assert api.upload(image_id, io.BytesIO(data), size=SIZE)[0] == 204
        pids = memory.children(api.pid)
        assert len(pids) == 2
        for _ in range(SETTLE):  # both workers connected, their caches and arenas warm
            abandon(api, image_id)
        fds, threads, rss = usage(pids)
        for _ in range(ABANDONED):
            abandon(api, image_id)
        assert memory.children(api.pid) == pids  # no worker died and was replaced
        # Each reader is closed when glance drops its iterator (the last one once its worker
        # has seen the hang-up): none watches the image.
        status = wait_for(
            lambda: cluster.rbd("status", f"{cluster.pool}/{image_id}"),
            10.0,
            every=0.2,
            until=lambda listed: "Watchers: none" in listed,
        )
        assert "Watchers: none" in status, status
        after = usage(pids)
        print(
            f"workers before/after {ABANDONED} abandoned downloads: fds {fds}/{after[0]}, "
            f"threads {threads}/{after[1]}, RSS {rss:.0f}/{after[2]:.0f} MiB"
        )
        assert after[0] <= fds + 4, (fds, after)
        assert after[1] <= threads + 2, (threads, after)
        assert after[2] <= rss + 128, (rss, after)
        status, body = api.request("GET", f"/v2/images/{image_id}/file")
        assert status == 200 and body == data
    finally:
        api.delete(image_id)
