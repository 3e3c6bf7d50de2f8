"""`JbodTopic`: what to do to a Kafka topic so that it matches its resource (pure: no I/O, no clock).

The resource is Strimzi's `KafkaTopic` shape: the label `jbod.dev/cluster` names the JbodCluster
of the same namespace; `spec: {topicName?, partitions, replicas, config}`. It is reconciled as
Strimzi's unidirectional topic operator does: from the resource to Kafka only; the resource is the
source of truth for the one topic it manages, and topics without a resource are never touched.

Guarantees:
* `parse_topic` accepts what the CRD describes (a config value may be a string, a number or a
  boolean: Kafka's text of it is kept) and refuses, with one line naming the field, what it
  cannot express (a topic name Kafka refuses, a partition count or replication factor out of
  range).
* `owner` names the resource that manages a topic when several name it: the oldest (creation
  time, then name), as Strimzi does; the others get `ResourceConflict` and change nothing.
* `decide` gives one `Plan` for a resource and the topic's state at the controller, checking in
  order: a `spec.topicName` changed after the topic was made (`NotSupported`), a conflict
  (`ResourceConflict`), a config key or value Kafka refuses (`InvalidConfig`, Kafka's message,
  `jbod_core.topic_configs`) — each of these changes nothing — then: an absent topic is created
  with the spec; else a replication factor change is refused (`NotSupported`: it needs a
  reassignment) and a lower partition count is refused (`NotSupported`: Kafka cannot remove
  partitions, so partitions added behind the operator's back are reported, never removed), while
  a higher count is made and the configs converge: every key the spec sets whose value differs is
  SET, every key the resource set before (`previous_keys`) and no longer sets is DELETEd (back to
  the broker's default). Keys the resource never set are left alone. Equal values are compared
  as Kafka reads them (`500` and ` 500` are the same `segment.ms`).
* `delete_action` decides what a deleted resource does to its topic: delete it only when the
  resource manages it (the `jbod.dev/managed` annotation is not `"false"`, it owns the topic, and
  the topic was made or adopted by it); else, or when its cluster is gone, release it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from jbod_core import topic_configs
from jbod_operator.model import SpecError

READY: Final = "Ready"
UNMANAGED: Final = "Unmanaged"
# Condition reasons (Strimzi's where it has one).
NOT_SUPPORTED: Final = "NotSupported"
RESOURCE_CONFLICT: Final = "ResourceConflict"
INVALID_CONFIG: Final = "InvalidConfig"
_TOPIC_NAME: Final = re.compile(r"[a-zA-Z0-9._-]{1,249}")


class TopicSpec(BaseModel):
    """A parsed `spec`: `config` values as Kafka's text (`true`, `7200000`)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")

    topic_name: str = Field(alias="topicName")
    partitions: int = Field(ge=1, le=1_000_000)
    replicas: int = Field(ge=1, le=32767)
    config: dict[str, str] = {}

    @field_validator("topic_name")
    @classmethod
    def _kafka_name(cls, value: str) -> str:
        if not _TOPIC_NAME.fullmatch(value) or value in (".", ".."):
            raise ValueError(
                f"'{value}' is not a Kafka topic name (ASCII letters, digits, '.', '_', '-'; at most 249)"
            )
        return value

    @field_validator("config", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        return {str(k): _kafka_text(v) for k, v in value.items()}


def _kafka_text(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return value


def parse_topic(name: str, spec: Mapping[str, Any]) -> TopicSpec:
    """The resource's spec, `topicName` defaulting to `metadata.name`; `SpecError` naming the field."""
    data = dict(spec)
    if not data.get("topicName"):
        data["topicName"] = name
    try:
        return TopicSpec.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "spec"
        message = str(error.get("ctx", {}).get("error") or error["msg"])
        raise SpecError(f"spec.{where}: {message}") from None


@dataclass(frozen=True)
class TopicState:
    """A topic as the controller describes it (`GET /v1/topics/{name}`)."""

    topic_id: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str] = field(default_factory=dict)  # the topic's own (not the brokers')


def state_of(described: Mapping[str, Any]) -> TopicState:
    """The controller's description as a `TopicState`. The replication factor is partition 0's
    (a reassignment's leaving replicas not counted)."""
    partitions = list(described.get("partitions") or [])
    first = partitions[0] if partitions else {}
    replicas = [r for r in first.get("replicas") or [] if r not in (first.get("removingReplicas") or [])]
    return TopicState(
        topic_id=str(described.get("topicId") or ""),
        partitions=len(partitions),
        replication_factor=len(replicas),
        configs={str(k): str(v) for k, v in (described.get("configs") or {}).items() if v is not None},
    )


@dataclass(frozen=True)
class Claim:
    """A JbodTopic naming a topic: its `metadata.name` and `creationTimestamp` (RFC 3339, UTC)."""

    name: str
    created: str


def owner(claims: Iterable[Claim]) -> str | None:
    """The resource that manages the topic: the oldest claim (ties: the smaller name)."""
    ordered = sorted(claims, key=lambda c: (c.created, c.name))
    return ordered[0].name if ordered else None


@dataclass(frozen=True)
class Refusal:
    reason: str
    message: str


@dataclass(frozen=True)
class Plan:
    """What to do: `create` the topic; raise it to `partitions`; SET `set_configs` and DELETE
    `reset_configs` (one IncrementalAlterConfigs); `refusals` say what will not be done and why."""

    create: bool = False
    partitions: int | None = None
    set_configs: Mapping[str, str] = field(default_factory=dict)
    reset_configs: tuple[str, ...] = ()
    refusals: tuple[Refusal, ...] = ()
    blocked: bool = False  # a refusal that stops every change

    @property
    def changes(self) -> bool:
        return self.create or self.partitions is not None or bool(self.set_configs or self.reset_configs)


def _same(key: str, a: str, b: str) -> bool:
    definition = topic_configs.BY_NAME.get(key)
    if definition is None:
        return a == b
    left, right = topic_configs.parse(definition, a), topic_configs.parse(definition, b)
    if isinstance(left, topic_configs.ConfigProblem) or isinstance(right, topic_configs.ConfigProblem):
        return a == b
    return left == right


def decide(  # noqa: PLR0913  the resource (spec, name, what it recorded), the claims and the topic
    spec: TopicSpec,
    state: TopicState | None,
    *,
    resource: str,
    owner_name: str | None,
    previous_keys: Iterable[str] = (),
    previous_topic_name: str | None = None,
) -> Plan:
    """The plan for resource `resource` (module docstring: the rows, in order)."""
    if previous_topic_name and previous_topic_name != spec.topic_name:
        return _blocked(
            NOT_SUPPORTED,
            f"Changing spec.topicName is not supported: this resource manages topic "
            f"{previous_topic_name}; set spec.topicName back, or make a new JbodTopic for {spec.topic_name}",
        )
    if owner_name is not None and owner_name != resource:
        return _blocked(
            RESOURCE_CONFLICT,
            f"Managed by another JbodTopic: {owner_name} also names topic {spec.topic_name} "
            "and is older; this resource changes nothing",
        )
    problem = topic_configs.create_error(spec.config, replication_factor=spec.replicas)
    if problem is not None:
        return _blocked(INVALID_CONFIG, problem.message)
    if state is None:
        return Plan(create=True)
    refusals: list[Refusal] = []
    if state.replication_factor != spec.replicas:
        refusals.append(
            Refusal(
                NOT_SUPPORTED,
                f"Changing the replication factor from {state.replication_factor} to {spec.replicas} "
                "is not supported: it needs a partition reassignment (kafka-reassign-partitions.sh); "
                "the topic keeps its replicas",
            )
        )
    partitions: int | None = None
    if spec.partitions < state.partitions:
        refusals.append(
            Refusal(
                NOT_SUPPORTED,
                f"Decreasing partitions is not supported: the topic has {state.partitions}, "
                f"spec.partitions is {spec.partitions}; Kafka cannot remove partitions",
            )
        )
    elif spec.partitions > state.partitions:
        partitions = spec.partitions
    set_configs = {
        key: value
        for key, value in sorted(spec.config.items())
        if key not in state.configs or not _same(key, state.configs[key], value)
    }
    reset = tuple(sorted(k for k in set(previous_keys) - set(spec.config) if k in state.configs))
    return Plan(partitions=partitions, set_configs=set_configs, reset_configs=reset, refusals=tuple(refusals))


def _blocked(reason: str, message: str) -> Plan:
    return Plan(refusals=(Refusal(reason, message),), blocked=True)


DeleteAction = Literal["delete", "release"]


def delete_action(*, managed: bool, owns: bool, made: bool, cluster_present: bool) -> DeleteAction:
    """`delete` the topic with the resource, or `release` it (leave it as it is)."""
    return "delete" if managed and owns and made and cluster_present else "release"
