"""Swapping glance_store's rbd ``Store.add``, ``get``, ``get_size`` and ``delete`` for the native
ones."""

import logging
from typing import Any

LOG = logging.getLogger(__name__)

# The stock methods, kept on the Store class while it is patched.
_ORIGINALS = "_glance_rbd_native_originals"
METHODS = ("add", "get", "get_size", "delete")


def patch(force: bool = False) -> bool:
    """Makes glance_store's rbd driver upload through ``RbdWriter`` and read through
    ``RbdReader``. Safe to call again.

    Returns True when the native driver is active. An unsupported glance_store version logs a
    warning and keeps the stock driver, unless ``force`` is set.
    """
    from glance_store._drivers import rbd

    from glance_rbd_native import compat

    if is_patched():
        return True
    version = compat.glance_store_version()
    if not compat.is_supported(version) and not force:
        LOG.warning(
            "glance-rbd-native supports glance_store %s to %d.x (tested with %s), found %s: "
            "keeping the stock rbd driver",
            ".".join(map(str, compat.OLDEST_SUPPORTED)),
            compat.NEWEST_SUPPORTED_MAJOR,
            ", ".join(compat.TESTED_VERSIONS),
            version,
        )
        return False
    native = methods(native=True)
    setattr(rbd.Store, _ORIGINALS, {name: rbd.Store.__dict__[name] for name in native})
    for name, method in native.items():
        setattr(rbd.Store, name, method)
    # The in-flight bound is logged at the first transfer (settings.py): glance may not have
    # read its configuration yet.
    LOG.info(
        "glance-rbd-native: the native RBD writer is active for glance_store %s, and the "
        "native reader and delete",
        version,
    )
    return True


def methods(native: bool) -> dict[str, Any]:
    """The native or the stock ``add``, ``get``, ``get_size`` and ``delete`` of the rbd Store,
    as functions of a Store, whether the Store is patched or not."""
    from glance_store import capabilities, driver as store_driver
    from glance_store._drivers import rbd

    from glance_rbd_native import delete, download, upload

    if not native:
        stock: dict[str, Any] = rbd.Store.__dict__.get(_ORIGINALS) or {
            name: rbd.Store.__dict__[name] for name in METHODS
        }
        return dict(stock)
    # Wrapped as stock wraps its own: add and get check the store's capabilities, and add
    # also takes the older calling convention. The keys are METHODS.
    return {
        "add": store_driver.back_compat_add(capabilities.check(upload.add)),
        "get": capabilities.check(download.get),
        "get_size": download.get_size,
        "delete": delete.delete,
    }


def unpatch() -> None:
    """Puts the stock methods back. Safe to call when not patched."""
    from glance_store._drivers import rbd

    originals = rbd.Store.__dict__.get(_ORIGINALS)
    if originals is not None:
        for name, method in originals.items():
            setattr(rbd.Store, name, method)
        delattr(rbd.Store, _ORIGINALS)
        LOG.info("glance-rbd-native: the stock RBD driver is back")


def is_patched() -> bool:
    """True when glance_store's rbd driver currently runs the native methods."""
    from glance_store._drivers import rbd

    return _ORIGINALS in rbd.Store.__dict__
