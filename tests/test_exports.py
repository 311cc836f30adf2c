"""The names the package exports are the ones its stub and its `__all__` promise, on the build
installed: the native module defines exactly the public names of `_native.pyi` (read with `ast`),
`glance_rbd_native` re-exports all of them, to type checkers too, and every `__all__` lists only
names its module has, once. No cluster."""

import ast
import importlib
import pkgutil
from pathlib import Path

import glance_rbd_native
from glance_rbd_native import _native

PACKAGE = Path(glance_rbd_native.__file__).parent
# What glance_rbd_native exports of its own (patching.py); the rest comes from the native module.
PYTHON_NAMES = {"is_patched", "patch", "unpatch"}


def public(names):
    return {name for name in names if not name.startswith("_")}


def stub_names():
    """The names `_native.pyi` defines at its top level: classes, functions, constants."""
    names = set()
    for node in ast.parse((PACKAGE / "_native.pyi").read_text()).body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return public(names)


def type_checking_imports():
    """The names `__init__.py` imports from the native module for type checkers alone."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    blocks = [
        node
        for node in tree.body
        if isinstance(node, ast.If)
        and isinstance(node.test, ast.Name)
        and node.test.id == "TYPE_CHECKING"
    ]
    return {
        alias.asname or alias.name
        for block in blocks
        for node in block.body
        if isinstance(node, ast.ImportFrom) and node.module == "glance_rbd_native._native"
        for alias in node.names
    }


def modules():
    """Every module of the package but __main__ (importing it runs the command)."""
    yield glance_rbd_native
    for info in pkgutil.walk_packages(glance_rbd_native.__path__, "glance_rbd_native."):
        if info.name != "glance_rbd_native.__main__":
            yield importlib.import_module(info.name)


def test_the_native_module_defines_the_stubs_names():
    stub, native = stub_names(), public(dir(_native))
    assert stub == native, (
        f"only in _native.pyi: {sorted(stub - native)}; only in the native "
        f"module: {sorted(native - stub)}"
    )


def test_the_package_exports_every_native_name():
    stub, exported = stub_names(), set(glance_rbd_native.__all__) - PYTHON_NAMES
    assert exported == stub, (
        f"in _native.pyi, not in glance_rbd_native.__all__: "
        f"{sorted(stub - exported)}; in __all__, not in the stub: "
        f"{sorted(exported - stub)}"
    )
    checked = type_checking_imports()
    assert checked == stub, (
        f"in _native.pyi, not imported under TYPE_CHECKING in __init__.py: "
        f"{sorted(stub - checked)}; imported there, not in the stub: "
        f"{sorted(checked - stub)}"
    )


def test_every_all_lists_names_its_module_has_once():
    listed = [module for module in modules() if hasattr(module, "__all__")]
    assert {glance_rbd_native, _native} <= set(listed)
    for module in listed:
        missing = [name for name in module.__all__ if not hasattr(module, name)]
        assert not missing, f"{module.__name__}.__all__ lists names it does not have: {missing}"
        twice = sorted({name for name in module.__all__ if module.__all__.count(name) > 1})
        assert not twice, f"{module.__name__}.__all__ lists these more than once: {twice}"
