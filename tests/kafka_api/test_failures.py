"""librdkafka's idempotent producer (confluent-kafka, acks=all) through a leader's disk failure and a
kill -9 of another broker (issue 22): every acknowledged record is read back once, where its
delivery report put it, in produce order.

The scenario (`test_idempotent_producer_survives_a_failed_leader_disk_and_a_killed_broker`):

* Three brokers with two loop-mounted ext4 log dirs each; a topic of 6 partitions, RF 3,
  min.insync.replicas=2; the controller fences a silent broker after 3 s.
* A thread produces 20,000 records of 1,000 bytes (record `n` is `n`'s 8 digits repeated, sent to
  partition `n % 6`) over ~10 s with enable.idempotence=true, acks=all, and keeps every delivery
  report: (partition, offset) of each acknowledged record, the error of each refused one.
* Meanwhile: the ext4 volume holding partition 0's leader replica is shut down (EIO on every I/O,
  as `tests/broker` fails a disk); once the controller lists the dir offline and moved leadership
  away, and the producer got an acknowledgement on each partition the dir held, another broker
  `K` is killed with SIGKILL. `K` is one that leads a partition and is never the only in-sync
  replica of one, so no partition goes offline; but the partitions whose replica on the damaged
  broker was in the failed dir then have one in-sync replica, fewer than min.insync.replicas, and
  refuse acks=all writes (NOT_ENOUGH_REPLICAS, retried by librdkafka). `K` is therefore restarted (`LocalBroker.start`, same dirs, new ports)
  once the controller has fenced it and moved its leadership and the producer got an
  acknowledgement after that (from the partitions left with two in-sync replicas): those
  partitions take writes again once it is back in their ISRs (left down, their records would
  only time out).
* After the producer flushed, every partition is read from offset 0 to its high watermark with
  assign(), and checked (`verify`): offsets dense from 0, no value twice, every value one this
  producer sent to that partition, in increasing sequence per partition, every acknowledged record
  at the very partition and offset its delivery report named. Delivery errors are allowed only for
  records never acknowledged, and are counted; every record must get a report, the producer no
  fatal error (an idempotence violation seen by librdkafka), no broker log a traceback.

Printed (`pytest -s`), never asserted: the timeline (each fault, when the controller showed its
effect, when the producer finished), every wait over 0.5 s between two acknowledgements of a
partition, and how many records librdkafka sent more than once (retries the brokers had to
deduplicate or had refused).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from tests.broker.conftest import Cluster, broker_ready, wait_for
from tests.fs import requires_root
from tests.kafka_api.conftest import KafkaCluster, start_kafka_cluster
from tests.kafka_api.test_librdkafka import new_topic

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.root,
    requires_root,
    pytest.mark.timeout(600),
]

PARTITIONS = 6
RECORDS = 20_000
PRODUCE_SECONDS = 10.0
VALUE_REPEATS = 125  # 8 digits x 125 = 1,000 bytes
#: The controller fences a broker after this long without a heartbeat (its default is 9 s).
SESSION_TIMEOUT_MS = 3000
BROKER_SETTINGS = {
    "broker_session_timeout_ms": str(SESSION_TIMEOUT_MS),
    "replica_lag_time_max_ms": "3000",
    "log_dir_failure_timeout_ms": "5000",
}
#: librdkafka's delivery timeout: longer than any fault here, short enough to end a stuck run.
MESSAGE_TIMEOUT_MS = 90_000


def value_of(sequence: int) -> bytes:
    return b"%08d" % sequence * VALUE_REPEATS


def sequence_of(value: bytes) -> int:
    sequence = int(value[:8])
    assert value == value_of(sequence), f"a record whose value is not one we sent: {value[:40]!r}..."
    return sequence


@dataclass(frozen=True)
class Delivery:
    """One acknowledged record, as its delivery report named it."""

    sequence: int
    partition: int
    offset: int
    at: float  # monotonic time the report was served


class Production(threading.Thread):
    """An idempotent acks=all producer in a thread: `RECORDS` records paced over `PRODUCE_SECONDS`,
    then a flush until every record has its delivery report (or `MESSAGE_TIMEOUT_MS` passed)."""

    def __init__(self, config: dict[str, Any], topic: str) -> None:
        super().__init__(name="idempotent-producer", daemon=True)
        self.config = config
        self.topic = topic
        self.acked: list[Delivery] = []
        self.failed: dict[int, KafkaError] = {}  # sequence -> its delivery error
        self.client_errors: list[KafkaError] = []  # error_cb: transport, fatal, ...
        self.statistics: dict[str, Any] = {}  # librdkafka's last statistics (stats_cb)
        self.unreported = -1  # records without a delivery report after the flush
        self.crashed: BaseException | None = None
        self.started_at = 0.0
        self.produced_at = 0.0  # the last record was handed to librdkafka
        self.flushed_at = 0.0

    def delivered(self, err: KafkaError | None, msg: Message) -> None:
        value, partition, offset = msg.value(), msg.partition(), msg.offset()
        assert value is not None and partition is not None and offset is not None, msg
        sequence = sequence_of(value)
        if err is not None:
            self.failed[sequence] = err
        else:
            self.acked.append(Delivery(sequence, partition, offset, time.monotonic()))

    def run(self) -> None:
        try:
            self._produce()
        except BaseException as exc:  # surfaced by the test after join()
            self.crashed = exc

    def _produce(self) -> None:
        producer = Producer(
            {
                **self.config,
                "error_cb": self.client_errors.append,
                "statistics.interval.ms": 500,
                "stats_cb": lambda text: self.statistics.update(json.loads(text)),
            }
        )
        self.started_at = time.monotonic()
        for sequence in range(RECORDS):
            due = self.started_at + sequence * PRODUCE_SECONDS / RECORDS
            while (ahead := due - time.monotonic()) > 0:  # poll() returns early once it served a report
                producer.poll(ahead)
            while True:
                try:
                    producer.produce(
                        self.topic,
                        value=value_of(sequence),
                        partition=sequence % PARTITIONS,
                        on_delivery=self.delivered,
                    )
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
        self.produced_at = time.monotonic()
        deadline = self.produced_at + MESSAGE_TIMEOUT_MS / 1000 + 30
        self.unreported = producer.flush(1.0)
        while self.unreported and time.monotonic() < deadline:
            self.unreported = producer.flush(1.0)
        self.flushed_at = time.monotonic()
        producer.poll(0.6)  # one more statistics report, with the flush's retries

    def wait_acked(self, count: int, *, timeout: float = 30) -> None:
        wait_for(lambda: len(self.acked) >= count, timeout=timeout, what=f"{count} acknowledged records")

    def partitions_acked_after(self, moment: float) -> set[int]:
        """The partitions with a record acknowledged after monotonic time `moment`."""
        return {d.partition for d in list(self.acked) if d.at > moment}


@contextlib.contextmanager
def kafka_cluster_on_loop_disks(base: Path) -> Iterator[KafkaCluster]:
    with contextlib.ExitStack() as stack:
        yield start_kafka_cluster(
            stack,
            base,
            loop=True,
            controller_args=["--broker-session-timeout-ms", str(SESSION_TIMEOUT_MS)],
            **BROKER_SETTINGS,  # type: ignore[arg-type]  # str settings, not `brokers` or `loop`
        )


def replica_dir(partition: dict[str, Any], broker: int) -> str:
    directory: str = partition["directories"][partition["replicas"].index(broker)]
    return directory


def ready(cluster: Cluster, broker: int) -> bool:
    """The broker process says it is registered and unfenced (`/readyz`)."""
    process = cluster.brokers[broker].process
    if process is None or process.poll() is not None:
        return False
    return broker_ready(cluster.brokers[broker].url)


def read_back(kafka: KafkaCluster, topic: str) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of every partition, (offset, value), from offset 0 to the high watermark."""
    consumer = Consumer(kafka.client_config(**{"group.id": "unused", "enable.auto.commit": False}))
    try:
        ends = {}
        for p in range(PARTITIONS):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            assert low == 0, f"partition {p} starts at {low}"
            ends[p] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        records: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
        deadline = time.monotonic() + 120
        while any(records[p][-1][0] + 1 < ends[p] if records[p] else ends[p] for p in range(PARTITIONS)):
            assert time.monotonic() < deadline, (
                f"read {[len(records[p]) for p in range(PARTITIONS)]} of {ends} in 120 s"
            )
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            partition, offset, value = msg.partition(), msg.offset(), msg.value()
            assert partition is not None and offset is not None and value is not None, msg
            records[partition].append((offset, value))
        return records
    finally:
        consumer.close()


def ack_stalls(acked: list[Delivery], partition: int, *, longer_than: float) -> list[tuple[float, float]]:
    """(from, to) of every wait longer than `longer_than` seconds between two consecutive
    acknowledgements of `partition`, as the producer's delivery reports were served."""
    times = sorted(d.at for d in acked if d.partition == partition)
    return [(a, b) for a, b in itertools.pairwise(times) if b - a > longer_than]


def agent_log_errors(cluster: Cluster) -> dict[int, list[str]]:
    """Lines of each broker's log that show an unhandled exception."""
    found = {}
    for node, broker in sorted(cluster.brokers.items()):
        lines = broker.log_path.read_text(errors="replace").splitlines()
        marked = [i for i, line in enumerate(lines) if "Traceback" in line]
        if marked:
            found[node] = [line for i in marked for line in lines[max(i - 2, 0) : i + 25]]
    return found


class Timeline:
    """What the test did and saw, at which monotonic time."""

    def __init__(self) -> None:
        self.events: list[tuple[float, str]] = []

    def mark(self, what: str, *, at: float | None = None) -> float:
        when = time.monotonic() if at is None else at
        self.events.append((when, what))
        return when

    def show(self, origin: float) -> str:
        return "\n".join(f"  {at - origin:+7.2f}  {what}" for at, what in sorted(self.events))


@dataclass(frozen=True)
class DiskFailure:
    broker: int
    partitions: list[int]  # those whose replica on `broker` was in the failed dir
    at: float
    left_at: float  # when the controller showed no leadership or ISR place left in it


def fail_a_leader_disk(cluster: Cluster, topic: str, timeline: Timeline) -> DiskFailure:
    """Shut down the ext4 volume of partition 0's leader replica; return once the controller lists
    the dir offline and no leadership or ISR membership is left in it."""
    before = cluster.admin.describe_topic(topic)["partitions"]
    damaged = before[0]["leader"]
    failed_dir = replica_dir(before[0], damaged)
    index = next(i for i in (0, 1) if cluster.dir_id(damaged, i) == failed_dir)
    hosted = [
        p["partitionIndex"]
        for p in before
        if damaged in p["replicas"] and replica_dir(p, damaged) == failed_dir
    ]
    led = [i for i in hosted if before[i]["leader"] == damaged]
    at = timeline.mark(f"EIO on dir {index} of broker {damaged} (partitions {hosted}, leading {led})")
    cluster.mounts[(damaged, index)].shutdown()
    wait_for(
        lambda: failed_dir in cluster.admin.broker(damaged)["offlineLogDirs"],
        what=f"dir {index} of broker {damaged} offline",
    )
    timeline.mark("controller lists the dir offline")

    def left() -> bool:
        partitions = cluster.admin.describe_topic(topic)["partitions"]
        return all(
            partitions[i]["leader"] not in (damaged, -1) and damaged not in partitions[i]["isr"]
            for i in hosted
        )

    wait_for(left, what="leadership and ISRs to leave the failed dir")
    left_at = timeline.mark("leadership and ISRs left the failed dir")
    return DiskFailure(damaged, hosted, at, left_at)


def kill_and_restart_a_leader(
    cluster: Cluster, topic: str, *, spare: int, production: Production, timeline: Timeline
) -> int:
    """kill -9 the broker other than `spare` that leads most partitions and is no partition's only
    in-sync replica; once the controller fenced it and moved its leadership, and the producer got
    an acknowledgement after that, start it again (same dirs); return it once every partition has
    min.insync.replicas (2) in sync again."""
    now = cluster.admin.describe_topic(topic)["partitions"]
    candidates = [
        b
        for b in sorted(cluster.brokers)
        if b != spare and any(p["leader"] == b for p in now) and all(set(p["isr"]) - {b} for p in now)
    ]
    assert candidates, f"no broker to kill: {now}"
    killed = max(candidates, key=lambda b: sum(p["leader"] == b for p in now))
    led = [p["partitionIndex"] for p in now if p["leader"] == killed]
    below_min_isr = [p["partitionIndex"] for p in now if len(set(p["isr"]) - {killed}) < 2]
    timeline.mark(f"kill -9 broker {killed} (leading {led}; {below_min_isr} left with one ISR member)")
    cluster.brokers[killed].kill()
    wait_for(
        lambda: (
            cluster.admin.broker(killed)["fenced"]
            and all(p["leader"] != killed for p in cluster.admin.describe_topic(topic)["partitions"])
        ),
        what=f"broker {killed} fenced and its leadership moved",
    )
    moved_at = timeline.mark(f"controller fenced broker {killed} and moved its leadership")
    # The partitions left with two in-sync replicas take writes again without it.
    wait_for(
        lambda: production.partitions_acked_after(moved_at),
        what=f"an acknowledgement with broker {killed} down",
    )
    timeline.mark(f"producer got an acknowledgement with broker {killed} down")
    timeline.mark(f"broker {killed} started again")
    cluster.brokers[killed].start()
    wait_for(lambda: ready(cluster, killed), what=f"broker {killed} ready")
    timeline.mark(f"broker {killed} ready (registered, unfenced)")
    wait_for(
        lambda: all(len(p["isr"]) >= 2 for p in cluster.admin.describe_topic(topic)["partitions"]),
        timeout=60,
        what="every partition back to min.insync.replicas",
    )
    timeline.mark("every ISR back to 2 or more")
    return killed


@dataclass(frozen=True)
class Findings:
    """What reading the topic back showed against the delivery reports; all empty when correct."""

    not_dense: dict[int, int]  # partition -> first offset that breaks 0, 1, 2, ...
    out_of_order: dict[int, tuple[int, int]]  # partition -> first (sequence, sequence after it)
    strangers: dict[int, int]  # sequence -> the partition it was read in, not `sequence % PARTITIONS`
    duplicates: dict[int, int]  # sequence -> times stored
    misplaced: dict[tuple[int, int], int | None]  # acked (partition, offset) -> sequence found there
    unreported_stored: set[int]  # stored, but its delivery report was neither an ack nor an error
    failed_stored: set[int]  # stored although its delivery report was an error (allowed)

    @property
    def correct(self) -> bool:
        return not (
            self.not_dense
            or self.out_of_order
            or self.strangers
            or self.duplicates
            or self.misplaced
            or self.unreported_stored
        )


def verify(consumed: dict[int, list[tuple[int, bytes]]], acked: list[Delivery], failed: set[int]) -> Findings:
    stored: Counter[int] = Counter()
    at_offset: dict[tuple[int, int], int] = {}
    not_dense, out_of_order, strangers = {}, {}, {}
    for partition in range(PARTITIONS):
        records = consumed.get(partition, [])
        for expected, (offset, _value) in enumerate(records):
            if offset != expected:
                not_dense[partition] = offset
                break
        sequences = [sequence_of(value) for _offset, value in records]
        stored.update(sequences)
        at_offset.update(((partition, offset), s) for (offset, _v), s in zip(records, sequences, strict=True))
        for earlier, later in itertools.pairwise(sequences):
            if later <= earlier:
                out_of_order[partition] = (earlier, later)
                break
        strangers.update({s: partition for s in sequences if s % PARTITIONS != partition})
    acked_sequences = {d.sequence for d in acked}
    return Findings(
        not_dense=not_dense,
        out_of_order=out_of_order,
        strangers=strangers,
        duplicates={s: n for s, n in stored.items() if n > 1},
        misplaced={
            (d.partition, d.offset): at_offset.get((d.partition, d.offset))
            for d in acked
            if at_offset.get((d.partition, d.offset)) != d.sequence
        },
        unreported_stored=set(stored) - acked_sequences - failed,
        failed_stored=set(stored) & failed,
    )


def test_idempotent_producer_survives_a_failed_leader_disk_and_a_killed_broker(tmp_path: Path) -> None:
    with kafka_cluster_on_loop_disks(tmp_path) as kafka:
        cluster = kafka.cluster
        topic = new_topic(kafka, partitions=PARTITIONS)
        wait_for(lambda: cluster.placed(topic), what=f"placements of {topic}")
        wait_for(
            lambda: all(len(p["isr"]) == 3 for p in cluster.admin.describe_topic(topic)["partitions"]),
            what="full ISRs",
        )
        config = {
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": MESSAGE_TIMEOUT_MS,
        }
        production = Production(kafka.client_config(**config), topic)
        production.start()
        production.wait_acked(1500)
        timeline = Timeline()
        disk = fail_a_leader_disk(cluster, topic, timeline)
        # Before the next fault, the producer got through to every partition the disk held.
        wait_for(
            lambda: production.partitions_acked_after(disk.left_at) >= set(disk.partitions),
            what=f"acknowledgements on partitions {disk.partitions} after the disk failure",
        )
        timeline.mark(f"producer got acknowledgements on partitions {disk.partitions} again")
        kill_and_restart_a_leader(cluster, topic, spare=disk.broker, production=production, timeline=timeline)
        production.join(MESSAGE_TIMEOUT_MS / 1000 + 120)
        assert not production.is_alive(), "the producer is stuck"
        if production.crashed is not None:
            raise production.crashed
        read_at = timeline.mark("producer flushed; reading every partition back")
        consumed = read_back(kafka, topic)
        timeline.mark(f"read back {sum(len(r) for r in consumed.values())} records")
        acked, failed = production.acked, production.failed
        findings = verify(consumed, acked, set(failed))
        log_errors = agent_log_errors(cluster)
        final = cluster.admin.describe_topic(topic)["partitions"]

        # -- what happened (printed, never asserted) ----------------------------------------------
        timeline.mark("producer started", at=production.started_at)
        timeline.mark(f"producer handed its last record ({RECORDS}) to librdkafka", at=production.produced_at)
        if acked:
            timeline.mark("last acknowledgement", at=max(d.at for d in acked))
        eos = production.statistics.get("eos", {})
        partitions = production.statistics.get("topics", {}).get(topic, {}).get("partitions", {}).values()
        resent = sum(p["txmsgs"] - p["msgs"] for p in partitions if p["partition"] >= 0)
        print(
            f"\nacknowledged {len(acked)} of {RECORDS}, delivery errors {len(failed)} "
            f"{dict(Counter(str(e.code()) for e in failed.values()))}, unreported {production.unreported}; "
            f"records sent more than once {resent}; producer id {eos.get('producer_id')} "
            f"epoch {eos.get('producer_epoch')} (epoch bumps {eos.get('epoch_cnt')})"
        )
        codes = Counter(f"{e.code()} {e.str()}"[:100] for e in production.client_errors)
        print(f"client errors (error_cb): {dict(codes)}")
        print(f"timeline (s from the disk failure):\n{timeline.show(disk.at)}")
        print("acknowledgement stalls over 0.5 s, by partition (s from the disk failure):")
        for partition in range(PARTITIONS):
            stalls = ack_stalls(acked, partition, longer_than=0.5)
            shown = [f"{a - disk.at:+.2f} .. {b - disk.at:+.2f} ({b - a:.2f} s)" for a, b in stalls]
            print(f"  {topic}-{partition}: {', '.join(shown) or 'none'}")
        for p in final:
            print(f"  {topic}-{p['partitionIndex']}: leader {p['leader']} isr {p['isr']}")
        print(f"findings: {findings}")
        for node, lines in log_errors.items():
            print(f"broker {node} agent.log exceptions:\n  " + "\n  ".join(lines[:60]))
        print(f"from the disk failure to the read: {read_at - disk.at:.1f} s")

        # -- the checks ---------------------------------------------------------------------------
        assert production.unreported == 0, f"{production.unreported} records never got a delivery report"
        fatal = [e for e in production.client_errors if e.fatal()]
        assert not fatal, f"the idempotent producer hit a fatal error: {fatal}"
        assert len(acked) == len({d.sequence for d in acked}), "a record acknowledged twice"
        assert len(acked) + len(failed) == RECORDS
        assert findings.correct, findings
        assert not log_errors, f"unhandled exceptions in the brokers' logs: {sorted(log_errors)}"
