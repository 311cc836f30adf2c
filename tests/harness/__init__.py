"""Harnesses that run real parts for the tests, the demo and the benchmarks: a Ceph cluster,
MariaDB, glance-api (in Debian roots too: the roots are packaging/debian_root.py's), virtualenvs
of other glance_store releases; glance stores on a cluster and data to give them (stores, data);
the contract runs' guard (contract)."""
