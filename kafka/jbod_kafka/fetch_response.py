"""Fetch responses (v12 and later, the flexible versions every current client and follower sends)
written around their record bytes instead of through kio's generic encoder, the broker's hot path.

Guarantees:
* `encode` gives, for the same content, exactly the bytes kio writes for `FetchResponse` of that
  version (tests/kafka/test_fetch_response.py compares them over generated responses): the
  response header v1, then the body with compact arrays, uvarint lengths, and the tagged fields
  `diverging_epoch` (0), `current_leader` (1) and `node_endpoints` (top level, 0) only when they
  differ from their defaults, as kio and Kafka write them.
* Records are not copied: the result is a list of buffers (`writelines` / `sendmsg` them in
  order), each partition's records one of them, as the log read them.
* Topics are named by id from v13 (None: the zero id, as kio reads it), by name in v12.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

FIRST_VERSION: Final = 12
_TOPIC_IDS_FROM: Final = 13
_NODE_ENDPOINTS_FROM: Final = 16

_HEADER: Final = struct.Struct(">iiBihi")  # size, correlation id, no tags, throttle, error, session
_PARTITION: Final = struct.Struct(">ihqqq")  # index, error, high watermark, last stable, log start
_INT32: Final = struct.Struct(">i")
_EPOCH_END: Final = struct.Struct(">iqB")  # epoch, end offset, no tags
_LEADER: Final = struct.Struct(">iiB")  # leader id, leader epoch, no tags
_NODE: Final = struct.Struct(">i")
_ZERO_ID: Final = bytes(16)


@dataclass(frozen=True, slots=True)
class Partition:
    """One partition of a Fetch response, in the wire's terms."""

    index: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions_null: bool = True  # read_uncommitted: null; a refusal: empty
    records: bytes | memoryview = b""
    diverging: tuple[int, int] | None = None  # (epoch, end offset)
    current_leader: tuple[int, int] | None = None  # (leader id, leader epoch)
    preferred_read_replica: int = -1


@dataclass(frozen=True, slots=True)
class NodeEndpoint:
    node_id: int
    host: str
    port: int
    rack: str | None = None


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _compact_string(text: str | None) -> bytes:
    if text is None:
        return b"\x00"
    data = text.encode()
    return _uvarint(len(data) + 1) + data


def _partition_tags(part: Partition) -> bytes:
    tags = []
    if part.diverging is not None and part.diverging != (-1, -1):
        tags.append(b"\x00" + _uvarint(_EPOCH_END.size) + _EPOCH_END.pack(*part.diverging, 0))
    if part.current_leader is not None and part.current_leader != (-1, -1):
        tags.append(b"\x01" + _uvarint(_LEADER.size) + _LEADER.pack(*part.current_leader, 0))
    return _uvarint(len(tags)) + b"".join(tags)


def _node_endpoints(endpoints: Sequence[NodeEndpoint]) -> bytes:
    body = bytearray(_uvarint(len(endpoints) + 1))
    for node in endpoints:
        body += _NODE.pack(node.node_id)
        body += _compact_string(node.host)
        body += _INT32.pack(node.port)
        body += _compact_string(node.rack)
        body += b"\x00"
    return b"\x00" + _uvarint(len(body)) + bytes(body)


def encode(  # noqa: PLR0913  the response's fields, as Kafka names them
    version: int,
    *,
    correlation_id: int,
    error_code: int,
    session_id: int,
    topics: Sequence[tuple[uuid.UUID | str | None, Sequence[Partition]]],
    node_endpoints: Sequence[NodeEndpoint] = (),
    throttle_ms: int = 0,
) -> list[bytes | memoryview]:
    """The size-prefixed response frame as buffers (the module's guarantees)."""
    if version < FIRST_VERSION:
        raise ValueError(f"Fetch v{version} is not flexible: encode it with kio")
    pieces: list[bytes | memoryview] = [b""]  # the header, once the size is known
    head = bytearray(_uvarint(len(topics) + 1))
    for topic, partitions in topics:
        if version >= _TOPIC_IDS_FROM:  # kio reads the zero id as None, and writes None as it
            head += topic.bytes if isinstance(topic, uuid.UUID) else _ZERO_ID
        else:
            head += _compact_string(topic if isinstance(topic, str) else "")
        head += _uvarint(len(partitions) + 1)
        for part in partitions:
            head += _PARTITION.pack(
                part.index,
                part.error_code,
                part.high_watermark,
                part.last_stable_offset,
                part.log_start_offset,
            )
            head += b"\x00" if part.aborted_transactions_null else b"\x01"
            head += _INT32.pack(part.preferred_read_replica)
            head += _uvarint(len(part.records) + 1)
            if part.records:
                pieces.append(bytes(head))
                pieces.append(part.records)
                head = bytearray()
            head += _partition_tags(part)
        head += b"\x00"  # the topic's tagged fields
    if version >= _NODE_ENDPOINTS_FROM and node_endpoints:
        head += b"\x01" + _node_endpoints(node_endpoints)
    else:
        head += b"\x00"
    pieces.append(bytes(head))
    size = sum(len(p) for p in pieces) + _HEADER.size - 4
    pieces[0] = _HEADER.pack(size, correlation_id, 0, throttle_ms, error_code, session_id)
    return pieces
