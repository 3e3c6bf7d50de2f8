"""The on-disk log of one replica (`jbod_agent.storage.partition_log` over `local_log`,
`log_segments` and `epoch_cache`), on real files in tmp dirs.

Covers: an empty replica dir creates no file and holds no fd until the first append; append and
read round trips across many segment rolls; `read` limits (max_bytes, max_offset, at least one
frame, offsets inside frames, out of range); reads through the sparse index from the middle of a
big segment and the index file's exact entries; reopening gives the same state; torn tails (cut
mid-frame, trailing garbage, a flipped byte in the last frame) cut with a WARNING and everything
before intact; damage in a middle segment and gaps between segments refused naming the file;
missing or garbled `.index` files rebuilt; the epoch cache and OffsetsForLeaderEpoch answers as
Kafka gives them, and its checkpoint file; `truncate_to` inside a frame, at a segment boundary
and to the log start; `truncate_fully_and_start_at` across reopen; `append_replicated` refusing
gaps, overlaps, lower epochs and damage without writing; retention by size and by time, never
the active segment nor data at or above the high watermark; `flush` from a thread while
appending; a bounded number of open fds; `partition.metadata` never touched; with root, a full
tmpfs fails an append with ENOSPC leaving the log consistent and a shut-down ext4's EIO propagates
untouched. A hypothesis state
machine checks that random appends, truncations, retention and reopens keep the log equal to a
plain list of records.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import shutil
import struct
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from jbod_agent.storage.epoch_cache import EPOCH_CHECKPOINT
from jbod_agent.storage.local_log import MAX_READ_FDS, OffsetOutOfRangeError
from jbod_agent.storage.partition_log import PartitionLog
from jbod_kafka import record_batch
from jbod_kafka.record_batch import CorruptBatchError
from tests.agent.support import append_records
from tests.fs import loop_ext4, requires_root, tmpfs

METADATA = b"version=0\ntopic_id=AAAAAAAAAAAAAAAAAAAAAQ\n"

Record = tuple[int, bytes | None, bytes]


def replica_dir(parent: Path, name: str = "topic-0") -> Path:
    path = parent / name
    path.mkdir()
    (path / "partition.metadata").write_bytes(METADATA)
    return path


def batch(count: int, *, size: int = 10, tag: int = 0) -> list[tuple[bytes | None, bytes]]:
    return [(None if i % 2 else b"k%d" % i, bytes([(tag + i) % 256]) * size) for i in range(count)]


def all_records(log: PartitionLog) -> list[Record]:
    data = log.read(log.log_start_offset, 1 << 40)
    out: list[Record] = []
    for header in record_batch.iter_headers(data):
        out.extend(
            (r.offset, r.key, r.value or b"")
            for r in record_batch.decode_records(
                memoryview(data)[header.position : header.position + header.size]
            )
        )
    return out


def frames(data: bytes) -> list[record_batch.BatchHeader]:
    return list(record_batch.iter_headers(data))


def files(path: Path) -> list[str]:
    return sorted(os.listdir(path))


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def snapshot(log: PartitionLog) -> tuple[object, ...]:
    return (
        log.log_start_offset,
        log.end_offset,
        log.size_bytes,
        log.latest_epoch,
        log.epoch_entries(),
        all_records(log),
    )


def filled_log(path: Path, *, batches: int = 30, segment_bytes: int = 400, **options: int) -> PartitionLog:
    log = PartitionLog.open(path, segment_bytes=segment_bytes, **options)
    for number in range(batches):
        append_records(log, batch(1 + number % 4, tag=number), leader_epoch=0, timestamp_ms=1000 + number)
    return log


def segment_logs(path: Path) -> list[Path]:
    return sorted(path.glob("*.log"))


def checkpoint_text(entries: list[tuple[int, int]]) -> str:
    """The leader-epoch-checkpoint file holding `entries` (version 0, a count, then one line each)."""
    return f"0\n{len(entries)}\n" + "".join(f"{epoch} {start}\n" for epoch, start in entries)


# -- empty logs --------------------------------------------------------------------------------


def test_an_empty_replica_creates_no_file_and_holds_no_fd(tmp_path: Path) -> None:
    dirs = [replica_dir(tmp_path, f"t-{n}") for n in range(50)]
    before = open_fds()

    logs = [PartitionLog.open(path) for path in dirs]

    assert open_fds() == before
    assert all(files(path) == ["partition.metadata"] for path in dirs)
    log = logs[0]
    assert (log.log_start_offset, log.end_offset, log.high_watermark, log.size_bytes) == (0, 0, 0, 0)
    assert (log.latest_epoch, log.epoch_entries(), log.epoch_end_offset(0)) == (-1, [], (-1, -1))
    assert log.read(0, 100) == b""
    assert log.segment_paths() == []
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1, 100)
    log.truncate_to(0)
    log.flush()
    assert log.apply_retention(10**12) == 0
    assert files(dirs[0]) == ["partition.metadata"]

    assert append_records(log, [(None, b"x")], leader_epoch=0, timestamp_ms=1) == 0

    assert files(dirs[0]) == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        EPOCH_CHECKPOINT,
        "partition.metadata",
    ]
    for each in logs:
        each.close()
    assert open_fds() == before


# -- appending and reading ---------------------------------------------------------------------


def test_append_and_read_across_many_segment_rolls(tmp_path: Path) -> None:
    path = replica_dir(tmp_path)
    log = PartitionLog.open(path, segment_bytes=300, index_interval_bytes=64)
    expected: list[Record] = []
    for number in range(120):
        records = batch(1 + number % 5, size=number % 40, tag=number)
        base = append_records(log, records, leader_epoch=0, timestamp_ms=number)
        assert base == len(expected)
        expected.extend((base + i, key, value) for i, (key, value) in enumerate(records))

    assert log.end_offset == len(expected)
    assert len(segment_logs(path)) > 20
    assert log.size_bytes == sum(p.stat().st_size for p in segment_logs(path))
    assert all_records(log) == expected
    for offset in range(log.end_offset):
        [first, *_rest] = frames(log.read(offset, 1))
        assert first.base_offset <= offset < first.next_offset
    assert len(log.segment_paths()) == 2 * len(segment_logs(path))
    log.close()


def test_a_frame_bigger_than_a_segment_gets_its_own_segment(tmp_path: Path) -> None:
    path = replica_dir(tmp_path)
    log = PartitionLog.open(path, segment_bytes=200)
    append_records(log, batch(1), leader_epoch=0)
    append_records(log, batch(3, size=300), leader_epoch=0)
    append_records(log, batch(1), leader_epoch=0)

    sizes = [p.stat().st_size for p in segment_logs(path)]

    assert [p.name[:20] for p in segment_logs(path)] == [f"{n:020d}" for n in (0, 1, 4)]
    assert sizes[1] > 200 and sizes[0] < 200 and sizes[2] < 200
    assert [offset for offset, _k, _v in all_records(log)] == [0, 1, 2, 3, 4]
    log.close()


def test_read_limits(tmp_path: Path) -> None:
    log = PartitionLog.open(replica_dir(tmp_path), segment_bytes=250)
    for number in range(10):
        append_records(log, batch(3, size=20, tag=number), leader_epoch=0)  # offsets 3n .. 3n+2
    frame_size = len(log.read(0, 1))

    assert [h.base_offset for h in frames(log.read(4, 1))] == [3]  # inside a frame: that frame
    assert [h.base_offset for h in frames(log.read(4, 0))] == [3]  # at least one frame
    assert [h.base_offset for h in frames(log.read(4, 2 * frame_size))] == [3, 6]  # crosses a segment
    assert [h.base_offset for h in frames(log.read(4, 2 * frame_size + 5))] == [3, 6]  # whole frames only
    assert [h.base_offset for h in frames(log.read(0, 1 << 20, max_offset=9))] == [0, 3, 6]
    assert [h.base_offset for h in frames(log.read(0, 1 << 20, max_offset=10))] == [0, 3, 6, 9]
    assert log.read(9, 1 << 20, max_offset=9) == b""
    assert log.read(10, 1 << 20, max_offset=9) == b""
    assert log.read(30, 100) == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(31, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    log.truncate_fully_and_start_at(50)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(49, 100)
    log.close()


def test_reads_from_the_middle_of_a_big_segment_use_the_index(tmp_path: Path) -> None:
    path = replica_dir(tmp_path)
    log = PartitionLog.open(path, index_interval_bytes=500)
    for number in range(400):
        append_records(log, batch(1 + number % 3, size=number % 50, tag=number), leader_epoch=0)
    data = log.read(0, 1 << 30)
    headers = frames(data)

    for offset in (0, 1, 200, 399, 555, log.end_offset - 1):
        got = frames(log.read(offset, 1))
        assert len(got) == 1 and got[0].base_offset <= offset < got[0].next_offset
        expected = next(h for h in headers if h.base_offset <= offset < h.next_offset)
        assert log.read(offset, 1) == data[expected.position : expected.position + expected.size]

    # The index file holds an entry for the first frame and then one per 500 bytes or more (once
    # the entries held in memory are written: they reach the file in batches).
    log.write_index()
    wanted: list[tuple[int, int]] = []
    since = 0
    for header in headers:
        if not wanted or since >= 500:
            wanted.append((header.base_offset, header.position))
            since = 0
        since += header.size
    index = (path / "00000000000000000000.index").read_bytes()
    assert list(struct.iter_unpack(">II", index)) == wanted
    assert len(wanted) > 10
    log.close()


def test_append_as_leader_assigns_offset_and_epoch_and_keeps_the_producers_bytes(tmp_path: Path) -> None:
    log = PartitionLog.open(replica_dir(tmp_path))
    append_records(log, batch(2), leader_epoch=1)
    client_frame = record_batch.encode_batch(0, -1, 77, [(b"a", b"b")])

    assert log.append_as_leader(record_batch.check_produced(client_frame), leader_epoch=3) == 2

    [header] = frames(stored := log.read(2, 100))
    assert (header.base_offset, header.leader_epoch, header.max_timestamp_ms) == (2, 3, 77)
    assert stored[16:] == client_frame[16:]  # all but the base offset and leader epoch stamped
    assert log.epoch_entries() == [(1, 0), (3, 2)]
    with pytest.raises(ValueError, match="epoch"):  # an epoch below the latest
        log.append_as_leader(record_batch.check_produced(client_frame), leader_epoch=2)
    assert log.end_offset == 3
    log.close()


# -- reopening and recovery --------------------------------------------------------------------


def test_reopen_gives_the_same_state(tmp_path: Path) -> None:
    path = replica_dir(tmp_path)
    log = filled_log(path)
    append_records(log, batch(2), leader_epoch=4)
    end = log.end_offset
    before = snapshot(log)
    log.write_index()
    log.flush()
    indexes = {p.name: p.read_bytes() for p in path.glob("*.index")}
    log.close()
    assert {p.name: p.read_bytes() for p in path.glob("*.index")} == indexes  # close wrote nothing new

    reopened = PartitionLog.open(path, segment_bytes=400)

    assert snapshot(reopened) == before
    assert {p.name: p.read_bytes() for p in path.glob("*.index")} == indexes
    assert (path / "partition.metadata").read_bytes() == METADATA
    append_records(reopened, batch(1), leader_epoch=4)
    assert reopened.end_offset == end + 1
    reopened.close()


def test_an_index_behind_its_segment_after_a_kill_is_rebuilt(tmp_path: Path) -> None:
    """The active segment's index entries reach the file in batches; a broker killed in between
    leaves the file behind the segment, and opening the log rebuilds it from the segment."""
    path = replica_dir(tmp_path)
    log = PartitionLog.open(path, index_interval_bytes=100)
    for number in range(30):
        append_records(log, batch(1, size=40, tag=number), leader_epoch=0)
    index = path / "00000000000000000000.index"
    behind = index.read_bytes()
    log.write_index()
    complete = index.read_bytes()
    assert len(behind) < len(complete)  # what a kill -9 before the next batch would leave
    data = log.read(0, 1 << 30)
    index.write_bytes(behind)  # the file as the killed broker left it

    reopened = PartitionLog.open(path, index_interval_bytes=100)
    assert index.read_bytes() == complete
    assert reopened.read(0, 1 << 30) == data
    reopened.close()
    log.close()


def _damage_cut(path: Path, frame_size: int) -> None:
    os.truncate(path, path.stat().st_size - frame_size // 2)


def _damage_garbage(path: Path, frame_size: int) -> None:
    with path.open("ab") as handle:
        handle.write(b"\x00\x00\x01\x00garbage" * 5)


def _damage_flip(path: Path, frame_size: int) -> None:
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x40
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "damage", [_damage_cut, _damage_garbage, _damage_flip], ids=["cut", "garbage", "flip"]
)
def test_a_torn_tail_is_cut_and_everything_before_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: object
) -> None:
    path = replica_dir(tmp_path)
    log = filled_log(path)
    last_frame = frames(log.read(log.end_offset - 1, 1))[0]
    records = all_records(log)
    log.close()
    last_segment = segment_logs(path)[-1]
    size_before_damage = last_segment.stat().st_size
    assert callable(damage)
    damage(last_segment, last_frame.size)
    damaged_size = last_segment.stat().st_size

    with caplog.at_level(logging.WARNING, logger="jbod_agent.log_segments"):
        reopened = PartitionLog.open(path, segment_bytes=400)

    if damage is _damage_garbage:
        assert reopened.end_offset == records[-1][0] + 1
        assert all_records(reopened) == records
        dropped = damaged_size - size_before_damage
    else:
        assert reopened.end_offset == last_frame.base_offset
        assert all_records(reopened) == [r for r in records if r[0] < last_frame.base_offset]
        dropped = damaged_size - (size_before_damage - last_frame.size)
    assert last_segment.stat().st_size == damaged_size - dropped
    assert any(
        f"dropped {dropped} bytes" in message and last_segment.name in message for message in caplog.messages
    )
    append_records(reopened, batch(1, tag=99), leader_epoch=0)
    after = snapshot(reopened)
    reopened.close()
    again = PartitionLog.open(path, segment_bytes=400)
    assert snapshot(again) == after
    again.close()


def test_a_torn_tail_in_a_big_last_segment_is_found_past_the_scan_chunks(tmp_path: Path) -> None:
    path = replica_dir(tmp_path)
    log = PartitionLog.open(path)
    for number in range(40):
        append_records(log, batch(1, size=100_000, tag=number), leader_epoch=0)
    end = log.end_offset
    log.close()
    segment = segment_logs(path)[0]
    os.truncate(segment, segment.stat().st_size - 10)

    reopened = PartitionLog.open(path)

    assert reopened.end_offset == end - 1
    assert len(all_records(reopened)) == end - 1
    reopened.close()


def test_damage_in_a_middle_segment_is_refused(tmp_path: Path) -> None:
    path = replica_dir(tmp_path)
    filled_log(path).close()
    middle = segment_logs(path)[1]
    data = bytearray(middle.read_bytes())
    data[-2] ^= 0x01  # the last frame of the segment: read when its index is checked
    middle.write_bytes(bytes(data))

    with pytest.raises(CorruptBatchError, match=middle.name):
        PartitionLog.open(path, segment_bytes=400)


def test_damage_anywhere_in_a_segment_without_index_is_refused(tmp_path: Path) -> None:
    path = replica_dir(tmp_path)
    filled_log(path).close()
    middle = segment_logs(path)[2]
    middle.with_suffix(".index").unlink()
    data = bytearray(middle.read_bytes())
    data[40] ^= 0x01
    middle.write_bytes(bytes(data))

    with pytest.raises(CorruptBatchError, match=middle.name):
        PartitionLog.open(path, segment_bytes=400)


def test_a_gap_between_segments_is_refused(tmp_path: Path) -> None:
    path = replica_dir(tmp_path)
    filled_log(path).close()
    missing = segment_logs(path)[2]
    missing.unlink()

    with pytest.raises(CorruptBatchError, match="not contiguous"):
        PartitionLog.open(path, segment_bytes=400)


def test_a_frame_with_the_wrong_offset_is_refused(tmp_path: Path) -> None:
    path = replica_dir(tmp_path)
    log = PartitionLog.open(path)
    append_records(log, batch(1), leader_epoch=0)
    log.close()
    with (path / "00000000000000000000.log").open("ab") as handle:
        handle.write(record_batch.encode_batch(5, 0, 0, batch(1)))  # valid crc, offset 5 instead of 1

    with pytest.raises(CorruptBatchError, match="base offset 5, expected 1"):
        PartitionLog.open(path)


@pytest.mark.parametrize(
    "garble",
    [
        lambda p: p.unlink(),
        lambda p: p.write_bytes(b""),
        lambda p: p.write_bytes(p.read_bytes()[:-3]),
        lambda p: p.write_bytes(os.urandom(len(p.read_bytes()))),
        lambda p: p.write_bytes(p.read_bytes()[8:] + p.read_bytes()[:8]),
        lambda p: p.write_bytes(p.read_bytes()[:-8] + struct.pack(">II", 1, 1)),
        lambda p: p.write_bytes(p.read_bytes()[:-8] + struct.pack(">II", 40000, 4000)),
    ],
    ids=["missing", "empty", "odd length", "random", "rotated", "not increasing", "past the end"],
)
def test_missing_or_garbled_index_files_are_rebuilt(tmp_path: Path, garble: object) -> None:
    path = replica_dir(tmp_path)
    log = filled_log(path, batches=60, segment_bytes=2000, index_interval_bytes=100)
    before = snapshot(log)
    log.close()
    indexes = {p.name: p.read_bytes() for p in path.glob("*.index")}
    assert all(len(data) >= 16 for data in indexes.values())
    assert callable(garble)
    for index in sorted(path.glob("*.index")):
        garble(index)

    reopened = PartitionLog.open(path, segment_bytes=2000, index_interval_bytes=100)

    assert snapshot(reopened) == before
    assert {p.name: p.read_bytes() for p in path.glob("*.index")} == indexes
    for offset in range(reopened.end_offset):
        [first, *_rest] = frames(reopened.read(offset, 1))
        assert first.base_offset <= offset < first.next_offset
    reopened.close()


def test_leftover_temp_and_orphan_index_files_are_removed(tmp_path: Path) -> None:
    path = replica_dir(tmp_path)
    filled_log(path).close()
    (path / f"{10**9:020d}.index").write_bytes(b"orphan")
    (path / f"{5:020d}.log.tmp").write_bytes(b"")
    (path / f"{EPOCH_CHECKPOINT}.tmp").write_bytes(b"0\n")
    (path / "somebody-else.tmp").write_bytes(b"")

    PartitionLog.open(path, segment_bytes=400).close()

    assert not (path / f"{10**9:020d}.index").exists()
    assert not (path / f"{5:020d}.log.tmp").exists()
    assert not (path / f"{EPOCH_CHECKPOINT}.tmp").exists()
    assert (path / "somebody-else.tmp").exists()


# -- epochs ------------------------------------------------------------------------------------


def test_epoch_cache_answers_as_kafka(tmp_path: Path) -> None:
    path = replica_dir(tmp_path)
    log = PartitionLog.open(path)
    append_records(log, batch(2), leader_epoch=0)  # 0, 1
    append_records(log, batch(3), leader_epoch=0)  # 2..4
    append_records(log, batch(1), leader_epoch=2)  # 5
    append_records(log, batch(4), leader_epoch=5)  # 6..9

    assert log.epoch_entries() == [(0, 0), (2, 5), (5, 6)]
    assert log.latest_epoch == 5
    assert (path / EPOCH_CHECKPOINT).read_text() == "0\n3\n0 0\n2 5\n5 6\n"
    assert log.epoch_end_offset(0) == (0, 5)
    assert log.epoch_end_offset(1) == (0, 5)  # not in the cache: the largest epoch below
    assert log.epoch_end_offset(2) == (2, 6)
    assert log.epoch_end_offset(3) == (2, 6)
    assert log.epoch_end_offset(4) == (2, 6)
    assert log.epoch_end_offset(5) == (5, 10)  # the latest epoch ends at the end offset
    assert log.epoch_end_offset(6) == (-1, -1)  # above every epoch
    assert log.epoch_end_offset(-1) == (-1, -1)
    with pytest.raises(ValueError, match="below the latest epoch"):
        append_records(log, batch(1), leader_epoch=4)
    with pytest.raises(ValueError, match="below the latest epoch"):
        log.assign_epoch_start(3)
    assert log.end_offset == 10
    log.close()

    reopened = PartitionLog.open(path)
    assert reopened.epoch_entries() == [(0, 0), (2, 5), (5, 6)]
    reopened.close()


def test_epoch_below_the_first_gives_the_first_start_offset(tmp_path: Path) -> None:
    log = PartitionLog.open(replica_dir(tmp_path))
    log.truncate_fully_and_start_at(100)
    append_records(log, batch(2), leader_epoch=3)
    append_records(log, batch(2), leader_epoch=7)

    assert log.epoch_end_offset(1) == (1, 100)  # Kafka: the requested epoch, the first start
    assert log.epoch_end_offset(3) == (3, 102)
    assert log.epoch_end_offset(5) == (3, 102)
    log.close()


def test_assign_epoch_start_records_a_new_leader_epoch(tmp_path: Path) -> None:
    path = replica_dir(tmp_path)
    log = PartitionLog.open(path)
    append_records(log, batch(2), leader_epoch=1)

    log.assign_epoch_start(4)
    log.assign_epoch_start(4)  # the latest epoch: no change

    assert log.epoch_entries() == [(1, 0), (4, 2)]
    assert log.epoch_end_offset(1) == (1, 2)
    append_records(log, batch(1), leader_epoch=4)
    assert log.epoch_entries() == [(1, 0), (4, 2)]
    log.assign_epoch_start(6)
    log.close()

    reopened = PartitionLog.open(path)  # (6, 3) starts at the end offset: dropped on recovery
    assert reopened.epoch_entries() == [(1, 0), (4, 2)]
    assert (path / EPOCH_CHECKPOINT).read_text() == "0\n2\n1 0\n4 2\n"
    reopened.close()


def test_a_damaged_checkpoint_is_rebuilt_not_trusted(tmp_path: Path) -> None:
    path = replica_dir(tmp_path)
    log = PartitionLog.open(path)
    append_records(log, batch(2), leader_epoch=1)
    log.close()
    for text in ("0\n2\n1 0\n", "1\n0\n", "0\n1\n1 x\n", "0\n2\n3 0\n2 1\n", "\xff"):
        (path / EPOCH_CHECKPOINT).write_bytes(text.encode("latin-1"))
        assert PartitionLog.open(path).epoch_entries() == [(1, 0)]


# -- truncation --------------------------------------------------------------------------------


def test_truncate_to_inside_a_frame_cuts_at_the_frame_start(tmp_path: Path) -> None:
    path = replica_dir(tmp_path)
    log = PartitionLog.open(path, segment_bytes=1000)
    for number in range(6):
        append_records(log, batch(3, tag=number), leader_epoch=number)  # frames at 0, 3, ..., 15
    log.high_watermark = 18
    records = all_records(log)

    log.truncate_to(10)

    assert log.end_offset == 9
    assert log.high_watermark == 9
    assert all_records(log) == records[:9]
    assert log.epoch_entries() == [(0, 0), (1, 3), (2, 6)]
    assert (path / EPOCH_CHECKPOINT).read_text() == "0\n3\n0 0\n1 3\n2 6\n"
    append_records(log, batch(1), leader_epoch=9)
    assert log.epoch_entries() == [(0, 0), (1, 3), (2, 6), (9, 9)]
    after = snapshot(log)
    log.close()
    reopened = PartitionLog.open(path, segment_bytes=1000)
    assert snapshot(reopened) == after
    reopened.close()


def test_truncate_to_a_segment_boundary_deletes_later_segments(tmp_path: Path) -> None:
    path = replica_dir(tmp_path)
    log = filled_log(path)
    records = all_records(log)
    bases = [int(p.name[:20]) for p in segment_logs(path)]
    boundary = bases[3]

    log.truncate_to(boundary)

    assert log.end_offset == boundary
    assert [int(p.name[:20]) for p in segment_logs(path)] == bases[:3]
    assert sorted(int(p.name[:20]) for p in path.glob("*.index")) == bases[:3]
    assert log.size_bytes == sum(p.stat().st_size for p in segment_logs(path))
    assert all_records(log) == records[:boundary]
    append_records(log, batch(2, tag=7), leader_epoch=0)
    assert all_records(log)[boundary:] == [
        (boundary + i, key, value) for i, (key, value) in enumerate(batch(2, tag=7))
    ]
    after = snapshot(log)
    log.close()
    reopened = PartitionLog.open(path, segment_bytes=400)
    assert snapshot(reopened) == after
    reopened.close()


def test_truncate_to_the_log_start_keeps_the_start(tmp_path: Path) -> None:
    path = replica_dir(tmp_path)
    log = PartitionLog.open(path, segment_bytes=300)
    log.truncate_fully_and_start_at(40)
    for number in range(10):
        append_records(log, batch(2, tag=number), leader_epoch=1)

    log.truncate_to(40)

    assert (log.log_start_offset, log.end_offset, log.size_bytes) == (40, 40, 0)
    assert log.epoch_entries() == []
    assert [p.name for p in segment_logs(path)] == [f"{40:020d}.log"]
    log.close()
    reopened = PartitionLog.open(path)
    assert (reopened.log_start_offset, reopened.end_offset) == (40, 40)
    append_records(reopened, batch(1), leader_epoch=2)
    assert all_records(reopened)[0][0] == 40
    reopened.close()


def test_truncate_to_outside_the_log_is_refused(tmp_path: Path) -> None:
    log = filled_log(replica_dir(tmp_path), batches=3)
    with pytest.raises(OffsetOutOfRangeError):
        log.truncate_to(log.end_offset + 1)
    log.truncate_fully_and_start_at(100)
    with pytest.raises(OffsetOutOfRangeError):
        log.truncate_to(99)
    log.close()


def test_truncate_fully_and_start_at_survives_reopen(tmp_path: Path) -> None:
    path = replica_dir(tmp_path)
    log = filled_log(path)
    append_records(log, batch(1), leader_epoch=3)

    log.truncate_fully_and_start_at(1234)

    assert (log.log_start_offset, log.end_offset, log.high_watermark, log.size_bytes) == (1234, 1234, 1234, 0)
    assert log.epoch_entries() == []
    assert log.read(1234, 100) == b""
    assert files(path) == [f"{1234:020d}.log", EPOCH_CHECKPOINT, "partition.metadata"]
    assert (path / EPOCH_CHECKPOINT).read_text() == "0\n0\n"
    log.close()
    reopened = PartitionLog.open(path)
    assert (reopened.log_start_offset, reopened.end_offset, reopened.epoch_entries()) == (1234, 1234, [])
    assert append_records(reopened, batch(2), leader_epoch=5) == 1234
    assert reopened.epoch_entries() == [(5, 1234)]
    reopened.close()

    again = PartitionLog.open(path)
    again.truncate_fully_and_start_at(0)
    assert files(path) == [EPOCH_CHECKPOINT, "partition.metadata"]
    assert (again.log_start_offset, again.end_offset) == (0, 0)
    again.close()
    assert PartitionLog.open(path).end_offset == 0


# -- replication -------------------------------------------------------------------------------


def test_append_replicated_appends_contiguous_frames_and_learns_epochs(tmp_path: Path) -> None:
    path = replica_dir(tmp_path)
    log = PartitionLog.open(path, segment_bytes=200)
    data = b"".join(
        [
            record_batch.encode_batch(0, 1, 5, batch(2)),
            record_batch.encode_batch(2, 1, 5, batch(3)),
            record_batch.encode_batch(5, 3, 5, batch(1)),
            record_batch.encode_batch(6, 3, 5, batch(2)),
        ]
    )

    assert log.append_replicated(data) == 8
    assert log.append_replicated(b"") == 8

    assert log.read(0, 1 << 20) == data
    assert log.epoch_entries() == [(1, 0), (3, 5)]
    assert len(segment_logs(path)) > 1
    assert all(frames(p.read_bytes()) for p in segment_logs(path))  # no frame split across files
    log.close()


@pytest.mark.parametrize(
    ("first_base", "second_base", "epochs", "message"),
    [
        (3, 4, (2, 2), "base offset 3, expected 2"),  # a gap
        (1, 2, (2, 2), "base offset 1, expected 2"),  # an overlap
        (2, 5, (2, 2), "base offset 5, expected 3"),  # frames not contiguous
        (2, 3, (2, 1), "below the latest epoch 2"),  # epochs going backwards
        (2, 3, (0, 2), "below the latest epoch 1"),
    ],
)
def test_append_replicated_refuses_bad_data_without_writing(
    tmp_path: Path, first_base: int, second_base: int, epochs: tuple[int, int], message: str
) -> None:
    path = replica_dir(tmp_path)
    log = PartitionLog.open(path)
    log.append_replicated(record_batch.encode_batch(0, 1, 5, batch(2)))
    before = snapshot(log)
    sizes = {p.name: p.stat().st_size for p in path.iterdir()}
    data = record_batch.encode_batch(first_base, epochs[0], 5, batch(1)) + record_batch.encode_batch(
        second_base, epochs[1], 5, batch(1)
    )

    with pytest.raises(ValueError, match=message):
        log.append_replicated(data)

    assert snapshot(log) == before
    assert {p.name: p.stat().st_size for p in path.iterdir()} == sizes
    log.close()


def test_append_replicated_refuses_damage_without_writing(tmp_path: Path) -> None:
    path = replica_dir(tmp_path)
    log = PartitionLog.open(path)
    good = record_batch.encode_batch(0, 1, 5, batch(2))
    damaged = bytearray(record_batch.encode_batch(2, 1, 5, batch(2)))
    damaged[-1] ^= 1

    with pytest.raises(CorruptBatchError):
        log.append_replicated(good + bytes(damaged))
    with pytest.raises(CorruptBatchError):
        log.append_replicated(good + good[:10])

    assert log.end_offset == 0
    assert files(path) == ["partition.metadata"]
    log.close()


# -- retention ---------------------------------------------------------------------------------


def test_retention_by_size_stops_at_the_high_watermark_and_the_active_segment(tmp_path: Path) -> None:
    path = replica_dir(tmp_path)
    log = filled_log(path, batches=40, retention_bytes=0)
    append_records(log, batch(1), leader_epoch=2)
    bases = [int(p.name[:20]) for p in segment_logs(path)]
    records = all_records(log)

    log.high_watermark = bases[3] + 1  # inside the fourth segment
    assert log.apply_retention(now_ms=0) == 3
    assert log.log_start_offset == bases[3]
    assert [int(p.name[:20]) for p in segment_logs(path)] == bases[3:]
    assert not (path / f"{bases[0]:020d}.index").exists()
    assert log.epoch_entries() == [(0, bases[3]), (2, records[-1][0])]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(bases[3] - 1, 100)

    log.high_watermark = log.end_offset
    assert log.apply_retention(now_ms=0) == len(bases) - 4  # all but the active one
    assert [int(p.name[:20]) for p in segment_logs(path)] == bases[-1:]
    assert all_records(log) == [r for r in records if r[0] >= bases[-1]]
    assert log.apply_retention(now_ms=0) == 0
    after = snapshot(log)
    log.close()
    reopened = PartitionLog.open(path, segment_bytes=400)
    assert snapshot(reopened) == after
    reopened.close()


def test_retention_by_size_keeps_the_log_at_most_the_limit(tmp_path: Path) -> None:
    path = replica_dir(tmp_path)
    log = filled_log(path, batches=40)
    log.high_watermark = log.end_offset
    limit = log.size_bytes // 2
    log.retention_bytes = limit

    deleted = log.apply_retention(now_ms=0)

    assert deleted > 0
    assert log.size_bytes <= limit
    assert log.size_bytes == sum(p.stat().st_size for p in segment_logs(path))
    log.close()


def test_retention_by_time_uses_the_newest_timestamp_of_each_segment(tmp_path: Path) -> None:
    path = replica_dir(tmp_path)
    log = PartitionLog.open(path, segment_bytes=200, retention_ms=1000)
    for number in range(12):
        append_records(log, batch(2), leader_epoch=0, timestamp_ms=10_000 + 1000 * number)
    log.close()
    # Reopened, the older segments come from their index files: timestamps are read on demand.
    log = PartitionLog.open(path, segment_bytes=200, retention_ms=1000)
    log.high_watermark = log.end_offset
    segments = [(int(p.name[:20]), frames(p.read_bytes())) for p in segment_logs(path)]
    assert len(segments) > 3

    newest_of_second = max(h.max_timestamp_ms for h in segments[1][1])
    assert log.apply_retention(now_ms=newest_of_second + 1000) == 1  # the second is not older than 1 s
    assert log.log_start_offset == segments[1][0]
    assert log.apply_retention(now_ms=newest_of_second + 1001) == 1
    assert log.apply_retention(now_ms=10**15) == len(segments) - 3  # never the active segment
    log.close()

    reopened = PartitionLog.open(path, segment_bytes=200, retention_ms=1000)
    append_records(reopened, batch(80), leader_epoch=0, timestamp_ms=10**9)
    append_records(reopened, batch(1), leader_epoch=0, timestamp_ms=10**9)
    reopened.high_watermark = reopened.end_offset
    assert reopened.apply_retention(now_ms=10**9) == 1
    assert reopened.apply_retention(now_ms=10**9) == 0  # the remaining old one holds the newest batch
    reopened.close()


# -- durability and resources ------------------------------------------------------------------


def test_flush_from_a_thread_while_appending(tmp_path: Path) -> None:
    path = replica_dir(tmp_path)
    log = PartitionLog.open(path, segment_bytes=2000)
    errors: list[BaseException] = []
    done = threading.Event()

    def flush_forever() -> None:
        try:
            while not done.is_set():
                log.flush()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    flusher = threading.Thread(target=flush_forever)
    flusher.start()
    expected = 0
    try:
        for number in range(300):
            append_records(log, batch(2, tag=number), leader_epoch=number // 100)
            expected += 2
            if number % 97 == 0:
                log.truncate_to(log.end_offset - 1)  # inside the last frame: cuts all of it
                expected -= 2
    finally:
        done.set()
        flusher.join()
    log.flush()

    assert errors == []
    assert log.end_offset == expected
    assert len(all_records(log)) == expected
    log.close()


def test_open_read_fds_are_bounded(tmp_path: Path) -> None:
    log = filled_log(replica_dir(tmp_path), batches=80, segment_bytes=200)
    before = open_fds()

    for offset in range(log.log_start_offset, log.end_offset):
        log.read(offset, 1)

    assert open_fds() - before <= MAX_READ_FDS + 2
    log.close()
    assert open_fds() < before


def test_a_closed_log_refuses_to_work(tmp_path: Path) -> None:
    log = filled_log(replica_dir(tmp_path), batches=3)
    log.close()
    log.close()

    for call in (
        lambda: log.read(0, 10),
        lambda: append_records(log, batch(1), leader_epoch=0),
        log.flush,
        lambda: log.truncate_to(0),
    ):
        with pytest.raises(ValueError, match="closed"):
            call()


def test_segment_paths_lists_logs_and_indexes(tmp_path: Path) -> None:
    path = replica_dir(tmp_path)
    log = filled_log(path)

    paths = log.segment_paths()

    assert sorted(paths) == sorted([*path.glob("*.log"), *path.glob("*.index")])
    assert [p.suffix for p in paths[:2]] == [".log", ".index"]
    copy = replica_dir(tmp_path, "copy-0")
    for each in paths:
        shutil.copy(each, copy / each.name)
    copied = PartitionLog.open(copy)
    assert all_records(copied) == all_records(log)
    copied.close()
    log.close()


@requires_root
def test_a_full_disk_fails_the_append_and_keeps_the_log_consistent(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", size_kb=256) as disk:
        path = replica_dir(disk)
        log = PartitionLog.open(path, segment_bytes=64 * 1024)
        records = [(None, bytes([n % 256]) * 5000) for n in range(4)]
        with pytest.raises(OSError) as caught:
            for _number in range(100):
                append_records(log, records, leader_epoch=0)
        assert caught.value.errno == errno.ENOSPC
        end = log.end_offset
        assert log.size_bytes == sum(p.stat().st_size for p in segment_logs(path))  # a partial write is cut
        assert len(all_records(log)) == end

        log.truncate_to(log.end_offset - 8)
        append_records(log, records[:1], leader_epoch=0)
        assert log.end_offset == end - 8 + 1
        after = snapshot(log)
        log.close()
        reopened = PartitionLog.open(path, segment_bytes=64 * 1024)
        assert snapshot(reopened) == after
        reopened.close()


@requires_root
def test_io_errors_propagate_untouched(tmp_path: Path) -> None:
    with loop_ext4(tmp_path / "disk") as disk:
        path = replica_dir(disk.path)
        log = PartitionLog.open(path)
        append_records(log, batch(3), leader_epoch=0)
        log.flush()
        disk.shutdown()

        with pytest.raises(OSError) as caught:
            for _number in range(3):
                append_records(log, batch(3), leader_epoch=0)
                log.flush()
        assert caught.value.errno == errno.EIO
        with pytest.raises(OSError):
            PartitionLog.open(path)
        log.close()


# -- a model -----------------------------------------------------------------------------------


class LogMachine(RuleBasedStateMachine):
    """Random appends, truncations, retention and reopens against a plain list of records."""

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="partition-log-"))
        self.path = replica_dir(self.root)
        self.options = {"segment_bytes": 220, "index_interval_bytes": 60}
        self.log = PartitionLog.open(self.path, **self.options)
        self.records: list[Record] = []
        self.frame_bases: list[int] = []  # the base offset of every frame the log holds, in order
        self.start = 0
        self.epoch = 0

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.root)

    @property
    def end(self) -> int:
        return self.records[-1][0] + 1 if self.records else self.start

    @rule(
        records=st.lists(
            st.tuples(st.none() | st.binary(max_size=6), st.binary(max_size=30)), min_size=1, max_size=5
        ),
        new_epoch=st.booleans(),
    )
    def append_as_leader(self, records: list[tuple[bytes | None, bytes]], new_epoch: bool) -> None:
        self.epoch += new_epoch
        base = append_records(self.log, records, leader_epoch=self.epoch, timestamp_ms=1)
        assert base == self.end
        self.frame_bases.append(base)
        self.records.extend((base + i, key, value) for i, (key, value) in enumerate(records))

    @rule(sizes=st.lists(st.integers(1, 4), min_size=1, max_size=4), value=st.binary(max_size=50))
    def append_replicated(self, sizes: list[int], value: bytes) -> None:
        parts = []
        offset = self.end
        for size in sizes:
            records: list[tuple[bytes | None, bytes]] = [(None, value)] * size
            parts.append(record_batch.encode_batch(offset, self.epoch, 1, records))
            self.frame_bases.append(offset)
            self.records.extend((offset + i, None, value) for i in range(size))
            offset += size
        assert self.log.append_replicated(b"".join(parts)) == self.end

    @rule(data=st.data())
    def truncate_to(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.start, self.end))
        # The cut lands on the start of the frame holding `offset` (at the end: nothing is cut).
        cut = offset if offset == self.end else max(b for b in self.frame_bases if b <= offset)
        self.log.truncate_to(offset)
        assert self.log.end_offset == cut
        self.records = [r for r in self.records if r[0] < cut]
        self.frame_bases = [b for b in self.frame_bases if b < cut]

    @rule(gap=st.integers(0, 5))
    def truncate_fully_and_start_at(self, gap: int) -> None:
        self.start = self.end + gap
        self.records = []
        self.frame_bases = []
        self.log.truncate_fully_and_start_at(self.start)

    @precondition(lambda self: self.records)
    @rule(data=st.data())
    def apply_retention(self, data: st.DataObject) -> None:
        high_watermark = data.draw(st.integers(self.start, self.end))
        self.log.high_watermark = high_watermark
        self.log.retention_bytes = data.draw(st.integers(0, 1500))
        self.log.apply_retention(now_ms=0)
        # Whole segments go, never one holding offsets at or above the high watermark: the log
        # now starts where it did, or at a frame boundary not past the high watermark.
        start = self.log.log_start_offset
        assert start == self.start or (start in self.frame_bases and start <= high_watermark), (
            start,
            high_watermark,
        )
        self.start = start
        self.records = [r for r in self.records if r[0] >= start]
        self.frame_bases = [b for b in self.frame_bases if b >= start]

    @rule()
    def reopen(self) -> None:
        self.log.close()
        self.log = PartitionLog.open(self.path, **self.options)

    @invariant()
    def log_equals_model(self) -> None:
        assert (self.log.log_start_offset, self.log.end_offset) == (self.start, self.end)
        assert all_records(self.log) == self.records
        entries = self.log.epoch_entries()
        assert all(a[0] < b[0] and a[1] < b[1] for a, b in itertools.pairwise(entries))
        assert all(self.start <= start < self.end for _epoch, start in entries)
        assert (self.path / "partition.metadata").read_bytes() == METADATA


LogMachine.TestCase.settings = settings(
    max_examples=30, stateful_step_count=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestLogMachine = LogMachine.TestCase


def test_relocate_follows_a_renamed_directory_without_reopening(tmp_path: Path) -> None:
    first = tmp_path / "t-0.future"
    first.mkdir()
    log = PartitionLog.open(first, segment_bytes=4096)
    append_records(log, [(None, b"a" * 1000)] * 3, leader_epoch=0)
    moved = tmp_path / "t-0"
    first.rename(moved)
    log.relocate(moved)
    for _ in range(5):  # rolls new segments in the new place
        append_records(log, [(None, b"b" * 1000)] * 3, leader_epoch=1)
    log.flush()
    assert log.read(0, 100_000)
    end = log.end_offset
    log.close()
    assert not first.exists()
    reopened = PartitionLog.open(moved, segment_bytes=4096)
    assert reopened.end_offset == end and reopened.epoch_entries() == [(0, 0), (1, 3)]
    reopened.close()


def test_a_damaged_epoch_checkpoint_is_rebuilt_from_the_batches(tmp_path: Path) -> None:
    path = tmp_path / "t-0"
    path.mkdir()
    log = PartitionLog.open(path, segment_bytes=4096)
    for epoch in (0, 0, 2, 2, 5):
        append_records(log, [(None, b"v" * 900)] * 2, leader_epoch=epoch)
    expected = log.epoch_entries()
    log.flush()
    log.close()
    for damage in (b"", b"0\n3\n0 0\n2", b"\xff\xfe"):
        (path / "leader-epoch-checkpoint").write_bytes(damage)
        reopened = PartitionLog.open(path, segment_bytes=4096)
        assert reopened.epoch_entries() == expected == [(0, 0), (2, 4), (5, 8)]
        reopened.close()
        # ... and rewritten: the next open reads it instead of rebuilding again.
        assert (path / EPOCH_CHECKPOINT).read_text() == checkpoint_text(expected)


def test_a_new_epoch_costs_no_fsync_until_flush(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t-0"
    path.mkdir()
    log = PartitionLog.open(path)
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    log.assign_epoch_start(3)
    append_records(log, [(None, b"x")], leader_epoch=4)
    assert synced == []
    log.flush()
    assert synced  # the checkpoint, the segment and the dir
    entries = log.epoch_entries()
    log.close()
    assert PartitionLog.open(path).epoch_entries() == entries


def test_a_checkpoint_older_than_the_batches_is_rebuilt_from_them(tmp_path: Path) -> None:
    """A power loss after the segment's fsync but before the dir's keeps the batches of a new
    epoch and loses the checkpoint's rename: the history must not stop at the older epoch."""
    path = tmp_path / "t-0"
    path.mkdir()
    log = PartitionLog.open(path, segment_bytes=4096)
    append_records(log, [(None, b"v" * 900)] * 2, leader_epoch=0)
    log.flush()
    stale = (path / "leader-epoch-checkpoint").read_bytes()
    for epoch in (3, 3, 7):
        append_records(log, [(None, b"v" * 900)] * 2, leader_epoch=epoch)
    expected = log.epoch_entries()
    log.flush()
    log.close()
    assert expected == [(0, 0), (3, 2), (7, 6)]
    (path / "leader-epoch-checkpoint").write_bytes(stale)  # the rename that was not durable
    reopened = PartitionLog.open(path, segment_bytes=4096)
    assert reopened.epoch_entries() == expected
    assert reopened.epoch_end_offset(3) == (3, 6)
    reopened.close()
    # ... and rewritten: the stale checkpoint is replaced by the rebuilt history.
    assert (path / EPOCH_CHECKPOINT).read_text() == checkpoint_text(expected)


def test_delete_records_moves_the_log_start_inside_a_batch_durably(tmp_path: Path) -> None:
    path = replica_dir(tmp_path)
    log = filled_log(path, batches=30)  # batches of 1 to 4 records, segments of ~400 bytes
    log.high_watermark = log.end_offset
    segments = len(segment_logs(path))
    before = all_records(log)
    cut = next(r[0] for r in before if r[0] > 40 and r[0] % 4 == 2)
    assert log.delete_records_before(cut) == cut
    assert log.log_start_offset == cut
    assert len(segment_logs(path)) < segments  # the segments wholly below the cut are gone
    assert all_records(log)[0][0] <= cut  # reads start with the batch holding the cut
    with pytest.raises(ValueError, match="outside"):
        log.read(cut - 1, 1 << 20)
    assert log.delete_records_before(cut - 5) == cut  # never down
    log.close()
    reopened = PartitionLog.open(path, segment_bytes=400)
    assert reopened.log_start_offset == cut
    assert [r for r in all_records(reopened) if r[0] >= cut] == [r for r in before if r[0] >= cut]
    # A full truncation forgets it: the new start is the truncation's.
    reopened.truncate_fully_and_start_at(cut - 10)
    reopened.close()
    assert PartitionLog.open(path, segment_bytes=400).log_start_offset == cut - 10


def test_a_replica_starting_inside_the_leaders_first_batch_keeps_the_leaders_start(tmp_path: Path) -> None:
    leader = filled_log(replica_dir(tmp_path, "leader"), batches=10)
    leader.high_watermark = leader.end_offset
    headers = list(record_batch.iter_headers(leader.read(0, 1 << 20)))
    straddled = next(h for h in headers if h.next_offset - h.base_offset >= 3)
    cut = straddled.base_offset + 1
    leader.delete_records_before(cut)
    follower = PartitionLog.open(replica_dir(tmp_path, "follower"), segment_bytes=400)
    follower.truncate_fully_and_start_at(cut)
    follower.append_replicated(leader.read(cut, 1 << 20))
    assert (follower.log_start_offset, follower.end_offset) == (cut, leader.end_offset)
    assert all_records(follower) == all_records(leader)


def test_segment_ms_rolls_the_active_segment_once_its_first_batch_is_older(tmp_path: Path) -> None:
    path = replica_dir(tmp_path)
    log = PartitionLog.open(path, segment_bytes=1 << 20)
    log.segment_ms = 1000

    def append(stamp: int, now: int) -> None:
        produced = record_batch.check_produced(record_batch.encode_batch(0, -1, stamp, [(b"k", b"v")]))
        log.append_as_leader(produced, leader_epoch=0, now_ms=now)

    append(10_000, now=10_000)
    append(10_400, now=10_900)  # the first batch is 900 ms old: no roll
    assert len(segment_logs(path)) == 1
    append(11_500, now=11_001)  # 1001 ms: rolled before this batch
    assert [int(p.name[:20]) for p in segment_logs(path)] == [0, 2]
    append(11_600, now=12_400)  # the new segment's first batch is 900 ms old
    assert len(segment_logs(path)) == 2
    log.segment_ms = None  # size only
    append(11_700, now=99_000)
    assert len(segment_logs(path)) == 2
