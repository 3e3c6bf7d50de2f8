"""The local kubelet: runs the pods scheduled to the fake (kwok) nodes as local processes.

`LocalKubelet` watches pods (those with `spec.nodeName` on its nodes), Services, ConfigMaps and
Secrets, and guarantees:
* one `podworker.PodWorker` per pod UID (see that module for a pod's lifecycle, mounts, probes and
  status); a pod deleted from the API outright stops its processes at once;
* every containerPort of every scheduled pod has a stable 127.0.0.1 port (`endpoints`), and the
  endpoint map is written atomically to `endpoints_file` whenever it changes (the operator, run
  locally, reads it through env `JBOD_ENDPOINTS_FILE`); config volumes are re-rendered after any
  change of the map, a ConfigMap or a Secret;
* a `storage.k8s.io/v1` VolumeAttachment (attacher `local.e2e.jbod.dev`, `status.attached=true`)
  exists for each (PV, node) while a pod on that node uses the PV, like a CSI attacher;
* every container also gets `pod_env`: by default `KUBERNETES_SERVICE_HOST/PORT` naming the local
  apiserver (so in-cluster clients work with the projected ServiceAccount token) and
  `JBOD_ENDPOINTS_FILE`; the container's own env wins;
* no traffic to any address but 127.0.0.1: pod IPs are fake (10.244.0.0/16) and never dialled.

Test actions: `detach_volume`, `fail_volume`, `pod_process`, `logs`/`log_path`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import logging
import os
import struct
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException

from e2e import endpoints
from e2e import kube as k
from e2e.podworker import PodWorker
from e2e.provisioner import LocalVolumeProvisioner, is_mount_point_anywhere, is_mounted

log = logging.getLogger("e2e.kubelet")

EXT4_IOC_SHUTDOWN = 0x8004587D
EXT4_GOING_FLAGS_NOLOGFLUSH = 2
ATTACHER = "local.e2e.jbod.dev"  # a CSI-driver-style name (must be a DNS subdomain)


def default_extra_path() -> tuple[str, ...]:
    """The venv's bin dir (the project's console scripts) — the "image" entrypoints."""
    return (str(Path(sys.executable).parent),)


class LocalKubelet:
    """Runs pods bound to `nodes` (None = every node) as local processes (see module docstring)."""

    def __init__(
        self,
        kube: k.Kube,
        *,
        workdir: Path,
        provisioner: LocalVolumeProvisioner,
        endpoints_file: Path | None = None,
        nodes: Iterable[str] | None = None,
        entrypoints: Mapping[str, list[str]] | None = None,
        extra_path: Iterable[str] | None = None,
        backoff_initial: float = 1.0,
        backoff_max: float = 10.0,
        probe_period_cap: float | None = None,
        pod_env: Mapping[str, str] | None = None,
    ) -> None:
        self.kube = kube
        self.workdir = workdir
        self.provisioner = provisioner
        self.endpoints_file = endpoints_file or workdir / "endpoints.json"
        self.nodes = set(nodes) if nodes is not None else None
        self.entrypoints = dict(entrypoints or {})
        self.extra_path = tuple(extra_path) if extra_path is not None else default_extra_path()
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.probe_period_cap = probe_period_cap
        api = urllib.parse.urlsplit(kube.api_client.configuration.host)
        api_host, api_port = api.hostname or endpoints.LOCALHOST, str(api.port or 443)
        self.pod_env = {
            "KUBERNETES_SERVICE_HOST": api_host,
            "KUBERNETES_SERVICE_PORT": api_port,
            "KUBERNETES_SERVICE_PORT_HTTPS": api_port,
            "KUBERNETES_PORT": f"tcp://{api_host}:{api_port}",
            "JBOD_ENDPOINTS_FILE": str(self.endpoints_file),
            "JBOD_E2E_WORKDIR": str(workdir),  # lets cleanup_stale find orphaned pod processes
            **(pod_env or {}),
        }
        self.ports = endpoints.PortAllocator()
        self.generation = 0
        self._targets: list[endpoints.Target] = []
        self._map: dict[str, str] | None = None
        self._workers: dict[str, PodWorker] = {}
        self._ip_next = 2
        self._pod_ips: dict[str, str] = {}
        self._tokens: dict[tuple[str, str], tuple[float, str]] = {}
        self._node_ips: dict[str, str] = {}
        self._created_paths: list[str] = []
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        wake = lambda *_: self._wake.set()  # noqa: E731
        core = kube.core
        self.pods = k.Reflector(
            "pods", core.list_pod_for_all_namespaces, on_change=self._on_pod, field_selector="spec.nodeName!="
        )
        self.services = k.Reflector("services", core.list_service_for_all_namespaces, on_change=wake)
        self.configmaps = k.Reflector(
            "configmaps", core.list_config_map_for_all_namespaces, on_change=self._on_config
        )
        self.secrets = k.Reflector("secrets", core.list_secret_for_all_namespaces, on_change=self._on_config)
        self._thread = threading.Thread(target=self._loop, name="kubelet-sync", daemon=True)

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> LocalKubelet:
        (self.workdir / "pods").mkdir(parents=True, exist_ok=True)
        endpoints.write_map_file(self.endpoints_file, {})
        for r in (self.pods, self.services, self.configmaps, self.secrets):
            r.start()
        for r in (self.pods, self.services, self.configmaps, self.secrets):
            r.synced.wait(30)
        self._thread.start()
        return self

    def stop(self, *, grace: float = 5.0) -> None:
        """Stop every pod's processes (at most `grace` seconds each), then the watches."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        with self._lock:
            workers = list(self._workers.values())
        for w in workers:
            w.gone()
        for w in workers:
            w.join(timeout=grace + 10)
        for r in (self.pods, self.services, self.configmaps, self.secrets):
            r.stop()
        with self._lock:
            for w in workers:
                self._created_paths.extend(w.created_paths)
        for path in sorted(set(self._created_paths), key=lambda p: p.count("/"), reverse=True):
            if is_mount_point_anywhere(path):  # another cluster's pod uses it
                continue
            with contextlib.suppress(OSError):
                p = Path(path)
                if p.is_dir() and not p.is_symlink():
                    p.rmdir()
                elif p.is_file() and p.stat().st_size == 0:
                    p.unlink()

    # -- watch callbacks and the sync loop -------------------------------------------------------

    def _ours(self, pod: k.Obj) -> bool:
        node = (pod.get("spec") or {}).get("nodeName")
        return bool(node) and (self.nodes is None or node in self.nodes)

    def _on_pod(self, kind: str, pod: k.Obj) -> None:
        uid = pod["metadata"]["uid"]
        with self._lock:
            w = self._workers.get(uid)
        if w is not None:
            if kind == "DELETED":
                w.gone()
            else:
                w.update(pod)
        self._wake.set()

    def _on_config(self, kind: str, obj: k.Obj) -> None:
        del kind, obj
        with self._lock:
            self.generation += 1
            workers = list(self._workers.values())
        for w in workers:
            w.wake()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(1.0)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.sync()
            except Exception:
                log.exception("Kubelet: sync failed")

    def sync(self) -> None:
        """One pass: allocate ports, refresh the endpoint map, start/forget pod workers."""
        pods = [p for p in self.pods.items() if self._ours(p)]
        for p in pods:
            endpoints.allocate_pod_ports(self.ports, p)
        targets = endpoints.targets(pods, self.services.items(), self.ports)
        mapping = endpoints.endpoint_map(targets)
        with self._lock:
            if mapping != self._map or targets != self._targets:
                self._targets = targets
                self._map = mapping
                self.generation += 1
                endpoints.write_map_file(self.endpoints_file, mapping)
            for uid in [uid for uid, w in self._workers.items() if w.done.is_set()]:
                self._created_paths.extend(self._workers.pop(uid).created_paths)
            live = {p["metadata"]["uid"] for p in pods}
            for uid, w in self._workers.items():
                if uid not in live and self.pods.get(w.namespace, w.name) is None:
                    w.gone()
            for p in pods:
                uid = p["metadata"]["uid"]
                phase = (p.get("status") or {}).get("phase")
                if uid in self._workers:
                    self._workers[uid].update(p)
                elif phase not in ("Succeeded", "Failed") or p["metadata"].get("deletionTimestamp"):
                    w = PodWorker(self, p, pod_ip=self._pod_ip(uid))
                    self._workers[uid] = w
                    w.start()
            workers = list(self._workers.values())
        for w in workers:
            w.wake()

    def _pod_ip(self, uid: str) -> str:
        if uid not in self._pod_ips:
            self._pod_ips[uid] = str(ipaddress.IPv4Address("10.244.0.0") + self._ip_next)
            self._ip_next += 1
        return self._pod_ips[uid]

    # -- used by pod workers ---------------------------------------------------------------------

    def rewriter(self, pod: k.Obj) -> endpoints.Rewriter:
        ns = pod["metadata"]["namespace"]
        own = endpoints.allocate_pod_ports(self.ports, pod)
        with self._lock:
            targets = list(self._targets)
        return endpoints.Rewriter(namespace=ns, own_ports=own, all_targets=targets)

    def lookup(self, kind: str, namespace: str, name: str) -> Any:
        if kind == "ConfigMap":
            return self.configmaps.get(namespace, name) or self.kube.get_or_none(
                self.kube.core.read_namespaced_config_map, name, namespace
            )
        if kind == "Secret":
            return self.secrets.get(namespace, name) or self.kube.get_or_none(
                self.kube.core.read_namespaced_secret, name, namespace
            )
        if kind == "ServiceAccountToken":
            return self._token(namespace, name)
        raise ValueError(kind)

    def _token(self, namespace: str, sa: str) -> str | None:
        cached = self._tokens.get((namespace, sa))
        if cached and cached[0] > time.monotonic():
            return cached[1]
        try:
            body = self.kube.call(
                self.kube.core.create_namespaced_service_account_token,
                sa,
                namespace,
                {"spec": {"expirationSeconds": 3600}},
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        token = str(body["status"]["token"])
        self._tokens[(namespace, sa)] = (time.monotonic() + 1800, token)
        return token

    def node_ip(self, node: str) -> str:
        if node not in self._node_ips:
            obj = self.kube.get_or_none(self.kube.core.read_node, node) or {}
            addrs = (obj.get("status") or {}).get("addresses") or []
            ip = next((a["address"] for a in addrs if a.get("type") == "InternalIP"), "")
            if not ip:
                return ""
            self._node_ips[node] = ip
        return self._node_ips[node]

    @staticmethod
    def attachment_name(pv: str, node: str) -> str:
        return "e2e-" + hashlib.sha256(f"{pv}/{ATTACHER}/{node}".encode()).hexdigest()[:40]

    def attach_volumes(self, worker: PodWorker) -> None:
        node = worker.pod["spec"]["nodeName"]
        for pv in set(worker.pvs.values()):
            name = self.attachment_name(pv, node)
            body = {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "VolumeAttachment",
                "metadata": {"name": name},
                "spec": {"attacher": ATTACHER, "nodeName": node, "source": {"persistentVolumeName": pv}},
            }
            self.kube.call_ignoring((409,), self.kube.storage.create_volume_attachment, body)
            self.kube.call_ignoring(
                (404,),
                self.kube.storage.patch_volume_attachment_status,
                name,
                {"status": {"attached": True}},
                _content_type=k.MERGE,
            )

    def release_volumes(self, worker: PodWorker) -> None:
        """Delete the VolumeAttachments of `worker`'s PVs that no other live pod on the node uses."""
        node = worker.pod["spec"].get("nodeName", "")
        with self._lock:
            others = [
                w
                for w in self._workers.values()
                if w is not worker
                and not w.done.is_set()
                and w.volumes_ready
                and w.phase not in ("Succeeded", "Failed")
                and w.pod["spec"].get("nodeName") == node
            ]
        in_use = {pv for w in others for pv in w.pvs.values()}
        for pv in set(worker.pvs.values()) - in_use - worker.detached_pvs:
            name = self.attachment_name(pv, node)
            self.kube.call_ignoring((404,), self.kube.storage.delete_volume_attachment, name)

    # -- test actions ----------------------------------------------------------------------------

    def workers(self) -> list[PodWorker]:
        with self._lock:
            return [w for w in self._workers.values() if not w.done.is_set()]

    def worker(self, namespace: str, name: str) -> PodWorker | None:
        """The live worker of pod `namespace/name` (the newest UID if several)."""
        found = [w for w in self.workers() if w.namespace == namespace and w.name == name]
        return found[-1] if found else None

    def pod_process(self, namespace: str, name: str, container: str) -> int | None:
        """The pid of the container's current process (None if it is not running)."""
        w = self.worker(namespace, name)
        c = w.containers.get(container) if w else None
        return c.proc.pid if c is not None and c.running and c.proc is not None else None

    def log_path(self, namespace: str, name: str, container: str) -> Path:
        w = self.worker(namespace, name)
        if w is not None:
            return w.containers[container].log_path
        matches = sorted(
            (self.workdir / "pods").glob(f"{namespace}_{name}_*/logs/{container}.log"),
            key=lambda p: p.stat().st_mtime,
        )
        if not matches:
            raise FileNotFoundError(f"no log for {namespace}/{name}/{container}")
        return matches[-1]

    def logs(self, namespace: str, name: str, container: str) -> str:
        """Everything the container wrote (all restarts, each preceded by a `--- ... start #n` line)."""
        return self.log_path(namespace, name, container).read_text(errors="replace")

    def _users(self, pv_name: str) -> list[tuple[PodWorker, str]]:
        return [(w, vol) for w in self.workers() for vol, pv in w.pvs.items() if pv == pv_name]

    def detach_volume(self, pv_name: str) -> None:
        """Yank a disk: unmount PV `pv_name` in every container namespace that mounts it and on the
        host, and delete its VolumeAttachments. Processes then see an empty directory (another
        device) at the mountPath; the PV object is left alone."""
        for w, vol in self._users(pv_name):
            for pid, mount_path in w.sandboxes_using(vol):
                subprocess.run(
                    ["nsenter", f"--mount=/proc/{pid}/ns/mnt", "--", "umount", "-l", mount_path],
                    check=False,
                    capture_output=True,
                )
            w.detached_pvs.add(pv_name)
        mnt = self.provisioner.mount_path(pv_name)
        if is_mounted(mnt):
            subprocess.run(["umount", "-l", str(mnt)], check=False, capture_output=True)
        body = self.kube.call(self.kube.storage.list_volume_attachment)
        for va in body.get("items") or []:
            if va["spec"].get("source", {}).get("persistentVolumeName") == pv_name:
                self.kube.call_ignoring(
                    (404,), self.kube.storage.delete_volume_attachment, va["metadata"]["name"]
                )
        log.info("Detached volume %s", pv_name)

    def fail_volume(self, pv_name: str) -> None:
        """Make PV `pv_name`'s ext4 filesystem fail: every later I/O on it returns EIO (ext4
        shutdown ioctl, no log flush). Undone only by unmounting everywhere (delete the PV)."""
        candidates = (
            [self.provisioner.mount_path(pv_name)] if is_mounted(self.provisioner.mount_path(pv_name)) else []
        )
        for w, vol in self._users(pv_name):
            candidates += [Path(f"/proc/{pid}/root{path}") for pid, path in w.sandboxes_using(vol)]
        for path in candidates:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
            except OSError:
                continue
            try:
                fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_NOLOGFLUSH))
                log.info("Failed volume %s (ext4 shutdown via %s)", pv_name, path)
                return
            except OSError as exc:
                if exc.errno == 5:  # already shut down
                    return
            finally:
                os.close(fd)
        raise RuntimeError(f"volume {pv_name} is not mounted anywhere")
