"""What the host this runs on can see of a writer's process, by its mark.

A pid names a process only within its pid namespace, and only while that process lives: a
writer in a container (kolla runs glance-api with the host's network and hostname, and pids of
its own) is pid 1 there and something else here. So the mark names the namespace too, and the
process is looked for where it can be seen:

- in this command's own pid namespace, by its pid;
- in a namespace below it (a container's, seen from the host), by the pid its processes have
  there (the last field of ``NSpid`` in ``/proc/PID/status``);
- and in both cases by its start time as well, since pids are reused.

A writer is *gone* only when the whole namespace can be seen and it is not there: this command
sees every process of its own namespace and of those below (as root, or with /proc not hiding
other users' processes), and a namespace that no process is in any more, seen from the host's
initial namespace, has ended with its processes. Anything else (another host, another boot,
another container's namespace seen from inside a container, a hidden /proc, a mark from before
namespaces were recorded) is *unseen*: the writer is then judged by its watch and its mark.
"""

import enum
import os
import socket
from collections.abc import Iterator
from typing import Any, Callable, Optional

# The inode of the initial pid namespace (PROC_PID_INIT_INO): every process is visible from it.
INITIAL_PID_NAMESPACE = 0xEFFFFFFC


class Sight(enum.Enum):
    RUNS = "runs"
    STOPPED = "stopped"  # SIGSTOP, a frozen cgroup (docker pause): alive, and may wake
    GONE = "gone"
    UNSEEN = "unseen"


class Host:
    """This host as /proc shows it. Tests hand in another root."""

    def __init__(self, proc: str = "/proc", hostname: Optional[Callable[[], str]] = None):
        self.proc = proc
        self._hostname = hostname or socket.gethostname

    def hostname(self) -> str:
        return self._hostname()

    def boot_id(self) -> Optional[str]:
        return _read(f"{self.proc}/sys/kernel/random/boot_id")

    def pid_namespace(self, pid: str = "self") -> Optional[int]:
        try:
            return os.stat(f"{self.proc}/{pid}/ns/pid").st_ino
        except OSError:
            return None

    def euid(self) -> int:
        return os.geteuid()

    def sees_every_process(self) -> bool:
        """Whether /proc lists every process of this namespace: it does for root, and for
        anyone when it is not mounted with ``hidepid``."""
        if self.euid() == 0:
            return True
        for line in (_read(f"{self.proc}/self/mountinfo") or "").splitlines():
            fields = line.split(" - ")
            if len(fields) == 2 and fields[1].startswith("proc ") and line.split()[4] == self.proc:
                options = fields[1].split()[-1].split(",")
                return not any(
                    o.startswith("hidepid=") and o not in ("hidepid=0", "hidepid=off")
                    for o in options
                )
        return False

    def shows_own_namespace(self) -> bool:
        """Whether /proc is this process's pid namespace's (it is not under ``unshare --pid``
        without a /proc of its own: pids there are the parent namespace's)."""
        try:
            return os.readlink(f"{self.proc}/self") == str(os.getpid())
        except OSError:
            return False

    def pids(self) -> Iterator[str]:
        for entry in os.listdir(self.proc):
            if entry.isdigit():
                yield entry

    def stat(self, pid: str) -> Optional[tuple[str, int]]:
        """(state, start time in clock ticks after boot) of process ``pid``, None if it is not
        there."""
        text = _read(f"{self.proc}/{pid}/stat")
        if text is None:
            return None
        try:
            fields = text.rsplit(")", 1)[1].split()
            return fields[0], int(fields[19])
        except (IndexError, ValueError):
            return None

    def inner_pid(self, pid: str) -> Optional[int]:
        """The pid of process ``pid`` in its own namespace."""
        for line in (_read(f"{self.proc}/{pid}/status") or "").splitlines():
            if line.startswith("NSpid:"):
                return int(line.split()[-1])
        return None


def look(mark: dict[str, Any], host: Host) -> tuple[Sight, str]:
    """(Sight, why) of the writer of ``mark`` (its fields), from ``host``."""
    who = f"pid {mark['pid']} on {mark['host']}"
    if mark["host"] != host.hostname() or mark["boot_id"] != host.boot_id():
        if mark["host"] != host.hostname():
            return Sight.UNSEEN, f"{who}: another host"
        return Sight.UNSEEN, f"{who}: before this host's last boot, or a host of the same name"
    namespace = mark.get("pid_ns")
    if namespace is None:
        return Sight.UNSEEN, f"{who}: its mark does not say which pid namespace"
    if not host.shows_own_namespace():
        return Sight.UNSEEN, f"{who}: /proc here is not this pid namespace's"
    if not host.sees_every_process():
        return Sight.UNSEEN, f"{who}: /proc hides other users' processes from this user"
    mine = host.pid_namespace()
    if namespace == mine:
        return _by_pid(host, str(mark["pid"]), mark, who)
    # Another namespace: look for its processes among those this one sees.
    members = []
    for pid in host.pids():
        if host.pid_namespace(pid) == namespace:
            members.append(pid)
            if host.inner_pid(pid) == mark["pid"]:
                return _by_pid(host, pid, mark, f"{who} (pid {pid} here)")
    if members:
        return Sight.GONE, f"{who}: its process is no longer in its pid namespace"
    if mine == INITIAL_PID_NAMESPACE:
        return Sight.GONE, f"{who}: its pid namespace (a container's) has ended"
    return Sight.UNSEEN, f"{who}: in a pid namespace that cannot be seen from here"


def _by_pid(host: Host, pid: str, mark: dict[str, Any], who: str) -> tuple[Sight, str]:
    stat = host.stat(pid)
    if stat is None or stat[1] != mark["process_start"]:
        return Sight.GONE, f"{who}: its process is gone"
    if stat[0] in ("T", "t"):
        return Sight.STOPPED, f"{who}: its process is stopped, and may be continued"
    return Sight.RUNS, f"{who}: its process runs"


def _read(path: str) -> Optional[str]:
    try:
        with open(path) as file:
            return file.read().strip()
    except (OSError, UnicodeDecodeError):
        return None
