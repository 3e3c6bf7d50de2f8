"""Replication on Kafka's wire: a follower's Fetch (with a replica id) and its leader's response,
translated to and from the typed values of `jbod_core.replica_fetch`, on both sides.

Guarantees:
* The follower sends what Kafka 4.3's replica fetcher sends (`fetch_frame`): Fetch at the
  newest version both sides answer (`FETCH_VERSION`), `replica_state` = (node id, broker epoch),
  topics by id, per partition the fetch offset, last fetched epoch, current leader epoch, the
  follower's log start offset and `replica.fetch.max.bytes`; the session id / epoch and the
  forgotten partitions of its fetch session (KIP-227).
* The leader reads a replica fetch from every Fetch version it answers (`replica_fetch_of`): the
  replica id is `replica_state.replica_id` from v15, `replica_id` before; topics by id from v13,
  by name before (an unknown name is answered UNKNOWN_TOPIC_OR_PARTITION by the leader, as an
  unknown id is); the follower's log start offset from v5 (-1 before).
* `response_of` answers in the request's version and naming: per partition its error, high
  watermark (also the last stable offset: there are no transactions), log start offset,
  `diverging_epoch` when the follower's history diverges (KIP-320), and the stored batches as
  they are, uncopied from v12 (`jbod_kafka.fetch_response`); `answer_of` is its inverse on the
  follower (`diverging_epoch` -1 = none), the records views into the response frame.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Any, Final

from kio.schema.errors import ErrorCode as KafkaError

from jbod_core.errors import ErrorCode
from jbod_core.fetch_session import FetchPosition
from jbod_core.ids import Uuid
from jbod_core.image import PartitionKey
from jbod_core.replica_fetch import ReplicaFetch, ReplicaFetchAnswer, ReplicaPartitionAnswer, WantedPartition
from jbod_core.replication import DivergingEpoch
from jbod_kafka import fetch_request, fetch_response, protocol
from jbod_kafka.ids import jbod_uuid, kafka_uuid

FETCH_KEY: Final = 1
FETCH_VERSION: Final = protocol.APIS[FETCH_KEY].max_version
_TOPIC_IDS_FROM: Final = 13
_REPLICA_STATE_FROM: Final = 15
#: The key of a partition named by a topic this broker does not know (answered 3 by the leader).
_UNKNOWN_TOPIC: Final = Uuid.from_bytes(bytes(16))


def replica_id_of(body: Any, version: int) -> int:
    """The replica id of a Fetch (-1 for a consumer)."""
    if version >= _REPLICA_STATE_FROM:
        return int(body.replica_state.replica_id)
    return int(getattr(body, "replica_id", -1))


def _grouped(keys: Iterable[PartitionKey]) -> dict[Uuid, list[int]]:
    topics: dict[Uuid, list[int]] = {}
    for topic_id, partition in keys:
        topics.setdefault(topic_id, []).append(partition)
    return topics


# -- follower side -----------------------------------------------------------------------------


def fetch_frame(fetch: ReplicaFetch, *, correlation_id: int, client_id: str) -> bytes:
    """The size-prefixed Kafka Fetch (at `FETCH_VERSION`) of a follower's `fetch`, written by
    `jbod_kafka.fetch_request` (what kio would write, without its generic encoder)."""
    topics: dict[Uuid, list[fetch_request.FetchPartition]] = {}
    for wanted in fetch.partitions:
        position = wanted.position
        topics.setdefault(wanted.key[0], []).append(
            fetch_request.FetchPartition(
                wanted.key[1],
                position.fetch_offset,
                wanted.max_bytes,
                current_leader_epoch=position.current_leader_epoch,
                last_fetched_epoch=position.last_fetched_epoch,
                log_start_offset=position.log_start_offset,
            )
        )
    return fetch_request.encode(
        FETCH_VERSION,
        correlation_id=correlation_id,
        client_id=client_id,
        replica_id=fetch.replica_id,
        replica_epoch=fetch.broker_epoch,
        max_wait_ms=fetch.max_wait_ms,
        min_bytes=fetch.min_bytes,
        max_bytes=fetch.max_bytes,
        session_id=fetch.session_id,
        session_epoch=fetch.session_epoch,
        topics=[(kafka_uuid(t), parts) for t, parts in topics.items()],
        forgotten=[(kafka_uuid(t), parts) for t, parts in _grouped(fetch.forgotten).items()],
    )


def answer_of(frame: bytes | memoryview) -> ReplicaFetchAnswer:
    """The typed answer in a leader's Fetch response frame (at `FETCH_VERSION`, without its size
    prefix), its records views into `frame`; `fetch_response.MalformedFetchResponseError` for
    bytes that are not one."""
    response = fetch_response.decode(FETCH_VERSION, frame)
    partitions = []
    ids: dict[uuid.UUID | str | None, Uuid] = {}
    for raw, parts in response.topics:
        topic_id = ids.get(raw)
        if topic_id is None:
            topic_id = ids[raw] = jbod_uuid(raw) if isinstance(raw, uuid.UUID) else _UNKNOWN_TOPIC
        for part in parts:
            diverging = part.diverging
            partitions.append(
                ReplicaPartitionAnswer(
                    (topic_id, part.index),
                    ErrorCode(part.error_code)
                    if part.error_code in _KNOWN
                    else ErrorCode.UNKNOWN_SERVER_ERROR,
                    high_watermark=part.high_watermark,
                    log_start_offset=part.log_start_offset,
                    diverging=(
                        DivergingEpoch(*diverging) if diverging is not None and diverging[0] >= 0 else None
                    ),
                    records=part.records,
                )
            )
    return ReplicaFetchAnswer(response.error_code, response.session_id, tuple(partitions))


_KNOWN: Final = frozenset(int(code) for code in ErrorCode)


# -- leader side -------------------------------------------------------------------------------


class ReplicaRequestNames:
    """How one request named its topics (by name before Fetch v13), to answer in kind."""

    def __init__(self, by_id: bool) -> None:
        self.by_id = by_id
        self.names: dict[Uuid, str] = {}


def replica_fetch_of(
    body: Any, version: int, *, topic_id: Callable[[str], Uuid | None]
) -> tuple[ReplicaFetch, ReplicaRequestNames]:
    """The typed `ReplicaFetch` of a follower's Fetch request (the module's guarantees)."""
    names = ReplicaRequestNames(by_id=version >= _TOPIC_IDS_FROM)

    def key(topic: Any, partition: int) -> PartitionKey:
        if names.by_id:  # kio reads the zero id as None: a topic no broker has
            return (_UNKNOWN_TOPIC if topic.topic_id is None else jbod_uuid(topic.topic_id)), partition
        found = topic_id(topic.topic)
        if found is None:
            return _UNKNOWN_TOPIC, partition
        names.names[found] = topic.topic
        return found, partition

    partitions = tuple(
        WantedPartition(
            key(topic, int(part.partition)),
            FetchPosition(
                int(part.fetch_offset),
                int(getattr(part, "last_fetched_epoch", -1)),
                int(getattr(part, "current_leader_epoch", -1)),
                int(getattr(part, "log_start_offset", -1)),
            ),
            int(part.partition_max_bytes),
        )
        for topic in body.topics
        for part in topic.partitions
    )
    forgotten = tuple(
        key(topic, int(index))
        for topic in getattr(body, "forgotten_topics_data", None) or ()
        for index in topic.partitions
    )
    state = getattr(body, "replica_state", None)
    fetch = ReplicaFetch(
        replica_id=replica_id_of(body, version),
        broker_epoch=int(state.replica_epoch) if state is not None else -1,
        max_wait_ms=int(body.max_wait.total_seconds() * 1000),
        min_bytes=int(body.min_bytes),
        max_bytes=int(getattr(body, "max_bytes", 0x7FFFFFFF)),
        session_id=int(getattr(body, "session_id", 0)),
        session_epoch=int(getattr(body, "session_epoch", -1)),
        partitions=partitions,
        forgotten=forgotten,
    )
    return fetch, names


def response_of(
    answer: ReplicaFetchAnswer, version: int, names: ReplicaRequestNames, *, correlation_id: int
) -> Any:
    """The Kafka Fetch response (in `version`) of a leader's `answer`: framed around the records
    (`jbod_kafka.fetch_response`) from v12, a kio body before."""
    topics: list[tuple[Uuid, list[ReplicaPartitionAnswer]]] = []
    for part in answer.partitions:
        if not topics or topics[-1][0] != part.key[0]:
            topics.append((part.key[0], []))
        topics[-1][1].append(part)

    def named(topic_id: Uuid) -> uuid.UUID | str:
        return kafka_uuid(topic_id) if names.by_id else names.names.get(topic_id, "")

    if version >= fetch_response.FIRST_VERSION:
        return protocol.EncodedResponse(
            fetch_response.encode(
                version,
                correlation_id=correlation_id,
                error_code=answer.error,
                session_id=answer.session_id,
                topics=[(named(topic_id), [_wire_partition(p) for p in parts]) for topic_id, parts in topics],
            )
        )
    key = "topic_id" if names.by_id else "topic"
    return protocol.build(
        protocol.response_type(FETCH_KEY, version),
        throttle_time=0,
        error_code=KafkaError(answer.error),
        session_id=answer.session_id,
        responses=[
            {key: named(topic_id), "partitions": [_kio_partition(p) for p in parts]}
            for topic_id, parts in topics
        ],
        node_endpoints=[],
    )


def _wire_partition(part: ReplicaPartitionAnswer) -> fetch_response.Partition:
    return fetch_response.Partition(
        part.key[1],
        int(part.error),
        high_watermark=part.high_watermark,
        last_stable_offset=part.high_watermark,
        log_start_offset=part.log_start_offset,
        records=part.records,
        diverging=None if part.diverging is None else (part.diverging.epoch, part.diverging.end_offset),
    )


def _kio_partition(part: ReplicaPartitionAnswer) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "partition_index": part.key[1],
        "error_code": KafkaError(int(part.error)),
        "high_watermark": part.high_watermark,
        "last_stable_offset": part.high_watermark,
        "log_start_offset": part.log_start_offset,
        "aborted_transactions": None,
        "records": part.records,
    }
    if part.diverging is not None:
        fields["diverging_epoch"] = {"epoch": part.diverging.epoch, "end_offset": part.diverging.end_offset}
    return fields
