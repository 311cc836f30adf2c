"""The glance-api processes of this host, as /proc shows them, for ``check``: whether each has
the native module loaded, and whether that module is still the file installed where it was
loaded from (an upgrade replaces it: the process then runs the old one until restarted).

A glance-api process is one whose command line names glance's API: its eventlet server (an
argument named ``glance-api``), a uWSGI ini named ``glance-api*.ini``, or the WSGI app
(``glance.wsgi.api``, ``glance.common.wsgi_app``, ``glance-wsgi-api``), as Debian's packages,
kolla and devstack run it; uWSGI and gunicorn workers keep their master's. Processes in
containers are seen from the host (their files through ``/proc/PID/root``); from inside a
container, those of its own pid namespace.
"""

import dataclasses
import os
from typing import Optional

from glance_rbd_native import switch

APP_NAMES = ("glance.wsgi.api", "glance.common.wsgi_app", "glance-wsgi-api")
# The package's own commands name glance-api.conf, and are not glance-api.
OWN_COMMANDS = ("glance_rbd_native", "glance-rbd-native")


@dataclasses.dataclass
class Module:
    """The native module as a process mapped it: the path it loaded it from (in its mount
    namespace), and the file's inode then."""

    path: str
    inode: int
    deleted: bool


@dataclasses.dataclass
class Process:
    pid: int
    parent: int
    server: str
    module: Optional[Module]
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
        if now.st_ino != self.module.inode:
            return "another file now"
        return None


def is_glance_api(argv: list[str]) -> bool:
    if any(own in arg for arg in argv for own in OWN_COMMANDS):
        return False
    for arg in argv:
        name = os.path.basename(arg)
        if name == "glance-api" or (name.startswith("glance-api") and name.endswith(".ini")):
            return True
        if any(app in arg for app in APP_NAMES):
            return True
    return False


def find(proc: str = "/proc") -> list[Process]:
    """The glance-api processes /proc shows, by pid."""
    found: dict[int, Process] = {}
    for entry in os.listdir(proc):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        argv = _read(f"{proc}/{entry}/cmdline").split("\0")
        if not is_glance_api(argv):
            continue
        pid = int(entry)
        found[pid] = Process(
            pid,
            _parent(proc, entry),
            _server(argv),
            _module(proc, entry),
            _switch(proc, entry),
            _inner_pid(proc, entry),
        )
    for process in found.values():
        if process.parent in found:
            found[process.parent].workers.append(process.pid)
    return [found[pid] for pid in sorted(found)]


def _server(argv: list[str]) -> str:
    """What serves: uwsgi, gunicorn (whose processes retitle themselves "gunicorn: worker
    [...]"), or the script a Python runs (glance-api)."""
    words = argv[0].split()
    name = os.path.basename(words[0]).rstrip(":") if words else "?"
    if name.startswith("python") and len(argv) > 1 and argv[1]:
        return os.path.basename(argv[1])
    return name


def _read(path: str) -> str:
    try:
        with open(path, "rb") as file:
            return file.read().decode("utf-8", "replace")
    except OSError:
        return ""  # gone meanwhile, or not this user's to read


def _parent(proc: str, pid: str) -> int:
    fields = _read(f"{proc}/{pid}/stat").rsplit(")", 1)[-1].split()
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else 0


def _inner_pid(proc: str, pid: str) -> Optional[int]:
    for line in _read(f"{proc}/{pid}/status").splitlines():
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


def _module(proc: str, pid: str) -> Optional[Module]:
    """The native module in the memory map of process `pid`, if it loaded it."""
    for line in _read(f"{proc}/{pid}/maps").splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 6:
            continue
        path = fields[5]
        deleted = path.endswith(" (deleted)")
        path = path.removesuffix(" (deleted)")
        directory, name = os.path.split(path)
        if name.startswith("_native.") and os.path.basename(directory) == "glance_rbd_native":
            return Module(path, int(fields[4]), deleted)
    return None
