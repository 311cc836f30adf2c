"""The native ``Store.delete`` for glance_store's rbd driver.

Same results and exceptions as the installed stock driver: the snapshot goes (``InUseByStore``
if it has clones), then the image (``NotFound`` if there is none, ``InUseByStore`` while a
client has it open; one with other snapshots left goes to the trash as it is from 4.3, and is
refused with ``HasSnapshot`` before). Unlike stock, it returns without waiting for the image's
data: the image moves to the pool's trash, and its data is removed in the background, by the
Ceph manager where the user's caps allow it, else by this process (``glance_rbd_core::delete``).
The native call goes through ``green.call``: under eventlet, none of it runs on the hub.
"""

import errno
import logging
from typing import TYPE_CHECKING

from glance_store import exceptions
from glance_store.i18n import _LW, _

from glance_rbd_native import compat, errors, green
from glance_rbd_native._native import Fenced, NotFound, RbdError, _delete_image

if TYPE_CHECKING:
    from glance_store.location import Location

LOG = logging.getLogger(__name__)


def delete(self: compat.RbdStore, location: "Location", context: object = None) -> None:
    """Deletes the image of a location; see glance_store's ``Store.delete``."""
    loc = location.store_location
    pool = loc.pool or self.pool
    image, snapshot = loc.image, loc.snapshot
    rules = compat.delete_rules()
    try:
        with errors.opening(self):
            trash_id, purging = green.call(
                _delete_image,
                pool,
                image,
                snapshot or None,
                connect=compat.connection(self),
                refuse_clones_first=rules.refuse_clones_first,
                trash_with_snapshots=rules.trash_with_snapshots,
            )
    except NotFound as exc:
        raise exceptions.NotFound(message=_("RBD image %s does not exist") % image) from exc
    except Fenced as exc:
        # Fenced on a new connection too (the cached one, fenced while idle, was replaced).
        raise errors.fenced(exc) from exc
    except RbdError as exc:
        if exc.errno == errno.EBUSY:
            LOG.warning(
                _LW("Remove image %(img_name)s failed. It is in use: %(err)s"),
                {"img_name": image, "err": exc.strerror},
            )
            raise exceptions.InUseByStore() from exc
        if exc.errno == errno.ENOTEMPTY:
            LOG.warning(
                _LW("Remove image %(img_name)s failed. It has snapshot(s) left."),
                {"img_name": image},
            )
            raise exceptions.HasSnapshot() from exc
        raise
    if purging:
        LOG.info(
            "glance-rbd-native: deleted image %s of pool %s: moved to the trash as %s, its data "
            "is removed in the background",
            image,
            pool,
            trash_id,
        )
    else:
        LOG.warning(
            _LW(
                "Unable to remove image %(img_name)s: it has snapshot(s) left; moved to the "
                "trash as %(id)s, where it stays"
            ),
            {"img_name": image, "id": trash_id},
        )
