"""The operator end to end on a real Kubernetes control plane (etcd, kube-apiserver, controller-manager,
scheduler and kwok built from Go modules; `e2e/`), with every pod run as a local process by the
e2e kubelet and every volume a real loop-mounted ext4.

One cluster for the module, in test order:
1. `helm install` the chart; the operator runs with the chart's ServiceAccount token (so the
   chart's RBAC is what it gets); `kubectl apply` a `JbodCluster` of 3 brokers x 2 disks.
   Brokers turn Ready only once the controller has unfenced them: at every sample, a Ready pod
   is a broker the controller lists unfenced with no queued placement.
2. A producer/consumer pair runs while a leader's volume is detached (VolumeAttachment deleted,
   mount gone): the dir shows `Detached`/`Offline` in the `JbodBroker` status with an Event,
   leadership leaves it, and with `Automatic` policy the operator replaces the volume (new
   claim, new `directory.id`), the replicas are recreated and rejoin the ISR, the retired claim
   is deleted, and the History check finds no acknowledged record lost.
3. Removing a disk that holds replicas is refused (kept `Draining`, condition `Blocked`, Event).
4. Scaling up adds a Ready broker; scaling down is refused while it hosts a replica and
   proceeds (JbodBroker, claims and registration gone) once its topic is deleted.
5. Adding a disk rolls it out one broker at a time; growing a disk grows its claims; the
   operator's /metrics shows the log dirs by state.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from e2e.cluster import Cluster, wait_for
from jbod_client.controller import ControllerClient
from jbod_client.history import History
from jbod_operator.views import Endpoints
from tests.broker.workload import Workload, _consume

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(1500)]

ROOT = Path(__file__).resolve().parents[2]
NS = "jbod-e2e"
OPERATOR_NS = "jbod-system"
CLUSTER = "demo"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(cluster: Cluster, *args: str) -> Any:
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def cluster_spec() -> dict[str, Any]:
    return {
        "apiVersion": "jbod.dev/v1alpha1",
        "kind": "JbodCluster",
        "metadata": {"name": CLUSTER, "namespace": NS},
        "spec": {
            "brokers": 3,
            "image": "jbod:e2e",
            "disks": [
                {"name": "d0", "size": "96Mi", "storageClass": "jbod-e2e"},
                {"name": "d1", "size": "96Mi", "storageClass": "jbod-e2e"},
            ],
            "metadataDisk": {"size": "64Mi", "storageClass": "jbod-e2e"},
            "controller": {"storage": {"size": "64Mi", "storageClass": "jbod-e2e"}},
            "config": {
                "heartbeatIntervalMs": 500,
                "sessionTimeoutMs": 4000,
                "logDirFailureTimeoutMs": 10000,
                "logDirProbeIntervalMs": 250,
                "minInsyncReplicas": 2,
                "defaultReplicationFactor": 3,
                "replicaLagTimeMaxMs": 5000,
            },
            "diskFailurePolicy": "Automatic",
        },
    }


class Env:
    """The running pieces shared by the module's tests."""

    def __init__(
        self, cluster: Cluster, operator: subprocess.Popen[bytes], log_path: Path, metrics_port: int
    ) -> None:
        self.cluster = cluster
        self.metrics_port = metrics_port
        self.operator = operator
        self.log_path = log_path
        self.endpoints = Endpoints(str(cluster.endpoints_file))

    def secret(self, key: str) -> str:
        data = get(self.cluster, "secret", f"{CLUSTER}-tokens", "-n", NS)["data"]
        return base64.b64decode(data[key]).decode()

    @property
    def token(self) -> str:
        return self.secret("admin-token")

    @property
    def controller_url(self) -> str:
        return self.endpoints.resolve(f"http://{CLUSTER}-controller.{NS}.svc:9093")

    def controller(self) -> ControllerClient:
        return ControllerClient(self.controller_url, token=self.token, timeout=10)

    def brokers(self) -> dict[int, dict[str, Any]]:
        with self.controller() as client:
            return {b["brokerId"]: b for b in client.brokers()}

    def jbod_broker(self, broker_id: int) -> dict[str, Any]:
        result: dict[str, Any] = get(self.cluster, "jbodbroker", f"{CLUSTER}-broker-{broker_id}", "-n", NS)
        return result

    def log_dir(self, broker_id: int, disk: str) -> dict[str, Any]:
        for entry in self.jbod_broker(broker_id).get("status", {}).get("logDirs") or []:
            if entry["name"] == disk:
                return dict(entry)
        return {}

    def pod(self, broker_id: int) -> dict[str, Any] | None:
        return self.cluster.pod(NS, f"{CLUSTER}-broker-{broker_id}")

    def events(self, reason: str) -> list[dict[str, Any]]:
        items = get(self.cluster, "events", "-n", NS)["items"]
        return [e for e in items if e.get("reason") == reason]

    def operator_log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


def _pod_ready(pod: dict[str, Any] | None) -> bool:
    for condition in (pod or {}).get("status", {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def _sa_kubeconfig(cluster: Cluster, path: Path) -> Path:
    """A kubeconfig holding only the chart's operator ServiceAccount token (its RBAC, nothing more)."""
    [deployment] = get(
        cluster, "deployment", "-n", OPERATOR_NS, "-l", "app.kubernetes.io/component=operator"
    )["items"]
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    token = cluster.kubectl("create", "token", account, "-n", OPERATOR_NS, "--duration", "3h").stdout.strip()
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    context = admin["contexts"][0]["context"]
    server = next(c for c in admin["clusters"] if c["name"] == context["cluster"])
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": server["cluster"]}],
        "users": [{"name": "jbod-operator", "user": {"token": token}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "jbod-operator"}}],
        "current-context": "e2e",
    }
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def env(e2e_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    cluster = e2e_cluster
    work = tmp_path_factory.mktemp("operator")
    cluster.helm(
        "install",
        "jbod",
        str(ROOT / "charts" / "jbod"),
        "--namespace",
        OPERATOR_NS,
        "--create-namespace",
        "--set",
        "image.repository=jbod",
        "--set",
        "image.tag=e2e",
        "--wait=false",
    )
    # The chart's operator Deployment would be run by the e2e kubelet too; the test runs the same
    # command itself (to read its log and stop it), with the chart's ServiceAccount and RBAC.
    cluster.kubectl(
        "scale", "deployment", "-n", OPERATOR_NS, "-l", "app.kubernetes.io/component=operator", "--replicas=0"
    )
    cluster.create_namespace(NS)
    log_path = work / "operator.log"
    kubeconfig = _sa_kubeconfig(cluster, work / "kubeconfig")
    metrics_port = _free_port()
    operator = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("jbod-operator")),
            "--all-namespaces",
            "--health-address",
            f"127.0.0.1:{_free_port()}",
            "--metrics-address",
            f"127.0.0.1:{metrics_port}",
            "--endpoints-file",
            str(cluster.endpoints_file),
            "--poll-seconds",
            "1",
        ],
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )
    running = Env(cluster, operator, log_path, metrics_port)
    try:
        cluster.apply(cluster_spec())
        yield running
    finally:
        operator.terminate()
        try:
            operator.wait(20)
        except subprocess.TimeoutExpired:
            operator.kill()
        print(running.operator_log())


def test_brokers_turn_ready_only_once_unfenced(env: Env) -> None:
    violations: list[str] = []
    seen_fenced: set[int] = set()

    def all_ready() -> bool:
        try:
            registrations = env.brokers()
        except Exception:
            registrations = {}
        ready = 0
        for broker_id in range(3):
            pod = env.pod(broker_id)
            registration = registrations.get(broker_id)
            if registration is None or registration["fenced"]:
                seen_fenced.add(broker_id)
            if _pod_ready(pod):
                ready += 1
                if registration is None or registration["fenced"] or registration["unassignedReplicas"]:
                    violations.append(f"broker {broker_id} Ready while the controller shows {registration}")
        return ready == 3

    wait_for(
        all_ready, timeout=300, what=f"3 Ready brokers; operator log:\n{env.operator_log()}", interval=0.3
    )
    assert not violations, violations
    assert seen_fenced == {0, 1, 2}, "every broker was seen fenced before it turned Ready"
    cluster = get(env.cluster, "jbodcluster", CLUSTER, "-n", NS)
    wait_for(
        lambda: get(env.cluster, "jbodcluster", CLUSTER, "-n", NS)["status"].get("readyBrokers") == 3,
        timeout=60,
        what="JbodCluster status readyBrokers=3",
    )
    assert cluster["status"]["clusterId"]
    for broker_id in range(3):
        status = env.jbod_broker(broker_id)["status"]
        assert status["fenced"] is False and status["queuedPlacements"] == 0
        assert [d["state"] for d in status["logDirs"]] == ["Online", "Online"]
        assert all(d["directoryId"] and d["pvc"] and d["pv"] for d in status["logDirs"])
    gate = [
        c
        for c in env.pod(0)["status"]["conditions"]
        if c["type"] == "jbod.dev/unfenced"  # type: ignore[index]
    ]
    assert gate and gate[0]["status"] == "True"


def _leader_dir(env: Env, topic: str) -> tuple[int, str]:
    """A (broker, disk) leading at least one partition of `topic`."""
    with env.controller() as client:
        description = client.describe_topic(topic)
    for partition in description["partitions"]:
        leader = partition["leader"]
        directory = partition["directories"][partition["replicas"].index(leader)]
        for entry in env.jbod_broker(leader)["status"]["logDirs"]:
            if entry.get("directoryId") == directory:
                return leader, entry["name"]
    raise AssertionError(f"no leader dir found in {description}")


def _high_watermarks(env: Env, topic: str) -> dict[int, int]:
    registrations = env.brokers()
    out: dict[int, int] = {}
    with env.controller() as client:
        partitions = client.describe_topic(topic)["partitions"]
    for partition in partitions:
        listener = registrations[partition["leader"]]["listeners"][0]
        url = env.endpoints.resolve(f"http://{listener['host']}:{listener['port']}")
        reply = httpx.get(
            f"{url}/v1/fetch",
            params={"topic": topic, "partition": partition["partitionIndex"], "offset": 0, "maxBytes": 1},
            headers={"Authorization": f"Bearer {env.token}"},
            timeout=10,
        ).json()
        out[partition["partitionIndex"]] = int(reply["highWatermark"])
    return out


def test_detached_volume_is_replaced_without_loss(env: Env) -> None:
    import asyncio

    topic = "orders"
    with env.controller() as client:
        created = client.create_topic(topic, partitions=6)  # RF and min ISR from the cluster spec
        assert created["errorCode"] == 0, created
        assert client.describe_topic(topic)["configs"]["min.insync.replicas"] == "2"
    workload = Workload(
        controller_url=env.controller_url,
        token=env.token,
        topic=topic,
        partitions=6,
        run="e2e",
        history=History(),
        rate=300,
    ).start()
    workload.wait_acked(500, timeout=120, what="records before the detach")

    broker_id, disk = _leader_dir(env, topic)
    before = env.log_dir(broker_id, disk)
    old_claim, old_pv, old_dir = before["pvc"], before["pv"], before["directoryId"]
    env.cluster.kubelet.detach_volume(old_pv)  # type: ignore[union-attr]

    wait_for(
        lambda: env.log_dir(broker_id, disk).get("state") in ("Detached", "Offline"),
        timeout=60,
        what=f"log dir {disk} of broker {broker_id} Detached or Offline",
    )
    wait_for(
        lambda: env.events("VolumeDetached") or env.events("LogDirOffline"),
        timeout=30,
        what="a VolumeDetached or LogDirOffline event",
    )

    def leadership_moved() -> bool:
        with env.controller() as client:
            for partition in client.describe_topic(topic)["partitions"]:
                index = partition["replicas"].index(broker_id)
                if partition["leader"] == broker_id and partition["directories"][index] == old_dir:
                    return False
        return True

    wait_for(leadership_moved, timeout=60, what="leadership off the detached dir")
    workload.wait_progress(300, timeout=120, what="records acknowledged after the detach")

    def replaced() -> dict[str, Any] | None:
        entry = env.log_dir(broker_id, disk)
        ok = (
            entry.get("state") == "Online"
            and entry.get("pvc") != old_claim
            and entry.get("directoryId") not in (None, old_dir)
        )
        return entry if ok else None

    after = wait_for(
        replaced, timeout=300, what=f"a replaced, online volume for {disk}; log:\n{env.operator_log()}"
    )
    assert after["pvc"].endswith("-g1")
    assert env.events("ReplacingVolume")

    def caught_up() -> bool:
        with env.controller() as client:
            return all(len(p["isr"]) == 3 for p in client.describe_topic(topic)["partitions"])

    wait_for(caught_up, timeout=180, what="every partition back to a full ISR")
    wait_for(
        lambda: (
            get(env.cluster, "pvc", "-n", NS, "-l", f"jbod.dev/broker-id={broker_id},jbod.dev/disk={disk}")
            and all(
                c["metadata"]["name"] != old_claim
                for c in get(env.cluster, "pvc", "-n", NS, "-l", f"jbod.dev/disk={disk}")["items"]
            )
        ),
        timeout=120,
        what=f"retired claim {old_claim} deleted",
    )
    workload.wait_progress(300, timeout=120, what="records acknowledged after the replacement")
    workload.stop()

    until = _high_watermarks(env, topic)
    consumed = asyncio.run(_consume(env.controller_url, env.token, topic, until, 120))
    report = workload.history.check(consumed)
    print(workload.describe(), report.summary())
    assert report.ok, report.problems[:20]
    assert workload.acked > 1000


def test_removing_a_non_empty_disk_is_refused(env: Env) -> None:
    spec = cluster_spec()
    spec["spec"]["disks"] = spec["spec"]["disks"][:1]  # drop d1, which holds replicas of "orders"
    env.cluster.apply(spec)

    def refused() -> bool:
        conditions = get(env.cluster, "jbodcluster", CLUSTER, "-n", NS)["status"].get("conditions") or []
        return any(
            c["type"] == "Progressing" and c.get("reason") == "Blocked" and "disk d1" in c["message"]
            for c in conditions
        )

    wait_for(refused, timeout=60, what="Progressing=Blocked naming disk d1")
    assert env.events("RemovalRefused")
    for broker_id in range(3):
        disks = {d["name"]: d for d in env.jbod_broker(broker_id)["spec"]["disks"]}
        assert disks["d1"].get("removed") is True
    wait_for(lambda: env.log_dir(0, "d1").get("state") == "Draining", timeout=30, what="d1 Draining")
    env.cluster.apply(cluster_spec())  # put it back
    wait_for(lambda: not env.jbod_broker(0)["spec"]["disks"][1].get("removed"), timeout=60, what="d1 kept")


def test_scale_up_then_down_only_when_empty(env: Env) -> None:
    spec = cluster_spec()
    spec["spec"]["brokers"] = 4
    env.cluster.apply(spec)
    wait_for(lambda: _pod_ready(env.pod(3)), timeout=240, what=f"broker 3 Ready; log:\n{env.operator_log()}")
    with env.controller() as client:
        reply = client.create_topic("on-three", replica_assignment=[[3]])
        assert reply["errorCode"] == 0, reply
    env.cluster.apply(cluster_spec())  # back to 3 brokers

    def refused() -> bool:
        conditions = get(env.cluster, "jbodcluster", CLUSTER, "-n", NS)["status"].get("conditions") or []
        return any(c.get("reason") == "Blocked" and "broker 3" in c["message"] for c in conditions)

    wait_for(refused, timeout=60, what="scale-down of broker 3 refused")
    assert env.jbod_broker(3)["spec"]["brokerId"] == 3
    with env.controller() as client:
        client.delete_topic("on-three")

    def gone() -> bool:
        brokers = get(env.cluster, "jbodbrokers", "-n", NS)["items"]
        claims = get(env.cluster, "pvc", "-n", NS, "-l", "jbod.dev/broker-id=3")["items"]
        return len(brokers) == 3 and not claims and 3 not in env.brokers()

    wait_for(gone, timeout=180, what=f"broker 3 removed and unregistered; log:\n{env.operator_log()}")


def test_add_and_grow_disks(env: Env) -> None:
    """A new disk reaches every broker through a rolling restart (one broker at a time); a bigger
    size reaches the claims."""
    spec = cluster_spec()
    spec["spec"]["disks"][0]["size"] = "128Mi"
    spec["spec"]["disks"].append({"name": "d2", "size": "96Mi", "storageClass": "jbod-e2e"})
    env.cluster.apply(spec)
    max_unready = 0

    def rolled() -> bool:
        nonlocal max_unready
        unready = sum(1 for b in range(3) if not _pod_ready(env.pod(b)))
        max_unready = max(max_unready, unready)
        return all(env.log_dir(b, "d2").get("state") == "Online" for b in range(3)) and unready == 0

    wait_for(rolled, timeout=600, what=f"d2 online on every broker; log:\n{env.operator_log()}", interval=0.5)
    assert max_unready <= 1, "brokers were restarted one at a time"
    for broker_id in range(3):
        [claim] = get(env.cluster, "pvc", "-n", NS, "-l", f"jbod.dev/broker-id={broker_id},jbod.dev/disk=d0")[
            "items"
        ]
        assert claim["spec"]["resources"]["requests"]["storage"] == "128Mi"
    metrics_text = httpx.get(f"http://127.0.0.1:{env.metrics_port}/metrics", timeout=5).text
    assert (
        'jbod_operator_log_dirs{broker="0",cluster="demo",namespace="jbod-e2e",state="Online"} 3.0'
        in metrics_text
    )


def test_manual_policy_waits_for_the_annotation(env: Env) -> None:
    spec = cluster_spec()
    spec["spec"]["diskFailurePolicy"] = "Manual"
    spec["spec"]["disks"][0]["size"] = "128Mi"
    spec["spec"]["disks"].append({"name": "d2", "size": "96Mi", "storageClass": "jbod-e2e"})
    env.cluster.apply(spec)
    broker_id, disk = 2, "d2"
    before = env.log_dir(broker_id, disk)
    env.cluster.kubelet.fail_volume(before["pv"])  # type: ignore[union-attr]  # EIO on every access
    wait_for(lambda: env.log_dir(broker_id, disk).get("state") == "Offline", timeout=60, what="d2 Offline")
    wait_for(lambda: env.events("VolumeNeedsReplacement"), timeout=30, what="a VolumeNeedsReplacement event")
    time.sleep(5)  # Manual: nothing is replaced without the annotation
    assert env.log_dir(broker_id, disk)["pvc"] == before["pvc"]
    env.cluster.kubectl(
        "annotate", "jbodbroker", f"{CLUSTER}-broker-{broker_id}", "-n", NS, f"jbod.dev/replace-disks={disk}"
    )

    def replaced() -> bool:
        entry = env.log_dir(broker_id, disk)
        return entry.get("state") == "Online" and entry.get("pvc") != before["pvc"]

    wait_for(replaced, timeout=300, what=f"d2 replaced after the annotation; log:\n{env.operator_log()}")
    annotations = env.jbod_broker(broker_id)["metadata"].get("annotations") or {}
    assert "jbod.dev/replace-disks" not in annotations, "the request is consumed"
