"""How the operator reaches each cluster, shared by the handler modules: its settings, the
latest view of each cluster (written by `cluster_handlers.poll_cluster` only), the credentials'
state, the trust files of clusters with TLS, and the reads of a cluster's Secrets.

Guarantees: `controller_url` is https exactly while the cluster has a trust file (`trust`);
`view` never dials (a cluster not polled yet is unreachable); `now` is the one wall clock the
handlers read.
"""

from __future__ import annotations

import base64
import tempfile
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jbod_operator import credentials, kube, names, rotation, views

DEFAULT_IMAGE = "ghcr.io/jbod-dev/jbod:0.1.0"
SETTINGS: dict[str, Any] = {  # set once by `jbod-operator`'s options before kopf starts
    "image": DEFAULT_IMAGE,
    "poll_seconds": 2.0,
    "broker_interval": 2.0,
    "secret_propagation": rotation.PROPAGATION,  # --secret-propagation-seconds
    "namespaces": None,  # --namespace (a frozenset), None with --all-namespaces
}
VIEWS: dict[tuple[str, str], views.ClusterView] = {}  # (namespace, cluster) → its latest view
CREDENTIALS: dict[tuple[str, str], credentials.CredentialState] = {}
TRUST_FILES: dict[tuple[str, str], Path] = {}  # (namespace, cluster) → its trust bundle's file
ENDPOINTS = views.Endpoints()
CLUSTER_TIMER_INTERVAL = 5.0
CLUSTER_FULL_INTERVAL = 60.0


def plain(body: Mapping[str, Any]) -> dict[str, Any]:
    return dict(body)


def first(store: Iterable[Any] | None) -> Any:
    for item in store or ():
        return item
    return None


def now() -> datetime:
    return datetime.now(UTC)


def monotonic() -> float:
    """Seconds on the operator's clock that never goes back (credentials' and drains' timing)."""
    return time.monotonic()


def secret_data(name: str, namespace: str) -> dict[str, str] | None:
    secret = kube.get("v1", "Secret", name, namespace)
    if secret is None:
        return None
    data = secret.get("data") or {}
    return {k: base64.b64decode(v).decode() for k, v in data.items()}


def tokens(cluster: str, namespace: str) -> dict[str, str] | None:
    return secret_data(names.secret(cluster), namespace)


def controller_url(cluster: str, namespace: str) -> str:
    """The controllers' Service, https when the cluster has TLS on (`trust`)."""
    return names.controller_url(cluster, namespace, tls=(namespace, cluster) in TRUST_FILES)


def trust(cluster: str, namespace: str, bundle: str | None) -> None:
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


def view(namespace: str, cluster: str) -> views.ClusterView:
    return VIEWS.get((namespace, cluster)) or views.ClusterView(reachable=False)
