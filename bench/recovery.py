"""Benchmark 4: recovery of a 1,000,000-record metadata log, and memory with 300,000 partitions.

Part A (recovery). The log is generated in-process through the real service code path
(`ControllerService` with its writer, `FileRecordLog`, the `jbod_core` decisions; only HTTP is
skipped), so every record is one the controller would write:

* 6 brokers with 2 dirs each register and are unfenced;
* 100,000 partitions with RF 3 are created (10 topics, automatic placement), their 300,000
  placements confirmed (AssignReplicasToDirs, batches of 2,250);
* then cycles, one broker after the other: a heartbeat reports one of its dirs offline, the broker
  asks to be fenced, re-registers with a new incarnation, is unfenced, and the leaders add it back
  to the ISRs (AlterPartition); finally AlterPartition ISR shrink/expand churn fills the log up to
  exactly the target.

Then a real `jbod-controller` process is started on that data dir with
`--snapshot-interval-records` larger than the log (so the whole log is replayed), several times;
measured: process start → `/readyz` 200 (goal < 15 s), the "Recovered the metadata log: ... in X s"
line it logs, and its RSS afterwards. The page cache is warm (the log was just written).

Part B (memory). A fresh controller gets 3 single-dir brokers and 300,000 partitions with RF 3
(900,000 replicas) created through `POST /v1/topics` (30 topics of 10,000); measured: VmRSS
(goal < 1 GiB) and VmHWM; then the same after a restart of that controller; and, as a control, a
controller with snapshots off given the same partitions (the default cuts one at 200,000 records).

    python -m bench.recovery [--quick] [--records 1000000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import time
from pathlib import Path
from typing import Any

from bench.common import (
    Api,
    BenchController,
    BenchError,
    Figure,
    Workspace,
    base_parser,
    bench_main,
    log,
    memory,
    new_id,
    print_table,
    running,
    summarise,
)
from jbod_controller.service import ControllerConfig, ControllerService
from jbod_core.ids import random_uuid
from jbod_core.messages import (
    AlterPartitionRequest,
    AssignReplicasToDirsRequest,
    BrokerHeartbeatRequest,
    CreateTopicRequest,
    RegisterBrokerRequest,
)

_RECOVERED = re.compile(r"Recovered the metadata log: (\d+) records replayed.* in ([0-9.]+) s")
BROKERS = tuple(range(1, 7))
TOPIC_PARTITIONS = 10_000


class LogGenerator:
    """Drives a `ControllerService` in-process to produce a realistic metadata log."""

    def __init__(self, data_dir: Path, rng: random.Random) -> None:
        config = ControllerConfig(
            data_dir=data_dir, cluster_id="bench", session_timeout_s=1e9, snapshot_interval_records=10**12
        )
        self.service = ControllerService(config, rng=rng)
        self.rng = rng
        self.dirs = {b: [random_uuid(rng), random_uuid(rng)] for b in BROKERS}
        self.counts: dict[str, int] = {}

    @property
    def end(self) -> int:
        return self.service.image.end_offset

    def _count(self, name: str, before: int) -> None:
        self.counts[name] = self.counts.get(name, 0) + self.end - before

    def epoch(self, broker_id: int) -> int:
        return self.service.image.brokers[broker_id].broker_epoch

    async def register(self, broker_id: int) -> None:
        before = self.end
        reply = await self.service.register_broker(
            RegisterBrokerRequest(
                broker_id=broker_id,
                cluster_id="bench",
                incarnation_id=random_uuid(self.rng),
                log_dirs=self.dirs[broker_id],
            )
        )
        if reply.error_code:
            raise BenchError(f"register {broker_id}: {reply}")
        self._count("register", before)

    async def heartbeat(self, broker_id: int, **extra: Any) -> Any:
        before = self.end
        reply = await self.service.broker_heartbeat(
            BrokerHeartbeatRequest(
                broker_id=broker_id,
                broker_epoch=self.epoch(broker_id),
                current_metadata_offset=self.end,
                **extra,
            )
        )
        if reply.error_code:
            raise BenchError(f"heartbeat {broker_id}: {reply}")
        if extra.get("offline_log_dirs"):
            name = "heartbeat (offline dir)"
        elif extra.get("want_fence"):
            name = "heartbeat (fence)"
        else:
            name = "heartbeat (unfence)"
        self._count(name, before)
        return reply

    async def create_topics(self, partitions: int) -> None:
        for t in range(-(-partitions // TOPIC_PARTITIONS)):
            before = self.end
            count = min(TOPIC_PARTITIONS, partitions - t * TOPIC_PARTITIONS)
            reply = await self.service.create_topic(
                CreateTopicRequest(name=f"recovery-{t}", num_partitions=count, replication_factor=3)
            )
            if reply.error_code:
                raise BenchError(f"create topic: {reply}")
            self._count("create-topic", before)

    async def assign_all(self, broker_id: int) -> None:
        image = self.service.image
        keys = sorted(image.replicas_by_broker.get(broker_id, ()), key=lambda k: (str(k[0]), k[1]))
        for start in range(0, len(keys), 2250):
            grouped: dict[str, dict[str, list[dict[str, int]]]] = {}
            for n, (topic_id, index) in enumerate(keys[start : start + 2250]):
                directory = str(self.dirs[broker_id][(start + n) % 2])
                grouped.setdefault(directory, {}).setdefault(str(topic_id), []).append(
                    {"partitionIndex": index}
                )
            body = {
                "brokerId": broker_id,
                "brokerEpoch": self.epoch(broker_id),
                "directories": [
                    {"id": d, "topics": [{"topicId": t, "partitions": p} for t, p in ts.items()]}
                    for d, ts in grouped.items()
                ],
            }
            before = self.end
            reply = await self.service.assign_replicas_to_dirs(
                AssignReplicasToDirsRequest.model_validate(body)
            )
            if reply.error_code:
                raise BenchError(f"assign: {reply}")
            self._count("assign-replicas-to-dirs", before)

    async def alter(self, changes: list[tuple[Any, int, Any, tuple[int, ...]]], name: str) -> None:
        """Send (topic id, index, part, new ISR) changes grouped by leader, ≤ 10,000 per request."""
        by_leader: dict[int, list[tuple[Any, int, Any, tuple[int, ...]]]] = {}
        for change in changes:
            by_leader.setdefault(change[2].leader, []).append(change)
        for leader, items in by_leader.items():
            for start in range(0, len(items), 10_000):
                grouped: dict[str, list[dict[str, Any]]] = {}
                for topic_id, index, part, isr in items[start : start + 10_000]:
                    grouped.setdefault(str(topic_id), []).append(
                        {
                            "partitionIndex": index,
                            "leaderEpoch": part.leader_epoch,
                            "partitionEpoch": part.partition_epoch,
                            "newIsr": list(isr),
                        }
                    )
                body = {
                    "brokerId": leader,
                    "brokerEpoch": self.epoch(leader),
                    "topics": [{"topicId": t, "partitions": p} for t, p in grouped.items()],
                }
                before = self.end
                reply = await self.service.alter_partition(AlterPartitionRequest.model_validate(body))
                bad = [p for t in reply.topics for p in t.partitions if p.error_code]
                if reply.error_code or bad:
                    raise BenchError(f"alter-partition: {reply.error_code} {bad[:3]}")
                self._count(name, before)

    async def rejoin_isr(self, broker_id: int, limit: int) -> None:
        image = self.service.image
        changes = []
        for key in sorted(image.replicas_by_broker.get(broker_id, ()), key=lambda k: (str(k[0]), k[1])):
            part = image.partition(key)
            if part is None or broker_id in part.isr or part.leader in (-1, broker_id):
                continue
            changes.append(
                (key[0], key[1], part, tuple(b for b in part.replicas if b in {*part.isr, broker_id}))
            )
            if len(changes) >= limit:
                break
        await self.alter(changes, "alter-partition (rejoin ISR)")

    async def isr_churn(self, count: int) -> None:
        """Exactly `count` AlterPartition records: ISR shrinks (drop the last follower) and expands."""
        image = self.service.image
        changes: list[tuple[Any, int, Any, tuple[int, ...]]] = []
        for key, part in image.iter_partitions():
            if len(changes) >= count:
                break
            if part.leader == -1:
                continue
            followers = [b for b in part.isr if b != part.leader]
            if followers:
                isr = tuple(b for b in part.isr if b != followers[-1])
            else:
                missing = [b for b in part.replicas if b not in part.isr and image.brokers[b].is_active]
                if not missing:
                    continue
                isr = tuple(b for b in part.replicas if b in {*part.isr, missing[0]})
            changes.append((key[0], key[1], part, isr))
        await self.alter(changes, "alter-partition (ISR churn)")

    async def generate(self, target: int, partitions: int) -> None:
        await self.service.start()
        try:
            for b in BROKERS:
                await self.register(b)
                await self.heartbeat(b)
            await self.create_topics(partitions)
            for b in BROKERS:
                await self.assign_all(b)
            cycle = 0
            # A cycle writes about as many records as the broker has replicas, twice.
            per_cycle = 2 * 3 * partitions // len(BROKERS)
            while target - self.end > per_cycle:
                b = BROKERS[cycle % len(BROKERS)]
                await self.heartbeat(b, offline_log_dirs=[self.dirs[b][cycle // len(BROKERS) % 2]])
                await self.heartbeat(b, want_fence=True)
                await self.register(b)
                reply = await self.heartbeat(b)
                if reply.is_fenced:
                    raise BenchError(f"broker {b} stayed fenced after re-registering")
                await self.rejoin_isr(b, target - self.end)
                cycle += 1
            while self.end < target:
                await self.isr_churn(min(10_000 * len(BROKERS), target - self.end))
        finally:
            await self.service.stop()


def generate_log(data_dir: Path, target: int, partitions: int, seed: int) -> dict[str, int]:
    generator = LogGenerator(data_dir, random.Random(seed))
    asyncio.run(generator.generate(target, partitions))
    return generator.counts


def part_a(ws: Workspace, quick: bool, target: int, repeats: int) -> list[Figure]:
    partitions = 10_000 if quick else 100_000
    data_dir = ws.root / "recovery"
    log(
        f"  generating a {target:,}-record log in-process ({partitions:,} partitions x RF 3, 6 brokers x 2 dirs)"
    )
    started = time.perf_counter()
    counts = generate_log(data_dir, target, partitions, seed=1_000_000)
    size = sum(p.stat().st_size for p in (data_dir / "metadata").glob("*.log"))
    log(
        f"  generated {sum(counts.values()):,} records ({size / 2**20:.0f} MiB of segments) in "
        f"{time.perf_counter() - started:.1f} s: "
        + ", ".join(f"{name} {count:,}" for name, count in counts.items())
    )
    results = []
    for rep in range(repeats):
        proc = ws.controller("recovery", extra_args=["--snapshot-interval-records", str(10 * target)])
        with running(proc):
            mem = memory(proc.pid)
            match = None
            for line in proc.stderr().splitlines():
                match = _RECOVERED.search(line) or match
            if match is None:
                raise BenchError(f"no recovery line in the controller's log: {proc.stderr()[-1000:]}")
            with Api(proc) as api:
                end = api.end_offset()
            result = {
                "ready": proc.ready_at - proc.started_at,
                "listening": proc.listening_at - proc.started_at,
                "logged": float(match.group(2)),
                "replayed": int(match.group(1)),
                "rss": mem["VmRSS"],
                "hwm": mem["VmHWM"],
            }
            if result["replayed"] != target or end != target:
                raise BenchError(
                    f"replayed {result['replayed']:,} records, end offset {end:,}; wanted {target:,}"
                )
        results.append(result)
        log(
            f"  start {rep + 1}/{repeats}: ready {result['ready']:.2f} s after the process start "
            f"(listening after {result['listening']:.2f} s; it logged 'Recovered the metadata log: "
            f"{result['replayed']:,} records replayed in {result['logged']:.2f} s'); "
            f"RSS {result['rss'] / 2**20:.0f} MiB, peak {result['hwm'] / 2**20:.0f} MiB"
        )
    ready = summarise([r["ready"] for r in results])
    logged = summarise([r["logged"] for r in results])
    print()
    print_table(
        ["recovery of the log", "median", "max"],
        [
            ["process start → /readyz 200", f"{ready['median']:.2f} s", f"{ready['max']:.2f} s"],
            ["'Recovered ... in X s' (logged)", f"{logged['median']:.2f} s", f"{logged['max']:.2f} s"],
            [
                "RSS after recovery (peak)",
                f"{results[-1]['rss'] / 2**20:.0f} MiB",
                f"{max(r['hwm'] for r in results) / 2**20:.0f} MiB",
            ],
        ],
    )
    return [
        Figure(
            name=f"recovery of a {target:,}-record log: start → /readyz (max)",
            measured=ready["max"],
            unit="s",
            goal=15.0,
            detail=f"median {ready['median']:.2f} s; logged replay {logged['median']:.2f} s",
        )
    ]


_SNAPSHOT = re.compile(r"Wrote a metadata snapshot of (\d+) records at offset (\d+) in ([0-9.]+) s")
DEFAULT_SNAPSHOT_INTERVAL = 200_000  # jbod-controller's default --snapshot-interval-records


def fill(proc: BenchController, partitions: int, rng: random.Random, snapshots: bool) -> dict[str, int]:
    """Create `partitions` partitions x RF 3 on 3 single-dir brokers; returns the memory after."""
    with Api(proc) as api:
        for b in (1, 2, 3):
            api.unfence(b, api.register(b, new_id(rng), [new_id(rng)]))
        started = time.perf_counter()
        for t in range(partitions // TOPIC_PARTITIONS):
            reply = api.post(
                "/v1/topics",
                {"name": f"memory-{t}", "numPartitions": TOPIC_PARTITIONS, "replicationFactor": 3},
                admin=True,
            )
            if reply["numPartitions"] != TOPIC_PARTITIONS:
                raise BenchError(f"create topic: {reply}")
        end = api.end_offset()
    log(
        f"  created {partitions:,} partitions x RF 3 through the API in {time.perf_counter() - started:.1f} s; "
        f"log at {end:,} records"
    )
    expected = end // DEFAULT_SNAPSHOT_INTERVAL if snapshots else 0
    deadline = time.monotonic() + 60
    while True:  # let the snapshots cut meanwhile finish
        written = [m for m in map(_SNAPSHOT.search, proc.stderr().splitlines()) if m]
        if len(written) >= expected or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    for m in written:
        log(
            f"    the controller wrote a snapshot of {int(m.group(1)):,} records at offset {m.group(2)} in {m.group(3)} s"
        )
    return memory(proc.pid)


def part_b(ws: Workspace, quick: bool) -> list[Figure]:
    partitions = 30_000 if quick else 300_000
    rows: list[tuple[str, int, int]] = []
    proc = ws.controller("memory")
    with running(proc):
        baseline = memory(proc.pid)["VmRSS"]
        live = fill(proc, partitions, random.Random(300_000), snapshots=True)
        rows.append(("after creating them (live)", live["VmRSS"], live["VmHWM"]))
        proc.stop()
        proc.start()
        restarted = memory(proc.pid)
        rows.append(("after a restart (recovered)", restarted["VmRSS"], restarted["VmHWM"]))
    # Control: the same without snapshots, to show what cutting a snapshot costs in memory.
    control_proc = ws.controller("memory-control", extra_args=["--snapshot-interval-records", str(10**9)])
    with running(control_proc):
        control = fill(control_proc, partitions, random.Random(300_000), snapshots=False)
        rows.append(("control: the same with snapshots off (live)", control["VmRSS"], control["VmHWM"]))
    print()
    print(
        f"controller memory with {partitions:,} partitions x RF 3 (empty controller: {baseline / 2**20:.0f} MiB)"
    )
    print_table(
        ["state", "VmRSS", "VmHWM (peak)"],
        [[r[0], f"{r[1] / 2**20:.0f} MiB", f"{r[2] / 2**20:.0f} MiB"] for r in rows],
    )
    worst = max(live["VmRSS"], restarted["VmRSS"])
    return [
        Figure(
            name=f"controller RSS with {partitions:,} partitions x RF 3",
            measured=worst,
            unit="bytes",
            goal=2**30,
            detail=f"live {live['VmRSS'] / 2**20:.0f} MiB, after restart {restarted['VmRSS'] / 2**20:.0f} MiB, "
            f"with snapshots off {control['VmRSS'] / 2**20:.0f} MiB",
        ),
        Figure(
            name=f"controller peak RSS (VmHWM) while creating {partitions:,} partitions",
            measured=live["VmHWM"],
            unit="bytes",
            goal=2**30,
            detail="the peak a container memory limit would have to allow",
        ),
    ]


def run(args: argparse.Namespace) -> list[Figure]:
    target = args.records or (100_000 if args.quick else 1_000_000)
    repeats = args.repeats or (1 if args.quick else 3)
    with Workspace(keep=args.keep) as ws:
        figures = part_a(ws, args.quick, target, repeats)
        ws.remove("recovery")
        figures += part_b(ws, args.quick)
    return figures


def main() -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=0, help="log size (default 1,000,000)")
    parser.add_argument("--repeats", type=int, default=0, help="controller starts measured (default 3)")
    return bench_main("metadata log recovery and memory", parser, run)


if __name__ == "__main__":
    raise SystemExit(main())
