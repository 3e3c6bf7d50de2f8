"""Agent benchmark 3: the CPU an idle agent hosting 10,000 placed replicas burns.

Cluster: one `jbod-controller` and one `jbod-agent` (broker 1) with 2 log dirs (`--dirs`) on
loop-mounted ext4 volumes of 256 MiB (`tests.fs.loop_ext4`; plain directories when not root), hosting the
10,000 replicas (10 topics of 1,000 partitions, RF 1), every placement confirmed, the broker
unfenced. The topics are created one at a time, each waited for: a running agent misses the
partitions of a metadata fetch that does not reach the log's end offset (a fetch returns at most
10,000 records), so one topic of 10,000 partitions created under a running agent stays unplaced.

Measured: with no metadata change at all, the agent's user + system CPU time
(`/proc/<pid>/stat`) over a window of 30 s, divided by the wall time, as % of one core (goal
< 2 %). Three cases, each on a freshly started agent process, settled for 5 s first:

* the agent with no replica at all (baseline), default intervals;
* 10,000 replicas, the agent's default intervals: `log.dir.probe.interval.ms` 1000,
  `broker.heartbeat.interval.ms` 2000;
* 10,000 replicas, `log.dir.probe.interval.ms` 250 (heartbeat 2000).

Each window also reports the controller's CPU, the requests the agent made (from the controller's
`jbod_controller_request_seconds_count{api}`) and the agent's resident memory before and after.

    python -m bench.agent_idle [--quick] [--window S] [--replicas N] [--dirs N]
"""

from __future__ import annotations

import argparse
import re
import time
from typing import Any

import httpx

from bench.common import (
    AgentCluster,
    BenchError,
    Figure,
    Workspace,
    agent_cluster,
    base_parser,
    bench_main,
    can_loop_mount,
    cpu_seconds,
    log,
    memory,
    print_table,
    wait_until,
)

GOAL_PERCENT = 2.0
TOPIC_PARTITIONS = 1_000
DEFAULTS = {"broker.heartbeat.interval.ms": "2000", "log.dir.probe.interval.ms": "1000"}
_COUNT = re.compile(r'^jbod_controller_request_seconds_count\{api="([^"]+)"\} ([0-9.e+]+)$', re.M)


def request_counts(cluster: AgentCluster) -> dict[str, float]:
    text = httpx.get(f"{cluster.controller.url}/metrics", timeout=10, trust_env=False).text
    return {api: float(value) for api, value in _COUNT.findall(text)}


def restart_with(cluster: AgentCluster, settings: dict[str, str]) -> None:
    broker = cluster.brokers[1]
    if broker.process is not None and broker.process.poll() is None:
        code = cluster.stop_broker(1)
        if code != 0:
            raise BenchError(f"broker 1 exited with {code} on SIGTERM")
    broker.settings.update(settings)
    broker.write_config()
    broker.start(timeout=120)
    cluster.wait_unfenced(1, timeout=300)


def measure(cluster: AgentCluster, label: str, *, window: float, settle: float) -> dict[str, Any]:
    time.sleep(settle)
    pid = cluster.pid(1)
    controller_pid = cluster.controller.pid
    offset_before = cluster.admin.cluster()["metadataEndOffset"]
    counts_before = request_counts(cluster)
    rss_before = memory(pid)["VmRSS"]
    started = time.perf_counter()
    cpu0, ccpu0 = cpu_seconds(pid), cpu_seconds(controller_pid)
    time.sleep(window)
    cpu1, ccpu1 = cpu_seconds(pid), cpu_seconds(controller_pid)
    wall = time.perf_counter() - started
    rss_after = memory(pid)["VmRSS"]
    counts_after = request_counts(cluster)
    offset_after = cluster.admin.cluster()["metadataEndOffset"]
    requests = {
        api: counts_after[api] - counts_before.get(api, 0.0)
        for api in counts_after
        if api in ("heartbeat", "metadata", "assignments", "register")
        and counts_after[api] > counts_before.get(api, 0.0)
    }
    result = {
        "label": label,
        "percent": (cpu1 - cpu0) / wall * 100,
        "cpu": cpu1 - cpu0,
        "controller_percent": (ccpu1 - ccpu0) / wall * 100,
        "wall": wall,
        "requests": requests,
        "records": offset_after - offset_before,
        "rss_before": rss_before,
        "rss_after": rss_after,
    }
    calls = ", ".join(f"{api} {n:.0f}" for api, n in sorted(requests.items())) or "none"
    log(
        f"  {label}: agent CPU {result['cpu'] * 1000:.0f} ms over {wall:.1f} s = {result['percent']:.2f} % "
        f"of a core (controller {result['controller_percent']:.2f} %); requests to the controller: "
        f"{calls}; {result['records']} new metadata records; agent RSS {rss_before / 2**20:.1f} → "
        f"{rss_after / 2**20:.1f} MiB"
    )
    return result


def run(args: argparse.Namespace) -> list[Figure]:
    replicas = args.replicas or (1_000 if args.quick else 10_000)
    window = args.window or (5.0 if args.quick else 30.0)
    settle = 2.0 if args.quick else 5.0
    loop = can_loop_mount()
    results: list[dict[str, Any]] = []
    with Workspace(keep=args.keep) as ws, agent_cluster(ws) as cluster:
        cluster.add_broker(1, dirs=args.dirs, loop=loop, size_mb=256, settings=DEFAULTS)
        cluster.wait_unfenced(1)
        storage = "loop ext4 volumes of 256 MiB" if loop else "plain directories (not root: no loop volumes)"
        log(
            f"  broker 1: {args.dirs} log dirs on {storage}; window {window:.0f} s after {settle:.0f} s of settling"
        )
        results.append(
            measure(cluster, "0 replicas, probe 1000 ms, heartbeat 2000 ms", window=window, settle=settle)
        )
        # Topics of 1,000 partitions, one at a time: a running agent misses the partitions of a
        # metadata fetch that does not reach the log's end offset (see the module doc).
        started = time.perf_counter()
        names = []
        for start in range(0, replicas, TOPIC_PARTITIONS):
            names += cluster.create_topics(
                f"idle{start // TOPIC_PARTITIONS}", [[1]] * min(TOPIC_PARTITIONS, replicas - start)
            )
            wait_until(
                lambda: cluster.broker_info(1)["unassignedReplicas"] == 0,
                timeout=120,
                interval=0.1,
                what=f"the placements of {names[-1]}",
            )
        on_disk = sum(1 for p in cluster.brokers[1].log_dirs for e in p.iterdir() if e.is_dir())
        if on_disk < replicas:
            raise BenchError(f"broker 1 holds {on_disk} replica dirs, not {replicas}")
        log(
            f"  {replicas:,} replicas in {len(names)} topics created and placed in "
            f"{time.perf_counter() - started:.1f} s"
        )
        restart_with(cluster, DEFAULTS)  # a fresh process: nothing left over from the creation
        results.append(
            measure(
                cluster,
                f"{replicas:,} replicas, probe 1000 ms, heartbeat 2000 ms",
                window=window,
                settle=settle,
            )
        )
        restart_with(cluster, {"log.dir.probe.interval.ms": "250"})
        results.append(
            measure(
                cluster,
                f"{replicas:,} replicas, probe 250 ms, heartbeat 2000 ms",
                window=window,
                settle=settle,
            )
        )
    print()
    print_table(
        ["case", "agent CPU", "controller CPU", "requests", "agent RSS"],
        [
            [
                r["label"],
                f"{r['percent']:.2f} %",
                f"{r['controller_percent']:.2f} %",
                ", ".join(f"{api} {n:.0f}" for api, n in sorted(r["requests"].items())),
                f"{r['rss_after'] / 2**20:.1f} MiB",
            ]
            for r in results
        ],
    )
    return [
        Figure(
            name=f"agent idle CPU, {r['label']} (% of one core)",
            measured=r["percent"],
            unit="%",
            goal=GOAL_PERCENT,
            detail=f"{r['cpu']:.2f} s CPU over {r['wall']:.1f} s",
        )
        for r in results
    ]


def main() -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=0, help="replicas hosted (default 10,000)")
    parser.add_argument("--dirs", type=int, default=2, help="broker 1's log dirs (default 2)")
    parser.add_argument("--window", type=float, default=0.0, help="seconds measured per case (default 30)")
    return bench_main("agent idle CPU", parser, run)


if __name__ == "__main__":
    raise SystemExit(main())
