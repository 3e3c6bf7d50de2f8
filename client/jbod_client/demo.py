"""`jbodctl local demo`: the README's main job, narrated. A disk fails under a partition leader
while a producer writes with acks=-1, leadership moves off the failed disk, and every
acknowledged record is read back.

Steps: `up --fresh` (3 brokers x 3 disks) → create topic `demo` (6 partitions, RF 3,
min.insync.replicas=2) → produce N records of ~1 KB with acks=-1 → take away the disk that holds
the replica of partition 0's leader while production continues → show partitions as leadership
moves → finish producing → consume everything → verify → summary → restore the disk → `down --purge`
(unless `--keep`; a failed verification stops the cluster but keeps its directory and logs).

Guarantees:
* The verdict is `verify`, a pure function of what was acknowledged (partition, sequence number,
  offset), what was consumed, and which records were pending when their partition was retried.
  It fails if an acknowledged record is missing or not at its acknowledged offset, if a
  partition's records are out of order, if a record appears twice without its batch having been
  retried, or if a record was never sent.
* Each record's value starts with `partition:sequence:` so that it can be identified when read.
* The command exits non-zero (`DemoError`) whenever `verify` fails, and never leaves processes
  running unless `--keep` is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
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

from jbod_client import local_cluster, tables
from jbod_client.controller import ClientError
from jbod_core.ids import UNASSIGNED_DIR

TOPIC = "demo"
PARTITIONS = 6
REPLICATION_FACTOR = 3
MIN_INSYNC_REPLICAS = 2
RECORD_BYTES = 1024
FAIL_AFTER_FRACTION = 1 / 3  # take the disk away once this share of the records is acknowledged

RecordId = tuple[int, int]  # (partition, sequence number within the partition)


class DemoError(ClientError):
    """The demo found lost, misplaced, reordered or unexpected records (or could not run)."""


# -- records and their verification (pure) ------------------------------------------------------


def record_value(partition: int, seq: int, *, size: int = RECORD_BYTES) -> bytes:
    """`partition:sequence:` followed by filler up to `size` bytes."""
    head = f"{partition}:{seq:08d}:".encode()
    return head + b"x" * max(0, size - len(head))


def parse_value(value: bytes | None) -> RecordId | None:
    """The (partition, sequence) a demo value carries; None for anything else."""
    if value is None:
        return None
    parts = value.split(b":", 2)
    if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    return int(parts[0]), int(parts[1])


@dataclass(frozen=True)
class Consumed:
    partition: int
    offset: int
    value: bytes | None


@dataclass(frozen=True)
class Verification:
    acknowledged: int
    consumed: int
    unique: int
    lost: tuple[RecordId, ...]  # acknowledged, never read
    misplaced: tuple[tuple[RecordId, int], ...]  # acknowledged, not read at its acknowledged offset
    out_of_order: tuple[tuple[int, int, int], ...]  # (partition, offset, sequence) read after a later one
    allowed_duplicates: int  # extra copies of records that were pending when their partition retried
    unexpected_duplicates: tuple[RecordId, ...]
    foreign: tuple[tuple[int, int], ...]  # (partition, offset) of values the demo never sent there

    @property
    def ok(self) -> bool:
        return not (
            self.lost or self.misplaced or self.out_of_order or self.unexpected_duplicates or self.foreign
        )

    def problems(self) -> list[str]:
        found = []
        if self.lost:
            found.append(f"{len(self.lost)} acknowledged records missing (first: {_rid(self.lost[0])})")
        if self.misplaced:
            rid, offset = self.misplaced[0]
            found.append(
                f"{len(self.misplaced)} acknowledged records not at their acknowledged offset "
                f"(first: {_rid(rid)}, acknowledged at offset {offset})"
            )
        if self.out_of_order:
            partition, offset, seq = self.out_of_order[0]
            found.append(
                f"{len(self.out_of_order)} records out of order (first: partition {partition} "
                f"offset {offset} holds sequence {seq} after a later one)"
            )
        if self.unexpected_duplicates:
            found.append(
                f"{len(self.unexpected_duplicates)} records duplicated although their batch was never "
                f"retried (first: {_rid(self.unexpected_duplicates[0])})"
            )
        if self.foreign:
            partition, offset = self.foreign[0]
            found.append(
                f"{len(self.foreign)} records the demo did not send (first: partition {partition} offset {offset})"
            )
        return found


def _rid(rid: RecordId) -> str:
    return f"partition {rid[0]} sequence {rid[1]}"


def verify(
    acked: Mapping[RecordId, int],
    consumed: Iterable[Consumed],
    *,
    sent: Mapping[int, int],
    retried: set[RecordId],
) -> Verification:
    """Check what was read against what was acknowledged. `acked`: record → acknowledged offset;
    `sent`: partition → number of records sent to it; `retried`: records pending in their
    partition when it was retried (the only ones that may appear twice)."""
    by_offset: dict[tuple[int, int], RecordId | None] = {}
    copies: dict[RecordId, int] = Counter()
    foreign: list[tuple[int, int]] = []
    for record in consumed:
        rid = parse_value(record.value)
        if rid is None or rid[0] != record.partition or rid[1] >= sent.get(record.partition, 0):
            foreign.append((record.partition, record.offset))
            rid = None
        if (record.partition, record.offset) in by_offset:
            continue  # the same offset read twice is one record, not a duplicate
        by_offset[(record.partition, record.offset)] = rid
        if rid is not None:
            copies[rid] += 1
    lost = []
    misplaced = []
    for rid, offset in sorted(acked.items()):
        if copies.get(rid, 0) == 0:
            lost.append(rid)
        elif by_offset.get((rid[0], offset)) != rid:
            misplaced.append((rid, offset))
    out_of_order = []
    highest: dict[int, int] = {}
    seen: set[RecordId] = set()
    for (partition, offset), rid in sorted(by_offset.items()):
        if rid is None or rid in seen:
            continue  # order is judged on first copies; later copies are duplicates
        seen.add(rid)
        if rid[1] < highest.get(partition, -1):
            out_of_order.append((partition, offset, rid[1]))
        highest[partition] = max(highest.get(partition, -1), rid[1])
    allowed = sum(n - 1 for rid, n in copies.items() if n > 1 and rid in retried)
    unexpected = sorted(rid for rid, n in copies.items() if n > 1 and rid not in retried)
    return Verification(
        acknowledged=len(acked),
        consumed=len(by_offset),
        unique=len(copies),
        lost=tuple(lost),
        misplaced=tuple(misplaced),
        out_of_order=tuple(out_of_order),
        allowed_duplicates=allowed,
        unexpected_duplicates=tuple(unexpected),
        foreign=tuple(foreign),
    )


@dataclass
class DeliveryLog:
    """What the producer reported, record by record (filled by future callbacks and hooks)."""

    clock: Callable[[], float] = time.monotonic
    next_seq: dict[int, int] = field(default_factory=dict)
    pending: dict[int, set[int]] = field(default_factory=dict)
    acked: dict[RecordId, int] = field(default_factory=dict)
    ack_times: dict[int, list[float]] = field(default_factory=dict)
    failed: dict[RecordId, int] = field(default_factory=dict)
    retried: set[RecordId] = field(default_factory=set)
    retry_codes: Counter[int] = field(default_factory=Counter)

    def send(self, partition: int) -> int:
        seq = self.next_seq.get(partition, 0)
        self.next_seq[partition] = seq + 1
        self.pending.setdefault(partition, set()).add(seq)
        return seq

    def on_ack(self, partition: int, seq: int, offset: int) -> None:
        self.pending.get(partition, set()).discard(seq)
        self.acked[(partition, seq)] = offset
        self.ack_times.setdefault(partition, []).append(self.clock())

    def on_failure(self, partition: int, seq: int, code: int) -> None:
        self.pending.get(partition, set()).discard(seq)
        self.failed[(partition, seq)] = code

    def on_retry(self, topic: str, partition: int, code: int) -> None:
        if topic != TOPIC:
            return
        self.retry_codes[code] += 1
        self.retried.update((partition, seq) for seq in self.pending.get(partition, ()))

    @property
    def sent(self) -> int:
        return sum(self.next_seq.values())

    def first_ack_after(self, partitions: Iterable[int], moment: float) -> float | None:
        """The earliest acknowledgement at or after `moment` in any of `partitions`."""
        times = [t for p in partitions for t in self.ack_times.get(p, []) if t >= moment]
        return min(times) if times else None


# -- the scenario --------------------------------------------------------------------------------


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
    verification: Verification
    failure: local_cluster.DiskFailure | None
    failover_seconds: float | None
    produce_seconds: float
    final_topic: dict[str, Any]


def _say(console: Console) -> Callable[[str], None]:
    def say(message: str) -> None:
        console.print(f"[dim]•[/] {message}", highlight=False)

    return say


async def _describe(layout: local_cluster.ClusterLayout) -> dict[str, Any]:
    def call() -> dict[str, Any]:
        with layout.controller(timeout=5.0) as client:
            return client.describe_topic(TOPIC)

    return await asyncio.to_thread(call)


async def _await_placed(layout: local_cluster.ClusterLayout, *, timeout: float = 20.0) -> dict[str, Any]:
    """Wait until every replica of the topic sits in a real dir and every partition has a leader."""
    deadline = time.monotonic() + timeout
    unassigned = str(UNASSIGNED_DIR)
    while True:
        topic = await _describe(layout)
        parts = topic["partitions"]
        if all(p["leader"] >= 0 and unassigned not in p["directories"] for p in parts):
            return topic
        if time.monotonic() > deadline:
            raise DemoError(f"the replicas of {TOPIC} were not placed in dirs within {timeout:.0f} s")
        await asyncio.sleep(0.2)


async def _pick_disk(layout: local_cluster.ClusterLayout, token: str) -> tuple[int, int]:
    """(broker, disk index) of the replica of partition 0 on its leader, from the broker's log dirs."""
    from jbod_client.broker import BrokerClient

    topic = await _describe(layout)
    leader = int(topic["partitions"][0]["leader"])
    if leader < 0:
        raise DemoError(f"partition {TOPIC}-0 has no leader")
    broker = layout.broker(leader)
    async with BrokerClient(broker.url, token=token, timeout=5.0) as client:
        dirs = await client.log_dirs()
    for d in dirs:
        if any(r["topic"] == TOPIC and int(r["partition"]) == 0 for r in d["replicas"]):
            _broker, index = local_cluster.resolve_disk(layout, leader, d["path"])
            return leader, index
    raise DemoError(f"broker {leader} does not list {TOPIC}-0 in any of its log dirs")


async def _produce(producer: Any, log: DeliveryLog, *, records: int) -> None:
    from jbod_client.producer import ProduceError

    def done(partition: int, seq: int) -> Callable[[asyncio.Future[Any]], None]:
        def callback(future: asyncio.Future[Any]) -> None:
            if future.cancelled():
                log.on_failure(partition, seq, -1)
            elif (exc := future.exception()) is not None:
                log.on_failure(partition, seq, int(getattr(exc, "code", -1)))
            else:
                log.on_ack(partition, seq, int(future.result().offset))

        return callback

    for i in range(records):
        partition = i % PARTITIONS
        seq = log.send(partition)
        try:
            future = await producer.send(TOPIC, record_value(partition, seq), partition=partition)
        except ProduceError as exc:
            log.on_failure(partition, seq, exc.code)
            continue
        future.add_done_callback(done(partition, seq))
    await producer.flush()


async def _consume(
    layout: local_cluster.ClusterLayout, token: str, log: DeliveryLog, progress: Progress, *, timeout: float
) -> list[Consumed]:
    from jbod_client.consumer import Consumer

    wanted: dict[int, int] = {}
    for (partition, _seq), offset in log.acked.items():
        wanted[partition] = max(wanted.get(partition, -1), offset)
    task = progress.add_task("Consuming", total=len(log.acked))
    reached: dict[int, int] = {}
    out: list[Consumed] = []
    deadline = time.monotonic() + timeout
    consumer = Consumer(layout.controller_url, token=token, topic=TOPIC, start="earliest")
    try:
        while time.monotonic() < deadline:
            batch = await consumer.poll(timeout=1.0)
            for r in batch:
                out.append(Consumed(int(r.partition), int(r.offset), r.value))
                reached[r.partition] = max(reached.get(r.partition, -1), int(r.offset))
            progress.update(task, completed=min(len(out), len(log.acked)))
            caught_up = all(reached.get(p, -1) >= o for p, o in wanted.items())
            if caught_up and not batch:
                break  # everything acknowledged is read and nothing more is coming
    finally:
        await consumer.close()
    return out


def _end_live(console: Console) -> None:
    """End the line a finished live display leaves open when output is not a terminal."""
    if not console.is_terminal:
        console.line()


def _events_text(events: Sequence[str]) -> Text:
    return Text("\n".join(events[-6:]) if events else "", style="dim")


async def _scenario(layout: local_cluster.ClusterLayout, *, records: int, console: Console) -> DemoReport:
    from jbod_client.producer import Producer

    say = _say(console)
    token = layout.admin_token()
    console.print(Rule(f"2. Create topic {TOPIC}"))
    local_cluster.create_topic(
        layout,
        TOPIC,
        partitions=PARTITIONS,
        replication_factor=REPLICATION_FACTOR,
        configs={"min.insync.replicas": str(MIN_INSYNC_REPLICAS)},
    )
    topic = await _await_placed(layout)
    aliases = local_cluster.status(layout.root).aliases()
    console.print(tables.partitions_table(topic, aliases))

    console.print(
        Rule(f"3. Produce {records:,} records of {RECORD_BYTES} B with acks=-1; fail a disk midway")
    )
    log = DeliveryLog()
    events: list[str] = []
    progress = _progress()
    produce_task_id = progress.add_task("Producing", total=records)
    failure: local_cluster.DiskFailure | None = None
    fail_task: asyncio.Task[local_cluster.DiskFailure] | None = None
    started = time.monotonic()

    def event(message: str) -> None:
        events.append(f"{time.monotonic() - started:6.2f} s  {message}")

    async def fail_leader_disk() -> local_cluster.DiskFailure:
        broker_id, index = await _pick_disk(layout, token)
        event(f"Partition 0 is led by broker {broker_id}; its replica is on disk-{index}: failing that disk")
        result = await asyncio.to_thread(
            local_cluster.fail_disk, layout.root, broker_id, str(index), wait=15.0, report=event
        )
        if result.offline_after is None:
            event("The controller did not show the dir offline within 15 s")
        else:
            event(f"The controller took the dir offline {result.offline_after:.2f} s after the failure")
        for move in result.leader_moves:
            event(f"Leader of {move.topic}-{move.partition} moved {move.old_leader} → {move.new_leader}")
        return result

    def view() -> RenderableType:
        return Group(progress, _events_text(events), tables.partitions_table(topic, aliases))

    producer = Producer(
        layout.controller_url, token=token, acks=-1, delivery_timeout_ms=30_000, request_timeout_ms=10_000
    )
    producer.on_retry.append(log.on_retry)
    with Live(view(), console=console, refresh_per_second=8, transient=False) as live:
        produce = asyncio.create_task(_produce(producer, log, records=records))
        produce_done_at: list[float] = []
        produce.add_done_callback(lambda _task: produce_done_at.append(time.monotonic()))
        last_poll = 0.0
        while not produce.done() or (fail_task is not None and not fail_task.done()):
            await asyncio.sleep(0.1)
            progress.update(produce_task_id, completed=len(log.acked) + len(log.failed))
            if fail_task is None and len(log.acked) >= records * FAIL_AFTER_FRACTION:
                fail_task = asyncio.create_task(fail_leader_disk())
            if time.monotonic() - last_poll > 0.5:
                last_poll = time.monotonic()
                with contextlib.suppress(ClientError):
                    topic = await _describe(layout)
            live.update(view())
        progress.update(produce_task_id, completed=len(log.acked) + len(log.failed))
        try:
            await produce
        finally:
            await producer.close()
        produce_seconds = (produce_done_at or [time.monotonic()])[0] - started
        if fail_task is not None:
            failure = await fail_task
        topic = await _describe(layout)
        live.update(view())
    _end_live(console)
    if log.retry_codes:
        codes = ", ".join(f"{code} x{n}" for code, n in sorted(log.retry_codes.items()))
        say(f"The producer retried {sum(log.retry_codes.values())} times (errorCode x count: {codes})")
    if failure is None:
        say("Production finished before the disk failure was triggered (too few records?)")

    console.print(Rule("4. Consume everything back and verify"))
    consume_progress = _progress()
    with Live(consume_progress, console=console, refresh_per_second=8):
        consumed = await _consume(layout, token, log, consume_progress, timeout=30.0)
    _end_live(console)
    verification = verify(log.acked, consumed, sent=log.next_seq, retried=log.retried)

    failover: float | None = None
    if failure is not None and failure.offline_after is not None:
        moved = {m.partition for m in failure.leader_moves if m.new_leader >= 0}
        first = log.first_ack_after(moved, failure.failed_at + failure.offline_after)
        failover = None if first is None else first - failure.failed_at
    return DemoReport(
        records=records,
        log=log,
        verification=verification,
        failure=failure,
        failover_seconds=failover,
        produce_seconds=produce_seconds,
        final_topic=topic,
    )


def summary_table(report: DemoReport) -> Table:
    v = report.verification
    log = report.log
    table = Table(title="Summary", title_justify="left", show_header=False)
    table.add_column("what")
    table.add_column("value")
    rate = len(log.acked) / report.produce_seconds if report.produce_seconds > 0 else 0.0
    table.add_row("records produced (sent)", f"{log.sent:,}")
    table.add_row("records acknowledged", f"{len(log.acked):,} ({rate:,.0f} rec/s)")
    table.add_row("records failed (not acknowledged)", f"{len(log.failed):,}")
    table.add_row("producer retries", f"{sum(log.retry_codes.values()):,}")
    table.add_row("records consumed", f"{v.consumed:,} ({v.unique:,} distinct)")
    table.add_row("duplicates from retried batches", f"{v.allowed_duplicates:,}")
    if report.failure is not None:
        f = report.failure
        table.add_row("failed disk", f"broker {f.broker_id} disk-{f.index} ({f.directory_id})")
        table.add_row(
            "dir offline at the controller after",
            "not in time" if f.offline_after is None else f"{f.offline_after:.2f} s",
        )
        moves = ", ".join(f"{m.topic}-{m.partition}: {m.old_leader}→{m.new_leader}" for m in f.leader_moves)
        table.add_row("leaders moved", moves or "none")
    table.add_row(
        "failover (disk failure → first acknowledged write on a new leader)",
        "-" if report.failover_seconds is None else f"{report.failover_seconds:.2f} s",
    )
    verdict = "[green]every acknowledged record read back, in order[/]" if v.ok else "[red]FAILED[/]"
    table.add_row("verdict", verdict)
    return table


def main(*, root: Path | None, records: int, keep: bool) -> None:
    """Run the whole demo; `DemoError` (exit status 1) if the verification fails."""
    console = Console()
    say = _say(console)
    begun = time.monotonic()
    directory = root if root is not None else Path(tempfile.mkdtemp(prefix="jbod-demo-"))
    console.print(Rule("1. Start a local cluster: 1 controller, 3 brokers x 3 disks"))
    result = local_cluster.up(directory, brokers=3, disks=3, fresh=True, report=say)
    layout = result.layout
    say(f"Up in {result.seconds:.1f} s ({layout.root})")
    problems: list[str] = []
    finished = False
    try:
        report = asyncio.run(_scenario(layout, records=records, console=console))
        console.print(
            tables.partitions_table(report.final_topic, local_cluster.status(layout.root).aliases())
        )
        console.print(summary_table(report))
        problems = report.verification.problems()
        for problem in problems:
            console.print(f"[red]✗[/] {problem}", highlight=False)
        if report.failure is not None:
            console.print(Rule("5. Restore the disk"))
            f = report.failure
            restored = local_cluster.restore_disk(layout.root, f.broker_id, str(f.index), report=say)
            say(f"Broker {f.broker_id} is unfenced again with all dirs online ({restored.seconds:.1f} s)")
        finished = True
    finally:
        ok = finished and not problems
        if keep:
            say(
                f"Kept the cluster running in {layout.root} (stop it with: jbodctl local down --dir {layout.root})"
            )
        else:
            local_cluster.down(layout.root, purge=ok)
            say("Stopped the cluster" + ("" if ok else f"; kept {layout.root} with its logs"))
    say(f"The demo took {time.monotonic() - begun:.1f} s")
    if problems:
        raise DemoError("the demo found problems: " + "; ".join(problems))
