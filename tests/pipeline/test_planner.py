"""The planner alone (pure Python, no Spark): goals, guarantees and determinism on random brokers."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from jbod_core.ids import random_uuid
from jbod_pipeline import planner

GIB = 1 << 30


def _broker(
    rng: random.Random, *, dirs: int = 4, replicas: int = 200, states: list[str] | None = None
) -> tuple[list[planner.Dir], list[planner.Replica]]:
    ids = [str(random_uuid(rng)) for _ in range(dirs)]
    reps = []
    used = dict.fromkeys(ids, 0)
    for i in range(replicas):
        d = ids[min(dirs - 1, int(rng.random() ** 2 * dirs))]  # skewed towards the first dirs
        size = rng.randint(1, 2 * GIB)
        reps.append(planner.Replica(f"t{i % 7}", i, d, size))
        used[d] += size
    states = states or ["online"] * dirs
    out = [planner.Dir(d, s, used[d], 300 * GIB) for d, s in zip(ids, states, strict=True)]
    return out, reps


def _after(dirs: list[planner.Dir], plan: planner.BrokerPlan) -> dict[str, int]:
    used = {d.directory_id: d.used_bytes for d in dirs}
    for m in plan.moves:
        used[m.from_dir] -= m.size_bytes
        used[m.to_dir] += m.size_bytes
    return used


def _check_guarantees(
    dirs: list[planner.Dir], reps: list[planner.Replica], goals: planner.Goals, plan: planner.BrokerPlan
) -> None:
    state = {d.directory_id: d for d in dirs}
    where = {(r.topic, r.partition): r for r in reps}
    moved = [(m.topic, m.partition) for m in plan.moves]
    assert len(moved) == len(set(moved)), "each replica moves at most once"
    used = {d.directory_id: d.used_bytes for d in dirs}
    for m in plan.moves:
        assert where[(m.topic, m.partition)].directory_id == m.from_dir
        assert where[(m.topic, m.partition)].size_bytes == m.size_bytes
        assert state[m.to_dir].state == "online" and m.to_dir not in goals.drain
        assert state[m.from_dir].state in ("online", "full")
        used[m.from_dir] -= m.size_bytes
        used[m.to_dir] += m.size_bytes
        total = state[m.to_dir].total_bytes
        assert total is not None
        assert used[m.to_dir] <= goals.threshold * total + 1e-6, (
            "no move pushes its target over the threshold"
        )


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), threshold=st.sampled_from([0.5, 0.7, 0.8, 0.9]), dirs=st.integers(2, 8))
def test_guarantees_hold_on_random_brokers(seed: int, threshold: float, dirs: int) -> None:
    rng = random.Random(seed)
    states = [rng.choice(["online", "online", "online", "full", "offline"]) for _ in range(dirs)]
    d, reps = _broker(rng, dirs=dirs, replicas=rng.randint(0, 300), states=states)
    drain = frozenset({d[0].directory_id}) if rng.random() < 0.3 else frozenset()
    goals = planner.Goals(threshold=threshold, drain=drain)
    plan = planner.plan_broker(d, reps, goals)
    _check_guarantees(d, reps, goals, plan)
    assert planner.plan_broker(list(reversed(d)), list(reversed(reps)), goals) == plan, (
        "input order does not matter"
    )


def test_capacity_brings_every_dir_under_the_threshold_when_there_is_room() -> None:
    rng = random.Random(1)
    d, reps = _broker(rng, dirs=4, replicas=550)
    total = sum(x.used_bytes for x in d)
    assert total < 0.8 * sum(x.total_bytes or 0 for x in d)
    assert max(x.used_bytes / (x.total_bytes or 1) for x in d) > 0.8
    goals = planner.Goals(threshold=0.8, balance=False)
    plan = planner.plan_broker(d, reps, goals)
    used = _after(d, plan)
    assert all(used[x.directory_id] <= 0.8 * (x.total_bytes or 0) for x in d)
    assert not plan.issues
    assert {m.reason for m in plan.moves} == {"capacity"}


def test_balance_evens_usage_within_the_margin() -> None:
    rng = random.Random(2)
    d, reps = _broker(rng, dirs=6, replicas=600)
    goals = planner.Goals(threshold=0.95, balance_margin=0.03)
    plan = planner.plan_broker(d, reps, goals)
    used = _after(d, plan)
    utils = [used[x.directory_id] / (x.total_bytes or 1) for x in d]
    mean = sum(utils) / len(utils)
    assert max(abs(u - mean) for u in utils) <= 0.03 + 2 * GIB / (300 * GIB)
    before = [x.used_bytes / (x.total_bytes or 1) for x in d]
    assert max(utils) - min(utils) < max(before) - min(before)


def test_drain_moves_everything_and_reports_what_fits_nowhere() -> None:
    a, b = "ECfE0cOGu8QeL-uJQUw0PA", "YS52lqbOzBs1v5ktyenGFg"
    dirs = [planner.Dir(a, "online", 30, 100), planner.Dir(b, "online", 40, 100)]
    reps = [planner.Replica("t", 0, a, 20), planner.Replica("t", 1, a, 10), planner.Replica("t", 2, b, 40)]
    plan = planner.plan_broker(dirs, reps, planner.Goals(threshold=0.65, drain=frozenset({a})))
    assert [(m.partition, m.to_dir) for m in plan.moves] == [(0, b)]
    assert [i.kind for i in plan.issues] == ["unplaced"]
    assert "t-1" in plan.issues[0].detail


def test_offline_and_full_dirs_are_never_targets_and_offline_dirs_never_sources() -> None:
    a, b, c = "ECfE0cOGu8QeL-uJQUw0PA", "YS52lqbOzBs1v5ktyenGFg", "kbdYSiJlsfXNYT4w2PFq3w"
    dirs = [
        planner.Dir(a, "offline", 95, 100),
        planner.Dir(b, "full", 96, 100),
        planner.Dir(c, "online", 10, 100),
    ]
    reps = [planner.Replica("t", i, d, 8) for i, d in enumerate([a, a, b, b, b])]
    plan = planner.plan_broker(dirs, reps, planner.Goals(threshold=0.8))
    assert plan.moves
    assert all(m.from_dir == b and m.to_dir == c for m in plan.moves)
    drained = planner.plan_broker(dirs, reps, planner.Goals(drain=frozenset({a})))
    assert any(i.kind == "offline-drain" for i in drained.issues)


def test_unknown_sizes_and_unknown_capacity_are_left_alone() -> None:
    a, b = "ECfE0cOGu8QeL-uJQUw0PA", "YS52lqbOzBs1v5ktyenGFg"
    dirs = [planner.Dir(a, "online", 90, 100), planner.Dir(b, "online", 0, None)]
    reps = [planner.Replica("t", 0, a, None), planner.Replica("t", 1, a, 50)]
    plan = planner.plan_broker(dirs, reps, planner.Goals())
    assert plan.moves == []
    assert [i.kind for i in plan.issues] == ["over-threshold"]
