"""`jbodctl`: the admin CLI (protocol §5).

Guarantees:
* Human tables by default, `--output json` (global or per command) for scripts.
* Any error — bad flags, unreadable token file, unreachable controller, or a non-zero
  `errorCode` in the reply — prints one line `jbodctl: error: ...` on stderr and exits non-zero
  (2 for usage, 1 otherwise). No traceback for a user mistake.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from jbod_client import tables
from jbod_client.controller import DEFAULT_URL, ClientError, ControllerClient, read_token

PROG = "jbodctl"
OUTPUTS = click.Choice(["table", "json"])


@dataclass
class Settings:
    controller: str
    token_file: Path | None
    output: str

    def client(self) -> ControllerClient:
        if self.token_file is None:
            raise ClientError("no token: pass --token-file FILE or set JBOD_TOKEN_FILE")
        return ControllerClient(self.controller, token=read_token(self.token_file))


class CommandError(Exception):
    """A reply with a non-zero error code, or a user mistake found after parsing."""


def output_option(command: Any) -> Any:
    return click.option("--output", "-o", type=OUTPUTS, default=None, help="table or json")(command)


def _settings(ctx: click.Context, output: str | None) -> Settings:
    settings: Settings = ctx.find_object(Settings)  # type: ignore[assignment]
    if output is not None:
        settings.output = output
    return settings


def _emit(settings: Settings, data: Any, render: Any) -> None:
    if settings.output == "json":
        click.echo(json.dumps(data, indent=2))
    else:
        Console().print(render)


def _check(reply: dict[str, Any], what: str) -> None:
    code = int(reply.get("errorCode", 0))
    if code != 0:
        raise CommandError(f"{what}: {reply.get('errorMessage') or 'failed'} (errorCode {code})")


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
    help="controller URL",
)
@click.option(
    "--token-file",
    envvar="JBOD_TOKEN_FILE",
    type=click.Path(path_type=Path),
    default=None,
    help="file holding the bearer token (or JBOD_TOKEN_FILE)",
)
@click.option("--output", "-o", type=OUTPUTS, default="table", show_default=True, help="table or json")
@click.pass_context
def app(ctx: click.Context, controller: str, token_file: Path | None, output: str) -> None:
    """Administer a JBOD cluster: topics, brokers, metadata; run a local walk-through."""
    ctx.obj = Settings(controller=controller, token_file=token_file, output=output)


# -- topics ------------------------------------------------------------------------------------


@app.group("topics")
def topics_group() -> None:
    """Create, describe, list and delete topics."""


@topics_group.command("create")
@click.argument("name")
@click.option("--partitions", "-p", type=int, default=None, help="number of partitions")
@click.option("--replication-factor", "-r", type=int, default=None, help="replicas per partition")
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
    settings = _settings(ctx, output)
    replica_assignment = _parse_assignment(assignment) if assignment else None
    if replica_assignment is None and (partitions is None or replication_factor is None):
        raise CommandError("give --partitions and --replication-factor, or --assignment")
    with settings.client() as client:
        reply = client.create_topic(
            name,
            partitions=partitions,
            replication_factor=replication_factor,
            replica_assignment=replica_assignment,
            configs=_parse_configs(configs),
        )
    _check(reply, f"cannot create topic {name}")
    _emit(
        settings,
        reply,
        f"Created topic [bold]{name}[/] ({reply['topicId']}): {reply['numPartitions']} partitions, "
        f"replication factor {reply['replicationFactor']}",
    )


@topics_group.command("describe")
@click.argument("name")
@output_option
@click.pass_context
def topics_describe(ctx: click.Context, name: str, output: str | None) -> None:
    """Show a topic's partitions: leader, ISR, directories, offline replicas."""
    settings = _settings(ctx, output)
    with settings.client() as client:
        topic = client.describe_topic(name)
    _emit(settings, topic, tables.partitions_table(topic))


@topics_group.command("list")
@output_option
@click.pass_context
def topics_list(ctx: click.Context, output: str | None) -> None:
    """List every topic."""
    settings = _settings(ctx, output)
    with settings.client() as client:
        topics = client.list_topics()
    _emit(settings, topics, tables.topics_table(topics))


@topics_group.command("delete")
@click.argument("name")
@output_option
@click.pass_context
def topics_delete(ctx: click.Context, name: str, output: str | None) -> None:
    """Delete a topic."""
    settings = _settings(ctx, output)
    with settings.client() as client:
        reply = client.delete_topic(name)
    _check(reply, f"cannot delete topic {name}")
    _emit(settings, reply, f"Deleted topic [bold]{name}[/]")


# -- brokers -----------------------------------------------------------------------------------


@app.group("brokers", invoke_without_command=True)
@output_option
@click.pass_context
def brokers_group(ctx: click.Context, output: str | None) -> None:
    """List registered brokers with their online and offline dirs (or a subcommand)."""
    if ctx.invoked_subcommand is not None:
        return
    settings = _settings(ctx, output)
    with settings.client() as client:
        brokers = client.brokers()
    _emit(settings, brokers, tables.brokers_table(brokers))


@brokers_group.command("describe")
@click.argument("broker_id", type=int)
@output_option
@click.pass_context
def brokers_describe(ctx: click.Context, broker_id: int, output: str | None) -> None:
    """Show one broker."""
    settings = _settings(ctx, output)
    with settings.client() as client:
        broker = client.broker(broker_id)
    _emit(settings, broker, tables.brokers_table([broker]))


@brokers_group.command("unregister")
@click.argument("broker_id", type=int)
@output_option
@click.pass_context
def brokers_unregister(ctx: click.Context, broker_id: int, output: str | None) -> None:
    """Remove a broker's registration (fencing it first)."""
    settings = _settings(ctx, output)
    with settings.client() as client:
        reply = client.unregister_broker(broker_id)
    _check(reply, f"cannot unregister broker {broker_id}")
    _emit(settings, reply, f"Unregistered broker {broker_id}")


@app.command("cluster")
@output_option
@click.pass_context
def cluster(ctx: click.Context, output: str | None) -> None:
    """Show cluster counts: brokers, fenced brokers, offline partitions, metadata end offset."""
    settings = _settings(ctx, output)
    with settings.client() as client:
        info = client.cluster()
    _emit(settings, info, tables.cluster_table(info))


# -- metadata ----------------------------------------------------------------------------------


@app.group("metadata")
def metadata_group() -> None:
    """Read the metadata log."""


@metadata_group.command("export")
@click.option("--out", required=True, type=click.Path(path_type=Path), help="JSON-lines file to write")
@click.option("--from-offset", type=click.IntRange(min=0), default=0, help="first offset to export")
@click.pass_context
def metadata_export(ctx: click.Context, out: Path, from_offset: int) -> None:
    """Write the whole metadata log as JSON lines, one {offset, type, data} record per line."""
    settings = _settings(ctx, None)
    tmp = out.with_name(out.name + ".tmp")
    count = 0
    first = last = None
    try:
        with settings.client() as client, open(tmp, "w", encoding="utf-8") as handle:
            for record in client.iter_metadata(from_offset=from_offset):
                handle.write(json.dumps(record, separators=(",", ":")) + "\n")
                count += 1
                first = record["offset"] if first is None else first
                last = record["offset"]
        os.replace(tmp, out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise CommandError(f"cannot write {out}: {exc.strerror or exc}") from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    span = f" (offsets {first}-{last})" if count else ""
    click.echo(f"Exported {count} records{span} to {out}", err=True)


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
    from jbod_client import walkthrough

    walkthrough.run(data_dir=data_dir, keep=keep)


# -- entry point -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    try:
        result = app.main(args=argv, prog_name=PROG, standalone_mode=False)
    except click.exceptions.UsageError as exc:
        print(f"{PROG}: error: {exc.format_message()}", file=sys.stderr)
        return 2
    except click.exceptions.Abort:
        print(f"{PROG}: error: aborted", file=sys.stderr)
        return 1
    except click.ClickException as exc:
        print(f"{PROG}: error: {exc.format_message()}", file=sys.stderr)
        return 1
    except (ClientError, CommandError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
