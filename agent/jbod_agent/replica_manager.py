"""The partitions this broker hosts: their logs, their roles, replication and client requests.

Guarantees:
* A partition is served only while its replica sits in an online dir: produce and fetch for a
  replica in an offline dir answer KAFKA_STORAGE_ERROR (56); replicas in healthy dirs keep being
  served. Any I/O error from a log goes through `DirFailures.io_error`, which takes the dir offline.
* Roles follow the metadata image: the broker leads a partition when the image names it leader,
  and follows the image's leader otherwise. A produce or a client fetch reaching a non-leader
  answers NOT_LEADER_OR_FOLLOWER (6).
* Leaders: produce acks=-1 is refused with 19 when the ISR is smaller than `min.insync.replicas`,
  and is answered only once the high watermark (the smallest end offset of the maximal ISR,
  `jbod_core.replication`) covers the records, else 7 after `timeoutMs`. Consumers only ever see
  records below the high watermark.
* ISR changes go through AlterPartition (§3.4): followers that have not caught up within
  `replica.lag.time.max.ms` are removed, followers that reached the high watermark are added.
  While a change is in flight the maximal ISR (old plus new) holds the high watermark.
* Topic configs are read through `jbod_core.topic_configs.resolve`: a value the broker cannot use
  (an old log may hold one) falls back to the broker's default with one WARNING naming the topic,
  the key and the value; it is never a storage error and never takes a dir offline.
* Followers truncate divergent history using leader epochs before appending (`fetcher.py`).
* Follower fetches use incremental fetch sessions (`jbod_core.fetch_session`, KIP-227): a
  session's idle partitions cost nothing per request. Every event that can change a follower's
  answer (an append, a high watermark or log start change, a leadership change, a removal, a
  log swap) marks the partition in each session holding it (`HostedPartition.fetch_sessions`),
  which wakes that session's long-poll; a request looks only at the partitions it lists, the
  marked ones and those whose follower is behind. A caught-up idle partition counts as fetched
  at every request of its session for the ISR lag rule (`replication.SessionClock`).
* `on_partition_change` hooks hear of every partition whose role, leader, epoch or log may have
  changed (a sync, a removal, a log swap): the fetchers' view of what to send.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from jbod_agent import divergence, producers
from jbod_agent.partition_log import OffsetOutOfRangeError, PartitionLog
from jbod_agent.placement import DirHealth
from jbod_agent.ports import ControllerCallError, DirFailures, PartitionAlterations
from jbod_agent.state import AgentState
from jbod_core import fetch_session, producer_state, replication, topic_configs
from jbod_core.broker_messages import ProduceCall, ReplicaFetchRequest
from jbod_core.errors import ErrorCode
from jbod_core.ids import Uuid, is_online
from jbod_core.image import PartitionKey, PartitionRegistration
from jbod_core.messages import (
    MAX_PARTITIONS_PER_REQUEST,
    AlterPartitionData,
    AlterPartitionRequest,
    AlterPartitionResult,
    AlterPartitionTopic,
)
from jbod_core.replication import FollowerProgress
from jbod_kafka import record_batch

log = logging.getLogger("jbod_agent.replicas")


class Role(Enum):
    LEADER = "leader"
    FOLLOWER = "follower"


@dataclass(eq=False)
class HostedPartition:
    key: PartitionKey
    topic: str
    directory_id: Uuid
    log: PartitionLog
    role: Role = Role.FOLLOWER
    leader_id: int = -1
    leader_epoch: int = -1
    partition_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    pending_isr: tuple[int, ...] | None = None
    followers: dict[int, FollowerProgress] = field(default_factory=dict)
    epoch_start_offset: int = 0
    min_isr: int = 1
    ack_waiters: list[tuple[int, asyncio.Future[ErrorCode]]] = field(default_factory=list)
    data_waiters: set[asyncio.Future[None]] = field(default_factory=set)
    # Follower sessions holding this partition (leaders only; created on first use: most hosted
    # partitions of a large broker are followers and never need one).
    fetch_sessions: set[fetch_session.LeaderSession[PartitionKey]] | None = None
    dirty: bool = False
    fetch_retry_at: float = 0.0
    # The idempotent producers' state (leaders only; loaded on first use, `producers.load`), and
    # whether it changed since its snapshot was last saved.
    producers: producer_state.ProducerState | None = None
    producers_changed: bool = False

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.key[1]}"

    def maximal_isr(self) -> tuple[int, ...]:
        if self.pending_isr is None:
            return self.isr
        return tuple(dict.fromkeys((*self.isr, *self.pending_isr)))

    def wake_data_waiters(self) -> None:
        """Something a fetch may want moved: wake client fetches, mark the follower sessions."""
        for waiter in self.data_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self.data_waiters.clear()
        if self.fetch_sessions:
            for session in self.fetch_sessions:
                session.mark(self.key)

    def fail_ack_waiters(self, code: ErrorCode) -> None:
        for _, waiter in self.ack_waiters:
            if not waiter.done():
                waiter.set_result(code)
        self.ack_waiters.clear()


@dataclass(eq=False, slots=True)
class _FetchState:
    """One partition of a follower's fetch, checked once per request (again if marked meanwhile)."""

    key: PartitionKey
    position: fetch_session.FetchPosition
    hosted: HostedPartition | None  # None: answered with `code`
    code: ErrorCode
    diverging: replication.DivergingEpoch | None


@dataclass(eq=False, slots=True)
class _Answer:
    """What the reply would say of one partition now."""

    entry: dict[str, Any]
    data: bytes
    news: bool  # data, an error or a divergence: ends the long-poll


def _now_ms() -> float:
    return time.monotonic() * 1000


def _wall_ms() -> int:
    """Wall-clock milliseconds: what batch timestamps and producer activity are measured in."""
    return time.time_ns() // 1_000_000


class ReplicaManager:
    def __init__(self, state: AgentState, *, failures: DirFailures, link: PartitionAlterations) -> None:
        self.state = state
        self.failures = failures
        self.link = link
        self.partitions: dict[PartitionKey, HostedPartition] = {}
        self.on_follow_change: list[Any] = []  # hooks: fetchers re-plan
        self.on_partition_change: list[Callable[[PartitionKey], None]] = []  # hooks: fetch sessions
        self.fetch_sessions: fetch_session.FetchSessionCache[PartitionKey] = fetch_session.FetchSessionCache(
            new_id=lambda: 1 + secrets.randbelow(2**31 - 1)
        )
        # Served follower fetches by kind (sessionless, full, incremental, rejected: 70 / 71) and
        # the partitions they listed: the metrics of `http_api`.
        self.replica_fetches = dict.fromkeys(("sessionless", "full", "incremental", "rejected"), 0)
        self.replica_fetch_partitions = dict.fromkeys(("sessionless", "full", "incremental"), 0)
        self.alter_now = asyncio.Event()
        self._warned_configs: set[tuple[Uuid, str, str]] = set()  # (topic id, key, value) logged once

    # -- roles ---------------------------------------------------------------------------------

    def topic_settings(self, topic_id: Uuid) -> topic_configs.ResolvedConfigs:
        """The topic's configs as this broker uses them: a bad value falls back to the broker's
        default with a WARNING (once per topic, key and value), never a storage error."""
        config = self.state.config
        topic = self.state.image.topics.get(topic_id)
        resolved = topic_configs.resolve(
            topic.configs if topic is not None else {},
            {
                topic_configs.MIN_INSYNC_REPLICAS: config.min_insync_replicas,
                topic_configs.RETENTION_BYTES: config.log_retention_bytes,
                topic_configs.RETENTION_MS: config.log_retention_ms,
                topic_configs.SEGMENT_BYTES: config.log_segment_bytes,
            },
        )
        for problem in resolved.problems:
            seen = (topic_id, problem.key, problem.value)
            if seen in self._warned_configs:
                continue
            self._warned_configs.add(seen)
            log.warning(
                "Ignored config %s=%r of topic %s: %s; using the broker's default %d",
                problem.key,
                problem.value,
                topic.name if topic is not None else topic_id,
                problem.reason,
                resolved[problem.key],
            )
        return resolved

    def open_log(self, path: Any, settings: topic_configs.ResolvedConfigs) -> PartitionLog:
        return PartitionLog.open(
            path,
            segment_bytes=settings[topic_configs.SEGMENT_BYTES],
            retention_bytes=settings[topic_configs.RETENTION_BYTES],
            retention_ms=settings[topic_configs.RETENTION_MS],
        )

    def sync(self, keys: Iterable[PartitionKey]) -> None:
        """Bring the roles of `keys` in line with the image and the local replicas."""
        state = self.state
        resolved: dict[Uuid, topic_configs.ResolvedConfigs] = {}
        changed_following = False
        for key in keys:
            local = state.local.get(key)
            part = state.image.partition(key)
            hosted = self.partitions.get(key)
            if local is None or part is None or state.node_id not in part.replicas:
                if hosted is not None:
                    self.remove(key, ErrorCode.NOT_LEADER_OR_FOLLOWER)
                    changed_following = True
                continue
            if hosted is not None and hosted.directory_id != local.directory_id:
                self.remove(key, ErrorCode.NOT_LEADER_OR_FOLLOWER)
                hosted = None
            settings = resolved.get(key[0])
            if settings is None:
                settings = resolved[key[0]] = self.topic_settings(key[0])
            if hosted is None:
                topic = state.image.topics[key[0]]
                try:
                    opened = self.open_log(local.path, settings)
                except OSError as exc:
                    self.failures.io_error(local.directory_id, exc, f"opening the log of {local.path.name}")
                    continue
                except ValueError as exc:
                    self.failures.fail_dir(
                        local.directory_id, f"the log of {local.path.name} is damaged: {exc}"
                    )
                    continue
                hosted = HostedPartition(key, topic.name, local.directory_id, opened)
                self.partitions[key] = hosted
            _apply_settings(hosted, settings)
            changed_following |= self._apply(hosted, part)
            self._changed(key)
        if changed_following:
            for hook in self.on_follow_change:
                hook()

    def _changed(self, key: PartitionKey) -> None:
        for hook in self.on_partition_change:
            hook(key)

    def _apply(self, hosted: HostedPartition, part: PartitionRegistration) -> bool:
        """Apply the image's view of the partition; True when the set of followed leaders moved."""
        me = self.state.node_id
        new_epoch = part.leader_epoch != hosted.leader_epoch
        hosted.replicas = part.replicas
        if part.partition_epoch >= hosted.partition_epoch:
            hosted.isr = part.isr
            hosted.partition_epoch = part.partition_epoch
            if hosted.pending_isr is not None and hosted.pending_isr == part.isr:
                hosted.pending_isr = None
        if part.leader == me:
            if hosted.role is not Role.LEADER or new_epoch:
                self._become_leader(hosted, part)
                return True
            self._update_high_watermark(hosted)
            return False
        was_following = (hosted.role, hosted.leader_id, hosted.leader_epoch)
        if hosted.role is Role.LEADER:
            hosted.fail_ack_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            hosted.wake_data_waiters()
            log.debug(
                "%s: no longer the leader (leader %d, epoch %d)", hosted.name, part.leader, part.leader_epoch
            )
        hosted.role = Role.FOLLOWER
        hosted.producers = None
        hosted.leader_id = part.leader
        hosted.leader_epoch = part.leader_epoch
        hosted.followers.clear()
        hosted.pending_isr = None
        hosted.fetch_retry_at = 0.0
        return was_following != (hosted.role, hosted.leader_id, hosted.leader_epoch)

    def _become_leader(self, hosted: HostedPartition, part: PartitionRegistration) -> None:
        now = _now_ms()
        hosted.producers = None  # rebuilt from the log (and its snapshot) on first use
        hosted.role = Role.LEADER
        hosted.leader_id = self.state.node_id
        hosted.leader_epoch = part.leader_epoch
        hosted.pending_isr = None
        hosted.epoch_start_offset = hosted.log.end_offset
        try:
            hosted.log.assign_epoch_start(part.leader_epoch)
        except OSError as exc:
            self.storage_error(hosted, exc, "recording the new leader epoch")
            return
        # Followers get the lag allowance from now on, as in Kafka.
        hosted.followers = {
            r: FollowerProgress(last_caught_up_ms=now) for r in part.replicas if r != self.state.node_id
        }
        hosted.wake_data_waiters()
        log.debug(
            "%s: now the leader at epoch %d (end offset %d, ISR %s)",
            hosted.name,
            part.leader_epoch,
            hosted.log.end_offset,
            list(part.isr),
        )
        self._update_high_watermark(hosted)

    def swap_log(self, key: PartitionKey, new_log: PartitionLog, directory: Uuid) -> None:
        """An intra-broker move finished: serve the partition from its new log, keeping its role."""
        hosted = self.partitions[key]
        hosted.log = new_log
        hosted.directory_id = directory
        hosted.dirty = False
        hosted.wake_data_waiters()
        self._changed(key)

    def remove(self, key: PartitionKey, code: ErrorCode) -> None:
        hosted = self.partitions.pop(key, None)
        if hosted is None:
            return
        hosted.fail_ack_waiters(code)
        hosted.wake_data_waiters()
        self._changed(key)
        with contextlib.suppress(OSError):
            hosted.log.close()

    def dir_failed(self, directory: Uuid) -> None:
        gone = [k for k, h in self.partitions.items() if h.directory_id == directory]
        for key in gone:
            self.remove(key, ErrorCode.KAFKA_STORAGE_ERROR)
        if gone:
            for hook in self.on_follow_change:
                hook()

    def close(self) -> None:
        for key in list(self.partitions):
            self.remove(key, ErrorCode.NOT_LEADER_OR_FOLLOWER)

    def storage_error(self, hosted: HostedPartition, exc: OSError, doing: str) -> None:
        """An I/O error on this partition's log: classified by `DirFailures`; an offline dir stops serving it."""
        self.failures.io_error(hosted.directory_id, exc, f"{doing} for {hosted.name}")
        if self.state.dirs[hosted.directory_id].health is not DirHealth.OFFLINE:
            # A full disk keeps its replicas: this request fails, the log is still served.
            return
        self.remove(hosted.key, ErrorCode.KAFKA_STORAGE_ERROR)

    # -- lookups -------------------------------------------------------------------------------

    def lookup(self, topic: str, partition: int) -> tuple[HostedPartition | None, ErrorCode, str]:
        state = self.state
        topic_id = state.image.topic_ids_by_name.get(topic)
        if topic_id is None:
            return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {topic!r}"
        key = (topic_id, partition)
        part = state.image.partition(key)
        if part is None:
            return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} has no partition {partition}"
        if key in state.offline_local:
            return None, ErrorCode.KAFKA_STORAGE_ERROR, f"{topic}-{partition} is in an offline log dir"
        hosted = self.partitions.get(key)
        if hosted is None or hosted.role is not Role.LEADER:
            if hosted is None and state.node_id in part.replicas and part.leader == state.node_id:
                directory = part.directory_of(state.node_id)
                if not directory.is_reserved and directory not in state.dirs:
                    return (
                        None,
                        ErrorCode.KAFKA_STORAGE_ERROR,
                        f"{topic}-{partition} is in an offline log dir",
                    )
            return (
                None,
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                (f"broker {state.node_id} is not the leader of {topic}-{partition} (leader {part.leader})"),
            )
        return hosted, ErrorCode.NONE, ""

    # -- produce -------------------------------------------------------------------------------

    async def produce(self, request: ProduceCall) -> dict[str, Any]:
        """The HTTP API's produce: `request.records` appended as one batch the leader builds."""
        hosted, code, message = self._admit(request.topic, request.partition, request.acks)
        if hosted is None:
            return _produce_error(code, message)
        if not request.records:
            return {"errorCode": 0, "baseOffset": hosted.log.end_offset}
        records, epoch = request.records, hosted.leader_epoch
        return await self._append_and_ack(
            hosted,
            lambda log_: log_.append_as_leader(records, leader_epoch=epoch),
            acks=request.acks,
            timeout_ms=request.timeout_ms,
        )

    async def produce_batch(
        self, topic: str, partition: int, batch: bytes, *, acks: int, timeout_ms: int
    ) -> dict[str, Any]:
        """The Kafka listener's produce: one client batch (`record_batch.check_produced`, raising
        `CorruptBatchError` before anything is written) appended as it came, stamped with its
        offset and the leader epoch. An idempotent producer's batch is first decided against the
        partition's producer state (`jbod_core.producer_state`): a duplicate of one of its last
        five batches is answered with the original offset and not written again; a sequence gap
        or a fenced epoch is refused with Kafka's code. The reply is the HTTP produce's shape."""
        header = record_batch.check_produced(batch)
        hosted, code, message = self._admit(topic, partition, acks)
        if hosted is None:
            return _produce_error(code, message)
        if header.producer_id >= 0:
            verdict = self._producer_verdict(hosted, header)
            if isinstance(verdict, producer_state.Refused):  # Kafka's codes 45, 47, 87: not ErrorCode's
                return {"errorCode": int(verdict.error), "errorMessage": verdict.message, "baseOffset": -1}
            if isinstance(verdict, producer_state.Duplicate):
                return await self._acknowledge(
                    hosted,
                    base=verdict.first_offset,
                    required=verdict.last_offset + 1,
                    acks=acks,
                    timeout_ms=timeout_ms,
                )
        epoch = hosted.leader_epoch

        def append(log_: PartitionLog) -> int:
            base = log_.append_as_leader_frame(batch, leader_epoch=epoch)
            if header.producer_id >= 0 and hosted.producers is not None:
                hosted.producers = producer_state.record(
                    hosted.producers, header, first_offset=base, now_ms=_wall_ms()
                )
                hosted.producers_changed = True
            return base

        return await self._append_and_ack(hosted, append, acks=acks, timeout_ms=timeout_ms)

    def _producer_verdict(
        self, hosted: HostedPartition, header: record_batch.BatchHeader
    ) -> producer_state.Verdict:
        """The producer state's decision on `header` (the state loaded from the log first if needed)."""
        if hosted.producers is None:
            hosted.producers = producers.load(hosted.log)
        return producer_state.check(hosted.producers, header)

    async def _append_and_ack(
        self,
        hosted: HostedPartition,
        append: Callable[[PartitionLog], int],
        *,
        acks: int,
        timeout_ms: int,
    ) -> dict[str, Any]:
        """`append` to the leader's log, then answer as `acks` asks (0: at once, 1: once
        written, -1: once the ISR has it)."""
        try:
            base = append(hosted.log)
        except OSError as exc:
            self.storage_error(hosted, exc, "appending")
            return _produce_error(
                ErrorCode.KAFKA_STORAGE_ERROR, f"{hosted.name}: the log dir failed while appending"
            )
        required = hosted.log.end_offset
        hosted.dirty = True
        hosted.wake_data_waiters()
        self._update_high_watermark(hosted)
        return await self._acknowledge(hosted, base=base, required=required, acks=acks, timeout_ms=timeout_ms)

    async def _acknowledge(
        self, hosted: HostedPartition, *, base: int, required: int, acks: int, timeout_ms: int
    ) -> dict[str, Any]:
        """The reply to records at [`base`, `required`) once `acks` is satisfied."""
        if acks == 0:
            return {"errorCode": 0, "baseOffset": -1}
        if acks == 1 or hosted.log.high_watermark >= required:  # acks=1, or the leader is the whole ISR
            return {"errorCode": 0, "baseOffset": base}
        return await self._await_isr(hosted, base=base, required=required, timeout_ms=timeout_ms)

    def _admit(self, topic: str, partition: int, acks: int) -> tuple[HostedPartition | None, ErrorCode, str]:
        """`lookup`, then the acks admission against the ISR and `min.insync.replicas`."""
        hosted, code, message = self.lookup(topic, partition)
        if hosted is None:
            return None, code, message
        admission = replication.produce_admission(acks, len(hosted.isr), hosted.min_isr)
        if admission is not ErrorCode.NONE:
            return (
                None,
                admission,
                f"{hosted.name}: ISR {list(hosted.isr)} is smaller than min.insync.replicas={hosted.min_isr}",
            )
        return hosted, ErrorCode.NONE, ""

    async def _await_isr(
        self, hosted: HostedPartition, *, base: int, required: int, timeout_ms: int
    ) -> dict[str, Any]:
        """The reply to an acks=-1 produce once the high watermark reaches `required` (or not)."""
        waiter: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        hosted.ack_waiters.append((required, waiter))
        try:
            outcome = await asyncio.wait_for(waiter, timeout_ms / 1000)
        except TimeoutError:
            with contextlib.suppress(ValueError):
                hosted.ack_waiters.remove((required, waiter))
            return _produce_error(
                ErrorCode.REQUEST_TIMED_OUT,
                f"{hosted.name}: not replicated to the ISR within {timeout_ms} ms",
            )
        if outcome is ErrorCode.NOT_ENOUGH_REPLICAS:
            return _produce_error(
                outcome,
                f"{hosted.name}: the ISR shrank below min.insync.replicas={hosted.min_isr} "
                "after the records were appended",
            )
        if outcome is not ErrorCode.NONE:
            return _produce_error(
                outcome, f"{hosted.name}: leadership or the log dir was lost before replication"
            )
        return {"errorCode": 0, "baseOffset": base}

    def _update_high_watermark(self, hosted: HostedPartition) -> None:
        if hosted.role is not Role.LEADER:
            return
        before = hosted.log.high_watermark
        after = replication.high_watermark(
            before, self.state.node_id, hosted.log.end_offset, hosted.maximal_isr(), hosted.followers
        )
        if after == before:
            return
        hosted.log.high_watermark = after
        hosted.wake_data_waiters()
        if hosted.ack_waiters:
            # As Kafka: a batch the HW covers while the ISR is below min.insync.replicas is not
            # acknowledged (NOT_ENOUGH_REPLICAS_AFTER_APPEND in Kafka; 19 in this contract).
            outcome = ErrorCode.NONE if len(hosted.isr) >= hosted.min_isr else ErrorCode.NOT_ENOUGH_REPLICAS
            still: list[tuple[int, asyncio.Future[ErrorCode]]] = []
            for required, waiter in hosted.ack_waiters:
                if required <= after:
                    if not waiter.done():
                        waiter.set_result(outcome)
                else:
                    still.append((required, waiter))
            hosted.ack_waiters = still

    # -- client fetch --------------------------------------------------------------------------

    async def fetch(
        self, topic: str, partition: int, offset: int, max_bytes: int, max_wait_ms: int
    ) -> dict[str, Any]:
        deadline = time.monotonic() + max_wait_ms / 1000
        while True:
            hosted, code, message = self.lookup(topic, partition)
            if hosted is None:
                return {"errorCode": int(code), "errorMessage": message, "highWatermark": -1, "records": []}
            log_ = hosted.log
            hw = log_.high_watermark
            if offset < log_.log_start_offset or offset > log_.end_offset:
                return {
                    "errorCode": int(ErrorCode.OFFSET_OUT_OF_RANGE),
                    "errorMessage": f"offset {offset} is outside [{log_.log_start_offset}, {log_.end_offset}]",
                    "highWatermark": hw,
                    "logStartOffset": log_.log_start_offset,
                    "records": [],
                }
            out: list[dict[str, Any]] = []
            if offset < hw:
                try:
                    data = log_.read(offset, max_bytes, max_offset=hw)
                except OffsetOutOfRangeError:
                    continue  # retention moved the start: answer again
                except OSError as exc:
                    self.storage_error(hosted, exc, "reading")
                    return {
                        "errorCode": int(ErrorCode.KAFKA_STORAGE_ERROR),
                        "errorMessage": f"{hosted.name}: reading failed: {exc.strerror or exc}",
                        "highWatermark": -1,
                        "records": [],
                    }
                out = _client_records(data, offset, hw, max_bytes)
            remaining = deadline - time.monotonic()
            if out or remaining <= 0:
                return {
                    "errorCode": 0,
                    "highWatermark": hw,
                    "logStartOffset": log_.log_start_offset,
                    "records": out,
                }
            await self._wait_for_data([hosted], remaining)

    async def wait_for_data(self, hosted: Iterable[HostedPartition], timeout: float) -> None:
        """Return when any of `hosted` has new data (or a moved log start), or after `timeout` s."""
        await self._wait_for_data(hosted, timeout)

    async def _wait_for_data(self, hosted: Iterable[HostedPartition], timeout: float) -> None:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        parts = list(hosted)
        for h in parts:
            h.data_waiters.add(waiter)
        try:
            await asyncio.wait_for(waiter, timeout)
        except TimeoutError:
            pass
        finally:
            for h in parts:
                h.data_waiters.discard(waiter)

    # -- replica fetch (leader side) -----------------------------------------------------------

    async def serve_replica_fetch(self, request: ReplicaFetchRequest) -> tuple[dict[str, Any], list[bytes]]:
        """Answer a follower: a JSON header (an entry per partition answered) plus the raw frames.

        Sessionless and full requests answer every listed partition; an incremental one looks at
        `LeaderSession.to_check` only and answers what changed (`jbod_core.fetch_session`). An
        unknown session or a wrong epoch answers the header errorCode 70 / 71 and nothing else.
        """
        now = _now_ms()
        replica = request.replica_id
        cache = self.fetch_sessions
        kind = {fetch_session.FINAL_EPOCH: "sessionless", fetch_session.INITIAL_EPOCH: "full"}.get(
            request.session_epoch, "incremental"
        )
        self.replica_fetches[kind] += 1
        self.replica_fetch_partitions[kind] += len(request.partitions)
        session: fetch_session.LeaderSession[PartitionKey] | None
        if request.session_epoch == fetch_session.FINAL_EPOCH:
            if request.session_id:
                self._close_session(cache.close(request.session_id, replica))
            session = None
        elif request.session_epoch == fetch_session.INITIAL_EPOCH:
            session, closed = cache.create(replica, now)
            for old in closed:
                self._close_session(old)
            if session is not None:
                log.debug("Opened fetch session %d for broker %d", session.session_id, replica)
        else:
            found = cache.lookup(request.session_id, request.session_epoch, replica, now)
            if isinstance(found, fetch_session.SessionError):
                self.replica_fetches["rejected"] += 1
                return {"errorCode": int(found), "sessionId": 0, "partitions": []}, []
            session = found
        if session is not None:
            return await self._serve_session(session, request, full=request.session_epoch <= 0, now=now)
        # Sessionless (a follower without sessions, or no slots): a session for this request only.
        once: fetch_session.LeaderSession[PartitionKey] = fetch_session.LeaderSession(
            fetch_session.INVALID_SESSION_ID, replica
        )
        try:
            return await self._serve_session(once, request, full=True, now=now, cached=False)
        finally:
            self._close_session(once)

    async def _serve_session(
        self,
        session: fetch_session.LeaderSession[PartitionKey],
        request: ReplicaFetchRequest,
        *,
        full: bool,
        now: float,
        cached: bool = True,
    ) -> tuple[dict[str, Any], list[bytes]]:
        replica = request.replica_id
        listed, gone = session.update(
            (
                (
                    (p.topic_id, p.partition),
                    fetch_session.FetchPosition(p.fetch_offset, p.last_fetched_epoch, p.current_leader_epoch),
                )
                for p in request.partitions
            ),
            ((f.topic_id, f.partition) for f in request.forgotten),
        )
        for key in gone:
            self._leave_session(session, key)
        keys = listed if full else session.to_check(listed)
        states = {key: self._check(session, key) for key in keys}
        self._record_progress(session, states.values(), replica, now=now, cached=cached)
        deadline = time.monotonic() + request.max_wait_ms / 1000
        answers: dict[PartitionKey, _Answer] = {}
        budget = request.max_bytes
        fresh = list(states)
        while True:
            news = False
            for key in fresh:
                answer = self._answer(request, states[key], budget)
                answers[key] = answer
                budget -= len(answer.data)
                news = news or answer.news
            remaining = deadline - time.monotonic()
            if news or remaining <= 0 or not session.partitions:
                break
            await self._wait_for_session(session, remaining)
            # Partitions marked while waiting (data, leadership, ...) are checked again.
            fresh = [key for key in session.take_dirty() if key in session.partitions]
            for key in fresh:
                states[key] = self._check(session, key)
        return self._reply(session, states, answers, full=full)

    def _record_progress(
        self,
        session: fetch_session.LeaderSession[PartitionKey],
        states: Iterable[_FetchState],
        replica: int,
        *,
        now: float,
        cached: bool,
    ) -> None:
        """Progress first: a fetch at offset N proves the follower holds everything below N."""
        clock = session.clock if cached else None
        expand = False
        for state in states:
            hosted = state.hosted
            if hosted is None:
                continue
            offset = state.position.fetch_offset
            if offset <= hosted.log.end_offset and state.diverging is None:
                progress = hosted.followers.setdefault(replica, FollowerProgress(last_caught_up_ms=now))
                progress.on_fetch(offset, hosted.log.end_offset, now, session=clock)
                self._update_high_watermark(hosted)
                if replica not in hosted.maximal_isr() and offset >= hosted.log.high_watermark:
                    expand = True
            else:
                behind = hosted.followers.get(replica)
                if behind is not None:
                    behind.detach()
        if clock is not None:
            # Every partition whose state moved was looked at above: the idle rest, attached to
            # the clock, were caught up at this request too.
            clock.last_fetch_ms = now
        session.take_dirty()  # marks from the progress above concern partitions answered below
        if expand:
            self.alter_now.set()

    def _check(self, session: fetch_session.LeaderSession[PartitionKey], key: PartitionKey) -> _FetchState:
        position = session.partitions[key].position
        replica = session.replica_id
        hosted = self.partitions.get(key)
        code = ErrorCode.NONE
        if key in self.state.offline_local:
            code = ErrorCode.KAFKA_STORAGE_ERROR
        elif self.state.image.partition(key) is None:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        elif hosted is None or hosted.role is not Role.LEADER:
            code = ErrorCode.NOT_LEADER_OR_FOLLOWER
        elif position.current_leader_epoch < hosted.leader_epoch:
            code = ErrorCode.FENCED_LEADER_EPOCH
        elif position.current_leader_epoch > hosted.leader_epoch or replica not in hosted.replicas:
            code = ErrorCode.NOT_LEADER_OR_FOLLOWER
        if code is not ErrorCode.NONE or hosted is None:
            return _FetchState(key, position, None, code, None)
        if not session.closed:
            if hosted.fetch_sessions is None:
                hosted.fetch_sessions = set()
            hosted.fetch_sessions.add(session)
        diverging = divergence.leader_check(
            hosted.log, fetch_offset=position.fetch_offset, last_fetched_epoch=position.last_fetched_epoch
        )
        return _FetchState(key, position, hosted, code, diverging)

    def _answer(self, request: ReplicaFetchRequest, state: _FetchState, budget: int) -> _Answer:
        p, hosted, code = state.position, state.hosted, state.code
        key = state.key
        entry: dict[str, Any] = {"topicId": str(key[0]), "partition": key[1], "errorCode": int(code)}
        entry["size"] = 0
        if hosted is None:
            return _Answer(entry, b"", code is not ErrorCode.NONE)
        log_ = hosted.log
        entry["highWatermark"] = log_.high_watermark
        entry["logStartOffset"] = log_.log_start_offset
        entry["endOffset"] = log_.end_offset
        diverging = state.diverging
        if diverging is not None:
            entry["divergingEpoch"] = {"epoch": diverging.epoch, "endOffset": diverging.end_offset}
            return _Answer(entry, b"", True)
        if p.fetch_offset < log_.log_start_offset or p.fetch_offset > log_.end_offset:
            entry["errorCode"] = int(ErrorCode.OFFSET_OUT_OF_RANGE)
            return _Answer(entry, b"", True)
        if p.fetch_offset == log_.end_offset or budget <= 0:
            return _Answer(entry, b"", False)
        data, error = self._read_for_follower(
            hosted, p.fetch_offset, min(request.partition_max_bytes, budget)
        )
        if error is not ErrorCode.NONE:
            entry["errorCode"] = int(error)
            return _Answer(entry, b"", True)
        entry["size"] = len(data)
        return _Answer(entry, data, bool(data))

    def _read_for_follower(
        self, hosted: HostedPartition, offset: int, max_bytes: int
    ) -> tuple[bytes, ErrorCode]:
        """(the batches from `offset`, NONE), or (nothing, the error): out of range or a failed dir."""
        try:
            return hosted.log.read(offset, max_bytes), ErrorCode.NONE
        except OffsetOutOfRangeError:
            return b"", ErrorCode.OFFSET_OUT_OF_RANGE
        except OSError as exc:
            self.storage_error(hosted, exc, "reading for a follower")
            return b"", ErrorCode.KAFKA_STORAGE_ERROR

    def _reply(
        self,
        session: fetch_session.LeaderSession[PartitionKey],
        states: dict[PartitionKey, _FetchState],
        answers: dict[PartitionKey, _Answer],
        *,
        full: bool,
    ) -> tuple[dict[str, Any], list[bytes]]:
        parts: list[dict[str, Any]] = []
        payload: list[bytes] = []
        for key, answer in answers.items():
            state = states[key]
            part = session.partitions.get(key)
            if part is None:
                continue
            entry = answer.entry
            code = entry["errorCode"]
            hosted = state.hosted
            if (
                code == ErrorCode.NONE
                and hosted is not None
                and state.diverging is None
                and state.position.fetch_offset < hosted.log.end_offset
            ):
                session.keep_checking(key)  # behind (or past the byte budget): look again next time
            high_watermark = entry.get("highWatermark", -1)
            log_start_offset = entry.get("logStartOffset", -1)
            if not part.answer_needed(
                full=full,
                has_data=bool(answer.data),
                error_code=code,
                diverging=state.diverging is not None,
                high_watermark=high_watermark,
                log_start_offset=log_start_offset,
            ):
                continue
            parts.append(entry)
            if answer.data:
                payload.append(answer.data)
            part.sent(high_watermark=high_watermark, log_start_offset=log_start_offset)
            if fetch_session.leaves_session(code):
                session.drop(key)
                self._leave_session(session, key)
        return {"errorCode": 0, "sessionId": session.session_id, "partitions": parts}, payload

    async def _wait_for_session(
        self, session: fetch_session.LeaderSession[PartitionKey], timeout: float
    ) -> None:
        if session.dirty:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not waiter.done():
                waiter.set_result(None)

        session.on_dirty = wake
        try:
            await asyncio.wait_for(waiter, timeout)
        except TimeoutError:
            pass
        finally:
            if session.on_dirty is wake:
                session.on_dirty = None

    def _leave_session(self, session: fetch_session.LeaderSession[PartitionKey], key: PartitionKey) -> None:
        """`key` left `session`: the partition stops marking it and stops counting its requests."""
        hosted = self.partitions.get(key)
        if hosted is None:
            return
        if hosted.fetch_sessions is not None:
            hosted.fetch_sessions.discard(session)
        progress = hosted.followers.get(session.replica_id)
        if progress is not None and progress.idle_in is session.clock:
            progress.detach()

    def _close_session(self, session: fetch_session.LeaderSession[PartitionKey] | None) -> None:
        if session is None:
            return
        session.closed = True
        for key in session.partitions:
            self._leave_session(session, key)
        if session.session_id != fetch_session.INVALID_SESSION_ID:
            log.debug("Closed fetch session %d of broker %d", session.session_id, session.replica_id)

    # -- ISR maintenance -----------------------------------------------------------------------

    def _eligible(self, hosted: HostedPartition) -> Any:
        image = self.state.image

        def check(broker_id: int) -> bool:
            reg = image.brokers.get(broker_id)
            part = image.partition(hosted.key)
            if reg is None or reg.fenced or reg.in_controlled_shutdown or part is None:
                return False
            return is_online(part.directory_of(broker_id), reg.log_dirs)

        return check

    def isr_changes(self) -> list[tuple[HostedPartition, tuple[int, ...]]]:
        """Partitions whose leader should ask for a new ISR now (none with a change in flight)."""
        now = _now_ms()
        lag = self.state.config.replica_lag_time_max_ms
        out: list[tuple[HostedPartition, tuple[int, ...]]] = []
        for hosted in self.partitions.values():
            if hosted.role is not Role.LEADER or hosted.pending_isr is not None:
                continue
            shrink = replication.isr_to_shrink(
                hosted.isr, self.state.node_id, hosted.followers, now_ms=now, lag_time_max_ms=lag
            )
            expand = replication.isr_to_expand(
                hosted.replicas,
                hosted.isr,
                hosted.followers,
                high_watermark=hosted.log.high_watermark,
                leader_epoch_start_offset=hosted.epoch_start_offset,
                eligible=self._eligible(hosted),
            )
            if not shrink and not expand:
                continue
            new_isr = tuple(
                r for r in hosted.replicas if (r in hosted.isr and r not in shrink) or r in expand
            )
            if self.state.node_id not in new_isr:
                continue
            out.append((hosted, new_isr))
        return out

    async def isr_forever(self) -> None:
        state = self.state
        # Kafka's isr-expiration period (lag / 2): a full scan; expansions are also triggered at
        # once by a follower's fetch (`alter_now`).
        period = state.config.replica_lag_time_max_ms / 2000
        while not state.stopping.is_set():
            self.alter_now.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.alter_now.wait(), period)
            if not state.registered:
                continue
            changes = self.isr_changes()
            for start in range(0, len(changes), MAX_PARTITIONS_PER_REQUEST):
                await self._alter(changes[start : start + MAX_PARTITIONS_PER_REQUEST])

    async def _alter(self, changes: list[tuple[HostedPartition, tuple[int, ...]]]) -> None:
        state = self.state
        by_topic: dict[Uuid, list[AlterPartitionData]] = {}
        for hosted, new_isr in changes:
            hosted.pending_isr = new_isr
            by_topic.setdefault(hosted.key[0], []).append(
                AlterPartitionData(
                    partition_index=hosted.key[1],
                    leader_epoch=hosted.leader_epoch,
                    partition_epoch=hosted.partition_epoch,
                    new_isr=list(new_isr),
                )
            )
            log.info("%s: asking for ISR %s (was %s)", hosted.name, list(new_isr), list(hosted.isr))
        request = AlterPartitionRequest(
            broker_id=state.node_id,
            broker_epoch=state.epoch,
            topics=[AlterPartitionTopic(topic_id=t, partitions=ps) for t, ps in by_topic.items()],
        )
        results: dict[PartitionKey, AlterPartitionResult] = {}
        try:
            reply = await self.link.alter_partition(request)
        except ControllerCallError as exc:
            log.warning("AlterPartition failed: %s", exc)
        else:
            if reply.error_code == 0:
                for topic in reply.topics:
                    for p in topic.partitions:
                        results[(topic.topic_id, p.partition_index)] = p
        for hosted, _new_isr in changes:
            hosted.pending_isr = None
            result = results.get(hosted.key)
            if result is None or self.partitions.get(hosted.key) is not hosted:
                continue
            if result.error_code != 0:
                log.info("%s: AlterPartition answered errorCode %s", hosted.name, result.error_code)
                continue
            if result.leader_epoch == hosted.leader_epoch and result.partition_epoch > hosted.partition_epoch:
                hosted.isr = tuple(result.isr)
                hosted.partition_epoch = result.partition_epoch
            self._update_high_watermark(hosted)

    # -- background upkeep ---------------------------------------------------------------------

    async def flush_forever(self) -> None:
        """fsync dirty logs periodically, off the event loop."""
        state = self.state
        period = state.config.log_flush_interval_ms / 1000
        while not state.stopping.is_set():
            await asyncio.sleep(period)
            dirty = [h for h in self.partitions.values() if h.dirty]
            for hosted in dirty:
                hosted.dirty = False
                self._save_producers(hosted)
                try:
                    await asyncio.to_thread(hosted.log.flush)
                except OSError as exc:
                    if self.partitions.get(hosted.key) is hosted:
                        self.storage_error(hosted, exc, "flushing")
                except ValueError:
                    pass  # closed meanwhile

    def _save_producers(self, hosted: HostedPartition) -> None:
        """Snapshot a leader's changed producer state before its log is flushed (derived data: a
        failure to write it only costs a longer rebuild, so it is logged, not fatal)."""
        if hosted.producers is None or not hosted.producers_changed:
            return
        hosted.producers_changed = False
        hosted.producers = producer_state.expire(
            hosted.producers,
            now_ms=_wall_ms(),
            producer_id_expiration_ms=self.state.config.producer_id_expiration_ms,
        )
        try:
            producers.save(hosted.log, hosted.producers)
        except (OSError, ValueError) as exc:
            log.warning("%s: failed saving the producer snapshot: %s", hosted.name, exc)

    async def retention_forever(self) -> None:
        state = self.state
        period = state.config.log_retention_check_interval_ms / 1000
        while not state.stopping.is_set():
            await asyncio.sleep(period)
            now_ms = int(time.time() * 1000)
            for hosted in list(self.partitions.values()):
                if self.partitions.get(hosted.key) is not hosted:
                    continue
                try:
                    deleted = hosted.log.apply_retention(now_ms)
                except OSError as exc:
                    self.storage_error(hosted, exc, "applying retention")
                    continue
                if deleted:
                    log.info("%s: retention deleted %d segment(s)", hosted.name, deleted)
                    hosted.wake_data_waiters()  # the log start offset moved


def _apply_settings(hosted: HostedPartition, settings: topic_configs.ResolvedConfigs) -> None:
    """The topic's configs as they are now (a change reaches open logs, not only new ones)."""
    hosted.min_isr = settings[topic_configs.MIN_INSYNC_REPLICAS]
    hosted.log.retention_bytes = settings[topic_configs.RETENTION_BYTES]
    hosted.log.retention_ms = settings[topic_configs.RETENTION_MS]
    hosted.log.segment_bytes = settings[topic_configs.SEGMENT_BYTES]


def _produce_error(code: ErrorCode, message: str) -> dict[str, Any]:
    return {"errorCode": int(code), "errorMessage": message, "baseOffset": -1}


def _client_records(data: bytes, offset: int, high_watermark: int, max_bytes: int) -> list[dict[str, Any]]:
    import base64

    out: list[dict[str, Any]] = []
    size = 0
    for header in record_batch.iter_headers(data, verify_crc=False):
        frame = memoryview(data)[header.position : header.position + header.size]
        for record in record_batch.decode_records(frame, verify_crc=False):
            if record.offset < offset or record.offset >= high_watermark:
                continue
            key, value = record.key, record.value or b""
            if out and size + len(value) > max_bytes:
                return out
            size += len(value) + (len(key) if key else 0)
            out.append(
                {
                    "offset": record.offset,
                    "key": None if key is None else base64.b64encode(key).decode("ascii"),
                    "value": base64.b64encode(value).decode("ascii"),
                }
            )
    return out
