"""The hosted logs' background upkeep: periodic flush, retention, idempotent-producer snapshots.

Guarantees:
* Every `log.flush.interval.ms` of the injected clock (or sooner for a log whose topic sets a
  shorter `flush.ms`), each log appended to since (`dirty`) is fsynced in a worker thread, off
  the event loop (`PartitionLog.flush` allows that), each dir's logs by a task of their own: a
  slow dir does not hold up the others' flushes, each flush's time is the dir's latency
  (`DirFailures.latency`); a hung dir is left to the probes; a leader's
  changed producer state is first expired (`producer.id.expiration.ms`, the clock's wall time)
  and saved as a snapshot (`producers.save`: derived data, so a failure is logged, not fatal).
* Every `log.retention.check.interval.ms`, retention runs on each hosted log against the clock's
  wall time, and deleted segments' files whose `file.delete.delay.ms` passed are removed (`PartitionLog.apply_retention`: never the active segment nor data at or above the
  high watermark); a moved log start wakes the fetches waiting on the partition.
* An I/O error takes the dir offline (`ReplicaManager.storage_error`) — unless the partition was
  removed or replaced meanwhile; a log closed meanwhile is skipped.
* `flush_dirty` is the same flush, blocking, for the agent's shutdown, after
  `save_producer_snapshots` saved every changed producer state (Kafka's snapshot at shutdown).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from jbod_agent.partitions.replica_manager import HostedPartition, ReplicaManager
from jbod_agent.ports import Clock, wall_ms
from jbod_agent.storage import producers
from jbod_core import producer_state
from jbod_core.ids import Uuid

log = logging.getLogger("jbod_agent.replicas")

MIN_FLUSH_TICK_MS: Final = 10


class LogUpkeep:
    """Flushes and trims the manager's logs in the background."""

    def __init__(self, manager: ReplicaManager, *, clock: Clock) -> None:
        self.manager = manager
        self.clock = clock

    async def flush_forever(self) -> None:
        """fsync dirty logs periodically, off the event loop: every `log.flush.interval.ms`, or a
        log's `flush.ms` when that is shorter (the loop then wakes that often, at least
        `MIN_FLUSH_TICK_MS` apart). Each dir's logs are flushed by a task of their own, so a slow
        or hung dir delays only its own logs; a dir still flushing from the last tick is left for
        the next (a hung one is the probes' to take offline)."""
        manager = self.manager
        state = manager.state
        interval_ms = state.config.log_flush_interval_ms
        tick_ms = interval_ms
        flushing: dict[Uuid, asyncio.Task[None]] = {}
        try:
            while not state.stopping.is_set():
                await self.clock.sleep(tick_ms / 1000)
                now_ms = wall_ms(self.clock)
                hosted_logs = list(manager.partitions.values())
                tick_ms = max(MIN_FLUSH_TICK_MS, min([interval_ms, *(h.log.flush_ms for h in hosted_logs)]))
                by_dir: dict[Uuid, list[HostedPartition]] = {}
                for h in hosted_logs:
                    if (
                        h.dirty
                        and now_ms - h.log.last_flush_ms >= min(interval_ms, h.log.flush_ms) - tick_ms // 2
                    ):
                        by_dir.setdefault(h.directory_id, []).append(h)
                for directory in [d for d, task in flushing.items() if task.done()]:
                    flushing.pop(directory).result()  # a bug in a flush is not swallowed
                for directory, dirty in by_dir.items():
                    if directory not in flushing:
                        flushing[directory] = asyncio.create_task(self._flush_dir(directory, dirty, now_ms))
        finally:
            for task in flushing.values():
                task.cancel()

    async def _flush_dir(self, directory: Uuid, dirty: list[HostedPartition], now_ms: int) -> None:
        """fsync `dirty` (the logs of one dir) one after the other, each timed: the dir's latency."""
        manager = self.manager
        for hosted in dirty:
            if manager.partitions.get(hosted.key) is not hosted:
                continue
            hosted.dirty = False
            self._save_producers(hosted)
            hosted.log.flush_starting(now_ms)
            try:
                hosted.log.write_index()  # on the loop, which appends: the flush only fsyncs
                started = self.clock.monotonic()
                await asyncio.to_thread(hosted.log.flush)
                manager.failures.latency(directory, self.clock.monotonic() - started)
            except OSError as exc:
                if manager.partitions.get(hosted.key) is hosted:
                    manager.storage_error(hosted, exc, "flushing")
            except ValueError:
                pass  # closed meanwhile

    def save_producer_snapshots(self) -> None:
        """Snapshot every changed producer state now, on the event loop (no append can come
        between reading a state and its log's end offset): the agent's clean shutdown, before
        `flush_dirty`, so a restart loads each state from its snapshot without a replay."""
        for hosted in list(self.manager.partitions.values()):
            self._save_producers(hosted)

    def flush_dirty(self) -> None:
        """fsync every dirty log now (blocking: the agent's shutdown runs it in a worker thread)."""
        for hosted in list(self.manager.partitions.values()):
            if not hosted.dirty:
                continue
            try:
                hosted.log.write_index()
                hosted.log.flush()
            except (OSError, ValueError) as exc:
                log.warning("Could not flush %s at shutdown: %s", hosted.name, exc)

    def _save_producers(self, hosted: HostedPartition) -> None:
        """Snapshot a replica's changed producer state before its log is flushed (derived data: a
        failure to write it only costs a longer rebuild, so it is logged, not fatal)."""
        log_ = hosted.log
        if not log_.transactions_loaded or not log_.producers_changed:
            return
        log_.producers_changed = False
        log_.producer_state = producer_state.expire(
            log_.producer_state,
            now_ms=wall_ms(self.clock),
            producer_id_expiration_ms=self.manager.state.config.producer_id_expiration_ms,
        )
        try:
            producers.save(log_, log_.producer_state)
        except (OSError, ValueError) as exc:
            log.warning("%s: failed saving the producer snapshot: %s", hosted.name, exc)

    async def retention_forever(self) -> None:
        manager = self.manager
        state = manager.state
        period = state.config.log_retention_check_interval_ms / 1000
        while not state.stopping.is_set():
            await self.clock.sleep(period)
            now_ms = wall_ms(self.clock)
            for hosted in list(manager.partitions.values()):
                if manager.partitions.get(hosted.key) is not hosted:
                    continue
                try:
                    deleted = hosted.log.apply_retention(now_ms)
                    hosted.log.purge_deleted()
                except OSError as exc:
                    manager.storage_error(hosted, exc, "applying retention")
                    continue
                if deleted:
                    log.info("%s: retention deleted %d segment(s)", hosted.name, deleted)
                    hosted.wake_data_waiters()  # the log start offset moved
