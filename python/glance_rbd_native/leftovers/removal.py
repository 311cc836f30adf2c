"""Removing what the sweep judged (``uploads``): a partial image whose writer is gone, its
writer fenced first where it may wake, or a stale mark; and, for ``add``, an image in the way
that is such a leftover (``reclaim``). Each removal checks again that the mark and the image are
the ones judged, and acts on the image id."""

import errno
import time
from typing import TYPE_CHECKING, Optional, cast

from glance_rbd_native.leftovers import images, index
from glance_rbd_native.leftovers.images import Header, Watcher
from glance_rbd_native.leftovers.index import Mark
from glance_rbd_native.leftovers.pool import Pool, connect
from glance_rbd_native.leftovers.uploads import PRESUME_GONE_AFTER, Upload, inspect, marks

if TYPE_CHECKING:
    import rados

    from glance_rbd_native._native import _Connect

# How long a writer presumed gone stays fenced: one that wakes within it fails at once.
FENCE_SECONDS = 7 * 86400
# Seconds for the watch of a fenced or dead writer to go, before the removal gives up.
UNWATCH_WAIT = 20


def left(outcome: str) -> bool:
    """Whether an outcome of ``remove`` or ``deletes.purge`` leaves what it set out to remove:
    each such outcome says "left" or "kept", and why."""
    return outcome.startswith(("left", "kept", "fenced and left"))


def remove(pool: Pool, upload: Upload) -> str:
    """Removes the partial image of ``upload`` (state gone or unmarked) and its mark, or drops
    the stale mark of a missing or finished one. Everything is checked again first: the mark
    must be the one judged, the name must still be the image judged. A writer presumed gone is
    fenced first. Returns what was done: "removed", "fenced and removed", "already removed",
    "stale mark dropped", or why it was left."""
    if upload.state in ("missing", "finished"):
        # A stale mark: unmarked() lists no missing or finished image.
        if index.remove(pool.ioctx, cast(Mark, upload.mark)):
            return "stale mark dropped"
        return "left: its mark changed since it was judged"
    if upload.state not in ("gone", "unmarked"):
        return f"left: {upload.state}"
    header = cast(Header, upload.header)  # gone or unmarked: it has one (judge, _unmarked_state)
    if upload.mark is not None:
        stored = marks(pool.ioctx).get(upload.image)
        if stored is None:
            # Its writer finished it, or another sweep removed it: nothing left to remove.
            return "already gone: its mark was cleared since it was judged"
        if stored.raw != upload.mark.raw:
            return "left: its mark changed since it was judged"
    if images.image_id(pool.ioctx, upload.image) != header.id:
        return "left: the name is another image's now"
    # The writer's own watch, when its mark names its client: any other is another client's
    # (a mark of an older release names none, and then no watch is known to be the writer's).
    client = upload.mark.get("client") if upload.mark else None
    current = images.settled(pool.ioctx, upload.image, header.id, client)
    if current is None:  # by another sweep, while this one looked
        if upload.mark is not None:
            index.remove(pool.ioctx, upload.mark)
        return "already removed"
    own: list[Watcher] = []
    others: list[Watcher] = []
    for watcher in current.watchers:
        (own if client is not None and watcher.get("id") == client else others).append(watcher)
    if others:
        return f"left: another client watches it now ({', '.join(w['addr'] for w in others)})"
    done = ""
    if upload.fence:
        # Only a marked writer is ever fenced (judge).
        refused = _fence(pool.cluster, cast(Mark, upload.mark).get("addr"), FENCE_SECONDS)
        if refused:
            return f"left: {refused}"
        done = "fenced and "
    elif own:
        # The watch of a dead writer stays until the watch timeout: cut it.
        for watcher in own:
            refused = _fence(pool.cluster, watcher["addr"], 0)
            if refused:
                return f"left: {refused}"
    # A fenced writer's watch goes once the OSDs have the new map.
    if (own or upload.fence) and not _unwatched(pool, upload.image, client):
        return f"{done}left: its writer's watch is still there after {UNWATCH_WAIT} s"
    probe = upload.mark.get("probe") if upload.mark else None
    if probe in header.snapshots:
        # The snapshot of check's probe, the one its mark names: it goes with the image.
        refused = images.remove_snapshot(pool.ioctx, upload.image, header.id, probe)
        if refused:
            return f"{done}left: {refused}"
    outcome = images.remove(pool.ioctx, upload.image, header.id)
    if outcome in ("removed", "already removed") and upload.mark is not None:
        index.remove(pool.ioctx, upload.mark)
    return done + outcome


def _watchers(pool: Pool, name: str) -> list[Watcher]:
    again = images.header(pool.ioctx, name)
    return list(again.watchers) if again else []


def _unwatched(pool: Pool, name: str, client: Optional[int]) -> bool:
    deadline = time.monotonic() + UNWATCH_WAIT
    while True:
        if not [w for w in _watchers(pool, name) if w.get("id") == client]:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(1)


def _fence(cluster: "rados.Rados", addr: str, seconds: int) -> Optional[str]:
    """Blocklists the librados client at ``addr`` (its nonce names that one client instance)
    for ``seconds`` (0: the cluster's default); None when done, else why not."""
    import rados

    try:
        cluster.blocklist_add(addr, seconds)
    except (rados.PermissionError, rados.PermissionDeniedError) as exc:
        return (
            f"fencing its writer's client {addr} was refused ({exc}): glance's cephx user "
            "needs the mon cap 'profile rbd' (which allows `osd blocklist`); 'allow r' "
            "does not"
        )
    except rados.Error as exc:
        if getattr(exc, "errno", None) == errno.EACCES:
            return (
                f"fencing its writer's client {addr} was refused: glance's cephx user "
                "needs the mon cap 'profile rbd'"
            )
        return f"fencing its writer's client {addr} failed: {exc}"
    return None


def reclaim(
    connection: "_Connect",
    pool: str,
    image: str,
    presume_gone_after: float = PRESUME_GONE_AFTER,
) -> Optional[Upload]:
    """For ``add``, which found ``image`` already there: removes it if it is a partial upload
    whose writer is gone (``remove``). Returns the Upload removed, or None (left as it is). Logs
    nothing: under eventlet it runs on a pool thread, and the caller logs."""
    cluster = connect(**connection)
    try:
        with cluster.open_ioctx(pool) as ioctx:
            opened = Pool(cluster, ioctx)
            mark = marks(opened.ioctx).get(image)
            if mark is None:
                return None  # not ours: stock's Duplicate
            upload = inspect(opened, image, mark, presume_gone_after)
            if upload.state != "gone":
                return None
            if not remove(opened, upload).endswith(("removed", "already removed")):
                return None
            return upload
    finally:
        cluster.shutdown()
