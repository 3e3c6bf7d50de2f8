"""The frame codec of the controller's metadata log files, and the rule that tells a torn tail from
corruption. One definition for the writer of the files (`jbod_controller.record_log`) and every
reader of them (`jbod_pipeline.segments`).

A file is a sequence of frames `u32 length | u32 crc32(payload) | payload` (big endian). A segment's
payloads are log entries, JSON objects starting `{"offset":`; a snapshot's are not.

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
* Pure: bytes in, values out; no I/O.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

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


def frame(payload: bytes) -> bytes:
    """`payload` framed: its length, its crc32, then itself."""
    return HEADER.pack(len(payload), zlib.crc32(payload)) + payload


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


def tail_damage(data: bytes, position: int) -> str | None:
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
