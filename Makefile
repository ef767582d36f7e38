# Steward's two entry points are `make up` and `make test`; everything they need
# (uv, the Python environment, the pinned Go binaries) is installed on first use.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
UV_VERSION := 0.13.8
TOOLS := .tools
UV := $(TOOLS)/bin/uv
VENV := .venv
BIN := $(VENV)/bin
STEWARD := $(BIN)/steward
# Extra pytest arguments, e.g. PYTEST_ARGS="-m 'not slow'" while iterating.
PYTEST_ARGS ?=
# pytest workers of `make test` (pytest-xdist, grouped as tests/workers.py says);
# 1 runs the suite in one process.
TEST_WORKERS ?= 2
# Extra `steward cluster up` flags, e.g. UP_FLAGS="--nodes 5 --controllers '*,-job'".
UP_FLAGS ?=
# make up PODS=1: Steward deployed as pods on a real node (see the up target).
PODS ?=

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

$(UV):
	@echo "installing uv $(UV_VERSION) into $(TOOLS)/"
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

# Every workspace member's pyproject.toml: manager/ and tools/ (*/), services/serving and
# services/informer (services/*/), the controllers (services/controllers/*/).
$(VENV)/.synced: $(UV) pyproject.toml uv.lock $(wildcard */pyproject.toml services/*/pyproject.toml services/controllers/*/pyproject.toml)
	$(UV) sync --frozen --all-packages
	@touch $@

.PHONY: venv
venv: $(VENV)/.synced ## create the Python environment (uv, Python 3.11, locked)

.PHONY: build
build: venv ## build the pinned Go binaries that are not cached yet
	$(STEWARD) build

.PHONY: up
# PODS=1: Steward as pods on one real node (containerd, runc, kubelet; needs root) instead
# of local processes; its images are built without a daemon and imported into the node.
up: build $(if $(PODS),node-packages) ## start the local control plane with Steward (PODS=1: as pods on a real node)
	$(STEWARD) cluster up $(if $(PODS),--real-nodes 1 --steward-pods,--steward --metrics) $(UP_FLAGS)

.PHONY: down
down: venv ## stop the local control plane and remove its state
	$(STEWARD) cluster down

.PHONY: status
status: venv ## show the local control plane's components and nodes
	$(STEWARD) cluster status

.PHONY: images
images: venv ## build Steward's images without a daemon into one OCI archive for `ctr images import` (as root)
	deploy/images/build.sh --pause

.PHONY: render
render: venv ## print the Kubernetes manifests of the local overlay (see steward deploy render --help)
	$(STEWARD) deploy render --overlay local

.PHONY: protos
protos: venv ## regenerate the Python code of protos/ into src/steward/v1/
	scripts/gen-protos.sh

.PHONY: runtimes
runtimes: venv ## build the Go and TypeScript runtimes' examples and conformance drivers
	$(MAKE) -C runtimes/go build
	$(MAKE) -C runtimes/typescript deps build

.PHONY: lint
lint: venv ## buf lint, generated code fresh (Python, Go, TypeScript), ruff, mypy, import layers, go vet, tsc
	$(BIN)/buf lint
	scripts/gen-protos.sh --check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python scripts/check-imports.py
	$(BIN)/python scripts/check-links.py
	$(MAKE) -C runtimes/go lint check-generated
	$(MAKE) -C runtimes/typescript deps lint check-generated

.PHONY: node-packages
node-packages: venv ## install the Debian packages real nodes and their images need (apt-get, as root)
	$(BIN)/python -W ignore::RuntimeWarning:runpy -m steward.cluster.packages

.PHONY: test
test: lint build runtimes node-packages ## lint, then every test tier against a real local control plane
	$(MAKE) -C runtimes/go test
	$(MAKE) -C runtimes/typescript test
	$(BIN)/pytest $(if $(filter-out 0 1,$(TEST_WORKERS)),-n $(TEST_WORKERS)) $(PYTEST_ARGS)

.PHONY: bench
bench: build ## run the benchmarks: a table on screen, JSON in bench-results/
	$(BIN)/python -m bench.informer
	$(BIN)/python -m bench.scale
	$(BIN)/python -m bench.controllers --profile
	$(BIN)/python -m bench.controllers --workloads cronjob --settings defaults
	$(BIN)/python -m bench.mirror_memory --informer

.PHONY: e2e
# BASELINE=0 runs Steward's side only; E2E_FLAGS passes more (see python -m steward.e2e --help).
BASELINE ?= 1
E2E_FLAGS ?=
e2e: build node-packages ## Kubernetes' e2e specs under Steward's controllers and upstream's (a table; JUnit in e2e-results/)
	$(BIN)/python -m steward.e2e $(if $(filter 0,$(BASELINE)),--sides steward) $(E2E_FLAGS)

.PHONY: chaos
# Every case of the pods-mode chaos test (tests/pods/test_self_healing.py), on Steward's
# static core and, for the cases that apply, on upstream's kube-controller-manager alone.
chaos: build node-packages ## Steward as pods broken every way the chaos test knows, and upstream's the same way
	STEWARD_CHAOS=full STEWARD_CHAOS_SIDES=steward,upstream $(BIN)/pytest -s tests/pods/test_self_healing.py

.PHONY: clean
clean: ## remove the Python environment (the Go binary cache is kept)
	rm -rf $(VENV) $(TOOLS) .mypy_cache .ruff_cache .pytest_cache
