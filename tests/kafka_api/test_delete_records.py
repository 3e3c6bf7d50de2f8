"""DeleteRecords on a cluster of ours, beyond what the comparison with Kafka covers
(tests/kafka_tools/test_topic_configs_vs_kafka.py): the log start lands inside a batch, every
follower follows it, it survives a kill -9 of the leader, and a replica added afterwards by a
reassignment starts there too. The answer waits until every in-sync replica's log start has
reached the offset (Kafka's DelayedDeleteRecords): a paused in-sync follower times the call out,
a stopped one out of the ISR does not hold it. Kafka's `kafka-delete-records.sh` prints what it
prints against Apache Kafka (tests/kafka_tools/test_harness.py)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from e2e import kafka_tools
from e2e.kafka_tools import KafkaInstall
from e2e.wait import wait_for
from jbod_core.messages import AlterReassignmentsRequest, ReassignmentTarget
from jbod_local.kafka_clients import client_properties
from tests.kafka_api.conftest import (
    KafkaCluster,
    delete_records_with_the_tool,
    earliest_and_values,
    start_kafka_cluster,
    tool_deleted_records,
)
from tests.kafka_api.test_group_durability import paused
from tests.kafka_tools.test_harness import install  # noqa: F401  the module's fixture: Kafka's jars or a skip

pytestmark = [pytest.mark.slow, pytest.mark.integration]

TOPIC = "purged"
RECORDS = 100
CUT = 37  # inside the producer's batch
TIMEOUT = 30.0


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with contextlib.ExitStack() as stack:
        yield start_kafka_cluster(stack, tmp_path_factory.mktemp("delete-records"), brokers=4)


def _log_starts(kafka: KafkaCluster, brokers: list[int], topic: str = TOPIC) -> dict[int, str | None]:
    """The `log-start-offset` recorded in each broker's replica dir of the partition."""
    starts: dict[int, str | None] = {}
    for broker in brokers:
        dirs = [Path(d) / f"{topic}-0" for d in kafka.cluster.brokers[broker].log_dirs]
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


def _isr(kafka: KafkaCluster, topic: str) -> list[int]:
    return list(kafka.cluster.admin.describe_topic(topic)["partitions"][0]["isr"])


def _delete(client: AdminClient, topic: str, offset: int, *, wait_s: float = TIMEOUT) -> int:
    """DeleteRecords of partition 0 before `offset` (the broker waits up to `wait_s`): the low
    watermark, or minus the error code."""
    cut = TopicPartition(topic, 0, offset)
    future = client.delete_records([cut], request_timeout=TIMEOUT, operation_timeout=wait_s)[cut]
    try:
        return int(future.result(TIMEOUT).low_watermark)
    except KafkaException as exc:
        return -int(exc.args[0].code())


def test_the_answer_waits_for_every_in_sync_replicas_log_start(kafka: KafkaCluster) -> None:
    topic = "waited"
    admin = kafka.cluster.admin
    assert admin.create_topic(topic, replica_assignment=[[1, 2, 3]])["errorCode"] == 0
    wait_for(lambda: kafka.cluster.placed(topic), timeout=30, what="the topic placed")
    producer = Producer(kafka.client_config(**{"acks": "all", "linger.ms": 5}))
    for i in range(RECORDS):
        producer.produce(topic, f"v{i}".encode(), partition=0)
    assert producer.flush(TIMEOUT) == 0
    replicas = [1, 2, 3]
    wait_for(lambda: sorted(_isr(kafka, topic)) == replicas, timeout=30, what="every replica in sync")
    client = AdminClient(kafka.client_config())

    # Answered once every in-sync replica moved its log start: no replica is behind the answer.
    assert _delete(client, topic, 40) == 40
    assert _log_starts(kafka, replicas, topic) == dict.fromkeys(replicas, "40")

    # An in-sync follower that does not fetch holds the answer until the request's timeout.
    leader = admin.describe_topic(topic)["partitions"][0]["leader"]
    follower = max(r for r in replicas if r != leader)
    process = kafka.cluster.brokers[follower].process
    assert process is not None
    with paused([process.pid]):
        assert _delete(client, topic, 50, wait_s=1.0) == -KafkaError.REQUEST_TIMED_OUT
        assert _log_starts(kafka, [leader], topic) == {leader: "50"}  # the leader's moved all the same
    wait_for(
        lambda: _log_starts(kafka, replicas, topic) == dict.fromkeys(replicas, "50"),
        timeout=30,
        what="the paused follower's log start at 50 once resumed",
    )
    assert _delete(client, topic, 50) == 50

    # A follower out of the ISR holds nothing; it moves its log start once back.
    kafka.cluster.brokers[follower].stop()
    wait_for(
        lambda: follower not in _isr(kafka, topic), timeout=60, what="the stopped follower out of the ISR"
    )
    rest = [r for r in replicas if r != follower]
    assert _delete(client, topic, 60) == 60
    assert _log_starts(kafka, rest, topic) == dict.fromkeys(rest, "60")
    kafka.cluster.brokers[follower].start()
    wait_for(lambda: follower in _isr(kafka, topic), timeout=60, what="the follower back in the ISR")
    wait_for(  # from the leader's answer to its first fetch (the ISR may take it in before it applies it)
        lambda: _log_starts(kafka, [follower], topic) == {follower: "60"},
        timeout=30,
        what="the restarted follower's log start at 60",
    )
    assert _delete(client, topic, 70) == 70
    assert _log_starts(kafka, replicas, topic) == dict.fromkeys(replicas, "70")


def test_kafka_delete_records_sh_prints_what_it_prints_against_kafka(
    kafka: KafkaCluster,
    install: KafkaInstall,  # noqa: F811
    tmp_path: Path,
) -> None:
    topic = "tooled"
    admin = kafka.cluster.admin
    assert admin.create_topic(topic, replica_assignment=[[2, 3, 4]] * 3)["errorCode"] == 0
    wait_for(lambda: kafka.cluster.placed(topic), timeout=30, what="the topic placed")
    producer = Producer(kafka.client_config(**{"acks": "all"}))
    for i in range(10):
        producer.produce(topic, f"v{i}".encode(), partition=0)
    assert producer.flush(TIMEOUT) == 0
    config = tmp_path / "admin.properties"
    config.write_text(client_properties(kafka.admin_password))

    def run(args: list[str]) -> subprocess.CompletedProcess[str]:
        return kafka_tools.run_tool(
            "kafka-delete-records.sh", args, bootstrap=kafka.bootstrap, command_config=config, install=install
        )

    assert delete_records_with_the_tool(run, topic, tmp_path) == tool_deleted_records(topic)
    assert _log_starts(kafka, [2, 3, 4], topic) == dict.fromkeys([2, 3, 4], "4")
