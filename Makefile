# Developer entry points. `make demo` and `make test` are the README's two quick-start commands.
#
# `make demo` needs only the core install (about 230 MB); `make test` adds the dev and pipeline
# extras to the same venv. A venv made by a Python older than 3.11 is replaced, not reused.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SOURCES := core kafka runtime controller client local cli agent operator pipeline e2e tests bench
TYPED := core kafka runtime controller client local cli agent operator pipeline e2e bench

.PHONY: setup setup-dev demo test lint format bench clean e2e-toolchain e2e-images e2e kafka-tools spark-kafka schema-registry kind-up kind-down python-check

python-check:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
	  || { echo "error: $(PYTHON) is $$($(PYTHON) -V 2>&1); jbod-operator needs Python 3.11 or newer (make PYTHON=python3.11 ...)"; exit 1; }

# Decided when the Makefile is read, before any target looks at the venv's stamp files.
ifneq ($(wildcard $(BIN)/python*),)
ifneq ($(shell $(BIN)/python -c 'import sys; print(int(sys.version_info >= (3, 11)))' 2>/dev/null),1)
$(info $(VENV) was made by an unsupported or missing Python; recreating it)
$(shell rm -rf $(VENV))
endif
endif

$(BIN)/.installed: pyproject.toml | python-check
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $@

$(BIN)/.installed-dev: $(BIN)/.installed pyproject.toml
	$(BIN)/pip install --quiet -e '.[dev,pipeline]'
	touch $@

setup: python-check $(BIN)/.installed

setup-dev: python-check $(BIN)/.installed-dev

demo: setup
	$(BIN)/jbodctl local demo

# Two passes side by side (tests/conftest.py, e2e/tiers.py): everything but the kind tier on three
# workers, and the kind tier in one process as soon as its toolchain and images (built niced in
# the background) are ready; its output is printed after the first pass's. Each step prints its
# duration.
PYTEST_WORKERS ?= 3
test: lint kafka-tools spark-kafka schema-registry
	$(BIN)/python -m e2e.tiers --workers $(PYTEST_WORKERS)

lint: setup-dev
	$(BIN)/ruff check $(SOURCES)
	$(BIN)/ruff format --check $(SOURCES)
	$(BIN)/mypy $(TYPED)
	$(BIN)/lint-imports

format: setup-dev
	$(BIN)/ruff format $(SOURCES)
	$(BIN)/ruff check --fix $(SOURCES)

bench: setup-dev
	$(BIN)/python -m bench.run_all

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# The e2e tier's binaries (Kubernetes, etcd, containerd, crictl, CoreDNS, local-path-provisioner,
# kind, helm) built from Go modules once and cached in ~/.cache/jbod-e2e (a cold build takes ~11 min).
e2e-toolchain: setup-dev
	$(BIN)/python -m e2e.toolchain build

# The e2e tier's images, built without any registry: a Debian base (debootstrap), the kind node
# image, the project image. Needs root (debootstrap; its own dockerd when none runs); cached in
# the engine's data root (~/.cache/jbod-e2e/docker).
e2e-images: e2e-toolchain
	@if [ "$$(id -u)" = 0 ]; then $(BIN)/python -m e2e.kind images --offline; \
	else echo "e2e-images: skipped (needs root: debootstrap, its own dockerd); the e2e tier skips too"; fi

# Apache Kafka's own tools (kafka-topics.sh, kafka-configs.sh, ...) and server, run from Kafka's jars
# on Maven Central: resolved once with Maven and cached in ~/.cache/jbod-kafka (~15 s cold).
kafka-tools: setup-dev
	$(BIN)/python -m e2e.kafka_tools jars

# Spark's Kafka source (spark-sql-kafka-0-10 for the installed PySpark, with its dependencies) from
# Maven Central: resolved once with Maven and cached in ~/.cache/jbod-spark (`jbod-pipeline topic-stats`).
spark-kafka: setup-dev
	$(BIN)/jbod-pipeline kafka-jars

# Apicurio Registry (a schema registry storing in a topic: KafkaSQL) as Apicurio publishes it on
# Maven Central, the Quarkus application's archive: fetched once with Maven and unpacked into
# ~/.cache/jbod-registry (~16 s cold, 115 MiB; tests/kafka_tools/test_schema_registry.py).
schema-registry: setup-dev
	$(BIN)/python -m e2e.schema_registry fetch

e2e: e2e-images
	JBOD_E2E_REQUIRED=1 $(BIN)/pytest -m e2e tests/e2e

# The README's Kubernetes section: a kind cluster named jbod with the chart installed
# (KIND_FLAGS=--offline builds the node image locally instead of using kind's).
kind-up: setup-dev
	$(BIN)/python -m e2e.kind up $(KIND_FLAGS)

kind-down: setup-dev
	$(BIN)/python -m e2e.kind down
