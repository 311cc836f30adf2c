"""Data shaped like what glance hands its store, and names for the images made of it: shared
by the tests and the benchmarks."""

import hashlib
import io
import random
import uuid

MiB = 1 << 20


def new_name(prefix="img"):
    return f"{prefix}-{uuid.uuid4()}"


def data_of(size, seed=0):
    return random.Random(seed).randbytes(size)


def sparse_data(size, seed=0, block=4096):
    """Random data in which about half of the blocks, in runs of varied length, are zero."""
    rng = random.Random(seed)
    out = bytearray(size)
    pos = 0
    while pos < size:
        run = rng.randint(1, 8) * block + rng.choice((0, 0, rng.randrange(block)))
        if rng.random() < 0.5:
            out[pos : pos + run] = rng.randbytes(min(run, size - pos))
        pos += run
    return bytes(out[:size])


class ShortReader:
    """A file-like source whose reads return fewer bytes than asked, like a socket."""

    def __init__(self, data, seed=0, max_read=None):
        self._stream = io.BytesIO(data)
        self._rng = random.Random(seed)
        self._max = max_read

    def read(self, size=-1):
        limit = size if size > 0 else len(self._stream.getbuffer())
        if self._max:
            limit = min(limit, self._max)
        return self._stream.read(self._rng.randint(1, max(1, limit)))


def chunks_of(data, sizes):
    """An iterator over `data` cut into pieces of the given sizes, cycling through them."""
    pos, i = 0, 0
    while pos < len(data):
        step = sizes[i % len(sizes)]
        yield data[pos : pos + step]
        pos += step
        i += 1


def expected_result(data, algo="sha512"):
    return len(data), hashlib.md5(data).hexdigest(), hashlib.new(algo, data).hexdigest()
