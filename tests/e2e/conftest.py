"""glance-api servers on the session's throwaway cluster, with a throwaway MariaDB for their
catalogues. The servers are started on first use and shared by the tests."""

import pytest

from harness.glance_api import GlanceApi
from harness.mariadb import MariaDB

# The switch on, the same with enabled_backends, the switch off: nothing else differs.
SERVERS = {
    "native": dict(native=True),
    "native-multistore": dict(native=True, multistore=True),
    "stock": dict(native=False),
}


@pytest.fixture(scope="session")
def mariadb(tmp_path_factory):
    with MariaDB(tmp_path_factory.mktemp("mariadb")) as db:
        yield db


@pytest.fixture(scope="session")
def new_glance_api(cluster, mariadb, tmp_path_factory):
    """Makes an unstarted GlanceApi with a directory and a database of its own."""
    def new(name, **config):
        root = tmp_path_factory.mktemp(f"glance-{name}")
        database = mariadb.create_database(root.name.replace("-", "_"))
        return GlanceApi(root, cluster.conf_path, database, **config)
    return new


@pytest.fixture(scope="session")
def glance_servers(new_glance_api):
    """Returns the running server of a SERVERS configuration; stops them all at the end."""
    started = {}

    def server(name):
        if name not in started:
            started[name] = new_glance_api(name, **SERVERS[name]).start()
        return started[name]

    yield server
    for api in started.values():
        api.stop()


@pytest.fixture(params=sorted(SERVERS))
def api(request, glance_servers):
    return glance_servers(request.param)


@pytest.fixture
def native_api(glance_servers):
    return glance_servers("native")


@pytest.fixture
def stock_api(glance_servers):
    return glance_servers("stock")
