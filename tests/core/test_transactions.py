"""The transaction coordinator's pure state machine (`jbod_core.transactions`): one example test per
row of the module's decision table (named there), then a model test: random sequences of requests
from several clients sharing a transactional id, appends that succeed or fail, marker completions,
timeouts, expirations and coordinator failovers, checked after every step against Kafka's rules."""

from __future__ import annotations

import random
import re
from dataclasses import replace

import pytest

from jbod_core import group_records, transactions, txn_records
from jbod_core.errors import ErrorCode
from jbod_core.transactions import AnswerNow, NeedProducerId, Transition, TxnConfig, TxnError, TxnMetadata
from jbod_core.txn_records import TransactionState as S

CONFIG = TxnConfig()
TID = "payments-1"
PID = 4000
T0 = 1_000_000


def _init(metadata: TxnMetadata | None, *, now_ms: int = T0, **fields: int) -> transactions.Decision:
    return transactions.init_producer_id(
        metadata, transactional_id=TID, transaction_timeout_ms=60_000, now_ms=now_ms, config=CONFIG, **fields
    )


def _written(decision: transactions.Decision) -> TxnMetadata:
    assert isinstance(decision, Transition), decision
    assert decision.error is TxnError.NONE
    assert decision.after_append is not None
    return decision.after_append


def _fresh() -> TxnMetadata:
    return _written(_init(None, fresh_producer_id=PID))


def _ongoing(partitions: frozenset[tuple[str, int]] = frozenset({("t", 0)})) -> TxnMetadata:
    return _written(
        transactions.add_partitions_to_txn(
            _fresh(), producer_id=PID, producer_epoch=0, partitions=partitions, now_ms=T0 + 1, version=3
        )
    )


def _end(
    metadata: TxnMetadata, *, commit: bool, epoch: int = 0, version: int = 4, pid: int = PID
) -> transactions.Decision:
    return transactions.end_txn(
        metadata, producer_id=pid, producer_epoch=epoch, commit=commit, now_ms=T0 + 2, version=version
    )


def _completed(*, commit: bool) -> TxnMetadata:
    prepared = _written(_end(_ongoing(), commit=commit))
    return _written(transactions.markers_written(prepared, now_ms=T0 + 3))


# --- InitProducerId ----------------------------------------------------------------------------


def test_init_invalid_requests() -> None:
    assert _init(None, producer_id=5) == AnswerNow(TxnError.INVALID_REQUEST)
    assert _init(None, producer_epoch=5) == AnswerNow(TxnError.INVALID_REQUEST)
    empty_id = transactions.init_producer_id(
        None, transactional_id="", transaction_timeout_ms=1000, now_ms=T0, config=CONFIG
    )
    assert empty_id == AnswerNow(TxnError.INVALID_REQUEST)
    for timeout in (0, -1, CONFIG.transaction_max_timeout_ms + 1):
        decision = transactions.init_producer_id(
            _fresh(), transactional_id=TID, transaction_timeout_ms=timeout, now_ms=T0, config=CONFIG
        )
        assert decision == AnswerNow(TxnError.INVALID_TRANSACTION_TIMEOUT)


def test_init_new_and_bump() -> None:
    assert _init(None) == NeedProducerId()
    decision = _init(None, fresh_producer_id=PID)
    assert isinstance(decision, Transition)
    assert decision.holding.pending_state is S.EMPTY and decision.holding.producer_epoch == -1
    assert decision.after_failure.producer_epoch == -1  # Kafka keeps the created id
    value = decision.record.value
    assert value is not None
    assert (value.state, value.producer_id, value.producer_epoch, value.partitions) == (S.EMPTY, PID, 0, None)
    assert (value.previous_producer_id, value.start_timestamp_ms, value.last_update_timestamp_ms) == (
        PID,
        -1,
        T0,
    )
    for metadata in (_fresh(), _completed(commit=True), _completed(commit=False)):
        bumped = _written(_init(metadata, now_ms=T0 + 10))
        assert (bumped.state, bumped.producer_id, bumped.producer_epoch) == (
            S.EMPTY,
            PID,
            metadata.producer_epoch + 1,
        )
        assert bumped.partitions == frozenset() and bumped.last_producer_epoch == -1


def test_init_concurrent() -> None:
    in_flight = _init(_fresh())
    assert isinstance(in_flight, Transition)
    assert _init(in_flight.holding) == AnswerNow(TxnError.CONCURRENT_TRANSACTIONS)
    prepared = _written(_end(_ongoing(), commit=True))
    assert _init(prepared) == AnswerNow(TxnError.CONCURRENT_TRANSACTIONS)
    assert _init(replace(prepared, pending_state=None)) == AnswerNow(TxnError.CONCURRENT_TRANSACTIONS)


def test_init_kip360() -> None:
    metadata = _written(_init(_fresh(), producer_id=PID, producer_epoch=0))
    assert (metadata.producer_epoch, metadata.last_producer_epoch) == (1, 0)
    # a retry with the epoch before the bump gets the same epoch again
    retried = _written(_init(metadata, producer_id=PID, producer_epoch=0))
    assert (retried.producer_epoch, retried.last_producer_epoch) == (1, 0)
    assert _init(metadata, producer_id=PID, producer_epoch=7) == AnswerNow(TxnError.PRODUCER_FENCED)
    assert _init(metadata, producer_id=PID + 1, producer_epoch=1) == AnswerNow(TxnError.PRODUCER_FENCED)
    old = _init(metadata, producer_id=PID + 1, producer_epoch=1, version=3)
    assert old == AnswerNow(TxnError.INVALID_PRODUCER_EPOCH)


def test_init_epoch_exhausted() -> None:
    exhausted = replace(_completed(commit=True), producer_epoch=32766)
    assert _init(exhausted) == NeedProducerId()
    rotated = _init(exhausted, fresh_producer_id=PID + 1, producer_id=PID, producer_epoch=32766)
    assert isinstance(rotated, Transition) and rotated.record.value is not None
    assert (rotated.record.value.producer_id, rotated.record.value.producer_epoch) == (PID + 1, 0)
    assert rotated.record.value.previous_producer_id == PID
    after = _written(rotated)
    assert (after.previous_producer_id, after.last_producer_epoch) == (PID, 32766)
    # the old producer id with its exhausted epoch is still recognised (a KIP-360 retry)
    assert isinstance(_init(after, producer_id=PID, producer_epoch=32766), AnswerNow | Transition)
    assert _init(after, producer_id=PID, producer_epoch=32766) != AnswerNow(TxnError.PRODUCER_FENCED)


def test_init_fences_ongoing() -> None:
    ongoing = _ongoing()
    fence = _init(ongoing, now_ms=T0 + 50)
    assert isinstance(fence, Transition) and fence.record.value is not None
    assert fence.error is TxnError.CONCURRENT_TRANSACTIONS
    assert (fence.record.value.state, fence.record.value.producer_epoch) == (S.PREPARE_ABORT, 1)
    assert fence.holding.producer_epoch == 1  # the old producer is fenced while the abort is written
    assert fence.after_append is not None and fence.after_append.pending_state is S.COMPLETE_ABORT
    # a failed fence keeps the bumped epoch, and the next fence does not bump again
    failed = fence.after_failure
    assert (failed.state, failed.producer_epoch, failed.has_failed_epoch_fence) == (S.ONGOING, 1, True)
    again = _init(failed)
    assert isinstance(again, Transition) and again.record.value is not None
    assert again.record.value.producer_epoch == 1
    done = _written(transactions.markers_written(fence.after_append, now_ms=T0 + 60))
    assert _written(_init(done)).producer_epoch == 2


# --- AddPartitionsToTxn, AddOffsetsToTxn -------------------------------------------------------


def _add(
    metadata: TxnMetadata | None, *, epoch: int = 0, pid: int = PID, version: int = 3, tid: str = TID
) -> transactions.Decision:
    return transactions.add_partitions_to_txn(
        metadata,
        transactional_id=tid,
        producer_id=pid,
        producer_epoch=epoch,
        partitions={("t", 1)},
        now_ms=T0 + 5,
        version=version,
    )


def test_add_errors() -> None:
    assert _add(_fresh(), tid="") == AnswerNow(TxnError.INVALID_REQUEST)
    assert _add(None) == AnswerNow(TxnError.INVALID_PRODUCER_ID_MAPPING)
    assert _add(_fresh(), pid=PID + 1) == AnswerNow(TxnError.INVALID_PRODUCER_ID_MAPPING)
    assert _add(_fresh(), epoch=3) == AnswerNow(TxnError.PRODUCER_FENCED)
    assert _add(_fresh(), epoch=3, version=1) == AnswerNow(TxnError.INVALID_PRODUCER_EPOCH)
    in_flight = _add(_fresh())
    assert isinstance(in_flight, Transition)
    assert _add(in_flight.holding) == AnswerNow(TxnError.CONCURRENT_TRANSACTIONS)
    prepared = _written(_end(_ongoing(), commit=False))
    assert _add(replace(prepared, pending_state=None)) == AnswerNow(TxnError.CONCURRENT_TRANSACTIONS)
    offsets = transactions.add_offsets_to_txn(
        _fresh(), producer_id=PID, producer_epoch=9, group_id="g", now_ms=T0, version=1
    )
    assert offsets == AnswerNow(TxnError.INVALID_PRODUCER_EPOCH)


def test_add_partitions_and_offsets() -> None:
    ongoing = _ongoing()
    assert ongoing.txn_start_timestamp_ms == T0 + 1
    more = _written(_add(ongoing))
    assert more.partitions == {("t", 0), ("t", 1)} and more.txn_start_timestamp_ms == T0 + 1
    assert _add(more) == AnswerNow(TxnError.NONE)  # all in already: nothing written
    with_offsets = _written(
        transactions.add_offsets_to_txn(
            more, producer_id=PID, producer_epoch=0, group_id="g", now_ms=T0 + 6, version=4
        )
    )
    offsets = (
        group_records.OFFSETS_TOPIC,
        group_records.partition_for("g", group_records.DEFAULT_PARTITIONS),
    )
    assert with_offsets.partitions == more.partitions | {offsets}
    restarted = _written(_add(_completed(commit=True)))
    assert restarted.txn_start_timestamp_ms == T0 + 5 and restarted.partitions == {("t", 1)}


def test_verify_only() -> None:
    ongoing = _ongoing()
    partitions = [("t", 0), ("t", 9)]

    def verify(metadata: TxnMetadata | None, **fields: int) -> dict[tuple[str, int], ErrorCode]:
        request = {"producer_id": PID, "producer_epoch": 0} | fields
        return dict(
            transactions.verify_partitions_in_txn(
                metadata, transactional_id=TID, partitions=partitions, **request
            )
        )

    assert verify(ongoing) == {("t", 0): TxnError.NONE, ("t", 9): TxnError.TRANSACTION_ABORTABLE}
    assert set(verify(None).values()) == {TxnError.INVALID_PRODUCER_ID_MAPPING}
    assert set(verify(ongoing, producer_id=1).values()) == {TxnError.INVALID_PRODUCER_ID_MAPPING}
    assert set(verify(ongoing, producer_epoch=1).values()) == {TxnError.PRODUCER_FENCED}
    prepared = _written(_end(ongoing, commit=True))
    assert set(verify(prepared).values()) == {TxnError.CONCURRENT_TRANSACTIONS}
    empty = transactions.verify_partitions_in_txn(
        ongoing, transactional_id="", producer_id=PID, producer_epoch=0, partitions=partitions
    )
    assert set(empty.values()) == {TxnError.INVALID_REQUEST}


# --- EndTxn and the markers --------------------------------------------------------------------


def test_end_txn_errors() -> None:
    ongoing = _ongoing()
    assert transactions.end_txn(
        ongoing, transactional_id="", producer_id=PID, producer_epoch=0, commit=True, now_ms=T0, version=4
    ) == AnswerNow(TxnError.INVALID_REQUEST)
    assert transactions.end_txn(
        None, transactional_id=TID, producer_id=PID, producer_epoch=0, commit=True, now_ms=T0, version=4
    ) == AnswerNow(TxnError.INVALID_PRODUCER_ID_MAPPING)
    assert _end(ongoing, commit=True, pid=PID + 1) == AnswerNow(TxnError.INVALID_PRODUCER_ID_MAPPING)
    assert _end(ongoing, commit=True, epoch=1) == AnswerNow(TxnError.PRODUCER_FENCED)
    assert _end(ongoing, commit=True, epoch=1, version=1) == AnswerNow(TxnError.INVALID_PRODUCER_EPOCH)
    prepared = _written(_end(ongoing, commit=True))  # its markers are being written
    assert _end(prepared, commit=False) == AnswerNow(TxnError.CONCURRENT_TRANSACTIONS)
    assert _end(_fresh(), commit=True) == AnswerNow(TxnError.INVALID_TXN_STATE)


def test_end_txn_retries() -> None:
    assert _end(_completed(commit=True), commit=True) == AnswerNow(TxnError.NONE)
    assert _end(_completed(commit=False), commit=False) == AnswerNow(TxnError.NONE)
    assert _end(_completed(commit=True), commit=False) == AnswerNow(TxnError.INVALID_TXN_STATE)
    assert _end(_completed(commit=False), commit=True) == AnswerNow(TxnError.INVALID_TXN_STATE)
    # loaded without its completion pending (Kafka's rows for Prepare* with nothing in flight)
    for commit, state in ((True, S.PREPARE_COMMIT), (False, S.PREPARE_ABORT)):
        prepared = replace(_written(_end(_ongoing(), commit=commit)), pending_state=None)
        assert prepared.state is state
        assert _end(prepared, commit=commit) == AnswerNow(TxnError.CONCURRENT_TRANSACTIONS)
        assert _end(prepared, commit=not commit) == AnswerNow(TxnError.INVALID_TXN_STATE)


def test_commit_and_abort() -> None:
    for commit, prepared_state, complete_state in (
        (True, S.PREPARE_COMMIT, S.COMPLETE_COMMIT),
        (False, S.PREPARE_ABORT, S.COMPLETE_ABORT),
    ):
        decision = _end(_ongoing(), commit=commit)
        assert isinstance(decision, Transition) and decision.record.value is not None
        assert decision.record.value.state is prepared_state
        assert decision.after_failure.state is S.ONGOING and decision.after_failure.pending_state is None
        prepared = _written(decision)
        assert prepared.pending_state is complete_state
        completion = transactions.markers_written(prepared, now_ms=T0 + 9)
        assert completion.record.value is not None
        assert (completion.record.value.state, completion.record.value.partitions) == (complete_state, ())
        assert completion.record.value.start_timestamp_ms == T0 + 1
        assert completion.after_failure == prepared  # retried until written
        done = _written(completion)
        assert (done.partitions, done.pending_state) == (frozenset(), None)
    with pytest.raises(ValueError, match="no markers"):
        transactions.markers_written(_ongoing(), now_ms=T0)


# --- Timers, loading, views --------------------------------------------------------------------


def test_timeout_abort() -> None:
    ongoing = _ongoing()  # started at T0 + 1, 60 s timeout
    assert transactions.abort_timed_out(ongoing, now_ms=T0 + 1 + 60_000) is None
    fence = transactions.abort_timed_out(ongoing, now_ms=T0 + 2 + 60_000)
    assert isinstance(fence, Transition) and fence.record.value is not None
    assert (fence.record.value.state, fence.record.value.producer_epoch) == (S.PREPARE_ABORT, 1)
    assert transactions.abort_timed_out(fence.holding, now_ms=T0 + 10**9) is None
    assert transactions.abort_timed_out(_fresh(), now_ms=T0 + 10**9) is None
    assert fence.after_append is not None
    assert _end(fence.after_append, commit=True) == AnswerNow(TxnError.PRODUCER_FENCED)


def test_expiration() -> None:
    expiry = CONFIG.transactional_id_expiration_ms
    for metadata in (_fresh(), _completed(commit=True), _completed(commit=False)):
        last = metadata.txn_last_update_timestamp_ms
        assert transactions.expire(metadata, now_ms=last + expiry - 1, config=CONFIG) is None
        tombstone = transactions.expire(metadata, now_ms=last + expiry, config=CONFIG)
        assert isinstance(tombstone, Transition)
        assert tombstone.record == txn_records.TxnRecord(TID, None)
        assert tombstone.after_append is None and tombstone.holding.pending_state is S.DEAD
        assert tombstone.after_failure == metadata
    assert transactions.expire(_ongoing(), now_ms=T0 + 10 * expiry, config=CONFIG) is None


def test_loaded_describe_and_list() -> None:
    prepared = _end(_ongoing(frozenset({("t", 0), ("u", 2)})), commit=True)
    assert isinstance(prepared, Transition)
    loaded = transactions.loaded(prepared.record)
    assert loaded is not None and loaded.pending_state is S.COMPLETE_COMMIT  # markers to resend
    assert transactions.loaded(txn_records.TxnRecord(TID, None)) is None
    described = transactions.describe(loaded, transactional_id=TID)
    assert (described.error, described.state, described.producer_id) == (TxnError.NONE, "PrepareCommit", PID)
    assert described.topics == (("t", (0,)), ("u", (2,)))
    assert transactions.describe(None, transactional_id=TID).error is TxnError.TRANSACTIONAL_ID_NOT_FOUND
    assert transactions.describe(None, transactional_id="").error is TxnError.INVALID_REQUEST

    other = replace(_fresh(), transactional_id="other", producer_id=7)
    every = [loaded, other]
    listing = transactions.list_transactions(every, now_ms=T0 + 100)
    assert [(t.transactional_id, t.state) for t in listing.transactions] == [
        (TID, "PrepareCommit"),
        ("other", "Empty"),
    ]
    by_state = transactions.list_transactions(every, now_ms=T0, state_filters=["Empty", "Bogus"])
    assert [t.transactional_id for t in by_state.transactions] == ["other"]
    assert by_state.unknown_state_filters == ("Bogus",)
    assert [
        t.producer_id
        for t in transactions.list_transactions(every, now_ms=T0, producer_id_filters=[7]).transactions
    ] == [7]
    # duration: started more than 50 ms ago (Empty has no start: always older)
    long_running = transactions.list_transactions(every, now_ms=T0 + 51, duration_filter_ms=50)
    assert [t.transactional_id for t in long_running.transactions] == ["other"]
    assert len(transactions.list_transactions(every, now_ms=T0 + 52, duration_filter_ms=50).transactions) == 2
    pattern = transactions.list_transactions(every, now_ms=T0, transactional_id_pattern=re.compile("pay.*"))
    assert [t.transactional_id for t in pattern.transactions] == [TID]


def test_append_errors() -> None:
    assert transactions.append_error(ErrorCode.NOT_ENOUGH_REPLICAS) is TxnError.COORDINATOR_NOT_AVAILABLE
    assert transactions.append_error(ErrorCode.NOT_LEADER_OR_FOLLOWER) is TxnError.NOT_COORDINATOR
    assert transactions.append_error(ErrorCode.KAFKA_STORAGE_ERROR) is TxnError.NOT_COORDINATOR
    assert transactions.append_error(ErrorCode.MESSAGE_TOO_LARGE) is TxnError.UNKNOWN_SERVER_ERROR


# --- The model test ----------------------------------------------------------------------------

# Kafka 4.3.1's valid previous states without the rows only transaction version 2 reaches.
KAFKA_TV1_PREVIOUS = {
    S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_COMMIT: {S.ONGOING},
    S.PREPARE_ABORT: {S.ONGOING},  # from Ongoing also when it fences (PrepareEpochFence in Kafka's memory)
    S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
    S.COMPLETE_ABORT: {S.PREPARE_ABORT},
    S.DEAD: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
}
PARTITIONS = [("t", 0), ("t", 1), ("u", 0)]


class Model:
    """One transactional id's coordinator and the clients sharing the id."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.now = T0
        self.metadata: TxnMetadata | None = None
        self.in_flight: Transition | None = None
        self.clients: list[tuple[int, int] | None] = [None, None, None]  # (producer id, epoch) each got
        self.issued: tuple[int, int] | None = None  # the last (producer id, epoch) answered
        self.next_pid = PID
        self.last_record: txn_records.TxnRecord | None = None
        self.epochs: dict[int, int] = {}  # the highest epoch written per producer id

    def decide(self, decision: transactions.Decision | None, *, client: int | None = None) -> None:
        if decision is None or isinstance(decision, AnswerNow):
            return
        assert not isinstance(decision, NeedProducerId)
        assert self.in_flight is None, "a decision wrote while another write was in flight"
        self.check(decision)
        self.in_flight = decision
        self.metadata = decision.holding
        self.in_flight_client = client

    def check(self, transition: Transition) -> None:
        record = transition.record
        source = transition.holding.state
        target = S.DEAD if record.value is None else record.value.state
        assert source in KAFKA_TV1_PREVIOUS[target], (source, target)
        assert txn_records.decode(*txn_records.encode(record)) == record
        if record.value is None:
            return
        value = record.value
        partitions = {(e.topic, p) for e in value.partitions or () for p in e.partitions}
        if partitions - transition.holding.partitions:
            assert target is S.ONGOING, "partitions added outside Ongoing"
        if target in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            assert value.partitions == ()
        if target is S.EMPTY:
            assert value.partitions is None
        assert value.producer_epoch >= self.epochs.get(value.producer_id, 0), "an epoch went back"
        after = transition.after_append
        assert after is not None
        reloaded = transactions.loaded(record)
        assert reloaded is not None
        for field in (
            "producer_id",
            "producer_epoch",
            "state",
            "partitions",
            "txn_timeout_ms",
            "txn_start_timestamp_ms",
            "txn_last_update_timestamp_ms",
            "pending_state",
        ):
            assert getattr(reloaded, field) == getattr(after, field), field

    def finish(self, *, ok: bool) -> None:
        transition = self.in_flight
        assert transition is not None
        self.in_flight = None
        if not ok:
            self.metadata = transition.after_failure
            return
        self.metadata = transition.after_append
        self.last_record = transition.record
        value = transition.record.value
        if value is not None:
            self.epochs[value.producer_id] = max(self.epochs.get(value.producer_id, 0), value.producer_epoch)
        client = self.in_flight_client
        if (
            client is not None
            and transition.error is TxnError.NONE
            and value is not None
            and value.state is S.EMPTY
        ):
            self.clients[client] = self.issued = (value.producer_id, value.producer_epoch)

    def accepted_only_latest(self, client: int, decision: transactions.Decision) -> None:
        """A request was accepted (written or NONE) only from the latest epoch answered."""
        if isinstance(decision, Transition) or decision == AnswerNow(TxnError.NONE):
            assert self.clients[client] == self.issued, "a fenced epoch was accepted"

    def step(self) -> None:
        rng = self.rng
        self.now += rng.choice((1, 10, 1000, 30_000))
        client = rng.randrange(len(self.clients))
        held = self.clients[client]
        pid, epoch = held if held is not None else (PID, 0)
        if rng.random() < 0.1:  # a zombie: an old epoch of its own
            epoch -= rng.randint(1, 2)
        kind = rng.choices(range(9), weights=(1, 3, 3, 1, 4, 4, 1, 1, 1))[0]
        if self.in_flight is not None and rng.random() < 0.5:
            self.finish(ok=rng.random() < 0.8)
            return
        if kind == 0:
            kip360 = held is not None and rng.random() < 0.5
            fields = {"producer_id": pid, "producer_epoch": max(epoch, 0)} if kip360 else {}
            decision = _init(self.metadata, now_ms=self.now, **fields)
            if isinstance(decision, NeedProducerId):
                self.next_pid += 1
                decision = _init(self.metadata, now_ms=self.now, fresh_producer_id=self.next_pid, **fields)
            self.decide(decision, client=client)
        elif kind in (1, 2):
            decision = transactions.add_partitions_to_txn(
                self.metadata,
                transactional_id=TID,
                producer_id=pid,
                producer_epoch=epoch,
                partitions=rng.sample(PARTITIONS, rng.randint(1, 2)),
                now_ms=self.now,
                version=3,
            )
            self.accepted_only_latest(client, decision)
            self.decide(decision)
        elif kind == 3:
            decision = transactions.add_offsets_to_txn(
                self.metadata,
                transactional_id=TID,
                producer_id=pid,
                producer_epoch=epoch,
                group_id="g",
                now_ms=self.now,
                version=4,
            )
            self.accepted_only_latest(client, decision)
            self.decide(decision)
        elif kind == 4:
            decision = transactions.end_txn(
                self.metadata,
                transactional_id=TID,
                producer_id=pid,
                producer_epoch=epoch,
                commit=rng.random() < 0.6,
                now_ms=self.now,
                version=4,
            )
            self.accepted_only_latest(client, decision)
            self.decide(decision)
        elif kind == 5 and self.metadata is not None and self.in_flight is None:
            pending = self.metadata.pending_state
            if pending in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
                self.decide(transactions.markers_written(self.metadata, now_ms=self.now))
        elif kind == 6 and self.metadata is not None:
            self.now += rng.choice((0, 70_000))
            self.decide(transactions.abort_timed_out(self.metadata, now_ms=self.now))
        elif kind == 7 and self.metadata is not None and rng.random() < 0.2:
            self.now += CONFIG.transactional_id_expiration_ms
            self.decide(transactions.expire(self.metadata, now_ms=self.now, config=CONFIG))
        elif kind == 8 and self.in_flight is None and self.last_record is not None and rng.random() < 0.3:
            self.metadata = transactions.loaded(self.last_record)  # a new coordinator takes over
        if self.metadata is not None:
            assert (
                self.metadata.state not in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
                or not self.metadata.partitions
            )


def test_model_random_request_sequences() -> None:
    for seed in range(150):
        model = Model(random.Random(seed))
        for _ in range(120):
            model.step()
