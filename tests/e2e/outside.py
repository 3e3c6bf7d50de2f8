"""Kafka clients on the host, outside the kind cluster: librdkafka (confluent-kafka) through a
JbodCluster's external listeners, at the addresses `status.listeners` gives.

* `scram_config` / `tls_config`: a client's settings from a JbodUser's Secret, as the docs tell
  a user outside the cluster to make them (docs/install.md, "External listeners");
* `racks` / `replicas`: the brokers' racks (DescribeCluster) and each partition's replicas;
* `read_partition`: every record of one partition and the brokers that served its fetches
  (librdkafka's statistics: `broker` of the partition);
* `produced_rate`: bytes per second acknowledged to one producer writing as fast as it may, once
  the broker's quota holds it;
* `SteadyProducer`: an idempotent acks=all producer in a thread until stopped, recording what
  was acknowledged and any fatal error; a full local queue makes it wait for room, not stop.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

QUOTA_WINDOW_S = 11.0  # quota.window.num x quota.window.size.seconds, Kafka's defaults


def scram_config(bootstrap: str, secret: Mapping[str, str]) -> dict[str, Any]:
    """SASL_PLAINTEXT with the user's SCRAM-SHA-512 password (a listener with `tls: false`)."""
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": secret["username"],
        "sasl.password": secret["password"],
    }


def tls_config(bootstrap: str, secret: Mapping[str, str], directory: Path) -> dict[str, Any]:
    """SSL with the user's client certificate, trusting the cluster CA; the PEM files are written
    to `directory`. librdkafka checks the brokers' names (here: the nodes' addresses)."""
    directory.mkdir(parents=True, exist_ok=True)
    files = {}
    for key in ("ca.crt", "user.crt", "user.key"):
        path = directory / key
        path.write_text(secret[key])
        files[key] = str(path)
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": files["ca.crt"],
        "ssl.certificate.location": files["user.crt"],
        "ssl.key.location": files["user.key"],
    }


def racks(config: Mapping[str, Any]) -> dict[int, str | None]:
    """Each broker's rack, as DescribeCluster gives it."""
    admin = AdminClient(dict(config))
    nodes = admin.describe_cluster(request_timeout=20).result(timeout=30).nodes
    return {node.id: node.rack for node in nodes}


def replicas(config: Mapping[str, Any], topic: str) -> dict[int, tuple[int, list[int]]]:
    """Each partition of `topic`: (leader, replicas)."""
    metadata = AdminClient(dict(config)).list_topics(topic, timeout=20)
    found = metadata.topics[topic]
    if found.error is not None:
        raise AssertionError(f"{topic}: {found.error}")
    return {p.id: (p.leader, list(p.replicas)) for p in found.partitions.values()}


def read_partition(
    config: Mapping[str, Any], topic: str, partition: int, count: int
) -> tuple[list[bytes], list[int]]:
    """The first `count` records of one partition, and the brokers librdkafka fetched them from, in
    order (its statistics' `broker` of the partition every 200 ms, repeats dropped), until it
    has read them all and reported once more."""
    served: list[int] = []

    def on_stats(text: str) -> None:
        entry = json.loads(text).get("topics", {}).get(topic, {}).get("partitions", {}).get(str(partition))
        broker = int(entry["broker"]) if entry else -1
        if broker >= 0 and (not served or served[-1] != broker):
            served.append(broker)

    consumer = Consumer(
        {
            **config,
            "group.id": f"outside-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "statistics.interval.ms": 200,
            "stats_cb": on_stats,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        values: list[bytes] = []
        deadline = time.monotonic() + 90
        while len(values) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
        settle = time.monotonic() + 1
        while time.monotonic() < settle:  # one more report after the last record
            consumer.poll(0.2)
        return values, served
    finally:
        consumer.close()


def produced_rate(config: Mapping[str, Any], topic: str, partition: int, *, seconds: float) -> float:
    """Bytes of value per second acknowledged to a producer writing 1,000-byte records to one
    partition as fast as it is let, over `seconds` of its steady state: from `QUOTA_WINDOW_S`
    after the first throttle the broker reported (Kafka's rate window, 11 samples of 1 s, lets
    a new client burst first; past it the burst no longer counts)."""
    acked: list[tuple[float, int]] = []
    throttled: list[float] = []

    def delivered(err: KafkaError | None, msg: Any) -> None:
        if err is None:
            acked.append((time.monotonic(), len(msg.value())))

    producer = Producer(
        {
            **config,
            "acks": 1,  # the quota is on bytes into the leader: no wait for followers on a loaded machine
            "batch.size": 16384,  # so that one request is a small part of a second's quota
            "linger.ms": 5,
            "throttle_cb": lambda _event: throttled.append(time.monotonic()),
        }
    )
    value = b"q" * 1000
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (
        not throttled or time.monotonic() < throttled[0] + QUOTA_WINDOW_S + seconds
    ):
        try:
            producer.produce(topic, value, partition=partition, on_delivery=delivered)
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    producer.flush(30)
    if not throttled:
        raise AssertionError(f"no throttle reported in 60 s ({len(acked)} records acknowledged)")
    start = throttled[0] + QUOTA_WINDOW_S
    return sum(n for t, n in acked if start <= t < start + seconds) / seconds


class SteadyProducer:
    """An idempotent acks=all producer writing `d-<n>` to `topic` ~200 times a second until `stop`."""

    def __init__(self, config: Mapping[str, Any], topic: str) -> None:
        self.topic = topic
        self.acked: set[bytes] = set()
        self.fatal: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        self._producer = Producer(
            {**config, "enable.idempotence": True, "acks": "all", "error_cb": self._on_error}
        )
        self._thread = threading.Thread(target=self._run, name="steady-producer", daemon=True)

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self.fatal.append(str(err))

    def _delivered(self, err: KafkaError | None, msg: Any) -> None:
        if err is None:
            self.acked.add(msg.value())
        else:
            self.fatal.append(str(err))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._producer.produce(self.topic, b"d-%d" % self.sent, on_delivery=self._delivered)
            except BufferError:  # librdkafka's local queue is full (brokers away): wait for room
                self._producer.poll(0.1)
                continue
            self.sent += 1
            self._producer.poll(0.005)

    def start(self) -> SteadyProducer:
        self._thread.start()
        return self

    def stop(self) -> int:
        """Stop sending; the count of records still unacknowledged after 60 s."""
        self._stop.set()
        self._thread.join()
        return int(self._producer.flush(60))


def read_topic(config: Mapping[str, Any], topic: str, expected: set[bytes]) -> set[bytes]:
    """Every value of `topic` read by a new consumer group until `expected` is covered (or 90 s)."""
    consumer = Consumer(
        {**config, "group.id": f"outside-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest"}
    )
    seen: set[bytes] = set()
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 90
        while not expected <= seen and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.add(msg.value())
        return seen
    finally:
        consumer.close()
