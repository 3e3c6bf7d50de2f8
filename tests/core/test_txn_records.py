"""`jbod_core.txn_records`: the records of `__transaction_state` round-trip, version 0 values (what
Kafka writes below transaction.version 1) are read, and bad bytes raise ValueError only. Kafka's
own bytes are checked in tests/kafka_tools/test_txn_records_vs_kafka.py."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jbod_core import kafka_hash, txn_records
from jbod_core.txn_records import TopicPartitions, TransactionLogValue, TransactionState, TxnRecord

_ids = st.integers(-1, 2**63 - 1)
_epochs = st.integers(-1, 2**15 - 1)
_ms = st.integers(-1, 2**62)
_entries = st.lists(
    st.builds(
        TopicPartitions,
        st.text(min_size=1, max_size=8),
        st.lists(st.integers(0, 2**31 - 1), max_size=4).map(tuple),
    ),
    max_size=3,
).map(tuple)


@st.composite
def values(draw: st.DrawFn) -> TransactionLogValue:
    version = draw(st.sampled_from((0, 1)))
    flexible = version == 1
    return TransactionLogValue(
        producer_id=draw(_ids),
        producer_epoch=draw(_epochs),
        transaction_timeout_ms=draw(st.integers(0, 2**31 - 1)),
        state=draw(st.sampled_from(list(TransactionState))),
        partitions=draw(st.none() | _entries),
        last_update_timestamp_ms=draw(_ms),
        start_timestamp_ms=draw(_ms),
        previous_producer_id=draw(_ids) if flexible else -1,
        next_producer_id=draw(_ids) if flexible else -1,
        client_transaction_version=draw(st.integers(0, 2)) if flexible else 0,
        next_producer_epoch=draw(_epochs) if flexible else -1,
        version=version,
        unknown_tags=((7, b"\x01\x02"),) if flexible and draw(st.booleans()) else (),
    )


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=20), st.none() | values())
def test_records_round_trip(transactional_id: str, value: TransactionLogValue | None) -> None:
    record = TxnRecord(transactional_id, value)
    key, raw = txn_records.encode(record)
    assert txn_records.decode(key, raw) == record
    assert txn_records.encode(txn_records.decode(key, raw)) == (key, raw)


def test_version_0_value_and_key_bytes() -> None:
    key = struct.pack(">hh", 0, 3) + b"tx1"
    raw = (
        struct.pack(">hqhib", 0, 77, 2, 60_000, 1)
        + struct.pack(">ih", 1, 1)
        + b"t"
        + struct.pack(">iii", 2, 0, 1)
        + struct.pack(">qq", 1_500, 1_000)
    )
    record = txn_records.decode(key, raw)
    assert record == TxnRecord(
        "tx1",
        TransactionLogValue(
            77, 2, 60_000, TransactionState.ONGOING, (TopicPartitions("t", (0, 1)),), 1_500, 1_000, version=0
        ),
    )
    assert txn_records.encode(record) == (key, raw)
    assert txn_records.decode(key, None) == TxnRecord("tx1", None)


@given(st.binary(max_size=60))
def test_bad_bytes_raise_value_error_only(data: bytes) -> None:
    for key, value in ((data, None), (struct.pack(">hh", 0, 1) + b"x", data)):
        with contextlib.suppress(ValueError):
            txn_records.decode(key, value)


def test_unknown_versions_and_states_are_refused() -> None:
    key = struct.pack(">hh", 1, 1) + b"x"
    with pytest.raises(ValueError, match="Key version 1"):
        txn_records.decode_key(key)
    with pytest.raises(ValueError, match="version 2"):
        txn_records.decode_value(struct.pack(">h", 2) + bytes(40))
    bad_state = struct.pack(">hqhib", 0, 1, 0, 1, 9) + struct.pack(">iqq", -1, 0, 0)
    with pytest.raises(ValueError, match="state id 9"):
        txn_records.decode_value(bad_state)


def test_partition_for_is_kafkas_hash() -> None:
    assert txn_records.partition_for("test", 50) == 3556498 % 50
    assert txn_records.partition_for("polygenelubricants", 50) == 0  # hash -2^31
    assert kafka_hash.java_string_hash("polygenelubricants") == -(2**31)
    assert TransactionState.from_kafka_name("PrepareEpochFence") is TransactionState.PREPARE_EPOCH_FENCE
    assert [s.kafka_name for s in TransactionState][:3] == ["Empty", "Ongoing", "PrepareCommit"]
