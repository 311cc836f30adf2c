"""Property-based: random chunk sequences, sizes and settings through native and stock give the
same results; odd image names and sizes give the same outcome or a clear error, never a crash
or a partial image."""

import io

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import glance_rbd_native
from glance_rbd_native import RbdWriter
from tests.harness.data import MiB, data_of, new_name
from tests.harness.stores import make_store

pytestmark = pytest.mark.cluster

chunk_sizes = st.one_of(st.integers(0, 4096), st.integers(0, 3 * MiB // 2))


def add(cluster, driver, name, source, size, **store_kwargs):
    if driver == "native":
        glance_rbd_native.patch()
    else:
        glance_rbd_native.unpatch()
    try:
        return make_store(cluster, **store_kwargs).add(name, source, size, "sha512")
    finally:
        glance_rbd_native.unpatch()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    pieces=st.lists(chunk_sizes, max_size=6),
    known=st.booleans(),
    thin=st.booleans(),
    zero_every=st.integers(0, 3),
    chunk_mib=st.sampled_from([1, 2]),
)
def test_random_iterators_same_as_stock(
    cluster, clean_pool, pieces, known, thin, zero_every, chunk_mib
):
    data_pieces = [
        bytes(n) if zero_every and i % zero_every == 0 else data_of(n, seed=i)
        for i, n in enumerate(pieces)
    ]
    data = b"".join(data_pieces)
    declared = len(data) if known else 0
    if known and not data:
        declared = 0  # glance treats size 0 as unknown
    outcomes = {}
    for driver in ("stock", "native"):
        name = new_name(driver)
        try:
            result = add(
                cluster,
                driver,
                name,
                iter(list(data_pieces)),
                declared,
                chunk_mib=chunk_mib,
                thin=thin,
            )
            outcomes[driver] = ("ok", result[1:], clean_pool.read(name))
        except Exception as exc:  # compared below: stock's failures are the oracle's
            outcomes[driver] = ("error", type(exc).__name__, None)
        finally:
            clean_pool.remove(name)
    native, stock = outcomes["native"], outcomes["stock"]
    if stock[0] == "ok":
        assert native == stock
    # Stock may fail where native must not (a piece larger than its growth step).
    assert native[0] == "ok", native
    assert native[2] == data


ODD_NAMES = ["with space", "ünïcødé-名前", "x" * 200, "a@b", "dots.and-dashes_", "a/b"]


@pytest.mark.parametrize("image_name", ODD_NAMES)
def test_odd_image_names_match_stock(cluster, clean_pool, image_name):
    data = data_of(MiB + 1)
    outcomes = {}
    for driver in ("stock", "native"):
        name = f"{image_name}-{driver}"
        try:
            result = add(cluster, driver, name, io.BytesIO(data), len(data), chunk_mib=1)
            outcomes[driver] = ("ok", result[1:], clean_pool.read(name))
        except Exception as exc:  # compared below
            outcomes[driver] = ("error", type(exc).__name__, None)
        clean_pool.remove(name)
    if outcomes["stock"][0] == "ok":
        assert outcomes["native"] == outcomes["stock"]
        assert outcomes["native"][2] == data
    else:
        assert outcomes["native"][0] == "error"
    assert not {n for n in clean_pool.names() if n.startswith(image_name)}


@pytest.mark.parametrize("size", [1 << 62, (1 << 64) - 1], ids=["4EiB", "u64-max"])
def test_absurd_sizes_are_a_clear_error(cluster, clean_pool, size):
    name = new_name("huge")
    with pytest.raises((glance_rbd_native.RbdError, ValueError)) as raised:
        RbdWriter(cluster.pool, name, size, conffile=str(cluster.conf_path), user="admin")
    assert name in str(raised.value) or "size" in str(raised.value)
    assert name not in clean_pool.names()
