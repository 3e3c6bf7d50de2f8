"""Kafka clients on Kubernetes (issue 23): what the operator gives a cluster for them.

* The broker's `server.properties` the operator writes is read by the agent's own parser into a
  SASL_PLAINTEXT listener on 9092 advertising the pod's stable DNS name, and the HTTP API on 9192;
  the pod's named ports, its probes and the Services agree with it.
* The Secret `<cluster>-kafka-client` holds settings a Java client and librdkafka take as they are.
* `credentials.ensure` registers the client user with a real controller so that a real Kafka
  client (confluent-kafka) logs in to a real broker with the Secret's librdkafka properties, and
  a password replaced in the Secret is registered again (the old one is refused from then on).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from e2e.wait import wait_for
from jbod_agent.config import parse_config
from jbod_core.messages import AlterScramCredentialsRequest, ScramCredentialDeletion
from jbod_core.meta_properties import parse_properties
from jbod_operator import builders, credentials, model, names
from tests.kafka_api.conftest import KafkaCluster, start_kafka_cluster
from tests.operator.test_model_builders import OWNER, example


def _secret_data(password: str) -> dict[str, str]:
    secret = builders.kafka_client_secret("demo", "ns", password=password, owner=OWNER)
    assert secret["metadata"]["name"] == "demo-kafka-client"
    return dict(secret["stringData"])


def test_the_brokers_config_gives_a_kafka_listener_the_agent_parses() -> None:
    spec = model.parse_cluster("demo", example()["spec"])
    text = builders.server_properties(spec, "demo", "ns", 1, spec.disks)
    config = parse_config(text)
    [kafka] = config.kafka_listeners
    assert (kafka.name, kafka.host, kafka.port) == ("SASL_PLAINTEXT", "0.0.0.0", names.KAFKA_PORT)
    [advertised] = config.advertised_kafka_listeners
    assert (advertised.host, advertised.port) == ("demo-broker-1.demo-brokers.ns.svc", 9092)
    assert config.listener.port == names.BROKER_HTTP_PORT != names.KAFKA_PORT
    assert config.advertised_listener is not None
    assert config.advertised_listener.host == "demo-broker-1.demo-brokers.ns.svc"

    pod = builders.broker_pod(
        spec,
        "demo",
        "ns",
        1,
        disks=spec.disks,
        claims={d.name: f"c-{d.name}" for d in spec.disks},
        image="img",
        owner=OWNER,
    )
    [agent] = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in agent["ports"]}
    assert ports == {"kafka": kafka.port, "http": config.listener.port}
    assert agent["readinessProbe"]["httpGet"]["port"] == config.listener.port
    assert agent["livenessProbe"]["httpGet"]["port"] == config.listener.port


def test_the_bootstrap_service_spans_the_brokers_kafka_port() -> None:
    bootstrap = builders.kafka_bootstrap_service("demo", "ns", OWNER)
    assert bootstrap["metadata"]["name"] == "demo-kafka-bootstrap"
    assert bootstrap["spec"]["selector"] == names.broker_selector("demo")
    assert bootstrap["spec"]["ports"] == [{"name": "kafka", "port": 9092, "targetPort": "kafka"}]
    assert "clusterIP" not in bootstrap["spec"]  # a virtual IP over the Ready brokers
    headless = builders.brokers_service("demo", "ns", OWNER)
    assert {p["name"]: p["port"] for p in headless["spec"]["ports"]} == {"kafka": 9092, "http": 9192}
    assert names.kafka_bootstrap_servers("demo", "ns") == "demo-kafka-bootstrap.ns.svc:9092"


def test_the_client_secret_holds_settings_clients_take_as_they_are() -> None:
    data = _secret_data("pa55-word")
    java = parse_properties(data["client.properties"])
    assert java["bootstrap.servers"] == data["bootstrap.servers"] == "demo-kafka-bootstrap.ns.svc:9092"
    assert java["security.protocol"] == data["security.protocol"] == "SASL_PLAINTEXT"
    assert java["sasl.mechanism"] == data["sasl.mechanism"] == "SCRAM-SHA-512"
    assert java["sasl.jaas.config"] == data["sasl.jaas.config"]
    assert 'username="client" password="pa55-word";' in data["sasl.jaas.config"]
    rdkafka = parse_properties(data["librdkafka.properties"])
    assert rdkafka["sasl.username"] == data["username"] == names.KAFKA_CLIENT_USER
    assert rdkafka["sasl.password"] == data["password"] == "pa55-word"
    AdminClient(rdkafka)  # librdkafka refuses a property it does not know


# --- the credential, against a real controller and broker -----------------------------------------


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with contextlib.ExitStack() as stack:
        yield start_kafka_cluster(stack, tmp_path_factory.mktemp("kafka-access"), brokers=1)


def _login(cluster: KafkaCluster, password: str) -> list[str]:
    config: dict[str, Any] = parse_properties(_secret_data(password)["librdkafka.properties"])
    config["bootstrap.servers"] = cluster.bootstrap
    return sorted(AdminClient(config).list_topics(timeout=10).topics)


def _may_describe(cluster: KafkaCluster, topic: str) -> None:
    """The authorizer is always on (issue 25): the client user sees a topic once an ACL says so."""
    acl = {
        "resourceType": "TOPIC",
        "resourceName": topic,
        "principal": f"User:{names.KAFKA_CLIENT_USER}",
        "operation": "DESCRIBE",
        "permissionType": "ALLOW",
    }
    assert cluster.cluster.admin.create_acls([acl]) == [{"errorCode": 0, "errorMessage": None}]
    cluster.cluster.wait_until_applied()  # the broker follows the ACLs from its metadata log


def _refused(cluster: KafkaCluster, password: str) -> bool:
    try:
        _login(cluster, password)
    except KafkaException as exc:
        return exc.args[0].code() in (KafkaError._AUTHENTICATION, KafkaError._TRANSPORT)
    return False


def _identity(url: str) -> str:
    return url


def test_the_client_user_logs_in_once_registered_and_after_a_new_password(
    kafka_cluster: KafkaCluster,
) -> None:
    controller = kafka_cluster.cluster.controller
    url, token = controller.url, kafka_cluster.admin_password
    kafka_cluster.cluster.admin.create_topic("access", partitions=1, replication_factor=1)
    _may_describe(kafka_cluster, "access")
    state = credentials.CredentialState(recheck_s=3600)
    assert _refused(kafka_cluster, "first")

    assert credentials.ensure(url, token, _identity, "first", state, now=0.0)
    kafka_cluster.cluster.wait_until_applied()
    assert state.ready
    assert "access" in _login(kafka_cluster, "first")
    assert not state.due(credentials.digest("first"), now=10.0)

    # A new password (the Secret deleted and recreated) is due at once and replaces the old one.
    assert state.due(credentials.digest("second"), now=10.0)
    assert credentials.ensure(url, token, _identity, "second", state, now=10.0)
    kafka_cluster.cluster.wait_until_applied()
    assert "access" in _login(kafka_cluster, "second")
    assert _refused(kafka_cluster, "first")


def test_an_unreachable_controller_is_not_yet_and_a_lost_credential_is_registered_again(
    kafka_cluster: KafkaCluster,
) -> None:
    url, token = kafka_cluster.cluster.controller.url, kafka_cluster.admin_password
    kafka_cluster.cluster.admin.create_topic("access-lost", partitions=1, replication_factor=1)
    _may_describe(kafka_cluster, "access-lost")
    state = credentials.CredentialState(recheck_s=60)
    closed = "http://127.0.0.1:9"  # discard: nothing listens
    assert not credentials.ensure(closed, token, _identity, "third", state, now=0.0)
    assert not state.ready

    assert credentials.ensure(url, token, _identity, "third", state, now=1.0)
    # The controller loses the credential (deleted by hand); the next check after recheck_s
    # notices and registers it again.
    kafka_cluster.cluster.admin.alter_scram_credentials(
        AlterScramCredentialsRequest(
            deletions=[ScramCredentialDeletion(name=names.KAFKA_CLIENT_USER, mechanism=2)]
        )
    )
    # The brokers learn of the deletion from the metadata log, a moment after the controller.
    wait_for(lambda: _refused(kafka_cluster, "third"), timeout=60, what="the deleted credential refused")
    assert credentials.ensure(url, token, _identity, "third", state, now=30.0)  # not due: no call
    assert _refused(kafka_cluster, "third")
    assert credentials.ensure(url, token, _identity, "third", state, now=61.0)
    assert "access-lost" in _login(kafka_cluster, "third")
