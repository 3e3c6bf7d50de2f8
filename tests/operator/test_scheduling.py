"""`spec.template`, the default topology spread and the disruption budgets (pure builders).

Covers: a template's affinity, tolerations, spread, priority class, node selector, pull secrets
and security contexts reach the broker pod and the controller and etcd StatefulSets' pods; the
operator's labels and annotations cannot be overridden (SpecError naming the field); a template
change changes the broker pod's spec hash (the pod is recreated), nothing else does; brokers
spread softly over zones (or `spec.rack.topologyKey`) and nodes unless the template says
otherwise; the budgets of brokers (unfenced = Ready), controllers and etcd.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from jbod_operator import builders, model, names, scheduling
from tests.chart.test_chart import _unknown_fields
from tests.operator.test_model_builders import OWNER, ROOT, example

AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["nvme"]}]}
            ]
        }
    }
}
TOLERATION = {"key": "dedicated", "operator": "Equal", "value": "kafka", "effect": "NoSchedule"}


def _template(**pod: Any) -> dict[str, Any]:
    return {
        "pod": {
            "metadata": {"labels": {"team": "streams"}, "annotations": {"example.com/owner": "streams"}},
            "affinity": AFFINITY,
            "tolerations": [TOLERATION],
            "priorityClassName": "kafka-critical",
            "nodeSelector": {"pool": "kafka"},
            "imagePullSecrets": [{"name": "registry"}],
            "securityContext": {"runAsUser": 20000, "supplementalGroups": [5]},
            **pod,
        },
        "container": {"securityContext": {"readOnlyRootFilesystem": False}},
    }


def _spec(template: dict[str, Any] | None = None, **extra: Any) -> model.ClusterSpec:
    data = {**example()["spec"], **extra}
    if template is not None:
        data["template"] = template
    return model.parse_cluster("demo", data)


def _pod(spec: model.ClusterSpec) -> dict[str, Any]:
    claims = {d.name: names.claim("demo", 1, d.name, 0) for d in spec.disks}
    return builders.broker_pod(
        spec, "demo", "ns", 1, disks=spec.disks, claims=claims, image="img:1", owner=OWNER
    )


def _applied(pod_spec: dict[str, Any]) -> None:
    assert pod_spec["affinity"] == AFFINITY
    assert pod_spec["tolerations"] == [TOLERATION]
    assert pod_spec["priorityClassName"] == "kafka-critical"
    assert pod_spec["nodeSelector"] == {"pool": "kafka"}
    assert pod_spec["imagePullSecrets"] == [{"name": "registry"}]
    # Merged key by key: the template's keys win, the operator's others stay.
    security = pod_spec["securityContext"]
    assert security["runAsUser"] == 20000 and security["supplementalGroups"] == [5]
    assert security["runAsNonRoot"] is True and security["fsGroup"] == builders.RUN_AS
    for container in [*pod_spec.get("initContainers", []), *pod_spec["containers"]]:
        assert container["securityContext"]["readOnlyRootFilesystem"] is False
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_a_template_reaches_the_broker_pod_and_the_statefulsets() -> None:
    spec = _spec(
        {"broker": _template(), "controller": _template(), "etcd": _template()}, controller={"replicas": 3}
    )
    pod = _pod(spec)
    _applied(pod["spec"])
    labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
    assert labels["team"] == "streams" and labels.items() >= names.broker_labels("demo", 1).items()
    assert annotations["example.com/owner"] == "streams" and names.ANNOTATION_SPEC_HASH in annotations
    for sts in (
        builders.controller_statefulset(spec, "demo", "ns", image="img:1", owner=OWNER),
        builders.etcd_statefulset(spec, "demo", "ns", owner=OWNER),
    ):
        template = sts["spec"]["template"]
        _applied(template["spec"])
        assert template["metadata"]["labels"]["team"] == "streams"
        assert template["metadata"]["annotations"] == {"example.com/owner": "streams"}
        # The selector stays the operator's, and matches the pods whatever the template adds.
        assert sts["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()

    # Each kind of pod has its own template: the brokers' does not reach the controllers.
    only_brokers = _spec({"broker": _template()})
    controller = builders.controller_statefulset(only_brokers, "demo", "ns", image="img:1", owner=OWNER)
    assert "affinity" not in controller["spec"]["template"]["spec"]
    assert "team" not in controller["spec"]["template"]["metadata"]["labels"]


@pytest.mark.parametrize(
    ("metadata", "needle"),
    [
        ({"labels": {"jbod.dev/cluster": "other"}}, "jbod.dev/cluster"),
        ({"labels": {"app.kubernetes.io/component": "x"}}, "app.kubernetes.io/component"),
        ({"labels": {"jbod.dev/anything": "x"}}, "jbod.dev/anything"),
        ({"annotations": {"jbod.dev/spec-hash": "0"}}, "jbod.dev/spec-hash"),
    ],
)
def test_a_template_cannot_take_the_operators_labels(metadata: dict[str, Any], needle: str) -> None:
    for kind in ("broker", "controller", "etcd"):
        with pytest.raises(model.SpecError) as raised:
            _spec({kind: {"pod": {"metadata": metadata}}})
        message = str(raised.value)
        assert message.startswith(f"spec.template.{kind}.pod.metadata.") and needle in message, message


def test_a_template_change_recreates_the_broker_pod() -> None:
    def spec_hash(spec: model.ClusterSpec) -> str:
        return str(_pod(spec)["metadata"]["annotations"][names.ANNOTATION_SPEC_HASH])

    plain = spec_hash(_spec())
    assert spec_hash(_spec()) == plain
    assert spec_hash(_spec({})) == plain == spec_hash(_spec({"broker": {}}))
    assert spec_hash(_spec({"controller": _template()})) == plain  # another kind's template
    changed = {
        spec_hash(_spec({"broker": {"pod": pod}}))
        for pod in (
            {"tolerations": [TOLERATION]},
            {"affinity": AFFINITY},
            {"metadata": {"labels": {"team": "a"}}},
            {"metadata": {"labels": {"team": "b"}}},
            {"metadata": {"annotations": {"example.com/x": "1"}}},
            {"priorityClassName": "high"},
        )
    }
    assert plain not in changed and len(changed) == 6
    assert spec_hash(_spec({"broker": {"container": {"securityContext": {"runAsUser": 1}}}})) != plain


def test_brokers_spread_softly_over_zones_and_nodes_unless_the_template_says() -> None:
    pod_spec = _pod(_spec())["spec"]
    selector = {"matchLabels": names.broker_selector("demo")}
    assert pod_spec["topologySpreadConstraints"] == [
        {"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": selector}
        for key in ("topology.kubernetes.io/zone", "kubernetes.io/hostname")
    ]
    # The selector matches every broker pod (bare pods: the scheduler counts them by label).
    assert selector["matchLabels"].items() <= _pod(_spec())["metadata"]["labels"].items()

    own = [
        {"maxSkew": 2, "topologyKey": "rack", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector}
    ]
    assert (
        _pod(_spec({"broker": {"pod": {"topologySpreadConstraints": own}}}))["spec"][
            "topologySpreadConstraints"
        ]
        == own
    )

    # A single controller has nothing to spread; a quorum and etcd spread like the brokers.
    single = builders.controller_statefulset(_spec(), "demo", "ns", image="img:1", owner=OWNER)
    assert "topologySpreadConstraints" not in single["spec"]["template"]["spec"]
    quorum_spec = _spec(controller={"replicas": 3})
    quorum = builders.controller_statefulset(quorum_spec, "demo", "ns", image="img:1", owner=OWNER)
    etcd = builders.etcd_statefulset(quorum_spec, "demo", "ns", owner=OWNER)
    for sts in (quorum, etcd):
        constraints = sts["spec"]["template"]["spec"]["topologySpreadConstraints"]
        assert [c["topologyKey"] for c in constraints] == [
            "topology.kubernetes.io/zone",
            "kubernetes.io/hostname",
        ]
        assert all(
            c["labelSelector"]["matchLabels"] == sts["spec"]["selector"]["matchLabels"] for c in constraints
        )


def test_the_zone_key_is_the_racks_topology_key_when_the_spec_has_one() -> None:
    class Rack:
        topology_key = "example.com/room"

    class WithRack:
        rack = Rack()

    assert scheduling.rack_topology_key(_spec()) is None
    assert scheduling.rack_topology_key(WithRack()) == "example.com/room"  # type: ignore[arg-type]
    spread = scheduling.default_spread(names.broker_selector("demo"), "example.com/room")
    assert [c["topologyKey"] for c in spread] == ["example.com/room", "kubernetes.io/hostname"]


def test_disruption_budgets_keep_brokers_unfenced_and_quorums_whole() -> None:
    brokers = builders.broker_disruption_budget(3, "demo", "ns", OWNER)["spec"]
    assert brokers["minAvailable"] == 2 and brokers["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert brokers["selector"]["matchLabels"] == names.broker_selector("demo")
    # Ready means unfenced: the budget's healthy count is the brokers the controller unfenced.
    assert _pod(_spec())["spec"]["readinessGates"] == [{"conditionType": names.READINESS_GATE}]

    spec = _spec(controller={"replicas": 3})
    for budget, sts in (
        (
            builders.controller_disruption_budget("demo", "ns", OWNER),
            builders.controller_statefulset(spec, "demo", "ns", image="img:1", owner=OWNER),
        ),
        (
            builders.etcd_disruption_budget("demo", "ns", OWNER),
            builders.etcd_statefulset(spec, "demo", "ns", owner=OWNER),
        ),
    ):
        assert (
            budget["kind"] == "PodDisruptionBudget" and budget["metadata"]["name"] == sts["metadata"]["name"]
        )
        assert budget["spec"]["maxUnavailable"] == 1
        assert budget["spec"]["unhealthyPodEvictionPolicy"] == "IfHealthyBudget"
        assert budget["spec"]["selector"] == sts["spec"]["selector"]
        assert budget["metadata"]["ownerReferences"][0]["uid"] == "u-1"


def test_the_scheduling_example_builds() -> None:
    """examples/jbodcluster-scheduling.yaml (docs/install.md, "Scheduling") parses and reaches the pods."""
    data = yaml.safe_load((ROOT / "examples" / "jbodcluster-scheduling.yaml").read_text())
    spec = model.parse_cluster(data["metadata"]["name"], data["spec"])
    pod = _pod(spec)
    assert pod["spec"]["nodeSelector"] == {"pool": "kafka"}
    [anti] = pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti["labelSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    [spread] = pod["spec"]["topologySpreadConstraints"]
    assert spread["labelSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    for sts in (
        builders.controller_statefulset(spec, "demo", "ns", image="img:1", owner=OWNER),
        builders.etcd_statefulset(spec, "demo", "ns", owner=OWNER),
    ):
        assert sts["spec"]["template"]["spec"]["tolerations"][0]["key"] == "dedicated"


def test_the_objects_use_only_fields_kubernetes_knows() -> None:
    """With every template field set, the pod, the StatefulSets and the budgets hold only fields
    of Kubernetes' own models (the template's subtrees included: a misplaced key would show)."""
    spec = _spec(
        {"broker": _template(), "controller": _template(), "etcd": _template()}, controller={"replicas": 3}
    )
    for obj in (
        _pod(spec),
        builders.controller_statefulset(spec, "demo", "ns", image="img:1", owner=OWNER),
        builders.etcd_statefulset(spec, "demo", "ns", owner=OWNER),
        builders.broker_disruption_budget(3, "demo", "ns", OWNER),
        builders.controller_disruption_budget("demo", "ns", OWNER),
        builders.etcd_disruption_budget("demo", "ns", OWNER),
    ):
        assert not list(_unknown_fields(obj, f"V1{obj['kind']}", obj["kind"]))
