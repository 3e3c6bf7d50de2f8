"""The partitions of an internal topic (`__consumer_offsets`, `__transaction_state`) a coordinator
leads on this broker: following their leadership and reading their logs to load them. What a
coordinator keeps of a partition (its shard) and how it decodes the records stay its own.

Guarantees:
* Follows leadership (`ReplicaManager.on_partition_change`): a partition of the topic this broker
  becomes leader of gets a new shard, in `shards` under its index, and a task loads it; a shard
  whose partition this broker stops leading, whose hosted partition was replaced, or whose leader
  epoch changed is unloaded at once (reason "no longer its leader" / "a new leader epoch") before
  a new one is made. A shard is current while it is the one in `shards` under its index.
* `read_log` reads a shard's partition from the log start to the end offset as it was when it
  began, in chunks of `LOAD_CHUNK_BYTES`, scanning each chunk in a worker thread (so the event
  loop serves everything else meanwhile); the log start moving past the position restarts at the
  new log start; an OSError is the partition's storage error (`ReplicaManager.storage_error`);
  a chunk that does not frame (ValueError) is logged as an ERROR and the shard unloaded ("its log
  does not decode"); the read is abandoned once the shard is no longer current. It returns True
  only when it read to the end and the shard is still current.
* Tasks (loads, and whatever the coordinator spawns) are tracked until done; one that fails is
  logged as an ERROR; `close` cancels them all and unloads every shard ("the broker is stopping").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from jbod_agent.partitions.replica_manager import HostedPartition, ReplicaManager, Role
from jbod_agent.storage.local_log import OffsetOutOfRangeError
from jbod_core.image import PartitionKey

LOAD_CHUNK_BYTES: Final = 1024 * 1024


@dataclass(eq=False)
class CoordinatorShard:
    """What a coordinator keeps of one partition it leads: the partition, its leader epoch when
    this broker became its leader, and whether it is loaded."""

    key: PartitionKey
    hosted: HostedPartition
    leader_epoch: int
    loaded: bool = False

    @property
    def index(self) -> int:
        return self.key[1]


S = TypeVar("S", bound=CoordinatorShard)


class CoordinatorPartitions(Generic[S]):
    """The shards of the partitions of `topic` this broker leads (the module's guarantees)."""

    def __init__(  # noqa: PLR0913  what differs between the coordinators
        self,
        manager: ReplicaManager,
        topic: str,
        new_shard: Callable[[PartitionKey, HostedPartition, int], S],
        load: Callable[[S], Coroutine[Any, Any, None]],
        unload: Callable[[S, str], None],
        *,
        log: logging.Logger,
        what: str,
    ) -> None:
        self._manager = manager
        self.topic = topic
        self._new_shard = new_shard
        self._load = load
        self._unload = unload
        self._log = log
        self._what = what
        self.shards: dict[int, S] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        manager.on_partition_change.append(self.partition_changed)

    def current(self, shard: S) -> bool:
        return self.shards.get(shard.index) is shard

    def forget(self, shard: S) -> None:
        """Remove `shard` from `shards` if it is current (the unloading coordinator's first step)."""
        if self.current(shard):
            del self.shards[shard.index]

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(self._log_failure)
        return task

    def follow_all(self) -> None:
        """Follow the partitions this broker already hosts (those it had before the hook was added)."""
        for key in list(self._manager.partitions):
            self.partition_changed(key)

    def partition_changed(self, key: PartitionKey) -> None:
        """`ReplicaManager` hook: load a partition of the topic this broker now leads, unload one
        it no longer leads (or whose leader epoch changed)."""
        topic_id = self._manager.state.image.topic_ids_by_name.get(self.topic)
        shard = self.shards.get(key[1])
        if shard is not None and shard.key != key:
            shard = None
        if shard is None and key[0] != topic_id:
            return
        hosted = self._manager.partitions.get(key)
        leading = hosted is not None and hosted.role is Role.LEADER and key[0] == topic_id
        if shard is not None and (
            not leading or hosted is not shard.hosted or hosted.leader_epoch != shard.leader_epoch
        ):
            self._unload(shard, "no longer its leader" if not leading else "a new leader epoch")
            shard = None
        if leading and shard is None and hosted is not None:
            shard = self._new_shard(key, hosted, hosted.leader_epoch)
            self.shards[key[1]] = shard
            self.spawn(self._load(shard), f"load-{self.topic}-{key[1]}")

    async def read_log(self, shard: S, scan: Callable[[bytes, int], int]) -> bool:
        """Feed `scan(chunk, position)` (run in a worker thread; the offset after what it read) the
        shard's log from its start to its end offset: True once read to the end, the shard still
        current (the module's guarantees)."""
        hosted = shard.hosted
        position = hosted.log.log_start_offset
        end = hosted.log.end_offset
        while position < end:
            if not self.current(shard):
                return False
            try:
                data = hosted.log.read(position, LOAD_CHUNK_BYTES, max_offset=end)
            except OffsetOutOfRangeError:
                position = hosted.log.log_start_offset
                continue
            except OSError as exc:
                self._manager.storage_error(hosted, exc, f"loading the {self._what}")
                return False
            if not data:
                break
            try:
                position = await asyncio.to_thread(scan, data, position)
            except ValueError as exc:  # batches the log took but cannot frame: nothing to serve
                self._log.error(
                    "Stopped loading %s-%d at offset %d: %s", self.topic, shard.index, position, exc
                )
                self._unload(shard, "its log does not decode")
                return False
        return self.current(shard)

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for shard in list(self.shards.values()):
            self._unload(shard, "the broker is stopping")

    def _log_failure(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self._log.error("The %s task %s failed", self._what, task.get_name(), exc_info=task.exception())
