"""glance's rbd backends, as its configuration names them and their Stores read them, and a
connection to the cluster of each: what the ``glance-rbd-native`` commands look at.

A backend that cannot be read is a ``Failure`` of its own, and the others still are; a
configuration that cannot be read at all is a usage error (``EXIT_USAGE``).
"""

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Optional

from glance_rbd_native import compat, leftovers

if TYPE_CHECKING:
    import rados
    from oslo_config import cfg

EXIT_DONE = 0
# A backend that could not be read, or something `sweep --remove` set out to remove is left.
EXIT_LEFT = 1
# A bad command line or configuration: what was asked cannot be run as it is.
EXIT_USAGE = 2


class Failure(Exception):
    """A message for the operator, and the exit status that goes with it."""

    def __init__(self, message: str, status: int = EXIT_LEFT) -> None:
        super().__init__(message)
        self.status = status


class Backend:
    """One rbd backend of glance's configuration, as its Store reads it; ``failure`` if its
    Store could not be configured (glance_store 5 connects then). ``glance_timeout``: the
    librados timeouts glance's own configuration gives its driver (None: none), where
    ``timeout`` may be a command's bound (``read``)."""

    def __init__(
        self,
        name: str,
        store: compat.RbdStore,
        failure: Optional[Failure],
        glance_timeout: Optional[int],
    ) -> None:
        options = compat.store_options(store)
        self.name = name
        self.store = store
        self.pool: str = getattr(store, "pool", None) or options.rbd_store_pool
        self.conffile = options.rbd_store_ceph_conf or None
        self.user = options.rbd_store_user or None
        self.timeout = compat.connect_timeout(store)
        self.failure = failure
        self.glance_timeout = glance_timeout


def read(
    config_files: list[str], only: Optional[str], bound: Optional[int] = None
) -> tuple["cfg.ConfigOpts", list[Backend]]:
    """glance's configuration, and its rbd backends (`only` that one). With `bound`, a backend
    without a rados_connect_timeout gets that one: its cluster then answers within `bound`
    seconds or fails, from glance_store 5's connect in configure_add on."""
    import rados
    from glance_store import exceptions
    from glance_store._drivers import rbd
    from oslo_config import cfg

    conf = cfg.ConfigOpts()
    conf.register_opt(cfg.DictOpt("enabled_backends"))
    conf.register_opt(cfg.StrOpt("connection", secret=True), group="database")
    try:
        conf(
            args=[f"--config-file={path}" for path in config_files],
            project="glance",
            prog="glance-api",
        )
    except cfg.Error as exc:
        raise Failure(f"cannot read the configuration: {exc}", EXIT_USAGE) from exc
    if conf.enabled_backends:
        import glance_store.multi_backend

        glance_store.multi_backend.register_store_opts(conf)
        names = [name for name, kind in conf.enabled_backends.items() if kind == "rbd"]
    else:
        import glance_store

        glance_store.register_opts(conf)
        names = ["glance_store"] if "rbd" in _single_store_types(conf) else []
    if only:
        if only not in names:
            raise Failure(
                f"no rbd backend {only!r} in the configuration (rbd backends: "
                f"{', '.join(names) or 'none'})",
                EXIT_USAGE,
            )
        names = [only]
    if not names:
        raise Failure(
            "the configuration has no rbd backend (enabled_backends, or [glance_store] stores)",
            EXIT_USAGE,
        )
    backends = []
    for name in names:
        failure = None
        store = rbd.Store(conf, backend=None if name == "glance_store" else name)
        glance_timeout = compat.connect_timeout(store)
        if bound is not None and glance_timeout is None:
            conf.set_override("rados_connect_timeout", bound, group=store.backend_group or name)
        try:
            # glance_store 5 connects here, for the cluster's fsid.
            store.configure_add()
        except (
            rados.Error,
            exceptions.BackendException,
            exceptions.BadStoreConfiguration,
            cfg.Error,
        ) as exc:
            # BackendException says only "Error connecting to ceph cluster", and glance_store
            # 5 calls a connect that failed a BadStoreConfiguration: librados' error is their
            # context. Without one, the configuration is wrong.
            cause = exc if isinstance(exc, rados.Error) else exc.__context__
            if not isinstance(cause, rados.Error) and not isinstance(
                exc, exceptions.BackendException
            ):
                raise Failure(f"backend {name}: {exc}", EXIT_USAGE) from exc
            options = compat.store_options(store)
            conffile = options.rbd_store_ceph_conf or None
            failure = connect_failure(name, conffile, options.rbd_store_user or None, cause)
        backend = Backend(name, store, failure, glance_timeout)
        if backend.timeout is None:
            # glance_store before 4.7 reads no rados_connect_timeout: the bound is the command's.
            backend.timeout = bound
        backends.append(backend)
    return conf, backends


def connect_failure(
    name: str, conffile: Optional[str], user: Optional[str], exc: Optional[BaseException]
) -> Failure:
    """A connection to the cluster that failed, in the native driver's words (with what the
    keyring holds) where librados gave an errno; a usage error where the configuration names a
    Ceph configuration file that is not there."""
    from glance_rbd_native import _native

    missing = conffile is not None and not os.path.exists(conffile)
    status = EXIT_USAGE if missing else EXIT_LEFT
    code = getattr(exc, "errno", None)
    if code is None:
        return Failure(
            f"backend {name}: cannot connect to the Ceph cluster (conf {conffile or 'default'}, "
            f"user {user or 'default'}): {exc}",
            status,
        )
    why = _native._connect_failure(code, conffile=conffile, user=user)
    return Failure(f"backend {name}: {why}", status)


def _single_store_types(conf: "cfg.ConfigOpts") -> set[str]:
    options = conf.glance_store
    return set(options.stores or ()) | {options.default_store}


def connect(backend: Backend) -> "rados.Rados":
    """A connection to `backend`'s cluster as its user, whose operations time out after its
    ``timeout``, if any. A connection that fails is `connect_failure`'s Failure."""
    import rados

    try:
        return leftovers.connect(backend.conffile, backend.user, backend.timeout)
    except rados.Error as exc:
        raise connect_failure(backend.name, backend.conffile, backend.user, exc) from exc


@contextlib.contextmanager
def connected(backend: Backend) -> Iterator["rados.Rados"]:
    """`connect`'s connection, shut down after."""
    cluster = connect(backend)
    try:
        yield cluster
    finally:
        cluster.shutdown()
