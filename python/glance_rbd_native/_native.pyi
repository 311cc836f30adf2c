"""Type stub of the native module built from src/ (PyO3)."""

from types import TracebackType
from typing import Dict, List, Literal, Optional, Sequence, Tuple, Type, TypedDict, Union, final

import numpy as np
import numpy.typing as npt
from typing_extensions import Self

DEFAULT_MAX_IN_FLIGHT: int
ZERO_BLOCK: int
# The librados options that glance's rados_connect_timeout sets, as the stock driver sets them.
_TIMEOUT_OPTIONS: Tuple[str, ...]

class RbdError(OSError):
    """A librbd or librados call failed; `errno` holds the code Ceph returned."""

    # Always set: the native layer raises each as (errno, message).
    errno: int
    strerror: str

class NoSpace(RbdError):
    """The pool or cluster has no room left (ENOSPC or EDQUOT)."""

class ImageExists(RbdError):
    """An image of that name already exists; it was left untouched."""

class NotFound(RbdError):
    """The pool or image does not exist."""

class PoolNotFound(NotFound):
    """The pool does not exist."""

class PermissionDenied(RbdError):
    """The cluster refused an operation to the user (EPERM or EACCES): its caps do not allow it.
    The message names the operation, the pool, the user and the caps glance's user needs."""

class TimedOut(RbdError):
    """The cluster gave no answer within rados_connect_timeout (ETIMEDOUT): the OSDs may be down
    or unreachable, or, on Ceph 20, the user may have no osd cap on the pool."""

class ConnectError(RbdError):
    """The cluster could not be reached: configuration file, user, keyring or monitors."""

class Fenced(RbdError):
    """The transfer's Ceph client was fenced (blocklisted: ESHUTDOWN) or its image removed
    (ENOENT) by another process while it ran: it was abandoned at once. The next transfer
    connects again."""

class InternalError(RuntimeError):
    """The native layer failed in a way that is neither the caller's nor Ceph's doing (a thread
    that could not start, a panic): a bug to report."""

_Data = Union[bytes, bytearray, memoryview, npt.NDArray[np.uint8]]

class _OneImage:
    """Not in the module: what `RbdWriter` and `RbdReader` share. Each is of one image of one
    pool, and a context manager: leaving the `with` block ends the transfer (a writer that did
    not finish aborts, a reader closes); an exception raised in it propagates."""

    @property
    def pool(self) -> str: ...
    @property
    def image(self) -> str: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

@final
class RbdWriter(_OneImage):
    """Streams one image into an RBD pool with asynchronous writes, bounded in flight by its
    share of the process bound (`set_max_in_flight`), and by `max_in_flight` if given."""

    def __new__(
        cls,
        pool: str,
        image: str,
        size: int = 0,
        *,
        conffile: Optional[str] = None,
        user: Optional[str] = None,
        order: int = 23,
        thin_provisioning: bool = False,
        snapshot: Optional[str] = None,
        connect_timeout: Optional[int] = None,
        max_in_flight: Optional[int] = None,
        digests: Sequence[str] = ...,
    ) -> RbdWriter: ...
    def write(self, data: _Data) -> None:
        """Appends `data` (bytes, bytearray, memoryview or numpy uint8 array) to the image."""
    def finish(self) -> int:
        """Waits for all writes, trims, snapshots; returns the bytes written."""
    def abort(self) -> None:
        """Drains the writes in flight and removes the snapshot and image. Safe to call twice."""
    @property
    def fsid(self) -> str: ...
    @property
    def size(self) -> int:
        """The size declared at creation; 0 when unknown."""
    @property
    def bytes_written(self) -> int: ...
    @property
    def hexdigests(self) -> Dict[str, str]:
        """{hashlib name: hex digest} of the data, for the digests asked for; set by finish()."""
    @property
    def trim_seconds(self) -> float:
        """Seconds the final trim of an unknown-size image took."""
    @property
    def resizes(self) -> int:
        """How many times the image was grown (unknown size only)."""
    @property
    def closed(self) -> bool:
        """True once finished or aborted."""

@final
class RbdReader(_OneImage):
    """Reads one image (or a snapshot of it) in order, chunk by chunk, with asynchronous reads
    in flight ahead of the consumer, bounded by its share of the process bound
    (`set_max_in_flight`), and by `max_in_flight` if given. Each chunk is a new `bytes`."""

    def __new__(
        cls,
        pool: str,
        image: str,
        *,
        snapshot: Optional[str] = None,
        conffile: Optional[str] = None,
        user: Optional[str] = None,
        connect_timeout: Optional[int] = None,
        chunk_size: int = 8 << 20,
        max_in_flight: Optional[int] = None,
    ) -> RbdReader: ...
    def __iter__(self) -> RbdReader: ...
    def __next__(self) -> bytes:
        """The next chunk; StopIteration at the end, and once closed."""
    def close(self) -> None:
        """Stops reading: waits for the reads in flight, closes the image. Safe to call again."""
    @property
    def size(self) -> int:
        """The size of the image (or of its snapshot), read when it was opened."""
    @property
    def snapshot(self) -> Optional[str]: ...
    @property
    def bytes_read(self) -> int:
        """Bytes handed out so far."""
    @property
    def closed(self) -> bool:
        """True once every chunk has been handed out, or after close()."""

class _Connect(TypedDict, total=False):
    """The cluster a call connects to: the keywords of the same names `RbdWriter` and
    `RbdReader` take, as one value (`_delete_image(connect=...)`)."""

    conffile: Optional[str]
    user: Optional[str]
    connect_timeout: Optional[int]

class _Transfer(TypedDict):
    """A transfer running, as `transfers()` lists it."""

    id: int
    kind: Literal["upload", "download"]
    pool: str
    image: str
    size: int
    bytes: int
    elapsed: float
    progressed: float
    waiting: Literal["source", "consumer", "cluster", "share"]

def native_digests() -> List[str]:
    """The hashlib algorithm names `RbdWriter(digests=...)` can compute natively."""

def _delete_image(
    pool: str,
    image: str,
    snapshot: Optional[str] = None,
    *,
    connect: Optional[_Connect] = None,
    refuse_clones_first: bool = False,
    trash_with_snapshots: bool = True,
) -> Tuple[str, bool]:
    """Deletes `image` of `pool`, and first its `snapshot`, as glance_store's stock driver does,
    without waiting for its data: (its trash id, whether its data is being removed)."""

def connection_count() -> int:
    """Cluster connections currently cached (one per conf file, user and timeout)."""

def set_max_in_flight(bytes: int) -> None:
    """Sets the bytes all uploads and downloads of the process may hold at once, shared evenly."""

def in_flight() -> Dict[str, int]:
    """{"bound": bytes, "transfers": running, "held": bytes in flight or being hashed}."""

def transfers() -> List[_Transfer]:
    """The uploads and downloads running in this process, oldest first, each a dict: "id",
    "kind" ("upload" or "download"), "pool", "image", "size" (0: unknown), "bytes" (accepted by
    write() or handed out), "elapsed" and "progressed" (seconds from its start to now and to its
    last progress), "waiting" ("source", "consumer", "cluster" or "share")."""

def _queue_logs_here() -> None:
    """Makes the calling thread queue its records, as the module's own threads do: for threads of
    eventlet's pool, which run native calls while logging's locks belong to the hub's thread."""

def _flush_logs() -> None:
    """Emits the records queued by background threads, from this (Python) thread."""

def _connect_failure(
    errno: int, *, conffile: Optional[str] = None, user: Optional[str] = None
) -> str:
    """The message of a connect with these settings that failed with `errno` at `rados_connect`:
    the conf file read again, and what the keyring holds for the user. Nothing connects."""

class _Versions(TypedDict):
    """The libraries this process loaded (`_library_versions()`)."""

    librbd: Tuple[int, int, int]
    librados: Tuple[int, int, int]
    openssl: str
    # librbd's minor number: the Ceph release of the client.
    ceph: int
    oldest_ceph: int

def _library_versions() -> _Versions:
    """The versions of the librbd, librados and OpenSSL loaded into this process."""

def _caps_advice(errno: int, pool: str, entity: Optional[str] = None) -> Optional[str]:
    """What to tell the operator when the cluster refuses `entity` an operation on `pool` (EPERM,
    EACCES) or leaves it unanswered (ETIMEDOUT), as the native errors say it; None for any other
    errno."""

def _glance_caps(pool: str) -> str:
    """The caps of glance's documented cephx user on `pool`, as `ceph auth caps` takes them."""

def _mark_identity(client: int, address: Optional[str] = None) -> str:
    """Who this process is, as a mark names its writer (host, boot id, pid, start, pid namespace,
    cgroup), with the librados `client` (global id) and `address` it writes with: a JSON object."""
