"""kopf handlers of `JbodBroker`: its disks' claims (created, grown, replaced, deleted as
`health.decide` says), its config map, its pod (created once every claim exists, recreated for a
new volume or a changed spec, one rolling restart per cluster at a time) and its readiness gate.
Idempotent, on create, update, resume and a timer.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import kopf

from jbod_operator import (
    broker_status,
    builders,
    cluster_access,
    disk_growth,
    health,
    kube,
    listener_objects,
    listeners,
    metrics,
    model,
    names,
    volume_attributes,
)

log = logging.getLogger("jbod_operator")

BROKER_TIMER_INTERVAL = 2.0


def _replace_requested(meta: Mapping[str, Any]) -> frozenset[str]:
    text = (meta.get("annotations") or {}).get(names.ANNOTATION_REPLACE_DISKS, "")
    return frozenset(part.strip() for part in text.split(",") if part.strip())


def _others_ready(
    pods_index: kopf.Index[Any, Any], namespace: str, cluster: str, broker_id: int, brokers: int
) -> bool:
    for other in range(brokers):
        if other == broker_id:
            continue
        pod = cluster_access.first(pods_index.get((namespace, names.broker(cluster, other))))
        if health.pod_condition(pod, "Ready") != "True":
            return False
    return True


@kopf.on.resume(names.GROUP, names.VERSION, names.BROKERS)
@kopf.on.create(names.GROUP, names.VERSION, names.BROKERS)
@kopf.on.update(names.GROUP, names.VERSION, names.BROKERS)
@kopf.timer(
    names.GROUP,
    names.VERSION,
    names.BROKERS,
    interval=BROKER_TIMER_INTERVAL,
    initial_delay=0.5,
    backoff=5.0,
)
def reconcile_broker(  # noqa: PLR0913  kopf handler: one parameter per kwarg kopf passes
    body: kopf.Body,
    spec: kopf.Spec,
    name: str,
    namespace: str | None,
    meta: kopf.Meta,
    status: kopf.Status,
    patch: kopf.Patch,
    **kwargs: Any,
) -> None:
    namespace = namespace or "default"
    claims_index: kopf.Index[Any, Any] = kwargs["claims_index"]
    volumes_index: kopf.Index[Any, Any] = kwargs["volumes_index"]
    attachments_index: kopf.Index[Any, Any] = kwargs["attachments_index"]
    pods_index: kopf.Index[Any, Any] = kwargs["pods_index"]
    with metrics.reconcile("JbodBroker"):
        if meta.get("deletionTimestamp"):
            patch.status["phase"] = "Terminating"
            return
        try:
            broker = model.parse_broker(dict(spec))
        except model.SpecError as exc:
            raise kopf.PermanentError(str(exc)) from None
        cluster = broker.cluster_name
        cluster_body = cluster_access.first(kwargs["clusters_index"].get((namespace, cluster)))
        if cluster_body is None:
            raise kopf.TemporaryError(f"JbodCluster {cluster} not found", delay=10)
        try:
            cluster_spec = model.parse_cluster(cluster, cluster_body.get("spec") or {})
        except model.SpecError as exc:
            raise kopf.TemporaryError(f"JbodCluster {cluster} has an invalid spec: {exc}", delay=30) from None
        owner = cluster_access.plain(body)
        broker_id = broker.broker_id
        pod_name = names.broker(cluster, broker_id)
        claims = list(claims_index.get((namespace, cluster, str(broker_id)), []))
        pod = cluster_access.first(pods_index.get((namespace, pod_name)))
        view = cluster_access.view(namespace, cluster)
        volume_names = {c.get("spec", {}).get("volumeName") for c in claims} - {None}
        previous = broker_status.BrokerStatus.from_status(status)
        observation = health.Observation(
            broker_id=broker_id,
            disks=broker.disks,
            policy=cluster_spec.disk_failure_policy,
            replace_requested=_replace_requested(meta),
            pod=pod,
            claims=claims,
            volumes={
                v: cluster_access.first(volumes_index.get(v)) for v in volume_names if volumes_index.get(v)
            },
            attachments={v: list(attachments_index.get(v, [])) for v in volume_names},
            controller_reachable=view.reachable,
            registration=view.registrations.get(broker_id),
            placements=view.placements.get(broker_id, {}),
            log_dirs=view.log_dirs.get(broker_id),
            previous=previous,
            now=cluster_access.now(),
        )
        decision = health.decide(observation)
        _post_events(body, decision.events)

        reconciled = _BrokerInCluster(
            cluster_spec,
            cluster,
            namespace,
            broker,
            owner,
            listener_objects.for_broker(cluster_spec, cluster, namespace, broker_id),
        )
        restart, new_status = _converge_claims(body, reconciled, decision, previous, claims, pod)

        kube.apply(
            builders.broker_config_map(
                cluster_spec, cluster, namespace, broker_id, broker.disks, owner, reconciled.added_listeners
            )
        )
        if pod is not None and decision.unfenced is not None:
            _set_readiness_gate(pod, pod_name, namespace, unfenced=decision.unfenced)
        written = new_status.as_status()
        patch.status.update({**written, "observedGeneration": meta.get("generation")})
        metrics.observe_broker(namespace, cluster, broker_id, written)
        _converge_pod(reconciled, pod, restart, claims, pods_index)


def _converge_claims(  # noqa: PLR0913  the broker (body, reconciled), the decision, its old status, claims, pod
    body: kopf.Body,
    reconciled: _BrokerInCluster,
    decision: health.Decision,
    previous: broker_status.BrokerStatus,
    claims: Sequence[Mapping[str, Any]],
    pod: Mapping[str, Any] | None,
) -> tuple[str | None, broker_status.BrokerStatus]:
    """Create, grow, annotate, replace and delete the broker's claims as decided; the reason to
    restart its pod, if any, and the status to write (the decided one, with the disks that cannot
    grow marked)."""
    choices = health.choose_claims(reconciled.broker.disks, claims, pod)
    existing_claims = {c["metadata"]["name"]: c for c in claims}
    _ensure_claims(reconciled, choices, existing_claims)
    not_growable = _grow_full_disks(body, reconciled, decision.status, previous, choices, existing_claims)
    _set_volume_attributes(reconciled, choices, existing_claims)
    _record_directory_ids(reconciled.namespace, decision.directory_ids)
    restart = decision.restart_pod
    for disk in decision.replace:
        choice = choices[disk]
        replaced = decision.status.log_dir(disk)
        replaced_id = replaced.directory_id if replaced is not None else None
        _replace_volume(reconciled, disk, choice, existing_claims, replaced_id)
        metrics.REPLACEMENTS.labels(cluster=reconciled.cluster).inc()
        restart = f"disk {disk} gets a new volume"
    if decision.replace:
        meta = body.get("metadata") or {}
        _forget_replace_requests(str(meta.get("name")), reconciled.namespace, meta, replaced=decision.replace)
    for claim_name in decision.delete_claims:
        kube.delete("v1", "PersistentVolumeClaim", claim_name, reconciled.namespace)
    return restart, decision.status.with_not_growable(not_growable)


@dataclass(frozen=True)
class _BrokerInCluster:
    """The JbodBroker being reconciled: its cluster (spec, name, namespace), its own spec, and its
    body, the owner of the pod and config map made for it."""

    cluster_spec: model.ClusterSpec
    cluster: str
    namespace: str
    broker: model.BrokerSpec
    owner: Mapping[str, Any]
    added_listeners: listeners.BrokerListeners | None = None  # spec.listeners and spec.rack (issue 34)


def _record_directory_ids(namespace: str, directory_ids: Mapping[str, str]) -> None:
    """Annotate each claim with the directory id the broker reported for its volume."""
    for claim_name, directory_id in directory_ids.items():
        kube.merge_patch(
            "v1",
            "PersistentVolumeClaim",
            claim_name,
            namespace,
            {"metadata": {"annotations": {names.ANNOTATION_DIRECTORY_ID: directory_id}}},
        )


def _forget_replace_requests(
    name: str, namespace: str, meta: Mapping[str, Any], *, replaced: Iterable[str]
) -> None:
    """Take the disks whose volume is being replaced out of the JbodBroker's replace annotation."""
    remaining = _replace_requested(meta) - set(replaced)
    kube.merge_patch(
        names.API_VERSION,
        "JbodBroker",
        name,
        namespace,
        {"metadata": {"annotations": {names.ANNOTATION_REPLACE_DISKS: ",".join(sorted(remaining)) or None}}},
    )


def _post_events(body: kopf.Body, events: Iterable[health.Event]) -> None:
    for event in events:
        (kopf.warn if event.type == "Warning" else kopf.info)(
            body, reason=event.reason, message=event.message
        )


def _set_readiness_gate(pod: Mapping[str, Any], pod_name: str, namespace: str, *, unfenced: bool) -> None:
    """The pod's readiness gate follows the controller's fencing (set only when it differs)."""
    wanted = "True" if unfenced else "False"
    if health.pod_condition(pod, names.READINESS_GATE) != wanted:
        kube.set_pod_condition(
            pod_name,
            namespace,
            names.READINESS_GATE,
            unfenced,
            "Unfenced" if unfenced else "Fenced",
            "the controller has unfenced the broker: its placements are confirmed"
            if unfenced
            else "the controller keeps the broker fenced",
        )


@kopf.on.delete(names.GROUP, names.VERSION, names.BROKERS, optional=True)
def forget_broker(spec: kopf.Spec, namespace: str | None, **_: Any) -> None:
    """No finalizer (optional): only drops the broker's metric series once it is gone."""
    metrics.forget_broker(namespace or "default", str(spec.get("clusterName")), int(spec.get("brokerId", -1)))


def _ensure_claims(
    reconciled: _BrokerInCluster,
    choices: Mapping[str, health.ClaimChoice],
    existing: Mapping[str, Mapping[str, Any]],
) -> None:
    """First claims of new disks, the metadata claim, and growth of claims smaller than the spec."""
    cluster_spec, broker = reconciled.cluster_spec, reconciled.broker
    cluster, namespace = reconciled.cluster, reconciled.namespace
    metadata = builders.volume_claim(
        cluster,
        namespace,
        broker.broker_id,
        disk=names.METADATA_DISK,
        volume=cluster_spec.metadata_disk,
        generation=None,
    )
    _create_or_grow(metadata, existing.get(metadata["metadata"]["name"]), cluster_spec.metadata_disk)
    for disk in broker.disks:
        choice = choices[disk.name]
        target = choice.newest or choice.current
        if target is None and choice.next_generation == 0:
            kube.create(
                builders.volume_claim(
                    cluster, namespace, broker.broker_id, disk=disk.name, volume=disk, generation=0
                )
            )
        elif target is not None and target in existing:
            generation = health.generation_of(target)
            manifest = builders.volume_claim(
                cluster, namespace, broker.broker_id, disk=disk.name, volume=disk, generation=generation
            )
            _create_or_grow(manifest, existing[target], disk)


def _grow_full_disks(  # noqa: PLR0913  the broker (body, reconciled), its new and old status, its claims
    body: kopf.Body,
    reconciled: _BrokerInCluster,
    status: broker_status.BrokerStatus,
    previous: broker_status.BrokerStatus,
    choices: Mapping[str, health.ClaimChoice],
    existing: Mapping[str, Mapping[str, Any]],
) -> dict[str, str]:
    """Grow the claim of each disk its broker cordoned for its space, as `disk_growth` decides;
    disk name → why it cannot grow, for each disk that cannot (written as its `notGrowable`, which
    the cluster's reconcile takes as a request to move replicas off it)."""
    not_growable: dict[str, str] = {}
    for disk in reconciled.broker.disks:
        entry = status.log_dir(disk.name)
        if entry is None or not entry.space_cordoned:
            continue
        claim = existing.get(choices[disk.name].current or "")
        decision = disk_growth.decide(
            disk, entry.as_status(), claim, expandable=functools.partial(_expandable, claim)
        )
        if isinstance(decision, disk_growth.Grow):
            _request_storage(decision.claim, reconciled.namespace, decision.size)
        elif isinstance(decision, disk_growth.CannotGrow):
            not_growable[disk.name] = decision.reason
        where = f"log dir {disk.name} of broker {reconciled.broker.broker_id}"
        before = previous.log_dir(disk.name)
        newly = not (before is not None and before.space_cordoned)
        if event := disk_growth.event(decision, where, newly_cordoned=newly):
            _post_events(body, [event])
    return not_growable


def _set_volume_attributes(
    reconciled: _BrokerInCluster,
    choices: Mapping[str, health.ClaimChoice],
    existing: Mapping[str, Mapping[str, Any]],
) -> None:
    """Ask the claims of each disk (the one in use and a newer one) for the disk's
    VolumeAttributesClass, in place, as `volume_attributes.change` decides."""
    for disk in reconciled.broker.disks:
        choice = choices[disk.name]
        claims = [existing[n] for n in dict.fromkeys((choice.current, choice.newest)) if n and n in existing]
        for claim in claims:
            change = volume_attributes.change(disk, claim)
            if change is None:
                continue
            log.info(
                "Setting VolumeAttributesClass %s on PVC %s/%s (was %s)",
                change.to,
                reconciled.namespace,
                change.claim,
                change.before or "none",
            )
            kube.merge_patch(
                "v1", "PersistentVolumeClaim", change.claim, reconciled.namespace, change.patch()
            )


def _expandable(claim: Mapping[str, Any] | None) -> bool | None:
    """The claim's StorageClass's `allowVolumeExpansion` (None: no claim or no such class)."""
    storage_class = disk_growth.storage_class_of(claim) if claim is not None else None
    if storage_class is None:
        return None
    found = kube.get("storage.k8s.io/v1", "StorageClass", storage_class, None)
    return None if found is None else bool(found.get("allowVolumeExpansion"))


def _create_or_grow(
    manifest: Mapping[str, Any], current: Mapping[str, Any] | None, volume: model.Volume
) -> None:
    if current is None:
        kube.create(manifest)
        return
    if (current.get("status") or {}).get("phase") != "Bound":
        return  # Kubernetes grows bound claims only; this one grows once its pod has bound it
    requested = disk_growth.requested_bytes(current)
    if requested is not None and requested < volume.size_bytes:
        _request_storage(current["metadata"]["name"], current["metadata"]["namespace"], volume.size)


def _request_storage(claim: str, namespace: str, size: str) -> None:
    """Grow a bound claim's storage request to `size` (a quantity)."""
    kube.merge_patch(
        "v1",
        "PersistentVolumeClaim",
        claim,
        namespace,
        {"spec": {"resources": {"requests": {"storage": size}}}},
    )


def _replace_volume(
    reconciled: _BrokerInCluster,
    disk: str,
    choice: health.ClaimChoice,
    existing: Mapping[str, Mapping[str, Any]],
    directory_id: str | None,
) -> None:
    cluster_spec, broker = reconciled.cluster_spec, reconciled.broker
    cluster, namespace = reconciled.cluster, reconciled.namespace
    volume = broker.disk(disk) or next(d for d in cluster_spec.disks if d.name == disk)
    kube.create(
        builders.volume_claim(
            cluster, namespace, broker.broker_id, disk=disk, volume=volume, generation=choice.next_generation
        )
    )
    if choice.current is not None and choice.current in existing:
        annotations = {names.ANNOTATION_RETIRED: cluster_access.now().strftime("%Y-%m-%dT%H:%M:%SZ")}
        if directory_id:  # so a stale view of the old volume is never taken for the new one
            annotations[names.ANNOTATION_DIRECTORY_ID] = directory_id
        kube.merge_patch(
            "v1",
            "PersistentVolumeClaim",
            choice.current,
            namespace,
            {"metadata": {"annotations": annotations}},
        )


def _converge_pod(
    reconciled: _BrokerInCluster,
    pod: Mapping[str, Any] | None,
    restart: str | None,
    claims: list[Mapping[str, Any]],
    pods_index: kopf.Index[Any, Any],
) -> None:
    """Create the pod once every claim exists; recreate it for a new volume or a changed spec."""
    cluster_spec, broker = reconciled.cluster_spec, reconciled.broker
    cluster, namespace = reconciled.cluster, reconciled.namespace
    owner = reconciled.owner
    pod_name = names.broker(cluster, broker.broker_id)
    if pod is not None and pod.get("metadata", {}).get("deletionTimestamp"):
        raise kopf.TemporaryError(f"waiting for pod {pod_name} to terminate", delay=2)
    if pod is not None and restart is not None:
        log.info("Restarting pod %s/%s: %s", namespace, pod_name, restart)
        kube.delete("v1", "Pod", pod_name, namespace)
        return
    choices = health.choose_claims(broker.disks, claims, None)
    wanted: dict[str, str] = {}
    for disk in broker.disks:
        target = choices[disk.name].newest
        if target is None:
            if pod is None:
                raise kopf.TemporaryError(f"waiting for a volume claim of disk {disk.name}", delay=2)
            return  # the running pod keeps its (detached) claim until the volume is replaced
        wanted[disk.name] = target
    image = cluster_spec.image or str(cluster_access.SETTINGS["image"])
    desired = builders.broker_pod(
        cluster_spec,
        cluster,
        namespace,
        broker.broker_id,
        disks=broker.disks,
        claims=wanted,
        image=image,
        owner=owner,
        listeners=reconciled.added_listeners,
    )
    if pod is None:
        kube.create(desired)
        return
    current_hash = (pod.get("metadata", {}).get("annotations") or {}).get(names.ANNOTATION_SPEC_HASH)
    if current_hash == desired["metadata"]["annotations"][names.ANNOTATION_SPEC_HASH]:
        _ROLLING.release(namespace, cluster, broker.broker_id, pod)
        return
    if not _others_ready(pods_index, namespace, cluster, broker.broker_id, cluster_spec.brokers):
        raise kopf.TemporaryError(
            f"pod {pod_name} needs a restart; waiting for the other brokers to be Ready", delay=5
        )
    holder = _ROLLING.acquire(namespace, cluster, broker.broker_id)
    if holder != broker.broker_id:
        raise kopf.TemporaryError(f"pod {pod_name} needs a restart; broker {holder} restarts first", delay=5)
    log.info("Restarting pod %s/%s: its spec or configuration changed", namespace, pod_name)
    kube.delete("v1", "Pod", pod_name, namespace)


class _RollingRestarts:
    """One rolling restart at a time per cluster (the operator runs as a single replica, so an
    in-memory token is enough; the pods index alone lags behind a deletion). A broker holds the
    token from the deletion of its pod until its new pod is Ready; a holder silent for
    `timeout_s` loses it (its JbodBroker may be gone)."""

    def __init__(self, timeout_s: float = 600.0) -> None:
        self._lock = threading.Lock()
        self._holders: dict[tuple[str, str], tuple[int, float]] = {}
        self.timeout_s = timeout_s

    def acquire(self, namespace: str, cluster: str, broker_id: int) -> int:
        """The broker holding the token after the call (`broker_id` if it got it)."""
        now = cluster_access.monotonic()
        with self._lock:
            holder = self._holders.get((namespace, cluster))
            if holder is None or holder[0] == broker_id or now - holder[1] > self.timeout_s:
                self._holders[(namespace, cluster)] = (broker_id, now)
                return broker_id
            return holder[0]

    def release(self, namespace: str, cluster: str, broker_id: int, pod: Mapping[str, Any]) -> None:
        """Give the token back once the broker's recreated pod is Ready."""
        if health.pod_condition(pod, "Ready") != "True":
            return
        with self._lock:
            holder = self._holders.get((namespace, cluster))
            if holder is not None and holder[0] == broker_id:
                del self._holders[(namespace, cluster)]


_ROLLING = _RollingRestarts()
