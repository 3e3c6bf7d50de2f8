"""Partition reassignment between brokers (issue 24), driven by Apache Kafka 4.3.1's
`kafka-reassign-partitions.sh` and by `jbodctl reassign`, on one cluster of four brokers with two
plain log dirs each.

What each test checks is what a user sees: the tool's own output (`--execute`, `--verify`,
`--list`, `--cancel`), the partitions as the controller describes them, every record produced
(acks=all, idempotent librdkafka producer) read back once from the new replicas, the old replicas
deleted from the brokers they left, and a replica created in the log dir the JSON file named.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from e2e import kafka_tools
from e2e.kafka_tools import KafkaInstall
from e2e.wait import wait_for
from jbod_client.controller import ControllerClient
from jbod_local.kafka_clients import client_properties
from tests.kafka_api.conftest import KafkaCluster, start_kafka_cluster
from tests.kafka_tools.test_harness import install  # noqa: F401  the module's fixture: Kafka's jars or a skip

pytestmark = [pytest.mark.slow, pytest.mark.integration]

BROKERS = 4
RECORDS = 3000


@dataclasses.dataclass(frozen=True)
class Cluster:
    kafka: KafkaCluster
    install: KafkaInstall
    admin_properties: Path
    base: Path

    @property
    def controller(self) -> ControllerClient:
        return self.kafka.cluster.admin

    def tool(self, args: list[str], *, script: str = "kafka-reassign-partitions.sh") -> str:
        """`<script> args` as the admin; its stdout (it must exit 0)."""
        proc = kafka_tools.run_tool(
            script,
            args,
            bootstrap=self.kafka.bootstrap,
            command_config=self.admin_properties,
            install=self.install,
        )
        assert proc.returncode == 0, f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
        return proc.stdout

    def jbodctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        token = self.base / "admin.token"
        token.write_text(self.kafka.admin_password)
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "jbod_cli.cli",
                "--controller",
                self.kafka.cluster.controller.url,
                "--token-file",
                str(token),
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=180,
        )

    def partitions(self, topic: str) -> dict[int, dict[str, Any]]:
        return {p["partitionIndex"]: p for p in self.controller.describe_topic(topic)["partitions"]}

    def replica_dirs(self, node_id: int, name: str) -> list[Path]:
        """Where broker `node_id` holds a dir for partition `name` (`topic-N`), in any log dir."""
        return [d / name for d in self.kafka.cluster.brokers[node_id].log_dirs if (d / name).exists()]


@pytest.fixture(scope="module")
def cluster(install: KafkaInstall, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:  # noqa: F811
    base = tmp_path_factory.mktemp("reassign")
    with contextlib.ExitStack() as stack:
        kafka = start_kafka_cluster(stack, base, brokers=BROKERS, loop=False)
        admin_properties = base / "admin.properties"
        admin_properties.write_text(client_properties(kafka.admin_password))
        yield Cluster(kafka, install, admin_properties, base)


def _create(cluster: Cluster, topic: str, assignment: Sequence[Sequence[int]]) -> None:
    reply = cluster.controller.create_topic(topic, replica_assignment=[list(r) for r in assignment])
    assert reply["errorCode"] == 0, reply
    wait_for(lambda: cluster.kafka.cluster.placed(topic), timeout=30, what=f"placements of {topic}")


def _produce(cluster: Cluster, topic: str, partitions: int, count: int = RECORDS) -> set[bytes]:
    """`count` records spread over the partitions, acks=all and idempotent; the acknowledged ones."""
    acked: set[bytes] = set()

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked.add(msg.value())

    producer = Producer(
        cluster.kafka.client_config(**{"enable.idempotence": True, "acks": "all", "linger.ms": 5})
    )
    for i in range(count):
        producer.produce(topic, f"{topic}-{i}".encode(), partition=i % partitions, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert len(acked) == count
    return acked


def _read_all(cluster: Cluster, topic: str, partitions: int, expected: int) -> list[bytes]:
    consumer = Consumer(
        cluster.kafka.client_config(**{"group.id": f"check-{topic}", "enable.auto.commit": False})
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    try:
        wait_for(
            lambda: (
                values.extend(m.value() for m in consumer.consume(500, 1.0) if m.error() is None)
                or len(values) >= expected
            ),
            timeout=60,
            what=f"{expected} records of {topic}",
        )
    finally:
        consumer.close()
    return values


def _file(cluster: Cluster, name: str, partitions: Sequence[Mapping[str, Any]]) -> Path:
    path = cluster.base / name
    path.write_text(json.dumps({"version": 1, "partitions": list(partitions)}))
    return path


def _verify_until_complete(cluster: Cluster, path: Path) -> str:
    def verified() -> str | None:
        out = cluster.tool(["--verify", "--reassignment-json-file", str(path)])
        return None if "in progress" in out else out

    result: str = wait_for(verified, timeout=90, what=f"kafka-reassign-partitions.sh --verify of {path.name}")
    return result


def test_the_tool_moves_partitions_to_other_brokers_and_nothing_is_lost(cluster: Cluster) -> None:
    _create(cluster, "moved", [[1, 2, 3], [2, 3, 1]])
    acked = _produce(cluster, "moved", 2)
    path = _file(
        cluster,
        "moved.json",
        [
            {"topic": "moved", "partition": 0, "replicas": [4, 2, 3]},
            {"topic": "moved", "partition": 1, "replicas": [2, 4, 3]},
        ],
    )
    out = cluster.tool(["--execute", "--reassignment-json-file", str(path)])
    assert "Successfully started partition reassignments for moved-0,moved-1" in out
    verified = _verify_until_complete(cluster, path)
    assert "Reassignment of partition moved-0 is completed." in verified
    assert "Reassignment of partition moved-1 is completed." in verified
    parts = cluster.partitions("moved")
    assert (parts[0]["replicas"], parts[1]["replicas"]) == ([4, 2, 3], [2, 4, 3])
    assert all(not p.get("addingReplicas") and not p.get("removingReplicas") for p in parts.values())
    assert sorted(parts[0]["isr"]) == [2, 3, 4] and parts[0]["leader"] in (2, 3, 4)
    # Broker 1 left both partitions: its replicas are deleted, not kept as strays.
    wait_for(
        lambda: not cluster.replica_dirs(1, "moved-0") and not cluster.replica_dirs(1, "moved-1"),
        timeout=30,
        what="broker 1's replicas of moved to be deleted",
    )
    assert not [p for d in cluster.kafka.cluster.brokers[1].log_dirs for p in d.glob("moved-*")]
    assert cluster.replica_dirs(4, "moved-0") and cluster.replica_dirs(4, "moved-1")
    values = _read_all(cluster, "moved", 2, len(acked))
    assert len(values) == len(acked) and set(values) == acked


def test_the_tool_places_new_replicas_in_the_log_dirs_it_names(cluster: Cluster) -> None:
    _create(cluster, "placed", [[1, 2]])
    acked = _produce(cluster, "placed", 1, count=500)
    chosen = str(cluster.kafka.cluster.brokers[3].log_dirs[1])
    path = _file(
        cluster,
        "placed.json",
        [{"topic": "placed", "partition": 0, "replicas": [1, 3], "log_dirs": ["any", chosen]}],
    )
    cluster.tool(["--execute", "--reassignment-json-file", str(path)])
    verified = _verify_until_complete(cluster, path)
    assert "Reassignment of partition placed-0 is completed." in verified
    assert cluster.replica_dirs(3, "placed-0") == [Path(chosen) / "placed-0"]
    assert cluster.partitions("placed")[0]["replicas"] == [1, 3]
    assert set(_read_all(cluster, "placed", 1, len(acked))) == acked


def test_a_reassignment_to_a_stopped_broker_waits_is_listed_and_the_tool_cancels_it(cluster: Cluster) -> None:
    _create(cluster, "held", [[1, 2]])
    acked = _produce(cluster, "held", 1, count=300)
    broker = cluster.kafka.cluster.brokers[4]
    broker.stop()
    wait_for(lambda: cluster.controller.broker(4)["fenced"], timeout=30, what="broker 4 fenced")
    try:
        path = _file(cluster, "held.json", [{"topic": "held", "partition": 0, "replicas": [2, 4]}])
        # Kafka's tool only targets brokers DescribeCluster lists (unfenced ones); the controller,
        # as Kafka's, takes any registered broker: jbodctl starts it.
        started = cluster.jbodctl("reassign", "start", "held:0=2,4")
        assert started.returncode == 0, started.stderr
        listed = cluster.tool(["--list"])
        assert "held-0" in listed and "4" in listed, listed
        described = cluster.tool(["--describe", "--topic", "held"], script="kafka-topics.sh")
        assert "Adding Replicas: 4" in described and "Removing Replicas: 1" in described, described
        part = cluster.partitions("held")[0]
        assert (part["replicas"], part.get("addingReplicas", []), part.get("removingReplicas", [])) == (
            [2, 4, 1],
            [4],
            [1],
        )
        # Clearing throttles alters broker 4's own configs, which Kafka's Admin sends to broker 4
        # itself: with it stopped, the tool would time out (against Kafka too), so keep them.
        out = cluster.tool(["--cancel", "--preserve-throttles", "--reassignment-json-file", str(path)])
        assert "Successfully cancelled partition reassignment for: held-0" in out, out
        part = cluster.partitions("held")[0]
        assert (sorted(part["replicas"]), part.get("addingReplicas", [])) == ([1, 2], [])
        assert "No partition reassignments found." in cluster.tool(["--list"])
    finally:
        broker.start()
        wait_for(lambda: not cluster.controller.broker(4)["fenced"], timeout=60, what="broker 4 back")
    assert set(_read_all(cluster, "held", 1, len(acked))) == acked


def test_jbodctl_reassign_starts_waits_lists_and_refuses_bad_input(cluster: Cluster) -> None:
    _create(cluster, "ctl", [[3, 4]])
    acked = _produce(cluster, "ctl", 1, count=500)
    done = cluster.jbodctl("reassign", "start", "ctl:0=1,2", "--wait", "--timeout", "90", "-o", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        {"topic": "ctl", "partition": 0, "replicas": [1, 2], "errorCode": 0, "errorMessage": None}
    ]
    assert cluster.partitions("ctl")[0]["replicas"] == [1, 2]
    assert set(_read_all(cluster, "ctl", 1, len(acked))) == acked
    listed = cluster.jbodctl("reassign", "list", "-o", "json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == []
    for args, message in (
        (("reassign", "start", "ctl:0"), "expected TOPIC:PARTITION=BROKER,BROKER,..."),
        (("reassign", "start", "ctl:0=1,x"), "the replicas must be broker ids"),
        (("reassign", "start", "ctl:0=1,1"), "1 of 1 partition(s) refused"),
        (("reassign", "start", "nope:0=1,2"), "1 of 1 partition(s) refused"),
        (("reassign", "cancel", "ctl:0"), "1 of 1 partition(s) refused"),
    ):
        proc = cluster.jbodctl(*args)
        assert proc.returncode != 0, (args, proc.stdout)
        assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, (args, proc.stderr)
    assert cluster.partitions("ctl")[0]["replicas"] == [1, 2]


def test_the_tools_throttle_is_set_while_it_runs_and_cleared_by_verify(cluster: Cluster) -> None:
    _create(cluster, "slow", [[1, 2]])
    acked = _produce(cluster, "slow", 1, count=2000)
    path = _file(cluster, "slow.json", [{"topic": "slow", "partition": 0, "replicas": [3, 2]}])
    out = cluster.tool(["--execute", "--throttle", "200000", "--reassignment-json-file", str(path)])
    assert "The inter-broker throttle limit was set to 200000 B/s" in out, out
    # The tool set Kafka's throttle configs: the rates on the brokers involved, the replicas per topic.
    configs = cluster.controller.describe_topic("slow")["configs"]
    assert configs.get("leader.replication.throttled.replicas") == "0:1,0:2", configs
    assert configs.get("follower.replication.throttled.replicas") == "0:3", configs
    verified = _verify_until_complete(cluster, path)
    assert "Reassignment of partition slow-0 is completed." in verified
    assert "Clearing broker-level throttles on brokers" in verified
    assert "Clearing topic-level throttles on topic slow" in verified
    configs = cluster.controller.describe_topic("slow")["configs"]
    assert "leader.replication.throttled.replicas" not in configs
    assert "follower.replication.throttled.replicas" not in configs
    assert set(_read_all(cluster, "slow", 1, len(acked))) == acked


def test_apply_plan_carries_out_a_cross_broker_plan_throttled_into_the_planned_dirs(cluster: Cluster) -> None:
    """A `jbod-pipeline plan --across-brokers` plan.json (version 2): its reassignments run through
    the controller with Kafka's throttle configs, each new replica lands in its planned dir, and
    the throttles are gone afterwards."""
    _create(cluster, "planned", [[1, 2], [2, 3]])
    acked = _produce(cluster, "planned", 2, count=1000)
    dirs = {n: [d["directoryId"] for d in cluster.kafka.cluster.log_dirs(n)] for n in (1, 2, 3, 4)}
    paths = {d["directoryId"]: d["path"] for n in (1, 2, 3, 4) for d in cluster.kafka.cluster.log_dirs(n)}
    parts = cluster.partitions("planned")
    plan = {
        "version": 2,
        "moves": [],
        "acrossBrokers": True,
        "reassignments": [
            {
                "topic": "planned",
                "partition": 0,
                "replicas": [4, 2],
                "logDirs": [dirs[4][1], parts[0]["directories"][1]],
                "originalReplicas": [1, 2],
            },
            {
                "topic": "planned",
                "partition": 1,
                "replicas": [2, 4],
                "logDirs": [parts[1]["directories"][0], dirs[4][0]],
                "originalReplicas": [2, 3],
            },
        ],
    }
    path = cluster.base / "plan.json"
    path.write_text(json.dumps(plan))
    applied = cluster.jbodctl(
        "apply-plan", str(path), "--max-bytes-per-second", "2000000", "--poll-interval", "0.2"
    )
    assert applied.returncode == 0, applied.stderr
    assert "Applied plan: 2 done, 0 already-done, 0 skipped, 0 failed" in applied.stderr
    parts = cluster.partitions("planned")
    assert (parts[0]["replicas"], parts[1]["replicas"]) == ([4, 2], [2, 4])
    assert cluster.replica_dirs(4, "planned-0") == [Path(paths[dirs[4][1]]) / "planned-0"]
    assert cluster.replica_dirs(4, "planned-1") == [Path(paths[dirs[4][0]]) / "planned-1"]
    configs = cluster.controller.describe_topic("planned")["configs"]
    assert not {k for k in configs if "throttled" in k}, configs
    assert set(_read_all(cluster, "planned", 2, len(acked))) == acked
    # Applying the same plan again finds it done and sends nothing.
    again = cluster.jbodctl("apply-plan", str(path))
    assert again.returncode == 0 and "Applied plan: 0 done, 2 already-done" in again.stderr, again.stderr
