"""Kafka's classic group protocol (`jbod_core.groups`): every decision's exact answer, deliveries
and records, then the records replayed (`GroupLoader`) into the group's durable part.

Time is a plain millisecond counter (`at(ms)`); member ids are given; nothing here waits."""

from __future__ import annotations

import struct
from dataclasses import replace

import pytest

from jbod_core import group_records, groups
from jbod_core.group_records import GroupMetadataValue, MemberMetadata, OffsetCommitValue
from jbod_core.groups import (
    Delivery,
    Group,
    GroupError,
    GroupState,
    JoinAnswer,
    JoinedMember,
    LeavingMember,
    Now,
    Protocol,
    SyncAnswer,
)

SETTINGS = groups.GroupSettings(initial_rebalance_delay_ms=3000)
WALL = 1_700_000_000_000
SESSION = 10_000
REBALANCE = 60_000
GID = "g"


def at(ms: int) -> Now:
    return Now(ms, WALL + ms)


def subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, null user data."""
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return out + struct.pack(">i", -1)


RANGE = (Protocol("range", subscription("t")),)


def join_request(
    member_id: str = "",
    *,
    instance: str | None = None,
    protocols: tuple[Protocol, ...] = RANGE,
    version: int = 9,
    session: int = SESSION,
) -> groups.JoinRequest:
    return groups.JoinRequest(
        group_id=GID,
        member_id=member_id,
        instance_id=instance,
        protocol_type="consumer",
        protocols=protocols,
        session_timeout_ms=session,
        rebalance_timeout_ms=REBALANCE,
        client_id="client",
        client_host="/127.0.0.1",
        api_version=version,
    )


def join(
    group: Group | None, request: groups.JoinRequest, ms: int, new_id: str = ""
) -> groups.GroupDecision[JoinAnswer]:
    return groups.join(group, request, now=at(ms), member_id=new_id, settings=SETTINGS)


def sync(
    group: Group | None,
    member_id: str,
    generation: int,
    ms: int,
    assignments: dict[str, bytes] | None = None,
    *,
    instance: str | None = None,
) -> groups.GroupDecision[SyncAnswer]:
    request = groups.SyncRequest(GID, member_id, instance, generation, "consumer", "range", assignments or {})
    return groups.sync(group, request, now=at(ms), settings=SETTINGS)


def heartbeat(
    group: Group | None, member_id: str, generation: int, ms: int, instance: str | None = None
) -> GroupError:
    decision = groups.heartbeat(
        group, groups.HeartbeatRequest(GID, member_id, instance, generation), now=at(ms), settings=SETTINGS
    )
    assert decision.answer is not None
    return decision.answer


def tick(group: Group, ms: int) -> groups.GroupDecision[None]:
    return groups.tick(group, now=at(ms), settings=SETTINGS)


def generation_answer(
    member_id: str, generation: int, leader: str, members: tuple[JoinedMember, ...] = ()
) -> JoinAnswer:
    return JoinAnswer(GroupError.NONE, member_id, generation, "consumer", "range", leader, members)


def joined(*member_ids: str) -> tuple[JoinedMember, ...]:
    return tuple(JoinedMember(m, None, RANGE[0].metadata) for m in member_ids)


def loaded(*decisions: groups.GroupDecision[object], ms: int = 0) -> dict[str, Group]:
    loader = groups.GroupLoader()
    for decision in decisions:
        for record in decision.records:
            loader.replay(record)
    return loader.groups(now=at(ms))


def settled_at(members: int) -> int:
    """When the initial rebalance of `members` joining at 0 ends: each joining during the delay
    extends it once (by the delay) — two delays for two members or more."""
    return 3000 if members == 1 else 6000


def end_initial_rebalance(group: Group | None) -> Group:
    """Tick through the initial rebalance's delays (one more per member that joined during one)."""
    assert group is not None
    while group.state is GroupState.PREPARING_REBALANCE:
        deadline = groups.next_deadline(group)
        assert deadline is not None
        group = tick(group, deadline).group
        assert group is not None
    assert group.state is GroupState.COMPLETING_REBALANCE
    return group


def stable_group(*member_ids: str, ms: int = 0) -> Group:
    """A Stable group of `member_ids` (the first the leader), generation 1, each assigned its id."""
    group: Group | None = None
    for member_id in member_ids:
        decision = join(group, join_request(version=3), ms, new_id=member_id)
        group = decision.group
    assert group is not None
    group = end_initial_rebalance(group)
    assignments = {m: m.encode() for m in member_ids}
    leader = sync(group, member_ids[0], 1, settled_at(len(member_ids)), assignments).group
    assert leader is not None and leader.state is GroupState.STABLE
    return leader


# --- JoinGroup ---------------------------------------------------------------------------------


def test_a_new_member_v4_gets_member_id_required_and_a_pending_session() -> None:
    decision = join(None, join_request(), 0, new_id="client-1")
    assert decision.answer == JoinAnswer(GroupError.MEMBER_ID_REQUIRED, "client-1")
    assert decision.records == () and decision.parked is None
    assert decision.group is not None and decision.group.pending_members == {"client-1": SESSION}
    assert decision.group.state is GroupState.EMPTY


def test_a_pending_member_that_never_rejoins_is_forgotten() -> None:
    group = join(None, join_request(), 0, new_id="client-1").group
    assert group is not None and groups.next_deadline(group) == SESSION
    assert tick(group, SESSION - 1).group == group
    assert tick(group, SESSION).group is None  # nothing left: the group is not kept


def test_first_rebalance_waits_the_initial_delay_then_answers_every_member() -> None:
    first = join(None, join_request(), 0, new_id="a")
    a = join(first.group, join_request("a"), 10)
    assert a.answer is None and a.parked == "a" and a.deliveries == ()
    assert a.group is not None and a.group.state is GroupState.PREPARING_REBALANCE
    assert a.group.join_deadline_ms == 10 + 3000
    b = join(join(a.group, join_request(), 20, new_id="b").group, join_request("b"), 30)
    assert b.parked == "b" and b.deliveries == ()
    assert b.group is not None and b.group.initial_rebalance == groups.InitialRebalance(3000, 57_000, True)
    # The delay ends with a new member added: one more delay (Kafka's tryCompleteInitialRebalance).
    extended = tick(b.group, 3010)
    assert extended.deliveries == () and extended.group is not None
    assert extended.group.join_deadline_ms == 6010
    done = tick(extended.group, 6010)
    assert done.records == ()
    assert done.deliveries == (
        Delivery("a", generation_answer("a", 1, "a", joined("a", "b"))),
        Delivery("b", generation_answer("b", 1, "a")),
    )
    group = done.group
    assert group is not None and group.state is GroupState.COMPLETING_REBALANCE and group.generation == 1
    assert group.pending_sync == {"a", "b"} and group.sync_deadline_ms == 6010 + REBALANCE
    assert {m.heartbeat_deadline_ms for m in group.members.values()} == {6010 + SESSION}


def test_the_leaders_sync_stores_the_assignments_and_answers_every_waiting_member() -> None:
    group = join(None, join_request(version=3), 0, new_id="a").group
    group = join(group, join_request(version=3), 0, new_id="b").group
    assert group is not None
    group = end_initial_rebalance(group)
    follower = sync(group, "b", 1, 6100)
    assert follower.parked == "b" and follower.answer is None and follower.records == ()
    leader = sync(follower.group, "a", 1, 6200, {"a": b"A", "b": b"B", "stranger": b"?"})
    assert leader.parked == "a"
    assert leader.records == (
        group_records.group_metadata(
            GID,
            GroupMetadataValue(
                "consumer",
                1,
                "range",
                "a",
                WALL + 6000,  # the CompletingRebalance transition
                (
                    MemberMetadata(
                        "a", None, "client", "/127.0.0.1", REBALANCE, SESSION, RANGE[0].metadata, b"A"
                    ),
                    MemberMetadata(
                        "b", None, "client", "/127.0.0.1", REBALANCE, SESSION, RANGE[0].metadata, b"B"
                    ),
                ),
            ),
        ),
    )
    assert leader.deliveries == (
        Delivery("a", SyncAnswer(GroupError.NONE, "consumer", "range", b"A")),
        Delivery("b", SyncAnswer(GroupError.NONE, "consumer", "range", b"B")),
    )
    stable = leader.group
    assert stable is not None and stable.state is GroupState.STABLE and stable.sync_deadline_ms is None
    # Replayed, the records give the group as a new coordinator loads it: Stable, same members.
    reloaded = loaded(leader, ms=9000)[GID]
    assert reloaded.state is GroupState.STABLE and reloaded.generation == 1 and reloaded.leader_id == "a"
    assert {m: (x.assignment, x.heartbeat_deadline_ms) for m, x in reloaded.members.items()} == {
        "a": (b"A", 9000 + SESSION),
        "b": (b"B", 9000 + SESSION),
    }


def test_a_stable_member_syncing_late_gets_its_assignment_at_once() -> None:
    group = stable_group("a", "b")
    decision = sync(group, "b", 1, 4000)
    assert decision.answer == SyncAnswer(GroupError.NONE, "consumer", "range", b"b")


def test_a_rejoining_follower_with_the_same_metadata_gets_the_generation_again() -> None:
    group = stable_group("a", "b")
    decision = join(group, join_request("b"), 5000)
    assert decision.answer == generation_answer("b", 1, "a")
    assert decision.group == group


def test_the_leader_rejoining_a_stable_group_starts_a_rebalance() -> None:
    group = stable_group("a", "b")
    decision = join(group, join_request("a"), 5000)
    assert decision.parked == "a"
    assert decision.group is not None and decision.group.state is GroupState.PREPARING_REBALANCE
    assert heartbeat(decision.group, "b", 1, 5100) == GroupError.REBALANCE_IN_PROGRESS
    done = join(decision.group, join_request("b"), 5200)
    assert done.deliveries == (
        Delivery("a", generation_answer("a", 2, "a", joined("a", "b"))),
        Delivery("b", generation_answer("b", 2, "a")),
    )


def test_a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_dropped() -> None:
    group = stable_group("a", "b")
    preparing = join(group, join_request("a"), 5000).group
    assert preparing is not None and preparing.join_deadline_ms == 5000 + REBALANCE
    done = tick(preparing, 5000 + REBALANCE)
    assert done.deliveries == (Delivery("a", generation_answer("a", 2, "a", joined("a"))),)
    assert done.group is not None and list(done.group.members) == ["a"]


def test_the_protocol_is_one_every_member_supports() -> None:
    both = (Protocol("cooperative-sticky", b"c"), Protocol("range", b"r"))
    group = join(None, join_request(protocols=both, version=3), 0, new_id="a").group
    refused = join(group, join_request(protocols=(Protocol("roundrobin", b"x"),), version=3), 0, new_id="x")
    assert refused.answer == JoinAnswer(GroupError.INCONSISTENT_GROUP_PROTOCOL, "")
    group = join(group, join_request(protocols=(Protocol("range", b"r2"),), version=3), 0, new_id="b").group
    assert group is not None
    done = tick(tick(group, 3000).group, 6000)  # type: ignore[arg-type]
    assert done.group is not None and done.group.protocol_name == "range"
    assert done.deliveries[0].answer == JoinAnswer(
        GroupError.NONE, "a", 1, "consumer", "range", "a",
        (JoinedMember("a", None, b"r"), JoinedMember("b", None, b"r2")),
    )  # fmt: skip


# --- Heartbeat, sessions and LeaveGroup ----------------------------------------------------------


def test_heartbeat_errors() -> None:
    group = stable_group("a", "b")
    assert heartbeat(group, "a", 1, 4000) == GroupError.NONE
    assert heartbeat(group, "nobody", 1, 4000) == GroupError.UNKNOWN_MEMBER_ID
    assert heartbeat(group, "a", 0, 4000) == GroupError.ILLEGAL_GENERATION
    assert heartbeat(None, "a", 1, 4000) == GroupError.UNKNOWN_MEMBER_ID
    decision = groups.heartbeat(
        group, groups.HeartbeatRequest("", "a", None, 1), now=at(0), settings=SETTINGS
    )
    assert decision.answer == GroupError.INVALID_GROUP_ID


def test_a_heartbeat_moves_the_session_deadline() -> None:
    group = stable_group("a")
    decision = groups.heartbeat(
        group, groups.HeartbeatRequest(GID, "a", None, 1), now=at(8000), settings=SETTINGS
    )
    assert decision.group is not None and decision.group.members["a"].heartbeat_deadline_ms == 8000 + SESSION


def test_a_silent_member_is_removed_after_its_session_timeout_and_the_group_rebalances() -> None:
    group = stable_group("a", "b")
    alive = groups.heartbeat(
        group, groups.HeartbeatRequest(GID, "a", None, 1), now=at(10_000), settings=SETTINGS
    )
    assert alive.group is not None and groups.next_deadline(alive.group) == 6000 + SESSION
    expired = tick(alive.group, 6000 + SESSION)
    after = expired.group
    assert after is not None and list(after.members) == ["a"]
    assert after.state is GroupState.PREPARING_REBALANCE and after.join_deadline_ms == 16_000 + REBALANCE
    done = join(after, join_request("a"), 17_000)
    assert done.deliveries == (Delivery("a", generation_answer("a", 2, "a", joined("a"))),)


def test_a_member_waiting_in_join_group_does_not_time_out() -> None:
    group = stable_group("a", "b")
    preparing = join(group, join_request("a"), 4000).group
    assert preparing is not None
    # b's session ends first: it is removed, a (waiting) stays, and the join completes.
    done = tick(preparing, 6000 + SESSION)
    assert done.group is not None and list(done.group.members) == ["a"]
    assert done.deliveries == (Delivery("a", generation_answer("a", 2, "a", joined("a"))),)


def test_the_last_member_leaving_empties_the_group_with_a_new_generation_record() -> None:
    group = stable_group("a")
    decision = groups.leave(group, GID, [LeavingMember("a", None)], now=at(5000), settings=SETTINGS)
    assert decision.answer == groups.LeaveAnswer(GroupError.NONE, (GroupError.NONE,))
    assert decision.records == (
        group_records.group_metadata(GID, GroupMetadataValue("consumer", 2, None, None, WALL + 5000, ())),
    )
    assert decision.group is not None and decision.group.state is GroupState.EMPTY
    assert loaded(decision)[GID].state is GroupState.EMPTY


def test_leave_in_batches_by_member_or_instance_id() -> None:
    group = stable_group("a", "b")
    group = replace(group, members={**group.members, "b": replace(group.members["b"], instance_id="i-b")})
    decision = groups.leave(
        group,
        GID,
        [LeavingMember("", "i-b"), LeavingMember("ghost", None), LeavingMember("", "unknown")],
        now=at(5000),
        settings=SETTINGS,
    )
    assert decision.answer == groups.LeaveAnswer(
        GroupError.NONE, (GroupError.NONE, GroupError.UNKNOWN_MEMBER_ID, GroupError.UNKNOWN_MEMBER_ID)
    )
    assert decision.group is not None and list(decision.group.members) == ["a"]
    assert decision.group.state is GroupState.PREPARING_REBALANCE
    unknown_group = groups.leave(None, GID, [LeavingMember("a", None)], now=at(0), settings=SETTINGS)
    assert unknown_group.answer == groups.LeaveAnswer(GroupError.NONE, (GroupError.UNKNOWN_MEMBER_ID,))


def test_a_member_that_never_syncs_is_removed_at_the_sync_deadline() -> None:
    group = join(None, join_request(version=3), 0, new_id="a").group
    group = join(group, join_request(version=3), 0, new_id="b").group
    assert group is not None
    completing = end_initial_rebalance(group)
    waiting = sync(completing, "b", 1, 6100)  # the follower waits; the leader never syncs
    assert waiting.group is not None and waiting.group.sync_deadline_ms == 6000 + REBALANCE
    expired = tick(waiting.group, 6000 + REBALANCE)
    assert expired.deliveries == (Delivery("b", SyncAnswer(GroupError.REBALANCE_IN_PROGRESS)),)
    assert expired.group is not None and list(expired.group.members) == ["b"]
    assert expired.group.state is GroupState.PREPARING_REBALANCE


def test_sync_errors() -> None:
    group = stable_group("a", "b")
    assert sync(None, "a", 1, 0).answer == SyncAnswer(GroupError.UNKNOWN_MEMBER_ID)
    assert sync(group, "x", 1, 0).answer == SyncAnswer(GroupError.UNKNOWN_MEMBER_ID)
    assert sync(group, "a", 7, 0).answer == SyncAnswer(GroupError.ILLEGAL_GENERATION)
    preparing = join(group, join_request("a"), 0).group
    assert sync(preparing, "b", 1, 0).answer == SyncAnswer(GroupError.REBALANCE_IN_PROGRESS)
    other = groups.SyncRequest(GID, "a", None, 1, "consumer", "roundrobin", {})
    assert groups.sync(group, other, now=at(0), settings=SETTINGS).answer == SyncAnswer(
        GroupError.INCONSISTENT_GROUP_PROTOCOL
    )


# --- Static membership (KIP-345) ---------------------------------------------------------------


def _static_stable() -> Group:
    group = join(None, join_request(instance="i-a"), 0, new_id="i-a-1").group
    group = join(group, join_request(instance="i-b"), 0, new_id="i-b-1").group
    assert group is not None
    group = end_initial_rebalance(group)
    group = sync(group, "i-a-1", 1, 6000, {"i-a-1": b"A", "i-b-1": b"B"}, instance="i-a").group
    assert group is not None and group.state is GroupState.STABLE
    return group


def test_a_static_member_rejoining_a_stable_group_replaces_its_member_id_without_a_rebalance() -> None:
    group = _static_stable()
    decision = join(group, join_request(instance="i-b"), 9000, new_id="i-b-2")
    assert decision.answer == JoinAnswer(GroupError.NONE, "i-b-2", 1, "consumer", "range", "i-a-1")
    assert decision.parked is None and decision.deliveries == ()
    after = decision.group
    assert after is not None and after.state is GroupState.STABLE and after.generation == 1
    assert list(after.members) == ["i-a-1", "i-b-2"] and after.members["i-b-2"].assignment == b"B"
    [record] = decision.records
    assert record.value is not None and isinstance(record.value, GroupMetadataValue)
    assert [(m.member_id, m.group_instance_id, m.assignment) for m in record.value.members] == [
        ("i-a-1", "i-a", b"A"),
        ("i-b-2", "i-b", b"B"),
    ]
    # The old member id is fenced; the new one goes on with the same generation and assignment.
    assert heartbeat(after, "i-b-1", 1, 9100, instance="i-b") == GroupError.FENCED_INSTANCE_ID
    assert heartbeat(after, "i-b-2", 1, 9100, instance="i-b") == GroupError.NONE
    assert sync(after, "i-b-2", 1, 9100, instance="i-b").answer == SyncAnswer(
        GroupError.NONE, "consumer", "range", b"B"
    )
    assert set(loaded(decision)[GID].members) == {"i-a-1", "i-b-2"}


def test_the_static_leader_rejoining_answers_its_members_and_skips_the_assignment_v9() -> None:
    group = _static_stable()
    decision = join(group, join_request(instance="i-a"), 9000, new_id="i-a-2")
    members = (
        JoinedMember("i-a-2", "i-a", RANGE[0].metadata),
        JoinedMember("i-b-1", "i-b", RANGE[0].metadata),
    )
    assert decision.answer == JoinAnswer(
        GroupError.NONE, "i-a-2", 1, "consumer", "range", "i-a-2", members, True
    )


def test_a_static_member_rejoining_with_another_protocol_rebalances() -> None:
    group = _static_stable()
    both = (Protocol("roundrobin", b"rr"), Protocol("range", RANGE[0].metadata))
    decision = join(group, join_request(instance="i-b", protocols=both), 9000, new_id="i-b-2")
    # range is still every member's common choice: no rebalance.
    assert decision.answer is not None and decision.answer.error is GroupError.NONE
    only_rr = (Protocol("roundrobin", b"rr"),)
    refused = join(group, join_request(instance="i-b", protocols=only_rr), 9000, new_id="i-b-3")
    assert refused.answer == JoinAnswer(GroupError.INCONSISTENT_GROUP_PROTOCOL, "")


def test_a_fenced_static_members_waiting_requests_are_answered_fenced() -> None:
    group = _static_stable()
    waiting = join(group, join_request("i-b-1", instance="i-b", protocols=(Protocol("range", b"new"),)), 9000)
    assert waiting.parked == "i-b-1" and waiting.group is not None
    assert waiting.group.state is GroupState.PREPARING_REBALANCE
    replaced = join(waiting.group, join_request(instance="i-b"), 9100, new_id="i-b-2")
    assert replaced.parked == "i-b-2"
    assert replaced.deliveries[0] == Delivery("i-b-1", JoinAnswer(GroupError.FENCED_INSTANCE_ID, "i-b-1"))


# --- OffsetCommit, OffsetDelete, DeleteGroups --------------------------------------------------


def _commit(
    group: Group | None,
    generation: int,
    member_id: str,
    *offsets: tuple[str, int, int],
    version: int = 9,
    metadata: str | None = None,
) -> groups.GroupDecision[tuple[GroupError, ...]]:
    request = groups.CommitRequest(
        GID, generation, member_id, None,
        tuple(groups.OffsetToCommit(t, p, o, 4, metadata) for t, p, o in offsets), version,
    )  # fmt: skip
    return groups.commit(group, request, now=at(20_000), settings=SETTINGS)


def test_a_member_of_the_current_generation_commits() -> None:
    group = stable_group("a")
    decision = _commit(group, 1, "a", ("t", 0, 10), ("t", 1, 20))
    assert decision.answer == (GroupError.NONE, GroupError.NONE)
    assert decision.records == (
        group_records.offset_commit(GID, "t", 0, OffsetCommitValue(10, 4, "", WALL + 20_000)),
        group_records.offset_commit(GID, "t", 1, OffsetCommitValue(20, 4, "", WALL + 20_000)),
    )
    assert decision.group is not None
    assert decision.group.offsets[("t", 0)] == groups.CommittedOffset(10, 4, "", WALL + 20_000)
    assert decision.group.members["a"].heartbeat_deadline_ms == 20_000 + SESSION  # a commit is a heartbeat
    # The same offset again: answered, nothing written (the log holds it).
    again = _commit(decision.group, 1, "a", ("t", 0, 10), ("t", 1, 21))
    assert again.answer == (GroupError.NONE, GroupError.NONE) and len(again.records) == 1
    assert loaded(decision, again)[GID].offsets == again.group.offsets  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("generation", "member_id", "expected"),
    [
        (0, "a", GroupError.ILLEGAL_GENERATION),
        (1, "x", GroupError.UNKNOWN_MEMBER_ID),
        (-1, "", GroupError.UNKNOWN_MEMBER_ID),  # a standalone commit into a group with members
    ],
)
def test_commits_outside_the_generation_are_refused(
    generation: int, member_id: str, expected: GroupError
) -> None:
    decision = _commit(stable_group("a"), generation, member_id, ("t", 0, 1))
    assert decision.answer == (expected,) and decision.records == ()


def test_a_commit_while_completing_a_rebalance_is_rebalance_in_progress() -> None:
    group = join(None, join_request(version=3), 0, new_id="a").group
    completing = tick(group, 3000).group  # type: ignore[arg-type]
    assert _commit(completing, 1, "a", ("t", 0, 1)).answer == (GroupError.REBALANCE_IN_PROGRESS,)


def test_a_standalone_commit_creates_a_simple_group() -> None:
    decision = _commit(None, -1, "", ("t", 0, 5))
    assert decision.answer == (GroupError.NONE,)
    assert decision.group is not None and decision.group.state is GroupState.EMPTY
    assert decision.group.protocol_type is None
    assert loaded(decision)[GID].offsets == {("t", 0): groups.CommittedOffset(5, 4, "", WALL + 20_000)}


@pytest.mark.parametrize(
    ("version", "expected"), [(8, GroupError.ILLEGAL_GENERATION), (9, GroupError.GROUP_ID_NOT_FOUND)]
)
def test_a_generation_commit_to_an_unknown_group(version: int, expected: GroupError) -> None:
    assert _commit(None, 3, "a", ("t", 0, 5), version=version).answer == (expected,)


def test_too_much_metadata_is_refused_per_partition() -> None:
    decision = _commit(None, -1, "", ("t", 0, 5), metadata="x" * 4097)
    assert decision.answer == (GroupError.OFFSET_METADATA_TOO_LARGE,) and decision.records == ()


def test_delete_groups_only_empty_groups_with_tombstones_for_everything() -> None:
    group = stable_group("a")
    committed = _commit(group, 1, "a", ("t", 0, 10), ("u", 2, 1)).group
    assert groups.delete(committed, now=at(0), settings=SETTINGS).answer == GroupError.NON_EMPTY_GROUP
    empty = groups.leave(committed, GID, [LeavingMember("a", None)], now=at(0), settings=SETTINGS)
    deleted = groups.delete(empty.group, now=at(0), settings=SETTINGS)
    assert deleted.answer == GroupError.NONE and deleted.group is None
    assert deleted.records == (
        group_records.offset_commit(GID, "t", 0, None),
        group_records.offset_commit(GID, "u", 2, None),
        group_records.group_metadata(GID, None),
    )
    assert groups.delete(None, now=at(0), settings=SETTINGS).answer == GroupError.GROUP_ID_NOT_FOUND


def test_offset_delete_refuses_topics_the_members_subscribe_to() -> None:
    group = _commit(stable_group("a"), 1, "a", ("t", 0, 10), ("other", 0, 3)).group
    decision = groups.delete_offsets(group, [("t", [0]), ("other", [0, 1])], now=at(0), settings=SETTINGS)
    assert decision.answer == groups.OffsetDeleteAnswer(
        GroupError.NONE,
        (
            ("t", ((0, GroupError.GROUP_SUBSCRIBED_TO_TOPIC),)),
            ("other", ((0, GroupError.NONE), (1, GroupError.NONE))),
        ),
    )
    assert decision.records == (group_records.offset_commit(GID, "other", 0, None),)
    assert decision.group is not None and set(decision.group.offsets) == {("t", 0)}
    simple = _commit(None, -1, "", ("t", 0, 1)).group
    assert groups.delete_offsets(simple, [("t", [0])], now=at(0), settings=SETTINGS).records == (
        group_records.offset_commit(GID, "t", 0, None),
    )
    assert groups.delete_offsets(None, [], now=at(0), settings=SETTINGS).answer == groups.OffsetDeleteAnswer(
        GroupError.GROUP_ID_NOT_FOUND
    )


# --- Reads and loading -------------------------------------------------------------------------


def test_describe_and_list() -> None:
    group = stable_group("a")
    described = groups.describe(group)
    assert described == groups.Description(
        GroupState.STABLE,
        "consumer",
        "range",
        (groups.DescribedMember("a", None, "client", "/127.0.0.1", RANGE[0].metadata, b"a"),),
    )
    assert groups.describe(None).state is GroupState.DEAD
    assert groups.listed(group, states=[], types=[])
    assert groups.listed(group, states=["stable", "Empty"], types=["Classic"])
    assert not groups.listed(group, states=["empty"], types=[])
    assert not groups.listed(group, states=[], types=["consumer"])


def test_loading_replays_in_log_order_and_tombstones_remove() -> None:
    loader = groups.GroupLoader()
    loader.replay(group_records.offset_commit("x", "t", 0, OffsetCommitValue(1, -1, "", 5)))
    loader.replay(group_records.offset_commit("x", "t", 0, OffsetCommitValue(2, -1, "", 6)))
    loader.replay(group_records.offset_commit("y", "t", 0, OffsetCommitValue(9, -1, "", 7)))
    loader.replay(group_records.offset_commit("y", "t", 0, None))
    loader.replay(group_records.group_metadata("z", GroupMetadataValue("consumer", 3, None, None, 1, ())))
    loader.replay(group_records.group_metadata("gone", GroupMetadataValue("consumer", 1, None, None, 1, ())))
    loader.replay(group_records.group_metadata("gone", None))
    found = loader.groups(now=at(0))
    assert sorted(found) == ["x", "z"]
    assert found["x"].offsets == {("t", 0): groups.CommittedOffset(2, -1, "", 6)}
    assert found["z"].state is GroupState.EMPTY and found["z"].generation == 3


# --- Offsets expiry (offsets.retention.minutes) --------------------------------------------------

RETENTION = 60_000


def expire(group: Group, ms: int) -> groups.GroupDecision[None]:
    return groups.expire_offsets(group, now=at(ms), retention_ms=RETENTION)


def test_a_standalone_groups_offsets_expire_each_after_its_commit() -> None:
    first = _commit(None, -1, "", ("t", 0, 5)).group  # committed at 20 000
    assert first is not None
    later = groups.commit(
        first,
        groups.CommitRequest(GID, -1, "", None, (groups.OffsetToCommit("t", 1, 7, -1, None),), 9),
        now=at(50_000),
        settings=SETTINGS,
    ).group
    assert later is not None
    assert expire(later, 20_000 + RETENTION - 1) == groups.GroupDecision(later)
    decision = expire(later, 20_000 + RETENTION)
    assert decision.records == (group_records.offset_commit(GID, "t", 0, None),)
    assert decision.group is not None and set(decision.group.offsets) == {("t", 1)}
    # The last one expires: the group is removed ("Dead"), its metadata tombstoned.
    gone = expire(decision.group, 50_000 + RETENTION)
    assert gone == groups.GroupDecision(
        None, (group_records.offset_commit(GID, "t", 1, None), group_records.group_metadata(GID, None))
    )
    assert loaded(_commit(None, -1, "", ("t", 0, 5)), decision, gone) == {}


def test_an_empty_groups_offsets_expire_together_after_it_became_empty() -> None:
    committed = _commit(stable_group("a"), 1, "a", ("t", 0, 10), ("other", 0, 3))  # at 20 000
    assert committed.group is not None
    # While Stable, the subscribed topic's offset stays, whatever its age; the other topic's
    # expires after its commit (KIP-211, as Kafka 4.3.1's classic groups).
    stable = expire(committed.group, 20_000 + RETENTION)
    assert stable.records == (group_records.offset_commit(GID, "other", 0, None),)
    assert stable.group is not None and set(stable.group.offsets) == {("t", 0)}
    assert expire(stable.group, 10**9) == groups.GroupDecision(stable.group)
    # Empty from 90 000: its offsets expire from then, not from their commits.
    left = groups.leave(stable.group, GID, [LeavingMember("a", None)], now=at(90_000), settings=SETTINGS)
    assert left.group is not None and left.group.state is GroupState.EMPTY
    assert expire(left.group, 90_000 + RETENTION - 1) == groups.GroupDecision(left.group)
    dead = expire(left.group, 90_000 + RETENTION)
    assert dead == groups.GroupDecision(
        None, (group_records.offset_commit(GID, "t", 0, None), group_records.group_metadata(GID, None))
    )
    # Loaded from its records, the Empty group keeps its state time.
    reloaded = loaded(committed, stable, left)[GID]
    assert reloaded.state_timestamp_ms == WALL + 90_000
    assert expire(reloaded, 90_000 + RETENTION) == dead
    assert loaded(committed, stable, left, dead) == {}


def test_groups_in_a_rebalance_or_with_unknown_subscriptions_keep_their_offsets() -> None:
    new_metadata = join_request("a", version=3, protocols=(Protocol("range", b"?"),))
    for members, state in (("ab", GroupState.PREPARING_REBALANCE), ("a", GroupState.COMPLETING_REBALANCE)):
        group = _commit(stable_group(*members), 1, "a", ("other", 0, 3)).group
        rebalancing = join(group, new_metadata, 30_000).group
        assert rebalancing is not None and rebalancing.state is state
        assert expire(rebalancing, 10**9) == groups.GroupDecision(rebalancing)
    committed = _commit(stable_group("a"), 1, "a", ("other", 0, 3)).group
    assert committed is not None
    unknown = replace(
        committed, members={"a": replace(committed.members["a"], protocols=(Protocol("range", b"?"),))}
    )
    assert expire(unknown, 10**9) == groups.GroupDecision(unknown)
    connect = replace(committed, protocol_type="connect")
    assert expire(connect, 10**9) == groups.GroupDecision(connect)


def test_an_empty_group_without_offsets_is_removed_at_the_first_check() -> None:
    empty = groups.leave(stable_group("a"), GID, [LeavingMember("a", None)], now=at(5000), settings=SETTINGS)
    assert empty.group is not None
    assert expire(empty.group, 5000) == groups.GroupDecision(None, (group_records.group_metadata(GID, None),))
