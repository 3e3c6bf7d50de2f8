"""The hand-written Produce response encoder (`jbod_kafka.produce_response`) writes exactly what
kio, generated from Kafka's own message schemas, writes for the same response, for every flexible
version the brokers answer, over generated responses (errors with messages, record errors, leader
hints and node endpoints, topics by name and by id)."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jbod_kafka import flexible, produce_response, protocol
from tests.kafka.leader_hints import current_leaders, kio_current_leader, kio_node_endpoints, node_endpoints

VERSIONS = range(produce_response.FIRST_VERSION, protocol.APIS[0].max_version + 1)
TEXT = st.none() | st.text(max_size=20)

partitions = st.builds(
    produce_response.PartitionProduceResponse,
    index=st.integers(0, 2**31 - 1),
    error_code=st.sampled_from([0, 2, 6, 10, 19, 20, 29, 45, 87]),
    base_offset=st.integers(-1, 2**40),
    log_append_time_ms=st.just(-1) | st.integers(0, 2**41),
    log_start_offset=st.integers(-1, 2**40),
    record_errors=st.lists(st.tuples(st.integers(0, 1000), TEXT), max_size=2).map(tuple),
    error_message=TEXT,
    current_leader=current_leaders,
)


def _kio(
    version: int, topics: list[tuple[Any, list[produce_response.PartitionProduceResponse]]], **fields: Any
) -> bytes:
    key = "topic_id" if version >= 13 else "name"
    body = protocol.build(
        protocol.response_type(0, version),
        responses=[
            {
                key: topic,
                "partition_responses": [
                    {
                        "index": p.index,
                        "error_code": p.error_code,
                        "base_offset": p.base_offset,
                        "log_append_time": (
                            None
                            if p.log_append_time_ms < 0
                            else datetime.datetime.fromtimestamp(p.log_append_time_ms / 1000, datetime.UTC)
                        ),
                        "log_start_offset": p.log_start_offset,
                        "record_errors": [
                            {"batch_index": i, "batch_index_error_message": m} for i, m in p.record_errors
                        ],
                        "error_message": p.error_message,
                        **kio_current_leader(p.current_leader),
                    }
                    for p in parts
                ],
            }
            for topic, parts in topics
        ],
        **fields,
    )
    header = protocol.RequestHeader(0, version, 11, None, flexible=True)
    return protocol.encode_response(header, body)


@settings(max_examples=150, deadline=None)
@given(
    version=st.sampled_from(list(VERSIONS)),
    topics=st.lists(
        st.tuples(st.uuids(), st.text(max_size=12), st.lists(partitions, max_size=4)), max_size=4
    ),
    nodes=node_endpoints,
    throttle_ms=st.integers(0, 1000),
)
def test_the_encoder_writes_what_kio_writes(
    version: int,
    topics: list[tuple[uuid.UUID, str, list[produce_response.PartitionProduceResponse]]],
    nodes: list[flexible.NodeEndpoint],
    throttle_ms: int,
) -> None:
    named = [(topic_id if version >= 13 else name, parts) for topic_id, name, parts in topics]
    ours = produce_response.encode(
        version, correlation_id=11, topics=named, node_endpoints=nodes, throttle_ms=throttle_ms
    )
    expected = _kio(
        version,
        named,
        throttle_time=throttle_ms,
        node_endpoints=kio_node_endpoints(nodes),
    )
    assert ours == expected


def test_versions_before_flexible_are_refused() -> None:
    with pytest.raises(ValueError, match="not flexible"):
        produce_response.encode(8, correlation_id=1, topics=[])
