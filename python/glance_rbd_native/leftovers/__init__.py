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

from glance_rbd_native.leftovers.images import Header
from glance_rbd_native.leftovers.index import INDEX, Mark, printable
from glance_rbd_native.leftovers.pool import Pool, connect
from glance_rbd_native.leftovers.removal import left, reclaim, remove
from glance_rbd_native.leftovers.uploads import (
    Upload,
    UploadDict,
    inspect,
    judge,
    marks,
    unmarked,
    uploads,
)

__all__ = [
    "INDEX",
    "Header",
    "Mark",
    "Pool",
    "Upload",
    "UploadDict",
    "connect",
    "inspect",
    "judge",
    "left",
    "marks",
    "printable",
    "reclaim",
    "remove",
    "unmarked",
    "uploads",
]
