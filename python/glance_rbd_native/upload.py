"""The native ``Store.add`` for glance_store's rbd driver.

It keeps the stock contract of the installed glance_store (4.1 to 5.x; ``compat`` holds what
differs between releases): same return tuple, same exceptions, same digests and verifier calls,
same snapshot. A declared size that the data does not match is refused with ``Invalid`` on every
release, as 5.0 and later do; 4.x would store the image zero-padded or fail with a raw librbd
error. Unlike stock, all upload state is local to the call, so one Store serves any number of
uploads, one after the other or at once. md5 and the multihash are computed by the writer on
threads of their own; an algorithm it lacks falls back to hashlib. Every native call that
waits goes through ``green.call``, so under eventlet the hub goes on meanwhile.
"""

import logging
import math
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Optional, Protocol, Union, cast

from glance_store import exceptions
from glance_store._drivers import rbd as stock
from glance_store.common import utils
from glance_store.i18n import _LE, _

from glance_rbd_native import compat, errors, green, leftovers, progress, settings
from glance_rbd_native._native import (
    Fenced,
    ImageExists,
    NoSpace,
    PermissionDenied,
    RbdWriter,
    native_digests,
)

if TYPE_CHECKING:
    from _typeshed import SupportsRead

    from glance_rbd_native._native import _Connect

LOG = logging.getLogger(__name__)

NATIVE_DIGESTS = frozenset(native_digests())


class Verifier(Protocol):
    """What ``add`` calls of the image signature verifier glance may hand in."""

    def update(self, data: bytes) -> None: ...


def add(
    self: compat.RbdStore,
    image_id: str,
    image_file: "Union[SupportsRead[bytes], Iterable[bytes]]",
    image_size: int,
    hashing_algo: str,
    context: object = None,
    verifier: Optional[Verifier] = None,
) -> tuple[str, int, str, str, dict[str, str]]:
    """Stores an image through ``RbdWriter``; see glance_store's ``Store.add``."""
    algorithms = ("md5", str(hashing_algo))
    # Created even when native, so an unknown algorithm fails here as it does in stock.
    hashers = {algo: utils.get_hasher(algo, False) for algo in algorithms}
    python_hashers = [h for algo, h in hashers.items() if algo not in NATIVE_DIGESTS]
    image_name = str(image_id)
    order = int(math.log(self.WRITE_CHUNKSIZE, 2))
    LOG.debug("creating image %s with order %d and size %d", image_name, order, image_size)

    native = [algo for algo in hashers if algo in NATIVE_DIGESTS]
    started = time.monotonic()
    writer = _open_writer(self, image_id, image_name, image_size, order, native)
    progress.watch()
    bytes_written = 0
    try:
        try:
            for chunk in utils.chunkreadable(image_file, self.WRITE_CHUNKSIZE):
                bytes_written += len(chunk)
                if image_size != 0 and bytes_written > image_size:
                    raise exceptions.Invalid(
                        _("Size exceeds: expected %(expected)d bytes, got %(actual)d bytes")
                        % {"expected": image_size, "actual": bytes_written}
                    )
                green.call(writer.write, chunk)
                for hasher in python_hashers:
                    hasher.update(chunk)
                if verifier:
                    verifier.update(chunk)
            if image_size != 0 and bytes_written != image_size:
                raise exceptions.Invalid(
                    _("Size mismatch: expected %(expected)d bytes, got %(actual)d bytes")
                    % {"expected": image_size, "actual": bytes_written}
                )
        except BaseException:
            _abort(writer, image_name)  # removes what was written
            raise
        green.call(writer.finish)  # drain, trim, snapshot; aborts itself on failure
    except NoSpace as exc:
        raise errors.storage_full(image_name, exc) from exc
    except PermissionDenied as exc:
        raise errors.refused(exc) from exc
    except Fenced as exc:
        raise errors.fenced(exc) from exc
    except Exception as exc:
        LOG.error(
            _LE("Failed to store image %(img_name)s Store Exception %(store_exc)s"),
            {"img_name": image_name, "store_exc": exc},
        )
        raise

    # One line per upload at INFO: glance-api's log shows which writer served each image.
    LOG.info(
        "stored image %s with the native writer: %d bytes in %.2fs, %d resizes, trim %.3fs",
        image_name,
        bytes_written,
        time.monotonic() - started,
        writer.resizes,
        writer.trim_seconds,
    )
    digests = {algo: h.hexdigest() for algo, h in hashers.items() if algo not in native}
    digests.update(writer.hexdigests)
    loc = stock.StoreLocation(
        {
            "fsid": writer.fsid,
            "pool": self.pool,
            "image": image_name,
            "snapshot": stock.DEFAULT_SNAPNAME,
        },
        self.conf,
    )
    metadata: dict[str, str] = {}
    if self.backend_group:
        metadata["store"] = self.backend_group
    return (loc.get_uri(), bytes_written, digests["md5"], digests[algorithms[1]], metadata)


def _abort(writer: RbdWriter, image_name: str) -> None:
    """Aborts ``writer`` after the failure being raised, which its own failure never replaces:
    a size mismatch stays ``Invalid`` (400), whatever the removal met. A removal that failed is
    retried in the background (logged there)."""
    try:
        green.call(writer.abort)
    except Exception as exc:
        LOG.warning(
            "could not remove the partial image %s after the failure of its upload: %s",
            image_name,
            exc,
        )


def _open_writer(
    store: compat.RbdStore,
    image_id: str,
    image_name: str,
    image_size: int,
    order: int,
    digests: list[str],
) -> RbdWriter:
    """Connects and creates the image, with the stock driver's exceptions for failures. An image
    already there that is the leftover of a native upload whose writer is provably gone (a
    process killed mid-upload) is removed first, and the upload goes on."""
    settings.apply(store.conf)
    connect = compat.connection(store)

    def create() -> RbdWriter:
        return green.call(
            RbdWriter,
            store.pool,
            image_name,
            image_size,
            order=order,
            thin_provisioning=bool(store.thin_provisioning),
            snapshot=stock.DEFAULT_SNAPNAME,
            digests=digests,
            **connect,
        )

    try:
        with errors.opening(store):
            try:
                return create()
            except ImageExists:
                if not _reclaim(
                    connect,
                    store.pool,
                    image_name,
                    settings.presume_gone_after(store.conf),
                ):
                    raise
            return create()  # may find it stored again by another upload meanwhile
    except ImageExists as exc:
        msg = _("RBD image %s already exists") % image_id
        raise exceptions.Duplicate(message=msg) from exc
    except NoSpace as exc:
        raise errors.storage_full(image_name, exc) from exc


def _reclaim(
    connect: "_Connect",
    pool: str,
    image_name: str,
    presume_gone_after: float,
) -> bool:
    """Removes the leftover ``image_name`` of a native upload whose writer is provably gone;
    True if it did. Whatever else is there stays, and ``add`` raises Duplicate as stock does."""
    try:
        removed = green.call(leftovers.reclaim, connect, pool, image_name, presume_gone_after)
    except Exception as exc:
        LOG.warning(
            "could not tell whether image %s in pool %s is left over from a process "
            "killed mid-upload: %s",
            image_name,
            pool,
            exc,
        )
        return False
    if removed is None:
        return False
    mark = cast(leftovers.Mark, removed.mark)  # reclaim removes marked uploads alone
    LOG.warning(
        "removed image %s in pool %s, left over from an upload whose writer is gone "
        "(%s, started %s, %s bytes stored; %s); storing it again",
        image_name,
        pool,
        removed.writer,
        time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(mark.get("started", 0))),
        mark.get("bytes"),
        removed.reason,
    )
    return True
