"""glance-api servers on the session's throwaway cluster, with a throwaway MariaDB for their
catalogues. The servers are started on first use and shared by the tests."""

import http.server
import threading

import pytest

from tests.harness.glance_api import SECOND_POOL, GlanceApi
from tests.harness.mariadb import MariaDB

# The switch on, the same with the app loaded in uWSGI's master (which also connects before it
# forks), the same with two rbd backends, the switch off: nothing else differs.
SERVERS = {
    "native": dict(native=True),
    "native-preforked": dict(native=True, lazy=False, preconnect=True),
    "native-multistore": dict(native=True, multistore=True),
    "stock": dict(native=False),
}
# In every server's glance-api.conf (stock ignores the section): not the default, so that the
# native servers' logs show the file was read.
MAX_IN_FLIGHT_MIB = 48


@pytest.fixture(scope="session")
def mariadb(tmp_path_factory):
    with MariaDB(tmp_path_factory.mktemp("mariadb")) as db:
        yield db


# The pool over its quota of the quota tests, one test at a time (glance's user has caps on it).
FULL_POOL = "e2e-quota"


@pytest.fixture
def full_pool(cluster):
    """A pool flagged full, over its quota (`Cluster.pool_over_quota`), deleted afterwards."""
    with cluster.pool_over_quota(FULL_POOL) as pool:
        yield pool


@pytest.fixture(scope="session")
def second_pool(cluster):
    """The pool of the second rbd backend of multi-store servers."""
    cluster.create_pool(SECOND_POOL)
    yield SECOND_POOL
    cluster.delete_pool(SECOND_POOL)


class WebSource(http.server.ThreadingHTTPServer):
    """An HTTP server on loopback for web-download imports: GET /<name> answers files[name]."""

    def __init__(self):
        self.files = {}
        source = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                data = source.files.get(self.path.lstrip("/"))
                if data is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.port = self.server_address[1]

    def url(self, name):
        return f"http://127.0.0.1:{self.port}/{name}"


@pytest.fixture(scope="session")
def web_source():
    server = WebSource()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def glance_user(cluster, second_pool):
    """glance's documented cephx user, on the pools the servers store in (both backends', and
    the quota tests' `full_pool`): the conf that authenticates as it."""
    pools = ", ".join(f"profile rbd pool={pool}" for pool in (cluster.pool, second_pool, FULL_POOL))
    return cluster.user("glance", mon="profile rbd", osd=pools, mgr=pools)


@pytest.fixture(scope="session")
def new_glance_api(cluster, mariadb, tmp_path_factory, glance_user, web_source):
    """Makes an unstarted GlanceApi with a directory and a database of its own, as glance's
    documented cephx user (not admin); every server may web-download from `web_source`."""

    def new(name, **config):
        root = tmp_path_factory.mktemp(f"glance-{name}")
        database = mariadb.create_database(root.name.replace("-", "_"))
        return GlanceApi(
            root,
            glance_user,
            database,
            import_port=web_source.port,
            max_in_flight_mib=MAX_IN_FLIGHT_MIB,
            user="glance",
            **config,
        )

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
