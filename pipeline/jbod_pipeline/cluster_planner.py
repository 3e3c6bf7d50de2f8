"""The cross-broker move planner: the cluster's dirs, its brokers and the replicas that may move in,
reassignment moves out (pure, deterministic). `jbod-pipeline plan --across-brokers`.

It runs on the driver after the per-broker pass (`planner.plan_broker`, inside Spark), on what
that pass left: every dir's bytes after the intra-broker moves, and only the *candidate* replicas
— those of drained brokers, of drained dirs and of the dirs chosen as sources (`source_dirs`) —
never the whole cluster's replicas. A move here takes a replica from broker X to a dir of broker Y
(a partition reassignment: X leaves the replica list, Y takes its position).

Definitions (as in `planner`): `used(d)`, `cap(d)`, `util = used / cap`. A broker is *usable*
when it is registered and unfenced and not drained (`--drain-broker`). A *target* is a dir in
state `online` with a known capacity, of a usable broker, not drained (`--drain`; drained dirs
and brokers count as cordoned, KIP-1066). A replica may go to a target only if the target's
broker neither hosts a replica of the partition nor hosted one before this plan (so no broker
ever holds two replicas of a partition, and no broker leaves and rejoins a replica list). Every
move keeps its target at or under the threshold: `used(target) + size <= threshold * cap(target)`.
The target of a replica is the target with the lowest utilisation (before the move) where it
fits; ties by broker id and the contract's Uuid order.

The goals, in order (a later goal never undoes an earlier one):
1. Drain: every candidate of a drained broker (all its dirs, offline ones included: the new
   replica is copied from the leader, not from the dir) and every candidate still in a drained
   dir moves, largest first, to a target on another broker; one that cannot is `unplaced` with
   a reason: `size-unknown` (no telemetry size for it or any replica of its partition),
   `no-broker` (every usable broker with a target already hosts the partition: too few brokers
   for its replication factor) or `no-room` (fits no eligible target under the threshold).
2. Capacity: each readable dir of a usable broker still over the threshold, worst first, sheds
   the smallest candidate that alone brings it under, else the largest that fits a target,
   until it is under or nothing fits (`over-threshold`).
3. Usage distribution (skipped without `balance`): the mean utilisation of the *members* — the
   readable dirs with a known capacity of usable brokers, not drained — is fixed by the moves;
   while a source dir is more than `balance_margin` above it, or a target more than the margin
   below, move from the most used source to the least used target on another broker the
   candidate whose size is closest to the size that would equalise the two, among sizes that
   strictly narrow their gap. A pair with no such candidate is not tried again; the loop ends
   when no pair can improve (`unbalanced` if the margin is still exceeded).

Racks (KIP-36): when the brokers span two or more racks (`broker.rack`; brokers without one count
as one rack, as Kafka's KRaft controller counts them), a replica moves only within its broker's
rack or to a rack none of its partition's other replicas is in, so no move ever puts two replicas
of a partition in one rack where they were not already; a drained replica that can go nowhere so
goes to the least used target anywhere rather than stay (the drain wins), same-rack targets first.

Guarantees: never two replicas of a partition on one broker; targets only online dirs of
usable brokers, never drained; no target pushed over the threshold; each candidate moves at
most once and a replica moved in is never moved again; every candidate of a drain is either
moved or listed `unplaced` with its reason; the same input in any order gives the same moves in
the same order. Cost: O(C log C + M · (T + k)) for C candidates, M moves, T targets scanned
until one fits (the least used first: usually a few) and k the bounded candidate search.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from jbod_pipeline import planner

#: How many candidates a capacity or balance step examines before giving a source up.
SEARCH_LIMIT: Final = 64


@dataclass(frozen=True, slots=True)
class BrokerDir:
    broker_id: int
    directory_id: str
    state: str  # online | full | offline
    used_bytes: int
    total_bytes: int | None


@dataclass(frozen=True, slots=True)
class Broker:
    broker_id: int
    usable: bool  # registered and unfenced
    rack: str | None = None  # its `broker.rack`


@dataclass(frozen=True, slots=True)
class Candidate:
    """A replica that may move to another broker, with its partition's replica list."""

    topic: str
    topic_id: str
    partition: int
    broker_id: int
    directory_id: str
    size_bytes: int | None
    replicas: tuple[int, ...]  # the partition's replica list, in order (includes `broker_id`)


@dataclass(frozen=True, slots=True)
class BrokerMove:
    topic: str
    topic_id: str
    partition: int
    from_broker: int
    from_dir: str
    to_broker: int
    to_dir: str
    size_bytes: int
    reason: str  # drain | capacity | balance


@dataclass(frozen=True, slots=True)
class Unplaced:
    """A replica a drain could not move, and why (`size-unknown`, `no-broker`, `no-room`)."""

    topic: str
    topic_id: str
    partition: int
    broker_id: int
    directory_id: str
    size_bytes: int | None
    reason: str
    detail: str


@dataclass(frozen=True, slots=True)
class DirIssue:
    broker_id: int
    directory_id: str
    kind: str  # over-threshold | unbalanced
    detail: str


@dataclass(slots=True)
class ClusterPlan:
    moves: list[BrokerMove] = field(default_factory=list)
    unplaced: list[Unplaced] = field(default_factory=list)
    issues: list[DirIssue] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Reassignment:
    """A partition's target replica list (`kafka-reassign-partitions.sh`'s `replicas`) and the dir
    of each (`log_dirs`; the dir after this plan's moves, intra-broker ones included)."""

    topic: str
    topic_id: str
    partition: int
    replicas: tuple[int, ...]
    directories: tuple[str, ...]
    original_replicas: tuple[int, ...]  # the replica list before the plan (a rollback's target)

    def added(self, broker_id: int) -> bool:
        """Whether `broker_id`'s replica is new (it moves in) rather than staying."""
        return broker_id not in self.original_replicas


DirKey = tuple[int, str]


def _dir_order(key: DirKey) -> tuple[int, tuple[int, ...]]:
    return key[0], planner.uuid_key(key[1])


def _is_member(d: BrokerDir, usable: set[int], goals: planner.Goals) -> bool:
    return (
        d.broker_id in usable
        and d.state in planner.READABLE
        and (d.total_bytes or 0) > 0
        and d.directory_id not in goals.drain
    )


def _usable(brokers: Iterable[Broker], goals: planner.Goals) -> set[int]:
    return {b.broker_id for b in brokers if b.usable and b.broker_id not in goals.drain_brokers}


def source_dirs(dirs: Sequence[BrokerDir], brokers: Sequence[Broker], goals: planner.Goals) -> set[DirKey]:
    """The dirs whose replicas the planner may move (besides those of drained brokers): drained
    dirs, members over the threshold and, when balancing, members more than the margin above the
    members' mean utilisation — or above the mean at all when some target sits more than the
    margin below it (an empty new broker pulls from every dir above the mean)."""
    usable = _usable(brokers, goals)
    members = [d for d in dirs if _is_member(d, usable, goals)]
    util = {(d.broker_id, d.directory_id): d.used_bytes / (d.total_bytes or 1) for d in members}
    out = {(d.broker_id, d.directory_id) for d in dirs if d.directory_id in goals.drain}
    out |= {k for k, u in util.items() if u > goals.threshold}
    if goals.balance and util:
        mean = sum(util.values()) / len(util)
        low = min(
            (util[(d.broker_id, d.directory_id)] for d in members if d.state == "online"),
            default=mean,
        )
        floor = mean if mean - low > goals.balance_margin else mean + goals.balance_margin
        out |= {k for k, u in util.items() if u > floor}
    return out


class _Sources:
    """A dir's candidates of known size, sorted by (size, topic, partition), searchable by size."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.refs: list[int] = []

    def __len__(self) -> int:
        return len(self.sizes)

    def take(self, index: int) -> int:
        self.sizes.pop(index)
        return self.refs.pop(index)


class _Cluster:
    def __init__(
        self,
        dirs: Sequence[BrokerDir],
        brokers: Sequence[Broker],
        candidates: Sequence[Candidate],
        goals: planner.Goals,
    ) -> None:
        self.goals = goals
        self.dirs = {
            (d.broker_id, d.directory_id): d
            for d in sorted(dirs, key=lambda d: _dir_order((d.broker_id, d.directory_id)))
        }
        self.order = {k: i for i, k in enumerate(self.dirs)}
        self.used = {k: d.used_bytes for k, d in self.dirs.items()}
        self.usable = _usable(brokers, goals)
        self.racks = {b.broker_id: b.rack for b in brokers}
        self.racked = len(set(self.racks.values())) > 1
        self.candidates = sorted(
            candidates,
            key=lambda c: (c.size_bytes is None, c.size_bytes or 0, c.topic, c.partition, c.broker_id),
        )
        # Every broker that hosts (or hosted, before this plan) a replica of the partition.
        self.hosts: dict[tuple[str, int], set[int]] = {}
        # The partition's replicas as this plan's moves leave them (racks are judged on these).
        self.current: dict[tuple[str, int], set[int]] = {}
        self.sources: dict[DirKey, _Sources] = {}
        for ref, c in enumerate(self.candidates):
            self.hosts.setdefault((c.topic, c.partition), set()).update(c.replicas)
            self.current.setdefault((c.topic, c.partition), set(c.replicas))
            if self.drained(c):
                continue  # moved by the drain or reported, never a capacity or balance source
            if c.size_bytes is not None and (c.broker_id, c.directory_id) in self.dirs:
                source = self.sources.setdefault((c.broker_id, c.directory_id), _Sources())
                source.sizes.append(c.size_bytes)
                source.refs.append(ref)
        # Targets sorted by (utilisation, dir order), kept sorted as moves change them.
        self.entry: dict[DirKey, tuple[float, int]] = {}
        self.by_util: list[tuple[float, int]] = []
        self.keys = list(self.dirs)
        for k, d in self.dirs.items():
            if (
                d.state == "online"
                and (d.total_bytes or 0) > 0
                and d.broker_id in self.usable
                and d.directory_id not in goals.drain
            ):
                self.entry[k] = (self.util(k), self.order[k])
        self.by_util = sorted(self.entry.values())
        # Balance sources (members with candidates) sorted by (-utilisation, dir order), likewise.
        self.source_entry: dict[DirKey, tuple[float, int]] = {
            k: (-self.util(k), self.order[k])
            for k, d in self.dirs.items()
            if _is_member(d, self.usable, goals) and self.sources.get(k)
        }
        self.by_use = sorted(self.source_entry.values())
        self.target_brokers = {k[0] for k in self.entry}
        self.plan = ClusterPlan()

    # -- helpers -------------------------------------------------------------------------------

    def drained(self, c: Candidate) -> bool:
        return c.broker_id in self.goals.drain_brokers or c.directory_id in self.goals.drain

    def cap(self, k: DirKey) -> int:
        return self.dirs[k].total_bytes or 0

    def util(self, k: DirKey) -> float:
        return self.used[k] / self.cap(k)

    def room(self, k: DirKey) -> float:
        return self.goals.threshold * self.cap(k) - self.used[k]

    def _resort(self, k: DirKey) -> None:
        old = self.entry.get(k)
        if old is not None:
            del self.by_util[bisect.bisect_left(self.by_util, old)]
            self.entry[k] = (self.util(k), self.order[k])
            bisect.insort(self.by_util, self.entry[k])
        old = self.source_entry.get(k)
        if old is not None:
            del self.by_use[bisect.bisect_left(self.by_use, old)]
            self.source_entry[k] = (-self.util(k), self.order[k])
            bisect.insort(self.by_use, self.source_entry[k])

    def rack_tiers(self, c: Candidate) -> list[set[int]]:
        """The brokers `c` may move to keeping its partition's racks apart, best first: those of
        its broker's rack, then those of a rack none of the partition's other replicas is in (no
        restriction without racks)."""
        if not self.racked:
            return []
        own = self.racks.get(c.broker_id)
        used = {self.racks.get(b) for b in self.current[(c.topic, c.partition)] if b != c.broker_id}
        return [
            {b for b, rack in self.racks.items() if rack == own},
            {b for b, rack in self.racks.items() if rack not in used},
        ]

    def rack_allowed(self, c: Candidate) -> set[int] | None:
        """The brokers a capacity or balance move of `c` may go to (None: any)."""
        tiers = self.rack_tiers(c)
        return set().union(*tiers) if tiers else None

    def best_target(self, size: int, excluded: set[int], allowed: set[int] | None = None) -> DirKey | None:
        """The least used target on a broker not in `excluded` (and in `allowed`) where `size` fits."""
        for _, index in self.by_util:
            k = self.keys[index]
            if k[0] not in excluded and (allowed is None or k[0] in allowed) and self.room(k) >= size:
                return k
        return None

    def move(self, ref: int, target: DirKey, reason: str, *, source_index: int | None = None) -> None:
        """Move candidate `ref` to `target`; `source_index`: its index among its dir's sources."""
        c = self.candidates[ref]
        size = c.size_bytes or 0
        if source_index is not None:
            self.sources[(c.broker_id, c.directory_id)].take(source_index)
        here = (c.broker_id, c.directory_id)
        if here in self.used:
            self.used[here] -= size
            self._resort(here)
        self.used[target] += size
        self._resort(target)
        self.hosts[(c.topic, c.partition)].add(target[0])
        current = self.current[(c.topic, c.partition)]
        current.discard(c.broker_id)
        current.add(target[0])
        self.plan.moves.append(
            BrokerMove(
                c.topic,
                c.topic_id,
                c.partition,
                c.broker_id,
                c.directory_id,
                target[0],
                target[1],
                size,
                reason,
            )
        )

    def unplaced(self, c: Candidate, reason: str, detail: str) -> None:
        self.plan.unplaced.append(
            Unplaced(
                c.topic, c.topic_id, c.partition, c.broker_id, c.directory_id, c.size_bytes, reason, detail
            )
        )

    # -- goals ---------------------------------------------------------------------------------

    def drain(self) -> None:
        drained = [ref for ref, c in enumerate(self.candidates) if self.drained(c)]
        # Largest first (the big ones are the hardest to place); unknown sizes are reported first.
        for ref in reversed(drained):
            c = self.candidates[ref]
            if c.size_bytes is None:
                self.unplaced(c, "size-unknown", "no telemetry size for it or any replica of the partition")
                continue
            excluded = self.hosts[(c.topic, c.partition)]
            target = next(
                (
                    t
                    for allowed in (*self.rack_tiers(c), None)
                    if (t := self.best_target(c.size_bytes, excluded, allowed)) is not None
                ),
                None,
            )
            if target is None:
                others = sorted(self.target_brokers - excluded)
                if not others:
                    self.unplaced(
                        c,
                        "no-broker",
                        f"replication factor {len(c.replicas)}: every usable broker with an online "
                        f"dir ({sorted(self.target_brokers)}) hosts or hosted the partition",
                    )
                else:
                    self.unplaced(
                        c,
                        "no-room",
                        f"{c.size_bytes} bytes fit in no dir of brokers {others} under the threshold",
                    )
                continue
            self.move(ref, target, "drain")

    def _fits(self, source: DirKey, index: int) -> DirKey | None:
        ref = self.sources[source].refs[index]
        size = self.sources[source].sizes[index]
        if size <= 0:
            return None
        c = self.candidates[ref]
        return self.best_target(size, self.hosts[(c.topic, c.partition)], self.rack_allowed(c))

    def capacity(self) -> None:
        over = [
            k
            for k, d in self.dirs.items()
            if _is_member(d, self.usable, self.goals) and self.util(k) > self.goals.threshold
        ]
        for k in sorted(over, key=lambda k: (-self.util(k), self.order[k])):
            source = self.sources.get(k)
            while source is not None and self.util(k) > self.goals.threshold:
                need = self.used[k] - self.goals.threshold * self.cap(k)
                start = bisect.bisect_left(source.sizes, need)
                # The smallest that alone brings the dir under, else the largest that fits.
                tries = [*range(start, min(len(source), start + SEARCH_LIMIT))]
                tries += [*range(start - 1, max(-1, start - 1 - SEARCH_LIMIT), -1)]
                for index in tries:
                    target = self._fits(k, index)
                    if target is not None:
                        self.move(source.refs[index], target, "capacity", source_index=index)
                        break
                else:
                    break

    def _closest(self, source: DirKey, ideal: float, limit: float, sink_broker: int) -> int | None:
        """Index of the candidate of `source` closest in size to `ideal` (0 < size <= limit) whose
        partition the sink's broker does not host (ties: the smaller)."""
        candidates = self.sources[source]
        end = bisect.bisect_right(candidates.sizes, limit)
        hi = bisect.bisect_left(candidates.sizes, ideal, 0, end)
        lo = hi - 1
        for _ in range(SEARCH_LIMIT):
            if lo < 0 and hi >= end:
                return None
            take_lo = hi >= end or (lo >= 0 and ideal - candidates.sizes[lo] <= candidates.sizes[hi] - ideal)
            index = lo if take_lo else hi
            if take_lo:
                lo -= 1
            else:
                hi += 1
            if candidates.sizes[index] <= 0:
                continue
            c = self.candidates[candidates.refs[index]]
            allowed = self.rack_allowed(c)
            if sink_broker not in self.hosts[(c.topic, c.partition)] and (
                allowed is None or sink_broker in allowed
            ):
                return index
        return None

    def _balance_step(self, mean: float, exhausted: set[tuple[DirKey, DirKey]]) -> bool:
        """One move from the most used source to the least used sink it narrows; False if none."""
        for negative_util, source_index in self.by_use:  # left as soon as one moves
            source = self.keys[source_index]
            if -negative_util <= mean:
                return False
            if not self.sources[source]:
                continue
            for sink_util, sink_index in self.by_util:  # likewise
                sink = self.keys[sink_index]
                if sink_util >= self.util(source) or sink_util >= mean:
                    break
                if sink[0] == source[0] or (source, sink) in exhausted:
                    continue
                # The size that would equalise the two dirs; strictly below twice it narrows the gap.
                ideal = (self.util(source) - sink_util) / (1 / self.cap(source) + 1 / self.cap(sink))
                index = self._closest(source, ideal, min(2 * ideal - 1, self.room(sink)), sink[0])
                if index is None:
                    exhausted.add((source, sink))
                    continue
                self.move(self.sources[source].refs[index], sink, "balance", source_index=index)
                return True
        return False

    def balance(self) -> None:
        margin = self.goals.balance_margin
        members = [k for k, d in self.dirs.items() if _is_member(d, self.usable, self.goals)]
        if len(members) < 2 or not self.by_util:
            return
        mean = sum(self.util(k) for k in members) / len(members)  # moves between members keep it
        exhausted: set[tuple[DirKey, DirKey]] = set()
        while True:
            highest = next((-u for u, i in self.by_use if self.sources[self.keys[i]]), mean)
            if highest - mean <= margin and mean - self.by_util[0][0] <= margin:
                break
            if not self._balance_step(mean, exhausted):
                break
        worst = max(members, key=lambda k: (abs(self.util(k) - mean), -self.order[k]))
        if abs(self.util(worst) - mean) > margin:
            self.plan.issues.append(
                DirIssue(
                    worst[0],
                    worst[1],
                    "unbalanced",
                    f"utilisation {self.util(worst):.1%} is {abs(self.util(worst) - mean):.1%} from the "
                    f"cluster mean {mean:.1%}, above the {margin:.0%} margin: no move across brokers narrows it",
                )
            )

    def report_over_threshold(self) -> None:
        for k, d in self.dirs.items():
            if d.state in planner.READABLE and self.cap(k) > 0 and self.util(k) > self.goals.threshold:
                self.plan.issues.append(
                    DirIssue(
                        k[0],
                        k[1],
                        "over-threshold",
                        f"still {self.util(k):.1%} used: no replica fits a dir of another broker under "
                        f"{self.goals.threshold:.0%}",
                    )
                )


def plan_cluster(
    dirs: Sequence[BrokerDir],
    brokers: Sequence[Broker],
    candidates: Sequence[Candidate],
    goals: planner.Goals,
) -> ClusterPlan:
    """The cross-broker moves (see the module doc for the goals and guarantees). `dirs` carry
    their bytes after the intra-broker moves; `candidates` are the replicas that may move (an
    intra-broker move's replica is not one)."""
    cluster = _Cluster(dirs, brokers, candidates, goals)
    cluster.drain()
    cluster.capacity()
    if goals.balance:
        cluster.balance()
    cluster.report_over_threshold()
    return cluster.plan


def reassignments(
    candidates: Sequence[Candidate],
    directories: Mapping[tuple[str, int], Sequence[str]],
    moves: Sequence[BrokerMove],
) -> list[Reassignment]:
    """Per partition touched by `moves`, its target replica list — each moved replica's broker
    replaced in its position by the target (so the leader stays first when it stays, and its
    successor takes that position when it moves) — and the dir of each replica: the move's
    target for a new replica, `directories[(topic, partition)]` (the partition's dirs in replica
    order, after intra-broker moves) for the others. Sorted by topic and partition."""
    lists: dict[tuple[str, int], tuple[str, list[int], list[str]]] = {}
    replica_lists = {(c.topic, c.partition): c.replicas for c in candidates}
    for m in moves:
        key = (m.topic, m.partition)
        if key not in lists:
            original = replica_lists[key]
            lists[key] = (m.topic_id, list(original), list(directories[key]))
        _, replicas, dirs = lists[key]
        position = replicas.index(m.from_broker)
        replicas[position] = m.to_broker
        dirs[position] = m.to_dir
    return [
        Reassignment(
            topic, topic_id, partition, tuple(replicas), tuple(dirs), replica_lists[(topic, partition)]
        )
        for (topic, partition), (topic_id, replicas, dirs) in sorted(lists.items())
    ]


def kafka_reassignment_file(
    reassignments: Sequence[Reassignment], paths: Mapping[tuple[int, str], str]
) -> dict[str, object]:
    """Kafka's `--reassignment-json-file` document (`kafka-reassign-partitions.sh --execute`): per
    partition its target `replicas` and `log_dirs` — the path of the target dir (`paths`: by broker
    and dir id, from telemetry) for a replica new on its broker, `any` for a replica that stays
    (its intra-broker move, if any, is in plan.json's `moves`, so no replica is moved twice)."""
    return {
        "version": 1,
        "partitions": [
            {
                "topic": r.topic,
                "partition": r.partition,
                "replicas": list(r.replicas),
                "log_dirs": [
                    paths.get((b, d), "any") if r.added(b) else "any"
                    for b, d in zip(r.replicas, r.directories, strict=True)
                ],
            }
            for r in reassignments
        ],
    }
