"""``glance-rbd-native check``: what this host and glance-api's configuration give the native
driver, to run before turning it on and after each upgrade. It takes the form of OpenStack's
upgrade checks (``glance-status upgrade check``) through oslo.upgradecheck itself: its table,
its ``--json`` (``{"name", "checks": [{"check", "result", "details"}]}``) and its exit codes,
0 when every check succeeds, 1 when the worst is a Warning, 2 a Failure, 255 a check that
raised.

    glance-rbd-native check [--json] --config-file /etc/glance/glance-api.conf

A row for glance_store (would ``patch()`` take over), one for the native module and the
libraries it loaded on this host, and one for each rbd backend: its cluster reached as its user,
within glance's rados_connect_timeout (``CONNECT_TIMEOUT`` where it sets none, for the check
alone), and its pool there. Nothing is written to the cluster.
"""

import time
from typing import TYPE_CHECKING, Any

from oslo_config import cfg
from oslo_upgradecheck import upgradecheck
from oslo_upgradecheck.upgradecheck import Code, Result

from glance_rbd_native import compat
from glance_rbd_native.backends import Backend, Failure, connected

if TYPE_CHECKING:
    from glance_rbd_native._native import _Versions

TITLE = "glance-rbd-native check"
# Seconds a backend's cluster has to answer where glance sets no rados_connect_timeout: the
# check ends, whatever the cluster does.
CONNECT_TIMEOUT = 30
# The libraries whose files the row of the native module names.
CEPH_LIBRARIES = ("librbd.so", "librados.so")


class Checks(upgradecheck.UpgradeCommands):
    display_title = TITLE

    def __init__(self, backends: list[Backend]) -> None:
        rows: list[tuple[str, Any]] = [
            ("glance_store", Checks.glance_store),
            ("Native module", Checks.native_module),
        ]
        rows += [(f"Backend {b.name}", (Checks.backend, {"backend": b})) for b in backends]
        self._upgrade_checks = tuple(rows)

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

    def backend(self, backend: Backend) -> Result:
        """The backend's cluster answers its user, and its pool is there."""
        import rados

        if backend.failure is not None:
            return Result(Code.FAILURE, str(backend.failure))
        entity = f"client.{backend.user or 'admin'}"
        started = time.monotonic()
        try:
            with connected(backend, backend.timeout or CONNECT_TIMEOUT) as cluster:
                fsid = cluster.get_fsid()
                took = time.monotonic() - started
                if not cluster.pool_exists(backend.pool):
                    return Result(
                        Code.FAILURE,
                        f"pool {backend.pool!r} does not exist in cluster {fsid}, which "
                        f"{entity} reached in {took:.2f} s: create it, or correct "
                        "rbd_store_pool",
                    )
        except Failure as failure:
            return Result(Code.FAILURE, str(failure))
        except rados.Error as exc:
            return Result(Code.FAILURE, f"backend {backend.name}: {exc}")
        return Result(
            Code.SUCCESS,
            f"{entity} reached cluster {fsid} in {took:.2f} s; pool {backend.pool!r} is there",
        )


def run(checks: Checks, as_json: bool) -> int:
    """oslo.upgradecheck's run of `checks`: its table or its JSON on stdout, its exit code."""
    argv = ["upgrade", "check", *(["--json"] if as_json else [])]
    return upgradecheck.main(cfg.ConfigOpts(), "glance", checks, argv, default_config_files=[])


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
