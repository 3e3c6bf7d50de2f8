"""Spark reads the brokers (issue 23): `jbod-pipeline topic-stats`, the real command in a
subprocess, reads a topic of a real local cluster's Kafka listeners through Spark's own Kafka
source (`spark-sql-kafka-0-10`, the jars from Maven Central), logging in with the client
properties file `jbodctl local client-properties` prints, and writes what confluent-kafka
produced there; an unknown topic and a refused login are one error line.

One small cluster for the module (two brokers), a few records.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient

from jbod_local import kafka_clients
from jbod_pipeline import kafka_source
from jbod_runtime import maven_jars
from tests.kafka_api.conftest import KafkaCluster, start_kafka_cluster

pytestmark = [pytest.mark.slow, pytest.mark.integration]

PARTITIONS = 3


@pytest.fixture(scope="module")
def connector() -> maven_jars.Resolved:
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if missing:
        reason = f"{' and '.join(missing)} not on PATH (Spark's Kafka source comes from Maven Central)"
        if os.environ.get("JBOD_E2E_REQUIRED"):
            pytest.fail(f"Spark's Kafka source required (JBOD_E2E_REQUIRED=1) but {reason}")
        pytest.skip(reason)
    return kafka_source.ensure_jars(kafka_source.installed_spark())


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory, connector: maven_jars.Resolved) -> Iterator[KafkaCluster]:
    with contextlib.ExitStack() as stack:
        yield start_kafka_cluster(stack, tmp_path_factory.mktemp("kafka"), brokers=2)


def _new_topic(kafka: KafkaCluster) -> str:
    name = f"clicks-{uuid.uuid4().hex[:8]}"
    kafka.cluster.admin.create_topic(name, partitions=PARTITIONS, replication_factor=2)
    admin = AdminClient(kafka.client_config())
    deadline = time.monotonic() + 20
    while True:  # until every leader is known to the brokers
        topic = admin.list_topics(topic=name, timeout=10).topics[name]
        partitions = topic.partitions.values()
        if topic.error is None and len(partitions) == PARTITIONS and all(p.leader >= 0 for p in partitions):
            return name
        assert time.monotonic() < deadline, f"topic {name} never got leaders: {topic}"
        time.sleep(0.1)


def _produce(kafka: KafkaCluster, topic: str) -> list[Message]:
    """30 records over the partitions, keys k0..k3 on most of them, none on every fifth; the last
    is a tombstone (no value)."""
    producer = Producer(kafka.client_config(acks="all"))
    acked: list[Message] = []
    failed: list[KafkaError] = []

    def delivered(err: KafkaError | None, msg: Message) -> None:
        (failed.append(err) if err is not None else acked.append(msg))

    for i in range(30):
        key = f"k{i % 4}".encode() if i % 5 else None
        value = f"value-{i};".encode() * (1 + i % 3) if i < 29 else None
        producer.produce(topic, key=key, value=value, partition=i % PARTITIONS, on_delivery=delivered)
    assert producer.flush(60) == 0 and failed == []
    return acked


def _topic_stats(
    kafka: KafkaCluster, topic: str, properties: str, out: Path
) -> subprocess.CompletedProcess[str]:
    config = out.with_name(f"{out.name}.properties")
    config.write_text(properties)
    return subprocess.run(
        [sys.executable, "-m", "jbod_pipeline.cli", "topic-stats", "--bootstrap-server", kafka.bootstrap,
         "--command-config", str(config), "--topic", topic, "--out", str(out),
         "--master", "local[2]", "--shuffle-partitions", "2"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def _one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, (done.stdout, done.stderr[-3000:])
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("jbod-pipeline: error: ")]
    assert len(errors) == 1 and done.stderr.rstrip().endswith(errors[0]), done.stderr[-3000:]
    return errors[0].removeprefix("jbod-pipeline: error: ")


def test_topic_stats_reads_what_was_produced(kafka: KafkaCluster, tmp_path: Path) -> None:
    topic = _new_topic(kafka)
    acked = _produce(kafka, topic)
    done = _topic_stats(kafka, topic, kafka_clients.client_properties(kafka.admin_password), tmp_path / "out")
    assert done.returncode == 0, done.stderr[-3000:]

    by_partition: dict[int, list[Message]] = defaultdict(list)
    by_key: dict[str | None, list[Message]] = defaultdict(list)
    for msg in acked:
        by_partition[msg.partition()].append(msg)
        key = msg.key()
        by_key[key.decode() if key is not None else None].append(msg)
    expected_partitions = [
        {
            "topic": topic,
            "partition": p,
            "records": len(msgs),
            "keyBytes": sum(len(m.key() or b"") for m in msgs),
            "valueBytes": sum(len(m.value() or b"") for m in msgs),
            "keys": len({m.key() for m in msgs if m.key() is not None}),
            "firstOffset": min(m.offset() for m in msgs),
            "lastOffset": max(m.offset() for m in msgs),
        }
        for p, msgs in sorted(by_partition.items())
    ]
    partitions = pq.read_table(tmp_path / "out" / "topic_partitions").to_pylist()
    times = [(row.pop("firstTimestamp"), row.pop("lastTimestamp")) for row in partitions]
    assert partitions == expected_partitions
    assert all(first <= last for first, last in times)

    expected_keys = {
        key: {"records": len(msgs), "valueBytes": sum(len(m.value() or b"") for m in msgs),
              "partitions": len({m.partition() for m in msgs})}
        for key, msgs in by_key.items()
    }  # fmt: skip
    keys = pq.read_table(tmp_path / "out" / "topic_keys").to_pylist()
    assert {row.pop("key"): row for row in keys} == {
        k: {"topic": topic, **v} for k, v in expected_keys.items()
    }
    assert [row["records"] for row in keys] == sorted((row["records"] for row in keys), reverse=True)

    assert sum(m.value() is None for m in acked) == 1
    total = sum(len(m.key() or b"") + len(m.value() or b"") for m in acked)
    summary = f"topic-stats: {topic}: 30 record(s), {total} byte(s) in {PARTITIONS} partition(s), 4 key(s)"
    assert summary in done.stdout.splitlines(), done.stdout
    assert "Records read from each partition" in (tmp_path / "out" / "report.html").read_text()


def test_an_unknown_topic_is_one_line(kafka: KafkaCluster, tmp_path: Path) -> None:
    done = _topic_stats(
        kafka, "no-such-topic", kafka_clients.client_properties(kafka.admin_password), tmp_path / "out"
    )
    assert _one_error_line(done) == f"topic 'no-such-topic' does not exist (asked {kafka.bootstrap})"


def test_a_refused_login_is_one_line(kafka: KafkaCluster, tmp_path: Path) -> None:
    topic = _new_topic(kafka)
    done = _topic_stats(kafka, topic, kafka_clients.client_properties("wrong-password"), tmp_path / "out")
    assert _one_error_line(done).startswith(
        f"login as admin over SASL_PLAINTEXT/SCRAM-SHA-512 refused by {kafka.bootstrap}"
    )
