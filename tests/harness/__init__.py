"""Harnesses that run real parts for the tests, the demo and the benchmarks: a Ceph cluster,
MariaDB, glance-api, and virtualenvs of other glance_store releases."""
