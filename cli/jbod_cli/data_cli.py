"""`jbodctl produce` and `jbodctl consume`: records written to and read from a topic by Kafka
clients (confluent-kafka, librdkafka) on the brokers' Kafka listeners.

Guarantees:
* Both connect where and as `commands.kafka_target` says (`--bootstrap-server`, else the listeners
  the brokers registered; `--command-config`'s user, else `admin` with the token) and find the
  topic's partitions in Metadata first: an unknown topic or partition, a refused login, every
  listener refusing the connection (`rdkafka.REFUSED_GRACE_SECONDS`) or no listener answering
  within `--timeout` is one line before anything is sent or read.
* `produce` is an idempotent producer with acks=all (the default, `--acks -1`): a retried batch is
  never written twice. `--acks 1` / `0` are not idempotent (Kafka requires acks=all for that).
  Keyed records go to the partition of Kafka's Java client (murmur2), keyless ones to a sticky
  partition; `--partition` sends every record to one.
* `produce` exits 0 only when every record was acknowledged (with the requested acks); otherwise
  one `CommandError` line counts the records not produced, names the first failure and why, the
  first that applies: the producer's fatal error; an idempotent producer that never got a producer
  id (`NO_PRODUCER_ID`: the controller is needed for one); the last error librdkafka had from a
  broker, which names its address.
* `produce` takes values from `--value` (repeatable) or one per line of stdin (a final newline ends
  the last line, a CR before it is dropped); with `--base64` the key and values are decoded first,
  and a value that is not base64, or a record whose key and value hold more than
  `RECORD_MAX_BYTES`, is a `CommandError`, nothing is sent.
* `consume` assigns the partitions itself (no consumer group, nothing committed) and prints one
  value per line (`null` for a null value, as Kafka's console consumer prints it; one JSON object
  per line with `--output json`) as records arrive, flushed,
  and a count on stderr; it stops after `--max-messages` or `--timeout` seconds without a new
  record, and fails (after printing what it read) when a partition did not reach its end and
  something says why: it has no leader, or librdkafka had an error from it or its leader. `--offset` beyond a partition's end starts at its end,
  below its log start at the log start, as before; records are never skipped.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import click

from jbod_cli import commands
from jbod_cli.commands import CommandError, output_option
from jbod_client import rdkafka
from jbod_client.kafka_config import KafkaTarget

#: Seconds `produce` waits for delivery reports beyond `--timeout` (librdkafka reports every
#: record by then; this only guards against a report that never comes).
FLUSH_GRACE_SECONDS = 5.0
#: librdkafka's `message.max.bytes` for `produce` (its default): it refuses a larger record.
MESSAGE_MAX_BYTES = 1_000_000
#: The most a record's key and value may hold together: librdkafka counts 36 bytes of framing per
#: record against `message.max.bytes`. `produce` checks it before anything is sent.
RECORD_MAX_BYTES = MESSAGE_MAX_BYTES - 36


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


def _no_partition(topic: str, partition: int, layout: rdkafka.TopicLayout) -> CommandError:
    return CommandError(f"topic {topic} has no partition {partition} (it has {len(layout.leaders)})")


# -- produce -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Sending:
    """How `produce` sends every record: its key, its partition (None: by key, else sticky), the
    acks, and the seconds to keep retrying it."""

    key: bytes | None
    partition: int | None
    acks: int
    timeout: float


@dataclass(frozen=True, slots=True)
class Delivered:
    partition: int
    offset: int  # -1: unknown (acks=0)


@dataclass(frozen=True, slots=True)
class NotDelivered:
    reason: str  # one line: `NAME (errorCode N): message`


def producer_settings(sending: _Sending) -> dict[str, Any]:
    """librdkafka's producer settings for `sending`: idempotent exactly when acks=all."""
    timeout_ms = max(1, int(sending.timeout * 1000))
    return {
        "acks": "all" if sending.acks == -1 else str(sending.acks),
        "enable.idempotence": sending.acks == -1,
        "message.timeout.ms": timeout_ms,
        "request.timeout.ms": min(15_000, timeout_ms),
        "linger.ms": min(5, timeout_ms - 1),  # librdkafka wants it below message.timeout.ms
        "partitioner": "murmur2_random",  # Kafka's Java client's partition for a key
        "message.max.bytes": MESSAGE_MAX_BYTES,
        "statistics.interval.ms": 250,  # whether the idempotent producer got its producer id
    }


#: Said when an idempotent producer's records failed before it had a producer id.
NO_PRODUCER_ID = (
    "the idempotent producer got no producer id in time: brokers take them from the controller, "
    "is it reachable? (--acks 1 produces without one)"
)


@dataclass(frozen=True)
class _Produced:
    results: list[Delivered | NotDelivered]
    errors: rdkafka.ErrorLog
    statistics: rdkafka.ProducerStatistics


def _produce_all(target: KafkaTarget, topic: str, values: Sequence[bytes], sending: _Sending) -> _Produced:
    from confluent_kafka import KafkaException, Producer

    errors, statistics = rdkafka.ErrorLog(), rdkafka.ProducerStatistics()
    producer = rdkafka.create(
        Producer, rdkafka.client_config(target, errors, **producer_settings(sending), stats_cb=statistics)
    )
    layout = rdkafka.topic_partitions(producer, topic, target=target, errors=errors, timeout=sending.timeout)
    if sending.partition is not None and sending.partition not in layout.leaders:
        raise _no_partition(topic, sending.partition, layout)
    results: list[Delivered | NotDelivered | None] = [None] * len(values)

    def report(index: int, error: Any, message: Any) -> None:
        if error is not None:
            results[index] = NotDelivered(rdkafka.error_text(error))
        else:
            offset = message.offset()  # None with acks=0
            known = offset is not None and offset >= 0
            results[index] = Delivered(int(message.partition()), int(offset) if known else -1)

    partition = -1 if sending.partition is None else sending.partition  # -1: the partitioner's
    for index, value in enumerate(values):
        while True:
            try:
                producer.produce(
                    topic,
                    value,
                    key=sending.key,
                    partition=partition,
                    on_delivery=functools.partial(report, index),
                )
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)
            except KafkaException as exc:  # refused by librdkafka before sending: this record fails
                results[index] = NotDelivered(rdkafka.error_text(exc.args[0]))
                break
        producer.poll(0)
    producer.flush(sending.timeout + FLUSH_GRACE_SECONDS)
    late = NotDelivered(f"no delivery report within {sending.timeout + FLUSH_GRACE_SECONDS:g} s")
    return _Produced([late if r is None else r for r in results], errors, statistics)


def _produced_message(topic: str, done: Sequence[Delivered]) -> tuple[dict[str, Any], str]:
    """(the JSON summary, the line) of what was produced."""
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
    summary = {
        "topic": topic,
        "count": len(done),
        "partitions": per_partition,
        "records": [{"partition": r.partition, "offset": r.offset} for r in done],
    }
    parts = ", ".join(
        f"partition {p['partition']} offsets {p['firstOffset']}-{p['lastOffset']}"
        if p["firstOffset"] is not None
        else f"partition {p['partition']} ({p['count']} records, offsets unknown with acks=0)"
        for p in per_partition
    )
    return summary, f"Produced {len(done)} records to {topic}: {parts}"


@click.command("produce")
@click.argument("topic")
@click.option(
    "--partition",
    "-p",
    type=click.IntRange(min=0),
    default=None,
    help="partition (default: by key as Kafka's Java client, else sticky)",
)
@click.option(
    "--acks",
    type=click.Choice(["-1", "0", "1", "all"]),
    default="-1",
    show_default=True,
    help="-1/all: every ISR replica, idempotent; 1: leader; 0: no wait",
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
    help="seconds to find the topic and to keep retrying a record before failing",
)
@commands.kafka_options
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
    bootstrap_server: tuple[str, ...],
    command_config: Any,
    output: str | None,
) -> None:
    """Write records to a topic: --value V (repeatable) or one record per line of stdin."""
    settings = commands.settings_of(
        ctx, output, bootstrap_server=bootstrap_server, command_config=command_config
    )
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
    too_large = next(
        (i for i, v in enumerate(payloads) if len(v) + len(key_bytes or b"") > RECORD_MAX_BYTES), None
    )
    if too_large is not None:
        raise CommandError(
            f"record {too_large + 1} holds {len(payloads[too_large]) + len(key_bytes or b''):,} bytes "
            f"(key and value), more than the {RECORD_MAX_BYTES:,} a record may: nothing was produced"
        )
    sending = _Sending(
        key=key_bytes, partition=partition, acks=-1 if acks == "all" else int(acks), timeout=timeout
    )
    produced = _produce_all(commands.kafka_target(settings), topic, payloads, sending)
    failed = [r for r in produced.results if isinstance(r, NotDelivered)]
    done = [r for r in produced.results if isinstance(r, Delivered)]
    if failed:
        errors = produced.errors
        if errors.fatal is not None:
            why = f"; the producer failed: {errors.fatal}"
        elif produced.statistics.waiting_for_producer_id:
            why = f"; {NO_PRODUCER_ID}"
        else:
            why = f"; last broker error: {errors.last}" if errors.last else ""
        raise CommandError(
            f"{len(failed)} of {len(produced.results)} records not produced to {topic}"
            f"{f' ({len(done)} were)' if done else ''}: {failed[0].reason}{why}"
        )
    summary, line = _produced_message(topic, done)
    if settings.output == "json":
        click.echo(json.dumps(summary, indent=2))
    else:
        click.echo(line)


# -- consume -------------------------------------------------------------------------------------


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


@dataclass(frozen=True, slots=True)
class KafkaRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def consumer_settings() -> dict[str, Any]:
    """librdkafka's consumer settings: partitions assigned by jbodctl, nothing committed, an
    event at each partition's end; a position lost to retention restarts at the log start."""
    return {
        "group.id": "jbodctl",  # required by confluent-kafka; never joined (assign only)
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 100,  # an idle partition reports its end within a short --timeout
    }


def start_offset(offset: int, low: int, high: int) -> int:
    """Where `--offset` starts a partition whose log holds [low, high): at most its end, at least
    its log start (retention deleted what was before)."""
    return max(low, min(offset, high))


def _start_positions(consumer: Any, topic: str, partitions: Sequence[int], reading: _Reading) -> list[Any]:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaException, TopicPartition

    if reading.offset is None:
        where = OFFSET_END if reading.start == "latest" else OFFSET_BEGINNING
        return [TopicPartition(topic, p, where) for p in partitions]
    positions = []
    for p in partitions:
        try:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=max(1.0, reading.idle_timeout)
            )
        except KafkaException as exc:
            raise CommandError(
                f"cannot read the offsets of {topic}-{p}: {rdkafka.error_text(exc.args[0])}"
            ) from None
        positions.append(TopicPartition(topic, p, start_offset(reading.offset, int(low), int(high))))
    return positions


def _consume(
    target: KafkaTarget, topic: str, reading: _Reading, *, emit: Callable[[KafkaRecord], None]
) -> int:
    from confluent_kafka import Consumer, KafkaError

    errors = rdkafka.ErrorLog()
    consumer = rdkafka.create(Consumer, rdkafka.client_config(target, errors, **consumer_settings()))
    try:
        layout = rdkafka.topic_partitions(
            consumer, topic, target=target, errors=errors, timeout=reading.idle_timeout
        )
        partitions = list(reading.partitions) if reading.partitions is not None else sorted(layout.leaders)
        for p in partitions:
            if p not in layout.leaders:
                raise _no_partition(topic, p, layout)
        consumer.assign(_start_positions(consumer, topic, partitions, reading))
        count = 0  # the idle clock starts once the partitions are assigned
        at_end: set[int] = set()
        partition_errors: dict[int, str] = {}
        last_new = time.monotonic()
        while reading.max_messages is None or count < reading.max_messages:
            remaining = reading.idle_timeout - (time.monotonic() - last_new)
            if remaining <= 0:
                break
            message = consumer.poll(min(remaining, 1.0))
            if message is None:
                continue
            error, partition, offset = message.error(), message.partition(), message.offset()
            if partition is None or partition < 0:
                continue  # an error of the client, not of a partition: the ErrorLog has it
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(partition)
                else:
                    partition_errors[partition] = rdkafka.error_text(error)
                continue
            at_end.discard(partition)
            partition_errors.pop(partition, None)
            emit(KafkaRecord(topic, partition, int(offset or 0), message.key(), message.value()))
            count += 1
            last_new = time.monotonic()
        done = reading.max_messages is not None and count >= reading.max_messages
        behind = [] if done else [p for p in partitions if p not in at_end]
    finally:
        consumer.close()
    troubles = {
        p: why
        for p in behind
        if (why := partition_errors.get(p) or rdkafka.describe_partition_trouble(layout, p, errors))
    }
    if troubles:
        reasons = "; ".join(f"{topic}-{p}: {why}" for p, why in troubles.items())
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
    help="stop when nothing new arrived for this many seconds (also: how long to look for the topic)",
)
@click.option("--print-offsets", is_flag=True, help="prefix each value with PARTITION:OFFSET and a tab")
@click.option("--base64", "b64", is_flag=True, help="print keys and values as base64")
@commands.kafka_options
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
    bootstrap_server: tuple[str, ...],
    command_config: Any,
    output: str | None,
) -> None:
    """Print a topic's records, one value per line (JSON lines with --output json)."""
    settings = commands.settings_of(
        ctx, output, bootstrap_server=bootstrap_server, command_config=command_config
    )
    if sum((offset is not None, from_beginning, latest)) > 1:
        raise CommandError("give at most one of --offset, --from-beginning and --latest")
    json_lines = settings.output == "json"
    out = sys.stdout

    def emit(record: KafkaRecord) -> None:
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
            line = "null" if record.value is None else str(_show(record.value, b64=b64))
        out.write(line + "\n")
        out.flush()

    reading = _Reading(
        partitions=list(dict.fromkeys(partitions)) or None,
        start="latest" if latest else "earliest",
        offset=offset,
        max_messages=max_messages,
        idle_timeout=timeout,
    )
    count = _consume(commands.kafka_target(settings), topic, reading, emit=emit)
    click.echo(f"Consumed {count} records from {topic}", err=True)


COMMANDS = (produce, consume)
