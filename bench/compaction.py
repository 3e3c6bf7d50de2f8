"""Log compaction against Apache Kafka 4.3.1 (issue 32): the cleaner's throughput per disk, produce latency while it cleans, and the coordinator's load time of `__consumer_offsets`.

Both systems run at the same time on this machine for the whole run (same load), ONE broker
each, 2 log dirs each (plain directories on the machine's one disk), every topic RF 1: the
cleaner is a per-broker, per-dir thing, so one broker shows it without replication traffic in the
way, and a single broker is the only setup where `__consumer_offsets` load time is one process's
work on both sides.
* ours: one `jbod-controller` and one `jbod-agent` (`LocalBroker`), SASL_PLAINTEXT;
* Kafka: `e2e.kafka_tools.KafkaCluster`, one combined KRaft node (its JVM as
  `kafka-server-start.sh` starts it, `-Xmx1G`), SASL_PLAINTEXT SCRAM-SHA-512.
Cleaner settings made equal: `log.cleaner.backoff.ms` `BACKOFF_MS` on both (lowered from both
defaults' 15000 so the run waits less for a round; it only decides when a cleaning starts), a
cleaner thread per dir (ours has one per dir; Kafka gets `log.cleaner.threads=2`) with 128 MiB of
dedupe buffer each (ours counts `log.cleaner.dedupe.buffer.size` per dir, Kafka per broker: 256
MiB), no I/O throttle (both defaults), `offsets.topic.num.partitions=1`.

1. Cleaner throughput per disk. A topic `compacted` (`cleanup.policy=compact`, 2 partitions,
   created first so each lands in its own dir, `segment.bytes` `SEGMENT_BYTES`) is filled with
   keyed 1 KiB records (uncompressed values; keys drawn at random from 10 % as many distinct keys
   as records) while `min.compaction.lag.ms` is one day (nothing is cleanable yet, the cleaners
   run idle). Then `segment.ms` is set to 1 s and one record more per partition rolls the active
   segment, so every byte of the fill is in a closed, cleanable segment ("dirty bytes": the sizes
   of a partition's segment files but the active one, on disk before the cleaning). The cleaning
   starts when `min.compaction.lag.ms` is set to 0 on both (IncrementalAlterConfigs), each
   system in turn (never both at once: the two cleaners would share the 2 cores), after a
   `sync` (so the fills' writeback is not in a measured window). Throughput =
   dirty MiB / the cleaning's seconds, per partition (= per dir); both dirs clean at the same time.
   * Kafka: the cleaner thread's own report (at INFO in the server's log, logger
     `org.apache.kafka.storage.internals.log.LogCleaner$CleanerThread` in 4.3): "X MB of log processed in T seconds (R MB/sec)", the whole cleaning (key map
     and rewrite, swap included), its MB being 2^20 bytes of segments rewritten; R is taken as
     printed, its start as the line's time - X / R.
   * ours: `GET /v1/log-dirs` is polled every `POLL_S`; the start is when the last poll that
     showed the dir's cleaner not busy with the partition was sent, before the unbroken run of
     polls that show it busy up to the one that shows the run counted (the earliest it can have
     started; a round that finds nothing to clean shows "busy" for a moment, never in that run),
     the end the agent's INFO line "<partition>: cleaned up to offset N: ..." (written after the
     swap), to the millisecond.
2. Produce latency while the cleaners run. A paced producer process (`bench.produce_throughput`'s
   worker: librdkafka, acks=all, idempotent, `linger.ms` 0, 1 KiB records) sends
   `PACED_RECORDS_S` records/s (3 MB/s) to a 1-partition delete-policy topic `latency` from
   `BASELINE_S` before the cleaning starts until it ends. Latency (send → ack) of the records
   sent in the cleaning window (the first cleaning's start to the last's end) against those sent
   in the baseline window just before it (no cleaning).
3. Coordinator load time. A 100-partition topic `committed`; `__consumer_offsets` (1 partition)
   gets `segment.bytes` `OFFSETS_SEGMENT_BYTES` and `min.compaction.lag.ms` one day; then
   `COMMIT_GROUPS` simple groups (confluent-kafka Consumers, no subscription) each commit all 100
   partitions' offsets `COMMITS_PER_GROUP` times (synchronous OffsetCommit requests, 4 threads):
   100 x 100 x 100 = 1M offset records. The broker is restarted (SIGTERM, start) and the load is
   read from its log: ours "Loaded G consumer groups of __consumer_offsets-0 from R records in S
   s", Kafka "Finished loading of metadata from __consumer_offsets-0 with epoch E in T ms ...
   Loaded R records". Then `min.compaction.lag.ms` = 0, wait for the cleaner's line about
   `__consumer_offsets-0`, restart again, read the load again.

Figures, not assertions. Goals (issue 32): our cleaner at least as fast per disk as Kafka's, and
produce p99 while cleaning no worse than Kafka's; the rest is printed for reference.

`--profile DIR` records our broker with py-spy while it cleans (part 1) and logs its hot spots.

    python -m bench.compaction [--quick] [--mb-per-partition N] [--commits-per-group N]
                               [--skip-load] [--profile DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import math
import os
import random
import re
import statistics
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import httpx

from bench import py_spy
from bench.common import (
    AgentCluster,
    BenchError,
    Figure,
    Workspace,
    admin_token_setting,
    agent_cluster,
    agent_log,
    base_parser,
    bench_main,
    cpu_seconds,
    log,
    log_size,
    machine_load,
    percentile,
    print_table,
    wait_until,
)
from bench.produce_throughput import ProducerProcess, latencies
from e2e import kafka_tools

MIB = 2**20
RECORD_BYTES = 1024
DISTINCT_KEYS = 0.10  # distinct keys per record written
DIRS = 2
BACKOFF_MS = 2000
DEDUPE_BUFFER_PER_DIR = 128 * MIB
DAY_MS = 86_400_000
POLL_S = 0.05
PACED_RECORDS_S = 3000  # x 1 KiB = 3 MB/s
COMMIT_GROUPS = 100
COMMIT_PARTITIONS = 100
COMMIT_THREADS = 4
COMPACTED, LATENCY, COMMITTED, OFFSETS = "compacted", "latency", "committed", "__consumer_offsets"
SYSTEMS = ("ours", "kafka")
CLEAN_TIMEOUT_S = 900.0


@dataclasses.dataclass(frozen=True)
class Sizes:
    mb_per_partition: int
    segment_bytes: int
    baseline_s: float
    commits_per_group: int
    offsets_segment_bytes: int


FULL = Sizes(
    mb_per_partition=200,
    segment_bytes=32 * MIB,
    baseline_s=15.0,
    commits_per_group=100,
    offsets_segment_bytes=8 * MIB,
)
QUICK = Sizes(
    mb_per_partition=24,
    segment_bytes=4 * MIB,
    baseline_s=5.0,
    commits_per_group=10,
    offsets_segment_bytes=2 * MIB,
)


# -- the two systems ----------------------------------------------------------------------------


class System(Protocol):
    name: str

    @property
    def bootstrap(self) -> str: ...
    @property
    def password_file(self) -> Path: ...
    @property
    def log_dirs(self) -> Sequence[Path]: ...
    @property
    def server_log(self) -> Path: ...
    @property
    def pid(self) -> int: ...
    def restart(self) -> None: ...


def librdkafka(system: System, **extra: Any) -> dict[str, Any]:
    """librdkafka's settings for `system`'s broker as the SCRAM-SHA-512 user `admin`."""
    return {
        "bootstrap.servers": system.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "admin",
        "sasl.password": system.password_file.read_text().strip(),
        **extra,
    }


class Ours:
    """One `jbod-agent` (node 1) of an `agent_cluster`."""

    name = "ours"

    def __init__(self, cluster: AgentCluster) -> None:
        self.cluster = cluster
        settings = {
            **admin_token_setting(cluster),
            "listeners": "http://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "broker.heartbeat.interval.ms": "2000",
            "log.dir.probe.interval.ms": "1000",
            "log.cleaner.backoff.ms": str(BACKOFF_MS),
            "log.cleaner.dedupe.buffer.size": str(DEDUPE_BUFFER_PER_DIR),
            "offsets.topic.num.partitions": "1",
            "offsets.topic.replication.factor": "1",
        }
        self.broker = cluster.add_broker(1, dirs=DIRS, settings=settings)
        cluster.wait_unfenced(1)

    @property
    def bootstrap(self) -> str:
        return self.broker.kafka["SASL_PLAINTEXT"]

    @property
    def password_file(self) -> Path:
        return self.cluster.controller.data_dir / "admin.token"

    @property
    def log_dirs(self) -> Sequence[Path]:
        return self.broker.log_dirs

    @property
    def server_log(self) -> Path:
        return self.broker.log_path

    @property
    def pid(self) -> int:
        return self.cluster.pid(1)

    def restart(self) -> None:
        self.cluster.stop_broker(1)
        self.broker.start(timeout=300)
        self.cluster.wait_unfenced(1, timeout=300)

    def cleaners(self) -> dict[str, dict[str, Any]]:
        """Each log dir's path → its cleaner as `GET /v1/log-dirs` shows it."""
        return {d["path"]: d.get("cleaner") or {} for d in self.cluster.log_dirs(1)}


class Kafka:
    """One combined KRaft node (`kafka_tools.KafkaCluster`)."""

    name = "kafka"

    def __init__(self, node: kafka_tools.KafkaCluster, password_file: Path) -> None:
        self.node = node
        self._password_file = password_file

    @staticmethod
    def properties() -> dict[str, str]:
        return {
            "log.cleaner.threads": str(DIRS),
            "log.cleaner.backoff.ms": str(BACKOFF_MS),
            "log.cleaner.dedupe.buffer.size": str(DEDUPE_BUFFER_PER_DIR * DIRS),
            "offsets.topic.num.partitions": "1",
        }

    @property
    def bootstrap(self) -> str:
        return self.node.bootstrap

    @property
    def password_file(self) -> Path:
        return self._password_file

    @property
    def log_dirs(self) -> Sequence[Path]:
        return self.node.log_dirs

    @property
    def server_log(self) -> Path:
        return self.node.server_log

    @property
    def pid(self) -> int:
        return self.node.pid

    def restart(self) -> None:
        self.node.restart()


# -- admin ------------------------------------------------------------------------------------------


def admin_client(system: System) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(librdkafka(system))


def create_topic(system: System, name: str, partitions: int, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]  # re-exported by the package

    admin = admin_client(system)
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=configs)], request_timeout=60)
    futures[name].result(120)
    wait_until(
        lambda: (
            len(admin.list_topics(name, timeout=30).topics[name].partitions) == partitions
            and all(
                p.leader >= 0 for p in admin.list_topics(name, timeout=30).topics[name].partitions.values()
            )
        ),
        timeout=120,
        interval=0.2,
        what=f"{name} on {system.name}",
    )


def alter_topic(system: System, name: str, configs: dict[str, str]) -> None:
    """IncrementalAlterConfigs SET of each config of topic `name`."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported by the package
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
    )

    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        name,
        incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()
        ],
    )
    admin = admin_client(system)  # kept alive until the answer is in
    admin.incremental_alter_configs([resource], request_timeout=60)[resource].result(120)


# -- the partitions on disk ------------------------------------------------------------------------


def partition_dir(system: System, partition: str) -> Path:
    """The partition's directory (waits until the broker made it: Kafka does so after the create)."""
    found: list[Path] = wait_until(
        lambda: [d / partition for d in system.log_dirs if (d / partition).is_dir()],
        timeout=120,
        interval=0.1,
        what=f"{system.name}: the directory of {partition}",
    )
    if len(found) != 1:
        raise BenchError(f"{system.name}: {partition} is in {len(found)} log dirs")
    return found[0]


def segment_files(path: Path) -> list[Path]:
    """The partition's segment files, oldest first (named by their 20-digit base offset)."""
    return sorted(p for p in path.glob("*.log") if p.stem.isdigit())


def sizes(path: Path) -> tuple[int, int]:
    """(bytes of the segments but the active one, bytes of all of them)."""
    files = [f.stat().st_size for f in segment_files(path)]
    return sum(files[:-1]), sum(files)


# -- the logs' lines (pure) ------------------------------------------------------------------------

KAFKA_LOG_TIME = "%Y-%m-%d %H:%M:%S,%f"
KAFKA_LINE_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] ")
KAFKA_CLEANED = re.compile(r"Log cleaner thread \d+ cleaned log (\S+) \(dirty section = \[(\d+), (\d+)\]\)")
KAFKA_PROCESSED = re.compile(r"([\d,.]+) MB of log processed in ([\d,.]+) seconds \(([\d,.]+) MB/sec\)")
KAFKA_SIZES = re.compile(r"(Start|End) size: ([\d,.]+) MB \(([\d,]+) messages\)")
KAFKA_LOADED = re.compile(
    r"Finished loading of metadata from (\S+) with epoch \d+ in (\d+)ms .*Loaded (\d+) records which total to (\d+) bytes"
)
OURS_CLEANED = re.compile(
    r"(\S+): cleaned up to offset (\d+): (\d+) record\(s\) removed, (\d+) of (\d+) bytes kept, (\d+) segment\(s\) swapped"
)
OURS_LOADED = re.compile(r"Loaded (\d+) consumer groups of (\S+) from (\d+) records in ([\d.]+) s")


@dataclasses.dataclass(frozen=True)
class KafkaCleaning:
    """One report of Kafka's cleaner thread."""

    at: float  # unix time of the report (the cleaning's end)
    partition: str
    dirty_end: int
    mib: float  # MiB of segments rewritten
    seconds: float
    mib_per_s: float
    start_messages: int = 0
    end_messages: int = 0


def _n(text: str) -> float:
    return float(text.replace(",", ""))


def parse_kafka_cleanings(text: str) -> list[KafkaCleaning]:
    """The cleaner thread's reports in Kafka's server log (a multi-line message under a timed line)."""
    out: list[KafkaCleaning] = []
    at = 0.0
    current: dict[str, Any] | None = None
    for line in text.splitlines():
        timed = KAFKA_LINE_TIME.match(line)
        if timed:
            at = datetime.datetime.strptime(timed.group(1), KAFKA_LOG_TIME).timestamp()
        cleaned = KAFKA_CLEANED.search(line)
        if cleaned:
            current = {"at": at, "partition": cleaned.group(1), "dirty_end": int(cleaned.group(3))}
            continue
        if current is None:
            continue
        processed = KAFKA_PROCESSED.search(line)
        if processed:
            mib, rate = _n(processed.group(1)), _n(processed.group(3))
            current |= {
                "mib": mib,
                "seconds": mib / rate if rate > 0 else _n(processed.group(2)),
                "mib_per_s": rate,
            }
        size = KAFKA_SIZES.search(line)
        if size:
            current["start_messages" if size.group(1) == "Start" else "end_messages"] = int(_n(size.group(3)))
            if size.group(1) == "End" and "mib" in current:
                out.append(KafkaCleaning(**current))
                current = None
    return out


def parse_load(system: str, line: str) -> tuple[int, float] | None:
    """(records loaded, seconds) from a coordinator's load line of `__consumer_offsets-0`."""
    if system == "kafka":
        match = KAFKA_LOADED.search(line)
        if match and match.group(1) == f"{OFFSETS}-0":
            return int(match.group(3)), int(match.group(2)) / 1000
        return None
    found = OURS_LOADED.search(line)
    if found and found.group(2) == f"{OFFSETS}-0":
        return int(found.group(3)), float(found.group(4))
    return None


# -- 1 & 2: fill, roll, clean under a paced producer ----------------------------------------------


def fill(system: System, partitions: int, mb: int) -> float:
    """Keyed 1 KiB records into each partition of `compacted`; returns MB/s (10^6 B of values)."""
    from confluent_kafka import Producer

    producer = Producer(librdkafka(system, acks="all", **{"linger.ms": 5, "compression.type": "none"}))
    records = mb * MIB // RECORD_BYTES
    distinct = max(1, int(records * DISTINCT_KEYS))
    value = os.urandom(RECORD_BYTES)
    errors: list[str] = []

    def done(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    started = time.monotonic()
    for partition in range(partitions):
        rng = random.Random(partition)
        for _ in range(records):
            key = b"key-%08d" % rng.randrange(distinct)
            while True:
                try:
                    producer.produce(COMPACTED, value, key, partition=partition, on_delivery=done)
                    break
                except BufferError:
                    producer.poll(0.01)
            producer.poll(0)
    if producer.flush(600) != 0 or errors:
        raise BenchError(f"{system.name}: the fill failed: {errors[:3]}")
    return partitions * records * RECORD_BYTES / 1e6 / (time.monotonic() - started)


def roll(system: System, partitions: int) -> None:
    """Roll each partition's active segment (`segment.ms` 1 s, then one record more until a new,
    small active segment takes it), so that every filled byte is in a closed segment."""
    from confluent_kafka import Producer

    alter_topic(system, COMPACTED, {"segment.ms": "1000"})
    producer = Producer(librdkafka(system, acks="all"))
    paths = [partition_dir(system, f"{COMPACTED}-{p}") for p in range(partitions)]

    def rolled() -> bool:
        pending = [p for p, path in enumerate(paths) if segment_files(path)[-1].stat().st_size > 4096]
        for p in pending:
            producer.produce(COMPACTED, b"roll", b"roll", partition=p)
        producer.flush(60)
        return not pending

    wait_until(rolled, timeout=120, interval=0.5, what=f"{system.name}: the active segments rolled")


@dataclasses.dataclass(frozen=True)
class Cleaning:
    """One partition's first cleaning: dirty bytes (on disk before), its start and end (unix
    time), the log's bytes before and after, and what the system itself reported."""

    system: str
    partition: str
    log_dir: str
    dirty_bytes: int
    start: float
    end: float
    bytes_before: int
    bytes_after: int
    reported: str
    uncertainty_s: float = 0.0

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def mib_per_s(self) -> float:
        return self.dirty_bytes / MIB / self.seconds if self.seconds > 0 else math.nan


class CleanerPoller:
    """Polls our broker's `GET /v1/log-dirs` every `POLL_S` in a thread: (sent, answered, dir path
    → cleaner) samples, unix times."""

    def __init__(self, ours: Ours) -> None:
        self.ours = ours
        self.samples: list[tuple[float, float, dict[str, dict[str, Any]]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cleaner-poller", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            sent = time.time()
            with contextlib.suppress(httpx.HTTPError, BenchError):
                cleaners = self.ours.cleaners()
                self.samples.append((sent, time.time(), cleaners))
            self._stop.wait(POLL_S)

    def __enter__(self) -> CleanerPoller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=130)

    def start_of(self, path: str, partition: str, runs_before: int) -> tuple[float, float]:
        """The earliest time the dir's cleaning of `partition` that ended first can have started,
        and the uncertainty. Going back from the first sample that shows the run counted, over
        the samples that show it cleaning `partition`: the start is when the last sample that
        showed it not cleaning was sent, the uncertainty the time to the next one's answer. (A
        round that finds nothing to clean shows "cleaning" for a moment too: such a sample is
        followed by idle ones, so it never joins the run of samples walked back over.)"""
        done = next(
            (
                i
                for i, (_sent, _answered, cleaners) in enumerate(self.samples)
                if cleaners.get(path, {}).get("runs", 0) > runs_before
            ),
            None,
        )
        if done is None:
            raise BenchError(f"ours: no poll showed the cleaning of {partition} done")
        index = done - 1
        while index >= 0 and self.samples[index][2].get(path, {}).get("cleaning") == partition:
            index -= 1
        if index < 0:
            raise BenchError(f"ours: {partition} was cleaning at the first poll")
        sent = self.samples[index][0]
        return sent, self.samples[index + 1][1] - sent


@dataclasses.dataclass
class CleanPhase:
    system: str
    cleanings: list[Cleaning]
    baseline: tuple[float, float]  # monotonic window
    cleaning: tuple[float, float]
    baseline_latency: list[float]
    cleaning_latency: list[float]
    failed: int
    broker_cpu_s: float  # from the config change to the last cleaning's end (read when seen)
    load: str


def profiling(
    system: System, profile: Path | None, tag: str
) -> contextlib.AbstractContextManager[list[Path]]:
    """py-spy on our broker and its cleaner processes while the block runs (nothing for Kafka's,
    or without `profile`)."""
    if profile is None or system.name != "ours":
        return contextlib.nullcontext([])
    return py_spy.recording([system.pid], profile, tag, subprocesses=True)


def log_profile(files: Sequence[Path], tag: str) -> None:
    if not files:
        return
    samples, hotspots = py_spy.summary(files)
    log(f"    py-spy, {tag}: {samples:,} active samples of our broker; by own time (inclusive):")
    for spot in hotspots:
        log(f"      {spot.self_share:6.1%} ({spot.inclusive_share:6.1%})  {spot.function}")


def clean_phase(
    system: System, ws: Workspace, partitions: int, baseline_s: float, profile: Path | None = None
) -> CleanPhase:
    names = [f"{COMPACTED}-{p}" for p in range(partitions)]
    paths = {name: partition_dir(system, name) for name in names}
    before = {name: sizes(path) for name, path in paths.items()}
    offset = log_size(system.server_log)
    mono_to_unix = time.time() - time.monotonic()
    producer = ProducerProcess(
        None,
        LATENCY,
        ws.root / f"paced-{system.name}",
        partition=0,
        extra=["--linger-ms", "0", "--record-bytes", str(RECORD_BYTES)],
        bootstrap=system.bootstrap,
        token_file=system.password_file,
    ).start()
    try:
        producer.ready()
        producer.go(PACED_RECORDS_S)
        poller = CleanerPoller(system) if isinstance(system, Ours) else None
        runs_before = (
            {p: int(c.get("runs", 0)) for p, c in system.cleaners().items()}
            if isinstance(system, Ours)
            else {}
        )
        with poller or contextlib.nullcontext():
            time.sleep(1.0 + baseline_s)  # 1 s of warm-up (connections), then the baseline window
            cpu0 = cpu_seconds(system.pid)
            with profiling(system, profile, "cleaning") as files:
                alter_topic(system, COMPACTED, {"min.compaction.lag.ms": "0"})
                if isinstance(system, Ours):
                    ends = wait_until(
                        lambda: _ours_ends(system.server_log, offset, names),
                        timeout=CLEAN_TIMEOUT_S,
                        interval=0.2,
                        what="ours: the cleanings",
                    )
                    assert poller is not None  # until a poll shows every run counted
                    wait_until(
                        lambda: (
                            poller.samples
                            and all(
                                c.get("runs", 0) > runs_before.get(p, 0)
                                for p, c in poller.samples[-1][2].items()
                                if p in {str(d) for d in system.log_dirs}
                            )
                        ),
                        timeout=120,
                        interval=0.1,
                        what="ours: a poll showing the runs",
                    )
                else:
                    reports = wait_until(
                        lambda: _kafka_reports(system.server_log, names),
                        timeout=CLEAN_TIMEOUT_S,
                        interval=0.2,
                        what="kafka: the cleanings",
                    )
            cpu = cpu_seconds(system.pid) - cpu0
        producer.stop()
        result = producer.collect()
    finally:
        producer.kill()
    cleanings: list[Cleaning] = []
    for name in names:
        path = paths[name]
        after = sizes(path)[1]
        if isinstance(system, Ours):
            assert poller is not None
            end, line = ends[name]
            start, uncertainty = poller.start_of(str(path.parent), name, runs_before.get(str(path.parent), 0))
            found = OURS_CLEANED.search(line)
            assert found is not None
            reported = (
                f"{found.group(3)} records removed, {int(found.group(4)) / MIB:.1f} of {int(found.group(5)) / MIB:.1f} "
                f"MiB kept/read (key map + rewrite), {found.group(6)} segments swapped"
            )
        else:
            report = reports[name]
            start, end, uncertainty = report.at - report.seconds, report.at, 0.05
            reported = (
                f"{report.mib:.1f} MB processed in {report.seconds:.2f} s ({report.mib_per_s:.1f} MB/sec); "
                f"{report.start_messages:,} -> {report.end_messages:,} messages"
            )
        cleanings.append(
            Cleaning(
                system=system.name,
                partition=name,
                log_dir=path.parent.name,
                dirty_bytes=before[name][0],
                start=start,
                end=end,
                bytes_before=before[name][1],
                bytes_after=after,
                reported=reported,
                uncertainty_s=uncertainty,
            )
        )
    if poller is not None:  # for a look at how the dirs' cleaners went (kept with --keep)
        (ws.root / "ours-cleaner-polls.json").write_text(
            json.dumps([{"sent": s, "answered": a, "cleaners": c} for s, a, c in poller.samples])
        )
    first = min(c.start for c in cleanings) - mono_to_unix
    last = max(c.end for c in cleanings) - mono_to_unix
    baseline = (first - baseline_s, first)
    window = (first, last)
    base_lat, base_failed = latencies([result], *baseline)
    clean_lat, clean_failed = latencies([result], *window)
    log_profile(files, f"{system.name} cleaning {', '.join(names)} (from the config change)")
    for c in cleanings:
        log(
            f"  {system.name} {c.partition} ({c.log_dir}): {c.dirty_bytes / MIB:.1f} MiB dirty cleaned in "
            f"{c.seconds:.2f} s (±{c.uncertainty_s:.2f}) = {c.mib_per_s:.1f} MiB/s; log {c.bytes_before / MIB:.1f} -> "
            f"{c.bytes_after / MIB:.1f} MiB; its report: {c.reported}"
        )
    return CleanPhase(
        system=system.name,
        cleanings=cleanings,
        baseline=baseline,
        cleaning=window,
        baseline_latency=base_lat,
        cleaning_latency=clean_lat,
        failed=base_failed + clean_failed,
        broker_cpu_s=cpu,
        load=machine_load(),
    )


def _ours_ends(path: Path, offset: int, names: Sequence[str]) -> dict[str, tuple[float, str]] | None:
    ends: dict[str, tuple[float, str]] = {}
    for line in agent_log(path, offset=offset, contains="cleaned up to offset"):
        found = OURS_CLEANED.search(line.text)
        if found and found.group(1) in names and found.group(1) not in ends:
            ends[found.group(1)] = (line.at, line.text)
    return ends if set(ends) == set(names) else None


def _kafka_reports(path: Path, names: Sequence[str]) -> dict[str, KafkaCleaning] | None:
    reports: dict[str, KafkaCleaning] = {}
    for report in parse_kafka_cleanings(path.read_text(errors="replace")):
        if report.partition in names and report.partition not in reports:
            reports[report.partition] = report
    return reports if set(reports) == set(names) else None


# -- 3: the coordinator's load time -----------------------------------------------------------------


@dataclasses.dataclass
class LoadPhase:
    system: str
    commits_per_s: float  # offset records per second
    records_before: int
    seconds_before: float
    bytes_before: int
    records_after: int
    seconds_after: float
    bytes_after: int
    cleaning_s: float


def commit_offsets(system: System, groups: int, commits: int) -> float:
    """`groups` simple groups each commit the offsets of every partition of `committed`
    `commits` times (synchronous OffsetCommits, `COMMIT_THREADS` threads); offset records/s."""
    from confluent_kafka import Consumer, TopicPartition

    errors: list[BaseException] = []

    def work(mine: Sequence[int]) -> None:
        try:
            consumers = [
                Consumer(librdkafka(system, **{"group.id": f"load-{g:03d}", "enable.auto.commit": False}))
                for g in mine
            ]
            try:
                for round_ in range(commits):
                    for consumer in consumers:
                        offsets = [TopicPartition(COMMITTED, p, round_ + 1) for p in range(COMMIT_PARTITIONS)]
                        for tp in consumer.commit(offsets=offsets, asynchronous=False) or []:
                            if tp.error is not None:
                                raise BenchError(f"{system.name}: commit of {tp}: {tp.error}")
            finally:
                for consumer in consumers:
                    consumer.close()
        except BaseException as exc:
            errors.append(exc)

    started = time.monotonic()
    threads = [
        threading.Thread(target=work, args=(range(i, groups, COMMIT_THREADS),), name=f"commits-{i}")
        for i in range(COMMIT_THREADS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise BenchError(f"{system.name}: commits failed: {errors[0]!r}")
    return groups * commits * COMMIT_PARTITIONS / (time.monotonic() - started)


def restart_and_load(system: System) -> tuple[int, float]:
    """Restart the broker; (records, seconds) of its load of `__consumer_offsets-0`."""
    offset = log_size(system.server_log) if system.name == "ours" else 0
    system.restart()

    def loaded() -> tuple[int, float] | None:
        with open(system.server_log, "rb") as handle:
            handle.seek(offset)
            for raw in handle:
                found = parse_load(system.name, raw.decode("utf-8", "replace"))
                if found:
                    return found
        return None

    found: tuple[int, float] = wait_until(loaded, timeout=600, interval=0.2, what=f"{system.name}: the load")
    return found


def load_phase(system: System, sizes_: Sizes) -> LoadPhase:
    from confluent_kafka import Consumer, TopicPartition

    create_topic(system, COMMITTED, COMMIT_PARTITIONS, {})
    first = Consumer(librdkafka(system, **{"group.id": "load-000", "enable.auto.commit": False}))
    wait_until(
        lambda: _committed_once(first, TopicPartition(COMMITTED, 0, 0)),
        timeout=120,
        interval=0.5,
        what=f"{system.name}: __consumer_offsets",
    )
    first.close()
    alter_topic(
        system,
        OFFSETS,
        {"segment.bytes": str(sizes_.offsets_segment_bytes), "min.compaction.lag.ms": str(DAY_MS)},
    )
    rate = commit_offsets(system, COMMIT_GROUPS, sizes_.commits_per_group)
    path = partition_dir(system, f"{OFFSETS}-0")
    log(
        f"  {system.name}: {COMMIT_GROUPS * sizes_.commits_per_group * COMMIT_PARTITIONS:,} offsets committed at "
        f"{rate:,.0f}/s; {OFFSETS}-0 {sizes(path)[1] / MIB:.1f} MiB in {len(segment_files(path))} segments ({machine_load()})"
    )
    bytes_before = sizes(path)[1]
    records_before, seconds_before = restart_and_load(system)
    log(f"  {system.name}: loaded {records_before:,} records in {seconds_before:.2f} s (before compaction)")
    offset = log_size(system.server_log)
    started = time.monotonic()
    alter_topic(system, OFFSETS, {"min.compaction.lag.ms": "0"})
    wait_until(
        lambda: _offsets_cleaned(system, offset),
        timeout=CLEAN_TIMEOUT_S,
        interval=0.5,
        what=f"{system.name}: the cleaning of {OFFSETS}-0",
    )
    cleaning_s = time.monotonic() - started
    bytes_after = sizes(path)[1]
    records_after, seconds_after = restart_and_load(system)
    log(
        f"  {system.name}: {OFFSETS}-0 cleaned ({bytes_before / MIB:.1f} -> {bytes_after / MIB:.1f} MiB, seen "
        f"{cleaning_s:.1f} s after the change); loaded {records_after:,} records in {seconds_after:.2f} s"
    )
    return LoadPhase(
        system=system.name,
        commits_per_s=rate,
        records_before=records_before,
        seconds_before=seconds_before,
        bytes_before=bytes_before,
        records_after=records_after,
        seconds_after=seconds_after,
        bytes_after=bytes_after,
        cleaning_s=cleaning_s,
    )


def _committed_once(consumer: Any, tp: Any) -> bool:
    from confluent_kafka import KafkaException

    try:
        consumer.commit(offsets=[tp], asynchronous=False)
    except KafkaException:
        return False  # the coordinator is not there yet
    return True


def _offsets_cleaned(system: System, offset: int) -> bool:
    with open(system.server_log, "rb") as handle:
        handle.seek(offset)
        text = handle.read().decode("utf-8", "replace")
    if system.name == "ours":
        return any(m.group(1) == f"{OFFSETS}-0" for m in OURS_CLEANED.finditer(text))
    return any(c.partition == f"{OFFSETS}-0" for c in parse_kafka_cleanings(text))


# -- the run ------------------------------------------------------------------------------------


@contextlib.contextmanager
def systems(ws: Workspace) -> Iterator[tuple[Ours, Kafka]]:
    user = kafka_tools.ScramUser()
    password_file = ws.root / "kafka.password"
    password_file.write_text(user.password)
    with (
        agent_cluster(ws) as cluster,
        kafka_tools.KafkaCluster(
            kafka_tools.default_install(),
            log_dir_count=DIRS,
            scram=user,
            work_dir=ws.root / "kafka",
            properties=Kafka.properties(),
            start_timeout=300,
        ) as node,
    ):
        yield Ours(cluster), Kafka(node, password_file)


def ms(value: float) -> str:
    return f"{value * 1000:.1f}" if value == value else "-"


def report(phases: Sequence[CleanPhase], loads: Sequence[LoadPhase]) -> list[Figure]:
    print()
    print(
        "1. cleaner throughput: dirty MiB (segments but the active one, on disk before) / the cleaning's seconds "
        "(ours: last idle poll of GET /v1/log-dirs -> the agent's 'cleaned up to' line; Kafka: its cleaner's own "
        "report), both dirs cleaning at the same time"
    )
    print_table(
        [
            "system",
            "partition",
            "dir",
            "dirty MiB",
            "seconds",
            "MiB/s",
            "log MiB after",
            "broker CPU s (both)",
        ],
        [
            [
                c.system,
                c.partition,
                c.log_dir,
                f"{c.dirty_bytes / MIB:.1f}",
                f"{c.seconds:.2f} ±{c.uncertainty_s:.2f}",
                f"{c.mib_per_s:.1f}",
                f"{c.bytes_after / MIB:.1f}",
                f"{p.broker_cpu_s:.1f}",
            ]
            for p in phases
            for c in p.cleanings
        ],
    )
    print()
    print(
        f"2. produce latency, send -> ack ms, {PACED_RECORDS_S:,} records/s of {RECORD_BYTES} B (acks=all) to another "
        "topic: the baseline window just before the cleaning, and the cleaning window"
    )
    rows = []
    for p in phases:
        for label, window, lat in (
            ("baseline", p.baseline, p.baseline_latency),
            ("cleaning", p.cleaning, p.cleaning_latency),
        ):
            rows.append(
                [
                    p.system,
                    label,
                    f"{window[1] - window[0]:.1f}",
                    f"{len(lat):,}",
                    ms(percentile(lat, 0.5)),
                    ms(percentile(lat, 0.99)),
                    ms(lat[-1] if lat else math.nan),
                    f"{p.failed}",
                ]
            )
    print_table(["system", "window", "seconds", "records", "p50", "p99", "max", "failed"], rows)
    if loads:
        print()
        print(
            "3. group coordinator load of __consumer_offsets-0 after a restart, as the broker logs it (before "
            "compaction, and after the cleaner's first cleaning)"
        )
        print_table(
            [
                "system",
                "commits/s",
                "before: records",
                "MiB",
                "load s",
                "after: records",
                "MiB",
                "load s",
                "cleaning seen after s",
            ],
            [
                [
                    lp.system,
                    f"{lp.commits_per_s:,.0f}",
                    f"{lp.records_before:,}",
                    f"{lp.bytes_before / MIB:.1f}",
                    f"{lp.seconds_before:.2f}",
                    f"{lp.records_after:,}",
                    f"{lp.bytes_after / MIB:.1f}",
                    f"{lp.seconds_after:.2f}",
                    f"{lp.cleaning_s:.1f}",
                ]
                for lp in loads
            ],
        )
    figures: list[Figure] = []
    by = {p.system: p for p in phases}
    if set(by) == set(SYSTEMS):
        ours_rate = statistics.mean(c.mib_per_s for c in by["ours"].cleanings)
        kafka_rate = statistics.mean(c.mib_per_s for c in by["kafka"].cleanings)
        figures.append(
            Figure(
                "cleaner throughput per disk (mean of 2 dirs cleaning at once), ours against Kafka 4.3's",
                ours_rate,
                "MiB/s",
                kafka_rate,
                better="higher",
            )
        )
        ours_p99 = percentile(by["ours"].cleaning_latency, 0.99)
        kafka_p99 = percentile(by["kafka"].cleaning_latency, 0.99)
        figures.append(
            Figure(
                "produce p99 while cleaning, ours against Kafka 4.3's", ours_p99, "s", kafka_p99 * 1.000001
            )
        )
        figures.append(
            Figure(
                "produce p99 without cleaning (baseline), ours (Kafka's in detail)",
                percentile(by["ours"].baseline_latency, 0.99),
                "s",
                float("inf"),
                detail=f"Kafka {ms(percentile(by['kafka'].baseline_latency, 0.99))} ms",
            )
        )
    for lp in loads:
        if lp.system == "ours":
            kafka = next((k for k in loads if k.system == "kafka"), None)
            for when, seconds, records in (
                ("before", lp.seconds_before, lp.records_before),
                ("after", lp.seconds_after, lp.records_after),
            ):
                other = getattr(kafka, f"seconds_{when}", math.nan)
                figures.append(
                    Figure(
                        f"__consumer_offsets load, {records:,} records ({when} compaction), ours",
                        seconds,
                        "s",
                        float("inf"),
                        detail=f"Kafka {other:.2f} s",
                    )
                )
    return figures


def run(args: argparse.Namespace) -> list[Figure]:
    base = QUICK if args.quick else FULL
    sizes_ = dataclasses.replace(
        base,
        mb_per_partition=args.mb_per_partition or base.mb_per_partition,
        commits_per_group=args.commits_per_group or base.commits_per_group,
    )
    log(
        f"  each system: 1 broker x {DIRS} plain dirs, RF 1; {COMPACTED}: {DIRS} partitions x "
        f"{sizes_.mb_per_partition} MiB of {RECORD_BYTES} B records, {DISTINCT_KEYS:.0%} distinct keys, segment.bytes "
        f"{sizes_.segment_bytes // MIB} MiB; log.cleaner.backoff.ms {BACKOFF_MS}, dedupe buffer "
        f"{DEDUPE_BUFFER_PER_DIR // MIB} MiB per dir; paced producer {PACED_RECORDS_S:,}/s, baseline "
        f"{sizes_.baseline_s:.0f} s; commits: {COMMIT_GROUPS} groups x {sizes_.commits_per_group} x "
        f"{COMMIT_PARTITIONS} partitions, {OFFSETS} segment.bytes {sizes_.offsets_segment_bytes // MIB} MiB"
    )
    phases: list[CleanPhase] = []
    loads: list[LoadPhase] = []
    with Workspace(keep=args.keep) as ws, systems(ws) as (ours, kafka):
        both: tuple[System, ...] = (ours, kafka)
        log(f"  both up ({machine_load()}); data under {ws.root}")
        for system in both:
            create_topic(
                system,
                COMPACTED,
                DIRS,
                {
                    "cleanup.policy": "compact",
                    "segment.bytes": str(sizes_.segment_bytes),
                    "min.compaction.lag.ms": str(DAY_MS),
                },
            )
            dirs = {partition_dir(system, f"{COMPACTED}-{p}").parent for p in range(DIRS)}
            if len(dirs) != DIRS:
                raise BenchError(f"{system.name}: the partitions of {COMPACTED} share a dir")
            create_topic(system, LATENCY, 1, {})
        for system in both:
            rate = fill(system, DIRS, sizes_.mb_per_partition)
            roll(system, DIRS)
            log(f"  {system.name}: filled at {rate:.1f} MB/s and rolled ({machine_load()})")
        os.sync()  # the fills' dirty pages written back now, not in a measured window
        for system in both:
            phases.append(clean_phase(system, ws, DIRS, sizes_.baseline_s, args.profile))
        if not args.skip_load:
            for system in both:
                loads.append(load_phase(system, sizes_))
    return report(phases, loads)


def main() -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "--mb-per-partition",
        type=int,
        default=0,
        help="MiB written to each compacted partition (default 200; --quick 24)",
    )
    parser.add_argument(
        "--commits-per-group",
        type=int,
        default=0,
        help="OffsetCommits (of 100 partitions) per group, 100 groups (default 100; --quick 10)",
    )
    parser.add_argument("--skip-load", action="store_true", help="no coordinator load part")
    parser.add_argument(
        "--profile",
        type=Path,
        help="record our broker with py-spy while it cleans into this directory and log the functions "
        "with the most samples (needs py-spy, in the dev extras)",
    )
    return bench_main("Log compaction against Apache Kafka 4.3", parser, run)


if __name__ == "__main__":
    raise SystemExit(main())
