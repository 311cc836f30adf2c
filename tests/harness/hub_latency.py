"""How long a glance-api keeps small requests waiting while it moves image data: the probe of
an eventlet worker's hub, shared by the tests and the benchmarks.

While a transfer runs, `GET /v2/images/{id}` goes to the same glance-api at a steady rate, each
on a fresh connection from a thread of its own, so a slow answer never delays the next request:
the latencies are what clients arriving at that rate would see. A worker whose hub is blocked
(by a wait in librbd on the hub's own thread) answers nothing until the wait ends.

The rate is a load of its own. One such GET costs a glance 32 eventlet worker 9 to 20 ms of CPU
on a 2-core machine, more once requests overlap: without keystone, glance builds a policy
enforcer, deep copies of every rule, per request; then a database query through PyMySQL. Every
20 ms, the probe alone kept one worker busy with no transfer at all, and its queue then grew
for as long as the probe ran (p50 of seconds, then 500s once SQLAlchemy's pool ran dry): it
measured an overloaded worker. Every 50 ms (INTERVAL) it takes a quarter of the worker's core,
and a worker at rest answers in 8 to 21 ms, but for its full garbage collections, of 150 to
350 ms, every 40 or so GETs.
"""

from __future__ import annotations

import dataclasses
import io
import math
import threading
import time

from tests.harness.data import MiB

INTERVAL = 0.05  # seconds between the probe's requests
TIMEOUT = 120.0  # per request: longer than any stall worth measuring


@dataclasses.dataclass(frozen=True)
class Sample:
    sent: float  # seconds after the probe started
    seconds: float  # from sending to the whole response read
    status: int | str  # the HTTP status, or the error that took its place


@dataclasses.dataclass(frozen=True)
class Latencies:
    samples: tuple[Sample, ...]

    @property
    def count(self) -> int:
        return len(self.samples)

    @property
    def failed(self) -> list[Sample]:
        """The requests not answered with 200."""
        return [s for s in self.samples if s.status != 200]

    def percentile(self, fraction: float) -> float:
        """Seconds, by nearest rank: the smallest latency at least `fraction` of requests had."""
        ordered = sorted(s.seconds for s in self.samples)
        return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]

    @property
    def p50(self) -> float:
        return self.percentile(0.50)

    @property
    def p99(self) -> float:
        return self.percentile(0.99)

    @property
    def max(self) -> float:
        return max(s.seconds for s in self.samples)

    def summary(self) -> dict:
        """What a report prints: milliseconds, the count and the failures."""
        return {
            "p50_ms": round(self.p50 * 1000, 1),
            "p99_ms": round(self.p99 * 1000, 1),
            "max_ms": round(self.max * 1000, 1),
            "count": self.count,
            "failed": len(self.failed),
        }


def warm_up_transfers(api) -> None:
    """A small upload and download, so that what a worker does once, at its first transfer, is
    behind it: eventlet starts its pool's 20 threads from the hub (half a second on a loaded
    machine), the native layer connects to the cluster."""
    image_id = api.create_image("warm-up")
    try:
        status, out = api.upload(image_id, io.BytesIO(bytes(MiB)), size=MiB)
        if status != 204:
            raise RuntimeError(f"warm-up upload to {api.url}: {status} {out[:300]!r}")
        status, body = api.request("GET", f"/v2/images/{image_id}/file")[:2]
        if (status, len(body)) != (200, MiB):
            raise RuntimeError(f"warm-up download from {api.url}: {status}, {len(body)} bytes")
    finally:
        api.delete(image_id)


def warm_up(api, image_id: str, count: int = 20) -> None:
    """GETs the image `count` times, one after the other: a fresh worker answers its first
    requests slowly (lazy imports, policy, the first database connections)."""
    for _ in range(count):
        api.request("GET", f"/v2/images/{image_id}")


def measure(api, image_id: str, transfer, *, interval: float = INTERVAL, timeout: float = TIMEOUT):
    """Runs `transfer()` while probing `api` (a tests.harness.glance_api.GlanceApi) with GETs of
    image `image_id`; returns what `transfer()` returned and the probe's Latencies. Requests
    still unanswered when the transfer ends are waited for, up to `timeout`."""
    path = f"/v2/images/{image_id}"
    samples: list[Sample] = []
    lock = threading.Lock()
    stop = threading.Event()
    requests: list[threading.Thread] = []
    origin = time.monotonic()

    def probe():
        sent = time.monotonic()
        try:
            status = api.request("GET", path, timeout=timeout)[0]
        except Exception as exc:  # a refused or reset connection is a result, not a crash
            status = repr(exc)
        sample = Sample(sent - origin, time.monotonic() - sent, status)
        with lock:
            samples.append(sample)

    def pace():
        due = time.monotonic()
        while not stop.is_set():
            request = threading.Thread(target=probe, name="hub-probe", daemon=True)
            request.start()
            requests.append(request)
            # A steady rate; when this thread itself was held up, no burst to catch up.
            due = max(due + interval, time.monotonic())
            stop.wait(due - time.monotonic())

    pacer = threading.Thread(target=pace, name="hub-probe-pacer", daemon=True)
    pacer.start()
    try:
        result = transfer()
    finally:
        stop.set()
        pacer.join()
        deadline = time.monotonic() + timeout + 5
        for request in requests:
            request.join(max(0.0, deadline - time.monotonic()))
    if any(request.is_alive() for request in requests):
        raise TimeoutError(f"probe requests to {api.url} still unanswered after {timeout}s")
    if not samples:
        raise RuntimeError("the transfer ended before the probe sent a request")
    return result, Latencies(tuple(sorted(samples, key=lambda s: s.sent)))
