"""Produce latency with and without a throttled partition reassignment running, and the
reassignment's rate against its throttle (issue 24).

Cluster: one `jbod-controller` and 4 `jbod-agent` processes (`bench.common.agent_cluster`, as
every data-plane benchmark starts them), 2 plain log dirs each, the agents' default intervals,
listeners `http://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0`; every Kafka client logs in as
`admin` (the admin token) over SCRAM-SHA-512.

Two topics, placed by hand (`replica_assignment`):
* `bulk`, the data to move: 3 partitions x RF 3 on brokers 1-3 (leaders 1, 2, 3), filled with
  `--size` MB (10^6 B; default 100, quick 10) of 10 KB records by a librdkafka producer (acks=all);
* `latency`, the load that is measured: 3 partitions, leaders 1, 2, 3 (the brokers the
  reassignment reads from), each with a follower on broker 4 (the broker it writes to, whose
  fetcher the follower throttle holds back) and one on the next broker; `min.insync.replicas` 2.

Then, in one run, one producer throughout (confluent-kafka / librdkafka, acks=all, idempotent,
`linger.ms` 0) sending `--rate` records of 200 B a second (default 100) round-robin over
`latency`'s partitions, open loop; a record's latency is librdkafka's own `Message.latency()`
(produce() → delivery report), and every record must be acknowledged:
1. BASELINE: no reassignment, `--baseline` seconds (default 30, quick 4).
2. THROTTLED: `kafka-reassign-partitions.sh --execute --throttle R` (Kafka 4.3.1's tool, `--throttle`
   default 2,500,000 B/s) moves every `bulk` replica of broker 1 to broker 4: `[1,2,3] → [4,2,3]`
   and so on. The tool sets `leader.replication.throttled.rate` / `follower.replication.throttled.rate`
   = R on the brokers involved and the topic's `*.replication.throttled.replicas`, then starts the
   reassignment. The window runs from the first poll of the controller that lists an adding
   replica (from when it was sent) to the first that lists none (when it was answered; polled
   every 0.1 s, so the window errs on the long side by a poll); the latency row is the records
   sent in it.
   Then `--verify` (which clears the throttles, as a user runs it).
3. UNTHROTTLED (contrast; `--skip-unthrottled` leaves it out): the same tool without `--throttle`
   moves the replicas back to broker 1.

The reassignment's rate is the new replicas' bytes (the receiving broker's `GET /v1/log-dirs`
`sizeBytes` of `bulk`, the replicas as they are on its disk, sampled every 0.25 s) over the
window, and over the samples from 2 s on while they still grow (the "steady" rate: the bucket's
one-second burst and the fetches in flight when the quota first says "exceeded" are behind). The
bound it is held to (docs/decisions.md, "Throttles as Kafka's ReplicationQuotaManager") is R x T
plus a one-second burst and one fetch; the most any sample reached of it is printed, and so are
`jbod_replication_throttled_bytes_total` of the 4 brokers over the window (`leader`: the sending
brokers', `follower`: the receiver's).

`--rates-ahead S` sets the two rates as the cluster default S seconds before the tool runs (as
`kafka-configs.sh --entity-default` would), to tell a throttle that is slow to apply from one that
does not hold; the default (0) is the tool alone, as a user runs it.

Figures, not assertions: nothing here fails on a missed goal. Everything is deleted at the end.

    python -m bench.reassign_throttle [--quick] [--size MB] [--throttle B/s] [--baseline S]
                                      [--rate N] [--rates-ahead S] [--skip-unthrottled] [--json PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from bench.common import (
    AgentCluster,
    BenchError,
    Figure,
    Workspace,
    admin_token_setting,
    agent_cluster,
    base_parser,
    bench_main,
    full_isr,
    log,
    percentile,
    wait_until,
)
from e2e import kafka_tools

BROKERS = (1, 2, 3, 4)
SOURCE, TARGET = 1, 4
DIRS_PER_BROKER = 2
LISTENERS = "http://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"
AGENT_SETTINGS = {"broker.heartbeat.interval.ms": "2000", "log.dir.probe.interval.ms": "1000"}  # defaults
BULK, LATENCY = "bulk", "latency"
BULK_ASSIGNMENT = ((1, 2, 3), (2, 3, 1), (3, 1, 2))
LATENCY_ASSIGNMENT = ((1, 4, 2), (2, 4, 3), (3, 4, 1))  # leaders 1-3, a follower on broker 4
MIN_INSYNC = 2
BULK_RECORD_BYTES = 10_000
LATENCY_RECORD_BYTES = 200
REPLICA_FETCH_MAX_BYTES = 1 << 20  # the agents' default `replica.fetch.max.bytes` (one fetch's most)
DEFAULT_SIZE_MB, QUICK_SIZE_MB = 100, 10
DEFAULT_THROTTLE = 2_500_000  # B/s
DEFAULT_BASELINE_S, QUICK_BASELINE_S = 30.0, 4.0
DEFAULT_RATE = 100  # latency records per second
POLL_S = 0.1
SIZE_SAMPLE_S = 0.25
WARMUP_S = 2.0
STEADY_AFTER_S = 2.0
REASSIGN_TIMEOUT_S = 1800.0


# -- pure parts ----------------------------------------------------------------------------------------


def moved_assignment(
    assignment: Sequence[Sequence[int]], *, source: int, target: int
) -> tuple[tuple[int, ...], ...]:
    """Each partition's replicas with `source` replaced by `target` (in place: the order, and with
    it the preferred leader, is kept)."""
    if any(target in replicas for replicas in assignment):
        raise ValueError(f"broker {target} already holds a replica")
    return tuple(tuple(target if b == source else b for b in replicas) for replicas in assignment)


def reassignment_json(topic: str, assignment: Sequence[Sequence[int]]) -> dict[str, Any]:
    """Kafka's reassignment file (`--reassignment-json-file`) for every partition of `topic`."""
    return {
        "version": 1,
        "partitions": [
            {"topic": topic, "partition": p, "replicas": list(replicas)}
            for p, replicas in enumerate(assignment)
        ],
    }


@dataclasses.dataclass(frozen=True)
class Latency:
    """Send → ack latency of the records sent in a window (seconds), and what became of them."""

    sent: int
    acked: int
    failed: int
    p50: float
    p99: float
    max: float


def latency_of(records: Sequence[SentRecord], start: float, end: float) -> Latency:
    """The records sent in [start, end): p50 / p99 / max of the acknowledged ones (NaN for none)."""
    chosen = [r for r in records if start <= r.sent_at < end]
    values = sorted(r.latency for r in chosen if r.latency is not None)
    return Latency(
        sent=len(chosen),
        acked=len(values),
        failed=sum(1 for r in chosen if r.error is not None),
        p50=percentile(values, 0.5),
        p99=percentile(values, 0.99),
        max=values[-1] if values else float("nan"),
    )


def throttle_bound(rate: float, seconds: float, *, fetch_bytes: int = REPLICA_FETCH_MAX_BYTES) -> float:
    """The most a throttled catch-up moves in `seconds` at `rate` B/s: the rate, a one-second burst
    (`jbod_core.token_bucket`) and one fetch of debt (docs/decisions.md)."""
    return rate * seconds + rate + fetch_bytes


def steady_rate(samples: Sequence[tuple[float, int]], *, after: float) -> float:
    """(last - first) bytes over seconds of the samples from `after` seconds on, while bytes still
    grow (the plateau once everything is moved does not count); NaN with fewer than 2 such samples."""
    chosen = [(at, size) for at, size in samples if at >= after]
    final = max((size for _, size in samples), default=0)
    growing = [(at, size) for at, size in chosen if size < final]
    if chosen and growing and len(chosen) > len(growing):
        growing.append(next(s for s in chosen if s[1] == final))  # the sample that reached it
    if len(growing) < 2 or growing[-1][0] <= growing[0][0]:
        return float("nan")
    return (growing[-1][1] - growing[0][1]) / (growing[-1][0] - growing[0][0])


_METRIC = re.compile(
    r'^jbod_replication_throttled_bytes_total\{side="(leader|follower)"\} (\S+)$', re.MULTILINE
)


def throttled_bytes(metrics_text: str) -> dict[str, float]:
    """`jbod_replication_throttled_bytes_total` by side from an agent's /metrics page."""
    return {side: float(value) for side, value in _METRIC.findall(metrics_text)}


# -- the paced producer --------------------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class SentRecord:
    """One record of the latency load: when it was handed to librdkafka (time.monotonic()), its
    latency as librdkafka measured it (None until delivered or when it failed), its error."""

    sent_at: float
    latency: float | None = None
    error: str | None = None


class PacedProducer:
    """A confluent-kafka producer (acks=all, idempotent, linger.ms 0) in its own thread, sending a
    `record_bytes` record every 1/`rate` s round-robin over `partitions` (open loop: a stall is
    not made up by a burst) and keeping every record's fate in `records`."""

    def __init__(
        self, config: Mapping[str, Any], topic: str, *, partitions: int, rate: float, record_bytes: int
    ) -> None:
        self.config = {
            **config,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 0,
            "message.timeout.ms": 120_000,
        }
        self.topic = topic
        self.partitions = partitions
        self.interval = 1.0 / rate
        self.value = os.urandom(record_bytes)
        self.records: list[SentRecord] = []
        self.error: BaseException | None = None
        self.unflushed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="paced-producer", daemon=True)

    def __enter__(self) -> PacedProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=180)

    def _run(self) -> None:
        from confluent_kafka import Producer

        try:
            producer = Producer(self.config)

            def delivered(record: SentRecord, err: Any, msg: Any) -> None:
                if err is not None:
                    record.error = str(err)
                else:
                    record.latency = msg.latency()

            next_at = time.monotonic()
            sent = 0
            while not self._stop.is_set():
                now = time.monotonic()
                if now < next_at:
                    producer.poll(min(next_at - now, 0.05))
                    continue
                next_at = max(next_at + self.interval, now)
                record = SentRecord(sent_at=time.monotonic())
                self.records.append(record)
                producer.produce(
                    self.topic,
                    self.value,
                    partition=sent % self.partitions,
                    on_delivery=functools.partial(delivered, record),
                )
                sent += 1
                producer.poll(0)
            self.unflushed = producer.flush(150)
        except BaseException as exc:  # reported by the benchmark
            self.error = exc

    def settled(self, start: float, end: float, *, timeout: float = 150.0) -> list[SentRecord]:
        """The records so far, once every one sent in [start, end) is delivered or failed."""
        wait_until(
            lambda: all(
                r.latency is not None or r.error is not None
                for r in list(self.records)
                if start <= r.sent_at < end
            ),
            timeout=timeout,
            interval=0.05,
            what="the window's records to be delivered",
        )
        return list(self.records)


# -- the cluster -------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Kafka:
    """The cluster as Kafka clients see it: bootstrap servers and the admin's password."""

    bootstrap: str
    password: str

    @property
    def librdkafka(self) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "admin",
            "sasl.password": self.password,
        }

    def tool(self, args: Sequence[str], *, timeout: float = 300.0) -> str:
        """`kafka-reassign-partitions.sh args` as the admin; its stdout (it must exit 0)."""
        user = kafka_tools.ScramUser(name="admin", password=self.password)
        proc = kafka_tools.run_tool(
            "kafka-reassign-partitions.sh",
            args,
            bootstrap=self.bootstrap,
            command_config=user.client_config(),
            timeout=timeout,
        )
        if proc.returncode != 0:
            raise BenchError(
                f"kafka-reassign-partitions.sh {' '.join(args)} exited {proc.returncode}: "
                f"{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
            )
        return proc.stdout


@contextlib.contextmanager
def four_brokers(ws: Workspace) -> Iterator[tuple[AgentCluster, Kafka]]:
    with agent_cluster(ws) as cluster:
        settings = {**AGENT_SETTINGS, **admin_token_setting(cluster), "listeners": LISTENERS}
        for node in BROKERS:
            cluster.add_broker(node, dirs=DIRS_PER_BROKER, settings=settings)
        cluster.wait_unfenced(*BROKERS)
        bootstrap = ",".join(cluster.brokers[n].kafka["SASL_PLAINTEXT"] for n in BROKERS)
        yield cluster, Kafka(bootstrap, cluster.controller.admin_token)


def create(cluster: AgentCluster, name: str, assignment: Sequence[Sequence[int]]) -> None:
    reply = cluster.admin.create_topic(
        name,
        replica_assignment=[list(r) for r in assignment],
        configs={"min.insync.replicas": str(MIN_INSYNC)},
    )
    if reply.get("errorCode", 0) != 0:
        raise BenchError(f"create topic {name}: {reply}")
    wait_until(lambda: cluster.placed(name), timeout=120, what=f"placements of {name}")
    full_isr(cluster, name, timeout=120)


def fill(kafka: Kafka, *, size: int) -> float:
    """`size` bytes of values into `bulk` round-robin, acks=all; the rate in MB/s (10^6 B)."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            **kafka.librdkafka,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 20,
            "batch.size": 1 << 20,
        }
    )
    failed: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    value = os.urandom(BULK_RECORD_BYTES)  # incompressible, as nothing is compressed either
    count = -(-size // BULK_RECORD_BYTES)
    started = time.monotonic()
    for i in range(count):
        while True:
            try:
                producer.produce(BULK, value, partition=i % len(BULK_ASSIGNMENT), on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(600) or failed:
        raise BenchError(f"filling {BULK}: {len(failed)} records failed ({failed[:3]})")
    return count * BULK_RECORD_BYTES / 1e6 / (time.monotonic() - started)


def bulk_bytes(cluster: AgentCluster, node: int) -> int:
    """The bytes of `bulk`'s replicas on broker `node`'s disks, as the broker reports them."""
    return sum(
        int(r["sizeBytes"])
        for d in cluster.log_dirs(node)
        for r in d["replicas"]
        if r["topic"] == BULK and not r.get("future")
    )


def metrics(cluster: AgentCluster, node: int) -> dict[str, float]:
    text = httpx.get(f"{cluster.brokers[node].url}/metrics", timeout=30, trust_env=False).text
    return throttled_bytes(text)


def set_default_rates(cluster: AgentCluster, rate: int | None) -> None:
    """The two replication throttle rates as the cluster default (`kafka-configs.sh --entity-default`);
    None deletes them."""
    from jbod_core.messages import AlterBrokerConfigsRequest, AlterConfigOp

    ops = [
        AlterConfigOp(name=key, op="SET", value=str(rate)) if rate else AlterConfigOp(name=key, op="DELETE")
        for key in ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
    ]
    reply = cluster.admin.alter_broker_configs("", AlterBrokerConfigsRequest(configs=ops))
    if reply.error_code != 0:
        raise BenchError(f"setting the default throttle rates: {reply}")


class SizeSampler:
    """Samples `bulk_bytes` of one broker every `SIZE_SAMPLE_S` in a thread: (monotonic, bytes)."""

    def __init__(self, cluster: AgentCluster, node: int) -> None:
        self.cluster = cluster
        self.node = node
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="size-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(httpx.HTTPError, BenchError):
                self.samples.append((time.monotonic(), bulk_bytes(self.cluster, self.node)))
            self._stop.wait(SIZE_SAMPLE_S)

    def __enter__(self) -> SizeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


@dataclasses.dataclass(frozen=True)
class Reassignment:
    """One reassignment of `bulk` as measured: its window (time.monotonic()), what the tool took,
    the bytes the receiving broker holds at the end, the throttle (None: unthrottled)."""

    label: str
    throttle: int | None
    receiver: int
    start: float
    end: float
    tool_s: float
    moved_bytes: int
    throttled_bytes: dict[str, float]  # the receiver's jbod_replication_throttled_bytes_total by side
    max_bound_ratio: float  # the most a sample got to throttle_bound at its time (NaN unthrottled)
    samples: tuple[tuple[float, int], ...]  # (seconds since the start, the receiver's bytes)
    verify: str

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def rate(self) -> float:
        return self.moved_bytes / self.seconds

    @property
    def steady_rate(self) -> float:
        """Bytes per second after the first `STEADY_AFTER_S` (the burst and the fetches in flight
        when the quota first says "exceeded" are behind); NaN for a window too short."""
        return steady_rate(self.samples, after=STEADY_AFTER_S)


def reassign(
    cluster: AgentCluster,
    kafka: Kafka,
    ws: Workspace,
    *,
    label: str,
    target: Sequence[Sequence[int]],
    receiver: int,
    throttle: int | None,
    rates_ahead_s: float = 0.0,
) -> Reassignment:
    """Move `bulk` to `target` with Kafka's tool, timed by the controller's view (see the module's
    docstring); then `--verify`, which clears the throttles."""
    path = ws.root / f"reassign-{receiver}.json"
    path.write_text(json.dumps(reassignment_json(BULK, target)))
    wanted = [list(r) for r in target]
    args = ["--execute", "--reassignment-json-file", str(path)]
    args += ["--throttle", str(throttle)] if throttle is not None else []
    if throttle is not None and rates_ahead_s:
        set_default_rates(cluster, throttle)
        time.sleep(rates_ahead_s)
    metrics_before = {n: metrics(cluster, n) for n in BROKERS}
    tool: dict[str, Any] = {}

    def run_tool() -> None:
        started = time.monotonic()
        try:
            tool["stdout"] = kafka.tool(args)
        except BaseException as exc:
            tool["error"] = exc
        tool["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=run_tool, name="reassign-tool", daemon=True)
    start: float | None = None
    with SizeSampler(cluster, receiver) as sizes:
        launched = time.monotonic()
        thread.start()
        while True:
            asked = time.monotonic()
            parts = cluster.admin.describe_topic(BULK)["partitions"]
            now = time.monotonic()
            moving = any(p.get("addingReplicas") or p.get("removingReplicas") for p in parts)
            if moving and start is None:
                start = asked  # the earliest the answer can be from: the window errs on the long side
            if not moving and [p["replicas"] for p in parts] == wanted:
                end = now
                break
            if "error" in tool:
                raise BenchError(f"{label}: {tool['error']}")
            if now - launched > REASSIGN_TIMEOUT_S:
                raise BenchError(f"{label}: not complete after {REASSIGN_TIMEOUT_S:.0f} s")
            time.sleep(POLL_S)
        thread.join(timeout=300)
        moved = bulk_bytes(cluster, receiver)
    if "error" in tool:
        raise BenchError(f"{label}: {tool['error']}")
    if start is None:  # done between two polls: the tool's launch is the earliest it can have begun
        start = launched
    metrics_after = {n: metrics(cluster, n) for n in BROKERS}
    ratio = float("nan")
    if throttle is not None:
        ratio = max(
            (
                size / throttle_bound(throttle, max(0.0, at - start))
                for at, size in sizes.samples
                if at >= start
            ),
            default=0.0,
        )
    verify = kafka.tool(["--verify", "--reassignment-json-file", str(path)])
    if throttle is not None and rates_ahead_s:
        set_default_rates(cluster, None)
    return Reassignment(
        label=label,
        throttle=throttle,
        receiver=receiver,
        start=start,
        end=end,
        tool_s=float(tool.get("seconds", float("nan"))),
        moved_bytes=moved,
        throttled_bytes={
            side: sum(metrics_after[n].get(side, 0.0) - metrics_before[n].get(side, 0.0) for n in BROKERS)
            for side in ("leader", "follower")
        },
        max_bound_ratio=ratio,
        samples=tuple((round(at - start, 3), size) for at, size in sizes.samples),
        verify=verify,
    )


# -- the run -----------------------------------------------------------------------------------------


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


@dataclasses.dataclass(frozen=True)
class Row:
    """One line of the table: a window of the latency load, and the reassignment in it if any."""

    label: str
    seconds: float
    latency: Latency
    load_before: str
    load_after: str
    reassignment: Reassignment | None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "label": self.label,
            "seconds": self.seconds,
            "latency": dataclasses.asdict(self.latency),
            "load_average_before": self.load_before,
            "load_average_after": self.load_after,
        }
        r = self.reassignment
        if r is not None:
            out["reassignment"] = {
                "throttle_bytes_per_second": r.throttle,
                "receiver": r.receiver,
                "seconds": r.seconds,
                "tool_seconds": r.tool_s,
                "moved_bytes": r.moved_bytes,
                "rate_bytes_per_second": r.rate,
                "rate_over_throttle": r.rate / r.throttle if r.throttle else None,
                "steady_rate_bytes_per_second": None if r.steady_rate != r.steady_rate else r.steady_rate,
                "max_bytes_over_bound": None if r.throttle is None else r.max_bound_ratio,
                "throttled_bytes": r.throttled_bytes,
                "completed": "is completed" in r.verify and "in progress" not in r.verify,
                "receiver_bytes_samples": [list(s) for s in r.samples],
            }
        return out


def measured(
    producer: PacedProducer, label: str, action: Callable[[], tuple[float, float, Reassignment | None]]
) -> Row:
    load_before = load_average()
    start, end, reassignment = action()
    records = producer.settled(start, end)
    row = Row(label, end - start, latency_of(records, start, end), load_before, load_average(), reassignment)
    log(f"  {describe(row)}")
    return row


def describe(row: Row) -> str:
    lat = row.latency
    text = (
        f"{row.label}: {row.seconds:.1f} s, {lat.sent:,} records sent, {lat.acked:,} acknowledged, "
        f"{lat.failed} failed; p50 {lat.p50 * 1000:.1f} ms, p99 {lat.p99 * 1000:.1f} ms, max {lat.max * 1000:.1f} ms"
    )
    r = row.reassignment
    if r is not None:
        throttle = f" against {r.throttle / 1e6:.2f} MB/s ({r.rate / r.throttle:.2f}x)" if r.throttle else ""
        text += (
            f"; moved {r.moved_bytes / 1e6:.1f} MB to broker {r.receiver} at {r.rate / 1e6:.2f} MB/s{throttle}, "
            f"throttled bytes {r.throttled_bytes}"
        )
    return f"{text}; load average {row.load_before} -> {row.load_after}"


def run(args: argparse.Namespace) -> list[Figure]:
    size = int((args.size or (QUICK_SIZE_MB if args.quick else DEFAULT_SIZE_MB)) * 1e6)
    baseline_s = args.baseline or (QUICK_BASELINE_S if args.quick else DEFAULT_BASELINE_S)
    throttle = args.throttle
    kafka_tools.default_install()
    rows: list[Row] = []
    with Workspace(keep=args.keep) as ws:
        free = shutil.disk_usage(ws.root).free
        if free < 5 * size + (1 << 30):
            raise SystemExit(f"reassign_throttle needs {5 * size / 1e6:,.0f} MB free under {ws.root}")
        with four_brokers(ws) as (cluster, kafka):
            create(cluster, BULK, BULK_ASSIGNMENT)
            create(cluster, LATENCY, LATENCY_ASSIGNMENT)
            log(
                f"  cluster: 4 agents x {DIRS_PER_BROKER} plain dirs under {ws.root}; {BULK} {list(BULK_ASSIGNMENT)}, "
                f"{LATENCY} {list(LATENCY_ASSIGNMENT)}, min.insync.replicas {MIN_INSYNC} (load average {load_average()})"
            )
            rate = fill(kafka, size=size)
            full_isr(cluster, BULK, timeout=600)
            log(
                f"  filled {BULK} with {size / 1e6:,.0f} MB at {rate:.1f} MB/s; on broker {SOURCE}: "
                f"{bulk_bytes(cluster, SOURCE) / 1e6:,.1f} MB (load average {load_average()})"
            )
            moved_to = moved_assignment(BULK_ASSIGNMENT, source=SOURCE, target=TARGET)
            with PacedProducer(
                kafka.librdkafka,
                LATENCY,
                partitions=len(LATENCY_ASSIGNMENT),
                rate=args.rate,
                record_bytes=LATENCY_RECORD_BYTES,
            ) as producer:
                time.sleep(WARMUP_S)

                def baseline() -> tuple[float, float, None]:
                    start = time.monotonic()
                    time.sleep(baseline_s)
                    return start, time.monotonic(), None

                def moving(
                    label: str, target: Sequence[Sequence[int]], receiver: int, rate: int | None
                ) -> Callable[[], tuple[float, float, Reassignment]]:
                    def action() -> tuple[float, float, Reassignment]:
                        r = reassign(
                            cluster,
                            kafka,
                            ws,
                            label=label,
                            target=target,
                            receiver=receiver,
                            throttle=rate,
                            rates_ahead_s=args.rates_ahead,
                        )
                        return r.start, r.end, r

                    return action

                rows.append(measured(producer, "no reassignment", baseline))
                rows.append(
                    measured(
                        producer,
                        f"reassignment throttled at {throttle / 1e6:g} MB/s",
                        moving("throttled", moved_to, TARGET, throttle),
                    )
                )
                if not args.skip_unthrottled:
                    time.sleep(WARMUP_S)
                    rows.append(
                        measured(
                            producer,
                            "reassignment unthrottled",
                            moving("unthrottled", BULK_ASSIGNMENT, SOURCE, None),
                        )
                    )
            if producer.error is not None:
                raise BenchError(f"the latency producer failed: {producer.error!r}")
            records = producer.records
            total = {
                "sent": len(records),
                "acked": sum(1 for r in records if r.latency is not None),
                "failed": sum(1 for r in records if r.error is not None),
                "unflushed": producer.unflushed,
            }
    report(rows, total=total, size=size, rate=args.rate)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "parameters": {
                        "size_bytes": size,
                        "throttle_bytes_per_second": throttle,
                        "baseline_s": baseline_s,
                        "latency_records_per_second": args.rate,
                        "latency_record_bytes": LATENCY_RECORD_BYTES,
                        "brokers": len(BROKERS),
                        "cpus": os.cpu_count(),
                        "kafka_tools": kafka_tools.KAFKA_VERSION,
                    },
                    "rows": [r.as_json() for r in rows],
                    "latency_records": total,
                },
                indent=2,
            )
        )
    return figures(rows)


def report(rows: Sequence[Row], *, total: Mapping[str, int], size: int, rate: int) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=(
            f"produce latency (acks=all, idempotent, {rate} records/s of {LATENCY_RECORD_BYTES} B to {LATENCY}, "
            f"leaders on brokers 1-3, a follower on 4) while {size / 1e6:,.0f} MB of {BULK} move from broker "
            f"{SOURCE} to {TARGET}"
        )
    )
    for header in (
        "window",
        "seconds",
        "records (acked/failed)",
        "p50 ms",
        "p99 ms",
        "max ms",
        "moved MB",
        "rate MB/s",
        "rate / throttle",
        f"after {STEADY_AFTER_S:.0f} s",
        "load avg before → after",
    ):
        table.add_column(
            header, justify="left" if header in ("window", "load avg before → after") else "right"
        )
    for row in rows:
        lat, r = row.latency, row.reassignment
        table.add_row(
            row.label,
            f"{row.seconds:.1f}",
            f"{lat.sent:,} ({lat.acked:,}/{lat.failed})",
            f"{lat.p50 * 1000:.1f}",
            f"{lat.p99 * 1000:.1f}",
            f"{lat.max * 1000:.1f}",
            "-" if r is None else f"{r.moved_bytes / 1e6:.1f}",
            "-" if r is None else f"{r.rate / 1e6:.2f}",
            "-" if r is None or r.throttle is None else f"{r.rate / r.throttle:.2f}",
            "-"
            if r is None or r.throttle is None or r.steady_rate != r.steady_rate
            else f"{r.steady_rate / r.throttle:.2f}",
            f"{row.load_before} → {row.load_after}",
        )
    console = Console(width=200)
    console.print()
    console.print(table)
    for row in rows:
        r = row.reassignment
        if r is not None and r.throttle is not None:
            console.print(
                f"{row.label}: complete in {r.seconds:.1f} s (at the throttle alone: {r.moved_bytes / r.throttle:.1f} s); "
                f"the most broker {r.receiver} held at any sample was {r.max_bound_ratio:.2f}x the bound "
                f"(throttle x elapsed + 1 s burst + one fetch); its throttled bytes: "
                f"{', '.join(f'{k} {v / 1e6:.1f} MB' for k, v in sorted(r.throttled_bytes.items()))}"
            )
    console.print(
        f"latency records over the whole run: {total['sent']:,} sent, {total['acked']:,} acknowledged, "
        f"{total['failed']} failed, {total['unflushed']} left unflushed; machine: {os.cpu_count()} cores, "
        f"load average {load_average()}"
    )


def figures(rows: Sequence[Row]) -> list[Figure]:
    out = []
    baseline = rows[0].latency
    for row in rows:
        out.append(
            Figure(
                f"produce p99, {row.label}"
                + ("" if row.reassignment is None else f" (baseline {baseline.p99 * 1000:.1f} ms)"),
                row.latency.p99,
                "s",
                float("inf"),
            )
        )
        r = row.reassignment
        if r is not None and r.throttle is not None:
            out.append(
                Figure(
                    f"reassignment rate, throttle {r.throttle / 1e6:g} MB/s, {r.moved_bytes / 1e6:.0f} MB in {r.seconds:.1f} s "
                    "(goal: within the throttle's bound)",
                    r.rate / 1e6,
                    "MB/s",
                    throttle_bound(r.throttle, r.seconds) / r.seconds / 1e6,
                )
            )
    return out


def main() -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "--size",
        type=float,
        default=0,
        help=f"MB (10^6 B) of data to move (default {DEFAULT_SIZE_MB}, quick {QUICK_SIZE_MB})",
    )
    parser.add_argument(
        "--throttle",
        type=int,
        default=DEFAULT_THROTTLE,
        help=f"the reassignment's throttle in B/s (default {DEFAULT_THROTTLE:,})",
    )
    parser.add_argument(
        "--baseline",
        type=float,
        default=0,
        help=f"seconds of the no-reassignment window (default {DEFAULT_BASELINE_S:.0f}, quick {QUICK_BASELINE_S:.0f})",
    )
    parser.add_argument(
        "--rate", type=int, default=DEFAULT_RATE, help=f"latency records per second (default {DEFAULT_RATE})"
    )
    parser.add_argument(
        "--rates-ahead",
        type=float,
        default=0,
        help="set the throttle rates as the cluster default this many seconds before the tool runs "
        "(default 0: only the tool sets them, as a user runs it)",
    )
    parser.add_argument("--skip-unthrottled", action="store_true", help="no unthrottled reassignment row")
    parser.add_argument("--json", type=Path, help="also write every row's figures here")
    return bench_main("Produce latency under a throttled reassignment", parser, run)


if __name__ == "__main__":
    raise SystemExit(main())
