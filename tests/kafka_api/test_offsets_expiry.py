"""Committed offsets expire as Kafka 4.3.1 expires them (`offsets.retention.minutes`, KIP-211),
on a broker of ours with Kafka's smallest retention (1 minute) checked every second, seen by
librdkafka's consumers and AdminClient (the same as Kafka 4.3.1 did with these settings,
docs/decisions.md "Offsets expiry"):

* a group whose last member left without committing is removed at the next check;
* a standalone group's offsets (`assign()` consumers: generation -1) expire each a minute after
  its own commit, and the group goes with the last one;
* a Stable group keeps the offsets of the topic it subscribes to, however old, and loses those
  of a topic it does not subscribe to a minute after their commit;
* an Empty group's offsets expire together a minute after it became Empty, not after their
  commits, and the group goes with them;
* every expired offset and every removed group has a tombstone (a null value) as its last
  record in the groups' partition of `__consumer_offsets`.

The groups share one partition of `__consumer_offsets` (one coordinator, each check deciding on
all of them at once), so the order their offsets go in is the order of their base times.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from jbod_core import group_records
from jbod_core.group_records import GroupMetadataKey, OffsetCommitKey
from tests.broker.conftest import wait_for
from tests.kafka_api.conftest import KafkaCluster, start_kafka_cluster
from tests.kafka_api.test_librdkafka import wait_for_leaders

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

SUBSCRIBED, OTHER = "subscribed", "other"
NO_OFFSET = -1001  # librdkafka's OFFSET_INVALID: OffsetFetch answered -1
RETENTION_S = 60


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with contextlib.ExitStack() as stack:
        yield start_kafka_cluster(
            stack,
            tmp_path_factory.mktemp("expiry"),
            brokers=1,
            offsets_retention_minutes="1",
            offsets_retention_check_interval_ms="1000",
            group_initial_rebalance_delay_ms="0",
        )


def same_partition_groups(count: int) -> list[str]:
    """`count` group ids in one partition of `__consumer_offsets`."""
    base = f"expiry-{uuid.uuid4().hex[:6]}"
    index = group_records.partition_for(base, group_records.DEFAULT_PARTITIONS)
    names = (f"{base}-{n}" for n in itertools.count())
    return list(
        itertools.islice(
            (n for n in names if group_records.partition_for(n, group_records.DEFAULT_PARTITIONS) == index),
            count,
        )
    )


class Polling(threading.Thread):
    """A subscribed consumer kept in its group by polling (no automatic commits)."""

    def __init__(self, config: dict[str, Any], group: str) -> None:
        super().__init__(daemon=True, name=group)
        self.consumer = Consumer(
            {**config, "group.id": group, "enable.auto.commit": False, "session.timeout.ms": 10_000}
        )
        self.consumer.subscribe([SUBSCRIBED])
        self.stop = threading.Event()
        wait_for(lambda: (self.consumer.poll(0.2), self.consumer.assignment())[1], what="assigned")

    def commit(self, *offsets: tuple[str, int, int]) -> None:
        """Before `start()`: a synchronous commit while another thread polls did not return here."""
        commit(self.consumer, *offsets)

    def run(self) -> None:
        while not self.stop.is_set():
            self.consumer.poll(0.2)

    def close(self) -> None:
        """Leave the group (librdkafka's `close()`: LeaveGroup, nothing committed)."""
        if self.is_alive():
            self.stop.set()
            self.join(30)
        self.consumer.close()


def commit(consumer: Consumer, *offsets: tuple[str, int, int]) -> None:
    """A synchronous commit, retried while the coordinator loads."""
    partitions = [TopicPartition(t, p, o) for t, p, o in offsets]

    def done() -> bool:
        try:
            consumer.commit(offsets=partitions, asynchronous=False)
        except KafkaException:  # COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR: retried
            return False
        return True

    wait_for(done, timeout=30, what="a commit")


def committed(admin: AdminClient, group: str) -> dict[tuple[str, int], int]:
    """Every offset the group has committed (OffsetFetch of all its partitions)."""
    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(30)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions}


def listed(admin: AdminClient) -> set[str]:
    return {g.group_id for g in admin.list_consumer_groups().result(30).valid}


def last_records(kafka: KafkaCluster, group: str) -> dict[Any, bytes | None]:
    """The last value of every key of the groups' partition of `__consumer_offsets`, read by a
    consumer from the beginning to the high watermark."""
    index = group_records.partition_for(group, group_records.DEFAULT_PARTITIONS)
    consumer = Consumer(kafka.client_config(**{"group.id": f"reader-{group}", "enable.auto.commit": False}))
    try:
        start = TopicPartition(group_records.OFFSETS_TOPIC, index, OFFSET_BEGINNING)
        _low, high = consumer.get_watermark_offsets(start, timeout=10)
        consumer.assign([start])
        last: dict[Any, bytes | None] = {}
        position = 0
        deadline = time.monotonic() + 60
        while position < high:
            assert time.monotonic() < deadline, f"read to {position} of {high}"
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            position = msg.offset() + 1
            record = group_records.decode(msg.key(), msg.value())
            if record is not None:
                last[record.key] = msg.value()
        return last
    finally:
        consumer.close()


def test_offsets_expire_by_kafkas_rules_with_tombstones(kafka: KafkaCluster) -> None:
    config = kafka.client_config()
    admin = AdminClient(config)
    for topic, partitions in ((SUBSCRIBED, 2), (OTHER, 1)):
        kafka.cluster.admin.create_topic(topic, partitions=partitions, replication_factor=1)
        wait_for_leaders(kafka, topic, partitions)
    emptied, stable, standalone, unused = same_partition_groups(4)

    # A group left without a commit goes at the next check.
    Polling(config, unused).close()
    wait_for(lambda: unused not in listed(admin), timeout=10, what="the unused group removed")

    empties = Polling(config, emptied)
    empties.commit((SUBSCRIBED, 0, 2))
    empties.start()
    member = Polling(config, stable)
    member.commit((SUBSCRIBED, 0, 3), (OTHER, 0, 4))
    member.start()
    simple = Consumer({**config, "group.id": standalone, "enable.auto.commit": False})
    commit(simple, (SUBSCRIBED, 0, 5))
    # fixed wait: the second standalone commit must be a check interval (and a poll) or more after
    # the first, so that a check finds the first expired and the second not yet
    time.sleep(3)
    commit(simple, (SUBSCRIBED, 1, 7))
    # fixed wait: the group must become Empty a few check intervals after the first standalone
    # commit, so that a check finds that one expired and the Empty group's offset not yet
    time.sleep(2)
    empties.close()
    assert committed(admin, emptied) == {(SUBSCRIBED, 0): 2}

    try:
        # A minute after its commit, the standalone group's first offset has gone, and with it
        # (decided in the same check, committed before it) the Stable group's offset of the
        # topic it does not subscribe to; the Empty group's offset, committed before them, stays.
        wait_for(
            lambda: committed(admin, standalone) == {(SUBSCRIBED, 1): 7},
            timeout=RETENTION_S + 30,
            what="the first standalone offset expired",
        )
        assert committed(admin, stable) == {(SUBSCRIBED, 0): 3}
        assert committed(admin, emptied) == {(SUBSCRIBED, 0): 2}
        assert listed(admin) >= {emptied, stable, standalone}
        # A minute after it became Empty, the Empty group's offset goes, and the group; the
        # standalone group's later commit has gone before it, and that group too.
        wait_for(lambda: emptied not in listed(admin), timeout=30, what="the Empty group removed")
        assert standalone not in listed(admin)
        fetched = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(emptied, [TopicPartition(SUBSCRIBED, 0)])]
        )[emptied].result(30)
        assert [tp.offset for tp in fetched.topic_partitions] == [NO_OFFSET]
        assert committed(admin, standalone) == {}
        assert committed(admin, stable) == {(SUBSCRIBED, 0): 3}  # subscribed: never expires while Stable
    finally:
        simple.close()
        member.close()

    last = last_records(kafka, stable)
    gone = {emptied, standalone, unused}
    assert {
        key: value
        for key, value in last.items()
        if key.group in gone or key == OffsetCommitKey(stable, OTHER, 0)
    } == {
        OffsetCommitKey(emptied, SUBSCRIBED, 0): None,
        OffsetCommitKey(standalone, SUBSCRIBED, 0): None,
        OffsetCommitKey(standalone, SUBSCRIBED, 1): None,
        OffsetCommitKey(stable, OTHER, 0): None,
        GroupMetadataKey(emptied): None,
        GroupMetadataKey(standalone): None,
        GroupMetadataKey(unused): None,
    }
    assert last[OffsetCommitKey(stable, SUBSCRIBED, 0)] is not None
    assert last[GroupMetadataKey(stable)] is not None
