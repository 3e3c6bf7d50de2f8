"""In-process reproduction of benchmark 4's recovery, for finding where time goes.

Generates a metadata log the way `bench.recovery` does (or reuses `--data-dir` if it holds one),
then runs the controller's recovery steps in-process: `FileRecordLog.recover()` (read + frame scan)
and `service.replay_recovery()` (JSON decode, record decode, image replay), timing each, with the
garbage collector's pauses, once more with the collector disabled, and once under cProfile.

    python -m bench.profile_recovery [--records 1000000] [--data-dir DIR] [--top 25]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import pstats
import shutil
import tempfile
import time
from pathlib import Path

from bench.profile_offline_dir import GcTimer
from bench.recovery import generate_log
from jbod_controller.record_log import FileRecordLog
from jbod_controller.service import replay_recovery


def recover_once(metadata: Path, mode: str, top: int) -> None:
    record_log = FileRecordLog(metadata)
    profiler = cProfile.Profile() if mode == "cProfile" else None
    if mode == "gc disabled":
        gc.disable()
    try:
        with GcTimer() as gc_timer:
            if profiler:
                profiler.enable()
            started, cpu = time.perf_counter(), time.process_time()
            recovery = record_log.recover()
            scanned = time.perf_counter()
            image = replay_recovery(recovery)
            replayed, cpu = time.perf_counter(), time.process_time() - cpu
            if profiler:
                profiler.disable()
    finally:
        gc.enable()
        record_log.close()
    print(
        f"   [{mode}] {len(recovery.entries):,} records: recover() {scanned - started:.2f} s, "
        f"replay_recovery() {replayed - scanned:.2f} s, total {replayed - started:.2f} s "
        f"(CPU {cpu:.2f} s); "
        f"{image.partition_count:,} partitions; gc pauses: {gc_timer.text()}"
    )
    if profiler:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
        print(f"     cProfile (by own time, top {top}):")
        print("\n".join("       " + line for line in out.getvalue().splitlines() if line.strip()))
    del recovery, image
    gc.collect()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--data-dir", type=Path, help="reuse (or create and keep) this data dir")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    tmp = None
    data_dir = args.data_dir
    if data_dir is None:
        tmp = tempfile.mkdtemp(prefix="jbod-bench-profile-")
        data_dir = Path(tmp) / "recovery"
    try:
        metadata = data_dir / "metadata"
        if not any(metadata.glob("*.log")):
            print(f"-- generating a {args.records:,}-record log in {data_dir}")
            partitions = 100_000 if args.records >= 500_000 else 10_000
            generate_log(data_dir, args.records, partitions, seed=1_000_000)
        print(f"-- in-process recovery of {metadata}")
        for mode in ("timed", "gc disabled", "cProfile"):
            recover_once(metadata, mode, args.top)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
