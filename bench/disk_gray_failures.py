"""Benchmark: a slow disk and a hung disk, found or not, ours side by side with Apache Kafka 4.3.1
(issue 35).

Each system runs 3 brokers; broker 1 has 2 log dirs, the first on a loop-mounted ext4 volume
(`tests.fs.loop_ext4`, needs root). A topic of 6 partitions, RF 3, replicas [1, 2, 3] / [1, 3, 2]
(broker 1 leads all 6; each system spreads its replicas over broker 1's two dirs). An acks=all
producer writes 1 KiB records to every partition throughout. Then the kernel's block throttling
(cgroup v1 blkio limits on broker 1's process, `tests.fs.BlkioThrottle`) makes that volume

1. **slow**: 1 write IOPS (an fsync takes about a second): measured from the throttle to every
   partition in that dir led by another broker, within a 60 s window;
2. **hung** (after the slow one is released and leadership is back): 1 byte per second, so a
   write never completes: measured the same way.

Ours runs with its defaults (probe every 1 s, `log.dir.probe.timeout.ms` 5 s) but
`log.dir.stall.timeout.ms` 100 (pulses every 50 ms; the default is 1000) and
`log.dir.slow.threshold.ms` 500 (the default 1000 ms is
at the edge of a 1-IOPS disk). Besides leadership, ours is timed to the moment broker 1 shows the
dir stalled (polled every 10 ms), and the broker says how long the dir had answered nothing and
how long the write it left unanswered had waited when it found the stall. Kafka has neither
slow-disk nor hung-disk detection: its figures are "not found in the window". Note that
only broker 1's own synchronous writes and fsyncs are throttled (cgroup v1 does not throttle the
kernel's writeback), and Kafka does not fsync appends, so its produce path may not even slow
down; ours fsyncs every `log.flush.interval.ms` and probes each dir.

The produce p99 during a disk migration (issue 35's other figure) is `bench.disk_migration`'s.

    python -m bench.disk_gray_failures [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import (
    BenchError,
    Figure,
    Workspace,
    admin_token_setting,
    agent_cluster,
    base_parser,
    bench_main,
    can_loop_mount,
    kafka_config,
    log,
    print_table,
    wait_until,
)

TOPIC = "gray"
PARTITIONS = 6
WINDOW_S = 60.0
LISTENERS = "http://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"


@dataclass
class System:
    """One running cluster: its librdkafka config, broker 1's pid, the throttled volume's device,
    and how to tell which partitions broker 1 holds in that volume."""

    name: str
    config: dict[str, Any]
    pid: int
    device: str
    in_volume: Callable[[], list[int]]
    # ours: the volume's dir as broker 1 shows it (`stalls`, `stallFoundAfterMs`); Kafka: None
    dir_view: Callable[[], dict[str, Any]] | None = None


@contextlib.contextmanager
def ours(ws: Workspace) -> Iterator[System]:
    with agent_cluster(ws, f"controller-{time.monotonic_ns()}") as cluster:
        settings = {
            **admin_token_setting(cluster),
            "listeners": LISTENERS,
            "log.dir.slow.threshold.ms": "500",
            "log.dir.stall.timeout.ms": "100",
        }
        for node in (1, 2, 3):
            cluster.add_broker(node, dirs=2, loop=True, size_mb=256, settings=settings)
        cluster.wait_unfenced(1, 2, 3)
        config = kafka_config(cluster)
        _create(config)
        wait_until(lambda: cluster.placed(TOPIC), timeout=60, what="the topic placed")
        volume = cluster.mounts[(1, 0)]
        directory = next(d["directoryId"] for d in cluster.log_dirs(1) if d["path"] == str(volume.path))

        def in_volume() -> list[int]:
            parts = cluster.admin.describe_topic(TOPIC)["partitions"]
            return [
                p["partitionIndex"] for p in parts if p["directories"][p["replicas"].index(1)] == directory
            ]

        def dir_view() -> dict[str, Any]:
            return next(d for d in cluster.log_dirs(1) if d["directoryId"] == directory)

        yield System("ours", config, cluster.pid(1), volume.device, in_volume, dir_view)


@contextlib.contextmanager
def kafka(ws: Workspace) -> Iterator[System]:
    from e2e import kafka_tools
    from tests.fs import loop_ext4

    user = kafka_tools.ScramUser()
    work = ws.root / f"kafka-{time.monotonic_ns()}"
    with contextlib.ExitStack() as stack:
        nodes = kafka_tools.KafkaNodesCluster(
            kafka_tools.default_install(), brokers=3, log_dir_count=2, scram=user, work_dir=work
        )
        volume = stack.enter_context(loop_ext4(nodes.log_dirs(1)[0], size_mb=256))
        (Path(volume.path) / "lost+found").rmdir()  # Kafka refuses a log dir holding it
        stack.enter_context(nodes)
        config = {
            "bootstrap.servers": nodes.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user.name,
            "sasl.password": user.password,
        }
        _create(config)

        def in_volume() -> list[int]:
            return sorted(int(p.name.rsplit("-", 1)[1]) for p in Path(volume.path).glob(f"{TOPIC}-*"))

        wait_until(lambda: len(in_volume()) > 0, timeout=60, what="replicas in Kafka's first dir")
        yield System("kafka", config, nodes.pids[1], volume.device, in_volume)
    ws.remove(work.name)


def _create(config: dict[str, Any]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # re-exported by the package

    admin = AdminClient(config)
    assignment = [[1, 2, 3] if p % 2 == 0 else [1, 3, 2] for p in range(PARTITIONS)]
    admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replica_assignment=assignment)])[
        TOPIC
    ].result(60)

    def led_by_1() -> bool:
        topic = admin.list_topics(TOPIC, timeout=10).topics[TOPIC]
        return len(topic.partitions) == PARTITIONS and all(p.leader == 1 for p in topic.partitions.values())

    wait_until(led_by_1, timeout=60, what="broker 1 leading every partition")


class Load:
    """An acks=all producer writing 1 KiB records round the partitions until stopped."""

    def __init__(self, config: dict[str, Any]) -> None:
        from confluent_kafka import Producer

        self.producer = Producer({**config, "acks": "all", "linger.ms": 5})
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        while not self.stopped.is_set():
            with contextlib.suppress(BufferError):
                self.producer.produce(TOPIC, b"r" * 1024, partition=n % PARTITIONS)
                n += 1
            self.producer.poll(0.005)

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(10)
        self.producer.flush(10)


def _time_to_move(system: System, partitions: list[int]) -> tuple[float | None, float | None]:
    """(seconds until none of `partitions` is led by broker 1, seconds until broker 1 shows the
    volume's dir stalled), each None if not within `WINDOW_S`; the stall is not looked for once
    leadership moved without it (Kafka, or ours finding a slow disk by its latency first)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(system.config)
    stalls = None if system.dir_view is None else system.dir_view()["stalls"]
    moved: float | None = None
    stalled: float | None = None
    started = time.monotonic()
    while time.monotonic() - started < WINDOW_S:
        if stalled is None and system.dir_view is not None and system.dir_view()["stalls"] != stalls:
            stalled = time.monotonic() - started
        with contextlib.suppress(Exception):
            topic = admin.list_topics(TOPIC, timeout=5).topics[TOPIC]
            if moved is None and all(topic.partitions[p].leader not in (1, -1) for p in partitions):
                moved = time.monotonic() - started
        if moved is not None and (stalled is not None or system.dir_view is None):
            break
        time.sleep(0.01)
    return moved, stalled


def measure(system: System) -> dict[str, float | None]:
    from tests.fs import BlkioThrottle

    partitions = system.in_volume()
    if not partitions:
        raise BenchError(f"{system.name}: broker 1 holds no partition in the throttled volume")
    found: dict[str, float | None] = {}
    throttle = BlkioThrottle(system.pid, f"jbod-bench-{uuid.uuid4().hex[:8]}")
    try:
        with Load(system.config):
            time.sleep(2)  # the load runs, the disk still healthy
            throttle.slow(system.device, iops=1)
            found["slow"], found["slow_stalled"] = _time_to_move(system, partitions)
            throttle.release(system.device)
            log(f"  {system.name}: slow disk -> leadership moved: {_text(found['slow'])}")
            if found["slow"] is not None:
                from confluent_kafka.admin import AdminClient

                admin = AdminClient(system.config)
                wait_until(
                    lambda: (
                        all(
                            admin.list_topics(TOPIC, timeout=5).topics[TOPIC].partitions[p].leader == 1
                            for p in partitions
                        )
                        or _elect_preferred(admin)
                    ),
                    timeout=120,
                    interval=1.0,
                    what="leadership back on broker 1",
                )
            if system.dir_view is not None:  # released once its pulses answer promptly for 10 s
                view = system.dir_view
                wait_until(lambda: not view()["stalled"], timeout=60, what="the dir no longer stalled")
            throttle.hang(system.device)
            found["hung"], found["hung_stalled"] = _time_to_move(system, partitions)
            if system.dir_view is not None:
                seen = system.dir_view()
                found["hung_silent"] = (seen.get("stallFoundAfterMs") or 0) / 1000
                found["hung_unanswered"] = (seen.get("stallUnansweredMs") or 0) / 1000
            log(f"  {system.name}: hung disk -> leadership moved: {_text(found['hung'])}")
    finally:
        throttle.close()
    return found


def _elect_preferred(admin: Any) -> bool:
    """Ask for preferred leaders (the automatic balance waits 300 s); never done by itself."""
    from confluent_kafka import ElectionType, TopicPartition

    with contextlib.suppress(Exception):
        admin.elect_leaders(
            ElectionType.PREFERRED, [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        ).result(10)
    return False


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1000:.0f} ms"


def _text(seconds: float | None) -> str:
    return f"{seconds:.2f} s" if seconds is not None else f"not found in {WINDOW_S:.0f} s"


def run(args: argparse.Namespace) -> list[Figure]:
    if not can_loop_mount():
        raise SystemExit("disk_gray_failures needs root and mkfs.ext4/losetup/mount (loop-mounted volumes)")
    results: dict[str, dict[str, float | None]] = {}
    with Workspace(keep=args.keep) as ws:
        for name, start in (("ours", ours), ("kafka", kafka)):
            with start(ws) as system:
                results[name] = measure(system)
    ours_found = results["ours"]
    rows = [
        [label, _ms(ours_found.get(f"{key}_stalled")), _text(ours_found[key]), _text(results["kafka"][key])]
        for key, label in (("slow", "slow disk (1 write IOPS)"), ("hung", "hung disk (1 byte/s)"))
    ]
    print()
    print_table(
        ["broker 1's volume made", "ours: found (stalled)", "ours: leadership moved", "Apache Kafka 4.3.1"],
        rows,
    )
    silent, unanswered = ours_found.get("hung_silent"), ours_found.get("hung_unanswered")
    print(
        f"ours: the hung dir was found stalled {_ms(unanswered)} after the write it left unanswered, "
        f"{_ms(silent)} after its last answer"
    )
    figures = [
        Figure(
            name="ours: hung disk → found stalled after the first write it left unanswered",
            measured=WINDOW_S * 1000 if unanswered is None else unanswered * 1000,
            unit="ms",
            goal=100.0,
            detail=f"{_ms(silent)} after its last answer (log.dir.stall.timeout.ms 100); "
            "Apache Kafka 4.3.1 does not find it",
        )
    ]
    for key, goal, label in (("slow", 10.0, "slow disk"), ("hung", 10.0, "hung disk")):
        value = results["ours"][key]
        figures.append(
            Figure(
                name=f"ours: {label} → its leaderships moved",
                measured=WINDOW_S if value is None else value,
                unit="s",
                goal=goal,
                detail=f"Apache Kafka 4.3.1: {_text(results['kafka'][key])}",
            )
        )
    return figures


def main() -> int:
    return bench_main(
        "disk gray failures (slow and hung disks) vs Apache Kafka 4.3.1", base_parser(__doc__ or ""), run
    )


if __name__ == "__main__":
    raise SystemExit(main())
