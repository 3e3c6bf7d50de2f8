"""The intra-broker move planner: one broker's dirs and replicas in, moves out (pure, deterministic).

`plan.py` runs `plan_broker` once per broker inside Spark (`cogroup().applyInArrow`), so the
plan scales with the number of brokers while each call stays small (a broker's replicas).

Definitions: `used(d)` is the dir's bytes (telemetry), `cap(d)` its total bytes, `util = used / cap`.
A *target* is a dir whose state is `online` (never `offline` or `full`), whose capacity is known,
and that is not being drained. A replica can move if its dir is readable (`online` or `full`)
and its size is known. Every move keeps its target at or under the threshold:
`used(target) + size <= threshold * cap(target)`.

The goals, in order (each later goal never undoes an earlier one):
1. Drain: every replica of each `--drain` dir moves to the target with the lowest utilisation
   after the move; a replica that fits nowhere is reported `unplaced`.
2. Capacity (Cruise Control's IntraBrokerDiskCapacityGoal): each dir over the threshold, worst
   first, sheds replicas — the smallest one that alone brings it under, else the largest that
   fits a target — until it is under, or nothing fits (reported `over-threshold`).
3. Usage distribution (IntraBrokerDiskUsageDistributionGoal): while the most used dir is more
   than `balance_margin` above the mean utilisation of the broker's dirs, or the least used
   target more than `balance_margin` below it, move from the most used dir to the least used
   target the replica whose size is closest to the size that would equalise the two, among
   those that strictly narrow the gap. A pair with no such replica is skipped; the loop ends when
   no pair can improve (reported `unbalanced` if the margin is still exceeded).

Guarantees: moves stay on the broker, never target an offline, full or drained dir or push a
target over the threshold, move each replica at most once (a replica moved in is never moved
again), and never move a replica out of an offline dir. The same input gives the same moves in
the same order (ties broken by size, topic, partition and the contract's Uuid order). Cost:
O(R log R + M · D) for R replicas, M moves and D dirs.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from jbod_core.ids import Uuid

DEFAULT_THRESHOLD: Final = 0.8
DEFAULT_BALANCE_MARGIN: Final = 0.05
READABLE: Final = frozenset({"online", "full"})


@dataclass(frozen=True, slots=True)
class Dir:
    directory_id: str
    state: str  # online | full | offline
    used_bytes: int
    total_bytes: int | None


@dataclass(frozen=True, slots=True)
class Replica:
    topic: str
    partition: int
    directory_id: str
    size_bytes: int | None


@dataclass(frozen=True, slots=True)
class Goals:
    threshold: float = DEFAULT_THRESHOLD
    balance_margin: float = DEFAULT_BALANCE_MARGIN
    drain: frozenset[str] = frozenset()
    balance: bool = True
    #: Cross-broker planning (`cluster_planner`) after the per-broker pass; `jbod-pipeline plan --across-brokers`.
    across_brokers: bool = False
    #: Brokers to empty onto the others (`--drain-broker`); planned only across brokers.
    drain_brokers: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class Move:
    topic: str
    partition: int
    from_dir: str
    to_dir: str
    size_bytes: int
    reason: str  # drain | capacity | balance


@dataclass(frozen=True, slots=True)
class Issue:
    directory_id: str
    kind: str  # unplaced | over-threshold | unbalanced | offline-drain
    detail: str


@dataclass(slots=True)
class BrokerPlan:
    moves: list[Move] = field(default_factory=list)
    issues: list[Issue] = field(default_factory=list)


def uuid_key(text: str) -> tuple[int, ...]:
    """The contract's order of dir ids (their 16 bytes); a malformed id sorts last."""
    try:
        return tuple(Uuid.parse(text))
    except ValueError:
        return (2**63, hash(text))


class _Candidates:
    """A dir's movable replicas, sorted by (size, topic, partition), searchable by size.

    `refs[i]` names the replica of `sizes[i]` (see `Placements.name`)."""

    def __init__(self, sizes: list[int], refs: list[int]) -> None:
        self.sizes = sizes
        self.refs = refs

    def __len__(self) -> int:
        return len(self.sizes)

    def take(self, index: int) -> tuple[int, int]:
        """Remove the replica at `index`: (size, ref)."""
        return self.sizes.pop(index), self.refs.pop(index)

    def smallest_at_least(self, size: float, *, limit: float) -> int | None:
        """Index of the smallest replica with `size <= s <= limit`."""
        i = bisect.bisect_left(self.sizes, size)
        return i if i < len(self.sizes) and self.sizes[i] <= limit else None

    def largest_at_most(self, limit: float) -> int | None:
        i = bisect.bisect_right(self.sizes, limit) - 1
        return i if i >= 0 and self.sizes[i] > 0 else None

    def closest(self, ideal: float, *, limit: float) -> int | None:
        """Index of the replica whose size is closest to `ideal` among 0 < s <= limit (ties: smaller)."""
        end = bisect.bisect_right(self.sizes, limit)
        if end == 0:
            return None
        j = bisect.bisect_left(self.sizes, ideal, 0, end)
        options = [k for k in (j - 1, j) if 0 <= k < end and self.sizes[k] > 0]
        if not options:
            return None
        return min(options, key=lambda k: (abs(self.sizes[k] - ideal), self.sizes[k]))


@dataclass(frozen=True, slots=True)
class Placements:
    """A broker's replicas by dir, in the planner's order, without one object per replica.

    * `sized[d]`: (sizes, refs) of the replicas of known size in dir `d`, sorted by
      (size, topic, partition) — the caller sorts (`plan.py` sorts a whole bucket in Arrow);
    * `unknown[d]`: refs of the replicas of `d` whose size is unknown;
    * `name(ref)`: (topic, partition) of a ref.
    """

    sized: Mapping[str, tuple[list[int], list[int]]]
    unknown: Mapping[str, list[int]]
    name: Callable[[int], tuple[str, int]]

    @classmethod
    def of(cls, replicas: Sequence[Replica]) -> Placements:
        """From replica objects (any order)."""
        keyed = sorted(
            (r.directory_id, r.size_bytes is None, r.size_bytes or 0, r.topic, r.partition) for r in replicas
        )
        names = [(topic, partition) for _, _, _, topic, partition in keyed]
        sized: dict[str, tuple[list[int], list[int]]] = {}
        unknown: dict[str, list[int]] = {}
        for ref, (directory, no_size, size, _, _) in enumerate(keyed):
            if no_size:
                unknown.setdefault(directory, []).append(ref)
            else:
                sizes, refs = sized.setdefault(directory, ([], []))
                sizes.append(size)
                refs.append(ref)
        return cls(sized=sized, unknown=unknown, name=names.__getitem__)


class _Broker:
    def __init__(self, dirs: Sequence[Dir], placements: Placements, goals: Goals) -> None:
        self.goals = goals
        self.dirs = {d.directory_id: d for d in sorted(dirs, key=lambda d: uuid_key(d.directory_id))}
        self.used = {d.directory_id: d.used_bytes for d in dirs}
        self.order = {d: i for i, d in enumerate(self.dirs)}
        self.name = placements.name
        self.unknown_size = placements.unknown
        self.movable = {
            d: _Candidates(*(list(c) for c in placements.sized.get(d, ([], []))))
            for d, info in self.dirs.items()
            if info.state in READABLE
        }
        self.plan = BrokerPlan()

    # -- helpers -------------------------------------------------------------------------------

    def cap(self, d: str) -> int:
        return self.dirs[d].total_bytes or 0

    def util(self, d: str) -> float:
        return self.used[d] / self.cap(d)

    def targets(self) -> list[str]:
        return [
            d
            for d, info in self.dirs.items()
            if info.state == "online" and self.cap(d) > 0 and d not in self.goals.drain
        ]

    def room(self, d: str) -> float:
        return self.goals.threshold * self.cap(d) - self.used[d]

    def best_target(self, size: int, *, exclude: str, among: Sequence[str] | None = None) -> str | None:
        """The target where `size` fits under the threshold with the lowest utilisation after."""
        fits = [
            t
            for t in (among if among is not None else self.targets())
            if t != exclude and self.room(t) >= size
        ]
        if not fits:
            return None
        return min(fits, key=lambda t: ((self.used[t] + size) / self.cap(t), self.order[t]))

    def move(self, source: str, index: int, target: str, reason: str) -> None:
        size, ref = self.movable[source].take(index)
        topic, partition = self.name(ref)
        self.used[source] -= size
        self.used[target] += size
        self.plan.moves.append(Move(topic, partition, source, target, size, reason))

    # -- goals ---------------------------------------------------------------------------------

    def drain(self) -> None:
        for d in [d for d in self.dirs if d in self.goals.drain]:
            if self.dirs[d].state not in READABLE:
                self.plan.issues.append(
                    Issue(d, "offline-drain", "the dir is offline: its replicas cannot be copied")
                )
                continue
            for ref in self.unknown_size.get(d, []):
                topic, partition = self.name(ref)
                self.plan.issues.append(
                    Issue(d, "unplaced", f"{topic}-{partition}: size unknown (no telemetry for it)")
                )
            candidates = self.movable[d]
            # Largest first: the big ones are the hardest to place.
            for index in range(len(candidates) - 1, -1, -1):
                size = candidates.sizes[index]
                target = self.best_target(size, exclude=d)
                if target is None:
                    topic, partition = self.name(candidates.refs[index])
                    self.plan.issues.append(
                        Issue(
                            d,
                            "unplaced",
                            f"{topic}-{partition} ({size} bytes) fits in no dir under the threshold",
                        )
                    )
                    continue
                self.move(d, index, target, "drain")

    def capacity(self) -> None:
        over = [
            d
            for d in self.movable
            if d not in self.goals.drain and self.cap(d) > 0 and self.util(d) > self.goals.threshold
        ]
        for d in sorted(over, key=lambda d: (-self.util(d), self.order[d])):
            candidates = self.movable[d]
            while self.util(d) > self.goals.threshold:
                need = self.used[d] - self.goals.threshold * self.cap(d)
                max_room = max((self.room(t) for t in self.targets() if t != d), default=0.0)
                index = candidates.smallest_at_least(need, limit=max_room)
                if index is None:
                    index = candidates.largest_at_most(max_room)
                if index is None:
                    break
                target = self.best_target(candidates.sizes[index], exclude=d)
                assert target is not None  # the size fits max_room
                self.move(d, index, target, "capacity")
            if self.util(d) > self.goals.threshold:
                self.plan.issues.append(
                    Issue(
                        d,
                        "over-threshold",
                        f"still {self.util(d):.1%} used: no replica fits another dir under "
                        f"{self.goals.threshold:.0%}",
                    )
                )

    def balance(self) -> None:
        margin = self.goals.balance_margin
        members = [d for d in self.movable if self.cap(d) > 0 and d not in self.goals.drain]
        if len(members) < 2:
            return
        targets = [t for t in self.targets() if t in members]
        exhausted: set[tuple[str, str]] = set()
        while True:
            util = {d: self.used[d] / self.cap(d) for d in members}  # fixed until the next move
            mean = sum(util.values()) / len(members)
            sources = sorted(members, key=lambda d: (-util[d], self.order[d]))
            sinks = sorted(targets, key=lambda d: (util[d], self.order[d]))
            if not sinks:
                return
            if util[sources[0]] - mean <= margin and mean - util[sinks[0]] <= margin:
                return
            moved = False
            for source in sources:
                for sink in sinks:
                    if sink == source or util[sink] >= util[source] or (source, sink) in exhausted:
                        continue
                    # The size that would equalise the two dirs; strictly below twice it narrows the gap.
                    ideal = (util[source] - util[sink]) / (1 / self.cap(source) + 1 / self.cap(sink))
                    limit = min(2 * ideal - 1, self.room(sink))
                    index = self.movable[source].closest(ideal, limit=limit)
                    if index is None:
                        exhausted.add((source, sink))
                        continue
                    self.move(source, index, sink, "balance")
                    moved = True
                    break
                if moved:
                    break
            if not moved:
                worst = max(abs(util[d] - mean) for d in members)
                if worst > margin:
                    self.plan.issues.append(
                        Issue(
                            sources[0],
                            "unbalanced",
                            f"utilisation spread {worst:.1%} from the mean remains above the "
                            f"{margin:.0%} margin: no move narrows it",
                        )
                    )
                return


def plan_broker(dirs: Sequence[Dir], replicas: Sequence[Replica] | Placements, goals: Goals) -> BrokerPlan:
    """The moves for one broker (see the module doc for the goals and guarantees); `replicas`
    as objects, or as `Placements` already sorted by the caller."""
    placements = replicas if isinstance(replicas, Placements) else Placements.of(replicas)
    broker = _Broker(dirs, placements, goals)
    broker.drain()
    broker.capacity()
    if goals.balance:
        broker.balance()
    return broker.plan
