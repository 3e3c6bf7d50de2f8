"""Kafka's group coordinator on a broker: the consumer groups of the `__consumer_offsets`
partitions this broker leads, decided by `jbod_core.groups` and written to those partitions.

A group lives in partition `abs(hash(group)) % partitions` of `__consumer_offsets`
(`jbod_core.group_records.partition_for`); the leader of that partition is its coordinator.

Guarantees:
* Follows leadership (`coordinator_partitions`): when this broker becomes leader of a partition
  of `__consumer_offsets` (`ReplicaManager.on_partition_change`), it loads the partition's groups
  by reading its records from the log start to the end offset and replaying the last record of each key in log
  order (`groups.GroupLoader`: the same groups as replaying them all, decoding only one record per
  key; a record that does not decode is skipped with a WARNING), answering COORDINATOR_LOAD_IN_PROGRESS meanwhile; when it
  stops leading it (a new leader epoch elsewhere, a failed dir, a deletion) it drops them at once
  and every waiting JoinGroup and SyncGroup is answered NOT_COORDINATOR. A group of a partition
  it does not lead is NOT_COORDINATOR.
* Persistence first: the records of a decision are appended to the group's partition through the
  leader's produce path (`Produce.append_batch`, acks=-1, `offsets.commit.timeout.ms`) before the
  decision takes effect and before anything is answered; so an acknowledged commit or assignment
  is on every in-sync replica, and a new coordinator loads it. A decision whose records were not
  appended (not the leader any more, a failed dir, fewer in-sync replicas than
  `min.insync.replicas`) leaves the group as it was and is answered NOT_COORDINATOR or
  COORDINATOR_NOT_AVAILABLE. One whose records were appended but not acknowledged in time takes
  effect (they are in this leader's log, what a reload would read) and is answered
  COORDINATOR_NOT_AVAILABLE. A decision that writes nothing (a heartbeat, a commit of the offsets
  already committed) is answered once the high watermark covers the log as it was when it was
  made — the records its answer rests on, which after such a decision or a load need not all be
  replicated yet — else as a write that was not acknowledged (Kafka answers its writes without
  records once its last written offset is committed). So a client's retry of a commit that timed
  out is acknowledged only once the first one's record is on every in-sync replica. Decisions of
  one partition are made and written one at a time (a lock per partition), in the order they are
  made; a JoinGroup or SyncGroup that waits, and an answer waiting for the high watermark, do not
  hold the lock.
* Transactional offsets (TxnOffsetCommit, `jbod_core.txn_offsets`): validated on the group as it
  is, written as one transactional batch of the producer (acks=-1, the producer's epoch checked by
  the partition: a zombie's is INVALID_PRODUCER_EPOCH and writes nothing), then pending per
  producer id in the shard — not in the groups' offsets — until `on_transaction_marker` (called by
  WriteTxnMarkers once a marker is appended to the partition) makes them the committed ones in
  Kafka's record order or drops them. A write not appended leaves nothing pending; one appended
  but not acknowledged in time is pending and answered COORDINATOR_NOT_AVAILABLE (the marker
  decides it). Every decision's offset records and tombstones are noted with their log offsets
  (`txn_offsets.replay_committed`): the record order a marker compares with; a tombstone drops
  that partition's pending offsets. Loading holds a transactional record until its producer's
  marker in the log (`txn_offsets.LogScan`), so a reload has the same committed and pending
  offsets; a transaction open at the end of the log stays pending; a marker told while the
  partition loads is applied once it is loaded. A partition with a pending offset does not
  expire (`groups.expire_offsets`), as Kafka.
* Timers: one task fires every group's due deadlines (`groups.tick`), woken early when a decision
  sets a deadline sooner than the one it sleeps to, on the agent's clock, at least
  `MIN_TIMER_STEP_S` apart. A timer decision takes effect even if its records could not be
  written (as Kafka: a lost "group became Empty" record only brings back members whose sessions
  then expire), with a WARNING.
* Offsets expiry (Kafka's `offsets.retention.minutes`): every
  `offsets.retention.check.interval.ms` after a partition's groups were loaded, and again that
  long after each check, the same task decides `groups.expire_offsets` on each of its groups and
  writes the tombstones as any decision's records (persistence first, acks=-1), at most
  `EXPIRY_BATCH_RECORDS` a write; the expired offsets and the Empty groups left with none are
  gone once written (appended but not acknowledged in time included, as any decision). A write
  that was not appended changes nothing (the next check tries again), with a WARNING.
* Waiting requests: a JoinGroup or SyncGroup waits (parked under its member id) until a decision
  delivers its answer; a second request of the same member replaces the first, which is answered
  REBALANCE_IN_PROGRESS (its client went away: Kafka never answers it). A wait is bounded by the
  group's longest rebalance timeout plus the initial rebalance delay plus `WAIT_MARGIN_S`; past
  that (a bug) it is answered REBALANCE_IN_PROGRESS with a WARNING.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar

from jbod_agent.coordinators.coordinator_partitions import CoordinatorPartitions, CoordinatorShard
from jbod_agent.partitions.produce import Produce, ProduceError
from jbod_agent.partitions.replica_manager import ReplicaManager
from jbod_agent.ports import Clock, wall_ms
from jbod_core import group_records, groups, producer_state, txn_offsets
from jbod_core.errors import ErrorCode
from jbod_core.group_records import OFFSETS_TOPIC
from jbod_core.groups import Group, GroupDecision, GroupError, JoinAnswer, SyncAnswer
from jbod_kafka import control_records, record_batch

log = logging.getLogger("jbod_agent.groups")

MIN_TIMER_STEP_S: Final = 0.01
WAIT_MARGIN_S: Final = 30.0
EXPIRY_BATCH_RECORDS: Final = 1000

A = TypeVar("A")


class _Parking(enum.Enum):
    """Where a request that waits is parked: JoinGroups and SyncGroups wait apart."""

    JOIN = "join"
    SYNC = "sync"


@dataclass(frozen=True, slots=True)
class CoordinatorSettings:
    partitions: int = group_records.DEFAULT_PARTITIONS  # offsets.topic.num.partitions
    commit_timeout_ms: int = 5000  # offsets.commit.timeout.ms
    offsets_retention_ms: int = 10_080 * 60_000  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    group: groups.GroupSettings = field(default_factory=groups.GroupSettings)


@dataclass(eq=False, slots=True)
class _Waiter(Generic[A]):
    """A parked JoinGroup or SyncGroup: `answer` is set once, with `done`."""

    done: asyncio.Event = field(default_factory=asyncio.Event)
    answer: A | None = None

    def settle(self, answer: A) -> None:
        if not self.done.is_set():
            self.answer = answer
            self.done.set()


@dataclass(frozen=True, slots=True)
class _Written:
    """A write's outcome: whether its records are in the log, the error to answer (NONE: on every
    in-sync replica), the offset of its first record."""

    appended: bool
    error: GroupError
    first_offset: int


@dataclass(eq=False)
class _Shard(CoordinatorShard):
    """The groups of one `__consumer_offsets` partition this broker leads."""

    groups: dict[str, Group] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    joins: dict[tuple[str, str], _Waiter[JoinAnswer]] = field(default_factory=dict)
    syncs: dict[tuple[str, str], _Waiter[SyncAnswer]] = field(default_factory=dict)
    expiry_due_ms: int | None = None  # monotonic: the next offsets expiry check, once loaded
    pending: txn_offsets.PendingOffsets = field(default_factory=txn_offsets.PendingOffsets)
    early_markers: list[tuple[int, bool]] = field(default_factory=list)  # told while loading


class GroupCoordinator:
    """The groups this broker coordinates (the module's guarantees)."""

    def __init__(
        self, manager: ReplicaManager, produce: Produce, *, clock: Clock, settings: CoordinatorSettings
    ) -> None:
        self._manager = manager
        self._produce = produce
        self._clock = clock
        self.settings = settings
        self._wake = asyncio.Event()
        self._wake_at_ms: int | None = None
        self._partitions: CoordinatorPartitions[_Shard] = CoordinatorPartitions(
            manager, OFFSETS_TOPIC, _Shard, self._load, self._unload, log=log, what="consumer groups"
        )
        self._shards = self._partitions.shards

    # -- where groups live ----------------------------------------------------------------------

    def offsets_topic_partitions(self) -> int:
        """The partition count of `__consumer_offsets`: the topic's when it exists, else the setting."""
        image = self._manager.state.image
        topic_id = image.topic_ids_by_name.get(OFFSETS_TOPIC)
        topic = image.topics.get(topic_id) if topic_id is not None else None
        return len(topic.partitions) if topic is not None and topic.partitions else self.settings.partitions

    def partition_of(self, group_id: str) -> int:
        return group_records.partition_for(group_id, self.offsets_topic_partitions())

    def _shard_of(self, group_id: str) -> tuple[_Shard | None, GroupError]:
        shard = self._shards.get(self.partition_of(group_id))
        if shard is None:
            return None, GroupError.NOT_COORDINATOR
        if not shard.loaded:
            return None, GroupError.COORDINATOR_LOAD_IN_PROGRESS
        return shard, GroupError.NONE

    def _now(self) -> groups.Now:
        return groups.Now(int(self._clock.monotonic() * 1000), wall_ms(self._clock))

    # -- leadership: loading and unloading ------------------------------------------------------

    async def _load(self, shard: _Shard) -> None:
        started = self._clock.monotonic()
        scan = txn_offsets.LogScan()  # the last record of each key read, and the open transactions
        records = 0

        def scan_chunk(data: bytes, position: int) -> int:
            nonlocal records
            position, read = _scan_chunk(scan, data, position)
            records += read
            return position

        # Reading records is CPU work: in a worker thread (`read_log`); only this task touches `scan`.
        if not await self._partitions.read_log(shard, scan_chunk):
            return
        loader = groups.GroupLoader()
        skipped = await asyncio.to_thread(_replay_latest, loader, scan.latest)
        if self._shards.get(shard.index) is not shard:
            return
        shard.groups = loader.groups(now=self._now())
        shard.pending = txn_offsets.loaded_pending(scan.latest, _decoded_open(scan.open))
        # Markers told while loading: one the load read finds no pending offsets of its producer
        # left (no TxnOffsetCommit is served while loading), one after it applies now.
        for producer_id, committed in shard.early_markers:
            outcome = txn_offsets.end_transaction(
                shard.pending, shard.groups, producer_id, committed=committed
            )
            shard.pending = outcome.pending
            shard.groups.update(outcome.groups)
        shard.early_markers.clear()
        shard.loaded = True
        shard.expiry_due_ms = self._now().monotonic_ms + self.settings.offsets_retention_check_interval_ms
        self._wake.set()
        (log.info if records else log.debug)(
            "Loaded %d consumer groups of %s-%d from %d records in %.2f s (leader epoch %d)%s",
            len(shard.groups),
            OFFSETS_TOPIC,
            shard.index,
            records,
            self._clock.monotonic() - started,
            shard.leader_epoch,
            f"; skipped {skipped} records that do not decode" if skipped else "",
        )

    def _unload(self, shard: _Shard, reason: str) -> None:
        self._partitions.forget(shard)
        for (_group_id, member_id), join_waiter in shard.joins.items():
            join_waiter.settle(JoinAnswer(GroupError.NOT_COORDINATOR, member_id))
        for sync_waiter in shard.syncs.values():
            sync_waiter.settle(SyncAnswer(GroupError.NOT_COORDINATOR))
        shard.joins.clear()
        shard.syncs.clear()
        if shard.loaded:
            (log.info if shard.groups else log.debug)(
                "Unloaded %d consumer groups of %s-%d: %s",
                len(shard.groups),
                OFFSETS_TOPIC,
                shard.index,
                reason,
            )

    def close(self) -> None:
        self._partitions.close()

    # -- deciding and writing -------------------------------------------------------------------

    async def _append(
        self, shard: _Shard, records: Sequence[group_records.CoordinatorRecord]
    ) -> tuple[bool, GroupError]:
        """Write `records` to the shard's partition (acks=-1): (appended, the error to answer)."""
        written = await self._write(shard, records)
        return written.appended, written.error

    async def _write(
        self,
        shard: _Shard,
        records: Sequence[group_records.CoordinatorRecord],
        *,
        producer: tuple[int, int] | None = None,
    ) -> _Written:
        """Write `records` to the shard's partition (acks=-1). `producer` (id, epoch): as a
        transactional batch of that producer (the caller notes its pending offsets); otherwise the
        offsets it commits or removes are noted in `shard.pending` once appended
        (`txn_offsets.replay_committed`)."""
        now = wall_ms(self._clock)
        encoded = [group_records.encode(r) for r in records]
        if producer is None:
            batch = record_batch.encode_batch(0, -1, now, encoded)
        else:
            batch = record_batch.encode_batch(
                0, -1, now, encoded, producer_id=producer[0], producer_epoch=producer[1], transactional=True
            )
        # Where the records go: before any later record of this shard's decisions (made under its
        # lock), after any earlier one, which is all the order of offsets needs.
        first = shard.hosted.log.end_offset
        result = await self._produce.append_batch(
            OFFSETS_TOPIC,
            shard.index,
            batch,
            acks=-1,
            timeout_ms=self.settings.commit_timeout_ms,
            coordinator=producer is not None,
        )
        appended = result.error == ErrorCode.NONE or result.appended_unacknowledged
        base = result.base_offset if result.base_offset >= 0 else first
        if appended and producer is None:
            shard.pending = txn_offsets.replay_committed(
                shard.pending, zip(records, range(base, base + len(records)), strict=True)
            )
        if result.error == ErrorCode.NONE:
            return _Written(True, GroupError.NONE, base)
        if result.error == producer_state.ProduceErrorCode.INVALID_PRODUCER_EPOCH:
            log.info(
                "Refused a transactional offset commit to %s-%d: %s",
                OFFSETS_TOPIC,
                shard.index,
                result.message,
            )
            return _Written(False, GroupError.INVALID_PRODUCER_EPOCH, base)
        log.warning(
            "Writing %d records to %s-%d failed (errorCode %d, %s): %s",
            len(records),
            OFFSETS_TOPIC,
            shard.index,
            int(result.error),
            "appended, not yet replicated" if appended else "not appended",
            result.message,
        )
        return _Written(appended, _write_error(result.error), base)

    async def _replicated(self, shard: _Shard, group_id: str, required: int) -> GroupError:
        """NONE once the high watermark of the shard's partition covers `required` (at once when
        it does already), else the error to answer a request of `group_id` with."""
        code = await self._produce.await_high_watermark(
            shard.hosted, required=required, timeout_ms=self.settings.commit_timeout_ms
        )
        # The high watermark covers `required`, whatever the size of the ISR by then.
        if code in (ErrorCode.NONE, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND):
            return GroupError.NONE
        error = _write_error(code)
        log.warning(
            "Answered a request of consumer group %s with %s: %s-%d was not replicated to offset %d (errorCode %d)",
            group_id,
            error.name,
            OFFSETS_TOPIC,
            shard.index,
            required,
            int(code),
        )
        return error

    async def _decide(
        self,
        group_id: str,
        decide: Callable[[Group | None, groups.Now], GroupDecision[A]],
        failed: Callable[[GroupError], A],
        *,
        parking: _Parking | None = None,
    ) -> A:
        """Decide on the group's current state, write the records, apply, deliver, then answer
        (at once, or once the parked request's answer is delivered)."""
        shard, error = self._shard_of(group_id)
        if shard is None:
            return failed(error)
        async with shard.lock:
            if self._shards.get(shard.index) is not shard:
                return failed(GroupError.NOT_COORDINATOR)
            decision = decide(shard.groups.get(group_id), self._now())
            write_error = GroupError.NONE
            if decision.records:
                appended, write_error = await self._append(shard, decision.records)
                current = self._shards.get(shard.index) is shard
                if not appended or not current:
                    return failed(write_error if current else GroupError.NOT_COORDINATOR)
            waiter = self._apply(shard, group_id, decision, parking)
            # The records an answer rests on: all of the log (a decision that wrote nothing answers
            # from what earlier ones wrote, perhaps appended but not yet replicated).
            written = shard.hosted.log.end_offset
        if write_error is not GroupError.NONE:  # appended, not acknowledged: in effect, answered an error
            _forget(shard, group_id, decision.parked, waiter)
            return failed(write_error)
        return await self._answer(shard, group_id, decision, waiter, failed, written=written)

    async def _answer(  # noqa: PLR0913  the decision and its shard, then what it answers from
        self,
        shard: _Shard,
        group_id: str,
        decision: GroupDecision[A],
        waiter: _Waiter[A] | None,
        failed: Callable[[GroupError], A],
        *,
        written: int,
    ) -> A:
        """An applied decision's answer: its own (once the log it rests on, to `written`, is
        replicated, if it wrote nothing), or the parked request's."""
        if decision.answer is None:
            assert waiter is not None
            return await self._wait(shard, group_id, decision, waiter, failed)
        if not decision.records:
            replicated = await self._replicated(shard, group_id, written)
            if replicated is not GroupError.NONE:
                return failed(replicated)
        return decision.answer

    def _apply(
        self, shard: _Shard, group_id: str, decision: GroupDecision[A], parking: _Parking | None
    ) -> _Waiter[A] | None:
        """The decision takes effect: the group, the parked request (registered before the
        deliveries, which may answer it at once), the deliveries."""
        before = shard.groups.get(group_id)
        if decision.group is None:
            shard.groups.pop(group_id, None)
        else:
            shard.groups[group_id] = decision.group
        waiter: _Waiter[A] | None = None
        if decision.parked is not None and parking is not None:
            waiter = _Waiter()
            _park(shard, group_id, decision.parked, waiter, parking)
        for delivery in decision.deliveries:
            key = (group_id, delivery.member_id)
            if isinstance(delivery.answer, JoinAnswer):
                join_waiter = shard.joins.pop(key, None)
                if join_waiter is not None:
                    join_waiter.settle(delivery.answer)
            else:
                sync_waiter = shard.syncs.pop(key, None)
                if sync_waiter is not None:
                    sync_waiter.settle(delivery.answer)
        _log_change(group_id, before, decision.group)
        deadline = None if decision.group is None else groups.next_deadline(decision.group)
        if deadline is not None and (self._wake_at_ms is None or deadline < self._wake_at_ms):
            self._wake.set()
        return waiter

    async def _wait(
        self,
        shard: _Shard,
        group_id: str,
        decision: GroupDecision[A],
        waiter: _Waiter[A],
        failed: Callable[[GroupError], A],
    ) -> A:
        group = decision.group
        longest = max((m.rebalance_timeout_ms for m in group.members.values()), default=0) if group else 0
        bound = (longest + self.settings.group.initial_rebalance_delay_ms) / 1000 + WAIT_MARGIN_S
        if not await self._clock.wait(waiter.done, bound):
            _forget(shard, group_id, decision.parked, waiter)
            log.warning(
                "Answered a waiting request of member %s of group %s after %.0f s: nothing answered it",
                decision.parked,
                group_id,
                bound,
            )
            return failed(GroupError.REBALANCE_IN_PROGRESS)
        assert waiter.answer is not None
        return waiter.answer

    # -- timers ---------------------------------------------------------------------------------

    async def run_forever(self) -> None:
        """Fire the groups' due timers (the module's guarantees); first, load the partitions this
        broker already leads (those it led before the hook was added)."""
        self._partitions.follow_all()
        while True:
            self._wake.clear()
            now_ms = self._now().monotonic_ms
            soonest: int | None = None
            for shard in list(self._shards.values()):
                if not shard.loaded:
                    continue
                if shard.expiry_due_ms is not None:
                    if shard.expiry_due_ms <= now_ms:
                        await self._expire_offsets(shard)
                        interval = self.settings.offsets_retention_check_interval_ms
                        shard.expiry_due_ms = self._now().monotonic_ms + interval
                    soonest = shard.expiry_due_ms if soonest is None else min(soonest, shard.expiry_due_ms)
                for group_id, group in list(shard.groups.items()):
                    deadline = groups.next_deadline(group)
                    if deadline is None:
                        continue
                    if deadline <= now_ms:
                        await self._tick(shard, group_id)
                        group_after = shard.groups.get(group_id)
                        deadline = None if group_after is None else groups.next_deadline(group_after)
                        if deadline is None:
                            continue
                    soonest = deadline if soonest is None else min(soonest, deadline)
            self._wake_at_ms = soonest
            timeout = (
                None
                if soonest is None
                else max((soonest - self._now().monotonic_ms) / 1000, MIN_TIMER_STEP_S)
            )
            await self._clock.wait(self._wake, timeout)
            await self._clock.sleep(0)

    async def _tick(self, shard: _Shard, group_id: str) -> None:
        async with shard.lock:
            group = shard.groups.get(group_id)
            if self._shards.get(shard.index) is not shard or group is None:
                return
            decision = groups.tick(group, now=self._now(), settings=self.settings.group)
            if decision.records:
                await self._append(shard, decision.records)  # takes effect even if not written (logged)
                if self._shards.get(shard.index) is not shard:
                    return
            self._apply(shard, group_id, decision, None)

    async def _expire_offsets(self, shard: _Shard) -> None:
        """Expire the committed offsets of the shard's groups (`groups.expire_offsets`): their
        tombstones written first, at most `EXPIRY_BATCH_RECORDS` records a write (a group's
        together), each write under the lock and decided on the groups as they are then. A
        write that was not appended leaves its groups as they were, for the next check."""
        pending = list(shard.groups)
        position = expired = removed = 0
        while position < len(pending):
            async with shard.lock:
                if self._shards.get(shard.index) is not shard:
                    return
                now = self._now()
                decisions: list[tuple[str, GroupDecision[None]]] = []
                records: list[group_records.CoordinatorRecord] = []
                while position < len(pending) and len(records) < EXPIRY_BATCH_RECORDS:
                    group_id = pending[position]
                    position += 1
                    group = shard.groups.get(group_id)
                    if group is None:
                        continue
                    decision = groups.expire_offsets(
                        group,
                        now=now,
                        retention_ms=self.settings.offsets_retention_ms,
                        pending=txn_offsets.pending_partitions(shard.pending, group_id),
                    )
                    if decision.records:
                        decisions.append((group_id, decision))
                        records.extend(decision.records)
                if not records:
                    continue
                appended, _error = await self._append(shard, records)
                if not appended or self._shards.get(shard.index) is not shard:
                    log.warning(
                        "Expiring committed offsets in %s-%d: %d records not written; tried again in %d ms",
                        OFFSETS_TOPIC,
                        shard.index,
                        len(records),
                        self.settings.offsets_retention_check_interval_ms,
                    )
                    return
                for group_id, decision in decisions:
                    self._apply(shard, group_id, decision, None)
                    removed += decision.group is None
                expired += sum(1 for r in records if isinstance(r.key, group_records.OffsetCommitKey))
        if expired or removed:
            log.info(
                "Expired %d committed offsets in %s-%d; removed %d empty consumer groups",
                expired,
                OFFSETS_TOPIC,
                shard.index,
                removed,
            )

    # -- the requests ---------------------------------------------------------------------------

    async def join(self, request: groups.JoinRequest) -> JoinAnswer:
        member_id = groups.new_member_id(request.client_id, request.instance_id, str(uuid.uuid4()))
        settings = self.settings.group

        return await self._decide(
            request.group_id,
            lambda group, now: groups.join(group, request, now=now, member_id=member_id, settings=settings),
            lambda e: JoinAnswer(e, request.member_id),
            parking=_Parking.JOIN,
        )

    async def sync(self, request: groups.SyncRequest) -> SyncAnswer:
        settings = self.settings.group

        return await self._decide(
            request.group_id,
            lambda group, now: groups.sync(group, request, now=now, settings=settings),
            SyncAnswer,
            parking=_Parking.SYNC,
        )

    async def heartbeat(self, request: groups.HeartbeatRequest) -> GroupError:
        settings = self.settings.group
        answer = await self._decide(
            request.group_id,
            lambda group, now: groups.heartbeat(group, request, now=now, settings=settings),
            lambda e: e,
        )
        # As Kafka: a heartbeat while the coordinator loads is answered without an error.
        return GroupError.NONE if answer is GroupError.COORDINATOR_LOAD_IN_PROGRESS else answer

    async def leave(self, group_id: str, members: Sequence[groups.LeavingMember]) -> groups.LeaveAnswer:
        settings = self.settings.group
        return await self._decide(
            group_id,
            lambda group, now: groups.leave(group, group_id, members, now=now, settings=settings),
            lambda e: groups.LeaveAnswer(e, ()),
        )

    async def commit(self, request: groups.CommitRequest) -> tuple[GroupError, ...]:
        settings = self.settings.group
        return await self._decide(
            request.group_id,
            lambda group, now: groups.commit(group, request, now=now, settings=settings),
            lambda e: tuple(e for _ in request.offsets),
        )

    async def txn_commit(self, request: txn_offsets.TxnCommitRequest) -> tuple[GroupError, ...]:
        """TxnOffsetCommit: validated (`txn_offsets.txn_commit`), written as a transactional batch
        of the producer (acks=-1), then pending until the producer's marker
        (`on_transaction_marker`)."""
        shard, error = self._shard_of(request.group_id)
        if shard is None:
            return tuple(error for _ in request.offsets)
        async with shard.lock:
            if self._shards.get(shard.index) is not shard:
                return tuple(GroupError.NOT_COORDINATOR for _ in request.offsets)
            decision = txn_offsets.txn_commit(
                shard.groups.get(request.group_id), request, now=self._now(), settings=self.settings.group
            )
            if not decision.records:
                return decision.answer
            written = await self._write(
                shard, decision.records, producer=(request.producer_id, request.producer_epoch)
            )
            if self._shards.get(shard.index) is not shard:
                return tuple(GroupError.NOT_COORDINATOR for _ in request.offsets)
            if written.appended:
                shard.pending = txn_offsets.add_pending(
                    shard.pending,
                    request.producer_id,
                    decision.pending,
                    first_record_offset=written.first_offset,
                )
        if written.error is not GroupError.NONE:
            return tuple(written.error for _ in request.offsets)
        return decision.answer

    async def on_transaction_marker(
        self, partition_index: int, producer_id: int, producer_epoch: int, committed: bool
    ) -> None:
        """A COMMIT (`committed`) or ABORT marker of `producer_id` was appended to partition
        `partition_index` of `__consumer_offsets` (by WriteTxnMarkers): its pending offsets there
        become the committed ones, or are dropped (`txn_offsets.end_transaction`). Nothing when this
        broker does not coordinate that partition (a load reads the marker from the log)."""
        shard = self._shards.get(partition_index)
        if shard is None:
            return
        async with shard.lock:
            if self._shards.get(partition_index) is not shard:
                return
            if not shard.loaded:  # the load may have read past it or not: applied after it
                shard.early_markers.append((producer_id, committed))
                return
            outcome = txn_offsets.end_transaction(
                shard.pending, shard.groups, producer_id, committed=committed
            )
            shard.pending = outcome.pending
            shard.groups.update(outcome.groups)
        if outcome.groups:
            log.debug(
                "Transaction of producer %d (epoch %d) %s offsets of groups %s in %s-%d",
                producer_id,
                producer_epoch,
                "committed" if committed else "aborted",
                sorted(outcome.groups),
                OFFSETS_TOPIC,
                partition_index,
            )

    async def delete_group(self, group_id: str) -> GroupError:
        settings = self.settings.group
        return await self._decide(
            group_id,
            lambda group, now: groups.delete(
                group, now=now, settings=settings, pending=self._pending_of(group_id)
            ),
            lambda e: e,
        )

    async def delete_offsets(
        self, group_id: str, topics: Sequence[tuple[str, Sequence[int]]]
    ) -> groups.OffsetDeleteAnswer:
        settings = self.settings.group
        return await self._decide(
            group_id,
            lambda group, now: groups.delete_offsets(
                group, topics, now=now, settings=settings, pending=self._pending_of(group_id)
            ),
            groups.OffsetDeleteAnswer,
        )

    # -- reads ----------------------------------------------------------------------------------

    def group(self, group_id: str) -> tuple[GroupError, Group | None]:
        """The group as it is now (None: none), or why this broker cannot say."""
        shard, error = self._shard_of(group_id)
        if shard is None:
            return error, None
        return GroupError.NONE, shard.groups.get(group_id)

    def offsets(
        self, group_id: str
    ) -> tuple[GroupError, Mapping[groups.TopicPartition, groups.CommittedOffset]]:
        error, group = self.group(group_id)
        return error, ({} if group is None else group.offsets)

    def _pending_of(self, group_id: str) -> frozenset[tuple[str, int]]:
        """The partitions with a pending transactional offset of the group (asked under its lock)."""
        shard = self._shards.get(self.partition_of(group_id))
        return frozenset() if shard is None else txn_offsets.pending_partitions(shard.pending, group_id)

    def has_pending(self, group_id: str, topic: str, partition: int) -> bool:
        """Whether a transaction's offset of that partition is pending (Kafka's
        `hasPendingTransactionalOffsets`: `require_stable` answers UNSTABLE_OFFSET_COMMIT)."""
        shard = self._shards.get(self.partition_of(group_id))
        return shard is not None and txn_offsets.has_pending(shard.pending, group_id, topic, partition)

    def all_groups(self) -> tuple[GroupError, list[Group]]:
        """Every group this broker coordinates; COORDINATOR_LOAD_IN_PROGRESS while one loads."""
        loading = any(not s.loaded for s in self._shards.values())
        found = [g for s in self._shards.values() if s.loaded for g in s.groups.values()]
        return (GroupError.COORDINATOR_LOAD_IN_PROGRESS if loading else GroupError.NONE), found


def _write_error(code: ProduceError) -> GroupError:
    """The answer to a group request whose records the ISR was not seen to hold: NOT_COORDINATOR
    when leadership or the dir went, else COORDINATOR_NOT_AVAILABLE (Kafka's mapping)."""
    lost = code in (
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    )
    return GroupError.NOT_COORDINATOR if lost else GroupError.COORDINATOR_NOT_AVAILABLE


def _park(shard: _Shard, group_id: str, member_id: str, waiter: _Waiter[A], parking: _Parking) -> None:
    """Register a waiting request; an earlier one of the same member is answered
    REBALANCE_IN_PROGRESS (superseded: its client went away)."""
    key = (group_id, member_id)
    if parking is _Parking.JOIN:
        joins: dict[tuple[str, str], _Waiter[A]] = shard.joins  # type: ignore[assignment]
        earlier_join = shard.joins.get(key)
        if earlier_join is not None:
            earlier_join.settle(JoinAnswer(GroupError.REBALANCE_IN_PROGRESS, member_id))
        joins[key] = waiter
    else:
        syncs: dict[tuple[str, str], _Waiter[A]] = shard.syncs  # type: ignore[assignment]
        earlier_sync = shard.syncs.get(key)
        if earlier_sync is not None:
            earlier_sync.settle(SyncAnswer(GroupError.REBALANCE_IN_PROGRESS))
        syncs[key] = waiter


def _forget(shard: _Shard, group_id: str, member_id: str | None, waiter: _Waiter[A] | None) -> None:
    """Unregister a parked request answered otherwise (its member still counts as waiting in the
    group: a later delivery to it finds no one, and its client rejoins)."""
    if member_id is None or waiter is None:
        return
    key = (group_id, member_id)
    if shard.joins.get(key) is waiter:
        del shard.joins[key]
    if shard.syncs.get(key) is waiter:
        del shard.syncs[key]


def _scan_chunk(scan: txn_offsets.LogScan, data: bytes, position: int) -> tuple[int, int]:
    """Note in `scan` each keyed record of the whole batches of `data` (read from `position`) at or
    after `position` (a transactional one held until its producer's marker, which a control batch
    brings), in log order: the offset after them, and how many records were read. A batch whose
    records do not decode is skipped with a WARNING."""
    read = 0
    view = memoryview(data)
    for header in record_batch.iter_headers(data, verify_crc=False):
        frame = view[header.position : header.position + header.size]
        if header.is_control:
            if header.is_transactional and header.record_count and header.base_offset >= position:
                try:
                    marker = control_records.read_marker(frame)
                except ValueError:
                    marker = None  # another control record: nothing for the groups
                if marker is not None:
                    scan.marker(marker.producer_id, committed=not marker.aborted)
        elif header.record_count:
            try:
                records = record_batch.stored_records(frame)
            except ValueError as exc:
                log.warning("Skipped a batch of %s that does not decode: %s", OFFSETS_TOPIC, exc)
                records = []
            producer = header.producer_id if header.is_transactional else None
            for record in records:
                if record.offset >= position and record.key is not None:
                    scan.record(record.key, record.value, record.offset, producer_id=producer)
                    read += 1
        position = header.next_offset
    return position, read


def _decoded_open(
    open_records: Mapping[int, Mapping[bytes, tuple[int, bytes | None]]],
) -> dict[int, dict[txn_offsets.OffsetKey, tuple[int, groups.CommittedOffset | None]]]:
    """The offset records of the transactions a load found open, decoded (others skipped)."""
    out: dict[int, dict[txn_offsets.OffsetKey, tuple[int, groups.CommittedOffset | None]]] = {}
    for producer_id, records in open_records.items():
        for key, (offset, value) in records.items():
            try:
                decoded = group_records.decode(key, value)
            except ValueError as exc:
                log.warning("Skipped record %d of %s: %s", offset, OFFSETS_TOPIC, exc)
                continue
            if decoded is None or not isinstance(decoded.key, group_records.OffsetCommitKey):
                continue
            v = decoded.value
            committed = (
                None
                if v is None
                else groups.CommittedOffset(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp_ms)  # type: ignore[union-attr]
            )
            k = decoded.key
            out.setdefault(producer_id, {})[(k.group, k.topic, k.partition)] = (offset, committed)
    return out


def _replay_latest(loader: groups.GroupLoader, latest: dict[bytes, tuple[int, bytes | None]]) -> int:
    """Replay the last record of each key in log order: the same groups as replaying every record
    (`GroupLoader` keeps the last value of each group and each offset, and two keys of one group
    or offset, written at different key versions, still replay in their order); the number of
    records skipped because they do not decode."""
    skipped = 0
    for key, (offset, value) in sorted(latest.items(), key=lambda item: item[1][0]):
        try:
            decoded = group_records.decode(key, value)
        except ValueError as exc:
            skipped += 1
            log.warning("Skipped record %d of %s: %s", offset, OFFSETS_TOPIC, exc)
            continue
        if decoded is not None:
            loader.replay(decoded)
    return skipped


def _log_change(group_id: str, before: Group | None, after: Group | None) -> None:
    if after is None:
        if before is not None:
            log.info("Removed consumer group %s", group_id)
        return
    if (0 if before is None else before.generation) != after.generation:
        log.info(
            "Moved consumer group %s to generation %d (%s, %d members)",
            group_id,
            after.generation,
            after.state.value,
            len(after.members),
        )
