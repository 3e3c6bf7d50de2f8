"""Agent benchmark 2: an agent hosting 20,000 replicas over 4 dirs restarts: process start → unfenced.

Cluster: one `jbod-controller` (broker session timeout 9 s) and 3 `jbod-agent` processes with the
agent's default intervals (`broker.heartbeat.interval.ms` 2000, `log.dir.probe.interval.ms`
1000): broker 1 with 4 log dirs, brokers 2 and 3 with 1 each, all plain directories on the
machine's disk. Topics of 10,000 partitions (one create request each) with replicas [1, 2] /
[1, 3] give broker 1 20,000 replicas.

Two variants, each timed from just before the new `jbod-agent` process is spawned to the first
`GET /v1/brokers/1` (polled every 20 ms) that shows the new incarnation unfenced:

* UNASSIGNED: the topics are created while broker 1 is stopped (SIGTERM: a controlled shutdown)
  and its dirs hold no replica, so at start the agent must create 20,000 replica dirs (each with
  its `partition.metadata`, fsync'd) and send 9 AssignReplicasToDirs batches (≤ 2,250) before it
  asks to be unfenced. Between runs, the topics are deleted and broker 1's replica dirs removed
  while it is stopped (not timed).
* PLACED: the same broker stopped (SIGTERM) and started again with its 20,000 replicas on disk and
  placed in the metadata: it scans them, registers, catches up with the metadata log, reconciles
  (nothing to send) and is unfenced.

The agent's own log gives the breakdown (millisecond timestamps): local replicas scanned,
registered, every placement batch confirmed, "Ready to be unfenced", "now unfenced". Also
reported: the agent's CPU time until unfenced, the metadata log's size, and the longest time the
agent's `/healthz` went unanswered meanwhile (polled every 50 ms from a thread: how long its event
loop was blocked).

    python -m bench.agent_restart [--quick] [--placed-runs N] [--unassigned-runs N] [--replicas N]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import time
from typing import Any

from bench.common import (
    AgentCluster,
    BenchError,
    Figure,
    LogLine,
    Responsiveness,
    Workspace,
    agent_cluster,
    agent_log,
    base_parser,
    bench_main,
    cpu_seconds,
    log,
    log_size,
    print_table,
    summarise,
    wait_until,
)

GOAL_S = 5.0
DIRS = 4
SETTINGS = {"broker.heartbeat.interval.ms": "2000", "log.dir.probe.interval.ms": "1000"}  # the defaults


def assignment(replicas: int) -> list[list[int]]:
    return [[1, 2] if p % 2 == 0 else [1, 3] for p in range(replicas)]


def unassigned(cluster: AgentCluster, node_id: int) -> int:
    count: int = cluster.broker_info(node_id)["unassignedReplicas"]
    return count


def wipe_replicas(cluster: AgentCluster) -> int:
    """Remove every replica dir of (stopped) broker 1, keeping each dir's meta.properties."""
    removed = 0
    for path in cluster.brokers[1].log_dirs:
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path)
                    removed += 1
    return removed


def restart(cluster: AgentCluster) -> dict[str, Any]:
    """Start broker 1 (stopped) and time it until the controller shows it unfenced."""
    broker = cluster.brokers[1]
    before = cluster.broker_info(1)
    offset = log_size(broker.log_path)
    end_offset = cluster.admin.cluster()["metadataEndOffset"]
    started_at = time.time()
    started = time.perf_counter()
    broker.start(timeout=120)
    listening = time.perf_counter() - started
    pid = cluster.pid(1)
    cpu = 0.0
    polls = 0
    with Responsiveness(broker.url) as http:
        while True:
            polls += 1
            with contextlib.suppress(ProcessLookupError, FileNotFoundError):
                cpu = cpu_seconds(pid)
            if cluster.unfenced(1, not_incarnation=before["incarnationId"]):
                unfenced = time.perf_counter() - started
                break
            if broker.process is not None and broker.process.poll() is not None:
                raise BenchError(f"broker 1 exited with {broker.process.returncode} before it was unfenced")
            if time.perf_counter() - started > 600:
                raise BenchError("broker 1 not unfenced after 600 s")
            time.sleep(0.02)
    left = unassigned(cluster, 1)
    # the agent logs "now unfenced" when the heartbeat reply arrives, maybe after our poll saw it
    with contextlib.suppress(BenchError):
        wait_until(
            lambda: agent_log(broker.log_path, offset=offset, contains="is now unfenced"),
            timeout=5,
            what="the unfenced line",
        )

    def first(text: str) -> float | None:
        lines = agent_log(broker.log_path, offset=offset, contains=text)
        return lines[0].at - started_at if lines else None

    confirmed: list[LogLine] = agent_log(broker.log_path, offset=offset, contains="The controller confirmed")
    warnings = [
        line.text
        for line in agent_log(broker.log_path, offset=offset)
        if " WARNING " in line.text or " ERROR " in line.text
    ]
    return {
        "total": unfenced,
        "listening": listening,
        "scanned": first("local replicas in"),
        "registered": first("Registered broker"),
        "first_batch": confirmed[0].at - started_at if confirmed else None,
        "last_batch": confirmed[-1].at - started_at if confirmed else None,
        "batches": len(confirmed),
        "ready": first("Ready to be unfenced"),
        "unfenced_log": first("is now unfenced"),
        "cpu": cpu,
        "blocked": http.longest,
        "polls": polls,
        "unassigned_after": left,
        "metadata_end": end_offset,
        "warnings": warnings,
    }


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:,.0f} ms"


def report(label: str, number: int, total: int, result: dict[str, Any]) -> None:
    log(
        f"  {label} run {number}/{total}: start → unfenced {ms(result['total'])} (listening "
        f"{ms(result['listening'])}, scanned {ms(result['scanned'])}, registered {ms(result['registered'])}, "
        f"{result['batches']} placement batches confirmed {ms(result['first_batch'])} … "
        f"{ms(result['last_batch'])}, ready {ms(result['ready'])}, unfenced (agent log) "
        f"{ms(result['unfenced_log'])}); agent CPU {result['cpu']:.1f} s; /healthz unanswered for up to "
        f"{ms(result['blocked'])}; metadata log "
        f"{result['metadata_end']:,} records; {result['unassigned_after']} replicas still unassigned"
    )
    for line in result["warnings"][:5]:
        log(f"    agent: {line}")
    if len(result["warnings"]) > 5:
        log(f"    agent: … {len(result['warnings']) - 5} more warnings/errors")


def run(args: argparse.Namespace) -> list[Figure]:
    replicas = args.replicas or (2_000 if args.quick else 20_000)
    placed_runs = args.placed_runs or (2 if args.quick else 5)
    unassigned_runs = args.unassigned_runs or (1 if args.quick else 2)
    wanted = assignment(replicas)
    unassigned_results: list[dict[str, Any]] = []
    placed_results: list[dict[str, Any]] = []
    with Workspace(keep=args.keep) as ws, agent_cluster(ws) as cluster:
        cluster.add_broker(1, dirs=DIRS, settings=SETTINGS)
        cluster.add_broker(2, dirs=1, settings=SETTINGS)
        cluster.add_broker(3, dirs=1, settings=SETTINGS)
        cluster.wait_unfenced(1, 2, 3)
        log(
            f"  cluster: broker 1 with {DIRS} dirs, brokers 2 and 3 with 1 (plain dirs under {ws.root}); "
            f"{replicas:,} partitions x RF 2 ([1, 2] / [1, 3]); heartbeat 2000 ms, probe 1000 ms"
        )
        topics: list[str] = []
        for number in range(1, unassigned_runs + 1):
            code = cluster.stop_broker(1)
            if code != 0:
                raise BenchError(f"broker 1 exited with {code} on SIGTERM")
            if topics:
                for name in topics:
                    cluster.admin.delete_topic(name)
                removed = wipe_replicas(cluster)
                log(f"  (deleted the topics and {removed:,} replica dirs of broker 1 while it was stopped)")
            topics = cluster.create_topics(f"gen{number}", wanted)
            wait_until(
                lambda: unassigned(cluster, 2) == 0 and unassigned(cluster, 3) == 0,
                timeout=300,
                what="brokers 2 and 3 to place their replicas",
            )
            pending = unassigned(cluster, 1)
            if pending != replicas:
                raise BenchError(f"broker 1 should have {replicas} unassigned replicas, has {pending}")
            result = restart(cluster)
            unassigned_results.append(result)
            report("UNASSIGNED", number, unassigned_runs, result)
        on_disk = sum(len(os.listdir(p)) - 1 for p in cluster.brokers[1].log_dirs)
        log(f"  broker 1 holds {on_disk:,} replica dirs (and a meta.properties per dir)")
        for number in range(1, placed_runs + 1):
            code = cluster.stop_broker(1)
            if code != 0:
                raise BenchError(f"broker 1 exited with {code} on SIGTERM")
            result = restart(cluster)
            placed_results.append(result)
            report("PLACED", number, placed_runs, result)

    steps = (
        "listening",
        "scanned",
        "registered",
        "first_batch",
        "last_batch",
        "ready",
        "unfenced_log",
        "total",
        "blocked",
    )
    rows = []
    for label, results in (("UNASSIGNED", unassigned_results), ("PLACED", placed_results)):
        for step in steps:
            values = [r[step] for r in results if r[step] is not None]
            if values:
                stats = summarise(values)
                rows.append([label, step, ms(stats["median"]), ms(stats["max"])])
    print()
    print(
        "times from process start (agent log lines; 'total': the controller's view, polled; "
        "'blocked': the longest time /healthz went unanswered)"
    )
    print_table(["variant", "step", "median", "max"], rows)
    figures = []
    for label, results in (("UNASSIGNED", unassigned_results), ("PLACED", placed_results)):
        stats = summarise([r["total"] for r in results])
        batches = sorted({r["batches"] for r in results})
        figures.append(
            Figure(
                name=f"agent restart, {replicas:,} replicas / {DIRS} dirs, {label}: start → unfenced (max)",
                measured=stats["max"],
                unit="s",
                goal=GOAL_S,
                detail=f"median {stats['median']:.2f} s over {len(results)} runs; batches {batches}; "
                f"agent CPU median {summarise([r['cpu'] for r in results])['median']:.1f} s; "
                f"/healthz unanswered up to {max(r['blocked'] for r in results):.1f} s",
            )
        )
    return figures


def main() -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=0, help="broker 1's replicas (default 20,000)")
    parser.add_argument("--placed-runs", type=int, default=0, help="PLACED restarts (default 5)")
    parser.add_argument("--unassigned-runs", type=int, default=0, help="UNASSIGNED restarts (default 2)")
    return bench_main("agent restart", parser, run)


if __name__ == "__main__":
    raise SystemExit(main())
