"""A controller quorum for tests: a real etcd cluster and real `jbod-controller` processes (§3.8).

Guarantees:
* `Quorum.start()` returns once every controller answers `/readyz` and one of them is active.
* All controllers share one cluster token and one admin token (copied into each data dir, so
  `ControllerProcess.admin_token` works unchanged).
* `active()` asks the controllers (not etcd) who is active, and waits until they agree.
* Everything started is killed when the context exits, even on test failure.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from jbod_local.etcd import EtcdCluster
from tests.harness import ControllerProcess

CLUSTER_TOKEN = "quorum-cluster-token"
ADMIN_TOKEN = "quorum-admin-token"


@dataclass
class Quorum:
    base: Path
    controllers: int = 3
    etcd_members: int = 3
    lease_ms: int = 2000
    session_timeout_ms: int = 9000
    extra_args: list[str] = field(default_factory=list)
    etcd: EtcdCluster | None = None
    nodes: dict[int, ControllerProcess] = field(default_factory=dict)

    def start(self) -> Quorum:
        self.etcd = EtcdCluster(self.base / "etcd", self.etcd_members).start()
        for node_id in range(1, self.controllers + 1):
            self.nodes[node_id] = self._node(node_id).start()
        self.active()
        return self

    def _node(self, node_id: int) -> ControllerProcess:
        assert self.etcd is not None
        data_dir = self.base / f"controller-{node_id}"
        data_dir.mkdir(parents=True, exist_ok=True)
        for name, token in (("cluster.token", CLUSTER_TOKEN), ("admin.token", ADMIN_TOKEN)):
            path = data_dir / name
            path.write_text(token + "\n")
            path.chmod(0o600)
        return ControllerProcess(
            data_dir,
            session_timeout_ms=self.session_timeout_ms,
            extra_args=[
                "--etcd-endpoints",
                self.etcd.endpoints,
                "--node-id",
                str(node_id),
                "--lease-ms",
                str(self.lease_ms),
                *self.extra_args,
            ],
        )

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes.values()]

    def cluster(self, node_id: int) -> dict[str, Any] | None:
        node = self.nodes[node_id]
        if node.process is None or node.process.poll() is not None:
            return None
        try:
            response = httpx.get(
                node.url + "/v1/cluster", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=2
            )
        except httpx.HTTPError:
            return None
        return response.json() if response.status_code == 200 else None

    def active(self, *, timeout: float = 30.0, other_than: int | None = None) -> int:
        """The node id every running controller names as active (waits for agreement)."""
        deadline = time.monotonic() + timeout
        while True:
            named: set[int | None] = set()
            for node_id in self.nodes:
                described = self.cluster(node_id)
                if described is None:
                    continue
                active = described.get("activeController")
                named.add(active["nodeId"] if active else None)
            found = next(iter(named)) if len(named) == 1 else None
            if found is not None and found != other_than:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"the controllers do not agree on an active one: {named}")
            time.sleep(0.05)

    def restart(self, node_id: int) -> ControllerProcess:
        self.nodes[node_id].kill()
        self.nodes[node_id] = self._node(node_id).start()
        return self.nodes[node_id]

    def stop(self) -> None:
        for node in self.nodes.values():
            node.kill()
        if self.etcd is not None:
            self.etcd.stop()

    def __enter__(self) -> Quorum:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
