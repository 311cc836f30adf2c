"""A process that deletes an image through the native delete and is killed (SIGKILL) the moment
the delete returns, the image in the trash and its data still being removed, for
tests/test_deleted_leftovers.py. Run from the checkout's root:

    python -m tests.harness.killed_delete CEPH_CONF POOL IMAGE SNAPSHOT

It prints the trash id before it dies.
"""

import os
import signal
import sys

from glance_rbd_native._native import _delete_image


def main() -> None:
    conf, pool, image, snapshot = sys.argv[1:5]
    trash_id, purging = _delete_image(pool, image, snapshot, conffile=conf, user="admin")
    assert purging
    print(trash_id, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main()
