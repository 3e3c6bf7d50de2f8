"""`jbodctl reassign start|list|cancel`: move partitions' replicas between brokers, over Kafka's
protocol (AlterPartitionReassignments, ListPartitionReassignments; log dirs with
AlterReplicaLogDirs), as `kafka-reassign-partitions.sh` does.

Guarantees:
* Targets come as `TOPIC:PARTITION=B1,B2,...` arguments or `--file` in Kafka's reassignment JSON
  (`{"version": 1, "partitions": [{"topic", "partition", "replicas", "log_dirs"?}]}`, what
  `kafka-reassign-partitions.sh --generate` and `jbod-pipeline plan --across-brokers` write); a
  malformed argument or file is one line and nothing is sent.
* A `log_dirs` entry other than `any` is sent first as AlterReplicaLogDirs to that broker, so the
  replica is created in (or moved to) that dir; REPLICA_NOT_AVAILABLE there only means the
  broker does not host it yet (it remembers the dir, as Kafka's brokers do).
* Each partition's result is shown; if any was refused the command ends with one line naming
  how many and exits non-zero (the others were started: reassignments are per partition).
* `--wait` polls ListPartitionReassignments until none of the started partitions is listed
  (done), or `--timeout` passes (non-zero exit, naming those still running).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.markup import escape
from rich.table import Table

from jbod_cli import commands
from jbod_cli.commands import CommandError, Settings, output_option
from jbod_core.errors import ErrorCode

if TYPE_CHECKING:
    from jbod_client.kafka_admin import KafkaAdmin

_POLL_S = 0.5


@dataclass(frozen=True, slots=True)
class Target:
    topic: str
    partition: int
    replicas: tuple[int, ...] | None  # None: cancel
    log_dirs: tuple[str, ...] = ()  # per replica: a path, or "any"

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


def _partition_name(text: str, what: str) -> tuple[str, int]:
    topic, sep, index = text.rpartition(":")
    if not sep or not topic or not index.isdigit():
        raise CommandError(f"{what} {text!r}: expected TOPIC:PARTITION")
    return topic, int(index)


def parse_target(text: str) -> Target:
    """`TOPIC:PARTITION=B1,B2,...` as a `Target`."""
    name, sep, replicas = text.partition("=")
    if not sep:
        raise CommandError(f"target {text!r}: expected TOPIC:PARTITION=BROKER,BROKER,...")
    topic, partition = _partition_name(name, "target")
    try:
        brokers = tuple(int(b) for b in replicas.split(","))
    except ValueError:
        raise CommandError(f"target {text!r}: the replicas must be broker ids separated by commas") from None
    return Target(topic, partition, brokers)


def _file_entry(entry: Any, index: int, source: str) -> Target:
    where = f"{source}: partitions[{index}]"
    if not isinstance(entry, dict):
        raise CommandError(f"{where} is not an object")
    topic, partition, replicas = entry.get("topic"), entry.get("partition"), entry.get("replicas")
    if not isinstance(topic, str) or not topic:
        raise CommandError(f"{where}.topic must be a topic name")
    if type(partition) is not int or partition < 0:
        raise CommandError(f"{where}.partition must be a partition index")
    if not isinstance(replicas, list) or any(type(b) is not int for b in replicas):
        raise CommandError(f"{where}.replicas must be a list of broker ids")
    log_dirs = entry.get("log_dirs", ["any"] * len(replicas))
    if (
        not isinstance(log_dirs, list)
        or len(log_dirs) != len(replicas)
        or any(not isinstance(d, str) for d in log_dirs)
    ):
        raise CommandError(f'{where}.log_dirs must list one path (or "any") per replica')
    return Target(topic, partition, tuple(replicas), tuple(log_dirs))


def parse_file(path: Path) -> list[Target]:
    """Kafka's reassignment JSON (`kafka-reassign-partitions.sh --reassignment-json-file`)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise CommandError(f"{path} is not JSON: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("partitions"), list):
        raise CommandError(f'{path}: expected {{"version": 1, "partitions": [...]}}')
    return [_file_entry(e, i, str(path)) for i, e in enumerate(data["partitions"])]


def _unique(targets: Sequence[Target]) -> None:
    seen: set[tuple[str, int]] = set()
    for t in targets:
        if (t.topic, t.partition) in seen:
            raise CommandError(f"{t.name} is named more than once")
        seen.add((t.topic, t.partition))


async def _place_log_dirs(admin: KafkaAdmin, targets: Sequence[Target]) -> list[str]:
    """AlterReplicaLogDirs for every replica with a named dir; problems other than "not there
    yet" as lines."""
    from jbod_client import kafka_admin

    wanted = [
        (broker, path, t)
        for t in targets
        if t.replicas is not None
        for broker, path in zip(t.replicas, t.log_dirs, strict=False)
        if path != "any"
    ]
    if not wanted:
        return []
    addresses = await admin.brokers()
    problems = []
    for broker, path, t in wanted:
        address = addresses.get(broker)
        if address is None:
            problems.append(f"{t.name}: broker {broker} is not available to place its replica in {path}")
            continue
        code = await admin.alter_replica_log_dir(address, path=path, topic=t.topic, partition=t.partition)
        if code not in (0, ErrorCode.REPLICA_NOT_AVAILABLE):
            problems.append(
                f"{t.name}: broker {broker} refused dir {path}: {kafka_admin.describe_error(code)}"
            )
    return problems


async def _wait(admin: KafkaAdmin, names: set[tuple[str, int]], timeout: float) -> set[tuple[str, int]]:
    """Poll until none of `names` is being reassigned; those still running at the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        ongoing = {(o.topic, o.partition) for o in await admin.list_partition_reassignments()}
        running = names & ongoing
        if not running or time.monotonic() >= deadline:
            return running
        await asyncio.sleep(_POLL_S)


async def _alter(
    settings: Settings, targets: Sequence[Target], *, wait: bool, timeout: float
) -> tuple[dict[tuple[str, int], tuple[int, str | None]], list[str], set[tuple[str, int]]]:
    from jbod_client.kafka_admin import KafkaAdmin

    security = settings.kafka_security()
    bootstrap = await commands.kafka_bootstrap(settings, security)
    async with KafkaAdmin(bootstrap, security, timeout=max(10.0, timeout)) as admin:
        problems = await _place_log_dirs(admin, targets)
        results = await admin.alter_partition_reassignments(
            {(t.topic, t.partition): t.replicas for t in targets}
        )
        started = {name for name, (code, _) in results.items() if code == 0}
        running = await _wait(admin, started, timeout) if wait and started else set()
    return results, problems, running


def _run(settings: Settings, targets: Sequence[Target], *, wait: bool, timeout: float) -> None:
    """Send `targets` (checked: no partition twice) and show the outcome (`_finish`)."""
    _unique(targets)
    _finish(settings, targets, commands.run(_alter(settings, targets, wait=wait, timeout=timeout)))


def _render(targets: Sequence[Target], results: Mapping[tuple[str, int], tuple[int, str | None]]) -> Any:
    from jbod_client import kafka_admin

    table = Table(title="Reassignments", title_justify="left")
    for column in ("topic", "partition", "target", "result"):
        table.add_column(column)
    for t in targets:
        code, message = results[(t.topic, t.partition)]
        target = "cancel" if t.replicas is None else ",".join(map(str, t.replicas))
        result = (
            ("cancelled" if t.replicas is None else "started")
            if code == 0
            else kafka_admin.describe_error(code, message)
        )
        table.add_row(escape(t.topic), str(t.partition), target, escape(result))
    return table


def _finish(
    settings: Settings,
    targets: Sequence[Target],
    outcome: tuple[dict[tuple[str, int], tuple[int, str | None]], list[str], set[tuple[str, int]]],
) -> None:
    results, problems, running = outcome
    data = [
        {
            "topic": t.topic,
            "partition": t.partition,
            "replicas": None if t.replicas is None else list(t.replicas),
            "errorCode": results[(t.topic, t.partition)][0],
            "errorMessage": results[(t.topic, t.partition)][1],
        }
        for t in targets
    ]
    commands.emit(settings, data, _render(targets, results))
    refused = [d for d in data if d["errorCode"] != 0]
    if problems:
        raise CommandError("; ".join(problems))
    if refused:
        raise CommandError(f"{len(refused)} of {len(data)} partition(s) refused (see the result column)")
    if running:
        names = ", ".join(f"{t}-{p}" for t, p in sorted(running))
        raise CommandError(f"still reassigning after the timeout: {names} (see jbodctl reassign list)")


@click.group("reassign")
def reassign() -> None:
    """Move partitions' replicas between brokers (Kafka's partition reassignment)."""


@reassign.command("start")
@click.argument("specs", nargs=-1, metavar="[TOPIC:PARTITION=B1,B2,...]...")
@click.option(
    "--file",
    "file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Kafka's reassignment JSON (as kafka-reassign-partitions.sh --reassignment-json-file takes)",
)
@click.option("--wait", is_flag=True, help="wait until every started reassignment has completed")
@click.option(
    "--timeout", type=click.FloatRange(min=0), default=300.0, show_default=True, help="seconds --wait waits"
)
@commands.kafka_options
@output_option
@click.pass_context
def start(  # noqa: PLR0913  click command: one parameter per argument and option
    ctx: click.Context,
    specs: tuple[str, ...],
    file: Path | None,
    wait: bool,
    timeout: float,
    bootstrap_server: tuple[str, ...],
    command_config: Any,
    output: str | None,
) -> None:
    """Reassign partitions to the brokers listed (the first is the preferred leader)."""
    settings = commands.settings_of(
        ctx, output, bootstrap_server=bootstrap_server, command_config=command_config
    )
    targets = [parse_target(s) for s in specs] + (parse_file(file) if file is not None else [])
    if not targets:
        raise CommandError("nothing to reassign: give TOPIC:PARTITION=B1,B2,... or --file")
    _run(settings, targets, wait=wait, timeout=timeout)


@reassign.command("cancel")
@click.argument("names", nargs=-1, required=True, metavar="TOPIC:PARTITION...")
@commands.kafka_options
@output_option
@click.pass_context
def cancel(
    ctx: click.Context,
    names: tuple[str, ...],
    bootstrap_server: tuple[str, ...],
    command_config: Any,
    output: str | None,
) -> None:
    """Cancel running reassignments: the partitions go back to their original replicas."""
    settings = commands.settings_of(
        ctx, output, bootstrap_server=bootstrap_server, command_config=command_config
    )
    _run(settings, [Target(*_partition_name(n, "partition"), None) for n in names], wait=False, timeout=0.0)


async def _list(settings: Settings) -> list[dict[str, Any]]:
    from jbod_client.kafka_admin import KafkaAdmin

    security = settings.kafka_security()
    bootstrap = await commands.kafka_bootstrap(settings, security)
    async with KafkaAdmin(bootstrap, security) as admin:
        ongoing = await admin.list_partition_reassignments()
    return [
        {
            "topic": o.topic,
            "partition": o.partition,
            "replicas": list(o.replicas),
            "addingReplicas": list(o.adding_replicas),
            "removingReplicas": list(o.removing_replicas),
        }
        for o in ongoing
    ]


@reassign.command("list")
@commands.kafka_options
@output_option
@click.pass_context
def list_command(
    ctx: click.Context, bootstrap_server: tuple[str, ...], command_config: Any, output: str | None
) -> None:
    """The reassignments in progress."""
    settings = commands.settings_of(
        ctx, output, bootstrap_server=bootstrap_server, command_config=command_config
    )
    data = commands.run(_list(settings))
    if not data:
        commands.emit(settings, data, "No reassignment in progress")
        return
    table = Table(title="Reassignments in progress", title_justify="left")
    for column in ("topic", "partition", "replicas", "adding", "removing"):
        table.add_column(column)
    for d in data:
        table.add_row(
            escape(d["topic"]),
            str(d["partition"]),
            ",".join(map(str, d["replicas"])),
            ",".join(map(str, d["addingReplicas"])) or "-",
            ",".join(map(str, d["removingReplicas"])) or "-",
        )
    commands.emit(settings, data, table)


COMMANDS = (reassign,)
