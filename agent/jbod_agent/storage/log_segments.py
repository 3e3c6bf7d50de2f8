"""The segment files of one replica's log: their format, their sparse offset index, their recovery.

Files in the replica dir (`local_log` keeps them as one log; this module one segment at a time):
* `{base_offset:020d}.log`: concatenated Kafka RecordBatch v2 batches (`jbod_kafka.record_batch`),
  offsets contiguous within the segment (a segment in jbod's legacy frames is refused:
  `log_format`);
* `{base_offset:020d}.index`: sparse entries (relative offset u32, byte position u32), big-endian,
  one for the first batch of the segment and then one each time `index.interval.bytes` or more
  were appended since the last entry. It is derived data: checked and rebuilt on load when needed.

Guarantees:
* `load_segment` of the last segment keeps every whole, valid batch up to the first damage and cuts
  the rest (logged at WARNING with the bytes dropped). Damage in an older segment, or a batch with
  an unexpected offset in any segment, raises `CorruptBatchError` naming the file: data in the
  middle of a log is never dropped silently.
* An index file is adopted only when it is plausible for its segment (entries increasing, inside
  the file, the last one pointing at the batch with the right offset, the batches after it whole
  and contiguous); otherwise it is rebuilt from the batches and replaced atomically. A loaded
  segment's in-memory index (`Segment.index_offsets` / `index_positions`) is the truth; the
  file is made to match it before the segment is appended to (`sync_index_file`).
* `Segment.size` and `Segment.next_offset` count only batches known whole and valid: what a
  failed write may have left after `size` is not part of the segment.
* Positions and relative offsets fit the index's u32: a segment is at most `MAX_SEGMENT_BYTES`
  and rolls before a relative offset would pass `MAX_RELATIVE_OFFSET` (`LocalLog` rolls).
* Reads never go past the segment's acknowledged end; OSErrors propagate untouched.
"""

from __future__ import annotations

import bisect
import ctypes
import logging
import operator
import os
import re
import struct
import sys
from array import array
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Final

from jbod_kafka import record_batch
from jbod_kafka.record_batch import HEADER_SIZE, LOG_OVERHEAD, BatchHeader, CorruptBatchError
from jbod_runtime import durable_files

log = logging.getLogger("jbod_agent.log_segments")

MAX_SEGMENT_BYTES: Final = (1 << 31) - 1  # positions must fit the index's u32
MAX_RELATIVE_OFFSET: Final = 0xFFFFFFFF
LOG_NAME: Final = re.compile(r"(\d{20})\.log")
INDEX_NAME: Final = re.compile(r"(\d{20})\.index")
INDEX_ENTRY: Final = struct.Struct(">II")
RECOVERY_CHUNK: Final = 1 << 20  # bytes read at a time when scanning a whole segment
NO_TIMESTAMP: Final = -(1 << 63)
OPEN_READ: Final = os.O_RDONLY | os.O_CLOEXEC
OPEN_APPEND: Final = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
_WALK_CHUNK: Final = 16 << 10  # bytes read at a time when walking headers from an index entry
if array("I").itemsize != 4:  # pragma: no cover - every platform we run on
    raise ImportError("array typecode 'I' is not 4 bytes here")


def index_path(directory: Path, base_offset: int) -> Path:
    return directory / f"{base_offset:020d}.index"


class Segment:
    """In-memory state of one segment; `size` and `next_offset` count only acknowledged frames."""

    __slots__ = (
        "base_offset",
        "bytes_since_index",
        "first_timestamp_ms",
        "index_file_ok",
        "index_offsets",
        "index_path",
        "index_positions",
        "log_path",
        "max_timestamp_ms",
        "next_offset",
        "size",
    )

    def __init__(self, directory: Path, base_offset: int) -> None:
        self.base_offset = base_offset
        self.next_offset = base_offset
        self.size = 0
        self.max_timestamp_ms: int | None = NO_TIMESTAMP  # None: not known yet (computed on demand)
        self.first_timestamp_ms: int | None = None  # its first batch's max timestamp, once read
        self.index_offsets: array[int] = array("I")
        self.index_positions: array[int] = array("I")
        self.bytes_since_index = 0
        self.index_file_ok = True  # False after a failed index write: rewritten before the next one
        self.log_path = directory / f"{base_offset:020d}.log"
        self.index_path = index_path(directory, base_offset)

    def set_index(self, headers: Sequence[BatchHeader], interval: int) -> None:
        offsets: array[int] = array("I")
        positions: array[int] = array("I")
        since = 0
        for header in headers:
            if not offsets or since >= interval:
                offsets.append(header.base_offset - self.base_offset)
                positions.append(header.position)
                since = 0
            since += header.size
        self.index_offsets, self.index_positions, self.bytes_since_index = offsets, positions, since

    def index_bytes(self) -> bytes:
        return index_bytes(self.index_offsets, self.index_positions)

    def add_index_entries(self, entries: Iterable[tuple[int, int]]) -> None:
        for relative_offset, position in entries:
            self.index_offsets.append(relative_offset)
            self.index_positions.append(position)

    def cut(self, position: int, next_offset: int) -> int:
        """Forget everything from byte `position` on (the batch there starts at `next_offset`), in
        memory only; the number of index entries kept."""
        kept = bisect.bisect_left(self.index_positions, position)
        del self.index_offsets[kept:]
        del self.index_positions[kept:]
        self.bytes_since_index = position - self.index_positions[-1] if kept else 0
        self.size = position
        self.next_offset = next_offset
        self.max_timestamp_ms = None if position else NO_TIMESTAMP
        return kept

    def read_frames(
        self, fd: int, position: int, budget: int, limit: int, *, must_return: bool
    ) -> tuple[bytes, bool]:
        """Whole frames of this segment (read through `fd`) from `position` within `budget` bytes
        and below offset `limit` (the first one regardless of the budget when `must_return`); and
        whether reading must stop here (rather than go on in the next segment)."""
        want = min(self.size - position, max(budget, 0))
        buffer = os.pread(fd, want, position) if want > 0 else b""
        used = 0
        stopped = False
        while used + HEADER_SIZE <= len(buffer):
            header = record_batch.read_header(buffer, used, position_base=position)
            if header.base_offset >= limit:
                stopped = True
                break
            if used + header.size > len(buffer):
                break
            used += header.size
        if used == 0:
            if stopped or not must_return:
                return b"", True
            header = record_batch.read_header(os.pread(fd, HEADER_SIZE, position), position_base=position)
            if header.base_offset >= limit:
                return b"", True
            return os.pread(fd, header.size, position), True
        if used < len(buffer):
            return buffer[:used], True
        return buffer, stopped or position + used < self.size

    def relocate(self, directory: Path) -> None:
        self.log_path = directory / self.log_path.name
        self.index_path = directory / self.index_path.name


# -- the index byte format -----------------------------------------------------------------------


def index_bytes(offsets: array[int], positions: array[int]) -> bytes:
    entries: array[int] = array("I", bytes(8 * len(offsets)))
    entries[0::2] = offsets
    entries[1::2] = positions
    if sys.byteorder == "little":
        entries.byteswap()
    return entries.tobytes()


def encode_index_entries(entries: Iterable[tuple[int, int]]) -> bytes:
    return b"".join(INDEX_ENTRY.pack(relative_offset, position) for relative_offset, position in entries)


def parse_index(data: bytes, log_size: int) -> tuple[array[int], array[int]] | None:
    """The entries of an index file, or None when they are not plausible for a log of `log_size`."""
    if not data or len(data) % 8:
        return None
    entries: array[int] = array("I")
    entries.frombytes(data)
    if sys.byteorder == "little":
        entries.byteswap()
    offsets, positions = entries[0::2], entries[1::2]
    if offsets[0] != 0 or positions[0] != 0 or positions[-1] >= log_size:
        return None
    if not all(map(operator.lt, offsets, offsets[1:])) or not all(map(operator.lt, positions, positions[1:])):
        return None
    return offsets, positions


def sync_index_file(segment: Segment, index_fd: int) -> None:
    """Make the index file open at `index_fd` (O_APPEND) match `segment`'s in-memory index."""
    expected = INDEX_ENTRY.size * len(segment.index_offsets)
    actual = os.fstat(index_fd).st_size
    if actual != expected or not segment.index_file_ok:
        if segment.index_file_ok and actual > expected:
            os.ftruncate(index_fd, expected)  # entries past a truncation
        else:
            os.ftruncate(index_fd, 0)
            write_all(index_fd, segment.index_bytes())
        segment.index_file_ok = True


# -- reading batch headers -----------------------------------------------------------------------


def scan_file(
    fd: int, start: int, end: int, *, verify_crc: bool
) -> tuple[list[BatchHeader], int, CorruptBatchError | None]:
    """`record_batch.scan_frames` over the file bytes [start, end), read in chunks: the frames up to
    the first damage (absolute positions), the file position where the valid part ends, and the
    error there (None when all is valid). Reads never go past `end`."""
    headers: list[BatchHeader] = []
    pos = start
    want = RECOVERY_CHUNK
    while pos < end:
        chunk = os.pread(fd, min(want, end - pos), pos)
        if not chunk:
            return headers, pos, CorruptBatchError(f"File ends at byte {pos}", position=pos, incomplete=True)
        found, valid, error = record_batch.scan_frames(chunk, verify_crc=verify_crc, position_base=pos)
        headers.extend(found)
        if error is None:
            pos += valid
            want = RECOVERY_CHUNK
            continue
        if not error.incomplete or pos + len(chunk) >= end:
            return headers, pos + valid, error
        # The frame at `valid` continues after this chunk: read again from its start, whole.
        needed = HEADER_SIZE
        if len(chunk) - valid >= LOG_OVERHEAD:
            batch_length = int.from_bytes(chunk[valid + 8 : valid + LOG_OVERHEAD], "big", signed=True)
            needed = max(needed, batch_length + LOG_OVERHEAD)
        pos += valid
        if pos + needed > end:
            return headers, pos, error  # torn: the file ends inside this frame
        want = max(RECOVERY_CHUNK, needed)
    return headers, pos, None


def walk_headers(fd: int, start: int, end: int, chunk_size: int = _WALK_CHUNK) -> Iterator[BatchHeader]:
    """Headers of the frames in the file bytes [start, end) (already verified data: no crc)."""
    buffer = b""
    buffer_pos = start
    pos = start
    while pos < end:
        local = pos - buffer_pos
        if local + HEADER_SIZE > len(buffer):
            buffer = os.pread(fd, min(chunk_size, end - pos), pos)
            buffer_pos = pos
            local = 0
        header = record_batch.read_header(buffer, local, position_base=buffer_pos)
        if pos + header.size > end:
            raise CorruptBatchError(f"Frame at byte {pos} overruns the segment end {end}", position=pos)
        yield header
        pos += header.size


def locate(segment: Segment, fd: int, offset: int) -> BatchHeader:
    """The header of the frame of `segment` (read through `fd`) holding `offset`, found through the
    index; `CorruptBatchError` when the index entry does not point at the offset it names."""
    entry = bisect.bisect_right(segment.index_offsets, offset - segment.base_offset) - 1
    expected = segment.base_offset + segment.index_offsets[entry]
    checked = False
    for header in walk_headers(fd, segment.index_positions[entry], segment.size):
        if not checked:
            if header.base_offset != expected:
                raise CorruptBatchError(
                    f"{segment.index_path}: entry {entry} points at byte {header.position} holding offset "
                    f"{header.base_offset}, expected {expected}",
                    position=header.position,
                )
            checked = True
        if header.next_offset > offset:
            return header
    raise CorruptBatchError(f"{segment.log_path}: offset {offset} not found", position=segment.size)


def batch_epochs(segments: Iterable[Segment]) -> Iterator[tuple[int, int]]:
    """(leader epoch, base offset) of every batch of `segments`, in order (one small read each)."""
    for segment in segments:
        fd = os.open(segment.log_path, OPEN_READ)
        try:
            position = 0
            while position < segment.size:
                header = record_batch.read_header(os.pread(fd, HEADER_SIZE, position))
                yield header.leader_epoch, header.base_offset
                position += header.size
        finally:
            os.close(fd)


def check_contiguous(path: Path, headers: Sequence[BatchHeader], expected: int) -> None:
    for header in headers:
        if header.base_offset != expected:
            raise CorruptBatchError(
                f"{path}: frame at byte {header.position} has base offset {header.base_offset}, "
                f"expected {expected}",
                position=header.position,
            )
        expected = header.next_offset


_FALLOC_FL_KEEP_SIZE: Final = 0x01
_libc: ctypes.CDLL | None = None


def reserve_blocks(fd: int, length: int) -> bool:
    """Reserve `length` bytes of disk blocks for the file at `fd` without changing its size
    (Linux `fallocate(FALLOC_FL_KEEP_SIZE)`: what `preallocate` asks, with a file whose size is
    still its data); False where the filesystem cannot (nothing changed then)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    result: int = _libc.fallocate(
        ctypes.c_int(fd), ctypes.c_int(_FALLOC_FL_KEEP_SIZE), ctypes.c_int64(0), ctypes.c_int64(length)
    )
    return result == 0


def write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    written = 0
    while written < len(view):
        count = os.write(fd, view[written:])
        if count <= 0:
            raise OSError(f"write returned {count}")
        written += count


# -- loading and recovery ------------------------------------------------------------------------


def load_segment(directory: Path, base_offset: int, *, last: bool, interval: int) -> tuple[Segment, int]:
    """The recovered segment and the leader epoch of its last batch (-1 when it has none)."""
    segment = Segment(directory, base_offset)
    fd = os.open(segment.log_path, OPEN_READ)
    try:
        size = os.fstat(fd).st_size
        tail: Sequence[BatchHeader] | None
        if last:
            tail = recover_last_segment(segment, fd, size, interval)
        else:
            tail = load_index(segment, fd, size)
            if tail is None:
                tail = rebuild_segment(segment, fd, size, interval)
    finally:
        os.close(fd)
    return segment, tail[-1].leader_epoch if tail else -1


def recover_last_segment(segment: Segment, fd: int, size: int, interval: int) -> Sequence[BatchHeader]:
    """Keep the valid prefix of the last segment (a torn tail is cut) and rebuild its index;
    the headers of the batches kept."""
    headers, valid, error = scan_file(fd, 0, size, verify_crc=True)
    check_contiguous(segment.log_path, headers, segment.base_offset)
    if error is not None:
        log.warning(
            "Truncated torn tail of %s: dropped %d bytes from byte %d (%s)",
            segment.log_path,
            size - valid,
            valid,
            error,
        )
        os.truncate(segment.log_path, valid)
    _set_scanned(segment, headers, valid, interval)
    expected = segment.index_bytes()
    try:
        current = segment.index_path.read_bytes()
    except FileNotFoundError:
        current = None
    if current != expected and (current is not None or expected):
        durable_files.replace_atomically(segment.index_path, expected)
    return headers


def _set_scanned(segment: Segment, headers: Sequence[BatchHeader], size: int, interval: int) -> None:
    segment.size = size
    segment.next_offset = headers[-1].next_offset if headers else segment.base_offset
    segment.max_timestamp_ms = max((h.max_timestamp_ms for h in headers), default=NO_TIMESTAMP)
    segment.set_index(headers, interval)


def load_index(segment: Segment, fd: int, size: int) -> Sequence[BatchHeader] | None:
    """Adopt an older segment's index file when it is consistent with the segment: entries
    increasing, within the file, the last one pointing at a frame with the right offset, and the
    frames from there to the end valid and contiguous. The headers of those frames, or None when
    the index must be rebuilt."""
    try:
        entries = parse_index(segment.index_path.read_bytes(), size)
    except FileNotFoundError:
        entries = None
    if entries is None:
        return None
    offsets, positions = entries
    headers, _valid, error = scan_file(fd, positions[-1], size, verify_crc=True)
    if error is not None or not headers:
        return None
    try:
        check_contiguous(segment.log_path, headers, segment.base_offset + offsets[-1])
        if positions[-1] != 0:
            first = record_batch.read_header(os.pread(fd, HEADER_SIZE, 0))
            if first.base_offset != segment.base_offset:
                return None
    except CorruptBatchError:
        return None
    segment.size = size
    segment.next_offset = headers[-1].next_offset
    segment.max_timestamp_ms = None  # only the tail was read
    segment.index_offsets, segment.index_positions = offsets, positions
    segment.bytes_since_index = size - positions[-1]
    return headers


def rebuild_segment(segment: Segment, fd: int, size: int, interval: int) -> Sequence[BatchHeader]:
    """Scan a whole older segment (any damage is an error: it is not a torn tail) and rewrite its
    index; the headers of its batches."""
    headers, _valid, error = scan_file(fd, 0, size, verify_crc=True)
    if error is not None:
        raise CorruptBatchError(f"{segment.log_path}: {error}", position=error.position)
    check_contiguous(segment.log_path, headers, segment.base_offset)
    _set_scanned(segment, headers, size, interval)
    log.info("Rebuilt index %s (%d entries)", segment.index_path, len(segment.index_offsets))
    durable_files.replace_atomically(segment.index_path, segment.index_bytes())
    return headers
