"""Broker configs (Kafka's `server.properties` keys and `kafka-configs.sh --entity-type brokers`,
issues 24 and 32): the one table of the keys a broker has, which of them our brokers honour,
statically and at run time, the controller's decision on a change, and a broker's configs as
Kafka's DescribeConfigs shows them.

Guarantees:
* `KEYS` holds every broker config Apache Kafka 4.3.1 lists (`kafka_broker_config_table`,
  generated from a running Kafka) plus the dynamic keys Kafka lists only once set (the
  replication throttles and the mover's rate): Kafka's type, default, documentation and
  sensitivity; our default where ours differs (`OUR_DEFAULTS`); whether our brokers honour it
  (`honoured`: read from server.properties) and take it at run time (`dynamic`). A key we do not
  honour is listed with Kafka's default, read-only.
* The topic defaults under Kafka's names (`log.cleanup.policy`, `log.retention.ms|minutes|hours`,
  `log.roll.ms|hours`, `log.segment.bytes`, `compression.type`, `message.max.bytes`, ...) and the
  log cleaner's settings (`log.cleaner.*`) are honoured with Kafka's types and rules (a value out
  of range gets Kafka's message, `Invalid value 2.0 for configuration
  log.cleaner.min.cleanable.ratio: Value must be no more than 1`), dynamic where Kafka's are.
  Ours differs in one rule: `log.segment.bytes` from 4096 (small disks and tests). The group
  coordinator's offsets expiry (`offsets.retention.minutes`, `offsets.retention.check.interval.ms`,
  at least 1 each as Kafka's) and the transaction coordinator's keys (`transaction.state.log.*`
  but its load buffer, `transaction.max.timeout.ms`, `transactional.id.expiration.ms`, the two
  `transaction.*.cleanup.interval.ms`, at least 1 each as Kafka's) are honoured from
  server.properties only, as in Kafka; so is `transaction.partition.verification.enable`
  (dynamic in Kafka).
* `BrokerLevels` are the levels a value comes from, in Kafka's order: the broker's own dynamic
  value, the cluster default's (`--entity-default`), server.properties, the default.
  `describe_broker` and `topic_default` answer as Kafka's DescribeConfigs: the value of the first
  level that sets a key, its source, and its synonyms (every level of the key and of the keys it
  falls back to: `log.retention.ms` to `log.retention.minutes` to `log.retention.hours`,
  `log.roll.ms` to `log.roll.hours`, `log.roll.jitter.ms` to `log.roll.jitter.hours`,
  `log.flush.interval.ms` to `log.flush.scheduler.interval.ms`); as Kafka, a key no level sets
  has no value and no synonyms. A topic's default for `retention.ms` (`segment.ms`,
  `segment.jitter.ms`) follows Kafka's precedence: ms over minutes over hours, a negative
  retention being -1. Sensitive values are never shown.
* A resource is "" (the cluster default, `--entity-default`) or a broker id in decimal.
  `effective(image, broker_id)` is the broker's own value of each key over the cluster default.
* `alter_broker_configs` checks, in this order, and a rejection writes nothing: a resource name
  that is neither 42 (INVALID_REQUEST); a key named twice 42; then each op in request order: a
  key Kafka does not define 42 (Kafka stores any; ours refuses a typo), a key that is not dynamic
  here 42 (`Cannot update these configs dynamically: [key]`, Kafka's words), APPEND or SUBTRACT
  of a key that is not a list 40, a value `value_error` refuses 42 with Kafka's message (Kafka
  answers INVALID_REQUEST for a broker config's value). Only the broker knows its log dir paths,
  so `cordoned.log.dirs` is checked for its form here and for its paths by the broker that
  receives the request for itself (the Kafka listener).
* SET / APPEND / SUBTRACT / DELETE write a `BrokerConfigRecord` only when the value changes;
  `validate_only` writes nothing. The reply carries the resource's configs after the change.
  With `replace` (Kafka's legacy AlterConfigs) every key set before and not named is deleted.
* Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Final, Literal

from jbod_core import disk_latency, disk_space, disk_stall, records, topic_configs
from jbod_core.config_changes import list_value, replaced
from jbod_core.errors import ErrorCode
from jbod_core.image import ClusterImage
from jbod_core.kafka_broker_config_table import ROWS
from jbod_core.messages import (
    INT32_MAX,
    INT64_MAX,
    AlterBrokerConfigsReply,
    AlterBrokerConfigsRequest,
    AlterConfigOp,
)
from jbod_core.topic_configs import NO_RULE, AtLeast, Between, ConfigProblem, EachOneOf, OneOf, Rule

LEADER_THROTTLED_RATE: Final = "leader.replication.throttled.rate"
FOLLOWER_THROTTLED_RATE: Final = "follower.replication.throttled.rate"
ALTER_LOG_DIRS_RATE: Final = "replica.alter.log.dirs.io.max.bytes.per.second"
CORDONED_LOG_DIRS: Final = "cordoned.log.dirs"
#: Our extension (issue 35): the used fraction of a log dir's volume that cordons it.
LOG_DIR_CORDON_THRESHOLD: Final = "log.dir.cordon.threshold"
#: Our extension (issue 35): the median write-and-fsync latency that makes a log dir slow.
LOG_DIR_SLOW_THRESHOLD_MS: Final = "log.dir.slow.threshold.ms"
LOG_DIR_STALL_TIMEOUT_MS: Final = "log.dir.stall.timeout.ms"
LOG_DIR_STALL_OFFLINE_MS: Final = "log.dir.stall.offline.ms"
CLUSTER_DEFAULT: Final = ""
EVERY_DIR: Final = "*"

# The log cleaner's settings (read by the cleaner through `cleaner_settings`).
LOG_CLEANER_ENABLE: Final = "log.cleaner.enable"
LOG_CLEANER_THREADS: Final = "log.cleaner.threads"
LOG_CLEANER_DEDUPE_BUFFER_SIZE: Final = "log.cleaner.dedupe.buffer.size"
LOG_CLEANER_IO_MAX_BYTES_PER_SECOND: Final = "log.cleaner.io.max.bytes.per.second"
LOG_CLEANER_IO_BUFFER_SIZE: Final = "log.cleaner.io.buffer.size"
LOG_CLEANER_BACKOFF_MS: Final = "log.cleaner.backoff.ms"
LOG_CLEANER_IO_BUFFER_LOAD_FACTOR: Final = "log.cleaner.io.buffer.load.factor"

KafkaType = Literal["boolean", "string", "int", "short", "long", "double", "list", "class", "password"]


class ConfigSource(IntEnum):
    """Kafka's DescribeConfigs sources."""

    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


@dataclass(frozen=True, slots=True)
class BrokerKey:
    """One broker config: Kafka's name, type, default, documentation and sensitivity; our default
    (`default`, Kafka's unless ours differs), whether our brokers honour it (read it from
    server.properties) and take it at run time (`dynamic`), and the rule a value must pass."""

    name: str
    type: KafkaType
    default: str | None
    kafka_default: str | None
    doc: str
    sensitive: bool = False
    kafka_dynamic: bool = False
    honoured: bool = False
    dynamic: bool = False
    rule: Rule = NO_RULE


# Our brokers' defaults where they differ from Kafka's (the agent's `BrokerConfig` has the same;
# a test keeps the two in step).
OUR_DEFAULTS: Final[Mapping[str, str]] = {
    "log.segment.bytes": str(64 * 1024 * 1024),
    "log.flush.interval.ms": "5000",
    "log.retention.check.interval.ms": "30000",
    "socket.request.max.bytes": str(16 * 1024 * 1024),
    "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
    "listeners": "http://127.0.0.1:9092",
}

_COMPRESSION_TYPES: Final = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_NOT_NEGATIVE: Final = AtLeast(0)

# The keys our brokers honour at run time (besides server.properties), each with its rule: the
# topic defaults and the log cleaner's settings Kafka takes dynamically, and issue 24's keys.
_DYNAMIC_RULES: Final[Mapping[str, Rule]] = {
    "log.cleanup.policy": EachOneOf((topic_configs.COMPACT, topic_configs.DELETE)),
    "log.retention.ms": NO_RULE,
    "log.retention.bytes": NO_RULE,
    "log.roll.ms": AtLeast(1),
    "log.roll.jitter.ms": _NOT_NEGATIVE,
    "log.segment.bytes": AtLeast(4096),
    "log.segment.delete.delay.ms": _NOT_NEGATIVE,
    "log.index.size.max.bytes": AtLeast(4),
    "log.index.interval.bytes": _NOT_NEGATIVE,
    "log.flush.interval.messages": AtLeast(1),
    "log.preallocate": NO_RULE,
    "log.message.timestamp.type": OneOf(("CreateTime", topic_configs.LOG_APPEND_TIME)),
    "log.message.timestamp.before.max.ms": _NOT_NEGATIVE,
    "log.message.timestamp.after.max.ms": _NOT_NEGATIVE,
    "log.cleaner.delete.retention.ms": _NOT_NEGATIVE,
    "log.cleaner.min.compaction.lag.ms": _NOT_NEGATIVE,
    "log.cleaner.max.compaction.lag.ms": AtLeast(1),
    "log.cleaner.min.cleanable.ratio": Between(0, 1),
    "log.local.retention.ms": AtLeast(-2),
    "log.local.retention.bytes": AtLeast(-2),
    "compression.type": OneOf(_COMPRESSION_TYPES),
    "compression.gzip.level": topic_configs.GzipLevel(),
    "compression.lz4.level": Between(1, 17),
    "compression.zstd.level": Between(-131072, 22),
    "message.max.bytes": _NOT_NEGATIVE,
    "min.insync.replicas": AtLeast(1),
    "unclean.leader.election.enable": NO_RULE,
    LOG_CLEANER_THREADS: AtLeast(1),
    LOG_CLEANER_DEDUPE_BUFFER_SIZE: _NOT_NEGATIVE,
    LOG_CLEANER_IO_MAX_BYTES_PER_SECOND: NO_RULE,
    LOG_CLEANER_IO_BUFFER_SIZE: _NOT_NEGATIVE,
    LOG_CLEANER_BACKOFF_MS: _NOT_NEGATIVE,
    LOG_CLEANER_IO_BUFFER_LOAD_FACTOR: NO_RULE,
    LEADER_THROTTLED_RATE: _NOT_NEGATIVE,
    FOLLOWER_THROTTLED_RATE: _NOT_NEGATIVE,
    ALTER_LOG_DIRS_RATE: _NOT_NEGATIVE,
    CORDONED_LOG_DIRS: NO_RULE,
    LOG_DIR_CORDON_THRESHOLD: Between(0, 1),
    LOG_DIR_SLOW_THRESHOLD_MS: _NOT_NEGATIVE,
    LOG_DIR_STALL_TIMEOUT_MS: _NOT_NEGATIVE,
    LOG_DIR_STALL_OFFLINE_MS: AtLeast(-1),
}
# The keys our brokers honour from server.properties only (read-only in Kafka too).
_STATIC_RULES: Final[Mapping[str, Rule]] = {
    "log.retention.minutes": NO_RULE,
    "log.retention.hours": NO_RULE,
    "log.roll.hours": AtLeast(1),
    "log.roll.jitter.hours": _NOT_NEGATIVE,
    LOG_CLEANER_ENABLE: NO_RULE,
    "offsets.retention.minutes": AtLeast(1),
    "offsets.retention.check.interval.ms": AtLeast(1),
    "transaction.state.log.num.partitions": AtLeast(1),
    "transaction.state.log.replication.factor": AtLeast(1),
    "transaction.state.log.min.isr": AtLeast(1),
    "transaction.state.log.segment.bytes": AtLeast(1),
    "transaction.max.timeout.ms": AtLeast(1),
    "transactional.id.expiration.ms": AtLeast(1),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": AtLeast(1),
    "transaction.remove.expired.transaction.cleanup.interval.ms": AtLeast(1),
    "transaction.partition.verification.enable": NO_RULE,
    "quota.window.num": AtLeast(1),
    "quota.window.size.seconds": AtLeast(1),
}
# The dynamic keys Kafka lists only once set: (type, Kafka's default, documentation).
_UNLISTED: Final[Mapping[str, tuple[KafkaType, str, str]]] = {
    LEADER_THROTTLED_RATE: (
        "long",
        str(INT64_MAX),
        "Bytes per second a leader sends to followers out of the ISR of the partitions listed "
        "in their topic's leader.replication.throttled.replicas.",
    ),
    FOLLOWER_THROTTLED_RATE: (
        "long",
        str(INT64_MAX),
        "Bytes per second a follower out of the ISR fetches for the partitions listed in their "
        "topic's follower.replication.throttled.replicas.",
    ),
    ALTER_LOG_DIRS_RATE: (
        "long",
        str(INT64_MAX),
        "Bytes per second an intra-broker replica move copies (over the static setting).",
    ),
    LOG_DIR_CORDON_THRESHOLD: (
        "double",
        str(disk_space.DEFAULT_THRESHOLD),
        "Not a Kafka config (this project's extension): the used fraction of a log dir's volume "
        "at which the broker cordons the dir (no new replicas, as cordoned.log.dirs) until it "
        "falls 0.05 below; 1.0 turns it off.",
    ),
    LOG_DIR_SLOW_THRESHOLD_MS: (
        "long",
        str(disk_latency.DEFAULT_THRESHOLD_MS),
        "Not a Kafka config (this project's extension): the median write-and-fsync latency, over "
        "a log dir's last 5 probes and log flushes, at which the broker reports the dir slow, "
        "until the median falls below half of it; 0 turns it off.",
    ),
    LOG_DIR_STALL_TIMEOUT_MS: (
        "long",
        str(disk_stall.DEFAULT_TIMEOUT_MS),
        "Not a Kafka config (this project's extension): how long a log dir may answer nothing, its "
        "pulse (a 4 KiB write, every half of this) in flight for at least half of it, while the "
        "broker's other dirs answer theirs, before the broker reports it slow at once (its "
        "leaderships move away); offline is still for log.dir.probe.timeout.ms; 0 turns it off.",
    ),
    LOG_DIR_STALL_OFFLINE_MS: (
        "long",
        str(disk_stall.DEFAULT_OFFLINE_MS),
        "Not a Kafka config (this project's extension): how long a log dir may stay stalled "
        "(log.dir.stall.timeout.ms) before the broker takes it offline, 0 at once; -1 leaves "
        "offline to log.dir.probe.timeout.ms.",
    ),
}


def _keys() -> dict[str, BrokerKey]:
    keys = {}
    for name, kind, default, kafka_dynamic, sensitive, doc in ROWS:
        rule = _DYNAMIC_RULES.get(name, _STATIC_RULES.get(name, NO_RULE))
        keys[name] = BrokerKey(
            name=name,
            type=kind,  # type: ignore[arg-type]  # the generator writes Kafka's type names
            default=OUR_DEFAULTS.get(name, default),
            kafka_default=default,
            doc=doc,
            sensitive=sensitive,
            kafka_dynamic=kafka_dynamic,
            honoured=name in _DYNAMIC_RULES or name in _STATIC_RULES,
            dynamic=name in _DYNAMIC_RULES,
            rule=rule,
        )
    for name, (kind, default, doc) in _UNLISTED.items():
        keys[name] = BrokerKey(
            name,
            kind,
            default,
            default,
            doc,
            kafka_dynamic=True,
            honoured=True,
            dynamic=True,
            rule=_DYNAMIC_RULES[name],
        )
    return keys


KEYS: Final[Mapping[str, BrokerKey]] = _keys()
DYNAMIC_KEYS: Final = frozenset(k for k, d in KEYS.items() if d.dynamic)
#: The keys server.properties may set that this module checks (the agent's config reads the rest).
HONOURED_KEYS: Final = frozenset(k for k, d in KEYS.items() if d.honoured)

# A key and the keys it falls back to, each with its factor to the first's unit (Kafka's rule:
# `log.retention.ms` unset, `log.retention.minutes`; unset, `log.retention.hours`).
FALLBACKS: Final[Mapping[str, tuple[tuple[str, int], ...]]] = {
    "log.retention.ms": (
        ("log.retention.ms", 1),
        ("log.retention.minutes", 60_000),
        ("log.retention.hours", 3_600_000),
    ),
    "log.roll.ms": (("log.roll.ms", 1), ("log.roll.hours", 3_600_000)),
    "log.roll.jitter.ms": (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", 3_600_000)),
    "log.flush.interval.ms": (("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)),
}

#: The broker keys a topic default reads (a change of one changes topics' settings).
TOPIC_DEFAULT_KEYS: Final = frozenset(
    name
    for d in topic_configs.DEFINITIONS
    if d.broker_key is not None
    for name, _factor in FALLBACKS.get(d.broker_key, ((d.broker_key, 1),))
)

_DIGITS: Final = re.compile(r"[0-9]{1,19}")


@dataclass(frozen=True, slots=True)
class Synonym:
    """One level that sets a key: the key (the described one or one it falls back to), its value
    there (None: sensitive) and the level."""

    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class Described:
    """One config as DescribeConfigs answers it."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    sensitive: bool
    type: KafkaType
    doc: str
    synonyms: tuple[Synonym, ...]

    @property
    def is_default(self) -> bool:
        return self.source is ConfigSource.DEFAULT_CONFIG


@dataclass(frozen=True, slots=True)
class BrokerLevels:
    """Where a broker's configs come from, in Kafka's order of precedence: its own dynamic values,
    the cluster default's, its server.properties (the text given), then `BrokerKey.default`."""

    own: Mapping[str, str]
    cluster_default: Mapping[str, str]
    static: Mapping[str, str]

    def levels_of(self, name: str) -> list[Synonym]:
        """Every level that sets `name`, first the one that wins."""
        key = KEYS.get(name)
        hidden = key is not None and key.sensitive
        found = [
            Synonym(name, None if hidden else values[name], source)
            for source, values in (
                (ConfigSource.DYNAMIC_BROKER_CONFIG, self.own),
                (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, self.cluster_default),
                (ConfigSource.STATIC_BROKER_CONFIG, self.static),
            )
            if name in values
        ]
        if key is not None and key.default is not None:
            found.append(Synonym(name, None if hidden else key.default, ConfigSource.DEFAULT_CONFIG))
        return found

    def value(self, name: str) -> str | None:
        """The value of `name` this broker uses (its own key only, no fallback), or None."""
        levels = self.levels_of(name)
        return levels[0].value if levels else None


def describe_broker_key(name: str, levels: BrokerLevels) -> Described:
    """One broker config as Kafka describes it: a key no level sets has no value, no synonyms."""
    key = KEYS[name]
    own = levels.levels_of(name)
    synonyms: list[Synonym] = []
    if own:
        for fallback, _factor in FALLBACKS.get(name, ((name, 1),)):
            synonyms += own if fallback == name else levels.levels_of(fallback)
    return Described(
        name=name,
        value=own[0].value if own else None,
        source=own[0].source if own else ConfigSource.DEFAULT_CONFIG,
        read_only=not key.dynamic,
        sensitive=key.sensitive,
        type=key.type,
        doc=key.doc,
        synonyms=tuple(synonyms),
    )


def describe_broker(levels: BrokerLevels) -> list[Described]:
    """Every broker config (`KEYS`) as this broker has it, by name."""
    return [describe_broker_key(name, levels) for name in sorted(KEYS)]


def describe_cluster_default(cluster_default: Mapping[str, str]) -> list[Described]:
    """The cluster default resource (""): the dynamic defaults set, each its one synonym."""
    described = []
    for name in sorted(cluster_default):
        key = KEYS.get(name)
        if key is None:
            continue
        value = None if key.sensitive else cluster_default[name]
        source = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        described.append(
            Described(
                name,
                value,
                source,
                not key.dynamic,
                key.sensitive,
                key.type,
                key.doc,
                (Synonym(name, value, source),),
            )
        )
    return described


def _int_or_none(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def fallback_value(name: str, levels: BrokerLevels) -> int | None:
    """A number with fallbacks (`FALLBACKS`) as Kafka reads it: the first key a level sets, in
    the first key's unit; None when none is set or usable."""
    for fallback, factor in FALLBACKS[name]:
        number = _int_or_none(levels.value(fallback))
        if number is not None:
            return min(number * factor, INT64_MAX)
    return None


@dataclass(frozen=True, slots=True)
class TopicDefault:
    """What a topic without its own value of a config gets from its broker, as Kafka shows it."""

    value: str
    source: ConfigSource
    synonyms: tuple[Synonym, ...]


def topic_default(definition: topic_configs.ConfigDefinition, levels: BrokerLevels) -> TopicDefault:
    """The broker's default of one topic config: the value of its broker key (with Kafka's
    fallbacks and a negative retention.ms as -1), its source and synonyms; a topic config with no
    broker key gets Kafka's topic default."""
    broker_key = definition.broker_key
    if broker_key is None or broker_key not in KEYS:
        return TopicDefault(definition.default, ConfigSource.DEFAULT_CONFIG, ())
    described = describe_broker_key(broker_key, levels)
    source = described.synonyms[0].source if described.synonyms else ConfigSource.DEFAULT_CONFIG
    if broker_key in FALLBACKS:
        number = fallback_value(broker_key, levels)
        if number is None:
            value = definition.default
        elif definition.name == topic_configs.RETENTION_MS and number < 0:
            value = "-1"
        else:
            value = str(number)
    else:
        value = described.value if described.value is not None else definition.default
    return TopicDefault(value, source, described.synonyms)


def topic_defaults(levels: BrokerLevels) -> dict[str, str]:
    """The default value of every topic config a topic without its own gets on this broker."""
    return {d.name: topic_default(d, levels).value for d in topic_configs.DEFINITIONS}


@dataclass(frozen=True, slots=True)
class CleanerSettings:
    """The log cleaner's settings under Kafka's names (`log.cleaner.*`), Kafka's defaults."""

    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 134_217_728
    io_max_bytes_per_second: float = 1.7976931348623157e308
    io_buffer_size: int = 524_288
    backoff_ms: int = 15_000
    io_buffer_load_factor: float = 0.9


_CLEANER_FIELDS: Final = {
    LOG_CLEANER_ENABLE: "enable",
    LOG_CLEANER_THREADS: "threads",
    LOG_CLEANER_DEDUPE_BUFFER_SIZE: "dedupe_buffer_size",
    LOG_CLEANER_IO_MAX_BYTES_PER_SECOND: "io_max_bytes_per_second",
    LOG_CLEANER_IO_BUFFER_SIZE: "io_buffer_size",
    LOG_CLEANER_BACKOFF_MS: "backoff_ms",
    LOG_CLEANER_IO_BUFFER_LOAD_FACTOR: "io_buffer_load_factor",
}


def cleaner_settings(levels: BrokerLevels) -> CleanerSettings:
    """The cleaner's settings this broker uses: each key's first usable level (a value that does
    not parse, say from an older version's log, is skipped)."""
    values: dict[str, bool | int | float] = {}
    for name, field in _CLEANER_FIELDS.items():
        found = _first_number(name, levels)
        if found is not None:
            values[field] = found
    return CleanerSettings(**values)  # type: ignore[arg-type]  # each field its key's type


def _first_number(name: str, levels: BrokerLevels) -> bool | int | float | None:
    """The value of the first level of `name` that parses (a value that does not, say from an
    older version's log, is skipped), or None."""
    for level in levels.levels_of(name):
        parsed = parse(name, level.value or "")
        if not isinstance(parsed, ConfigProblem) and isinstance(parsed, bool | int | float):
            return parsed
    return None


def _definition(key: BrokerKey) -> topic_configs.ConfigDefinition:
    kind = "int" if key.type == "short" else key.type
    kind = kind if kind in ("boolean", "string", "int", "long", "double", "list") else "string"
    return topic_configs.ConfigDefinition(key.name, kind, key.default or "", key.doc, key.rule)


def parse(name: str, value: str) -> topic_configs.Parsed | ConfigProblem:
    """A value of the honoured key `name` read as Kafka reads its type and checked against its
    rule, or the problem with it (Kafka's message)."""
    key = KEYS[name]
    if name in (LEADER_THROTTLED_RATE, FOLLOWER_THROTTLED_RATE, ALTER_LOG_DIRS_RATE):
        if not _DIGITS.fullmatch(value) or int(value) > INT64_MAX:
            return ConfigProblem(name, value, f"{name}: {value!r} is not a long in [0, {INT64_MAX}]")
        return int(value)
    if name == CORDONED_LOG_DIRS:
        problem = _cordoned_error(value)
        return ConfigProblem(name, value, problem) if problem is not None else tuple(list_entries(value))
    return topic_configs.parse(_definition(key), value)


def value_error(name: str, value: str) -> str | None:
    """Why the honoured broker config `name` must not be `value` (Kafka's message), or None."""
    parsed = parse(name, value)
    return parsed.message if isinstance(parsed, ConfigProblem) else None


def resource_error(name: str) -> str | None:
    """Why `name` is not a broker config resource ("" or a broker id), or None."""
    if name == CLUSTER_DEFAULT:
        return None
    if not _DIGITS.fullmatch(name) or int(name) > INT32_MAX:
        return f"Invalid broker name '{name}': the cluster default ('') or a broker id"
    return None


def list_entries(value: str) -> list[str]:
    """The entries of a list value (comma-separated, blanks around entries ignored)."""
    return [e.strip() for e in value.split(",") if e.strip()]


def _cordoned_error(value: str) -> str | None:
    entries = list_entries(value)
    if EVERY_DIR in entries and len(entries) > 1:
        return f"{CORDONED_LOG_DIRS}: '*' cannot be listed with other log dirs"
    for entry in entries:
        if entry != EVERY_DIR and not entry.startswith("/"):
            return f"{CORDONED_LOG_DIRS}: {entry!r} is not an absolute log dir path"
    return None


def effective(image: ClusterImage, broker_id: int) -> Mapping[str, str]:
    """The dynamic configs broker `broker_id` applies: its own over the cluster default's."""
    default = image.broker_configs.get(CLUSTER_DEFAULT, {})
    own = image.broker_configs.get(str(broker_id), {})
    if not own:
        return default
    return {**default, **own}


def rate(configs: Mapping[str, str], name: str) -> int | None:
    """A rate config in bytes per second, or None when it is not set (or unusable): unthrottled."""
    text = configs.get(name)
    if text is None or not _DIGITS.fullmatch(text):
        return None
    value = int(text)
    return None if value >= INT64_MAX else value


def cordon_threshold(levels: BrokerLevels) -> float:
    """`log.dir.cordon.threshold` as the broker uses it: its first usable level, else the default."""
    found = _first_number(LOG_DIR_CORDON_THRESHOLD, levels)
    return disk_space.DEFAULT_THRESHOLD if found is None else float(found)


def disk_millis(levels: BrokerLevels, name: str) -> int:
    """One of the disk-health millisecond keys (`log.dir.slow.threshold.ms`,
    `log.dir.stall.timeout.ms`, `log.dir.stall.offline.ms`) as the broker uses it: its first
    usable level, else its default."""
    found = _first_number(name, levels)
    return _DISK_MILLIS_DEFAULTS[name] if found is None else int(found)


_DISK_MILLIS_DEFAULTS: Final[Mapping[str, int]] = {
    LOG_DIR_SLOW_THRESHOLD_MS: disk_latency.DEFAULT_THRESHOLD_MS,
    LOG_DIR_STALL_TIMEOUT_MS: disk_stall.DEFAULT_TIMEOUT_MS,
    LOG_DIR_STALL_OFFLINE_MS: disk_stall.DEFAULT_OFFLINE_MS,
}


def cordoned_paths(configs: Mapping[str, str]) -> tuple[str, ...]:
    """The paths `cordoned.log.dirs` lists (`*` stays `*`), normalised without a trailing slash."""
    return tuple(
        e if e == EVERY_DIR else e.rstrip("/") or "/"
        for e in list_entries(configs.get(CORDONED_LOG_DIRS, ""))
    )


def _op_error(op: AlterConfigOp) -> tuple[ErrorCode, str] | None:
    key = KEYS.get(op.name)
    if key is None:
        return ErrorCode.INVALID_REQUEST, f"Unknown broker config name: {op.name}"
    if not key.dynamic:
        return ErrorCode.INVALID_REQUEST, f"Cannot update these configs dynamically: [{op.name}]"
    if op.op in ("APPEND", "SUBTRACT") and key.type != "list":
        return (
            ErrorCode.INVALID_CONFIG,
            f"{op.name}: {op.op} is not allowed (it applies to list configs only)",
        )
    if op.op != "DELETE":
        problem = value_error(op.name, op.value or "")
        if problem is not None:
            return ErrorCode.INVALID_REQUEST, problem
    return None


def _new_value(op: AlterConfigOp, current: str | None) -> str | None:
    if op.op == "DELETE":
        return None
    if op.op in ("APPEND", "SUBTRACT"):
        return list_value(op, current)
    return op.value


def alter_broker_configs(
    image: ClusterImage, broker: str, request: AlterBrokerConfigsRequest
) -> tuple[list[records.Record], AlterBrokerConfigsReply]:
    """IncrementalAlterConfigs of the BROKER resource `broker` ("" = the cluster default)."""
    problem = resource_error(broker)
    if problem is not None:
        return [], AlterBrokerConfigsReply(error_code=ErrorCode.INVALID_REQUEST, error_message=problem)
    names = [op.name for op in request.configs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        return [], AlterBrokerConfigsReply(
            error_code=ErrorCode.INVALID_REQUEST,
            error_message=f"Config key(s) named more than once: {', '.join(duplicates)}",
        )
    for op in request.configs:
        refused = _op_error(op)
        if refused is not None:
            code, message = refused
            return [], AlterBrokerConfigsReply(error_code=code, error_message=message)
    configs = dict(image.broker_configs.get(broker, {}))
    produced: list[records.Record] = []
    for op in replaced(request.configs, configs) if request.replace else request.configs:
        value = _new_value(op, configs.get(op.name))
        if configs.get(op.name) == value:
            continue
        produced.append(records.BrokerConfigRecord(broker=broker, name=op.name, value=value))
        if value is None:
            del configs[op.name]
        else:
            configs[op.name] = value
    reply = AlterBrokerConfigsReply(broker=broker, configs=configs)
    return ([] if request.validate_only else produced), reply
