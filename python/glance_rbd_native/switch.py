"""The ``GLANCE_RBD_NATIVE=1`` switch: patch glance_store's rbd driver as soon as it is imported.

The ``glance_rbd_native_switch.pth`` file installed into site-packages calls ``install()`` at
interpreter start-up when the variable is set, so glance-api needs no code or config change.
"""

import logging
import os
import sys
from types import ModuleType

from glance_rbd_native import import_hooks

LOG = logging.getLogger(__name__)

ENV = "GLANCE_RBD_NATIVE"
# The values that turn it on (any case, blanks around).
ON = ("1", "true", "yes", "on")
TARGET = "glance_store._drivers.rbd"


def enabled() -> bool:
    return os.environ.get(ENV, "").strip().lower() in ON


def install() -> None:
    """Patches now if the driver is loaded, else once it is. Never breaks start-up."""
    if not enabled():
        return
    if TARGET in sys.modules:
        _patch()
    else:
        import_hooks.install(TARGET, _PatchAfterExec, once=True)


def _patch() -> None:
    try:
        from glance_rbd_native.patching import patch

        patch()
    except ImportError as exc:  # e.g. no librbd.so.1 on this host: exc says what to install
        LOG.warning("glance-rbd-native: the rbd driver stays stock: %s", exc)
    except Exception:  # start-up must go on with the stock driver
        LOG.exception("glance-rbd-native: could not patch the rbd driver; it stays stock")


class _PatchAfterExec(import_hooks.Delegating):
    def exec_module(self, module: ModuleType) -> None:
        super().exec_module(module)
        _patch()
