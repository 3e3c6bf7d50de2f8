"""Apache Kafka 4.3.1's `kafka-acls.sh` against our brokers (issue 25), as the `admin` principal:
`--add`, `--list` and `--remove` of prefixed topic ACLs, a DENY on a group and the cluster's
ACLs, the tool's output checked against the controller's own view (`GET /v1/acls`); and a user
granted with it produces with the console producer where allowed and is refused elsewhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from jbod_local.kafka_clients import client_properties
from tests.kafka_tools.test_harness import install  # noqa: F401  the module's fixture: Kafka's jars or a skip
from tests.kafka_tools.test_our_brokers import Cluster, cluster  # noqa: F401  the module's cluster

pytestmark = [pytest.mark.slow, pytest.mark.integration]

ORDERS = "ResourcePattern(resourceType=TOPIC, name=orders-, patternType=PREFIXED)"
GROUP = "ResourcePattern(resourceType=GROUP, name=g1, patternType=LITERAL)"
CLUSTER = "ResourcePattern(resourceType=CLUSTER, name=kafka-cluster, patternType=LITERAL)"


def _entry(principal: str, operation: str, permission: str = "ALLOW") -> str:
    return f"(principal={principal}, host=*, operation={operation}, permissionType={permission})"


def _acls(tools: Cluster, args: list[str]) -> str:
    return tools.ok(tools.run("kafka-acls.sh", args))


def test_acls_add_list_and_remove(cluster: Cluster) -> None:  # noqa: F811
    added = _acls(
        cluster,
        ["--add", "--allow-principal", "User:alice", "--operation", "Write", "--operation", "Describe",
         "--topic", "orders-", "--resource-pattern-type", "prefixed"],
    )  # fmt: skip
    assert f"Adding ACLs for resource `{ORDERS}`:" in added
    assert _entry("User:alice", "WRITE") in added and _entry("User:alice", "DESCRIBE") in added
    _acls(cluster, ["--add", "--deny-principal", "User:alice", "--operation", "Read", "--group", "g1"])
    _acls(cluster, ["--add", "--allow-principal", "User:bob", "--operation", "Alter", "--cluster"])

    listed = _acls(cluster, ["--list"])
    for resource in (ORDERS, GROUP, CLUSTER):
        assert f"Current ACLs for resource `{resource}`:" in listed
    assert _entry("User:alice", "READ", "DENY") in listed and _entry("User:bob", "ALTER") in listed
    assert cluster.controller.describe_acls(resourceType="GROUP") == [
        {
            "resourceType": "GROUP",
            "resourceName": "g1",
            "patternType": "LITERAL",
            "principal": "User:alice",
            "host": "*",
            "operation": "READ",
            "permissionType": "DENY",
        }
    ]
    matching = _acls(cluster, ["--list", "--topic", "orders-eu", "--resource-pattern-type", "match"])
    assert ORDERS in matching and GROUP not in matching and CLUSTER not in matching
    bobs = _acls(cluster, ["--list", "--principal", "User:bob"])
    assert CLUSTER in bobs and ORDERS not in bobs

    _acls(
        cluster,
        ["--remove", "--force", "--deny-principal", "User:alice", "--operation", "Read", "--group", "g1"],
    )
    assert cluster.controller.describe_acls(resourceType="GROUP") == []
    _acls(cluster, ["--remove", "--force", "--cluster"])
    _acls(cluster, ["--remove", "--force", "--topic", "orders-", "--resource-pattern-type", "prefixed"])
    assert cluster.controller.describe_acls() == []
    assert "Current ACLs" not in _acls(cluster, ["--list"])


def test_a_user_granted_with_kafka_acls_produces_only_where_allowed(cluster: Cluster, tmp_path: Path) -> None:  # noqa: F811
    altered = cluster.run(
        "kafka-configs.sh",
        ["--alter", "--add-config", "SCRAM-SHA-512=[iterations=8192,password=carol-secret]",
         "--entity-type", "users", "--entity-name", "carol"],
    )  # fmt: skip
    cluster.ok(altered)
    for topic in ("sales-eu", "ledger"):
        cluster.ok(
            cluster.run("kafka-topics.sh", ["--create", "--topic", topic, "--replication-factor", "3"])
        )
    _acls(
        cluster,
        ["--add", "--allow-principal", "User:carol", "--operation", "Write", "--topic", "sales-",
         "--resource-pattern-type", "prefixed"],
    )  # fmt: skip
    carol = tmp_path / "carol.properties"
    carol.write_text(client_properties("carol-secret", user="carol"))
    produced = cluster.run("kafka-console-producer.sh", ["--topic", "sales-eu"], config=carol, input="c1\n")
    cluster.ok(produced)
    refused = cluster.run(
        "kafka-console-producer.sh",
        ["--topic", "ledger", "--producer-property", "max.block.ms=5000"],
        config=carol,
        input="c2\n",
    )
    assert "TopicAuthorizationException" in refused.stdout + refused.stderr, refused.stderr
    # No ACL lets carol change ACLs: ALTER on the cluster.
    denied = cluster.run(
        "kafka-acls.sh",
        ["--add", "--allow-principal", "User:carol", "--operation", "All", "--topic", "ledger"],
        config=carol,
    )
    assert "ClusterAuthorizationException" in denied.stdout + denied.stderr, denied.stderr
    assert cluster.controller.describe_acls(resourceName="ledger") == []
    _acls(cluster, ["--remove", "--force", "--topic", "sales-", "--resource-pattern-type", "prefixed"])
