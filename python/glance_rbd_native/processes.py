"""The glance-api processes of this host, as /proc shows them, for ``check``: whether each has
the native module loaded, and whether that module is still the file installed where it was
loaded from (an upgrade replaces it: the process then runs the old one until restarted).

A glance-api process is one whose command line runs glance's API: its eventlet server
(``glance-api``, or ``glance-wsgi-api``), or uWSGI or gunicorn given a ``glance-api*.ini`` or
the WSGI app (``glance.wsgi.api``, ``glance.common.wsgi_app``, ``glance-wsgi-api``), as
Debian's packages, kolla and devstack run it; uWSGI and gunicorn workers keep their master's
(gunicorn's process titles too). Processes in containers are seen from the host (their files
through ``/proc/PID/root``); from inside a container, those of its own pid namespace. A
process whose memory map this user cannot read (another user's, without root) is listed as
such.
"""

import dataclasses
import os
from typing import Optional

from glance_rbd_native import switch

APP_NAMES = ("glance.wsgi.api", "glance.common.wsgi_app", "glance-wsgi-api")
# glance's own servers, and those that serve its WSGI app.
SERVERS = ("glance-api", "glance-wsgi-api")
APP_SERVERS = ("uwsgi", "gunicorn")


@dataclasses.dataclass
class Module:
    """The native module as a process mapped it: the path it loaded it from (in its mount
    namespace, or its host's path where that namespace is not this one's), and the file's
    device and inode then."""

    path: str
    device: tuple[int, int]
    inode: int
    deleted: bool


@dataclasses.dataclass
class Process:
    pid: int
    parent: int
    server: str
    # None: none mapped; or its map could not be read (`readable`).
    module: Optional[Module]
    readable: bool
    # Whether GLANCE_RBD_NATIVE is on in the environment it started with; None where this user
    # cannot read it. Not seen: one uWSGI's `env` option sets, or where gunicorn's process
    # titles wrote over it.
    switch: Optional[bool]
    # Its pid in a pid namespace of its own (a container), None in this one.
    inner_pid: Optional[int]
    # The glance-api processes it started (a uWSGI or gunicorn master's workers).
    workers: list[int] = dataclasses.field(default_factory=list)

    def replaced(self, proc: str) -> Optional[str]:
        """Why the module it runs is no longer the installed file, or None. An upgrade renames
        a new file over the old, which the kernel then calls deleted in the map; a path that
        reads as another file through the process's root is one too. (A process of another
        mount namespace may show a path of its own namespace's, not reachable from here: then
        the map alone says.)"""
        if self.module is None:
            return None
        if self.module.deleted:
            return "deleted since it was loaded"
        try:
            now = os.stat(f"{proc}/{self.pid}/root{self.module.path}")
        except OSError:
            return None
        # Another device: overlayfs (a container's image) maps the file of its layer, which
        # its own inode numbers need not match; only the map's word counts there.
        if (os.major(now.st_dev), os.minor(now.st_dev)) != self.module.device:
            return None
        if now.st_ino != self.module.inode:
            return "another file now"
        return None


def is_glance_api(argv: list[str]) -> bool:
    """Whether command line `argv` runs glance's API (the module's docstring)."""
    program, arguments = _program(argv)
    if program in SERVERS:
        return True
    if program.startswith(APP_SERVERS):
        for arg in [argv[0], *arguments]:
            name = os.path.basename(arg)
            if name.startswith("glance-api") and name.endswith(".ini"):
                return True
            if any(app in arg for app in APP_NAMES):
                return True
    return False


def _program(argv: list[str]) -> tuple[str, list[str]]:
    """The program `argv` runs (the script or module a Python runs; the first word of a
    gunicorn process's title, "gunicorn: worker [app]"), and its arguments."""
    words = argv[0].split() if argv else []
    if not words:
        return "", []
    name = os.path.basename(words[0]).rstrip(":")
    rest = argv[1:]
    if name.startswith("python") and rest:
        if rest[0] == "-m" and len(rest) > 1:
            return rest[1], rest[2:]
        return os.path.basename(rest[0]), rest[1:]
    return name, rest


def find(proc: str = "/proc") -> list[Process]:
    """The glance-api processes /proc shows, by pid."""
    found: dict[int, Process] = {}
    for entry in os.listdir(proc):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        argv = (_read(f"{proc}/{entry}/cmdline") or "").split("\0")
        if not is_glance_api(argv):
            continue
        pid = int(entry)
        maps = _read(f"{proc}/{entry}/maps")
        found[pid] = Process(
            pid,
            _parent(proc, entry),
            _program(argv)[0],
            _module(maps or ""),
            maps is not None,
            _switch(proc, entry),
            _inner_pid(proc, entry),
        )
    for process in found.values():
        if process.parent in found:
            found[process.parent].workers.append(process.pid)
    return [found[pid] for pid in sorted(found)]


def _read(path: str) -> Optional[str]:
    """The text of `path`; None if it cannot be read (gone meanwhile, not this user's)."""
    try:
        with open(path, "rb") as file:
            return file.read().decode("utf-8", "replace")
    except OSError:
        return None


def _parent(proc: str, pid: str) -> int:
    fields = (_read(f"{proc}/{pid}/stat") or "").rsplit(")", 1)[-1].split()
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else 0


def _inner_pid(proc: str, pid: str) -> Optional[int]:
    for line in (_read(f"{proc}/{pid}/status") or "").splitlines():
        if line.startswith("NSpid:"):
            pids = line.split()[1:]
            return int(pids[-1]) if len(pids) > 1 else None
    return None


def _switch(proc: str, pid: str) -> Optional[bool]:
    environ = _read(f"{proc}/{pid}/environ")
    if not environ:
        return None
    for variable in environ.split("\0"):
        name, _, value = variable.partition("=")
        if name == switch.ENV:
            return value.strip().lower() in switch.ON
    return False


def _module(maps: str) -> Optional[Module]:
    """The native module in a process's memory map (`maps`), if it loaded it."""
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 6:
            continue
        path = fields[5]
        deleted = path.endswith(" (deleted)")
        path = path.removesuffix(" (deleted)")
        directory, name = os.path.split(path)
        if name.startswith("_native.") and os.path.basename(directory) == "glance_rbd_native":
            major, _, minor = fields[3].partition(":")
            return Module(path, (int(major, 16), int(minor, 16)), int(fields[4]), deleted)
    return None
