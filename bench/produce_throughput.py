"""Data-plane benchmark 1: produce throughput (acks=-1, RF 3) and produce latency at half that load.

Cluster: one `jbod-controller` and 3 `jbod-agent` processes (brokers 1, 2, 3), each with 2 log
dirs that are plain directories on the machine's disk, with the agent's default intervals
(`broker.heartbeat.interval.ms` 2000, `log.dir.probe.interval.ms` 1000). One topic per
configuration with RF 3 and `min.insync.replicas` 2, created by the controller (leaders spread
round robin), deleted after the configuration is measured.

Load: confluent-kafka (librdkafka) producers on the brokers' Kafka listeners (Kafka's producer
defaults: idempotent, acks=all, up to 5 requests in flight per broker; `linger.ms` 2 and
`batch.size` per configuration) in one or more producer processes (each is `python -m
bench.produce_throughput --worker`, its own interpreter), keyless 1 KiB records (random bytes;
librdkafka's sticky partitioner spreads them). Every record's send (handed to librdkafka) and
acknowledgement (its delivery report served) are timed on `time.monotonic()`, which all
processes share, so the parent cuts the same window out of every worker's records.

Configurations `PARTITIONSxPRODUCERSxBATCH_KIB` (default 6x1x256, 12x1x256, 6x2x256, 12x2x256
and 12x2x1024), each with:
* FULL load: every producer sends as fast as librdkafka takes records (bounded by its queue,
  `queue.buffering.max.kbytes`) for a warm-up, then a measured window. Throughput = records acknowledged inside the window /
  its length (MB = 10^6 bytes of record values; keys are null).
* HALF load: the same producers, rate-limited (open loop, 1 ms pacing) to half the measured
  aggregate records/s, again warm-up then window; latency = ack time - send time of every record
  sent inside the window (p50 / p99 / max). Latency at full load is printed too, but it is queueing
  in the producer's buffer, not the service time.
* CPU seconds used during each window by every broker, the controller and each producer process
  (from /proc/<pid>/stat), and what the rest of the machine used meanwhile (other users' tests,
  kernel threads), so it shows where the time goes and how contended the run was.

    python -m bench.produce_throughput [--quick] [--configs 6x1x256,12x2x1024] [--seconds S]
"""

from __future__ import annotations

import argparse
import array
import functools
import json
import math
import os
import queue
import select
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import (
    AgentCluster,
    BenchError,
    CpuMeter,
    Figure,
    Workspace,
    admin_token_setting,
    agent_cluster,
    base_parser,
    bench_main,
    create_topic,
    kafka_config,
    log,
    machine_load,
    percentile,
    print_table,
)

GOAL_MB_S = 30.0
RECORD_BYTES = 1024
RF = 3
MIN_INSYNC = 2
SETTINGS = {"broker.heartbeat.interval.ms": "2000", "log.dir.probe.interval.ms": "1000"}  # the defaults
NAN = float("nan")


# -- the producer process ---------------------------------------------------------------------
#
# Protocol on its stdin/stdout (one line each): it prints READY once the topic's metadata is
# loaded; GO <rate> starts sending (rate records/s, 0 =
# as fast as possible) and may be sent again to change the rate; STOP stops sending, flushes,
# writes the results to --out and prints DONE. The results: `<out>.json` (counts, errors) and
# `<out>.times`, the send and ack time of every record as doubles (NaN ack = failed).


def _commands() -> queue.Queue[str]:
    """The parent's commands, one line each, read from stdin by a thread (EOF: STOP)."""
    commands: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in sys.stdin:
            commands.put(line.strip())
        commands.put("STOP")

    threading.Thread(target=read, name="commands", daemon=True).start()
    return commands


def _worker(args: argparse.Namespace) -> None:
    from confluent_kafka import Producer

    from jbod_client.kafka_config import KafkaSecurity
    from jbod_client.rdkafka import ProducerStatistics

    statistics = ProducerStatistics()
    producer = Producer(
        {
            "bootstrap.servers": args.bootstrap,
            **KafkaSecurity.admin(Path(args.token_file).read_text().strip()).librdkafka_config(),
            "acks": "all",
            "enable.idempotence": True,
            "batch.size": args.batch_bytes,
            "linger.ms": args.linger_ms,
            "queue.buffering.max.kbytes": args.buffer_bytes // 1024,
            "statistics.interval.ms": 1000,
            "stats_cb": statistics,
        }
    )
    value = os.urandom(args.record_bytes)
    sent: array.array[float] = array.array("d")
    acked: array.array[float] = array.array("d")
    errors: Counter[str] = Counter()

    def done(index: int, err: Any, _msg: Any) -> None:
        if err is None:
            acked[index] = time.monotonic()
        else:
            errors[err.name()] += 1

    producer.list_topics(args.topic, timeout=60)  # metadata (and a connection) before the clock
    partition = args.partition if args.partition >= 0 else None
    extra = {} if partition is None else {"partition": partition}
    print("READY", flush=True)

    commands = _commands()
    command = commands.get()
    while command.startswith("GO"):
        rate = float(command.split()[1]) if len(command.split()) > 1 else 0.0
        started = time.monotonic()
        count = 0
        while commands.empty():
            due = int((time.monotonic() - started) * rate) + 1 - count if rate > 0 else 64
            if due <= 0:
                producer.poll(0.001)  # serves delivery reports while the pace waits
                continue
            for _ in range(due):
                now = time.monotonic()
                try:
                    producer.produce(
                        args.topic, value, on_delivery=functools.partial(done, len(sent)), **extra
                    )
                except BufferError:  # librdkafka's queue is full: let acknowledgements drain it
                    producer.poll(0.001)
                    break
                sent.append(now)
                acked.append(NAN)
                count += 1
            producer.poll(0)
        command = commands.get()
    producer.flush(120)
    producer.poll(0)
    out = Path(args.out)
    with open(out.with_suffix(".times"), "wb") as handle:
        sent.tofile(handle)
        acked.tofile(handle)
    out.with_suffix(".json").write_text(
        json.dumps({"records": len(sent), "errors": dict(errors), "retries": statistics.retries})
    )
    print("DONE", flush=True)


def worker_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="a producer process of the data-plane benchmarks")
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--bootstrap", required=True, help="the brokers' Kafka listeners, host:port,...")
    parser.add_argument("--token-file", required=True, help="the admin token: the `admin` password")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partition", type=int, default=-1, help="-1: keyless records, sticky partitioner")
    parser.add_argument("--record-bytes", type=int, default=RECORD_BYTES)
    parser.add_argument("--batch-bytes", type=int, default=256 * 1024)
    parser.add_argument("--linger-ms", type=float, default=2.0)
    parser.add_argument("--buffer-bytes", type=int, default=16 * 1024 * 1024)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    _worker(args)
    return 0


@dataclass
class ProducerResult:
    sent: array.array[float]
    acked: array.array[float]
    errors: dict[str, int]  # librdkafka's error name -> records that failed with it
    retries: int  # produce requests librdkafka retried


@dataclass
class ProducerProcess:
    """A producer worker (see the protocol above), started by the benchmark and always killed.
    It produces to `cluster`'s brokers as `admin`, or (without a cluster) to `bootstrap` as the
    SCRAM user `admin` whose password is in `token_file` (e.g. Apache Kafka's in bench.compaction)."""

    cluster: AgentCluster | None
    topic: str
    out: Path
    partition: int = -1
    extra: list[str] = field(default_factory=list)
    process: subprocess.Popen[str] | None = None
    bootstrap: str = ""
    token_file: Path | None = None

    def start(self) -> ProducerProcess:
        if self.cluster is not None:
            self.bootstrap = self.bootstrap or kafka_config(self.cluster)["bootstrap.servers"]
            self.token_file = self.token_file or self.cluster.controller.data_dir / "admin.token"
        command = [
            sys.executable,
            "-m",
            "bench.produce_throughput",
            "--worker",
            "--bootstrap",
            self.bootstrap,
            "--token-file",
            str(self.token_file),
            "--topic",
            self.topic,
            "--partition",
            str(self.partition),
            "--out",
            str(self.out),
            *self.extra,
        ]
        with open(self.out.with_suffix(".stderr"), "a") as stderr:  # the child keeps its own fd
            self.process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True, bufsize=1
            )
        if self.cluster is not None:
            self.cluster.stack.callback(self.kill)
        return self

    def _expect(self, word: str, timeout: float = 120) -> None:
        assert self.process is not None and self.process.stdout is not None
        readable, _, _ = select.select([self.process.stdout], [], [], timeout)
        line = self.process.stdout.readline() if readable else "(nothing in time)"
        if line.strip() != word:
            self.kill()
            tail = self.out.with_suffix(".stderr").read_text()[-2000:]
            raise BenchError(f"producer worker said {line.strip()!r}, expected {word}: {tail}")

    def ready(self) -> None:
        self._expect("READY")

    def go(self, rate: float = 0.0) -> None:
        assert self.process is not None and self.process.stdin is not None
        self.process.stdin.write(f"GO {rate}\n")
        self.process.stdin.flush()

    def stop(self) -> None:
        assert self.process is not None and self.process.stdin is not None
        self.process.stdin.write("STOP\n")
        self.process.stdin.close()  # EOF ends the worker's stdin reader thread

    def collect(self) -> ProducerResult:
        """Wait for DONE (after `stop`) and read the results."""
        self._expect("DONE", timeout=300)
        assert self.process is not None
        self.process.wait(timeout=60)
        meta = json.loads(self.out.with_suffix(".json").read_text())
        times: array.array[float] = array.array("d")
        raw = self.out.with_suffix(".times").read_bytes()
        times.frombytes(raw)
        half = len(times) // 2
        return ProducerResult(times[:half], times[half:], meta["errors"], meta["retries"])

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def acked_between(results: list[ProducerResult], start: float, end: float) -> int:
    return sum(1 for r in results for a in r.acked if start <= a < end)


def latencies(results: list[ProducerResult], start: float, end: float) -> tuple[list[float], int]:
    """Sorted send → ack seconds of the records sent in [start, end); and how many of those failed."""
    out: list[float] = []
    failed = 0
    for r in results:
        for s, a in zip(r.sent, r.acked, strict=True):
            if start <= s < end:
                if math.isnan(a):
                    failed += 1
                else:
                    out.append(a - s)
    out.sort()
    return out, failed


# -- the benchmark ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    """One measured configuration: partitions of the topic, producer processes, batch size."""

    partitions: int
    producers: int
    batch_kib: int

    @classmethod
    def parse(cls, text: str) -> Config:
        """`PARTITIONSxPRODUCERSxBATCH_KIB`, e.g. `12x2x256`."""
        try:
            partitions, producers, batch = (int(v) for v in text.lower().split("x"))
        except ValueError:
            raise SystemExit(
                f"--configs: expected PARTITIONSxPRODUCERSxBATCH_KIB like 12x2x256, got {text!r}"
            ) from None
        return cls(partitions, producers, batch)

    @property
    def tag(self) -> str:
        return f"{self.partitions}p-{self.producers}w-{self.batch_kib}k"


# The product's producer defaults (256 KiB batches) at 6 and 12 partitions from 1 and 2
# processes, then 1 MiB batches: the request rate, not the byte rate, is what costs.
DEFAULT_CONFIGS = ("6x1x256", "12x1x256", "6x2x256", "12x2x256", "12x2x1024")
QUICK_CONFIGS = ("6x1x256",)


@dataclass
class Measured:
    config: Config
    records_per_s: float
    mb_per_s: float
    full_latency: list[float]
    half_rate: float
    half_achieved: float
    half_latency: list[float]
    failed: int
    retries: int
    cpu_full: CpuMeter
    cpu_half: CpuMeter
    load: str


def run_phase(
    workers: list[ProducerProcess], cpu: CpuMeter, *, rate: float, warmup: float, seconds: float
) -> tuple[float, float]:
    """GO every worker (at `rate` records/s in total, 0 = unlimited), warm up, measure a window;
    returns the window (monotonic start, end). The workers keep sending until told to stop."""
    for worker in workers:
        worker.go(rate / len(workers))
    time.sleep(warmup)
    cpu.start()
    start = time.monotonic()
    time.sleep(seconds)
    end = time.monotonic()
    cpu.stop()
    return start, end


def measure(
    cluster: AgentCluster, ws: Workspace, config: Config, *, seconds: float, warmup: float
) -> Measured:
    name = f"tp-{config.tag}"
    topic = create_topic(
        cluster, name, partitions=config.partitions, rf=RF, configs={"min.insync.replicas": str(MIN_INSYNC)}
    )
    leaders = Counter(p["leader"] for p in topic["partitions"])
    log(
        f"  {name}: {config.partitions} partitions x RF {RF} (min.insync {MIN_INSYNC}), leaders per broker "
        f"{dict(sorted(leaders.items()))}; {config.producers} producer process(es), {config.batch_kib} KiB batches"
    )
    pids = {f"broker {n}": cluster.pid(n) for n in sorted(cluster.brokers)}
    pids["controller"] = cluster.controller.pid
    extra = [
        "--batch-bytes",
        str(config.batch_kib * 1024),
        "--buffer-bytes",
        str(max(16, config.batch_kib // 16) << 20),
    ]

    def phase(label: str, rate_of: Any) -> tuple[list[ProducerResult], CpuMeter, tuple[float, float], float]:
        workers = [
            ProducerProcess(cluster, name, ws.root / f"{name}-{label}-{i}", extra=extra).start()
            for i in range(config.producers)
        ]
        for worker in workers:
            worker.ready()
        meter = CpuMeter({**pids, **{f"producer {i + 1}": w.pid for i, w in enumerate(workers)}})
        rate = rate_of()
        window = run_phase(workers, meter, rate=rate, warmup=warmup, seconds=seconds)
        for worker in workers:
            worker.stop()
        results = [worker.collect() for worker in workers]
        return results, meter, window, rate

    full, cpu_full, (start, end), _ = phase("full", lambda: 0.0)
    acked = acked_between(full, start, end)
    records_per_s = acked / (end - start)
    full_latency, _ = latencies(full, start, end)
    full_failed = sum(sum(r.errors.values()) for r in full)
    log(
        f"    FULL: {records_per_s:,.0f} records/s = {records_per_s * RECORD_BYTES / 1e6:.1f} MB/s acknowledged; "
        f"send → ack p50 {percentile(full_latency, 0.5) * 1000:.0f} ms (queued in the producer); "
        f"{full_failed} failed, {sum(r.retries for r in full)} retries ({machine_load()})"
    )
    log(f"      {cpu_full.text()}")
    half, cpu_half, (hstart, hend), half_rate = phase("half", lambda: records_per_s / 2)
    half_latency, half_failed = latencies(half, hstart, hend)
    half_achieved = acked_between(half, hstart, hend) / (hend - hstart)
    log(
        f"    HALF ({half_rate:,.0f} records/s offered, {half_achieved:,.0f}/s acknowledged): send → ack "
        f"p50 {percentile(half_latency, 0.5) * 1000:.1f} ms, p99 {percentile(half_latency, 0.99) * 1000:.1f} ms, "
        f"max {half_latency[-1] * 1000 if half_latency else NAN:.1f} ms over {len(half_latency):,} records; "
        f"{half_failed} failed ({machine_load()})"
    )
    log(f"      {cpu_half.text()}")
    retries = sum(r.retries for r in full + half)
    reply = cluster.admin.delete_topic(name)
    if reply.get("errorCode", 0) != 0:
        raise BenchError(f"delete {name}: {reply}")
    for path in ws.root.glob(f"{name}-*.times"):
        path.unlink()
    return Measured(
        config=config,
        records_per_s=records_per_s,
        mb_per_s=records_per_s * RECORD_BYTES / 1e6,
        full_latency=full_latency,
        half_rate=half_rate,
        half_achieved=half_achieved,
        half_latency=half_latency,
        failed=full_failed + half_failed,
        retries=retries,
        cpu_full=cpu_full,
        cpu_half=cpu_half,
        load=machine_load(),
    )


def run(args: argparse.Namespace) -> list[Figure]:
    configs = [
        Config.parse(c)
        for c in (args.configs or ",".join(QUICK_CONFIGS if args.quick else DEFAULT_CONFIGS)).split(",")
    ]
    seconds = args.seconds or (5.0 if args.quick else 15.0)
    warmup = 2.0 if args.quick else 3.0
    results: list[Measured] = []
    with Workspace(keep=args.keep) as ws, agent_cluster(ws) as cluster:
        settings = {**SETTINGS, **admin_token_setting(cluster)}
        for node in (1, 2, 3):
            cluster.add_broker(node, dirs=2, settings=settings)
        cluster.wait_unfenced(1, 2, 3)
        log(
            f"  cluster: 3 agents x 2 plain dirs under {ws.root}; heartbeat 2000 ms, probe 1000 ms (defaults); "
            f"{RECORD_BYTES} B records, acks=-1; warm-up {warmup:.0f} s, window {seconds:.0f} s per phase"
        )
        for config in configs:
            results.append(measure(cluster, ws, config, seconds=seconds, warmup=warmup))
    print()
    print(
        "FULL load (records acknowledged in the window; CPU as a share of one core: brokers, producer processes, "
        "CPU seconds of brokers + producers per MB, everything else on the machine: other users' tests, kernel) "
        "and latency at HALF that load (send → ack per record)"
    )
    rows = []
    for m in results:
        cpu = m.cpu_full
        ours = sum(cpu.used.values())
        rows.append(
            [
                f"{m.config.partitions}",
                f"{m.config.producers}",
                f"{m.config.batch_kib} KiB",
                f"{m.mb_per_s:.1f}",
                f"{m.records_per_s:,.0f}",
                " / ".join(cpu.share(cpu.used[f"broker {n}"]) for n in (1, 2, 3)),
                " / ".join(cpu.share(v) for k, v in cpu.used.items() if k.startswith("producer")),
                f"{ours * 1000 / max(1e-9, m.mb_per_s * cpu.seconds):.0f} ms",
                cpu.share(cpu.other_processes + cpu.kernel_threads + cpu.unattributed),
                f"{m.half_achieved:,.0f}",
                f"{percentile(m.half_latency, 0.5) * 1000:.1f} ms",
                f"{percentile(m.half_latency, 0.99) * 1000:.1f} ms",
                f"{m.failed}",
                m.load.removeprefix("load average ").removesuffix(f" on {os.cpu_count()} cores"),
            ]
        )
    print_table(
        [
            "partitions",
            "producers",
            "batch",
            "MB/s",
            "records/s",
            "broker CPU 1/2/3",
            "producer CPU",
            "our CPU per MB",
            "rest of machine",
            "half: acked/s",
            "p50",
            "p99",
            "failed",
            "load avg after",
        ],
        rows,
    )
    best = max(results, key=lambda m: m.mb_per_s)
    what = f"{best.config.partitions} partitions, {best.config.producers} producer process(es), {best.config.batch_kib} KiB batches"
    figures = [
        Figure(
            name=f"produce throughput, RF 3 acks=-1 1 KB records (best of {len(results)}: {what})",
            measured=best.mb_per_s,
            unit="MB/s",
            goal=GOAL_MB_S,
            better="higher",
            detail=f"{best.records_per_s:,.0f} records/s; {best.cpu_full.text()}",
        ),
    ]
    default = [m for m in results if m.config.batch_kib == 256]
    if default and best.config.batch_kib != 256:
        top = max(default, key=lambda m: m.mb_per_s)
        figures.append(
            Figure(
                name=f"produce throughput with the producer's default 256 KiB batches (best: "
                f"{top.config.partitions} partitions, {top.config.producers} process(es))",
                measured=top.mb_per_s,
                unit="MB/s",
                goal=GOAL_MB_S,
                better="higher",
                detail=f"{top.records_per_s:,.0f} records/s; {top.cpu_full.text()}",
            )
        )
    for q, label in ((0.5, "p50"), (0.99, "p99")):
        figures.append(
            Figure(
                name=f"produce latency at half load ({best.half_achieved:,.0f} records/s, {what}), {label}",
                measured=percentile(best.half_latency, q),
                unit="s",
                goal=float("inf"),
                detail="no goal",
            )
        )
    return figures


def main() -> int:
    if "--worker" in sys.argv[1:]:
        return worker_main(sys.argv[1:])
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "--configs",
        default="",
        help=f"comma-separated PARTITIONSxPRODUCERSxBATCH_KIB (default {','.join(DEFAULT_CONFIGS)})",
    )
    parser.add_argument("--seconds", type=float, default=0, help="measured window per phase (default 15)")
    return bench_main("produce throughput", parser, run)


if __name__ == "__main__":
    raise SystemExit(main())
