"""A real local cluster for agent integration tests: one `jbod-controller` (or, with
`start_cluster(..., quorum=True)`, three sharing one metadata log in a 3-member etcd, contract
§3.8) and `jbod-agent` processes whose log dirs are loop-mounted ext4 volumes (so they can really
fail). Every broker serves a SASL_PLAINTEXT Kafka listener beside its HTTP API and accepts the
admin token there: `Cluster.kafka_config()` is librdkafka's configuration of the `admin`
principal for the brokers running now."""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from jbod_client.controller import ClientError, ControllerClient, read_token
from jbod_client.kafka_config import KafkaSecurity
from jbod_local.etcd import EtcdCluster
from jbod_local.processes import LocalBroker, LocalController
from tests.fs import LoopMount, loop_ext4

UNASSIGNED = "AAAAAAAAAAAAAAAAAAAAAA"
#: The Kafka listener every test broker serves (`jbod_local.processes.DEFAULT_LISTENERS`).
KAFKA_LISTENER = "SASL_PLAINTEXT"


def wait_for(condition: Callable[[], Any], *, timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def broker_ready(url: str) -> bool:
    """The broker process itself answers `/readyz` 200: registered, unfenced, and its own image
    shows it so (the Metadata it answers lists it)."""
    try:
        return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@dataclass
class Cluster:
    """`controller` is the first of `controllers` (the only one without a quorum); with a quorum
    every controller has the same token files, and `etcd` is the cluster holding their log."""

    base: Path
    stack: contextlib.ExitStack
    controller: LocalController
    admin: ControllerClient
    brokers: dict[int, LocalBroker] = field(default_factory=dict)
    mounts: dict[tuple[int, int], LoopMount] = field(default_factory=dict)
    controllers: list[LocalController] = field(default_factory=list)
    etcd: EtcdCluster | None = None

    def __post_init__(self) -> None:
        if not self.controllers:
            self.controllers = [self.controller]

    @property
    def controller_urls(self) -> str:
        """What clients and brokers are given: every controller's URL, comma-separated."""
        return ",".join(c.url for c in self.controllers)

    @property
    def cluster_token(self) -> str:
        return read_token(self.controller.cluster_token_file)

    @property
    def kafka_bootstrap(self) -> str:
        """The Kafka listeners of the brokers running now, as `bootstrap.servers` takes them."""
        return ",".join(
            b.kafka[KAFKA_LISTENER]
            for b in self.brokers.values()
            if KAFKA_LISTENER in b.kafka and b.process is not None and b.process.poll() is None
        )

    def kafka_config(self, **extra: Any) -> dict[str, Any]:
        """librdkafka's configuration of the `admin` principal (the admin token as password, over
        SASL/SCRAM-SHA-512) for the brokers running now, with `extra` on top (librdkafka's names)."""
        return {
            "bootstrap.servers": self.kafka_bootstrap,
            **KafkaSecurity.admin(read_token(self.controller.admin_token_file)).librdkafka_config(),
            **extra,
        }

    def described(self, index: int) -> dict[str, Any] | None:
        """`GET /v1/cluster` of controller `index` alone (no failover); None if it does not answer."""
        controller = self.controllers[index]
        if controller.process is None or controller.process.poll() is not None:
            return None
        try:
            reply = httpx.get(
                f"{controller.url}/v1/cluster",
                headers={"Authorization": f"Bearer {read_token(controller.admin_token_file)}"},
                timeout=1,
                trust_env=False,
            )
        except (httpx.HTTPError, ClientError):
            return None
        described: dict[str, Any] | None = reply.json() if reply.status_code == 200 else None
        return described

    def named_active(self, indices: Sequence[int] | None = None) -> int | None:
        """The index in `controllers` of the controller that every one of `indices` (default: all)
        that answers names as active; None while they disagree, name none, or none answers."""
        named: set[int | None] = set()
        for i in range(len(self.controllers)) if indices is None else indices:
            described = self.described(i)
            if described is not None:
                active = described.get("activeController")
                named.add(None if active is None else self.controller_index(active))
        return next(iter(named)) if len(named) == 1 else None

    def controller_index(self, active: Mapping[str, Any]) -> int | None:
        found = [i for i, c in enumerate(self.controllers) if c.url == str(active.get("url", "")).rstrip("/")]
        return found[0] if found else None

    def active_controller(self, *, timeout: float = 30.0, other_than: int | None = None) -> int:
        """The index of the controller that every running one names as active (waits for that)."""
        found: int = wait_for(
            lambda: (i := self.named_active()) is not None and i != other_than and i + 1,
            timeout=timeout,
            what="the controllers to agree on an active one" + ("" if other_than is None else " (a new one)"),
        )
        return found - 1

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
            controller_url=self.controller_urls,
            cluster_token_file=self.controller.cluster_token_file,
            cluster_id=self.controller.cluster_id,
            admin_token_file=self.controller.admin_token_file,
            settings={**{k.replace("_", "."): v for k, v in settings.items()}, **(properties or {})},
        )
        self.brokers[node_id] = broker
        self.stack.callback(broker.kill)
        broker.format()
        if start:
            broker.start()
        return broker

    def applied_offset(self, node_id: int) -> int:
        """The last metadata record broker `node_id` applied (its `jbod_metadata_last_applied_offset`)."""
        text = httpx.get(f"{self.brokers[node_id].url}/metrics", timeout=10, trust_env=False).text
        for family in text_string_to_metric_families(text):
            if family.name == "jbod_metadata_last_applied_offset":
                return int(family.samples[0].value)
        raise AssertionError(f"broker {node_id} exports no jbod_metadata_last_applied_offset")

    def wait_until_applied(self, *, timeout: float = 60.0) -> None:
        """Waits until every running broker applied the metadata log up to its end now: what the
        controller committed (a credential, an ACL, a quota) is then in force at every broker."""
        last = int(self.admin.metadata(from_offset=0, max_records=1)["endOffset"]) - 1
        running = [n for n, b in self.brokers.items() if b.process is not None and b.process.poll() is None]
        wait_for(
            lambda: all(self.applied_offset(n) >= last for n in running),
            timeout=timeout,
            what=f"brokers {running} to apply the metadata log up to offset {last}",
        )

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
    stack: contextlib.ExitStack,
    base: Path,
    *,
    cluster_id: str = "it",
    controller_args: Sequence[str] = (),
    quorum: bool = False,
    admin_timeout: float = 30.0,
) -> Cluster:
    """A running controller in `base/controller` (with `controller_args`) and its admin client, no
    broker yet; everything is stopped when `stack` closes.

    With `quorum`: a 3-member etcd in `base/etcd` and three controllers `base/controller-1..3`
    (`--node-id 1..3`, the same cluster and admin tokens, `controller_args` each), returned once
    they agree on an active one; the admin client (and every broker and client of the tests) is
    given all three URLs."""
    if not quorum:
        controller = LocalController(
            data_dir=base / "controller", cluster_id=cluster_id, extra_args=list(controller_args)
        ).start()
        stack.callback(controller.kill)
        admin = ControllerClient(
            controller.url, token=read_token(controller.admin_token_file), timeout=admin_timeout
        )
        stack.callback(admin.close)
        return Cluster(base=base, stack=stack, controller=controller, admin=admin)

    etcd = EtcdCluster(base / "etcd", 3)
    stack.callback(etcd.stop)
    etcd.start()
    tokens = {"cluster.token": secrets.token_urlsafe(32), "admin.token": secrets.token_urlsafe(32)}
    controllers = []
    for node_id in (1, 2, 3):
        data_dir = base / f"controller-{node_id}"
        data_dir.mkdir(parents=True)
        for name, token in tokens.items():
            (data_dir / name).write_text(token + "\n")
            (data_dir / name).chmod(0o600)
        controller = LocalController(
            data_dir=data_dir,
            cluster_id=cluster_id,
            extra_args=["--etcd-endpoints", etcd.endpoints, "--node-id", str(node_id), *controller_args],
        )
        stack.callback(controller.kill)  # registered first: a failed start is killed too
        controllers.append(controller.start())
    admin = ControllerClient(
        ",".join(c.url for c in controllers), token=tokens["admin.token"], timeout=admin_timeout
    )
    stack.callback(admin.close)
    cluster = Cluster(
        base=base, stack=stack, controller=controllers[0], admin=admin, controllers=controllers, etcd=etcd
    )
    cluster.active_controller()
    return cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with contextlib.ExitStack() as stack:
        yield start_cluster(stack, tmp_path)
