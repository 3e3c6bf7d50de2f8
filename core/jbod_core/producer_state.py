"""Kafka's producer state of one partition, idempotent and transactional: decide a produced batch or
an end-transaction marker, then record it.

This is what Kafka's `ProducerStateManager`, `ProducerAppendInfo` and `ProducerStateEntry` keep and
decide. Per producer id: its epoch, the metadata of its last `NUM_BATCHES_TO_RETAIN` (5) batches of
that epoch, when it was last active, the coordinator epoch of its last marker, and the first offset
of its ongoing transaction (Kafka's `currentTxnFirstOffset`). A transactional data batch starts a
transaction when the producer has none; its commit or abort marker (a control batch,
`jbod_kafka.control_records`) ends it. The partition's first unstable offset is the smallest first
offset of an ongoing transaction (`first_unstable_offset`); the last stable offset and the aborted
transactions index are `jbod_core.txn_index`'s.

`check(state, batch)` decides a produced batch or a marker before it is appended, in Kafka's order
(the duplicate lookup of `UnifiedLog.analyzeAndValidateProducerState`, then `LogValidator`'s
sequence check, then `ProducerAppendInfo.checkProducerEpoch`, `checkSequence` and, for a data batch,
the transaction state of `appendDataBatch`; for a marker `checkProducerEpoch` and
`checkCoordinatorEpoch`). The first row that matches decides:

| batch                                                   | verdict                                |
|---------------------------------------------------------|----------------------------------------|
| no producer id (< 0)                                    | Append NOT_IDEMPOTENT (not tracked)    |
| marker, epoch lower than the producer's (transaction    | Refused INVALID_PRODUCER_EPOCH 47      |
| version 2: not higher, unless equal with no ongoing     |                                        |
| transaction, a retried marker: KAFKA-19999)             |                                        |
| marker, coordinator epoch lower than the producer's     | Refused TRANSACTION_COORDINATOR_FENCED |
|                                                         | 52                                     |
| any other marker                                        | Append END_TRANSACTION                 |
| base sequence < 0                                       | Refused INVALID_RECORD 87              |
| same epoch and same first and last sequence as one of   | Duplicate, with that batch's original  |
| the producer's retained batches                         | offsets: never appended again          |
| epoch lower than the producer's                         | Refused INVALID_PRODUCER_EPOCH 47      |
| producer known (epoch not -1), higher epoch, base       | Refused OUT_OF_ORDER_SEQUENCE_NUMBER 45|
| sequence not 0                                          |                                        |
| producer known, same epoch, base not last sequence + 1  | Refused OUT_OF_ORDER_SEQUENCE_NUMBER 45|
| (2^31-1 wraps to 0; no batch retained: not 0)           |                                        |
| not transactional, the producer has an ongoing          | Refused INVALID_TXN_STATE 48           |
| transaction                                             |                                        |
| producer unknown (or its epoch is -1)                   | Append NO_PRODUCER_STATE, any sequence |
| higher epoch (base sequence 0)                          | Append NEW_EPOCH                       |
| same epoch, the next sequence                           | Append NEXT_SEQUENCE                   |

A transactional batch of a producer with no ongoing transaction is appended and starts one, as in
`ProducerAppendInfo`. Kafka 4.3.1 refuses such a batch from a client (INVALID_TXN_STATE) unless
the partition verified it with the transaction coordinator first (KIP-890 part 1,
`transaction.partition.verification.enable`): that verification is not partition-local and is the
produce path's, before `check` (`jbod_core.txn_verification`); so is the refusal of a
transactional batch from a client that is not authorized or not transactional.
A marker is checked with the `transaction_version` of its WriteTxnMarkers request (Kafka's
`checkProducerEpoch`: versions 0 and 1 accept a marker of the producer's epoch or higher, version 2
only a higher one, the coordinator having bumped the epoch, or a retry of the last marker).

An unknown producer id is accepted with any first sequence and UNKNOWN_PRODUCER_ID (59) is never
answered: that is Kafka since 2.5 (KIP-360, KAFKA-8805), checked against Kafka 4.3.1's
`ProducerAppendInfo.checkSequence` — the branch that refused a non-zero first sequence of a
producer without state with UnknownProducerIdException was removed then; the only refusal of that
shape left is for transactions v2 (`verificationStateEntry.supportsEpochBump()`), which never
applies to a non-transactional batch. A producer whose state expired therefore continues where it
was, which is what the Java producer and librdkafka expect of a Kafka >= 2.5 broker. A producer
that has state but no retained batch (its last marker bumped the epoch, or was its only record
here) must start at sequence 0, as in Kafka.

Guarantees:
* Pure values, no I/O, no clock: `ProducerState` and everything in it are frozen; every function
  returns a new state and never changes its argument. Time enters only as `now_ms` parameters.
  Cost: `record` copies the producer mapping, O(producers of the partition) per append.
* One mutation path: `record` is the only way a batch or marker enters the state — on the leader
  after an append that `check` allowed, on a follower for every replicated batch (unchecked, as
  Kafka's REPLICATION origin), and in `from_batches`, which is a fold of `record` over the log. Like
  Kafka's `ProducerStateEntry.addBatch`, a batch of another epoch replaces the producer's retained
  batches; at most the last 5 are kept, oldest dropped first. A marker (`ProducerStateEntry.update`)
  ends the producer's ongoing transaction, takes its epoch (a new epoch drops the retained batches)
  and its coordinator epoch, and retains no batch. `record` fails loudly (ValueError) on an
  impossible batch: a value out of its wire range, a batch not after the producer's last one, a
  control batch that is not given as its marker, or a non-transactional batch of a producer with
  an ongoing transaction (Kafka's `InvalidTxnStateException`, raised on every origin).
* `completed_txn(state, marker, offset=...)`, asked before the marker is recorded, is the
  transaction the marker completes (Kafka's `CompletedTxn`: producer id, first offset, the marker's
  offset as last offset, aborted or not), or None when the producer had no ongoing transaction
  here (an empty transaction: nothing for the LSO or the aborted index).
* Every retained producer has 0 to 5 batches, of its current epoch only, in log order (none after
  a marker of a new epoch, or a marker that was its only record here).
* `first_unstable_offset(state)` is the smallest first offset of an ongoing transaction, or None.
* Sequences are Kafka's: last sequence = base + last offset delta, wrapping from 2^31-1 to 0
  (`DefaultRecordBatch.incrementSequence`). The last offset delta, not the record count, gives the
  span, as in Kafka: a compacted batch keeps its delta.
* `from_batches(log)` equals the state that `record` built for the same batches when each append's
  `now_ms` was the batch's max timestamp: the log holds no other time, so a rebuilt producer's last
  activity is its last batch's max timestamp (Kafka's `ProducerStateEntry.lastTimestamp`). Its
  control batches must come as their markers (`jbod_kafka.control_records.read_marker`); a control
  batch with no record (what a cleaned log keeps) is skipped by the caller, as Kafka skips it.
* `truncate(state, end)` drops every retained batch that ends at or after `end` (a log truncates
  whole batches), every ongoing transaction that starts at or after `end`, and every producer left
  with neither; the rest is unchanged. It is exact unless a producer's older, no longer retained
  batches remain below `end`: such a producer is forgotten (then accepted with any sequence, as
  above), or, when it still has an ongoing transaction, kept with no batch (then its next batch
  must start at sequence 0) where a rebuild from the log would know it. It must not be used when
  the truncated suffix holds a marker (the transaction that marker ended is ongoing again, and the
  state no longer knows where it began): a caller then replays the log from a snapshot at or below
  `end`, as Kafka always does (`ProducerStateManager.truncateAndReload`).
* `expire` drops producers whose last activity is `producer.id.expiration.ms` or longer ago and
  that have no ongoing transaction (Kafka's `isProducerExpired`, `>=`).
* `decode_snapshot(encode_snapshot(s)) == s` for every state; `decode_snapshot` raises ValueError,
  never anything else, for bytes that are not exactly a snapshot this module wrote (version, CRC-32,
  lengths, ranges, order), and the caller then rebuilds from the log. Unlike Kafka's snapshot
  (the last batch per producer), all 5 retained batches are kept, so duplicates are still found
  after a restart. Version 1 snapshots (before transactions) still decode: no coordinator epoch
  (-1), no ongoing transaction, 1 to 5 batches per producer.

Snapshot format (big-endian), version 2:

    version u16 | crc u32 (zlib CRC-32 of everything after it) | producer count u32 |
    per producer, ascending producer id:
        producer id i64 | epoch i16 | coordinator epoch i32 | last active ms i64 |
        ongoing transaction's first offset i64 (-1: none) | batch count u8 (0-5) |
        per batch, in log order:
            first sequence i32 | last offset delta i32 | first offset i64 | max timestamp ms i64

Version 1 is version 2 without the coordinator epoch and the ongoing transaction's first offset.
"""

from __future__ import annotations

import enum
import struct
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, Protocol, TypeAlias, runtime_checkable

NUM_BATCHES_TO_RETAIN: Final = 5
MAX_SEQUENCE: Final = 2**31 - 1
NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1
NO_COORDINATOR_EPOCH: Final = -1  # a producer no marker was recorded for (Kafka's entry default)
DEFAULT_PRODUCER_ID_EXPIRATION_MS: Final = 86_400_000  # producer.id.expiration.ms
SNAPSHOT_VERSION: Final = 2
ABORT: Final = 0  # the control record types of a marker (Kafka's ControlRecordType)
COMMIT: Final = 1

_MIN_I16, _MAX_I16 = -(2**15), 2**15 - 1
_MIN_I32, _MAX_I32 = -(2**31), 2**31 - 1
_MIN_I64, _MAX_I64 = -(2**63), 2**63 - 1

_SNAPSHOT_HEADER: Final = struct.Struct(">HII")
_PRODUCER_V1: Final = struct.Struct(">qhqB")
_PRODUCER: Final = struct.Struct(">qhiqqB")
_BATCH: Final = struct.Struct(">iiqq")
_CRC_END: Final = 6  # the CRC covers data[_CRC_END:]


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's `DefaultRecordBatch.incrementSequence`: `sequence + increment`, 2^31-1 wrapping to 0."""
    if sequence > MAX_SEQUENCE - increment:
        return increment - (MAX_SEQUENCE - sequence) - 1
    return sequence + increment


def _in_sequence(last_sequence: int, next_sequence: int) -> bool:
    """Kafka's `ProducerAppendInfo.inSequence`."""
    return next_sequence == last_sequence + 1 or (next_sequence == 0 and last_sequence == MAX_SEQUENCE)


class ProducedBatch(Protocol):
    """The header fields a produced batch is decided and recorded by
    (`jbod_kafka.record_batch.BatchHeader` is one)."""

    @property
    def producer_id(self) -> int: ...
    @property
    def producer_epoch(self) -> int: ...
    @property
    def base_sequence(self) -> int: ...
    @property
    def last_offset_delta(self) -> int: ...
    @property
    def max_timestamp_ms(self) -> int: ...
    @property
    def is_transactional(self) -> bool: ...
    @property
    def is_control(self) -> bool: ...


class LoggedBatch(ProducedBatch, Protocol):
    """A batch in the log: a produced batch with its offset."""

    @property
    def base_offset(self) -> int: ...


@runtime_checkable
class EndTxnMarker(LoggedBatch, Protocol):
    """An end-transaction marker: a control batch's header with its record's two fields
    (`jbod_kafka.control_records.Marker` is one)."""

    @property
    def control_type(self) -> int: ...  # ABORT (0) or COMMIT (1)
    @property
    def coordinator_epoch(self) -> int: ...


def _marker(batch: ProducedBatch) -> EndTxnMarker:
    if not isinstance(batch, EndTxnMarker):
        raise ValueError(
            f"The control batch of producer {batch.producer_id} is not given as its end-transaction marker"
        )
    if batch.control_type not in (ABORT, COMMIT):
        raise ValueError(f"Control type {batch.control_type} is not an end-transaction marker")
    return batch


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """One retained batch of a producer (Kafka's `BatchMetadata`)."""

    first_sequence: int
    last_offset_delta: int
    first_offset: int
    max_timestamp_ms: int

    def __post_init__(self) -> None:
        if not 0 <= self.first_sequence <= MAX_SEQUENCE:
            raise ValueError(f"Sequence {self.first_sequence} is out of range")
        if not 0 <= self.last_offset_delta <= MAX_SEQUENCE:
            raise ValueError(f"Last offset delta {self.last_offset_delta} is out of range")
        if not 0 <= self.first_offset <= _MAX_I64 - self.last_offset_delta:
            raise ValueError(f"Offset {self.first_offset} is out of range")
        if not _MIN_I64 <= self.max_timestamp_ms <= _MAX_I64:
            raise ValueError(f"Timestamp {self.max_timestamp_ms} is out of range")

    @property
    def last_sequence(self) -> int:
        return increment_sequence(self.first_sequence, self.last_offset_delta)

    @property
    def last_offset(self) -> int:
        return self.first_offset + self.last_offset_delta


@dataclass(frozen=True, slots=True)
class ProducerEntry:
    """What a partition keeps of one producer id."""

    producer_epoch: int
    batches: tuple[BatchMetadata, ...]  # 0 to NUM_BATCHES_TO_RETAIN, of this epoch, in log order
    last_active_ms: int
    coordinator_epoch: int = NO_COORDINATOR_EPOCH  # of the last marker recorded
    current_txn_first_offset: int | None = None  # the ongoing transaction's first offset

    def __post_init__(self) -> None:
        if not _MIN_I16 <= self.producer_epoch <= _MAX_I16:
            raise ValueError(f"Producer epoch {self.producer_epoch} is out of range")
        if len(self.batches) > NUM_BATCHES_TO_RETAIN:
            raise ValueError(
                f"A producer keeps 0 to {NUM_BATCHES_TO_RETAIN} batches, not {len(self.batches)}"
            )
        for before, after in zip(self.batches, self.batches[1:], strict=False):
            if after.first_offset <= before.last_offset:
                raise ValueError(
                    f"Batch at offset {after.first_offset} is not after offset {before.last_offset}"
                )
        if not _MIN_I64 <= self.last_active_ms <= _MAX_I64:
            raise ValueError(f"Timestamp {self.last_active_ms} is out of range")
        if not _MIN_I32 <= self.coordinator_epoch <= _MAX_I32:
            raise ValueError(f"Coordinator epoch {self.coordinator_epoch} is out of range")
        first = self.current_txn_first_offset
        if first is not None and not 0 <= first <= _MAX_I64:
            raise ValueError(f"Transaction first offset {first} is out of range")

    @property
    def last_sequence(self) -> int:
        """The last sequence of the last retained batch (-1, Kafka's NO_SEQUENCE, with none)."""
        return self.batches[-1].last_sequence if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        """The last offset of the last retained batch, or -1."""
        return self.batches[-1].last_offset if self.batches else -1


def _frozen(producers: Mapping[int, ProducerEntry]) -> Mapping[int, ProducerEntry]:
    return MappingProxyType(dict(producers))


@dataclass(frozen=True, slots=True)
class ProducerState:
    """The idempotent and transactional producers of one partition, by producer id (a read-only
    mapping)."""

    producers: Mapping[int, ProducerEntry] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if type(self.producers) is not MappingProxyType:
            object.__setattr__(self, "producers", _frozen(self.producers))


EMPTY: Final = ProducerState()


def _state(producers: dict[int, ProducerEntry]) -> ProducerState:
    """A state over a dict this module just built and hands over (no second copy)."""
    return ProducerState(MappingProxyType(producers))


# --- Decisions ---------------------------------------------------------------------------------


class ProduceErrorCode(enum.IntEnum):
    """Kafka's error codes that a producer-state check, or a transactional batch's verification
    with its coordinator (`txn_verification`), answers."""

    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    TRANSACTION_COORDINATOR_FENCED = 52
    INVALID_RECORD = 87
    TRANSACTION_ABORTABLE = 120


class AppendReason(enum.Enum):
    NOT_IDEMPOTENT = "no producer id"
    NO_PRODUCER_STATE = "producer without state: any first sequence"
    NEW_EPOCH = "new epoch starting at sequence 0"
    NEXT_SEQUENCE = "next sequence of the epoch"
    END_TRANSACTION = "an end-transaction marker"
    COORDINATOR = "a group coordinator's batch: its epoch checked only (txn_offsets)"


@dataclass(frozen=True, slots=True)
class Append:
    """Append the batch, then `record` it."""

    reason: AppendReason


@dataclass(frozen=True, slots=True)
class Duplicate:
    """The batch was appended before: answer success with its original offsets, append nothing."""

    first_offset: int
    last_offset: int
    max_timestamp_ms: int


@dataclass(frozen=True, slots=True)
class Refused:
    """Answer the partition with `error` and `message` (the produce response's error message)."""

    error: ProduceErrorCode
    message: str


Verdict: TypeAlias = Append | Duplicate | Refused


def check(state: ProducerState, batch: ProducedBatch, *, transaction_version: int | None = None) -> Verdict:
    """Decide `batch` (a produced batch, or a marker with its WriteTxnMarkers request's
    `transaction_version`, before its append) against `state`; see the module's table."""
    producer_id = batch.producer_id
    if producer_id < 0:
        return Append(AppendReason.NOT_IDEMPOTENT)
    entry = state.producers.get(producer_id)
    if batch.is_control:
        if transaction_version is None:
            raise ValueError("A marker is checked with its request's transaction version")
        return _check_marker(entry, _marker(batch), transaction_version)
    return _check_data(entry, batch)


def _check_marker(entry: ProducerEntry | None, marker: EndTxnMarker, transaction_version: int) -> Verdict:
    """The marker rows of the table (Kafka's `appendEndTxnMarker` checks)."""
    if entry is None:
        return Append(AppendReason.END_TRANSACTION)
    epoch, current = marker.producer_epoch, entry.producer_epoch
    if transaction_version >= 2:
        retried = epoch == current and entry.current_txn_first_offset is None
        fenced = epoch <= current and not retried
    else:
        fenced = epoch < current
    if fenced:
        comparison = "<=" if transaction_version >= 2 else "<"
        return Refused(
            ProduceErrorCode.INVALID_PRODUCER_EPOCH,
            f"Epoch of producer {marker.producer_id} is {epoch}, which is {comparison} the last seen epoch "
            f"{current} (TV{transaction_version})",
        )
    if marker.coordinator_epoch < entry.coordinator_epoch:
        return Refused(
            ProduceErrorCode.TRANSACTION_COORDINATOR_FENCED,
            f"Invalid coordinator epoch for producerId {marker.producer_id}: {marker.coordinator_epoch} "
            f"(zombie), {entry.coordinator_epoch} (current)",
        )
    return Append(AppendReason.END_TRANSACTION)


def _check_data(entry: ProducerEntry | None, batch: ProducedBatch) -> Verdict:  # noqa: PLR0911  the module docstring's table: a return per row
    """The data rows of the table."""
    producer_id, epoch, base = batch.producer_id, batch.producer_epoch, batch.base_sequence
    if base < 0:
        return Refused(
            ProduceErrorCode.INVALID_RECORD,
            f"Invalid sequence number {base} in record batch with producerId {producer_id}",
        )
    current_epoch = NO_PRODUCER_EPOCH if entry is None else entry.producer_epoch
    if entry is not None and epoch == current_epoch:
        last = increment_sequence(base, batch.last_offset_delta)
        for kept in entry.batches:
            if kept.first_sequence == base and kept.last_sequence == last:
                return Duplicate(kept.first_offset, kept.last_offset, kept.max_timestamp_ms)
    if epoch < current_epoch:
        return Refused(
            ProduceErrorCode.INVALID_PRODUCER_EPOCH,
            f"Epoch of producer {producer_id} is {epoch}, which is smaller than the last seen epoch "
            f"{current_epoch}",
        )
    known = entry is not None and current_epoch != NO_PRODUCER_EPOCH
    if known and entry is not None:
        if epoch != current_epoch and base != 0:
            return Refused(
                ProduceErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"Invalid sequence number for new epoch of producer {producer_id}: {epoch} (request "
                f"epoch), {base} (seq. number), {current_epoch} (current producer epoch)",
            )
        if epoch == current_epoch and not _in_sequence(entry.last_sequence, base):
            return Refused(
                ProduceErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"Out of order sequence number for producer {producer_id}: {base} (incoming seq. number), "
                f"{entry.last_sequence} (current end sequence number)",
            )
    if entry is not None and entry.current_txn_first_offset is not None and not batch.is_transactional:
        return Refused(
            ProduceErrorCode.INVALID_TXN_STATE,
            f"Expected transactional write from producer {producer_id}: its transaction at offset "
            f"{entry.current_txn_first_offset} is ongoing",
        )
    if not known:
        return Append(AppendReason.NO_PRODUCER_STATE)
    if epoch != current_epoch:
        return Append(AppendReason.NEW_EPOCH)
    return Append(AppendReason.NEXT_SEQUENCE)


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker completed (Kafka's `CompletedTxn`): its producer, first offset, the
    marker's offset as last offset, and whether it was aborted."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


def completed_txn(state: ProducerState, marker: EndTxnMarker, *, offset: int) -> CompletedTxn | None:
    """The transaction `marker`, appended at `offset`, completes in `state` (before it is
    recorded); None when its producer had no ongoing transaction (an empty transaction)."""
    marker = _marker(marker)
    entry = state.producers.get(marker.producer_id)
    if entry is None or entry.current_txn_first_offset is None:
        return None
    return CompletedTxn(
        marker.producer_id, entry.current_txn_first_offset, offset, aborted=marker.control_type == ABORT
    )


def first_unstable_offset(state: ProducerState) -> int | None:
    """The smallest first offset of an ongoing transaction (Kafka's first unstable offset), or None."""
    ongoing = [
        e.current_txn_first_offset for e in state.producers.values() if e.current_txn_first_offset is not None
    ]
    return min(ongoing) if ongoing else None


def ongoing_transactions(state: ProducerState) -> dict[int, int]:
    """The first offset of every ongoing transaction, by producer id."""
    return {
        producer_id: entry.current_txn_first_offset
        for producer_id, entry in state.producers.items()
        if entry.current_txn_first_offset is not None
    }


# --- The one mutation path, and what is built on it ----------------------------------------------


def record(state: ProducerState, batch: ProducedBatch, *, first_offset: int, now_ms: int) -> ProducerState:
    """`state` after `batch` (a data batch, or a marker as `EndTxnMarker`) was appended at
    `first_offset` at `now_ms` (the producer's last activity). A batch without producer id leaves
    the state as it is."""
    producer_id = batch.producer_id
    if producer_id < 0:
        return state
    if producer_id > _MAX_I64:
        raise ValueError(f"Producer id {producer_id} is out of range")
    entry = state.producers.get(producer_id)
    if entry is not None:
        after = max(
            entry.last_offset,
            -1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset,
        )
        if first_offset <= after:
            raise ValueError(
                f"Batch of producer {producer_id} at offset {first_offset} is not after its last batch, "
                f"which ends at offset {after}"
            )
    if batch.is_control:
        marker = _marker(batch)
        same_epoch = entry is not None and entry.producer_epoch == marker.producer_epoch
        updated = ProducerEntry(
            marker.producer_epoch,
            entry.batches if entry is not None and same_epoch else (),
            now_ms,
            coordinator_epoch=marker.coordinator_epoch,
        )
    else:
        updated = _with_data_batch(entry, batch, first_offset=first_offset, now_ms=now_ms)
    producers = dict(state.producers)
    producers[producer_id] = updated
    return _state(producers)


def _with_data_batch(
    entry: ProducerEntry | None, batch: ProducedBatch, *, first_offset: int, now_ms: int
) -> ProducerEntry:
    kept = BatchMetadata(batch.base_sequence, batch.last_offset_delta, first_offset, batch.max_timestamp_ms)
    if entry is None:
        return ProducerEntry(
            batch.producer_epoch,
            (kept,),
            now_ms,
            current_txn_first_offset=first_offset if batch.is_transactional else None,
        )
    if entry.producer_epoch != batch.producer_epoch:
        batches: tuple[BatchMetadata, ...] = (kept,)
    else:
        batches = (*entry.batches[1 - NUM_BATCHES_TO_RETAIN :], kept)
    ongoing = entry.current_txn_first_offset
    if ongoing is not None and not batch.is_transactional:
        raise ValueError(
            f"Non-transactional batch of producer {batch.producer_id} at offset {first_offset} while its "
            f"transaction at offset {ongoing} is ongoing"
        )
    if ongoing is None and batch.is_transactional:
        ongoing = first_offset
    return ProducerEntry(
        batch.producer_epoch,
        batches,
        now_ms,
        coordinator_epoch=entry.coordinator_epoch,
        current_txn_first_offset=ongoing,
    )


def from_batches(batches: Iterable[LoggedBatch], *, start: ProducerState = EMPTY) -> ProducerState:
    """The state after replaying `batches` (in log order; markers as `EndTxnMarker`) onto `start`
    (empty, or a snapshot's state with the batches after it): how a broker rebuilds when it starts
    or becomes leader."""
    state = start
    for batch in batches:
        state = record(state, batch, first_offset=batch.base_offset, now_ms=batch.max_timestamp_ms)
    return state


def truncate(state: ProducerState, end_offset: int) -> ProducerState:
    """`state` after the log was truncated to `end_offset` (a follower cutting a diverged suffix
    that holds no marker; see the module docstring)."""
    producers: dict[int, ProducerEntry] = {}
    changed = False
    for producer_id, entry in state.producers.items():
        kept = tuple(b for b in entry.batches if b.last_offset < end_offset)
        ongoing = entry.current_txn_first_offset
        if ongoing is not None and ongoing >= end_offset:
            ongoing = None
        if len(kept) == len(entry.batches) and ongoing == entry.current_txn_first_offset:
            producers[producer_id] = entry
            continue
        changed = True
        if kept or ongoing is not None:
            producers[producer_id] = ProducerEntry(
                entry.producer_epoch,
                kept,
                entry.last_active_ms,
                coordinator_epoch=entry.coordinator_epoch,
                current_txn_first_offset=ongoing,
            )
    return _state(producers) if changed else state


def expire(
    state: ProducerState, *, now_ms: int, producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS
) -> ProducerState:
    """`state` without the producers idle for `producer_id_expiration_ms` or longer that have no
    ongoing transaction."""
    producers = {
        producer_id: entry
        for producer_id, entry in state.producers.items()
        if entry.current_txn_first_offset is not None
        or now_ms - entry.last_active_ms < producer_id_expiration_ms
    }
    return state if len(producers) == len(state.producers) else _state(producers)


# --- Snapshots ---------------------------------------------------------------------------------


def encode_snapshot(state: ProducerState) -> bytes:
    """The state as a version-2 snapshot (see the module docstring)."""
    body = bytearray(_SNAPSHOT_HEADER.size)
    for producer_id in sorted(state.producers):
        entry = state.producers[producer_id]
        first = entry.current_txn_first_offset
        body += _PRODUCER.pack(
            producer_id,
            entry.producer_epoch,
            entry.coordinator_epoch,
            entry.last_active_ms,
            -1 if first is None else first,
            len(entry.batches),
        )
        for kept in entry.batches:
            body += _BATCH.pack(
                kept.first_sequence, kept.last_offset_delta, kept.first_offset, kept.max_timestamp_ms
            )
    struct.pack_into(">I", body, _CRC_END, len(state.producers))
    struct.pack_into(">HI", body, 0, SNAPSHOT_VERSION, zlib.crc32(memoryview(body)[_CRC_END:]))
    return bytes(body)


def decode_snapshot(data: bytes) -> ProducerState:
    """The state in a snapshot; ValueError if `data` is not exactly a valid version-1 or -2 snapshot."""
    if len(data) < _SNAPSHOT_HEADER.size:
        raise ValueError(f"Producer state snapshot of {len(data)} bytes is shorter than its header")
    version, crc, count = _SNAPSHOT_HEADER.unpack_from(data, 0)
    if version not in (1, SNAPSHOT_VERSION):
        raise ValueError(f"Producer state snapshot has version {version}, expected 1 or {SNAPSHOT_VERSION}")
    if zlib.crc32(memoryview(data)[_CRC_END:]) != crc:
        raise ValueError("Producer state snapshot failed its CRC check")
    layout = _PRODUCER if version == SNAPSHOT_VERSION else _PRODUCER_V1
    position = _SNAPSHOT_HEADER.size
    producers: dict[int, ProducerEntry] = {}
    previous_id = -1
    for _ in range(count):
        if len(data) - position < layout.size:
            raise ValueError(f"Producer state snapshot ends inside a producer at byte {position}")
        if version == SNAPSHOT_VERSION:
            producer_id, epoch, coordinator_epoch, last_active_ms, first, batch_count = _PRODUCER.unpack_from(
                data, position
            )
            if first < -1:
                raise ValueError(
                    f"Transaction first offset {first} of producer {producer_id} is out of range"
                )
        else:
            producer_id, epoch, last_active_ms, batch_count = _PRODUCER_V1.unpack_from(data, position)
            coordinator_epoch, first = NO_COORDINATOR_EPOCH, -1
            if batch_count == 0:
                raise ValueError(f"A version-1 producer keeps 1 to {NUM_BATCHES_TO_RETAIN} batches, not 0")
        if producer_id <= previous_id:
            raise ValueError(f"Producer id {producer_id} at byte {position} is not in ascending order")
        position += layout.size
        if len(data) - position < batch_count * _BATCH.size:
            raise ValueError(f"Producer state snapshot ends inside the batches of producer {producer_id}")
        batches = tuple(
            BatchMetadata(*_BATCH.unpack_from(data, position + i * _BATCH.size)) for i in range(batch_count)
        )
        position += batch_count * _BATCH.size
        producers[producer_id] = ProducerEntry(
            epoch,
            batches,
            last_active_ms,
            coordinator_epoch=coordinator_epoch,
            current_txn_first_offset=None if first == -1 else first,
        )
        previous_id = producer_id
    if position != len(data):
        raise ValueError(f"Producer state snapshot has {len(data) - position} bytes after its last producer")
    return _state(producers)
