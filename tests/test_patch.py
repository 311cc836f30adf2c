"""patch(), unpatch(), is_patched() and the GLANCE_RBD_NATIVE switch."""

import logging
import os
import subprocess
import sys
import textwrap

import pytest
from glance_store import capabilities, driver as store_driver
from glance_store._drivers import rbd

import glance_rbd_native
from glance_rbd_native import download, patching, settings, upload
from tests.harness import without_libraries

REPLACED = ("add", "get", "get_size")


def test_patch_is_repeat_safe_and_reversible(caplog):
    originals = {name: rbd.Store.__dict__[name] for name in REPLACED}
    with caplog.at_level(logging.INFO, logger="glance_rbd_native"):
        assert glance_rbd_native.patch()
        assert glance_rbd_native.patch()
    assert glance_rbd_native.is_patched()
    assert rbd.Store.get_size is download.get_size
    for name, original in originals.items():
        assert rbd.Store.__dict__[name] is not original
    assert [r.message for r in caplog.records].count(
        next(r.message for r in caplog.records if "native RBD writer is active" in r.message)
    ) == 1
    glance_rbd_native.unpatch()
    glance_rbd_native.unpatch()
    assert not glance_rbd_native.is_patched()
    assert {name: rbd.Store.__dict__[name] for name in REPLACED} == originals


def test_the_stock_methods_are_stocks_whether_patched_or_not():
    """What `check`'s round trip calls for each driver (patching.methods)."""
    originals = {name: rbd.Store.__dict__[name] for name in patching.METHODS}
    assert patching.methods(native=False) == originals
    assert glance_rbd_native.patch()
    try:
        assert patching.methods(native=False) == originals
        native = patching.methods(native=True)
        assert set(native) == set(patching.METHODS)
        assert native["get_size"] is rbd.Store.get_size is download.get_size
    finally:
        glance_rbd_native.unpatch()


def test_patched_add_keeps_the_stock_wrappers():
    stock_add = rbd.Store.add
    glance_rbd_native.patch()
    # back_compat_add wraps capabilities.check, which wraps upload.add, as in the stock class.
    add = rbd.Store.add
    assert add.__name__ == stock_add.__name__
    assert add.__code__ is stock_add.__code__
    assert add.__code__ is store_driver.back_compat_add(upload.add).__code__
    assert add.__wrapped__.__code__ is capabilities.check(upload.add).__code__
    # get is wrapped by capabilities.check too; get_size is not, in stock as here.
    assert rbd.Store.get.__code__ is capabilities.check(download.get).__code__


def test_in_flight_setting(monkeypatch, caplog):
    monkeypatch.setenv(settings.MAX_IN_FLIGHT_ENV, "16")
    assert settings.max_in_flight() == 16 << 20
    monkeypatch.setenv(settings.MAX_IN_FLIGHT_ENV, "lots")
    assert settings.max_in_flight() == glance_rbd_native.DEFAULT_MAX_IN_FLIGHT
    assert "not a positive integer" in caplog.text


SWITCH_PROBE = textwrap.dedent("""
    import logging, sys
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s %(message)s")
    from glance_store._drivers import rbd
    import glance_rbd_native
    print("patched" if glance_rbd_native.is_patched() else "stock")
""")


@pytest.mark.parametrize("value,expected", [("1", "patched"), ("0", "stock"), (None, "stock")])
def test_environment_switch_patches_on_import(value, expected):
    env = {k: v for k, v in os.environ.items() if k != "GLANCE_RBD_NATIVE"}
    if value is not None:
        env["GLANCE_RBD_NATIVE"] = value
    out = subprocess.run(
        [sys.executable, "-c", SWITCH_PROBE],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert out.strip().splitlines()[-1] == expected
    assert ("native RBD writer is active" in out) == (expected == "patched")


def test_environment_switch_after_driver_import():
    probe = "from glance_store._drivers import rbd\n" + textwrap.dedent("""
        from glance_rbd_native import switch
        switch.install()
        import glance_rbd_native
        print(glance_rbd_native.is_patched())
    """)
    out = subprocess.run(
        [sys.executable, "-c", probe],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "GLANCE_RBD_NATIVE": "1"},
    )
    assert out.stdout.strip() == "True"


NO_CEPH_PROBE = textwrap.dedent("""
    import logging, sys
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(levelname)s %(name)s %(message)s")
    from glance_store._drivers import rbd
    print("stock rbd module:", rbd.rbd)
    import glance_rbd_native
    print("patched:", glance_rbd_native.is_patched())
    try:
        glance_rbd_native.RbdWriter
    except ImportError as exc:
        print("RbdWriter:", exc)
""")


@pytest.mark.skipif(os.geteuid() != 0, reason="mount namespaces need root")
def test_a_host_without_ceph_libraries_keeps_the_stock_driver(tmp_path):
    """With the switch on and no librbd, the interpreter starts, glance_store's rbd driver
    imports as stock does there (without its rbd module), and the switch logs why it stays
    stock; the native names raise an ImportError that says what to install."""
    run = without_libraries.run(
        ["librbd.so*", "librados.so*"],
        # glance_store 4.4-5.4 import eventlet, which warns that it is deprecated.
        [sys.executable, "-W", "ignore", "-c", NO_CEPH_PROBE],
        tmp_path,
        env={**os.environ, "GLANCE_RBD_NATIVE": "1"},
    )
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""  # in particular, no traceback from the .pth file
    missing = "librbd.so.1: cannot open shared object file: No such file or directory"
    explained = (
        "glance-rbd-native cannot load its native module: this host has no librbd.so.1; "
        f"install librbd1 from Ceph 16 (Pacific) or later, and restart the process ({missing})"
    )
    assert run.stdout.splitlines() == [
        f"WARNING glance_rbd_native.switch glance-rbd-native: the rbd driver stays stock: "
        f"{explained}",
        "stock rbd module: None",
        "patched: False",
        f"RbdWriter: {explained}",
    ]
