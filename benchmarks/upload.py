"""One measured upload in a process of its own, so CPU time, peak RSS and CEPH_ARGS are its own.

    python -m benchmarks.upload --conf C --pool P --file F --driver native|stock
        [--unknown-size] [--thin] [--threads N] [--gil-probe] [--chunks bytes|bytearray|memoryview]

Prints one JSON object: wall seconds, client CPU seconds, peak and baseline RSS, digests,
whether they match, the images it created (the caller removes them), and with --gil-probe the
lateness of a thread that sleeps 1 ms in a loop.
"""

import argparse
import io
import json
import logging
import pathlib
import resource
import threading
import time

import glance_rbd_native
from tests.harness.cluster import Cluster
from tests.harness.data import new_name
from tests.harness.stores import make_store


def status_mib(field):
    """VmRSS (now) or VmHWM (peak) of this process. Unlike ru_maxrss, VmHWM starts afresh at
    exec, so the parent's memory does not count."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(field)


class GilProbe(threading.Thread):
    """Sleeps 1 ms in a loop and records how late each wake-up is: a thread waiting for the GIL
    wakes late."""

    def __init__(self):
        super().__init__(daemon=True)
        self.late_ms = []
        self._done = threading.Event()

    def run(self):
        while not self._done.is_set():
            start = time.perf_counter()
            time.sleep(0.001)
            self.late_ms.append((time.perf_counter() - start - 0.001) * 1000)

    def stop(self):
        self._done.set()
        self.join()

    def percentile(self, q):
        late = sorted(self.late_ms)
        return late[min(len(late) - 1, int(q * len(late)))] if late else None


class Chunks:
    """The file, read as bytes (what glance hands the driver) or into a fresh bytearray, alone
    or behind a memoryview: the same Python-side cost, so the difference is what write() does
    with each (bytes is read in place, the others are copied once)."""

    def __init__(self, file, kind):
        self.file, self.kind = file, kind

    def read(self, size=-1):
        if self.kind == "bytes" or size < 0:
            return self.file.read(size)
        buf = bytearray(size)
        del buf[self.file.readinto(buf) :]
        return buf if self.kind == "bytearray" else memoryview(buf)


class StoredSummary(logging.Handler):
    """Picks up the native driver's line per upload, which ends with resizes and trim time."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.resizes = self.trim_seconds = None

    def emit(self, record):
        if record.msg.startswith("stored image"):
            self.resizes, self.trim_seconds = record.args[-2:]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--conf", required=True)
    parser.add_argument("--pool", required=True)
    parser.add_argument("--file", required=True)
    parser.add_argument("--driver", choices=("stock", "native"), required=True)
    parser.add_argument("--unknown-size", action="store_true")
    parser.add_argument("--thin", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--gil-probe", action="store_true")
    parser.add_argument("--chunks", choices=("bytes", "bytearray", "memoryview"), default="bytes")
    parser.add_argument("--expect-md5")
    args = parser.parse_args()

    summary = StoredSummary()
    if args.driver == "native":
        glance_rbd_native.patch()
        driver_log = logging.getLogger("glance_rbd_native.upload")
        driver_log.setLevel(logging.DEBUG)
        driver_log.addHandler(summary)
    cluster = Cluster.describe(args.conf, args.pool)
    store = make_store(cluster, thin=args.thin)
    size = pathlib.Path(args.file).stat().st_size
    names = [new_name(args.driver) for _ in range(args.threads)]
    results, errors = [None] * args.threads, []

    def upload(index):
        try:
            with open(args.file, "rb") as src:
                results[index] = store.add(
                    names[index],
                    Chunks(src, args.chunks),
                    0 if args.unknown_size else size,
                    "sha512",
                )
        except Exception as exc:  # reported in the JSON
            errors.append(repr(exc))

    # A first small upload loads and connects everything, so the baseline is a process ready
    # to upload and the peak above it is what an upload costs.
    warm_up = new_name("warm-up")
    # Its own Store, as glance-api makes one per request: stock cannot reuse one.
    # Thin and all zero, so it allocates nothing that the caller would count.
    make_store(cluster, thin=True).add(warm_up, io.BytesIO(bytes(1 << 20)), 0, "sha512")
    names.append(warm_up)
    probe = GilProbe() if args.gil_probe else None
    baseline = status_mib("VmRSS")
    usage = resource.getrusage(resource.RUSAGE_SELF)
    if probe:
        probe.start()
    started_unix, started = time.time(), time.perf_counter()
    threads = [threading.Thread(target=upload, args=(i,)) for i in range(args.threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    if probe:
        probe.stop()
    after = resource.getrusage(resource.RUSAGE_SELF)

    md5 = args.expect_md5
    ok = not errors and all(r and r[1] == size and (md5 is None or r[2] == md5) for r in results)

    print(
        json.dumps(
            {
                "driver": args.driver,
                "seconds": seconds,
                # When the transfer started, for the RSS its parent samples (benchmarks/huge.py).
                "started_unix": started_unix,
                "bytes": size * args.threads,
                "cpu_seconds": (after.ru_utime - usage.ru_utime)
                + (after.ru_stime - usage.ru_stime),
                "peak_rss_mib": status_mib("VmHWM"),
                "baseline_rss_mib": baseline,
                "ok": ok,
                "errors": errors,
                "images": names,
                "resizes": summary.resizes,
                "trim_seconds": summary.trim_seconds,
                "gil_late_p999_ms": probe.percentile(0.999) if probe else None,
                "gil_late_max_ms": max(probe.late_ms) if probe and probe.late_ms else None,
            }
        )
    )


if __name__ == "__main__":
    main()
