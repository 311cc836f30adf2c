"""An upload through the installed wheel alone, for tests/test_interpreters.py: run by path by
each interpreter under test (3.9 on), in a virtualenv that holds only the wheel and numpy, so it
imports nothing from the checkout and stays Python 3.9.

    python tests/harness/wheel_upload.py CEPH_CONF POOL IMAGE SNAPSHOT DATA_FILE

Writes DATA_FILE as bytes, a bytearray and a numpy array, and prints what the writer saw.
"""

import json
import sys

import numpy as np

from glance_rbd_native import RbdWriter


def main():
    conf, pool, name, snapshot, path = sys.argv[1:]
    data = open(path, "rb").read()
    third = len(data) // 3
    with RbdWriter(
        pool,
        name,
        len(data),
        conffile=conf,
        user="admin",
        snapshot=snapshot,
        digests=["md5", "sha512"],
    ) as writer:
        writer.write(data[:third])
        writer.write(bytearray(data[third : 2 * third]))
        writer.write(np.frombuffer(data[2 * third :], dtype=np.uint8))
    written = {
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "numpy": np.__version__,
        "written": writer.bytes_written,
        "digests": writer.hexdigests,
    }
    print(json.dumps(written))


if __name__ == "__main__":
    main()
