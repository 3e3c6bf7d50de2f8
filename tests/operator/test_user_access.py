"""A JbodUser's credential and ACLs against a real controller and broker (issue 25), through the
operator's own calls (`credentials.ensure` for a named user, `credentials.replace_acls`,
`credentials.remove_user`) and real Kafka clients (confluent-kafka).

Covers: a user the operator registered, without ACLs, is refused a topic (the authorizer is always
on); once its ACLs are set it produces and consumes in a group; replacing its ACLs leaves exactly
the new set at the controller (a topic it lost is refused again); the default client user's ACLs
let it produce, consume and describe any topic; removing a user removes its ACLs and its
credential (it can no longer log in); a user's quotas (`credentials.replace_quotas`) are replaced
as a set and removed with the user.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from jbod_client.controller import ControllerClient
from jbod_core.meta_properties import parse_properties
from jbod_operator import builders, credentials, names, users
from tests.kafka_api.conftest import KafkaCluster, start_kafka_cluster


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with contextlib.ExitStack() as stack:
        yield start_kafka_cluster(stack, tmp_path_factory.mktemp("user-access"), brokers=1)


def _identity(url: str) -> str:
    return url


def _config(cluster: KafkaCluster, user: str, password: str) -> dict[str, Any]:
    settings = builders.scram_client_settings("demo", "ns", user=user, password=password, ca_bundle=None)
    config: dict[str, Any] = parse_properties(settings["librdkafka.properties"])
    config["bootstrap.servers"] = cluster.bootstrap
    return config


def _produce(cluster: KafkaCluster, user: str, password: str, topic: str) -> KafkaError | None:
    """None when 5 records were acknowledged, else the first error."""
    errors: list[KafkaError] = []
    acked: list[Any] = []
    producer = Producer(
        {
            **_config(cluster, user, password),
            "enable.idempotence": True,
            "acks": "all",
            "message.timeout.ms": 10000,
            "error_cb": errors.append,
        }
    )
    for i in range(5):
        producer.produce(
            topic, f"r{i}".encode(), on_delivery=lambda e, m: errors.append(e) if e else acked.append(m)
        )
    producer.flush(20)
    return None if len(acked) == 5 else (errors[0] if errors else KafkaError(KafkaError._TIMED_OUT))


def _consume(cluster: KafkaCluster, user: str, password: str, topic: str) -> int:
    consumer = Consumer(
        {
            **_config(cluster, user, password),
            "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    seen, idle = 0, 0
    while seen < 5 and idle < 15:
        msg = consumer.poll(1.0)
        if msg is None or msg.error():
            idle += 1
            continue
        seen += 1
    consumer.close()
    return seen


def _acls(cluster: KafkaCluster, user: str) -> set[users.Binding]:
    with ControllerClient(cluster.cluster.controller.url, token=cluster.admin_password) as client:
        return {users.from_wire(acl) for acl in client.describe_acls(principal=users.principal(user))}


def _register(cluster: KafkaCluster, user: str, password: str) -> None:
    state = credentials.CredentialState()
    url = cluster.cluster.controller.url
    assert credentials.ensure(url, cluster.admin_password, _identity, password, state, now=0.0, user=user)
    cluster.cluster.wait_until_applied()  # the broker learns of it from the metadata log


def _replace_acls(cluster: KafkaCluster, user: str, bindings: list[users.Binding]) -> None:
    """Sets `user`'s ACLs at the controller and waits until the broker applied them."""
    url, token = cluster.cluster.controller.url, cluster.admin_password
    assert credentials.replace_acls(url, token, _identity, None, user, bindings) is None
    cluster.cluster.wait_until_applied()


def test_a_users_acls_decide_what_it_may_do_and_are_replaced_as_a_set(kafka_cluster: KafkaCluster) -> None:
    admin = kafka_cluster.cluster.admin
    for topic in ("orders-1", "payments"):
        admin.create_topic(topic, partitions=1, replication_factor=1)
    url, token = kafka_cluster.cluster.controller.url, kafka_cluster.admin_password
    _register(kafka_cluster, "alice", "alice-pw")
    refused = _produce(kafka_cluster, "alice", "alice-pw", "orders-1")
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    spec = users.parse_user(
        "alice",
        {
            "cluster": "demo",
            "authentication": {"type": "scram-sha-512"},
            "authorization": {
                "acls": [
                    {
                        "resource": {"type": "topic", "name": "orders-", "patternType": "prefix"},
                        "operations": ["Write", "Read", "Describe"],
                    },
                    {"resource": {"type": "topic", "name": "payments"}, "operations": ["Write", "Describe"]},
                    {"resource": {"type": "group", "name": "*"}, "operations": ["Read"]},
                    {"resource": {"type": "cluster"}, "operations": ["IdempotentWrite"]},
                ]
            },
        },
    )
    wanted = users.acl_bindings("alice", spec.authorization.acls)
    _replace_acls(kafka_cluster, "alice", wanted)
    assert _acls(kafka_cluster, "alice") == set(wanted)
    assert _produce(kafka_cluster, "alice", "alice-pw", "orders-1") is None
    assert _produce(kafka_cluster, "alice", "alice-pw", "payments") is None
    assert _consume(kafka_cluster, "alice", "alice-pw", "orders-1") == 5

    fewer = [b for b in wanted if b[1] != "payments"]
    _replace_acls(kafka_cluster, "alice", fewer)
    assert _acls(kafka_cluster, "alice") == set(fewer)
    lost = _produce(kafka_cluster, "alice", "alice-pw", "payments")
    assert lost is not None and lost.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _produce(kafka_cluster, "alice", "alice-pw", "orders-1") is None

    assert credentials.remove_user(url, token, _identity, None, "alice") is None
    kafka_cluster.cluster.wait_until_applied()
    assert _acls(kafka_cluster, "alice") == set()
    with pytest.raises(KafkaException):
        from confluent_kafka.admin import AdminClient

        AdminClient(_config(kafka_cluster, "alice", "alice-pw")).list_topics(timeout=8)


def test_a_users_quotas_are_replaced_as_a_set_and_removed_with_it(kafka_cluster: KafkaCluster) -> None:
    url, token = kafka_cluster.cluster.controller.url, kafka_cluster.admin_password

    def quotas_of(user: str) -> dict[str, float]:
        with ControllerClient(url, token=token) as client:
            entries = client.describe_client_quotas().entries
        found = [
            e.values
            for e in entries
            if [(c.entity_type, c.entity_name) for c in e.entity] == [("user", user)]
        ]
        return found[0] if found else {}

    first = {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0}
    assert credentials.replace_quotas(url, token, _identity, None, "bob", first) is None
    assert quotas_of("bob") == first
    assert (
        credentials.replace_quotas(url, token, _identity, None, "bob", {"request_percentage": 50.0}) is None
    )
    assert quotas_of("bob") == {"request_percentage": 50.0}
    assert credentials.remove_user(url, token, _identity, None, "bob") is None
    assert quotas_of("bob") == {}


def test_the_client_users_acls_let_todays_clients_work(kafka_cluster: KafkaCluster) -> None:
    admin = kafka_cluster.cluster.admin
    admin.create_topic("anything", partitions=1, replication_factor=1)
    url, token = kafka_cluster.cluster.controller.url, kafka_cluster.admin_password
    user = names.KAFKA_CLIENT_USER
    _register(kafka_cluster, user, "client-pw")
    wanted = users.client_user_bindings(user)
    _replace_acls(kafka_cluster, user, wanted)
    assert _produce(kafka_cluster, user, "client-pw", "anything") is None
    assert _consume(kafka_cluster, user, "client-pw", "anything") == 5
    # Setting the same set again changes nothing.
    assert credentials.replace_acls(url, token, _identity, None, user, wanted) is None
    assert _acls(kafka_cluster, user) == set(wanted)
