"""glance_store's exceptions for the native module's errors, raised and logged as stock does."""

import logging

from glance_store import exceptions
from glance_store.i18n import _LE, _

LOG = logging.getLogger(__name__)


def unreachable(store, exc):
    """The stock driver's exception for a cluster it cannot connect to (its get_connection),
    with librados' reason in it."""
    if store.backend_group and len(store.conf.enabled_backends) > 1:
        reason = _("Error in store configuration: %s") % exc
        LOG.debug(reason)
        return exceptions.BadStoreConfiguration(store_name=store.backend_group, reason=reason)
    LOG.error(_LE("Error connecting to ceph cluster: %s"), exc)
    return exceptions.BackendException(str(exc))


def missing_pool(exc):
    """Stock lets rados.ObjectNotFound escape for a missing pool; this names the pool."""
    LOG.error("%s", exc)
    return exceptions.BackendException(str(exc))


def storage_full(image_name, exc):
    """The stock driver's StorageFull for an upload that ran out of space, logged as stock does."""
    log_msg = (_LE("Failed to store image %(img_name)s "
                   "insufficient space available") % {'img_name': image_name})
    LOG.error("%s: %s", log_msg, exc)
    return exceptions.StorageFull(message=log_msg)
