"""Transactional offset commits (TxnOffsetCommit) of one `__consumer_offsets` partition: the
offsets a producer's open transaction commits, pending until its end-transaction marker, as Kafka
4.3.1's group coordinator keeps them (`OffsetMetadataManager`: pending transactional offsets per
producer id, made the committed ones by a COMMIT marker, dropped by an ABORT).

A TxnOffsetCommit is validated as Kafka's `validateTransactionalOffsetCommit` (`txn_commit_error`):
an unknown group with generation < 0 is a simple group (accepted; nothing is kept until an
offset is committed), an unknown group with generation >= 0 is ILLEGAL_GENERATION; a known group
with generation < 0 and an empty member id and no instance id is accepted in any state (a
producer that is no group member); otherwise the member (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID)
then the generation (ILLEGAL_GENERATION) are checked; a rebalance in progress is no error (the
transaction commits or aborts as a whole). Each partition's metadata longer than
`offset.metadata.max.bytes` is OFFSET_METADATA_TOO_LARGE; every other partition gets a record
(Kafka writes each, even unchanged), written as one transactional batch of the producer.

Ordering (Kafka's `replayEndTransactionMarker`): every offset, pending or committed, remembers the
log offset of its record. A COMMIT marker makes each of the producer's pending offsets the
committed one only if its record is after the record of the offset committed now (so a plain
OffsetCommit written while the transaction was open wins, as in Kafka, whatever the order of
markers); an offset tombstone (OffsetDelete, DeleteGroups, expiry) removes the committed offset and
every producer's pending offset of that partition.

Loading (`LogScan`): replaying a partition's records in log order, the last record of each key
that is not transactional is noted; a transactional record is held per producer id until its
marker: COMMIT notes it as the key's last record if it is after the one noted (the rule above),
ABORT drops it, an offset tombstone drops the key's held records (as it drops pending offsets);
records of a transaction still open at the end of the log stay pending. So a
reload gives the same committed and pending offsets as the live coordinator had, decoding only
the records that survive.

Guarantees:
* Pure: frozen values in and out (`PendingOffsets`), no I/O, no clock; record offsets come in as
  parameters. Every function returns new values and never changes its arguments, except `LogScan`,
  an accumulator owned by one load.
* `has_pending` is Kafka's `hasPendingTransactionalOffsets`: OffsetFetch with `require_stable`
  answers UNSTABLE_OFFSET_COMMIT (88) for such a partition.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeAlias

from jbod_core import group_records
from jbod_core.group_records import CoordinatorRecord, OffsetCommitKey, OffsetCommitValue
from jbod_core.groups import (
    CommittedOffset,
    Group,
    GroupError,
    GroupSettings,
    GroupState,
    Now,
    OffsetToCommit,
    member_generation_error,
)
from jbod_core.producer_state import ProducedBatch, ProduceErrorCode, ProducerState, Refused

#: group, topic, partition
OffsetKey: TypeAlias = tuple[str, str, int]


@dataclass(frozen=True, slots=True)
class PendingOffset:
    offset: CommittedOffset
    record_offset: int  # the log offset of its record


@dataclass(frozen=True, slots=True)
class PendingOffsets:
    """The pending transactional offsets of one `__consumer_offsets` partition, by producer id, and
    the log offset of the record of each committed offset that matters for them."""

    by_producer: Mapping[int, Mapping[OffsetKey, PendingOffset]] = field(default_factory=dict)
    committed_at: Mapping[OffsetKey, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TxnCommitRequest:
    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    generation: int  # -1: a producer that is no group member (or v0-2, which has no generation)
    member_id: str
    instance_id: str | None
    offsets: tuple[OffsetToCommit, ...]


@dataclass(frozen=True, slots=True)
class TxnCommitDecision:
    """The answer per offset (in request order), and the records to write as one transactional
    batch of the producer: `pending[i]` is the offset of `records[i]`."""

    answer: tuple[GroupError, ...]
    records: tuple[CoordinatorRecord, ...] = ()
    pending: tuple[tuple[OffsetKey, CommittedOffset], ...] = ()


def txn_commit_error(group: Group | None, request: TxnCommitRequest) -> GroupError:
    """Kafka's `validateTransactionalOffsetCommit` on a classic group."""
    if not request.group_id:
        return GroupError.INVALID_GROUP_ID
    if group is None:
        return GroupError.NONE if request.generation < 0 else GroupError.ILLEGAL_GENERATION
    if request.generation < 0 and group.state is GroupState.EMPTY:
        return GroupError.NONE
    if request.generation >= 0 or request.member_id or request.instance_id is not None:
        return member_generation_error(group, request.member_id, request.instance_id, request.generation)
    return GroupError.NONE


def txn_commit(
    group: Group | None, request: TxnCommitRequest, *, now: Now, settings: GroupSettings
) -> TxnCommitDecision:
    """TxnOffsetCommit: an error for every partition, or each partition's own."""
    error = txn_commit_error(group, request)
    if error is not GroupError.NONE:
        return TxnCommitDecision(tuple(error for _ in request.offsets))
    answer: list[GroupError] = []
    records: list[CoordinatorRecord] = []
    pending: list[tuple[OffsetKey, CommittedOffset]] = []
    for item in request.offsets:
        metadata = item.metadata or ""
        if len(metadata) > settings.offset_metadata_max_bytes:
            answer.append(GroupError.OFFSET_METADATA_TOO_LARGE)
            continue
        answer.append(GroupError.NONE)
        value = OffsetCommitValue(item.offset, item.leader_epoch, metadata, now.wall_ms)
        records.append(group_records.offset_commit(request.group_id, item.topic, item.partition, value))
        committed = CommittedOffset(item.offset, item.leader_epoch, metadata, now.wall_ms)
        pending.append(((request.group_id, item.topic, item.partition), committed))
    return TxnCommitDecision(tuple(answer), tuple(records), tuple(pending))


def add_pending(
    state: PendingOffsets,
    producer_id: int,
    offsets: Sequence[tuple[OffsetKey, CommittedOffset]],
    *,
    first_record_offset: int,
) -> PendingOffsets:
    """`state` after the records of `offsets` were written from `first_record_offset` on (one per
    offset, in order) in a transaction of `producer_id`: a later one of a key replaces its pending
    offset."""
    if not offsets:
        return state
    mine = dict(state.by_producer.get(producer_id, {}))
    for i, (key, committed) in enumerate(offsets):
        mine[key] = PendingOffset(committed, first_record_offset + i)
    return replace(state, by_producer={**state.by_producer, producer_id: mine})


def replay_committed(
    state: PendingOffsets, records: Iterable[tuple[CoordinatorRecord, int]]
) -> PendingOffsets:
    """`state` after non-transactional `records` (each with its log offset) took effect: an offset
    commit notes its record's offset; an offset tombstone forgets it and drops every producer's
    pending offset of that partition (Kafka's replay of an offset tombstone)."""
    committed_at = dict(state.committed_at)
    by_producer: dict[int, Mapping[OffsetKey, PendingOffset]] | None = None
    for record, record_offset in records:
        key = record.key
        if not isinstance(key, OffsetCommitKey):
            continue
        offset_key = (key.group, key.topic, key.partition)
        if record.value is not None:
            committed_at[offset_key] = record_offset
            continue
        committed_at.pop(offset_key, None)
        current = state.by_producer if by_producer is None else by_producer
        if any(offset_key in pending for pending in current.values()):
            by_producer = {
                pid: kept
                for pid, pending in current.items()
                if (kept := {k: v for k, v in pending.items() if k != offset_key})
            }
    return PendingOffsets(state.by_producer if by_producer is None else by_producer, committed_at)


@dataclass(frozen=True, slots=True)
class MarkerOutcome:
    """What an end-transaction marker changed: the pending offsets afterwards and the groups whose
    committed offsets it changed, as they are now."""

    pending: PendingOffsets
    groups: Mapping[str, Group]


def end_transaction(
    state: PendingOffsets, groups: Mapping[str, Group], producer_id: int, *, committed: bool
) -> MarkerOutcome:
    """The producer's COMMIT (`committed`) or ABORT marker: its pending offsets become the committed
    ones where their record is after the committed offset's (the module's ordering), or are
    dropped."""
    mine = state.by_producer.get(producer_id)
    if mine is None:
        return MarkerOutcome(state, {})
    by_producer = {pid: pending for pid, pending in state.by_producer.items() if pid != producer_id}
    if not committed:
        return MarkerOutcome(replace(state, by_producer=by_producer), {})
    committed_at = dict(state.committed_at)
    changed: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
    for (group_id, topic, partition), entry in sorted(mine.items(), key=lambda item: item[1].record_offset):
        key = (group_id, topic, partition)
        if entry.record_offset <= committed_at.get(key, -1):
            continue
        committed_at[key] = entry.record_offset
        if group_id not in changed:
            group = groups.get(group_id)
            changed[group_id] = dict(group.offsets) if group is not None else {}
        changed[group_id][(topic, partition)] = entry.offset
    after = {
        group_id: replace(groups.get(group_id) or Group(group_id), offsets=offsets)
        for group_id, offsets in changed.items()
    }
    return MarkerOutcome(PendingOffsets(by_producer, committed_at), after)


def pending_partitions(state: PendingOffsets, group_id: str) -> frozenset[tuple[str, int]]:
    """The partitions (topic, partition) with a pending offset of `group_id` (they do not expire)."""
    return frozenset((t, p) for mine in state.by_producer.values() for (g, t, p) in mine if g == group_id)


def has_pending(state: PendingOffsets, group_id: str, topic: str, partition: int) -> bool:
    key = (group_id, topic, partition)
    return any(key in pending for pending in state.by_producer.values())


# --- Loading -----------------------------------------------------------------------------------

Noted: TypeAlias = tuple[int, bytes | None]  # a record's log offset and value


class LogScan:
    """The records of a `__consumer_offsets` partition that a load replays, read in log order
    (the module's loading rule): `latest` is the last record of each key that took effect,
    `open` the records of each producer's transaction still open (by key: the last one)."""

    def __init__(self) -> None:
        self.latest: dict[bytes, Noted] = {}
        self.open: dict[int, dict[bytes, Noted]] = {}

    def record(self, key: bytes, value: bytes | None, offset: int, *, producer_id: int | None) -> None:
        """A keyed record at `offset`; `producer_id` for one of a transactional batch."""
        if producer_id is None:
            self.latest[key] = (offset, value)
            if value is None:  # a tombstone drops the key's pending offsets
                for records in self.open.values():
                    records.pop(key, None)
        else:
            self.open.setdefault(producer_id, {})[key] = (offset, value)

    def marker(self, producer_id: int, *, committed: bool) -> None:
        records = self.open.pop(producer_id, None)
        if not committed or records is None:
            return
        latest = self.latest
        for key, noted in sorted(records.items(), key=lambda item: item[1][0]):
            before = latest.get(key)
            if before is None or noted[0] > before[0]:
                latest[key] = noted


def loaded_pending(
    latest: Mapping[bytes, Noted],
    open_records: Mapping[int, Mapping[OffsetKey, tuple[int, CommittedOffset | None]]],
) -> PendingOffsets:
    """The pending offsets after a load: each open transaction's offset records (decoded, by key;
    a tombstone in a transaction is dropped; `LogScan` already dropped those a later tombstone
    removed), and the record offsets of the committed offsets of their keys."""
    by_producer: dict[int, dict[OffsetKey, PendingOffset]] = {}
    committed_at: dict[OffsetKey, int] = {}
    for producer_id, records in open_records.items():
        mine: dict[OffsetKey, PendingOffset] = {}
        for key, (record_offset, committed) in records.items():
            raw = group_records.encode_key(OffsetCommitKey(*key))
            noted = latest.get(raw)
            if noted is not None and noted[1] is not None:
                committed_at[key] = noted[0]
            if committed is not None:
                mine[key] = PendingOffset(committed, record_offset)
        if mine:
            by_producer[producer_id] = mine
    return PendingOffsets(by_producer, committed_at)


# --- The coordinator's own writes --------------------------------------------------------------


def coordinator_epoch_refusal(state: ProducerState, batch: ProducedBatch) -> Refused | None:
    """A batch the group coordinator writes for a producer (Kafka's COORDINATOR origin) is checked
    for the producer's epoch only, not its sequence: INVALID_PRODUCER_EPOCH when the partition
    has seen a newer epoch of the producer (a zombie's TxnOffsetCommit), else None."""
    entry = state.producers.get(batch.producer_id)
    if entry is not None and batch.producer_epoch < entry.producer_epoch:
        return Refused(
            ProduceErrorCode.INVALID_PRODUCER_EPOCH,
            f"Epoch of producer {batch.producer_id} is {batch.producer_epoch}, which is smaller than the "
            f"last seen epoch {entry.producer_epoch}",
        )
    return None
