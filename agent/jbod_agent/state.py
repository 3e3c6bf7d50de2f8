"""The broker agent's state: one object, owned by the agent's loop, read by its collaborators.

Guarantees:
* Everything the agent knows about itself lives in one `AgentState`: its dirs and their health,
  the replicas it hosts (online and in failed dirs), the metadata image it follows, its
  registration, fencing and the dir failures it must report. It is only touched on the event
  loop, so there are no locks.
* The queries here are pure reads (`caught_up`, `reported_offline_dirs`, `leads_in`,
  `offline_replica_count`); the changes that have rules (a dir fails, a dir fills up) are
  functions of `dir_health` and `lifecycle`, not of the collaborators.
* Collaborators (`ReplicaManager`, `Mover`, `Fetchers`, telemetry) receive this state and narrow
  ports (`jbod_agent.ports`), never the agent itself.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from jbod_agent.config import BrokerConfig
from jbod_agent.placement import DirHealth
from jbod_core.disk_latency import DirLatency
from jbod_core.disk_space import FillRate
from jbod_core.ids import Uuid
from jbod_core.image import ClusterImage, PartitionKey


@dataclass
class LogDirState:
    path: Path
    directory_id: Uuid
    device: int
    health: DirHealth = DirHealth.ONLINE
    error: str | None = None
    since: float = 0.0  # wall-clock time of the last health change
    total_bytes: int = 0
    usable_bytes: int = 0
    # Issue 35: cordoned for its used space (`log.dir.cordon.threshold`), and its recent fill.
    space_cordoned: bool = False
    fill: FillRate = field(default_factory=FillRate)
    # Issue 35: slow (`log.dir.slow.threshold.ms`) by its recent write-and-fsync latencies.
    slow: bool = False
    latency: DirLatency = field(default_factory=DirLatency)
    # Issue 35: its pulse unanswered for `log.dir.stall.timeout.ms` while other dirs answer.
    stalled: bool = False
    stalls: int = 0  # how often it stalled since start
    stall_found_after_s: float | None = None  # the last stall: its silence when found
    stall_unanswered_s: float | None = None  # the last stall: its unanswered pulse's wait then

    @property
    def out_of_leaders_path(self) -> bool:
        """Reported slow to the controller (it leads nothing another replica can): slow by its
        latencies, or stalled."""
        return self.slow or self.stalled

    @property
    def cordoned_for_space(self) -> bool:
        """Cordoned for its space: `log.dir.cordon.threshold` reached, or full (ENOSPC)."""
        return self.space_cordoned or self.health is DirHealth.FULL


@dataclass
class LocalReplica:
    directory_id: Uuid
    path: Path
    topic: str


@dataclass
class FailedDir:
    failed_at: float  # the agent clock's monotonic time
    acknowledged: bool = False


@dataclass
class AgentState:
    config: BrokerConfig
    cluster_id: str
    incarnation: Uuid
    dirs: dict[Uuid, LogDirState]
    startup_offline: list[tuple[Path, str]]
    metadata_dir: LogDirState
    # metadata
    image: ClusterImage = field(default_factory=ClusterImage)
    applied_offset: int = -1
    applied_checksum: int | None = None  # of the record at applied_offset, from the controller
    metadata_end: int = 0
    # replicas
    local: dict[PartitionKey, LocalReplica] = field(default_factory=dict)
    offline_local: dict[PartitionKey, LocalReplica] = field(default_factory=dict)
    creating: dict[PartitionKey, Uuid] = field(default_factory=dict)
    # Dirs named in advance (AlterReplicaLogDirs) for replicas this broker does not host yet.
    preferred_dirs: dict[PartitionKey, Uuid] = field(default_factory=dict)
    reconciled_once: bool = False
    # lifecycle
    epoch: int = -1
    registered: bool = False
    fenced: bool = True
    ready_to_unfence: bool = False
    failed: dict[Uuid, FailedDir] = field(default_factory=dict)
    metadata_dir_error: str | None = None
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    listener_port: int = 0  # the bound port once listening (config port 0 = any)
    kafka_ports: dict[str, int] = field(default_factory=dict)  # Kafka listener name -> bound port
    # Seconds clients were throttled by their quotas, by (quota type, user, client id) (issue 34).
    client_throttle_seconds: dict[tuple[str, str, str], float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.registered_dirs: tuple[Uuid, ...] = tuple(sorted(self.dirs))
        if not self.listener_port:
            self.listener_port = self.config.listener.port

    @property
    def node_id(self) -> int:
        return self.config.node_id

    def slow_dir_ids(self) -> list[Uuid]:
        """The registered dirs that are slow or stalled now and not offline (what heartbeats report)."""
        registered = set(self.registered_dirs)
        return sorted(
            d
            for d, s in self.dirs.items()
            if d in registered and s.out_of_leaders_path and s.health is not DirHealth.OFFLINE
        )

    def reported_offline_dirs(self) -> list[Uuid]:
        """Every registered dir that failed since start: sent in every heartbeat until restart."""
        return sorted(d for d in self.failed if d in self.registered_dirs)

    def online_dirs(self) -> int:
        return sum(1 for s in self.dirs.values() if s.health is not DirHealth.OFFLINE)

    def serves_clients(self) -> bool:
        """Registered and unfenced, and its own image shows it so at its epoch: the Metadata it
        answers lists it (and names a controller). Until then librdkafka's admin requests wait for
        a controller until their timeout, so `/readyz` waits for this."""
        if not self.registered or self.fenced:
            return False
        reg = self.image.brokers.get(self.node_id)
        return reg is not None and reg.broker_epoch == self.epoch and not reg.fenced

    def caught_up(self) -> bool:
        return (
            self.registered
            and self.applied_offset >= self.epoch
            and self.applied_offset + 1 >= self.metadata_end
        )

    def leads_in(self, directory: Uuid) -> int:
        """How many partitions this broker leads with its replica in `directory`."""
        hosted = self.image.replicas_by_dir.get((self.node_id, directory), set())
        led = self.image.leaders_by_broker.get(self.node_id, set())
        return len(hosted & led)

    def offline_replica_count(self) -> int:
        """Replicas this broker hosts that sit in an offline dir (as far as it can tell)."""
        count = len(self.offline_local)
        online = {d for d, s in self.dirs.items() if s.health is not DirHealth.OFFLINE}
        for key in self.image.replicas_by_broker.get(self.node_id, ()):
            if key in self.local or key in self.offline_local:
                continue
            part = self.image.partition(key)
            if part is None:
                continue
            assigned = part.directory_of(self.node_id)
            if not assigned.is_reserved and assigned not in online:
                count += 1
        return count
