"""Pure replication decisions: high and low watermarks, ISR shrink/expand, divergence, produce
admission."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jbod_core.errors import ErrorCode
from jbod_core.replication import (
    DivergingEpoch,
    FollowerProgress,
    diverging_epoch,
    high_watermark,
    isr_to_expand,
    isr_to_shrink,
    low_watermark,
    produce_admission,
    truncation_offset,
)


def _at(end: int) -> FollowerProgress:
    return FollowerProgress(end_offset=end)


def test_high_watermark_is_the_smallest_isr_end_offset() -> None:
    followers = {2: _at(7), 3: _at(4)}
    assert high_watermark(0, 1, 10, (1, 2, 3), followers) == 4
    assert high_watermark(0, 1, 10, (1, 2), followers) == 7
    assert high_watermark(0, 1, 10, (1,), followers) == 10


def test_high_watermark_never_moves_back_and_waits_for_unknown_members() -> None:
    assert high_watermark(6, 1, 10, (1, 2, 3), {2: _at(7), 3: _at(4)}) == 6
    assert high_watermark(3, 1, 10, (1, 2), {}) == 3
    assert high_watermark(3, 1, 10, (1, 2), {2: FollowerProgress()}) == 3


def test_high_watermark_never_exceeds_the_leader_end() -> None:
    assert high_watermark(0, 1, 5, (1, 2), {2: _at(9)}) == 5


def test_low_watermark_is_the_smallest_log_start_of_the_leader_and_the_isr_as_fetched() -> None:
    follower = FollowerProgress()
    follower.on_fetch(40, 40, 1.0, log_start_offset=10)
    followers = {
        2: follower,
        3: FollowerProgress(log_start_offset=25),
        4: FollowerProgress(log_start_offset=0),
    }
    assert low_watermark(1, 30, (1, 2, 3), followers) == 10
    assert low_watermark(1, 5, (1, 2, 3), followers) == 5  # never above the leader's own
    assert low_watermark(1, 30, (1, 3), followers) == 25  # replica 4 is out of the ISR
    assert low_watermark(1, 30, (1,), followers) == 30  # the leader alone
    # A member that has not said where its log starts holds it unknown.
    assert low_watermark(1, 30, (1, 3, 5), followers) == -1
    assert low_watermark(1, 30, (1, 2), {2: FollowerProgress()}) == -1


@given(
    current=st.integers(0, 100),
    leader_end=st.integers(0, 100),
    ends=st.lists(st.integers(-1, 100), min_size=0, max_size=4),
)
def test_high_watermark_properties(current: int, leader_end: int, ends: list[int]) -> None:
    current = min(current, leader_end)
    followers = {i + 2: FollowerProgress(end_offset=e) for i, e in enumerate(ends)}
    isr = (1, *followers)
    hw = high_watermark(current, 1, leader_end, isr, followers)
    assert current <= hw <= leader_end
    if hw > current:
        assert all(f.end_offset >= hw for f in followers.values())


def test_caught_up_time_follows_kafka_rule() -> None:
    progress = FollowerProgress(last_caught_up_ms=0)
    progress.on_fetch(5, 10, now_ms=100)  # behind: not caught up now
    assert progress.last_caught_up_ms == 0
    progress.on_fetch(10, 20, now_ms=200)  # reached the end as of the previous fetch (10)
    assert progress.last_caught_up_ms == 100
    progress.on_fetch(20, 20, now_ms=300)  # at the end now
    assert progress.last_caught_up_ms == 300
    assert progress.end_offset == 20


def test_shrink_names_followers_lagging_longer_than_allowed() -> None:
    followers = {
        2: FollowerProgress(end_offset=5, last_caught_up_ms=1000),
        3: FollowerProgress(last_caught_up_ms=9500),
    }
    assert isr_to_shrink((1, 2, 3), 1, followers, now_ms=10_000, lag_time_max_ms=5000) == {2}
    assert isr_to_shrink((1, 2, 3), 1, followers, now_ms=5_900, lag_time_max_ms=5000) == set()
    assert isr_to_shrink((1, 4), 1, followers, now_ms=0, lag_time_max_ms=5000) == {4}  # never fetched


def test_expand_needs_the_high_watermark_the_epoch_start_and_eligibility() -> None:
    followers = {2: _at(10), 3: _at(8), 4: _at(12)}
    out = isr_to_expand(
        (1, 2, 3, 4),
        (1,),
        followers,
        high_watermark=9,
        leader_epoch_start_offset=10,
        eligible=lambda b: b != 4,
    )
    assert out == {2}


def test_leader_reports_divergence_only_when_histories_differ() -> None:
    epochs = {0: (0, 5), 1: (1, 9), 2: (2, 12)}  # leader: epoch 0 ends at 5, 1 at 9, 2 is current (end 12)

    def end_of(epoch: int) -> tuple[int, int]:
        candidates = [e for e in epochs if e <= epoch]
        return epochs[max(candidates)] if candidates else (-1, -1)

    assert diverging_epoch(7, 1, end_of) is None  # a prefix of ours
    assert diverging_epoch(9, 1, end_of) is None
    assert diverging_epoch(11, 1, end_of) == DivergingEpoch(1, 9)  # wrote past our epoch 1 end
    assert diverging_epoch(8, 3, end_of) == DivergingEpoch(2, 12)  # an epoch we never had
    assert diverging_epoch(3, -1, end_of) is None  # no epoch: nothing to compare


def test_follower_truncation_offsets() -> None:
    local = {0: (0, 5), 1: (1, 11)}

    def end_of(epoch: int) -> tuple[int, int]:
        candidates = [e for e in local if e <= epoch]
        return local[max(candidates)] if candidates else (-1, -1)

    assert truncation_offset(DivergingEpoch(1, 9), end_of, local_end_offset=11, high_watermark=4) == 9
    assert truncation_offset(DivergingEpoch(2, 12), end_of, local_end_offset=11, high_watermark=4) == 11
    assert truncation_offset(DivergingEpoch(0, 3), end_of, local_end_offset=11, high_watermark=2) == 3
    assert truncation_offset(DivergingEpoch(-1, -1), end_of, local_end_offset=11, high_watermark=4) == 4


def test_produce_admission() -> None:
    assert produce_admission(-1, 1, 2) is ErrorCode.NOT_ENOUGH_REPLICAS
    assert produce_admission(-1, 2, 2) is ErrorCode.NONE
    assert produce_admission(1, 1, 3) is ErrorCode.NONE
    assert produce_admission(0, 1, 3) is ErrorCode.NONE
