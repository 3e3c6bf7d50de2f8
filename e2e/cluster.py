"""A real Kubernetes control plane on 127.0.0.1 (kwokctl, binary runtime), plus volumes and a kubelet.

`Cluster` guarantees, between `start()` and `stop()` (or inside `with Cluster() as c:`):
* etcd, kube-apiserver, kube-controller-manager, kube-scheduler and the kwok controller run as
  local processes from the cached toolchain only (every binary path is given to kwokctl; nothing is
  downloaded), all bound to 127.0.0.1; the apiserver runs with `--endpoint-reconciler-type=none`
  and admission + RBAC on (kwokctl's defaults);
* kwok manages nodes only: the cluster's Stage set is node-initialize + node-heartbeat-with-lease,
  so no pod is made Running/Ready/deleted by kwok — `e2e.kubelet.LocalKubelet` owns pods;
* `nodes` fake nodes `node-0..N-1` (label `type=kwok`, annotation `kwok.x-k8s.io/node: fake`) are
  Ready before `start()` returns, as are the `default` ServiceAccount of `default`, StorageClass
  `jbod-e2e` (provisioner `e2e.jbod.dev/local`, Immediate, expandable), the volume provisioner and
  the local kubelet;
* the cluster name is unique per instance; everything lives in `workdir` (default `$TMPDIR/<name>`;
  kwokctl's own files under
  `workdir/kwok`); `stop()` stops pods, volumes and the control plane (`kwokctl delete cluster`) and
  removes `workdir` unless `keep_workdir`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client as kclient

from e2e import kube as k
from e2e import toolchain
from e2e.kubelet import LocalKubelet
from e2e.provisioner import STORAGE_CLASS, LocalVolumeProvisioner, is_mount_point_anywhere

log = logging.getLogger("e2e.cluster")

T = TypeVar("T")

_STAGES = Path(__file__).with_name("kwok-node-stages.yaml")
OWNER_FILE = "owner.pid"


class ClusterError(RuntimeError):
    """The control plane could not be started or a harness command failed."""


def wait_for(predicate: Callable[[], T | None], *, timeout: float, what: str, interval: float = 0.2) -> T:
    """Poll `predicate` until it returns something truthy (returned); raise TimeoutError naming `what`."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # the predicate may race with object creation
            last_exc = exc
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"timed out after {timeout:.0f}s waiting for {what}" + (f" ({last_exc})" if last_exc else "")
            )
        time.sleep(interval)


def _quote(s: str) -> str:
    return json.dumps(s)


class Cluster:
    """See the module docstring. Attributes after `start()`: `kubeconfig`, `kube` (raw-dict API),
    `api_client` (the official client), `provisioner`, `kubelet`, `endpoints_file`, `node_names`."""

    def __init__(
        self,
        *,
        name: str | None = None,
        tools: toolchain.Toolchain | None = None,
        workdir: Path | None = None,
        nodes: int = 3,
        extra_args: Mapping[str, Iterable[str]] | None = None,
        kubelet_options: Mapping[str, Any] | None = None,
        keep_workdir: bool = False,
        start_timeout: float = 180.0,
    ) -> None:
        self.name = name or f"jbod-e2e-{uuid.uuid4().hex[:8]}"
        self.tools = tools or toolchain.Toolchain.default()
        self._own_workdir = workdir is None
        # created by start(); the name is unique, so is the default path
        self.workdir = workdir or Path(tempfile.gettempdir()) / self.name
        self.node_names = [f"node-{i}" for i in range(nodes)]
        self.extra_args = {c: list(v) for c, v in (extra_args or {}).items()}
        self.kubelet_options = dict(kubelet_options or {})
        self.keep_workdir = keep_workdir
        self.start_timeout = start_timeout
        self.kubeconfig = self.workdir / "kubeconfig"
        self.endpoints_file = self.workdir / "endpoints.json"
        self.kwok_workdir = self.workdir / "kwok"
        self.kube: k.Kube | None = None
        self.provisioner: LocalVolumeProvisioner | None = None
        self.kubelet: LocalKubelet | None = None
        self._created = False

    # -- context manager -------------------------------------------------------------------------

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- lifecycle -------------------------------------------------------------------------------

    def _kwokctl_env(self) -> dict[str, str]:
        env = {k2: v for k2, v in os.environ.items() if not k2.startswith("KWOK_")}
        env["KWOK_WORKDIR"] = str(self.kwok_workdir)
        env["KUBECONFIG"] = str(self.kubeconfig)
        return env

    def _config_yaml(self) -> str:
        tc = self.tools
        b = tc.binary
        options = {
            "runtime": "binary",
            "bindAddress": "127.0.0.1",
            "kubeVersion": tc.k8s_version,
            "kwokVersion": toolchain.KWOK_VERSION,
            "etcdVersion": toolchain.ETCD_VERSION.lstrip("v"),
            "cacheDir": str(self.kwok_workdir / "cache"),
            "kubeApiserverBinary": str(b("kube-apiserver")),
            "kubeControllerManagerBinary": str(b("kube-controller-manager")),
            "kubeSchedulerBinary": str(b("kube-scheduler")),
            "kubectlBinary": str(b("kubectl")),
            "kwokControllerBinary": str(b("kwok")),
            "etcdBinary": str(b("etcd")),
            "quietPull": True,
        }
        patches: dict[str, list[tuple[str, str]]] = {
            "kube-apiserver": [("endpoint-reconciler-type", "none"), ("advertise-address", "127.0.0.1")],
        }
        for component, args in self.extra_args.items():
            for arg in args:
                key, _, value = arg.lstrip("-").partition("=")
                patches.setdefault(component, []).append((key, value))
        lines = ["apiVersion: config.kwok.x-k8s.io/v1alpha1", "kind: KwokctlConfiguration", "options:"]
        lines += [f"  {key}: {json.dumps(value)}" for key, value in options.items()]
        lines.append("componentsPatches:")
        for component, kvs in patches.items():
            lines += [f"- name: {component}", "  extraArgs:"]
            lines += [f"  - key: {_quote(key)}\n    value: {_quote(value)}" for key, value in kvs]
        return "\n".join(lines) + "\n---\n" + _STAGES.read_text()

    def _run_kwokctl(self, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.tools.kwokctl), "--name", self.name, *args]
        log.info("Running %s", " ".join(cmd))
        return subprocess.run(
            cmd, env=self._kwokctl_env(), capture_output=True, text=True, timeout=timeout, check=False
        )

    def start(self) -> Cluster:
        """Create the cluster and start the provisioner and kubelet; on failure, clean up and raise."""
        self.tools.require()
        self.workdir.mkdir(parents=True, exist_ok=self._own_workdir is False)
        (self.workdir / OWNER_FILE).write_text(f"{os.getpid()} {self.name}")
        config_path = self.workdir / "kwokctl.yaml"
        config_path.write_text(self._config_yaml())
        try:
            self._created = True
            proc = self._run_kwokctl(
                "create",
                "cluster",
                "--config",
                str(config_path),
                "--kubeconfig",
                str(self.kubeconfig),
                "--wait",
                f"{int(self.start_timeout)}s",
                timeout=self.start_timeout + 60,
            )
            if proc.returncode != 0:
                raise ClusterError(
                    f"kwokctl create cluster failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
                )
            self.kube = k.Kube(self.kubeconfig)
            self._create_nodes()
            self.provisioner = LocalVolumeProvisioner(self.kube, workdir=self.workdir).start()
            self.provisioner.ensure_storage_class(STORAGE_CLASS)
            self.kubelet = LocalKubelet(
                self.kube,
                workdir=self.workdir,
                provisioner=self.provisioner,
                endpoints_file=self.endpoints_file,
                nodes=self.node_names,
                **self.kubelet_options,
            ).start()
            wait_for(
                lambda: (
                    self.kube
                    and self.kube.get_or_none(
                        self.kube.core.read_namespaced_service_account, "default", "default"
                    )
                ),
                timeout=60,
                what="ServiceAccount default/default",
            )
        except BaseException:
            self.stop()
            raise
        return self

    def _create_nodes(self) -> None:
        assert self.kube is not None
        for node in self.node_names:
            body = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": node,
                    "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                    "labels": {
                        "type": "kwok",
                        "kubernetes.io/hostname": node,
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        "kubernetes.io/role": "agent",
                    },
                },
                "status": {
                    "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                    "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                },
            }
            self.kube.call_ignoring((409,), self.kube.core.create_node, body)

        def all_ready() -> bool:
            assert self.kube is not None
            for node in self.node_names:
                obj = self.kube.call(self.kube.core.read_node, node)
                conds = {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions") or []}
                if conds.get("Ready") != "True":
                    return False
            return True

        wait_for(all_ready, timeout=60, what="kwok nodes Ready")

    def stop(self) -> None:
        """Stop the kubelet's pods, the volumes and the control plane; remove the workdir (idempotent)."""
        if self.kubelet is not None:
            with contextlib.suppress(Exception):
                self.kubelet.stop()
            self.kubelet = None
        if self.provisioner is not None:
            with contextlib.suppress(Exception):
                self.provisioner.stop()
            self.provisioner = None
        if self.kube is not None:
            with contextlib.suppress(Exception):
                self.kube.close()
            self.kube = None
        if self._created:
            proc = self._run_kwokctl("delete", "cluster", "--kubeconfig", str(self.kubeconfig), timeout=120)
            if proc.returncode != 0:
                log.warning("kwokctl delete cluster failed: %s", proc.stderr.strip())
            self._created = False
        if self._own_workdir and not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # -- helpers for tests -----------------------------------------------------------------------

    def _kube(self) -> k.Kube:
        if self.kube is None:
            raise ClusterError("cluster not started")
        return self.kube

    @property
    def api_client(self) -> kclient.ApiClient:
        """The official client's ApiClient for this cluster (for typed `CoreV1Api(...)` etc.)."""
        assert self.kube is not None, "cluster not started"
        return self.kube.api_client

    @property
    def core_v1(self) -> kclient.CoreV1Api:
        return kclient.CoreV1Api(self.api_client)

    @property
    def apps_v1(self) -> kclient.AppsV1Api:
        return kclient.AppsV1Api(self.api_client)

    def env(self) -> dict[str, str]:
        """Variables a locally run operator or CLI needs: KUBECONFIG and JBOD_ENDPOINTS_FILE."""
        return {"KUBECONFIG": str(self.kubeconfig), "JBOD_ENDPOINTS_FILE": str(self.endpoints_file)}

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run the cached kubectl against this cluster; raise ClusterError on failure if `check`."""
        return self._tool(self.tools.kubectl, args, input=input, check=check, timeout=timeout)

    def helm(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run the cached helm against this cluster (its caches under the workdir)."""
        return self._tool(self.tools.helm, args, input=None, check=check, timeout=timeout)

    def _tool(
        self, binary: Path, args: Iterable[str], *, input: str | None, check: bool, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, **self.env()}
        helm_home = self.workdir / "helm"
        env.update(
            HELM_CACHE_HOME=str(helm_home / "cache"),
            HELM_CONFIG_HOME=str(helm_home / "config"),
            HELM_DATA_HOME=str(helm_home / "data"),
        )
        proc = subprocess.run(
            [str(binary), *args],
            input=input,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise ClusterError(
                f"{binary.name} {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}"
            )
        return proc

    def apply(self, manifest: Mapping[str, Any] | list[Mapping[str, Any]] | str) -> str:
        """`kubectl apply -f -` of a dict, a list of dicts or YAML/JSON text; returns kubectl's output."""
        if isinstance(manifest, str):
            text = manifest
        else:
            items = list(manifest) if isinstance(manifest, list) else [manifest]
            text = json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
        return self.kubectl("apply", "-f", "-", input=text).stdout

    def create_namespace(self, name: str) -> str:
        """Create namespace `name` and wait for its `default` ServiceAccount (pods need it)."""
        kube = self._kube()
        kube.call_ignoring((409,), kube.core.create_namespace, {"metadata": {"name": name}})
        wait_for(
            lambda: kube.get_or_none(kube.core.read_namespaced_service_account, "default", name),
            timeout=60,
            what=f"ServiceAccount {name}/default",
        )
        return name

    def pod(self, namespace: str, name: str) -> k.Obj | None:
        assert self.kube is not None
        return self.kube.get_or_none(self.kube.core.read_namespaced_pod, name, namespace)

    def wait_pod(
        self,
        namespace: str,
        name: str,
        predicate: Callable[[k.Obj], bool],
        *,
        timeout: float = 60,
        what: str = "condition",
    ) -> k.Obj:
        """Wait until pod `namespace/name` exists and `predicate(pod)` holds; return the pod."""

        def check() -> k.Obj | None:
            pod = self.pod(namespace, name)
            return pod if pod is not None and predicate(pod) else None

        return wait_for(check, timeout=timeout, what=f"pod {namespace}/{name}: {what}")


def pod_condition(pod: k.Obj, ctype: str) -> str | None:
    """The status ("True"/"False"/...) of condition `ctype` of `pod`, or None."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return str(c.get("status"))
    return None


def is_ready(pod: k.Obj) -> bool:
    return pod_condition(pod, "Ready") == "True"


def is_running(pod: k.Obj) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running"


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def cleanup_stale(root: Path | None = None, *, tools: toolchain.Toolchain | None = None) -> list[Path]:
    """Tear down e2e clusters under `root` (default: the temp dir) whose owning process has died
    (killed test runs): their pod processes, control plane, mounts and work directory. Clusters of
    live processes are left alone. Returns the work directories removed."""
    root = root or Path(tempfile.gettempdir())
    tools = tools or toolchain.Toolchain.default()
    removed = []
    for wd in sorted(root.glob("jbod-e2e-*")):
        try:
            pid_text, name = (wd / OWNER_FILE).read_text().split()
            owner = int(pid_text)
        except (OSError, ValueError):
            continue
        if _alive(owner):
            continue
        prefix = str(wd) + "/"
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            with contextlib.suppress(OSError):
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
                environ = Path(f"/proc/{entry}/environ").read_bytes().decode(errors="replace")
                if prefix in cmdline or f"JBOD_E2E_WORKDIR={wd}\0" in environ:
                    os.kill(int(entry), 9)
        if tools.kwokctl.exists():
            env = {**os.environ, "KWOK_WORKDIR": str(wd / "kwok")}
            subprocess.run([str(tools.kwokctl), "--name", name, "delete", "cluster",
                            "--kubeconfig", str(wd / "kubeconfig")],
                           env=env, capture_output=True, timeout=120, check=False)  # fmt: skip
        with open("/proc/self/mountinfo") as f:
            mounts = [line.split()[4] for line in f if line.split()[4].startswith(prefix)]
        for mount in sorted(mounts, key=len, reverse=True):
            subprocess.run(["umount", "-l", mount], capture_output=True, check=False)
        created: list[str] = []
        for record in wd.glob("pods/*/containers/*/created.json"):
            with contextlib.suppress(OSError, ValueError):
                created.extend(json.loads(record.read_text()))
        for path in sorted(set(created), key=lambda p: p.count("/"), reverse=True):
            if is_mount_point_anywhere(path):
                continue
            with contextlib.suppress(OSError):
                Path(path).rmdir() if Path(path).is_dir() else Path(path).unlink()
        shutil.rmtree(wd, ignore_errors=True)
        removed.append(wd)
        log.info("Removed stale e2e cluster %s (owner %d gone)", wd, owner)
    return removed


def main(argv: list[str] | None = None) -> int:
    """`python -m e2e.cluster up` (start one, print its env, run until Ctrl-C) or `cleanup`."""
    import argparse
    import signal

    parser = argparse.ArgumentParser(prog="python -m e2e.cluster")
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start a cluster with the local kubelet; stop it on Ctrl-C/SIGTERM")
    up.add_argument("--nodes", type=int, default=3)
    sub.add_parser("cleanup", help="remove clusters left behind by killed runs")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.cmd == "cleanup":
        for wd in cleanup_stale():
            print(f"removed {wd}")
        return 0
    cleanup_stale()
    with Cluster(nodes=args.nodes) as cluster:
        for key, value in cluster.env().items():
            print(f"export {key}={value}", flush=True)
        stop = False

        def on_signal(_sig: int, _frame: object) -> None:
            nonlocal stop
            stop = True

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        while not stop:
            signal.pause()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
