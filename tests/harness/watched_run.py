"""The tests of a run that tests/test_watchdog.py runs in a child pytest, on a throwaway cluster
of that run's own, to see the watchdog (tests/harness/watchdog.py) end it or fail its test.
Named one by one on the child's command line; never collected by the main run."""

import contextlib
import os
import pathlib
import signal

import pytest

from glance_rbd_native import RbdWriter
from tests.harness.data import MiB, data_of, new_name

pytestmark = pytest.mark.cluster


def _ready(cluster) -> None:
    """Tells the parent where the cluster is."""
    pathlib.Path(os.environ["WATCHED_RUN_READY"]).write_text(str(cluster.root))


def _writer(cluster, size=0) -> RbdWriter:
    """One MiB in flight: a write waits for room as soon as the OSD stops answering, in a wait
    that lets signal handlers run. Without a size, the image grows by synchronous resizes,
    which do not."""
    return RbdWriter(
        cluster.pool,
        new_name("watched"),
        size,
        conffile=str(cluster.conf_path),
        user="admin",
        order=20,
        max_in_flight=MiB,
    )


def test_writes_until_the_run_ends(cluster):
    """Writes for ever; says where its cluster is after the first MiB."""
    writer = _writer(cluster)
    writer.write(data_of(MiB))
    _ready(cluster)
    while True:
        writer.write(data_of(MiB))


@pytest.mark.time_limit(300)
def test_the_cluster_answers(cluster):
    """Its own limit, over the run's: the session's cluster boots in its set-up."""
    assert cluster.images() is not None
    _ready(cluster)


def test_writes_to_a_frozen_osd(cluster):
    """The OSD frozen (SIGSTOP), not dead: a write waits for room for ever."""
    _write_while_frozen(cluster, _writer(cluster, size=64 * MiB))


def test_grows_an_image_on_a_frozen_osd(cluster):
    """The same, but the wait is a resize inside librbd: no signal handler runs there."""
    _write_while_frozen(cluster, _writer(cluster))


def _write_while_frozen(cluster, writer: RbdWriter) -> None:
    pid = cluster.pid("osd.0")
    os.kill(pid, signal.SIGSTOP)
    try:
        while True:
            writer.write(data_of(MiB))
    finally:
        os.kill(pid, signal.SIGCONT)
        with contextlib.suppress(Exception):
            writer.abort()


def test_the_run_goes_on(cluster):
    """After a test that ran past its limit, with the OSD back."""
    assert cluster.images() is not None
