"""Cleaning one compacted log (Kafka's log cleaner), the part that runs in a worker thread.

`clean` plans on a snapshot of the log's segments (`LocalLog.segments`, taken on the event loop
with the high watermark and the first dirty offset), maps the dirty section's keys to their latest
offsets, and writes each group of segments from the log start to the end of the mapped section as
one cleaned segment beside them (`<base>.log.cleaned` and its index, fsynced). The event loop then
swaps each in (`LocalLog.swap_cleaned`) and records the new first dirty offset
(`PartitionLog.record_cleaning`). The decisions are `jbod_core.compaction`'s.

Guarantees:
* Offsets never change and a cleaned log stays contiguous: a batch keeps its base offset, last
  offset delta, leader epoch and producer fields, and loses only records; a batch left with no
  record is dropped, except the last batch of an idempotent producer, kept empty as Kafka keeps
  it; each run of dropped batches of one leader epoch becomes one empty batch over its offsets
  (so followers, recovery and readers see no gap between batches; clients see the missing
  offsets as Kafka serves them: the records are not there).
* A batch whose records all survive is copied byte for byte; a rebuilt batch keeps its codec.
* Transactions (`jbod_core.txn_cleaning`): nothing at or above the job's last stable offset is
  cleaned; the records of aborted transactions (the job's `.txnindex` entries) are removed and
  never mapped; a transaction marker stays while this cleaning read data of its transaction, and
  then until `delete.retention.ms` after its timestamp (kept whole when it is its producer's last
  batch, as Kafka keeps it); the abort entries of markers found without data are listed (`dropped_aborted`) for the
  caller to drop before it swaps. Other control batches are kept as they are. A log without
  transactional batches costs one attribute test per batch.
* Cost: the dirty section's records are decoded once to map their keys; in the rewrite, a
  batch of the mapped section holding no key's latest offset (most of an often-updated log) is
  dropped from its header alone, and the others are decoded once more. Each segment's batch
  headers are read once per cleaning (a segment outside the mapped section by a walk of its
  headers, for the producers' last batches).
* Memory: the key map holds at most `map_budget_bytes` (each entry counted as its key's bytes
  plus `MAP_ENTRY_OVERHEAD`), except that the first dirty segment is always mapped whole; the
  dirty section mapped ends at the last segment that fitted, and the next cleaning goes on from
  there. While a segment is mapped, its own keys are held beside the map (at most one entry
  per record of the segment).
* I/O: every byte read and written passes the `Throttle` (the dir's
  `log.cleaner.io.max.bytes.per.second`); `stop` makes `clean` raise `CleanerStoppedError` at the
  next batch, leaving only `.cleaned` files (removed by the swap's check or by recovery).
* `clean` needs nothing of the broker's memory but its `CleanJob` (picklable), so it runs in a
  process of its own (`clean_in_worker`, after `start_worker`): a dir's cleaning takes a core of
  its own and never holds the broker's interpreter lock; the process runs at a lower priority
  (`CLEANER_NICENESS`), so produce and fetch are served first when the cores are busy.
* OSErrors propagate untouched (the caller takes the dir offline); the log's files are only
  read here, never changed.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from jbod_agent.storage import log_segments
from jbod_agent.storage.local_log import CleanedSegment
from jbod_agent.storage.log_segments import Segment
from jbod_core import compaction
from jbod_core.compaction import CompactionSettings, SegmentInfo
from jbod_core.txn_cleaning import AbortedRanges, TxnScan
from jbod_core.txn_index import AbortedTxn
from jbod_kafka import control_records, record_batch
from jbod_kafka.record_batch import BatchHeader
from jbod_runtime import durable_files

CLEANER_NICENESS: Final = 10  # a cleaner process's nice increment (the broker's threads come first)
MAP_ENTRY_OVERHEAD: Final = 64  # bytes counted per key of the map beside the key itself
_MAX_RUN: Final = 0x7FFFFFFF  # the offsets one empty batch may span (last offset delta is an i32)


class CleanerStoppedError(Exception):
    """The cleaner was told to stop while cleaning."""


class Throttle:
    """At most `bytes_per_second` on average over the cleaner's reads and writes (None: no limit);
    waits on `stop` so that a stop is prompt. `monotonic` is the clock the rate is kept on (in a
    cleaner process, where the agent's clock does not reach, the system's)."""

    def __init__(
        self,
        bytes_per_second: float | None,
        stop: threading.Event,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bytes_per_second = bytes_per_second
        self.monotonic = monotonic
        self._stop = stop
        self._started = monotonic()
        self._spent = 0

    def spend(self, count: int) -> None:
        if self._stop.is_set():
            raise CleanerStoppedError
        rate = self.bytes_per_second
        if rate is None or rate <= 0:
            return
        self._spent += count
        ahead = self._spent / rate - (self.monotonic() - self._started)
        if ahead > 0.01 and self._stop.wait(ahead):
            raise CleanerStoppedError
        if ahead < -1.0:  # idle for a while: no credit for the past
            self._started, self._spent = self.monotonic(), 0


@dataclass(frozen=True, slots=True)
class CleanJob:
    """What `clean` works on: a snapshot taken on the event loop."""

    path: Path
    segments: tuple[Segment, ...]  # oldest first, the last being the active one
    log_start: int
    high_watermark: int
    first_dirty: int
    tombstones_due_ms: int | None  # when a tombstone kept by the last cleaning may go
    settings: CompactionSettings
    segment_bytes: int
    index_interval: int
    now_ms: int
    last_stable_offset: int | None = None  # cleaning stops below it too (None: the high watermark)
    aborted: tuple[AbortedTxn, ...] = ()  # the log's aborted transactions (its `.txnindex` entries)


@dataclass(slots=True)
class CleanResult:
    """The cleaned segments to swap in (with the segments each replaces), where the mapped dirty
    section ended (the next first dirty offset), and what the cleaning did."""

    groups: list[tuple[tuple[int, ...], CleanedSegment]] = field(default_factory=list)  # member bases
    dirty_end: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    dirty_ratio: float = 0.0
    tombstones_due_ms: int | None = None  # the earliest time a kept tombstone or marker may go
    dropped_aborted: list[tuple[int, int]] = field(default_factory=list)  # (producer, marker offset)
    map_seconds: float = 0.0  # mapping the dirty section's keys (monotonic, in the cleaning's process)
    write_seconds: float = 0.0  # writing the cleaned segments, fsyncs included
    cpu_seconds: float = 0.0  # the CPU time the cleaning's process spent on both


@dataclass(frozen=True, slots=True)
class KeyMap:
    """The dirty section's map: the latest offset of each key in [first_dirty, end), and those
    offsets (sorted, and as a set) to tell without decoding a batch whether any of its records is
    the latest of its key."""

    latest: dict[bytes, int]
    first_dirty: int
    end: int
    offsets: list[int] = field(default_factory=list)
    offset_set: frozenset[int] = frozenset()

    @classmethod
    def of(cls, latest: dict[bytes, int], first_dirty: int, end: int) -> KeyMap:
        offsets = sorted(latest.values())
        return cls(latest, first_dirty, end, offsets, frozenset(offsets))

    def maps(self, header: BatchHeader) -> bool:
        """Whether every record of the batch is in the mapped section."""
        return self.first_dirty <= header.base_offset and header.next_offset <= self.end

    def latest_in(self, header: BatchHeader) -> int:
        """How many of the batch's offsets are the latest of their key."""
        return bisect.bisect_left(self.offsets, header.next_offset) - bisect.bisect_left(
            self.offsets, header.base_offset
        )


def _frames(
    fd: int, segment_size: int, throttle: Throttle
) -> Iterator[tuple[BatchHeader, bytes | memoryview]]:
    """Each batch of a segment file with its bytes, read in chunks through `throttle` into one
    buffer reused for every chunk: a batch's view is valid only until the next one is asked for
    (callers copy what they keep)."""
    buffer = memoryview(bytearray(log_segments.RECOVERY_CHUNK))
    position = 0
    while position < segment_size:
        read = os.preadv(fd, [buffer[: min(len(buffer), segment_size - position)]], position)
        throttle.spend(read)
        chunk = buffer[:read]
        used = 0
        while used + record_batch.HEADER_SIZE <= read:
            header = record_batch.read_header(chunk, used, position_base=position)
            if used + header.size > read:
                break
            yield header, chunk[used : used + header.size]
            used += header.size
        if used == 0:  # one batch larger than a chunk
            header = record_batch.read_header(os.pread(fd, record_batch.HEADER_SIZE, position))
            data = os.pread(fd, header.size, position)
            throttle.spend(len(data))
            yield record_batch.read_header(data, position_base=position), data
            used = header.size
        position += used


def _info(segment: Segment, size: int) -> SegmentInfo:
    newest = segment.max_timestamp_ms
    if newest is None and size == 0:
        newest = log_segments.NO_TIMESTAMP
    if newest is None:
        fd = os.open(segment.log_path, log_segments.OPEN_READ)
        try:
            newest = max(
                (
                    h.max_timestamp_ms
                    for h in log_segments.walk_headers(fd, 0, size, log_segments.RECOVERY_CHUNK)
                ),
                default=log_segments.NO_TIMESTAMP,
            )
        finally:
            os.close(fd)
    return SegmentInfo(segment.base_offset, segment.next_offset, size, newest)


@dataclass(frozen=True, slots=True)
class CleanPlan:
    """What a look at a log's segments found: each segment's size and newest timestamp (read from
    its headers where the segment did not know it), where cleaning must stop, the clean and dirty
    bytes, and whether the log needs cleaning now."""

    sizes: list[int]
    infos: list[SegmentInfo]
    uncleanable: int
    first_dirty: int
    state: compaction.Cleanability
    needed: bool


def plan(job: CleanJob) -> CleanPlan:
    """The plan of `job` (`jbod_core.compaction`'s decisions); reads segment headers at most."""
    sizes = [segment.size for segment in job.segments]
    infos = [_info(segment, size) for segment, size in zip(job.segments, sizes, strict=True)]
    stable = job.high_watermark
    if job.last_stable_offset is not None:
        stable = min(stable, job.last_stable_offset)
    uncleanable = compaction.first_uncleanable_offset(
        infos, high_watermark=stable, now_ms=job.now_ms, settings=job.settings
    )
    first_dirty = max(job.first_dirty, job.log_start, infos[0].base_offset if infos else 0)
    state = compaction.cleanability(infos, first_dirty=first_dirty, uncleanable=uncleanable)
    needed = compaction.needs_cleaning(
        state, now_ms=job.now_ms, settings=job.settings, tombstones_due_ms=job.tombstones_due_ms
    )
    return CleanPlan(sizes, infos, uncleanable, first_dirty, state, needed)


def members_of(job: CleanJob, bases: Sequence[int]) -> tuple[Segment, ...]:
    """The job's own segments (the log's objects) at `bases`: what a cleaned segment replaces."""
    by_base = {segment.base_offset: segment for segment in job.segments}
    return tuple(by_base[base] for base in bases)


def clean(job: CleanJob, *, map_budget_bytes: int, throttle: Throttle) -> CleanResult | None:
    """Clean the log of `job` (see the module docstring); None when it needs no cleaning. May
    run in another process: the result names the segments each cleaned one replaces by their
    base offsets (`members_of`). Its timings are taken on the throttle's clock."""
    found = plan(job)
    if not found.needed:
        return None
    result = CleanResult(dirty_ratio=found.state.dirty_ratio)
    started, cpu_started = throttle.monotonic(), time.process_time()
    aborted = AbortedRanges.of(job.aborted)
    latest, result.dirty_end, producers_seen = _map_dirty(
        job, found.infos, found.first_dirty, found.uncleanable, map_budget_bytes, throttle, result, aborted
    )
    key_map = KeyMap.of(latest, found.first_dirty, result.dirty_end)
    mapped = throttle.monotonic()
    result.map_seconds = mapped - started
    last_of_producer = _last_batches(job.segments, found.sizes, producers_seen)
    cleanable = [
        info
        for info in found.infos[:-1]
        if info.next_offset <= result.dirty_end and info.base_offset < found.uncleanable
    ]
    groups = compaction.group_segments(
        cleanable, max_bytes=job.segment_bytes, max_relative_offset=log_segments.MAX_RELATIVE_OFFSET
    )
    txns = TxnScan(aborted, now_ms=job.now_ms, delete_retention_ms=job.settings.delete_retention_ms)
    for group in groups:
        bases = tuple(info.base_offset for info in group)
        cleaned = _clean_group(
            job, members_of(job, bases), group, key_map, last_of_producer, throttle, result, txns
        )
        if cleaned is not None:
            result.groups.append((bases, cleaned))
    result.write_seconds = throttle.monotonic() - mapped
    result.cpu_seconds = time.process_time() - cpu_started
    return result


def _map_dirty(  # noqa: PLR0913  the job and its plan, then the budget, throttle and tally
    job: CleanJob,
    infos: Sequence[SegmentInfo],
    first_dirty: int,
    uncleanable: int,
    budget: int,
    throttle: Throttle,
    result: CleanResult,
    aborted: AbortedRanges,
) -> tuple[dict[bytes, int], int, dict[int, dict[int, int]]]:
    """The latest offset of each key in [first_dirty, end) (records of `aborted` transactions
    left out), `end` (the next offset of the last dirty segment mapped whole within the budget,
    the first one always), and the last batch of each producer in each segment read (by the
    segment's base offset)."""
    latest: dict[bytes, int] = {}
    producers_seen: dict[int, dict[int, int]] = {}
    used = 0
    end = first_dirty
    for segment, info in zip(job.segments, infos, strict=True):
        if info.next_offset <= first_dirty:
            continue
        if info.base_offset >= uncleanable:
            break
        producers: dict[int, int] = {}
        producers_seen[info.base_offset] = producers
        mapped = _map_segment(segment, info.size, first_dirty, throttle, result, producers, aborted)
        added = mapped.keys() - latest.keys()
        used += sum(map(len, added)) + MAP_ENTRY_OVERHEAD * len(added)
        if used > budget and end > first_dirty:  # this segment does not fit: map up to the last one
            break
        latest.update(mapped)
        end = info.next_offset
        if used > budget:
            break
    return latest, end, producers_seen


def _map_segment(  # noqa: PLR0913  the segment, then the throttle and what it finds
    segment: Segment,
    size: int,
    first_dirty: int,
    throttle: Throttle,
    result: CleanResult,
    producers: dict[int, int],
    aborted: AbortedRanges,
) -> dict[bytes, int]:
    """The latest offset of each key of one segment's records at or above `first_dirty`, those
    of `aborted` transactions left out; the base offset of each producer's last batch in the
    segment into `producers`."""
    mapped: dict[bytes | None, int] = {}
    fd = os.open(segment.log_path, log_segments.OPEN_READ)
    try:
        for header, data in _frames(fd, size, throttle):
            result.bytes_read += header.size
            if header.producer_id >= 0:
                producers[header.producer_id] = header.base_offset
            if header.is_control or header.record_count == 0 or header.next_offset <= first_dirty:
                continue
            if header.is_transactional and aborted.aborted(header.producer_id, header.base_offset):
                continue
            records = record_batch.stored_records(data)
            if header.base_offset >= first_dirty:
                mapped.update({record.key: record.offset for record in records})
            else:
                mapped.update({r.key: r.offset for r in records if r.offset >= first_dirty})
    finally:
        os.close(fd)
    mapped.pop(None, None)  # keyless records are not mapped (the cleaner drops them)
    return mapped  # type: ignore[return-value]  # None popped


def _last_batches(
    segments: Sequence[Segment], sizes: Sequence[int], seen: dict[int, dict[int, int]]
) -> dict[int, int]:
    """The base offset of each idempotent producer's last batch in the log (the headers of the
    segments not `seen` already read)."""
    last: dict[int, int] = {}
    for segment, size in zip(segments, sizes, strict=True):
        if segment.base_offset in seen:
            last.update(seen[segment.base_offset])
            continue
        if size == 0:
            continue  # an active segment rolled but not written yet has no file
        fd = os.open(segment.log_path, log_segments.OPEN_READ)
        try:
            for header in log_segments.walk_headers(fd, 0, size, log_segments.RECOVERY_CHUNK):
                if header.producer_id >= 0:
                    last[header.producer_id] = header.base_offset
        finally:
            os.close(fd)
    return last


@dataclass(slots=True)
class _Writer:
    """The cleaned segment being written: its file, the headers written (for the index), and a
    run of dropped batches not written yet."""

    fd: int
    base_offset: int
    size: int = 0
    headers: list[BatchHeader] = field(default_factory=list)
    run_start: int | None = None
    run_next: int = 0
    run_epoch: int = -1
    run_timestamp: int = log_segments.NO_TIMESTAMP
    max_timestamp: int = log_segments.NO_TIMESTAMP
    pending: bytearray = field(default_factory=bytearray)  # written a chunk at a time

    def write(self, data: bytes | memoryview, throttle: Throttle) -> None:
        self.flush_run(throttle)
        self._write(data, throttle)

    def _write(self, data: bytes | memoryview, throttle: Throttle) -> None:
        header = record_batch.read_header(data, position_base=self.size)
        self.pending += data
        if len(self.pending) >= log_segments.RECOVERY_CHUNK:
            self.write_pending(throttle)
        self.headers.append(header)
        self.size += len(data)
        self.max_timestamp = max(self.max_timestamp, header.max_timestamp_ms)

    def write_pending(self, throttle: Throttle) -> None:
        """Write the batches gathered since the last write (one write a chunk, not one a batch)."""
        if self.pending:
            log_segments.write_all(self.fd, memoryview(self.pending))
            throttle.spend(len(self.pending))
            self.pending = bytearray()

    def drop(self, header: BatchHeader, throttle: Throttle) -> None:
        """`header`'s batch is dropped: its offsets join the run (a new run per leader epoch)."""
        if self.run_start is not None and (
            header.leader_epoch != self.run_epoch or header.next_offset - self.run_start > _MAX_RUN
        ):
            self.flush_run(throttle)
        if self.run_start is None:
            self.run_start, self.run_epoch = header.base_offset, header.leader_epoch
            self.run_timestamp = header.max_timestamp_ms
        self.run_next = header.next_offset
        self.run_timestamp = max(self.run_timestamp, header.max_timestamp_ms)

    def flush_run(self, throttle: Throttle) -> None:
        if self.run_start is None:
            return
        start, self.run_start = self.run_start, None
        self._write(
            record_batch.empty_batch(
                base_offset=start,
                last_offset_delta=self.run_next - 1 - start,
                leader_epoch=self.run_epoch,
                timestamp_ms=self.run_timestamp,
            ),
            throttle,
        )


def _clean_group(  # noqa: PLR0913  the job, the group, the map, then the throttle and tally
    job: CleanJob,
    members: tuple[Segment, ...],
    group: Sequence[SegmentInfo],
    key_map: KeyMap,
    last_of_producer: dict[int, int],
    throttle: Throttle,
    result: CleanResult,
    txns: TxnScan,
) -> CleanedSegment | None:
    """Write `members` cleaned into one `.cleaned` segment; None when nothing changed in a
    group of one segment (nothing to swap)."""
    base = group[0].base_offset
    cleaned_log = job.path / f"{base:020d}.log.cleaned"
    writer = _Writer(os.open(cleaned_log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644), base)
    changed = False
    try:
        for segment, info in zip(members, group, strict=True):
            fd = os.open(segment.log_path, log_segments.OPEN_READ)
            try:
                for header, data in _frames(fd, info.size, throttle):
                    result.bytes_read += header.size
                    kept = _kept_bytes(job, header, data, key_map, last_of_producer, result, txns)
                    if kept is None:
                        writer.drop(header, throttle)
                        changed |= header.record_count > 0 or header.producer_id >= 0
                    else:
                        changed |= kept is not data
                        writer.write(kept, throttle)
            finally:
                os.close(fd)
        writer.flush_run(throttle)
        writer.write_pending(throttle)
        os.fsync(writer.fd)
    except BaseException:
        os.close(writer.fd)
        cleaned_log.unlink(missing_ok=True)
        raise
    os.close(writer.fd)
    if not changed and len(members) == 1:
        cleaned_log.unlink()
        return None
    index = Segment(job.path, base)
    index.set_index(writer.headers, job.index_interval)
    durable_files.write_atomically(job.path / f"{base:020d}.index.cleaned", index.index_bytes())
    result.bytes_written += writer.size
    return CleanedSegment(
        base_offset=base,
        next_offset=group[-1].next_offset,
        size=writer.size,
        max_timestamp_ms=writer.max_timestamp,
        index_offsets=array("I", index.index_offsets),
        index_positions=array("I", index.index_positions),
        bytes_since_index=index.bytes_since_index,
    )


def _kept_bytes(  # noqa: PLR0913  the job, the batch, the map, then the tally and the scan
    job: CleanJob,
    header: BatchHeader,
    data: bytes | memoryview,
    key_map: KeyMap,
    last_of_producer: dict[int, int],
    result: CleanResult,
    txns: TxnScan,
) -> bytes | memoryview | None:
    """What the cleaned log keeps of one batch: `data` itself, a rebuilt batch, an empty batch
    (an idempotent producer's last), or None (dropped; an empty batch of an earlier cleaning
    joins the run of dropped batches around it).

    A transactional batch goes through `txns` (`jbod_core.txn_cleaning`): an aborted one loses
    every record, a marker is kept or removed as it decides. A batch in the mapped section none
    of whose offsets is the latest of a key is dropped without decoding its records:
    `keeps_record` drops each of them (a keyed record whose key has a later offset, or a keyless
    one); in a batch of the mapped section only the records at such offsets are asked about."""
    producers_last = (
        header.producer_id >= 0 and last_of_producer.get(header.producer_id) == header.base_offset
    )
    if header.record_count == 0:
        return data if producers_last else None
    if header.is_control:  # a producer's last marker stays whole (its producer's epoch), as on Kafka
        return data if _keeps_control(header, data, result, txns) or producers_last else None
    if not header.is_transactional:
        return _kept_data(job, header, data, key_map, producers_last, result)[0]
    if txns.aborted.aborted(header.producer_id, header.base_offset):
        txns.data_batch(header.producer_id, kept=False)
        result.records_removed += header.record_count
        return _emptied(header) if producers_last else None
    kept, survives = _kept_data(job, header, data, key_map, producers_last, result)
    txns.data_batch(header.producer_id, kept=survives)
    return kept


def _keeps_control(header: BatchHeader, data: bytes | memoryview, result: CleanResult, txns: TxnScan) -> bool:
    """Whether a control batch stays (`TxnScan.marker` for a transaction marker; another control
    type stays as it is); notes an abort's index entry to drop and when a kept marker may go."""
    try:
        marker = control_records.read_marker(data)
    except ValueError:
        return True
    decision = txns.marker(header.producer_id, timestamp_ms=header.max_timestamp_ms)
    if (
        marker.aborted
        and not decision.keep_index_entry
        and txns.aborted.has_marker(header.producer_id, header.base_offset)
    ):
        result.dropped_aborted.append((header.producer_id, header.base_offset))
    if not decision.keep:
        result.records_removed += 1
        return False
    if decision.due_ms is not None and (
        result.tombstones_due_ms is None or decision.due_ms < result.tombstones_due_ms
    ):
        result.tombstones_due_ms = decision.due_ms
    return True


def _emptied(header: BatchHeader) -> bytes:
    """The batch of `header` with no record (a producer's last batch, kept for its fields)."""
    return record_batch.empty_batch(
        base_offset=header.base_offset,
        last_offset_delta=header.last_offset_delta,
        leader_epoch=header.leader_epoch,
        timestamp_ms=header.max_timestamp_ms,
        attributes=header.attributes,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
    )


def _kept_data(  # noqa: PLR0913  the job, the batch, the map, then the tally
    job: CleanJob,
    header: BatchHeader,
    data: bytes | memoryview,
    key_map: KeyMap,
    producers_last: bool,
    result: CleanResult,
) -> tuple[bytes | memoryview | None, bool]:
    """`_kept_bytes` for a data batch with records, and whether a record of it survives."""
    mapped = key_map.maps(header)
    if mapped and key_map.latest_in(header) == 0:
        kept: list[record_batch.StoredRecord] = []
        result.records_removed += header.record_count
    else:
        records = record_batch.stored_records(data)
        if mapped:  # a record here is the latest of its key exactly when its offset is one
            latest_offsets = key_map.offset_set
            candidates = [record for record in records if record.offset in latest_offsets]
        else:
            candidates = records
        kept = _kept_records(job, header, candidates, key_map.latest)
        result.records_removed += len(records) - len(kept)
        _note_tombstones(job, header, kept, result)
        if len(kept) == len(records):
            return data, True
    if kept:
        return record_batch.rebuilt_batch(header, kept), True
    return (_emptied(header) if producers_last else None), False


def _note_tombstones(
    job: CleanJob, header: BatchHeader, kept: Sequence[record_batch.StoredRecord], result: CleanResult
) -> None:
    """Lower `result.tombstones_due_ms` to when the earliest kept tombstone may go."""
    for record in kept:
        if record.value is None:
            timestamp = header.max_timestamp_ms if header.log_append_time else record.timestamp
            due = timestamp + job.settings.delete_retention_ms
            if result.tombstones_due_ms is None or due < result.tombstones_due_ms:
                result.tombstones_due_ms = due


def _kept_records(
    job: CleanJob,
    header: BatchHeader,
    records: Sequence[record_batch.StoredRecord],
    latest: dict[bytes, int],
) -> list[record_batch.StoredRecord]:
    """The records of `records` the cleaned log keeps (`compaction.keeps_record`)."""
    settings, now_ms = job.settings, job.now_ms
    append_time = header.max_timestamp_ms if header.log_append_time else None
    return [
        record
        for record in records
        if compaction.keeps_record(
            offset=record.offset,
            has_key=record.key is not None,
            is_tombstone=record.value is None,
            timestamp_ms=record.timestamp if append_time is None else append_time,
            latest_offset=latest.get(record.key) if record.key is not None else None,
            now_ms=now_ms,
            settings=settings,
        )
    ]


# -- a cleaner's worker process --------------------------------------------------------------

_worker_stop: threading.Event | None = None


def start_worker(stop: threading.Event) -> None:
    """A cleaner process's initializer: `stop` (a `multiprocessing` Event the broker sets to stop
    it) ends a cleaning at its next batch."""
    global _worker_stop
    _worker_stop = stop
    os.nice(CLEANER_NICENESS)  # background work: the broker's own threads come first


def clean_in_worker(
    job: CleanJob, map_budget_bytes: int, bytes_per_second: float | None
) -> CleanResult | None:
    """`clean` in a cleaner process (`start_worker` ran), throttled to `bytes_per_second`."""
    assert _worker_stop is not None, "start_worker did not run"
    return clean(job, map_budget_bytes=map_budget_bytes, throttle=Throttle(bytes_per_second, _worker_stop))
