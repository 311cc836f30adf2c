"""The sdist: maturin's, of the files git tracks alone.

    python3 packaging/sdist.py [--out DIR] [--maturin PATH]      (`make dist`)

writes DIR/glance_rbd_native-<v>.tar.gz (DIR defaults to target/dist) and prints its path.

maturin packs what it finds below the project (cargo's list of the crates' files, python/
walked), so an untracked file, a stray wheel or a local note would ship. Here git names the
files: they are copied as they are in the working tree, edits not yet committed included, into
a folder of their own, where maturin finds them alone. A checkout with untracked files that git
does not ignore is refused, naming them: the wheels, which maturin builds from the working tree,
would hold them and the sdist not.
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import subprocess
import sys
import tempfile

CHECKOUT = pathlib.Path(__file__).resolve().parents[1]


def tracked(checkout: pathlib.Path) -> list[pathlib.Path]:
    """The files git tracks, as paths relative to the checkout; a tracked file deleted in the
    working tree is left out, as it would be from the next commit."""
    names = [pathlib.Path(name) for name in _git(checkout, "ls-files", "-z").split("\0") if name]
    return [name for name in names if (checkout / name).is_file()]


class Untracked(Exception):
    """Files git neither tracks nor ignores: add them, or remove them."""


def untracked(checkout: pathlib.Path) -> list[str]:
    listed = _git(checkout, "ls-files", "--others", "--exclude-standard", "-z")
    return [name for name in listed.split("\0") if name]


def _git(checkout: pathlib.Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=checkout, check=True, capture_output=True, text=True
    ).stdout


def build(
    out: pathlib.Path, maturin: pathlib.Path, checkout: pathlib.Path = CHECKOUT
) -> pathlib.Path:
    """The sdist of `checkout`'s tracked files, written into `out`; Untracked if it has files
    git neither tracks nor ignores."""
    strays = untracked(checkout)
    if strays:
        raise Untracked(strays)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sdist-") as tmp:
        tree = pathlib.Path(tmp) / "tree"
        for name in tracked(checkout):
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(checkout / name, tree / name)
        made = pathlib.Path(tmp) / "out"
        subprocess.run(
            [str(maturin), "sdist", "-o", str(made)],
            cwd=tree,
            check=True,
            capture_output=True,
            text=True,
        )
        [sdist] = made.glob("*.tar.gz")
        return pathlib.Path(shutil.copy2(sdist, out / sdist.name))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=CHECKOUT / "target" / "dist")
    parser.add_argument(
        "--maturin", type=pathlib.Path, default=CHECKOUT / ".venv" / "bin" / "maturin"
    )
    args = parser.parse_args()
    try:
        print(build(args.out, args.maturin.resolve()))
    except Untracked as exc:
        sys.exit(
            "files git neither tracks nor ignores would ship in the wheels and not in the "
            f"sdist: add them to git, or remove them: {', '.join(exc.args[0])}"
        )
    except subprocess.CalledProcessError as exc:
        what = "git" if exc.cmd[0] == "git" else "maturin sdist"
        sys.exit(f"{what} failed:\n{exc.stderr}")


if __name__ == "__main__":
    main()
