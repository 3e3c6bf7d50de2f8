"""A kind cluster with the jbod chart installed, and the volume detach users repeat on their own.

Guarantees:
* `KindCluster.up()` creates the cluster from its `config`: `e2e/kind/kind-config.yaml` (one node)
  or `ZONES_CONFIG` (`kind-zones.yaml`: a control plane and three workers in zones zone-a/b/c);
  the node image given, else kind's default. It writes its kubeconfig to `kubeconfig` (never touching
  ~/.kube/config), loads the project image into the nodes pods run on and installs the chart with helm
  (`--wait`: the operator is Ready when it returns). Each step is skipped when already done, so
  `up()` on a running cluster only reloads the image and upgrades the release.
* The API server listens on 127.0.0.1 only (kind's default port mapping); nothing here talks to
  any address but that and the node containers this module created.
* `detach_volume(namespace, pod, disk)` unmounts a broker's disk inside that pod's mount namespace
  on its node (`docker exec <node> nsenter --mount umount --lazy`), exactly the commands
  docs/operations.md gives; the broker then finds its log dir gone and reports it offline.
* `nodes()` lists the nodes with their zone (label `topology.kubernetes.io/zone`) and their address
  on kind's docker network, which the host reaches directly (a NodePort is `<address>:<port>`;
  nothing is published on the host). `drain(node)` is `kubectl drain` (DaemonSets ignored,
  emptyDir data deleted) and returns once every evictable pod has left; `uncordon(node)` undoes
  it. A pod whose claim is bound to a local volume on a drained node cannot be rescheduled
  elsewhere (docs/decisions.md, "kind with zones").
* kind, kubectl and helm are the e2e toolchain's (`e2e.toolchain`, built from Go modules) when
  built, else the ones on PATH.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from e2e import toolchain
from e2e.kind.docker import Docker

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CONFIG = HERE / "kind-config.yaml"
ZONES_CONFIG = HERE / "kind-zones.yaml"
ZONE_LABEL = "topology.kubernetes.io/zone"
KIND_NETWORK = "kind"  # the docker network kind puts every node on
CHART = ROOT / "charts" / "jbod"
DEFAULT_NAME = "jbod"
OPERATOR_NAMESPACE = "jbod-system"
RELEASE = "jbod"

Log = Callable[[str], None]


class KindError(RuntimeError):
    """A kind, kubectl, helm or docker step failed; the message says which and why."""


TOOLS: dict[str, str] = {"kind": "kind", "kubectl": "kubernetes", "helm": "helm"}  # tool -> toolchain unit


def tool_path(tc: toolchain.Toolchain, name: str) -> str:
    """The toolchain's build of kind, kubectl or helm when there is one, else the one on PATH."""
    if name not in TOOLS:
        return name
    built = tc.binary(name)
    if os.access(built, os.X_OK):
        return str(built)
    found = shutil.which(name)
    if found is None:
        raise KindError(
            f"no {name}: put one on PATH or run `python -m e2e.toolchain build --only {TOOLS[name]}`"
        )
    return found


SECRET_PROPAGATION_SECONDS = 45


@dataclasses.dataclass(frozen=True)
class Node:
    """A kind node: its name, its zone (None without the label) and its address on kind's network."""

    name: str
    zone: str | None
    address: str
    control_plane: bool


def _image_parts(image: str) -> tuple[str, str]:
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag:
        return image, "latest"
    return name, tag


@dataclasses.dataclass
class KindCluster:
    docker: Docker
    tc: toolchain.Toolchain
    name: str = DEFAULT_NAME
    log: Log = print
    config: Path = CONFIG

    @property
    def kubeconfig(self) -> Path:
        return toolchain.cache_root() / "kind" / f"{self.name}.kubeconfig"

    @property
    def node(self) -> str:
        return f"{self.name}-control-plane"

    def env(self) -> dict[str, str]:
        home = toolchain.cache_root() / "kind" / "helm"
        return self.docker.env(
            {
                "KUBECONFIG": str(self.kubeconfig),
                "PATH": f"{self.tc.bin_dir}:{os.environ.get('PATH', '')}",
                "HELM_CACHE_HOME": str(home / "cache"),
                "HELM_CONFIG_HOME": str(home / "config"),
                "HELM_DATA_HOME": str(home / "data"),
            }
        )

    def _run(
        self, binary: str, *args: str, input: str | None = None, check: bool = True, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [tool_path(self.tc, binary), *args],
            env=self.env(),
            cwd=ROOT,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip()[-4000:]
            raise KindError(f"{binary} {' '.join(args[:4])} failed (exit {proc.returncode}): {detail}")
        return proc

    def kind(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return self._run("kind", *args, timeout=timeout)

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return self._run("kubectl", *args, input=input, check=check, timeout=timeout)

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def apply(self, manifest: Mapping[str, Any] | list[Mapping[str, Any]] | str) -> str:
        if isinstance(manifest, str):
            text = manifest
        else:
            items = list(manifest) if isinstance(manifest, list) else [manifest]
            text = json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
        return self.kubectl("apply", "-f", "-", input=text).stdout

    # -- lifecycle -------------------------------------------------------------------------------
    def exists(self) -> bool:
        clusters = self._run("kind", "get", "clusters", check=False).stdout.split()
        return self.name in clusters

    # The commands `up()` runs, as the README shows them (program name first, paths relative to
    # the repository root); tests/e2e/test_toolchain.py keeps the README and these in step.
    def create_command(self, node_image: str | None = None) -> list[str]:
        cmd = [
            "kind",
            "create",
            "cluster",
            "--name",
            self.name,
            "--config",
            str(self.config.relative_to(ROOT)),
        ]
        if node_image:
            cmd += ["--image", node_image]
        return [*cmd, "--kubeconfig", str(self.kubeconfig), "--wait", "300s"]

    def load_command(self, image: str) -> list[str]:
        return ["kind", "load", "docker-image", image, "--name", self.name]

    def install_command(self, image: str) -> list[str]:
        repository, tag = _image_parts(image)
        return [
            "helm",
            "upgrade",
            "--install",
            RELEASE,
            str(CHART.relative_to(ROOT)),
            "-n",
            OPERATOR_NAMESPACE,
            "--create-namespace",
            "--set",
            f"image.repository={repository}",
            "--set",
            f"image.tag={tag}",
            # The node's kubelet syncs pods every 10 s (kind-config.yaml): a Secret reaches every
            # pod well within 45 s, so a certificate rotation need not wait kubelet's default 3 min.
            "--set",
            f"operator.secretPropagationSeconds={SECRET_PROPAGATION_SECONDS}",
            "--wait",
            "--timeout",
            "5m",
        ]

    def create(self, node_image: str | None = None) -> None:
        if self.exists():
            self.log(f"Found kind cluster {self.name}")
            self.kind("export", "kubeconfig", "--name", self.name, "--kubeconfig", str(self.kubeconfig))
            return
        self.kubeconfig.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        self._run(*self.create_command(node_image), timeout=900)
        self.log(f"Created kind cluster {self.name} in {time.monotonic() - started:.0f} s")

    def load(self, image: str) -> None:
        """Load `image` into the nodes pods run on (a tainted control plane with workers runs none)."""
        started = time.monotonic()
        nodes = self.kind("get", "nodes", "--name", self.name).stdout.split()
        workers = [n for n in nodes if n != self.node]
        self._run(*self.load_command(image), *(["--nodes", ",".join(workers)] if workers else []))
        self.log(f"Loaded image {image} into kind cluster {self.name} in {time.monotonic() - started:.0f} s")

    def install_chart(self, image: str) -> None:
        started = time.monotonic()
        self._run(*self.install_command(image))
        self.log(f"Installed chart {RELEASE} in {time.monotonic() - started:.0f} s")

    def up(self, image: str, node_image: str | None = None) -> None:
        self.create(node_image)
        self.load(image)
        self.install_chart(image)

    def ensure_kubeconfig(self) -> None:
        """Write this cluster's kubeconfig when a cluster made by `kind create` by hand has none here."""
        if self.kubeconfig.exists():
            return
        if not self.exists():
            raise KindError(f"no kind cluster {self.name}: create it first (make kind-up)")
        self.kubeconfig.parent.mkdir(parents=True, exist_ok=True)
        self.kind("export", "kubeconfig", "--name", self.name, "--kubeconfig", str(self.kubeconfig))

    def delete(self) -> None:
        if self.exists():
            self.kind("delete", "cluster", "--name", self.name)
        self.kubeconfig.unlink(missing_ok=True)

    # -- nodes -----------------------------------------------------------------------------------
    def node_address(self, node: str) -> str:
        """The node container's IPv4 address on kind's docker network (reachable from the host)."""
        template = f'{{{{(index .NetworkSettings.Networks "{KIND_NETWORK}").IPAddress}}}}'
        address = self.docker.run("inspect", "--format", template, node).stdout.strip()
        if not address:
            raise KindError(f"node {node} has no address on docker network {KIND_NETWORK}")
        return address

    def nodes(self) -> list[Node]:
        """Every node of the cluster, by name."""
        out = []
        for item in self.get("nodes")["items"]:
            labels = item["metadata"].get("labels", {})
            name = item["metadata"]["name"]
            out.append(
                Node(
                    name=name,
                    zone=labels.get(ZONE_LABEL),
                    address=self.node_address(name),
                    control_plane="node-role.kubernetes.io/control-plane" in labels,
                )
            )
        return sorted(out, key=lambda n: n.name)

    def workers(self) -> list[Node]:
        """The nodes pods run on: every node but the control plane's, or it alone in a one-node cluster."""
        nodes = self.nodes()
        return [n for n in nodes if not n.control_plane] or nodes

    def drain(self, node: str, timeout: float = 300) -> None:
        """`kubectl drain`: cordon `node` and evict its pods (PodDisruptionBudgets respected)."""
        started = time.monotonic()
        self.kubectl(
            "drain",
            node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            f"--timeout={int(timeout)}s",
            timeout=timeout + 30,
        )
        self.log(f"Drained node {node} in {time.monotonic() - started:.0f} s")

    def uncordon(self, node: str) -> None:
        self.kubectl("uncordon", node)
        self.log(f"Uncordoned node {node}")

    # -- failures --------------------------------------------------------------------------------
    def container_pid(self, namespace: str, pod: str, container: str | None = None) -> tuple[str, int]:
        """(node, host-side pid of the pod's container on that node)."""
        obj = self.get("pod", pod, "-n", namespace)
        node = obj["spec"]["nodeName"]
        statuses = obj.get("status", {}).get("containerStatuses") or []
        status = next((s for s in statuses if container is None or s["name"] == container), None)
        if status is None or not status.get("containerID"):
            raise KindError(f"pod {namespace}/{pod} has no running container {container or ''}".rstrip())
        container_id = status["containerID"].split("://", 1)[-1]
        proc = self.docker.run(
            "exec",
            node,
            "crictl",
            "inspect",
            "--output",
            "go-template",
            "--template",
            "{{.info.pid}}",
            container_id,
        )
        return node, int(proc.stdout.strip())

    def kill_container(self, namespace: str, pod: str, container: str | None = None) -> None:
        """`kill -9` of the container's main process, from its node (a crash, not an eviction)."""
        node, pid = self.container_pid(namespace, pod, container)
        self.docker.run("exec", node, "kill", "-9", str(pid))
        self.log(f"Killed (SIGKILL) pod {namespace}/{pod} (node {node}, pid {pid})")

    def detach_volume(self, namespace: str, pod: str, disk: str) -> str:
        """Unmount disk `disk` (its mount point /var/lib/jbod/disks/<disk>) inside `pod`; return the path."""
        from jbod_operator import names

        path = names.disk_mount(disk)
        node, pid = self.container_pid(namespace, pod)
        self.docker.run(
            "exec", node, "nsenter", "--target", str(pid), "--mount", "--pid", "umount", "--lazy", path
        )
        self.log(f"Unmounted {path} in pod {namespace}/{pod} (node {node}, pid {pid})")
        return path
