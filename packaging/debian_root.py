"""A Debian root made with debootstrap, cached between runs, and commands run inside it.

Debian's packaged glance-api puts some 180 python3 packages into the system Python, which every
`--system-site-packages` virtualenv of the host would then see: it lives in a root of its own.
The root is built once per package list and preseeds, into a temporary directory renamed into
place when complete (an interrupted build is never used), under /var/cache, outside the
checkout. It shares the host's network, so the host's throwaway cluster on 127.0.0.1 is
reachable from it.

Every command runs in a mount namespace of its own (`unshare --mount --propagation private`):
/proc, /dev, /sys, a fresh /tmp and the bind mounts are made there and vanish with its last
process, so nothing stays mounted on any exit path. `chroot ... env -i` keeps the host's
environment (pyenv, CEPH_ARGS, PYTHONPATH) out. A root of another architecture runs under
qemu-user, each command in namespaces of its own that alone see the handler (emulation.py).

The cross build (cross.py, beside it) and the tests both use these roots; the tests import it
from packaging/, which pytest puts on the path (pyproject.toml).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass

import emulation

MIRROR = "http://deb.debian.org/debian"
# No database, message queue or keystone set-up at install time: the tests configure glance.
PRESEEDS = """\
glance-common glance/configure_db boolean false
glance-common glance/configure_rabbit boolean false
glance-common glance/configure_ksat boolean false
glance-common glance-common/dbconfig-install boolean false
glance-api glance/configure_api-endpoint boolean false
"""
# glance-api brings glance, glance_store and uWSGI's python3 plugin (it depends on them);
# the rbd driver needs the rados and rbd modules, the catalogue PyMySQL, the package numpy.
# The tests need no pip, but the list is part of each cached root's key: dropping it would
# rebuild them all. openstack-pkg-tools holds the helpers with which the init script reads
# uWSGI's bind address from a service's configuration.
GLANCE_PACKAGES = (
    "glance-api",
    "python3-rbd",
    "python3-rados",
    "python3-pymysql",
    "python3-numpy",
    "python3-pip",
    "openstack-pkg-tools",
)


@dataclass(frozen=True)
class Release:
    """A Debian release as a root is made of it: the suite, with its point and security
    updates as operators keep them, and the packages installed."""

    suite: str
    packages: tuple[str, ...]
    # sid has no point or security updates; the mirror reached here is a snapshot whose sid
    # Release file is past its Valid-Until, which apt refuses unless told.
    unstable: bool = False
    # The root's own architecture (another runs under qemu-user), and the others whose
    # packages it may install (multiarch: a cross build's libraries).
    arch: str = emulation.HOST_ARCH
    foreign: tuple[str, ...] = ()

    @property
    def sources(self) -> str:
        if self.unstable:
            return f"deb {MIRROR} {self.suite} main\n"
        return (
            f"deb {MIRROR} {self.suite} main\n"
            f"deb {MIRROR} {self.suite}-updates main\n"
            f"deb http://deb.debian.org/debian-security {self.suite}-security main\n"
        )

    @property
    def apt_conf(self) -> str:
        return 'Acquire::Check-Valid-Until "false";\n' if self.unstable else ""

    def key(self) -> str:
        """What the cached root is made of, as a short hash: a change of any of it builds
        anew."""
        architectures = (
            ""
            if self.arch == emulation.HOST_ARCH and not self.foreign
            else " ".join([self.arch, *self.foreign])
        )
        recipe = "\n".join(
            [
                self.suite,
                self.sources,
                *filter(None, [self.apt_conf]),
                " ".join(self.packages),
                PRESEEDS,
                *filter(None, [architectures]),
            ]
        )
        return hashlib.sha256(recipe.encode()).hexdigest()[:12]

    @property
    def name(self) -> str:
        """The suite, and the architecture when it is not the host's: the cache's name."""
        return self.suite if self.arch == emulation.HOST_ARCH else f"{self.suite}-{self.arch}"


# Debian 12: glance 25.1.0, glance_store 4.1.0, Python 3.11, Ceph 16.
BOOKWORM = Release("bookworm", GLANCE_PACKAGES)
# Debian 13: glance 30.0.0, glance_store 4.9.1, Python 3.13, Ceph 18; with pytest, and the
# rbd and ceph commands the contract tests check the pool with, for them to run on its Python.
TRIXIE = Release("trixie", (*GLANCE_PACKAGES, "python3-pytest", "ceph-common"))
# Debian sid: glance 33.0.0, glance_store 5.7.0, Python 3.14, Ceph 20.2; with the daemons too,
# for a Tentacle cluster (tests/harness/cluster.py runs them inside the root).
SID = Release(
    "sid",
    (*GLANCE_PACKAGES, "python3-pytest", "ceph-common", "ceph-mon", "ceph-osd", "ceph-mgr"),
    unstable=True,
)
# Debian 13 on arm64, under qemu-user: glance_store 4.9.1 and the Ceph 18 client without
# glance-api (emulation is slow: the contract's core is what runs there), python3-venv and
# Debian's pip for the wheel (a pip run from its wheel compiles all of itself at each start),
# and the rbd and ceph commands the contract tests check the pool with.
TRIXIE_ARM64 = Release(
    "trixie",
    (
        "python3-glance-store",
        "python3-rbd",
        "python3-rados",
        "python3-numpy",
        "python3-pytest",
        "python3-venv",
        "python3-pip",
        "ceph-common",
    ),
    arch="arm64",
)
# What the tests import in an emulated root, imported once when it is built so that it is
# byte-compiled: glance_store's rbd driver and what it loads, the Ceph bindings, numpy, pytest
# and its built-in plugins, and what `pip install` of a local wheel loads.
EMULATED_WARM_UP = """\
import glance_store.multi_backend, glance_store.location, glance_store._drivers.rbd
import numpy, rados, rbd
import pytest, _pytest.config
_pytest.config.get_config()
import pip._internal.commands.install, pip._internal.operations.install.wheel
import pip._internal.req.req_install, pip._internal.resolution.resolvelib.resolver
"""
# The aarch64 wheel's cross build (packaging/cross.py): Debian 13's rustc 1.85 with the aarch64
# standard library of the same build, the aarch64 cross gcc and the arm64 C libraries linked.
TRIXIE_CROSS = Release(
    "trixie",
    (
        "rustc",
        "cargo",
        "libstd-rust-dev:arm64",
        "gcc-aarch64-linux-gnu",
        "libc6-dev:arm64",
        "librbd-dev:arm64",
        "librados-dev:arm64",
        "libssl-dev:arm64",
        "pkgconf",
    ),
    foreign=("arm64",),
)
# The project's Debian package (packaging/deb.py builds it from the wheel).
PACKAGE = "glance-rbd-native"
DEB_BUILDER = pathlib.Path(__file__).resolve().with_name("deb.py")
CACHE = pathlib.Path(os.environ.get("GLANCE_RBD_ROOTS", "/var/cache/glance-rbd-native/roots"))
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MOUNT = """\
set -e
r=$1; shift
mount -t proc proc "$r/proc"
mount --rbind /dev "$r/dev"
mount -t sysfs sysfs "$r/sys"
mount -t tmpfs -o mode=1777 tmpfs "$r/tmp"
"""


class RootError(RuntimeError):
    pass


class DebianRoot:
    """A built root at `path`. binds: host directories mounted at the same path inside
    (read-only when listed in `read_only`)."""

    def __init__(self, path: pathlib.Path, release: Release, binds=(), read_only=()):
        self.path = pathlib.Path(path)
        self.release = release
        self.binds = [pathlib.Path(b).resolve() for b in binds]
        self.read_only = {pathlib.Path(b).resolve() for b in read_only}
        self.build_seconds: float | None = None

    @classmethod
    def ensure(cls, release: Release, **kwargs) -> DebianRoot:
        """The cached root of `release`, built first if missing. Holds a lock on it for the life
        of the process: tests rewrite its configuration, so two runs must not use it at once."""
        CACHE.mkdir(parents=True, exist_ok=True)
        final = CACHE / f"{release.name}-{release.key()}"
        lock = open(CACHE / f"{final.name}.lock", "w")  # held until close()
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another run to finish with {final}", file=sys.stderr)
            fcntl.flock(lock, fcntl.LOCK_EX)
        root = cls(final, release, **kwargs)
        root._lock = lock
        try:
            if not (final / ".complete").exists():
                root.build_seconds = _build(final, release)
        except BaseException:
            root.close()
            raise
        return root

    def bind(self, path, *, read_only=False) -> None:
        """Mounts host directory `path` at its own path inside, in every command from now on."""
        path = pathlib.Path(path).resolve()
        if path not in self.binds:
            self.binds.append(path)
        if read_only:
            self.read_only.add(path)

    def close(self) -> None:
        """Lets other runs use the root."""
        lock, self._lock = getattr(self, "_lock", None), None
        if lock is not None:
            lock.close()

    # -- running commands ------------------------------------------------------------------

    def command(
        self, argv, *, user: str | None = None, env: dict | None = None, cwd: str = "/"
    ) -> list[str]:
        """The host argv that runs `argv` inside the root, as `user` (default root), with only
        PATH, HOME, LANG and `env` in its environment. A native root's alone: an emulated
        root's commands need their ids mapped once started (`run`, `popen`)."""
        if emulation.foreign(self.release.arch):
            raise RootError(
                f"{self.path} is {self.release.arch}: start its commands with run or popen"
            )
        return [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            *self._chrooted(argv, user=user, env=env, cwd=cwd),
        ]

    def _chrooted(self, argv, *, user, env, cwd) -> list[str]:
        """The shell that mounts what the root needs, then chroots into it and runs `argv`."""
        script = MOUNT
        if emulation.foreign(self.release.arch):
            # Its user namespace may mount no sysfs of its own (the network's is the host's).
            script = script.replace('mount -t sysfs sysfs "$r/sys"', 'mount --rbind /sys "$r/sys"')
            script = script.replace("set -e\n", "set -e\n" + emulation.script(self.release.arch))
        for src in self.binds:
            quoted = shlex.quote(str(src))
            script += f'mkdir -p "$r"{quoted}\nmount --bind {quoted} "$r"{quoted}\n'
            if src in self.read_only:
                script += f'mount -o remount,bind,ro "$r"{quoted}\n'
        script += 'exec chroot "$@"\n'
        home = "/root"
        chroot = []
        if user:
            uid, gid, home = self.user(user)
            chroot.append(f"--userspec={uid}:{gid}")
            chroot.append(f"--groups={gid}")
        variables = {"PATH": PATH, "HOME": home, "LANG": "C.UTF-8", **(env or {})}
        return [
            "/bin/sh",
            "-c",
            script,
            "sh",
            str(self.path),
            *chroot,
            str(self.path),
            "/usr/bin/env",
            "-i",
            "-C",
            cwd,
            *(f"{k}={v}" for k, v in variables.items()),
            *map(str, argv),
        ]

    def _start(self, argv, *, user, env, cwd, **popen) -> subprocess.Popen:
        if emulation.foreign(self.release.arch):
            return emulation.spawn(self._chrooted(argv, user=user, env=env, cwd=cwd), **popen)
        return subprocess.Popen(self.command(argv, user=user, env=env, cwd=cwd), **popen)

    def run(
        self, *argv, user=None, env=None, cwd="/", timeout=600, check=True
    ) -> subprocess.CompletedProcess:
        proc = self._start(
            argv,
            user=user,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except BaseException:
            self.kill(proc)
            proc.communicate()
            raise
        res = subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)
        if check and res.returncode:
            raise RootError(
                f"{' '.join(map(str, argv))} in {self.path}: exit {res.returncode}\n"
                f"{res.stdout[-3000:]}{res.stderr[-3000:]}"
            )
        return res

    def popen(self, argv, *, user=None, env=None, cwd="/", stdout=None) -> subprocess.Popen:
        """Starts a long-lived process in its own session; its pid is the process itself
        (unshare, sh and chroot each exec the next), or in an emulated root unshare's: stop
        it with `kill`."""
        return self._start(
            argv,
            user=user,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def kill(self, proc: subprocess.Popen) -> None:
        """Kills what `run` or `popen` started, and in an emulated root every process of its
        pid namespace."""
        if emulation.foreign(self.release.arch):
            emulation.kill(proc)
        else:
            proc.kill()

    def processes(self, user: str | None = None) -> list[int]:
        """The pids of the processes running inside the root (of its `user` alone, if given)."""
        uid = None if user is None else self.user(user)[0]
        found = []
        for entry in pathlib.Path("/proc").iterdir():
            with contextlib.suppress(OSError):
                if (
                    entry.name.isdigit()
                    and os.readlink(entry / "root") == str(self.path)
                    and (uid is None or entry.stat().st_uid == uid)
                ):
                    found.append(int(entry.name))
        return found

    # -- files -----------------------------------------------------------------------------

    def file(self, path: str) -> pathlib.Path:
        """The host's path of `path` inside the root."""
        return self.path / path.lstrip("/")

    def write(self, path: str, text: str, *, owner="root", group="root", mode=0o644) -> None:
        target = self.file(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        os.chown(target, self.user(owner)[0], self.group(group))
        target.chmod(mode)

    def user(self, name: str) -> tuple[int, int, str]:
        """uid, gid and home of a user of the root (not the host's)."""
        for line in self.file("/etc/passwd").read_text().splitlines():
            fields = line.split(":")
            if fields[0] == name:
                return int(fields[2]), int(fields[3]), fields[5]
        raise KeyError(f"no user {name} in {self.path}")

    def group(self, name: str) -> int:
        for line in self.file("/etc/group").read_text().splitlines():
            fields = line.split(":")
            if fields[0] == name:
                return int(fields[2])
        raise KeyError(f"no group {name} in {self.path}")

    def install_deb(self, deb: pathlib.Path) -> str:
        """Installs the .deb with apt, as an operator would: its dependencies come from the
        root's installed packages, so nothing is downloaded. Reinstalls when the same version is
        installed (a rebuilt wheel keeps its version). Returns apt's output."""
        # A copy pip put into /usr/local would come before dist-packages on sys.path.
        for stale in [
            *self.path.glob("usr/local/lib/python3*/dist-packages/glance_rbd_native*"),
            self.file("/usr/local/bin/glance-rbd-native"),
        ]:
            if stale.is_dir():
                shutil.rmtree(stale)
            else:
                stale.unlink(missing_ok=True)
        # Where apt's unprivileged downloader can read it (/root is closed to it), outside the
        # /tmp that each command gets afresh.
        inside = f"/var/tmp/{deb.name}"
        shutil.copy2(deb, self.file(inside))
        try:
            return self.run(
                "apt-get",
                "install",
                "-y",
                "--reinstall",
                "--no-install-recommends",
                inside,
                env={"DEBIAN_FRONTEND": "noninteractive"},
            ).stdout
        finally:
            self.file(inside).unlink()

    def remove_deb(self, package: str = PACKAGE) -> str:
        """`apt-get remove`s the package if it is installed. Returns apt's output."""
        # apt knows a local .deb only while it is installed: otherwise "Unable to locate".
        if self.installed(package) is None:
            return ""
        return self.run(
            "apt-get", "remove", "-y", package, env={"DEBIAN_FRONTEND": "noninteractive"}
        ).stdout

    def installed(self, package: str = PACKAGE) -> str | None:
        """The installed version of `package`, or None."""
        res = self.run(
            "dpkg-query", "-W", "-f", "${db:Status-Status} ${Version}", package, check=False
        )
        status, _, version = res.stdout.partition(" ")
        return version if res.returncode == 0 and status == "installed" else None

    def versions(self, *packages: str) -> dict[str, str]:
        """Debian's versions of installed packages."""
        out = self.run("dpkg-query", "-W", "-f", "${Package} ${Version}\n", *packages).stdout
        return dict(line.split(" ", 1) for line in out.splitlines())


def build_deb(wheel: pathlib.Path, out: pathlib.Path, epoch: int | None = None) -> pathlib.Path:
    """The .deb of `wheel`, made in `out` by the builder `make deb` runs; `epoch` sets
    SOURCE_DATE_EPOCH."""
    env = {k: v for k, v in os.environ.items() if k != "SOURCE_DATE_EPOCH"}
    if epoch is not None:
        env["SOURCE_DATE_EPOCH"] = str(epoch)
    res = subprocess.run(
        [sys.executable, str(DEB_BUILDER), "--out", str(out), str(wheel)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    if res.returncode:
        raise RootError(f"{DEB_BUILDER} {wheel}: exit {res.returncode}\n{res.stdout}{res.stderr}")
    return pathlib.Path(res.stdout.strip())


def _build(final: pathlib.Path, release: Release) -> float:
    """debootstrap, then the packages; returns the seconds it took."""
    if shutil.which("debootstrap") is None:
        raise RootError("building the Debian root needs debootstrap (apt-get install debootstrap)")
    t0 = time.monotonic()
    partial = final.with_name(final.name + ".partial")
    _remove(partial)
    _remove(final)
    partial.mkdir()
    print(f"building the Debian root {final} (a few minutes, once)", file=sys.stderr)
    # debootstrap mounts /proc and /sys in the target itself: in a namespace of its own, they
    # go when it does, however it ends. Another architecture's packages are configured in the
    # root, under qemu (the second stage).
    emulated = emulation.foreign(release.arch)
    _check(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "debootstrap",
            "--variant=minbase",
            f"--arch={release.arch}",
            *(["--foreign"] if emulated else []),
            release.suite,
            str(partial),
            MIRROR,
        ]
    )
    root = DebianRoot(partial, release)
    if emulated:
        # As in an unprivileged container (its user namespace may not mknod): debootstrap's
        # own way of taking the devices as they are (the host's /dev, bound in).
        root.run(
            "/debootstrap/debootstrap", "--second-stage", env={"container": "lxc"}, timeout=1800
        )
    for arch in release.foreign:
        root.run("dpkg", "--add-architecture", arch)
    # No package may start a service.
    root.write("/usr/sbin/policy-rc.d", "#!/bin/sh\nexit 101\n", mode=0o755)
    root.write("/etc/apt/sources.list", release.sources)
    if release.apt_conf:
        root.write("/etc/apt/apt.conf.d/50glance-rbd-native", release.apt_conf)
    root.write("/root/preseed", PRESEEDS)
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    root.run("debconf-set-selections", "/root/preseed", env=env)
    root.run("apt-get", "update", "-qq", env=env)
    if emulated:
        # Each package's postinst byte-compiles it in a python3 of its own, which qemu takes
        # seconds to start: they are compiled once, in one python3, after the install.
        root.run(
            "dpkg-divert",
            "--local",
            "--rename",
            "--divert",
            "/usr/bin/py3compile.real",
            "--add",
            "/usr/bin/py3compile",
        )
        root.write("/usr/bin/py3compile", "#!/bin/sh\nexit 0\n", mode=0o755)
    root.run(
        "apt-get",
        "install",
        "-y",
        "-qq",
        "--no-install-recommends",
        "-o",
        "Dpkg::Options::=--force-confold",
        *release.packages,
        env=env,
        timeout=3600,
    )
    if emulated:
        root.file("/usr/bin/py3compile").unlink()
        root.run("dpkg-divert", "--local", "--rename", "--remove", "/usr/bin/py3compile")
        # What the tests import is compiled by importing it, in one python3; the rest of the
        # 3,600 modules they never load (compiling them all took some 10 minutes of the
        # machine's CPU under qemu). A module imported later is compiled then, once: the root
        # keeps its bytecode.
        root.run("python3", "-c", EMULATED_WARM_UP, timeout=1800)
        # apt under qemu takes a minute to read the suite's package lists at each start; the
        # tests install a local package whose dependencies are installed, for which the
        # installed ones are all apt needs to know.
        for lists in root.file("/var/lib/apt/lists").glob("*_Packages*"):
            lists.unlink()
    root.run("apt-get", "clean", env=env)
    root.file("/root/preseed").unlink()
    (partial / ".complete").write_text(" ".join(release.packages) + "\n")
    partial.rename(final)
    return time.monotonic() - t0


def _remove(path: pathlib.Path) -> None:
    """Removes an old or partial root, refusing if anything is mounted inside it (rmtree would
    go through a bind mount of the host's /dev)."""
    if not path.exists():
        return
    prefix = str(path.resolve()) + "/"
    with open("/proc/self/mountinfo") as mounts:
        inside = [line.split()[4] for line in mounts if (line.split()[4] + "/").startswith(prefix)]
    if inside:
        raise RootError(f"refusing to remove {path}: mounted inside it: {inside}")
    shutil.rmtree(path)


def _check(argv) -> None:
    res = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if res.returncode:
        raise RootError(
            f"{' '.join(argv)}: exit {res.returncode}\n{res.stdout[-3000:]}{res.stderr[-3000:]}"
        )


# Every root the tests and the cross build use, in the order they are first needed.
RELEASES = {
    "trixie-cross": TRIXIE_CROSS,
    "bookworm": BOOKWORM,
    "trixie": TRIXIE,
    "sid": SID,
    "trixie-arm64": TRIXIE_ARM64,
}
# `all` builds in two lines at once: the emulated root's build is one long chain of qemu
# processes that keeps one core busy for some 20 minutes, the native ones' build is the rest.
# Side by side they use both cores, and the emulated root is ready about when the native
# roots' tests end.
ALL = (("trixie-cross", "bookworm", "trixie", "sid"), ("trixie-arm64",))


def _ensure_all(names) -> None:
    for name in names:
        built = DebianRoot.ensure(RELEASES[name])
        built.close()
        print(
            built.path,
            f"built in {built.build_seconds:.0f}s" if built.build_seconds else "cached",
            flush=True,
        )


if __name__ == "__main__":
    # python3 packaging/debian_root.py [NAME ...|all]: builds (or finds) the cached roots,
    # one after the other (`all`: ALL's lines side by side); a run that uses a root meanwhile
    # waits for its lock. Exits non-zero if any failed.
    import concurrent.futures

    names = sys.argv[1:] or ["bookworm"]
    lines = ALL if names == ["all"] else (names,)
    with (
        contextlib.suppress(KeyboardInterrupt),
        concurrent.futures.ThreadPoolExecutor(len(lines)) as pool,
    ):
        for done in [pool.submit(_ensure_all, line) for line in lines]:
            done.result()
