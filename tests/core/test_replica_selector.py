"""KIP-392's rack-aware replica selector, as a pure decision of the leader."""

from __future__ import annotations

from jbod_core.replica_selector import (
    NO_PREFERRED_REPLICA,
    RACK_AWARE_SELECTOR,
    ReplicaView,
    preferred_read_replica,
    selector_error,
)

LEADER = ReplicaView(1, "a", log_start_offset=0, end_offset=100)


def _pick(rack: str, offset: int, *followers: ReplicaView) -> int:
    return preferred_read_replica(client_rack=rack, fetch_offset=offset, leader=LEADER, followers=followers)


def test_the_client_rack_picks_the_most_caught_up_follower_there() -> None:
    b_behind = ReplicaView(2, "b", 0, 90, last_caught_up_ms=5)
    b_ahead = ReplicaView(3, "b", 0, 100, last_caught_up_ms=1)
    c = ReplicaView(4, "c", 0, 100)
    assert _pick("b", 50, b_behind, b_ahead, c) == 3
    assert _pick("c", 50, b_behind, b_ahead, c) == 4
    # ties on the end offset: the one caught up most recently
    assert _pick("b", 50, ReplicaView(2, "b", 0, 100, 9), ReplicaView(3, "b", 0, 100, 1)) == 2


def test_the_leader_serves_without_a_rack_in_its_own_rack_or_when_no_follower_holds_the_offset() -> None:
    b = ReplicaView(2, "b", log_start_offset=10, end_offset=80)
    assert _pick("", 50, b) == NO_PREFERRED_REPLICA
    assert _pick("a", 50, b) == NO_PREFERRED_REPLICA
    assert _pick("d", 50, b) == NO_PREFERRED_REPLICA
    assert _pick("b", 50, b) == 2
    assert _pick("b", 81, b) == NO_PREFERRED_REPLICA  # beyond the follower's end
    assert _pick("b", 9, b) == NO_PREFERRED_REPLICA  # below its log start
    assert _pick("b", 80, b) == 2


def test_only_kafkas_rack_aware_selector_is_accepted() -> None:
    assert selector_error(RACK_AWARE_SELECTOR) is None
    assert selector_error(" " + RACK_AWARE_SELECTOR + " ") is None
    assert selector_error("com.example.MySelector") is not None
