"""The host libraries the native module links, and what a host without them is told.

The extension links the host's Ceph client (librbd, librados) and OpenSSL 3 instead of bundling
them: glance's own rados and rbd modules load the host's librados into the same process, and
one copy of it must serve both. Where one is missing or too old, the dynamic loader's error
names a file; the ImportError raised instead names the package to install and its release.
"""

import re
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Optional

from glance_rbd_native import import_hooks

NATIVE = "glance_rbd_native._native"
CEPH = "Ceph 16 (Pacific) or later"
OPENSSL = "OpenSSL 3 (libssl3 on Debian and Ubuntu, openssl-libs on EL)"
# Each library as the extension asks for it, and what provides it.
NEEDED = {
    "librbd.so.1": f"librbd1 from {CEPH}",
    "librados.so.2": f"librados2 from {CEPH}",
    "libssl.so.3": OPENSSL,
    "libcrypto.so.3": OPENSSL,
}
# A function librbd or librados lacks: a release older than the calls used.
OLDER = re.compile(r"undefined symbol: (rbd|rados)_\w+")
CANNOT = "glance-rbd-native cannot load its native module"


def explained(exc: ImportError) -> Optional[ImportError]:
    """The ImportError to raise for the loader's `exc`, or None if it is not about the host's
    libraries."""
    text = str(exc)
    older = OLDER.search(text)
    if older is not None:  # whichever library's file the loader was at when it found out
        package = "librbd1" if older[1] == "rbd" else "librados2"
        return ImportError(
            f"{CANNOT}: this host's {package} is too old; install {package} from {CEPH}, and "
            f"restart the process ({text})",
            name=NATIVE,
        )
    for library, source in NEEDED.items():
        if f"{library}: cannot open shared object file" in text:
            return ImportError(
                f"{CANNOT}: this host has no {library}; install {source}, and restart the "
                f"process ({text})",
                name=NATIVE,
            )
    for library, source in NEEDED.items():
        if library in text:  # there, but not one the loader could use
            return ImportError(
                f"{CANNOT}: this host's {library} cannot be loaded; install {source}, and "
                f"restart the process ({text})",
                name=NATIVE,
            )
    return None


def explain_failures() -> None:
    """Makes a failure to load the native module raise `explained`'s error. Safe to call again."""
    import_hooks.install(NATIVE, _Explaining, once=False)


class _Explaining(import_hooks.Delegating):
    def create_module(self, spec: ModuleSpec) -> Optional[ModuleType]:
        try:
            return super().create_module(spec)
        except ImportError as exc:
            better = explained(exc)
            if better is None:
                raise
            raise better from exc
