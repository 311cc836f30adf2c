"""The largest case: a 10 GiB image of unknown size, native against stock.

Through glance-api under uWSGI, python-glanceclient uploads it with no size, as nova's snapshot
upload does (`images.upload(image_id, file)`: glanceclient then sends the file chunked, in 1 MiB
pieces, and glance hands the store a size of 0), and the image is downloaded back with a GET,
its md5 checked. The store driver alone does the same two in a child process each
(benchmarks/upload.py with --unknown-size, Store.add with size 0; benchmarks/download.py with
--hash, Store.get with the consumer hashing, which checks the md5). Each records wall seconds
and peak RSS: of the uWSGI worker that served it (VmHWM, restarted from the RSS before each
run through /proc/PID/clear_refs, and the RSS sampled every 50 ms, which alone gives the peak
where that write is refused), or of the child. The children's RSS is also sampled from outside
every SAMPLE seconds while they transfer: the RSS over time that the charts draw.

    python -m benchmarks.huge          # boots its own cluster, MariaDB and two glance-api
    HUGE_SIZE_GIB=2 python -m benchmarks.huge

Prints the samples and a table of them, as JSON. `huge_rows` runs the same on a cluster and
servers of the caller's (bench.py's).
"""

import contextlib
import hashlib
import http.client
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from tests.clients import glance_client
from tests.harness import memory
from tests.harness.cluster import Cluster
from tests.harness.glance_api import GlanceApi
from tests.harness.mariadb import MariaDB
from tests.harness.stores import Images

# The import root: the children run `python -m benchmarks.upload` (and download) in it.
CHECKOUT = pathlib.Path(__file__).resolve().parents[1]

MiB, GiB = 1 << 20, 1 << 30
SIZE = int(os.environ.get("HUGE_SIZE_GIB", "10")) * GiB
BLOCK = 64 * MiB
DRIVERS = ("native", "stock")
# A child moving 10 GiB with the stock driver on a loaded 2-core machine takes minutes.
CHILD_TIMEOUT = 3600
SAMPLE = 0.1  # seconds between two readings of a child's RSS


def log(message):
    print(message, file=sys.stderr, flush=True)


# -- data ------------------------------------------------------------------------------------


def write_data(path, size, seed=0):
    """One 64 MiB random block, repeated, each copy's first 8 bytes its index: written as fast
    as the disk takes it, and no two blocks alike. Ceph does not deduplicate, so a repeated
    block costs the cluster what fresh data does, and the hashes still see every byte. Returns
    the md5."""
    block = bytearray(np.random.default_rng(seed).bytes(BLOCK))
    md5 = hashlib.md5()
    with open(path, "wb") as out:
        for index, pos in enumerate(range(0, size, BLOCK)):
            block[:8] = index.to_bytes(8, "little")
            piece = memoryview(block)[: min(BLOCK, size - pos)]
            md5.update(piece)
            out.write(piece)
    return md5.hexdigest()


def data_file(root, size):
    """The data file of `size` bytes in `root` (write_data's), written once and kept for the
    next caller: its path and md5."""
    path = pathlib.Path(root) / f"huge-{size >> 20}MiB.raw"
    md5_path = path.with_suffix(".md5")
    if not (path.exists() and path.stat().st_size == size and md5_path.exists()):
        if shutil.disk_usage(root).free < size + GiB:
            raise RuntimeError(f"{root}: not enough room for {size >> 20} MiB of data")
        log(f"writing {size >> 20} MiB of data to {path}")
        md5_path.write_text(write_data(path, size))
    return path, md5_path.read_text()


# -- the uWSGI workers' memory ---------------------------------------------------------------


class WorkerPeak:
    """The peak RSS of the worker of a server that served one run, and its RSS before it."""

    def __init__(self, api):
        self.peak = memory.Peak(memory.children(api.pid))

    def stop(self):
        """The worker that grew most (the one that served the run): its baseline and peak."""
        peaks, baseline = self.peak.stop(), self.peak.baseline
        pid = max(peaks, key=lambda p: peaks[p] - baseline[p])
        return {
            "worker_baseline_rss_mib": baseline[pid],
            "worker_peak_rss_mib": peaks[pid],
            "worker_peak_from": self.peak.source,
        }


# -- runs ------------------------------------------------------------------------------------


def api_upload(api, path, md5):
    """glanceclient's upload with no size, as nova's snapshot upload: the image's id and the
    run's figures."""
    image_id = api.create_image("huge unknown size")
    try:
        peak = WorkerPeak(api)
        started = time.perf_counter()
        try:
            with open(path, "rb") as data:
                glance_client(api).images.upload(image_id, data)
        finally:
            seconds = time.perf_counter() - started
            memory = peak.stop()
        image = api.image(image_id)
        size = path.stat().st_size
        if (image["status"], image["size"], image["checksum"]) != ("active", size, md5):
            raise RuntimeError(
                f"upload to {api.url}: {image['status']} {image['size']} "
                f"{image['checksum']}, expected {size} bytes of md5 {md5}"
            )
    except BaseException:
        api.delete(image_id)
        raise
    found = re.search(
        rf"stored image {image_id} with the native writer: .* (\d+) resizes", api.log()
    )
    return image_id, {
        "seconds": seconds,
        **memory,
        "resizes": int(found.group(1)) if found else None,
    }


def api_download(api, image_id, size, md5):
    """A GET of the image's data, hashed as it arrives."""
    peak = WorkerPeak(api)
    conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=600)
    digest, received = hashlib.md5(), 0
    started = time.perf_counter()
    try:
        conn.request("GET", f"/v2/images/{image_id}/file")
        resp = conn.getresponse()
        while chunk := resp.read(MiB):
            digest.update(chunk)
            received += len(chunk)
        status = resp.status
    finally:
        seconds = time.perf_counter() - started
        conn.close()
        memory = peak.stop()
    if (status, received, digest.hexdigest()) != (200, size, md5):
        raise RuntimeError(
            f"download from {api.url}: {status}, {received} bytes of md5 "
            f"{digest.hexdigest()}, expected {size} of {md5}"
        )
    return {"seconds": seconds, **memory}


def child(module, *args, env=None, timeout=CHILD_TIMEOUT, series=False):
    """Runs `python -m module args` from the checkout (without the switch in its environment,
    unless `env` says otherwise); the JSON object of its last line.

    series: also its RSS over its transfer, read every SAMPLE seconds from outside, as
    result["rss_series"]: [[seconds since the transfer started, RSS over the child's baseline
    in MiB], ...] (the child reports when it started, "started_unix", and its baseline).
    """
    cmd = [sys.executable, "-m", module, *map(str, args)]
    if env is None:
        env = {k: v for k, v in os.environ.items() if k != "GLANCE_RBD_NATIVE"}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, cwd=CHECKOUT, stdout=out, stderr=err, text=True, env=env)
        samples, deadline = [], time.monotonic() + timeout
        while proc.poll() is None:
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise RuntimeError(f"{' '.join(cmd)}: not done within {timeout} s")
            if series:
                with contextlib.suppress(OSError, AttributeError):
                    samples.append((time.time(), memory.status_mib(proc.pid, "VmRSS")))
            time.sleep(SAMPLE if series else 0.05)
        out.seek(0)
        err.seek(0)
        if proc.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{err.read()[-3000:]}")
        result = json.loads(out.read().strip().splitlines()[-1])
    if series:
        start, end = result["started_unix"], result["started_unix"] + result["seconds"]
        result["rss_series"] = [
            [round(at - start, 2), round(rss - result["baseline_rss_mib"], 1)]
            for at, rss in samples
            if start <= at <= end
        ]
    return result


def direct(cluster, images, driver, path, md5, series=False):
    """Store.add with size 0, then Store.get of what it stored, each in a child; removes the
    images. The two runs' figures (with their RSS over time: `series`)."""
    common = (
        "--conf",
        cluster.conf_path,
        "--pool",
        cluster.pool,
        "--driver",
        driver,
        "--expect-md5",
        md5,
    )
    upload = child("benchmarks.upload", *common, "--file", path, "--unknown-size", series=series)
    try:
        if not upload["ok"]:
            raise RuntimeError(f"{driver} Store.add went wrong: {upload['errors']}")
        # The first image is the upload, the last the child's warm-up.
        read = child(
            "benchmarks.download", *common, "--image", upload["images"][0], "--hash", series=series
        )
        if not read["ok"]:
            raise RuntimeError(f"{driver} Store.get went wrong: {read}")
    finally:
        for name in upload["images"]:
            images.remove(name)
    return upload, read


def huge_rows(cluster, servers, root, size=SIZE):
    """Runs the four cases, native and stock in turn, once each; returns every sample by case
    ("api upload native", "direct read stock", ...).

    cluster: a running Cluster whose OSD has room for an image of `size` and some more (each
    image is deleted before the next is stored). servers: "native" and "stock" -> a running
    GlanceApi on it, alike but for GLANCE_RBD_NATIVE, with any number of uWSGI workers (the one
    that served a run is the one reported). root: a directory for the data file, which needs
    `size` bytes free and is kept for the next call.
    """
    path, md5 = data_file(root, size)
    samples = {"size": size}
    images = Images(cluster)
    try:
        for driver in DRIVERS:
            api = servers[driver]
            log(f"{driver}: upload through glance-api, no size")
            image_id, samples[f"api upload {driver}"] = api_upload(api, path, md5)
            try:
                log(f"{driver}: download through glance-api")
                samples[f"api download {driver}"] = api_download(api, image_id, size, md5)
            finally:
                api.delete(image_id)
        for driver in DRIVERS:
            log(f"{driver}: Store.add with size 0, then Store.get")
            samples[f"direct upload {driver}"], samples[f"direct read {driver}"] = direct(
                cluster, images, driver, path, md5, series=True
            )
    finally:
        images.close()
    return samples


def table(samples):
    """One row per case: seconds, MiB/s, peak RSS over the baseline, native against stock."""
    size = samples["size"]
    rows = []
    for case, what in (
        ("api upload", "upload through glance-api, glanceclient with no size"),
        ("api download", "download through glance-api (GET, md5 checked)"),
        ("direct upload", "Store.add with size 0"),
        ("direct read", "Store.get, the consumer hashing md5 and sha512"),
    ):
        row = {"case": f"{size // GiB} GiB {what}"}
        for driver in DRIVERS:
            s = samples[f"{case} {driver}"]
            if case.startswith("api"):
                baseline, peak = s["worker_baseline_rss_mib"], s["worker_peak_rss_mib"]
            else:
                baseline, peak = s["baseline_rss_mib"], s["peak_rss_mib"]
            row[driver] = {
                "seconds": round(s["seconds"], 2),
                "mib_per_s": round(size / MiB / s["seconds"]),
                "peak_rss_mib": round(peak),
                "peak_over_baseline_mib": round(peak - baseline),
            }
            if s.get("resizes") is not None:
                row[driver]["resizes"] = s["resizes"]
        row["native_speedup"] = round(
            samples[f"{case} stock"]["seconds"] / samples[f"{case} native"]["seconds"], 2
        )
        rows.append(row)
    return rows


def main():
    root = pathlib.Path(tempfile.mkdtemp(prefix="grn-huge-", dir="/tmp"))
    try:
        # One image at a time, but the OSD's sparse file keeps the blocks of deleted ones, and
        # bluestore need not write the next image over them.
        osd_gib = 2 * SIZE // GiB + 8
        if shutil.disk_usage(root).free < SIZE + osd_gib * GiB:
            raise RuntimeError(f"{root}: {SIZE // GiB + osd_gib} GiB free needed")
        log(f"booting a throwaway cluster in {root}")
        with Cluster(root, osd_size_gib=osd_gib) as cluster, MariaDB(root / "mariadb") as db:
            servers = {}
            try:
                for driver in DRIVERS:
                    servers[driver] = GlanceApi(
                        root / f"glance-{driver}",
                        cluster.conf_path,
                        db.create_database(f"glance_{driver}"),
                        native=driver == "native",
                    ).start()
                started = time.monotonic()
                samples = huge_rows(cluster, servers, root)
                samples["wall_seconds"] = time.monotonic() - started
            finally:
                for api in servers.values():
                    api.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({"samples": samples, "table": table(samples)}, indent=1))


if __name__ == "__main__":
    main()
