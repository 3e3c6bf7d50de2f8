"""The operator's decision about a disk its broker cordoned for its space (`jbod_operator.disk_growth`).

Covers: a cordoned disk with maxSize and an expandable class grows 1.5x, rounded to a MiB, capped
at maxSize; it is left alone while not cordoned, removed, unclaimed, or while the last growth is
being applied; a refusal names why (no maxSize, at maxSize, a class without expansion, an
unknown class); the Events (every growth; a refusal only when the cordon is new); and the spec's
maxSize checks.
"""

from __future__ import annotations

from typing import Any

import pytest

from jbod_operator import disk_growth, model
from jbod_operator.disk_growth import CannotGrow, Grow

MI = 2**20
CORDONED = {"name": "d0", "spaceCordoned": True, "usedRatio": 0.97}


def pvc(requested: str, capacity: str | None = None, storage_class: str | None = "fast") -> dict[str, Any]:
    claim: dict[str, Any] = {
        "metadata": {"name": "c-broker-0-d0-0"},
        "spec": {"resources": {"requests": {"storage": requested}}},
        "status": {"capacity": {"storage": capacity or requested}} if capacity != "" else {},
    }
    if storage_class:
        claim["spec"]["storageClassName"] = storage_class
    return claim


def disk(size: str = "1Gi", max_size: str | None = "4Gi", **extra: Any) -> model.Disk:
    return model.Disk.model_validate({"name": "d0", "size": size, "maxSize": max_size, **extra})


def test_a_cordoned_disk_grows_by_half_within_its_max_size() -> None:
    grown = disk_growth.decide(disk(), CORDONED, pvc("1Gi"), expandable=lambda: True)
    assert grown == Grow(claim="c-broker-0-d0-0", from_bytes=1024 * MI, to_bytes=1536 * MI)
    assert grown.size == "1536Mi"
    # Grown before (beyond the spec's size): from the claim's request, capped at maxSize.
    capped = disk_growth.decide(disk(), CORDONED, pvc("3Gi"), expandable=lambda: True)
    assert capped == Grow(claim="c-broker-0-d0-0", from_bytes=3072 * MI, to_bytes=4096 * MI)
    assert capped.size == "4096Mi"
    # A request that is no whole MiB is rounded up; a tiny one still grows by a MiB.
    odd = disk_growth.decide(disk(size="1M", max_size="1Gi"), CORDONED, pvc("1000k"), expandable=lambda: True)
    assert isinstance(odd, Grow) and odd.to_bytes == 2 * MI and odd.size == "2Mi"


@pytest.mark.parametrize(
    ("the_disk", "entry", "claim"),
    [
        (disk(), {"name": "d0", "usedRatio": 0.5}, pvc("1Gi")),  # not cordoned
        (disk(removed=True), CORDONED, pvc("1Gi")),  # draining: it leaves anyway
        (disk(), CORDONED, None),  # no claim yet
        (disk(), CORDONED, pvc("1536Mi", capacity="1Gi")),  # the last growth is being applied
        (disk(), CORDONED, pvc("1Gi", capacity="")),  # not bound yet
    ],
)
def test_left_alone(the_disk: model.Disk, entry: dict[str, Any], claim: dict[str, Any] | None) -> None:
    assert disk_growth.decide(the_disk, entry, claim, expandable=lambda: True) is None


def test_a_refusal_says_why() -> None:
    claim = "c-broker-0-d0-0"
    assert disk_growth.decide(
        disk(max_size=None), CORDONED, pvc("1Gi"), expandable=lambda: True
    ) == CannotGrow(claim, "disk d0 has no maxSize")
    assert disk_growth.decide(disk(), CORDONED, pvc("4Gi"), expandable=lambda: True) == CannotGrow(
        claim, "disk d0 is at its maxSize 4Gi"
    )
    assert disk_growth.decide(disk(), CORDONED, pvc("1Gi"), expandable=lambda: False) == CannotGrow(
        claim, "StorageClass fast does not allow volume expansion"
    )
    assert disk_growth.decide(
        disk(), CORDONED, pvc("1Gi", storage_class=None), expandable=lambda: None
    ) == CannotGrow(claim, "its StorageClass does not allow volume expansion")


def test_the_storage_class_is_asked_only_when_nothing_else_refuses() -> None:
    asked: list[str] = []

    def expandable() -> bool:
        asked.append("asked")
        return True

    disk_growth.decide(disk(max_size=None), CORDONED, pvc("1Gi"), expandable=expandable)
    disk_growth.decide(disk(), CORDONED, pvc("1536Mi", capacity="1Gi"), expandable=expandable)
    disk_growth.decide(disk(), {"name": "d0"}, pvc("1Gi"), expandable=expandable)
    assert asked == []
    assert isinstance(disk_growth.decide(disk(), CORDONED, pvc("1Gi"), expandable=expandable), Grow)
    assert asked == ["asked"]


def test_events_every_growth_and_a_refusal_once_per_cordon() -> None:
    where = "log dir d0 of broker 0"
    grow = Grow(claim="c", from_bytes=1024 * MI, to_bytes=1536 * MI)
    event = disk_growth.event(grow, where, newly_cordoned=False)
    assert event is not None and (event.type, event.reason) == ("Normal", "GrowingVolume")
    assert "from 1024Mi to 1536Mi" in event.message
    refused = CannotGrow("c", "disk d0 has no maxSize")
    warning = disk_growth.event(refused, where, newly_cordoned=True)
    assert warning is not None and (warning.type, warning.reason) == ("Warning", "VolumeNotGrown")
    assert "disk d0 has no maxSize" in warning.message
    assert disk_growth.event(refused, where, newly_cordoned=False) is None
    assert disk_growth.event(None, where, newly_cordoned=True) is None


def test_max_size_is_checked_in_the_spec() -> None:
    with pytest.raises(ValueError, match="maxSize 512Mi is below its size 1Gi"):
        disk(max_size="512Mi")
    with pytest.raises(ValueError, match="is not a quantity"):
        disk(max_size="lots")
    assert disk().max_size == "4Gi"
