# Developer entry points. `make demo` and `make test` are the README's two quick-start commands.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup demo test lint bench clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

setup: $(BIN)/.installed

demo: setup
	$(BIN)/jbodctl local demo

test: setup
	$(BIN)/ruff check core controller client agent operator tests bench
	$(BIN)/mypy core controller client agent operator
	$(BIN)/pytest

lint: setup
	$(BIN)/ruff check core controller client agent operator tests bench
	$(BIN)/ruff format --check core controller client agent operator tests bench
	$(BIN)/mypy core controller client agent operator

bench: setup
	$(BIN)/python -m bench.run_all

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
