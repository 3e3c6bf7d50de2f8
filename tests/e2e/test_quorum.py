"""A controller quorum on Kubernetes (issue 15, §3.8): kind, the project's image, etcd run by the operator.

A `JbodCluster` with `spec.controller.replicas: 3` gets an etcd StatefulSet of 3 members and 3
controller pods (node ids from their pod names). While a producer pod writes with acks=-1:
1. `kill -9` of the active controller's process (from its node): another controller takes over
   (or the killed pod's restarted process, if the kubelet restarts it before its lease runs out);
2. `kill -9` of one etcd member of three;
3. `kill -9` of the new active controller.
Each time the producer keeps being acknowledged, no broker is fenced at any sample, and at the end
a consumer pod reads the topic back: the History check finds no acknowledged record lost.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from e2e.kind.cluster import KindCluster
from e2e.wait import wait_for
from jbod_client.controller import ControllerClient
from jbod_client.history import Report
from jbod_operator import names
from tests.e2e.conftest import SMALL, STORAGE_CLASS, ControllerTunnel, jbod_cluster
from tests.e2e.test_operator import Env, InPodWorkload, _history, _pod_ready

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(1800)]

NS = "jbod-ha"
NAME = "ha"


def quorum_spec() -> dict[str, Any]:
    return jbod_cluster(
        NAME,
        NS,
        disks=1,
        controller={
            "replicas": 3,
            "etcd": {"storage": {"size": "64Mi", "storageClass": STORAGE_CLASS}, "resources": SMALL},
        },
        config={
            "heartbeatIntervalMs": 500,
            "sessionTimeoutMs": 9000,
            "minInsyncReplicas": 2,
            "defaultReplicationFactor": 3,
            "replicaLagTimeMaxMs": 5000,
        },
        diskFailurePolicy="Automatic",
    )


class QuorumEnv(Env):
    def __init__(self, cluster: KindCluster) -> None:
        super().__init__(cluster, NS, NAME)
        self.controller_url = names.controller_urls(NAME, NS, 3)
        self.fenced_seen: list[str] = []

    def cluster_view(self) -> dict[str, Any] | None:
        """`GET /v1/cluster` from any controller (reads are served by standbys too)."""
        for _ in range(2):
            try:
                response = httpx.get(
                    self.tunnel.url + "/v1/cluster",
                    headers={"Authorization": f"Bearer {self.token}"},
                    timeout=5,
                )
                if response.status_code == 200:
                    result: dict[str, Any] = response.json()
                    return result
            except httpx.HTTPError:
                pass
            self.tunnel.restart()
        return None

    def restarts(self, pod: str) -> int:
        statuses = (self.pod(pod) or {}).get("status", {}).get("containerStatuses") or []
        return sum(int(status.get("restartCount", 0)) for status in statuses)

    def active_pod(self, *, killed: tuple[str, int] | None = None) -> str:
        """The Ready pod of the active controller; with `killed` (a pod and its restart count when
        it was killed), one that took over since: another pod, or the killed pod's new process.

        A killed controller that the kubelet restarts before the others see its lease run out may
        win again: its new process deletes its dead predecessor's leader key (same node id) and
        campaigns at once (docs/decisions.md). Both are a new active controller."""

        def found() -> str | None:
            view = self.cluster_view()
            active = (view or {}).get("activeController")
            if not active:
                return None
            pod = f"{NAME}-controller-{active['nodeId'] - 1}"
            if not _pod_ready(self.pod(pod)):
                return None
            if killed is not None and pod == killed[0] and self.restarts(pod) <= killed[1]:
                return None
            return pod

        def described() -> str:
            return (
                f"an active controller that took over from {killed}; last view "
                f"{self.cluster_view()}; controller logs:\n{self.controller_logs()}"
            )

        pod: str = wait_for(
            found, timeout=120, what=described if killed else "an active controller", interval=0.5
        )
        return pod

    def kill_active(self, pod: str) -> tuple[str, int]:
        """`kill -9` of the controller in `pod`; returns what `active_pod(killed=...)` takes."""
        restarts = self.restarts(pod)
        self.cluster.kill_container(NS, pod)
        return pod, restarts

    def controller_logs(self) -> str:
        parts = []
        for n in range(3):
            pod = f"{NAME}-controller-{n}"
            for previous in (True, False):
                args = ["logs", pod, "-n", NS, "--tail=40"] + (["--previous"] if previous else [])
                proc = self.cluster.kubectl(*args, check=False)
                parts.append(f"--- {pod}{' (previous)' if previous else ''}:\n{proc.stdout}{proc.stderr}")
        return "\n".join(parts)

    def admin_on(self, pod: str) -> tuple[ControllerTunnel, ControllerClient]:
        tunnel = ControllerTunnel(self.cluster, NS, pod, 9093, kind="pod")
        return tunnel, ControllerClient(tunnel.url, token=self.token, timeout=10)

    def sample_fencing(self) -> None:
        view = self.cluster_view()
        if view is not None and view.get("fencedBrokers"):
            self.fenced_seen.append(f"{time.strftime('%X')}: {view}")


def _took_over(active: str, killed: str) -> str:
    who = f"{active} (its restarted process)" if active == killed else active
    return f"{who} active (as seen by the test)"


@pytest.fixture(scope="module")
def ha(kind_cluster: KindCluster) -> Iterator[QuorumEnv]:
    kind_cluster.kubectl("create", "namespace", NS)
    running = QuorumEnv(kind_cluster)
    try:
        running.apply(quorum_spec())
        yield running
    finally:
        running.tunnel.close()
        print(running.operator_log())
        kind_cluster.kubectl("delete", "namespace", NS, "--wait=false", check=False)


def test_quorum_survives_kill_9_of_controllers_and_of_an_etcd_member(ha: QuorumEnv) -> None:
    wait_for(
        lambda: all(_pod_ready(ha.pod(f"{NAME}-etcd-{n}")) for n in range(3)),
        timeout=300,
        what=lambda: f"3 Ready etcd members; operator log:\n{ha.operator_log()}",
    )
    # The etcd users get: kubeadm's image (v3.6.8), not the project image's etcd 3.5.1.
    etcd_pod = ha.pod(f"{NAME}-etcd-0") or {}
    assert etcd_pod["spec"]["containers"][0]["image"] == names.ETCD_IMAGE
    version = ha.cluster.kubectl("exec", "-n", NS, f"{NAME}-etcd-0", "--", "etcd", "--version").stdout
    assert "etcd Version: 3.6.8" in version, version
    wait_for(
        lambda: all(_pod_ready(ha.pod(f"{NAME}-controller-{n}")) for n in range(3)),
        timeout=300,
        what="3 Ready controllers",
    )
    wait_for(
        lambda: all(_pod_ready(ha.broker_pod(n)) for n in range(3)),
        timeout=420,
        what=lambda: f"3 Ready brokers; operator log:\n{ha.operator_log()}",
    )
    view = ha.cluster_view()
    assert view is not None and len(view["controllers"]) == 3, view
    first = ha.active_pod()
    tunnel, admin = ha.admin_on(first)
    try:
        created = admin.create_topic("orders", partitions=6)
        assert created["errorCode"] == 0, created
    finally:
        admin.close()
        tunnel.close()

    producer = InPodWorkload(ha, "producer", "orders", "produce", rate=100)
    producer.wait_acked(300, timeout=240, what="before any failure")

    def keep_going(what: str) -> None:
        acked = producer.acked()

        def more() -> int | None:
            ha.sample_fencing()
            count = producer.acked()
            return count if count >= acked + 300 else None

        wait_for(more, timeout=240, what=f"300 more acknowledged records {what}", interval=2)

    killed_at = time.monotonic()
    second = ha.active_pod(killed=ha.kill_active(first))
    print(f"{_took_over(second, first)} {time.monotonic() - killed_at:.1f} s after kill -9 of {first}")
    keep_going("after kill -9 of the active controller")

    ha.cluster.kill_container(NS, f"{NAME}-etcd-0")
    keep_going("after kill -9 of one etcd member")

    killed_at = time.monotonic()
    third = ha.active_pod(killed=ha.kill_active(second))
    print(f"{_took_over(third, second)} {time.monotonic() - killed_at:.1f} s after kill -9 of {second}")
    keep_going("after kill -9 of the second active controller")

    history = _history(producer.finish(stop=True))
    consumer = InPodWorkload(ha, "consumer", "orders", "consume")
    consumed = [
        ("orders", e["p"], e["o"], e["v"].encode("latin-1") if e["v"] is not None else None)
        for e in consumer.finish(stop=True, timeout=300)
        if e["e"] == "rec"
    ]
    report: Report = history.check(consumed)
    print(report.summary())
    assert report.ok, report.problems()[:20]
    assert ha.fenced_seen == [], ha.fenced_seen[:5]
    final = ha.cluster_view()
    assert final is not None and final["fencedBrokers"] == 0, final
