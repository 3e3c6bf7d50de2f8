"""Kafka's LogValidator decisions on a produced batch that rest on its topic's configs (pure).

Guarantees:
* `stored_codec(settings)` is the codec a leader stores a produced batch with, as Kafka's
  `BrokerCompressionType.targetCompression`: None for `compression.type=producer` (every batch
  kept as sent), else the topic's codec (`uncompressed` is codec 0) with its level:
  `compression.gzip.level` (-1 is zlib's default, 6), `compression.lz4.level` (lz4 has no level
  above 12: 13-17 compress as 12), `compression.zstd.level`; snappy and none have no level.
  `StoredCodec.recompresses(codec)` is true only when a batch of `codec` must be compressed again.
* `timestamp_bounds(settings)` is the CreateTime window of a topic
  (`message.timestamp.before.max.ms` / `message.timestamp.after.max.ms`), None for a
  LogAppendTime topic, whose records Kafka does not check.
* `timestamp_errors` checks every record's timestamp as Kafka does (not the batch's max): a record
  whose timestamp is more than `before_max_ms` before `now_ms` or `after_max_ms` after it is one
  `RefusedRecord` (its index in the batch and Kafka's message, naming its offset as the producer
  sent it); a record without a timestamp (-1) is not checked. Any error refuses the whole batch
  with INVALID_TIMESTAMP and `INVALID_TIMESTAMP_MESSAGE`. The window in the message is computed
  as Java computes it (64-bit, wrapping), so it reads as Kafka's. `header_suffices` says when a
  compressed batch kept as sent need not be decompressed for it (our one shortcut:
  docs/decisions.md).
* `keyless_errors` names each record without a key produced to a compacted topic (Kafka's
  INVALID_RECORD with one record error per such record), `record_errors_message` is the batch's
  message then, as Kafka writes it (the count and the first three errors).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from jbod_core import topic_configs
from jbod_core.messages import INT64_MAX
from jbod_core.topic_configs import ResolvedConfigs

NO_TIMESTAMP: Final = -1
INVALID_TIMESTAMP_MESSAGE: Final = "One or more records have been rejected due to invalid timestamp"
#: Codec numbers of a RecordBatch's attributes, by `compression.type` name.
CODECS: Final = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
GZIP, LZ4, ZSTD = CODECS["gzip"], CODECS["lz4"], CODECS["zstd"]
_ZLIB_DEFAULT_LEVEL: Final = 6  # Java's Deflater.DEFAULT_COMPRESSION (-1) is zlib's level 6
_LZ4_MAX_LEVEL: Final = 12  # lz4's highest (HC) level; Kafka's 13-17 compress as 12 in lz4 itself


@dataclass(frozen=True, slots=True)
class StoredCodec:
    """The codec (a RecordBatch attributes' codec number) a topic's batches are stored with, and
    the level to compress with (None: the codec has none)."""

    codec: int
    level: int | None = None

    def recompresses(self, codec: int) -> bool:
        """Whether a batch of `codec` must be compressed again (only when the codecs differ)."""
        return codec != self.codec


def stored_codec(settings: ResolvedConfigs) -> StoredCodec | None:
    """The topic's codec for stored batches, None for `producer` (the module's guarantee)."""
    name = settings.compression_type
    if name not in CODECS:
        return None
    codec = CODECS[name]
    if codec == GZIP:
        level = settings[topic_configs.COMPRESSION_GZIP_LEVEL]
        return StoredCodec(codec, _ZLIB_DEFAULT_LEVEL if level == -1 else level)
    if codec == LZ4:
        return StoredCodec(codec, min(settings[topic_configs.COMPRESSION_LZ4_LEVEL], _LZ4_MAX_LEVEL))
    if codec == ZSTD:
        return StoredCodec(codec, settings[topic_configs.COMPRESSION_ZSTD_LEVEL])
    return StoredCodec(codec)


@dataclass(frozen=True, slots=True)
class TimestampBounds:
    """How far before and after the broker's time a record's CreateTime timestamp may be."""

    before_max_ms: int
    after_max_ms: int


DEFAULT_TIMESTAMP_BOUNDS: Final = TimestampBounds(
    int(topic_configs.BY_NAME[topic_configs.TIMESTAMP_BEFORE_MAX_MS].default),
    int(topic_configs.BY_NAME[topic_configs.TIMESTAMP_AFTER_MAX_MS].default),
)


def timestamp_bounds(settings: ResolvedConfigs) -> TimestampBounds | None:
    """The topic's CreateTime window, None for a LogAppendTime topic (not checked, as Kafka)."""
    if settings.log_append_time:
        return None
    return TimestampBounds(
        settings[topic_configs.TIMESTAMP_BEFORE_MAX_MS], settings[topic_configs.TIMESTAMP_AFTER_MAX_MS]
    )


@dataclass(frozen=True, slots=True)
class RefusedRecord:
    """One refused record of a batch: its index in the batch and why (Kafka's RecordError)."""

    batch_index: int
    message: str


def _java_long(value: int) -> int:
    """`value` as Java's 64-bit arithmetic leaves it (wrapping)."""
    return (value + 2**63) % 2**64 - 2**63


def header_suffices(bounds: TimestampBounds, *, max_timestamp_ms: int, now_ms: int) -> bool:
    """Whether a batch whose records were not read (one kept compressed as sent) may be let
    through on its header's max timestamp alone: with no lower bound (Kafka's default
    `message.timestamp.before.max.ms`) only the max can be too late, and a producer's header
    states it. Saves decompressing every compressed batch on a default topic."""
    return bounds.before_max_ms == INT64_MAX and max_timestamp_ms - now_ms <= bounds.after_max_ms


def timestamp_errors(
    timestamps: Sequence[int], *, base_offset: int, now_ms: int, bounds: TimestampBounds
) -> tuple[RefusedRecord, ...]:
    """Every record whose timestamp is outside the window around `now_ms` (the module's
    guarantee); `timestamps` in the batch's order, the first record's offset `base_offset`."""
    before, after = bounds.before_max_ms, bounds.after_max_ms
    if not timestamps or (
        min(timestamps) >= max(now_ms - before, NO_TIMESTAMP + 1) and max(timestamps) <= now_ms + after
    ):
        return ()  # every record inside the window (the common case, decided without a loop)
    errors = []
    for index, timestamp in enumerate(timestamps):
        if timestamp == NO_TIMESTAMP:
            continue
        difference = _java_long(now_ms - timestamp)  # Kafka's test, in Java's arithmetic
        if difference > before or _java_long(-difference) > after:
            low, high = _java_long(now_ms - before), _java_long(now_ms + after)
            errors.append(
                RefusedRecord(
                    index,
                    f"Timestamp {timestamp} of message with offset {base_offset + index} is out of "
                    f"range. The timestamp should be within [{low}, {high}]",
                )
            )
    return tuple(errors)


def keyless_errors(indexes: Sequence[int], *, topic: str, partition: int) -> tuple[RefusedRecord, ...]:
    """One `RefusedRecord` per record without a key (its index in the batch) produced to a
    compacted topic, with Kafka's message naming the partition."""
    message = f"Compacted topic cannot accept message without key in topic partition {topic}-{partition}"
    return tuple(RefusedRecord(index, message) for index in indexes)


def record_errors_message(errors: Sequence[RefusedRecord]) -> str:
    """The partition's error message for a batch refused by `errors` (not timestamps): Kafka's
    count and its first three record errors in Java's list form."""
    shown = ", ".join(f"RecordError(batchIndex={e.batch_index}, message='{e.message}')" for e in errors[:3])
    return (
        f"One or more records have been rejected due to {len(errors)} record errors in total, "
        f"and only showing the first three errors at most: [{shown}]"
    )
