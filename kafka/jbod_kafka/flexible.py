"""The primitives of Kafka's flexible message versions (KIP-482), for the hand-written codecs of the
hot paths (`fetch_request`, `fetch_response`, `produce_response`): unsigned varints, compact
strings, a response's topic (by id or by name), and the leader hints of KIP-951 that Fetch and
Produce responses carry as tagged fields (a partition's current leader, the `NodeEndpoint` list).

Guarantees: each function writes exactly what Kafka's generated serializers (and kio) write for
the same value; the codecs that use them are compared with kio byte for byte in their tests.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from jbod_core.record_structs import uvarint

_INT32: Final = struct.Struct(">i")
_LEADER: Final = struct.Struct(">iiB")  # leader id, leader epoch, no tags
#: The null topic id: kio reads it as None and writes None as it.
ZERO_TOPIC_ID: Final = bytes(16)


@dataclass(frozen=True, slots=True)
class NodeEndpoint:
    """A broker's address on the listener the request came in on (KIP-951's leader hints)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


def compact_string(text: str | None) -> bytes:
    """A compact (nullable) string: its UTF-8 length + 1 as a uvarint, 0 for null."""
    if text is None:
        return b"\x00"
    data = text.encode()
    return uvarint(len(data) + 1) + data


def topic_field(topic: uuid.UUID | str | None, *, by_id: bool) -> bytes:
    """A response's topic: its id in the versions that name topics by id (None: the zero id),
    else its compact name (None: empty)."""
    if by_id:
        return topic.bytes if isinstance(topic, uuid.UUID) else ZERO_TOPIC_ID
    return compact_string(topic if isinstance(topic, str) else "")


def leader_hint_tag(tag: int, leader: tuple[int, int] | None) -> bytes:
    """The tagged field `tag` holding a partition's current leader (leader id, leader epoch);
    empty when there is none to hint (None, or Kafka's default (-1, -1), which it never writes)."""
    if leader is None or leader == (-1, -1):
        return b""
    return uvarint(tag) + uvarint(_LEADER.size) + _LEADER.pack(*leader, 0)


def node_endpoints_tag(tag: int, endpoints: Sequence[NodeEndpoint]) -> bytes:
    """The tagged field `tag` holding `endpoints` (tag, size, then the compact array)."""
    body = bytearray(uvarint(len(endpoints) + 1))
    for node in endpoints:
        body += _INT32.pack(node.node_id)
        body += compact_string(node.host)
        body += _INT32.pack(node.port)
        body += compact_string(node.rack)
        body += b"\x00"
    return uvarint(tag) + uvarint(len(body)) + bytes(body)
