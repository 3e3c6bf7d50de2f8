"""kopf handlers: observe, decide with the pure modules, act through `kube`. Nothing clever lives here.

* Indexes keep the actual state of pods, volume claims, PVs, VolumeAttachments and JbodBrokers.
* One daemon per `JbodCluster` polls the controller and the brokers (`views.poll_cluster`) and
  keeps the latest `ClusterView` in memory; handlers read it, never dial on their own.
* `reconcile_cluster` and `reconcile_broker` run on create/update/resume and on a timer; both are
  idempotent, so running them again converges, and "not yet" is a `TemporaryError`.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime as dt
import functools
import json
import logging
import secrets
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import kopf

from jbod_core import ids
from jbod_operator import (
    builders,
    certificates,
    credentials,
    disk_growth,
    drain,
    health,
    kube,
    listener_objects,
    listeners,
    metrics,
    model,
    names,
    plan,
    rotation,
    users,
    views,
)

log = logging.getLogger("jbod_operator")

DEFAULT_IMAGE = "ghcr.io/jbod-dev/jbod:0.1.0"
SETTINGS: dict[str, Any] = {
    "image": DEFAULT_IMAGE,
    "poll_seconds": 2.0,
    "broker_interval": 2.0,
    "secret_propagation": rotation.PROPAGATION,  # --secret-propagation-seconds
}
VIEWS: dict[tuple[str, str], views.ClusterView] = {}
CREDENTIALS: dict[tuple[str, str], credentials.CredentialState] = {}
TRUST_FILES: dict[tuple[str, str], Path] = {}
ENDPOINTS = views.Endpoints()
BROKER_TIMER_INTERVAL = 2.0
CLUSTER_TIMER_INTERVAL = 5.0
CLUSTER_FULL_INTERVAL = 60.0


def _plain(body: Mapping[str, Any]) -> dict[str, Any]:
    return dict(body)


def _first(store: Iterable[Any] | None) -> Any:
    for item in store or ():
        return item
    return None


def _now() -> datetime:
    return datetime.now(UTC)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="jbod.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="jbod.dev", key="last-handled-configuration"
    )
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = 120
    settings.watching.client_timeout = 150
    settings.execution.max_workers = 16


# ---------------------------------------------------------------------------------------------
# Indexes: the actual state


@kopf.index("persistentvolumeclaims", labels={names.LABEL_CLUSTER: kopf.PRESENT})
def claims_index(namespace: str | None, labels: Mapping[str, str], body: Mapping[str, Any], **_: Any) -> Any:
    return {(namespace, labels[names.LABEL_CLUSTER], labels.get(names.LABEL_BROKER)): _plain(body)}


@kopf.index("persistentvolumes")
def volumes_index(name: str, body: Mapping[str, Any], **_: Any) -> Any:
    return {name: _plain(body)}


@kopf.index("storage.k8s.io", "v1", "volumeattachments")
def attachments_index(spec: Mapping[str, Any], body: Mapping[str, Any], **_: Any) -> Any:
    volume = (spec.get("source") or {}).get("persistentVolumeName")
    return {volume: _plain(body)} if volume else None


@kopf.index("pods", labels={names.LABEL_CLUSTER: kopf.PRESENT})
def pods_index(namespace: str | None, name: str, body: Mapping[str, Any], **_: Any) -> Any:
    return {(namespace, name): _plain(body)}


@kopf.index(names.GROUP, names.VERSION, names.CLUSTERS)
def clusters_index(namespace: str | None, name: str, body: Mapping[str, Any], **_: Any) -> Any:
    return {(namespace, name): _plain(body)}


@kopf.index(names.GROUP, names.VERSION, names.BROKERS)
def brokers_index(namespace: str | None, spec: Mapping[str, Any], body: Mapping[str, Any], **_: Any) -> Any:
    return {(namespace, spec.get("clusterName")): _plain(body)}


# ---------------------------------------------------------------------------------------------
# The controller's and brokers' view, one poller per cluster


def _secret_data(name: str, namespace: str) -> dict[str, str] | None:
    secret = kube.get("v1", "Secret", name, namespace)
    if secret is None:
        return None
    data = secret.get("data") or {}
    return {k: base64.b64decode(v).decode() for k, v in data.items()}


def _tokens(cluster: str, namespace: str) -> dict[str, str] | None:
    return _secret_data(names.secret(cluster), namespace)


def _register_kafka_user(cluster: str, namespace: str, admin_token: str) -> None:
    """The client user's SCRAM credential, registered when due (`credentials.ensure`), and its
    ACLs (`users.client_user_bindings`), confirmed every `recheck_s`."""
    client = _secret_data(names.kafka_client_secret(cluster), namespace)
    if not client or "password" not in client:
        return
    state = CREDENTIALS.setdefault((namespace, cluster), credentials.CredentialState())
    now = time.monotonic()
    ca_file = TRUST_FILES.get((namespace, cluster))
    credentials.ensure(
        _controller_url(cluster, namespace),
        admin_token,
        ENDPOINTS.resolve,
        client["password"],
        state,
        now=now,
        ca_file=ca_file,
    )
    if state.ready and state.acls_due(now):
        error = credentials.replace_acls(
            _controller_url(cluster, namespace),
            admin_token,
            ENDPOINTS.resolve,
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
            tokens = await asyncio.to_thread(_tokens, name, namespace)
            if tokens and names.SECRET_ADMIN_TOKEN in tokens:
                view = await views.poll_cluster(
                    _controller_url(name, namespace), tokens[names.SECRET_ADMIN_TOKEN], ENDPOINTS
                )
                if not view.reachable:
                    metrics.VIEW_ERRORS.labels(cluster=name).inc()
                else:
                    await asyncio.to_thread(
                        _register_kafka_user, name, namespace, tokens[names.SECRET_ADMIN_TOKEN]
                    )
                VIEWS[key] = view
            await asyncio.sleep(float(SETTINGS["poll_seconds"]))
    finally:
        VIEWS.pop(key, None)
        CREDENTIALS.pop(key, None)


def _controller_url(cluster: str, namespace: str) -> str:
    """The controllers' Service, https when the cluster has TLS on (`_trust`)."""
    return names.controller_url(cluster, namespace, tls=(namespace, cluster) in TRUST_FILES)


def _trust(cluster: str, namespace: str, bundle: str | None) -> None:
    """Where the operator's own clients find the cluster's trust bundle: a file per cluster,
    registered with `ENDPOINTS` for the controllers' and brokers' host names (None: no TLS)."""
    key = (namespace, cluster)
    domains = (
        f"{names.controller(cluster)}.{namespace}.svc",
        f"{names.brokers_service(cluster)}.{namespace}.svc",
    )
    if bundle is None:
        TRUST_FILES.pop(key, None)
        for domain in domains:
            ENDPOINTS.trust(domain, None)
        return
    path = Path(tempfile.gettempdir()) / f"jbod-ca-{namespace}-{cluster}.crt"
    if not path.exists() or path.read_text() != bundle:
        staging = path.with_suffix(".tmp")
        staging.write_text(bundle)
        staging.replace(path)
    TRUST_FILES[key] = path
    for domain in domains:
        ENDPOINTS.trust(domain, path)


def _view(namespace: str, cluster: str) -> views.ClusterView:
    return VIEWS.get((namespace, cluster)) or views.ClusterView(reachable=False)


# ---------------------------------------------------------------------------------------------
# JbodCluster


def _ensure_secret(cluster: str, namespace: str, owner: Mapping[str, Any]) -> str:
    tokens = _tokens(cluster, namespace)
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
        tokens = _tokens(cluster, namespace) or {names.SECRET_CLUSTER_ID: cluster_id}
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
                "Ready", False, "InvalidSpec", str(exc), previous=status_.get("conditions"), now=_now()
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
    interval=CLUSTER_FULL_INTERVAL,
    initial_delay=CLUSTER_FULL_INTERVAL,
)
@kopf.timer(
    names.GROUP,
    names.VERSION,
    names.CLUSTERS,
    id="refresh",
    param="refresh",
    interval=CLUSTER_TIMER_INTERVAL,
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
        owner = _plain(body)
        cluster_id = status.get("clusterId")
        if full or not cluster_id:
            cluster_id = _ensure_secret(name, namespace, owner)
        existing, statuses, current_disks = _indexed_brokers(brokers_index.get((namespace, name), []))
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
            )
            bundle = _ensure_tls(
                body,
                cluster_spec,
                name,
                namespace,
                owner,
                [*existing, *range(cluster_spec.brokers)],
                listened.assigned,
            )
            _trust(name, namespace, bundle)
            _update_client_secret(name, namespace, bundle, listened.bootstrap)
            _apply_cluster_objects(cluster_spec, name, namespace, owner)
        view = _view(namespace, name)
        broker_plan = plan.plan_brokers(cluster_spec, existing, statuses, view.hosted())
        if plan.removes_something(broker_plan, existing):
            # Removing a broker or a disk rests on "it holds no replica": ask the controller now
            # rather than trust the poller's last view (a topic may have been created since).
            tokens = _tokens(name, namespace) or {}
            fresh = views.fresh_placements(
                _controller_url(name, namespace), tokens.get(names.SECRET_ADMIN_TOKEN, ""), ENDPOINTS
            )
            broker_plan = plan.plan_brokers(
                cluster_spec,
                existing,
                plan.with_replica_counts(statuses, fresh),
                None if fresh is None else health.hosted_replicas(fresh),
            )
        actions = _drive_drains(body, name, namespace, meta, cluster_spec, existing, statuses, view)
        for broker_id, disks in broker_plan.brokers.items():
            desired = builders.jbod_broker(name, namespace, broker_id, disks, owner)
            if full or current_disks.get(broker_id) != desired["spec"]["disks"]:
                kube.apply(desired)
        for broker_id in broker_plan.delete:
            _delete_broker(body, name, namespace, broker_id)
        _unregister_removed(name, namespace, cluster_spec, existing, view)
        _warn_new_refusals(body, actions.refused, status)
        broker_statuses = [statuses.get(i, {}) for i in range(cluster_spec.brokers)]
        metrics.observe_drain(namespace, name, actions)
        computed = plan.cluster_status(
            cluster_spec,
            broker_statuses,
            waiting=broker_plan.refused,
            drains=actions,
            controller_ready=view.reachable and view.ready,
            previous=status,
            now=_now(),
        )
        patch.status.update(
            {
                **computed,
                "observedGeneration": meta.get("generation"),
                "clusterId": cluster_id,
                "controllerEndpoint": _controller_url(name, namespace),
                "kafka": _kafka_status(name, namespace, cluster_spec.tls.enabled),
            }
        )
        if full:  # a refresh leaves status.tls as the last full pass wrote it
            patch.status["tls"] = _tls_status(name, namespace, cluster_spec.tls)
        if listened is not None and (listened.status or status.get("listeners")):
            patch.status["listeners"] = listened.status
    log.debug("Reconciled cluster %s/%s in %.3f s", namespace, name, time.perf_counter() - started)


def _tls_status(cluster: str, namespace: str, tls: model.TlsSpec) -> dict[str, Any] | None:
    """The trust bundle's Secret and the signing CA's expiry (`status.tls`)."""
    if not tls.enabled:
        return None
    trust = names.controller_tls(cluster) if tls.issuer == "cert-manager" else names.cluster_ca_cert(cluster)
    bundle = certificates.split((_secret_data(trust, namespace) or {}).get(names.TLS_CA, ""))
    signing = None if tls.issuer == "cert-manager" else _signing_ca(tls, cluster, namespace)
    not_after = certificates.describe(signing.cert_pem).not_after if signing is not None else None
    return {
        "trustSecret": trust,
        "caNotAfter": not_after.strftime("%Y-%m-%dT%H:%M:%SZ") if not_after is not None else None,
        "caCount": len(bundle),
    }


def _kafka_status(cluster: str, namespace: str, tls: bool) -> dict[str, Any]:
    """Where Kafka clients connect and the Secret they mount (`status.kafka`)."""
    state = CREDENTIALS.get((namespace, cluster))
    tls_servers = f"{names.kafka_bootstrap_service(cluster)}.{namespace}.svc:{names.KAFKA_TLS_PORT}"
    return {
        "bootstrapServers": names.kafka_bootstrap_servers(cluster, namespace),
        "securityProtocol": names.KAFKA_TLS_SECURITY_PROTOCOL if tls else names.KAFKA_SECURITY_PROTOCOL,
        "tlsBootstrapServers": tls_servers if tls else None,
        "clientSecret": names.kafka_client_secret(cluster),
        "user": names.KAFKA_CLIENT_USER,
        "userRegistered": state is not None and state.ready,
    }


def _tls_policy(tls: model.TlsSpec) -> rotation.Policy:
    return rotation.Policy(
        validity=dt.timedelta(days=tls.validity_days),
        renew_before=dt.timedelta(days=tls.renew_before_days),
        ca_validity=dt.timedelta(days=tls.ca_validity_days),
        ca_renew_before=dt.timedelta(days=tls.ca_renew_before_days),
        operator_ca=tls.issuer == "operator",
        ca_expiration=tls.ca_expiration_policy,
        propagation=SETTINGS["secret_propagation"],
    )


def _signing_ca(tls: model.TlsSpec, cluster: str, namespace: str) -> certificates.KeyPair | None:
    """The CA that signs: the operator's (`<cluster>-cluster-ca`) or the user's `caSecret`."""
    if tls.issuer == "secret":
        data = _secret_data(str(tls.ca_secret), namespace)
        if data is None or names.TLS_CERT not in data or names.TLS_KEY not in data:
            raise kopf.TemporaryError(
                f"spec.tls.caSecret: Secret {tls.ca_secret} with tls.crt and tls.key not found", delay=30
            )
        return certificates.KeyPair(data[names.TLS_KEY], certificates.split(data[names.TLS_CERT])[0])
    data = _secret_data(names.cluster_ca(cluster), namespace)
    if data is None or names.CA_KEY not in data:
        return None
    return certificates.KeyPair(data[names.CA_KEY], data[names.TLS_CA])


def _ensure_tls(  # noqa: PLR0913  the cluster (body, spec, name, namespace, owner) and its broker ids
    body: kopf.Body,
    spec: model.ClusterSpec,
    cluster: str,
    namespace: str,
    owner: Mapping[str, Any],
    broker_ids: Iterable[int],
    assigned: listeners.Assigned | None = None,
) -> str | None:
    """The cluster CA and every pod's certificate, issued and renewed as `rotation` decides;
    the trust bundle (None without TLS, or with cert-manager, which keeps its own)."""
    tls = spec.tls
    if not tls.enabled:
        return None
    if tls.issuer == "cert-manager":  # cert-manager keeps the bundle in each certificate's Secret
        return (_secret_data(names.controller_tls(cluster), namespace) or {}).get(names.TLS_CA)
    now, policy = _now(), _tls_policy(tls)
    try:
        signing = _signing_ca(tls, cluster, namespace)
        if signing is not None:
            certificates.load_ca(signing)
    except certificates.CertificateError as exc:
        raise kopf.TemporaryError(f"spec.tls: the signing CA is unusable: {exc}", delay=60) from None
    bundle = (_secret_data(names.cluster_ca_cert(cluster), namespace) or {}).get(names.TLS_CA, "")
    recorded = since = _ca_since(cluster, namespace)
    bundled = certificates.split(bundle)
    if signing is not None and signing.cert_pem not in bundled:
        bundled.append(signing.cert_pem)  # a new signing CA joins the bundle now
        since = now
    wanted = builders.tls_certificates(spec, cluster, namespace, list(broker_ids), assigned)

    def leaves(trust: str) -> list[rotation.Certificate | None]:
        return [
            *(_leaf(secret, namespace, trust) for secret in wanted),
            *(_user_leaf(user, namespace, trust) for user in _tls_users(cluster, namespace)),
        ]

    state = _advance_ca(
        body, tls, cluster, namespace, owner, _TrustState(signing, bundled, since), leaves, now
    )
    signing, bundled, since = state.signing, state.bundled, state.since
    if signing is None:
        return None
    text = "".join(bundled)
    if text != bundle or recorded != since:
        kube.apply(
            builders.cluster_ca_cert_secret(cluster, namespace, bundle=text, since=_iso(since), owner=owner)
        )
    authority = certificates.authority(signing.cert_pem, bundled, since)
    trust = certificates.signing_first(signing.cert_pem, bundled)
    for secret, (common_name, dns) in wanted.items():
        leaf = _leaf(secret, namespace, trust)
        reason = rotation.leaf_reason(leaf, frozenset(dns), authority, policy, now)
        if reason is None:
            continue
        pair = certificates.issue(signing, common_name, dns, days=tls.validity_days, now=now)
        kube.apply(
            builders.tls_secret(
                secret,
                cluster,
                namespace,
                key_pem=pair.key_pem,
                cert_pem=pair.cert_pem,
                chain=signing.cert_pem,
                owner=owner,
            )
        )
        log.info("Issued the certificate %s/%s: %s", namespace, secret, reason)
        kopf.info(body, reason="CertificateIssued", message=f"Issued {secret}: {reason}")
    return text


@dataclass
class _TrustState:
    signing: certificates.KeyPair | None  # the CA that signs
    bundled: list[str]  # the trust bundle's CA certificates
    since: dt.datetime | None  # when `signing` joined the bundle


def _advance_ca(  # noqa: PLR0913  the cluster (body, TLS spec, name, namespace, owner), its trust, leaves, clock
    body: kopf.Body,
    tls: model.TlsSpec,
    cluster: str,
    namespace: str,
    owner: Mapping[str, Any],
    state: _TrustState,
    leaves: Callable[[str], list[rotation.Certificate | None]],
    now: dt.datetime,
) -> _TrustState:
    """One step of the CA's life as `rotation.ca_action` decides at `now`: made, renewed (same
    key or a new one, on schedule or asked for), or its predecessor dropped from the bundle."""
    policy = _tls_policy(tls)
    signing, bundled, since = state.signing, state.bundled, state.since
    requested = _requested_ca_renewal(cluster, namespace) if tls.issuer == "operator" else None
    if signing is None:
        action = rotation.ca_action(rotation.Authority(current=None), [], policy, now)
    else:
        action = rotation.ca_action(
            certificates.authority(signing.cert_pem, bundled, since),
            leaves(certificates.signing_first(signing.cert_pem, bundled)),
            policy,
            now,
            requested=requested[0] if requested else None,
        )
    if action == "drop-previous" and signing is not None:
        kopf.info(
            body, reason="CertificateAuthority", message="Dropped the previous CA from the trust bundle"
        )
        return _TrustState(signing, [signing.cert_pem], since)
    if action is None or action == "drop-previous":
        return state
    if action == "renew-certificate" and signing is not None:
        signing = certificates.renew_ca(signing, days=tls.ca_validity_days, now=now)
    else:
        signing = certificates.make_ca(
            f"{cluster}.{namespace} cluster CA", days=tls.ca_validity_days, now=now
        )
    secret = builders.cluster_ca_secret(
        cluster, namespace, key_pem=signing.key_pem, cert_pem=signing.cert_pem, owner=owner
    )
    if requested is None:
        kube.apply(secret)
    else:  # the new CA and the request's annotation gone in one write: done means both
        kube.merge_patch(
            "v1",
            "Secret",
            names.cluster_ca(cluster),
            namespace,
            {"metadata": {"annotations": {requested[1]: None}}, "data": secret["data"]},
        )
    kopf.info(body, reason="CertificateAuthority", message=_CA_ACTIONS[action])
    return _TrustState(signing, [*bundled, signing.cert_pem], now)


_CA_ACTIONS: Final = {
    "create": "Made a cluster CA",
    "renew-certificate": "Renewed the cluster CA's certificate (same key: every client keeps trusting it)",
    "replace-key": "Made a cluster CA with a new key (clients must re-read the trust bundle before the old CA leaves it)",
}


def _requested_ca_renewal(cluster: str, namespace: str) -> tuple[rotation.CaRenewal, str] | None:
    """A CA renewal the user asked for with an annotation on the CA Secret, and the annotation
    (removed once done): `jbod.dev/force-replace` (a new key) wins over `jbod.dev/force-renew`."""
    secret = kube.get("v1", "Secret", names.cluster_ca(cluster), namespace) or {}
    annotations = (secret.get("metadata") or {}).get("annotations") or {}
    if annotations.get(names.ANNOTATION_FORCE_REPLACE_CA, "").lower() == "true":
        return "replace-key", names.ANNOTATION_FORCE_REPLACE_CA
    if annotations.get(names.ANNOTATION_FORCE_RENEW_CA, "").lower() == "true":
        return "renew-certificate", names.ANNOTATION_FORCE_RENEW_CA
    return None


def _ca_since(cluster: str, namespace: str) -> dt.datetime | None:
    """When the signing CA joined the trust bundle (the bundle Secret's annotation)."""
    secret = kube.get("v1", "Secret", names.cluster_ca_cert(cluster), namespace) or {}
    text = ((secret.get("metadata") or {}).get("annotations") or {}).get(names.ANNOTATION_CA_SINCE)
    try:
        return dt.datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


def _iso(moment: dt.datetime | None) -> str:
    return (moment or _now()).isoformat()


def _tls_users(cluster: str, namespace: str) -> list[str]:
    """The cluster's JbodUsers of authentication tls: their certificates, too, must be from the
    new CA before the old one leaves the bundle."""
    return [
        str(body["metadata"]["name"])
        for body in kube.list_objects(names.API_VERSION, "JbodUser", namespace, {})
        if (body.get("spec") or {}).get("cluster") == cluster
        and ((body.get("spec") or {}).get("authentication") or {}).get("type") == "tls"
        and not body["metadata"].get("deletionTimestamp")
    ]


def _user_leaf(user: str, namespace: str, bundle: str) -> rotation.Certificate | None:
    data = _secret_data(user, namespace)
    if not data or not data.get("user.crt"):
        return None
    try:
        return certificates.describe(data["user.crt"], bundle)
    except certificates.CertificateError:
        return None


def _leaf(secret: str, namespace: str, bundle: str) -> rotation.Certificate | None:
    data = _secret_data(secret, namespace)
    if not data or not data.get(names.TLS_CERT):
        return None
    try:
        return certificates.describe(certificates.split(data[names.TLS_CERT])[0], bundle)
    except (certificates.CertificateError, IndexError):
        return None


def _update_client_secret(
    cluster: str, namespace: str, bundle: str | None, bootstrap: Mapping[str, str] | None = None
) -> None:
    """The client Secret follows spec.tls: the trust bundle and SASL_SSL settings, or none; and
    spec.listeners: `bootstrap` (`bootstrap.servers.<listener>`)."""
    data = _secret_data(names.kafka_client_secret(cluster), namespace)
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
    image = cluster_spec.image or str(SETTINGS["image"])
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


def _warn_new_refusals(body: kopf.Body, refused: Iterable[str], status: Mapping[str, Any]) -> None:
    """A warning event per refused drain the previous status did not already report."""
    previous_refusals = {
        c.get("message") for c in status.get("conditions") or [] if c.get("reason") == plan.DRAIN_REFUSED
    }
    for line in refused:
        if not any(line in (m or "") for m in previous_refusals):
            kopf.warn(body, reason=plan.DRAIN_REFUSED, message=line)


def _drive_drains(  # noqa: PLR0913  the cluster (body, name, namespace, meta), its spec, brokers and view
    body: kopf.Body,
    cluster: str,
    namespace: str,
    meta: kopf.Meta,
    spec: model.ClusterSpec,
    existing: Mapping[int, model.BrokerSpec],
    statuses: Mapping[int, Mapping[str, Any]],
    view: views.ClusterView,
) -> drain.Actions:
    """Drains of the disks and brokers leaving the spec, the scale-up rebalance, and replicas moved
    off full disks that cannot grow (`drain.decide` on a fresh snapshot; what the operator sets is
    recorded in an annotation before it is set). One at a time per cluster: the timer and the
    update handler may run together."""
    wanted_disks = {d.name for d in spec.disks}
    relieve = {
        b: paths
        for b in existing
        if b < spec.brokers
        and (
            paths := frozenset(
                names.log_dir(str(e.get("name")))
                for e in (statuses.get(b) or {}).get("logDirs") or []
                if e.get("spaceCordoned") and e.get("notGrowable")
            )
        )
    }
    wanted = drain.Wanted(
        leaving=frozenset(b for b in existing if b >= spec.brokers),
        disks={
            b: paths
            for b, broker in existing.items()
            if b < spec.brokers
            and (
                paths := frozenset(names.log_dir(d.name) for d in broker.disks if d.name not in wanted_disks)
            )
        },
        spec_paths=frozenset(names.log_dir(d) for d in wanted_disks),
        relieve=relieve,
        max_bytes_per_second=spec.drain.max_bytes_per_second,
        max_partitions_in_flight=spec.drain.max_partitions_in_flight,
    )
    joining = frozenset(b for b in range(spec.brokers) if b not in existing) if existing else frozenset()
    joining = joining if spec.rebalance == "OnScaleUp" else frozenset()
    recorded = (meta.get("annotations") or {}).get(names.ANNOTATION_DRAIN_OWNED)
    if not (wanted.leaving or wanted.disks or wanted.relieve or joining or recorded):
        return drain.Actions(owned=drain.Owned())
    with _DRAINS.lock(namespace, cluster):
        fresh_body = kube.get(names.API_VERSION, "JbodCluster", cluster, namespace) or {}
        owned = _owned((fresh_body.get("metadata") or {}).get("annotations") or {})
        if joining - owned.rebalance:
            owned = dataclasses.replace(owned, rebalance=owned.rebalance | joining)
            _record_owned(cluster, namespace, owned)
        tokens = _tokens(cluster, namespace) or {}
        token = tokens.get(names.SECRET_ADMIN_TOKEN, "")
        url = _controller_url(cluster, namespace)
        fresh = views.drain_snapshot(url, token, ENDPOINTS, view.log_dirs)
        if fresh is None:
            raise kopf.TemporaryError("the controller cannot be reached to plan the drain", delay=5)
        snapshot, topic_configs = fresh
        snapshot = dataclasses.replace(
            snapshot, moving=snapshot.moving | _DRAINS.recent_moves(namespace, cluster, now=time.monotonic())
        )
        actions = drain.decide(snapshot, wanted, owned, topic_configs)
        before = _union(owned, actions.owned)
        if before != owned:
            _record_owned(cluster, namespace, before)
        errors = views.apply_drain(
            url, token, ENDPOINTS, view.registrations, actions, rate=spec.drain.max_bytes_per_second
        )
        _DRAINS.moved(namespace, cluster, actions.moves, now=time.monotonic())
        for line in errors:
            log.warning("Failed a drain step of %s/%s: %s", namespace, cluster, line)
        if errors:
            raise kopf.TemporaryError(f"drain: {errors[0]}", delay=5)
        if actions.owned != before:
            _record_owned(cluster, namespace, actions.owned)
    for line in actions.started:
        kopf.info(body, reason="DrainStarted", message=line)
    for line in actions.ended:
        kopf.info(body, reason="DrainCompleted", message=line)
    return actions


def _owned(annotations: Mapping[str, str]) -> drain.Owned:
    try:
        return drain.Owned.from_json(json.loads(annotations.get(names.ANNOTATION_DRAIN_OWNED) or "{}"))
    except (ValueError, TypeError, AttributeError):
        log.warning("Ignored an unreadable %s annotation", names.ANNOTATION_DRAIN_OWNED)
        return drain.Owned()


class _Drains:
    """Per cluster: a lock (one drain step at a time) and the moves asked for in the last
    `grace_s` seconds, taken as running until the brokers' polled log dirs show them (so a stale
    view never asks for the same move again, to another dir)."""

    def __init__(self, grace_s: float = 30.0) -> None:
        self._guard = threading.Lock()
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._moves: dict[tuple[str, str], dict[tuple[str, int, int], float]] = {}
        self.grace_s = grace_s

    def lock(self, namespace: str, cluster: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault((namespace, cluster), threading.Lock())

    def recent_moves(self, namespace: str, cluster: str, *, now: float) -> frozenset[tuple[str, int, int]]:
        with self._guard:
            asked = self._moves.setdefault((namespace, cluster), {})
            for key in [k for k, at in asked.items() if now - at > self.grace_s]:
                del asked[key]
            return frozenset(asked)

    def moved(self, namespace: str, cluster: str, moves: Iterable[drain.Move], *, now: float) -> None:
        with self._guard:
            asked = self._moves.setdefault((namespace, cluster), {})
            for move in moves:
                asked[(move.topic, move.partition, move.broker_id)] = now


_DRAINS = _Drains()


def _union(a: drain.Owned, b: drain.Owned) -> drain.Owned:
    """Everything either records (what is written before acting)."""
    return drain.Owned(
        cordons={
            k: a.cordons.get(k, frozenset()) | b.cordons.get(k, frozenset()) for k in {*a.cordons, *b.cordons}
        },
        throttled_brokers=a.throttled_brokers | b.throttled_brokers,
        throttled_topics=a.throttled_topics | b.throttled_topics,
        rebalance=a.rebalance | b.rebalance,
    )


def _record_owned(cluster: str, namespace: str, owned: drain.Owned) -> None:
    empty = owned.to_json() == drain.Owned().to_json()
    kube.merge_patch(
        names.API_VERSION,
        "JbodCluster",
        cluster,
        namespace,
        {
            "metadata": {
                "annotations": {
                    names.ANNOTATION_DRAIN_OWNED: None
                    if empty
                    else json.dumps(owned.to_json(), sort_keys=True)
                }
            }
        },
    )


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
        tokens = _tokens(cluster, namespace) or {}
        error = views.unregister(
            _controller_url(cluster, namespace),
            tokens.get(names.SECRET_ADMIN_TOKEN, ""),
            ENDPOINTS,
            broker_id,
        )
        if error is not None:
            log.warning("Failed to unregister broker %d of %s/%s: %s", broker_id, namespace, cluster, error)


# ---------------------------------------------------------------------------------------------
# JbodBroker


def _replace_requested(meta: Mapping[str, Any]) -> frozenset[str]:
    text = (meta.get("annotations") or {}).get(names.ANNOTATION_REPLACE_DISKS, "")
    return frozenset(part.strip() for part in text.split(",") if part.strip())


def _others_ready(
    pods_index: kopf.Index[Any, Any], namespace: str, cluster: str, broker_id: int, brokers: int
) -> bool:
    for other in range(brokers):
        if other == broker_id:
            continue
        pod = _first(pods_index.get((namespace, names.broker(cluster, other))))
        if health.pod_condition(pod, "Ready") != "True":
            return False
    return True


@kopf.on.resume(names.GROUP, names.VERSION, names.BROKERS)
@kopf.on.create(names.GROUP, names.VERSION, names.BROKERS)
@kopf.on.update(names.GROUP, names.VERSION, names.BROKERS)
@kopf.timer(
    names.GROUP, names.VERSION, names.BROKERS, interval=BROKER_TIMER_INTERVAL, initial_delay=0.5, backoff=5.0
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
        cluster_body = _first(kwargs["clusters_index"].get((namespace, cluster)))
        if cluster_body is None:
            raise kopf.TemporaryError(f"JbodCluster {cluster} not found", delay=10)
        try:
            cluster_spec = model.parse_cluster(cluster, cluster_body.get("spec") or {})
        except model.SpecError as exc:
            raise kopf.TemporaryError(f"JbodCluster {cluster} has an invalid spec: {exc}", delay=30) from None
        owner = _plain(body)
        broker_id = broker.broker_id
        pod_name = names.broker(cluster, broker_id)
        claims = list(claims_index.get((namespace, cluster, str(broker_id)), []))
        pod = _first(pods_index.get((namespace, pod_name)))
        view = _view(namespace, cluster)
        volume_names = {c.get("spec", {}).get("volumeName") for c in claims} - {None}
        observation = health.Observation(
            broker_id=broker_id,
            disks=broker.disks,
            policy=cluster_spec.disk_failure_policy,
            replace_requested=_replace_requested(meta),
            pod=pod,
            claims=claims,
            volumes={v: _first(volumes_index.get(v)) for v in volume_names if volumes_index.get(v)},
            attachments={v: list(attachments_index.get(v, [])) for v in volume_names},
            controller_reachable=view.reachable,
            registration=view.registrations.get(broker_id),
            placements=view.placements.get(broker_id, {}),
            log_dirs=view.log_dirs.get(broker_id),
            previous=status,
            now=_now(),
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
        restart = _converge_claims(body, reconciled, decision, status, claims, pod)

        kube.apply(
            builders.broker_config_map(
                cluster_spec, cluster, namespace, broker_id, broker.disks, owner, reconciled.added_listeners
            )
        )
        if pod is not None and decision.unfenced is not None:
            _set_readiness_gate(pod, pod_name, namespace, unfenced=decision.unfenced)
        patch.status.update({**decision.status, "observedGeneration": meta.get("generation")})
        metrics.observe_broker(namespace, cluster, broker_id, decision.status)
        _converge_pod(reconciled, pod, restart, claims, pods_index)


def _converge_claims(  # noqa: PLR0913  the broker (body, reconciled), the decision, its old status, claims, pod
    body: kopf.Body,
    reconciled: _BrokerInCluster,
    decision: health.Decision,
    previous: Mapping[str, Any],
    claims: Sequence[Mapping[str, Any]],
    pod: Mapping[str, Any] | None,
) -> str | None:
    """Create, grow, annotate, replace and delete the broker's claims as decided; the reason to
    restart its pod, if any."""
    choices = health.choose_claims(reconciled.broker.disks, claims, pod)
    existing_claims = {c["metadata"]["name"]: c for c in claims}
    _ensure_claims(reconciled, choices, existing_claims)
    _grow_full_disks(body, reconciled, decision.status, previous, choices, existing_claims)
    _record_directory_ids(reconciled.namespace, decision.directory_ids)
    restart = decision.restart_pod
    for disk in decision.replace:
        choice = choices[disk]
        replaced_id: str | None = next(
            (d.get("directoryId") for d in decision.status["logDirs"] if d["name"] == disk), None
        )
        _replace_volume(reconciled, disk, choice, existing_claims, replaced_id)
        metrics.REPLACEMENTS.labels(cluster=reconciled.cluster).inc()
        restart = f"disk {disk} gets a new volume"
    if decision.replace:
        meta = body.get("metadata") or {}
        _forget_replace_requests(str(meta.get("name")), reconciled.namespace, meta, replaced=decision.replace)
    for claim_name in decision.delete_claims:
        kube.delete("v1", "PersistentVolumeClaim", claim_name, reconciled.namespace)
    return restart


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
    status: Mapping[str, Any],
    previous: Mapping[str, Any],
    choices: Mapping[str, health.ClaimChoice],
    existing: Mapping[str, Mapping[str, Any]],
) -> None:
    """Grow the claim of each disk its broker cordoned for its space, as `disk_growth` decides;
    a disk that cannot grow gets the reason as `notGrowable` in `status` (the status about to be
    written), which the cluster's reconcile takes as a request to move replicas off it."""
    entries = {d.get("name"): d for d in status.get("logDirs") or []}
    before = {d.get("name"): d for d in previous.get("logDirs") or []}
    for disk in reconciled.broker.disks:
        entry = entries.get(disk.name) or {}
        if not entry.get("spaceCordoned"):
            continue
        claim = existing.get(choices[disk.name].current or "")
        decision = disk_growth.decide(disk, entry, claim, expandable=functools.partial(_expandable, claim))
        if isinstance(decision, disk_growth.Grow):
            _request_storage(decision.claim, reconciled.namespace, decision.size)
        elif isinstance(decision, disk_growth.CannotGrow):
            entry["notGrowable"] = decision.reason
        where = f"log dir {disk.name} of broker {reconciled.broker.broker_id}"
        newly = not (before.get(disk.name) or {}).get("spaceCordoned")
        if event := disk_growth.event(decision, where, newly_cordoned=newly):
            _post_events(body, [event])


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
        annotations = {names.ANNOTATION_RETIRED: _now().strftime("%Y-%m-%dT%H:%M:%SZ")}
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
    image = cluster_spec.image or str(SETTINGS["image"])
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
        now = time.monotonic()
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


# ---------------------------------------------------------------------------------------------
# JbodUser


def _user_cluster(spec: users.UserSpec, namespace: str) -> tuple[model.ClusterSpec, str]:
    """The user's cluster spec and admin token; `TemporaryError` until both exist."""
    body = kube.get(names.API_VERSION, "JbodCluster", spec.cluster, namespace)
    if body is None:
        raise kopf.TemporaryError(f"JbodCluster {spec.cluster} not found", delay=10)
    try:
        cluster_spec = model.parse_cluster(spec.cluster, body.get("spec") or {})
    except model.SpecError as exc:
        raise kopf.TemporaryError(
            f"JbodCluster {spec.cluster} has an invalid spec: {exc}", delay=30
        ) from None
    token = (_tokens(spec.cluster, namespace) or {}).get(names.SECRET_ADMIN_TOKEN)
    if not token:
        raise kopf.TemporaryError(f"JbodCluster {spec.cluster} has no admin token yet", delay=5)
    return cluster_spec, token


def _user_secret(
    name: str, namespace: str, spec: users.UserSpec, cluster_spec: model.ClusterSpec, token: str
) -> dict[str, str]:
    """The user's Secret data, made (and its credential registered) when missing or stale."""
    current = _secret_data(name, namespace) or {}
    bundle = _bundle(spec.cluster, namespace, cluster_spec)
    if spec.authentication.type == "scram-sha-512":
        password = current.get("password") or secrets.token_urlsafe(32)
        key = (namespace, f"{spec.cluster}/{name}")
        state = CREDENTIALS.setdefault(key, credentials.CredentialState())
        if not credentials.ensure(
            _controller_url(spec.cluster, namespace),
            token,
            ENDPOINTS.resolve,
            password,
            state,
            now=time.monotonic(),
            ca_file=TRUST_FILES.get((namespace, spec.cluster)),
            user=name,
        ):
            raise kopf.TemporaryError(f"the SCRAM credential of {name} is not registered yet", delay=5)
        return builders.scram_client_settings(
            spec.cluster, namespace, user=name, password=password, ca_bundle=bundle
        )
    tls = cluster_spec.tls
    if not tls.enabled or tls.issuer == "cert-manager" or bundle is None:
        raise kopf.PermanentError(
            f"authentication tls needs JbodCluster {spec.cluster} with spec.tls.enabled and issuer operator or secret"
        )
    signing = _signing_ca(tls, spec.cluster, namespace)
    if signing is None:
        raise kopf.TemporaryError("the cluster CA is not made yet", delay=5)
    bundled = certificates.split(bundle)
    leaf = None
    if current.get("user.crt"):
        try:
            leaf = certificates.describe(
                current["user.crt"], certificates.signing_first(signing.cert_pem, bundled)
            )
        except certificates.CertificateError:
            leaf = None
    authority = certificates.authority(signing.cert_pem, bundled, _ca_since(spec.cluster, namespace))
    reason = rotation.leaf_reason(leaf, frozenset(), authority, _tls_policy(tls), _now())
    if reason is None and current.get(names.TLS_CA) == bundle:
        return current
    if reason is None:
        key_pem, cert_pem = current["user.key"], current["user.crt"]
    else:
        pair = certificates.issue(signing, name, days=tls.validity_days, now=_now())
        key_pem, cert_pem = pair.key_pem, pair.cert_pem
        log.info("Issued the client certificate of Kafka user %s/%s: %s", namespace, name, reason)
    return builders.tls_client_settings(
        spec.cluster, namespace, key_pem=key_pem, cert_pem=cert_pem, ca_bundle=bundle
    )


def _bundle(cluster: str, namespace: str, spec: model.ClusterSpec) -> str | None:
    if not spec.tls.enabled:
        return None
    if spec.tls.issuer == "cert-manager":
        return (_secret_data(names.controller_tls(cluster), namespace) or {}).get(names.TLS_CA)
    return (_secret_data(names.cluster_ca_cert(cluster), namespace) or {}).get(names.TLS_CA)


@kopf.on.resume(names.GROUP, names.VERSION, names.USERS)
@kopf.on.create(names.GROUP, names.VERSION, names.USERS)
@kopf.on.update(names.GROUP, names.VERSION, names.USERS)
@kopf.timer(
    names.GROUP, names.VERSION, names.USERS, id="users", interval=CLUSTER_FULL_INTERVAL, initial_delay=30.0
)
def reconcile_user(  # noqa: PLR0913  kopf handler: one parameter per kwarg kopf passes
    body: kopf.Body,
    spec: kopf.Spec,
    name: str,
    namespace: str | None,
    meta: kopf.Meta,
    patch: kopf.Patch,
    **_: Any,
) -> None:
    """The user's credential, its Secret `<user>` and its ACLs (replacing the previous set)."""
    namespace = namespace or "default"
    if meta.get("deletionTimestamp"):
        return
    try:
        user = users.parse_user(name, dict(spec))
    except model.SpecError as exc:
        patch.status.update({"ready": False, "reason": str(exc)})
        raise kopf.PermanentError(str(exc)) from None
    cluster_spec, token = _user_cluster(user, namespace)
    try:
        data = _user_secret(name, namespace, user, cluster_spec, token)
        if cluster_spec.listeners:  # the external bootstrap addresses (issue 34)
            data.update(
                listener_objects.bootstrap_keys(
                    kube.get(names.API_VERSION, "JbodCluster", user.cluster, namespace)
                )
            )
    except kopf.PermanentError as exc:
        patch.status.update({"ready": False, "reason": str(exc)})
        raise
    if data != _secret_data(name, namespace):
        kube.apply(builders.user_secret(name, namespace, user.cluster, data, owner=_plain(body)))
    error = credentials.replace_acls(
        _controller_url(user.cluster, namespace),
        token,
        ENDPOINTS.resolve,
        TRUST_FILES.get((namespace, user.cluster)),
        name,
        users.acl_bindings(name, user.authorization.acls),
    )
    if error is None:
        error = credentials.replace_quotas(
            _controller_url(user.cluster, namespace),
            token,
            ENDPOINTS.resolve,
            TRUST_FILES.get((namespace, user.cluster)),
            name,
            users.quota_values(user.quotas),
        )
    if error is not None:
        patch.status.update({"ready": False, "reason": error})
        raise kopf.TemporaryError(error, delay=10)
    patch.status.update(
        {
            "ready": True,
            "reason": None,
            "secret": name,
            "username": name,
            "observedGeneration": meta.get("generation"),
        }
    )


@kopf.on.delete(names.GROUP, names.VERSION, names.USERS)
def remove_user(spec: kopf.Spec, name: str, namespace: str | None, **_: Any) -> None:
    """kopf's finalizer holds the JbodUser until its ACLs, credential and Secret are gone."""
    namespace = namespace or "default"
    cluster = str(spec.get("cluster") or "")
    CREDENTIALS.pop((namespace, f"{cluster}/{name}"), None)
    token = (_tokens(cluster, namespace) or {}).get(names.SECRET_ADMIN_TOKEN)
    if token:  # a cluster already gone holds nothing of the user
        error = credentials.remove_user(
            _controller_url(cluster, namespace),
            token,
            ENDPOINTS.resolve,
            TRUST_FILES.get((namespace, cluster)),
            name,
        )
        if error is not None:
            raise kopf.TemporaryError(error, delay=10)
    kube.delete("v1", "Secret", name, namespace)
