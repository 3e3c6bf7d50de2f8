"""How Kafka clients reach a local cluster as the `admin` principal: Kafka's client properties
(Java syntax, for Kafka's tools) and the same as librdkafka configuration.

Guarantees: `client_properties` is what `kafka-*.sh --command-config` reads (security protocol,
SCRAM-SHA-512 and a `sasl.jaas.config` line, the password escaped for JAAS and for Java
properties); `librdkafka_config` is the equivalent dict for confluent-kafka, with no key
librdkafka would refuse.
"""

from __future__ import annotations

from typing import Any, Final

from jbod_local.layout import KAFKA_PROTOCOL

ADMIN: Final = "admin"
MECHANISM: Final = "SCRAM-SHA-512"
_LOGIN_MODULE: Final = "org.apache.kafka.common.security.scram.ScramLoginModule"


def _jaas_quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _properties_escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def client_properties(password: str, *, user: str = ADMIN) -> str:
    jaas = f"{_LOGIN_MODULE} required username={_jaas_quoted(user)} password={_jaas_quoted(password)};"
    return (
        f"security.protocol={KAFKA_PROTOCOL}\n"
        f"sasl.mechanism={MECHANISM}\n"
        f"sasl.jaas.config={_properties_escaped(jaas)}\n"
    )


def librdkafka_config(bootstrap: str, password: str, *, user: str = ADMIN) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": KAFKA_PROTOCOL,
        "sasl.mechanism": MECHANISM,
        "sasl.username": user,
        "sasl.password": password,
    }
