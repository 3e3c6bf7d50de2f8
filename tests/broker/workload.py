"""A real producer / consumer workload for system tests, checked with `jbod_client.history`.

* `Workload` runs one `jbod_client.producer.Producer` in a background thread with its own event
  loop, sending `make_value(run, seq, size)` records round-robin over a topic's partitions at a
  bounded rate, while the test thread injects faults. Every send, acknowledgement and retry goes
  into a `History`: a retry of a partition marks every record of that partition not acknowledged
  at that moment as retried (the producer is not idempotent, so those may legitimately land twice).
* Every acknowledgement's time is kept (`ack_times`), so a test can tell how long production
  stalled around a fault (`longest_ack_gap`).
* `consume_all` reads a topic back with a real `jbod_client.consumer.Consumer` up to each
  partition's high watermark (taken from its leader once production has stopped), so the
  History check sees every record the cluster kept, acknowledged or not.
Records that finally fail (`ProduceError`) are simply never acknowledged.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from jbod_client.consumer import Consumer
from jbod_client.history import History, Report, make_value, record_id
from jbod_client.producer import ProduceError, Producer, RecordMetadata
from tests.broker.conftest import Cluster, wait_for

RecordId = tuple[str, int]


@dataclass
class Workload:
    """Produce to `topic` from a background thread until `stop()`; see the module docstring."""

    controller_url: str
    token: str
    topic: str
    partitions: int
    run: str
    history: History
    rate: float = 400.0  # records per second, all partitions together
    value_size: int = 200
    delivery_timeout_ms: int = 60_000
    request_timeout_ms: int = 5_000
    buffer_bytes: int = 1 << 20
    failed: int = 0
    acked_by_partition: Counter[int] = field(default_factory=Counter)
    ack_times: list[float] = field(default_factory=list)  # time.monotonic() of every acknowledgement
    retry_codes: Counter[int] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    _pending: dict[int, dict[RecordId, None]] = field(default_factory=dict)
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
        return (
            f"{self.topic}: sent={len(self.history.sent)} acked={self.acked} failed={self.failed} "
            f"retried={len(self.history.retried)} retry codes={dict(self.retry_codes)}"
            + (f" errors: {errors}" if errors else "")
        )

    def _check_alive(self) -> bool:
        if self._crash is not None:
            raise AssertionError(f"the producer of {self.topic} crashed: {self._crash!r}") from self._crash
        return True

    # -- producer thread ----------------------------------------------------------------------

    def _main(self) -> None:
        try:
            asyncio.run(self._produce())
        except BaseException as exc:  # surfaced to the test thread by stop() / wait_acked()
            self._crash = exc

    def _on_retry(self, topic: str, partition: int, code: int) -> None:
        self.retry_codes[code] += 1
        self.history.on_retry(list(self._pending.get(partition, {})))

    def _done(self, rid: RecordId, partition: int) -> Callable[[asyncio.Future[RecordMetadata]], None]:
        def callback(future: asyncio.Future[RecordMetadata]) -> None:
            self._pending.get(partition, {}).pop(rid, None)
            if future.cancelled():
                self.failed += 1
                return
            error = future.exception()
            if error is None:
                self.history.on_ack(rid, future.result().offset)
                self.acked_by_partition[partition] += 1
                self.ack_times.append(time.monotonic())
            else:
                self.failed += 1
                self.errors[str(error)[:160]] += 1

        return callback

    async def _produce(self) -> None:
        producer = Producer(
            self.controller_url,
            token=self.token,
            acks=-1,
            delivery_timeout_ms=self.delivery_timeout_ms,
            request_timeout_ms=self.request_timeout_ms,
            buffer_bytes=self.buffer_bytes,
        )
        producer.on_retry.append(self._on_retry)
        loop = asyncio.get_running_loop()
        tick = 0.02
        per_tick = max(1, round(self.rate * tick))
        sequence = 0
        next_tick = loop.time()
        try:
            while not self._stopping.is_set():
                for _ in range(per_tick):
                    partition = sequence % self.partitions
                    value = make_value(self.run, sequence, self.value_size)
                    rid = record_id(value)
                    assert rid is not None
                    sequence += 1
                    self.history.on_send(rid, self.topic, partition)
                    self._pending.setdefault(partition, {})[rid] = None
                    try:
                        future = await producer.send(self.topic, value, partition=partition)
                    except ProduceError as exc:
                        self._pending[partition].pop(rid, None)
                        self.failed += 1
                        self.errors[str(exc)[:160]] += 1
                        continue
                    future.add_done_callback(self._done(rid, partition))
                next_tick = max(next_tick + tick, loop.time() - 1.0)  # no catch-up burst after a stall
                # fixed wait: the producer's pace (`rate` records a second, in ticks), not a wait for an event
                await asyncio.sleep(max(0.0, next_tick - loop.time()))
        finally:
            await producer.close()
            await asyncio.sleep(0)  # let the last done-callbacks run


# -- reading back ---------------------------------------------------------------------------


def high_watermarks(cluster: Cluster, topic: str, *, timeout: float = 30.0) -> dict[int, int]:
    """Each partition's high watermark, asked of its current leader (retried across leader moves)."""
    out: dict[int, int] = {}

    def read_all() -> bool:
        description = cluster.admin.describe_topic(topic)
        for p in description["partitions"]:
            index, leader = p["partitionIndex"], p["leader"]
            if index in out:
                continue
            if leader < 0 or leader not in cluster.brokers:
                return False
            try:
                reply = httpx.get(
                    f"{cluster.brokers[leader].url}/v1/fetch",
                    params={"topic": topic, "partition": index, "offset": 0, "maxBytes": 1, "maxWaitMs": 0},
                    headers={"Authorization": f"Bearer {cluster.cluster_token}"},
                    timeout=5,
                )
            except httpx.HTTPError:
                return False
            if reply.status_code != 200 or reply.json().get("errorCode", 0) not in (0, 1):
                return False
            out[index] = int(reply.json()["highWatermark"])
        return True

    wait_for(read_all, timeout=timeout, what=f"high watermarks of {topic}")
    return out


async def _consume(
    controller_url: str, token: str, topic: str, until: dict[int, int], timeout: float
) -> list[tuple[str, int, int, bytes]]:
    consumed: list[tuple[str, int, int, bytes]] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    async with Consumer(
        controller_url, token=token, topic=topic, start="earliest", max_wait_ms=200
    ) as consumer:
        while True:
            positions = consumer.positions()
            if all(positions.get(p, 0) >= end for p, end in until.items()):
                return consumed
            if loop.time() > deadline:
                raise AssertionError(
                    f"consumed {len(consumed)} records of {topic} but stuck at {positions} < {until}; "
                    f"failing: {consumer.failing()}"
                )
            for record in await consumer.poll(0.5):
                consumed.append((record.topic, record.partition, record.offset, record.value))


def consume_all(
    cluster: Cluster, token: str, topic: str, *, timeout: float = 60.0
) -> list[tuple[str, int, int, bytes]]:
    """Every record of `topic` up to the high watermarks read now, via a real Consumer."""
    until = high_watermarks(cluster, topic)
    return asyncio.run(_consume(cluster.controller_urls, token, topic, until, timeout))


def check(cluster: Cluster, token: str, *workloads: Workload, timeout: float = 60.0) -> Report:
    """Read back every workload's topic and check the shared History; prints the summary."""
    history = workloads[0].history
    assert all(w.history is history for w in workloads)
    consumed: list[tuple[str, int, int, bytes]] = []
    started = time.monotonic()
    for topic in dict.fromkeys(w.topic for w in workloads):
        consumed.extend(consume_all(cluster, token, topic, timeout=timeout))
    report = history.check(consumed)
    for w in workloads:
        print(w.describe())
    print(f"history: {report.summary()} (read back in {time.monotonic() - started:.1f} s)")
    return report
