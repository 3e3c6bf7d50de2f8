"""A real producer / consumer workload for system tests, checked with `jbod_client.history`.

* `Workload` runs one confluent-kafka (librdkafka) producer in a background thread, idempotent
  with acks=all, sending `make_value(run, seq, size)` records round-robin over a topic's
  partitions at a bounded rate, while the test thread injects faults. Every send and
  acknowledgement (with its offset, from the delivery report) goes into a `History`. The producer
  is idempotent, so a batch it retries is never written twice: the History check counts every
  duplicate as a problem, retried or not (no record is marked retried).
* Every acknowledgement's time is kept (`ack_times`), so a test can tell how long production
  stalled around a fault (`longest_ack_gap`).
* `consume_all` reads a topic back with a confluent-kafka consumer (every partition assigned from
  its beginning) up to each partition's high watermark (asked of its leader with ListOffsets once
  production has stopped), so the History check sees every record the cluster kept,
  acknowledged or not.
Records that finally fail (their delivery report's error) are simply never acknowledged.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from jbod_client.history import History, Report, make_value, record_id
from tests.broker.conftest import Cluster, wait_for

RecordId = tuple[str, int]


@dataclass
class Workload:
    """Produce to `topic` from a background thread until `stop()`; see the module docstring."""

    cluster: Cluster
    topic: str
    partitions: int
    run: str
    history: History
    rate: float = 400.0  # records per second, all partitions together
    value_size: int = 200
    delivery_timeout_ms: int = 60_000
    request_timeout_ms: int = 5_000
    failed: int = 0
    acked_by_partition: Counter[int] = field(default_factory=Counter)
    ack_times: list[float] = field(default_factory=list)  # time.monotonic() of every acknowledgement
    errors: Counter[str] = field(default_factory=Counter)
    _fatal: list[Any] = field(default_factory=list)  # librdkafka's fatal errors
    _stopping: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _crash: BaseException | None = None

    # -- test-thread API ----------------------------------------------------------------------

    @property
    def acked(self) -> int:
        return len(self.history.acked)

    def start(self) -> Workload:
        self._thread = threading.Thread(target=self._main, name=f"producer-{self.run}", daemon=True)
        self._thread.start()
        return self

    def wait_acked(self, count: int, *, timeout: float = 30.0, what: str = "") -> int:
        """Wait until at least `count` records are acknowledged in all; returns the count."""
        try:
            acked: int = wait_for(
                lambda: self._check_alive() and self.acked >= count and self.acked,
                timeout=timeout,
                what=f"{count} acknowledged records of {self.topic} {what}".strip(),
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc} ({self.describe()})") from exc
        return acked

    def wait_progress(self, more: int, *, timeout: float = 30.0, what: str = "") -> int:
        """Wait until `more` records beyond those acknowledged now are acknowledged."""
        return self.wait_acked(self.acked + more, timeout=timeout, what=what)

    def wait_every_partition_progress(self, more: int, *, timeout: float = 30.0, what: str = "") -> None:
        """Wait until every partition has `more` records acknowledged beyond those acknowledged now."""
        goal = {p: self.acked_by_partition[p] + more for p in range(self.partitions)}
        try:
            wait_for(
                lambda: self._check_alive() and all(self.acked_by_partition[p] >= n for p, n in goal.items()),
                timeout=timeout,
                what=f"{more} more acknowledged records in every partition of {self.topic} {what}".strip(),
            )
        except AssertionError as exc:
            raise AssertionError(
                f"{exc} (per partition {dict(self.acked_by_partition)}, goal {goal}; {self.describe()})"
            ) from exc

    def longest_ack_gap(self, since: float, until: float) -> float:
        """The longest time within [since, until] (monotonic clock) in which nothing was acknowledged."""
        times = [since, *(t for t in list(self.ack_times) if since < t < until), until]
        return max(b - a for a, b in itertools.pairwise(times))

    def stop(self, *, timeout: float = 90.0) -> None:
        """Stop sending, wait until every record sent is acknowledged or failed."""
        self._stopping.set()
        assert self._thread is not None
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"the producer of {self.topic} did not finish in {timeout} s"
        if self._crash is not None:
            raise AssertionError(f"the producer of {self.topic} crashed: {self._crash!r}") from self._crash

    def describe(self) -> str:
        errors = "; ".join(f"{n}x {e}" for e, n in self.errors.most_common(3))
        return f"{self.topic}: sent={len(self.history.sent)} acked={self.acked} failed={self.failed}" + (
            f" errors: {errors}" if errors else ""
        )

    def _check_alive(self) -> bool:
        if self._crash is not None:
            raise AssertionError(f"the producer of {self.topic} crashed: {self._crash!r}") from self._crash
        return True

    # -- producer thread ----------------------------------------------------------------------

    def _main(self) -> None:
        try:
            self._produce()
        except BaseException as exc:  # surfaced to the test thread by stop() / wait_acked()
            self._crash = exc

    def _on_delivery(self, rid: RecordId, partition: int) -> Any:
        def report(err: Any, msg: Any) -> None:
            if err is None:
                self.history.on_ack(rid, msg.offset())
                self.acked_by_partition[partition] += 1
                self.ack_times.append(time.monotonic())
            else:
                self.history.on_failure(rid, err.code())
                self.failed += 1
                self.errors[str(err)[:160]] += 1

        return report

    def _on_error(self, err: Any) -> None:
        """librdkafka's client-level errors (a broker down, ...) are counted; a fatal one ends the
        run (`_produce` raises it)."""
        if err.fatal():
            self._fatal.append(err)
        self.errors[str(err)[:160]] += 1

    def _produce(self) -> None:
        producer = Producer(
            self.cluster.kafka_config(
                **{
                    "acks": "all",
                    "enable.idempotence": True,
                    "linger.ms": 5,
                    "message.timeout.ms": self.delivery_timeout_ms,
                    "request.timeout.ms": self.request_timeout_ms,
                    "error_cb": self._on_error,
                }
            )
        )
        tick = 0.02
        per_tick = max(1, round(self.rate * tick))
        sequence = 0
        next_tick = time.monotonic()
        try:
            while not self._stopping.is_set():
                for _ in range(per_tick):
                    partition = sequence % self.partitions
                    value = make_value(self.run, sequence, self.value_size)
                    rid = record_id(value)
                    assert rid is not None
                    sequence += 1
                    self.history.on_send(rid, self.topic, partition)
                    while True:
                        try:
                            producer.produce(
                                self.topic,
                                value,
                                partition=partition,
                                on_delivery=self._on_delivery(rid, partition),
                            )
                            break
                        except BufferError:  # librdkafka's queue is full: let reports drain it
                            producer.poll(0.05)
                if self._fatal:
                    raise KafkaException(self._fatal[0])
                next_tick = max(next_tick + tick, time.monotonic() - 1.0)  # no catch-up burst after a stall
                # The producer's pace (`rate` records a second, in ticks): delivery reports are
                # served until the next tick (`poll` returns early once it served one).
                while (ahead := next_tick - time.monotonic()) > 0:
                    producer.poll(ahead)
        finally:
            remaining = producer.flush(self.delivery_timeout_ms / 1000 + 10)
            if remaining:
                self.errors[f"{remaining} records neither acknowledged nor failed at the end"] += 1
        if self._fatal:
            raise KafkaException(self._fatal[0])


# -- reading back ---------------------------------------------------------------------------


def high_watermarks(cluster: Cluster, topic: str, *, timeout: float = 30.0) -> dict[int, int]:
    """Each partition's high watermark, asked of its current leader (ListOffsets, retried across
    leader moves)."""
    out: dict[int, int] = {}
    partitions = len(cluster.admin.describe_topic(topic)["partitions"])
    consumer = Consumer(cluster.kafka_config(**{"group.id": f"hw-{topic}", "enable.auto.commit": False}))

    def read_all() -> bool:
        for index in range(partitions):
            if index in out:
                continue
            try:
                _low, high = consumer.get_watermark_offsets(TopicPartition(topic, index), timeout=5)
            except KafkaException:
                return False
            out[index] = int(high)
        return True

    try:
        wait_for(read_all, timeout=timeout, what=f"high watermarks of {topic}")
    finally:
        consumer.close()
    return out


def consume_all(cluster: Cluster, topic: str, *, timeout: float = 60.0) -> list[tuple[str, int, int, bytes]]:
    """Every record of `topic` up to the high watermarks read now, with a confluent-kafka consumer."""
    until = high_watermarks(cluster, topic)
    consumed: list[tuple[str, int, int, bytes]] = []
    positions = dict.fromkeys(until, 0)
    consumer = Consumer(
        cluster.kafka_config(
            **{"group.id": f"check-{topic}", "enable.auto.commit": False, "fetch.wait.max.ms": 100}
        )
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in until])
    deadline = time.monotonic() + timeout
    try:
        while not all(positions[p] >= end for p, end in until.items()):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"consumed {len(consumed)} records of {topic} but stuck at {positions} < {until}"
                )
            for message in consumer.consume(1000, 0.5):
                assert message.error() is None, message.error()
                partition, offset = message.partition(), message.offset()
                consumed.append((topic, partition, offset, message.value()))
                positions[partition] = max(positions[partition], offset + 1)
    finally:
        consumer.close()
    return consumed


def check(cluster: Cluster, *workloads: Workload, timeout: float = 60.0) -> Report:
    """Read back every workload's topic and check the shared History; prints the summary."""
    history = workloads[0].history
    assert all(w.history is history for w in workloads)
    consumed: list[tuple[str, int, int, bytes]] = []
    started = time.monotonic()
    for topic in dict.fromkeys(w.topic for w in workloads):
        consumed.extend(consume_all(cluster, topic, timeout=timeout))
    report = history.check(consumed)
    for w in workloads:
        print(w.describe())
    print(f"history: {report.summary()} (read back in {time.monotonic() - started:.1f} s)")
    return report
