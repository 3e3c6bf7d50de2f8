"""The transaction coordinator's state machine, as Kafka 4.3.1 runs it for transaction version 1
clients: one pure decision per request over a transactional id's frozen `TxnMetadata`.

Each decision is one of:
* `AnswerNow(error)`: nothing to write; answer `error` now (NONE: success).
* `Transition`: the record to append to `__transaction_state` (acks=all) and the metadata to keep
  while it is in flight (`holding`, its `pending_state` set), after it was appended
  (`after_append`; None: forget the transactional id) and if it failed (`after_failure`). The caller
  answers only after the append: `error` (NONE, or CONCURRENT_TRANSACTIONS for an epoch fence) on
  success, `append_error(...)` of the append's error otherwise.
* `NeedProducerId` (InitProducerId only): allocate a fresh producer id (I/O) and decide again with
  `fresh_producer_id`.

Kafka's valid previous states (`TransactionState.VALID_PREVIOUS_STATES`, 4.3.1); the rows marked
TV2 are reached only by transaction version 2 clients, which this coordinator does not serve:

| to                | from |
|-------------------|------|
| Empty             | Empty, CompleteCommit, CompleteAbort |
| Ongoing           | Ongoing, Empty, CompleteCommit, CompleteAbort |
| PrepareCommit     | Ongoing |
| PrepareAbort      | Ongoing, PrepareEpochFence; TV2: Empty, CompleteCommit, CompleteAbort |
| CompleteCommit    | PrepareCommit |
| CompleteAbort     | PrepareAbort |
| Dead              | Empty, CompleteCommit, CompleteAbort |
| PrepareEpochFence | Ongoing |

PrepareEpochFence and Dead are never a state here: Kafka holds PrepareEpochFence only as a pending
state inside one fencing step (the fence is written as PrepareAbort with the bumped epoch), and a
Dead transactional id is written as a tombstone and forgotten.

Decisions, first matching row wins (test in tests/core/test_transactions.py in brackets):

| request | condition | answer |
|---------|-----------|--------|
| InitProducerId | producer id xor epoch is -1 | INVALID_REQUEST [test_init_invalid_requests] |
| | transactional id "" | INVALID_REQUEST [test_init_invalid_requests] |
| | timeout <= 0 or > transaction.max.timeout.ms | INVALID_TRANSACTION_TIMEOUT [test_init_invalid_requests] |
| | unknown id | NeedProducerId, then Empty at epoch 0 [test_init_new_and_bump] |
| | write in flight | CONCURRENT_TRANSACTIONS [test_init_concurrent] |
| | producer id given, not current nor (previous with exhausted epoch), and epoch known | PRODUCER_FENCED (INVALID_PRODUCER_EPOCH below v4) [test_init_kip360] |
| | PrepareCommit, PrepareAbort | CONCURRENT_TRANSACTIONS [test_init_concurrent] |
| | Empty, Complete*, epoch exhausted (>= 32766), no epoch given or the current one | NeedProducerId, then Empty at epoch 0 of it [test_init_epoch_exhausted] |
| | Empty, Complete*, epoch given is the current (or it is -1) or none given | Empty, epoch + 1 [test_init_new_and_bump, test_init_kip360] |
| | Empty, Complete*, epoch given is the last epoch (a retry) | Empty, same epoch [test_init_kip360] |
| | Empty, Complete*, other epoch given | PRODUCER_FENCED (INVALID_PRODUCER_EPOCH below v4) [test_init_kip360] |
| | Ongoing | fence: PrepareAbort at epoch + 1 (not again after a failed fence), answer CONCURRENT_TRANSACTIONS [test_init_fences_ongoing] |
| AddPartitionsToTxn, AddOffsetsToTxn | transactional id "" | INVALID_REQUEST [test_add_errors] |
| | unknown id, other producer id | INVALID_PRODUCER_ID_MAPPING [test_add_errors] |
| | other epoch | PRODUCER_FENCED (INVALID_PRODUCER_EPOCH below v2) [test_add_errors] |
| | write in flight, PrepareCommit, PrepareAbort | CONCURRENT_TRANSACTIONS [test_add_errors] |
| | Ongoing, all partitions in it | NONE, nothing written [test_add_partitions_and_offsets] |
| | otherwise | Ongoing with the partitions added (start time set from Empty/Complete*) [test_add_partitions_and_offsets] |
| AddPartitionsToTxn v4+ verify only | "", unknown id, other producer id, other epoch, Prepare* | per partition INVALID_REQUEST, INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS [test_verify_only] |
| | otherwise | per partition NONE if in the transaction, else TRANSACTION_ABORTABLE [test_verify_only] |
| EndTxn | transactional id "" | INVALID_REQUEST [test_end_txn_errors] |
| | unknown id, other producer id | INVALID_PRODUCER_ID_MAPPING [test_end_txn_errors] |
| | other epoch | PRODUCER_FENCED (INVALID_PRODUCER_EPOCH below v2) [test_end_txn_errors] |
| | write in flight (markers being written included) | CONCURRENT_TRANSACTIONS [test_end_txn_errors] |
| | Ongoing | PrepareCommit / PrepareAbort, then markers [test_commit_and_abort] |
| | CompleteCommit + commit, CompleteAbort + abort (a retry) | NONE, nothing written [test_end_txn_retries] |
| | PrepareCommit + commit, PrepareAbort + abort | CONCURRENT_TRANSACTIONS [test_end_txn_retries] |
| | Empty, or the other result | INVALID_TXN_STATE [test_end_txn_errors, test_end_txn_retries] |
| markers written | Prepare* with its completion pending | CompleteCommit / CompleteAbort, partitions cleared [test_commit_and_abort] |
| timeout | Ongoing, nothing in flight, start + timeout < now | fence as InitProducerId does [test_timeout_abort] |
| expiration | Empty/Complete*, nothing in flight, last update <= now - transactional.id.expiration.ms | tombstone [test_expiration] |

Guarantees:
* Pure values, no I/O, no clock (time enters as `now_ms`); every function returns new values.
* Every `Transition` goes from `holding.state` to a state whose valid previous states hold it
  (checked when built: a ValueError is a bug, never an answer); only Ongoing adds partitions;
  Complete* records and metadata have none; a Transition's record round-trips through
  `txn_records.encode`/`decode`.
* A fenced epoch is never accepted: once a transactional id's epoch was bumped (InitProducerId,
  fence), requests with an older epoch are refused (the model test in tests/core/test_transactions.py).
* `loaded(record)` is the metadata a new coordinator rebuilds from the last record of an id
  (a Prepare* state with its completion pending, so the caller resends the markers).
* Every error is Kafka 4.3.1's for the same state and request, PRODUCER_FENCED answered as
  INVALID_PRODUCER_EPOCH to the request versions that predate it (`KafkaApis`).

Where this differs from Kafka by design: a failed append leaves `after_failure`, computed when
the decision was made (Kafka rolls back its pending state the same way); the completion record
(Complete*) is stamped with the `now_ms` given to `markers_written` where Kafka stamps the time the
Prepare* append finished; transaction version 2 (KIP-890 part 2: epoch bump per transaction, abort
from Empty) is not served (docs/decisions.md, "Transactions: version 1 first").
"""

from __future__ import annotations

import enum
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Final, TypeAlias

from jbod_core import group_records, txn_records
from jbod_core.errors import ErrorCode
from jbod_core.txn_records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TransactionState

TopicPartition: TypeAlias = tuple[str, int]


class TxnError(enum.IntEnum):
    """Kafka's error codes a transaction coordinator answers on the Kafka listener (Kafka's
    numbers; not the contract's `jbod_core.errors.ErrorCode`)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_REQUEST = 42
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    PRODUCER_FENCED = 90
    TRANSACTIONAL_ID_NOT_FOUND = 105
    TRANSACTION_ABORTABLE = 120


DEFAULT_TRANSACTION_MAX_TIMEOUT_MS: Final = 900_000  # transaction.max.timeout.ms
DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS: Final = 604_800_000  # transactional.id.expiration.ms
DEFAULT_ABORT_TIMED_OUT_INTERVAL_MS: Final = (
    10_000  # transaction.abort.timed.out.transaction.cleanup.interval.ms
)
DEFAULT_REMOVE_EXPIRED_INTERVAL_MS: Final = (
    3_600_000  # transaction.remove.expired.transaction.cleanup.interval.ms
)
MAX_EPOCH: Final = 2**15 - 1

_S: Final = TransactionState
VALID_PREVIOUS_STATES: Final[Mapping[TransactionState, frozenset[TransactionState]]] = MappingProxyType(
    {
        _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
        _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
        _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
        _S.PREPARE_ABORT: frozenset(
            {_S.ONGOING, _S.PREPARE_EPOCH_FENCE, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}
        ),
        _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
        _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
        _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_ABORT, _S.COMPLETE_COMMIT}),
        _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
    }
)
_COMPLETE: Final = frozenset({_S.COMPLETE_COMMIT, _S.COMPLETE_ABORT})
_PREPARE: Final = frozenset({_S.PREPARE_COMMIT, _S.PREPARE_ABORT})
_EXPIRABLE: Final = frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT})
_COMPLETION: Final = {_S.PREPARE_COMMIT: _S.COMPLETE_COMMIT, _S.PREPARE_ABORT: _S.COMPLETE_ABORT}

# The first request version that knows PRODUCER_FENCED; older ones get INVALID_PRODUCER_EPOCH.
INIT_PRODUCER_ID_FENCED_SINCE: Final = 4
ADD_PARTITIONS_FENCED_SINCE: Final = 2
ADD_OFFSETS_FENCED_SINCE: Final = 2
END_TXN_FENCED_SINCE: Final = 2


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka's `TransactionMetadata.isEpochExhausted`: no epoch left to bump to."""
    return epoch >= MAX_EPOCH - 1


@dataclass(frozen=True, slots=True)
class TxnConfig:
    transaction_max_timeout_ms: int = DEFAULT_TRANSACTION_MAX_TIMEOUT_MS
    transactional_id_expiration_ms: int = DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    """What the coordinator keeps of one transactional id (Kafka's `TransactionMetadata`)."""

    transactional_id: str
    producer_id: int
    previous_producer_id: int  # the producer id before the last rotation (epoch exhaustion)
    next_producer_id: int  # transaction version 2 only: always -1 here
    producer_epoch: int  # -1 only before the first InitProducerId was written
    last_producer_epoch: int  # the epoch before the last bump (KIP-360 retries); -1 unknown
    txn_timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition]
    txn_start_timestamp_ms: int  # -1 outside a transaction
    txn_last_update_timestamp_ms: int
    pending_state: TransactionState | None = None  # a write of this state is in flight
    has_failed_epoch_fence: bool = False  # the last fence's write failed: the next does not bump again

    def __post_init__(self) -> None:
        if self.state in (_S.DEAD, _S.PREPARE_EPOCH_FENCE):
            raise ValueError(f"{self.state.kafka_name} is never a kept state")
        if self.partitions and self.state not in (_S.ONGOING, *_PREPARE):
            raise ValueError(f"A transaction in state {self.state.kafka_name} has partitions")
        if not NO_PRODUCER_EPOCH <= self.producer_epoch <= MAX_EPOCH:
            raise ValueError(f"Producer epoch {self.producer_epoch} is out of range")


@dataclass(frozen=True, slots=True)
class AnswerNow:
    """Nothing to write: answer `error` now (NONE: success)."""

    error: TxnError


@dataclass(frozen=True, slots=True)
class NeedProducerId:
    """Allocate a fresh producer id, then decide the InitProducerId again with `fresh_producer_id`."""


@dataclass(frozen=True, slots=True)
class Transition:
    """Append `record` (acks=all) keeping `holding`; then keep `after_append` (None: forget the
    transactional id) and answer `error`, or keep `after_failure` if the append failed."""

    holding: TxnMetadata
    record: txn_records.TxnRecord
    after_append: TxnMetadata | None
    after_failure: TxnMetadata
    error: TxnError = TxnError.NONE


Decision: TypeAlias = AnswerNow | Transition | NeedProducerId


# --- Building transitions ----------------------------------------------------------------------


def _value(target: TxnMetadata, *, previous_producer_id: int) -> txn_records.TransactionLogValue:
    """The record Kafka writes for a transition to `target` (its `TxnTransitMetadata`): the
    previous producer id is the producer id the transition started from."""
    partitions: tuple[txn_records.TopicPartitions, ...] | None = None
    if target.state is not _S.EMPTY:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(target.partitions):
            by_topic.setdefault(topic, []).append(partition)
        partitions = tuple(txn_records.TopicPartitions(t, tuple(ps)) for t, ps in by_topic.items())
    return txn_records.TransactionLogValue(
        producer_id=target.producer_id,
        producer_epoch=target.producer_epoch,
        transaction_timeout_ms=target.txn_timeout_ms,
        state=target.state,
        partitions=partitions,
        last_update_timestamp_ms=target.txn_last_update_timestamp_ms,
        start_timestamp_ms=target.txn_start_timestamp_ms,
        previous_producer_id=previous_producer_id,
        next_producer_id=target.next_producer_id,
    )


def _transition(
    current: TxnMetadata,
    target: TxnMetadata,
    *,
    holding: TxnMetadata | None = None,
    after_failure: TxnMetadata | None = None,
    error: TxnError = TxnError.NONE,
) -> Transition:
    source = (holding or current).state
    if source not in VALID_PREVIOUS_STATES[target.state]:
        raise ValueError(f"No transition from {source.kafka_name} to {target.state.kafka_name}")
    record = txn_records.TxnRecord(
        current.transactional_id, _value(target, previous_producer_id=current.producer_id)
    )
    after = target
    if target.state is _S.EMPTY:  # Kafka keeps the previous producer id at InitProducerId only
        after = replace(after, previous_producer_id=current.producer_id)
    if target.state in _PREPARE:
        after = replace(after, pending_state=_COMPLETION[target.state])  # the markers are next
    return Transition(
        holding=replace(holding or current, pending_state=target.state),
        record=record,
        after_append=after,
        after_failure=after_failure or replace(current, pending_state=None),
        error=error,
    )


def _fence(metadata: TxnMetadata, *, now_ms: int) -> Transition:
    """Kafka's epoch fence of an ongoing transaction: bump the epoch (once, also across a failed
    fence) and abort with it. The bumped epoch is kept even if the write fails."""
    if metadata.producer_epoch == MAX_EPOCH:
        raise ValueError(f"Cannot fence producer {metadata.producer_id} at epoch {MAX_EPOCH}")
    epoch = metadata.producer_epoch if metadata.has_failed_epoch_fence else metadata.producer_epoch + 1
    bumped = replace(metadata, producer_epoch=epoch, last_producer_epoch=NO_PRODUCER_EPOCH)
    target = replace(
        bumped,
        state=_S.PREPARE_ABORT,
        txn_last_update_timestamp_ms=now_ms,
        pending_state=None,
        has_failed_epoch_fence=False,
    )
    return _transition(
        metadata,
        target,
        holding=bumped,
        after_failure=replace(bumped, pending_state=None, has_failed_epoch_fence=True),
        error=TxnError.CONCURRENT_TRANSACTIONS,
    )


def _fenced(error: TxnError, version: int, since: int) -> AnswerNow:
    if error is TxnError.PRODUCER_FENCED and version < since:
        return AnswerNow(TxnError.INVALID_PRODUCER_EPOCH)
    return AnswerNow(error)


# --- InitProducerId ----------------------------------------------------------------------------


def init_producer_id(  # noqa: PLR0911, PLR0913  the module docstring's table: a return per row; the request's fields
    metadata: TxnMetadata | None,
    *,
    transactional_id: str,
    transaction_timeout_ms: int,
    now_ms: int,
    config: TxnConfig,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    fresh_producer_id: int | None = None,
    version: int = INIT_PRODUCER_ID_FENCED_SINCE,
) -> Decision:
    """InitProducerId with a transactional id (`metadata`: the coordinator's, None if unknown);
    `producer_id`/`producer_epoch`: the KIP-360 fields (v3+), -1 when not given."""
    if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
        return AnswerNow(TxnError.INVALID_REQUEST)
    if not transactional_id:
        return AnswerNow(TxnError.INVALID_REQUEST)
    if not 0 < transaction_timeout_ms <= config.transaction_max_timeout_ms:
        return AnswerNow(TxnError.INVALID_TRANSACTION_TIMEOUT)
    given = producer_id != NO_PRODUCER_ID
    if metadata is None:
        if fresh_producer_id is None:
            return NeedProducerId()
        created = TxnMetadata(
            transactional_id=transactional_id,
            producer_id=fresh_producer_id,
            previous_producer_id=NO_PRODUCER_ID,
            next_producer_id=NO_PRODUCER_ID,
            producer_epoch=NO_PRODUCER_EPOCH,
            last_producer_epoch=NO_PRODUCER_EPOCH,
            txn_timeout_ms=transaction_timeout_ms,
            state=_S.EMPTY,
            partitions=frozenset(),
            txn_start_timestamp_ms=-1,
            txn_last_update_timestamp_ms=now_ms,
        )
        # Kafka keeps the created metadata (epoch -1) even if the first write fails.
        return init_producer_id(
            created,
            transactional_id=transactional_id,
            transaction_timeout_ms=transaction_timeout_ms,
            now_ms=now_ms,
            config=config,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            version=version,
        )
    if metadata.pending_state is not None:
        return AnswerNow(TxnError.CONCURRENT_TRANSACTIONS)
    if given and not (
        metadata.producer_epoch == NO_PRODUCER_EPOCH
        or producer_id == metadata.producer_id
        or (producer_id == metadata.previous_producer_id and is_epoch_exhausted(producer_epoch))
    ):
        return _fenced(TxnError.PRODUCER_FENCED, version, INIT_PRODUCER_ID_FENCED_SINCE)
    state = metadata.state
    if state in _PREPARE:
        return AnswerNow(TxnError.CONCURRENT_TRANSACTIONS)
    if state is _S.ONGOING:
        return _fence(metadata, now_ms=now_ms)
    return _initialized(
        metadata,
        producer_epoch=producer_epoch if given else None,
        transaction_timeout_ms=transaction_timeout_ms,
        now_ms=now_ms,
        fresh_producer_id=fresh_producer_id,
        version=version,
    )


def _initialized(  # noqa: PLR0913  the request's fields
    metadata: TxnMetadata,
    *,
    producer_epoch: int | None,
    transaction_timeout_ms: int,
    now_ms: int,
    fresh_producer_id: int | None,
    version: int,
) -> Decision:
    """InitProducerId of an Empty or Complete* transactional id: the next epoch, a fresh producer
    id when the epoch is exhausted, the same epoch for a KIP-360 retry (`producer_epoch` given)."""
    given = producer_epoch is not None
    if is_epoch_exhausted(metadata.producer_epoch) and producer_epoch in (None, metadata.producer_epoch):
        if fresh_producer_id is None:
            return NeedProducerId()
        last = metadata.producer_epoch if given else NO_PRODUCER_EPOCH
        return _transition(
            metadata, _empty(metadata, fresh_producer_id, 0, last, transaction_timeout_ms, now_ms=now_ms)
        )
    if producer_epoch in (None, metadata.producer_epoch) or metadata.producer_epoch == NO_PRODUCER_EPOCH:
        epoch, last = metadata.producer_epoch + 1, (metadata.producer_epoch if given else NO_PRODUCER_EPOCH)
    elif producer_epoch == metadata.last_producer_epoch:
        epoch, last = metadata.producer_epoch, metadata.last_producer_epoch
    else:
        return _fenced(TxnError.PRODUCER_FENCED, version, INIT_PRODUCER_ID_FENCED_SINCE)
    return _transition(
        metadata,
        _empty(metadata, metadata.producer_id, epoch, last, transaction_timeout_ms, now_ms=now_ms),
    )


def _empty(  # noqa: PLR0913  the fields InitProducerId sets
    metadata: TxnMetadata, producer_id: int, epoch: int, last_epoch: int, timeout_ms: int, *, now_ms: int
) -> TxnMetadata:
    """`metadata` after an InitProducerId: Empty with this producer id and epoch, no transaction."""
    return replace(
        metadata,
        producer_id=producer_id,
        producer_epoch=epoch,
        last_producer_epoch=last_epoch,
        state=_S.EMPTY,
        txn_timeout_ms=timeout_ms,
        partitions=frozenset(),
        txn_start_timestamp_ms=-1,
        txn_last_update_timestamp_ms=now_ms,
        next_producer_id=NO_PRODUCER_ID,
        has_failed_epoch_fence=False,
    )


# --- AddPartitionsToTxn, AddOffsetsToTxn -------------------------------------------------------


def _check_producer(
    metadata: TxnMetadata | None, *, transactional_id: str, producer_id: int, producer_epoch: int
) -> TxnError | TxnMetadata:
    if not transactional_id:
        return TxnError.INVALID_REQUEST
    if metadata is None or metadata.producer_id != producer_id:
        return TxnError.INVALID_PRODUCER_ID_MAPPING
    if metadata.producer_epoch != producer_epoch:
        return TxnError.PRODUCER_FENCED
    return metadata


def _add(  # noqa: PLR0913  the request's fields
    metadata: TxnMetadata | None,
    *,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    partitions: Collection[TopicPartition],
    now_ms: int,
    version: int,
    fenced_since: int,
) -> Decision:
    checked = _check_producer(
        metadata, transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch
    )
    if isinstance(checked, TxnError):
        return _fenced(checked, version, fenced_since)
    if checked.pending_state is not None or checked.state in _PREPARE:
        return AnswerNow(TxnError.CONCURRENT_TRANSACTIONS)
    added = frozenset(partitions)
    if checked.state is _S.ONGOING and added <= checked.partitions:
        return AnswerNow(TxnError.NONE)
    start = now_ms if checked.state in (_S.EMPTY, *_COMPLETE) else checked.txn_start_timestamp_ms
    target = replace(
        checked,
        state=_S.ONGOING,
        partitions=checked.partitions | added,
        txn_start_timestamp_ms=start,
        txn_last_update_timestamp_ms=now_ms,
    )
    return _transition(checked, target)


def add_partitions_to_txn(  # noqa: PLR0913  the request's fields
    metadata: TxnMetadata | None,
    *,
    transactional_id: str | None = None,
    producer_id: int,
    producer_epoch: int,
    partitions: Collection[TopicPartition],
    now_ms: int,
    version: int,
) -> Decision:
    """AddPartitionsToTxn of a client (v0-v3, or a v4+ transaction that is not verify-only)."""
    return _add(
        metadata,
        transactional_id=_id(metadata, transactional_id),
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        partitions=partitions,
        now_ms=now_ms,
        version=version,
        fenced_since=ADD_PARTITIONS_FENCED_SINCE,
    )


def add_offsets_to_txn(  # noqa: PLR0913  the request's fields
    metadata: TxnMetadata | None,
    *,
    transactional_id: str | None = None,
    producer_id: int,
    producer_epoch: int,
    group_id: str,
    now_ms: int,
    version: int,
    offsets_topic_partitions: int = group_records.DEFAULT_PARTITIONS,
) -> Decision:
    """AddOffsetsToTxn: the group's partition of `__consumer_offsets` joins the transaction."""
    offsets = (group_records.OFFSETS_TOPIC, group_records.partition_for(group_id, offsets_topic_partitions))
    return _add(
        metadata,
        transactional_id=_id(metadata, transactional_id),
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        partitions=(offsets,),
        now_ms=now_ms,
        version=version,
        fenced_since=ADD_OFFSETS_FENCED_SINCE,
    )


def _id(metadata: TxnMetadata | None, transactional_id: str | None) -> str:
    if transactional_id is not None:
        return transactional_id
    if metadata is None:
        raise ValueError("A request for an unknown transactional id must name it")
    return metadata.transactional_id


def verify_partitions_in_txn(
    metadata: TxnMetadata | None,
    *,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    partitions: Collection[TopicPartition],
) -> Mapping[TopicPartition, TxnError]:
    """A verify-only transaction of AddPartitionsToTxn v4+ (a partition leader asking, KIP-890
    part 1): the error of each partition, NONE for those in the ongoing transaction."""
    checked = _check_producer(
        metadata, transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch
    )
    if isinstance(checked, TxnError):
        return MappingProxyType(dict.fromkeys(partitions, checked))
    if checked.state in _PREPARE:
        return MappingProxyType(dict.fromkeys(partitions, TxnError.CONCURRENT_TRANSACTIONS))
    return MappingProxyType(
        {p: TxnError.NONE if p in checked.partitions else TxnError.TRANSACTION_ABORTABLE for p in partitions}
    )


# --- EndTxn and the markers --------------------------------------------------------------------


def end_txn(  # noqa: PLR0913  the request's fields
    metadata: TxnMetadata | None,
    *,
    transactional_id: str | None = None,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    now_ms: int,
    version: int,
) -> Decision:
    """EndTxn of a transaction version 1 client (v0-v4): commit or abort."""
    checked = _check_producer(
        metadata,
        transactional_id=_id(metadata, transactional_id),
        producer_id=producer_id,
        producer_epoch=producer_epoch,
    )
    if isinstance(checked, TxnError):
        return _fenced(checked, version, END_TXN_FENCED_SINCE)
    if checked.pending_state is not None:
        return AnswerNow(TxnError.CONCURRENT_TRANSACTIONS)
    state = checked.state
    if state is _S.ONGOING:
        prepared = _S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT
        return _transition(checked, replace(checked, state=prepared, txn_last_update_timestamp_ms=now_ms))
    if (state is _S.COMPLETE_COMMIT and commit) or (state is _S.COMPLETE_ABORT and not commit):
        return AnswerNow(TxnError.NONE)
    if (state is _S.PREPARE_COMMIT and commit) or (state is _S.PREPARE_ABORT and not commit):
        return AnswerNow(TxnError.CONCURRENT_TRANSACTIONS)
    return AnswerNow(TxnError.INVALID_TXN_STATE)


def markers_written(metadata: TxnMetadata, *, now_ms: int) -> Transition:
    """The completion after every partition leader wrote its marker: CompleteCommit or
    CompleteAbort, no partitions. A failed append keeps the completion pending (retry it)."""
    completed = _COMPLETION.get(metadata.state)
    if completed is None or metadata.pending_state is not completed:
        raise ValueError(
            f"Transactional id {metadata.transactional_id} in state {metadata.state.kafka_name} has no "
            "markers to complete"
        )
    target = replace(
        metadata,
        state=completed,
        partitions=frozenset(),
        txn_last_update_timestamp_ms=now_ms,
        pending_state=None,
        has_failed_epoch_fence=False,
    )
    return _transition(metadata, target, after_failure=metadata)


# --- Timers ------------------------------------------------------------------------------------


def abort_timed_out(metadata: TxnMetadata, *, now_ms: int) -> Transition | None:
    """The abort of an ongoing transaction older than its timeout (Kafka's
    `transaction.abort.timed.out.transaction.cleanup.interval.ms` job), None if it is not due."""
    if metadata.pending_state is not None or metadata.state is not _S.ONGOING:
        return None
    if metadata.txn_start_timestamp_ms + metadata.txn_timeout_ms >= now_ms:
        return None
    return _fence(metadata, now_ms=now_ms)


def expire(metadata: TxnMetadata, *, now_ms: int, config: TxnConfig) -> Transition | None:
    """The tombstone of a transactional id idle `transactional.id.expiration.ms` in Empty or
    Complete*, None if it is not due."""
    if metadata.pending_state is not None or metadata.state not in _EXPIRABLE:
        return None
    if metadata.txn_last_update_timestamp_ms > now_ms - config.transactional_id_expiration_ms:
        return None
    return Transition(
        holding=replace(metadata, pending_state=_S.DEAD),
        record=txn_records.TxnRecord(metadata.transactional_id, None),
        after_append=None,
        after_failure=metadata,
    )


# --- Loading and the append's errors ------------------------------------------------------------


def loaded(record: txn_records.TxnRecord) -> TxnMetadata | None:
    """The metadata a coordinator loads from the last record of a transactional id (None: a
    tombstone). A Prepare* transaction has its completion pending: resend its markers."""
    value = record.value
    if value is None:
        return None
    if value.state in (_S.DEAD, _S.PREPARE_EPOCH_FENCE):
        raise ValueError(f"A record of state {value.state.kafka_name} for {record.transactional_id}")
    partitions = frozenset((e.topic, p) for e in value.partitions or () for p in e.partitions)
    return TxnMetadata(
        transactional_id=record.transactional_id,
        producer_id=value.producer_id,
        previous_producer_id=value.previous_producer_id,
        next_producer_id=value.next_producer_id,
        producer_epoch=value.producer_epoch,
        last_producer_epoch=NO_PRODUCER_EPOCH,
        txn_timeout_ms=value.transaction_timeout_ms,
        state=value.state,
        partitions=partitions,
        txn_start_timestamp_ms=value.start_timestamp_ms,
        txn_last_update_timestamp_ms=value.last_update_timestamp_ms,
        pending_state=_COMPLETION.get(value.state),
    )


def append_error(error: int) -> TxnError:
    """The error a coordinator answers when its append to `__transaction_state` failed with
    `error` (a produce error's Kafka code; Kafka's `TransactionStateManager.appendTransactionToLog`)."""
    if error in (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
    ):
        return TxnError.COORDINATOR_NOT_AVAILABLE
    if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return TxnError.NOT_COORDINATOR
    try:
        return TxnError(error)
    except ValueError:  # MESSAGE_TOO_LARGE and every other code a coordinator does not answer
        return TxnError.UNKNOWN_SERVER_ERROR


# --- DescribeTransactions, ListTransactions -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """One transactional id as DescribeTransactions answers it."""

    transactional_id: str
    error: TxnError
    state: str = ""  # Kafka's state name
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    transaction_timeout_ms: int = 0
    transaction_start_time_ms: int = -1
    topics: tuple[tuple[str, tuple[int, ...]], ...] = ()


def describe(metadata: TxnMetadata | None, *, transactional_id: str) -> TransactionDescription:
    if not transactional_id:
        return TransactionDescription(transactional_id, TxnError.INVALID_REQUEST)
    if metadata is None:
        return TransactionDescription(transactional_id, TxnError.TRANSACTIONAL_ID_NOT_FOUND)
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(metadata.partitions):
        by_topic.setdefault(topic, []).append(partition)
    return TransactionDescription(
        transactional_id,
        TxnError.NONE,
        state=metadata.state.kafka_name,
        producer_id=metadata.producer_id,
        producer_epoch=metadata.producer_epoch,
        transaction_timeout_ms=metadata.txn_timeout_ms,
        transaction_start_time_ms=metadata.txn_start_timestamp_ms,
        topics=tuple((t, tuple(ps)) for t, ps in by_topic.items()),
    )


@dataclass(frozen=True, slots=True)
class ListedTransaction:
    transactional_id: str
    producer_id: int
    state: str  # Kafka's state name


@dataclass(frozen=True, slots=True)
class TransactionListing:
    """ListTransactions' answer (of one coordinator): the transactions and the state filters
    that name no state."""

    transactions: tuple[ListedTransaction, ...]
    unknown_state_filters: tuple[str, ...]


def list_transactions(  # noqa: PLR0913  the request's filters
    metadatas: Iterable[TxnMetadata],
    *,
    now_ms: int,
    state_filters: Collection[str] = (),
    producer_id_filters: Collection[int] = (),
    duration_filter_ms: int = -1,
    transactional_id_pattern: re.Pattern[str] | None = None,
) -> TransactionListing:
    """ListTransactions v0-v2: empty filters match everything; `duration_filter_ms` (v1+, -1:
    none) keeps transactions started more than that long ago; `transactional_id_pattern` (v2)
    must match a whole transactional id."""
    states = {name: TransactionState.from_kafka_name(name) for name in state_filters}
    wanted = {s for s in states.values() if s is not None}
    listed = []
    for metadata in metadatas:
        if producer_id_filters and metadata.producer_id not in producer_id_filters:
            continue
        if state_filters and metadata.state not in wanted:
            continue
        if duration_filter_ms >= 0 and now_ms - metadata.txn_start_timestamp_ms <= duration_filter_ms:
            continue
        if transactional_id_pattern is not None and not transactional_id_pattern.fullmatch(
            metadata.transactional_id
        ):
            continue
        listed.append(
            ListedTransaction(metadata.transactional_id, metadata.producer_id, metadata.state.kafka_name)
        )
    unknown = tuple(sorted(name for name, state in states.items() if state is None))
    return TransactionListing(tuple(listed), unknown)
