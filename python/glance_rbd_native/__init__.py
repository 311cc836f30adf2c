"""Native Ceph RBD upload path for glance_store.

Importing this package changes nothing. ``patch()`` (or ``GLANCE_RBD_NATIVE=1`` in the
environment of glance-api) makes glance_store's rbd driver upload through ``RbdWriter`` and read
through ``RbdReader``.

The native module links librbd and librados; it is loaded on first use of a name it defines,
not on import, so that the start-up switch works on a host without the Ceph libraries: it then
logs why and keeps the stock driver.
"""

import importlib
from typing import TYPE_CHECKING

from glance_rbd_native.patching import is_patched, patch, unpatch

if TYPE_CHECKING:
    from glance_rbd_native._native import (  # noqa: F401
        DEFAULT_MAX_IN_FLIGHT,
        ZERO_BLOCK,
        ConnectError,
        ImageExists,
        NoSpace,
        NotFound,
        PoolNotFound,
        RbdError,
        RbdReader,
        RbdWriter,
        connection_count,
        native_digests,
    )

_NATIVE = (
    "DEFAULT_MAX_IN_FLIGHT",
    "ZERO_BLOCK",
    "ConnectError",
    "ImageExists",
    "NoSpace",
    "NotFound",
    "PoolNotFound",
    "RbdError",
    "RbdReader",
    "RbdWriter",
    "connection_count",
    "native_digests",
)

__all__ = [*_NATIVE, "is_patched", "patch", "unpatch"]


def __getattr__(name):
    if name in _NATIVE:
        value = getattr(importlib.import_module("glance_rbd_native._native"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
