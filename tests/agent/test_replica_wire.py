"""Replication's Kafka wire (`jbod_agent.replica_wire`) through real bytes: a follower's fetch
encoded as Kafka's Fetch, parsed by the broker's request codec and read back as the leader reads
it; the leader's answer encoded as Kafka's response, parsed by the client codec and read back as
the follower reads it. Both must come back unchanged."""

from __future__ import annotations

from typing import Any

from jbod_agent import replica_wire
from jbod_core.errors import ErrorCode
from jbod_core.fetch_session import FetchPosition
from jbod_core.ids import Uuid
from jbod_core.replica_fetch import ReplicaFetch, ReplicaFetchAnswer, ReplicaPartitionAnswer, WantedPartition
from jbod_core.replication import DivergingEpoch
from jbod_kafka import protocol

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
    body = replica_wire.fetch_request(fetch, log_start_offsets=lambda key: key[1] * 10)
    frame = protocol.encode_request(
        replica_wire.FETCH_KEY, replica_wire.FETCH_VERSION, body, correlation_id=7, client_id="follower"
    )
    request = protocol.parse_request(frame[4:])
    assert (request.header.api_key, request.header.api_version) == (1, replica_wire.FETCH_VERSION)
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
            WantedPartition((A, 0), FetchPosition(100, 4, 5), 1 << 20),
            WantedPartition((A, 2), FetchPosition(0, -1, 5), 1 << 20),
            WantedPartition((B, 1), FetchPosition(9, 2, 2), 1 << 20),
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
    for version in (13, replica_wire.FETCH_VERSION):  # uncopied records from v12 on (the hot path)
        frame = _frame(replica_wire.response_of(answer, version, names, correlation_id=7), version)
        correlation_id, response = protocol.parse_response(1, version, frame[4:])
        assert correlation_id == 7
        assert replica_wire.answer_of(response) == answer


def test_a_session_error_comes_back_without_partitions() -> None:
    answer = ReplicaFetchAnswer(71, 0)
    names = replica_wire.ReplicaRequestNames(by_id=True)
    for version in (11, replica_wire.FETCH_VERSION):  # kio's encoder before v12, ours after
        frame = _frame(replica_wire.response_of(answer, version, names, correlation_id=9), version)
        assert replica_wire.answer_of(protocol.parse_response(1, version, frame[4:])[1]) == answer


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
    assert (
        replica_wire.answer_of(protocol.parse_response(1, replica_wire.FETCH_VERSION, frame[4:])[1]) == answer
    )
