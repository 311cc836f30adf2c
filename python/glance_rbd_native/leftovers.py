"""Uploads in flight, and the partial images of the ones whose writer is gone.

The native writer marks each upload in the pool's index object (``INDEX``, an omap entry per
image, written by ``src/transfer/mark.rs``): host, boot, pid and process start of the writer,
when it started, the bytes stored, refreshed every few seconds. The mark is set once the image
is open, so its writer holds a watch on it for as long as it lives, and cleared once the
snapshot is made or the image removed. A process killed mid-upload leaves both the image and the
mark. Its writer is *provably gone* when the image has no watcher left (the watch of a dead
client expires after ``osd_client_watch_timeout``, 30 s by default), or when the writer ran on
this host and its process no longer exists.

Nothing here touches a live upload, an image with a snapshot (finished, or a clone's parent),
or an image without the mark, unless asked to (``unmarked``). Everything uses Ceph's Python
bindings (``rados``, ``rbd``), which glance_store's rbd driver needs anyway.
"""

import dataclasses
import errno
import json
import socket
import time
from typing import Optional

INDEX = "glance_rbd_native.uploads"
# A page of the index: it holds the uploads in flight, not the pool's images.
PAGE = 1000
# Seconds for a blocklisted dead writer's watch to go, before the removal gives up.
BLOCKLIST_WAIT = 20
# Seconds a removal that fails while another one runs is tried again.
RACE_WAIT = 10


@dataclasses.dataclass
class Upload:
    """One image the sweep looked at, and what it found."""

    pool: str
    image: str
    # The writer's mark: host, boot_id, pid, process_start, started, updated, bytes, size.
    # None for an image without one (``unmarked``).
    mark: Optional[dict]
    # alive: its writer runs. gone: partial, and its writer provably gone. finished: the image
    # has a snapshot, or is a clone (a stale mark, if marked). missing: no image (a stale
    # mark). unmarked: partial, without a mark, and without a watcher.
    state: str
    reason: str
    watchers: list = dataclasses.field(default_factory=list)
    created: Optional[float] = None

    @property
    def writer(self):
        """The writer, as a person reads it: "pid 1234 on host-a"."""
        if not self.mark:
            return "unknown writer"
        return f"pid {self.mark.get('pid')} on {self.mark.get('host')}"

    def as_dict(self, now=None):
        now = time.time() if now is None else now
        mark = self.mark or {}
        started = mark.get("started", self.created)
        elapsed = (mark.get("updated", 0) - mark.get("started", 0)) if mark else 0
        return {
            "pool": self.pool,
            "image": self.image,
            "state": self.state,
            "reason": self.reason,
            "host": mark.get("host"),
            "pid": mark.get("pid"),
            "started": started,
            "age_seconds": round(now - started, 1) if started else None,
            "bytes": mark.get("bytes"),
            "size": mark.get("size"),
            "rate_bytes_per_second": round(mark["bytes"] / elapsed) if elapsed > 0 else None,
            "watchers": [w.get("addr") for w in self.watchers],
        }


def marks(ioctx):
    """{image: mark} of every upload marked in the pool of ``ioctx``."""
    import rados

    found, after = {}, ""
    while True:
        with rados.ReadOpCtx() as op:
            values, _ = ioctx.get_omap_vals(op, after, "", PAGE)
            try:
                ioctx.operate_read_op(op, INDEX)
            except rados.ObjectNotFound:
                return found  # no native upload ever ran in this pool
            page = list(values)
        for key, value in page:
            name = key.decode() if isinstance(key, bytes) else key
            try:
                found[name] = json.loads(value)
            except ValueError:
                found[name] = {"unreadable": repr(value[:100])}
        if len(page) < PAGE:
            return found
        after = page[-1][0]


def unmark(ioctx, image):
    """Removes the mark of ``image``."""
    import rados

    with rados.WriteOpCtx() as op:
        ioctx.remove_omap_keys(op, (image,))
        try:
            ioctx.operate_write_op(op, INDEX)
        except rados.ObjectNotFound:
            pass


def inspect(cluster, ioctx, image, mark):
    """What the upload of ``image``, marked by ``mark`` (None: unmarked), is now. ``cluster``
    is the ``rados.Rados`` of ``ioctx``."""
    import rbd

    pool = ioctx.get_pool_name()
    # Opened writable, not read-only: librbd 16.2.15's read-only opens can crash the process
    # (docs/reliability.md). The open adds a watch of this client's, left out below; other
    # sweeps' opens add theirs, so a watcher alone does not prove a live writer.
    me = cluster.get_instance_id()
    try:
        with rbd.Image(ioctx, image) as opened:
            snapshots = [snap["name"] for snap in opened.list_snaps()]
            parent = _parent(opened)
            watchers = [w for w in opened.watchers_list() if w.get("id") != me]
            created = opened.create_timestamp().timestamp()
    except rbd.ImageNotFound:
        return Upload(pool, image, mark, "missing", "no image: a stale mark")
    upload = Upload(pool, image, mark, "alive", "", watchers, created)
    if snapshots:
        upload.state = "finished"
        upload.reason = f"has snapshot {', '.join(snapshots)}: never touched"
        return upload
    if parent:
        # glance never uploads into a clone: this is someone's image made from another.
        upload.state = "finished"
        upload.reason = f"a clone of {parent}: never touched"
        return upload
    here = _writer_here(mark) if mark else None
    # The writer's own watch, when the mark names its client; any watch otherwise.
    if mark and "client" in mark:
        watched = any(w.get("id") == mark["client"] for w in watchers)
    else:
        watched = bool(watchers)
    if here is False:
        upload.state = "gone"
        upload.reason = f"its process, {upload.writer}, is gone"
    elif not watched:
        upload.state = "gone" if mark else "unmarked"
        upload.reason = "no watch of its writer left: the writer has let go of it"
    elif here:
        upload.reason = f"its process, {upload.writer}, runs"
    else:
        upload.reason = f"its writer holds it ({len(watchers)} watcher)"
    return upload


def _parent(opened):
    """"pool/image@snap" of a clone, None for an image that is not one."""
    import rbd

    try:
        pool, image, snap = opened.parent_info()
    except rbd.ImageNotFound:
        return None
    return f"{pool}/{image}@{snap}"


def uploads(cluster, ioctx):
    """Every upload marked in the pool, inspected."""
    return [inspect(cluster, ioctx, image, mark) for image, mark in sorted(marks(ioctx).items())]


def unmarked(cluster, ioctx, older_than, skip=()):
    """Partial images without a mark (stock's, or another tool's), with no watcher, created more
    than ``older_than`` seconds ago. This lists the pool: its cost is the pool's."""
    import rbd

    now = time.time()
    found = []
    for image in rbd.RBD().list(ioctx):
        if image in skip:
            continue
        upload = inspect(cluster, ioctx, image, None)
        if (upload.state == "unmarked" and upload.created is not None
                and now - upload.created >= older_than):
            found.append(upload)
    return found


def remove(cluster, ioctx, upload):
    """Removes the partial image of ``upload`` (state gone or unmarked) and its mark. Checks again
    first: the mark must be the one judged, and a writer still watching it makes librbd refuse
    (ImageBusy). A writer's lingering watch is cut only when its process is provably gone on this
    host. Returns what was done: "removed", "already removed", or why it was left."""
    import rbd

    if upload.state in ("missing", "finished"):
        unmark(ioctx, upload.image)
        return "stale mark dropped"
    if upload.state not in ("gone", "unmarked"):
        return f"left: {upload.state}"
    current = marks(ioctx).get(upload.image)
    if current != upload.mark:
        return "left: its mark changed since it was judged"
    # Only the dead writer's own client (its global id is in the mark): the other watchers may
    # be live clients, such as another sweep looking at the image.
    dead_here = bool(upload.mark) and _writer_here(upload.mark) is False
    cut = [w for w in upload.watchers if dead_here and w.get("id") == upload.mark.get("client")]
    for watcher in cut:
        _blocklist(cluster, watcher["addr"])
    # The OSD drops a blocklisted client's watch once the new OSD map reaches it. Another sweep
    # looking at the image, or removing it, holds a watch for a moment too; and one removing it
    # at the same time can make librbd fail otherwise (ESHUTDOWN) while it goes: what counts is
    # whether it is gone after.
    busy_until = time.monotonic() + (BLOCKLIST_WAIT if cut else RACE_WAIT)
    racing_until = time.monotonic() + RACE_WAIT
    while True:
        try:
            rbd.RBD().remove(ioctx, upload.image)
        except rbd.ImageNotFound:
            outcome = "already removed"
        except rbd.ImageBusy:
            if time.monotonic() < busy_until:
                time.sleep(0.5)
                continue
            return "left: a writer holds it"
        except rbd.ImageHasSnapshots:
            return "left: it has a snapshot now"
        except rbd.Error:
            if time.monotonic() < racing_until:
                time.sleep(0.5)
                continue
            raise
        else:
            outcome = "removed"
        break
    if upload.mark:
        unmark(ioctx, upload.image)
    return outcome


def _blocklist(cluster, addr):
    """Cuts the watch of a dead client at ``addr`` (its nonce names that one client instance),
    so its image can go at once rather than after the watch times out. ``profile rbd`` allows it:
    librbd does the same to break a dead client's exclusive lock."""
    command = {"prefix": "osd blocklist", "blocklistop": "add", "addr": addr}
    ret, _, status = cluster.mon_command(json.dumps(command), b"")
    if ret == -errno.EINVAL:  # before Pacific, the command had another name
        command = {"prefix": "osd blacklist", "blacklistop": "add", "addr": addr}
        ret, _, status = cluster.mon_command(json.dumps(command), b"")
    if ret < 0:
        raise OSError(-ret, f"blocklisting the dead writer's client {addr}: {status}")


def _writer_here(mark):
    """True if the writer of ``mark`` runs on this host, False if it ran here and its process is
    gone, None if it ran on another host (or this one before a reboot: None too, then the
    watch decides)."""
    if mark.get("host") != socket.gethostname():
        return None
    if mark.get("boot_id") != _boot_id():
        return None
    try:
        with open(f"/proc/{int(mark['pid'])}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, KeyError, ValueError, IndexError):
        return False
    return int(fields[19]) == mark.get("process_start")


def _boot_id():
    try:
        with open("/proc/sys/kernel/random/boot_id") as boot:
            return boot.read().strip()
    except OSError:
        return None


def connect(conffile, user, timeout=None):
    """A connected ``rados.Rados``, as the stock driver makes one (the native writer's settings)."""
    import rados

    # None: librados' default search path, as the native writer (an empty name reads no file).
    cluster = rados.Rados(conffile=conffile or None, rados_id=user or None)
    if timeout is not None:
        for key in ("rados_osd_op_timeout", "rados_mon_op_timeout", "client_mount_timeout"):
            cluster.conf_set(key, str(timeout))
    try:
        cluster.connect()
    except Exception:
        cluster.shutdown()
        raise
    return cluster


def reclaim(conffile, user, timeout, pool, image):
    """For ``add``, which found ``image`` already there: removes it if it is a partial upload
    whose writer is provably gone. Returns the Upload removed, or None (left as it is). Logs
    nothing: under eventlet it runs on a pool thread, and the caller logs."""
    cluster = connect(conffile, user, timeout)
    try:
        with cluster.open_ioctx(pool) as ioctx:
            mark = marks(ioctx).get(image)
            if mark is None:
                return None  # not ours: stock's Duplicate
            upload = inspect(cluster, ioctx, image, mark)
            if upload.state != "gone":
                return None
            if remove(cluster, ioctx, upload) not in ("removed", "already removed"):
                return None
            return upload
    finally:
        cluster.shutdown()
