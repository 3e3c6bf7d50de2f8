"""Data-plane benchmark 3: moving a 1 GiB leader replica to the broker's other log dir, unthrottled
and throttled, and what a producer on that partition sees meanwhile.

Cluster: one `jbod-controller` and 3 `jbod-agent` processes with the agent's default intervals
(heartbeat 2000 ms, probe 1000 ms), each with 2 log dirs that are plain directories on the
machine's disk (both dirs of a broker share one device here: the copy reads and writes the
same disk, where a real JBOD would read one and write another). One topic, 1 partition, RF 3,
`min.insync.replicas` 2: the moved replica is the leader's, which takes the writes while it moves
(RF 3 rather than RF 1, so that acks=-1 involves followers fetching from the moving leader).

1. Fill: producer processes (`bench.produce_throughput --worker`, 1 MiB batches) write to the
   partition as fast as they can until the leader's replica holds `--size` (default 1 GiB;
   quick: 128 MiB); then the followers are waited for (full ISR).
2. Light load for the rest of the benchmark: a confluent-kafka producer (`bench.common.PacedProducer`:
   Kafka's defaults, idempotent, acks=all) sends a 1 KiB record every 20 ms to the partition, from
   a thread of this process; every record's send → ack latency is kept.
3. BASELINE: the load alone for `--baseline` seconds (default 20, quick 5).
4. Moves of the leader's replica, each timed from just before `POST /v1/log-dirs/move` (through
   `jbod_client.broker.BrokerClient.move`) to the first `GET /v1/log-dirs` (polled every 50 ms)
   that shows the replica in the destination dir and no `future: true` replica: UNTHROTTLED
   (dir 0 → dir 1), then THROTTLED at `--throttle` MiB/s (default 50; back to dir 0).
   For each: the latency of the records sent during the move, the longest time the leader's
   `/healthz` went unanswered (polled every 50 ms: how long its event loop was blocked), and
   the leader's CPU seconds.

All in one table. The disk needs room for the replica 4 times (3 replicas and the copy); checked
with `shutil.disk_usage` before anything is written. Everything is deleted at the end.

    python -m bench.replica_move [--quick] [--size MiB] [--throttle MiB/s] [--baseline S]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import time
from typing import Any

from bench.common import (
    AgentCluster,
    BenchError,
    Figure,
    PacedProducer,
    Responsiveness,
    Workspace,
    admin_token_setting,
    agent_cluster,
    base_parser,
    bench_main,
    cpu_seconds,
    create_topic,
    full_isr,
    latency_stats,
    log,
    machine_load,
    print_table,
    replica_dir,
    wait_until,
)
from bench.produce_throughput import ProducerProcess

TOPIC = "move"
PARTITION = 0
SETTINGS = {"broker.heartbeat.interval.ms": "2000", "log.dir.probe.interval.ms": "1000"}  # the defaults
MIB = 1 << 20
LOAD_INTERVAL_S = 0.02
GOAL_S = float("inf")  # no goal for the move itself


def replica_entries(cluster: AgentCluster, node_id: int) -> list[tuple[str, dict[str, Any]]]:
    """(directory id, replica entry) of every replica of the benchmark's partition on a broker."""
    return [
        (d["directoryId"], r)
        for d in cluster.log_dirs(node_id)
        for r in d["replicas"]
        if r["topic"] == TOPIC and r["partition"] == PARTITION
    ]


def replica_size(cluster: AgentCluster, node_id: int) -> int:
    return max((r["sizeBytes"] for _, r in replica_entries(cluster, node_id) if not r["future"]), default=0)


def fill(cluster: AgentCluster, ws: Workspace, leader: int, *, size: int, producers: int) -> float:
    """Produce until the leader's replica holds `size` bytes; the rate in MB/s (10^6)."""
    workers = [
        ProducerProcess(
            cluster,
            TOPIC,
            ws.root / f"fill-{i}",
            partition=PARTITION,
            extra=["--batch-bytes", str(MIB), "--buffer-bytes", str(4 * MIB)],
        ).start()
        for i in range(producers)
    ]
    for worker in workers:
        worker.ready()
    started = time.monotonic()
    for worker in workers:
        worker.go()
    last = 0
    while (current := replica_size(cluster, leader)) < size:
        if time.monotonic() - started > 3600:
            raise BenchError(f"the replica holds {current:,} bytes after an hour of producing")
        if current // (256 * MIB) > last // (256 * MIB):
            log(
                f"    filled {current / MIB:,.0f} MiB ({current / 1e6 / (time.monotonic() - started):.1f} MB/s)"
            )
        last = current
        time.sleep(0.5)
    seconds = time.monotonic() - started
    for worker in workers:
        worker.stop()
    failed = 0
    for worker in workers:
        result = worker.collect()
        failed += sum(result.errors.values())
    if failed:
        log(f"    note: {failed} records failed while filling")
    return current / 1e6 / seconds


def move(
    cluster: AgentCluster, leader: int, destination: str, *, rate: int | None
) -> tuple[float, float, int]:
    """Move the leader's replica; (seconds until done, longest /healthz gap, bytes moved)."""
    from jbod_client.broker import BrokerClient

    async def request() -> dict[str, Any]:
        async with BrokerClient(cluster.brokers[leader].url, token=cluster.token()) as client:
            return await client.move(TOPIC, PARTITION, destination, max_bytes_per_second=rate)

    def done() -> bool:
        entries = replica_entries(cluster, leader)
        return len(entries) == 1 and entries[0][0] == destination and not entries[0][1]["future"]

    size = replica_size(cluster, leader)
    with Responsiveness(cluster.brokers[leader].url) as http:
        started = time.monotonic()
        reply = asyncio.run(request())
        if reply.get("errorCode", 0) != 0:
            raise BenchError(f"move refused: {reply}")
        wait_until(done, timeout=3600, interval=0.05, what="the move to finish")
        seconds = time.monotonic() - started
    return seconds, http.longest, size


def run(args: argparse.Namespace) -> list[Figure]:
    size = (args.size or (128 if args.quick else 1024)) * MIB
    baseline_s = args.baseline or (5.0 if args.quick else 20.0)
    rows: list[list[str]] = []
    figures: list[Figure] = []
    with Workspace(keep=args.keep) as ws:
        free = shutil.disk_usage(ws.root).free
        needed = 4 * size + 2 * 1024 * MIB
        if free < needed:
            raise SystemExit(
                f"replica_move needs {needed / MIB:,.0f} MiB free under {ws.root}, has {free / MIB:,.0f}"
            )
        with agent_cluster(ws) as cluster:
            settings = {**SETTINGS, **admin_token_setting(cluster)}
            for node in (1, 2, 3):
                cluster.add_broker(node, dirs=2, settings=settings)
            cluster.wait_unfenced(1, 2, 3)
            topic = create_topic(cluster, TOPIC, partitions=1, rf=3, configs={"min.insync.replicas": "2"})
            leader = topic["partitions"][PARTITION]["leader"]
            dir_ids = [d["directoryId"] for d in cluster.log_dirs(leader)]
            source = replica_dir(topic, PARTITION, leader)
            other = next(d for d in dir_ids if d != source)
            log(
                f"  cluster: 3 agents x 2 plain dirs under {ws.root} ({free / 2**30:,.0f} GiB free); topic {TOPIC}: "
                f"1 partition x RF 3, min.insync.replicas 2; leader broker {leader}, its replica in {source}"
            )
            rate = fill(cluster, ws, leader, size=size, producers=args.fill_producers)
            log(
                f"  filled the leader's replica to {replica_size(cluster, leader) / MIB:,.0f} MiB at {rate:.1f} MB/s "
                f"({args.fill_producers} producer processes, 1 MiB batches, acks=-1) ({machine_load()})"
            )
            full_isr(cluster, TOPIC, timeout=600)
            pid = cluster.pid(leader)
            with PacedProducer(cluster, TOPIC, PARTITION, interval=LOAD_INTERVAL_S) as producer:
                time.sleep(2.0)  # warm-up
                cpu0 = cpu_seconds(pid)
                with Responsiveness(cluster.brokers[leader].url) as http:
                    start = time.monotonic()
                    time.sleep(baseline_s)
                    end = time.monotonic()
                stats = latency_stats(producer.settled(start, end))
                cpu = cpu_seconds(pid) - cpu0
                rows.append(
                    row(
                        "baseline (no move)", end - start, None, stats, http.longest, cpu, load=machine_load()
                    )
                )
                log(f"  {describe(rows[-1])}")
                baseline = stats
                for label, destination, throttle in (
                    ("move, unthrottled", other, None),
                    (f"move, throttled {args.throttle} MiB/s", source, args.throttle * MIB),
                ):
                    time.sleep(2.0)
                    cpu0 = cpu_seconds(pid)
                    start = time.monotonic()
                    seconds, gap, moved = move(cluster, leader, destination, rate=throttle)
                    end = time.monotonic()
                    stats = latency_stats(producer.settled(start, end))
                    cpu = cpu_seconds(pid) - cpu0
                    rows.append(row(label, seconds, moved, stats, gap, cpu, load=machine_load()))
                    log(f"  {describe(rows[-1])}")
                    figures.append(
                        Figure(
                            name=f"replica move of {moved / MIB:,.0f} MiB, {label.removeprefix('move, ')}: duration",
                            measured=seconds,
                            unit="s",
                            goal=GOAL_S,
                            detail=f"{moved / MIB / seconds:.0f} MiB/s; produce p99 {stats['p99'] * 1000:.0f} ms "
                            f"(baseline {baseline['p99'] * 1000:.0f} ms)",
                        )
                    )
                    figures.append(
                        Figure(
                            name=f"produce latency p99 during the {label.removeprefix('move, ')} move "
                            f"(baseline p99 {baseline['p99'] * 1000:.0f} ms)",
                            measured=stats["p99"],
                            unit="s",
                            goal=GOAL_S,
                        )
                    )
    print()
    print(
        f"leader replica moved between the leader's two dirs while a 1 KiB acks=-1 record is produced every "
        f"{LOAD_INTERVAL_S * 1000:.0f} ms to the same partition (send → ack latency of the records sent in the window)"
    )
    print_table(
        [
            "phase",
            "duration",
            "moved",
            "MiB/s",
            "records",
            "failed",
            "p50",
            "p99",
            "max",
            "/healthz gap",
            "leader CPU",
            "load avg after",
        ],
        rows,
    )
    return figures


def row(
    label: str,
    seconds: float,
    moved: int | None,
    stats: dict[str, float],
    gap: float,
    cpu: float,
    *,
    load: str,
) -> list[str]:
    return [
        label,
        f"{seconds:.1f} s",
        "-" if moved is None else f"{moved / MIB:,.0f} MiB",
        "-" if moved is None else f"{moved / MIB / seconds:.0f}",
        f"{int(stats['count']):,}",
        f"{int(stats['failed'])}",
        f"{stats['p50'] * 1000:.1f} ms",
        f"{stats['p99'] * 1000:.1f} ms",
        f"{stats['max'] * 1000:.1f} ms",
        f"{gap * 1000:.0f} ms",
        f"{cpu:.1f} s ({cpu / seconds * 100:.0f}%)",
        load.removeprefix("load average ").removesuffix(" on 2 cores"),
    ]


def describe(cells: list[str]) -> str:
    label, duration, moved, rate, records, failed, p50, p99, longest, gap, cpu, load = cells
    what = f"{moved} in {duration} ({rate} MiB/s)" if moved != "-" else duration
    return (
        f"{label}: {what}; {records} records sent meanwhile, {failed} failed, send → ack p50 {p50}, p99 {p99}, "
        f"max {longest}; leader's /healthz unanswered for up to {gap}; leader CPU {cpu}; load average {load}"
    )


def main() -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=0, help="replica size in MiB (default 1024, quick 128)")
    parser.add_argument("--throttle", type=int, default=50, help="throttled move rate in MiB/s (default 50)")
    parser.add_argument("--baseline", type=float, default=0, help="baseline window in seconds (default 20)")
    parser.add_argument(
        "--fill-producers", type=int, default=2, help="producer processes filling (default 2)"
    )
    return bench_main("replica move", parser, run)


if __name__ == "__main__":
    raise SystemExit(main())
