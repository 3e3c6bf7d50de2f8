"""The zoned kind cluster's plumbing, which issue 34's kind scenario builds on.

On the tier's cluster (`e2e/kind/kind-zones.yaml`: a control plane and three workers in zones
zone-a, zone-b and zone-c), one Deployment of the project image serving its node's name with
`python -m http.server` behind a NodePort Service:
* every worker carries its zone label and `KindCluster.nodes()` reports it;
* the host reaches the pod at `<node address>:<nodePort>` through EVERY node's address (kind's
  docker network; kube-proxy forwards to the pod's node over the pod network that spans nodes):
  the path a `nodeport` listener's clients take;
* `KindCluster.drain(node)` of the pod's node moves it to another worker, which the host then
  reaches through every address again; `uncordon` makes the node schedulable again.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import pytest

from e2e.kind.cluster import KindCluster, Node
from e2e.kind.images import PROJECT_IMAGE
from e2e.wait import wait_for
from tests.e2e.conftest import SMALL

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.timeout(300)]

NS = "jbod-zones"
APP = "whereami"
PORT = 8080
SERVE = (
    'mkdir -p /tmp/www && printf %s "$NODE_NAME" > /tmp/www/node && '
    f"exec python -m http.server {PORT} --bind 0.0.0.0 --directory /tmp/www"
)


def manifests() -> list[Mapping[str, Any]]:
    labels = {"app": APP}
    container = {
        "name": APP,
        "image": PROJECT_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", SERVE],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "ports": [{"containerPort": PORT}],
        "readinessProbe": {"httpGet": {"path": "/node", "port": PORT}, "periodSeconds": 1},
        "resources": SMALL,
    }
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": APP, "namespace": NS},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [container], "terminationGracePeriodSeconds": 1},
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": APP, "namespace": NS},
            "spec": {"type": "NodePort", "selector": labels, "ports": [{"port": PORT, "targetPort": PORT}]},
        },
    ]


@pytest.fixture
def whereami(kind_cluster: KindCluster) -> Iterator[int]:
    """The Deployment and its NodePort Service; yields the nodePort. Undone afterwards."""
    kind_cluster.apply(manifests())
    try:
        yield int(kind_cluster.get("service", APP, "-n", NS)["spec"]["ports"][0]["nodePort"])
    finally:
        for node in kind_cluster.get("nodes")["items"]:
            if node["spec"].get("unschedulable"):
                kind_cluster.uncordon(node["metadata"]["name"])
        kind_cluster.kubectl("delete", "namespace", NS, "--wait=false", check=False)


def served_node(node: Node, node_port: int) -> str:
    """What the pod behind the NodePort answers through `node`'s address, from the host."""
    response = httpx.get(f"http://{node.address}:{node_port}/node", timeout=2)
    response.raise_for_status()
    return response.text


def pod_node(cluster: KindCluster) -> str | None:
    """The node of the Deployment's one Ready pod (None while there is none, or more than one)."""
    pods = cluster.get("pods", "-n", NS, "-l", f"app={APP}")["items"]
    ready = [
        p
        for p in pods
        if p["metadata"].get("deletionTimestamp") is None
        and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
    ]
    return ready[0]["spec"]["nodeName"] if len(ready) == 1 and len(pods) == 1 else None


def reached_everywhere(nodes: list[Node], node_port: int, expected: str) -> bool:
    return all(served_node(node, node_port) == expected for node in nodes)


def test_nodeport_reached_from_host_through_every_node_and_drain(
    kind_cluster: KindCluster, whereami: int
) -> None:
    nodes = kind_cluster.nodes()
    workers = kind_cluster.workers()
    assert sorted(n.zone or "" for n in workers) == ["zone-a", "zone-b", "zone-c"], nodes
    assert len({n.address for n in nodes}) == len(nodes) == 4

    first = wait_for(lambda: pod_node(kind_cluster), timeout=120, what="the whereami pod Ready")
    assert first in {n.name for n in workers}
    wait_for(
        lambda: reached_everywhere(nodes, whereami, first),
        timeout=60,
        what=f"the NodePort {whereami} answering {first} through every node's address",
    )

    kind_cluster.drain(first, timeout=120)

    def elsewhere() -> str | None:
        node = pod_node(kind_cluster)
        return node if node != first else None

    moved = wait_for(
        elsewhere,
        timeout=120,
        what=f"the whereami pod Ready on a node other than {first}",
    )
    assert moved in {n.name for n in workers}
    wait_for(
        lambda: reached_everywhere(nodes, whereami, moved),
        timeout=60,
        what=f"the NodePort {whereami} answering {moved} through every node's address",
    )
    drained = next(n for n in kind_cluster.get("nodes")["items"] if n["metadata"]["name"] == first)
    assert drained["spec"].get("unschedulable") is True
    kind_cluster.uncordon(first)
    assert not kind_cluster.get("node", first)["spec"].get("unschedulable")
