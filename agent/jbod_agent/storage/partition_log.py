"""The log of one replica as replication sees it: appends, reads, truncation, retention and flush
(Kafka's `UnifiedLog`).

`PartitionLog` composes the replica's local log (`local_log`: the segments of the replica dir
`<logdir>/<topic>-<partition>/`, their roll and recovery, appends and reads of stored batches,
truncation, the log start offset, flush) with its leader-epoch cache and checkpoint
(`epoch_cache`: its rules and its repair), and adds the high watermark and retention. The
replica dir's `partition.metadata` is left alone. It also keeps the transactions of the log, on
leaders and followers alike: the producers' state (`jbod_core.producer_state`), the aborted
transactions of each segment (`<base>.txnindex`, Kafka's format, `jbod_core.txn_index`) and the
last stable offset.

The epoch checkpoint is replaced without an fsync when it changes; `flush` fsyncs it and the dir
with the data (the local log's flush bookkeeping, `LocalLog.mark_changed`).

Guarantees:
* `open` recovers the local log (`LocalLog.recover`: damage is never dropped silently), then
  loads the epoch cache (`epoch_cache.LeaderEpochCache.load`, rebuilt from the batches when the
  checkpoint is damaged or stale) and trims it to [log start, end offset]: the cache names only
  epochs of offsets the log holds, after recovery and after every truncation and retention.
* `append_replicated` and the append methods validate everything before writing anything: a gap,
  an overlap, a lower epoch or a damaged frame raises `ValueError` with the log unchanged. A
  produced batch comes as a `record_batch.CheckedBatch`, the proof that Kafka's checks of it
  passed (`check_produced`, its only maker): the log relies on it and does not check it again.
* The high watermark stays within [log start, end offset]; retention never deletes data at or
  above it (nor the active segment: `local_log`).
* `producer_state` is the state `producer_state.from_batches` builds from the whole log (markers
  decoded with `control_records.read_marker`; empty control batches and other control types
  skipped): loaded on first use from the snapshot (`producers.read_snapshot`) and a replay of
  the batches after it, then kept by every append (`append_as_leader`, `append_marker_as_leader`,
  `append_replicated`: a marker loads it before it is appended); a truncation that removes
  anything drops it, to be rebuilt at the next use. `load_transactions_off_loop` is the same
  load with the replay in a worker thread (its own fds, up to the end offset of when it
  started; the batches appended meanwhile replayed on the loop after it; discarded when a
  truncation came meanwhile). An append that rolls a segment, with the state loaded, saves the
  snapshot at the new end offset (Kafka's snapshot at a roll): a load replays at most the
  active segment.
* `aborted_entries()` holds, for each segment, the aborted transactions whose marker is in it, in
  log order, and the `.txnindex` files hold exactly that once loaded: an abort marker's entry is
  appended to its segment's file; a load reads the entries of markers before the snapshot from
  the files (all rebuilt from the log start when one is damaged) and rebuilds the rest; retention,
  DeleteRecords and a cleaner's swap move the entries with their markers' segments and drop those
  of deleted segments (files removed at once); `drop_aborted` removes, durably, the entries a
  cleaning found without data (before it swaps). `aborted_transactions` is Kafka's collection for a
  fetch; `last_stable_offset` is `txn_index.last_stable_offset(first unstable offset, high
  watermark)`.
* KIP-890 part 1's guards (`start_verification`, `verification_holds`, `verifications`) are
  `jbod_core.txn_verification`'s, in memory only: every appended batch ends its producer's guard
  as `txn_verification.after_batch` says, and a truncation that drops the producer state drops
  them all.
* OSErrors propagate untouched (the caller classifies them and takes the disk offline), with the
  local log's guarantees after a failed write. Not thread-safe, except that `flush` may run in a
  worker thread while the event loop appends (`local_log`).
"""

from __future__ import annotations

import asyncio
import bisect
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Final

from jbod_agent.storage import epoch_cache, log_segments, producers
from jbod_agent.storage.local_log import (
    CleanedSegment,
    LocalLog,
    read_cleaner_checkpoint,
    write_cleaner_checkpoint,
)
from jbod_agent.storage.log_segments import Segment
from jbod_core import producer_state, txn_index, txn_verification
from jbod_core.producer_state import ProducerState
from jbod_core.txn_index import AbortedTxn
from jbod_kafka import control_records, record_batch
from jbod_kafka.record_batch import BatchHeader
from jbod_runtime import durable_files

TXN_INDEX_SUFFIX: Final = ".txnindex"
_TXN_INDEX_NAME: Final = re.compile(r"(\d{20})\.txnindex")


def txn_index_path(directory: Path, base_offset: int) -> Path:
    """The aborted-transactions index of the segment at `base_offset` (Kafka's `.txnindex`)."""
    return directory / f"{base_offset:020d}{TXN_INDEX_SUFFIX}"


class PartitionLog:
    """The log of one replica (see the module docstring); build it with `PartitionLog.open`."""

    def __init__(
        self,
        local: LocalLog,
        epochs: epoch_cache.LeaderEpochCache,
        *,
        retention_bytes: int,
        retention_ms: int,
    ) -> None:
        self._local = local
        self._epochs = epochs
        self.retention_bytes = retention_bytes
        self.retention_ms = retention_ms
        self._high_watermark = local.log_start_offset
        self._checkpoint_dirty = False  # an epoch of an empty log, not written yet
        self.flush_messages = 2**63 - 1  # `flush.messages`, Kafka's default: never forced
        self.flush_ms = 2**63 - 1  # `flush.ms`: the flush loop's bound per log
        self.last_flush_ms = 0  # when the last flush began (the agent's wall clock)
        self._unflushed_messages = 0
        # The producers' state and the aborted transactions by segment base offset: loaded on
        # first use (`_load_transactions`), then kept by every append, dropped by a truncation.
        self._producers: ProducerState | None = None
        self._first_unstable: int | None = None  # of `_producers`, kept with it (every fetch asks)
        self._aborted: dict[int, list[AbortedTxn]] = {}
        self.producers_changed = False  # since the last snapshot (`log_upkeep`)
        # KIP-890 part 1: the guards of the verifications in flight (in memory only).
        self._verifications = txn_verification.EMPTY
        self._loading: asyncio.Future[None] | None = None  # `load_transactions_off_loop`
        self._generation = 0  # of the transactions' state: a truncation starts a new one
        self._rolled = False  # the last append rolled a segment (`_track` snapshots the state)

    # -- opening -----------------------------------------------------------------------------

    @classmethod
    def open(  # noqa: PLR0913  the replica dir, its four segment and retention settings, the clock
        cls,
        path: Path,
        *,
        segment_bytes: int = 64 * 1024 * 1024,
        index_interval_bytes: int = 4096,
        retention_bytes: int = -1,
        retention_ms: int = -1,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> PartitionLog:
        """Recover the log in the replica dir `path` (see the module docstring); `monotonic`: the
        agent's clock (`Clock.monotonic`), which times the local log's delete delay."""
        local, last_batch_epoch = LocalLog.recover(
            path, segment_bytes=segment_bytes, index_interval_bytes=index_interval_bytes, monotonic=monotonic
        )
        epochs, rebuilt = epoch_cache.LeaderEpochCache.load(
            local.path, last_batch_epoch=last_batch_epoch, batch_epochs=local.batch_epochs
        )
        partition_log = cls(local, epochs, retention_bytes=retention_bytes, retention_ms=retention_ms)
        trimmed = epochs.truncate_from_start(local.log_start_offset)
        trimmed |= epochs.truncate_from_end(local.end_offset)
        if trimmed or rebuilt:
            partition_log._write_checkpoint()
        return partition_log

    # -- state ---------------------------------------------------------------------------------

    @property
    def path(self) -> Path:
        return self._local.path

    @property
    def log_start_offset(self) -> int:
        return self._local.log_start_offset

    @property
    def end_offset(self) -> int:
        """The log end offset (LEO): the offset the next record gets."""
        return self._local.end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, offset: int) -> None:
        self._high_watermark = min(max(offset, self._local.log_start_offset), self._local.end_offset)

    @property
    def latest_epoch(self) -> int:
        return self._epochs.latest_epoch

    @property
    def size_bytes(self) -> int:
        return self._local.size_bytes

    def epoch_entries(self) -> list[tuple[int, int]]:
        """(epoch, start offset) of every epoch in the cache, oldest first."""
        return self._epochs.entries()

    def epoch_end_offset(self, epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch, as Kafka answers it: (the largest cached epoch <= `epoch`, the
        start offset of the next cached epoch, or `end_offset` for the latest); (`epoch`, the first
        cached start offset) when `epoch` is below every cached epoch; (-1, -1) when the cache is
        empty, `epoch` is negative or above every cached epoch."""
        return self._epochs.end_offset_for(epoch, self._local.end_offset)

    def segment_paths(self) -> list[Path]:
        """The segment files (each `.log`, then its `.index` when it exists), oldest first."""
        return self._local.segment_paths()

    # -- appending -----------------------------------------------------------------------------

    def append_as_leader(
        self,
        batch: record_batch.CheckedBatch,
        *,
        leader_epoch: int,
        log_append_time_ms: int | None = None,
        now_ms: int | None = None,
    ) -> int:
        """Append one produced batch, given the end offset as base offset and `leader_epoch`;
        returns its base offset. A `CheckedBatch` passed Kafka's checks already
        (`record_batch.check_produced` is its only maker, run once by `Produce.append_batch`
        before the producer state's verdict, Kafka's order): they are not run again here. With
        `log_append_time_ms` the batch's timestamps become that LogAppendTime; `now_ms` lets
        `segment_ms` roll the active segment first."""
        self._check_leader_epoch(leader_epoch)
        base_offset = self._local.end_offset
        rewritten = record_batch.with_base_offset(
            batch.data, base_offset, leader_epoch=leader_epoch, log_append_time_ms=log_append_time_ms
        )
        header = record_batch.read_header(rewritten)
        if leader_epoch > self.latest_epoch:
            self.assign_epoch_start(leader_epoch)
        self._append(rewritten, (header,), now_ms=now_ms)
        self._track(rewritten, (header,), now_ms=now_ms)
        return base_offset

    def append_marker_as_leader(self, marker: bytes, *, leader_epoch: int, now_ms: int) -> int:
        """Append an end-transaction marker batch (`control_records.marker_batch`, checked by the
        caller against `producer_state` first) as the leader; returns its offset. Its
        transaction's entry goes to the `.txnindex` of its segment when it is an abort."""
        self._check_leader_epoch(leader_epoch)
        control_records.read_marker(marker)  # ValueError before anything is written
        self.producer_state  # noqa: B018  loaded before the marker: it completes a transaction
        base_offset = self._local.end_offset
        rewritten = record_batch.with_base_offset(marker, base_offset, leader_epoch=leader_epoch)
        header = record_batch.read_header(rewritten)
        if leader_epoch > self.latest_epoch:
            self.assign_epoch_start(leader_epoch)
        self._append(rewritten, (header,), now_ms=now_ms)
        self._track(rewritten, (header,), now_ms=now_ms)
        return base_offset

    def append_replicated(self, data: bytes | memoryview, *, now_ms: int | None = None) -> int:
        """Append frames fetched from the leader (contiguous, starting at the end offset); returns
        the new end offset. Epochs above the latest are recorded at their frame's base offset.

        Raises ValueError (`CorruptBatchError` for damage) without writing anything when a frame
        is damaged, the frames do not start at the end offset or are not contiguous, or an epoch
        goes backwards.
        """
        self._local.check_open()
        headers = list(record_batch.iter_headers(data))
        start = self._local.log_start_offset
        if (
            headers
            and self._local.end_offset == start
            and headers[0].base_offset < start < headers[0].next_offset
        ):
            # An empty log starting inside the leader's first batch (the leader's log start was
            # moved there by DeleteRecords): start at the batch, keep the log start (as Kafka).
            self.truncate_fully_and_start_at(headers[0].base_offset)
            end = self.append_replicated(data, now_ms=now_ms)
            self.delete_records_before(start)
            return end
        expected = self._local.end_offset
        latest = self.latest_epoch
        new_epochs: list[tuple[int, int]] = []
        for header in headers:
            if header.base_offset != expected:
                raise ValueError(
                    f"Frame at byte {header.position} has base offset {header.base_offset}, expected {expected}"
                )
            if header.leader_epoch < latest:
                raise ValueError(
                    f"Frame at offset {header.base_offset} has leader epoch {header.leader_epoch}, "
                    f"below the latest epoch {latest}"
                )
            if header.leader_epoch > latest:
                latest = header.leader_epoch
                new_epochs.append((header.leader_epoch, header.base_offset))
            expected = header.next_offset
        if not headers:
            return self._local.end_offset
        if any(h.is_control for h in headers):
            self.producer_state  # noqa: B018  loaded before a marker: it completes a transaction
        if new_epochs:
            for epoch, start in new_epochs:
                self._epochs.assign(epoch, start)
            self._write_checkpoint()
        self._append(data, headers, now_ms=now_ms)
        self._track(data, headers, now_ms=None)
        return self._local.end_offset

    def assign_epoch_start(self, leader_epoch: int) -> None:
        """Record that `leader_epoch` starts at the end offset (a new leader does this before its
        first append, as Kafka's `maybeAssignEpochStartOffset`); a no-op for the latest epoch."""
        self._check_leader_epoch(leader_epoch)
        if leader_epoch > self.latest_epoch:
            local = self._local
            self._epochs.assign(leader_epoch, local.end_offset)
            if local.end_offset == local.log_start_offset:
                # Nothing in the log to disagree about: persisted with the first append or at
                # close (a broker taking over thousands of empty partitions writes no files).
                self._checkpoint_dirty = True
                local.mark_changed()
            else:
                self._write_checkpoint()

    def _check_leader_epoch(self, leader_epoch: int) -> None:
        self._local.check_open()
        if leader_epoch < 0:
            raise ValueError(f"Leader epoch must be >= 0, got {leader_epoch}")
        if leader_epoch < self.latest_epoch:
            raise ValueError(f"Leader epoch {leader_epoch} is below the latest epoch {self.latest_epoch}")

    def _append(
        self,
        data: bytes | bytearray | memoryview,
        headers: Sequence[BatchHeader],
        *,
        now_ms: int | None = None,
    ) -> None:
        """Write validated, contiguous frames to the local log, after the epoch checkpoint that an
        empty log's first epoch still owes."""
        if self._checkpoint_dirty:
            self._write_checkpoint()
        segments = self._local.segment_count
        self._local.append(data, headers, now_ms=now_ms)
        self._rolled = self._local.segment_count != segments
        self._unflushed_messages += sum(h.record_count for h in headers)

    # -- reading -------------------------------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int, *, max_offset: int | None = None, min_one: bool = True
    ) -> bytes:
        """Raw whole frames from the one containing `offset` (`LocalLog.read`: at most `max_bytes`
        but at least one with `min_one`, below `max_offset`); outside [log_start_offset,
        end_offset] it raises OffsetOutOfRangeError."""
        return self._local.read(offset, max_bytes, max_offset=max_offset, min_one=min_one)

    # -- truncation and retention --------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove every offset >= `offset` (or >= the base offset of the frame holding it); the
        high watermark and the epoch cache follow."""
        before = self._local.end_offset
        self._local.truncate_to(offset)
        end = self._local.end_offset
        self._high_watermark = min(self._high_watermark, end)
        if end < before:
            self._forget_transactions()
        if self._epochs.truncate_from_end(end):
            self._write_checkpoint()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and the epoch cache; the log is empty and starts at `offset`, also
        after reopening (an empty segment file with that base offset records it)."""
        self._local.truncate_fully_and_start_at(offset)
        self._high_watermark = offset
        self._forget_transactions()
        if self._epochs or epoch_cache.checkpoint_path(self._local.path).exists():
            self._epochs.clear()
            self._write_checkpoint()

    def delete_records_before(self, offset: int) -> int:
        """Kafka's DeleteRecords on this replica: the log start moves up to `offset` (at most the
        end offset; never down), the high watermark and the epoch cache follow. Returns the log
        start after it."""
        local = self._local
        local.advance_log_start(min(offset, local.end_offset))
        self._high_watermark = max(self._high_watermark, local.log_start_offset)
        if self._epochs.truncate_from_start(local.log_start_offset):
            self._write_checkpoint()
        self._regroup_aborted()
        return local.log_start_offset

    def apply_retention(self, now_ms: int) -> int:
        """Delete the oldest segments while the log is over `retention_bytes` (when >= 0) or their
        newest batch is older than `retention_ms` (when >= 0); never the active segment nor one
        holding offsets at or above the high watermark. Returns how many were deleted."""
        local = self._local

        def expired(segment: Segment) -> bool:
            if segment.next_offset > self._high_watermark:
                return False
            over_size = 0 <= self.retention_bytes < local.size_bytes
            return over_size or (
                self.retention_ms >= 0 and local.max_timestamp(segment) < now_ms - self.retention_ms
            )

        deleted = local.delete_old_segments(expired)
        if deleted and self._epochs.truncate_from_start(local.log_start_offset):
            self._write_checkpoint()
        if deleted:
            self._regroup_aborted()
        return deleted

    @property
    def segment_bytes(self) -> int:
        """The size at which the active segment rolls (a topic config change applies at once)."""
        return self._local.segment_bytes

    @segment_bytes.setter
    def segment_bytes(self, value: int) -> None:
        self._local.segment_bytes = value

    @property
    def segment_ms(self) -> int | None:
        """The topic's `segment.ms`: appends given the time roll an active segment older than it."""
        return self._local.roll_ms

    @segment_ms.setter
    def segment_ms(self, value: int | None) -> None:
        self._local.roll_ms = value

    # -- the topic's storage configs and forced flushes ------------------------------------------

    def apply_storage_configs(  # noqa: PLR0913  one keyword per topic config
        self,
        *,
        index_interval_bytes: int,
        segment_index_bytes: int,
        segment_jitter_ms: int,
        file_delete_delay_ms: int,
        flush_messages: int,
        flush_ms: int,
        preallocate: bool,
    ) -> None:
        """The topic's `index.interval.bytes`, `segment.index.bytes`, `segment.jitter.ms`,
        `file.delete.delay.ms`, `flush.messages`, `flush.ms` and `preallocate` (a change applies to
        an open log at once)."""
        local = self._local
        local.index_interval_bytes = index_interval_bytes
        local.max_index_entries = max(1, segment_index_bytes // log_segments.INDEX_ENTRY.size)
        local.roll_jitter_max_ms = segment_jitter_ms
        local.delete_delay_ms = file_delete_delay_ms
        local.preallocate = preallocate
        self.flush_messages = flush_messages
        self.flush_ms = flush_ms

    @property
    def flush_due(self) -> bool:
        """`flush.messages` records were appended since the last flush began: the appender
        flushes before it acknowledges (Kafka's forced flush)."""
        return self._unflushed_messages >= self.flush_messages

    def flush_starting(self, now_ms: int) -> None:
        """A flush of everything appended so far is about to run (called on the event loop)."""
        self._unflushed_messages = 0
        self.last_flush_ms = now_ms

    def purge_deleted(self) -> int:
        """Remove deleted segments' files once `file.delete.delay.ms` passed (`LocalLog`)."""
        return self._local.purge_deleted()

    # -- compaction (storage.log_cleaner writes, the event loop swaps) ---------------------------

    @property
    def closed(self) -> bool:
        return self._local.closed

    @property
    def index_interval_bytes(self) -> int:
        return self._local.index_interval_bytes

    def cleaner_checkpoint(self) -> tuple[int, int | None]:
        """The cleaner's first dirty offset and when a tombstone it kept may go (`local_log`)."""
        return read_cleaner_checkpoint(self._local.path)

    def record_cleaning(self, first_dirty: int, tombstones_due_ms: int | None) -> None:
        """Record where the last cleaning stopped and when a tombstone it kept may go."""
        write_cleaner_checkpoint(self._local.path, first_dirty, tombstones_due_ms)

    def note_max_timestamps(
        self, segments: Sequence[Segment], sizes: Sequence[int], newest: Sequence[int]
    ) -> None:
        """Keep the newest timestamps a cleaner read of `segments` (at `sizes`): a segment whose
        own is not known yet and that still has that size takes it, so no round reads it again."""
        for segment, size, timestamp in zip(segments, sizes, newest, strict=True):
            if segment.max_timestamp_ms is None and segment.size == size:
                segment.max_timestamp_ms = timestamp

    def segments(self) -> tuple[Segment, ...]:
        """The segments, oldest first, the last being the active one (`LocalLog.segments`)."""
        return self._local.segments()

    def swap_cleaned(self, members: Sequence[Segment], cleaned: CleanedSegment) -> list[Path] | None:
        """Swap a cleaned segment in for `members` (`LocalLog.swap_cleaned`: the old files to
        remove, or None when refused): offsets, epochs and the high watermark are unchanged."""
        removed = self._local.swap_cleaned(members, cleaned)
        if removed is not None:
            self._regroup_aborted()
        return removed

    # -- transactions: producer state, aborted-transactions index, last stable offset -----------

    @property
    def producer_state(self) -> ProducerState:
        """The producers' state of the whole log (loaded on first use: the module docstring)."""
        if self._producers is None:
            self._load_transactions()
        assert self._producers is not None
        return self._producers

    @producer_state.setter
    def producer_state(self, state: ProducerState) -> None:
        """Replace the state by one derived from it without a batch (`producer_state.expire`)."""
        self._set_producers(state)

    def _set_producers(self, state: ProducerState) -> None:
        self._producers = state
        self._first_unstable = producer_state.first_unstable_offset(state)

    def start_verification(self, batch: BatchHeader) -> txn_verification.Guard | None:
        """The guard of a verification with the coordinator that the transactional `batch` needs
        before it may start a transaction here, or None when its producer has an ongoing
        transaction of its epoch (`txn_verification`)."""
        producer_id, epoch = batch.producer_id, batch.producer_epoch
        if not txn_verification.needs_verification(self.producer_state, producer_id, epoch):
            return None
        self._verifications, guard = txn_verification.start(
            self._verifications, producer_id, epoch, batch.base_sequence
        )
        return guard

    @property
    def verifications(self) -> txn_verification.Verifications:
        """The guards of the verifications of this partition's producers (`txn_verification`)."""
        return self._verifications

    def verification_holds(
        self, producer_id: int, producer_epoch: int, guard: txn_verification.Guard
    ) -> bool:
        """Whether a batch verified with `guard` may be appended now (`txn_verification.may_append`)."""
        return txn_verification.may_append(
            self.producer_state, self._verifications, producer_id, producer_epoch, guard
        )

    @property
    def transactions_loaded(self) -> bool:
        return self._producers is not None

    @property
    def first_unstable_offset(self) -> int | None:
        """The smallest first offset of an ongoing transaction (`producer_state`), or None."""
        self.producer_state  # noqa: B018  loaded on first use
        return self._first_unstable

    @property
    def last_stable_offset(self) -> int:
        """The LSO: the first unstable offset capped by the high watermark (`txn_index`)."""
        return txn_index.last_stable_offset(self.first_unstable_offset, self._high_watermark)

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions a read_committed fetch of [`fetch_offset`, `upper_bound`)
        answers: Kafka's collection over the indexes of the segments from the one holding
        `fetch_offset`, until a search is complete."""
        self.producer_state  # noqa: B018  the indexes load with the state
        found: list[AbortedTxn] = []
        bases = [s.base_offset for s in self._local.segments()]
        start = 0
        for i, base in enumerate(bases):
            if base <= fetch_offset:
                start = i
        for base in bases[start:]:
            result = txn_index.collect_aborted(
                self._aborted.get(base, ()), fetch_offset=fetch_offset, upper_bound=upper_bound
            )
            found.extend(result.aborted)
            if result.complete:
                break
        return found

    def drop_aborted(self, markers: Sequence[tuple[int, int]]) -> None:
        """Remove the index entries of aborted transactions a cleaning found without data, by
        (producer id, marker offset), durably (fsynced before the caller swaps the cleaned
        segment in: an entry never outlives its marker, even across a crash)."""
        self.producer_state  # noqa: B018  the indexes load with the state
        doomed = set(markers)
        directory = self._local.path
        for base, entries in list(self._aborted.items()):
            kept = [e for e in entries if (e.producer_id, e.last_offset) not in doomed]
            if len(kept) == len(entries):
                continue
            path = txn_index_path(directory, base)
            if kept:
                self._aborted[base] = kept
                durable_files.write_atomically(path, txn_index.encode_entries(kept))
            else:
                del self._aborted[base]
                path.unlink(missing_ok=True)
                durable_files.fsync_directory(directory)

    def aborted_entries(self) -> dict[int, tuple[AbortedTxn, ...]]:
        """Every segment's aborted-transactions index entries, by segment base offset."""
        self.producer_state  # noqa: B018
        return {base: tuple(entries) for base, entries in self._aborted.items() if entries}

    def _marker_of(
        self, data: bytes | bytearray | memoryview, header: BatchHeader
    ) -> control_records.Marker | None:
        """The end-transaction marker of a control batch, or None (an empty control batch a
        cleaning left, or another control type: skipped, as Kafka's producer state skips them)."""
        if header.record_count == 0:
            return None
        try:
            return control_records.read_marker(data)
        except ValueError:
            return None

    def _step(
        self,
        state: ProducerState,
        data: bytes | bytearray | memoryview,
        header: BatchHeader,
        now_ms: int,
    ) -> tuple[ProducerState, AbortedTxn | None]:
        """`state` after one batch (its frame `data`), and the aborted transaction it completes."""
        if header.producer_id < 0:
            return state, None
        if not header.is_control:
            return producer_state.record(state, header, first_offset=header.base_offset, now_ms=now_ms), None
        marker = self._marker_of(data, header)
        if marker is None:
            return state, None
        done = producer_state.completed_txn(state, marker, offset=header.base_offset)
        state = producer_state.record(state, marker, first_offset=header.base_offset, now_ms=now_ms)
        if done is None or not done.aborted:
            return state, None
        return state, txn_index.aborted_txn(
            producer_id=done.producer_id,
            first_offset=done.first_offset,
            last_offset=done.last_offset,
            first_unstable_offset=producer_state.first_unstable_offset(state),
        )

    def _track(
        self, data: bytes | bytearray | memoryview, headers: Sequence[BatchHeader], *, now_ms: int | None
    ) -> None:
        """Record appended frames in the loaded state; an abort's entry goes to its segment's
        `.txnindex` (appended, fsynced with the segment by the next flush)."""
        state = self._producers
        if state is None:
            return
        view = memoryview(data)
        start = headers[0].position if headers else 0
        for header in headers:
            if header.producer_id < 0:
                continue
            frame = view[header.position - start : header.position - start + header.size]
            state, aborted = self._step(
                state, frame, header, header.max_timestamp_ms if now_ms is None else now_ms
            )
            self.producers_changed = True
            self._verifications = txn_verification.after_batch(self._verifications, header)
            if aborted is not None:
                self._append_aborted(aborted)
        if state is not self._producers:
            self._set_producers(state)
        if self._rolled:  # Kafka's snapshot at a roll: a load replays at most the active segment
            self._rolled = False
            producers.save(self, state)

    def _segment_base_of(self, offset: int) -> int | None:
        base = None
        for segment in self._local.segments():
            if segment.base_offset > offset:
                break
            base = segment.base_offset
        return base if offset < self._local.end_offset else None

    def _append_aborted(self, entry: AbortedTxn) -> None:
        base = self._segment_base_of(entry.last_offset)
        if base is None:
            return
        self._aborted.setdefault(base, []).append(entry)
        path = txn_index_path(self._local.path, base)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        try:
            log_segments.write_all(fd, txn_index.encode_entries([entry]))
        finally:
            os.close(fd)
        self._local.mark_changed(path, self._local.path)

    def _forget_transactions(self) -> None:
        """A truncation: the state and the indexes are rebuilt from the log on next use."""
        self._producers = None
        self._aborted = {}
        self._verifications = txn_verification.EMPTY
        self._generation += 1  # a load running in a thread is discarded

    def _read_txn_indexes(self) -> dict[int, list[AbortedTxn]] | None:
        """The entries of every `.txnindex` in the replica dir, or None when one is damaged."""
        found: dict[int, list[AbortedTxn]] = {}
        for name in os.listdir(self._local.path):
            match = _TXN_INDEX_NAME.fullmatch(name)
            if match is None:
                continue
            try:
                entries = txn_index.decode_entries((self._local.path / name).read_bytes())
            except ValueError:
                return None
            found[int(match[1])] = list(entries)
        return found

    def _load_transactions(self) -> None:
        """Build the state from the snapshot (or the log start) and replay the batches after it;
        the index entries of markers before that point are read from the `.txnindex` files
        (all rebuilt from the log start when one is damaged), the rest rebuilt by the replay."""
        indexes = self._read_txn_indexes()
        if indexes is None:  # damaged: every file goes, all entries are rebuilt from the log start
            for name in os.listdir(self._local.path):
                if _TXN_INDEX_NAME.fullmatch(name):
                    (self._local.path / name).unlink()
        snapshot = producers.read_snapshot(self) if indexes is not None else None
        start, state = (
            snapshot if snapshot is not None else (self._local.log_start_offset, producer_state.EMPTY)
        )
        kept = [e for entries in (indexes or {}).values() for e in entries if e.last_offset < start]
        state = self._replay_on_loop(state, start, kept)
        self._install(state, kept, indexes or {})

    def _replay_on_loop(self, state: ProducerState, start: int, found: list[AbortedTxn]) -> ProducerState:
        """`state` after every batch from `start` to the end (their aborted entries to `found`)."""
        for header in self._local.batch_headers(start):
            data: bytes | None = None
            if header.is_control and header.producer_id >= 0:
                data = self._local.read(header.base_offset, header.size, max_offset=header.next_offset)[
                    : header.size
                ]
            state, aborted = self._step(state, data or b"", header, header.max_timestamp_ms)
            if aborted is not None:
                found.append(aborted)
        return state

    async def load_transactions_off_loop(self) -> None:
        """Load the producers' state and aborted index as `producer_state`'s first use does, but
        replay the batches after the snapshot in a worker thread (own fds, up to the end offset
        of when it started), then the few appended meanwhile on the event loop. Concurrent
        callers share one load. A replay that fails (a segment deleted or renamed meanwhile), a
        truncation meanwhile, or a damaged `.txnindex` leave the load to the next synchronous use."""
        if self._producers is not None:
            return
        if self._loading is None or self._loading.done():
            self._loading = asyncio.ensure_future(self._load_in_thread())
        await asyncio.shield(self._loading)

    async def _load_in_thread(self) -> None:
        generation = self._generation
        try:
            indexes = self._read_txn_indexes()
            if indexes is None or self._local.closed:
                return  # a damaged index is repaired by the synchronous load
            snapshot = producers.read_snapshot(self)
            start, state = (
                snapshot if snapshot is not None else (self._local.log_start_offset, producer_state.EMPTY)
            )
            end = self._local.end_offset
            first = next(self._local.batch_headers(start), None)
            found: list[AbortedTxn] = []
            if first is not None and first.base_offset < end:
                segments = [s for s in self._local.segments() if s.base_offset < end]
                holding = bisect.bisect_right([s.base_offset for s in segments], first.base_offset) - 1
                files = [
                    (s.log_path, first.position if s is segments[holding] else 0, s.size)
                    for s in segments[holding:]
                ]
                state, found = await asyncio.to_thread(self._replay_files, state, files, end)
        except (OSError, ValueError):
            return  # left to the synchronous load (which reports an I/O error to its caller)
        if self._generation != generation or self._producers is not None or self._local.closed:
            return
        kept = [e for entries in indexes.values() for e in entries if e.last_offset < start]
        kept += found
        state = self._replay_on_loop(state, end, kept)
        self._install(state, kept, indexes)

    def _replay_files(
        self, state: ProducerState, files: Sequence[tuple[Path, int, int]], end: int
    ) -> tuple[ProducerState, list[AbortedTxn]]:
        """The replay of the batches below `end` in `files` ((path, from byte, to byte), in log
        order), on fds of its own: safe in a worker thread (the state and `_step` are pure)."""
        found: list[AbortedTxn] = []
        for path, position, size in files:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                for header in log_segments.walk_headers(fd, position, size):
                    if header.base_offset >= end:
                        return state, found
                    data = b""
                    if header.is_control and header.producer_id >= 0:
                        data = os.pread(fd, header.size, header.position)
                    state, aborted = self._step(state, data, header, header.max_timestamp_ms)
                    if aborted is not None:
                        found.append(aborted)
            finally:
                os.close(fd)
        return state, found

    def _install(
        self, state: ProducerState, kept: list[AbortedTxn], indexes: dict[int, list[AbortedTxn]]
    ) -> None:
        """Take a loaded state and its aborted entries; the `.txnindex` files follow."""
        self._set_producers(state)
        self._aborted = {}
        for entry in sorted(kept, key=lambda e: e.last_offset):
            base = self._segment_base_of(entry.last_offset)
            if base is not None:
                self._aborted.setdefault(base, []).append(entry)
        self._write_txn_indexes(indexes)

    def _regroup_aborted(self) -> None:
        """After segments were deleted or merged: every entry in the index of the segment
        holding its marker, entries of deleted segments dropped, files following."""
        if self._producers is None:
            return
        entries = sorted((e for es in self._aborted.values() for e in es), key=lambda e: e.last_offset)
        on_disk = {base: list(es) for base, es in self._aborted.items()}
        self._aborted = {}
        for entry in entries:
            base = self._segment_base_of(entry.last_offset)
            if base is not None and entry.last_offset >= self._local.log_start_offset:
                self._aborted.setdefault(base, []).append(entry)
        self._write_txn_indexes(on_disk)

    def _write_txn_indexes(self, on_disk: dict[int, list[AbortedTxn]]) -> None:
        """Make the `.txnindex` files hold `_aborted` (files of no entry removed)."""
        directory = self._local.path
        for base in set(on_disk) - set(self._aborted):
            txn_index_path(directory, base).unlink(missing_ok=True)
        changed = False
        for base, entries in self._aborted.items():
            if on_disk.get(base) != entries:
                path = txn_index_path(directory, base)
                durable_files.replace_atomically(path, txn_index.encode_entries(entries))
                self._local.mark_changed(path)
                changed = True
        if changed or set(on_disk) - set(self._aborted):
            self._local.mark_changed(directory)

    # -- batch headers (producer state) --------------------------------------------------------

    def batch_headers(self, start_offset: int) -> Iterator[BatchHeader]:
        """The headers of every batch from the one holding `start_offset` to the end, in order
        (positions within their segment); nothing when `start_offset` is at or past the end."""
        return self._local.batch_headers(start_offset)

    def batch_before(self, offset: int) -> BatchHeader | None:
        """The header of the batch holding `offset - 1` (None at or before the log start)."""
        return self._local.batch_before(offset)

    # -- timestamps (ListOffsets) --------------------------------------------------------------

    def offset_for_timestamp(self, timestamp_ms: int, *, max_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record below `max_offset` whose timestamp is at
        least `timestamp_ms`, or None: Kafka's ListOffsets by timestamp."""
        return self._local.offset_for_timestamp(timestamp_ms, max_offset=max_offset)

    def offset_of_max_timestamp(self, *, max_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record below `max_offset` carrying the largest
        timestamp (Kafka's ListOffsets MAX_TIMESTAMP, KIP-734), or None for an empty log."""
        return self._local.offset_of_max_timestamp(max_offset=max_offset)

    # -- epoch checkpoint ----------------------------------------------------------------------

    def _write_checkpoint(self) -> None:
        """Replace the checkpoint atomically, without fsync; the next `flush` makes it durable
        (`epoch_cache` says why, and how `LeaderEpochCache.load` repairs what a crash left)."""
        self._checkpoint_dirty = False
        checkpoint = self._epochs.write(self._local.path)
        self._local.mark_changed(checkpoint, self._local.path)

    # -- durability and lifecycle --------------------------------------------------------------

    def write_index(self) -> None:
        """Write the index entries held in memory only (`LocalLog.write_index`); on the event
        loop, before a `flush` in a worker thread."""
        self._local.write_index()

    def flush(self) -> None:
        """fsync what changed since the last flush: the segments, the epoch checkpoint, and the
        dir when entries changed (`LocalLog.flush`; safe from a worker thread)."""
        self._local.flush()

    def relocate(self, path: Path) -> None:
        """The replica directory was renamed to `path` on the same filesystem: follow it, without
        reopening or rescanning anything (`LocalLog.relocate`)."""
        self._local.relocate(path)

    def close(self) -> None:
        """Close every fd (without fsync: call `flush` first for durability). Idempotent."""
        if self._local.closed:
            return
        try:
            if self._checkpoint_dirty:
                self._write_checkpoint()
        finally:
            self._local.close()

    def __enter__(self) -> PartitionLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        local = self._local
        return f"PartitionLog({str(local.path)!r}, start={local.log_start_offset}, end={local.end_offset})"
