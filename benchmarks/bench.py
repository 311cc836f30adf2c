"""`make bench`: every performance target, side by side in one run, on a throwaway cluster.

Each measurement is a child process (benchmarks/upload.py and download.py, or the Ceph and
coreutils tools), so CPU time, peak RSS and CEPH_ARGS belong to it alone. The glance-api rows
drive glance-api servers under uWSGI (tests/harness/glance_api.py: master, 2 processes of 2
threads, lazy-apps) that differ only in GLANCE_RBD_NATIVE: PUTs from this process, and
copy-image between two rbd backends of multi-store servers.
Every row runs ROUNDS times, interleaved, and reports medians. The table goes to stdout,
everything measured to BENCH_JSON, and charts of it next to that file (benchmarks/charts.py;
without matplotlib, a line says so and the run ends as before).

    make bench                      # 1 GiB images, 3 rounds; or python -m benchmarks.bench
    BENCH_ROUNDS=5 BENCH_SIZE_MIB=512 make bench
    BENCH_ONLY=huge,deletes make bench   # some groups of rows

Four groups of rows: "transfers" (one transfer at a time, every path), "scale" (many
transfers in one process, the eventlet hub), "huge" (the 10 GiB image of unknown size through
glance-api and the driver, with the RSS over time of the driver's read and upload) and
"deletes" (DELETE through glance-api of 1 GiB and 10 GiB images: benchmarks/deletes.py).
The cluster has a manager, as production ones do: native's delete hands the data's removal to it.
"""

import contextlib
import functools
import json
import os
import pathlib
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from benchmarks import charts, deletes, huge
from debian_root import TRIXIE, DebianRoot, build_deb
from glance_rbd_native import DEFAULT_MAX_IN_FLIGHT
from tests.harness import hub_latency, venvs
from tests.harness.cluster import Cluster
from tests.harness.glance_api import BACKEND, SECOND_BACKEND, SECOND_POOL, GlanceApi
from tests.harness.mariadb import MariaDB

# The import root: the children run `python -m benchmarks.upload` (and download, sleeper) in it.
CHECKOUT = pathlib.Path(__file__).resolve().parents[1]

MiB = 1 << 20
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
SIZE = int(os.environ.get("BENCH_SIZE_MIB", "1024")) * MiB
BIG = 4 * SIZE
OUT = pathlib.Path(os.environ.get("BENCH_JSON", ".bench/results.json"))
LATENCY = "--ms_inject_delay_type osd --ms_inject_delay_probability 1 --ms_inject_delay_max 0.02"
CHUNK = 8 * MiB
GROUPS = [g for g in os.environ.get("BENCH_ONLY", "transfers,scale,huge,deletes").split(",") if g]
READ = "read-source"  # the image the read rows read
READ_MANY = "read-many"  # the image the "at once" download rows read: the "quarter" file
# Transfers at once in one process (benchmarks/many.py), and the MiB of each.
MANY = ((4, 256), (16, 256), (64, 128))
# The seed's case (benchmarks/huge.py), run once; also at SIZE, to compare the peaks.
HUGE = int(os.environ.get("BENCH_HUGE_GIB", "10")) << 30
DELETE_SIZES = (SIZE, HUGE)  # benchmarks/deletes.py: the images deleted
SNAP = "snap"  # glance's snapshot name


# -- data ------------------------------------------------------------------------------------


def write_random(path, size, seed):
    rng = np.random.default_rng(seed)
    with open(path, "wb") as out:
        for pos in range(0, size, 64 * MiB):
            out.write(rng.integers(0, 256, min(64 * MiB, size - pos), dtype=np.uint8).tobytes())


def write_sparse(path, size, seed, zero_fraction=0.75):
    """Zero runs and data runs of varied length, some 4 KiB multiples and some not."""
    rng = np.random.default_rng(seed)
    buf = np.zeros(size, dtype=np.uint8)
    pos = 0
    while pos < size:
        data_run = int(rng.integers(1, 64)) * 4096
        if rng.random() < 0.5:
            data_run += int(rng.integers(1, 4096))
        zero_run = int(data_run * zero_fraction / (1 - zero_fraction) * rng.uniform(0.5, 1.5))
        end = min(size, pos + data_run)
        buf[pos:end] = rng.integers(1, 256, end - pos, dtype=np.uint8)
        pos = end + zero_run
    buf.tofile(path)
    return float((buf == 0).mean())


def write_half_zero_chunks(path, size, seed):
    """Every other 8 MiB chunk all zero: the worst case of the stock driver's any(chunk)."""
    rng = np.random.default_rng(seed)
    with open(path, "wb") as out:
        for index, pos in enumerate(range(0, size, CHUNK)):
            n = min(CHUNK, size - pos)
            out.write(bytes(n) if index % 2 else rng.integers(0, 256, n, dtype=np.uint8).tobytes())


# -- runners ---------------------------------------------------------------------------------


class Bench:
    def __init__(self, cluster, files, servers, debian13, eventlet):
        self.cluster = cluster
        self.files = files
        self.servers = servers  # "native"/"stock" -> a running GlanceApi
        self.eventlet = eventlet  # "native"/"stock" -> glance's eventlet server, one worker
        self.debian13 = debian13  # a Debian 13 root with the package installed (transfers)
        self.results = {}
        self.rss_series = None  # the "huge" rows': results["rss_series"] (benchmarks/charts.py)

    def env(self, latency=False):
        env = dict(os.environ)
        env.pop("GLANCE_RBD_NATIVE", None)
        if latency:
            env["CEPH_ARGS"] = LATENCY
        return env

    def allocated(self):
        sock = self.cluster.root / "run" / "osd.0.asok"
        out = subprocess.run(
            ["ceph", "--admin-daemon", str(sock), "perf", "dump", "bluestore"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return json.loads(out)["bluestore"]["bluestore_allocated"]

    def remove(self, name):
        pool = self.cluster.pool
        info = json.loads(self.cluster.rbd("snap", "ls", f"{pool}/{name}", "--format", "json"))
        for snap in info:
            if snap.get("protected") == "true":
                self.cluster.rbd("snap", "unprotect", f"{pool}/{name}@{snap['name']}")
        self.cluster.rbd("snap", "purge", f"{pool}/{name}")
        self.cluster.rbd("rm", f"{pool}/{name}")

    def upload(
        self,
        driver,
        file,
        *,
        unknown=False,
        thin=False,
        threads=1,
        gil=False,
        latency=False,
        chunks="bytes",
        debian13=False,
    ):
        """benchmarks/upload.py, by this interpreter or by Debian 13's python3 in its root."""
        cmd = [
            "-m",
            "benchmarks.upload",
            "--conf",
            str(self.cluster.conf_path),
            "--pool",
            self.cluster.pool,
            "--file",
            str(self.files[file]),
            "--driver",
            driver,
            "--threads",
            str(threads),
            "--expect-md5",
            self.files[file + ":md5"],
            "--chunks",
            chunks,
        ]
        cmd += ["--unknown-size"] * unknown + ["--thin"] * thin + ["--gil-probe"] * gil
        before = self.allocated()
        probe = None
        if gil:
            # The same 1 ms sleeper in a separate process: how late the CPU alone makes it.
            probe = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.sleeper"],
                cwd=CHECKOUT,
                stdout=subprocess.PIPE,
                text=True,
            )
        if debian13:
            out = self.debian13.run("python3", *cmd, cwd=str(CHECKOUT), timeout=900, check=False)
        else:
            out = subprocess.run(
                [sys.executable, *cmd],
                cwd=CHECKOUT,
                capture_output=True,
                text=True,
                env=self.env(latency),
                timeout=900,
            )
        if probe:
            probe.terminate()
            sleeper = json.loads(probe.communicate()[0] or "{}")
        if out.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr}")
        result = json.loads(out.stdout.strip().splitlines()[-1])
        result["allocated"] = self.allocated() - before
        if probe:
            result["cpu_late_p999_ms"] = sleeper.get("p999_ms")
        existing = set(self.cluster.images())
        for name in result["images"]:
            if name in existing:
                self.remove(name)
        if not result["ok"]:
            raise RuntimeError(f"{driver} upload of {file} went wrong: {result['errors']}")
        return result

    def through_api(self, server, file, *, chunked=False):
        """One upload through glance-api, from this process: wall time of the PUT."""
        api = self.servers[server]
        path = self.files[file]
        image_id = api.create_image(f"bench {file}")
        try:
            with open(path, "rb") as f:
                body = iter(lambda: f.read(CHUNK), b"") if chunked else f
                started = time.perf_counter()
                status, out = api.upload(
                    image_id, body, size=None if chunked else path.stat().st_size
                )
                seconds = time.perf_counter() - started
            image = api.image(image_id)
        finally:
            api.delete(image_id)
        if status != 204 or image["checksum"] != self.files[file + ":md5"]:
            raise RuntimeError(
                f"upload through {server} glance-api went wrong: {status} "
                f"{out[:300]!r} {image['status']} {image['checksum']}"
            )
        return {"seconds": seconds}

    def download(self, driver, *, hashes=False, latency=False, in_use=False):
        """benchmarks/download.py: Store.get of the image READ holds (the "random" file).

        in_use: with malloc's mmap threshold fixed at 1 MiB (mallopt(3)), so that every freed
        chunk buffer goes back to the system and peak RSS shows the memory in use; by default
        glibc raises the threshold to the size of the buffers freed, and keeps them for reuse.
        """
        args = [
            "--conf",
            self.cluster.conf_path,
            "--pool",
            self.cluster.pool,
            "--image",
            READ,
            "--driver",
            driver,
            "--expect-md5",
            self.files["random:md5"],
        ]
        env = self.env(latency)
        if in_use:
            env["MALLOC_MMAP_THRESHOLD_"] = str(MiB)
        result = huge.child(
            "benchmarks.download", *args, *["--hash"] * hashes, env=env, timeout=900
        )
        if not result["ok"]:
            raise RuntimeError(f"{driver} download went wrong: {result}")
        return result

    def many(self, driver, kind, transfers, size_mib):
        """benchmarks/many.py: `transfers` uploads or downloads at once in one process."""
        result = huge.child(
            "benchmarks.many",
            "--conf",
            self.cluster.conf_path,
            "--pool",
            self.cluster.pool,
            "--driver",
            driver,
            "--kind",
            kind,
            "--transfers",
            transfers,
            "--size-mib",
            size_mib,
            "--image",
            READ_MANY,
            "--expect-md5",
            self.files["quarter:md5"],
            env=self.env(),
            timeout=1800,
        )
        if not result["ok"]:
            raise RuntimeError(f"{driver} {kind} x{transfers} went wrong: {result['errors']}")
        return result

    def hub(self, driver):
        """A GET every hub_latency.INTERVAL to one eventlet worker while it stores 1 GiB, and
        then serves it back: the latencies another request of that worker sees."""
        api = self.eventlet[driver]
        image_id = api.create_image("bench hub")
        try:
            hub_latency.warm_up(api, image_id)
            with open(self.files["random"], "rb") as body:
                (status, out), up = hub_latency.measure(
                    api, image_id, functools.partial(api.upload, image_id, body, size=SIZE)
                )
            if status != 204:
                raise RuntimeError(
                    f"upload to the {driver} eventlet server: {status} {out[:300]!r}"
                )
            _, down = hub_latency.measure(
                api,
                image_id,
                functools.partial(huge.api_download, api, image_id, SIZE, self.files["random:md5"]),
            )
        finally:
            api.delete(image_id)
        failed = up.failed + down.failed
        if failed:
            raise RuntimeError(f"GETs to the {driver} eventlet server failed: {failed[:5]}")
        return {
            f"{phase}_{k}": v
            for phase, latencies in (("upload", up), ("download", down))
            for k, v in latencies.summary().items()
        }

    def rbd_export(self, *, latency=False):
        cmd = [
            "rbd",
            "-c",
            str(self.cluster.conf_path),
            "export",
            "--no-progress",
            f"{self.cluster.pool}/{READ}@{SNAP}",
            "-",
        ]
        started = time.perf_counter()
        subprocess.run(
            cmd, env=self.env(latency), stdout=subprocess.DEVNULL, check=True, timeout=900
        )
        return {"seconds": time.perf_counter() - started}

    def copy_image(self, server):
        """copy-image of a 1 GiB image from ceph1 to ceph2 through a multi-store glance-api:
        from the import request to the image active in both stores."""
        api = self.servers[server]
        image_id = api.create_image("bench copy-image")
        try:
            with open(self.files["random"], "rb") as f:
                status, out = api.upload(image_id, f, size=SIZE)
            if status != 204:
                raise RuntimeError(f"upload to {server}: {status} {out[:300]!r}")
            started = time.perf_counter()
            api.import_image(image_id, "copy-image", stores=[SECOND_BACKEND])
            while True:
                image = api.image(image_id)
                if set(image.get("stores", "").split(",")) >= {BACKEND, SECOND_BACKEND}:
                    break
                if image.get("os_glance_failed_import") or time.perf_counter() - started > 600:
                    raise RuntimeError(f"copy-image on {server} failed: {image}")
                time.sleep(0.05)
            seconds = time.perf_counter() - started
        finally:
            api.delete(image_id)
        return {"seconds": seconds}

    def rbd_import(self, file, *, sparse=False, hashes=False, latency=False):
        name = f"import-{time.monotonic_ns()}"
        cmd = [
            "rbd",
            "-c",
            str(self.cluster.conf_path),
            "import",
            "--object-size",
            "8M",
            "--no-progress",
        ]
        cmd += ["--sparse-size", "4K"] if sparse else []
        cmd += [str(self.files[file]), f"{self.cluster.pool}/{name}"]
        before = self.allocated()
        started = time.perf_counter()
        procs = [subprocess.Popen(cmd, env=self.env(latency), stdout=subprocess.DEVNULL)]
        if hashes:
            procs += [
                subprocess.Popen([tool, str(self.files[file])], stdout=subprocess.DEVNULL)
                for tool in ("md5sum", "sha512sum")
            ]
        if any(p.wait(timeout=900) for p in procs):
            raise RuntimeError(f"{' '.join(cmd)} failed")
        seconds = time.perf_counter() - started
        allocated = self.allocated() - before
        self.cluster.rbd("rm", f"{self.cluster.pool}/{name}")
        return {"seconds": seconds, "allocated": allocated}

    def measure(self, key, run):
        """Runs `run` ROUNDS times (callers interleave keys) and keeps every sample."""
        self.results.setdefault(key, []).append(run())

    def median(self, key, field="seconds"):
        return statistics.median(r[field] for r in self.results[key])


def transfer_rows(bench):
    b = bench
    for round_no in range(ROUNDS):
        print(f"transfers: round {round_no + 1}/{ROUNDS}", flush=True)
        b.measure("stock known", lambda: b.upload("stock", "random"))
        b.measure("native known", lambda: b.upload("native", "random"))
        b.measure(
            "native known bytearray", lambda: b.upload("native", "random", chunks="bytearray")
        )
        b.measure(
            "native known memoryview", lambda: b.upload("native", "random", chunks="memoryview")
        )
        b.measure("native unknown", lambda: b.upload("native", "random", unknown=True))
        b.measure("stock unknown", lambda: b.upload("stock", "random", unknown=True))
        b.measure("rbd import", lambda: b.rbd_import("random"))
        b.measure("rbd import + md5sum + sha512sum", lambda: b.rbd_import("random", hashes=True))
        b.measure("latency stock", lambda: b.upload("stock", "random", latency=True))
        b.measure("latency native", lambda: b.upload("native", "random", latency=True))
        b.measure("latency rbd import", lambda: b.rbd_import("random", latency=True))
        b.measure("4 threads stock", lambda: b.upload("stock", "quarter", threads=4))
        b.measure("4 threads native", lambda: b.upload("native", "quarter", threads=4))
        b.measure("thin stock", lambda: b.upload("stock", "sparse", thin=True))
        b.measure("thin native", lambda: b.upload("native", "sparse", thin=True))
        b.measure("thin rbd import", lambda: b.rbd_import("sparse", sparse=True))
        b.measure("gil native thin", lambda: b.upload("native", "halfzero", thin=True, gil=True))
        b.measure("gil stock thin", lambda: b.upload("stock", "halfzero", thin=True, gil=True))
        b.measure("gil native thick", lambda: b.upload("native", "halfzero", gil=True))
        b.measure("gil stock thick", lambda: b.upload("stock", "halfzero", gil=True))
        b.measure("native big unknown", lambda: b.upload("native", "big", unknown=True))
        b.measure("api stock", lambda: b.through_api("stock", "random"))
        b.measure("api native", lambda: b.through_api("native", "random"))
        b.measure("api native chunked", lambda: b.through_api("native", "random", chunked=True))
        b.measure("api stock chunked", lambda: b.through_api("stock", "random", chunked=True))
        b.measure("debian13 stock", lambda: b.upload("stock", "random", debian13=True))
        b.measure("debian13 native", lambda: b.upload("native", "random", debian13=True))
        b.measure("read stock", lambda: b.download("stock"))
        b.measure("read native", lambda: b.download("native"))
        b.measure("read rbd export", lambda: b.rbd_export())
        b.measure("latency read native", lambda: b.download("native", latency=True))
        b.measure("latency read stock", lambda: b.download("stock", latency=True))
        b.measure("latency read rbd export", lambda: b.rbd_export(latency=True))
        b.measure("hashing read stock", lambda: b.download("stock", hashes=True))
        b.measure("hashing read native", lambda: b.download("native", hashes=True))
        b.measure("in use read native", lambda: b.download("native", in_use=True))
        b.measure("in use read stock", lambda: b.download("stock", in_use=True))
        b.measure("copy-image native", lambda: b.copy_image("native-multistore"))
        b.measure("copy-image stock", lambda: b.copy_image("stock-multistore"))


def scale_rows(bench):
    b = bench
    for round_no in range(ROUNDS):
        print(f"scale: round {round_no + 1}/{ROUNDS}", flush=True)
        for driver in ("native", "stock"):
            b.measure(f"hub {driver}", lambda d=driver: b.hub(d))
        for transfers, size_mib in MANY:
            for kind in ("upload", "download"):
                for driver in ("stock", "native"):
                    b.measure(
                        f"{transfers} {kind}s at once {driver}",
                        lambda d=driver, k=kind, n=transfers, mib=size_mib: b.many(d, k, n, mib),
                    )


def huge_rows(bench):
    """Once: a round is minutes long at this size. The RSS of the driver's read and upload of
    HUGE over time, for the charts."""
    b = bench
    print(f"huge: {HUGE >> 30} GiB and {SIZE // MiB} MiB of unknown size", flush=True)
    for size in (SIZE, HUGE):
        b.results[f"huge {size}"] = huge.huge_rows(b.cluster, b.servers, b.cluster.root, size=size)
    b.rss_series = {"bound_mib": DEFAULT_MAX_IN_FLIGHT // MiB}
    for driver in ("native", "stock"):
        for what in ("upload", "read"):
            sample = b.results[f"huge {HUGE}"][f"direct {what} {driver}"]
            b.rss_series[f"{HUGE >> 30} GiB {what} {driver}"] = sample.pop("rss_series")
    for sample in b.results[f"huge {SIZE}"].values():
        if isinstance(sample, dict):
            sample.pop("rss_series", None)


def huge_table(bench):
    """The seed's case: rows of benchmarks/huge.py at HUGE, with the peaks at SIZE beside."""
    rows = []
    big = {r["case"].split(" ", 2)[2]: r for r in huge.table(bench.results[f"huge {HUGE}"])}
    small = {r["case"].split(" ", 2)[2]: r for r in huge.table(bench.results[f"huge {SIZE}"])}
    for what, row in big.items():
        n, s, one = row["native"], row["stock"], small[what]["native"]
        measured = (
            f"native {n['seconds']:.1f}s, stock {s['seconds']:.1f}s "
            f"({row['native_speedup']:.2f}x); peak RSS over baseline: native "
            f"{n['peak_over_baseline_mib']} MiB ({one['peak_over_baseline_mib']} MiB at "
            f"{SIZE // MiB} MiB), stock {s['peak_over_baseline_mib']} MiB"
        )
        if "resizes" in n:
            measured += f"; resizes: native {n['resizes']}"
        target, met = "reported", None
        if what.startswith(("Store.add", "Store.get")):
            bound = DEFAULT_MAX_IN_FLIGHT // MiB
            target = f"native peak <= bound ({bound} MiB) + 64 MiB"
            met = n["peak_over_baseline_mib"] <= bound + 64
        if what.startswith("upload through glance-api"):
            target = ">= 1.8x stock; native peak at 10 GiB within 16 MiB of 1 GiB's"
            met = (
                row["native_speedup"] >= 1.8
                and abs(n["peak_over_baseline_mib"] - one["peak_over_baseline_mib"]) <= 16
            )
        rows.append({"case": row["case"], "measured": measured, "target": target, "met": met})
    return rows


def scale_table(bench):
    m = bench.median
    rows = []
    p99 = {
        (d, phase): m(f"hub {d}", f"{phase}_p99_ms")
        for d in ("native", "stock")
        for phase in ("upload", "download")
    }
    p50 = {
        (d, phase): m(f"hub {d}", f"{phase}_p50_ms")
        for d in ("native", "stock")
        for phase in ("upload", "download")
    }
    rows.append(
        {
            "case": f"eventlet glance-api (glance 32), one worker: GET /v2/images/ID every "
            f"{hub_latency.INTERVAL * 1000:.0f} ms during a {SIZE // MiB} MiB upload, then "
            f"its download (p50 / p99)",
            "measured": "; ".join(
                f"{phase}: native {p50['native', phase]:.0f} / "
                f"{p99['native', phase]:.0f} ms, stock {p50['stock', phase]:.0f} / "
                f"{p99['stock', phase]:.0f} ms"
                for phase in ("upload", "download")
            ),
            "target": "native p99 <= 100 ms",
            "met": max(p99["native", "upload"], p99["native", "download"]) <= 100,
        }
    )
    for transfers, size_mib in MANY:
        for kind in ("upload", "download"):
            key = f"{transfers} {kind}s at once"
            t_n, t_s = m(f"{key} native"), m(f"{key} stock")
            peak = {
                d: m(f"{key} {d}", "peak_rss_mib") - m(f"{key} {d}", "baseline_rss_mib")
                for d in ("native", "stock")
            }
            kept = {
                d: m(f"{key} {d}", "kept_rss_mib") - m(f"{key} {d}", "baseline_rss_mib")
                for d in ("native", "stock")
            }
            measured = (
                f"native {t_n:.2f}s, stock {t_s:.2f}s ({t_n / t_s:.2f}x stock's time); "
                f"peak over baseline: native {peak['native']:.0f} MiB, stock "
                f"{peak['stock']:.0f} MiB; kept after: native {kept['native']:.0f} MiB, "
                f"stock {kept['stock']:.0f} MiB"
            )
            target, met = "reported", None
            if transfers == 16:
                target = "native peak <= stock + 128 MiB; time <= 1.1x stock"
                met = peak["native"] <= peak["stock"] + 128 and t_n <= 1.1 * t_s
            each = size_mib if kind == "upload" else SIZE // 4 // MiB  # READ_MANY
            rows.append(
                {
                    "case": f"{transfers} {kind}s at once in one process, {each} MiB "
                    f"each, a Store each (default bound)",
                    "measured": measured,
                    "target": target,
                    "met": met,
                }
            )
    return rows


def transfer_table(bench):
    b = bench
    m = b.median
    gib = SIZE / (1 << 30)
    rows = []

    def row(case, measured, target, met):
        rows.append({"case": case, "measured": measured, "target": target, "met": met})

    known, stock = m("native known"), m("stock known")
    c_tools = m("rbd import + md5sum + sha512sum")
    row(
        "local, known size",
        f"native {known:.2f}s, stock {stock:.2f}s ({stock / known:.2f}x); "
        f"rbd import {m('rbd import'):.2f}s; "
        f"rbd import || md5sum || sha512sum {c_tools:.2f}s",
        ">= 2x stock; <= C tools",
        stock / known >= 2 and known <= c_tools,
    )
    kinds = {
        kind: (m(f"native known{suffix}"), m(f"native known{suffix}", "cpu_seconds") / gib)
        for kind, suffix in (
            ("bytes", ""),
            ("bytearray", " bytearray"),
            ("memoryview", " memoryview"),
        )
    }
    row(
        "write() input kinds, native, known size (time, client CPU per GiB)",
        "; ".join(f"{kind} {t:.2f}s, {cpu:.2f}s CPU" for kind, (t, cpu) in kinds.items()),
        "bytes read in place: the least CPU",
        kinds["bytes"][1] <= min(cpu for _, cpu in kinds.values()),
    )
    unknown = m("native unknown")
    big = b.results["native big unknown"][0]
    resizes = (
        f"; {BIG // MiB} MiB unknown-size: {big['resizes']} resizes, "
        f"final trim {big['trim_seconds'] * 1000:.0f} ms"
    )
    row(
        "local, unknown size",
        f"native {unknown:.2f}s ({unknown / known:.2f}x known); "
        f"stock {m('stock unknown'):.2f}s{resizes}",
        "within 10% of known",
        unknown <= 1.1 * known,
    )
    lat_n, lat_s, lat_i = m("latency native"), m("latency stock"), m("latency rbd import")
    row(
        "latency model (20 ms)",
        f"native {lat_n:.2f}s, stock {lat_s:.2f}s ({lat_s / lat_n:.2f}x); rbd import {lat_i:.2f}s "
        f"({lat_n / lat_i:.2f}x)",
        ">= 3.5x stock; <= 1.3x rbd import",
        lat_s / lat_n >= 3.5 and lat_n <= 1.3 * lat_i,
    )
    t_n = SIZE / MiB / m("4 threads native")
    t_s = SIZE / MiB / m("4 threads stock")
    row(
        "4 uploads at once, one Store",
        f"native {t_n:.0f} MiB/s, stock {t_s:.0f} MiB/s aggregate ({t_n / t_s:.2f}x)",
        ">= 2x stock, all correct",
        t_n >= 2 * t_s,
    )
    alloc = {k: m(k, "allocated") / MiB for k in ("thin native", "thin stock", "thin rbd import")}
    thin_n, thin_s = m("thin native"), m("thin stock")
    row(
        "thin, 75% zeros",
        f"allocated: native {alloc['thin native']:.0f} MiB, rbd import --sparse-size 4K "
        f"{alloc['thin rbd import']:.0f} MiB, stock {alloc['thin stock']:.0f} MiB; "
        f"native {thin_n:.2f}s, stock {thin_s:.2f}s ({thin_s / thin_n:.2f}x)",
        "<= rbd import allocation; >= 3x stock",
        alloc["thin native"] <= alloc["thin rbd import"] and thin_s / thin_n >= 3,
    )
    cpu_n = m("native known", "cpu_seconds") / gib
    cpu_s = m("stock known", "cpu_seconds") / gib
    row(
        "client CPU per GiB",
        f"native {cpu_n:.2f}s, stock {cpu_s:.2f}s ({cpu_n / cpu_s:.2f}x)",
        "<= 1.1x stock",
        cpu_n <= 1.1 * cpu_s,
    )
    growth = {
        k: m(k, "peak_rss_mib") - m(k, "baseline_rss_mib")
        for k in ("native known", "native big unknown")
    }
    bound = DEFAULT_MAX_IN_FLIGHT // MiB
    row(
        "peak RSS over the process baseline",
        f"native {growth['native known']:.0f} MiB ({SIZE // MiB} MiB image), "
        f"{growth['native big unknown']:.0f} MiB ({BIG // MiB} MiB image); "
        f"in-flight bound {bound} MiB",
        "<= bound + 64 MiB, same for both sizes",
        max(growth.values()) <= bound + 64
        and abs(growth["native known"] - growth["native big unknown"]) < 16,
    )
    gil = {
        k: (m(k, "gil_late_p999_ms"), m(k, "cpu_late_p999_ms"))
        for k in ("gil native thin", "gil stock thin", "gil native thick", "gil stock thick")
    }
    row(
        "1 ms sleeper lateness, p99.9 (in process / separate process)",
        "; ".join(f"{k[4:]} {a:.1f} / {c:.1f} ms" for k, (a, c) in gil.items()),
        "<= 10 ms during a native thin upload",
        gil["gil native thin"][0] <= 10,
    )
    api = {k: m(k) for k in ("api native", "api stock", "api native chunked", "api stock chunked")}
    row(
        "through glance-api (uWSGI: 2 processes x 2 threads, lazy-apps), client on the same host",
        f"Content-Length: native {api['api native']:.2f}s, stock {api['api stock']:.2f}s "
        f"({api['api stock'] / api['api native']:.2f}x); chunked: native "
        f"{api['api native chunked']:.2f}s, stock {api['api stock chunked']:.2f}s "
        f"({api['api stock chunked'] / api['api native chunked']:.2f}x)",
        "reported",
        None,
    )
    for case, key, target, goal in (
        ("read, local", "", ">= 1.6x stock; <= 1.15x rbd export", 1.6),
        ("read, latency model (20 ms)", "latency ", ">= 2.8x stock; <= 1.15x rbd export", 2.8),
    ):
        r_n, r_s, r_x = m(f"{key}read native"), m(f"{key}read stock"), m(f"{key}read rbd export")
        row(
            case,
            f"native {r_n:.2f}s, stock {r_s:.2f}s ({r_s / r_n:.2f}x); rbd export "
            f"{r_x:.2f}s ({r_n / r_x:.2f}x)",
            target,
            r_s / r_n >= goal and r_n <= 1.15 * r_x,
        )
    h_n, h_s = m("hashing read native"), m("hashing read stock")
    row(
        "read, the consumer hashing md5 and sha512",
        f"native {h_n:.2f}s, stock {h_s:.2f}s ({h_s / h_n:.2f}x)",
        ">= 1.7x stock",
        h_s / h_n >= 1.7,
    )
    peak = {
        k: m(k, "peak_rss_mib") - m(k, "baseline_rss_mib")
        for k in ("read native", "read stock", "in use read native", "in use read stock")
    }
    row(
        "read, peak RSS over the process baseline: memory in use (malloc's mmap threshold "
        "fixed); with glibc's defaults",
        f"in use: native {peak['in use read native']:.0f} MiB, stock "
        f"{peak['in use read stock']:.0f} MiB; defaults: native {peak['read native']:.0f} MiB, "
        f"stock {peak['read stock']:.0f} MiB; read-ahead bound {bound} MiB + one "
        f"{CHUNK // MiB} MiB chunk",
        "in use: native - stock <= bound + one chunk",
        peak["in use read native"] - peak["in use read stock"] <= bound + CHUNK // MiB,
    )
    c_n, c_s = m("copy-image native"), m("copy-image stock")
    row(
        "copy-image ceph1 -> ceph2 through glance-api (multi-store, uWSGI)",
        f"native {c_n:.2f}s, stock {c_s:.2f}s ({c_s / c_n:.2f}x)",
        "reported",
        None,
    )
    d_n, d_s = m("debian13 native"), m("debian13 stock")
    row(
        "Debian 13 root (Python 3.13, glance_store 4.9.1, Ceph 18.2.7 clients), known size, "
        "the host's wheel",
        f"native {d_n:.2f}s, stock {d_s:.2f}s ({d_s / d_n:.2f}x)",
        "reported",
        None,
    )
    return rows


def checkout_commit():
    """The checkout's commit, short (the results name it), or None: no git, or no repository."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=CHECKOUT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode:
        return None
    return out.stdout.strip() or None


def main():
    # Before the run: the code measured, whatever is committed while it runs.
    commit = checkout_commit()
    root = pathlib.Path(tempfile.mkdtemp(prefix="grn-bench-", dir="/tmp"))
    try:
        print(
            f"booting a throwaway cluster (mon + bluestore osd on a sparse file) in {root}",
            flush=True,
        )
        # Sparse: room for the largest images, and for the blocks bluestore does not reuse.
        osd_gib = (3 * BIG + 2 * HUGE) // (1 << 30) + 8
        with Cluster(root, osd_size_gib=osd_gib, with_mgr=True) as cluster:
            files = {}
            for name, size, make in (
                ("random", SIZE, write_random),
                ("quarter", SIZE // 4, write_random),
                ("sparse", SIZE, write_sparse),
                ("halfzero", SIZE, write_half_zero_chunks),
                ("big", BIG, write_random),
            ):
                files[name] = root / f"{name}.raw"
                make(files[name], size, seed=len(files))
                files[name + ":md5"] = subprocess.run(
                    ["md5sum", str(files[name])], capture_output=True, text=True, check=True
                ).stdout.split()[0]
            with contextlib.ExitStack() as stack:
                db = stack.enter_context(MariaDB(root / "mariadb"))
                cluster.create_pool(SECOND_POOL)
                servers = {
                    name: stack.enter_context(
                        GlanceApi(
                            root / f"glance-{name}",
                            cluster.conf_path,
                            db.create_database(f"glance_{name.replace('-', '_')}"),
                            native=name.startswith("native"),
                            multistore=name.endswith("multistore"),
                        )
                    )
                    for name in ("native", "stock", "native-multistore", "stock-multistore")
                    if "transfers" in GROUPS or not name.endswith("multistore")
                }
                # The image every read row reads, stored as glance stores one (a protected
                # snapshot), from the random file.
                cluster.rbd(
                    "import",
                    "--object-size",
                    "8M",
                    "--no-progress",
                    str(files["random"]),
                    f"{cluster.pool}/{READ}",
                    timeout=600,
                )
                cluster.rbd("snap", "create", f"{cluster.pool}/{READ}@{SNAP}")
                cluster.rbd("snap", "protect", f"{cluster.pool}/{READ}@{SNAP}")
                debian13 = None
                if "transfers" in GROUPS:
                    debian13 = DebianRoot.ensure(
                        TRIXIE, binds=[root, CHECKOUT], read_only=[CHECKOUT]
                    )
                    stack.callback(debian13.close)
                    debian13.install_deb(build_deb(venvs.wheel(), root / "deb"))
                    stack.callback(debian13.remove_deb)
                cluster.rbd(
                    "import",
                    "--object-size",
                    "8M",
                    "--no-progress",
                    str(files["quarter"]),
                    f"{cluster.pool}/{READ_MANY}",
                    timeout=600,
                )
                cluster.rbd("snap", "create", f"{cluster.pool}/{READ_MANY}@{SNAP}")
                cluster.rbd("snap", "protect", f"{cluster.pool}/{READ_MANY}@{SNAP}")
                # glance's own eventlet server (glance 32), one worker: the hub rows.
                eventlet = {}
                if "scale" in GROUPS:
                    for name in ("native", "stock"):
                        eventlet[name] = stack.enter_context(
                            GlanceApi(
                                root / f"glance-eventlet-{name}",
                                cluster.conf_path,
                                db.create_database(f"glance_eventlet_{name}"),
                                native=name == "native",
                                server="eventlet",
                                bin_dir=venvs.eventlet_glance(),
                                processes=1,
                            )
                        )
                        hub_latency.warm_up_transfers(eventlet[name])
                bench = Bench(cluster, files, servers, debian13, eventlet)
                if "transfers" in GROUPS:
                    transfer_rows(bench)
                if "scale" in GROUPS:
                    scale_rows(bench)
                if "huge" in GROUPS:
                    huge_rows(bench)
                if "deletes" in GROUPS:
                    bench.results.update(
                        deletes.rows(cluster, db, root, DELETE_SIZES, ROUNDS, LATENCY)
                    )
            rows = []
            if "transfers" in GROUPS:
                rows += transfer_table(bench)
            if "scale" in GROUPS:
                rows += scale_table(bench)
            if "huge" in GROUPS:
                rows += huge_table(bench)
            if "deletes" in GROUPS:
                rows += deletes.table(bench.results, DELETE_SIZES)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    machine = f"{os.cpu_count()} cores, {platform.machine()}, Ceph 16.2, bluestore on a file"
    print(f"\n{ROUNDS} rounds, medians; {SIZE // MiB} MiB images; {machine}\n")
    print("| case | measured | target | met |\n|---|---|---|---|")
    for r in rows:
        met = "-" if r["met"] is None else "yes" if r["met"] else "no"
        print(f"| {r['case']} | {r['measured']} | {r['target']} | {met} |")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(
        json.dumps(
            {
                "rounds": ROUNDS,
                "size": SIZE,
                "groups": GROUPS,
                "machine": machine,
                "commit": commit,
                "rows": rows,
                "samples": bench.results,
                **({"rss_series": bench.rss_series} if bench.rss_series else {}),
            },
            indent=1,
        )
    )
    print(f"\nall samples: {OUT}")
    # Once the results are written: a chart that cannot be drawn loses nothing of them.
    charts.after_run(OUT)


if __name__ == "__main__":
    main()
