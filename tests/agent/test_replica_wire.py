"""Replication's Kafka wire (`jbod_agent.replication.replica_wire`) through real bytes: a follower's fetch
encoded as Kafka's Fetch, parsed by the broker's request codec and read back as the leader reads
it; the leader's answer encoded as Kafka's response, parsed by the client codec and read back as
the follower reads it. Both must come back unchanged."""

from __future__ import annotations

from typing import Any

import pytest

from jbod_agent.replication import replica_wire
from jbod_core.errors import ErrorCode
from jbod_core.fetch_session import FetchPosition
from jbod_core.ids import Uuid
from jbod_core.replica_fetch import ReplicaFetch, ReplicaFetchAnswer, ReplicaPartitionAnswer, WantedPartition
from jbod_core.replication import DivergingEpoch
from jbod_kafka import fetch_response, protocol

A = Uuid.parse("AAAAAAAAAAAAAAAAAAAAAQ")
B = Uuid.parse("AAAAAAAAAAAAAAAAAAAAAg")


def _frame(response: Any, version: int) -> bytes:
    if isinstance(response, protocol.EncodedResponse):
        return b"".join(response.pieces)
    header = protocol.RequestHeader(1, version, 9, None, flexible=version >= 12)
    return protocol.encode_response(header, response)


def _over_the_wire_as_the_leader(
    fetch: ReplicaFetch,
) -> tuple[ReplicaFetch, replica_wire.ReplicaRequestNames]:
    frame = replica_wire.fetch_frame(fetch, correlation_id=7, client_id="follower")
    request = protocol.parse_request(frame[4:])
    assert (request.header.api_key, request.header.api_version) == (1, replica_wire.FETCH_VERSION)
    assert (request.header.correlation_id, request.header.client_id) == (7, "follower")
    assert [p.log_start_offset for t in request.body.topics for p in t.partitions] == [
        p.position.log_start_offset for p in fetch.partitions
    ]
    assert replica_wire.replica_id_of(request.body, request.header.api_version) == fetch.replica_id
    return replica_wire.replica_fetch_of(
        request.body, request.header.api_version, topic_id=lambda _name: None
    )


def test_a_followers_fetch_reaches_the_leader_as_it_was_sent() -> None:
    fetch = ReplicaFetch(
        replica_id=3,
        broker_epoch=41,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=10 << 20,
        session_id=1234,
        session_epoch=7,
        partitions=(
            WantedPartition((A, 0), FetchPosition(100, 4, 5, 37), 1 << 20),
            WantedPartition((A, 2), FetchPosition(0, -1, 5, 0), 1 << 20),
            WantedPartition((B, 1), FetchPosition(9, 2, 2), 1 << 20),  # a log start not known: -1
        ),
        forgotten=((B, 4), (A, 9)),
    )
    read, names = _over_the_wire_as_the_leader(fetch)
    assert read == fetch
    assert names.by_id


def test_a_leaders_answer_reaches_the_follower_as_it_was_sent() -> None:
    answer = ReplicaFetchAnswer(
        int(ErrorCode.NONE),
        1234,
        (
            ReplicaPartitionAnswer((A, 0), high_watermark=90, log_start_offset=3, records=b"\x00batch-bytes"),
            ReplicaPartitionAnswer(
                (A, 2), high_watermark=0, log_start_offset=0, diverging=DivergingEpoch(4, 77)
            ),
            ReplicaPartitionAnswer((B, 1), ErrorCode.NOT_LEADER_OR_FOLLOWER),
            ReplicaPartitionAnswer(
                (A, 5), ErrorCode.OFFSET_OUT_OF_RANGE, high_watermark=8, log_start_offset=6
            ),
        ),
    )
    _read, names = _over_the_wire_as_the_leader(
        ReplicaFetch(3, 41, 0, 1, 1 << 20, 0, -1, (WantedPartition((A, 0), FetchPosition(0, -1, 0), 1),))
    )
    frame = _frame(replica_wire.response_of(answer, replica_wire.FETCH_VERSION, names, correlation_id=7), 18)
    assert replica_wire.answer_of(frame[4:]) == answer
    # What the follower reads is what Kafka's own codec (kio) reads in the same bytes.
    correlation_id, response = protocol.parse_response(1, replica_wire.FETCH_VERSION, frame[4:])
    assert correlation_id == 7
    assert [
        (int(p.partition_index), int(p.error_code), int(p.high_watermark), int(p.diverging_epoch.epoch))
        for t in response.responses
        for p in t.partitions
    ] == [
        (p.key[1], int(p.error), p.high_watermark, -1 if p.diverging is None else p.diverging.epoch)
        for p in answer.partitions
    ]
    for version in (12, 13):  # older leaders' answers, as a Kafka follower might read them
        frame = _frame(replica_wire.response_of(answer, version, names, correlation_id=7), version)
        _, older = protocol.parse_response(1, version, frame[4:])
        assert [bytes(p.records or b"") for t in older.responses for p in t.partitions] == [
            bytes(p.records) for p in answer.partitions
        ]


def test_a_session_error_comes_back_without_partitions() -> None:
    answer = ReplicaFetchAnswer(71, 0)
    names = replica_wire.ReplicaRequestNames(by_id=True)
    frame = _frame(replica_wire.response_of(answer, replica_wire.FETCH_VERSION, names, correlation_id=9), 18)
    assert replica_wire.answer_of(frame[4:]) == answer
    frame = _frame(replica_wire.response_of(answer, 11, names, correlation_id=9), 11)  # kio's encoder
    _, response = protocol.parse_response(1, 11, frame[4:])
    assert (int(response.error_code), int(response.session_id), response.responses) == (71, 0, ())


def test_the_zero_topic_id_is_a_topic_no_broker_has() -> None:
    """kio reads a zero topic id as None (a fuzzed request found it): it names no topic, so it
    is answered, not a failure."""
    zero = Uuid.from_bytes(bytes(16))
    read, names = _over_the_wire_as_the_leader(
        ReplicaFetch(3, 41, 0, 1, 1 << 20, 0, -1, (WantedPartition((zero, 4), FetchPosition(0, -1, 0), 1),))
    )
    assert read.partitions[0].key == (zero, 4)
    answer = ReplicaFetchAnswer(0, 0, (ReplicaPartitionAnswer((zero, 4), ErrorCode.UNKNOWN_TOPIC_ID),))
    frame = _frame(replica_wire.response_of(answer, replica_wire.FETCH_VERSION, names, correlation_id=1), 17)
    assert replica_wire.answer_of(frame[4:]) == answer


def test_bytes_that_are_no_fetch_response_are_refused_as_such() -> None:
    for garbage in (b"", b"\x00\x00\x00\x07", b"\x00\x00\x00\x07\x00" + b"\xff" * 40):
        with pytest.raises(fetch_response.MalformedFetchResponseError):
            replica_wire.answer_of(garbage)
