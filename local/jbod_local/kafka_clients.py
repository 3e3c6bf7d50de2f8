"""How Kafka clients reach a local cluster as the `admin` principal: Kafka's client properties
(Java syntax, for Kafka's tools), the same as librdkafka configuration, and as the `KafkaTarget`
of this project's own clients (the demo's).

Guarantees: `client_properties` is what `kafka-*.sh --command-config` reads (security protocol,
SCRAM-SHA-512 and a `sasl.jaas.config` line, the password escaped for JAAS and for Java
properties; `jbod_client.kafka_config` reads it back to the same user and password);
`librdkafka_config` is the equivalent dict for confluent-kafka, with no key librdkafka would
refuse; `admin_target` lists every broker's Kafka listener. With a `truststore` (a `--tls`
cluster's CA bundle) the protocol is SASL_SSL and the PEM truststore is named
(`ssl.truststore.type=PEM`, `ssl.truststore.location`; librdkafka's `ssl.ca.location`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from jbod_client.kafka_config import ADMIN, ADMIN_MECHANISM, KafkaSecurity, KafkaTarget
from jbod_local.layout import KAFKA_PROTOCOL, KAFKA_TLS_PROTOCOL, ClusterLayout

MECHANISM: Final = ADMIN_MECHANISM


def _properties_escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def _security(password: str, user: str, truststore: Path | None) -> KafkaSecurity:
    protocol = KAFKA_TLS_PROTOCOL if truststore is not None else KAFKA_PROTOCOL
    return KafkaSecurity(protocol, MECHANISM, user, password, truststore=truststore)


def client_properties(password: str, *, user: str = ADMIN, truststore: Path | None = None) -> str:
    config = _security(password, user, truststore).java_config()
    return "".join(f"{key}={_properties_escaped(value)}\n" for key, value in config.items())


def librdkafka_config(
    bootstrap: str, password: str, *, user: str = ADMIN, truststore: Path | None = None
) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, **_security(password, user, truststore).librdkafka_config()}


def admin_target(layout: ClusterLayout) -> KafkaTarget:
    """Every broker's Kafka listener, as `admin` (its password: the admin token)."""
    bootstrap = tuple(b.kafka_address for b in layout.brokers if b.kafka_port)
    return KafkaTarget(bootstrap, KafkaSecurity.admin(layout.admin_token(), truststore=layout.ca_file))
