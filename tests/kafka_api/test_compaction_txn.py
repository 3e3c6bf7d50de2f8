"""Compaction of transactional data on a cluster of ours (issue 33), seen by librdkafka: a
transactional producer commits and aborts transactions whose keys overlap (the last transactions
aborted over every key, and some keys written only by aborted ones); once cleaned, a
read_committed and a read_uncommitted consumer both read exactly the latest committed value of
each key, once (the aborted values are gone from the log, and never hid a committed one); after
`delete.retention.ms` no abort marker is left in the log's files and every commit marker left
still has data of its transaction before it (the producer's last batch aside, kept whole); the same after a kill -9 and restart (recovery
rebuilds the producer state and the `.txnindex`). tests/kafka_tools/test_compaction_txn_vs_kafka.py
runs the same against Apache Kafka."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from e2e.wait import wait_for
from jbod_kafka import control_records, record_batch
from tests.kafka_api.conftest import KafkaCluster, start_kafka_cluster

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(600)]

TOPIC = "txn-compacted"
KEYS = 60
TXNS = 40
FILLER = b"filler"  # plain records written until the data's segments roll and get cleaned
TIMEOUT = 30.0


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with contextlib.ExitStack() as stack:
        yield start_kafka_cluster(
            stack,
            tmp_path_factory.mktemp("compaction-txn"),
            brokers=1,
            log_cleaner_backoff_ms="200",
            log_segment_bytes="65536",
        )


def topic_configs() -> dict[str, str]:
    return {
        "cleanup.policy": "compact",
        "segment.ms": "500",
        "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "5000",
    }


def create_topic(config: dict[str, Any]) -> None:
    admin = AdminClient(config)
    admin.create_topics([NewTopic(TOPIC, 1, 1, config=topic_configs())])[TOPIC].result(TIMEOUT)


def write_transactions(config: dict[str, Any]) -> dict[bytes, bytes]:
    """Commit and abort `TXNS` transactions over overlapping keys; the latest committed value of
    each key."""
    producer = Producer({**config, "transactional.id": "compacting", "linger.ms": 5})
    producer.init_transactions(TIMEOUT)
    committed: dict[bytes, bytes] = {}
    for txn in range(TXNS):
        aborting = txn % 3 == 1 or txn >= TXNS - 2  # the last two abort over every key
        keys = range(KEYS) if txn >= TXNS - 2 else range(txn % 7, KEYS, 3)
        producer.begin_transaction()
        written = {b"k%d" % k: b"t%d-k%d" % (txn, k) * 30 for k in keys}
        written[b"aborted-only-%d" % txn if aborting else b"committed-%d" % txn] = b"t%d" % txn
        for key, value in written.items():
            producer.produce(TOPIC, value, key=key, partition=0)
        producer.flush(TIMEOUT)
        if aborting:
            producer.abort_transaction(TIMEOUT)
        else:
            producer.commit_transaction(TIMEOUT)
            committed.update(written)
    before = read(config, "read_committed")
    assert before is not None and dict(before) == committed  # the latest of each key is read last
    return committed


def read(config: dict[str, Any], isolation: str) -> list[tuple[bytes, bytes]] | None:
    """Every (key, value) but the filler a consumer with `isolation` reads from the beginning to
    the end it is served; None while the partition cannot be read (a restart)."""
    consumer = Consumer(
        {
            **config,
            "group.id": f"read-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        records: list[tuple[bytes, bytes]] = []
        while True:
            message = consumer.poll(TIMEOUT)
            if message is None:
                return None
            if message.error() is not None:
                if message.error().code() == KafkaError._PARTITION_EOF:
                    return records
                raise KafkaException(message.error())
            if message.key() != FILLER:
                records.append((message.key(), message.value()))
    except KafkaException:
        return None
    finally:
        consumer.close()


def wait_cleaned(config: dict[str, Any], expected: dict[bytes, bytes], what: str) -> None:
    """Write filler (rolling the active segment once old) until a read_committed and a
    read_uncommitted consumer both read exactly `expected`, each key once."""
    filler = Producer({**config, "acks": "all", "linger.ms": 5})
    wanted = sorted(expected.items())

    def cleaned() -> bool:
        filler.produce(TOPIC, b"f", key=FILLER, partition=0)
        filler.flush(TIMEOUT)
        return all(
            (records := read(config, isolation)) is not None and sorted(records) == wanted
            for isolation in ("read_committed", "read_uncommitted")
        )

    wait_for(cleaned, timeout=120, interval=1.0, what=what)


def control_batches(replica: Path) -> list[tuple[record_batch.BatchHeader, bool | None]] | None:
    """The batches of the closed segments of the replica dir `replica`, read from the broker's
    files, each with whether it is an abort marker (None: not a marker); None while a swap
    renames files."""
    try:
        found: list[tuple[record_batch.BatchHeader, bool | None]] = []
        for log in sorted(replica.glob("*.log"))[:-1]:
            data = log.read_bytes()
            for header in record_batch.iter_headers(data):
                marker = None
                if header.is_control and header.record_count:
                    frame = data[header.position : header.position + header.size]
                    marker = control_records.read_marker(frame).aborted
                found.append((header, marker))
        return found
    except (FileNotFoundError, ValueError):
        return None


def markers_settled(replica: Path) -> bool:
    """No abort marker left, some commit marker left, and data of the (one) transactional
    producer before each (since the previous one); the producer's last batch aside (a marker
    kept whole, as Kafka keeps it)."""
    batches = control_batches(replica)
    if batches is None:
        return False
    producer_ids = [header.producer_id for header, _ in batches]
    last = max(i for i, (header, _) in enumerate(batches) if header.is_transactional)
    assert len({p for p in producer_ids if p >= 0}) == 1  # one transactional producer
    data_since_marker = False
    commits = 0
    for header, aborted in batches[:last]:
        if aborted is True:
            return False
        if aborted is False:
            if not data_since_marker:
                return False
            data_since_marker = False
            commits += 1
        elif header.is_transactional and header.record_count:
            data_since_marker = True
    return commits > 0


def wait_settled(config: dict[str, Any], replica: Path) -> None:
    filler = Producer({**config, "acks": "all", "linger.ms": 5})

    def settled() -> bool:
        filler.produce(TOPIC, b"f", key=FILLER, partition=0)
        filler.flush(TIMEOUT)
        return markers_settled(replica)

    wait_for(settled, timeout=120, interval=1.0, what="the markers gone after delete.retention.ms")


def _replica(kafka: KafkaCluster) -> Path:
    (replica,) = [
        Path(d["path"]) / f"{TOPIC}-0"
        for d in kafka.cluster.log_dirs(1)
        if (Path(d["path"]) / f"{TOPIC}-0").is_dir()
    ]
    return replica


def test_aborted_data_and_markers_are_cleaned_away(kafka: KafkaCluster) -> None:
    config = kafka.client_config()
    create_topic(config)
    committed = write_transactions(config)
    wait_cleaned(config, committed, "the latest committed value of each key only")
    wait_settled(config, _replica(kafka))
    broker = kafka.cluster.brokers[1]
    broker.kill()
    broker.start()
    wait_cleaned(kafka.client_config(), committed, "the same after a kill -9 and restart")  # its new port
    assert markers_settled(_replica(kafka))
