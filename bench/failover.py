"""Data-plane benchmark 2: the disk under a partition leader fails while a producer writes (acks=-1)
→ the first record acknowledged by the new leader.

Cluster: one `jbod-controller` (broker session timeout 9 s) and 3 `jbod-agent` processes, each
with 2 log dirs on loop-mounted ext4 volumes (`tests.fs.loop_ext4`, needs root), with the agent's
default intervals (`log.dir.probe.interval.ms` 1000, `broker.heartbeat.interval.ms` 2000;
`--probe-ms` / `--heartbeat-ms` change them). One topic, 1 partition, RF 3,
`min.insync.replicas` 2. A `jbod_client.producer.Producer` with its defaults (acks=-1, retry
backoff 100 ms doubling to 1 s, request timeout 15 s) sends a 1 KiB record to that partition
every 10 ms (`--interval-ms`) for the whole benchmark, from a thread of this process.

Each run: the partition's ISR is full and records are being acknowledged; after a random pause
of 0-1 probe interval (so the fault does not fall at the same point of the probe cycle every
run), the volume holding the leader's replica is shut down (EXT4_IOC_SHUTDOWN: every later I/O
returns EIO). Measured from the fault (`time.monotonic()` just before the ioctl):

* FAILOVER: the first record acknowledged with an offset beyond every offset the old leader
  acknowledged, sent to a leader other than the old one (the producer's metadata when the ack
  arrived), the controller naming that broker as the leader (checked right after). This is what
  a producer sees: when writes work again.
* the breakdown: the old leader's log line "Took log dir ... offline" (its event loop noticed:
  a failed append or a probe), and the controller's view (`GET /v1/topics/<topic>`, polled every
  10 ms) showing another leader.

Between runs (not timed): the damaged broker stops (SIGTERM), its failed volume is pulled out
and replaced by a new empty one, `jbod-storage format --ignore-formatted` gives it a new
directory id, the broker starts again, re-creates its replica and catches up; the next run
waits for the full ISR. Leadership stays where it moved, so the runs rotate over the brokers.

    python -m bench.failover [--quick] [--runs N] [--probe-ms MS] [--heartbeat-ms MS] [--interval-ms MS]
"""

from __future__ import annotations

import argparse
import math
import random
import time
from typing import Any

from bench.common import (
    AgentCluster,
    BenchError,
    Figure,
    PacedProducer,
    TimedRecord,
    Workspace,
    admin_token_setting,
    agent_cluster,
    agent_log,
    base_parser,
    bench_main,
    can_loop_mount,
    create_topic,
    dir_index,
    full_isr,
    latency_stats,
    log,
    log_size,
    machine_load,
    percentile,
    print_table,
    replica_dir,
    wait_until,
)

GOAL_S = 2.0
TOPIC = "failover"
PARTITION = 0
VOLUME_MB = 512  # sparse images; the partition grows ~100 KB/s at the default rate


def first_new_leader_ack(producer: PacedProducer, *, fault_at: float, old_leader: int) -> TimedRecord | None:
    """The first record acknowledged after the fault by another leader, beyond the old leader's offsets."""
    records = list(producer.records)
    old_max = max((r.offset for r in records if r.leader == old_leader and r.offset >= 0), default=-1)
    acked = sorted(
        (
            r
            for r in records
            if r.acked_at >= fault_at and r.leader not in (old_leader, -1) and r.offset > old_max
        ),
        key=lambda r: r.acked_at,
    )
    return acked[0] if acked else None


def steady(producer: PacedProducer, *, since: float) -> bool:
    """Records sent since `since` are being acknowledged (the last second had acks)."""
    now = time.monotonic()
    return any(r.acked_at >= max(since, now - 1.0) for r in list(producer.records)[-200:])


def one_run(
    cluster: AgentCluster, producer: PacedProducer, number: int, rng: random.Random, *, probe_ms: int
) -> dict[str, Any]:
    topic = full_isr(cluster, TOPIC, timeout=300)
    settled_at = time.monotonic()
    wait_until(
        lambda: steady(producer, since=settled_at), timeout=60, what="acknowledgements before the fault"
    )
    part = topic["partitions"][PARTITION]
    old_leader = part["leader"]
    directory = replica_dir(topic, PARTITION, old_leader)
    index = dir_index(cluster, old_leader, directory)
    mount = cluster.mounts[(old_leader, index)]
    agent_log_path = cluster.brokers[old_leader].log_path
    offset = log_size(agent_log_path)
    retries_before = len(producer.retries)
    time.sleep(rng.uniform(0, probe_ms / 1000))

    # -- the fault; poll the controller until it names another leader, then wait for the producer
    fault_wall = time.time()
    fault_at = time.monotonic()
    mount.shutdown()
    moved: float | None = None
    first: TimedRecord | None = None
    while first is None:
        now = time.monotonic()
        if moved is None:
            leader = cluster.admin.describe_topic(TOPIC)["partitions"][PARTITION]["leader"]
            if leader not in (old_leader, -1):
                moved = time.monotonic() - fault_at
        first = first_new_leader_ack(producer, fault_at=fault_at, old_leader=old_leader)
        if now - fault_at > 120:
            raise BenchError(f"run {number}: no acknowledgement by a new leader 120 s after the fault")
        time.sleep(0.01)
    failover = first.acked_at - fault_at
    controller_leader = cluster.admin.describe_topic(TOPIC)["partitions"][PARTITION]["leader"]
    if controller_leader != first.leader:
        raise BenchError(
            f"run {number}: the producer's new leader {first.leader} is not the controller's {controller_leader}"
        )
    offline_lines = wait_until(
        lambda: agent_log(agent_log_path, offset=offset, contains=f"Took log dir {mount.path} "),
        timeout=30,
        what="the old leader's offline line",
    )
    retries = producer.retries[retries_before:]
    retry_codes = [code for _, code in retries]
    result = {
        "failover": failover,
        "offline": offline_lines[0].at - fault_wall,
        "moved": moved if moved is not None else failover,
        "error": (retries[0][0] - fault_at) if retries else math.nan,
        "old": old_leader,
        "new": first.leader,
        "offset": first.offset,
        "retries": len(retry_codes),
        "codes": sorted(set(retry_codes)),
        "cause": offline_lines[0].text.partition(" offline: ")[2][:90],
    }

    # -- back to three healthy brokers (not timed)
    code = cluster.stop_broker(old_leader)
    cluster.replace_volume(old_leader, index, size_mb=VOLUME_MB)
    broker = cluster.brokers[old_leader]
    broker.format()
    broker.start()
    cluster.wait_unfenced(old_leader)
    result["exit"] = code
    return result


def run(args: argparse.Namespace) -> list[Figure]:
    if not can_loop_mount():
        raise SystemExit("failover needs root and mkfs.ext4/losetup/mount (loop-mounted volumes)")
    runs = args.runs or (3 if args.quick else 20)
    rng = random.Random(2)
    results: list[dict[str, Any]] = []
    with Workspace(keep=args.keep) as ws, agent_cluster(ws) as cluster:
        settings = {
            "log.dir.probe.interval.ms": str(args.probe_ms),
            "broker.heartbeat.interval.ms": str(args.heartbeat_ms),
            **admin_token_setting(cluster),
        }
        for node in (1, 2, 3):
            cluster.add_broker(node, dirs=2, loop=True, size_mb=VOLUME_MB, settings=settings)
        cluster.wait_unfenced(1, 2, 3)
        create_topic(cluster, TOPIC, partitions=1, rf=3, configs={"min.insync.replicas": "2"})
        log(
            f"  cluster: 3 agents x 2 loop ext4 dirs ({VOLUME_MB} MB); probe {args.probe_ms} ms, heartbeat "
            f"{args.heartbeat_ms} ms; topic {TOPIC}: 1 partition x RF 3, min.insync.replicas 2; a 1 KiB "
            f"acks=-1 record every {args.interval_ms} ms; {runs} runs"
        )
        producer = PacedProducer(cluster, TOPIC, PARTITION, interval=args.interval_ms / 1000)
        cluster.stack.callback(producer.stop)
        producer.start()
        started = time.monotonic()
        for number in range(1, runs + 1):
            result = one_run(cluster, producer, number, rng, probe_ms=args.probe_ms)
            results.append(result)
            log(
                f"  run {number}/{runs}: broker {result['old']} → {result['new']}: first ack by the new leader "
                f"{result['failover'] * 1000:.0f} ms (offset {result['offset']}); offline in the old leader "
                f"{result['offline'] * 1000:.0f} ms ({result['cause']}), producer's first error "
                f"{result['error'] * 1000:.0f} ms, controller moved leadership "
                f"{result['moved'] * 1000:.0f} ms; {result['retries']} producer retries (errorCodes "
                f"{result['codes']}); old leader exited {result['exit']} on SIGTERM ({machine_load()})"
            )
        producer.stop()
        everything = latency_stats(producer.window(started, math.inf))
    rows = []
    stats: dict[str, tuple[float, float, float]] = {}
    for key, label in (
        ("offline", "fault → dir offline in the old leader (its log)"),
        ("error", "fault → the producer's first failed attempt (then it backs off)"),
        ("moved", "fault → controller names a new leader (polled)"),
        ("failover", "fault → first ack by the new leader (producer)"),
    ):
        values = sorted(r[key] for r in results if not math.isnan(r[key]))
        if not values:
            continue
        stats[key] = (percentile(values, 0.5), percentile(values, 0.99), values[-1])
        rows.append([label, *(f"{v * 1000:.0f} ms" for v in stats[key])])
    print()
    print_table(["step", "p50", "p99", "max"], rows)
    log(
        f"  producer over the whole benchmark: {int(everything['count']):,} records, "
        f"{int(everything['failed'])} failed (delivery timeout 60 s), p50 {everything['p50'] * 1000:.1f} ms"
    )
    detail = (
        f"{len(results)} runs; probe {args.probe_ms} ms, heartbeat {args.heartbeat_ms} ms; "
        f"a record every {args.interval_ms} ms"
    )
    return [
        Figure(
            "failover: leader's disk fails → first ack by the new leader, p50",
            stats["failover"][0],
            "s",
            GOAL_S,
            detail=detail,
        ),
        Figure(
            "failover: leader's disk fails → first ack by the new leader, p99",
            stats["failover"][1],
            "s",
            GOAL_S,
            detail=detail,
        ),
        Figure(
            "failover: leader's disk fails → first ack by the new leader, max",
            stats["failover"][2],
            "s",
            GOAL_S,
            detail=detail,
        ),
    ]


def main() -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=0, help="faults measured (default 20, quick 3)")
    parser.add_argument("--probe-ms", type=int, default=1000, help="log.dir.probe.interval.ms (default 1000)")
    parser.add_argument(
        "--heartbeat-ms", type=int, default=2000, help="broker.heartbeat.interval.ms (default 2000)"
    )
    parser.add_argument("--interval-ms", type=float, default=10.0, help="one record every ... (default 10)")
    return bench_main("failover", parser, run)


if __name__ == "__main__":
    raise SystemExit(main())
