"""RbdWriter on the real cluster: accepted inputs, sizes, thin writes, clean-up, bad input."""

import array
import errno
import hashlib
import mmap

import numpy as np
import pytest

from glance_rbd_native import (
    ConnectError,
    ImageExists,
    NotFound,
    RbdError,
    RbdWriter,
    connection_count,
    native_digests,
)
from tests.harness.data import MiB, data_of, new_name, sparse_data
from tests.harness.stores import SNAP

pytestmark = pytest.mark.cluster


@pytest.fixture
def open_writer(cluster):
    def make(name, size=0, **kwargs):
        kwargs.setdefault("conffile", str(cluster.conf_path))
        kwargs.setdefault("user", "admin")
        kwargs.setdefault("order", 20)
        return RbdWriter(cluster.pool, name, size, **kwargs)

    return make


def anonymous_map(data):
    mapped = mmap.mmap(-1, len(data))
    mapped.write(data)
    return mapped


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "memoryview", "numpy", "array", "mmap"])
def test_accepts_buffer_kinds(open_writer, clean_pool, kind):
    data = data_of(3 * MiB + 11)
    convert = {
        "bytes": bytes,
        "bytearray": bytearray,
        "memoryview": memoryview,
        "numpy": lambda b: np.frombuffer(b, dtype=np.uint8),
        "array": lambda b: array.array("B", b),
        "mmap": anonymous_map,
    }[kind]
    name = new_name()
    with open_writer(name, len(data), snapshot=SNAP) as writer:
        for pos in range(0, len(data), 700_001):
            writer.write(convert(data[pos : pos + 700_001]))
    assert writer.closed and writer.bytes_written == len(data)
    assert clean_pool.read(name) == data
    clean_pool.remove(name)


def test_mutating_a_bytearray_after_write_does_not_change_the_image(open_writer, clean_pool):
    name = new_name()
    buf = bytearray(data_of(MiB))
    expected = bytes(buf)
    with open_writer(name) as writer:
        writer.write(buf)
        buf[:] = bytes(MiB)
    assert clean_pool.read(name, snapshot=None) == expected
    clean_pool.remove(name)


def test_unknown_size_grows_then_trims_to_bytes_written(open_writer, clean_pool):
    name = new_name()
    data = data_of(70 * MiB + 3)
    with open_writer(name, snapshot=SNAP) as writer:
        for pos in range(0, len(data), 4 * MiB):
            writer.write(data[pos : pos + 4 * MiB])
    assert writer.resizes == 2  # 64 MiB, then 128 MiB
    assert clean_pool.info(name) == {"size": len(data), "snaps": {SNAP: True}}
    assert clean_pool.read(name) == data
    clean_pool.remove(name)


def test_known_size_is_created_full_size_and_never_resized(open_writer, clean_pool):
    name = new_name()
    data = data_of(5 * MiB)
    with open_writer(name, len(data)) as writer:
        assert clean_pool.info(name)["size"] == len(data)
        writer.write(data)
    assert writer.resizes == 0
    clean_pool.remove(name)


def test_chunk_larger_than_in_flight_bound(open_writer, clean_pool):
    name = new_name()
    data = data_of(9 * MiB + 1)
    with open_writer(name, max_in_flight=MiB) as writer:
        writer.write(data)
    assert clean_pool.read(name, snapshot=None) == data
    clean_pool.remove(name)


def test_thin_skips_zero_blocks_at_any_alignment(open_writer, clean_pool):
    name = new_name()
    data = sparse_data(6 * MiB + 123, seed=5)
    with open_writer(name, len(data), thin_provisioning=True) as writer:
        for pos in range(0, len(data), 999_999):
            writer.write(data[pos : pos + 999_999])
    assert clean_pool.read(name, snapshot=None) == data
    clean_pool.remove(name)


def test_thin_all_zero_writes_no_object(open_writer, clean_pool):
    name = new_name()
    with open_writer(name, thin_provisioning=True) as writer:
        writer.write(bytes(3 * MiB))
        writer.write(bytes(5))
    assert clean_pool.info(name)["size"] == 3 * MiB + 5
    assert clean_pool.data_objects(name) == 0
    clean_pool.remove(name)


def test_abort_removes_image_and_is_idempotent(open_writer, clean_pool):
    name = new_name()
    writer = open_writer(name)
    writer.write(data_of(3 * MiB))
    writer.abort()
    writer.abort()
    assert writer.closed
    assert name not in clean_pool.names()


def test_exception_in_with_block_aborts(open_writer, clean_pool):
    name = new_name()
    with pytest.raises(KeyError):
        with open_writer(name, snapshot=SNAP) as writer:
            writer.write(data_of(MiB))
            raise KeyError("boom")
    assert name not in clean_pool.names()


def test_dropped_unfinished_writer_removes_its_image(open_writer, clean_pool):
    name = new_name()
    writer = open_writer(name)
    writer.write(data_of(MiB))
    del writer
    assert name not in clean_pool.names()


def test_write_after_finish_is_a_clear_error(open_writer, clean_pool):
    name = new_name()
    writer = open_writer(name)
    writer.write(b"abc")
    assert writer.finish() == 3
    with pytest.raises(ValueError, match="closed"):
        writer.write(b"more")
    with pytest.raises(ValueError, match="closed"):
        writer.finish()
    clean_pool.remove(name)


def test_write_past_known_size_aborts(open_writer, clean_pool):
    name = new_name()
    writer = open_writer(name, 10)
    with pytest.raises(ValueError, match="pass the end"):
        writer.write(b"x" * 11)
    assert writer.closed
    assert name not in clean_pool.names()


@pytest.mark.parametrize(
    "bad, message",
    [
        ("text", "not str"),
        (12, "not int"),
        (None, "not NoneType"),
        (np.zeros(4, dtype=np.int32), "dtype uint8, not int32"),
        (array.array("I", [1, 2]), 'not of items of format "I"'),
    ],
    ids=["str", "int", "none", "int32-array", "uint32-array"],
)
def test_wrong_data_types(open_writer, clean_pool, bad, message):
    name = new_name()
    with open_writer(name) as writer:
        with pytest.raises(TypeError, match=message):
            writer.write(bad)
        assert writer.bytes_written == 0
    clean_pool.remove(name)


def test_non_contiguous_buffers(open_writer, clean_pool):
    name = new_name()
    with open_writer(name) as writer:
        with pytest.raises(ValueError, match="contiguous"):
            writer.write(memoryview(bytearray(100))[::2])
        with pytest.raises(ValueError, match="contiguous"):
            writer.write(np.zeros((10, 10), dtype=np.uint8)[:, 1])
        writer.write(b"")
    clean_pool.remove(name)


def test_existing_image_is_left_untouched(open_writer, clean_pool):
    name = new_name()
    clean_pool.create(name, MiB)
    with pytest.raises(ImageExists) as raised:
        open_writer(name)
    assert raised.value.errno == errno.EEXIST
    assert name in str(raised.value) and "pool" in str(raised.value)
    assert clean_pool.info(name)["size"] == MiB
    clean_pool.remove(name)


def test_missing_pool(cluster):
    with pytest.raises(NotFound, match="pool 'nope'") as raised:
        RbdWriter("nope", new_name(), conffile=str(cluster.conf_path), user="admin")
    assert raised.value.errno == errno.ENOENT


def test_bad_conf_path(tmp_path):
    with pytest.raises(ConnectError, match=r"missing\.conf") as raised:
        RbdWriter("images", new_name(), conffile=str(tmp_path / "missing.conf"))
    assert isinstance(raised.value, RbdError) and isinstance(raised.value, OSError)
    assert raised.value.errno is not None


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"order": 40}, "order"),
        ({"max_in_flight": 0}, "max_in_flight"),
        ({"image": ""}, "empty"),
        ({"image": "a\0b"}, "NUL"),
    ],
)
def test_bad_arguments(open_writer, kwargs, match):
    name = kwargs.pop("image", new_name())
    with pytest.raises(ValueError, match=match):
        open_writer(name, **kwargs)


def test_negative_size_is_rejected(open_writer):
    with pytest.raises(OverflowError):
        open_writer(new_name(), -1)


def test_one_connection_per_settings(open_writer, clean_pool):
    for _ in range(3):
        name = new_name()
        with open_writer(name) as writer:
            writer.write(b"x")
        clean_pool.remove(name)
    count = connection_count()
    name = new_name()
    with open_writer(name) as writer:
        writer.write(b"x")
    assert connection_count() == count
    clean_pool.remove(name)


@pytest.mark.parametrize("algo", native_digests())
def test_native_digests_equal_hashlib(open_writer, clean_pool, algo):
    data = data_of(3 * MiB + 17, seed=3)
    name = new_name()
    with open_writer(name, digests=["md5", algo]) as writer:
        for pos in range(0, len(data), 1_000_003):
            writer.write(data[pos : pos + 1_000_003])
        writer.write(b"")
    assert writer.hexdigests == {
        "md5": hashlib.md5(data).hexdigest(),
        algo: hashlib.new(algo, data).hexdigest(),
    }
    clean_pool.remove(name)


def test_digests_are_known_after_finish_only(open_writer, clean_pool):
    name = new_name()
    writer = open_writer(name, digests=["sha256"])
    writer.write(b"abc")
    with pytest.raises(ValueError, match="finished"):
        _ = writer.hexdigests
    writer.finish()
    assert writer.hexdigests == {"sha256": hashlib.sha256(b"abc").hexdigest()}
    clean_pool.remove(name)


def test_unknown_native_digest_is_refused_before_creating(open_writer, clean_pool):
    name = new_name()
    with pytest.raises(ValueError, match="shake_128"):
        open_writer(name, digests=["shake_128"])
    assert name not in clean_pool.names()


def test_every_hashlib_algorithm_is_native_or_left_to_hashlib():
    usable = {a for a in hashlib.algorithms_available if not a.startswith("shake_")}
    assert set(native_digests()) <= usable
    assert {"md5", "sha256", "sha512", "sha3_512", "blake2b"} <= set(native_digests())
