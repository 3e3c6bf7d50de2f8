"""kopf's settings at startup and the indexes of the actual state: volume claims, PVs,
VolumeAttachments and pods of the clusters, JbodClusters and JbodBrokers. Handlers read them, never
list the API on their own.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import kopf

from jbod_operator import cluster_access, names


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


@kopf.index("persistentvolumeclaims", labels={names.LABEL_CLUSTER: kopf.PRESENT})
def claims_index(namespace: str | None, labels: Mapping[str, str], body: Mapping[str, Any], **_: Any) -> Any:
    return {
        (namespace, labels[names.LABEL_CLUSTER], labels.get(names.LABEL_BROKER)): cluster_access.plain(body)
    }


@kopf.index("persistentvolumes")
def volumes_index(name: str, body: Mapping[str, Any], **_: Any) -> Any:
    return {name: cluster_access.plain(body)}


@kopf.index("storage.k8s.io", "v1", "volumeattachments")
def attachments_index(spec: Mapping[str, Any], body: Mapping[str, Any], **_: Any) -> Any:
    volume = (spec.get("source") or {}).get("persistentVolumeName")
    return {volume: cluster_access.plain(body)} if volume else None


@kopf.index("pods", labels={names.LABEL_CLUSTER: kopf.PRESENT})
def pods_index(namespace: str | None, name: str, body: Mapping[str, Any], **_: Any) -> Any:
    return {(namespace, name): cluster_access.plain(body)}


@kopf.index(names.GROUP, names.VERSION, names.CLUSTERS)
def clusters_index(namespace: str | None, name: str, body: Mapping[str, Any], **_: Any) -> Any:
    return {(namespace, name): cluster_access.plain(body)}


@kopf.index(names.GROUP, names.VERSION, names.BROKERS)
def brokers_index(namespace: str | None, spec: Mapping[str, Any], body: Mapping[str, Any], **_: Any) -> Any:
    return {(namespace, spec.get("clusterName")): cluster_access.plain(body)}
