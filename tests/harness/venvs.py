"""Virtualenvs of other glance_store and glance releases, as glance hosts have them: made from
Debian's python3 with its site packages (the only way to see its rados and rbd modules), the
release from PyPI, and the project's wheel installed as built, never rebuilt."""

from __future__ import annotations

import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def cargo_version() -> str:
    """The version, as Cargo.toml writes it once for both crates (``[workspace.package]``)."""
    import tomllib

    with open(ROOT / "Cargo.toml", "rb") as stream:
        return tomllib.load(stream)["workspace"]["package"]["version"]


VENVS = ROOT / ".venv-matrix"
SYSTEM_PYTHON = "/usr/bin/python3"
# Every release that operators run, each proved against its own stock driver; see the README.
MATRIX = ("4.1.0", "4.3.3", "4.7.1", "4.9.1", "5.0.0", "5.2.0", "5.7.0")
# The newest glance with the eventlet `glance-api` server, with the glance_store and eventlet
# that openstack/requirements pins for it (stable/2026.1).
EVENTLET_GLANCE = "glance-32.0.0"
EVENTLET_GLANCE_REQUIREMENTS = [
    "glance==32.0.0",
    "glance-store==5.4.0",
    "eventlet==0.40.4",
    "PyMySQL",
    "pyOpenSSL>=24",
]


def _parse(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def requirements(version: str) -> list[str]:
    """What a release needs besides itself to import its rbd driver and run the tests."""
    reqs = [
        f"glance-store=={version}",
        "pytest>=7",
        "hypothesis>=6",
        "numpy",
        # pip's cryptography breaks Debian's pyOpenSSL in a --system-site-packages venv.
        "pyOpenSSL>=24",
    ]
    if _parse(version) < (4, 9):
        reqs.append("oslo.utils<10")  # these import secretutils.md5, gone from oslo.utils 10
    if (4, 4) <= _parse(version) < (5, 7):
        reqs.append("eventlet")  # their rbd driver imports eventlet's tpool
    return reqs


DIST = ROOT / "target" / "dist"


def wheel(platform: str = "x86_64") -> pathlib.Path:
    """The release wheel `make build` made: the one every virtualenv installs; or, for
    "aarch64", the one `make build-arm64` cross-compiled next to it."""
    found = sorted(DIST.glob(f"glance_rbd_native-*-manylinux_*_{platform}.whl"))
    if len(found) != 1:
        make = "make build-arm64" if platform == "aarch64" else "make build"
        raise FileNotFoundError(
            f"expected one {platform} wheel in target/dist (run `{make}`): {found}"
        )
    return found[0]


def sdist() -> pathlib.Path:
    """The sdist `make dist` made next to the wheels."""
    found = sorted(DIST.glob("glance_rbd_native-*.tar.gz"))
    if len(found) != 1:
        raise FileNotFoundError(f"expected one sdist in target/dist (run `make dist`): {found}")
    return found[0]


# A glance host's virtualenv, as operators make one (devstack, openstack-ansible): glance 33
# from PyPI over Debian's python3 and its rados and rbd modules, and the package's one
# dependency; the package itself is pip-installed from an index by the test (tests/test_index.py).
GLANCE_HOST = "glance-33-host"
GLANCE_HOST_REQUIREMENTS = ["glance==33.0.0", "PyMySQL", "pyOpenSSL>=24", "numpy"]


def glance_host() -> pathlib.Path:
    """The python of the glance host's virtualenv, without the package."""
    return ensure(GLANCE_HOST, GLANCE_HOST_REQUIREMENTS, with_wheel=False)


def release(version: str) -> pathlib.Path:
    """The python of the virtualenv of glance_store `version`."""
    return ensure(version, requirements(version))


def eventlet_glance() -> pathlib.Path:
    """The bin directory of the virtualenv of EVENTLET_GLANCE."""
    return ensure(EVENTLET_GLANCE, EVENTLET_GLANCE_REQUIREMENTS).parent


def interpreter(version: str) -> pathlib.Path | None:
    """A CPython `version` ("3.9") other than Debian's, if this machine has one: installed by
    pyenv, or on PATH (pyenv's shims aside: they answer only for the selected versions)."""
    pyenv = pathlib.Path(os.environ.get("PYENV_ROOT", pathlib.Path.home() / ".pyenv"))
    for candidate in sorted(pyenv.glob(f"versions/{version}.*/bin/python{version}")):
        return candidate
    found = shutil.which(f"python{version}")
    if (
        found
        and "/shims/" not in found
        and os.path.realpath(found) != os.path.realpath(SYSTEM_PYTHON)
    ):
        return pathlib.Path(found)
    return None


def ensure(
    name: str,
    reqs: list[str],
    base: str | pathlib.Path = SYSTEM_PYTHON,
    *,
    with_wheel: bool = True,
) -> pathlib.Path:
    """The python of virtualenv `name` with `reqs` and the current wheel in it (unless
    `with_wheel` is false: the caller installs the package its own way); made once, then
    reused while `reqs` stay the same. Made from Debian's python3 with its site packages, or
    from another interpreter `base` without them."""
    venv = VENVS / name
    python = venv / "bin" / "python"
    stamp = venv / ".requirements"
    wanted = "\n".join([str(base), *reqs]) + "\n"
    if not python.exists() or not stamp.exists() or stamp.read_text() != wanted:
        site = ["--system-site-packages"] if str(base) == SYSTEM_PYTHON else []
        run(base, "-m", "venv", "--clear", *site, str(venv))
        run(python, "-m", "pip", "install", "-q", "--upgrade", "pip")
        run(python, "-m", "pip", "install", "-q", *reqs)
        stamp.write_text(wanted)
    if not with_wheel:
        return python
    built = wheel()
    marker = venv / ".wheel"
    digest = hashlib.sha256(built.read_bytes()).hexdigest()
    if not marker.exists() or marker.read_text() != digest:
        run(python, "-m", "pip", "install", "-q", "--force-reinstall", "--no-deps", str(built))
        marker.write_text(digest)
    return python


def run(*argv, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """`argv` as an operator's shell runs it, with no variable of this test run's own; a
    RuntimeError with its output if it fails."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    result = subprocess.run(
        [str(a) for a in argv], env=env, capture_output=True, text=True, timeout=timeout
    )
    if result.returncode:
        raise RuntimeError(
            f"{' '.join(map(str, argv))} failed ({result.returncode}):\n"
            f"{result.stdout[-3000:]}{result.stderr[-3000:]}"
        )
    return result


if __name__ == "__main__":
    for name in sys.argv[1:] or MATRIX:
        print(eventlet_glance() if name == EVENTLET_GLANCE else release(name))
