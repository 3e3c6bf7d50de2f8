"""Smoke test of the e2e harness: a real control plane, real volumes, pods run by the local kubelet.

Skipped when the toolchain is not built unless JBOD_E2E_REQUIRED is set (then it is built first).
"""

from __future__ import annotations

import base64
import json
import os
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("kubernetes")  # the harness needs the `kubernetes` client

from e2e import kube as k
from e2e.cluster import Cluster, is_ready, is_running, pod_condition, wait_for
from e2e.provisioner import is_mounted

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

GATE = "example.com/gate"


def _http_get(address: str, path: str) -> str:
    with urllib.request.urlopen(f"http://{address}{path}", timeout=5) as resp:
        return resp.read().decode()


def _endpoint(cluster: Cluster, key: str) -> str | None:
    return json.loads(cluster.endpoints_file.read_text()).get(key)


def _pvc_bound(cluster: Cluster, ns: str, name: str) -> k.Obj | None:
    assert cluster.kube is not None
    pvc = cluster.kube.call(cluster.kube.core.read_namespaced_persistent_volume_claim, name, ns)
    return pvc if pvc["status"].get("phase") == "Bound" else None


def test_pod_with_volumes_gates_endpoints_and_deletion(e2e_cluster: Cluster, e2e_namespace: str) -> None:
    c, ns = e2e_cluster, e2e_namespace
    assert c.kube is not None and c.kubelet is not None
    c.apply([
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": ns},
         "spec": {"storageClassName": "jbod-e2e", "accessModes": ["ReadWriteOnce"],
                  "resources": {"requests": {"storage": "1Gi"}}}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web-config", "namespace": ns},
         "data": {"index.html": "hello from a configmap\n", "listen.conf": "bind=0.0.0.0:8080\n"}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "web-secret", "namespace": ns},
         "data": {"token": base64.b64encode(b"s3cret").decode()}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": ns},
         "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "http"}]}},
    ])  # fmt: skip

    # The PVC binds to a PV backed by a real mounted filesystem.
    pvc = wait_for(lambda: _pvc_bound(c, ns, "data"), timeout=60, what="PVC data Bound")
    pv_name = pvc["spec"]["volumeName"]
    host_mount = c.provisioner.mount_path(pv_name)  # type: ignore[union-attr]
    assert is_mounted(host_mount)

    c.apply({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-0", "namespace": ns, "labels": {"app": "web"}},
        "spec": {
            "readinessGates": [{"conditionType": GATE}],
            "terminationGracePeriodSeconds": 5,
            "initContainers": [{
                "name": "init", "image": "busybox",
                "command": ["sh", "-c", "cp /config/index.html /data/index.html && echo $(TOKEN) > /data/token.txt"],
                "env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "web-secret", "key": "token"}}}],
                "volumeMounts": [{"name": "data", "mountPath": "/data"},
                                 {"name": "config", "mountPath": "/config", "readOnly": True}],
            }],
            "containers": [{
                "name": "web", "image": "python:3",
                "command": ["python3", "-m", "http.server", "8080", "--bind", "0.0.0.0", "--directory", "/data"],
                "ports": [{"name": "http", "containerPort": 8080}],
                "readinessProbe": {"httpGet": {"path": "/index.html", "port": "http"}, "periodSeconds": 1},
                "volumeMounts": [{"name": "data", "mountPath": "/data"},
                                 {"name": "config", "mountPath": "/etc/e2e-web", "readOnly": True}],
            }],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                        {"name": "config", "configMap": {"name": "web-config"}}],
        },
    })  # fmt: skip

    # Running, containers ready, but not Ready until the readiness gate holds.
    pod = c.wait_pod(ns, "web-0", lambda p: pod_condition(p, "ContainersReady") == "True", timeout=60,
                     what="ContainersReady")  # fmt: skip
    assert is_running(pod) and not is_ready(pod)
    assert pod["status"]["podIP"] != "127.0.0.1"
    assert pod["status"]["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    c.kube.call(c.kube.core.patch_namespaced_pod_status, "web-0", ns,
                {"status": {"conditions": [{"type": GATE, "status": "True"}]}}, _content_type=k.SMP)  # fmt: skip
    c.wait_pod(ns, "web-0", is_ready, timeout=30, what="Ready after the gate")
    time.sleep(1.5)  # later kubelet status patches must keep the gate and Ready
    pod = c.pod(ns, "web-0")
    assert pod is not None and pod_condition(pod, GATE) == "True" and is_ready(pod)
    ready = next(x for x in pod["status"]["conditions"] if x["type"] == "Ready")
    assert "reason" not in ready  # no stale reason from the not-ready period

    # The Service resolves, through the endpoint map, to the live process.
    address = wait_for(lambda: _endpoint(c, f"web.{ns}.svc:80"), timeout=10, what="endpoint of Service web")
    assert address.startswith("127.0.0.1:")
    assert _http_get(address, "/index.html") == "hello from a configmap\n"
    assert _http_get(address, "/token.txt") == "s3cret\n"

    # The pod saw its configMap at its mountPath (rewritten) and wrote into the PVC's real mount.
    assert (host_mount / "index.html").read_text() == "hello from a configmap\n"
    worker = c.kubelet.worker(ns, "web-0")
    assert worker is not None
    sandbox = worker.containers["web"].sandbox
    assert sandbox is not None
    root = Path(f"/proc/{sandbox.pid}/root")
    assert (root / "etc/e2e-web/listen.conf").read_text() == f"bind={address}\n"
    assert not Path("/etc/e2e-web").exists()  # the mount point exists only inside the pod
    vas = c.kube.call(c.kube.storage.list_volume_attachment)["items"]
    assert [
        va["spec"]["nodeName"] for va in vas if va["spec"]["source"]["persistentVolumeName"] == pv_name
    ] == [pod["spec"]["nodeName"]]

    # detach_volume unmounts it inside the pod and on the host, and drops the VolumeAttachment.
    c.kubelet.detach_volume(pv_name)
    assert not is_mounted(host_mount)
    assert not (root / "data/index.html").exists()
    vas = c.kube.call(c.kube.storage.list_volume_attachment)["items"]
    assert not [va for va in vas if va["spec"]["source"]["persistentVolumeName"] == pv_name]

    # Deleting the pod kills the process and removes the pod.
    pid = c.kubelet.pod_process(ns, "web-0", "web")
    assert pid is not None and "http.server" in c.kubelet.logs(ns, "web-0", "web")
    c.kubectl("delete", "pod", "web-0", "-n", ns, "--wait=false")
    wait_for(lambda: c.pod(ns, "web-0") is None, timeout=30, what="pod web-0 gone")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)

    # Deleting the PVC releases the PV, which the provisioner deletes with its image.
    c.kubectl("delete", "pvc", "data", "-n", ns, "--wait=false")
    wait_for(lambda: c.kube.get_or_none(c.kube.core.read_persistent_volume, pv_name) is None,  # type: ignore[union-attr]
             timeout=60, what=f"PV {pv_name} deleted")  # fmt: skip
    assert not c.provisioner.image_path(pv_name).exists()  # type: ignore[union-attr]


def test_statefulset_with_volume_claim_templates(e2e_cluster: Cluster, e2e_namespace: str) -> None:
    c, ns = e2e_cluster, e2e_namespace
    c.apply([
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "st", "namespace": ns},
         "spec": {"clusterIP": "None", "selector": {"app": "st"}, "ports": [{"name": "http", "port": 8000}]}},
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "st", "namespace": ns},
         "spec": {
             "serviceName": "st", "replicas": 2, "selector": {"matchLabels": {"app": "st"}},
             "template": {"metadata": {"labels": {"app": "st"}}, "spec": {
                 "terminationGracePeriodSeconds": 2,
                 "containers": [{
                     "name": "app", "image": "python:3",
                     "command": ["sh", "-c", "echo $(POD) > /var/lib/e2e-st/name && "
                                 "exec python3 -m http.server $(PORT) --bind 127.0.0.1 --directory /var/lib/e2e-st"],
                     "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                             {"name": "PORT", "value": "8000"}],
                     "ports": [{"name": "http", "containerPort": 8000}],
                     "readinessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 1},
                     "volumeMounts": [{"name": "data", "mountPath": "/var/lib/e2e-st"}],
                 }],
             }},
             "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                 "storageClassName": "jbod-e2e", "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "100Mi"}}}}],
         }},
    ])  # fmt: skip
    for i in range(2):
        c.wait_pod(ns, f"st-{i}", is_ready, timeout=90, what="Ready")
        assert _pvc_bound(c, ns, f"data-st-{i}")
        address = wait_for(lambda i=i: _endpoint(c, f"st-{i}.st.{ns}.svc:8000"), timeout=10, what=f"st-{i}")
        assert _http_get(address, "/name") == f"st-{i}\n"

    # Garbage collection through ownerReferences: the StatefulSet's pods go with it.
    c.kubectl("delete", "statefulset", "st", "-n", ns, "--cascade=background", "--wait=false")
    for i in range(2):
        wait_for(lambda i=i: c.pod(ns, f"st-{i}") is None, timeout=60, what=f"st-{i} garbage-collected")


def test_kwok_leaves_pods_to_the_kubelet(e2e_cluster: Cluster, e2e_namespace: str) -> None:
    """A pod bound to a kwok node that the local kubelet does not serve stays Pending."""
    c, ns = e2e_cluster, e2e_namespace
    assert c.kube is not None
    node = "unserved-node"
    c.kube.call(
        c.kube.core.create_node, {"metadata": {"name": node, "annotations": {"kwok.x-k8s.io/node": "fake"}}}
    )
    try:
        c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "idle", "namespace": ns},
                 "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x", "command": ["true"]}]}})  # fmt: skip
        time.sleep(5)
        pod = c.pod(ns, "idle")
        assert pod is not None
        assert pod["status"].get("phase") == "Pending" and not pod["status"].get("containerStatuses")
    finally:
        c.kubectl("delete", "pod", "idle", "-n", ns, "--grace-period=0", "--force", check=False)
        c.kubectl("delete", "node", node, check=False)


def test_helm_installs_a_chart(e2e_cluster: Cluster, e2e_namespace: str, tmp_path: Path) -> None:
    chart = tmp_path / "tiny"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: tiny\nversion: 0.1.0\n")
    (chart / "templates" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-cm\ndata:\n  k: v\n"
    )
    e2e_cluster.helm("install", "rel", str(chart), "-n", e2e_namespace, "--wait", "--timeout", "60s")
    out = e2e_cluster.kubectl("get", "configmap", "rel-cm", "-n", e2e_namespace, "-o", "jsonpath={.data.k}")
    assert out.stdout == "v"
