"""What differs between the glance_store releases the native driver supports, in one place.

The native ``add`` behaves as the installed stock driver does. Where releases differ, the
difference is read off what the installed glance_store has, never off its version number; the
version only decides whether ``patch()`` takes over at all.
"""

import inspect
import logging
import re
from typing import TYPE_CHECKING, NamedTuple, Optional, Protocol, cast

if TYPE_CHECKING:
    from oslo_config import cfg

    from glance_rbd_native._native import _Connect

LOG = logging.getLogger(__name__)

# 4.1.0 (Zed) is the oldest contract driver.add reproduces; an unknown future major may change it.
OLDEST_SUPPORTED = (4, 1, 0)
NEWEST_SUPPORTED_MAJOR = 5
# The releases the test suite proves, each against its own stock driver.
TESTED_VERSIONS = ("4.1.0", "4.3.3", "4.7.1", "4.9.1", "5.0.0", "5.2.0", "5.7.0")


class RbdStore(Protocol):
    """What the native driver reads of glance_store's rbd ``Store``, on every release."""

    WRITE_CHUNKSIZE: int
    READ_CHUNKSIZE: int
    conf: "cfg.ConfigOpts"
    backend_group: Optional[str]
    pool: str
    conf_file: str
    thin_provisioning: bool


class RbdOptions(Protocol):
    """The rbd options of a store (``store_options``), as oslo.config answers them."""

    rbd_store_pool: str
    rbd_store_user: Optional[str]
    rbd_store_ceph_conf: Optional[str]
    rados_connect_timeout: Optional[int]


def glance_store_version() -> Optional[str]:
    """The installed glance_store's version string, or None."""
    from importlib import metadata

    try:
        return metadata.version("glance_store")
    except metadata.PackageNotFoundError:
        return None


def parse_version(text: Optional[str]) -> Optional[tuple[int, ...]]:
    """(major, minor, patch) of a version string such as '4.7.1' or '5.0.0.0rc1'; None if none."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    if match is None:
        return None
    return tuple(int(part or 0) for part in match.groups())


def is_supported(version: Optional[str]) -> bool:
    parsed = parse_version(version)
    return parsed is not None and OLDEST_SUPPORTED <= parsed and parsed[0] <= NEWEST_SUPPORTED_MAJOR


def store_options(store: RbdStore) -> RbdOptions:
    """The namespace the stock driver reads the rbd options from.

    From 5.0 that is ``store.store_conf``: in a multi-store set-up it falls back to
    ``[backend_defaults]``, and the backend's own group then answers None for every option left
    unset; in a single-store set-up it is ``[glance_store]``. Before 5.0 it is the backend's
    group, or ``[glance_store]`` in a single-store set-up.
    """
    options: Optional[RbdOptions] = getattr(store, "store_conf", None)
    if options is not None:
        return options
    if store.backend_group:
        return cast(RbdOptions, getattr(store.conf, store.backend_group))
    return cast(RbdOptions, store.conf.glance_store)


def connection(store: RbdStore) -> "_Connect":
    """The keywords that name a store's cluster to ``RbdWriter``, ``RbdReader`` and the delete."""
    return {
        "conffile": store.conf_file or None,
        # The stock driver passes str(None) == 'None' as the user when the option is unset,
        # asking for client.None; unset means librados' default user here.
        "user": store_options(store).rbd_store_user or None,
        "connect_timeout": connect_timeout(store),
    }


def connect_timeout(store: RbdStore) -> Optional[int]:
    """Seconds for librados' op and mount timeouts, or None where stock sets none."""
    if not stock_sets_librados_timeouts():
        return None
    timeout = store_options(store).rados_connect_timeout
    return timeout if timeout is not None and timeout >= 0 else None


def stock_sets_librados_timeouts() -> bool:
    """True when stock turns ``rados_connect_timeout >= 0`` into librados' three timeouts.

    That is the release whose option defaults to -1, "not set" (4.7 on). 4.1 and 4.2 default it
    to 0 and hand it to ``connect()``, which python-rados ignores; 4.3 to 4.6.2 deprecate it and
    read it nowhere. Applying it there would turn the default of 0 into librados' "wait forever".
    """
    from glance_store._drivers import rbd

    option = next((opt for opt in rbd.Store.OPTIONS if opt.name == "rados_connect_timeout"), None)
    return (
        option is not None
        and not option.deprecated_for_removal
        and option.default is not None
        and option.default < 0
    )


class DeleteRules(NamedTuple):
    """Where the stock deletes differ (the native delete's ``Rules``)."""

    # Up to 4.3.1: a snapshot with clones is refused before it is unprotected (the same
    # exception, InUseByStore, as the unprotect's refusal gives later).
    refuse_clones_first: bool
    # 4.3.2 on: an image with other snapshots left goes to the trash as it is. Before:
    # HasSnapshot.
    trash_with_snapshots: bool


def delete_rules() -> DeleteRules:
    """The installed stock driver's delete, read off its ``_delete_image``; by version where its
    source cannot be read."""
    from glance_store._drivers import rbd

    try:
        source = inspect.getsource(rbd.Store._delete_image)
    except (OSError, TypeError):
        newer = (parse_version(glance_store_version()) or OLDEST_SUPPORTED) >= (4, 3, 2)
        return DeleteRules(refuse_clones_first=not newer, trash_with_snapshots=newer)
    return DeleteRules(
        refuse_clones_first="_snapshot_has_external_reference(" in source,
        trash_with_snapshots="trash_move(" in source,
    )
