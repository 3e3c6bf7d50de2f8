"""Benchmark 3: a broker with 20,000 replicas over 4 dirs restarts: registration → unfenced.

Cluster: broker 1 with 4 dirs, brokers 2 and 3 with one dir each; 20,000 partitions with RF 3
(leaders rotated over the brokers), so broker 1 hosts 20,000 replicas; broker 1's placements are
confirmed (5,000 per dir) before the measurements.

Each run: the old incarnation of broker 1 shuts down the way an agent does on SIGTERM (controlled
shutdown: heartbeats with `wantShutDown` until `shouldShutDown`, while brokers 2 and 3 heartbeat,
so its leaderships move away and it leaves every ISR). Then the timed part, like the agent will do
it, one request in flight at a time:

1. `POST /v1/brokers/register` with a NEW incarnation and the same 4 dirs (→ fenced, new epoch);
2. all 20,000 placements through `POST /v1/assignments` in batches of 2,250;
3. a metadata fetch from its epoch to learn the end offset, then heartbeats with `wantFence=false`
   and that offset until the reply says `isFenced=false`.

Measured: registration request sent → unfencing heartbeat reply received (goal < 3 s). Between
runs, the leaders add broker 1 back to every ISR (`POST /v1/partitions/alter`), outside the timed
part. A real agent heartbeats every `broker.heartbeat.interval.ms` (2 s by default); the benchmark
sends its heartbeat as soon as the placements are confirmed, so it measures the controller.

    python -m bench.restart [--quick] [--repeats N]
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

from bench.common import (
    Api,
    BenchError,
    Figure,
    Workspace,
    base_parser,
    bench_main,
    cpu_seconds,
    log,
    new_id,
    print_table,
    running,
    summarise,
)

TOPIC_PARTITIONS = 10_000
BROKERS = (1, 2, 3)


def placements(topic_ids: list[str], partitions: int, dirs: list[str]) -> list[tuple[str, str, int]]:
    out = []
    for index in range(partitions):
        topic, partition = divmod(index, TOPIC_PARTITIONS)
        out.append((dirs[index % len(dirs)], topic_ids[topic], partition))
    return out


def controlled_shutdown(api: Api, epochs: dict[int, int]) -> int:
    """Broker 1 shuts down cleanly while brokers 2 and 3 keep heartbeating; returns heartbeats."""
    for attempt in range(1, 50):
        reply = api.heartbeat(1, epochs[1], wantShutDown=True)
        if reply["shouldShutDown"]:
            return attempt
        for other in (2, 3):
            api.heartbeat(other, epochs[other])
    raise BenchError("broker 1 never got shouldShutDown")


def restore_isr(api: Api, topic_names: dict[str, str]) -> int:
    """The leaders add broker 1 back to every ISR it left; returns the partitions changed."""
    changes: dict[int, list[tuple[str, dict[str, Any]]]] = {}
    for topic_id, name in topic_names.items():
        for part in api.get(f"/v1/topics/{name}")["partitions"]:
            if 1 not in part["isr"] and part["leader"] in (2, 3):
                changes.setdefault(part["leader"], []).append((topic_id, part))
    brokers = {b["brokerId"]: b["brokerEpoch"] for b in api.get("/v1/brokers")}
    changed = 0
    for leader, items in changes.items():
        for start in range(0, len(items), 10_000):
            grouped: dict[str, list[dict[str, Any]]] = {}
            for topic_id, part in items[start : start + 10_000]:
                grouped.setdefault(topic_id, []).append(
                    {
                        "partitionIndex": part["partitionIndex"],
                        "leaderEpoch": part["leaderEpoch"],
                        "partitionEpoch": part["partitionEpoch"],
                        "newIsr": sorted({*part["isr"], 1}),
                    }
                )
            body = {
                "brokerId": leader,
                "brokerEpoch": brokers[leader],
                "topics": [{"topicId": t, "partitions": p} for t, p in grouped.items()],
            }
            reply = api.post("/v1/partitions/alter", body)
            bad = [p for t in reply["topics"] for p in t["partitions"] if p["errorCode"] != 0]
            if bad:
                raise BenchError(f"alter-partition refused: {bad[:3]}")
            changed += sum(len(p) for p in grouped.values())
    return changed


def run(args: argparse.Namespace) -> list[Figure]:
    replicas = 2_000 if args.quick else 20_000
    repeats = args.repeats or (2 if args.quick else 5)
    rng = random.Random(20_000)
    dirs = {1: [new_id(rng) for _ in range(4)], 2: [new_id(rng)], 3: [new_id(rng)]}
    runs: list[dict[str, float]] = []
    with Workspace(keep=args.keep) as ws:
        proc = ws.controller("restart")
        with running(proc), Api(proc) as api:
            epochs = {}
            for broker_id in BROKERS:
                epochs[broker_id] = api.register(broker_id, new_id(rng), dirs[broker_id])
                api.unfence(broker_id, epochs[broker_id])
            topic_names: dict[str, str] = {}
            topic_ids = []
            for t in range(-(-replicas // TOPIC_PARTITIONS)):
                count = min(TOPIC_PARTITIONS, replicas - t * TOPIC_PARTITIONS)
                assignment = [
                    [BROKERS[(t * TOPIC_PARTITIONS + p + k) % 3] for k in range(3)] for p in range(count)
                ]
                topic_id = api.create_topic(f"restart-{t}", assignment)
                topic_ids.append(topic_id)
                topic_names[topic_id] = f"restart-{t}"
            wanted = placements(topic_ids, replicas, dirs[1])
            api.assign(1, epochs[1], wanted)
            log(
                f"  cluster: {replicas:,} partitions x RF 3; broker 1 hosts {replicas:,} replicas over 4 dirs "
                f"(placements confirmed); log at {api.end_offset():,} records"
            )
            for rep in range(repeats):
                beats = controlled_shutdown(api, epochs)
                offset_before = api.end_offset()
                cpu_before = cpu_seconds(proc.pid)
                # -- timed: register → placements → heartbeats until unfenced
                started = time.perf_counter()
                epoch = api.register(1, new_id(rng), dirs[1])
                registered = time.perf_counter()
                requests = api.assign(1, epoch, wanted)
                assigned = time.perf_counter()
                heartbeats = 0
                while True:
                    fetched = api.broker.get(
                        "/v1/metadata", params={"fromOffset": epoch, "maxRecords": 10_000}
                    ).json()
                    reply = api.heartbeat(1, epoch, fetched["endOffset"])
                    heartbeats += 1
                    if not reply["isFenced"]:
                        break
                    if heartbeats > 100:
                        raise BenchError(f"broker 1 stays fenced: {reply}")
                unfenced = time.perf_counter()
                # -- end of the timed part
                cpu = cpu_seconds(proc.pid) - cpu_before
                records = api.end_offset() - offset_before
                epochs[1] = epoch
                result = {
                    "total": unfenced - started,
                    "register": registered - started,
                    "assign": assigned - registered,
                    "unfence": unfenced - assigned,
                    "requests": requests,
                    "heartbeats": heartbeats,
                    "records": records,
                    "cpu": cpu,
                }
                runs.append(result)
                log(
                    f"  run {rep + 1}/{repeats}: {result['total'] * 1000:.0f} ms (register "
                    f"{result['register'] * 1000:.1f} ms, {requests} assignment requests "
                    f"{result['assign'] * 1000:.0f} ms, {heartbeats} heartbeat(s) "
                    f"{result['unfence'] * 1000:.1f} ms); {records} records; controller CPU "
                    f"{cpu * 1000:.0f} ms; shutdown took {beats} heartbeat(s)"
                )
                restored = restore_isr(api, topic_names)
                if rep == 0:
                    log(f"  (between runs: {restored:,} partitions got broker 1 back in their ISR)")
    stats = summarise([r["total"] for r in runs])
    print()
    print_table(
        ["step", "median", "max"],
        [
            [
                step,
                f"{summarise([r[step] for r in runs])['median'] * 1000:.1f} ms",
                f"{summarise([r[step] for r in runs])['max'] * 1000:.1f} ms",
            ]
            for step in ("register", "assign", "unfence", "total")
        ],
    )
    return [
        Figure(
            name=f"restart of a broker with {replicas:,} replicas / 4 dirs: register → unfenced (max)",
            measured=stats["max"],
            unit="s",
            goal=3.0,
            detail=f"median {stats['median'] * 1000:.0f} ms over {len(runs)} runs",
        )
    ]


def main() -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=0, help="restarts measured (default 5)")
    return bench_main("broker restart", parser, run)


if __name__ == "__main__":
    raise SystemExit(main())
