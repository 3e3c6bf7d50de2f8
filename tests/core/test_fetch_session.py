"""Incremental fetch sessions (KIP-227): the follower's builder, the leader's sessions and cache,
and the ISR lag rule for partitions left out of session requests."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jbod_core.errors import ErrorCode
from jbod_core.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    FetchPlan,
    FetchPosition,
    FetchSessionBuilder,
    FetchSessionCache,
    LeaderSession,
    SessionError,
    SessionPartition,
    leaves_session,
    next_epoch,
)
from jbod_core.replication import FollowerProgress, SessionClock, isr_to_shrink


def _at(offset: int, epoch: int = 0) -> FetchPosition:
    return FetchPosition(offset, epoch, epoch)


def _cache(slots: int = 1000) -> FetchSessionCache[str]:
    ids = itertools.count(1)
    return FetchSessionCache(new_id=lambda: next(ids), slots=slots)


def _opened(builder: FetchSessionBuilder[str], wanted: dict[str, FetchPosition], session_id: int = 7) -> None:
    plan = builder.full(wanted)
    assert builder.on_reply(plan, session_id=session_id, error_code=0)


# -- follower side -------------------------------------------------------------------------------


def test_a_full_request_opens_a_session_then_only_changes_are_sent() -> None:
    builder: FetchSessionBuilder[str] = FetchSessionBuilder(max_partitions=100)
    assert builder.needs_full
    plan = builder.full({"a": _at(0), "b": _at(5)})
    assert (plan.session_id, plan.epoch, plan.full) == (0, INITIAL_EPOCH, True)
    assert dict(plan.partitions) == {"a": _at(0), "b": _at(5)}
    assert builder.on_reply(plan, session_id=42, error_code=0)
    assert not builder.needs_full and builder.known == {"a": _at(0), "b": _at(5)}

    # Unchanged positions are not sent; a changed one, an added one and a forgotten one are.
    plan = builder.incremental({"a": _at(0), "b": _at(9), "c": _at(1), "zz": None})
    assert (plan.session_id, plan.epoch, plan.full) == (42, 1, False)
    assert plan.partitions == (("b", _at(9)), ("c", _at(1)))
    assert plan.forgotten == ()  # "zz" was never in the session
    assert builder.on_reply(plan, session_id=42, error_code=0)
    plan = builder.incremental({"a": None})
    assert (plan.epoch, plan.partitions, plan.forgotten) == (2, (), ("a",))
    assert builder.on_reply(plan, session_id=42, error_code=0)
    assert builder.known == {"b": _at(9), "c": _at(1)}
    # An idle round: nothing to send, the session's epoch still moves on.
    plan = builder.incremental({})
    assert plan.empty and plan.epoch == 3
    # A log start that moved (a DeleteRecords reached the follower) is a change the leader hears of.
    moved = FetchPosition(9, 0, 0, log_start_offset=4)
    plan = builder.incremental({"b": moved, "c": _at(1)})
    assert plan.partitions == (("b", moved),)


def test_changes_over_the_limit_wait_for_the_next_request_latest_position_winning() -> None:
    builder: FetchSessionBuilder[str] = FetchSessionBuilder(max_partitions=2)
    plan = builder.full({k: _at(0) for k in "abcde"})
    assert [k for k, _ in plan.partitions] == ["a", "b"]
    assert builder.on_reply(plan, session_id=1, error_code=0)
    plan = builder.incremental({"c": _at(3)})  # "c" was still waiting: the newer position wins
    assert plan.partitions == (("c", _at(3)), ("d", _at(0)))
    assert builder.on_reply(plan, session_id=1, error_code=0)
    plan = builder.incremental({})
    assert plan.partitions == (("e", _at(0)),)
    assert builder.on_reply(plan, session_id=1, error_code=0)
    assert builder.known == {"a": _at(0), "b": _at(0), "c": _at(3), "d": _at(0), "e": _at(0)}


@pytest.mark.parametrize(
    "code", [SessionError.FETCH_SESSION_ID_NOT_FOUND, SessionError.INVALID_FETCH_SESSION_EPOCH]
)
def test_a_lost_session_makes_the_next_request_full(code: SessionError) -> None:
    builder: FetchSessionBuilder[str] = FetchSessionBuilder(max_partitions=10)
    _opened(builder, {"a": _at(0)})
    plan = builder.incremental({"a": _at(4)})
    assert not builder.on_reply(plan, session_id=0, error_code=code)
    assert builder.needs_full and builder.known == {}
    with pytest.raises(ValueError, match="must be full"):
        builder.incremental({})


def test_a_failed_request_or_a_reply_for_another_session_starts_over() -> None:
    builder: FetchSessionBuilder[str] = FetchSessionBuilder(max_partitions=10)
    _opened(builder, {"a": _at(0)}, session_id=5)
    builder.incremental({"a": _at(1)})
    builder.on_failure()
    assert builder.needs_full and builder.sessions_supported
    _opened(builder, {"a": _at(1)}, session_id=5)
    plan = builder.incremental({})
    assert not builder.on_reply(plan, session_id=6, error_code=0)
    assert builder.needs_full


def test_a_leader_without_sessions_gets_sessionless_full_requests_until_a_failure() -> None:
    builder: FetchSessionBuilder[str] = FetchSessionBuilder(max_partitions=1)
    plan = builder.full({"a": _at(0), "b": _at(0)})
    assert builder.on_reply(plan, session_id=0, error_code=0)  # an old leader: no sessionId
    assert builder.needs_full and not builder.sessions_supported
    plan = builder.full({"a": _at(0), "b": _at(0)})
    assert plan.epoch == FINAL_EPOCH and len(plan.partitions) == 2  # everything, as before sessions
    assert builder.on_reply(plan, session_id=0, error_code=0)
    assert builder.answered_positions(plan) == {"a": _at(0), "b": _at(0)}
    builder.on_failure()
    assert builder.sessions_supported and builder.full({"a": _at(0)}).epoch == INITIAL_EPOCH


def test_partitions_answered_with_an_error_leave_the_session() -> None:
    builder: FetchSessionBuilder[str] = FetchSessionBuilder(max_partitions=10)
    _opened(builder, {"a": _at(0), "b": _at(0)})
    builder.dropped(["a"])
    assert builder.known == {"b": _at(0)}
    # Retrying sends it again although its position did not change.
    assert builder.incremental({"a": _at(0)}).partitions == (("a", _at(0)),)
    assert leaves_session(ErrorCode.NOT_LEADER_OR_FOLLOWER) and leaves_session(ErrorCode.FENCED_LEADER_EPOCH)
    assert not leaves_session(ErrorCode.NONE) and not leaves_session(ErrorCode.OFFSET_OUT_OF_RANGE)


def test_epochs_count_from_one_and_wrap_past_int32() -> None:
    assert next_epoch(INITIAL_EPOCH) == 1
    assert next_epoch(41) == 42
    assert next_epoch(2**31 - 1) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


# -- leader side ---------------------------------------------------------------------------------


def test_cache_evicts_the_least_recently_used_session() -> None:
    cache = _cache(slots=2)
    one, closed = cache.create(1, now_ms=0)
    two, _ = cache.create(2, now_ms=1)
    assert one is not None and two is not None and closed == []
    assert isinstance(cache.lookup(one.session_id, 1, 1, now_ms=2), LeaderSession)  # one is now the newest
    three, closed = cache.create(3, now_ms=3)
    assert closed == [two] and len(cache) == 2 and three is not None
    assert cache.lookup(two.session_id, 1, 2, now_ms=4) is SessionError.FETCH_SESSION_ID_NOT_FOUND


def test_a_full_request_closes_the_followers_other_sessions() -> None:
    cache = _cache()
    first, _ = cache.create(1, now_ms=0)
    other, _ = cache.create(2, now_ms=0)
    second, closed = cache.create(1, now_ms=1)
    assert first is not None and second is not None and other is not None
    assert closed == [first] and first.session_id != second.session_id
    assert set(cache.sessions) == {other.session_id, second.session_id}


def test_lookup_refuses_unknown_foreign_and_out_of_order_requests_without_changing_the_session() -> None:
    cache = _cache()
    session, _ = cache.create(1, now_ms=0)
    assert session is not None
    sid = session.session_id
    assert cache.lookup(sid + 100, 1, 1, now_ms=1) is SessionError.FETCH_SESSION_ID_NOT_FOUND
    assert cache.lookup(sid, 1, 2, now_ms=1) is SessionError.FETCH_SESSION_ID_NOT_FOUND  # another follower's
    assert cache.lookup(sid, 2, 1, now_ms=1) is SessionError.INVALID_FETCH_SESSION_EPOCH
    assert session.epoch == 1
    assert cache.lookup(sid, 1, 1, now_ms=1) is session and session.epoch == 2
    assert cache.lookup(sid, 1, 1, now_ms=2) is SessionError.INVALID_FETCH_SESSION_EPOCH  # a replay
    assert cache.close(sid, 2) is None and cache.close(sid, 1) is session and len(cache) == 0


def test_no_slots_means_no_sessions() -> None:
    cache = _cache(slots=0)
    session, closed = cache.create(1, now_ms=0)
    assert session is None and closed == []


def test_session_update_to_check_marks_and_drop() -> None:
    woken: list[int] = []
    session: LeaderSession[str] = LeaderSession(9, 1, on_dirty=lambda: woken.append(1))
    listed, gone = session.update([("a", _at(0)), ("b", _at(0)), ("c", _at(0))], [])
    assert listed == ["a", "b", "c"] and gone == []
    session.mark("zz")  # not in the session: ignored
    assert session.dirty == set() and woken == []
    session.mark("b")
    session.keep_checking("c")
    assert woken == [1]
    listed, gone = session.update([("a", _at(2))], ["zz", "c"])
    assert listed == ["a"] and gone == ["c"]
    assert session.to_check(listed) == ["a", "b"]  # "c" was forgotten: no longer pending
    assert session.to_check([]) == []  # marks and pending are consumed
    assert session.drop("a") and not session.drop("a") and set(session.partitions) == {"b"}


def test_an_incremental_reply_lists_only_partitions_with_news() -> None:
    part = SessionPartition(_at(0))
    part.sent(high_watermark=10, log_start_offset=0)
    quiet = {"full": False, "has_data": False, "error_code": 0, "diverging": False}
    assert not part.answer_needed(**quiet, high_watermark=10, log_start_offset=0)  # type: ignore[arg-type]
    assert part.answer_needed(**quiet, high_watermark=11, log_start_offset=0)  # type: ignore[arg-type]
    assert part.answer_needed(**quiet, high_watermark=10, log_start_offset=3)  # type: ignore[arg-type]
    for change in ({"full": True}, {"has_data": True}, {"error_code": 1}, {"diverging": True}):
        assert part.answer_needed(**{**quiet, **change}, high_watermark=10, log_start_offset=0)  # type: ignore[arg-type]


# -- both sides together ---------------------------------------------------------------------------

_KEYS = "abcdefgh"
_change = st.tuples(st.sampled_from(_KEYS), st.one_of(st.none(), st.integers(0, 3)))
_round = st.tuples(
    st.lists(_change, max_size=6), st.sampled_from(["ok", "ok", "ok", "lost", "failed", "error"])
)


@settings(max_examples=300, deadline=None)
@given(rounds=st.lists(_round, max_size=25), limit=st.integers(1, 4))
def test_the_leaders_session_always_matches_the_followers_view(
    rounds: list[tuple[list[tuple[str, int | None]], str]], limit: int
) -> None:
    """Random changes, lost sessions, failed requests and partition errors: after every reply the
    leader's session holds exactly the builder's `known`, and once quiet, exactly what is wanted."""
    cache = _cache()
    builder: FetchSessionBuilder[str] = FetchSessionBuilder(max_partitions=limit)
    wanted: dict[str, FetchPosition] = {}
    changed: set[str] = set()

    def exchange(outcome: str) -> None:
        if builder.needs_full:
            changed.clear()
            plan: FetchPlan[str] = builder.full(dict(wanted))
        else:
            plan = builder.incremental({k: wanted.get(k) for k in changed})
            changed.clear()
        if outcome == "failed":  # lost in transit: the leader may or may not have applied it
            builder.on_failure()
            return
        if plan.epoch == INITIAL_EPOCH:
            session, _ = cache.create(1, now_ms=0)
            assert session is not None
        else:
            found = cache.lookup(plan.session_id, plan.epoch, 1, now_ms=0)
            if outcome == "lost" or isinstance(found, SessionError):  # e.g. the leader restarted
                builder.on_reply(plan, session_id=0, error_code=SessionError.FETCH_SESSION_ID_NOT_FOUND)
                cache.sessions.clear()
                return
            session = found
        session.update(plan.partitions, plan.forgotten)
        assert builder.on_reply(plan, session_id=session.session_id, error_code=0)
        if outcome == "error" and session.partitions:
            victim = sorted(session.partitions)[0]
            session.drop(victim)
            builder.dropped([victim])
            changed.add(victim)  # the follower retries it
        assert {k: p.position for k, p in session.partitions.items()} == builder.known

    for changes, outcome in rounds:
        for key, offset in changes:
            if offset is None:
                wanted.pop(key, None)
            else:
                wanted[key] = _at(offset)
            changed.add(key)
        exchange(outcome)
    for _ in range(len(_KEYS) + 3):
        exchange("ok")
    assert builder.known == wanted


# -- the lag rule under sessions -------------------------------------------------------------------

_event = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 3)),
    st.tuples(st.just("request"), st.integers(0, 100)),  # the follower's progress, % of the way
)


@settings(max_examples=300, deadline=None)
@given(events=st.lists(_event, max_size=40))
def test_an_idle_partition_in_a_session_is_caught_up_exactly_as_if_listed_every_time(
    events: list[tuple[str, int]],
) -> None:
    """The follower's builder lists the partition only when its position changed, and the
    leader's session looks at it only when listed, marked (an append) or behind (`to_check`, as
    the agent's leader does); its caught-up time must equal Kafka's rule applied at every request."""
    every = FollowerProgress(last_caught_up_ms=0)  # listed in every request
    lazy = FollowerProgress(last_caught_up_ms=0)  # looked at as the session rules say
    builder: FetchSessionBuilder[str] = FetchSessionBuilder(max_partitions=1)
    session: LeaderSession[str] = LeaderSession(session_id=1, replica_id=2)
    leader_end, offset = 0, 0
    now = 0.0
    for kind, value in events:
        now += 100
        if kind == "append":
            leader_end += value
            session.mark("p")
            assert lazy.caught_up_ms() == every.last_caught_up_ms
            continue
        offset = offset + (leader_end - offset) * value // 100
        every.on_fetch(offset, leader_end, now)
        full = builder.needs_full
        plan = builder.full({"p": _at(offset)}) if full else builder.incremental({"p": _at(offset)})
        assert builder.on_reply(plan, session_id=session.session_id, error_code=0)
        listed, _ = session.update(plan.partitions, plan.forgotten)
        for key in listed if full else session.to_check(listed):
            lazy.on_fetch(offset, leader_end, now, session=session.clock)
            if offset < leader_end:
                session.keep_checking(key)
        session.clock.last_fetch_ms = now
        assert lazy.caught_up_ms() == every.last_caught_up_ms
        assert lazy.end_offset == every.end_offset


def test_a_caught_up_idle_follower_stays_in_the_isr_and_a_silent_one_leaves() -> None:
    clock = SessionClock()
    progress = FollowerProgress(last_caught_up_ms=0)
    progress.on_fetch(10, 10, now_ms=0, session=clock)  # the full request: caught up
    for now in range(500, 60_000, 500):  # idle requests never list the partition
        clock.last_fetch_ms = now
        assert isr_to_shrink((1, 2), 1, {2: progress}, now_ms=now, lag_time_max_ms=30_000) == set()
    # The follower stops fetching (its session's clock stops): it leaves after the allowed lag.
    assert isr_to_shrink((1, 2), 1, {2: progress}, now_ms=59_500 + 30_001, lag_time_max_ms=30_000) == {2}
    # Forgotten: it no longer counts the session's requests.
    progress.detach()
    clock.last_fetch_ms = 100_000
    assert progress.caught_up_ms() == 59_500
