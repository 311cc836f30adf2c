"""The Debian package of the release wheel, for glance run from Debian's or Ubuntu's packages.

    python3 packaging/deb.py [--out DIR] target/dist/glance_rbd_native-<v>-cp39-abi3-*.whl

writes DIR/glance-rbd-native_<v>_<arch>.deb (DIR defaults to target/debian) and prints its path.
The wheel's files go unchanged into /usr/lib/python3/dist-packages, where every python3 of the
release finds them (the abi3 extension loads into each), the start-up switch .pth with them; its
console script becomes /usr/bin/glance-rbd-native. The maintainer scripts are the ones dh_python3
writes: byte-compile after install, remove the bytecode before removal, so that `apt remove`
leaves no file behind. Nothing is compiled here and no debhelper is needed: stdlib, dpkg and
dpkg-deb. SOURCE_DATE_EPOCH, when set, fixes every timestamp, so the same wheel gives the same
bytes.
"""

from __future__ import annotations

import argparse
import configparser
import email.parser
import gzip
import hashlib
import io
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from datetime import datetime, timezone
from email.utils import format_datetime

PACKAGE = "glance-rbd-native"
SITE = "usr/lib/python3/dist-packages"
DOC = f"usr/share/doc/{PACKAGE}"
# The machine of the wheel's platform tag (the release set's manylinux_2_34_<machine>, or a
# local build's plain linux_<machine>) for each Debian architecture it is built for.
MACHINES = {"amd64": "x86_64", "arm64": "aarch64"}
PLATFORM = re.compile(r"(?:many)?linux(?:_\d+_\d+)?_(?P<machine>x86_64|aarch64)")
# What the extension links (objdump -p: NEEDED), and the Python side. Against dpkg-shlibdeps on
# the Debian 12 build host: the same libc6, libgcc-s1 and libssl3 bounds (GLIBC_2.34, GCC_4.2.0
# and OPENSSL_3.0.0 are the newest symbol versions used), but librados2 and librbd1 from 16:
# the librbd and librados calls used are those of Ceph 16 (Pacific), where shlibdeps would ask
# for the build host's own 16.2.15 (librados2 has no symbols file). Debian 13's and sid's
# libssl3t64 provide libssl3. glance_store from 4.1, the oldest release supported (compat.py);
# numpy unversioned: every release with librbd1 16 has the 1.21 the wheel asks for, or newer.
DEPENDS = (
    "python3 (>= 3.9), python3-glance-store (>= 4.1), python3-numpy, "
    "librbd1 (>= 16), librados2 (>= 16), libssl3 (>= 3.0.0), libgcc-s1 (>= 4.2), "
    "libc6 (>= 2.34)"
)
# Below the synopsis, which is the wheel's summary.
DESCRIPTION = """\
 Replaces the Store.add, get and get_size of glance_store's rbd driver with
 ones built on a Rust extension: asynchronous librbd writes and reads kept in
 flight, md5 and the multihash computed on threads of their own, the GIL never
 held while waiting, and one memory bound shared by the transfers of a process.
 .
 Installing it changes nothing: glance-api uses it once GLANCE_RBD_NATIVE=1 is
 exported in its environment (/etc/default/glance-api) and it is restarted.
 The glance-rbd-native command lists uploads in flight and removes the partial
 images of killed ones."""
# Who answers for the package: the project's maintainers, or DEBFULLNAME and DEBEMAIL (as dch
# reads them) for a site's own build.
MAINTAINER = ("glance-rbd-native maintainers", "maintainers@users.noreply.a-seed-37a94dc3.example")
# dh_python3's snippets, with the package qualified by its architecture as dh_python3 does for
# an architecture-dependent package.
POSTINST = """\
#!/bin/sh
set -e

if command -v py3compile >/dev/null 2>&1; then
	py3compile -p {package}
fi
if command -v pypy3compile >/dev/null 2>&1; then
	pypy3compile -p {package} || true
fi
"""
PRERM = """\
#!/bin/sh
set -e

if command -v py3clean >/dev/null 2>&1; then
	py3clean -p {package}
else
	dpkg -L {package} | sed -En -e '/^(.*)\\/(.+)\\.py$/s,,rm "\\1/__pycache__/\\2".*,e'
	find /usr/lib/python3/dist-packages/ -type d -name __pycache__ -empty -print0 | \\
		xargs --null --no-run-if-empty rmdir
fi
"""
COPYRIGHT = """\
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: glance-rbd-native
Source: {homepage}

Files: *
Copyright: glance-rbd-native contributors
License: Apache-2.0
Comment: The extension module links these Rust crates in statically; their names,
 versions and licences are listed in
 /{site}/{dist_info}/sboms/glance-rbd-native.cyclonedx.json.

License: Apache-2.0
 Licensed under the Apache License, Version 2.0 (the "License"); you may not
 use this file except in compliance with the License.
 .
 On Debian systems, the full text of the Apache License, Version 2.0 can be
 found in /usr/share/common-licenses/Apache-2.0.
"""
CHANGELOG = """\
{package} ({version}) unstable; urgency=medium

  * Built from the wheel {wheel}.
  * The changes of each release: {homepage}/blob/main/CHANGELOG.md

 -- {maintainer}  {date}
"""


def build(wheel: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    """Writes the .deb of `wheel` into `out` and returns its path."""
    # The wheel's platform names the package's architecture; nothing is compiled here, so
    # either is packaged on any host.
    platform = wheel.name.removesuffix(".whl").rsplit("-", 1)[-1]
    matched = PLATFORM.fullmatch(platform)
    if matched is None:
        sys.exit(f"{wheel.name} is for {platform}: packaged are {', '.join(MACHINES.values())}")
    arch = {machine: arch for arch, machine in MACHINES.items()}[matched["machine"]]
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH") or time.time())
    maintainer = (
        f"{os.environ.get('DEBFULLNAME') or MAINTAINER[0]} "
        f"<{os.environ.get('DEBEMAIL') or MAINTAINER[1]}>"
    )
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp) / "root"
        with zipfile.ZipFile(wheel) as archive:
            dist_info, metadata, scripts = _unpack(archive, root / SITE)
        version = metadata["Version"]
        homepage = next(
            url.split(", ", 1)[1]
            for url in metadata.get_all("Project-URL")
            if url.startswith("Homepage, ")
        )
        for name, entry in scripts.items():
            module, _, call = entry.partition(":")
            _write(
                root / "usr/bin" / name,
                0o755,
                f"#!/usr/bin/python3\nimport sys\n\nfrom {module} import {call.split('.')[0]}"
                f"\n\nsys.exit({call}())\n",
            )
        _write(
            root / DOC / "copyright",
            0o644,
            COPYRIGHT.format(homepage=homepage, site=SITE, dist_info=dist_info),
        )
        date = format_datetime(datetime.fromtimestamp(epoch, timezone.utc))
        changelog = CHANGELOG.format(
            package=PACKAGE,
            version=version,
            wheel=wheel.name,
            homepage=homepage,
            maintainer=maintainer,
            date=date,
        )
        _write(
            root / DOC / "changelog.Debian.gz",
            0o644,
            gzip.compress(changelog.encode(), compresslevel=9, mtime=0),
        )

        qualified = f"{PACKAGE}:{arch}"
        _write(root / "DEBIAN/postinst", 0o755, POSTINST.format(package=qualified))
        _write(root / "DEBIAN/prerm", 0o755, PRERM.format(package=qualified))
        files = sorted(p for p in root.rglob("*") if p.is_file() and "DEBIAN" not in p.parts)
        _write(
            root / "DEBIAN/md5sums",
            0o644,
            "".join(
                f"{hashlib.md5(p.read_bytes()).hexdigest()}  {p.relative_to(root)}\n" for p in files
            ),
        )
        _write(
            root / "DEBIAN/control",
            0o644,
            "".join(
                f"{field}: {value}\n"
                for field, value in (
                    ("Package", PACKAGE),
                    ("Version", version),
                    ("Architecture", arch),
                    ("Maintainer", maintainer),
                    ("Installed-Size", _installed_size(root)),
                    ("Depends", DEPENDS),
                    ("Section", "python"),
                    ("Priority", "optional"),
                    ("Homepage", homepage),
                    ("Description", f"{metadata['Summary']}\n{DESCRIPTION}"),
                )
            ),
        )
        for path in [root, *root.rglob("*")]:
            if path.is_dir():
                path.chmod(0o755)  # whatever the umask
            os.utime(path, (epoch, epoch))
        out.mkdir(parents=True, exist_ok=True)
        deb = out / f"{PACKAGE}_{version}_{arch}.deb"
        _run(
            "dpkg-deb",
            "--build",
            "--root-owner-group",
            str(root),
            str(deb),
            env={**os.environ, "SOURCE_DATE_EPOCH": str(epoch)},
        )
    return deb


def _unpack(archive: zipfile.ZipFile, site: pathlib.Path):
    """Extracts the wheel into `site`. Returns the name of its .dist-info, its metadata and its
    console scripts. RECORD is left out (dpkg keeps the list of files, and pip must not take
    them for its own), and so is the licence, which the copyright file carries."""
    dist_info = next(
        n.split("/")[0] for n in archive.namelist() if n.endswith(".dist-info/METADATA")
    )
    for info in archive.infolist():
        name = info.filename
        top = name.split("/")[0]
        if (
            name.endswith("/")
            or name in (f"{dist_info}/RECORD",)
            or name.startswith(f"{dist_info}/licenses/")
        ):
            continue
        if top.endswith(".data"):
            sys.exit(f"{name}: a wheel's .data directory has no place in this package")
        # An extension module is read, not executed: 0644, as Debian's policy wants for
        # shared objects.
        _write(site / name, 0o644, archive.read(info))
    metadata = email.parser.BytesHeaderParser().parse(
        io.BytesIO(archive.read(f"{dist_info}/METADATA"))
    )
    entry_points = configparser.ConfigParser(delimiters=("=",))
    entry_points.optionxform = str  # script names keep their case
    entry_points.read_string(archive.read(f"{dist_info}/entry_points.txt").decode())
    scripts = dict(entry_points["console_scripts"]) if "console_scripts" in entry_points else {}
    return dist_info, metadata, {k: v.strip() for k, v in scripts.items()}


def _installed_size(root: pathlib.Path) -> str:
    """In KiB, as dpkg-gencontrol counts it: each file rounded up to 1 KiB, each directory 1."""
    total = 0
    for path in root.rglob("*"):
        if "DEBIAN" in path.relative_to(root).parts:
            continue
        total += -(-path.stat().st_size // 1024) if path.is_file() else 1
    return str(total)


def _write(path: pathlib.Path, mode: int, content: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, str):
        content = content.encode()
    path.write_bytes(content)
    path.chmod(mode)


def _run(*argv, env=None) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, env=env)
    if result.returncode:
        sys.exit(f"{' '.join(argv)}: exit {result.returncode}\n{result.stdout}{result.stderr}")
    return result.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("wheel", type=pathlib.Path, help="the release wheel `make build` made")
    parser.add_argument(
        "--out",
        type=pathlib.Path,
        default=pathlib.Path("target/debian"),
        help="where the .deb goes (default: %(default)s)",
    )
    args = parser.parse_args()
    print(build(args.wheel, args.out))


if __name__ == "__main__":
    main()
