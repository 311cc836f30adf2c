"""A slow upload through the patched Store, with the progress reports the environment sets, for
tests/test_progress.py: it prints the reporter's lines and "uploaded", then exits as any program
does, with the reporter's thread still there. Run from the checkout's root:

    python -m tests.harness.slow_upload CEPH_CONF POOL IMAGE
"""

import logging
import sys
import time

import glance_rbd_native
from tests.harness.cluster import Cluster
from tests.harness.data import MiB, data_of
from tests.harness.stores import make_store


class Slow:
    """`data`, read 0.4 s apart."""

    def __init__(self, data):
        self.data, self.pos = data, 0

    def read(self, size):
        time.sleep(0.4)
        chunk = self.data[self.pos : self.pos + size]
        self.pos += len(chunk)
        return chunk


def main():
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s %(message)s")
    conf, pool, name = sys.argv[1:]
    assert glance_rbd_native.patch()
    data = data_of(4 * MiB, seed=9)
    make_store(Cluster.describe(conf, pool), chunk_mib=1).add(name, Slow(data), len(data), "md5")
    print("uploaded")


if __name__ == "__main__":
    main()
