"""The pool's trash and the native delete's index of deletions, as the tests look at them, a
client that holds a deleted image open in the trash, and what `check`'s probes left."""

import contextlib
import json
import time

import rados
import rbd

# The index object of the native deletes in progress (core/src/delete/mod.rs).
DELETES = "glance_rbd_native.deletes"


def ids(ioctx) -> set:
    return {entry["id"] for entry in rbd.RBD().trash_list(ioctx)}


def names(ioctx) -> dict:
    """{image name: trash id} of the pool's trash."""
    return {entry["name"]: entry["id"] for entry in rbd.RBD().trash_list(ioctx)}


def marked(ioctx) -> dict:
    """{trash id: mark} of the pool's index of deletions."""
    with rados.ReadOpCtx() as op:
        values, _ = ioctx.get_omap_vals(op, "", "", 10000)
        try:
            ioctx.operate_read_op(op, DELETES)
        except rados.ObjectNotFound:
            return {}
        return {key: json.loads(value) for key, value in values}


def hold(ioctx, trash_id) -> rbd.Image | None:
    """Trash entry `trash_id` opened (with a watch, as a reader that had it open when it moved),
    once it is proved to come before its purge's removal: the entry is still there 2 s later,
    when the removal of a small image that had passed its check of watchers would be over. None
    if the purge came first (the caller tries with another image)."""
    try:
        image = rbd.Image(ioctx, image_id=trash_id)
    except rbd.ImageNotFound:
        return None
    time.sleep(2)
    if trash_id in ids(ioctx):
        return image
    with contextlib.suppress(rbd.Error):
        image.close()
    return None


def discard(ioctx, trash_id) -> None:
    """A test's clean-up: trash entry `trash_id` removed if it is there (its snapshots first,
    in any namespace), and its deletion mark dropped."""
    if trash_id in ids(ioctx):
        with rbd.Image(ioctx, image_id=trash_id) as image:
            for snap in list(image.list_snaps()):
                image.remove_snap_by_id(snap["id"])
        rbd.RBD().trash_remove(ioctx, trash_id, force=True)
    with rados.WriteOpCtx() as op:
        ioctx.remove_omap_keys(op, (trash_id,))
        ioctx.operate_write_op(op, DELETES)


def held_after(ioctx, delete, tries=3):
    """Calls `delete()`, which deletes an image and returns its trash id, until the entry can
    be held open (`hold`: its purge may come first), `tries` times at most: (the trash id, the
    open image)."""
    for _ in range(tries):
        trash_id = delete()
        image = hold(ioctx, trash_id)
        if image is not None:
            return trash_id, image
    raise AssertionError(f"the purge removed each of {tries} images before it could be held open")


def probes_left(ioctx) -> list[str]:
    """What `check`'s caps probes left in the pool: images, trash entries, and the marks of
    either (python/glance_rbd_native/probes.py)."""
    from glance_rbd_native import probes
    from glance_rbd_native.leftovers import deletes, index

    left = [name for name in rbd.RBD().list(ioctx) if name.startswith(probes.PREFIX)]
    left += [
        f"trash {entry['id']} ({entry['name']})"
        for entry in rbd.RBD().trash_list(ioctx)
        if entry["name"].startswith(probes.PREFIX)
    ]
    left += [f"upload mark {name}" for name in index.read(ioctx) if name.startswith(probes.PREFIX)]
    deleting = index.read(ioctx, deletes.DELETES, deletes.REQUIRED, deletes.OPTIONAL)
    left += [
        f"delete mark {key} ({mark.get('image')})"
        for key, mark in deleting.items()
        if str(mark.get("image", "")).startswith(probes.PREFIX)
    ]
    return left
