"""The local cluster's controllers, and the etcd cluster under a quorum of them
(`jbodctl local up --controllers 3`, contract §3.8).

Guarantees:
* One controller (the default) is `ControllerNode(node_id=None)`: data in DIR/controller, log in
  DIR/logs/controller.log, no quorum flags: exactly what `up` always ran.
* A quorum is nodes 1..N (N = 3 or 5): data in DIR/controller-N, log in DIR/logs/controller-N.log,
  each run with `--etcd-endpoints` naming every etcd member, `--node-id N` and the same token
  files; under them `ETCD_MEMBERS` etcd members (data in DIR/etcd/etcd-K.etcd, log in
  DIR/logs/etcd-K.log), detached like every other process of the local cluster. Nodes and members
  keep their ports and data across restarts: a restarted controller rejoins as a standby, a
  restarted member rejoins etcd (etcd ignores its initial-cluster flags once its data exists).
* `start_etcd` runs the binary it is given (`jbod_local.etcd_binary` chose it); one with a known
  data-loss bug (the user accepted the risk) gets a WARNING line in each member's log as it starts.
* `stop_etcd` stops the raft leader last (a leader stopped together with its followers waits
  seconds trying to hand over leadership to a dying member).
* `controller_states` asks each running controller itself whether it is active (`GET
  /v1/cluster`, `/readyz`); `await_active` waits until the running controllers agree on one.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from jbod_client.controller import https_verify
from jbod_local.etcd import EtcdCluster, EtcdMember
from jbod_local.etcd_binary import EtcdBinary
from jbod_local.processes import (
    LocalClusterError,
    exit_report,
    process_alive,
    spawn_detached,
    stop_processes,
)

HOST = "127.0.0.1"
CONTROLLER_COUNTS = (1, 3, 5)
ETCD_MEMBERS = 3
ETCD_DIR = "etcd"


def check_count(controllers: int) -> None:
    if controllers not in CONTROLLER_COUNTS:
        allowed = ", ".join(str(c) for c in CONTROLLER_COUNTS[:-1]) + f" or {CONTROLLER_COUNTS[-1]}"
        raise LocalClusterError(f"--controllers must be {allowed}, got {controllers}")


# -- identities, as kept in cluster.json ---------------------------------------------------------


@dataclass(frozen=True)
class ControllerNode:
    """One `jbod-controller` process: its node id in a quorum (None: the only controller), its
    port, where its files are, and its pid while it may be running."""

    node_id: int | None
    port: int
    data_dir: Path
    log_path: Path
    pid: int | None = None
    ca_file: Path | None = None  # with `up --tls`: serves https, verified with this CA bundle

    @property
    def url(self) -> str:
        return f"{'https' if self.ca_file else 'http'}://{HOST}:{self.port}"

    @property
    def keystore_name(self) -> str:
        """Its keystore's name in DIR/tls (`jbod_local.certs`)."""
        return "controller" if self.node_id is None else f"controller-{self.node_id}"

    @property
    def name(self) -> str:
        return "controller" if self.node_id is None else f"controller {self.node_id}"

    @property
    def label(self) -> str:
        """For sentences: "the controller" or "controller N"."""
        return "the controller" if self.node_id is None else self.name

    def alive(self) -> bool:
        return process_alive(self.pid, self.data_dir)

    def to_json(self) -> dict[str, Any]:
        return {
            **({} if self.node_id is None else {"nodeId": self.node_id}),
            "port": self.port,
            "url": self.url,
            "pid": self.pid,
            "dataDir": str(self.data_dir),
            "log": str(self.log_path),
            **({"caFile": str(self.ca_file)} if self.ca_file else {}),
        }

    @classmethod
    def from_json(cls, root: Path, data: Mapping[str, Any], node_id: int | None) -> ControllerNode:
        planned = plan_controller(root, node_id, int(data["port"]))
        return replace(
            planned,
            pid=None if data.get("pid") is None else int(data["pid"]),
            ca_file=Path(data["caFile"]) if data.get("caFile") else None,
        )


def plan_controller(root: Path, node_id: int | None, port: int) -> ControllerNode:
    suffix = "" if node_id is None else f"-{node_id}"
    return ControllerNode(
        node_id=node_id,
        port=port,
        data_dir=root / f"controller{suffix}",
        log_path=root / "logs" / f"controller{suffix}.log",
    )


@dataclass(frozen=True)
class EtcdNode:
    """One etcd member of a quorum's etcd cluster, and its pid while it may be running."""

    member: EtcdMember
    pid: int | None = None

    @property
    def name(self) -> str:
        return self.member.name

    @property
    def url(self) -> str:
        return self.member.client_url

    def alive(self) -> bool:
        return process_alive(self.pid, self.member.data_dir)

    def to_json(self) -> dict[str, Any]:
        return {**self.member.to_dict(), "url": self.url, "pid": self.pid}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EtcdNode:
        return cls(EtcdMember.from_dict(dict(data)), None if data.get("pid") is None else int(data["pid"]))


def plan_etcd(root: Path) -> tuple[EtcdNode, ...]:
    """`ETCD_MEMBERS` members on free ports; their logs with the other processes' in DIR/logs."""
    members = EtcdCluster(root / ETCD_DIR, ETCD_MEMBERS).plan()
    return tuple(EtcdNode(replace(m, log_path=root / "logs" / f"{m.name}.log")) for m in members)


def etcd_cluster(root: Path, nodes: Sequence[EtcdNode], *, binary: Path | None = None) -> EtcdCluster:
    """The cluster those members form (for command lines, health and the raft leader)."""
    return EtcdCluster.from_members(root / ETCD_DIR, [n.member for n in nodes], binary=binary)


def endpoints(nodes: Iterable[EtcdNode]) -> str:
    return ",".join(n.url for n in nodes)


def quorum_args(
    node: ControllerNode, etcd: Sequence[EtcdNode], *, etcd_client_keystore: Path | None = None
) -> list[str]:
    """The flags that make `node` one of a quorum (none for the only controller); toward TLS
    members, their CA and `etcd_client_keystore` as the client certificate."""
    if node.node_id is None:
        return []
    flags = ["--etcd-endpoints", endpoints(etcd), "--node-id", str(node.node_id)]
    ca_file = etcd[0].member.ca_file if etcd else None
    if ca_file is not None and etcd_client_keystore is not None:
        keystore = str(etcd_client_keystore)
        flags += ["--etcd-cacert", str(ca_file), "--etcd-cert", keystore, "--etcd-key", keystore]
    return flags


# -- etcd processes --------------------------------------------------------------------------------


def start_etcd(
    root: Path, nodes: Sequence[EtcdNode], *, etcd: EtcdBinary
) -> tuple[tuple[EtcdNode, ...], list[int]]:
    """Start every member that is not running (detached) on the binary `etcd`; (the members with
    their pids, the indices of those started). `await_etcd` then waits for them. The binary's
    `warning` (a known data-loss bug the user accepted) goes first into each started member's log."""
    cluster = etcd_cluster(root, nodes, binary=etcd.path)
    out: list[EtcdNode] = []
    started: list[int] = []
    for i, node in enumerate(nodes):
        if node.alive():
            out.append(node)
            continue
        node.member.data_dir.parent.mkdir(parents=True, exist_ok=True)
        if etcd.warning is not None:
            node.member.log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(node.member.log_path, "a", encoding="utf-8") as log:
                log.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')} jbodctl: WARNING: {etcd.warning}\n")
        pid = spawn_detached(cluster.member_command(i), log_path=node.member.log_path)
        out.append(replace(node, pid=pid))
        started.append(i)
    return tuple(out), started


def await_etcd(root: Path, nodes: Sequence[EtcdNode], started: Sequence[int], *, deadline: float) -> None:
    """Return once the members `started` are healthy and etcd has a quorum."""
    cluster = etcd_cluster(root, nodes)
    majority = len(nodes) // 2 + 1
    while True:
        for i in started:
            if not nodes[i].alive():
                raise LocalClusterError(
                    f"etcd member {nodes[i].name} exited: {exit_report(nodes[i].pid, nodes[i].member.log_path)}"
                )
        healthy = set(cluster.healthy_members())
        if set(started) <= healthy and len(healthy) >= majority:
            return
        if time.monotonic() > deadline:
            sick = ", ".join(n.name for i, n in enumerate(nodes) if i not in healthy)
            raise LocalClusterError(f"etcd members {sick} not healthy in time; see {root / 'logs'}")
        time.sleep(0.1)


def stop_etcd(root: Path, nodes: Sequence[EtcdNode], *, grace: float) -> list[str]:
    """Stop the running members, the raft leader last; the names of those that were running."""
    running = [i for i, n in enumerate(nodes) if n.alive()]
    if not running:
        return []
    leader = etcd_cluster(root, nodes).leader()
    for group in ([i for i in running if i != leader], [i for i in running if i == leader]):
        stop_processes([(pid, nodes[i].member.data_dir) for i in group if (pid := nodes[i].pid)], grace=grace)
    return [nodes[i].name for i in running]


def etcd_health(root: Path, nodes: Sequence[EtcdNode]) -> dict[str, bool]:
    """Each member's name → whether its `/health` says true."""
    healthy = set(etcd_cluster(root, nodes).healthy_members())
    return {n.name: i in healthy for i, n in enumerate(nodes)}


# -- who is active -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ControllerState:
    node: ControllerNode
    running: bool
    state: str  # "active", "standby", "starting" (runs, not serving yet) or "down"
    names_active: int | None  # the node id this controller names as active

    def to_json(self) -> dict[str, Any]:
        return {
            "nodeId": self.node.node_id,
            "url": self.node.url,
            "pid": self.node.pid,
            "running": self.running,
            "state": self.state,
        }


def controller_states(
    nodes: Sequence[ControllerNode], token: str, *, timeout: float = 2.0
) -> list[ControllerState]:
    """Each controller's own word on its role (a stopped one is "down")."""
    states = []
    headers = {"Authorization": f"Bearer {token}"}
    ca_file = next((n.ca_file for n in nodes if n.ca_file), None)
    with httpx.Client(
        timeout=timeout, trust_env=False, headers=headers, verify=https_verify(ca_file)
    ) as client:
        for node in nodes:
            if not node.alive():
                states.append(ControllerState(node, False, "down", None))
                continue
            try:
                ready = client.get(f"{node.url}/readyz").status_code == 200
                reply = client.get(f"{node.url}/v1/cluster")
                active = reply.json().get("activeController") if reply.status_code == 200 else None
            except (httpx.HTTPError, ValueError, AttributeError):
                states.append(ControllerState(node, True, "starting", None))
                continue
            named = int(active["nodeId"]) if isinstance(active, dict) else None
            state = "active" if ready and named == node.node_id else "standby" if ready else "starting"
            states.append(ControllerState(node, True, state, named))
    return states


def agreed_active(states: Sequence[ControllerState]) -> int | None:
    """The node every serving controller names as active, if that one says so itself."""
    serving = [s for s in states if s.state in ("active", "standby")]
    actives = [s.node.node_id for s in serving if s.state == "active"]
    if len(actives) == 1 and {s.names_active for s in serving} == {actives[0]}:
        return actives[0]
    return None


def await_active(
    nodes: Sequence[ControllerNode], token: str, *, other_than: int | None, deadline: float
) -> int | None:
    """The node the running controllers agree is active (not `other_than`); None if they do not
    agree on one before `deadline`."""
    while True:
        found = agreed_active(controller_states(nodes, token))
        if found is not None and found != other_than:
            return found
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)
