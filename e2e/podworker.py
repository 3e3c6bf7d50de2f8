"""One pod's life on the local kubelet: volumes, per-container mount namespaces, processes, probes, status.

A `PodWorker` owns exactly one pod UID, in its own thread. It guarantees:
* nothing starts until every volume resolves (PVC bound to a mounted PV, ConfigMaps/Secrets present);
  until then the containers are `waiting` (ContainerCreating / CreateContainerConfigError);
* each container runs in its own private mount namespace (an `e2e.podshim` sandbox, reused across
  restarts) with its volumeMounts at their real mountPaths, joined with `nsenter --mount`; its
  stdout+stderr go to `<pod dir>/logs/<container>.log`;
* init containers run in order, each to success (restarted per restartPolicy; a failure under
  `Never` fails the pod); native sidecars (`restartPolicy: Always` init containers) start and stay;
* main containers restart per restartPolicy with exponential backoff; readiness, liveness and
  startup probes run at their periods (httpGet/tcpSocket against 127.0.0.1 and the mapped port,
  exec inside the container's namespace);
* status goes to pods/status as a strategic-merge patch carrying only what a kubelet owns (phase,
  podIP(s) — a fake 10.244/16 address never dialled —, hostIP, startTime, container statuses and the
  conditions PodReadyToStartContainers, Initialized, ContainersReady, Ready), so conditions set by
  others (readiness gates) are kept; Ready = ContainersReady and every readiness gate True;
* on deletion: SIGTERM every process group, SIGKILL after the grace period, sandboxes stopped,
  VolumeAttachments released, then the pod is deleted with gracePeriodSeconds=0 (only the kubelet
  does that: kwok runs no pod stages).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import http.client
import json
import logging
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubernetes.client.exceptions import ApiException

from e2e import endpoints, podspec
from e2e import kube as k
from e2e.provisioner import is_mounted

if TYPE_CHECKING:
    from e2e.kubelet import LocalKubelet

log = logging.getLogger("e2e.kubelet")


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclasses.dataclass
class ProbeState:
    spec: dict[str, Any]
    next_at: float
    successes: int = 0
    failures: int = 0
    ok: bool = False


@dataclasses.dataclass
class Container:
    """Runtime state of one container (init or main)."""

    spec: dict[str, Any]
    init: bool
    log_path: Path
    sandbox: subprocess.Popen[bytes] | None = None
    proc: subprocess.Popen[bytes] | None = None
    restart_count: int = 0
    started_at: str | None = None
    terminated: dict[str, Any] | None = None
    last_terminated: dict[str, Any] | None = None
    waiting_reason: str = "ContainerCreating"
    waiting_message: str = ""
    backoff: float = 0.0
    restart_at: float = 0.0
    started: bool = False
    exited_pid: int = 0  # the pid whose exit `terminated` records
    probes: dict[str, ProbeState] = dataclasses.field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def sidecar(self) -> bool:
        return self.init and self.spec.get("restartPolicy") == "Always"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def ready(self) -> bool:
        if not self.running:
            return False
        if "startupProbe" in self.spec and not self.probes["startupProbe"].ok:
            return False
        return "readinessProbe" not in self.spec or self.probes["readinessProbe"].ok

    def status(self) -> dict[str, Any]:
        state: dict[str, Any]
        if self.running:
            state = {"running": {"startedAt": self.started_at}}
        elif self.terminated is not None and self.restart_at == 0.0:
            state = {"terminated": self.terminated}
        else:
            state = {
                "waiting": {
                    "reason": self.waiting_reason,
                    **({"message": self.waiting_message} if self.waiting_message else {}),
                }
            }
        last = self.terminated if "waiting" in state and self.terminated else self.last_terminated
        out: dict[str, Any] = {
            "name": self.name,
            "image": self.spec.get("image", ""),
            "imageID": "",
            "ready": self.ready,
            "restartCount": self.restart_count,
            "started": self.running and (self.started or "startupProbe" not in self.spec),
            "state": state,
            "lastState": {"terminated": last} if last else {},
        }
        if self.proc is not None:
            out["containerID"] = f"e2e://{self.proc.pid}"
        return out


class PodWorker:
    """Runs one pod (see the module docstring)."""

    def __init__(self, kubelet: LocalKubelet, pod: k.Obj, *, pod_ip: str) -> None:
        self.kubelet = kubelet
        self.pod = pod
        meta = pod["metadata"]
        self.namespace, self.name, self.uid = meta["namespace"], meta["name"], meta["uid"]
        self.pod_ip = pod_ip
        self.dir = kubelet.workdir / "pods" / f"{self.namespace}_{self.name}_{self.uid[:8]}"
        spec = pod["spec"]
        self.containers: dict[str, Container] = {}
        for c in spec.get("initContainers") or []:
            self.containers[c["name"]] = Container(c, True, self.dir / "logs" / f"{c['name']}.log")
        for c in spec.get("containers") or []:
            self.containers[c["name"]] = Container(c, False, self.dir / "logs" / f"{c['name']}.log")
        self.pvs: dict[str, str] = {}  # volume name -> PV name
        self.detached_pvs: set[str] = set()
        self.volume_dirs: dict[str, Path] = {}
        self.phase = "Pending"
        self.volumes_ready = False
        self.attached = False
        self.initialized = not any(c.init and not c.sidecar for c in self.containers.values())
        self.start_time: str | None = None
        self.created_paths: list[str] = []
        self._rendered_generation = -1
        self._conditions: dict[str, dict[str, Any]] = {}
        self._last_status: dict[str, Any] | None = None
        self._wake = threading.Event()
        self._gone = threading.Event()  # the pod object no longer exists
        self.done = threading.Event()
        self._lock = threading.RLock()
        self._thread = threading.Thread(
            target=self._run, name=f"pod-{self.namespace}/{self.name}", daemon=True
        )

    # -- control from the kubelet ----------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def update(self, pod: k.Obj) -> None:
        if pod["metadata"]["uid"] == self.uid:
            self.pod = pod
            self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    def gone(self) -> None:
        """The pod object was deleted from the API: stop at once."""
        self._gone.set()
        self._wake.set()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    @property
    def deleting(self) -> bool:
        return bool(self.pod["metadata"].get("deletionTimestamp")) or self._gone.is_set()

    # -- main loop -------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self.dir.joinpath("logs").mkdir(parents=True, exist_ok=True)
            self.start_time = now_iso()
            while not self.deleting:
                self._wake.wait(0.25)
                self._wake.clear()
                if self.deleting:
                    break
                self._step()
                self._publish()
        except Exception:
            log.exception("Pod %s/%s: worker failed", self.namespace, self.name)
        finally:
            self._shutdown()

    def _step(self) -> None:
        if self.phase in ("Succeeded", "Failed"):
            return
        if not self.volumes_ready:
            try:
                self._prepare_volumes()
            except podspec.MissingRefError as exc:
                self._set_waiting(
                    "CreateContainerConfigError" if "not found" not in str(exc) else "ContainerCreating",
                    str(exc),
                )
                return
            self.volumes_ready = True
        if not self.attached:
            try:
                self.kubelet.attach_volumes(self)
                self.attached = True
            except ApiException as exc:
                log.warning(
                    "Pod %s/%s: VolumeAttachment failed (%s); retrying", self.namespace, self.name, exc.status
                )
                return
        self._refresh_config_volumes()
        if not self.initialized:
            self._step_init()
            return
        self.phase = "Running" if self.phase == "Pending" else self.phase
        for c in self.containers.values():
            if not c.init or c.sidecar:
                self._step_container(c)
        self._check_terminal()

    def _set_waiting(self, reason: str, message: str) -> None:
        for c in self.containers.values():
            if c.proc is None:
                c.waiting_reason, c.waiting_message = reason, message

    def _step_init(self) -> None:
        for c in self.containers.values():
            if not c.init:
                continue
            if c.sidecar:
                self._step_container(c)
                if not c.running or not (c.started or "startupProbe" not in c.spec):
                    return
                continue
            if c.terminated is not None and c.terminated["exitCode"] == 0:
                continue
            if c.proc is None or (c.terminated is not None and c.restart_at):
                if time.monotonic() >= c.restart_at:
                    self._start(c)
                return
            code = c.proc.poll()
            if code is None:
                return
            self._record_exit(c, code)
            if code == 0:
                self._stop_sandbox(c)
                continue
            if self.pod["spec"].get("restartPolicy", "Always") == "Never":
                self.phase = "Failed"
                self._stop_all(grace=0)
            else:
                self._schedule_restart(c)
            return
        self.initialized = True

    def _step_container(self, c: Container) -> None:
        if c.proc is None:
            if time.monotonic() >= c.restart_at:
                self._start(c)
            return
        code = c.proc.poll()
        if code is None:
            self._probe(c)
            return
        if c.restart_at and c.terminated is not None:  # waiting to restart
            if time.monotonic() >= c.restart_at:
                self._start(c)
            return
        if c.terminated is None or c.exited_pid != c.proc.pid:
            self._record_exit(c, code)
            policy = "Always" if c.sidecar else self.pod["spec"].get("restartPolicy", "Always")
            if policy == "Always" or (policy == "OnFailure" and code != 0):
                self._schedule_restart(c)

    def _check_terminal(self) -> None:
        mains = [c for c in self.containers.values() if not c.init]
        if not mains or any(c.running or c.restart_at or c.terminated is None for c in mains):
            return
        codes = [c.terminated["exitCode"] for c in mains if c.terminated]
        self.phase = "Succeeded" if all(code == 0 for code in codes) else "Failed"
        log.info("Pod %s/%s: %s", self.namespace, self.name, self.phase)
        self._stop_all(grace=0)
        self.kubelet.release_volumes(self)

    def _record_exit(self, c: Container, code: int) -> None:
        exit_code = 128 - code if code < 0 else code
        c.terminated = {
            "exitCode": exit_code,
            "reason": "Completed" if exit_code == 0 else "Error",
            "startedAt": c.started_at,
            "finishedAt": now_iso(),
            "containerID": f"e2e://{c.proc.pid if c.proc else 0}",
        }
        c.exited_pid = c.proc.pid if c.proc else 0
        c.started = False
        for p in c.probes.values():
            p.ok, p.successes, p.failures = False, 0, 0
        log.info("Pod %s/%s: container %s exited with %d", self.namespace, self.name, c.name, exit_code)

    def _schedule_restart(self, c: Container) -> None:
        kb = self.kubelet
        c.backoff = kb.backoff_initial if c.backoff == 0 else min(c.backoff * 2, kb.backoff_max)
        c.restart_at = time.monotonic() + c.backoff
        c.waiting_reason = "CrashLoopBackOff"
        c.waiting_message = f"back-off {c.backoff:.0f}s restarting failed container={c.name}"

    # -- volumes ---------------------------------------------------------------------------------

    def _prepare_volumes(self) -> None:
        kb = self.kubelet
        for vol in self.pod["spec"].get("volumes") or []:
            name = vol["name"]
            if "persistentVolumeClaim" in vol:
                claim = vol["persistentVolumeClaim"]["claimName"]
                pvc = kb.provisioner.pvcs.get(self.namespace, claim)
                if pvc is None or (pvc.get("status") or {}).get("phase") != "Bound":
                    raise podspec.MissingRefError(f"PVC {self.namespace}/{claim} not found or not bound")
                pv = kb.provisioner.pvs.get("", pvc["spec"]["volumeName"])
                if pv is None:
                    raise podspec.MissingRefError(f"PV {pvc['spec']['volumeName']} not found")
                source = (pv["spec"].get("hostPath") or pv["spec"].get("local") or {}).get("path")
                ours = Path(source or "").parent.parent == kb.provisioner.volumes_dir
                if not source or not Path(source).is_dir() or (ours and not is_mounted(Path(source))):
                    raise podspec.MissingRefError(
                        f"PV {pv['metadata']['name']} has no local path (not found)"
                    )
                self.pvs[name] = pv["metadata"]["name"]
                self.volume_dirs[name] = Path(source)
            elif "emptyDir" in vol:
                path = self.dir / "volumes" / "empty" / name
                path.mkdir(parents=True, exist_ok=True)
                self.volume_dirs[name] = path
            elif "hostPath" in vol:
                path = Path(vol["hostPath"]["path"])
                if vol["hostPath"].get("type") == "DirectoryOrCreate":
                    path.mkdir(parents=True, exist_ok=True)
                self.volume_dirs[name] = path
            elif any(kind in vol for kind in ("configMap", "secret", "downwardAPI", "projected")):
                self.volume_dirs[name] = self.dir / "volumes" / "config" / name
            else:
                log.warning(
                    "Pod %s/%s: volume %s has an unsupported type; using an empty dir",
                    self.namespace,
                    self.name,
                    name,
                )
                path = self.dir / "volumes" / "other" / name
                path.mkdir(parents=True, exist_ok=True)
                self.volume_dirs[name] = path
        self._rendered_generation = -1
        self._refresh_config_volumes()

    def _refresh_config_volumes(self) -> None:
        kb = self.kubelet
        generation = kb.generation
        if generation == self._rendered_generation:
            return
        rewriter = kb.rewriter(self.pod)
        for vol in self.pod["spec"].get("volumes") or []:
            files = podspec.volume_files(self.pod, vol, lookup=kb.lookup, rewriter=rewriter)
            if files is not None:
                write_atomic_dir(self.volume_dirs[vol["name"]], files)
        self._rendered_generation = generation

    def mount_plan(self, c: Container) -> list[dict[str, Any]]:
        plan = []
        for vm in c.spec.get("volumeMounts") or []:
            source = self.volume_dirs[vm["name"]]
            if vm.get("subPath"):
                source = source / vm["subPath"]
                if not source.exists():
                    source.mkdir(parents=True)
                source = source.resolve()  # a configMap key is a symlink into ..data
            plan.append(
                {"source": str(source), "target": vm["mountPath"], "readOnly": bool(vm.get("readOnly"))}
            )
        return plan

    # -- processes -------------------------------------------------------------------------------

    def _start_sandbox(self, c: Container) -> subprocess.Popen[bytes]:
        cdir = self.dir / "containers" / c.name
        cdir.mkdir(parents=True, exist_ok=True)
        plan_path = cdir / "plan.json"
        plan_path.write_text(
            json.dumps(
                {
                    "pod_dir": str(cdir),
                    "created_file": str(cdir / "created.json"),
                    "mounts": self.mount_plan(c),
                    "image": image_paths(self.kubelet.endpoints_file),
                }
            )
        )
        proc = subprocess.Popen(
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "--",
                sys.executable,
                "-m",
                "e2e.podshim",
                str(plan_path),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            cwd=str(Path(__file__).resolve().parent.parent),
            start_new_session=True,
        )
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline().decode().strip()
        if line != "ready":
            err = proc.stderr.read().decode().strip()
            proc.wait()
            raise RuntimeError(f"sandbox for {c.name} failed: {err or line}")
        with contextlib.suppress(OSError, ValueError):
            self.created_paths.extend(json.loads((cdir / "created.json").read_text()))
        return proc

    def _env(self, c: Container) -> dict[str, str]:
        kb = self.kubelet
        env = podspec.container_env(self.pod, c.spec, lookup=kb.lookup, rewriter=kb.rewriter(self.pod))
        base = {
            "HOME": "/root",
            "LANG": "C.UTF-8",
            "HOSTNAME": self.pod["spec"].get("hostname") or self.name,
            **kb.pod_env,
        }
        path = env.get("PATH", podspec.DEFAULT_PATH)
        base.update(env)
        base["PATH"] = ":".join([*kb.extra_path, path])
        return base

    def _start(self, c: Container) -> None:
        kb = self.kubelet
        try:
            env = self._env(c)
            argv = podspec.command_line(
                c.spec, env, rewriter=kb.rewriter(self.pod), entrypoints=kb.entrypoints
            )
        except podspec.MissingRefError as exc:
            c.waiting_reason, c.waiting_message = "CreateContainerConfigError", str(exc)
            c.restart_at = time.monotonic() + 1.0
            return
        if c.sandbox is None or c.sandbox.poll() is not None:
            try:
                c.sandbox = self._start_sandbox(c)
            except RuntimeError as exc:
                log.warning("Pod %s/%s: %s", self.namespace, self.name, exc)
                c.waiting_reason, c.waiting_message = "CreateContainerError", str(exc)
                c.restart_at = time.monotonic() + 2.0
                return
        workdir = c.spec.get("workingDir") or "/"
        cmd = ["nsenter", f"--mount=/proc/{c.sandbox.pid}/ns/mnt", f"--wd={workdir}", "--", *argv]
        with open(c.log_path, "ab") as logf:
            logf.write(
                f"--- {now_iso()} start #{c.restart_count if c.proc is None else c.restart_count + 1}: "
                f"{json.dumps(argv)}\n".encode()
            )
            logf.flush()
            proc = subprocess.Popen(
                cmd,
                env=env,
                stdout=logf,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=str(self.dir),
                start_new_session=True,
            )
        if c.proc is not None:
            c.restart_count += 1
            c.last_terminated = c.terminated
        c.proc, c.started_at, c.restart_at = proc, now_iso(), 0.0
        c.terminated = None
        c.waiting_reason, c.waiting_message = "", ""
        now = time.monotonic()
        for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
            if kind in c.spec:
                spec = c.spec[kind]
                c.probes[kind] = ProbeState(spec, now + float(spec.get("initialDelaySeconds", 0)))
        log.info("Pod %s/%s: started container %s (pid %d)", self.namespace, self.name, c.name, proc.pid)

    # -- probes ----------------------------------------------------------------------------------

    def _probe(self, c: Container) -> None:
        now = time.monotonic()
        startup = c.probes.get("startupProbe")
        if startup is not None and not startup.ok:
            kinds = ["startupProbe"]
        else:
            c.started = True
            kinds = [kd for kd in ("livenessProbe", "readinessProbe") if kd in c.probes]
        for kind in kinds:
            st = c.probes[kind]
            if now < st.next_at:
                continue
            period = float(st.spec.get("periodSeconds", 10))
            if self.kubelet.probe_period_cap is not None:
                period = min(period, self.kubelet.probe_period_cap)
            st.next_at = now + period
            ok = self._run_probe(c, st.spec)
            if ok:
                st.successes, st.failures = st.successes + 1, 0
                threshold = 1 if kind != "readinessProbe" else int(st.spec.get("successThreshold", 1))
                if st.successes >= threshold:
                    st.ok = True
            else:
                st.successes, st.failures = 0, st.failures + 1
                if st.failures >= int(st.spec.get("failureThreshold", 3)):
                    st.ok = False
                    if kind in ("livenessProbe", "startupProbe"):
                        log.info(
                            "Pod %s/%s: %s of %s failed; killing it", self.namespace, self.name, kind, c.name
                        )
                        self._kill(c, grace=float(self.pod["spec"].get("terminationGracePeriodSeconds", 30)))
                        return

    def _port(self, port: Any) -> int:
        named = endpoints.container_ports(self.pod)
        number = named.get(str(port))
        if number is None:
            number = int(port)
        return self.kubelet.ports.lookup(self.namespace, self.name, number) or number

    def _run_probe(self, c: Container, spec: dict[str, Any]) -> bool:
        timeout = float(spec.get("timeoutSeconds", 1))
        try:
            if "httpGet" in spec:
                h = spec["httpGet"]
                port = self._port(h["port"])
                conn: http.client.HTTPConnection
                if h.get("scheme", "HTTP").upper() == "HTTPS":
                    conn = http.client.HTTPSConnection(
                        endpoints.LOCALHOST, port, timeout=timeout, context=ssl._create_unverified_context()
                    )
                else:
                    conn = http.client.HTTPConnection(endpoints.LOCALHOST, port, timeout=timeout)
                try:
                    headers = {hd["name"]: hd["value"] for hd in h.get("httpHeaders") or []}
                    conn.request("GET", h.get("path", "/"), headers=headers)
                    return 200 <= conn.getresponse().status < 400
                finally:
                    conn.close()
            if "tcpSocket" in spec:
                with socket.create_connection(
                    (endpoints.LOCALHOST, self._port(spec["tcpSocket"]["port"])), timeout
                ):
                    return True
            if "exec" in spec and c.sandbox is not None:
                cmd = [
                    "nsenter",
                    f"--mount=/proc/{c.sandbox.pid}/ns/mnt",
                    "--wd=/",
                    "--",
                    *spec["exec"]["command"],
                ]
                proc = subprocess.run(
                    cmd, env=self._env(c), capture_output=True, timeout=max(timeout, 1.0), check=False
                )
                return proc.returncode == 0
        except (OSError, subprocess.TimeoutExpired, http.client.HTTPException, podspec.MissingRefError):
            return False
        log.warning("Pod %s/%s: unsupported probe %s", self.namespace, self.name, sorted(spec))
        return False

    # -- stopping --------------------------------------------------------------------------------

    def _kill(self, c: Container, *, grace: float) -> None:
        if c.proc is None or c.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(c.proc.pid, signal.SIGTERM)
        try:
            c.proc.wait(timeout=max(grace, 0.0) or 0.01)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(c.proc.pid, signal.SIGKILL)
            c.proc.wait()

    def _stop_all(self, *, grace: float) -> None:
        running = [c for c in self.containers.values() if c.running]
        for c in running:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(c.proc.pid, signal.SIGTERM)  # type: ignore[union-attr]
        deadline = time.monotonic() + max(grace, 0.0)
        for c in running:
            assert c.proc is not None
            try:
                c.proc.wait(timeout=max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(c.proc.pid, signal.SIGKILL)
                c.proc.wait()
            if c.terminated is None or c.exited_pid != c.proc.pid:
                self._record_exit(c, c.proc.returncode)
            c.restart_at = 0.0
        for c in self.containers.values():
            self._stop_sandbox(c)

    def _stop_sandbox(self, c: Container) -> None:
        if c.sandbox is None:
            return
        if c.sandbox.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(c.sandbox.pid, signal.SIGTERM)
            try:
                c.sandbox.wait(timeout=5)
            except subprocess.TimeoutExpired:
                c.sandbox.kill()
                c.sandbox.wait()
        for stream in (c.sandbox.stdout, c.sandbox.stderr):
            if stream is not None:
                stream.close()
        c.sandbox = None

    def grace_seconds(self) -> float:
        meta, spec = self.pod["metadata"], self.pod["spec"]
        if self._gone.is_set():
            return 0.0
        if meta.get("deletionGracePeriodSeconds") is not None:
            return float(meta["deletionGracePeriodSeconds"])
        return float(spec.get("terminationGracePeriodSeconds", 30))

    def _shutdown(self) -> None:
        try:
            self._stop_all(grace=self.grace_seconds())
            self.kubelet.release_volumes(self)
            shutil.rmtree(self.dir / "volumes" / "empty", ignore_errors=True)
            if not self._gone.is_set() and self.pod["metadata"].get("deletionTimestamp"):
                kb = self.kubelet
                with contextlib.suppress(ApiException):
                    kb.kube.call(
                        kb.kube.core.delete_namespaced_pod,
                        self.name,
                        self.namespace,
                        body={"gracePeriodSeconds": 0, "preconditions": {"uid": self.uid}},
                    )
                log.info("Pod %s/%s: deleted", self.namespace, self.name)
        except Exception:
            log.exception("Pod %s/%s: shutdown failed", self.namespace, self.name)
        finally:
            self.done.set()

    # -- status ----------------------------------------------------------------------------------

    def _condition(self, ctype: str, ok: bool, reason: str = "") -> dict[str, Any]:
        status = "True" if ok else "False"
        prev = self._conditions.get(ctype)
        if prev is None or prev["status"] != status or prev.get("reason", "") != reason:
            # reason/message are always sent (None deletes them in a strategic merge)
            prev = {
                "type": ctype,
                "status": status,
                "lastProbeTime": None,
                "lastTransitionTime": now_iso(),
                "reason": reason or None,
                "message": None,
            }
            self._conditions[ctype] = prev
        return prev

    def compute_status(self) -> dict[str, Any]:
        mains = [c for c in self.containers.values() if not c.init]
        containers_ready = bool(mains) and all(c.ready for c in mains) and self.phase == "Running"
        existing = {c["type"]: c for c in (self.pod.get("status") or {}).get("conditions") or []}
        gates = [g["conditionType"] for g in self.pod["spec"].get("readinessGates") or []]
        gates_ok = all(existing.get(g, {}).get("status") == "True" for g in gates)
        terminal = self.phase in ("Succeeded", "Failed")
        ready_reason = (
            ""
            if containers_ready and gates_ok
            else (
                "PodCompleted"
                if terminal
                else "ContainersNotReady"
                if not containers_ready
                else "ReadinessGatesNotReady"
            )
        )
        conditions = [
            self._condition("PodReadyToStartContainers", self.volumes_ready and not terminal),
            self._condition(
                "Initialized", self.initialized, "" if self.initialized else "ContainersNotInitialized"
            ),
            self._condition(
                "ContainersReady",
                containers_ready,
                "" if containers_ready else ("PodCompleted" if terminal else "ContainersNotReady"),
            ),
            self._condition("Ready", containers_ready and gates_ok, ready_reason),
        ]
        status: dict[str, Any] = {
            "phase": self.phase,
            "hostIP": self.kubelet.node_ip(self.pod["spec"].get("nodeName", "")),
            "podIP": self.pod_ip,
            "podIPs": [{"ip": self.pod_ip}],
            "startTime": self.start_time,
            "conditions": conditions,
            "initContainerStatuses": [c.status() for c in self.containers.values() if c.init],
            "containerStatuses": [c.status() for c in mains],
        }
        if not status["initContainerStatuses"]:
            del status["initContainerStatuses"]
        return status

    def _publish(self) -> None:
        status = self.compute_status()
        if status == self._last_status:
            return
        kb = self.kubelet
        try:
            kb.kube.call(
                kb.kube.core.patch_namespaced_pod_status,
                self.name,
                self.namespace,
                {"metadata": {"uid": self.uid}, "status": status},
                _content_type=k.SMP,
            )
            self._last_status = status
        except ApiException as exc:
            if exc.status == 404:
                self._gone.set()
            else:
                log.warning("Pod %s/%s: status patch failed: %s", self.namespace, self.name, exc.status)

    # -- test actions ----------------------------------------------------------------------------

    def sandboxes_using(self, volume_name: str) -> list[tuple[int, str]]:
        """`(sandbox pid, mountPath)` for every live container sandbox mounting `volume_name`."""
        out = []
        for c in self.containers.values():
            if c.sandbox is None or c.sandbox.poll() is not None:
                continue
            for vm in c.spec.get("volumeMounts") or []:
                if vm["name"] == volume_name:
                    out.append((c.sandbox.pid, vm["mountPath"]))
        return out


def write_atomic_dir(target: Path, files: podspec.Files) -> None:
    """Materialise `files` in `target` like the kubelet's atomic writer: a timestamped data dir,
    a `..data` symlink swapped by rename, and top-level symlinks into `..data`."""
    target.mkdir(parents=True, exist_ok=True)
    current = target / "..data"
    if current.is_symlink():
        old_dir = target / os.readlink(current)
        same = all(
            (old_dir / rel).is_file() and (old_dir / rel).read_bytes() == raw
            for rel, (raw, _mode) in files.items()
        ) and {str(p.relative_to(old_dir)) for p in old_dir.rglob("*") if p.is_file()} == set(files)
        if same:
            return
    else:
        old_dir = None
    stamp = f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{time.monotonic_ns()}"
    data_dir = target / stamp
    for rel, (raw, mode) in files.items():
        path = data_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(raw)
        path.chmod(mode)
    data_dir.mkdir(exist_ok=True)
    tmp_link = target / "..data_tmp"
    with contextlib.suppress(FileNotFoundError):
        tmp_link.unlink()
    tmp_link.symlink_to(stamp)
    tmp_link.replace(current)
    tops = {rel.split("/", 1)[0] for rel in files}
    for entry in target.iterdir():
        if not entry.name.startswith("..") and entry.name not in tops and entry.is_symlink():
            entry.unlink()
    for top in tops:
        link = target / top
        if not link.is_symlink():
            link.symlink_to(f"..data/{top}")
    if old_dir is not None and old_dir != data_dir:
        shutil.rmtree(old_dir, ignore_errors=True)


def image_paths(endpoints_file: Path) -> list[str]:
    """What stands in for the container image: the interpreter, the venv with the console scripts,
    the source tree (an editable install) and the endpoint map. A volume mounted above one of them
    (an emptyDir at /tmp while the checkout lives in /tmp) must not hide it (`podshim`)."""
    paths = {
        sys.base_prefix,
        sys.prefix,
        str(Path(__file__).resolve().parents[1]),
        str(endpoints_file.parent),
    }
    return sorted(paths)
