"""Leader elections with Apache Kafka 4.3.1's `kafka-leader-election.sh`, on our cluster and on a
real Kafka of three brokers side by side: after `kafka-reassign-partitions.sh` reorders a
partition's replicas (its leader no longer its preferred replica), a preferred election moves
leadership to the new preferred replica; a second one, an unclean one on a partition with a
leader, and one over every partition find nothing to do; an unknown partition is refused. The
tool's output and exit code must be Kafka's. Then, on ours, the controller's automatic balance
(`--leader-imbalance-check-interval-seconds`) moves leadership back by itself after a broker's
restart, as Kafka's `auto.leader.rebalance.enable` does."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from e2e import kafka_tools
from e2e.kafka_tools import KafkaInstall, KafkaNodesCluster, ScramUser
from e2e.wait import wait_for
from jbod_core.messages import AlterReassignmentsRequest, ReassignmentTarget
from jbod_local.kafka_clients import client_properties
from tests.kafka_api.conftest import start_kafka_cluster
from tests.kafka_tools.test_harness import install  # noqa: F401  the module's fixture: Kafka's jars or a skip

pytestmark = [pytest.mark.slow, pytest.mark.integration]

TOPIC = "elect"
TIMEOUT = 60.0
# Partition p's replicas start as the rotation of (1, 2, 3) by p; reordering p0 makes 2 preferred.
ASSIGNMENT = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}


@dataclass
class Side:
    name: str
    bootstrap: str
    admin_config: dict[str, Any]
    properties: Path
    install: KafkaInstall

    def tool(self, script: str, args: list[str]) -> tuple[int, str]:
        proc = kafka_tools.run_tool(
            script, args, bootstrap=self.bootstrap, command_config=self.properties, install=self.install
        )
        return proc.returncode, _normalised(proc.stdout + proc.stderr)

    def leaders(self) -> dict[int, int]:
        admin = AdminClient(self.admin_config)
        topic = admin.list_topics(TOPIC, timeout=TIMEOUT).topics[TOPIC]
        return {p: meta.leader for p, meta in topic.partitions.items()}


def _normalised(text: str) -> str:
    """The tool's output without the JVM's warnings and with partitions sorted in each list."""
    lines = [
        line for line in text.splitlines() if line.strip() and "WARN" not in line and "SLF4J" not in line
    ]

    def sort_list(match: re.Match[str]) -> str:
        return ", ".join(sorted(match.group(0).split(", ")))

    return "\n".join(re.sub(r"elect-\d+(, elect-\d+)*", sort_list, line) for line in lines)


def _prepare(side: Side, base: Path) -> Side:
    assignment = ",".join(":".join(str(b) for b in ASSIGNMENT[p]) for p in sorted(ASSIGNMENT))
    code, output = side.tool(
        "kafka-topics.sh", ["--create", "--topic", TOPIC, "--replica-assignment", assignment]
    )
    assert code == 0, output
    wait_for(lambda: side.leaders() == {0: 1, 1: 2, 2: 3}, timeout=TIMEOUT, what="the preferred leaders")
    plan = base / f"reorder-{side.name}.json"
    plan.write_text(
        json.dumps({"version": 1, "partitions": [{"topic": TOPIC, "partition": 0, "replicas": [2, 1, 3]}]})
    )
    code, output = side.tool(
        "kafka-reassign-partitions.sh", ["--execute", "--reassignment-json-file", str(plan)]
    )
    assert code == 0, output
    return side


@pytest.fixture(scope="module")
def kafka(install: KafkaInstall, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Side]:  # noqa: F811
    base = tmp_path_factory.mktemp("election-kafka")
    user = ScramUser()
    with KafkaNodesCluster(install, brokers=3, log_dir_count=1, scram=user) as real:
        properties = base / "admin.properties"
        properties.write_text("".join(f"{k}={v}\n" for k, v in user.client_config().items()))
        config = {"bootstrap.servers": real.bootstrap, **user.client_config()}
        yield _prepare(Side("Kafka", real.bootstrap, _librdkafka(config), properties, install), base)


@pytest.fixture(scope="module")
def ours(install: KafkaInstall, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Side]:  # noqa: F811
    base = tmp_path_factory.mktemp("election-ours")
    with contextlib.ExitStack() as stack:
        cluster = start_kafka_cluster(
            stack,
            base,
            brokers=3,
            dirs=1,
            controller_args=["--leader-imbalance-check-interval-seconds", "3600"],
        )
        properties = base / "admin.properties"
        properties.write_text(client_properties(cluster.admin_password))
        side = Side("ours", cluster.bootstrap, cluster.client_config(), properties, install)
        yield _prepare(side, base)


def _librdkafka(java_config: dict[str, str]) -> dict[str, Any]:
    """librdkafka's keys for a Java client's SASL settings."""
    jaas = java_config["sasl.jaas.config"]
    user = re.search(r'username="([^"]*)"', jaas)
    password = re.search(r'password="([^"]*)"', jaas)
    assert user and password
    return {
        "bootstrap.servers": java_config["bootstrap.servers"],
        "security.protocol": java_config["security.protocol"],
        "sasl.mechanism": java_config["sasl.mechanism"],
        "sasl.username": user.group(1),
        "sasl.password": password.group(1),
    }


def _session(side: Side) -> list[Any]:
    seen: list[Any] = [side.leaders()]
    for args in (
        ["--election-type", "preferred", "--topic", TOPIC, "--partition", "0"],
        ["--election-type", "preferred", "--topic", TOPIC, "--partition", "0"],
        ["--election-type", "unclean", "--topic", TOPIC, "--partition", "1"],
        ["--election-type", "preferred", "--all-topic-partitions"],
        ["--election-type", "preferred", "--topic", TOPIC, "--partition", "7"],
    ):
        seen.append(side.tool("kafka-leader-election.sh", args))
    seen.append(side.leaders())
    return seen


def test_kafka_leader_election_answers_as_on_kafka(kafka: Side, ours: Side) -> None:
    expected = _session(kafka)
    assert expected[0] == {0: 1, 1: 2, 2: 3}  # the reorder kept the leader
    assert (
        expected[1][0] == 0
        and "Successfully completed leader election (PREFERRED) for partitions elect-0" in expected[1][1]
    )
    assert expected[-1] == {0: 2, 1: 2, 2: 3}
    assert _session(ours) == expected


def test_the_controller_moves_leadership_back_to_preferred_replicas_by_itself(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Kafka's `auto.leader.rebalance.enable`: a partition whose replicas are reordered (its
    leader no longer preferred) is led by its preferred replica within a check interval."""
    with contextlib.ExitStack() as stack:
        cluster = start_kafka_cluster(
            stack,
            tmp_path_factory.mktemp("balance"),
            brokers=2,
            dirs=1,
            controller_args=["--leader-imbalance-check-interval-seconds", "1"],
        )
        controller = cluster.cluster.admin
        assert controller.create_topic("balanced", replica_assignment=[[1, 2], [2, 1]])["errorCode"] == 0

        def leaders() -> list[int]:
            return [p["leader"] for p in controller.describe_topic("balanced")["partitions"]]

        wait_for(lambda: leaders() == [1, 2], timeout=TIMEOUT, what="the preferred leaders")
        request = AlterReassignmentsRequest(
            partitions=[ReassignmentTarget(topic="balanced", partition=0, replicas=[2, 1])]
        )
        assert [r.error_code for r in controller.alter_reassignments(request).results] == [0]
        wait_for(
            lambda: leaders() == [2, 2], timeout=TIMEOUT, what="leadership back on the preferred replica"
        )
