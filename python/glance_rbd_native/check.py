"""``glance-rbd-native check``: what this host and glance-api's configuration give the native
driver, to run before turning it on and after each upgrade. It takes the form of OpenStack's
upgrade checks (``glance-status upgrade check``) through oslo.upgradecheck itself: its table,
its ``--json`` (``{"name", "checks": [{"check", "result", "details"}]}``) and its exit codes,
0 when every check succeeds, 1 when the worst is a Warning, 2 a Failure, 255 a check that
raised.

    glance-rbd-native check [--json] [--no-write] [--size MIB] --config-file glance-api.conf

A row for glance_store (would ``patch()`` take over), one for the native module and the
libraries it loaded on this host, one for the glance-api processes running here (``processes``:
which have the native module loaded, and which run one an upgrade replaced), one for the
in-flight bound against the chunks and this host's memory, and five for each
rbd backend: its cluster reached as its user, within glance's rados_connect_timeout
(``CONNECT_TIMEOUT`` where it sets none, for the check alone), and its pool there; that timeout
(a Warning where glance sets none); the caps of its user, proved by doing what uploads and
deletes do on an image of the check's own (``probes``: a missing cap is a Failure naming the
line that grants it, the manager's a Warning); ``--size`` MiB through the stock and the native
add and get, checked against the source and timed side by side (``round_trip``); and what dead
processes left in the pool (a Warning naming the command that removes it). With ``--no-write``
nothing is written to the cluster.
"""

import signal
import sys
import time
from typing import TYPE_CHECKING, Any, Optional, Union

from oslo_config import cfg
from oslo_upgradecheck import upgradecheck
from oslo_upgradecheck.upgradecheck import Code, Result

from glance_rbd_native import compat, probes, processes, switch
from glance_rbd_native.backends import Backend, Failure, connect
from glance_rbd_native.round_trip import SIZE_MIB, RoundTrip, TripFailed

if TYPE_CHECKING:
    import rados

    from glance_rbd_native._native import _Versions

TITLE = "glance-rbd-native check"
# Seconds a backend's cluster has to answer where glance sets no rados_connect_timeout
# (backends.read's bound): the check ends, whatever the cluster does.
CONNECT_TIMEOUT = 30
# The libraries whose files the row of the native module names.
CEPH_LIBRARIES = ("librbd.so", "librados.so")


class Checks(upgradecheck.UpgradeCommands):
    display_title = TITLE

    def __init__(
        self,
        conf: "cfg.ConfigOpts",
        backends: list[Backend],
        no_write: bool = False,
        size_mib: int = SIZE_MIB,
    ) -> None:
        self.conf = conf
        self.no_write = no_write
        self.size_mib = size_mib
        # What the probes and round trips could not remove, whatever ended them.
        self.left_behind: list[str] = []
        # This host's glance-api processes, read from /proc once for the rows that use them.
        self._processes: Optional[list[processes.Process]] = None
        rows: list[tuple[str, Any]] = [
            ("glance_store", Checks.glance_store),
            ("Native module", Checks.native_module),
            ("glance-api processes", Checks.glance_api_processes),
            ("max_in_flight_mib", (Checks.in_flight, {"backends": backends})),
        ]
        for b in backends:
            rows += [
                (f"Backend {b.name}", (Checks.backend, {"backend": b})),
                (f"Backend {b.name}: rados_connect_timeout", (Checks.timeout, {"backend": b})),
                (f"Backend {b.name}: caps", (Checks.caps, {"backend": b})),
                (f"Backend {b.name}: round trip", (Checks.round_trip, {"backend": b})),
                (f"Backend {b.name}: leftovers", (Checks.leftovers, {"backend": b})),
            ]
        self._upgrade_checks = tuple(rows)
        # Each backend's connection (and the seconds it took), or why there is none: made once,
        # for all its rows, so that a cluster that does not answer is waited for once.
        self._clusters: dict[str, Union[tuple[rados.Rados, float], Failure]] = {}

    def close(self) -> None:
        """Shuts down the connections the checks made."""
        for made in self._clusters.values():
            if not isinstance(made, Failure):
                made[0].shutdown()
        self._clusters.clear()

    def _glance_api_processes(self) -> list[processes.Process]:
        if self._processes is None:
            self._processes = processes.find()
        return self._processes

    def _cluster(self, backend: Backend) -> tuple["rados.Rados", float]:
        """`backend`'s connection and the seconds it took to make, or its Failure."""
        if backend.name not in self._clusters:
            started = time.monotonic()
            try:
                if backend.failure is not None:
                    raise backend.failure
                cluster = connect(backend)
                self._clusters[backend.name] = (cluster, time.monotonic() - started)
            except Failure as failure:
                self._clusters[backend.name] = failure
        made = self._clusters[backend.name]
        if isinstance(made, Failure):
            raise made
        return made

    def glance_store(self) -> Result:
        """Whether ``patch()`` takes over with the installed glance_store (the rule it applies)."""
        version = compat.glance_store_version()
        supported = (
            f"{'.'.join(map(str, compat.OLDEST_SUPPORTED))} to {compat.NEWEST_SUPPORTED_MAJOR}.x"
        )
        if not compat.is_supported(version):
            return Result(
                Code.FAILURE,
                f"glance_store {version} is not supported (supported: {supported}): patch() "
                "keeps the stock rbd driver",
            )
        return Result(
            Code.SUCCESS,
            f"glance_store {version}: patch() takes over add, get, get_size and delete "
            f"(supported: {supported}; tested: {', '.join(compat.TESTED_VERSIONS)})",
        )

    def native_module(self) -> Result:
        """The extension loads here, and the librbd it loaded is of a Ceph release it supports."""
        try:
            from glance_rbd_native import _native
        except ImportError as exc:  # what the host lacks (libraries.py)
            return Result(Code.FAILURE, str(exc))
        versions = _native._library_versions()
        details = f"{_loaded(versions)}; {_files()}"
        if versions["ceph"] < versions["oldest_ceph"]:
            return Result(
                Code.FAILURE,
                f"librbd is Ceph {versions['ceph']}'s, and the native module needs Ceph "
                f"{versions['oldest_ceph']} (Pacific) or later: {details}",
            )
        return Result(Code.SUCCESS, details)

    def glance_api_processes(self) -> Result:
        """The glance-api processes of this host (``processes``): which have the native module
        loaded, and which run one replaced since (an upgrade: restart them)."""
        found = self._glance_api_processes()
        if not found:
            return Result(Code.SUCCESS, "no glance-api process on this host")
        warn = False
        said = []
        for process in found:
            who = f"pid {process.pid}"
            if process.inner_pid is not None:
                who += f" (pid {process.inner_pid} in its pid namespace)"
            who += f" {process.server}"
            if process.workers:
                who += f", master of {', '.join(map(str, process.workers))}"
            module, replaced = process.module, process.replaced("/proc")
            if module is not None and replaced:
                warn = True
                state = (
                    f"runs the native module it loaded from {module.path}, {replaced}: restart "
                    "it to run the one installed"
                )
            elif module is not None:
                state = f"native module loaded from {module.path}, not replaced since"
            elif not process.readable:
                state = "cannot tell: its memory map cannot be read by this user (run as root)"
            elif process.workers:
                state = "no native module (its workers load the app)"
            elif process.switch:
                warn = True
                state = (
                    f"{switch.ENV} is set but the native module is not loaded: is the package "
                    "installed for its Python?"
                )
            else:
                state = "no native module: the stock driver"
            said.append(f"{who}: {state}")
        native = sum(1 for p in found if p.module is not None)
        return Result(
            Code.WARNING if warn else Code.SUCCESS,
            f"{len(found)} on this host, {native} with the native module: {'; '.join(said)}",
        )

    def in_flight(self, backends: list[Backend]) -> Result:
        """The in-flight bound of glance-api's configuration against its chunks and this host:
        each glance-api process holds up to its own bound."""
        from glance_rbd_native import settings

        bound = settings.max_in_flight(self.conf) >> 20
        chunk = max((b.store.WRITE_CHUNKSIZE >> 20 for b in backends), default=8)
        found = sum(1 for p in self._glance_api_processes() if not p.workers)
        memory = _memory_mib()
        held = max(1, found) * bound
        said = (
            f"{bound} MiB per glance-api process, {found} serving on this host"
            f"{'' if found else ' (counted as one)'}: up to {held} MiB held by transfers at "
            f"once, of this host's {memory} MiB; chunks of {chunk} MiB"
        )
        hurts = []
        if bound < 2 * chunk:
            hurts.append(
                f"it holds fewer than two {chunk} MiB chunks: an upload then has one write in "
                "flight at a time, and loses the native writer's overlap (the default, 64, "
                "keeps it)"
            )
        if held * 2 > memory:
            hurts.append(
                "the transfers of its processes may hold more than half this host's memory: "
                "lower max_in_flight_mib, or the workers"
            )
        if hurts:
            return Result(Code.WARNING, f"{said}; {'; '.join(hurts)}")
        return Result(Code.SUCCESS, said)

    def backend(self, backend: Backend) -> Result:
        """The backend's cluster answers its user, and its pool is there."""
        import rados

        entity = f"client.{backend.user or 'admin'}"
        try:
            cluster, took = self._cluster(backend)
            fsid = cluster.get_fsid()
            if not cluster.pool_exists(backend.pool):
                return Result(
                    Code.FAILURE,
                    f"pool {backend.pool!r} does not exist in cluster {fsid}, which "
                    f"{entity} reached in {took:.2f} s: create it, or correct rbd_store_pool",
                )
        except Failure as failure:
            return Result(Code.FAILURE, str(failure))
        except rados.Error as exc:
            return Result(Code.FAILURE, f"backend {backend.name}: {exc}")
        return Result(
            Code.SUCCESS,
            f"{entity} reached cluster {fsid} in {took:.2f} s; pool {backend.pool!r} is there",
        )

    def timeout(self, backend: Backend) -> Result:
        """Whether glance bounds the time a cluster that stops answering holds its requests."""
        if backend.glance_timeout is not None:
            return Result(
                Code.SUCCESS,
                f"{backend.glance_timeout} s: librados' mount and operation timeouts, which "
                "stock sets from it, as native does",
            )
        why = (
            "unset"
            if compat.stock_sets_librados_timeouts()
            else f"ignored by glance_store {compat.glance_store_version()} (4.7 on sets it)"
        )
        return Result(
            Code.WARNING,
            f"{why}: a monitor or OSD that stops answering holds each request of glance-api "
            "as long as librados waits (300 s to connect, without end for an operation); set "
            f"rados_connect_timeout in [{backend.name}], e.g. to 30",
        )

    def caps(self, backend: Backend) -> Result:
        """What glance's user may do in its pool, proved by doing it (``probes``): a cap it
        lacks is a Failure naming it, the manager's a Warning. With --no-write, the manager
        alone is asked, by a command that writes nothing."""
        import rados

        from glance_rbd_native import _native, leftovers

        entity = f"client.{backend.user or 'admin'}"
        grant = f"ceph auth caps {entity} {_native._glance_caps(backend.pool)}"

        def manager() -> "rados.Rados":
            return leftovers.connect(backend.conffile, backend.user, probes.MANAGER_WAIT)

        try:
            cluster, _ = self._cluster(backend)
            if not cluster.pool_exists(backend.pool):
                return Result(Code.FAILURE, f"not probed: pool {backend.pool!r} does not exist")
        except (Failure, rados.Error) as exc:
            return Result(Code.FAILURE, f"not probed: {exc}")
        if self.no_write:
            said = probes.ask_manager(
                cluster, manager, {"prefix": "rbd task list", "format": "json"}
            )
            if said is not None:
                return Result(Code.WARNING, _manager_warning(said, grant))
            return Result(
                Code.SUCCESS,
                f"the Ceph manager answers {entity}'s `rbd task list`; nothing else probed "
                "(--no-write)",
            )
        try:
            probed = probes.Probe(cluster, backend.pool, manager, self.left_behind).run()
        except rados.Error as exc:  # its pool could not be opened
            return Result(Code.FAILURE, f"not probed: {exc}")
        left = f"; left behind: {probed.left}" if probed.left else ""
        if probed.refused is not None:
            step, refusal = probed.refused
            code = probes.error_number(refusal)
            if code in probes.REFUSED:
                why = f": {entity}'s osd cap on the pool does not allow it"
            elif code in probes.UNANSWERED:
                why = f": {_native._caps_advice(code, backend.pool, entity)}"
            else:
                why = ""
            advice = (
                f"; grant glance's caps with `{grant}` (it replaces the user's caps: keep those "
                f"it has for other pools; `ceph auth get {entity}` shows them)"
                if why
                else ""
            )
            return Result(
                Code.FAILURE,
                f"{step} in pool {backend.pool!r} failed for {entity} ({refusal}){why}{advice}; "
                f"done before it: {', '.join(probed.done) or 'nothing'}{left}",
            )
        done = (
            f"{entity} did in pool {backend.pool!r} what uploads and deletes do: "
            f"{', '.join(probed.done)} ({probed.seconds:.2f} s)"
        )
        warnings = [
            *([_manager_warning(probed.manager, grant)] if probed.manager else []),
            *([f"left behind: {probed.left}"] if probed.left else []),
        ]
        if warnings:
            return Result(Code.WARNING, "; ".join([done, *warnings]))
        return Result(Code.SUCCESS, done)

    def round_trip(self, backend: Backend) -> Result:
        """The same bytes through the stock and the native add and get (``round_trip``)."""
        import rados
        import rbd

        if self.no_write:
            return Result(Code.SUCCESS, "not run (--no-write)")
        entity = f"client.{backend.user or 'admin'}"
        try:
            cluster, _ = self._cluster(backend)
            left = len(self.left_behind)
            with cluster.open_ioctx(backend.pool) as ioctx:
                trip = RoundTrip(backend.store, cluster, ioctx, self.size_mib, self.left_behind)
                stock, native = trip.run()
        except (Failure, rados.Error, rbd.Error, TripFailed) as exc:
            return Result(Code.FAILURE, f"{self.size_mib} MiB as {entity}: {exc}")
        said = (
            f"{self.size_mib} MiB as {entity} in pool {backend.pool!r}: stock add "
            f"{stock.add:.2f} s, get {stock.get:.2f} s; native add {native.add:.2f} s "
            f"({_ratio(stock.add, native.add)} stock's speed), get {native.get:.2f} s "
            f"({_ratio(stock.get, native.get)}); both stored and read back the source's size, "
            "md5 and sha512"
        )
        if len(self.left_behind) > left:
            return Result(Code.WARNING, f"{said}; left behind: {self.left_behind[-1]}")
        return Result(Code.SUCCESS, said)

    def leftovers(self, backend: Backend) -> Result:
        """What dead processes left in the pool: partial uploads, and deletes not purged."""
        import rados

        from glance_rbd_native import leftovers, settings
        from glance_rbd_native.leftovers import deletes

        try:
            cluster, _ = self._cluster(backend)
            with cluster.open_ioctx(backend.pool) as ioctx:
                pool = leftovers.Pool(cluster, ioctx)
                found = leftovers.uploads(pool, settings.presume_gone_after(self.conf))
                gone = sum(1 for upload in found if upload.state == "gone")
                orphans = sum(1 for d in deletes.deletions(ioctx) if d.state == "gone")
        except (Failure, rados.Error) as exc:
            return Result(Code.FAILURE, f"not looked at: {exc}")
        if not gone and not orphans:
            return Result(
                Code.SUCCESS,
                f"pool {backend.pool!r}: no partial image of a writer that is gone, no deleted "
                "image whose deleter is gone",
            )
        return Result(
            Code.WARNING,
            f"pool {backend.pool!r}: {gone} partial images of writers that are gone, {orphans} "
            "deleted images whose data a process that is gone was removing; `glance-rbd-native "
            "sweep` lists them, `sweep --remove` removes them",
        )


def _manager_warning(said: "probes.Said", grant: str) -> str:
    caps = f" (the manager would with mgr 'profile rbd' on the pool: `{grant}`)"
    return (
        f"{said.text}: glance-api's deletes then remove their data in its own process"
        f"{caps if said.refused else ''}"
    )


class Interrupted(BaseException):
    """A signal that ends the check: the probes remove what they made on the way out."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def run(checks: Checks, as_json: bool) -> int:
    """oslo.upgradecheck's run of `checks`: its table or its JSON on stdout, its exit code; 128
    plus the signal's number for a check ended by SIGINT or SIGTERM."""

    def interrupted(signum: int, frame: object) -> None:
        raise Interrupted(signum)

    argv = ["upgrade", "check", *(["--json"] if as_json else [])]
    previous = signal.signal(signal.SIGTERM, interrupted)
    try:
        return upgradecheck.main(cfg.ConfigOpts(), "glance", checks, argv, default_config_files=[])
    except (KeyboardInterrupt, Interrupted) as exc:
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        left = "; ".join(checks.left_behind)
        print(
            f"{TITLE}: interrupted by {signal.Signals(signum).name}; "
            + (f"left behind: {left}" if left else "what its probes made was removed"),
            file=sys.stderr,
        )
        return 128 + signum
    finally:
        signal.signal(signal.SIGTERM, previous)
        checks.close()


def _ratio(stock: float, native: float) -> str:
    return f"{stock / max(native, 1e-6):.1f}x"


def _memory_mib() -> int:
    """This host's memory (MemTotal), in MiB."""
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) >> 10
    return 0


def _loaded(versions: "_Versions") -> str:
    def dotted(triple: tuple[int, int, int]) -> str:
        return ".".join(map(str, triple))

    return (
        f"librbd {dotted(versions['librbd'])} (Ceph {versions['ceph']}), librados "
        f"{dotted(versions['librados'])}, {versions['openssl']}"
    )


def _files() -> str:
    """The files of librbd and librados this process loaded, as its memory map names them."""
    found: dict[str, str] = {}
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            name = path.rsplit("/", 1)[-1]
            for library in CEPH_LIBRARIES:
                if name.startswith(library + "."):
                    found.setdefault(library, path)
    return "loaded from " + ", ".join(found[name] for name in CEPH_LIBRARIES if name in found)
