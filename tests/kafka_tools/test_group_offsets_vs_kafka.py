"""The operator's view of consumer groups (`jbod_client.group_offsets`, which its lag is made of)
asked of Apache Kafka 4.3.1 and of our brokers: the same scenario gives the same answer.

On each side a librdkafka producer writes 10 and 5 records to a topic's two partitions; a
librdkafka consumer group commits offset 0 of partition 1, reads 4 records of partition 0 and
commits them; a second group commits nothing. `group_offsets`, logged in with SCRAM as an admin,
then finds the first group's committed offsets 4 and 0, the partitions' ends 10 and 5, and no
offsets for the second group, on both.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from e2e.kafka_tools import KafkaCluster as RealKafka
from e2e.kafka_tools import KafkaInstall, ScramUser
from e2e.wait import wait_for
from jbod_client.group_offsets import GroupOffsets, group_offsets
from jbod_client.kafka_admin import KafkaAdmin
from jbod_client.kafka_config import KafkaSecurity
from tests.kafka_api.conftest import start_kafka_cluster
from tests.kafka_tools.test_harness import install  # noqa: F401  the module's fixture: Kafka's jars or a skip

TOPIC = "lagged"
COORDINATOR_MOVING = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    }
)


class Side:
    def __init__(self, bootstrap: str, librdkafka: dict[str, Any], login: KafkaSecurity) -> None:
        self.bootstrap = bootstrap
        self.librdkafka = {"bootstrap.servers": bootstrap, **librdkafka}
        self.login = login

    def offsets(self) -> GroupOffsets:
        async def ask() -> GroupOffsets:
            async with KafkaAdmin(self.bootstrap.split(","), self.login) as admin:
                return await group_offsets(admin)

        return asyncio.run(ask())


@pytest.fixture(scope="module")
def kafka(install: KafkaInstall) -> Iterator[Side]:  # noqa: F811
    user = ScramUser()
    with RealKafka(install, scram=user) as real:
        librdkafka = {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": user.mechanism,
            "sasl.username": user.name,
            "sasl.password": user.password,
        }
        login = KafkaSecurity("SASL_PLAINTEXT", user.mechanism, user.name, user.password)
        yield Side(real.bootstrap, librdkafka, login)


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Side]:
    with contextlib.ExitStack() as stack:
        cluster = start_kafka_cluster(stack, tmp_path_factory.mktemp("our-groups"), brokers=2, dirs=1)
        config = cluster.client_config()
        config.pop("bootstrap.servers", None)
        yield Side(cluster.bootstrap, config, KafkaSecurity.admin(cluster.admin_password))


def _scenario(side: Side) -> tuple[str, str]:
    """The module docstring's groups: (the group that committed, the one that did not)."""
    admin = AdminClient(side.librdkafka)
    [created] = admin.create_topics([NewTopic(TOPIC, num_partitions=2, replication_factor=1)]).values()
    created.result(30)
    producer = Producer({**side.librdkafka, "enable.idempotence": True})
    for partition, count in ((0, 10), (1, 5)):
        for n in range(count):
            producer.produce(TOPIC, value=f"{partition}-{n}".encode(), partition=partition)
    assert producer.flush(30) == 0
    committed, idle = f"read-{uuid.uuid4().hex[:8]}", f"idle-{uuid.uuid4().hex[:8]}"
    consumer = Consumer(
        {
            **side.librdkafka,
            "group.id": committed,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        _commit(consumer, TopicPartition(TOPIC, 1, 0))
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        read: list[int] = []

        def four_read() -> bool:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                read.append(int(message.offset() or 0))
            return len(read) >= 4

        wait_for(four_read, timeout=60, what="4 records of partition 0 read")
        _commit(consumer, TopicPartition(TOPIC, 0, read[3] + 1))
    finally:
        consumer.close()
    idle_consumer = Consumer(
        {**side.librdkafka, "group.id": idle, "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    )
    try:
        idle_consumer.subscribe([TOPIC])
        idle_consumer.poll(1.0)  # joins the group (or starts to); commits nothing
    finally:
        idle_consumer.close()
    return committed, idle


def _commit(consumer: Consumer, offset: TopicPartition) -> None:
    """Commit `offset`, again after a retriable error or one of a coordinator still being found,
    moved or loaded (as a new group's is; Kafka's Java client retries these, librdkafka's
    synchronous commit hands them to the application); any other error fails at once."""
    failed: list[KafkaException] = []

    def committed() -> bool:
        try:
            consumer.commit(offsets=[offset], asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].retriable() or exc.args[0].code() in COORDINATOR_MOVING:
                return False
            failed.append(exc)
        return True

    wait_for(committed, timeout=60, what=f"offset {offset.offset} of {offset.partition} committed")
    if failed:
        raise failed[0]


def test_group_offsets_answer_alike(kafka: Side, ours: Side) -> None:
    answers = {}
    for name, side in (("kafka", kafka), ("ours", ours)):
        committed, idle = _scenario(side)
        offsets = side.offsets()
        answers[name] = (
            dict(offsets.committed.get(committed, {})),
            dict(offsets.committed.get(idle, {})),
            {p: o for p, o in offsets.log_end.items() if p[0] == TOPIC},
        )
    assert answers["ours"] == answers["kafka"]
    assert answers["kafka"] == ({(TOPIC, 0): 4, (TOPIC, 1): 0}, {}, {(TOPIC, 0): 10, (TOPIC, 1): 5})
