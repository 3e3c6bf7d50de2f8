"""A schema registry whose storage is a compacted topic on our brokers: Apicurio Registry 3.0.9
(KafkaSQL storage, from Maven Central: e2e/schema_registry.py) logged in with SCRAM.

Through Confluent's schema registry API that Apicurio serves, an Avro schema is registered, its
subject set to BACKWARD compatibility, evolved by a compatible change (a field with a default),
and an incompatible change (a field without one) refused with 409; both versions read back. The
journal topic exists with `cleanup.policy=compact` (DescribeConfigs) and three replicas, and a
restarted registry, whose in-memory state starts empty, reads both versions back from it. A
registry on a real Apache Kafka gives the same answers.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from e2e import kafka_tools, schema_registry
from e2e.kafka_tools import KafkaInstall, ScramUser
from e2e.schema_registry import TOPICS, RegistryInstall, SchemaRegistry
from jbod_client.kafka_config import KafkaSecurity
from tests.kafka_api.conftest import start_kafka_cluster
from tests.kafka_tools.test_harness import install  # noqa: F401  the module's fixture: Kafka's jars or a skip

pytestmark = [pytest.mark.slow, pytest.mark.integration]

SUBJECT = "orders-value"
CONTENT_TYPE = {"Content-Type": "application/vnd.schemaregistry.v1+json"}
ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}],
}
# BACKWARD: a reader of v2 reads what v1 wrote, since the new field has a default.
ORDER_V2 = {
    **ORDER_V1,
    "fields": [*ORDER_V1["fields"], {"name": "note", "type": "string", "default": ""}],
}
# Not BACKWARD: a reader of this cannot fill `quantity` in what v1 wrote.
ORDER_INCOMPATIBLE = {**ORDER_V1, "fields": [*ORDER_V1["fields"], {"name": "quantity", "type": "int"}]}


@pytest.fixture(scope="module")
def registry_install() -> RegistryInstall:
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if missing:
        reason = f"{' and '.join(missing)} not on PATH (Apicurio Registry runs from Maven Central's archive)"
        if os.environ.get("JBOD_E2E_REQUIRED"):
            pytest.fail(f"Apicurio Registry required (JBOD_E2E_REQUIRED=1) but {reason}")
        pytest.skip(reason)
    return RegistryInstall.ensure()


@dataclass(frozen=True)
class Versions:
    """What the registry answers for the subject: its versions, each one's id and schema, its level."""

    versions: list[int]
    schemas: dict[int, tuple[int, dict[str, Any]]]  # version -> (id, schema)
    compatibility: str


def _ok(answer: httpx.Response) -> Any:
    assert answer.status_code == 200, (
        f"{answer.request.method} {answer.request.url}: {answer.status_code} {answer.text}"
    )
    return answer.json()


def _register(client: httpx.Client, schema: dict[str, Any]) -> httpx.Response:
    return client.post(
        f"/subjects/{SUBJECT}/versions", json={"schema": json.dumps(schema)}, headers=CONTENT_TYPE
    )


def read_back(registry: SchemaRegistry) -> Versions:
    with httpx.Client(base_url=registry.ccompat_url, timeout=30, trust_env=False) as client:
        versions = _ok(client.get(f"/subjects/{SUBJECT}/versions"))
        schemas = {}
        for version in versions:
            answer = _ok(client.get(f"/subjects/{SUBJECT}/versions/{version}"))
            assert (answer["subject"], answer["version"], answer["schemaType"]) == (SUBJECT, version, "AVRO")
            by_id = _ok(client.get(f"/schemas/ids/{answer['id']}"))
            assert json.loads(by_id["schema"]) == json.loads(answer["schema"])
            schemas[version] = (answer["id"], json.loads(answer["schema"]))
        compatibility = _ok(client.get(f"/config/{SUBJECT}"))["compatibilityLevel"]
    return Versions(versions, schemas, compatibility)


def register_and_evolve(registry: SchemaRegistry) -> tuple[int, int]:
    """Register v1, make the subject BACKWARD, register v2; the incompatible change is refused.
    Returns the ids of v1 and v2."""
    with httpx.Client(base_url=registry.ccompat_url, timeout=30, trust_env=False) as client:
        first = _ok(_register(client, ORDER_V1))["id"]
        level = _ok(
            client.put(f"/config/{SUBJECT}", json={"compatibility": "BACKWARD"}, headers=CONTENT_TYPE)
        )
        assert level == {"compatibilityLevel": "BACKWARD"}
        second = _ok(_register(client, ORDER_V2))["id"]
        refused = _register(client, ORDER_INCOMPATIBLE)
        assert refused.status_code == 409, refused.text
        assert refused.json()["error_code"] == 409
        # Registering v1 again is no new version: its id is answered.
        assert _ok(_register(client, ORDER_V1))["id"] == first
    assert first != second
    return first, second


def topics_described(librdkafka_config: dict[str, Any]) -> dict[str, tuple[str, int]]:
    """Each registry topic's `cleanup.policy` and its partition 0's replica count."""
    admin = AdminClient(librdkafka_config)
    metadata = admin.list_topics(timeout=30)
    resources = [ConfigResource(ResourceType.TOPIC, topic) for topic in TOPICS]
    described = {}
    for resource, future in admin.describe_configs(resources, request_timeout=30).items():
        policy = future.result(30)["cleanup.policy"].value
        described[resource.name] = (policy, len(metadata.topics[resource.name].partitions[0].replicas))
    return described


def exercise(
    registry: SchemaRegistry, librdkafka_config: dict[str, Any], *, restart: bool
) -> tuple[Versions, dict[str, tuple[str, int]]]:
    """Register and evolve, read back (and with `restart`, restart the registry and read back again:
    the same)."""
    first, second = register_and_evolve(registry)
    before = read_back(registry)
    assert before == Versions([1, 2], {1: (first, ORDER_V1), 2: (second, ORDER_V2)}, "BACKWARD")
    described = topics_described(librdkafka_config)
    if restart:
        registry.restart()
        print(f"restarted in {registry.started_in:.1f} s")
        assert read_back(registry) == before
    return before, described


def test_apicurio_registry_keeps_schemas_in_a_compacted_topic_across_restarts(
    install: KafkaInstall,  # noqa: F811
    registry_install: RegistryInstall,
    tmp_path: Path,
) -> None:
    with contextlib.ExitStack() as stack:
        ours = start_kafka_cluster(stack, tmp_path / "cluster", brokers=3)
        java_config = KafkaSecurity.admin(ours.admin_password).java_config()
        registry = stack.enter_context(
            SchemaRegistry(
                registry_install,
                bootstrap=ours.bootstrap,
                client_config=java_config,
                work_dir=tmp_path / "ours",
            )
        )
        print(f"Apicurio Registry {schema_registry.REGISTRY_VERSION} ready in {registry.started_in:.1f} s")
        on_ours, described = exercise(registry, ours.client_config(), restart=True)
    assert described == dict.fromkeys(TOPICS, ("compact", 3)), described

    # The same answers from a registry on Apache Kafka (one node: one replica); its restart is not
    # repeated there (a registry start is most of this test's time).
    scram = ScramUser()
    with contextlib.ExitStack() as stack:
        kafka = stack.enter_context(kafka_tools.KafkaCluster(install, scram=scram))
        registry = stack.enter_context(
            SchemaRegistry(
                registry_install,
                bootstrap=kafka.bootstrap,
                client_config=kafka.client_config,
                work_dir=tmp_path / "kafka",
            )
        )
        librdkafka = {
            "bootstrap.servers": kafka.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": scram.mechanism,
            "sasl.username": scram.name,
            "sasl.password": scram.password,
        }
        on_kafka, described = exercise(registry, librdkafka, restart=False)
    assert described == dict.fromkeys(TOPICS, ("compact", 1)), described
    assert on_kafka == on_ours
