"""`jbodctl transactions`: the open transactions of each partition and how far they hold back its
last stable offset (LSO lag: records a read_committed consumer cannot read yet), read from the
partitions' leaders over Kafka's protocol (`jbod_client.open_transactions`).

Guarantees:
* By default only the partitions with a transaction open or an LSO behind the high watermark are
  shown (`--all`: every partition); `--topic` (repeatable) limits it to those topics.
* A transaction open longer than `--older-than` (default: none shown as old) is marked old: a
  hanging transaction, as `kafka-transactions.sh find-hanging` calls one older than
  `transaction.max.timeout.ms`, and abortable with `kafka-transactions.sh abort`.
* The partitions that could not be read are listed under the table, and the command then exits 1
  after printing everything it could read (one line naming each).
* `-o json` gives every partition asked about, read or not.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from jbod_cli import commands
from jbod_cli.commands import CommandError, Settings, output_option
from jbod_client.kafka_admin import describe_error
from jbod_client.open_transactions import PartitionTransactions


async def _read(settings: Settings, topics: Sequence[str]) -> list[PartitionTransactions]:
    from jbod_client.kafka_admin import KafkaAdmin
    from jbod_client.open_transactions import open_transactions

    security = settings.kafka_security()
    bootstrap = await commands.kafka_bootstrap(settings, security)
    async with KafkaAdmin(bootstrap, security) as admin:
        return await open_transactions(admin, list(topics) or None)


def shown(partitions: Sequence[PartitionTransactions], *, everything: bool) -> list[PartitionTransactions]:
    """The partitions the table shows: all with `everything`, else those with an open
    transaction, an LSO lag, or an error."""
    if everything:
        return list(partitions)
    return [p for p in partitions if p.open or (p.lso_lag or 0) > 0 or p.error_code or p.error]


def _age(now_ms: int, timestamp_ms: int) -> str:
    if timestamp_ms < 0:
        return "?"
    seconds = max(0, now_ms - timestamp_ms) // 1000
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def transactions_table(
    partitions: Sequence[PartitionTransactions], *, now_ms: int, older_than_ms: int | None
) -> Table:
    table = Table(title="Open transactions by partition", title_justify="left")
    for column in (
        "topic",
        "partition",
        "leader",
        "high watermark",
        "LSO",
        "LSO lag",
        "open (producer id: start offset, last write)",
    ):
        table.add_column(column)
    for p in partitions:
        if p.error_code or p.error:
            continue
        txns = []
        for t in p.open:
            old = (
                older_than_ms is not None
                and t.last_timestamp_ms >= 0
                and now_ms - t.last_timestamp_ms > older_than_ms
            )
            label = f"{t.producer_id}: {t.start_offset}, {_age(now_ms, t.last_timestamp_ms)} ago"
            txns.append(f"[red]{label} (old)[/]" if old else label)
        table.add_row(
            escape(p.topic),
            str(p.partition),
            str(p.leader),
            str(p.high_watermark),
            str(p.last_stable_offset),
            str(p.lso_lag),
            "\n".join(txns) or "-",
        )
    return table


def _failure(p: PartitionTransactions) -> str:
    where = f"{p.topic}" if p.partition < 0 else f"{p.topic}-{p.partition}"
    return f"{where}: {p.error or describe_error(p.error_code)}"


@click.command("transactions")
@click.option("--topic", "topics", multiple=True, help="a topic, repeatable (default: every topic)")
@click.option(
    "--all", "everything", is_flag=True, help="every partition, not only those with open transactions"
)
@click.option(
    "--older-than",
    type=click.IntRange(min=0),
    default=None,
    metavar="MS",
    help="mark transactions whose last write is older than MS milliseconds (hanging ones)",
)
@commands.kafka_options
@output_option
@click.pass_context
def transactions(  # noqa: PLR0913  click command: one parameter per option
    ctx: click.Context,
    topics: tuple[str, ...],
    everything: bool,
    older_than: int | None,
    bootstrap_server: tuple[str, ...],
    command_config: Any,
    output: str | None,
) -> None:
    """Show each partition's open transactions and LSO lag (records read_committed consumers
    cannot read yet), as the partitions' leaders report them."""
    settings = commands.settings_of(
        ctx, output, bootstrap_server=bootstrap_server, command_config=command_config
    )
    partitions = commands.run(_read(settings, list(dict.fromkeys(topics))))
    failed = [p for p in partitions if p.error_code or p.error]
    rows = shown(partitions, everything=everything)
    if settings.output == "json":
        commands.emit(settings, [p.to_json() for p in partitions], None)
    elif not [p for p in rows if not (p.error_code or p.error)]:
        commands.emit(settings, None, "No open transactions" if not everything else "No partitions")
    else:
        now_ms = int(time.time() * 1000)
        commands.emit(settings, None, transactions_table(rows, now_ms=now_ms, older_than_ms=older_than))
    if failed:
        raise CommandError("cannot read " + "; ".join(_failure(p) for p in failed))


COMMANDS = (transactions,)
