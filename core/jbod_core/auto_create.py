"""Kafka's topic auto-creation: the broker keys `auto.create.topics.enable`, `num.partitions` and
`default.replication.factor`, and what each topic a Metadata request names gets.

The answer to a named topic, as Apache Kafka 4.3.1 gives it (its Metadata handler and
AutoTopicCreationManager, compared with a real broker). "Creation allowed" is
`auto.create.topics.enable` and the request's `allow_auto_topic_creation` (Metadata v0-v3 have no
such field: allowed); CREATE is the ACL on the cluster or on the topic. The first row that
applies decides:

| the topic                                        | creation allowed | answer                           | created |
|--------------------------------------------------|------------------|----------------------------------|---------|
| the principal may not DESCRIBE it                | either           | TOPIC_AUTHORIZATION_FAILED 29    | no      |
| exists                                           | either           | the topic                        | no      |
| missing, the principal may not CREATE it         | yes              | TOPIC_AUTHORIZATION_FAILED 29    | no      |
| missing, not a legal name (`topics.topic_name_error`) | either      | INVALID_TOPIC_EXCEPTION 17       | no      |
| missing                                          | no               | UNKNOWN_TOPIC_OR_PARTITION 3     | no      |
| missing, an internal name, or being created here | yes              | UNKNOWN_TOPIC_OR_PARTITION 3     | no      |
| missing                                          | yes              | UNKNOWN_TOPIC_OR_PARTITION 3     | yes     |

The client retries until the topic exists (Kafka answers 3, not LEADER_NOT_AVAILABLE, on the
request that starts the creation). A creation is a CreateTopics of the topic with `num.partitions`
partitions and `default.replication.factor` replicas, never capped: with fewer brokers the
controller refuses it (INVALID_REPLICATION_FACTOR) and the topic stays UNKNOWN_TOPIC_OR_PARTITION,
as on Kafka. Kafka's internal topics (`__consumer_offsets`, `__transaction_state`,
`__share_group_state`) are not created this way here: `__consumer_offsets` is created by the first
FindCoordinator with its own settings, and the others belong to features these brokers do not serve
(docs/decisions.md, "Topic auto-creation").

Guarantees:
* `answers` gives one `TopicAnswer` per distinct name, in the order first asked (Kafka answers a
  name asked twice once); `is_internal` is Kafka's `Topic.isInternal` of the name.
* `parse_setting` reads each key as Kafka does (a boolean is `true`/`false` in any case; an int
  is decimal) within the ranges `SETTINGS` documents, else `ValueError` naming the key.
* Pure: frozen values in and out, no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

from jbod_core.group_records import OFFSETS_TOPIC
from jbod_core.messages import MAX_PARTITIONS_PER_REQUEST, CreateTopicRequest
from jbod_core.topics import topic_name_error

AUTO_CREATE_TOPICS_ENABLE: Final = "auto.create.topics.enable"
NUM_PARTITIONS: Final = "num.partitions"
DEFAULT_REPLICATION_FACTOR: Final = "default.replication.factor"
TRANSACTION_STATE_TOPIC: Final = "__transaction_state"
SHARE_GROUP_STATE_TOPIC: Final = "__share_group_state"
INTERNAL_TOPICS: Final = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, SHARE_GROUP_STATE_TOPIC})
MAX_REPLICATION_FACTOR: Final = 2**15 - 1  # CreateTopics carries it as an int16
#: The first Metadata version with `allow_auto_topic_creation`; before it creation is always allowed.
FIRST_VERSION_WITH_ALLOW: Final = 4


@dataclass(frozen=True, slots=True)
class Setting:
    """One of the keys: Kafka's name, type and default, the range taken, and what it does. Each is
    static (read from server.properties at start; Kafka refuses to change it dynamically)."""

    name: str
    type: Literal["boolean", "int"]
    default: str  # Kafka's default, as DescribeConfigs shows it
    low: int
    high: int
    doc: str


SETTINGS: Final[tuple[Setting, ...]] = (
    Setting(
        name=AUTO_CREATE_TOPICS_ENABLE,
        type="boolean",
        default="true",
        low=0,
        high=1,
        doc="Whether a Metadata request that allows it creates the topics it names that do not exist.",
    ),
    Setting(
        name=NUM_PARTITIONS,
        type="int",
        default="1",
        low=1,
        high=MAX_PARTITIONS_PER_REQUEST,
        doc="Partitions of a topic created by a Metadata request, or by CreateTopics with -1 partitions.",
    ),
    Setting(
        name=DEFAULT_REPLICATION_FACTOR,
        type="int",
        default="1",
        low=1,
        high=MAX_REPLICATION_FACTOR,
        doc="Replication factor of a topic created by a Metadata request, or by CreateTopics with a "
        "replication factor of -1 (not capped: the creation fails with fewer active brokers).",
    ),
)
BY_NAME: Final[Mapping[str, Setting]] = {s.name: s for s in SETTINGS}


def parse_setting(name: str, value: str) -> bool | int:
    """`value` of the key `name` (one of `SETTINGS`), or `ValueError` whose message names the key."""
    setting = BY_NAME[name]
    text = value.strip()
    if setting.type == "boolean":
        if text.lower() not in ("true", "false"):
            raise ValueError(f"{name}: '{value}' is not true or false")
        return text.lower() == "true"
    try:
        number = int(text)
    except ValueError:
        raise ValueError(f"{name}: '{value}' is not an integer") from None
    if not setting.low <= number <= setting.high:
        raise ValueError(f"{name}: {number} is out of range [{setting.low}, {setting.high}]")
    return number


@dataclass(frozen=True, slots=True)
class AutoCreateSettings:
    """A broker's values of the keys (Kafka's defaults)."""

    enabled: bool = True
    num_partitions: int = 1
    replication_factor: int = 1

    def allows(self, *, version: int, allow_auto_topic_creation: bool) -> bool:
        """Whether a Metadata request of `version` may create topics on this broker."""
        return self.enabled and (version < FIRST_VERSION_WITH_ALLOW or allow_auto_topic_creation)

    def values(self) -> dict[str, str]:
        """Each key's value as DescribeConfigs shows it (`true`, `1`)."""
        return {
            AUTO_CREATE_TOPICS_ENABLE: "true" if self.enabled else "false",
            NUM_PARTITIONS: str(self.num_partitions),
            DEFAULT_REPLICATION_FACTOR: str(self.replication_factor),
        }

    def creation(self, name: str) -> CreateTopicRequest:
        """The CreateTopics a creation of `name` is: the broker's partitions and replicas."""
        return CreateTopicRequest(
            name=name, num_partitions=self.num_partitions, replication_factor=self.replication_factor
        )


class MetadataError(enum.IntEnum):
    """Kafka's error codes of a named topic in a Metadata response."""

    NONE = 0
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_TOPIC_EXCEPTION = 17
    TOPIC_AUTHORIZATION_FAILED = 29


@dataclass(frozen=True, slots=True)
class AskedTopic:
    """What the broker knows of one topic a Metadata request names. `may_create` (CREATE on the
    cluster or the topic) is only read for a topic that does not exist."""

    name: str
    exists: bool
    may_describe: bool
    may_create: bool
    being_created: bool  # a creation this broker started has not finished


@dataclass(frozen=True, slots=True)
class TopicAnswer:
    """A named topic's answer: NONE means "describe the topic"; `create` starts its creation."""

    name: str
    error: MetadataError
    is_internal: bool
    create: bool = False


def answer(asked: AskedTopic, *, creation_allowed: bool) -> TopicAnswer:
    """The first row of the module's table that applies to `asked`."""
    internal = asked.name in INTERNAL_TOPICS

    def refused(error: MetadataError) -> TopicAnswer:
        return TopicAnswer(asked.name, error, is_internal=internal)

    if not asked.may_describe:
        return TopicAnswer(asked.name, MetadataError.TOPIC_AUTHORIZATION_FAILED, is_internal=False)
    if asked.exists:
        return refused(MetadataError.NONE)
    if creation_allowed and not asked.may_create:
        return refused(MetadataError.TOPIC_AUTHORIZATION_FAILED)
    if topic_name_error(asked.name) is not None:
        return refused(MetadataError.INVALID_TOPIC_EXCEPTION)
    if not creation_allowed or internal or asked.being_created:
        return refused(MetadataError.UNKNOWN_TOPIC_OR_PARTITION)
    return TopicAnswer(asked.name, MetadataError.UNKNOWN_TOPIC_OR_PARTITION, is_internal=False, create=True)


def answers(asked: Iterable[AskedTopic], *, creation_allowed: bool) -> list[TopicAnswer]:
    """`answer` for each distinct name, in the order first asked."""
    seen: set[str] = set()
    out: list[TopicAnswer] = []
    for topic in asked:
        if topic.name in seen:
            continue
        seen.add(topic.name)
        out.append(answer(topic, creation_allowed=creation_allowed))
    return out
