"""Full disks handled before and after they fill (issue 35): brokers with log dirs on small loop
ext4 volumes, filled by an idempotent acks=all Kafka producer (librdkafka)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from tests.broker.conftest import Cluster, wait_for
from tests.fs import requires_root

pytestmark = requires_root

THRESHOLD = 0.5
TOPIC = "filling"


def _dir_of(cluster: Cluster, node: int, directory: str) -> dict[str, Any]:
    return next(d for d in cluster.log_dirs(node) if d["directoryId"] == directory)


def _leader_dirs(cluster: Cluster, topic: str) -> dict[int, str]:
    """Each broker's dir holding partition 0 of `topic`."""
    [part] = cluster.admin.describe_topic(topic)["partitions"]
    return dict(zip(part["replicas"], part["directories"], strict=True))


def _fill_until(producer: Producer, acked: list[int], condition: Any, *, timeout: float) -> None:
    """Produce 4 KiB records as fast as the producer is let until `condition()`."""
    value = b"f" * 4096
    deadline = time.monotonic() + timeout
    checked = 0.0
    sent = len(acked)

    def delivered(err: KafkaError | None, msg: Any) -> None:
        if err is None:
            acked.append(int(msg.key()))

    while True:
        try:
            producer.produce(TOPIC, value, key=str(sent).encode(), partition=0, on_delivery=delivered)
            sent += 1
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
        if time.monotonic() - checked > 0.5:
            checked = time.monotonic()
            if condition():
                return
            assert checked < deadline, f"timed out after {timeout} s filling the dirs ({len(acked)} acked)"


def _read_all(cluster: Cluster, topic: str) -> list[int]:
    consumer = Consumer(
        cluster.kafka_config(**{"group.id": f"r-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False})
    )
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    consumer.assign([TopicPartition(topic, 0, low)])
    keys: list[int] = []
    deadline = time.monotonic() + 120
    position = low
    while position < high and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            keys.append(int(message.key()))
            position = message.offset() + 1
    consumer.close()
    return keys


def test_filling_dirs_are_cordoned_read_and_take_writes_again_once_space_comes_back(cluster: Cluster) -> None:
    """Three brokers, two 32 MiB dirs each, `log.dir.cordon.threshold` 0.5: an idempotent acks=all
    producer fills the dirs of a partition. Each is cordoned at half full (view, metric, the
    controller's registration; a new topic's replicas all land elsewhere) while the producer
    goes on, until the dirs are full and the leader refuses appends. Every acknowledged record
    is read back from the full dirs. DeleteRecords then frees the space: the dirs are released
    and a new producer's writes are acknowledged, no broker restarted."""
    settings = {
        "log.dir.cordon.threshold": str(THRESHOLD),
        "log.dir.probe.interval.ms": "200",
        "log.retention.check.interval.ms": "500",
        "log.segment.delete.delay.ms": "0",
    }
    for node in (1, 2, 3):
        cluster.add_broker(node, properties=settings)
    wait_for(lambda: cluster.all_unfenced(3), what="three unfenced brokers")
    processes = {node: broker.process for node, broker in cluster.brokers.items()}
    admin = AdminClient(cluster.kafka_config())
    configs = {"min.insync.replicas": "2", "segment.bytes": str(1 << 20)}
    admin.create_topics([NewTopic(TOPIC, 1, 3, config=configs)])[TOPIC].result(30)
    wait_for(lambda: cluster.placed(TOPIC), what="the topic's replicas placed")
    filling = _leader_dirs(cluster, TOPIC)

    acked: list[int] = []
    producer = Producer(
        cluster.kafka_config(
            **{"enable.idempotence": True, "acks": "all", "linger.ms": 5, "message.timeout.ms": 20000}
        )
    )

    def all_cordoned() -> bool:  # by the brokers, and known to the controller (the next heartbeat)
        return all(
            _dir_of(cluster, node, d)["spaceCordoned"] and d in cluster.admin.broker(node)["cordonedLogDirs"]
            for node, d in filling.items()
        )

    _fill_until(producer, acked, all_cordoned, timeout=180)
    for node, directory in filling.items():
        view = _dir_of(cluster, node, directory)
        assert view["cordoned"] and view["usedRatio"] >= THRESHOLD, view
        metrics = httpx.get(cluster.brokers[node].url + "/metrics", timeout=10).text
        assert (
            f'jbod_log_directory_cordoned{{directory_id="{directory}",path="{view["path"]}",reason="space"}} 1.0'
            in metrics
        )
    # A new topic while the dirs are cordoned: none of its replicas lands in one.
    admin.create_topics([NewTopic("placed-elsewhere", 6, 3)])["placed-elsewhere"].result(30)
    wait_for(lambda: cluster.placed("placed-elsewhere"), what="the new topic placed")
    for part in cluster.admin.describe_topic("placed-elsewhere")["partitions"]:
        for broker, directory in zip(part["replicas"], part["directories"], strict=True):
            assert directory != filling[broker], part

    # Go on until the dirs are full: the leader answers KAFKA_STORAGE_ERROR, no broker stops.
    def some_full() -> bool:
        return any(_dir_of(cluster, node, d)["state"] == "full" for node, d in filling.items())

    _fill_until(producer, acked, some_full, timeout=180)
    producer.flush(60)
    assert all(p is not None and p.poll() is None for p in processes.values()), "a broker stopped"
    read = _read_all(cluster, TOPIC)
    assert set(acked) <= set(read), f"{len(set(acked) - set(read))} acknowledged records are missing"

    # DeleteRecords frees the space: the dirs are released and take writes again.
    watermarks = Consumer(cluster.kafka_config(**{"group.id": "w"}))
    high = watermarks.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=30)[1]
    watermarks.close()
    [deleted] = admin.delete_records([TopicPartition(TOPIC, 0, high)]).values()
    assert deleted.result(60).low_watermark == high

    def released() -> bool:
        views = [_dir_of(cluster, node, d) for node, d in filling.items()]
        return all(v["state"] == "online" and not v["spaceCordoned"] for v in views) and all(
            d not in cluster.admin.broker(node)["cordonedLogDirs"] for node, d in filling.items()
        )

    wait_for(released, timeout=60, what="the dirs released once DeleteRecords freed their space")
    again: list[int] = []
    fresh = Producer(cluster.kafka_config(**{"enable.idempotence": True, "acks": "all"}))
    for n in range(100):
        fresh.produce(
            TOPIC,
            b"again",
            key=str(n).encode(),
            partition=0,
            on_delivery=lambda e, m: again.append(e is None),
        )
    fresh.flush(30)
    assert again == [True] * 100
    assert all(p is not None and p.poll() is None for p in processes.values()), "no broker restarted"


def test_the_threshold_is_a_dynamic_broker_config(cluster: Cluster) -> None:
    """`kafka-configs.sh`'s way (IncrementalAlterConfigs on the broker): a threshold below a dir's
    use cordons it at the next probe, a threshold of 1 releases it; a value above 1 is refused."""
    cluster.add_broker(1, properties={"log.dir.probe.interval.ms": "200"})
    wait_for(lambda: cluster.all_unfenced(1), what="broker 1 unfenced")
    admin = AdminClient(cluster.kafka_config())
    first = cluster.dir_id(1, 0)
    used = _dir_of(cluster, 1, first)["usedRatio"]
    assert 0 < used < 0.5, used  # an empty ext4 volume: its metadata and reserved blocks

    def alter(value: str) -> None:
        entry = ConfigEntry("log.dir.cordon.threshold", value, incremental_operation=AlterConfigOpType.SET)
        resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[entry])
        admin.incremental_alter_configs([resource])[resource].result(30)

    alter(f"{used / 2:.4f}")
    every = {d["directoryId"] for d in cluster.log_dirs(1)}
    wait_for(lambda: set(cluster.admin.broker(1)["cordonedLogDirs"]) == every, what="both dirs cordoned")
    assert first in every and all(d["spaceCordoned"] for d in cluster.log_dirs(1))
    alter("1")
    wait_for(lambda: not cluster.admin.broker(1)["cordonedLogDirs"], what="the dirs released")
    try:
        alter("1.5")
    except Exception as exc:
        assert "log.dir.cordon.threshold" in str(exc) and "no more than 1" in str(exc), exc
    else:
        raise AssertionError("a threshold above 1 was accepted")
