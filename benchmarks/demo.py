"""The main job, side by side: one generated image uploaded through glance_store's stock rbd
driver and through the native writer, on a throwaway Ceph cluster.

    make demo                       # 1 GiB; or python -m benchmarks.demo
    DEMO_SIZE_MIB=256 make demo
"""

import hashlib
import logging
import os
import pathlib
import shutil
import tempfile
import time
import warnings

# futurist, which comes with glance, imports eventlet, and eventlet warns that it is deprecated:
# the filter goes first, before glance_store's import (hence E402 below).
warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")
# The drivers' warnings (stock warns on every unknown-size upload), with where they come from.
logging.basicConfig(format="  %(levelname)s %(name)s: %(message)s")
# stevedore tries every store glance knows of; cinder's needs os_brick, which this host lacks.
logging.getLogger("stevedore").setLevel(logging.CRITICAL)

import numpy as np  # noqa: E402

import glance_rbd_native  # noqa: E402
from tests.harness.cluster import Cluster  # noqa: E402
from tests.harness.data import MiB, new_name  # noqa: E402
from tests.harness.stores import make_store  # noqa: E402


def generate(path, size):
    rng = np.random.default_rng(42)
    with open(path, "wb") as out:
        left = size
        while left:
            step = min(left, 64 * MiB)
            out.write(rng.integers(0, 256, step, dtype=np.uint8).tobytes())
            left -= step


def file_digests(path):
    md5, sha512 = hashlib.md5(), hashlib.sha512()
    with open(path, "rb") as src:
        while chunk := src.read(8 * MiB):
            md5.update(chunk)
            sha512.update(chunk)
    return md5.hexdigest(), sha512.hexdigest()


def upload(cluster, path, declared_size):
    store = make_store(cluster)
    name = new_name()
    with open(path, "rb") as src:
        started = time.perf_counter()
        _, written, md5, sha512, _ = store.add(name, src, declared_size, "sha512")
        seconds = time.perf_counter() - started
    cluster.rbd("snap", "unprotect", f"{cluster.pool}/{name}@snap")
    cluster.rbd("snap", "purge", f"{cluster.pool}/{name}")
    cluster.rbd("rm", f"{cluster.pool}/{name}")
    return seconds, written, md5, sha512


def main():
    size = int(os.environ.get("DEMO_SIZE_MIB", "1024")) * MiB
    root = pathlib.Path(tempfile.mkdtemp(prefix="grn-demo-", dir="/tmp"))
    try:
        print(f"booting a throwaway Ceph cluster (mon + bluestore osd) in {root} ...", flush=True)
        with Cluster(root) as cluster:
            path = root / "image.raw"
            generate(path, size)
            expected = file_digests(path)
            print(f"uploading {size // MiB} MiB of random data, sha512 multihash, 8 MiB chunks\n")
            print(f"{'driver':<8}{'size':<9}{'seconds':>9}{'MiB/s':>9}  checksums")
            rows = {}
            for mode, declared in (("known", size), ("unknown", 0)):
                for driver in ("stock", "native"):
                    if driver == "native":
                        glance_rbd_native.patch()
                    else:
                        glance_rbd_native.unpatch()
                    seconds, written, md5, sha512 = upload(cluster, path, declared)
                    ok = written == size and (md5, sha512) == expected
                    rows[driver, mode] = seconds
                    print(
                        f"{driver:<8}{mode:<9}{seconds:>9.2f}{size / MiB / seconds:>9.0f}  "
                        f"{'equal to the source' if ok else 'DIFFERENT'}",
                        flush=True,
                    )
                    if not ok:
                        raise SystemExit(f"{driver} upload does not match the source")
            glance_rbd_native.unpatch()
            print()
            for mode in ("known", "unknown"):
                ratio = rows["stock", mode] / rows["native", mode]
                print(f"{mode} size: native is {ratio:.2f}x the speed of stock")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
