"""KIP-890 part 1 on a partition leader: when a transactional batch may be appended after its
partition was verified with the transaction coordinator, and when that verification no longer holds.

A transactional batch of a producer that has no ongoing transaction here (of the batch's epoch)
would start one. Before it may, the leader asks the producer's transaction coordinator whether the
partition is in the producer's ongoing transaction (AddPartitionsToTxn v4+, `verify_only`); the
coordinator's yes is about the transaction of *that moment*. The answer comes back after an await,
and meanwhile that transaction may have ended: its marker written here. A yes given for a
transaction whose marker was appended since must not let the batch start a new transaction (that
transaction would hang: no coordinator knows this partition is in it, so no marker would ever end
it, and the last stable offset would stop). So each verification takes a *guard* when it starts
(Kafka's `VerificationGuard` in the producer's `VerificationStateEntry`), and the append is
allowed only while the guard is still the producer's current one: a marker of the producer, or a
transactional batch that started its transaction, ends the guard.

Guarantees:
* Pure values, no I/O: `Verifications` is frozen; every function returns a new value.
* `needs_verification(state, id, epoch)` is True unless the producer has an ongoing transaction of
  that epoch here (Kafka's `hasOngoingTransaction(producerId, epoch)`): a batch joining the
  transaction it is already in is never verified again.
* `start` returns the producer's guard: its current one when it has one of the same epoch
  (concurrent requests of one producer share it, as Kafka's entry is shared; its lowest sequence
  lowered to the batch's), else a new one, whose token no guard given before by this
  `Verifications` lineage had. A guard stays until the producer's next appended batch: a refused
  verification or a duplicate leaves it (Kafka's entry too).
* `sequence_refusal`: while the producer has a guard, a batch the producer state would append
  with a first sequence above the guard's lowest is OUT_OF_ORDER_SEQUENCE_NUMBER, as in Kafka
  4.3.1 (checked side by side in tests/kafka_tools/test_txn_verification_vs_kafka.py).
* `may_append(state, verifications, id, epoch, guard)`, asked after the coordinator said yes and
  with no await before the append, is True iff the producer has an ongoing transaction of that
  epoch now, or `guard` is still its current guard. `after_batch` (every appended batch, leader and
  follower) ends the producer's guard on a marker and on a transactional data batch; so a yes
  given before a marker never lets a batch in after it. A model test
  (tests/core/test_txn_verification.py) checks that no interleaving of verifications,
  AddPartitionsToTxn, markers and appends leaves a transaction open on the partition that its
  coordinator does not have the partition in.
* `produce_answer` maps the coordinator's answer to the produce answer as Kafka 4.3.1's leader
  does (see it); every code it returns is one a producer knows for a produce.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from jbod_core.errors import ErrorCode
from jbod_core.producer_state import ProducedBatch, ProduceErrorCode, ProducerState, Refused


@dataclass(frozen=True, slots=True)
class Guard:
    """One verification of a producer's batches on a partition (Kafka's `VerificationGuard`)."""

    producer_epoch: int
    token: int  # which verification: two guards are the same one iff their tokens are equal
    lowest_sequence: int  # the lowest first sequence of the batches verified with it


@dataclass(frozen=True, slots=True)
class Verifications:
    """The partition's current guard of each producer id, and the next guard's token."""

    guards: Mapping[int, Guard] = field(default_factory=lambda: MappingProxyType({}))
    next_token: int = 1


EMPTY = Verifications()


def needs_verification(state: ProducerState, producer_id: int, producer_epoch: int) -> bool:
    """Whether a transactional batch of `producer_id` at `producer_epoch` is verified first."""
    entry = state.producers.get(producer_id)
    return not (
        entry is not None
        and entry.current_txn_first_offset is not None
        and entry.producer_epoch == producer_epoch
    )


def start(
    verifications: Verifications, producer_id: int, producer_epoch: int, sequence: int
) -> tuple[Verifications, Guard]:
    """The producer's guard for the verification of a batch at first sequence `sequence` starting
    now (shared with one in flight, its lowest sequence lowered to `sequence`)."""
    current = verifications.guards.get(producer_id)
    if current is not None and current.producer_epoch == producer_epoch:
        if sequence >= current.lowest_sequence:
            return verifications, current
        guard = Guard(producer_epoch, current.token, sequence)
        next_token = verifications.next_token
    else:
        guard = Guard(producer_epoch, verifications.next_token, sequence)
        next_token = verifications.next_token + 1
    guards = dict(verifications.guards)
    guards[producer_id] = guard
    return Verifications(MappingProxyType(guards), next_token), guard


def may_append(
    state: ProducerState, verifications: Verifications, producer_id: int, producer_epoch: int, guard: Guard
) -> bool:
    """Whether a batch whose verification (with `guard`) the coordinator answered yes may be
    appended now."""
    if not needs_verification(state, producer_id, producer_epoch):
        return True
    current = verifications.guards.get(producer_id)
    return current is not None and current.token == guard.token


def sequence_refusal(verifications: Verifications, batch: ProducedBatch) -> Refused | None:
    """OUT_OF_ORDER_SEQUENCE_NUMBER for a batch the producer state would append whose first
    sequence is above the lowest one verified for its producer since its last append here
    (Kafka's `checkSequence` against its `VerificationStateEntry`: the first batch of a
    transaction on a partition is the lowest the producer sent there); else None."""
    guard = verifications.guards.get(batch.producer_id)
    if guard is None or batch.base_sequence <= guard.lowest_sequence:
        return None
    return Refused(
        ProduceErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
        f"Out of order sequence number for producer {batch.producer_id}: {batch.base_sequence} (incoming "
        f"seq. number), {guard.lowest_sequence} (earliest seen sequence)",
    )


def after_batch(verifications: Verifications, batch: ProducedBatch) -> Verifications:
    """`verifications` after `batch` was appended: a marker or a transactional data batch of a
    producer ends its guard."""
    producer_id = batch.producer_id
    if producer_id not in verifications.guards or not (batch.is_control or batch.is_transactional):
        return verifications
    guards = {pid: g for pid, g in verifications.guards.items() if pid != producer_id}
    return Verifications(MappingProxyType(guards), verifications.next_token)


# Kafka's codes of a coordinator's answer to a verification (AddPartitionsToTxn v4+).
_NONE: Final = 0
_NETWORK_EXCEPTION: Final = 13
_COORDINATOR_LOAD_IN_PROGRESS: Final = 14
_COORDINATOR_NOT_AVAILABLE: Final = 15
_NOT_COORDINATOR: Final = 16
_INVALID_TXN_STATE: Final = 48
_INVALID_PRODUCER_ID_MAPPING: Final = 49
_CONCURRENT_TRANSACTIONS: Final = 51
_PRODUCER_FENCED: Final = 90
_TRANSACTION_ABORTABLE: Final = 120
#: The coordinator's answers that mean "not verified yet": answered NOT_ENOUGH_REPLICAS, which
#: every producer retries without refreshing its metadata (Kafka's choice for older clients).
_RETRIABLE: Final = frozenset(
    {
        _NETWORK_EXCEPTION,
        _COORDINATOR_LOAD_IN_PROGRESS,
        _COORDINATOR_NOT_AVAILABLE,
        _NOT_COORDINATOR,
        _CONCURRENT_TRANSACTIONS,
    }
)
#: The first Produce version whose producers know TRANSACTION_ABORTABLE (KIP-890).
ABORTABLE_FROM_PRODUCE_VERSION: Final = 11


@dataclass(frozen=True, slots=True)
class Unverified:
    """The partition's answer to a batch its coordinator did not verify: `error` and why."""

    error: ErrorCode | ProduceErrorCode
    message: str


def produce_answer(coordinator_error: int, *, produce_version: int) -> Unverified | None:
    """The produce answer for the coordinator's verification answer `coordinator_error` (None:
    verified), as Kafka 4.3.1's leader maps it: PRODUCER_FENCED is INVALID_PRODUCER_EPOCH; a
    partition not in the transaction (TRANSACTION_ABORTABLE, or INVALID_TXN_STATE from an older
    coordinator) is TRANSACTION_ABORTABLE for a Produce v11+ and INVALID_TXN_STATE before; a
    coordinator that cannot answer yet is NOT_ENOUGH_REPLICAS (retried); INVALID_PRODUCER_ID_MAPPING
    as it is; anything else UNKNOWN_SERVER_ERROR."""
    if coordinator_error == _NONE:
        return None
    if coordinator_error in _RETRIABLE:
        return Unverified(
            ErrorCode.NOT_ENOUGH_REPLICAS,
            f"Unable to verify the partition has been added to the transaction. Underlying error code: "
            f"{coordinator_error}",
        )
    if coordinator_error == _PRODUCER_FENCED:
        return Unverified(ProduceErrorCode.INVALID_PRODUCER_EPOCH, "The producer was fenced by a newer epoch")
    if coordinator_error in (_TRANSACTION_ABORTABLE, _INVALID_TXN_STATE):
        abortable = produce_version >= ABORTABLE_FROM_PRODUCE_VERSION
        return Unverified(
            ProduceErrorCode.TRANSACTION_ABORTABLE if abortable else ProduceErrorCode.INVALID_TXN_STATE,
            "Partition was not added to the transaction",
        )
    if coordinator_error == _INVALID_PRODUCER_ID_MAPPING:
        return Unverified(
            ProduceErrorCode.INVALID_PRODUCER_ID_MAPPING,
            "The producer id is not the transactional id's current one",
        )
    return Unverified(
        ErrorCode.UNKNOWN_SERVER_ERROR, f"The coordinator answered the verification with {coordinator_error}"
    )
