"""The records of `__consumer_offsets` in Kafka's binary schemas, and a group's partition."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jbod_core import group_records, kafka_hash
from jbod_core.group_records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
)


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("abc", 96354),
        ("test", 3556498),
        ("hello", 99162322),
        ("polygenelubricants", -(2**31)),  # Integer.MIN_VALUE: Kafka's Utils.abs maps it to 0
        ("\U0001f600", 0xD83D * 31 + 0xDE00),  # one code point, two UTF-16 code units
    ],
)
def test_java_string_hash_is_javas(text: str, expected: int) -> None:
    assert kafka_hash.java_string_hash(text) == expected


def test_a_groups_partition_is_kafkas_abs_hash_modulo_the_count() -> None:
    assert group_records.partition_for("test", 50) == 3556498 % 50
    assert group_records.partition_for("polygenelubricants", 50) == 0
    assert group_records.partition_for("hello", 7) == 99162322 % 7
    negative = next(
        g for g in (f"consumer-group-{i}" for i in range(1000)) if kafka_hash.java_string_hash(g) < 0
    )
    assert group_records.partition_for(negative, 50) == -kafka_hash.java_string_hash(negative) % 50


def test_an_offset_commit_is_written_as_kafka_writes_it() -> None:
    record = group_records.offset_commit("g", "t", 3, OffsetCommitValue(42, 7, "meta", 1_700_000_000_000))
    key, value = group_records.encode(record)
    assert key == struct.pack(">h", 1) + _string("g") + _string("t") + struct.pack(">i", 3)
    assert value == (struct.pack(">hqi", 3, 42, 7) + _string("meta") + struct.pack(">q", 1_700_000_000_000))
    assert group_records.decode(key, value) == record


def test_group_metadata_is_written_as_kafka_writes_it() -> None:
    member = MemberMetadata("m-1", "i-1", "client", "/127.0.0.1", 300_000, 45_000, b"sub", b"assigned")
    record = group_records.group_metadata(
        "g", GroupMetadataValue("consumer", 5, "range", "m-1", 1_700_000_000_000, (member,))
    )
    key, value = group_records.encode(record)
    assert key == struct.pack(">h", 2) + _string("g")
    assert value == (
        struct.pack(">h", 3)
        + _string("consumer")
        + struct.pack(">i", 5)
        + _string("range")
        + _string("m-1")
        + struct.pack(">qi", 1_700_000_000_000, 1)
        + _string("m-1")
        + _string("i-1")
        + _string("client")
        + _string("/127.0.0.1")
        + struct.pack(">ii", 300_000, 45_000)
        + struct.pack(">i", 3)
        + b"sub"
        + struct.pack(">i", 8)
        + b"assigned"
    )
    assert group_records.decode(key, value) == record


def test_tombstones_round_trip() -> None:
    for record in (
        group_records.offset_commit("g", "t", 0, None),
        group_records.group_metadata("g", None),
    ):
        key, value = group_records.encode(record)
        assert value is None
        assert group_records.decode(key, None) == record


def test_older_value_versions_are_read_with_kafkas_defaults() -> None:
    key = group_records.encode_key(OffsetCommitKey("g", "t", 0))
    v0 = struct.pack(">hq", 0, 10) + _string("m") + struct.pack(">q", 5)
    v1 = struct.pack(">hq", 1, 10) + _string("m") + struct.pack(">qq", 5, 99)
    assert group_records.decode(key, v0) == CoordinatorRecord(
        OffsetCommitKey("g", "t", 0), OffsetCommitValue(10, -1, "m", 5)
    )
    assert group_records.decode(key, v1) == CoordinatorRecord(
        OffsetCommitKey("g", "t", 0), OffsetCommitValue(10, -1, "m", 5, expire_timestamp_ms=99)
    )
    group_key = group_records.encode_key(GroupMetadataKey("g"))
    member_v0 = _string("m") + _string("c") + _string("h") + struct.pack(">i", 10_000)
    member_v0 += struct.pack(">i", 1) + b"s" + struct.pack(">i", 1) + b"a"
    value_v0 = struct.pack(">h", 0) + _string("consumer") + struct.pack(">i", 2) + _string("range")
    value_v0 += _string("m") + struct.pack(">i", 1) + member_v0
    decoded = group_records.decode(group_key, value_v0)
    assert decoded is not None and decoded.value == GroupMetadataValue(
        "consumer", 2, "range", "m", -1, (MemberMetadata("m", None, "c", "h", -1, 10_000, b"s", b"a"),)
    )


def test_keys_of_the_new_consumer_protocol_are_not_kept() -> None:
    assert group_records.decode(struct.pack(">h", 3) + _string("g"), b"anything") is None


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (b"", None),
        (struct.pack(">h", -1), None),
        (struct.pack(">h", 2) + _string("g") + b"x", None),  # trailing bytes
        (struct.pack(">h", 1) + _string("g"), None),  # ends inside the key
        (group_records.encode_key(OffsetCommitKey("g", "t", 0)), struct.pack(">hq", 9, 1)),  # value version
        (group_records.encode_key(GroupMetadataKey("g")), struct.pack(">h", 3) + _string("c")),
        (struct.pack(">h", 2) + struct.pack(">h", 2) + b"\xff\xfe", None),  # not UTF-8
    ],
)
def test_malformed_records_raise_value_error(key: bytes, value: bytes | None) -> None:
    with pytest.raises(ValueError):
        group_records.decode(key, value)


def test_a_value_of_the_other_kind_is_refused() -> None:
    with pytest.raises(ValueError):
        CoordinatorRecord(GroupMetadataKey("g"), OffsetCommitValue(1, -1, "", 0))


@given(key=st.binary(max_size=40), value=st.none() | st.binary(max_size=80))
def test_decode_raises_nothing_but_value_error(key: bytes, value: bytes | None) -> None:
    with contextlib.suppress(ValueError):
        group_records.decode(key, value)
