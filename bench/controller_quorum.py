"""Controller quorum on etcd (§3.8) vs the file log: failover, write throughput, a 100k-replica offline dir.

Two metadata logs, measured in one run and printed side by side:

* **file log**: one `jbod-controller` with its file log (the embedded default);
* **etcd quorum**: a real 3-member etcd cluster (`jbod_local.etcd.EtcdCluster`, loopback) and 3
  `jbod-controller` processes sharing one metadata log in it (`--etcd-endpoints`, `--node-id`,
  `--lease-ms`, one cluster token and one admin token for all).

Part 1, failover (brokers' session timeout 9 s; 3 registered brokers heartbeat every 250 ms from a
thread of this process, following the active controller like a real broker: errorCode 41 →
`activeController.url`, connection error → next URL):

* etcd: `kill -9` of the active controller → the first topic create (3 partitions, RF 3) answered
  errorCode 0 by any controller; every URL is tried in a tight loop with 20 ms pauses between
  rounds. The killed controller is then restarted on its port (it rejoins as a standby) and the
  next run waits until every controller is ready and all agree on the active one.
* file log (no failover exists): `kill -9`, the controller restarted at once on the same data dir;
  restart (process spawn) → first accepted topic create.
* both: any heartbeat reply during the runs that says `isFenced` or carries an error other than 41
  counts as a fenced broker (the goal: none).

Part 2, throughput (same clusters, on the active controller): topic creates of 3 partitions RF 3
over the 3 brokers, sequential (1 client) and with 8 concurrent clients (one keep-alive connection
each); heartbeats from 8 concurrent clients (8 more brokers, one each, back to back) for 5 s.

Part 3, one heartbeat with `offlineLogDirs=[dir]` in a cluster of 300,000 replicas built like
`bench.offline_dir` (3 brokers x 2 dirs, 100,000 partitions RF 3 created with explicit
`replicaAssignment`s, every placement confirmed through `/v1/assignments`): request sent → reply
for broker 2's small dir (10,000 replicas), then broker 1's dir A (100,000 replicas, one decision
that moves leadership off and shrinks the ISR of every partition). On etcd, also the standbys'
time to replay that batch (their `metadataEndOffset` reaching the active's), the large-batch path
(records staged in 1 MiB chunks, committed by one transaction). Sessions are long here (no
heartbeats needed) and the processes are left to go idle before each measurement.

    python -m bench.controller_quorum [--runs 20] [--quick] [--lease-ms 2000] [--keep]

Controller stderr logs are `<workspace>/<name>.stderr.log` (`--keep` keeps them).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import random
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.common import (
    JSON,
    LONG_SESSION_MS,
    Api,
    BenchController,
    BenchError,
    Figure,
    Workspace,
    base_parser,
    bench_main,
    cpu_seconds,
    log,
    machine_load,
    new_id,
    percentile,
)
from bench.offline_dir import BROKERS, TOPIC_PARTITIONS, Layout, populate
from jbod_local.etcd import EtcdCluster

SESSION_MS = 9000  # the product default: a failover must fit well inside it
CLUSTER_TOKEN = "bench-quorum-cluster-token"
ADMIN_TOKEN = "bench-quorum-admin-token"
NOT_ACTIVE = 41  # §3.8: a standby's answer to a write
TOPIC_EXISTS = 36
CLIENTS = 8
FILE, ETCD = "file log", "etcd quorum"


# -- clusters ---------------------------------------------------------------------------------


def write_tokens(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    for name, token in (("cluster.token", CLUSTER_TOKEN), ("admin.token", ADMIN_TOKEN)):
        (path / name).write_text(token + "\n")
        (path / name).chmod(0o600)


def describe(url: str, *, timeout: float = 2.0) -> dict[str, Any] | None:
    """`GET /v1/cluster` of one controller, or None if it does not answer 200."""
    try:
        reply = httpx.get(
            url + "/v1/cluster", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=timeout
        )
    except httpx.HTTPError:
        return None
    if reply.status_code != 200:
        return None
    data: dict[str, Any] = reply.json()
    return data


@dataclass
class Cluster:
    """The controllers of one metadata log: one (file log) or several sharing etcd."""

    ws: Workspace
    name: str
    kind: str
    session_timeout_ms: int
    lease_ms: int = 2000
    size: int = 3
    etcd: EtcdCluster | None = None
    nodes: dict[int, BenchController] = field(default_factory=dict)

    def start(self) -> Cluster:
        if self.kind == FILE:
            node = self._controller(f"{self.name}-controller", [])
            self.nodes[1] = node.start()
            return self
        self.etcd = EtcdCluster(self.ws.root / f"{self.name}-etcd", self.size).start()
        for node_id in range(1, self.size + 1):
            args = ["--etcd-endpoints", self.etcd.endpoints, "--node-id", str(node_id)]
            args += ["--lease-ms", str(self.lease_ms)]
            self.nodes[node_id] = self._controller(f"{self.name}-controller-{node_id}", args).start()
        self.active()
        return self

    def _controller(self, name: str, args: list[str]) -> BenchController:
        write_tokens(self.ws.root / name)
        return self.ws.controller(name, session_timeout_ms=self.session_timeout_ms, extra_args=args)

    def stop(self) -> None:
        for node in self.nodes.values():
            node.kill()
        if self.etcd is not None:
            self.etcd.stop()

    def __enter__(self) -> Cluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes.values()]

    def running(self, node_id: int) -> bool:
        process = self.nodes[node_id].process
        return process is not None and process.poll() is None

    def active(self, *, timeout: float = 60.0) -> int:
        """The node every running controller names as active (waits until they agree)."""
        if self.kind == FILE:
            return 1
        deadline = time.monotonic() + timeout
        while True:
            named: set[int | None] = set()
            for node_id, node in self.nodes.items():
                if not self.running(node_id):
                    continue
                described = describe(node.url)
                active = described.get("activeController") if described else None
                named.add(active["nodeId"] if active else None)
            found = next(iter(named)) if len(named) == 1 else None
            if found is not None:
                return found
            if time.monotonic() > deadline:
                raise BenchError(f"the controllers do not agree on an active one: {named}")
            time.sleep(0.05)

    def standbys(self) -> list[int]:
        active = self.active()
        return [n for n in self.nodes if n != active]

    def pids(self) -> list[int]:
        pids = [node.pid for n, node in self.nodes.items() if self.running(n)]
        if self.etcd is not None:
            pids += [pid for pid in self.etcd.pids() if pid is not None]
        return pids

    def wait_caught_up(self, end: int, *, timeout: float = 600.0) -> dict[int, float]:
        """Poll every controller's metadataEndOffset (10 ms) until each reaches `end`; returns
        the perf_counter() at which each was seen there."""
        seen: dict[int, float] = {}
        threads = []

        def follow(node_id: int, url: str) -> None:
            deadline = time.monotonic() + timeout
            with httpx.Client(headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=60) as client:
                while time.monotonic() < deadline:
                    with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
                        if client.get(url + "/v1/cluster").json()["metadataEndOffset"] >= end:
                            seen[node_id] = time.perf_counter()
                            return
                    time.sleep(0.01)

        for node_id, node in self.nodes.items():
            thread = threading.Thread(target=follow, args=(node_id, node.url), daemon=True)
            thread.start()
            threads.append(thread)
        for thread in threads:
            thread.join()
        missing = sorted(set(self.nodes) - set(seen))
        if missing:
            raise BenchError(f"controllers {missing} did not reach offset {end} in {timeout:.0f} s")
        return seen


def quiesce(pids: Sequence[int], *, idle_cores: float = 0.10, timeout: float = 240.0) -> float:
    """Wait until the processes together use less than `idle_cores` of a core over one second
    (snapshots, compaction, a standby's replay finish first); returns the seconds waited."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        before = sum(cpu_seconds(pid) for pid in pids)
        time.sleep(1.0)
        if sum(cpu_seconds(pid) for pid in pids) - before < idle_cores:
            return time.monotonic() - started
    log(f"  (still busy after {timeout:.0f} s; measuring anyway)")
    return timeout


# -- brokers that follow the active controller --------------------------------------------------


@dataclass
class Broker:
    broker_id: int
    epoch: int


class Heartbeater:
    """Heartbeats brokers every `interval` s from a thread, following the active controller;
    keeps every reply that says the broker is fenced or carries an error other than 41."""

    def __init__(self, cluster: Cluster, brokers: Sequence[Broker], *, interval: float = 0.25) -> None:
        self.cluster = cluster
        self.brokers = list(brokers)
        self.interval = interval
        self.fenced: list[tuple[float, dict[str, Any]]] = []
        self.ok = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeater", daemon=True)

    def _run(self) -> None:
        headers = {"Authorization": f"Bearer {CLUSTER_TOKEN}"}
        url = ""
        timeout = httpx.Timeout(2.0, connect=0.5)
        with httpx.Client(headers=headers, timeout=timeout) as client:
            while not self._stop.is_set():
                for broker in self.brokers:
                    urls = self.cluster.urls
                    candidates = ([url] if url else []) + urls
                    tried = 0
                    while candidates and tried < 2 * len(urls) + 1:
                        candidate = candidates.pop(0)
                        tried += 1
                        try:
                            reply = client.post(
                                candidate + "/v1/brokers/heartbeat",
                                json={
                                    "brokerId": broker.broker_id,
                                    "brokerEpoch": broker.epoch,
                                    "currentMetadataOffset": 2**62,
                                },
                            ).json()
                        except (httpx.HTTPError, ValueError):
                            continue
                        if reply.get("errorCode") == NOT_ACTIVE:
                            named = (reply.get("activeController") or {}).get("url")
                            if named and named != candidate:
                                candidates.insert(0, named)
                            continue
                        url = candidate
                        if reply.get("errorCode") != 0 or reply.get("isFenced"):
                            self.fenced.append((time.monotonic(), reply))
                        else:
                            self.ok += 1
                        break
                self._stop.wait(self.interval)

    def __enter__(self) -> Heartbeater:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def bring_up(api: Api, broker_ids: Sequence[int], rng: random.Random, *, dirs: int = 2) -> list[Broker]:
    out = []
    for broker_id in broker_ids:
        epoch = api.register(broker_id, new_id(rng), [new_id(rng) for _ in range(dirs)])
        api.unfence(broker_id, epoch)
        out.append(Broker(broker_id, epoch))
    return out


# -- part 1: failover ---------------------------------------------------------------------------


def first_accepted_write(urls: Sequence[str], name: str, *, timeout: float = 120.0) -> tuple[float, str, int]:
    """Create topic `name` on any of `urls` until one answers errorCode 0 (or 36: an earlier
    attempt whose reply was lost created it); returns (perf_counter at the reply, url, code)."""
    body = orjson.dumps({"name": name, "numPartitions": 3, "replicationFactor": 3})
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}", **JSON}
    deadline = time.monotonic() + timeout
    with httpx.Client(headers=headers, timeout=httpx.Timeout(2.0, connect=0.5)) as client:
        while time.monotonic() < deadline:
            for url in urls:
                try:
                    reply = client.post(url + "/v1/topics", content=body)
                    code = reply.json().get("errorCode") if reply.status_code == 200 else None
                except (httpx.HTTPError, ValueError):
                    continue
                if code in (0, TOPIC_EXISTS):
                    return time.perf_counter(), url, code
            time.sleep(0.02)
    raise BenchError(f"no controller accepted a topic create within {timeout:.0f} s")


def wait_settled(cluster: Cluster) -> int:
    """Every controller running and ready, all naming one active controller; returns it."""
    for node_id, node in cluster.nodes.items():
        if not cluster.running(node_id):
            raise BenchError(f"controller {node_id} is not running: {node.stderr()[-2000:]}")
    return cluster.active()


def failover_runs(cluster: Cluster, heartbeater: Heartbeater, runs: int) -> list[dict[str, Any]]:
    results = []
    for number in range(runs):
        active = wait_settled(cluster)
        time.sleep(1.0)  # the heartbeater has found the active one; nothing in flight from the last run
        fenced_before = len(heartbeater.fenced)
        node = cluster.nodes[active]
        killed = time.perf_counter()
        node.kill()
        if cluster.kind == FILE:
            node.start()
            spawned, ready = node.started_at, node.ready_at
            accepted, url, code = first_accepted_write([node.url], f"failover-{number}")
            result = {
                "seconds": accepted - spawned,
                "ready": ready - spawned,
                "killed_to_write": accepted - killed,
            }
            new = 1
        else:
            accepted, url, code = first_accepted_write(cluster.urls, f"failover-{number}")
            new = next(n for n, proc in cluster.nodes.items() if proc.url == url)
            node.start()  # rejoins as a standby on its port
            result = {"seconds": accepted - killed, "ready": node.ready_at - node.started_at}
        time.sleep(0.5)  # heartbeats of the run's last moments
        result.update(
            {
                "old": active,
                "new": new,
                "exists": code == TOPIC_EXISTS,
                "fenced": len(heartbeater.fenced) - fenced_before,
            }
        )
        results.append(result)
        log(
            f"  {cluster.kind} run {number + 1}/{runs}: "
            + (
                f"restart → first accepted write {result['seconds'] * 1000:.0f} ms "
                f"(ready after {result['ready'] * 1000:.0f} ms)"
                if cluster.kind == FILE
                else f"kill -9 of controller {active} → first accepted write {result['seconds'] * 1000:.0f} ms "
                f"by controller {new}; the killed one back as a standby after {result['ready'] * 1000:.0f} ms"
            )
            + (", topic existed (reply lost?)" if result["exists"] else "")
            + (f", {result['fenced']} FENCED/ERROR heartbeat replies" if result["fenced"] else "")
        )
    return results


# -- part 2: throughput -------------------------------------------------------------------------


async def _creates(url: str, names: Sequence[str], clients: int) -> dict[str, Any]:
    import aiohttp

    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}", **JSON}
    pending = iter(names)
    latencies: list[float] = []
    errors: dict[Any, int] = {}

    async def client() -> None:
        connector = aiohttp.TCPConnector(limit=1)
        async with aiohttp.ClientSession(base_url=url, headers=headers, connector=connector) as session:
            for name in pending:
                body = orjson.dumps({"name": name, "numPartitions": 3, "replicationFactor": 3})
                sent = time.perf_counter()
                async with session.post("/v1/topics", data=body) as reply:
                    raw = await reply.read()
                code = orjson.loads(raw).get("errorCode") if reply.status == 200 else f"HTTP {reply.status}"
                latencies.append(time.perf_counter() - sent)
                if code != 0:
                    errors[code] = errors.get(code, 0) + 1

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    elapsed = time.perf_counter() - started
    return {
        "rate": (len(names) - sum(errors.values())) / elapsed,
        "latencies": sorted(latencies),
        "errors": errors,
    }


async def _heartbeats(url: str, brokers: Sequence[Broker], duration: float) -> dict[str, Any]:
    import aiohttp

    headers = {"Authorization": f"Bearer {CLUSTER_TOKEN}", **JSON}
    latencies: list[float] = []
    errors: dict[Any, int] = {}
    end = time.perf_counter() + duration

    async def client(broker: Broker) -> None:
        body = orjson.dumps(
            {"brokerId": broker.broker_id, "brokerEpoch": broker.epoch, "currentMetadataOffset": 2**62}
        )
        connector = aiohttp.TCPConnector(limit=1)
        async with aiohttp.ClientSession(base_url=url, headers=headers, connector=connector) as session:
            while time.perf_counter() < end:
                sent = time.perf_counter()
                async with session.post("/v1/brokers/heartbeat", data=body) as reply:
                    raw = await reply.read()
                data = orjson.loads(raw) if reply.status == 200 else {"errorCode": f"HTTP {reply.status}"}
                latencies.append(time.perf_counter() - sent)
                if data.get("errorCode") != 0 or data.get("isFenced"):
                    key = data.get("errorCode") or "fenced"
                    errors[key] = errors.get(key, 0) + 1

    started = time.perf_counter()
    await asyncio.gather(*(client(b) for b in brokers))
    elapsed = time.perf_counter() - started
    return {
        "rate": (len(latencies) - sum(errors.values())) / elapsed,
        "latencies": sorted(latencies),
        "errors": errors,
    }


def throughput(cluster: Cluster, rng: random.Random, *, topics: int, duration: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    active = cluster.nodes[wait_settled(cluster)]
    for label, clients in (("sequential", 1), ("concurrent", CLIENTS)):
        names = [f"tp-{label}-{n}" for n in range(topics)]
        pid = active.pid
        cpu = cpu_seconds(pid)
        result = asyncio.run(_creates(active.url, names, clients))
        result["cpu"] = cpu_seconds(pid) - cpu
        out[f"creates {label}"] = result
        log(
            f"  {cluster.kind}: {topics} topic creates (3 partitions, RF 3), {clients} client(s): "
            f"{result['rate']:,.0f}/s, p50 {percentile(result['latencies'], 0.5) * 1000:.1f} ms, "
            f"p99 {percentile(result['latencies'], 0.99) * 1000:.1f} ms, errors {result['errors'] or 'none'}, "
            f"active controller CPU {result['cpu'] * 1000:.0f} ms"
        )
    with Api(active) as api:
        load = bring_up(api, range(101, 101 + CLIENTS), rng, dirs=1)
    pid = active.pid
    cpu = cpu_seconds(pid)
    result = asyncio.run(_heartbeats(active.url, load, duration))
    result["cpu"] = cpu_seconds(pid) - cpu
    out["heartbeats"] = result
    log(
        f"  {cluster.kind}: heartbeats, {CLIENTS} clients back to back for {duration:.0f} s: "
        f"{result['rate']:,.0f}/s, p50 {percentile(result['latencies'], 0.5) * 1000:.2f} ms, "
        f"p99 {percentile(result['latencies'], 0.99) * 1000:.2f} ms, errors {result['errors'] or 'none'}, "
        f"active controller CPU {result['cpu'] / duration * 100:.0f}% of a core"
    )
    return out


# -- part 3: a 100,000-replica offline dir --------------------------------------------------------


def offline_dir(cluster: Cluster, partitions: int, rng: random.Random) -> dict[str, Any]:
    layout = Layout(partitions=partitions, dirs={b: (new_id(rng), new_id(rng)) for b in BROKERS})
    active = cluster.nodes[cluster.active()]
    with Api(active) as api:
        built = populate(api, layout, rng)
        log(
            f"  {cluster.kind}: {partitions:,} partitions (RF 3) created in {built['create']:.1f} s, "
            f"{3 * partitions:,} placements confirmed in {built['assign']:.1f} s; {built['end']:,} records"
        )
        if cluster.kind == ETCD:
            seen = cluster.wait_caught_up(built["end"])
            log(f"  {cluster.kind}: every standby at offset {built['end']:,} ({len(seen)} controllers)")
        cases = [
            ("small", 2, layout.dirs[2][1], partitions // 10),
            ("big", 1, layout.dirs[1][0], partitions),
        ]
        out: dict[str, Any] = {"create": built["create"], "assign": built["assign"]}
        for label, broker_id, directory, replicas in cases:
            waited = quiesce(cluster.pids())
            epoch = built["epochs"][broker_id]
            before = api.end_offset()
            warm = api.heartbeat(broker_id, epoch, before)  # no-op: warms the connection
            if warm["isFenced"]:
                raise BenchError(f"broker {broker_id} is fenced before the measurement")
            body = {
                "brokerId": broker_id,
                "brokerEpoch": epoch,
                "currentMetadataOffset": before,
                "offlineLogDirs": [directory],
            }
            others = [pid for pid in cluster.pids() if pid != active.pid]
            cpu, others_cpu = cpu_seconds(active.pid), sum(cpu_seconds(pid) for pid in others)
            sent = time.perf_counter()
            api.post("/v1/brokers/heartbeat", body)
            replied = time.perf_counter()
            cpu, others_cpu = (
                cpu_seconds(active.pid) - cpu,
                sum(cpu_seconds(pid) for pid in others) - others_cpu,
            )
            after = api.end_offset()
            result: dict[str, Any] = {
                "seconds": replied - sent,
                "records": after - before,
                "replicas": replicas,
                "cpu": cpu,
                "others_cpu": others_cpu,
            }
            if cluster.kind == ETCD:
                standbys = [n for n in cluster.nodes if cluster.nodes[n] is not active]
                seen = cluster.wait_caught_up(after)
                result["replay"] = max(seen[n] for n in standbys) - replied
                result["replay_from_sent"] = max(seen[n] for n in standbys) - sent
            state = api.get(f"/v1/brokers/{broker_id}")
            if directory not in state["offlineLogDirs"]:
                raise BenchError(f"dir {directory} not offline after the heartbeat: {state}")
            out[label] = result
            log(
                f"  {cluster.kind}: heartbeat with broker {broker_id}'s dir of {replicas:,} replicas offline "
                f"(after {waited:.0f} s idle wait): {result['seconds'] * 1000:.0f} ms, "
                f"{result['records']:,} records, active controller CPU {result['cpu'] * 1000:.0f} ms"
                + (
                    f", etcd members + standbys CPU {result['others_cpu'] * 1000:.0f} ms meanwhile"
                    if others
                    else ""
                )
                + (
                    f"; standbys caught up {result['replay'] * 1000:.0f} ms after the reply"
                    if "replay" in result
                    else ""
                )
            )
    return out


# -- the report ---------------------------------------------------------------------------------


def ms(value: float) -> str:
    return f"{value * 1000:,.0f} ms"


def spread(values: Sequence[float]) -> str:
    ordered = sorted(values)
    return f"p50 {ms(percentile(ordered, 0.5))}, p99 {ms(percentile(ordered, 0.99))}, max {ms(ordered[-1])}"


def rate_text(result: dict[str, Any]) -> str:
    lat = result["latencies"]
    errors = sum(result["errors"].values())
    return (
        f"{result['rate']:,.0f}/s (p50 {percentile(lat, 0.5) * 1000:.1f} ms, p99 {percentile(lat, 0.99) * 1000:.1f} ms"
        + (f", {errors} errors" if errors else "")
        + ")"
    )


@contextlib.contextmanager
def cluster_with_brokers(
    ws: Workspace, kind: str, name: str, rng: random.Random, *, lease_ms: int
) -> Iterator[tuple[Cluster, Heartbeater]]:
    with Cluster(ws, name, kind, SESSION_MS, lease_ms=lease_ms) as cluster:
        with Api(cluster.nodes[cluster.active()]) as api:
            brokers = bring_up(api, BROKERS, rng)
        with Heartbeater(cluster, brokers) as heartbeater:
            yield cluster, heartbeater


def fenced_now(cluster: Cluster) -> list[int]:
    with Api(cluster.nodes[cluster.active()]) as api:
        return [b["brokerId"] for b in api.get("/v1/brokers") if b["fenced"] and b["brokerId"] in BROKERS]


def run(args: argparse.Namespace) -> list[Figure]:
    runs = args.runs or (3 if args.quick else 20)
    topics = args.topics or (60 if args.quick else 300)
    duration = 2.0 if args.quick else 5.0
    partitions = args.partitions or (10_000 if args.quick else 100_000)
    rng = random.Random(858)
    version = ".".join(str(v) for v in EtcdCluster(Path("unused")).version)  # `etcd --version`
    log(
        f"etcd {version}; lease {args.lease_ms} ms; broker session timeout {SESSION_MS} ms; {os.cpu_count()} cores"
    )
    res: dict[str, dict[str, Any]] = {FILE: {}, ETCD: {}}
    with Workspace(keep=args.keep) as ws:
        log(f"workspace {ws.root}")
        for kind, name in ((FILE, "file"), (ETCD, "quorum")):
            log(f"\n-- {kind}: failover ({runs} runs) and throughput ({machine_load()})")
            with cluster_with_brokers(ws, kind, name, rng, lease_ms=args.lease_ms) as (cluster, heartbeater):
                res[kind]["failover"] = failover_runs(cluster, heartbeater, runs)
                res[kind]["fenced_replies"] = list(heartbeater.fenced)
                res[kind]["fenced_after"] = fenced_now(cluster)
                res[kind].update(throughput(cluster, rng, topics=topics, duration=duration))
            if heartbeater.fenced:
                log(f"  {kind}: fenced/error heartbeat replies: {heartbeater.fenced[:5]}")
        for kind, name in ((FILE, "file-offline"), (ETCD, "quorum-offline")):
            log(f"\n-- {kind}: offline dir in a {3 * partitions:,}-replica cluster ({machine_load()})")
            with Cluster(ws, name, kind, LONG_SESSION_MS, lease_ms=args.lease_ms) as cluster:
                res[kind]["offline"] = offline_dir(cluster, partitions, rng)
    return report(
        res, runs=runs, topics=topics, duration=duration, partitions=partitions, version=version, args=args
    )


def report(
    res: dict[str, dict[str, Any]],
    *,
    runs: int,
    topics: int,
    duration: float,
    partitions: int,
    version: str,
    args: argparse.Namespace,
) -> list[Figure]:
    file, etcd = res[FILE], res[ETCD]
    file_fo = [r["seconds"] for r in file["failover"]]
    etcd_fo = [r["seconds"] for r in etcd["failover"]]
    won = collections.Counter(r["new"] for r in etcd["failover"])
    winners = ", ".join(f"controller {n} x{won[n]}" for n in sorted(won))

    def fenced_text(r: dict[str, Any]) -> str:
        replies = len(r["fenced_replies"])
        return f"{replies} fenced/error replies; fenced at the end: {r['fenced_after'] or 'none'}"

    def offline_text(r: dict[str, Any]) -> str:
        return f"{ms(r['seconds'])} ({r['records']:,} records, active CPU {ms(r['cpu'])})"

    big, small = partitions, partitions // 10
    rows: list[tuple[str, str, str, str]] = [
        (
            f"kill -9 → first accepted write ({runs} runs)",
            f"restart → first accepted write: {spread(file_fo)}",
            spread(etcd_fo),
            "p99 < 3 s (etcd)",
        ),
        (
            "killed controller restarted → ready",
            spread([r["ready"] for r in file["failover"]]),
            f"{spread([r['ready'] for r in etcd['failover']])} (standby caught up)",
            "",
        ),
        ("brokers fenced during the runs (9 s sessions)", fenced_text(file), fenced_text(etcd), "none"),
        (
            f"topic creates, 3 partitions RF 3, sequential ({topics})",
            rate_text(file["creates sequential"]),
            rate_text(etcd["creates sequential"]),
            "",
        ),
        (
            f"topic creates, {CLIENTS} concurrent clients ({topics})",
            rate_text(file["creates concurrent"]),
            rate_text(etcd["creates concurrent"]),
            "",
        ),
        (
            f"heartbeats, {CLIENTS} concurrent clients, {duration:.0f} s",
            rate_text(file["heartbeats"]),
            rate_text(etcd["heartbeats"]),
            "",
        ),
        (
            f"setup: {big:,} partitions RF 3 created (topics of {TOPIC_PARTITIONS:,})",
            f"{file['offline']['create']:.1f} s",
            f"{etcd['offline']['create']:.1f} s",
            "",
        ),
        (
            f"setup: {3 * big:,} placements confirmed (batches of 2,250)",
            f"{file['offline']['assign']:.1f} s",
            f"{etcd['offline']['assign']:.1f} s",
            "",
        ),
        (
            f"offline-dir heartbeat, {small:,} of {3 * big:,} replicas",
            offline_text(file["offline"]["small"]),
            offline_text(etcd["offline"]["small"]),
            "",
        ),
        (
            f"offline-dir heartbeat, {big:,} of {3 * big:,} replicas",
            offline_text(file["offline"]["big"]),
            offline_text(etcd["offline"]["big"]),
            "< 1 s file log; < 2 s etcd",
        ),
        (
            f"standbys replay the {big:,}-record batch (reply → last standby at the end offset)",
            "—",
            f"{ms(etcd['offline']['big']['replay'])} ({ms(etcd['offline']['big']['replay_from_sent'])} "
            f"from the request)",
            "",
        ),
    ]
    print()
    print(
        f"## Controller quorum on etcd vs the file log{' (QUICK: scaled down)' if args.quick else ''}\n\n"
        f"etcd {version}, 3 members; 3 controllers, --lease-ms {args.lease_ms}; file log: 1 controller. "
        f"Broker sessions 9 s in the failover/throughput part. {machine_load()} at the end. "
        f"New active controllers in the etcd failovers: {winners}.\n"
    )
    print(f"| figure | {FILE} (1 controller) | {ETCD} (3 etcd + 3 controllers) | goal |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print()
    no_goal = float("inf")
    return [
        Figure(
            "etcd: kill -9 of the active → first accepted write (p99)",
            percentile(sorted(etcd_fo), 0.99),
            "s",
            3.0,
            detail=spread(etcd_fo),
        ),
        Figure(
            "file log: restart after kill -9 → first accepted write (p99)",
            percentile(sorted(file_fo), 0.99),
            "s",
            no_goal,
            detail=spread(file_fo),
        ),
        Figure(
            "etcd: fenced/error heartbeat replies during failovers",
            len(etcd["fenced_replies"]) + len(etcd["fenced_after"]),
            "",
            1,
        ),
        Figure(
            f"file log: offline dir of {big:,} replicas",
            file["offline"]["big"]["seconds"],
            "s",
            1.0,
        ),
        Figure(
            f"etcd: offline dir of {big:,} replicas",
            etcd["offline"]["big"]["seconds"],
            "s",
            2.0,
        ),
        Figure(
            f"etcd: standbys replay the {big:,}-record batch",
            etcd["offline"]["big"]["replay"],
            "s",
            no_goal,
        ),
    ]


def main() -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=0, help="failover runs per log (default 20; quick 3)")
    parser.add_argument("--topics", type=int, default=0, help="topics per create phase (default 300)")
    parser.add_argument("--partitions", type=int, default=0, help="partitions of the offline-dir cluster")
    parser.add_argument("--lease-ms", type=int, default=2000, help="the controllers' --lease-ms")
    return bench_main("controller quorum on etcd vs the file log", parser, run)


if __name__ == "__main__":
    raise SystemExit(main())
