"""The test suite, and the harness (tests.harness) that the benchmarks share with it: the
checkout's root is the import root, for pytest, `python -m benchmarks.bench`, the contract
runs in other virtualenvs and Debian roots, and the glance-api servers the tests start."""
