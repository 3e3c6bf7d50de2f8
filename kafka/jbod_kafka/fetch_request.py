"""A follower's Fetch request (v15 and later: the versions that carry `replica_state`) written
directly, without kio's generic encoder: a follower sends one per `replica.fetch.wait.max.ms` or per
answer, the replication hot path.

Guarantees:
* `encode` gives, for the same content, exactly the size-prefixed frame `protocol.encode_request`
  writes through kio for `FetchRequest` of that version (tests/kafka/test_fetch_request.py compares
  them over generated requests): request header v2 (client id as a nullable int16-length string,
  no tags), then the body with compact arrays and uvarint lengths, topics by id, and the tagged
  field `replica_state` (1) only when it differs from its default, as kio and Kafka write it.
* The fields a follower never sets are written at their defaults: no `cluster_id`, no
  `replica_directory_id` (v17) or `high_watermark` (v18) per partition, isolation level 0
  (read_uncommitted, as Kafka's replica fetcher).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from jbod_core.record_structs import uvarint

FIRST_VERSION: Final = 15
FETCH_KEY: Final = 1

_HEADER: Final = struct.Struct(">ihhih")  # size, api key, version, correlation id, client id length
_BODY: Final = struct.Struct(">iiibii")  # max wait, min bytes, max bytes, isolation, session id, epoch
_PARTITION: Final = struct.Struct(">iiqiqiB")  # index, leader epoch, offset, last epoch, start, max, tags
_REPLICA_STATE: Final = struct.Struct(">iqB")  # replica id, epoch, no tags
_INT32: Final = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class FetchPartition:
    """One partition a follower asks for, in the wire's terms."""

    index: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1


def encode(  # noqa: PLR0913  the request's fields, as Kafka names them
    version: int,
    *,
    correlation_id: int,
    client_id: str,
    replica_id: int,
    replica_epoch: int,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    session_id: int,
    session_epoch: int,
    topics: Sequence[tuple[uuid.UUID, Sequence[FetchPartition]]],
    forgotten: Sequence[tuple[uuid.UUID, Sequence[int]]] = (),
    rack_id: str = "",
) -> bytes:
    """The size-prefixed request frame (the module's guarantees)."""
    if version < FIRST_VERSION:
        raise ValueError(f"Fetch v{version} has no replica_state: encode it with kio")
    client = client_id.encode()
    body = bytearray(b"\x00")  # the header's tagged fields
    body += _BODY.pack(max_wait_ms, min_bytes, max_bytes, 0, session_id, session_epoch)
    body += uvarint(len(topics) + 1)
    for topic_id, partitions in topics:
        body += topic_id.bytes
        body += uvarint(len(partitions) + 1)
        for part in partitions:
            body += _PARTITION.pack(
                part.index,
                part.current_leader_epoch,
                part.fetch_offset,
                part.last_fetched_epoch,
                part.log_start_offset,
                part.partition_max_bytes,
                0,
            )
        body += b"\x00"  # the topic's tagged fields
    body += uvarint(len(forgotten) + 1)
    for topic_id, indexes in forgotten:
        body += topic_id.bytes
        body += uvarint(len(indexes) + 1)
        for index in indexes:
            body += _INT32.pack(index)
        body += b"\x00"
    rack = rack_id.encode()
    body += uvarint(len(rack) + 1) + rack
    if (replica_id, replica_epoch) != (-1, -1):
        body += b"\x01\x01" + uvarint(_REPLICA_STATE.size) + _REPLICA_STATE.pack(replica_id, replica_epoch, 0)
    else:
        body += b"\x00"
    size = _HEADER.size - 4 + len(client) + len(body)
    return _HEADER.pack(size, FETCH_KEY, version, correlation_id, len(client)) + client + bytes(body)
