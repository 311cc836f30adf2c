"""A process that deletes an image through the native delete and is killed (SIGKILL), its image
in the trash and its data still being removed, for tests/test_deleted_leftovers.py. Run from
the checkout's root:

    python -m tests.harness.killed_delete CEPH_CONF POOL IMAGE SNAPSHOT [--wait]

It prints the trash id, then kills itself the moment the delete returns. With --wait it connects
first, prints "connected", deletes once it reads a line (the test has paused what it wants its
purge to stop at), prints the trash id and waits for the test to kill it, mid-purge.
"""

import contextlib
import os
import signal
import sys
import time

from glance_rbd_native._native import NotFound, _delete_image


def main() -> None:
    conf, pool, image, snapshot = sys.argv[1:5]
    # With operation timeouts the purge runs on the delete's connection, where without them it
    # connects anew (core/src/delete/purge.rs), which a paused monitor would stop short.
    connection = {"conffile": conf, "user": "admin", "connect_timeout": 30}
    if "--wait" in sys.argv[5:]:
        # The connection is made, and kept, by a first call: the delete then needs no monitor.
        with contextlib.suppress(NotFound):
            _delete_image(pool, f"{image}-not-there", connect=connection)
        print("connected", flush=True)
        sys.stdin.readline()
    trash_id, purging = _delete_image(pool, image, snapshot, connect=connection)
    assert purging
    print(trash_id, flush=True)
    if "--wait" in sys.argv[5:]:
        time.sleep(600)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main()
