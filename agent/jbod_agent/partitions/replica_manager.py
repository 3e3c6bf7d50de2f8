"""The partitions this broker hosts and their roles: the one owner of the hosted-partition set.

The data plane is split by job, each part working on this manager's `HostedPartition`s:
`produce` (appends and acknowledgements), `client_fetch` (consumers' fetches waiting for data),
`replica_fetch` (the leader side of the followers' fetch sessions), `isr_upkeep`
(AlterPartition), `log_upkeep` (flush, retention, producer snapshots); `fetcher` is the follower
side. This module decides which partitions are hosted and in which role.

Guarantees:
* One writer of the hosted set: only `ReplicaManager` adds, replaces or removes entries of
  `partitions` (`sync`, `remove`, `dir_failed`, `swap_log`); the other parts look partitions up
  and work on the `HostedPartition` they find, re-checking `partitions.get(key) is hosted` after
  an await. `HostedPartition`'s docstring says which part writes which of its fields.
* A partition is served only while its replica sits in an online dir: `lookup` answers
  KAFKA_STORAGE_ERROR (56) for a replica in an offline dir; replicas in healthy dirs keep being
  served. Any I/O error from a log goes through `storage_error` (`DirFailures.io_error`), which
  takes the dir offline and stops serving its partitions (a full dir keeps them).
* Roles follow the metadata image: the broker leads a partition when the image names it leader,
  and follows the image's leader otherwise. `lookup` answers NOT_LEADER_OR_FOLLOWER (6) for a
  partition it does not lead (with `any_replica`, only for one it does not hold). Losing leadership fails the waiting acks=-1 produces and
  DeleteRecords with 6; a removal fails them with the removal's code.
* A new leader records its epoch's start in the epoch cache before its first append, gives every
  follower the lag allowance from now (the injected clock), and recomputes the high watermark.
  Consumers only ever see records below the high watermark, which only a leader moves (the
  smallest end offset of the maximal ISR, `jbod_core.replication`, `advance_high_watermark`).
  A DeleteRecords waiting on a leader is answered once the low watermark (the smallest log start
  of the maximal ISR, `jbod_core.replication.low_watermark`) reaches its offset; it is looked at
  whenever a follower's fetch or an ISR change may have moved it (`complete_delayed_requests`).
* Topic configs are read through `jbod_core.topic_configs.resolve` over this broker's topic
  defaults (its broker configs under Kafka's names, static and dynamic): a value the broker cannot use
  (an old log may hold one) falls back to the broker's default with one WARNING naming the topic,
  the key and the value; it is never a storage error and never takes a dir offline.
* Every event that can change a fetch's answer (an append, a high watermark or log start change, a
  leadership change, a removal, a log swap) wakes the client fetches waiting on the partition and
  marks it in each follower session holding it (`HostedPartition.wake_data_waiters`).
* `on_partition_change` hooks hear of every partition whose role, leader, epoch or log may have
  changed (a sync, a removal, a log swap): the fetchers' view of what to send; `on_follow_change`
  hooks hear when the set of followed leaders may have moved.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from jbod_agent import dynamic_configs
from jbod_agent.placement import DirHealth
from jbod_agent.ports import Clock, DirFailures, monotonic_ms
from jbod_agent.state import AgentState
from jbod_agent.storage.partition_log import PartitionLog
from jbod_core import fetch_session, log_validator, replication, topic_configs
from jbod_core.errors import ErrorCode
from jbod_core.ids import Uuid
from jbod_core.image import PartitionKey, PartitionRegistration
from jbod_core.replication import FollowerProgress

log = logging.getLogger("jbod_agent.replicas")


class Role(Enum):
    LEADER = "leader"
    FOLLOWER = "follower"


@dataclass(eq=False, slots=True)
class AckWaiter:
    """A request waiting on the ISR (Kafka's delayed operations): an acks=-1 produce until the
    high watermark covers `required`, a DeleteRecords until the low watermark reaches it.
    `outcome` (and `reached`, the watermark that answered it) are set once, with `done`."""

    required: int
    done: asyncio.Event = field(default_factory=asyncio.Event)
    outcome: ErrorCode = ErrorCode.NONE
    reached: int = -1

    def settle(self, outcome: ErrorCode, reached: int = -1) -> None:
        if not self.done.is_set():
            self.outcome = outcome
            self.reached = reached
            self.done.set()


@dataclass(eq=False)
class HostedPartition:
    """One hosted replica: its log, its role and what its leader tracks.

    Writers, one per field group: the role, leader, epochs, replicas and settings are the
    manager's (from the image); `isr`, `partition_epoch` and `pending_isr` also `isr_upkeep`'s
    (AlterPartition answers, the in-flight change); `followers` the manager's (reset on a role
    change) and `replica_fetch`'s (their fetches); `fetch_sessions` `replica_fetch`'s;
    `ack_waiters` `produce`'s (waiters released by `advance_high_watermark`; the producers' state
    is the log's, expired and saved by `log_upkeep`); `delete_waiters` the DeleteRecords handler's
    (released by `complete_delayed_requests`); `data_waiters` `client_fetch`'s (released by
    `wake_data_waiters`); `dirty` is set by the appenders (`produce`, `fetcher`) and cleared by
    `log_upkeep` (and a log swap); `fetch_retry_at` is the fetcher's.
    """

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
    isr_in_flight: bool = False  # `isr_upkeep`'s AlterPartition for `pending_isr` is out
    isr_resend: bool = False  # that call failed: `isr_upkeep` asks for `pending_isr` again
    followers: dict[int, FollowerProgress] = field(default_factory=dict)
    epoch_start_offset: int = 0
    min_isr: int = 1
    max_message_bytes: int = 1_048_588
    log_append_time: bool = False  # the topic's message.timestamp.type is LogAppendTime
    compacted: bool = False  # the topic's cleanup.policy holds compact
    # The topic's compression.type (None: `producer`) and CreateTime window (None: LogAppendTime).
    stored_codec: log_validator.StoredCodec | None = None
    timestamp_bounds: log_validator.TimestampBounds | None = log_validator.DEFAULT_TIMESTAMP_BOUNDS
    ack_waiters: list[AckWaiter] = field(default_factory=list)
    delete_waiters: list[AckWaiter] = field(default_factory=list)
    data_waiters: set[asyncio.Event] = field(default_factory=set)
    # Follower sessions holding this partition (leaders only; created on first use: most hosted
    # partitions of a large broker are followers and never need one).
    fetch_sessions: set[fetch_session.LeaderSession[PartitionKey]] | None = None
    dirty: bool = False
    fetch_retry_at: float = 0.0  # the fetcher's clock (monotonic seconds)

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
            waiter.set()
        self.data_waiters.clear()
        if self.fetch_sessions:
            for session in self.fetch_sessions:
                session.mark(self.key)

    def fail_waiters(self, code: ErrorCode) -> None:
        """Leadership or the log is lost: every waiting produce and DeleteRecords gets `code`."""
        for waiter in (*self.ack_waiters, *self.delete_waiters):
            waiter.settle(code)
        self.ack_waiters.clear()
        self.delete_waiters.clear()

    def low_watermark(self) -> int:
        """Leaders: the smallest log start offset of the maximal ISR (`jbod_core.replication`)."""
        return replication.low_watermark(
            self.leader_id, self.log.log_start_offset, self.maximal_isr(), self.followers
        )

    def complete_delayed_requests(self) -> None:
        """A follower's fetch or an ISR change: move the high watermark (answering the acks=-1
        produces it covers) and answer the DeleteRecords the low watermark now reaches."""
        self.advance_high_watermark()
        if not self.delete_waiters or self.role is not Role.LEADER:
            return
        low = self.low_watermark()
        still: list[AckWaiter] = []
        for waiter in self.delete_waiters:
            if waiter.required <= low:
                waiter.settle(ErrorCode.NONE, low)
            else:
                still.append(waiter)
        self.delete_waiters = still

    def advance_high_watermark(self) -> None:
        """Leaders: move the high watermark to what the maximal ISR holds (`jbod_core.replication`),
        wake the fetches and answer the acks=-1 produces it now covers."""
        if self.role is not Role.LEADER:
            return
        before = self.log.high_watermark
        after = replication.high_watermark(
            before, self.leader_id, self.log.end_offset, self.maximal_isr(), self.followers
        )
        if after == before:
            return
        self.log.high_watermark = after
        self.wake_data_waiters()
        if self.ack_waiters:
            # As Kafka: a batch the HW covers while the ISR is below min.insync.replicas is not
            # acknowledged.
            outcome = (
                ErrorCode.NONE
                if len(self.isr) >= self.min_isr
                else ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            )
            still: list[AckWaiter] = []
            for waiter in self.ack_waiters:
                if waiter.required <= after:
                    waiter.settle(outcome)
                else:
                    still.append(waiter)
            self.ack_waiters = still


class ReplicaManager:
    """The hosted partitions and their roles (see the module docstring)."""

    def __init__(self, state: AgentState, *, failures: DirFailures, clock: Clock) -> None:
        self.state = state
        self.failures = failures
        self.clock = clock
        self.partitions: dict[PartitionKey, HostedPartition] = {}
        self.on_follow_change: list[Callable[[], None]] = []  # hooks: fetchers re-plan
        self.on_partition_change: list[Callable[[PartitionKey], None]] = []  # hooks: fetch sessions
        self._warned_configs: set[tuple[Uuid, str, str]] = set()  # (topic id, key, value) logged once

    # -- roles ---------------------------------------------------------------------------------

    def topic_settings(self, topic_id: Uuid) -> topic_configs.ResolvedConfigs:
        """The topic's configs as this broker uses them: a bad value falls back to the broker's
        default with a WARNING (once per topic, key and value), never a storage error."""
        topic = self.state.image.topics.get(topic_id)
        resolved = topic_configs.resolve(
            topic.configs if topic is not None else {},
            dynamic_configs.topic_defaults(self.state.config, self.state.image),
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
            monotonic=self.clock.monotonic,
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
        if hosted.replicas != part.replicas:
            for gone in [r for r in hosted.followers if r not in part.replicas]:
                del hosted.followers[gone]  # reassigned away: its progress no longer counts
        hosted.replicas = part.replicas
        if part.partition_epoch >= hosted.partition_epoch:
            newer = part.partition_epoch > hosted.partition_epoch
            hosted.isr = part.isr
            hosted.partition_epoch = part.partition_epoch
            if hosted.pending_isr is not None and (
                hosted.pending_isr == part.isr or (newer and not hosted.isr_in_flight)
            ):
                # The image shows what the controller committed (a pending change answered with
                # another leader epoch or an error is settled here, as Kafka's metadata update
                # ends its pending ISR state); one still in flight is settled by its answer.
                hosted.pending_isr = None
                hosted.isr_resend = False
        if part.leader == me:
            if hosted.role is not Role.LEADER or new_epoch:
                self._become_leader(hosted, part)
                return True
            hosted.complete_delayed_requests()
            return False
        was_following = (hosted.role, hosted.leader_id, hosted.leader_epoch)
        if hosted.role is Role.LEADER:
            hosted.fail_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            hosted.wake_data_waiters()
            log.debug(
                "%s: no longer the leader (leader %d, epoch %d)", hosted.name, part.leader, part.leader_epoch
            )
        hosted.role = Role.FOLLOWER
        hosted.leader_id = part.leader
        hosted.leader_epoch = part.leader_epoch
        hosted.followers.clear()
        hosted.pending_isr = None
        hosted.isr_resend = False
        hosted.fetch_retry_at = 0.0
        return was_following != (hosted.role, hosted.leader_id, hosted.leader_epoch)

    def _become_leader(self, hosted: HostedPartition, part: PartitionRegistration) -> None:
        now = monotonic_ms(self.clock)
        hosted.role = Role.LEADER
        hosted.leader_id = self.state.node_id
        hosted.leader_epoch = part.leader_epoch
        hosted.pending_isr = None
        hosted.isr_resend = False
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
        hosted.advance_high_watermark()

    def swap_log(self, key: PartitionKey, new_log: PartitionLog, directory: Uuid) -> None:
        """An intra-broker move finished: serve the partition from its new log, keeping its role."""
        hosted = self.partitions[key]
        hosted.log = new_log
        hosted.directory_id = directory
        hosted.dirty = False
        hosted.wake_data_waiters()
        self._changed(key)

    def remove(self, key: PartitionKey, code: ErrorCode) -> None:
        """Stop hosting `key`: waiting produces get `code`, waiting fetches wake, the log closes."""
        hosted = self.partitions.pop(key, None)
        if hosted is None:
            return
        hosted.fail_waiters(code)
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

    async def forced_flush(self, hosted: HostedPartition, *, now_ms: int) -> bool:
        """fsync the log now, off the event loop (`flush.messages` reached: Kafka flushes before
        it acknowledges); False after an I/O error, which went through `storage_error`."""
        partition_log = hosted.log
        partition_log.flush_starting(now_ms)
        try:
            partition_log.write_index()
            await asyncio.to_thread(partition_log.flush)
        except OSError as exc:
            if self.partitions.get(hosted.key) is hosted:
                self.storage_error(hosted, exc, "flushing")
            return False
        except ValueError:
            return True  # closed meanwhile (removed or swapped): nothing of it left to flush here
        return True

    def storage_error(self, hosted: HostedPartition, exc: OSError, doing: str) -> None:
        """An I/O error on this partition's log: classified by `DirFailures`; an offline dir stops serving it."""
        self.failures.io_error(hosted.directory_id, exc, f"{doing} for {hosted.name}")
        if self.state.dirs[hosted.directory_id].health is not DirHealth.OFFLINE:
            # A full disk keeps its replicas: this request fails, the log is still served.
            return
        self.remove(hosted.key, ErrorCode.KAFKA_STORAGE_ERROR)

    # -- lookups -------------------------------------------------------------------------------

    def lookup(
        self, topic: str, partition: int, *, any_replica: bool = False
    ) -> tuple[HostedPartition | None, ErrorCode, str]:
        """The partition when this broker leads it (with `any_replica`, or follows it), else (None,
        the error code, a message naming the partition): unknown, in an offline dir, or led elsewhere."""
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
        if hosted is None or (hosted.role is not Role.LEADER and not any_replica):
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


def _apply_settings(hosted: HostedPartition, settings: topic_configs.ResolvedConfigs) -> None:
    """The topic's configs as they are now (a change reaches open logs, not only new ones)."""
    hosted.min_isr = settings[topic_configs.MIN_INSYNC_REPLICAS]
    hosted.max_message_bytes = settings[topic_configs.MAX_MESSAGE_BYTES]
    hosted.log_append_time = settings.log_append_time
    hosted.compacted = settings.compacted
    hosted.stored_codec = log_validator.stored_codec(settings)
    hosted.timestamp_bounds = log_validator.timestamp_bounds(settings)
    hosted.log.retention_bytes = settings[topic_configs.RETENTION_BYTES]
    hosted.log.retention_ms = settings[topic_configs.RETENTION_MS]
    hosted.log.segment_bytes = settings[topic_configs.SEGMENT_BYTES]
    hosted.log.segment_ms = settings[topic_configs.SEGMENT_MS]
    hosted.log.apply_storage_configs(
        index_interval_bytes=settings[topic_configs.INDEX_INTERVAL_BYTES],
        segment_index_bytes=settings[topic_configs.SEGMENT_INDEX_BYTES],
        segment_jitter_ms=settings[topic_configs.SEGMENT_JITTER_MS],
        file_delete_delay_ms=settings[topic_configs.FILE_DELETE_DELAY_MS],
        flush_messages=settings[topic_configs.FLUSH_MESSAGES],
        flush_ms=settings[topic_configs.FLUSH_MS],
        preallocate=settings.preallocate,
    )
