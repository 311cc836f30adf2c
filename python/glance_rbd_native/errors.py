"""glance_store's exceptions for the native module's errors, raised and logged as stock does."""

import logging

from glance_store import exceptions
from glance_store.i18n import _LE, _

try:
    from rbd import (
        ConnectionShutdown as _StockConnectionShutdown,
        PermissionError as _StockPermissionError,
        Timeout as _StockTimeout,
    )
except ImportError:  # no Ceph bindings: glance_store's rbd store cannot be configured either
    _StockPermissionError = PermissionError
    _StockTimeout = TimeoutError
    _StockConnectionShutdown = ConnectionError

LOG = logging.getLogger(__name__)


class _WithNativeMessage:
    """A librbd exception type carrying the native message as it is: rbd's own wrap it in
    "RBD permission error (...)" and prefix "[errno N]", which the native message holds
    already."""

    def __init__(self, message, errno):
        Exception.__init__(self, message)
        self.errno = errno

    def __str__(self):
        return self.args[0]

    def __reduce__(self):
        return (type(self), (self.args[0], self.errno))


class Refused(_WithNativeMessage, _StockPermissionError):
    """librbd's ``rbd.PermissionError``, which the stock driver lets escape when the cluster
    refuses its user an operation, carrying the native message: the operation, the pool, the
    user, and the caps glance's user needs."""


class NoAnswer(_WithNativeMessage, _StockTimeout):
    """librbd's ``rbd.Timeout``, which the stock driver lets escape when the cluster does not
    answer the creation or the open of an image within rados_connect_timeout, carrying the
    native message: the OSDs, or the caps (Ceph 20 leaves a user without osd caps unanswered)."""


class FencedOff(_WithNativeMessage, _StockConnectionShutdown):
    """librbd's ``rbd.ConnectionShutdown`` (ESHUTDOWN, Ceph's EBLOCKLISTED), for a transfer whose
    client was fenced or whose image was removed by another process while it ran, carrying the
    native message. Stock waits forever in that case."""


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


def refused(exc):
    """Stock's type for an operation the cluster refused (EPERM, EACCES), with the native
    message."""
    LOG.error("%s", exc.strerror)
    return Refused(exc.strerror, exc.errno)


def no_answer(exc):
    """Stock's type for an image's creation or open that timed out, with the native message."""
    LOG.error("%s", exc.strerror)
    return NoAnswer(exc.strerror, exc.errno)


def fenced(exc):
    """The transfer's client was fenced, or its image removed, while it ran: it ended at once."""
    LOG.error("%s", exc.strerror)
    return FencedOff(exc.strerror, exc.errno)


def storage_full(image_name, exc):
    """The stock driver's StorageFull for an upload that ran out of space, logged as stock does."""
    log_msg = (_LE("Failed to store image %(img_name)s "
                   "insufficient space available") % {'img_name': image_name})
    LOG.error("%s: %s", log_msg, exc)
    return exceptions.StorageFull(message=log_msg)
