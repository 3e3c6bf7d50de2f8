"""Per-disk health and the decisions taken from it (`jbod_operator.health.decide`), on built observations.

Covers: a healthy broker (Online, gate True, Running); a broker the controller keeps fenced (gate
False); each way a volume can go away (claim deleted, PV released, VolumeAttachment removed)
shows `Detached` with an event; a broker-reported offline dir shows `Offline`; Automatic policy
replaces only after leadership has moved, Manual waits for the annotation; a replacement under
way restarts the pod instead of replacing again; retired claims are deleted only when empty and
with a known directory id; nothing is decided about fencing while the controller is unreachable.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from jbod_operator import broker_status, health, model, names

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
DIR0, DIR1 = "AAAAAAAAAAAAAAAAAAAAZA", "AAAAAAAAAAAAAAAAAAAAZQ"
DISKS = (model.Disk(name="d0", size="1Gi"), model.Disk(name="d1", size="1Gi"))


def claim(disk: str, generation: int, *, pv: str | None = None, **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": names.claim("c", 0, disk, generation),
            "labels": {names.LABEL_DISK: disk, names.LABEL_GENERATION: str(generation)},
            "annotations": annotations,
        },
        "spec": {"volumeName": pv or f"pv-{disk}-{generation}"},
        "status": {"phase": "Bound"},
    }


def volume(name: str, phase: str = "Bound") -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"phase": phase}}


def attachment(pv: str, node: str = "node-0") -> dict[str, Any]:
    return {"spec": {"nodeName": node, "source": {"persistentVolumeName": pv}}, "status": {"attached": True}}


def pod(claims: dict[str, str], *, ready: bool = True, uid: str = "uid-1") -> dict[str, Any]:
    return {
        "metadata": {"name": "c-broker-0", "uid": uid},
        "spec": {
            "nodeName": "node-0",
            "volumes": [
                {"name": f"disk-{d}", "persistentVolumeClaim": {"claimName": c}} for d, c in claims.items()
            ],
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def log_dir(disk: str, directory: str, state: str = "online", error: str | None = None) -> dict[str, Any]:
    return {
        "path": f"/var/lib/jbod/disks/{disk}/log",
        "directoryId": directory,
        "state": state,
        "error": error,
        "usableBytes": 10,
        "totalBytes": 20,
    }


def observe(**overrides: Any) -> health.Observation:
    claims = [claim("d0", 0), claim("d1", 0)]
    base: dict[str, Any] = {
        "broker_id": 0,
        "disks": DISKS,
        "policy": "Automatic",
        "replace_requested": frozenset(),
        "pod": pod({"d0": "c-0-d0-g0", "d1": "c-0-d1-g0"}),
        "claims": claims,
        "volumes": {"pv-d0-0": volume("pv-d0-0"), "pv-d1-0": volume("pv-d1-0")},
        "attachments": {"pv-d0-0": [attachment("pv-d0-0")], "pv-d1-0": [attachment("pv-d1-0")]},
        "controller_reachable": True,
        "registration": {"brokerId": 0, "fenced": False, "brokerEpoch": 7, "unassignedReplicas": 0},
        "placements": {DIR0: health.DirPlacements(4, 2), DIR1: health.DirPlacements(3, 1)},
        "log_dirs": [log_dir("d0", DIR0), log_dir("d1", DIR1)],
        "previous": broker_status.BrokerStatus(),
        "now": NOW,
    }
    base.update(overrides)
    return health.Observation(**base)


def wire(decision: health.Decision) -> dict[str, Any]:
    """The status as the operator writes it."""
    return decision.status.as_status()


def states(decision: health.Decision) -> dict[str, str]:
    return {d["name"]: d["state"] for d in wire(decision)["logDirs"]}


def previous_of(decision: health.Decision) -> broker_status.BrokerStatus:
    return decision.status


def test_healthy_broker() -> None:
    decision = health.decide(observe())
    assert states(decision) == {"d0": "Online", "d1": "Online"}
    assert decision.unfenced is True
    assert wire(decision)["phase"] == "Running"
    d0 = wire(decision)["logDirs"][0]
    assert (d0["directoryId"], d0["replicas"], d0["leaders"], d0["attached"]) == (DIR0, 4, 2, True)
    assert decision.replace == () and decision.delete_claims == () and decision.restart_pod is None
    assert decision.directory_ids == {"c-0-d0-g0": DIR0, "c-0-d1-g0": DIR1}


def test_fenced_broker_keeps_its_gate_false() -> None:
    decision = health.decide(observe(registration={"brokerId": 0, "fenced": True, "unassignedReplicas": 12}))
    assert decision.unfenced is False
    assert wire(decision)["phase"] == "Fenced"
    assert wire(decision)["queuedPlacements"] == 12


def test_unreachable_controller_decides_nothing_about_fencing_or_volumes() -> None:
    obs = observe(
        controller_reachable=False,
        registration=None,
        placements={},
        volumes={"pv-d0-0": volume("pv-d0-0", "Released"), "pv-d1-0": volume("pv-d1-0")},
    )
    decision = health.decide(obs)
    assert decision.unfenced is None
    assert states(decision)["d0"] == "Detached"
    assert decision.replace == ()


def test_each_way_a_volume_goes_away_is_detached() -> None:
    ready = health.decide(observe())
    variants = {
        "claim deleted": {"claims": [claim("d1", 0)]},
        "pv released": {"volumes": {"pv-d0-0": volume("pv-d0-0", "Released"), "pv-d1-0": volume("pv-d1-0")}},
        "pv deleted": {"volumes": {"pv-d1-0": volume("pv-d1-0")}},
        "attachment removed": {"attachments": {"pv-d1-0": [attachment("pv-d1-0")]}},
    }
    for why, change in variants.items():
        decision = health.decide(observe(previous=previous_of(ready), **change))
        assert states(decision)["d0"] == "Detached", why
        assert states(decision)["d1"] == "Online", why
        [event] = [e for e in decision.events if e.reason == "VolumeDetached"]
        assert event.type == "Warning" and "d0" in event.message, why
        assert wire(decision)["phase"] == "Degraded"


def test_attachment_never_seen_is_not_a_detach() -> None:
    decision = health.decide(observe(attachments={}))
    assert states(decision) == {"d0": "Online", "d1": "Online"}


def test_offline_dir_waits_for_leadership_to_move_then_is_replaced() -> None:
    offline = [log_dir("d0", DIR0, "offline", "Input/output error"), log_dir("d1", DIR1)]
    registration = {"brokerId": 0, "fenced": False, "offlineLogDirs": [DIR0]}
    leading = health.decide(observe(log_dirs=offline, registration=registration))
    assert states(leading)["d0"] == "Offline"
    assert wire(leading)["logDirs"][0]["lastError"] == "Input/output error"
    assert leading.replace == ()
    moved = health.decide(
        observe(
            log_dirs=offline,
            registration=registration,
            placements={DIR0: health.DirPlacements(4, 0), DIR1: health.DirPlacements(3, 3)},
            previous=previous_of(leading),
        )
    )
    assert moved.replace == ("d0",)
    assert any(e.reason == "ReplacingVolume" for e in moved.events)
    assert not any(e.reason == "LogDirOffline" for e in moved.events), "no repeated event for the same state"


def test_manual_policy_waits_for_the_annotation() -> None:
    offline = [log_dir("d0", DIR0, "offline", "gone"), log_dir("d1", DIR1)]
    moved = {DIR0: health.DirPlacements(4, 0), DIR1: health.DirPlacements(3, 3)}
    waiting = health.decide(observe(policy="Manual", log_dirs=offline, placements=moved))
    assert waiting.replace == ()
    assert any(e.reason == "VolumeNeedsReplacement" for e in waiting.events)
    asked = health.decide(
        observe(policy="Manual", log_dirs=offline, placements=moved, replace_requested=frozenset({"d0"}))
    )
    assert asked.replace == ("d0",)


def test_replacement_under_way_restarts_the_pod_instead_of_replacing_again() -> None:
    claims = [claim("d0", 0, **{names.ANNOTATION_RETIRED: "t"}), claim("d0", 1), claim("d1", 0)]
    decision = health.decide(
        observe(
            claims=claims,
            log_dirs=[log_dir("d0", DIR0, "offline", "gone"), log_dir("d1", DIR1)],
            placements={DIR0: health.DirPlacements(4, 0)},
        )
    )
    assert decision.replace == ()
    assert decision.restart_pod is not None and "c-0-d0-g1" in decision.restart_pod
    assert wire(decision)["phase"] == "Replacing"
    choice = health.choose_claims(DISKS, claims, None)["d0"]
    assert (choice.current, choice.newest, choice.next_generation) == ("c-0-d0-g1", "c-0-d0-g1", 2)


def test_retired_claims_are_deleted_only_when_empty_and_known() -> None:
    retired_known = claim("d0", 0, **{names.ANNOTATION_RETIRED: "t", names.ANNOTATION_DIRECTORY_ID: DIR0})
    retired_unknown = claim("d1", 0, **{names.ANNOTATION_RETIRED: "t"})
    claims = [retired_known, claim("d0", 1), retired_unknown, claim("d1", 1)]
    new_pod = pod({"d0": "c-0-d0-g1", "d1": "c-0-d1-g1"})
    still_placed = health.decide(
        observe(claims=claims, pod=new_pod, placements={DIR0: health.DirPlacements(2, 0)})
    )
    assert still_placed.delete_claims == ()
    empty = health.decide(observe(claims=claims, pod=new_pod, placements={}))
    assert empty.delete_claims == ("c-0-d0-g0",)
    unreachable = health.decide(
        observe(claims=claims, pod=new_pod, placements={}, controller_reachable=False)
    )
    assert unreachable.delete_claims == ()


def test_claims_of_a_disk_that_left_go_once_the_pod_no_longer_mounts_them() -> None:
    only_d0 = DISKS[:1]
    still_mounted = health.decide(observe(disks=only_d0))
    assert still_mounted.delete_claims == ()
    recreated = health.decide(observe(disks=only_d0, pod=pod({"d0": "c-0-d0-g0"})))
    assert recreated.delete_claims == ("c-0-d1-g0",)
    assert any(e.reason == "DeletedClaim" and "c-0-d1-g0" in e.message for e in recreated.events)
    assert health.decide(observe(disks=only_d0, pod=None)).delete_claims == ()


def test_removed_disk_is_draining_and_counts_as_online() -> None:
    disks = (DISKS[0], DISKS[1].model_copy(update={"removed": True}))
    decision = health.decide(observe(disks=disks))
    assert states(decision) == {"d0": "Online", "d1": "Draining"}
    assert wire(decision)["onlineDirs"] == 2


def test_since_and_transition_times_hold_while_nothing_changes() -> None:
    first = health.decide(observe())
    later = health.decide(observe(previous=previous_of(first), now=NOW.replace(hour=13)))
    assert wire(later)["logDirs"][0]["since"] == wire(first)["logDirs"][0]["since"]
    assert wire(later)["conditions"] == wire(first)["conditions"]


def test_a_report_that_cannot_be_read_keeps_the_last_one_of_the_same_pod() -> None:
    """One poll of the broker's log dirs that fails (a timeout under load; the last CI's kind run
    read `Pending` then) leaves each disk as the running pod last reported it, an offline one
    with its error; a report read without a disk, or a new pod, is Pending as before."""
    failed = log_dir("d1", DIR1, "offline", "I/O error")
    first = health.decide(observe(log_dirs=[log_dir("d0", DIR0), failed]))
    unread = health.decide(observe(log_dirs=None, previous=previous_of(first), now=NOW.replace(hour=13)))
    assert states(unread) == {"d0": "Online", "d1": "Offline"}
    assert wire(unread)["logDirs"] == wire(first)["logDirs"]  # since, bytes and error kept
    assert unread.events == ()
    without_d0 = health.decide(observe(log_dirs=[failed], previous=previous_of(first)))
    assert states(without_d0)["d0"] == "Pending"
    new_pod = health.decide(
        observe(
            log_dirs=None,
            previous=previous_of(first),
            pod=pod({"d0": "c-0-d0-g0", "d1": "c-0-d1-g0"}, uid="uid-2"),
        )
    )
    assert states(new_pod) == {"d0": "Pending", "d1": "Pending"}


def test_placements_by_broker_counts_replicas_and_leaders_per_dir() -> None:
    topics = [
        {
            "partitions": [
                {"replicas": [0, 1], "directories": [DIR0, DIR1], "leader": 0},
                {"replicas": [1, 0], "directories": [DIR1, DIR0], "leader": 1},
                {"replicas": [0], "directories": ["AAAAAAAAAAAAAAAAAAAAAA"], "leader": -1},
            ]
        }
    ]
    counts = health.placements_by_broker(topics)
    assert counts[0][DIR0] == health.DirPlacements(2, 1)
    assert counts[0]["AAAAAAAAAAAAAAAAAAAAAA"] == health.DirPlacements(1, 0)
    assert counts[1][DIR1] == health.DirPlacements(2, 1)


def test_a_stale_view_of_the_replaced_volume_never_triggers_another_replacement() -> None:
    """Right after a replacement the poller may still hold the old broker's view: the old dir id,
    offline. It belongs to the retired claim, so the new claim is Pending, not Offline."""
    old = claim("d0", 0, **{names.ANNOTATION_RETIRED: "t", names.ANNOTATION_DIRECTORY_ID: DIR0})
    claims = [old, claim("d0", 1), claim("d1", 0)]
    decision = health.decide(
        observe(
            claims=claims,
            pod=pod({"d0": "c-0-d0-g1", "d1": "c-0-d1-g0"}),
            volumes={"pv-d0-1": volume("pv-d0-1"), "pv-d1-0": volume("pv-d1-0")},
            attachments={},
            log_dirs=[log_dir("d0", DIR0, "offline", "gone"), log_dir("d1", DIR1)],
            registration={"brokerId": 0, "fenced": True, "offlineLogDirs": [DIR0]},
            placements={DIR0: health.DirPlacements(4, 0)},
        )
    )
    assert states(decision)["d0"] == "Pending"
    assert decision.replace == ()
    assert "c-0-d0-g1" not in decision.directory_ids


def test_a_recreated_pod_without_attachments_yet_is_not_detached() -> None:
    first = health.decide(observe())
    assert wire(first)["podUid"] == "uid-1"
    recreated = observe(
        previous=previous_of(first),
        pod=pod({"d0": "c-0-d0-g0", "d1": "c-0-d1-g0"}, uid="uid-2"),
        attachments={},
    )
    assert states(health.decide(recreated)) == {"d0": "Online", "d1": "Online"}


def test_a_dir_the_controller_lists_cordoned_is_shown_cordoned_and_stays_online() -> None:
    registration = {"brokerId": 0, "fenced": False, "offlineLogDirs": [], "cordonedLogDirs": [DIR1]}
    decision = health.decide(observe(registration=registration))
    by_name = {d["name"]: d for d in wire(decision)["logDirs"]}
    assert by_name["d1"]["cordoned"] is True and by_name["d1"]["state"] == "Online"
    assert "cordoned" not in by_name["d0"]
    assert decision.replace == ()


def test_a_dir_cordoned_for_its_space_or_slow_is_shown_so_with_an_event_each_way() -> None:
    """Issue 35: the broker's view of its dir (space cordon, used ratio, time to full, slow,
    latency) reaches the status; an Event when the dir is cordoned for its space or turns slow,
    and one when it is released or recovers."""
    filling = {**log_dir("d0", DIR0), "spaceCordoned": True, "usedRatio": 0.96, "secondsToFull": 5400.0}
    slow = {**log_dir("d1", DIR1), "slow": True, "latencyMs": 812.0}
    first = health.decide(observe(log_dirs=[filling, slow]))
    by_name = {d["name"]: d for d in wire(first)["logDirs"]}
    assert by_name["d0"]["spaceCordoned"] is True and by_name["d0"]["usedRatio"] == 0.96
    assert by_name["d0"]["secondsToFull"] == 5400.0 and by_name["d0"]["state"] == "Online"
    assert by_name["d1"]["slow"] is True and by_name["d1"]["latencyMs"] == 812.0
    assert "slow" not in by_name["d0"] and "spaceCordoned" not in by_name["d1"]
    reasons = {e.reason: e.message for e in first.events}
    assert "96% used" in reasons["LogDirCordoned"] and "about 90 min" in reasons["LogDirCordoned"]
    assert "812 ms" in reasons["LogDirSlow"]
    again = health.decide(observe(log_dirs=[filling, slow], previous=first.status))
    assert not {"LogDirCordoned", "LogDirSlow"} & {e.reason for e in again.events}, "once per change"
    released = health.decide(
        observe(
            log_dirs=[{**log_dir("d0", DIR0), "usedRatio": 0.5}, log_dir("d1", DIR1)], previous=first.status
        )
    )
    assert {"LogDirUncordoned", "LogDirNoLongerSlow"} <= {e.reason for e in released.events}
    # The controller's list alone marks a dir slow (the broker's view may lag).
    listed = health.decide(
        observe(registration={"brokerId": 0, "fenced": False, "offlineLogDirs": [], "slowLogDirs": [DIR0]})
    )
    assert {d["name"]: d.get("slow") for d in wire(listed)["logDirs"]} == {"d0": True, "d1": None}


# The status of `test_the_status_keeps_its_wire_shape`'s observation as the operator wrote it before
# its status became typed (dict by dict), with what the broker's reconcile adds (`notGrowable`,
# `observedGeneration`): the CRD's schema, `kubectl` and the kind tests read this shape.
WRITTEN: dict[str, Any] = {
    "phase": "Degraded",
    "logDirs": [
        {
            "name": "d0",
            "mountPath": "/var/lib/jbod/disks/d0",
            "state": "Online",
            "since": "2026-11-22T12:00:00Z",
            "attached": True,
            "pvc": "c-0-d0-g0",
            "pv": "pv-d0-0",
            "directoryId": DIR0,
            "usableBytes": 10,
            "totalBytes": 20,
            "replicas": 4,
            "leaders": 2,
            "cordoned": True,
            "spaceCordoned": True,
            "usedRatio": 0.96,
            "secondsToFull": 5400.0,
            "latencyMs": 3.5,
            "notGrowable": "disk d0 has no maxSize",
        },
        {
            "name": "d1",
            "mountPath": "/var/lib/jbod/disks/d1",
            "state": "Offline",
            "since": "2026-11-22T12:00:00Z",
            "attached": False,
            "pvc": "c-0-d1-g0",
            "pv": "pv-d1-0",
            "directoryId": DIR1,
            "usableBytes": 10,
            "totalBytes": 20,
            "replicas": 3,
            "leaders": 1,
            "lastError": "Input/output error",
            "slow": True,
            "usedRatio": 1,
            "latencyMs": 812.0,
        },
    ],
    "onlineDirs": 1,
    "offlineDirs": 1,
    "podName": "c-broker-0",
    "podUid": "uid-1",
    "fenced": False,
    "brokerEpoch": 7,
    "queuedPlacements": 2,
    "conditions": [
        {
            "type": "Ready",
            "status": "True",
            "reason": "BrokerReady",
            "message": "the pod is Ready: the broker runs and the controller has unfenced it",
            "lastTransitionTime": "2026-11-22T12:00:00Z",
        },
        {
            "type": "Progressing",
            "status": "False",
            "reason": "Degraded",
            "message": "the broker is Degraded",
            "lastTransitionTime": "2026-11-22T12:00:00Z",
        },
        {
            "type": "Degraded",
            "status": "True",
            "reason": "LogDirsUnavailable",
            "message": "d1 is Offline",
            "lastTransitionTime": "2026-11-22T12:00:00Z",
        },
    ],
    "observedGeneration": 3,
}


def test_the_status_keeps_its_wire_shape() -> None:
    """The typed status is written key for key, in the same order, as the dicts were: a field
    left out when unknown, a flag only when true, a number in the type the broker reported."""
    filling = {**log_dir("d0", DIR0), "spaceCordoned": True, "usedRatio": 0.96, "secondsToFull": 5400.0}
    offline = {**log_dir("d1", DIR1, "offline", "Input/output error"), "slow": True, "usedRatio": 1}
    decision = health.decide(
        observe(
            log_dirs=[{**filling, "latencyMs": 3.5}, {**offline, "latencyMs": 812.0}],
            attachments={"pv-d0-0": [attachment("pv-d0-0")]},
            registration={
                "brokerId": 0,
                "fenced": False,
                "brokerEpoch": 7,
                "unassignedReplicas": 2,
                "offlineLogDirs": [DIR1],
                "cordonedLogDirs": [DIR0],
            },
        )
    )
    written = {
        **decision.status.with_not_growable({"d0": "disk d0 has no maxSize"}).as_status(),
        "observedGeneration": 3,
    }
    assert json.dumps(written) == json.dumps(WRITTEN)


def test_a_written_status_reads_back_whole() -> None:
    """The previous status is parsed once (`BrokerStatus.from_status`) and gives back the same
    dict, in the same order, as was written; keys the model does not know are ignored."""
    parsed = broker_status.BrokerStatus.from_status({**WRITTEN, "unknownKey": {"x": 1}})
    assert json.dumps(parsed.as_status()) == json.dumps(WRITTEN)
    d0 = WRITTEN["logDirs"][0]
    classes = {
        "volumeAttributesClass": "slow",
        "targetVolumeAttributesClass": "fast",
        "modifyVolumeStatus": "NotStarted",
    }
    with_classes = {
        **WRITTEN,
        "logDirs": [{**{k: v for k, v in d0.items() if k != "notGrowable"}, **classes}],
    }
    assert json.dumps(broker_status.BrokerStatus.from_status(with_classes).as_status()) == json.dumps(
        with_classes
    )
    d1 = parsed.log_dir("d1")
    assert d1 is not None and (d1.state, d1.last_error, d1.used_ratio) == ("Offline", "Input/output error", 1)
    assert isinstance(d1.used_ratio, int) and parsed.fenced is False
    later = health.decide(observe(previous=parsed, now=NOW.replace(hour=13)))
    assert wire(later)["logDirs"][0]["since"] == "2026-11-22T12:00:00Z"  # still Online since then
    assert wire(later)["logDirs"][1]["since"] == "2026-11-22T13:00:00Z"  # Online again now
    assert "LogDirOnline" in {e.reason for e in later.events}


def test_a_log_dir_shows_its_claims_volume_attributes_class() -> None:
    """The class a disk's claim asks for and how its change goes (`volume_attributes`), in the
    log dir's status entry; a claim without one shows none of the three keys."""
    asked = claim("d0", 0)
    asked["spec"]["volumeAttributesClassName"] = "fast"
    in_effect = claim("d1", 0)
    in_effect["spec"]["volumeAttributesClassName"] = "gold"
    in_effect["status"]["currentVolumeAttributesClassName"] = "gold"
    entries = {d["name"]: d for d in wire(health.decide(observe(claims=[asked, in_effect])))["logDirs"]}
    assert entries["d0"]["targetVolumeAttributesClass"] == "fast"
    assert entries["d0"]["modifyVolumeStatus"] == "NotStarted"
    assert "volumeAttributesClass" not in entries["d0"]
    assert entries["d1"]["volumeAttributesClass"] == "gold"
    assert "targetVolumeAttributesClass" not in entries["d1"]
    plain = wire(health.decide(observe()))["logDirs"][0]
    assert not {"volumeAttributesClass", "targetVolumeAttributesClass", "modifyVolumeStatus"} & set(plain)
