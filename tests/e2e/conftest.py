"""The kind cluster of the kind tier: built offline, created once per session, deleted at the end.

* `kind_cluster` (session): a `KindCluster` named `jbod-e2e` of `e2e/kind/kind-zones.yaml` (a
  control plane and three workers in zones zone-a/b/c) with the project image loaded and the
  chart installed (`python -m e2e.kind up --offline`, the users' code path), plus the StorageClass
  `jbod-e2e` (kind's local-path provisioner, expandable); deleted when the session ends, so the
  rest of the suite does not share the machine with it. Needs root (skipped without); with root
  but no usable Docker engine the tier is skipped, or fails under `JBOD_E2E_REQUIRED=1` (CI).
  `JBOD_KIND_KEEP=1` keeps the cluster afterwards for inspection, and `JBOD_KIND_REUSE=1` runs on
  a kept one as it is (while changing tests only: the images loaded in it stay);
  `JBOD_KIND_NAME` names it otherwise (a second kind tier beside a running one).
* The operator's container never restarts in a session (it crashed, or stopped answering its
  liveness probe): the session fails at its end, naming why it last restarted and how the log of
  the container before ended (`operator_restarts`).
* `ControllerTunnel`: `kubectl port-forward` to a Service on 127.0.0.1, restarted when it dies
  (the pod behind it was replaced).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e import toolchain
from e2e.kind import images
from e2e.kind.cluster import OPERATOR_NAMESPACE, ZONES_CONFIG, KindCluster, tool_path
from e2e.kind.docker import DockerUnavailableError, engine

NAME = os.environ.get("JBOD_KIND_NAME", "jbod-e2e")  # another name: a second kind tier beside a running one
STORAGE_CLASS = "jbod-e2e"
SMALL = {"requests": {"cpu": "50m", "memory": "128Mi"}}  # what a pod of the tier asks for


def tier_disk(name: str) -> dict[str, str]:
    """A broker disk of the tier: 96 MiB of the tier's storage class."""
    return {"name": name, "size": "96Mi", "storageClass": STORAGE_CLASS}


def jbod_cluster(
    name: str,
    namespace: str,
    *,
    disks: int,
    config: dict[str, Any],
    controller: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A 3-broker JbodCluster of the project image, small on the tier's storage: `disks` disks
    per broker, the broker `config` given, `controller` keys added to the controller's, and any
    other spec keys as given."""
    return {
        "apiVersion": "jbod.dev/v1alpha1",
        "kind": "JbodCluster",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "brokers": 3,
            "image": images.PROJECT_IMAGE,
            "disks": [tier_disk(f"d{i}") for i in range(disks)],
            "metadataDisk": {"size": "64Mi", "storageClass": STORAGE_CLASS},
            "controller": {
                "storage": {"size": "64Mi", "storageClass": STORAGE_CLASS},
                "resources": SMALL,
                **(controller or {}),
            },
            "resources": SMALL,
            "config": config,
            **spec,
        },
    }


def _unavailable(reason: str) -> None:
    if os.environ.get("JBOD_E2E_REQUIRED"):
        pytest.fail(f"kind tier required (JBOD_E2E_REQUIRED=1) but {reason}")
    pytest.skip(reason)


def operator_restarts(cluster: KindCluster) -> tuple[int, str]:
    """How many times the operator's containers restarted, with a description: each pod's count,
    last state and current state, and the end of the log of the container before a restart (an
    operator restart resets its counters and loses its views)."""
    pods = cluster.get("pod", "-n", OPERATOR_NAMESPACE, "-l", "app.kubernetes.io/component=operator")["items"]
    total, lines = 0, []
    for pod in pods:
        name = pod["metadata"]["name"]
        for container in pod.get("status", {}).get("containerStatuses") or []:
            restarts = int(container.get("restartCount", 0))
            total += restarts
            lines.append(
                f"operator pod {name}: {restarts} restarts, last state {container.get('lastState')}, "
                f"now {container.get('state')}"
            )
            if restarts:
                previous = cluster.kubectl(
                    "logs", "-n", OPERATOR_NAMESPACE, name, "--previous", "--tail=60", check=False
                )
                lines.append(f"its previous container's log ends:\n{previous.stdout[-4000:]}")
    return total, "\n".join(lines)


@pytest.fixture(scope="session")
def kind_cluster() -> Iterator[KindCluster]:
    if os.geteuid() != 0:
        pytest.skip("the kind tier needs root (its own dockerd, privileged node containers)")
    tc = toolchain.Toolchain.default()
    if not tc.is_built():
        if not os.environ.get("JBOD_E2E_REQUIRED"):
            pytest.skip(f"e2e toolchain not built (missing {', '.join(tc.missing())})")
        toolchain.build(tc)
    try:
        docker = engine()
    except DockerUnavailableError as exc:
        _unavailable(str(exc))
    builder = images.Builder(docker, tc)
    builder.node_image()
    builder.project_image()
    cluster = KindCluster(docker, tc, name=NAME, config=ZONES_CONFIG)
    reuse = bool(os.environ.get("JBOD_KIND_REUSE")) and cluster.exists()
    if not reuse:
        cluster.delete()  # a cluster left by a killed run
    try:
        if reuse:
            cluster.ensure_kubeconfig()
        else:
            cluster.up(images.PROJECT_IMAGE, images.NODE_IMAGE)
        cluster.apply(
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": STORAGE_CLASS},
                "provisioner": "rancher.io/local-path",
                "volumeBindingMode": "WaitForFirstConsumer",
                "reclaimPolicy": "Delete",
                "allowVolumeExpansion": True,
            }
        )
        yield cluster
        restarts, described = operator_restarts(cluster)
        assert restarts == 0, f"the operator restarted during the kind tier:\n{described}"
    finally:
        if not os.environ.get("JBOD_KIND_KEEP"):
            cluster.delete()


class ControllerTunnel:
    """`kubectl port-forward svc/<service> :<port>` on 127.0.0.1; `url` restarts it when it died."""

    def __init__(
        self, cluster: KindCluster, namespace: str, service: str, port: int, *, kind: str = "svc"
    ) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.service = service
        self.kind = kind  # "svc", or "pod" for one pod (a quorum's active controller)
        self.port = port
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Path | None = None
        self._url = ""

    def _start(self) -> None:
        self.close()
        fd, name = tempfile.mkstemp(prefix=f"port-forward-{self.service}-", suffix=".log")
        os.close(fd)
        log = self._log = Path(name)
        proc = subprocess.Popen(
            [
                tool_path(self.cluster.tc, "kubectl"),
                "port-forward",
                "--address",
                "127.0.0.1",
                "-n",
                self.namespace,
                f"{self.kind}/{self.service}",
                f":{self.port}",
            ],
            env=self.cluster.env(),
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        text = ""
        while time.monotonic() < deadline and proc.poll() is None:
            text = log.read_text()
            match = re.search(r"Forwarding from 127\.0\.0\.1:(\d+)", text)
            if match:
                self._proc, self._url = proc, f"http://127.0.0.1:{match.group(1)}"
                return
            time.sleep(0.1)
        proc.kill()
        raise AssertionError(f"kubectl port-forward svc/{self.service} did not start: {text.strip()[-500:]}")

    @property
    def url(self) -> str:
        if self._proc is None or self._proc.poll() is not None:
            self._start()
        return self._url

    def restart(self) -> None:
        self._start()

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        self._proc = None
        if self._log is not None:
            self._log.unlink(missing_ok=True)
            self._log = None
