"""The topic configs a replica's log applies itself (`PartitionLog.apply_storage_configs` over
`LocalLog`), on real files: `segment.index.bytes` rolls a segment whose index is full,
`index.interval.bytes` spaces the index entries written from then on, `segment.jitter.ms` rolls
some segments earlier than `segment.ms`, `preallocate` reserves a new segment's blocks without
changing its size (recovery reads it as before), `file.delete.delay.ms` keeps a deleted segment as
`.deleted` until its delay passed on the log's clock (and reopening removes leftovers),
`flush.messages` says when a forced flush is due."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from pathlib import Path

from jbod_agent.storage.partition_log import PartitionLog
from jbod_kafka import record_batch
from tests.agent.runtime_support import FakeClock
from tests.agent.support import append_records

NEVER = 2**63 - 1


def open_log(
    path: Path, *, monotonic: Callable[[], float] = time.monotonic, **configs: int | bool
) -> PartitionLog:
    path.mkdir(exist_ok=True)
    log = PartitionLog.open(path, segment_bytes=1 << 20, index_interval_bytes=0, monotonic=monotonic)
    settings: dict[str, int | bool] = {
        "index_interval_bytes": 0,
        "segment_index_bytes": 10485760,
        "segment_jitter_ms": 0,
        "file_delete_delay_ms": 0,
        "flush_messages": NEVER,
        "flush_ms": NEVER,
        "preallocate": False,
    }
    settings.update(configs)
    log.apply_storage_configs(**settings)  # type: ignore[arg-type]
    return log


def test_a_full_index_rolls_the_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_index_bytes=16)  # two entries
    for _ in range(7):
        append_records(log, [(b"k", b"v" * 100)], leader_epoch=0)
    sizes = [len(s.index_offsets) for s in log.segments()]
    assert sizes == [2, 2, 2, 1]
    log.close()
    reopened = open_log(tmp_path / "t-0", segment_index_bytes=16)
    assert reopened.end_offset == 7
    reopened.close()


def test_the_index_interval_applies_from_the_next_entry(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    for _ in range(4):
        append_records(log, [(b"k", b"v" * 100)], leader_epoch=0)
    log.apply_storage_configs(
        index_interval_bytes=1 << 20,
        segment_index_bytes=10485760,
        segment_jitter_ms=0,
        file_delete_delay_ms=0,
        flush_messages=NEVER,
        flush_ms=NEVER,
        preallocate=False,
    )
    for _ in range(4):
        append_records(log, [(b"k", b"v" * 100)], leader_epoch=0)
    assert list(log.segments()[0].index_offsets) == [0, 1, 2, 3]
    log.close()


def test_jitter_rolls_some_segments_before_segment_ms(tmp_path: Path) -> None:
    random.seed(1)
    early = 0
    for n in range(20):
        log = open_log(tmp_path / f"t-{n}", segment_jitter_ms=1000)
        log.segment_ms = 1000
        append_records(log, [(b"k", b"v")], leader_epoch=0, timestamp_ms=0)
        append_records(log, [(b"k", b"v")], leader_epoch=0, timestamp_ms=0)  # draws this segment's jitter
        log_segments_before = len(log.segments())
        log.append_as_leader(_batch(), leader_epoch=0, now_ms=600)
        early += len(log.segments()) > log_segments_before
        log.close()
    assert 0 < early < 20
    plain = open_log(tmp_path / "plain")
    plain.segment_ms = 1000
    append_records(plain, [(b"k", b"v")], leader_epoch=0, timestamp_ms=0)
    plain.append_as_leader(_batch(), leader_epoch=0, now_ms=600)
    assert len(plain.segments()) == 1
    plain.close()


def _batch() -> record_batch.CheckedBatch:
    return record_batch.check_produced(record_batch.encode_batch(0, -1, 600, [(b"k", b"v")]))


def test_preallocate_reserves_blocks_and_keeps_the_size(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", preallocate=True)
    append_records(log, [(b"k", b"v" * 100)], leader_epoch=0)
    stat = os.stat(log.segments()[0].log_path)
    assert stat.st_size == log.size_bytes
    assert stat.st_blocks * 512 >= 1 << 20
    log.close()
    reopened = open_log(tmp_path / "t-0")
    assert reopened.end_offset == 1
    reopened.close()


def test_a_deleted_segment_waits_for_its_delay(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(
        tmp_path / "t-0", monotonic=clock.monotonic, segment_index_bytes=8, file_delete_delay_ms=2000
    )
    for _ in range(3):
        append_records(log, [(b"k", b"v")], leader_epoch=0)
    log.high_watermark = log.end_offset
    assert log.delete_records_before(2) == 2
    doomed = sorted(p.name for p in (tmp_path / "t-0").iterdir() if p.name.endswith(".deleted"))
    assert doomed == [
        "00000000000000000000.index.deleted",
        "00000000000000000000.log.deleted",
        "00000000000000000001.index.deleted",
        "00000000000000000001.log.deleted",
    ]
    assert log.purge_deleted() == 0  # not yet
    clock.advance(1.5)
    assert log.purge_deleted() == 0  # still not
    clock.advance(0.5)
    assert log.purge_deleted() == 4
    assert not [p for p in (tmp_path / "t-0").iterdir() if p.name.endswith(".deleted")]
    log.close()


def test_recovery_removes_deleted_leftovers(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_index_bytes=8, file_delete_delay_ms=60_000)
    for _ in range(3):
        append_records(log, [(b"k", b"v")], leader_epoch=0)
    log.high_watermark = log.end_offset
    log.delete_records_before(2)
    os.replace(tmp_path / "t-0", tmp_path / "copy")  # as a crash leaves it: no close
    reopened = open_log(tmp_path / "copy")
    assert not [p for p in (tmp_path / "copy").iterdir() if p.name.endswith(".deleted")]
    assert (reopened.log_start_offset, reopened.end_offset) == (2, 3)
    reopened.close()
    log.close()


def test_flush_messages_says_when_a_flush_is_due(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", flush_messages=3)
    append_records(log, [(b"k", b"v")] * 2, leader_epoch=0)
    assert not log.flush_due
    append_records(log, [(b"k", b"v")], leader_epoch=0)
    assert log.flush_due
    log.flush_starting(now_ms=5)
    assert not log.flush_due and log.last_flush_ms == 5
    log.close()
