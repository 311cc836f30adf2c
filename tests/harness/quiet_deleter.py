"""A process that deletes one image through the native delete, as glance's Store.delete calls
it (``green.call``), logs to its standard output, and then makes no native call again: a worker
that serves no more requests, for tests/test_delete_purge.py. Run from the checkout's root:

    python -m tests.harness.quiet_deleter CEPH_CONF USER POOL IMAGE SNAPSHOT SECONDS

It prints "deleted TRASH_ID", then lives SECONDS more.
"""

import logging
import sys
import time

from glance_rbd_native import green
from glance_rbd_native._native import _delete_image


def main() -> None:
    conf, user, pool, image, snapshot, seconds = sys.argv[1:7]
    logging.basicConfig(
        level=logging.INFO, stream=sys.stdout, format="%(levelname)s %(name)s %(message)s"
    )
    trash_id, purging = green.call(
        _delete_image, pool, image, snapshot, connect={"conffile": conf, "user": user}
    )
    assert purging
    print(f"deleted {trash_id}", flush=True)
    time.sleep(float(seconds))


if __name__ == "__main__":
    main()
