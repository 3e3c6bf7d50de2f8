"""`jbodctl`: the admin CLI (protocol §5).

Guarantees:
* Human tables by default, `--output json` (global or per command) for scripts.
* Any error — bad flags, unreadable token file, unreachable controller, or a non-zero
  `errorCode` in the reply — prints one line `jbodctl: error: ...` on stderr and exits non-zero
  (2 for usage, 1 otherwise). No traceback for a user mistake. A group run without a subcommand
  (`jbodctl`, `jbodctl topics`, `jbodctl local`) prints its help and exits 0. A missing token or a
  refused connection adds what to do (`jbod_cli.hints`): most often `eval "$(jbodctl local env)"`.
* Data-plane commands (`produce`, `consume`, `log-dirs`, `move-replica`) find brokers through the
  controller (`GET /v1/topics/{name}`, `GET /v1/brokers`) and talk to them directly; `produce`
  exits 0 only when every record was acknowledged (with the requested acks).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from jbod_cli import apply_plan, commands, local_cli, tables
from jbod_cli.commands import CommandError, Settings, output_option, wide_option
from jbod_client.broker import describe_error
from jbod_client.consumer import ConsumedRecord, Consumer
from jbod_client.controller import DEFAULT_URL, ClientError, parse_controller_urls
from jbod_client.metadata import ClusterMetadata, UnknownBrokerError
from jbod_client.producer import Producer, RecordMetadata
from jbod_core.ids import Uuid

PROG = "jbodctl"
T = TypeVar("T")


def _parse_configs(values: tuple[str, ...]) -> dict[str, str]:
    configs = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CommandError(f"--config expects KEY=VALUE, got {item!r}")
        configs[key.strip()] = value.strip()
    return configs


def _parse_assignment(text: str) -> list[list[int]]:
    try:
        return [[int(b) for b in part.split(",")] for part in text.split(";")]
    except ValueError as exc:
        raise CommandError(f"--assignment expects broker lists like '1,2;2,3', got {text!r}") from exc


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--controller",
    envvar="JBOD_CONTROLLER_URL",
    default=DEFAULT_URL,
    show_default=True,
    metavar="URL[,URL...]",
    help="controller URL, or several controllers' URLs separated by commas (or JBOD_CONTROLLER_URL): "
    "calls follow the active controller",
)
@click.option(
    "--bootstrap",
    envvar="JBOD_BOOTSTRAP",
    default="",
    metavar="URL[,URL...]",
    help="broker URLs that produce, consume, log-dirs and move-replica ask for cluster metadata "
    "before the controller (or JBOD_BOOTSTRAP): they keep working while no controller answers",
)
@click.option(
    "--token-file",
    envvar="JBOD_TOKEN_FILE",
    type=click.Path(path_type=Path),
    default=None,
    help="file holding the bearer token (or JBOD_TOKEN_FILE)",
)
@click.option(
    "--output", "-o", type=commands.OUTPUTS, default="table", show_default=True, help="table or json"
)
@click.pass_context
def app(ctx: click.Context, controller: str, bootstrap: str, token_file: Path | None, output: str) -> None:
    """Administer a JBOD cluster: topics, brokers, log dirs, metadata; produce and consume; run it locally."""
    brokers = tuple(u.strip() for u in bootstrap.split(",") if u.strip())
    for url in brokers:
        if not url.startswith(("http://", "https://")):
            raise click.BadParameter(f"{url!r} is not an http:// URL", param_hint="--bootstrap")
    try:
        parse_controller_urls(controller)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--controller") from None
    ctx.obj = Settings(controller=controller, token_file=token_file, output=output, bootstrap=brokers)


# -- topics ------------------------------------------------------------------------------------


@app.group("topics")
def topics_group() -> None:
    """Create, describe, list and delete topics."""


@topics_group.command("create")
@click.argument("name")
@click.option("--partitions", "-p", type=int, default=None, help="number of partitions")
@click.option(
    "--replication-factor",
    "-r",
    type=int,
    default=None,
    help="replicas per partition (default: the controller's)",
)
@click.option("--assignment", default=None, help="manual replicas, e.g. '1,2;2,3' (one partition per ';')")
@click.option("--config", "-c", "configs", multiple=True, help="KEY=VALUE, repeatable")
@output_option
@click.pass_context
def topics_create(
    ctx: click.Context,
    name: str,
    partitions: int | None,
    replication_factor: int | None,
    assignment: str | None,
    configs: tuple[str, ...],
    output: str | None,
) -> None:
    """Create a topic (automatic placement, or --assignment)."""
    settings = commands.settings_of(ctx, output)
    replica_assignment = _parse_assignment(assignment) if assignment else None
    if replica_assignment is None and partitions is None:
        raise CommandError(
            "give --partitions (and --replication-factor unless the controller has a default), or --assignment"
        )
    with settings.client() as client:
        reply = client.create_topic(
            name,
            partitions=partitions,
            replication_factor=replication_factor,
            replica_assignment=replica_assignment,
            configs=_parse_configs(configs),
        )
    commands.check(reply, f"cannot create topic {name}")
    commands.emit(
        settings,
        reply,
        f"Created topic [bold]{name}[/] ({reply['topicId']}): {reply['numPartitions']} partitions, "
        f"replication factor {reply['replicationFactor']}",
    )


@topics_group.command("describe")
@click.argument("name")
@wide_option
@output_option
@click.pass_context
def topics_describe(ctx: click.Context, name: str, wide: bool, output: str | None) -> None:
    """Show a topic's partitions: leader, ISR, directories, offline replicas."""
    settings = commands.settings_of(ctx, output)
    with settings.client() as client:
        topic = client.describe_topic(name)
    commands.emit(settings, topic, tables.partitions_table(topic, wide=wide), wide=wide)


@topics_group.command("list")
@wide_option
@output_option
@click.pass_context
def topics_list(ctx: click.Context, wide: bool, output: str | None) -> None:
    """List every topic."""
    settings = commands.settings_of(ctx, output)
    with settings.client() as client:
        topics = client.list_topics()
    commands.emit(settings, topics, tables.topics_table(topics, wide=wide), wide=wide)


@topics_group.command("delete")
@click.argument("name")
@output_option
@click.pass_context
def topics_delete(ctx: click.Context, name: str, output: str | None) -> None:
    """Delete a topic."""
    settings = commands.settings_of(ctx, output)
    with settings.client() as client:
        reply = client.delete_topic(name)
    commands.check(reply, f"cannot delete topic {name}")
    commands.emit(settings, reply, f"Deleted topic [bold]{name}[/]")


# -- brokers -----------------------------------------------------------------------------------


@app.group("brokers", invoke_without_command=True)
@wide_option
@output_option
@click.pass_context
def brokers_group(ctx: click.Context, wide: bool, output: str | None) -> None:
    """List registered brokers with their online and offline dirs (or a subcommand); --wide adds
    their listeners."""
    if ctx.invoked_subcommand is not None:
        return
    settings = commands.settings_of(ctx, output)
    with settings.client() as client:
        brokers = client.brokers()
    commands.emit(settings, brokers, tables.brokers_table(brokers, wide=wide), wide=wide)


@brokers_group.command("describe")
@click.argument("broker_id", type=int)
@wide_option
@output_option
@click.pass_context
def brokers_describe(ctx: click.Context, broker_id: int, wide: bool, output: str | None) -> None:
    """Show one broker; --wide adds its listeners."""
    settings = commands.settings_of(ctx, output)
    with settings.client() as client:
        broker = client.broker(broker_id)
    commands.emit(settings, broker, tables.brokers_table([broker], wide=wide), wide=wide)


@brokers_group.command("unregister")
@click.argument("broker_id", type=int)
@output_option
@click.pass_context
def brokers_unregister(ctx: click.Context, broker_id: int, output: str | None) -> None:
    """Remove a broker's registration (fencing it first)."""
    settings = commands.settings_of(ctx, output)
    with settings.client() as client:
        reply = client.unregister_broker(broker_id)
    commands.check(reply, f"cannot unregister broker {broker_id}")
    commands.emit(settings, reply, f"Unregistered broker {broker_id}")


@app.command("cluster")
@output_option
@click.pass_context
def cluster(ctx: click.Context, output: str | None) -> None:
    """Show cluster counts: brokers, fenced brokers, offline partitions, metadata end offset."""
    settings = commands.settings_of(ctx, output)
    with settings.client() as client:
        info = client.cluster()
    commands.emit(settings, info, tables.cluster_table(info))


# -- metadata ----------------------------------------------------------------------------------


@app.group("metadata")
def metadata_group() -> None:
    """Read the metadata log."""


@metadata_group.command("export")
@click.option("--out", required=True, type=click.Path(path_type=Path), help="JSON-lines file to write")
@click.option("--from-offset", type=click.IntRange(min=0), default=0, help="first offset to export")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "parquet"]),
    default=None,
    help="jsonl (default) or parquet (typed columns, one per record field; default for *.parquet)",
)
@click.pass_context
def metadata_export(ctx: click.Context, out: Path, from_offset: int, fmt: str | None) -> None:
    """Write the whole metadata log as JSON lines, one {offset, type, data} record per line."""
    settings = commands.settings_of(ctx, None)
    if fmt == "parquet" or (fmt is None and out.suffix == ".parquet"):
        _metadata_export_parquet(settings, out, from_offset)
        return
    count = 0
    first = last = None
    with _atomic_output(out) as tmp, settings.client() as client, open(tmp, "w", encoding="utf-8") as handle:
        for record in client.iter_metadata(from_offset=from_offset):
            handle.write(json.dumps(record, separators=(",", ":")) + "\n")
            count += 1
            first = record["offset"] if first is None else first
            last = record["offset"]
    span = f" (offsets {first}-{last})" if count else ""
    click.echo(f"Exported {count} records{span} to {out}", err=True)


@contextlib.contextmanager
def _atomic_output(out: Path) -> Iterator[Path]:
    """A temporary path next to `out`, renamed over it if the block succeeds and removed if not;
    an OSError becomes one `cannot write OUT` line."""
    tmp = out.with_name(out.name + ".tmp")
    try:
        yield tmp
        os.replace(tmp, out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise CommandError(f"cannot write {out}: {exc.strerror or exc}") from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _metadata_export_parquet(settings: Settings, out: Path, from_offset: int) -> None:
    """`metadata export --format parquet` (needs pyarrow): the typed layout of `metadata_parquet`."""
    try:
        from jbod_cli import metadata_parquet
    except ImportError as exc:
        raise CommandError("--format parquet needs pyarrow (pip install pyarrow)") from exc
    with _atomic_output(out) as tmp, settings.client() as client:
        count = metadata_parquet.write(client.iter_metadata(from_offset=from_offset), tmp)
    click.echo(f"Exported {count} records to {out}", err=True)


# -- data plane: produce, consume, log dirs, moves -------------------------------------------


def _decode_arg(text: str, *, what: str, b64: bool) -> bytes:
    if not b64:
        return text.encode("utf-8", "surrogateescape")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise CommandError(f"{what} is not valid base64: {text[:40]!r}") from exc


def _stdin_values() -> list[bytes]:
    """One value per line of stdin (a final newline ends the last line; a CR before it is dropped)."""
    data = sys.stdin.buffer.read()
    if not data:
        return []
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    return [line[:-1] if line.endswith(b"\r") else line for line in lines]


def _show(data: bytes | None, *, b64: bool) -> str | None:
    if data is None:
        return None
    return base64.b64encode(data).decode("ascii") if b64 else data.decode("utf-8", "replace")


async def _produce_all(
    settings: Settings,
    topic: str,
    values: Sequence[bytes],
    *,
    key: bytes | None,
    partition: int | None,
    acks: int,
    timeout: float,
) -> list[RecordMetadata | BaseException]:
    timeout_ms = max(1, int(timeout * 1000))
    async with Producer(
        settings.controller,
        token=settings.token(),
        bootstrap=settings.bootstrap,
        acks=acks,
        delivery_timeout_ms=timeout_ms,
        request_timeout_ms=min(15_000, timeout_ms),
    ) as producer:
        futures = [await producer.send(topic, value, key=key, partition=partition) for value in values]
        await producer.flush()
        return list(await asyncio.gather(*futures, return_exceptions=True))


@app.command("produce")
@click.argument("topic")
@click.option(
    "--partition",
    "-p",
    type=click.IntRange(min=0),
    default=None,
    help="partition (default: by key, else sticky)",
)
@click.option(
    "--acks",
    type=click.Choice(["-1", "0", "1", "all"]),
    default="-1",
    show_default=True,
    help="-1/all: every ISR replica; 1: leader; 0: no wait",
)
@click.option("--key", "-k", default=None, help="key of every record")
@click.option(
    "--value",
    "-v",
    "values",
    multiple=True,
    help="a record value, repeatable (default: one per line of stdin)",
)
@click.option("--base64", "b64", is_flag=True, help="--key and the values are base64")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.001),
    default=30.0,
    show_default=True,
    help="seconds to keep retrying a record before failing",
)
@output_option
@click.pass_context
def produce(
    ctx: click.Context,
    topic: str,
    partition: int | None,
    acks: str,
    key: str | None,
    values: tuple[str, ...],
    b64: bool,
    timeout: float,
    output: str | None,
) -> None:
    """Write records to a topic: --value V (repeatable) or one record per line of stdin."""
    settings = commands.settings_of(ctx, output)
    key_bytes = None if key is None else _decode_arg(key, what="--key", b64=b64)
    if values:
        payloads = [_decode_arg(v, what="--value", b64=b64) for v in values]
    elif b64:
        payloads = [
            _decode_arg(line.decode("ascii", "replace"), what="a stdin line", b64=True)
            for line in _stdin_values()
        ]
    else:
        payloads = _stdin_values()
    if not payloads:
        raise CommandError("nothing to produce: give --value or lines on stdin")
    results = commands.run(
        _produce_all(
            settings,
            topic,
            payloads,
            key=key_bytes,
            partition=partition,
            acks=-1 if acks == "all" else int(acks),
            timeout=timeout,
        )
    )
    failed = [r for r in results if isinstance(r, BaseException)]
    done = [r for r in results if isinstance(r, RecordMetadata)]
    if failed:
        first = failed[0]
        raise CommandError(
            f"{len(failed)} of {len(results)} records not produced to {topic}"
            f"{f' ({len(done)} were)' if done else ''}: {first}"
        ) from first
    offsets: dict[int, list[int]] = {}
    for r in done:
        offsets.setdefault(r.partition, []).append(r.offset)
    per_partition: list[dict[str, Any]] = [
        {
            "partition": p,
            "count": len(offs),
            "firstOffset": min(offs) if min(offs) >= 0 else None,
            "lastOffset": max(offs) if min(offs) >= 0 else None,
        }
        for p, offs in sorted(offsets.items())
    ]
    if settings.output == "json":
        summary = {
            "topic": topic,
            "count": len(done),
            "partitions": per_partition,
            "records": [{"partition": r.partition, "offset": r.offset} for r in done],
        }
        click.echo(json.dumps(summary, indent=2))
        return
    parts = ", ".join(
        f"partition {p['partition']} offsets {p['firstOffset']}-{p['lastOffset']}"
        if p["firstOffset"] is not None
        else f"partition {p['partition']} ({p['count']} records, offsets unknown with acks=0)"
        for p in per_partition
    )
    click.echo(f"Produced {len(done)} records to {topic}: {parts}")


async def _consume(
    settings: Settings,
    topic: str,
    *,
    partitions: Sequence[int] | None,
    start: str | dict[int, int],
    offset: int | None,
    max_messages: int | None,
    idle_timeout: float,
    emit: Any,
) -> int:
    token = settings.token()
    if offset is not None:
        async with ClusterMetadata(
            settings.controller, token=token, bootstrap=settings.bootstrap
        ) as metadata:
            leaders = await metadata.partitions(topic)
        start = dict.fromkeys(partitions if partitions is not None else sorted(leaders), offset)
    count = 0
    async with Consumer(
        settings.controller,
        token=token,
        topic=topic,
        partitions=partitions,
        start=start,
        bootstrap=settings.bootstrap,
    ) as consumer:
        loop = asyncio.get_running_loop()
        last_new = loop.time()
        while max_messages is None or count < max_messages:
            remaining = idle_timeout - (loop.time() - last_new)
            if remaining <= 0:
                break
            records = await consumer.poll(timeout=min(remaining, 1.0))
            if records:
                last_new = loop.time()
            for record in records:
                emit(record)
                count += 1
                if max_messages is not None and count >= max_messages:
                    break
        failing = consumer.failing() if max_messages is None or count < max_messages else {}
    if failing:
        reasons = "; ".join(f"{topic}-{p}: {why}" for p, why in sorted(failing.items()))
        raise CommandError(f"consumed {count} records, but could not fetch {reasons}")
    return count


@app.command("consume")
@click.argument("topic")
@click.option(
    "--partition",
    "-p",
    "partitions",
    type=click.IntRange(min=0),
    multiple=True,
    help="partition to read, repeatable (default: all)",
)
@click.option(
    "--offset", type=click.IntRange(min=0), default=None, help="start every partition at this offset"
)
@click.option("--from-beginning", is_flag=True, help="start at the log start offset (the default)")
@click.option("--latest", is_flag=True, help="start at the high watermark: only new records")
@click.option("--max-messages", "-n", type=click.IntRange(min=1), default=None, help="stop after N records")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=5.0,
    show_default=True,
    help="stop when nothing new arrived for this many seconds",
)
@click.option("--print-offsets", is_flag=True, help="prefix each value with PARTITION:OFFSET and a tab")
@click.option("--base64", "b64", is_flag=True, help="print keys and values as base64")
@output_option
@click.pass_context
def consume(
    ctx: click.Context,
    topic: str,
    partitions: tuple[int, ...],
    offset: int | None,
    from_beginning: bool,
    latest: bool,
    max_messages: int | None,
    timeout: float,
    print_offsets: bool,
    b64: bool,
    output: str | None,
) -> None:
    """Print a topic's records, one value per line (JSON lines with --output json)."""
    settings = commands.settings_of(ctx, output)
    if sum((offset is not None, from_beginning, latest)) > 1:
        raise CommandError("give at most one of --offset, --from-beginning and --latest")
    json_lines = settings.output == "json"
    out = sys.stdout

    def emit(record: ConsumedRecord) -> None:
        if json_lines:
            line = json.dumps(
                {
                    "partition": record.partition,
                    "offset": record.offset,
                    "key": _show(record.key, b64=b64),
                    "value": _show(record.value, b64=b64),
                }
            )
        elif print_offsets:
            line = f"{record.partition}:{record.offset}\t{_show(record.value, b64=b64)}"
        else:
            line = str(_show(record.value, b64=b64))
        out.write(line + "\n")
        out.flush()

    count = commands.run(
        _consume(
            settings,
            topic,
            partitions=list(dict.fromkeys(partitions)) or None,
            start="latest" if latest else "earliest",
            offset=offset,
            max_messages=max_messages,
            idle_timeout=timeout,
            emit=emit,
        )
    )
    click.echo(f"Consumed {count} records from {topic}", err=True)


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


@app.command("log-dirs")
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


async def _move(
    settings: Settings, topic: str, partition: int, broker_id: int, directory_id: str, rate: int | None
) -> tuple[str, dict[str, Any]]:
    async with ClusterMetadata(
        settings.controller, token=settings.token(), bootstrap=settings.bootstrap
    ) as metadata:
        client = await metadata.broker(broker_id)
        try:
            Uuid.parse(directory_id)
        except ValueError:
            # A short id from a table: the broker's own dirs say which one it is.
            dirs = await client.log_dirs()
            directory_id = resolve_directory(directory_id, [str(d["directoryId"]) for d in dirs])
        return directory_id, await client.move(topic, partition, directory_id, max_bytes_per_second=rate)


@app.command("move-replica")
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
def move_replica(
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
    directory_id, reply = commands.run(
        _move(settings, topic, partition, broker_id, directory_id, max_bytes_per_second)
    )
    code = int(reply.get("errorCode", 0))
    if code != 0:
        raise CommandError(
            f"cannot move {topic}-{partition} on broker {broker_id} to {directory_id}: "
            f"{describe_error(code, reply.get('errorMessage'))}"
        )
    replica = f"{topic}-{partition} on broker {broker_id}"
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


# -- local -------------------------------------------------------------------------------------


@app.group("local")
def local_group() -> None:
    """Run things on this machine without Kubernetes."""


@local_group.command("walkthrough")
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    default=None,
    help="controller data dir (default: a temp dir)",
)
@click.option("--keep", is_flag=True, help="leave the controller running at the end")
def local_walkthrough(data_dir: Path | None, keep: bool) -> None:
    """Start a local controller and walk through registration, topics, placement and a disk failure."""
    from jbod_cli import walkthrough

    walkthrough.run(data_dir=data_dir, keep=keep)


local_cli.register(local_group)
apply_plan.register(app)


# -- entry point -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    return commands.run_main(app, argv, prog=PROG)


if __name__ == "__main__":
    sys.exit(main())
