"""`jbod_kafka.protocol`: every answered API and version round-trips through the request parser
and the response encoder (random well-typed messages from Kafka's own schemas, via kio), the
header versions follow flexibility (ApiVersions' response header always v0), unknown APIs and
versions are refused with the right error, and `build` fills a message from plain values."""

from __future__ import annotations

import dataclasses
import datetime
import struct
import uuid
from typing import Final

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode as KafkaError
from kio.serial import entity_reader
from kio.static.primitive import Records

from jbod_kafka import protocol
from tests.kafka_api.raw_client import encode_request

st.register_type_strategy(Records, st.binary(max_size=64))

VERSIONS = [
    (key, version)
    for key, api in protocol.APIS.items()
    for version in range(api.min_version, api.max_version + 1)
]


def _without_nulls(message: object) -> bool:
    """Messages the parser accepts: no null in a field that may not be null."""
    return protocol._null_field(message) is None


# kio's reader turns an int64 of milliseconds into a timedelta through an int64 of microseconds,
# so |ms| must stay under 2^63 / 1000 (about 292,000 years): a larger value (OffsetCommit v2-v4's
# retention_time; clients send -1) is written but does not read back, and the parser answers it
# as malformed.
_READABLE_MS: Final = (2**63 - 1) // 1000


def _readable_timedeltas(value: object) -> bool:
    """No timedelta (at any depth) beyond what kio's reader can build again."""
    if isinstance(value, datetime.timedelta):
        return abs(value // datetime.timedelta(milliseconds=1)) < _READABLE_MS
    if isinstance(value, tuple):
        return all(_readable_timedeltas(item) for item in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return all(_readable_timedeltas(getattr(value, f.name)) for f in dataclasses.fields(value))
    return True


def _in_utc(value: object) -> object:
    """`value` with every aware datetime (at any depth) moved to UTC: the wire carries an instant,
    and Python compares a datetime in a zone's fold or gap with one of another zone as unequal."""
    if isinstance(value, datetime.datetime) and value.tzinfo is not None:
        return value.astimezone(datetime.UTC)
    if isinstance(value, tuple):
        return tuple(_in_utc(item) for item in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(
            value, **{f.name: _in_utc(getattr(value, f.name)) for f in dataclasses.fields(value)}
        )
    return value


def _parseable(message: object) -> bool:
    return _without_nulls(message) and _readable_timedeltas(message)


@pytest.mark.parametrize(("key", "version"), VERSIONS, ids=[f"{k}v{v}" for k, v in VERSIONS])
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_requests_round_trip_through_the_parser(key: int, version: int, data: st.DataObject) -> None:
    body = data.draw(st.from_type(protocol.request_type(key, version)).filter(_parseable))
    try:
        frame = encode_request(key, version, body, correlation_id=77)
    except Exception:  # a value kio's writer refuses (an over-long string): not a request
        return
    parsed = protocol.parse_request(frame)
    assert (parsed.header.api_key, parsed.header.api_version, parsed.header.correlation_id) == (
        key,
        version,
        77,
    )
    assert parsed.body == body


@pytest.mark.parametrize(("key", "version"), VERSIONS, ids=[f"{k}v{v}" for k, v in VERSIONS])
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_responses_round_trip_with_the_header_their_version_needs(
    key: int, version: int, data: st.DataObject
) -> None:
    response_type = protocol.response_type(key, version)
    body = data.draw(st.from_type(response_type))
    flexible = bool(protocol.request_type(key, version).__flexible__)
    header = protocol.RequestHeader(key, version, 1234, "c", flexible=flexible)
    try:
        frame = protocol.encode_response(header, body)
    except Exception:
        return
    (size, correlation_id) = struct.unpack_from(">ii", frame)
    assert (size, correlation_id) == (len(frame) - 4, 1234)
    tagged = 1 if flexible and key != protocol.API_VERSIONS_KEY else 0  # ApiVersions: header v0 always
    try:
        decoded, used = entity_reader(response_type)(frame, 8 + tagged)
    except ValueError as exc:  # kio cannot read back a duration it generated (timedelta overflow)
        assume("overflow" not in str(exc))
        raise
    assert _in_utc(decoded) == _in_utc(body) and 8 + tagged + used == len(frame)


def test_unknown_api_keys_and_versions_are_refused() -> None:
    with pytest.raises(protocol.UnknownApiError):
        protocol.parse_request(struct.pack(">hhi", 9999, 0, 1) + b"\0\0")
    with pytest.raises(protocol.UnsupportedVersionError) as produce_v2:
        protocol.parse_request(struct.pack(">hhi", 0, 2, 1) + b"\0\0")
    assert produce_v2.value.api_key == 0
    with pytest.raises(protocol.MalformedRequestError):
        protocol.parse_request(b"\0\3")


def test_an_unknown_api_versions_version_keeps_its_correlation_id() -> None:
    frame = struct.pack(">hhi", 18, 127, 42) + struct.pack(">h", 1) + b"x" + b"\0"
    with pytest.raises(protocol.UnsupportedVersionError) as caught:
        protocol.parse_request(frame)
    assert caught.value.correlation_id == 42
    answer = protocol.api_versions_fallback(42, [protocol.APIS[18]])
    (size, correlation_id, error, count, key, low, high) = struct.unpack(">iihihhh", answer)
    assert (correlation_id, error, count, key, low, high) == (42, 35, 1, 18, 0, 4)
    assert size == len(answer) - 4


def test_a_null_in_a_non_nullable_field_is_malformed() -> None:
    body = protocol.build(
        protocol.request_type(2, 9),
        replica_id=-1,
        isolation_level=0,
        topics=[
            {"name": "t", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}
        ],
    )
    frame = bytearray(encode_request(2, 9, body))
    at = frame.index(b"\x02t\x02") + 2  # topic "t" (compact string), then its partitions' length
    frame[at] = 0  # a compact array's length 0 means null
    with pytest.raises(protocol.MalformedRequestError, match="not nullable"):
        protocol.parse_request(bytes(frame))


def test_build_drops_fields_a_version_lacks_and_converts_plain_values() -> None:
    fields = {
        "throttle_time": 5,
        "brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}],
        "cluster_id": "c",
        "controller_id": 1,
        "topics": [
            {
                "error_code": 3,
                "name": "t",
                "topic_id": uuid.UUID(int=7),
                "partitions": [],
            }
        ],
        "cluster_authorized_operations": 0,
        "error_code": 0,
    }
    v0 = protocol.build(protocol.response_type(3, 0), **fields)
    v13 = protocol.build(protocol.response_type(3, 13), **fields)
    assert not hasattr(v0, "cluster_id") and v13.cluster_id == "c"
    assert v13.topics[0].error_code is KafkaError.unknown_topic_or_partition
    assert v13.throttle_time.total_seconds() == 0.005
