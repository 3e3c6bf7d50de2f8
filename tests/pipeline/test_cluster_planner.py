"""The cross-broker planner alone (pure Python, no Spark): its guarantees on random clusters, each
goal on a small cluster, and the reassignment lists it implies."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from jbod_core.ids import random_uuid
from jbod_pipeline import cluster_planner as cp
from jbod_pipeline import planner

GIB = 1 << 30


def _cluster(
    rng: random.Random, *, brokers: int, dirs: int, partitions: int, rf: int
) -> tuple[list[cp.BrokerDir], list[cp.Broker], list[cp.Candidate]]:
    """Random brokers (some fenced), dirs (some offline or full, skewed usage) and partitions;
    every replica is returned as a candidate (the planner must cope with more than it needs)."""
    dir_ids = {b: [str(random_uuid(rng)) for _ in range(dirs)] for b in range(brokers)}
    used: Counter[tuple[int, str]] = Counter()
    candidates = []
    for p in range(partitions):
        replicas = tuple(rng.sample(range(brokers), rf))
        size = rng.randint(1, 12 * GIB)
        for b in replicas:
            d = dir_ids[b][min(dirs - 1, int(rng.random() ** 2 * dirs))]
            known = rng.random() > 0.02
            candidates.append(
                cp.Candidate(f"t{p % 3}", f"id{p % 3}", p, b, d, size if known else None, replicas)
            )
            used[(b, d)] += size
    states = ["online"] * 6 + ["full", "offline"]
    cluster_dirs = [
        cp.BrokerDir(b, d, rng.choice(states), used[(b, d)], rng.choice([200, 300, 400]) * GIB)
        for b, ids in dir_ids.items()
        for d in ids
    ]
    cluster_brokers = [cp.Broker(b, rng.random() > 0.15) for b in range(brokers)]
    return cluster_dirs, cluster_brokers, candidates


def _check(
    dirs: list[cp.BrokerDir],
    brokers: list[cp.Broker],
    candidates: list[cp.Candidate],
    goals: planner.Goals,
    plan: cp.ClusterPlan,
) -> None:
    by_key = {(d.broker_id, d.directory_id): d for d in dirs}
    usable = {b.broker_id for b in brokers if b.usable} - goals.drain_brokers
    original = {(c.topic, c.partition): c.replicas for c in candidates}
    where = {(c.topic, c.partition, c.broker_id): c for c in candidates}
    used = {k: d.used_bytes for k, d in by_key.items()}
    moved = Counter((m.topic, m.partition, m.from_broker) for m in plan.moves)
    assert max(moved.values(), default=1) == 1, "a replica moves at most once"
    for m in plan.moves:
        c = where[(m.topic, m.partition, m.from_broker)]
        assert (c.directory_id, c.size_bytes) == (m.from_dir, m.size_bytes)
        target = by_key[(m.to_broker, m.to_dir)]
        assert target.state == "online", "targets are online dirs"
        assert m.to_broker in usable, "targets are on registered, unfenced, undrained brokers"
        assert m.to_dir not in goals.drain, "a drained dir is never a target"
        assert m.to_broker not in original[(m.topic, m.partition)], "never onto a broker that hosts it"
        if (m.from_broker, m.from_dir) in used:
            used[(m.from_broker, m.from_dir)] -= m.size_bytes
        used[(m.to_broker, m.to_dir)] += m.size_bytes
        assert used[(m.to_broker, m.to_dir)] <= goals.threshold * (target.total_bytes or 0) + 1e-6, (
            "no move pushes its target over the threshold"
        )
    # Every replica of a drain is moved or reported, exactly once.
    drained = {
        (c.topic, c.partition, c.broker_id)
        for c in candidates
        if c.broker_id in goals.drain_brokers or c.directory_id in goals.drain
    }
    unplaced = Counter((u.topic, u.partition, u.broker_id) for u in plan.unplaced)
    assert max(unplaced.values(), default=1) == 1
    assert set(unplaced) | {k for k in moved if k in drained} == drained
    assert not set(unplaced) & set(moved)
    assert {u.reason for u in plan.unplaced} <= {"size-unknown", "no-broker", "no-room"}
    # The target replica lists: same length, one replica per broker, positions kept.
    dirs_of = {(c.topic, c.partition): [""] * len(c.replicas) for c in candidates}
    for c in candidates:
        dirs_of[(c.topic, c.partition)][c.replicas.index(c.broker_id)] = c.directory_id
    lists = cp.reassignments(candidates, dirs_of, plan.moves)
    assert {(r.topic, r.partition) for r in lists} == {(m.topic, m.partition) for m in plan.moves}
    for r in lists:
        before = original[(r.topic, r.partition)]
        assert len(r.replicas) == len(before) == len(set(r.replicas)), "never two replicas on one broker"
        for position, (old, new) in enumerate(zip(before, r.replicas, strict=True)):
            if old == new:
                assert (r.topic, r.partition, old) not in moved, "a staying replica keeps its position"
            else:
                m = next(
                    m
                    for m in plan.moves
                    if (m.topic, m.partition, m.from_broker) == (r.topic, r.partition, old)
                )
                assert (m.to_broker, m.to_dir) == (new, r.directories[position])


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    threshold=st.sampled_from([0.5, 0.7, 0.8, 0.9]),
    brokers=st.integers(2, 7),
    dirs=st.integers(1, 4),
    balance=st.booleans(),
)
def test_guarantees_hold_on_random_clusters(
    seed: int, threshold: float, brokers: int, dirs: int, balance: bool
) -> None:
    rng = random.Random(seed)
    rf = rng.randint(1, min(3, brokers))
    d, b, candidates = _cluster(rng, brokers=brokers, dirs=dirs, partitions=rng.randint(0, 120), rf=rf)
    drain_brokers = frozenset(rng.sample(range(brokers), 1)) if rng.random() < 0.4 else frozenset()
    drain = frozenset({d[0].directory_id}) if rng.random() < 0.3 else frozenset()
    goals = planner.Goals(
        threshold=threshold, drain=drain, drain_brokers=drain_brokers, balance=balance, across_brokers=True
    )
    plan = cp.plan_cluster(d, b, candidates, goals)
    _check(d, b, candidates, goals, plan)
    shuffled = list(candidates)
    rng.shuffle(shuffled)
    assert cp.plan_cluster(list(reversed(d)), list(reversed(b)), shuffled, goals) == plan, (
        "input order does not matter"
    )


A, B, C, D, E, F = (
    "ECfE0cOGu8QeL-uJQUw0PA",
    "YS52lqbOzBs1v5ktyenGFg",
    "kbdYSiJlsfXNYT4w2PFq3w",
    "3VXqA2c_RcyMqNQYxJ8X4A",
    "Pq0tS4oGQ4iBc6yTzXl2Jg",
    "w0cYqH8kR1Ct6A8fH3p0SQ",
)


def _c(
    partition: int, broker: int, directory: str, size: int | None, replicas: tuple[int, ...]
) -> cp.Candidate:
    return cp.Candidate("t", "tid", partition, broker, directory, size, replicas)


def test_a_drained_broker_moves_everything_to_the_others_and_keeps_the_leader_position() -> None:
    dirs = [
        cp.BrokerDir(1, A, "online", 30, 100),
        cp.BrokerDir(2, B, "online", 20, 100),
        cp.BrokerDir(3, C, "online", 0, 100),
        cp.BrokerDir(4, D, "online", 0, 100),
    ]
    brokers = [cp.Broker(i, True) for i in (1, 2, 3, 4)]
    candidates = [_c(0, 1, A, 20, (1, 2)), _c(1, 1, A, 10, (2, 1))]
    goals = planner.Goals(drain_brokers=frozenset({1}), balance=False, across_brokers=True)
    plan = cp.plan_cluster(dirs, brokers, candidates, goals)
    assert [(m.partition, m.to_broker, m.reason) for m in plan.moves] == [(0, 3, "drain"), (1, 4, "drain")]
    assert not plan.unplaced
    lists = cp.reassignments(candidates, {("t", 0): [A, B], ("t", 1): [B, A]}, plan.moves)
    assert [(r.partition, r.replicas, r.directories) for r in lists] == [
        (0, (3, 2), (C, B)),
        (1, (2, 4), (B, D)),
    ]
    paths = {(3, C): "/data/c", (4, D): "/data/d", (2, B): "/data/b"}
    assert cp.kafka_reassignment_file(lists, paths) == {
        "version": 1,
        "partitions": [
            {"topic": "t", "partition": 0, "replicas": [3, 2], "log_dirs": ["/data/c", "any"]},
            {"topic": "t", "partition": 1, "replicas": [2, 4], "log_dirs": ["any", "/data/d"]},
        ],
    }


def test_a_drain_that_cannot_finish_says_why() -> None:
    dirs = [
        cp.BrokerDir(1, A, "online", 30, 100),
        cp.BrokerDir(2, B, "online", 20, 100),
        cp.BrokerDir(3, C, "online", 75, 100),
        cp.BrokerDir(4, D, "online", 0, 100),
    ]
    brokers = [cp.Broker(1, True), cp.Broker(2, True), cp.Broker(3, True), cp.Broker(4, False)]  # 4 is fenced
    candidates = [
        _c(0, 1, A, 20, (1, 2, 3)),  # every other usable broker hosts it: RF 3 on 3 usable brokers
        _c(1, 1, A, 10, (1, 2)),  # only broker 3 may take it, and it has 5 bytes of room
        _c(2, 1, A, None, (1, 3)),
    ]
    goals = planner.Goals(drain_brokers=frozenset({1}), across_brokers=True)
    plan = cp.plan_cluster(dirs, brokers, candidates, goals)
    assert plan.moves == []
    assert [(u.partition, u.reason) for u in plan.unplaced] == [
        (2, "size-unknown"),
        (0, "no-broker"),
        (1, "no-room"),
    ]


def test_a_drained_dir_spills_onto_other_brokers_only_what_its_broker_cannot_take() -> None:
    # The per-broker pass already moved what fit on broker 1; what is left in A goes elsewhere,
    # never to the other drained dir E, and never to the offline or full dirs.
    dirs = [
        cp.BrokerDir(1, A, "online", 50, 100),
        cp.BrokerDir(1, B, "online", 79, 100),
        cp.BrokerDir(2, C, "offline", 0, 100),
        cp.BrokerDir(2, D, "full", 10, 100),
        cp.BrokerDir(3, E, "online", 0, 100),
        cp.BrokerDir(3, F, "online", 40, 100),
    ]
    brokers = [cp.Broker(i, True) for i in (1, 2, 3)]
    candidates = [_c(0, 1, A, 30, (1,)), _c(1, 1, A, 20, (1,))]
    goals = planner.Goals(drain=frozenset({A, E}), balance=False, across_brokers=True)
    plan = cp.plan_cluster(dirs, brokers, candidates, goals)
    assert [(m.partition, m.to_broker, m.to_dir) for m in plan.moves] == [(0, 3, F)]
    assert [(u.partition, u.reason) for u in plan.unplaced] == [(1, "no-room")]


def test_capacity_sheds_an_overfull_dir_onto_another_broker() -> None:
    dirs = [cp.BrokerDir(1, A, "full", 95, 100), cp.BrokerDir(2, B, "online", 10, 100)]
    brokers = [cp.Broker(1, True), cp.Broker(2, True)]
    candidates = [_c(p, 1, A, s, (1,)) for p, s in enumerate([5, 10, 20, 60])]
    plan = cp.plan_cluster(dirs, brokers, candidates, planner.Goals(balance=False, across_brokers=True))
    assert [(m.partition, m.size_bytes, m.reason) for m in plan.moves] == [(2, 20, "capacity")]
    assert not plan.issues


def test_balance_fills_a_new_empty_broker() -> None:
    rng = random.Random(3)
    dirs, brokers, candidates = _cluster(rng, brokers=4, dirs=3, partitions=300, rf=2)
    dirs = [cp.BrokerDir(d.broker_id, d.directory_id, "online", d.used_bytes, 400 * GIB) for d in dirs]
    brokers = [cp.Broker(b.broker_id, True) for b in brokers]
    new = [cp.BrokerDir(9, str(random_uuid(rng)), "online", 0, 400 * GIB) for _ in range(3)]
    goals = planner.Goals(threshold=0.9, balance_margin=0.05, across_brokers=True)
    chosen = cp.source_dirs([*dirs, *new], [*brokers, cp.Broker(9, True)], goals)
    sources = [c for c in candidates if (c.broker_id, c.directory_id) in chosen]
    plan = cp.plan_cluster([*dirs, *new], [*brokers, cp.Broker(9, True)], sources, goals)
    _check([*dirs, *new], [*brokers, cp.Broker(9, True)], sources, goals, plan)
    arrived = sum(m.size_bytes for m in plan.moves if m.to_broker == 9)
    mean = sum(d.used_bytes for d in dirs) / (len(dirs) + len(new)) / (400 * GIB)
    assert {m.reason for m in plan.moves} <= {"balance", "capacity"}
    assert arrived / (3 * 400 * GIB) >= mean - 0.05 - 3 * GIB / (400 * GIB), (
        "the new broker's dirs reach the mean"
    )


def test_source_dirs_are_the_drained_the_overfull_and_the_most_used() -> None:
    dirs = [
        cp.BrokerDir(1, A, "online", 90, 100),  # over the threshold
        cp.BrokerDir(1, B, "online", 70, 100),  # above the mean (68%), C more than the margin below it
        cp.BrokerDir(2, C, "online", 45, 100),
        cp.BrokerDir(2, D, "offline", 10, 100),  # drained (offline: still a source)
        cp.BrokerDir(3, E, "online", 40, 100),  # fenced broker: not a member
    ]
    brokers = [cp.Broker(1, True), cp.Broker(2, True), cp.Broker(3, False)]
    goals = planner.Goals(drain=frozenset({D}), balance_margin=0.1, across_brokers=True)
    assert cp.source_dirs(dirs, brokers, goals) == {(1, A), (1, B), (2, D)}
    assert cp.source_dirs(dirs, brokers, planner.Goals(drain=frozenset({D}), balance=False)) == {
        (1, A),
        (2, D),
    }


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), threshold=st.sampled_from([0.5, 0.7, 0.9]), balance=st.booleans())
def test_moves_never_bring_a_partitions_replicas_into_fewer_racks(
    seed: int, threshold: float, balance: bool
) -> None:
    rng = random.Random(seed)
    count = rng.randint(3, 8)
    d, b, candidates = _cluster(
        rng, brokers=count, dirs=2, partitions=rng.randint(0, 120), rf=rng.randint(1, 3)
    )
    racks = {x.broker_id: rng.choice(["a", "b", "c", None]) for x in b}
    b = [cp.Broker(x.broker_id, x.usable, racks[x.broker_id]) for x in b]
    drain_brokers = frozenset(rng.sample(range(count), 1)) if rng.random() < 0.4 else frozenset()
    goals = planner.Goals(
        threshold=threshold, drain_brokers=drain_brokers, balance=balance, across_brokers=True
    )
    plan = cp.plan_cluster(d, b, candidates, goals)
    _check(d, b, candidates, goals, plan)
    after = {(c.topic, c.partition): list(c.replicas) for c in candidates}
    for m in plan.moves:
        replicas = after[(m.topic, m.partition)]
        replicas[replicas.index(m.from_broker)] = m.to_broker
    for c in candidates:
        key = (c.topic, c.partition)
        if any(m.reason == "drain" for m in plan.moves if (m.topic, m.partition) == key):
            continue
        assert len({racks[x] for x in after[key]}) >= len({racks[x] for x in c.replicas})


def test_a_drained_replica_stays_in_its_rack_when_it_can() -> None:
    dirs = [
        cp.BrokerDir(i, x, "online", used, 100)
        for i, x, used in ((1, A, 30), (2, B, 50), (3, C, 0), (4, D, 0))
    ]
    brokers = [
        cp.Broker(1, True, "a"),
        cp.Broker(2, True, "a"),
        cp.Broker(3, True, "b"),
        cp.Broker(4, True, "c"),
    ]
    candidates = [_c(0, 1, A, 20, (1, 4)), _c(1, 1, A, 10, (2, 1))]
    goals = planner.Goals(drain_brokers=frozenset({1}), balance=False, across_brokers=True)
    plan = cp.plan_cluster(dirs, brokers, candidates, goals)
    # Partition 0 goes to broker 2, its rack's other (not the emptier 3); partition 1, already on
    # 2, to a rack it does not use: 3 and 4 are alike, the first in dir order.
    assert [(m.partition, m.to_broker) for m in plan.moves] == [(0, 2), (1, 3)]
