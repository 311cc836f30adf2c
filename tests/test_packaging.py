"""The release set's sdist (`make dist`: maturin's, of the files git tracks), a build of it on a
host without the Ceph -dev packages, and the one version the package carries (pip builds and
installs the sdist from an index in tests/test_index.py).

Cargo.toml is the only place the version is written: maturin copies it into the metadata, and
``glance_rbd_native.__version__`` reads it from there.
"""

import email.parser
import importlib
import os
import pathlib
import subprocess
import sys
import tarfile
import textwrap

import pytest

import glance_rbd_native
from tests.harness import venvs, without_libraries
from tests.harness.venvs import cargo_version

ROOT = pathlib.Path(__file__).resolve().parents[1]
NAME = "glance_rbd_native"
# What must never ship: build outputs, the tests' and tools' caches, a developer's built module.
UNWANTED = {
    "target",
    "__pycache__",
    ".pytest_cache",
    ".hypothesis",
    ".ruff_cache",
    ".mypy_cache",
    ".venv",
    ".venv-matrix",
    ".cluster",
    ".bench",
    ".git",
}


def metadata_of(text):
    return email.parser.HeaderParser().parsestr(text)


def test_version_is_cargos():
    assert glance_rbd_native.__version__ == cargo_version()


def test_version_does_not_load_the_native_module():
    probe = textwrap.dedent("""
        import sys
        import glance_rbd_native
        print(glance_rbd_native.__version__)
        print("glance_rbd_native._native" in sys.modules)
    """)
    out = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True, timeout=60
    ).stdout.split()
    assert out == [cargo_version(), "False"]


def test_package_reexports_every_public_native_name():
    native = importlib.import_module("glance_rbd_native._native")
    public = [name for name in native.__all__ if not name.startswith("_")]
    assert sorted(glance_rbd_native._NATIVE) == sorted(public)


@pytest.fixture(scope="module")
def sdist():
    """The release set's sdist (`make dist`, packaging/sdist.py)."""
    return venvs.sdist()


@pytest.mark.packaging
def test_sdist_holds_what_a_build_needs(sdist):
    version = cargo_version()
    assert sdist.name == f"{NAME}-{version}.tar.gz"
    top = f"{NAME}-{version}"
    with tarfile.open(sdist) as archive:
        names = {name.removeprefix(f"{top}/") for name in archive.getnames()}
        pkg_info = archive.extractfile(f"{top}/PKG-INFO").read().decode()
    for needed in (
        "Cargo.toml",
        "Cargo.lock",
        "src/lib.rs",
        "pyproject.toml",
        "LICENSE",
        "README.md",
        "glance_rbd_native_switch.pth",
        "python/glance_rbd_native/__init__.py",
        "python/glance_rbd_native/_native.pyi",
        "python/glance_rbd_native/py.typed",
    ):
        assert needed in names
    shipped = {part for name in names for part in pathlib.PurePosixPath(name).parts}
    assert not shipped & UNWANTED
    assert not [name for name in names if name.endswith(".so")]
    assert metadata_of(pkg_info)["Version"] == version
    # Sources alone: what git tracks, and the metadata maturin writes.
    files = {name for name in names if name != top and not name.endswith("/")}
    assert files - tracked() == {"PKG-INFO"}


def tracked():
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, check=True, capture_output=True)
    return set(listed.stdout.decode().splitlines())


@pytest.mark.packaging
def test_untracked_files_are_refused_and_ignored_ones_never_ship(tmp_path):
    """Files git neither tracks nor ignores (a note beside the package's modules, a Rust file
    not added yet) would be in the wheels maturin builds from the working tree: the sdist is
    refused, naming them. Once they are gone, an ignored stray (a wheel in dist/) stays out."""
    import sdist as making

    checkout = tmp_path / "checkout"
    subprocess.run(["git", "clone", "-q", "--local", str(ROOT), str(checkout)], check=True)
    untracked = ["python/glance_rbd_native/notes.txt", "core/src/draft.rs"]
    ignored = "dist/stray.whl"
    for stray in [*untracked, ignored]:
        (checkout / stray).parent.mkdir(parents=True, exist_ok=True)
        (checkout / stray).write_text("not for release\n")
    maturin = pathlib.Path(sys.executable).parent / "maturin"
    with pytest.raises(making.Untracked) as refused:
        making.build(tmp_path / "out", maturin, checkout)
    assert sorted(refused.value.args[0]) == sorted(untracked)
    for stray in untracked:
        (checkout / stray).unlink()
    made = making.build(tmp_path / "out", maturin, checkout)
    with tarfile.open(made) as archive:
        names = {name.split("/", 1)[-1] for name in archive.getnames()}
    assert "python/glance_rbd_native/__init__.py" in names
    assert ignored not in names


@pytest.mark.packaging
@pytest.mark.skipif(os.geteuid() != 0, reason="mount namespaces need root")
def test_a_build_without_the_ceph_dev_packages_says_which_to_install(sdist, tmp_path):
    """pip building the sdist where librbd-dev and librados-dev are not installed (their
    librbd.so and librados.so gone, the runtime libraries there): the build stops before the
    link, naming the packages (core/build.rs)."""
    run = without_libraries.run(
        ["librbd.so", "librados.so"],
        [
            *(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps"),
            *("-w", str(tmp_path / "wheels"), str(sdist)),
        ],
        tmp_path,
        timeout=900,
    )
    assert run.returncode != 0
    said = " ".join((run.stdout + run.stderr).split())
    assert (
        "librbd.so and librados.so cannot be found: install librbd-dev librados-dev (Debian, "
        "Ubuntu) or librbd-devel librados-devel (EL), of Ceph 16 (Pacific) or later" in said
    )
