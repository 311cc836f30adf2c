"""A throwaway glance-api on a throwaway Ceph cluster, and a raw HTTP client for it.

glance 33 ships only a WSGI app (`glance.wsgi.api:application`, reading glance-api.conf from
$OS_GLANCE_CONFIG_DIR); uWSGI serves it as devstack, openstack-ansible and Debian do: a
master, 2 processes of 2 threads, and the app loaded in each worker after the fork
(`lazy-apps`), or, uWSGI's default, once in the master before it. No keystone: paste's default
flavor gives an unauthenticated context, and the policy file makes that context admin. The
native writer is turned on the way operators do it, by `env = GLANCE_RBD_NATIVE=1` in the ini.
"""

from __future__ import annotations

import atexit
import contextlib
import http.client
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

from tests.harness.cluster import free_port
from tests.harness.command import OWN_PID_NAMESPACE
from tests.harness.data import MiB
from tests.harness.waiting import wait_for

BIN = pathlib.Path(sys.executable).parent  # this virtualenv's glance, glance-manage, uwsgi
# The import root (the checkout), on the server's path: it loads tests.harness.* by name.
CHECKOUT = pathlib.Path(__file__).resolve().parents[2]
# As kolla runs glance-api: the host's network and hostname, its own pids and /proc. The
# server's master is pid 1 there; it dies with the unshare process the harness holds.
BACKEND = "ceph1"  # the default store of the multi-store configuration
SECOND_BACKEND = "ceph2"  # its second rbd store, on pool SECOND_POOL, for copy-image
SECOND_POOL = "images2"
# glanceclient sends chunked bodies in 1 MiB chunks; uWSGI's limit of 1 MiB per chunk counts the
# framing too and refuses them ("unable to receive chunked part"). devstack hides this behind
# Apache, which re-chunks; served directly, the limit must be raised.
CHUNKED_INPUT_LIMIT = 16 << 20


class GlanceApiError(RuntimeError):
    pass


class GlanceApi:
    """One glance-api under uWSGI storing images in `pool`.

    database: the SQLAlchemy URL of an empty database for glance's catalogue.
    native: start it with GLANCE_RBD_NATIVE=1 (else the stock driver serves uploads).
    multistore: rbd backends `ceph1` (on `pool`) and `ceph2` (on `second_pool`).
    max_parallel_stores: glance's `[image_import_opts] max_parallel_stores` (glance 33 on): an
        import to several stores writes to this many at once.
    user: the cephx user (without `client.`) that `ceph_conf` authenticates as.
    timeout: glance_store's `rados_connect_timeout`, in seconds.
    lazy: load the app in each worker (`lazy-apps`); else once in the master, before the fork.
    preconnect: (not lazy) the master also opens a native connection to the cluster before the
        fork, which the workers must leave alone.
    import_port: allow web-download from this loopback port.
    server: "uwsgi"; "gunicorn" (`processes` gthread workers of `threads` threads, each
        loading the app); or "eventlet" for glance's own `glance-api` server (glance <= 32),
        which loads the app, forks `processes` workers and runs each on eventlet's hub.
    bin_dir: the bin directory of the virtualenv whose glance serves (default: this one's).
    uwsgi_options: more `key = value` lines for the uWSGI ini.
    pid_namespace: run the server in a pid namespace of its own, as kolla's container does
        (the host's network and hostname, its own pids and /proc).
    image_size_cap: glance's `image_size_cap` (bytes): a larger upload fails with 413 in the
        middle, from glance's reader inside the store's loop.
    environment: more variables for the server's environment (CEPH_ARGS: benchmarks/bench.py's
        latency model).
    """

    def __init__(
        self,
        root: pathlib.Path,
        ceph_conf: pathlib.Path,
        database: str,
        *,
        native: bool,
        multistore=False,
        pool="images",
        second_pool=SECOND_POOL,
        max_parallel_stores: int | None = None,
        timeout: int | None = None,
        lazy=True,
        preconnect=False,
        processes=2,
        threads=2,
        import_port: int | None = None,
        server="uwsgi",
        bin_dir: pathlib.Path = BIN,
        max_in_flight_mib: int | None = None,
        user="admin",
        uwsgi_options=(),
        pid_namespace=False,
        image_size_cap: int | None = None,
        thin_provisioning=False,
        environment: dict[str, str] | None = None,
    ):
        if server not in ("uwsgi", "gunicorn", "eventlet"):
            raise ValueError(f"unknown server {server!r}")
        self.root = pathlib.Path(root).resolve()
        self.ceph_conf = ceph_conf
        self.user = user
        self.database = database
        self.native = native
        self.multistore = multistore
        self.pool = pool
        self.second_pool = second_pool
        self.max_parallel_stores = max_parallel_stores
        self.timeout = timeout
        # [glance_rbd_native] max_in_flight_mib in glance-api.conf; None leaves the section out.
        self.max_in_flight_mib = max_in_flight_mib
        self.lazy = lazy
        self.preconnect = preconnect
        self.processes = processes
        self.threads = threads
        self.import_port = import_port
        self.server = server
        self.bin_dir = pathlib.Path(bin_dir)
        self.uwsgi_options = tuple(uwsgi_options)
        self.pid_namespace = pid_namespace
        self.image_size_cap = image_size_cap
        self.thin_provisioning = thin_provisioning
        self.environment = dict(environment or {})
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.root / "glance-api.log"
        self.conf_file = self.root / "etc/glance-api.conf"
        self._proc: subprocess.Popen | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> GlanceApi:
        for d in ("etc", "staging", "tasks"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        self._write_config()
        sync = subprocess.run(
            [self.bin_dir / "glance-manage", "--config-file", self.conf_file, "db", "sync"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if sync.returncode:
            raise GlanceApiError(f"glance-manage db sync failed:\n{sync.stderr[-3000:]}")
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("GLANCE_RBD_NATIVE", "PYTHONPATH", "VIRTUAL_ENV")
        }
        env.update(self.environment)
        if self.server == "uwsgi":
            cmd = [self.bin_dir / "uwsgi", "--ini", self._write_uwsgi_ini()]
        elif self.server == "gunicorn":
            env["OS_GLANCE_CONFIG_DIR"] = str(self.root / "etc")
            env["PYTHONPATH"] = str(CHECKOUT)
            if self.native:
                env["GLANCE_RBD_NATIVE"] = "1"
            cmd = [
                self.bin_dir / "gunicorn",
                *("--bind", f"127.0.0.1:{self.port}", "--worker-class", "gthread"),
                *("--workers", str(self.processes), "--threads", str(self.threads)),
                *("--timeout", "600", "glance.wsgi.api:application"),
            ]
        else:
            # As a systemd unit or kolla's container environment would set them.
            env["PYTHONPATH"] = str(CHECKOUT)
            if self.native:
                env["GLANCE_RBD_NATIVE"] = "1"
            cmd = [self.bin_dir / "glance-api", "--config-file", self.conf_file]
        if self.pid_namespace:
            cmd = [*OWN_PID_NAMESPACE, *cmd]
        atexit.register(self.stop)  # don't leak the server if the caller dies first
        with open(self.root / "server.log", "ab") as out:
            # Its own session: the test's Ctrl-C does not reach it, and stop() kills the group.
            self._proc = subprocess.Popen(
                cmd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            self._wait_ready(60)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        # The master's pid is its process group (start_new_session): workers go with it. SIGINT,
        # not SIGTERM: uWSGI's graceful reload on TERM hangs with an app loaded in the master.
        for sig, grace in ((signal.SIGINT, 15), (signal.SIGKILL, 10)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(grace)
                return
        raise GlanceApiError(f"{self.server} (pid {proc.pid}) survived SIGKILL")

    def wait(self, timeout: float) -> int | None:
        """The server's exit status once it has exited by itself, or None after `timeout`."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self._proc.wait(timeout)
        return None

    def __enter__(self) -> GlanceApi:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def pid(self) -> int:
        """The uWSGI master's."""
        return self._proc.pid

    def log(self) -> str:
        """glance-api's own log."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def server_log(self) -> str:
        """The server's output: uWSGI's start-up, its workers, one line per request."""
        path = self.root / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self._proc.poll() is not None:
                out = self.server_log()[-3000:]
                raise GlanceApiError(
                    f"glance-api exited with {self._proc.returncode}:\n{out}\n{self.log()[-3000:]}"
                )
            with contextlib.suppress(OSError):
                if self.request("GET", "/versions")[0] in (200, 300):
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"glance-api not answering on {self.url} after {timeout}s")
            time.sleep(0.2)

    def _write_uwsgi_ini(self) -> pathlib.Path:
        ini = self.root / "etc/glance-api-uwsgi.ini"
        lines = [
            "[uwsgi]",
            f"http-socket = 127.0.0.1:{self.port}",
            "master = true",
            f"processes = {self.processes}",
            f"threads = {self.threads}",
            "enable-threads = true",
            "die-on-term = true",
            "buffer-size = 65535",
            # uWSGI closes each connection after its response: tell clients not to reuse it
            # (devstack does the same), or a pooled one fails with "closed without response".
            "add-header = Connection: close",
            "http-chunked-input = true",
            "http-auto-chunked = true",
            "http-raw-body = true",
            f"chunked-input-limit = {CHUNKED_INPUT_LIMIT}",
            "socket-timeout = 600",
            f"lazy-apps = {str(self.lazy).lower()}",
            "need-app = true",
            "wsgi = glance.wsgi.api:application",
            f"env = OS_GLANCE_CONFIG_DIR={self.root / 'etc'}",
            f"pythonpath = {CHECKOUT}",
        ]
        if self.native:
            lines.append("env = GLANCE_RBD_NATIVE=1")
        lines += self.uwsgi_options
        if self.preconnect:
            if self.lazy:
                raise ValueError("preconnect needs the app loaded in the master (lazy=False)")
            # Imported in the master, before the app and the fork.
            lines += [
                "import = tests.harness.preconnect",
                f"env = GRN_PRECONNECT_CONF={self.ceph_conf}",
                f"env = GRN_PRECONNECT_USER={self.user}",
                f"env = GRN_PRECONNECT_POOL={self.pool}",
            ]
        ini.write_text("\n".join(lines) + "\n")
        return ini

    def _write_config(self) -> None:
        r = self.root

        def rbd(pool):
            text = (
                f"rbd_store_ceph_conf = {self.ceph_conf}\nrbd_store_user = {self.user}\n"
                f"rbd_store_pool = {pool}\nrbd_store_chunk_size = 8\n"
            )
            if self.timeout is not None:
                text += f"rados_connect_timeout = {self.timeout}\n"
            if self.thin_provisioning:
                text += "rbd_thin_provisioning = True\n"
            return text

        if self.multistore:
            stores = (
                f"[DEFAULT]\nenabled_backends = {BACKEND}:rbd, {SECOND_BACKEND}:rbd\n"
                f"[glance_store]\ndefault_backend = {BACKEND}\n"
                f"[{BACKEND}]\n{rbd(self.pool)}store_description = throwaway Ceph cluster\n"
                f"[{SECOND_BACKEND}]\n{rbd(self.second_pool)}"
                "store_description = throwaway Ceph cluster, second pool\n"
                # Reserved stores: without a directory of their own they use /var/lib/glance.
                f"[os_glance_staging_store]\nfilesystem_store_datadir = {r}/staging\n"
                f"[os_glance_tasks_store]\nfilesystem_store_datadir = {r}/tasks\n"
            )
        else:
            stores = f"[glance_store]\nstores = rbd\ndefault_store = rbd\n{rbd(self.pool)}"
        imports = "[import_filtering_opts]\n"
        if self.max_parallel_stores is not None:
            imports = (
                f"[image_import_opts]\nmax_parallel_stores = {self.max_parallel_stores}\n" + imports
            )
        if self.import_port:
            imports += f"allowed_hosts = [127.0.0.1]\nallowed_ports = [{self.import_port}]\n"
        native = ""
        if self.max_in_flight_mib is not None:
            native = f"[glance_rbd_native]\nmax_in_flight_mib = {self.max_in_flight_mib}\n"
        (r / "etc/policy.yaml").write_text('"context_is_admin": "@"\n')
        paste_ini = self.bin_dir.parent / "etc/glance/glance-api-paste.ini"
        paste = paste_ini.read_text().replace(
            "glance.api.middleware.context:UnauthenticatedContextMiddleware.factory",
            "tests.harness.glance_context:ProjectContextMiddleware.factory",
        )
        (r / "etc/glance-api-paste.ini").write_text(paste)
        self.conf_file.write_text(f"""\
[DEFAULT]
log_file = {self.log_path}
use_stderr = false
bind_host = 127.0.0.1
bind_port = {self.port}
workers = {self.processes}
node_staging_uri = file://{r}/staging
enabled_import_methods = [glance-direct, web-download, copy-image]
{f"image_size_cap = {self.image_size_cap}" if self.image_size_cap else ""}
{stores}
{imports}
{native}
[database]
connection = {self.database}

[oslo_policy]
policy_file = {r}/etc/policy.yaml

[paste_deploy]
config_file = {r}/etc/glance-api-paste.ini
""")

    # -- raw HTTP client -------------------------------------------------------------------

    def request(
        self, method: str, path: str, body=None, headers=None, *, chunked=False, timeout=600
    ) -> tuple[int, bytes]:
        # Files go out in 1 MiB sends, not http.client's default of 8 KiB.
        conn = http.client.HTTPConnection(
            "127.0.0.1", self.port, timeout=timeout, blocksize=1 << 20
        )
        try:
            try:
                conn.request(method, path, body=body, headers=headers or {}, encode_chunked=chunked)
            except (BrokenPipeError, ConnectionResetError):
                # The server may answer before it has read the body (413 when the store is
                # full) and close the connection: its answer is still there to read.
                pass
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def create_image(self, name: str) -> str:
        body = json.dumps({"name": name, "disk_format": "raw", "container_format": "bare"})
        status, out = self.request("POST", "/v2/images", body, {"Content-Type": "application/json"})
        if status != 201:
            raise GlanceApiError(f"POST /v2/images: {status} {out[:500]!r}")
        return json.loads(out)["id"]

    def upload(self, image_id: str, body, *, size: int | None = None) -> tuple[int, bytes]:
        """PUTs the image data: with Content-Length when `size` is given, else chunked."""
        headers = {"Content-Type": "application/octet-stream"}
        if size is not None:
            headers["Content-Length"] = str(size)
        if self.multistore:
            headers["X-Image-Meta-Store"] = BACKEND
        return self.request(
            "PUT", f"/v2/images/{image_id}/file", body, headers, chunked=size is None
        )

    def stage(self, image_id: str, data: bytes) -> None:
        """Sends the data to the staging area (the first half of a glance-direct import)."""
        status, out = self.request(
            "PUT",
            f"/v2/images/{image_id}/stage",
            data,
            {"Content-Type": "application/octet-stream", "Content-Length": str(len(data))},
        )
        if status != 204:
            raise GlanceApiError(f"PUT stage {image_id}: {status} {out[:500]!r}")

    def import_image(
        self, image_id: str, method: str, *, stores=None, uri=None, all_stores_must_succeed=None
    ) -> None:
        """Starts an interoperable import; glance runs it in a task thread."""
        body = {"method": {"name": method, **({"uri": uri} if uri else {})}}
        if stores:
            body["stores"] = list(stores)
        if all_stores_must_succeed is not None:
            body["all_stores_must_succeed"] = all_stores_must_succeed
        status, out = self.request(
            "POST",
            f"/v2/images/{image_id}/import",
            json.dumps(body),
            {"Content-Type": "application/json"},
        )
        if status != 202:
            raise GlanceApiError(f"POST import {image_id} ({method}): {status} {out[:500]!r}")

    def tasks(self, image_id: str) -> list[dict]:
        """The import tasks of an image, newest first."""
        status, out = self.request("GET", f"/v2/images/{image_id}/tasks")
        if status != 200:
            raise GlanceApiError(f"GET tasks {image_id}: {status} {out[:500]!r}")
        return json.loads(out)["tasks"]

    def image(self, image_id: str) -> dict:
        status, out = self.request("GET", f"/v2/images/{image_id}")
        if status != 200:
            raise GlanceApiError(f"GET image {image_id}: {status} {out[:500]!r}")
        return json.loads(out)

    def delete(self, image_id: str) -> None:
        status, out = self.request("DELETE", f"/v2/images/{image_id}")
        if status not in (204, 404):
            raise GlanceApiError(f"DELETE image {image_id}: {status} {out[:500]!r}")


def held_body(data, release):
    """A request body: the first half of `data`, then nothing until `release` is set."""
    half = len(data) // 2
    for pos in range(0, half, MiB):
        yield data[pos : pos + MiB]
    release.wait(120)
    for pos in range(half, len(data), MiB):
        yield data[pos : pos + MiB]


def writer_of(ioctx, image_id, timeout=60):
    """The pid of the worker writing `image_id`, from its mark (the pid in its own namespace),
    as soon as it is there."""
    from glance_rbd_native import leftovers

    mark = wait_for(lambda: leftovers.marks(ioctx).get(image_id), timeout, every=0.05)
    if not mark:
        raise AssertionError(f"no upload of {image_id} in flight after {timeout} s")
    return mark.get("pid")
