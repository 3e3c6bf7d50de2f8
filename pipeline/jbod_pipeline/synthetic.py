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


def generate(spec: ClusterSpec, *, seed: int, metadata: Path, telemetry: Path) -> GeneratedCluster:
    """Write `metadata` (JSON lines) and `telemetry` (JSON lines) for `spec`."""
    rng = random.Random(seed)
    result = GeneratedCluster()
    brokers = _Brokers()
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
    # Skewed dirs attract more replicas (and are filled close to full below).
    skewed = set(rng.sample([x for x in all_dirs if x not in offline], min(spec.skewed_dirs, len(all_dirs))))
    dir_weight = {x: (3.0 if x in skewed else rng.uniform(0.6, 1.4)) for x in all_dirs}
    touched: list[_Partition] = []
    placed: dict[tuple[int, str], list[tuple[str, int]]] = {x: [] for x in all_dirs}
    with open(metadata, "wb") as out:
        w = _Writer(out)
        for b in broker_ids:
            epoch = w.write(
                "RegisterBrokerRecord",
                {
                    "brokerId": b,
                    "brokerEpoch": w.offset,
                    "incarnationId": str(random_uuid(rng)),
                    "logDirs": sorted(dirs[b]),
                    "hasOfflineLogDirs": False,
                    "fenced": True,
                    "inControlledShutdown": False,
                    "listeners": [{"name": "http", "host": "127.0.0.1", "port": 9092 + b}],
                    "rack": None,
                },
            )
            brokers.epoch[b] = epoch
            brokers.online[b] = list(dirs[b])
            brokers.offline[b] = []
            brokers.fenced[b] = True
            brokers.registered.add(b)
        for b in broker_ids:
            w.write(
                "BrokerRegistrationChangeRecord",
                {"brokerId": b, "brokerEpoch": brokers.epoch[b], "fenced": False},
            )
            brokers.fenced[b] = False
        per_topic = max(1, spec.partitions // spec.topics)
        cumulative: dict[int, list[float]] = {b: [] for b in broker_ids}
        for b in broker_ids:
            total = 0.0
            for d in dirs[b]:
                total += dir_weight[(b, d)]
                cumulative[b].append(total)
        made = 0
        topic_index = 0
        deleted_topics: list[str] = []
        while made < spec.partitions:
            count = min(per_topic, spec.partitions - made)
            if topic_index == spec.topics - 1:
                count = spec.partitions - made
            name = f"topic-{topic_index}"
            topic_id = str(random_uuid(rng, avoid=taken))
            min_isr = 2 if topic_index % 2 == 0 else 1
            w.write(
                "TopicRecord",
                {"name": name, "topicId": topic_id, "configs": {"min.insync.replicas": str(min_isr)}},
            )
            if topic_index < spec.deleted_topics and topic_index < spec.topics - 1:
                deleted_topics.append(topic_id)
            rf = min(spec.replication_factor, spec.brokers)
            for index in range(count):
                start = (made + index) % spec.brokers
                step = 1 + ((made + index) // spec.brokers) % max(1, spec.brokers - 1)
                replicas: list[int] = []
                k = start
                while len(replicas) < rf:
                    b = broker_ids[k % spec.brokers]
                    if b not in replicas:
                        replicas.append(b)
                    k += step if len(replicas) == 1 else 1
                directories = []
                for b in replicas:
                    roll = rng.random()
                    if roll < spec.unassigned_fraction:
                        directories.append(UNASSIGNED_DIR_TEXT)
                    elif roll < spec.unassigned_fraction + spec.lost_fraction:
                        directories.append(LOST_DIR_TEXT)
                    else:
                        x = rng.random() * cumulative[b][-1]
                        i = next(j for j, c in enumerate(cumulative[b]) if c >= x)
                        directories.append(dirs[b][i])
                p = _Partition(topic_id, name, index, replicas, directories, list(replicas), replicas[0])
                lost_leader = directories[0] == LOST_DIR_TEXT
                if lost_leader:
                    # A LOST replica is offline: §3.6 would not have elected it.
                    p.isr = [b for b, d in zip(replicas, directories, strict=True) if d != LOST_DIR_TEXT] or [
                        replicas[0]
                    ]
                    p.leader = _elect(
                        _Partition(topic_id, name, index, replicas, directories, p.isr, -1), p.isr, brokers
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
                    if (b, d) in placed and topic_id not in deleted_topics:
                        placed[(b, d)].append((name, index))
                hit = any((b, d) in offline for b, d in zip(replicas, directories, strict=True))
                if hit or any(b in fenced or b in unregistered for b in replicas) or rng.random() < 0.02:
                    touched.append(p)
            made += count
            topic_index += 1
            result.partitions += count

        # Incidents, each with its partition changes (§3.6).
        def dirs_changed(b: int) -> None:
            w.write(
                "BrokerRegistrationChangeRecord",
                {
                    "brokerId": b,
                    "brokerEpoch": brokers.epoch[b],
                    "logDirs": sorted(brokers.online[b]),
                    "offlineLogDirs": brokers.offline[b],
                },
            )

        def dir_offline(b: int, d: str) -> None:
            brokers.online[b] = [x for x in brokers.online[b] if x != d]
            brokers.offline[b] = sorted([*brokers.offline[b], d])
            dirs_changed(b)
            for p in touched:
                if p.topic_id in deleted_topics:
                    continue
                if b in p.replicas and p.directories[p.replicas.index(b)] == d:
                    _change(w, p, brokers, remove=b)

        for b, d in sorted(offline):
            dir_offline(b, d)
        # Some offline dirs come back (the agent found the disk healthy again), and of those some
        # fail a second time: the timeline must report both failures and the return in between.
        recovered = sorted(offline)[: spec.recovered_dirs]
        for b, d in recovered:
            brokers.online[b] = sorted([*brokers.online[b], d])
            brokers.offline[b] = [x for x in brokers.offline[b] if x != d]
            dirs_changed(b)
            offline.discard((b, d))
        for b, d in recovered[: spec.refailed_dirs]:
            dir_offline(b, d)
            offline.add((b, d))
        result.offline_dirs.extend(sorted(offline))
        for b in sorted(fenced | unregistered):
            brokers.fenced[b] = True
            for p in touched:
                if b in p.replicas and p.topic_id not in deleted_topics:
                    _change(w, p, brokers, remove=b)
            w.write(
                "BrokerRegistrationChangeRecord",
                {"brokerId": b, "brokerEpoch": brokers.epoch[b], "fenced": True},
            )
            result.fenced.append(b)
        for b in sorted(unregistered):
            w.write("UnregisterBrokerRecord", {"brokerId": b, "brokerEpoch": brokers.epoch[b]})
            brokers.registered.discard(b)
        live = [p for p in touched if p.topic_id not in deleted_topics]
        for p in rng.sample(live, min(spec.leader_moves, len(live))):
            candidates = [
                b
                for b in p.isr
                if b != p.leader and brokers.acceptable(b, p.directories[p.replicas.index(b)])
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
        movable = [p for p in live if len(p.replicas) < spec.brokers]
        for p in rng.sample(movable, min(spec.reassignments, len(movable))):
            # Replace the last replica by another broker: the new one starts UNASSIGNED.
            gone = p.replicas[-1]
            newcomer = next(b for b in broker_ids if b not in p.replicas and b in brokers.registered)
            old_dir = p.directories[-1]
            if (gone, old_dir) in placed:
                placed[(gone, old_dir)] = [x for x in placed[(gone, old_dir)] if x != (p.topic, p.index)]
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
            leader = _elect(p, p.isr, brokers)
            if leader != p.leader:
                p.leader, p.leader_epoch = leader, p.leader_epoch + 1
                data["leader"] = leader
            w.write("PartitionChangeRecord", data)
        for topic_id in deleted_topics:
            w.write("RemoveTopicRecord", {"topicId": topic_id})
        result.records = w.offset
    # Telemetry: sizes per dir, skewed dirs nearly full, a few dirs without any sample.
    silent = set(rng.sample(all_dirs, min(spec.telemetry_missing_dirs, len(all_dirs))))
    with open(telemetry, "wb") as out:
        for b, d in all_dirs:
            if (b, d) in silent:
                continue
            total = rng.choice(spec.dir_total_bytes)
            target = (
                rng.uniform(0.85, 0.99)
                if (b, d) in skewed
                else rng.uniform(0.3, 0.9) * spec.mean_utilisation / 0.6
            )
            hosted = placed[(b, d)]
            sizes = list(_sizes(rng, len(hosted), int(total * min(target, 0.99))))
            for sample in range(spec.samples_per_dir):
                latest = sample == spec.samples_per_dir - 1
                ts = 1_700_000_000.0 + 60.0 * sample + b * 0.001
                is_offline = (b, d) in offline and latest
                used = sum(sizes) if latest else sum(sizes) // 2
                state = "offline" if is_offline else ("full" if used > 0.95 * total else "online")
                entries = (
                    []
                    if is_offline
                    else [
                        {"topic": t, "partition": i, "sizeBytes": s if latest else s // 2}
                        for (t, i), s in zip(hosted, sizes, strict=True)
                    ]
                )
                line = {
                    "ts": ts,
                    "brokerId": b,
                    "directoryId": d,
                    "path": f"/var/lib/jbod/broker-{b}/{d}",
                    "state": state,
                    "totalBytes": 0 if is_offline else total,
                    "usableBytes": 0 if is_offline else max(0, total - used),
                    "replicas": entries,
                    "probeSeconds": 0.002,
                    "probeErrors": 1 if is_offline else 0,
                    "error": "EIO: Input/output error" if is_offline else None,
                }
                out.write(orjson.dumps(line) + b"\n")
                result.samples += 1
    return result
