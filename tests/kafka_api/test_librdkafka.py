"""librdkafka (confluent-kafka) against the brokers' Kafka listeners, as an application uses it:
metadata, produce with every compression codec at acks=all, consume back with assign(), offsets
by time, and SASL refusals."""

from __future__ import annotations

import json
import time
import uuid
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.kafka_api.conftest import KafkaCluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def new_topic(kafka: KafkaCluster, *, partitions: int = 3) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    kafka.cluster.admin.create_topic(
        name, partitions=partitions, replication_factor=3, configs={"min.insync.replicas": "2"}
    )
    wait_for_leaders(kafka, name, partitions)
    return name


def wait_for_leaders(kafka: KafkaCluster, name: str, partitions: int) -> None:
    """Until the brokers (which follow the metadata log) name a leader for each partition of `name`."""
    admin = AdminClient(kafka.client_config())
    deadline = time.monotonic() + 20
    while True:
        topic = admin.list_topics(topic=name, timeout=10).topics[name]
        if (
            topic.error is None
            and len(topic.partitions) == partitions
            and all(p.leader >= 0 for p in topic.partitions.values())
        ):
            return
        assert time.monotonic() < deadline, f"topic {name} never got leaders: {topic}"
        time.sleep(0.1)


def produce(kafka: KafkaCluster, topic: str, records: list[tuple[bytes, bytes]], **config: object) -> dict:
    """Produce `records` with acks=all (idempotent unless `config` says otherwise, as Kafka's
    clients are by default); (partition, offset) of each, keyed by value."""
    producer = Producer(kafka.client_config(acks="all", **config))
    acked: dict[bytes, tuple[int, int]] = {}
    errors: list[KafkaError] = []

    def delivered(err: KafkaError | None, msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked[msg.value()] = (msg.partition(), msg.offset())  # type: ignore[attr-defined]

    for key, value in records:
        producer.produce(topic, key=key, value=value, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert errors == []
    return acked


def consume_all(kafka: KafkaCluster, topic: str, partitions: int, expected: int) -> dict[int, list]:
    """Every record of `topic` from the beginning, by partition, through assign()."""
    consumer = Consumer(kafka.client_config(**{"group.id": "unused", "enable.auto.commit": False}))
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    by_partition: dict[int, list] = defaultdict(list)
    deadline = time.monotonic() + 60
    count = 0
    try:
        while count < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            by_partition[msg.partition()].append((msg.offset(), msg.key(), msg.value(), msg.timestamp()[1]))
            count += 1
    finally:
        consumer.close()
    return by_partition


def test_metadata_lists_every_broker_and_the_partitions_leaders(kafka_cluster: KafkaCluster) -> None:
    topic = new_topic(kafka_cluster, partitions=4)
    metadata = AdminClient(kafka_cluster.client_config()).list_topics(timeout=10)
    assert sorted(metadata.brokers) == [1, 2, 3]
    assert {f"{b.host}:{b.port}" for b in metadata.brokers.values()} == set(
        kafka_cluster.bootstrap.split(",")
    )
    described = kafka_cluster.cluster.admin.describe_topic(topic)
    for p in described["partitions"]:
        seen = metadata.topics[topic].partitions[p["partitionIndex"]]
        assert (seen.leader, list(seen.replicas), list(seen.isrs)) == (p["leader"], p["replicas"], p["isr"])


@pytest.mark.parametrize("codec", CODECS)
def test_an_idempotent_producer_with_every_codec_round_trips_every_record_once_in_order(
    kafka_cluster: KafkaCluster, codec: str
) -> None:
    topic = new_topic(kafka_cluster)
    records = [(b"key-%d" % (i % 17), b"value-%06d-" % i + b"x" * (i % 300)) for i in range(3000)]
    acked = produce(
        kafka_cluster,
        topic,
        records,
        **{"compression.type": codec, "enable.idempotence": True, "linger.ms": 5},
    )
    assert len(acked) == len(records)
    consumed = consume_all(kafka_cluster, topic, 3, len(records))
    for partition, got in consumed.items():
        offsets = [offset for offset, _k, _v, _ts in got]
        assert offsets == list(range(len(got))), f"partition {partition} has gaps or duplicates"
        for offset, _key, value, timestamp in got:
            assert acked[value] == (partition, offset)
            assert timestamp > 0
        # A key always maps to one partition: librdkafka's partitioner, kept through the broker.
    assert sum(len(got) for got in consumed.values()) == len(records)
    assert {value for got in consumed.values() for _o, _k, value, _t in got} == {v for _k, v in records}


def test_offsets_by_time_earliest_and_latest(kafka_cluster: KafkaCluster) -> None:
    topic = new_topic(kafka_cluster, partitions=1)
    produce(kafka_cluster, topic, [(b"k", b"early-%d" % i) for i in range(10)])
    # The cut: the millisecond after every early record's timestamp (librdkafka stamps a record with
    # the wall clock when it is produced); the late ones are produced once the clock reached it.
    cut = int(time.time() * 1000) + 1
    while time.time() * 1000 < cut:
        time.sleep(0.001)
    produce(kafka_cluster, topic, [(b"k", b"late-%d" % i) for i in range(5)])
    consumer = Consumer(kafka_cluster.client_config(**{"group.id": "unused"}))
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 15)
        [found] = consumer.offsets_for_times([TopicPartition(topic, 0, cut)], timeout=10)
        assert found.offset == 10
        [none_after] = consumer.offsets_for_times([TopicPartition(topic, 0, cut + 3_600_000)], timeout=10)
        assert none_after.offset == -1
    finally:
        consumer.close()


@pytest.mark.parametrize(("user", "password"), [("admin", "wrong"), ("nobody", "secret")])
def test_wrong_credentials_are_refused(kafka_cluster: KafkaCluster, user: str, password: str) -> None:
    config = kafka_cluster.client_config(**{"sasl.username": user, "sasl.password": password})
    with pytest.raises(KafkaException) as caught:
        AdminClient(config).list_topics(timeout=5)
    assert caught.value.args[0].code() in (
        KafkaError._AUTHENTICATION,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
    )


def read_values(consumer: Consumer, count: int, *, within_s: float) -> list[tuple[int, bytes]]:
    """(offset, value) of the next `count` records `consumer` polls, or of fewer at the deadline;
    a consumer error (an offset out of range not reset, a broken response) fails the test."""
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + within_s
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        got.append((msg.offset(), msg.value()))
    return got


@pytest.mark.parametrize("reset", ["earliest", "latest"])
def test_a_consumer_whose_offset_is_out_of_range_resets_as_auto_offset_reset_says(
    kafka_cluster: KafkaCluster, reset: str
) -> None:
    """Issue 30: assigned offset 5,000 of a partition of 100 records, the consumer gets
    OFFSET_OUT_OF_RANGE, resets by `auto.offset.reset` and reads on (Kafka 4.3.1 does at once). The
    errored partition's `records` must be empty, not null: librdkafka rejects a whole Fetch
    response with a null (`invalid MessageSetSize -1`), reconnects and never resets."""
    topic = new_topic(kafka_cluster, partitions=1)
    produce(kafka_cluster, topic, [(b"k", b"first-%03d" % i) for i in range(100)])
    next_offsets: list[int] = []  # the partition's next fetch offset, from librdkafka's statistics

    def statistics(stats: str) -> None:
        partition = json.loads(stats)["topics"].get(topic, {}).get("partitions", {}).get("0", {})
        if partition.get("fetch_state") == "active":
            next_offsets.append(int(partition["next_offset"]))

    consumer = Consumer(
        kafka_cluster.client_config(
            **{
                "group.id": f"g-{topic}",
                "enable.auto.commit": False,
                "auto.offset.reset": reset,
                "statistics.interval.ms": 100,
                "stats_cb": statistics,
            }
        )
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 5_000)])
        if reset == "earliest":
            got = read_values(consumer, 100, within_s=30)
            assert got == [(i, b"first-%03d" % i) for i in range(100)]
        else:
            # Reset to the end (100): once the consumer fetches from there, only what is
            # produced after it arrives.
            deadline = time.monotonic() + 30
            while 100 not in next_offsets:
                assert time.monotonic() < deadline, f"never fetched from offset 100: {next_offsets[-5:]}"
                assert consumer.poll(0.2) is None
            produce(kafka_cluster, topic, [(b"k", b"second-%03d" % i) for i in range(10)])
            got = read_values(consumer, 10, within_s=30)
            assert got == [(100 + i, b"second-%03d" % i) for i in range(10)]
    finally:
        consumer.close()


def test_a_fetch_answer_stays_within_fetch_max_bytes(kafka_cluster: KafkaCluster) -> None:
    """librdkafka's 0082: a consumer whose `fetch.max.bytes` (1 MB) is far below its
    `max.partition.fetch.bytes` (20 MB) sizes its receive buffer to the former
    (`receive.message.max.bytes`); records of 900 KiB, one batch each, must come one batch per
    answer, not a partition's 20 MB at once (librdkafka drops such an answer, "Invalid response
    size", reconnects, and never reads on)."""
    topic = new_topic(kafka_cluster, partitions=2)
    values = [bytes([i]) * (900 * 1024) for i in range(6)]
    acked = produce(kafka_cluster, topic, [(b"k%d" % i, value) for i, value in enumerate(values)])
    consumer = Consumer(
        kafka_cluster.client_config(
            **{
                "group.id": f"g-{topic}",
                "enable.auto.commit": False,
                "max.partition.fetch.bytes": 20_000_000,
                "fetch.max.bytes": 1_000_000,
                "receive.message.max.bytes": 1_000_512,
            }
        )
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
        got = read_values(consumer, len(values), within_s=60)
    finally:
        consumer.close()
    assert sorted(value for _offset, value in got) == sorted(values), f"read {len(got)} of {len(values)}"
    assert len(acked) == len(values)
