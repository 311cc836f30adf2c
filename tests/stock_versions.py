"""What the installed stock rbd driver does, by glance_store release, as read from its tags.

The tests' oracle for behaviour that differs between releases. It is written down here from
glance_store's sources, independently of the detection in glance_rbd_native.compat.
"""

from __future__ import annotations

import re
from importlib import metadata


def parse(text: str) -> tuple[int, ...]:
    """(major, minor, patch) of a release's version text."""
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


VERSION_TEXT = metadata.version("glance_store")
VERSION = parse(VERSION_TEXT)

# 5.0 on: Invalid "Size exceeds" / "Size mismatch", a clipped write (librbd's
# IncompleteWriteError) turned into Invalid "exceeded the expected size", and the bytes written
# are returned. Before (4.10.0 and earlier), no checks: the declared size is returned, a short
# upload is stored zero-padded, and an oversized one fails with librbd's raw
# IncompleteWriteError or InvalidArgument.
CHECKS_SIZES = VERSION >= (5, 0)
# Before 4.6.2 (4.1.0 to 4.6.1), an unknown-size image grows by the step and then doubles it, so
# a first chunk larger than one step fails (bug 1916482). 4.6.2 and 4.7.0 on double first.
RESIZES_BEFORE_DOUBLING = VERSION < (4, 6, 2)
# 4.7 on: rados_connect_timeout (default -1) >= 0 sets librados' op and mount timeouts. 4.1 and
# 4.2 (default 0) hand it to connect(), which ignores it; 4.3 to 4.6.2 deprecate it and read it
# nowhere.
SETS_LIBRADOS_TIMEOUTS = VERSION >= (4, 7)
# 5.0 on: options come from store_conf, which in a multi-store set-up falls back to
# [backend_defaults] (driver.BackendGroupConfiguration). Before, the backend's group or
# [glance_store]. (The contract guard, tests/harness/contract.py, names the releases a case
# skips on from the first one.)
STORE_CONF_SINCE = (5, 0)
HAS_STORE_CONF = VERSION >= STORE_CONF_SINCE
# 5.4 on: get_size and the read iterator open the image read-only, which holds no watch on it:
# an image removed while being read (`rbd rm`, or glance's own delete) is then served as zeros
# from there on, with no error. Before, the open's watch makes the removal fail (ImageBusy).
OPENS_READ_ONLY = VERSION >= (5, 4)
# 4.3.2 on: an image with snapshots left after glance's goes to the trash as it is (trash_move);
# before, HasSnapshot. Those earlier releases also refuse a snapshot
# with clones before unprotecting it; later releases are refused the unprotect: InUseByStore
# either way.
TRASHES_IMAGES_WITH_SNAPSHOTS = VERSION >= (4, 3, 2)
