"""A download held in the middle, in a process of its own, for the tests of a fenced reader
(tests/test_fencing.py): `Store.get` of an image stored with glance's snapshot, through the
native driver. After the first half it prints "held" and waits for a line on stdin; given one,
it reads the rest and prints "read N bytes", or "failed: TYPE: MESSAGE after Ts" if the read
raised. Then it reads the whole image again in the same process (what a glance-api worker does
next), and prints "read N bytes, as stored" if they are the bytes the test stored.

    python -m tests.harness.held_download --conf CEPH_CONF --pool POOL --image NAME
"""

import argparse
import sys
import time

import glance_rbd_native
from tests.harness.cluster import Cluster
from tests.harness.data import MiB, data_of
from tests.harness.stores import locate, make_store


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--conf", required=True)
    parser.add_argument("--pool", required=True)
    parser.add_argument("--image", required=True)
    parser.add_argument("--mib", type=int, default=64)
    args = parser.parse_args()
    assert glance_rbd_native.patch()
    cluster = Cluster.describe(args.conf, args.pool)
    store = make_store(cluster, chunk_mib=1, conf_file=args.conf)
    chunks, size = store.get(locate(store, cluster, args.image))
    read = 0
    started = None
    try:
        for chunk in chunks:
            read += len(chunk)
            if started is None and read >= size // 2:
                print("held", flush=True)
                sys.stdin.readline()
                started = time.monotonic()
    except Exception as exc:  # the test reads what it was
        took = time.monotonic() - (started or time.monotonic())
        print(
            f"failed: {type(exc).__name__}: {exc} after {took:.1f}s".replace("\n", " "), flush=True
        )
    else:
        print(f"read {read} bytes", flush=True)
    chunks, _ = store.get(locate(store, cluster, args.image))
    data = b"".join(chunks)
    same = data == data_of(args.mib * MiB, seed=len(args.image))
    print(f"read {len(data)} bytes{', as stored' if same else ', NOT as stored'}", flush=True)


if __name__ == "__main__":
    main()
