"""Transactional offset commits (`jbod_core.txn_offsets`): TxnOffsetCommit's validation, then a
model test: random interleavings of plain commits, offset tombstones, transactional commits of
several producers and their COMMIT/ABORT markers, applied as the live coordinator does (the pure
functions), checked against a direct reference of Kafka's rules, and against a reload of the same
log (`LogScan`, `GroupLoader`, `loaded_pending`): the same committed and pending offsets."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

import pytest

from jbod_core import group_records, groups, txn_offsets
from jbod_core.group_records import OffsetCommitValue
from jbod_core.groups import CommittedOffset, Group, GroupError, GroupState, Member, Now, OffsetToCommit
from jbod_core.txn_offsets import OffsetKey, PendingOffsets, TxnCommitRequest

NOW = Now(1000, 1_700_000_000_000)
SETTINGS = groups.GroupSettings()


def _request(
    *, generation: int = -1, member_id: str = "", instance_id: str | None = None, metadata: str = ""
) -> TxnCommitRequest:
    return TxnCommitRequest(
        "txn",
        "g",
        7,
        0,
        generation,
        member_id,
        instance_id,
        (OffsetToCommit("t", 0, 5, -1, metadata), OffsetToCommit("t", 1, 9, 3, None)),
    )


def _member(member_id: str, instance_id: str | None = None) -> Member:
    return Member(
        member_id=member_id,
        instance_id=instance_id,
        client_id="c",
        client_host="/127.0.0.1",
        rebalance_timeout_ms=1000,
        session_timeout_ms=1000,
        protocol_type="consumer",
        protocols=(),
    )


STABLE = Group(
    "g",
    state=GroupState.STABLE,
    generation=4,
    protocol_type="consumer",
    members={"m1": _member("m1"), "s1": _member("s1", "i1")},
)


@pytest.mark.parametrize(
    ("group", "request_", "expected"),
    [
        (None, _request(), GroupError.NONE),  # a simple group: nothing kept until committed
        (None, _request(generation=1, member_id="m1"), GroupError.ILLEGAL_GENERATION),
        (Group("g"), _request(), GroupError.NONE),
        (STABLE, _request(), GroupError.NONE),  # a producer that is no member
        (STABLE, _request(generation=4, member_id="m1"), GroupError.NONE),
        (STABLE, _request(generation=3, member_id="m1"), GroupError.ILLEGAL_GENERATION),
        (STABLE, _request(generation=4, member_id="nope"), GroupError.UNKNOWN_MEMBER_ID),
        (STABLE, _request(generation=4, member_id="other", instance_id="i1"), GroupError.FENCED_INSTANCE_ID),
        (STABLE, _request(generation=-1, member_id="m1"), GroupError.ILLEGAL_GENERATION),
        # A rebalance in progress is no error for a transactional commit (Kafka's isTransactional).
        (
            Group("g", state=GroupState.COMPLETING_REBALANCE, generation=4, members={"m1": _member("m1")}),
            _request(generation=4, member_id="m1"),
            GroupError.NONE,
        ),
    ],
)
def test_txn_commit_validation(group: Group | None, request_: TxnCommitRequest, expected: GroupError) -> None:
    decision = txn_offsets.txn_commit(group, request_, now=NOW, settings=SETTINGS)
    assert decision.answer == (expected, expected)
    assert bool(decision.records) == (expected is GroupError.NONE)


def test_txn_commit_records_and_metadata_too_large() -> None:
    too_long = "x" * (SETTINGS.offset_metadata_max_bytes + 1)
    decision = txn_offsets.txn_commit(None, _request(metadata=too_long), now=NOW, settings=SETTINGS)
    assert decision.answer == (GroupError.OFFSET_METADATA_TOO_LARGE, GroupError.NONE)
    assert decision.records == (
        group_records.offset_commit("g", "t", 1, OffsetCommitValue(9, 3, "", NOW.wall_ms)),
    )
    assert decision.pending == ((("g", "t", 1), CommittedOffset(9, 3, "", NOW.wall_ms)),)
    empty = replace(_request(), group_id="")
    assert txn_offsets.txn_commit(None, empty, now=NOW, settings=SETTINGS).answer == (
        GroupError.INVALID_GROUP_ID,
        GroupError.INVALID_GROUP_ID,
    )


def test_a_plain_commit_during_the_transaction_wins_over_its_offset() -> None:
    """Kafka keeps the most recent record: a plain commit written after the transactional one
    stays committed when the transaction commits; one written before is replaced."""
    key: OffsetKey = ("g", "t", 0)
    state = txn_offsets.add_pending(
        PendingOffsets(), 7, [(key, CommittedOffset(5, -1, "", 1))], first_record_offset=10
    )
    assert txn_offsets.has_pending(state, "g", "t", 0)
    assert not txn_offsets.has_pending(state, "g", "t", 1)
    plain = group_records.offset_commit("g", "t", 0, OffsetCommitValue(8, -1, "", 2))
    after_plain = txn_offsets.replay_committed(state, [(plain, 11)])
    committed_groups = {"g": Group("g", offsets={("t", 0): CommittedOffset(8, -1, "", 2)})}
    outcome = txn_offsets.end_transaction(after_plain, committed_groups, 7, committed=True)
    assert outcome.groups == {}
    assert not txn_offsets.has_pending(outcome.pending, "g", "t", 0)
    before_plain = txn_offsets.replay_committed(PendingOffsets(), [(plain, 9)])
    before_plain = txn_offsets.add_pending(
        before_plain, 7, [(key, CommittedOffset(5, -1, "", 1))], first_record_offset=10
    )
    outcome = txn_offsets.end_transaction(before_plain, committed_groups, 7, committed=True)
    assert outcome.groups["g"].offsets == {("t", 0): CommittedOffset(5, -1, "", 1)}
    aborted = txn_offsets.end_transaction(before_plain, committed_groups, 7, committed=False)
    assert aborted.groups == {} and aborted.pending.by_producer == {}


# --- The model test ----------------------------------------------------------------------------

KEYS: tuple[OffsetKey, ...] = (("g1", "t", 0), ("g1", "t", 1), ("g2", "t", 0), ("g2", "u", 3))
PRODUCERS = (11, 12, 13)


@dataclass
class _Reference:
    """Kafka's rules, directly: committed offsets and pending ones with their record offsets."""

    committed: dict[OffsetKey, tuple[int, int]]  # key -> (offset, record offset)
    pending: dict[int, dict[OffsetKey, tuple[int, int]]]

    def plain(self, key: OffsetKey, value: int | None, at: int) -> None:
        if value is not None:
            self.committed[key] = (value, at)
            return
        self.committed.pop(key, None)
        for mine in self.pending.values():
            mine.pop(key, None)

    def txn(self, producer_id: int, key: OffsetKey, value: int, at: int) -> None:
        self.pending.setdefault(producer_id, {})[key] = (value, at)

    def marker(self, producer_id: int, committed: bool) -> None:
        mine = self.pending.pop(producer_id, {})
        if committed:
            for key, (value, at) in mine.items():
                if key not in self.committed or at > self.committed[key][1]:
                    self.committed[key] = (value, at)


def _committed(groups_: dict[str, Group]) -> dict[OffsetKey, int]:
    return {(g, t, p): o.offset for g, group in groups_.items() for (t, p), o in group.offsets.items()}


def _pending(state: PendingOffsets) -> dict[int, dict[OffsetKey, int]]:
    return {
        pid: {key: entry.offset.offset for key, entry in mine.items()}
        for pid, mine in state.by_producer.items()
        if mine
    }


def _run(seed: int) -> None:
    rng = random.Random(seed)
    reference = _Reference({}, {})
    live_groups: dict[str, Group] = {}
    live = PendingOffsets()
    log: list[tuple[str, object]] = []  # ("record", (key, value, offset, pid)) / ("marker", (pid, committed))
    offset = 0
    for _step in range(rng.randrange(1, 40)):
        roll = rng.random()
        if roll < 0.3:
            key = rng.choice(KEYS)
            value = None if rng.random() < 0.25 else rng.randrange(1000)
            record = group_records.offset_commit(
                *key, None if value is None else OffsetCommitValue(value, -1, "", 0)
            )
            reference.plain(key, value, offset)
            group = live_groups.get(key[0]) or Group(key[0])
            offsets = dict(group.offsets)
            if value is None:
                offsets.pop(key[1:], None)
            else:
                offsets[key[1:]] = CommittedOffset(value, -1, "", 0)
            live_groups[key[0]] = Group(key[0], offsets=offsets)
            live = txn_offsets.replay_committed(live, [(record, offset)])
            log.append(("record", (key, value, offset, None)))
            offset += 1
        elif roll < 0.7:
            producer_id = rng.choice(PRODUCERS)
            chosen = rng.sample(KEYS, rng.randrange(1, 3))
            entries = [(key, CommittedOffset(rng.randrange(1000), -1, "", 0)) for key in chosen]
            for i, (key, committed) in enumerate(entries):
                reference.txn(producer_id, key, committed.offset, offset + i)
                log.append(("record", (key, committed.offset, offset + i, producer_id)))
            live = txn_offsets.add_pending(live, producer_id, entries, first_record_offset=offset)
            offset += len(entries)
        else:
            producer_id = rng.choice(PRODUCERS)
            committed_ = rng.random() < 0.6
            reference.marker(producer_id, committed_)
            outcome = txn_offsets.end_transaction(live, live_groups, producer_id, committed=committed_)
            live = outcome.pending
            live_groups.update(outcome.groups)
            log.append(("marker", (producer_id, committed_)))
            offset += 1
        assert _committed(live_groups) == {k: v for k, (v, _at) in reference.committed.items()}
        assert _pending(live) == {
            pid: {k: v for k, (v, _at) in mine.items()} for pid, mine in reference.pending.items() if mine
        }
    # Reload the log as the coordinator does.
    scan = txn_offsets.LogScan()
    for kind, entry in log:
        if kind == "marker":
            pid, committed_ = entry  # type: ignore[misc]
            scan.marker(pid, committed=committed_)
            continue
        key, value, at, pid = entry  # type: ignore[misc]
        record = group_records.offset_commit(
            *key, None if value is None else OffsetCommitValue(value, -1, "", 0)
        )
        raw_key, raw_value = group_records.encode(record)
        scan.record(raw_key, raw_value, at, producer_id=pid)
    loader = groups.GroupLoader()
    for raw_key, (_at, raw_value) in sorted(scan.latest.items(), key=lambda item: item[1][0]):
        decoded = group_records.decode(raw_key, raw_value)
        assert decoded is not None
        loader.replay(decoded)
    open_records = {
        pid: {
            (d.key.group, d.key.topic, d.key.partition): (
                at,
                None if d.value is None else CommittedOffset(d.value.offset, -1, "", 0),  # type: ignore[union-attr]
            )
            for raw_key, (at, raw_value) in mine.items()
            if (d := group_records.decode(raw_key, raw_value)) is not None
            and isinstance(d.key, group_records.OffsetCommitKey)
        }
        for pid, mine in scan.open.items()
    }
    loaded = txn_offsets.loaded_pending(scan.latest, open_records)
    assert _committed(loader.groups(now=NOW)) == _committed(live_groups)
    assert _pending(loaded) == _pending(live)
    # What the loaded state does next is what the live one does: commit every open transaction.
    loaded_groups = loader.groups(now=NOW)
    for producer_id in PRODUCERS:
        reference.marker(producer_id, True)
        live_out = txn_offsets.end_transaction(live, live_groups, producer_id, committed=True)
        live, live_groups = live_out.pending, {**live_groups, **live_out.groups}
        loaded_out = txn_offsets.end_transaction(loaded, loaded_groups, producer_id, committed=True)
        loaded, loaded_groups = loaded_out.pending, {**loaded_groups, **loaded_out.groups}
    expected = {k: v for k, (v, _at) in reference.committed.items()}
    assert _committed(live_groups) == expected
    assert _committed(loaded_groups) == expected


def test_model_live_reference_and_reload_agree() -> None:
    for seed in range(400):
        _run(seed)


def test_an_offset_with_a_pending_transactional_offset_does_not_expire() -> None:
    """As Kafka's cleanupExpiredOffsets: not that partition's offset, and not the group while a
    transaction of it is open."""
    old = CommittedOffset(1, -1, "", 0)
    group = Group("g", offsets={("t", 0): old, ("t", 1): old})
    state = txn_offsets.add_pending(PendingOffsets(), 7, [(("g", "t", 0), old)], first_record_offset=5)
    pending = txn_offsets.pending_partitions(state, "g")
    assert pending == {("t", 0)}
    decision = groups.expire_offsets(group, now=NOW, retention_ms=1, pending=pending)
    assert decision.group is not None and dict(decision.group.offsets) == {("t", 0): old}
    assert decision.records == (group_records.offset_commit("g", "t", 1, None),)
    only_pending = groups.expire_offsets(Group("g"), now=NOW, retention_ms=1, pending=pending)
    assert only_pending.group == Group("g") and only_pending.records == ()


def test_deleting_a_group_or_its_offsets_tombstones_pending_partitions_too() -> None:
    """As Kafka's deleteAllOffsets and deleteOffsets: a partition with only a pending offset gets a
    tombstone, which drops the pending offset when written (`replay_committed`)."""
    old = CommittedOffset(1, -1, "", 0)
    group = Group("g", offsets={("t", 0): old})
    state = txn_offsets.add_pending(
        PendingOffsets(), 7, [(("g", "t", 0), old), (("g", "t", 1), old)], first_record_offset=5
    )
    pending = txn_offsets.pending_partitions(state, "g")
    deleted = groups.delete(group, now=NOW, settings=SETTINGS, pending=pending)
    tombstones = (
        group_records.offset_commit("g", "t", 0, None),
        group_records.offset_commit("g", "t", 1, None),
    )
    assert deleted.answer is GroupError.NONE and deleted.group is None
    assert deleted.records == (*tombstones, group_records.group_metadata("g", None))
    offsets_deleted = groups.delete_offsets(
        group, [("t", [0, 1, 2])], now=NOW, settings=SETTINGS, pending=pending
    )
    assert offsets_deleted.records == tombstones
    after = txn_offsets.replay_committed(state, zip(tombstones, (8, 9), strict=True))
    assert after.by_producer == {}
    assert txn_offsets.end_transaction(after, {}, 7, committed=True).groups == {}
