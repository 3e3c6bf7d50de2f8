"""The producer's and consumer's pure decisions: partitioner, batching, retry classification and
backoff, request bodies, position moves. No sockets, no event loop."""

from __future__ import annotations

import base64
import zlib
from collections import deque

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jbod_client import broker, consumer, producer
from jbod_client.controller import ClientError
from jbod_core.errors import ErrorCode

# -- partitioner -------------------------------------------------------------------------------


def test_keyed_records_use_crc32_of_the_key() -> None:
    for key in (b"", b"a", b"user-42", bytes(range(256))):
        assert producer.partition_for_key(key, 7) == zlib.crc32(key) % 7


@given(st.binary(max_size=64), st.integers(min_value=1, max_value=10_000))
def test_keyed_partition_is_in_range_and_stable(key: bytes, n: int) -> None:
    first = producer.partition_for_key(key, n)
    assert 0 <= first < n
    assert producer.partition_for_key(key, n) == first


def test_explicit_partition_wins_over_key_and_sticky() -> None:
    chosen = producer.choose_partition(key=b"k", explicit=3, num_partitions=8, sticky=5, sticky_has_room=True)
    assert chosen == 3
    keyed = producer.choose_partition(
        key=b"k", explicit=None, num_partitions=8, sticky=5, sticky_has_room=True
    )
    assert keyed == zlib.crc32(b"k") % 8


def test_sticky_partition_stays_while_its_batch_has_room_then_moves_round_robin() -> None:
    assert producer.next_sticky(None, 3, current_has_room=False) == 0
    assert producer.next_sticky(None, 3, current_has_room=False, first=7) == 1
    assert producer.next_sticky(1, 3, current_has_room=True) == 1
    assert producer.next_sticky(1, 3, current_has_room=False) == 2
    assert producer.next_sticky(2, 3, current_has_room=False) == 0
    # the topic shrank (deleted and recreated): start over inside the range
    assert producer.next_sticky(5, 3, current_has_room=True) == 0


def test_keyless_records_fill_one_batch_per_partition_in_turn() -> None:
    """The producer's two steps for a keyless record, `keyless_partition` then `append_record`,
    twelve times; batches of 3 records."""
    queues: dict[int, deque[producer.Batch[int]]] = {p: deque() for p in range(3)}
    sticky: int | None = None
    placed = []
    for i in range(12):
        open_batch = queues[sticky][-1] if sticky is not None and queues[sticky] else None
        sticky = producer.keyless_partition(sticky, 3, open_batch=open_batch, size=10)
        producer.append_record(
            queues[sticky], topic="t", partition=sticky, record={}, size=10, future=i, limit_bytes=30, now=0.0
        )
        placed.append(sticky)
    assert placed == [0, 0, 0, 1, 1, 1, 2, 2, 2, 0, 0, 0]
    assert [len(q) for q in queues.values()] == [2, 1, 1]


# -- batching ----------------------------------------------------------------------------------


def _append(batches: deque[producer.Batch[int]], size: int, future: int, now: float = 0.0) -> bool:
    _, created = producer.append_record(
        batches,
        topic="t",
        partition=0,
        record={"value": ""},
        size=size,
        future=future,
        limit_bytes=100,
        now=now,
    )
    return created


def test_batches_hold_at_most_batch_bytes_and_start_anew_when_full() -> None:
    batches: deque[producer.Batch[int]] = deque()
    created = [_append(batches, 30, i) for i in range(7)]
    assert created == [True, False, False, True, False, False, True]
    assert [b.futures for b in batches] == [[0, 1, 2], [3, 4, 5], [6]]
    assert all(b.size_bytes <= 100 for b in batches)
    assert [b.full for b in batches] == [False, False, False]


def test_a_batch_exactly_at_the_limit_is_full_and_ready() -> None:
    batches: deque[producer.Batch[int]] = deque()
    _append(batches, 60, 0)
    _append(batches, 40, 1)
    assert len(batches) == 1 and batches[0].full
    assert producer.ready_in(batches[0], now=0.0, linger=10.0, has_successor=False, closing=False) == 0.0


def test_an_oversized_record_travels_alone() -> None:
    batches: deque[producer.Batch[int]] = deque()
    _append(batches, 10, 0)
    assert _append(batches, 500, 1)
    assert _append(batches, 10, 2)
    assert [b.futures for b in batches] == [[0], [1], [2]]


def test_a_sealed_batch_takes_no_more_records() -> None:
    batches: deque[producer.Batch[int]] = deque()
    _append(batches, 10, 0)
    batches[0].sealed = True
    assert _append(batches, 10, 1)
    assert [b.futures for b in batches] == [[0], [1]]


def test_the_delivery_clock_starts_with_the_first_record() -> None:
    batches: deque[producer.Batch[int]] = deque()
    _append(batches, 10, 0, now=5.0)
    _append(batches, 10, 1, now=9.0)
    assert batches[0].created == 5.0


def test_linger_and_the_reasons_to_send_early() -> None:
    batch: producer.Batch[int] = producer.Batch(topic="t", partition=0, limit_bytes=100, created=10.0)
    batch.append({}, 10, 0)
    assert producer.ready_in(
        batch, now=10.0, linger=0.002, has_successor=False, closing=False
    ) == pytest.approx(0.002)
    assert producer.ready_in(batch, now=10.5, linger=0.002, has_successor=False, closing=False) < 0
    assert producer.ready_in(batch, now=10.0, linger=5.0, has_successor=True, closing=False) == 0.0
    assert producer.ready_in(batch, now=10.0, linger=5.0, has_successor=False, closing=True) == 0.0
    batch.flush_requested = True
    assert producer.ready_in(batch, now=10.0, linger=5.0, has_successor=False, closing=False) == 0.0


def test_record_size_counts_key_and_value() -> None:
    assert producer.record_size(None, b"abc") == 3
    assert producer.record_size(b"kk", b"abc") == 5
    assert producer.record_size(b"", b"") == 0


# -- retries -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "outcome"),
    [
        (0, producer.Outcome.DONE),
        (-1, producer.Outcome.RETRY),
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, producer.Outcome.RETRY),
        (ErrorCode.REQUEST_TIMED_OUT, producer.Outcome.RETRY),
        (ErrorCode.NOT_ENOUGH_REPLICAS, producer.Outcome.RETRY),
        (ErrorCode.KAFKA_STORAGE_ERROR, producer.Outcome.RETRY),
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, producer.Outcome.REFRESH_ONCE),
        (ErrorCode.INVALID_REQUEST, producer.Outcome.FAIL),
        (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, producer.Outcome.FAIL),
        (ErrorCode.OFFSET_OUT_OF_RANGE, producer.Outcome.FAIL),
        (999, producer.Outcome.FAIL),
    ],
)
def test_retry_classification(code: int, outcome: producer.Outcome) -> None:
    assert producer.classify_error(code) is outcome


def test_backoff_doubles_from_the_base_up_to_one_second() -> None:
    assert [producer.backoff_ms(r, base_ms=100) for r in range(6)] == [100, 200, 400, 800, 1000, 1000]
    assert producer.backoff_ms(10_000, base_ms=100) == 1000
    assert [producer.backoff_ms(r, base_ms=300, max_ms=2000) for r in range(4)] == [300, 600, 1200, 2000]
    assert producer.backoff_ms(0, base_ms=0) == 0


def test_error_descriptions_use_the_contract_names() -> None:
    assert broker.describe_error(19) == "NOT_ENOUGH_REPLICAS (errorCode 19)"
    assert broker.describe_error(6, "moved") == "NOT_LEADER_OR_FOLLOWER (errorCode 6): moved"
    assert broker.error_name(-1) == "NETWORK_OR_TIMEOUT"
    assert broker.error_name(12345) == "UNKNOWN_ERROR"


# -- request bodies ----------------------------------------------------------------------------


def test_records_are_standard_base64_with_null_keys() -> None:
    assert broker.encode_record(None, b"hello") == {"key": None, "value": "aGVsbG8="}
    raw = bytes([0xFB, 0xFF, 0x00])
    encoded = broker.encode_record(raw, b"")
    assert encoded == {"key": base64.b64encode(raw).decode(), "value": ""}
    assert "+" in encoded["key"] or "/" in encoded["key"]  # the standard alphabet, not base64url


def test_produce_body_round_trips() -> None:
    records = [broker.encode_record(b"k", b"v1"), broker.encode_record(None, bytes(1000))]
    body = orjson.loads(broker.produce_body("orders", 2, records, acks=-1, timeout_ms=1500))
    assert body == {"topic": "orders", "partition": 2, "acks": -1, "records": records, "timeoutMs": 1500}
    assert base64.b64decode(body["records"][1]["value"]) == bytes(1000)
    no_timeout = orjson.loads(broker.produce_body("orders", 0, [], acks=0))
    assert "timeoutMs" not in no_timeout and no_timeout["acks"] == 0


def test_strict_base64_decoding() -> None:
    assert broker.decode_base64("aGVsbG8=", what="v") == b"hello"
    assert broker.decode_base64(None, what="k") is None
    with pytest.raises(ClientError, match="value of x is not valid base64"):
        broker.decode_base64("not base64!", what="value of x")


# -- consumer positions ------------------------------------------------------------------------


def test_positions_move_only_past_returned_records() -> None:
    records = [{"offset": 3}, {"offset": 4}, {"offset": 5}]
    accepted, position = consumer.accept_records(records, 4)
    assert [r["offset"] for r in accepted] == [4, 5] and position == 6
    assert consumer.accept_records([], 7) == ([], 7)
    # duplicates or a step back in a reply are dropped, never returned twice
    accepted, position = consumer.accept_records([{"offset": 1}, {"offset": 2}, {"offset": 2}], 0)
    assert [r["offset"] for r in accepted] == [1, 2] and position == 3


def test_out_of_range_resets() -> None:
    assert consumer.out_of_range_position(0, log_start=120, high_watermark=500)[0] == 120
    assert consumer.out_of_range_position(900, log_start=120, high_watermark=500)[0] == 500
    assert consumer.out_of_range_position(300, log_start=120, high_watermark=500)[0] is None
    assert consumer.out_of_range_position(0, log_start=None, high_watermark=None)[0] is None
