"""DeleteRecords on a cluster of ours, beyond what the comparison with Kafka covers
(tests/kafka_tools/test_topic_configs_vs_kafka.py): the log start lands inside a batch, every
follower follows it, it survives a kill -9 of the leader, and a replica added afterwards by a
reassignment starts there too."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from e2e.wait import wait_for
from jbod_core.messages import AlterReassignmentsRequest, ReassignmentTarget
from tests.kafka_api.conftest import KafkaCluster, earliest_and_values, start_kafka_cluster

pytestmark = [pytest.mark.slow, pytest.mark.integration]

TOPIC = "purged"
RECORDS = 100
CUT = 37  # inside the producer's batch
TIMEOUT = 30.0


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with contextlib.ExitStack() as stack:
        yield start_kafka_cluster(stack, tmp_path_factory.mktemp("delete-records"), brokers=4)


def _log_starts(kafka: KafkaCluster, brokers: list[int]) -> dict[int, str | None]:
    """The `log-start-offset` recorded in each broker's replica dir of the partition."""
    starts: dict[int, str | None] = {}
    for broker in brokers:
        dirs = [Path(d) / f"{TOPIC}-0" for d in kafka.cluster.brokers[broker].log_dirs]
        files = [d / "log-start-offset" for d in dirs if d.exists()]
        starts[broker] = files[0].read_text().strip() if files and files[0].exists() else None
    return starts


def _read_all(kafka: KafkaCluster) -> tuple[int, list[bytes]]:
    return earliest_and_values(kafka.client_config(), TOPIC, timeout=TIMEOUT)


def _readable(kafka: KafkaCluster) -> tuple[int, list[bytes]] | None:
    try:
        return _read_all(kafka)
    except KafkaException:
        return None


def test_the_log_start_reaches_every_replica_survives_a_kill_and_a_new_replica(kafka: KafkaCluster) -> None:
    admin = kafka.cluster.admin
    assert admin.create_topic(TOPIC, replica_assignment=[[1, 2, 3]])["errorCode"] == 0
    wait_for(lambda: kafka.cluster.placed(TOPIC), timeout=30, what="the topic placed")
    producer = Producer(kafka.client_config(**{"acks": "all", "linger.ms": 200}))
    for i in range(RECORDS):
        producer.produce(TOPIC, f"v{i}".encode(), key=b"k", partition=0)
    assert producer.flush(TIMEOUT) == 0

    client = AdminClient(kafka.client_config())
    cut = TopicPartition(TOPIC, 0, CUT)
    assert client.delete_records([cut], request_timeout=TIMEOUT)[cut].result(TIMEOUT).low_watermark == CUT
    wait_for(
        lambda: set(_log_starts(kafka, [1, 2, 3]).values()) == {str(CUT)},
        timeout=30,
        what="every replica's log start at the cut",
    )
    expected = [f"v{i}".encode() for i in range(CUT, RECORDS)]
    assert _read_all(kafka) == (CUT, expected)

    leader = admin.describe_topic(TOPIC)["partitions"][0]["leader"]
    broker = kafka.cluster.brokers[leader]
    broker.kill()  # SIGKILL
    broker.start()
    # The new incarnation registers once the old one's session expired; until then reads wait.
    wait_for(lambda: _readable(kafka) == (CUT, expected), timeout=90, what="the records from the cut again")

    # A replica added now starts inside the batch that holds the cut, and keeps the cut.
    moved = ReassignmentTarget(topic=TOPIC, partition=0, replicas=[4, 2, 3])
    admin.alter_reassignments(AlterReassignmentsRequest(partitions=[moved]))
    wait_for(
        lambda: (
            (p := admin.describe_topic(TOPIC)["partitions"][0])["replicas"] == [4, 2, 3]
            and not p.get("addingReplicas")
            and 4 in p["isr"]
        ),
        timeout=60,
        what="broker 4 in the ISR in place of broker 1",
    )
    assert _log_starts(kafka, [4]) == {4: str(CUT)}
    assert _read_all(kafka) == (CUT, expected)
