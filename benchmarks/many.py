"""K transfers at once in one process, each in a thread with a Store of its own (as glance-api
makes one per request), so their peak and kept RSS are this process's alone.

    python -m benchmarks.many --conf C --pool P --driver native|stock
        --kind upload|download|mixed [--transfers K] [--size-mib N] [--unknown-size]
        [--image NAME [--expect-md5 MD5]] [--max-in-flight-mib M] [--seed S] [--watch-bound]

Uploads send --size-mib each, every chunk a new bytes object (as a socket read gives), cut from
a seeded random pool, so no file is needed. Downloads read --image at glance's snapshot, which
the caller stores once (`create_image`). mixed runs half uploads and half downloads, at least one
of each. After the measurement every byte is checked: the md5 each upload's Store.add returned,
and each stored snapshot read back through Debian's rbd module, against the source's; each
download's md5 against --expect-md5 (without it, the image read through Debian's rbd module).
The images it created are removed before it exits.

Prints one JSON object: ok, errors, wall seconds of the transfers, RSS before them (baseline),
their peak (VmHWM, reset just before), RSS kept 1.5 s after they end and then after a
malloc_trim of its own (trimmed: what the driver left for glibc to give back), and for native
the bound, what in_flight() says once they are done, and with --watch-bound the most it
showed held while they ran.
"""

import argparse
import ctypes
import gc
import hashlib
import io
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing

import numpy as np
import rbd as rbd_module
from glance_store import location
from glance_store._drivers import rbd

import glance_rbd_native
from benchmarks.upload import status_mib
from tests.harness.cluster import Cluster
from tests.harness.data import MiB, new_name
from tests.harness.stores import SNAP, Images, make_store

CHUNK = 8 * MiB  # glance's rbd_store_chunk_size: what the store reads and writes at a time
# Large enough that the chunks of a run start at distinct offsets: a chunk stored in the wrong
# image, or at the wrong place, changes the md5.
POOL = 32 * MiB


def data_pool(seed):
    """The random bytes every chunk is cut from; allocated before the baseline is taken."""
    return np.random.default_rng(seed).bytes(POOL)


class Source:
    """`size` bytes read as glance reads a request body: each read a new bytes object of at most
    one chunk. Chunk n is the pool from an offset that the key and n decide, so the data is the
    same on every run and no buffer the size of the image is ever held."""

    def __init__(self, pool, size, key):
        self.pool, self.size, self.key = pool, size, key
        self.pos = 0

    def _offset(self, index):
        digest = hashlib.blake2b(f"{self.key}/{index}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "little") % (len(self.pool) - CHUNK + 1)

    def read(self, size=-1):
        left = self.size - self.pos
        within = self.pos % CHUNK
        n = min(left, CHUNK - within, left if size < 0 else size)
        if n <= 0:
            return b""
        start = self._offset(self.pos // CHUNK) + within
        self.pos += n
        return self.pool[start : start + n]  # a copy: a new bytes object

    def md5(self):
        """The md5 of all `size` bytes, from the pool in place."""
        view, md5 = memoryview(self.pool), hashlib.md5()
        for pos in range(0, self.size, CHUNK):
            start = self._offset(pos // CHUNK)
            md5.update(view[start : start + min(CHUNK, self.size - pos)])
        return md5.hexdigest()


def create_image(images, name, size, seed=0):
    """Stores `size` bytes of Source data as image `name` with glance's protected snapshot, as
    glance stores an image (8 MiB objects), through Debian's rbd module; returns its md5."""
    source = Source(data_pool(seed), size, name)
    rbd_module.RBD().create(images.ioctx, name, size, order=23, old_format=False)
    with rbd_module.Image(images.ioctx, name) as image:
        while chunk := source.read(CHUNK):
            image.write(chunk, source.pos - len(chunk))
    images.snapshot(name)
    return source.md5()


def snapshot_md5(images, name):
    """(size, md5) of an image at glance's snapshot, read through Debian's rbd module."""
    with rbd_module.Image(images.ioctx, name, snapshot=SNAP) as image:
        size, md5 = image.size(), hashlib.md5()
        for pos in range(0, size, CHUNK):
            md5.update(image.read(pos, min(CHUNK, size - pos)))
    return size, md5.hexdigest()


class InFlightProbe(threading.Thread):
    """Polls the native driver's in_flight() every millisecond while the transfers run: the
    most the process held, and the most beyond what the bound allows at that moment: the bound
    plus one chunk per transfer running (each may always hold one, also when it joins while the
    others hold the bound), counted twice for a download (a read holds its chunk and librbd's
    buffers for it; this counts every transfer as a download); above 0 is a breach."""

    def __init__(self):
        super().__init__(daemon=True)
        self.held_max = self.transfers_max = 0
        self.over_max = None
        self._done = threading.Event()

    def run(self):
        while not self._done.wait(0.001):
            now = glance_rbd_native.in_flight()
            over = now["held"] - (now["bound"] + now["transfers"] * 2 * CHUNK)
            self.over_max = over if self.over_max is None else max(self.over_max, over)
            self.held_max = max(self.held_max, now["held"])
            self.transfers_max = max(self.transfers_max, now["transfers"])

    def stop(self):
        self._done.set()
        self.join()


def trim_malloc():
    """Hands malloc's free memory back, so that both drivers' baselines start from the same
    state; the driver's own release after the transfers is what kept_rss_mib measures."""
    ctypes.CDLL("libc.so.6").malloc_trim(0)


def reset_peak():
    """VmHWM from now on (proc(5), clear_refs)."""
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")


def split(kind, transfers):
    """(uploads, downloads) of a run of `transfers`."""
    if kind == "upload":
        return transfers, 0
    if kind == "download":
        return 0, transfers
    uploads = max(1, transfers // 2)
    return uploads, max(1, transfers - uploads)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--conf", required=True)
    parser.add_argument("--pool", required=True)
    parser.add_argument("--driver", choices=("stock", "native"), required=True)
    parser.add_argument("--kind", choices=("upload", "download", "mixed"), required=True)
    parser.add_argument("--transfers", type=int, default=4)
    parser.add_argument("--size-mib", type=int, default=64, help="bytes of each upload")
    parser.add_argument("--unknown-size", action="store_true")
    parser.add_argument("--image", help="what the downloads read, at glance's snapshot")
    parser.add_argument("--expect-md5", help="of --image")
    parser.add_argument(
        "--max-in-flight-mib",
        type=int,
        help="native: [glance_rbd_native] max_in_flight_mib of every Store",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--watch-bound",
        action="store_true",
        help="native: poll in_flight() every millisecond; it takes the GIL as "
        "often, so not for timing",
    )
    args = parser.parse_args()
    n_up, n_down = split(args.kind, args.transfers)
    if n_down and not args.image:
        parser.error(f"--kind {args.kind} needs --image")
    if args.max_in_flight_mib and args.driver == "stock":
        parser.error("--max-in-flight-mib is the native driver's")

    if args.driver == "native":
        glance_rbd_native.patch()
    cluster = Cluster.describe(args.conf, args.pool)

    def new_store(**kwargs):
        store = make_store(cluster, **kwargs)
        if args.max_in_flight_mib:
            # Loads the native module, which a stock run leaves out.
            from glance_rbd_native import settings

            settings.register_opts(store.conf)
            store.conf.set_override(
                "max_in_flight_mib", args.max_in_flight_mib, group=settings.GROUP.name
            )
        return store

    size = args.size_mib * MiB
    pool = data_pool(args.seed)
    sources = [Source(pool, size, f"{args.seed}/{i}") for i in range(n_up)]
    names = [new_name(f"many-{args.driver}") for _ in range(n_up)]
    # Built beforehand: the measurement is of transfers, not of oslo.config.
    stores = [new_store() for _ in range(n_up + n_down)]
    uri = f"rbd://{cluster.fsid}/{args.pool}/{args.image}/{SNAP}"
    added, received, errors = [None] * n_up, [None] * n_down, []

    def upload(index):
        try:
            added[index] = stores[index].add(
                names[index], sources[index], 0 if args.unknown_size else size, "sha512"
            )
        except Exception as exc:  # reported in the JSON
            errors.append(f"upload {index}: {exc!r}")

    def download(index):
        try:
            store = stores[n_up + index]
            where = location.Location("rbd", rbd.StoreLocation, store.conf, uri=uri)
            chunks, length = store.get(where)
            md5, got = hashlib.md5(), 0
            for chunk in chunks:
                got += len(chunk)
                md5.update(chunk)
            received[index] = (length, got, md5.hexdigest())
        except Exception as exc:  # reported in the JSON
            errors.append(f"download {index}: {exc!r}")

    # One tiny transfer of each kind loads and connects everything, so the baseline is a
    # process ready to transfer. The upload is thin and all zero: it allocates nothing.
    warm_up = new_name("many-warm-up")
    created = [*names, warm_up] if n_up else []
    try:
        if n_up:
            new_store(thin=True).add(warm_up, io.BytesIO(bytes(MiB)), 0, "sha512")
        if n_down:
            store = new_store()
            store.get_size(location.Location("rbd", rbd.StoreLocation, store.conf, uri=uri))

        jobs = [(upload, i) for i in range(n_up)] + [(download, i) for i in range(n_down)]
        # Uploads and downloads alternate, so that a mixed run starts both at once.
        jobs.sort(key=lambda job: job[1])
        threads = [threading.Thread(target=target, args=(i,)) for target, i in jobs]
        gc.collect()
        trim_malloc()
        baseline = status_mib("VmRSS")
        probe = InFlightProbe() if args.watch_bound and args.driver == "native" else None
        reset_peak()
        if probe:
            probe.start()
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - started
        peak = status_mib("VmHWM")
        if probe:
            probe.stop()
        gc.collect()
        time.sleep(1.5)
        kept = status_mib("VmRSS")
        trim_malloc()
        trimmed = status_mib("VmRSS")
        after = glance_rbd_native.in_flight() if args.driver == "native" else None

        # Every byte, now that nothing is measured any more.
        with closing(Images(cluster)) as images, ThreadPoolExecutor(2) as workers:
            expected = list(workers.map(Source.md5, sources))
            stored = list(
                workers.map(lambda i: added[i] and snapshot_md5(images, names[i]), range(n_up))
            )
            image_md5 = args.expect_md5
            if n_down and not image_md5:
                image_md5 = snapshot_md5(images, args.image)[1]
    finally:
        # Side by side: one at a time, removing 64 images takes longer than making them.
        with closing(Images(cluster)) as images, ThreadPoolExecutor(8) as workers:
            list(workers.map(images.remove, created))
    for i, result in enumerate(added):
        if result and result[1:3] != (size, expected[i]):
            errors.append(
                f"upload {i}: Store.add returned {result[1:3]}, the source is {(size, expected[i])}"
            )
        if stored[i] and stored[i] != (size, expected[i]):
            errors.append(f"upload {i}: stored {stored[i]}, the source is {(size, expected[i])}")
    for i, result in enumerate(received):
        if result and (result[0] != result[1] or result[2] != image_md5):
            errors.append(
                f"download {i}: (size, bytes, md5) {result}, the image's md5 is {image_md5}"
            )

    print(
        json.dumps(
            {
                "driver": args.driver,
                "kind": args.kind,
                "patched": glance_rbd_native.is_patched(),
                "transfers": n_up + n_down,
                "uploads": n_up,
                "downloads": n_down,
                "size": size,
                "image": args.image,
                "seconds": seconds,
                "bytes": n_up * size + sum(r[1] for r in received if r),
                "baseline_rss_mib": baseline,
                "peak_rss_mib": peak,
                "kept_rss_mib": kept,
                "trimmed_rss_mib": trimmed,
                "bound_mib": after["bound"] / MiB if after else None,
                "in_flight_after": after,
                "held_max_mib": probe.held_max / MiB if probe else None,
                "transfers_max": probe.transfers_max if probe else None,
                "over_bound_max_mib": probe.over_max / MiB
                if probe and probe.over_max is not None
                else None,
                "ok": not errors and all(added) and all(received),
                "errors": errors,
                "images": created,
                "removed": True,
            }
        )
    )


if __name__ == "__main__":
    main()
