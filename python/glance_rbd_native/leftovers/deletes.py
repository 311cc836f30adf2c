"""The deletes whose data removal did not finish: images the native delete moved to the pool's
trash, whose process was killed (or whose removal was refused) before their data was gone.

The native delete marks each one in the pool's index object ``DELETES`` before the move, keyed
by image id (``core/src/delete/mod.rs``): who deletes (host, boot id, pid, process start, pid
namespace, cgroup) and which image. The mark is cleared once the data is gone. The rule for
``sweep --remove``: a trash entry is purged only if

- a mark names its id, and the entry is the one marked: the same name, moved there by a user
  (as the delete moves it, not by rbd's mirroring or migration), its deferment ended;
- and its deleter is proved gone (``sight``), or has said in the mark that it gave up removing
  the data (its tries were over): a deleter that runs, is stopped, or cannot be seen from here
  (another host, a container's namespace seen from another container) may still be removing
  it, and the entry is listed and kept.

Trash entries without a mark (another tool's, or moved by glance_store's own delete) are never
touched, nor listed. A mark whose entry is gone is stale, and dropped.
"""

import dataclasses
import time
from typing import TYPE_CHECKING, Any, Optional, TypedDict

from glance_rbd_native.leftovers import index
from glance_rbd_native.leftovers.index import Mark
from glance_rbd_native.leftovers.sight import Host, Sight, look

if TYPE_CHECKING:
    import rados

DELETES = "glance_rbd_native.deletes"
REQUIRED = {**index.WRITER, "image": str, "image_id": str}
# "snapshot": glance's snapshot, moved to the trash with the image, that the purge removes first.
OPTIONAL = {**index.WRITER_OPTIONAL, "snapshot": str}


class _DeletionDict(TypedDict):
    image: str
    image_id: str
    state: str
    reason: str
    host: Optional[str]
    pid: Optional[int]
    cgroup: Optional[str]
    age_seconds: Optional[float]


class DeletionDict(_DeletionDict, total=False):
    """A deletion as the command prints it in JSON (``Deletion.as_dict``)."""

    # What ``sweep --remove`` did with it.
    outcome: str


@dataclasses.dataclass
class Deletion:
    """One mark of the index, its trash entry, and what is to be done: ``state`` is "deleting"
    (its deleter may still be at it), "gone" (its deleter is gone: purged by ``--remove``),
    "kept" (not to be touched, ``reason`` says why) or "stale" (the entry is gone)."""

    mark: Mark
    entry: Optional[dict[str, Any]]
    state: str
    reason: str

    @property
    def image_id(self) -> str:
        return self.mark.image  # the key: the image's id

    def as_dict(self, now: Optional[float] = None) -> DeletionDict:
        started = self.mark.get("started")
        return {
            "image": str(self.mark.get("image", "")),
            "image_id": self.image_id,
            "state": self.state,
            "reason": self.reason,
            "host": self.mark.get("host"),
            "pid": self.mark.get("pid"),
            "cgroup": self.mark.get("cgroup"),
            "age_seconds": None if started is None else (now or time.time()) - started,
        }


def deletions(ioctx: "rados.Ioctx", host: Optional[Host] = None) -> list[Deletion]:
    """Every marked delete of the pool of ``ioctx``, judged."""
    import rbd

    marks = index.read(ioctx, DELETES, REQUIRED, OPTIONAL)
    if not marks:
        return []
    entries = {entry["id"]: entry for entry in rbd.RBD().trash_list(ioctx)}
    host = host or Host()
    now = time.time()
    return [
        judge(
            mark,
            entries.get(mark.image),
            _snapshots(ioctx, mark.image) if mark.image in entries else [],
            host,
            now,
        )
        for mark in marks.values()
    ]


def _snapshots(ioctx: "rados.Ioctx", image_id: str) -> list[dict[str, Any]]:
    """The snapshots of trash entry ``image_id`` (none if it is gone)."""
    import rbd

    try:
        with rbd.Image(ioctx, image_id=image_id, read_only=True) as image:
            return list(image.list_snaps())
    except rbd.ImageNotFound:
        return []


def judge(
    mark: Mark,
    entry: Optional[dict[str, Any]],
    snapshots: list[dict[str, Any]],
    host: Host,
    now: float,
) -> Deletion:
    """The deletion of ``mark``, whose trash entry (by the marked id) is ``entry``, with
    ``snapshots``."""
    if mark.fields is None:
        return Deletion(mark, entry, "kept", f"an unreadable mark ({mark.problem}): never touched")
    if entry is None:
        return Deletion(mark, entry, "stale", "its trash entry is gone: a stale mark")
    if entry.get("name") != mark.get("image"):
        return Deletion(
            mark,
            entry,
            "kept",
            f"the trash entry of id {mark.image} is image {entry.get('name')!r}, not the one "
            "deleted: never touched",
        )
    if entry.get("source") != "USER":
        return Deletion(mark, entry, "kept", "moved to the trash by rbd itself: never touched")
    deferment = entry.get("deferment_end_time")
    if deferment is not None and deferment.timestamp() > now:
        return Deletion(mark, entry, "kept", f"its deferment ends at {deferment}: kept till then")
    if any(not is_glances(snap, mark.get("snapshot")) for snap in snapshots):
        return Deletion(
            mark,
            entry,
            "kept",
            "it has snapshots other than the one glance's delete left: never touched",
        )
    given_up = mark.get("given_up")
    if given_up is not None:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(given_up))
        return Deletion(mark, entry, "gone", f"its deleter gave up removing its data at {when}")
    seen, why = look(mark.fields, host)
    if seen is Sight.GONE:
        return Deletion(mark, entry, "gone", why)
    if seen is Sight.UNSEEN:
        return Deletion(
            mark,
            entry,
            "kept",
            f"its deleter cannot be seen from here ({why}): run the sweep where it ran",
        )
    return Deletion(mark, entry, "deleting", why)


def purge(ioctx: "rados.Ioctx", deletion: Deletion) -> str:
    """Removes the data of a deletion judged "gone", if its mark and entry are as judged; drops
    a stale mark. The outcome, for the command's output."""
    import rbd

    if deletion.state == "stale":
        return "dropped" if index.remove(ioctx, deletion.mark, DELETES) else "changed: kept"
    assert deletion.state == "gone" and deletion.entry is not None
    again = index.read(ioctx, DELETES, REQUIRED, OPTIONAL).get(deletion.image_id)
    if again is None:
        # Cleared once the entry is gone, by its purge or another sweep.
        return "already gone: its mark was cleared since it was read"
    if again.raw != deletion.mark.raw:
        return "kept: its mark changed since it was read"
    try:
        entry = rbd.RBD().trash_get(ioctx, deletion.image_id)
    except rbd.ImageNotFound:
        index.remove(ioctx, deletion.mark, DELETES)
        return "already gone"
    if entry.get("name") != deletion.entry.get("name"):
        return "kept: its trash entry changed since it was read"
    # glance's snapshot, if the delete left it to its purge: that one only, and only if no
    # other snapshot was made since (it would keep the data). A removal that began and did not
    # end (its process died) left it in the trash namespace, under a name of librbd's.
    ours = deletion.mark.get("snapshot")
    try:
        with rbd.Image(ioctx, image_id=deletion.image_id) as image:
            snapshots = list(image.list_snaps())
            if any(not is_glances(snap, ours) for snap in snapshots):
                return "kept: a snapshot was made since it was read"
            for snap in snapshots:
                image.remove_snap_by_id(snap["id"])
        rbd.RBD().trash_remove(ioctx, deletion.image_id)
    except rbd.ImageNotFound:
        pass
    except rbd.ImageBusy:
        return "kept: a client still has it open, or the Ceph manager is removing it"
    index.remove(ioctx, deletion.mark, DELETES)
    return "purged"


def is_glances(snap: dict[str, Any], ours: Optional[str]) -> bool:
    """Whether ``snap`` (as ``Image.list_snaps`` lists it) is glance's snapshot ``ours``: under
    its name, or moved to the trash namespace by a removal that did not end."""
    import rbd

    if ours is None:
        return False
    namespace = snap.get("namespace", rbd.RBD_SNAP_NAMESPACE_TYPE_USER)
    if namespace == rbd.RBD_SNAP_NAMESPACE_TYPE_TRASH:
        # None where librbd could not say (the snapshot went meanwhile).
        return bool((snap.get("trash") or {}).get("original_name") == ours)
    return bool(namespace == rbd.RBD_SNAP_NAMESPACE_TYPE_USER and snap["name"] == ours)
