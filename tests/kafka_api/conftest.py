"""A real local cluster whose brokers serve the Kafka protocol on SASL_PLAINTEXT listeners, and
client configurations for librdkafka (confluent-kafka) as a user writes them."""

from __future__ import annotations

import contextlib
import json
import subprocess
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from jbod_client.controller import read_token
from jbod_local.processes import DEFAULT_LISTENERS
from tests.broker.conftest import Cluster, broker_ready, start_cluster, wait_for

#: Every test broker's listeners (the HTTP API and SASL_PLAINTEXT), for tests that set them again.
KAFKA_LISTENERS = DEFAULT_LISTENERS


@dataclass
class KafkaCluster:
    cluster: Cluster
    admin_password: str

    @property
    def bootstrap(self) -> str:
        return self.cluster.kafka_bootstrap

    def client_config(self, **extra: Any) -> dict[str, Any]:
        """librdkafka's configuration of the `admin` principal (`Cluster.kafka_config`)."""
        return self.cluster.kafka_config(**extra)


def start_kafka_cluster(
    stack: contextlib.ExitStack,
    base: Path,
    *,
    brokers: int = 3,
    dirs: int = 2,
    loop: bool = False,
    controller_args: Sequence[str] = (),
    **settings: str,
) -> KafkaCluster:
    """`brokers` brokers with `dirs` log dirs each (loop-mounted ext4 volumes with `loop`, root), the
    controller started with `controller_args`; `settings` are broker properties, `_` for `.`."""
    cluster = start_cluster(stack, base, controller_args=controller_args)
    for node_id in range(1, brokers + 1):
        cluster.add_broker(
            node_id,
            dirs=dirs,
            loop=loop,
            properties={k.replace("_", "."): v for k, v in settings.items()},
        )
    wait_for(
        lambda: (
            (c := cluster.admin.cluster())["brokers"] == brokers
            and c["fencedBrokers"] == 0
            and all(broker_ready(b.url) for b in cluster.brokers.values())
        ),
        what="every broker registered, unfenced and listing itself in its Metadata (/readyz)",
    )
    return KafkaCluster(cluster, read_token(cluster.controller.admin_token_file))


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with contextlib.ExitStack() as stack:
        yield start_kafka_cluster(stack, tmp_path_factory.mktemp("kafka"))


def _watermarks(consumer: Consumer, topic: str, timeout: float) -> tuple[int, int]:
    """Partition 0's watermarks; a partition librdkafka's metadata does not know yet (a leader
    that just came back) is asked again until `timeout`."""
    found: list[tuple[int, int]] = []

    def known() -> bool:
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._UNKNOWN_PARTITION:
                raise
            return False
        found.append((int(low), int(high)))
        return True

    wait_for(known, timeout=timeout, what=f"the watermarks of {topic}-0")
    return found[-1]


def earliest_and_values(
    config: dict[str, Any], topic: str, *, timeout: float = 30.0
) -> tuple[int, list[bytes]]:
    """With librdkafka's `config`: ListOffsets earliest of `topic`'s partition 0, and every value
    a consumer reads from there up to the end offset (a fresh group, nothing committed)."""
    consumer = Consumer({**config, "group.id": f"read-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False})
    try:
        earliest, end = _watermarks(consumer, topic, timeout)
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        values: list[bytes] = []
        while len(values) < end - earliest:
            message = consumer.poll(timeout)
            assert message is not None, f"only {len(values)} of {end - earliest} records read"
            assert message.error() is None, message.error()
            values.append(message.value())
        return earliest, values
    finally:
        consumer.close()


def delete_records_with_the_tool(
    run: Callable[[list[str]], subprocess.CompletedProcess[str]], topic: str, work_dir: Path
) -> tuple[int, list[str]]:
    """`kafka-delete-records.sh --offset-json-file` (through `run`, against one cluster) on
    `topic`'s partitions 0 (10 records: before 4), 1 (empty: -1, up to the high watermark) and
    2 (empty: 40, out of range): its exit code and its output's lines, the partitions sorted (the
    tool prints them in no set order). `tool_deleted_records` is what Kafka 4.3.1 prints."""
    offsets = work_dir / f"delete-{topic}.json"
    partitions = [(0, 4), (1, -1), (2, 40)]
    offsets.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [{"topic": topic, "partition": p, "offset": o} for p, o in partitions],
            }
        )
    )
    proc = run(["--offset-json-file", str(offsets)])
    head, *lines = proc.stdout.splitlines() or [""]
    return proc.returncode, [head, *sorted(lines)]


def tool_deleted_records(topic: str) -> tuple[int, list[str]]:
    """What Kafka 4.3.1's `kafka-delete-records.sh` prints for `delete_records_with_the_tool`: exit 0
    whatever a partition's error."""
    return 0, [
        "Executing records delete operation",
        "Records delete operation completed:",
        f"partition: {topic}-0\tlow_watermark: 4",
        f"partition: {topic}-1\tlow_watermark: 0",
        f"partition: {topic}-2\terror: org.apache.kafka.common.errors.OffsetOutOfRangeException: The "
        "requested offset is not within the range of offsets maintained by the server.",
    ]
