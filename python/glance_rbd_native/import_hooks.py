"""A hook into the import of one module: a finder that finds it as the other finders would, and
wraps its loader. The start-up switch patches glance_store's rbd driver right after it executes
(switch.py); a native module the host cannot load is explained (libraries.py)."""

import importlib.abc
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Callable, Optional

Wrap = Callable[[importlib.abc.Loader], importlib.abc.Loader]


def install(name: str, wrap: Wrap, once: bool) -> None:
    """Makes the import of module `name` use `wrap(loader)`: at its next import alone if `once`,
    else at each. Safe to call again."""
    if not any(isinstance(f, _Finder) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder(name, wrap, once))


class Delegating(importlib.abc.Loader):
    """Loads as `loader` does; a hook's loader overrides what it adds to."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec: ModuleSpec) -> Optional[ModuleType]:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, name: str, wrap: Wrap, once: bool) -> None:
        self.name, self._wrap, self._once = name, wrap, once

    def find_spec(
        self,
        name: str,
        path: Optional[Sequence[str]],
        target: Optional[ModuleType] = None,
    ) -> Optional[ModuleSpec]:
        if name != self.name:
            return None
        if self._once:
            sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find_spec = getattr(finder, "find_spec", None)
            if finder is self or find_spec is None:
                continue
            spec: Optional[ModuleSpec] = find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = self._wrap(spec.loader)
                return spec
        return None
