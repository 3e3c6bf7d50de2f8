"""Kafka Streams (Apache Kafka 4.3.1's `kafka-streams` and its `WordCountDemo` from
`kafka-streams-examples`, Maven Central) on a cluster of ours, logged in with SCRAM (issue 32).

WordCountDemo splits lines into words, repartitions them by word (an internal repartition topic)
and counts them in a KTable (a state store with a compacted changelog topic), at_least_once. The
counts it writes are checked against a count of our own; Streams creates its internal topics
with the configs it asks for (the changelog compacted) and purges the repartition topic with
DeleteRecords after its commits; the brokers' cleaners compact the changelog (read from the
beginning it holds fewer records than offsets, and the latest count of each word).

The same application with `processing.guarantee=exactly_once_v2` (issue 33: transactions), killed
with kill -9 halfway and started again: a read_committed consumer of its output ends with exactly
our counts, none counted twice (at least once would recount what the killed instance had
processed but not committed).
"""

from __future__ import annotations

import collections
import contextlib
import random
import re
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from e2e import kafka_tools
from e2e.kafka_tools import KafkaInstall
from e2e.wait import wait_for
from tests.kafka_api.conftest import KafkaCluster, start_kafka_cluster
from tests.kafka_tools.test_harness import install  # noqa: F401  the module's fixture: Kafka's jars or a skip

pytestmark = [pytest.mark.slow, pytest.mark.integration]

INPUT, OUTPUT = "streams-plaintext-input", "streams-wordcount-output"  # WordCountDemo's topics
PREFIX = "streams-wordcount-"  # its application id: the prefix of its internal topics
LINES = 600
PARTITIONS = 3


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaCluster]:
    with contextlib.ExitStack() as stack:
        yield start_kafka_cluster(stack, tmp_path / "cluster", brokers=3, log_cleaner_backoff_ms="200")


def _lines() -> list[str]:
    """Lines of words whose counts differ from word to word."""
    rng = random.Random(32)
    vocabulary = [f"word{n}" for n in range(40)]
    weights = [1 + n % 7 for n in range(40)]
    return [" ".join(rng.choices(vocabulary, weights, k=rng.randint(1, 8))) for _ in range(LINES)]


def _streams_app(
    kafka_install: KafkaInstall, kafka: KafkaCluster, work: Path, *, guarantee: str = "at_least_once"
) -> subprocess.Popen[bytes]:
    config = kafka.client_config()
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{config["sasl.username"]}" password="{config["sasl.password"]}";'
    )
    properties = {
        "bootstrap.servers": config["bootstrap.servers"],
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": jaas,
        "state.dir": str(work / "state"),
        "replication.factor": "3",
        "processing.guarantee": guarantee,
        "commit.interval.ms": "500",
        "repartition.purge.interval.ms": "1000",
    }
    work.mkdir(parents=True, exist_ok=True)
    (work / "streams.properties").write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
    command = [
        kafka_tools.java(),
        "-Xmx512M",
        "-cp",
        kafka_install.classpath,
        "org.apache.kafka.streams.examples.wordcount.WordCountDemo",
        str(work / "streams.properties"),
    ]
    with open(work / "streams.out", "ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)


def _read_changelog(config: dict[str, object], topic: str) -> tuple[int, int, dict[str, int]]:
    """The records read from the beginning of every partition of the changelog, the offsets they
    span (end - start), and the latest count of each word in it."""
    consumer = Consumer({**config, "group.id": "changelog-reader", "enable.auto.commit": False})
    try:
        spans = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in range(PARTITIONS)
        }
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        positions = {p: low for p, (low, _high) in spans.items()}
        records = 0
        counts: dict[str, int] = {}
        while any(positions[p] < high for p, (_low, high) in spans.items()):
            message = consumer.poll(10)
            assert message is not None and message.error() is None, message and message.error()
            if message.offset() >= spans[message.partition()][1]:
                continue
            records += 1
            positions[message.partition()] = message.offset() + 1
            if message.value() is not None:
                counts[message.key().decode()] = struct.unpack(">q", message.value())[0]
        return records, sum(high - low for low, high in spans.values()), counts
    finally:
        consumer.close()


def test_word_count_counts_what_we_count_with_a_compacted_changelog_and_a_purged_repartition_topic(
    install: KafkaInstall,  # noqa: F811
    kafka: KafkaCluster,
    tmp_path: Path,
) -> None:
    config = kafka.client_config()
    admin = AdminClient(config)
    for future in admin.create_topics([NewTopic(t, PARTITIONS, 3) for t in (INPUT, OUTPUT)]).values():
        future.result(30)
    lines = _lines()
    expected = collections.Counter(w for line in lines for w in re.split(r"\W+", line.lower()) if w)

    app = _streams_app(install, kafka, tmp_path / "streams")
    log = tmp_path / "streams" / "streams.out"
    try:
        producer = Producer({**config, "acks": "all"})
        for line in lines:
            producer.produce(INPUT, line.encode())
        assert producer.flush(30) == 0

        consumer = Consumer({**config, "group.id": "check", "auto.offset.reset": "earliest"})
        consumer.subscribe([OUTPUT])
        latest: dict[str, int] = {}

        def counted() -> bool:
            assert app.poll() is None, log.read_text(errors="replace")[-3000:]
            for message in consumer.consume(500, 1.0):
                assert message.error() is None, message.error()
                latest[message.key().decode()] = struct.unpack(">q", message.value())[0]
            return latest == dict(expected)

        try:
            wait_for(counted, timeout=120, what=lambda: f"the counts ({len(latest)} words so far)")
        finally:
            consumer.close()

        topics = admin.list_topics(timeout=30).topics
        internal = sorted(t for t in topics if t.startswith(PREFIX) and t not in (INPUT, OUTPUT))
        changelogs = [t for t in internal if t.endswith("-changelog")]
        repartitions = [t for t in internal if t.endswith("-repartition")]
        assert len(changelogs) == len(repartitions) == 1, internal
        resources = [ConfigResource(ResourceType.TOPIC, t) for t in internal]
        policies = {
            r.name: f.result(30)["cleanup.policy"].value for r, f in admin.describe_configs(resources).items()
        }
        assert policies == {changelogs[0]: "compact", repartitions[0]: "delete"}

        # Streams deletes the repartition records it has committed (DeleteRecords).
        watcher = Consumer({**config, "group.id": "watermarks"})
        try:

            def purged() -> bool:
                starts = [
                    watcher.get_watermark_offsets(TopicPartition(repartitions[0], p), timeout=10)[0]
                    for p in range(PARTITIONS)
                ]
                return sum(starts) > 0

            wait_for(purged, timeout=60, what="the repartition topic purged by Streams")
        finally:
            watcher.close()

        # The changelog compacted: segments rolled by time, cleaned at any dirty ratio.
        changelog = ConfigResource(
            ResourceType.TOPIC,
            changelogs[0],
            incremental_configs=[
                ConfigEntry("segment.ms", "300", incremental_operation=AlterConfigOpType.SET),
                ConfigEntry("min.cleanable.dirty.ratio", "0.01", incremental_operation=AlterConfigOpType.SET),
            ],
        )
        admin.incremental_alter_configs([changelog])[changelog].result(30)

        def compacted() -> bool:
            producer.produce(INPUT, b"tick")  # a changelog append: rolls its old segment
            assert producer.flush(30) == 0
            records, offsets, counts = _read_changelog(config, changelogs[0])
            counts.pop("tick", None)
            return records < offsets and counts == dict(expected)

        wait_for(compacted, timeout=90, interval=1.0, what="the changelog compacted by the brokers")
    finally:
        app.terminate()
        app.wait(60)


def test_word_count_exactly_once_counts_nothing_twice_across_a_kill(
    install: KafkaInstall,  # noqa: F811
    kafka: KafkaCluster,
    tmp_path: Path,
) -> None:
    config = kafka.client_config()
    admin = AdminClient(config)
    for future in admin.create_topics([NewTopic(t, PARTITIONS, 3) for t in (INPUT, OUTPUT)]).values():
        future.result(30)
    lines = _lines()
    expected = collections.Counter(w for line in lines for w in re.split(r"\W+", line.lower()) if w)
    producer = Producer({**config, "acks": "all"})
    consumer = Consumer(
        {**config, "group.id": "check", "auto.offset.reset": "earliest", "isolation.level": "read_committed"}
    )
    consumer.subscribe([OUTPUT])
    latest: dict[str, int] = {}
    work = tmp_path / "streams"
    app = _streams_app(install, kafka, work, guarantee="exactly_once_v2")
    try:

        def read_some() -> bool:
            assert app.poll() is None, (work / "streams.out").read_text(errors="replace")[-3000:]
            for message in consumer.consume(500, 1.0):
                assert message.error() is None, message.error()
                latest[message.key().decode()] = struct.unpack(">q", message.value())[0]
            return bool(latest)

        half = len(lines) // 2
        for line in lines[:half]:
            producer.produce(INPUT, line.encode())
        assert producer.flush(30) == 0
        wait_for(read_some, timeout=120, what="the first committed counts")
        app.kill()  # kill -9: its open transaction is aborted, its state restored from the changelog
        app.wait(30)
        for line in lines[half:]:
            producer.produce(INPUT, line.encode())
        assert producer.flush(30) == 0
        app = _streams_app(install, kafka, work, guarantee="exactly_once_v2")

        def counted() -> bool:
            read_some()
            assert all(latest[w] <= expected[w] for w in latest), "a word counted twice"
            return latest == dict(expected)

        wait_for(counted, timeout=180, what=lambda: f"the counts ({len(latest)} words so far)")
    finally:
        consumer.close()
        app.terminate()
        app.wait(60)
