"""Replica management: what a broker does with each replica the metadata assigns it (KIP-858).

Pure: a snapshot of the broker's dirs and local replicas in, a list of actions out.

The design's table, as `decide_replica` applies it (D = the dir the metadata names for this
broker's replica):

| D | local replica | action |
|---|---|---|
| UNASSIGNED | in online dir X | report X |
| UNASSIGNED | none | create in a chosen dir, report it |
| online local dir | in D | nothing |
| online local dir | none | create in D (in a chosen dir if D is full) |
| online local dir | in another online dir X | report X (moved while the broker was down) |
| LOST, MIGRATING or unknown | in online dir X | report X |
| LOST, MIGRATING or unknown | none, broker has offline dirs | nothing (it may sit in an offline dir) |
| LOST, MIGRATING or unknown | none, no offline dirs | create in a chosen dir, report it |

A replica whose only copy is in an offline local dir is left alone in every case: it is offline.

`choose_dir` picks the online, not-full, not cordoned (KIP-1066) dir with the most usable bytes per hosted replica (ties:
fewer replicas, then the contract's Uuid order) — free space and load, not round robin.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from jbod_core.ids import UNASSIGNED_DIR, Uuid
from jbod_core.image import PartitionKey


class DirHealth(enum.Enum):
    ONLINE = "online"
    OFFLINE = "offline"
    FULL = "full"  # online for reads and existing replicas, receives no new replicas


@dataclass(frozen=True, slots=True)
class DirView:
    directory_id: Uuid
    health: DirHealth
    usable_bytes: int
    replicas: int
    cordoned: bool = False  # KIP-1066: keeps its replicas, receives no new one by choice


class ReplicaActionKind(enum.Enum):
    CREATE = "create"  # create the replica in `directory`, then report it
    REPORT = "report"  # the replica exists in `directory`: tell the controller


@dataclass(frozen=True, slots=True)
class ReplicaAction:
    kind: ReplicaActionKind
    key: PartitionKey
    directory: Uuid
    reason: str


def choose_dir(dirs: Iterable[DirView]) -> Uuid | None:
    """The dir for a new replica, or None when no dir can take one."""
    candidates = [d for d in dirs if d.health is DirHealth.ONLINE and not d.cordoned]
    if not candidates:
        return None
    best = max(
        candidates,
        key=lambda d: (
            d.usable_bytes / (d.replicas + 1),
            -d.replicas,
            -d.directory_id.msb,
            -d.directory_id.lsb,
        ),
    )
    return best.directory_id


def decide_replica(  # noqa: PLR0911, PLR0913  the design's table (module docstring): its columns in, a return per row
    key: PartitionKey,
    assigned: Uuid,
    *,
    local_dir: Uuid | None,
    dirs: Mapping[Uuid, DirView],
    has_offline_dirs: bool,
    chosen: Uuid | None,
) -> ReplicaAction | None:
    """The action for one replica. `local_dir` is where a local copy lives (None if nowhere),
    `chosen` the dir a new replica would go to (see `choose_dir`)."""
    local_online = (
        local_dir is not None and local_dir in dirs and dirs[local_dir].health is not DirHealth.OFFLINE
    )
    if local_dir is not None and not local_online:
        return None  # the only copy is in an offline dir
    assigned_view = dirs.get(assigned)
    if assigned_view is not None and assigned_view.health is not DirHealth.OFFLINE:
        if local_dir is None:
            if assigned_view.health is DirHealth.FULL:
                if chosen is None:
                    return None
                return ReplicaAction(ReplicaActionKind.CREATE, key, chosen, "assigned dir is full")
            return ReplicaAction(ReplicaActionKind.CREATE, key, assigned, "assigned to a local online dir")
        if local_dir != assigned:
            return ReplicaAction(ReplicaActionKind.REPORT, key, local_dir, "found in another local dir")
        return None
    if local_dir is not None:
        return ReplicaAction(ReplicaActionKind.REPORT, key, local_dir, "found locally")
    if assigned != UNASSIGNED_DIR and has_offline_dirs:
        return None  # LOST / MIGRATING / unknown: it may sit in an offline dir
    if chosen is None:
        return None
    reason = (
        "new replica" if assigned == UNASSIGNED_DIR else "assigned dir unknown here and no dir is offline"
    )
    return ReplicaAction(ReplicaActionKind.CREATE, key, chosen, reason)
