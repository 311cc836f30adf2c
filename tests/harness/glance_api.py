"""A throwaway glance-api on a throwaway Ceph cluster, and a raw HTTP client for it.

glance 33 ships only a WSGI app (`glance.wsgi.api:application`, reading glance-api.conf from
$OS_GLANCE_CONFIG_DIR); gunicorn serves it. No keystone: paste's default flavor gives an
unauthenticated context, and the policy file makes that context admin. The native writer is
turned on the way operators do it, by GLANCE_RBD_NATIVE=1 in the server's environment.
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
import sysconfig
import time

from harness.cluster import free_port

BIN = pathlib.Path(sys.executable).parent
PASTE_INI = pathlib.Path(sysconfig.get_path("data")) / "etc/glance/glance-api-paste.ini"
BACKEND = "ceph1"  # the store name of the multi-store configuration


class GlanceApiError(RuntimeError):
    pass


class GlanceApi:
    """One glance-api process (gunicorn, one gthread worker) storing images in `pool`.

    database: the SQLAlchemy URL of an empty database for glance's catalogue.
    native: start it with GLANCE_RBD_NATIVE=1 (else the stock driver serves uploads).
    multistore: configure the rbd store as backend `ceph1` of `enabled_backends`.
    timeout: glance_store's `rados_connect_timeout`, in seconds.
    """

    def __init__(self, root: pathlib.Path, ceph_conf: pathlib.Path, database: str, *, native: bool,
                 multistore=False, pool="images", timeout: int | None = None, threads=4):
        self.root = pathlib.Path(root).resolve()
        self.ceph_conf = ceph_conf
        self.database = database
        self.native = native
        self.multistore = multistore
        self.pool = pool
        self.timeout = timeout
        self.threads = threads
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.root / "glance-api.log"
        self._proc: subprocess.Popen | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> GlanceApi:
        for d in ("etc", "staging", "tasks"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        self._write_config()
        conf = self.root / "etc/glance-api.conf"
        sync = subprocess.run([BIN / "glance-manage", "--config-file", conf, "db", "sync"],
                              capture_output=True, text=True, timeout=120)
        if sync.returncode:
            raise GlanceApiError(f"glance-manage db sync failed:\n{sync.stderr[-3000:]}")
        env = {**os.environ, "OS_GLANCE_CONFIG_DIR": str(self.root / "etc")}
        env.pop("GLANCE_RBD_NATIVE", None)
        if self.native:
            env["GLANCE_RBD_NATIVE"] = "1"
        # gthread: a sync worker is killed when one long upload outlives --timeout.
        cmd = [BIN / "gunicorn", "--bind", f"127.0.0.1:{self.port}", "--workers", "1",
               "--worker-class", "gthread", "--threads", str(self.threads), "--no-control-socket",
               "--timeout", "600", "--graceful-timeout", "10", "glance.wsgi.api:application"]
        atexit.register(self.stop)  # don't leak the server if the caller dies first
        with open(self.root / "gunicorn.log", "ab") as out:
            # Its own session: the test's Ctrl-C does not reach it, and stop() kills the group.
            self._proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                          stderr=subprocess.STDOUT, start_new_session=True)
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
        # The master's pid is its process group (start_new_session): workers go with it.
        for sig, grace in ((signal.SIGTERM, 15), (signal.SIGKILL, 10)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(grace)
                return
        raise GlanceApiError(f"gunicorn (pid {proc.pid}) survived SIGKILL")

    def __enter__(self) -> GlanceApi:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self._proc.poll() is not None:
                out = (self.root / "gunicorn.log").read_text(errors="replace")[-3000:]
                raise GlanceApiError(f"glance-api exited with {self._proc.returncode}:\n{out}"
                                     f"\n{self.log()[-3000:]}")
            with contextlib.suppress(OSError):
                if self.request("GET", "/versions")[0] in (200, 300):
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"glance-api not answering on {self.url} after {timeout}s")
            time.sleep(0.2)

    def _write_config(self) -> None:
        r = self.root
        rbd = (f"rbd_store_ceph_conf = {self.ceph_conf}\nrbd_store_user = admin\n"
               f"rbd_store_pool = {self.pool}\nrbd_store_chunk_size = 8\n")
        if self.timeout is not None:
            rbd += f"rados_connect_timeout = {self.timeout}\n"
        if self.multistore:
            stores = (f"[DEFAULT]\nenabled_backends = {BACKEND}:rbd\n"
                      f"[glance_store]\ndefault_backend = {BACKEND}\n"
                      f"[{BACKEND}]\n{rbd}store_description = throwaway Ceph cluster\n"
                      # Reserved stores: without a directory of their own they use /var/lib/glance.
                      f"[os_glance_staging_store]\nfilesystem_store_datadir = {r}/staging\n"
                      f"[os_glance_tasks_store]\nfilesystem_store_datadir = {r}/tasks\n")
        else:
            stores = f"[glance_store]\nstores = rbd\ndefault_store = rbd\n{rbd}"
        (r / "etc/policy.yaml").write_text('"context_is_admin": "@"\n')
        (r / "etc/glance-api.conf").write_text(f"""\
[DEFAULT]
log_file = {self.log_path}
use_stderr = false
node_staging_uri = file://{r}/staging
enabled_import_methods = []
{stores}
[database]
connection = {self.database}

[oslo_policy]
policy_file = {r}/etc/policy.yaml

[paste_deploy]
config_file = {PASTE_INI}
""")

    # -- raw HTTP client -------------------------------------------------------------------

    def request(self, method: str, path: str, body=None, headers=None, *, chunked=False,
                timeout=600) -> tuple[int, bytes]:
        # Files go out in 1 MiB sends, not http.client's default of 8 KiB.
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout,
                                          blocksize=1 << 20)
        try:
            try:
                conn.request(method, path, body=body, headers=headers or {},
                             encode_chunked=chunked)
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
        status, out = self.request("POST", "/v2/images", body,
                                   {"Content-Type": "application/json"})
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
        return self.request("PUT", f"/v2/images/{image_id}/file", body, headers,
                            chunked=size is None)

    def image(self, image_id: str) -> dict:
        status, out = self.request("GET", f"/v2/images/{image_id}")
        if status != 200:
            raise GlanceApiError(f"GET image {image_id}: {status} {out[:500]!r}")
        return json.loads(out)

    def delete(self, image_id: str) -> None:
        status, out = self.request("DELETE", f"/v2/images/{image_id}")
        if status not in (204, 404):
            raise GlanceApiError(f"DELETE image {image_id}: {status} {out[:500]!r}")
