"""What the operator does about a data disk its broker has cordoned for its space (issue 35):
grow its claim within `spec.disks[].maxSize`, or say why it cannot. A pure decision over what
one reconcile saw; nothing here does I/O or reads a clock.

The broker cordons a log dir whose volume is `log.dir.cordon.threshold` full (the JbodBroker's
`status.logDirs[].spaceCordoned`); the dir takes no new replica, and leadership leaves it once it
is full. The operator then grows the dir's PersistentVolumeClaim when Kubernetes can:

Guarantees:
* **Only a cordoned, current disk grows**: a disk that is not cordoned for its space, a removed
  (draining) disk, or one without a current claim is left alone (`None`).
* **One step at a time**: while the claim's last growth is not done (`status.capacity` below
  `spec.resources.requests`: the volume or its file system is being expanded), nothing is asked
  (`None`), so a level-triggered operator never grows twice for one fill.
* **Within bounds**: a growth asks for `GROWTH_FACTOR` times the claim's request, rounded up to a
  MiB, at least one MiB more, never more than `maxSize`; never below the request (claims only
  grow). A cordon that persists after a growth grows again, up to `maxSize`.
* **Why not, as a value**: without `maxSize`, at `maxSize`, or when the claim's StorageClass
  does not allow expansion (`allowVolumeExpansion` not true, or no StorageClass known),
  `CannotGrow` says which, in one line for an Event.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from jbod_operator import health, model

GROWTH_FACTOR: Final = 1.5
MIB: Final = 2**20


@dataclass(frozen=True)
class Grow:
    """Patch the claim's storage request from `from_bytes` to `to_bytes` (`size`)."""

    claim: str
    from_bytes: int
    to_bytes: int

    @property
    def size(self) -> str:
        """`to_bytes` as a quantity (`1536Mi`)."""
        return _size_text(self.to_bytes)


@dataclass(frozen=True)
class CannotGrow:
    claim: str
    reason: str


GrowthDecision = Grow | CannotGrow | None


def _quantity(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return model.quantity_bytes(str(value))
    except model.SpecError:
        return None


def requested_bytes(claim: Mapping[str, Any]) -> int | None:
    """The claim's `spec.resources.requests.storage` in bytes."""
    return _quantity(((claim.get("spec") or {}).get("resources") or {}).get("requests", {}).get("storage"))


def capacity_bytes(claim: Mapping[str, Any]) -> int | None:
    """The claim's `status.capacity.storage` in bytes (None while unbound)."""
    return _quantity(((claim.get("status") or {}).get("capacity") or {}).get("storage"))


def storage_class_of(claim: Mapping[str, Any]) -> str | None:
    """The claim's StorageClass name (the API server fills in the default class at creation)."""
    name = (claim.get("spec") or {}).get("storageClassName")
    return str(name) if name else None


def next_size(requested: int, max_bytes: int) -> int:
    """`GROWTH_FACTOR` times `requested`, rounded up to a MiB, at least a MiB more, at most
    `max_bytes` (and never below `requested`)."""
    grown = -(-int(requested * GROWTH_FACTOR) // MIB) * MIB
    grown = max(grown, requested + MIB)
    return max(requested, min(grown, max_bytes))


def _size_text(size: int) -> str:
    return f"{size // MIB}Mi" if size % MIB == 0 else str(size)


def _settled_request(claim: Mapping[str, Any]) -> int | None:
    """The claim's request in bytes once it is bound and its last growth is done, else None."""
    requested = requested_bytes(claim)
    capacity = capacity_bytes(claim)
    if requested is None or capacity is None or capacity < requested:
        return None
    return requested


def _refusal(
    disk: model.Disk, claim: Mapping[str, Any], requested: int, expandable: Callable[[], bool | None]
) -> str | None:
    if disk.max_size is None:
        return f"disk {disk.name} has no maxSize"
    if requested >= model.quantity_bytes(disk.max_size):
        return f"disk {disk.name} is at its maxSize {disk.max_size}"
    if not expandable():
        storage_class = storage_class_of(claim)
        which = f"StorageClass {storage_class}" if storage_class else "its StorageClass"
        return f"{which} does not allow volume expansion"
    return None


def decide(
    disk: model.Disk,
    log_dir: Mapping[str, Any],
    claim: Mapping[str, Any] | None,
    *,
    expandable: Callable[[], bool | None],
) -> GrowthDecision:
    """`log_dir`: the disk's entry of the JbodBroker's `status.logDirs` (as `health` builds it);
    `claim`: the disk's current PersistentVolumeClaim; `expandable`: its StorageClass's
    `allowVolumeExpansion` (None: the class is unknown), asked only when everything else allows
    a growth (it is a read of the API server)."""
    if disk.removed or claim is None or not log_dir.get("spaceCordoned"):
        return None
    requested = _settled_request(claim)
    if requested is None:
        return None  # unbound, or the last growth is still being applied
    name = str((claim.get("metadata") or {}).get("name"))
    refusal = _refusal(disk, claim, requested, expandable)
    if refusal is not None:
        return CannotGrow(name, refusal)
    assert disk.max_size is not None  # _refusal checked it
    return Grow(
        claim=name, from_bytes=requested, to_bytes=next_size(requested, model.quantity_bytes(disk.max_size))
    )


def event(decision: GrowthDecision, where: str, *, newly_cordoned: bool) -> health.Event | None:
    """The Event of a decision: every growth; a refusal only when the cordon is new (the
    operator reconciles every few seconds; the refusal stands until the spec or the class
    changes)."""
    if isinstance(decision, Grow):
        return health.Event(
            "Normal",
            "GrowingVolume",
            f"Growing PVC {decision.claim} of {where} from {_size_text(decision.from_bytes)} to "
            f"{decision.size}: the broker cordoned it for its space",
        )
    if isinstance(decision, CannotGrow) and newly_cordoned:
        return health.Event(
            "Warning",
            "VolumeNotGrown",
            f"Not growing PVC {decision.claim} of {where}: {decision.reason}; it takes no new "
            "replicas, and the operator moves replicas off it to the broker's other disks",
        )
    return None
