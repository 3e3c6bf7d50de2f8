"""`jbodctl local demo`: the README's main job, narrated. A disk fails under a partition leader
while an idempotent Kafka producer writes with acks=all, leadership moves off the failed disk, and
every acknowledged record is read back exactly once.

Steps: `up --fresh` (3 brokers x 3 disks) → create topic `demo` (6 partitions, RF 3,
min.insync.replicas=2) → produce N records of ~1 KB with confluent-kafka (librdkafka) on the
brokers' Kafka listeners, idempotent with acks=all, paced evenly over S seconds →
take away the disk that holds the replica of partition 0's leader once a third of them is
acknowledged → show partitions as leadership moves → finish producing → consume everything →
verify → summary → restore the disk → `down --purge` (unless `--keep`; a failed verification stops
the cluster but keeps its directory and logs).

Guarantees:
* The verdict is the shared history checker (`jbod_client.history`): it fails if an acknowledged
  record is missing or not at its acknowledged offset, if a partition's acknowledged records are
  out of order, if a record was never sent, or if any record appears twice: the producer is
  idempotent, so no retry excuses a duplicate (the demo never reports one to the checker). The
  verdict line counts the duplicates (`duplicates 0`). Records are consumed with assign(), from
  the beginning of each partition, through the Kafka listeners too.
* The failover figure (disk failure → first acknowledged write on a new leader) is measured on
  every run: production is paced, so it is still running when the disk fails, and it does not stop
  at N records while that figure is missing — it keeps going at the same pace until a write to a
  partition whose leader moved is acknowledged (or the failure task ends without a move, or
  `FAILOVER_GRACE_SECONDS` pass).
* The summary fits 80 columns with its verdict on one line.
* The command exits non-zero (`DemoError`) whenever the check fails, and never leaves processes
  running unless `--keep` is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from jbod_cli import tables
from jbod_client import rdkafka
from jbod_client.controller import ClientError
from jbod_client.history import Consumed, History, RecordId, Report, make_value
from jbod_client.kafka_admin import KafkaAdmin
from jbod_client.kafka_config import KafkaTarget
from jbod_core.ids import UNASSIGNED_DIR_TEXT
from jbod_local import disk_faults, kafka_clients, status, supervisor
from jbod_local.layout import ClusterLayout

TOPIC = "demo"
PARTITIONS = 6
REPLICATION_FACTOR = 3
MIN_INSYNC_REPLICAS = 2
RECORD_BYTES = 1024
FAIL_AFTER_FRACTION = 1 / 3  # take the disk away once this share of the records is acknowledged
PRODUCE_SECONDS = 10.0  # production is paced evenly over this many seconds
FAILOVER_GRACE_SECONDS = 30.0  # at most this long past N records, waiting for the failover figure
VERDICT_OK = "all acknowledged records read back in order"
#: The producer's settings beyond idempotence and acks=all (librdkafka's names).
PRODUCER_SETTINGS = {
    "message.timeout.ms": 30_000,
    "request.timeout.ms": 10_000,
    "linger.ms": 5,
    "statistics.interval.ms": 500,  # the retries the summary counts
}


class DemoError(ClientError):
    """The demo found lost, misplaced, reordered or unexpected records (or could not run)."""


# -- what the producer reported ------------------------------------------------------------------


@dataclass
class DeliveryLog:
    """What the producer reported, record by record (filled by its delivery reports), kept in the
    shared `History` checker plus the timings the summary needs. Retries are not reported per
    partition: the producer is idempotent, so a retried batch is never written twice and the
    checker counts every duplicate as one."""

    clock: Callable[[], float] = time.monotonic
    history: History = field(default_factory=History)
    next_seq: dict[int, int] = field(default_factory=dict)
    ack_times: dict[int, list[float]] = field(default_factory=dict)

    def send(self, partition: int) -> RecordId:
        seq = self.next_seq.get(partition, 0)
        self.next_seq[partition] = seq + 1
        rid = (f"p{partition}", seq)
        self.history.on_send(rid, TOPIC, partition)
        return rid

    def on_ack(self, rid: RecordId, partition: int, offset: int) -> None:
        self.history.on_ack(rid, offset)
        self.ack_times.setdefault(partition, []).append(self.clock())

    def on_failure(self, rid: RecordId, code: int) -> None:
        self.history.on_failure(rid, code)

    @property
    def acked(self) -> dict[RecordId, int]:
        return self.history.acked

    @property
    def failed(self) -> dict[RecordId, int]:
        return self.history.failed

    @property
    def sent(self) -> int:
        return sum(self.next_seq.values())

    def first_ack_after(self, partitions: Iterable[int], moment: float) -> float | None:
        """The earliest acknowledgement at or after `moment` in any of `partitions`."""
        times = [t for p in partitions for t in self.ack_times.get(p, []) if t >= moment]
        return min(times) if times else None


class _RateColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        elapsed = task.finished_time or task.elapsed
        speed = task.finished_speed or task.speed or (task.completed / elapsed if elapsed else None)
        return Text(f"{speed:,.0f} rec/s" if speed else "- rec/s", style="cyan")


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        _RateColumn(),
        TimeElapsedColumn(),
    )


@dataclass
class DemoReport:
    records: int
    log: DeliveryLog
    verification: Report
    failure: disk_faults.DiskFailure | None
    failover_seconds: float | None
    produce_seconds: float
    final_topic: dict[str, Any]
    retries: int = 0  # requests the producer retried (librdkafka's statistics)


async def _describe(layout: ClusterLayout) -> dict[str, Any]:
    def call() -> dict[str, Any]:
        with layout.controller(timeout=5.0) as client:
            return client.describe_topic(TOPIC)

    return await asyncio.to_thread(call)


async def _await_placed(layout: ClusterLayout, *, timeout: float = 20.0) -> dict[str, Any]:
    """Wait until every replica of the topic sits in a real dir and every partition has a leader."""
    deadline = time.monotonic() + timeout
    unassigned = UNASSIGNED_DIR_TEXT
    while True:
        topic = await _describe(layout)
        parts = topic["partitions"]
        if all(p["leader"] >= 0 and unassigned not in p["directories"] for p in parts):
            return topic
        if time.monotonic() > deadline:
            raise DemoError(f"the replicas of {TOPIC} were not placed in dirs within {timeout:.0f} s")
        await asyncio.sleep(0.2)


async def _pick_disk(layout: ClusterLayout, target: KafkaTarget) -> tuple[int, int]:
    """(broker, disk index) of the replica of partition 0 on its leader, from DescribeLogDirs."""
    topic = await _describe(layout)
    leader = int(topic["partitions"][0]["leader"])
    if leader < 0:
        raise DemoError(f"partition {TOPIC}-0 has no leader")
    address = layout.broker(leader).kafka_address
    async with KafkaAdmin([address], target.security, timeout=5.0) as admin:
        dirs = await admin.describe_log_dirs(address, {TOPIC: [0]})
    for d in dirs:
        if any(r.topic == TOPIC and r.partition == 0 and not r.future for r in d.replicas):
            _broker, index = disk_faults.resolve_disk(layout, leader, d.path)
            return leader, index
    raise DemoError(f"broker {leader} does not list {TOPIC}-0 in any of its log dirs")


def failover_seconds(log: DeliveryLog, failure: disk_faults.DiskFailure | None) -> float | None:
    """Disk failure → first acknowledged write, after the controller took the dir offline, to a
    partition whose leader moved to a live broker; None while there is none (or nothing moved)."""
    if failure is None or failure.offline_after is None:
        return None
    moved = {m.partition for m in failure.leader_moves if m.new_leader >= 0}
    first = log.first_ack_after(moved, failure.failed_at + failure.offline_after)
    return None if first is None else first - failure.failed_at


def awaits_failover(log: DeliveryLog, fail_task: asyncio.Task[disk_faults.DiskFailure] | None) -> bool:
    """True while production should go on to measure the failover: the disk failure has not been
    triggered or is still under way, or it moved a leader and no write to it is acknowledged yet."""
    if fail_task is None or not fail_task.done():
        return True
    if fail_task.cancelled() or fail_task.exception() is not None:
        return False
    failure = fail_task.result()
    if failure.offline_after is None or not any(m.new_leader >= 0 for m in failure.leader_moves):
        return False
    return failover_seconds(log, failure) is None


def _report(log: DeliveryLog, rid: RecordId, partition: int) -> Callable[[Any, Any], None]:
    """The delivery report callback of one record."""

    def report(error: Any, message: Any) -> None:
        if error is not None:
            log.on_failure(rid, int(error.code()))
        else:
            log.on_ack(rid, partition, int(message.offset()))

    return report


async def _produce(
    producer: Any,
    log: DeliveryLog,
    *,
    records: int,
    seconds: float,
    keep_going: Callable[[], bool] = lambda: False,
) -> None:
    """Send `records` records paced evenly over `seconds`, then more at the same pace while
    `keep_going()` (at most `FAILOVER_GRACE_SECONDS` longer); then wait for every delivery report.
    `producer` is a confluent-kafka Producer: its reports come from `poll`, on this event loop."""
    interval = seconds / records
    started = time.monotonic()
    i = 0
    while i < records or (keep_going() and time.monotonic() < started + seconds + FAILOVER_GRACE_SECONDS):
        ahead = started + i * interval - time.monotonic()
        if ahead > 0.005:
            await asyncio.sleep(ahead)
        partition = i % PARTITIONS
        i += 1
        rid = log.send(partition)
        while True:
            try:
                producer.produce(
                    TOPIC, make_value(*rid), partition=partition, on_delivery=_report(log, rid, partition)
                )
                break
            except BufferError:  # librdkafka's queue is full: let reports drain it
                producer.poll(0)
                await asyncio.sleep(0.01)
        producer.poll(0)
    deadline = time.monotonic() + PRODUCER_SETTINGS["message.timeout.ms"] / 1000 + 5
    while len(producer) > 0 and time.monotonic() < deadline:  # reports still to come
        producer.poll(0)
        await asyncio.sleep(0.005)
    producer.poll(0)


async def _consume(
    target: KafkaTarget, log: DeliveryLog, progress: Progress, *, timeout: float
) -> list[Consumed]:
    """Every partition from its beginning with a confluent-kafka Consumer (assign(), no group),
    until each has reached its last acknowledged offset and nothing more comes (or `timeout`)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    wanted: dict[int, int] = {}
    for rid, acked_at in log.acked.items():
        sent_to = log.history.sent[rid][1]
        wanted[sent_to] = max(wanted.get(sent_to, -1), acked_at)
    task = progress.add_task("Consuming", total=len(log.acked))
    reached: dict[int, int] = {}
    out: list[Consumed] = []
    deadline = time.monotonic() + timeout
    errors = rdkafka.ErrorLog()
    consumer = rdkafka.create(
        Consumer,
        rdkafka.client_config(
            target, errors, **{"group.id": "jbod-demo", "enable.auto.commit": False, "fetch.wait.max.ms": 100}
        ),
    )
    try:
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        while time.monotonic() < deadline:
            batch = await asyncio.to_thread(consumer.consume, 1000, 0.5)
            read = 0
            for m in batch:
                partition, offset = m.partition(), m.offset()
                if m.error() is not None or partition is None or offset is None:
                    continue  # an event (a partition's end), not a record
                out.append(Consumed(TOPIC, partition, offset, m.value()))
                reached[partition] = max(reached.get(partition, -1), offset)
                read += 1
            progress.update(task, completed=min(len(out), len(log.acked)))
            caught_up = all(reached.get(p, -1) >= o for p, o in wanted.items())
            if caught_up and not read:
                break  # everything acknowledged is read and nothing more is coming
    finally:
        await asyncio.to_thread(consumer.close)
    return out


def _end_live(console: Console) -> None:
    """End the line a finished live display leaves open when output is not a terminal."""
    if not console.is_terminal:
        console.line()


def _events_text(events: Sequence[str]) -> Text:
    return Text("\n".join(events[-6:]) if events else "", style="dim")


class _ProductionUnderFailure:
    """Step 3: production paced over the given seconds (idempotent, acks=all), and the disk under
    partition 0's leader failed once a share of the records is acknowledged; shown live (progress,
    the narrated events, the partitions as leadership moves)."""

    def __init__(
        self, layout: ClusterLayout, target: KafkaTarget, *, topic: dict[str, Any], aliases: dict[str, str]
    ) -> None:
        self.layout = layout
        self.target = target
        self.errors = rdkafka.ErrorLog()
        self.statistics = rdkafka.ProducerStatistics()
        self.topic = topic
        self.aliases = aliases
        self.log = DeliveryLog()
        self.events: list[str] = []
        self.progress = _progress()
        self.fail_task: asyncio.Task[disk_faults.DiskFailure] | None = None
        self.started = time.monotonic()

    def event(self, message: str) -> None:
        self.events.append(f"{time.monotonic() - self.started:6.2f} s  {message}")

    def view(self) -> RenderableType:
        return Group(
            self.progress, _events_text(self.events), tables.partitions_table(self.topic, self.aliases)
        )

    async def fail_leader_disk(self) -> disk_faults.DiskFailure:
        event = self.event
        broker_id, index = await _pick_disk(self.layout, self.target)
        event(f"Partition 0 is led by broker {broker_id}; its replica is on disk-{index}: failing that disk")
        result = await asyncio.to_thread(
            disk_faults.fail_disk, self.layout.root, broker_id, str(index), wait=15.0, report=event
        )
        if result.offline_after is None:
            event("The controller did not show the dir offline within 15 s")
        else:
            event(f"The controller took the dir offline {result.offline_after:.2f} s after the failure")
        for move in result.leader_moves:
            event(f"Leader of {move.topic}-{move.partition} moved {move.old_leader} → {move.new_leader}")
        return result

    async def run(
        self, *, records: int, seconds: float, console: Console
    ) -> tuple[disk_faults.DiskFailure | None, float]:
        """(the disk failure, or None if production ended before it; the seconds production took)."""
        from confluent_kafka import Producer

        log, progress = self.log, self.progress
        produce_task_id = progress.add_task("Producing", total=records)
        failure: disk_faults.DiskFailure | None = None
        producer = rdkafka.create(
            Producer,
            rdkafka.client_config(
                self.target,
                self.errors,
                **{"acks": "all", "enable.idempotence": True, "stats_cb": self.statistics},
                **PRODUCER_SETTINGS,
            ),
        )
        with Live(self.view(), console=console, refresh_per_second=8, transient=False) as live:
            produce = asyncio.create_task(
                _produce(
                    producer,
                    log,
                    records=records,
                    seconds=seconds,
                    keep_going=lambda: awaits_failover(log, self.fail_task),
                )
            )
            produce_done_at: list[float] = []
            produce.add_done_callback(lambda _task: produce_done_at.append(time.monotonic()))
            last_poll = 0.0
            while not produce.done() or (self.fail_task is not None and not self.fail_task.done()):
                await asyncio.sleep(0.1)
                progress.update(
                    produce_task_id, total=max(records, log.sent), completed=len(log.acked) + len(log.failed)
                )
                if self.fail_task is None and len(log.acked) >= records * FAIL_AFTER_FRACTION:
                    self.fail_task = asyncio.create_task(self.fail_leader_disk())
                if time.monotonic() - last_poll > 0.5:
                    last_poll = time.monotonic()
                    with contextlib.suppress(ClientError):
                        self.topic = await _describe(self.layout)
                live.update(self.view())
            progress.update(
                produce_task_id, total=max(records, log.sent), completed=len(log.acked) + len(log.failed)
            )
            await produce
            produce_seconds = (produce_done_at or [time.monotonic()])[0] - self.started
            if self.fail_task is not None:
                failure = await self.fail_task
            self.topic = await _describe(self.layout)
            live.update(self.view())
        _end_live(console)
        return failure, produce_seconds


async def _scenario(layout: ClusterLayout, *, records: int, seconds: float, console: Console) -> DemoReport:
    say = tables.bullets(console)
    target = kafka_clients.admin_target(layout)
    console.print(Rule(f"2. Create topic {TOPIC}"))
    supervisor.create_topic(
        layout,
        TOPIC,
        partitions=PARTITIONS,
        replication_factor=REPLICATION_FACTOR,
        configs={"min.insync.replicas": str(MIN_INSYNC_REPLICAS)},
    )
    topic = await _await_placed(layout)
    aliases = status.status(layout.root).aliases()
    console.print(tables.partitions_table(topic, aliases))

    console.print(
        Rule(f"3. Produce {records:,} records of {RECORD_BYTES} B in {seconds:g} s, idempotent; fail a disk")
    )
    production = _ProductionUnderFailure(layout, target, topic=topic, aliases=aliases)
    failure, produce_seconds = await production.run(records=records, seconds=seconds, console=console)
    log = production.log
    retries = production.statistics.retries
    if retries:
        say(f"The producer (librdkafka) retried {retries} requests; being idempotent, it wrote nothing twice")
    if production.errors.fatal is not None:
        say(f"The producer failed: {production.errors.fatal}")
    if failure is None:
        say("Production finished before the disk failure was triggered (too few records?)")

    console.print(Rule("4. Consume everything back and verify"))
    consume_progress = _progress()
    with Live(consume_progress, console=console, refresh_per_second=8):
        consumed = await _consume(target, log, consume_progress, timeout=30.0)
    _end_live(console)
    verification = log.history.check(consumed)

    failover = failover_seconds(log, failure)
    if failure is not None and failover is None:
        say("No write to a partition whose leader moved was acknowledged: no failover figure")
    return DemoReport(
        records=records,
        log=log,
        verification=verification,
        failure=failure,
        failover_seconds=failover,
        produce_seconds=produce_seconds,
        final_topic=production.topic,
        retries=production.statistics.retries,
    )


def verdict(report: Report) -> str:
    """The verdict line (rich markup), counting the duplicates read back."""
    if report.ok:
        return f"[green]{VERDICT_OK}[/], duplicates {report.duplicates:,}"
    return f"[red]FAILED[/] (see below), duplicates {report.duplicates:,}"


def summary_table(report: DemoReport) -> Table:
    """The summary: labels of at most 16 characters, so that it fits 80 columns with the verdict
    (`verdict`) on one line."""
    v = report.verification
    log = report.log
    table = Table(title="Summary", title_justify="left", show_header=False)
    table.add_column("what", no_wrap=True)
    table.add_column("value")
    rate = len(log.acked) / report.produce_seconds if report.produce_seconds > 0 else 0.0
    table.add_row("sent", f"{log.sent:,} records")
    table.add_row("acknowledged", f"{len(log.acked):,} ({rate:,.0f} rec/s)")
    table.add_row("not acknowledged", f"{len(log.failed):,}")
    table.add_row("producer retries", f"{report.retries:,} (requests librdkafka sent again)")
    table.add_row("consumed", f"{v.consumed:,} ({v.unique:,} distinct)")
    if report.failure is not None:
        f = report.failure
        table.add_row("failed disk", f"broker {f.broker_id} disk-{f.index} ({f.directory_id})")
        table.add_row(
            "offline after",
            "not in time" if f.offline_after is None else f"{f.offline_after:.2f} s (at the controller)",
        )
        moves = ", ".join(f"{m.topic}-{m.partition}: {m.old_leader}→{m.new_leader}" for m in f.leader_moves)
        table.add_row("leaders moved", moves or "none")
    table.add_row(
        "failover",
        "-"
        if report.failover_seconds is None
        else f"{report.failover_seconds:.2f} s (disk failure → first ack on a new leader)",
    )
    table.add_row("verdict", verdict(v))
    return table


def main(*, root: Path | None, records: int, keep: bool, seconds: float = PRODUCE_SECONDS) -> None:
    """Run the whole demo; `DemoError` (exit status 1) if the verification fails."""
    console = Console()
    say = tables.bullets(console)
    begun = time.monotonic()
    directory = root if root is not None else Path(tempfile.mkdtemp(prefix="jbod-demo-"))
    console.print(Rule("1. Start a local cluster: 1 controller, 3 brokers x 3 disks"))
    result = supervisor.up(directory, brokers=3, disks=3, fresh=True, report=say)
    layout = result.layout
    say(f"Up in {result.seconds:.1f} s ({layout.root})")
    problems: list[str] = []
    finished = False
    try:
        report = asyncio.run(_scenario(layout, records=records, seconds=seconds, console=console))
        console.print(tables.partitions_table(report.final_topic, status.status(layout.root).aliases()))
        console.print(summary_table(report))
        problems = report.verification.problems()
        for problem in problems:
            console.print(f"[red]✗[/] {problem}", highlight=False)
        if report.failure is not None:
            console.print(Rule("5. Restore the disk"))
            f = report.failure
            restored = disk_faults.restore_disk(layout.root, f.broker_id, str(f.index), report=say)
            say(f"Broker {f.broker_id} is unfenced again with all dirs online ({restored.seconds:.1f} s)")
        finished = True
    finally:
        ok = finished and not problems
        if keep:
            say(
                f"Kept the cluster running in {layout.root} (stop it with: jbodctl local down --dir {layout.root})"
            )
        else:
            supervisor.down(layout.root, purge=ok)
            say("Stopped the cluster" + ("" if ok else f"; kept {layout.root} with its logs"))
    say(f"The demo took {time.monotonic() - begun:.1f} s")
    if problems:
        raise DemoError("the demo found problems: " + "; ".join(problems))
