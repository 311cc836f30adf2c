# glance-rbd-native: `make demo` and `make test` set everything up on a fresh Debian 12 (as root).
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV ?= .venv
PY := $(VENV)/bin/python
# Debian's interpreter: the only one that sees Debian's rados and rbd modules, like glance hosts.
SYSTEM_PYTHON := /usr/bin/python3
APT_PACKAGES := ceph-mon ceph-osd ceph-mgr ceph-common librbd-dev librados-dev \
	python3-rbd python3-rados python3-venv python3-dev gcc pkg-config libssl-dev valgrind \
	mariadb-server-core debootstrap
PIP_PACKAGES := maturin "pytest>=7" "hypothesis>=6" glance-store==5.7.0 numpy vermin abi3audit auditwheel
# The end-to-end layer: a real glance-api (WSGI app served by uWSGI, catalogue in MariaDB) and
# a real client. pip's cryptography breaks Debian's pyOpenSSL in a --system-site-packages venv;
# a newer pyOpenSSL fixes it.
E2E_PACKAGES := glance==33.0.0 uwsgi==2.0.31 python-glanceclient PyMySQL "pyOpenSSL>=24"

.PHONY: help deps build demo test test-rust test-python check-py39 check-abi3 bench lint clean

help: ## Show the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

deps: $(VENV)/.deps ## Install Debian's Ceph packages and the test virtualenv (once)

$(VENV)/.deps: Makefile
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

build: deps ## Build the wheel (one for CPython 3.9 on: abi3) and install it into the virtualenv
	rm -rf target/wheels
	$(VENV)/bin/maturin build --release -q -i $(PY) -o target/wheels
	@ls target/wheels/*.whl
	$(PY) -m pip install -q --force-reinstall --no-deps target/wheels/*.whl

demo: build ## Boot a throwaway cluster; upload one image through the stock and native drivers
	$(PY) benchmarks/demo.py

bench: build ## Every performance target, side by side, medians of 3 rounds (about 10 min)
	$(PY) benchmarks/bench.py

test: build check-py39 check-abi3 test-rust test-python ## Everything: cargo tests, then pytest on a throwaway cluster (every glance_store release, every server)

test-rust: deps
	PYO3_PYTHON=$(SYSTEM_PYTHON) cargo test --quiet
	# The valgrind test in pytest drives this program against the throwaway cluster.
	PYO3_PYTHON=$(SYSTEM_PYTHON) cargo build --quiet --example lifecycle

test-python: build
	$(PY) -m pytest -q

# RDO on EL9 runs glance on Python 3.9: the pure-Python package must stay 3.9-compatible.
check-py39: deps
	$(VENV)/bin/vermin -q --no-tips --violations --eval-annotations -t=3.9- python/

# The extension uses the limited API of 3.9 alone, so the one wheel loads on 3.9 to 3.13.
check-abi3: build
	$(VENV)/bin/abi3audit --strict --summary target/wheels/*.whl

lint: check-py39 ## rustfmt, clippy with warnings as errors, Python 3.9 compatibility
	cargo fmt --check
	PYO3_PYTHON=$(SYSTEM_PYTHON) cargo clippy --all-targets -- -D warnings

clean: ## Remove build outputs and the virtualenvs
	rm -rf target $(VENV) .venv-matrix python/glance_rbd_native/*.so
