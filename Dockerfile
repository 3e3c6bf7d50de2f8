# One image for every long-running part of the system: jbod-operator (the default command),
# jbod-controller, jbod-agent, jbod-storage and jbodctl. The operator starts controllers and
# brokers from its own image with an explicit `command`, so nothing here is tied to one of them.
#
#   docker build -t ghcr.io/jbod-dev/jbod:0.1.0 .                                     # runtime (default)
#   docker build --target pipeline -t ghcr.io/jbod-dev/jbod:0.1.0-pipeline .          # + PySpark, Java 17
#
# Without registry access (docs/install.md, "Building the image offline"): a local Python 3.11
# base image and a wheelhouse made on the host, so no CA certificate enters the build:
#   docker build --target runtime --build-arg PYTHON_IMAGE=jbod-local/python:3.11-bookworm \
#     --build-arg WHEELHOUSE=.wheelhouse -t jbod:dev .
#
# Read-only root filesystem: the image writes nothing at run time outside /tmp (HOME and
# TMPDIR), which the pods mount as an emptyDir; bytecode is compiled at build time and
# PYTHONDONTWRITEBYTECODE keeps Python from trying to write more. Runs as uid/gid 10001.
# PYTHONFAULTHANDLER: a native crash (SIGSEGV, SIGABRT) prints every thread's Python stack to the
# container's log, which `kubectl logs --previous` shows.
#
# Debian 12 (bookworm) is pinned rather than python:3.11-slim's moving Debian release: the
# pipeline target installs openjdk-17-jre-headless, which bookworm ships and later releases drop.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---------------------------------------------------------------------------------------------
# builder: a wheel of this repository, installed with its dependencies into the venv /opt/jbod.
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
# WHEELHOUSE: a directory of the build context holding every wheel the install needs (made on the
# host with `pip wheel`), for machines whose builds cannot reach PyPI; empty = install from PyPI.
ARG WHEELHOUSE=""
WORKDIR /src
# .dockerignore admits only what the wheel is built from (pyproject.toml, README.md, the source
# roots) and .wheelhouse/.
COPY . .
RUN offline="${WHEELHOUSE:+--no-index --find-links /src/${WHEELHOUSE}}" \
    && python -m pip wheel $offline --no-deps --wheel-dir /wheels . \
    && python -m venv /opt/jbod \
    && /opt/jbod/bin/pip install $offline /wheels/*.whl \
    && /opt/jbod/bin/jbod-operator --help > /dev/null \
    && /opt/jbod/bin/jbod-controller --help > /dev/null \
    && /opt/jbod/bin/jbod-agent --help > /dev/null

# ---------------------------------------------------------------------------------------------
# base: what both final images share; no venv yet.
FROM ${PYTHON_IMAGE} AS base
# A passwd entry for uid 10001: the JVM (Spark, Hadoop's user lookup) fails without one.
RUN groupadd --gid 10001 jbod \
    && useradd --uid 10001 --gid 10001 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin jbod
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONFAULTHANDLER=1 \
    HOME=/tmp \
    TMPDIR=/tmp \
    VIRTUAL_ENV=/opt/jbod \
    PATH=/opt/jbod/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /tmp
LABEL org.opencontainers.image.title="jbod" \
      org.opencontainers.image.description="Operator, metadata controller and broker agent for JBOD brokers (KIP-858/KIP-112)" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0"

# ---------------------------------------------------------------------------------------------
# runtime (the default target): operator, controller, agent, storage tool and jbodctl.
FROM base AS runtime
COPY --from=builder /opt/jbod /opt/jbod
USER 10001:10001
EXPOSE 8000 8080 9092 9093 9192
CMD ["jbod-operator"]

# ---------------------------------------------------------------------------------------------
# pipeline-builder: the same venv plus PySpark for `jbod-pipeline`, the version pyproject.toml's
# `pipeline` extra pins (Spark's Kafka source must match it; a test keeps the two equal).
FROM builder AS pipeline-builder
ARG PYSPARK_REQUIREMENT="pyspark==4.2.0"
RUN /opt/jbod/bin/pip install "${PYSPARK_REQUIREMENT}"

# ---------------------------------------------------------------------------------------------
# pipeline: the runtime plus a Java 17 JRE and PySpark, for `jbod-pipeline` (the chart's
# analytics CronJob). Spark writes its scratch files to /tmp (SPARK_LOCAL_DIRS).
FROM base AS pipeline
# mkdir: the slim image has no man pages directory, which the JRE's postinst links into.
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /usr/lib/jvm/java-17 \
    && /usr/lib/jvm/java-17/bin/java -version \
    && rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME=/usr/lib/jvm/java-17 \
    SPARK_LOCAL_DIRS=/tmp \
    SPARK_USER=jbod
COPY --from=pipeline-builder /opt/jbod /opt/jbod
USER 10001:10001
CMD ["jbod-pipeline", "--help"]

# ---------------------------------------------------------------------------------------------
# The default target is the runtime. Stages are in build order: the legacy builder (no BuildKit)
# builds every stage up to its target, so `--target runtime` never installs PySpark.
FROM runtime AS default
