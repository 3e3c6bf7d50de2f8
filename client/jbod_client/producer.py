"""An async producer of the brokers' HTTP produce API (`POST /v1/produce`): batches records per
partition and delivers them to partition leaders. It is the driver of that API in tests and
benchmarks; jbodctl and the demo produce with a Kafka client (`jbod_client.rdkafka`, docs/decisions.md
"jbodctl on Kafka clients").

Guarantees:
* Nothing is lost silently: every `send` returns a future that resolves with the record's
  `RecordMetadata` once its batch is acknowledged, or fails with `ProduceError` (carrying the
  last errorCode, -1 for transport / timeout / no leader) once retrying is pointless or the
  delivery timeout has passed.
* Order per partition: at most one request per partition is in flight, and a batch is retried
  until it succeeds or fails before the next one is sent, so the acknowledged records of one
  partition have offsets in send order. Retries may duplicate records (no idempotence); every
  retry is counted in `retries` and announced to the `on_retry` hooks with
  `(topic, partition, errorCode)`.
* Throughput: partitions are delivered concurrently over pooled connections; records are base64
  encoded once, when sent, and a batch body is built once, however often it is retried.
* Memory is bounded: `send` waits while more than `buffer_bytes` of records are unacknowledged.
* Partitioner: the explicit partition, else crc32(key) mod partitions for keyed records, else a
  sticky partition that moves on round-robin whenever its batch is closed (the first one of a
  topic is drawn from `rng`).
* `send` fails at once (does not wait out the delivery timeout) when the topic is unknown or its
  metadata cannot be loaded the first time; later metadata failures are retried like any other.

The decisions (partitioner, batching, retry classification, backoff) are pure functions at the
top of this module, tested on their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import random
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from jbod_client import broker as broker_api
from jbod_client.controller import ApiError, ClientError
from jbod_client.metadata import ClusterMetadata, UnknownTopicError
from jbod_core.errors import ErrorCode

F = TypeVar("F")
log = logging.getLogger(__name__)

#: errorCode used for failures without one from a broker: transport errors, timeouts, no leader.
NO_CODE = -1
MAX_BACKOFF_MS = 1000
#: The longest `timeoutMs` a broker accepts on a produce (it answers 400 above it).
MAX_BROKER_TIMEOUT_MS = 300_000


# -- pure decisions --------------------------------------------------------------------------


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition of a keyed record: crc32(key) mod the number of partitions."""
    return zlib.crc32(key) % num_partitions


def next_sticky(current: int | None, num_partitions: int, *, current_has_room: bool, first: int = 0) -> int:
    """The sticky partition for the next keyless record: stay while its open batch has room,
    else move on round-robin (so keyless records fill one batch per partition in turn)."""
    if current is None or current >= num_partitions:
        return first % num_partitions
    if current_has_room:
        return current
    return (current + 1) % num_partitions


def choose_partition(
    *,
    key: bytes | None,
    explicit: int | None,
    num_partitions: int,
    sticky: int | None,
    sticky_has_room: bool,
) -> int:
    """Explicit partition, else crc32(key) for keyed records, else the sticky partition."""
    if explicit is not None:
        return explicit
    if key is not None:
        return partition_for_key(key, num_partitions)
    return next_sticky(sticky, num_partitions, current_has_room=sticky_has_room)


def record_size(key: bytes | None, value: bytes) -> int:
    """What a record counts against `batch_bytes` and `buffer_bytes`: its key and value bytes."""
    return len(value) + (len(key) if key is not None else 0)


class Outcome(enum.Enum):
    DONE = "done"
    RETRY = "retry"  # refresh metadata, back off, try again within the delivery timeout
    REFRESH_ONCE = "refresh-once"  # refresh metadata and try once more, then fail
    FAIL = "fail"


RETRIABLE_CODES = frozenset(
    {
        NO_CODE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.KAFKA_STORAGE_ERROR,
    }
)


def classify_error(code: int) -> Outcome:
    """What to do with a produce reply's errorCode (-1: transport error, timeout or no leader)."""
    if code == ErrorCode.NONE:
        return Outcome.DONE
    if code in RETRIABLE_CODES:
        return Outcome.RETRY
    if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        return Outcome.REFRESH_ONCE
    return Outcome.FAIL


def backoff_ms(retry: int, *, base_ms: int, max_ms: int = MAX_BACKOFF_MS) -> int:
    """The wait before retry number `retry` (0-based): base, doubling, capped at `max_ms`."""
    return min(max_ms, base_ms << min(retry, 30))


@dataclass(slots=True)
class Batch(Generic[F]):
    """Records of one partition sent in one request. `F` is what is resolved per record."""

    topic: str
    partition: int
    limit_bytes: int
    created: float  # when its first record was enqueued (the delivery timeout counts from here)
    records: list[dict[str, str | None]] = field(default_factory=list)
    futures: list[F] = field(default_factory=list)
    size_bytes: int = 0
    sealed: bool = False  # being sent (or done): takes no more records
    flush_requested: bool = False

    def has_room(self, size: int) -> bool:
        """Open and either empty or with room for `size` more bytes (an oversized record goes alone)."""
        return not self.sealed and (not self.records or self.size_bytes + size <= self.limit_bytes)

    @property
    def full(self) -> bool:
        return self.size_bytes >= self.limit_bytes

    def append(self, record: dict[str, str | None], size: int, future: F) -> None:
        self.records.append(record)
        self.futures.append(future)
        self.size_bytes += size


def append_record(  # noqa: PLR0913  the new batch's fields (topic, partition, limit_bytes, now) and the record's
    batches: deque[Batch[F]],
    *,
    topic: str,
    partition: int,
    record: dict[str, str | None],
    size: int,
    future: F,
    limit_bytes: int,
    now: float,
) -> tuple[Batch[F], bool]:
    """Add a record to the partition's last batch if it has room, else to a new batch.
    Returns the batch and whether it was created."""
    last = batches[-1] if batches else None
    if last is not None and last.has_room(size):
        last.append(record, size, future)
        return last, False
    batch: Batch[F] = Batch(topic=topic, partition=partition, limit_bytes=limit_bytes, created=now)
    batch.append(record, size, future)
    batches.append(batch)
    return batch, True


def keyless_partition(
    current: int | None, num_partitions: int, *, open_batch: Batch[Any] | None, size: int, first: int = 0
) -> int:
    """The partition of a keyless record of `size` bytes: the sticky `current` one while its open
    batch (the last one queued for it, if any) has room for the record, else the next one
    (`next_sticky`)."""
    has_room = open_batch is not None and open_batch.has_room(size)
    return next_sticky(current, num_partitions, current_has_room=has_room, first=first)


def ready_in(batch: Batch[Any], *, now: float, linger: float, has_successor: bool, closing: bool) -> float:
    """Seconds until a batch should be sent (<= 0: now). Sent when full, followed by another batch,
    flushed, the producer is closing, or `linger` seconds after its first record."""
    if batch.full or has_successor or batch.flush_requested or closing:
        return 0.0
    return batch.created + linger - now


# -- the producer ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    topic: str
    partition: int
    offset: int  # -1 when acks=0


class ProduceError(ClientError):
    """A record could not be delivered; `code` is the last errorCode (-1: transport / timeout)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(slots=True)
class _PartitionQueue:
    topic: str
    partition: int
    batches: deque[Batch[asyncio.Future[RecordMetadata]]] = field(default_factory=deque)
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    last_code: int = NO_CODE
    last_error: str = "not sent yet"


@dataclass(slots=True)
class _Attempt:
    code: int
    message: str
    base_offset: int = -1
    fatal: bool = False  # not worth retrying whatever the code says (auth, malformed, no route)


_FATAL_LOOKUP_CODES = frozenset({NO_CODE, ErrorCode.CLUSTER_AUTHORIZATION_FAILED})
_FATAL_PRODUCE_CODES = frozenset({NO_CODE, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, ErrorCode.INVALID_REQUEST})


def _failed_attempt(exc: ClientError, *, fatal_codes: frozenset[int]) -> _Attempt:
    """The attempt a failed call ends: an unknown topic or partition and a transport error are
    retried; an API error keeps its code, fatal when it is one of `fatal_codes`."""
    if isinstance(exc, UnknownTopicError):
        return _Attempt(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, str(exc))
    if isinstance(exc, ApiError):
        return _Attempt(exc.code, str(exc), fatal=exc.code in fatal_codes)
    return _Attempt(NO_CODE, str(exc))


class Producer:
    """Send records to topics; see the module docstring for what is guaranteed."""

    def __init__(  # noqa: PLR0913  Kafka's producer configs (acks, batch.size, linger.ms, ...): one keyword each
        self,
        controller_url: str | None,
        *,
        token: str,
        acks: int = -1,
        batch_bytes: int = 256 * 1024,
        linger_ms: float = 2.0,
        delivery_timeout_ms: int = 60_000,
        request_timeout_ms: int = 15_000,
        retry_backoff_ms: int = 100,
        buffer_bytes: int = 64 * 1024 * 1024,
        rng: random.Random | None = None,
        bootstrap: Sequence[str] = (),
    ) -> None:
        if acks not in (-1, 0, 1):
            raise ValueError(f"acks must be -1, 0 or 1, got {acks}")
        if batch_bytes < 1 or buffer_bytes < 1:
            raise ValueError("batch_bytes and buffer_bytes must be positive")
        self.acks = acks
        self.batch_bytes = batch_bytes
        self.linger = max(0.0, linger_ms / 1000)
        self.delivery_timeout = delivery_timeout_ms / 1000
        self.request_timeout_ms = max(1, min(request_timeout_ms, MAX_BROKER_TIMEOUT_MS))
        self.retry_backoff_ms = retry_backoff_ms
        self.buffer_bytes = buffer_bytes
        self.metadata = ClusterMetadata(controller_url, token=token, bootstrap=bootstrap)
        self.retries = 0
        self.on_retry: list[Callable[[str, int, int], None]] = []
        self._queues: dict[tuple[str, int], _PartitionQueue] = {}
        self._sticky: dict[str, int] = {}
        self._rng = rng or random.Random()
        self._buffered = 0
        self._space = asyncio.Event()
        self._closing = False
        self._closed = False

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- public API ---------------------------------------------------------------------------

    async def send(
        self, topic: str, value: bytes, *, key: bytes | None = None, partition: int | None = None
    ) -> asyncio.Future[RecordMetadata]:
        """Enqueue a record; the future resolves when its batch is acknowledged.

        Raises `ProduceError` at once (code 3) for an unknown topic or partition, and (code -1)
        when the topic's metadata cannot be loaded or the producer is closed."""
        if self._closing:
            raise ProduceError(NO_CODE, "the producer is closed")
        leaders = self.metadata.cached_partitions(topic)
        if leaders is None:
            leaders = await self._load_topic(topic)
        num_partitions = len(leaders)
        if partition is not None and partition not in leaders:
            raise ProduceError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"topic {topic} has no partition {partition} "
                f"({broker_api.describe_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)})",
            )
        size = record_size(key, value)
        while self._buffered > 0 and self._buffered + size > self.buffer_bytes:
            self._space.clear()
            await self._space.wait()
            if self._closing:
                raise ProduceError(NO_CODE, "the producer is closed")
        if partition is None and key is None:
            current = self._sticky.get(topic)
            sticky_queue = None if current is None else self._queues.get((topic, current))
            partition = keyless_partition(
                current,
                num_partitions,
                open_batch=sticky_queue.batches[-1] if sticky_queue and sticky_queue.batches else None,
                size=size,
                first=self._rng.randrange(num_partitions) if current is None else 0,
            )
            self._sticky[topic] = partition
        else:
            partition = choose_partition(
                key=key, explicit=partition, num_partitions=num_partitions, sticky=None, sticky_has_room=False
            )
        loop = asyncio.get_running_loop()
        future: asyncio.Future[RecordMetadata] = loop.create_future()
        queue = self._queues.get((topic, partition))
        if queue is None:
            queue = self._queues[(topic, partition)] = _PartitionQueue(topic, partition)
        batch, created = append_record(
            queue.batches,
            topic=topic,
            partition=partition,
            record=broker_api.encode_record(key, value),
            size=size,
            future=future,
            limit_bytes=self.batch_bytes,
            now=loop.time(),
        )
        self._buffered += size
        if queue.task is None:
            queue.task = loop.create_task(self._drain(queue))
        elif batch.full or (created and len(queue.batches) > 1):
            queue.wakeup.set()
        if batch.full:
            # Let the sender start the full batch's request before more records are queued.
            await asyncio.sleep(0)
        return future

    async def send_and_wait(
        self, topic: str, value: bytes, *, key: bytes | None = None, partition: int | None = None
    ) -> RecordMetadata:
        future = await self.send(topic, value, key=key, partition=partition)
        return await future

    async def flush(self) -> None:
        """Return once every record enqueued before the call is acknowledged or failed."""
        waiting: list[asyncio.Future[RecordMetadata]] = []
        for queue in self._queues.values():
            for batch in queue.batches:
                batch.flush_requested = True
                if batch.futures:
                    waiting.append(batch.futures[-1])
            if queue.batches:
                queue.wakeup.set()
        # Batches of a partition complete in order, so a batch's last future is the last one done.
        if waiting:
            await asyncio.wait(waiting)

    async def close(self) -> None:
        """Flush, then release connections. Further `send` calls raise `ProduceError`."""
        if self._closed:
            return
        self._closing = True
        self._space.set()
        try:
            await self.flush()
        finally:
            tasks = [q.task for q in self._queues.values() if q.task is not None]
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self._closed = True
            await self.metadata.aclose()

    # -- internals ----------------------------------------------------------------------------

    async def _load_topic(self, topic: str) -> dict[int, int]:
        try:
            return await self.metadata.partitions(topic)
        except UnknownTopicError as exc:
            raise ProduceError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, str(exc)) from exc
        except ApiError as exc:
            raise ProduceError(exc.code, f"cannot load metadata of topic {topic}: {exc}") from exc
        except ClientError as exc:
            raise ProduceError(NO_CODE, str(exc)) from exc

    async def _drain(self, queue: _PartitionQueue) -> None:
        """The partition's sender: one batch at a time, in order, until the queue is empty."""
        loop = asyncio.get_running_loop()
        try:
            while queue.batches:
                batch = queue.batches[0]
                delay = ready_in(
                    batch,
                    now=loop.time(),
                    linger=self.linger,
                    has_successor=len(queue.batches) > 1,
                    closing=self._closing,
                )
                if delay > 0:
                    queue.wakeup.clear()
                    timer = loop.call_later(delay, queue.wakeup.set)
                    try:
                        await queue.wakeup.wait()
                    finally:
                        timer.cancel()
                    continue
                batch.sealed = True
                try:
                    await self._deliver(queue, batch)
                except asyncio.CancelledError:
                    self._finish(batch, error=ProduceError(NO_CODE, "the producer was closed"))
                    raise
                except Exception as exc:  # a bug must fail the records, never strand them
                    self._finish(batch, error=ProduceError(NO_CODE, f"internal error: {exc!r}"))
                queue.batches.popleft()
        except asyncio.CancelledError:
            for batch in queue.batches:
                self._finish(batch, error=ProduceError(NO_CODE, "the producer was closed"))
            queue.batches.clear()
            raise
        finally:
            queue.task = None

    async def _deliver(self, queue: _PartitionQueue, batch: Batch[asyncio.Future[RecordMetadata]]) -> None:
        loop = asyncio.get_running_loop()
        name = f"{batch.topic}-{batch.partition}"
        deadline = batch.created + self.delivery_timeout
        refresh = False
        refreshed_unknown = False
        retry = 0
        attempts = 0
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                what = (
                    "expired in the queue" if attempts == 0 else f"not acknowledged after {attempts} attempts"
                )
                self._finish(
                    batch,
                    error=ProduceError(
                        queue.last_code,
                        f"cannot produce to {name}: {what} within the delivery timeout; last error "
                        f"{broker_api.describe_error(queue.last_code, queue.last_error)}",
                    ),
                )
                return
            attempt = await self._attempt(batch, remaining=remaining, refresh=refresh)
            attempts += 1
            if attempt.code == ErrorCode.NONE and not attempt.fatal:
                queue.last_code, queue.last_error = ErrorCode.NONE, ""
                self._finish(batch, base_offset=attempt.base_offset)
                return
            queue.last_code, queue.last_error = attempt.code, attempt.message
            outcome = Outcome.FAIL if attempt.fatal else classify_error(attempt.code)
            if outcome is Outcome.REFRESH_ONCE:
                outcome = Outcome.FAIL if refreshed_unknown else Outcome.RETRY
                refreshed_unknown = True
            if outcome is Outcome.FAIL:
                self._finish(
                    batch,
                    error=ProduceError(
                        attempt.code,
                        f"cannot produce to {name}: {broker_api.describe_error(attempt.code, attempt.message)}",
                    ),
                )
                return
            self.retries += 1
            log.debug(
                "Retrying produce to %s: %s", name, broker_api.describe_error(attempt.code, attempt.message)
            )
            for hook in self.on_retry:
                try:
                    hook(batch.topic, batch.partition, attempt.code)
                except Exception:  # a broken hook must not strand the records
                    log.exception("Retry hook %r failed for %s", hook, name)
            wait = backoff_ms(retry, base_ms=self.retry_backoff_ms) / 1000
            retry += 1
            refresh = True
            await asyncio.sleep(min(wait, max(0.0, deadline - loop.time())))

    async def _attempt(
        self, batch: Batch[asyncio.Future[RecordMetadata]], *, remaining: float, refresh: bool
    ) -> _Attempt:
        """One try: find the leader (refreshing metadata after an error), send, read the reply."""
        try:
            client = await self._leader(batch, refresh=refresh)
        except ClientError as exc:
            return _failed_attempt(exc, fatal_codes=_FATAL_LOOKUP_CODES)
        budget_ms = max(1, min(self.request_timeout_ms, int(remaining * 1000)))
        body = broker_api.produce_body(
            batch.topic,
            batch.partition,
            batch.records,
            acks=self.acks,
            timeout_ms=budget_ms if self.acks == -1 else None,
        )
        try:
            reply = await client.produce_raw(body, timeout=budget_ms / 1000 + 1.0)
        except ClientError as exc:
            # 4xx: 401 (token) and 400 (malformed) never get better; 404 + errorCode 3 might.
            return _failed_attempt(exc, fatal_codes=_FATAL_PRODUCE_CODES)
        try:
            code = int(reply.get("errorCode", 0))
            base_offset = int(reply.get("baseOffset", -1))
        except (TypeError, ValueError, AttributeError):
            return _Attempt(NO_CODE, f"broker at {client.url} sent a produce reply without errorCode")
        return _Attempt(code, str(reply.get("errorMessage") or ""), base_offset=base_offset)

    async def _leader(
        self, batch: Batch[asyncio.Future[RecordMetadata]], *, refresh: bool
    ) -> broker_api.BrokerClient:
        """The client of the batch's partition leader; `ClientError` when there is none."""
        leaders = await self.metadata.partitions(batch.topic, refresh=refresh)
        leader = leaders.get(batch.partition)
        if leader is None:
            raise UnknownTopicError(batch.topic, f"topic {batch.topic} has no partition {batch.partition}")
        if leader < 0:
            raise ClientError(f"partition {batch.topic}-{batch.partition} has no leader")
        return await self.metadata.broker(leader, refresh=refresh)

    def _finish(
        self,
        batch: Batch[asyncio.Future[RecordMetadata]],
        *,
        base_offset: int = -1,
        error: ProduceError | None = None,
    ) -> None:
        """Resolve (or fail) every future of the batch and give its bytes back to the buffer."""
        if batch.size_bytes:
            self._buffered -= batch.size_bytes
            batch.size_bytes = 0
            self._space.set()
        topic, partition = batch.topic, batch.partition
        for index, future in enumerate(batch.futures):
            if future.done():
                continue
            if error is not None:
                future.set_exception(error)
            else:
                offset = base_offset + index if base_offset >= 0 else -1
                future.set_result(RecordMetadata(topic, partition, offset))
