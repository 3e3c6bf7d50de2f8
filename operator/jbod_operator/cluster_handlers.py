"""kopf handlers of `JbodCluster`: one daemon per cluster polls the controller and the brokers
(`views.poll_cluster`) into `cluster_access.VIEWS`; `reconcile_cluster` runs on create, update,
resume and two timers (a full pass every minute, a refresh of brokers and status every few
seconds). Idempotent: running it again converges; "not yet" is a `TemporaryError`.

The brokers' node-reader ClusterRoleBinding has no owner: `cluster_deleted` deletes it on the
JbodCluster's deletion and `sweep_node_readers` at the operator's start-up deletes those of
clusters deleted meanwhile, so no finalizer holds a JbodCluster (or its namespace) back.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Iterable, Mapping
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from jbod_core import ids
from jbod_operator import (
    builders,
    cluster_access,
    cluster_drains,
    cluster_tls,
    credentials,
    health,
    kube,
    listener_objects,
    metrics,
    model,
    names,
    plan,
    users,
    views,
)

log = logging.getLogger("jbod_operator")


def _register_kafka_user(cluster: str, namespace: str, admin_token: str) -> None:
    """The client user's SCRAM credential, registered when due (`credentials.ensure`), and its
    ACLs (`users.client_user_bindings`), confirmed every `recheck_s`."""
    client = cluster_access.secret_data(names.kafka_client_secret(cluster), namespace)
    if not client or "password" not in client:
        return
    state = cluster_access.CREDENTIALS.setdefault((namespace, cluster), credentials.CredentialState())
    now = cluster_access.monotonic()
    ca_file = cluster_access.TRUST_FILES.get((namespace, cluster))
    credentials.ensure(
        cluster_access.controller_url(cluster, namespace),
        admin_token,
        cluster_access.ENDPOINTS.resolve,
        client["password"],
        state,
        now=now,
        ca_file=ca_file,
    )
    if state.ready and state.acls_due(now):
        error = credentials.replace_acls(
            cluster_access.controller_url(cluster, namespace),
            admin_token,
            cluster_access.ENDPOINTS.resolve,
            ca_file,
            names.KAFKA_CLIENT_USER,
            users.client_user_bindings(names.KAFKA_CLIENT_USER),
        )
        if error is None:
            state.acls_at = now
        else:
            log.debug("%s/%s: %s", namespace, cluster, error)


@kopf.daemon(names.GROUP, names.VERSION, names.CLUSTERS, cancellation_timeout=5.0)
async def poll_cluster(name: str, namespace: str | None, stopped: kopf.DaemonStopped, **_: Any) -> None:
    namespace = namespace or "default"
    key = (namespace, name)
    try:
        while not stopped:
            tokens = await asyncio.to_thread(cluster_access.tokens, name, namespace)
            if tokens and names.SECRET_ADMIN_TOKEN in tokens:
                view = await views.poll_cluster(
                    cluster_access.controller_url(name, namespace),
                    tokens[names.SECRET_ADMIN_TOKEN],
                    cluster_access.ENDPOINTS,
                )
                if not view.reachable:
                    metrics.VIEW_ERRORS.labels(cluster=name).inc()
                else:
                    await asyncio.to_thread(
                        _register_kafka_user, name, namespace, tokens[names.SECRET_ADMIN_TOKEN]
                    )
                cluster_access.VIEWS[key] = view
            await stopped.wait(float(cluster_access.SETTINGS["poll_seconds"]))
    finally:
        cluster_access.VIEWS.pop(key, None)
        cluster_access.CREDENTIALS.pop(key, None)


@kopf.on.startup()
def sweep_node_readers(**_: Any) -> None:
    """Deletes the node-reader bindings of clusters deleted (or changed) while the operator was
    down; a failure is logged and the next start-up tries again (the operator starts anyway)."""
    try:
        deleted = listener_objects.sweep_node_readers(cluster_access.SETTINGS.get("namespaces"))
    except ApiException as exc:
        log.warning("Left the brokers' node-reader bindings unswept: %s %s", exc.status, exc.reason)
        return
    for binding in deleted:
        log.info("Deleted ClusterRoleBinding %s: its JbodCluster is gone or reads no node", binding)


@kopf.on.event(names.GROUP, names.VERSION, names.CLUSTERS)
def cluster_deleted(event: Mapping[str, Any], name: str, namespace: str | None, **_: Any) -> None:
    """On a JbodCluster's deletion, deletes its brokers' node-reader binding (cluster-scoped, so
    not the garbage collector's). Not retried: a failure is left to the next start-up's sweep."""
    if event.get("type") != "DELETED":
        return
    try:
        deleted = listener_objects.delete_node_reader(name, namespace or "default")
    except ApiException as exc:
        log.warning("Left the node-reader binding of %s/%s: %s %s", namespace, name, exc.status, exc.reason)
        return
    if deleted:
        log.info("Deleted the node-reader binding of deleted cluster %s/%s", namespace, name)


def _ensure_secret(cluster: str, namespace: str, owner: Mapping[str, Any]) -> str:
    tokens = cluster_access.tokens(cluster, namespace)
    if tokens is None:
        cluster_id = str(ids.random_uuid(secrets.SystemRandom()))
        kube.create(
            builders.tokens_secret(
                cluster,
                namespace,
                cluster_id=cluster_id,
                cluster_token=secrets.token_urlsafe(32),
                admin_token=secrets.token_urlsafe(32),
                owner=owner,
            )
        )
        tokens = cluster_access.tokens(cluster, namespace) or {names.SECRET_CLUSTER_ID: cluster_id}
    if kube.get("v1", "Secret", names.kafka_client_secret(cluster), namespace) is None:
        kube.create(
            builders.kafka_client_secret(cluster, namespace, password=secrets.token_urlsafe(32), owner=owner)
        )
    return tokens[names.SECRET_CLUSTER_ID]


def _parse_cluster(
    name: str, spec: Mapping[str, Any], patch: kopf.Patch, status_: Mapping[str, Any]
) -> model.ClusterSpec:
    try:
        return model.parse_cluster(name, dict(spec))
    except model.SpecError as exc:
        patch.status["conditions"] = [
            health.condition(
                "Ready",
                False,
                "InvalidSpec",
                str(exc),
                previous=status_.get("conditions"),
                now=cluster_access.now(),
            )
        ]
        raise kopf.PermanentError(str(exc)) from None


@kopf.on.resume(names.GROUP, names.VERSION, names.CLUSTERS)
@kopf.on.create(names.GROUP, names.VERSION, names.CLUSTERS)
@kopf.on.update(names.GROUP, names.VERSION, names.CLUSTERS)
@kopf.timer(
    names.GROUP,
    names.VERSION,
    names.CLUSTERS,
    id="full",
    interval=cluster_access.CLUSTER_FULL_INTERVAL,
    initial_delay=cluster_access.CLUSTER_FULL_INTERVAL,
)
@kopf.timer(
    names.GROUP,
    names.VERSION,
    names.CLUSTERS,
    id="refresh",
    param="refresh",
    interval=cluster_access.CLUSTER_TIMER_INTERVAL,
    initial_delay=1.0,
    backoff=5.0,
)
def reconcile_cluster(  # noqa: PLR0913  kopf handler: one parameter per kwarg kopf passes
    body: kopf.Body,
    spec: kopf.Spec,
    name: str,
    namespace: str | None,
    meta: kopf.Meta,
    status: kopf.Status,
    patch: kopf.Patch,
    param: Any = None,
    **kwargs: Any,
) -> None:
    """Everything on a spec change and every minute: the cluster's own objects (applied), its
    brokers, its status; every few seconds (`param="refresh"`) only its brokers and status."""
    full = param != "refresh"
    namespace = namespace or "default"
    brokers_index: kopf.Index[Any, Any] = kwargs["brokers_index"]
    started = time.perf_counter()
    with metrics.reconcile("JbodCluster"):
        if meta.get("deletionTimestamp"):
            return
        cluster_spec = _parse_cluster(name, spec, patch, status)
        owner = cluster_access.plain(body)
        cluster_id = status.get("clusterId")
        if full or not cluster_id:
            cluster_id = _ensure_secret(name, namespace, owner)
        existing, statuses, current_disks = _indexed_brokers(brokers_index.get((namespace, name), []))
        view = cluster_access.view(namespace, name)
        listened = None
        if full:
            listened = listener_objects.reconcile(
                cluster_spec,
                name,
                namespace,
                [*existing, *range(cluster_spec.brokers)],
                owner,
                kwargs,
                status,
                registrations=view.registrations if view.reachable else None,
            )
            bundle = cluster_tls.ensure_tls(
                body,
                cluster_spec,
                name,
                namespace,
                owner,
                [*existing, *range(cluster_spec.brokers)],
                listened.assigned,
            )
            cluster_access.trust(name, namespace, bundle)
            _update_client_secret(name, namespace, bundle, listened.bootstrap)
            _apply_cluster_objects(cluster_spec, name, namespace, owner)
        broker_plan = plan.plan_brokers(cluster_spec, existing, statuses, view.hosted())
        if plan.removes_something(broker_plan, existing):
            # Removing a broker or a disk rests on "it holds no replica": ask the controller now
            # rather than trust the poller's last view (a topic may have been created since).
            tokens = cluster_access.tokens(name, namespace) or {}
            fresh = views.fresh_placements(
                cluster_access.controller_url(name, namespace),
                tokens.get(names.SECRET_ADMIN_TOKEN, ""),
                cluster_access.ENDPOINTS,
            )
            broker_plan = plan.plan_brokers(
                cluster_spec,
                existing,
                plan.with_replica_counts(statuses, fresh),
                None if fresh is None else health.hosted_replicas(fresh),
            )
        actions = cluster_drains.drive(body, name, namespace, meta, cluster_spec, existing, statuses, view)
        for broker_id, disks in broker_plan.brokers.items():
            desired = builders.jbod_broker(name, namespace, broker_id, disks, owner)
            if full or current_disks.get(broker_id) != desired["spec"]["disks"]:
                kube.apply(desired)
        for broker_id in broker_plan.delete:
            _delete_broker(body, name, namespace, broker_id)
        _unregister_removed(name, namespace, cluster_spec, existing, view)
        cluster_drains.warn_new_refusals(body, actions.refused, status)
        for line in broker_plan.moving:
            kopf.info(body, reason="MovingDisk", message=line)
        for line in broker_plan.moved:
            kopf.info(body, reason="DiskMoved", message=line)
        for line in broker_plan.reclassed:
            kopf.info(body, reason="VolumeAttributesClassChanged", message=line)
        broker_statuses = [statuses.get(i, {}) for i in range(cluster_spec.brokers)]
        metrics.observe_drain(namespace, name, actions)
        computed = plan.cluster_status(
            cluster_spec,
            broker_statuses,
            waiting=broker_plan.refused,
            drains=actions,
            controller_ready=view.reachable and view.ready,
            previous=status,
            now=cluster_access.now(),
        )
        patch.status.update(
            {
                **computed,
                "observedGeneration": meta.get("generation"),
                "clusterId": cluster_id,
                "controllerEndpoint": cluster_access.controller_url(name, namespace),
                "kafka": _kafka_status(name, namespace, cluster_spec.tls.enabled),
            }
        )
        if full:  # a refresh leaves status.tls as the last full pass wrote it
            patch.status["tls"] = cluster_tls.tls_status(name, namespace, cluster_spec.tls)
        if listened is not None and (listened.status or status.get("listeners")):
            patch.status["listeners"] = listened.status
    log.debug("Reconciled cluster %s/%s in %.3f s", namespace, name, time.perf_counter() - started)


def _kafka_status(cluster: str, namespace: str, tls: bool) -> dict[str, Any]:
    """Where Kafka clients connect and the Secret they mount (`status.kafka`)."""
    state = cluster_access.CREDENTIALS.get((namespace, cluster))
    tls_servers = f"{names.kafka_bootstrap_service(cluster)}.{namespace}.svc:{names.KAFKA_TLS_PORT}"
    return {
        "bootstrapServers": names.kafka_bootstrap_servers(cluster, namespace),
        "securityProtocol": names.KAFKA_TLS_SECURITY_PROTOCOL if tls else names.KAFKA_SECURITY_PROTOCOL,
        "tlsBootstrapServers": tls_servers if tls else None,
        "clientSecret": names.kafka_client_secret(cluster),
        "user": names.KAFKA_CLIENT_USER,
        "userRegistered": state is not None and state.ready,
    }


def _update_client_secret(
    cluster: str, namespace: str, bundle: str | None, bootstrap: Mapping[str, str] | None = None
) -> None:
    """The client Secret follows spec.tls: the trust bundle and SASL_SSL settings, or none; and
    spec.listeners: `bootstrap` (`bootstrap.servers.<listener>`)."""
    data = cluster_access.secret_data(names.kafka_client_secret(cluster), namespace)
    if not data or "password" not in data:
        return
    wanted = builders.scram_client_settings(
        cluster, namespace, user=names.KAFKA_CLIENT_USER, password=data["password"], ca_bundle=bundle
    )
    wanted.update(bootstrap or {})
    changed = {k: v for k, v in wanted.items() if data.get(k) != v}
    dropped = [k for k in data if k not in wanted]
    if changed or dropped:
        kube.merge_patch(
            "v1",
            "Secret",
            names.kafka_client_secret(cluster),
            namespace,
            {"stringData": changed, "data": dict.fromkeys(dropped)},
        )


def _apply_cluster_objects(
    cluster_spec: model.ClusterSpec, name: str, namespace: str, owner: Mapping[str, Any]
) -> None:
    """The cluster's own objects: etcd (when the controllers run one), the controllers, the
    brokers' services, and the disruption budgets of the brokers, controllers and etcd."""
    image = cluster_spec.image or str(cluster_access.SETTINGS["image"])
    if cluster_spec.controller.runs_etcd:
        kube.apply(builders.etcd_service(name, namespace, owner))
        kube.apply(builders.etcd_statefulset(cluster_spec, name, namespace, owner=owner))
        kube.apply(builders.etcd_disruption_budget(name, namespace, owner))
    for manifest in (
        builders.controller_service(name, namespace, owner),
        builders.controller_statefulset(cluster_spec, name, namespace, image=image, owner=owner),
        builders.brokers_service(name, namespace, owner, tls=cluster_spec.tls.enabled),
        builders.ready_brokers_service(name, namespace, owner, tls=cluster_spec.tls.enabled),
        builders.kafka_bootstrap_service(name, namespace, owner, tls=cluster_spec.tls.enabled),
        builders.broker_disruption_budget(cluster_spec.brokers, name, namespace, owner),
        builders.controller_disruption_budget(name, namespace, owner),
    ):
        kube.apply(manifest)


def _indexed_brokers(
    brokers: Iterable[Mapping[str, Any]],
) -> tuple[dict[int, model.BrokerSpec], dict[int, Mapping[str, Any]], dict[int, Any]]:
    """The cluster's JbodBrokers with a valid spec, by broker id: (spec, status, spec's disks)."""
    existing: dict[int, model.BrokerSpec] = {}
    statuses: dict[int, Mapping[str, Any]] = {}
    current_disks: dict[int, Any] = {}
    for broker in brokers:
        try:
            parsed = model.parse_broker(broker.get("spec") or {})
        except model.SpecError:
            continue
        existing[parsed.broker_id] = parsed
        statuses[parsed.broker_id] = broker.get("status") or {}
        current_disks[parsed.broker_id] = (broker.get("spec") or {}).get("disks")
    return existing, statuses, current_disks


def _delete_broker(body: kopf.Body, cluster: str, namespace: str, broker_id: int) -> None:
    """Delete a broker the plan removes (it hosts no replicas), and its volume claims."""
    kube.delete(names.API_VERSION, "JbodBroker", names.broker(cluster, broker_id), namespace)
    for claim in kube.list_objects(
        "v1", "PersistentVolumeClaim", namespace, names.broker_labels(cluster, broker_id)
    ):
        kube.delete("v1", "PersistentVolumeClaim", claim["metadata"]["name"], namespace)
    kopf.info(body, reason="BrokerRemoved", message=f"Removed broker {broker_id}: it hosted no replicas")


def _unregister_removed(
    cluster: str,
    namespace: str,
    spec: model.ClusterSpec,
    existing: Mapping[int, model.BrokerSpec],
    view: views.ClusterView,
) -> None:
    """Unregister brokers that were scaled away once their pod is gone and the controller fenced them."""
    if not view.reachable:
        return
    for broker_id, registration in view.registrations.items():
        if broker_id < spec.brokers or broker_id in existing or not registration.get("fenced"):
            continue
        tokens = cluster_access.tokens(cluster, namespace) or {}
        error = views.unregister(
            cluster_access.controller_url(cluster, namespace),
            tokens.get(names.SECRET_ADMIN_TOKEN, ""),
            cluster_access.ENDPOINTS,
            broker_id,
        )
        if error is not None:
            log.warning("Failed to unregister broker %d of %s/%s: %s", broker_id, namespace, cluster, error)
