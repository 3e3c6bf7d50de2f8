"""Benchmark 1: one heartbeat reporting an offline log dir, in a cluster of 300,000 replicas.

Cluster: 3 brokers with 2 dirs each; 100,000 partitions with RF 3 (10 topics of 10,000, created
through `POST /v1/topics` with a `replicaAssignment`, leaders rotated over the brokers); every
placement confirmed through `POST /v1/assignments` in batches of 2,250, so that

* broker 1 dir A hosts all 100,000 of its replicas (dir B none),
* broker 2 dirs are split 90,000 / 10,000,
* broker 3 dirs are split 50,000 / 50,000.

That state is kept as a pristine data dir. Each measurement starts a fresh controller on a copy of
it, warms the connection with a no-op heartbeat, then times one `POST /v1/brokers/heartbeat` with
`offlineLogDirs=[dir]` from request sent to reply received: the decision, the encoding and replay of
every record, and the fsync. Two cases: broker 1 dir A (100,000 replicas, goal < 1 s) and broker 2's
small dir (10,000 replicas, goal < 100 ms). Same cluster, so the cost should follow the affected
replicas, not the cluster size; a control case fails a 10,000-replica dir in a cluster ten times
smaller (10,000 partitions, same layout) to show how much the cluster size still matters.

    python -m bench.offline_dir [--quick] [--repeats N] [--profile]

The controller runs with a `gc.callbacks` hook (`bench.common.GC_TRACE`; `--no-gc-trace` drops
it) so the report can say how much of each heartbeat the garbage collector took.
`--profile` also runs an in-process reproduction of the 100k case under cProfile (decision,
encoding, replay, append, fsync) and prints where the time goes.
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import dataclass
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

BROKERS = (1, 2, 3)
TOPIC_PARTITIONS = 10_000


@dataclass(frozen=True)
class Layout:
    partitions: int
    dirs: dict[int, tuple[str, str]]  # broker -> (dir A, dir B)

    def topics(self) -> int:
        return -(-self.partitions // TOPIC_PARTITIONS)

    def directory(self, broker_id: int, index: int) -> str:
        """The dir of broker `broker_id`'s replica of the partition with global index `index`."""
        a, b = self.dirs[broker_id]
        if broker_id == 1:
            return a
        if broker_id == 2:
            return b if index >= self.partitions - self.partitions // 10 else a
        return a if index % 2 == 0 else b


@dataclass(frozen=True)
class Case:
    label: str
    cluster: str  # the pristine data dir it starts from
    cluster_replicas: int
    broker_id: int
    directory: str
    replicas: int
    goal_s: float | None  # None: a control, not a goal


def populate(api: Api, layout: Layout, rng: random.Random) -> dict[str, Any]:
    """Register and unfence the brokers, create `layout`'s topics (RF 3) and confirm every
    placement through `api`; returns the broker epochs, how long creating and assigning took, and
    the log's end offset. Raises BenchError if a broker is left fenced or with unassigned replicas."""
    epochs = {}
    for broker_id in BROKERS:
        epochs[broker_id] = api.register(broker_id, new_id(rng), layout.dirs[broker_id])
        api.unfence(broker_id, epochs[broker_id])
    started = time.perf_counter()
    topic_ids: list[str] = []
    for t in range(layout.topics()):
        count = min(TOPIC_PARTITIONS, layout.partitions - t * TOPIC_PARTITIONS)
        assignment = [[BROKERS[(t * TOPIC_PARTITIONS + p + k) % 3] for k in range(3)] for p in range(count)]
        topic_ids.append(api.create_topic(f"bench-{t}", assignment))
    created = time.perf_counter()
    requests = 0
    for broker_id in BROKERS:
        placements = []
        for index in range(layout.partitions):
            topic, partition = divmod(index, TOPIC_PARTITIONS)
            placements.append((layout.directory(broker_id, index), topic_ids[topic], partition))
        requests += api.assign(broker_id, epochs[broker_id], placements)
    assigned = time.perf_counter()
    brokers = api.get("/v1/brokers")
    if any(b["unassignedReplicas"] or b["fenced"] for b in brokers):
        raise BenchError(f"setup left brokers fenced or with unassigned replicas: {brokers}")
    return {
        "epochs": epochs,
        "create": created - started,
        "assign": assigned - created,
        "requests": requests,
        "end": api.end_offset(),
    }


def build_cluster(ws: Workspace, layout: Layout, rng: random.Random, name: str) -> dict[int, int]:
    """Create the pristine cluster in `ws/<name>`; returns broker epochs."""
    proc = ws.controller(name)
    with running(proc), Api(proc) as api:
        built = populate(api, layout, rng)
        log(f"  created {layout.partitions:,} partitions (RF 3) in {built['create']:.1f} s")
        log(
            f"  confirmed {3 * layout.partitions:,} placements in {built['requests']} requests "
            f"in {built['assign']:.1f} s"
        )
        log(f"  pristine log: {built['end']:,} records")
    proc.stop()
    epochs: dict[int, int] = built["epochs"]
    return epochs


def measure(ws: Workspace, case: Case, epoch: int, name: str, *, gc_trace: bool) -> dict[str, float]:
    ws.copy(case.cluster, name)
    proc = ws.controller(name, gc_trace=gc_trace)
    try:
        with running(proc), Api(proc) as api:
            before = api.end_offset()
            warm = api.heartbeat(case.broker_id, epoch, before)  # no-op: warms the connection
            if warm["isFenced"]:
                raise BenchError(f"broker {case.broker_id} is fenced before the measurement")
            body = {
                "brokerId": case.broker_id,
                "brokerEpoch": epoch,
                "currentMetadataOffset": before,
                "offlineLogDirs": [case.directory],
            }
            cpu_before = cpu_seconds(proc.pid)
            wall_before = time.time()
            started = time.perf_counter()
            reply = api.post("/v1/brokers/heartbeat", body)
            elapsed = time.perf_counter() - started
            cpu = cpu_seconds(proc.pid) - cpu_before
            pauses = proc.gc_pauses(wall_before, time.time())
            after = api.end_offset()
            state = api.get(f"/v1/brokers/{case.broker_id}")
            if case.directory not in state["offlineLogDirs"] or reply["isFenced"]:
                raise BenchError(f"dir {case.directory} not offline after the heartbeat: {state}")
            return {
                "seconds": elapsed,
                "records": after - before,
                "cpu": cpu,
                "recovery": proc.ready_at - proc.started_at,
                "gc": sum(took for _, took in pauses),
                "gc_full": sum(1 for generation, _ in pauses if generation == 2),
            }
    finally:
        ws.remove(name)


def run(args: argparse.Namespace) -> list[Figure]:
    rng = random.Random(858)
    partitions = 10_000 if args.quick else 100_000
    repeats = args.repeats or (1 if args.quick else 3)
    big = Layout(partitions=partitions, dirs={b: (new_id(rng), new_id(rng)) for b in BROKERS})
    small = Layout(partitions=partitions // 10, dirs={b: (new_id(rng), new_id(rng)) for b in BROKERS})
    cases = [
        Case(f"{partitions:,} replicas", "big", 3 * partitions, 1, big.dirs[1][0], partitions, 1.0),
        Case(
            f"{partitions // 10:,} replicas", "big", 3 * partitions, 2, big.dirs[2][1], partitions // 10, 0.1
        ),
        # Control: the same number of affected replicas in a cluster 10 times smaller.
        Case(
            f"{partitions // 10:,} replicas",
            "small",
            3 * partitions // 10,
            1,
            small.dirs[1][0],
            partitions // 10,
            None,
        ),
    ]
    results: list[list[dict[str, float]]] = [[] for _ in cases]
    with Workspace(keep=args.keep) as ws:
        epochs = {}
        for name, layout in (("big", big), ("small", small)):
            log(f"setting up cluster '{name}': {3 * layout.partitions:,} replicas on 3 brokers x 2 dirs")
            epochs[name] = build_cluster(ws, layout, rng, name)
        for rep in range(repeats):
            for number, case in enumerate(cases):
                result = measure(
                    ws,
                    case,
                    epochs[case.cluster][case.broker_id],
                    f"rep{rep}-{number}",
                    gc_trace=args.gc_trace,
                )
                results[number].append(result)
                log(
                    f"  run {rep + 1}/{repeats}, dir of {case.label} in a {case.cluster_replicas:,}-replica "
                    f"cluster: {result['seconds'] * 1000:.1f} ms, {result['records']:,.0f} records, "
                    f"controller CPU {result['cpu'] * 1000:.0f} ms"
                    + (
                        f", of which GC {result['gc'] * 1000:.0f} ms ({result['gc_full']:.0f} full collections)"
                        if args.gc_trace
                        else ""
                    )
                    + f" (controller ready {result['recovery']:.1f} s after its start)"
                )
    rows = []
    figures = []
    for case, runs in zip(cases, results, strict=True):
        stats = summarise([r["seconds"] for r in runs])
        cpu = summarise([r["cpu"] for r in runs])
        records = runs[0]["records"]
        rows.append(
            [
                f"broker {case.broker_id}, dir of {case.label}",
                f"{case.cluster_replicas:,}",
                f"{stats['median'] * 1000:.1f} ms",
                f"{stats['max'] * 1000:.1f} ms",
                f"{cpu['median'] * 1000:.0f} ms",
                f"{summarise([r['gc'] for r in runs])['median'] * 1000:.0f} ms" if args.gc_trace else "-",
                f"{records:,.0f}",
                f"{stats['median'] / case.replicas * 1e6:.1f} us",
                "control" if case.goal_s is None else f"< {case.goal_s * 1000:.0f} ms",
            ]
        )
        if case.goal_s is not None:
            figures.append(
                Figure(
                    name=f"offline-dir heartbeat, dir of {case.label} of {case.cluster_replicas:,} (max)",
                    measured=stats["max"],
                    unit="s",
                    goal=case.goal_s,
                    detail=f"median {stats['median'] * 1000:.1f} ms, {records:,.0f} records",
                )
            )
    print()
    print(f"one heartbeat with offlineLogDirs=[dir], request sent -> reply received, {repeats} run(s) each")
    print_table(
        [
            "offline dir",
            "cluster replicas",
            "median",
            "max",
            "controller CPU",
            "of which GC",
            "records",
            "per replica",
            "goal",
        ],
        rows,
    )
    if args.profile:
        from bench.profile_offline_dir import profile_offline_dir

        profile_offline_dir(partitions)
    return figures


def main() -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=0, help="measurements per case (default 3)")
    parser.add_argument("--profile", action="store_true", help="also profile an in-process reproduction")
    parser.add_argument(
        "--no-gc-trace",
        dest="gc_trace",
        action="store_false",
        help="start the controller without the gc.callbacks hook that reports GC pauses",
    )
    return bench_main("offline-dir heartbeat", parser, run)


if __name__ == "__main__":
    raise SystemExit(main())
