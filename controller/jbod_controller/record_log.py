"""The controller's metadata log: a small `RecordLog` interface and its file-backed implementation.

Atomicity contract (what the writer relies on):
* `append(entries)` buffers encoded records at consecutive offsets starting at `end_offset`;
  nothing is durable until `flush()` returns, and only then do `read()` callers see the entries.
* After a crash, `recover()` returns exactly the entries that were flushed, plus possibly a prefix
  of the unflushed ones, always a gap-free prefix of what was appended: a torn tail is truncated,
  never half-applied. Anything else that is damaged refuses to recover (`LogCorruptError`, naming
  the segment, the byte and the record offset) and leaves every file exactly as it was.
* Torn tail or corruption: the file codec (frames, entries, snapshot headers) and the rule that
  tells them apart are `jbod_core.frames` (`scan`, `tail_damage`, `snapshot_entries`), shared
  with the pipeline's reader of these files.
  Only the first damaged frame of the last segment can be a torn tail, and only if nothing after
  it could be an acknowledged record; a kill -9 mid-append leaves a prefix of the appended frames,
  which always passes; one flipped byte in an acknowledged frame that has frames after it never
  does. A damaged frame in an older segment is always corruption.
* `checksum_at(offset)` is the crc32 stored in the frame of a durable record (the crc32 of the
  payload `read()` returns), so a reader can check that the record it applied last is still the
  one at that offset (a log restored from a backup or cut back reuses offsets).
* A snapshot covers every record below its offset; a snapshot file is written atomically and is
  only used when its checksum verifies.

File format (`docs/decisions.md`, encoded by `jbod_core.frames`): segments `<base offset>.log`;
each frame is `u32 length | u32 crc32(payload) | payload`, payload = JSON `{"offset", "type", "data"}`.
Snapshots `<offset>.snapshot` hold the image as frames of `{"type", "data"}` after a header frame.
"""

from __future__ import annotations

import bisect
import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

from jbod_core import frames
from jbod_runtime.durable_files import fsync_directory

_HEADER: Final = frames.HEADER
_INDEX_EVERY: Final = 64
SEGMENT_BYTES: Final = 64 * 1024 * 1024
_READ_CHUNK: Final = 1024 * 1024


class LogCorruptError(RuntimeError):
    """The log is damaged somewhere other than its tail."""


class NotActiveError(RuntimeError):
    """This controller may not write the log: it lost (or never held) the election (§3.8)."""


@dataclass(slots=True)
class Snapshot:
    offset: int  # every record below this offset is in the snapshot
    entries: list[bytes]  # payloads `{"type", "data"}`


@dataclass(slots=True)
class Recovery:
    snapshot: Snapshot | None
    entries: list[bytes]  # payloads after the snapshot (or from the start), in offset order
    start_offset: int  # first offset still in the log
    truncated_bytes: int


class RecordLog(Protocol):
    """What the controller needs from a durable, ordered record log."""

    @property
    def directory(self) -> Path | str:
        """Where it lives, for messages."""

    @property
    def end_offset(self) -> int: ...

    @property
    def committed_offset(self) -> int: ...

    @property
    def start_offset(self) -> int: ...

    def recover(self) -> Recovery: ...

    def writable_now(self) -> bool:
        """True when an append may go ahead at once (cheap; called before every batch)."""

    def wait_writable(self) -> None:
        """Block until an append may go ahead; `NotActiveError` when it will not (lost the election)."""

    def append(self, entries: list[bytes]) -> None: ...

    def append_one(self, payload: bytes) -> None: ...

    def flush(self) -> None: ...

    def read(self, from_offset: int, max_records: int) -> list[bytes]: ...

    def checksum_at(self, offset: int) -> int | None: ...

    def write_snapshot(self, offset: int, entries: Iterable[bytes], *, count: int) -> None: ...

    def latest_snapshot(self) -> Snapshot | None: ...

    def delete_segments_before(self, offset: int, *, keep_bytes: int) -> int: ...

    def close(self) -> None: ...


@dataclass(slots=True)
class _Segment:
    base_offset: int
    path: Path
    fd: int
    size: int = 0
    next_offset: int = 0
    index_offsets: list[int] = field(default_factory=list)
    index_positions: list[int] = field(default_factory=list)

    def note(self, offset: int, position: int) -> None:
        if (offset - self.base_offset) % _INDEX_EVERY == 0:
            self.index_offsets.append(offset)
            self.index_positions.append(position)


def log_divergence(log: RecordLog, from_offset: int, last_checksum: int) -> str | None:
    """Why a reader at `from_offset` cannot go on with this log; None when it can.

    A reader past the end, or one whose last applied record (`from_offset - 1`, checksum
    `last_checksum`, -1 = not sent) differs from the record now at that offset, followed a log
    that has since been cut back or replaced (restored from a backup): it must start again.
    A record below the retained log cannot be checked and is taken as it is.
    """
    end = log.committed_offset
    if from_offset > end:
        return f"fromOffset {from_offset} is past the end offset {end}"
    if last_checksum < 0 or from_offset == 0:
        return None
    stored = log.checksum_at(from_offset - 1)
    if stored is None or stored == last_checksum:
        return None
    return (
        f"the record at offset {from_offset - 1} is not the one the reader applied (checksum "
        f"{stored}, not {last_checksum}): the log was cut back or replaced; end offset {end}"
    )


def page_checksum(log: RecordLog, served: list[bytes], snapshot_offset: int | None) -> int | None:
    """`lastChecksum` of a metadata page: the checksum of its last record when that is in the log.

    `served` are the log payloads of the page; a page of snapshot records only gets the checksum
    of the log record just below the snapshot's offset, if the log still holds it.
    """
    if served:
        return frames.checksum(served[-1])
    if snapshot_offset is not None:
        return log.checksum_at(snapshot_offset - 1)
    return None


class FileRecordLog:
    """`RecordLog` on local files: one process writes, fsync makes appends durable."""

    def __init__(self, directory: Path, *, segment_bytes: int = SEGMENT_BYTES) -> None:
        self.directory: Path = directory
        self.segment_bytes = segment_bytes
        self._segments: list[_Segment] = []
        self._bases: list[int] = []
        self._end = 0
        self._committed = 0
        self._pending = bytearray()
        self._pending_lengths: list[int] = []
        self._pending_last_crc = 0
        self._last_crc: tuple[int, int] | None = None  # (offset, crc) of the last durable record
        directory.mkdir(parents=True, exist_ok=True)

    # -- properties -------------------------------------------------------------------------

    @property
    def end_offset(self) -> int:
        return self._end

    @property
    def committed_offset(self) -> int:
        return self._committed

    @property
    def start_offset(self) -> int:
        return self._segments[0].base_offset if self._segments else self._end

    # -- recovery ---------------------------------------------------------------------------

    def _segment_paths(self) -> list[tuple[int, Path]]:
        found = []
        for path in self.directory.glob("*.log"):
            try:
                found.append((int(path.stem), path))
            except ValueError:
                continue
        return sorted(found)

    def _snapshot_paths(self) -> list[tuple[int, Path]]:
        found = []
        for path in self.directory.glob("*.snapshot"):
            try:
                found.append((int(path.stem), path))
            except ValueError:
                continue
        return sorted(found)

    def latest_snapshot(self) -> Snapshot | None:
        for offset, path in reversed(self._snapshot_paths()):
            snapshot = self._read_snapshot(offset, path)
            if snapshot is not None:
                return snapshot
        return None

    @staticmethod
    def _read_snapshot(offset: int, path: Path) -> Snapshot | None:
        try:
            data = path.read_bytes()
        except OSError:
            return None
        payloads = frames.snapshot_entries(data, offset=offset)
        return None if payloads is None else Snapshot(offset=offset, entries=payloads)

    def recover(self) -> Recovery:
        snapshot = self.latest_snapshot()
        paths = self._segment_paths()
        entries: list[bytes] = []
        truncated = 0
        expected: int | None = None
        try:
            for number, (base, path) in enumerate(paths):
                last = number == len(paths) - 1
                if expected is not None and base != expected:
                    raise LogCorruptError(f"segment {path} starts at {base}, expected {expected}")
                fd = os.open(path, os.O_RDWR)
                segment = _Segment(base_offset=base, path=path, fd=fd, next_offset=base)
                self._segments.append(segment)
                self._bases.append(base)
                size = os.fstat(fd).st_size
                data = os.pread(fd, size, 0) if size else b""
                keep_from = snapshot.offset if snapshot is not None else 0
                for item in frames.scan(data, entries=True):
                    if isinstance(item, frames.Damage):
                        position = item.position
                        why = "it is not the last segment" if not last else frames.tail_damage(data, position)
                        if why is not None:
                            raise LogCorruptError(
                                f"segment {path} is corrupt at byte {position} (record offset "
                                f"{segment.next_offset}): {why}; refusing to start rather than "
                                "drop acknowledged records (restore the data dir from a backup)"
                            )
                        truncated = len(data) - position
                        os.ftruncate(fd, position)
                        os.fsync(fd)
                        data = data[:position]
                        break
                    position, payload = item
                    offset = segment.next_offset
                    segment.note(offset, position)
                    if offset >= keep_from:
                        entries.append(payload)
                    segment.next_offset = offset + 1
                segment.size = len(data)
                expected = segment.next_offset
        except BaseException:
            self.close()
            raise
        self._end = expected if expected is not None else (snapshot.offset if snapshot else 0)
        if snapshot is not None and self._end < snapshot.offset:
            # The log was lost or truncated below the snapshot: continue from the snapshot.
            for segment in self._segments:
                os.close(segment.fd)
                segment.path.unlink()
            self._segments.clear()
            self._bases.clear()
            self._end = snapshot.offset
            entries = []
        if snapshot is not None and self._segments and self._segments[0].base_offset > snapshot.offset:
            raise LogCorruptError(
                f"log starts at {self._segments[0].base_offset}, after the snapshot at {snapshot.offset}"
            )
        self._committed = self._end
        return Recovery(
            snapshot=snapshot, entries=entries, start_offset=self.start_offset, truncated_bytes=truncated
        )

    # -- appends ----------------------------------------------------------------------------

    def writable_now(self) -> bool:
        """The file log's one process may always append."""
        return True

    def wait_writable(self) -> None:
        return None

    def _open_segment(self, base: int) -> _Segment:
        path = self.directory / f"{base:020d}.log"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        fsync_directory(self.directory)
        segment = _Segment(base_offset=base, path=path, fd=fd, next_offset=base)
        self._segments.append(segment)
        self._bases.append(base)
        return segment

    def append(self, entries: list[bytes]) -> None:
        """Buffer payloads at offsets end_offset, end_offset+1, ... (durable only after flush)."""
        for payload in entries:
            self.append_one(payload)

    def append_one(self, payload: bytes) -> None:
        """Buffer one payload; it is framed at once so the caller's bytes can be freed."""
        self._pending_last_crc = frames.append_frame(self._pending, payload)
        self._pending_lengths.append(_HEADER.size + len(payload))
        self._end += 1

    def flush(self) -> None:
        """Write buffered payloads and fsync; on return they are durable and readable."""
        if not self._pending_lengths:
            return
        blob, self._pending = self._pending, bytearray()
        lengths, self._pending_lengths = self._pending_lengths, []
        segment = self._segments[-1] if self._segments else None
        if segment is None or segment.size >= self.segment_bytes:
            segment = self._open_segment(self._committed)
        position = segment.size
        offset = segment.next_offset
        for length in lengths:
            segment.note(offset, position)
            position += length
            offset += 1
        view = memoryview(blob)
        written = 0
        while written < len(blob):
            written += os.pwrite(segment.fd, view[written:], segment.size + written)
        os.fsync(segment.fd)
        segment.size = position
        segment.next_offset = offset
        self._committed = offset
        self._last_crc = (offset - 1, self._pending_last_crc)

    # -- reads ------------------------------------------------------------------------------

    def read(self, from_offset: int, max_records: int) -> list[bytes]:
        """Durable payloads from `from_offset` (at most `max_records`); [] at or past the end."""
        out: list[bytes] = []
        if from_offset >= self._committed or from_offset < self.start_offset:
            return out
        number = bisect.bisect_right(self._bases, from_offset) - 1
        header_size = _HEADER.size
        while number < len(self._segments) and len(out) < max_records:
            segment = self._segments[number]
            slot = bisect.bisect_right(segment.index_offsets, from_offset) - 1
            offset = segment.index_offsets[slot]
            position = segment.index_positions[slot]
            while offset < segment.next_offset and len(out) < max_records:
                chunk = os.pread(segment.fd, min(_READ_CHUNK, segment.size - position), position)
                cursor = 0
                while (
                    cursor + header_size <= len(chunk)
                    and offset < segment.next_offset
                    and len(out) < max_records
                ):
                    length, _crc = _HEADER.unpack_from(chunk, cursor)
                    end = cursor + header_size + length
                    if end > len(chunk):
                        if cursor == 0:  # one frame larger than the chunk
                            chunk = os.pread(segment.fd, header_size + length, position)
                            end = header_size + length
                        else:
                            break
                    if offset >= from_offset:
                        out.append(chunk[cursor + header_size : end])
                    cursor = end
                    offset += 1
                position += cursor
            from_offset = offset
            number += 1
        return out

    def checksum_at(self, offset: int) -> int | None:
        """The crc32 of the durable record at `offset`; None when it is not in the retained log."""
        if not self.start_offset <= offset < self._committed:
            return None
        if self._last_crc is not None and self._last_crc[0] == offset:
            return self._last_crc[1]
        segment = self._segments[bisect.bisect_right(self._bases, offset) - 1]
        slot = bisect.bisect_right(segment.index_offsets, offset) - 1
        current = segment.index_offsets[slot]
        position = segment.index_positions[slot]
        while True:
            length, crc = _HEADER.unpack(os.pread(segment.fd, _HEADER.size, position))
            if current == offset:
                if offset == self._committed - 1:
                    self._last_crc = (offset, crc)
                return int(crc)
            position += _HEADER.size + length
            current += 1

    # -- snapshots and retention ------------------------------------------------------------

    def write_snapshot(self, offset: int, entries: Iterable[bytes], *, count: int) -> None:
        """Stream `count` entries into `<offset>.snapshot` (temp file, fsync, rename, fsync dir).

        Entries are framed and written as they come, so a snapshot of a large image never sits
        in memory whole; a count that does not match refuses the snapshot.
        """
        path = self.directory / f"{offset:020d}.snapshot"
        tmp = path.with_name(path.name + ".tmp")
        written = 0
        try:
            with open(tmp, "wb", buffering=1024 * 1024) as handle:
                handle.write(frames.frame(frames.snapshot_header(offset=offset, records=count)))
                for entry in entries:
                    handle.write(frames.frame(entry))
                    written += 1
                handle.flush()
                os.fsync(handle.fileno())
            if written != count:
                raise ValueError(f"snapshot at {offset} produced {written} records, expected {count}")
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        fsync_directory(self.directory)
        for _, old in self._snapshot_paths()[:-2]:
            old.unlink(missing_ok=True)

    def delete_segments_before(self, offset: int, *, keep_bytes: int) -> int:
        """Delete the oldest segments wholly below `offset` while the log exceeds `keep_bytes`."""
        deleted = 0
        while len(self._segments) > 1:
            total = sum(s.size for s in self._segments)
            first, second = self._segments[0], self._segments[1]
            if total <= keep_bytes or second.base_offset > offset:
                break
            os.close(first.fd)
            first.path.unlink(missing_ok=True)
            self._segments.pop(0)
            self._bases.pop(0)
            deleted += 1
        return deleted

    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def close(self) -> None:
        for segment in self._segments:
            with contextlib.suppress(OSError):
                os.close(segment.fd)
        self._segments.clear()
        self._bases.clear()
