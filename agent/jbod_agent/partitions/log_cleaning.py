"""The log cleaner of each log dir: compaction as a JBOD feature (Kafka's `LogCleaner`, per disk).

Every `log.cleaner.backoff.ms` (the `log.cleaner.*` settings are read each round: dynamic over
server.properties; `log.cleaner.enable=false` pauses the cleaners), each log dir with hosted
replicas of compacted topics gets a cleaning round: its logs are checked one after the other (in a
thread: segment headers at most), and each that needs it is cleaned in the dir's own worker
process (spawned when one of the dir's compacted logs first has a segment besides its active
one, at a lower priority than the broker; a dir's cleaning takes a core of its own and never
holds the broker's interpreter lock; `storage.log_cleaner.clean`, on `jbod_core.compaction`'s
decisions), each cleaned segment swapped in on the event loop (`PartitionLog.swap_cleaned`), then the log's first dirty
offset recorded.

Guarantees:
* One cleaner per dir: a dir's cleaning never waits for another dir's; its I/O goes through its
  own throttle (`log.cleaner.io.max.bytes.per.second`, per dir) and its key map is bounded by
  `log.cleaner.dedupe.buffer.size`.
* An I/O error while cleaning goes through `ReplicaManager.storage_error` (the dir goes offline
  as KIP-112 has it; a full dir keeps its replicas) and stops that dir's cleaner only
  (`DirCleaner.state` FAILED), as does the dir going offline for any other reason
  (`dir_failed`); the other dirs keep cleaning.
* A cleaned segment is swapped in only if the log is still the hosted one and unchanged where it
  was cleaned (`LocalLog.swap_cleaned` checks); otherwise the work is dropped and done again on
  the next round. Only the event loop changes a log.
* A job holds the log's last stable offset (nothing at or above it is cleaned) and its aborted
  transactions; the abort entries a cleaning found without data are dropped from the
  `.txnindex`, durably, before its segments are swapped in (`PartitionLog.drop_aborted`).
* Each dir's state, runs, bytes read and written, records removed, bytes freed, the last run's time and the
  dirtiest ratio seen are kept in `DirCleaner` for the metrics and `jbodctl log-dirs`.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from jbod_agent import dynamic_configs
from jbod_agent.partitions.replica_manager import HostedPartition, ReplicaManager
from jbod_agent.ports import Clock, wall_ms
from jbod_agent.storage import log_cleaner
from jbod_agent.storage.log_cleaner import CleanerStoppedError, CleanJob, CleanResult
from jbod_core import broker_configs, compaction
from jbod_core.ids import Uuid

log = logging.getLogger("jbod_agent.cleaner")


class CleanerState(enum.Enum):
    IDLE = "idle"
    CLEANING = "cleaning"
    FAILED = "failed"  # an I/O error: this dir's cleaner stopped
    STOPPED = "stopped"  # the broker is stopping


_SPAWN: Final = multiprocessing.get_context("spawn")  # never fork a process with threads


@dataclass(eq=False)
class DirCleaner:
    """One dir's cleaner: its worker process (started when it first has work), its stop signal
    and tallies (written on the event loop)."""

    directory_id: Uuid
    stop: Any = field(default_factory=_SPAWN.Event)  # a multiprocessing Event its worker watches
    worker: ProcessPoolExecutor | None = field(default=None, repr=False)
    state: CleanerState = CleanerState.IDLE
    runs: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    bytes_freed: int = 0
    last_run_ms: int | None = None
    max_dirty_ratio: float = 0.0
    cleaning: str | None = None  # the partition being cleaned
    task: asyncio.Task[None] | None = field(default=None, repr=False)

    def process(self) -> ProcessPoolExecutor:
        """The dir's worker process, started on first use (a spawned interpreter)."""
        if self.worker is None:
            self.worker = ProcessPoolExecutor(
                1, mp_context=_SPAWN, initializer=log_cleaner.start_worker, initargs=(self.stop,)
            )
        return self.worker

    def warm(self) -> None:
        """Start the worker process ahead of its first cleaning (a spawned interpreter takes a
        moment to start): done once a dir's log has a segment besides its active one."""
        if self.worker is None:
            self.process().submit(os.getpid)

    def shutdown(self) -> None:
        self.stop.set()
        if self.worker is not None:
            self.worker.shutdown(wait=False, cancel_futures=True)
            self.worker = None


def _remove(paths: list[Path]) -> None:
    """Remove replaced segments' files (an error only leaves a `.deleted` file recovery removes)."""
    for path in paths:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)


class LogCleaning:
    """The dirs' cleaners (see the module docstring)."""

    def __init__(self, manager: ReplicaManager, *, clock: Clock) -> None:
        self.manager = manager
        self.clock = clock
        self.cleaners: dict[Uuid, DirCleaner] = {}
        self._removals: set[asyncio.Task[None]] = set()  # replaced segments' files being removed

    def _cleaner(self, directory_id: Uuid) -> DirCleaner:
        cleaner = self.cleaners.get(directory_id)
        if cleaner is None:
            cleaner = self.cleaners[directory_id] = DirCleaner(directory_id)
        return cleaner

    def settings(self) -> broker_configs.CleanerSettings:
        """The `log.cleaner.*` settings now (dynamic over server.properties over Kafka's)."""
        state = self.manager.state
        return dynamic_configs.cleaner_settings(state.config, state.image)

    async def run_forever(self) -> None:
        state = self.manager.state
        try:
            while not state.stopping.is_set():
                settings = self.settings()
                await self.clock.sleep(settings.backoff_ms / 1000)
                if settings.enable:
                    self.start_round()
        finally:
            self.close()

    def start_round(self) -> None:
        """Start a cleaning round in every dir with compacted logs whose cleaner is idle."""
        by_dir: dict[Uuid, list[HostedPartition]] = {}
        for hosted in self.manager.partitions.values():
            if hosted.compacted:
                by_dir.setdefault(hosted.directory_id, []).append(hosted)
        for directory_id, logs in by_dir.items():
            cleaner = self._cleaner(directory_id)
            if cleaner.state is CleanerState.IDLE and (cleaner.task is None or cleaner.task.done()):
                cleaner.task = asyncio.create_task(self._round(cleaner, logs))

    async def _round(self, cleaner: DirCleaner, logs: list[HostedPartition]) -> None:
        settings = self.settings()
        for hosted in logs:
            if cleaner.state is not CleanerState.IDLE:
                return
            if self.manager.partitions.get(hosted.key) is not hosted:
                continue
            if not hosted.log.transactions_loaded and not hosted.log.closed:
                await hosted.log.load_transactions_off_loop()  # the job reads the LSO and aborts
            if self.manager.partitions.get(hosted.key) is not hosted:
                continue
            job = self._job(hosted)
            if job is None:
                continue
            cleaner.state, cleaner.cleaning = CleanerState.CLEANING, hosted.name
            try:
                await self._clean_log(cleaner, hosted, job, settings)
            finally:
                cleaner.cleaning = None
                if cleaner.state is CleanerState.CLEANING:
                    cleaner.state = CleanerState.IDLE

    async def _clean_log(
        self,
        cleaner: DirCleaner,
        hosted: HostedPartition,
        job: CleanJob,
        settings: broker_configs.CleanerSettings,
    ) -> None:
        """Clean one log if it needs it; an error sets the cleaner's state (FAILED, STOPPED) or
        is logged, as the module docstring says."""
        manager = self.manager
        partition_log = hosted.log
        try:
            # The check reads segment headers at most: in a thread; the cleaning itself in the
            # dir's own process.
            if len(job.segments) > 1:
                cleaner.warm()
            found = await asyncio.to_thread(log_cleaner.plan, job)
            partition_log.note_max_timestamps(
                job.segments, found.sizes, [info.max_timestamp_ms for info in found.infos]
            )
            if not found.needed:
                return
            result = await asyncio.get_running_loop().run_in_executor(
                cleaner.process(),
                log_cleaner.clean_in_worker,
                job,
                settings.dedupe_buffer_size,
                settings.io_max_bytes_per_second,
            )
            if (
                result is not None
                and manager.partitions.get(hosted.key) is hosted
                and hosted.log is partition_log
            ):
                self._commit(cleaner, hosted, job, result)
        except CleanerStoppedError:
            if cleaner.state is not CleanerState.FAILED:
                cleaner.state = CleanerState.STOPPED
        except BrokenProcessPool as exc:  # the worker died (killed, out of memory): a new one next time
            log.warning("The log cleaner process of dir %s ended: %s", cleaner.directory_id, exc)
            cleaner.worker = None
        except OSError as exc:
            cleaner.state = CleanerState.FAILED
            log.error("The log cleaner of dir %s stopped: %s", cleaner.directory_id, exc)
            if manager.partitions.get(hosted.key) is hosted:
                manager.storage_error(hosted, exc, "cleaning the log")
        except ValueError as exc:  # the log was closed meanwhile, or a batch is damaged
            log.warning("%s: cleaning skipped: %s", hosted.name, exc)

    def _job(self, hosted: HostedPartition) -> CleanJob | None:
        partition_log = hosted.log
        topic = self.manager.state.image.topics.get(hosted.key[0])
        if topic is None or partition_log.closed:
            return None
        first_dirty, tombstones_due_ms = partition_log.cleaner_checkpoint()
        return CleanJob(
            path=partition_log.path,
            segments=partition_log.segments(),
            log_start=partition_log.log_start_offset,
            high_watermark=partition_log.high_watermark,
            first_dirty=first_dirty,
            tombstones_due_ms=tombstones_due_ms,
            settings=compaction.settings_of(
                {
                    **dynamic_configs.topic_defaults(self.manager.state.config, self.manager.state.image),
                    **topic.configs,
                }
            ),
            segment_bytes=partition_log.segment_bytes,
            index_interval=partition_log.index_interval_bytes,
            now_ms=wall_ms(self.clock),
            last_stable_offset=partition_log.last_stable_offset,
            aborted=tuple(e for es in partition_log.aborted_entries().values() for e in es),
        )

    def _commit(
        self, cleaner: DirCleaner, hosted: HostedPartition, job: CleanJob, result: CleanResult
    ) -> None:
        """Swap the cleaned segments in (on the event loop) and record the first dirty offset."""
        partition_log = hosted.log
        swapped = 0
        size_before = partition_log.size_bytes
        doomed: list[Path] = []
        if result.dropped_aborted:  # before the swap: an index entry never outlives its marker
            partition_log.drop_aborted(result.dropped_aborted)
        for bases, cleaned in result.groups:
            removed = partition_log.swap_cleaned(log_cleaner.members_of(job, bases), cleaned)
            if removed is not None:
                swapped += 1
                doomed += removed
        if doomed:  # unlinking large files takes time: not on the event loop
            self._removals.add(task := asyncio.create_task(asyncio.to_thread(_remove, doomed)))
            task.add_done_callback(self._removals.discard)
        if swapped == len(result.groups):
            partition_log.record_cleaning(result.dirty_end, result.tombstones_due_ms)
        cleaner.runs += 1
        cleaner.bytes_read += result.bytes_read
        cleaner.bytes_written += result.bytes_written
        cleaner.records_removed += result.records_removed
        cleaner.bytes_freed += max(size_before - partition_log.size_bytes, 0)
        cleaner.last_run_ms = wall_ms(self.clock)
        cleaner.max_dirty_ratio = max(cleaner.max_dirty_ratio, result.dirty_ratio)
        hosted.dirty = True  # the renames: made durable by the next flush
        log.info(
            "%s: cleaned up to offset %d: %d record(s) removed, %d of %d bytes kept, %d segment(s) swapped;"
            " key map %.3f s, rewrite %.3f s, CPU %.3f s",
            hosted.name,
            result.dirty_end,
            result.records_removed,
            result.bytes_written,
            result.bytes_read,
            swapped,
            result.map_seconds,
            result.write_seconds,
            result.cpu_seconds,
        )

    def dir_failed(self, directory_id: Uuid) -> None:
        """The dir went offline: its cleaner stops (a cleaning in progress at its next batch or
        throttle wait) and stays FAILED; the other dirs' cleaners go on."""
        cleaner = self.cleaners.get(directory_id)
        if cleaner is not None:
            cleaner.state = CleanerState.FAILED
            cleaner.shutdown()

    def close(self) -> None:
        """Stop every dir's cleaner (a cleaning in progress stops at its next batch)."""
        for cleaner in self.cleaners.values():
            if cleaner.state is not CleanerState.FAILED:
                cleaner.state = CleanerState.STOPPED
            cleaner.shutdown()
