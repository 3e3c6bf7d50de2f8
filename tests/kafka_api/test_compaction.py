"""Log compaction on a cluster of ours, seen by librdkafka: many updates of a few thousand keys
plus tombstones; once cleaned, a consumer from the beginning reads exactly the latest value of
each key at the offset it was acknowledged at, tombstones included while younger than
`delete.retention.ms` and gone after it (without any new write); the same from a new leader
after the old one is killed (each replica cleans its own log, and every broker's `GET
/v1/log-dirs` shows its dir's cleaner at work); a keyless record is refused. And a disk failed (EIO
on a loop-mounted ext4) while its cleaner cleans: that dir goes offline, the broker's other dir
keeps cleaning."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from e2e.wait import wait_for
from tests.fs import requires_root
from tests.kafka_api.conftest import KafkaCluster, start_kafka_cluster

pytestmark = [pytest.mark.slow, pytest.mark.integration]

TOPIC = "compacted"
KEYS = 3000
ROUNDS = 4
DELETED = 300  # keys whose last record is a tombstone
MARKER = b"marker"  # written until the data's segments roll and get cleaned
TIMEOUT = 30.0


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with contextlib.ExitStack() as stack:
        yield start_kafka_cluster(
            stack,
            tmp_path_factory.mktemp("compaction"),
            brokers=3,
            log_cleaner_backoff_ms="200",
            log_segment_bytes="65536",
        )


def _read_from_start(config: dict[str, Any]) -> dict[int, tuple[bytes, bytes | None]] | None:
    """Every record a consumer reads from the beginning to the end offset, by offset; None while
    the partition cannot be read (a leader change)."""
    consumer = Consumer({**config, "group.id": f"read-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False})
    try:
        _low, end = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=TIMEOUT)
        consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        records: dict[int, tuple[bytes, bytes | None]] = {}
        position = 0
        while position < end:
            message = consumer.poll(TIMEOUT)
            assert message is not None, f"stuck at offset {position} of {end}"
            if message.error() is not None:
                if message.error().code() == KafkaError._PARTITION_EOF:
                    break
                raise KafkaException(message.error())
            records[message.offset()] = (message.key(), message.value())
            position = message.offset() + 1
        return records
    except KafkaException:
        return None
    finally:
        consumer.close()


def _compacted_as(
    records: dict[int, tuple[bytes, bytes | None]] | None, expected: dict[int, tuple[bytes, bytes | None]]
) -> bool:
    """The data (the markers aside) is exactly `expected`: one record per key, at its offset."""
    if records is None:
        return False
    return {o: r for o, r in records.items() if r[0] != MARKER} == expected


def test_a_consumer_reads_the_latest_value_of_each_key(kafka: KafkaCluster) -> None:
    config = kafka.client_config()
    admin = AdminClient(config)
    topic = NewTopic(
        TOPIC,
        num_partitions=1,
        replication_factor=3,
        config={
            "cleanup.policy": "compact",
            "segment.ms": "500",
            "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": "10000",
        },
    )
    admin.create_topics([topic])[TOPIC].result(TIMEOUT)

    producer = Producer({**config, "acks": "all", "enable.idempotence": True, "linger.ms": 20})
    acked: dict[bytes, tuple[int, bytes | None]] = {}

    def delivered(error: KafkaError | None, message: Any) -> None:
        assert error is None, error
        acked[message.key()] = (message.offset(), message.value())  # in offset order per partition

    for round_ in range(ROUNDS):
        for key in range(KEYS):
            value = None if round_ == ROUNDS - 1 and key < DELETED else f"v{round_}-{key}".encode() * 20
            producer.produce(TOPIC, value, key=b"k%d" % key, partition=0, on_delivery=delivered)
            producer.poll(0)
    assert producer.flush(TIMEOUT) == 0
    refusals: list[KafkaError | None] = []
    keyless = Producer({**config, "acks": "all", "retries": 0})
    keyless.produce(TOPIC, b"no key", partition=0, on_delivery=lambda error, _message: refusals.append(error))
    assert keyless.flush(TIMEOUT) == 0
    assert [e.code() if e is not None else None for e in refusals] == [KafkaError.INVALID_RECORD]
    latest = {offset: (key, value) for key, (offset, value) in acked.items()}
    assert len(latest) == KEYS

    def cleaned(expected: dict[int, tuple[bytes, bytes | None]]) -> bool:
        producer.produce(TOPIC, b"m", key=MARKER, partition=0)  # rolls the active segment once old
        producer.flush(TIMEOUT)
        return _compacted_as(_read_from_start(config), expected)

    wait_for(
        lambda: cleaned(latest),
        timeout=60,
        interval=1.0,
        what="the latest value of each key, tombstones kept",
    )
    alive = {o: r for o, r in latest.items() if r[1] is not None}
    wait_for(
        lambda: cleaned(alive), timeout=90, interval=1.0, what="the tombstones gone after delete.retention.ms"
    )

    leader = kafka.cluster.admin.describe_topic(TOPIC)["partitions"][0]["leader"]
    kafka.cluster.brokers[leader].kill()
    wait_for(
        lambda: kafka.cluster.admin.describe_topic(TOPIC)["partitions"][0]["leader"] not in (leader, -1),
        timeout=60,
        what="a new leader",
    )
    wait_for(lambda: cleaned(alive), timeout=90, interval=1.0, what="the same from the new leader")
    kafka.cluster.brokers[leader].start()


def _cleaner_of(kafka: KafkaCluster, path: str) -> dict[str, Any]:
    found = [d for d in kafka.cluster.log_dirs(1) if d["path"] == path]
    assert found, path
    return found[0]


@pytest.mark.root
@requires_root
def test_a_failed_disk_stops_only_its_own_cleaner(tmp_path_factory: pytest.TempPathFactory) -> None:
    with contextlib.ExitStack() as stack:
        kafka = start_kafka_cluster(
            stack,
            tmp_path_factory.mktemp("cleaner-eio"),
            brokers=1,
            loop=True,
            log_cleaner_backoff_ms="200",
            log_segment_bytes="65536",
            log_cleaner_io_max_bytes_per_second="400000",  # per dir: a cleaning lasts seconds
        )
        config = kafka.client_config()
        admin = AdminClient(config)
        topics = {"eio-a": 4000, "eio-b": 1500}  # records of 1 KB, 40 keys
        for name in topics:
            settings = {"cleanup.policy": "compact", "segment.ms": "500", "min.cleanable.dirty.ratio": "0.01"}
            admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1, config=settings)])[
                name
            ].result(TIMEOUT)
        for name in topics:
            wait_for(lambda name=name: kafka.cluster.placed(name), timeout=30, what=f"{name} placed")
        dirs = {d["directoryId"]: d["path"] for d in kafka.cluster.log_dirs(1)}

        def directory(name: str) -> str:
            return str(kafka.cluster.admin.describe_topic(name)["partitions"][0]["directories"][0])

        if directory("eio-a") == directory("eio-b"):  # placement chose one dir: move eio-b away
            other = next(d for d in dirs if d != directory("eio-a"))
            moved = httpx.post(
                f"{kafka.cluster.brokers[1].url}/v1/log-dirs/move",
                json={"topic": "eio-b", "partition": 0, "directoryId": other},
                headers={"Authorization": f"Bearer {kafka.cluster.cluster_token}"},
                timeout=10,
            )
            assert moved.status_code < 300, moved.text
            wait_for(lambda: directory("eio-b") == other, timeout=30, what="eio-b in the other dir")
        described = {name: directory(name) for name in topics}
        paths = {name: dirs[directory] for name, directory in described.items()}
        producer = Producer({**config, "acks": "all", "linger.ms": 20})
        for name, count in topics.items():
            for n in range(count):
                producer.produce(name, b"%05d" % n * 200, key=b"k%d" % (n % 40), partition=0)
                producer.poll(0)
        assert producer.flush(TIMEOUT) == 0

        def roll_and_check(name: str, state: str) -> bool:
            producer.produce(name, b"m", key=MARKER, partition=0)
            producer.flush(TIMEOUT)
            cleaner = _cleaner_of(kafka, paths[name])["cleaner"]
            return cleaner is not None and cleaner["state"] == state and cleaner["cleaning"] is not None

        wait_for(lambda: roll_and_check("eio-a", "cleaning"), timeout=60, what="eio-a's dir cleaning")
        index = next(i for i in (0, 1) if kafka.cluster.dir_id(1, i) == described["eio-a"])
        kafka.cluster.mounts[(1, index)].shutdown()
        wait_for(
            lambda: _cleaner_of(kafka, paths["eio-a"])["state"] == "offline",
            timeout=60,
            what="the failed dir offline",
        )
        wait_for(
            lambda: _cleaner_of(kafka, paths["eio-a"])["cleaner"]["state"] == "failed",
            timeout=30,
            what="the failed dir's cleaner stopped",
        )
        runs = _cleaner_of(kafka, paths["eio-b"])["cleaner"]["runs"]

        def other_dir_cleaned() -> bool:
            producer.produce("eio-b", b"%05d" % 0 * 200, key=b"k0", partition=0)
            producer.flush(TIMEOUT)
            cleaner = _cleaner_of(kafka, paths["eio-b"])["cleaner"]
            return cleaner["state"] != "failed" and cleaner["runs"] > runs

        wait_for(other_dir_cleaned, timeout=90, interval=1.0, what="the other dir's cleaner cleaning on")
