"""Run every benchmark (controller, broker agent, pipeline) and print one summary table: figure, measured, goal, met?

    python -m bench.run_all [--quick] [--only offline_dir,heartbeats,...]   (also: make bench)

Each benchmark runs as its own child process (`python -m bench.<name>`), so one's memory and
processes never leak into the next; its own report streams through as it runs. Benchmarks print
figures; they assert nothing, and this script exits 0 even when a goal is missed (non-zero only
if a benchmark fails to run). With `--quick` every benchmark runs scaled down (a smoke run): its
figures are for the smaller sizes and are not comparable with the goals.

The `agent_*` benchmarks run real `jbod-agent` processes; `agent_detection` needs root (it fails
loop-mounted ext4 volumes), `agent_idle` uses loop volumes when it can. The data-plane
benchmarks (`produce_throughput`, `failover`, `replica_move`) run 3 agents and librdkafka
(confluent-kafka) producers on their Kafka listeners; `failover` needs root (loop volumes),
`replica_move` writes 4 x 1 GiB to the temp dir's disk. `kafka_peer` runs Apache Kafka
4.3 (1 controller + 3 brokers, Java) and our cluster in turn, driven by Kafka's perf tools, and
an idle cluster of 10,000 replicas of each. `reassign_throttle` runs 4 agents and Kafka's
`kafka-reassign-partitions.sh` (Java): produce latency with and without a throttled reassignment.
`tls_throughput` runs 3 agents with SASL_SSL and https replication, then with SASL_PLAINTEXT:
throughput and broker CPU per MB side by side (issue 25).
`compaction` runs one agent and one Apache Kafka 4.3 node side by side: the log cleaner's MB/s per
dir, produce latency while it cleans, and `__consumer_offsets` load time before and after
compaction (issue 32; writes some 1 GB to the temp dir's disk).
`transactions` runs our 3 agents and Apache Kafka 4.3 (1 controller + 3 brokers) in turn:
transactional produce (confluent-kafka producers, transactions of 100 x 1 KiB, acks=all, RF 3),
records/s and `commit_transaction()` p50 / p99 side by side (issue 33).
`disk_gray_failures` runs our 3 agents and Apache Kafka 4.3 in turn (root: loop volumes and
cgroup v1 blkio throttling): how long until a slow and a hung disk's leaderships move (issue 35).
`disk_migration` runs 3 agents: produce latency while every broker's disk is drained into a new
volume, as the operator migrates a disk, against the same load without (issue 35).
`pipeline_scale` runs `jbod-pipeline` on Spark local[2] (Java 17 and the `pipeline` extra).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import Figure, machine_load, print_table, system_cpu

BENCHMARKS = (
    "offline_dir",
    "heartbeats",
    "restart",
    "recovery",
    "agent_detection",
    "agent_restart",
    "agent_idle",
    "produce_throughput",
    "failover",
    "replica_move",
    "kafka_peer",
    "reassign_throttle",
    "tls_throughput",
    "compaction",
    "transactions",
    "disk_gray_failures",
    "disk_migration",
    "pipeline_scale",
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="scaled-down smoke runs")
    parser.add_argument("--only", default="", help=f"comma-separated subset of {', '.join(BENCHMARKS)}")
    parser.add_argument("--keep", action="store_true", help="keep the benchmarks' temp dirs")
    args = parser.parse_args()
    chosen = [b.strip() for b in args.only.split(",") if b.strip()] or list(BENCHMARKS)
    unknown = sorted(set(chosen) - set(BENCHMARKS))
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}")
    rows: list[list[str]] = []
    failed: list[str] = []
    started = time.perf_counter()
    busy0, total0 = system_cpu()
    with tempfile.TemporaryDirectory(prefix="jbod-bench-results-") as tmp:
        for name in chosen:
            out = Path(tmp) / f"{name}.json"
            command = [sys.executable, "-m", f"bench.{name}", "--results-json", str(out)]
            command += ["--quick"] if args.quick else []
            command += ["--keep"] if args.keep else []
            print(f"\n$ {' '.join(command[1:3])}{' --quick' if args.quick else ''}", flush=True)
            code = subprocess.call(command)
            if code != 0 or not out.exists():
                failed.append(name)
                rows.append([f"{name}: FAILED (exit {code})", "-", "-", "-"])
                continue
            for data in json.loads(out.read_text()):
                figure = Figure(**data)
                rows.append(
                    [figure.name, figure.measured_text(), figure.goal_text(), "yes" if figure.met else "NO"]
                )
    busy1, total1 = system_cpu()
    print(
        f"\n== summary{' (QUICK smoke run: scaled-down sizes, not comparable with the goals)' if args.quick else ''}"
        f" - {time.perf_counter() - started:.0f} s; machine CPU busy {(busy1 - busy0) / (total1 - total0) * 100:.0f}%"
        f" over the whole run, {machine_load()}"
    )
    print_table(["figure", "measured", "goal", "met?"], rows)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
