"""Replica reconciliation: make the replicas on this broker's disks match the metadata image.

Guarantees:
* At start, `scan_local_replicas` settles interrupted moves and lists the replica dirs of every
  online dir in a worker thread (a dir that cannot be listed fails); a replica dir without a
  readable `partition.metadata` is ignored with a WARNING. `scanned` is set once it is done:
  nothing is reconciled before.
* `reconcile(keys)` applies `placement.decide_replica` to each partition: a replica this broker
  should host but does not is created (in a worker thread, a batch at a time, one sync per batch)
  and then placed; a replica whose dir differs from the image's is placed again; a replica of a
  deleted topic, or of a partition whose replicas no longer include this broker (reassigned
  away), is deleted (renamed at once, removed in a worker thread); any other replica no longer
  hosted here (its topic unknown, or any after the controller's log went backwards) is kept,
  renamed `-stray`.
  Replicas in failed dirs, being created or being moved are left alone.
* Placements go to the `PlacementSink` (the loop sends them); I/O errors go to `DirFailures`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from pathlib import Path

from jbod_agent import dynamic_configs, placement
from jbod_agent.disks import probe
from jbod_agent.partitions.replica_manager import ReplicaManager
from jbod_agent.placement import DirHealth, DirView
from jbod_agent.ports import DirFailures, PlacementSink
from jbod_agent.replication import mover
from jbod_agent.state import AgentState, LocalReplica
from jbod_agent.storage import replicas
from jbod_core.errors import ErrorCode
from jbod_core.ids import Uuid
from jbod_core.image import PartitionKey

log = logging.getLogger("jbod_agent")


class Reconciler:
    def __init__(
        self,
        state: AgentState,
        *,
        manager: ReplicaManager,
        moves: mover.Mover,
        placements: PlacementSink,
        failures: DirFailures,
    ) -> None:
        self.state = state
        self.manager = manager
        self.moves = moves
        self.placements = placements
        self.failures = failures
        self.removed_topics: set[Uuid] = set()
        # Set once the controller's log went backwards (a restore): from then on a replica the
        # image does not give this broker is kept as `-stray`, never deleted.
        self.keep_strays = False
        self._removals: set[asyncio.Future[None]] = set()
        self.creations_now = asyncio.Event()
        self.scanned = asyncio.Event()  # the local replicas are known: reconciling may start

    async def scan_local_replicas(self) -> None:
        """List the replicas of every online dir in a worker thread, then record them (on the loop)."""
        state = self.state
        dirs = [(d.directory_id, d.path) for d in state.dirs.values()]
        for directory, outcome in await asyncio.to_thread(scan_dirs, dirs):
            if isinstance(outcome, OSError):
                self.failures.fail_dir(directory, f"cannot list replicas: {probe.describe_os_error(outcome)}")
                continue
            # A probe may have failed the dir while it was being listed: its replicas are offline.
            online = state.dirs[directory].health is not DirHealth.OFFLINE
            hosted = state.local if online else state.offline_local
            for replica in outcome:
                assert replica.topic_id is not None  # left out by scan_dirs otherwise
                hosted[(replica.topic_id, replica.partition)] = LocalReplica(
                    directory, replica.path, replica.topic
                )
        log.info("Found %d local replicas in %d online dirs", len(state.local), len(state.dirs))
        self.scanned.set()

    def _views(self) -> dict[Uuid, DirView]:
        counts: dict[Uuid, int] = {}
        for replica in self.state.local.values():
            counts[replica.directory_id] = counts.get(replica.directory_id, 0) + 1
        cordoned = set(dynamic_configs.cordoned_dir_ids(self.state))
        return {
            d: DirView(d, s.health, s.usable_bytes, counts.get(d, 0), cordoned=d in cordoned)
            for d, s in self.state.dirs.items()
        }

    def reconcile(self, keys: set[PartitionKey]) -> None:
        state = self.state
        views = self._views()
        has_offline = bool(state.failed) or bool(state.startup_offline)
        for key in sorted(keys):
            part = state.image.partition(key)
            local = state.local.get(key)
            if part is None or state.node_id not in part.replicas:
                if local is not None:
                    # A partition that exists without this broker was reassigned away: the
                    # controller removes a replica only once the target replicas are in the ISR.
                    delete = key[0] in self.removed_topics or (part is not None and not self.keep_strays)
                    self.retire_local(key, local, delete=delete)
                continue
            if key in state.offline_local or key in state.creating or self.moves.destination_of(key):
                continue
            assigned = part.directory_of(state.node_id)
            action = placement.decide_replica(
                key,
                assigned,
                local_dir=local.directory_id if local else None,
                dirs=views,
                has_offline_dirs=has_offline,
                # Only a replica with no local copy may need a new dir: choose one only then.
                chosen=self._new_dir(key, views) if local is None else None,
            )
            if action is None:
                continue
            if (
                action.kind is placement.ReplicaActionKind.REPORT
                and self.placements.pending(key) == action.directory
            ):
                continue  # already on its way to the controller
            if action.kind is placement.ReplicaActionKind.CREATE:
                if key not in state.creating:
                    state.creating[key] = action.directory
                    self.creations_now.set()
                    view = views[action.directory]
                    views[action.directory] = dataclasses.replace(view, replicas=view.replicas + 1)
                continue  # reported once it exists on disk
            self.placements.place(key, action.directory, reason=action.reason)
        self.manager.sync(keys)

    def _new_dir(self, key: PartitionKey, views: dict[Uuid, DirView]) -> Uuid | None:
        """The dir named in advance for `key` if it can take a replica, else `choose_dir`'s."""
        preferred = self.state.preferred_dirs.get(key)
        if preferred is not None and preferred in views and views[preferred].health is DirHealth.ONLINE:
            return preferred
        return placement.choose_dir(views.values())

    async def creations_forever(self, batch_size: int = 1000) -> None:
        """Create queued replica dirs in a worker thread, a batch at a time, then place them.

        The event loop keeps heartbeating while disks work; a batch is made durable with one
        sync before its placements are queued.
        """
        state = self.state
        while not state.stopping.is_set():
            if not state.creating:
                self.creations_now.clear()
                await self.creations_now.wait()
                continue
            batch = []
            for key, directory in list(state.creating.items())[:batch_size]:
                topic = state.image.topics.get(key[0])
                dir_state = state.dirs[directory]
                if topic is None or dir_state.health is DirHealth.OFFLINE:
                    del state.creating[key]
                    continue
                batch.append((key, directory, dir_state.path, topic.name))
            if not batch:
                continue
            results = await asyncio.to_thread(create_replicas, batch)
            created: list[PartitionKey] = []
            for (key, directory, _path, topic_name), outcome in zip(batch, results, strict=True):
                state.creating.pop(key, None)
                if isinstance(outcome, OSError):
                    self.failures.io_error(directory, outcome, f"creating replica {topic_name}-{key[1]}")
                    continue
                if state.dirs[directory].health is DirHealth.OFFLINE:
                    continue
                state.local[key] = LocalReplica(directory, outcome, topic_name)
                state.preferred_dirs.pop(key, None)
                self.placements.place(key, directory, reason="created")
                created.append(key)
            self.manager.sync(created)

    def retire_local(self, key: PartitionKey, local: LocalReplica, *, delete: bool) -> None:
        """Delete the replica (`delete`: its topic was deleted or it was reassigned away), else
        keep it as `-stray`. Deleting renames it at once and removes it in a worker thread."""
        self.moves.cancel(key, "the replica is no longer hosted here")
        self.manager.remove(key, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        try:
            if delete:
                doomed = replicas.mark_deleted(local.path, key[0])
                why = "its topic was deleted" if key[0] in self.removed_topics else "it was reassigned away"
                log.info("Deleting replica %s: %s", local.path.name, why)
                self._remove_later(local.directory_id, doomed)
            else:
                target = replicas.mark_stray(local.path, key[0])
                log.warning(
                    "Renamed replica %s to %s: this broker no longer hosts it", local.path.name, target.name
                )
        except FileNotFoundError:
            pass
        except OSError as exc:
            self.failures.io_error(local.directory_id, exc, f"retiring replica {local.path.name}")
            return
        del self.state.local[key]
        self.placements.cancel(key)

    def _remove_later(self, directory: Uuid, path: Path) -> None:
        async def remove() -> None:
            try:
                await asyncio.to_thread(replicas.delete, path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                self.failures.io_error(directory, exc, f"deleting {path.name}")

        task = asyncio.ensure_future(remove())
        self._removals.add(task)
        task.add_done_callback(self._removals.discard)

    def placement_valid(self, key: PartitionKey, directory: Uuid) -> bool:
        """Whether a queued placement is still worth sending (checked when its batch is taken)."""
        state = self.state
        part = state.image.partition(key)
        local = state.local.get(key)
        return (
            part is not None
            and state.node_id in part.replicas
            and local is not None
            and (local.directory_id == directory or self.moves.destination_of(key) == directory)
            and state.dirs[directory].health is not DirHealth.OFFLINE
        )


def create_replicas(batch: list[tuple[PartitionKey, Uuid, Path, str]]) -> list[Path | OSError]:
    """Create replica dirs (worker thread): no per-replica fsync, one sync for the batch."""
    results: list[Path | OSError] = []
    for key, _directory, log_dir, topic_name in batch:
        try:
            results.append(
                replicas.create(log_dir, topic=topic_name, partition=key[1], topic_id=key[0], sync=False)
            )
        except OSError as exc:
            results.append(exc)
    os.sync()
    return results


def scan_dirs(dirs: list[tuple[Uuid, Path]]) -> list[tuple[Uuid, list[replicas.FoundReplica] | OSError]]:
    """Settle interrupted moves and list each dir's replicas (worker thread; no state touched).

    A replica dir without a readable `partition.metadata` is left out with a WARNING."""
    outcomes: list[tuple[Uuid, list[replicas.FoundReplica] | OSError]] = []
    failed: set[Uuid] = set()
    # Futures whose current replica is in another dir (a move interrupted before its switch) go
    # first: `settle_leftovers` sees one dir and would promote them (two copies of the replica).
    for line in mover.settle_abandoned_futures([path for _, path in dirs]):
        log.info("Interrupted move: %s", line)
    for directory, path in dirs:
        try:
            for line in mover.settle_leftovers(path):
                log.info("Interrupted move in %s: %s", path, line)
        except OSError as exc:
            outcomes.append((directory, exc))
            failed.add(directory)
    for directory, path in dirs:
        if directory in failed:
            continue
        try:
            for doomed in replicas.scan_deleted(path):
                replicas.delete(doomed)
                log.info("Deleted %s (a replica deleted before the last stop)", doomed)
            found = list(replicas.scan(path))
        except OSError as exc:
            outcomes.append((directory, exc))
            continue
        kept = []
        for replica in found:
            if replica.topic_id is None:
                log.warning(
                    "Ignored replica dir %s: partition.metadata is missing or unreadable", replica.path
                )
            else:
                kept.append(replica)
        outcomes.append((directory, kept))
    return outcomes
