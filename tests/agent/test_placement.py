"""Replica management (`jbod_agent.placement`): the module docstring's table, row by row.

Covers: every row of the table; the full-dir rule (an assigned full dir gets no new replica, the
chosen dir does; none chosen → nothing); a replica whose only copy is in an offline dir is left
alone whatever the metadata says; `choose_dir` prefers more usable bytes per hosted replica, never
picks an offline or full dir, returns None when nothing can take a replica, and breaks ties by
fewer replicas then the contract's Uuid order, independent of input order (property tests).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jbod_agent.placement import (
    DirHealth,
    DirView,
    ReplicaAction,
    ReplicaActionKind,
    choose_dir,
    decide_replica,
)
from jbod_core.ids import LOST_DIR, MIGRATING_DIR, UNASSIGNED_DIR, Uuid
from jbod_core.image import PartitionKey

KEY: PartitionKey = (Uuid(0x70, 0x1C), 3)
D = Uuid(1, 1)  # an online local dir (the metadata's choice)
X = Uuid(2, 2)  # another online local dir
F = Uuid(3, 3)  # a full local dir
OFF = Uuid(4, 4)  # an offline local dir
C = Uuid(5, 5)  # the dir choose_dir picked
UNKNOWN = Uuid(9, 9)  # not a dir of this broker
DIRS = {
    D: DirView(D, DirHealth.ONLINE, 1000, 1),
    X: DirView(X, DirHealth.ONLINE, 1000, 1),
    F: DirView(F, DirHealth.FULL, 0, 4),
    OFF: DirView(OFF, DirHealth.OFFLINE, 0, 0),
    C: DirView(C, DirHealth.ONLINE, 5000, 0),
}
NOT_LOCAL = [LOST_DIR, MIGRATING_DIR, UNKNOWN]


def decide(
    assigned: Uuid, local: Uuid | None, *, offline: bool = False, chosen: Uuid | None = C
) -> ReplicaAction | None:
    return decide_replica(KEY, assigned, local_dir=local, dirs=DIRS, has_offline_dirs=offline, chosen=chosen)


def kind_and_dir(action: ReplicaAction | None) -> tuple[ReplicaActionKind, Uuid] | None:
    return None if action is None else (action.kind, action.directory)


@pytest.mark.parametrize("offline", [False, True])
def test_unassigned_found_in_online_dir_is_reported(offline: bool) -> None:
    assert kind_and_dir(decide(UNASSIGNED_DIR, X, offline=offline)) == (ReplicaActionKind.REPORT, X)
    assert kind_and_dir(decide(UNASSIGNED_DIR, F, offline=offline)) == (ReplicaActionKind.REPORT, F)


@pytest.mark.parametrize("offline", [False, True])
def test_unassigned_new_replica_is_created_in_the_chosen_dir(offline: bool) -> None:
    # Created even when some dir is offline: UNASSIGNED means it never had a dir.
    action = decide(UNASSIGNED_DIR, None, offline=offline)
    assert kind_and_dir(action) == (ReplicaActionKind.CREATE, C)
    assert action is not None and action.key == KEY and action.reason


def test_unassigned_with_no_usable_dir_does_nothing() -> None:
    assert decide(UNASSIGNED_DIR, None, chosen=None) is None


@pytest.mark.parametrize("offline", [False, True])
def test_assigned_online_dir_holding_it_needs_nothing(offline: bool) -> None:
    assert decide(D, D, offline=offline) is None


@pytest.mark.parametrize("offline", [False, True])
def test_assigned_online_dir_without_local_copy_is_created_there(offline: bool) -> None:
    assert kind_and_dir(decide(D, None, offline=offline)) == (ReplicaActionKind.CREATE, D)
    # ... not in the chosen dir, and even if nothing would be chosen.
    assert kind_and_dir(decide(D, None, chosen=None)) == (ReplicaActionKind.CREATE, D)


@pytest.mark.parametrize("offline", [False, True])
def test_assigned_online_dir_but_found_in_another_is_reported(offline: bool) -> None:
    assert kind_and_dir(decide(D, X, offline=offline)) == (ReplicaActionKind.REPORT, X)
    assert kind_and_dir(decide(D, F, offline=offline)) == (ReplicaActionKind.REPORT, F)


@pytest.mark.parametrize("assigned", NOT_LOCAL)
@pytest.mark.parametrize("offline", [False, True])
def test_lost_migrating_or_unknown_found_locally_is_reported(assigned: Uuid, offline: bool) -> None:
    assert kind_and_dir(decide(assigned, X, offline=offline)) == (ReplicaActionKind.REPORT, X)


@pytest.mark.parametrize("assigned", NOT_LOCAL)
def test_lost_migrating_or_unknown_missing_with_offline_dirs_waits(assigned: Uuid) -> None:
    assert decide(assigned, None, offline=True) is None


@pytest.mark.parametrize("assigned", NOT_LOCAL)
def test_lost_migrating_or_unknown_missing_without_offline_dirs_is_created(assigned: Uuid) -> None:
    assert kind_and_dir(decide(assigned, None, offline=False)) == (ReplicaActionKind.CREATE, C)
    assert decide(assigned, None, offline=False, chosen=None) is None


@pytest.mark.parametrize("assigned", [UNASSIGNED_DIR, D, X, F, OFF, *NOT_LOCAL])
@pytest.mark.parametrize("chosen", [C, None])
def test_only_copy_in_an_offline_dir_is_left_alone(assigned: Uuid, chosen: Uuid | None) -> None:
    assert decide(assigned, OFF, offline=True, chosen=chosen) is None
    # A copy in a dir the snapshot does not know is treated the same way.
    assert decide(assigned, UNKNOWN, offline=True, chosen=chosen) is None


def test_assigned_offline_dir_without_local_copy_waits() -> None:
    assert decide(OFF, None, offline=True) is None


# -- the full-dir rule ----------------------------------------------------------------------------


def test_assigned_full_dir_without_local_copy_goes_to_the_chosen_dir() -> None:
    action = decide(F, None)
    assert kind_and_dir(action) == (ReplicaActionKind.CREATE, C)
    assert action is not None and "full" in action.reason


def test_assigned_full_dir_with_nothing_chosen_does_nothing() -> None:
    assert decide(F, None, chosen=None) is None


def test_assigned_full_dir_holding_it_needs_nothing() -> None:
    assert decide(F, F) is None


def test_assigned_full_dir_found_elsewhere_is_reported() -> None:
    assert kind_and_dir(decide(F, X)) == (ReplicaActionKind.REPORT, X)


# -- choose_dir ---------------------------------------------------------------------------------


def view(directory: Uuid, usable: int, replicas: int, health: DirHealth = DirHealth.ONLINE) -> DirView:
    return DirView(directory, health, usable, replicas)


def test_choose_prefers_usable_bytes_per_replica() -> None:
    a, b = Uuid(1, 0), Uuid(2, 0)
    # 100 / (0 + 1) = 100 beats 150 / (1 + 1) = 75 ...
    assert choose_dir([view(a, 100, 0), view(b, 150, 1)]) == a
    # ... and 300 / 2 = 150 beats 100.
    assert choose_dir([view(a, 100, 0), view(b, 300, 1)]) == b
    # Not round robin: the emptier dir keeps winning while it is emptier.
    assert choose_dir([view(a, 10**12, 100), view(b, 10**9, 0)]) == a


def test_choose_never_picks_offline_or_full() -> None:
    a, b, c = Uuid(1, 0), Uuid(2, 0), Uuid(3, 0)
    dirs = [view(a, 10**15, 0, DirHealth.OFFLINE), view(b, 10**15, 0, DirHealth.FULL), view(c, 1, 1000)]
    assert choose_dir(dirs) == c


def test_choose_none_when_nothing_usable() -> None:
    assert choose_dir([]) is None
    assert choose_dir([view(Uuid(1, 0), 10**9, 0, DirHealth.OFFLINE)]) is None
    assert choose_dir([view(Uuid(1, 0), 10**9, 0, DirHealth.FULL)]) is None
    assert choose_dir(iter([view(Uuid(1, 0), 0, 0, DirHealth.FULL)])) is None


def test_choose_ties_fewer_replicas_then_uuid_order() -> None:
    a, b = Uuid(1, 0), Uuid(2, 0)
    # Equal ratio (0): fewer replicas wins.
    assert choose_dir([view(a, 0, 5), view(b, 0, 2)]) == b
    # Full tie: the smaller Uuid in the contract's signed order.
    negative = Uuid(-5, 0)  # msb is signed: it sorts first
    assert negative < a
    assert choose_dir([view(a, 100, 1), view(negative, 100, 1)]) == negative
    assert choose_dir([view(Uuid(1, 7), 100, 1), view(Uuid(1, -7), 100, 1)]) == Uuid(1, -7)


_uuids = st.builds(
    Uuid,
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
)
_views = st.lists(
    st.builds(
        DirView,
        _uuids,
        st.sampled_from(list(DirHealth)),
        st.integers(min_value=0, max_value=2**44),
        st.integers(min_value=0, max_value=10_000),
    ),
    max_size=8,
    unique_by=lambda d: d.directory_id,
)


@given(_views, st.randoms(use_true_random=False))
def test_choose_dir_properties(views: list[DirView], rnd: random.Random) -> None:
    chosen = choose_dir(views)
    online = [v for v in views if v.health is DirHealth.ONLINE]
    if not online:
        assert chosen is None
        return
    [picked] = [v for v in online if v.directory_id == chosen]
    best = max(v.usable_bytes / (v.replicas + 1) for v in online)
    assert picked.usable_bytes / (picked.replicas + 1) == best
    ties = [v for v in online if v.usable_bytes / (v.replicas + 1) == best]
    fewest = min(v.replicas for v in ties)
    assert picked.replicas == fewest
    assert picked.directory_id == min(v.directory_id for v in ties if v.replicas == fewest)
    shuffled = list(views)
    rnd.shuffle(shuffled)
    assert choose_dir(shuffled) == chosen  # deterministic, whatever the order


def test_choose_never_picks_a_cordoned_dir() -> None:
    a, b = Uuid(1, 0), Uuid(2, 0)
    roomy = DirView(a, DirHealth.ONLINE, 10**15, 0, cordoned=True)
    assert choose_dir([roomy, view(b, 1, 1000)]) == b
    assert choose_dir([roomy]) is None
