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
* `decode` is `encode`'s inverse (records as views into the frame, not copies), and reads any
  flexible Fetch response Kafka writes; bytes that are not one raise
  `MalformedFetchResponseError` and nothing else.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from jbod_core.record_structs import uvarint
from jbod_kafka import flexible

FIRST_VERSION: Final = 12
_TOPIC_IDS_FROM: Final = 13
LEADER_HINTS_FROM: Final = 16  # current_leader and node_endpoints (KIP-951)

_HEADER: Final = struct.Struct(">iiBihi")  # size, correlation id, no tags, throttle, error, session
_PARTITION: Final = struct.Struct(">ihqqq")  # index, error, high watermark, last stable, log start
_INT32: Final = struct.Struct(">i")
_EPOCH_END: Final = struct.Struct(">iqB")  # epoch, end offset, no tags
_LEADER: Final = struct.Struct(">iiB")  # leader id, leader epoch, no tags (decoded)


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
    aborted_transactions: tuple[tuple[int, int], ...] = ()  # read_committed: (producer id, first offset)
    diverging: tuple[int, int] | None = None  # (epoch, end offset)
    current_leader: tuple[int, int] | None = None  # (leader id, leader epoch)
    preferred_read_replica: int = -1


NodeEndpoint = flexible.NodeEndpoint


def _partition_tags(part: Partition) -> bytes:
    tags = []
    if part.diverging is not None and part.diverging != (-1, -1):
        tags.append(b"\x00" + uvarint(_EPOCH_END.size) + _EPOCH_END.pack(*part.diverging, 0))
    hint = flexible.leader_hint_tag(1, part.current_leader)
    if hint:
        tags.append(hint)
    return uvarint(len(tags)) + b"".join(tags)


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
    head = bytearray(uvarint(len(topics) + 1))
    for topic, partitions in topics:
        head += flexible.topic_field(topic, by_id=version >= _TOPIC_IDS_FROM)
        head += uvarint(len(partitions) + 1)
        for part in partitions:
            head += _PARTITION.pack(
                part.index,
                part.error_code,
                part.high_watermark,
                part.last_stable_offset,
                part.log_start_offset,
            )
            if part.aborted_transactions_null:
                head += b"\x00"
            else:
                head += uvarint(len(part.aborted_transactions) + 1)
                for producer_id, first_offset in part.aborted_transactions:
                    head += _ABORTED.pack(producer_id, first_offset) + b"\x00"
            head += _INT32.pack(part.preferred_read_replica)
            head += uvarint(len(part.records) + 1)
            if part.records:
                pieces.append(bytes(head))
                pieces.append(part.records)
                head = bytearray()
            head += _partition_tags(part)
        head += b"\x00"  # the topic's tagged fields
    if version >= LEADER_HINTS_FROM and node_endpoints:
        head += b"\x01" + flexible.node_endpoints_tag(0, node_endpoints)
    else:
        head += b"\x00"
    pieces.append(bytes(head))
    size = sum(len(p) for p in pieces) + _HEADER.size - 4
    pieces[0] = _HEADER.pack(size, correlation_id, 0, throttle_ms, error_code, session_id)
    return pieces


def session_of(pieces: Sequence[bytes | memoryview]) -> int:
    """The session id of a response `encode` framed."""
    return int(_HEADER.unpack_from(pieces[0])[5])


def with_throttle(pieces: list[bytes | memoryview], throttle_ms: int) -> list[bytes | memoryview]:
    """The response `encode` framed, its throttle time set to `throttle_ms` (the rest uncopied)."""
    size, correlation_id, tags, _throttle, error_code, session_id = _HEADER.unpack_from(pieces[0])
    head = _HEADER.pack(size, correlation_id, tags, throttle_ms, error_code, session_id)
    return [head + bytes(pieces[0])[_HEADER.size :], *pieces[1:]]


# -- decoding (a follower reading its leader's answer) ------------------------------------------


class MalformedFetchResponseError(ValueError):
    """Bytes that are not a Fetch response of the version asked for."""


@dataclass(frozen=True, slots=True)
class Decoded:
    """A decoded Fetch response: records are views into the frame, not copies."""

    correlation_id: int
    error_code: int
    session_id: int
    topics: list[tuple[uuid.UUID | str | None, list[Partition]]]


class _Reader:
    def __init__(self, frame: memoryview) -> None:
        self.frame = frame
        self.at = 0

    def take(self, size: int) -> memoryview:
        if size < 0 or self.at + size > len(self.frame):
            raise MalformedFetchResponseError(f"a field runs past the end of the frame at byte {self.at}")
        view = self.frame[self.at : self.at + size]
        self.at += size
        return view

    def unpack(self, layout: struct.Struct) -> tuple[int, ...]:
        return layout.unpack(self.take(layout.size))

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            (byte,) = self.take(1)
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
            if shift > 28:
                raise MalformedFetchResponseError("an unsigned varint longer than 5 bytes")

    def compact_string(self) -> str | None:
        size = self.uvarint()
        return None if size == 0 else bytes(self.take(size - 1)).decode()


_ERROR_SESSION: Final = struct.Struct(">hi")
_CORRELATION: Final = struct.Struct(">i")
_ABORTED: Final = struct.Struct(">qq")


def decode(version: int, frame: bytes | memoryview) -> Decoded:
    """The response in `frame` (without its size prefix), as `encode` writes it and Kafka does;
    `MalformedFetchResponseError` for anything else, never another exception. Aborted
    transactions are read past (a follower fetches read_uncommitted and gets none)."""
    if version < FIRST_VERSION:
        raise ValueError(f"Fetch v{version} is not flexible: decode it with kio")
    try:
        return _decode(version, _Reader(memoryview(frame)))
    except (struct.error, UnicodeDecodeError) as exc:
        raise MalformedFetchResponseError(
            f"a Fetch v{version} response that does not decode: {exc}"
        ) from None


def _decode(version: int, reader: _Reader) -> Decoded:
    (correlation_id,) = reader.unpack(_CORRELATION)
    _skip_tags(reader)
    (_throttle,) = reader.unpack(_INT32)
    error_code, session_id = reader.unpack(_ERROR_SESSION)
    topics: list[tuple[uuid.UUID | str | None, list[Partition]]] = []
    for _ in range(_count(reader)):
        topic: uuid.UUID | str | None
        if version >= _TOPIC_IDS_FROM:
            raw = bytes(reader.take(16))
            topic = None if raw == flexible.ZERO_TOPIC_ID else uuid.UUID(bytes=raw)
        else:
            topic = reader.compact_string()
        partitions = [_partition(reader) for _ in range(_count(reader))]
        _skip_tags(reader)
        topics.append((topic, partitions))
    _skip_tags(reader)
    return Decoded(correlation_id, error_code, session_id, topics)


def _count(reader: _Reader) -> int:
    size = reader.uvarint()
    if size == 0:
        raise MalformedFetchResponseError("a null array where Kafka's schema has none")
    return size - 1


def _partition(reader: _Reader) -> Partition:
    index, error_code, high_watermark, last_stable, log_start = reader.unpack(_PARTITION)
    aborted = reader.uvarint()
    aborted_transactions = []
    for _ in range(max(aborted - 1, 0)):
        aborted_transactions.append(reader.unpack(_ABORTED))  # producer id, first offset
        _skip_tags(reader)
    (preferred,) = reader.unpack(_INT32)
    size = reader.uvarint()
    records = reader.take(size - 1) if size > 0 else memoryview(b"")
    diverging = leader = None
    for _ in range(reader.uvarint()):
        tag, length = reader.uvarint(), reader.uvarint()
        body = reader.take(length)
        if tag == 0:
            epoch, end, _tags = _EPOCH_END.unpack_from(body)
            diverging = (epoch, end)
        elif tag == 1:
            leader_id, leader_epoch, _tags = _LEADER.unpack_from(body)
            leader = (leader_id, leader_epoch)
    return Partition(
        index,
        error_code,
        high_watermark,
        last_stable,
        log_start,
        aborted_transactions_null=aborted == 0,
        records=records,
        aborted_transactions=tuple((int(p), int(f)) for p, f in aborted_transactions),
        diverging=diverging,
        current_leader=leader,
        preferred_read_replica=preferred,
    )


def _skip_tags(reader: _Reader) -> None:
    for _ in range(reader.uvarint()):
        reader.uvarint()
        reader.take(reader.uvarint())
