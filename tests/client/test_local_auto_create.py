"""The local cluster's topic auto-creation keys (`jbodctl local up --broker-config`, issue 30): on by
default, as Kafka, with a replication factor of min(3, brokers); turned off per cluster, kept in
cluster.json and every broker's server.properties; a key or value the brokers would refuse is a
one-line error before anything is created."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from jbod_core.meta_properties import parse_properties
from jbod_local import supervisor
from jbod_local.kafka_clients import librdkafka_config
from jbod_local.layout import STATE_FILE, read_layout
from tests.client.local_commands import JBODCTL, ok, run


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "cluster"
    yield path
    if (path / STATE_FILE).exists():  # never leave processes behind
        supervisor.down(path, grace=2)


def test_the_default_keys_are_kafkas_with_the_operators_replication_factor() -> None:
    assert supervisor.broker_config(3) == {
        "auto.create.topics.enable": "true",
        "num.partitions": "1",
        "default.replication.factor": "3",
    }
    assert supervisor.broker_config(2)["default.replication.factor"] == "2"
    chosen = supervisor.broker_config(3, {"auto.create.topics.enable": "false", "num.partitions": " 6"})
    assert chosen == {
        "auto.create.topics.enable": "false",
        "num.partitions": "6",
        "default.replication.factor": "3",
    }


@pytest.mark.parametrize(
    ("item", "needle"),
    [
        (
            "log.retention.ms=1",
            "--broker-config: log.retention.ms is not one of auto.create.topics.enable, num.partitions, "
            "default.replication.factor, replica.selector.class",
        ),
        (
            "auto.create.topics.enable=yes",
            "--broker-config: auto.create.topics.enable: 'yes' is not true or false",
        ),
        ("num.partitions=0", "--broker-config: num.partitions: 0 is out of range [1, 10000]"),
        (
            "replica.selector.class=com.example.Mine",
            "--broker-config: replica.selector.class: only "
            "org.apache.kafka.common.replica.RackAwareReplicaSelector is supported, not 'com.example.Mine'",
        ),
        (
            "default.replication.factor=x",
            "--broker-config: default.replication.factor: 'x' is not an integer",
        ),
    ],
)
def test_a_bad_broker_config_is_one_line_and_creates_nothing(tmp_path: Path, item: str, needle: str) -> None:
    root = tmp_path / "cluster"
    result = run("up", "--dir", str(root), "--broker-config", item)
    assert result.returncode == 1, result
    assert result.stderr.strip().splitlines() == [f"jbodctl: error: {needle}"], result.stderr
    assert not (root / STATE_FILE).exists()


def _admin_config(root: Path) -> dict[str, Any]:
    """librdkafka's settings to reach the local cluster at `root` as admin."""
    layout = read_layout(root)
    return librdkafka_config(",".join(b.kafka_address for b in layout.brokers), layout.admin_token())


def _produce_one(root: Path, topic: str) -> KafkaError | None:
    """One record with acks=all as admin; its delivery error, or None once acknowledged."""
    producer = Producer(
        {
            **_admin_config(root),
            "acks": "all",
            "topic.metadata.propagation.max.ms": 2000,  # how long a missing topic is waited for
        }
    )
    errors: list[KafkaError | None] = []
    producer.produce(topic, value=b"x", on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(60) == 0
    [error] = errors
    return error


def _topic_names(root: Path) -> set[str]:
    with read_layout(root).controller() as controller:
        return {t["name"] for t in controller.list_topics()}


@pytest.mark.integration
@pytest.mark.slow
def test_auto_creation_is_on_by_default_and_off_with_broker_config(root: Path) -> None:
    ok(
        "up",
        "--dir",
        str(root),
        "--brokers",
        "2",
        "--disks",
        "1",
        "--broker-config",
        "auto.create.topics.enable=false",
    )
    state = json.loads((root / STATE_FILE).read_text())
    assert state["brokerConfig"] == {
        "auto.create.topics.enable": "false",
        "num.partitions": "1",
        "default.replication.factor": "2",
    }
    for broker in (1, 2):
        written = parse_properties((root / f"broker-{broker}" / "server.properties").read_text())
        assert written["auto.create.topics.enable"] == "false"
    refused = f"off-{uuid.uuid4().hex[:6]}"
    error = _produce_one(root, refused)
    assert error is not None and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART, error
    assert refused not in _topic_names(root)
    # An up of the existing cluster keeps its keys, and says so when asked for others.
    kept = ok("up", "--dir", str(root), "--broker-config", "auto.create.topics.enable=true")
    assert "Kept the existing brokers' config" in kept

    ok("up", "--dir", str(root), "--fresh", "--brokers", "2", "--disks", "1")
    created = f"on-{uuid.uuid4().hex[:6]}"
    assert _produce_one(root, created) is None
    with read_layout(root).controller() as controller:
        partitions = controller.describe_topic(created)["partitions"]
    assert len(partitions) == 1 and len(partitions[0]["replicas"]) == 2
    # A topic created with one replica takes acks=all writes: the brokers' min.insync.replicas (2)
    # is capped at its replication factor, as the operator's controller does (librdkafka's suite
    # creates such topics).
    single = f"single-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(_admin_config(root))
    admin.create_topics([NewTopic(single, 3, 1)])[single].result(timeout=60)
    assert _produce_one(root, single) is None


def test_up_help_names_the_option() -> None:
    helped = subprocess.run([JBODCTL, "local", "up", "--help"], capture_output=True, text=True, check=True)
    assert "--broker-config" in helped.stdout
