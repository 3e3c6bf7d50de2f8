"""Transactional produce against Apache Kafka 4.3.1 (issue 33): committed records/s and MiB/s, and
the latency of `commit_transaction()` (p50 / p99), for transactions of 100 x 1 KiB records,
acks=all, into an RF 3 topic.

Both clusters run in one invocation, in turn (never both at once: they would share the 2 cores),
alternating ours, Kafka, ours, Kafka, ... (`--runs` of each), each fresh for its run:
* ours: one `jbod-controller` and 3 `jbod-agent` brokers (`bench.kafka_peer.our_cluster`: 2 plain
  log dirs each, the agents' defaults, SASL_PLAINTEXT);
* Kafka: `e2e.kafka_tools.KafkaNodesCluster`, one dedicated KRaft controller and 3 broker-only
  JVMs (`bench.kafka_peer.kafka_cluster`: 2 log dirs each, Kafka's defaults, SASL_PLAINTEXT).
Both with their defaults for the transaction log: `__transaction_state` 50 partitions, RF 3,
`min.insync.replicas` 2 (`transaction.state.log.*`), created on the first FindCoordinator.
Every client logs in as SCRAM-SHA-512 user `admin`.

A run: create topic `txn-<system>-<run>` (`PARTITIONS` partitions, RF 3, `min.insync.replicas` 2;
`kafka-topics.sh`), wait for every partition's full ISR, then start `--producers` producer
processes (each `python -m bench.transactions --worker`, its own interpreter and its own
confluent-kafka / librdkafka transactional producer: `transactional.id` `txn-bench-<run>-<i>`,
idempotent, acks=all, librdkafka's defaults otherwise, `linger.ms` 5). Each calls
`init_transactions()` and runs transactions unmeasured for `WARMUP_S` (15 s; --quick 3 s: connections, the
coordinator's first load, a JVM's first JIT), then, all started together, runs transactions back
to back for `--seconds`:

    begin_transaction(); 100 x produce(1 KiB of random bytes, no key); commit_transaction()

The records spread over the partitions by librdkafka's sticky partitioner, so a transaction
usually touches several partitions (AddPartitionsToTxn for each new one, then EndTxn and the
markers on each). Measured:
* throughput = the sum over the producers of (records committed / the seconds from their start to
  the end of their last commit); MiB = 2^20 bytes of record values;
* commit latency = the time `commit_transaction()` takes (`time.monotonic()` around the call):
  librdkafka first waits for the transaction's records still in flight to be acknowledged
  (acks=all), then sends EndTxn and waits for its answer; p50 / p99 over every commit of every
  producer;
* the 1-minute load average at both ends of the window, and the brokers' CPU seconds in it
  (utime + stime of the 3 broker processes, not the controller) per 10^9 bytes of values.
A transaction that fails aborts the run (`BenchError`): every transaction must commit.

Goals (issue 33), as Kafka's figures in the same invocation (medians over the runs): throughput
at least Kafka's, commit p99 at most Kafka's. Figures, not assertions.

`--profile DIR` records our brokers with py-spy during each measured window and logs their hot
spots. `--flush-first` (a diagnosis, not the benchmark) calls `flush()` before
`commit_transaction()` and logs both: the commit is then the EndTxn alone, the flush the records'
acks=all (and their AddPartitionsToTxn).

    python -m bench.transactions [--quick] [--runs N] [--seconds S] [--producers N]
                                 [--systems ours,kafka] [--profile DIR] [--flush-first]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import select
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench import kafka_peer
from bench.common import (
    BenchError,
    Figure,
    Workspace,
    base_parser,
    bench_main,
    log,
    percentile,
    print_table,
)
from e2e import kafka_tools

RECORD_BYTES = 1024
RECORDS_PER_TXN = 100
PARTITIONS = 6
WARMUP_S = 15.0  # a fresh JVM's JIT and our first connections; not measured
QUICK_WARMUP_S = 3.0
SYSTEMS = kafka_peer.SYSTEMS
DEFAULT_SECONDS = 30.0
QUICK_SECONDS = 8.0
DEFAULT_PRODUCERS = 4
MIB = 2**20


# -- the producer process ------------------------------------------------------------------------
#
# Protocol (one line each way): after init_transactions() and the warm-up transactions it prints
# READY; GO starts the measured transactions for --seconds; then it writes --out (JSON) and prints
# DONE. A failure prints FAILED <error> (and exits 1).


def _worker(args: argparse.Namespace) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": args.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": args.user,
            "sasl.password": Path(args.password_file).read_text().strip(),
            "transactional.id": args.transactional_id,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
        }
    )
    value = os.urandom(args.record_bytes)
    flushed: list[float] = []

    def transaction() -> float:
        producer.begin_transaction()
        for _ in range(args.records_per_txn):
            while True:
                try:
                    producer.produce(args.topic, value)
                    break
                except BufferError:
                    producer.poll(0.001)
            producer.poll(0)
        started = time.monotonic()
        if args.flush_first:
            producer.flush(60)
            flushed.append(time.monotonic() - started)
            started = time.monotonic()
        producer.commit_transaction(60)
        return time.monotonic() - started

    try:
        producer.init_transactions(60)
        warmup_end = time.monotonic() + args.warmup_seconds
        while time.monotonic() < warmup_end:
            transaction()
        print("READY", flush=True)
        if sys.stdin.readline().strip() != "GO":
            return
        started = time.monotonic()
        commits: list[float] = []
        ended = started
        while ended - started < args.seconds:
            commits.append(transaction())
            ended = time.monotonic()
    except Exception as exc:  # a KafkaException from librdkafka: the parent reports it
        print(f"FAILED {exc}", flush=True)
        raise SystemExit(1) from exc
    Path(args.out).write_text(
        json.dumps(
            {
                "transactions": len(commits),
                "records": len(commits) * args.records_per_txn,
                "seconds": ended - started,
                "commits": commits,
                "flushes": flushed[-len(commits) :] if commits else [],
            }
        )
    )
    print("DONE", flush=True)


def worker_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="a transactional producer process of bench.transactions")
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--user", required=True)
    parser.add_argument("--password-file", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--transactional-id", required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--warmup-seconds", type=float, default=WARMUP_S)
    parser.add_argument("--records-per-txn", type=int, default=RECORDS_PER_TXN)
    parser.add_argument("--record-bytes", type=int, default=RECORD_BYTES)
    parser.add_argument("--flush-first", action="store_true")
    parser.add_argument("--out", required=True)
    _worker(parser.parse_args(argv))
    return 0


@dataclasses.dataclass(frozen=True)
class ProducerResult:
    transactions: int
    records: int
    seconds: float
    commits: tuple[float, ...]  # each commit_transaction()'s seconds
    flushes: tuple[float, ...] = ()  # with --flush-first: each flush()'s seconds before it


class TxnProducerProcess:
    """One worker (the protocol above); killed on `kill` whatever its state."""

    def __init__(
        self,
        peer: kafka_peer.Peer,
        topic: str,
        transactional_id: str,
        out: Path,
        seconds: float,
        warmup_s: float,
        flush_first: bool,
    ) -> None:
        self.out = out
        password = out.with_suffix(".password")
        password.write_text(peer.user.password)
        command = [
            sys.executable,
            "-m",
            "bench.transactions",
            "--worker",
            "--bootstrap",
            peer.bootstrap,
            "--user",
            peer.user.name,
            "--password-file",
            str(password),
            "--topic",
            topic,
            "--transactional-id",
            transactional_id,
            "--seconds",
            str(seconds),
            "--warmup-seconds",
            str(warmup_s),
            "--out",
            str(out),
            *(["--flush-first"] if flush_first else []),
        ]
        with open(out.with_suffix(".stderr"), "a") as stderr:
            self.process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True, bufsize=1
            )

    def expect(self, word: str, timeout: float) -> None:
        assert self.process.stdout is not None
        readable, _, _ = select.select([self.process.stdout], [], [], timeout)
        line = self.process.stdout.readline().strip() if readable else "(nothing in time)"
        if line != word:
            self.kill()
            tail = self.out.with_suffix(".stderr").read_text()[-2000:]
            raise BenchError(f"transactional producer said {line!r}, expected {word}: {tail}")

    def go(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("GO\n")
        self.process.stdin.flush()

    def result(self) -> ProducerResult:
        data = json.loads(self.out.read_text())
        return ProducerResult(
            data["transactions"],
            data["records"],
            data["seconds"],
            tuple(data["commits"]),
            tuple(data["flushes"]),
        )

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


# -- a run ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TxnRun:
    """One measured window on one cluster."""

    system: str
    run: int
    producers: int
    transactions: int
    records_per_s: float
    mib_per_s: float
    commit_p50_ms: float
    commit_p99_ms: float
    commit_max_ms: float
    flush_p50_ms: float  # with --flush-first (else NaN)
    flush_p99_ms: float
    broker_cpu_s: float
    seconds: float
    load_start: float
    load_end: float

    @property
    def cpu_s_per_gb(self) -> float:
        values = self.records_per_s * self.seconds * RECORD_BYTES
        return self.broker_cpu_s / max(1e-9, values / 1e9)


def summarise_run(
    system: str, run: int, results: Sequence[ProducerResult], *, cpu_s: float, loads: tuple[float, float]
) -> TxnRun:
    """The run's figures from every producer's result (pure)."""
    commits = sorted(c for r in results for c in r.commits)
    flushes = sorted(f for r in results for f in r.flushes)
    records_per_s = sum(r.records / r.seconds for r in results if r.seconds > 0)
    return TxnRun(
        system=system,
        run=run,
        producers=len(results),
        transactions=sum(r.transactions for r in results),
        records_per_s=records_per_s,
        mib_per_s=records_per_s * RECORD_BYTES / MIB,
        commit_p50_ms=percentile(commits, 0.50) * 1000,
        commit_p99_ms=percentile(commits, 0.99) * 1000,
        commit_max_ms=(commits[-1] if commits else float("nan")) * 1000,
        flush_p50_ms=percentile(flushes, 0.50) * 1000,
        flush_p99_ms=percentile(flushes, 0.99) * 1000,
        broker_cpu_s=cpu_s,
        seconds=max((r.seconds for r in results), default=0.0),
        load_start=loads[0],
        load_end=loads[1],
    )


def txn_run(
    peer: kafka_peer.Peer,
    ws: Workspace,
    *,
    run: int,
    producers: int,
    seconds: float,
    warmup_s: float,
    flush_first: bool,
    profile: Path | None,
) -> TxnRun:
    topic = f"txn-{peer.system}-{run}"
    took = kafka_peer.create_topic(peer, topic, partitions=PARTITIONS, timeout=120)
    log(f"    {peer.system} run {run}: topic {topic} ({PARTITIONS} x RF 3) with full ISRs in {took:.1f} s")
    work = ws.root / f"producers-{peer.system}-{run}"
    work.mkdir(parents=True, exist_ok=True)
    workers = [
        TxnProducerProcess(
            peer, topic, f"txn-bench-{run}-{i}", work / f"p{i}.json", seconds, warmup_s, flush_first
        )
        for i in range(producers)
    ]
    try:
        for worker in workers:
            worker.expect("READY", timeout=warmup_s + 300)
        load_start, cpu_start = kafka_peer.load_1min(), kafka_peer.broker_cpu(peer)
        with kafka_peer.profiling(peer, profile, f"run{run}-txn") as files:
            for worker in workers:
                worker.go()
            for worker in workers:
                worker.expect("DONE", timeout=seconds + 300)
        cpu_s, load_end = kafka_peer.broker_cpu(peer) - cpu_start, kafka_peer.load_1min()
        results = [worker.result() for worker in workers]
    finally:
        for worker in workers:
            worker.kill()
    if files:
        kafka_peer.log_profile(files, f"run{run}-txn")
    out = summarise_run(peer.system, run, results, cpu_s=cpu_s, loads=(load_start, load_end))
    flushed = (
        f" (after flush() p50 {out.flush_p50_ms:.1f} ms p99 {out.flush_p99_ms:.1f} ms)" if flush_first else ""
    )
    log(
        f"    {out.system:5} run {run}: {out.transactions:,} transactions, {out.records_per_s:9,.0f} rec/s "
        f"{out.mib_per_s:6.1f} MiB/s; commit p50 {out.commit_p50_ms:.1f} ms p99 {out.commit_p99_ms:.1f} ms "
        f"max {out.commit_max_ms:.0f} ms{flushed}; broker CPU {out.broker_cpu_s:.1f} s = {out.cpu_s_per_gb:.1f} s/GB; "
        f"load {out.load_start:.2f} -> {out.load_end:.2f}"
    )
    return out


# -- report ----------------------------------------------------------------------------------------


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def medians(runs: Sequence[TxnRun], system: str) -> dict[str, float]:
    mine = [r for r in runs if r.system == system]
    return {
        "records_per_s": _median([r.records_per_s for r in mine]),
        "mib_per_s": _median([r.mib_per_s for r in mine]),
        "commit_p50_ms": _median([r.commit_p50_ms for r in mine]),
        "commit_p99_ms": _median([r.commit_p99_ms for r in mine]),
        "cpu_s_per_gb": _median([r.cpu_s_per_gb for r in mine]),
    }


def report(runs: Sequence[TxnRun]) -> list[Figure]:
    print()
    print(
        f"every run; transactions of {RECORDS_PER_TXN} x {RECORD_BYTES} B, acks=all, topic {PARTITIONS} x RF 3; "
        "commit = commit_transaction()'s time (ms); CPU = the 3 brokers' utime+stime per 10^9 B of values; "
        "load = 1-minute load average at start-end of the window"
    )
    print_table(
        [
            "system",
            "run",
            "producers",
            "txns",
            "records/s",
            "MiB/s",
            "commit p50 / p99 / max ms",
            "CPU s/GB",
            "load",
        ],
        [
            [
                r.system,
                r.run,
                r.producers,
                f"{r.transactions:,}",
                f"{r.records_per_s:,.0f}",
                f"{r.mib_per_s:.1f}",
                f"{r.commit_p50_ms:.1f} / {r.commit_p99_ms:.1f} / {r.commit_max_ms:.0f}",
                f"{r.cpu_s_per_gb:.1f}",
                f"{r.load_start:.2f}-{r.load_end:.2f}",
            ]
            for r in runs
        ],
    )
    systems = [s for s in SYSTEMS if any(r.system == s for r in runs)]
    by = {s: medians(runs, s) for s in systems}
    if set(by) != set(SYSTEMS):
        return [
            Figure(
                f"{s}: transactional records/s (no Kafka to compare)",
                by[s]["records_per_s"],
                "/s",
                0.0,
                "higher",
            )
            for s in systems
        ]
    ours, kafka = by["ours"], by["kafka"]
    return [
        Figure(
            "transactions (100 x 1 KiB, acks=all, RF 3): records/s, ours against Kafka 4.3's",
            ours["records_per_s"],
            "/s",
            kafka["records_per_s"],
            better="higher",
            detail=f"MiB/s ours {ours['mib_per_s']:.1f}, Kafka {kafka['mib_per_s']:.1f}",
        ),
        Figure(
            "transactions: commit_transaction() p99, ours against Kafka 4.3's",
            ours["commit_p99_ms"] / 1000,
            "s",
            kafka["commit_p99_ms"] / 1000 * 1.000001,  # "at most": equal meets it
        ),
        Figure(
            "transactions: commit_transaction() p50, ours (Kafka 4.3's for reference)",
            ours["commit_p50_ms"] / 1000,
            "s",
            float("inf"),
            detail=f"Kafka {kafka['commit_p50_ms']:.1f} ms",
        ),
        Figure(
            "transactions: broker CPU per GB, ours (Kafka 4.3's for reference)",
            ours["cpu_s_per_gb"],
            "s/GB",
            float("inf"),
            detail=f"Kafka {kafka['cpu_s_per_gb']:.1f} s/GB",
        ),
    ]


def run(args: argparse.Namespace) -> list[Figure]:
    seconds = args.seconds or (QUICK_SECONDS if args.quick else DEFAULT_SECONDS)
    runs = args.runs or (1 if args.quick else 3)
    producers = args.producers
    warmup_s = QUICK_WARMUP_S if args.quick else WARMUP_S
    systems = tuple(s for s in args.systems.split(",") if s)
    if not systems or not set(systems) <= set(SYSTEMS):
        raise BenchError(f"--systems takes {','.join(SYSTEMS)} or one of them, not {args.systems!r}")
    kafka_tools.default_install()
    log(
        f"  Kafka {kafka_tools.KAFKA_VERSION} ({kafka_peer.java_version()}): 1 controller + 3 brokers; ours: "
        f"1 jbod-controller + 3 jbod-agents; {runs} run(s) each, alternating; {producers} transactional "
        f"producer(s) x {seconds:.0f} s after {warmup_s:.0f} s of unmeasured transactions"
    )
    out: list[TxnRun] = []
    with Workspace(keep=args.keep) as ws:
        for number in range(1, runs + 1):
            for system in systems:
                with kafka_peer.start_cluster(system, ws) as peer:
                    log(
                        f"  {system} run {number}: cluster up in {peer.started_in:.1f} s (load {kafka_peer.load_1min():.2f})"
                    )
                    out.append(
                        txn_run(
                            peer,
                            ws,
                            run=number,
                            producers=producers,
                            seconds=seconds,
                            warmup_s=warmup_s,
                            flush_first=args.flush_first,
                            profile=args.profile,
                        )
                    )
    return report(out)


def main() -> int:
    if "--worker" in sys.argv[1:]:
        return worker_main(sys.argv[1:])
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=0, help="runs of each cluster (default 3; --quick 1)")
    parser.add_argument(
        "--seconds",
        type=float,
        default=0,
        help=f"measured window (default {DEFAULT_SECONDS:.0f}; --quick {QUICK_SECONDS:.0f})",
    )
    parser.add_argument(
        "--producers", type=int, default=DEFAULT_PRODUCERS, help="transactional producer processes"
    )
    parser.add_argument(
        "--systems", default=",".join(SYSTEMS), help="which clusters to run (default: ours,kafka)"
    )
    parser.add_argument(
        "--flush-first",
        action="store_true",
        help="call flush() before commit_transaction(): the commit then times EndTxn alone (a diagnosis)",
    )
    parser.add_argument(
        "--profile", type=Path, help="record our brokers with py-spy during each window into this directory"
    )
    return bench_main("Transactional produce against Apache Kafka 4.3", parser, run)


if __name__ == "__main__":
    raise SystemExit(main())
