"""The operator's calls to the Kubernetes API server (the only module that makes them).

* `apply` is server-side apply with the field manager `jbod-operator`: it creates what is missing
  and converges what differs, leaving fields other managers own alone.
* `create` creates only (Secrets holding generated tokens, bare Pods): an existing object is kept.
* Not-found on read or delete is a normal outcome (None / False), never an exception.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError

FIELD_MANAGER = "jbod-operator"


def load_config() -> None:
    """In-cluster credentials when running in a pod, else the kubeconfig (KUBECONFIG or ~/.kube/config)."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()


@functools.cache
def _dynamic() -> DynamicClient:
    return DynamicClient(client.ApiClient())


def _resource(api_version: str, kind: str) -> Any:
    return _dynamic().resources.get(api_version=api_version, kind=kind)


def core() -> client.CoreV1Api:
    return client.CoreV1Api()


def apply(manifest: Mapping[str, Any]) -> dict[str, Any]:
    resource = _resource(manifest["apiVersion"], manifest["kind"])
    meta = manifest["metadata"]
    result = resource.server_side_apply(
        body=dict(manifest),
        name=meta["name"],
        namespace=meta.get("namespace"),
        field_manager=FIELD_MANAGER,
        force_conflicts=True,
    )
    return dict(result.to_dict())


def create(manifest: Mapping[str, Any]) -> bool:
    """Create the object; False if it already exists."""
    resource = _resource(manifest["apiVersion"], manifest["kind"])
    try:
        resource.create(body=dict(manifest), namespace=manifest["metadata"].get("namespace"))
    except ApiException as exc:
        if exc.status == 409:
            return False
        raise
    return True


def get(api_version: str, kind: str, name: str, namespace: str | None) -> dict[str, Any] | None:
    try:
        return dict(_resource(api_version, kind).get(name=name, namespace=namespace).to_dict())
    except NotFoundError:
        return None


def list_objects(
    api_version: str, kind: str, namespace: str | None, labels: Mapping[str, str]
) -> list[dict[str, Any]]:
    selector = ",".join(f"{k}={v}" for k, v in labels.items())
    result = _resource(api_version, kind).get(namespace=namespace, label_selector=selector)
    return [dict(item.to_dict()) for item in result.items]


def delete(
    api_version: str, kind: str, name: str, namespace: str | None, *, grace_seconds: int | None = None
) -> bool:
    body = {"gracePeriodSeconds": grace_seconds} if grace_seconds is not None else None
    try:
        _resource(api_version, kind).delete(name=name, namespace=namespace, body=body)
    except NotFoundError:
        return False
    return True


def merge_patch(
    api_version: str, kind: str, name: str, namespace: str | None, patch: Mapping[str, Any]
) -> None:
    _resource(api_version, kind).patch(
        body=dict(patch), name=name, namespace=namespace, content_type="application/merge-patch+json"
    )


def set_pod_condition(  # noqa: PLR0913  the pod (name, namespace), then the condition's four fields
    name: str, namespace: str, condition_type: str, value: bool, reason: str, message: str
) -> bool:
    """Set one pod condition (a readiness gate), keeping the others; False if the pod is gone."""
    condition = {
        "type": condition_type,
        "status": "True" if value else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    try:
        core().patch_namespaced_pod_status(
            name,
            namespace,
            {"status": {"conditions": [condition]}},
            _content_type="application/strategic-merge-patch+json",
        )
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True
