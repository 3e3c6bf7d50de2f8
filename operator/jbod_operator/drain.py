"""Draining disks and brokers, and rebalancing onto new brokers: pure decisions over one snapshot.

The operator is level-triggered: every reconcile builds a `Snapshot` (the controller's partitions,
reassignments in progress and broker registrations; each broker's log dirs with their sizes and
running moves) and asks these functions what to do next. Nothing here does I/O or reads a clock.

Guarantees:
* **Refused up front, changing nothing.** A drain that has not started yet (nothing cordoned for
  it) is first planned in full: every replica it would move gets a target. If one cannot (too few
  brokers for the partition's replication factor, not enough free bytes, no online dir that is not
  cordoned), the whole drain is refused with one line per reason and no action is returned.
  A drain that has started is never refused: what blocks it is reported and waited for.
* **Never two replicas of a partition on one broker**: a target broker is never one of the
  partition's replicas (current, adding or removing), nor chosen twice for one partition.
* **Never a second reassignment of a partition already being reassigned**, and never a second
  move of a replica whose move is running; at most `max_in_flight` partitions move at once
  (reassignments cluster-wide, moves per broker), the running ones counted.
* **Position-preserving targets**: the replacement of a leaving broker takes its position in the
  replica list, so the preferred leader stays first unless it leaves.
* **Racks kept** (KIP-36): a replacement broker is taken from the leaving broker's rack if one
  there can take the replica, else from a rack none of the partition's other replicas is in, else
  from any rack (brokers without a rack count as one rack, as Kafka's KRaft controller counts
  them); a rebalance onto joining brokers prefers them in the same order.
* **Targets by free bytes**: within that order, a replacement broker is the eligible one (`acceptsNewReplicas`) with
  the most free bytes on its online, not-cordoned dirs, among those with a dir the replica fits
  in (free bytes minus `RESERVE` of its size); a dir of a disk being drained gets the dir with the
  most free bytes. Sizes are the replica's own, else the largest of its partition's replicas.
* **A disk moved to a new volume drains into it only** (`into`): not before the new volume's dir
  is online (nothing cordoned or moved until then), refused up front if it does not fit there.
* **Full disks that cannot grow are relieved in rounds** (`plan_relief`): only dirs their broker
  cordons for their space; the largest replicas first until `RELIEF_SHARE` of the dir moves, to
  the broker's other online dirs not cordoned for any reason, each kept `2 * RELIEF_SHARE` under
  the full dir's use; no round while the last one's moves run; no cordon and no throttle set.
* **Throttles as `kafka-reassign-partitions.sh --throttle` sets them**: for every partition being
  reassigned, `leader.replication.throttled.replicas` names its existing replicas and
  `follower.replication.throttled.replicas` its adding ones, and the rate goes on every broker
  involved.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

EVERY_DIR: Final = "*"
RESERVE: Final = 0.05  # the share of a dir's total bytes a drain never fills
RELIEF_SHARE: Final = 0.10  # the share of a full dir's total bytes one relief round moves off it
LEADER_THROTTLED: Final = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED: Final = "follower.replication.throttled.replicas"
LEADER_RATE: Final = "leader.replication.throttled.rate"
FOLLOWER_RATE: Final = "follower.replication.throttled.rate"
CORDONED_LOG_DIRS: Final = "cordoned.log.dirs"


@dataclass(frozen=True)
class LogDir:
    directory_id: str
    path: str
    online: bool
    cordoned: bool
    usable_bytes: int
    total_bytes: int
    space_cordoned: bool = False  # the broker cordoned it for its space (log.dir.cordon.threshold)

    @property
    def used_bytes(self) -> int:
        return self.total_bytes - self.usable_bytes

    @property
    def used_ratio(self) -> float:
        return self.used_bytes / self.total_bytes if self.total_bytes > 0 else 0.0

    @property
    def free_bytes(self) -> int:
        """What a drain may fill: usable bytes minus the reserve."""
        return max(0, self.usable_bytes - int(self.total_bytes * RESERVE))


@dataclass(frozen=True)
class Broker:
    broker_id: int
    fenced: bool
    accepts_new_replicas: bool
    dirs: tuple[LogDir, ...] = ()  # empty while the broker's own view cannot be read
    rack: str | None = None  # its `broker.rack`


@dataclass(frozen=True)
class Partition:
    topic: str
    index: int
    replicas: tuple[int, ...]
    directories: tuple[str, ...] = ()
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    def directory_of(self, broker_id: int) -> str | None:
        if broker_id not in self.replicas:
            return None
        index = self.replicas.index(broker_id)
        return self.directories[index] if index < len(self.directories) else None


ReplicaKey = tuple[str, int, int]  # topic, partition, broker


@dataclass(frozen=True)
class Snapshot:
    brokers: Mapping[int, Broker]
    partitions: tuple[Partition, ...]
    sizes: Mapping[ReplicaKey, int] = field(default_factory=dict)  # bytes of a replica on a broker
    moving: frozenset[ReplicaKey] = frozenset()  # replicas with an intra-broker move running

    def size(self, partition: Partition, broker_id: int) -> int:
        own = self.sizes.get((partition.topic, partition.index, broker_id))
        if own is not None:
            return own
        return max(
            (self.sizes.get((partition.topic, partition.index, b), 0) for b in partition.replicas), default=0
        )


@dataclass(frozen=True)
class Reassignment:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    directories: tuple[str | None, ...] = ()  # per replica: the dir named in advance for a new one


@dataclass(frozen=True)
class Move:
    broker_id: int
    topic: str
    partition: int
    directory_id: str


@dataclass(frozen=True)
class Progress:
    replicas: int = 0  # replicas still to leave
    bytes: int = 0
    in_flight: int = 0  # partitions moving now

    def describe(self, where: str) -> str:
        return f"{self.replicas} replicas / {self.bytes} bytes left on {where}, {self.in_flight} moving"


@dataclass(frozen=True)
class BrokerDrain:
    """What to do for the brokers leaving (`refused` non-empty: nothing)."""

    refused: tuple[str, ...] = ()
    start: tuple[Reassignment, ...] = ()
    waiting: tuple[str, ...] = ()  # why some replicas cannot move yet (a started drain)
    progress: Progress = Progress()

    @property
    def done(self) -> bool:
        return (
            not self.refused
            and not self.start
            and self.progress.replicas == 0
            and self.progress.in_flight == 0
        )


@dataclass(frozen=True)
class DiskDrain:
    refused: tuple[str, ...] = ()
    moves: tuple[Move, ...] = ()
    waiting: tuple[str, ...] = ()
    progress: Progress = Progress()
    ready: bool = True  # False: a disk's new volume is not online yet, the drain has not begun

    @property
    def done(self) -> bool:
        return not self.refused and self.progress.replicas == 0


# ---------------------------------------------------------------------------------------------
# From the wire shapes


def snapshot(
    brokers: Sequence[Mapping[str, Any]],
    topics: Sequence[Mapping[str, Any]],
    log_dirs: Mapping[int, Sequence[Mapping[str, Any]] | None],
) -> Snapshot:
    """A snapshot from the controller's `GET /v1/brokers` and `GET /v1/topics` and each broker's
    `GET /v1/log-dirs` (None: unreachable)."""
    sizes: dict[ReplicaKey, int] = {}
    moving: set[ReplicaKey] = set()
    parsed: dict[int, Broker] = {}
    for registration in brokers:
        broker_id = int(registration["brokerId"])
        offline = set(registration.get("offlineLogDirs") or [])
        cordoned = set(registration.get("cordonedLogDirs") or [])
        dirs = []
        for entry in log_dirs.get(broker_id) or []:
            directory = str(entry.get("directoryId") or "")
            dirs.append(
                LogDir(
                    directory_id=directory,
                    path=str(entry.get("path", "")),
                    online=entry.get("state") == "online" and directory not in offline,
                    cordoned=bool(entry.get("cordoned")) or directory in cordoned,
                    usable_bytes=int(entry.get("usableBytes") or 0),
                    total_bytes=int(entry.get("totalBytes") or 0),
                    space_cordoned=bool(entry.get("spaceCordoned")),
                )
            )
            for replica in entry.get("replicas") or []:
                key = (str(replica["topic"]), int(replica["partition"]), broker_id)
                if replica.get("future"):
                    moving.add(key)
                else:
                    sizes[key] = int(replica.get("sizeBytes") or 0)
        parsed[broker_id] = Broker(
            broker_id=broker_id,
            fenced=bool(registration.get("fenced")),
            accepts_new_replicas=bool(registration.get("acceptsNewReplicas", not registration.get("fenced"))),
            dirs=tuple(dirs),
            rack=str(registration["rack"]) if registration.get("rack") else None,
        )
    partitions = tuple(
        Partition(
            topic=str(topic["name"]),
            index=int(p["partitionIndex"]),
            replicas=tuple(int(b) for b in p.get("replicas") or []),
            directories=tuple(str(d) for d in p.get("directories") or []),
            adding=tuple(int(b) for b in p.get("addingReplicas") or []),
            removing=tuple(int(b) for b in p.get("removingReplicas") or []),
        )
        for topic in topics
        for p in topic.get("partitions") or []
    )
    return Snapshot(brokers=parsed, partitions=partitions, sizes=sizes, moving=frozenset(moving))


# ---------------------------------------------------------------------------------------------
# Brokers leaving (scale-down) and joining (scale-up rebalance)


class _Room:
    """Free bytes per (broker, dir) as targets fill up during one plan."""

    def __init__(self, snap: Snapshot, *, excluded: Iterable[int]) -> None:
        excluded = set(excluded)
        self.dirs: dict[int, dict[str, int]] = {}
        self.ineligible: dict[int, str] = {}
        for broker in snap.brokers.values():
            if broker.broker_id in excluded:
                continue
            usable = {d.directory_id: d.free_bytes for d in broker.dirs if d.online and not d.cordoned}
            if broker.fenced:
                self.ineligible[broker.broker_id] = f"broker {broker.broker_id} is fenced"
            elif not broker.accepts_new_replicas:
                self.ineligible[broker.broker_id] = f"broker {broker.broker_id} accepts no new replica"
            elif not broker.dirs:
                self.ineligible[broker.broker_id] = f"broker {broker.broker_id}'s log dirs cannot be read"
            elif not usable:
                self.ineligible[broker.broker_id] = (
                    f"broker {broker.broker_id} has no online dir that is not cordoned"
                )
            else:
                self.dirs[broker.broker_id] = usable

    def free(self, broker_id: int) -> int:
        return sum(self.dirs.get(broker_id, {}).values())

    def best_dir(self, broker_id: int, size: int) -> str | None:
        candidates = [(free, d) for d, free in self.dirs.get(broker_id, {}).items() if free >= size]
        return max(candidates)[1] if candidates else None

    def take(self, broker_id: int, directory: str, size: int) -> None:
        self.dirs[broker_id][directory] -= size


def _rack_order(snap: Snapshot, leaving: int, staying: Iterable[int]) -> list[set[int]]:
    """The brokers a replica leaving broker `leaving` should go to, best first: those of its own
    rack, then those of a rack none of the `staying` replicas is in."""
    racks = {b.broker_id: b.rack for b in snap.brokers.values()}
    used = {racks.get(b) for b in staying}
    own = racks.get(leaving)
    return [
        {b for b, rack in racks.items() if rack == own},
        {b for b, rack in racks.items() if rack not in used},
    ]


def _choose_broker(
    room: _Room,
    size: int,
    taken: set[int],
    only: Iterable[int] | None = None,
    prefer: Sequence[set[int]] = (),
) -> tuple[int, str] | None:
    """The eligible broker not in `taken` with the most free bytes among those where `size` fits,
    from the first of the `prefer` sets holding one (then from all)."""
    for preferred in prefer:
        chosen = _choose_broker(room, size, taken, preferred if only is None else preferred & set(only))
        if chosen is not None:
            return chosen
    pool = set(room.dirs) if only is None else set(only) & set(room.dirs)
    best: tuple[int, int, str] | None = None
    for broker_id in sorted(pool - taken):
        directory = room.best_dir(broker_id, size)
        if directory is None:
            continue
        free = room.free(broker_id)
        if best is None or free > best[0]:
            best = (free, broker_id, directory)
    return None if best is None else (best[1], best[2])


def plan_broker_drain(
    snap: Snapshot, *, leaving: frozenset[int], started: bool, max_in_flight: int
) -> BrokerDrain:
    """Reassign every replica of the `leaving` brokers to the others (see the module's guarantees)."""
    room = _Room(snap, excluded=leaving)
    hosted = [p for p in snap.partitions if set(p.replicas) & leaving]
    in_flight = [p for p in snap.partitions if p.reassigning]
    left_replicas = sum(len(set(p.replicas) & leaving) for p in hosted)
    left_bytes = sum(snap.size(p, b) for p in hosted for b in set(p.replicas) & leaving)
    progress = Progress(
        replicas=left_replicas,
        bytes=left_bytes,
        in_flight=sum(1 for p in in_flight if set(p.replicas) & leaving),
    )
    targets: list[Reassignment] = []
    problems: list[str] = []
    needed = 0
    for partition in sorted(hosted, key=lambda p: (p.topic, p.index)):
        if partition.reassigning:
            continue  # never a second reassignment; it is counted in flight
        taken = set(partition.replicas)
        replicas = list(partition.replicas)
        directories: list[str | None] = [None] * len(replicas)
        for position, broker_id in enumerate(partition.replicas):
            if broker_id not in leaving:
                continue
            size = snap.size(partition, broker_id)
            needed += size
            staying = [b for b in replicas if b not in leaving and b != broker_id]
            chosen = _choose_broker(room, size, taken, prefer=_rack_order(snap, broker_id, staying))
            if chosen is None:
                problems.append(_why_not(room, partition, size, taken, leaving=leaving))
                break
            target, directory = chosen
            room.take(target, directory, size)
            taken.add(target)
            replicas[position] = target
            directories[position] = directory
        else:
            targets.append(
                Reassignment(partition.topic, partition.index, tuple(replicas), tuple(directories))
            )
    if problems:
        lines = _summarise(problems, needed=needed, room=room)
        if not started:
            return BrokerDrain(refused=lines, progress=progress)
        return BrokerDrain(
            start=_bounded(targets, in_flight, max_in_flight), waiting=lines, progress=progress
        )
    return BrokerDrain(start=_bounded(targets, in_flight, max_in_flight), progress=progress)


def _bounded(
    targets: Sequence[Reassignment], in_flight: Sequence[Partition], max_in_flight: int
) -> tuple[Reassignment, ...]:
    return tuple(targets[: max(0, max_in_flight - len(in_flight))])


def _why_not(
    room: _Room, partition: Partition, size: int, taken: set[int], *, leaving: frozenset[int]
) -> str:
    name = f"{partition.topic}-{partition.index}"
    others = set(room.dirs) - taken
    if not others:
        remaining = len(set(room.dirs) | set(room.ineligible))
        blocked = [room.ineligible[b] for b in sorted(room.ineligible) if b not in taken]
        why = f" ({'; '.join(blocked)})" if blocked else ""
        return (
            f"partition {name} has {len(partition.replicas)} replicas but only {len(set(room.dirs) - leaving)} "
            f"of the {remaining} remaining brokers can take one{why}"
        )
    return f"no room for partition {name} ({size} bytes): " + ", ".join(
        f"broker {b} has at most {max(room.dirs[b].values())} bytes free in one dir" for b in sorted(others)
    )


def _summarise(problems: Sequence[str], *, needed: int, room: _Room) -> tuple[str, ...]:
    """The first few problems, and what is needed against what is free when space is one."""
    lines = list(dict.fromkeys(problems))
    out = lines[:3]
    if len(lines) > 3:
        out.append(f"and {len(lines) - 3} more")
    if any(line.startswith("no room") for line in lines):
        free = sum(room.free(b) for b in room.dirs)
        out.append(f"needs {needed} bytes, {free} bytes free on the remaining brokers' dirs")
    return tuple(out)


def plan_rebalance(snap: Snapshot, *, joining: frozenset[int], max_in_flight: int) -> BrokerDrain:
    """Move replicas onto the `joining` brokers until each holds its share (the replicas divided by
    the brokers, rounded down), from the brokers holding the most; `done` once they hold it or
    nothing can move. Partitions being reassigned are left alone; nothing is ever refused."""
    counts: dict[int, int] = dict.fromkeys(snap.brokers, 0)
    for partition in snap.partitions:
        for broker_id in partition.replicas:
            counts[broker_id] = counts.get(broker_id, 0) + 1
    share = sum(counts.values()) // max(1, len(snap.brokers))
    room = _Room(snap, excluded=())
    wanting = {b: share - counts.get(b, 0) for b in joining if counts.get(b, 0) < share}
    in_flight = [p for p in snap.partitions if p.reassigning]
    starts: list[Reassignment] = []
    budget = max(0, max_in_flight - len(in_flight))
    for partition in sorted(snap.partitions, key=lambda p: (p.topic, p.index)):
        if len(starts) >= budget or not any(n > 0 for n in wanting.values()):
            break
        if partition.reassigning or set(partition.replicas) & joining:
            continue
        source = max(partition.replicas, key=lambda b: (counts.get(b, 0), b))
        if counts.get(source, 0) <= share:
            continue
        size = snap.size(partition, source)
        chosen = _choose_broker(
            room,
            size,
            set(partition.replicas),
            only=[b for b, n in wanting.items() if n > 0],
            prefer=_rack_order(snap, source, [b for b in partition.replicas if b != source]),
        )
        if chosen is None:
            continue
        target, directory = chosen
        room.take(target, directory, size)
        replicas = tuple(target if b == source else b for b in partition.replicas)
        directories = tuple(directory if b == target else None for b in replicas)
        starts.append(Reassignment(partition.topic, partition.index, replicas, directories))
        counts[source] -= 1
        counts[target] = counts.get(target, 0) + 1
        wanting[target] -= 1
    progress = Progress(
        replicas=sum(max(0, n) for n in wanting.values()),
        in_flight=sum(1 for p in in_flight if set(p.adding) & joining),
    )
    if not starts and progress.in_flight == 0:
        progress = Progress()  # nothing more can move: the rebalance is over
    return BrokerDrain(start=tuple(starts), progress=progress)


# ---------------------------------------------------------------------------------------------
# A disk leaving one broker


def plan_disk_drain(  # noqa: PLR0913  the snapshot, then the broker, its dirs leaving and their targets, the state
    snap: Snapshot,
    *,
    broker_id: int,
    paths: frozenset[str],
    started: bool,
    max_in_flight: int,
    into: Mapping[str, str] | None = None,
) -> DiskDrain:
    """Move the broker's replicas off the dirs at `paths` to its other online, not-cordoned dirs;
    a dir named in `into` (a disk moved to a new volume) only to the dir at its target path, and
    not before that dir is online (`ready` False: nothing is cordoned or moved yet)."""
    broker = snap.brokers.get(broker_id)
    where = f"broker {broker_id}"
    if broker is None or not broker.dirs:
        message = f"{where}'s log dirs cannot be read"
        return DiskDrain(refused=() if started else (message,), waiting=(message,) if started else ())
    into = into or {}
    by_path = {d.path: d for d in broker.dirs}
    sources = {d.directory_id: d.path for d in broker.dirs if d.path in paths}
    room = {
        d.directory_id: d.free_bytes
        for d in broker.dirs
        if d.online and not d.cordoned and d.path not in paths
    }
    on_sources = sorted(
        (p for p in snap.partitions if p.directory_of(broker_id) in sources), key=lambda p: (p.topic, p.index)
    )
    moving = [p for p in on_sources if (p.topic, p.index, broker_id) in snap.moving]
    left_bytes = sum(snap.size(p, broker_id) for p in on_sources)
    progress = Progress(replicas=len(on_sources), bytes=left_bytes, in_flight=len(moving))
    targets = sorted({into[p] for p in paths if p in into})
    absent = [t for t in targets if t not in by_path or not by_path[t].online]
    if absent and not started:
        return DiskDrain(
            waiting=(f"{where}: the new volume {', '.join(absent)} is not online yet",),
            progress=progress,
            ready=False,
        )
    moves: list[Move] = []
    problems: list[str] = []
    needed = 0
    for partition in sorted(on_sources, key=lambda p: -snap.size(p, broker_id)):
        if (partition.topic, partition.index, broker_id) in snap.moving:
            continue
        size = snap.size(partition, broker_id)
        needed += size
        source = sources[str(partition.directory_of(broker_id))]
        target_path = into.get(source)
        target = _take_room(
            room,
            size,
            only=None
            if target_path is None
            else {d.directory_id for d in broker.dirs if d.path == target_path},
        )
        if target is None:
            problems.append(f"no room on {where} for {partition.topic}-{partition.index} ({size} bytes)")
            continue
        moves.append(Move(broker_id, partition.topic, partition.index, target))
    lines: tuple[str, ...] = ()
    if problems:
        free = sum(room.values()) if room else 0
        detail = (
            "no other online dir that is not cordoned"
            if not room
            else f"{free} bytes free in its other dirs"
            + (f" ({', '.join(targets)} for the disks moved to a new volume)" if targets else "")
        )
        lines = (f"{where} needs {needed} bytes to empty {', '.join(sorted(paths))}, {detail}",)
        if not started:
            return DiskDrain(refused=lines, progress=progress)
    bounded = tuple(moves[: max(0, max_in_flight - len(moving))])
    return DiskDrain(moves=bounded, waiting=lines, progress=progress)


# ---------------------------------------------------------------------------------------------
# A full disk that cannot grow (issue 35)


def plan_relief(snap: Snapshot, *, broker_id: int, paths: frozenset[str], max_in_flight: int) -> DiskDrain:
    """One round of moves off the broker's dirs at `paths` that it cordoned for their space: the
    largest replicas first, at least `RELIEF_SHARE` of the dir's total bytes (or all that fit),
    each to the broker's other online, not-cordoned dir with the most room, where room keeps the
    target at least `2 * RELIEF_SHARE` emptier than the full dir was (so the target is not the
    next full dir). A round starts only once the last one's moves are done."""
    broker = snap.brokers.get(broker_id)
    if broker is None or not broker.dirs:
        return DiskDrain(waiting=(f"broker {broker_id}'s log dirs cannot be read",))
    moves: list[Move] = []
    waiting: list[str] = []
    moving_total = planned = 0
    for source in broker.dirs:
        if source.path not in paths or not source.space_cordoned or not source.online:
            continue
        on_source = [p for p in snap.partitions if p.directory_of(broker_id) == source.directory_id]
        moving = sum(1 for p in on_source if (p.topic, p.index, broker_id) in snap.moving)
        moving_total += moving
        if moving:
            continue  # the round under way first: the dir's use is measured again after it
        ceiling = source.used_ratio - 2 * RELIEF_SHARE
        room = {
            d.directory_id: min(d.free_bytes, int(ceiling * d.total_bytes) - d.used_bytes)
            for d in broker.dirs
            if d.online and not d.cordoned and not d.space_cordoned and d.path not in paths
        }
        goal, moved = int(RELIEF_SHARE * source.total_bytes), 0
        for partition in sorted(on_source, key=lambda p: (-snap.size(p, broker_id), p.topic, p.index)):
            size = snap.size(partition, broker_id)
            if moved >= goal or len(moves) + moving_total >= max_in_flight:
                break
            target = _take_room(room, size) if size > 0 else None
            if target is None:
                continue
            moved += size
            moves.append(Move(broker_id, partition.topic, partition.index, target))
        planned += moved
        if moved == 0 and not any(snap.size(p, broker_id) > 0 for p in on_source):
            waiting.append(
                f"full dir {source.path} of broker {broker_id}: no replica with data to move off it"
            )
        elif moved == 0:
            waiting.append(
                f"full dir {source.path} of broker {broker_id}: no other dir of the broker has room "
                "for its replicas (free space or move some to another broker)"
            )
    return DiskDrain(
        moves=tuple(moves),
        waiting=tuple(waiting),
        progress=Progress(replicas=len(moves), bytes=planned, in_flight=moving_total),
    )


def _take_room(room: dict[str, int], size: int, only: set[str] | None = None) -> str | None:
    """The dir (of `only`, if given) with the most room that `size` bytes fit in (its room
    taken), or None."""
    fits = [(free, d) for d, free in room.items() if free >= size and (only is None or d in only)]
    if not fits:
        return None
    _, target = max(fits)
    room[target] -= size
    return target


# ---------------------------------------------------------------------------------------------
# Throttles and cordons


@dataclass(frozen=True)
class Throttles:
    brokers: frozenset[int]  # brokers whose replication rates are set
    topics: Mapping[str, Mapping[str, str]]  # topic → the two throttled-replicas configs


def throttles(partitions: Iterable[Partition], started: Iterable[Reassignment] = ()) -> Throttles:
    """Kafka's `--throttle` settings for the partitions being reassigned (and those about to be)."""
    leader: dict[str, list[str]] = {}
    follower: dict[str, list[str]] = {}
    involved: set[int] = set()
    moving = [
        (p.topic, p.index, tuple(b for b in p.replicas if b not in p.adding), p.adding)
        for p in partitions
        if p.reassigning
    ]
    current = {(p.topic, p.index): p.replicas for p in partitions}
    for r in started:
        existing = current.get((r.topic, r.partition), ())
        moving.append((r.topic, r.partition, existing, tuple(b for b in r.replicas if b not in existing)))
    for topic, index, existing, adding in sorted(moving):
        leader.setdefault(topic, []).extend(f"{index}:{b}" for b in sorted(existing))
        follower.setdefault(topic, []).extend(f"{index}:{b}" for b in sorted(adding))
        involved.update(existing, adding)
    return Throttles(
        brokers=frozenset(involved),
        topics={
            t: {LEADER_THROTTLED: ",".join(leader[t]), FOLLOWER_THROTTLED: ",".join(follower.get(t, []))}
            for t in sorted(leader)
        },
    )


def cordon_entries(value: str | None) -> tuple[str, ...]:
    """The entries of a `cordoned.log.dirs` value."""
    return tuple(e.strip() for e in (value or "").split(",") if e.strip())


# ---------------------------------------------------------------------------------------------
# One reconcile's decision


@dataclass(frozen=True)
class Owned:
    """What the operator set and must undo (kept in annotations, so a restart knows it)."""

    cordons: Mapping[int, frozenset[str]] = field(default_factory=dict)  # broker → entries it APPENDed
    throttled_brokers: frozenset[int] = frozenset()
    throttled_topics: frozenset[str] = frozenset()
    rebalance: frozenset[int] = frozenset()  # brokers added by a scale-up, to rebalance onto

    def to_json(self) -> dict[str, Any]:
        return {
            "cordons": {str(b): sorted(e) for b, e in sorted(self.cordons.items()) if e},
            "throttledBrokers": sorted(self.throttled_brokers),
            "throttledTopics": sorted(self.throttled_topics),
            "rebalance": sorted(self.rebalance),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Owned:
        data = data or {}
        return cls(
            cordons={int(b): frozenset(str(x) for x in e) for b, e in (data.get("cordons") or {}).items()},
            throttled_brokers=frozenset(int(b) for b in data.get("throttledBrokers") or []),
            throttled_topics=frozenset(str(t) for t in data.get("throttledTopics") or []),
            rebalance=frozenset(int(b) for b in data.get("rebalance") or []),
        )


@dataclass(frozen=True)
class Wanted:
    """What the spec asks for: brokers leaving, disks leaving (broker → log dir paths), and the
    drain settings (brokers to rebalance onto are in `Owned.rebalance`)."""

    leaving: frozenset[int] = frozenset()
    disks: Mapping[int, frozenset[str]] = field(default_factory=dict)
    spec_paths: frozenset[str] = frozenset()  # the log dir paths of the spec's disks
    # Full disks whose claim cannot grow (broker → log dir paths): replicas move off them.
    relieve: Mapping[int, frozenset[str]] = field(default_factory=dict)
    # Disks moved to a new volume (broker → leaving log dir path → the new volume's path): their
    # replicas go there only.
    into: Mapping[int, Mapping[str, str]] = field(default_factory=dict)
    max_bytes_per_second: int = 50_000_000
    max_partitions_in_flight: int = 5


@dataclass(frozen=True)
class Actions:
    """What to do, in this order: record `owned` (before anything is set), cordon, start
    reassignments and moves, set throttles; then clear throttles and uncordon, and record `owned`
    again. `refused` / `waiting` / `progress` feed the `Draining` condition."""

    owned: Owned
    cordon: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    uncordon: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    reassignments: tuple[Reassignment, ...] = ()
    moves: tuple[Move, ...] = ()
    broker_rates: frozenset[int] = frozenset()  # SET both rates to max_bytes_per_second
    clear_rates: frozenset[int] = frozenset()  # DELETE both rates
    topic_configs: Mapping[str, Mapping[str, str | None]] = field(default_factory=dict)  # None: DELETE
    refused: tuple[str, ...] = ()
    waiting: tuple[str, ...] = ()
    progress: tuple[str, ...] = ()
    started: tuple[str, ...] = ()  # one line per drain started now (Event DrainStarted)
    ended: tuple[str, ...] = ()  # one line per drain whose cordon is lifted (completed or reverted)
    replicas_left: int = 0  # on the disks and brokers draining
    bytes_left: int = 0

    @property
    def draining(self) -> bool:
        return bool(self.progress)


@dataclass
class _Draft:
    """The actions of one `decide` as they accumulate (private: `decide` returns frozen `Actions`)."""

    cordons: dict[int, set[str]]
    cordon: dict[int, list[str]] = field(default_factory=dict)
    reassignments: list[Reassignment] = field(default_factory=list)
    moves: list[Move] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    progress: list[str] = field(default_factory=list)
    started: list[str] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)
    replicas_left: int = 0
    bytes_left: int = 0

    def add_cordon(self, broker_id: int, entry: str) -> None:
        if entry not in self.cordons.setdefault(broker_id, set()):
            self.cordons[broker_id].add(entry)
            self.cordon.setdefault(broker_id, []).append(entry)

    def count_progress(self, where: str, progress: Progress, waiting: Iterable[str]) -> None:
        """What one drain still waits for and has left: the `Draining` condition's lines and the
        replicas and bytes counted in the metrics."""
        self.waiting.extend(waiting)
        self.progress.append(progress.describe(where))
        self.replicas_left += progress.replicas
        self.bytes_left += progress.bytes


def _drain_brokers(snap: Snapshot, wanted: Wanted, draft: _Draft) -> None:
    begun = all(EVERY_DIR in draft.cordons.get(b, set()) for b in wanted.leaving)
    plan = plan_broker_drain(
        snap, leaving=wanted.leaving, started=begun, max_in_flight=wanted.max_partitions_in_flight
    )
    names = ", ".join(str(b) for b in sorted(wanted.leaving))
    if plan.refused:
        draft.refused.append(f"Refused to drain broker(s) {names}: {'; '.join(plan.refused)}")
        return
    for broker_id in sorted(wanted.leaving):
        draft.add_cordon(broker_id, EVERY_DIR)
    if not begun:
        draft.started.append(
            f"Started draining broker(s) {names}: {plan.progress.replicas} replicas to reassign"
        )
    draft.reassignments.extend(plan.start)
    draft.count_progress(
        f"broker(s) {names}", plan.progress, (f"broker(s) {names}: {line}" for line in plan.waiting)
    )


def _drain_disks(snap: Snapshot, wanted: Wanted, draft: _Draft) -> None:
    for broker_id in sorted(set(wanted.disks) - wanted.leaving):  # a leaving broker's disks go with it
        paths = wanted.disks[broker_id]
        begun = paths <= draft.cordons.get(broker_id, set())
        plan = plan_disk_drain(
            snap,
            broker_id=broker_id,
            paths=paths,
            started=begun,
            max_in_flight=wanted.max_partitions_in_flight,
            into=wanted.into.get(broker_id),
        )
        where = f"{', '.join(sorted(paths))} of broker {broker_id}"
        if plan.refused:
            draft.refused.append(f"Refused to drain {where}: {'; '.join(plan.refused)}")
            continue
        if plan.ready:  # else it waits for a new volume: nothing cordoned or moved yet
            for path in sorted(paths):
                draft.add_cordon(broker_id, path)
            if not begun:
                draft.started.append(f"Started draining {where}: {plan.progress.replicas} replicas to move")
            draft.moves.extend(plan.moves)
        draft.count_progress(where, plan.progress, plan.waiting)


def _relieve(snap: Snapshot, wanted: Wanted, draft: _Draft) -> None:
    """Move replicas off full disks that cannot grow (not those draining or leaving anyway)."""
    for broker_id in sorted(set(wanted.relieve) - wanted.leaving):
        paths = wanted.relieve[broker_id] - wanted.disks.get(broker_id, frozenset())
        if not paths:
            continue
        plan = plan_relief(
            snap, broker_id=broker_id, paths=paths, max_in_flight=wanted.max_partitions_in_flight
        )
        where = f"full {', '.join(sorted(paths))} of broker {broker_id}"
        if plan.moves:
            draft.started.append(
                f"Moving {len(plan.moves)} replicas ({plan.progress.bytes} bytes) off {where} to its other "
                "dirs: it cannot grow"
            )
        draft.moves.extend(plan.moves)
        draft.waiting.extend(plan.waiting)
        if plan.moves or plan.progress.in_flight or plan.waiting:  # shown in the Draining condition
            draft.progress.append(plan.progress.describe(where))


def _rebalance(snap: Snapshot, wanted: Wanted, joining: frozenset[int], draft: _Draft) -> bool:
    """Rebalance onto `joining`; True once it is over."""
    names = ", ".join(str(b) for b in sorted(joining))
    ready = [snap.brokers.get(b) for b in joining]
    if not all(b is not None and b.accepts_new_replicas and b.dirs for b in ready):
        draft.waiting.append(f"rebalance onto broker(s) {names} waits for them to join, unfenced")
        return False
    plan = plan_rebalance(snap, joining=joining, max_in_flight=wanted.max_partitions_in_flight)
    if plan.done:
        draft.ended.append(f"Rebalanced onto broker(s) {names}")
        return True
    draft.reassignments.extend(plan.start)
    draft.progress.append(f"rebalancing onto broker(s) {names}: {plan.progress.replicas} replicas to take")
    return False


def _still_mounted(snap: Snapshot, broker_id: int, path: str) -> bool:
    """The running broker may still have the dir: it reports it, or its dirs cannot be read."""
    broker = snap.brokers.get(broker_id)
    if broker is None:
        return False
    return not broker.dirs or any(d.path == path for d in broker.dirs)


def _uncordon(snap: Snapshot, wanted: Wanted, draft: _Draft) -> dict[int, tuple[str, ...]]:
    """The cordons the operator set that no drain wants any more (finished or reverted). The dir
    of a disk that left the spec stays cordoned until the broker runs without it (its pod is
    recreated after the disk left): lifted earlier, a new replica could land on a disk about to go."""
    uncordon: dict[int, tuple[str, ...]] = {}
    for broker_id, entries in sorted(draft.cordons.items()):
        keep = set(wanted.disks.get(broker_id, frozenset()))
        if broker_id in wanted.leaving:
            keep.add(EVERY_DIR)
        keep |= {
            e
            for e in entries
            if e != EVERY_DIR and e not in wanted.spec_paths and _still_mounted(snap, broker_id, e)
        }
        stale = tuple(sorted(entries - keep))
        if stale:
            uncordon[broker_id] = stale
            draft.ended.append(f"Lifted the cordon of broker {broker_id} on {', '.join(stale)}")
            draft.cordons[broker_id] = entries - set(stale)
    return uncordon


@dataclass(frozen=True)
class _ThrottleChanges:
    set_rates: frozenset[int]
    clear_rates: frozenset[int]
    topic_configs: dict[str, dict[str, str | None]]
    brokers: frozenset[int]  # owned after the change
    topics: frozenset[str]


def _throttle_changes(
    wanted: Throttles, owned: Owned, topic_configs: Mapping[str, Mapping[str, str]]
) -> _ThrottleChanges:
    """Kafka's throttles while partitions move for the operator; every one it set cleared after."""
    changes: dict[str, dict[str, str | None]] = {}
    if wanted.brokers:
        for topic, configs in wanted.topics.items():
            differ = {k: v for k, v in configs.items() if topic_configs.get(topic, {}).get(k) != v}
            if differ:
                changes[topic] = dict(differ)
        return _ThrottleChanges(
            set_rates=wanted.brokers,
            clear_rates=frozenset(),
            topic_configs=changes,
            brokers=owned.throttled_brokers | wanted.brokers,
            topics=owned.throttled_topics | frozenset(wanted.topics),
        )
    for topic in sorted(owned.throttled_topics):
        present = topic_configs.get(topic, {})
        delete: dict[str, str | None] = {
            k: None for k in (LEADER_THROTTLED, FOLLOWER_THROTTLED) if k in present
        }
        if delete:
            changes[topic] = delete
    return _ThrottleChanges(
        set_rates=frozenset(),
        clear_rates=owned.throttled_brokers,
        topic_configs=changes,
        brokers=frozenset(),
        topics=frozenset(),
    )


def decide(
    snap: Snapshot, wanted: Wanted, owned: Owned, topic_configs: Mapping[str, Mapping[str, str]]
) -> Actions:
    """What this reconcile does about drains, rebalances, throttles and cordons."""
    draft = _Draft(cordons={b: set(entries) for b, entries in owned.cordons.items()})
    if wanted.leaving:
        _drain_brokers(snap, wanted, draft)
    _drain_disks(snap, wanted, draft)
    _relieve(snap, wanted, draft)
    rebalance = owned.rebalance - wanted.leaving
    if rebalance and not wanted.leaving and _rebalance(snap, wanted, rebalance, draft):
        rebalance = frozenset()
    uncordon = _uncordon(snap, wanted, draft)
    moving_for_us = bool(wanted.leaving or owned.rebalance)
    wanted_throttles = (
        throttles(snap.partitions, draft.reassignments) if moving_for_us else Throttles(frozenset(), {})
    )
    throttle = _throttle_changes(wanted_throttles, owned, topic_configs)
    return Actions(
        owned=Owned(
            cordons={b: frozenset(e) for b, e in draft.cordons.items() if e},
            throttled_brokers=throttle.brokers,
            throttled_topics=throttle.topics,
            rebalance=rebalance,
        ),
        cordon={b: tuple(e) for b, e in draft.cordon.items()},
        uncordon=uncordon,
        reassignments=tuple(draft.reassignments),
        moves=tuple(draft.moves),
        broker_rates=throttle.set_rates,
        clear_rates=throttle.clear_rates,
        topic_configs=throttle.topic_configs,
        refused=tuple(draft.refused),
        waiting=tuple(draft.waiting),
        progress=tuple(draft.progress),
        started=tuple(draft.started),
        ended=tuple(draft.ended),
        replicas_left=draft.replicas_left,
        bytes_left=draft.bytes_left,
    )
