"""The caps probes of ``check``: what glance's cephx user does in its pool, done once on an image
of the probe's own, each operation named with the cap it needs, so that a cap the user lacks
shows before an upload or a delete needs it.

The operations, in the order uploads and deletes make them:

- mark the upload, create, write, snapshot, protect, unprotect, remove the snapshot, mark the
  delete, move to the trash: the osd cap (``profile rbd``: writes and rbd's class methods);
- ask the Ceph manager to remove the trash entry (``rbd task add trash remove``): the mgr cap.
  Refused or unanswered, glance-api's deletes purge their data in its own process: a Warning;
- remove the trash entry, where the manager did not.

Nothing is left behind. The image is marked as an upload before it is created (the mark's
``"probe"`` names its snapshot, which ``sweep --remove`` removes with it), and its removal as a
delete's before it moves to the trash, each as glance-api's own: a probe killed at any point
leaves what ``sweep --remove`` reclaims. One interrupted (SIGINT, SIGTERM) or refused removes
what it made itself. ``--no-write`` asks the manager ``rbd task list`` alone, which writes
nothing.
"""

import contextlib
import dataclasses
import errno
import json
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Callable, Optional

from glance_rbd_native.leftovers import deletes, index
from glance_rbd_native.leftovers.index import Mark

if TYPE_CHECKING:
    import rados

# The probe's image: its name, and the snapshot it makes (named by its mark).
PREFIX = "glance-rbd-native-check."
SNAPSHOT = "check"
DATA = b"glance-rbd-native check\n" * 43690  # about 1 MiB
# Seconds the manager has to answer, and to remove the entry it took.
MANAGER_WAIT = 10
MANAGER_REMOVES_WITHIN = 30
# Errors that say the user lacks a cap, and those that may (Ceph 20 leaves a user without an osd
# cap unanswered).
REFUSED = {errno.EPERM, errno.EACCES}
UNANSWERED = {errno.ETIMEDOUT}
NOT_YET = {errno.EAGAIN, errno.EOPNOTSUPP}


@dataclasses.dataclass
class Probed:
    """What the probe found: the operations done, the one refused (with its error), and what
    the manager said where it did not take the removal."""

    done: list[str] = dataclasses.field(default_factory=list)
    refused: Optional[tuple[str, Exception]] = None
    manager: Optional["Said"] = None
    # What could not be removed after a refusal or an interruption, and why.
    left: Optional[str] = None
    seconds: float = 0.0


class _Refused(Exception):
    def __init__(self, step: str, cause: Exception) -> None:
        super().__init__(step)
        self.step = step
        self.cause = cause


def error_number(exc: BaseException) -> Optional[int]:
    """The errno of a rados or rbd error (their types hold it positive, or not at all)."""
    import rados
    import rbd

    code = getattr(exc, "errno", None)
    if isinstance(code, int):
        return abs(code)
    for kind, number in (
        (rados.PermissionDeniedError, errno.EACCES),
        (rados.PermissionError, errno.EPERM),
        (rbd.PermissionError, errno.EPERM),
        (rados.TimedOut, errno.ETIMEDOUT),
        (rbd.Timeout, errno.ETIMEDOUT),
    ):
        if isinstance(exc, kind):
            return number
    return None


class Probe:
    """One run of the probes in a pool, on a connection of the check's."""

    def __init__(
        self,
        cluster: "rados.Rados",
        pool: str,
        manager: Callable[[], "rados.Rados"],
        left_behind: Optional[list[str]] = None,
    ) -> None:
        self.cluster = cluster
        self.pool = pool
        # Where to say what could not be removed, whatever ends the probe.
        self.left_behind = left_behind if left_behind is not None else []
        # A connection whose operations time out after MANAGER_WAIT, for the manager alone.
        self.manager = manager
        self.name = f"{PREFIX}{uuid.uuid4()}"
        self.image_id: Optional[str] = None
        self.upload: Optional[Mark] = None
        self.deletion: Optional[Mark] = None

    def run(self) -> Probed:
        """The probes, and what they found. What the image became is removed whatever ends
        them (a refusal, an error, a signal); `Probed.left` says what could not be."""
        import rados
        import rbd

        probed = Probed()
        started = time.monotonic()
        with self.cluster.open_ioctx(self.pool) as ioctx:
            try:
                self._steps(ioctx, probed)
            except _Refused as refused:
                probed.refused = (refused.step, refused.cause)
            except (rbd.Error, rados.Error) as exc:
                probed.refused = ("the probe", exc)
            finally:
                with signals_held():
                    probed.left = self._clean(ioctx)
                if probed.left:
                    self.left_behind.append(probed.left)
        probed.seconds = time.monotonic() - started
        return probed

    def _steps(self, ioctx: "rados.Ioctx", probed: Probed) -> None:
        import rbd

        def step(name: str, call: Callable[[], object]) -> None:
            self._step(probed, name, call)

        step("mark the upload", lambda: self._mark_upload(ioctx))
        step("create", lambda: rbd.RBD().create(ioctx, self.name, len(DATA), order=23))
        with rbd.Image(ioctx, self.name) as image:
            self.image_id = image.id()
            step("write", lambda: image.write(DATA, 0))
            step("snapshot", lambda: image.create_snap(SNAPSHOT))
            step("protect", lambda: image.protect_snap(SNAPSHOT))
            step("unprotect", lambda: image.unprotect_snap(SNAPSHOT))
            step("remove the snapshot", lambda: image.remove_snap(SNAPSHOT))
        step("mark the delete", lambda: self._mark_deletion(ioctx))
        step("move to the trash", lambda: rbd.RBD().trash_move(ioctx, self.name, 0))
        self._unmark(ioctx, "upload")
        probed.manager = self._by_manager(ioctx)
        if probed.manager is None:
            probed.done.append("the manager's removal")
        else:
            step("remove", lambda: self._trash_remove(ioctx))
        self._unmark(ioctx, "deletion")

    def _step(self, probed: Probed, name: str, call: Callable[[], object]) -> None:
        """Does one operation, named `name` in the report; a refusal ends the probe."""
        import rados
        import rbd

        try:
            call()
        except (rbd.Error, rados.Error) as exc:
            raise _Refused(name, exc) from exc
        probed.done.append(name)

    def _mark_upload(self, ioctx: "rados.Ioctx") -> None:
        self.upload = mark_upload(self.cluster, ioctx, self.name, SNAPSHOT)

    def _mark_deletion(self, ioctx: "rados.Ioctx") -> None:
        assert self.image_id is not None
        fields = {"started": time.time(), "image": self.name, "image_id": self.image_id}
        self.deletion = mark(self.cluster, ioctx, deletes.DELETES, self.image_id, fields)

    def _trash_remove(self, ioctx: "rados.Ioctx") -> None:
        import rbd

        try:
            rbd.RBD().trash_remove(ioctx, self.image_id)
        except rbd.ImageNotFound:
            pass  # the manager's, after all

    def _by_manager(self, ioctx: "rados.Ioctx") -> Optional["Said"]:
        """Asks the manager to remove the probe's trash entry, as glance-api's deletes do; None
        once it is gone, else what the manager said (the caller removes it then)."""
        import rbd

        spec = f"{self.pool}/{self.image_id}"
        said = ask_manager(
            self.cluster,
            self.manager,
            {"prefix": "rbd task add trash remove", "image_id_spec": spec, "format": "json"},
        )
        if said is not None:
            return said
        deadline = time.monotonic() + MANAGER_REMOVES_WITHIN
        while time.monotonic() < deadline:
            try:
                rbd.RBD().trash_get(ioctx, self.image_id)
            except rbd.ImageNotFound:
                return None
            time.sleep(0.2)
        return Said(
            f"the Ceph manager took `rbd task add trash remove` but had not removed the entry "
            f"after {MANAGER_REMOVES_WITHIN} s (`rbd task list` shows its tasks)"
        )

    def _unmark(self, ioctx: "rados.Ioctx", which: str) -> None:
        if which == "upload" and self.upload is not None:
            index.remove(ioctx, self.upload)
            self.upload = None
        if which == "deletion" and self.deletion is not None:
            index.remove(ioctx, self.deletion, deletes.DELETES)
            self.deletion = None

    def _clean(self, ioctx: "rados.Ioctx") -> Optional[str]:
        """Removes what the probe made and did not remove, under its name or in the trash, then
        its marks; None when nothing is left, else what is, which its marks name to ``sweep
        --remove``."""
        import rados
        import rbd

        try:
            if self.upload is not None or self.image_id is not None:
                remove_image(ioctx, self.name, SNAPSHOT)
            if self.image_id is not None:
                self._trash_remove(ioctx)
            self._unmark(ioctx, "upload")
            self._unmark(ioctx, "deletion")
        except (rbd.Error, rados.Error) as exc:
            return (
                f"image {self.name} (id {self.image_id or 'unknown'}) could not be removed "
                f"({exc}): `glance-rbd-native sweep --remove` removes it once this process ended"
            )
        return None


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait while the block runs (a cleanup), and come after it."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def mark(
    cluster: "rados.Rados", ioctx: "rados.Ioctx", obj: str, key: str, fields: dict[str, object]
) -> Mark:
    """Sets the entry `key` of index object `obj`, as glance-api's writers and deletes do: who
    marks (this process, with `cluster`'s client) and `fields`."""
    import rados

    from glance_rbd_native import _native

    who = json.loads(_native._mark_identity(cluster.get_instance_id(), cluster.get_addrs()))
    raw = json.dumps({**who, **fields}).encode()
    with rados.WriteOpCtx() as op:
        ioctx.set_omap(op, (key,), (raw,))
        ioctx.operate_write_op(op, obj)
    return Mark(key.encode(), raw, {**who, **fields})


def mark_upload(cluster: "rados.Rados", ioctx: "rados.Ioctx", name: str, snapshot: str) -> Mark:
    """Marks image `name` as an upload of this process whose `snapshot` goes with it: until
    the mark is dropped, `sweep --remove` removes the image (and that snapshot) once this
    process is gone."""
    now = time.time()
    fields = {"started": now, "updated": now, "bytes": 0, "probe": snapshot}
    return mark(cluster, ioctx, index.INDEX, name, fields)


def remove_image(ioctx: "rados.Ioctx", name: str, snapshot: str) -> None:
    """Removes image `name` and its `snapshot` (unprotected first), if they are there."""
    import rbd

    try:
        with rbd.Image(ioctx, name) as image:
            if snapshot in {s["name"] for s in image.list_snaps()}:
                if image.is_protected_snap(snapshot):
                    image.unprotect_snap(snapshot)
                image.remove_snap(snapshot)
        rbd.RBD().remove(ioctx, name)
    except rbd.ImageNotFound:
        pass


@dataclasses.dataclass
class Said:
    """What the manager said to a command it did not run: ``refused`` if for want of caps."""

    text: str
    refused: bool = False


def ask_manager(
    cluster: "rados.Rados", manager: Callable[[], "rados.Rados"], command: dict[str, str]
) -> Optional[Said]:
    """Sends `command` to the Ceph manager, on a connection of `manager`'s, if the monitors say
    one is active (asked on `cluster`); None if it was done, else what was said."""
    import rados

    try:
        ret, out, _ = cluster.mon_command(json.dumps({"prefix": "mgr stat", "format": "json"}), b"")
        if ret == 0 and not json.loads(out).get("available", True):
            return Said("no Ceph manager is active (`ceph mgr stat`)")
    except (rados.Error, ValueError):
        pass  # not told: the manager is asked
    try:
        private = manager()
    except rados.Error as exc:
        return Said(f"no connection to ask the Ceph manager: {exc}")
    deadline = time.monotonic() + MANAGER_WAIT
    try:
        while True:
            try:
                ret, _, status = private.mgr_command(json.dumps(command), b"")
            except rados.Error as exc:
                ret, status = error_number(exc) or errno.EIO, str(exc)
            # The binding returns librados' -errno as it is, or positive: one errno either way.
            code = abs(ret)
            # A manager just started answers so until its rbd_support module is up.
            if code not in NOT_YET or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        private.shutdown()
    if code == 0:
        return None
    prefix = command["prefix"]
    if code in REFUSED:
        why = status or errno.errorcode[code]
        return Said(f"the Ceph manager refused `{prefix}` ({why})", refused=True)
    if code in UNANSWERED:
        return Said(f"no Ceph manager answered `{prefix}` within {MANAGER_WAIT} s")
    name = errno.errorcode.get(code, str(code))
    return Said(f"the Ceph manager failed `{prefix}` ({name}{': ' + status if status else ''})")
