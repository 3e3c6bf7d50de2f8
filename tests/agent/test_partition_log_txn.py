"""Transactions in a replica's log: the producer state kept by every append (leader and
follower), the `.txnindex` of each segment, the last stable offset, and their rebuild on reopen,
after a truncation, retention and DeleteRecords."""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiokafka.record.default_records import DefaultRecordBatchBuilder

from jbod_agent.storage import producers
from jbod_agent.storage.partition_log import PartitionLog, txn_index_path
from jbod_core import txn_index
from jbod_core.txn_index import AbortedTxn
from jbod_kafka import control_records, record_batch
from jbod_kafka.control_records import ControlRecordType


def txn_batch(producer_id: int, sequence: int, count: int, *, epoch: int = 0) -> record_batch.CheckedBatch:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=1,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        batch_size=1 << 20,
    )
    for i in range(count):
        builder.append(offset=i, timestamp=1000, key=None, value=b"v%d" % i, headers=[])
    return record_batch.check_produced(bytes(builder.build()))


def marker(producer_id: int, control_type: ControlRecordType, *, epoch: int = 0) -> bytes:
    return control_records.marker_batch(
        control_type=control_type,
        producer_id=producer_id,
        producer_epoch=epoch,
        coordinator_epoch=0,
        timestamp_ms=2000,
    )


def test_transactions_in_the_log_survive_reopen_truncation_and_follow_segments(tmp_path: Path) -> None:
    leader_dir, follower_dir = tmp_path / "t-0", tmp_path / "f" / "t-0"
    leader_dir.mkdir()
    follower_dir.mkdir(parents=True)
    log = PartitionLog.open(leader_dir, segment_bytes=400)
    follower = PartitionLog.open(follower_dir, segment_bytes=400)
    log.append_as_leader(txn_batch(1, 0, 3), leader_epoch=0, now_ms=1000)  # 0-2 producer 1
    log.append_as_leader(txn_batch(2, 0, 2), leader_epoch=0, now_ms=1000)  # 3-4 producer 2
    log.high_watermark = log.end_offset
    assert log.first_unstable_offset == 0
    assert log.last_stable_offset == 0
    abort_at = log.append_marker_as_leader(marker(1, ControlRecordType.ABORT), leader_epoch=0, now_ms=3000)
    assert abort_at == 5
    log.high_watermark = log.end_offset
    assert log.last_stable_offset == 3  # producer 2's transaction is still open
    commit_at = log.append_marker_as_leader(marker(2, ControlRecordType.COMMIT), leader_epoch=0, now_ms=3000)
    log.append_as_leader(txn_batch(1, 3, 2), leader_epoch=0, now_ms=4000)  # 7-8, producer 1 again
    log.high_watermark = log.end_offset
    assert commit_at == 6
    assert log.last_stable_offset == 7
    expected = AbortedTxn(producer_id=1, first_offset=0, last_offset=5, last_stable_offset=3)
    assert log.aborted_transactions(0, log.end_offset) == [expected]
    assert log.aborted_transactions(6, log.end_offset) == []
    # the entry sits in the .txnindex of the segment holding the marker, in Kafka's format
    (base,) = log.aborted_entries()
    assert txn_index.decode_entries(txn_index_path(leader_dir, base).read_bytes()) == (expected,)

    # a follower replicating the same frames keeps the same state and index
    follower.append_replicated(log.read(0, 1 << 20))
    follower.high_watermark = follower.end_offset
    assert follower.aborted_entries() == log.aborted_entries()
    assert follower.last_stable_offset == 7

    # reopening rebuilds the state (no snapshot) and keeps the index; a damaged index is rebuilt
    log.close()
    txn_index_path(leader_dir, base).write_bytes(b"damaged")
    txn_index_path(leader_dir, 12345).write_bytes(b"damaged, of no segment")
    log = PartitionLog.open(leader_dir, segment_bytes=400)
    log.high_watermark = log.end_offset
    assert log.last_stable_offset == 7
    assert log.aborted_transactions(0, log.end_offset) == [expected]
    assert txn_index.decode_entries(txn_index_path(leader_dir, base).read_bytes()) == (expected,)
    assert not txn_index_path(leader_dir, 12345).exists()

    # truncating below the abort marker: its entry goes, producer 1's transaction is open again
    follower.truncate_to(5)
    follower.high_watermark = follower.end_offset
    assert follower.aborted_entries() == {}
    assert follower.first_unstable_offset == 0
    assert not any(p.name.endswith(".txnindex") for p in follower_dir.iterdir())

    # DeleteRecords past the marker's segment drops that segment's index with it
    log.delete_records_before(log.end_offset)
    remaining = {s.base_offset for s in log.segments()}
    assert set(log.aborted_entries()) <= remaining
    assert all(int(p.name[:20]) in remaining for p in leader_dir.iterdir() if p.name.endswith(".txnindex"))
    log.close()
    follower.close()


def test_the_producer_state_loads_off_the_event_loop_from_the_roll_snapshot(tmp_path: Path) -> None:
    """A roll writes the producer snapshot (a load then replays at most the active segment); with
    no snapshot, `load_transactions_off_loop` replays in a worker thread and catches up on the
    loop with what was appended meanwhile: the same state and aborted index as a load on first
    use; a truncation meanwhile discards its result."""
    directory = tmp_path / "t-0"
    directory.mkdir()
    log = PartitionLog.open(directory, segment_bytes=400)
    sequences = {1: 0, 2: 0}
    for round_ in range(6):
        for producer in (1, 2):
            log.append_as_leader(txn_batch(producer, sequences[producer], 2), leader_epoch=0, now_ms=1000)
            sequences[producer] += 2
        done = ControlRecordType.ABORT if round_ % 2 else ControlRecordType.COMMIT
        log.append_marker_as_leader(marker(1, done), leader_epoch=0, now_ms=2000)
    assert len(log.segments()) > 3
    snapshot = producers.read_snapshot(log)
    assert snapshot is not None and snapshot[0] > log.segments()[-2].base_offset  # the last roll's
    state, aborted = log.producer_state, log.aborted_entries()
    log.close()
    (directory / producers.SNAPSHOT_FILE).unlink()

    async def load_while_appending(log: PartitionLog) -> None:
        loading = asyncio.ensure_future(log.load_transactions_off_loop())
        for _turn in range(2):  # the load's task, then its inner one: it took its end offset
            await asyncio.sleep(0)  # and replays in its thread (it can resume only after we yield)
        # (a marker now would load the state at once, on the loop: it completes a transaction)
        log.append_as_leader(txn_batch(2, sequences[2], 1), leader_epoch=0, now_ms=3000)
        await loading

    log = PartitionLog.open(directory, segment_bytes=400)
    asyncio.run(load_while_appending(log))
    assert log.transactions_loaded
    loaded_state, loaded_aborted = log.producer_state, log.aborted_entries()
    log.close()
    (directory / producers.SNAPSHOT_FILE).unlink(missing_ok=True)
    reference = PartitionLog.open(directory, segment_bytes=400)
    assert reference.producer_state == loaded_state != state
    assert loaded_state.producers[2].batches[-1].first_offset == reference.end_offset - 1  # caught up
    assert reference.aborted_entries() == loaded_aborted == aborted
    reference.close()

    async def truncated_meanwhile(log: PartitionLog) -> None:
        loading = asyncio.ensure_future(log.load_transactions_off_loop())
        for _turn in range(2):
            await asyncio.sleep(0)
        log.truncate_to(log.segments()[-1].base_offset)
        await loading

    (directory / producers.SNAPSHOT_FILE).unlink(missing_ok=True)
    log = PartitionLog.open(directory, segment_bytes=400)
    asyncio.run(truncated_meanwhile(log))
    assert not log.transactions_loaded  # discarded: the next use loads the truncated log
    assert log.producer_state == producers.load(log)
    log.close()
