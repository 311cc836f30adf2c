"""Native Ceph RBD upload path for glance_store.

Importing this package changes nothing. ``patch()`` (or ``GLANCE_RBD_NATIVE=1`` in the
environment of glance-api) makes glance_store's rbd driver upload through ``RbdWriter``.
"""

from glance_rbd_native._native import (
    DEFAULT_MAX_IN_FLIGHT,
    ZERO_BLOCK,
    ConnectError,
    ImageExists,
    NoSpace,
    NotFound,
    RbdError,
    RbdWriter,
    connection_count,
    native_digests,
)
from glance_rbd_native.patching import is_patched, patch, unpatch

__all__ = [
    "DEFAULT_MAX_IN_FLIGHT",
    "ZERO_BLOCK",
    "ConnectError",
    "ImageExists",
    "NoSpace",
    "NotFound",
    "RbdError",
    "RbdWriter",
    "connection_count",
    "native_digests",
    "is_patched",
    "patch",
    "unpatch",
]
