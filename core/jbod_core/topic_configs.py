"""Topic configs: the one table of the keys a topic may set (protocol §3.5, errorCode 40).

`DEFINITIONS` lists every key the broker reads from a `TopicRecord`'s `configs`: its type, its
range, its default (the broker setting that provides it, and that setting's own default) and what
it does. `docs/api.md` shows the same table; a test keeps the two in step.

Guarantees:
* `create_error(configs, replication_factor=...)` is the controller's check at topic create: an
  unknown key, a value that is not a decimal integer (ASCII digits, optional leading `-`, no
  blanks), a value outside its range, or `min.insync.replicas` above the replication factor is
  reported as one `ConfigProblem` naming the key and the value (keys in sorted order, the first
  problem wins). No problem means every key is usable by every broker.
* `value_error(key, value, replication_factor=...)` is that check for one key; a config change
  (`jbod_core.config_changes`) applies it to every key it sets.
* `resolve(configs, defaults)` is the broker's reading: every defined key gets a usable value —
  the topic's when it parses and is in range, else the broker's default — and every value it
  could not use comes back as a `ConfigProblem`. It never raises: a bad config in an old log is
  a warning, never a storage error. Keys the table does not define are ignored.
* The replication throttle lists (`LIST_DEFINITIONS`: Kafka's `leader.replication.throttled.replicas`
  and `follower.replication.throttled.replicas`, issue 24) are the only non-numeric keys: `*` or
  a comma-separated list of `partition:broker` (blanks around entries allowed, an empty value
  throttles nothing), checked as Kafka's ThrottledReplicaListValidator checks them and read with
  `throttled_replicas`. `resolve` leaves them out (it gives the numeric keys).
* Pure: no I/O, no clock; the values are plain frozen records.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from jbod_core.messages import INT32_MAX, INT64_MAX

MIN_INSYNC_REPLICAS: Final = "min.insync.replicas"
RETENTION_BYTES: Final = "retention.bytes"
RETENTION_MS: Final = "retention.ms"
SEGMENT_BYTES: Final = "segment.bytes"


@dataclass(frozen=True, slots=True)
class ConfigDefinition:
    """One topic config: Kafka's name, type and range; the broker setting that provides its default."""

    name: str
    type: Literal["int", "long"]
    low: int
    high: int
    broker_key: str  # the broker's server.properties key whose value is the default
    default: int  # that broker key's own default
    doc: str


DEFINITIONS: Final[tuple[ConfigDefinition, ...]] = (
    ConfigDefinition(
        name=MIN_INSYNC_REPLICAS,
        type="int",
        low=1,
        high=INT32_MAX,
        broker_key="min.insync.replicas",
        default=1,
        doc="Produce with acks=-1 is refused (19) while the ISR has fewer members. "
        "At most the topic's replication factor.",
    ),
    ConfigDefinition(
        name=RETENTION_BYTES,
        type="long",
        low=-1,
        high=INT64_MAX,
        broker_key="log.retention.bytes",
        default=-1,
        doc="Oldest segments of a partition's log are deleted while it is larger; -1: no size limit.",
    ),
    ConfigDefinition(
        name=RETENTION_MS,
        type="long",
        low=-1,
        high=INT64_MAX,
        broker_key="log.retention.ms",
        default=7 * 24 * 3600 * 1000,
        doc="Segments whose newest record is older are deleted; -1: no time limit.",
    ),
    ConfigDefinition(
        name=SEGMENT_BYTES,
        type="int",
        low=4096,
        high=INT32_MAX,
        broker_key="log.segment.bytes",
        default=64 * 1024 * 1024,
        doc="Size at which a partition's active log segment is rolled.",
    ),
)
BY_NAME: Final[Mapping[str, ConfigDefinition]] = {d.name: d for d in DEFINITIONS}

LEADER_THROTTLED_REPLICAS: Final = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED_REPLICAS: Final = "follower.replication.throttled.replicas"


@dataclass(frozen=True, slots=True)
class ListConfigDefinition:
    """A topic config whose value is a list (Kafka's type LIST); its default is the empty list."""

    name: str
    doc: str


LIST_DEFINITIONS: Final[tuple[ListConfigDefinition, ...]] = (
    ListConfigDefinition(
        name=LEADER_THROTTLED_REPLICAS,
        doc="Replicas whose leader side is throttled at the broker's leader.replication.throttled.rate "
        "while their follower is out of the ISR: `*` or `partition:broker,...`.",
    ),
    ListConfigDefinition(
        name=FOLLOWER_THROTTLED_REPLICAS,
        doc="Replicas whose follower side is throttled at the broker's follower.replication.throttled.rate "
        "while out of the ISR: `*` or `partition:broker,...`.",
    ),
)
LIST_BY_NAME: Final[Mapping[str, ListConfigDefinition]] = {d.name: d for d in LIST_DEFINITIONS}
KNOWN_KEYS: Final = frozenset(BY_NAME) | frozenset(LIST_BY_NAME)

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
            return ConfigProblem(key, value, f"{_shown(value)} {_THROTTLED_LIST_RULE}")
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


_INTEGER: Final = re.compile(r"-?[0-9]+")
_MAX_DIGITS: Final = 20  # more digits than any int64; checked before int() sees the text


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """A topic config that cannot be used: which key, which value, why."""

    key: str
    value: str
    reason: str

    @property
    def message(self) -> str:
        return f"{self.key}: {self.reason}"


@dataclass(frozen=True, slots=True)
class ResolvedConfigs:
    """What a broker uses for one topic: a value for every defined key, and what it had to ignore."""

    values: Mapping[str, int]
    problems: tuple[ConfigProblem, ...]

    def __getitem__(self, key: str) -> int:
        return self.values[key]


def _shown(value: str) -> str:
    return repr(value if len(value) <= 40 else value[:40] + "...")


def parse_value(definition: ConfigDefinition, value: str) -> int | ConfigProblem:
    """The value as an integer in the definition's range, or the problem with it."""
    if not _INTEGER.fullmatch(value):
        return ConfigProblem(definition.name, value, f"{_shown(value)} is not an integer")
    if len(value.lstrip("-")) > _MAX_DIGITS or not definition.low <= int(value) <= definition.high:
        return ConfigProblem(
            definition.name,
            value,
            f"{_shown(value)} is out of range [{definition.low}, {definition.high}]",
        )
    return int(value)


def create_error(configs: Mapping[str, str], *, replication_factor: int) -> ConfigProblem | None:
    """The first reason (by key) why a topic with these configs must not be created, or None."""
    for key in sorted(configs):
        problem = value_error(key, configs[key], replication_factor=replication_factor)
        if problem is not None:
            return problem
    return None


def unknown_key(key: str, value: str) -> ConfigProblem:
    return ConfigProblem(key, value, f"unknown topic config (known: {', '.join(sorted(KNOWN_KEYS))})")


def value_error(key: str, value: str, *, replication_factor: int) -> ConfigProblem | None:
    """Why a topic of `replication_factor` replicas must not have `key` set to `value`, or None:
    the one check of a topic create and of a config change."""
    if key in LIST_BY_NAME:
        return throttled_replicas_error(key, value)
    definition = BY_NAME.get(key)
    if definition is None:
        return unknown_key(key, value)
    parsed = parse_value(definition, value)
    if isinstance(parsed, ConfigProblem):
        return parsed
    if key == MIN_INSYNC_REPLICAS and parsed > replication_factor:
        return ConfigProblem(
            key,
            value,
            f"{parsed} is larger than the replication factor {replication_factor} "
            "(every acks=-1 produce would fail with NOT_ENOUGH_REPLICAS)",
        )
    return None


def resolve(configs: Mapping[str, str], defaults: Mapping[str, int]) -> ResolvedConfigs:
    """Every defined key's value for a broker: the topic's if usable, else `defaults[key]`."""
    values: dict[str, int] = {}
    problems: list[ConfigProblem] = []
    for definition in DEFINITIONS:
        default = defaults.get(definition.name, definition.default)
        text = configs.get(definition.name)
        if text is None:
            values[definition.name] = default
            continue
        parsed = parse_value(definition, text)
        if isinstance(parsed, ConfigProblem):
            problems.append(parsed)
            values[definition.name] = default
        else:
            values[definition.name] = parsed
    return ResolvedConfigs(values=values, problems=tuple(problems))
