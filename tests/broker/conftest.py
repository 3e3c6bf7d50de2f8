"""A real local cluster for agent integration tests: one `jbod-controller` and `jbod-agent`
processes whose log dirs are loop-mounted ext4 volumes (so they can really fail)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from jbod_client.controller import ControllerClient, read_token
from jbod_local.processes import LocalBroker, LocalController
from tests.fs import LoopMount, loop_ext4

UNASSIGNED = "AAAAAAAAAAAAAAAAAAAAAA"


def wait_for(condition: Callable[[], Any], *, timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


@dataclass
class Cluster:
    base: Path
    stack: contextlib.ExitStack
    controller: LocalController
    admin: ControllerClient
    brokers: dict[int, LocalBroker] = field(default_factory=dict)
    mounts: dict[tuple[int, int], LoopMount] = field(default_factory=dict)

    @property
    def cluster_token(self) -> str:
        return read_token(self.controller.cluster_token_file)

    def add_broker(
        self,
        node_id: int,
        *,
        dirs: int = 2,
        start: bool = True,
        loop: bool = True,
        properties: Mapping[str, str] | None = None,
        **settings: str,
    ) -> LocalBroker:
        """A broker with `dirs` log dirs `b<id>/d<n>`: loop-mounted ext4 volumes that can really fail
        (root), or plain directories with `loop=False`. `properties` are `server.properties` keys;
        `settings` the same with `_` for `.` (`log_dir_failure_timeout_ms="500"`)."""
        paths = []
        for n in range(dirs):
            path = self.base / f"b{node_id}" / f"d{n}"
            if loop:
                mount = self.stack.enter_context(loop_ext4(path))
                self.mounts[(node_id, n)] = mount
                path = mount.path
            paths.append(path)
        broker = LocalBroker(
            node_id=node_id,
            work_dir=self.base / f"b{node_id}",
            log_dirs=paths,
            controller_url=self.controller.url,
            cluster_token_file=self.controller.cluster_token_file,
            cluster_id=self.controller.cluster_id,
            settings={**{k.replace("_", "."): v for k, v in settings.items()}, **(properties or {})},
        )
        self.brokers[node_id] = broker
        self.stack.callback(broker.kill)
        broker.format()
        if start:
            broker.start()
        return broker

    def log_dirs(self, node_id: int) -> list[dict[str, Any]]:
        url = self.brokers[node_id].url
        reply = httpx.get(
            f"{url}/v1/log-dirs", headers={"Authorization": f"Bearer {self.cluster_token}"}, timeout=10
        )
        assert reply.status_code == 200, reply.text
        result: list[dict[str, Any]] = reply.json()
        return result

    def dir_id(self, node_id: int, index: int) -> str:
        path = str(self.mounts[(node_id, index)].path)
        found = [d["directoryId"] for d in self.log_dirs(node_id) if d["path"] == path]
        assert found, f"no log dir {path} on broker {node_id}"
        return str(found[0])

    def all_unfenced(self, count: int) -> bool:
        brokers = self.admin.brokers()
        return len(brokers) == count and all(not b["fenced"] for b in brokers)

    def placed(self, topic: str) -> bool:
        return all(
            d != UNASSIGNED for p in self.admin.describe_topic(topic)["partitions"] for d in p["directories"]
        )

    def create_placed_topic(self, name: str, *, partitions: int = 6, rf: int = 3) -> dict[str, Any]:
        reply = self.admin.create_topic(name, partitions=partitions, replication_factor=rf)
        assert reply["errorCode"] == 0, reply
        wait_for(lambda: self.placed(name), what=f"placements of {name}")
        return self.admin.describe_topic(name)


def start_cluster(
    stack: contextlib.ExitStack, base: Path, *, cluster_id: str = "it", controller_args: Sequence[str] = ()
) -> Cluster:
    """A running controller in `base/controller` (with `controller_args`) and its admin client, no
    broker yet; everything is stopped when `stack` closes."""
    controller = LocalController(
        data_dir=base / "controller", cluster_id=cluster_id, extra_args=list(controller_args)
    ).start()
    stack.callback(controller.kill)
    admin = ControllerClient(controller.url, token=read_token(controller.admin_token_file))
    stack.callback(admin.close)
    return Cluster(base=base, stack=stack, controller=controller, admin=admin)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with contextlib.ExitStack() as stack:
        yield start_cluster(stack, tmp_path)
