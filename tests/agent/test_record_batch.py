"""The record batch codec (`jbod_agent.record_batch`): pure, no files.

Covers: round trips (null keys, empty keys and values, many records) and header fields;
`with_base_offset` rewriting offset, epoch and crc; a bad crc reported with the frame's position;
bad lengths, record counts below 1, records not filling their frame and trailing partial frames
refused; `scan_valid_prefix` keeping exactly the valid prefix. Hypothesis fuzzes the parsers with
random bytes and with damaged valid frames: nothing but `CorruptBatchError` ever escapes.
"""

from __future__ import annotations

import contextlib
import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jbod_agent import record_batch
from jbod_agent.record_batch import HEADER_SIZE, BatchHeader, CorruptBatchError

RECORDS: list[tuple[bytes | None, bytes]] = [(None, b"v0"), (b"", b""), (b"key", b"value"), (None, b"")]

record_lists = st.lists(
    st.tuples(st.none() | st.binary(max_size=20), st.binary(max_size=40)), min_size=1, max_size=8
)


def _frame_with_body(body: bytes, *, count: int, base_offset: int = 0, length: int | None = None) -> bytes:
    """A frame whose crc is valid for whatever `body` holds (to reach the checks after the crc)."""
    after_crc = struct.pack(">qiiq", base_offset, count, 0, 0) + body
    if length is None:
        length = 4 + len(after_crc)
    return struct.pack(">II", length, zlib.crc32(after_crc)) + after_crc


def test_round_trip_keeps_null_keys_empty_keys_and_empty_values() -> None:
    frame = record_batch.encode_batch(100, 7, 1_700_000_000_123, RECORDS)

    [header] = record_batch.iter_headers(frame)

    assert HEADER_SIZE == 32
    assert header == BatchHeader(
        position=0,
        size=len(frame),
        base_offset=100,
        record_count=4,
        leader_epoch=7,
        max_timestamp_ms=1_700_000_000_123,
    )
    assert (header.last_offset, header.next_offset) == (103, 104)
    assert record_batch.decode_records(frame) == [
        (100, None, b"v0"),
        (101, b"", b""),
        (102, b"key", b"value"),
        (103, None, b""),
    ]
    assert len(frame) == HEADER_SIZE + sum(8 + len(k or b"") + len(v) for k, v in RECORDS)


@given(records=record_lists, base_offset=st.integers(0, 2**62), epoch=st.integers(0, 2**31 - 1))
def test_round_trip_of_any_records(
    records: list[tuple[bytes | None, bytes]], base_offset: int, epoch: int
) -> None:
    frame = record_batch.encode_batch(base_offset, epoch, 5, records)

    decoded = record_batch.decode_records(frame)

    assert record_batch.encode_frame(base_offset, epoch, 5, records) == frame

    assert decoded == [(base_offset + i, key, value) for i, (key, value) in enumerate(records)]
    assert record_batch.scan_valid_prefix(frame)[1] == len(frame)


def test_headers_of_concatenated_frames_have_their_positions() -> None:
    first = record_batch.encode_batch(0, 1, 10, [(None, b"a"), (None, b"b")])
    second = record_batch.encode_batch(2, 1, 11, [(b"k", b"c")])

    headers = list(record_batch.iter_headers(first + second))

    assert [(h.position, h.size, h.base_offset, h.next_offset) for h in headers] == [
        (0, len(first), 0, 2),
        (len(first), len(second), 2, 3),
    ]
    assert record_batch.decode_records(memoryview(first + second)[len(first) :]) == [(2, b"k", b"c")]


def test_with_base_offset_rewrites_offset_epoch_and_crc() -> None:
    frame = record_batch.encode_batch(0, 1, 99, RECORDS)

    moved = record_batch.with_base_offset(frame, 5000)
    reassigned = record_batch.with_base_offset(memoryview(frame), 7, leader_epoch=3)

    [header] = record_batch.iter_headers(moved)
    assert (header.base_offset, header.leader_epoch, header.max_timestamp_ms) == (5000, 1, 99)
    assert [offset for offset, _k, _v in record_batch.decode_records(moved)] == [5000, 5001, 5002, 5003]
    [header] = record_batch.iter_headers(reassigned)
    assert (header.base_offset, header.leader_epoch) == (7, 3)
    assert moved[HEADER_SIZE:] == frame[HEADER_SIZE:]


def test_with_base_offset_needs_exactly_one_frame() -> None:
    frame = record_batch.encode_batch(0, 1, 99, RECORDS)

    with pytest.raises(CorruptBatchError):
        record_batch.with_base_offset(frame + frame, 1)
    with pytest.raises(CorruptBatchError):
        record_batch.with_base_offset(frame[:-1], 1)
    with pytest.raises(ValueError, match="out of range"):
        record_batch.with_base_offset(frame, 2**63)


@pytest.mark.parametrize("encode", [record_batch.encode_batch, record_batch.encode_frame])
def test_encode_refuses_an_empty_batch_and_out_of_range_fields(encode: object) -> None:
    assert callable(encode)
    with pytest.raises(ValueError, match="at least one record"):
        encode(0, 0, 0, [])
    with pytest.raises(ValueError, match="out of range"):
        encode(0, 2**31, 0, [(None, b"")])


def test_bad_crc_is_reported_with_the_frame_position() -> None:
    first = record_batch.encode_batch(0, 1, 10, [(None, b"a")])
    second = bytearray(record_batch.encode_batch(1, 1, 10, [(None, b"hello")]))
    second[-1] ^= 0x01
    data = first + bytes(second)

    with pytest.raises(CorruptBatchError, match=f"crc of frame at byte {len(first)}") as caught:
        list(record_batch.iter_headers(data))

    assert caught.value.position == len(first)
    assert not caught.value.incomplete
    assert record_batch.scan_valid_prefix(data) == ([next(record_batch.iter_headers(first))], len(first))
    assert len(list(record_batch.iter_headers(data, verify_crc=False))) == 2  # crc not checked


def test_trailing_partial_frame_is_refused_as_incomplete() -> None:
    frame = record_batch.encode_batch(0, 1, 10, [(None, b"abc")])

    for cut in (1, 4, HEADER_SIZE - 1, HEADER_SIZE, len(frame) - 1):
        with pytest.raises(CorruptBatchError, match="Partial frame") as caught:
            list(record_batch.iter_headers(frame + frame[:cut]))
        assert caught.value.position == len(frame)
        assert caught.value.incomplete
        assert record_batch.scan_valid_prefix(frame + frame[:cut])[1] == len(frame)


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (_frame_with_body(b"", count=1), "Bad frame length"),
        (_frame_with_body(struct.pack(">ii", -1, 0), count=0), "Bad record count 0"),
        (_frame_with_body(struct.pack(">ii", -1, 0), count=-3), "Bad record count -3"),
        (_frame_with_body(struct.pack(">ii", -1, 0), count=2), "does not fit frame length"),
        (_frame_with_body(struct.pack(">ii", -2, 0), count=1), "Bad key length -2 in record 0"),
        (_frame_with_body(struct.pack(">ii", -1, -1), count=1), "Bad value length -1 in record 0"),
        (_frame_with_body(struct.pack(">ii", 100, 0), count=1), "Overrun of the frame in record 0"),
        (_frame_with_body(struct.pack(">ii", -1, 1) + b"xx", count=1), "Records end at byte"),
        (
            _frame_with_body(struct.pack(">ii", -1, 0) + struct.pack(">ii", 100, 0), count=2),
            "Overrun of the frame in record 1",
        ),
    ],
    ids=lambda value: value if isinstance(value, str) else "frame",
)
def test_inconsistent_frames_are_refused(frame: bytes, message: str) -> None:
    prefix = record_batch.encode_batch(0, 1, 10, [(None, b"ok")])

    with pytest.raises(CorruptBatchError, match=message) as caught:
        list(record_batch.iter_headers(prefix + frame))

    assert caught.value.position >= len(prefix)
    assert record_batch.scan_valid_prefix(prefix + frame)[1] == len(prefix)
    with pytest.raises(CorruptBatchError):
        record_batch.decode_records(frame, verify_crc=False)


def test_decode_records_needs_exactly_one_frame() -> None:
    frame = record_batch.encode_batch(0, 1, 10, [(None, b"abc")])

    with pytest.raises(CorruptBatchError, match="exactly one frame"):
        record_batch.decode_records(frame + frame)
    with pytest.raises(CorruptBatchError):
        record_batch.decode_records(b"")


def _parse_everything(data: bytes) -> None:
    """Run every parser over `data`: only CorruptBatchError may escape, and the scanners agree."""
    headers, valid = record_batch.scan_valid_prefix(data)
    assert 0 <= valid <= len(data)
    assert valid == sum(header.size for header in headers)
    assert list(record_batch.iter_headers(data[:valid])) == headers
    for verify in (True, False):
        try:
            for _header in record_batch.iter_headers(data, verify_crc=verify):
                pass
        except CorruptBatchError as exc:
            assert 0 <= exc.position <= len(data)
        try:
            record_batch.decode_records(data, verify_crc=verify)
        except CorruptBatchError as exc:
            assert 0 <= exc.position <= len(data)
    with contextlib.suppress(CorruptBatchError):
        record_batch.read_header(data)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=300))
def test_random_bytes_raise_only_corrupt_batch_error(data: bytes) -> None:
    _parse_everything(data)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    batches=st.lists(record_lists, min_size=1, max_size=3),
    damage=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
    cut=st.integers(0, 10_000),
    garbage=st.binary(max_size=40),
)
def test_damaged_frames_raise_only_corrupt_batch_error(
    batches: list[list[tuple[bytes | None, bytes]]], damage: list[tuple[int, int]], cut: int, garbage: bytes
) -> None:
    frames = []
    offset = 0
    for records in batches:
        frames.append(record_batch.encode_batch(offset, 1, offset, records))
        offset += len(records)
    data = bytearray(b"".join(frames))
    for position, value in damage:
        data[position % len(data)] = value
    damaged = bytes(data[: cut % (len(data) + 1)]) + garbage

    _parse_everything(damaged)
    _parse_everything(bytes(data))


@settings(max_examples=100)
@given(records=record_lists, field=st.integers(0, HEADER_SIZE - 1), value=st.integers(0, 255))
def test_a_damaged_header_is_found_or_harmless(
    records: list[tuple[bytes | None, bytes]], field: int, value: int
) -> None:
    frame = bytearray(record_batch.encode_batch(3, 1, 10, records))
    original = bytes(frame)
    frame[field] = value

    headers, valid = record_batch.scan_valid_prefix(bytes(frame))

    if bytes(frame) != original:
        assert (headers, valid) == ([], 0)  # the crc or a length check catches any change
