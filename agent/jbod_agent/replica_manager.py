"""The partitions this broker hosts: their logs, their roles, replication and client requests.

Guarantees:
* A partition is served only while its replica sits in an online dir: produce and fetch for a
  replica in an offline dir answer KAFKA_STORAGE_ERROR (56); replicas in healthy dirs keep being
  served. Any I/O error from a log goes through `Agent.io_error`, which takes the dir offline.
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
* Followers truncate divergent history using leader epochs before appending (`fetcher.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from jbod_agent import record_batch
from jbod_agent.partition_log import OffsetOutOfRangeError, PartitionLog
from jbod_agent.placement import DirHealth
from jbod_core import replication
from jbod_core.broker_messages import ProduceCall, ReplicaFetchPartition, ReplicaFetchRequest
from jbod_core.errors import ErrorCode
from jbod_core.ids import Uuid, is_online
from jbod_core.image import PartitionKey, PartitionRegistration
from jbod_core.replication import FollowerProgress

if TYPE_CHECKING:
    from jbod_agent.agent import Agent

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
    dirty: bool = False
    fetch_retry_at: float = 0.0

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.key[1]}"

    def maximal_isr(self) -> tuple[int, ...]:
        if self.pending_isr is None:
            return self.isr
        return tuple(dict.fromkeys((*self.isr, *self.pending_isr)))

    def wake_data_waiters(self) -> None:
        for waiter in self.data_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self.data_waiters.clear()

    def fail_ack_waiters(self, code: ErrorCode) -> None:
        for _, waiter in self.ack_waiters:
            if not waiter.done():
                waiter.set_result(code)
        self.ack_waiters.clear()


@dataclass(eq=False)
class _FetchState:
    """One partition of a follower's fetch, checked once per request."""

    request: ReplicaFetchPartition
    hosted: HostedPartition | None  # None: answered with `code`
    code: ErrorCode
    diverging: replication.DivergingEpoch | None


def _now_ms() -> float:
    return time.monotonic() * 1000


class ReplicaManager:
    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.partitions: dict[PartitionKey, HostedPartition] = {}
        self.on_follow_change: list[Any] = []  # hooks: fetchers re-plan
        self.alter_now = asyncio.Event()
        self._alter_in_flight = False

    # -- roles ---------------------------------------------------------------------------------

    def open_log(self, path: Any, topic_configs: Any) -> PartitionLog:
        config = self.agent.config
        return PartitionLog.open(
            path,
            segment_bytes=int(topic_configs.get("segment.bytes", config.log_segment_bytes)),
            retention_bytes=int(topic_configs.get("retention.bytes", config.log_retention_bytes)),
            retention_ms=int(topic_configs.get("retention.ms", config.log_retention_ms)),
        )

    def sync(self, keys: Iterable[PartitionKey]) -> None:
        """Bring the roles of `keys` in line with the image and the local replicas."""
        agent = self.agent
        changed_following = False
        for key in keys:
            local = agent.local.get(key)
            part = agent.image.partition(key)
            hosted = self.partitions.get(key)
            if local is None or part is None or agent.node_id not in part.replicas:
                if hosted is not None:
                    self.remove(key, ErrorCode.NOT_LEADER_OR_FOLLOWER)
                    changed_following = True
                continue
            if hosted is not None and hosted.directory_id != local.directory_id:
                self.remove(key, ErrorCode.NOT_LEADER_OR_FOLLOWER)
                hosted = None
            if hosted is None:
                topic = agent.image.topics[key[0]]
                try:
                    opened = self.open_log(local.path, topic.configs)
                except OSError as exc:
                    agent.io_error(local.directory_id, exc, f"opening the log of {local.path.name}")
                    continue
                except ValueError as exc:
                    agent.fail_dir(local.directory_id, f"the log of {local.path.name} is damaged: {exc}")
                    continue
                hosted = HostedPartition(key, topic.name, local.directory_id, opened)
                hosted.min_isr = replication.min_insync_replicas(
                    topic.configs, agent.config.min_insync_replicas
                )
                self.partitions[key] = hosted
            changed_following |= self._apply(hosted, part)
        if changed_following:
            for hook in self.on_follow_change:
                hook()

    def _apply(self, hosted: HostedPartition, part: PartitionRegistration) -> bool:
        """Apply the image's view of the partition; True when the set of followed leaders moved."""
        me = self.agent.node_id
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
            log.debug("%s: no longer the leader (leader %d, epoch %d)", hosted.name, part.leader, part.leader_epoch)
        hosted.role = Role.FOLLOWER
        hosted.leader_id = part.leader
        hosted.leader_epoch = part.leader_epoch
        hosted.followers.clear()
        hosted.pending_isr = None
        hosted.fetch_retry_at = 0.0
        return was_following != (hosted.role, hosted.leader_id, hosted.leader_epoch)

    def _become_leader(self, hosted: HostedPartition, part: PartitionRegistration) -> None:
        now = _now_ms()
        hosted.role = Role.LEADER
        hosted.leader_id = self.agent.node_id
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
            r: FollowerProgress(last_caught_up_ms=now) for r in part.replicas if r != self.agent.node_id
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

    def remove(self, key: PartitionKey, code: ErrorCode) -> None:
        hosted = self.partitions.pop(key, None)
        if hosted is None:
            return
        hosted.fail_ack_waiters(code)
        hosted.wake_data_waiters()
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
        """An I/O error on this partition's log: classified by the agent; an offline dir stops serving it."""
        self.agent.io_error(hosted.directory_id, exc, f"{doing} for {hosted.name}")
        if self.agent.dirs[hosted.directory_id].health is not DirHealth.OFFLINE:
            # A full disk keeps its replicas: this request fails, the log is still served.
            return
        self.remove(hosted.key, ErrorCode.KAFKA_STORAGE_ERROR)

    # -- lookups -------------------------------------------------------------------------------

    def lookup(self, topic: str, partition: int) -> tuple[HostedPartition | None, ErrorCode, str]:
        agent = self.agent
        topic_id = agent.image.topic_ids_by_name.get(topic)
        if topic_id is None:
            return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {topic!r}"
        key = (topic_id, partition)
        part = agent.image.partition(key)
        if part is None:
            return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} has no partition {partition}"
        if key in agent.offline_local:
            return None, ErrorCode.KAFKA_STORAGE_ERROR, f"{topic}-{partition} is in an offline log dir"
        hosted = self.partitions.get(key)
        if hosted is None or hosted.role is not Role.LEADER:
            if hosted is None and agent.node_id in part.replicas and part.leader == agent.node_id:
                directory = part.directory_of(agent.node_id)
                if not directory.is_reserved and directory not in agent.dirs:
                    return None, ErrorCode.KAFKA_STORAGE_ERROR, f"{topic}-{partition} is in an offline log dir"
            return None, ErrorCode.NOT_LEADER_OR_FOLLOWER, (
                f"broker {agent.node_id} is not the leader of {topic}-{partition} (leader {part.leader})"
            )
        return hosted, ErrorCode.NONE, ""

    # -- produce -------------------------------------------------------------------------------

    async def produce(self, request: ProduceCall) -> dict[str, Any]:
        records = request.records
        hosted, code, message = self.lookup(request.topic, request.partition)
        if hosted is None:
            return {"errorCode": int(code), "errorMessage": message, "baseOffset": -1}
        admission = replication.produce_admission(request.acks, len(hosted.isr), hosted.min_isr)
        if admission is not ErrorCode.NONE:
            return {
                "errorCode": int(admission),
                "errorMessage": f"{hosted.name}: ISR {list(hosted.isr)} is smaller than "
                f"min.insync.replicas={hosted.min_isr}",
                "baseOffset": -1,
            }
        if not records:
            return {"errorCode": 0, "baseOffset": hosted.log.end_offset}
        try:
            base = hosted.log.append_as_leader(records, leader_epoch=hosted.leader_epoch)
        except OSError as exc:
            self.storage_error(hosted, exc, "appending")
            return {
                "errorCode": int(ErrorCode.KAFKA_STORAGE_ERROR),
                "errorMessage": f"{hosted.name}: the log dir failed while appending",
                "baseOffset": -1,
            }
        hosted.dirty = True
        hosted.wake_data_waiters()
        self._update_high_watermark(hosted)
        if request.acks == 0:
            return {"errorCode": 0, "baseOffset": -1}
        if request.acks == 1:
            return {"errorCode": 0, "baseOffset": base}
        required = base + len(records)
        if hosted.log.high_watermark >= required:  # the leader is the whole ISR
            return {"errorCode": 0, "baseOffset": base}
        waiter: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        hosted.ack_waiters.append((required, waiter))
        try:
            outcome = await asyncio.wait_for(waiter, request.timeout_ms / 1000)
        except TimeoutError:
            with contextlib.suppress(ValueError):
                hosted.ack_waiters.remove((required, waiter))
            return {
                "errorCode": int(ErrorCode.REQUEST_TIMED_OUT),
                "errorMessage": f"{hosted.name}: not replicated to the ISR within {request.timeout_ms} ms",
                "baseOffset": -1,
            }
        if outcome is ErrorCode.NOT_ENOUGH_REPLICAS:
            return {
                "errorCode": int(outcome),
                "errorMessage": f"{hosted.name}: the ISR shrank below min.insync.replicas={hosted.min_isr} "
                "after the records were appended",
                "baseOffset": -1,
            }
        if outcome is not ErrorCode.NONE:
            return {
                "errorCode": int(outcome),
                "errorMessage": f"{hosted.name}: leadership or the log dir was lost before replication",
                "baseOffset": -1,
            }
        return {"errorCode": 0, "baseOffset": base}

    def _update_high_watermark(self, hosted: HostedPartition) -> None:
        if hosted.role is not Role.LEADER:
            return
        before = hosted.log.high_watermark
        after = replication.high_watermark(
            before, self.agent.node_id, hosted.log.end_offset, hosted.maximal_isr(), hosted.followers
        )
        if after == before:
            return
        hosted.log.high_watermark = after
        hosted.wake_data_waiters()
        if hosted.ack_waiters:
            # As Kafka: a batch the HW covers while the ISR is below min.insync.replicas is not
            # acknowledged (NOT_ENOUGH_REPLICAS_AFTER_APPEND in Kafka; 19 in this contract).
            outcome = (
                ErrorCode.NONE if len(hosted.isr) >= hosted.min_isr else ErrorCode.NOT_ENOUGH_REPLICAS
            )
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
        """Answer a follower: a JSON header per partition plus the raw frames, in order.

        Each partition is checked once (error code, divergence); a long-poll only re-reads data.
        A divergence found here is answered at once, so it cannot go stale while waiting.
        """
        now = _now_ms()
        replica = request.replica_id
        states: list[_FetchState] = []
        for p in request.partitions:
            key = (p.topic_id, p.partition)
            hosted = self.partitions.get(key)
            code = ErrorCode.NONE
            if key in self.agent.offline_local:
                code = ErrorCode.KAFKA_STORAGE_ERROR
            elif self.agent.image.partition(key) is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif hosted is None or hosted.role is not Role.LEADER:
                code = ErrorCode.NOT_LEADER_OR_FOLLOWER
            elif p.current_leader_epoch < hosted.leader_epoch:
                code = ErrorCode.FENCED_LEADER_EPOCH
            elif p.current_leader_epoch > hosted.leader_epoch or replica not in hosted.replicas:
                code = ErrorCode.NOT_LEADER_OR_FOLLOWER
            if code is not ErrorCode.NONE or hosted is None:
                states.append(_FetchState(p, None, code, None))
                continue
            diverging = replication.diverging_epoch(p.fetch_offset, p.last_fetched_epoch, hosted.log.epoch_end_offset)
            states.append(_FetchState(p, hosted, code, diverging))
        # Progress first: a fetch at offset N proves the follower holds everything below N.
        expand = False
        for state in states:
            p, hosted = state.request, state.hosted
            if hosted is None:
                continue
            if p.fetch_offset <= hosted.log.end_offset and state.diverging is None:
                progress = hosted.followers.setdefault(replica, FollowerProgress(last_caught_up_ms=now))
                progress.on_fetch(p.fetch_offset, hosted.log.end_offset, now)
                self._update_high_watermark(hosted)
                if replica not in hosted.maximal_isr() and p.fetch_offset >= hosted.log.high_watermark:
                    expand = True
        if expand:
            self.alter_now.set()
        deadline = time.monotonic() + request.max_wait_ms / 1000
        while True:
            header, payload, has_data = self._replica_fetch_answer(request, states)
            remaining = deadline - time.monotonic()
            if has_data or remaining <= 0:
                return header, payload
            live = [s.hosted for s in states if s.hosted is not None and s.hosted.role is Role.LEADER]
            if not live:
                return header, payload
            await self._wait_for_data(live, remaining)
            for state in states:  # leadership may have moved while waiting
                if state.hosted is not None and not self._still_leading(state.hosted):
                    state.hosted, state.code = None, ErrorCode.NOT_LEADER_OR_FOLLOWER

    def _still_leading(self, hosted: HostedPartition) -> bool:
        return self.partitions.get(hosted.key) is hosted and hosted.role is Role.LEADER

    def _replica_fetch_answer(
        self, request: ReplicaFetchRequest, states: list[_FetchState]
    ) -> tuple[dict[str, Any], list[bytes], bool]:
        parts: list[dict[str, Any]] = []
        payload: list[bytes] = []
        budget = request.max_bytes
        has_data = False
        for state in states:
            p, hosted, code = state.request, state.hosted, state.code
            entry: dict[str, Any] = {
                "topicId": str(p.topic_id),
                "partition": p.partition,
                "errorCode": int(code),
                "size": 0,
            }
            parts.append(entry)
            if hosted is None:
                has_data = has_data or code is not ErrorCode.NONE
                continue
            log_ = hosted.log
            entry["highWatermark"] = log_.high_watermark
            entry["logStartOffset"] = log_.log_start_offset
            entry["endOffset"] = log_.end_offset
            diverging = state.diverging
            if diverging is not None:
                entry["divergingEpoch"] = {"epoch": diverging.epoch, "endOffset": diverging.end_offset}
                has_data = True
                continue
            if p.fetch_offset < log_.log_start_offset or p.fetch_offset > log_.end_offset:
                entry["errorCode"] = int(ErrorCode.OFFSET_OUT_OF_RANGE)
                has_data = True
                continue
            if p.fetch_offset == log_.end_offset or budget <= 0:
                continue
            try:
                data = log_.read(p.fetch_offset, min(request.partition_max_bytes, budget))
            except OffsetOutOfRangeError:
                entry["errorCode"] = int(ErrorCode.OFFSET_OUT_OF_RANGE)
                has_data = True
                continue
            except OSError as exc:
                self.storage_error(hosted, exc, "reading for a follower")
                entry["errorCode"] = int(ErrorCode.KAFKA_STORAGE_ERROR)
                has_data = True
                continue
            if data:
                entry["size"] = len(data)
                payload.append(data)
                budget -= len(data)
                has_data = True
        return {"errorCode": 0, "partitions": parts}, payload, has_data

    # -- ISR maintenance -----------------------------------------------------------------------

    def _eligible(self, hosted: HostedPartition) -> Any:
        image = self.agent.image

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
        lag = self.agent.config.replica_lag_time_max_ms
        out: list[tuple[HostedPartition, tuple[int, ...]]] = []
        for hosted in self.partitions.values():
            if hosted.role is not Role.LEADER or hosted.pending_isr is not None:
                continue
            shrink = replication.isr_to_shrink(
                hosted.isr, self.agent.node_id, hosted.followers, now_ms=now, lag_time_max_ms=lag
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
            new_isr = tuple(r for r in hosted.replicas if (r in hosted.isr and r not in shrink) or r in expand)
            if self.agent.node_id not in new_isr:
                continue
            out.append((hosted, new_isr))
        return out

    async def isr_forever(self) -> None:
        agent = self.agent
        # Kafka's isr-expiration period (lag / 2): a full scan; expansions are also triggered at
        # once by a follower's fetch (`alter_now`).
        period = agent.config.replica_lag_time_max_ms / 2000
        while not agent.stopping.is_set():
            self.alter_now.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.alter_now.wait(), period)
            if not agent.registered:
                continue
            changes = self.isr_changes()
            if changes:
                await self._alter(changes)

    async def _alter(self, changes: list[tuple[HostedPartition, tuple[int, ...]]]) -> None:
        agent = self.agent
        by_topic: dict[Uuid, list[dict[str, Any]]] = {}
        for hosted, new_isr in changes:
            hosted.pending_isr = new_isr
            by_topic.setdefault(hosted.key[0], []).append(
                {
                    "partitionIndex": hosted.key[1],
                    "leaderEpoch": hosted.leader_epoch,
                    "partitionEpoch": hosted.partition_epoch,
                    "newIsr": list(new_isr),
                }
            )
            log.info("%s: asking for ISR %s (was %s)", hosted.name, list(new_isr), list(hosted.isr))
        body = {
            "brokerId": agent.node_id,
            "brokerEpoch": agent.epoch,
            "topics": [{"topicId": str(t), "partitions": ps} for t, ps in by_topic.items()],
        }
        reply = await agent.post("/v1/partitions/alter", body)
        results: dict[PartitionKey, dict[str, Any]] = {}
        if reply is not None and reply.get("errorCode", 0) == 0:
            for topic in reply.get("topics", []):
                topic_id = Uuid.parse(topic["topicId"])
                for p in topic["partitions"]:
                    results[(topic_id, p["partitionIndex"])] = p
        for hosted, _new_isr in changes:
            hosted.pending_isr = None
            result = results.get(hosted.key)
            if result is None or self.partitions.get(hosted.key) is not hosted:
                continue
            if result["errorCode"] != 0:
                log.info("%s: AlterPartition answered errorCode %s", hosted.name, result["errorCode"])
                continue
            if result["leaderEpoch"] == hosted.leader_epoch and result["partitionEpoch"] > hosted.partition_epoch:
                hosted.isr = tuple(result["isr"])
                hosted.partition_epoch = result["partitionEpoch"]
            self._update_high_watermark(hosted)

    # -- background upkeep ---------------------------------------------------------------------

    async def flush_forever(self) -> None:
        """fsync dirty logs periodically, off the event loop."""
        agent = self.agent
        period = agent.config.log_flush_interval_ms / 1000
        while not agent.stopping.is_set():
            await asyncio.sleep(period)
            dirty = [h for h in self.partitions.values() if h.dirty]
            for hosted in dirty:
                hosted.dirty = False
                try:
                    await asyncio.to_thread(hosted.log.flush)
                except OSError as exc:
                    if self.partitions.get(hosted.key) is hosted:
                        self.storage_error(hosted, exc, "flushing")
                except ValueError:
                    pass  # closed meanwhile

    async def retention_forever(self) -> None:
        agent = self.agent
        period = agent.config.log_retention_check_interval_ms / 1000
        while not agent.stopping.is_set():
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


def _client_records(data: bytes, offset: int, high_watermark: int, max_bytes: int) -> list[dict[str, Any]]:
    import base64

    out: list[dict[str, Any]] = []
    size = 0
    for header in record_batch.iter_headers(data, verify_crc=False):
        frame = memoryview(data)[header.position : header.position + header.size]
        for record_offset, key, value in record_batch.decode_records(frame):
            if record_offset < offset or record_offset >= high_watermark:
                continue
            if out and size + len(value) > max_bytes:
                return out
            size += len(value) + (len(key) if key else 0)
            out.append(
                {
                    "offset": record_offset,
                    "key": None if key is None else base64.b64encode(key).decode("ascii"),
                    "value": base64.b64encode(value).decode("ascii"),
                }
            )
    return out
