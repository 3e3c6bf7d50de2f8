"""Kafka's RecordBatch v2 (`jbod_kafka.record_batch`): round trips, every compression codec,
Kafka's produce checks, offset stamping, and damage found at the right byte or never raised as
anything but `CorruptBatchError` (hypothesis over random and damaged bytes)."""

from __future__ import annotations

import contextlib
import struct

import crc32c
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jbod_kafka import record_batch
from jbod_kafka.record_batch import HEADER_SIZE, BatchFault, Compression, CorruptBatchError, Record

RECORDS: list[tuple[bytes | None, bytes | None]] = [
    (None, b"v0"),
    (b"", b""),
    (b"key", b"v2" * 100),
    (b"k", None),
]
record_lists = st.lists(
    st.tuples(st.none() | st.binary(max_size=20), st.none() | st.binary(max_size=60)), min_size=1, max_size=8
)


def client_batch(
    records: list[tuple[bytes | None, bytes | None]],
    *,
    compression: Compression = Compression.NONE,
    producer: tuple[int, int, int] = (-1, -1, -1),
    headers: list[tuple[str, bytes | None]] | None = None,
) -> bytes:
    """A batch as a Kafka client builds it: base offset 0, no leader epoch, its own timestamps."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(compression),
        is_transactional=0,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        batch_size=1 << 30,
    )
    for i, (key, value) in enumerate(records):
        builder.append(offset=i, timestamp=1_700_000_000_000 + i, key=key, value=value, headers=headers or [])
    return bytes(builder.build())


def test_round_trip_keeps_null_and_empty_keys_and_values() -> None:
    batch = record_batch.encode_batch(100, 7, 1_700_000_000_123, RECORDS)
    [header] = record_batch.iter_headers(batch)
    assert (header.base_offset, header.leader_epoch, header.record_count) == (100, 7, 4)
    assert (header.last_offset, header.next_offset, header.size) == (103, 104, len(batch))
    assert (header.max_timestamp_ms, header.producer_id, header.compression) == (1_700_000_000_123, -1, 0)
    assert record_batch.decode_records(batch) == [
        Record(100 + i, 1_700_000_000_123, key, value) for i, (key, value) in enumerate(RECORDS)
    ]


@pytest.mark.parametrize("compression", list(Compression))
def test_every_codec_is_read_back_and_kept_as_compressed(compression: Compression) -> None:
    records = [(b"k%d" % i, b"value %d " % i * 50) for i in range(20)]
    batch = client_batch(records, compression=compression, headers=[("h", b"x")])
    produced = record_batch.check_produced(batch)
    assert (produced.data, produced.header.compression) == (batch, compression)
    stamped = record_batch.with_base_offset(batch, 500, leader_epoch=4)
    assert stamped[HEADER_SIZE:] == batch[HEADER_SIZE:]  # the producer's (compressed) bytes as they were
    decoded = record_batch.decode_records(stamped)
    assert [(r.offset, r.key, r.value, r.headers) for r in decoded] == [
        (500 + i, key, value, (("h", b"x"),)) for i, (key, value) in enumerate(records)
    ]


@given(records=record_lists, base_offset=st.integers(0, 2**40), epoch=st.integers(-1, 2**31 - 1))
def test_round_trip_of_any_records(
    records: list[tuple[bytes | None, bytes | None]], base_offset: int, epoch: int
) -> None:
    batch = record_batch.encode_batch(base_offset, epoch, 5, records)
    assert [(r.offset, r.key, r.value) for r in record_batch.decode_records(batch)] == [
        (base_offset + i, key, value) for i, (key, value) in enumerate(records)
    ]
    assert record_batch.scan_valid_prefix(batch)[1] == len(batch)
    record_batch.check_produced(batch)


def test_headers_of_concatenated_batches_have_their_positions() -> None:
    first = record_batch.encode_batch(0, 1, 10, [(None, b"a"), (None, b"b")])
    second = record_batch.encode_batch(2, 1, 11, [(b"k", b"c")])
    headers = list(record_batch.iter_headers(first + second))
    assert [(h.position, h.base_offset, h.next_offset) for h in headers] == [(0, 0, 2), (len(first), 2, 3)]
    assert record_batch.decode_records(memoryview(first + second)[len(first) :]) == [
        Record(2, 11, b"k", b"c")
    ]


def test_with_base_offset_stamps_offset_and_epoch_and_keeps_the_crc() -> None:
    batch = client_batch([(None, b"a"), (None, b"b")])
    stamped = record_batch.with_base_offset(batch, 5000, leader_epoch=3)
    [header] = record_batch.iter_headers(stamped)  # the CRC still holds
    assert (header.base_offset, header.leader_epoch, header.crc) == (
        5000,
        3,
        next(record_batch.iter_headers(batch)).crc,
    )
    assert [r.offset for r in record_batch.decode_records(stamped)] == [5000, 5001]
    with pytest.raises(CorruptBatchError, match="exactly one batch"):
        record_batch.with_base_offset(batch + batch, 1)
    with pytest.raises(ValueError, match="out of range"):
        record_batch.with_base_offset(batch, 2**63 - 1)


def test_log_append_time_marks_the_batch_sets_its_max_timestamp_and_a_valid_crc() -> None:
    batch = client_batch([(b"k", b"a"), (b"k", b"b")])
    stamped = record_batch.with_base_offset(batch, 7, leader_epoch=1, log_append_time_ms=1_700_000_000_123)
    [header] = record_batch.iter_headers(stamped)  # verifies the new CRC
    [before] = record_batch.iter_headers(batch)
    assert header.attributes == before.attributes | record_batch.LOG_APPEND_TIME_FLAG
    assert header.max_timestamp_ms == 1_700_000_000_123 and header.crc != before.crc
    assert [r.value for r in record_batch.decode_records(stamped)] == [b"a", b"b"]


def _resealed(batch: bytearray) -> bytes:
    """`batch` with its CRC-32C recomputed (so only the field changed is wrong)."""
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def _with_field(batch: bytes, fmt: str, at: int, value: int) -> bytes:
    changed = bytearray(batch)
    struct.pack_into(fmt, changed, at, value)
    return _resealed(changed)


INVALID, DAMAGED, UNREADABLE = BatchFault.INVALID, BatchFault.DAMAGED, BatchFault.UNREADABLE


@pytest.mark.parametrize(
    ("mutate", "message", "fault"),
    [
        (lambda b: _with_field(b, ">i", 57, 3), "Inconsistent batch offset range", INVALID),  # recordsCount
        (
            lambda b: _with_field(b, ">i", 23, 0),
            "Inconsistent batch offset range",
            INVALID,
        ),  # lastOffsetDelta
        (lambda b: _with_field(b, ">h", 21, 0x20), "control batches", INVALID),
        (lambda b: _with_field(b, ">h", 21, 0x10), "A transactional batch needs a producer id", INVALID),
        (lambda b: _with_field(b, ">h", 21, 5), "Unknown compression codec 5", INVALID),
        (lambda b: _with_field(b, ">b", 16, 1), "Unsupported record batch magic 1", INVALID),
        (lambda b: b[: len(b) - 1], "Partial batch", INVALID),
        (lambda b: b + b, "exactly one batch", INVALID),
        (lambda b: _with_field(b, ">b", 16, 7), "Unsupported record batch magic 7", UNREADABLE),
        (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "Bad CRC-32C", DAMAGED),
        (lambda b: b"\0" * len(b), "Bad batch length 0", UNREADABLE),
        (lambda b: _with_field(b, ">i", 8, 13), "Bad batch length 13", UNREADABLE),
    ],
)
def test_produced_batches_are_checked_as_kafka_checks_them(
    mutate: object, message: str, fault: BatchFault
) -> None:
    """Kafka answers a whole batch that breaks a rule INVALID_RECORD, damaged or unreadable bytes
    CORRUPT_MESSAGE (with its reason when unreadable), checked in its order: a length below any
    magic's first, so zeros are unreadable (seen on Kafka 4.3.1: tests/kafka_tools/test_error_responses.py)."""
    batch = client_batch([(None, b"a"), (b"k", b"b")])
    record_batch.check_produced(batch)
    with pytest.raises(CorruptBatchError, match=message) as refused:
        record_batch.check_produced(mutate(batch))  # type: ignore[operator]
    assert refused.value.fault is fault


def test_uncompressed_records_must_fill_the_batch_with_deltas_in_order() -> None:
    batch = bytearray(client_batch([(None, b"a"), (None, b"b")]))
    batch[HEADER_SIZE + 3] ^= 0x02  # the first record's offset delta (varint 0 -> 1)
    with pytest.raises(CorruptBatchError, match=r"offset deltas|Bad records"):
        record_batch.check_produced(_resealed(batch))
    short = bytearray(client_batch([(None, b"abc")]))
    struct.pack_into(">i", short, 8, len(short) - 12 - 1)  # batchLength one byte short of the records
    with pytest.raises(CorruptBatchError):
        record_batch.check_produced(_resealed(short[:-1]))


def test_encode_refuses_an_empty_batch_and_a_negative_offset() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        record_batch.encode_batch(0, 1, 10, [])
    with pytest.raises(ValueError, match="out of range"):
        record_batch.encode_batch(-1, 1, 10, [(None, b"a")])


def test_bad_crc_is_reported_with_the_batch_position() -> None:
    first = record_batch.encode_batch(0, 1, 10, [(None, b"a")])
    second = bytearray(record_batch.encode_batch(1, 1, 10, [(None, b"hello")]))
    second[-1] ^= 0xFF
    data = first + bytes(second)
    with pytest.raises(CorruptBatchError, match=f"Bad CRC-32C of batch at byte {len(first)}") as caught:
        list(record_batch.iter_headers(data))
    assert caught.value.position == len(first) and not caught.value.incomplete
    assert record_batch.scan_valid_prefix(data) == ([next(record_batch.iter_headers(first))], len(first))
    assert len(list(record_batch.iter_headers(data, verify_crc=False))) == 2


def test_a_trailing_partial_batch_is_incomplete() -> None:
    batch = record_batch.encode_batch(0, 1, 10, [(None, b"abc")])
    for cut in (1, 12, HEADER_SIZE - 1, HEADER_SIZE, len(batch) - 1):
        with pytest.raises(CorruptBatchError) as caught:
            list(record_batch.iter_headers(batch + batch[:cut]))
        assert caught.value.incomplete and caught.value.position == len(batch)
        assert record_batch.scan_valid_prefix(batch + batch[:cut])[1] == len(batch)


def _parse_everything(data: bytes) -> None:
    """Run every parser over `data`: only CorruptBatchError may escape, and the scanners agree."""
    headers, valid = record_batch.scan_valid_prefix(data)
    assert 0 <= valid <= len(data)
    assert valid == sum(header.size for header in headers)
    assert list(record_batch.iter_headers(data[:valid])) == headers
    for verify in (True, False):
        with contextlib.suppress(CorruptBatchError):
            for _header in record_batch.iter_headers(data, verify_crc=verify):
                pass
        with contextlib.suppress(CorruptBatchError):
            record_batch.decode_records(data, verify_crc=verify)
    for check in (record_batch.read_header, record_batch.check_produced):
        with contextlib.suppress(CorruptBatchError):
            check(data)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=300))
def test_random_bytes_raise_only_corrupt_batch_error(data: bytes) -> None:
    _parse_everything(data)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    batches=st.lists(record_lists, min_size=1, max_size=3),
    compression=st.sampled_from(list(Compression)),
    damage=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
    cut=st.integers(0, 10_000),
    garbage=st.binary(max_size=40),
)
def test_damaged_batches_raise_only_corrupt_batch_error(
    batches: list[list[tuple[bytes | None, bytes | None]]],
    compression: Compression,
    damage: list[tuple[int, int]],
    cut: int,
    garbage: bytes,
) -> None:
    data = bytearray(b"".join(client_batch(records, compression=compression) for records in batches))
    for position, value in damage:
        data[position % len(data)] = value
    _parse_everything(bytes(data[: cut % (len(data) + 1)]) + garbage)
    _parse_everything(bytes(data))


@settings(max_examples=200)
@given(records=record_lists, field=st.integers(8, HEADER_SIZE - 1), value=st.integers(0, 255))
def test_a_damaged_header_past_the_stamped_fields_is_found(
    records: list[tuple[bytes | None, bytes | None]], field: int, value: int
) -> None:
    """Every byte after baseOffset except the leader epoch is covered by a length check or the CRC."""
    batch = bytearray(record_batch.encode_batch(3, 1, 10, records))
    original = bytes(batch)
    batch[field] = value
    headers, valid = record_batch.scan_valid_prefix(bytes(batch))
    if bytes(batch) != original and not 12 <= field < 16:
        assert (headers, valid) == ([], 0)


@pytest.mark.parametrize("source", list(Compression))
def test_recompressed_keeps_everything_but_the_codec(source: Compression) -> None:
    """A produced batch compressed again with each codec (and a level where it has one) holds the
    same records, headers, producer id, epoch and sequence, with a valid CRC, and passes Kafka's
    checks again; the timestamps come with it."""
    headers: list[tuple[str, bytes | None]] = [("h", b"x"), ("none", None)]
    batch = client_batch(RECORDS, compression=source, producer=(42, 3, 17), headers=headers)
    produced = record_batch.check_produced(batch)
    for target, level in [
        (Compression.NONE, None),
        (Compression.GZIP, 1),
        (Compression.SNAPPY, None),
        (Compression.LZ4, 12),
        (Compression.ZSTD, -5),
    ]:
        again = record_batch.recompressed(produced, target, level=level)
        header = again.header
        assert header.compression == target
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 17)
        assert (header.record_count, header.max_timestamp_ms) == (
            len(RECORDS),
            produced.header.max_timestamp_ms,
        )
        assert record_batch.check_produced(again.data).header == header
        assert record_batch.decode_records(again.data) == record_batch.decode_records(batch)
        assert record_batch.record_timestamps(again) == record_batch.record_timestamps(produced)
