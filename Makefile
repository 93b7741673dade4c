# The two commands a newcomer needs: `make demo` (the main job) and `make test` (all tests).
# Everything they need is installed by this file (the product and its development tooling,
# dev/python) and by `kafka-mirror dev` into the user cache.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test check unit lint bench crds dev-up dev-down build clean kind-e2e

# The product and, next to it, the development tooling it does not ship (dev/python). The
# install compiles the hot path (setup.py), so an edit of its sources installs again.
HOT_PATH := $(shell grep -o 'operator/[a-z_/]*\.py' setup.py)
$(STAMP): pyproject.toml dev/python/pyproject.toml setup.py $(HOT_PATH)
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is needed: set PYTHON=python3.11")'
	@$(PYTHON) -c 'import os, shutil, sysconfig, sys; sys.exit(0 if shutil.which("cc") and os.path.exists(sysconfig.get_paths()["include"] + "/Python.h") else "a C compiler and Python headers are needed to compile the hot path (Debian: apt-get install gcc python3-dev)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]' -e dev/python
	touch $(STAMP)

## The main job on the real node (root, Linux; elsewhere it says what it needs): the example
## mirror run by its worker pod, its status and one audit; everything stops at the end.
demo: $(STAMP)
	$(BIN)/kafka-mirror demo

# Three test processes side by side (pytest-xdist): most of a single test's time is spent waiting
# for Kafka, the API server or a pod; three keep both cores busy throughout (docs/dev-stack.md).
# The real node's tests share one process (the groups: tests/conftest.py); the slowest ten tests
# are listed at the end. A process that crashes ends the run with its report: replacing it can
# leave the run waiting forever for the tests of its group (seen once, docs/test-suite-journal.md).
PARALLEL := -n 3 --dist loadgroup --max-worker-restart=0 --durations=10

## All the tests: lint, then unit and integration tests against the real parts (what CI runs).
test: lint build
	$(BIN)/pytest $(PARALLEL)

## The inner loop: lint, the unit tests, and the integration tests that need only Kafka and the
## API server (not the real node, Spark nor Helm), and in seconds by design (not `long`: an outage,
## a backlog, a stream of 100,000s of records, a timeout waited out); about five minutes warm.
check: lint
	$(BIN)/pytest $(PARALLEL) -m 'not (node or spark or helm or long)'

unit: $(STAMP)
	$(BIN)/pytest tests/unit

lint: $(STAMP)
	$(BIN)/ruff check operator dev/python tests bench
	$(BIN)/ruff format --check operator dev/python tests bench
	$(BIN)/mypy

## Install Kafka, Spark's Kafka jars, etcd, kube-apiserver, kubectl, Helm, actionlint, promtool and
## Prometheus into the cache (first run: ~21 minutes, more for Prometheus: see README), and the real node's kubelet, controllers and kube-proxy, and
## (as root) its packages and images (docs/dev-stack.md).
build: $(STAMP)
	$(BIN)/kafka-mirror dev build

## Our worker against MirrorMaker 2 on this machine (docs/performance.md), about 70 minutes.
bench: $(STAMP)
	$(BIN)/python bench/vs_mirrormaker.py

crds: $(STAMP)
	$(BIN)/kafka-mirror crds

dev-up: $(STAMP)
	$(BIN)/kafka-mirror dev up

dev-down: $(STAMP)
	$(BIN)/kafka-mirror dev down

## The end-to-end test on kind: image, Kafka, chart, examples, smoke Job (dev/kind/e2e.sh, which
## runs alone where Docker, kind, kubectl and Helm are installed). This target brings pinned
## kind, kubectl and Helm, and where no Docker engine answers a private one with the node and
## Kafka images made here (kafka_mirror_dev/kind.py). KEEP_CLUSTER=1 keeps the cluster.
kind-e2e: $(STAMP)
	$(BIN)/python -m kafka_mirror_dev.kind

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build
	find operator -name '*.so' -delete
