"""`jbodctl produce` and `jbodctl consume`: records written to and read from a topic.

Guarantees:
* Both find the partitions' leaders through the cluster metadata (`--bootstrap` brokers first,
  then the controller: `GET /v1/topics/{name}`, `GET /v1/brokers`) and talk to the brokers directly.
* `produce` exits 0 only when every record was acknowledged (with the requested acks); otherwise
  one `CommandError` line counts the records not produced and names the first failure.
* `produce` takes values from `--value` (repeatable) or one per line of stdin (a final newline ends
  the last line, a CR before it is dropped); with `--base64` the key and values are decoded first,
  and a value that is not base64 is a `CommandError`, nothing is sent.
* `consume` prints one value per line (or one JSON object per line with `--output json`) as records
  arrive, flushed, and a count on stderr; it stops after `--max-messages` or `--timeout` seconds
  without a new record, and fails (after printing what it read) when a partition could not be fetched.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import click

from jbod_cli import commands
from jbod_cli.commands import CommandError, Settings, output_option
from jbod_client.consumer import ConsumedRecord, Consumer
from jbod_client.metadata import ClusterMetadata
from jbod_client.producer import Producer, RecordMetadata


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


@dataclass(frozen=True, slots=True)
class _Sending:
    """How `produce` sends every record: its key, its partition (None: by key, else sticky), the
    acks, and the seconds to keep retrying it."""

    key: bytes | None
    partition: int | None
    acks: int
    timeout: float


async def _produce_all(
    settings: Settings, topic: str, values: Sequence[bytes], sending: _Sending
) -> list[RecordMetadata | BaseException]:
    timeout_ms = max(1, int(sending.timeout * 1000))
    async with Producer(
        settings.controller,
        token=settings.token(),
        bootstrap=settings.bootstrap,
        acks=sending.acks,
        delivery_timeout_ms=timeout_ms,
        request_timeout_ms=min(15_000, timeout_ms),
    ) as producer:
        futures = [
            await producer.send(topic, value, key=sending.key, partition=sending.partition)
            for value in values
        ]
        await producer.flush()
        return list(await asyncio.gather(*futures, return_exceptions=True))


@click.command("produce")
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
def produce(  # noqa: PLR0913  click command: one parameter per option
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
            _Sending(
                key=key_bytes, partition=partition, acks=-1 if acks == "all" else int(acks), timeout=timeout
            ),
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


@dataclass(frozen=True, slots=True)
class _Reading:
    """What `consume` reads: the partitions (None: all), where it starts ("earliest", "latest", or
    every partition at `offset` when that is given), and when it stops (after `max_messages`, or
    once nothing new arrived for `idle_timeout` seconds)."""

    partitions: Sequence[int] | None
    start: str
    offset: int | None
    max_messages: int | None
    idle_timeout: float


async def _consume(settings: Settings, topic: str, reading: _Reading, *, emit: Any) -> int:
    token = settings.token()
    partitions, offset = reading.partitions, reading.offset
    max_messages, idle_timeout = reading.max_messages, reading.idle_timeout
    start: str | dict[int, int] = reading.start
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


@click.command("consume")
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
def consume(  # noqa: PLR0913  click command: one parameter per option
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
            _Reading(
                partitions=list(dict.fromkeys(partitions)) or None,
                start="latest" if latest else "earliest",
                offset=offset,
                max_messages=max_messages,
                idle_timeout=timeout,
            ),
            emit=emit,
        )
    )
    click.echo(f"Consumed {count} records from {topic}", err=True)


COMMANDS = (produce, consume)
