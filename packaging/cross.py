"""The aarch64 wheel, cross-compiled on an x86_64 host from the same sources.

    python3 packaging/cross.py [--out DIR] [--maturin PATH]      (`make build-arm64`)

writes DIR/glance_rbd_native-<v>-cp39-abi3-linux_aarch64.whl (DIR defaults to target/wheels,
next to the x86_64 wheel) and prints its path.

It builds in a Debian 13 root (debian_root.py, TRIXIE_CROSS, cached): Debian's rustc 1.85
with the aarch64 standard library of the same build (a rustup toolchain's would not match), the
aarch64 cross gcc as linker, and Debian 13's arm64 librbd, librados and libssl to link, whose
symbol versions (GLIBC_2.17 on) keep the wheel's glibc floor where x86_64's is. The maturin is
the one that builds the x86_64 wheel (make passes its VENV's; by hand, the checkout's .venv's
unless --maturin says otherwise), the crates the host's cargo fetched (offline), so both wheels
come from the same tools and the same Cargo.lock. The build's output is cached under the roots'
cache, keyed by the sources, so a second run (or the test layer) takes the wheel as is.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pathlib
import shutil
import sys

# Run as a script, not as packaging.cross: PyPI's `packaging` keeps its name, and the module
# beside it imports as is.
from debian_root import CACHE, TRIXIE_CROSS, DebianRoot

CHECKOUT = pathlib.Path(__file__).resolve().parents[1]

TARGET = "aarch64-unknown-linux-gnu"
# What the wheel is made of: a change to any of it builds anew.
SOURCES = ("Cargo.toml", "Cargo.lock", "pyproject.toml", "README.md", "core", "src", "python")
CARGO_HOME = pathlib.Path(os.environ.get("CARGO_HOME", pathlib.Path.home() / ".cargo"))
ENV = {
    f"CARGO_TARGET_{TARGET.upper().replace('-', '_')}_LINKER": "aarch64-linux-gnu-gcc",
    # Debian's multiarch: the arm64 libraries' pkg-config files, for openssl-sys.
    "PKG_CONFIG_ALLOW_CROSS": "1",
    "PKG_CONFIG_LIBDIR": "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig",
    "CARGO_NET_OFFLINE": "true",
}


def sources_key() -> str:
    """A hash of the files the wheel is built from."""
    digest = hashlib.sha256(TRIXIE_CROSS.key().encode())
    for name in SOURCES:
        path = CHECKOUT / name
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            if file.suffix in (".so", ".pyc"):
                continue  # what a develop build leaves in python/
            digest.update(str(file.relative_to(CHECKOUT)).encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()[:16]


def build(out: pathlib.Path, maturin: pathlib.Path) -> pathlib.Path:
    """The aarch64 wheel in `out`, from the cache when the sources are unchanged, else built
    with `maturin`."""
    cached = CACHE.parent / "wheels" / sources_key()
    wheels = sorted(cached.glob("*-linux_aarch64.whl"))
    if not wheels:
        wheels = [_compile(cached, maturin)]
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*-linux_aarch64.whl"):
        stale.unlink()
    return pathlib.Path(shutil.copy2(wheels[0], out))


def _compile(cached: pathlib.Path, maturin: pathlib.Path) -> pathlib.Path:
    maturin = maturin.resolve()
    if not maturin.exists():
        sys.exit(f"{maturin} is missing: make deps")
    # The crates the host's cargo fetched, from Cargo.lock (offline inside).
    registry = CARGO_HOME / "registry"
    if not registry.is_dir():
        sys.exit(f"no crates in {registry}: build for the host first (make build)")
    target_dir = CACHE.parent / "cross-target"
    target_dir.mkdir(parents=True, exist_ok=True)
    partial = cached.with_name(cached.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    # A virtualenv outside the checkout (make's VENV) is mounted too.
    tools = [] if maturin.is_relative_to(CHECKOUT) else [maturin.parent]
    root = DebianRoot.ensure(
        TRIXIE_CROSS,
        binds=[CHECKOUT, *tools, registry, target_dir, partial],
        read_only=[CHECKOUT, *tools],
    )
    try:
        res = root.run(
            maturin,
            "build",
            "--release",
            "--target",
            TARGET,
            "-q",
            "--manifest-path",
            CHECKOUT / "Cargo.toml",
            "-o",
            partial,
            env={**ENV, "CARGO_HOME": str(CARGO_HOME), "CARGO_TARGET_DIR": str(target_dir)},
            timeout=3600,
            check=False,
        )
    finally:
        root.close()
    wheels = sorted(partial.glob("*-linux_aarch64.whl"))
    if res.returncode or len(wheels) != 1:
        sys.exit(
            f"the aarch64 build failed (exit {res.returncode}):\n"
            f"{res.stdout[-5000:]}{res.stderr[-5000:]}"
        )
    shutil.rmtree(cached, ignore_errors=True)
    partial.rename(cached)
    return cached / wheels[0].name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=pathlib.Path, default=CHECKOUT / "target" / "wheels")
    parser.add_argument(
        "--maturin",
        type=pathlib.Path,
        default=CHECKOUT / ".venv" / "bin" / "maturin",
        help="the maturin to build with (make: $(VENV)/bin/maturin)",
    )
    args = parser.parse_args()
    print(build(args.out, args.maturin))


if __name__ == "__main__":
    main()
