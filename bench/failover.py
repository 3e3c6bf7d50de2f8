"""Data-plane benchmark 2: the disk under a partition leader fails while a producer writes (acks=-1)
→ the first record acknowledged by the new leader.

Cluster: one `jbod-controller` (broker session timeout 9 s) and 3 `jbod-agent` processes, each
with 2 log dirs on loop-mounted ext4 volumes (`tests.fs.loop_ext4`, needs root), with the agent's
default intervals (`log.dir.probe.interval.ms` 1000, `broker.heartbeat.interval.ms` 2000;
`--probe-ms` / `--heartbeat-ms` change them). One topic, 1 partition, RF 3,
`min.insync.replicas` 2. A confluent-kafka (librdkafka) producer with Kafka's producer defaults
(idempotent, acks=all; `bench.common.PacedProducer`) sends a 1 KiB record to that partition every
10 ms (`--interval-ms`) for the whole benchmark, from a thread of this process, on the brokers'
Kafka listeners.

Each run: the partition's ISR is full and records are being acknowledged; after a random pause
of 0-1 probe interval (so the fault does not fall at the same point of the probe cycle every
run), the volume holding the leader's replica is shut down (EXT4_IOC_SHUTDOWN: every later I/O
returns EIO). Measured from the fault (`time.monotonic()` just before the ioctl):

* FAILOVER: the first acknowledgement of a record that a new leader appended: the records at or
  after the first offset of a later leader epoch than the old leader's, as the partition's log
  says (a consumer reads the batches around the change and their partition leader epochs; a
  record acknowledged after the fault below that offset was the old leader's, appended before
  it). This is what a producer sees: when writes work again.
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
    kafka_config,
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


def first_new_epoch_offset(
    cluster: AgentCluster, *, since: int, old_epoch: int, timeout: float = 60.0
) -> int:
    """The first offset at or after `since` of a batch of a later leader epoch than `old_epoch`,
    read from the partition's current leader (a confluent-kafka consumer from `since` on)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(kafka_config(cluster, **{"group.id": "failover-epochs", "enable.auto.commit": False}))
    try:
        consumer.assign([TopicPartition(TOPIC, PARTITION, since)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for message in consumer.consume(500, 0.5):
                offset = message.offset()
                if (
                    message.error() is None
                    and offset is not None
                    and (message.leader_epoch() or -1) > old_epoch
                ):
                    return offset
    finally:
        consumer.close()
    raise BenchError(
        f"no record of a leader epoch after {old_epoch} from offset {since} within {timeout:.0f} s"
    )


def first_new_leader_ack(records: list[TimedRecord], *, fault_at: float, boundary: int) -> TimedRecord | None:
    """The first record acknowledged after the fault at or beyond `boundary` (a new leader's)."""
    acked = [r for r in records if r.acked_at >= fault_at and r.offset >= boundary]
    return min(acked, key=lambda r: r.acked_at) if acked else None


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
    old_leader, old_epoch = part["leader"], part["leaderEpoch"]
    directory = replica_dir(topic, PARTITION, old_leader)
    index = dir_index(cluster, old_leader, directory)
    mount = cluster.mounts[(old_leader, index)]
    agent_log_path = cluster.brokers[old_leader].log_path
    offset = log_size(agent_log_path)
    time.sleep(rng.uniform(0, probe_ms / 1000))

    # -- the fault; poll the controller until it names another leader, and wait until a record
    # sent after the fault is acknowledged (the old leader can append nothing any more)
    fault_wall = time.time()
    fault_at = time.monotonic()
    before = max(
        (r.offset for r in list(producer.records) if r.acked_at < fault_at and r.offset >= 0), default=-1
    )
    mount.shutdown()
    moved: float | None = None
    while moved is None or not any(r.sent_at > fault_at and r.offset >= 0 for r in list(producer.records)):
        if moved is None:
            leader = cluster.admin.describe_topic(TOPIC)["partitions"][PARTITION]["leader"]
            if leader not in (old_leader, -1):
                moved = time.monotonic() - fault_at
        if time.monotonic() - fault_at > 120:
            raise BenchError(f"run {number}: no acknowledgement by a new leader 120 s after the fault")
        time.sleep(0.01)
    boundary = first_new_epoch_offset(cluster, since=before + 1, old_epoch=old_epoch)
    first = first_new_leader_ack(list(producer.records), fault_at=fault_at, boundary=boundary)
    assert first is not None  # a record sent after the fault is acknowledged, at or past `boundary`
    failover = first.acked_at - fault_at
    new_leader = cluster.admin.describe_topic(TOPIC)["partitions"][PARTITION]["leader"]
    offline_lines = wait_until(
        lambda: agent_log(agent_log_path, offset=offset, contains=f"Took log dir {mount.path} "),
        timeout=30,
        what="the old leader's offline line",
    )
    result = {
        "failover": failover,
        "offline": offline_lines[0].at - fault_wall,
        "moved": moved,
        "old": old_leader,
        "new": new_leader,
        "offset": first.offset,
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
                f"{result['offline'] * 1000:.0f} ms ({result['cause']}), controller moved leadership "
                f"{result['moved'] * 1000:.0f} ms; old leader exited {result['exit']} on SIGTERM ({machine_load()})"
            )
        producer.stop()
        everything = latency_stats(producer.window(started, math.inf))
    rows = []
    stats: dict[str, tuple[float, float, float]] = {}
    for key, label in (
        ("offline", "fault → dir offline in the old leader (its log)"),
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
