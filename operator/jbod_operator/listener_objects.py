"""The I/O side of `spec.listeners` and `spec.rack` (issue 34); the decisions are `listeners`'.

* `reconcile` (the cluster's full pass) applies the listeners' Services and Ingresses for the
  cluster's brokers, deletes those of listeners or brokers no longer there (`listeners.stale`),
  gives the brokers their ServiceAccount and node-reading binding when a listener or the rack
  needs the node-info init container, reads back what Kubernetes assigned
  (node ports, LoadBalancer addresses, the brokers' nodes) and returns it with
  `status.listeners`, whose `ready` also rests on what the brokers serve: their registrations
  (the controller's view the caller passes) and, for `tls` listeners, their certificate Secrets
  (`listeners.status`).
* The node-reader binding (cluster-scoped, so without an owner) is deleted by `reconcile` once
  the cluster needs it no longer (no rack, no `nodeport` listener) while a broker pod still runs
  with the brokers' ServiceAccount or `status.listeners` still has a `nodeport` listener, by
  `delete_node_reader` when the JbodCluster is deleted, and by `sweep_node_readers` (at the
  operator's start-up) for clusters deleted or changed while the operator was down.
* `for_broker` (a broker's reconcile) reads its own listener Services only: the config it gets
  never waits on another broker's node.
* `bootstrap_keys`: the `bootstrap.servers.<listener>` keys the client Secrets add, from the
  cluster's `status.listeners` (only listeners whose address is known).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from jbod_operator import builders, cluster_access, cluster_tls, kube, listeners, model, names


@dataclass(frozen=True)
class Reconciled:
    assigned: listeners.Assigned
    status: list[dict[str, Any]]
    bootstrap: dict[str, str]  # `bootstrap.servers.<listener>` keys of the client Secrets


def reconcile(  # noqa: PLR0913  the cluster (spec, name, namespace, owner), its brokers, kopf's indexes, its status, the controller's view
    spec: model.ClusterSpec,
    cluster: str,
    namespace: str,
    broker_ids: Iterable[int],
    owner: Mapping[str, Any],
    indexes: Mapping[str, Any],
    previous: Mapping[str, Any],
    *,
    registrations: Mapping[int, Mapping[str, Any]] | None = None,
) -> Reconciled:
    """Applies and cleans up the listeners' objects; no API call at all for a cluster that has
    no listener, no rack, never had a listener (`previous`: its status) and whose broker pods
    do not run with the node-reading ServiceAccount."""
    ids = sorted(set(broker_ids))
    node_reader = listeners.needs_node_reader(spec)
    had_node_reader = _pods_read_nodes(cluster, namespace, ids, indexes) or any(
        entry.get("type") == "nodeport" for entry in previous.get("listeners") or []
    )
    if not spec.listeners and not node_reader and not had_node_reader and not previous.get("listeners"):
        return Reconciled(assigned=listeners.Assigned(), status=[], bootstrap={})
    wanted = listeners.objects(spec, cluster, namespace, ids, owner)
    applied = [kube.apply(manifest) for manifest in wanted]
    selector = {names.LABEL_CLUSTER: cluster}
    for api_version, kind in (("v1", "Service"), ("networking.k8s.io/v1", "Ingress")):
        had_ingress = any(entry.get("type") == "ingress" for entry in previous.get("listeners") or [])
        if kind == "Ingress" and not had_ingress and all(x.type != "ingress" for x in spec.listeners):
            continue  # no Ingress API call for a cluster that has and had no ingress listener
        found = [{**o, "kind": kind} for o in kube.list_objects(api_version, kind, namespace, selector)]
        for _, name in listeners.stale(found, wanted):
            kube.delete(api_version, kind, name, namespace)
    if node_reader:
        for manifest in builders.broker_rbac(cluster, namespace, owner):
            kube.apply(manifest)
    elif had_node_reader:
        delete_node_reader(cluster, namespace)
    nodes: dict[int, dict[str, Any]] = {}
    if any(listener.type == "nodeport" for listener in spec.listeners):
        pods_index = indexes.get("pods_index") or {}
        for broker_id in ids:
            pod = next(iter(pods_index.get((namespace, names.broker(cluster, broker_id)), [])), None)
            node_name = ((pod or {}).get("spec") or {}).get("nodeName")
            node = kube.get("v1", "Node", node_name, None) if node_name else None
            if node is not None:
                nodes[broker_id] = node
    assigned = listeners.assigned_from((a for a in applied if a.get("kind") == "Service"), nodes)
    statuses = listeners.status(
        spec,
        cluster,
        namespace,
        ids,
        assigned,
        serving=_serving(spec, cluster, namespace, ids, registrations),
        previous=previous.get("listeners") or [],
    )
    return Reconciled(
        assigned=assigned,
        status=[s.as_status() for s in statuses],
        bootstrap={
            f"bootstrap.servers.{s.name}": s.bootstrap_servers for s in statuses if s.bootstrap_servers
        },
    )


def _serving(
    spec: model.ClusterSpec,
    cluster: str,
    namespace: str,
    ids: Iterable[int],
    registrations: Mapping[int, Mapping[str, Any]] | None,
) -> dict[int, listeners.BrokerServes] | None:
    """What each broker serves: its registration, and its certificate Secret's leaf when a
    listener has `tls` (None without the controller's view)."""
    if registrations is None:
        return None
    with_tls = spec.tls.enabled and any(listener.tls for listener in spec.listeners)
    now, propagation = cluster_access.now(), cluster_access.SETTINGS["secret_propagation"]
    return {
        broker_id: listeners.broker_serves(
            registrations.get(broker_id),
            cluster_tls.leaf(names.broker_tls(cluster, broker_id), namespace) if with_tls else None,
            now=now,
            propagation=propagation,
        )
        for broker_id in ids
    }


def _pods_read_nodes(cluster: str, namespace: str, ids: Iterable[int], indexes: Mapping[str, Any]) -> bool:
    """Whether a broker pod of the cluster (kopf's pod index) runs with the node-reading
    ServiceAccount, so the node-reader binding may still be there."""
    pods_index = indexes.get("pods_index") or {}
    account = builders.broker_service_account(cluster)
    return any(
        ((pod.get("spec") or {}).get("serviceAccountName")) == account
        for broker_id in ids
        for pod in pods_index.get((namespace, names.broker(cluster, broker_id)), [])
    )


_BINDING_LABELS = {names.LABEL_COMPONENT: "broker", "app.kubernetes.io/managed-by": names.MANAGED_BY}


def delete_node_reader(cluster: str, namespace: str) -> bool:
    """Deletes the cluster's node-reader binding; False if there was none."""
    return kube.delete(
        "rbac.authorization.k8s.io/v1",
        "ClusterRoleBinding",
        builders.node_reader_binding(cluster, namespace),
        None,
    )


def sweep_node_readers(namespaces: Collection[str] | None) -> list[str]:
    """Deletes the node-reader bindings nothing needs any more (`listeners.orphan_node_readers`)
    of the JbodClusters in `namespaces` (None: every namespace) and returns their names. The
    bindings are listed before the clusters, so a cluster created in between keeps its binding."""
    bindings = kube.list_objects("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", None, _BINDING_LABELS)
    found: list[dict[str, Any]] = []
    for namespace in sorted(namespaces) if namespaces is not None else [None]:
        found += kube.list_objects(names.API_VERSION, "JbodCluster", namespace, {})
    clusters: dict[tuple[str, str], model.ClusterSpec | None] = {}
    for body in found:
        meta = body.get("metadata") or {}
        try:
            spec: model.ClusterSpec | None = model.parse_cluster(meta["name"], dict(body.get("spec") or {}))
        except model.SpecError:
            spec = None
        clusters[(meta.get("namespace") or "default", meta["name"])] = spec
    orphans = listeners.orphan_node_readers(bindings, clusters, namespaces=namespaces)
    for name in orphans:
        kube.delete("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", name, None)
    return orphans


def for_broker(
    spec: model.ClusterSpec, cluster: str, namespace: str, broker_id: int
) -> listeners.BrokerListeners:
    """The listener entries of one broker's config, from its own Services as they are now."""
    if not spec.listeners and spec.rack is None:
        return listeners.BrokerListeners()
    services = []
    for listener in spec.listeners:
        if listener.type in ("nodeport", "loadbalancer"):
            found = kube.get(
                "v1", "Service", listeners.broker_service(cluster, broker_id, listener), namespace
            )
            if found is not None:
                services.append(found)
    assigned = listeners.assigned_from(services, {})
    return listeners.broker_listeners(spec, cluster, namespace, broker_id, assigned)


def bootstrap_keys(cluster_body: Mapping[str, Any] | None) -> dict[str, str]:
    """`bootstrap.servers.<listener>` of the cluster's listeners whose address is known."""
    entries = ((cluster_body or {}).get("status") or {}).get("listeners") or []
    return {
        f"bootstrap.servers.{entry['name']}": entry["bootstrapServers"]
        for entry in entries
        if entry.get("name") and entry.get("bootstrapServers")
    }
