"""Kafka ACLs on our brokers, driven by librdkafka (confluent-kafka) as a Kafka user would: the admin
grants a SCRAM user access with CreateAcls, the user produces where allowed (acks=all, idempotent)
and is refused elsewhere with Kafka's codes; a DENY beats an ALLOW; DescribeAcls and DeleteAcls
answer what was granted, and the access goes with the ACL; `super.users` and
`allow.everyone.if.no.acl.found` as Kafka's."""

from __future__ import annotations

import contextlib
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
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

from tests.kafka_api.conftest import KafkaCluster, start_kafka_cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _acl(
    user: str,
    name: str,
    operation: AclOperation,
    *,
    kind: ResourceType = ResourceType.TOPIC,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
    permission: AclPermissionType = AclPermissionType.ALLOW,
) -> AclBinding:
    return AclBinding(kind, name, pattern, f"User:{user}", "*", operation, permission)


def _produce_one(kafka: KafkaCluster, topic: str, as_user: dict[str, Any]) -> KafkaError | None:
    """Produce one record with acks=all as the user (idempotent); its delivery error or None."""
    producer = Producer(
        kafka.client_config(
            acks="all", **{"enable.idempotence": True, "message.timeout.ms": 10_000}, **as_user
        )
    )
    outcome: list[KafkaError | None] = []
    producer.produce(topic, value=b"v", on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(30)
    assert len(outcome) == 1
    return outcome[0]


def _create_user(client: AdminClient, user: str, password: bytes) -> None:
    upsertion = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password
    )
    client.alter_user_scram_credentials([upsertion])[user].result(30)


def _group_error(kafka: KafkaCluster, topic: str, group: str, as_user: dict[str, Any]) -> int | None:
    """The first error a consumer of `group` meets (subscribe and poll for up to 20 s)."""
    consumer = Consumer(
        kafka.client_config(**{"group.id": group, "auto.offset.reset": "earliest"}, **as_user)
    )
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is not None:
                return int(msg.error().code())
        return None
    finally:
        consumer.close()


def test_a_user_may_do_what_its_acls_allow_and_nothing_else(kafka_cluster: KafkaCluster) -> None:
    client = AdminClient(kafka_cluster.client_config())
    suffix = uuid.uuid4().hex[:6]
    user = f"acl-{suffix}"
    _create_user(client, user, b"pw")
    orders, payments, secret = f"orders-eu-{suffix}", f"payments-{suffix}", f"orders-secret-{suffix}"
    created = client.create_topics([NewTopic(t, 1, 3) for t in (orders, payments, secret)])
    for future in created.values():
        future.result(30)
    granted = [
        _acl(user, "orders-", AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED),
        _acl(user, "orders-", AclOperation.DESCRIBE, pattern=ResourcePatternType.PREFIXED),
        _acl(user, secret, AclOperation.WRITE, permission=AclPermissionType.DENY),
    ]
    for binding, future in client.create_acls(granted).items():
        assert future.result(30) is None, binding
    described = client.describe_acls(
        AclBindingFilter(
            ResourceType.ANY,
            None,
            ResourcePatternType.ANY,
            f"User:{user}",
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
    ).result(30)
    assert sorted(described, key=str) == sorted(granted, key=str)

    as_user = {"sasl.username": user, "sasl.password": "pw"}
    assert _produce_one(kafka_cluster, orders, as_user) is None  # PREFIXED orders-: WRITE
    refused = _produce_one(kafka_cluster, payments, as_user)
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    denied = _produce_one(kafka_cluster, secret, as_user)  # a DENY beats the prefixed ALLOW
    assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    # Metadata lists only the topics the user may DESCRIBE.
    user_admin = AdminClient(kafka_cluster.client_config(**as_user))
    listed = set(user_admin.list_topics(timeout=10).topics)
    assert {orders, secret} <= listed and payments not in listed
    # No CREATE on the cluster or the topic.
    other = f"orders-new-{suffix}"
    with pytest.raises(KafkaException) as no_create:
        user_admin.create_topics([NewTopic(other, 1, 1)])[other].result(30)
    assert no_create.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # A group it was not given.
    assert (
        _group_error(kafka_cluster, orders, f"g-{suffix}", as_user) == KafkaError.GROUP_AUTHORIZATION_FAILED
    )
    # Nor may it change ACLs (ALTER on the cluster).
    with pytest.raises(KafkaException) as no_alter:
        user_admin.create_acls([_acl(user, payments, AclOperation.WRITE)])[
            _acl(user, payments, AclOperation.WRITE)
        ].result(30)
    assert no_alter.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED

    # Deleting the ALLOWs takes the access away on the next request.
    removed = client.delete_acls(
        [
            AclBindingFilter(
                ResourceType.TOPIC,
                "orders-",
                ResourcePatternType.PREFIXED,
                f"User:{user}",
                None,
                AclOperation.ANY,
                AclPermissionType.ALLOW,
            )
        ]
    )
    [matched] = [future.result(30) for future in removed.values()]
    assert sorted(matched, key=str) == sorted(granted[:2], key=str)
    gone = _produce_one(kafka_cluster, orders, as_user)
    assert gone is not None and gone.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_invalid_acls_are_refused_with_invalid_request(kafka_cluster: KafkaCluster) -> None:
    client = AdminClient(kafka_cluster.client_config())
    bad = AclBinding(
        ResourceType.BROKER,
        "not-the-cluster",
        ResourcePatternType.LITERAL,
        "User:x",
        "*",
        AclOperation.ALTER,
        AclPermissionType.ALLOW,
    )
    with pytest.raises(KafkaException) as refused:
        client.create_acls([bad])[bad].result(30)
    assert refused.value.args[0].code() == KafkaError.INVALID_REQUEST
    assert (
        client.describe_acls(
            AclBindingFilter(
                ResourceType.BROKER,
                None,
                ResourcePatternType.ANY,
                None,
                None,
                AclOperation.ANY,
                AclPermissionType.ANY,
            )
        ).result(30)
        == []
    )


def test_super_users_and_allow_everyone_if_no_acl_found(tmp_path_factory: pytest.TempPathFactory) -> None:
    with contextlib.ExitStack() as stack:
        kafka = start_kafka_cluster(
            stack,
            tmp_path_factory.mktemp("open"),
            brokers=1,
            super_users="User:ops",
            allow_everyone_if_no_acl_found="true",
        )
        client = AdminClient(kafka.client_config())
        for user in ("ops", "anyone"):
            _create_user(client, user, b"pw")
        for future in client.create_topics([NewTopic(t, 1, 1) for t in ("open", "guarded")]).values():
            future.result(30)
        guard = _acl("someone-else", "guarded", AclOperation.WRITE)
        client.create_acls([guard])[guard].result(30)
        anyone = {"sasl.username": "anyone", "sasl.password": "pw"}
        assert _produce_one(kafka, "open", anyone) is None  # no ACL names the topic: everyone may
        refused = _produce_one(kafka, "guarded", anyone)  # an ACL names it: only what it allows
        assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        ops = {"sasl.username": "ops", "sasl.password": "pw"}
        assert _produce_one(kafka, "guarded", ops) is None  # a super user is never refused
        ops_admin = AdminClient(kafka.client_config(**ops))
        ops_admin.create_topics([NewTopic("by-ops", 1, 1)])["by-ops"].result(30)
        assert "by-ops" in client.list_topics(timeout=10).topics
