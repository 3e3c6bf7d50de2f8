"""Client quotas throttle librdkafka as Kafka does (issue 34): a user with `producer_byte_rate`
and `consumer_byte_rate` of 100 KiB/s produces and then consumes 512 KiB through confluent-kafka;
the brokers report the throttle time (`throttle_cb`), mute the connection, and hold the client
to its quota. The same client code runs against Apache Kafka 4.3.1 and against ours.

Both brokers measure rates over `quota.window.num=2` windows of 1 s (Kafka's default 11 lets a
new client burst 10 s worth first, which would need a much longer run to see the steady rate).
The rate is measured from the first throttle reported to the last record: an upper bound only is
asserted (at most 1.2 x the quota), the lower side is printed.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from e2e import kafka_tools
from e2e.kafka_tools import KafkaCluster as RealKafka
from e2e.kafka_tools import KafkaInstall, ScramUser
from jbod_local.kafka_clients import client_properties
from tests.kafka_api.conftest import start_kafka_cluster
from tests.kafka_tools.test_harness import install  # noqa: F401  the module's fixture: Kafka's jars or a skip

pytestmark = [pytest.mark.slow, pytest.mark.integration]

QUOTA = 100 * 1024  # bytes per second, produce and consume
RECORD = b"x" * 1024
RECORDS = 512  # 512 KiB: about 5 s at the quota each way
WINDOWS = {"quota.window.num": "2", "quota.window.size.seconds": "1"}
USER, PASSWORD = "throttled", "throttled-secret"
TIMEOUT = 60.0


@dataclass
class Side:
    name: str
    bootstrap: str
    admin_config: dict[str, str]
    properties: Path  # kafka-configs.sh's --command-config, as the admin

    def user_config(self) -> dict[str, str]:
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": USER,
            "sasl.password": PASSWORD,
        }


@dataclass
class Timeline:
    """When each record was acknowledged or consumed, and each throttle the client was told of."""

    started: float = field(default_factory=time.monotonic)
    done: list[tuple[float, int]] = field(default_factory=list)
    throttles: list[tuple[float, int]] = field(default_factory=list)

    def on_throttle(self, event: object) -> None:
        self.throttles.append((time.monotonic(), int(getattr(event, "throttle_time", 0) * 1000)))

    def steady_rate(self) -> float:
        """Bytes per second from the first throttle reported to the last record."""
        first = self.throttles[0][0]
        after = [(t, n) for t, n in self.done if t >= first]
        return sum(n for _t, n in after) / (self.done[-1][0] - first)

    def overall_rate(self) -> float:
        return sum(n for _t, n in self.done) / (self.done[-1][0] - self.started)


def _prepare(side: Side, tools: KafkaInstall, topic: str) -> None:
    admin = AdminClient(side.admin_config)
    upsertion = UserScramCredentialUpsertion(
        USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), PASSWORD.encode()
    )
    admin.alter_user_scram_credentials([upsertion])[USER].result(TIMEOUT)
    admin.create_topics([NewTopic(topic, 1, 1)], request_timeout=TIMEOUT)[topic].result(TIMEOUT)
    proc = kafka_tools.run_tool(
        "kafka-configs.sh",
        [
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            USER,
            "--add-config",
            f"producer_byte_rate={QUOTA},consumer_byte_rate={QUOTA}",
        ],
        bootstrap=side.bootstrap,
        command_config=side.properties,
        install=tools,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _produce(side: Side, topic: str) -> Timeline:
    timeline = Timeline()
    producer = Producer(
        {
            **side.user_config(),
            "client.id": "quota-producer",
            "acks": "1",
            "batch.size": 16384,
            "linger.ms": 5,
            "throttle_cb": timeline.on_throttle,
        }
    )

    def delivered(err: object, msg: object) -> None:
        assert err is None, err
        timeline.done.append((time.monotonic(), len(RECORD)))

    for _ in range(RECORDS):
        while True:
            try:
                producer.produce(topic, RECORD, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(TIMEOUT) == 0
    return timeline


def _consume(side: Side, topic: str) -> Timeline:
    timeline = Timeline()
    consumer = Consumer(
        {
            **side.user_config(),
            "client.id": "quota-consumer",
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "throttle_cb": timeline.on_throttle,
        }
    )
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + TIMEOUT
        while len(timeline.done) < RECORDS and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                timeline.done.append((time.monotonic(), len(msg.value() or b"")))
    finally:
        consumer.close()
    assert len(timeline.done) == RECORDS
    return timeline


def _check(side: Side, what: str, timeline: Timeline) -> None:
    assert timeline.throttles, f"{side.name}: no throttle time was reported to the {what}"
    steady, overall = timeline.steady_rate(), timeline.overall_rate()
    print(
        f"{side.name} {what}: steady {steady / 1024:.1f} KiB/s, overall {overall / 1024:.1f} KiB/s "
        f"(quota {QUOTA / 1024:.0f} KiB/s), {len(timeline.throttles)} throttles, "
        f"largest {max(ms for _t, ms in timeline.throttles)} ms"
    )
    assert steady <= 1.2 * QUOTA, f"{side.name} {what} ran at {steady:.0f} B/s over a quota of {QUOTA}"


@pytest.fixture(scope="module")
def kafka(install: KafkaInstall, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Side]:  # noqa: F811
    user = ScramUser()
    properties = tmp_path_factory.mktemp("kafka-throttle") / "admin.properties"
    properties.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user.name}" password="{user.password}";\n'
    )
    with RealKafka(install, scram=user, properties=WINDOWS) as real:
        admin = {
            "bootstrap.servers": real.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user.name,
            "sasl.password": user.password,
        }
        yield Side("Kafka", real.bootstrap, admin, properties)


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Side]:
    base = tmp_path_factory.mktemp("our-throttle")
    with contextlib.ExitStack() as stack:
        cluster = start_kafka_cluster(
            stack,
            base,
            brokers=1,
            dirs=1,
            allow_everyone_if_no_acl_found="true",
            **{k.replace(".", "_"): v for k, v in WINDOWS.items()},
        )
        properties = base / "admin.properties"
        properties.write_text(client_properties(cluster.admin_password))
        bootstrap = cluster.cluster.brokers[1].kafka["SASL_PLAINTEXT"]
        admin = {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "admin",
            "sasl.password": cluster.admin_password,
        }
        yield Side("ours", bootstrap, admin, properties)


@pytest.mark.parametrize("side_name", ["ours", "kafka"])
def test_a_user_is_held_to_its_byte_rate_quotas(side_name: str, request: pytest.FixtureRequest) -> None:
    side: Side = request.getfixturevalue(side_name)
    topic = f"throttled-{uuid.uuid4().hex[:8]}"
    _prepare(side, request.getfixturevalue("install"), topic)
    _check(side, "producer", _produce(side, topic))
    _check(side, "consumer", _consume(side, topic))
