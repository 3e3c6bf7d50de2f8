"""Produce responses (v9 and later, the flexible versions every current producer sends) written
directly instead of through kio's generic builder and encoder: one per produce request, the
broker's hot path with fetches.

Guarantees:
* `encode` gives, for the same content, exactly the size-prefixed frame kio writes for
  `ProduceResponse` of that version (tests/kafka/test_produce_response.py compares them over
  generated responses): response header v1, the topics (by name before v13, by id from v13)
  with their partitions (index, error, base offset, log append time, log start offset, record
  errors, error message, and the tagged `current_leader` (0) when it is not the default), the
  throttle time, and the tagged `node_endpoints` (0) when there are any, as Kafka writes them.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from jbod_core.record_structs import uvarint
from jbod_kafka import flexible

FIRST_VERSION: Final = 9
_TOPIC_IDS_FROM: Final = 13
LEADER_HINTS_FROM: Final = 10  # current_leader and node_endpoints (KIP-951)
_HEADER: Final = struct.Struct(">iiB")  # size, correlation id, no tags
_PARTITION: Final = struct.Struct(">ihqqq")  # index, error, base offset, log append time, log start
_INT32: Final = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class PartitionProduceResponse:
    """One partition of a Produce response, in the wire's terms."""

    index: int
    error_code: int = 0
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    record_errors: tuple[tuple[int, str | None], ...] = ()  # (batch index, message)
    error_message: str | None = None
    current_leader: tuple[int, int] | None = None  # (leader id, leader epoch)


def _partition(part: PartitionProduceResponse, *, leader_hint: bool) -> bytes:
    out = bytearray(
        _PARTITION.pack(
            part.index, part.error_code, part.base_offset, part.log_append_time_ms, part.log_start_offset
        )
    )
    out += uvarint(len(part.record_errors) + 1)
    for batch_index, message in part.record_errors:
        out += _INT32.pack(batch_index) + flexible.compact_string(message) + b"\x00"
    out += flexible.compact_string(part.error_message)
    hint = flexible.leader_hint_tag(0, part.current_leader) if leader_hint else b""
    out += b"\x01" + hint if hint else b"\x00"
    return bytes(out)


def encode(
    version: int,
    *,
    correlation_id: int,
    topics: Sequence[tuple[uuid.UUID | str | None, Sequence[PartitionProduceResponse]]],
    node_endpoints: Sequence[flexible.NodeEndpoint] = (),
    throttle_ms: int = 0,
) -> bytes:
    """The size-prefixed response frame (the module's guarantees)."""
    if version < FIRST_VERSION:
        raise ValueError(f"Produce v{version} is not flexible: encode it with kio")
    body = bytearray(uvarint(len(topics) + 1))
    for topic, partitions in topics:
        body += flexible.topic_field(topic, by_id=version >= _TOPIC_IDS_FROM)
        body += uvarint(len(partitions) + 1)
        for part in partitions:
            body += _partition(part, leader_hint=version >= LEADER_HINTS_FROM)
        body += b"\x00"  # the topic's tagged fields
    body += _INT32.pack(throttle_ms)
    if version >= LEADER_HINTS_FROM and node_endpoints:
        body += b"\x01" + flexible.node_endpoints_tag(0, node_endpoints)
    else:
        body += b"\x00"
    return _HEADER.pack(len(body) + _HEADER.size - 4, correlation_id, 0) + bytes(body)
