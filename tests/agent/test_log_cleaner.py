"""The log cleaner on real files (`jbod_agent.storage.log_cleaner` with `LocalLog.swap_cleaned`),
checked against a plain model: the list of every record appended.

Covers: random workloads (random keys, tombstones, all four codecs, many small segments) cleaned
round after round keep exactly the latest record of each key below the cleaned point, at its
original offset, everything above it untouched, batches contiguous, and the same after
reopening; tombstones kept until `delete.retention.ms` and then removed; the last batch of an
idempotent producer kept empty with its producer fields, its earlier ones dropped; a dirty ratio
below `min.cleanable.dirty.ratio` not cleaned; a key map over its budget cleans in several
rounds; the active segment and data at or above the high watermark never cleaned; a swap refused
after the log changed; and a kill -9 of a process at a random moment of its cleaning, recovered
from disk, leaves every latest record and nothing a model does not hold.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from jbod_agent.storage.log_cleaner import (
    CleanerStoppedError,
    CleanJob,
    CleanResult,
    Throttle,
    clean,
    members_of,
    plan,
)
from jbod_agent.storage.partition_log import PartitionLog
from jbod_core.compaction import CompactionSettings
from jbod_kafka import record_batch
from jbod_kafka.record_batch import Compression
from tests.agent.runtime_support import FakeClock

NOW = 1_700_000_000_000
KEEP_TOMBSTONES = CompactionSettings(delete_retention_ms=2**62, min_cleanable_dirty_ratio=0.0)
Model = list[tuple[int, bytes, bytes | None]]  # (offset, key, value) of every record appended


def open_log(path: Path, *, segment_bytes: int = 2048) -> PartitionLog:
    path.mkdir(exist_ok=True)
    return PartitionLog.open(path, segment_bytes=segment_bytes, index_interval_bytes=256)


def append_random(log: PartitionLog, rng: random.Random, model: Model, *, batches: int, keys: int) -> None:
    for _ in range(batches):
        records = [
            (
                b"key-%d" % rng.randrange(keys),
                None if rng.random() < 0.1 else rng.randbytes(rng.randint(1, 60)),
            )
            for _ in range(rng.randint(1, 8))
        ]
        codec = rng.choice(
            [
                Compression.NONE,
                Compression.NONE,
                Compression.GZIP,
                Compression.SNAPPY,
                Compression.LZ4,
                Compression.ZSTD,
            ]
        )
        batch = record_batch.encode_batch(0, -1, NOW, records, compression=codec)
        base = log.append_as_leader(record_batch.check_produced(batch), leader_epoch=1)
        model.extend((base + i, key, value) for i, (key, value) in enumerate(records))
    log.high_watermark = log.end_offset


def job_of(
    log: PartitionLog,
    *,
    settings: CompactionSettings = KEEP_TOMBSTONES,
    now_ms: int = NOW,
    segment_bytes: int | None = None,
) -> CleanJob:
    """A snapshot of `log` for the cleaner, as the dir's cleaner takes it (its checkpoint read)."""
    first_dirty, tombstones_due_ms = log.cleaner_checkpoint()
    return CleanJob(
        path=log.path,
        segments=log.segments(),
        log_start=log.log_start_offset,
        high_watermark=log.high_watermark,
        first_dirty=first_dirty,
        tombstones_due_ms=tombstones_due_ms,
        settings=settings,
        segment_bytes=log.segment_bytes if segment_bytes is None else segment_bytes,
        index_interval=log.index_interval_bytes,
        now_ms=now_ms,
    )


def clean_once(
    log: PartitionLog,
    *,
    settings: CompactionSettings = KEEP_TOMBSTONES,
    now_ms: int = NOW,
    budget: int = 1 << 20,
) -> CleanResult | None:
    """One cleaning of `log` as the dir's cleaner does it: plan and write, then swap and record."""
    job = job_of(log, settings=settings, now_ms=now_ms)
    result = clean(job, map_budget_bytes=budget, throttle=Throttle(None, threading.Event()))
    if result is not None:
        for bases, cleaned in result.groups:
            doomed = log.swap_cleaned(members_of(job, bases), cleaned)
            assert doomed
            for path in doomed:  # the replaced segments, renamed `.deleted`
                path.unlink()
        log.record_cleaning(result.dirty_end, result.tombstones_due_ms)
    return result


def read_all(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record of the log, checking that its batches are contiguous from the log start."""
    data = log.read(log.log_start_offset, 1 << 30) if log.end_offset > log.log_start_offset else b""
    records = []
    expected = log.log_start_offset
    for header in record_batch.iter_headers(data):
        assert header.base_offset == expected, f"gap at {expected}"
        expected = header.next_offset
        batch = data[header.position : header.position + header.size]
        records.extend((r.offset, r.key, r.value) for r in record_batch.decode_records(batch))
    assert expected == log.end_offset
    return records


def expected_after(model: Model, dirty_end: int) -> list[tuple[int, bytes | None, bytes | None]]:
    """The model compacted below `dirty_end` (tombstones kept), untouched above it."""
    latest = {key: offset for offset, key, _ in model if offset < dirty_end}
    return [(o, k, v) for o, k, v in model if o >= dirty_end or latest[k] == o]


class _StopOnClock(threading.Event):
    """A throttle's stop signal whose waits pass on a fake clock (and are recorded) instead of real time."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        assert timeout is not None
        self.waits.append(timeout)
        self.clock.advance(timeout)
        return self.is_set()


def test_the_throttle_keeps_the_rate_on_its_clock() -> None:
    clock = FakeClock(start=100.0)
    stop = _StopOnClock(clock)
    throttle = Throttle(1000, stop, monotonic=clock.monotonic)
    throttle.spend(500)  # half a second's worth at once: waits for it
    throttle.spend(500)
    assert stop.waits == [0.5, 0.5]
    throttle.spend(5)  # 5 ms ahead: not worth a wait
    assert stop.waits == [0.5, 0.5]
    clock.advance(5.0)  # idle for 5 s: the next second's worth passes, and the throttle starts over
    throttle.spend(1000)
    assert stop.waits == [0.5, 0.5]
    throttle.spend(1000)  # no credit for the idle past: waits as from a standing start
    assert stop.waits == [0.5, 0.5, 1.0]
    stop.set()
    with pytest.raises(CleanerStoppedError):
        throttle.spend(1)


def test_a_cleaning_is_timed_on_its_throttle_clock(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    append_random(log, random.Random(7), [], batches=200, keys=5)
    log.high_watermark = log.end_offset
    ticks = itertools.count()  # each reading of the clock one second after the one before
    throttle = Throttle(None, threading.Event(), monotonic=lambda: float(next(ticks)))
    result = clean(job_of(log), map_budget_bytes=1 << 20, throttle=throttle)
    assert result is not None
    assert (result.map_seconds, result.write_seconds) == (1.0, 1.0)
    log.close()


def test_random_workloads_keep_the_latest_record_of_each_key(tmp_path: Path) -> None:
    rng = random.Random(7)
    model: Model = []
    log = open_log(tmp_path / "t-0")
    dirty_end = 0
    for _round in range(6):
        append_random(log, rng, model, batches=rng.randint(20, 80), keys=rng.choice([5, 40, 300]))
        size_before = log.size_bytes
        result = clean_once(log)
        assert result is not None
        assert result.dirty_end > dirty_end
        dirty_end = result.dirty_end
        assert dirty_end <= log.segments()[-1].base_offset  # never the active segment
        assert read_all(log) == expected_after(model, dirty_end)
        assert log.size_bytes <= size_before
    log.close()
    reopened = open_log(tmp_path / "t-0")
    assert read_all(reopened) == expected_after(model, dirty_end)
    assert not [p for p in (tmp_path / "t-0").iterdir() if p.name.endswith((".cleaned", ".swap"))]
    reopened.close()


def test_tombstones_are_removed_after_delete_retention(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=512)
    model: Model = []
    for i in range(40):
        records = [(b"a", b"v%d" % i), (b"b", None if i == 39 else b"w%d" % i)]
        base = log.append_as_leader(
            record_batch.check_produced(record_batch.encode_batch(0, -1, NOW, records)), leader_epoch=1
        )
        model.extend((base + n, k, v) for n, (k, v) in enumerate(records))
    log.append_as_leader(
        record_batch.check_produced(record_batch.encode_batch(0, -1, NOW, [(b"c", b"x")] * 30)),
        leader_epoch=1,
    )
    log.high_watermark = log.end_offset
    settings = CompactionSettings(delete_retention_ms=60_000, min_cleanable_dirty_ratio=0.0)
    clean_once(log, settings=settings, now_ms=NOW + 1_000)
    survivors = {key: value for _, key, value in read_all(log)}
    assert survivors[b"b"] is None  # a young tombstone stays, so consumers see the delete
    clean_once(
        log,
        settings=CompactionSettings(
            delete_retention_ms=60_000, min_cleanable_dirty_ratio=0.0, max_compaction_lag_ms=0
        ),
        now_ms=NOW + 120_000,
    )
    keys = [key for _, key, _ in read_all(log)]
    assert b"b" not in keys
    assert b"a" in keys
    log.close()


def idempotent_batch(
    producer_id: int, sequence: int, records: list[tuple[bytes, bytes]]
) -> record_batch.CheckedBatch:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=sequence,
        batch_size=1 << 20,
    )
    for delta, (key, value) in enumerate(records):
        builder.append(offset=delta, timestamp=NOW, key=key, value=value, headers=[])
    return record_batch.check_produced(bytes(builder.build()))


def test_the_last_batch_of_an_idempotent_producer_is_kept_empty(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=400)
    for sequence in range(0, 20, 2):
        log.append_as_leader(idempotent_batch(9, sequence, [(b"k", b"old"), (b"j", b"old")]), leader_epoch=1)
    last = log.end_offset - 2
    for _ in range(20):
        log.append_as_leader(
            record_batch.check_produced(
                record_batch.encode_batch(0, -1, NOW, [(b"k", b"new"), (b"j", b"new")])
            ),
            leader_epoch=1,
        )
    log.high_watermark = log.end_offset
    clean_once(log)
    data = log.read(0, 1 << 20)
    producer_batches = [h for h in record_batch.iter_headers(data) if h.producer_id == 9]
    assert len(producer_batches) == 1
    kept = producer_batches[0]
    assert (kept.base_offset, kept.last_offset_delta, kept.record_count, kept.base_sequence) == (
        last,
        1,
        0,
        18,
    )
    assert all(v == b"new" for _, _, v in read_all(log))
    log.close()


def test_what_is_not_cleaned(tmp_path: Path) -> None:
    rng = random.Random(3)
    model: Model = []
    log = open_log(tmp_path / "t-0")
    append_random(log, rng, model, batches=60, keys=10)
    hw = log.segments()[2].base_offset + 1
    log.high_watermark = hw
    result = clean_once(log)
    assert result is not None
    assert result.dirty_end <= log.segments()[2].base_offset + 1  # nothing at or above the high watermark
    assert read_all(log) == expected_after(model, result.dirty_end)
    log.high_watermark = log.end_offset
    strict = CompactionSettings(delete_retention_ms=2**62, min_cleanable_dirty_ratio=0.99)
    append_random(log, rng, model, batches=2, keys=10)
    assert clean_once(log, settings=strict) is None  # dirty ratio below min.cleanable.dirty.ratio
    log.close()


def test_a_small_key_map_cleans_in_several_rounds(tmp_path: Path) -> None:
    rng = random.Random(11)
    model: Model = []
    log = open_log(tmp_path / "t-0")
    append_random(log, rng, model, batches=120, keys=2000)
    ends = []
    while (result := clean_once(log, budget=4096)) is not None:
        ends.append(result.dirty_end)
        assert read_all(log) == expected_after(model, result.dirty_end)
    assert len(ends) > 2
    assert ends == sorted(ends)
    log.close()


def test_a_swap_is_refused_once_the_log_changed(tmp_path: Path) -> None:
    rng = random.Random(5)
    model: Model = []
    log = open_log(tmp_path / "t-0")
    append_random(log, rng, model, batches=60, keys=5)
    job = job_of(log)
    result = clean(job, map_budget_bytes=1 << 20, throttle=Throttle(None, threading.Event()))
    assert result is not None and result.groups
    log.truncate_to(result.groups[0][0][-1])  # a member cut
    bases, cleaned = result.groups[0]
    assert log.swap_cleaned(members_of(job, bases), cleaned) is None
    assert not cleaned.log_path(log.path).exists()
    assert read_all(log) == [r for r in model if r[0] < log.end_offset]
    log.close()


CHILD = """
import sys, threading
from pathlib import Path
sys.path[:0] = {paths!r}
from tests.agent.test_log_cleaner import clean_once, open_log
log = open_log(Path({path!r}))
print("cleaning", flush=True)
clean_once(log)
print("done", flush=True)
"""


def test_a_kill_during_cleaning_loses_nothing(tmp_path: Path) -> None:
    rng = random.Random(13)
    model: Model = []
    source = tmp_path / "source"
    log = open_log(source, segment_bytes=8192)
    append_random(log, rng, model, batches=1500, keys=200)
    log.close()
    latest = {key: offset for offset, key, _ in model}
    by_offset = {offset: (key, value) for offset, key, value in model}
    root = Path(__file__).resolve().parents[2]

    def run(path: Path, kill_after: float | None) -> None:
        script = CHILD.format(paths=[str(root)], path=str(path))
        child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "cleaning"
        if kill_after is None:
            assert child.wait(timeout=120) == 0
            return
        # fixed wait: a random moment of the cleaning is the fault injected, not a wait for a condition
        time.sleep(kill_after)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)

    full = tmp_path / "full"
    subprocess.run(["cp", "-a", str(source), str(full)], check=True)
    started = time.monotonic()
    run(full, None)
    duration = time.monotonic() - started
    for attempt in range(6):
        copy = tmp_path / f"kill-{attempt}"
        subprocess.run(["cp", "-a", str(source), str(copy)], check=True)
        run(copy, rng.uniform(0, duration))
        recovered = open_log(copy, segment_bytes=8192)
        records = read_all(recovered)
        assert all(by_offset[o] == (k, v) for o, k, v in records)  # nothing the model lacks
        present = {o for o, _, _ in records}
        assert all(offset in present for offset in latest.values())  # every key's latest record
        recovered.high_watermark = recovered.end_offset
        clean_once(recovered)  # and a cleaning after the crash finishes the job
        assert sorted(present.intersection(latest.values())) == sorted(latest.values())
        recovered.close()
        assert not [p for p in copy.iterdir() if p.name.endswith((".cleaned", ".swap"))]
    os.sync()


@pytest.mark.parametrize("members_removed", [0, 1, 2])
def test_recovery_completes_an_interrupted_swap(tmp_path: Path, members_removed: int) -> None:
    """The states a crash can leave inside `swap_cleaned`: the cleaned segment renamed to `.swap`
    and none, some or all of the segments it replaces removed."""
    rng = random.Random(17)
    model: Model = []
    log = open_log(tmp_path / "t-0")
    append_random(log, rng, model, batches=80, keys=4)
    job = job_of(log, segment_bytes=1 << 20)
    result = clean(job, map_budget_bytes=1 << 20, throttle=Throttle(None, threading.Event()))
    assert result is not None
    (bases, cleaned), *_ = result.groups
    members = members_of(job, bases)
    assert len(members) > 2
    log.close()
    os.replace(cleaned.log_path(tmp_path / "t-0"), tmp_path / "t-0" / f"{cleaned.base_offset:020d}.log.swap")
    for member in list(reversed(members))[:members_removed]:
        member.log_path.unlink()
    recovered = open_log(tmp_path / "t-0")
    assert read_all(recovered) == [
        r for r in expected_after(model, result.dirty_end) if r[0] < members[-1].next_offset
    ] + [r for r in model if r[0] >= members[-1].next_offset]
    assert recovered.segments()[0].next_offset == members[-1].next_offset
    recovered.close()


def test_a_plan_lets_the_log_keep_the_timestamps_it_read(tmp_path: Path) -> None:
    """A reopened log knows no older segment's newest timestamp; a cleaner's look reads them once
    and the log keeps them, so the next round reads no header again."""
    rng = random.Random(19)
    log = open_log(tmp_path / "t-0")
    append_random(log, rng, [], batches=40, keys=5)
    log.close()
    log = open_log(tmp_path / "t-0")
    assert any(s.max_timestamp_ms is None for s in log.segments())
    job = job_of(log)
    found = plan(job)
    log.note_max_timestamps(job.segments, found.sizes, [info.max_timestamp_ms for info in found.infos])
    assert [s.max_timestamp_ms for s in log.segments()] == [NOW] * len(log.segments())
    log.close()
