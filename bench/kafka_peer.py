"""Our cluster against Apache Kafka 4.3.x on this machine, driven by Kafka's own perf tools (issue 23).

Two clusters, never running at the same time (each is started for a run and stopped after it):
* ours: one `jbod-controller` and 3 `jbod-agent` brokers (`jbod_local.processes.LocalBroker`, as
  every data-plane benchmark starts them), 2 plain log dirs each, the agents' default intervals,
  listeners `http://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0`;
* Kafka: `e2e.kafka_tools.KafkaNodesCluster`, one dedicated KRaft controller and 3 broker-only
  nodes, each its own JVM as `kafka-server-start.sh` starts it (G1, `-Xmx1G -Xms1G`), jars from
  Maven Central, the installed Java; 2 log dirs per broker, Kafka's defaults otherwise (but
  `group.initial.rebalance.delay.ms=0`, as Kafka's shipped `config/server.properties`).
Both serve SASL_PLAINTEXT with SCRAM-SHA-512 on 127.0.0.1 (Kafka's brokers replicate over it too),
and every tool logs in as `admin` through `--command-config`.

A run of one cluster: start it, create a topic with `kafka-topics.sh` (6 partitions, RF 3,
`min.insync.replicas=2`), wait until every partition has its full ISR, then
1. `kafka-producer-perf-test.sh --num-records N --record-size 1024 --throughput -1
   --command-property acks=all` (the producer's default batching: `batch.size` 16 KiB,
   `linger.ms` 5, idempotent);
2. the same with `batch.size=262144` (256 KiB batches), into the same topic;
3. `kafka-consumer-perf-test.sh --messages 2N` in a fresh group (reads both back).
Around each tool run: the brokers' CPU seconds (utime + stime from /proc, the 3 broker processes,
not the controller; the tool's own JVM start is inside the window for both clusters alike), their
summed RSS sampled every 0.5 s (the peak), the 1-minute load average at both ends. The tools'
figures are taken as they print them: records/s, MB/s (their MB is 2^20 bytes), and the
producer's p50 / p99 latency (send → ack, which at `--throughput -1` includes the time a record
waits in the producer's 32 MiB buffer). CPU per GB uses 10^9 bytes of record values.

Runs alternate (ours, Kafka, ours, Kafka, ...; `--runs` of each) and the table gives medians.
Then the idle part, once per cluster on a fresh cluster: one topic of `--idle-partitions`
partitions x RF 3 (3,334 x 3 = 10,002 replicas), wait for the full ISRs, settle (120 s: a fresh
Kafka's JIT compiler keeps its brokers busy for about two minutes; then until the brokers' CPU is
steady over two 5 s windows), then the brokers' and the controller's CPU (% of one core) and
RSS (the brokers' mean of 0.5 s samples) over a 30 s window.

Goals (issue 31), as ratios to Kafka in the same run: broker CPU per GB ≤ 0.2x Kafka's for produce
and consume, records/s ≥ 1.5x Kafka's, idle CPU and RSS ≤ 0.1x Kafka's; p99 latency is printed for
reference. Figures, not assertions: nothing here fails on a missed goal. `--systems ours` runs
ours alone (no ratios); `--profile DIR` records our brokers with py-spy during each measured phase.

    python -m bench.kafka_peer [--quick] [--records N] [--runs N] [--idle-partitions N]
                               [--skip-idle] [--raw-json PATH] [--systems ours,kafka]
                               [--profile DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import py_spy
from bench.common import (
    BenchError,
    Figure,
    Workspace,
    admin_token_setting,
    agent_cluster,
    base_parser,
    bench_main,
    cpu_seconds,
    log,
    memory,
    print_table,
    wait_until,
)
from e2e import kafka_tools

RECORD_BYTES = 1024
PARTITIONS = 6
RF = 3
MIN_INSYNC = 2
DIRS_PER_BROKER = 2
BROKERS = (1, 2, 3)
LISTENERS = "http://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"
AGENT_SETTINGS = {"broker.heartbeat.interval.ms": "2000", "log.dir.probe.interval.ms": "1000"}  # defaults
SYSTEMS = ("ours", "kafka")
DEFAULT_RECORDS = 200_000
QUICK_RECORDS = 20_000
IDLE_PARTITIONS = 3334  # x RF 3 = 10,002 replicas
# A fresh Kafka's JIT compiles for about 2 minutes after the topic (measured: the 3 brokers at
# ~100 % of a core 20 s after it, ~15 % after 120 s).
IDLE_SETTLE_S = 120.0
TOOL_TIMEOUT_S = 900.0
RSS_INTERVAL_S = 0.5


@dataclasses.dataclass(frozen=True)
class ProduceSetup:
    """One producer configuration: `kafka-producer-perf-test.sh --command-property` on top of acks=all."""

    tag: str
    label: str
    properties: tuple[str, ...]


PRODUCE_SETUPS = (
    ProduceSetup("default", "producer defaults (batch.size 16 KiB, linger.ms 5)", ()),
    ProduceSetup("256k", "batch.size 256 KiB", ("batch.size=262144",)),
)


# -- the tools' output (pure) ---------------------------------------------------------------------

_NUMBER = r"([0-9][0-9.,]*)"
PRODUCER_SUMMARY = re.compile(
    rf"^{_NUMBER} records sent, {_NUMBER} records/sec \({_NUMBER} MB/sec\), {_NUMBER} ms avg latency, "
    rf"{_NUMBER} ms max latency, {_NUMBER} ms 50th, {_NUMBER} ms 95th, {_NUMBER} ms 99th, "
    rf"{_NUMBER} ms 99\.9th\.$"
)


def _number(text: str) -> float:
    return float(text.replace(",", ""))


@dataclasses.dataclass(frozen=True)
class ProducerSummary:
    """The last line `kafka-producer-perf-test.sh` prints: the whole run's totals."""

    records: int
    records_per_s: float
    mb_per_s: float  # MB = 2^20 bytes, as the tool counts
    avg_ms: float
    max_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    p999_ms: float


def parse_producer_summary(stdout: str) -> ProducerSummary:
    """The totals line of `kafka-producer-perf-test.sh`'s output ("N records sent, ... 99.9th.");
    `ValueError` when there is none (the tool failed or was cut short)."""
    for line in reversed(stdout.strip().splitlines()):
        match = PRODUCER_SUMMARY.match(line.strip())
        if match:
            values = [_number(v) for v in match.groups()]
            return ProducerSummary(int(values[0]), *values[1:])
    raise ValueError(f"no totals line in the producer perf test's output: {stdout[-500:]!r}")


@dataclasses.dataclass(frozen=True)
class ConsumerSummary:
    """The row `kafka-consumer-perf-test.sh` prints under its CSV header. `mb_per_s` and
    `records_per_s` are over the whole run (group join included); `fetch_*` exclude the join."""

    records: int
    megabytes: float
    mb_per_s: float
    records_per_s: float
    rebalance_ms: float
    fetch_ms: float
    fetch_mb_per_s: float
    fetch_records_per_s: float


def parse_consumer_summary(stdout: str) -> ConsumerSummary:
    """The header ("start.time, end.time, data.consumed.in.MB, ...") and the first row after it
    with as many fields (a WARNING line may come between); `ValueError` when they are missing."""
    lines = [line.strip() for line in stdout.strip().splitlines() if line.strip()]
    headers = [i for i, line in enumerate(lines) if line.startswith("start.time,")]
    if headers:
        header = [h.strip() for h in lines[headers[-1]].split(",")]
        for line in lines[headers[-1] + 1 :]:
            row = [v.strip() for v in line.split(",")]
            if len(row) != len(header):
                continue
            stats = dict(zip(header, row, strict=True))
            return ConsumerSummary(
                records=int(_number(stats["data.consumed.in.nMsg"])),
                megabytes=_number(stats["data.consumed.in.MB"]),
                mb_per_s=_number(stats["MB.sec"]),
                records_per_s=_number(stats["nMsg.sec"]),
                rebalance_ms=_signed(stats["rebalance.time.ms"]),
                fetch_ms=_signed(stats["fetch.time.ms"]),
                fetch_mb_per_s=_signed(stats["fetch.MB.sec"]),
                fetch_records_per_s=_signed(stats["fetch.nMsg.sec"]),
            )
    raise ValueError(f"no header and row in the consumer perf test's output: {stdout[-500:]!r}")


def _signed(text: str) -> float:
    return -_number(text[1:]) if text.startswith("-") else _number(text)


def consume_rate(summary: ConsumerSummary) -> tuple[float, float, str]:
    """(records/s, MB/s, basis): the fetch rates (group join excluded) when the tool measured the
    join, else the whole run's (some Kafka versions print a bogus join time and negative fetch
    rates when no rebalance callback ran)."""
    if summary.fetch_ms > 0 and 0 <= summary.rebalance_ms < 3_600_000:
        return summary.fetch_records_per_s, summary.fetch_mb_per_s, "fetch"
    return summary.records_per_s, summary.mb_per_s, "whole run"


# -- the clusters ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Peer:
    """A running cluster as the tools and the meters see it."""

    system: str  # "ours" | "kafka"
    bootstrap: str
    user: kafka_tools.ScramUser
    broker_pids: tuple[int, ...]
    controller_pid: int
    started_in: float

    @property
    def tool_config(self) -> dict[str, str]:
        return self.user.client_config()

    @property
    def librdkafka_config(self) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": self.user.mechanism,
            "sasl.username": self.user.name,
            "sasl.password": self.user.password,
        }

    def run_tool(self, script: str, args: Sequence[str], *, timeout: float = TOOL_TIMEOUT_S) -> str:
        proc = kafka_tools.run_tool(
            script, args, bootstrap=self.bootstrap, command_config=self.tool_config, timeout=timeout
        )
        if proc.returncode != 0:
            raise BenchError(
                f"{script} {' '.join(args)} on {self.system} exited {proc.returncode}: "
                f"{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
            )
        return proc.stdout


@contextlib.contextmanager
def our_cluster(ws: Workspace) -> Iterator[Peer]:
    started = time.monotonic()
    with agent_cluster(ws, f"controller-{time.monotonic_ns()}") as cluster:
        settings = {**AGENT_SETTINGS, **admin_token_setting(cluster), "listeners": LISTENERS}
        for node in BROKERS:
            cluster.add_broker(node, dirs=DIRS_PER_BROKER, settings=settings)
        cluster.wait_unfenced(*BROKERS)
        yield Peer(
            system="ours",
            bootstrap=",".join(cluster.brokers[n].kafka["SASL_PLAINTEXT"] for n in BROKERS),
            user=kafka_tools.ScramUser(name="admin", password=cluster.controller.admin_token),
            broker_pids=tuple(cluster.pid(n) for n in BROKERS),
            controller_pid=cluster.controller.pid,
            started_in=time.monotonic() - started,
        )
    # A fresh cluster per run: the next one starts from empty dirs.
    for path in [*ws.root.glob("broker-*"), *ws.root.glob("controller-*")]:
        ws.remove(path.name)


@contextlib.contextmanager
def kafka_cluster(ws: Workspace) -> Iterator[Peer]:
    user = kafka_tools.ScramUser()
    work = ws.root / f"kafka-{time.monotonic_ns()}"
    with kafka_tools.KafkaNodesCluster(
        kafka_tools.default_install(),
        brokers=len(BROKERS),
        log_dir_count=DIRS_PER_BROKER,
        scram=user,
        work_dir=work,
    ) as kafka:
        pids = kafka.pids
        yield Peer(
            system="kafka",
            bootstrap=kafka.bootstrap,
            user=user,
            broker_pids=tuple(pids[n] for n in BROKERS),
            controller_pid=pids[kafka.CONTROLLER_ID],
            started_in=kafka.started_in or 0.0,
        )
    ws.remove(work.name)


def start_cluster(system: str, ws: Workspace) -> contextlib.AbstractContextManager[Peer]:
    return our_cluster(ws) if system == "ours" else kafka_cluster(ws)


def create_topic(peer: Peer, topic: str, *, partitions: int, timeout: float) -> float:
    """`kafka-topics.sh --create` (RF 3, min.insync.replicas 2), then wait for every partition's
    full ISR in the brokers' metadata; the seconds from the create to the full ISRs."""
    started = time.monotonic()
    peer.run_tool(
        "kafka-topics.sh",
        [
            "--create",
            "--topic",
            topic,
            "--partitions",
            str(partitions),
            "--replication-factor",
            str(RF),
            "--config",
            f"min.insync.replicas={MIN_INSYNC}",
        ],
    )
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(peer.librdkafka_config)

    def full() -> bool:
        found = admin.list_topics(topic=topic, timeout=30).topics.get(topic)
        return bool(
            found is not None
            and found.error is None
            and len(found.partitions) == partitions
            and all(
                p.leader >= 0 and len(p.replicas) == RF and set(p.isrs) == set(p.replicas)
                for p in found.partitions.values()
            )
        )

    wait_until(full, timeout=timeout, interval=1.0, what=f"full ISRs of {topic} on {peer.system}")
    return time.monotonic() - started


# -- meters ------------------------------------------------------------------------------------------


def rss_bytes(pids: Sequence[int]) -> int:
    return sum(memory(pid).get("VmRSS", 0) for pid in pids)


class RssSampler:
    """Samples the summed RSS of `pids` every `RSS_INTERVAL_S` in a thread: `peak` and `mean`."""

    def __init__(self, pids: Sequence[int]) -> None:
        self.pids = tuple(pids)
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss", daemon=True)

    def _run(self) -> None:
        while True:
            with contextlib.suppress(OSError):
                self.samples.append(rss_bytes(self.pids))
            if self._stop.wait(RSS_INTERVAL_S):
                return

    @property
    def peak(self) -> int:
        return max(self.samples, default=0)

    @property
    def mean(self) -> float:
        return statistics.mean(self.samples) if self.samples else 0.0

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def broker_cpu(peer: Peer) -> float:
    return sum(cpu_seconds(pid) for pid in peer.broker_pids)


def load_1min() -> float:
    return os.getloadavg()[0]


@dataclasses.dataclass(frozen=True)
class Meters:
    """The brokers around one tool run: CPU seconds (3 brokers), peak summed RSS, load average."""

    broker_cpu_s: float
    broker_rss_peak: int
    load_start: float
    load_end: float
    seconds: float


@dataclasses.dataclass(frozen=True)
class ToolRun:
    """One perf tool run on one cluster: what the tool printed, and the brokers' meters."""

    system: str
    run: int
    phase: str  # "produce-default" | "produce-256k" | "consume"
    records: int
    records_per_s: float
    mb_per_s: float
    p50_ms: float  # NaN for consume
    p99_ms: float
    meters: Meters
    detail: Mapping[str, Any]  # the tool's whole summary

    @property
    def cpu_s_per_gb(self) -> float:
        return self.meters.broker_cpu_s / max(1e-9, self.records * RECORD_BYTES / 1e9)


def profiling(peer: Peer, profile: Path | None, tag: str) -> contextlib.AbstractContextManager[list[Path]]:
    """py-spy on our brokers (nothing for Kafka's, or without `profile`)."""
    if profile is None or peer.system != "ours":
        return contextlib.nullcontext([])
    return py_spy.recording(peer.broker_pids, profile, tag)


def log_profile(files: Sequence[Path], tag: str) -> None:
    samples, hotspots = py_spy.summary(files)
    log(f"    py-spy, {tag}: {samples:,} active samples of 3 brokers; by own time (inclusive):")
    for spot in hotspots:
        log(f"      {spot.self_share:6.1%} ({spot.inclusive_share:6.1%})  {spot.function}")


def measured_tool(
    peer: Peer, script: str, args: Sequence[str], *, profile: tuple[Path, str] | None = None
) -> tuple[str, Meters]:
    """Run a tool against `peer`; its stdout and the brokers' meters around it. With `profile`
    (a directory and a tag), py-spy records our brokers meanwhile and the top functions are logged."""
    load_start, cpu_start, started = load_1min(), broker_cpu(peer), time.monotonic()
    tag = profile[1] if profile is not None else ""
    with (
        RssSampler(peer.broker_pids) as rss,
        profiling(peer, profile[0] if profile else None, tag) as files,
    ):
        stdout = peer.run_tool(script, args)
    seconds, cpu_end = time.monotonic() - started, broker_cpu(peer)
    if files:
        log_profile(files, tag)
    return stdout, Meters(cpu_end - cpu_start, rss.peak, load_start, load_1min(), seconds)


def perf_run(
    peer: Peer, *, run: int, records: int, warmup: int, profile: Path | None = None
) -> list[ToolRun]:
    topic = f"peer-{peer.system}-{run}"
    took = create_topic(peer, topic, partitions=PARTITIONS, timeout=120)
    log(f"    {peer.system} run {run}: topic {topic} ({PARTITIONS} x RF {RF}) with full ISRs in {took:.1f} s")
    if warmup:
        # Not measured: the brokers' first requests (a fresh JVM's JIT, our first connections).
        peer.run_tool(
            "kafka-producer-perf-test.sh",
            [
                "--topic",
                topic,
                "--num-records",
                str(warmup),
                "--record-size",
                str(RECORD_BYTES),
                "--throughput",
                "-1",
                "--command-property",
                "acks=all",
            ],
        )
    out = []
    for setup in PRODUCE_SETUPS:
        args = ["--topic", topic, "--num-records", str(records), "--record-size", str(RECORD_BYTES),
                "--throughput", "-1", "--command-property", "acks=all", *setup.properties]  # fmt: skip
        stdout, meters = measured_tool(
            peer,
            "kafka-producer-perf-test.sh",
            args,
            profile=None if profile is None else (profile, f"run{run}-produce-{setup.tag}"),
        )
        sent = parse_producer_summary(stdout)
        if sent.records != records:
            raise BenchError(f"{peer.system} produce {setup.tag}: {sent.records} of {records} sent")
        out.append(
            ToolRun(
                system=peer.system,
                run=run,
                phase=f"produce-{setup.tag}",
                records=sent.records,
                records_per_s=sent.records_per_s,
                mb_per_s=sent.mb_per_s,
                p50_ms=sent.p50_ms,
                p99_ms=sent.p99_ms,
                meters=meters,
                detail=dataclasses.asdict(sent),
            )
        )
    total = records * len(PRODUCE_SETUPS) + warmup
    args = ["--topic", topic, "--messages", str(total), "--group", f"{topic}-perf", "--timeout", "60000"]
    stdout, meters = measured_tool(
        peer,
        "kafka-consumer-perf-test.sh",
        args,
        profile=None if profile is None else (profile, f"run{run}-consume"),
    )
    consumed = parse_consumer_summary(stdout)
    if consumed.records < total:
        raise BenchError(f"{peer.system} consume: {consumed.records} of {total} read")
    records_per_s, mb_per_s, basis = consume_rate(consumed)
    out.append(
        ToolRun(
            system=peer.system,
            run=run,
            phase="consume",
            records=consumed.records,
            records_per_s=records_per_s,
            mb_per_s=mb_per_s,
            p50_ms=float("nan"),
            p99_ms=float("nan"),
            meters=meters,
            detail={**dataclasses.asdict(consumed), "basis": basis},
        )
    )
    for r in out:
        m = r.meters
        latency = f", p50 {r.p50_ms:.0f} ms, p99 {r.p99_ms:.0f} ms" if r.p99_ms == r.p99_ms else ""
        log(
            f"    {r.system:5} run {r.run} {r.phase:15}: {r.records_per_s:9,.0f} rec/s {r.mb_per_s:6.1f} MB/s"
            f"{latency}; broker CPU {m.broker_cpu_s:5.1f} s = {r.cpu_s_per_gb:5.1f} s/GB, RSS peak "
            f"{m.broker_rss_peak / 2**20:,.0f} MiB; {m.seconds:.1f} s; load {m.load_start:.2f} -> {m.load_end:.2f}"
        )
    return out


@dataclasses.dataclass(frozen=True)
class IdleRun:
    system: str
    partitions: int
    create_s: float
    window_s: float
    broker_cpu_pct: float  # % of one core, the 3 brokers together
    controller_cpu_pct: float
    broker_rss_mean: float
    broker_rss_peak: int
    controller_rss: int
    load_start: float
    load_end: float


SETTLE_WINDOW_S = 5.0
SETTLE_MAX_S = 180.0


def settle(peer: Peer, *, at_least: float) -> list[float]:
    """Wait `at_least` seconds, then until the brokers' CPU over two consecutive 5 s windows
    differs by less than 25 % (or 0.5 % of a core), at most `SETTLE_MAX_S` in all: a new topic's
    ISRs are full in the metadata from the start, while the brokers may still be creating its
    logs. The CPU % of each 5 s window, for the record."""
    started = time.monotonic()
    time.sleep(at_least)
    windows: list[float] = []
    while time.monotonic() - started < SETTLE_MAX_S:
        cpu0, at = broker_cpu(peer), time.monotonic()
        time.sleep(SETTLE_WINDOW_S)
        windows.append((broker_cpu(peer) - cpu0) / (time.monotonic() - at) * 100)
        if len(windows) >= 2:
            last, before = windows[-1], windows[-2]
            if abs(last - before) <= max(0.5, 0.25 * before):
                break
    return windows


def idle_run(
    peer: Peer, *, partitions: int, settle_s: float, window_s: float, profile: Path | None = None
) -> IdleRun:
    took = create_topic(peer, "idle", partitions=partitions, timeout=900)
    log(f"    {peer.system} idle: {partitions} partitions x RF {RF} with full ISRs in {took:.1f} s")
    windows = settle(peer, at_least=settle_s)
    log(
        f"    {peer.system} idle: settled; brokers' CPU in the 5 s windows: {', '.join(f'{w:.1f} %' for w in windows)}"
    )
    load_start = load_1min()
    cpu0, ctl0, at = broker_cpu(peer), cpu_seconds(peer.controller_pid), time.monotonic()
    with RssSampler(peer.broker_pids) as rss, profiling(peer, profile, "idle") as files:
        time.sleep(window_s)
    seconds = time.monotonic() - at
    if files:
        log_profile(files, "idle")
    cpu1, ctl1 = broker_cpu(peer), cpu_seconds(peer.controller_pid)
    result = IdleRun(
        system=peer.system,
        partitions=partitions,
        create_s=took,
        window_s=seconds,
        broker_cpu_pct=(cpu1 - cpu0) / seconds * 100,
        controller_cpu_pct=(ctl1 - ctl0) / seconds * 100,
        broker_rss_mean=rss.mean,
        broker_rss_peak=rss.peak,
        controller_rss=rss_bytes([peer.controller_pid]),
        load_start=load_start,
        load_end=load_1min(),
    )
    log(
        f"    {peer.system} idle over {seconds:.0f} s: brokers {result.broker_cpu_pct:.2f} % of a core, "
        f"RSS {result.broker_rss_mean / 2**20:,.0f} MiB (peak {result.broker_rss_peak / 2**20:,.0f}); "
        f"controller {result.controller_cpu_pct:.2f} %, {result.controller_rss / 2**20:,.0f} MiB; "
        f"load {result.load_start:.2f} -> {result.load_end:.2f}"
    )
    return result


# -- report ------------------------------------------------------------------------------------------


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def phase_medians(runs: Sequence[ToolRun], system: str, phase: str) -> dict[str, float]:
    ms = [r for r in runs if r.system == system and r.phase == phase]
    return {
        "records_per_s": median([r.records_per_s for r in ms]),
        "mb_per_s": median([r.mb_per_s for r in ms]),
        "p50_ms": median([r.p50_ms for r in ms]),
        "p99_ms": median([r.p99_ms for r in ms]),
        "cpu_s_per_gb": median([r.cpu_s_per_gb for r in ms]),
        "rss_mib": median([r.meters.broker_rss_peak / 2**20 for r in ms]),
        "runs": len(ms),
    }


def _loads(runs: Sequence[ToolRun]) -> str:
    return ", ".join(f"{r.meters.load_start:.1f}-{r.meters.load_end:.1f}" for r in runs)


#: Issue 31's goals, as ratios to Kafka's figure in the same run.
CPU_PER_GB_GOAL = 0.2  # broker CPU per GB at most this share of Kafka's, produce and consume
RECORDS_PER_S_GOAL = 1.5  # records/s at least this multiple of Kafka's
IDLE_GOAL = 0.1  # idle CPU and RSS at most this share of Kafka's


def report(runs: Sequence[ToolRun], idle: Sequence[IdleRun]) -> list[Figure]:
    phases = [f"produce-{s.tag}" for s in PRODUCE_SETUPS] + ["consume"]
    systems = [system for system in SYSTEMS if any(r.system == system for r in runs)]
    rows = []
    figures = []
    for phase in phases if runs else ():
        medians = {system: phase_medians(runs, system, phase) for system in systems}
        for system in systems:
            m = medians[system]
            latency = f"{m['p50_ms']:.0f} / {m['p99_ms']:.0f}" if m["p99_ms"] == m["p99_ms"] else "-"
            ratio = (
                f"{m['records_per_s'] / medians['kafka']['records_per_s']:.2f}x / "
                f"{m['cpu_s_per_gb'] / medians['kafka']['cpu_s_per_gb']:.2f}x"
                if system != "kafka" and "kafka" in medians
                else "-"
            )
            rows.append(
                [
                    phase,
                    system,
                    f"{m['records_per_s']:,.0f}",
                    f"{m['mb_per_s']:.1f}",
                    latency,
                    f"{m['cpu_s_per_gb']:.1f}",
                    ratio,
                    f"{m['rss_mib']:,.0f}",
                    _loads([r for r in runs if r.system == system and r.phase == phase]),
                ]
            )
        if set(medians) != set(SYSTEMS):
            continue
        ours, kafka = medians["ours"], medians["kafka"]
        figures.append(
            Figure(
                f"{phase}: records/s, ours against {RECORDS_PER_S_GOAL}x Kafka 4.3's",
                ours["records_per_s"],
                "/s",
                kafka["records_per_s"] * RECORDS_PER_S_GOAL,
                better="higher",
            )
        )
        if phase != "consume":
            figures.append(
                Figure(
                    f"{phase}: p99 latency, ours (Kafka 4.3's for reference)",
                    ours["p99_ms"] / 1000,
                    "s",
                    float("inf"),
                    detail=f"Kafka {kafka['p99_ms']:.0f} ms",
                )
            )
        figures.append(
            Figure(
                f"{phase}: broker CPU per GB, ours against {CPU_PER_GB_GOAL}x Kafka 4.3's",
                ours["cpu_s_per_gb"],
                "s/GB",
                kafka["cpu_s_per_gb"] * CPU_PER_GB_GOAL,
            )
        )
    print()
    print(
        "medians over the runs; MB = 2^20 B as the tools print it; latency = the producer perf test's send -> ack "
        "(p50 / p99 ms); CPU = the 3 brokers' utime+stime over the tool run per 10^9 B of values; RSS = peak "
        "of the 3 brokers' summed RSS; load = 1-minute load average at start-end of each run"
    )
    print_table(
        [
            "phase",
            "system",
            "records/s",
            "MB/s",
            "p50 / p99 ms",
            "broker CPU s/GB",
            "x Kafka (rec/s / CPU)",
            "broker RSS MiB",
            "load",
        ],
        rows,
    )
    if idle:
        print()
        print_table(
            [
                "idle",
                "partitions x RF",
                "brokers CPU % of a core",
                "brokers RSS MiB",
                "controller CPU %",
                "controller RSS MiB",
                "create s",
                "load",
            ],
            [
                [
                    i.system,
                    f"{i.partitions} x {RF}",
                    f"{i.broker_cpu_pct:.2f}",
                    f"{i.broker_rss_mean / 2**20:,.0f} (peak {i.broker_rss_peak / 2**20:,.0f})",
                    f"{i.controller_cpu_pct:.2f}",
                    f"{i.controller_rss / 2**20:,.0f}",
                    f"{i.create_s:.0f}",
                    f"{i.load_start:.2f}-{i.load_end:.2f}",
                ]
                for i in idle
            ],
        )
        by = {i.system: i for i in idle}
        if set(by) == set(SYSTEMS):
            figures.append(
                Figure(
                    f"idle, {by['ours'].partitions} x RF 3: brokers' CPU, ours against {IDLE_GOAL}x Kafka's",
                    by["ours"].broker_cpu_pct,
                    "% of a core",
                    by["kafka"].broker_cpu_pct * IDLE_GOAL,
                )
            )
            figures.append(
                Figure(
                    f"idle, {by['ours'].partitions} x RF 3: brokers' RSS, ours against {IDLE_GOAL}x Kafka's",
                    by["ours"].broker_rss_mean,
                    "bytes",
                    by["kafka"].broker_rss_mean * IDLE_GOAL,
                )
            )
    return figures


def java_version() -> str:
    proc = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False)
    return (proc.stderr or proc.stdout).strip().splitlines()[0] if (proc.stderr or proc.stdout) else "?"


def run(args: argparse.Namespace) -> list[Figure]:
    records = args.records or (QUICK_RECORDS if args.quick else DEFAULT_RECORDS)
    warmup = args.warmup_records if args.warmup_records >= 0 else records // 10
    runs = 0 if args.idle_only else args.runs or (1 if args.quick else 3)
    idle_partitions = args.idle_partitions or (334 if args.quick else IDLE_PARTITIONS)
    settle_s, window_s = (5.0, 10.0) if args.quick else (IDLE_SETTLE_S, 30.0)
    settle_s = args.idle_settle or settle_s
    systems = tuple(args.systems.split(","))
    if not set(systems) <= set(SYSTEMS) or not systems:
        raise BenchError(f"--systems takes {','.join(SYSTEMS)} or one of them, not {args.systems!r}")
    kafka_tools.default_install()
    log(
        f"  Kafka {kafka_tools.KAFKA_VERSION} ({java_version()}): 1 controller + 3 brokers x {DIRS_PER_BROKER} "
        f"dirs; ours: 1 jbod-controller + 3 jbod-agents x {DIRS_PER_BROKER} dirs; SASL_PLAINTEXT SCRAM-SHA-512 "
        f"on both. {runs} run(s) each, alternating; {records:,} records of {RECORD_BYTES} B per produce setup (after {warmup:,} unmeasured), "
        f"topic {PARTITIONS} x RF {RF}, min.insync {MIN_INSYNC}; idle: {idle_partitions} x RF {RF}, settle "
        f"{settle_s:.0f} s, window {window_s:.0f} s"
    )
    tool_runs: list[ToolRun] = []
    idle: list[IdleRun] = []
    with Workspace(keep=args.keep) as ws:
        for number in range(1, runs + 1):
            for system in systems:
                with start_cluster(system, ws) as peer:
                    log(
                        f"  {system} run {number}: cluster up in {peer.started_in:.1f} s (load {load_1min():.2f})"
                    )
                    tool_runs.extend(
                        perf_run(peer, run=number, records=records, warmup=warmup, profile=args.profile)
                    )
        if not args.skip_idle:
            for system in systems:
                with start_cluster(system, ws) as peer:
                    idle.append(
                        idle_run(
                            peer,
                            partitions=idle_partitions,
                            settle_s=settle_s,
                            window_s=window_s,
                            profile=args.profile,
                        )
                    )
    if args.raw_json:
        args.raw_json.write_text(
            json.dumps(
                {
                    "parameters": {
                        "records": records,
                        "warmup_records": warmup,
                        "runs": runs,
                        "idle_partitions": idle_partitions,
                        "settle_s": settle_s,
                        "window_s": window_s,
                        "java": java_version(),
                        "kafka": kafka_tools.KAFKA_VERSION,
                    },
                    "runs": [{**dataclasses.asdict(r), "cpu_s_per_gb": r.cpu_s_per_gb} for r in tool_runs],
                    "idle": [dataclasses.asdict(i) for i in idle],
                },
                indent=2,
            )
        )
    return report(tool_runs, idle)


def main() -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "--records",
        type=int,
        default=0,
        help=f"records per produce setup and run (default {DEFAULT_RECORDS:,}; --quick {QUICK_RECORDS:,})",
    )
    parser.add_argument("--runs", type=int, default=0, help="runs of each cluster (default 3; --quick 1)")
    parser.add_argument(
        "--idle-partitions",
        type=int,
        default=0,
        help=f"partitions (RF 3) of the idle part (default {IDLE_PARTITIONS}; --quick 334)",
    )
    parser.add_argument(
        "--warmup-records",
        type=int,
        default=-1,
        help="records produced before the measured runs of each cluster run (default a tenth of --records)",
    )
    parser.add_argument(
        "--idle-settle",
        type=float,
        default=0,
        help=f"seconds to wait at least before the idle window (default {IDLE_SETTLE_S:.0f})",
    )
    parser.add_argument("--idle-only", action="store_true", help="only the idle part")
    parser.add_argument("--skip-idle", action="store_true", help="no idle part")
    parser.add_argument("--raw-json", type=Path, help="also write every run's figures here")
    parser.add_argument(
        "--systems", default=",".join(SYSTEMS), help="which clusters to run (default: ours,kafka)"
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="record our brokers with py-spy during each measured phase into this directory "
        "and log the functions with the most samples (needs py-spy, in the dev extras)",
    )
    return bench_main("Our cluster against Apache Kafka 4.3 (perf tools)", parser, run)


if __name__ == "__main__":
    raise SystemExit(main())
