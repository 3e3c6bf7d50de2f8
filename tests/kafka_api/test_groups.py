"""Consumer groups (Kafka's classic protocol, issue 23) with librdkafka (confluent-kafka) as an
application uses them: `subscribe()`, automatic or explicit commits, `close()`.

* A group of three consumers reads a 6-partition topic while records are produced, one member
  leaves and another joins, with the `range` and the `cooperative-sticky` assignors: every
  acknowledged record is consumed (at least once), and once the group is done its committed
  offsets are the partitions' ends.
* A consumer that committed and closed, started again, resumes exactly at its commits.
* A static member (`group.instance.id`) restarted within its session gets its partitions back
  with no rebalance: the other member is neither revoked nor assigned anything.
* The coordinator fails mid-consumption — its broker killed with SIGKILL, or (root) the disk of
  its `__consumer_offsets` replica shut down (EIO, as `test_failures` fails a disk): the group
  moves to the partition's new leader, which holds every commit acknowledged to a member (read
  back from its `__consumer_offsets` partition by a consumer); every committed offset sampled
  all along is one of those records, and one that went back is explained by the log: a member
  committed the lower offset after the higher one. (librdkafka does: the auto-commits it deferred
  while the coordinator was away, each with the offsets of its time, are sent once a coordinator
  is found again, after a fresh commit; a Kafka broker stores them in the order they come.)
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from jbod_core import group_records
from jbod_core.group_records import OffsetCommitKey
from jbod_kafka import protocol
from tests.broker.conftest import wait_for
from tests.fs import requires_root
from tests.kafka_api.conftest import KafkaCluster, start_kafka_cluster
from tests.kafka_api.raw_client import RawConnection
from tests.kafka_api.test_librdkafka import new_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

PARTITIONS = 6
SESSION_TIMEOUT_MS = 3000  # the controller fences a silent broker after this
BROKER_SETTINGS = {
    "group_initial_rebalance_delay_ms": "500",
    "replica_lag_time_max_ms": "3000",
    "log_dir_failure_timeout_ms": "5000",
}
CONTROLLER_ARGS = ["--broker-session-timeout-ms", str(SESSION_TIMEOUT_MS)]


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with contextlib.ExitStack() as stack:
        yield start_kafka_cluster(
            stack, tmp_path_factory.mktemp("groups"), controller_args=CONTROLLER_ARGS, **BROKER_SETTINGS
        )


def value_of(sequence: int) -> bytes:
    return b"%08d" % sequence


# --- Producing and consuming in threads ---------------------------------------------------------


class Production(threading.Thread):
    """An acks=all producer: `count` records (record n to partition n % 6) over `seconds`,
    keeping (partition, offset) of every acknowledged one."""

    def __init__(self, kafka: KafkaCluster, topic: str, count: int, seconds: float) -> None:
        super().__init__(daemon=True)
        self.config = kafka.client_config(acks="all", **{"message.timeout.ms": 120_000})
        self.topic, self.count, self.seconds = topic, count, seconds
        self.acked: set[tuple[int, int]] = set()
        self.errors: list[str] = []

    def delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked.add((msg.partition(), msg.offset()))

    def run(self) -> None:
        producer = Producer(self.config)
        started = time.monotonic()
        for n in range(self.count):
            while (ahead := started + n * self.seconds / self.count - time.monotonic()) > 0:
                producer.poll(ahead)
            producer.produce(
                self.topic, value=value_of(n), partition=n % PARTITIONS, on_delivery=self.delivered
            )
            producer.poll(0)
        assert producer.flush(150) == 0


class Member(threading.Thread):
    """One consumer of the group in a thread, polling until `stop`; `close()` on the way out
    (commits, then LeaveGroup, as librdkafka does). `heartbeats`: the Heartbeat requests it has
    sent, from librdkafka's statistics (every 100 ms); `acknowledged`: (partition, offset) of
    every commit the coordinator acknowledged (librdkafka's `on_commit` without an error)."""

    def __init__(self, config: dict[str, Any], topic: str, name: str) -> None:
        super().__init__(daemon=True, name=name)
        self.config = {**config, "on_commit": self._committed}
        self.topic = topic
        self.acknowledged: set[tuple[int, int]] = set()
        self.consumed: list[tuple[int, int]] = []
        self.assigned: list[list[int]] = []  # what each on_assign added (all of it, eagerly)
        self.owned: list[int] = []  # the whole assignment, after the last poll
        self.revoked: list[list[int]] = []
        self.errors: list[str] = []
        self.heartbeats = 0
        self.stop = threading.Event()

    def _committed(self, err: Any, partitions: list[TopicPartition]) -> None:
        if err is None:
            self.acknowledged.update(
                (p.partition, p.offset) for p in partitions if p.error is None and p.offset >= 0
            )

    def _statistics(self, text: str) -> None:
        brokers = json.loads(text).get("brokers", {}).values()
        self.heartbeats = sum(b.get("req", {}).get("Heartbeat", 0) for b in brokers)

    def run(self) -> None:
        consumer = Consumer({**self.config, "statistics.interval.ms": 100, "stats_cb": self._statistics})
        consumer.subscribe(
            [self.topic],
            on_assign=lambda c, ps: self.assigned.append(sorted(p.partition for p in ps)),
            on_revoke=lambda c, ps: self.revoked.append(sorted(p.partition for p in ps)),
        )
        try:
            while not self.stop.is_set():
                msg = consumer.poll(0.2)
                self.owned = sorted(p.partition for p in consumer.assignment())
                if msg is None:
                    continue
                if msg.error() is not None:
                    self.errors.append(str(msg.error()))
                    continue
                self.consumed.append((msg.partition(), msg.offset()))
        finally:
            consumer.close()

    def finish(self) -> None:
        self.stop.set()
        self.join(60)
        assert not self.is_alive(), f"{self.name} did not stop"


def member_config(kafka: KafkaCluster, group: str, **extra: Any) -> dict[str, Any]:
    return kafka.client_config(
        **{
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 200,
            "session.timeout.ms": 10_000,
            "heartbeat.interval.ms": 500,
            **extra,
        }
    )


def committed(kafka: KafkaCluster, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets (-1001: none), as OffsetFetch answers them."""
    consumer = Consumer(kafka.client_config(**{"group.id": group, "enable.auto.commit": False}))
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        return {tp.partition: tp.offset for tp in found}
    finally:
        consumer.close()


def ends(kafka: KafkaCluster, topic: str) -> dict[int, int]:
    consumer = Consumer(kafka.client_config(**{"group.id": "ends", "enable.auto.commit": False}))
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()


def all_consumed(members: list[Member], production: Production) -> bool:
    seen = {record for m in members for record in m.consumed}
    return production.acked <= seen


def coordinator_of(kafka: KafkaCluster, group: str) -> int:
    """The leader of the group's partition of `__consumer_offsets`, as the controller has it."""
    index = group_records.partition_for(group, group_records.DEFAULT_PARTITIONS)
    partitions = kafka.cluster.admin.describe_topic(group_records.OFFSETS_TOPIC)["partitions"]
    [partition] = [p for p in partitions if p["partitionIndex"] == index]
    leader: int = partition["leader"]
    return leader


# --- Where a group lives --------------------------------------------------------------------------


def test_only_the_leader_of_the_groups_offsets_partition_coordinates_it(kafka: KafkaCluster) -> None:
    """FindCoordinator (v3, one key) on any broker names the leader of the group's partition of
    `__consumer_offsets`; an OffsetFetch (v7) of the group is answered there, NOT_COORDINATOR (16)
    by every other broker, as Kafka's clients expect to find out."""
    group = f"g-where-{uuid.uuid4().hex[:6]}"

    def ask(node_id: int, api_key: int, version: int, **fields: Any) -> Any:
        address = kafka.cluster.brokers[node_id].kafka["SASL_PLAINTEXT"]
        with RawConnection(address) as conn:
            assert int(conn.authenticate("admin", kafka.admin_password).error_code) == 0
            return conn.request(
                api_key, version, protocol.build(protocol.request_type(api_key, version), **fields)
            )

    def found() -> Any:
        answer = ask(1, 10, 3, key=group, key_type=0)
        return answer if int(answer.error_code) == 0 else None  # 15 until the topic has leaders

    answer = wait_for(found, timeout=30, what="a coordinator for the group")
    assert answer.node_id == coordinator_of(kafka, group)
    assert answer.port == int(kafka.cluster.brokers[answer.node_id].kafka["SASL_PLAINTEXT"].rsplit(":", 1)[1])
    expected = {n: 0 if n == answer.node_id else 16 for n in kafka.cluster.brokers}

    def errors() -> dict[int, int]:
        return {
            node_id: int(ask(node_id, 9, 7, group_id=group, topics=None, require_stable=False).error_code)
            for node_id in kafka.cluster.brokers
        }

    # The coordinator answers 14 (COORDINATOR_LOAD_IN_PROGRESS) until it has loaded the partition.
    wait_for(lambda: errors() == expected, timeout=30, what=f"OffsetFetch answered {expected}")


# --- A group of three while members come and go -------------------------------------------------


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_a_group_reads_every_record_while_a_member_leaves_and_another_joins(
    kafka: KafkaCluster, assignor: str
) -> None:
    topic = new_topic(kafka, partitions=PARTITIONS)
    group = f"g-{assignor}-{uuid.uuid4().hex[:6]}"
    config = member_config(kafka, group, **{"partition.assignment.strategy": assignor})
    production = Production(kafka, topic, count=3000, seconds=12)
    members = [Member(config, topic, f"m{i}") for i in range(3)]
    for member in members:
        member.start()
    production.start()
    wait_for(lambda: sum(len(m.consumed) for m in members) > 300, timeout=60, what="the group to consume")
    leaving, staying = members[2], members[:2]
    leaving.finish()  # close(): its commits, then LeaveGroup
    joining = Member(config, topic, "m3")
    joining.start()
    wait_for(lambda: joining.consumed, timeout=60, what="the new member to get records")
    production.join(180)
    assert production.errors == [] and len(production.acked) == 3000
    everyone = [*members, joining]
    wait_for(lambda: all_consumed(everyone, production), timeout=60, what="every record consumed")
    # Settled: the three current members own every partition once, two each.
    current = (*staying, joining)
    wait_for(
        lambda: (
            sorted(p for m in current for p in m.owned) == list(range(PARTITIONS))
            and all(len(m.owned) == 2 for m in current)
        ),
        timeout=30,
        what="the three members to own two partitions each",
    )
    for member in (*staying, joining):
        member.finish()
    assert committed(kafka, group, topic) == ends(kafka, topic)
    assert [e for m in everyone for e in m.errors] == []


# --- Resuming after a restart -------------------------------------------------------------------


def test_a_restarted_consumer_resumes_right_after_its_commits(kafka: KafkaCluster) -> None:
    topic = new_topic(kafka, partitions=PARTITIONS)
    producer = Producer(kafka.client_config(acks="all"))
    for n in range(600):
        producer.produce(topic, value=value_of(n), partition=n % PARTITIONS)
    assert producer.flush(30) == 0
    group = f"g-restart-{uuid.uuid4().hex[:6]}"
    config = member_config(kafka, group, **{"enable.auto.commit": False})
    first = Consumer(config)
    first.subscribe([topic])
    read: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 60
    while sum(len(v) for v in read.values()) < 250:
        assert time.monotonic() < deadline, read
        msg = first.poll(0.5)
        if msg is None or msg.error() is not None:
            continue
        read[msg.partition()].append(msg.offset())
    positions = {p: offsets[-1] + 1 for p, offsets in read.items() if offsets}
    first.commit(offsets=[TopicPartition(topic, p, o) for p, o in positions.items()], asynchronous=False)
    first.close()
    assert {p: o for p, o in committed(kafka, group, topic).items() if p in positions} == positions

    expected = {p: positions.get(p, 0) for p in range(PARTITIONS) if positions.get(p, 0) < 600 // PARTITIONS}
    second = Consumer(config)
    second.subscribe([topic])
    firsts: dict[int, int] = {}
    deadline = time.monotonic() + 60
    while len(firsts) < len(expected):
        assert time.monotonic() < deadline, firsts
        msg = second.poll(0.5)
        if msg is None or msg.error() is not None:
            continue
        firsts.setdefault(msg.partition(), msg.offset())
    second.close()
    assert firsts == expected


# --- Static membership --------------------------------------------------------------------------


def test_a_static_member_restarted_within_its_session_rejoins_without_a_rebalance(
    kafka: KafkaCluster,
) -> None:
    topic = new_topic(kafka, partitions=PARTITIONS)
    group = f"g-static-{uuid.uuid4().hex[:6]}"
    session = {"session.timeout.ms": 30_000, "partition.assignment.strategy": "range"}
    a = Member(member_config(kafka, group, **session, **{"group.instance.id": "a"}), topic, "a")
    b = Member(member_config(kafka, group, **session, **{"group.instance.id": "b"}), topic, "b")
    a.start()
    b.start()
    wait_for(
        lambda: (
            a.assigned and b.assigned and sorted(a.assigned[-1] + b.assigned[-1]) == list(range(PARTITIONS))
        ),
        timeout=60,
        what="both static members assigned",
    )
    b_partitions = b.assigned[-1]
    a_changes = (len(a.assigned), len(a.revoked))
    b.finish()  # a static member's close() does not leave the group (librdkafka, KIP-345)
    again = Member(member_config(kafka, group, **session, **{"group.instance.id": "b"}), topic, "b-again")
    again.start()
    wait_for(lambda: again.assigned, timeout=30, what="the restarted static member assigned")
    assert again.assigned == [b_partitions]
    # A rebalance would reach the other member in the answer to its next heartbeat: librdkafka
    # sends one only once the one before was answered, and none while it rejoins. Three more,
    # and a revocation would have reached its poll (every 0.2 s).
    heartbeats = a.heartbeats
    wait_for(lambda: a.heartbeats >= heartbeats + 3, timeout=30, what="three more heartbeats of member a")
    assert (len(a.assigned), len(a.revoked)) == a_changes, (a.assigned, a.revoked)
    a.finish()
    again.finish()


# --- The coordinator fails ----------------------------------------------------------------------


class CommitWatch(threading.Thread):
    """Samples the group's committed offsets every 200 ms (OffsetFetch through a consumer that
    never joins): every (partition, offset) it saw, and any partition whose committed offset
    went back."""

    def __init__(self, kafka: KafkaCluster, group: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.config = kafka.client_config(**{"group.id": group, "enable.auto.commit": False})
        self.topic = topic
        self.stop = threading.Event()
        self.highest: dict[int, int] = {}
        self.went_back: list[tuple[int, int, int]] = []  # (partition, before, after)
        self.seen: set[tuple[int, int]] = set()
        self.samples = 0

    def run(self) -> None:
        consumer = Consumer(self.config)
        try:
            while not self.stop.wait(0.2):
                try:
                    found = consumer.committed(
                        [TopicPartition(self.topic, p) for p in range(PARTITIONS)], timeout=5
                    )
                except KafkaException:
                    continue  # the coordinator moving
                self.samples += 1
                for tp in found:
                    if tp.offset < 0:
                        continue
                    self.seen.add((tp.partition, tp.offset))
                    before = self.highest.get(tp.partition, -1)
                    if tp.offset < before:
                        self.went_back.append((tp.partition, before, tp.offset))
                    self.highest[tp.partition] = max(before, tp.offset)
        finally:
            consumer.close()


def logged_commits(kafka: KafkaCluster, group: str, topic: str) -> list[tuple[int, int]]:
    """The group's commits of `topic`, (partition, offset) in log order, as a consumer reads the
    group's partition of `__consumer_offsets` from its leader up to the high watermark."""
    index = group_records.partition_for(group, group_records.DEFAULT_PARTITIONS)
    consumer = Consumer(kafka.client_config(**{"group.id": f"reader-{group}", "enable.auto.commit": False}))
    try:
        start = TopicPartition(group_records.OFFSETS_TOPIC, index, OFFSET_BEGINNING)
        _low, high = consumer.get_watermark_offsets(start, timeout=10)
        consumer.assign([start])
        commits: list[tuple[int, int]] = []
        position = 0
        deadline = time.monotonic() + 60
        while position < high:
            assert time.monotonic() < deadline, (
                f"read {group_records.OFFSETS_TOPIC}-{index} to {position} of {high}"
            )
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            position = msg.offset() + 1
            record = group_records.decode(msg.key(), msg.value())
            if (
                record is not None
                and isinstance(record.key, OffsetCommitKey)
                and (record.key.group, record.key.topic) == (group, topic)
                and record.value is not None
            ):
                commits.append((record.key.partition, record.value.offset))
        return commits
    finally:
        consumer.close()


def committed_after(commits: list[tuple[int, int]], partition: int, higher: int, lower: int) -> bool:
    """Whether `commits` (in log order) hold a commit of `lower` after one of `higher`."""
    first = next((i for i, c in enumerate(commits) if c == (partition, higher)), None)
    return first is not None and (partition, lower) in commits[first + 1 :]


def neighbour_of(group: str) -> str:
    """A group id in the same partition of `__consumer_offsets` as `group`: the same coordinator."""
    index = group_records.partition_for(group, group_records.DEFAULT_PARTITIONS)
    return next(
        name
        for name in (f"{group}-{n}" for n in itertools.count())
        if group_records.partition_for(name, group_records.DEFAULT_PARTITIONS) == index
    )


def _consume_through(kafka: KafkaCluster, fail: Any) -> None:
    """Two members consume while records are produced; `fail(group, coordinator)` strikes once they
    committed; then every record is consumed and the commits reach the ends. The new leader's log
    holds every acknowledged commit and every offset the watch saw, and a going back the watch saw
    is a member's own later commit of the lower offset (the module docstring says why). Right
    before the failure, a consumer of a standalone group of the same coordinator commits with no
    member racing it: the new coordinator answers exactly that commit."""
    topic = new_topic(kafka, partitions=PARTITIONS)
    group = f"g-failover-{uuid.uuid4().hex[:6]}"
    config = member_config(kafka, group, **{"session.timeout.ms": 30_000})
    production = Production(kafka, topic, count=2400, seconds=16)
    members = [Member(config, topic, f"m{i}") for i in range(2)]
    watch = CommitWatch(kafka, group, topic)
    for member in members:
        member.start()
    production.start()
    watch.start()
    wait_for(lambda: len(watch.highest) == PARTITIONS, timeout=60, what="commits of every partition")
    coordinator = coordinator_of(kafka, group)
    standalone = neighbour_of(group)
    last = Consumer(kafka.client_config(**{"group.id": standalone, "enable.auto.commit": False}))
    marks = {p: 1000 + p for p in range(PARTITIONS)}
    last.commit(offsets=[TopicPartition(topic, p, o) for p, o in marks.items()], asynchronous=False)
    last.close()
    fail(group, coordinator)
    wait_for(
        lambda: coordinator_of(kafka, group) not in (coordinator, -1),
        timeout=60,
        what="the group's partition to get a new leader",
    )
    production.join(180)
    assert production.errors == [] and len(production.acked) == 2400
    wait_for(lambda: all_consumed(members, production), timeout=120, what="every record consumed")
    end = ends(kafka, topic)
    wait_for(lambda: watch.highest == end, timeout=60, what="commits to reach the ends")
    for member in members:
        member.finish()
    watch.stop.set()
    watch.join(30)
    assert committed(kafka, group, topic) == end
    assert committed(kafka, standalone, topic) == marks
    commits = logged_commits(kafka, group, topic)
    acknowledged = {commit for m in members for commit in m.acknowledged}
    assert acknowledged, "no commit acknowledged"
    assert sorted(acknowledged - set(commits)) == [], "acknowledged commits missing from the new leader's log"
    assert sorted(watch.seen - set(commits)) == [], "committed offsets served that the new leader's log lacks"
    unexplained = [back for back in watch.went_back if not committed_after(commits, *back)]
    assert unexplained == [], (
        f"committed offsets went back with no later commit of the lower one: {unexplained}"
    )


def test_the_group_survives_its_coordinator_killed_with_sigkill(tmp_path: Path) -> None:
    with contextlib.ExitStack() as stack:
        kafka = start_kafka_cluster(stack, tmp_path, controller_args=CONTROLLER_ARGS, **BROKER_SETTINGS)
        _consume_through(kafka, lambda _group, coordinator: kafka.cluster.brokers[coordinator].kill())


@pytest.mark.root
@requires_root
def test_the_group_survives_the_disk_of_its_offsets_failing(tmp_path: Path) -> None:
    with contextlib.ExitStack() as stack:
        kafka = start_kafka_cluster(
            stack, tmp_path, loop=True, controller_args=CONTROLLER_ARGS, **BROKER_SETTINGS
        )

        def fail_the_offsets_disk(group: str, coordinator: int) -> None:
            """EIO on the volume of the coordinator's replica of the group's partition."""
            cluster = kafka.cluster
            index = group_records.partition_for(group, group_records.DEFAULT_PARTITIONS)
            partitions = cluster.admin.describe_topic(group_records.OFFSETS_TOPIC)["partitions"]
            [partition] = [p for p in partitions if p["partitionIndex"] == index]
            directory = partition["directories"][partition["replicas"].index(coordinator)]
            failed = next(i for i in (0, 1) if cluster.dir_id(coordinator, i) == directory)
            cluster.mounts[(coordinator, failed)].shutdown()

        _consume_through(kafka, fail_the_offsets_disk)
