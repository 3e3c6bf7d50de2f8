"""Transactions on the partition (issue 33): transactional batches produced as a client would
(raw requests: a producer id from InitProducerId, batches marked transactional), commit and abort
markers written with WriteTxnMarkers, read back by confluent-kafka consumers.

A read_committed consumer sees exactly the committed records and the non-transactional ones, and
stops at the last stable offset (the first offset of a transaction still open); a
read_uncommitted one sees every record. The same holds after the leader is killed (a follower,
which kept the producer state and `.txnindex` from replication, leads), after the open
transaction is committed there, and after every broker restarted (recovery rebuilds them).
DescribeProducers shows the open transaction on the leader and, after the failover, on the new one.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from jbod_kafka import protocol
from tests.broker.conftest import wait_for
from tests.kafka_api.conftest import KafkaCluster, start_kafka_cluster
from tests.kafka_api.raw_client import RawConnection
from tests.kafka_api.test_librdkafka import new_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

NONE, INVALID_TXN_STATE, COORDINATOR_FENCED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 0, 48, 52, 53
CONTROLLER_ARGS = ["--broker-session-timeout-ms", "8000"]


def ask(kafka: KafkaCluster, node_id: int, api_key: int, version: int, **fields: Any) -> Any:
    address = kafka.cluster.brokers[node_id].kafka["SASL_PLAINTEXT"]
    with RawConnection(address) as conn:
        assert int(conn.authenticate("admin", kafka.admin_password).error_code) == 0
        return conn.request(
            api_key, version, protocol.build(protocol.request_type(api_key, version), **fields)
        )


def leader_of(kafka: KafkaCluster, topic: str) -> int:
    (partition,) = kafka.cluster.admin.describe_topic(topic)["partitions"]
    return int(partition["leader"])


def full_isr(kafka: KafkaCluster, topic: str) -> bool:
    (partition,) = kafka.cluster.admin.describe_topic(topic)["partitions"]
    return partition["leader"] >= 0 and sorted(partition["isr"]) == sorted(partition["replicas"])


def producer_id(kafka: KafkaCluster) -> tuple[int, int]:
    """A producer id and epoch from InitProducerId v4 without a transactional id."""

    def allocated() -> Any:
        answer = ask(
            kafka,
            1,
            22,
            4,
            transactional_id=None,
            transaction_timeout=60000,
            producer_id=-1,
            producer_epoch=-1,
        )
        return answer if int(answer.error_code) == NONE else None

    answer = wait_for(allocated, timeout=60, what="a producer id")
    return int(answer.producer_id), int(answer.producer_epoch)


def batch(
    values: list[bytes], *, pid: int = -1, epoch: int = -1, sequence: int = -1, txn: bool = False
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=int(txn),
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=sequence,
        batch_size=1 << 20,
    )
    for i, value in enumerate(values):
        builder.append(offset=i, timestamp=int(time.time() * 1000), key=None, value=value, headers=[])
    return bytes(builder.build())


def produce(kafka: KafkaCluster, topic: str, records: bytes, transactional_id: str | None = None) -> int:
    """Produce v9 with acks=-1 to the partition's leader: its error code."""
    answer = ask(
        kafka,
        leader_of(kafka, topic),
        0,
        9,
        transactional_id=transactional_id,
        acks=-1,
        timeout=30000,
        topic_data=[{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
    )
    return int(answer.responses[0].partition_responses[0].error_code)


def end_txn(
    kafka: KafkaCluster, topic: str, pid: int, epoch: int, *, commit: bool, coordinator_epoch: int = 0
) -> int:
    """WriteTxnMarkers v1 to the partition's leader: the partition's error code."""
    answer = ask(
        kafka,
        leader_of(kafka, topic),
        27,
        1,
        markers=[
            {
                "producer_id": pid,
                "producer_epoch": epoch,
                "transaction_result": commit,
                "topics": [{"name": topic, "partition_indexes": [0]}],
                "coordinator_epoch": coordinator_epoch,
            }
        ],
    )
    return int(answer.markers[0].topics[0].partitions[0].error_code)


def ongoing_transactions(kafka: KafkaCluster, topic: str) -> dict[int, int]:
    """DescribeProducers v0 of the partition's leader: each producer's open transaction's first
    offset (-1: none)."""
    described = ask(kafka, leader_of(kafka, topic), 61, 0, topics=[{"name": topic, "partition_indexes": [0]}])
    (partition,) = described.topics[0].partitions
    assert int(partition.error_code) == NONE
    return {int(p.producer_id): int(p.current_txn_start_offset) for p in partition.active_producers}


def read(kafka: KafkaCluster, topic: str, isolation: str) -> tuple[int, list[bytes]]:
    """(latest offset as ListOffsets answers under `isolation`, every value a consumer with that
    isolation reads from the beginning up to it); a new consumer per attempt while restarted
    brokers register their new listeners."""
    return wait_for(lambda: _read_once(kafka, topic, isolation), timeout=90, what=f"a {isolation} read")


def _read_once(kafka: KafkaCluster, topic: str, isolation: str) -> tuple[int, list[bytes]] | None:
    config = kafka.client_config(
        **{"group.id": f"g-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False, "isolation.level": isolation}
    )
    consumer = Consumer(config)
    try:
        part = TopicPartition(topic, 0)
        try:
            end = int(consumer.get_watermark_offsets(part, timeout=10)[1])
        except KafkaException:  # restarted brokers not all registered yet
            return None
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while consumer.position([part])[0].offset < end:
            if time.monotonic() > deadline:
                return None
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
        return end, values
    finally:
        consumer.close()


def test_read_committed_sees_committed_records_up_to_the_lso_across_failover_and_restart(
    tmp_path: Path,
) -> None:
    with contextlib.ExitStack() as stack:
        # Raw producer ids of no transactional id: the leader must not verify them (KIP-890 part 1).
        kafka = start_kafka_cluster(
            stack,
            tmp_path,
            controller_args=CONTROLLER_ARGS,
            transaction_partition_verification_enable="false",
        )
        topic = new_topic(kafka, partitions=1)
        wait_for(lambda: full_isr(kafka, topic), timeout=60, what="the ISR full")
        (a, a_epoch), (b, b_epoch), (c, c_epoch) = producer_id(kafka), producer_id(kafka), producer_id(kafka)
        first = batch([b"a0", b"a1"], pid=a, epoch=a_epoch, sequence=0, txn=True)
        assert produce(kafka, topic, first) == TRANSACTIONAL_ID_AUTHORIZATION_FAILED  # no transactional id
        assert produce(kafka, topic, first, "txn") == NONE
        assert (
            produce(kafka, topic, batch([b"b0"], pid=b, epoch=b_epoch, sequence=0, txn=True), "txn") == NONE
        )
        assert end_txn(kafka, topic, a, a_epoch, commit=True) == NONE
        assert produce(kafka, topic, batch([b"p0"])) == NONE  # not transactional
        assert end_txn(kafka, topic, b, b_epoch, commit=False) == NONE
        assert (
            produce(kafka, topic, batch([b"c0"], pid=c, epoch=c_epoch, sequence=0, txn=True), "txn") == NONE
        )
        # a non-transactional batch of a producer whose transaction is open is refused
        assert produce(kafka, topic, batch([b"x"], pid=c, epoch=c_epoch, sequence=1)) == INVALID_TXN_STATE
        assert (
            produce(kafka, topic, batch([b"a2"], pid=a, epoch=a_epoch, sequence=2, txn=True), "txn") == NONE
        )
        assert end_txn(kafka, topic, a, a_epoch, commit=True) == NONE
        # a marker of an older coordinator epoch is refused and changes nothing
        assert end_txn(kafka, topic, a, a_epoch, commit=False, coordinator_epoch=-1) == COORDINATOR_FENCED

        # offsets: a0 a1 0-1, b0 2, commit(a) 3, p0 4, abort(b) 5, c0 6, a2 7, commit(a) 8
        everything = [b"a0", b"a1", b"b0", b"p0", b"c0", b"a2"]
        committed_before_c = [b"a0", b"a1", b"p0"]
        assert read(kafka, topic, "read_committed") == (6, committed_before_c)
        assert read(kafka, topic, "read_uncommitted") == (9, everything)

        # DescribeProducers: the open transaction of c, the others with none
        described = ask(
            kafka, leader_of(kafka, topic), 61, 0, topics=[{"name": topic, "partition_indexes": [0]}]
        )
        (partition,) = described.topics[0].partitions
        assert int(partition.error_code) == NONE
        ongoing = {int(p.producer_id): int(p.current_txn_start_offset) for p in partition.active_producers}
        assert ongoing == {a: -1, b: -1, c: 6}

        # the leader is killed: a follower leads with the same producer state and aborted index
        old_leader = leader_of(kafka, topic)
        kafka.cluster.brokers[old_leader].kill()
        wait_for(lambda: leader_of(kafka, topic) not in (old_leader, -1), timeout=60, what="a new leader")
        assert read(kafka, topic, "read_committed") == (6, committed_before_c)
        assert read(kafka, topic, "read_uncommitted")[1] == everything
        assert ongoing_transactions(kafka, topic) == {a: -1, b: -1, c: 6}  # kept from replication

        # committing c there moves the LSO to the end: b0 (aborted) stays invisible
        assert end_txn(kafka, topic, c, c_epoch, commit=True) == NONE
        committed = [b"a0", b"a1", b"p0", b"c0", b"a2"]
        assert read(kafka, topic, "read_committed") == (10, committed)

        # every broker restarted: recovery rebuilds the state and the .txnindex files
        kafka.cluster.brokers[old_leader].start()
        wait_for(lambda: full_isr(kafka, topic), timeout=90, what="the ISR full again")
        for broker in kafka.cluster.brokers.values():
            broker.kill()
        for broker in kafka.cluster.brokers.values():
            broker.start()
        wait_for(lambda: full_isr(kafka, topic), timeout=90, what="the ISR full after the restart")
        assert read(kafka, topic, "read_committed") == (10, committed)
        assert read(kafka, topic, "read_uncommitted") == (10, everything)
        txn_indexes = list(tmp_path.glob(f"b*/d*/{topic}-0/*.txnindex"))
        assert len(txn_indexes) == 3  # one segment, on each replica
