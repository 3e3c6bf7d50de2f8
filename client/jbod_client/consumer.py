"""An async consumer of one topic over the brokers' HTTP fetch API (`GET /v1/fetch`): fetches its
partitions from their leaders, in offset order. It is the driver of that API in tests and
benchmarks; jbodctl and the demo consume with a Kafka client (docs/decisions.md "jbodctl on Kafka
clients").

Guarantees:
* Never skips records: a partition's position moves only past records `poll` actually returned
  (to the offset after the last one), or — on OFFSET_OUT_OF_RANGE — to the log start offset when
  retention deleted the records at the position (logged as a warning), or down to the high
  watermark when the position is beyond the log's end (also logged).
* Records of one partition come back in strictly increasing offset order, each exactly once per
  consumer (anything at or below an already returned offset is dropped).
* Leader moves, offline dirs (56) and transport errors are retried from the same position after
  refreshing metadata, with a backoff (100 ms doubling up to 1 s); they never surface to callers.
  An unknown topic or partition, a bad token or a malformed request raises `ClientError`.
* At most one fetch per partition is in flight; fetches of all partitions run concurrently and
  stay in flight across `poll` calls, so one idle partition's long poll does not delay the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jbod_client.broker import describe_error
from jbod_client.controller import ApiError, ClientError
from jbod_client.metadata import ClusterMetadata, UnknownTopicError
from jbod_client.producer import backoff_ms
from jbod_core.errors import ErrorCode

log = logging.getLogger(__name__)

RETRY_BACKOFF_MS = 100
#: The longest long-poll a broker accepts on a fetch (it answers 400 above it).
MAX_WAIT_MS = 60_000
_RETRIABLE = frozenset({-1, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR})


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes


@dataclass(slots=True)
class _FetchResult:
    code: int
    reply: dict[str, Any] | None = None
    message: str = ""
    fatal: ClientError | None = None


@dataclass(slots=True)
class _Assignment:
    partition: int
    position: int | None  # None: "latest" not resolved yet
    initial_earliest: bool = False  # first fetch from 0 for "earliest": a reset is expected, not news
    task: asyncio.Task[_FetchResult] | None = None
    retry_at: float = 0.0
    failures: int = 0
    refresh: bool = False
    high_watermark: int | None = field(default=None)
    last_error: str | None = None  # why the latest fetch failed (None after a success)


def accept_records(
    records: Sequence[Mapping[str, Any]], position: int
) -> tuple[list[Mapping[str, Any]], int]:
    """The records to hand out from a fetch at `position` (strictly increasing offsets, none below
    the position) and the position after them."""
    accepted: list[Mapping[str, Any]] = []
    for record in records:
        offset = int(record["offset"])
        if offset < position:
            continue
        accepted.append(record)
        position = offset + 1
    return accepted, position


def out_of_range_position(
    position: int, *, log_start: int | None, high_watermark: int | None
) -> tuple[int | None, str]:
    """Where to go after OFFSET_OUT_OF_RANGE at `position`: (new position or None to retry, why)."""
    if log_start is not None and position < log_start:
        return log_start, "below the log start offset (deleted by retention)"
    if high_watermark is not None and position > high_watermark:
        return high_watermark, "beyond the high watermark"
    return None, "inside the range the broker reported"


class Consumer:
    """Read a topic; see the module docstring for what is guaranteed."""

    def __init__(  # noqa: PLR0913  the consumer's configs (Kafka's fetch.max.bytes, fetch.max.wait.ms, ...): one keyword each
        self,
        controller_url: str | None,
        *,
        token: str,
        topic: str,
        partitions: Sequence[int] | None = None,
        start: str | Mapping[int, int] = "earliest",
        max_bytes: int = 1 << 20,
        max_wait_ms: int = 500,
        bootstrap: Sequence[str] = (),
    ) -> None:
        if isinstance(start, str) and start not in ("earliest", "latest"):
            raise ValueError(f"start must be 'earliest', 'latest' or a mapping of offsets, got {start!r}")
        self.topic = topic
        self.max_bytes = max_bytes
        self.max_wait_ms = max(0, min(max_wait_ms, MAX_WAIT_MS))
        self.metadata = ClusterMetadata(controller_url, token=token, bootstrap=bootstrap)
        self._requested = list(partitions) if partitions is not None else None
        self._start = start
        self._assignments: dict[int, _Assignment] | None = None

    async def __aenter__(self) -> Consumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- public API ---------------------------------------------------------------------------

    def positions(self) -> dict[int, int]:
        """partition -> the offset of the next record to return (partitions not resolved yet omitted)."""
        if self._assignments is None:
            return {}
        return {p: a.position for p, a in self._assignments.items() if a.position is not None}

    def failing(self) -> dict[int, str]:
        """partition -> why its latest fetch failed, for partitions still being retried."""
        if self._assignments is None:
            return {}
        return {p: a.last_error for p, a in self._assignments.items() if a.last_error is not None}

    async def assignment(self) -> list[int]:
        """The partitions this consumer reads (loaded from the controller on first use)."""
        return sorted(await self._assign())

    async def poll(self, timeout: float = 1.0) -> list[ConsumedRecord]:
        """Records that arrived, waiting up to `timeout` seconds for at least one."""
        assignments = await self._assign()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout)
        while True:
            now = loop.time()
            for a in assignments.values():
                if a.task is None and a.retry_at <= now:
                    a.task = loop.create_task(self._fetch(a))
            in_flight = [a.task for a in assignments.values() if a.task is not None]
            wait = deadline - now
            waiting = [a.retry_at for a in assignments.values() if a.task is None]
            if waiting:
                wait = min(wait, min(waiting) - now)
            wait = max(0.0, wait)
            if in_flight:
                await asyncio.wait(in_flight, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
            else:
                await asyncio.sleep(wait)
            records = self._collect(assignments, loop.time())
            if records or loop.time() >= deadline:
                return records

    async def close(self) -> None:
        tasks = [a.task for a in (self._assignments or {}).values() if a.task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.metadata.aclose()

    # -- internals ----------------------------------------------------------------------------

    async def _assign(self) -> dict[int, _Assignment]:
        if self._assignments is not None:
            return self._assignments
        leaders = await self.metadata.partitions(self.topic)
        start = self._start
        if self._requested is not None:
            wanted = self._requested
        elif isinstance(start, Mapping):
            wanted = list(start)
        else:
            wanted = sorted(leaders)
        for p in wanted:
            if p not in leaders:
                raise UnknownTopicError(
                    self.topic,
                    f"topic {self.topic} has no partition {p} "
                    f"({describe_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)})",
                )
        assignments = {}
        for p in dict.fromkeys(wanted):
            if isinstance(start, Mapping) and p in start:
                assignments[p] = _Assignment(p, position=max(0, int(start[p])))
            elif start == "latest":
                assignments[p] = _Assignment(p, position=None)
            else:
                assignments[p] = _Assignment(p, position=0, initial_earliest=True)
        self._assignments = assignments
        return assignments

    async def _fetch(self, a: _Assignment) -> _FetchResult:  # noqa: PLR0911  one result per way a fetch ends (no leader, each error of the call, the code)
        """One fetch for a partition from its leader (or, for "latest", a probe for the high watermark)."""
        refresh, a.refresh = a.refresh, False
        try:
            leaders = await self.metadata.partitions(self.topic, refresh=refresh)
            leader = leaders.get(a.partition)
            if leader is None:
                raise UnknownTopicError(
                    self.topic, f"topic {self.topic} has no partition {a.partition} any more"
                )
            if leader < 0:
                return _FetchResult(-1, message=f"partition {self.topic}-{a.partition} has no leader")
            client = await self.metadata.broker(leader, refresh=refresh)
            if a.position is None:
                reply = await client.fetch(self.topic, a.partition, 0, max_bytes=1, max_wait_ms=0)
            else:
                reply = await client.fetch(
                    self.topic,
                    a.partition,
                    a.position,
                    max_bytes=self.max_bytes,
                    max_wait_ms=self.max_wait_ms,
                )
        except UnknownTopicError as exc:
            return _FetchResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, fatal=exc)
        except ApiError as exc:
            if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                return await self._check_unknown(a)
            return _FetchResult(exc.code, fatal=exc)
        except ClientError as exc:
            return _FetchResult(-1, message=str(exc))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            return _FetchResult(
                -1, fatal=ClientError(f"malformed fetch reply for {self.topic}-{a.partition}: {exc!r}")
            )
        code = int(reply.get("errorCode", 0))
        message = str(reply.get("errorMessage") or "")
        if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            return await self._check_unknown(a)
        if code not in (ErrorCode.NONE, ErrorCode.OFFSET_OUT_OF_RANGE) and code not in _RETRIABLE:
            return _FetchResult(
                code,
                fatal=ClientError(
                    f"cannot fetch {self.topic}-{a.partition}: {describe_error(code, message)}"
                ),
            )
        return _FetchResult(code, reply=reply, message=message)

    async def _check_unknown(self, a: _Assignment) -> _FetchResult:
        """A broker does not know the partition: fatal if the controller does not either, else the
        broker is behind on metadata (retry)."""
        try:
            leaders = await self.metadata.partitions(self.topic, refresh=True)
        except UnknownTopicError as exc:
            return _FetchResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, fatal=exc)
        except ClientError as exc:
            return _FetchResult(-1, message=str(exc))
        if a.partition not in leaders:
            return _FetchResult(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                fatal=UnknownTopicError(self.topic, f"topic {self.topic} has no partition {a.partition}"),
            )
        return _FetchResult(-1, message=f"leader of {self.topic}-{a.partition} does not know it yet")

    def _collect(self, assignments: dict[int, _Assignment], now: float) -> list[ConsumedRecord]:
        finished: list[tuple[_Assignment, _FetchResult]] = []
        for a in assignments.values():
            if a.task is not None and a.task.done():
                task, a.task = a.task, None
                finished.append((a, task.result()))
        for _a, result in finished:
            if result.fatal is not None:
                # Results of the other partitions are dropped unapplied: positions stay, no loss.
                raise result.fatal
        out: list[ConsumedRecord] = []
        for a, result in finished:
            out.extend(self._apply(a, result, now))
        return out

    def _apply(self, a: _Assignment, result: _FetchResult, now: float) -> list[ConsumedRecord]:
        """Move the partition's position for a non-fatal fetch result; never raises."""
        reply = result.reply or {}
        if result.code == ErrorCode.NONE:
            a.failures = 0
            a.last_error = None
            if "highWatermark" in reply:
                a.high_watermark = int(reply["highWatermark"])
            if a.position is None:  # "latest" resolved
                a.position = a.high_watermark if a.high_watermark is not None else 0
                return []
            a.initial_earliest = False
            accepted, a.position = accept_records(reply.get("records") or [], a.position)
            return [
                ConsumedRecord(self.topic, a.partition, int(r["offset"]), r["key"], r["value"])
                for r in accepted
            ]
        if result.code == ErrorCode.OFFSET_OUT_OF_RANGE:
            log_start = reply.get("logStartOffset")
            high = reply.get("highWatermark")
            if a.position is None:
                if high is not None:
                    a.position = int(high)
                    a.last_error = None
                    return []
            else:
                target, why = out_of_range_position(
                    a.position,
                    log_start=None if log_start is None else int(log_start),
                    high_watermark=None if high is None else int(high),
                )
                if target is not None:
                    if not a.initial_earliest:
                        log.warning(
                            "Reset position of %s-%d from %d to %d: %s",
                            self.topic,
                            a.partition,
                            a.position,
                            target,
                            why,
                        )
                    a.position = target
                    a.initial_earliest = False
                    a.failures = 0
                    a.last_error = None
                    return []
        a.last_error = describe_error(result.code, result.message)
        a.refresh = True
        a.retry_at = now + backoff_ms(a.failures, base_ms=RETRY_BACKOFF_MS) / 1000
        a.failures += 1
        if a.failures in (1, 10) or a.failures % 50 == 0:
            log.info(
                "Retrying fetch of %s-%d: %s",
                self.topic,
                a.partition,
                describe_error(result.code, result.message),
            )
        return []
