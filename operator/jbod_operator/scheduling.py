"""Where a cluster's pods run and how many may be evicted at once: `spec.template` applied to the
pod specs the builders make, the default topology spread of brokers, the disruption budgets.

Guarantees (pure functions, same inputs same outputs):
* `apply_pod_template` returns a new pod spec: the template's affinity, tolerations,
  topologySpreadConstraints, priorityClassName, nodeSelector and imagePullSecrets set as given,
  its pod and container securityContext merged key by key over the operator's; what the template
  leaves out is the operator's. Every container (init containers too) gets the container
  securityContext. The pod spec is an input of the broker pod's spec hash, so a template change
  recreates the broker pods one at a time; StatefulSets roll their pods themselves.
* `pod_labels` / `pod_annotations` add the template's labels and annotations to the operator's
  without ever replacing one of the operator's (`model.TemplateMetadata` refuses those keys).
* `default_spread` gives brokers, unless their template has its own topologySpreadConstraints,
  two soft constraints (`ScheduleAnyway`): one over the zone (`spec.rack.topologyKey` when the
  spec has one, else `topology.kubernetes.io/zone`) and one over `kubernetes.io/hostname`. Soft,
  so a single-node cluster (kind) or nodes without zone labels still schedule every pod.
* The budgets count Ready pods: a broker pod is Ready only once the controller has unfenced it
  (readiness gate `jbod.dev/unfenced`), so a fenced broker is an unavailable one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from jbod_operator import model

ZONE_KEY: Final = "topology.kubernetes.io/zone"
HOST_KEY: Final = "kubernetes.io/hostname"


def rack_topology_key(spec: model.ClusterSpec) -> str | None:
    """`spec.rack.topologyKey` when the spec has one."""
    return None if spec.rack is None else spec.rack.topology_key


def default_spread(selector: Mapping[str, str], zone_key: str | None) -> list[dict[str, Any]]:
    """Soft spread of the pods `selector` matches over zones, then over nodes."""
    return [
        {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": dict(selector)},
        }
        for key in (zone_key or ZONE_KEY, HOST_KEY)
    ]


def apply_pod_template(
    pod_spec: Mapping[str, Any],
    template: model.ComponentTemplate,
    *,
    spread: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """`pod_spec` with `template` applied; `spread`: the topology spread used when the template
    has none (None: no default)."""
    pod = template.pod
    out = dict(pod_spec)
    if pod.affinity:
        out["affinity"] = pod.affinity
    if pod.tolerations:
        out["tolerations"] = list(pod.tolerations)
    if pod.topology_spread_constraints:
        out["topologySpreadConstraints"] = list(pod.topology_spread_constraints)
    elif spread:
        out["topologySpreadConstraints"] = spread
    if pod.priority_class_name:
        out["priorityClassName"] = pod.priority_class_name
    if pod.node_selector:
        out["nodeSelector"] = dict(pod.node_selector)
    if pod.image_pull_secrets:
        out["imagePullSecrets"] = list(pod.image_pull_secrets)
    if pod.security_context:
        out["securityContext"] = {**out.get("securityContext", {}), **pod.security_context}
    container_security = template.container.security_context
    if container_security:
        for key in ("initContainers", "containers"):
            if key in out:
                out[key] = [
                    {**c, "securityContext": {**c.get("securityContext", {}), **container_security}}
                    for c in out[key]
                ]
    return out


def pod_labels(labels: Mapping[str, str], template: model.ComponentTemplate) -> dict[str, str]:
    """The template's labels, then the operator's (which win; the model refuses a collision)."""
    return {**template.pod.metadata.labels, **labels}


def pod_annotations(annotations: Mapping[str, str], template: model.ComponentTemplate) -> dict[str, str]:
    return {**template.pod.metadata.annotations, **annotations}
