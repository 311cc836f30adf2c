"""An upload held in the middle, in a process of its own, for the tests of what a killed upload
leaves (tests/test_leftovers.py): `Store.add` of `--mib` MiB, of unknown size, through the stock
or the native driver. After the first half it prints "held" and waits for a line on stdin; given
one, it sends the rest and prints "stored". The test kills it while held, or lets it finish.

    python -m tests.harness.held_upload --conf CEPH_CONF --pool POOL --image NAME --driver native
"""

import argparse
import sys

from tests.harness.cluster import Cluster
from tests.harness.data import MiB, data_of
from tests.harness.stores import make_store


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--conf", required=True)
    parser.add_argument("--pool", required=True)
    parser.add_argument("--image", required=True)
    parser.add_argument("--driver", choices=("native", "stock"), required=True)
    parser.add_argument("--user", default="admin")
    parser.add_argument("--mib", type=int, default=16)
    args = parser.parse_args()
    if args.driver == "native":
        import glance_rbd_native

        assert glance_rbd_native.patch()
    store = make_store(Cluster.describe(args.conf, args.pool), chunk_mib=1, user=args.user,
                       conf_file=args.conf)
    data = data_of(args.mib * MiB, seed=len(args.image))

    def source():
        half = len(data) // 2
        for pos in range(0, half, MiB):
            yield data[pos:pos + MiB]
        print("held", flush=True)
        sys.stdin.readline()
        for pos in range(half, len(data), MiB):
            yield data[pos:pos + MiB]

    store.add(args.image, IterReader(source()), 0, "sha512")
    print("stored", flush=True)


class IterReader:
    """A file-like object over an iterator of chunks, as glance's request body reads."""

    def __init__(self, chunks):
        self._chunks = chunks
        self._rest = b""

    def read(self, size=-1):
        while len(self._rest) < size or size < 0:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self._rest += chunk
        out, self._rest = (self._rest, b"") if size < 0 else (self._rest[:size], self._rest[size:])
        return out


if __name__ == "__main__":
    main()
