"""How long loading a partition's producer state blocks the agent's event loop (issue 33).

Builds one partition log of `--mb` MB of transactional data (50 producers, transactions of 10
batches of 16 records of 1 KiB, committed or aborted in turn; Kafka's default 64 MiB segments... or
`--segment-mb`) with `PartitionLog`'s own appends, then reopens it and loads the producer state and
aborted index four ways, printing the seconds each took and the longest stall of the event loop
(a ticker every 1 ms measures it):

* `replay`: no snapshot, loaded on first use on the event loop (what a crash before any snapshot,
  or a log written before snapshots, costs);
* `replay off loop`: no snapshot, `load_transactions_off_loop` (the replay in a worker thread);
* `roll snapshot`: the snapshot written at the last segment roll, loaded on first use (at most the
  active segment replayed);
* `shutdown snapshot`: the snapshot written at a clean shutdown, loaded on first use.

    python -m bench.producer_state_load --mb 200
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from aiokafka.record.default_records import DefaultRecordBatchBuilder

from jbod_agent.storage import producers
from jbod_agent.storage.partition_log import PartitionLog
from jbod_kafka import control_records, record_batch
from jbod_kafka.control_records import ControlRecordType

PRODUCERS = 50
BATCHES_PER_TXN = 10
RECORDS = 16
VALUE = b"x" * 1024


def _batch(producer_id: int, sequence: int) -> record_batch.CheckedBatch:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=1,
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=sequence,
        batch_size=1 << 20,
    )
    for i in range(RECORDS):
        builder.append(offset=i, timestamp=1000, key=None, value=VALUE, headers=[])
    return record_batch.check_produced(bytes(builder.build()))


def build(directory: Path, megabytes: int, segment_bytes: int) -> tuple[int, int]:
    """The log; (batches, markers) written."""
    log = PartitionLog.open(directory, segment_bytes=segment_bytes)
    sequences = dict.fromkeys(range(1, PRODUCERS + 1), 0)
    batches = markers = 0
    producer = 0
    while log.size_bytes < megabytes << 20:
        producer = producer % PRODUCERS + 1
        for _ in range(BATCHES_PER_TXN):
            log.append_as_leader(_batch(producer, sequences[producer]), leader_epoch=0, now_ms=1000)
            sequences[producer] += RECORDS
            batches += 1
        marker = control_records.marker_batch(
            control_type=ControlRecordType.COMMIT if markers % 2 else ControlRecordType.ABORT,
            producer_id=producer,
            producer_epoch=0,
            coordinator_epoch=0,
            timestamp_ms=2000,
        )
        log.append_marker_as_leader(marker, leader_epoch=0, now_ms=2000)
        markers += 1
    log.flush()
    log.close()
    return batches, markers


async def _measured(load: Callable[[], object]) -> tuple[float, float]:
    """(seconds `load` took, the longest event-loop stall meanwhile)."""
    stalls = [0.0]
    done = asyncio.Event()

    async def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            stalls[0] = max(stalls[0], now - last)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.01)
    start = time.perf_counter()
    result = load()
    if asyncio.iscoroutine(result):
        await result
    took = time.perf_counter() - start
    done.set()
    await ticker
    return took, stalls[0]


def _load_on_loop(log: PartitionLog) -> Callable[[], object]:
    return lambda: log.producer_state


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--segment-mb", type=int, default=64)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="jbod-pstate-"))
    try:
        directory = base / "t-0"
        directory.mkdir()
        started = time.perf_counter()
        batches, markers = build(directory, args.mb, args.segment_mb << 20)
        print(
            f"built {args.mb} MB: {batches} batches, {markers} markers, "
            f"in {time.perf_counter() - started:.1f} s"
        )
        snapshot = directory / producers.SNAPSHOT_FILE
        at_roll = snapshot.read_bytes() if snapshot.exists() else None
        snapshot.unlink(missing_ok=True)
        rows: list[tuple[str, float, float, object]] = []

        async def run() -> None:
            log = PartitionLog.open(directory, segment_bytes=args.segment_mb << 20)
            took, stall = await _measured(_load_on_loop(log))
            state = log.producer_state
            rows.append(("replay", took, stall, len(state.producers)))
            log.close()
            snapshot.unlink(missing_ok=True)
            log = PartitionLog.open(directory, segment_bytes=args.segment_mb << 20)
            took, stall = await _measured(log.load_transactions_off_loop)
            assert log.producer_state == state and log.transactions_loaded
            rows.append(("replay off loop", took, stall, len(state.producers)))
            log.close()
            if at_roll is not None:
                snapshot.write_bytes(at_roll)
                log = PartitionLog.open(directory, segment_bytes=args.segment_mb << 20)
                took, stall = await _measured(_load_on_loop(log))
                assert log.producer_state == state
                rows.append(("roll snapshot", took, stall, len(state.producers)))
                log.close()
            log = PartitionLog.open(directory, segment_bytes=args.segment_mb << 20)
            producers.save(log, state)  # what a clean shutdown writes
            log.close()
            log = PartitionLog.open(directory, segment_bytes=args.segment_mb << 20)
            took, stall = await _measured(_load_on_loop(log))
            assert log.producer_state == state
            rows.append(("shutdown snapshot", took, stall, len(state.producers)))
            log.close()

        asyncio.run(run())
        print(f"{'load':<20} {'seconds':>8} {'longest loop stall s':>21} {'producers':>10}")
        for name, took, stall, count in rows:
            print(f"{name:<20} {took:>8.3f} {stall:>21.3f} {count!s:>10}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
