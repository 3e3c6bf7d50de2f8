"""`jbodctl metadata export`: the controller's metadata log written to a file.

Guarantees:
* The file is written whole or not at all: records go to `OUT.tmp`, renamed over `OUT` once the
  last one is written and removed on any failure; an OSError is one `cannot write OUT` line.
* JSON lines by default, one `{offset, type, data}` record per line from
  `--from-offset`; `--format parquet` (the default for a `*.parquet` OUT) writes the typed columns
  of `jbod_cli.metadata_parquet` and needs pyarrow, which is imported only then.
* The count of exported records goes to stderr, never into the file.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import click

from jbod_cli import commands
from jbod_cli.commands import CommandError, Settings


@click.group("metadata")
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


COMMANDS = (metadata_group,)
