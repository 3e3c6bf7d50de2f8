"""Topic configs: the one table of Apache Kafka 4.3's topic configs (protocol §3.5, errorCode 40).

`DEFINITIONS` lists every topic config Kafka 4.3.1 defines (33 keys, `kafka-configs.sh --describe
--all` of a topic): its type, its rule, its default, the broker setting Kafka shows as its
synonym (the first of its fallbacks for `retention.ms`, `segment.ms`, `segment.jitter.ms` and
`flush.ms`), whether our brokers act on it (`applied`) and what it does. `docs/api.md` shows the same
table; a test keeps the two in step, and a differential test checks the messages against Kafka's.

Guarantees:
* Values are read as Kafka's `ConfigDef` reads them: surrounding blanks trimmed; INT and LONG
  as Java's `parseInt` / `parseLong` (an optional sign, decimal digits, in range), DOUBLE as a
  decimal or exponent number, BOOLEAN `true` / `false` in any case, LIST comma-separated (blanks
  around items dropped, an empty value is the empty list).
* `value_error(key, value, replication_factor=...)` is the one check of a topic create and of a
  config change: an unknown key, a value of the wrong type or outside its rule is a
  `ConfigProblem` whose `message` is Kafka's (`Invalid value 0 for configuration segment.ms:
  Value must be at least 1`, `Unknown topic config name: x`). Tiered storage is not served:
  `remote.storage.enable=true` is refused with Kafka's message for a broker without it. Our one
  addition: `min.insync.replicas` above the replication factor is refused (every acks=-1 produce
  would fail).
* `create_error(configs, replication_factor=...)` checks every key in sorted order; the first
  problem wins. No problem means every key is usable by every broker.
* `resolve(configs, defaults)` is the broker's reading of the keys it reads as numbers
  (`BROKER_SETTINGS` and `TOPIC_NUMBERS`), of `cleanup.policy` and of `message.timestamp.type`:
  the topic's value when usable, else the broker's default (`defaults`: the text its broker
  configs give, `jbod_core.broker_configs.topic_defaults`), else the setting's own default; every
  value it could not use comes back as a `ConfigProblem`. It never raises: a bad config in an old log is
  a warning, never a storage error. `compression.type` resolves to its name (`producer` when
  unset or unusable). A topic whose `cleanup.policy` lacks `delete` resolves
  `retention.ms` and `retention.bytes` to -1: its segments are never deleted by retention.
  `cleanup_policy(configs)` reads `cleanup.policy` the same way (an unusable value: `delete`).
* `unclean_leader_election(topic, cluster_default)` is the controller's reading of
  `unclean.leader.election.enable`: the topic's value, else the cluster default's, else false.
* The replication throttle lists (Kafka's `leader.replication.throttled.replicas` and
  `follower.replication.throttled.replicas`, issue 24): `*` or a comma-separated list of
  `partition:broker`, checked as Kafka's ThrottledReplicaListValidator checks them and read with
  `throttled_replicas`.
* Pure: no I/O, no clock; the values are plain frozen records.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from jbod_core.messages import INT32_MAX, INT64_MAX

ConfigType = Literal["boolean", "string", "int", "long", "double", "list"]
Parsed = bool | int | float | str | tuple[str, ...]

CLEANUP_POLICY: Final = "cleanup.policy"
COMPRESSION_TYPE: Final = "compression.type"
PRODUCER: Final = "producer"  # compression.type: the producer's codec is kept
COMPRESSION_GZIP_LEVEL: Final = "compression.gzip.level"
COMPRESSION_LZ4_LEVEL: Final = "compression.lz4.level"
COMPRESSION_ZSTD_LEVEL: Final = "compression.zstd.level"
TIMESTAMP_BEFORE_MAX_MS: Final = "message.timestamp.before.max.ms"
TIMESTAMP_AFTER_MAX_MS: Final = "message.timestamp.after.max.ms"
MAX_MESSAGE_BYTES: Final = "max.message.bytes"
MESSAGE_TIMESTAMP_TYPE: Final = "message.timestamp.type"
LOG_APPEND_TIME: Final = "LogAppendTime"
MIN_INSYNC_REPLICAS: Final = "min.insync.replicas"
REMOTE_STORAGE_ENABLE: Final = "remote.storage.enable"
RETENTION_BYTES: Final = "retention.bytes"
RETENTION_MS: Final = "retention.ms"
SEGMENT_BYTES: Final = "segment.bytes"
SEGMENT_MS: Final = "segment.ms"
UNCLEAN_LEADER_ELECTION_ENABLE: Final = "unclean.leader.election.enable"
LEADER_THROTTLED_REPLICAS: Final = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED_REPLICAS: Final = "follower.replication.throttled.replicas"
COMPACT: Final = "compact"
DELETE: Final = "delete"

_INT_LIMITS: Final = {"int": (-(2**31), INT32_MAX), "long": (-(2**63), INT64_MAX)}
_JAVA_INTEGER: Final = re.compile(r"[+-]?[0-9]+")
_JAVA_DOUBLE: Final = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[fFdD]?")


def _number(value: int | float) -> str:
    """A bound as Kafka prints it (Java's `toString` of the bound's own type)."""
    return str(value)


@dataclass(frozen=True, slots=True)
class AtLeast:
    low: int | float

    def problem(self, value: Parsed) -> str | None:
        assert isinstance(value, int | float)
        return None if value >= self.low else f"Value must be at least {_number(self.low)}"


@dataclass(frozen=True, slots=True)
class Between:
    low: int | float
    high: int | float

    def problem(self, value: Parsed) -> str | None:
        assert isinstance(value, int | float)
        if value < self.low:
            return f"Value must be at least {_number(self.low)}"
        if value > self.high:
            return f"Value must be no more than {_number(self.high)}"
        return None


@dataclass(frozen=True, slots=True)
class OneOf:
    """A string among `choices` (case-sensitive, as Kafka's ValidString)."""

    choices: tuple[str, ...]

    def problem(self, value: Parsed) -> str | None:
        return None if value in self.choices else f"String must be one of: {', '.join(self.choices)}"


@dataclass(frozen=True, slots=True)
class EachOneOf:
    """A list whose every item is among `choices` (Kafka's ValidList: the bad item is named)."""

    choices: tuple[str, ...]

    def problem(self, value: Parsed) -> str | None:
        return None  # per item, naming the item as Kafka does: see `parse`


@dataclass(frozen=True, slots=True)
class GzipLevel:
    def problem(self, value: Parsed) -> str | None:
        assert isinstance(value, int)
        return None if value == -1 or 1 <= value <= 9 else "Value must be between 1 and 9 or equal to -1"


@dataclass(frozen=True, slots=True)
class ThrottledList:
    def problem(self, value: Parsed) -> str | None:
        return None  # checked on the text: see `throttled_replicas_error`


@dataclass(frozen=True, slots=True)
class NoRule:
    def problem(self, value: Parsed) -> str | None:
        return None


Rule = AtLeast | Between | OneOf | EachOneOf | GzipLevel | ThrottledList | NoRule
NO_RULE: Final = NoRule()
_MAX: Final = str(INT64_MAX)


@dataclass(frozen=True, slots=True)
class ConfigDefinition:
    """One topic config: Kafka's name, type, rule and default; the broker setting Kafka shows as
    its synonym (None: Kafka shows none); whether our brokers act on it."""

    name: str
    type: ConfigType
    default: str
    doc: str
    rule: Rule = NO_RULE
    broker_key: str | None = None
    applied: bool = False


def _d(  # noqa: PLR0913  one keyword per column of the table
    name: str,
    type_: ConfigType,
    default: str,
    rule: Rule,
    broker_key: str | None,
    doc: str,
    *,
    applied: bool = False,
) -> ConfigDefinition:
    return ConfigDefinition(name, type_, default, doc, rule, broker_key, applied)


_COMPRESSION_TYPES: Final = ("uncompressed", "zstd", "lz4", "snappy", "gzip", PRODUCER)

DEFINITIONS: Final[tuple[ConfigDefinition, ...]] = (
    _d(
        CLEANUP_POLICY,
        "list",
        DELETE,
        EachOneOf((COMPACT, DELETE)),
        "log.cleanup.policy",
        "`delete`: old segments are deleted by retention time and size; `compact`: the log cleaner "
        'keeps the latest record of each key (docs/decisions.md, "Log compaction"); '
        "`compact,delete`: both.",
        applied=True,
    ),
    _d(
        COMPRESSION_GZIP_LEVEL,
        "int",
        "-1",
        GzipLevel(),
        COMPRESSION_GZIP_LEVEL,
        "The gzip level when the broker compresses with gzip (-1: zlib's default, 6).",
        applied=True,
    ),
    _d(
        COMPRESSION_LZ4_LEVEL,
        "int",
        "9",
        Between(1, 17),
        COMPRESSION_LZ4_LEVEL,
        "The lz4 level when the broker compresses with lz4 (above 12: lz4's highest, 12).",
        applied=True,
    ),
    _d(
        COMPRESSION_TYPE,
        "string",
        PRODUCER,
        OneOf(_COMPRESSION_TYPES),
        COMPRESSION_TYPE,
        "The codec of the stored batches: a batch of another codec is compressed again by the "
        "leader; `producer` keeps the producer's.",
        applied=True,
    ),
    _d(
        COMPRESSION_ZSTD_LEVEL,
        "int",
        "3",
        Between(-131072, 22),
        COMPRESSION_ZSTD_LEVEL,
        "The zstd level when the broker compresses with zstd.",
        applied=True,
    ),
    _d(
        "delete.retention.ms",
        "long",
        "86400000",
        AtLeast(0),
        "log.cleaner.delete.retention.ms",
        "How long tombstones of a compacted topic are kept (from the tombstone's timestamp).",
        applied=True,
    ),
    _d(
        "file.delete.delay.ms",
        "long",
        "60000",
        AtLeast(0),
        "log.segment.delete.delay.ms",
        "How long a deleted segment's file is kept before it is removed.",
        applied=True,
    ),
    _d(
        "flush.messages",
        "long",
        _MAX,
        AtLeast(1),
        "log.flush.interval.messages",
        "Records appended between forced fsyncs of the log.",
        applied=True,
    ),
    _d(
        "flush.ms",
        "long",
        _MAX,
        AtLeast(0),
        "log.flush.interval.ms",
        "Time between forced fsyncs of the log.",
        applied=True,
    ),
    _d(
        FOLLOWER_THROTTLED_REPLICAS,
        "list",
        "",
        ThrottledList(),
        None,
        "Replicas whose follower side is throttled at the broker's follower.replication.throttled.rate "
        "while out of the ISR: `*` or `partition:broker,...`.",
        applied=True,
    ),
    _d(
        "index.interval.bytes",
        "int",
        "4096",
        AtLeast(0),
        "log.index.interval.bytes",
        "Bytes of log between two entries of the offset index.",
        applied=True,
    ),
    _d(
        LEADER_THROTTLED_REPLICAS,
        "list",
        "",
        ThrottledList(),
        None,
        "Replicas whose leader side is throttled at the broker's leader.replication.throttled.rate "
        "while their follower is out of the ISR: `*` or `partition:broker,...`.",
        applied=True,
    ),
    _d(
        "local.retention.bytes",
        "long",
        "-2",
        AtLeast(-2),
        "log.local.retention.bytes",
        "Tiered storage (not served): local retention by size.",
    ),
    _d(
        "local.retention.ms",
        "long",
        "-2",
        AtLeast(-2),
        "log.local.retention.ms",
        "Tiered storage (not served): local retention by time.",
    ),
    _d(
        "max.compaction.lag.ms",
        "long",
        _MAX,
        AtLeast(1),
        "log.cleaner.max.compaction.lag.ms",
        "The longest a record may stay uncompacted (a log with an older dirty segment is cleaned "
        "whatever its dirty ratio).",
        applied=True,
    ),
    _d(
        MAX_MESSAGE_BYTES,
        "int",
        "1048588",
        AtLeast(0),
        "message.max.bytes",
        "The largest record batch a produce may append (MESSAGE_TOO_LARGE above it).",
        applied=True,
    ),
    _d(
        TIMESTAMP_AFTER_MAX_MS,
        "long",
        "3600000",
        AtLeast(0),
        "log.message.timestamp.after.max.ms",
        "How far in the future a record's CreateTime timestamp may be (INVALID_TIMESTAMP beyond).",
        applied=True,
    ),
    _d(
        TIMESTAMP_BEFORE_MAX_MS,
        "long",
        _MAX,
        AtLeast(0),
        "log.message.timestamp.before.max.ms",
        "How far in the past a record's CreateTime timestamp may be (INVALID_TIMESTAMP beyond).",
        applied=True,
    ),
    _d(
        MESSAGE_TIMESTAMP_TYPE,
        "string",
        "CreateTime",
        OneOf(("CreateTime", LOG_APPEND_TIME)),
        "log.message.timestamp.type",
        "`CreateTime`: the producer's timestamps; `LogAppendTime`: the broker's append time.",
        applied=True,
    ),
    _d(
        "min.cleanable.dirty.ratio",
        "double",
        "0.5",
        Between(0, 1),
        "log.cleaner.min.cleanable.ratio",
        "The dirty share of a log above which it is compacted.",
        applied=True,
    ),
    _d(
        "min.compaction.lag.ms",
        "long",
        "0",
        AtLeast(0),
        "log.cleaner.min.compaction.lag.ms",
        "The least time a record stays uncompacted.",
        applied=True,
    ),
    _d(
        MIN_INSYNC_REPLICAS,
        "int",
        "1",
        AtLeast(1),
        MIN_INSYNC_REPLICAS,
        "Produce with acks=-1 is refused (19) while the ISR has fewer members. "
        "At most the topic's replication factor.",
        applied=True,
    ),
    _d(
        "preallocate",
        "boolean",
        "false",
        NO_RULE,
        "log.preallocate",
        "Whether a new segment's file is allocated whole.",
        applied=True,
    ),
    _d("remote.log.copy.disable", "boolean", "false", NO_RULE, None, "Tiered storage (not served)."),
    _d("remote.log.delete.on.disable", "boolean", "false", NO_RULE, None, "Tiered storage (not served)."),
    _d(
        REMOTE_STORAGE_ENABLE,
        "boolean",
        "false",
        NO_RULE,
        None,
        "Tiered storage: not served, only `false` is accepted.",
    ),
    _d(
        RETENTION_BYTES,
        "long",
        "-1",
        NO_RULE,
        "log.retention.bytes",
        "Oldest segments of a partition's log are deleted while it is larger; -1: no size limit.",
        applied=True,
    ),
    _d(
        RETENTION_MS,
        "long",
        "604800000",
        AtLeast(-1),
        "log.retention.ms",
        "Segments whose newest record is older are deleted; -1: no time limit.",
        applied=True,
    ),
    _d(
        SEGMENT_BYTES,
        "int",
        "1073741824",
        AtLeast(1048576),
        "log.segment.bytes",
        "Size at which a partition's active log segment is rolled.",
        applied=True,
    ),
    _d(
        "segment.index.bytes",
        "int",
        "10485760",
        AtLeast(4),
        "log.index.size.max.bytes",
        "The largest size of a segment's offset index.",
        applied=True,
    ),
    _d(
        "segment.jitter.ms",
        "long",
        "0",
        AtLeast(0),
        "log.roll.jitter.ms",
        "A random share of segment.ms subtracted per segment, so segments do not roll together.",
        applied=True,
    ),
    _d(
        SEGMENT_MS,
        "long",
        "604800000",
        AtLeast(1),
        "log.roll.ms",
        "Time after which a partition's active segment is rolled (the age of its first batch's timestamp).",
        applied=True,
    ),
    _d(
        UNCLEAN_LEADER_ELECTION_ENABLE,
        "boolean",
        "false",
        NO_RULE,
        UNCLEAN_LEADER_ELECTION_ENABLE,
        "Whether the controller may elect a replica outside the ISR when no ISR member can lead "
        "(records only the old leader had are lost; the ISR becomes the new leader alone) "
        '(docs/decisions.md, "Unclean leader election").',
        applied=True,
    ),
)
BY_NAME: Final[Mapping[str, ConfigDefinition]] = {d.name: d for d in DEFINITIONS}
KNOWN_KEYS: Final = frozenset(BY_NAME)
LIST_KEYS: Final = frozenset(d.name for d in DEFINITIONS if d.type == "list")
_TIERED_STORAGE_OFF: Final = "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage."


@dataclass(frozen=True, slots=True)
class BrokerSetting:
    """A topic config whose default the broker reads from its own server.properties key, and the
    range that key accepts there (ours: segments from 4 KiB, for small disks and tests)."""

    topic_key: str
    broker_key: str
    low: int
    high: int
    default: int


INDEX_INTERVAL_BYTES: Final = "index.interval.bytes"
SEGMENT_INDEX_BYTES: Final = "segment.index.bytes"
SEGMENT_JITTER_MS: Final = "segment.jitter.ms"
FILE_DELETE_DELAY_MS: Final = "file.delete.delay.ms"
FLUSH_MESSAGES: Final = "flush.messages"
FLUSH_MS: Final = "flush.ms"
PREALLOCATE: Final = "preallocate"
# Read by `resolve` with Kafka's default when unset.
TOPIC_NUMBERS: Final = (
    SEGMENT_MS,
    INDEX_INTERVAL_BYTES,
    SEGMENT_INDEX_BYTES,
    SEGMENT_JITTER_MS,
    FILE_DELETE_DELAY_MS,
    FLUSH_MESSAGES,
    FLUSH_MS,
    COMPRESSION_GZIP_LEVEL,
    COMPRESSION_LZ4_LEVEL,
    COMPRESSION_ZSTD_LEVEL,
    TIMESTAMP_BEFORE_MAX_MS,
    TIMESTAMP_AFTER_MAX_MS,
)

BROKER_SETTINGS: Final[tuple[BrokerSetting, ...]] = (
    BrokerSetting(MAX_MESSAGE_BYTES, "message.max.bytes", 0, INT32_MAX, 1048588),
    BrokerSetting(MIN_INSYNC_REPLICAS, "min.insync.replicas", 1, INT32_MAX, 1),
    BrokerSetting(RETENTION_BYTES, "log.retention.bytes", -1, INT64_MAX, -1),
    BrokerSetting(RETENTION_MS, "log.retention.ms", -1, INT64_MAX, 7 * 24 * 3600 * 1000),
    BrokerSetting(SEGMENT_BYTES, "log.segment.bytes", 4096, INT32_MAX, 64 * 1024 * 1024),
)


_REPLICA_ENTRY: Final = re.compile(r"[0-9]+:[0-9]+")
_THROTTLED_LIST_RULE: Final = (
    "must be the literal '*' or a list of replicas in the following format: "
    "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
)


@dataclass(frozen=True, slots=True)
class ThrottledReplicas:
    """A parsed throttled-replicas list: every replica (`*`), or these (partition, broker) pairs."""

    every_replica: bool
    replicas: frozenset[tuple[int, int]]

    def covers(self, partition: int, broker_id: int) -> bool:
        return self.every_replica or (partition, broker_id) in self.replicas


NOT_THROTTLED: Final = ThrottledReplicas(every_replica=False, replicas=frozenset())


def throttled_replicas_error(key: str, value: str) -> ConfigProblem | None:
    """Why `value` is not a valid throttled-replicas list (Kafka's rule), or None."""
    entries = [e.strip() for e in value.split(",")]
    if [e for e in entries if e] == ["*"]:
        return None
    for entry in entries:
        if entry and not _REPLICA_ENTRY.fullmatch(entry):
            return ConfigProblem(
                key,
                value,
                f"Invalid value {_java_list(entries)} for configuration {key}: {key} {_THROTTLED_LIST_RULE}",
            )
    return None


def throttled_replicas(value: str | None) -> ThrottledReplicas:
    """The replicas a throttled-replicas value names; an invalid or absent value throttles none
    (a broker never fails on a config in an old log)."""
    if value is None or throttled_replicas_error(LEADER_THROTTLED_REPLICAS, value) is not None:
        return NOT_THROTTLED
    entries = [e.strip() for e in value.split(",") if e.strip()]
    if entries == ["*"]:
        return ThrottledReplicas(every_replica=True, replicas=frozenset())
    pairs = set()
    for entry in entries:
        partition, broker = entry.split(":")
        pairs.add((int(partition), int(broker)))
    return ThrottledReplicas(every_replica=False, replicas=frozenset(pairs))


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """A topic config that cannot be used: which key, which value, and Kafka's message."""

    key: str
    value: str
    message: str

    @property
    def reason(self) -> str:
        """The message without Kafka's `Invalid value V for configuration K: ` prefix."""
        prefix = f"Invalid value {self.value} for configuration {self.key}: "
        return self.message.removeprefix(prefix)


def _invalid(key: str, shown: str, reason: str, value: str) -> ConfigProblem:
    return ConfigProblem(key, value, f"Invalid value {shown} for configuration {key}: {reason}")


@dataclass(frozen=True, slots=True)
class ResolvedConfigs:
    """What a broker uses for one topic: a value for every broker setting, and what it ignored."""

    values: Mapping[str, int]
    problems: tuple[ConfigProblem, ...]
    log_append_time: bool = False  # `message.timestamp.type=LogAppendTime`
    compacted: bool = False  # `cleanup.policy` holds `compact`: every record needs a key
    preallocate: bool = False  # `preallocate`: a new segment's blocks are allocated whole
    compression_type: str = PRODUCER  # `compression.type`: a codec's name, `uncompressed` or `producer`

    def __getitem__(self, key: str) -> int:
        return self.values[key]


def _java_list(items: Sequence[str]) -> str:
    return "[" + ", ".join(items) + "]"


def _read(kind: ConfigType, text: str) -> Parsed | None:
    """`text` (trimmed) read as Kafka's `ConfigDef.parseType` reads `kind`, or None when it cannot."""
    if kind in _INT_LIMITS:
        low, high = _INT_LIMITS[kind]
        return int(text) if _JAVA_INTEGER.fullmatch(text) and low <= int(text) <= high else None
    if kind == "double":
        number = text.rstrip("fFdD")
        return float(number) if _JAVA_DOUBLE.fullmatch(text) and math.isfinite(float(number)) else None
    if kind == "boolean":
        return text.lower() == "true" if text.lower() in ("true", "false") else None
    if kind == "list":
        return tuple(item.strip() for item in text.split(",")) if text else ()
    return text


_TYPE_ERRORS: Final = {
    "int": "Not a number of type INT",
    "long": "Not a number of type LONG",
    "double": "Not a number of type DOUBLE",
    "boolean": "Expected value to be either true or false",
}


def parse(definition: ConfigDefinition, value: str) -> Parsed | ConfigProblem:
    """The value read as Kafka reads it for the definition's type and checked against its rule,
    or the problem with it."""
    key, rule = definition.name, definition.rule
    parsed = _read(definition.type, value.strip())
    if parsed is None:
        return _invalid(key, value, _TYPE_ERRORS[definition.type], value)
    if isinstance(rule, ThrottledList):
        return throttled_replicas_error(key, value) or parsed
    if isinstance(rule, EachOneOf):
        assert isinstance(parsed, tuple)
        wrong = next((item for item in parsed if item not in rule.choices), None)
        if wrong is not None:
            return _invalid(key, wrong, f"String must be one of: {', '.join(rule.choices)}", value)
    reason = rule.problem(parsed)
    if reason is not None:
        return _invalid(key, _shown(parsed), reason, value)
    if key == REMOTE_STORAGE_ENABLE and parsed is True:
        return ConfigProblem(key, value, _TIERED_STORAGE_OFF)
    return parsed


def _shown(parsed: Parsed) -> str:
    """A parsed value as Kafka prints it in a message (Java's `toString`)."""
    if isinstance(parsed, bool):
        return str(parsed).lower()
    if isinstance(parsed, tuple):
        return _java_list(parsed)
    return str(parsed)


def create_error(configs: Mapping[str, str], *, replication_factor: int) -> ConfigProblem | None:
    """The first reason (by key) why a topic with these configs must not be created, or None."""
    for key in sorted(configs):
        problem = value_error(key, configs[key], replication_factor=replication_factor)
        if problem is not None:
            return problem
    return None


def unknown_key(key: str, value: str) -> ConfigProblem:
    return ConfigProblem(key, value, f"Unknown topic config name: {key}")


def value_error(key: str, value: str, *, replication_factor: int) -> ConfigProblem | None:
    """Why a topic of `replication_factor` replicas must not have `key` set to `value`, or None:
    the one check of a topic create and of a config change."""
    definition = BY_NAME.get(key)
    if definition is None:
        return unknown_key(key, value)
    parsed = parse(definition, value)
    if isinstance(parsed, ConfigProblem):
        return parsed
    if key == MIN_INSYNC_REPLICAS and isinstance(parsed, int) and parsed > replication_factor:
        return _invalid(
            key,
            value,
            f"{parsed} is larger than the replication factor {replication_factor} "
            "(every acks=-1 produce would fail with NOT_ENOUGH_REPLICAS)",
            value,
        )
    return None


def resolve(configs: Mapping[str, str], defaults: Mapping[str, str]) -> ResolvedConfigs:
    """Every number setting's value for a broker: the topic's if usable, else `defaults[key]`
    (the broker's default, `jbod_core.broker_configs.topic_defaults`), else the setting's own
    default; `cleanup.policy` and `message.timestamp.type` the same way."""
    values: dict[str, int] = {}
    problems: list[ConfigProblem] = []
    numbers = [(s.topic_key, s.default) for s in BROKER_SETTINGS]
    numbers += [(key, int(BY_NAME[key].default)) for key in TOPIC_NUMBERS]
    for key, own_default in numbers:
        broker_default = _read("long", defaults.get(key, "").strip())
        default = broker_default if isinstance(broker_default, int) else own_default
        text = configs.get(key)
        if text is None:
            values[key] = default
            continue
        parsed = parse(BY_NAME[key], text)
        if isinstance(parsed, ConfigProblem) or not isinstance(parsed, int):
            problems.append(
                parsed if isinstance(parsed, ConfigProblem) else ConfigProblem(key, text, "not a number")
            )
            values[key] = default
        else:
            values[key] = parsed
    policy = cleanup_policy(configs, defaults.get(CLEANUP_POLICY, DELETE))
    if DELETE not in policy:
        # A topic that is not `delete` keeps its segments whatever its retention (Kafka's rule).
        values[RETENTION_BYTES] = values[RETENTION_MS] = -1
    timestamp_default = defaults.get(MESSAGE_TIMESTAMP_TYPE, "CreateTime")
    timestamp_type = parse(
        BY_NAME[MESSAGE_TIMESTAMP_TYPE], configs.get(MESSAGE_TIMESTAMP_TYPE, timestamp_default)
    )
    if isinstance(timestamp_type, ConfigProblem):
        timestamp_type = timestamp_default
    compression = parse(
        BY_NAME[COMPRESSION_TYPE], configs.get(COMPRESSION_TYPE, defaults.get(COMPRESSION_TYPE, PRODUCER))
    )
    return ResolvedConfigs(
        values=values,
        problems=tuple(problems),
        log_append_time=timestamp_type == LOG_APPEND_TIME,
        compacted=COMPACT in policy,
        preallocate=parse(BY_NAME[PREALLOCATE], configs.get(PREALLOCATE, defaults.get(PREALLOCATE, "false")))
        is True,
        compression_type=compression if isinstance(compression, str) else PRODUCER,
    )


def cleanup_policy(configs: Mapping[str, str], default: str = DELETE) -> frozenset[str]:
    """The topic's `cleanup.policy` as a set of `compact` / `delete` (the broker's `default`
    when unset or unusable; `delete` when that is unusable too)."""
    parsed = parse(BY_NAME[CLEANUP_POLICY], configs.get(CLEANUP_POLICY, default))
    if isinstance(parsed, ConfigProblem) or not isinstance(parsed, tuple):
        parsed = parse(BY_NAME[CLEANUP_POLICY], default)
    return frozenset(parsed) if isinstance(parsed, tuple) else frozenset({DELETE})


def unclean_leader_election(topic: Mapping[str, str], cluster_default: Mapping[str, str]) -> bool:
    """Whether the controller may elect a leader outside a topic's ISR: the topic's
    `unclean.leader.election.enable`, else the cluster-wide dynamic broker default's, else
    Kafka's default (false). A value that is not a boolean is skipped, as if unset."""
    definition = BY_NAME[UNCLEAN_LEADER_ELECTION_ENABLE]
    for configs in (topic, cluster_default):
        text = configs.get(UNCLEAN_LEADER_ELECTION_ENABLE)
        if text is not None:
            parsed = parse(definition, text)
            if isinstance(parsed, bool):
                return parsed
    return False


def shown_value(definition: ConfigDefinition, value: str) -> str:
    """A stored value as DescribeConfigs shows it (Kafka renders the parsed value: `+5` is `5`,
    `TRUE` is `true`, a list's repeated items once); an unusable value as stored."""
    parsed = parse(definition, value)
    if isinstance(parsed, ConfigProblem):
        return value
    if isinstance(parsed, bool):
        return str(parsed).lower()
    if isinstance(parsed, tuple):
        return ",".join(dict.fromkeys(parsed))
    return str(parsed)
