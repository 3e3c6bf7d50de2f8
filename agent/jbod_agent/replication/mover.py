"""Intra-broker replica moves (`POST /v1/log-dirs/move`; the design's "Intra-broker replica movement").

Guarantees:
* A move copies the replica into a future replica `<topic>-<partition>.<move id>-future` in the
  destination dir, throttled to a byte rate (request `maxBytesPerSecond`, else
  `replica.alter.log.dirs.io.max.bytes.per.second`, dynamic over static and read again before
  every chunk, so a `kafka-configs.sh` change applies to running moves; unset or -1 =
  unthrottled), and keeps copying while the partition takes writes.
* Once the future replica has caught up, the destination is reported with AssignReplicasToDirs;
  the switch happens only after the controller has confirmed it (the metadata image names the
  destination dir). The switch runs on the event loop without yielding: the last records are
  copied, the current replica is renamed `-delete`, the future one takes the replica's name, and
  the partition is served from the new log with no acknowledged record lost.
* The reply says what happened (`outcome`): `started` (a copy began), `in-progress` (a move to
  that dir was already running), `cancelled` (the request named the replica's current dir while
  a move was running: the move is cancelled), `already-there` (the replica is in that dir and no
  move runs: nothing is copied, nothing is reported).
* A move that is cancelled (a new move of the same replica, a move back to its current dir, the
  topic deleted) or whose destination fails is reverted: the future replica is dropped and, if the
  destination had been reported, the original dir is reported again.
* The throttle, the polls while waiting for the controller and the reported durations run on the
  injected clock.
* At startup, leftovers of interrupted moves are settled: a `-delete` replica is deleted; a future
  replica whose current replica is missing (crash between the two renames) is promoted; any other
  future replica is deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import logging
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jbod_agent import dynamic_configs
from jbod_agent.partitions.replica_manager import ReplicaManager
from jbod_agent.placement import DirHealth
from jbod_agent.ports import Clock, DirFailures, PlacementSink
from jbod_agent.state import AgentState, LocalReplica, LogDirState
from jbod_agent.storage import replicas
from jbod_agent.storage.partition_log import PartitionLog
from jbod_core import broker_configs
from jbod_core.broker_messages import MoveReplicaRequest
from jbod_core.errors import ErrorCode
from jbod_core.ids import Uuid
from jbod_core.image import PartitionKey
from jbod_runtime.durable_files import write_atomically

log = logging.getLogger("jbod_agent.mover")

_FUTURE = re.compile(r"(?P<name>[a-zA-Z0-9._-]+-\d+)\.(?P<id>[0-9a-f]{32})-future")
_DELETE = re.compile(r"(?P<name>[a-zA-Z0-9._-]+-\d+)\.(?P<id>[0-9a-f]{32})-delete")
_CHUNK = 1024 * 1024


class MoveState(enum.Enum):
    COPYING = "copying"
    QUEUED = "queued"  # caught up, destination reported, waiting for the controller
    DONE = "done"
    CANCELLED = "cancelled"


@dataclass(eq=False)
class Move:
    key: PartitionKey
    topic: str
    source: Uuid
    destination: Uuid
    future_path: Path
    rate: int  # bytes per second, <= 0: unthrottled
    configured_rate: bool = False  # the rate is the broker's config (re-read), not the request's
    state: MoveState = MoveState.COPYING
    future_log: PartitionLog | None = None
    copied_bytes: int = 0
    started: float = 0.0  # the mover's clock (monotonic seconds)
    task: asyncio.Task[None] | None = None
    reported: bool = False
    truncated_to: int | None = None  # the current replica was truncated (a follower diverged)

    @property
    def active(self) -> bool:
        return self.state in (MoveState.COPYING, MoveState.QUEUED)


def settle_leftovers(log_dir: Path) -> list[str]:
    """Startup: finish or drop what interrupted moves left in `log_dir` (see the module doc)."""
    done: list[str] = []
    with os.scandir(log_dir) as entries:
        names = [e.name for e in entries if e.is_dir(follow_symlinks=False)]
    present = set(names)
    for name in names:
        if match := _DELETE.fullmatch(name):
            shutil.rmtree(log_dir / name, ignore_errors=True)
            done.append(f"deleted {name}")
        elif match := _FUTURE.fullmatch(name):
            current = match["name"]
            if current not in present:
                (log_dir / name).rename(log_dir / current)
                present.add(current)
                done.append(f"promoted {name}")
            else:
                shutil.rmtree(log_dir / name, ignore_errors=True)
                done.append(f"deleted {name}")
    return done


def settle_abandoned_futures(dirs: list[Path]) -> list[str]:
    """Across dirs: a future replica whose current replica exists in another dir is dropped."""
    current: set[str] = set()
    futures: list[tuple[Path, str]] = []
    for d in dirs:
        with contextlib.suppress(OSError), os.scandir(d) as entries:
            for e in entries:
                if (m := _FUTURE.fullmatch(e.name)) is not None:
                    futures.append((d / e.name, m["name"]))
                elif replicas.parse_replica_dir_name(e.name) is not None:
                    current.add(e.name)
    done = []
    for path, name in futures:
        if name in current:
            shutil.rmtree(path, ignore_errors=True)
            done.append(f"deleted {path}")
    return done


class Mover:
    def __init__(
        self,
        state: AgentState,
        *,
        manager: ReplicaManager,
        placements: PlacementSink,
        failures: DirFailures,
        clock: Clock,
    ) -> None:
        self.state = state
        self.manager = manager
        self.placements = placements
        self.failures = failures
        self.clock = clock
        self.moves: dict[PartitionKey, Move] = {}
        # Bytes the moves copied since start, by dir: out of each source, into each destination.
        self.copied_out: dict[Uuid, int] = {}
        self.copied_in: dict[Uuid, int] = {}
        self._background: set[asyncio.Future[Any]] = set()

    def _in_background(self, work: Any) -> None:
        """Run a coroutine or future without waiting for it (kept referenced until done)."""
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- requests ------------------------------------------------------------------------------

    def request_move(self, request: MoveReplicaRequest) -> dict[str, Any]:
        try:
            key, local, state = self._movable(request)
        except _MoveRefusedError as refused:
            return _error(refused.code, refused.message)
        destination = request.directory_id
        current = self.moves.get(key)
        if local.directory_id == destination:
            if current is not None and current.active:
                self.cancel(key, "moved back to its current dir")
                return {"errorCode": 0, "outcome": "cancelled"}
            return {"errorCode": 0, "outcome": "already-there"}
        if state.health is DirHealth.FULL:
            return _error(ErrorCode.KAFKA_STORAGE_ERROR, f"log dir {destination} is full")
        if current is not None and current.active:
            if current.destination == destination:
                if request.max_bytes_per_second is not None:
                    current.rate = request.max_bytes_per_second
                return {"errorCode": 0, "outcome": "in-progress"}
            self.cancel(key, f"replaced by a move to {destination}")
        self._start(key, local, state, request)
        return {"errorCode": 0, "outcome": "started"}

    def _movable(self, request: MoveReplicaRequest) -> tuple[PartitionKey, LocalReplica, LogDirState]:
        """(the replica's key, where it is, the destination dir); `_MoveRefusedError` when the destination
        is unknown or offline, or the replica is not served here."""
        broker = self.state
        destination = request.directory_id
        state = broker.dirs.get(destination)
        if state is None:
            raise _MoveRefusedError(
                ErrorCode.LOG_DIR_NOT_FOUND, f"broker {broker.node_id} has no log dir {destination}"
            )
        if state.health is DirHealth.OFFLINE:
            raise _MoveRefusedError(ErrorCode.KAFKA_STORAGE_ERROR, f"log dir {destination} is offline")
        topic_id = broker.image.topic_ids_by_name.get(request.topic)
        key = (topic_id, request.partition) if topic_id is not None else None
        if key is not None and key in broker.offline_local:
            raise _MoveRefusedError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"{request.topic}-{request.partition} is in an offline log dir"
            )
        local = broker.local.get(key) if key is not None else None
        if key is not None and local is None and broker.image.partition(key) is not None:
            # As Kafka: remembered, so that the replica is created there when it arrives (a
            # reassignment's new replica); the caller retries until it exists.
            broker.preferred_dirs[key] = destination
        if key is None or local is None or key not in self.manager.partitions:
            raise _MoveRefusedError(
                ErrorCode.REPLICA_NOT_AVAILABLE,
                f"broker {broker.node_id} does not host {request.topic}-{request.partition}",
            )
        return key, local, state

    def _start(
        self, key: PartitionKey, local: LocalReplica, state: LogDirState, request: MoveReplicaRequest
    ) -> None:
        """Start copying the replica into a future replica in `state`'s dir."""
        destination = request.directory_id
        rate = request.max_bytes_per_second or self._configured_rate()
        name = replicas.replica_dir_name(local.topic, key[1])
        move = Move(
            key=key,
            topic=local.topic,
            source=local.directory_id,
            destination=destination,
            future_path=state.path / f"{name}.{uuid.uuid4().hex}-future",
            rate=rate,
            configured_rate=not request.max_bytes_per_second,
            started=self.clock.monotonic(),
        )
        self.moves[key] = move
        move.task = asyncio.create_task(self._run(move), name=f"move-{name}")
        log.info(
            "Moving %s from %s to %s (%s)",
            name,
            move.source,
            destination,
            "unthrottled" if rate <= 0 else f"{rate} B/s",
        )

    def _configured_rate(self) -> int:
        """`replica.alter.log.dirs.io.max.bytes.per.second` as this broker applies it (-1: none)."""
        rate = dynamic_configs.rate(self.state.config, self.state.image, broker_configs.ALTER_LOG_DIRS_RATE)
        return -1 if rate is None else rate

    def destination_of(self, key: PartitionKey) -> Uuid | None:
        move = self.moves.get(key)
        return move.destination if move is not None and move.active else None

    def future_replicas(self) -> list[Move]:
        return [m for m in self.moves.values() if m.active]

    def cancel(self, key: PartitionKey, reason: str) -> None:
        move = self.moves.pop(key, None)
        if move is None or not move.active:
            return
        move.state = MoveState.CANCELLED
        if move.task is not None and move.task is not asyncio.current_task():
            move.task.cancel()
        self._drop_future(move)
        if move.reported and key in self.state.local:
            self.placements.place(key, self.state.local[key].directory_id, reason="move reverted")
        log.warning("Move of %s-%d to %s reverted: %s", move.topic, key[1], move.destination, reason)

    def source_truncated(self, key: PartitionKey, offset: int) -> None:
        """The current replica lost its records from `offset` on: the copy must drop them too."""
        move = self.moves.get(key)
        if move is not None and move.active:
            move.truncated_to = offset if move.truncated_to is None else min(offset, move.truncated_to)

    def dir_failed(self, directory: Uuid) -> None:
        for key, move in list(self.moves.items()):
            if move.active and directory in (move.source, move.destination):
                self.cancel(key, f"log dir {directory} failed")

    def _drop_future(self, move: Move) -> None:
        if move.future_log is not None:
            with contextlib.suppress(OSError, ValueError):
                move.future_log.close()
            move.future_log = None
        if self.state.dirs[move.destination].health is not DirHealth.OFFLINE:
            path = move.future_path
            self._in_background(asyncio.to_thread(shutil.rmtree, path, True))

    # -- the copy ------------------------------------------------------------------------------

    async def _run(self, move: Move) -> None:
        broker = self.state
        try:
            await asyncio.to_thread(self._create_future, move)
            while move.active and not broker.stopping.is_set():
                hosted = self.manager.partitions.get(move.key)
                if hosted is None:
                    self.cancel(move.key, "the replica is no longer served here")
                    return
                future = move.future_log
                assert future is not None
                source = hosted.log
                if future.end_offset < source.log_start_offset:  # retention ran ahead of the copy
                    move.truncated_to = source.log_start_offset
                if move.truncated_to is not None:
                    await asyncio.to_thread(_follow_truncation, move, source)
                    continue
                if future.end_offset < source.end_offset:
                    if move.configured_rate:
                        move.rate = self._configured_rate()
                    copied = await _copy_chunk(move, source, future, self.clock)
                    self.copied_out[move.source] = self.copied_out.get(move.source, 0) + copied
                    self.copied_in[move.destination] = self.copied_in.get(move.destination, 0) + copied
                    continue
                if move.state is MoveState.COPYING:
                    move.state = MoveState.QUEUED
                    move.reported = True
                    self.placements.place(move.key, move.destination, reason="move caught up")
                    log.info(
                        "Move of %s-%d caught up; reported %s", move.topic, move.key[1], move.destination
                    )
                if self._confirmed(move):
                    # The big fsync happens here, off the loop; the switch then syncs only the tail.
                    future.write_index()
                    await asyncio.to_thread(future.flush)
                    if move.active and self._confirmed(move) and move.truncated_to is None:
                        self._promote(move)
                        return
                    continue
                await self.clock.sleep(0.05)
        except asyncio.CancelledError:
            raise
        except OSError as exc:
            move_dir = move.destination
            self.cancel(move.key, f"I/O error: {exc}")
            self.failures.io_error(
                move_dir, exc, f"copying {move.topic}-{move.key[1]} into its future replica"
            )
        except Exception as exc:  # a move must never take the broker down
            log.exception("Move of %s-%d failed", move.topic, move.key[1])
            self.cancel(move.key, f"failed: {exc}")

    def _create_future(self, move: Move) -> None:
        path = move.future_path
        path.mkdir()
        write_atomically(path / replicas.METADATA_FILE, f"version=0\ntopic_id={move.key[0]}\n".encode())
        hosted = self.manager.partitions.get(move.key)
        future = self.manager.open_log(path, self.manager.topic_settings(move.key[0]))
        if hosted is not None and hosted.log.log_start_offset > 0:
            future.truncate_fully_and_start_at(hosted.log.log_start_offset)
        move.future_log = future

    def _confirmed(self, move: Move) -> bool:
        part = self.state.image.partition(move.key)
        return (
            part is not None
            and self.state.node_id in part.replicas
            and part.directory_of(self.state.node_id) == move.destination
            and self.placements.pending(move.key) is None
        )

    def _promote(self, move: Move) -> None:
        """Switch to the future replica; runs without yielding, so no append slips in between."""
        broker = self.state
        hosted = self.manager.partitions[move.key]
        future = move.future_log
        assert future is not None
        source = hosted.log
        if move.truncated_to is not None:
            _follow_truncation(move, source)
        while future.end_offset < source.end_offset:
            future.append_replicated(source.read(future.end_offset, 16 * _CHUNK))
        for epoch, start in source.epoch_entries():
            if epoch > future.latest_epoch and start >= future.end_offset:
                future.assign_epoch_start(epoch)
        future.write_index()
        future.flush()
        old_path = broker.local[move.key].path
        name = old_path.name
        source.close()
        deleted = old_path.with_name(f"{name}.{uuid.uuid4().hex}-delete")
        old_path.rename(deleted)
        new_path = move.future_path.with_name(name)
        move.future_path.rename(new_path)
        future.relocate(new_path)
        new_log = future
        move.future_log = None
        new_log.high_watermark = source.high_watermark
        broker.local[move.key] = dataclasses.replace(
            broker.local[move.key], directory_id=move.destination, path=new_path
        )
        self.manager.swap_log(move.key, new_log, move.destination)
        move.state = MoveState.DONE
        self.moves.pop(move.key, None)
        self._in_background(asyncio.to_thread(shutil.rmtree, deleted, True))
        log.info(
            "Moved %s to %s (%d bytes copied in %.1f s)",
            name,
            move.destination,
            move.copied_bytes,
            self.clock.monotonic() - move.started,
        )


def _follow_truncation(move: Move, source: PartitionLog) -> None:
    future = move.future_log
    assert future is not None and move.truncated_to is not None
    offset = move.truncated_to
    move.truncated_to = None
    if source.log_start_offset > future.end_offset or offset < future.log_start_offset:
        future.truncate_fully_and_start_at(source.log_start_offset)
    elif offset < future.end_offset:
        future.truncate_to(offset)


async def _copy_chunk(move: Move, source: PartitionLog, future: PartitionLog, clock: Clock) -> int:
    """Copy the next chunk of the current replica into the future one, keeping to the move's rate;
    the bytes copied."""
    chunk = _CHUNK if move.rate <= 0 else max(4096, min(_CHUNK, move.rate // 10))
    data = source.read(future.end_offset, chunk)
    started = clock.monotonic()
    await asyncio.to_thread(future.append_replicated, data)
    move.copied_bytes += len(data)
    if move.rate > 0:
        pause = len(data) / move.rate - (clock.monotonic() - started)
        if pause > 0:
            await clock.sleep(pause)
    return len(data)


class _MoveRefusedError(Exception):
    """A move request that cannot be served: its error code and message."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _error(code: ErrorCode, message: str) -> dict[str, Any]:
    return {"errorCode": int(code), "errorMessage": message}
