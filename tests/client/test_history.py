"""The shared history checker (pure): what counts as lost, moved, reordered, duplicated, unknown."""

from __future__ import annotations

from jbod_client.history import History, make_value, record_id


def _history(sends: list[tuple[str, int, int]]) -> History:
    """(run, sequence, partition) sends to topic `t`."""
    history = History()
    for run, seq, partition in sends:
        history.on_send((run, seq), "t", partition)
    return history


def _read(*rows: tuple[int, int, str, int]) -> list[tuple[str, int, int, bytes]]:
    """(partition, offset, run, sequence) rows read from topic `t`."""
    return [("t", p, o, make_value(run, seq, size=32)) for p, o, run, seq in rows]


def test_values_carry_their_identity() -> None:
    value = make_value("r", 17)
    assert len(value) == 1024 and record_id(value) == ("r", 17)
    assert record_id(b"hello") is None and record_id(None) is None and record_id(b"jbod:r:x:") is None


def test_a_clean_read_is_ok_and_rereading_an_offset_is_not_a_duplicate() -> None:
    history = _history([("r", 0, 0), ("r", 1, 0), ("r", 2, 1)])
    for seq, offset in ((0, 0), (1, 1), (2, 0)):
        history.on_ack(("r", seq), offset)
    report = history.check(_read((0, 0, "r", 0), (0, 1, "r", 1), (1, 0, "r", 2), (0, 1, "r", 1)))
    assert report.ok and report.problems() == []
    assert (report.acknowledged, report.consumed, report.unique) == (3, 3, 3)


def test_lost_moved_reordered_and_unknown_records_are_reported() -> None:
    history = _history([("r", 0, 0), ("r", 1, 0), ("r", 2, 0)])
    for seq in range(3):
        history.on_ack(("r", seq), seq)
    lost = history.check(_read((0, 0, "r", 0), (0, 1, "r", 1)))
    assert lost.missing == [("r", 2)] and not lost.ok
    moved = history.check(_read((0, 0, "r", 0), (0, 1, "r", 1), (0, 5, "r", 2)))
    assert moved.moved == [(("r", 2), 2)] and not moved.ok
    reordered = History()
    for seq in range(3):
        reordered.on_send(("r", seq), "t", 0)
    for seq, offset in ((0, 0), (1, 2), (2, 1)):
        reordered.on_ack(("r", seq), offset)
    assert reordered.check(_read((0, 0, "r", 0), (0, 2, "r", 1), (0, 1, "r", 2))).reordered == [
        ("t", 0, 2, ("r", 1))
    ]
    unknown = history.check([("t", 0, 0, b"garbage"), ("t", 1, 0, make_value("r", 0, size=32))])
    assert unknown.unknown == [("t", 0, 0), ("t", 1, 0)] and not unknown.ok  # wrong partition counts too


def test_every_extra_copy_is_a_duplicate() -> None:
    history = _history([("r", 0, 0), ("r", 1, 0), ("r", 2, 0)])
    for seq, offset in ((0, 0), (1, 3), (2, 4)):
        history.on_ack(("r", seq), offset)
    rows = _read((0, 0, "r", 0), (0, 1, "r", 1), (0, 2, "r", 2), (0, 3, "r", 1), (0, 4, "r", 2))
    report = history.check(rows)  # an idempotent producer's run: no retry excuses a copy
    assert report.duplicated == [("r", 1), ("r", 2)] and report.duplicates == 2
    assert not report.ok


def test_unacknowledged_records_carry_no_order_promise() -> None:
    history = _history([("r", 0, 0), ("r", 1, 0)])
    history.on_failure(("r", 0), 7)  # abandoned in transit, landed after the next batch
    history.on_ack(("r", 1), 0)
    assert history.check(_read((0, 0, "r", 1), (0, 1, "r", 0))).ok
