"""The uploads marked in a pool, each judged by the rule of the package (``leftovers``): alive,
silent, gone (with or without a fence first), finished, missing or unreadable; and the partial
images of glance's without a mark (``unmarked``)."""

import dataclasses
import re
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Optional, TypedDict

from glance_rbd_native.leftovers import images, index
from glance_rbd_native.leftovers.images import Header, Watcher
from glance_rbd_native.leftovers.index import Mark, printable
from glance_rbd_native.leftovers.pool import Pool
from glance_rbd_native.leftovers.sight import Host, Sight, look
from glance_rbd_native.units import duration

if TYPE_CHECKING:
    import rados

# A writer that cannot be seen, with no watch and no refresh of its mark for this long, is
# presumed gone: the default of `[glance_rbd_native] presume_gone_after`.
PRESUME_GONE_AFTER = 3600
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
    snapshots = [s for s in header.snapshots if s != mark.get("probe")]
    if snapshots:
        return "finished", f"has snapshot {', '.join(snapshots)}: never touched", False
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
