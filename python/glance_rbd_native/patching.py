"""Swapping glance_store's rbd ``Store.add`` for the native one, and back."""

import logging

LOG = logging.getLogger(__name__)

_ORIGINAL_ADD = "_glance_rbd_native_original_add"


def patch(force=False):
    """Makes glance_store's rbd driver upload through ``RbdWriter``. Safe to call again.

    Returns True when the native writer is active. An unsupported glance_store version logs a
    warning and keeps the stock driver, unless ``force`` is set.
    """
    from glance_store import capabilities, driver as store_driver
    from glance_store._drivers import rbd

    from glance_rbd_native import compat, driver

    if is_patched():
        return True
    version = compat.glance_store_version()
    if not compat.is_supported(version) and not force:
        LOG.warning(
            "glance-rbd-native supports glance_store %s to %d.x (tested with %s), found %s: "
            "keeping the stock rbd driver", ".".join(map(str, compat.OLDEST_SUPPORTED)),
            compat.NEWEST_SUPPORTED_MAJOR, ", ".join(compat.TESTED_VERSIONS), version)
        return False
    native_add = store_driver.back_compat_add(capabilities.check(driver.add))
    setattr(rbd.Store, _ORIGINAL_ADD, rbd.Store.add)
    rbd.Store.add = native_add
    LOG.info("glance-rbd-native: the native RBD writer is active for glance_store %s "
             "(%d MiB in flight per upload)", version, driver.max_in_flight() >> 20)
    return True


def unpatch():
    """Puts the stock ``Store.add`` back. Safe to call when not patched."""
    from glance_store._drivers import rbd

    original = rbd.Store.__dict__.get(_ORIGINAL_ADD)
    if original is not None:
        rbd.Store.add = original
        delattr(rbd.Store, _ORIGINAL_ADD)
        LOG.info("glance-rbd-native: the stock RBD driver is back")


def is_patched():
    """True when glance_store's rbd driver currently uploads through the native writer."""
    from glance_store._drivers import rbd

    return _ORIGINAL_ADD in rbd.Store.__dict__
