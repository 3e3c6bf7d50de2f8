"""Transactions end to end on a cluster of ours, with librdkafka (confluent-kafka), as a Kafka team
uses them: a transactional producer commits one transaction and aborts another, with a third left
open; a read_committed consumer sees exactly the committed records and stops at the open
transaction (the last stable offset), a read_uncommitted one sees every record; once the third
commits, read_committed sees it too (`jbodctl transactions` shows the open one holding back the
last stable offset, then none); offsets sent with a transaction (consume-transform-produce's
`send_offsets_to_transaction`) are committed with it and only with it; a second producer with the
same transactional id fences the first, whose next transaction fails."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from e2e.wait import wait_for
from tests.kafka_api.conftest import KafkaCluster, start_kafka_cluster

pytestmark = [pytest.mark.slow, pytest.mark.integration]

TOPIC = "txn"
PARTITIONS = 3
TIMEOUT = 30.0


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with contextlib.ExitStack() as stack:
        cluster = start_kafka_cluster(stack, tmp_path_factory.mktemp("transactions"), brokers=3)
        admin = AdminClient(cluster.client_config())
        for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)]).values():
            future.result(TIMEOUT)
        yield cluster


def _producer(kafka: KafkaCluster, transactional_id: str) -> Producer:
    producer = Producer(kafka.client_config(**{"transactional.id": transactional_id}))
    producer.init_transactions(TIMEOUT)
    return producer


def _read(kafka: KafkaCluster, isolation: str) -> list[bytes]:
    """Every value a consumer with `isolation` reads from the beginning of every partition to the
    end it is served (the high watermark, or the last stable offset under read_committed)."""
    consumer = Consumer(
        kafka.client_config(
            **{
                "group.id": f"read-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "isolation.level": isolation,
                "enable.partition.eof": True,
            }
        )
    )
    try:
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        values: list[bytes] = []
        ended: set[int] = set()
        while len(ended) < PARTITIONS:
            message = consumer.poll(TIMEOUT)
            assert message is not None, f"no end of partitions {set(range(PARTITIONS)) - ended}"
            if message.error() is not None:
                if message.error().code() == KafkaError._PARTITION_EOF:
                    ended.add(message.partition())
                    continue
                raise KafkaException(message.error())
            values.append(message.value())
        return sorted(values)
    finally:
        consumer.close()


def _send(producer: Producer, prefix: str, count: int) -> list[bytes]:
    values = [f"{prefix}-{i}".encode() for i in range(count)]
    for i, value in enumerate(values):
        producer.produce(TOPIC, value=value, key=str(i).encode())
    producer.flush(TIMEOUT)
    return values


def _jbodctl_transactions(kafka: KafkaCluster, tmp_path: Path, *args: str) -> list[dict[str, Any]]:
    token = tmp_path / "admin.token"
    token.write_text(kafka.admin_password)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "jbod_cli.cli",
            "--controller",
            kafka.cluster.controller.url,
            "--token-file",
            str(token),
            "transactions",
            "-o",
            "json",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    partitions: list[dict[str, Any]] = json.loads(proc.stdout)
    return partitions


def test_committed_aborted_and_open_transactions(kafka: KafkaCluster, tmp_path: Path) -> None:
    producer = _producer(kafka, "tx-1")
    producer.begin_transaction()
    committed = _send(producer, "committed", 100)
    producer.commit_transaction(TIMEOUT)
    producer.begin_transaction()
    aborted = _send(producer, "aborted", 100)
    producer.abort_transaction(TIMEOUT)
    producer.begin_transaction()
    open_ = _send(producer, "open", 50)

    assert _read(kafka, "read_committed") == sorted(committed)
    assert _read(kafka, "read_uncommitted") == sorted(committed + aborted + open_)
    shown = _jbodctl_transactions(kafka, tmp_path, "--topic", TOPIC)
    assert sorted(p["partition"] for p in shown) == list(range(PARTITIONS))
    holding = [p for p in shown if p["openTransactions"]]
    assert holding, shown  # 50 records over 3 partitions: the open transaction is on some
    for p in shown:
        assert p["errorCode"] == 0, p
        if p["openTransactions"]:
            (txn,) = p["openTransactions"]
            assert p["lastStableOffset"] == txn["startOffset"] < p["highWatermark"], p
            assert p["lsoLag"] == p["highWatermark"] - p["lastStableOffset"] > 0, p
        else:
            assert p["lsoLag"] == 0, p
    assert len({p["openTransactions"][0]["producerId"] for p in holding}) == 1

    producer.commit_transaction(TIMEOUT)
    wait_for(
        lambda: not any(p["openTransactions"] or p["lsoLag"] for p in _jbodctl_transactions(kafka, tmp_path)),
        timeout=TIMEOUT,
        what="jbodctl transactions shows no open transaction once committed",
    )
    wait_for(
        lambda: _read(kafka, "read_committed") == sorted(committed + open_),
        timeout=TIMEOUT,
        what="the third committed",
    )

    zombie_successor = _producer(kafka, "tx-1")  # fences `producer`
    with pytest.raises(KafkaException) as fenced:
        producer.begin_transaction()
        _send(producer, "zombie", 1)
        producer.commit_transaction(TIMEOUT)
    assert fenced.value.args[0].fatal() or fenced.value.args[0].code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    )
    zombie_successor.begin_transaction()
    later = _send(zombie_successor, "successor", 10)
    zombie_successor.commit_transaction(TIMEOUT)
    assert _read(kafka, "read_committed") == sorted(committed + open_ + later)


def test_consume_transform_produce_commits_offsets_with_the_transaction(kafka: KafkaCluster) -> None:
    """librdkafka's exactly-once loop: each batch read from `ctp-in` is written to `ctp-out` and its
    offsets sent to the transaction; an aborted batch is read again (its offsets were not
    committed), so every input record is in the output once, and the group's committed offsets
    are the input's end."""
    admin = AdminClient(kafka.client_config())
    for future in admin.create_topics([NewTopic("ctp-in", 1, 3), NewTopic("ctp-out", 1, 3)]).values():
        future.result(TIMEOUT)
    source = Producer(kafka.client_config())
    for i in range(200):
        source.produce("ctp-in", value=b"in-%d" % i)
    source.flush(TIMEOUT)
    consumer = Consumer(
        kafka.client_config(
            **{
                "group.id": "ctp",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
            }
        )
    )
    producer = _producer(kafka, "ctp-tx")
    consumer.subscribe(["ctp-in"])
    done, batches = 0, 0
    try:
        while done < 200:
            messages = consumer.consume(50, TIMEOUT)
            assert messages, f"nothing to read after {done} records"
            assert all(m.error() is None for m in messages)
            producer.begin_transaction()
            for message in messages:
                producer.produce("ctp-out", value=b"out-" + message.value()[3:])
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), TIMEOUT
            )
            batches += 1
            if batches == 2:  # this batch's output and offsets are dropped: read again
                producer.abort_transaction(TIMEOUT)
                committed = consumer.committed(consumer.assignment(), TIMEOUT)
                for tp in committed:
                    consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))
                continue
            producer.commit_transaction(TIMEOUT)
            done += len(messages)
        [committed] = consumer.committed([TopicPartition("ctp-in", 0)], TIMEOUT)
        assert committed.offset == 200
    finally:
        consumer.close()
    reader = Consumer(
        kafka.client_config(
            **{
                "group.id": f"read-{uuid.uuid4().hex[:8]}",
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
            }
        )
    )
    try:
        reader.assign([TopicPartition("ctp-out", 0, OFFSET_BEGINNING)])
        out: list[bytes] = []
        while True:
            message = reader.poll(TIMEOUT)
            assert message is not None
            if message.error() is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF
                break
            out.append(message.value())
    finally:
        reader.close()
    assert sorted(out) == sorted(b"out-%d" % i for i in range(200))
