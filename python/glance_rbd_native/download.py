"""The native ``Store.get`` and ``Store.get_size`` for glance_store's rbd driver.

Same contract as the stock ones on every supported release: ``get`` returns an iterable of the
image's bytes in chunks of the store's ``READ_CHUNKSIZE`` and its size, the pool comes from the
location (or the store), the image is read at the location's snapshot, and a missing image or
snapshot raises ``NotFound`` with stock's messages. Unlike stock, the reads run ahead of the
consumer (``RbdReader``), and one cached cluster connection and one open of the image serve a
download (stock connects twice and opens the image twice). The image is opened as stock did
before 5.4, watched: glance's delete fails with InUseByStore while it is read (stock from 5.4
lets it go through, and serves zeros for the rest of the image).

The iterable reads lazily, as stock's does. The iterator it gives can be closed, or dropped,
mid-stream (a client that disconnects): the reads in flight are drained and the image closed.
Every native call that waits goes through ``green.call``, so under eventlet the hub goes on.
"""

import errno
import logging
from collections.abc import Generator
from typing import TYPE_CHECKING, Callable, Optional

from glance_store import exceptions
from glance_store.i18n import _

from glance_rbd_native import compat, errors, green, progress, settings
from glance_rbd_native._native import Fenced, NotFound, PermissionDenied, RbdReader

if TYPE_CHECKING:
    from glance_store._drivers.rbd import StoreLocation
    from glance_store.location import Location

LOG = logging.getLogger(__name__)


def get(
    self: compat.RbdStore,
    location: "Location",
    offset: int = 0,
    chunk_size: Optional[int] = None,
    context: object = None,
) -> tuple["ImageChunks", int]:
    """Reads an image through ``RbdReader``; see glance_store's ``Store.get``. Like stock,
    ``offset`` and ``chunk_size`` are ignored: the store's READ_CHUNKSIZE is used. The image
    is opened once, here, for its size and for the first iteration."""
    loc = location.store_location
    reader = _open_located(self, loc)
    return ImageChunks(self, loc.pool or self.pool, loc.image, loc.snapshot, reader), reader.size


def get_size(self: compat.RbdStore, location: "Location", context: object = None) -> int:
    """The size of the image at the location's snapshot; see glance_store's
    ``Store.get_size``."""
    reader = _open_located(self, location.store_location)
    green.call(reader.close)
    return reader.size


class ImageChunks:
    """What ``get`` returns, in place of stock's ``ImageIterator``: each iteration reads the
    image from the start (the first with the reader ``get`` opened), lazily; ``close()``
    stops the latest one."""

    def __init__(
        self,
        store: compat.RbdStore,
        pool: str,
        image: str,
        snapshot: Optional[str],
        reader: RbdReader,
    ) -> None:
        self.store = store
        self.pool = pool
        self.name = image
        self.snapshot = snapshot
        self._unread: Optional[RbdReader] = reader  # opened by get(), for the first iteration
        self._chunks: Optional[Generator[bytes, None, None]] = None

    def __iter__(self) -> Generator[bytes, None, None]:
        reader, self._unread = self._unread, None
        if reader is None:
            store, pool, image, snapshot = self.store, self.pool, self.name, self.snapshot
            self._chunks = _chunks(lambda: _open(store, pool, image, snapshot), image)
        else:
            self._chunks = _chunks(lambda: reader, self.name)
        return self._chunks

    def close(self) -> None:
        if self._unread is not None:
            green.call(self._unread.close)
        if self._chunks is not None:
            self._chunks.close()


def _chunks(open_reader: Callable[[], RbdReader], image: str) -> Generator[bytes, None, None]:
    """The chunks of the reader `open_reader()` gives. Not a method: a generator whose frame
    held the ImageChunks that holds it would be a reference cycle, freed only by the cyclic
    collector; as it is, a consumer that drops it (glance, when a client hangs up) closes the
    reader at once."""
    try:
        reader = open_reader()
        try:
            while True:
                chunk: Optional[bytes] = green.call(next, reader, None)
                if chunk is None:
                    return
                yield chunk
        finally:
            # Also when the consumer closes or drops this generator mid-stream, maybe in a
            # finalizer, where the hub cannot be switched to: called directly, it waits only
            # for the reads in flight (a no-op after the last chunk).
            reader.close()
    except NotFound as exc:
        # Missing from the start, or deleted while being read.
        raise exceptions.NotFound(_("RBD image %s does not exist") % image) from exc
    except PermissionDenied as exc:
        raise errors.refused(exc) from exc
    except Fenced as exc:
        if exc.errno == errno.ENOENT:  # removed by another client while being read
            raise exceptions.NotFound(_("RBD image %s does not exist") % image) from exc
        raise errors.fenced(exc) from exc


def _open_located(store: compat.RbdStore, loc: "StoreLocation") -> RbdReader:
    """An ``RbdReader`` on the image of a location, with stock get_size's NotFound."""
    try:
        return _open(store, loc.pool or store.pool, loc.image, loc.snapshot)
    except NotFound as exc:
        msg = _("RBD image %s does not exist") % loc.get_uri()
        LOG.debug(msg)
        raise exceptions.NotFound(msg) from exc


def _open(store: compat.RbdStore, pool: str, image: str, snapshot: Optional[str]) -> RbdReader:
    """An ``RbdReader`` on the image, with the stock driver's exceptions for a cluster it
    cannot reach and (better than stock's raw rados error) for a missing pool."""
    settings.apply(store.conf)
    with errors.opening(store):
        return progress.watching(
            green.call(
                RbdReader,
                pool,
                image,
                snapshot=snapshot or None,
                **compat.connection(store),
                chunk_size=store.READ_CHUNKSIZE,
            )
        )
