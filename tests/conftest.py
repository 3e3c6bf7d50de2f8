"""Shared fixtures: a real controller process per test (see tests/harness.py).

`make test` runs the suite in two passes side by side (e2e/tiers.py): everything but the kind tier
on pytest-xdist workers (`pytest -m "not e2e" --numprocesses 3 --dist loadfile`), and the kind
tier in one process (`pytest -m e2e`) once its images are built. On the workers the tests of a
file run on one worker, so a module's shared cluster is started once (`loadfile`: xdist 3.8's
`loadgroup` silently loses its groups under pytest 9, whose node ids it can no longer suffix, and
spread every module over every worker); the longest files start first. Everything else uses its
own temporary directory and ports picked by the kernel, so it may run beside anything.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import ControllerProcess

# Groups that take the longest, started first (longest first) so that no worker is left with
# them at the end: the kind tier, the Spark session's tests, then the modules that took longer
# than ~140 s of one worker in a profile of the whole pass (junit times, 2026-12-05).
_FIRST: tuple[str, ...] = (
    "kind",
    "spark",
    "tests/kafka_tools/test_our_brokers.py",
    "tests/kafka_tools/test_harness.py",
    "tests/kafka_tools/test_java_transactions.py",
    "tests/client/test_local_tls.py",
    "tests/client/test_readme_sections.py",
    "tests/broker/test_bootstrap.py",
    "tests/broker/test_kip112.py",
    "tests/client/test_local_cluster.py",
    "tests/kafka_tools/test_error_responses.py",
    "tests/kafka_tools/test_kafka_connect.py",
    "tests/client/test_local_quorum.py",
    "tests/kafka_api/test_groups.py",
    "tests/kafka_tools/test_leader_election_vs_kafka.py",
    "tests/client/test_cli_data.py",
    "tests/broker/test_replication.py",
    "tests/kafka_tools/test_kafka_streams.py",
)


def _group(item: pytest.Item) -> str:
    if item.get_closest_marker("e2e") is not None:
        return "kind"
    if "spark" in getattr(item, "fixturenames", ()):  # tests/pipeline's shared session, directly or not
        return "spark"
    return item.nodeid.split("::", 1)[0]


# A test's time limit counts its fixtures' setup: the first Spark test of a worker builds the
# session and computes every job of a generated cluster (tests/pipeline/conftest.py `computed`),
# 308 s on the loaded machine beside two other Spark sessions and the kind tier.
SPARK_TIMEOUT_S = 1200


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest groups first (a stable sort: a file's tests stay together and in order); the
    Spark tests get `SPARK_TIMEOUT_S` unless they set their own."""
    rank = {group: n for n, group in enumerate(_FIRST)}
    groups = {item.nodeid: _group(item) for item in items}
    for item in items:
        if groups[item.nodeid] == "spark" and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SPARK_TIMEOUT_S))
    items.sort(key=lambda item: rank.get(groups[item.nodeid], len(_FIRST)))


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[ControllerProcess]:
    with ControllerProcess(data_dir=tmp_path / "controller") as proc:
        yield proc
