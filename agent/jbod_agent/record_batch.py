"""Record batches: the unit a replica appends, replicates and stores (pure codec, no I/O).

Frame layout, big-endian (like Kafka's RecordBatch, simplified):

    length u32            bytes after this field
    crc u32               zlib.crc32 of every byte after this field
    base_offset i64
    record_count i32      >= 1; record i has offset base_offset + i
    leader_epoch i32
    max_timestamp_ms i64
    record_count x (key_len i32 (-1: null key) | key | value_len i32 | value)

Guarantees:
* `encode_batch` (bytes) and `encode_frame` (the same frame in a bytearray, faster) are parsed
  back by `iter_headers` / `decode_records` to the same values.
* Parsing never trusts a length: every length is checked against the bytes actually present
  before anything is sliced, so garbage input never allocates more than the input's size and
  raises nothing but `CorruptBatchError`, which says what is wrong and at which byte position.
* `iter_headers` yields only frames that are complete and valid (crc, lengths, record layout) and
  raises at the first one that is not; `scan_valid_prefix` never raises and returns the frames
  before the first damage, which is what torn-tail recovery keeps.
* Headers are frozen values; positions are byte positions in the buffer that was parsed (plus
  `position_base` where a caller parses a window of a larger file).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

_LENGTH_CRC: Final = struct.Struct(">II")
_HEADER: Final = struct.Struct(">IIqiiq")
_HEADER_AFTER_CRC: Final = struct.Struct(">qiiq")  # base_offset, record_count, leader_epoch, max_timestamp_ms
_I32: Final = struct.Struct(">i")
_U32: Final = struct.Struct(">I")

HEADER_SIZE: Final[int] = _HEADER.size  # 32
CRC_START: Final[int] = 8  # the crc covers frame[CRC_START:]
MIN_LENGTH: Final[int] = HEADER_SIZE - 4  # the smallest valid length field (no records would fit)
MIN_RECORD_SIZE: Final[int] = 8  # key_len + value_len
MAX_LENGTH: Final[int] = 0xFFFFFFFF

_NULL_KEY: Final = _I32.pack(-1)
_I64_MIN: Final = -(1 << 63)
_I64_MAX: Final = (1 << 63) - 1


class CorruptBatchError(ValueError):
    """Bytes that are not a valid frame; `position` is the byte position of the problem.

    `incomplete` is true when the data simply ends inside a frame (more bytes could complete it),
    as opposed to bytes that are wrong.
    """

    def __init__(self, message: str, *, position: int, incomplete: bool = False) -> None:
        super().__init__(message)
        self.position = position
        self.incomplete = incomplete


@dataclass(frozen=True, slots=True)
class BatchHeader:
    position: int  # byte position of the frame in the buffer it was parsed from
    size: int  # whole frame size in bytes (length + 4)
    base_offset: int
    record_count: int
    leader_epoch: int
    max_timestamp_ms: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.record_count - 1

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.record_count


def encode_batch(
    base_offset: int, leader_epoch: int, timestamp_ms: int, records: Sequence[tuple[bytes | None, bytes]]
) -> bytes:
    """One frame holding `records` ((key or None, value) pairs, at least one)."""
    parts, length = _frame_parts(base_offset, leader_epoch, timestamp_ms, records)
    crc32 = zlib.crc32
    crc = 0
    for part in parts:
        crc = crc32(part, crc)
    parts[0] = _LENGTH_CRC.pack(length, crc)
    return b"".join(parts)


def encode_frame(
    base_offset: int, leader_epoch: int, timestamp_ms: int, records: Sequence[tuple[bytes | None, bytes]]
) -> bytearray:
    """`encode_batch` into a fresh bytearray, the fastest way (the produce hot path): one
    allocation, and the crc computed in one pass over it."""
    parts, length = _frame_parts(base_offset, leader_epoch, timestamp_ms, records)
    parts[0] = bytes(CRC_START)
    frame = bytearray().join(parts)
    _LENGTH_CRC.pack_into(frame, 0, length, zlib.crc32(memoryview(frame)[CRC_START:]))
    return frame


def _frame_parts(
    base_offset: int, leader_epoch: int, timestamp_ms: int, records: Sequence[tuple[bytes | None, bytes]]
) -> tuple[list[bytes], int]:
    """The pieces of a frame after its crc (`parts[0]` is left empty for length and crc), and
    the frame's length field."""
    if not records:
        raise ValueError("A batch needs at least one record")
    try:
        after_crc = _HEADER_AFTER_CRC.pack(base_offset, len(records), leader_epoch, timestamp_ms)
    except struct.error as exc:
        raise ValueError(f"Batch header field out of range: {exc}") from None
    pack = _I32.pack
    null_key = _NULL_KEY
    parts: list[bytes] = [b"", after_crc]
    extend = parts.extend
    body_size = 0
    for key, value in records:
        value_size = len(value)
        if key is None:
            extend((null_key, pack(value_size), value))
            body_size += 8 + value_size
        else:
            key_size = len(key)
            extend((pack(key_size), key, pack(value_size), value))
            body_size += 8 + key_size + value_size
    length = HEADER_SIZE - 4 + body_size
    if length > MAX_LENGTH:
        raise ValueError(f"A batch of {body_size} bytes of records does not fit a frame")
    return parts, length


def with_base_offset(
    frame: bytes | memoryview, base_offset: int, *, leader_epoch: int | None = None
) -> bytes:
    """`frame` (exactly one frame) with its base offset (and leader epoch, when given) rewritten
    and its crc recomputed; the records are not checked (verify the frame first if untrusted)."""
    header = read_header(frame)
    if header.size != len(frame):
        raise CorruptBatchError(
            f"Expected exactly one frame of {header.size} bytes, got {len(frame)} bytes",
            position=min(header.size, len(frame)),
            incomplete=header.size > len(frame),
        )
    epoch = header.leader_epoch if leader_epoch is None else leader_epoch
    if not _I64_MIN <= base_offset <= _I64_MAX:
        raise ValueError(f"Base offset {base_offset} is out of range")
    try:
        after_crc = _HEADER_AFTER_CRC.pack(base_offset, header.record_count, epoch, header.max_timestamp_ms)
    except struct.error as exc:
        raise ValueError(f"Batch header field out of range: {exc}") from None
    body = memoryview(frame)[HEADER_SIZE:]
    crc = zlib.crc32(body, zlib.crc32(after_crc))
    return b"".join((_LENGTH_CRC.pack(header.size - 4, crc), after_crc, body))


def read_header(data: bytes | memoryview, offset: int = 0, *, position_base: int = 0) -> BatchHeader:
    """The header of the frame at `data[offset:]`, checking only what the header itself says
    (length and record count plausible); the frame's body need not be present and is not checked.

    The header's `position` is `position_base + offset`.
    """
    position = position_base + offset
    available = len(data) - offset
    if available < HEADER_SIZE:
        raise CorruptBatchError(
            f"Partial frame header at byte {position}: {max(available, 0)} of {HEADER_SIZE} bytes",
            position=position,
            incomplete=True,
        )
    length, _crc, base_offset, count, epoch, max_ts = _HEADER.unpack_from(data, offset)
    if length < MIN_LENGTH + MIN_RECORD_SIZE:
        raise CorruptBatchError(f"Bad frame length {length} at byte {position}", position=position)
    if count < 1:
        raise CorruptBatchError(f"Bad record count {count} at byte {position}", position=position)
    if count > (length - MIN_LENGTH) // MIN_RECORD_SIZE:
        raise CorruptBatchError(
            f"Record count {count} does not fit frame length {length} at byte {position}", position=position
        )
    return BatchHeader(position, length + 4, base_offset, count, epoch, max_ts)


def _check_records(data: bytes | memoryview, start: int, end: int, count: int, position_base: int) -> None:
    """Check that `count` records exactly fill `data[start + HEADER_SIZE:end]`."""
    frame = memoryview(data)[start:end]
    unpack = _I32.unpack_from
    pos = HEADER_SIZE
    index = 0
    try:
        for index in range(count):
            (size,) = unpack(frame, pos)
            if size < 0:
                if size != -1:
                    raise _bad_record(f"Bad key length {size}", index, position_base + start + pos)
                size = 0
            pos += 4 + size
            (size,) = unpack(frame, pos)
            if size < 0:
                raise _bad_record(f"Bad value length {size}", index, position_base + start + pos)
            pos += 4 + size
    except struct.error:
        raise _bad_record(
            "Overrun of the frame", index, position_base + start + min(pos, len(frame))
        ) from None
    if pos != len(frame):
        raise CorruptBatchError(
            f"Records end at byte {position_base + start + pos}, frame ends at byte {position_base + end}",
            position=position_base + start + min(pos, len(frame)),
        )


def _bad_record(problem: str, index: int, position: int) -> CorruptBatchError:
    return CorruptBatchError(f"{problem} in record {index} at byte {position}", position=position)


def _check_frame(data: bytes | memoryview, offset: int, position_base: int, verify_crc: bool) -> BatchHeader:
    header = read_header(data, offset, position_base=position_base)
    end = offset + header.size
    if end > len(data):
        raise CorruptBatchError(
            f"Partial frame at byte {header.position}: {len(data) - offset} of {header.size} bytes",
            position=header.position,
            incomplete=True,
        )
    if verify_crc:
        (stored,) = _U32.unpack_from(data, offset + 4)
        actual = zlib.crc32(memoryview(data)[offset + CRC_START : end])
        if actual != stored:
            raise CorruptBatchError(
                f"Bad crc of frame at byte {header.position}: stored {stored:#010x}, computed {actual:#010x}",
                position=header.position,
            )
        _check_records(data, offset, end, header.record_count, position_base)
    return header


def scan_frames(
    data: bytes | memoryview, *, verify_crc: bool = True, position_base: int = 0
) -> tuple[list[BatchHeader], int, CorruptBatchError | None]:
    """Every frame from the start of `data` up to the first damage: (headers, byte length of that
    valid prefix, the error at its end or None when all of `data` is valid). Never raises.

    With `verify_crc=False` only headers and lengths are checked (the crc and record layout are
    not): for bytes that were verified when they were written.
    """
    headers: list[BatchHeader] = []
    offset = 0
    size = len(data)
    while offset < size:
        try:
            header = _check_frame(data, offset, position_base, verify_crc)
        except CorruptBatchError as exc:
            return headers, offset, exc
        headers.append(header)
        offset += header.size
    return headers, offset, None


def iter_headers(data: bytes | memoryview, *, verify_crc: bool = True) -> Iterator[BatchHeader]:
    """Every frame of `data`; raises `CorruptBatchError` at the first bad crc, bad length, record
    count below 1, records not filling their frame, or trailing partial frame.

    With `verify_crc=False` the crc and record layout are not checked (headers and lengths are).
    """
    offset = 0
    size = len(data)
    while offset < size:
        header = _check_frame(data, offset, 0, verify_crc)
        yield header
        offset += header.size


def scan_valid_prefix(data: bytes | memoryview) -> tuple[list[BatchHeader], int]:
    """The frames that are whole and valid from the start of `data`, and the byte length of that
    valid prefix; never raises (torn-tail recovery keeps exactly this prefix)."""
    headers, valid_size, _error = scan_frames(data)
    return headers, valid_size


def decode_records(
    frame: bytes | memoryview, *, verify_crc: bool = True
) -> list[tuple[int, bytes | None, bytes]]:
    """(offset, key, value) of every record of `frame` (exactly one frame)."""
    data = frame if isinstance(frame, bytes) else bytes(frame)
    header = _check_frame(data, 0, 0, verify_crc)
    if header.size != len(data):
        raise CorruptBatchError(
            f"Expected exactly one frame of {header.size} bytes, got {len(data)} bytes", position=header.size
        )
    if not verify_crc:
        _check_records(data, 0, header.size, header.record_count, 0)
    unpack = _I32.unpack_from
    records: list[tuple[int, bytes | None, bytes]] = []
    append = records.append
    pos = HEADER_SIZE
    offset = header.base_offset
    for _ in range(header.record_count):
        (key_size,) = unpack(data, pos)
        pos += 4
        key: bytes | None
        if key_size < 0:
            key = None
        else:
            key = data[pos : pos + key_size]
            pos += key_size
        (value_size,) = unpack(data, pos)
        pos += 4
        append((offset, key, data[pos : pos + value_size]))
        pos += value_size
        offset += 1
    return records
