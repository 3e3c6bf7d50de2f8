"""What a `JbodCluster` should consist of, and its status: pure functions of the spec and what was seen.

Guarantees (the data-loss traps this refuses to walk into):
* A disk removed from the spec leaves a broker only once that broker's log dir on it is known to
  hold no replicas; until then it stays mounted, marked `removed` (state `Draining`), and the
  wait is reported with the number of replicas left (`drain` empties it meanwhile).
* A disk whose StorageClass changes or whose size is lowered moves to a new volume
  (`<name>-m<n>`, `specName` naming the disk) while its old volume stays mounted, marked
  `removed`, until it holds no replica (`drain` moves them into the new one): never a replica
  without a copy on the way. A larger size grows the claim in place, and so does another
  VolumeAttributesClass change the claims in place (`volume_attributes`): never a move.
* A broker beyond `spec.brokers` is removed only once the controller shows it hosts no replica;
  an unknown count (controller unreachable) is treated as "not empty". This stays the last check
  after `drain` has reassigned its replicas.
* The `Draining` condition says what the drains do (True, reason `Draining`, what is left), or
  why one was refused (False, reason `DrainRefused`), or `Idle`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jbod_operator import drain, health, model, names

DRAIN_REFUSED = "DrainRefused"


@dataclass(frozen=True)
class BrokerPlan:
    brokers: dict[int, tuple[model.Disk, ...]]  # JbodBrokers to keep or create, with their disks
    delete: tuple[int, ...]  # JbodBrokers to delete: beyond the count and empty
    refused: tuple[str, ...]  # one line per removal that waits (a disk or broker still holding replicas)
    moving: tuple[str, ...] = ()  # one line per disk given a new volume now (Event MovingDisk)
    moved: tuple[str, ...] = ()  # one line per old volume of a moved disk let go now (Event DiskMoved)
    # One line per disk whose VolumeAttributesClass changes now (Event VolumeAttributesClassChanged).
    reclassed: tuple[str, ...] = ()


def _disk_replicas(broker_status: Mapping[str, Any] | None, disk: str) -> int | None:
    for entry in (broker_status or {}).get("logDirs") or []:
        if entry.get("name") == disk:
            replicas = entry.get("replicas")
            return int(replicas) if replicas is not None else None
    return None


def move_reason(volume: model.Disk, wanted: model.Disk) -> str | None:
    """Why a broker's `volume` cannot become the spec's `wanted` in place, so that the disk moves to
    a new volume: another StorageClass, or a smaller size (a claim never shrinks). None: in place
    (a larger size grows the claim)."""
    if (volume.storage_class or None) != (wanted.storage_class or None):
        return f"storageClass {volume.storage_class or '(default)'} → {wanted.storage_class or '(default)'}"
    if wanted.size_bytes < volume.size_bytes:
        return f"size {volume.size} → {wanted.size}"
    return None


def reclassed(spec: model.ClusterSpec, existing: Mapping[int, model.BrokerSpec]) -> tuple[str, ...]:
    """One line per disk of the spec whose VolumeAttributesClass differs from the one its
    brokers' current volumes were given (their claims change in place); a disk no longer naming
    one says its claims keep theirs. Brokers and volumes that are new or moving are not counted:
    their new claims are made with the spec's class."""
    changes: dict[tuple[str, str | None, str | None], list[int]] = {}
    for broker_id, broker in sorted(existing.items()):
        if broker_id >= spec.brokers:
            continue
        for wanted in spec.disks:
            volume = next((d for d in broker.disks if d.serves == wanted.name and not d.removed), None)
            if volume is None or move_reason(volume, wanted) is not None:
                continue
            before, to = volume.volume_attributes_class, wanted.volume_attributes_class
            if before != to:
                changes.setdefault((wanted.name, before, to), []).append(broker_id)
    lines = []
    for (disk, before, to), brokers in changes.items():
        where = f"broker{'s' if len(brokers) > 1 else ''} {', '.join(str(b) for b in brokers)}"
        if to is None:
            lines.append(
                f"Disk {disk} names no VolumeAttributesClass any more: the PVCs of {where} keep "
                f"{before} (Kubernetes does not unset a class that took effect); new PVCs get none"
            )
        else:
            lines.append(
                f"Giving the PVCs of disk {disk} on {where} VolumeAttributesClass {to} "
                f"(was {before or 'none'}): modified in place, no new volume, no restart"
            )
    return tuple(lines)


def successor_name(disk: str, taken: Iterable[str]) -> str:
    """The name of disk `disk`'s next volume: `<disk>-m<n>`, the first n not `taken`."""
    used = set(taken)
    n = 1
    while f"{disk}-m{n}" in used:
        n += 1
    return f"{disk}-m{n}"


def _broker_disks(
    spec: model.ClusterSpec, broker_id: int, current: Sequence[model.Disk]
) -> tuple[list[model.Disk], list[str]]:
    """The volumes broker `broker_id` keeps for the spec's disks (a disk already served by a
    volume of another name keeps it), a new volume for each disk that moves, and a line per move
    started now."""
    disks: list[model.Disk] = []
    moving: list[str] = []
    taken = {d.name for d in current} | {d.name for d in spec.disks}
    for wanted in spec.disks:
        volume = next((d for d in current if d.serves == wanted.name and not d.removed), None)
        if volume is None:
            disks.append(wanted)
            continue
        reason = move_reason(volume, wanted)
        if reason is None:
            disks.append(wanted.model_copy(update={"name": volume.name, "spec_name": volume.spec_name}))
            continue
        name = successor_name(wanted.name, taken)
        taken.add(name)
        disks.append(wanted.model_copy(update={"name": name, "spec_name": wanted.name}))
        moving.append(f"disk {wanted.name} of broker {broker_id} moves to a new volume {name}: {reason}")
    return disks, moving


def plan_brokers(
    spec: model.ClusterSpec,
    existing: Mapping[int, model.BrokerSpec],
    statuses: Mapping[int, Mapping[str, Any]],
    hosted: Mapping[int, int] | None,
) -> BrokerPlan:
    """`existing`/`statuses`: current JbodBrokers by id; `hosted`: replicas per broker id from the
    controller (None when it could not be reached)."""
    wanted = {d.name for d in spec.disks}
    brokers: dict[int, tuple[model.Disk, ...]] = {}
    refused: list[str] = []
    moving: list[str] = []
    moved: list[str] = []
    for broker_id in range(spec.brokers):
        current = existing.get(broker_id)
        disks, started = _broker_disks(spec, broker_id, current.disks if current else ())
        moving.extend(started)
        kept = {d.name for d in disks}
        for disk in current.disks if current else ():
            if disk.name in kept:
                continue
            replicas = _disk_replicas(statuses.get(broker_id), disk.name)
            if replicas == 0:
                if disk.serves in wanted:
                    moved.append(f"disk {disk.serves} of broker {broker_id} left its old volume {disk.name}")
                continue
            disks.append(disk.model_copy(update={"removed": True}))
            left = "an unknown number of" if replicas is None else str(replicas)
            refused.append(
                f"Keeping disk {disk.name} of broker {broker_id} until it holds no replica: {left} left"
            )
        brokers[broker_id] = tuple(disks)
    delete: list[int] = []
    for broker_id in sorted(existing):
        if broker_id < spec.brokers:
            continue
        count = None if hosted is None else hosted.get(broker_id, 0)
        if count == 0:
            delete.append(broker_id)
        else:
            left = "an unknown number of" if count is None else str(count)
            refused.append(f"Keeping broker {broker_id} until it hosts no replica: {left} left")
    return BrokerPlan(
        brokers=brokers,
        delete=tuple(delete),
        refused=tuple(refused),
        moving=tuple(moving),
        moved=tuple(moved),
        reclassed=reclassed(spec, existing),
    )


@dataclass(frozen=True)
class LeavingDisks:
    """The volumes the brokers' drains empty: those of disks left out of the spec and the old
    volumes of moved disks (broker → log dir paths), where a moved disk's replicas go (broker →
    old path → new volume's path), and the log dir paths of the volumes kept."""

    paths: dict[int, frozenset[str]]
    into: dict[int, dict[str, str]]
    kept_paths: frozenset[str]


def leaving_disks(spec: model.ClusterSpec, existing: Mapping[int, model.BrokerSpec]) -> LeavingDisks:
    """From the brokers' current disks (a removed one is leaving; so is one the spec no longer names)."""
    wanted = {d.name for d in spec.disks}
    paths: dict[int, frozenset[str]] = {}
    into: dict[int, dict[str, str]] = {}
    kept: set[str] = {names.log_dir(n) for n in wanted}
    left: set[str] = set()
    for broker_id, broker in existing.items():
        if broker_id >= spec.brokers:
            continue
        leaving = [d for d in broker.disks if d.removed or d.serves not in wanted]
        staying = [d for d in broker.disks if d not in leaving]
        kept |= {names.log_dir(d.name) for d in staying}
        left |= {names.log_dir(d.name) for d in leaving}
        if leaving:
            paths[broker_id] = frozenset(names.log_dir(d.name) for d in leaving)
        successors = {d.serves: d.name for d in staying}
        moved = {
            names.log_dir(d.name): names.log_dir(successors[d.serves])
            for d in leaving
            if d.serves in wanted and successors.get(d.serves, d.name) != d.name
        }
        if moved:
            into[broker_id] = moved
    return LeavingDisks(paths=paths, into=into, kept_paths=frozenset(kept - left))


def removes_something(broker_plan: BrokerPlan, existing: Mapping[int, model.BrokerSpec]) -> bool:
    """Whether the plan deletes a broker or drops a disk a broker has now."""
    if broker_plan.delete:
        return True
    for broker_id, current in existing.items():
        kept = {d.name for d in broker_plan.brokers.get(broker_id, ())}
        if broker_id in broker_plan.brokers and any(d.name not in kept for d in current.disks):
            return True
    return False


def with_replica_counts(
    statuses: Mapping[int, Mapping[str, Any]],
    placements: Mapping[int, Mapping[str, health.DirPlacements]] | None,
) -> dict[int, dict[str, Any]]:
    """The statuses with each log dir's `replicas` recounted from `placements` (None: unknown)."""
    out: dict[int, dict[str, Any]] = {}
    for broker_id, status in statuses.items():
        dirs = []
        for entry in status.get("logDirs") or []:
            directory = entry.get("directoryId")
            counted: int | None = None
            if placements is not None and directory:
                counted = placements.get(broker_id, {}).get(directory, health.DirPlacements()).replicas
            dirs.append({**entry, "replicas": counted})
        out[broker_id] = {**status, "logDirs": dirs}
    return out


def cluster_status(  # noqa: PLR0913  spec and broker statuses, then waits, drains, controller readiness, previous status, clock
    spec: model.ClusterSpec,
    broker_statuses: Sequence[Mapping[str, Any]],
    *,
    waiting: Sequence[str],
    drains: drain.Actions,
    controller_ready: bool,
    previous: Mapping[str, Any],
    now: datetime,
) -> dict[str, Any]:
    """The JbodCluster status from its brokers' statuses (conditions Ready, Progressing, Degraded)."""
    ready = sum(
        1
        for s in broker_statuses
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in s.get("conditions") or [])
    )
    fenced = sum(1 for s in broker_statuses if s.get("fenced"))
    offline = sum(int(s.get("offlineDirs") or 0) for s in broker_statuses)
    all_ready = controller_ready and ready >= spec.brokers
    stamps: dict[str, Any] = {"previous": previous.get("conditions"), "now": now}
    if not controller_ready:
        ready_reason, ready_message = "ControllerNotReady", "the metadata controller is not ready"
    elif all_ready:
        ready_reason, ready_message = "AllBrokersReady", f"{ready} of {spec.brokers} brokers ready"
    else:
        ready_reason, ready_message = "BrokersNotReady", f"{ready} of {spec.brokers} brokers ready"
    progressing_reason, progressing_message = _progressing(drains, waiting, all_ready, ready_message)
    draining = _draining(drains, stamps)
    degraded = []
    if offline:
        degraded.append(f"{offline} log dirs offline or detached")
    if fenced:
        degraded.append(f"{fenced} brokers fenced")
    return {
        "readyBrokers": ready,
        "fencedBrokers": fenced,
        "offlineDirs": offline,
        "conditions": [
            health.condition("Ready", all_ready, ready_reason, ready_message, **stamps),
            health.condition(
                "Progressing",
                not all_ready or bool(drains.refused) or drains.draining or bool(waiting),
                progressing_reason,
                progressing_message,
                **stamps,
            ),
            draining,
            health.condition(
                "Degraded",
                bool(degraded),
                "LogDirsOrBrokersUnavailable" if degraded else "Healthy",
                "; ".join(degraded) if degraded else "every log dir online and every broker unfenced",
                **stamps,
            ),
        ],
    }


def _progressing(
    drains: drain.Actions, waiting: Sequence[str], all_ready: bool, ready_message: str
) -> tuple[str, str]:
    """The `Progressing` condition's reason and message."""
    if drains.refused:
        return "Blocked", "; ".join(drains.refused)
    if drains.draining:
        return "Draining", "; ".join((*drains.progress, *waiting))
    if waiting:
        return "Reconciling", "; ".join(waiting)
    return ("Reconciling" if not all_ready else "Reconciled"), ready_message


def _draining(drains: drain.Actions, stamps: Mapping[str, Any]) -> dict[str, Any]:
    """The `Draining` condition: what the drains do, or why one was refused."""
    if drains.refused:
        return health.condition("Draining", False, DRAIN_REFUSED, "; ".join(drains.refused), **stamps)
    if drains.draining:
        return health.condition(
            "Draining", True, "Draining", "; ".join((*drains.progress, *drains.waiting)), **stamps
        )
    return health.condition("Draining", False, "Idle", "no disk or broker is draining", **stamps)
