"""`jbodctl`: the admin CLI (protocol §5): the root group with its global options, and the
controller's admin commands (topics, brokers, cluster).

Every other command lives in a module of its own whose `COMMANDS` this module adds to the root
group: `data_cli` (produce, consume), `log_dirs_cli` (log-dirs, move-replica), `reassign_cli`
(reassign start|list|cancel), `transactions_cli` (transactions), `metadata_cli`
(metadata export) and `apply_plan` (apply-plan); `local_cli` fills the `jbodctl local` group. They
share `commands` (settings, options, output, errors) and never import this module.

Guarantees:
* Human tables by default, `--output json` (global or per command) for scripts.
* Any error — bad flags, unreadable token file, unreachable controller, or a non-zero
  `errorCode` in the reply — prints one line `jbodctl: error: ...` on stderr and exits non-zero
  (2 for usage, 1 otherwise). No traceback for a user mistake. A group run without a subcommand
  (`jbodctl`, `jbodctl topics`, `jbodctl local`) prints its help and exits 0. A missing token or a
  refused connection adds what to do (`jbod_cli.hints`): most often `eval "$(jbodctl local env)"`.
* `--bootstrap` brokers are where the data-plane commands (`produce`, `consume`, `log-dirs`,
  `move-replica`) ask for cluster metadata before the controller; each is an http(s) URL, checked
  before any command runs (a `host:port` there is refused with a line naming --bootstrap-server).
* `--bootstrap-server` (KAFKA_BOOTSTRAP_SERVERS) and `--command-config` are where and as whom those
  commands' Kafka clients connect (`commands.kafka_target`); each address is `host:port`, checked
  before any command runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from jbod_cli import (
    apply_plan,
    commands,
    data_cli,
    local_cli,
    log_dirs_cli,
    metadata_cli,
    reassign_cli,
    tables,
    transactions_cli,
)
from jbod_cli.commands import CommandError, Settings, output_option, wide_option
from jbod_client.controller import DEFAULT_URL, parse_controller_urls

PROG = "jbodctl"


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
    help="broker URLs (their HTTP API) that produce, consume, log-dirs and move-replica ask for "
    "cluster metadata before the controller (or JBOD_BOOTSTRAP): the brokers' Kafka listeners when "
    "--bootstrap-server is not given, their registrations and dir ids; they answer while no "
    "controller does",
)
@click.option(
    "--bootstrap-server",
    "bootstrap_server",
    envvar="KAFKA_BOOTSTRAP_SERVERS",
    default=None,
    callback=commands.bootstrap_servers,
    metavar="HOST:PORT[,...]",
    help="Kafka listeners that produce, consume, log-dirs and move-replica bootstrap from (or "
    "KAFKA_BOOTSTRAP_SERVERS; default: the Kafka listeners the brokers registered)",
)
@click.option(
    "--command-config",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Kafka client properties as kafka-*.sh take them (security.protocol, sasl.mechanism, "
    "sasl.jaas.config); default: the user admin, its password the token of --token-file",
)
@click.option(
    "--token-file",
    envvar="JBOD_TOKEN_FILE",
    type=click.Path(path_type=Path),
    default=None,
    help="file holding the bearer token (or JBOD_TOKEN_FILE)",
)
@click.option(
    "--ca-file",
    envvar="JBOD_CA_FILE",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    default=None,
    help="PEM bundle of the CAs that signed https controllers' and brokers' certificates "
    "(or JBOD_CA_FILE); default: the system's CAs",
)
@click.option(
    "--output", "-o", type=commands.OUTPUTS, default="table", show_default=True, help="table or json"
)
@click.pass_context
def app(  # noqa: PLR0913  click group: one parameter per option
    ctx: click.Context,
    controller: str,
    bootstrap: str,
    bootstrap_server: tuple[str, ...],
    command_config: Path | None,
    token_file: Path | None,
    ca_file: Path | None,
    output: str,
) -> None:
    """Administer a JBOD cluster: topics, brokers, log dirs, metadata; produce and consume; run it locally."""
    brokers = tuple(u.strip() for u in bootstrap.split(",") if u.strip())
    for url in brokers:
        if not url.startswith(("http://", "https://")):
            raise click.BadParameter(
                f"{url!r} is not an http:// URL (Kafka listeners, host:port, go to --bootstrap-server)",
                param_hint="--bootstrap",
            )
    try:
        parse_controller_urls(controller)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--controller") from None
    ctx.obj = Settings(
        controller=controller,
        token_file=token_file,
        output=output,
        bootstrap=brokers,
        bootstrap_servers=bootstrap_server,
        command_config=command_config,
        ca_file=ca_file,
    )


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
def topics_create(  # noqa: PLR0913  click command: one parameter per option
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


# -- the command modules -----------------------------------------------------------------------


for command in (
    *data_cli.COMMANDS,
    *log_dirs_cli.COMMANDS,
    *metadata_cli.COMMANDS,
    *reassign_cli.COMMANDS,
    *transactions_cli.COMMANDS,
):
    app.add_command(command)
local_cli.register(local_group)
apply_plan.register(app)


# -- entry point -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    return commands.run_main(app, argv, prog=PROG)


if __name__ == "__main__":
    sys.exit(main())
