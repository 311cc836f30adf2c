"""Boot a throwaway single-node Ceph cluster (mon + osd [+ mgr]) on loopback for tests, demos and
benchmarks: of the host's Ceph packages, or of a Debian root's (`inside=`: a Ceph 20 cluster from
Debian sid's daemons, run in that root).

    python -m tests.harness.cluster up|down|status DIR     (make cluster-up, make cluster-down)
"""

from __future__ import annotations

import argparse
import atexit
import base64
import contextlib
import json
import os
import pathlib
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from typing import ClassVar

# The optional mgr modules of 16.2: quotas need none of them (the mon enforces them from the
# PG stats digest of the mgr core). The always-on ones stay: disabling those turns health to ERR.
_MGR_DISABLED = (
    "alerts diskprediction_local influx insights iostat localpool mirroring nfs "
    "osd_perf_query osd_support prometheus restful selftest snap_schedule stats "
    "telegraf test_orchestrator zabbix"
)
_DEBUG = (
    "asok auth bdev bluefs bluestore mgr mgrc mon monc ms objecter osd paxos rados rbd rocksdb"
).split()
_ADMIN_CAPS = {"mon": "allow *", "osd": "allow *", "mgr": "allow *", "mds": "allow *"}
# The osds tell the mon they are going down, so the mon goes last.
_STOP_RANK = {"mgr": 0, "osd": 1, "mon": 2}


class CephError(RuntimeError):
    pass


def legacy_key() -> str:
    """A new cephx key of the legacy `aes` cipher, which every release parses: a base64
    CryptoKey of type 1, created (sec, nsec), length 16, secret."""
    key = struct.pack("<HIIH", 1, int(time.time()), 0, 16) + os.urandom(16)
    return base64.b64encode(key).decode()


def key_type(key: str) -> str:
    """The cipher of a cephx key: a base64 CryptoKey whose first field is its type."""
    return {1: "aes", 2: "aes256k"}.get(
        struct.unpack_from("<H", base64.b64decode(key))[0], "unknown"
    )


def _keyring(name: str, key: str, **caps: str) -> str:
    return "".join(
        [f"[{name}]\n\tkey = {key}\n", *(f'\tcaps {k} = "{v}"\n' for k, v in caps.items())]
    )


def free_port() -> int:
    """A loopback TCP port nobody listens on (for the mon, and for glance-api)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """inside: a DebianRoot whose Ceph runs the daemons and the tools (the cluster's directory
    is bound into it at its own path); None for the host's.

    The stores of the tests connect as `store_user` through `store_conf` (client.admin through
    ceph.conf unless `use_for_stores` says otherwise), and attach() hands that on."""

    # The clusters of this process that run, booted or attached: what the test run's
    # watchdog (tests/harness/watchdog.py) checks.
    watched: ClassVar[set[Cluster]] = set()

    def __init__(
        self,
        root: pathlib.Path,
        *,
        objectstore="bluestore",
        osd_size_gib=8,
        with_mgr=False,
        port=None,
        pool="images",
        inside=None,
        osds=1,
    ):
        if objectstore not in ("bluestore", "memstore"):
            raise ValueError(f"unsupported objectstore {objectstore!r}")
        self.root = pathlib.Path(root).resolve()
        self.objectstore = objectstore
        self.osd_size_gib = osd_size_gib
        # One osd, pools of one replica; more: pools of that many, min_size one less, and
        # failure detection fast enough for the tests that kill one.
        self.osds = osds
        self.with_mgr = with_mgr
        self.port = port
        self.pool = pool
        self.inside = inside
        self.fsid = str(uuid.uuid4())
        self.conf_path = self.root / "ceph.conf"
        self.store_user = "admin"
        self.store_conf = self.conf_path
        # The cipher of the keys user() makes: None, the cluster's default.
        self.user_cipher: str | None = None
        self.boot_seconds: float | None = None
        # name -> Popen for daemons we spawned, or a bare pid for daemons found via attach().
        self._procs: dict[str, subprocess.Popen | int] = {}
        # The daemons being stopped on purpose: not dead for the watchdog.
        self._stopping: set[str] = set()

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> Cluster:
        if self.conf_path.exists():
            raise FileExistsError(
                f"{self.root} already holds a cluster; use Cluster.attach() or a fresh dir"
            )
        if len(str(self.root / "run/client.admin.4194304.asok")) > 107:
            raise ValueError(
                f"{self.root} is too long for the unix sockets put under it (max 107 bytes)"
            )
        t0 = time.monotonic()
        for d in ("log", "run", "crash", "mon/a", "mgr/x", *self._osd_dirs()):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        if self.inside is not None:
            self.inside.bind(self.root)
        self.port = self.port or free_port()
        atexit.register(self.stop)  # don't leak daemons if the caller dies before stop()
        try:
            self._boot()
        except BaseException as e:
            self.stop()
            e.add_note(f"daemon logs: {self.root / 'log'}")
            raise
        self.boot_seconds = time.monotonic() - t0
        Cluster.watched.add(self)
        return self

    def _osd_dirs(self) -> list[str]:
        return [f"osd/{i}" for i in range(self.osds)]

    def _boot(self) -> None:
        r = self.root
        osds = [(i, str(uuid.uuid4()), self.new_key()) for i in range(self.osds)]
        self._write_files([key for _, _, key in osds])
        self._tool(
            "monmaptool",
            "--create",
            "--fsid",
            self.fsid,
            "--addv",
            "a",
            f"[v2:127.0.0.1:{self.port}/0]",
            r / "monmap",
        )
        self._tool(
            "ceph-mon",
            "--mkfs",
            "-i",
            "a",
            "--monmap",
            r / "monmap",
            "--keyring",
            r / "mon.keyring",
        )
        # bluestore mkfs takes seconds and needs no mon, so overlap it with the mon boot.
        mkfs = [
            subprocess.Popen(
                self._argv(
                    [
                        "ceph-osd",
                        "-c",
                        str(self.conf_path),
                        "-i",
                        str(i),
                        "--mkfs",
                        "--no-mon-config",
                        "--osd-uuid",
                        fsid,
                    ]
                ),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            for i, fsid, _ in osds
        ]
        outputs = []
        try:
            self._spawn("mon.a")
            for i, fsid, key in osds:
                secrets = r / f"osd/{i}/secrets.json"
                secrets.write_text(json.dumps({"cephx_secret": key}))
                self.ceph("osd", "new", fsid, str(i), "-i", secrets)
                secrets.unlink()
            self.ceph("osd", "pool", "create", self.pool, "8", "8")
            outputs = [proc.communicate(timeout=120)[0] for proc in mkfs]
        finally:
            for proc in mkfs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        for proc, out in zip(mkfs, outputs, strict=True):
            if proc.returncode:
                raise CephError(
                    f"ceph-osd --mkfs failed ({proc.returncode}): {out.decode(errors='replace')}"
                )
        for i in range(self.osds):
            self._spawn(f"osd.{i}")
        if self.with_mgr:
            self._spawn("mgr.x")
        self._wait("the osds up", self._osd_up, 120)
        self.rbd("pool", "init", self.pool, timeout=120)
        self._probe()
        if self.with_mgr:
            self._wait("mgr available", self._mgr_available, 120)

    def _write_files(self, osd_keys: list[str]) -> None:
        r = self.root
        admin, mgr, mon = self.new_key(), self.new_key(), self.new_key()
        mgr_caps = {"mon": "allow profile mgr", "osd": "allow *", "mds": "allow *"}
        (r / "ceph.client.admin.keyring").write_text(_keyring("client.admin", admin, **_ADMIN_CAPS))
        # The mon imports every entity of its mkfs keyring, so the mgr key needs no `auth` call
        # later.
        (r / "mon.keyring").write_text(
            _keyring("mon.", mon, mon="allow *")
            + _keyring("client.admin", admin, **_ADMIN_CAPS)
            + _keyring("mgr.x", mgr, **mgr_caps)
        )
        (r / "mgr/x/keyring").write_text(_keyring("mgr.x", mgr))
        # An osd needs its own keyring file: with the global one, mkfs/boot clobber the admin key.
        for i, key in enumerate(osd_keys):
            (r / f"osd/{i}/keyring").write_text(_keyring(f"osd.{i}", key))
        size = self.osd_size_gib << 30
        debug = "".join(f"debug {d} = 0/0\n" for d in _DEBUG)
        self.conf_path.write_text(f"""\
[global]
fsid = {self.fsid}
mon host = v2:127.0.0.1:{self.port}
public addr = 127.0.0.1
keyring = {r}/ceph.client.admin.keyring
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
ms bind ipv4 = true
ms bind ipv6 = false
ms bind msgr1 = false
log file = {r}/log/$name.log
mon cluster log file = {r}/log/cluster.log
run dir = {r}/run
pid file = {r}/run/$name.pid
admin socket = {r}/run/$name.asok
crash dir = {r}/crash
osd pool default size = {self.osds}
osd pool default min size = {max(1, self.osds - 1)}
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
# Batching map updates for a second buys nothing with one mon and slows every boot step.
paxos propose interval = 0.1
mon warn on pool no redundancy = false
# The host disk is shared; the mon must not warn at 30% free, let alone quit at 5%.
mon data avail warn = 2
mon data avail crit = 1
# A stopped osd must stay "in" for fault tests, however long it is down.
mon osd down out interval = 0
mon warn on osd down out interval zero = false
mon warn on insecure global id reclaim allowed = false
# Report PG stats every second so pool quotas (FULL flag) take effect quickly.
mgr stats period = 1
mon mgr digest period = 1
mon tick interval = 1
mgr initial modules =
{self._failure_detection()}{debug}
[mon]
mon data = {r}/mon/$id

[osd]
osd data = {r}/osd/$id
keyring = {r}/osd/$id/keyring
osd objectstore = {self.objectstore}
osd op num shards = 2
osd op num threads per shard = 1
osd memory target = 1073741824
# A killed client's watch goes after 15 s rather than 30: the sweep tests wait for it.
osd client watch timeout = 15
# The block file must live outside osd data, or mkfs fails with ELOOP on its own symlink.
bluestore block path = {r}/osd.$id.block
bluestore block create = true
bluestore block size = {size}
bluestore fsck on mkfs = false
memstore device bytes = {size}

[mgr]
mgr data = {r}/mgr/$id
keyring = {r}/mgr/$id/keyring
mgr disabled modules = {_MGR_DISABLED}

[client]
# Without $pid every second concurrent client fails to bind the shared socket.
admin socket = {r}/run/$name.$pid.asok
""")

    def _failure_detection(self) -> str:
        if self.osds == 1:
            return ""
        # All osds share this host: peers report a dead one per osd, not per host, and say
        # so within seconds rather than the 20 s of the default grace.
        return (
            "mon osd reporter subtree level = osd\nmon osd min down reporters = 1\n"
            "osd heartbeat interval = 1\nosd heartbeat grace = 4\n"
        )

    def stop(self) -> None:
        Cluster.watched.discard(self)
        for name, pid in self._strays().items():
            self._procs.setdefault(name, pid)
        for name in sorted(self._procs, key=lambda name: _STOP_RANK[name.split(".")[0]]):
            self._kill(name)

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @classmethod
    def attach(cls, root: pathlib.Path) -> Cluster:
        """Control a cluster booted by another process (e.g. `cluster.py up`), with this
        process's Ceph tools."""
        state = json.loads((pathlib.Path(root) / "cluster.json").read_text())
        c = cls(
            root,
            objectstore=state["objectstore"],
            osd_size_gib=state["osd_size_gib"],
            with_mgr=state["with_mgr"],
            port=state["port"],
            pool=state["pool"],
            osds=state.get("osds", 1),
        )
        c.fsid = state["fsid"]
        c.store_user = state.get("store_user", "admin")
        c.store_conf = pathlib.Path(state.get("store_conf", c.conf_path))
        c.user_cipher = state.get("user_cipher")
        c._procs = {name: pid for name, pid in state["pids"].items() if c._is_ours(pid)}
        if c.running():
            Cluster.watched.add(c)
        return c

    @classmethod
    def describe(cls, conf_path: str | os.PathLike, pool: str = "images") -> Cluster:
        """A cluster known by its ceph.conf and pool alone, run by another process (a benchmark's
        child, given --conf and --pool): enough for clients (make_store, `ceph`, `rbd`), which
        read everything else from the conf; it controls no daemon."""
        conf_path = pathlib.Path(conf_path).resolve()
        c = cls(conf_path.parent, pool=pool)
        c.conf_path = conf_path
        for line in conf_path.read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "fsid":
                c.fsid = value.strip()
        return c

    def running(self) -> bool:
        """Whether the mon and the osds are up, as far as their processes go."""
        return all(self._alive(name) for name in ("mon.a", *self._osd_names()))

    def _osd_names(self) -> list[str]:
        return [f"osd.{i}" for i in range(self.osds)]

    def dead(self) -> list[str]:
        """The daemons that should run and do not (those stopped on purpose aside)."""
        return [
            name
            for name in list(self._procs)
            if name not in self._stopping and not self._alive(name)
        ]

    def pid(self, name: str) -> int:
        proc = self._procs[name]
        return proc.pid if isinstance(proc, subprocess.Popen) else proc

    def exit_status(self, name: str) -> str:
        proc = self._procs.get(name)
        code = proc.poll() if isinstance(proc, subprocess.Popen) else None
        if code is None:
            return "its process is gone"
        if code < 0:
            return f"killed by {signal.Signals(-code).name}"
        return f"exit status {code}"

    def log_tail(self, name: str, lines: int = 20) -> str:
        """The last lines of a daemon's output (its aborts) and of its log."""
        tails = []
        for path in (self.root / "log" / f"{name}.out", self.root / "log" / f"{name}.log"):
            try:
                text = path.read_text(errors="replace").splitlines()[-lines:]
            except OSError as e:
                text = [f"({e.strerror})"]
            tails.append("\n".join([f"==> {path} <==", *text]))
        return "\n".join(tails)

    def kill_daemons(self) -> None:
        """SIGKILL to every daemon, without waiting: a process about to end in haste."""
        for name in list(self._procs):
            with contextlib.suppress(ProcessLookupError, KeyError):
                os.kill(self.pid(name), signal.SIGKILL)

    # -- daemons on demand ----------------------------------------------------------------

    def start_mgr(self) -> None:
        # Available already: started by whoever runs the cluster, maybe in a pid namespace
        # where its process is not to be seen (an emulated Debian root's).
        if self._mgr_available():
            return
        if not self._alive("mgr.x"):
            self._spawn("mgr.x")
        self._wait("mgr available", self._mgr_available, 120)

    def stop_osd(self) -> None:
        if self.objectstore == "memstore" and self._alive("osd.0"):
            # memstore persists only on a clean umount, which the default fast shutdown skips.
            self.ceph("tell", "osd.0", "config", "set", "osd_fast_shutdown", "false")
        self._kill("osd.0")
        # Normally the osd marks itself down on SIGTERM; after a SIGKILL nobody else would.
        self.ceph("osd", "down", "0")

    def start_osd(self, *osds: int) -> None:
        """Starts those of `osds` (osd.0 if none) that are not running, then waits for all the
        cluster's osds to be up."""
        for osd in osds or (0,):
            if not self._alive(f"osd.{osd}"):
                self._spawn(f"osd.{osd}")
        self._wait("the osds up", self._osd_up, 120)
        self._probe()

    def kill_osd(self, osd: int) -> None:
        """SIGKILL to one osd, as a crash or the OOM killer: nobody tells the mon, its peers
        find out. The watchdog knows it was on purpose."""
        name = f"osd.{osd}"
        pid = self.pid(name)
        self._stopping.add(name)
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while self._alive(name) and time.monotonic() < deadline:
            time.sleep(0.05)
        del self._procs[name]
        self._stopping.discard(name)
        self._save()

    @contextlib.contextmanager
    def paused(self, name: str):
        """`name` stopped (SIGSTOP) for the block, as a daemon that does not answer: what waits
        for it waits there, what does not goes on."""
        pid = self.pid(name)
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)

    # -- clients ---------------------------------------------------------------------------

    def ceph(self, *args, timeout=60) -> str:
        return self._tool("ceph", *args, timeout=timeout)

    def rbd(self, *args, timeout=60) -> str:
        return self._tool("rbd", *args, timeout=timeout)

    def mon(self, prefix: str, timeout=60, stdin: pathlib.Path | None = None, **args) -> str:
        """A command to the monitors, as `ceph` would send it (`prefix` and its arguments by
        name, in the program's order; `stdin`: the file `-i` would read), through this
        Python's rados module. A cluster of a Debian root's Ceph (`inside`) gets the root's
        `ceph`, the same command as a command line."""
        if self.inside is not None:
            argv = [*prefix.split()]
            for name, value in args.items():
                if value is True:
                    argv.append(f"--{name.replace('_', '-')}")
                elif name == "format":
                    argv += ["--format", value]
                else:
                    argv += value if isinstance(value, list) else [str(value)]
            return self.ceph(*argv, *(["-i", stdin] if stdin else []), timeout=timeout)
        with self._client(timeout) as client:
            status, out, err = client.mon_command(
                json.dumps({"prefix": prefix, **args}),
                stdin.read_bytes() if stdin else b"",
                timeout=timeout,
            )
        if status:
            raise CephError(f"{prefix} {args}: {os.strerror(-status)}: {err}")
        return out.decode()

    def images(self, pool=None) -> list[str]:
        if self.inside is not None:
            return self.rbd("ls", pool or self.pool).split()
        import rbd

        with self._client(60) as client, client.open_ioctx(pool or self.pool) as ioctx:
            return rbd.RBD().list(ioctx)

    @contextlib.contextmanager
    def _client(self, timeout: float):
        """A connection as admin, through this Python's rados module: the `ceph` and `rbd`
        programs take a second to start on a busy machine, and seconds under emulation."""
        import rados  # Debian's, or a Debian root's: imported only where a client runs

        try:
            with rados.Rados(
                conffile=str(self.conf_path),
                rados_id="admin",
                conf={"client_mount_timeout": str(timeout)},
            ) as client:
                yield client
        except rados.Error as e:
            raise CephError(f"{type(e).__name__}: {e}") from None

    def user(self, name: str, *, cipher: str | None = None, **caps: str) -> pathlib.Path:
        """A cephx user `client.<name>` with `caps` (mon=..., osd=..., mgr=...), made or updated,
        and a conf file that authenticates as it: the path of that conf. cipher: give it a new
        key of that type ("aes": the legacy one older clients can parse) instead of the
        cluster's default (or of `user_cipher`, when set)."""
        keyring = self.root / f"ceph.client.{name}.keyring"
        cipher = cipher or self.user_cipher
        if cipher is None:
            keyring.write_text(self.mon("auth get-or-create", entity=f"client.{name}"))
        else:
            self.rekey(f"client.{name}", keyring, cipher, caps)
        self.mon(
            "auth caps",
            entity=f"client.{name}",
            caps=[part for entity, cap in caps.items() for part in (entity, cap)],
        )
        conf = self.root / f"ceph.{name}.conf"
        conf.write_text(
            self.conf_path.read_text().replace(
                f"keyring = {self.root}/ceph.client.admin.keyring", f"keyring = {keyring}"
            )
        )
        return conf

    def release(self) -> int:
        """The Ceph release of the cluster's monitors (16, 20, ...)."""
        monmap = json.loads(self.mon("mon dump", format="json"))
        return int(monmap["min_mon_release"])

    def use_for_stores(self, user: str, conf: pathlib.Path) -> None:
        """The tests' stores connect as client.`user` through `conf` (recorded for attach())."""
        self.store_user, self.store_conf = user, pathlib.Path(conf)
        self._save()

    def make_users_with(self, cipher: str | None) -> None:
        """The keys of the users user() makes from now on (recorded for attach()): `cipher`, or
        the cluster's default (None)."""
        self.user_cipher = cipher
        self._save()

    # -- keys ------------------------------------------------------------------------------

    def new_key(self) -> str:
        """A new secret of the cluster's default cipher (aes on Ceph 16, aes256k on Ceph 20),
        made by its own ceph-authtool."""
        return self._run(["ceph-authtool", "--gen-print-key"]).strip()

    def allow_ciphers(self, *ciphers: str) -> None:
        """What a Tentacle cluster needs for older clients: the monmap's allowed cephx ciphers."""
        self.ceph("mon", "set", "auth_allowed_ciphers", ",".join(ciphers))

    def rekey(self, entity: str, keyring: pathlib.Path, cipher: str, caps=None) -> None:
        """Gives `entity` (made if new) a new key of `cipher`, written to `keyring`; with `caps`,
        or its own."""
        if caps is None:
            caps = json.loads(self.mon("auth get", entity=entity, format="json"))[0]["caps"]
        # Ceph 16's ceph-authtool knows no --key-type (all its keys are aes).
        key = (
            legacy_key()
            if cipher == "aes"
            else self._run(["ceph-authtool", "--gen-print-key", "--key-type", cipher]).strip()
        )
        tmp = keyring.with_name(keyring.name + ".new")
        tmp.write_text(_keyring(entity, key, **caps))
        self.mon("auth import", stdin=tmp)
        tmp.chmod(0o644)
        tmp.replace(keyring)

    def create_pool(self, name: str) -> None:
        self.mon("osd pool create", pool=name, pg_num=8, pgp_num=8)
        self.rbd("pool", "init", name, timeout=120)

    def delete_pool(self, name: str) -> None:
        self.mon("osd pool delete", pool=name, pool2=name, yes_i_really_really_mean_it=True)

    @contextlib.contextmanager
    def pool_over_quota(self, name: str):
        """A new pool `name` flagged full: 8 MiB written to its image `filler`, then a 4 MiB
        quota. Starts the mgr (quotas need its pool statistics); deletes the pool afterwards.
        The quota comes after the writes: set before, a slow writer (an emulated `rbd`) is still
        writing when the pool is flagged full, and blocks there."""
        self.start_mgr()
        self.create_pool(name)
        try:
            self.rbd("create", "--size", "16M", f"{name}/filler")
            self.rbd("bench", "--io-type", "write", "--io-total", "8M", f"{name}/filler")
            self.mon("osd pool set-quota", pool=name, field="max_bytes", val=str(4 << 20))
            self.wait_pool_full(name)
            yield name
        finally:
            self.delete_pool(name)

    def wait_pool_full(self, name: str, timeout: float = 60) -> None:
        """Waits for the mon to flag a pool over its quota (needs the mgr's pool statistics)."""

        def full() -> bool:
            pools = json.loads(self.mon("osd pool ls", detail="detail", format="json"))
            return any(p["pool_name"] == name and "full" in p.get("flags_names", "") for p in pools)

        self._wait(f"pool {name} full", full, timeout)

    def env(self) -> dict:
        return {**os.environ, "CEPH_CONF": str(self.conf_path)}

    def _tool(self, tool: str, *args, timeout=60) -> str:
        return self._run([tool, "-c", str(self.conf_path), *map(str, args)], timeout=timeout)

    def _argv(self, argv: list[str]) -> list[str]:
        """argv as run on the host: inside the Debian root, if the cluster is of its Ceph."""
        return argv if self.inside is None else self.inside.command(argv)

    def _run(self, argv: list[str], timeout=60) -> str:
        cmd = list(map(str, argv))
        env = self.env() if self.inside is None else None
        try:
            res = subprocess.run(
                self._argv(cmd),
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise CephError(f"{' '.join(cmd)}: timed out after {timeout}s") from None
        if res.returncode:
            raise CephError(f"{' '.join(cmd)}: exit {res.returncode}: {res.stderr.strip()}")
        return res.stdout

    # -- internals -------------------------------------------------------------------------

    def _spawn(self, name: str) -> None:
        kind, _, ident = name.partition(".")
        with open(self.root / "log" / f"{name}.out", "ab") as out:
            # -f keeps the daemon in the foreground so the pid we hold is the daemon itself;
            # its own session keeps it alive after `up` exits and away from the caller's Ctrl-C.
            self._procs[name] = subprocess.Popen(
                self._argv([f"ceph-{kind}", "-f", "-c", str(self.conf_path), "-i", ident]),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._save()  # record the pid at once, so even a crashed caller leaves a way to clean up

    def _alive(self, name: str) -> bool:
        proc = self._procs.get(name)
        if isinstance(proc, subprocess.Popen):
            return proc.poll() is None
        return proc is not None and self._is_ours(proc)

    def _strays(self) -> dict[str, int]:
        """This cluster's daemons that another process started, by their ceph.conf: a child
        attached to the cluster starts the mgr when a test needs one, and then exits."""
        found = {}
        for entry in pathlib.Path("/proc").iterdir():
            with contextlib.suppress(OSError, ValueError, IndexError):
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                if (
                    entry.name.isdigit()
                    and argv[0].startswith(b"ceph-")
                    and self._is_ours(int(entry.name))
                ):
                    name = f"{argv[0][5:].decode()}.{argv[argv.index(b'-i') + 1].decode()}"
                    if name.split(".")[0] in _STOP_RANK:
                        found[name] = int(entry.name)
        return found

    def _is_ours(self, pid: int) -> bool:
        # Guards against pid reuse: a live, non-zombie process started with our ceph.conf.
        try:
            stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
            cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        return stat.rpartition(")")[2].split()[0] != "Z" and str(self.conf_path).encode() in cmdline

    def _kill(self, name: str, grace: float = 20.0) -> None:
        if not self._alive(name):
            if self._procs.pop(name, None) is not None:
                self._save()
            return
        pid = self.pid(name)
        self._stopping.add(name)
        try:
            for sig, bound in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
                deadline = time.monotonic() + bound
                while self._alive(name) and time.monotonic() < deadline:
                    time.sleep(0.05)
                if not self._alive(name):
                    del self._procs[name]
                    self._save()
                    return
            raise CephError(f"{name} (pid {pid}) survived SIGKILL")
        finally:
            self._stopping.discard(name)

    def _wait(self, what: str, ready, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            for name, proc in self._procs.items():
                if isinstance(proc, subprocess.Popen) and proc.poll() is not None:
                    log = (self.root / "log" / f"{name}.out").read_text(errors="replace")[-2000:]
                    raise CephError(
                        f"{name} exited with {proc.returncode} while waiting for {what}:\n{log}"
                    )
            try:
                if ready():
                    return
            except CephError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not ready after {timeout}s")
            time.sleep(0.3)

    def _osd_up(self) -> bool:
        osds = json.loads(self.ceph("osd", "dump", "--format", "json", timeout=10))["osds"]
        return sum(1 for o in osds if o["up"]) == self.osds

    def _mgr_available(self) -> bool:
        return json.loads(self.mon("mgr stat", format="json"))["available"]

    def _probe(self) -> None:
        # Only a real write proves the PGs have peered and rbd's object class is loaded.
        image = f"{self.pool}/probe-{uuid.uuid4().hex[:8]}"
        self.rbd("create", "--size", "1M", image, timeout=120)
        self.rbd("rm", "--no-progress", image, timeout=120)

    def _save(self) -> None:
        pids = {name: self.pid(name) for name in self._procs}
        state = {
            "fsid": self.fsid,
            "conf": str(self.conf_path),
            "pool": self.pool,
            "port": self.port,
            "objectstore": self.objectstore,
            "osd_size_gib": self.osd_size_gib,
            "osds": self.osds,
            "with_mgr": self.with_mgr,
            "pids": pids,
            "store_user": self.store_user,
            "store_conf": str(self.store_conf),
            "user_cipher": self.user_cipher,
        }
        tmp = self.root / "cluster.json.tmp"
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.replace(self.root / "cluster.json")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser(
        "up", help="boot a cluster in DIR and leave it running; prints the conf path"
    )
    up.add_argument("dir", type=pathlib.Path)
    up.add_argument("--objectstore", choices=("bluestore", "memstore"), default="bluestore")
    up.add_argument("--osd-size-gib", type=int, default=8)
    up.add_argument(
        "--mgr", action="store_true", help="also start a ceph-mgr (needed for pool quotas)"
    )
    down = sub.add_parser("down", help="stop the daemons recorded in DIR/cluster.json")
    down.add_argument("dir", type=pathlib.Path)
    status = sub.add_parser("status", help="print DIR's absolute path if a cluster runs there")
    status.add_argument("dir", type=pathlib.Path)
    args = parser.parse_args(argv)
    if args.cmd == "up":
        c = Cluster(
            args.dir,
            objectstore=args.objectstore,
            osd_size_gib=args.osd_size_gib,
            with_mgr=args.mgr,
        ).start()
        atexit.unregister(c.stop)  # the whole point of `up` is that the daemons outlive it
        print(f"booted in {c.boot_seconds:.1f}s", file=sys.stderr)
        print(c.conf_path)
    elif args.cmd == "status":
        if (args.dir / "cluster.json").exists() and Cluster.attach(args.dir).running():
            print(args.dir.resolve())
    elif (args.dir / "cluster.json").exists():
        Cluster.attach(args.dir).stop()


if __name__ == "__main__":
    main()
