"""Data-plane benchmark: produce and fetch throughput through the brokers' Kafka listener
(librdkafka via confluent-kafka) against the HTTP/JSON path (`jbod_client`), side by side in one
run on one cluster (issue 22).

Cluster: one `jbod-controller` and 3 `jbod-agent` processes (brokers 1, 2, 3), each with 2 plain
log dirs, the agent's default intervals, listeners `http://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0`
and `admin.token.file` (as `tests/kafka_api/conftest.py` starts them). The Kafka clients log in
as `admin` with the admin token over SASL SCRAM-SHA-512; the HTTP clients send the admin token.

Each measured run is one path at one batch size on a fresh topic (6 partitions, RF 3,
`min.insync.replicas` 2, leaders spread over the brokers by the controller, deleted after the run):
* PRODUCE: `--records` keyless 1 KiB records (one random value, no compression), acks=all, from one
  client process, timed from the first send to the last acknowledgement.
  - Kafka: `confluent_kafka.Producer`, `enable.idempotence=true`, the batch size's
    `batch.size` and `linger.ms` (and, at 64 and 256 KiB, `sticky.partitioning.linger.ms=0`:
    see `SETUPS`), everything else librdkafka's default, plus any `--kafka-producer-config`;
    errors come back through a delivery report on errors only (`delivery.report.only.error`).
  - HTTP: `jbod_client.producer.Producer` (acks=-1) with the same batch size and linger,
    everything else its default (one request in flight per partition).
* FETCH: the same client kind reads every record of the topic back from offset 0, timed from
  the start to the last record.
  - Kafka: `confluent_kafka.Consumer`, `assign()` of every partition at offset 0, librdkafka's
    fetch defaults (1 MiB per partition) but `fetch.queue.backoff.ms` 10 (see `kafka_fetch`),
    `consume()` in batches of up to 10,000 messages.
  - HTTP: `jbod_client.consumer.Consumer`, start "earliest", its defaults (1 MiB per fetch).
* Measured around the timed part only (the client process reports when it starts and ends it;
  set-up, connections and metadata come before): MB/s and records/s (MB = 10^6 bytes of record
  values), the CPU seconds of the three broker processes (utime + stime from /proc/<pid>/stat)
  and of the client process, each per MB moved, and the 1-minute load average at both ends.
* The average batch size the producer sent (librdkafka's `batchsize` statistic; the HTTP
  producer's request bodies counted by a subclass) and the busiest partition's records against
  an even spread, to show what each setup really sent.

Every setup runs `--runs` times (default 3), alternating which path goes first, and the table
gives min / median / max. The goal stated in issue 22 is "the Kafka path at least as fast as the
HTTP path at every batch size": the figures compare each Kafka median with the HTTP median of the
same batch size and phase. Figures, not assertions: nothing here fails on a missed goal.

    python -m bench.kafka_vs_http [--quick] [--records N] [--runs N] [--setups 64k,256k,1m]
                                  [--kafka-producer-config KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import select
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import (
    AgentCluster,
    BenchError,
    Figure,
    Workspace,
    admin_token_setting,
    agent_cluster,
    base_parser,
    bench_main,
    cpu_seconds,
    create_topic,
    log,
    print_table,
)

RECORD_BYTES = 1024
PARTITIONS = 6
RF = 3
MIN_INSYNC = 2
LISTENERS = "http://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"
SETTINGS = {"broker.heartbeat.interval.ms": "2000", "log.dir.probe.interval.ms": "1000"}  # the defaults
PATHS = ("kafka", "http")
PHASES = ("produce", "fetch")
DEFAULT_RECORDS = 200_000
QUICK_RECORDS = 10_000
PHASE_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Setup:
    """One batch size, as each path's producer is configured for it. `kafka_extra`: librdkafka
    settings beyond `batch.size` and `linger.ms` (none: its defaults)."""

    tag: str
    label: str
    batch_bytes: int
    linger_ms: int
    kafka_extra: tuple[tuple[str, Any], ...] = ()

    def kafka_config(self) -> dict[str, Any]:
        return {"batch.size": self.batch_bytes, "linger.ms": self.linger_ms, **dict(self.kafka_extra)}


# 64 and 256 KiB with a linger long enough to fill every batch at these rates; then librdkafka's
# own defaults (batch.size 1,000,000, linger.ms 5) and the HTTP producer at the same values.
#
# librdkafka's sticky partitioner keeps keyless records on one partition for
# `sticky.partitioning.linger.ms`, by default twice `linger.ms`: with a 100 ms linger, a client
# that enqueues faster than the brokers take (this one queues all its records in well under a
# second) puts every record of a run on one or two partitions, and the run measures one
# partition's request-after-request latency instead of the cluster (measured: 100,000 of 100,000
# records on one partition). `sticky.partitioning.linger.ms=0` draws a partition per record, so
# the records spread over all 6 partitions, as the HTTP producer's sticky partitioner spreads
# them (it moves on whenever a batch is full), and every batch still fills. At librdkafka's
# defaults (sticky 10 ms) the spread is uneven but covers every partition; it is left as it is.
SPREAD = (("sticky.partitioning.linger.ms", 0),)
SETUPS = (
    Setup("64k", "64 KiB, linger 100 ms", 64 * 1024, 100, SPREAD),
    Setup("256k", "256 KiB, linger 100 ms", 256 * 1024, 100, SPREAD),
    Setup("1m", "1 MB, linger 5 ms (librdkafka's defaults)", 1_000_000, 5),
)
SETUP_BY_TAG = {s.tag: s for s in SETUPS}


def load_1min() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


# -- the client process ---------------------------------------------------------------------
#
# `python -m bench.kafka_vs_http --worker SPEC_JSON` runs one phase of one path. Protocol (one line
# each): it prints READY once connected and the topic's leaders are known; GO on its stdin starts
# the timed part; it prints FINISHED the moment that ends (the parent reads the brokers' CPU
# then), and RESULT <json> after (records, seconds, client CPU seconds, errors, batch sizes).


@dataclass(frozen=True)
class WorkerSpec:
    path: str  # "kafka" | "http"
    phase: str  # "produce" | "fetch"
    topic: str
    records: int
    setup: str  # a `Setup.tag`
    bootstrap: str
    admin_token: str  # the Kafka `admin` principal's SCRAM password and the HTTP bearer token
    controller_url: str
    kafka_producer_extra: dict[str, str] = field(default_factory=dict)  # --kafka-producer-config


@dataclass
class WorkerResult:
    records: int
    seconds: float
    client_cpu: float
    errors: int = 0
    batches: int = 0  # produce requests' batches counted by the client (0: unknown)
    batch_bytes_avg: float = 0.0
    partition_records: list[int] = field(default_factory=list)  # records produced to each partition

    @property
    def busiest_partition(self) -> float:
        """The busiest partition's records against an even spread (1.0: even)."""
        if not self.partition_records or not sum(self.partition_records):
            return float("nan")
        return max(self.partition_records) * PARTITIONS / sum(self.partition_records)


def _kafka_base(spec: WorkerSpec) -> dict[str, Any]:
    return {
        "bootstrap.servers": spec.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "admin",
        "sasl.password": spec.admin_token,
    }


def _wait_leaders(client: Any, topic: str) -> None:
    """Until every partition of `topic` has a leader in the brokers' metadata."""
    deadline = time.monotonic() + 60
    while True:
        found = client.list_topics(topic=topic, timeout=10).topics.get(topic)
        if (
            found is not None
            and found.error is None
            and len(found.partitions) == PARTITIONS
            and all(p.leader >= 0 for p in found.partitions.values())
        ):
            return
        if time.monotonic() > deadline:
            raise BenchError(f"topic {topic} has no leaders in the brokers' metadata: {found}")
        time.sleep(0.1)


def _signal(word: str) -> None:
    print(word, flush=True)


def _await_go() -> None:
    line = sys.stdin.readline().strip()
    if line != "GO":
        raise SystemExit(f"worker expected GO, got {line!r}")


def kafka_produce(spec: WorkerSpec) -> WorkerResult:
    from confluent_kafka import Producer

    errors: list[Any] = []
    windows: list[tuple[float, float]] = []  # (sum, count) of each statistics window's batch sizes
    sent: dict[int, int] = {}  # partition -> records transmitted, as of the latest statistics
    idempotence: list[str] = []  # the idempotent producer's state, as of the latest statistics

    def on_stats(text: str) -> None:
        stats = json.loads(text)
        idempotence[:] = [stats.get("eos", {}).get("idemp_state", "")]
        topic = stats.get("topics", {}).get(spec.topic, {})
        histogram = topic.get("batchsize", {})
        if histogram.get("cnt"):
            windows.append((float(histogram["sum"]), float(histogram["cnt"])))
        for partition, figures in topic.get("partitions", {}).items():
            if int(partition) >= 0:
                sent[int(partition)] = int(figures["txmsgs"])

    producer_config: dict[str, Any] = {
        **_kafka_base(spec),
        "acks": "all",
        "enable.idempotence": True,
        **SETUP_BY_TAG[spec.setup].kafka_config(),
        **spec.kafka_producer_extra,
        "delivery.report.only.error": True,
        "on_delivery": lambda err, _msg: errors.append(err),
        "statistics.interval.ms": 500,
        "stats_cb": on_stats,
    }
    producer = Producer(producer_config)
    _wait_leaders(producer, spec.topic)
    if str(producer_config.get("enable.idempotence", "")).lower() in ("true", "1"):
        # The producer id (InitProducerId) comes asynchronously: before the clock starts.
        deadline = time.monotonic() + 60
        while idempotence != ["Assigned"]:
            if time.monotonic() > deadline:
                raise BenchError(f"the idempotent producer got no producer id: state {idempotence}")
            producer.poll(0.1)
    value = os.urandom(RECORD_BYTES)
    produce, poll = producer.produce, producer.poll
    _signal("READY")
    _await_go()
    cpu0, started = time.process_time(), time.perf_counter()
    for index in range(spec.records):
        while True:
            try:
                produce(spec.topic, value)
                break
            except BufferError:  # librdkafka's queue is full: serve callbacks, wait a little
                poll(0.005)
        if index % 1000 == 0:
            poll(0)
    left = producer.flush(PHASE_TIMEOUT_S)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu0
    _signal("FINISHED")
    producer.poll(1.1)  # the last statistics window
    total, count = sum(w[0] for w in windows), sum(w[1] for w in windows)
    return WorkerResult(
        records=spec.records - len(errors) - left,
        seconds=seconds,
        client_cpu=cpu,
        errors=len(errors) + left,
        batches=int(count),
        batch_bytes_avg=total / count if count else 0.0,
        partition_records=[sent.get(p, 0) for p in range(PARTITIONS)],
    )


def kafka_fetch(spec: WorkerSpec) -> WorkerResult:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            **_kafka_base(spec),
            "group.id": "bench-unused",
            "enable.auto.commit": False,
            # librdkafka stops fetching a partition for fetch.queue.backoff.ms (1 s by default)
            # whenever its prefetch queue is over queued.max.messages.kbytes (64 MiB): a run's
            # 100-200 MB outgrow it, and whether the application's loop lags behind the fetches
            # at that moment decided whether a run took 0.3 or 1.3 s (measured). A 10 ms pause
            # keeps the bound on memory without timing the client's pause.
            "fetch.queue.backoff.ms": 10,
        }
    )
    _wait_leaders(consumer, spec.topic)
    _signal("READY")
    _await_go()
    cpu0, started = time.process_time(), time.perf_counter()
    consumer.assign([TopicPartition(spec.topic, p, 0) for p in range(PARTITIONS)])
    count = errors = 0
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    while count < spec.records and time.monotonic() < deadline:
        # consume() returns once it has num_messages or at the timeout: never ask for more than is left
        for message in consumer.consume(num_messages=min(10_000, spec.records - count), timeout=1.0):
            if message.error() is None:
                count += 1
            else:
                errors += 1
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu0
    _signal("FINISHED")
    consumer.close()
    return WorkerResult(records=count, seconds=seconds, client_cpu=cpu, errors=errors)


async def http_produce(spec: WorkerSpec) -> WorkerResult:
    from jbod_client.producer import Producer

    class CountingProducer(Producer):
        """The product's producer, counting the batches it delivers (retries not counted twice)."""

        batches = 0
        batch_bytes = 0
        partition_records = [0] * PARTITIONS

        async def _deliver(self, queue: Any, batch: Any) -> None:
            CountingProducer.batches += 1
            CountingProducer.batch_bytes += batch.size_bytes
            CountingProducer.partition_records[batch.partition] += len(batch.records)
            await super()._deliver(queue, batch)

    setup = SETUP_BY_TAG[spec.setup]
    producer = CountingProducer(
        spec.controller_url,
        token=spec.admin_token,
        acks=-1,
        batch_bytes=setup.batch_bytes,
        linger_ms=setup.linger_ms,
    )
    leaders = await producer.metadata.partitions(spec.topic)
    for leader in set(leaders.values()):
        client = await producer.metadata.broker(leader)
        await client.log_dirs()  # opens the pooled connection before the clock starts
    value = os.urandom(RECORD_BYTES)
    failed = 0

    def done(future: asyncio.Future[Any]) -> None:
        nonlocal failed
        if future.cancelled() or future.exception() is not None:
            failed += 1

    _signal("READY")
    await asyncio.get_running_loop().run_in_executor(None, _await_go)
    cpu0, started = time.process_time(), time.perf_counter()
    for index in range(spec.records):
        future = await producer.send(spec.topic, value)
        future.add_done_callback(done)
        if index % 64 == 63:
            await asyncio.sleep(0)
    await producer.flush()
    await asyncio.sleep(0)  # the last done-callbacks
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu0
    _signal("FINISHED")
    await producer.close()
    batches = CountingProducer.batches
    return WorkerResult(
        records=spec.records - failed,
        seconds=seconds,
        client_cpu=cpu,
        errors=failed,
        batches=batches,
        batch_bytes_avg=CountingProducer.batch_bytes / batches if batches else 0.0,
        partition_records=CountingProducer.partition_records,
    )


async def http_fetch(spec: WorkerSpec) -> WorkerResult:
    from jbod_client.consumer import Consumer

    consumer = Consumer(spec.controller_url, token=spec.admin_token, topic=spec.topic, start="earliest")
    await consumer.assignment()
    leaders = await consumer.metadata.partitions(spec.topic)
    for leader in set(leaders.values()):
        client = await consumer.metadata.broker(leader)
        await client.log_dirs()
    _signal("READY")
    await asyncio.get_running_loop().run_in_executor(None, _await_go)
    cpu0, started = time.process_time(), time.perf_counter()
    count = 0
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    while count < spec.records and time.monotonic() < deadline:
        count += len(await consumer.poll(1.0))
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu0
    _signal("FINISHED")
    await consumer.close()
    return WorkerResult(records=count, seconds=seconds, client_cpu=cpu)


def worker_main(spec_json: str) -> int:
    spec = WorkerSpec(**json.loads(spec_json))
    if spec.path == "kafka":
        result = kafka_produce(spec) if spec.phase == "produce" else kafka_fetch(spec)
    else:
        run = http_produce if spec.phase == "produce" else http_fetch
        result = asyncio.run(run(spec))
    print("RESULT " + json.dumps(result.__dict__), flush=True)
    return 0


# -- the parent -------------------------------------------------------------------------------


@dataclass
class Measured:
    """One phase of one run: what the client reported and what the brokers spent meanwhile."""

    setup: Setup
    path: str
    phase: str
    run: int
    result: WorkerResult
    broker_cpu: float
    load_start: float
    load_end: float

    @property
    def megabytes(self) -> float:
        return self.result.records * RECORD_BYTES / 1e6

    @property
    def mb_per_s(self) -> float:
        return self.megabytes / self.result.seconds

    @property
    def records_per_s(self) -> float:
        return self.result.records / self.result.seconds

    @property
    def broker_ms_per_mb(self) -> float:
        return self.broker_cpu * 1000 / max(1e-9, self.megabytes)

    @property
    def client_ms_per_mb(self) -> float:
        return self.result.client_cpu * 1000 / max(1e-9, self.megabytes)


@dataclass
class ClientProcess:
    """One worker process (see the protocol above), always killed on the way out."""

    spec: WorkerSpec
    stderr_path: Path
    process: subprocess.Popen[str] | None = None
    lines: list[str] = field(default_factory=list)

    def start(self) -> ClientProcess:
        command = [sys.executable, "-m", "bench.kafka_vs_http", "--worker", json.dumps(self.spec.__dict__)]
        with open(self.stderr_path, "a") as stderr:
            self.process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True, bufsize=1
            )
        return self

    def expect(self, word: str, *, timeout: float) -> str:
        assert self.process is not None and self.process.stdout is not None
        readable, _, _ = select.select([self.process.stdout], [], [], timeout)
        line = self.process.stdout.readline().strip() if readable else "(nothing in time)"
        if not line.startswith(word):
            self.kill()
            tail = self.stderr_path.read_text()[-3000:] if self.stderr_path.exists() else ""
            raise BenchError(
                f"{self.spec.path} {self.spec.phase} worker said {line!r}, expected {word}: {tail}"
            )
        return line

    def go(self) -> None:
        assert self.process is not None and self.process.stdin is not None
        self.process.stdin.write("GO\n")
        self.process.stdin.flush()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def broker_cpu(pids: Sequence[int]) -> float:
    return sum(cpu_seconds(pid) for pid in pids)


def measure_phase(
    spec: WorkerSpec, *, pids: Sequence[int], stderr_path: Path
) -> tuple[WorkerResult, float, float, float]:
    """Run one worker; (its result, broker CPU seconds over the timed part, load at start and end)."""
    worker = ClientProcess(spec, stderr_path).start()
    try:
        worker.expect("READY", timeout=120)
        load_start, cpu_start = load_1min(), broker_cpu(pids)
        worker.go()
        worker.expect("FINISHED", timeout=PHASE_TIMEOUT_S + 60)
        cpu_end, load_end = broker_cpu(pids), load_1min()
        line = worker.expect("RESULT", timeout=60)
        assert worker.process is not None
        worker.process.wait(timeout=60)
    finally:
        worker.kill()
    result = WorkerResult(**json.loads(line.removeprefix("RESULT ")))
    return result, cpu_end - cpu_start, load_start, load_end


def run_setup(
    cluster: AgentCluster,
    ws: Workspace,
    setup: Setup,
    path: str,
    *,
    run: int,
    records: int,
    kafka_producer_extra: dict[str, str],
) -> list[Measured]:
    topic = f"kvh-{setup.tag}-{path}-{run}"
    create_topic(
        cluster, topic, partitions=PARTITIONS, rf=RF, configs={"min.insync.replicas": str(MIN_INSYNC)}
    )
    brokers = [cluster.brokers[n] for n in sorted(cluster.brokers)]
    pids = [cluster.pid(n) for n in sorted(cluster.brokers)]
    out = []
    for phase in PHASES:
        spec = WorkerSpec(
            path=path,
            phase=phase,
            topic=topic,
            records=records,
            setup=setup.tag,
            bootstrap=",".join(b.kafka["SASL_PLAINTEXT"] for b in brokers),
            admin_token=cluster.controller.admin_token,
            controller_url=cluster.controller.url,
            kafka_producer_extra=kafka_producer_extra,
        )
        result, cpu, load_start, load_end = measure_phase(
            spec, pids=pids, stderr_path=ws.root / f"{topic}-{phase}.stderr"
        )
        m = Measured(setup, path, phase, run, result, cpu, load_start, load_end)
        batch = (
            f", avg batch {result.batch_bytes_avg / 1024:.0f} KiB, busiest partition {result.busiest_partition:.2f}x even"
            if result.batches
            else ""
        )
        log(
            f"    run {run} {path:5} {phase:7} {setup.tag:4}: {m.mb_per_s:6.1f} MB/s {m.records_per_s:8,.0f} rec/s "
            f"in {result.seconds:5.2f} s; broker CPU {cpu:5.2f} s = {m.broker_ms_per_mb:5.1f} ms/MB, client "
            f"{m.client_ms_per_mb:5.1f} ms/MB{batch}; {result.errors} errors; load {load_start:.2f} -> {load_end:.2f}"
        )
        if result.records < records or result.errors:
            raise BenchError(
                f"{path} {phase} on {topic}: {result.records} of {records} records, {result.errors} errors"
            )
        out.append(m)
        time.sleep(0.5)  # let the last follower fetches and the brokers settle between phases
    reply = cluster.admin.delete_topic(topic)
    if reply.get("errorCode", 0) != 0:
        raise BenchError(f"delete {topic}: {reply}")
    return out


def spread(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    ordered = sorted(values)
    if len(ordered) == 1:
        return fmt(ordered[0])
    return f"{fmt(statistics.median(ordered))} ({fmt(ordered[0])}-{fmt(ordered[-1])})"


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def report(results: list[Measured], setups: Sequence[Setup]) -> list[Figure]:
    print()
    print(
        "median (min-max) over the runs; MB = 10^6 bytes of record values; CPU per MB: the 3 brokers' CPU seconds "
        "(and the client process's) over the timed part / MB moved; load: 1-minute load average at the starts / ends"
    )
    rows = []
    figures = []
    for setup in setups:
        for phase in PHASES:
            medians: dict[str, float] = {}
            for path in PATHS:
                ms = [m for m in results if m.setup == setup and m.phase == phase and m.path == path]
                if not ms:
                    continue
                medians[path] = median([m.mb_per_s for m in ms])
                batches = [m.result.batch_bytes_avg / 1024 for m in ms if m.result.batches]
                rows.append(
                    [
                        setup.tag,
                        phase,
                        path,
                        spread([m.mb_per_s for m in ms], lambda v: f"{v:.1f}"),
                        spread([m.records_per_s for m in ms], lambda v: f"{v:,.0f}"),
                        spread([m.broker_ms_per_mb for m in ms], lambda v: f"{v:.1f}"),
                        spread([m.client_ms_per_mb for m in ms], lambda v: f"{v:.1f}"),
                        f"{median(batches):.0f} KiB" if batches else "-",
                        f"{median([m.result.busiest_partition for m in ms]):.2f}x" if batches else "-",
                        f"{min(m.load_start for m in ms):.2f}-{max(m.load_start for m in ms):.2f} / "
                        f"{min(m.load_end for m in ms):.2f}-{max(m.load_end for m in ms):.2f}",
                    ]
                )
            if set(medians) == set(PATHS):
                figures.append(
                    Figure(
                        name=f"Kafka path {phase}, {setup.label}, against the HTTP path's median (RF 3, 1 KiB, acks=all)",
                        measured=medians["kafka"],
                        unit="MB/s",
                        goal=medians["http"],
                        better="higher",
                    )
                )
    print_table(
        [
            "batch",
            "phase",
            "path",
            "MB/s",
            "records/s",
            "broker CPU ms/MB",
            "client CPU ms/MB",
            "avg batch",
            "busiest partition",
            "load start / end",
        ],
        rows,
    )
    print()
    for f in figures:
        print(
            f"{f.name}: {f.measured:.1f} against {f.goal:.1f} MB/s = {f.measured / f.goal:.2f}x "
            f"-> {'holds' if f.met else 'DOES NOT HOLD'}"
        )
    return figures


def run(args: argparse.Namespace) -> list[Figure]:
    chosen = (
        [t.strip() for t in args.setups.split(",") if t.strip()] if args.setups else [s.tag for s in SETUPS]
    )
    unknown = [t for t in chosen if t not in SETUP_BY_TAG]
    if unknown:
        raise SystemExit(f"--setups: unknown {', '.join(unknown)} (known: {', '.join(SETUP_BY_TAG)})")
    setups = [SETUP_BY_TAG[t] for t in chosen]
    records = args.records or (QUICK_RECORDS if args.quick else DEFAULT_RECORDS)
    runs = args.runs or (1 if args.quick else 3)
    if any("=" not in item for item in args.kafka_producer_config):
        raise SystemExit(f"--kafka-producer-config: expected KEY=VALUE, got {args.kafka_producer_config}")
    extra = dict(item.split("=", 1) for item in args.kafka_producer_config)
    results: list[Measured] = []
    with Workspace(keep=args.keep) as ws, agent_cluster(ws) as cluster:
        settings = {**SETTINGS, **admin_token_setting(cluster), "listeners": LISTENERS}
        for node in (1, 2, 3):
            cluster.add_broker(node, dirs=2, settings=settings)
        cluster.wait_unfenced(1, 2, 3)
        log(
            f"  cluster: 3 agents x 2 plain dirs under {ws.root}, HTTP + SASL_PLAINTEXT listeners, broker pids "
            f"{', '.join(str(cluster.pid(n)) for n in (1, 2, 3))}; topics of {PARTITIONS} partitions, RF {RF}, "
            f"min.insync {MIN_INSYNC}; {records:,} records of {RECORD_BYTES} B per run, {runs} run(s) per setup"
            + (f"; librdkafka producer also {extra}" if extra else "")
        )
        for number in range(1, runs + 1):
            for setup in setups:
                order = PATHS if number % 2 else tuple(reversed(PATHS))
                for path in order:
                    results.extend(
                        run_setup(
                            cluster, ws, setup, path, run=number, records=records, kafka_producer_extra=extra
                        )
                    )
    return report(results, setups)


def main() -> int:
    if sys.argv[1:2] == ["--worker"]:
        return worker_main(sys.argv[2])
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "--records",
        type=int,
        default=0,
        help=f"records per run (default {DEFAULT_RECORDS:,}; --quick {QUICK_RECORDS:,})",
    )
    parser.add_argument("--runs", type=int, default=0, help="runs per setup and path (default 3; --quick 1)")
    parser.add_argument(
        "--setups",
        default="",
        help=f"comma-separated subset of {','.join(s.tag for s in SETUPS)} (default all)",
    )
    parser.add_argument(
        "--kafka-producer-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a librdkafka producer setting on top of every setup's (repeatable), e.g. max.in.flight=1",
    )
    return bench_main("Kafka listener against the HTTP path", parser, run)


if __name__ == "__main__":
    raise SystemExit(main())
