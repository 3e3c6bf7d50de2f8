"""The hand-written Fetch response encoder (`jbod_kafka.fetch_response`) writes exactly what kio,
generated from Kafka's own message schemas, writes for the same response, for every flexible
version the brokers answer, over generated responses (errors, records, divergences, leader hints,
node endpoints, topics by name and by id)."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from jbod_kafka import fetch_response, protocol
from tests.kafka.leader_hints import current_leaders, kio_current_leader, kio_node_endpoints, node_endpoints

VERSIONS = range(fetch_response.FIRST_VERSION, protocol.APIS[1].max_version + 1)

partitions = st.builds(
    fetch_response.Partition,
    index=st.integers(0, 2**31 - 1),
    error_code=st.sampled_from([0, 1, 3, 6, 29, 56, 74, 100]),
    high_watermark=st.integers(-1, 2**40),
    last_stable_offset=st.integers(-1, 2**40),
    log_start_offset=st.integers(-1, 2**40),
    aborted_transactions_null=st.booleans(),
    records=st.binary(max_size=300),
    diverging=st.none() | st.tuples(st.integers(-1, 2**31 - 1), st.integers(-1, 2**40)),
    current_leader=current_leaders,
    preferred_read_replica=st.integers(-1, 100),
    aborted_transactions=st.lists(st.tuples(st.integers(0, 2**40), st.integers(0, 2**40)), max_size=3).map(
        tuple
    ),
).map(lambda p: dataclasses.replace(p, aborted_transactions=()) if p.aborted_transactions_null else p)


def _kio(version: int, topics: list[tuple[Any, list[fetch_response.Partition]]], **fields: Any) -> bytes:
    key = "topic_id" if version >= 13 else "topic"
    body = protocol.build(
        protocol.response_type(1, version),
        responses=[
            {
                key: topic,
                "partitions": [
                    {
                        "partition_index": p.index,
                        "error_code": p.error_code,
                        "high_watermark": p.high_watermark,
                        "last_stable_offset": p.last_stable_offset,
                        "log_start_offset": p.log_start_offset,
                        "aborted_transactions": None
                        if p.aborted_transactions_null
                        else [
                            {"producer_id": pid, "first_offset": first}
                            for pid, first in p.aborted_transactions
                        ],
                        "preferred_read_replica": p.preferred_read_replica,
                        "records": bytes(p.records),
                        **(
                            {"diverging_epoch": {"epoch": p.diverging[0], "end_offset": p.diverging[1]}}
                            if p.diverging
                            else {}
                        ),
                        **kio_current_leader(p.current_leader),
                    }
                    for p in parts
                ],
            }
            for topic, parts in topics
        ],
        **fields,
    )
    header = protocol.RequestHeader(1, version, fields.pop("correlation_id", 5), None, flexible=True)
    return protocol.encode_response(header, body)


@settings(max_examples=150, deadline=None)
@given(
    version=st.sampled_from(list(VERSIONS)),
    topics=st.lists(
        st.tuples(st.uuids(), st.text(max_size=12), st.lists(partitions, max_size=4)), max_size=4
    ),
    nodes=node_endpoints,
    error_code=st.sampled_from([0, 70, 71]),
    session_id=st.integers(0, 2**31 - 1),
    throttle_ms=st.integers(0, 1000),
)
def test_the_encoder_writes_what_kio_writes(
    version: int,
    topics: list[tuple[uuid.UUID, str, list[fetch_response.Partition]]],
    nodes: list[fetch_response.NodeEndpoint],
    error_code: int,
    session_id: int,
    throttle_ms: int,
) -> None:
    named = [(topic_id if version >= 13 else name, parts) for topic_id, name, parts in topics]
    ours = b"".join(
        fetch_response.encode(
            version,
            correlation_id=5,
            error_code=error_code,
            session_id=session_id,
            topics=named,
            node_endpoints=nodes,
            throttle_ms=throttle_ms,
        )
    )
    expected = _kio(
        version,
        named,
        throttle_time=throttle_ms,
        error_code=error_code,
        session_id=session_id,
        node_endpoints=kio_node_endpoints(nodes),
    )
    assert ours == expected


def test_records_are_passed_through_not_copied() -> None:
    records = memoryview(bytearray(b"batch" * 100))
    pieces = fetch_response.encode(
        17,
        correlation_id=1,
        error_code=0,
        session_id=0,
        topics=[(uuid.uuid4(), [fetch_response.Partition(0, records=records)])],
    )
    assert any(piece is records for piece in pieces)


@settings(max_examples=150, deadline=None)
@given(
    version=st.sampled_from(list(VERSIONS)),
    topics=st.lists(
        st.tuples(st.none() | st.uuids(), st.text(max_size=12), st.lists(partitions, max_size=4)), max_size=4
    ),
    error_code=st.sampled_from([0, 70, 71]),
    session_id=st.integers(0, 2**31 - 1),
)
def test_decode_reads_back_what_encode_wrote(
    version: int,
    topics: list[tuple[uuid.UUID | None, str, list[fetch_response.Partition]]],
    error_code: int,
    session_id: int,
) -> None:
    named: list[tuple[uuid.UUID | str | None, list[fetch_response.Partition]]] = [
        (topic_id if version >= 13 else name, parts) for topic_id, name, parts in topics
    ]
    frame = b"".join(
        fetch_response.encode(
            version, correlation_id=9, error_code=error_code, session_id=session_id, topics=named
        )
    )
    decoded = fetch_response.decode(version, frame[4:])
    assert (decoded.correlation_id, decoded.error_code, decoded.session_id) == (9, error_code, session_id)
    expected = [
        (
            topic,
            [
                dataclasses.replace(
                    p, diverging=_tagged(p.diverging), current_leader=_tagged(p.current_leader)
                )
                for p in parts
            ],
        )
        for topic, parts in named
    ]
    assert decoded.topics == expected


def _tagged(value: tuple[int, int] | None) -> tuple[int, int] | None:
    """What a reader sees of a tagged field: nothing when it held its default."""
    return None if value in (None, (-1, -1)) else value


@settings(max_examples=300, deadline=None)
@given(version=st.sampled_from(list(VERSIONS)), garbage=st.binary(max_size=200), cut=st.integers(0, 400))
def test_garbage_and_cut_frames_raise_only_the_malformed_error(
    version: int, garbage: bytes, cut: int
) -> None:
    whole = b"".join(
        fetch_response.encode(
            version,
            correlation_id=1,
            error_code=0,
            session_id=0,
            topics=[
                (
                    uuid.uuid4() if version >= 13 else "t",
                    [fetch_response.Partition(0, records=b"r" * 50, diverging=(1, 2))],
                )
            ],
        )
    )[4:]
    for frame in (garbage, whole[: cut % len(whole)]):
        try:
            fetch_response.decode(version, frame)
        except fetch_response.MalformedFetchResponseError:
            continue


def test_a_throttle_time_set_afterwards_is_the_one_encoded_and_the_records_stay_uncopied() -> None:
    records = memoryview(b"r" * 64)
    topics: Any = [(uuid.uuid4(), [fetch_response.Partition(0, records=records)])]
    plain = fetch_response.encode(17, correlation_id=3, error_code=0, session_id=42, topics=topics)
    throttled = fetch_response.with_throttle(plain, 1234)
    assert b"".join(throttled) == b"".join(
        fetch_response.encode(
            17, correlation_id=3, error_code=0, session_id=42, topics=topics, throttle_ms=1234
        )
    )
    assert any(piece is records for piece in throttled)
    assert fetch_response.session_of(throttled) == 42
