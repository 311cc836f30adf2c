"""Images as the sweep sees and removes them: read without a watch, removed by their id.

A writable open adds a watch on the image, and a watch makes a writer's own removal of its image
fail with EBUSY; so the sweep opens images read-only, which adds none and takes no lock. (The
crash of librbd 16.2.15 in docs/reliability.md is of read-only opens *at a snapshot*, in quick
succession; these open the head, once per image looked at.)

A name can be given to a new image at any moment (glance retries an upload under the same image
id), so removal acts on the id that was judged: the image goes to the trash by name, and out of
it by id only if the trash entry is that id; an entry of another id is restored under its name.
librbd's own removal (by name) is used by nothing here.
"""

import dataclasses
import struct
import time
from typing import TYPE_CHECKING, Any, Optional, TypedDict, cast

if TYPE_CHECKING:
    import rados

ID_PREFIX = "rbd_id."
# How long a watcher that is not the writer's may take to go before it counts: another sweep's
# move of the same image to the trash opens it for a moment.
SETTLE = 3.0


class Watcher(TypedDict):
    """A client watching an image, as librbd lists it (``Image.watchers_list``)."""

    id: int  # its librados client's global id
    addr: str
    cookie: int


@dataclasses.dataclass(frozen=True)
class Header:
    """What an image's header says of it, read at one moment."""

    id: str
    snapshots: tuple[str, ...]
    # "pool/image@snapshot" of a clone's parent, None for an image that is not one.
    parent: Optional[str]
    created: Optional[float]
    watchers: tuple[Watcher, ...]


def image_id(ioctx: "rados.Ioctx", name: str) -> Optional[str]:
    """The id of image ``name``, None if there is no such image (of format 2), read from its
    id object: no open."""
    import rados

    try:
        data = ioctx.read(ID_PREFIX + name, 4096)
    except rados.ObjectNotFound:
        return None
    return _string(data, 0)[0]


def header(ioctx: "rados.Ioctx", name: str) -> Optional[Header]:
    """The header of image ``name``, None if there is no such image."""
    import rbd

    try:
        with rbd.Image(ioctx, name, read_only=True) as image:
            try:
                pool, parent_image, snap = image.parent_info()
                parent = f"{pool}/{parent_image}@{snap}"
            except rbd.ImageNotFound:
                parent = None
            try:
                created = image.create_timestamp().timestamp()
            except (rbd.Error, AttributeError):
                created = None
            return Header(
                image.id(),
                tuple(sorted(s["name"] for s in image.list_snaps())),
                parent,
                created,
                tuple(image.watchers_list()),
            )
    except rbd.ImageNotFound:
        return None


def settled(
    ioctx: "rados.Ioctx", name: str, ident: str, writer: Optional[int] = None
) -> Optional[Header]:
    """The header of image ``name`` once no client but ``writer`` (a global id) watches it, or
    as it is after ``SETTLE`` seconds; None once the name is no longer image ``ident`` (removed
    meanwhile, by another sweep)."""
    deadline = time.monotonic() + SETTLE
    while True:
        current = header(ioctx, name)
        if current is None or current.id != ident:
            return None
        if all(w.get("id") == writer for w in current.watchers) or time.monotonic() > deadline:
            return current
        time.sleep(0.2)


def _string(data: bytes, offset: int) -> tuple[str, int]:
    """A Ceph-encoded string at ``offset`` (u32 length, bytes), and the offset after it."""
    (length,) = struct.unpack_from("<I", data, offset)
    start = offset + 4
    return data[start : start + length].decode("utf-8", "backslashreplace"), start + length


def remove(ioctx: "rados.Ioctx", name: str, ident: str) -> str:
    """Removes image ``name`` if its id is still ``ident``. Returns what was done: "removed",
    "already removed", or why it was left."""
    import rbd

    if image_id(ioctx, name) not in (ident, None):
        return "left: the name is another image's now"
    current = settled(ioctx, name, ident)
    if current is None:
        return "already removed"
    if current.watchers:
        return f"left: a client watches it ({', '.join(w['addr'] for w in current.watchers)})"
    if current.snapshots:
        return "left: it has a snapshot now"
    # librbd moves an image to the trash even if a client has it open (it asks the client for
    # its exclusive lock, and gets it): hence the checks above, and the one after.
    try:
        rbd.RBD().trash_move(ioctx, name, 0)
    except rbd.ImageNotFound:
        return "already removed"
    except rbd.ImageBusy:
        # No watcher (checked above), yet its exclusive lock could not be taken: librbd breaks
        # a dead owner's lock by blocklisting it, which the user's caps may refuse.
        return (
            "left: librbd could not take its exclusive lock from its dead writer (breaking "
            "it blocklists the writer: glance's cephx user needs the mon cap 'profile rbd')"
        )
    except rbd.Error as exc:
        # Another sweep moving it at the same moment (ESTALE): gone from here either way.
        if image_id(ioctx, name) != ident:
            return "already removed"
        return f"left: moving it to the trash failed: {exc}"
    moved = _trash_entry(ioctx, ident)
    if moved is None or moved["name"] != name:
        # The name went to another image between the check and the move: put that one back.
        for entry in rbd.RBD().trash_list(ioctx):
            if entry["name"] == name and entry["id"] != ident:
                rbd.RBD().trash_restore(ioctx, entry["id"], name)
        return "left: the name is another image's now"
    try:
        rbd.RBD().trash_remove(ioctx, ident, True)
    except rbd.ImageNotFound:
        pass
    except (rbd.ImageBusy, rbd.ImageHasSnapshots) as exc:
        # A client that opened it, a snapshot made since it was judged: it goes back.
        try:
            rbd.RBD().trash_restore(ioctx, ident, name)
        except rbd.Error as again:
            return (
                f"left in the trash as id {ident} ({exc}; restoring it under its name "
                f"failed: {again}): `rbd trash restore --image-id {ident}` brings it back"
            )
        return f"left: {exc}"
    except rbd.Error as exc:
        if _trash_entry(ioctx, ident) is None:
            return "already removed"  # by another sweep, at the same moment
        return (
            f"left in the trash as id {ident}: removing it failed ({exc}); `rbd trash "
            f"rm {ident}` removes it"
        )
    return "removed"


def remove_snapshot(ioctx: "rados.Ioctx", name: str, ident: str, snapshot: str) -> Optional[str]:
    """Removes ``snapshot`` of image ``name`` if its id is still ``ident``, unprotecting it
    first; None when done (or already gone), else why it was left (a clone of it)."""
    import rbd

    try:
        with rbd.Image(ioctx, name) as image:
            if image.id() != ident:
                return "the name is another image's now"
            if snapshot not in {s["name"] for s in image.list_snaps()}:
                return None
            if image.is_protected_snap(snapshot):
                image.unprotect_snap(snapshot)
            image.remove_snap(snapshot)
    except rbd.ImageNotFound:
        return None
    except rbd.Error as exc:
        return f"removing its snapshot {snapshot} failed: {exc}"
    return None


def _trash_entry(ioctx: "rados.Ioctx", ident: str) -> Optional[dict[str, Any]]:
    import rbd

    try:
        return cast(dict[str, Any], rbd.RBD().trash_get(ioctx, ident))
    except rbd.ImageNotFound:
        return None
