"""Harnesses that run real parts for the tests, the demo and the benchmarks: a Ceph cluster,
MariaDB, glance-api, virtualenvs of other glance_store releases, Debian roots; glance stores on
a cluster and data to give them (stores, data); the contract runs' guard (contract)."""
