"""What TLS costs (issue 25): SASL_SSL against SASL_PLAINTEXT on the same machine, in one run.

Two clusters of ours, never running at the same time (each is started for a run and stopped
after it), alike but for TLS:
* `plaintext`: one `jbod-controller`, 3 `jbod-agent` brokers with 2 plain log dirs each,
  listeners `http://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0`;
* `tls`: the same with `https://127.0.0.1:0,SASL_SSL://127.0.0.1:0` (so the followers' replica
  fetches are https too), a CA and per-broker certificates from `jbod_runtime.certificates`
  (ECDSA P-256), TLS 1.2+ as the agent offers it (TLS 1.3 is negotiated).
The controller is plain http in both (it is not on the data path).

A run of one cluster: create a topic (6 partitions, RF 3, `min.insync.replicas=2`), wait for its
full ISRs, then with librdkafka (confluent-kafka, in this process) as `admin` over SCRAM-SHA-512:
1. produce N records of 1 KiB, acks=all, idempotent, `linger.ms=5`, `batch.size=262144`;
2. consume them all back in a fresh group.
Around each phase: MB/s (10^6 bytes of record values per second of the phase) and the 3 brokers'
CPU seconds (utime + stime from /proc) per MB. Runs alternate (plaintext, tls, plaintext, ...;
`--runs` of each) and the table gives medians and the TLS/plaintext ratios. The 1-minute load
average is printed at the start and the end. Figures, not assertions.

    python -m bench.tls_throughput [--quick] [--records N] [--runs N]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import statistics
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.common import (
    Figure,
    Workspace,
    admin_token_setting,
    agent_cluster,
    base_parser,
    bench_main,
    cpu_seconds,
    log,
    machine_load,
    print_table,
    wait_until,
)
from jbod_runtime import certificates

RECORD_BYTES = 1024
PARTITIONS = 6
RF = 3
BROKERS = (1, 2, 3)
DIRS_PER_BROKER = 2
SYSTEMS = ("plaintext", "tls")
DEFAULT_RECORDS = 200_000
QUICK_RECORDS = 5_000
LISTENERS = {
    "plaintext": "http://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "tls": "https://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
}
PROTOCOL = {"plaintext": "SASL_PLAINTEXT", "tls": "SASL_SSL"}


@dataclasses.dataclass(frozen=True)
class Phase:
    """One phase of one run: its MB/s and the brokers' CPU seconds per MB."""

    system: str
    phase: str  # "produce" | "consume"
    megabytes: float
    seconds: float
    broker_cpu_s: float

    @property
    def mb_per_s(self) -> float:
        return self.megabytes / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_s_per_mb(self) -> float:
        return self.broker_cpu_s / self.megabytes if self.megabytes > 0 else 0.0


@dataclasses.dataclass(frozen=True)
class Peer:
    system: str
    config: dict[str, Any]  # librdkafka's
    broker_pids: tuple[int, ...]
    admin: Any  # the controller's ControllerClient


def write_pki(directory: Path) -> tuple[Path, dict[int, Path]]:
    """A CA bundle and a keystore per broker (SANs 127.0.0.1, localhost)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = certificates.make_ca("bench CA")
    ca_file = directory / "ca.pem"
    ca_file.write_bytes(ca.cert_pem)
    keystores = {}
    for node in BROKERS:
        leaf = certificates.issue(ca, f"broker-{node}", dns_names=["localhost"], ip_addresses=["127.0.0.1"])
        keystores[node] = directory / f"broker-{node}.pem"
        keystores[node].write_bytes(leaf.keystore_pem([ca.cert_pem]))
    return ca_file, keystores


@contextlib.contextmanager
def start_cluster(system: str, ws: Workspace) -> Iterator[Peer]:
    with agent_cluster(ws, f"controller-{time.monotonic_ns()}") as cluster:
        ca_file, keystores = write_pki(ws.root / f"pki-{time.monotonic_ns()}")
        for node in BROKERS:
            settings = {**admin_token_setting(cluster), "listeners": LISTENERS[system]}
            if system == "tls":
                settings |= {
                    "ssl.keystore.location": str(keystores[node]),
                    "ssl.truststore.location": str(ca_file),
                }
            cluster.add_broker(node, dirs=DIRS_PER_BROKER, settings=settings)
        cluster.wait_unfenced(*BROKERS)
        protocol = PROTOCOL[system]
        config: dict[str, Any] = {
            "bootstrap.servers": ",".join(cluster.brokers[n].kafka[protocol] for n in BROKERS),
            "security.protocol": protocol,
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "admin",
            "sasl.password": cluster.controller.admin_token,
        }
        if system == "tls":
            config["ssl.ca.location"] = str(ca_file)
        yield Peer(system, config, tuple(cluster.pid(n) for n in BROKERS), cluster.admin)
    for path in [*ws.root.glob("broker-*"), *ws.root.glob("controller-*"), *ws.root.glob("pki-*")]:
        ws.remove(path.name)


def _broker_cpu(peer: Peer) -> float:
    return sum(cpu_seconds(pid) for pid in peer.broker_pids)


def create_topic(peer: Peer, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    reply = peer.admin.create_topic(
        topic, partitions=PARTITIONS, replication_factor=RF, configs={"min.insync.replicas": "2"}
    )
    if reply["errorCode"] != 0:
        raise RuntimeError(f"{peer.system}: cannot create {topic}: {reply}")
    admin = AdminClient(peer.config)

    def full() -> bool:
        found = admin.list_topics(topic=topic, timeout=30).topics.get(topic)
        return bool(
            found is not None
            and found.error is None
            and len(found.partitions) == PARTITIONS
            and all(p.leader >= 0 and set(p.isrs) == set(p.replicas) for p in found.partitions.values())
        )

    wait_until(full, timeout=120, interval=0.5, what=f"full ISRs of {topic}")


def produce(peer: Peer, topic: str, records: int) -> Phase:
    from confluent_kafka import Producer

    producer = Producer(
        {
            **peer.config,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.size": 262144,
            "queue.buffering.max.kbytes": 65536,
        }
    )
    value = b"x" * RECORD_BYTES
    failed: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    cpu0, t0 = _broker_cpu(peer), time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value=value, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    left = producer.flush(300)
    seconds, cpu = time.perf_counter() - t0, _broker_cpu(peer) - cpu0
    if left or failed:
        raise RuntimeError(
            f"{peer.system}: {left} records unacknowledged, {len(failed)} failed: {failed[:3]}"
        )
    return Phase(peer.system, "produce", records * RECORD_BYTES / 1e6, seconds, cpu)


def consume(peer: Peer, topic: str, records: int) -> Phase:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            **peer.config,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "fetch.max.bytes": 52428800,
        }
    )
    consumer.subscribe([topic])
    first = None
    while first is None:  # the group join is not part of the measured phase
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            first = msg
    cpu0, t0 = _broker_cpu(peer), time.perf_counter()
    seen, deadline = 1, time.monotonic() + 600
    while seen < records and time.monotonic() < deadline:
        for msg in consumer.consume(10_000, 1.0):
            if msg.error() is None:
                seen += 1
    seconds, cpu = time.perf_counter() - t0, _broker_cpu(peer) - cpu0
    consumer.close()
    if seen < records:
        raise RuntimeError(f"{peer.system}: consumed {seen} of {records} records")
    return Phase(peer.system, "consume", (records - 1) * RECORD_BYTES / 1e6, seconds, cpu)


def run_once(system: str, ws: Workspace, records: int) -> list[Phase]:
    with start_cluster(system, ws) as peer:
        topic = f"tls-bench-{uuid.uuid4().hex[:6]}"
        create_topic(peer, topic)
        produced = produce(peer, topic, records)
        consumed = consume(peer, topic, records)
    log(
        f"{system}: produce {produced.mb_per_s:.1f} MB/s ({produced.cpu_s_per_mb * 1000:.1f} broker CPU ms/MB), "
        f"consume {consumed.mb_per_s:.1f} MB/s ({consumed.cpu_s_per_mb * 1000:.1f} broker CPU ms/MB)"
    )
    return [produced, consumed]


def summary(phases: list[Phase]) -> dict[tuple[str, str], tuple[float, float]]:
    """(system, phase) -> (median MB/s, median broker CPU s per MB)."""
    grouped: dict[tuple[str, str], list[Phase]] = {}
    for phase in phases:
        grouped.setdefault((phase.system, phase.phase), []).append(phase)
    return {
        key: (statistics.median(p.mb_per_s for p in runs), statistics.median(p.cpu_s_per_mb for p in runs))
        for key, runs in grouped.items()
    }


def run(args: argparse.Namespace) -> list[Figure]:
    records = QUICK_RECORDS if args.quick else args.records
    runs = 1 if args.quick else args.runs
    phases: list[Phase] = []
    with Workspace(keep=args.keep) as ws:
        for n in range(runs):
            for system in SYSTEMS:
                log(f"run {n + 1}/{runs}: {system}, {records} records of {RECORD_BYTES} B")
                phases += run_once(system, ws, records)
    table = summary(phases)
    rows = []
    figures = []
    for phase in ("produce", "consume"):
        plain, tls = table[("plaintext", phase)], table[("tls", phase)]
        rows.append(
            [
                phase,
                f"{plain[0]:.1f}",
                f"{tls[0]:.1f}",
                f"{tls[0] / plain[0]:.2f}x" if plain[0] else "-",
                f"{plain[1] * 1000:.1f}",
                f"{tls[1] * 1000:.1f}",
                f"{tls[1] / plain[1]:.2f}x" if plain[1] else "-",
            ]
        )
        figures.append(
            Figure(f"{phase} MB/s, SASL_SSL / SASL_PLAINTEXT", tls[0] / plain[0], "x", float("inf"))
        )
        figures.append(
            Figure(
                f"{phase} broker CPU per MB, SASL_SSL / SASL_PLAINTEXT", tls[1] / plain[1], "x", float("inf")
            )
        )
    print(f"\nMedians of {runs} run(s) each, {records} records of {RECORD_BYTES} B ({machine_load()}):")
    print_table(
        [
            "phase",
            "SASL_PLAINTEXT MB/s",
            "SASL_SSL MB/s",
            "ratio",
            "plaintext broker CPU ms/MB",
            "TLS broker CPU ms/MB",
            "ratio",
        ],
        rows,
    )
    return figures


def main() -> int:
    parser = base_parser("SASL_SSL vs SASL_PLAINTEXT: throughput and broker CPU per MB")
    parser.add_argument("--records", type=int, default=DEFAULT_RECORDS, help="records per run")
    parser.add_argument("--runs", type=int, default=3, help="runs of each cluster (alternating)")
    return bench_main("TLS throughput", parser, run)


if __name__ == "__main__":
    raise SystemExit(main())
