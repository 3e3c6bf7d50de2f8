"""Reassignment under faults (issue 24): partitions move between brokers while an idempotent
librdkafka producer writes with acks=all, a target broker is killed with SIGKILL, a disk of a
broker the partitions leave really fails (its ext4 volume is shut down: EIO), and the active
controller of a quorum on etcd is killed mid reassignment. The new active controller carries the
reassignment on from the metadata log; once every partition has its target replicas, every
acknowledged record is read back exactly once.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from jbod_client.controller import read_token
from jbod_core.messages import AlterReassignmentsRequest
from tests.broker.conftest import Cluster, start_cluster, wait_for
from tests.kafka_api.conftest import KAFKA_LISTENERS

pytestmark = [pytest.mark.slow, pytest.mark.integration]

TOPIC = "moving"
PARTITIONS = 4
SESSION_TIMEOUT_MS = 4000
# Partitions 0-3 start on brokers 1-3 and end on 2-4 / 4,2,... : broker 1 leaves them all, broker
# 4 joins them all.
START = [[1, 2, 3], [2, 3, 1], [3, 1, 2], [1, 3, 2]]
TARGET = [[4, 2, 3], [2, 3, 4], [3, 4, 2], [4, 3, 2]]


class Writer:
    """An idempotent acks=all producer in a thread; what the brokers acknowledged."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.producer = Producer(
            {
                **config,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 120_000,
            }
        )
        self.acked: set[bytes] = set()
        self.failed = 0
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acked.add(msg.value())
        else:
            self.failed += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            for _ in range(20):
                self.producer.produce(
                    TOPIC, f"r{self.sent:08d}".encode() + b"x" * 400, on_delivery=self._delivered
                )
                self.sent += 1
            self.producer.poll(0.01)
        self.producer.flush(150)

    def start(self) -> Writer:
        self._thread.start()
        return self

    def wait_acked(self, more: int, *, timeout: float, what: str) -> None:
        target = len(self.acked) + more
        wait_for(lambda: len(self.acked) >= target, timeout=timeout, what=f"{more} more acknowledged {what}")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(180)
        assert not self._thread.is_alive(), "the producer did not flush"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with contextlib.ExitStack() as stack:
        cluster = start_cluster(
            stack,
            tmp_path,
            controller_args=["--broker-session-timeout-ms", str(SESSION_TIMEOUT_MS)],
            quorum=True,
            admin_timeout=10,
        )
        for node_id in (1, 2, 3, 4):
            cluster.add_broker(
                node_id,
                loop=True,
                properties={
                    "listeners": KAFKA_LISTENERS,
                    "admin.token.file": str(cluster.controller.admin_token_file),
                    "log.dir.failure.timeout.ms": "2000",
                },
            )
        wait_for(lambda: cluster.all_unfenced(4), timeout=60, what="four unfenced brokers")
        yield cluster


def _client_config(cluster: Cluster) -> dict[str, Any]:
    return {
        "bootstrap.servers": ",".join(b.kafka["SASL_PLAINTEXT"] for b in cluster.brokers.values() if b.kafka),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "admin",
        "sasl.password": read_token(cluster.controller.admin_token_file),
    }


def _partitions(cluster: Cluster) -> dict[int, dict[str, Any]]:
    return {p["partitionIndex"]: p for p in cluster.admin.describe_topic(TOPIC)["partitions"]}


def _read_back(cluster: Cluster, expected: int) -> Counter[bytes]:
    consumer = Consumer({**_client_config(cluster), "group.id": "check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    seen: Counter[bytes] = Counter()
    deadline = time.monotonic() + 120
    try:
        while sum(seen.values()) < expected and time.monotonic() < deadline:
            for message in consumer.consume(1000, 1.0):
                if message.error() is None:
                    seen[message.value()] += 1
        # Anything past the acknowledged ones (unacknowledged but written) is read too.
        for message in consumer.consume(1000, 2.0):
            if message.error() is None:
                seen[message.value()] += 1
    finally:
        consumer.close()
    return seen


def test_reassignment_survives_a_killed_target_a_failed_source_disk_and_a_controller_failover(
    cluster: Cluster,
) -> None:
    reply = cluster.admin.create_topic(TOPIC, replica_assignment=START, configs={"min.insync.replicas": "2"})
    assert reply["errorCode"] == 0, reply
    wait_for(lambda: cluster.placed(TOPIC), timeout=30, what="placements")
    writer = Writer(_client_config(cluster)).start()
    try:
        writer.wait_acked(10_000, timeout=90, what="before the reassignment")
        request = AlterReassignmentsRequest.model_validate(
            {"partitions": [{"topic": TOPIC, "partition": p, "replicas": t} for p, t in enumerate(TARGET)]}
        )
        reply = cluster.admin.alter_reassignments(request)
        assert [r.error_code for r in reply.results] == [0] * PARTITIONS, reply
        assert all(p.get("addingReplicas") == [4] for p in _partitions(cluster).values())

        # A target broker dies mid catch-up; a leaving broker's disk fails; the active controller dies.
        cluster.brokers[4].kill()
        failing = cluster.mounts[(1, 0)]
        failing.shutdown()
        wait_for(
            lambda: cluster.admin.broker(1)["offlineLogDirs"],
            timeout=30,
            what="broker 1's dir reported offline",
        )
        active = cluster.active_controller()
        cluster.controllers[active].kill()
        cluster.active_controller(other_than=active, timeout=60)
        writer.wait_acked(2000, timeout=90, what="after the controller failover")
        assert all(p.get("removingReplicas") == [1] for p in _partitions(cluster).values())
        cluster.brokers[4].start()
        cluster.controllers[active].start()

        def done() -> bool:
            parts = _partitions(cluster)
            return all(
                parts[p]["replicas"] == TARGET[p] and not parts[p].get("addingReplicas")
                for p in range(PARTITIONS)
            )

        wait_for(done, timeout=180, what="every partition on its target replicas")
        writer.wait_acked(2000, timeout=60, what="after the reassignment")
    finally:
        writer.stop()
    parts = _partitions(cluster)
    assert all(
        sorted(parts[p]["isr"]) == sorted(TARGET[p]) or 4 in parts[p]["isr"] for p in range(PARTITIONS)
    )
    seen = _read_back(cluster, len(writer.acked))
    missing = writer.acked - set(seen)
    duplicated = [v for v, n in seen.items() if n > 1]
    assert not missing, f"{len(missing)} acknowledged records lost of {len(writer.acked)}"
    assert not duplicated, f"{len(duplicated)} records read more than once"
    # Broker 1 left every partition: its replicas in its healthy dir are deleted.
    healthy = cluster.mounts[(1, 1)].path
    wait_for(lambda: not list(healthy.glob(f"{TOPIC}-*")), timeout=30, what="broker 1's replicas deleted")
