"""A JbodCluster's TLS: the cluster CA and every pod's certificate, issued and renewed as
`rotation` decides; the trust bundle; `status.tls`.

Guarantees: a certificate is issued only when `rotation.leaf_reason` names a reason; a new CA joins
the bundle before it signs anything the pods load, and its predecessor leaves only when
`rotation.ca_action` says so; a renewal the user asked for (annotation) is done and its
annotation removed in one write.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import kopf

from jbod_operator import builders, certificates, cluster_access, kube, listeners, model, names, rotation

log = logging.getLogger("jbod_operator")


def tls_status(cluster: str, namespace: str, tls: model.TlsSpec) -> dict[str, Any] | None:
    """The trust bundle's Secret and the signing CA's expiry (`status.tls`)."""
    if not tls.enabled:
        return None
    trust = names.controller_tls(cluster) if tls.issuer == "cert-manager" else names.cluster_ca_cert(cluster)
    bundle = certificates.split((cluster_access.secret_data(trust, namespace) or {}).get(names.TLS_CA, ""))
    signing = None if tls.issuer == "cert-manager" else signing_ca(tls, cluster, namespace)
    not_after = certificates.describe(signing.cert_pem).not_after if signing is not None else None
    return {
        "trustSecret": trust,
        "caNotAfter": not_after.strftime("%Y-%m-%dT%H:%M:%SZ") if not_after is not None else None,
        "caCount": len(bundle),
    }


def tls_policy(tls: model.TlsSpec) -> rotation.Policy:
    return rotation.Policy(
        validity=dt.timedelta(days=tls.validity_days),
        renew_before=dt.timedelta(days=tls.renew_before_days),
        ca_validity=dt.timedelta(days=tls.ca_validity_days),
        ca_renew_before=dt.timedelta(days=tls.ca_renew_before_days),
        operator_ca=tls.issuer == "operator",
        ca_expiration=tls.ca_expiration_policy,
        propagation=cluster_access.SETTINGS["secret_propagation"],
    )


def signing_ca(tls: model.TlsSpec, cluster: str, namespace: str) -> certificates.KeyPair | None:
    """The CA that signs: the operator's (`<cluster>-cluster-ca`) or the user's `caSecret`."""
    if tls.issuer == "secret":
        data = cluster_access.secret_data(str(tls.ca_secret), namespace)
        if data is None or names.TLS_CERT not in data or names.TLS_KEY not in data:
            raise kopf.TemporaryError(
                f"spec.tls.caSecret: Secret {tls.ca_secret} with tls.crt and tls.key not found", delay=30
            )
        return certificates.KeyPair(data[names.TLS_KEY], certificates.split(data[names.TLS_CERT])[0])
    data = cluster_access.secret_data(names.cluster_ca(cluster), namespace)
    if data is None or names.CA_KEY not in data:
        return None
    return certificates.KeyPair(data[names.CA_KEY], data[names.TLS_CA])


def ensure_tls(  # noqa: PLR0913  the cluster (body, spec, name, namespace, owner) and its broker ids
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
        return (cluster_access.secret_data(names.controller_tls(cluster), namespace) or {}).get(names.TLS_CA)
    now, policy = cluster_access.now(), tls_policy(tls)
    try:
        signing = signing_ca(tls, cluster, namespace)
        if signing is not None:
            certificates.load_ca(signing)
    except certificates.CertificateError as exc:
        raise kopf.TemporaryError(f"spec.tls: the signing CA is unusable: {exc}", delay=60) from None
    bundle = (cluster_access.secret_data(names.cluster_ca_cert(cluster), namespace) or {}).get(
        names.TLS_CA, ""
    )
    recorded = since = ca_since(cluster, namespace)
    bundled = certificates.split(bundle)
    if signing is not None and signing.cert_pem not in bundled:
        bundled.append(signing.cert_pem)  # a new signing CA joins the bundle now
        since = now
    wanted = builders.tls_certificates(spec, cluster, namespace, list(broker_ids), assigned)

    def leaves(trust: str) -> list[rotation.Certificate | None]:
        return [
            *(leaf(secret, namespace, trust) for secret in wanted),
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
        current = leaf(secret, namespace, trust)
        reason = rotation.leaf_reason(current, frozenset(dns), authority, policy, now)
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
    policy = tls_policy(tls)
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


def ca_since(cluster: str, namespace: str) -> dt.datetime | None:
    """When the signing CA joined the trust bundle (the bundle Secret's annotation)."""
    secret = kube.get("v1", "Secret", names.cluster_ca_cert(cluster), namespace) or {}
    text = ((secret.get("metadata") or {}).get("annotations") or {}).get(names.ANNOTATION_CA_SINCE)
    try:
        return dt.datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


def _iso(moment: dt.datetime | None) -> str:
    return (moment or cluster_access.now()).isoformat()


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
    data = cluster_access.secret_data(user, namespace)
    if not data or not data.get("user.crt"):
        return None
    try:
        return certificates.describe(data["user.crt"], bundle)
    except certificates.CertificateError:
        return None


def leaf(secret: str, namespace: str, bundle: str = "") -> rotation.Certificate | None:
    """The first certificate of a TLS Secret (`tls.crt`), checked against `bundle`; None when the
    Secret, its certificate or a readable one is missing."""
    data = cluster_access.secret_data(secret, namespace)
    if not data or not data.get(names.TLS_CERT):
        return None
    try:
        return certificates.describe(certificates.split(data[names.TLS_CERT])[0], bundle)
    except (certificates.CertificateError, IndexError):
        return None


def trust_bundle(cluster: str, namespace: str, spec: model.ClusterSpec) -> str | None:
    if not spec.tls.enabled:
        return None
    if spec.tls.issuer == "cert-manager":
        return (cluster_access.secret_data(names.controller_tls(cluster), namespace) or {}).get(names.TLS_CA)
    return (cluster_access.secret_data(names.cluster_ca_cert(cluster), namespace) or {}).get(names.TLS_CA)
