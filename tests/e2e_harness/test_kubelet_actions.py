"""The local kubelet's restart policies, probes and test actions (fail_volume, PVC expansion)."""

from __future__ import annotations

import os
from typing import Any

import pytest

pytest.importorskip("kubernetes")  # the harness needs the `kubernetes` client

from e2e import kube as k
from e2e.cluster import Cluster, is_ready, pod_condition, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


def _pod(name: str, ns: str, script: str, **spec: Any) -> dict[str, Any]:
    container = {"name": "c", "image": "busybox", "command": ["sh", "-c", script]}
    container.update(spec.pop("container", {}))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [container], **spec},
    }


def _status(pod: k.Obj) -> dict[str, Any]:
    return pod["status"]["containerStatuses"][0]


def test_restart_policies(e2e_cluster: Cluster, e2e_namespace: str) -> None:
    c, ns = e2e_cluster, e2e_namespace
    c.apply([
        _pod("crash", ns, "echo run; exit 3"),
        _pod("done", ns, "exit 0", restartPolicy="Never"),
        _pod("fail", ns, "exit 1", restartPolicy="Never"),
    ])  # fmt: skip
    pod = c.wait_pod(ns, "crash", lambda p: _status(p)["restartCount"] >= 2, timeout=60, what="2 restarts")
    assert _status(pod)["lastState"]["terminated"]["exitCode"] == 3
    assert c.kubelet is not None and c.kubelet.logs(ns, "crash", "c").count("run\n") >= 3
    c.wait_pod(ns, "done", lambda p: p["status"]["phase"] == "Succeeded", timeout=30, what="Succeeded")
    pod = c.wait_pod(ns, "fail", lambda p: p["status"]["phase"] == "Failed", timeout=30, what="Failed")
    assert _status(pod)["state"]["terminated"]["exitCode"] == 1
    assert pod_condition(pod, "Ready") == "False"


def test_exec_readiness_and_liveness_probes(e2e_cluster: Cluster, e2e_namespace: str) -> None:
    c, ns = e2e_cluster, e2e_namespace
    work = {"volumeMounts": [{"name": "work", "mountPath": "/work"}]}
    c.apply([
        _pod("slow", ns, "sleep 2; touch /work/ready; exec sleep 1000", volumes=[{"name": "work", "emptyDir": {}}],
             container={**work, "readinessProbe": {"exec": {"command": ["cat", "/work/ready"]}, "periodSeconds": 1}}),
        _pod("unhealthy", ns, "exec sleep 1000",
             container={"livenessProbe": {"exec": {"command": ["false"]}, "periodSeconds": 1, "failureThreshold": 2}}),
    ])  # fmt: skip
    pod = c.wait_pod(ns, "slow", lambda p: p["status"].get("phase") == "Running", timeout=30, what="Running")
    assert not is_ready(pod)
    c.wait_pod(ns, "slow", is_ready, timeout=30, what="Ready")
    c.wait_pod(
        ns, "unhealthy", lambda p: _status(p)["restartCount"] >= 1, timeout=60, what="liveness restart"
    )


_IN_CLUSTER = """
import json, os, ssl, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
ctx = ssl.create_default_context(cafile=f"{sa}/ca.crt")
url = f"https://{os.environ['KUBERNETES_SERVICE_HOST']}:{os.environ['KUBERNETES_SERVICE_PORT']}/version"
req = urllib.request.Request(url, headers={"Authorization": "Bearer " + open(f"{sa}/token").read()})
print("ns", open(f"{sa}/namespace").read(), "version", json.load(urllib.request.urlopen(req, context=ctx))["gitVersion"])
"""


def test_in_cluster_api_access(e2e_cluster: Cluster, e2e_namespace: str) -> None:
    """The projected ServiceAccount volume and KUBERNETES_SERVICE_* reach the local apiserver."""
    c, ns = e2e_cluster, e2e_namespace
    pod = _pod("sa", ns, "", restartPolicy="Never", container={"command": ["python3", "-c", _IN_CLUSTER]})
    c.apply(pod)
    c.wait_pod(ns, "sa", lambda p: p["status"].get("phase") == "Succeeded", timeout=30, what="Succeeded")
    assert c.kubelet is not None
    assert f"ns {ns} version {c.tools.k8s_version}" in c.kubelet.logs(ns, "sa", "c")


def _pvc(name: str, ns: str, size: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": ns},
            "spec": {"storageClassName": "jbod-e2e", "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": size}}}}  # fmt: skip


def _writer(name: str, ns: str, claim: str) -> dict[str, Any]:
    script = "while true; do date > /data/f && echo WROTE || echo WRITE-FAILED; sleep 0.3; done"
    return _pod(name, ns, script, volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": claim}}],
                container={"volumeMounts": [{"name": "d", "mountPath": "/data"}]})  # fmt: skip


def test_fail_volume(e2e_cluster: Cluster, e2e_namespace: str) -> None:
    c, ns = e2e_cluster, e2e_namespace
    assert c.kube is not None and c.kubelet is not None and c.provisioner is not None
    c.apply([_pvc("d", ns, "64Mi"), _writer("writer", ns, "d")])
    c.wait_pod(ns, "writer", lambda p: p["status"].get("phase") == "Running", timeout=60, what="Running")
    pv = c.kube.call(c.kube.core.read_namespaced_persistent_volume_claim, "d", ns)["spec"]["volumeName"]
    wait_for(lambda: "WROTE" in c.kubelet.logs(ns, "writer", "c"), timeout=10, what="a write")  # type: ignore[union-attr]
    c.kubelet.fail_volume(pv)
    wait_for(lambda: "Input/output error" in c.kubelet.logs(ns, "writer", "c"), timeout=10, what="EIO")  # type: ignore[union-attr]
    with pytest.raises(OSError):
        (c.provisioner.mount_path(pv) / "probe").write_text("x")


def test_pvc_expansion(e2e_cluster: Cluster, e2e_namespace: str) -> None:
    """Online when the kernel allows it, else Kubernetes' offline path: FileSystemResizePending until
    the pod using the volume is gone."""
    c, ns = e2e_cluster, e2e_namespace
    assert c.kube is not None and c.provisioner is not None
    c.apply([_pvc("g", ns, "64Mi"), _writer("grower", ns, "g")])
    c.wait_pod(ns, "grower", lambda p: p["status"].get("phase") == "Running", timeout=60, what="Running")
    pv = c.kube.call(c.kube.core.read_namespaced_persistent_volume_claim, "g", ns)["spec"]["volumeName"]
    before = os.statvfs(c.provisioner.mount_path(pv))
    c.kube.call(c.kube.core.patch_namespaced_persistent_volume_claim, "g", ns,
                {"spec": {"resources": {"requests": {"storage": "128Mi"}}}}, _content_type=k.MERGE)  # fmt: skip

    def state() -> str | None:
        pvc = c.kube.call(c.kube.core.read_namespaced_persistent_volume_claim, "g", ns)  # type: ignore[union-attr]
        if pvc["status"].get("capacity", {}).get("storage") == "128Mi":
            return "grown"
        if any(x["type"] == "FileSystemResizePending" for x in pvc["status"].get("conditions") or []):
            return "pending"
        return None

    assert wait_for(state, timeout=30, what="expansion or FileSystemResizePending") in ("grown", "pending")
    assert c.kube.call(c.kube.core.read_persistent_volume, pv)["spec"]["capacity"]["storage"] == "128Mi"
    if state() == "pending":
        c.kubectl("delete", "pod", "grower", "-n", ns)
        wait_for(lambda: state() == "grown", timeout=30, what="offline expansion")
    after = os.statvfs(c.provisioner.mount_path(pv))
    assert after.f_blocks * after.f_frsize > before.f_blocks * before.f_frsize * 1.5
