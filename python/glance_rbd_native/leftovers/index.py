"""The index of the uploads in flight: one omap entry per image in the pool's object ``INDEX``,
written by the native writer (``core/src/transfer/mark.rs``), keyed by image name.

A mark says who writes: host, boot id, pid, process start, pid namespace and cgroup (which
container), the librados client (its global id and address), the image's id, when it started,
and the bytes stored, refreshed every few seconds. Every change made here is conditional on the
entry being the one that was read: a writer judged gone never loses a newer writer's mark.
"""

import dataclasses
import errno
import json
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Optional, Union

if TYPE_CHECKING:
    import rados

INDEX = "glance_rbd_native.uploads"
# A page of the index: it holds the uploads in flight, not the pool's images.
PAGE = 1000

# Who wrote a mark, an upload's or a delete's (core/src/transfer/mark.rs `identity`), with the
# types of its fields: its process, where `sight` looks for it, and its librados client. Marks
# of older releases lack the optional ones. `given_up`: when its tries to remove what it left
# ended (core/src/transfer/janitor.rs, core/src/delete/purge.rs).
WRITER = {"host": str, "boot_id": str, "pid": int, "process_start": int, "started": float}
WRITER_OPTIONAL = {
    "pid_ns": int,
    "cgroup": str,
    "client": int,
    "addr": str,
    "given_up": float,
}

# Fields every upload's mark has, and those it may have. "probe": the snapshot `check`'s probe
# makes of its image (probes.py), which goes with the image.
REQUIRED = {**WRITER, "updated": float, "bytes": int}
OPTIONAL = {**WRITER_OPTIONAL, "image_id": str, "size": int, "probe": str}


@dataclasses.dataclass(frozen=True)
class Mark:
    """One entry of the index, as read."""

    key: bytes
    # The value as stored: removing the entry is conditional on it.
    raw: bytes
    # The fields, or None for an entry that cannot be read (``problem`` says why).
    fields: Optional[dict[str, Any]]
    problem: Optional[str] = None

    @property
    def image(self) -> str:
        """The image's name, printable whatever the key holds."""
        return printable(self.key.decode("utf-8", "backslashreplace"))

    def get(self, field: str, default: Any = None) -> Any:
        return (self.fields or {}).get(field, default)


Schema = dict[str, type]


def parse(key: bytes, raw: bytes, required: Schema = REQUIRED, optional: Schema = OPTIONAL) -> Mark:
    """The mark stored under ``key`` (with the ``required`` and ``optional`` fields of an
    upload's, or those given); an unreadable one says why, and is never acted on."""

    def unreadable(problem: str) -> Mark:
        return Mark(key, raw, None, problem)

    try:
        name = key.decode()
    except UnicodeDecodeError:
        return unreadable("its key is not UTF-8")
    if has_control(name):
        return unreadable("its key holds control characters")
    try:
        fields = json.loads(raw)
    except ValueError:
        return unreadable("its value is not JSON")
    if not isinstance(fields, dict):
        return unreadable(f"its value is a JSON {type(fields).__name__}, not an object")
    for field, kind in {**required, **optional}.items():
        if field not in fields:
            if field in required:
                return unreadable(f"it has no {field!r}")
            continue
        value = fields[field]
        if kind is float and isinstance(value, int):
            value = fields[field] = float(value)
        if not isinstance(value, kind) or isinstance(value, bool):
            return unreadable(f"its {field!r} is not a {kind.__name__}")
        if isinstance(value, float) and not math.isfinite(value):
            return unreadable(f"its {field!r} is not a finite number")
        if isinstance(value, str) and has_control(value):
            return unreadable(f"its {field!r} holds control characters")
    return Mark(key, raw, fields)


def read(
    ioctx: "rados.Ioctx",
    index: str = INDEX,
    required: Schema = REQUIRED,
    optional: Schema = OPTIONAL,
) -> dict[str, Mark]:
    """{key: Mark} of every entry in ``index`` (by default the uploads', keyed by image name),
    in the pool of ``ioctx``. An entry whose
    key is not UTF-8 is listed as unreadable: Ceph's Python binding cannot return such a key
    (it fails to decode it, and goes on with the next), so it is named by the key before it."""
    import rados

    found: dict[str, Mark] = {}
    after = ""
    while True:
        with rados.ReadOpCtx() as op:
            values, _ = ioctx.get_omap_vals(op, after, "", PAGE)
            try:
                ioctx.operate_read_op(op, index)
            except rados.ObjectNotFound:
                return found  # no native upload (or delete) ever ran in this pool
            page = _entries(values, after)
        for key, value in page:
            mark = (
                parse(key, value or b"", required, optional)
                if key is not None
                else Mark(b"", b"", None, "its key is not UTF-8")
            )
            name = (
                mark.image
                if key is not None
                else f"(a key that is not UTF-8, after {printable(after) or 'the first'!r})"
            )
            found[name] = mark
        readable = [key for key, _ in page if key is not None]
        if len(page) < PAGE or not readable:
            return found
        after = readable[-1].decode()


def _entries(
    values: Iterable[tuple[Union[str, bytes], Optional[bytes]]], after: str
) -> list[tuple[Optional[bytes], Optional[bytes]]]:
    """(key as bytes, value) of an omap page; a key that cannot be decoded is None."""
    entries: list[tuple[Optional[bytes], Optional[bytes]]] = []
    iterator = iter(values)
    while True:
        try:
            key, value = next(iterator)
        except StopIteration:
            return entries
        except UnicodeDecodeError:
            entries.append((None, b""))
            continue
        entries.append((key if isinstance(key, bytes) else key.encode(), value))


def remove(ioctx: "rados.Ioctx", mark: Mark, index: str = INDEX) -> bool:
    """Removes ``mark`` from ``index`` if the entry still holds what was read; False if it
    changed (a new writer marked the name meanwhile) or is gone."""
    import rados

    try:
        key, value = mark.key.decode(), mark.raw.decode()
    except UnicodeDecodeError:
        return False  # never written by a writer: left to the operator
    with rados.WriteOpCtx() as op:
        op.omap_cmp(key, value, rados.LIBRADOS_CMPXATTR_OP_EQ)
        ioctx.remove_omap_keys(op, (key,))
        try:
            ioctx.operate_write_op(op, index)
        except rados.ObjectNotFound:
            return False
        except rados.Error as exc:
            if getattr(exc, "errno", None) == errno.ECANCELED:
                return False
            raise
    return True


def has_control(text: str) -> bool:
    return any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in text)


def printable(text: str) -> str:
    """``text`` with its control characters escaped, for the command's output and logs."""
    if not has_control(text):
        return text
    return "".join(c if not has_control(c) else repr(c)[1:-1] for c in text)
