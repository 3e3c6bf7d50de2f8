"""jbod's own record frames, written by brokers before Kafka's RecordBatch v2 (read only).

A log of this format is never read as Kafka batches: the agent refuses to start on one
(`log_format.find_legacy`) and `jbod-storage convert-logs` rewrites it (`log_format.convert`).

Frame layout, big-endian:

    length u32 | crc u32 (zlib CRC-32 of every byte after it) | base_offset i64 |
    record_count i32 | leader_epoch i32 | max_timestamp_ms i64 |
    record_count x (key_len i32 (-1: null key) | key | value_len i32 | value)

Guarantees:
* `looks_legacy(head)` is true for the first bytes of a segment written in this layout, damaged
  or not, and never for a Kafka batch (magic 2 at byte 16, where a legacy frame holds the high
  byte of its record count).
* `read_frames(data)` yields every frame of `data` and raises `ValueError` naming the byte
  position at the first damaged or partial one: nothing is skipped silently.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

_HEADER: Final = struct.Struct(">IIqiiq")
_I32: Final = struct.Struct(">i")
HEADER_SIZE: Final[int] = _HEADER.size  # 32


@dataclass(frozen=True, slots=True)
class LegacyFrame:
    position: int
    size: int
    base_offset: int
    leader_epoch: int
    max_timestamp_ms: int
    records: tuple[tuple[bytes | None, bytes], ...]


def looks_legacy(head: bytes) -> bool:
    """Whether `head` (the first bytes of a segment, at least 32) starts like a legacy frame: a
    plausible length and record count, and no Kafka magic byte. Damage past the header is found
    by `read_frames`, not here."""
    if len(head) < HEADER_SIZE or head[16] == 2:
        return False
    length, _crc, _base, count, _epoch, _ts = _HEADER.unpack_from(head)
    return bool(length >= HEADER_SIZE - 4 + 8 and 1 <= count <= (length - (HEADER_SIZE - 4)) // 8)


def read_frames(data: bytes) -> Iterator[LegacyFrame]:
    """Every frame of `data` (the module's guarantee)."""
    pos = 0
    while pos < len(data):
        if len(data) - pos < HEADER_SIZE:
            raise ValueError(f"Partial legacy frame header at byte {pos}")
        length, crc, base_offset, count, epoch, max_ts = _HEADER.unpack_from(data, pos)
        end = pos + length + 4
        if length < HEADER_SIZE - 4 + 8 or count < 1 or end > len(data):
            raise ValueError(f"Bad or partial legacy frame at byte {pos} (length {length}, {count} records)")
        if zlib.crc32(memoryview(data)[pos + 8 : end]) != crc:
            raise ValueError(f"Bad CRC of the legacy frame at byte {pos}")
        records: list[tuple[bytes | None, bytes]] = []
        cursor = pos + HEADER_SIZE
        for index in range(count):
            key: bytes | None = None
            key_len, value_len = -1, -1
            try:
                (key_len,) = _I32.unpack_from(data, cursor)
                cursor += 4
                if key_len >= 0:
                    key = data[cursor : cursor + key_len]
                    cursor += key_len
                (value_len,) = _I32.unpack_from(data, cursor)
                cursor += 4
            except struct.error:
                raise ValueError(f"Record {index} overruns the legacy frame at byte {pos}") from None
            if key_len < -1 or value_len < 0 or cursor + value_len > end:
                raise ValueError(f"Bad record {index} in the legacy frame at byte {pos}")
            records.append((key, data[cursor : cursor + value_len]))
            cursor += value_len
        if cursor != end:
            raise ValueError(f"The records of the legacy frame at byte {pos} do not fill it")
        yield LegacyFrame(pos, length + 4, base_offset, epoch, max_ts, tuple(records))
        pos = end
