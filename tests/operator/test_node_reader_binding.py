"""The brokers' node-reader ClusterRoleBinding leaves with its JbodCluster (issue 34).

The binding is cluster-scoped, so no owner reference deletes it: `listeners.orphan_node_readers`
decides which bindings nothing needs (cluster gone, or no rack and no `nodeport` listener, only
in the watched namespaces); `listener_objects` deletes them at start-up, on the cluster's
deletion, and in the full reconcile once the spec needs the binding no longer. The I/O runs
against an in-memory stand-in for `kube`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from jbod_operator import builders, cluster_handlers, kube, listener_objects, listeners, model, names
from tests.operator.test_listeners import spec_with
from tests.operator.test_model_builders import OWNER, example

RACK = {"rack": {"topologyKey": "topology.kubernetes.io/zone"}}
NODEPORT = [{"name": "ext", "port": 9095, "type": "nodeport", "tls": False}]


def binding(cluster: str, namespace: str) -> dict[str, Any]:
    return builders.broker_rbac(cluster, namespace, OWNER)[1]


def plain_spec() -> model.ClusterSpec:
    return model.parse_cluster("demo", example()["spec"])


def test_needs_node_reader_with_a_rack_or_a_nodeport_listener_only() -> None:
    assert not listeners.needs_node_reader(plain_spec())
    assert listeners.needs_node_reader(spec_with([], **RACK))
    assert listeners.needs_node_reader(spec_with(NODEPORT))
    internal = [{"name": "in", "port": 9095, "type": "internal", "tls": False}]
    assert not listeners.needs_node_reader(spec_with(internal))


def test_orphans_are_bindings_of_gone_clusters_or_clusters_reading_no_node() -> None:
    found = [
        binding("kept", "ns"),  # its cluster has a rack
        binding("gone", "ns"),  # no JbodCluster any more
        binding("plain", "ns"),  # its cluster no longer has a rack or a nodeport listener
        binding("broken", "ns"),  # its spec does not parse: kept
        binding("kept", "other"),  # same cluster name, another namespace, gone
    ]
    clusters = {
        ("ns", "kept"): spec_with([], **RACK),
        ("ns", "plain"): plain_spec(),
        ("ns", "broken"): None,
    }
    assert listeners.orphan_node_readers(found, clusters, namespaces=None) == [
        "jbod-ns-gone-broker",
        "jbod-ns-plain-broker",
        "jbod-other-kept-broker",
    ]
    # An operator watching only `ns` leaves `other`'s bindings to whoever watches it.
    assert listeners.orphan_node_readers(found, clusters, namespaces={"ns"}) == [
        "jbod-ns-gone-broker",
        "jbod-ns-plain-broker",
    ]


def test_bindings_without_the_operators_labels_are_never_orphans() -> None:
    foreign = {"metadata": {"name": "cluster-admin-binding", "labels": {}}}
    unlabelled = binding("gone", "ns")
    del unlabelled["metadata"]["labels"][names.LABEL_NAMESPACE]
    other_manager = binding("gone", "ns")
    other_manager["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "Helm"
    assert listeners.orphan_node_readers([foreign, unlabelled, other_manager], {}, namespaces=None) == []


class FakeKube:
    """The calls `listener_objects` makes, on objects kept in memory, in the order made."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str | None, str], dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []

    def add(self, manifest: Mapping[str, Any]) -> None:
        meta = manifest["metadata"]
        self.objects[(manifest["kind"], meta.get("namespace"), meta["name"])] = dict(manifest)

    def apply(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        self.calls.append(("apply", manifest["kind"]))
        self.add(manifest)
        return dict(manifest)

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None) -> bool:
        self.calls.append(("delete", kind))
        return self.objects.pop((kind, namespace, name), None) is not None

    def list_objects(
        self, api_version: str, kind: str, namespace: str | None, labels: Mapping[str, str]
    ) -> list[dict[str, Any]]:
        self.calls.append(("list", kind))
        return [
            obj
            for (k, ns, _), obj in self.objects.items()
            if k == kind
            and namespace in (None, ns)
            and all(obj["metadata"].get("labels", {}).get(key) == value for key, value in labels.items())
        ]

    def bindings(self) -> list[str]:
        return sorted(name for kind, _, name in self.objects if kind == "ClusterRoleBinding")


@pytest.fixture
def fake_kube(monkeypatch: pytest.MonkeyPatch) -> FakeKube:
    fake = FakeKube()
    for call in ("apply", "delete", "list_objects"):
        monkeypatch.setattr(kube, call, getattr(fake, call))
    return fake


def jbod_cluster(name: str, namespace: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": names.API_VERSION,
        "kind": "JbodCluster",
        "metadata": {"name": name, "namespace": namespace},
        "spec": dict(spec),
    }


def test_sweep_deletes_the_bindings_of_clusters_gone_while_the_operator_was_down(fake_kube: FakeKube) -> None:
    for cluster, namespace in (("kept", "ns"), ("gone", "ns"), ("gone", "unwatched")):
        fake_kube.add(binding(cluster, namespace))
    fake_kube.add(jbod_cluster("kept", "ns", {**example()["spec"], **RACK}))
    deleted = listener_objects.sweep_node_readers(frozenset({"ns"}))
    assert deleted == ["jbod-ns-gone-broker"]
    assert fake_kube.bindings() == ["jbod-ns-kept-broker", "jbod-unwatched-gone-broker"]
    # The bindings are listed before the clusters: a cluster made in between keeps its binding.
    lists = [kind for call, kind in fake_kube.calls if call == "list"]
    assert lists == ["ClusterRoleBinding", "JbodCluster"]
    assert listener_objects.sweep_node_readers(None) == ["jbod-unwatched-gone-broker"]


def test_a_deleted_cluster_takes_its_binding_along(fake_kube: FakeKube) -> None:
    fake_kube.add(binding("demo", "ns"))
    fake_kube.add(binding("demo", "other"))
    cluster_handlers.cluster_deleted(event={"type": "MODIFIED"}, name="demo", namespace="ns")
    assert fake_kube.bindings() == ["jbod-ns-demo-broker", "jbod-other-demo-broker"]
    cluster_handlers.cluster_deleted(event={"type": "DELETED"}, name="demo", namespace="ns")
    assert fake_kube.bindings() == ["jbod-other-demo-broker"]
    cluster_handlers.cluster_deleted(event={"type": "DELETED"}, name="demo", namespace="ns")  # idempotent


def _pods(account: str | None) -> dict[str, Any]:
    spec = {"serviceAccountName": account} if account else {}
    return {"pods_index": {("ns", names.broker("demo", i)): [{"spec": spec}] for i in range(2)}}


def test_reconcile_binds_while_needed_and_unbinds_once_the_rack_is_gone(fake_kube: FakeKube) -> None:
    racked = spec_with([], **RACK)
    listener_objects.reconcile(racked, "demo", "ns", [0, 1], OWNER, _pods(None), {})
    assert fake_kube.bindings() == ["jbod-ns-demo-broker"]

    # The rack removed while the brokers still run with the node-reading ServiceAccount.
    plain = plain_spec()
    listener_objects.reconcile(plain, "demo", "ns", [0, 1], OWNER, _pods("demo-broker"), {})
    assert fake_kube.bindings() == []

    # Once the brokers rolled without it, a cluster without listeners makes no call at all.
    fake_kube.calls.clear()
    listener_objects.reconcile(plain, "demo", "ns", [0, 1], OWNER, _pods(None), {})
    assert fake_kube.calls == []


def test_reconcile_unbinds_once_the_last_nodeport_listener_is_gone(fake_kube: FakeKube) -> None:
    nodeport = spec_with(NODEPORT)
    listener_objects.reconcile(nodeport, "demo", "ns", [0, 1], OWNER, {}, {})
    assert fake_kube.bindings() == ["jbod-ns-demo-broker"]
    previous = {"listeners": [{"name": "ext", "type": "nodeport", "ready": False}]}
    internal = spec_with([{"name": "in", "port": 9095, "type": "internal", "tls": False}])
    listener_objects.reconcile(internal, "demo", "ns", [0, 1], OWNER, {}, previous)
    assert fake_kube.bindings() == []
