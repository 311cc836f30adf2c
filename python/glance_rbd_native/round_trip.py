"""The round trip of ``check``: the same bytes through the stock and the native ``Store.add`` and
``get`` of a backend, on the Store glance's configuration makes. What each stores, and what each
reads back, must be the source: its size, md5 and sha512 (glance's checksum and multihash); and
the times of both, side by side in one run.

Each image is named as glance names its images (a UUID) and marked as the caps probes mark
theirs (``probes.mark_upload``, naming glance's snapshot): a check killed meanwhile leaves what
``sweep --remove`` reclaims. Stock's image is marked before its add; the native writer marks its
own while it writes, and the check marks it again once ``add`` returned: a kill in the moment
between the writer's last word and that mark leaves a whole image with its snapshot, which the
sweep never takes for a partial one.
"""

import dataclasses
import hashlib
import io
import time
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Callable, Optional

from glance_rbd_native import patching, probes
from glance_rbd_native.leftovers import index

if TYPE_CHECKING:
    import rados

    from glance_rbd_native import compat

MiB = 1 << 20
SIZE_MIB = 64
DRIVERS = ("stock", "native")


class Source(io.RawIOBase):
    """`size` bytes of a random MiB repeated, each MiB starting with its number (no two alike,
    none of them zeros that a writer may skip)."""

    def __init__(self, size: int, block: bytes) -> None:
        self.size = size
        self.block = block
        self.offset = 0

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        end = self.size if n is None or n < 0 else min(self.size, self.offset + n)
        parts = []
        while self.offset < end:
            number, within = divmod(self.offset, MiB)
            chunk = number.to_bytes(8, "little") + self.block[8:]
            part = chunk[within : within + end - self.offset]
            parts.append(part)
            self.offset += len(part)
        return b"".join(parts)


@dataclasses.dataclass
class Leg:
    """One driver's add and get of the source: seconds each took."""

    driver: str
    add: float = 0.0
    get: float = 0.0


class TripFailed(Exception):
    """A call of the round trip that failed, or what it stored or read back is not the source:
    the message says which."""


class RoundTrip:
    """The stock and the native add and get of `size_mib` MiB on `store`, whose pool is open on
    `ioctx` of `cluster` (the check's connection: its marks)."""

    def __init__(
        self,
        store: "compat.RbdStore",
        cluster: "rados.Rados",
        ioctx: "rados.Ioctx",
        size_mib: int = SIZE_MIB,
        left_behind: Optional[list[str]] = None,
    ) -> None:
        import os

        # Where to say what could not be removed, whatever ends the round trip.
        self.left_behind = left_behind if left_behind is not None else []
        self.store = store
        self.cluster = cluster
        self.ioctx = ioctx
        self.size = size_mib * MiB
        self.block = os.urandom(MiB)
        md5, sha512 = hashlib.md5(), hashlib.sha512()
        source = Source(self.size, self.block)
        while chunk := source.read(8 * MiB):
            md5.update(chunk)
            sha512.update(chunk)
        self.digests = (md5.hexdigest(), sha512.hexdigest())

    def run(self) -> list[Leg]:
        """Both legs, stock first; TripFailed, naming the call that failed or gave other bytes."""
        return [self.leg(driver) for driver in DRIVERS]

    def leg(self, driver: str) -> Leg:
        from glance_store._drivers import rbd as stock

        methods = patching.methods(native=driver == "native")
        name = str(uuid.uuid4())
        mark: Optional[index.Mark] = None
        leg = Leg(driver)
        try:
            if driver == "stock":
                mark = probes.mark_upload(self.cluster, self.ioctx, name, stock.DEFAULT_SNAPNAME)

            def add() -> tuple[Any, ...]:
                nonlocal mark
                added = methods["add"](
                    self.store, name, Source(self.size, self.block), self.size, "sha512"
                )
                if mark is None:
                    mark = probes.mark_upload(
                        self.cluster, self.ioctx, name, stock.DEFAULT_SNAPNAME
                    )
                return tuple(added)

            leg.add, added = self._timed(f"{driver} add", add)
            uri, size, md5, sha512 = added[:4]
            self._compare(f"{driver} add", size, (md5, sha512))
            leg.get, (got, got_digests) = self._timed(
                f"{driver} get", lambda: self._read(methods["get"], uri)
            )
            self._compare(f"{driver} get", got, got_digests)
        finally:
            with probes.signals_held():
                self._clean(name, mark)
        return leg

    def _clean(self, name: str, mark: Optional[index.Mark]) -> None:
        """Removes image `name` and its mark; what cannot be is said in `left_behind`, and its
        mark names it to ``sweep --remove``."""
        import rados
        import rbd
        from glance_store._drivers import rbd as stock

        try:
            probes.remove_image(self.ioctx, name, stock.DEFAULT_SNAPNAME)
            if mark is not None:
                index.remove(self.ioctx, mark)
        except (rbd.Error, rados.Error) as exc:
            self.left_behind.append(
                f"image {name} could not be removed ({exc}): `glance-rbd-native sweep "
                "--remove` removes it once this process ended"
            )

    def _timed(self, what: str, call: Callable[[], Any]) -> tuple[float, Any]:
        """`call`'s result and the seconds it took; `what` names it."""
        started = time.monotonic()
        try:
            done = call()
        except Exception as exc:
            raise TripFailed(f"{what} failed: {type(exc).__name__}: {exc}") from exc
        return time.monotonic() - started, done

    def _read(self, get: Callable[..., Any], uri: str) -> tuple[int, tuple[str, str]]:
        from glance_store import location
        from glance_store._drivers import rbd as stock

        where = location.Location("rbd", stock.StoreLocation, self.store.conf, uri=uri)
        chunks, _ = get(self.store, where)
        md5, sha512, size = hashlib.md5(), hashlib.sha512(), 0
        for chunk in _iterated(chunks):
            md5.update(chunk)
            sha512.update(chunk)
            size += len(chunk)
        return size, (md5.hexdigest(), sha512.hexdigest())

    def _compare(self, what: str, size: int, digests: tuple[str, str]) -> None:
        if size != self.size or digests != self.digests:
            raise TripFailed(
                f"{what}: {size} bytes of md5 {digests[0]} and sha512 {digests[1][:16]}..., "
                f"where the source is {self.size} bytes of md5 {self.digests[0]} and sha512 "
                f"{self.digests[1][:16]}..."
            )


def _iterated(chunks: Iterable[bytes]) -> Iterable[bytes]:
    try:
        yield from chunks
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
