# Every target sets itself up on a fresh machine: venv, editable install, control-plane binaries.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
PYTHON ?= python3

.PHONY: setup prometheus chromium binaries check test unit demo demo-clusters bench clean format

$(STAMP): pyproject.toml dev/pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e ./dev
	@touch $(STAMP)

setup: $(STAMP) prometheus chromium

# Debian's prometheus package (2.42: prometheus and promtool) parses gate.metrics queries at
# preflight and runs the testbed's Prometheus; installed with apt when missing (root or sudo).
prometheus:
	@command -v promtool >/dev/null && command -v prometheus >/dev/null || { \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends prometheus; }

# Debian's chromium: the web view's tests drive it headless through Playwright (tests/e2e/browser.py).
chromium:
	@test -x /usr/lib/chromium/chromium || command -v chromium >/dev/null || { \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends chromium; }

# Builds kube-apiserver, kube-controller-manager, etcd, kwok, Gitea and helm through the Go module
# proxy into ~/.cache/gitops-gpu (GITOPS_GPU_CACHE) the first time; later runs reuse them.
binaries: setup
	$(PY) -m gitops_gpu testbed build
	$(PY) -m gitops_gpu_dev.testbed.helm

check: setup
	$(VENV)/bin/ruff format --check gitops_gpu dev tests bench
	$(VENV)/bin/ruff check gitops_gpu dev tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

format: setup
	$(VENV)/bin/ruff format gitops_gpu dev tests bench
	$(VENV)/bin/ruff check --fix gitops_gpu dev tests bench

unit: setup
	$(VENV)/bin/pytest -q tests/unit

test: binaries
	$(VENV)/bin/pytest -q

demo: binaries
	$(PY) -m gitops_gpu demo $(DEMO_ARGS)
	$(PY) -m gitops_gpu demo --forge $(DEMO_ARGS)
	$(PY) -m gitops_gpu demo --gates $(DEMO_ARGS)

demo-clusters: binaries  # two clusters, one controller each, a stage spanning both
	$(PY) -m gitops_gpu demo --clusters 2 $(DEMO_ARGS)

bench: binaries
	for b in bench/*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf .testbed .pytest_cache .mypy_cache .ruff_cache
