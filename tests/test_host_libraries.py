"""What a host lacking a library the native module links is told: the package to install and
its release, where the dynamic loader names a file (glance_rbd_native/libraries.py). Each
library in turn is taken away from a real interpreter (tests/harness/without_libraries.py,
root); the messages of loaders and librbd releases that cannot be made here are checked as text."""

import os
import sys
import textwrap

import pytest

from glance_rbd_native import libraries
from tests.harness import without_libraries

CEPH = "Ceph 16 (Pacific) or later"
OPENSSL = "OpenSSL 3 (libssl3 on Debian and Ubuntu, openssl-libs on EL)"

PROBE = textwrap.dedent("""
    import glance_rbd_native
    try:
        glance_rbd_native.RbdWriter
    except ImportError as exc:
        print(type(exc).__name__, exc.name, exc, sep="|")
""")


@pytest.mark.skipif(os.geteuid() != 0, reason="mount namespaces need root")
@pytest.mark.parametrize(
    "removed, install",
    [
        ("librbd.so.1", f"librbd1 from {CEPH}"),
        ("librados.so.2", f"librados2 from {CEPH}"),
        ("libssl.so.3", OPENSSL),
        ("libcrypto.so.3", OPENSSL),
    ],
)
def test_a_missing_library_is_named_with_the_package_to_install(tmp_path, removed, install):
    run = without_libraries.run([removed], [sys.executable, "-c", PROBE], tmp_path)
    assert run.returncode == 0, run.stderr
    kind, name, message = run.stdout.rstrip("\n").split("|")
    assert (kind, name) == ("ImportError", "glance_rbd_native._native")
    loader = f"{removed}: cannot open shared object file: No such file or directory"
    assert message == (
        f"glance-rbd-native cannot load its native module: this host has no {removed}; "
        f"install {install}, and restart the process ({loader})"
    )


def test_a_librbd_older_than_the_calls_used_is_named():
    loader = ImportError(
        "/usr/lib/python3/dist-packages/glance_rbd_native/_native.abi3.so: "
        "undefined symbol: rbd_trash_get"
    )
    assert str(libraries.explained(loader)) == (
        f"glance-rbd-native cannot load its native module: this host's librbd1 is too old; "
        f"install librbd1 from {CEPH}, and restart the process ({loader})"
    )


def test_a_librados_older_than_librbd_is_named_not_librbd():
    """The loader names the file it was loading (librbd) when a function of librados is
    missing: the old one is librados."""
    loader = ImportError("/lib/x86_64-linux-gnu/librbd.so.1: undefined symbol: rados_getaddrs")
    assert str(libraries.explained(loader)).startswith(
        "glance-rbd-native cannot load its native module: this host's librados2 is too old"
    )


def test_a_library_there_but_unusable_is_named_as_such():
    loader = ImportError(
        "/lib/x86_64-linux-gnu/librados.so.2: version `LIBRADOS_14.2.0' not found "
        "(required by /usr/lib/python3/dist-packages/glance_rbd_native/_native.abi3.so)"
    )
    assert str(libraries.explained(loader)) == (
        "glance-rbd-native cannot load its native module: this host's librados.so.2 cannot be "
        f"loaded; install librados2 from {CEPH}, and restart the process ({loader})"
    )


def test_other_failures_are_left_as_they_are():
    assert libraries.explained(ImportError("libfoo.so.1: cannot open shared object file")) is None
    assert libraries.explained(ImportError("undefined symbol: PyFoo_Bar")) is None


def test_the_libraries_named_are_the_ones_the_wheel_links():
    """Every library test_wheel.py finds the extension needs, but glibc's and libgcc's (in every
    manylinux policy), has a package named."""
    from tests.test_wheel import NEEDED

    assert set(libraries.NEEDED) == NEEDED - {"libc.so.6", "libgcc_s.so.1"}
