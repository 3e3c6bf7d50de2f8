# Developer entry points. `make demo` and `make test` are the README's two quick-start commands.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup demo test lint bench clean e2e-toolchain e2e

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,pipeline]'
	touch $@

setup: $(BIN)/.installed

demo: setup
	$(BIN)/jbodctl local demo

test: setup e2e-toolchain
	$(BIN)/ruff check core controller client agent operator pipeline e2e tests bench
	$(BIN)/mypy core controller client agent operator pipeline e2e
	JBOD_E2E_REQUIRED=1 $(BIN)/pytest

lint: setup
	$(BIN)/ruff check core controller client agent operator pipeline e2e tests bench
	$(BIN)/ruff format --check core controller client agent operator pipeline e2e tests bench
	$(BIN)/mypy core controller client agent operator pipeline e2e

bench: setup
	$(BIN)/python -m bench.run_all

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# The e2e control plane (etcd, kube-apiserver, controller-manager, scheduler, kubectl, kwok, helm)
# built from Go modules once and cached in ~/.cache/jbod-e2e (a cold build takes ~20 min).
e2e-toolchain: setup
	$(BIN)/python -m e2e.toolchain build

e2e: e2e-toolchain
	JBOD_E2E_REQUIRED=1 $(BIN)/pytest -m e2e tests/e2e_harness tests/e2e
