"""A throwaway MariaDB for glance-api's catalogue.

glance-api serves requests on several threads; on sqlite, two image updates at once fail with
"database is locked" (oslo.db begins deferred transactions, and sqlite refuses the second one's
upgrade to a write lock). Production glance runs on MySQL/MariaDB, and so does this.
"""

from __future__ import annotations

import atexit
import contextlib
import pathlib
import socket
import subprocess
import time

import pymysql


class MariaDB:
    def __init__(self, root: pathlib.Path):
        self.root = pathlib.Path(root).resolve()
        self.socket = self.root / "mysqld.sock"
        self._proc: subprocess.Popen | None = None

    def start(self) -> MariaDB:
        (self.root / "data").mkdir(parents=True, exist_ok=True)
        # No system tables (mariadb-install-db needs the client package), hence no grant
        # tables: any local user may connect, and only through a socket in our directory.
        cmd = [
            "mariadbd",
            "--no-defaults",
            f"--datadir={self.root / 'data'}",
            f"--socket={self.socket}",
            "--skip-networking",
            "--skip-grant-tables",
            "--user=root",
            f"--log-error={self.root / 'mariadb.log'}",
            "--innodb-buffer-pool-size=64M",
            "--innodb-log-file-size=16M",
        ]
        atexit.register(self.stop)  # don't leak the server if the caller dies first
        self._proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while True:
            if self._proc.poll() is not None:
                log = (self.root / "mariadb.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"mariadbd exited with {self._proc.returncode}:\n{log}")
            with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as probe:
                probe.connect(str(self.socket))
                return self
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError("mariadbd not accepting connections after 60s")
            time.sleep(0.1)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def __enter__(self) -> MariaDB:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def create_database(self, name: str) -> str:
        """An empty database; returns its SQLAlchemy URL."""
        with self._connect() as conn, conn.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE `{name}`")
        return f"mysql+pymysql://root@localhost/{name}?unix_socket={self.socket}&charset=utf8"

    def execute(self, url: str, sql: str, *args) -> int:
        """Runs `sql` in the database of `url` (from create_database); the rows it changed."""
        name = url.split("?", 1)[0].rsplit("/", 1)[1]
        with self._connect() as conn, conn.cursor() as cursor:
            cursor.execute(f"USE `{name}`")
            changed = cursor.execute(sql, args)
            conn.commit()
            return changed

    def _connect(self):
        return pymysql.connect(unix_socket=str(self.socket), user="root")
