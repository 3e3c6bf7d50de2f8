"""kopf handlers of `JbodUser`: its credential (SCRAM or a client certificate), its Secret, its
ACLs and quotas (each replaced as a set); on deletion kopf's finalizer holds it until they are
gone at the controller.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

import kopf

from jbod_operator import (
    builders,
    certificates,
    cluster_access,
    cluster_tls,
    credentials,
    kube,
    listener_objects,
    model,
    names,
    rotation,
    users,
)

log = logging.getLogger("jbod_operator")


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
    token = (cluster_access.tokens(spec.cluster, namespace) or {}).get(names.SECRET_ADMIN_TOKEN)
    if not token:
        raise kopf.TemporaryError(f"JbodCluster {spec.cluster} has no admin token yet", delay=5)
    return cluster_spec, token


def _user_secret(
    name: str, namespace: str, spec: users.UserSpec, cluster_spec: model.ClusterSpec, token: str
) -> dict[str, str]:
    """The user's Secret data, made (and its credential registered) when missing or stale."""
    current = cluster_access.secret_data(name, namespace) or {}
    bundle = cluster_tls.trust_bundle(spec.cluster, namespace, cluster_spec)
    if spec.authentication.type == "scram-sha-512":
        password = current.get("password") or secrets.token_urlsafe(32)
        key = (namespace, f"{spec.cluster}/{name}")
        state = cluster_access.CREDENTIALS.setdefault(key, credentials.CredentialState())
        if not credentials.ensure(
            cluster_access.controller_url(spec.cluster, namespace),
            token,
            cluster_access.ENDPOINTS.resolve,
            password,
            state,
            now=cluster_access.monotonic(),
            ca_file=cluster_access.TRUST_FILES.get((namespace, spec.cluster)),
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
    signing = cluster_tls.signing_ca(tls, spec.cluster, namespace)
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
    authority = certificates.authority(
        signing.cert_pem, bundled, cluster_tls.ca_since(spec.cluster, namespace)
    )
    reason = rotation.leaf_reason(
        leaf, frozenset(), authority, cluster_tls.tls_policy(tls), cluster_access.now()
    )
    if reason is None and current.get(names.TLS_CA) == bundle:
        return current
    if reason is None:
        key_pem, cert_pem = current["user.key"], current["user.crt"]
    else:
        pair = certificates.issue(signing, name, days=tls.validity_days, now=cluster_access.now())
        key_pem, cert_pem = pair.key_pem, pair.cert_pem
        log.info("Issued the client certificate of Kafka user %s/%s: %s", namespace, name, reason)
    return builders.tls_client_settings(
        spec.cluster, namespace, key_pem=key_pem, cert_pem=cert_pem, ca_bundle=bundle
    )


@kopf.on.resume(names.GROUP, names.VERSION, names.USERS)
@kopf.on.create(names.GROUP, names.VERSION, names.USERS)
@kopf.on.update(names.GROUP, names.VERSION, names.USERS)
@kopf.timer(
    names.GROUP,
    names.VERSION,
    names.USERS,
    id="users",
    interval=cluster_access.CLUSTER_FULL_INTERVAL,
    initial_delay=30.0,
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
    if data != cluster_access.secret_data(name, namespace):
        kube.apply(
            builders.user_secret(name, namespace, user.cluster, data, owner=cluster_access.plain(body))
        )
    error = credentials.replace_acls(
        cluster_access.controller_url(user.cluster, namespace),
        token,
        cluster_access.ENDPOINTS.resolve,
        cluster_access.TRUST_FILES.get((namespace, user.cluster)),
        name,
        users.acl_bindings(name, user.authorization.acls),
    )
    if error is None:
        error = credentials.replace_quotas(
            cluster_access.controller_url(user.cluster, namespace),
            token,
            cluster_access.ENDPOINTS.resolve,
            cluster_access.TRUST_FILES.get((namespace, user.cluster)),
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
    cluster_access.CREDENTIALS.pop((namespace, f"{cluster}/{name}"), None)
    token = (cluster_access.tokens(cluster, namespace) or {}).get(names.SECRET_ADMIN_TOKEN)
    if token:  # a cluster already gone holds nothing of the user
        error = credentials.remove_user(
            cluster_access.controller_url(cluster, namespace),
            token,
            cluster_access.ENDPOINTS.resolve,
            cluster_access.TRUST_FILES.get((namespace, cluster)),
            name,
        )
        if error is not None:
            raise kopf.TemporaryError(error, delay=10)
    kube.delete("v1", "Secret", name, namespace)
