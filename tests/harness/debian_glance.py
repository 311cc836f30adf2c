"""Debian's packaged glance-api in a Debian root (Debian 12: glance 25.1.0, glance_store 4.1.0,
Python 3.11; Debian 13: glance 30.0.0, glance_store 4.9.1, Python 3.13), on the host's
throwaway cluster, started both ways Debian ships it.

Started as Debian's systemd unit does: `/etc/init.d/glance-api systemd-start` as user glance, in
/var/lib/glance, with the unit's runtime, lock and cache directories made for it. The init script
sources /etc/default/openstack and /etc/default/glance-api (shell files: only what they export
reaches the server) and execs the server:

- "eventlet", the default of Debian 12 and 13: `/usr/bin/glance-api
  --config-file=/etc/glance/glance-api.conf --log-file=/var/log/glance/glance-api.log`. Debian
  commented out the script's uWSGI lines ("Glance appears broken with uwsgi"), in both
  releases.
- "uwsgi": the script's uWSGI mode, turned on by the three variables Debian commented out
  (UWSGI_PORT, UWSGI_INI_PATH, UWSGI_INI_APP), given in the unit's environment instead (what a
  systemd drop-in `Environment=` does; the script tests them before it sources
  /etc/default/glance-api, so they cannot go there). It execs
  `uwsgi_python3XX --http-socket ADDRESS:PORT --ini /etc/glance/glance-api-uwsgi.ini`, Debian's
  ini as shipped (lazy-apps, uid glance, logging to /var/log/glance/glance-api.log; 8 processes
  of 32 threads in Debian 12, of 1 thread in Debian 13). The address and port are read from
  glance-api.conf's bind_host and bind_port by openstack-pkg-tools' helpers (the script's
  UWSGI_BIND_CONFIG_*), so it listens on loopback, on the port the eventlet server would use.
  One uWSGI option is added, through /etc/default/glance-api: a larger chunked-input-limit
  (CHUNKED_INPUT_LIMIT).

In both, the switch is `export GLANCE_RBD_NATIVE=1` in /etc/default/glance-api: uWSGI's workers
inherit the master's environment. No keystone: paste's default pipeline gives an
unauthenticated context, and the policy file makes it admin.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pathlib
import re
import shutil
import signal
import time

from debian_root import DebianRoot
from tests.harness.glance_api import GlanceApi, GlanceApiError

CONF = "/etc/glance/glance-api.conf"
LOG = "/var/log/glance/glance-api.log"
UWSGI_INI = "/etc/glance/glance-api-uwsgi.ini"
# The init script's uWSGI mode: UWSGI_PORT (the port is replaced by bind_port),
# UWSGI_INI_PATH and UWSGI_INI_APP are the lines Debian ships commented out; with
# UWSGI_BIND_CONFIG_* the script reads the address and port from glance-api.conf instead of
# binding every address.
UWSGI_MODE = {
    "UWSGI_INI_PATH": UWSGI_INI,
    "UWSGI_INI_APP": "/usr/bin/glance-wsgi-api",
    "UWSGI_BIND_CONFIG_FILE": CONF,
    "UWSGI_BIND_CONFIG_SECTION": "DEFAULT",
    "UWSGI_BIND_CONFIG_IP_DIRECTIVE": "bind_host",
    "UWSGI_BIND_CONFIG_PORT_DIRECTIVE": "bind_port",
}
# glanceclient sends chunked bodies in 1 MiB chunks, and uWSGI refuses a chunk over its
# chunked-input-limit, 1 MiB framing included ("unable to receive chunked part"), whatever the
# driver. Debian's ini leaves the default: it is raised in /etc/default/glance-api, where uWSGI
# reads UWSGI_<OPTION> variables as options.
CHUNKED_INPUT_LIMIT = 16 << 20


class DebianGlanceApi(GlanceApi):
    """Debian's glance-api in `root` storing images in `pool` of the cluster of `ceph_conf`
    (mounted into the root at the same path).

    work: a host directory for the server's own output.
    server: "eventlet" (the init script's default) or "uwsgi" (its uWSGI mode).
    native: `export GLANCE_RBD_NATIVE=1` in /etc/default/glance-api (the native writer is then
        expected to serve uploads).
    environment: the text of /etc/default/glance-api instead of the one `native` makes.
    user: the cephx user glance connects as, whose keyring `ceph_conf` names.
    """

    def __init__(
        self,
        work: pathlib.Path,
        root: DebianRoot,
        ceph_conf: pathlib.Path,
        database: str,
        *,
        native: bool,
        server="eventlet",
        pool="images",
        environment: str | None = None,
        user="admin",
    ):
        super().__init__(
            work, ceph_conf, database, native=native, pool=pool, server=server, user=user
        )
        self.debian = root
        self.environment = environment
        self.log_path = root.file(LOG)

    def start(self) -> DebianGlanceApi:
        self.root.mkdir(parents=True, exist_ok=True)
        self._write_config()
        self.debian.run(
            "glance-manage", "--config-file", CONF, "db", "sync", user="glance", timeout=300
        )
        # What systemd makes for the unit: RuntimeDirectory=glance lock/glance,
        # CacheDirectory=glance (and the log, emptied so that it is this server's alone).
        self.debian.run(
            "install",
            "-d",
            "-o",
            "glance",
            "-g",
            "glance",
            "/run/glance",
            "/run/lock/glance",
            "/var/cache/glance",
        )
        if self.log_path.exists():
            self.log_path.write_text("")
        env = dict(UWSGI_MODE, UWSGI_PORT=str(self.port)) if self.server == "uwsgi" else {}
        atexit.register(self.stop)  # don't leak the server if the caller dies first
        with open(self.root / "server.log", "ab") as out:
            self._proc = self.debian.popen(
                ["/etc/init.d/glance-api", "systemd-start"],
                user="glance",
                env=env,
                cwd="/var/lib/glance",
                stdout=out,
            )
        try:
            self._wait_ready(120)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """SIGINT to the server's process group (uWSGI's master and workers, or glance-api and
        its forks), then SIGKILL; returns once the group is gone. The server is forgotten only
        then, so a stop interrupted by Ctrl-C is finished by the next one (or at exit)."""
        proc = self._proc
        if proc is None:
            return
        for sig, grace in ((signal.SIGINT, 15), (signal.SIGKILL, 10)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            deadline = time.monotonic() + grace
            while proc.poll() is None or _group_alive(proc.pid):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            else:
                break
        else:
            raise GlanceApiError(f"{self.server} (process group {proc.pid}) survived SIGKILL")
        self._proc = None
        if self.log_path.exists():
            # The root's log is the next server's: keep this one's with its other output.
            shutil.copyfile(self.log_path, self.root / "glance-api.log")

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        super()._wait_ready(timeout)
        if self.server != "uwsgi":
            return
        # lazy-apps: each worker loads glance after the fork; wait for all of them, so that
        # the tests do not share the two cores with their start-up.
        while (
            len(re.findall(r"WSGI app 0 \(mountpoint=''\) ready", self.log()))
            < self.uwsgi_processes()
        ):
            if time.monotonic() > deadline:
                raise TimeoutError(f"uWSGI workers not all loaded after {timeout}s")
            time.sleep(0.2)

    def uwsgi_processes(self) -> int:
        """The worker count of Debian's ini."""
        text = self.debian.file(UWSGI_INI).read_text()
        return int(re.search(r"^processes\s*=\s*(\d+)", text, re.M).group(1))

    def default_file(self) -> str:
        """/etc/default/glance-api as written for this server."""
        if self.environment is not None:
            return self.environment
        lines = ["# Sourced by /etc/init.d/glance-api: only exported variables reach the server."]
        if self.native:
            lines.append("export GLANCE_RBD_NATIVE=1")
        if self.server == "uwsgi":
            lines.append(f"export UWSGI_CHUNKED_INPUT_LIMIT={CHUNKED_INPUT_LIMIT}")
        return "\n".join(lines) + "\n"

    def _write_config(self) -> None:
        debian = self.debian
        debian.write("/etc/default/glance-api", self.default_file())
        debian.write(
            "/etc/glance/policy.yaml", '"context_is_admin": "@"\n', group="glance", mode=0o640
        )
        # As Debian installs it: root:glance, 0640.
        debian.write(
            CONF,
            f"""\
[DEFAULT]
bind_host = 127.0.0.1
bind_port = {self.port}

[glance_store]
stores = rbd
default_store = rbd
rbd_store_ceph_conf = {self.ceph_conf}
rbd_store_user = {self.user}
rbd_store_pool = {self.pool}
rbd_store_chunk_size = 8

[database]
connection = {self.database}

[oslo_concurrency]
lock_path = /var/lock/glance

[oslo_policy]
policy_file = /etc/glance/policy.yaml
""",
            group="glance",
            mode=0o640,
        )


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
