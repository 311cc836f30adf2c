"""One throwaway Ceph cluster per test session, and the fixtures built on it.

Set GLANCE_RBD_TEST_CLUSTER=DIR to reuse a cluster started with
`python -m tests.harness.cluster up DIR` (`make cluster-up` starts one in .cluster, which the
make targets then pass on).

The contract files run in full are held against their table (tests/harness/contract.py) at the
end of the session: a case lost, gained or skipped where it should run fails the run.
"""

import json
import os
import pathlib
import shutil
import tempfile

import pytest

import emulation
import glance_rbd_native
from tests import stock_versions
from tests.harness import contract
from tests.harness.cluster import Cluster
from tests.harness.stores import Images, glance_api_conf

# A time limit for every test; a dead cluster or a full disk ends the run. A test that measures
# runs alone while `make test` runs two lanes.
pytest_plugins = ("tests.harness.watchdog", "tests.harness.lanes")


def pytest_addoption(parser):
    parser.addoption(
        "--timings-out",
        metavar="FILE",
        help="write the time by layer and by test to FILE (JSON) instead of "
        "reporting them: tests/harness/lanes.py adds up its lanes'",
    )


def pytest_report_header():
    existing = os.environ.get("GLANCE_RBD_TEST_CLUSTER")
    if existing:
        return f"cluster: {existing}, left running (GLANCE_RBD_TEST_CLUSTER)"
    return "cluster: a throwaway one, booted when a test first needs it"


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
def manager(cluster):
    """A Ceph manager active, as on every real cluster (started once, it stays)."""
    cluster.start_mgr()


@pytest.fixture
def conf_file(cluster, tmp_path):
    """A glance-api.conf with one rbd store, [glance_store], as admin (for `glance-rbd-native`)."""
    return glance_api_conf(tmp_path / "glance-api.conf", cluster.pool, "admin", cluster.conf_path)


@pytest.fixture
def well_set(cluster, tmp_path):
    """A glance-api.conf as the docs advise, as admin: a rados_connect_timeout."""
    return glance_api_conf(
        tmp_path / "glance-api.conf",
        cluster.pool,
        "admin",
        cluster.conf_path,
        "rados_connect_timeout = 30\n",
    )


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


# -- the contract guard, on this run ---------------------------------------------------------

_tally = contract.Tally()
_contract_problems: list[str] = []


def pytest_itemcollected(item):
    _tally.collect(item.nodeid)


# Seconds: the emulated root takes some 13 minutes to build on a fresh machine, in the
# background; a phase of a distro test may wait for it.
ROOT_WAIT_LIMIT = 1800


def pytest_collection_modifyitems(items):
    """The Debian roots' layer last, and of it the emulated root last of all: `make test` builds
    the roots missing in the background meanwhile (packaging/debian_root.py), the emulated
    one the slowest, so that on a fresh machine the other layers run while they build. A test
    of that layer may wait for its root in its set-up: it gets a longer limit."""
    # make test-unit selects by marker: a test that uses the cluster must say so.
    unmarked = [
        item.nodeid
        for item in items
        if "cluster" in getattr(item, "fixturenames", ()) and not item.get_closest_marker("cluster")
    ]
    if unmarked:
        raise pytest.UsageError(f"tests that use the cluster, not marked `cluster`: {unmarked}")

    def emulated(item) -> bool:
        release = getattr(getattr(item, "module", None), "RELEASE", None)
        return release is not None and emulation.foreign(release.arch)

    items.sort(key=lambda item: ("distro" in item.keywords, emulated(item)))
    for item in items:
        if "distro" in item.keywords:
            item.add_marker(pytest.mark.time_limit(ROOT_WAIT_LIMIT))


def pytest_deselected(items):
    for item in items:
        _tally.deselect(item.nodeid)


# The layers of docs/testing.md, by marker; what has none of them is the driver on the cluster.
_LAYERS = ("distro", "e2e", "matrix", "load", "wheel", "packaging")
_layer_seconds: dict[str, float] = {}
# Setup, call and teardown of each test: the slowest are listed at the end of a long run.
_test_seconds: dict[str, float] = {}


def pytest_runtest_logreport(report):
    _tally.report(report.nodeid, report.when, report.outcome)
    layer = next((name for name in _LAYERS if name in report.keywords), "cluster")
    _layer_seconds[layer] = _layer_seconds.get(layer, 0.0) + report.duration
    _test_seconds[report.nodeid] = _test_seconds.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session, exitstatus):
    timings_out = session.config.getoption("timings_out")
    if timings_out:
        pathlib.Path(timings_out).write_text(
            json.dumps({"layers": _layer_seconds, "tests": _test_seconds})
        )
    # Cases named one by one (FILE::NAME) are not a whole file.
    if any("::" in arg for arg in session.config.args):
        return
    _contract_problems[:] = _tally.problems(stock_versions.VERSION, root=os.geteuid() == 0)
    if _contract_problems and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    # In a lane, the runner reports them, added up over both lanes.
    if not terminalreporter.config.getoption("timings_out"):
        lanes = terminalreporter.config.pluginmanager.get_plugin("tests.harness.lanes")
        for title, lines in lanes.timing_sections(_layer_seconds, _test_seconds):
            terminalreporter.section(title)
            for line in lines:
                terminalreporter.line(line)
    if _contract_problems:
        terminalreporter.section("contract guard (tests/harness/contract.py)", red=True)
        for line in _contract_problems:
            terminalreporter.line(line, red=True)
