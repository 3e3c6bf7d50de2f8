"""Cluster planning (`jbod_operator.plan`): scaling and disk removal never drop replicas.

Covers: a removed disk that still holds replicas (or an unknown number) stays, marked removed,
with a wait naming the count; an empty one leaves; a broker beyond the count is deleted only
when the controller shows it empty; the cluster status counts ready and fenced brokers and
offline dirs; a disk given another StorageClass or a smaller size moves to a new volume
(`<name>-m<n>`) while the old one stays, removed, until it is empty, and its drain goes into the
new volume only; another VolumeAttributesClass changes the claims in place, never a move.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from jbod_operator import drain, model, plan

NOW = datetime(2026, 11, 22, tzinfo=UTC)
IDLE = drain.Actions(owned=drain.Owned())


def cluster(brokers: int, disks: tuple[str, ...]) -> model.ClusterSpec:
    return model.parse_cluster(
        "c", {"brokers": brokers, "disks": [{"name": d, "size": "1Gi"} for d in disks]}
    )


def broker(broker_id: int, disks: tuple[str, ...]) -> model.BrokerSpec:
    return model.parse_broker(
        {"clusterName": "c", "brokerId": broker_id, "disks": [{"name": d, "size": "1Gi"} for d in disks]}
    )


def with_replicas(**per_disk: int | None) -> dict[str, Any]:
    return {
        "logDirs": [
            {"name": d, "state": "Online", **({} if n is None else {"replicas": n})}
            for d, n in per_disk.items()
        ]
    }


def test_non_empty_disk_removal_is_refused_and_kept_draining() -> None:
    spec = cluster(1, ("d0",))
    existing = {0: broker(0, ("d0", "d1"))}
    result = plan.plan_brokers(spec, existing, {0: with_replicas(d0=3, d1=5)}, {0: 8})
    assert [(d.name, d.removed) for d in result.brokers[0]] == [("d0", False), ("d1", True)]
    [line] = result.refused
    assert "disk d1" in line and "5 left" in line


def test_unknown_count_is_not_empty() -> None:
    spec = cluster(1, ("d0",))
    result = plan.plan_brokers(spec, {0: broker(0, ("d0", "d1"))}, {0: with_replicas(d0=3, d1=None)}, None)
    assert [d.name for d in result.brokers[0]] == ["d0", "d1"]
    assert "unknown number" in result.refused[0]


def test_empty_disk_leaves() -> None:
    spec = cluster(1, ("d0",))
    result = plan.plan_brokers(spec, {0: broker(0, ("d0", "d1"))}, {0: with_replicas(d0=3, d1=0)}, {0: 3})
    assert [d.name for d in result.brokers[0]] == ["d0"]
    assert result.refused == ()


def test_scale_down_only_removes_empty_brokers() -> None:
    spec = cluster(1, ("d0",))
    existing = {i: broker(i, ("d0",)) for i in range(3)}
    result = plan.plan_brokers(spec, existing, {}, {0: 10, 1: 0, 2: 4})
    assert list(result.brokers) == [0]
    assert result.delete == (1,)
    assert len(result.refused) == 1 and "broker 2" in result.refused[0] and "4 left" in result.refused[0]
    unreachable = plan.plan_brokers(spec, existing, {}, None)
    assert unreachable.delete == () and len(unreachable.refused) == 2


def test_scale_up_creates_brokers() -> None:
    result = plan.plan_brokers(cluster(3, ("d0", "d1")), {0: broker(0, ("d0", "d1"))}, {}, {0: 0})
    assert sorted(result.brokers) == [0, 1, 2]
    assert all([d.name for d in disks] == ["d0", "d1"] for disks in result.brokers.values())


def test_cluster_status_counts() -> None:
    ready = {"conditions": [{"type": "Ready", "status": "True"}], "offlineDirs": 0, "fenced": False}
    fenced = {"conditions": [{"type": "Ready", "status": "False"}], "offlineDirs": 1, "fenced": True}
    status = plan.cluster_status(
        cluster(2, ("d0",)),
        [ready, fenced],
        waiting=[],
        drains=IDLE,
        controller_ready=True,
        previous={},
        now=NOW,
    )
    assert (status["readyBrokers"], status["fencedBrokers"], status["offlineDirs"]) == (1, 1, 1)
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Ready"]["status"] == "False"
    assert conditions["Degraded"]["status"] == "True"
    healthy = plan.cluster_status(
        cluster(1, ("d0",)), [ready], waiting=[], drains=IDLE, controller_ready=True, previous={}, now=NOW
    )
    assert {c["type"]: c["status"] for c in healthy["conditions"]} == {
        "Ready": "True",
        "Progressing": "False",
        "Draining": "False",
        "Degraded": "False",
    }


def test_removals_are_rechecked_against_fresh_placements() -> None:
    from jbod_operator import health

    spec = cluster(1, ("d0",))
    existing = {0: broker(0, ("d0", "d1")), 1: broker(1, ("d0",))}
    stale = {
        0: {
            "logDirs": [
                {"name": "d0", "directoryId": "A", "replicas": 1},
                {"name": "d1", "directoryId": "B", "replicas": 0},
            ]
        }
    }
    first = plan.plan_brokers(spec, existing, stale, {0: 1, 1: 0})
    assert plan.removes_something(first, existing)
    assert [d.name for d in first.brokers[0]] == ["d0"] and first.delete == (1,)
    fresh = {
        0: {"A": health.DirPlacements(1, 1), "B": health.DirPlacements(2, 0)},
        1: {"C": health.DirPlacements(1, 0)},
    }
    second = plan.plan_brokers(
        spec, existing, plan.with_replica_counts(stale, fresh), health.hosted_replicas(fresh)
    )
    assert [(d.name, d.removed) for d in second.brokers[0]] == [("d0", False), ("d1", True)]
    assert second.delete == ()
    assert not plan.removes_something(second, existing)
    unknown = plan.plan_brokers(spec, existing, plan.with_replica_counts(stale, None), None)
    assert unknown.delete == () and [d.name for d in unknown.brokers[0]] == ["d0", "d1"]


def _spec_disk(**fields: str) -> model.ClusterSpec:
    return model.parse_cluster(
        "c", {"brokers": 1, "disks": [{"name": "d0", "size": "1Gi"}, {"name": "d1", **fields}]}
    )


def _broker_disks(*disks: dict[str, Any]) -> model.BrokerSpec:
    return model.parse_broker(
        {"clusterName": "c", "brokerId": 0, "disks": [{"name": "d0", "size": "1Gi"}, *disks]}
    )


def test_another_storage_class_or_a_smaller_size_moves_the_disk_to_a_new_volume() -> None:
    current = {0: _broker_disks({"name": "d1", "size": "1Gi", "storageClass": "standard"})}
    for fields, reason in (
        ({"size": "1Gi", "storageClass": "fast"}, "storageClass standard → fast"),
        ({"size": "512Mi", "storageClass": "standard"}, "size 1Gi → 512Mi"),
    ):
        result = plan.plan_brokers(_spec_disk(**fields), current, {0: with_replicas(d0=1, d1=4)}, {0: 5})
        disks = {d.name: d for d in result.brokers[0]}
        assert set(disks) == {"d0", "d1", "d1-m1"}
        assert disks["d1"].removed and not disks["d1-m1"].removed
        assert disks["d1-m1"].serves == "d1" and disks["d1-m1"].size == fields["size"]
        assert disks["d1-m1"].storage_class == fields["storageClass"]
        [line] = result.moving
        assert "disk d1 of broker 0 moves to a new volume d1-m1" in line and reason in line
        assert "4 left" in result.refused[0]


def test_a_larger_size_grows_in_place_and_a_moved_disk_keeps_its_new_volume() -> None:
    grown = plan.plan_brokers(
        _spec_disk(size="2Gi"), {0: _broker_disks({"name": "d1", "size": "1Gi"})}, {}, {0: 0}
    )
    assert [(d.name, d.size, d.removed) for d in grown.brokers[0]] == [
        ("d0", "1Gi", False),
        ("d1", "2Gi", False),
    ]
    assert grown.moving == ()
    midway = _broker_disks(
        {"name": "d1-m1", "size": "512Mi", "specName": "d1"}, {"name": "d1", "size": "1Gi", "removed": True}
    )
    spec = _spec_disk(size="512Mi")
    draining = plan.plan_brokers(spec, {0: midway}, {0: with_replicas(d0=1, d1=2, **{"d1-m1": 2})}, {0: 5})
    assert [(d.name, d.removed) for d in draining.brokers[0]] == [
        ("d0", False),
        ("d1-m1", False),
        ("d1", True),
    ]
    assert draining.moving == () and draining.moved == ()
    done = plan.plan_brokers(spec, {0: midway}, {0: with_replicas(d0=1, d1=0, **{"d1-m1": 4})}, {0: 5})
    assert [(d.name, d.serves) for d in done.brokers[0]] == [("d0", "d0"), ("d1-m1", "d1")]
    assert done.moved == ("disk d1 of broker 0 left its old volume d1",)
    # Moved again (back to 1Gi is no move: it grows; another class is): the next name.
    again = plan.plan_brokers(
        _spec_disk(size="512Mi", storageClass="fast"),
        {0: _broker_disks({"name": "d1-m1", "size": "512Mi", "specName": "d1"})},
        {},
        {0: 0},
    )
    assert [d.name for d in again.brokers[0] if not d.removed] == ["d0", "d1-m2"]


def test_the_drains_of_moved_and_removed_disks() -> None:
    spec = cluster(2, ("d0", "d1"))
    existing = {
        0: model.parse_broker(
            {
                "clusterName": "c",
                "brokerId": 0,
                "disks": [
                    {"name": "d0", "size": "1Gi"},
                    {"name": "d1-m1", "size": "1Gi", "specName": "d1"},
                    {"name": "d1", "size": "1Gi", "removed": True},
                    {"name": "d9", "size": "1Gi"},
                ],
            }
        ),
        1: broker(1, ("d0", "d1")),
    }
    leaving = plan.leaving_disks(spec, existing)
    root = "/var/lib/jbod/disks"
    assert leaving.paths == {0: frozenset({f"{root}/d1/log", f"{root}/d9/log"})}
    assert leaving.into == {0: {f"{root}/d1/log": f"{root}/d1-m1/log"}}
    assert leaving.kept_paths == frozenset({f"{root}/d0/log", f"{root}/d1-m1/log"})


def test_a_disk_name_in_the_cluster_spec_leaves_room_for_its_moves() -> None:
    with pytest.raises(model.SpecError, match="longer than 20"):
        model.parse_cluster("c", {"brokers": 1, "disks": [{"name": "a" * 21, "size": "1Gi"}]})
    assert plan.successor_name("d1", {"d1", "d1-m1", "d1-m3"}) == "d1-m2"


def test_another_volume_attributes_class_changes_the_claims_in_place() -> None:
    """Issue 35: a VolumeAttributesClass given, changed or dropped is never a move: the broker keeps
    the volume, with the spec's class; one line per disk names the brokers whose claims change."""
    spec = model.parse_cluster(
        "c",
        {
            "brokers": 3,
            "disks": [
                {"name": "d0", "size": "1Gi"},
                {"name": "d1", "size": "1Gi", "volumeAttributesClassName": "fast"},
            ],
        },
    )
    existing = {
        0: broker(0, ("d0", "d1")),
        1: model.parse_broker(
            {
                "clusterName": "c",
                "brokerId": 1,
                "disks": [
                    {"name": "d0", "size": "1Gi"},
                    {"name": "d1", "size": "1Gi", "volumeAttributesClassName": "slow"},
                ],
            }
        ),
        2: broker(2, ("d0", "d1")),
    }
    result = plan.plan_brokers(spec, existing, {}, {0: 0, 1: 0, 2: 0})
    for broker_id in range(3):
        assert [(d.name, d.volume_attributes_class, d.removed) for d in result.brokers[broker_id]] == [
            ("d0", None, False),
            ("d1", "fast", False),
        ]
    assert result.moving == () and result.refused == ()
    assert result.reclassed == (
        "Giving the PVCs of disk d1 on brokers 0, 2 VolumeAttributesClass fast (was none): "
        "modified in place, no new volume, no restart",
        "Giving the PVCs of disk d1 on broker 1 VolumeAttributesClass fast (was slow): "
        "modified in place, no new volume, no restart",
    )
    # Once the JbodBrokers carry the class, nothing is left to say.
    settled = {b: model.BrokerSpec(cluster_name="c", broker_id=b, disks=result.brokers[b]) for b in range(3)}
    assert plan.plan_brokers(spec, settled, {}, {0: 0, 1: 0, 2: 0}).reclassed == ()
    # Dropped from the spec: the claims keep their class (Kubernetes does not unset one that took effect).
    dropped = plan.plan_brokers(cluster(3, ("d0", "d1")), settled, {}, {0: 0, 1: 0, 2: 0})
    assert dropped.moving == ()
    assert dropped.reclassed == (
        "Disk d1 names no VolumeAttributesClass any more: the PVCs of brokers 0, 1, 2 keep fast "
        "(Kubernetes does not unset a class that took effect); new PVCs get none",
    )


def test_a_moved_disk_takes_its_class_to_the_new_volume() -> None:
    """A class given with another StorageClass: the new volume is made with it, and that is the
    move's line, not a class change."""
    spec = _spec_disk(size="1Gi", storageClass="fast", volumeAttributesClassName="gold")
    result = plan.plan_brokers(spec, {0: _broker_disks({"name": "d1", "size": "1Gi"})}, {}, {0: 0})
    disks = {d.name: d for d in result.brokers[0]}
    assert disks["d1-m1"].volume_attributes_class == "gold"
    assert len(result.moving) == 1 and result.reclassed == ()
