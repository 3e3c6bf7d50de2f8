"""Per-disk health of a broker and what to do about it: a pure function of one observation.

`decide(observation)` turns what the operator saw (the pod, the broker's volume claims, PVs and
VolumeAttachments, the controller's registration and placements, the broker's own log-dir view, and
the previous status) into the `JbodBroker` status (`broker_status.BrokerStatus`) plus the actions
to take. It never does I/O, and reads no clock but the observation's `now`.

It works in small steps, each a pure function: the context shared by the disks (`_context`: the
broker's report parsed once into `ReportedLogDir`s, the previous status already typed); per disk,
what is known of it (`_disk_facts`), its volume at the Kubernetes level (`_volume_check`), its
state (`_disk_state`), its status entry (`_log_dir_status`), its Events and whether to replace its
volume (`_replacement`); then the claims to delete and the broker's phase and conditions.

Guarantees:
* A disk's state is `Detached` when its volume is gone at the Kubernetes level (claim deleted or
  lost, PV missing, released or failed, or its VolumeAttachment removed after one was seen),
  else `Offline` when the broker or the controller report its log dir offline, else `Full`,
  else `Draining` (left the spec but still holds replicas), else `Online` once the broker reports
  it, else `Pending`. While the broker's report cannot be read (a poll that timed out, its
  container restarting), the last report the running pod gave of the disk's current claim
  stands (`_last_report`): a disk does not fall back to `Pending` on one missed read.
* A volume is replaced only when the disk is `Detached` or `Offline`, the policy is `Automatic`
  or the disk is named in `jbod.dev/replace-disks`, the controller is reachable, and it shows no
  partition led from that log dir (leadership has moved off it). Never twice for one failure: a
  newer claim for the disk means a replacement is under way.
* A retired claim is deleted only when the controller is reachable and no replica is placed in
  the directory it held; a retired claim whose directory id was never seen is kept.
* The claims of a disk no longer in the broker's spec (it left once it held no replica) are
  deleted once the running pod no longer mounts them (the pod was recreated without the disk).
* The readiness gate follows the controller's view: True only while the broker is registered,
  unfenced and not shutting down; left alone while the controller cannot be reached.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from jbod_operator import broker_status, model, names, volume_attributes

_GENERATION: Final = re.compile(r"-g([0-9]+)$")
TROUBLED: Final = frozenset({"Offline", "Detached"})
UNAVAILABLE: Final = TROUBLED | {"Full"}  # the states that make a broker Degraded


@dataclass(frozen=True)
class DirPlacements:
    """From the controller's partitions: replicas of this broker placed in one directory, and leaders."""

    replicas: int = 0
    leaders: int = 0


@dataclass(frozen=True)
class Event:
    type: str  # "Normal" | "Warning"
    reason: str
    message: str


class ReportedLogDir(BaseModel):
    """One log dir as its broker reports it (`GET /v1/log-dirs`): the fields read here."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")

    path: str = ""
    directory_id: str | None = Field(default=None, alias="directoryId")
    state: str | None = None  # online, offline or full
    error: str | None = None
    usable_bytes: int | None = Field(default=None, alias="usableBytes")
    total_bytes: int | None = Field(default=None, alias="totalBytes")
    space_cordoned: bool | None = Field(default=None, alias="spaceCordoned")
    slow: bool | None = None
    used_ratio: int | float | None = Field(default=None, alias="usedRatio")
    seconds_to_full: int | float | None = Field(default=None, alias="secondsToFull")
    latency_ms: int | float | None = Field(default=None, alias="latencyMs")


_NOT_REPORTED: Final = ReportedLogDir()


@dataclass(frozen=True)
class Observation:
    broker_id: int
    disks: tuple[model.Disk, ...]
    policy: str
    replace_requested: frozenset[str]
    pod: Mapping[str, Any] | None
    claims: Sequence[Mapping[str, Any]]
    volumes: Mapping[str, Mapping[str, Any]]
    attachments: Mapping[str, Sequence[Mapping[str, Any]]]
    controller_reachable: bool
    registration: Mapping[str, Any] | None
    placements: Mapping[str, DirPlacements]
    log_dirs: Sequence[Mapping[str, Any]] | None  # the broker's `GET /v1/log-dirs`
    previous: broker_status.BrokerStatus
    now: datetime


@dataclass(frozen=True)
class Decision:
    status: broker_status.BrokerStatus
    unfenced: bool | None
    events: tuple[Event, ...] = ()
    replace: tuple[str, ...] = ()
    delete_claims: tuple[str, ...] = ()
    directory_ids: Mapping[str, str] = field(default_factory=dict)  # claim name → directory id to record
    restart_pod: str | None = None  # the reason the pod must be recreated


def generation_of(claim_name: str) -> int | None:
    match = _GENERATION.search(claim_name)
    return int(match.group(1)) if match else None


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return obj.get("metadata", {}).get("annotations") or {}


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return obj.get("metadata", {}).get("labels") or {}


def _name(obj: Mapping[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("name", ""))


def is_retired(claim: Mapping[str, Any]) -> bool:
    return names.ANNOTATION_RETIRED in _annotations(claim)


def pod_claims(pod: Mapping[str, Any] | None) -> dict[str, str]:
    """Disk name → claim name, as mounted by the pod."""
    if pod is None:
        return {}
    out: dict[str, str] = {}
    for volume in pod.get("spec", {}).get("volumes") or []:
        claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        volume_name = str(volume.get("name", ""))
        if claim and volume_name.startswith("disk-"):
            out[volume_name[len("disk-") :]] = claim
    return out


def _data_claims(claims: Sequence[Mapping[str, Any]], disk: str) -> list[Mapping[str, Any]]:
    return [
        c for c in claims if _labels(c).get(names.LABEL_DISK) == disk and names.LABEL_GENERATION in _labels(c)
    ]


@dataclass(frozen=True)
class ClaimChoice:
    """The claim a disk uses now (`current`), the newest live one, and the next free generation."""

    current: str | None
    newest: str | None
    next_generation: int


def choose_claims(
    disks: Sequence[model.Disk], claims: Sequence[Mapping[str, Any]], pod: Mapping[str, Any] | None
) -> dict[str, ClaimChoice]:
    mounted = pod_claims(pod)
    out: dict[str, ClaimChoice] = {}
    for disk in disks:
        candidates = _data_claims(claims, disk.name)
        live = [c for c in candidates if not is_retired(c) and not c["metadata"].get("deletionTimestamp")]
        live.sort(key=lambda c: int(_labels(c)[names.LABEL_GENERATION]))
        newest = _name(live[-1]) if live else None
        generations = [int(_labels(c)[names.LABEL_GENERATION]) for c in candidates]
        in_pod = mounted.get(disk.name)
        if in_pod is not None and (generation := generation_of(in_pod)) is not None:
            generations.append(generation)
        current = in_pod if in_pod is not None else newest
        out[disk.name] = ClaimChoice(current, newest, max(generations, default=-1) + 1)
    return out


def _claim_gone(claim_name: str, claim: Mapping[str, Any] | None) -> str | None:
    """Why the claim no longer gives the disk a volume, or None."""
    if claim is None:
        return f"PVC {claim_name} was deleted"
    if claim["metadata"].get("deletionTimestamp"):
        return f"PVC {claim_name} is being deleted"
    if claim.get("status", {}).get("phase") == "Lost":
        return f"PVC {claim_name} lost its volume"
    return None


def _volume_gone(pv_name: str, volume: Mapping[str, Any] | None) -> str | None:
    """Why the claim's PV is no longer usable, or None."""
    if volume is None:
        return f"PV {pv_name} was deleted"
    phase = volume.get("status", {}).get("phase")
    if phase in ("Released", "Failed"):
        return f"PV {pv_name} is {phase}"
    return None


@dataclass(frozen=True)
class _Volume:
    """A disk's volume at the Kubernetes level."""

    detached: str | None = None  # why the disk lost its volume, or None
    pv: str | None = None
    attached: bool = False  # a VolumeAttachment of the PV is attached to the pod's node


def _volume_check(obs: Observation, ctx: _Context, claim_name: str | None, *, was_attached: bool) -> _Volume:
    if claim_name is None:
        return _Volume()
    claim = ctx.claims_by_name.get(claim_name)
    gone = _claim_gone(claim_name, claim)
    if gone is not None or claim is None:
        return _Volume(detached=gone)
    pv_name = claim.get("spec", {}).get("volumeName")
    if not pv_name:
        return _Volume()
    gone = _volume_gone(pv_name, obs.volumes.get(pv_name))
    if gone is not None:
        return _Volume(detached=gone, pv=pv_name)
    attached = _attached(obs.attachments.get(pv_name, ()), ctx.node)
    if was_attached and not attached:
        return _Volume(detached=f"VolumeAttachment of PV {pv_name} was removed", pv=pv_name)
    return _Volume(pv=pv_name, attached=attached)


def _attached(attachments: Sequence[Mapping[str, Any]], node: str | None) -> bool:
    return any(
        (a.get("status") or {}).get("attached")
        and (node is None or a.get("spec", {}).get("nodeName") == node)
        for a in attachments
    )


def _stale(
    seen: ReportedLogDir, claim: Mapping[str, Any] | None, disk_claims: Sequence[Mapping[str, Any]]
) -> bool:
    """True when the log dir the broker reports is the one another claim of this disk held."""
    seen_id = seen.directory_id
    if not seen_id:
        return False
    own = _annotations(claim).get(names.ANNOTATION_DIRECTORY_ID) if claim is not None else None
    if own == seen_id:
        return False
    others = {
        _annotations(c).get(names.ANNOTATION_DIRECTORY_ID)
        for c in disk_claims
        if claim is None or _name(c) != _name(claim)
    }
    return seen_id in others


def _since(before: broker_status.LogDirStatus | None, state: broker_status.DiskState, now: str) -> str:
    if before is not None and before.state == state and before.since:
        return before.since
    return now


@dataclass(frozen=True)
class _Context:
    """What `decide` derives once from an observation and shares between its disks."""

    now: str
    claims_by_name: Mapping[str, Mapping[str, Any]]
    choices: Mapping[str, ClaimChoice]
    previous_dirs: Mapping[str, broker_status.LogDirStatus]
    node: str | None
    same_pod: bool  # the running pod is the one the previous status saw
    broker_dirs: Mapping[str, ReportedLogDir]  # disk name → the broker's own view of its log dir
    report_unread: bool  # the broker's view could not be read this time (not: read, without a disk)
    controller_offline: frozenset[str]  # directory ids the controller lists offline
    controller_cordoned: frozenset[str]  # directory ids the controller lists cordoned (KIP-1066)
    controller_slow: frozenset[str]  # directory ids the controller lists slow (issue 35)


@dataclass(frozen=True)
class _DiskFacts:
    """What `decide` knows of one disk before it decides the disk's state."""

    disk: model.Disk
    choice: ClaimChoice
    claim: Mapping[str, Any] | None  # the claim the disk uses now
    before: broker_status.LogDirStatus | None  # the disk's entry in the previous status
    seen: ReportedLogDir | None  # the broker's view of its log dir (None: none, or of a replaced volume)
    directory_id: str | None

    @property
    def report(self) -> ReportedLogDir:
        return self.seen or _NOT_REPORTED


@dataclass(frozen=True)
class _DiskOutcome:
    """What `decide` concludes for one disk."""

    log_dir: broker_status.LogDirStatus
    events: tuple[Event, ...]
    replace: bool
    directory_id: tuple[str, str] | None  # (claim name, directory id) to record on the claim
    restart: str | None


def _context(obs: Observation) -> _Context:
    pod = obs.pod or {}
    registration = obs.registration or {}
    return _Context(
        now=broker_status.timestamp(obs.now),
        claims_by_name={_name(c): c for c in obs.claims},
        choices=choose_claims(obs.disks, obs.claims, obs.pod),
        previous_dirs={d.name: d for d in obs.previous.log_dirs},
        node=pod.get("spec", {}).get("nodeName"),
        same_pod=_same_pod(pod, obs.previous),
        broker_dirs=_reported_dirs(obs.log_dirs),
        report_unread=obs.log_dirs is None,
        controller_offline=frozenset(registration.get("offlineLogDirs") or []),
        controller_cordoned=frozenset(registration.get("cordonedLogDirs") or []),
        controller_slow=frozenset(registration.get("slowLogDirs") or []),
    )


def _same_pod(pod: Mapping[str, Any], previous: broker_status.BrokerStatus) -> bool:
    """The pod runs and is the one the previous status saw. A missing VolumeAttachment means a
    detach only for the running pod that had it attached: a recreated pod (new uid) gets its
    attachments anew, possibly on another node."""
    uid = pod.get("metadata", {}).get("uid")
    running = pod.get("status", {}).get("phase") == "Running"
    return running and uid is not None and previous.pod_uid == uid


def _reported_dirs(log_dirs: Sequence[Mapping[str, Any]] | None) -> dict[str, ReportedLogDir]:
    """Disk name → the broker's view of the disk's log dir, parsed once."""
    reported = (ReportedLogDir.model_validate(dict(entry)) for entry in log_dirs or ())
    return {disk: entry for entry in reported if (disk := names.disk_of_log_dir(entry.path)) is not None}


def decide(obs: Observation) -> Decision:
    ctx = _context(obs)
    outcomes = [_decide_disk(obs, ctx, disk) for disk in obs.disks]
    replace = tuple(disk.name for disk, outcome in zip(obs.disks, outcomes, strict=True) if outcome.replace)
    restart = _restart(outcomes)
    delete_claims, claim_events = _claims_to_delete(obs, ctx.choices)
    status = _broker_status(
        obs, tuple(outcome.log_dir for outcome in outcomes), replacing=bool(replace) or restart is not None
    )
    return Decision(
        status=status,
        unfenced=_unfenced(obs),
        events=(
            *(event for outcome in outcomes for event in outcome.events),
            *claim_events,
            *_fencing_events(obs, status),
        ),
        replace=replace,
        delete_claims=delete_claims,
        directory_ids=_directory_ids(outcomes),
        restart_pod=restart,
    )


def _restart(outcomes: Sequence[_DiskOutcome]) -> str | None:
    """Why the pod must be recreated (the last disk's reason), or None."""
    restarts = [outcome.restart for outcome in outcomes if outcome.restart is not None]
    return restarts[-1] if restarts else None


def _directory_ids(outcomes: Sequence[_DiskOutcome]) -> dict[str, str]:
    """Claim name → the directory id to record on it."""
    return dict(outcome.directory_id for outcome in outcomes if outcome.directory_id is not None)


def _claims_to_delete(
    obs: Observation, choices: Mapping[str, ClaimChoice]
) -> tuple[tuple[str, ...], tuple[Event, ...]]:
    """The claims to delete (retired ones that hold nothing, those of disks that left), and an
    Event for each."""
    retired = _retired_claims_to_delete(obs, choices)
    removed = _removed_disk_claims(obs)
    events = (
        *(Event("Normal", "DeletedClaim", f"Deleted retired PVC {c}: it holds no replicas") for c in retired),
        *(
            Event("Normal", "DeletedClaim", f"Deleted PVC {c}: its disk left the broker's spec")
            for c in removed
        ),
    )
    return tuple(sorted({*retired, *removed})), events


def _unfenced(obs: Observation) -> bool | None:
    """The readiness gate: None (left alone) while the controller cannot be reached."""
    if not obs.controller_reachable:
        return None
    registration = obs.registration
    return bool(
        registration is not None
        and not registration.get("fenced")
        and not registration.get("inControlledShutdown")
    )


def _fencing_events(obs: Observation, status: broker_status.BrokerStatus) -> tuple[Event, ...]:
    was_fenced = obs.previous.fenced
    if status.fenced is None or was_fenced is None or status.fenced == was_fenced:
        return ()
    if status.fenced:
        return (Event("Warning", "BrokerFenced", f"Broker {obs.broker_id} was fenced by the controller"),)
    return (Event("Normal", "BrokerUnfenced", f"Broker {obs.broker_id} was unfenced: placements confirmed"),)


def _decide_disk(obs: Observation, ctx: _Context, disk: model.Disk) -> _DiskOutcome:
    facts = _disk_facts(obs, ctx, disk)
    choice = facts.choice
    volume = _volume_check(obs, ctx, choice.current, was_attached=_was_attached(ctx, facts))
    state, error = _disk_state(
        disk,
        facts.seen,
        detached=volume.detached,
        listed_offline=facts.directory_id in ctx.controller_offline,
    )
    entry = _log_dir_status(obs, ctx, facts, volume, (state, error))
    newer = _newer_claim(choice)
    where = f"log dir {disk.name} of broker {obs.broker_id} (PVC {choice.current}, directory {facts.directory_id})"
    replace, replace_events = _replacement(obs, facts, (state, error), newer=newer)
    return _DiskOutcome(
        log_dir=entry,
        events=(*_disk_events(where, entry, facts.before, error), *replace_events),
        replace=replace,
        directory_id=_directory_id_to_record(facts),
        restart=(
            f"disk {disk.name} moves to its replacement volume {choice.newest}"
            if newer and obs.pod is not None
            else None
        ),
    )


def _disk_facts(obs: Observation, ctx: _Context, disk: model.Disk) -> _DiskFacts:
    choice = ctx.choices[disk.name]
    before = ctx.previous_dirs.get(disk.name)
    claim = ctx.claims_by_name.get(choice.current or "")
    seen = ctx.broker_dirs.get(disk.name)
    if seen is not None and _stale(seen, claim, _data_claims(obs.claims, disk.name)):
        seen = None  # the broker's view (or the poller's cache) is still of the replaced volume
    if seen is None and ctx.report_unread:
        seen = _last_report(ctx, before, choice.current)
    return _DiskFacts(
        disk=disk,
        choice=choice,
        claim=claim,
        before=before,
        seen=seen,
        directory_id=_directory_id(seen, claim, before, choice.current),
    )


# A disk state the broker's report gave, as its report says it (Draining is an online dir).
_REPORTED_AS: Final[Mapping[str, str]] = {
    "Online": "online",
    "Draining": "online",
    "Full": "full",
    "Offline": "offline",
}


def _last_report(
    ctx: _Context, before: broker_status.LogDirStatus | None, current: str | None
) -> ReportedLogDir | None:
    """The report the previous status was made from, while the broker's cannot be read: only
    for the pod the previous status saw and the claim the disk still uses, and only for a state
    the broker had reported (never Pending or Detached)."""
    if before is None or not ctx.same_pod or before.pvc != current:
        return None
    state = _REPORTED_AS.get(before.state)
    if state is None:
        return None
    return ReportedLogDir(
        directory_id=before.directory_id,
        state=state,
        error=before.last_error if state == "offline" else None,
        usable_bytes=before.usable_bytes,
        total_bytes=before.total_bytes,
        space_cordoned=before.space_cordoned,
        slow=before.slow,
        used_ratio=before.used_ratio,
        seconds_to_full=before.seconds_to_full,
        latency_ms=before.latency_ms,
    )


def _directory_id(
    seen: ReportedLogDir | None,
    claim: Mapping[str, Any] | None,
    before: broker_status.LogDirStatus | None,
    current: str | None,
) -> str | None:
    """The disk's log dir id: as the broker reports it, else as recorded on its claim, else as
    the previous status had it for the same claim."""
    recorded = _annotations(claim).get(names.ANNOTATION_DIRECTORY_ID) if claim is not None else None
    directory_id = (seen.directory_id if seen is not None else None) or recorded
    if directory_id is None and before is not None and before.pvc == current:
        return before.directory_id
    return directory_id


def _directory_id_to_record(facts: _DiskFacts) -> tuple[str, str] | None:
    """(claim name, directory id) when the broker reports a directory id its claim does not carry."""
    claim, directory_id = facts.claim, facts.directory_id
    if claim is None or facts.seen is None or not directory_id:
        return None
    if _annotations(claim).get(names.ANNOTATION_DIRECTORY_ID) == directory_id:
        return None
    return _name(claim), directory_id


def _was_attached(ctx: _Context, facts: _DiskFacts) -> bool:
    """The previous status saw the disk's current claim attached, in the pod running now."""
    before = facts.before
    return bool(
        ctx.same_pod and before is not None and before.attached and before.pvc == facts.choice.current
    )


def _newer_claim(choice: ClaimChoice) -> bool:
    """A newer claim than the one in use exists: a replacement is under way."""
    return (
        choice.newest is not None
        and choice.current is not None
        and (generation_of(choice.newest) or 0) > (generation_of(choice.current) or 0)
    )


def _placed(obs: Observation, directory_id: str | None) -> DirPlacements | None:
    return obs.placements.get(directory_id) if directory_id else None


def _placement_counts(obs: Observation, directory_id: str | None) -> tuple[int | None, int | None]:
    """(replicas, leaders) in the disk's dir: unknown without a directory id or while the
    controller cannot be reached."""
    placed = _placed(obs, directory_id)
    if placed is not None:
        return placed.replicas, placed.leaders
    none_placed = 0 if directory_id and obs.controller_reachable else None
    return none_placed, none_placed


def _disk_state(
    disk: model.Disk, seen: ReportedLogDir | None, *, detached: str | None, listed_offline: bool
) -> tuple[broker_status.DiskState, str | None]:
    """(state, error): the precedence of the module docstring's first guarantee."""
    report = seen or _NOT_REPORTED
    if detached is not None:
        return "Detached", detached
    if report.state == "offline" or listed_offline:
        return "Offline", report.error or "the controller lists the log dir offline"
    if report.state == "full":
        return "Full", report.error or "no space left on the volume"
    if disk.removed:
        return "Draining", None
    if seen is not None:
        return "Online", None
    return "Pending", None


def _log_dir_status(
    obs: Observation,
    ctx: _Context,
    facts: _DiskFacts,
    volume: _Volume,
    state_and_error: tuple[broker_status.DiskState, str | None],
) -> broker_status.LogDirStatus:
    """The disk's entry of `status.logDirs`. Its space and speed are as its broker reports them
    (issue 35): cordoned for its space, the used fraction, the time until full, slow (or listed
    slow by the controller), the median write-and-fsync latency; each only when known (and the
    flags only when true). Its claim's VolumeAttributesClass: `volume_attributes.status_of`."""
    state, error = state_and_error
    report, before, directory_id = facts.report, facts.before, facts.directory_id
    replicas, leaders = _placement_counts(obs, directory_id)
    attributes = volume_attributes.status_of(facts.claim)
    return broker_status.LogDirStatus(
        name=facts.disk.name,
        mount_path=names.disk_mount(facts.disk.name),
        state=state,
        since=_since(before, state, ctx.now),
        attached=volume.attached,
        pvc=facts.choice.current,
        pv=volume.pv,
        directory_id=directory_id,
        usable_bytes=report.usable_bytes,
        total_bytes=report.total_bytes,
        replicas=replicas,
        leaders=leaders,
        last_error=error or (before.last_error if before is not None else None),
        # KIP-1066: receives no new replica.
        cordoned=_true_or_none(bool(directory_id) and directory_id in ctx.controller_cordoned),
        space_cordoned=_true_or_none(report.space_cordoned),
        slow=_true_or_none(report.slow or directory_id in ctx.controller_slow),
        used_ratio=report.used_ratio,
        seconds_to_full=report.seconds_to_full,
        latency_ms=report.latency_ms,
        volume_attributes_class=attributes.current,
        target_volume_attributes_class=attributes.target,
        modify_volume_status=attributes.modify,
    )


def _true_or_none(flag: bool | None) -> Literal[True] | None:
    """A status flag: shown only when true."""
    return True if flag else None


def _replacement(
    obs: Observation,
    facts: _DiskFacts,
    state_and_error: tuple[broker_status.DiskState, str | None],
    *,
    newer: bool,
) -> tuple[bool, tuple[Event, ...]]:
    """Whether to replace the disk's volume now (the module docstring's second guarantee), and the
    Event saying so, or asking for the replacement when the policy waits for one."""
    state, error = state_and_error
    disk = facts.disk
    if state not in TROUBLED or disk.removed or newer:
        return False, ()
    wants = obs.policy == "Automatic" or disk.name in obs.replace_requested
    placed = _placed(obs, facts.directory_id)
    if wants and obs.controller_reachable and (placed.leaders if placed else 0) == 0:
        return True, (_replacing_event(obs.broker_id, disk.name, facts.choice.current, error),)
    old_state = facts.before.state if facts.before is not None else None
    if not wants and state != old_state:
        return False, (_needs_replacement_event(obs.broker_id, disk.name),)
    return False, ()


def _disk_events(
    where: str,
    entry: broker_status.LogDirStatus,
    before: broker_status.LogDirStatus | None,
    error: str | None,
) -> list[Event]:
    """The disk's Events against the previous status: its state, its space and its speed."""
    old_state = before.state if before is not None else None
    changed = _state_change_event(where, entry.state, old_state, error)
    return [
        *([changed] if changed is not None else []),
        *_space_events(where, entry, before),
        *_speed_events(where, entry, before),
    ]


def _space_events(
    where: str, entry: broker_status.LogDirStatus, before: broker_status.LogDirStatus | None
) -> list[Event]:
    """An Event when the dir is cordoned for its space, and when it is released."""
    was_cordoned = before is not None and bool(before.space_cordoned)
    used = f"{0 if entry.used_ratio is None else entry.used_ratio:.0%} used"
    if entry.space_cordoned and not was_cordoned:
        left = entry.seconds_to_full
        when = f", full in about {_duration(left)} at the current rate" if left is not None else ""
        return [
            Event(
                "Warning",
                "LogDirCordoned",
                f"Cordoned {where} for its space: {used} (log.dir.cordon.threshold){when}; it takes no new replicas",
            )
        ]
    if was_cordoned and not entry.space_cordoned:
        return [Event("Normal", "LogDirUncordoned", f"{where} takes new replicas again: {used}")]
    return []


def _speed_events(
    where: str, entry: broker_status.LogDirStatus, before: broker_status.LogDirStatus | None
) -> list[Event]:
    """An Event when the dir turns slow, and when it recovers."""
    was_slow = before is not None and bool(before.slow)
    if entry.slow and not was_slow:
        latency = entry.latency_ms
        median = f": median write-and-fsync {latency:.0f} ms" if latency is not None else ""
        return [
            Event(
                "Warning", "LogDirSlow", f"{where} is slow{median}; its leaderships moved to other replicas"
            )
        ]
    if was_slow and not entry.slow:
        return [Event("Normal", "LogDirNoLongerSlow", f"{where} is no longer slow")]
    return []


def _duration(seconds: float) -> str:
    if seconds >= 7200:
        return f"{seconds / 3600:.0f} h"
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def _state_change_event(where: str, state: str, old_state: str | None, error: str | None) -> Event | None:
    if state == old_state:
        return None
    if state == "Detached":
        return Event("Warning", "VolumeDetached", f"Detached {where}: {error}")
    if state == "Offline":
        return Event("Warning", "LogDirOffline", f"Took {where} offline: {error}")
    if state == "Full":
        return Event("Warning", "LogDirFull", f"Filled {where}: {error}")
    if state == "Online" and old_state in UNAVAILABLE:
        return Event("Normal", "LogDirOnline", f"Brought {where} back online")
    return None


def _replacing_event(broker_id: int, disk_name: str, pvc: str | None, error: str | None) -> Event:
    return Event(
        "Normal",
        "ReplacingVolume",
        f"Replacing the volume of disk {disk_name} of broker {broker_id} (PVC {pvc}): {error}",
    )


def _needs_replacement_event(broker_id: int, disk_name: str) -> Event:
    return Event(
        "Warning",
        "VolumeNeedsReplacement",
        f"Disk {disk_name} of broker {broker_id} needs a new volume: annotate the "
        f"JbodBroker with {names.ANNOTATION_REPLACE_DISKS}={disk_name} once leadership has moved",
    )


def _removed_disk_claims(obs: Observation) -> tuple[str, ...]:
    """Claims of disks the broker's spec no longer lists, which the running pod does not mount."""
    if obs.pod is None:
        return ()  # wait for the pod made without the disk: a missing pod may be one being deleted
    kept = {d.name for d in obs.disks}
    mounted = set(pod_claims(obs.pod).values())
    return tuple(
        sorted(
            _name(c)
            for c in obs.claims
            if names.LABEL_GENERATION in _labels(c)
            and _labels(c).get(names.LABEL_DISK) not in kept
            and _name(c) not in mounted
            and not c["metadata"].get("deletionTimestamp")
        )
    )


def _retired_claims_to_delete(obs: Observation, choices: Mapping[str, ClaimChoice]) -> tuple[str, ...]:
    if not obs.controller_reachable:
        return ()
    in_use = set(pod_claims(obs.pod).values()) | {c.current for c in choices.values() if c.current}
    out: list[str] = []
    for claim in obs.claims:
        name = _name(claim)
        if not is_retired(claim) or name in in_use or claim["metadata"].get("deletionTimestamp"):
            continue
        directory_id = _annotations(claim).get(names.ANNOTATION_DIRECTORY_ID)
        if directory_id is None:
            continue
        placed = obs.placements.get(directory_id)
        if placed is None or placed.replicas == 0:
            out.append(name)
    return tuple(sorted(out))


def pod_condition(pod: Mapping[str, Any] | None, condition_type: str) -> str | None:
    """The status ("True", "False", "Unknown") of one pod condition, or None if the pod has none."""
    for condition in (pod or {}).get("status", {}).get("conditions") or []:
        if condition.get("type") == condition_type:
            return str(condition.get("status"))
    return None


def _broker_status(
    obs: Observation, log_dirs: tuple[broker_status.LogDirStatus, ...], *, replacing: bool
) -> broker_status.BrokerStatus:
    phase = _phase(obs, log_dirs, replacing=replacing)
    pod, registration = obs.pod, obs.registration
    return broker_status.BrokerStatus(
        phase=phase,
        log_dirs=log_dirs,
        online_dirs=sum(1 for d in log_dirs if d.state in ("Online", "Full", "Draining")),
        offline_dirs=sum(1 for d in log_dirs if d.state in TROUBLED),
        pod_name=None if pod is None else _name(pod),
        pod_uid=(pod or {}).get("metadata", {}).get("uid") or None,
        fenced=_fenced(obs),
        broker_epoch=None if registration is None else int(registration.get("brokerEpoch", -1)),
        queued_placements=None if registration is None else int(registration.get("unassignedReplicas", 0)),
        conditions=_conditions(obs, phase, log_dirs),
    )


def _phase(
    obs: Observation, log_dirs: Sequence[broker_status.LogDirStatus], *, replacing: bool
) -> broker_status.Phase:
    registration = obs.registration
    if obs.pod is None or obs.pod.get("status", {}).get("phase") != "Running":
        return "Pending"
    if replacing:
        return "Replacing"
    if registration is None:
        return "Starting"
    if registration.get("fenced"):
        return "Fenced"
    if any(d.state in UNAVAILABLE for d in log_dirs):
        return "Degraded"
    return "Running"


def _fenced(obs: Observation) -> bool | None:
    """As the controller registered the broker; True when it does not know the broker, None when
    it cannot be asked."""
    if obs.registration is not None:
        return bool(obs.registration.get("fenced"))
    return True if obs.controller_reachable else None


def _conditions(
    obs: Observation, phase: broker_status.Phase, log_dirs: Sequence[broker_status.LogDirStatus]
) -> tuple[broker_status.Condition, ...]:
    ready = pod_condition(obs.pod, "Ready") == "True"
    degraded = [f"{d.name} is {d.state}" for d in log_dirs if d.state in UNAVAILABLE]
    progressing = phase in ("Pending", "Starting", "Fenced", "Replacing") or any(
        d.state == "Draining" for d in log_dirs
    )
    return (
        _condition(
            obs,
            "Ready",
            ready,
            "BrokerReady" if ready else phase,
            "the pod is Ready: the broker runs and the controller has unfenced it"
            if ready
            else f"the broker is {phase}",
        ),
        _condition(obs, "Progressing", progressing, phase, f"the broker is {phase}"),
        _condition(
            obs,
            "Degraded",
            bool(degraded),
            "LogDirsUnavailable" if degraded else "AllLogDirsOnline",
            "; ".join(degraded) if degraded else "every log dir is online",
        ),
    )


def _condition(
    obs: Observation, type_: str, value: bool, reason: str, message: str
) -> broker_status.Condition:
    return broker_status.Condition.of(
        type_, value, reason, message, before=obs.previous.condition(type_), now=obs.now
    )


def condition(  # noqa: PLR0913  a status condition's four fields, plus the previous conditions and the clock
    type_: str,
    value: bool,
    reason: str,
    message: str,
    *,
    previous: Sequence[Mapping[str, Any]] | None,
    now: datetime,
) -> dict[str, Any]:
    """A status condition as a dict (the other kinds' statuses); keeps the previous
    `lastTransitionTime` while its status does not change (`broker_status.Condition.of`)."""
    before = next((c for c in previous or () if c.get("type") == type_), None)
    return broker_status.Condition.of(
        type_,
        value,
        reason,
        message,
        before=None if before is None else broker_status.Condition.model_validate(dict(before)),
        now=now,
    ).as_status()


def hosted_replicas(placements: Mapping[int, Mapping[str, DirPlacements]]) -> dict[int, int]:
    """Broker id → replicas placed on it, in any directory."""
    return {broker: sum(p.replicas for p in dirs.values()) for broker, dirs in placements.items()}


def placements_by_broker(topics: Sequence[Mapping[str, Any]]) -> dict[int, dict[str, DirPlacements]]:
    """Broker id → directory id → replicas and leaders there, from the controller's `GET /v1/topics`."""
    counts: dict[int, dict[str, list[int]]] = {}
    for topic in topics:
        for partition in topic.get("partitions") or []:
            replicas = partition.get("replicas") or []
            directories = partition.get("directories") or []
            leader = partition.get("leader")
            for index, broker_id in enumerate(replicas):
                directory = str(directories[index]) if index < len(directories) else ""
                slot = counts.setdefault(int(broker_id), {}).setdefault(directory, [0, 0])
                slot[0] += 1
                if leader == broker_id:
                    slot[1] += 1
    return {
        broker: {d: DirPlacements(r, leaders) for d, (r, leaders) in dirs.items()}
        for broker, dirs in counts.items()
    }
