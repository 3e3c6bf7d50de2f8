"""End-transaction markers byte for byte as Apache Kafka 4.3.1 writes them (issue 33): two
transactional producers (librdkafka's, confluent-kafka) commit and abort transactions on a real
Kafka; the partition's segment file, read from Kafka's log dir, holds Kafka's control batches;
`control_records.read_marker` decodes each of them (a commit or an abort, of the producer id that
wrote the transaction's records, at an epoch no older than theirs), refuses every data batch, and
`control_records.marker_batch` given the same fields and Kafka's offset, leader epoch and timestamp
builds the very same bytes (every header field, the CRC and the record)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from e2e.kafka_tools import KafkaCluster, KafkaInstall
from e2e.wait import wait_for
from jbod_kafka import control_records, record_batch
from jbod_kafka.control_records import ControlRecordType
from tests.kafka_tools.test_harness import install  # noqa: F401  the module's fixture: Kafka's jars or a skip

pytestmark = [pytest.mark.slow, pytest.mark.integration]

TOPIC = "txn-markers"
#: The transactions each producer runs, in turn: (transactional id, records, commit?).
SCRIPT = (
    ("tx-a", 3, True),
    ("tx-b", 2, False),
    ("tx-a", 1, False),
    ("tx-b", 4, True),
    ("tx-a", 2, True),
)


@pytest.fixture(scope="module")
def kafka(install: KafkaInstall) -> Iterator[KafkaCluster]:  # noqa: F811
    with KafkaCluster(install) as cluster:
        yield cluster


def _segment_batches(kafka: KafkaCluster) -> list[tuple[record_batch.BatchHeader, bytes]]:
    """Every whole batch of the partition's first segment, as Kafka wrote it."""
    data = (Path(kafka.log_dirs[0]) / f"{TOPIC}-0" / "00000000000000000000.log").read_bytes()
    headers, _size, _error = record_batch.scan_frames(data)
    return [(h, data[h.position : h.position + h.size]) for h in headers]


def test_kafkas_markers_are_read_and_built_byte_for_byte(kafka: KafkaCluster) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1)])[TOPIC].result(60)
    producers: dict[str, Producer] = {}
    for txn_id in sorted({txn_id for txn_id, _, _ in SCRIPT}):
        producer = Producer(
            {"bootstrap.servers": kafka.bootstrap, "transactional.id": txn_id, "linger.ms": 0}
        )
        producer.init_transactions(60)
        producers[txn_id] = producer
    for txn_id, count, commit in SCRIPT:
        producer = producers[txn_id]
        producer.begin_transaction()
        for i in range(count):
            producer.produce(TOPIC, key=f"{txn_id}-{i}".encode(), value=b"v" * i, partition=0)
            producer.flush(60)  # one batch per record: several batches per transaction
        if commit:
            producer.commit_transaction(60)
        else:
            producer.abort_transaction(60)

    def all_markers_written() -> list[tuple[record_batch.BatchHeader, bytes]] | None:
        batches = _segment_batches(kafka)
        return batches if sum(h.is_control for h, _ in batches) == len(SCRIPT) else None

    batches = wait_for(all_markers_written, timeout=60, what=f"{len(SCRIPT)} control batches in {TOPIC}-0")

    markers = []
    data_pids: dict[int, int] = {}  # producer id -> epoch of its last data batch
    for header, raw in batches:
        if not header.is_control:
            assert header.is_transactional
            with pytest.raises(ValueError, match="not a control batch"):
                control_records.read_marker(raw)
            data_pids[header.producer_id] = header.producer_epoch
            continue
        marker = control_records.read_marker(raw)
        assert marker.producer_id in data_pids
        assert marker.producer_epoch >= data_pids[marker.producer_id]
        assert (marker.base_offset, marker.leader_epoch) == (header.base_offset, header.leader_epoch)
        assert header.max_timestamp_ms == header.base_timestamp == marker.timestamp_ms
        rebuilt = control_records.marker_batch(
            control_type=marker.control_type,
            producer_id=marker.producer_id,
            producer_epoch=marker.producer_epoch,
            coordinator_epoch=marker.coordinator_epoch,
            timestamp_ms=marker.timestamp_ms,
            base_offset=header.base_offset,
            leader_epoch=header.leader_epoch,
        )
        assert record_batch.read_header(rebuilt, position_base=header.position) == header
        assert rebuilt == raw
        markers.append(marker)
    # Each producer's markers, in its order: the script's commits and aborts of one transactional id.
    by_producer: dict[int, list[ControlRecordType]] = {}
    for marker in markers:
        by_producer.setdefault(marker.producer_id, []).append(marker.control_type)
    expected: dict[str, list[ControlRecordType]] = {}
    for txn_id, _, commit in SCRIPT:
        expected.setdefault(txn_id, []).append(
            ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        )
    assert sorted(by_producer.values()) == sorted(expected.values())
    for producer in producers.values():
        producer.flush(10)
