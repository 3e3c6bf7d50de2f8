"""Kafka's LogValidator decisions on a produced batch (`jbod_core.log_validator`)."""

from __future__ import annotations

from jbod_core import log_validator, topic_configs
from jbod_core.log_validator import StoredCodec, TimestampBounds

NOW = 1_800_000_000_000
HOUR = 3_600_000


def _settings(configs: dict[str, str]) -> topic_configs.ResolvedConfigs:
    return topic_configs.resolve(configs, {})


def test_the_stored_codec_is_the_topics_with_its_level() -> None:
    assert log_validator.stored_codec(_settings({})) is None  # producer
    assert log_validator.stored_codec(_settings({"compression.type": "uncompressed"})) == StoredCodec(0)
    assert log_validator.stored_codec(_settings({"compression.type": "gzip"})) == StoredCodec(1, 6)
    assert log_validator.stored_codec(
        _settings({"compression.type": "gzip", "compression.gzip.level": "2"})
    ) == StoredCodec(1, 2)
    assert log_validator.stored_codec(_settings({"compression.type": "snappy"})) == StoredCodec(2)
    assert log_validator.stored_codec(
        _settings({"compression.type": "lz4", "compression.lz4.level": "17"})
    ) == StoredCodec(3, 12)
    assert log_validator.stored_codec(_settings({"compression.type": "zstd"})) == StoredCodec(4, 3)
    assert StoredCodec(4, 3).recompresses(3) and not StoredCodec(4, 3).recompresses(4)


def test_every_record_outside_the_window_is_named_and_log_append_time_is_not_checked() -> None:
    bounds = log_validator.timestamp_bounds(_settings({"message.timestamp.before.max.ms": str(HOUR)}))
    assert bounds == TimestampBounds(HOUR, HOUR)
    stamps = [NOW, NOW - 2 * HOUR, -1, NOW + HOUR, NOW + HOUR + 1]
    errors = log_validator.timestamp_errors(stamps, base_offset=0, now_ms=NOW, bounds=bounds)
    assert [e.batch_index for e in errors] == [1, 4]
    assert errors[0].message == (
        f"Timestamp {NOW - 2 * HOUR} of message with offset 1 is out of range. "
        f"The timestamp should be within [{NOW - HOUR}, {NOW + HOUR}]"
    )
    assert log_validator.timestamp_errors([NOW - HOUR, NOW], base_offset=0, now_ms=NOW, bounds=bounds) == ()
    default = log_validator.timestamp_bounds(_settings({}))
    assert default == log_validator.DEFAULT_TIMESTAMP_BOUNDS
    assert log_validator.timestamp_errors([0, 5], base_offset=0, now_ms=NOW, bounds=default) == ()
    assert log_validator.header_suffices(default, max_timestamp_ms=NOW + HOUR, now_ms=NOW)
    assert not log_validator.header_suffices(default, max_timestamp_ms=NOW + HOUR + 1, now_ms=NOW)
    assert not log_validator.header_suffices(bounds, max_timestamp_ms=NOW, now_ms=NOW)
    assert log_validator.timestamp_bounds(_settings({"message.timestamp.type": "LogAppendTime"})) is None
