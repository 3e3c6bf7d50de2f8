"""`jbodctl log-dirs` and `jbodctl move-replica`: brokers' log dirs, read and changed over Kafka's
protocol (DescribeLogDirs, AlterReplicaLogDirs: `jbod_client.kafka_admin`), with the directory
ids that protocol has no field for.

Where each part comes from:
* The brokers: their registrations, from the cluster metadata (`--bootstrap` brokers first, then
  the controller: `GET /v1/brokers`), fenced ones included. Each broker's Kafka listener is the
  address Metadata gives (from `--bootstrap-server`, else the registered listeners), or for a
  broker Metadata leaves out (fenced) the listener it registered under the protocol in use.
* What is on each disk (replicas, their sizes, future replicas of moves and their lag, total and
  usable bytes): DescribeLogDirs on the broker's Kafka listener.
* What each disk is (its directory id, its state and the error that took it offline, since when,
  whether it is cordoned (KIP-1066: the broker's own reading of `cordoned.log.dirs`, dynamic over
  static, and of `log.dir.cordon.threshold`, the same that it reports to the controller), its
  used fraction and time until full,
  a move's state and copied bytes, and a dir that failed at start and has no id): the broker's own
  `GET /v1/log-dirs`, joined by path; DescribeLogDirs names dirs by path only. An offline dir's
  replicas are the broker's list too (Kafka answers KAFKA_STORAGE_ERROR for it, without replicas).

Guarantees:
* `log-dirs` shows every broker it could ask and then fails with one line naming each broker it
  could not; a broker named with `--broker` that is not registered fails at once.
* `move-replica --to` takes a whole directory id or a prefix of exactly one of that broker's dir
  ids (`resolve_directory`); an unknown or ambiguous prefix is a `CommandError` and nothing moves.
* The move itself is AlterReplicaLogDirs, to the dir's path; a refusal is one line with Kafka's
  error name and what it means here. Kafka's protocol carries no per-move throttle, so a move with
  `--max-bytes-per-second` is sent to the broker's `POST /v1/log-dirs/move`, which takes the
  throttle with the move (the same mover either way).
* A replica already in the `--to` dir is not moved and the exit status is 0; `--to` the current
  dir while a move runs cancels that move. Which case it was (`outcome`) is read from
  DescribeLogDirs just before the move.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from jbod_cli import commands, tables
from jbod_cli.commands import CommandError, Settings, output_option, wide_option
from jbod_client.broker import describe_error
from jbod_client.controller import ClientError
from jbod_client.kafka_config import KafkaSecurity
from jbod_client.kafka_errors import KafkaAuthenticationError, KafkaUnreachableError
from jbod_client.metadata import ClusterMetadata, UnknownBrokerError, kafka_address
from jbod_core.errors import ErrorCode  # the contract's codes are Kafka's, names included

if TYPE_CHECKING:  # the codec imports kio (a fifth of a second): only the commands that use it load it
    from jbod_client.kafka_admin import KafkaAdmin, LogDir


# -- the two sources, joined --------------------------------------------------------------------


def _state(code: int) -> str:
    from jbod_client import kafka_admin

    if code == 0:
        return "online"
    if code == ErrorCode.KAFKA_STORAGE_ERROR:
        return "offline"
    return kafka_admin.error_name(code).lower()


def _kafka_replicas(log_dir: LogDir, view: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """DescribeLogDirs' replicas of a dir, each future one with the broker's move state."""
    moves = {
        (r["topic"], int(r["partition"])): r for r in (view or {}).get("replicas") or [] if r.get("future")
    }
    out: list[dict[str, Any]] = []
    for r in log_dir.replicas:
        entry: dict[str, Any] = {
            "topic": r.topic,
            "partition": r.partition,
            "sizeBytes": r.size_bytes,
            "future": r.future,
        }
        if r.future:
            entry["offsetLag"] = r.offset_lag
            move = moves.get((r.topic, r.partition), {})
            entry |= {k: move[k] for k in ("moveState", "copiedBytes") if k in move}
        out.append(entry)
    return out


def merge_log_dirs(
    described: Sequence[LogDir], broker_view: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """One broker's dirs as `log-dirs` shows them (the module's "where each part comes from"): in
    DescribeLogDirs' order, then the dirs only the broker's view has."""
    by_path = {str(v["path"]): v for v in broker_view}
    merged: list[dict[str, Any]] = []
    for log_dir in described:
        view = by_path.pop(log_dir.path, None)
        online = log_dir.error_code == 0
        merged.append(
            {
                "path": log_dir.path,
                "directoryId": None if view is None else view.get("directoryId"),
                "state": _state(log_dir.error_code) if view is None else view.get("state"),
                "cordoned": bool((view or {}).get("cordoned", False)),
                "spaceCordoned": bool((view or {}).get("spaceCordoned", False)),
                "usedRatio": (view or {}).get("usedRatio"),
                "secondsToFull": (view or {}).get("secondsToFull"),
                "error": None if view is None else view.get("error"),
                "since": None if view is None else view.get("since"),
                "totalBytes": log_dir.total_bytes
                if log_dir.total_bytes is not None
                else (view or {}).get("totalBytes"),
                "usableBytes": log_dir.usable_bytes
                if log_dir.usable_bytes is not None
                else (view or {}).get("usableBytes"),
                "cleaner": (view or {}).get("cleaner"),
                "replicas": _kafka_replicas(log_dir, view)
                if online or view is None
                else list(view.get("replicas") or []),
            }
        )
    merged.extend(dict(v) for v in by_path.values())
    return merged


def move_outcome(described: Sequence[LogDir], *, topic: str, partition: int, destination: str) -> str | None:
    """What moving the replica to the dir at `destination` will do, from DescribeLogDirs of it:
    `already-there`, `cancelled` (back to its dir while a move runs), `in-progress` (the same move
    again) or `started`; None when the broker lists no such replica."""
    current = future = None
    for log_dir in described:
        for r in log_dir.replicas:
            if (r.topic, r.partition) == (topic, partition):
                if r.future:
                    future = log_dir.path
                else:
                    current = log_dir.path
    if current is None:
        return None
    if current == destination:
        return "cancelled" if future is not None else "already-there"
    return "in-progress" if future == destination else "started"


# -- brokers and their listeners ----------------------------------------------------------------


async def _registrations(metadata: ClusterMetadata) -> dict[int, dict[str, Any]]:
    return {int(b["brokerId"]): b for b in await metadata.brokers()}


async def _kafka_addresses(
    admin: KafkaAdmin, registered: Mapping[int, Mapping[str, Any]], security: KafkaSecurity
) -> dict[int, str | None]:
    """Each registered broker's Kafka listener: Metadata's address, else (fenced, or no bootstrap
    server answered) the listener it registered under the protocol in use."""
    try:
        listed = await admin.brokers()
    except KafkaUnreachableError:
        listed = {}  # each broker's own connection names what is wrong with it
    return {b: listed.get(b) or kafka_address(reg, security.protocol) for b, reg in registered.items()}


def _no_kafka_listener(broker_id: int, security: KafkaSecurity) -> ClientError:
    return ClientError(f"broker {broker_id} advertises no {security.protocol} listener")


async def _broker_log_dirs(
    admin: KafkaAdmin, metadata: ClusterMetadata, broker_id: int, address: str | None
) -> list[dict[str, Any]]:
    if address is None:
        raise _no_kafka_listener(broker_id, admin.security)
    client = await metadata.broker(broker_id)
    described, view = await asyncio.gather(
        admin.describe_log_dirs(address), client.log_dirs(), return_exceptions=True
    )
    if isinstance(described, BaseException):  # Kafka's error first: it is the one a user met
        raise described
    if isinstance(view, BaseException):
        raise view
    return merge_log_dirs(described, view)


async def _log_dirs(
    settings: Settings, broker_ids: Sequence[int]
) -> tuple[dict[int, list[dict[str, Any]]], dict[int, ClientError]]:
    """Log dirs of the given brokers (all registered ones if none given) and the error of each broker
    that could not be asked. A broker named on the command line that is unknown fails at once."""
    from jbod_client.kafka_admin import KafkaAdmin

    security = settings.kafka_security()
    async with settings.metadata() as metadata:
        registered = await _registrations(metadata)
        for broker_id in broker_ids:
            if broker_id not in registered:
                raise UnknownBrokerError(broker_id)
        ids = list(broker_ids) or sorted(registered)
        if not ids:
            return {}, {}
        bootstrap = await commands.kafka_bootstrap(settings, security, list(registered.values()))
        async with KafkaAdmin(bootstrap, security) as admin:
            addresses = await _kafka_addresses(admin, registered, security)
            replies = await asyncio.gather(
                *(_broker_log_dirs(admin, metadata, b, addresses[b]) for b in ids), return_exceptions=True
            )
    found: dict[int, list[dict[str, Any]]] = {}
    errors: dict[int, ClientError] = {}
    for broker_id, reply in zip(ids, replies, strict=True):
        if isinstance(reply, KafkaAuthenticationError):
            raise reply  # the same login fails on every broker: one error, not one per broker
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
@commands.kafka_options
@output_option
@click.pass_context
def log_dirs(  # noqa: PLR0913  click command: one parameter per option
    ctx: click.Context,
    broker_ids: tuple[int, ...],
    wide: bool,
    bootstrap_server: tuple[str, ...],
    command_config: Any,
    output: str | None,
) -> None:
    """Show each broker's log dirs: state, space, replicas and moves in progress; paths relative to
    the directory holding them (named in the title), errors under the table."""
    settings = commands.settings_of(
        ctx, output, bootstrap_server=bootstrap_server, command_config=command_config
    )
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


# -- move-replica -------------------------------------------------------------------------------


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


@dataclass(frozen=True, slots=True)
class _Destination:
    """The `--to` dir as the broker's own view has it (its state: online, offline or full)."""

    directory_id: str
    path: str
    state: str | None = None


def refusal(code: int, replica: _Replica, destination: _Destination, security: KafkaSecurity) -> str:
    """AlterReplicaLogDirs' error for the replica, with what it means here."""
    from jbod_client import kafka_admin

    meaning: dict[int, str] = {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: f"unknown topic {replica.topic}",
        ErrorCode.REPLICA_NOT_AVAILABLE: f"broker {replica.broker_id} does not host "
        f"{replica.topic}-{replica.partition}",
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED: f"{security.username or 'this client'} may not move "
        "replicas (it needs ALTER on the cluster)",
        ErrorCode.KAFKA_STORAGE_ERROR: f"log dir {destination.directory_id} is {destination.state}"
        if destination.state in ("offline", "full")
        else "the replica's own dir is offline or full",
        ErrorCode.LOG_DIR_NOT_FOUND: f"broker {replica.broker_id} has no log dir at {destination.path}",
    }
    return kafka_admin.describe_error(code, meaning.get(code))


async def _move_over_kafka(
    settings: Settings,
    replica: _Replica,
    destination: _Destination,
    registered: Mapping[int, Mapping[str, Any]],
) -> str:
    """AlterReplicaLogDirs on the replica's broker; the outcome (`move_outcome`)."""
    from jbod_client.kafka_admin import KafkaAdmin

    security = settings.kafka_security()
    bootstrap = await commands.kafka_bootstrap(settings, security, list(registered.values()))
    async with KafkaAdmin(bootstrap, security) as admin:
        address = (await _kafka_addresses(admin, registered, security)).get(replica.broker_id)
        if address is None:
            raise _no_kafka_listener(replica.broker_id, security)
        before = await admin.describe_log_dirs(address, {replica.topic: [replica.partition]})
        code = await admin.alter_replica_log_dir(
            address, path=destination.path, topic=replica.topic, partition=replica.partition
        )
    if code != 0:
        raise CommandError(
            f"cannot move {replica} to {destination.directory_id}: "
            f"{refusal(code, replica, destination, security)}"
        )
    outcome = move_outcome(
        before, topic=replica.topic, partition=replica.partition, destination=destination.path
    )
    return outcome or "started"


async def _move(
    settings: Settings, replica: _Replica, given: str, rate: int | None
) -> tuple[_Destination, dict[str, Any]]:
    async with settings.metadata() as metadata:
        registered = await _registrations(metadata)
        if replica.broker_id not in registered:
            raise UnknownBrokerError(replica.broker_id)
        client = await metadata.broker(replica.broker_id)
        dirs = [d for d in await client.log_dirs() if d.get("directoryId")]
        directory_id = resolve_directory(given, [str(d["directoryId"]) for d in dirs])
        chosen = next(d for d in dirs if d["directoryId"] == directory_id)
        destination = _Destination(directory_id, str(chosen["path"]), chosen.get("state"))
        if rate is not None:  # Kafka's protocol has no per-move throttle: the broker's own API
            reply = await client.move(
                replica.topic, replica.partition, directory_id, max_bytes_per_second=rate
            )
            code = int(reply.get("errorCode", 0))
            if code != 0:
                raise CommandError(
                    f"cannot move {replica} to {directory_id}: {describe_error(code, reply.get('errorMessage'))}"
                )
            outcome = str(reply.get("outcome"))
        else:
            outcome = await _move_over_kafka(settings, replica, destination, registered)
    return destination, {
        "errorCode": 0,
        "outcome": outcome,
        "directoryId": directory_id,
        "path": destination.path,
    }


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
@click.option(
    "--max-bytes-per-second",
    type=click.IntRange(min=1),
    default=None,
    help="throttle the copy (sent with the move to the broker's HTTP API: Kafka's protocol has no "
    "per-move throttle)",
)
@commands.kafka_options
@output_option
@click.pass_context
def move_replica(  # noqa: PLR0913  click command: one parameter per argument and option
    ctx: click.Context,
    topic: str,
    partition: int,
    broker_id: int,
    directory_id: str,
    max_bytes_per_second: int | None,
    bootstrap_server: tuple[str, ...],
    command_config: Any,
    output: str | None,
) -> None:
    """Move a broker's replica of a partition to another of its log dirs (runs in the background).

    A replica already in the --to dir is not moved: one line says so and the exit status is 0
    (the requested placement holds); --to the current dir while a move runs cancels that move.
    """
    settings = commands.settings_of(
        ctx, output, bootstrap_server=bootstrap_server, command_config=command_config
    )
    if not 0 < len(directory_id) <= 22 or not all(c.isalnum() or c in "-_" for c in directory_id):
        raise CommandError(f"--to {directory_id!r}: not a directory id or a prefix of one")
    replica = _Replica(topic, partition, broker_id)
    destination, reply = commands.run(_move(settings, replica, directory_id, max_bytes_per_second))
    outcome = reply["outcome"]
    if outcome == "already-there":
        message = f"Nothing to move: {replica} is already in dir {destination.directory_id}"
    elif outcome == "cancelled":
        message = f"Cancelled the move of {replica}: it stays in dir {destination.directory_id}"
    else:
        message = (
            f"Moving {replica} to dir {destination.directory_id}; "
            f"follow it with: jbodctl log-dirs --broker {broker_id}"
        )
    commands.emit(settings, reply, message)


COMMANDS = (log_dirs, move_replica)
