"""Divergence handling on real partition logs: fetch rounds through the same functions the replica
manager (the leader's check) and the fetcher (the follower's truncation) call, until the
follower's log is a prefix of the leader's."""

from __future__ import annotations

from pathlib import Path

from jbod_agent.replication import divergence
from jbod_agent.storage.partition_log import PartitionLog
from tests.agent.support import append_records


def _log(path: Path) -> PartitionLog:
    path.mkdir()
    return PartitionLog.open(path)


def _converge(leader: PartitionLog, follower: PartitionLog) -> int:
    """Run fetch rounds as the fetcher does; returns how many truncations it took."""
    rounds = 0
    while True:
        diverging = divergence.leader_check(
            leader, fetch_offset=follower.end_offset, last_fetched_epoch=follower.latest_epoch
        )
        if diverging is None:
            break
        rounds += 1
        assert rounds < 10, "divergence never resolves"
        assert divergence.truncate_follower(follower, diverging) == follower.end_offset
    if follower.end_offset < leader.end_offset:
        follower.append_replicated(leader.read(follower.end_offset, 1 << 20))
    return rounds


def _values(log: PartitionLog) -> list[bytes]:
    from jbod_kafka.record_batch import decode_records, iter_headers

    data = log.read(log.log_start_offset, 1 << 20) if log.end_offset > log.log_start_offset else b""
    out = []
    for header in iter_headers(data):
        out += [r.value or b"" for r in decode_records(data[header.position : header.position + header.size])]
    return out


def test_follower_drops_an_unacknowledged_suffix_of_an_old_epoch(tmp_path: Path) -> None:
    old_leader = _log(tmp_path / "a")
    new_leader = _log(tmp_path / "b")
    for log in (old_leader, new_leader):
        append_records(log, [(None, b"committed")], leader_epoch=0)
    append_records(old_leader, [(None, b"lost-1"), (None, b"lost-2")], leader_epoch=0)
    new_leader.assign_epoch_start(1)
    append_records(new_leader, [(None, b"new-1")], leader_epoch=1)
    assert _converge(new_leader, old_leader) == 1
    assert _values(old_leader) == [b"committed", b"new-1"]


def test_an_epoch_led_without_writes_does_not_make_the_follower_diverge_forever(tmp_path: Path) -> None:
    leader = _log(tmp_path / "a")
    follower = _log(tmp_path / "b")
    for log in (leader, follower):
        append_records(log, [(None, b"x")], leader_epoch=0)
    follower.assign_epoch_start(1)  # led briefly at epoch 1, wrote nothing
    leader.assign_epoch_start(2)
    append_records(leader, [(None, b"y")], leader_epoch=2)
    assert _converge(leader, follower) == 1
    assert follower.latest_epoch == 2 and _values(follower) == [b"x", b"y"]
