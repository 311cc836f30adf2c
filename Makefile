# glance-rbd-native: `make demo` and `make test` set everything up on a fresh Debian 12 (as root).
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV ?= .venv
PY := $(VENV)/bin/python
# Debian's interpreter: the only one that sees Debian's rados and rbd modules, like glance hosts.
SYSTEM_PYTHON := /usr/bin/python3
APT_PACKAGES := ceph-mon ceph-osd ceph-mgr ceph-common librbd-dev librados-dev \
	python3-rbd python3-rados python3-venv python3-dev gcc pkg-config libssl-dev valgrind \
	mariadb-server-core debootstrap qemu-user-static git
PIP_PACKAGES := --group dev
# The end-to-end layer: a real glance-api (WSGI app served by uWSGI, catalogue in MariaDB) and
# a real client. pip's cryptography breaks Debian's pyOpenSSL in a --system-site-packages venv;
# a newer pyOpenSSL fixes it.
E2E_PACKAGES := glance==33.0.0 uwsgi==2.0.31 gunicorn==23.0.0 python-glanceclient PyMySQL "pyOpenSSL>=24"

.PHONY: help deps build build-arm64 dist dev deb demo test test-unit test-fast test-rust lifecycle test-python check-py39 check-abi3 \
	bench cluster-up cluster-down lint lint-checks format clean

# A cluster that `make cluster-up` left running in .cluster: the test targets hand it to pytest
# (GLANCE_RBD_TEST_CLUSTER) instead of booting one per run. Set that variable to use another.
CLUSTER_DIR := .cluster
WITH_CLUSTER = GLANCE_RBD_TEST_CLUSTER="$${GLANCE_RBD_TEST_CLUSTER:-$$($(PY) -m tests.harness.cluster status $(CLUSTER_DIR))}"
# The release set (make dist): both wheels and the sdist, what an index serves and all that
# make test installs. maturin builds plain linux wheels into target/wheels; auditwheel checks
# each against the manylinux policies and tags it, bundling nothing: the Ceph client and
# OpenSSL 3 stay the host's (docs/deployment.md#the-release-set).
DIST := target/dist
HOST_LIBRARIES := librbd.so.1 librados.so.2 libssl.so.3 libcrypto.so.3
REPAIR = PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/auditwheel repair --plat auto \
	$(HOST_LIBRARIES:%=--exclude %) -w $(DIST)
# This machine's wheel (make build); make build-arm64 puts the aarch64 one next to it.
WHEEL = $(DIST)/*-manylinux_*_$(shell uname -m).whl
# What pytest imports must be the build just installed, not python/ (an editable install of
# `maturin develop`) nor a stale extension module left there.
CHECK_INSTALLED = $(PY) -c 'import sys, glance_rbd_native._native as n, glance_rbd_native as p; \
	sys.exit(None if all("/site-packages/" in m.__file__ for m in (n, p)) else \
	f"glance_rbd_native comes from {p.__file__} and {n.__file__}, not the installed wheel")'
# make test-fast: what needs no more than the cluster (markers: pyproject.toml).
FAST_MARKERS := not (matrix or distro or e2e or load or wheel or packaging)
# make test-unit: what needs no cluster, no root and no network (a test that uses the cluster
# must be marked so: tests/conftest.py refuses to collect it otherwise).
UNIT_MARKERS := not (cluster or matrix or distro or e2e or load or wheel or packaging)

help: ## Show the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-13s %s\n", $$1, $$2}'

deps: $(VENV)/.deps ## Install Debian's Ceph packages and the test virtualenv (once)

$(VENV)/.deps: Makefile pyproject.toml
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing:" $$missing; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
	command -v cargo >/dev/null || { echo "cargo (Rust) is required: https://rustup.rs" >&2; exit 1; }
	[ -x $(PY) ] || $(SYSTEM_PYTHON) -m venv --system-site-packages $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(PIP_PACKAGES) $(E2E_PACKAGES)
	touch $@

build: deps ## Build the release wheel (one for CPython 3.9 on: abi3) and install it into the virtualenv
	rm -rf target/wheels/*-linux_$(shell uname -m).whl $(WHEEL) python/glance_rbd_native/*.so
	$(VENV)/bin/maturin build --release -q -i $(PY) -o target/wheels
	$(REPAIR) target/wheels/*-linux_$(shell uname -m).whl
	@ls $(WHEEL)
	$(PY) -m pip install -q --force-reinstall --no-deps $(WHEEL)
	@$(CHECK_INSTALLED)

# Cross-compiled in a cached Debian 13 root (packaging/cross.py), from the crates cargo fetched.
build-arm64: deps ## The aarch64 wheel, cross-compiled next to the x86_64 one (cached by source)
	PYO3_PYTHON=$(SYSTEM_PYTHON) cargo fetch --locked -q
	$(SYSTEM_PYTHON) packaging/cross.py --maturin $(VENV)/bin/maturin --out target/wheels
	rm -f $(DIST)/*-manylinux_*_aarch64.whl
	$(REPAIR) target/wheels/*-linux_aarch64.whl

# The sdist of the files git tracks (packaging/sdist.py), next to the wheels; twine checks all
# three as an index would (the README is their long description).
dist: build build-arm64 ## The release set in target/dist: both manylinux wheels and the sdist, checked by twine
	rm -f $(DIST)/*.tar.gz
	$(PY) packaging/sdist.py --maturin $(VENV)/bin/maturin --out $(DIST)
	$(VENV)/bin/twine check --strict $(DIST)/*

# What apt installs on Debian's and Ubuntu's python3, where pip may not (PEP 668).
deb: dist ## The Debian packages of both wheels: target/debian/glance-rbd-native_<version>_<arch>.deb
	rm -rf target/debian
	for wheel in $(DIST)/*.whl; do \
		$(SYSTEM_PYTHON) packaging/deb.py --out target/debian $$wheel || exit 1; done

dev: deps ## A debug build installed into the virtualenv in its place: quick to rebuild (make build puts the release one back)
	rm -rf target/dev-wheels python/glance_rbd_native/*.so
	$(VENV)/bin/maturin build -q -i $(PY) -o target/dev-wheels
	$(PY) -m pip install -q --force-reinstall --no-deps target/dev-wheels/*.whl
	@$(CHECK_INSTALLED)

demo: build ## Boot a throwaway cluster; upload one image through the stock and native drivers
	$(PY) -m benchmarks.demo

bench: build ## Every performance target, side by side, medians of 3 rounds
	$(PY) -m benchmarks.bench

# The release wheel first: lint's checks run on it (stubtest against the module it installed),
# which spares a debug build of every crate. The Debian roots (cached; built on a fresh
# machine) build in the background meanwhile, at the lowest priority, the cross build's first:
# lint and the cargo tests compile while it builds, the cross build comes after them, and
# pytest runs the layer that uses the others last.
test: deps ## Everything: lint, the unit loop, both release wheels' checks, then all of pytest on it (every glance_store release, every server, the Debian roots)
	@mkdir -p target
	nice -n 19 $(SYSTEM_PYTHON) packaging/debian_root.py all > target/roots.log 2>&1 & roots=$$!; \
	$(MAKE) --no-print-directory build check-py39 lint-checks test-unit lifecycle dist \
		check-abi3 test-python; \
	status=$$?; wait $$roots || { echo "building the Debian roots failed:"; cat target/roots.log; }; \
	exit $$status

# No deps: it runs as any user, offline, on what make dev or make build installed.
test-unit: ## The unit loop, under a minute: cargo tests and the pytest tests that need no cluster, root or network (on the build installed)
	@$(CHECK_INSTALLED)
	PYO3_PYTHON=$(SYSTEM_PYTHON) cargo test --workspace --quiet --offline
	$(PY) -m pytest -q -p no:cacheprovider -m "$(UNIT_MARKERS)"

test-fast: dev test-rust ## The quick loop: cargo tests, then pytest on the debug build and the cluster alone (no release matrix, Debian roots, servers, load runs or wheel checks)
	$(WITH_CLUSTER) $(PY) -m pytest -q -m "$(FAST_MARKERS)"

test-rust: deps lifecycle ## cargo test, and the program the valgrind test drives
	PYO3_PYTHON=$(SYSTEM_PYTHON) cargo test --workspace --quiet

# The valgrind test in pytest drives this program against the throwaway cluster.
lifecycle: deps
	PYO3_PYTHON=$(SYSTEM_PYTHON) cargo build --quiet -p glance-rbd-core --example lifecycle

# Two pytest processes at once (tests/harness/lanes.py): the project on this host, and against
# the other releases (glance_store's, Debian's); the second boots a cluster of its own.
test-python: build ## All of pytest on the release wheel, in two lanes at once
	$(WITH_CLUSTER) $(PY) -m tests.harness.lanes

cluster-up: deps ## Boot a throwaway cluster in .cluster and leave it running: the test targets use it while it runs
	@if running=$$($(PY) -m tests.harness.cluster status $(CLUSTER_DIR)) && [ -n "$$running" ]; then \
		echo "a cluster already runs in $$running"; \
	else \
		$(PY) -m tests.harness.cluster down $(CLUSTER_DIR) && rm -rf $(CLUSTER_DIR) && \
		$(PY) -m tests.harness.cluster up $(CLUSTER_DIR); \
	fi

cluster-down: ## Stop the cluster in .cluster (its daemons, by pid) and remove it
	$(PY) -m tests.harness.cluster down $(CLUSTER_DIR)
	rm -rf $(CLUSTER_DIR)

# RDO on EL9 runs glance on Python 3.9: the pure-Python package must stay 3.9-compatible.
check-py39: deps ## The pure-Python package stays Python 3.9-compatible
	$(VENV)/bin/vermin -q --no-tips --violations --eval-annotations -t=3.9- python/

# The extension uses the limited API of 3.9 alone, so the one wheel loads on 3.9 to 3.14.
check-abi3: build build-arm64 ## Both release wheels use the limited API of 3.9 alone
	$(VENV)/bin/abi3audit --strict --summary $(DIST)/*.whl

lint: check-py39 dev lint-checks ## rustfmt, clippy, ruff (lint and format), mypy, Python 3.9 compatibility, the stub against the debug build

# make lint's checks, on whichever build is installed (make test: the release one).
lint-checks: deps
	cargo fmt --all --check
	PYO3_PYTHON=$(SYSTEM_PYTHON) cargo clippy --workspace --all-targets -- -D warnings
	$(VENV)/bin/ruff check python/ tests/ benchmarks/ packaging/
	$(VENV)/bin/ruff format --check python/ tests/ benchmarks/ packaging/
	# Which files, how strict: [tool.mypy] in pyproject.toml.
	$(VENV)/bin/mypy
	$(PY) -m mypy.stubtest --allowlist .stubtest-allowlist glance_rbd_native._native

# No deps: ruff alone, from the virtualenv make deps made.
format: ## Format the Python code (ruff format)
	$(VENV)/bin/ruff format python/ tests/ benchmarks/ packaging/

clean: ## Remove build outputs and the virtualenvs
	rm -rf target $(VENV) .venv-matrix python/glance_rbd_native/*.so
