"""Native Ceph RBD uploads and downloads for OpenStack glance_store.

Importing this package changes nothing. ``patch()`` (or ``GLANCE_RBD_NATIVE=1`` in the
environment of glance-api) makes glance_store's rbd driver upload through ``RbdWriter`` and read
through ``RbdReader``.

The native module links librbd and librados; it is loaded on first use of a name it defines,
not on import, so that the start-up switch works on a host without the Ceph libraries: it then
logs why and keeps the stock driver. Where it cannot load, the ImportError names what the host
lacks (``libraries.py``). ``__version__`` is read from the installed package's metadata on first
use, too.
"""

import importlib
from typing import TYPE_CHECKING

from glance_rbd_native import libraries
from glance_rbd_native.patching import is_patched, patch, unpatch

libraries.explain_failures()

if TYPE_CHECKING:
    __version__: str
    from glance_rbd_native._native import (  # noqa: F401
        DEFAULT_MAX_IN_FLIGHT,
        ZERO_BLOCK,
        ConnectError,
        Fenced,
        ImageExists,
        InternalError,
        NoSpace,
        NotFound,
        PermissionDenied,
        PoolNotFound,
        RbdError,
        RbdReader,
        RbdWriter,
        TimedOut,
        connection_count,
        in_flight,
        native_digests,
        set_max_in_flight,
        transfers,
    )

_NATIVE = (
    "DEFAULT_MAX_IN_FLIGHT",
    "ZERO_BLOCK",
    "ConnectError",
    "Fenced",
    "ImageExists",
    "InternalError",
    "NoSpace",
    "NotFound",
    "PermissionDenied",
    "PoolNotFound",
    "RbdError",
    "RbdReader",
    "RbdWriter",
    "TimedOut",
    "connection_count",
    "in_flight",
    "native_digests",
    "set_max_in_flight",
    "transfers",
)

__all__ = [*_NATIVE, "is_patched", "patch", "unpatch"]


def __getattr__(name: str) -> object:
    if name in _NATIVE:
        value = getattr(importlib.import_module("glance_rbd_native._native"), name)
    elif name == "__version__":
        # Cargo.toml is where the version is written; maturin copies it into the metadata.
        from importlib import metadata

        value = metadata.version("glance-rbd-native")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value
