"""A package index on loopback, as glance hosts install from one: pypiserver (from PyPI) serving
a folder, the release set uploaded into it with twine, and nothing passed on to PyPI (no
fallback): what pip finds there is what was uploaded."""

from __future__ import annotations

import contextlib
import pathlib
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator

from tests.harness import venvs
from tests.harness.waiting import wait_for

BIN = pathlib.Path(sys.executable).parent


class Index:
    def __init__(self, url: str, folder: pathlib.Path):
        self.url = url
        self.folder = folder

    @property
    def simple(self) -> str:
        """What pip's --index-url takes."""
        return f"{self.url}/simple/"

    def upload(self, files: list[pathlib.Path]) -> None:
        """As a release manager does: twine, over HTTP (the server takes any credentials)."""
        subprocess.run(
            [
                *(BIN / "twine", "upload", "--non-interactive", "--disable-progress-bar"),
                *("--repository-url", f"{self.url}/", "-u", "release", "-p", "unused"),
                *files,
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )

    def names(self) -> list[str]:
        return sorted(p.name for p in self.folder.iterdir())


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def answering(url: str) -> bool:
    """Whether `url` is an index that answers (not another server that took the port first)."""
    try:
        with urllib.request.urlopen(f"{url}/simple/", timeout=5) as page:
            return page.status == 200 and b"Simple Index" in page.read()
    except OSError:
        return False


@contextlib.contextmanager
def serving(folder: pathlib.Path, log: pathlib.Path) -> Iterator[Index]:
    """An empty index on loopback over `folder`, its server's output in `log`; stopped after."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [
                *(BIN / "pypi-server", "run", "--host", "127.0.0.1", "--port", str(port)),
                *("--disable-fallback", "--authenticate", ".", "--passwords", ".", str(folder)),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: answering(url) or server.poll() is not None, 30, "pypi-server to answer")
        assert server.poll() is None, log.read_text()
        yield Index(url, folder)
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def release_set() -> list[pathlib.Path]:
    """What `make dist` made: both wheels and the sdist."""
    return [venvs.wheel("x86_64"), venvs.wheel("aarch64"), venvs.sdist()]
