"""Agent benchmark 1: a log dir fails (EIO) → the agent takes it offline → leadership moves away.

Cluster: one `jbod-controller` and 3 `jbod-agent` processes (brokers 1, 2, 3), each with 2 log
dirs on loop-mounted ext4 volumes (`tests.fs.loop_ext4`, needs root), `log.dir.probe.interval.ms`
250 and `broker.heartbeat.interval.ms` 2000 (the default; `--heartbeat-ms` changes it; the agent
heartbeats at once when a dir fails, so the interval should not matter).

Each run: a new topic `det-<n>` of 6 partitions with RF 3, replicas [1, 2, 3] / [1, 3, 2], so
broker 1 leads every partition; its replicas are spread over its 2 dirs by the agent (3 + 3).
Once every replica is placed, and after a random pause of 0-250 ms (so that the fault does not
fall at the same point of the probe cycle in every run), broker 1's dir 0 fails:
EXT4_IOC_SHUTDOWN, every later I/O on it returns EIO. Measured from the fault (`time.time()` just before the ioctl):

(a) dir offline in the agent: the time of broker 1's log line "Took log dir <path> ... offline"
    (millisecond timestamps, same clock);
(b) leadership moved in the controller: `GET /v1/topics/det-<n>` (polled every 5 ms) shows no
    partition hosted in that dir led by broker 1 (the time the first such reply arrived);
and, for the breakdown, the agent's log line "The controller acknowledged that log dir ... is
offline" (the heartbeat reply that reported it).

Between runs (not timed): the topic is deleted, broker 1 stops (SIGTERM: a controlled shutdown),
its failed volume is pulled out and replaced by a new empty one, `jbod-storage format
--ignore-formatted` gives it a new directory id, broker 1 starts again and is waited for unfenced.

    python -m bench.agent_detection [--quick] [--runs N] [--heartbeat-ms MS]
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path
from typing import Any

from bench.common import (
    AgentCluster,
    BenchError,
    Figure,
    Workspace,
    agent_cluster,
    agent_log,
    base_parser,
    bench_main,
    can_loop_mount,
    log,
    log_size,
    percentile,
    print_table,
    wait_until,
)

PROBE_INTERVAL_MS = 250
PARTITIONS = 6
GOAL_S = 1.5


def hosted_in(topic: dict[str, Any], broker: int, directory: str) -> list[int]:
    return [
        p["partitionIndex"]
        for p in topic["partitions"]
        if broker in p["replicas"] and p["directories"][p["replicas"].index(broker)] == directory
    ]


def dir_id(cluster: AgentCluster, node_id: int, path: Path) -> str:
    found = [d["directoryId"] for d in cluster.log_dirs(node_id) if d["path"] == str(path)]
    if not found or found[0] is None:
        raise BenchError(f"broker {node_id} does not report log dir {path}")
    return str(found[0])


def one_run(cluster: AgentCluster, number: int, rng: random.Random) -> dict[str, float]:
    name = f"det-{number}"
    assignment = [[1, 2, 3] if p % 2 == 0 else [1, 3, 2] for p in range(PARTITIONS)]
    cluster.create_topics(name, assignment)
    topic_name = f"{name}-0"
    wait_until(lambda: cluster.placed(topic_name), timeout=60, what=f"placements of {topic_name}")
    mount = cluster.mounts[(1, 0)]
    failed = dir_id(cluster, 1, mount.path)
    topic = cluster.admin.describe_topic(topic_name)
    hosted = hosted_in(topic, 1, failed)
    led = [i for i in hosted if topic["partitions"][i]["leader"] == 1]
    if not led:
        raise BenchError(f"broker 1 leads nothing in its dir 0 ({failed}): {topic['partitions']}")
    agent_log_path = cluster.brokers[1].log_path
    offset = log_size(agent_log_path)
    # The steps above can lock the fault to the probes' phase; a random pause breaks that.
    time.sleep(rng.uniform(0, PROBE_INTERVAL_MS / 1000))

    # -- the fault, then poll the controller until the leadership has left the dir
    fault_at = time.time()
    fault_perf = time.perf_counter()
    mount.shutdown()
    polls = 0
    while True:
        parts = cluster.admin.describe_topic(topic_name)["partitions"]
        polls += 1
        if all(parts[i]["leader"] != 1 for i in hosted):
            moved = time.perf_counter() - fault_perf
            break
        if time.perf_counter() - fault_perf > 60:
            raise BenchError(f"leadership did not leave broker 1's failed dir in 60 s: {parts}")
        time.sleep(0.005)

    # -- what the agent logged
    def logged(text: str) -> list[Any]:
        return agent_log(agent_log_path, offset=offset, contains=text)

    offline = wait_until(lambda: logged(f"Took log dir {mount.path} "), timeout=10, what="the offline line")
    acked = wait_until(
        lambda: logged(f"acknowledged that log dir {failed} is offline"), timeout=10, what="the ack line"
    )
    if "EIO" not in offline[0].text:
        log(f"  note: the dir went offline for another reason: {offline[0].text}")
    wait_until(lambda: failed in cluster.broker_info(1)["offlineLogDirs"], timeout=10, what="offlineLogDirs")
    result = {
        "offline": offline[0].at - fault_at,
        "acked": acked[0].at - fault_at,
        "moved": moved,
        "hosted": len(hosted),
        "led": len(led),
        "polls": polls,
    }

    # -- back to a healthy broker 1 (not timed)
    reply = cluster.admin.delete_topic(topic_name)
    if reply.get("errorCode", 0) != 0:
        raise BenchError(f"delete {topic_name}: {reply}")
    code = cluster.stop_broker(1)
    if code != 0:
        raise BenchError(f"broker 1 exited with {code} on SIGTERM")
    cluster.replace_volume(1, 0)
    broker = cluster.brokers[1]
    broker.format()
    broker.start()
    cluster.wait_unfenced(1)
    return result


def run(args: argparse.Namespace) -> list[Figure]:
    if not can_loop_mount():
        raise SystemExit("agent_detection needs root and mkfs.ext4/losetup/mount (loop-mounted volumes)")
    runs = args.runs or (3 if args.quick else 20)
    settings = {
        "log.dir.probe.interval.ms": str(PROBE_INTERVAL_MS),
        "broker.heartbeat.interval.ms": str(args.heartbeat_ms),
    }
    results: list[dict[str, float]] = []
    rng = random.Random(858)
    with Workspace(keep=args.keep) as ws, agent_cluster(ws) as cluster:
        for node in (1, 2, 3):
            cluster.add_broker(node, dirs=2, loop=True, settings=settings)
        cluster.wait_unfenced(1, 2, 3)
        log(
            f"  cluster: 3 agents x 2 loop ext4 dirs; probe interval {PROBE_INTERVAL_MS} ms, heartbeat "
            f"interval {args.heartbeat_ms} ms; {runs} runs of {PARTITIONS} partitions x RF 3, broker 1 leading"
        )
        for number in range(runs):
            result = one_run(cluster, number, rng)
            results.append(result)
            log(
                f"  run {number + 1}/{runs}: (a) offline in the agent {result['offline'] * 1000:.0f} ms, "
                f"heartbeat acknowledged {result['acked'] * 1000:.0f} ms, (b) leadership moved "
                f"{result['moved'] * 1000:.0f} ms ({result['hosted']} replicas in the dir, "
                f"{result['led']} led; {result['polls']} polls)"
            )
    stats = {}
    rows = []
    for key, label in (
        ("offline", "(a) fault → dir offline in the agent (log line)"),
        ("acked", "    fault → heartbeat reply acknowledged it (log line)"),
        ("moved", "(b) fault → leadership moved (controller, polled)"),
        ("report", "    (b) - (a): report + controller + poll"),
    ):
        values = sorted((r["moved"] - r["offline"]) if key == "report" else r[key] for r in results)
        stats[key] = (percentile(values, 0.5), percentile(values, 0.99))
        rows.append(
            [
                label,
                f"{stats[key][0] * 1000:.0f} ms",
                f"{stats[key][1] * 1000:.0f} ms",
                f"{values[-1] * 1000:.0f} ms",
            ]
        )
    print()
    print_table(["step", "p50", "p99", "max"], rows)
    detail = f"{len(results)} runs; probe {PROBE_INTERVAL_MS} ms, heartbeat {args.heartbeat_ms} ms"
    return [
        Figure(
            name="agent: dir fails (EIO) → offline in the agent, p50",
            measured=stats["offline"][0],
            unit="s",
            goal=GOAL_S,
            detail=detail + "; no goal of its own (part of (b))",
        ),
        Figure(
            name="agent: dir fails (EIO) → offline in the agent, p99",
            measured=stats["offline"][1],
            unit="s",
            goal=GOAL_S,
            detail=detail + "; no goal of its own (part of (b))",
        ),
        Figure(
            name="agent: dir fails (EIO) → leadership moved (controller), p50",
            measured=stats["moved"][0],
            unit="s",
            goal=GOAL_S,
            detail=detail,
        ),
        Figure(
            name="agent: dir fails (EIO) → leadership moved (controller), p99",
            measured=stats["moved"][1],
            unit="s",
            goal=GOAL_S,
            detail=detail,
        ),
    ]


def main() -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=0, help="faults measured (default 20, quick 3)")
    parser.add_argument(
        "--heartbeat-ms", type=int, default=2000, help="broker.heartbeat.interval.ms (default 2000)"
    )
    return bench_main("agent dir-failure detection", parser, run)


if __name__ == "__main__":
    raise SystemExit(main())
