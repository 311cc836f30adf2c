"""Type stub of the native module built from src/ (PyO3)."""

from types import TracebackType
from typing import Dict, List, Optional, Sequence, Type, Union

import numpy as np
import numpy.typing as npt

DEFAULT_MAX_IN_FLIGHT: int
ZERO_BLOCK: int

class RbdError(OSError):
    """A librbd or librados call failed; `errno` holds the code Ceph returned."""

class NoSpace(RbdError):
    """The pool or cluster has no room left (ENOSPC or EDQUOT)."""

class ImageExists(RbdError):
    """An image of that name already exists; it was left untouched."""

class NotFound(RbdError):
    """The pool or image does not exist."""

class ConnectError(RbdError):
    """The cluster could not be reached: configuration file, user, keyring or monitors."""

Data = Union[bytes, bytearray, memoryview, npt.NDArray[np.uint8]]

class RbdWriter:
    """Streams one image into an RBD pool with asynchronous writes, bounded in flight."""

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
        max_in_flight: int = ...,
        digests: Sequence[str] = (),
    ) -> RbdWriter: ...
    def write(self, data: Data) -> None:
        """Appends `data` (bytes, bytearray, memoryview or numpy uint8 array) to the image."""
    def finish(self) -> int:
        """Waits for all writes, trims, snapshots; returns the bytes written."""
    def abort(self) -> None:
        """Drains the writes in flight and removes the snapshot and image. Safe to call twice."""
    def __enter__(self) -> RbdWriter: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...
    @property
    def fsid(self) -> str: ...
    @property
    def pool(self) -> str: ...
    @property
    def image(self) -> str: ...
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

def native_digests() -> List[str]:
    """The hashlib algorithm names `RbdWriter(digests=...)` can compute natively."""

def connection_count() -> int:
    """Cluster connections currently cached (one per conf file, user and timeout)."""
