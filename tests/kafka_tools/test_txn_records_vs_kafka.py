"""`jbod_core.txn_records` and `jbod_core.transactions` against what Apache Kafka 4.3.1 writes to
`__transaction_state` (issue 33): a librdkafka transactional producer (a transaction version 1
client) runs one committed transaction (two partitions of a topic and a group's offsets) and one
aborted one on a real single-node Kafka; a consumer assigned to the transactional id's partition
of `__transaction_state` reads the records raw. Each decodes to the states and partitions the
requests imply, re-encodes to exactly the bytes Kafka wrote, and the coordinator's pure state
machine, fed the same requests, decides records equal to Kafka's but for the clock.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from e2e.kafka_tools import KafkaCluster, KafkaInstall
from e2e.wait import wait_for
from jbod_core import group_records, transactions, txn_records
from jbod_core.txn_records import TransactionState
from tests.kafka_tools.test_harness import install  # noqa: F401  the module's fixture: Kafka's jars or a skip

pytestmark = [pytest.mark.slow, pytest.mark.integration]

TOPIC = "payments"
GROUP = "billing"
TIMEOUT = 60.0
TXN_TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def kafka(install: KafkaInstall) -> Iterator[KafkaCluster]:  # noqa: F811
    with KafkaCluster(install) as cluster:
        yield cluster


def _run_transactions(bootstrap: str, transactional_id: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=2, replication_factor=1)])[TOPIC].result(TIMEOUT)
    group_consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": TXN_TIMEOUT_MS,
        }
    )
    try:
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction()
        producer.produce(TOPIC, b"debit", partition=0)
        producer.produce(TOPIC, b"credit", partition=1)
        producer.flush(TIMEOUT)
        producer.send_offsets_to_transaction(
            [TopicPartition(TOPIC, 0, 42)], group_consumer.consumer_group_metadata(), TIMEOUT
        )
        producer.commit_transaction(TIMEOUT)
        producer.begin_transaction()
        producer.produce(TOPIC, b"refund", partition=1)
        producer.flush(TIMEOUT)
        producer.abort_transaction(TIMEOUT)
    finally:
        group_consumer.close()


def _read_partition(
    bootstrap: str, partition: int, until: TransactionState
) -> list[tuple[bytes, bytes | None]]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4()}", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(txn_records.TRANSACTION_STATE_TOPIC, partition, OFFSET_BEGINNING)])
    read: list[tuple[bytes, bytes | None]] = []

    def complete() -> bool:
        for message in consumer.consume(100, 0.5):
            assert message.error() is None, message.error()
            key = message.key()
            assert key is not None
            read.append((key, message.value()))
        value = read[-1][1] if read else None
        return value is not None and txn_records.decode_value(value).state is until

    try:
        wait_for(complete, timeout=TIMEOUT, what=f"the transaction's {until.kafka_name} record")
    finally:
        consumer.close()
    return read


def _partitions(value: txn_records.TransactionLogValue) -> set[tuple[str, int]]:
    return {(e.topic, p) for e in value.partitions or () for p in e.partitions}


def _replayed(
    values: list[txn_records.TransactionLogValue], transactional_id: str
) -> list[txn_records.TransactionLogValue]:
    """The records the pure coordinator decides for the requests the producer sent, each request
    taken at the time Kafka stamped on the record it answers with."""
    offsets = ("__consumer_offsets", group_records.partition_for(GROUP, group_records.DEFAULT_PARTITIONS))
    config = transactions.TxnConfig()
    written: list[txn_records.TransactionLogValue] = []
    metadata: transactions.TxnMetadata | None = None

    def apply(decision: transactions.Decision) -> None:
        nonlocal metadata
        assert isinstance(decision, transactions.Transition), decision
        assert decision.record.value is not None
        written.append(decision.record.value)
        metadata = decision.after_append

    def now() -> int:
        return values[len(written)].last_update_timestamp_ms

    def init(fresh: int | None) -> transactions.Decision:
        return transactions.init_producer_id(
            None,
            transactional_id=transactional_id,
            transaction_timeout_ms=TXN_TIMEOUT_MS,
            now_ms=now(),
            config=config,
            fresh_producer_id=fresh,
        )

    assert isinstance(init(None), transactions.NeedProducerId)
    apply(init(values[0].producer_id))
    assert metadata is not None
    pid, epoch = metadata.producer_id, metadata.producer_epoch
    for value in values[1:]:
        assert metadata is not None
        state = value.state
        decision: transactions.Decision
        if state is TransactionState.ONGOING:
            added = _partitions(value) - metadata.partitions
            if offsets in added:
                decision = transactions.add_offsets_to_txn(
                    metadata, producer_id=pid, producer_epoch=epoch, group_id=GROUP, now_ms=now(), version=4
                )
            else:
                decision = transactions.add_partitions_to_txn(
                    metadata, producer_id=pid, producer_epoch=epoch, partitions=added, now_ms=now(), version=3
                )
        elif state in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT):
            decision = transactions.end_txn(
                metadata,
                producer_id=pid,
                producer_epoch=epoch,
                commit=state is TransactionState.PREPARE_COMMIT,
                now_ms=now(),
                version=4,
            )
        else:
            decision = transactions.markers_written(metadata, now_ms=now())
        apply(decision)
    return written


def test_kafka_transaction_log_records_decode_reencode_and_replay(kafka: KafkaCluster) -> None:
    transactional_id = f"txn-{uuid.uuid4()}"
    _run_transactions(kafka.bootstrap, transactional_id)
    partition = txn_records.partition_for(transactional_id, txn_records.DEFAULT_PARTITIONS)
    raw = _read_partition(kafka.bootstrap, partition, TransactionState.COMPLETE_ABORT)

    records = [txn_records.decode(key, value) for key, value in raw]
    for (key, value), record in zip(raw, records, strict=True):
        assert txn_records.encode(record) == (key, value), record
    values = [r.value for r in records if r.transactional_id == transactional_id]
    assert all(v is not None for v in values)
    ours = [v for v in values if v is not None]

    states = [v.state for v in ours]
    collapsed = [s for i, s in enumerate(states) if i == 0 or s is not states[i - 1]]
    assert collapsed == [
        TransactionState.EMPTY,
        TransactionState.ONGOING,
        TransactionState.PREPARE_COMMIT,
        TransactionState.COMPLETE_COMMIT,
        TransactionState.ONGOING,
        TransactionState.PREPARE_ABORT,
        TransactionState.COMPLETE_ABORT,
    ]
    offsets = ("__consumer_offsets", group_records.partition_for(GROUP, group_records.DEFAULT_PARTITIONS))
    commit = next(v for v in ours if v.state is TransactionState.PREPARE_COMMIT)
    assert _partitions(commit) == {(TOPIC, 0), (TOPIC, 1), offsets}
    abort = next(v for v in ours if v.state is TransactionState.PREPARE_ABORT)
    assert _partitions(abort) == {(TOPIC, 1)}
    assert ours[0].partitions is None
    # transaction.version 2 is finalized on Kafka 4.3.1: value version 1, a TV1 client's records
    assert {(v.version, v.client_transaction_version, v.next_producer_id) for v in ours} == {(1, 0, -1)}
    assert all(v.previous_producer_id == v.producer_id for v in ours)
    for written in ours:
        assert written.state is TransactionState.EMPTY or written.partitions is not None
        if written.state in (TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT):
            assert written.partitions == ()
        assert (written.producer_id, written.producer_epoch) == (ours[0].producer_id, 0)
        assert written.transaction_timeout_ms == TXN_TIMEOUT_MS

    # The pure coordinator decides the same records, but for the partition order within a record.
    def canonical(value: txn_records.TransactionLogValue) -> txn_records.TransactionLogValue:
        entries = (
            tuple(
                sorted(
                    txn_records.TopicPartitions(e.topic, tuple(sorted(e.partitions)))
                    for e in value.partitions
                )
            )
            if value.partitions is not None
            else None
        )
        return dataclasses.replace(value, partitions=entries)

    assert [canonical(v) for v in _replayed(ours, transactional_id)] == [canonical(v) for v in ours]
