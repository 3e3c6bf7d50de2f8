"""Log compaction's decisions (Kafka's log cleaner semantics), free of I/O.

A compacted log is cleaned from its start to its *first uncleanable offset*; the part at and above
the *first dirty offset* (where the last cleaning stopped) is the dirty section. The cleaner maps
each key of the dirty section to its latest offset, then keeps a record when no later record has
its key, and drops a tombstone (a null value) once it is older than `delete.retention.ms`.

Guarantees:
* `settings_of` reads a topic's cleaner configs as Kafka does (`delete.retention.ms`,
  `min.compaction.lag.ms`, `max.compaction.lag.ms`, `min.cleanable.dirty.ratio`), a value the
  broker cannot use falling back to Kafka's default.
* `first_uncleanable_offset`: never the active segment, never at or above the high watermark,
  never a segment holding a record younger than `min.compaction.lag.ms`.
* `needs_cleaning`: the dirty ratio reaches `min.cleanable.dirty.ratio`, or the oldest dirty
  record is older than `max.compaction.lag.ms` (then regardless of the ratio), or a tombstone the
  last cleaning kept is now older than `delete.retention.ms` (so it goes without new writes, as
  KIP-534 has it); never otherwise with nothing dirty.
* `keeps_record`: a record survives when no later offset of the dirty section has its key; a
  keyless record in a compacted log does not (Kafka's cleaner drops it); a surviving tombstone is
  dropped once its timestamp is older than now - `delete.retention.ms`.
* `group_segments` groups consecutive segments whose sizes sum to at most `segment.bytes` and
  whose offsets fit one segment's relative offsets: each group is cleaned into one segment.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from jbod_core import topic_configs

DELETE_RETENTION_MS: Final = "delete.retention.ms"
MIN_COMPACTION_LAG_MS: Final = "min.compaction.lag.ms"
MAX_COMPACTION_LAG_MS: Final = "max.compaction.lag.ms"
MIN_CLEANABLE_DIRTY_RATIO: Final = "min.cleanable.dirty.ratio"


@dataclass(frozen=True, slots=True)
class CompactionSettings:
    """A compacted topic's cleaner configs as the broker uses them."""

    delete_retention_ms: int = 86_400_000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = 2**63 - 1
    min_cleanable_dirty_ratio: float = 0.5


def _value(configs: Mapping[str, str], key: str) -> int | float:
    definition = topic_configs.BY_NAME[key]
    given = configs.get(key)
    if given is not None:
        parsed = topic_configs.parse(definition, given)
        if isinstance(parsed, int | float) and not isinstance(parsed, bool):
            return parsed
    default = topic_configs.parse(definition, definition.default)
    assert isinstance(default, int | float)
    return default


def settings_of(configs: Mapping[str, str]) -> CompactionSettings:
    """The cleaner settings of a topic with `configs` (see the module docstring)."""
    return CompactionSettings(
        delete_retention_ms=int(_value(configs, DELETE_RETENTION_MS)),
        min_compaction_lag_ms=int(_value(configs, MIN_COMPACTION_LAG_MS)),
        max_compaction_lag_ms=int(_value(configs, MAX_COMPACTION_LAG_MS)),
        min_cleanable_dirty_ratio=float(_value(configs, MIN_CLEANABLE_DIRTY_RATIO)),
    )


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """What the cleaner's decisions need of one segment: its offsets [base, next), its size and
    its newest batch timestamp."""

    base_offset: int
    next_offset: int
    size: int
    max_timestamp_ms: int


def first_uncleanable_offset(
    segments: Sequence[SegmentInfo], *, high_watermark: int, now_ms: int, settings: CompactionSettings
) -> int:
    """Where cleaning must stop: the active segment's base (the last of `segments`), the base of
    the segment holding the high watermark, or the base of the first segment holding a record
    younger than `min.compaction.lag.ms`, whichever comes first."""
    if not segments:
        return 0
    limit = segments[-1].base_offset
    for segment in segments[:-1]:
        if segment.next_offset > high_watermark or (
            settings.min_compaction_lag_ms > 0
            and segment.max_timestamp_ms > now_ms - settings.min_compaction_lag_ms
        ):
            return min(limit, segment.base_offset)
    return limit


@dataclass(frozen=True, slots=True)
class Cleanability:
    """A log's clean and dirty bytes below its first uncleanable offset, and its dirty ratio."""

    clean_bytes: int
    dirty_bytes: int
    oldest_dirty_ms: int | None  # the newest timestamp of the first dirty segment (None: no dirty)

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def cleanability(segments: Sequence[SegmentInfo], *, first_dirty: int, uncleanable: int) -> Cleanability:
    """The bytes of the segments below `uncleanable` that lie below `first_dirty` (clean) and at
    or above it (dirty)."""
    clean = dirty = 0
    oldest: int | None = None
    for segment in segments:
        if segment.base_offset >= uncleanable:
            break
        if segment.next_offset <= first_dirty:
            clean += segment.size
        else:
            dirty += segment.size
            if oldest is None:
                oldest = segment.max_timestamp_ms
    return Cleanability(clean, dirty, oldest)


def needs_cleaning(
    state: Cleanability, *, now_ms: int, settings: CompactionSettings, tombstones_due_ms: int | None = None
) -> bool:
    """Kafka's choice of a log to clean (see the module docstring); also a log whose kept
    tombstones are due for removal (`tombstones_due_ms`, from its last cleaning: KIP-534)."""
    if tombstones_due_ms is not None and now_ms >= tombstones_due_ms:
        return True
    if state.dirty_bytes == 0:
        return False
    if state.oldest_dirty_ms is not None and now_ms - state.oldest_dirty_ms > settings.max_compaction_lag_ms:
        return True
    return state.dirty_ratio >= settings.min_cleanable_dirty_ratio


def keeps_record(  # noqa: PLR0913  the record's fields, then the map's answer and the clock
    *,
    offset: int,
    has_key: bool,
    is_tombstone: bool,
    timestamp_ms: int,
    latest_offset: int | None,
    now_ms: int,
    settings: CompactionSettings,
) -> bool:
    """Whether a cleaned log keeps a record at `offset` whose key's latest offset in the dirty
    section is `latest_offset` (None: the key is not in it)."""
    if not has_key:
        return False
    if latest_offset is not None and latest_offset > offset:
        return False
    return not (is_tombstone and timestamp_ms < now_ms - settings.delete_retention_ms)


def group_segments(
    segments: Sequence[SegmentInfo], *, max_bytes: int, max_relative_offset: int
) -> list[list[SegmentInfo]]:
    """`segments` (consecutive) in groups of consecutive segments whose sizes sum to at most
    `max_bytes` (a segment larger than that forms its own group) and whose offset range fits
    `max_relative_offset`."""
    groups: list[list[SegmentInfo]] = []
    current: list[SegmentInfo] = []
    size = 0
    for segment in segments:
        if current and (
            size + segment.size > max_bytes
            or segment.next_offset - 1 - current[0].base_offset > max_relative_offset
        ):
            groups.append(current)
            current, size = [], 0
        current.append(segment)
        size += segment.size
    if current:
        groups.append(current)
    return groups
