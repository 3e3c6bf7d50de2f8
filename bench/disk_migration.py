"""Data-plane benchmark: a disk migrated to a new volume under load (issue 35), and what an acks=all
producer sees meanwhile, against the same load with no migration.

What the operator does when a disk moves to another size or StorageClass, driven here by hand on
a local cluster (no Kubernetes): every broker has its data dir `d0` and the disk's new volume
`d1`, cordoned at start (`cordoned.log.dirs`) as a new volume is until its drain begins, so every
replica is placed in `d0`.

Cluster: one `jbod-controller` and 3 `jbod-agent` processes (the agent's default intervals), two
plain directories each on the machine's disk (both share one device here: the copy reads and
writes the same disk, where real volumes would be two). One topic of `--partitions` partitions
(default 6), RF 3, `min.insync.replicas` 2.

1. Fill: producer processes (`bench.produce_throughput --worker`, 1 MiB batches, acks=-1) write
   to every partition until broker 1's `d0` holds `--size` MiB (default 512; quick 96).
2. Light load for the rest of the benchmark: a confluent-kafka producer (`bench.common.PacedProducer`,
   idempotent, acks=all) sends a 1 KiB record every 20 ms to partition 0.
3. BASELINE: the load alone for `--baseline` seconds (default 30, quick 10).
4. MIGRATION: on every broker at once, `d0` is cordoned and `d1` uncordoned (the dynamic
   `cordoned.log.dirs`, as the operator sets it), then every replica in `d0` is moved into `d1`
   (`POST /v1/log-dirs/move`, the broker's own move, at `--throttle` MiB/s each, at most
   `--in-flight` at once per broker: the operator's `spec.drain` defaults), timed until no
   replica is left in any `d0`. The latency of the records sent meanwhile is compared with the
   baseline's; every record acknowledged is counted.

    python -m bench.disk_migration [--quick] [--size MiB] [--throttle MiB/s] [--in-flight N]
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
    Workspace,
    admin_token_setting,
    agent_cluster,
    base_parser,
    bench_main,
    create_topic,
    full_isr,
    latency_stats,
    log,
    machine_load,
    print_table,
    wait_until,
)
from bench.produce_throughput import ProducerProcess
from jbod_core.messages import AlterBrokerConfigsRequest, AlterConfigOp

TOPIC = "migrate"
MIB = 1 << 20
LOAD_INTERVAL_S = 0.02
GOAL_S = float("inf")  # no goal: the figure is the comparison with the baseline
BROKERS = (1, 2, 3)


def dir_path(cluster: AgentCluster, node: int, index: int) -> str:
    return str(cluster.ws.root / f"broker-{node}" / f"d{index}")


def replicas_in(cluster: AgentCluster, node: int, path: str) -> list[dict[str, Any]]:
    """The replicas (current and future) of the topic in a broker's dir at `path`."""
    return [
        r
        for d in cluster.log_dirs(node)
        if d["path"].rstrip("/") == path
        for r in d["replicas"]
        if r["topic"] == TOPIC
    ]


def used_bytes(cluster: AgentCluster, node: int, path: str) -> int:
    return sum(int(r["sizeBytes"]) for r in replicas_in(cluster, node, path) if not r["future"])


def cordon(cluster: AgentCluster, node: int, path: str) -> None:
    op = AlterConfigOp(name="cordoned.log.dirs", op="SET", value=path)
    reply = cluster.admin.alter_broker_configs(str(node), AlterBrokerConfigsRequest(configs=[op]))
    if reply.error_code != 0:
        raise BenchError(f"cordoned.log.dirs of broker {node}: {reply}")


def fill(cluster: AgentCluster, ws: Workspace, *, size: int, partitions: int, producers: int) -> float:
    """Produce until broker 1's d0 holds `size` bytes; the rate in MB/s (10^6)."""
    workers = [
        ProducerProcess(
            cluster,
            TOPIC,
            ws.root / f"fill-{i}",
            partition=i % partitions,
            extra=["--batch-bytes", str(MIB), "--buffer-bytes", str(4 * MIB)],
        ).start()
        for i in range(max(producers, 1))
    ]
    for worker in workers:
        worker.ready()
    started = time.monotonic()
    for worker in workers:
        worker.go()
    source = dir_path(cluster, 1, 0)
    while (current := used_bytes(cluster, 1, source)) < size:
        if time.monotonic() - started > 3600:
            raise BenchError(f"d0 of broker 1 holds {current:,} bytes after an hour of producing")
        time.sleep(0.5)
    seconds = time.monotonic() - started
    for worker in workers:
        worker.stop()
    for worker in workers:
        worker.collect()
    return current / 1e6 / seconds


def migrate(cluster: AgentCluster, *, rate: int, in_flight: int) -> tuple[float, int, int]:
    """Every broker's d0 into its d1, as the operator drains a moved disk; (seconds, replicas
    moved, bytes moved)."""
    from jbod_client.broker import BrokerClient

    targets = {
        node: next(
            d["directoryId"]
            for d in cluster.log_dirs(node)
            if d["path"].rstrip("/") == dir_path(cluster, node, 1)
        )
        for node in BROKERS
    }
    total_replicas = sum(len(replicas_in(cluster, node, dir_path(cluster, node, 0))) for node in BROKERS)
    total_bytes = sum(used_bytes(cluster, node, dir_path(cluster, node, 0)) for node in BROKERS)
    asked: set[tuple[int, int]] = set()

    async def request(node: int, partition: int) -> None:
        async with BrokerClient(cluster.brokers[node].url, token=cluster.token()) as client:
            reply = await client.move(TOPIC, partition, targets[node], max_bytes_per_second=rate)
        if reply.get("errorCode", 0) != 0:
            raise BenchError(f"move of {TOPIC}-{partition} on broker {node} refused: {reply}")

    def step() -> bool:
        """Ask for the next moves; True once no replica is left in any d0."""
        left = 0
        for node in BROKERS:
            here = replicas_in(cluster, node, dir_path(cluster, node, 0))
            left += len(here)
            moving = sum(1 for key in asked if key[0] == node and any(r["partition"] == key[1] for r in here))
            for replica in here:
                key = (node, int(replica["partition"]))
                if key in asked or moving >= in_flight:
                    continue
                asyncio.run(request(*key))
                asked.add(key)
                moving += 1
        return left == 0

    started = time.monotonic()
    for node in BROKERS:
        cordon(cluster, node, dir_path(cluster, node, 0))
    wait_until(step, timeout=3600, interval=0.2, what="every replica moved out of d0")
    return time.monotonic() - started, total_replicas, total_bytes


def run(args: argparse.Namespace) -> list[Figure]:
    size = (args.size or (96 if args.quick else 512)) * MIB
    baseline_s = args.baseline or (10.0 if args.quick else 30.0)
    rows: list[list[str]] = []
    with Workspace(keep=args.keep) as ws:
        free = shutil.disk_usage(ws.root).free
        needed = 3 * 2 * size + 2 * 1024 * MIB
        if free < needed:
            raise SystemExit(
                f"disk_migration needs {needed / MIB:,.0f} MiB free under {ws.root}, has {free / MIB:,.0f}"
            )
        with agent_cluster(ws) as cluster:
            for node in BROKERS:
                new_volume = str(ws.root / f"broker-{node}" / "d1")
                settings = {**admin_token_setting(cluster), "cordoned.log.dirs": new_volume}
                cluster.add_broker(node, dirs=2, settings=settings)
            cluster.wait_unfenced(*BROKERS)
            create_topic(
                cluster, TOPIC, partitions=args.partitions, rf=3, configs={"min.insync.replicas": "2"}
            )
            log(
                f"  cluster: 3 agents x 2 plain dirs under {ws.root}; topic {TOPIC}: {args.partitions} partitions x RF 3, every replica in d0"
            )
            rate = fill(cluster, ws, size=size, partitions=args.partitions, producers=args.fill_producers)
            full_isr(cluster, TOPIC, timeout=600)
            log(
                f"  filled broker 1's d0 to {used_bytes(cluster, 1, dir_path(cluster, 1, 0)) / MIB:,.0f} MiB at {rate:.1f} MB/s ({machine_load()})"
            )
            with PacedProducer(cluster, TOPIC, 0, interval=LOAD_INTERVAL_S) as producer:
                time.sleep(2.0)  # warm-up
                start = time.monotonic()
                time.sleep(baseline_s)
                end = time.monotonic()
                baseline = latency_stats(producer.settled(start, end))
                rows.append(
                    row("no migration (baseline)", end - start, None, None, baseline, load=machine_load())
                )
                log(f"  {' | '.join(rows[-1])}")
                start = time.monotonic()
                seconds, replicas, moved = migrate(
                    cluster, rate=args.throttle * MIB, in_flight=args.in_flight
                )
                end = time.monotonic()
                during = latency_stats(producer.settled(start, end))
                rows.append(
                    row("disk migration d0 → d1", seconds, replicas, moved, during, load=machine_load())
                )
                log(f"  {' | '.join(rows[-1])}")
    print()
    print(
        f"every broker's d0 migrated into its new volume d1 ({args.throttle} MiB/s per move, at most {args.in_flight} "
        f"at once per broker) while a 1 KiB acks=all record is produced every {LOAD_INTERVAL_S * 1000:.0f} ms to "
        "partition 0 (send → ack latency of the records sent in the window)"
    )
    print_table(
        [
            "phase",
            "duration",
            "replicas moved",
            "MiB moved",
            "records",
            "failed",
            "p50",
            "p99",
            "max",
            "load avg after",
        ],
        rows,
    )
    return [
        Figure(
            name=f"produce latency p99 during a disk migration (baseline p99 {baseline['p99'] * 1000:.0f} ms)",
            measured=during["p99"],
            unit="s",
            goal=GOAL_S,
            detail=f"{replicas} replicas, {moved / MIB:,.0f} MiB in {seconds:.0f} s; failed {int(during['failed'])}",
        )
    ]


def row(
    label: str, seconds: float, replicas: int | None, moved: int | None, stats: dict[str, float], *, load: str
) -> list[str]:
    return [
        label,
        f"{seconds:.1f} s",
        "-" if replicas is None else str(replicas),
        "-" if moved is None else f"{moved / MIB:,.0f}",
        f"{int(stats['count']):,}",
        f"{int(stats['failed'])}",
        f"{stats['p50'] * 1000:.1f} ms",
        f"{stats['p99'] * 1000:.1f} ms",
        f"{stats['max'] * 1000:.1f} ms",
        load.removeprefix("load average ").removesuffix(" on 2 cores"),
    ]


def main() -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=0, help="MiB in broker 1's d0 (default 512, quick 96)")
    parser.add_argument("--partitions", type=int, default=6, help="partitions of the topic (default 6)")
    parser.add_argument("--throttle", type=int, default=50, help="rate of each move in MiB/s (default 50)")
    parser.add_argument("--in-flight", type=int, default=5, help="moves at once per broker (default 5)")
    parser.add_argument("--baseline", type=float, default=0, help="baseline window in seconds (default 30)")
    parser.add_argument(
        "--fill-producers", type=int, default=3, help="producer processes filling (default 3)"
    )
    return bench_main("disk migration", parser, run)


if __name__ == "__main__":
    raise SystemExit(main())
