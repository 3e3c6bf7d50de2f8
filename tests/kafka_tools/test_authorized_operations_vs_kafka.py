"""Authorized operations (KIP-430) on our broker and on Apache Kafka 4.3.1 side by side, with the
same librdkafka calls: `describe_topics`, `describe_cluster` and `describe_consumer_groups` with
`include_authorized_operations`, as the super user `admin` (every supported operation) and as a
user granted a few ACLs (only those, DESCRIBE implied by READ and WRITE, DESCRIBE_CONFIGS by
ALTER_CONFIGS; the cluster's none at all without DESCRIBE on it); without asking, no
operations are answered (librdkafka's None for both). This is what
librdkafka's 0081_admin checks."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from e2e.kafka_tools import KafkaCluster as RealKafka
from e2e.kafka_tools import KafkaInstall, ScramUser
from e2e.wait import wait_for
from tests.kafka_api.conftest import start_kafka_cluster
from tests.kafka_tools.test_harness import install  # noqa: F401  the module's fixture: Kafka's jars or a skip

pytestmark = [pytest.mark.slow, pytest.mark.integration]

TIMEOUT = 30.0
TOPIC, GROUP = "granted", "granted-group"
ALICE, ALICE_PASSWORD = "alice", "alice-secret-1"


@dataclass
class Side:
    name: str
    bootstrap: str
    admin_user: str
    admin_password: str

    def config(self, user: str, password: str) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": password,
        }

    def admin(self, user: str | None = None) -> AdminClient:
        if user is None:
            return AdminClient(self.config(self.admin_user, self.admin_password))
        return AdminClient(self.config(user, ALICE_PASSWORD))


def _prepare(side: Side) -> Side:
    """The topic, alice's SCRAM credential and ACLs, and a group with a committed offset."""
    admin = side.admin()
    admin.create_topics([NewTopic(TOPIC, 1, 1)], request_timeout=TIMEOUT)[TOPIC].result(TIMEOUT)
    upsertion = UserScramCredentialUpsertion(
        ALICE, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), ALICE_PASSWORD.encode()
    )
    for future in admin.alter_user_scram_credentials([upsertion]).values():
        future.result(TIMEOUT)
    principal = f"User:{ALICE}"
    grants = [
        (ResourceType.TOPIC, TOPIC, AclOperation.READ),
        (ResourceType.TOPIC, TOPIC, AclOperation.WRITE),
        (ResourceType.TOPIC, TOPIC, AclOperation.ALTER_CONFIGS),
        (ResourceType.GROUP, GROUP, AclOperation.READ),
        (ResourceType.BROKER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE),
    ]
    bindings = [
        AclBinding(
            kind, name, ResourcePatternType.LITERAL, principal, "*", operation, AclPermissionType.ALLOW
        )
        for kind, name, operation in grants
    ]
    for future in admin.create_acls(bindings, request_timeout=TIMEOUT).values():
        future.result(TIMEOUT)
    consumer = Consumer({**side.config(side.admin_user, side.admin_password), "group.id": GROUP})
    try:  # retried while the new cluster's group coordinator loads (NOT_COORDINATOR)
        wait_for(
            lambda: consumer.commit(offsets=[TopicPartition(TOPIC, 0, 0)], asynchronous=False) is not None,
            timeout=TIMEOUT,
            interval=0.2,
            what="the group's first commit",
        )
    finally:
        consumer.close()
    return side


@pytest.fixture(scope="module")
def kafka(install: KafkaInstall) -> Iterator[Side]:  # noqa: F811
    user = ScramUser()
    properties = {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:{user.name};User:ANONYMOUS",  # ANONYMOUS: the controller listener
    }
    with RealKafka(install, scram=user, properties=properties) as real:
        yield _prepare(Side("Kafka", real.bootstrap, user.name, user.password))


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Side]:
    with contextlib.ExitStack() as stack:
        cluster = start_kafka_cluster(stack, tmp_path_factory.mktemp("operations-vs-kafka"), brokers=1)
        bootstrap = cluster.cluster.brokers[1].kafka["SASL_PLAINTEXT"]
        yield _prepare(Side("ours", bootstrap, "admin", cluster.admin_password))


def _names(operations: Any) -> list[str] | None:
    return None if operations is None else sorted(op.name for op in operations)


def _described(side: Side, user: str | None, *, asked: bool) -> dict[str, Any]:
    admin = side.admin(user)
    topics = admin.describe_topics(TopicCollection([TOPIC]), include_authorized_operations=asked)
    topic = topics[TOPIC].result(TIMEOUT)
    cluster = admin.describe_cluster(include_authorized_operations=asked).result(TIMEOUT)
    groups = admin.describe_consumer_groups([GROUP], include_authorized_operations=asked)
    group = groups[GROUP].result(TIMEOUT)
    return {
        "topic": _names(topic.authorized_operations),
        "cluster": _names(cluster.authorized_operations),
        "group": _names(group.authorized_operations),
    }


def test_authorized_operations_are_answered_as_kafka_answers_them(kafka: Side, ours: Side) -> None:
    seen = {
        side.name: {
            "admin": _described(side, None, asked=True),
            "alice": _described(side, ALICE, asked=True),
            "not asked": _described(side, ALICE, asked=False),
        }
        for side in (kafka, ours)
    }
    expected = seen["Kafka"]
    assert expected["alice"]["topic"] == sorted(
        ["READ", "WRITE", "DESCRIBE", "ALTER_CONFIGS", "DESCRIBE_CONFIGS"]
    )
    assert expected["alice"]["cluster"] is None  # IDEMPOTENT_WRITE, but no DESCRIBE of the cluster: 0
    assert expected["alice"]["group"] == sorted(["READ", "DESCRIBE"])
    assert len(expected["admin"]["topic"]) == 8 and len(expected["admin"]["group"]) == 5
    assert expected["not asked"] == {"topic": None, "cluster": None, "group": None}
    assert seen["ours"] == expected
