"""One throwaway Ceph cluster per test session, and the fixtures built on it.

Set GLANCE_RBD_TEST_CLUSTER=DIR to reuse a cluster started with `tests/harness/cluster.py up DIR`.
"""

import os
import pathlib
import shutil
import tempfile

import pytest

import glance_rbd_native
from harness.cluster import Cluster
from support import Images


@pytest.fixture(scope="session")
def cluster():
    existing = os.environ.get("GLANCE_RBD_TEST_CLUSTER")
    if existing:
        yield Cluster.attach(pathlib.Path(existing))
        return
    # A short path: daemons put unix sockets under it, limited to 107 bytes.
    root = pathlib.Path(tempfile.mkdtemp(prefix="grn-", dir="/tmp"))
    try:
        with Cluster(root) as booted:
            yield booted
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def images(cluster):
    access = Images(cluster)
    yield access
    access.close()


@pytest.fixture
def clean_pool(images):
    """Fails the test when it leaves an image behind; removes what it left."""
    before = images.names()
    yield images
    left = images.names() - before
    for name in left:
        images.remove(name)
    assert not left, f"images left in the pool: {sorted(left)}"


@pytest.fixture
def native():
    """The rbd driver patched for the duration of a test."""
    assert glance_rbd_native.patch()
    yield
    glance_rbd_native.unpatch()


@pytest.fixture
def stock():
    glance_rbd_native.unpatch()
    yield


@pytest.fixture(autouse=True)
def _stock_by_default():
    # Tests start and end with the stock driver in place, whatever they did.
    glance_rbd_native.unpatch()
    yield
    glance_rbd_native.unpatch()
