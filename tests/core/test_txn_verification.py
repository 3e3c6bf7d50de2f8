"""KIP-890 part 1's verification guard (`jbod_core.txn_verification`) against a model of the
transaction coordinator: random interleavings of two transactional producers' produce requests
(each verified when it would start a transaction, the coordinator answering at some later point
and the append later still), AddPartitionsToTxn and end markers. After every step no producer has
a transaction open on the partition that its coordinator does not have the partition in (no
hanging transaction: a yes given before a marker never lets a batch in after it), and a request
is appended exactly when the coordinator said yes and either no marker of its producer came since
it started or its producer's transaction is open again. Then the produce answers of every
coordinator code, as Kafka 4.3.1 maps them."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jbod_core import producer_state as ps
from jbod_core import txn_verification as tv
from jbod_core.errors import ErrorCode

PRODUCERS = (1, 2)
EPOCH = 0


@dataclass(frozen=True)
class _Batch:
    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_offset_delta: int = 0
    max_timestamp_ms: int = 0
    is_transactional: bool = True
    is_control: bool = False


@dataclass(frozen=True)
class _Marker(_Batch):
    base_offset: int = 0
    control_type: int = ps.ABORT
    coordinator_epoch: int = 0


@dataclass
class _Request:
    producer_id: int
    guard: tv.Guard
    answer: bool | None = None
    marker_since: bool = False


@dataclass
class _World:
    state: ps.ProducerState = ps.EMPTY
    verifications: tv.Verifications = tv.EMPTY
    in_txn: dict[int, bool] = field(default_factory=lambda: dict.fromkeys(PRODUCERS, False))
    pending: list[_Request] = field(default_factory=list)
    offset: int = 0
    sequence: dict[int, int] = field(default_factory=lambda: dict.fromkeys(PRODUCERS, 0))
    appended: int = 0
    refused_after_marker: int = 0

    def append(self, batch: _Batch) -> None:
        self.state = ps.record(self.state, batch, first_offset=self.offset, now_ms=0)
        self.verifications = tv.after_batch(self.verifications, batch)
        self.offset += 1

    def data(self, producer_id: int) -> None:
        self.append(_Batch(producer_id, EPOCH, self.sequence[producer_id]))
        self.sequence[producer_id] += 1
        self.appended += 1


_OPS = st.lists(
    st.tuples(
        st.sampled_from(["add", "commit", "abort", "send", "answer", "append"]),
        st.sampled_from(PRODUCERS),
        st.integers(0, 5),
    ),
    max_size=60,
)


@settings(max_examples=400, deadline=None)
@given(_OPS)
def test_no_batch_verified_before_a_marker_starts_a_transaction_after_it(
    ops: list[tuple[str, int, int]],
) -> None:
    world = _World()
    for op, pid, index in ops:
        if op == "add":
            world.in_txn[pid] = True
        elif op in ("commit", "abort") and world.in_txn[pid]:
            world.in_txn[pid] = False
            world.append(
                _Marker(
                    pid, EPOCH, -1, is_control=True, control_type=ps.COMMIT if op == "commit" else ps.ABORT
                )
            )
            for request in world.pending:
                if request.producer_id == pid:
                    request.marker_since = True
        elif op == "send":
            if not tv.needs_verification(world.state, pid, EPOCH):
                world.data(pid)  # joins its open transaction: no verification, appended at once
            else:
                world.verifications, guard = tv.start(world.verifications, pid, EPOCH, 0)
                world.pending.append(_Request(pid, guard))
        elif op == "answer" and world.pending:
            request = world.pending[index % len(world.pending)]
            if request.answer is None:
                request.answer = world.in_txn[request.producer_id]
        elif op == "append":
            answered = [r for r in world.pending if r.answer is not None]
            if not answered:
                continue
            request = answered[index % len(answered)]
            world.pending.remove(request)
            if not request.answer:
                continue
            allowed = tv.may_append(
                world.state, world.verifications, request.producer_id, EPOCH, request.guard
            )
            open_again = not tv.needs_verification(world.state, request.producer_id, EPOCH)
            assert allowed == (open_again or not request.marker_since)
            if allowed:
                world.data(request.producer_id)
            else:
                world.refused_after_marker += 1
        for producer in PRODUCERS:  # no hanging transaction
            if ps.ongoing_transactions(world.state).get(producer) is not None:
                assert world.in_txn[producer], f"producer {producer}'s transaction hangs"


def test_guards_are_shared_by_one_producer_and_new_after_a_marker() -> None:
    verifications, first = tv.start(tv.EMPTY, 7, 0, 3)
    again, second = tv.start(verifications, 7, 0, 4)
    assert second == first and again is verifications
    _other, bumped = tv.start(verifications, 7, 1, 0)
    assert bumped.token != first.token
    ended = tv.after_batch(verifications, _Marker(7, 0, -1, is_control=True))
    _v, third = tv.start(ended, 7, 0, 3)
    assert third.token != first.token
    # a non-transactional batch (an idempotent one of the same id) leaves the guard
    assert tv.after_batch(verifications, _Batch(7, 0, 0, is_transactional=False)) is verifications


def test_a_batch_above_the_lowest_verified_sequence_is_out_of_order() -> None:
    """Kafka's VerificationStateEntry: the first batch of a transaction is the lowest verified."""
    verifications, guard = tv.start(tv.EMPTY, 7, 0, 5)
    lowered, same = tv.start(verifications, 7, 0, 2)
    assert (same.token, same.lowest_sequence) == (guard.token, 2)
    refused = tv.sequence_refusal(lowered, _Batch(7, 0, 5))
    assert refused is not None and refused.error == ps.ProduceErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert tv.sequence_refusal(lowered, _Batch(7, 0, 2)) is None
    assert tv.sequence_refusal(lowered, _Batch(8, 0, 9)) is None  # another producer
    assert tv.sequence_refusal(tv.after_batch(lowered, _Batch(7, 0, 2)), _Batch(7, 0, 5)) is None


@pytest.mark.parametrize(
    ("coordinator", "version", "answer"),
    [
        (0, 9, None),
        (120, 10, ps.ProduceErrorCode.INVALID_TXN_STATE),
        (48, 10, ps.ProduceErrorCode.INVALID_TXN_STATE),
        (120, 11, ps.ProduceErrorCode.TRANSACTION_ABORTABLE),
        (90, 9, ps.ProduceErrorCode.INVALID_PRODUCER_EPOCH),
        (49, 9, ps.ProduceErrorCode.INVALID_PRODUCER_ID_MAPPING),
        (51, 9, ErrorCode.NOT_ENOUGH_REPLICAS),
        (15, 11, ErrorCode.NOT_ENOUGH_REPLICAS),
        (16, 9, ErrorCode.NOT_ENOUGH_REPLICAS),
        (14, 9, ErrorCode.NOT_ENOUGH_REPLICAS),
        (13, 9, ErrorCode.NOT_ENOUGH_REPLICAS),
        (42, 9, ErrorCode.UNKNOWN_SERVER_ERROR),
    ],
)
def test_produce_answers_of_the_coordinators_codes(coordinator: int, version: int, answer: object) -> None:
    unverified = tv.produce_answer(coordinator, produce_version=version)
    assert (None if unverified is None else unverified.error) == answer
