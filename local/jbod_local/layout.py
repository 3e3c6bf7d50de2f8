"""The local cluster's directory (DIR, `./.jbod-local` by default) and its state file
`cluster.json`: what `jbodctl local up` decided once (cluster id, ports, disks, token paths) and
the pids it started; and the lock under which a command changes the cluster.

Layout of the cluster directory:

    cluster.json                what `up` started: cluster id, ports, URLs, pids, token paths, disks,
                                the brokers' config keys (a quorum's: whether etcd may run on a
                                known-bad version)
    .jbodctl.lock               held by the command changing the cluster (up, down, fail/restore-disk)
    tokens/admin.token          admin bearer token (also accepted by the brokers' own API)
    tokens/cluster.token        cluster (broker-to-controller) bearer token
    controller/                 the controller's data dir (metadata log)
    controller-N/, etcd/        a quorum's: controller N's data dir; the etcd members' data
    broker-N/server.properties  written by `up` from cluster.json
    broker-N/metadata/          the broker's metadata.log.dir
    broker-N/disk-K/            log dir K of broker N (K = 1..disks)
    broker-N/.failed-disk-K     a disk taken away by `fail-disk` (disk-K is then a marker file);
                                with --loop, a marker file: disk-K's filesystem is shut down
    broker-N/disk-K.img         with --loop: the ext4 image loop-mounted at disk-K
    tls/                        with `up --tls`: the CA bundle (ca.pem), the CA's key and every
                                process's keystore (`jbod_local.certs`)
    telemetry/                  every broker's disk samples (`telemetry.dir`), the input of
                                `jbod-pipeline --telemetry` (`jbodctl local env`: JBOD_TELEMETRY_DIR)
    logs/controller.log, logs/broker-N.log (a quorum's: logs/controller-N.log, logs/etcd-K.log)

Guarantees:
* `cluster.json` is written atomically (temp file, fsync, rename): a reader sees the old layout or
  the new one, never a part.
* Commands that change the cluster run one at a time per directory (`exclusive`: the others fail
  at once).
* A process is reported running only if its pid runs *and* its command line names its data dir or
  config path, so a recycled pid is never taken for it.
* No cluster in DIR, a damaged cluster.json, an unknown broker or controller raise
  `LocalClusterError` with one line.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from jbod_client.controller import ControllerClient, read_token
from jbod_local.processes import LocalClusterError, process_alive
from jbod_local.quorum import ControllerNode, EtcdNode
from jbod_runtime import durable_files

DEFAULT_DIR = Path(".jbod-local")
STATE_FILE = "cluster.json"
LOCK_FILE = ".jbodctl.lock"
STATE_VERSION = 1
HOST = "127.0.0.1"
# The security protocol of every local broker's Kafka listener (SASL/PLAIN and SCRAM-SHA-512);
# with `up --tls`, SASL_SSL.
KAFKA_PROTOCOL = "SASL_PLAINTEXT"
KAFKA_TLS_PROTOCOL = "SASL_SSL"


@dataclass(frozen=True)
class BrokerLayout:
    """One broker: where its files are, its port, and its pid while it may be running."""

    broker_id: int
    work_dir: Path
    disks: tuple[Path, ...]
    port: int
    pid: int | None = None
    directory_ids: tuple[str | None, ...] = ()  # per disk, read from meta.properties by `up`
    kafka_port: int = 0  # the Kafka listener's (SASL_PLAINTEXT); 0 in a cluster.json from before it
    ca_file: Path | None = None  # with `up --tls`: the CA bundle; https and SASL_SSL listeners
    rack: str | None = None  # with `up --racks`: its `broker.rack`

    @property
    def url(self) -> str:
        return f"{'https' if self.ca_file else 'http'}://{HOST}:{self.port}"

    @property
    def kafka_protocol(self) -> str:
        return KAFKA_TLS_PROTOCOL if self.ca_file else KAFKA_PROTOCOL

    @property
    def kafka_address(self) -> str:
        """`host:port` of the broker's Kafka listener (what Kafka clients bootstrap from)."""
        return f"{HOST}:{self.kafka_port}"

    @property
    def listeners(self) -> str:
        """The broker's `listeners`: its HTTP API and its Kafka listener."""
        return f"{self.url},{self.kafka_protocol}://{self.kafka_address}"

    @property
    def config_path(self) -> Path:
        return self.work_dir / "server.properties"

    @property
    def metadata_dir(self) -> Path:
        return self.work_dir / "metadata"

    def image_path(self, index: int) -> Path:
        """The ext4 image of disk `index` (1-based) in loop mode."""
        return self.work_dir / f"disk-{index}.img"

    def failed_path(self, index: int) -> Path:
        """Where `fail-disk` moves disk `index` (1-based)."""
        return self.work_dir / f".failed-disk-{index}"

    def disk_failed(self, index: int) -> bool:
        return self.failed_path(index).exists()

    def failed_disks(self) -> list[int]:
        return [i for i in range(1, len(self.disks) + 1) if self.disk_failed(i)]

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerId": self.broker_id,
            "workDir": str(self.work_dir),
            "configPath": str(self.config_path),
            "disks": [str(d) for d in self.disks],
            "directoryIds": list(self.directory_ids),
            "metadataDir": str(self.metadata_dir),
            "port": self.port,
            "url": self.url,
            "kafkaPort": self.kafka_port,
            "kafkaAddress": self.kafka_address,
            "pid": self.pid,
            **({"caFile": str(self.ca_file)} if self.ca_file else {}),
            **({"rack": self.rack} if self.rack else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BrokerLayout:
        return cls(
            broker_id=int(data["brokerId"]),
            work_dir=Path(data["workDir"]),
            disks=tuple(Path(d) for d in data["disks"]),
            port=int(data["port"]),
            pid=None if data.get("pid") is None else int(data["pid"]),
            directory_ids=tuple(data.get("directoryIds") or ()),
            kafka_port=int(data.get("kafkaPort") or 0),
            ca_file=Path(data["caFile"]) if data.get("caFile") else None,
            rack=str(data["rack"]) if data.get("rack") else None,
        )


@dataclass(frozen=True)
class ClusterLayout:
    """Everything `up` decided once and the pids it started: the content of `cluster.json`."""

    root: Path
    cluster_id: str
    controllers: tuple[ControllerNode, ...]  # one (node id None), or a quorum: nodes 1..N
    brokers: tuple[BrokerLayout, ...]
    loop_disk_mib: int | None = None  # every disk is a loop-mounted ext4 image of this size
    etcd: tuple[EtcdNode, ...] = ()  # a quorum's etcd members
    # `up --accept-etcd-data-loss-risk` was given once: etcd may run on a known-bad version
    # (`jbod_local.etcd_binary`) at this and every later `up`, with a warning each time.
    etcd_data_loss_risk_accepted: bool = False
    tls: bool = False  # `up --tls`: every process on TLS only (certificates in DIR/tls)
    # `server.properties` keys every broker gets (topic auto-creation: `jbod_local.supervisor`'s
    # defaults and `up --broker-config`), chosen when the cluster is created.
    broker_config: Mapping[str, str] = field(default_factory=dict, hash=False)

    @property
    def ca_file(self) -> Path | None:
        """The CA bundle clients verify the cluster's https and SASL_SSL listeners with."""
        return self.root / "tls" / "ca.pem" if self.tls else None

    @property
    def loop(self) -> bool:
        return self.loop_disk_mib is not None

    @property
    def quorum(self) -> bool:
        return any(c.node_id is not None for c in self.controllers)

    @property
    def state_path(self) -> Path:
        return self.root / STATE_FILE

    @property
    def controller_url(self) -> str:
        """The controller's URL; a quorum's is the comma-separated list of every controller's."""
        return ",".join(c.url for c in self.controllers)

    @property
    def admin_token_file(self) -> Path:
        return self.root / "tokens" / "admin.token"

    @property
    def cluster_token_file(self) -> Path:
        return self.root / "tokens" / "cluster.token"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def telemetry_dir(self) -> Path:
        """Where every broker writes its disk samples (`telemetry.dir`) for `jbod-pipeline`."""
        return self.root / "telemetry"

    def broker_log(self, broker_id: int) -> Path:
        return self.logs_dir / f"broker-{broker_id}.log"

    def broker(self, broker_id: int) -> BrokerLayout:
        for broker in self.brokers:
            if broker.broker_id == broker_id:
                return broker
        known = ", ".join(str(b.broker_id) for b in self.brokers)
        raise LocalClusterError(f"no broker {broker_id} in the local cluster (brokers: {known})")

    def node(self, node_id: int | None) -> ControllerNode:
        for node in self.controllers:
            if node.node_id == node_id:
                return node
        known = ", ".join(str(c.node_id) for c in self.controllers)
        raise LocalClusterError(f"no controller {node_id} in the local cluster (controllers: {known})")

    def with_controller(self, node: ControllerNode) -> ClusterLayout:
        return replace(
            self, controllers=tuple(node if c.node_id == node.node_id else c for c in self.controllers)
        )

    def ports(self) -> set[int]:
        """Every port the cluster's processes listen on."""
        etcd = {p for e in self.etcd for p in (e.member.client_port, e.member.peer_port)}
        kafka = {b.kafka_port for b in self.brokers if b.kafka_port}
        return {*(c.port for c in self.controllers), *(b.port for b in self.brokers), *kafka, *etcd}

    def with_broker(self, broker: BrokerLayout) -> ClusterLayout:
        return replace(
            self, brokers=tuple(broker if b.broker_id == broker.broker_id else b for b in self.brokers)
        )

    def admin_token(self) -> str:
        return read_token(self.admin_token_file)

    def controller(self, timeout: float = 10.0) -> ControllerClient:
        return ControllerClient(
            self.controller_url, token=self.admin_token(), timeout=timeout, ca_file=self.ca_file
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "clusterId": self.cluster_id,
            "dir": str(self.root),
            **(
                {
                    "controllers": [c.to_json() for c in self.controllers],
                    "etcd": [e.to_json() for e in self.etcd],
                    "etcdDataLossRiskAccepted": self.etcd_data_loss_risk_accepted,
                }
                if self.quorum
                else {"controller": self.controllers[0].to_json()}
            ),
            "adminTokenFile": str(self.admin_token_file),
            "clusterTokenFile": str(self.cluster_token_file),
            "telemetryDir": str(self.telemetry_dir),
            "loopDiskMiB": self.loop_disk_mib,
            "tls": self.tls,
            **({"caFile": str(self.ca_file)} if self.ca_file else {}),
            "brokerConfig": dict(self.broker_config),
            "brokers": [{**b.to_json(), "log": str(self.broker_log(b.broker_id))} for b in self.brokers],
        }

    @classmethod
    def from_json(cls, root: Path, data: Mapping[str, Any]) -> ClusterLayout:
        if "controllers" in data:
            controllers = tuple(
                ControllerNode.from_json(root, c, int(c["nodeId"])) for c in data["controllers"]
            )
        else:
            controllers = (ControllerNode.from_json(root, data["controller"], None),)
        return cls(
            root=root,
            cluster_id=str(data["clusterId"]),
            controllers=controllers,
            brokers=tuple(BrokerLayout.from_json(b) for b in data["brokers"]),
            loop_disk_mib=None if data.get("loopDiskMiB") is None else int(data["loopDiskMiB"]),
            etcd=tuple(EtcdNode.from_json(e) for e in data.get("etcd") or ()),
            etcd_data_loss_risk_accepted=data.get("etcdDataLossRiskAccepted") is True,
            tls=data.get("tls") is True,
            broker_config={str(k): str(v) for k, v in (data.get("brokerConfig") or {}).items()},
        )


def resolve_root(root: Path) -> Path:
    return root.expanduser().resolve()


def read_layout(root: Path) -> ClusterLayout:
    """The layout in `root`/cluster.json; `LocalClusterError` if there is no cluster there."""
    path = root / STATE_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LocalClusterError(f"no local cluster in {root} (start one with: jbodctl local up)") from None
    except (OSError, ValueError) as exc:
        raise LocalClusterError(f"cannot read {path}: {exc}") from exc
    try:
        return ClusterLayout.from_json(root, data)
    except (KeyError, TypeError, ValueError) as exc:
        raise LocalClusterError(f"{path} is damaged ({exc!r}); remove {root} and run up again") from exc


def write_layout(layout: ClusterLayout) -> None:
    """Write cluster.json atomically (temp file, fsync, rename)."""
    layout.root.mkdir(parents=True, exist_ok=True)
    data = (json.dumps(layout.to_json(), indent=2) + "\n").encode()
    durable_files.write_atomically(layout.state_path, data)


@contextlib.contextmanager
def exclusive(root: Path) -> Iterator[None]:
    """One changing command at a time per cluster directory (`flock` on DIR/.jbodctl.lock)."""
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise LocalClusterError(
            f"another jbodctl local command is changing {root}; try again later"
        ) from None
    try:
        yield
    finally:
        os.close(fd)


def controller_alive(layout: ClusterLayout) -> bool:
    """The controller runs (of a quorum: at least one of them)."""
    return any(c.alive() for c in layout.controllers)


def broker_alive(broker: BrokerLayout) -> bool:
    return process_alive(broker.pid, broker.config_path)
