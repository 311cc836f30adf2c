"""A pool as the sweep reads it: a connection made as the stock driver makes one, through
Ceph's Python bindings, and an I/O context on it."""

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    import rados


class Pool:
    """One pool, as the sweep reads it, through Ceph's Python bindings."""

    def __init__(self, cluster: "rados.Rados", ioctx: "rados.Ioctx") -> None:
        self.cluster = cluster
        self.ioctx = ioctx
        self.name: str = ioctx.get_pool_name()


def connect(
    conffile: Optional[str] = None,
    user: Optional[str] = None,
    connect_timeout: Optional[int] = None,
) -> "rados.Rados":
    """A connected ``rados.Rados``, as the stock driver makes one (the native writer's settings)."""
    import rados

    from glance_rbd_native._native import _TIMEOUT_OPTIONS

    # None: librados' default search path, as the native writer (an empty name reads no file).
    cluster = rados.Rados(conffile=conffile or None, rados_id=user or None)
    if connect_timeout is not None:
        for key in _TIMEOUT_OPTIONS:
            cluster.conf_set(key, str(connect_timeout))
    try:
        cluster.connect()
    except Exception:
        cluster.shutdown()
        raise
    return cluster
