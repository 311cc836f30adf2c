"""Performance runs apart from the tests, on the tests' harness: `python -m benchmarks.bench`,
`python -m benchmarks.demo`, run from the checkout's root."""

import pathlib
import sys

# The Debian roots (packaging/debian_root.py) import from their own directory, which pytest
# puts on the path for the tests (pyproject.toml) and this for the benchmarks.
_PACKAGING = str(pathlib.Path(__file__).resolve().parents[1] / "packaging")
if _PACKAGING not in sys.path:
    sys.path.insert(0, _PACKAGING)
