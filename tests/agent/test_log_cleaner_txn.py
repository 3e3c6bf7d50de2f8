"""The log cleaner on transactional data (`jbod_core.txn_cleaning` in `storage.log_cleaner`), on
real files, against a plain model: replay the appended records and apply Kafka's rules.

Random workloads (three transactional producers committing and aborting with overlapping keys,
interleaved, one transaction left open, plain records between, small segments) are cleaned
round after round, the clock passing `delete.retention.ms`; after each round:
* the log holds exactly the latest committed record of each key below the cleaned point (aborted
  records gone, never shadowing an earlier committed value), everything above it untouched, and
  nothing at or above the last stable offset cleaned;
* a read_committed reader (Kafka's consumer rule over the fetch's aborted transactions) and a
  read_uncommitted one see what the model says;
* no transactional data is left without its marker: the log reopened from its files (producer
  state rebuilt by replay, `.txnindex` read) and reopened with its `.txnindex` files deleted
  (rebuilt from the log) has the same last stable offset and serves a read_committed reader the
  same records;
and once cleaning settles, every marker whose data is gone is gone (but its producer's last
batch, kept whole as Kafka keeps it) and no index entry below the cleaned point is left.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka.record.default_records import DefaultRecordBatchBuilder

from jbod_agent.storage.log_cleaner import CleanJob, CleanResult, Throttle, clean, members_of
from jbod_agent.storage.partition_log import PartitionLog, txn_index_path
from jbod_core.compaction import CompactionSettings
from jbod_kafka import control_records, record_batch
from jbod_kafka.control_records import ControlRecordType

NOW = 1_700_000_000_000
RETENTION_MS = 60_000
SETTINGS = CompactionSettings(delete_retention_ms=RETENTION_MS, min_cleanable_dirty_ratio=0.0)
Row = tuple[int, bytes | None, bytes | None]  # offset, key, value


@dataclass
class Model:
    """Every record appended: (offset, key, value, producer or None, transaction number or None),
    and how each transaction ended (True: committed, False: aborted; absent: open)."""

    records: list[tuple[int, bytes, bytes, int | None, int | None]] = field(default_factory=list)
    outcome: dict[int, bool] = field(default_factory=dict)


def txn_batch(producer_id: int, sequence: int, records: list[tuple[bytes, bytes]], timestamp: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=1,
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=sequence,
        batch_size=1 << 20,
    )
    for delta, (key, value) in enumerate(records):
        builder.append(offset=delta, timestamp=timestamp, key=key, value=value, headers=[])
    return bytes(builder.build())


def write_workload(log: PartitionLog, rng: random.Random, model: Model, *, steps: int, now_ms: int) -> None:
    """Random interleaved transactions of producers 1-3 and plain batches; the last open
    transaction stays open."""
    sequences = {1: 0, 2: 0, 3: 0}
    open_txn: dict[int, int] = {}
    txn_numbers = iter(range(len(model.outcome) + 1000, 10**9))
    for step in range(steps):
        choice = rng.random()
        producer = rng.choice([1, 2, 3])
        if choice < 0.15:
            records = [(b"k%d" % rng.randrange(12), b"plain-%d" % step)]
            base = log.append_as_leader(
                record_batch.check_produced(record_batch.encode_batch(0, -1, now_ms, records)), leader_epoch=1
            )
            model.records += [(base, k, v, None, None) for k, v in records]
        elif choice < 0.75 or producer not in open_txn:
            txn = open_txn.setdefault(producer, next(txn_numbers))
            records = [(b"k%d" % rng.randrange(12), b"p%d-t%d-%d" % (producer, txn, step)) for _ in range(3)]
            records = records[: rng.randint(1, 3)]
            batch = txn_batch(producer, sequences[producer], records, now_ms)
            sequences[producer] += len(records)
            base = log.append_as_leader(record_batch.check_produced(batch), leader_epoch=1, now_ms=now_ms)
            model.records += [(base + i, k, v, producer, txn) for i, (k, v) in enumerate(records)]
        else:
            commit = rng.random() < 0.5
            marker = control_records.marker_batch(
                control_type=ControlRecordType.COMMIT if commit else ControlRecordType.ABORT,
                producer_id=producer,
                producer_epoch=0,
                coordinator_epoch=0,
                timestamp_ms=now_ms,
            )
            log.append_marker_as_leader(marker, leader_epoch=1, now_ms=now_ms)
            model.outcome[open_txn.pop(producer)] = commit
    for producer in sorted(open_txn)[:-1]:  # close all but one
        marker = control_records.marker_batch(
            control_type=ControlRecordType.COMMIT,
            producer_id=producer,
            producer_epoch=0,
            coordinator_epoch=0,
            timestamp_ms=now_ms,
        )
        log.append_marker_as_leader(marker, leader_epoch=1, now_ms=now_ms)
        model.outcome[open_txn.pop(producer)] = True
    log.append_as_leader(  # something after the open transaction's data, so the LSO is inside the log
        record_batch.check_produced(record_batch.encode_batch(0, -1, now_ms, [(b"tail", b"tail")])),
        leader_epoch=1,
    )
    model.records.append((log.end_offset - 1, b"tail", b"tail", None, None))
    log.high_watermark = log.end_offset


def clean_once(log: PartitionLog, now_ms: int) -> CleanResult | None:
    """One cleaning as the dir's cleaner does it (`LogCleaning._job` and `_commit`)."""
    first_dirty, due = log.cleaner_checkpoint()
    job = CleanJob(
        path=log.path,
        segments=log.segments(),
        log_start=log.log_start_offset,
        high_watermark=log.high_watermark,
        first_dirty=first_dirty,
        tombstones_due_ms=due,
        settings=SETTINGS,
        segment_bytes=log.segment_bytes,
        index_interval=log.index_interval_bytes,
        now_ms=now_ms,
        last_stable_offset=log.last_stable_offset,
        aborted=tuple(e for es in log.aborted_entries().values() for e in es),
    )
    result = clean(job, map_budget_bytes=1 << 20, throttle=Throttle(None, threading.Event()))
    if result is not None:
        if result.dropped_aborted:
            log.drop_aborted(result.dropped_aborted)
        for bases, cleaned in result.groups:
            doomed = log.swap_cleaned(members_of(job, bases), cleaned)
            assert doomed
            for path in doomed:
                path.unlink()
        log.record_cleaning(result.dirty_end, result.tombstones_due_ms)
    return result


def batches(log: PartitionLog) -> list[tuple[record_batch.BatchHeader, bytes]]:
    data = log.read(log.log_start_offset, 1 << 30)
    found = []
    expected = log.log_start_offset
    for header in record_batch.iter_headers(data):
        assert header.base_offset == expected, f"gap at {expected}"
        expected = header.next_offset
        found.append((header, bytes(data[header.position : header.position + header.size])))
    assert expected == log.end_offset
    return found


def read_uncommitted(log: PartitionLog) -> list[Row]:
    return [
        (r.offset, r.key, r.value)
        for header, data in batches(log)
        if not header.is_control
        for r in record_batch.decode_records(data)
    ]


def read_committed(log: PartitionLog) -> list[Row]:
    """Kafka's consumer over a fetch of the whole log up to the LSO: a batch of a producer whose
    aborted transaction began at or before it is skipped until that producer's abort marker."""
    lso = log.last_stable_offset
    pending = sorted(log.aborted_transactions(log.log_start_offset, lso), key=lambda e: e.first_offset)
    aborting: set[int] = set()
    rows: list[Row] = []
    for header, data in batches(log):
        if header.base_offset >= lso:
            break
        while pending and pending[0].first_offset <= header.last_offset:
            aborting.add(pending.pop(0).producer_id)
        if header.is_control:
            if header.record_count and control_records.read_marker(data).aborted:
                aborting.discard(header.producer_id)
            continue
        if header.is_transactional and header.producer_id in aborting:
            continue
        rows += [(r.offset, r.key, r.value) for r in record_batch.decode_records(data)]
    return rows


def expected_rows(model: Model, dirty_end: int, lso: int, *, committed_only: bool) -> list[Row]:
    """Below `dirty_end` the latest committed record of each key; above it every record (those
    of committed transactions below the LSO when `committed_only`)."""
    committed = [
        (o, k, v) for o, k, v, _, txn in model.records if txn is None or model.outcome.get(txn) is True
    ]
    latest = {k: o for o, k, _ in committed if o < dirty_end}
    below = [(o, k, v) for o, k, v in committed if o < dirty_end and latest[k] == o]
    if committed_only:
        return below + [(o, k, v) for o, k, v in committed if dirty_end <= o < lso]
    return below + [(o, k, v) for o, k, v, *_ in model.records if o >= dirty_end]


def reopened(path: Path, *, drop_txn_indexes: bool) -> PartitionLog:
    if drop_txn_indexes:
        for index in path.glob("*.txnindex"):
            index.unlink()
    log = PartitionLog.open(path, segment_bytes=600, index_interval_bytes=256)
    log.high_watermark = log.end_offset
    return log


def check(log: PartitionLog, model: Model, dirty_end: int) -> None:
    lso = log.last_stable_offset
    assert dirty_end <= lso
    assert read_uncommitted(log) == expected_rows(model, dirty_end, lso, committed_only=False)
    assert read_committed(log) == expected_rows(model, dirty_end, lso, committed_only=True)


def test_cleaning_removes_aborted_data_then_markers(tmp_path: Path) -> None:
    for seed in range(4):
        rng = random.Random(seed)
        path = tmp_path / f"t-{seed}"
        path.mkdir()
        log = PartitionLog.open(path, segment_bytes=600, index_interval_bytes=256)
        model = Model()
        write_workload(log, rng, model, steps=150, now_ms=NOW)
        lso_before = log.last_stable_offset
        assert lso_before < log.end_offset  # one transaction is open
        now, rounds = NOW, 0
        while True:
            result = clean_once(log, now)
            rounds += 1
            assert rounds < 12
            first_dirty, due = log.cleaner_checkpoint()
            check(log, model, first_dirty)
            assert log.last_stable_offset == lso_before
            path_ = log.path
            log.close()
            for drop in (False, True):  # reopened from its files, then with the indexes rebuilt
                again = reopened(path_, drop_txn_indexes=drop)
                assert again.last_stable_offset == lso_before
                check(again, model, first_dirty)
                again.close()
            log = reopened(path_, drop_txn_indexes=False)
            if result is None:
                break
            now = max(now, due or now) + 1
        # settled, past delete.retention.ms: no marker whose data is gone, no index entry below
        producers_with_data: set[int] = set()
        all_batches = [header for header, _ in batches(log)]
        last_of = {h.producer_id: h.base_offset for h in all_batches if h.producer_id >= 0}
        for header in all_batches:
            if header.base_offset >= first_dirty:
                break
            if header.is_control and last_of[header.producer_id] != header.base_offset:
                assert header.producer_id in producers_with_data, header
                producers_with_data.discard(header.producer_id)
            elif header.is_transactional and header.record_count:
                producers_with_data.add(header.producer_id)
        assert all(e.last_offset >= first_dirty for es in log.aborted_entries().values() for e in es)
        assert {int(p.name[:20]) for p in path.glob("*.txnindex")} == set(log.aborted_entries())
        for base in log.aborted_entries():
            assert txn_index_path(path, base).exists()
        log.close()
