"""Kafka's idempotent producer state of one partition: every rule of `check` with Kafka's codes,
`record` as the one mutation path, rebuild, truncation, expiry and snapshots."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field, replace

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from jbod_core import producer_state as ps
from jbod_kafka import record_batch
from jbod_kafka.record_batch import BatchHeader

MAX = 2**31 - 1
PID = 1000


def batch(
    pid: int, epoch: int, seq: int, count: int = 1, *, offset: int = 0, ts: int = 0, txn: bool = False
) -> BatchHeader:
    """A produced (or, with `offset`, logged) batch header as jbod_kafka parses it (`txn`: transactional)."""
    return BatchHeader(
        position=0,
        size=record_batch.HEADER_SIZE,
        base_offset=offset,
        leader_epoch=0,
        crc=0,
        attributes=0x10 if txn else 0,
        last_offset_delta=count - 1,
        base_timestamp=ts,
        max_timestamp_ms=ts,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        record_count=count,
    )


def appended(state: ps.ProducerState, b: BatchHeader, offset: int, now_ms: int = 0) -> ps.ProducerState:
    """Check `b`, insist it is appended, and record it at `offset`."""
    verdict = ps.check(state, b)
    assert isinstance(verdict, ps.Append), verdict
    return ps.record(state, b, first_offset=offset, now_ms=now_ms)


def refused(verdict: ps.Verdict) -> ps.ProduceErrorCode:
    assert isinstance(verdict, ps.Refused), verdict
    return verdict.error


# --- check: every row of the table -------------------------------------------------------------


def test_the_error_codes_are_kafkas() -> None:
    assert {e.name: e.value for e in ps.ProduceErrorCode} == {
        "OUT_OF_ORDER_SEQUENCE_NUMBER": 45,
        "INVALID_PRODUCER_EPOCH": 47,
        "INVALID_TXN_STATE": 48,
        "INVALID_PRODUCER_ID_MAPPING": 49,
        "TRANSACTION_COORDINATOR_FENCED": 52,
        "INVALID_RECORD": 87,
        "TRANSACTION_ABORTABLE": 120,
    }


def test_a_batch_without_producer_id_is_appended_and_not_tracked() -> None:
    b = batch(-1, -1, -1, 3)
    assert ps.check(ps.EMPTY, b) == ps.Append(ps.AppendReason.NOT_IDEMPOTENT)
    assert ps.record(ps.EMPTY, b, first_offset=0, now_ms=5) is ps.EMPTY
    state = appended(ps.EMPTY, batch(PID, 0, 0), 0)
    assert ps.record(state, b, first_offset=1, now_ms=5) is state


def test_a_negative_base_sequence_is_an_invalid_record() -> None:
    verdict = ps.check(ps.EMPTY, batch(PID, 0, -1))
    assert refused(verdict) == ps.ProduceErrorCode.INVALID_RECORD
    assert isinstance(verdict, ps.Refused)
    assert verdict.message == f"Invalid sequence number -1 in record batch with producerId {PID}"


@pytest.mark.parametrize("seq", [0, 1, 42, MAX])
def test_an_unknown_producer_is_appended_with_any_first_sequence(seq: int) -> None:
    """Kafka >= 2.5 (KIP-360): no UNKNOWN_PRODUCER_ID for a producer without state, whatever its
    first sequence — its state may have expired while it kept its sequence."""
    assert ps.check(ps.EMPTY, batch(PID, 3, seq)) == ps.Append(ps.AppendReason.NO_PRODUCER_STATE)
    other = appended(ps.EMPTY, batch(PID + 1, 0, 0), 0)
    assert ps.check(other, batch(PID, 3, seq)) == ps.Append(ps.AppendReason.NO_PRODUCER_STATE)
    assert 59 not in {int(code) for code in ps.ProduceErrorCode}


def test_the_next_sequence_is_appended_and_a_gap_or_overlap_is_out_of_order() -> None:
    state = appended(ps.EMPTY, batch(PID, 0, 0, 3), 0)  # sequences 0-2
    assert ps.check(state, batch(PID, 0, 3, 2)) == ps.Append(ps.AppendReason.NEXT_SEQUENCE)
    gap = ps.check(state, batch(PID, 0, 4))
    assert refused(gap) == ps.ProduceErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert isinstance(gap, ps.Refused)
    assert gap.message == (
        f"Out of order sequence number for producer {PID}: 4 (incoming seq. number), "
        "2 (current end sequence number)"
    )
    # Overlapping the last batch without being it: not a duplicate, out of order.
    assert refused(ps.check(state, batch(PID, 0, 2, 2))) == ps.ProduceErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert refused(ps.check(state, batch(PID, 0, 0, 2))) == ps.ProduceErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_a_lower_epoch_is_invalid_even_for_a_batch_it_sent() -> None:
    state = appended(ps.EMPTY, batch(PID, 5, 0, 2), 0)
    verdict = ps.check(state, batch(PID, 4, 2))
    assert refused(verdict) == ps.ProduceErrorCode.INVALID_PRODUCER_EPOCH
    assert isinstance(verdict, ps.Refused)
    assert verdict.message == f"Epoch of producer {PID} is 4, which is smaller than the last seen epoch 5"
    # The same sequence range as a retained batch, in an older epoch: fenced, not a duplicate.
    assert refused(ps.check(state, batch(PID, 4, 0, 2))) == ps.ProduceErrorCode.INVALID_PRODUCER_EPOCH


def test_a_new_epoch_must_start_at_sequence_zero() -> None:
    state = appended(ps.EMPTY, batch(PID, 0, 0, 3), 0)
    assert ps.check(state, batch(PID, 1, 0)) == ps.Append(ps.AppendReason.NEW_EPOCH)
    verdict = ps.check(state, batch(PID, 1, 3))  # continuing the old epoch's sequence is no excuse
    assert refused(verdict) == ps.ProduceErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert isinstance(verdict, ps.Refused)
    assert verdict.message == (
        f"Invalid sequence number for new epoch of producer {PID}: 1 (request epoch), 3 (seq. number), "
        "0 (current producer epoch)"
    )


def test_an_epoch_bump_replaces_the_retained_batches() -> None:
    state = appended(ps.EMPTY, batch(PID, 0, 0, 3), 0)
    state = appended(state, batch(PID, 1, 0), 3, now_ms=7)
    entry = state.producers[PID]
    assert entry == ps.ProducerEntry(1, (ps.BatchMetadata(0, 0, 3, 0),), last_active_ms=7)
    # The old epoch's batch resent: fenced; the new epoch continues from its own batch.
    assert refused(ps.check(state, batch(PID, 0, 0, 3))) == ps.ProduceErrorCode.INVALID_PRODUCER_EPOCH
    assert ps.check(state, batch(PID, 1, 1)) == ps.Append(ps.AppendReason.NEXT_SEQUENCE)


def test_an_epoch_below_no_epoch_is_invalid_and_no_epoch_accepts_any_sequence() -> None:
    """Mirrors Kafka: an unknown producer counts as epoch -1 (`ProducerStateEntry.empty`), and a
    producer at epoch -1 has no sequence to continue."""
    assert refused(ps.check(ps.EMPTY, batch(PID, -2, 0))) == ps.ProduceErrorCode.INVALID_PRODUCER_EPOCH
    state = appended(ps.EMPTY, batch(PID, -1, 4), 0)
    assert ps.check(state, batch(PID, -1, 9)) == ps.Append(ps.AppendReason.NO_PRODUCER_STATE)
    assert ps.check(state, batch(PID, -1, 4)) == ps.Duplicate(0, 0, 0)


# --- duplicates --------------------------------------------------------------------------------


def test_the_last_five_batches_are_answered_with_their_original_offsets_the_sixth_oldest_is_not() -> None:
    state = ps.EMPTY
    offset = 100
    sent: list[tuple[BatchHeader, int]] = []
    for i in range(6):
        b = batch(PID, 2, 3 * i, 3, ts=1000 + i)
        state = appended(state, b, offset)
        sent.append((b, offset))
        offset += 3 + 7  # other producers' batches in between
    for b, first in sent[1:]:
        assert ps.check(state, b) == ps.Duplicate(first, first + 2, b.max_timestamp_ms)
    oldest, _ = sent[0]
    assert refused(ps.check(state, oldest)) == ps.ProduceErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert len(state.producers[PID].batches) == ps.NUM_BATCHES_TO_RETAIN


def test_a_duplicate_must_match_the_whole_sequence_range() -> None:
    state = appended(ps.EMPTY, batch(PID, 0, 0, 3), 0)
    state = appended(state, batch(PID, 0, 3, 3), 3)
    assert ps.check(state, batch(PID, 0, 0, 3)) == ps.Duplicate(0, 2, 0)
    assert refused(ps.check(state, batch(PID, 0, 0, 2))) == ps.ProduceErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert refused(ps.check(state, batch(PID, 0, 0, 4))) == ps.ProduceErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_producers_are_independent() -> None:
    state = appended(ps.EMPTY, batch(PID, 0, 0, 2), 0)
    state = appended(state, batch(PID + 1, 0, 0, 2), 2)
    assert ps.check(state, batch(PID, 0, 0, 2)) == ps.Duplicate(0, 1, 0)
    assert ps.check(state, batch(PID + 1, 0, 0, 2)) == ps.Duplicate(2, 3, 0)
    assert ps.check(state, batch(PID, 0, 2)) == ps.Append(ps.AppendReason.NEXT_SEQUENCE)


# --- sequence wrap -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sequence", "increment", "expected"),
    [(0, 0, 0), (5, 3, 8), (MAX - 1, 1, MAX), (MAX, 1, 0), (MAX - 1, 3, 1), (MAX, MAX, MAX - 1), (3, MAX, 2)],
)
def test_increment_sequence_wraps_as_kafka(sequence: int, increment: int, expected: int) -> None:
    assert ps.increment_sequence(sequence, increment) == expected


def test_sequences_wrap_from_max_to_zero() -> None:
    state = appended(ps.EMPTY, batch(PID, 0, MAX - 1, 2), 0)  # MAX-1, MAX
    assert state.producers[PID].last_sequence == MAX
    assert ps.check(state, batch(PID, 0, 0)) == ps.Append(ps.AppendReason.NEXT_SEQUENCE)
    assert refused(ps.check(state, batch(PID, 0, 1))) == ps.ProduceErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert refused(ps.check(state, batch(PID, 0, MAX))) == ps.ProduceErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    wrapped = batch(PID, 0, MAX - 1, 4)  # MAX-1, MAX, 0, 1 in one batch
    state = appended(ps.EMPTY, wrapped, 10)
    assert state.producers[PID].last_sequence == 1
    assert ps.check(state, batch(PID, 0, 2)) == ps.Append(ps.AppendReason.NEXT_SEQUENCE)
    assert ps.check(state, wrapped) == ps.Duplicate(10, 13, 0)
    assert refused(ps.check(state, batch(PID, 0, 0))) == ps.ProduceErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


# --- record --------------------------------------------------------------------------------------


def test_record_keeps_batch_metadata_and_last_activity() -> None:
    state = ps.record(ps.EMPTY, batch(PID, 3, 10, 4, ts=1234), first_offset=50, now_ms=99)
    assert state.producers == {
        PID: ps.ProducerEntry(3, (ps.BatchMetadata(10, 3, 50, 1234),), last_active_ms=99)
    }
    kept = state.producers[PID].batches[0]
    assert (kept.last_sequence, kept.last_offset) == (13, 53)


def test_record_never_changes_its_argument() -> None:
    first = appended(ps.EMPTY, batch(PID, 0, 0), 0)
    second = appended(first, batch(PID, 0, 1), 1)
    assert len(first.producers[PID].batches) == 1
    assert len(second.producers[PID].batches) == 2
    assert ps.EMPTY.producers == {}
    with pytest.raises(TypeError):
        first.producers[PID + 1] = first.producers[PID]  # type: ignore[index]


def test_record_refuses_impossible_batches() -> None:
    state = appended(ps.EMPTY, batch(PID, 0, 0, 3), 10)  # offsets 10-12
    with pytest.raises(ValueError, match="not after its last batch"):
        ps.record(state, batch(PID, 0, 3), first_offset=12, now_ms=0)
    with pytest.raises(ValueError, match="not after its last batch"):
        ps.record(state, batch(PID, 1, 0), first_offset=5, now_ms=0)
    with pytest.raises(ValueError, match="Sequence"):
        ps.record(ps.EMPTY, batch(PID, 0, -1), first_offset=0, now_ms=0)
    with pytest.raises(ValueError, match="epoch"):
        ps.record(ps.EMPTY, batch(PID, 2**15, 0), first_offset=0, now_ms=0)
    with pytest.raises(ValueError, match="Offset"):
        ps.record(ps.EMPTY, batch(PID, 0, 0), first_offset=-1, now_ms=0)
    ps.record(state, batch(PID, 0, 3), first_offset=13, now_ms=0)  # right after: fine


def test_a_follower_records_what_the_leader_wrote_without_checking() -> None:
    """Replication is not validated (Kafka's REPLICATION origin): even a lower epoch is taken."""
    state = appended(ps.EMPTY, batch(PID, 5, 0, 2), 0)
    state = ps.record(state, batch(PID, 4, 7), first_offset=2, now_ms=0)
    assert state.producers[PID] == ps.ProducerEntry(4, (ps.BatchMetadata(7, 0, 2, 0),), 0)


# --- a produce script from the client's side: rebuild equals incremental -------------------------


@dataclass
class Client:
    """One idempotent producer as a client sees it: its epoch, next sequence, what was acked."""

    pid: int
    epoch: int = 0
    next_seq: int = 0
    acked: list[tuple[BatchHeader, int]] = field(default_factory=list)  # (batch, base offset)


actions = st.lists(
    st.tuples(
        st.integers(0, 2),  # which client
        st.sampled_from(["next", "next", "next", "resend", "gap", "bump", "stale"]),
        st.integers(1, 4),  # record count
        st.integers(0, 9),  # which acked batch to resend
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(script=actions, start_seq=st.sampled_from([0, 7, MAX - 5]))
def test_a_produce_script_behaves_as_clients_expect_and_rebuilds_identically(
    script: list[tuple[int, str, int, int]], start_seq: int
) -> None:
    clients = [Client(pid=10 + i, next_seq=start_seq) for i in range(3)]
    state = ps.EMPTY
    log: list[BatchHeader] = []
    end = 0
    for which, action, count, pick in script:
        c = clients[which]
        ts = 1_000 + len(log)
        if action == "resend" and c.acked:
            original, first = c.acked[-1 - pick % len(c.acked)]
            verdict = ps.check(state, original)
            recent = c.acked[-ps.NUM_BATCHES_TO_RETAIN :]
            if (original, first) in recent and original.producer_epoch == c.epoch:
                assert verdict == ps.Duplicate(
                    first, first + original.last_offset_delta, original.max_timestamp_ms
                )
            elif original.producer_epoch < c.epoch:
                assert refused(verdict) == ps.ProduceErrorCode.INVALID_PRODUCER_EPOCH
            else:
                assert refused(verdict) == ps.ProduceErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            continue
        if action == "gap" and c.acked:
            skipped = batch(c.pid, c.epoch, ps.increment_sequence(c.next_seq, 1), count, ts=ts)
            assert refused(ps.check(state, skipped)) == ps.ProduceErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            continue
        if action == "stale" and c.epoch > 0:
            fenced = batch(c.pid, c.epoch - 1, c.next_seq, count, ts=ts)
            assert refused(ps.check(state, fenced)) == ps.ProduceErrorCode.INVALID_PRODUCER_EPOCH
            continue
        if action == "bump":
            c.epoch, c.next_seq = c.epoch + 1, 0
        b = batch(c.pid, c.epoch, c.next_seq, count, offset=end, ts=ts)
        verdict = ps.check(state, b)
        assert isinstance(verdict, ps.Append), verdict
        state = ps.record(state, b, first_offset=end, now_ms=ts)
        c.acked.append((b, end))
        c.next_seq = ps.increment_sequence(c.next_seq, count)
        log.append(b)
        end += count
    for entry in state.producers.values():
        assert 1 <= len(entry.batches) <= ps.NUM_BATCHES_TO_RETAIN
    assert ps.from_batches(log) == state
    # A snapshot taken part way, then the rest of the log replayed, gives the same state.
    half = len(log) // 2
    snapshot = ps.encode_snapshot(ps.from_batches(log[:half]))
    assert ps.from_batches(log[half:], start=ps.decode_snapshot(snapshot)) == state


def test_from_batches_reads_real_batch_headers() -> None:
    """Idempotent batches built by aiokafka and parsed by jbod_kafka rebuild the state."""
    data = bytearray()
    for base_offset, pid, epoch, seq, count, ts in [
        (0, PID, 1, 0, 2, 500),
        (2, -1, -1, -1, 1, 501),
        (3, PID, 1, 2, 3, 502),
        (6, PID + 1, 0, 40, 1, 503),
    ]:
        builder = DefaultRecordBatchBuilder(
            magic=2,
            compression_type=0,
            is_transactional=0,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            batch_size=1 << 20,
        )
        for delta in range(count):
            builder.append(offset=delta, timestamp=ts, key=None, value=b"v", headers=[])
        frame = builder.build()
        struct.pack_into(">q", frame, 0, base_offset)
        data += frame
    headers = list(record_batch.iter_headers(bytes(data)))
    state = ps.from_batches(headers)
    assert state.producers == {
        PID: ps.ProducerEntry(1, (ps.BatchMetadata(0, 1, 0, 500), ps.BatchMetadata(2, 2, 3, 502)), 502),
        PID + 1: ps.ProducerEntry(0, (ps.BatchMetadata(40, 0, 6, 503),), 503),
    }
    assert ps.check(state, headers[2]) == ps.Duplicate(3, 5, 502)


def test_from_batches_uses_the_last_batch_timestamp_as_last_activity() -> None:
    log = [batch(PID, 0, 0, offset=0, ts=900), batch(PID, 0, 1, offset=1, ts=400)]
    assert ps.from_batches(log).producers[PID].last_active_ms == 400


# --- truncate ------------------------------------------------------------------------------------


def test_truncate_drops_batches_at_or_after_the_offset_and_emptied_producers() -> None:
    log = [
        batch(1, 0, 0, 2, offset=0, ts=1),  # 0-1
        batch(2, 0, 0, 1, offset=2, ts=2),  # 2
        batch(1, 0, 2, 3, offset=3, ts=3),  # 3-5
        batch(3, 0, 0, 2, offset=6, ts=4),  # 6-7
    ]
    state = ps.from_batches(log)
    cut = ps.truncate(state, 4)  # inside producer 1's second batch: it goes whole
    assert cut.producers == {
        1: ps.ProducerEntry(0, (ps.BatchMetadata(0, 1, 0, 1),), last_active_ms=3),
        2: state.producers[2],
    }
    assert ps.check(cut, batch(1, 0, 2, 3)) == ps.Append(ps.AppendReason.NEXT_SEQUENCE)
    assert ps.check(cut, batch(3, 0, 5)) == ps.Append(ps.AppendReason.NO_PRODUCER_STATE)
    assert ps.truncate(state, 8) is state
    assert ps.truncate(state, 0) == ps.EMPTY
    # The follower then appends the leader's batches after the cut.
    ps.record(cut, batch(1, 0, 2, 3), first_offset=3, now_ms=0)


@settings(max_examples=100, deadline=None)
@given(pids=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 3)), max_size=14), cut=st.integers(0, 45))
def test_truncate_equals_rebuilding_the_prefix_while_every_batch_is_retained(
    pids: list[tuple[int, int]], cut: int
) -> None:
    assume(all(sum(1 for p, _ in pids if p == pid) <= ps.NUM_BATCHES_TO_RETAIN for pid in range(4)))
    next_seq = dict.fromkeys(range(4), 0)
    log = []
    end = 0
    for pid, count in pids:
        log.append(batch(pid, 0, next_seq[pid], count, offset=end, ts=end))
        next_seq[pid] += count
        end += count
    truncated = ps.truncate(ps.from_batches(log), cut)
    rebuilt = ps.from_batches([b for b in log if b.base_offset + b.last_offset_delta < cut])
    # Equal but for the last activity, which truncation leaves as it was.
    assert {p: (e.producer_epoch, e.batches) for p, e in truncated.producers.items()} == {
        p: (e.producer_epoch, e.batches) for p, e in rebuilt.producers.items()
    }


# --- expire --------------------------------------------------------------------------------------


def test_expire_drops_producers_idle_for_the_expiration_or_longer() -> None:
    state = appended(ps.EMPTY, batch(1, 0, 0), 0, now_ms=1_000)
    state = appended(state, batch(2, 0, 0), 1, now_ms=2_000)
    assert ps.expire(state, now_ms=1_000 + 86_399_999) is state
    assert set(ps.expire(state, now_ms=1_000 + 86_400_000).producers) == {2}
    assert ps.expire(state, now_ms=2_000 + 86_400_000) == ps.EMPTY
    assert set(ps.expire(state, now_ms=1_500, producer_id_expiration_ms=500).producers) == {2}
    # An expired producer comes back with its own sequence, accepted as Kafka does (KIP-360).
    expired = ps.expire(state, now_ms=1_000 + 86_400_000)
    assert ps.check(expired, batch(1, 0, 1)) == ps.Append(ps.AppendReason.NO_PRODUCER_STATE)


def test_activity_keeps_a_producer() -> None:
    state = appended(ps.EMPTY, batch(1, 0, 0), 0, now_ms=0)
    state = appended(state, batch(1, 0, 1), 1, now_ms=80_000_000)
    assert set(ps.expire(state, now_ms=90_000_000).producers) == {1}


# --- snapshots -----------------------------------------------------------------------------------


entries = st.builds(
    lambda epoch, seqs, last_active, gap, coordinator_epoch, txn: (
        epoch,
        seqs,
        last_active,
        gap,
        coordinator_epoch,
        txn,
    ),
    st.integers(-(2**15), 2**15 - 1),
    st.lists(
        st.tuples(st.integers(0, MAX), st.integers(0, MAX), st.integers(-(2**63), 2**63 - 1)),
        min_size=0,
        max_size=ps.NUM_BATCHES_TO_RETAIN,
    ),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(1, 2**40),
    st.integers(-(2**31), 2**31 - 1),
    st.none() | st.integers(0, 2**63 - 1),
)
states = st.dictionaries(st.integers(0, 2**63 - 1), entries, max_size=8)


Raw = dict[int, tuple[int, list[tuple[int, int, int]], int, int, int, int | None]]


def build(raw: Raw) -> ps.ProducerState:
    producers = {}
    for pid, (epoch, seqs, last_active, gap, coordinator_epoch, txn) in raw.items():
        offset = 0
        kept = []
        for first_seq, delta, ts in seqs:
            kept.append(ps.BatchMetadata(first_seq, delta, offset, ts))
            offset += delta + gap
        producers[pid] = ps.ProducerEntry(
            epoch, tuple(kept), last_active, coordinator_epoch=coordinator_epoch, current_txn_first_offset=txn
        )
    return ps.ProducerState(producers)


@settings(max_examples=200, deadline=None)
@given(raw=states)
def test_a_snapshot_round_trips_exactly(raw: Raw) -> None:
    state = build(raw)
    data = ps.encode_snapshot(state)
    assert ps.decode_snapshot(data) == state
    assert ps.encode_snapshot(ps.decode_snapshot(data)) == data


def test_the_snapshot_layout() -> None:
    state = ps.record(ps.EMPTY, batch(7, 2, 5, 3, ts=9), first_offset=40, now_ms=11)
    state = ps.record(state, batch(8, 0, 0, 1, ts=9, txn=True), first_offset=43, now_ms=12)
    body = (
        struct.pack(">I", 2)
        + struct.pack(">qhiqqB", 7, 2, -1, 11, -1, 1)
        + struct.pack(">iiqq", 5, 2, 40, 9)
        + struct.pack(">qhiqqB", 8, 0, -1, 12, 43, 1)
        + struct.pack(">iiqq", 0, 0, 43, 9)
    )
    assert ps.encode_snapshot(state) == struct.pack(">HI", 2, zlib.crc32(body)) + body
    assert ps.encode_snapshot(ps.EMPTY) == struct.pack(">HII", 2, zlib.crc32(b"\0\0\0\0"), 0)


def test_a_version_1_snapshot_still_decodes() -> None:
    body = struct.pack(">I", 1) + struct.pack(">qhqB", 7, 2, 11, 1) + struct.pack(">iiqq", 5, 2, 40, 9)
    state = ps.decode_snapshot(struct.pack(">HI", 1, zlib.crc32(body)) + body)
    assert state == ps.record(ps.EMPTY, batch(7, 2, 5, 3, ts=9), first_offset=40, now_ms=11)
    assert state.producers[7].coordinator_epoch == ps.NO_COORDINATOR_EPOCH
    assert state.producers[7].current_txn_first_offset is None


def _sealed(body: bytes, version: int = 1) -> bytes:
    """A snapshot with a correct CRC around `body` (producer count onwards)."""
    return struct.pack(">HI", version, zlib.crc32(body)) + body


def _producer(pid: int, batches: list[tuple[int, int, int, int]], epoch: int = 0) -> bytes:
    return struct.pack(">qhqB", pid, epoch, 0, len(batches)) + b"".join(
        struct.pack(">iiqq", *b) for b in batches
    )


def _producer_v2(pid: int, batches: list[tuple[int, int, int, int]], *, txn: int = -1) -> bytes:
    return struct.pack(">qhiqqB", pid, 0, 0, 0, txn, len(batches)) + b"".join(
        struct.pack(">iiqq", *b) for b in batches
    )


GOOD = _producer(1, [(0, 0, 0, 0)])


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "shorter than its header"),
        (_sealed(struct.pack(">I", 0), version=3), "version 3"),
        (_sealed(struct.pack(">I", 1)), "ends inside a producer"),
        (_sealed(struct.pack(">I", 1) + GOOD + b"\0"), "bytes after its last producer"),
        (_sealed(struct.pack(">I", 1) + GOOD[:-1]), "ends inside the batches"),
        (_sealed(struct.pack(">I", 2) + _producer(2, [(0, 0, 0, 0)]) + GOOD), "ascending"),
        (_sealed(struct.pack(">I", 2) + GOOD + GOOD), "ascending"),
        (_sealed(struct.pack(">I", 1) + _producer(-1, [(0, 0, 0, 0)])), "ascending"),
        (_sealed(struct.pack(">I", 1) + _producer(1, [])), "1 to 5 batches"),
        (_sealed(struct.pack(">I", 1) + _producer(1, [(0, 0, i, 0) for i in range(6)])), "batches, not 6"),
        (_sealed(struct.pack(">I", 1) + _producer_v2(1, [], txn=-2), version=2), "first offset -2"),
        (_sealed(struct.pack(">I", 1) + _producer_v2(1, [(0, 0, i, 0) for i in range(6)]), 2), "not 6"),
        (_sealed(struct.pack(">I", 1) + _producer_v2(1, [])[:-1], version=2), "ends inside a producer"),
        (_sealed(struct.pack(">I", 1) + _producer(1, [(-1, 0, 0, 0)])), "Sequence"),
        (_sealed(struct.pack(">I", 1) + _producer(1, [(0, -1, 0, 0)])), "delta"),
        (_sealed(struct.pack(">I", 1) + _producer(1, [(0, 0, -5, 0)])), "Offset"),
        (_sealed(struct.pack(">I", 1) + _producer(1, [(0, 3, 10, 0), (4, 0, 13, 0)])), "not after"),
    ],
)
def test_a_damaged_or_impossible_snapshot_is_refused(data: bytes, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ps.decode_snapshot(data)


def test_every_flipped_bit_and_every_cut_is_refused() -> None:
    state = ps.EMPTY
    for i in range(7):
        state = ps.record(state, batch(i % 3, 1, 2 * i, 2, ts=i), first_offset=2 * i, now_ms=i)
    data = ps.encode_snapshot(state)
    for position in range(len(data)):
        for bit in range(8):
            damaged = bytearray(data)
            damaged[position] ^= 1 << bit
            with pytest.raises(ValueError):
                ps.decode_snapshot(bytes(damaged))
    for size in range(len(data)):
        with pytest.raises(ValueError):
            ps.decode_snapshot(data[:size])


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=200), version=st.sampled_from([1, 1, 2, 2, 0, 3]))
def test_arbitrary_bytes_decode_or_raise_value_error(body: bytes, version: int) -> None:
    for data in (body, _sealed(body, version)):
        try:
            state = ps.decode_snapshot(data)
        except ValueError:
            continue
        assert ps.decode_snapshot(ps.encode_snapshot(state)) == state
        if data[:2] == b"\0\2":
            assert ps.encode_snapshot(state) == data


def test_states_compare_by_value() -> None:
    a = appended(ps.EMPTY, batch(PID, 0, 0), 0)
    b = appended(ps.EMPTY, batch(PID, 0, 0), 0)
    assert a == b
    assert a != replace(a, producers={})
