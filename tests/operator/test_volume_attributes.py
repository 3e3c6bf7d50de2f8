"""A disk's VolumeAttributesClass (`jbod_operator.volume_attributes`, issue 35).

Covers: which claims are asked for the disk's class (bound ones that ask for another, not asked
for it before; never unset) and the patch; what a log dir's status says of its claim's class
(in effect, asked for, how the modification goes); the claims and JbodBroker entries made with
the class; a class change leaves the broker pod's hash alone (no restart).
"""

from __future__ import annotations

from typing import Any

import pytest

from jbod_operator import builders, model, names, volume_attributes

OWNER = {"apiVersion": "jbod.dev/v1alpha1", "kind": "JbodCluster", "metadata": {"name": "demo", "uid": "u-1"}}


def disk(vac: str | None = "fast") -> model.Disk:
    fields: dict[str, Any] = {"name": "d1", "size": "1Gi"}
    if vac is not None:
        fields["volumeAttributesClassName"] = vac
    return model.Disk.model_validate(fields)


def claim(
    *,
    spec: str | None = None,
    phase: str = "Bound",
    annotation: str | None = None,
    current: str | None = None,
    modify: dict[str, str] | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if current is not None:
        status["currentVolumeAttributesClassName"] = current
    if modify is not None:
        status["modifyVolumeStatus"] = modify
    return {
        "metadata": {
            "name": "demo-broker-0-d1-0",
            "annotations": {} if annotation is None else {volume_attributes.ANNOTATION: annotation},
        },
        "spec": {} if spec is None else {"volumeAttributesClassName": spec},
        "status": status,
    }


def test_a_bound_claim_asking_for_another_class_is_asked_for_the_disks() -> None:
    change = volume_attributes.change(disk("fast"), claim(spec="slow", current="slow"))
    assert change == volume_attributes.Change(claim="demo-broker-0-d1-0", before="slow", to="fast")
    assert change.patch() == {
        "metadata": {"annotations": {"jbod.dev/volume-attributes-class": "fast"}},
        "spec": {"volumeAttributesClassName": "fast"},
    }
    first = volume_attributes.change(disk("fast"), claim())
    assert first is not None and first.before is None


@pytest.mark.parametrize(
    ("the_disk", "the_claim"),
    [
        (disk("fast"), claim(spec="fast")),  # already asks for it (done or under way)
        (disk("fast"), claim(phase="Pending")),  # Kubernetes refuses a change before binding
        (disk("fast"), claim(annotation="fast")),  # asked before; the API server dropped the field
        (disk(None), claim(spec="fast", current="fast")),  # never unset
        (disk(None), claim()),
    ],
)
def test_claims_left_as_they_are(the_disk: model.Disk, the_claim: dict[str, Any]) -> None:
    assert volume_attributes.change(the_disk, the_claim) is None


def test_a_class_asked_for_again_after_another() -> None:
    """The annotation names the last class asked for: a new one is asked for."""
    assert volume_attributes.change(disk("gold"), claim(spec="fast", annotation="fast")) is not None


@pytest.mark.parametrize(
    ("the_claim", "fields"),
    [
        (None, {}),
        (claim(), {}),
        (claim(spec="fast", current="fast"), {"volumeAttributesClass": "fast"}),
        # kind's local-path: nothing takes the change up, the claim's status stays empty.
        (
            claim(spec="fast"),
            {"targetVolumeAttributesClass": "fast", "modifyVolumeStatus": "NotStarted"},
        ),
        (
            claim(
                spec="gold",
                current="fast",
                modify={"status": "InProgress", "targetVolumeAttributesClassName": "gold"},
            ),
            {
                "volumeAttributesClass": "fast",
                "targetVolumeAttributesClass": "gold",
                "modifyVolumeStatus": "InProgress",
            },
        ),
        (
            claim(spec="gold", modify={"status": "Infeasible", "targetVolumeAttributesClassName": "gold"}),
            {"targetVolumeAttributesClass": "gold", "modifyVolumeStatus": "Infeasible"},
        ),
        (
            claim(spec="gold", modify={"status": "Pending"}),
            {"targetVolumeAttributesClass": "gold", "modifyVolumeStatus": "Pending"},
        ),
        # The modification under way is of a class asked for before: the new one is not started.
        (
            claim(
                spec="gold",
                current="fast",
                modify={"status": "Infeasible", "targetVolumeAttributesClassName": "bad"},
            ),
            {
                "volumeAttributesClass": "fast",
                "targetVolumeAttributesClass": "gold",
                "modifyVolumeStatus": "NotStarted",
            },
        ),
        # Dropped from the spec after it took effect: the claim keeps it.
        (claim(current="fast"), {"volumeAttributesClass": "fast"}),
    ],
)
def test_status_says_what_the_claim_says(the_claim: dict[str, Any] | None, fields: dict[str, str]) -> None:
    assert volume_attributes.status_of(the_claim).fields() == fields


def test_claims_and_broker_entries_are_made_with_the_class() -> None:
    made = builders.volume_claim("demo", "ns", 0, disk="d1", volume=disk("fast"), generation=0)
    assert made["spec"]["volumeAttributesClassName"] == "fast"
    plain = builders.volume_claim("demo", "ns", 0, disk="d1", volume=disk(None), generation=0)
    assert "volumeAttributesClassName" not in plain["spec"]
    assert builders.disk_entry(disk("fast")) == {
        "name": "d1",
        "size": "1Gi",
        "volumeAttributesClassName": "fast",
    }
    assert model.parse_broker(
        {"clusterName": "demo", "brokerId": 0, "disks": [builders.disk_entry(disk("fast"))]}
    ).disks == (disk("fast"),)


def test_an_empty_class_name_is_refused() -> None:
    with pytest.raises(model.SpecError, match=r"spec\.disks\.0\.volumeAttributesClassName"):
        model.parse_cluster(
            "demo", {"brokers": 1, "disks": [{"name": "d0", "size": "1Gi", "volumeAttributesClassName": ""}]}
        )


def test_a_class_change_does_not_restart_the_broker() -> None:
    spec = model.parse_cluster("demo", {"brokers": 1, "disks": [{"name": "d1", "size": "1Gi"}]})

    def pod(the_disk: model.Disk) -> dict[str, Any]:
        claims = {"d1": names.claim("demo", 0, "d1", 0)}
        return builders.broker_pod(
            spec, "demo", "ns", 0, disks=(the_disk,), claims=claims, image="img:1", owner=OWNER
        )

    hashes = {
        key: {pod(disk(vac))["metadata"]["annotations"][key] for vac in (None, "fast", "gold")}
        for key in (names.ANNOTATION_SPEC_HASH, names.ANNOTATION_CONFIG_HASH)
    }
    assert all(len(values) == 1 for values in hashes.values()), hashes
