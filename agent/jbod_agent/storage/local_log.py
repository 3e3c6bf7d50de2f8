"""The local log of one replica: its segments as one offset range, their roll, appends and reads of
stored batches, truncation, the log start offset and the recovery of the segment list (Kafka's
`LocalLog`).

`LocalLog` keeps the segment files of the replica dir `<logdir>/<topic>-<partition>/` and their
sparse offset indexes (`log_segments`: one segment's format and recovery). Offsets are contiguous
across segments; a replica dir without segments is an empty log starting at 0. What the offsets
mean to replication (leader epochs, the high watermark, retention) is `partition_log`'s, which
composes this log with the epoch cache.

Durability stance: appends go to the page cache (one `os.write` per segment touched); `flush`
fsyncs (the broker calls it periodically and on segment roll). Acknowledged data survives a
process kill -9 because it is in the page cache, and survives the loss of one disk because
acks=-1 waits for every ISR replica (as in Kafka). A power loss may lose what was not flushed;
recovery then cuts the torn tail.

Guarantees:
* The log start is the first segment's base offset, or above it after `advance_log_start`
  (Kafka's DeleteRecords), recorded in `log-start-offset` in the replica dir and read back by
  `recover`; a full truncation forgets it.
* `recover` recovers each segment (`log_segments.load_segment`: the torn tail of the last one is
  cut, damage anywhere else raises `CorruptBatchError` naming the file) and raises
  `CorruptBatchError` for a gap between segments: data in the middle of a log is never dropped
  silently. It deletes the leftovers of interrupted atomic writes (of segments and of the epoch
  checkpoint), of interrupted cleanings (`.cleaned` files) and the indexes of deleted segments,
  and completes an interrupted swap of a cleaned segment (`.swap`).
* Topic configs of the segments: `segment.ms` less a random share of `segment.jitter.ms` drawn
  per segment (`roll_jitter_max_ms`), `segment.index.bytes` (`max_index_entries`: a segment whose
  index is full rolls), `index.interval.bytes` (from the next entry), `preallocate` (a new
  segment's blocks reserved without changing its size, so recovery reads it as before) and
  `file.delete.delay.ms` (`delete_delay_ms`: a segment deleted by retention or DeleteRecords is
  renamed `.deleted` and removed by `purge_deleted` or `close` once the delay passed on the
  `monotonic` clock given to `recover`, the agent's; recovery removes leftovers).
* A compacted log stays contiguous: a cleaned segment (`swap_cleaned`, written by
  `log_cleaner`) covers exactly the offsets of the segments it replaces, and the swap is
  crash-safe (a kill -9 at any moment leaves either the old segments or the cleaned one).
* A replica dir without segments opens without creating a file or keeping a fd. At most the active
  segment's log and index fds are open for writing; read fds are cached for at most `MAX_READ_FDS`
  segments.
* `append` writes frames its caller validated, rolling to a new segment so that no frame is split
  and no segment passes `segment_bytes` or a relative offset the index cannot hold. Reads and
  truncations outside [log start, end offset] raise `OffsetOutOfRangeError`; `delete_old_segments`
  never deletes the active segment.
* OSErrors propagate untouched (the caller classifies them and takes the disk offline). After a
  failed write the segment is cut back to what was acknowledged before the next append. The
  active segment's index entries reach its file in batches (`write_index`: every
  `INDEX_WRITE_BATCH` entries, at roll, before a flush, at close); an OSError from writing them
  is raised after the append that triggered it succeeded, and the file is rewritten from memory
  before its next write. Recovery rebuilds an active segment's index that is behind its log.
* `flush` makes every change counted before it started durable (call `write_index` on the event
  loop first for the index entries in memory): the active segment and its index,
  the segments rolled since, the files the caller changed beside them (`mark_changed`: the epoch
  checkpoint), and the dir last when entries changed.
* Not thread-safe, except that `flush` may run in a worker thread while the event loop appends:
  it opens its own fds by path (fsync works per file on Linux) and only updates counters.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import random
import re
import time
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from jbod_agent.storage import epoch_cache, log_segments
from jbod_agent.storage.log_segments import MAX_SEGMENT_BYTES, Segment
from jbod_kafka import record_batch
from jbod_kafka.record_batch import BatchHeader, CorruptBatchError
from jbod_runtime import durable_files

MAX_READ_FDS: Final = 8  # read fds cached per log
INDEX_WRITE_BATCH: Final = 64  # index entries written to the active segment's file at once

LOG_START_FILE: Final = "log-start-offset"  # the log start a DeleteRecords moved, in the replica dir
CLEANER_CHECKPOINT: Final = "cleaner-offset"  # the first dirty offset of a compacted log
DELETED_SUFFIX: Final = ".deleted"  # a deleted segment's file kept for file.delete.delay.ms
CLEANED_SUFFIX: Final = ".cleaned"  # a cleaned segment being written: dropped by recovery
SWAP_SUFFIX: Final = ".swap"  # a cleaned segment committed: recovery completes its swap
_TEMP_NAME: Final = re.compile(
    r"(?:\d{20}\.(?:log|index|txnindex)|"
    + re.escape(epoch_cache.EPOCH_CHECKPOINT)
    + "|"
    + re.escape(LOG_START_FILE)
    + "|"
    + re.escape(CLEANER_CHECKPOINT)
    + r")\.tmp|\d{20}\.(?:log|index)\.(?:cleaned|deleted)"
)
_SWAP_NAME: Final = re.compile(r"(\d{20})\.log\.swap")


@dataclass(frozen=True, slots=True)
class CleanedSegment:
    """A cleaned segment written beside the segments it replaces (`<base>.log.cleaned` and its
    index), fsynced: offsets [base_offset, next_offset), the same as those segments together."""

    base_offset: int
    next_offset: int
    size: int
    max_timestamp_ms: int
    index_offsets: array[int]
    index_positions: array[int]
    bytes_since_index: int

    def log_path(self, directory: Path) -> Path:
        return directory / f"{self.base_offset:020d}.log{CLEANED_SUFFIX}"

    def index_path(self, directory: Path) -> Path:
        return directory / f"{self.base_offset:020d}.index{CLEANED_SUFFIX}"


class OffsetOutOfRangeError(ValueError):
    """An offset outside [log_start_offset, end_offset]."""


def _fsync_path(path: Path) -> None:
    """fsync `path` (a file or a dir) through a fd of our own; a file deleted meanwhile has
    nothing left to make durable."""
    try:
        fd = os.open(path, log_segments.OPEN_READ)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_log_start(path: Path) -> int | None:
    """The log start a DeleteRecords recorded in the replica dir, or None (none, or unreadable:
    the first segment's base offset stands)."""
    try:
        text = (path / LOG_START_FILE).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):  # FileNotFoundError included
        return None
    return int(text) if text.isdigit() else None


def _scan_replica_dir(path: Path) -> list[int]:
    """The base offsets of the segments in `path`, ascending; deletes the leftovers of interrupted
    atomic writes and full truncations, and the indexes of deleted segments."""
    bases: list[int] = []
    index_bases: set[int] = set()
    for name in sorted(os.listdir(path)):
        if match := _SWAP_NAME.fullmatch(name):
            _complete_swap(path, int(match[1]))
    for name in os.listdir(path):
        if match := log_segments.LOG_NAME.fullmatch(name):
            bases.append(int(match[1]))
        elif match := log_segments.INDEX_NAME.fullmatch(name):
            index_bases.add(int(match[1]))
        elif _TEMP_NAME.fullmatch(name):
            os.unlink(path / name)  # an interrupted atomic write or full truncation
    bases.sort()
    for base in sorted(index_bases.difference(bases)):
        os.unlink(log_segments.index_path(path, base))  # its segment was deleted
    return bases


def read_cleaner_checkpoint(path: Path) -> tuple[int, int | None]:
    """The log cleaner's first dirty offset and the time a tombstone it kept may go, recorded in
    the replica dir `path` ((0, None): none, or unreadable: the whole log counts as dirty)."""
    try:
        fields = (path / CLEANER_CHECKPOINT).read_text(encoding="ascii").split()
    except (OSError, UnicodeDecodeError):
        return 0, None
    if not fields or not all(field.isdigit() for field in fields):
        return 0, None
    return int(fields[0]), int(fields[1]) if len(fields) > 1 else None


def write_cleaner_checkpoint(path: Path, first_dirty: int, tombstones_due_ms: int | None) -> None:
    """Record the cleaner's first dirty offset and when a kept tombstone may go (derived data:
    atomic, not fsynced; losing it costs one more cleaning)."""
    due = "" if tombstones_due_ms is None else f" {tombstones_due_ms}"
    durable_files.replace_atomically(path / CLEANER_CHECKPOINT, f"{first_dirty}{due}\n".encode())


def _complete_swap(path: Path, base: int) -> None:
    """Finish a cleaned segment's swap that a crash interrupted: the swap file replaces every
    segment in its offset range (its name was written only once it was whole and synced)."""
    swap = path / f"{base:020d}.log{SWAP_SUFFIX}"
    fd = os.open(swap, log_segments.OPEN_READ)
    try:
        end = base
        for header in log_segments.walk_headers(fd, 0, os.fstat(fd).st_size, log_segments.RECOVERY_CHUNK):
            end = header.next_offset
    finally:
        os.close(fd)
    for name in os.listdir(path):
        match = log_segments.LOG_NAME.fullmatch(name)
        if match and base <= int(match[1]) < end:
            os.unlink(path / name)
            log_segments.index_path(path, int(match[1])).unlink(missing_ok=True)
    os.replace(swap, path / f"{base:020d}.log")


class LocalLog:
    """The segments of one replica dir (see the module docstring); build it with `LocalLog.recover`."""

    def __init__(
        self,
        path: Path,
        segments: list[Segment],
        *,
        segment_bytes: int,
        index_interval_bytes: int,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._path = path
        self._monotonic = monotonic  # the agent's clock (`Clock.monotonic`): the delete delay
        self._segments = segments
        self._bases = [segment.base_offset for segment in segments]
        self._segment_bytes = segment_bytes
        self._index_interval = index_interval_bytes
        # segment.ms: an append given the time rolls a non-empty active segment whose first
        # batch's timestamp is older than this (Kafka's time-based roll); None: size only.
        self.roll_ms: int | None = None
        # segment.jitter.ms: each segment rolls by time up to this much earlier (a random share,
        # drawn when it is created), so segments of many logs do not roll together.
        self.roll_jitter_max_ms = 0
        self._roll_jitter_ms = 0
        # segment.index.bytes: a segment whose index holds this many entries rolls (None: never).
        self.max_index_entries: int | None = None
        # preallocate: a new segment's blocks are reserved whole (the file's size is unchanged).
        self.preallocate = False
        # file.delete.delay.ms: a deleted segment's files are renamed `.deleted` and removed
        # this much later (`purge_deleted`); 0 removes them at once.
        self.delete_delay_ms = 0
        self._deleted: list[tuple[float, Path]] = []  # (due, monotonic seconds; file)
        self._log_start = segments[0].base_offset if segments else 0
        self._end = segments[-1].next_offset if segments else 0
        self._size = sum(segment.size for segment in segments)
        self._write_fd: int | None = None  # the active segment's log, O_APPEND
        self._index_fd: int | None = None  # the active segment's index, O_APPEND
        self._unwritten_index: list[tuple[int, int]] = []  # its entries not yet in the file
        self._read_fds: OrderedDict[int, int] = OrderedDict()  # base offset -> fd, least recent first
        self._tail_dirty = False  # a failed write may have left bytes after the active segment's size
        self._closed = False
        # Flush bookkeeping: `_change_seq` counts changes to files; `_pending` holds files that are
        # no longer the active segment (and the dir, after entries changed) with the change that
        # made them pending; a flush that read `_change_seq` == n makes all changes <= n durable.
        self._change_seq = 0
        self._flushed_seq = 0
        self._pending: list[tuple[int, Path]] = []

    # -- recovery ------------------------------------------------------------------------------

    @classmethod
    def recover(
        cls,
        path: Path,
        *,
        segment_bytes: int,
        index_interval_bytes: int,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> tuple[LocalLog, int]:
        """Recover the segments in the replica dir `path` (see the module docstring); returns the
        log and the largest leader epoch of a batch in it (-1: none), for the epoch cache.
        `monotonic` times the delete delay (the agent passes its clock's)."""
        if not 1 <= segment_bytes <= MAX_SEGMENT_BYTES:
            raise ValueError(f"segment_bytes must be in [1, {MAX_SEGMENT_BYTES}], got {segment_bytes}")
        if index_interval_bytes < 0:
            raise ValueError(f"index_interval_bytes must be >= 0, got {index_interval_bytes}")
        path = Path(path)
        bases = _scan_replica_dir(path)
        segments: list[Segment] = []
        last_batch_epoch = -1
        for number, base in enumerate(bases):
            segment, segment_epoch = log_segments.load_segment(
                path, base, last=number == len(bases) - 1, interval=index_interval_bytes
            )
            last_batch_epoch = max(last_batch_epoch, segment_epoch)
            if segments and segment.base_offset != segments[-1].next_offset:
                previous = segments[-1]
                raise CorruptBatchError(
                    f"Offsets are not contiguous: {previous.log_path} ends at offset {previous.next_offset}, "
                    f"{segment.log_path} starts at {segment.base_offset}",
                    position=0,
                )
            segments.append(segment)
        local_log = cls(
            path,
            segments,
            segment_bytes=segment_bytes,
            index_interval_bytes=index_interval_bytes,
            monotonic=monotonic,
        )
        persisted = _read_log_start(path)
        if persisted is not None:
            local_log._log_start = min(max(persisted, local_log._log_start), local_log._end)
        return local_log, last_batch_epoch

    def batch_epochs(self) -> Iterator[tuple[int, int]]:
        """(leader epoch, base offset) of every batch, in order: what the epoch cache is rebuilt from."""
        return log_segments.batch_epochs(self._segments)

    # -- state ---------------------------------------------------------------------------------

    @property
    def path(self) -> Path:
        return self._path

    @property
    def log_start_offset(self) -> int:
        return self._log_start

    @property
    def end_offset(self) -> int:
        """The log end offset (LEO): the offset the next record gets."""
        return self._end

    @property
    def size_bytes(self) -> int:
        return self._size

    @property
    def segment_bytes(self) -> int:
        """The size at which the active segment rolls (a topic config change applies at once)."""
        return self._segment_bytes

    @segment_bytes.setter
    def segment_bytes(self, value: int) -> None:
        if not 1 <= value <= MAX_SEGMENT_BYTES:
            raise ValueError(f"segment_bytes must be in [1, {MAX_SEGMENT_BYTES}], got {value}")
        self._segment_bytes = value

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def index_interval_bytes(self) -> int:
        return self._index_interval

    @index_interval_bytes.setter
    def index_interval_bytes(self, value: int) -> None:
        """`index.interval.bytes`: applies to the entries written from now on."""
        if value < 0:
            raise ValueError(f"index_interval_bytes must be >= 0, got {value}")
        self._index_interval = value

    def segment_paths(self) -> list[Path]:
        """The segment files (each `.log`, then its `.index` when it exists), oldest first."""
        paths: list[Path] = []
        for segment in self._segments:
            paths.append(segment.log_path)
            if segment.index_path.exists():
                paths.append(segment.index_path)
        return paths

    # -- appending -----------------------------------------------------------------------------

    def append(
        self,
        data: bytes | bytearray | memoryview,
        headers: Sequence[BatchHeader],
        *,
        now_ms: int | None = None,
    ) -> None:
        """Write validated frames, contiguous from the end offset (positions relative to `data`),
        rolling segments so that no frame is split; one write per segment touched. With `now_ms`
        and `roll_ms`, a non-empty active segment whose first batch is older is rolled first."""
        if self._tail_dirty:
            active = self._segments[-1]
            os.truncate(active.log_path, active.size)
            self._tail_dirty = False
        if now_ms is not None and self.roll_ms is not None and headers and self._segments:
            active = self._segments[-1]
            if (
                active.size > 0
                and now_ms - self._first_timestamp(active) > self.roll_ms - self._roll_jitter_ms
            ):
                self._roll(headers[0].base_offset)
        view = memoryview(data)
        interval = self._index_interval
        first = 0
        while first < len(headers):
            segment = self._segments[-1] if self._segments else None
            header = headers[first]
            if segment is None or (
                segment.size > 0
                and (
                    self._must_roll(segment, segment.size, header)
                    or (segment.bytes_since_index >= interval and self._index_full(segment, 0))
                )
            ):
                segment = self._roll(header.base_offset)
            base = segment.base_offset
            size = segment.size
            since = segment.bytes_since_index
            max_ts = segment.max_timestamp_ms
            entries: list[tuple[int, int]] = []
            stop = first
            while stop < len(headers):
                header = headers[stop]
                if size > 0 and (
                    self._must_roll(segment, size, header)
                    or (since >= interval and self._index_full(segment, len(entries)))
                ):
                    break
                if size == 0 or since >= interval:
                    entries.append((header.base_offset - base, size))
                    since = 0
                since += header.size
                size += header.size
                if max_ts is not None and header.max_timestamp_ms > max_ts:
                    max_ts = header.max_timestamp_ms
                stop += 1
            last = headers[stop - 1]
            self._write_run(segment, view[headers[first].position : last.position + last.size])
            self._size += size - segment.size
            segment.size = size
            segment.next_offset = last.next_offset
            segment.bytes_since_index = since
            segment.max_timestamp_ms = max_ts
            self._end = last.next_offset
            self._change_seq += 1
            if entries:
                self._add_index_entries(segment, entries)
            first = stop

    def _index_full(self, segment: Segment, pending: int) -> bool:
        """The segment's index holds `max_index_entries` (with `pending` not yet added)."""
        limit = self.max_index_entries
        return limit is not None and len(segment.index_offsets) + pending >= limit

    def _must_roll(self, segment: Segment, size: int, header: BatchHeader) -> bool:
        return (
            size + header.size > self._segment_bytes
            or header.base_offset - segment.base_offset > log_segments.MAX_RELATIVE_OFFSET
        )

    def _write_run(self, segment: Segment, run: memoryview) -> None:
        if self._write_fd is None:
            self._open_write_fds(segment)
        fd = self._write_fd
        assert fd is not None
        try:
            log_segments.write_all(fd, run)
        except OSError:
            self._tail_dirty = True
            try:
                os.ftruncate(fd, segment.size)
                self._tail_dirty = False
            except OSError:
                pass  # retried before the next append; the first error is the one to report
            raise

    def _add_index_entries(self, segment: Segment, entries: Sequence[tuple[int, int]]) -> None:
        segment.add_index_entries(entries)
        if not segment.index_file_ok:
            return  # rewritten whole when the write fds are next opened
        if self._index_fd is None:
            self._open_write_fds(segment)
            return  # opening wrote the whole index, these entries included
        self._unwritten_index.extend(entries)
        if len(self._unwritten_index) >= INDEX_WRITE_BATCH:
            self.write_index()

    def write_index(self) -> None:
        """Write the active segment's index entries that are only in memory (the index file is
        written in batches, at roll, before a flush and at close, not once per append: it is
        derived data, rebuilt from the segment when recovery finds it behind). An OSError is
        raised after the entries are dropped from the queue and the file marked for a rewrite."""
        entries, self._unwritten_index = self._unwritten_index, []
        if not entries or self._index_fd is None or not self._segments:
            return
        try:
            log_segments.write_all(self._index_fd, log_segments.encode_index_entries(entries))
        except OSError:
            self._segments[-1].index_file_ok = False
            raise

    def _open_write_fds(self, segment: Segment) -> None:
        """Open the active segment's files for appending, making its index file match memory."""
        self._close_write_fds()
        self._write_fd = os.open(segment.log_path, log_segments.OPEN_APPEND, 0o644)
        if self.preallocate and segment.size == 0:
            log_segments.reserve_blocks(self._write_fd, self._segment_bytes)
        self._index_fd = os.open(segment.index_path, log_segments.OPEN_APPEND, 0o644)
        log_segments.sync_index_file(segment, self._index_fd)
        self._unwritten_index = []  # the file now holds every entry in memory

    def _close_write_fds(self) -> None:
        with contextlib.suppress(OSError):  # a short index is rebuilt on open; the data decides
            self.write_index()
        fds = (self._write_fd, self._index_fd)
        self._write_fd = self._index_fd = None
        for fd in fds:
            if fd is not None:
                os.close(fd)

    def _roll(self, base_offset: int) -> Segment:
        """Start a new active segment at `base_offset` (the end offset)."""
        self._change_seq += 1
        if self._segments:
            previous = self._segments[-1]
            self._pending.append((self._change_seq, previous.log_path))
            self._pending.append((self._change_seq, previous.index_path))
        self._pending.append((self._change_seq, self._path))  # a new dir entry
        self._prune_pending()
        self._close_write_fds()
        segment = Segment(self._path, base_offset)
        self._segments.append(segment)
        self._bases.append(base_offset)
        jitter = min(self.roll_jitter_max_ms, self.roll_ms or 0)
        self._roll_jitter_ms = random.randrange(jitter) if jitter > 0 else 0
        return segment

    # -- reading -------------------------------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int, *, max_offset: int | None = None, min_one: bool = True
    ) -> bytes:
        """Raw whole frames from the one containing `offset`, at most `max_bytes` of them but at
        least one when one is available (with `min_one`; without it nothing when the first frame
        is larger than `max_bytes`), and only frames whose base offset is below `max_offset` (when
        given). `offset` == end offset gives b""; outside [log_start_offset, end_offset] it raises
        OffsetOutOfRangeError."""
        self.check_open()
        if not self._log_start <= offset <= self._end:
            raise OffsetOutOfRangeError(
                f"Offset {offset} is outside [{self._log_start}, {self._end}] of {self._path}"
            )
        limit = self._end if max_offset is None else min(max_offset, self._end)
        if offset >= limit:
            return b""
        number = bisect.bisect_right(self._bases, offset) - 1
        segment = self._segments[number]
        start = self._locate(segment, offset)
        if start.base_offset >= limit:
            return b""
        parts: list[bytes] = []
        total = 0
        position = start.position
        while True:
            part, stopped = segment.read_frames(
                self._reader(segment), position, max_bytes - total, limit, must_return=min_one and not parts
            )
            if part:
                parts.append(part)
                total += len(part)
            number += 1
            if stopped or total >= max_bytes or number == len(self._segments):
                break
            segment = self._segments[number]
            if segment.base_offset >= limit:
                break
            position = 0
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _locate(self, segment: Segment, offset: int) -> BatchHeader:
        """The header of the frame of `segment` holding `offset` (found through the index)."""
        return log_segments.locate(segment, self._reader(segment), offset)

    def _reader(self, segment: Segment) -> int:
        fds = self._read_fds
        fd = fds.get(segment.base_offset)
        if fd is not None:
            fds.move_to_end(segment.base_offset)
            return fd
        fd = os.open(segment.log_path, log_segments.OPEN_READ)
        fds[segment.base_offset] = fd
        if len(fds) > MAX_READ_FDS:
            _base, oldest = fds.popitem(last=False)
            os.close(oldest)
        return fd

    def _forget_reader(self, base_offset: int) -> None:
        fd = self._read_fds.pop(base_offset, None)
        if fd is not None:
            os.close(fd)

    # -- truncation and deletion ---------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove every offset >= `offset` (or >= the base offset of the frame holding it)."""
        self.check_open()
        if not self._log_start <= offset <= self._end:
            raise OffsetOutOfRangeError(
                f"Cannot truncate to {offset}: outside [{self._log_start}, {self._end}] of {self._path}"
            )
        if offset < self._end:
            self.write_index()  # the file as memory has it, before both are cut
            number = bisect.bisect_right(self._bases, offset) - 1
            segment = self._segments[number]
            cut = self._locate(segment, offset)
            keep = number if cut.position > 0 or number == 0 else number - 1
            self._change_seq += 1
            if keep < len(self._segments) - 1 or self._tail_dirty:
                self._close_write_fds()
                self._tail_dirty = False  # the cut below removes whatever a failed write left
            for doomed in reversed(self._segments[keep + 1 :]):
                self._delete_segment_files(doomed)
                self._size -= doomed.size
            del self._segments[keep + 1 :]
            del self._bases[keep + 1 :]
            if keep == number:
                self._cut_segment(segment, cut.position, cut.base_offset)
            self._end = self._segments[-1].next_offset
            self._pending.append((self._change_seq, self._path))
            self._prune_pending()
            self._lower_cleaner_checkpoint(self._end)

    def _lower_cleaner_checkpoint(self, end: int | None) -> None:
        """A truncation below the cleaner's first dirty offset moves it down to the new end
        (None: a full truncation removes it): what comes back is dirty."""
        checkpoint = self._path / CLEANER_CHECKPOINT
        if end is None:
            checkpoint.unlink(missing_ok=True)
            return
        if not checkpoint.exists():
            return
        first_dirty, tombstones_due_ms = read_cleaner_checkpoint(self._path)
        if first_dirty > end:
            write_cleaner_checkpoint(self._path, end, tombstones_due_ms)

    def _cut_segment(self, segment: Segment, position: int, next_offset: int) -> None:
        os.truncate(segment.log_path, position)
        self._size -= segment.size - position
        kept = segment.cut(position, next_offset)
        if self._index_fd is not None:
            os.ftruncate(self._index_fd, log_segments.INDEX_ENTRY.size * kept)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment; the log is empty and starts at `offset`, also after reopening (an
        empty segment file with that base offset records it)."""
        self.check_open()
        if offset < 0:
            raise ValueError(f"Log start offset must be >= 0, got {offset}")
        self._close_fds()
        self._tail_dirty = False
        self._change_seq += 1
        segment = Segment(self._path, offset)
        tmp = segment.log_path.with_name(segment.log_path.name + ".tmp")
        if offset > 0:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644))
        # Newest first: a crash in between leaves a shorter but contiguous log.
        for doomed in reversed(self._segments):
            self._delete_segment_files(doomed)
        if offset > 0:
            os.replace(tmp, segment.log_path)
            self._segments = [segment]
            self._bases = [offset]
        else:
            self._segments = []  # no file needed: a replica dir without segments starts at 0
            self._bases = []
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path / LOG_START_FILE)  # the new segment's base offset records it
        self._lower_cleaner_checkpoint(None)
        _fsync_path(self._path)
        self._log_start = self._end = offset
        self._size = 0

    def advance_log_start(self, offset: int) -> int:
        """Move the log start up to `offset` (Kafka's DeleteRecords; at most the end offset):
        offsets below it are no longer read, the segments wholly below it are deleted (never the
        active one), and `log-start-offset` records it durably before anything is deleted.
        Returns how many segments were deleted; an offset at or below the log start changes
        nothing."""
        self.check_open()
        if offset <= self._log_start:
            return 0
        if offset > self._end:
            raise OffsetOutOfRangeError(
                f"Log start {offset} is past the end offset {self._end} of {self._path}"
            )
        durable_files.write_atomically(self._path / LOG_START_FILE, f"{offset}\n".encode())
        self._log_start = offset
        return self.delete_old_segments(lambda segment: segment.next_offset <= offset)

    def delete_old_segments(self, should_delete: Callable[[Segment], bool]) -> int:
        """Delete the oldest segments, one at a time, while `should_delete` says so of the oldest;
        never the active segment. The log start moves to the oldest segment left. Returns how many
        were deleted."""
        self.check_open()
        deleted = 0
        while len(self._segments) > 1:
            segment = self._segments[0]
            if not should_delete(segment):
                break
            self._change_seq += 1
            if self.delete_delay_ms > 0:
                self._delete_later(segment)
            else:
                self._delete_segment_files(segment)
            self._size -= segment.size
            del self._segments[0]
            del self._bases[0]
            deleted += 1
        if deleted:
            self._log_start = max(self._log_start, self._segments[0].base_offset)
            self._pending.append((self._change_seq, self._path))
            self._prune_pending()
        return deleted

    # -- compaction ----------------------------------------------------------------------------

    @property
    def segment_count(self) -> int:
        """How many segments the log has (a roll adds one)."""
        return len(self._bases)

    def segments(self) -> tuple[Segment, ...]:
        """The segments, oldest first (the last is the active one): what a cleaner plans on. The
        objects stay the log's; a cleaner reads their files through fds of its own."""
        return tuple(self._segments)

    def swap_cleaned(self, members: Sequence[Segment], cleaned: CleanedSegment) -> list[Path] | None:
        """Replace `members` (consecutive segments, not the active one) by `cleaned`, written
        beside them: the members' files, renamed `.deleted`, for the caller to remove (off the
        event loop: unlinking large files takes time; recovery removes any left); None, with the
        cleaned files removed and the log unchanged, when the log changed meanwhile (a member was
        deleted, truncated or moved).

        Crash-safe: the cleaned segment is renamed to `<base>.log.swap` first (recovery completes
        a swap it finds), then the members' files are removed and the swap takes the first
        member's name; a crash before the rename leaves the old segments and a `.cleaned` file
        that recovery removes."""
        self.check_open()
        path = self._path
        log_file, index_file = cleaned.log_path(path), cleaned.index_path(path)
        first = self._position_of(members[0]) if members else None
        if (
            first is None
            or first + len(members) >= len(self._segments)
            or any(self._segments[first + i] is not m for i, m in enumerate(members))
            or members[0].base_offset != cleaned.base_offset
            or members[-1].next_offset != cleaned.next_offset
            or not log_file.exists()
        ):
            log_file.unlink(missing_ok=True)
            index_file.unlink(missing_ok=True)
            return None
        swap = path / f"{cleaned.base_offset:020d}.log{SWAP_SUFFIX}"
        os.replace(log_file, swap)
        doomed = [path for member in reversed(members) for path in self._rename_deleted(member)]
        segment = Segment(path, cleaned.base_offset)
        os.replace(swap, segment.log_path)
        os.replace(index_file, segment.index_path)
        segment.size = cleaned.size
        segment.next_offset = cleaned.next_offset
        segment.max_timestamp_ms = cleaned.max_timestamp_ms
        segment.index_offsets = cleaned.index_offsets
        segment.index_positions = cleaned.index_positions
        segment.bytes_since_index = cleaned.bytes_since_index
        self._segments[first : first + len(members)] = [segment]
        self._bases[first : first + len(members)] = [segment.base_offset]
        self._size += cleaned.size - sum(member.size for member in members)
        self._change_seq += 1
        self._pending.append((self._change_seq, path))  # the renames, made durable by `flush`
        self._prune_pending()
        return doomed

    def _position_of(self, segment: Segment) -> int | None:
        number = bisect.bisect_left(self._bases, segment.base_offset)
        if number < len(self._segments) and self._segments[number] is segment:
            return number
        return None

    # -- batch headers (producer state) --------------------------------------------------------

    def batch_headers(self, start_offset: int) -> Iterator[BatchHeader]:
        """The headers of every batch from the one holding `start_offset` to the end, in order
        (positions within their segment); nothing when `start_offset` is at or past the end."""
        self.check_open()
        start = max(start_offset, self._log_start)
        if start >= self._end:
            return
        number = bisect.bisect_right(self._bases, start) - 1
        first = self._locate(self._segments[number], start)
        for index, segment in enumerate(self._segments[number:]):
            position = first.position if index == 0 else 0
            yield from log_segments.walk_headers(
                self._reader(segment), position, segment.size, log_segments.RECOVERY_CHUNK
            )

    def batch_before(self, offset: int) -> BatchHeader | None:
        """The header of the batch holding `offset - 1` (None at or before the log start)."""
        self.check_open()
        if offset <= self._log_start or offset > self._end:
            return None
        number = bisect.bisect_right(self._bases, offset - 1) - 1
        return self._locate(self._segments[number], offset - 1)

    # -- timestamps (ListOffsets, retention) ---------------------------------------------------

    def offset_for_timestamp(self, timestamp_ms: int, *, max_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record below `max_offset` whose timestamp is at
        least `timestamp_ms`, or None: Kafka's ListOffsets by timestamp. Segments whose newest
        timestamp is older are skipped; only the batch that holds the answer is decoded."""
        self.check_open()
        for segment in self._segments:
            if segment.base_offset >= max_offset:
                return None
            if self.max_timestamp(segment) < timestamp_ms:
                continue
            for header in log_segments.walk_headers(
                self._reader(segment), 0, segment.size, log_segments.RECOVERY_CHUNK
            ):
                if header.base_offset >= max_offset:
                    return None
                if header.max_timestamp_ms < timestamp_ms:
                    continue
                for record in self._records_of(segment, header):
                    if record.offset < max_offset and record.timestamp_ms >= timestamp_ms:
                        return record.offset, record.timestamp_ms
        return None

    def offset_of_max_timestamp(self, *, max_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record below `max_offset` carrying the largest
        timestamp (Kafka's ListOffsets MAX_TIMESTAMP, KIP-734), or None for an empty log."""
        self.check_open()
        best: tuple[Segment, BatchHeader] | None = None
        for segment in self._segments:
            if segment.base_offset >= max_offset:
                break
            if best is not None and self.max_timestamp(segment) <= best[1].max_timestamp_ms:
                continue
            for header in log_segments.walk_headers(
                self._reader(segment), 0, segment.size, log_segments.RECOVERY_CHUNK
            ):
                if header.base_offset >= max_offset:
                    break
                if best is None or header.max_timestamp_ms > best[1].max_timestamp_ms:
                    best = (segment, header)
        if best is None:
            return None
        records = [r for r in self._records_of(*best) if r.offset < max_offset]
        newest = max(records, key=lambda r: (r.timestamp_ms, -r.offset), default=None)
        return None if newest is None else (newest.offset, newest.timestamp_ms)

    def _records_of(self, segment: Segment, header: BatchHeader) -> list[record_batch.Record]:
        data = os.pread(self._reader(segment), header.size, header.position)
        return record_batch.decode_records(data, verify_crc=False)

    def _first_timestamp(self, segment: Segment) -> int:
        """The max timestamp of `segment`'s first batch (read once, then kept); a batch without
        timestamps counts as new (never rolls by time)."""
        if segment.first_timestamp_ms is None:
            first = next(log_segments.walk_headers(self._reader(segment), 0, segment.size), None)
            stamp = first.max_timestamp_ms if first is not None else log_segments.NO_TIMESTAMP
            segment.first_timestamp_ms = stamp if stamp >= 0 else 2**62
        return segment.first_timestamp_ms

    def max_timestamp(self, segment: Segment) -> int:
        """The newest batch timestamp of `segment` (read from its batches once, then kept)."""
        if segment.max_timestamp_ms is None:
            newest = log_segments.NO_TIMESTAMP
            for header in log_segments.walk_headers(
                self._reader(segment), 0, segment.size, log_segments.RECOVERY_CHUNK
            ):
                newest = max(newest, header.max_timestamp_ms)
            segment.max_timestamp_ms = newest
        return segment.max_timestamp_ms

    def _rename_deleted(self, segment: Segment) -> list[Path]:
        """Rename a segment's files `.deleted` (its read fd forgotten; recovery removes any such
        file it finds); the new paths of the files that existed."""
        self._forget_reader(segment.base_offset)
        renamed: list[Path] = []
        for path in (segment.log_path, segment.index_path):
            doomed = path.with_name(path.name + DELETED_SUFFIX)
            with contextlib.suppress(FileNotFoundError):
                os.replace(path, doomed)
                renamed.append(doomed)
        return renamed

    def _delete_later(self, segment: Segment) -> None:
        """Rename a deleted segment's files `.deleted`, removed by `purge_deleted` once
        `delete_delay_ms` passed."""
        due = self._monotonic() + self.delete_delay_ms / 1000
        self._deleted.extend((due, path) for path in self._rename_deleted(segment))

    def purge_deleted(self) -> int:
        """Remove the `.deleted` files whose delay passed; how many were removed."""
        now = self._monotonic()
        due = [path for when, path in self._deleted if when <= now]
        if not due:
            return 0
        self._deleted = [(when, path) for when, path in self._deleted if when > now]
        for path in due:
            path.unlink(missing_ok=True)
        return len(due)

    def _delete_segment_files(self, segment: Segment) -> None:
        self._forget_reader(segment.base_offset)
        if self._segments and segment is self._segments[-1]:
            self._close_write_fds()
        segment.log_path.unlink(missing_ok=True)
        segment.index_path.unlink(missing_ok=True)

    # -- durability and lifecycle --------------------------------------------------------------

    def mark_changed(self, *paths: Path) -> None:
        """Count a change the caller made beside the segments (the epoch checkpoint); the next
        `flush` fsyncs `paths` (none: the change is only counted) with the segments."""
        self._change_seq += 1
        for path in paths:
            self._pending.append((self._change_seq, path))

    def flush(self) -> None:
        """fsync what was appended since the last flush: the active segment and its index, the
        segments rolled since, and the dir when entries changed. Safe to call from a worker thread
        while the event loop appends (see the module docstring)."""
        self.check_open()
        segments = self._segments
        active = segments[-1] if segments else None  # read before the counter: see `_roll`
        seq = self._change_seq
        if seq == self._flushed_seq:
            return
        paths = [path for change, path in list(self._pending) if change <= seq]
        if active is not None:
            paths[:0] = (active.log_path, active.index_path)
        for path in dict.fromkeys(sorted(paths, key=lambda p: p == self._path)):
            _fsync_path(path)
        self._flushed_seq = seq

    def _prune_pending(self) -> None:
        flushed = self._flushed_seq
        if self._pending and self._pending[0][0] <= flushed:
            self._pending = [entry for entry in self._pending if entry[0] > flushed]

    def relocate(self, path: Path) -> None:
        """The replica directory was renamed to `path` on the same filesystem: follow it.

        Open fds stay valid across a rename, so nothing is reopened or rescanned (an
        intra-broker move switches to its copy this way, in microseconds).
        """
        self.check_open()
        old = self._path
        self._path = path
        for segment in self._segments:
            segment.relocate(path)
        self._pending = [
            (change, path if entry == old else path / entry.name if entry.parent == old else entry)
            for change, entry in self._pending
        ]

    def close(self) -> None:
        """Close every fd (without fsync: call `flush` first for durability), and remove the
        `.deleted` files still waiting. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._close_fds()
        for _due, path in self._deleted:
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
        self._deleted = []

    def _close_fds(self) -> None:
        self._close_write_fds()
        while self._read_fds:
            _base, fd = self._read_fds.popitem()
            os.close(fd)

    def check_open(self) -> None:
        """Raise ValueError once the log is closed."""
        if self._closed:
            raise ValueError(f"The log of {self._path} is closed")
