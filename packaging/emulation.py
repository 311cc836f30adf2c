"""Programs of another architecture, run under qemu-user where nothing else sees the handler.

binfmt_misc is one table for all of the machine's user namespace: a handler registered in a
mount namespace of a test's own still runs every foreign binary of the machine while that
namespace lives (a second namespace sees it). Since Linux 6.7, a user namespace that mounts
binfmt_misc has a table of its own. So each command runs in a new user namespace, mapped to the
host's ids one for one (root in it is root over the root's files, and apt's and glance's users
keep their ids), with a pid namespace of its own (for a /proc it may mount) and a mount
namespace, and registers qemu there, with the F flag: the kernel opens qemu at registration, so
it runs inside a chroot that has no qemu. The handler, the mounts and every process of the
command go when its pid namespace's init does: `kill` ends that first.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import subprocess
import time

HOST_ARCH = "amd64"
# Debian's architecture -> qemu's name for it (/usr/lib/binfmt.d/qemu-<name>.conf).
QEMU = {"arm64": "aarch64"}
BINFMT = "/proc/sys/fs/binfmt_misc"
# The ids the new user namespace maps, one for one: all of them.
ID_MAP = "0 0 4294967295\n"


class EmulationError(RuntimeError):
    pass


def foreign(arch: str) -> bool:
    return arch != HOST_ARCH


def handler(arch: str) -> pathlib.Path:
    """Debian's qemu-user-static registration line for `arch`."""
    try:
        conf = pathlib.Path(f"/usr/lib/binfmt.d/qemu-{QEMU[arch]}.conf")
    except KeyError:
        raise EmulationError(f"no qemu-user for {arch}") from None
    if not conf.exists():
        raise EmulationError(f"{conf} is missing: apt-get install qemu-user-static")
    return conf


def script(arch: str) -> str:
    """Shell lines that, run first in `wrap`'s namespaces, give them their /proc and the
    handler of `arch`."""
    return (
        "mount -t proc proc /proc\n"
        f"mount -t binfmt_misc binfmt_misc {BINFMT}\n"
        f"cat {handler(arch)} > {BINFMT}/register\n"
    )


def wrap(argv: list[str]) -> list[str]:
    """`argv` in new user, pid and mount namespaces; it starts once `spawn` has mapped the
    ids, both maps (until then the new namespace's root has no ids on the files; with the
    group ids alone unmapped, it may mount binfmt_misc but not open its register file). `kill`
    ends all of it."""
    wait = (
        'until grep -q " 0 " /proc/self/uid_map && grep -q " 0 " /proc/self/gid_map; do\n'
        "  sleep 0.01\n"
        'done\nexec "$@"\n'
    )
    return [
        "unshare",
        "--user",
        "--pid",
        "--fork",
        "--kill-child",
        "--mount",
        "--propagation",
        "private",
        "--",
        "/bin/sh",
        "-c",
        wait,
        "sh",
        *argv,
    ]


def spawn(argv: list[str], **popen) -> subprocess.Popen:
    """Starts `wrap(argv)` and maps the ids of its user namespace."""
    proc = subprocess.Popen(wrap(argv), **popen)
    ours = os.readlink("/proc/self/ns/user")
    deadline = time.monotonic() + 10
    try:
        # unshare(1) enters the namespace after it starts: the maps are written once it has.
        while os.readlink(f"/proc/{proc.pid}/ns/user") == ours:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise EmulationError(f"unshare did not make a user namespace: {argv}")
            time.sleep(0.005)
        for name in ("uid_map", "gid_map"):
            pathlib.Path(f"/proc/{proc.pid}/{name}").write_text(ID_MAP)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc


def kill(proc: subprocess.Popen) -> None:
    """Kills what `spawn` started: the first process of its pid namespace first, which takes
    every other one with it (under qemu it may outlive unshare's own end), then unshare."""
    with contextlib.suppress(OSError):
        children = pathlib.Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text()
        for pid in map(int, children.split()):
            os.kill(pid, signal.SIGKILL)
    proc.kill()


def registered() -> list[str]:
    """The handlers the machine's own binfmt_misc has, seen from a mount namespace of its own
    (the machine has it unmounted)."""
    res = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "/bin/sh",
            "-c",
            f"mount -t binfmt_misc binfmt_misc {BINFMT} && ls {BINFMT}",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return sorted(set(res.stdout.split()) - {"register", "status"})
