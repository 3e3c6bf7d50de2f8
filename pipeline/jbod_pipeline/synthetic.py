"""Generated clusters for tests, benchmarks and demos: a metadata log export and agent telemetry.

`generate(spec, rng)` streams a consistent metadata log (the records a controller would write:
registrations and unfencing, topics with `min.insync.replicas`, partitions striped over brokers,
then incidents — dirs going offline (some coming back later, and some of those failing again), a
fenced broker, an unregistered broker, leader moves, a reassignment, a deleted topic — each with
the ISR and leader changes of protocol §3.6), and the telemetry samples of every dir (older
samples first, then the current one; skewed disks; dirs past 95 % reported `full`). Placements include UNASSIGNED and LOST dirs.

Guarantees: the same spec and seed give the same files; the log replays cleanly in
`jbod_core.image.ClusterImage` (the tests' reference); generation streams the partitions, keeping
only the partitions touched by incidents and the per-dir replica sizes in memory.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson

from jbod_core import frames
from jbod_core.ids import LOST_DIR_TEXT, MIGRATING_DIR_TEXT, UNASSIGNED_DIR_TEXT, random_uuid

GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    brokers: int = 6
    dirs_per_broker: int = 4
    partitions: int = 300
    replication_factor: int = 3
    topics: int = 5
    offline_dirs: int = 2
    recovered_dirs: int = 1  # of the offline dirs, how many come back online later in the log
    refailed_dirs: int = 0  # of the recovered dirs, how many then go offline a second time
    fenced_brokers: int = 1
    unregistered_brokers: int = 0
    leader_moves: int = 10
    reassignments: int = 2
    deleted_topics: int = 1
    unassigned_fraction: float = 0.02
    lost_fraction: float = 0.01
    skewed_dirs: int = 3  # dirs filled to 85-99 %
    dir_total_bytes: tuple[int, ...] = (100 * GIB, 200 * GIB)
    mean_utilisation: float = 0.45
    samples_per_dir: int = 2
    telemetry_missing_dirs: int = 1  # dirs without any telemetry sample


@dataclass(slots=True)
class _Partition:
    topic_id: str
    topic: str
    index: int
    replicas: list[int]
    directories: list[str]
    isr: list[int]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0


@dataclass(slots=True)
class _Writer:
    out: IO[bytes]
    offset: int = 0

    def write(self, record_type: str, data: dict[str, Any]) -> int:
        offset = self.offset
        self.out.write(frames.encode_entry(offset, record_type, data) + b"\n")
        self.offset += 1
        return offset


@dataclass(slots=True)
class GeneratedCluster:
    """What was generated (for the caller's summaries; the files are the real output)."""

    records: int = 0
    partitions: int = 0
    samples: int = 0
    offline_dirs: list[tuple[int, str]] = field(default_factory=list)
    fenced: list[int] = field(default_factory=list)


class _Brokers:
    def __init__(self) -> None:
        self.epoch: dict[int, int] = {}
        self.online: dict[int, list[str]] = {}
        self.offline: dict[int, list[str]] = {}
        self.fenced: dict[int, bool] = {}
        self.registered: set[int] = set()

    def acceptable(self, broker: int, directory: str) -> bool:
        if broker not in self.registered or self.fenced[broker]:
            return False
        if directory in (UNASSIGNED_DIR_TEXT, MIGRATING_DIR_TEXT):
            return True
        return directory in self.online[broker]


def _elect(p: _Partition, isr: list[int], brokers: _Brokers, *, remove: int | None = None) -> int:
    def ok(b: int) -> bool:
        return b != remove and b in isr and brokers.acceptable(b, p.directories[p.replicas.index(b)])

    if p.leader != -1 and ok(p.leader):
        return p.leader
    for b in p.replicas:
        if ok(b):
            return b
    return -1


def _change(w: _Writer, p: _Partition, brokers: _Brokers, *, remove: int | None = None) -> None:
    """Take `remove` out of the ISR (never emptying it) and re-elect; write the change if any."""
    isr = [b for b in p.isr if b != remove] if remove in p.isr and len(p.isr) > 1 else list(p.isr)
    leader = _elect(p, isr, brokers, remove=remove)
    data: dict[str, Any] = {"topicId": p.topic_id, "partitionId": p.index}
    if isr != p.isr:
        data["isr"] = isr
        p.isr = isr
    if leader != p.leader:
        p.leader, p.leader_epoch = leader, p.leader_epoch + 1
        data["leader"], data["leaderEpoch"] = leader, p.leader_epoch
    if len(data) > 2:
        p.partition_epoch += 1
        data["partitionEpoch"] = p.partition_epoch
        w.write("PartitionChangeRecord", data)


def _sizes(rng: random.Random, count: int, budget: int) -> Iterator[int]:
    if count == 0:
        return
    weights = [rng.lognormvariate(0, 0.6) for _ in range(count)]
    scale = budget / sum(weights)
    for weight in weights:
        yield max(1, int(weight * scale))


def _striped_replicas(broker_ids: list[int], position: int, replication_factor: int) -> list[int]:
    """The replicas of the `position`-th partition: striped over the brokers with a varying step."""
    count = len(broker_ids)
    start = position % count
    step = 1 + (position // count) % max(1, count - 1)
    replicas: list[int] = []
    k = start
    while len(replicas) < replication_factor:
        b = broker_ids[k % count]
        if b not in replicas:
            replicas.append(b)
        k += step if len(replicas) == 1 else 1
    return replicas


@dataclass(frozen=True, slots=True)
class _Layout:
    """The cluster drawn before any record: each broker's dirs, and the dirs and brokers incidents hit."""

    broker_ids: list[int]
    dirs: dict[int, list[str]]
    taken: frozenset[Any]  # the dir ids: topic ids avoid them
    offline: frozenset[tuple[int, str]]  # the dirs that go offline (before some recover)
    fenced: frozenset[int]
    unregistered: frozenset[int]
    skewed: frozenset[tuple[int, str]]  # dirs that attract more replicas and are filled close to full
    cumulative: dict[int, list[float]]  # broker → running sums of its dirs' weights, to draw a dir

    @property
    def all_dirs(self) -> list[tuple[int, str]]:
        return [(b, d) for b in self.broker_ids for d in self.dirs[b]]


def _draw_layout(spec: ClusterSpec, rng: random.Random) -> _Layout:
    broker_ids = list(range(1, spec.brokers + 1))
    dirs: dict[int, list[str]] = {}
    taken: set[Any] = set()
    for b in broker_ids:
        ids = [random_uuid(rng, avoid=taken) for _ in range(spec.dirs_per_broker)]
        taken.update(ids)
        dirs[b] = [str(d) for d in ids]
    all_dirs = [(b, d) for b in broker_ids for d in dirs[b]]
    offline = set(rng.sample(all_dirs, min(spec.offline_dirs, len(all_dirs))))
    fenced = set(rng.sample(broker_ids, min(spec.fenced_brokers, len(broker_ids))))
    others = [b for b in broker_ids if b not in fenced]
    unregistered = set(rng.sample(others, min(spec.unregistered_brokers, len(others))))
    # Skewed dirs attract more replicas (and are filled close to full by the telemetry).
    skewed = set(rng.sample([x for x in all_dirs if x not in offline], min(spec.skewed_dirs, len(all_dirs))))
    dir_weight = {x: (3.0 if x in skewed else rng.uniform(0.6, 1.4)) for x in all_dirs}
    cumulative: dict[int, list[float]] = {b: [] for b in broker_ids}
    for b in broker_ids:
        total = 0.0
        for d in dirs[b]:
            total += dir_weight[(b, d)]
            cumulative[b].append(total)
    return _Layout(
        broker_ids=broker_ids,
        dirs=dirs,
        taken=frozenset(taken),
        offline=frozenset(offline),
        fenced=frozenset(fenced),
        unregistered=frozenset(unregistered),
        skewed=frozenset(skewed),
        cumulative=cumulative,
    )


@dataclass(frozen=True, slots=True)
class _DirFill:
    """One dir's telemetry: its size, the replicas it hosts with their sizes, and whether it ends offline."""

    broker: int
    directory: str
    total: int
    hosted: list[tuple[str, int]]
    sizes: list[int]
    offline: bool

    def sample(self, index: int, *, latest: bool) -> dict[str, Any]:
        """The `index`-th sample; older samples report half the sizes, only the latest one is offline."""
        is_offline = self.offline and latest
        used = sum(self.sizes) if latest else sum(self.sizes) // 2
        state = "offline" if is_offline else ("full" if used > 0.95 * self.total else "online")
        entries = (
            []
            if is_offline
            else [
                {"topic": t, "partition": i, "sizeBytes": s if latest else s // 2}
                for (t, i), s in zip(self.hosted, self.sizes, strict=True)
            ]
        )
        return {
            "ts": 1_700_000_000.0 + 60.0 * index + self.broker * 0.001,
            "brokerId": self.broker,
            "directoryId": self.directory,
            "path": f"/var/lib/jbod/broker-{self.broker}/{self.directory}",
            "state": state,
            "totalBytes": 0 if is_offline else self.total,
            "usableBytes": 0 if is_offline else max(0, self.total - used),
            "replicas": entries,
            "probeSeconds": 0.002,
            "probeErrors": 1 if is_offline else 0,
            "error": "EIO: Input/output error" if is_offline else None,
        }


class _Generation:
    """One run of `generate`: the drawn layout, then the brokers' state and the partitions touched by
    incidents as the metadata log is written, then the telemetry of what was placed.

    Every random draw happens in the order of the steps below, so that a seed gives the same files.
    """

    def __init__(self, spec: ClusterSpec, rng: random.Random) -> None:
        self.spec = spec
        self.rng = rng
        self.layout = _draw_layout(spec, rng)
        self.result = GeneratedCluster()
        self.brokers = _Brokers()
        self.touched: list[_Partition] = []
        self.placed: dict[tuple[int, str], list[tuple[str, int]]] = {x: [] for x in self.layout.all_dirs}
        self.deleted_topics: list[str] = []

    def write_metadata(self, path: Path) -> None:
        with open(path, "wb") as out:
            w = _Writer(out)
            self._register_brokers(w)
            self._create_topics(w)
            # Incidents, each with its partition changes (§3.6).
            self._fail_dirs(w)
            self._fence_brokers(w)
            live = [p for p in self.touched if p.topic_id not in self.deleted_topics]
            self._move_leaders(w, live)
            self._reassign(w, live)
            for topic_id in self.deleted_topics:
                w.write("RemoveTopicRecord", {"topicId": topic_id})
            self.result.records = w.offset

    def _register_brokers(self, w: _Writer) -> None:
        """Register every broker fenced, then unfence them all."""
        brokers = self.brokers
        for b in self.layout.broker_ids:
            epoch = w.write(
                "RegisterBrokerRecord",
                {
                    "brokerId": b,
                    "brokerEpoch": w.offset,
                    "incarnationId": str(random_uuid(self.rng)),
                    "logDirs": sorted(self.layout.dirs[b]),
                    "hasOfflineLogDirs": False,
                    "fenced": True,
                    "inControlledShutdown": False,
                    "listeners": [{"name": "http", "host": "127.0.0.1", "port": 9092 + b}],
                    "rack": None,
                },
            )
            brokers.epoch[b] = epoch
            brokers.online[b] = list(self.layout.dirs[b])
            brokers.offline[b] = []
            brokers.fenced[b] = True
            brokers.registered.add(b)
        for b in self.layout.broker_ids:
            w.write(
                "BrokerRegistrationChangeRecord",
                {"brokerId": b, "brokerEpoch": brokers.epoch[b], "fenced": False},
            )
            brokers.fenced[b] = False

    def _create_topics(self, w: _Writer) -> None:
        """The topics, alternating `min.insync.replicas` 2 and 1; the last one takes the remainder."""
        spec = self.spec
        per_topic = max(1, spec.partitions // spec.topics)
        made = 0
        topic_index = 0
        while made < spec.partitions:
            count = min(per_topic, spec.partitions - made)
            if topic_index == spec.topics - 1:
                count = spec.partitions - made
            name = f"topic-{topic_index}"
            topic_id = str(random_uuid(self.rng, avoid=self.layout.taken))
            min_isr = 2 if topic_index % 2 == 0 else 1
            w.write(
                "TopicRecord",
                {"name": name, "topicId": topic_id, "configs": {"min.insync.replicas": str(min_isr)}},
            )
            if topic_index < spec.deleted_topics and topic_index < spec.topics - 1:
                self.deleted_topics.append(topic_id)
            for index in range(count):
                self._create_partition(w, topic_id, name, index, position=made + index)
            made += count
            topic_index += 1
            self.result.partitions += count

    def _draw_directory(self, broker: int) -> str:
        """UNASSIGNED, LOST, or one of the broker's dirs drawn by weight."""
        roll = self.rng.random()
        if roll < self.spec.unassigned_fraction:
            return UNASSIGNED_DIR_TEXT
        if roll < self.spec.unassigned_fraction + self.spec.lost_fraction:
            return LOST_DIR_TEXT
        cumulative = self.layout.cumulative[broker]
        x = self.rng.random() * cumulative[-1]
        i = next(j for j, c in enumerate(cumulative) if c >= x)
        return self.layout.dirs[broker][i]

    def _create_partition(self, w: _Writer, topic_id: str, name: str, index: int, *, position: int) -> None:
        layout = self.layout
        replicas = _striped_replicas(
            layout.broker_ids, position, min(self.spec.replication_factor, self.spec.brokers)
        )
        directories = [self._draw_directory(b) for b in replicas]
        p = _Partition(topic_id, name, index, replicas, directories, list(replicas), replicas[0])
        if directories[0] == LOST_DIR_TEXT:
            # A LOST replica is offline: §3.6 would not have elected it.
            p.isr = [b for b, d in zip(replicas, directories, strict=True) if d != LOST_DIR_TEXT] or [
                replicas[0]
            ]
            p.leader = _elect(
                _Partition(topic_id, name, index, replicas, directories, p.isr, -1), p.isr, self.brokers
            )
        w.write(
            "PartitionRecord",
            {
                "topicId": topic_id,
                "partitionId": index,
                "replicas": replicas,
                "isr": p.isr,
                "leader": p.leader,
                "leaderEpoch": 0,
                "partitionEpoch": 0,
                "directories": directories,
            },
        )
        for b, d in zip(replicas, directories, strict=True):
            if (b, d) in self.placed and topic_id not in self.deleted_topics:
                self.placed[(b, d)].append((name, index))
        hit = any((b, d) in layout.offline for b, d in zip(replicas, directories, strict=True))
        incident = any(b in layout.fenced or b in layout.unregistered for b in replicas)
        if hit or incident or self.rng.random() < 0.02:
            self.touched.append(p)

    def _dirs_changed(self, w: _Writer, b: int) -> None:
        w.write(
            "BrokerRegistrationChangeRecord",
            {
                "brokerId": b,
                "brokerEpoch": self.brokers.epoch[b],
                "logDirs": sorted(self.brokers.online[b]),
                "offlineLogDirs": self.brokers.offline[b],
            },
        )

    def _dir_offline(self, w: _Writer, b: int, d: str) -> None:
        brokers = self.brokers
        brokers.online[b] = [x for x in brokers.online[b] if x != d]
        brokers.offline[b] = sorted([*brokers.offline[b], d])
        self._dirs_changed(w, b)
        for p in self.touched:
            if p.topic_id in self.deleted_topics:
                continue
            if b in p.replicas and p.directories[p.replicas.index(b)] == d:
                _change(w, p, brokers, remove=b)

    def _fail_dirs(self, w: _Writer) -> None:
        offline = set(self.layout.offline)
        for b, d in sorted(offline):
            self._dir_offline(w, b, d)
        # Some offline dirs come back (the agent found the disk healthy again), and of those some
        # fail a second time: the timeline must report both failures and the return in between.
        recovered = sorted(offline)[: self.spec.recovered_dirs]
        for b, d in recovered:
            self.brokers.online[b] = sorted([*self.brokers.online[b], d])
            self.brokers.offline[b] = [x for x in self.brokers.offline[b] if x != d]
            self._dirs_changed(w, b)
            offline.discard((b, d))
        for b, d in recovered[: self.spec.refailed_dirs]:
            self._dir_offline(w, b, d)
            offline.add((b, d))
        self.result.offline_dirs.extend(sorted(offline))

    def _fence_brokers(self, w: _Writer) -> None:
        """Fence the fenced and the unregistered brokers, then unregister the latter."""
        layout = self.layout
        for b in sorted(layout.fenced | layout.unregistered):
            self.brokers.fenced[b] = True
            for p in self.touched:
                if b in p.replicas and p.topic_id not in self.deleted_topics:
                    _change(w, p, self.brokers, remove=b)
            w.write(
                "BrokerRegistrationChangeRecord",
                {"brokerId": b, "brokerEpoch": self.brokers.epoch[b], "fenced": True},
            )
            self.result.fenced.append(b)
        for b in sorted(layout.unregistered):
            w.write("UnregisterBrokerRecord", {"brokerId": b, "brokerEpoch": self.brokers.epoch[b]})
            self.brokers.registered.discard(b)

    def _move_leaders(self, w: _Writer, live: list[_Partition]) -> None:
        for p in self.rng.sample(live, min(self.spec.leader_moves, len(live))):
            candidates = [
                b
                for b in p.isr
                if b != p.leader and self.brokers.acceptable(b, p.directories[p.replicas.index(b)])
            ]
            if candidates:
                p.leader, p.leader_epoch, p.partition_epoch = (
                    candidates[0],
                    p.leader_epoch + 1,
                    p.partition_epoch + 1,
                )
                w.write(
                    "PartitionChangeRecord",
                    {
                        "topicId": p.topic_id,
                        "partitionId": p.index,
                        "partitionEpoch": p.partition_epoch,
                        "leader": p.leader,
                    },
                )

    def _reassign(self, w: _Writer, live: list[_Partition]) -> None:
        movable = [p for p in live if len(p.replicas) < self.spec.brokers]
        for p in self.rng.sample(movable, min(self.spec.reassignments, len(movable))):
            self._replace_last_replica(w, p)

    def _replace_last_replica(self, w: _Writer, p: _Partition) -> None:
        """Replace the last replica by another broker: the new one starts UNASSIGNED."""
        gone = p.replicas[-1]
        newcomer = next(
            b for b in self.layout.broker_ids if b not in p.replicas and b in self.brokers.registered
        )
        old_dir = p.directories[-1]
        if (gone, old_dir) in self.placed:
            self.placed[(gone, old_dir)] = [
                x for x in self.placed[(gone, old_dir)] if x != (p.topic, p.index)
            ]
        p.replicas = [*p.replicas[:-1], newcomer]
        p.directories = [*p.directories[:-1], UNASSIGNED_DIR_TEXT]
        isr = [b for b in p.isr if b != gone] or [p.replicas[0]]
        p.partition_epoch += 1
        data: dict[str, Any] = {
            "topicId": p.topic_id,
            "partitionId": p.index,
            "partitionEpoch": p.partition_epoch,
            "replicas": p.replicas,
        }
        if isr != p.isr:
            p.isr = isr
            data["isr"] = isr
        leader = _elect(p, p.isr, self.brokers)
        if leader != p.leader:
            p.leader, p.leader_epoch = leader, p.leader_epoch + 1
            data["leader"] = leader
        w.write("PartitionChangeRecord", data)

    def write_telemetry(self, path: Path) -> None:
        """Sizes per dir, skewed dirs nearly full, a few dirs without any sample."""
        spec, rng, layout = self.spec, self.rng, self.layout
        all_dirs = layout.all_dirs
        silent = set(rng.sample(all_dirs, min(spec.telemetry_missing_dirs, len(all_dirs))))
        offline = set(self.result.offline_dirs)
        with open(path, "wb") as out:
            for b, d in all_dirs:
                if (b, d) in silent:
                    continue
                total = rng.choice(spec.dir_total_bytes)
                target = (
                    rng.uniform(0.85, 0.99)
                    if (b, d) in layout.skewed
                    else rng.uniform(0.3, 0.9) * spec.mean_utilisation / 0.6
                )
                hosted = self.placed[(b, d)]
                sizes = list(_sizes(rng, len(hosted), int(total * min(target, 0.99))))
                fill = _DirFill(b, d, total, hosted, sizes, offline=(b, d) in offline)
                for sample in range(spec.samples_per_dir):
                    line = fill.sample(sample, latest=sample == spec.samples_per_dir - 1)
                    out.write(orjson.dumps(line) + b"\n")
                    self.result.samples += 1


def generate(spec: ClusterSpec, *, seed: int, metadata: Path, telemetry: Path) -> GeneratedCluster:
    """Write `metadata` (JSON lines) and `telemetry` (JSON lines) for `spec`."""
    run = _Generation(spec, random.Random(seed))
    run.write_metadata(metadata)
    run.write_telemetry(telemetry)
    return run.result
