"""Kafka's idempotent producer state of one partition: decide a produced batch, then record it.

This is what Kafka's `ProducerStateManager`, `ProducerAppendInfo` and `ProducerStateEntry` keep and
decide for non-transactional idempotent producers (transactions are out of scope). Per producer id:
its epoch, the metadata of its last `NUM_BATCHES_TO_RETAIN` (5) batches of that epoch, and when it
was last active.

`check(state, batch)` decides a produced batch before it is appended, in Kafka's order (the
duplicate lookup of `UnifiedLog.analyzeAndValidateProducerState`, then `LogValidator`'s sequence
check, then `ProducerAppendInfo.checkProducerEpoch` and `checkSequence`). The first row that
matches decides:

| batch                                                   | verdict                                |
|---------------------------------------------------------|----------------------------------------|
| no producer id (< 0)                                    | Append NOT_IDEMPOTENT (not tracked)    |
| base sequence < 0                                       | Refused INVALID_RECORD 87              |
| same epoch and same first and last sequence as one of   | Duplicate, with that batch's original  |
| the producer's retained batches                         | offsets: never appended again          |
| epoch lower than the producer's                         | Refused INVALID_PRODUCER_EPOCH 47      |
| producer unknown (or its epoch is -1)                   | Append NO_PRODUCER_STATE, any sequence |
| higher epoch, base sequence 0                           | Append NEW_EPOCH                       |
| higher epoch, base sequence not 0                       | Refused OUT_OF_ORDER_SEQUENCE_NUMBER 45|
| same epoch, base = last sequence + 1 (2^31-1 wraps to 0)| Append NEXT_SEQUENCE                   |
| same epoch, anything else (a gap, an older batch)       | Refused OUT_OF_ORDER_SEQUENCE_NUMBER 45|

An unknown producer id is accepted with any first sequence and UNKNOWN_PRODUCER_ID (59) is never
answered: that is Kafka since 2.5 (KIP-360, KAFKA-8805), checked against Kafka 4.3.1's
`ProducerAppendInfo.checkSequence` — the branch that refused a non-zero first sequence of a
producer without state with UnknownProducerIdException was removed then; the only refusal of that
shape left is for transactions v2 (`verificationStateEntry.supportsEpochBump()`), which never
applies to a non-transactional batch. A producer whose state expired therefore continues where it
was, which is what the Java producer and librdkafka expect of a Kafka >= 2.5 broker.

Guarantees:
* Pure values, no I/O, no clock: `ProducerState` and everything in it are frozen; every function
  returns a new state and never changes its argument. Time enters only as `now_ms` parameters.
  Cost: `record` copies the producer mapping, O(producers of the partition) per append.
* One mutation path: `record` is the only way a batch enters the state — on the leader after an
  append that `check` allowed, on a follower for every replicated batch (unchecked, as Kafka's
  REPLICATION origin), and in `from_batches`, which is a fold of `record` over the log. Like
  Kafka's `ProducerStateEntry.addBatch`, a batch of another epoch replaces the producer's retained
  batches; at most the last 5 are kept, oldest dropped first. `record` fails loudly (ValueError) on
  an impossible batch: a value out of its wire range or a batch not after the producer's last one.
* Every retained producer has 1 to 5 batches, of its current epoch only, in log order.
* Sequences are Kafka's: last sequence = base + last offset delta, wrapping from 2^31-1 to 0
  (`DefaultRecordBatch.incrementSequence`). The last offset delta, not the record count, gives the
  span, as in Kafka: a compacted batch keeps its delta.
* `from_batches(log)` equals the state that `record` built for the same batches when each append's
  `now_ms` was the batch's max timestamp: the log holds no other time, so a rebuilt producer's last
  activity is its last batch's max timestamp (Kafka's `ProducerStateEntry.lastTimestamp`).
* `truncate(state, end)` drops every retained batch that ends at or after `end` (a log truncates
  whole batches) and every producer left with none; the rest is unchanged. It is exact unless a
  producer's older, no longer retained batches remain below `end`: such a producer is forgotten
  (then accepted with any sequence, as above) where a rebuild from the log would know it. A caller
  that wants Kafka's exact state replays the log from a snapshot at or below `end` instead.
* `expire` drops producers whose last activity is `producer.id.expiration.ms` or longer ago
  (Kafka's `isProducerExpired`, `>=`).
* `decode_snapshot(encode_snapshot(s)) == s` for every state; `decode_snapshot` raises ValueError,
  never anything else, for bytes that are not exactly a snapshot this module wrote (version, CRC-32,
  lengths, ranges, order), and the caller then rebuilds from the log. Unlike Kafka's snapshot
  (the last batch per producer), all 5 retained batches are kept, so duplicates are still found
  after a restart.

Snapshot format (big-endian), version 1:

    version u16 | crc u32 (zlib CRC-32 of everything after it) | producer count u32 |
    per producer, ascending producer id:
        producer id i64 | epoch i16 | last active ms i64 | batch count u8 (1-5) |
        per batch, in log order:
            first sequence i32 | last offset delta i32 | first offset i64 | max timestamp ms i64
"""

from __future__ import annotations

import enum
import struct
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, Protocol, TypeAlias

NUM_BATCHES_TO_RETAIN: Final = 5
MAX_SEQUENCE: Final = 2**31 - 1
NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
DEFAULT_PRODUCER_ID_EXPIRATION_MS: Final = 86_400_000  # producer.id.expiration.ms
SNAPSHOT_VERSION: Final = 1

_MIN_I16, _MAX_I16 = -(2**15), 2**15 - 1
_MIN_I64, _MAX_I64 = -(2**63), 2**63 - 1

_SNAPSHOT_HEADER: Final = struct.Struct(">HII")
_PRODUCER: Final = struct.Struct(">qhqB")
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


class LoggedBatch(ProducedBatch, Protocol):
    """A batch in the log: a produced batch with its offset."""

    @property
    def base_offset(self) -> int: ...


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
    batches: tuple[BatchMetadata, ...]  # 1 to NUM_BATCHES_TO_RETAIN, of this epoch, in log order
    last_active_ms: int

    def __post_init__(self) -> None:
        if not _MIN_I16 <= self.producer_epoch <= _MAX_I16:
            raise ValueError(f"Producer epoch {self.producer_epoch} is out of range")
        if not 1 <= len(self.batches) <= NUM_BATCHES_TO_RETAIN:
            raise ValueError(
                f"A producer keeps 1 to {NUM_BATCHES_TO_RETAIN} batches, not {len(self.batches)}"
            )
        for before, after in zip(self.batches, self.batches[1:], strict=False):
            if after.first_offset <= before.last_offset:
                raise ValueError(
                    f"Batch at offset {after.first_offset} is not after offset {before.last_offset}"
                )
        if not _MIN_I64 <= self.last_active_ms <= _MAX_I64:
            raise ValueError(f"Timestamp {self.last_active_ms} is out of range")

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence


def _frozen(producers: Mapping[int, ProducerEntry]) -> Mapping[int, ProducerEntry]:
    return MappingProxyType(dict(producers))


@dataclass(frozen=True, slots=True)
class ProducerState:
    """The idempotent producers of one partition, by producer id (a read-only mapping)."""

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
    """Kafka's error codes that a producer-state check answers."""

    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    INVALID_PRODUCER_EPOCH = 47
    INVALID_RECORD = 87


class AppendReason(enum.Enum):
    NOT_IDEMPOTENT = "no producer id"
    NO_PRODUCER_STATE = "producer without state: any first sequence"
    NEW_EPOCH = "new epoch starting at sequence 0"
    NEXT_SEQUENCE = "next sequence of the epoch"


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


def check(state: ProducerState, batch: ProducedBatch) -> Verdict:  # noqa: PLR0911  the module docstring's table: a return per row
    """Decide `batch` (a produced batch, before its append) against `state`; see the module's table."""
    producer_id = batch.producer_id
    if producer_id < 0:
        return Append(AppendReason.NOT_IDEMPOTENT)
    epoch, base = batch.producer_epoch, batch.base_sequence
    if base < 0:
        return Refused(
            ProduceErrorCode.INVALID_RECORD,
            f"Invalid sequence number {base} in record batch with producerId {producer_id}",
        )
    entry = state.producers.get(producer_id)
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
    if entry is None or current_epoch == NO_PRODUCER_EPOCH:
        return Append(AppendReason.NO_PRODUCER_STATE)
    if epoch != current_epoch:
        if base == 0:
            return Append(AppendReason.NEW_EPOCH)
        return Refused(
            ProduceErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
            f"Invalid sequence number for new epoch of producer {producer_id}: {epoch} (request epoch), "
            f"{base} (seq. number), {current_epoch} (current producer epoch)",
        )
    if _in_sequence(entry.last_sequence, base):
        return Append(AppendReason.NEXT_SEQUENCE)
    return Refused(
        ProduceErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
        f"Out of order sequence number for producer {producer_id}: {base} (incoming seq. number), "
        f"{entry.last_sequence} (current end sequence number)",
    )


# --- The one mutation path, and what is built on it ----------------------------------------------


def record(state: ProducerState, batch: ProducedBatch, *, first_offset: int, now_ms: int) -> ProducerState:
    """`state` after `batch` was appended at `first_offset` at `now_ms` (the producer's last
    activity). A batch without producer id leaves the state as it is."""
    producer_id = batch.producer_id
    if producer_id < 0:
        return state
    if producer_id > _MAX_I64:
        raise ValueError(f"Producer id {producer_id} is out of range")
    kept = BatchMetadata(batch.base_sequence, batch.last_offset_delta, first_offset, batch.max_timestamp_ms)
    entry = state.producers.get(producer_id)
    if entry is None:
        batches: tuple[BatchMetadata, ...] = (kept,)
    else:
        if first_offset <= entry.batches[-1].last_offset:
            raise ValueError(
                f"Batch of producer {producer_id} at offset {first_offset} is not after its last batch, "
                f"which ends at offset {entry.batches[-1].last_offset}"
            )
        if entry.producer_epoch != batch.producer_epoch:
            batches = (kept,)
        else:
            batches = (*entry.batches[1 - NUM_BATCHES_TO_RETAIN :], kept)
    producers = dict(state.producers)
    producers[producer_id] = ProducerEntry(batch.producer_epoch, batches, now_ms)
    return _state(producers)


def from_batches(batches: Iterable[LoggedBatch], *, start: ProducerState = EMPTY) -> ProducerState:
    """The state after replaying `batches` (in log order) onto `start` (empty, or a snapshot's state
    with the batches after it): how a broker rebuilds when it starts or becomes leader."""
    state = start
    for batch in batches:
        state = record(state, batch, first_offset=batch.base_offset, now_ms=batch.max_timestamp_ms)
    return state


def truncate(state: ProducerState, end_offset: int) -> ProducerState:
    """`state` after the log was truncated to `end_offset` (a follower cutting a diverged suffix)."""
    producers: dict[int, ProducerEntry] = {}
    changed = False
    for producer_id, entry in state.producers.items():
        kept = tuple(b for b in entry.batches if b.last_offset < end_offset)
        if len(kept) == len(entry.batches):
            producers[producer_id] = entry
            continue
        changed = True
        if kept:
            producers[producer_id] = ProducerEntry(entry.producer_epoch, kept, entry.last_active_ms)
    return _state(producers) if changed else state


def expire(
    state: ProducerState, *, now_ms: int, producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS
) -> ProducerState:
    """`state` without the producers idle for `producer_id_expiration_ms` or longer."""
    producers = {
        producer_id: entry
        for producer_id, entry in state.producers.items()
        if now_ms - entry.last_active_ms < producer_id_expiration_ms
    }
    return state if len(producers) == len(state.producers) else _state(producers)


# --- Snapshots ---------------------------------------------------------------------------------


def encode_snapshot(state: ProducerState) -> bytes:
    """The state as a version-1 snapshot (see the module docstring)."""
    body = bytearray(_SNAPSHOT_HEADER.size)
    for producer_id in sorted(state.producers):
        entry = state.producers[producer_id]
        body += _PRODUCER.pack(producer_id, entry.producer_epoch, entry.last_active_ms, len(entry.batches))
        for kept in entry.batches:
            body += _BATCH.pack(
                kept.first_sequence, kept.last_offset_delta, kept.first_offset, kept.max_timestamp_ms
            )
    struct.pack_into(">I", body, _CRC_END, len(state.producers))
    struct.pack_into(">HI", body, 0, SNAPSHOT_VERSION, zlib.crc32(memoryview(body)[_CRC_END:]))
    return bytes(body)


def decode_snapshot(data: bytes) -> ProducerState:
    """The state in a snapshot; ValueError if `data` is not exactly a valid version-1 snapshot."""
    if len(data) < _SNAPSHOT_HEADER.size:
        raise ValueError(f"Producer state snapshot of {len(data)} bytes is shorter than its header")
    version, crc, count = _SNAPSHOT_HEADER.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise ValueError(f"Producer state snapshot has version {version}, expected {SNAPSHOT_VERSION}")
    if zlib.crc32(memoryview(data)[_CRC_END:]) != crc:
        raise ValueError("Producer state snapshot failed its CRC check")
    position = _SNAPSHOT_HEADER.size
    producers: dict[int, ProducerEntry] = {}
    previous_id = -1
    for _ in range(count):
        if len(data) - position < _PRODUCER.size:
            raise ValueError(f"Producer state snapshot ends inside a producer at byte {position}")
        producer_id, epoch, last_active_ms, batch_count = _PRODUCER.unpack_from(data, position)
        if producer_id <= previous_id:
            raise ValueError(f"Producer id {producer_id} at byte {position} is not in ascending order")
        position += _PRODUCER.size
        if len(data) - position < batch_count * _BATCH.size:
            raise ValueError(f"Producer state snapshot ends inside the batches of producer {producer_id}")
        batches = tuple(
            BatchMetadata(*_BATCH.unpack_from(data, position + i * _BATCH.size)) for i in range(batch_count)
        )
        position += batch_count * _BATCH.size
        producers[producer_id] = ProducerEntry(epoch, batches, last_active_ms)
        previous_id = producer_id
    if position != len(data):
        raise ValueError(f"Producer state snapshot has {len(data) - position} bytes after its last producer")
    return _state(producers)
