"""A local cluster as real processes: one `jbod-controller` (or, with `controllers=3|5`, a quorum
of them on a local etcd cluster: `jbod_local.quorum`) and N `jbod-agent` brokers with JBOD disks
under one directory (`jbodctl local up|down|status|fail-disk|restore-disk`).

Layout of the cluster directory (DIR, `./.jbod-local` by default):

    cluster.json                what `up` started: cluster id, ports, URLs, pids, token paths, disks
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
    telemetry/                  every broker's disk samples (`telemetry.dir`), the input of
                                `jbod-pipeline --telemetry` (`jbodctl local env`: JBOD_TELEMETRY_DIR)
    logs/controller.log, logs/broker-N.log (a quorum's: logs/controller-N.log, logs/etcd-K.log)

Guarantees:
* `up` is idempotent: on a running cluster it starts nothing; after `down` it restarts the same
  processes on the same data (same cluster id, same directory ids); after a crash it starts only
  the processes that are down, each on its saved port unless another program listens there (a
  port in TIME_WAIT is free: our servers bind with SO_REUSEADDR), and restarts running brokers
  only if a controller had to move (a quorum's etcd members keep their ports); it starts etcd,
  then the controllers (one of a quorum rejoins as a standby), then the brokers; it returns only
  once every broker is registered and unfenced, and stops what it started if that does not happen
  in time. `down` stops the brokers, then the controllers, then etcd.
* Processes are detached (own session) and identified by pid *and* command line (their data dir or
  config path), so a recycled pid is never signalled and a dead process is never reported running.
* `cluster.json` is written atomically and lists a pid only while that process may be running;
  commands that change the cluster run one at a time per directory (the others fail at once).
* A failed disk needs no root: its dir is renamed away and a marker file is left at its path, so the
  running broker's disk probe finds the volume gone, and a restarted broker starts with the dir
  offline (unreadable) instead of formatting a fresh one. `restore_disk` puts the dir back and
  restarts the broker, as a dir that went offline only comes back after a restart (as in Kafka).
* With `loop` (root only) every disk is an ext4 image loop-mounted at its path, and a failed disk
  is a real one: its filesystem is shut down (EXT4_IOC_SHUTDOWN, every later I/O fails with EIO);
  `restore_disk` unmounts and mounts it again. `down` unmounts every disk and detaches its loop
  device; `up` mounts them again (and shuts down again those still marked failed).
* Every user mistake (unknown broker or disk, no cluster in DIR, a broker that is not running)
  raises `LocalClusterError` with one line, before anything is changed.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import secrets
import shutil
import socket
import struct
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from jbod_client import durable_files
from jbod_client.controller import ClientError, ControllerClient, read_token
from jbod_core import meta_properties
from jbod_core.ids import random_uuid
from jbod_local import processes, quorum
from jbod_local.processes import (
    LocalBroker,
    await_readyz,
    console_script,
    process_alive,
    spawn_detached,
    stop_processes,
)
from jbod_local.quorum import ControllerNode, EtcdNode

DEFAULT_DIR = Path(".jbod-local")
STATE_FILE = "cluster.json"
LOCK_FILE = ".jbodctl.lock"
STATE_VERSION = 1
HOST = "127.0.0.1"

# Short timeouts so that a failure shows within seconds (a demo, not production defaults).
CONTROLLER_SESSION_TIMEOUT_MS = 3000
QUORUM_SESSION_TIMEOUT_MS = 6000
BROKER_SETTINGS: dict[str, str] = {
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": str(CONTROLLER_SESSION_TIMEOUT_MS),
    "log.dir.probe.interval.ms": "250",
    "replica.lag.time.max.ms": "5000",
    "min.insync.replicas": "2",
    "log.dir.failure.timeout.ms": "10000",
    "telemetry.interval.ms": "5000",  # a sample per dir every 5 s (and one at start)
}
FAILED_MARKER_TEXT = (
    "This disk was failed by `jbodctl local fail-disk`; its data is in {moved}.\n"
    "Run `jbodctl local restore-disk {broker} {disk}` to put it back.\n"
)

EXT4_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32)
EXT4_GOING_FLAGS_NOLOGFLUSH = 2
LOOP_TOOLS = ("mkfs.ext4", "losetup", "mount", "umount", "blockdev")
DEFAULT_DISK_MIB = 64

Report = Callable[[str], None]
LocalClusterError = processes.LocalClusterError  # a user mistake or a misbehaving cluster (one line)


def _quiet(_message: str) -> None:
    pass


# -- the persisted layout ----------------------------------------------------------------------


@dataclass(frozen=True)
class BrokerLayout:
    """One broker: where its files are, its port, and its pid while it may be running."""

    broker_id: int
    work_dir: Path
    disks: tuple[Path, ...]
    port: int
    pid: int | None = None
    directory_ids: tuple[str | None, ...] = ()  # per disk, read from meta.properties by `up`

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

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
            "pid": self.pid,
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
        return {*(c.port for c in self.controllers), *(b.port for b in self.brokers), *etcd}

    def with_broker(self, broker: BrokerLayout) -> ClusterLayout:
        return replace(
            self, brokers=tuple(broker if b.broker_id == broker.broker_id else b for b in self.brokers)
        )

    def admin_token(self) -> str:
        return read_token(self.admin_token_file)

    def controller(self, timeout: float = 10.0) -> ControllerClient:
        return ControllerClient(self.controller_url, token=self.admin_token(), timeout=timeout)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "clusterId": self.cluster_id,
            "dir": str(self.root),
            **(
                {
                    "controllers": [c.to_json() for c in self.controllers],
                    "etcd": [e.to_json() for e in self.etcd],
                }
                if self.quorum
                else {"controller": self.controllers[0].to_json()}
            ),
            "adminTokenFile": str(self.admin_token_file),
            "clusterTokenFile": str(self.cluster_token_file),
            "telemetryDir": str(self.telemetry_dir),
            "loopDiskMiB": self.loop_disk_mib,
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


# -- processes ---------------------------------------------------------------------------------


def controller_alive(layout: ClusterLayout) -> bool:
    """The controller runs (of a quorum: at least one of them)."""
    return any(c.alive() for c in layout.controllers)


def broker_alive(broker: BrokerLayout) -> bool:
    return process_alive(broker.pid, broker.config_path)


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


def _port_free(port: int) -> bool:
    """True iff our servers could listen on `port` now. They bind with SO_REUSEADDR, and so does
    this check: a port left in TIME_WAIT by a killed process is free for them, a listener is not."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def _free_port(taken: set[int]) -> int:
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((HOST, 0))
            port: int = sock.getsockname()[1]
        if port not in taken:
            return port


def _write_token(path: Path) -> None:
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(secrets.token_urlsafe(32) + "\n")


# -- loop-mounted disks (root only) --------------------------------------------------------------


def check_loop_support() -> None:
    if os.geteuid() != 0:
        raise LocalClusterError("loop-mounted disks need root (losetup, mount); run without --loop")
    missing = [tool for tool in LOOP_TOOLS if shutil.which(tool) is None]
    if missing:
        raise LocalClusterError(f"loop-mounted disks need {', '.join(missing)}; install them or drop --loop")


def _tool(*args: str) -> str:
    result = subprocess.run(args, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise LocalClusterError(f"{' '.join(args)} failed: {result.stderr.strip() or result.returncode}")
    return result.stdout.strip()


def _unescape_mount_path(text: str) -> str:
    return text.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def mount_of(path: Path) -> tuple[str, str] | None:
    """(source device, super options) of the filesystem mounted exactly at `path`, if any."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    found = None
    for line in lines:
        fields, _, tail = line.partition(" - ")
        parts = fields.split()
        if len(parts) > 4 and _unescape_mount_path(parts[4]) == str(path):
            rest = tail.split()
            found = (rest[1], rest[2] if len(rest) > 2 else "")  # the last mount on a path wins
    return found


def mount_points() -> set[Path]:
    """Every path something is mounted at (/proc/self/mountinfo)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return set()
    return {
        Path(_unescape_mount_path(parts[4])) for parts in (line.split() for line in lines) if len(parts) > 4
    }


def mount_loop_disk(image: Path, path: Path, *, size_mib: int) -> None:
    """Loop-mount the ext4 `image` at `path` (creating and formatting it first if missing)."""
    path.mkdir(parents=True, exist_ok=True)
    if mount_of(path) is not None:
        return
    if not image.exists():
        with open(image, "wb") as handle:
            handle.truncate(size_mib * 1024 * 1024)
        _tool("mkfs.ext4", "-q", "-F", "-E", "nodiscard", str(image))
    device = _tool("losetup", "--find", "--show", str(image))
    try:
        _tool("blockdev", "--setrw", device)  # loop devices may attach read-only
        _tool("mount", "-t", "ext4", device, str(path))
    except LocalClusterError:
        subprocess.run(["losetup", "-d", device], capture_output=True, check=False)
        raise


def unmount_loop_disk(path: Path) -> None:
    """Lazily unmount `path` and detach its loop device (no-op when nothing is mounted there)."""
    mounted = mount_of(path)
    if mounted is None:
        return
    _tool("umount", "-l", str(path))
    if mounted[0].startswith("/dev/loop"):
        subprocess.run(["losetup", "-d", mounted[0]], capture_output=True, check=False)


def shut_down_filesystem(path: Path) -> None:
    """EXT4_IOC_SHUTDOWN: from now on every read, write or fsync under `path` returns EIO."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_NOLOGFLUSH))
    finally:
        os.close(fd)


def _mount_disks(layout: ClusterLayout, brokers: Iterable[BrokerLayout]) -> None:
    """Mount every loop disk of `brokers`; a disk still marked failed is shut down again."""
    assert layout.loop_disk_mib is not None
    for broker in brokers:
        for index, disk in enumerate(broker.disks, start=1):
            was_mounted = mount_of(disk) is not None
            mount_loop_disk(broker.image_path(index), disk, size_mib=layout.loop_disk_mib)
            if broker.disk_failed(index) and not was_mounted:
                shut_down_filesystem(disk)


def _unmount_disks(layout: ClusterLayout) -> None:
    for broker in layout.brokers:
        for disk in broker.disks:
            unmount_loop_disk(disk)


# -- up ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UpResult:
    layout: ClusterLayout
    already_up: bool
    started: tuple[str, ...]  # "controller", "broker 1", ...
    seconds: float
    notes: tuple[str, ...] = ()


def _new_layout(
    root: Path, *, controllers: int, brokers: int, disks: int, loop_disk_mib: int | None
) -> ClusterLayout:
    if not 1 <= brokers <= 9:
        raise LocalClusterError(f"--brokers must be between 1 and 9, got {brokers}")
    if not 1 <= disks <= 8:
        raise LocalClusterError(f"--disks must be between 1 and 8, got {disks}")
    quorum.check_count(controllers)
    etcd = quorum.plan_etcd(root) if controllers > 1 else ()
    taken = {p for e in etcd for p in (e.member.client_port, e.member.peer_port)}
    nodes = []
    for node_id in range(1, controllers + 1) if controllers > 1 else [None]:
        nodes.append(quorum.plan_controller(root, node_id, _free_port(taken)))
        taken.add(nodes[-1].port)
    layouts = []
    for broker_id in range(1, brokers + 1):
        port = _free_port(taken)
        taken.add(port)
        work_dir = root / f"broker-{broker_id}"
        layouts.append(
            BrokerLayout(
                broker_id=broker_id,
                work_dir=work_dir,
                disks=tuple(work_dir / f"disk-{k}" for k in range(1, disks + 1)),
                port=port,
            )
        )
    return ClusterLayout(
        root=root,
        cluster_id=str(random_uuid(random.SystemRandom())),
        controllers=tuple(nodes),
        brokers=tuple(layouts),
        loop_disk_mib=loop_disk_mib,
        etcd=etcd,
    )


def _refresh_ports(layout: ClusterLayout) -> ClusterLayout:
    """Keep every saved port that is still free; pick new ones for ports something else took
    (etcd members keep theirs: etcd's membership names them)."""
    taken = layout.ports()
    controllers = []
    for node in layout.controllers:
        port = node.port
        if not node.alive() and not _port_free(port):
            port = _free_port(taken)
            taken.add(port)
        controllers.append(replace(node, port=port))
    brokers = []
    for broker in layout.brokers:
        port = broker.port
        if not broker_alive(broker) and not _port_free(port):
            port = _free_port(taken)
            taken.add(port)
        brokers.append(replace(broker, port=port))
    return replace(layout, controllers=tuple(controllers), brokers=tuple(brokers))


def session_timeout_ms(layout: ClusterLayout) -> int:
    """A quorum's failover (up to a lease, `--lease-ms` 2000, and a replay) must fit in a session."""
    return QUORUM_SESSION_TIMEOUT_MS if layout.quorum else CONTROLLER_SESSION_TIMEOUT_MS


def _local_broker(layout: ClusterLayout, broker: BrokerLayout) -> LocalBroker:
    return LocalBroker(
        node_id=broker.broker_id,
        work_dir=broker.work_dir,
        log_dirs=list(broker.disks),
        controller_url=layout.controller_url,
        cluster_token_file=layout.cluster_token_file,
        cluster_id=layout.cluster_id,
        metadata_dir=broker.metadata_dir,
        settings={
            "listeners": broker.url,
            "admin.token.file": str(layout.admin_token_file),
            "telemetry.dir": str(layout.telemetry_dir),
            **BROKER_SETTINGS,
            "broker.session.timeout.ms": str(session_timeout_ms(layout)),
        },
    )


def _needs_format(broker: BrokerLayout) -> bool:
    failed = {broker.disks[i - 1] for i in broker.failed_disks()}
    for path in (*broker.disks, broker.metadata_dir):
        if path in failed:  # stays offline, never formatted afresh
            continue
        try:
            if not (path / meta_properties.FILE_NAME).exists():
                return True
        except OSError:
            continue  # unreadable: format reports and skips it, the broker starts without it
    return False


def _format(layout: ClusterLayout, brokers: Sequence[BrokerLayout]) -> None:
    """`jbod-storage format --ignore-formatted` for every broker with an unformatted dir (in parallel)."""
    running = []
    for broker in brokers:
        local = _local_broker(layout, broker)
        local.write_config()
        if _needs_format(broker):
            process = subprocess.Popen(
                local.format_command(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            running.append((broker, process))
    for broker, process in running:
        _out, err = process.communicate()
        if process.returncode != 0:
            raise LocalClusterError(
                f"jbod-storage format failed for broker {broker.broker_id}: {err.strip() or 'no output'}"
            )


def _directory_ids(broker: BrokerLayout) -> tuple[str | None, ...]:
    """Each disk's directory id from its meta.properties (the known one if it cannot be read)."""
    ids: list[str | None] = []
    for index, disk in enumerate(broker.disks, start=1):
        known = broker.directory_ids[index - 1] if index <= len(broker.directory_ids) else None
        moved = broker.failed_path(index)
        path = moved if moved.is_dir() else disk
        try:
            directory_id = durable_files.read_meta_properties(path).directory_id
        except (OSError, ValueError):
            directory_id = None
        ids.append(known if directory_id is None else str(directory_id))
    return tuple(ids)


def _start_controller(layout: ClusterLayout, node: ControllerNode) -> ControllerNode:
    command = [
        console_script("jbod-controller"),
        "--data-dir",
        str(node.data_dir),
        "--cluster-id",
        layout.cluster_id,
        "--listen",
        f"{HOST}:{node.port}",
        "--cluster-token-file",
        str(layout.cluster_token_file),
        "--admin-token-file",
        str(layout.admin_token_file),
        "--broker-session-timeout-ms",
        str(session_timeout_ms(layout)),
        *quorum.quorum_args(node, layout.etcd),
    ]
    return replace(node, pid=spawn_detached(command, log_path=node.log_path))


def _exited(node: ControllerNode) -> Callable[[], str | None]:
    return lambda: None if node.alive() else "exited"


def _start_broker(layout: ClusterLayout, broker: BrokerLayout) -> BrokerLayout:
    pid = spawn_detached(
        [console_script("jbod-agent"), "--config", str(broker.config_path)],
        log_path=layout.broker_log(broker.broker_id),
    )
    return replace(broker, pid=pid)


def await_brokers(
    layout: ClusterLayout,
    broker_ids: Iterable[int],
    *,
    deadline: float,
    online_dirs: Mapping[int, Iterable[str]] | None = None,
) -> dict[int, dict[str, Any]]:
    """Wait until each broker is registered and unfenced in the controller's view (and, for those
    in `online_dirs`, has those dirs online); returns the controller's view of each."""
    waiting = set(broker_ids)
    wanted = {b: set(d) for b, d in (online_dirs or {}).items()}
    views: dict[int, dict[str, Any]] = {}
    with layout.controller(timeout=5.0) as client:
        while True:
            for broker_id in sorted(waiting):
                broker = layout.broker(broker_id)
                if not broker_alive(broker):
                    raise LocalClusterError(
                        f"broker {broker_id} exited: {_tail(layout.broker_log(broker_id))}"
                    )
            with contextlib.suppress(ClientError):
                for view in client.brokers():
                    broker_id = int(view["brokerId"])
                    if broker_id not in waiting or view["fenced"]:
                        continue
                    if not wanted.get(broker_id, set()) <= set(view["logDirs"]):
                        continue
                    views[broker_id] = view
                    waiting.discard(broker_id)
            if not waiting:
                return views
            if time.monotonic() > deadline:
                names = ", ".join(str(b) for b in sorted(waiting))
                raise LocalClusterError(
                    f"broker(s) {names} not registered and unfenced in time; see {layout.logs_dir}"
                )
            time.sleep(0.1)


def _ready_epochs(layout: ClusterLayout, broker_ids: Iterable[int]) -> dict[int, int]:
    """The epoch each broker process itself reports as registered and unfenced (`/readyz`)."""
    epochs = {}
    for broker_id in broker_ids:
        broker = layout.broker(broker_id)
        with contextlib.suppress(httpx.HTTPError, ValueError):
            response = httpx.get(f"{broker.url}/readyz", timeout=2, trust_env=False)
            if response.status_code == 200:
                epochs[broker_id] = int(response.json()["brokerEpoch"])
    return epochs


def await_brokers_ready(
    layout: ClusterLayout,
    broker_ids: Iterable[int],
    *,
    deadline: float,
    online_dirs: Mapping[int, Iterable[str]] | None = None,
) -> dict[int, dict[str, Any]]:
    """`await_brokers`, and also the running process itself says it is registered and unfenced with
    the epoch the controller shows (so an old registration from before a restart does not count)."""
    ids = sorted(set(broker_ids))
    while True:
        views = await_brokers(layout, ids, deadline=deadline, online_dirs=online_dirs)
        epochs = _ready_epochs(layout, ids)
        if all(epochs.get(b) == int(views[b]["brokerEpoch"]) for b in ids):
            return views
        if time.monotonic() > deadline:
            raise LocalClusterError(f"brokers did not become ready in time; see {layout.logs_dir}")
        time.sleep(0.1)


def up(
    root: Path,
    *,
    controllers: int | None = None,
    brokers: int | None = None,
    disks: int | None = None,
    fresh: bool = False,
    loop: bool = False,
    disk_size_mib: int = DEFAULT_DISK_MIB,
    timeout: float = 60.0,
    report: Report = _quiet,
) -> UpResult:
    """Create (first time) and start the local cluster in `root`; see the module's guarantees."""
    started_at = time.monotonic()
    root = resolve_root(root)
    if controllers is not None:
        quorum.check_count(controllers)
    if loop:
        check_loop_support()
        if disk_size_mib < 8:
            raise LocalClusterError(f"--disk-size must be at least 8 MiB, got {disk_size_mib}")
    if (
        fresh
        and root.exists()
        and not (root / STATE_FILE).exists()
        and any(p.name != LOCK_FILE for p in root.iterdir())
    ):
        raise LocalClusterError(f"{root} is not empty and holds no local cluster; refusing to --fresh it")
    with exclusive(root):
        if fresh and (root / STATE_FILE).exists():
            _down(read_layout(root), purge=True, grace=10.0)
            report(f"Removed the previous cluster in {root}")
        return _up(
            root,
            controllers=controllers,
            brokers=brokers,
            disks=disks,
            loop=loop,
            disk_size_mib=disk_size_mib,
            deadline=started_at + timeout,
            started_at=started_at,
            report=report,
        )


def _up(
    root: Path,
    *,
    controllers: int | None,
    brokers: int | None,
    disks: int | None,
    loop: bool,
    disk_size_mib: int,
    deadline: float,
    started_at: float,
    report: Report,
) -> UpResult:
    notes: list[str] = []
    if (root / STATE_FILE).exists():
        layout = read_layout(root)
        shape = (len(layout.brokers), len(layout.brokers[0].disks) if layout.brokers else 0)
        changed = (brokers is not None and brokers != shape[0]) or (disks is not None and disks != shape[1])
        if changed or (loop and not layout.loop) or controllers not in (None, len(layout.controllers)):
            kind = "loop-mounted" if layout.loop else "plain-directory"
            quorum_note = f"{len(layout.controllers)} controllers, " if layout.quorum else ""
            notes.append(
                f"Kept the existing layout ({quorum_note}{shape[0]} brokers x {shape[1]} {kind} disks); "
                "pass --fresh to create a new cluster"
            )
        if layout.loop:
            check_loop_support()
    else:
        layout = _new_layout(
            root,
            controllers=controllers or 1,
            brokers=brokers or 3,
            disks=disks or 3,
            loop_disk_mib=disk_size_mib if loop else None,
        )
        write_layout(layout)  # from now on the cluster id is fixed, even if starting fails
        report(f"Created cluster {layout.cluster_id} in {root}")
    running = [c.alive() for c in layout.controllers] + [e.alive() for e in layout.etcd]
    if all(running) and all(broker_alive(b) for b in layout.brokers):
        return UpResult(layout, True, (), time.monotonic() - started_at, tuple(notes))

    restart_controllers = [c.node_id for c in layout.controllers if not c.alive()]
    before = layout.controllers
    layout = _refresh_ports(layout)
    moved = [(old, new) for old, new in zip(before, layout.controllers, strict=True) if old.port != new.port]
    if moved:
        # Something else took a controller's port: the running brokers' server.properties name
        # the old URL, so they restart with the new one. On its own port they just reconnect.
        stop_processes([(b.pid, b.config_path) for b in layout.brokers if b.pid is not None], grace=10)
        layout = replace(layout, brokers=tuple(replace(b, pid=None) for b in layout.brokers))
        ports = ", ".join(str(old.port) for old, _new in moved)
        to = ", ".join(f"{new.name} to {new.port}" for _old, new in moved)
        notes.append(f"Port {ports} was taken: moved the {to} and restarted every broker")
    _write_token(layout.admin_token_file)
    _write_token(layout.cluster_token_file)
    layout.logs_dir.mkdir(parents=True, exist_ok=True)
    to_start = [b for b in layout.brokers if not broker_alive(b)]
    if layout.loop:
        _mount_disks(layout, to_start)
    _format(layout, to_start)
    layout = replace(
        layout, brokers=tuple(replace(b, directory_ids=_directory_ids(b)) for b in layout.brokers)
    )
    started: list[str] = []
    started_processes: list[tuple[int, Path]] = []
    try:
        if layout.etcd:
            etcd, indices = quorum.start_etcd(root, layout.etcd)
            layout = replace(layout, etcd=etcd)
            write_layout(layout)
            started += [etcd[i].name for i in indices]
            started_processes += [(etcd[i].pid or 0, etcd[i].member.data_dir) for i in indices]
            quorum.await_etcd(root, etcd, indices, deadline=deadline)
            if indices:
                report(
                    f"Started etcd ({', '.join(etcd[i].name for i in indices)}) on {quorum.endpoints(etcd)}"
                )
        nodes = [_start_controller(layout, layout.node(node_id)) for node_id in restart_controllers]
        for node in nodes:
            layout = layout.with_controller(node)
            started.append(node.name)
            started_processes.append((node.pid or 0, node.data_dir))
        write_layout(layout)
        for node in nodes:
            await_readyz(
                node.url,
                name="jbod-controller",
                log_path=node.log_path,
                deadline=deadline,
                exited=_exited(node),
                error=LocalClusterError,
            )
            report(f"Started {node.label} (pid {node.pid}) on {node.url}")
        for stopped in to_start:
            broker = _start_broker(layout, layout.broker(stopped.broker_id))
            layout = layout.with_broker(broker)
            started.append(f"broker {broker.broker_id}")
            assert broker.pid is not None
            started_processes.insert(0, (broker.pid, broker.config_path))
        write_layout(layout)
        # A restarted controller must see the brokers that kept running too.
        waiting = layout.brokers if restart_controllers else to_start
        if to_start:
            report(f"Started {len(to_start)} broker(s); waiting until they are registered and unfenced")
        else:
            report("Waiting until the running brokers are registered and unfenced again")
        await_brokers_ready(layout, [b.broker_id for b in waiting], deadline=deadline)
    except (LocalClusterError, OSError, KeyboardInterrupt):
        stop_processes(started_processes, grace=3)  # only what this call started
        write_layout(_forget_dead(layout))
        raise
    for broker in to_start:
        for index in broker.failed_disks():
            notes.append(
                f"Disk {index} of broker {broker.broker_id} is failed: it started without it "
                f"(restore it with: jbodctl local restore-disk {broker.broker_id} {index})"
            )
    return UpResult(layout, False, tuple(started), time.monotonic() - started_at, tuple(notes))


# -- down --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DownResult:
    root: Path
    stopped: tuple[str, ...]
    purged: bool
    kept_mount_points: tuple[Path, ...] = ()  # emptied by the purge, not removed


def purge_tree(root: Path) -> tuple[Path, ...]:
    """Delete `root` and everything under it, except mount points (`root` itself or below it):
    those are emptied and left in place. Returns the mount points kept; `LocalClusterError` (one
    line) if something cannot be deleted."""
    mounts = {m for m in mount_points() if m == root or root in m.parents}
    kept: list[Path] = []

    def remove(path: Path) -> None:
        holds_mount = any(m == path or path in m.parents for m in mounts)
        if not holds_mount:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
            return
        for child in path.iterdir():
            remove(child)
        if path in mounts:
            kept.append(path)
        elif not any(path.iterdir()):
            path.rmdir()

    try:
        remove(root)
    except OSError as exc:
        where = exc.filename or root
        raise LocalClusterError(f"cannot delete {where}: {exc.strerror or exc}") from None
    return tuple(sorted(kept))


def _forget_dead(layout: ClusterLayout) -> ClusterLayout:
    return replace(
        layout,
        controllers=tuple(c if c.alive() else replace(c, pid=None) for c in layout.controllers),
        brokers=tuple(b if broker_alive(b) else replace(b, pid=None) for b in layout.brokers),
        etcd=tuple(e if e.alive() else replace(e, pid=None) for e in layout.etcd),
    )


def _without_pids(layout: ClusterLayout) -> ClusterLayout:
    return replace(
        layout,
        controllers=tuple(replace(c, pid=None) for c in layout.controllers),
        brokers=tuple(replace(b, pid=None) for b in layout.brokers),
        etcd=tuple(replace(e, pid=None) for e in layout.etcd),
    )


def down(root: Path, *, purge: bool = False, grace: float = 10.0) -> DownResult:
    """Stop the brokers (SIGTERM: a controlled shutdown), then the controller(s), then etcd; SIGKILL after
    `grace`; forget the pids; with `purge`, delete the whole cluster directory (a mount point in
    it is emptied and left in place)."""
    layout = read_layout(resolve_root(root))
    with exclusive(layout.root):
        return _down(layout, purge=purge, grace=grace)


def _down(layout: ClusterLayout, *, purge: bool, grace: float) -> DownResult:
    root = layout.root
    stopped = [f"broker {b.broker_id}" for b in layout.brokers if broker_alive(b)]
    stop_processes([(b.pid, b.config_path) for b in layout.brokers if b.pid is not None], grace=grace)
    stopped += [c.name for c in layout.controllers if c.alive()]
    stop_processes([(c.pid, c.data_dir) for c in layout.controllers if c.pid is not None], grace=grace)
    stopped += quorum.stop_etcd(root, layout.etcd, grace=grace)
    if layout.loop:
        _unmount_disks(layout)
    kept: tuple[Path, ...] = ()
    if purge:
        kept = purge_tree(root)
    else:
        write_layout(_without_pids(layout))
    return DownResult(root=root, stopped=tuple(stopped), purged=purge, kept_mount_points=kept)


# -- status ------------------------------------------------------------------------------------


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


# -- disks -------------------------------------------------------------------------------------


def resolve_disk(layout: ClusterLayout, broker_id: int, disk: str) -> tuple[BrokerLayout, int]:
    """(broker, 1-based disk index) for DISK given as an index or a path; `LocalClusterError` else."""
    broker = layout.broker(broker_id)
    count = len(broker.disks)
    text = disk.strip()
    if text.isdigit():
        index = int(text)
        if not 1 <= index <= count:
            raise LocalClusterError(f"broker {broker_id} has disks 1..{count}, not {index}")
        return broker, index
    wanted = Path(text).expanduser().resolve()
    for index, path in enumerate(broker.disks, start=1):
        if path == wanted or path.name == text:
            return broker, index
    raise LocalClusterError(f"{disk!r} is not a disk of broker {broker_id} (give 1..{count} or its path)")


@dataclass(frozen=True)
class LeaderMove:
    topic: str
    partition: int
    old_leader: int
    new_leader: int


def leader_moves(before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]) -> list[LeaderMove]:
    """Partitions whose leader changed between two GET /v1/topics answers."""
    old = {(t["name"], p["partitionIndex"]): int(p["leader"]) for t in before for p in t["partitions"]}
    moves = []
    for t in after:
        for p in t["partitions"]:
            key = (t["name"], p["partitionIndex"])
            if key in old and old[key] != int(p["leader"]):
                moves.append(LeaderMove(t["name"], p["partitionIndex"], old[key], int(p["leader"])))
    return moves


@dataclass(frozen=True)
class DiskFailure:
    broker_id: int
    index: int
    path: Path
    moved_to: Path | None  # where the dir went (None with loop disks: the filesystem was shut down)
    directory_id: str | None
    failed_at: float  # the clock's reading when the disk was taken away
    offline_after: float | None  # seconds until the controller showed the dir offline; None: not in time
    leader_moves: tuple[LeaderMove, ...]


def _require_running(layout: ClusterLayout, broker: BrokerLayout) -> None:
    if not controller_alive(layout):
        raise LocalClusterError(
            f"the local cluster in {layout.root} is not running (start it with: jbodctl local up)"
        )
    if not broker_alive(broker):
        raise LocalClusterError(f"broker {broker.broker_id} is not running (start it with: jbodctl local up)")


def fail_disk(
    root: Path,
    broker_id: int,
    disk: str,
    *,
    wait: float = 15.0,
    report: Report = _quiet,
    clock: Callable[[], float] = time.monotonic,
) -> DiskFailure:
    """Fail disk `disk` of a running broker (rename + marker file, or with loop disks shut its
    filesystem down) and wait, at most `wait` seconds, until the controller shows its dir offline
    for that broker."""
    root = read_layout(resolve_root(root)).root  # no cluster there: say so before taking the lock
    with exclusive(root):
        return _fail_disk(read_layout(root), broker_id, disk, wait=wait, report=report, clock=clock)


def _fail_disk(
    layout: ClusterLayout,
    broker_id: int,
    disk: str,
    *,
    wait: float,
    report: Report,
    clock: Callable[[], float],
) -> DiskFailure:
    broker, index = resolve_disk(layout, broker_id, disk)
    path = broker.disks[index - 1]
    if broker.disk_failed(index):
        raise LocalClusterError(f"disk {index} of broker {broker_id} is already failed ({path})")
    _require_running(layout, broker)
    if layout.loop:
        check_loop_support()
        if mount_of(path) is None:
            raise LocalClusterError(f"disk {index} of broker {broker_id} is not mounted at {path}")
    try:
        directory_id: str | None = str(durable_files.read_meta_properties(path).directory_id)
    except (OSError, ValueError):
        directory_id = None
    with layout.controller(timeout=5.0) as client:
        before = client.list_topics()
        marker = broker.failed_path(index)
        moved_to: Path | None = None
        failed_at = clock()
        if layout.loop:
            shut_down_filesystem(path)
            marker.write_text(f"The filesystem at {path} was shut down by `jbodctl local fail-disk`\n")
            report(
                f"Failed disk {index} of broker {broker_id}: shut down the ext4 filesystem at {path} "
                "(EXT4_IOC_SHUTDOWN: every I/O on it now fails with EIO)"
            )
        else:
            os.rename(path, marker)
            moved_to = marker
            path.write_text(FAILED_MARKER_TEXT.format(moved=marker, broker=broker_id, disk=index))
            report(f"Failed disk {index} of broker {broker_id}: moved {path} to {marker}")
        offline_after: float | None = None
        deadline = failed_at + wait
        while clock() < deadline:
            with contextlib.suppress(ClientError):
                view = client.broker(broker_id)
                if directory_id is not None and directory_id in view["offlineLogDirs"]:
                    offline_after = clock() - failed_at
                    break
            time.sleep(0.1)
        after = client.list_topics() if offline_after is not None else before
    return DiskFailure(
        broker_id=broker_id,
        index=index,
        path=path,
        moved_to=moved_to,
        directory_id=directory_id,
        failed_at=failed_at,
        offline_after=offline_after,
        leader_moves=tuple(leader_moves(before, after)),
    )


@dataclass(frozen=True)
class DiskRestore:
    broker_id: int
    index: int
    path: Path
    directory_id: str | None
    restarted: bool
    seconds: float
    broker_epoch: int | None


def restore_disk(
    root: Path,
    broker_id: int,
    disk: str,
    *,
    timeout: float = 45.0,
    report: Report = _quiet,
) -> DiskRestore:
    """Put a disk failed by `fail_disk` back and restart its broker (if it runs), then wait until it
    is unfenced with every disk's dir online."""
    root = read_layout(resolve_root(root)).root
    with exclusive(root):
        return _restore_disk(read_layout(root), broker_id, disk, timeout=timeout, report=report)


def _restore_disk(
    layout: ClusterLayout, broker_id: int, disk: str, *, timeout: float, report: Report
) -> DiskRestore:
    started_at = time.monotonic()
    broker, index = resolve_disk(layout, broker_id, disk)
    path = broker.disks[index - 1]
    moved = broker.failed_path(index)
    if not broker.disk_failed(index):
        raise LocalClusterError(f"disk {index} of broker {broker_id} is not failed ({path})")
    if layout.loop:
        check_loop_support()
    elif path.is_dir():
        raise LocalClusterError(f"{path} is a directory again; move it away before restoring {moved}")
    running = broker_alive(broker)
    if running and not controller_alive(layout):
        raise LocalClusterError(f"the controller of {layout.root} is not running (run: jbodctl local up)")
    if running:
        report(f"Stopping broker {broker_id} (an offline dir comes back only after a restart)")
        stop_processes([(broker.pid, broker.config_path)] if broker.pid else [], grace=15)
        layout = layout.with_broker(replace(broker, pid=None))
        write_layout(layout)
    if layout.loop:
        assert layout.loop_disk_mib is not None
        unmount_loop_disk(path)
        moved.unlink()
        if running:
            mount_loop_disk(broker.image_path(index), path, size_mib=layout.loop_disk_mib)
            report(
                f"Restored disk {index} of broker {broker_id}: mounted {broker.image_path(index)} at {path} again"
            )
        else:
            report(
                f"Restored disk {index} of broker {broker_id}: unmounted the dead filesystem; up mounts it again"
            )
    else:
        path.unlink(missing_ok=True)
        os.rename(moved, path)
        report(f"Restored disk {index} of broker {broker_id}: moved {moved} back to {path}")
    if not running:
        return DiskRestore(broker_id, index, path, None, False, time.monotonic() - started_at, None)
    report(f"Starting broker {broker_id} again")
    broker = replace(layout.broker(broker_id), directory_ids=_directory_ids(broker))
    if not _port_free(broker.port):
        broker = replace(broker, port=_free_port(layout.ports()))
    layout = layout.with_broker(broker)
    _local_broker(layout, broker).write_config()
    broker = _start_broker(layout, broker)
    layout = layout.with_broker(broker)
    write_layout(layout)
    wanted = [
        d for i, d in enumerate(broker.directory_ids, start=1) if d is not None and not broker.disk_failed(i)
    ]
    views = await_brokers_ready(
        layout, [broker_id], deadline=started_at + timeout, online_dirs={broker_id: wanted}
    )
    return DiskRestore(
        broker_id=broker_id,
        index=index,
        path=path,
        directory_id=broker.directory_ids[index - 1],
        restarted=True,
        seconds=time.monotonic() - started_at,
        broker_epoch=int(views[broker_id]["brokerEpoch"]),
    )


def create_topic(
    layout: ClusterLayout,
    name: str,
    *,
    partitions: int,
    replication_factor: int,
    configs: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Create a topic through the controller; `LocalClusterError` on a non-zero error code."""
    with layout.controller() as client:
        reply = client.create_topic(
            name, partitions=partitions, replication_factor=replication_factor, configs=configs
        )
    if int(reply.get("errorCode", 0)) != 0:
        raise LocalClusterError(
            f"cannot create topic {name}: {reply.get('errorMessage')} (errorCode {reply['errorCode']})"
        )
    return reply
