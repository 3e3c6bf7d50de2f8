"""JbodTopic reconciliation against a real controller and real brokers (`topic_handlers.reconcile`).

The function kopf's handlers call is run with a real `ControllerClient`; what it does is observed
with confluent-kafka's AdminClient through the brokers, as an application would see it:
* a resource creates its topic with the spec's partitions, replication factor and configs, and
  its status names the topic and its id;
* a config changed behind the operator's back (IncrementalAlterConfigs from a Kafka client) is put
  back on the next reconcile; a key the resource no longer sets goes back to the broker default;
* more partitions are made; fewer partitions or another replication factor are refused with
  `Ready: False`, `NotSupported`, and nothing changes; a config Kafka refuses is refused with
  Kafka's message; a second resource for the topic gets `ResourceConflict` and changes nothing;
* a topic made with Kafka's tools and no resource is never touched;
* an unreachable controller is a condition, not an exception; deleting removes the topic.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from e2e.wait import wait_for
from jbod_client.controller import ControllerClient
from jbod_operator import topic_handlers, topic_plan
from tests.kafka_api.conftest import KafkaCluster, start_kafka_cluster

TIMEOUT = 20.0
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with contextlib.ExitStack() as stack:
        yield start_kafka_cluster(stack, tmp_path_factory.mktemp("topics"), brokers=2, dirs=1)


def _shape(admin: AdminClient, topic: str) -> tuple[int, int] | None:
    """(partitions, replication factor) as the brokers' metadata shows them, or None if absent."""
    found = admin.list_topics(topic=topic, timeout=TIMEOUT).topics.get(topic)
    if found is None or found.error is not None:
        return None
    partitions = found.partitions
    return len(partitions), len(partitions[0].replicas)


def _configs(admin: AdminClient, topic: str) -> dict[str, tuple[str, int]]:
    """The topic's configs a resource or a user set (value, source), as Kafka's clients describe them."""
    resource = ConfigResource("TOPIC", topic)
    entries = admin.describe_configs([resource], request_timeout=TIMEOUT)[resource].result(TIMEOUT)
    return {k: (e.value, e.source) for k, e in entries.items()}


def _set_behind_its_back(admin: AdminClient, topic: str, key: str, value: str) -> None:
    entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource("TOPIC", topic, incremental_configs=[entry])
    admin.incremental_alter_configs([resource], request_timeout=TIMEOUT)[resource].result(TIMEOUT)


def _ready(status: dict[str, Any]) -> tuple[str, str | None]:
    [condition] = status["conditions"]
    assert condition["type"] == "Ready"
    return condition["status"], condition["reason"]


def test_a_topic_follows_its_resource_and_nothing_else_is_touched(kafka_cluster: KafkaCluster) -> None:
    admin = AdminClient(kafka_cluster.client_config())
    controller = kafka_cluster.cluster.controller
    # A topic made with Kafka's tools: no resource names it, so it is never touched.
    unmanaged = NewTopic("by-hand", num_partitions=1, replication_factor=1, config={"retention.ms": "1000"})
    admin.create_topics([unmanaged], request_timeout=TIMEOUT)["by-hand"].result(TIMEOUT)
    by_hand = wait_for(lambda: _configs(admin, "by-hand"), timeout=TIMEOUT, what="by-hand described")

    with ControllerClient(controller.url, token=kafka_cluster.admin_password, timeout=10.0) as client:

        def run(spec: dict[str, Any], status: dict[str, Any], *, owner: str = "orders") -> dict[str, Any]:
            parsed = topic_plan.parse_topic("orders", spec)
            return topic_handlers.reconcile(
                client, "orders", parsed, status, owner_name=owner, generation=1, now=NOW
            )

        spec: dict[str, Any] = {
            "partitions": 3,
            "replicas": 2,
            "config": {"retention.ms": 7200000, "cleanup.policy": "delete", "segment.ms": "600000"},
        }
        status = run(spec, {})
        assert _ready(status) == ("True", None)
        assert status["topicName"] == "orders" and status["topicId"]
        assert status["configKeys"] == ["cleanup.policy", "retention.ms", "segment.ms"]
        assert wait_for(lambda: _shape(admin, "orders"), timeout=TIMEOUT, what="orders in metadata") == (3, 2)
        described = admin.describe_topics(TopicCollection(["orders"]), request_timeout=TIMEOUT)["orders"]
        # Kafka's id; librdkafka prints it in standard base64, Kafka's Java tools in base64url.
        kafka_id = str(described.result(TIMEOUT).topic_id).translate(str.maketrans("+/", "-_"))
        assert kafka_id == status["topicId"]
        configs = wait_for(lambda: _configs(admin, "orders"), timeout=TIMEOUT, what="orders described")
        assert configs["retention.ms"][0] == "7200000" and configs["segment.ms"][0] == "600000"
        assert run(spec, status) == status  # converged: the same status, nothing done

        # Changed behind its back with a Kafka client: the next reconcile puts it back.
        _set_behind_its_back(admin, "orders", "retention.ms", "1234")
        wait_for(
            lambda: _configs(admin, "orders")["retention.ms"][0] == "1234", timeout=TIMEOUT, what="drift seen"
        )
        status = run(spec, status)
        assert _ready(status) == ("True", None)
        wait_for(
            lambda: _configs(admin, "orders")["retention.ms"][0] == "7200000",
            timeout=TIMEOUT,
            what="retention.ms put back",
        )

        # A key the resource no longer sets goes back to the broker's default.
        default_segment = by_hand["segment.ms"]
        del spec["config"]["segment.ms"]
        status = run(spec, status)
        assert status["configKeys"] == ["cleanup.policy", "retention.ms"]
        wait_for(
            lambda: _configs(admin, "orders")["segment.ms"] == default_segment,
            timeout=TIMEOUT,
            what="segment.ms reset to the default",
        )

        # More partitions are made.
        spec["partitions"] = 5
        status = run(spec, status)
        assert _ready(status) == ("True", None)
        wait_for(lambda: _shape(admin, "orders") == (5, 2), timeout=TIMEOUT, what="5 partitions")

        # Fewer partitions, another replication factor: refused, nothing changes.
        for change, needle in [
            ({"partitions": 2}, "Decreasing partitions"),
            ({"replicas": 1}, "reassignment"),
        ]:
            refused = run({**spec, **change}, status)
            assert _ready(refused) == ("False", "NotSupported")
            assert needle in refused["conditions"][0]["message"]
            assert refused["topicId"] == status["topicId"]
        # A config Kafka refuses: its message, nothing changes.
        refused = run({**spec, "config": {**spec["config"], "retention.ms": "soon"}}, status)
        assert _ready(refused) == ("False", "InvalidConfig")
        assert "Invalid value soon for configuration retention.ms" in refused["conditions"][0]["message"]
        # A second resource naming the topic: the older one owns it.
        conflict = topic_handlers.reconcile(
            client,
            "orders-again",
            topic_plan.parse_topic("orders-again", {**spec, "topicName": "orders", "partitions": 9}),
            {},
            owner_name="orders",
            generation=1,
            now=NOW,
        )
        assert _ready(conflict) == ("False", "ResourceConflict") and not conflict.get("topicId")
        assert _shape(admin, "orders") == (5, 2)
        assert _configs(admin, "orders")["retention.ms"][0] == "7200000"

        assert _configs(admin, "by-hand") == by_hand  # never touched

        # Deleting the resource deletes the topic (kopf's finalizer calls this).
        assert topic_handlers.delete(client, "orders") is None
        assert topic_handlers.delete(client, "orders") is None  # already gone: done
        wait_for(lambda: _shape(admin, "orders") is None, timeout=TIMEOUT, what="orders deleted")

    # An unreachable controller is a condition (retried by the timer), never an exception.
    with ControllerClient("http://127.0.0.1:9", token="t", timeout=2.0, failover_timeout=1.0) as closed:
        parsed = topic_plan.parse_topic("orders", spec)
        down = topic_handlers.reconcile(
            closed, "orders", parsed, status, owner_name=None, generation=2, now=NOW
        )
    assert _ready(down) == ("False", "ControllerUnreachable")
    assert down["topicId"] == status["topicId"] and down["observedGeneration"] == 2
