"""The hand-written follower Fetch request encoder (`jbod_kafka.fetch_request`) writes exactly the
frame kio, generated from Kafka's own message schemas, writes for the same request, for every
version with `replica_state`, over generated requests (sessions, forgotten topics, consumers' -1)."""

from __future__ import annotations

import datetime
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jbod_kafka import fetch_request, protocol

VERSIONS = range(fetch_request.FIRST_VERSION, protocol.APIS[1].max_version + 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)

partitions = st.builds(
    fetch_request.FetchPartition,
    index=st.integers(0, 2**31 - 1),
    fetch_offset=INT64,
    partition_max_bytes=INT32,
    current_leader_epoch=INT32,
    last_fetched_epoch=INT32,
    log_start_offset=INT64,
)


@settings(max_examples=150, deadline=None)
@given(
    version=st.sampled_from(list(VERSIONS)),
    topics=st.lists(st.tuples(st.uuids(), st.lists(partitions, max_size=4)), max_size=4),
    forgotten=st.lists(st.tuples(st.uuids(), st.lists(st.integers(0, 2**31 - 1), max_size=4)), max_size=3),
    replica=st.sampled_from([(-1, -1), (-1, 7)]) | st.tuples(st.integers(0, 1000), INT64),
    session=st.tuples(INT32, INT32),
    limits=st.tuples(st.integers(0, 2**31 - 1), INT32, INT32),
    client_id=st.text(max_size=20),
    rack_id=st.text(max_size=8),
    correlation_id=INT32,
)
def test_the_encoder_writes_what_kio_writes(
    version: int,
    topics: list[tuple[uuid.UUID, list[fetch_request.FetchPartition]]],
    forgotten: list[tuple[uuid.UUID, list[int]]],
    replica: tuple[int, int],
    session: tuple[int, int],
    limits: tuple[int, int, int],
    client_id: str,
    rack_id: str,
    correlation_id: int,
) -> None:
    max_wait_ms, min_bytes, max_bytes = limits
    ours = fetch_request.encode(
        version,
        correlation_id=correlation_id,
        client_id=client_id,
        replica_id=replica[0],
        replica_epoch=replica[1],
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        session_id=session[0],
        session_epoch=session[1],
        topics=topics,
        forgotten=forgotten,
        rack_id=rack_id,
    )
    body = protocol.build(
        protocol.request_type(1, version),
        cluster_id=None,
        replica_state={"replica_id": replica[0], "replica_epoch": replica[1]},
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=session[0],
        session_epoch=session[1],
        topics=[
            {
                "topic_id": topic_id,
                "partitions": [
                    {
                        "partition": p.index,
                        "current_leader_epoch": p.current_leader_epoch,
                        "fetch_offset": p.fetch_offset,
                        "last_fetched_epoch": p.last_fetched_epoch,
                        "log_start_offset": p.log_start_offset,
                        "partition_max_bytes": p.partition_max_bytes,
                    }
                    for p in parts
                ],
            }
            for topic_id, parts in topics
        ],
        forgotten_topics_data=[{"topic_id": t, "partitions": indexes} for t, indexes in forgotten],
        rack_id=rack_id,
    )
    expected = protocol.encode_request(1, version, body, correlation_id=correlation_id, client_id=client_id)
    assert ours == expected


def test_versions_without_replica_state_are_refused() -> None:
    with pytest.raises(ValueError, match="no replica_state"):
        fetch_request.encode(
            14,
            correlation_id=1,
            client_id="c",
            replica_id=1,
            replica_epoch=1,
            max_wait_ms=500,
            min_bytes=1,
            max_bytes=1,
            session_id=0,
            session_epoch=-1,
            topics=[],
        )
