"""One measured download in a process of its own, so CPU time, peak RSS and CEPH_ARGS are its
own: glance_store's Store.get of an image glance stored, stock or native.

    python -m benchmarks.download --conf C --pool P --image NAME --driver native|stock
        [--hash] [--expect-md5 MD5]

With --hash the consumer computes md5 and sha512 of every chunk as it arrives, as glance does
when it hashes an image (copy-image, the hash after add_location). Prints one JSON object: wall
seconds, client CPU seconds, peak and baseline RSS, the md5 and whether it matches.
"""

import argparse
import hashlib
import json
import resource
import time

from glance_store import location
from glance_store._drivers import rbd

import glance_rbd_native
from benchmarks.upload import status_mib
from tests.harness.cluster import Cluster
from tests.harness.stores import SNAP, make_store


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--conf", required=True)
    parser.add_argument("--pool", required=True)
    parser.add_argument("--image", required=True)
    parser.add_argument("--driver", choices=("stock", "native"), required=True)
    parser.add_argument("--hash", action="store_true")
    parser.add_argument("--expect-md5")
    args = parser.parse_args()

    if args.driver == "native":
        glance_rbd_native.patch()
    cluster = Cluster.describe(args.conf, args.pool)
    store = make_store(cluster)
    # The fsid is part of glance's location, not used to read.
    uri = f"rbd://{cluster.fsid}/{args.pool}/{args.image}/{SNAP}"
    where = location.Location("rbd", rbd.StoreLocation, store.conf, uri=uri)
    # A first get_size connects (stock connects anew each time anyway): the baseline is a
    # process ready to read.
    store.get_size(where)
    baseline = status_mib("VmRSS")
    usage = resource.getrusage(resource.RUSAGE_SELF)
    md5 = hashlib.md5()
    sha512 = hashlib.sha512() if args.hash else None
    started_unix, started = time.time(), time.perf_counter()
    chunks, size = store.get(where)
    received = 0
    for chunk in chunks:
        received += len(chunk)
        if sha512 is not None:
            md5.update(chunk)
            sha512.update(chunk)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    print(
        json.dumps(
            {
                "driver": args.driver,
                "seconds": seconds,
                # When the transfer started, for the RSS its parent samples (benchmarks/huge.py).
                "started_unix": started_unix,
                "bytes": received,
                "size": size,
                "cpu_seconds": (after.ru_utime - usage.ru_utime)
                + (after.ru_stime - usage.ru_stime),
                "peak_rss_mib": status_mib("VmHWM"),
                "baseline_rss_mib": baseline,
                "md5": md5.hexdigest() if args.hash else None,
                "ok": received == size
                and (not args.hash or args.expect_md5 in (None, md5.hexdigest())),
            }
        )
    )


if __name__ == "__main__":
    main()
