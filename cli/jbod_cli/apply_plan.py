"""`jbodctl apply-plan PLAN.json`: run a `jbod-pipeline plan`: its reassignments between brokers
through the controller, then its moves within brokers through the brokers' move API.

Guarantees:
* The plan file is validated whole before anything is sent (`load_plan`): a JSON object with
  `moves`, each `{topic, partition, brokerId, fromDirectoryId, toDirectoryId, bytes}` with the
  right types, Uuids in their canonical form, `from != to`, and no replica twice. A bad file is one
  `PlanError` line naming the move and field.
* Brokers are found through the controller (`GET /v1/brokers` listeners); each broker gets at
  most `max_in_flight` moves at once, each started with `POST /v1/log-dirs/move` and the
  `maxBytesPerSecond` throttle, and is done when `GET /v1/log-dirs` shows the replica in its
  destination and no future replica of it (`future: true`) anywhere.
* A plan with moves between brokers (`jbod-pipeline plan --across-brokers`: its
  `reassignments`) is carried out first, through partition reassignments
  (`jbod_cli.plan_reassignments`, throttled by the same `--max-bytes-per-second`), then its
  intra-broker moves; both parts are validated before anything is sent.
* Safe to re-run: a move whose replica already sits in its destination is reported `done`
  without a request; one whose future replica is already copying is waited for, not restarted;
  one whose replica is in neither dir is `skipped` (the plan is stale), never forced.
* A move fails (`failed`, with the reason) on a non-zero `errorCode`, an unreachable or unknown
  broker, a move the broker reverted (no future replica and still in its source dir after it
  had started), or the deadline. The result lists one outcome per move, in plan order.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from jbod_cli import commands, plan_reassignments
from jbod_cli.plan_reassignments import PlanError, PlannedReassignment, ReassignOutcome
from jbod_client.broker import BrokerClient, describe_error
from jbod_client.controller import ClientError
from jbod_client.metadata import ClusterMetadata
from jbod_core.ids import Uuid

_FIELDS = {
    "topic": str,
    "partition": int,
    "brokerId": int,
    "fromDirectoryId": str,
    "toDirectoryId": str,
    "bytes": int,
}


@dataclass(frozen=True, slots=True)
class PlannedMove:
    topic: str
    partition: int
    broker_id: int
    from_dir: str
    to_dir: str
    size_bytes: int

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition} on broker {self.broker_id}"


@dataclass(slots=True)
class MoveOutcome:
    move: PlannedMove
    status: str = "pending"  # done | already-done | failed | skipped | pending
    detail: str = ""
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        m = self.move
        return {
            "topic": m.topic,
            "partition": m.partition,
            "brokerId": m.broker_id,
            "fromDirectoryId": m.from_dir,
            "toDirectoryId": m.to_dir,
            "bytes": m.size_bytes,
            "status": self.status,
            "detail": self.detail,
            "seconds": round(self.seconds, 3),
        }


def parse_plan(document: Any) -> list[PlannedMove]:
    if not isinstance(document, dict) or not isinstance(document.get("moves"), list):
        raise PlanError("the plan must be a JSON object with a list 'moves'")
    moves: list[PlannedMove] = []
    seen: set[tuple[str, int, int]] = set()
    for i, item in enumerate(document["moves"]):
        where = f"moves[{i}]"
        if not isinstance(item, dict):
            raise PlanError(f"{where} is not an object")
        for name, kind in _FIELDS.items():
            if name not in item:
                raise PlanError(f"{where} is missing field {name}")
            value = item[name]
            if type(value) is not kind:
                raise PlanError(f"{where}.{name} must be {'an integer' if kind is int else 'a string'}")
        if not item["topic"]:
            raise PlanError(f"{where}.topic is empty")
        if item["partition"] < 0 or item["bytes"] < 0:
            raise PlanError(f"{where}: partition and bytes must not be negative")
        for name in ("fromDirectoryId", "toDirectoryId"):
            try:
                Uuid.parse(item[name])
            except ValueError as exc:
                raise PlanError(f"{where}.{name}: {exc}") from exc
        if item["fromDirectoryId"] == item["toDirectoryId"]:
            raise PlanError(f"{where} moves a replica to the dir it is in")
        key = (item["topic"], item["partition"], item["brokerId"])
        if key in seen:
            raise PlanError(
                f"{where} moves {item['topic']}-{item['partition']} on broker {item['brokerId']} a second time"
            )
        seen.add(key)
        moves.append(
            PlannedMove(
                item["topic"],
                item["partition"],
                item["brokerId"],
                item["fromDirectoryId"],
                item["toDirectoryId"],
                item["bytes"],
            )
        )
    return moves


def load_plan(path: Path) -> list[PlannedMove]:
    """The intra-broker moves of the plan file at `path` (`load_whole_plan` adds the reassignments)."""
    return load_whole_plan(path)[0]


def load_whole_plan(path: Path) -> tuple[list[PlannedMove], list[PlannedReassignment]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise PlanError(f"cannot read {path}: {reason}") from exc
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanError(f"{path} is not JSON: line {exc.lineno}: {exc.msg}") from exc
    try:
        return parse_plan(document), plan_reassignments.parse_reassignments(document)
    except PlanError as exc:
        raise PlanError(f"{path}: {exc}") from exc


def _locate(dirs: list[dict[str, Any]], move: PlannedMove) -> tuple[str | None, bool]:
    """(the dir holding the current replica, whether a future replica exists) per `/v1/log-dirs`."""
    current, future = None, False
    for d in dirs:
        for r in d.get("replicas") or []:
            if r.get("topic") == move.topic and r.get("partition") == move.partition:
                if r.get("future"):
                    future = True
                else:
                    current = d.get("directoryId")
    return current, future


@dataclass(frozen=True, slots=True)
class _Pacing:
    """How each broker's moves are paced: at most `max_in_flight` at once, each throttled to `rate`
    bytes per second (None: unthrottled), polled every `poll_interval` seconds until `deadline`
    (`time.monotonic`)."""

    max_in_flight: int
    rate: int | None
    poll_interval: float
    deadline: float


class _BrokerRunner:
    def __init__(
        self,
        client: BrokerClient,
        moves: list[MoveOutcome],
        *,
        pacing: _Pacing,
        report: Callable[[MoveOutcome], None],
    ) -> None:
        self.client = client
        self.queue = list(moves)
        self.pacing = pacing
        self.report = report
        self.started: dict[int, float] = {}

    def _finish(self, outcome: MoveOutcome, status: str, detail: str = "") -> None:
        outcome.status, outcome.detail = status, detail
        start = self.started.get(id(outcome))
        outcome.seconds = time.monotonic() - start if start is not None else 0.0
        self.report(outcome)

    async def run(self) -> None:
        active: list[MoveOutcome] = []
        first_look = True
        while self.queue or active:
            if time.monotonic() > self.pacing.deadline:
                for outcome in [*active, *self.queue]:
                    self._finish(outcome, "failed", "timed out waiting for the move")
                return
            try:
                dirs = await self.client.log_dirs()
            except ClientError as exc:
                for outcome in [*active, *self.queue]:
                    self._finish(outcome, "failed", str(exc))
                return
            still: list[MoveOutcome] = []
            for outcome in active:
                if not self._settled(outcome, dirs):
                    still.append(outcome)
            active = still
            while self.queue and len(active) < self.pacing.max_in_flight:
                outcome = self.queue.pop(0)
                if await self._start(outcome, dirs, first_look=first_look):
                    active.append(outcome)
            first_look = False
            if active:
                await asyncio.sleep(self.pacing.poll_interval)

    def _settled(self, outcome: MoveOutcome, dirs: list[dict[str, Any]]) -> bool:
        """Finish an active move that is done or that the broker reverted; False while it runs."""
        current, future = _locate(dirs, outcome.move)
        if current == outcome.move.to_dir and not future:
            self._finish(outcome, "done")
            return True
        if not future and current == outcome.move.from_dir and outcome.detail == "copying":
            self._finish(outcome, "failed", "the broker reverted the move")
            return True
        if future:
            outcome.detail = "copying"
        return False

    async def _start(self, outcome: MoveOutcome, dirs: list[dict[str, Any]], *, first_look: bool) -> bool:
        """Start a queued move, or finish it at once (done, stale or refused); True once it is active."""
        move = outcome.move
        current, future = _locate(dirs, move)
        if current == move.to_dir and not future:
            self._finish(outcome, "already-done" if first_look else "done")
            return False
        if current not in (move.from_dir, move.to_dir):
            where = "not hosted" if current is None else f"in dir {current}"
            self._finish(
                outcome,
                "skipped",
                f"the replica is {where}, not in {move.from_dir}: the plan is stale",
            )
            return False
        self.started[id(outcome)] = time.monotonic()
        if future:
            outcome.detail = "copying"  # a move from an earlier run: wait for it
            return True
        try:
            reply = await self.client.move(
                move.topic, move.partition, move.to_dir, max_bytes_per_second=self.pacing.rate
            )
        except ClientError as exc:
            self._finish(outcome, "failed", str(exc))
            return False
        code = int(reply.get("errorCode", 0))
        if code != 0:
            self._finish(outcome, "failed", describe_error(code, reply.get("errorMessage")))
            return False
        outcome.detail = "started"
        return True


async def apply_plan(  # noqa: PLR0913  the library form of `jbodctl apply-plan`: one keyword per option
    controller_url: str,
    token: str,
    moves: Sequence[PlannedMove],
    *,
    max_in_flight: int = 2,
    max_bytes_per_second: int | None = None,
    poll_interval: float = 1.0,
    timeout: float = 3600.0,
    report: Callable[[MoveOutcome], None] = lambda outcome: None,
    ca_file: Path | None = None,
) -> list[MoveOutcome]:
    """Run `moves` (brokers in parallel, each with at most `max_in_flight` moves at once)."""
    outcomes = [MoveOutcome(m) for m in moves]
    by_broker: dict[int, list[MoveOutcome]] = {}
    for outcome in outcomes:
        by_broker.setdefault(outcome.move.broker_id, []).append(outcome)
    pacing = _Pacing(
        max_in_flight=max_in_flight,
        rate=max_bytes_per_second,
        poll_interval=poll_interval,
        deadline=time.monotonic() + timeout,
    )
    async with ClusterMetadata(controller_url, token=token, ca_file=ca_file) as metadata:
        runners = []
        for broker_id, group in sorted(by_broker.items()):
            try:
                client = await metadata.broker(broker_id)
            except ClientError as exc:
                for outcome in group:
                    outcome.status, outcome.detail = "failed", str(exc)
                    report(outcome)
                continue
            runners.append(_BrokerRunner(client, group, pacing=pacing, report=report).run())
        await asyncio.gather(*runners)
    return outcomes


async def apply_reassignments(  # noqa: PLR0913  the library form of the cross-broker part: one keyword per option
    controller_url: str,
    token: str,
    reassignments: Sequence[PlannedReassignment],
    *,
    max_bytes_per_second: int | None = None,
    poll_interval: float = 1.0,
    timeout: float = 3600.0,
    report: Callable[[ReassignOutcome], None] = lambda outcome: None,
    ca_file: Path | None = None,
) -> list[ReassignOutcome]:
    """Carry out the plan's reassignments (`jbod_cli.plan_reassignments`), before its moves."""
    outcomes = [ReassignOutcome(r) for r in reassignments]
    if outcomes:
        pacing = plan_reassignments.Pacing(
            rate=max_bytes_per_second, poll_interval=poll_interval, deadline=time.monotonic() + timeout
        )
        runner = plan_reassignments.Runner(
            controller_url, token, outcomes, pacing=pacing, report=report, ca_file=ca_file
        )
        await runner.run()
    return outcomes


def register(group: click.Group) -> None:
    """Add `apply-plan` to `jbodctl`."""

    @group.command("apply-plan")
    @click.argument("plan_file", type=click.Path(path_type=Path))
    @click.option(
        "--max-bytes-per-second", type=click.IntRange(min=1), default=None, help="throttle of each move"
    )
    @click.option(
        "--max-in-flight",
        type=click.IntRange(min=1),
        default=2,
        show_default=True,
        help="moves at once per broker",
    )
    @click.option(
        "--poll-interval", type=click.FloatRange(min=0.01), default=1.0, show_default=True, help="seconds"
    )
    @click.option(
        "--timeout",
        type=click.FloatRange(min=0.1),
        default=3600.0,
        show_default=True,
        help="seconds for the whole plan",
    )
    @commands.output_option
    @click.pass_context
    def apply_plan_command(  # noqa: PLR0913  click command: one parameter per option
        ctx: click.Context,
        plan_file: Path,
        max_bytes_per_second: int | None,
        max_in_flight: int,
        poll_interval: float,
        timeout: float,
        output: str | None,
    ) -> None:
        """Run a `jbod-pipeline plan` (plan.json): throttled intra-broker moves, safe to re-run."""
        settings = commands.settings_of(ctx, output)
        try:
            moves, reassignments = load_whole_plan(plan_file)
        except PlanError as exc:
            raise commands.CommandError(str(exc)) from exc
        table = settings.output != "json"

        def report(outcome: MoveOutcome) -> None:
            if table:
                m = outcome.move
                click.echo(
                    f"{outcome.status:>12}  {m.name}: {m.from_dir} -> {m.to_dir} ({m.size_bytes} bytes) {outcome.detail}"
                )

        def report_reassignment(outcome: ReassignOutcome) -> None:
            if table:
                p = outcome.plan
                click.echo(
                    f"{outcome.status:>12}  {p.name}: brokers {','.join(map(str, p.original))} -> "
                    f"{','.join(map(str, p.replicas))} {outcome.detail}"
                )

        started = time.monotonic()
        reassigned = commands.run(
            apply_reassignments(
                settings.controller,
                settings.token(),
                reassignments,
                max_bytes_per_second=max_bytes_per_second,
                poll_interval=poll_interval,
                timeout=timeout,
                report=report_reassignment,
                ca_file=settings.ca_file,
            )
        )
        outcomes = commands.run(
            apply_plan(
                settings.controller,
                settings.token(),
                moves,
                max_in_flight=max_in_flight,
                max_bytes_per_second=max_bytes_per_second,
                poll_interval=poll_interval,
                timeout=max(0.1, timeout - (time.monotonic() - started)),
                report=report,
                ca_file=settings.ca_file,
            )
        )
        if not table:
            click.echo(
                json.dumps([*(o.to_json() for o in reassigned), *(o.to_json() for o in outcomes)], indent=2)
            )
        statuses = [o.status for o in reassigned] + [o.status for o in outcomes]
        counts = {s: statuses.count(s) for s in ("done", "already-done", "skipped", "failed")}
        failed = [o.plan.name + ": " + o.detail for o in reassigned if o.status == "failed"] + [
            o.move.name + ": " + o.detail for o in outcomes if o.status == "failed"
        ]
        if failed:  # the error is the one stderr line (jbodctl's contract); it carries the count
            raise commands.CommandError(f"{len(failed)} of {len(statuses)} steps failed, first: {failed[0]}")
        click.echo("Applied plan: " + ", ".join(f"{n} {s}" for s, n in counts.items()), err=True)
