"""glance_store's exceptions for the native module's errors, raised and logged as stock does."""

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

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

from glance_rbd_native._native import ConnectError, PermissionDenied, PoolNotFound, TimedOut

if TYPE_CHECKING:
    from glance_rbd_native._native import Fenced, NoSpace
    from glance_rbd_native.compat import RbdStore

    # The mixin as the checker sees it: it is only ever mixed into exceptions.
    _Exception = Exception
else:
    _Exception = object

LOG = logging.getLogger(__name__)


class _WithNativeMessage(_Exception):
    """A librbd exception type carrying the native message as it is: rbd's own wrap it in
    "RBD permission error (...)" and prefix "[errno N]", which the native message holds
    already."""

    args: tuple[str]  # (the native message,)

    def __init__(self, message: str, errno: int) -> None:
        Exception.__init__(self, message)
        self.errno = errno

    def __str__(self) -> str:
        return self.args[0]

    def __reduce__(self) -> tuple[type["_WithNativeMessage"], tuple[str, int]]:
        return (type(self), (self.args[0], self.errno))


# rbd's exception classes are untyped (Any): mypy cannot check what derives from them.
class Refused(_WithNativeMessage, _StockPermissionError):  # type: ignore[misc]
    """librbd's ``rbd.PermissionError``, which the stock driver lets escape when the cluster
    refuses its user an operation, carrying the native message: the operation, the pool, the
    user, and the caps glance's user needs."""


class NoAnswer(_WithNativeMessage, _StockTimeout):  # type: ignore[misc]
    """librbd's ``rbd.Timeout``, which the stock driver lets escape when the cluster does not
    answer the creation or the open of an image within rados_connect_timeout, carrying the
    native message: the OSDs, or the caps (Ceph 20 leaves a user without osd caps unanswered)."""


class FencedOff(_WithNativeMessage, _StockConnectionShutdown):  # type: ignore[misc]
    """librbd's ``rbd.ConnectionShutdown`` (ESHUTDOWN, Ceph's EBLOCKLISTED), for a transfer whose
    client was fenced or whose image was removed by another process while it ran, carrying the
    native message. Stock waits forever in that case."""


@contextlib.contextmanager
def opening(store: "RbdStore") -> Iterator[None]:
    """Raises the stock driver's exceptions for the native errors of a connect and of an image's
    creation or open: a cluster it cannot reach, a missing pool, a refusal, no answer."""
    try:
        yield
    except ConnectError as exc:
        raise unreachable(store, exc) from exc
    except PoolNotFound as exc:
        raise missing_pool(exc) from exc
    except PermissionDenied as exc:
        raise refused(exc) from exc
    except TimedOut as exc:
        raise no_answer(exc) from exc


def unreachable(store: "RbdStore", exc: ConnectError) -> Exception:
    """The stock driver's exception for a cluster it cannot connect to (its get_connection),
    with librados' reason in it."""
    if store.backend_group and len(store.conf.enabled_backends) > 1:
        reason = _("Error in store configuration: %s") % exc
        LOG.debug(reason)
        return exceptions.BadStoreConfiguration(store_name=store.backend_group, reason=reason)
    LOG.error(_LE("Error connecting to ceph cluster: %s"), exc)
    return exceptions.BackendException(str(exc))


def missing_pool(exc: PoolNotFound) -> exceptions.BackendException:
    """Stock lets rados.ObjectNotFound escape for a missing pool; this names the pool."""
    LOG.error("%s", exc)
    return exceptions.BackendException(str(exc))


def refused(exc: PermissionDenied) -> Refused:
    """Stock's type for an operation the cluster refused (EPERM, EACCES), with the native
    message."""
    LOG.error("%s", exc.strerror)
    return Refused(exc.strerror, exc.errno)


def no_answer(exc: TimedOut) -> NoAnswer:
    """Stock's type for an image's creation or open that timed out, with the native message."""
    LOG.error("%s", exc.strerror)
    return NoAnswer(exc.strerror, exc.errno)


def fenced(exc: "Fenced") -> FencedOff:
    """The transfer's client was fenced, or its image removed, while it ran: it ended at once."""
    LOG.error("%s", exc.strerror)
    return FencedOff(exc.strerror, exc.errno)


def storage_full(image_name: str, exc: "NoSpace") -> exceptions.StorageFull:
    """The stock driver's StorageFull for an upload that ran out of space, logged as stock does."""
    log_msg = _LE("Failed to store image %(img_name)s insufficient space available") % {
        "img_name": image_name
    }
    LOG.error("%s: %s", log_msg, exc)
    return exceptions.StorageFull(message=log_msg)
