"""Exactly-once consume-transform-produce (librdkafka, confluent-kafka) through faults (issue 33):
the transaction coordinator's broker killed with kill -9, a partition leader's disk failing with
EIO, the `__transaction_state` leader's disk failing with EIO; and librdkafka's
`abort_transaction` after the partition leader of an open transaction was killed.

The scenario (`test_consume_transform_produce_through_coordinator_kill_and_disk_failures`):

* Three brokers with three loop-mounted ext4 log dirs each (a broker keeps a dir when two of its
  dirs fail); `__transaction_state` and `__consumer_offsets` have 3 partitions, RF 3, min ISR 2;
  the controller fences a silent broker after 3 s. Topics `faults-in` (3 partitions),
  `faults-out` (6) and `faults-probe` (6), RF 3.
* A feeder thread writes numbered records to `faults-in` (idempotent, paced) until the faults are
  over. A CTP thread (`Ctp`) runs librdkafka's exactly-once loop: a consumer in a group with
  read_committed, a transactional producer (their coordinators on two brokers: see `NAMES`); each
  transaction (an *attempt*, numbered) consumes a batch, writes `partition:offset:attempt` of each
  input record to `faults-out`, sends the consumer's positions to the transaction and commits.
  A retriable error retries the call; an abortable one aborts and rewinds the consumer to the
  group's committed offsets, as every `ABORT_EVERY`th attempt does by choice; a fatal one (or an
  unexpected one) replaces the producer (same transactional id, which fences and ends the old
  one's transaction) and rewinds.
* Faults, in turn, each waited on until the controller shows its effect and the CTP committed
  transactions after it:
  (a) a probe producer (transactional.id `abort-after-kill`) writes into a `faults-probe`
      partition led by the CTP's transaction coordinator's broker (not the group's coordinator:
      see `NAMES`), which is then killed with SIGKILL; once the controller fenced it and moved
      its leaderships the probe's `abort_transaction` succeeds; the broker is started again and
      every ISR fills up;
  (b) the disk of a `faults-in`/`faults-out` leader replica gets EIO (EXT4_IOC_SHUTDOWN);
  (c) the disk of the `__transaction_state` partition leader's replica gets EIO. (b) takes a dir
      of the broker (c) will hit when it can, so no partition loses two replicas;
  (d) a second producer with the CTP's transactional id fences the CTP's producer (a zombie's
      fate): the CTP's next call fails fatally and, once the second one is initialized, it
      replaces its producer.
* Then the feeder stops and the CTP drains the input. Checked with read_committed: every input
  record is in `faults-out` exactly once, no record of an aborted attempt is visible, the
  probe's records are not visible; the last stable offset reaches the high watermark on every
  partition (ListOffsets with isolation level 1 and 0: no transaction left hanging); the group's
  committed offsets are the input's end.

No broker may log a traceback. Printed (`pytest -s`), never asserted: the timeline, the longest
waits between two CTP commits, and the errors the CTP loop met.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

import e2e.wait
from jbod_core import group_records, txn_records
from tests.broker.conftest import Cluster, wait_for
from tests.fs import requires_root
from tests.kafka_api.conftest import KafkaCluster, start_kafka_cluster
from tests.kafka_api.test_failures import Timeline, agent_log_errors, ready, replica_dir

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.root,
    requires_root,
    pytest.mark.timeout(600),
]

IN, OUT, PROBE = "faults-in", "faults-out", "faults-probe"
PARTITIONS = {IN: 3, OUT: 6, PROBE: 6}
TXN_STATE, OFFSETS = txn_records.TRANSACTION_STATE_TOPIC, "__consumer_offsets"
INTERNAL_PARTITIONS = 3
#: The CTP's transactional id and group are `ctp-faults-<n>`, chosen (`coordinated_apart`) so that
#: their coordinators are on different brokers: killing the transaction coordinator's broker leaves
#: the group's coordinator alone. With its group coordinator's broker gone from the metadata,
#: librdkafka 2.16's send_offsets_to_transaction can block for good, past its timeout (librdkafka
#: issues 5456 and 5511, open; seen here once in ten runs).
NAMES = "ctp-faults"
PROBE_ID = "abort-after-kill"
DIRS = 3
SESSION_TIMEOUT_MS = 3000
BROKER_SETTINGS = {
    "broker_session_timeout_ms": str(SESSION_TIMEOUT_MS),
    "replica_lag_time_max_ms": "3000",
    "log_dir_failure_timeout_ms": "5000",
    "transaction_state_log_num_partitions": str(INTERNAL_PARTITIONS),
    "offsets_topic_num_partitions": str(INTERNAL_PARTITIONS),
}
FEED_PER_SECOND = 400
BATCH = 50
#: Transactions the CTP must commit after each fault before the next one.
COMMITS_AFTER_FAULT = 5
TIMEOUT = 30.0
#: Every this many attempts the CTP aborts instead of committing (and reads the batch again).
ABORT_EVERY = 7


class Feeder(threading.Thread):
    """An idempotent producer writing `in-<n>` to `IN` (round robin), `FEED_PER_SECOND`, until
    `stop` is set; then it flushes."""

    def __init__(self, kafka: KafkaCluster) -> None:
        super().__init__(name="feeder", daemon=True)
        self.kafka = kafka
        self.stop = threading.Event()
        self.sent = 0
        self.crashed: BaseException | None = None

    def run(self) -> None:
        try:
            producer = Producer(self.kafka.client_config(**{"enable.idempotence": True, "linger.ms": 5}))
            started = time.monotonic()
            while not self.stop.is_set():
                due = started + self.sent / FEED_PER_SECOND
                while (ahead := due - time.monotonic()) > 0:  # poll() returns early once it served a report
                    producer.poll(ahead)
                try:
                    producer.produce(IN, value=b"in-%d" % self.sent, partition=self.sent % PARTITIONS[IN])
                    self.sent += 1
                except BufferError:
                    producer.poll(0.1)
                producer.poll(0)
            while producer.flush(1.0):
                pass
        except BaseException as exc:
            self.crashed = exc
            raise


class Ctp(threading.Thread):
    """librdkafka's exactly-once consume-transform-produce loop (see the module docstring)."""

    def __init__(self, kafka: KafkaCluster, transactional_id: str, group: str) -> None:
        super().__init__(name="ctp", daemon=True)
        self.kafka = kafka
        self.transactional_id = transactional_id
        self.group = group
        self.committed: list[tuple[int, int, float]] = []  # (attempt, records, monotonic time)
        self.aborted: set[int] = set()
        self.unknown: set[int] = set()  # ended by replacing the producer
        self.errors: list[str] = []
        self.ends: dict[int, int] | None = None  # set once the input is complete: drain up to there
        self.offsets: dict[int, int] = {}  # input partition -> the offset the last commit committed
        self.done = threading.Event()  # set by the test: stop
        #: Cleared by the test while another producer of the transactional id starts: a fenced
        #: producer is replaced only once it is set again (two live instances of one transactional
        #: id fence each other's transactions in turn, as on Kafka).
        self.may_replace = threading.Event()
        self.may_replace.set()
        self.drained = threading.Event()  # the committed offsets reached `ends`
        self.crashed: BaseException | None = None

    def commits_after(self, moment: float) -> int:
        return sum(1 for _, _, at in list(self.committed) if at > moment)

    def _producer(self) -> Producer:
        producer = Producer(self.kafka.client_config(**{"transactional.id": self.transactional_id}))
        self._retry(lambda: producer.init_transactions(TIMEOUT), "init_transactions")
        return producer

    def _retry(self, call: Callable[[], Any], what: str) -> None:
        """`call` again while it fails with a retriable error."""
        while True:
            try:
                call()
                return
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                self.errors.append(f"{what}: {error}")
                if not error.retriable():
                    raise

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:
            self.crashed = exc
            raise

    def _run(self) -> None:
        consumer = Consumer(
            self.kafka.client_config(
                **{
                    "group.id": self.group,
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                    "auto.offset.reset": "earliest",
                }
            )
        )
        consumer.subscribe([IN])
        producer = self._producer()
        attempt = 0
        try:
            while not self.done.is_set():
                messages = [m for m in consumer.consume(BATCH, 1.0) if m.error() is None]
                if not messages:
                    if self._drained():
                        self.drained.set()
                    continue
                attempt += 1
                outcome = self._transaction(producer, consumer, messages, attempt)
                if outcome == "committed":
                    self.committed.append((attempt, len(messages), time.monotonic()))
                    continue
                if outcome == "aborted":
                    self.aborted.add(attempt)
                else:
                    self.unknown.add(attempt)
                    self.may_replace.wait()
                    producer = self._producer()
                self._rewind(consumer)
        finally:
            consumer.close()

    def _transaction(self, producer: Producer, consumer: Consumer, messages: list[Any], attempt: int) -> str:
        """One attempt: "committed", "aborted", or "fatal" (the producer must be replaced)."""
        try:
            producer.begin_transaction()
            for m in messages:
                producer.produce(OUT, value=b"%d:%d:%d" % (m.partition(), m.offset(), attempt))
            positions = consumer.position(consumer.assignment())
            metadata = consumer.consumer_group_metadata()
            self._retry(
                lambda: producer.send_offsets_to_transaction(positions, metadata, TIMEOUT),
                "send_offsets_to_transaction",
            )
            if attempt % ABORT_EVERY == 0:
                self._retry(lambda: producer.abort_transaction(TIMEOUT), "abort_transaction")
                return "aborted"
            self._retry(lambda: producer.commit_transaction(TIMEOUT), "commit_transaction")
            # A partition not read since a rewind has no position (-1001): librdkafka sends none.
            self.offsets.update({tp.partition: tp.offset for tp in positions if tp.offset >= 0})
            return "committed"
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            self.errors.append(f"attempt {attempt}: {error}")
            if error.txn_requires_abort():
                try:
                    self._retry(lambda: producer.abort_transaction(TIMEOUT), "abort_transaction")
                    return "aborted"
                except KafkaException as again:
                    self.errors.append(f"abort of attempt {attempt}: {again.args[0]}")
            return "fatal"

    def _drained(self) -> bool:
        ends = self.ends
        return ends is not None and all(self.offsets.get(p, -1) >= end for p, end in ends.items())

    def _rewind(self, consumer: Consumer) -> None:
        """Seek every assigned partition back to the group's committed offset, asked again while
        the group's coordinator moves (librdkafka does not retry `committed` on NOT_COORDINATOR)."""

        def committed() -> tuple[list[TopicPartition]]:
            try:
                return (consumer.committed(consumer.assignment(), TIMEOUT),)
            except KafkaException as exc:
                self.errors.append(f"rewind: {exc.args[0]}")
                raise

        [offsets] = e2e.wait.wait_for(  # it retries on an exception, the broker tests' does not
            committed, timeout=4 * TIMEOUT, what="the group's committed offsets", interval=0.1
        )
        for tp in offsets:
            offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            consumer.seek(TopicPartition(tp.topic, tp.partition, offset))


def partitions_of(cluster: Cluster, topic: str) -> list[dict[str, Any]]:
    described: list[dict[str, Any]] = cluster.admin.describe_topic(topic)["partitions"]
    return described


def txn_state_partition(cluster: Cluster, ctp: Ctp) -> dict[str, Any]:
    """The CTP's transactional id's partition of `__transaction_state`."""
    return partitions_of(cluster, TXN_STATE)[
        txn_records.partition_for(ctp.transactional_id, INTERNAL_PARTITIONS)
    ]


def coordinated_apart(kafka: KafkaCluster) -> tuple[str, str]:
    """A transactional id and a group whose coordinators (the leaders of their partitions of
    `__transaction_state` and `__consumer_offsets`, created here) are on different brokers."""
    warmup = Producer(kafka.client_config(**{"transactional.id": f"{NAMES}-warmup"}))
    warmup.init_transactions(TIMEOUT)
    consumer = Consumer(kafka.client_config(**{"group.id": f"{NAMES}-warmup"}))

    def fetched_offsets() -> bool:
        try:
            consumer.committed([TopicPartition(IN, 0)], TIMEOUT)
            return True
        except KafkaException as exc:  # NOT_COORDINATOR while the group's coordinator starts
            assert exc.args[0].code() == KafkaError.NOT_COORDINATOR, exc
            return False

    wait_for(fetched_offsets, what="an OffsetFetch (__consumer_offsets created)")
    consumer.close()
    cluster = kafka.cluster
    wait_for(
        lambda: all(len(p["isr"]) == 3 for p in every_partition(cluster).values()),
        what="the internal topics fully in sync",
    )
    txn_leaders = {p["partitionIndex"]: p["leader"] for p in partitions_of(cluster, TXN_STATE)}
    group_leaders = {p["partitionIndex"]: p["leader"] for p in partitions_of(cluster, OFFSETS)}
    t, g = next((t, g) for t in txn_leaders for g in group_leaders if txn_leaders[t] != group_leaders[g])
    names = [f"{NAMES}-{n}" for n in range(100)]
    transactional_id = next(n for n in names if txn_records.partition_for(n, INTERNAL_PARTITIONS) == t)
    group = next(n for n in names if group_records.partition_for(n, INTERNAL_PARTITIONS) == g)
    return transactional_id, group


def every_partition(cluster: Cluster) -> dict[tuple[str, int], dict[str, Any]]:
    return {
        (topic, p["partitionIndex"]): p
        for topic in (IN, OUT, PROBE, TXN_STATE, OFFSETS)
        for p in partitions_of(cluster, topic)
    }


def wait_until_dir_is_left(cluster: Cluster, broker: int, index: int, timeline: Timeline) -> None:
    """Shut down dir `index` of `broker`; return once the controller lists it offline and no
    partition has its leader or an ISR member in it."""
    failed = cluster.dir_id(broker, index)
    hosted = [
        key
        for key, p in every_partition(cluster).items()
        if broker in p["replicas"] and replica_dir(p, broker) == failed
    ]
    timeline.mark(f"EIO on dir {index} of broker {broker} (hosting {sorted(hosted)})")
    cluster.mounts[(broker, index)].shutdown()
    wait_for(
        lambda: failed in cluster.admin.broker(broker)["offlineLogDirs"],
        what=f"dir {index} of broker {broker} offline",
    )
    timeline.mark("controller lists the dir offline")

    def left() -> bool:
        now = every_partition(cluster)
        return all(now[key]["leader"] not in (broker, -1) and broker not in now[key]["isr"] for key in hosted)

    wait_for(left, timeout=60, what="leadership and ISRs to leave the failed dir")
    timeline.mark("leadership and ISRs left the failed dir")


def dir_index(cluster: Cluster, broker: int, dir_id: str) -> int:
    return next(i for i in range(DIRS) if cluster.dir_id(broker, i) == dir_id)


def kill_the_coordinator_under_an_open_probe_transaction(
    cluster: Cluster, kafka: KafkaCluster, ctp: Ctp, timeline: Timeline
) -> None:
    """Fault (a), with librdkafka's abort after the kill of its partition's leader."""
    killed = txn_state_partition(cluster, ctp)["leader"]
    group_coordinator = partitions_of(cluster, OFFSETS)[
        group_records.partition_for(ctp.group, INTERNAL_PARTITIONS)
    ]
    assert group_coordinator["leader"] != killed, (
        f"broker {killed} coordinates both the transactions and the group (see NAMES): {group_coordinator}"
    )
    led = [p["partitionIndex"] for p in partitions_of(cluster, PROBE) if p["leader"] == killed]
    assert led, f"broker {killed} leads no partition of {PROBE}: {partitions_of(cluster, PROBE)}"
    probe = Producer(kafka.client_config(**{"transactional.id": PROBE_ID}))
    probe.init_transactions(TIMEOUT)
    probe.begin_transaction()
    for i in range(20):
        probe.produce(PROBE, value=b"probe-%d" % i, partition=led[0])
    assert probe.flush(TIMEOUT) == 0
    at = timeline.mark(
        f"kill -9 broker {killed} (CTP coordinator; leads {PROBE}-{led[0]} of the open probe transaction)"
    )
    cluster.brokers[killed].kill()
    wait_for(
        lambda: (
            cluster.admin.broker(killed)["fenced"]
            and all(p["leader"] != killed for p in every_partition(cluster).values())
        ),
        what=f"broker {killed} fenced and its leadership moved",
    )
    timeline.mark(f"controller fenced broker {killed} and moved its leadership")
    while True:
        try:
            probe.abort_transaction(TIMEOUT)
            break
        except KafkaException as exc:
            assert exc.args[0].retriable(), f"abort_transaction after the kill: {exc.args[0]}"
    timeline.mark("probe transaction aborted")
    wait_for(
        lambda: ctp.commits_after(at) >= COMMITS_AFTER_FAULT, timeout=90, what="CTP commits after the kill"
    )
    timeline.mark(f"CTP committed {COMMITS_AFTER_FAULT} transactions with broker {killed} down")
    cluster.brokers[killed].start()
    wait_for(lambda: ready(cluster, killed), what=f"broker {killed} ready")
    wait_for(
        lambda: all(len(p["isr"]) == 3 for p in every_partition(cluster).values()),
        timeout=90,
        what="every ISR full again",
    )
    timeline.mark(f"broker {killed} back in every ISR")


def fail_disks(cluster: Cluster, ctp: Ctp, timeline: Timeline) -> None:
    """Faults (b) and (c). (b) takes, when it can, another dir of the broker that (c) hits, one
    leading a partition of `IN` or `OUT`; else a dir that shares no partition with (c)'s."""
    state = txn_state_partition(cluster, ctp)
    coordinator = state["leader"]
    coordinator_dir = replica_dir(state, coordinator)
    now = every_partition(cluster)
    leading: set[tuple[int, str]] = {
        (p["leader"], replica_dir(p, p["leader"])) for (topic, _), p in now.items() if topic in (IN, OUT)
    }
    hosted_by = {key: {(b, replica_dir(p, b)) for b in p["replicas"]} for key, p in now.items()}
    candidates = sorted(
        (broker != coordinator, broker, d)
        for broker, d in leading
        if (broker, d) != (coordinator, coordinator_dir)
        and (
            broker == coordinator
            or not any({(broker, d), (coordinator, coordinator_dir)} <= dirs for dirs in hosted_by.values())
        )
    )
    assert candidates, f"no dir to fail for (b) apart from the coordinator's {coordinator_dir}: {now}"
    _, broker, d = candidates[0]
    at = time.monotonic()
    wait_until_dir_is_left(cluster, broker, dir_index(cluster, broker, d), timeline)
    wait_for(lambda: ctp.commits_after(at) >= COMMITS_AFTER_FAULT, timeout=90, what="CTP commits after (b)")
    timeline.mark(f"CTP committed {COMMITS_AFTER_FAULT} transactions after (b)")

    state = txn_state_partition(cluster, ctp)
    coordinator = state["leader"]
    at = time.monotonic()
    wait_until_dir_is_left(
        cluster, coordinator, dir_index(cluster, coordinator, replica_dir(state, coordinator)), timeline
    )
    wait_for(lambda: ctp.commits_after(at) >= COMMITS_AFTER_FAULT, timeout=90, what="CTP commits after (c)")
    timeline.mark(f"CTP committed {COMMITS_AFTER_FAULT} transactions after (c)")


def fence_the_ctp_producer(kafka: KafkaCluster, ctp: Ctp, timeline: Timeline) -> None:
    """(d): a second producer with the CTP's transactional id (`init_transactions`) fences the
    CTP's producer, whose next call fails fatally: once that producer is initialized, the CTP
    replaces its own (fencing the second) and goes on."""
    at = timeline.mark("a new producer with the CTP's transactional id fences the CTP's")
    ctp.may_replace.clear()
    successor = Producer(kafka.client_config(**{"transactional.id": ctp.transactional_id}))
    successor.init_transactions(TIMEOUT)
    timeline.mark("the new producer is initialized: the CTP may replace its fenced producer")
    ctp.may_replace.set()
    wait_for(
        lambda: ctp.unknown and ctp.commits_after(at) >= COMMITS_AFTER_FAULT,
        timeout=90,
        what="the CTP to replace its fenced producer and commit again",
    )
    timeline.mark(f"CTP replaced its producer and committed {COMMITS_AFTER_FAULT} transactions")


def read_committed(kafka: KafkaCluster, topic: str) -> list[bytes]:
    """Every value of `topic` a read_committed consumer reads from the beginning to the end."""
    consumer = Consumer(
        kafka.client_config(
            **{
                "group.id": f"read-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
            }
        )
    )
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS[topic])])
        values: list[bytes] = []
        ended: set[int] = set()
        while len(ended) < PARTITIONS[topic]:
            message = consumer.poll(TIMEOUT)
            assert message is not None, (
                f"no end of {topic} partitions {set(range(PARTITIONS[topic])) - ended}"
            )
            if message.error() is not None:
                if message.error().code() == KafkaError._PARTITION_EOF:
                    ended.add(message.partition())
                    continue
                raise KafkaException(message.error())
            values.append(message.value())
        return values
    finally:
        consumer.close()


def end_offsets(admin: AdminClient, isolation: IsolationLevel) -> dict[tuple[str, int], int]:
    """ListOffsets latest of every partition of our topics, with `isolation`."""
    asked = {TopicPartition(t, p): OffsetSpec.latest() for t, n in PARTITIONS.items() for p in range(n)}
    found = admin.list_offsets(asked, isolation_level=isolation, request_timeout=TIMEOUT)
    return {(tp.topic, tp.partition): future.result().offset for tp, future in found.items()}


@contextlib.contextmanager
def running(thread: threading.Thread) -> Iterator[None]:
    thread.start()
    try:
        yield
    finally:
        if isinstance(thread, Ctp):
            thread.done.set()
            thread.may_replace.set()
        elif isinstance(thread, Feeder):
            thread.stop.set()
        thread.join(TIMEOUT)


def test_consume_transform_produce_through_coordinator_kill_and_disk_failures(tmp_path: Path) -> None:
    timeline = Timeline()
    with contextlib.ExitStack() as stack:
        kafka = start_kafka_cluster(
            stack,
            tmp_path,
            dirs=DIRS,
            loop=True,
            controller_args=["--broker-session-timeout-ms", str(SESSION_TIMEOUT_MS)],
            **BROKER_SETTINGS,  # type: ignore[arg-type]  # str settings, not `brokers` or `loop`
        )
        cluster = kafka.cluster
        for topic, count in PARTITIONS.items():
            cluster.create_placed_topic(topic, partitions=count, rf=3)
        admin = AdminClient(kafka.client_config())
        feeder, ctp = Feeder(kafka), Ctp(kafka, *coordinated_apart(kafka))
        with running(feeder), running(ctp):
            wait_for(lambda: len(ctp.committed) >= COMMITS_AFTER_FAULT, timeout=60, what="first CTP commits")
            origin = timeline.mark(f"CTP running ({ctp.transactional_id}, group {ctp.group})")
            kill_the_coordinator_under_an_open_probe_transaction(cluster, kafka, ctp, timeline)
            fail_disks(cluster, ctp, timeline)
            fence_the_ctp_producer(kafka, ctp, timeline)
            feeder.stop.set()
            feeder.join(60)
            assert feeder.crashed is None and not feeder.is_alive()
            consumer = Consumer(kafka.client_config(**{"group.id": f"read-{uuid.uuid4().hex[:8]}"}))
            ctp.ends = {
                p: consumer.get_watermark_offsets(TopicPartition(IN, p), TIMEOUT)[1]
                for p in range(PARTITIONS[IN])
            }
            consumer.close()
            timeline.mark(f"feeder stopped: {ctp.ends}")
            drained = ctp.drained.wait(120)
            timeline.mark(
                f"CTP drained the input: {len(ctp.committed)} committed, {len(ctp.aborted)} aborted, {len(ctp.unknown)} replaced"
            )
        print(f"timeline (s from the start):\n{timeline.show(origin)}")
        times = [at for _, _, at in ctp.committed]
        gaps = sorted(((b - a, a) for a, b in itertools.pairwise(times)), reverse=True)[:4]
        print(
            "longest waits between two CTP commits: "
            + ", ".join(f"{g:.2f} s at {a - origin:+.2f}" for g, a in gaps)
        )
        print(f"CTP errors ({len(ctp.errors)}): {dict(Counter(e.split(':')[0] for e in ctp.errors))}")
        for error, times in Counter(ctp.errors).most_common(20):
            print(f"  {times} x {error}")
        tracebacks = agent_log_errors(cluster)
        for node, lines in tracebacks.items():
            print(f"broker {node} logged tracebacks:\n" + "\n".join(lines[:60]))
        assert ctp.crashed is None, ctp.crashed
        assert tracebacks == {}, f"brokers {sorted(tracebacks)} logged tracebacks"
        assert drained, f"CTP did not drain {ctp.ends}: committed {ctp.offsets}"
        ends = ctp.ends
        assert ends is not None

        out = [tuple(int(x) for x in v.split(b":")) for v in read_committed(kafka, OUT)]
        seen = Counter((p, o) for p, o, _ in out)
        expected = {(p, o) for p, end in ends.items() for o in range(end)}
        assert {k: n for k, n in seen.items() if n > 1} == {}, "input records in the output twice"
        assert expected - set(seen) == set(), "input records missing from the output"
        assert set(seen) - expected == set(), "output records of no input record"
        attempts = Counter(a for _, _, a in out)
        assert set(attempts) & ctp.aborted == set(), "records of aborted attempts visible"
        assert {a: n for a, n, _ in ctp.committed if attempts[a] != n} == {}, "committed attempts not whole"
        assert read_committed(kafka, PROBE) == [], "the aborted probe transaction is visible"

        wait_for(
            lambda: (
                end_offsets(admin, IsolationLevel.READ_COMMITTED)
                == end_offsets(admin, IsolationLevel.READ_UNCOMMITTED)
            ),
            timeout=TIMEOUT,
            what="the last stable offset at the high watermark on every partition",
        )
        group = Consumer(kafka.client_config(**{"group.id": ctp.group}))
        try:
            committed = group.committed([TopicPartition(IN, p) for p in range(PARTITIONS[IN])], TIMEOUT)
        finally:
            group.close()
        assert {tp.partition: tp.offset for tp in committed} == ends
