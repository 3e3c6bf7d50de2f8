"""`jbodctl local status`: a snapshot of the local cluster: which processes run, the controller's
brokers and topics, each broker's own log dirs and, of a quorum, each controller's own word and
each etcd member's health.

Guarantees:
* `status` only reads: it changes nothing and takes no lock, so it runs beside a changing command.
* A controller or broker that does not answer is listed in `errors`; the rest of the snapshot is
  still returned. No cluster in DIR raises `LocalClusterError` (one line).
* `ClusterStatus.to_json` is plain JSON-able values with the protocol's wire field names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from jbod_client.controller import ClientError, https_verify
from jbod_local import quorum
from jbod_local.layout import (
    BrokerLayout,
    ClusterLayout,
    broker_alive,
    controller_alive,
    read_layout,
    resolve_root,
)


@dataclass(frozen=True)
class ClusterStatus:
    """A snapshot for `status`: processes, the controller's brokers and topics, each broker's dirs.
    Plain JSON-able values (`to_json`), wire field names from the protocol."""

    layout: ClusterLayout
    controller_running: bool
    brokers_running: dict[int, bool]
    cluster: dict[str, Any] | None
    brokers: list[dict[str, Any]]
    topics: list[dict[str, Any]]
    log_dirs: dict[int, list[dict[str, Any]] | None]
    errors: list[str] = field(default_factory=list)
    controllers: list[quorum.ControllerState] = field(default_factory=list)  # a quorum's, each's own word
    etcd_running: dict[str, bool] = field(default_factory=dict)  # a quorum's etcd members by name
    etcd_healthy: dict[str, bool] = field(default_factory=dict)

    @property
    def running(self) -> bool:
        return (
            self.controller_running or any(self.brokers_running.values()) or any(self.etcd_running.values())
        )

    @property
    def active_controller(self) -> int | None:
        return quorum.agreed_active(self.controllers)

    def disk_label(self, broker_id: int, path: str) -> str:
        broker = self.layout.broker(broker_id)
        for index, disk in enumerate(broker.disks, start=1):
            if str(disk) == path:
                return f"disk-{index}"
        return path

    def aliases(self) -> dict[str, str]:
        """Directory id → `bN/disk-K`, for tables."""
        out = {}
        for broker in self.layout.brokers:
            for index, directory_id in enumerate(broker.directory_ids, start=1):
                if directory_id is not None:
                    out[directory_id] = f"b{broker.broker_id}/disk-{index}"
        return out

    def to_json(self) -> dict[str, Any]:
        by_id = {int(b["brokerId"]): b for b in self.brokers}
        brokers = []
        for broker in self.layout.brokers:
            view = by_id.get(broker.broker_id)
            disks = []
            dirs = {d["path"]: d for d in self.log_dirs.get(broker.broker_id) or []}
            for index, disk in enumerate(broker.disks, start=1):
                seen = dirs.get(str(disk))
                disks.append(
                    {
                        "index": index,
                        "path": str(disk),
                        "directoryId": (seen or {}).get("directoryId")
                        or (broker.directory_ids[index - 1] if index <= len(broker.directory_ids) else None),
                        "failedByFailDisk": broker.disk_failed(index),
                        "state": None if seen is None else seen["state"],
                        "error": None if seen is None else seen.get("error"),
                        "replicas": None if seen is None else len(seen["replicas"]),
                        "usableBytes": None if seen is None else seen["usableBytes"],
                    }
                )
            brokers.append(
                {
                    "brokerId": broker.broker_id,
                    "pid": broker.pid,
                    "running": self.brokers_running.get(broker.broker_id, False),
                    "url": broker.url,
                    "registered": view is not None,
                    "brokerEpoch": None if view is None else view["brokerEpoch"],
                    "fenced": None if view is None else view["fenced"],
                    "logDirs": [] if view is None else view["logDirs"],
                    "offlineLogDirs": [] if view is None else view["offlineLogDirs"],
                    "disks": disks,
                }
            )
        return {
            "dir": str(self.layout.root),
            "clusterId": self.layout.cluster_id,
            "running": self.running,
            "controller": {
                "url": self.layout.controller_url,
                "pid": None if self.layout.quorum else self.layout.controllers[0].pid,
                "running": self.controller_running,
            },
            **(
                {
                    "controllers": [c.to_json() for c in self.controllers],
                    "activeController": self.active_controller,
                    "etcd": [
                        {
                            "name": e.name,
                            "url": e.url,
                            "pid": e.pid,
                            "running": self.etcd_running.get(e.name, False),
                            "healthy": self.etcd_healthy.get(e.name, False),
                        }
                        for e in self.layout.etcd
                    ],
                }
                if self.layout.quorum
                else {}
            ),
            "adminTokenFile": str(self.layout.admin_token_file),
            "loopDiskMiB": self.layout.loop_disk_mib,
            "cluster": self.cluster,
            "brokers": brokers,
            "topics": self.topics,
            "errors": self.errors,
        }


def broker_log_dirs(broker: BrokerLayout, *, token: str, timeout: float = 3.0) -> list[dict[str, Any]]:
    """The broker's own GET /v1/log-dirs (protocol §4.4)."""
    try:
        response = httpx.get(
            f"{broker.url}/v1/log-dirs",
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            trust_env=False,
            verify=https_verify(broker.ca_file),
        )
    except httpx.HTTPError as exc:
        raise ClientError(f"cannot reach broker {broker.broker_id} at {broker.url}: {exc}") from exc
    if response.status_code != 200:
        raise ClientError(
            f"broker {broker.broker_id} answered GET /v1/log-dirs with HTTP {response.status_code}"
        )
    result: list[dict[str, Any]] = response.json()
    return result


def status(root: Path) -> ClusterStatus:
    """A snapshot of the cluster; parts that cannot be read are listed in `errors`."""
    layout = read_layout(resolve_root(root))
    controller_running = controller_alive(layout)
    brokers_running = {b.broker_id: broker_alive(b) for b in layout.brokers}
    errors: list[str] = []
    cluster: dict[str, Any] | None = None
    brokers: list[dict[str, Any]] = []
    topics: list[dict[str, Any]] = []
    log_dirs: dict[int, list[dict[str, Any]] | None] = {}
    token = layout.admin_token()
    etcd_running = {e.name: e.alive() for e in layout.etcd}
    etcd_healthy = quorum.etcd_health(layout.root, layout.etcd) if any(etcd_running.values()) else {}
    controllers = quorum.controller_states(layout.controllers, token) if layout.quorum else []
    if controller_running:
        try:
            with layout.controller(timeout=3.0) as client:
                cluster = client.cluster()
                brokers = client.brokers()
                topics = client.list_topics()
        except ClientError as exc:
            errors.append(str(exc))
    for broker in layout.brokers:
        log_dirs[broker.broker_id] = None
        if brokers_running[broker.broker_id]:
            try:
                log_dirs[broker.broker_id] = broker_log_dirs(broker, token=token)
            except (ClientError, ValueError) as exc:
                errors.append(str(exc))
    return ClusterStatus(
        layout=layout,
        controller_running=controller_running,
        brokers_running=brokers_running,
        cluster=cluster,
        brokers=brokers,
        topics=topics,
        log_dirs=log_dirs,
        errors=errors,
        controllers=controllers,
        etcd_running=etcd_running,
        etcd_healthy=etcd_healthy,
    )
