"""A disk's Kubernetes VolumeAttributesClass (issue 35): the class its claims ask for, and what
their status says of it. Pure functions of a disk's spec and a claim; nothing here does I/O.

A VolumeAttributesClass names attributes a CSI driver can change on a live volume (IOPS,
throughput). A claim asks for one in `spec.volumeAttributesClassName`; the driver's
external-resizer modifies the volume and reports `status.currentVolumeAttributesClassName` once
done, `status.modifyVolumeStatus` (`Pending`, `InProgress`, `Infeasible`) meanwhile.

Guarantees:
* **In place**: a new class is asked of the claims the disk has (`change`); never a new volume
  or a restart (`plan.move_reason` ignores the class, the pod's hash does not hold it).
* **Bound claims only**: Kubernetes refuses a class change before binding (KEP-3751); a claim
  created with the spec's class already has it, an older unbound one gets it once bound.
* **Never unset**: a disk without a class leaves its claims' class as it is (`None`). Kubernetes
  refuses to unset a class that took effect (before 1.34: any class); to change a volume's
  attributes again, name another class.
* **Asked once**: `change` carries the annotation `ANNOTATION` naming the class asked for, and a
  claim whose annotation already names it is not asked again: an API server that does not know
  the field (before 1.31, or the beta API off) drops it, and the operator would patch it every
  reconcile.
* **Status as the claim says**: `status_of` reports the class in effect, the one asked for and
  not in effect yet, and how its modification goes (`NotStarted` while no driver took it up).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from jbod_operator import model, names

ANNOTATION: Final = f"{names.GROUP}/volume-attributes-class"
NOT_STARTED: Final = "NotStarted"


@dataclass(frozen=True)
class Change:
    """Ask `claim` for the class `to` (it asks for `before`, None: none)."""

    claim: str
    before: str | None
    to: str

    def patch(self) -> dict[str, Any]:
        """The claim's merge patch."""
        return {
            "metadata": {"annotations": {ANNOTATION: self.to}},
            "spec": {"volumeAttributesClassName": self.to},
        }


def asked(claim: Mapping[str, Any]) -> str | None:
    """The class the claim asks for (`spec.volumeAttributesClassName`)."""
    return (claim.get("spec") or {}).get("volumeAttributesClassName") or None


def change(disk: model.Disk, claim: Mapping[str, Any]) -> Change | None:
    """The class the disk's `claim` should be asked for, or None: the disk names none, the claim
    already asks for it, is not bound, or was asked for it before (see `ANNOTATION`)."""
    wanted = disk.volume_attributes_class
    if wanted is None or asked(claim) == wanted:
        return None
    if (claim.get("status") or {}).get("phase") != "Bound":
        return None
    meta = claim.get("metadata") or {}
    if (meta.get("annotations") or {}).get(ANNOTATION) == wanted:
        return None
    return Change(claim=str(meta.get("name")), before=asked(claim), to=wanted)


@dataclass(frozen=True)
class ClassStatus:
    """What a log dir's status says of its claim's class (`volumeAttributesClass`,
    `targetVolumeAttributesClass`, `modifyVolumeStatus`); None: not shown."""

    current: str | None = None
    target: str | None = None
    modify: str | None = None

    def fields(self) -> dict[str, str]:
        """The status keys that have a value."""
        out = {
            "volumeAttributesClass": self.current,
            "targetVolumeAttributesClass": self.target,
            "modifyVolumeStatus": self.modify,
        }
        return {key: value for key, value in out.items() if value is not None}


def status_of(claim: Mapping[str, Any] | None) -> ClassStatus:
    """From the claim: the class in effect (`status.currentVolumeAttributesClassName`); the one
    its spec asks for when that is not in effect; how that change goes (the claim's
    `status.modifyVolumeStatus.status` when it is about that class, else `NotStarted`)."""
    if claim is None:
        return ClassStatus()
    status = claim.get("status") or {}
    current = status.get("currentVolumeAttributesClassName") or None
    target = asked(claim)
    if target is None or target == current:
        return ClassStatus(current=current)
    modifying = status.get("modifyVolumeStatus") or {}
    about = modifying.get("targetVolumeAttributesClassName") or target
    modify = modifying.get("status") if about == target else None
    return ClassStatus(current=current, target=target, modify=modify or NOT_STARTED)
