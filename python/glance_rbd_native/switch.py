"""The ``GLANCE_RBD_NATIVE=1`` switch: patch glance_store's rbd driver as soon as it is imported.

The ``glance_rbd_native_switch.pth`` file installed into site-packages calls ``install()`` at
interpreter start-up when the variable is set, so glance-api needs no code or config change.
"""

import importlib.abc
import logging
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Optional

LOG = logging.getLogger(__name__)

ENV = "GLANCE_RBD_NATIVE"
TARGET = "glance_store._drivers.rbd"


def enabled() -> bool:
    return os.environ.get(ENV, "").strip().lower() in ("1", "true", "yes", "on")


def install() -> None:
    """Patches now if the driver is loaded, else once it is. Never breaks start-up."""
    if not enabled():
        return
    if TARGET in sys.modules:
        _patch()
    elif not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


def _patch() -> None:
    try:
        from glance_rbd_native.patching import patch

        patch()
    except ImportError as exc:  # e.g. no librbd.so.1 on this host
        LOG.warning(
            "glance-rbd-native: the native module cannot be loaded (%s); the rbd driver "
            "stays stock",
            exc,
        )
    except Exception:  # start-up must go on with the stock driver
        LOG.exception("glance-rbd-native: could not patch the rbd driver; it stays stock")


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds the rbd driver with the other finders, then patches right after it executes."""

    def find_spec(
        self,
        name: str,
        path: Optional[Sequence[str]],
        target: Optional[ModuleType] = None,
    ) -> Optional[ModuleSpec]:
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find_spec = getattr(finder, "find_spec", None)
            spec: Optional[ModuleSpec] = find_spec(name, path, target) if find_spec else None
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchAfterExec(spec.loader)
                return spec
        return None


class _PatchAfterExec(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec: ModuleSpec) -> Optional[ModuleType]:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        _patch()
