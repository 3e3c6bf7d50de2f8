"""Consumer lag (`jbod_operator.lag`): the pure computation, the gauges, and the operator's Kafka
client against a real local cluster of our brokers and controller.

* `partition_lags` pairs committed offsets with log end offsets: partitions without a committed
  offset or a known end are left out, a committed offset past the end is no lag.
* `LagMetrics.publish` sets the gauges and removes vanished partitions' series; `forget` all.
* Against a real cluster, logged in as the operator is (the admin, `lag.security`): a
  producer writes 10 and 5 records to two partitions, a subscribed consumer group reads and
  commits 4 of the first; the lag is exactly 6 and 5, the gauges say so, then 0 once the group
  has read and committed everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client import REGISTRY

from e2e.wait import wait_for
from jbod_operator import lag, names
from tests.kafka_api.conftest import KafkaCluster, start_kafka_cluster


def test_lag_pairs_committed_and_log_end_offsets() -> None:
    committed = {
        "g1": {("t", 0): 4, ("t", 1): -1001, ("gone", 0): 3},  # -1001: nothing committed
        "g2": {("t", 1): 9},  # past the end (a truncated log): no lag
    }
    log_end = {("t", 0): 10, ("t", 1): 5}
    lags = lag.partition_lags(committed, log_end)
    assert [(x.group, x.topic, x.partition, x.committed_offset, x.log_end_offset, x.lag) for x in lags] == [
        ("g1", "t", 0, 4, 10, 6),
        ("g2", "t", 1, 9, 5, 0),
    ]
    assert lag.partition_lags({}, log_end) == []


def _sample(name: str, group: str, topic: str, partition: int, cluster: str = "demo") -> float | None:
    labels = {
        "namespace": "ns",
        "cluster": cluster,
        "group": group,
        "topic": topic,
        "partition": str(partition),
    }
    return REGISTRY.get_sample_value(name, labels)


def test_the_gauges_follow_the_groups_and_partitions_still_there() -> None:
    metrics = lag.LagMetrics()
    metrics.publish("ns", "demo", [lag.PartitionLag("g", "t", 0, 4, 10), lag.PartitionLag("g", "t", 1, 1, 1)])
    assert _sample("jbod_consumergroup_lag", "g", "t", 0) == 6
    assert _sample("jbod_consumergroup_committed_offset", "g", "t", 0) == 4
    assert _sample("jbod_consumergroup_log_end_offset", "g", "t", 0) == 10
    assert _sample("jbod_consumergroup_lag", "g", "t", 1) == 0
    metrics.publish("ns", "demo", [lag.PartitionLag("g", "t", 0, 10, 10)])
    assert _sample("jbod_consumergroup_lag", "g", "t", 0) == 0
    assert _sample("jbod_consumergroup_lag", "g", "t", 1) is None
    assert _sample("jbod_consumergroup_log_end_offset", "g", "t", 1) is None
    metrics.forget("ns", "demo")
    assert _sample("jbod_consumergroup_lag", "g", "t", 0) is None


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with contextlib.ExitStack() as stack:
        yield start_kafka_cluster(stack, tmp_path_factory.mktemp("lag"), brokers=2, dirs=1)


def _consume(consumer: Consumer, count: int) -> None:
    """Read `count` records, then commit what was read (synchronously)."""
    read = 0

    def more() -> bool:
        nonlocal read
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            read += 1
        return read >= count

    wait_for(more, what=f"{count} records consumed", timeout=60)
    consumer.commit(asynchronous=False)


def test_the_operator_reads_the_exact_lag_of_a_real_group(kafka_cluster: KafkaCluster) -> None:
    login = lag.security(kafka_cluster.admin_password, None)
    servers = kafka_cluster.bootstrap.split(",")
    assert f"User:{login.username}" == names.ADMIN_PRINCIPAL and login.protocol == "SASL_PLAINTEXT"
    kafka_cluster.cluster.admin.create_topic("lagged", partitions=2, replication_factor=1)
    producer = Producer(kafka_cluster.client_config(**{"enable.idempotence": True}))
    for partition, count in ((0, 10), (1, 5)):
        for n in range(count):
            producer.produce("lagged", value=f"{partition}-{n}".encode(), partition=partition)
    assert producer.flush(30) == 0

    group = f"lag-{uuid.uuid4().hex[:8]}"
    consumer = Consumer(
        kafka_cluster.client_config(
            **{
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "max.poll.interval.ms": 300000,
            }
        )
    )
    metrics = lag.LagMetrics()
    try:
        # Partition 0 only at first: the group reads 4 records and commits them; partition 1
        # gets a commit at 0 (a group that read nothing of it yet).
        consumer.assign([TopicPartition("lagged", 0, 0)])
        consumer.commit(offsets=[TopicPartition("lagged", 1, 0)], asynchronous=False)
        _consume_exactly(consumer, 4)

        def lags() -> list[tuple[str, int, int, int, int]]:
            return [
                (x.topic, x.partition, x.committed_offset, x.log_end_offset, x.lag)
                for x in asyncio.run(lag.fetch_lags(servers, login))
                if x.group == group
            ]

        assert lags() == [("lagged", 0, 4, 10, 6), ("lagged", 1, 0, 5, 5)]
        metrics.publish("ns", "local", asyncio.run(lag.fetch_lags(servers, login)))
        assert _sample("jbod_consumergroup_lag", group, "lagged", 0, cluster="local") == 6
        assert _sample("jbod_consumergroup_lag", group, "lagged", 1, cluster="local") == 5

        # The group catches up (subscribed now, as applications are): lag 0 everywhere.
        consumer.unassign()
        consumer.subscribe(["lagged"])
        _consume(consumer, 6 + 5)
        assert lags() == [("lagged", 0, 10, 10, 0), ("lagged", 1, 5, 5, 0)]
        metrics.publish("ns", "local", asyncio.run(lag.fetch_lags(servers, login)))
        assert _sample("jbod_consumergroup_lag", group, "lagged", 0, cluster="local") == 0
        assert _sample("jbod_consumergroup_lag", group, "lagged", 1, cluster="local") == 0
    finally:
        consumer.close()
        metrics.forget("ns", "local")


def _consume_exactly(consumer: Consumer, count: int) -> None:
    """Read exactly `count` records of the assigned partition and commit the next offset."""
    read: list[tuple[str, int, int]] = []

    def more() -> bool:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            read.append((str(message.topic()), int(message.partition() or 0), int(message.offset() or 0)))
        return len(read) >= count

    wait_for(more, what=f"{count} records consumed", timeout=60)
    topic, partition, offset = read[count - 1]
    consumer.commit(offsets=[TopicPartition(topic, partition, offset + 1)], asynchronous=False)
