"""Per-disk health of a broker and what to do about it: a pure function of one observation.

`decide(observation)` turns what the operator saw (the pod, the broker's volume claims, PVs and
VolumeAttachments, the controller's registration and placements, the broker's own log-dir view, and
the previous status) into the `JbodBroker` status plus the actions to take. It never does I/O.

Guarantees:
* A disk's state is `Detached` when its volume is gone at the Kubernetes level (claim deleted or
  lost, PV missing, released or failed, or its VolumeAttachment removed after one was seen),
  else `Offline` when the broker or the controller report its log dir offline, else `Full`,
  else `Draining` (left the spec but still holds replicas), else `Online` once the broker reports
  it, else `Pending`.
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
from typing import Any, Final

from jbod_operator import model, names

_GENERATION: Final = re.compile(r"-g([0-9]+)$")
TROUBLED: Final = frozenset({"Offline", "Detached"})


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
    log_dirs: Sequence[Mapping[str, Any]] | None
    previous: Mapping[str, Any]
    now: datetime


@dataclass(frozen=True)
class Decision:
    status: dict[str, Any]
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


def _detached_reason(
    obs: Observation, ctx: _Context, claim_name: str | None, *, was_attached: bool
) -> tuple[str | None, str | None, bool]:
    """(why the volume is detached or None, the PV name, attached now)."""
    if claim_name is None:
        return None, None, False
    claim = ctx.claims_by_name.get(claim_name)
    gone = _claim_gone(claim_name, claim)
    if gone is not None or claim is None:
        return gone, None, False
    pv_name = claim.get("spec", {}).get("volumeName")
    if not pv_name:
        return None, None, False
    gone = _volume_gone(pv_name, obs.volumes.get(pv_name))
    if gone is not None:
        return gone, pv_name, False
    attached = any(
        (a.get("status") or {}).get("attached")
        and (ctx.node is None or a.get("spec", {}).get("nodeName") == ctx.node)
        for a in obs.attachments.get(pv_name, ())
    )
    if was_attached and not attached:
        return f"VolumeAttachment of PV {pv_name} was removed", pv_name, False
    return None, pv_name, attached


def _stale(
    seen: Mapping[str, Any], claim: Mapping[str, Any] | None, disk_claims: Sequence[Mapping[str, Any]]
) -> bool:
    """True when the log dir the broker reports is the one another claim of this disk held."""
    seen_id = seen.get("directoryId")
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


def _since(previous: Mapping[str, Any] | None, state: str, now: str) -> str:
    if previous is not None and previous.get("state") == state and previous.get("since"):
        return str(previous["since"])
    return now


@dataclass(frozen=True)
class _Context:
    """What `decide` derives once from an observation and shares between its disks."""

    now: str
    claims_by_name: Mapping[str, Mapping[str, Any]]
    choices: Mapping[str, ClaimChoice]
    previous_dirs: Mapping[str, Mapping[str, Any]]
    node: str | None
    same_pod: bool  # the running pod is the one the previous status saw
    broker_dirs: Mapping[str, Mapping[str, Any]]  # disk name → the broker's own view of its log dir
    controller_offline: frozenset[str]  # directory ids the controller lists offline
    controller_cordoned: frozenset[str]  # directory ids the controller lists cordoned (KIP-1066)
    controller_slow: frozenset[str]  # directory ids the controller lists slow (issue 35)


@dataclass(frozen=True)
class _DiskOutcome:
    """What `decide` concludes for one disk."""

    log_dir: dict[str, Any]
    events: tuple[Event, ...]
    replace: bool
    directory_id: tuple[str, str] | None  # (claim name, directory id) to record on the claim
    restart: str | None


def _context(obs: Observation) -> _Context:
    pod_uid = (obs.pod or {}).get("metadata", {}).get("uid")
    # A missing VolumeAttachment means a detach only for the running pod that had it attached: a
    # recreated pod (new uid) gets its attachments anew, possibly on another node.
    running = (obs.pod or {}).get("status", {}).get("phase") == "Running"
    return _Context(
        now=obs.now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        claims_by_name={_name(c): c for c in obs.claims},
        choices=choose_claims(obs.disks, obs.claims, obs.pod),
        previous_dirs={d.get("name"): d for d in obs.previous.get("logDirs") or []},
        node=(obs.pod or {}).get("spec", {}).get("nodeName"),
        same_pod=running and pod_uid is not None and obs.previous.get("podUid") == pod_uid,
        broker_dirs={
            disk_name: entry
            for entry in obs.log_dirs or []
            if (disk_name := names.disk_of_log_dir(str(entry.get("path", "")))) is not None
        },
        controller_offline=frozenset((obs.registration or {}).get("offlineLogDirs") or []),
        controller_cordoned=frozenset((obs.registration or {}).get("cordonedLogDirs") or []),
        controller_slow=frozenset((obs.registration or {}).get("slowLogDirs") or []),
    )


def decide(obs: Observation) -> Decision:
    ctx = _context(obs)
    outcomes = [_decide_disk(obs, ctx, disk) for disk in obs.disks]
    events = [event for outcome in outcomes for event in outcome.events]
    replace = [disk.name for disk, outcome in zip(obs.disks, outcomes, strict=True) if outcome.replace]
    directory_ids = dict(outcome.directory_id for outcome in outcomes if outcome.directory_id is not None)
    restarts = [outcome.restart for outcome in outcomes if outcome.restart is not None]
    restart = restarts[-1] if restarts else None

    delete_claims = _retired_claims_to_delete(obs, ctx.choices)
    for claim_name in delete_claims:
        events.append(
            Event("Normal", "DeletedClaim", f"Deleted retired PVC {claim_name}: it holds no replicas")
        )
    removed = _removed_disk_claims(obs)
    for claim_name in removed:
        events.append(
            Event("Normal", "DeletedClaim", f"Deleted PVC {claim_name}: its disk left the broker's spec")
        )
    delete_claims = tuple(sorted({*delete_claims, *removed}))

    status = _broker_status(
        obs, [outcome.log_dir for outcome in outcomes], replacing=bool(replace) or restart is not None
    )
    events.extend(_fencing_events(obs, status))
    return Decision(
        status=status,
        unfenced=_unfenced(obs),
        events=tuple(events),
        replace=tuple(replace),
        delete_claims=delete_claims,
        directory_ids=directory_ids,
        restart_pod=restart,
    )


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


def _fencing_events(obs: Observation, status: Mapping[str, Any]) -> tuple[Event, ...]:
    was_fenced = obs.previous.get("fenced")
    if "fenced" not in status or was_fenced is None or status["fenced"] == was_fenced:
        return ()
    if status["fenced"]:
        return (Event("Warning", "BrokerFenced", f"Broker {obs.broker_id} was fenced by the controller"),)
    return (Event("Normal", "BrokerUnfenced", f"Broker {obs.broker_id} was unfenced: placements confirmed"),)


def _decide_disk(obs: Observation, ctx: _Context, disk: model.Disk) -> _DiskOutcome:
    choice = ctx.choices[disk.name]
    before = ctx.previous_dirs.get(disk.name)
    seen = ctx.broker_dirs.get(disk.name)
    claim = ctx.claims_by_name.get(choice.current or "")
    if seen is not None and _stale(seen, claim, _data_claims(obs.claims, disk.name)):
        seen = None  # the broker's view (or the poller's cache) is still of the replaced volume
    directory_id = (seen or {}).get("directoryId") or (_annotations(claim) if claim else {}).get(
        names.ANNOTATION_DIRECTORY_ID
    )
    if directory_id is None and before is not None and before.get("pvc") == choice.current:
        directory_id = before.get("directoryId")
    record: tuple[str, str] | None = None
    if (
        claim is not None
        and seen is not None
        and directory_id
        and (_annotations(claim).get(names.ANNOTATION_DIRECTORY_ID) != directory_id)
    ):
        record = (_name(claim), str(directory_id))
    detached, pv_name, attached = _detached_reason(
        obs,
        ctx,
        choice.current,
        was_attached=bool(
            ctx.same_pod and before and before.get("attached") and before.get("pvc") == choice.current
        ),
    )
    state, error = _disk_state(
        disk, seen, detached=detached, listed_offline=directory_id in ctx.controller_offline
    )
    placed = obs.placements.get(str(directory_id)) if directory_id else None
    # Replicas and leaders: unknown without a directory id or while the controller cannot be reached.
    no_placements = 0 if directory_id and obs.controller_reachable else None
    entry: dict[str, Any] = {
        "name": disk.name,
        "mountPath": names.disk_mount(disk.name),
        "state": state,
        "since": _since(before, state, ctx.now),
        "attached": attached,
    }
    for key, value in (
        ("pvc", choice.current),
        ("pv", pv_name),
        ("directoryId", directory_id),
        ("usableBytes", (seen or {}).get("usableBytes")),
        ("totalBytes", (seen or {}).get("totalBytes")),
        ("replicas", placed.replicas if placed else no_placements),
        ("leaders", placed.leaders if placed else no_placements),
        ("lastError", error or (before or {}).get("lastError")),
        # KIP-1066: receives no new replica; shown only when cordoned.
        ("cordoned", True if directory_id and directory_id in ctx.controller_cordoned else None),
    ):
        if value is not None:
            entry[key] = value
    entry.update(_space_and_speed(seen, directory_id, ctx))

    old_state = (before or {}).get("state")
    where = f"log dir {disk.name} of broker {obs.broker_id} (PVC {choice.current}, directory {directory_id})"
    events = [event for event in (_state_change_event(where, state, old_state, error),) if event is not None]
    events += _space_and_speed_events(where, entry, before)
    newer = (
        choice.newest is not None
        and choice.current is not None
        and (generation_of(choice.newest) or 0) > (generation_of(choice.current) or 0)
    )
    replace = False
    if state in TROUBLED and not disk.removed and not newer:
        wants = obs.policy == "Automatic" or disk.name in obs.replace_requested
        replace = wants and obs.controller_reachable and (placed.leaders if placed else 0) == 0
        if replace:
            events.append(_replacing_event(obs.broker_id, disk.name, choice.current, error))
        elif not wants and state != old_state:
            events.append(_needs_replacement_event(obs.broker_id, disk.name))
    return _DiskOutcome(
        log_dir=entry,
        events=tuple(events),
        replace=replace,
        directory_id=record,
        restart=(
            f"disk {disk.name} moves to its replacement volume {choice.newest}"
            if newer and obs.pod is not None
            else None
        ),
    )


def _disk_state(
    disk: model.Disk, seen: Mapping[str, Any] | None, *, detached: str | None, listed_offline: bool
) -> tuple[str, str | None]:
    """(state, error): the precedence of the module docstring's first guarantee."""
    if detached is not None:
        return "Detached", detached
    if (seen is not None and seen.get("state") == "offline") or listed_offline:
        return "Offline", (seen or {}).get("error") or "the controller lists the log dir offline"
    if seen is not None and seen.get("state") == "full":
        return "Full", (seen.get("error") or "no space left on the volume")
    if disk.removed:
        return "Draining", None
    if seen is not None:
        return "Online", None
    return "Pending", None


def _space_and_speed(
    seen: Mapping[str, Any] | None, directory_id: str | None, ctx: _Context
) -> dict[str, Any]:
    """The dir's space and speed as its broker reports them (issue 35): cordoned for its space,
    the used fraction, the time until full, slow (or listed slow by the controller), the median
    write-and-fsync latency; each only when known (and the two flags only when true)."""
    seen = seen or {}
    out: dict[str, Any] = {}
    if seen.get("spaceCordoned"):
        out["spaceCordoned"] = True
    if seen.get("slow") or (directory_id is not None and directory_id in ctx.controller_slow):
        out["slow"] = True
    for key in ("usedRatio", "secondsToFull", "latencyMs"):
        if isinstance(seen.get(key), int | float):
            out[key] = seen[key]
    return out


def _space_and_speed_events(
    where: str, entry: Mapping[str, Any], before: Mapping[str, Any] | None
) -> list[Event]:
    """An Event when the dir is cordoned for its space or released, and when it turns slow or
    recovers (against the previous status)."""
    before = before or {}
    events = []
    used = f"{entry.get('usedRatio', 0):.0%} used"
    if entry.get("spaceCordoned") and not before.get("spaceCordoned"):
        left = entry.get("secondsToFull")
        when = f", full in about {_duration(left)} at the current rate" if left is not None else ""
        events.append(
            Event(
                "Warning",
                "LogDirCordoned",
                f"Cordoned {where} for its space: {used} (log.dir.cordon.threshold){when}; it takes no new replicas",
            )
        )
    elif before.get("spaceCordoned") and not entry.get("spaceCordoned"):
        events.append(Event("Normal", "LogDirUncordoned", f"{where} takes new replicas again: {used}"))
    if entry.get("slow") and not before.get("slow"):
        latency = entry.get("latencyMs")
        median = f": median write-and-fsync {latency:.0f} ms" if latency is not None else ""
        events.append(
            Event(
                "Warning", "LogDirSlow", f"{where} is slow{median}; its leaderships moved to other replicas"
            )
        )
    elif before.get("slow") and not entry.get("slow"):
        events.append(Event("Normal", "LogDirNoLongerSlow", f"{where} is no longer slow"))
    return events


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
    if state == "Online" and old_state in TROUBLED | {"Full"}:
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


def _broker_status(obs: Observation, log_dirs: list[dict[str, Any]], *, replacing: bool) -> dict[str, Any]:
    registration = obs.registration
    pod = obs.pod
    running = pod is not None and pod.get("status", {}).get("phase") == "Running"
    troubled = [d for d in log_dirs if d["state"] in TROUBLED | {"Full"}]
    if pod is None or not running:
        phase = "Pending"
    elif replacing:
        phase = "Replacing"
    elif registration is None:
        phase = "Starting"
    elif registration.get("fenced"):
        phase = "Fenced"
    elif troubled:
        phase = "Degraded"
    else:
        phase = "Running"
    status: dict[str, Any] = {
        "phase": phase,
        "logDirs": log_dirs,
        "onlineDirs": sum(1 for d in log_dirs if d["state"] in ("Online", "Full", "Draining")),
        "offlineDirs": sum(1 for d in log_dirs if d["state"] in TROUBLED),
    }
    if pod is not None:
        status["podName"] = _name(pod)
        if pod.get("metadata", {}).get("uid"):
            status["podUid"] = pod["metadata"]["uid"]
    if registration is not None:
        status["fenced"] = bool(registration.get("fenced"))
        status["brokerEpoch"] = int(registration.get("brokerEpoch", -1))
        status["queuedPlacements"] = int(registration.get("unassignedReplicas", 0))
    elif obs.controller_reachable:
        status["fenced"] = True
    ready = pod_condition(pod, "Ready") == "True"
    degraded = [f"{d['name']} is {d['state']}" for d in troubled]
    stamps: dict[str, Any] = {"previous": obs.previous.get("conditions"), "now": obs.now}
    status["conditions"] = [
        condition(
            "Ready",
            ready,
            "BrokerReady" if ready else phase,
            "the pod is Ready: the broker runs and the controller has unfenced it"
            if ready
            else f"the broker is {phase}",
            **stamps,
        ),
        condition(
            "Progressing",
            phase in ("Pending", "Starting", "Fenced", "Replacing")
            or any(d["state"] == "Draining" for d in log_dirs),
            phase,
            f"the broker is {phase}",
            **stamps,
        ),
        condition(
            "Degraded",
            bool(degraded),
            "LogDirsUnavailable" if degraded else "AllLogDirsOnline",
            "; ".join(degraded) if degraded else "every log dir is online",
            **stamps,
        ),
    ]
    return status


def condition(  # noqa: PLR0913  a status condition's four fields, plus the previous conditions and the clock
    type_: str,
    value: bool,
    reason: str,
    message: str,
    *,
    previous: Sequence[Mapping[str, Any]] | None,
    now: datetime,
) -> dict[str, Any]:
    """A status condition; keeps the previous `lastTransitionTime` while its status does not change."""
    status = "True" if value else "False"
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    before = next((c for c in previous or () if c.get("type") == type_), None)
    if before is not None and before.get("status") == status and before.get("lastTransitionTime"):
        stamp = str(before["lastTransitionTime"])
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": stamp,
    }


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
