"""A preloading uWSGI glance-api (the app loaded in the master before the fork, uWSGI's default)
stopped the way an impatient service manager stops it: SIGINT to the master, then SIGTERM to
each worker while it is still in exit(), as soon as glance's exit hook logs there (2 s after
the SIGINT at the latest; here a worker's whole exit takes about half a second). Each worker
has uploaded through the native writer, so each has a cached cluster connection when it exits:
no worker may crash ("terminate called ...", a signal), and the server ends by itself. A stock
server goes through the same in the same run, for reference only (docs/deployment.md)."""

import concurrent.futures
import contextlib
import os
import re
import signal
import time

import pytest

from tests.harness import memory, stuck
from tests.harness.data import MiB, data_of
from tests.harness.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]

CYCLES = 3
SIZE = 4 * MiB
# What a worker's crash leaves in the server's output: libstdc++'s last words, uWSGI's report
# of a worker killed by a signal, its own segfault handler's.
CRASH = re.compile(
    r"^.*(?:terminate called|killed by signal|core dumped|bad_get|"
    r"!!! uWSGI process \d+ got).*$",
    re.M,
)
# glance's exit hook, run inside a worker's exit(): "<date> <time> <pid> INFO ... Waiting for
# remaining threads in pool 'tasks_pool'".
DRAINING = re.compile(
    r"^\S+ \S+ (\d+) INFO glance\.common\.wsgi_app .* Waiting for remaining "
    r"threads",
    re.M,
)
# uWSGI's request log: "[pid: 123|app: 0|req: 1/2] ... PUT /v2/images/<id>/file => ...".
STORED = re.compile(
    r"\[pid: (\d+)\|app: \d+\|req: [^]]*\] .*PUT /v2/images/[^/ ]+/file "
    r"=> .*\(HTTP/1\.1 204\)"
)


def exited(pid):
    """Whether `pid` has ended (a zombie until its master reaps it)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in "ZX"
    except FileNotFoundError:
        return True


def both_workers(api):
    """The pids of the master's two workers: the second may fork after the first answers."""
    workers = wait_for(
        lambda: memory.children(api.pid), 30, every=0.1, until=lambda workers: len(workers) >= 2
    )
    assert len(workers) >= 2, workers
    return workers


def upload_through_both_workers(api, workers):
    """Uploads four at a time until each worker has stored one; the image ids."""
    data = data_of(SIZE)
    ids = []
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for _ in range(8):
            batch = [api.create_image("exit") for _ in range(4)]
            ids += batch
            statuses = list(pool.map(lambda image: api.upload(image, data, size=SIZE)[0], batch))
            assert statuses == [204] * 4, statuses
            if set(STORED.findall(api.server_log())) >= {str(pid) for pid in workers}:
                return ids
    raise AssertionError(f"not every worker of {workers} stored an image: {api.server_log()}")


def cycle(new_glance_api, name, native):
    """A fresh server: uploads through both workers, the two signals, the server's end."""
    api = new_glance_api(name, native=native, lazy=False).start()
    try:
        workers = both_workers(api)
        ids = upload_through_both_workers(api, workers)
        start = time.monotonic()
        os.kill(api.pid, signal.SIGINT)
        # The second signal: to each worker once its exit hook runs, to all of them after 2 s.
        twice, pending = [], set(workers)
        while pending:
            late = time.monotonic() - start > 2
            draining = {int(pid) for pid in DRAINING.findall(api.log())}
            for pid in sorted(pending):
                if late or pid in draining or exited(pid):
                    pending.discard(pid)
                    if not exited(pid):
                        twice.append(pid)
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGTERM)
            time.sleep(0.01)
        status = api.wait(60)
        seconds = time.monotonic() - start
        # What kept it, for the failure below.
        stuck_in = (
            ""
            if status is not None
            else "\n".join(
                (
                    stuck.report([api.pid, *memory.children(api.pid)]),
                    api.server_log()[-2000:],
                    api.log()[-3000:],
                )
            )
        )
    finally:
        api.stop()
    return {
        "seconds": round(seconds, 1),
        "status": status,
        "signalled twice": len(twice),
        "crash": CRASH.findall(api.server_log()),
        "native writer": "with the native writer" in api.log(),
        "ids": ids,
        "stuck in": stuck_in,
    }


def test_impatient_stop_of_a_preloading_server(new_glance_api, clean_pool):
    results = {"native": [], "stock": []}
    for index in range(CYCLES):
        for driver in results:
            result = cycle(new_glance_api, f"exit-{driver}-{index}", driver == "native")
            for image in result.pop("ids"):
                clean_pool.remove(image)
            results[driver].append(result)
            print(f"{driver} {index}: {result}")
    # The second signal did land inside exit(), not after it.
    assert sum(result["signalled twice"] for result in results["native"]) > 0, results
    for result in results["native"]:
        assert result["native writer"], result
        assert result["crash"] == [], result
        # The server ended by itself.
        assert result["status"] is not None, f"{result['seconds']} s\n{result['stuck in']}"
