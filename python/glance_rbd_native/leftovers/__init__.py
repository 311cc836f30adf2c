"""Uploads in flight, and the partial images of the ones whose writer is gone.

The native writer marks each upload in the pool's index (``index``): who writes, on which host,
in which pid namespace, with which librados client. A process killed mid-upload leaves its image
and its mark. The rule: **nothing is removed, and no client is fenced, unless its writer is
proved gone**; where that cannot be proved, the image is listed with the reason and kept.

- A writer whose process can be seen from here (``sight``) is judged by it: alive while it
  exists, even stopped or frozen and without a watch; gone once it does not.
- A writer that cannot be seen (another host, a container's namespace seen from another
  container, a hidden /proc) is alive while it holds its watch on the image, and is presumed
  gone only after ``presume_gone_after`` seconds with neither a watch nor a refresh of its mark.
  Such a writer may wake (a paused container, a stopped VM): it is fenced first, its librados
  client blocklisted for ``FENCE_SECONDS``, so that it fails rather than write to an image that
  is no longer its own.
- Images are read without a watch or a lock (``images``), so a sweep never disturbs a transfer
  or its abort; every removal acts on the image id and the mark that were judged, and nothing
  else (``images.remove``, ``index.remove``).

Nothing here touches an image with a snapshot (finished, or a clone's parent), a clone, or an
image without the mark, unless asked to (``unmarked``).
"""

import dataclasses
import errno
import re
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Optional, TypedDict, cast

from glance_rbd_native.leftovers import images, index
from glance_rbd_native.leftovers.images import Header, Watcher
from glance_rbd_native.leftovers.index import INDEX, Mark, printable
from glance_rbd_native.leftovers.sight import Host, Sight, look
from glance_rbd_native.units import duration

if TYPE_CHECKING:
    import rados

__all__ = [
    "INDEX",
    "Header",
    "Mark",
    "Pool",
    "Upload",
    "connect",
    "inspect",
    "judge",
    "marks",
    "printable",
    "reclaim",
    "remove",
    "unmarked",
    "uploads",
]

# A writer that cannot be seen, with no watch and no refresh of its mark for this long, is
# presumed gone: the default of `[glance_rbd_native] presume_gone_after`.
PRESUME_GONE_AFTER = 3600
# How long a writer presumed gone stays fenced: one that wakes within it fails at once.
FENCE_SECONDS = 7 * 86400
# Seconds for the watch of a fenced or dead writer to go, before the removal gives up.
UNWATCH_WAIT = 20
# glance's image ids, the only names an image without a mark may have to be listed.
GLANCE_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class _UploadDict(TypedDict):
    pool: str
    image: str
    state: str
    reason: str
    host: Optional[str]
    pid: Optional[int]
    cgroup: Optional[str]
    started: Optional[float]
    age_seconds: Optional[float]
    refreshed_seconds_ago: Optional[float]
    bytes: Optional[int]
    size: Optional[int]
    rate_bytes_per_second: Optional[int]
    watchers: list[Optional[str]]


class UploadDict(_UploadDict, total=False):
    """An upload as the command prints it in JSON (``Upload.as_dict``)."""

    # What ``sweep --remove`` did with it.
    outcome: str


@dataclasses.dataclass
class Upload:
    """One image the sweep looked at, and what it found."""

    pool: str
    # Printable: an unreadable mark's key is escaped.
    image: str
    # None for an image without one (``unmarked``).
    mark: Optional[Mark]
    # alive: its writer runs, or may. silent: its writer cannot be seen and holds no watch, but
    # has not been silent for long enough to be presumed gone. gone: partial, and its writer
    # provably gone (or presumed gone, and then ``fence``). finished: the image has a snapshot,
    # or is a clone (a stale mark, if marked). missing: the marked image is gone (a stale
    # mark). unreadable: a mark that cannot be read. unmarked: a partial image of glance's
    # without a mark and without a watcher.
    state: str
    reason: str
    header: Optional[Header] = None
    watchers: list[Watcher] = dataclasses.field(default_factory=list)
    # Whether its writer must be fenced before the image goes: it may wake.
    fence: bool = False

    @property
    def writer(self) -> str:
        """The writer, as a person reads it: "pid 1234 on host-a"."""
        if not self.mark or not self.mark.fields:
            return "unknown writer"
        return printable(f"pid {self.mark.get('pid')} on {self.mark.get('host')}")

    def as_dict(self, now: Optional[float] = None) -> UploadDict:
        now = time.time() if now is None else now
        fields = (self.mark.fields if self.mark else None) or {}
        created = self.header.created if self.header else None
        started = fields.get("started", created)
        elapsed = fields.get("updated", 0) - fields.get("started", 0)
        return {
            "pool": self.pool,
            "image": self.image,
            "state": self.state,
            "reason": self.reason,
            "host": fields.get("host"),
            "pid": fields.get("pid"),
            "cgroup": fields.get("cgroup"),
            "started": started,
            "age_seconds": round(now - started, 1) if started else None,
            "refreshed_seconds_ago": (
                round(now - fields["updated"], 1) if "updated" in fields else None
            ),
            "bytes": fields.get("bytes"),
            "size": fields.get("size"),
            "rate_bytes_per_second": (round(fields["bytes"] / elapsed) if elapsed > 0 else None),
            "watchers": [w.get("addr") for w in self.watchers],
        }


class Pool:
    """One pool, as the sweep reads it, through Ceph's Python bindings."""

    def __init__(self, cluster: "rados.Rados", ioctx: "rados.Ioctx") -> None:
        self.cluster = cluster
        self.ioctx = ioctx
        self.name: str = ioctx.get_pool_name()


def connect(
    conffile: Optional[str], user: Optional[str], timeout: Optional[int] = None
) -> "rados.Rados":
    """A connected ``rados.Rados``, as the stock driver makes one (the native writer's settings)."""
    import rados

    from glance_rbd_native._native import _TIMEOUT_OPTIONS

    # None: librados' default search path, as the native writer (an empty name reads no file).
    cluster = rados.Rados(conffile=conffile or None, rados_id=user or None)
    if timeout is not None:
        for key in _TIMEOUT_OPTIONS:
            cluster.conf_set(key, str(timeout))
    try:
        cluster.connect()
    except Exception:
        cluster.shutdown()
        raise
    return cluster


def marks(ioctx: "rados.Ioctx") -> dict[str, Mark]:
    """{image: Mark} of every upload marked in the pool of ``ioctx``."""
    return index.read(ioctx)


def judge(
    mark: Mark,
    header: Optional[Header],
    watchers: list[Watcher],
    sight: tuple[Sight, str],
    now: float,
    presume_gone_after: float,
) -> tuple[str, str, bool]:
    """(state, reason, fence) of the upload marked by ``mark``, of the image whose ``header``
    and ``watchers`` were read, and whose writer looks as ``sight`` says (``sight.look``)."""
    if mark.fields is None:
        return "unreadable", f"an unreadable mark ({mark.problem}): never touched", False
    if header is None:
        return "missing", "no image: a stale mark", False
    marked_id = mark.get("image_id")
    if marked_id is not None and marked_id != header.id:
        return (
            "missing",
            (
                f"its image (id {marked_id}) is gone, and the name is another "
                f"image's (id {header.id}): a stale mark"
            ),
            False,
        )
    if header.snapshots:
        return "finished", f"has snapshot {', '.join(header.snapshots)}: never touched", False
    if header.parent:
        # glance never uploads into a clone: this is someone's image made from another.
        return "finished", f"a clone of {header.parent}: never touched", False
    seen, why = sight
    client = mark.get("client")
    own = [w for w in watchers if client is None or w.get("id") == client]
    given_up = mark.get("given_up")
    if given_up is not None and not own:
        # Its writer's janitor ended its tries and said so in the mark: it never touches the
        # image again, whether it runs or not.
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(given_up))
        return "gone", f"its writer gave up removing it at {when}, and does not watch it", False
    if seen in (Sight.RUNS, Sight.STOPPED):
        if not own:
            why += ", without a watch on the image"
        return "alive", why, False
    if seen is Sight.GONE:
        return "gone", why, False
    if own:
        return "alive", f"its writer holds its watch on the image ({why})", False
    quiet = now - mark.get("updated")
    if quiet < presume_gone_after:
        return (
            "silent",
            (
                f"no watch, and its mark last refreshed {duration(quiet)} ago ({why}): "
                f"presumed gone after {duration(presume_gone_after)} without either"
            ),
            False,
        )
    if not mark.get("addr"):
        return (
            "silent",
            (
                f"no watch, and its mark last refreshed {duration(quiet)} ago ({why}), "
                "but its mark (of an older release) does not name its client, which "
                "cannot be fenced: never touched"
            ),
            False,
        )
    return (
        "gone",
        (
            f"no watch, and no refresh of its mark for {duration(quiet)} ({why}): "
            "presumed gone; its client is fenced first"
        ),
        True,
    )


def inspect(
    pool: Pool,
    name: str,
    mark: Optional[Mark],
    presume_gone_after: float,
    host: Optional[Host] = None,
    now: Optional[float] = None,
) -> Upload:
    """What the upload of ``name``, marked by ``mark`` (None: unmarked), is now."""
    host = host or Host()
    now = time.time() if now is None else now
    header = None if mark is not None and mark.fields is None else images.header(pool.ioctx, name)
    watchers = list(header.watchers) if header else []
    upload = Upload(pool.name, printable(name), mark, "", "", header, watchers)
    if mark is None:
        upload.state, upload.reason = _unmarked_state(header, watchers)
        return upload
    sight = look(mark.fields, host) if mark.fields else (Sight.UNSEEN, "")
    upload.state, upload.reason, upload.fence = judge(
        mark, header, watchers, sight, now, presume_gone_after
    )
    return upload


def _unmarked_state(header: Optional[Header], watchers: list[Watcher]) -> tuple[str, str]:
    if header is None:
        return "missing", "no image"
    if header.snapshots:
        return "finished", f"has snapshot {', '.join(header.snapshots)}"
    if header.parent:
        return "finished", f"a clone of {header.parent}"
    if watchers:
        return "alive", f"a client watches it ({len(watchers)} watcher)"
    return "unmarked", "no snapshot, no parent, no watcher, and no mark"


def uploads(
    pool: Pool, presume_gone_after: float = PRESUME_GONE_AFTER, host: Optional[Host] = None
) -> list[Upload]:
    """Every upload marked in the pool, inspected."""
    host = host or Host()
    return [
        inspect(pool, name, mark, presume_gone_after, host)
        for name, mark in sorted(marks(pool.ioctx).items())
    ]


def unmarked(
    pool: Pool, older_than: float, skip: Iterable[str] = (), referenced: Optional[set[str]] = None
) -> list[Upload]:
    """Partial images without a mark (stock's, another tool's) named as glance names images,
    with no watcher, created more than ``older_than`` seconds ago, and not in ``referenced``
    (the image ids and locations glance's database holds, when it could be read). This lists
    the pool: its cost is the pool's."""
    import rbd

    now = time.time()
    skip = set(skip)
    found = []
    for name in rbd.RBD().list(pool.ioctx):
        if name in skip or not GLANCE_ID.fullmatch(name):
            continue
        if referenced is not None and name in referenced:
            continue
        upload = inspect(pool, name, None, 0)
        created = upload.header.created if upload.header else None
        if upload.state == "unmarked" and created is not None and now - created >= older_than:
            found.append(upload)
    return found


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
    conffile: Optional[str],
    user: Optional[str],
    timeout: Optional[int],
    pool: str,
    image: str,
    presume_gone_after: float = PRESUME_GONE_AFTER,
) -> Optional[Upload]:
    """For ``add``, which found ``image`` already there: removes it if it is a partial upload
    whose writer is gone (``remove``). Returns the Upload removed, or None (left as it is). Logs
    nothing: under eventlet it runs on a pool thread, and the caller logs."""
    cluster = connect(conffile, user, timeout)
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
