"""The codec of the controller's metadata log files — frames, log entries, snapshot headers and
entries — and the rule that tells a torn tail from corruption. The one definition for the writer of
the files (`jbod_controller.record_log`, `jbod_controller.service`), the metadata API that serves
them (`jbod_controller.http_api`) and every reader of them (`jbod_pipeline.segments`).

A file is a sequence of frames `u32 length | u32 crc32(payload) | payload` (big endian). A segment's
payloads are log entries `{"offset", "type", "data"}` (`encode_entry`; JSON starting
`{"offset":`). A snapshot `<S>.snapshot` is a header frame `{"offset": S, "records": n}`
(`snapshot_header`) and then n frames of snapshot entries `{"type", "data"}`
(`encode_snapshot_entry`), served as log entries of offset `S - 1` (`log_entry_prefix`).

Guarantees:
* `scan(data, entries=...)` yields `(position, payload)` for each intact frame in order, then, if a
  frame is damaged, one `Damage` naming its 1-based number, byte position and reason, and nothing
  after it (nothing after a damaged frame can be framed). A frame is damaged when its header is
  cut short, its length is over `MAX_FRAME_BYTES` or runs past the end of `data`, its checksum does
  not match, or (with `entries`) its payload is not a log entry.
* `tail_damage(data, position)` says why the damaged frame at `position` of a log's *last* segment
  is corruption, or None when it is a torn tail — what one interrupted append can leave: no intact
  entry frame starts anywhere after it (looked for at every `{"offset":` after it), and what
  follows could be the rest of one interrupted write: it runs to the end of `data` (a cut frame,
  or a whole last frame whose checksum or payload is bad), or the bytes after its declared end are
  all zero (blocks allocated but never written), or, when its length field is itself garbage,
  fewer bytes than one frame can hold follow. A damaged frame in any other segment is always
  corruption.
* `snapshot_entries(data, offset=S)` / `snapshot_count` accept a snapshot only when every frame is
  intact and its header says `{"offset": S, "records": <the number of entries>}` (None otherwise);
  an intact header that is not a JSON object raises `ValueError` (no interrupted write leaves one).
* `encode_entry` / `decode_entry` and `encode_snapshot_entry` / `decode_snapshot_entry`
  round-trip; a log entry of offset o starts with `log_entry_prefix(o)`, and a snapshot entry with
  its opening `{` replaced by `log_entry_prefix(o)` is the log entry of offset o of the same record.
* Pure: bytes in, values out; no I/O.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

HEADER: Final = struct.Struct(">II")
#: The longest payload a frame may declare; a longer length is a damaged header.
MAX_FRAME_BYTES: Final = 64 * 1024 * 1024
#: How every segment payload starts (`{"offset": …, "type": …, "data": …}`).
ENTRY_PREFIX: Final = b'{"offset":'


@dataclass(frozen=True, slots=True)
class Damage:
    """The first damaged frame of a file."""

    frame: int  # 1-based frame number
    position: int  # byte position of its header
    reason: str


def checksum(payload: bytes) -> int:
    """The checksum a frame stores for `payload`: its crc32."""
    return zlib.crc32(payload)


def frame(payload: bytes) -> bytes:
    """`payload` framed: its length, its crc32, then itself."""
    return HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def append_frame(buffer: bytearray, payload: bytes) -> int:
    """Append `payload` framed to `buffer` (as `frame`, without the copy); returns its checksum."""
    crc = zlib.crc32(payload)
    buffer.extend(HEADER.pack(len(payload), crc))
    buffer.extend(payload)
    return crc


def scan(data: bytes, *, entries: bool) -> Iterator[tuple[int, bytes] | Damage]:
    """`(position, payload)` of each intact frame of `data`, then a `Damage` if a frame is damaged.
    `entries`: a payload must also start like a log entry."""
    position = 0
    number = 0
    size = len(data)
    header = HEADER.size
    while position < size:
        number += 1
        if position + header > size:
            yield Damage(number, position, "frame header cut short")
            return
        length, crc = HEADER.unpack_from(data, position)
        end = position + header + length
        if length > MAX_FRAME_BYTES:
            yield Damage(number, position, f"frame length {length} over the {MAX_FRAME_BYTES}-byte limit")
            return
        if end > size:
            yield Damage(number, position, f"frame of {length} bytes runs past the end of the file")
            return
        payload = data[position + header : end]
        if zlib.crc32(payload) != crc:
            yield Damage(number, position, "CRC mismatch")
            return
        if entries and not payload.startswith(ENTRY_PREFIX):
            yield Damage(number, position, "payload is not a log entry")
            return
        yield position, payload
        position = end


def iter_frames(data: bytes, *, entries: bool) -> Iterator[bytes | Damage]:
    """`scan` without the positions: the payloads, then a `Damage` if a frame is damaged."""
    for item in scan(data, entries=entries):
        yield item if isinstance(item, Damage) else item[1]


def find_damage(data: bytes, *, entries: bool) -> Damage | None:
    """The first damaged frame of `data`, if any."""
    for item in scan(data, entries=entries):
        if isinstance(item, Damage):
            return item
    return None


def intact_entry_after(data: bytes, position: int) -> int | None:
    """The position of the first intact entry frame that starts after `position`, if any."""
    header = HEADER.size
    size = len(data)
    search = position + 1 + header
    while True:
        found = data.find(ENTRY_PREFIX, search)
        if found < 0:
            return None
        start = found - header
        length, crc = HEADER.unpack_from(data, start)
        end = found + length
        if length <= MAX_FRAME_BYTES and end <= size and zlib.crc32(data[found:end]) == crc:
            return start
        search = found + 1


def tail_damage(data: bytes, position: int) -> str | None:  # noqa: PLR0911  a return per case of the torn-tail rule (module docstring)
    """Why the damaged frame at `position` of a last segment is corruption; None if it is a torn
    tail (the rule in the module docstring)."""
    following = intact_entry_after(data, position)
    if following is not None:
        return f"an intact record frame follows at byte {following}"
    size = len(data)
    header = HEADER.size
    if position + header > size:
        return None  # a cut header
    length, _crc = HEADER.unpack_from(data, position)
    if length > MAX_FRAME_BYTES:
        if size - position <= header + MAX_FRAME_BYTES:
            return None  # a garbage length with less than one frame after it
        return f"{size - position} bytes follow a frame header with an impossible length {length}"
    end = position + header + length
    if end >= size:
        return None  # a cut frame, or a whole last frame whose checksum or payload is bad
    if not any(data[end:]):
        return None  # zero-filled blocks after the last frame
    return f"{size - end} more bytes follow the damaged frame"


# -- log entries and snapshots -------------------------------------------------------------------


def encode_entry(offset: int, record_type: str, data: Mapping[str, Any]) -> bytes:
    """The log entry of a record at `offset`: `{"offset", "type", "data"}` (one line of an export)."""
    return orjson.dumps({"offset": offset, "type": record_type, "data": data})


def decode_entry(payload: bytes) -> tuple[int, str, Any]:
    """`(offset, type, data)` of a log entry. Checks only the JSON and the three keys (`KeyError`);
    the record itself is `jbod_core.records.decode`'s to check."""
    entry = orjson.loads(payload)
    return entry["offset"], entry["type"], entry["data"]


def encode_snapshot_entry(record_type: str, data: Mapping[str, Any]) -> bytes:
    """A snapshot entry: `{"type", "data"}` (the record without an offset)."""
    return orjson.dumps({"type": record_type, "data": data})


def decode_snapshot_entry(payload: bytes) -> tuple[str, Any]:
    """`(type, data)` of a snapshot entry (checked as `decode_entry` checks)."""
    entry = orjson.loads(payload)
    return entry["type"], entry["data"]


def log_entry_prefix(offset: int) -> bytes:
    """How the log entry of `offset` starts: `{"offset":<offset>,`. In place of a snapshot entry's
    opening `{` it makes the log entry the metadata API serves for it (offset = snapshot's - 1)."""
    return b'{"offset":%d,' % offset


def snapshot_header(*, offset: int, records: int) -> bytes:
    """The payload of a snapshot's first frame: the snapshot's offset and its number of entries."""
    return orjson.dumps({"offset": offset, "records": records})


def _header_matches(payload: bytes, *, offset: int, records: int) -> bool:
    header = orjson.loads(payload)
    if not isinstance(header, dict):
        raise ValueError(f"the snapshot header is not a JSON object: {payload[:64]!r}")
    return header.get("offset") == offset and header.get("records") == records


def snapshot_entries(data: bytes, *, offset: int) -> list[bytes] | None:
    """The entries of the snapshot file `data` taken at `offset`, or None unless every frame is
    intact and the header frame says `{"offset": offset, "records": <the entry count>}`.
    `ValueError` for an intact header that is not a JSON object."""
    payloads: list[bytes] = []
    for item in scan(data, entries=False):
        if isinstance(item, Damage):
            return None
        payloads.append(item[1])
    if not payloads or not _header_matches(payloads[0], offset=offset, records=len(payloads) - 1):
        return None
    del payloads[0]
    return payloads


def snapshot_count(data: bytes, *, offset: int) -> int | None:
    """The number of entries of the snapshot file `data` taken at `offset` when `snapshot_entries`
    would accept it, else None (without keeping the entries). `ValueError` as there."""
    header: bytes | None = None
    count = -1
    for item in iter_frames(data, entries=False):
        if isinstance(item, Damage):
            return None
        if header is None:
            header = item
        count += 1
    if header is None or not _header_matches(header, offset=offset, records=count):
        return None
    return count
