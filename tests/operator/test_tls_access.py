"""What the operator makes for a TLS cluster, served by real processes (issue 25): a controller
and a broker started with the keystore and trust bundle exactly as the operator writes them into
Secrets (`builders.tls_secret`, `builders.cluster_ca_cert_secret`, certificates from
`certificates`), the operator's own calls over https, and real Kafka clients (confluent-kafka)
configured by the Secrets of JbodUsers.

Covers: the operator's `credentials.ensure` and `replace_acls` reach an https controller with the
cluster's bundle as `ca_file`, and are refused (not yet, nothing raised) with another CA; a SCRAM
JbodUser's `librdkafka.properties` as written produces and consumes over SASL_SSL once its ACLs
are set; a tls JbodUser's properties (its certificate, CN=<user>) read over SSL, and the same
client without its certificate or without the CA is refused; the client user's default ACLs let
it produce over SASL_SSL.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from jbod_client.controller import ControllerClient, read_token
from jbod_core.meta_properties import parse_properties
from jbod_local.processes import LocalController
from jbod_operator import builders, certificates, credentials, names, users
from tests.broker.conftest import Cluster, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]
OWNER = {"apiVersion": "jbod.dev/v1alpha1", "kind": "JbodCluster", "metadata": {"name": "demo", "uid": "u"}}
LOOPBACK = ("localhost",)


def _decoded(secret: dict[str, Any]) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


@dataclass
class OperatorTls:
    cluster: Cluster
    ca: certificates.KeyPair
    bundle_file: Path
    admin_password: str
    base: Path

    def keystore(self, name: str) -> Path:
        """The `tls-combined.pem` of a pod Secret the operator would write for `name`."""
        pair = certificates.issue(
            self.ca, name, LOOPBACK, days=30, now=dt.datetime.now(dt.UTC), ip_addresses=("127.0.0.1",)
        )
        secret = builders.tls_secret(
            f"{name}-tls",
            "demo",
            "ns",
            key_pem=pair.key_pem,
            cert_pem=pair.cert_pem,
            chain=self.ca.cert_pem,
            owner=OWNER,
        )
        path = self.base / f"{name}.pem"
        path.write_text(_decoded(secret)[names.TLS_KEYSTORE])
        return path

    def mounted(self, data: dict[str, str], name: str) -> dict[str, Any]:
        """A Secret's `librdkafka.properties`, with the Secret's files written where a pod would
        mount them (here a directory instead of `names.CLIENT_SECRET_MOUNT`)."""
        directory = self.base / name
        directory.mkdir(exist_ok=True)
        for key, value in data.items():
            (directory / key).write_text(value)
        text = data["librdkafka.properties"].replace(names.CLIENT_SECRET_MOUNT, str(directory))
        config: dict[str, Any] = parse_properties(text)
        broker = self.cluster.brokers[1]
        config["bootstrap.servers"] = broker.kafka[config["security.protocol"]]
        return config


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorTls]:
    base = tmp_path_factory.mktemp("operator-tls")
    ca = certificates.make_ca("demo.ns cluster CA", days=100, now=dt.datetime.now(dt.UTC))
    bundle_secret = builders.cluster_ca_cert_secret("demo", "ns", bundle=ca.cert_pem, since="x", owner=OWNER)
    bundle_file = base / "ca.crt"
    bundle_file.write_text(_decoded(bundle_secret)[names.TLS_CA])
    with contextlib.ExitStack() as stack:
        state = OperatorTls(None, ca, bundle_file, "", base)  # type: ignore[arg-type]
        controller = LocalController(
            data_dir=base / "controller",
            cluster_id="optls",
            ca_file=bundle_file,
            extra_args=["--ssl-keystore-location", str(state.keystore("controller"))],
        )
        stack.callback(controller.kill)
        controller.start()
        admin = ControllerClient(
            controller.url, token=read_token(controller.admin_token_file), ca_file=bundle_file
        )
        stack.callback(admin.close)
        state.cluster = Cluster(base=base, stack=stack, controller=controller, admin=admin)
        state.admin_password = read_token(controller.admin_token_file)
        state.cluster.add_broker(
            1,
            dirs=1,
            loop=False,
            properties={
                "listeners": "https://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SSL://127.0.0.1:0",
                "admin.token.file": str(controller.admin_token_file),
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(state.keystore("broker-1")),
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(bundle_file),
                "ssl.client.auth": "requested",  # as builders.broker_properties writes them
                "listener.name.ssl.ssl.client.auth": "required",
                "ssl.principal.mapping.rules": builders.PRINCIPAL_FROM_CN,
            },
        )
        wait_for(lambda: state.cluster.all_unfenced(1), what="the broker registered over https")
        yield state


def _identity(url: str) -> str:
    return url


def _produce(config: dict[str, Any], topic: str) -> KafkaError | None:
    errors: list[KafkaError] = []
    acked: list[Any] = []
    producer = Producer({**config, "acks": "all", "message.timeout.ms": 10000, "error_cb": errors.append})
    for i in range(5):
        producer.produce(
            topic, f"r{i}".encode(), on_delivery=lambda e, m: errors.append(e) if e else acked.append(m)
        )
    producer.flush(20)
    return None if len(acked) == 5 else (errors[0] if errors else KafkaError(KafkaError._TIMED_OUT))


def _consume(config: dict[str, Any], topic: str, group: str) -> int:
    consumer = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen, idle = 0, 0
    while seen < 5 and idle < 12:
        msg = consumer.poll(1.0)
        if msg is None or msg.error():
            idle += 1
            continue
        seen += 1
    consumer.close()
    return seen


def test_the_operators_calls_verify_the_controller_with_the_bundle(tls: OperatorTls) -> None:
    url = tls.cluster.controller.url
    assert url.startswith("https://")
    state = credentials.CredentialState()
    stranger = certificates.make_ca("another CA", days=10, now=dt.datetime.now(dt.UTC))
    wrong = tls.base / "wrong-ca.crt"
    wrong.write_text(stranger.cert_pem)
    assert not credentials.ensure(url, tls.admin_password, _identity, "pw", state, now=0.0, ca_file=wrong)
    assert not state.ready
    assert credentials.ensure(
        url, tls.admin_password, _identity, "pw", state, now=1.0, ca_file=tls.bundle_file
    )
    bindings = users.client_user_bindings(names.KAFKA_CLIENT_USER)
    refused = credentials.replace_acls(
        url, tls.admin_password, _identity, wrong, names.KAFKA_CLIENT_USER, bindings
    )
    assert refused is not None and "not set yet" in refused
    assert (
        credentials.replace_acls(
            url, tls.admin_password, _identity, tls.bundle_file, names.KAFKA_CLIENT_USER, bindings
        )
        is None
    )

    tls.cluster.admin.create_topic("events", partitions=1, replication_factor=1)
    client = builders.kafka_client_secret("demo", "ns", password="pw", owner=OWNER, ca_bundle=tls.ca.cert_pem)
    config = tls.mounted(dict(client["stringData"]), "client")
    assert config["security.protocol"] == "SASL_SSL"
    assert _produce(config, "events") is None


def test_jbod_users_secrets_work_as_written_over_sasl_ssl_and_ssl(tls: OperatorTls) -> None:
    url, token, bundle = tls.cluster.controller.url, tls.admin_password, tls.bundle_file
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    tls.cluster.admin.create_topic(topic, partitions=1, replication_factor=1)

    writer_spec = users.parse_user(
        "writer",
        {
            "cluster": "demo",
            "authentication": {"type": "scram-sha-512"},
            "authorization": {
                "acls": [
                    {
                        "resource": {"type": "topic", "name": "orders-", "patternType": "prefix"},
                        "operations": ["Write", "Describe"],
                    },
                    {"resource": {"type": "cluster"}, "operations": ["IdempotentWrite"]},
                ]
            },
        },
    )
    state = credentials.CredentialState()
    assert credentials.ensure(
        url, token, _identity, "writer-pw", state, now=0.0, ca_file=bundle, user="writer"
    )
    writer = builders.scram_client_settings(
        "demo", "ns", user="writer", password="writer-pw", ca_bundle=tls.ca.cert_pem
    )
    writer_config = tls.mounted(writer, "writer")
    refused = _produce(writer_config, topic)
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    wanted = users.acl_bindings("writer", writer_spec.authorization.acls)
    assert credentials.replace_acls(url, token, _identity, bundle, "writer", wanted) is None
    assert _produce(writer_config, topic) is None

    reader_spec = users.parse_user(
        "reader",
        {
            "cluster": "demo",
            "authentication": {"type": "tls"},
            "authorization": {
                "acls": [
                    {
                        "resource": {"type": "topic", "name": "orders-", "patternType": "prefix"},
                        "operations": ["Read", "Describe"],
                    },
                    {
                        "resource": {"type": "group", "name": "orders-", "patternType": "prefix"},
                        "operations": ["Read"],
                    },
                ]
            },
        },
    )
    pair = certificates.issue(tls.ca, "reader", days=10, now=dt.datetime.now(dt.UTC))
    reader = builders.tls_client_settings(
        "demo", "ns", key_pem=pair.key_pem, cert_pem=pair.cert_pem, ca_bundle=tls.ca.cert_pem
    )
    reader_config = tls.mounted(reader, "reader")
    assert reader_config["security.protocol"] == "SSL"
    assert (
        credentials.replace_acls(
            url,
            token,
            _identity,
            bundle,
            "reader",
            users.acl_bindings("reader", reader_spec.authorization.acls),
        )
        is None
    )
    assert _consume(reader_config, topic, "orders-reader") == 5

    anonymous = {
        k: v for k, v in reader_config.items() if k not in ("ssl.certificate.location", "ssl.key.location")
    }
    assert _consume(anonymous, topic, "orders-anonymous") == 0
    untrusting = {k: v for k, v in reader_config.items() if k != "ssl.ca.location"}
    assert _consume(untrusting, topic, "orders-untrusting") == 0
    assert _produce(reader_config, topic) is not None  # reading is all it may do
