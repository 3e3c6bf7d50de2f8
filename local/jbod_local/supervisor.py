"""A local cluster as real processes: one `jbod-controller` (or, with `controllers=3|5`, a quorum
of them on a local etcd cluster: `jbod_local.quorum`) and N `jbod-agent` brokers with JBOD disks
under one directory, started and stopped (`jbodctl local up|down`).

The directory and its `cluster.json` are `jbod_local.layout`'s, loop-mounted disks
`jbod_local.loop_disks`', `status` is `jbod_local.status` and `fail-disk|restore-disk` are
`jbod_local.disk_faults`.

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
* `cluster.json` lists a pid only while that process may be running; `up` and `down` hold the
  directory's lock (`layout.exclusive`).
* With `loop` (root only) every disk is an ext4 image loop-mounted at its path: `down` unmounts
  every disk and detaches its loop device; `up` mounts them again (and shuts down again those
  still marked failed by `fail-disk`).
* Every user mistake (a count or a disk size out of range, `--fresh` on a directory holding
  something else, no cluster in DIR, a `--broker-config` key or value the brokers would refuse)
  raises `LocalClusterError` with one line, before anything is changed.
* Every broker gets the topic auto-creation keys chosen when the cluster was created
  (`broker_config`: on by default, as Kafka), kept in cluster.json.
* Racks (`up --racks a,b,c`, a new cluster's): broker i gets `broker.rack` racks[(i - 1) % len],
  kept in cluster.json; `--broker-config replica.selector.class=...` (Kafka's
  RackAwareReplicaSelector) turns on follower fetching (KIP-392).
* A quorum's etcd binary is chosen by `jbod_local.etcd_binary` (found, or built on demand, once,
  announced through `report`) before anything is created, deleted or started, so its refusal of an
  etcd with a known data-loss bug changes nothing. The user's acceptance of that risk
  (`accept_etcd_data_loss_risk`) is recorded in cluster.json and holds for every later `up` of the
  cluster (not for a `fresh` one); each `up` that starts etcd on such a binary says so through
  `warn` and in the members' logs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import httpx

from jbod_client.controller import ClientError, https_verify
from jbod_core import auto_create, meta_properties, replica_selector
from jbod_core.ids import random_uuid
from jbod_local import certs, etcd_binary, processes, quorum
from jbod_local.layout import (
    HOST,
    LOCK_FILE,
    STATE_FILE,
    BrokerLayout,
    ClusterLayout,
    broker_alive,
    exclusive,
    read_layout,
    resolve_root,
    write_layout,
)
from jbod_local.loop_disks import (
    check_loop_support,
    mount_loop_disk,
    mount_of,
    mount_points,
    shut_down_filesystem,
    unmount_loop_disk,
)
from jbod_local.processes import (
    LocalBroker,
    await_readyz,
    console_script,
    exit_report,
    spawn_detached,
    stop_processes,
)
from jbod_local.quorum import ControllerNode
from jbod_runtime import durable_files, listen_ports

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

DEFAULT_DISK_MIB = 64


REPLICA_SELECTOR_CLASS: Final = "replica.selector.class"  # KIP-392, allowed in --broker-config


def rack_list(value: str | None) -> tuple[str, ...]:
    """`--racks a,b,c` as rack names (empty: no racks); `LocalClusterError` for an empty name."""
    if value is None or not value.strip():
        return ()
    racks = tuple(r.strip() for r in value.split(","))
    if any(not r for r in racks):
        raise LocalClusterError(f"--racks: expected comma-separated rack names, got '{value}'")
    return racks


def broker_config(brokers: int, given: Mapping[str, str] | None = None) -> dict[str, str]:
    """The topic auto-creation keys every broker of a new cluster of `brokers` gets: Kafka's
    (`auto.create.topics.enable=true`, `num.partitions=1`) with `default.replication.factor`
    min(3, brokers) (as the operator's default: with `min.insync.replicas=2` a topic of one
    replica could take no acks=all write), then the keys `given` (`up --broker-config`).
    `LocalClusterError` for a key that is not one of them or a value Kafka would refuse."""
    chosen = {
        auto_create.AUTO_CREATE_TOPICS_ENABLE: "true",
        auto_create.NUM_PARTITIONS: "1",
        auto_create.DEFAULT_REPLICATION_FACTOR: str(min(3, brokers)),
    }
    for key, value in (given or {}).items():
        if key == REPLICA_SELECTOR_CLASS:
            problem = replica_selector.selector_error(value)
            if problem is not None:
                raise LocalClusterError(f"--broker-config: {problem}")
            chosen[key] = value.strip()
            continue
        if key not in auto_create.BY_NAME:
            keys = ", ".join((*auto_create.BY_NAME, REPLICA_SELECTOR_CLASS))
            raise LocalClusterError(f"--broker-config: {key} is not one of {keys}")
        try:
            auto_create.parse_setting(key, value)
        except ValueError as exc:
            raise LocalClusterError(f"--broker-config: {exc}") from None
        chosen[key] = value.strip()
    return chosen


_log = logging.getLogger(__name__)

Report = Callable[[str], None]
LocalClusterError = processes.LocalClusterError  # a user mistake or a misbehaving cluster (one line)


def quiet(_message: str) -> None:
    """The default `Report`: says nothing."""


# -- ports, tokens, logs ------------------------------------------------------------------------


def port_free(port: int) -> bool:
    """True iff our servers could listen on `port` now. They bind with SO_REUSEADDR, and so does
    this check: a port left in TIME_WAIT by a killed process is free for them, a listener is not."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port(taken: set[int]) -> int:
    """A loopback port to give a server of the cluster, outside `taken` and the kernel's ephemeral
    range (`jbod_runtime.listen_ports`)."""
    return listen_ports.free_listen_port(taken=taken)


def _write_token(path: Path) -> None:
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(secrets.token_urlsafe(32) + "\n")


# -- loop-mounted disks (root only) --------------------------------------------------------------


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


def _new_layout(  # noqa: PLR0913 - the directory, then the shape asked for, one keyword each
    root: Path,
    *,
    controllers: int,
    brokers: int,
    disks: int,
    loop_disk_mib: int | None,
    tls: bool = False,
    config: Mapping[str, str] | None = None,
    racks: Sequence[str] = (),
) -> ClusterLayout:
    if not 1 <= brokers <= 9:
        raise LocalClusterError(f"--brokers must be between 1 and 9, got {brokers}")
    if not 1 <= disks <= 8:
        raise LocalClusterError(f"--disks must be between 1 and 8, got {disks}")
    quorum.check_count(controllers)
    etcd = quorum.plan_etcd(root) if controllers > 1 else ()
    if tls:
        etcd = tuple(
            replace(
                e,
                member=replace(
                    e.member, keystore=certs.keystore(root, e.name), ca_file=certs.truststore(root)
                ),
            )
            for e in etcd
        )
    taken = {p for e in etcd for p in (e.member.client_port, e.member.peer_port)}
    nodes = []
    for node_id in range(1, controllers + 1) if controllers > 1 else [None]:
        nodes.append(quorum.plan_controller(root, node_id, free_port(taken)))
        taken.add(nodes[-1].port)
    layouts = []
    for broker_id in range(1, brokers + 1):
        port = free_port(taken)
        taken.add(port)
        kafka_port = free_port(taken)
        taken.add(kafka_port)
        work_dir = root / f"broker-{broker_id}"
        layouts.append(
            BrokerLayout(
                broker_id=broker_id,
                work_dir=work_dir,
                disks=tuple(work_dir / f"disk-{k}" for k in range(1, disks + 1)),
                port=port,
                kafka_port=kafka_port,
                rack=_racks_of(racks, brokers)[broker_id - 1],
            )
        )
    ca_file = certs.truststore(root) if tls else None
    return ClusterLayout(
        root=root,
        cluster_id=str(random_uuid(random.SystemRandom())),
        controllers=tuple(replace(n, ca_file=ca_file) for n in nodes),
        brokers=tuple(replace(b, ca_file=ca_file) for b in layouts),
        loop_disk_mib=loop_disk_mib,
        etcd=etcd,
        tls=tls,
        broker_config=broker_config(brokers, config),
    )


def _refresh_ports(layout: ClusterLayout) -> ClusterLayout:
    """Keep every saved port that is still free; pick new ones for ports something else took
    (etcd members keep theirs: etcd's membership names them)."""
    taken = layout.ports()
    controllers = []
    for node in layout.controllers:
        port = node.port
        if not node.alive() and not port_free(port):
            port = free_port(taken)
            taken.add(port)
        controllers.append(replace(node, port=port))
    brokers = []
    for broker in layout.brokers:
        port, kafka_port = broker.port, broker.kafka_port
        if not broker_alive(broker):
            if not port_free(port):
                port = free_port(taken)
                taken.add(port)
            if not kafka_port or not port_free(kafka_port):
                kafka_port = free_port(taken)
                taken.add(kafka_port)
        brokers.append(replace(broker, port=port, kafka_port=kafka_port))
    return replace(layout, controllers=tuple(controllers), brokers=tuple(brokers))


def session_timeout_ms(layout: ClusterLayout) -> int:
    """A quorum's failover (up to a lease, `--lease-ms` 2000, and a replay) must fit in a session."""
    return QUORUM_SESSION_TIMEOUT_MS if layout.quorum else CONTROLLER_SESSION_TIMEOUT_MS


def local_broker(layout: ClusterLayout, broker: BrokerLayout) -> LocalBroker:
    return LocalBroker(
        node_id=broker.broker_id,
        work_dir=broker.work_dir,
        log_dirs=list(broker.disks),
        controller_url=layout.controller_url,
        cluster_token_file=layout.cluster_token_file,
        cluster_id=layout.cluster_id,
        metadata_dir=broker.metadata_dir,
        settings={
            "listeners": broker.listeners,
            "inter.broker.listener.name": broker.kafka_protocol,  # replication's listener
            "admin.token.file": str(layout.admin_token_file),
            "telemetry.dir": str(layout.telemetry_dir),
            **BROKER_SETTINGS,
            # A cluster.json from before the keys were kept: the defaults.
            **(layout.broker_config or broker_config(len(layout.brokers))),
            "broker.session.timeout.ms": str(session_timeout_ms(layout)),
            **(tls_settings(layout, broker) if layout.tls else {}),
            **({"broker.rack": broker.rack} if broker.rack else {}),
        },
    )


def tls_settings(layout: ClusterLayout, broker: BrokerLayout) -> dict[str, str]:
    """A `--tls` broker's TLS keys: its keystore, the cluster's CA bundle (`jbod_local.certs`)."""
    return {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs.keystore(layout.root, f"broker-{broker.broker_id}")),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs.truststore(layout.root)),
    }


def rotate_certificates(root: Path, *, ca: certs.CaRenewal | None = None, drop_old_ca: bool = False) -> str:
    """`jbodctl local rotate-certs`: renew a `--tls` cluster's certificates (`jbod_local.certs`);
    what was renewed, for a sentence."""
    root = resolve_root(root)
    with exclusive(root):
        layout = read_layout(root)
        if not layout.tls:
            raise LocalClusterError(
                f"the local cluster in {root} has no TLS (it was not started with up --tls)"
            )
        if ca == "new-key" and layout.etcd:
            raise LocalClusterError(
                "a quorum's etcd members load their CA once at start: --new-key would leave them "
                "refusing the new certificates (renew the CA with --ca alone: it keeps its key)"
            )
        if drop_old_ca:
            certs.drop_old_ca(root)
            return str(certs.truststore(root))
        names = certificate_names(layout)
        certs.rotate(root, names, ca=ca)  # etcd re-reads its key pair on each handshake
        return f"{len(names)} processes ({', '.join(names)})"


#: The keystore the controllers present to `--tls` etcd members (`--etcd-cert`).
ETCD_CLIENT = "etcd-client"


def certificate_names(layout: ClusterLayout) -> list[str]:
    """The keystores a `--tls` cluster's processes need (`jbod_local.certs`)."""
    return [
        *(c.keystore_name for c in layout.controllers),
        *(f"broker-{b.broker_id}" for b in layout.brokers),
        *(e.name for e in layout.etcd),
        *([ETCD_CLIENT] if layout.etcd else []),
    ]


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
        local = local_broker(layout, broker)
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


def directory_ids(broker: BrokerLayout) -> tuple[str | None, ...]:
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
        # New topics get the brokers' min.insync.replicas capped at their replication factor, as
        # the operator's controller (a topic of one replica still takes acks=all writes).
        "--default-min-insync-replicas",
        BROKER_SETTINGS["min.insync.replicas"],
        *quorum.quorum_args(
            node,
            layout.etcd,
            etcd_client_keystore=certs.keystore(layout.root, ETCD_CLIENT) if layout.tls else None,
        ),
        *(
            ["--ssl-keystore-location", str(certs.keystore(layout.root, node.keystore_name))]
            if layout.tls
            else []
        ),
    ]
    return replace(node, pid=spawn_detached(command, log_path=node.log_path))


def _exited(node: ControllerNode) -> Callable[[], str | None]:
    return lambda: None if node.alive() else "exited"


def start_broker(layout: ClusterLayout, broker: BrokerLayout) -> BrokerLayout:
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
                        f"broker {broker_id} exited: {exit_report(broker.pid, layout.broker_log(broker_id))}"
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
            response = httpx.get(
                f"{broker.url}/readyz", timeout=2, trust_env=False, verify=https_verify(broker.ca_file)
            )
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


def up(  # noqa: PLR0913  `jbodctl local up`'s options, one keyword each, and the report and warn hooks
    root: Path,
    *,
    controllers: int | None = None,
    brokers: int | None = None,
    disks: int | None = None,
    fresh: bool = False,
    loop: bool = False,
    disk_size_mib: int = DEFAULT_DISK_MIB,
    timeout: float = 60.0,
    accept_etcd_data_loss_risk: bool = False,
    report: Report = quiet,
    warn: Report = _log.warning,
    tls: bool = False,
    config: Mapping[str, str] | None = None,
    racks: Sequence[str] = (),
) -> UpResult:
    """Create (first time) and start the local cluster in `root`; see the module's guarantees.
    `config` holds the brokers' topic auto-creation keys of a new cluster (`broker_config`)."""
    started_at = time.monotonic()
    root = resolve_root(root)
    broker_config(brokers or 3, config)  # refused before anything changes
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
        chosen = None
        if fresh and (root / STATE_FILE).exists():
            if (controllers or 1) > 1:  # refused or built before the old cluster is deleted
                chosen = choose_etcd(accepted=accept_etcd_data_loss_risk, report=report)
            _down(read_layout(root), purge=True, grace=10.0)
            report(f"Removed the previous cluster in {root}")
        request = _UpRequest(
            controllers=controllers,
            brokers=brokers,
            disks=disks,
            loop=loop,
            disk_size_mib=disk_size_mib,
            accept_etcd_data_loss_risk=accept_etcd_data_loss_risk,
            report=report,
            warn=warn,
            tls=tls,
            config=dict(config or {}),
            racks=tuple(racks),
        )
        return _up(root, request, deadline=started_at + timeout, started_at=started_at, chosen=chosen)


def choose_etcd(*, accepted: bool, report: Report) -> etcd_binary.EtcdBinary:
    """The binary a quorum's etcd members start on: found, or built (`report` says so);
    `LocalClusterError` (one line) if `jbod_local.etcd_binary` refuses every etcd there is."""
    try:
        return etcd_binary.find_etcd(accept_data_loss_risk=accepted, report=report)
    except ClientError as error:
        raise LocalClusterError(str(error)) from None


def _etcd_for(
    layout: ClusterLayout, *, chosen: etcd_binary.EtcdBinary | None, report: Report, warn: Report
) -> etcd_binary.EtcdBinary | None:
    """The binary a quorum's etcd starts on (`chosen` already, or chosen now; None without etcd),
    its warning said through `warn`."""
    if not layout.etcd:
        return None
    etcd = chosen or choose_etcd(accepted=layout.etcd_data_loss_risk_accepted, report=report)
    if etcd.warning is not None:
        warn(etcd.warning)
    return etcd


@dataclass(frozen=True)
class _UpRequest:
    """What `up` was asked for beyond the directory: the shape of a new cluster (None: the default;
    an existing cluster keeps its own), loop disks, the accepted etcd risk, and how to tell the user."""

    controllers: int | None
    brokers: int | None
    disks: int | None
    loop: bool
    disk_size_mib: int
    accept_etcd_data_loss_risk: bool
    report: Report
    warn: Report
    tls: bool = False
    config: Mapping[str, str] = field(default_factory=dict)  # `--broker-config` (a new cluster's)
    racks: tuple[str, ...] = ()  # `--racks` (a new cluster's)


def _up(
    root: Path,
    request: _UpRequest,
    *,
    deadline: float,
    started_at: float,
    chosen: etcd_binary.EtcdBinary | None,
) -> UpResult:
    notes: list[str] = []
    created = not (root / STATE_FILE).exists()
    if created:
        layout = _new_layout(
            root,
            controllers=request.controllers or 1,
            brokers=request.brokers or 3,
            disks=request.disks or 3,
            loop_disk_mib=request.disk_size_mib if request.loop else None,
            tls=request.tls,
            config=request.config,
            racks=request.racks,
        )
    else:
        layout, kept = _existing_layout(root, request)
        notes.extend(kept)
    if request.accept_etcd_data_loss_risk and layout.quorum and not layout.etcd_data_loss_risk_accepted:
        layout = replace(layout, etcd_data_loss_risk_accepted=True)
        if not created:
            write_layout(layout)
    running = [c.alive() for c in layout.controllers] + [e.alive() for e in layout.etcd]
    if all(running) and all(broker_alive(b) for b in layout.brokers):
        return UpResult(layout, True, (), time.monotonic() - started_at, tuple(notes))
    # The etcd binary is chosen before anything starts.
    etcd_bin = _etcd_for(layout, chosen=chosen, report=request.report, warn=request.warn)
    if created:
        write_layout(layout)  # from now on the cluster id is fixed, even if starting fails
        request.report(f"Created cluster {layout.cluster_id} in {root}")

    restart_controllers = [c.node_id for c in layout.controllers if not c.alive()]
    layout, moved = _refresh_controller_ports(layout)
    notes.extend(moved)
    _write_token(layout.admin_token_file)
    _write_token(layout.cluster_token_file)
    if layout.tls:
        certs.ensure(root, certificate_names(layout))
    layout.logs_dir.mkdir(parents=True, exist_ok=True)
    to_start = [b for b in layout.brokers if not broker_alive(b)]
    if layout.loop:
        _mount_disks(layout, to_start)
    _format(layout, to_start)
    layout = replace(
        layout, brokers=tuple(replace(b, directory_ids=directory_ids(b)) for b in layout.brokers)
    )
    startup = _Startup(root, layout, deadline=deadline, report=request.report)
    try:
        if etcd_bin is not None:
            startup.start_etcd(etcd_bin)
        startup.start_controllers(restart_controllers)
        # A restarted controller must see the brokers that kept running too.
        startup.start_brokers(to_start, await_all=bool(restart_controllers))
    except (LocalClusterError, OSError, KeyboardInterrupt):
        startup.stop()  # only what this call started
        raise
    for broker in to_start:
        for index in broker.failed_disks():
            notes.append(
                f"Disk {index} of broker {broker.broker_id} is failed: it started without it "
                f"(restore it with: jbodctl local restore-disk {broker.broker_id} {index})"
            )
    return UpResult(
        startup.layout, False, tuple(startup.started), time.monotonic() - started_at, tuple(notes)
    )


def _racks_of(racks: Sequence[str], brokers: int) -> tuple[str | None, ...]:
    """Each broker's rack from `--racks` (broker i: racks[(i - 1) % len])."""
    return tuple(racks[i % len(racks)] if racks else None for i in range(brokers))


def _existing_layout(root: Path, request: _UpRequest) -> tuple[ClusterLayout, list[str]]:
    """The cluster already in `root`, and a note when the request asked for another shape."""
    notes = []
    layout = read_layout(root)
    shape = (len(layout.brokers), len(layout.brokers[0].disks) if layout.brokers else 0)
    changed = (request.brokers is not None and request.brokers != shape[0]) or (
        request.disks is not None and request.disks != shape[1]
    )
    if (
        changed
        or (request.loop and not layout.loop)
        or (request.tls and not layout.tls)
        or (
            request.racks
            and _racks_of(request.racks, len(layout.brokers)) != tuple(b.rack for b in layout.brokers)
        )
        or request.controllers not in (None, len(layout.controllers))
    ):
        kind = "loop-mounted" if layout.loop else "plain-directory"
        quorum_note = f"{len(layout.controllers)} controllers, " if layout.quorum else ""
        notes.append(
            f"Kept the existing layout ({quorum_note}{shape[0]} brokers x {shape[1]} {kind} disks); "
            "pass --fresh to create a new cluster"
        )
    asked = broker_config(len(layout.brokers), request.config)
    if request.config and any(layout.broker_config.get(k) != v for k, v in asked.items()):
        notes.append(
            "Kept the existing brokers' config; pass --fresh to create a new cluster with --broker-config"
        )
    if layout.loop:
        check_loop_support()
    return layout, notes


def _refresh_controller_ports(layout: ClusterLayout) -> tuple[ClusterLayout, list[str]]:
    """`_refresh_ports`, and when a controller moved, the running brokers stopped (their
    server.properties name the old URL: they restart with the new one) and a note saying so."""
    before = layout.controllers
    layout = _refresh_ports(layout)
    moved = [(old, new) for old, new in zip(before, layout.controllers, strict=True) if old.port != new.port]
    if not moved:  # every controller kept its port: running brokers just reconnect
        return layout, []
    stop_processes([(b.pid, b.config_path) for b in layout.brokers if b.pid is not None], grace=10)
    layout = replace(layout, brokers=tuple(replace(b, pid=None) for b in layout.brokers))
    ports = ", ".join(str(old.port) for old, _new in moved)
    to = ", ".join(f"{new.name} to {new.port}" for _old, new in moved)
    return layout, [f"Port {ports} was taken: moved the {to} and restarted every broker"]


class _Startup:
    """The processes one `up` starts, in order (etcd, controllers, brokers), with the layout as it
    goes, so that a failure stops exactly those (`stop`) and never one this call did not start."""

    def __init__(self, root: Path, layout: ClusterLayout, *, deadline: float, report: Report) -> None:
        self.root = root
        self.layout = layout
        self.deadline = deadline
        self.report = report
        self.started: list[str] = []
        self.processes: list[tuple[int, Path]] = []

    def start_etcd(self, etcd_bin: etcd_binary.EtcdBinary) -> None:
        etcd, indices = quorum.start_etcd(self.root, self.layout.etcd, etcd=etcd_bin)
        self.layout = replace(self.layout, etcd=etcd)
        write_layout(self.layout)
        self.started += [etcd[i].name for i in indices]
        self.processes += [(etcd[i].pid or 0, etcd[i].member.data_dir) for i in indices]
        quorum.await_etcd(self.root, etcd, indices, deadline=self.deadline)
        if indices:
            self.report(
                f"Started etcd ({', '.join(etcd[i].name for i in indices)}) on {quorum.endpoints(etcd)}"
            )

    def start_controllers(self, node_ids: Sequence[int | None]) -> None:
        nodes = [_start_controller(self.layout, self.layout.node(node_id)) for node_id in node_ids]
        for node in nodes:
            self.layout = self.layout.with_controller(node)
            self.started.append(node.name)
            self.processes.append((node.pid or 0, node.data_dir))
        write_layout(self.layout)
        for node in nodes:
            await_readyz(
                node.url,
                name="jbod-controller",
                log_path=node.log_path,
                deadline=self.deadline,
                exited=_exited(node),
                error=LocalClusterError,
                ca_file=node.ca_file,
            )
            self.report(f"Started {node.label} (pid {node.pid}) on {node.url}")

    def start_brokers(self, to_start: Sequence[BrokerLayout], *, await_all: bool) -> None:
        """Start the stopped brokers, then wait until they (`await_all`: every broker) are ready."""
        for stopped in to_start:
            broker = start_broker(self.layout, self.layout.broker(stopped.broker_id))
            self.layout = self.layout.with_broker(broker)
            self.started.append(f"broker {broker.broker_id}")
            assert broker.pid is not None
            self.processes.insert(0, (broker.pid, broker.config_path))
        write_layout(self.layout)
        waiting = self.layout.brokers if await_all else to_start
        if to_start:
            self.report(f"Started {len(to_start)} broker(s); waiting until they are registered and unfenced")
        else:
            self.report("Waiting until the running brokers are registered and unfenced again")
        await_brokers_ready(self.layout, [b.broker_id for b in waiting], deadline=self.deadline)

    def stop(self) -> None:
        stop_processes(self.processes, grace=3)
        write_layout(_forget_dead(self.layout))


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


# -- topics ------------------------------------------------------------------------------------


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
