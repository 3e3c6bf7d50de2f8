"""The `JbodBroker` status as typed, frozen values: what `health.decide` writes and reads back.

The wire shape is the CRD's (`crds/jbod.dev_jbodbrokers.yaml`, `status`), which `kubectl`, the
cluster's reconcile and the kind tests read: camelCase keys, in the order of the fields below.

Guarantees:
* `as_status()` is the dict the operator patches: a field that is None is left out (the CRD's
  "unknown"), nested values are plain dicts and lists of JSON values, ints stay ints.
* `BrokerStatus.from_status` parses a status as the API server keeps it (the CRD's schema, which
  the server enforces; keys this module does not know are ignored), and gives back what it read:
  `from_status(s).as_status() == s` for every status the operator wrote.
* `Condition.of` keeps the previous `lastTransitionTime` while the condition's status does not
  change.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

DiskState = Literal["Online", "Offline", "Detached", "Full", "Draining", "Pending"]
Phase = Literal["Pending", "Starting", "Fenced", "Running", "Degraded", "Replacing", "Terminating"]


def timestamp(moment: datetime) -> str:
    """A status time (`since`, `lastTransitionTime`): RFC 3339 to the second, in UTC."""
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class _Status(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")

    def as_status(self) -> dict[str, Any]:
        """The wire shape (see the module docstring)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class LogDirStatus(_Status):
    """One entry of `status.logDirs`: a disk of the broker, its volume and its log dir."""

    name: str
    mount_path: str | None = Field(default=None, alias="mountPath")
    state: DiskState
    since: str | None = None  # when `state` was first seen
    attached: bool | None = None  # a VolumeAttachment of its PV was seen attached to the pod's node
    pvc: str | None = None
    pv: str | None = None
    directory_id: str | None = Field(default=None, alias="directoryId")
    usable_bytes: int | None = Field(default=None, alias="usableBytes")
    total_bytes: int | None = Field(default=None, alias="totalBytes")
    replicas: int | None = None  # None: unknown (no directory id, or the controller unreachable)
    leaders: int | None = None
    last_error: str | None = Field(default=None, alias="lastError")
    cordoned: bool | None = None  # KIP-1066: True or left out
    space_cordoned: bool | None = Field(default=None, alias="spaceCordoned")  # True or left out
    slow: bool | None = None  # True or left out
    # `int | float`: a number keeps the type the broker reported it in.
    used_ratio: int | float | None = Field(default=None, alias="usedRatio")
    seconds_to_full: int | float | None = Field(default=None, alias="secondsToFull")
    latency_ms: int | float | None = Field(default=None, alias="latencyMs")
    # The claim's VolumeAttributesClass (`volume_attributes.ClassStatus`): in effect, asked for, and
    # how the change goes.
    volume_attributes_class: str | None = Field(default=None, alias="volumeAttributesClass")
    target_volume_attributes_class: str | None = Field(default=None, alias="targetVolumeAttributesClass")
    modify_volume_status: str | None = Field(default=None, alias="modifyVolumeStatus")
    not_growable: str | None = Field(default=None, alias="notGrowable")  # set by the broker's reconcile


class Condition(_Status):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = Field(default=None, alias="lastTransitionTime")

    @classmethod
    def of(  # noqa: PLR0913  a condition's four fields, the previous one of its type and the clock
        cls,
        type_: str,
        value: bool,
        reason: str,
        message: str,
        *,
        before: Condition | None,
        now: datetime,
    ) -> Condition:
        status: Literal["True", "False"] = "True" if value else "False"
        since = timestamp(now)
        if before is not None and before.status == status and before.last_transition_time:
            since = before.last_transition_time
        return cls(type=type_, status=status, reason=reason, message=message, last_transition_time=since)


class BrokerStatus(_Status):
    """`JbodBroker.status`."""

    phase: Phase | None = None
    log_dirs: tuple[LogDirStatus, ...] = Field(default=(), alias="logDirs")
    online_dirs: int | None = Field(default=None, alias="onlineDirs")
    offline_dirs: int | None = Field(default=None, alias="offlineDirs")
    pod_name: str | None = Field(default=None, alias="podName")
    pod_uid: str | None = Field(default=None, alias="podUid")  # the pod the log dirs were seen in
    fenced: bool | None = None  # None: the controller could not be asked
    broker_epoch: int | None = Field(default=None, alias="brokerEpoch")
    queued_placements: int | None = Field(default=None, alias="queuedPlacements")
    conditions: tuple[Condition, ...] = ()
    observed_generation: int | None = Field(default=None, alias="observedGeneration")

    @classmethod
    def from_status(cls, status: Mapping[str, Any]) -> BrokerStatus:
        """Parse a status as the API server keeps it (kopf's `status` of a `JbodBroker`)."""
        return cls.model_validate(dict(status))

    def log_dir(self, name: str) -> LogDirStatus | None:
        return next((d for d in self.log_dirs if d.name == name), None)

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)

    def with_not_growable(self, reasons: Mapping[str, str]) -> BrokerStatus:
        """This status with `notGrowable` set on the log dirs `reasons` names (disk → reason)."""
        return self.model_copy(
            update={
                "log_dirs": tuple(
                    d.model_copy(update={"not_growable": reasons[d.name]}) if d.name in reasons else d
                    for d in self.log_dirs
                )
            }
        )
