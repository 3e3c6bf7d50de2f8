"""Compaction of transactional data on our broker beside Apache Kafka 4.3.1's: the same
transactional workload (tests/kafka_api/test_compaction_txn.py: commits and aborts over
overlapping keys) on a compacted topic of each, cleaned with the same settings; both leave the
same key -> value map (the latest committed value of each key, once) to read_committed and
read_uncommitted consumers alike, and both logs end with no abort marker and a commit marker
only where its transaction still has data."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from e2e.kafka_tools import KafkaCluster as RealKafka
from e2e.kafka_tools import KafkaInstall, ScramUser
from tests.kafka_api import test_compaction_txn as workload
from tests.kafka_api.conftest import start_kafka_cluster
from tests.kafka_tools.test_harness import install  # noqa: F401  the module's fixture: Kafka's jars or a skip

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(900)]

CLEANER = {"log.cleaner.backoff.ms": "200", "log.segment.bytes": "1048576"}


def _config(bootstrap: str, user: str, password: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": password,
    }


Views = tuple[list[tuple[bytes, bytes]] | None, list[tuple[bytes, bytes]] | None, bool]


def _cleaned_views(config: dict[str, Any], dirs: Sequence[Path], side: str) -> Views:
    """Run the workload, wait until it is cleaned and its markers settled: what a read_committed
    and a read_uncommitted consumer read then (sorted), and whether the markers settled."""
    committed = workload.write_transactions(config)
    (replica,) = [d / f"{workload.TOPIC}-0" for d in dirs if (d / f"{workload.TOPIC}-0").is_dir()]
    workload.wait_cleaned(config, committed, f"{side}: the latest committed value of each key only")
    workload.wait_settled(config, replica)
    views = [workload.read(config, isolation) for isolation in ("read_committed", "read_uncommitted")]
    return (
        None if views[0] is None else sorted(views[0]),
        None if views[1] is None else sorted(views[1]),
        workload.markers_settled(replica),
    )


@pytest.fixture(scope="module")
def kafka_views(install: KafkaInstall) -> Iterator[Views]:  # noqa: F811
    user = ScramUser()
    with RealKafka(install, scram=user, properties=CLEANER) as real:
        config = _config(real.bootstrap, user.name, user.password)
        workload.create_topic(config)
        yield _cleaned_views(config, real.log_dirs, "Kafka")


def test_the_same_map_as_kafka(kafka_views: Views, tmp_path_factory: pytest.TempPathFactory) -> None:
    with contextlib.ExitStack() as stack:
        ours = start_kafka_cluster(
            stack,
            tmp_path_factory.mktemp("compaction-txn-vs-kafka"),
            brokers=1,
            **{k.replace(".", "_"): v for k, v in CLEANER.items()},
        )
        config = _config(ours.cluster.brokers[1].kafka["SASL_PLAINTEXT"], "admin", ours.admin_password)
        workload.create_topic(config)
        dirs = [Path(d["path"]) for d in ours.cluster.log_dirs(1)]
        our_views = _cleaned_views(config, dirs, "ours")
    assert our_views == kafka_views
    assert our_views[2]
