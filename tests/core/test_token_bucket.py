"""The replication throttles' token bucket (`jbod_core.token_bucket`) on a fake clock."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jbod_core.token_bucket import TokenBucket


def test_a_full_bucket_lets_a_burst_through_then_is_exceeded() -> None:
    bucket = TokenBucket.full(1000, now=0.0)
    assert not bucket.exceeded(0.0)
    bucket.record(1000, 0.0)
    assert bucket.exceeded(0.0)
    assert bucket.wait_s(0.0) == pytest.approx(0.001)
    assert not bucket.exceeded(0.01)  # 10 bytes' worth later


def test_debt_is_paid_back_at_the_rate() -> None:
    bucket = TokenBucket.full(1000, now=0.0)
    bucket.record(3000, 0.0)  # 2000 bytes in debt
    assert bucket.wait_s(0.0) == pytest.approx(2.001)
    assert bucket.exceeded(1.9)
    assert not bucket.exceeded(2.01)


def test_tokens_never_exceed_the_burst() -> None:
    bucket = TokenBucket.full(1000, now=0.0)
    bucket.record(500, 0.0)
    assert not bucket.exceeded(100.0)
    bucket.record(1000, 100.0)
    assert bucket.exceeded(100.0)  # idling a long time saved no more than one burst


def test_a_new_rate_applies_at_once_and_caps_the_tokens() -> None:
    bucket = TokenBucket.full(1000, now=0.0)
    bucket.set_rate(10, now=0.0)
    assert bucket.tokens == 10
    bucket.record(20, 0.0)
    assert bucket.wait_s(0.0) == pytest.approx(1.001)


def test_a_rate_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        TokenBucket.full(0, now=0.0)


@given(
    rate=st.integers(1, 10_000),
    steps=st.lists(st.tuples(st.floats(0, 2), st.integers(1, 5000)), min_size=1, max_size=50),
)
def test_bytes_moved_while_not_exceeded_stay_within_the_bound(
    rate: int, steps: list[tuple[float, int]]
) -> None:
    """A caller that moves bytes only while the bucket is not exceeded moves, over the run, at most
    burst + rate * elapsed + the largest single move."""
    bucket = TokenBucket.full(rate, now=0.0)
    now = 0.0
    moved = 0
    for pause, size in steps:
        now += pause
        if not bucket.exceeded(now):
            bucket.record(size, now)
            moved += size
    assert moved <= bucket.burst + rate * now + max(size for _, size in steps)


def test_a_bucket_is_refilled_once_it_holds_its_whole_burst_again() -> None:
    bucket = TokenBucket.full(10.0, now=0.0, burst_s=2.0)  # 20 tokens
    assert bucket.refilled(0.0)
    bucket.record(50, now=0.0)  # 30 in debt: 5 s to refill to 20
    assert not bucket.refilled(4.0)
    assert bucket.refilled(5.0)
    assert bucket == TokenBucket.full(10.0, now=5.0, burst_s=2.0)  # as a new bucket
