"""`jbodctl log-dirs` and `jbodctl move-replica`: brokers' log dirs, read and changed directly.

Guarantees:
* Both find brokers through the cluster metadata (`--bootstrap` brokers first, then the controller:
  `GET /v1/brokers`) and ask each broker itself (`GET /v1/log-dirs`, `POST /v1/log-dirs/move`).
* `log-dirs` shows every broker it could ask and then fails with one line naming each broker it
  could not; a broker named with `--broker` that is not registered fails at once.
* `move-replica --to` takes a whole directory id or a prefix of exactly one of that broker's dir
  ids (`resolve_directory`); an unknown or ambiguous prefix is a `CommandError` and nothing moves.
* A replica already in the `--to` dir is not moved and the exit status is 0; `--to` the current
  dir while a move runs cancels that move.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import click

from jbod_cli import commands, tables
from jbod_cli.commands import CommandError, Settings, output_option, wide_option
from jbod_client.broker import describe_error
from jbod_client.controller import ClientError
from jbod_client.metadata import ClusterMetadata, UnknownBrokerError
from jbod_core.ids import Uuid


async def _log_dirs(
    settings: Settings, broker_ids: Sequence[int]
) -> tuple[dict[int, list[dict[str, Any]]], dict[int, ClientError]]:
    """Log dirs of the given brokers (all registered ones if none given) and the error of each broker
    that could not be asked. A broker named on the command line that is unknown fails at once."""
    async with ClusterMetadata(
        settings.controller, token=settings.token(), bootstrap=settings.bootstrap
    ) as metadata:
        ids = list(broker_ids) or [int(b["brokerId"]) for b in await metadata.brokers()]
        errors: dict[int, ClientError] = {}
        clients = {}
        for broker_id in ids:
            try:
                clients[broker_id] = await metadata.broker(broker_id)
            except UnknownBrokerError as exc:
                if broker_ids:
                    raise
                errors[broker_id] = exc
        replies = await asyncio.gather(*(c.log_dirs() for c in clients.values()), return_exceptions=True)
    found: dict[int, list[dict[str, Any]]] = {}
    for broker_id, reply in zip(clients, replies, strict=True):
        if isinstance(reply, ClientError):
            errors[broker_id] = reply
        elif isinstance(reply, BaseException):
            raise reply
        else:
            found[broker_id] = reply
    return found, errors


@click.command("log-dirs")
@click.option(
    "--broker",
    "-b",
    "broker_ids",
    type=int,
    multiple=True,
    help="broker id, repeatable (default: all registered)",
)
@wide_option
@output_option
@click.pass_context
def log_dirs(ctx: click.Context, broker_ids: tuple[int, ...], wide: bool, output: str | None) -> None:
    """Show each broker's log dirs: state, space, replicas and moves in progress; paths relative to
    the directory holding them (named in the title), errors under the table."""
    settings = commands.settings_of(ctx, output)
    found, errors = commands.run(_log_dirs(settings, list(dict.fromkeys(broker_ids))))
    if settings.output == "json":
        click.echo(json.dumps({str(b): dirs for b, dirs in found.items()}, indent=2))
    elif not found and not errors:
        click.echo("No brokers registered")
    else:
        console = tables.console(wide=wide)
        for broker_id, dirs in found.items():
            console.print(tables.log_dirs_table(broker_id, dirs, wide=wide, cwd=os.getcwd()))
    if errors:
        reasons = "; ".join(f"broker {broker_id}: {error}" for broker_id, error in errors.items())
        raise CommandError(f"cannot read log dirs of {reasons}") from next(iter(errors.values()))


def resolve_directory(given: str, directory_ids: Sequence[str]) -> str:
    """The one id in `directory_ids` that `given` names: the whole id, or a prefix of exactly one
    (the short ids the tables print); a `CommandError` naming the candidates otherwise."""
    if given in directory_ids:
        return given
    matches = [d for d in directory_ids if d.startswith(given)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise CommandError(
            f"--to {given}: no log dir of that broker has this id (see jbodctl log-dirs --wide)"
        )
    raise CommandError(
        f"--to {given}: ambiguous, it starts {len(matches)} dir ids: {', '.join(sorted(matches))}"
    )


@dataclass(frozen=True, slots=True)
class _Replica:
    """One broker's replica of a partition."""

    topic: str
    partition: int
    broker_id: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition} on broker {self.broker_id}"


async def _move(
    settings: Settings, replica: _Replica, directory_id: str, rate: int | None
) -> tuple[str, dict[str, Any]]:
    async with ClusterMetadata(
        settings.controller, token=settings.token(), bootstrap=settings.bootstrap
    ) as metadata:
        client = await metadata.broker(replica.broker_id)
        try:
            Uuid.parse(directory_id)
        except ValueError:
            # A short id from a table: the broker's own dirs say which one it is.
            dirs = await client.log_dirs()
            directory_id = resolve_directory(directory_id, [str(d["directoryId"]) for d in dirs])
        return directory_id, await client.move(
            replica.topic, replica.partition, directory_id, max_bytes_per_second=rate
        )


@click.command("move-replica")
@click.argument("topic")
@click.argument("partition", type=click.IntRange(min=0))
@click.option("--broker", "-b", "broker_id", type=int, required=True, help="the broker hosting the replica")
@click.option(
    "--to",
    "directory_id",
    required=True,
    help="id of the destination log dir on that broker (the whole id or a unique prefix, as tables show)",
)
@click.option("--max-bytes-per-second", type=click.IntRange(min=1), default=None, help="throttle the copy")
@output_option
@click.pass_context
def move_replica(  # noqa: PLR0913  click command: one parameter per argument and option
    ctx: click.Context,
    topic: str,
    partition: int,
    broker_id: int,
    directory_id: str,
    max_bytes_per_second: int | None,
    output: str | None,
) -> None:
    """Move a broker's replica of a partition to another of its log dirs (runs in the background).

    A replica already in the --to dir is not moved: one line says so and the exit status is 0
    (the requested placement holds); --to the current dir while a move runs cancels that move.
    """
    settings = commands.settings_of(ctx, output)
    if not 0 < len(directory_id) <= 22 or not all(c.isalnum() or c in "-_" for c in directory_id):
        raise CommandError(f"--to {directory_id!r}: not a directory id or a prefix of one")
    replica = _Replica(topic, partition, broker_id)
    directory_id, reply = commands.run(_move(settings, replica, directory_id, max_bytes_per_second))
    code = int(reply.get("errorCode", 0))
    if code != 0:
        raise CommandError(
            f"cannot move {replica} to {directory_id}: {describe_error(code, reply.get('errorMessage'))}"
        )
    outcome = reply.get("outcome")
    if outcome == "already-there":
        message = f"Nothing to move: {replica} is already in dir {directory_id}"
    elif outcome == "cancelled":
        message = f"Cancelled the move of {replica}: it stays in dir {directory_id}"
    else:
        message = (
            f"Moving {replica} to dir {directory_id}; follow it with: jbodctl log-dirs --broker {broker_id}"
        )
    commands.emit(settings, reply, message)


COMMANDS = (log_dirs, move_replica)
