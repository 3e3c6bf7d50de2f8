"""Transactions on a partition's log against a brute-force reference (issue 33): random
interleavings of idempotent and transactional producers' batches with commit and abort markers
(transaction versions 0 and 2: with and without the coordinator's epoch bump). The reference reads
the list of batches from scratch at every point: each producer's ongoing transaction (its first
transactional batch after its last marker), the LSO, and the aborted transactions a read_committed
fetch from any offset must get. The producer state built one batch at a time, `from_batches`, a
snapshot taken anywhere and replayed, a truncation anywhere, and the aborted-transactions index
(searched segment by segment as a fetch does) all agree with it; and a read_committed consumer
driven by that index sees exactly the committed and the non-transactional records below the LSO.

Then example tests for each new row of `producer_state.check`, and the `.txnindex` format."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jbod_core import producer_state as ps
from jbod_core import txn_index
from jbod_kafka import control_records, record_batch
from jbod_kafka.control_records import ControlRecordType, Marker
from jbod_kafka.record_batch import BatchHeader

TXN = 0x10


def data(pid: int, epoch: int, seq: int, count: int, *, offset: int, ts: int, txn: bool) -> BatchHeader:
    return BatchHeader(
        position=0,
        size=record_batch.HEADER_SIZE,
        base_offset=offset,
        leader_epoch=0,
        crc=0,
        attributes=TXN if txn else 0,
        last_offset_delta=count - 1,
        base_timestamp=ts,
        max_timestamp_ms=ts,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        record_count=count,
    )


def marker(
    pid: int, epoch: int, *, commit: bool, offset: int = 0, ts: int = 0, coordinator_epoch: int = 0
) -> Marker:
    return Marker(
        control_type=ControlRecordType.COMMIT if commit else ControlRecordType.ABORT,
        coordinator_epoch=coordinator_epoch,
        producer_id=pid,
        producer_epoch=epoch,
        base_offset=offset,
        leader_epoch=0,
        timestamp_ms=ts,
    )


Logged = BatchHeader | Marker


# --- the reference: everything recomputed from the list of batches ----------------------------


def ref_ongoing(log: list[Logged]) -> dict[int, int]:
    """Each producer's ongoing transaction: its first transactional batch after its last marker."""
    ongoing: dict[int, int] = {}
    for pid in {b.producer_id for b in log}:
        mine = [b for b in log if b.producer_id == pid]
        last_marker = max((i for i, b in enumerate(mine) if b.is_control), default=-1)
        after = [b for b in mine[last_marker + 1 :] if b.is_transactional]
        if after:
            ongoing[pid] = after[0].base_offset
    return ongoing


def ref_aborted(log: list[Logged]) -> list[tuple[int, int, int]]:
    """(producer id, first offset, abort marker offset) of every aborted non-empty transaction."""
    aborted = []
    for i, b in enumerate(log):
        if isinstance(b, Marker) and b.aborted:
            before = ref_ongoing(log[:i])
            if b.producer_id in before:
                aborted.append((b.producer_id, before[b.producer_id], b.base_offset))
    return aborted


def ref_visible(log: list[Logged], fetch_offset: int, lso: int) -> list[int]:
    """The data offsets a read_committed consumer must see from `fetch_offset` below `lso`."""
    aborted_ranges = [(pid, first, last) for pid, first, last in ref_aborted(log)]
    seen = []
    for b in log:
        if b.is_control:
            continue
        for offset in range(b.base_offset, b.base_offset + b.last_offset_delta + 1):
            if not fetch_offset <= offset < lso:
                continue
            if b.is_transactional and any(
                pid == b.producer_id and first <= offset < last for pid, first, last in aborted_ranges
            ):
                continue
            seen.append(offset)
    return seen


# --- the script --------------------------------------------------------------------------------


@dataclass
class Client:
    pid: int
    transactional: bool
    bumps: bool  # transaction version 2: the coordinator bumps the epoch with each marker
    epoch: int = 0
    seq: int = 0
    in_txn: bool = False
    acked: list[BatchHeader] = field(default_factory=list)


steps = st.lists(
    st.tuples(
        st.integers(0, 3),
        st.sampled_from(["data", "data", "data", "commit", "abort", "empty"]),
        st.integers(1, 3),
    ),
    min_size=15,
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(script=steps, segment_size=st.integers(3, 12))
def test_the_producer_state_and_the_aborted_index_agree_with_the_reference(
    script: list[tuple[int, str, int]], segment_size: int
) -> None:
    clients = [
        Client(100, transactional=True, bumps=False),
        Client(101, transactional=True, bumps=True),
        Client(102, transactional=True, bumps=False),
        Client(103, transactional=False, bumps=False),
    ]
    state = ps.EMPTY
    log: list[Logged] = []
    states = [state]  # the state after each prefix of the log
    index: list[txn_index.AbortedTxn] = []
    end = 0
    for which, action, count in script:
        c = clients[which]
        ts = 1_000 + end
        if action == "data" or not c.transactional:
            b: Logged = data(c.pid, c.epoch, c.seq, count, offset=end, ts=ts, txn=c.transactional)
            assert isinstance(ps.check(state, b), ps.Append)
            c.seq += count
            c.in_txn = c.transactional
        elif action == "empty" and c.in_txn:
            continue
        else:
            if action != "empty" and not c.in_txn:
                continue
            epoch = c.epoch + 1 if c.bumps else c.epoch
            b = marker(c.pid, epoch, commit=action == "commit", offset=end, ts=ts)
            version = 2 if c.bumps else 0
            assert ps.check(state, b, transaction_version=version) == ps.Append(
                ps.AppendReason.END_TRANSACTION
            )
            completed = ps.completed_txn(state, b, offset=end)
            assert (completed is not None) == c.in_txn
            if c.bumps:
                c.epoch, c.seq = epoch, 0
            c.in_txn = False
        after = ps.record(state, b, first_offset=end, now_ms=ts)
        if b.is_control and completed is not None and completed.aborted:
            index.append(
                txn_index.aborted_txn(
                    producer_id=completed.producer_id,
                    first_offset=completed.first_offset,
                    last_offset=completed.last_offset,
                    first_unstable_offset=ps.first_unstable_offset(after),
                )
            )
        state = after
        log.append(b)
        states.append(state)
        end += b.last_offset_delta + 1
        assert ps.ongoing_transactions(state) == ref_ongoing(log)
        ongoing = ref_ongoing(log)
        assert ps.first_unstable_offset(state) == (min(ongoing.values()) if ongoing else None)
        for hw in (0, end // 2, end):
            assert txn_index.last_stable_offset(ps.first_unstable_offset(state), hw) == min(
                [hw, *ongoing.values()]
            )

    # Rebuilt from the log, from a snapshot taken anywhere, and after truncations.
    assert ps.from_batches(log) == state
    for k in range(len(log) + 1):
        snapshot = ps.decode_snapshot(ps.encode_snapshot(states[k]))
        assert snapshot == states[k]
        assert ps.from_batches(log[k:], start=snapshot) == state
        cut_at = log[k].base_offset if k < len(log) else end
        if not any(b.is_control for b in log[k:]):
            truncated = ps.truncate(state, cut_at)
            assert ps.ongoing_transactions(truncated) == ref_ongoing(log[:k])
            assert ps.first_unstable_offset(truncated) == ps.first_unstable_offset(states[k])

    # The index holds exactly the aborted transactions, in Kafka's file format.
    assert [(e.producer_id, e.first_offset, e.last_offset) for e in index] == ref_aborted(log)
    assert txn_index.decode_entries(txn_index.encode_entries(index)) == tuple(index)
    lso = txn_index.last_stable_offset(ps.first_unstable_offset(state), end)
    segments: dict[int, list[txn_index.AbortedTxn]] = {}
    for entry in index:
        segments.setdefault(entry.last_offset // segment_size, []).append(entry)
    for fetch_offset in range(end + 1):
        for upper in {fetch_offset + 1, fetch_offset + segment_size, lso, end}:
            expected = [
                (pid, first, last)
                for pid, first, last in ref_aborted(log)
                if last >= fetch_offset and first < upper
            ]
            got = _fetch_aborted(segments, fetch_offset, upper, segment_size, end)
            assert [(e.producer_id, e.first_offset, e.last_offset) for e in got] == expected
            assert txn_index.aborted_between(index, fetch_offset, upper) == tuple(got)
        if fetch_offset <= lso:
            aborted = _fetch_aborted(segments, fetch_offset, lso, segment_size, end)
            assert _read_committed(log, fetch_offset, lso, aborted) == ref_visible(log, fetch_offset, lso)


def _fetch_aborted(
    segments: dict[int, list[txn_index.AbortedTxn]],
    fetch_offset: int,
    upper: int,
    segment_size: int,
    end: int,
) -> list[txn_index.AbortedTxn]:
    """Kafka's `collectAbortedTransactions`: segment indexes from the fetch offset's onwards,
    until one search is complete."""
    found: list[txn_index.AbortedTxn] = []
    for segment in range(fetch_offset // segment_size, end // segment_size + 1):
        result = txn_index.collect_aborted(
            segments.get(segment, []), fetch_offset=fetch_offset, upper_bound=upper
        )
        found.extend(result.aborted)
        if result.complete:
            break
    return found


def _read_committed(
    log: list[Logged], fetch_offset: int, lso: int, aborted: list[txn_index.AbortedTxn]
) -> list[int]:
    """A read_committed consumer (Kafka's `CompletedFetch`): the batches below the LSO, skipping a
    transactional batch of a producer whose aborted transaction began at or before it, until that
    producer's abort marker."""
    pending = sorted(aborted, key=lambda e: e.first_offset)
    aborting: set[int] = set()
    seen = []
    for b in log:
        if b.base_offset >= lso:
            break
        while pending and pending[0].first_offset <= b.base_offset + b.last_offset_delta:
            aborting.add(pending.pop(0).producer_id)
        if isinstance(b, Marker):
            if b.aborted:
                aborting.discard(b.producer_id)
            continue
        if b.is_transactional and b.producer_id in aborting:
            continue
        seen.extend(
            o for o in range(b.base_offset, b.base_offset + b.last_offset_delta + 1) if o >= fetch_offset
        )
    return seen


# --- check: the rows for transactions ---------------------------------------------------------


PID = 7


def _after(*batches: Logged) -> ps.ProducerState:
    state = ps.EMPTY
    end = 0
    for b in batches:
        state = ps.record(state, b, first_offset=end, now_ms=end)
        end += b.last_offset_delta + 1
    return state


def _refused(verdict: ps.Verdict) -> tuple[ps.ProduceErrorCode, str]:
    assert isinstance(verdict, ps.Refused), verdict
    return verdict.error, verdict.message


def test_a_transactional_batch_starts_a_transaction_and_a_marker_completes_it() -> None:
    state = _after(data(PID, 3, 0, 2, offset=0, ts=0, txn=True))
    assert ps.ongoing_transactions(state) == {PID: 0}
    more = data(PID, 3, 2, 1, offset=2, ts=0, txn=True)
    assert ps.check(state, more) == ps.Append(ps.AppendReason.NEXT_SEQUENCE)
    state = ps.record(state, more, first_offset=2, now_ms=5)
    assert ps.ongoing_transactions(state) == {PID: 0}  # still the transaction's first offset
    end = marker(PID, 3, commit=False, coordinator_epoch=4)
    assert ps.completed_txn(state, end, offset=3) == ps.CompletedTxn(PID, 0, 3, aborted=True)
    state = ps.record(state, end, first_offset=3, now_ms=6)
    entry = state.producers[PID]
    assert (entry.current_txn_first_offset, entry.coordinator_epoch, entry.last_active_ms) == (None, 4, 6)
    assert len(entry.batches) == 2  # a marker of the same epoch keeps the batches: sequences go on
    assert ps.check(state, data(PID, 3, 3, 1, offset=4, ts=0, txn=True)) == ps.Append(
        ps.AppendReason.NEXT_SEQUENCE
    )
    assert ps.completed_txn(state, marker(PID, 3, commit=True), offset=4) is None  # an empty transaction


def test_a_non_transactional_batch_during_a_transaction_is_an_invalid_txn_state() -> None:
    state = _after(data(PID, 0, 0, 1, offset=0, ts=0, txn=True))
    error, message = _refused(ps.check(state, data(PID, 0, 1, 1, offset=1, ts=0, txn=False)))
    assert error == ps.ProduceErrorCode.INVALID_TXN_STATE == 48
    assert message.startswith(f"Expected transactional write from producer {PID}")
    # Kafka checks the sequence first, and the epoch before that.
    assert _refused(ps.check(state, data(PID, 0, 5, 1, offset=1, ts=0, txn=False)))[0] == 45
    assert _refused(ps.check(state, data(PID, 1, 3, 1, offset=1, ts=0, txn=False)))[0] == 45
    with pytest.raises(ValueError, match="while its transaction at offset 0 is ongoing"):
        ps.record(state, data(PID, 0, 1, 1, offset=1, ts=0, txn=False), first_offset=1, now_ms=0)
    # After the marker, a non-transactional batch is the next sequence again.
    state = ps.record(state, marker(PID, 0, commit=True), first_offset=1, now_ms=0)
    assert ps.check(state, data(PID, 0, 1, 1, offset=2, ts=0, txn=False)) == ps.Append(
        ps.AppendReason.NEXT_SEQUENCE
    )


def test_a_transactional_batch_after_idempotent_ones_starts_a_transaction() -> None:
    state = _after(data(PID, 0, 0, 1, offset=0, ts=0, txn=False))
    b = data(PID, 0, 1, 1, offset=1, ts=0, txn=True)
    assert ps.check(state, b) == ps.Append(ps.AppendReason.NEXT_SEQUENCE)
    assert ps.ongoing_transactions(ps.record(state, b, first_offset=1, now_ms=0)) == {PID: 1}


@pytest.mark.parametrize(
    ("current", "ongoing", "marker_epoch", "version", "allowed"),
    [
        (5, True, 4, 0, False),
        (5, True, 5, 0, True),
        (5, True, 6, 0, True),
        (5, True, 4, 1, False),
        (5, True, 5, 1, True),
        (5, True, 5, 2, False),  # transaction version 2: the coordinator bumped the epoch
        (5, True, 6, 2, True),
        (5, False, 5, 2, True),  # a retried marker of a completed transaction (KAFKA-19999)
        (5, False, 4, 2, False),
        (5, False, 4, 0, False),
    ],
)
def test_a_marker_of_an_older_epoch_is_an_invalid_producer_epoch(
    current: int, ongoing: bool, marker_epoch: int, version: int, allowed: bool
) -> None:
    state = _after(data(PID, current, 0, 1, offset=0, ts=0, txn=ongoing))
    verdict = ps.check(state, marker(PID, marker_epoch, commit=True), transaction_version=version)
    if allowed:
        assert verdict == ps.Append(ps.AppendReason.END_TRANSACTION)
    else:
        error, message = _refused(verdict)
        assert error == ps.ProduceErrorCode.INVALID_PRODUCER_EPOCH
        assert message == (
            f"Epoch of producer {PID} is {marker_epoch}, which is {'<=' if version >= 2 else '<'} the last "
            f"seen epoch {current} (TV{version})"
        )


def test_a_marker_of_an_older_coordinator_epoch_is_fenced() -> None:
    state = _after(
        data(PID, 1, 0, 1, offset=0, ts=0, txn=True), marker(PID, 1, commit=True, coordinator_epoch=3)
    )
    assert ps.check(
        state, marker(PID, 1, commit=False, coordinator_epoch=3), transaction_version=0
    ) == ps.Append(ps.AppendReason.END_TRANSACTION)
    error, message = _refused(
        ps.check(state, marker(PID, 1, commit=False, coordinator_epoch=2), transaction_version=0)
    )
    assert error == ps.ProduceErrorCode.TRANSACTION_COORDINATOR_FENCED == 52
    assert message == f"Invalid coordinator epoch for producerId {PID}: 2 (zombie), 3 (current)"


def test_a_marker_for_an_unknown_producer_is_appended_and_its_next_batch_starts_at_zero() -> None:
    m = marker(PID, 2, commit=False, coordinator_epoch=1)
    assert ps.check(ps.EMPTY, m, transaction_version=2) == ps.Append(ps.AppendReason.END_TRANSACTION)
    assert ps.completed_txn(ps.EMPTY, m, offset=0) is None
    state = ps.record(ps.EMPTY, m, first_offset=0, now_ms=0)
    assert state.producers[PID] == ps.ProducerEntry(2, (), 0, coordinator_epoch=1)
    assert ps.check(state, data(PID, 2, 0, 1, offset=1, ts=0, txn=True)) == ps.Append(
        ps.AppendReason.NEXT_SEQUENCE
    )
    assert _refused(ps.check(state, data(PID, 2, 4, 1, offset=1, ts=0, txn=True)))[0] == 45


def test_a_marker_of_a_new_epoch_drops_the_retained_batches() -> None:
    state = _after(data(PID, 0, 0, 3, offset=0, ts=0, txn=True), marker(PID, 1, commit=True))
    assert state.producers[PID].batches == ()
    assert state.producers[PID].producer_epoch == 1
    old = data(PID, 0, 0, 3, offset=0, ts=0, txn=True)  # a retry of the committed batch: fenced
    assert _refused(ps.check(state, old))[0] == ps.ProduceErrorCode.INVALID_PRODUCER_EPOCH


def test_a_marker_is_checked_and_recorded_only_as_a_marker() -> None:
    header = record_batch.read_header(
        control_records.marker_batch(
            control_type=ControlRecordType.COMMIT,
            producer_id=PID,
            producer_epoch=0,
            coordinator_epoch=0,
            timestamp_ms=0,
        )
    )
    with pytest.raises(ValueError, match="not given as its end-transaction marker"):
        ps.record(ps.EMPTY, header, first_offset=0, now_ms=0)
    with pytest.raises(ValueError, match="transaction version"):
        ps.check(ps.EMPTY, marker(PID, 0, commit=True))


def test_expire_keeps_a_producer_with_an_ongoing_transaction() -> None:
    state = _after(data(1, 0, 0, 1, offset=0, ts=0, txn=True), data(2, 0, 0, 1, offset=1, ts=0, txn=False))
    assert set(ps.expire(state, now_ms=10**12).producers) == {1}


def test_truncation_drops_a_transaction_that_began_after_the_cut() -> None:
    state = _after(
        data(1, 0, 0, 1, offset=0, ts=0, txn=True),
        data(2, 0, 0, 1, offset=1, ts=0, txn=True),
        data(1, 0, 1, 1, offset=2, ts=0, txn=True),
    )
    assert ps.ongoing_transactions(ps.truncate(state, 1)) == {1: 0}
    assert ps.first_unstable_offset(ps.truncate(state, 0)) is None
    assert ps.truncate(state, 0) == ps.EMPTY


# --- the .txnindex format ---------------------------------------------------------------------


def test_the_index_entry_is_kafkas_34_bytes() -> None:
    entry = txn_index.AbortedTxn(producer_id=9, first_offset=10, last_offset=20, last_stable_offset=15)
    assert txn_index.encode_entries([entry]) == struct.pack(">hqqqq", 0, 9, 10, 20, 15)
    assert txn_index.ENTRY_SIZE == 34


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (struct.pack(">hqqqq", 0, 9, 10, 20, 15)[:-1], "ends inside an entry"),
        (struct.pack(">hqqqq", 1, 9, 10, 20, 15), "version 1"),
        (struct.pack(">hqqqq", 0, -1, 10, 20, 15), "Producer id"),
        (struct.pack(">hqqqq", 0, 9, 21, 20, 15), "Bad transaction offsets"),
        (struct.pack(">hqqqq", 0, 9, 10, 20, 22), "after the marker"),
        (struct.pack(">hqqqq", 0, 9, 10, 20, 15) * 2, "not after 20"),
    ],
)
def test_a_damaged_index_is_refused(data: bytes, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        txn_index.decode_entries(data)


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=200))
def test_arbitrary_index_bytes_decode_or_raise_value_error(body: bytes) -> None:
    try:
        entries = txn_index.decode_entries(body)
    except ValueError:
        return
    assert txn_index.encode_entries(entries) == body
