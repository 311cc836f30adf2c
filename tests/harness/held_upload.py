"""An upload held in the middle, in a process of its own, for the tests of what a killed,
frozen or fenced upload leaves (tests/test_leftovers.py, tests/test_fencing.py): `Store.add` of
`--mib` MiB, of unknown size, through the stock or the native driver. After the first half it
prints "held" and waits for a line on stdin; given one, it sends the rest and prints "stored",
or "failed: TYPE: MESSAGE" if the upload raised. With `--then NAME`, it then stores a small
image NAME in the same process (what a glance-api worker does next), and prints its outcome.

    python -m tests.harness.held_upload --conf CEPH_CONF --pool POOL --image NAME --driver native
"""

import argparse
import os
import pathlib
import subprocess
import sys
import threading
import time

from tests.harness.cluster import Cluster
from tests.harness.command import OWN_PID_NAMESPACE
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
    parser.add_argument("--then", metavar="NAME", help="then store a small image NAME")
    args = parser.parse_args()
    if args.driver == "native":
        import glance_rbd_native

        assert glance_rbd_native.patch()
    store = make_store(
        Cluster.describe(args.conf, args.pool), chunk_mib=1, user=args.user, conf_file=args.conf
    )
    data = data_of(args.mib * MiB, seed=len(args.image))

    def source():
        half = len(data) // 2
        for pos in range(0, half, MiB):
            yield data[pos : pos + MiB]
        print("held", flush=True)
        sys.stdin.readline()
        for pos in range(half, len(data), MiB):
            yield data[pos : pos + MiB]

    outcome(lambda: store.add(args.image, IterReader(source()), 0, "sha512"))
    if args.then:
        small = data_of(MiB, seed=len(args.then))
        outcome(lambda: store.add(args.then, IterReader(iter([small])), 0, "sha512"))


def outcome(upload):
    try:
        upload()
    except Exception as exc:  # the test reads what it was
        print(f"failed: {type(exc).__name__}: {exc}".replace("\n", " "), flush=True)
    else:
        print("stored", flush=True)


CHECKOUT = pathlib.Path(__file__).resolve().parents[2]


class Held:
    """A held upload in a child process, as the tests drive it: killed, frozen, let go."""

    def __init__(
        self,
        cluster,
        image,
        driver="native",
        conf=None,
        user="admin",
        then=None,
        own_namespace=False,
    ):
        self.image = image
        argv = [
            sys.executable,
            "-m",
            "tests.harness.held_upload",
            "--conf",
            str(conf or cluster.conf_path),
            "--pool",
            cluster.pool,
            "--image",
            image,
            "--driver",
            driver,
            "--user",
            user,
        ]
        if then:
            argv += ["--then", then]
        if own_namespace:
            argv = [*OWN_PID_NAMESPACE, *argv]
        self.proc = subprocess.Popen(
            argv, cwd=CHECKOUT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        line = self.proc.stdout.readline()
        assert line.strip() == "held", f"the upload did not get to the middle: {line!r}"

    @property
    def pid(self):
        """The pid of the process that writes, as this host sees it (unshare's child, in its
        own namespace)."""
        children = pathlib.Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        found = children.read_text().split() if children.exists() else []
        return int(found[0]) if found else self.proc.pid

    def freeze(self):
        os.kill(self.pid, 19)  # SIGSTOP: as docker pause, a frozen cgroup, a paused VM

    def thaw(self):
        os.kill(self.pid, 18)  # SIGCONT

    def kill(self):
        self.proc.kill()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()
        self.proc.stdin.close()

    def go(self):
        """Lets the upload go on; returns at once."""
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def outcome(self, timeout=60):
        """The next line it prints ("stored", "failed: ..."), and the seconds it took; fails
        the test if there is none within `timeout`: the upload hangs."""
        started = time.monotonic()
        box = []
        reader = threading.Thread(
            target=lambda: box.append(self.proc.stdout.readline()), daemon=True
        )
        reader.start()
        reader.join(timeout)
        assert box, f"no outcome within {timeout} s: the upload of {self.image} hangs"
        return box[0].strip(), time.monotonic() - started

    def end(self, timeout=60):
        """Waits for the process to exit by itself, and closes its pipes."""
        self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, self.proc.returncode

    def finish(self):
        self.go()
        out, _ = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0 and out.strip() == "stored", out


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
