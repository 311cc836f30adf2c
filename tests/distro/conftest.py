"""Debian's packaged glance in Debian roots, with the project's Debian package (made by
packaging/deb.py, as `make deb` makes it, from the wheel `make build` made on the host, not
rebuilt) installed by apt, on the session's cluster, the catalogue in a MariaDB of the host.
Each test module names its Debian release in RELEASE; the root (packaging/debian_root.py)
is built once and cached, the package installed anew each run and removed at its end."""

import pathlib

import pytest

from debian_root import DebianRoot, build_deb
from tests.harness import venvs
from tests.harness.debian_glance import DebianGlanceApi
from tests.harness.mariadb import MariaDB

CHECKOUT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def mariadb(tmp_path_factory):
    root = tmp_path_factory.mktemp("distro-mariadb")
    root.chmod(0o755)  # glance-api runs as user glance: it must reach the socket in here
    with MariaDB(root) as db:
        yield db


@pytest.fixture(scope="session")
def deb(tmp_path_factory):
    """The Debian package of the wheel `make build` made."""
    return build_deb(venvs.wheel(), tmp_path_factory.mktemp("deb"))


@pytest.fixture(scope="module")
def debian_root(request, cluster, mariadb, deb):
    """The cached root of the module's RELEASE with the package installed, and the cluster's
    directory, MariaDB's and this checkout mounted at their own paths inside (the cluster's and
    the checkout read-only)."""
    # glance-api runs as user glance: it must reach ceph.conf and the keyring (0644) in the
    # cluster's directory, which the session made private (mkdtemp: 0700).
    cluster.root.chmod(0o755)
    root = DebianRoot.ensure(
        request.module.RELEASE,
        binds=[cluster.root, mariadb.root, CHECKOUT],
        read_only=[cluster.root, CHECKOUT],
    )
    try:
        root.install_deb(deb)
        try:
            yield root
        finally:
            root.remove_deb()
    finally:
        root.close()


@pytest.fixture(scope="module")
def debian_glance(debian_root, cluster, mariadb, tmp_path_factory):
    """Starts Debian's glance-api in a configuration, each with a database of its own; the one
    running before is stopped first: they share the root's /etc/glance and log."""
    running = []

    def stop_all():
        while running:
            running[-1].stop()  # forgotten only once stopped
            running.pop()

    def start(name, *, ceph_conf=None, **config):
        """ceph_conf: another cluster's (the host's by default), bound into the root."""
        stop_all()
        work = tmp_path_factory.mktemp(f"{debian_root.release.suite}-{name}")
        database = mariadb.create_database(work.name.replace("-", "_"))
        api = DebianGlanceApi(
            work, debian_root, ceph_conf or cluster.conf_path, database, pool=cluster.pool, **config
        )
        running.append(api)
        return api.start()

    yield start
    stop_all()
    # Every server runs in its own process group, stopped by pid: none may outlive the tests.
    # (A cluster's daemons may still run in the root: they are its fixture's to stop.)
    assert not debian_root.processes("glance"), "glance-api left running in the Debian root"
